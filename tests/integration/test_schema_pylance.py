"""Lance fields <-> pyarrow.Schema, checked against what pylance 14.0.2 writes and reads."""

from __future__ import annotations

import tempfile
from pathlib import Path

import lance
import lance.arrow
import pyarrow as pa
import pytest

from txn_engine._proto import file_pb2, table_pb2
from txn_engine.errors import FormatError, InvalidOperationError
from txn_engine.format.io import read_manifest
from txn_engine.format.schema import (
    arrow_to_fields,
    arrow_to_lance_fields,
    arrow_to_schema_metadata,
    assign_new_field_ids,
    field_paths,
    fields_to_arrow,
    logical_type_of,
    max_field_id,
    project_fields,
)
from txn_engine.model import LanceField
from txn_engine.storage import open_storage

F = pa.field
PK = "lance-schema:unenforced-primary-key"
BLOB = "lance-encoding:blob"
EXT = "ARROW:extension:name"
EXT_META = "ARROW:extension:metadata"

WIDE = pa.schema(
    [
        F("i8", pa.int8()),
        F("u8", pa.uint8()),
        F("i16", pa.int16()),
        F("u16", pa.uint16()),
        F("i32", pa.int32()),
        F("u32", pa.uint32()),
        F("i64", pa.int64(), nullable=False),
        F("u64", pa.uint64()),
        F("f16", pa.float16()),
        F("f32", pa.float32()),
        F("f64", pa.float64()),
        F("b", pa.bool_()),
        F("s", pa.string(), metadata={"k": "v", "empty": ""}),
        F("ls", pa.large_string()),
        F("bin", pa.binary()),
        F("lbin", pa.large_binary()),
        F("fsb", pa.binary(16)),
        F("d32", pa.date32()),
        F("d64", pa.date64()),
        F("t32s", pa.time32("s")),
        F("t32ms", pa.time32("ms")),
        F("t64us", pa.time64("us")),
        F("t64ns", pa.time64("ns")),
        F("ts_s", pa.timestamp("s")),
        F("ts_ms", pa.timestamp("ms", tz="+05:30")),
        F("ts_us", pa.timestamp("us", tz="UTC")),
        F("ts_ns", pa.timestamp("ns", tz="America/New_York")),
        F("dur_s", pa.duration("s")),
        F("dur_ms", pa.duration("ms")),
        F("dur_us", pa.duration("us")),
        F("dur_ns", pa.duration("ns")),
        F("dec", pa.decimal128(10, 2)),
        F("dec_neg", pa.decimal128(38, -2)),
        F("dec256", pa.decimal256(40, 5)),
        F("st", pa.struct([("x", pa.int32()), ("y", pa.struct([F("z", pa.string(), False)]))])),
        F("empty_st", pa.struct([])),
        F("l", pa.list_(pa.int64())),
        F("l_named", pa.list_(F("element", pa.int8(), nullable=False, metadata={"m": "1"}))),
        F("ll", pa.large_list(pa.float32())),
        F("lst", pa.list_(pa.struct([("q", pa.int8())]))),
        F("llst", pa.large_list(pa.struct([("q", pa.int8())]))),
        F("ll_l", pa.list_(pa.list_(pa.int32()))),
        F("fsl", pa.list_(pa.float32(), 4)),
        F("fsl_f16", pa.list_(pa.float16(), 2)),
        F("fsl_bool", pa.list_(pa.bool_(), 3)),
        F("fsl_fsb", pa.list_(pa.binary(4), 3)),
        F("fsl_fsl", pa.list_(pa.list_(pa.float32(), 2), 3)),
        F("fsl_str", pa.list_(pa.string(), 2)),
        F("fsl_null", pa.list_(pa.null(), 2)),
        F("fsl_dict", pa.list_(pa.dictionary(pa.int8(), pa.string()), 2)),
        F("fsl_st", pa.list_(F("it", pa.struct([("a", pa.list_(pa.int8()))]), False), 2)),
        F("fsl_bf16", pa.list_(lance.arrow.BFloat16Type(), 8)),
        F("dict", pa.dictionary(pa.int32(), pa.string())),
        F("dict_u16", pa.dictionary(pa.uint16(), pa.large_string())),
        F("dict_i64", pa.dictionary(pa.int8(), pa.int64())),
        F("l_dict", pa.list_(pa.dictionary(pa.int32(), pa.string()))),
        F("m", pa.map_(pa.string(), pa.int32())),
        F("m_named", pa.map_(F("k", pa.int32(), False), F("v", pa.int8(), False, {"q": "r"}))),
        F("m_st", pa.map_(pa.int32(), pa.struct([("a", pa.int8())]))),
        F("l_m", pa.list_(pa.map_(pa.string(), pa.int8()))),
        F("nul", pa.null()),
        F("uuid", pa.uuid()),
        F("bool8", pa.bool8()),
        F("opaque", pa.opaque(pa.binary(), "tn", "vn")),
        F("tensor", pa.fixed_shape_tensor(pa.float32(), [2, 2], dim_names=["r", "c"])),
        F("bf16", lance.arrow.BFloat16Type()),
        F("l_uuid", pa.list_(pa.uuid())),
        F("json", pa.json_(), metadata={"x": "y"}),
        F("st_json", pa.struct([("j", pa.json_())])),
        F("meta_ext", pa.binary(), metadata={EXT: "foo.bar", EXT_META: "zz"}),
        F("", pa.int8()),
        F("st_dup", pa.struct([("a", pa.int8()), ("a", pa.int16()), ("a.b", pa.int8())])),
    ],
    metadata={"sm": "sv", "empty": ""},
)


