"""Deep and hostile schemas: a documented depth limit, typed errors, no recursion.

Before the limit, a 5,000-level struct raised RecursionError from ``Dataset.schema`` and
``arrow_to_fields`` (and a 40,000-level one took gigabytes in ``writers.overwrite``).
"""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pyarrow as pa
import pytest

from txn_engine import writers
from txn_engine._proto import file_pb2
from txn_engine.commit import commit
from txn_engine.dataset import Dataset
from txn_engine.errors import FormatError, InvalidOperationError, LimitExceededError
from txn_engine.format.schema import (
    MAX_SCHEMA_DEPTH,
    arrow_to_fields,
    assign_new_field_ids,
    field_paths,
    fields_to_arrow,
    project_fields,
)
from txn_engine.model import LanceField
from txn_engine.ops import Append, Merge, Operation, Overwrite, Project
from txn_engine.storage import MemoryStorage
from txn_engine.testing.model import SyntheticRows
from txn_engine.transaction import Transaction
from txn_engine.verify import verify


def _deep_arrow(levels: int, leaf: pa.DataType | None = None) -> pa.Schema:
    """One top-level column nested ``levels`` levels deep (structs down to an int32)."""
    dtype = pa.int32() if leaf is None else leaf
    for _ in range(levels - 1):
        dtype = pa.struct([pa.field("a", dtype)])
    return pa.schema([pa.field("c", dtype), pa.field("x", pa.int64())])


def _deep_fields(levels: int) -> list[file_pb2.Field]:
    """A Lance field chain ``levels`` levels deep, then a flat column."""
    out = [
        file_pb2.Field(
            id=i,
            parent_id=i - 1,
            name="a",
            logical_type="struct" if i < levels - 1 else "int32",
            nullable=True,
        )
        for i in range(levels)
    ]
    out.append(file_pb2.Field(id=levels, parent_id=-1, name="x", logical_type="int64"))
    return out


def _assert_depth_error(exc: pytest.ExceptionInfo[LimitExceededError]) -> None:
    assert exc.value.limit == "schema depth"
    assert str(MAX_SCHEMA_DEPTH) in str(exc.value)


def test_the_limit_is_documented_and_well_above_what_pyarrow_imports() -> None:
    # pyarrow's C data interface (how pylance hands schemas to Python) stops at 64
    assert MAX_SCHEMA_DEPTH >= 64
    import txn_engine.format.schema as schema_module

    assert "MAX_SCHEMA_DEPTH" in (schema_module.__doc__ or "")


@pytest.mark.parametrize("levels", [MAX_SCHEMA_DEPTH + 1, 5_000, 100_000])
def test_fields_to_arrow_refuses_deep_schemas_with_a_typed_error(levels: int) -> None:
    fields = _deep_fields(levels)
    started = time.perf_counter()
    with pytest.raises(LimitExceededError) as exc:
        fields_to_arrow(fields)
    _assert_depth_error(exc)
    assert time.perf_counter() - started < 5


@pytest.mark.parametrize("levels", [MAX_SCHEMA_DEPTH + 1, 5_000])
def test_arrow_to_fields_refuses_deep_schemas_with_a_typed_error(levels: int) -> None:
    with pytest.raises(LimitExceededError) as exc:
        arrow_to_fields(_deep_arrow(levels))
    _assert_depth_error(exc)


def test_the_deepest_allowed_schema_round_trips_both_ways() -> None:
    schema = _deep_arrow(MAX_SCHEMA_DEPTH)
    fields = arrow_to_fields(schema)
    assert len(fields) == MAX_SCHEMA_DEPTH + 1
    assert fields[MAX_SCHEMA_DEPTH - 1].parent_id == MAX_SCHEMA_DEPTH - 2
    back = fields_to_arrow(fields)
    assert back.names == ["c", "x"]
    assert back.field("c").type.equals(schema.field("c").type)
    assert arrow_to_fields(back) == fields
    assert field_paths(fields)[("c",) + ("a",) * (MAX_SCHEMA_DEPTH - 1)] == MAX_SCHEMA_DEPTH - 1


