"""Properties of Lance fields <-> pyarrow.Schema, with pylance 14.0.2 as the oracle.

* arrow -> fields -> arrow is the identity for types pylance keeps exactly;
* ids are unique, numbered from ``first_id`` and in depth-first pre-order;
* for every generated schema, including the types pylance changes on write, the fields
  equal the ones pylance writes into its manifest, and reading them back gives what
  ``lance.dataset(uri).schema`` gives;
* new-column ids and projections keep existing ids.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence

import lance
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from txn_engine._proto import file_pb2
from txn_engine.format.io import read_manifest
from txn_engine.format.schema import (
    arrow_to_fields,
    assign_new_field_ids,
    fields_to_arrow,
    max_field_id,
    project_fields,
    through_c_data_interface,
)
from txn_engine.storage import open_storage
from txn_engine.testing.schemas import primitive_types

_PRIMITIVES = [
    pa.null(),
    *primitive_types(),
    pa.time32("s"),
    pa.time32("ms"),
    pa.time64("us"),
    pa.time64("ns"),
    pa.duration("s"),
    pa.duration("ns"),
    pa.decimal128(1, 0),
    pa.decimal128(38, -3),
    pa.decimal256(76, 10),
    pa.uuid(),
    pa.bool8(),
    pa.json_(),
]
_UNITS = st.sampled_from(["s", "ms", "us", "ns"])
_TZ = st.sampled_from([None, "UTC", "+05:30", "America/New_York"])
_timestamps = st.builds(pa.timestamp, _UNITS, _TZ)
_index_types = st.sampled_from([pa.int8(), pa.uint8(), pa.int16(), pa.int32(), pa.uint64()])
_dict_values = st.sampled_from([pa.string(), pa.large_string(), pa.int64(), pa.float16()])
_dictionaries = st.builds(pa.dictionary, _index_types, _dict_values)
_scalars = st.one_of(st.sampled_from(_PRIMITIVES), _timestamps, _dictionaries)
_fixed_items = st.one_of(
    st.sampled_from([pa.float32(), pa.float16(), pa.int8(), pa.bool_(), pa.string()]),
    st.builds(pa.list_, st.sampled_from([pa.float32(), pa.uint8()]), st.integers(1, 4)),
    _dictionaries,
)
_fixed_lists = st.builds(pa.list_, _fixed_items, st.integers(1, 1024))
_tensors = st.builds(
    pa.fixed_shape_tensor,
    st.sampled_from([pa.float32(), pa.int8()]),
    st.lists(st.integers(1, 3), min_size=1, max_size=3),
)
_leaves = st.one_of(_scalars, _fixed_lists, _tensors)

_names = st.text(alphabet="abcxyz_.", max_size=4)  # nested names may hold dots, be empty
_top_names = st.text(alphabet="abcdefgh_", min_size=1, max_size=5)
_metadata = st.one_of(
    st.none(),
    st.dictionaries(
        st.text(alphabet="kmn:_", min_size=1, max_size=4),
        st.text(alphabet="vw ", max_size=3),
        min_size=1,
        max_size=2,
    ),
)


def _field(
    name: str, dtype: pa.DataType, nullable: bool, metadata: dict[str, str] | None
) -> pa.Field:
    # Arrow has no non-nullable null type
    return pa.field(name, dtype, nullable or dtype == pa.null(), metadata)


def _fields(
    types: st.SearchStrategy[pa.DataType], names: st.SearchStrategy[str]
) -> st.SearchStrategy[pa.Field]:
    return st.builds(_field, names, types, st.booleans(), _metadata)


def _types(depth: int, leaves: st.SearchStrategy[pa.DataType]) -> st.SearchStrategy[pa.DataType]:
    if depth == 0:
        return leaves
    inner = _types(depth - 1, leaves)
    members = st.lists(_fields(inner, _names), max_size=3)
    structs = members.map(pa.struct)
    return st.one_of(
        leaves,
        structs,
        st.builds(pa.list_, _fields(inner, _names)),
        st.builds(pa.large_list, _fields(inner, _names)),
        st.builds(
            pa.map_,
            st.builds(pa.field, _names, st.sampled_from([pa.string(), pa.int32()]), st.just(False)),
            _fields(inner, _names),
        ),
        # a fixed-size list of structs keeps its item field (the only nesting allowed in it)
        st.builds(pa.list_, _fields(structs, _names), st.integers(1, 8)),
    )


def _columns(
    types: st.SearchStrategy[pa.DataType], *, min_size: int, max_size: int, prefix: str = ""
) -> st.SearchStrategy[list[pa.Field]]:
    # unique names drawn first: a unique_by filter on the fields would make Hypothesis
    # build (huge) reprs of the nested type strategies
    names = st.lists(_top_names, min_size=min_size, max_size=max_size, unique=True)
    return names.flatmap(
        lambda ns: st.tuples(*(_fields(types, st.just(prefix + n)) for n in ns)).map(list)
    )


def _schemas(leaves: st.SearchStrategy[pa.DataType]) -> st.SearchStrategy[pa.Schema]:
    columns = _columns(_types(3, leaves), min_size=1, max_size=5)
    schema_metadata = st.one_of(st.none(), st.dictionaries(_top_names, _top_names, max_size=2))
    return st.builds(pa.schema, columns, schema_metadata)


exact_schemas = _schemas(_leaves)

# types pylance changes when it writes them: views become plain, `ordered` is dropped,
# JSON over large_string comes back over string, fixed-size list items lose their name,
# nullability and metadata
_lossy_leaves = st.one_of(
    _leaves,
    st.sampled_from([pa.string_view(), pa.binary_view(), pa.json_(pa.large_string())]),
    st.builds(pa.dictionary, _index_types, _dict_values, st.just(True)),
    st.builds(
        pa.list_,
        st.builds(
            pa.field, _names, st.sampled_from([pa.int8(), pa.float32()]), st.booleans(), _metadata
        ),
        st.integers(1, 4),
    ),
)
any_schemas = _schemas(_lossy_leaves)


def _assert_preorder(fields: Sequence[file_pb2.Field], first_id: int) -> None:
    assert [f.id for f in fields] == list(range(first_id, first_id + len(fields)))
    stack: list[int] = []
    for f in fields:
        # depth-first pre-order: a field's parent is on the path from the root to it
        while stack and stack[-1] != f.parent_id:
            stack.pop()
        assert f.parent_id == (stack[-1] if stack else -1), f
        stack.append(f.id)


@given(exact_schemas, st.integers(0, 1000))
def test_roundtrip_is_exact(schema: pa.Schema, first_id: int) -> None:
    fields = arrow_to_fields(schema, first_id=first_id)
    _assert_preorder(fields, first_id)
    assert {f.type for f in fields} <= {file_pb2.Field.PARENT}
    back = fields_to_arrow(fields, schema.metadata)
    assert back.equals(through_c_data_interface(schema), check_metadata=True), (back, schema)


@given(any_schemas)
def test_one_trip_reaches_a_fixed_point(schema: pa.Schema) -> None:
    # what pylance changes on write and read (see any_schemas) changes once, then holds
    once = fields_to_arrow(arrow_to_fields(schema), schema.metadata)
    fields = arrow_to_fields(once)
    assert arrow_to_fields(fields_to_arrow(fields)) == fields
    assert fields_to_arrow(fields, once.metadata).equals(once, check_metadata=True)


@settings(max_examples=40)
@given(any_schemas)
def test_pylance_writes_the_same_fields_and_reads_the_same_schema(schema: pa.Schema) -> None:
    path = tempfile.mkdtemp(prefix="schema-prop-")
    lance.write_dataset(pa.RecordBatchReader.from_batches(schema, []), path)
    manifest = read_manifest(open_storage(path))[1].manifest
    mine = arrow_to_fields(schema)
    assert [f.SerializeToString(deterministic=True) for f in mine] == [
        f.SerializeToString(deterministic=True) for f in manifest.fields
    ]
    back = fields_to_arrow(list(manifest.fields), dict(manifest.schema_metadata))
    assert back.equals(lance.dataset(path).schema, check_metadata=True)


@given(exact_schemas, st.data())
def test_new_columns_keep_old_ids_and_never_reuse_any(
    schema: pa.Schema, data: st.DataObject
) -> None:
    existing = arrow_to_fields(schema)
    dropped_high_water = data.draw(st.integers(-1, 50), label="data file id")
    extra = data.draw(_columns(_types(2, _leaves), min_size=0, max_size=3, prefix="new_"))
    grown = pa.schema([*schema, *extra])
    fields = assign_new_field_ids(existing, grown, data_files_fields=[[dropped_high_water]])
    assert fields[: len(existing)] == existing
    start = max(max_field_id(existing), dropped_high_water) + 1
    assert [f.id for f in fields[len(existing) :]] == list(
        range(start, start + len(fields) - len(existing))
    )
    assert fields_to_arrow(fields).equals(through_c_data_interface(grown), check_metadata=True)


@given(exact_schemas, st.data())
def test_projection_keeps_ids(schema: pa.Schema, data: st.DataObject) -> None:
    fields = arrow_to_fields(schema)
    kept = data.draw(st.lists(st.sampled_from(schema.names), unique=True), label="kept")
    projected = project_fields(fields, kept)
    by_id = {f.id: f for f in fields}
    assert all(by_id[f.id] == f for f in projected)
    expected = pa.schema([f for f in schema if f.name in kept])
    assert fields_to_arrow(projected).equals(
        through_c_data_interface(expected), check_metadata=True
    )