def _empty(schema: pa.Schema) -> pa.RecordBatchReader:
    return pa.RecordBatchReader.from_batches(schema, [])


def _pylance_write(schema: pa.Schema, **kwargs: object) -> tuple[table_pb2.Manifest, pa.Schema]:
    """Write an empty dataset with pylance; its manifest and the schema pylance reads."""
    path = tempfile.mkdtemp(prefix="schema-")
    lance.write_dataset(_empty(schema), path, **kwargs)  # type: ignore[arg-type]
    _, mf = read_manifest(open_storage(path))
    return mf.manifest, lance.dataset(path).schema


@pytest.fixture(scope="module")
def wide() -> tuple[table_pb2.Manifest, pa.Schema]:
    return _pylance_write(WIDE)


def _assert_same_fields(mine: list[file_pb2.Field], theirs: list[file_pb2.Field]) -> None:
    assert [f.name for f in mine] == [f.name for f in theirs]
    for a, b in zip(mine, theirs, strict=True):
        assert a == b, (a, b)
        # equal serialized bytes: no field differs, including ones our proto does not know
        assert a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True), (
            a,
            b,
        )


def test_wide_schema_fields_equal_what_pylance_writes(
    wide: tuple[table_pb2.Manifest, pa.Schema],
) -> None:
    manifest, _ = wide
    _assert_same_fields(arrow_to_fields(WIDE), list(manifest.fields))


def test_wide_schema_reads_back_as_pylance_reads_it(
    wide: tuple[table_pb2.Manifest, pa.Schema],
) -> None:
    manifest, pylance_schema = wide
    mine = fields_to_arrow(list(manifest.fields), dict(manifest.schema_metadata))
    assert mine.equals(pylance_schema, check_metadata=True)
    assert mine.metadata == {b"sm": b"sv", b"empty": b""}
    assert arrow_to_schema_metadata(WIDE) == dict(manifest.schema_metadata)
    assert arrow_to_schema_metadata(pa.schema([])) == {}
    with pytest.raises(InvalidOperationError, match="not UTF-8"):
        arrow_to_schema_metadata(pa.schema([], metadata={b"k": b"\xff"}))
    # the same through the attrs values
    lance_fields = [LanceField.from_proto(f) for f in manifest.fields]
    assert fields_to_arrow(lance_fields, dict(manifest.schema_metadata)).equals(
        pylance_schema, check_metadata=True
    )