def test_deep_fixed_size_lists_count_towards_the_limit_both_ways() -> None:
    inner = pa.int32()
    for _ in range(MAX_SCHEMA_DEPTH):  # the items are levels too
        inner = pa.list_(inner, 2)
    with pytest.raises(LimitExceededError):
        arrow_to_fields(pa.schema([pa.field("v", inner)]))
    # a hostile logical type string nesting fixed-size lists 100,000 times
    logical = "fixed_size_list:" * 100_000 + "int32" + ":2" * 100_000
    with pytest.raises(LimitExceededError) as exc:
        fields_to_arrow([file_pb2.Field(id=0, parent_id=-1, name="v", logical_type=logical)])
    _assert_depth_error(exc)
    # one level below the limit converts, and the same schema comes back
    ok = pa.int32()
    for _ in range(MAX_SCHEMA_DEPTH - 1):
        ok = pa.list_(ok, 2)
    fields = arrow_to_fields(pa.schema([pa.field("v", ok)]))
    assert fields_to_arrow(fields).field("v").type.equals(ok)


def test_blob_columns_count_their_struct_level() -> None:
    blob = pa.field("b", pa.large_binary(), metadata={"lance-encoding:blob": "true"})
    dtype = pa.struct([blob])
    for _ in range(MAX_SCHEMA_DEPTH - 2):
        dtype = pa.struct([pa.field("s", dtype)])
    schema = pa.schema([pa.field("c", dtype)])  # blob at the limit: its {data, uri} below
    with pytest.raises(LimitExceededError):
        arrow_to_fields(schema)
    fields = arrow_to_fields(schema, data_storage_version="2.1")  # kept as written
    assert fields_to_arrow(fields).names == ["c"]


def test_field_paths_and_field_id_helpers_refuse_deep_schemas() -> None:
    fields = _deep_fields(50_000)
    for call in (
        lambda: field_paths(fields),
        lambda: project_fields(fields, ["x"]),
        lambda: assign_new_field_ids(fields, pa.schema([pa.field("x", pa.int64())])),
    ):
        with pytest.raises(LimitExceededError) as exc:
            call()
        _assert_depth_error(exc)


def test_conversion_memory_is_linear_in_the_number_of_fields() -> None:
    """A wide schema of chains at the limit: peak Python memory per field stays flat."""

    def peak(chains: int) -> int:
        fields: list[file_pb2.Field] = []
        for c in range(chains):
            base = len(fields)
            for i in range(MAX_SCHEMA_DEPTH):
                fields.append(
                    file_pb2.Field(
                        id=base + i,
                        parent_id=-1 if i == 0 else base + i - 1,
                        name=f"c{c}" if i == 0 else "a",
                        logical_type="struct" if i < MAX_SCHEMA_DEPTH - 1 else "int32",
                    )
                )
        tracemalloc.start()
        try:
            fields_to_arrow(fields)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    small, large = peak(2), peak(16)
    assert large < small * 8 * 1.5 + 1_000_000


def test_dataset_with_a_deep_schema_opens_counts_and_logs(tmp_path: Path) -> None:
    """Only the Arrow conversion is refused: everything else works on such a dataset."""
    uri = str(tmp_path / "deep.lance")
    fields = tuple(LanceField.from_proto(f) for f in _deep_fields(5_000))
    writers.overwrite(uri, [], fields)
    ds = Dataset.open(uri)
    assert ds.count_rows() == 0
    assert [v.operation for v in ds.versions()] == ["Overwrite"]
    assert len(ds.manifest_pb.fields) == 5_001
    with pytest.raises(LimitExceededError) as exc:
        _ = ds.schema
    _assert_depth_error(exc)
    # commits and the invariant checker do not need the Arrow schema
    rows = SyntheticRows()
    landed = commit(uri, Transaction(1, Append((rows.fragment([(1, 0), (2, 0)]),))))
    assert landed.version == 2
    assert Dataset.open(uri).count_rows() == 2
    assert verify(uri).ok


