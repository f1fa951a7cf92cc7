"""Lance fields <-> pyarrow.Schema, checked against what pylance 14.0.2 writes."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

from txn_engine._proto import file_pb2
from txn_engine.errors import FormatError, InvalidOperationError
from txn_engine.format.io import read_manifest
from txn_engine.format.schema import (
    arrow_to_fields,
    assign_new_field_ids,
    fields_to_arrow,
    max_field_id,
)
from txn_engine.storage import open_storage

WIDE = pa.schema(
    [
        pa.field("i8", pa.int8()),
        pa.field("i64", pa.int64(), nullable=False),
        pa.field("u64", pa.uint64()),
        pa.field("f16", pa.float16()),
        pa.field("f64", pa.float64()),
        pa.field("b", pa.bool_()),
        pa.field("s", pa.string(), metadata={"k": "v"}),
        pa.field("ls", pa.large_string()),
        pa.field("bin", pa.binary()),
        pa.field("fsb", pa.binary(16)),
        pa.field("d32", pa.date32()),
        pa.field("d64", pa.date64()),
        pa.field("t32", pa.time32("ms")),
        pa.field("t64", pa.time64("ns")),
        pa.field("ts", pa.timestamp("us")),
        pa.field("tstz", pa.timestamp("s", tz="America/New_York")),
        pa.field("dur", pa.duration("ms")),
        pa.field("dec", pa.decimal128(10, 2)),
        pa.field("dec256", pa.decimal256(40, 5)),
        pa.field("st", pa.struct([("x", pa.int32()), ("y", pa.struct([("z", pa.string())]))])),
        pa.field("l", pa.list_(pa.int64())),
        pa.field("ll", pa.large_list(pa.float32())),
        pa.field("fsl", pa.list_(pa.float32(), 4)),
        pa.field("lst", pa.list_(pa.struct([("q", pa.int8())]))),
        pa.field("dict", pa.dictionary(pa.int32(), pa.string())),
        pa.field("m", pa.map_(pa.string(), pa.int32())),
        pa.field("nul", pa.null()),
    ],
    metadata={"sm": "sv"},
)


@pytest.fixture(scope="module")
def pylance_fields(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[list[file_pb2.Field], dict[str, bytes], pa.Schema]:
    path = Path(tmp_path_factory.mktemp("wide")) / "ds"
    lance.write_dataset(pa.Table.from_pylist([], schema=WIDE), str(path))
    _, mf = read_manifest(open_storage(str(path)))
    return (
        list(mf.manifest.fields),
        dict(mf.manifest.schema_metadata),
        lance.dataset(str(path)).schema,
    )


def test_arrow_to_fields_equals_what_pylance_writes(pylance_fields) -> None:  # type: ignore[no-untyped-def]
    theirs, _, _ = pylance_fields
    mine = arrow_to_fields(WIDE)
    assert len(mine) == len(theirs)
    for a, b in zip(mine, theirs, strict=True):
        assert a == b, (a, b)


def test_fields_to_arrow_equals_pylance_schema(pylance_fields) -> None:  # type: ignore[no-untyped-def]
    fields, metadata, schema = pylance_fields
    assert fields_to_arrow(fields, metadata).equals(schema, check_metadata=True)
    assert fields_to_arrow(fields, metadata).equals(WIDE, check_metadata=True)


def test_ids_are_preorder_from_first_id() -> None:
    fields = arrow_to_fields(
        pa.schema([("a", pa.struct([("b", pa.int8())])), ("c", pa.int8())]), first_id=5
    )
    assert [(f.name, f.id, f.parent_id) for f in fields] == [
        ("a", 5, -1),
        ("b", 6, 5),
        ("c", 7, -1),
    ]


def test_unknown_logical_type_is_a_format_error() -> None:
    bad = [file_pb2.Field(id=0, parent_id=-1, name="x", logical_type="quaternion")]
    with pytest.raises(FormatError, match="quaternion"):
        fields_to_arrow(bad)


def test_child_before_parent_is_a_format_error() -> None:
    bad = [file_pb2.Field(id=1, parent_id=0, name="x", logical_type="int8")]
    with pytest.raises(FormatError, match="before its parent"):
        fields_to_arrow(bad)


def test_unsupported_arrow_type_names_the_field() -> None:
    with pytest.raises(InvalidOperationError, match="'u'"):
        arrow_to_fields(pa.schema([("u", pa.dense_union([pa.field("a", pa.int8())]))]))


def test_new_columns_get_fresh_ids_and_old_ones_keep_theirs() -> None:
    old = arrow_to_fields(pa.schema([("a", pa.int8()), ("b", pa.int8())]))
    new = assign_new_field_ids(
        old, pa.schema([("a", pa.int8()), ("c", pa.int8()), ("b", pa.int8())]), first_new_id=7
    )
    assert [(f.name, f.id) for f in new] == [("a", 0), ("c", 7), ("b", 1)]


def test_max_field_id_counts_data_file_fields() -> None:
    from txn_engine._proto import table_pb2

    m = table_pb2.Manifest(fields=arrow_to_fields(pa.schema([("a", pa.int8())])))
    m.fragments.add(id=0).files.add(path="x.lance", fields=[0, 9])
    assert max_field_id(m) == 9