def test_what_pylance_writes_and_what_it_records(
    wide: tuple[table_pb2.Manifest, pa.Schema],
) -> None:
    """Spot checks of the measured facts the module docstring states."""
    by_name = {f.name: f for f in wide[0].fields if f.parent_id == -1}
    assert {f.type for f in wide[0].fields} == {file_pb2.Field.PARENT}
    assert by_name["ts_ms"].logical_type == "timestamp:ms:+05:30"
    assert by_name["fsl_bf16"].logical_type == "fixed_size_list:lance.bfloat16:8"
    assert by_name["fsl_st"].logical_type == "fixed_size_list:struct:2"
    assert by_name["json"].logical_type == "json"
    assert by_name["json"].extension_name == "lance.json"
    assert by_name["uuid"].extension_name == "arrow.uuid"
    assert by_name["uuid"].logical_type == "fixed_size_binary:16"
    assert dict(by_name["tensor"].metadata)[EXT_META].startswith(b'{"shape":[2,2]')
    assert by_name["m"].encoding == file_pb2.PLAIN
    assert by_name["nul"].encoding == file_pb2.NONE


@pytest.mark.parametrize(
    ("dtype", "logical"),
    [
        (pa.float16(), "halffloat"),
        (pa.date64(), "date64:ms"),
        (pa.timestamp("us"), "timestamp:us:-"),
        (pa.decimal256(40, 5), "decimal:256:40:5"),
        (pa.dictionary(pa.int32(), pa.string(), ordered=True), "dict:string:int32:false"),
        (pa.list_(pa.struct([("a", pa.int8())])), "list.struct"),
        (pa.list_(pa.list_(pa.int8(), 2), 3), "fixed_size_list:fixed_size_list:int8:2:3"),
        (pa.string_view(), "string"),
        (pa.json_(pa.large_string()), "json"),
        (pa.uuid(), "fixed_size_binary:16"),
    ],
)
def test_logical_type_of(dtype: pa.DataType, logical: str) -> None:
    assert logical_type_of(dtype) == logical


# Types and schemas whose pylance result differs from the input (lossy on purpose).
LOSSY = [
    F("view", pa.string_view()),
    F("bview", pa.binary_view()),
    F("ordered", pa.dictionary(pa.int32(), pa.string(), ordered=True)),
    F("json_large", pa.json_(pa.large_string())),
    F("fsl_item", pa.list_(F("x", pa.int8(), nullable=False, metadata={"a": "b"}), 2)),
    F("json_meta", pa.string(), metadata={EXT: "arrow.json", "x": "y"}),
    F("lance_json", pa.large_binary(), metadata={EXT: "lance.json"}),
    F("bad_json", pa.int32(), metadata={EXT: "lance.json"}),
    F("bf16_meta", pa.binary(2), metadata={EXT: "lance.bfloat16"}),
    F("fsl_pk_item", pa.list_(F("k", pa.int64(), False, metadata={PK: "true"}), 2), False),
    F("fsl_bf16_meta", pa.list_(F("item", pa.binary(2), metadata={EXT: "lance.bfloat16"}), 3)),
]


@pytest.mark.parametrize("field", LOSSY, ids=lambda f: f.name)
def test_lossy_types_match_pylance_both_ways(field: pa.Field) -> None:
    schema = pa.schema([field])
    manifest, pylance_schema = _pylance_write(schema)
    _assert_same_fields(arrow_to_fields(schema), list(manifest.fields))
    assert fields_to_arrow(list(manifest.fields)).equals(pylance_schema, check_metadata=True)