def test_overwrite_with_a_40000_level_arrow_schema_is_refused_fast(tmp_path: Path) -> None:
    schema = _deep_arrow(40_000)
    started = time.perf_counter()
    with pytest.raises(LimitExceededError):
        writers.overwrite(str(tmp_path / "t.lance"), [], schema)
    assert time.perf_counter() - started < 5
    assert not (tmp_path / "t.lance" / "_versions").exists()


@pytest.mark.parametrize(
    "logical",
    [
        "fixed_size_binary:1099511627776",  # pyarrow: OverflowError escaped
        "fixed_size_binary:-5",  # pyarrow made fixed_size_binary[-5]
        "fixed_size_binary:\u0663",  # int() reads ARABIC-INDIC DIGIT THREE
        "fixed_size_list:int8:1099511627776",
        "decimal:128:5:99999999999999999999",  # OverflowError from pyarrow's C long
    ],
)
def test_hostile_sizes_in_a_logical_type_are_format_errors(logical: str) -> None:
    with pytest.raises(FormatError, match="logical type"):
        fields_to_arrow([LanceField(0, -1, "a", logical)])


def test_fixed_sizes_pylance_writes_still_read() -> None:
    schema = fields_to_arrow(
        [
            LanceField(0, -1, "a", "fixed_size_binary:0"),  # pylance 14 writes binary(0)
            LanceField(1, -1, "b", "fixed_size_binary:16"),
            LanceField(2, -1, "c", "fixed_size_list:float:128"),
        ]
    )
    assert schema.field("a").type == pa.binary(0)
    assert schema.field("b").type == pa.binary(16)
    assert schema.field("c").type == pa.list_(pa.field("item", pa.float32()), 128)


# ---- schemas a commit would make unreadable ------------------------------------------------


def _one_column() -> MemoryStorage:
    store = MemoryStorage()
    commit(store, Transaction(0, Overwrite([], (LanceField(0, -1, "id", "int64"),))))
    return store


@pytest.mark.parametrize(
    "op",
    [
        Project((LanceField(0, -1, "id", "nonsense_type"),)),  # pylance 14 panics reading it
        Project((LanceField(0, -1, "id\x00", "int64"),)),  # pylance 14 aborts the process
        Project(()),  # pylance: "Cannot drop all columns"; its scans then fail
        Project((LanceField(0, -1, "\ud800", "int64"),)),  # pyarrow's UnicodeEncodeError escaped
        Overwrite([], (LanceField(0, -1, "a\x00b", "int64"),)),
        Overwrite([], (LanceField(0, -1, "id", "fixed_size_binary:-5"),)),
        Merge([], (LanceField(0, -1, "id", "int64"), LanceField(1, -1, "x", "no_such"))),
    ],
)
def test_a_schema_no_reader_could_use_is_refused(op: Operation) -> None:
    """These were committed; our Dataset.schema then raised FormatError and pylance 14
    panicked or aborted (measured). Refused now, and nothing is written."""
    store = _one_column()
    with pytest.raises(InvalidOperationError):
        commit(store, Transaction(1, op))
    assert [v.version for v in Dataset.open(store).versions()] == [1]
    assert Dataset.open(store).schema.names == ["id"]


def test_a_schema_already_beyond_this_library_is_not_judged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A table written by a newer Lance (a logical type unknown here) still takes commits
    that keep its schema: only a commit that makes a readable schema unreadable is refused."""
    from txn_engine.builder import _common

    store = MemoryStorage()
    newer = (LanceField(0, -1, "id", "int64"), LanceField(1, -1, "v", "type_of_lance_99"))
    with monkeypatch.context() as m:  # as a newer Lance would have written it
        m.setattr(_common, "fields_to_arrow", lambda fields: None)
        commit(store, Transaction(0, Overwrite([], newer)))
    assert commit(store, Transaction(1, Project(newer))).version == 2
    with pytest.raises(FormatError):
        _ = Dataset.open(store).schema