@pytest.mark.parametrize("version", ["legacy", "2.0", "2.1", "2.2"])
def test_blob_columns_per_data_storage_version(version: str) -> None:
    schema = pa.schema(
        [
            F("b", pa.large_binary(), False, metadata={BLOB: "true", "x": "y"}),
            F("s", pa.struct([F("bb", pa.binary(), metadata={BLOB: "false"})])),
            F("l", pa.list_(F("item", pa.string(), metadata={BLOB: ""}))),
        ]
    )
    manifest, pylance_schema = _pylance_write(schema, data_storage_version=version)
    mine = arrow_to_fields(schema, data_storage_version=version)
    _assert_same_fields(mine, list(manifest.fields))
    assert fields_to_arrow(mine).equals(pylance_schema, check_metadata=True)
    if version == "2.2":
        assert mine[0].logical_type == "struct"
        assert mine[0].extension_name == "lance.blob.v2"
        assert [f.name for f in mine if f.parent_id == mine[0].id] == ["data", "uri"]
    else:
        assert mine[0].logical_type == "large_binary"


def test_blob_type_itself() -> None:
    import lance.blob

    schema = pa.schema([F("c", lance.blob.BlobType())])
    manifest, pylance_schema = _pylance_write(schema)
    _assert_same_fields(arrow_to_fields(schema), list(manifest.fields))
    assert fields_to_arrow(list(manifest.fields)).equals(pylance_schema, check_metadata=True)


@pytest.mark.parametrize(
    "metadata",
    [
        {PK: "true"},
        {PK: "TRUE", f"{PK}:position": " 4"},
        {PK: "yes", f"{PK}:position": "4294967296"},
        {PK: "1", f"{PK}:position": "0"},
        {PK: "1", f"{PK}:position": "+7"},
        {PK: "true", f"{PK}:position": "x"},
        {PK: "true", f"{PK}:position": "-1"},
        {f"{PK}:position": "3"},
        {f"{PK}:position": "007"},
        {f"{PK}:position": "4294967295"},
        {f"{PK}:position": "x"},
        {PK: "false", f"{PK}:position": "3"},
        {PK: "false"},
        {PK: "no"},
    ],
)
def test_primary_key_metadata_matches_pylance(metadata: dict[str, str]) -> None:
    schema = pa.schema([F("s", pa.struct([F("k", pa.int64(), False, metadata=metadata)]), False)])
    manifest, _ = _pylance_write(schema)
    _assert_same_fields(arrow_to_fields(schema), list(manifest.fields))


def test_composite_primary_key_positions() -> None:
    schema = pa.schema(
        [
            F("a", pa.int64(), False, metadata={PK: "true", f"{PK}:position": "2"}),
            F("b", pa.string(), False, metadata={PK: "true", f"{PK}:position": "1"}),
        ]
    )
    manifest, _ = _pylance_write(schema)
    mine = arrow_to_fields(schema)
    _assert_same_fields(mine, list(manifest.fields))
    assert [f.unenforced_primary_key_position for f in mine] == [2, 1]


REFUSED = [
    pa.schema([F("a.b", pa.int8())]),
    pa.schema([F("a", pa.int8()), F("a", pa.int16())]),
    pa.schema([F("k", pa.int64(), True, metadata={PK: "true"})]),
    pa.schema([F("s", pa.struct([F("k", pa.int64(), False, metadata={PK: "1"})]))]),
    pa.schema([F("k", pa.list_(pa.int8()), False, metadata={PK: "true"})]),
    pa.schema([F("u", pa.dense_union([F("a", pa.int8())]))]),
    pa.schema([F("u", pa.sparse_union([F("a", pa.int8())]))]),
    pa.schema([F("i", pa.month_day_nano_interval())]),
    pa.schema([F("r", pa.run_end_encoded(pa.int32(), pa.int8()))]),
    pa.schema([F("lv", pa.list_view(pa.int8()))]),
    pa.schema([F("llv", pa.large_list_view(pa.int8()))]),
    pa.schema([F("d32", pa.decimal32(5, 2))]),
    pa.schema([F("d64", pa.decimal64(12, 2))]),
    pa.schema([F("m", pa.map_(pa.string(), pa.int8(), keys_sorted=True))]),
    pa.schema([F("dfsb", pa.dictionary(pa.int8(), pa.binary(4)))]),
    pa.schema([F("ddate", pa.dictionary(pa.int32(), pa.date32()))]),
    pa.schema([F("dstruct", pa.dictionary(pa.int32(), pa.struct([("a", pa.int8())])))]),
    pa.schema([F("fl", pa.list_(pa.list_(pa.int8()), 2))]),
    pa.schema([F("fll", pa.list_(pa.large_list(pa.int8()), 2))]),
    pa.schema([F("fm", pa.list_(pa.map_(pa.string(), pa.int8()), 2))]),
    pa.schema([F("ffs", pa.list_(pa.list_(pa.struct([("a", pa.int8())]), 2), 3))]),
    pa.schema([F("s", pa.struct([F("x", pa.int8(), metadata={b"k\xff": b"v"})]))]),
    pa.schema([F("x", pa.int8(), metadata={"k": b"\xff"})]),
]


@pytest.mark.parametrize("schema", REFUSED, ids=lambda s: s.names[0] or "empty")
def test_schemas_pylance_refuses_are_refused(schema: pa.Schema) -> None:
    with pytest.raises(Exception):  # noqa: B017, PT011 - pylance raises several kinds
        _pylance_write(schema)
    with pytest.raises(InvalidOperationError, match=repr(schema.names[0])[1:-1]):
        arrow_to_fields(schema)


def test_unsupported_type_error_names_the_nested_field() -> None:
    schema = pa.schema([F("s", pa.struct([F("u", pa.dense_union([F("a", pa.int8())]))]))])
    with pytest.raises(InvalidOperationError, match=r"'s\.u'.*dense_union"):
        arrow_to_fields(schema)


def test_bad_data_storage_version() -> None:
    with pytest.raises(InvalidOperationError, match="'next'"):
        arrow_to_fields(pa.schema([F("a", pa.int8())]), data_storage_version="next")


def test_ids_are_preorder_from_first_id() -> None:
    fields = arrow_to_fields(
        pa.schema(
            [
                F("a", pa.struct([F("b", pa.list_(pa.int8())), F("c", pa.int8())])),
                F("d", pa.map_(pa.string(), pa.int8())),
            ]
        ),
        first_id=5,
    )
    assert [(f.name, f.id, f.parent_id) for f in fields] == [
        ("a", 5, -1),
        ("b", 6, 5),
        ("item", 7, 6),
        ("c", 8, 5),
        ("d", 9, -1),
        ("entries", 10, 9),
        ("key", 11, 10),
        ("value", 12, 10),
    ]
    as_attrs = arrow_to_lance_fields(pa.schema([F("a", pa.int8())]), first_id=3)
    assert as_attrs == (LanceField(3, -1, "a", "int8", encoding=file_pb2.PLAIN),)


# --- reading: errors ---------------------------------------------------------------------


def _pb(id_: int, parent: int, name: str, logical: str) -> file_pb2.Field:
    return file_pb2.Field(id=id_, parent_id=parent, name=name, logical_type=logical)


@pytest.mark.parametrize(
    "logical",
    [
        "quaternion",
        "int128",
        "decimal:512:10:2",
        "decimal:128:x:2",
        "time32:us",
        "time64:s",
        "duration:fortnight",
        "timestamp:ps:-",
        "timestamp",
        "fixed_size_binary",
        "fixed_size_binary:x",
        "fixed_size_list:float",
        "fixed_size_list:float:x",
        "fixed_size_list:quaternion:2",
        "dict:string",
        "dict:quaternion:int32:false",
        "dict:string:float:false",
    ],
)
def test_unknown_or_malformed_logical_type_is_a_format_error(logical: str) -> None:
    with pytest.raises(FormatError, match=r"'x'.*" + logical.split(":")[0]):
        fields_to_arrow([_pb(0, -1, "x", logical)])


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ([_pb(1, 0, "x", "int8")], "before its parent"),
        ([_pb(0, -1, "x", "int8"), _pb(0, -1, "y", "int8")], "used twice"),
        ([_pb(0, -1, "l", "list")], "exactly one child"),
        ([_pb(0, -1, "l", "list"), _pb(1, 0, "a", "int8"), _pb(2, 0, "b", "int8")], "one child"),
        ([_pb(0, -1, "m", "map"), _pb(1, 0, "e", "int8")], "entries struct"),
        ([_pb(0, -1, "m", "map"), _pb(1, 0, "e", "struct")], "key and a value"),
        ([_pb(0, -1, "f", "fixed_size_list:struct:2")], "one item child"),
        ([_pb(0, -1, "i", "int8"), _pb(1, 0, "c", "int8")], "cannot have child"),
        ([_pb(0, -1, "j", "json"), _pb(1, 0, "c", "int8")], "cannot have child"),
    ],
)
def test_malformed_field_lists_are_format_errors(
    fields: list[file_pb2.Field], message: str
) -> None:
    with pytest.raises(FormatError, match=message):
        fields_to_arrow(fields)


def test_extension_name_alone_is_restored_and_unknown_extensions_keep_storage() -> None:
    uuid = file_pb2.Field(
        id=0, parent_id=-1, name="u", logical_type="fixed_size_binary:16", nullable=True
    )
    uuid.extension_name = "arrow.uuid"
    other = file_pb2.Field(id=1, parent_id=-1, name="o", logical_type="binary", nullable=True)
    other.extension_name = "example.unknown"
    schema = fields_to_arrow([uuid, other])
    assert schema.field("u").type == pa.uuid()
    assert schema.field("o").type == pa.binary()
    assert schema.field("o").metadata == {EXT.encode(): b"example.unknown"}


def test_extension_rejecting_its_storage_keeps_the_storage_type() -> None:
    # pylance writes it (and then cannot read its own schema back)
    schema = pa.schema([F("j", pa.binary(), metadata={EXT: "arrow.json"})])
    path = tempfile.mkdtemp(prefix="schema-")
    lance.write_dataset(_empty(schema), path)
    written = list(read_manifest(open_storage(path))[1].manifest.fields)
    _assert_same_fields(arrow_to_fields(schema), written)
    assert written[0].logical_type == "binary"
    bad = file_pb2.Field(id=0, parent_id=-1, name="j", logical_type="binary", nullable=True)
    bad.metadata[EXT] = b"arrow.json"
    schema = fields_to_arrow([bad])
    assert schema.field("j").type == pa.binary()
    assert schema.field("j").metadata == {EXT.encode(): b"arrow.json"}


# --- ids for new columns, projections -------------------------------------------------------


@pytest.fixture(scope="module")
def evolved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """a, b, s{p, q}; then b dropped (id 1 stays in the data file)."""
    path = Path(tmp_path_factory.mktemp("evolve")) / "ds"
    table = pa.table({"a": [1], "b": ["x"], "s": pa.array([{"p": 1, "q": 2}])})
    lance.write_dataset(table, str(path))
    lance.dataset(str(path)).drop_columns(["b"])
    return path


def _manifest(path: Path) -> table_pb2.Manifest:
    return read_manifest(open_storage(str(path)))[1].manifest


def test_max_field_id_counts_dropped_columns_in_data_files(evolved: Path) -> None:
    manifest = _manifest(evolved)
    assert [f.id for f in manifest.fields] == [0, 2, 3, 4]
    assert max_field_id(manifest) == 4
    schema_only = [f for f in manifest.fields if f.name != "s" and f.parent_id == -1]
    assert max_field_id(schema_only) == 0
    assert max_field_id(schema_only, [[0, 1], [7]]) == 7
    assert max_field_id([]) == -1
    assert max_field_id(table_pb2.Manifest()) == -1
    assert max_field_id([LanceField(9, -1, "z", "int8")]) == 9


def test_new_columns_get_the_ids_pylance_gives_them(evolved: Path, tmp_path: Path) -> None:
    copy = tmp_path / "ds"
    import shutil

    shutil.copytree(evolved, copy)
    before = _manifest(copy)
    new_columns = [
        F("n", pa.struct([("x", pa.int8()), ("y", pa.list_(pa.string()))])),
        F("b", pa.string()),
    ]
    lance.dataset(str(copy)).add_columns(new_columns)
    after = _manifest(copy)
    new_schema = pa.schema([*fields_to_arrow(before.fields), *new_columns])
    mine = assign_new_field_ids(
        list(before.fields), new_schema, first_new_id=max_field_id(before) + 1
    )
    _assert_same_fields(mine, list(after.fields))
    assert {f.name: f.id for f in mine if f.parent_id == -1}["b"] == 9  # 1 is never reused


def test_assign_new_field_ids_keeps_known_paths() -> None:
    old = arrow_to_fields(pa.schema([("a", pa.int8()), ("s", pa.struct([("p", pa.int8())]))]))
    new = assign_new_field_ids(
        old,
        pa.schema(
            [
                ("a", pa.int8()),
                ("c", pa.int8()),
                ("s", pa.struct([("q", pa.int8()), ("p", pa.int8())])),
            ]
        ),
        data_files_fields=[[0, 2, 6]],
    )
    assert [(f.name, f.id, f.parent_id) for f in new] == [
        ("a", 0, -1),
        ("c", 7, -1),
        ("s", 1, -1),
        ("q", 8, 1),
        ("p", 2, 1),
    ]


def test_assign_new_field_ids_renumbers_changed_types_and_their_subtrees() -> None:
    old = arrow_to_fields(
        pa.schema([("a", pa.int8()), ("l", pa.list_(pa.int8())), ("keep", pa.int8())])
    )
    new = assign_new_field_ids(
        old,
        pa.schema([("a", pa.string()), ("l", pa.large_list(pa.int8())), ("keep", pa.int8())]),
    )
    assert [(f.name, f.id, f.parent_id) for f in new] == [
        ("a", 4, -1),
        ("l", 5, -1),
        ("item", 6, 5),
        ("keep", 3, -1),
    ]


def test_project_fields_is_what_pylance_drop_columns_keeps(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    table = pa.table(
        {
            "a": [1],
            "b": ["x"],
            "s": pa.array([{"p": 1, "q": {"r": 2, "t": 3}, "u": [1]}]),
            "c": [1.0],
        }
    )
    lance.write_dataset(table, str(path))
    before = _manifest(path)
    lance.dataset(str(path)).drop_columns(["b", "s.p", "s.q.t"])
    after = _manifest(path)
    mine = project_fields(list(before.fields), ["a", "s.q.r", ("s", "u"), "c"])
    _assert_same_fields(mine, list(after.fields))
    # a chosen parent keeps its whole subtree; LanceField input works too
    attrs_fields = [LanceField.from_proto(f) for f in before.fields]
    assert [f.name for f in project_fields(attrs_fields, ["s"])] == [
        "s",
        "p",
        "q",
        "r",
        "t",
        "u",
        "item",
    ]
    with pytest.raises(InvalidOperationError, match=r"'s\.zz'"):
        project_fields(list(before.fields), ["s.zz"])


def test_field_paths() -> None:
    fields = arrow_to_fields(pa.schema([("m", pa.map_(pa.string(), pa.int8()))]))
    assert field_paths(fields) == {
        ("m",): 0,
        ("m", "entries"): 1,
        ("m", "entries", "key"): 2,
        ("m", "entries", "value"): 3,
    }
    with pytest.raises(FormatError, match="before its parent"):
        field_paths([_pb(1, 0, "x", "int8")])
