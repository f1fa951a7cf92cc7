"""Deletion files, row-id / row-version sequences and feature flags."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyroaring import BitMap

from txn_engine._proto import rowids_pb2, table_pb2
from txn_engine.errors import (
    CorruptDeletionFileError,
    FormatError,
    InvalidOperationError,
    UnsupportedFeatureError,
)
from txn_engine.format.deletion import (
    decode_deletion_file,
    deletion_file_path,
    encode_arrow_deletions,
    encode_bitmap_deletions,
    read_deletion_vector,
    write_deletion_vector,
)
from txn_engine.format.flags import (
    FLAG_BASE_PATHS,
    FLAG_DELETION_FILES,
    FLAG_DISABLE_TRANSACTION_FILE,
    FLAG_STABLE_ROW_IDS,
    FLAG_TABLE_CONFIG,
    compute_feature_flags,
    describe_flags,
)
from txn_engine.format.rowids import (
    ArraySegment,
    RangeSegment,
    RangeWithBitmapSegment,
    RangeWithHolesSegment,
    SortedArraySegment,
    decode_row_id_segments,
    decode_row_id_sequence,
    decode_u64_array,
    decode_version_sequence,
    encode_row_id_segments,
    encode_row_id_sequence,
    encode_u64_array,
    encode_version_sequence,
    fresh_row_id_sequence,
    fresh_version_sequence,
    row_id_sequence_len,
    segment_for_values,
)
from txn_engine.storage import MemoryStorage

ARROW = table_pb2.DeletionFile.ARROW_ARRAY
BITMAP = table_pb2.DeletionFile.BITMAP

# ----------------------------------------------------------------- deletion files


def test_deletion_path_format() -> None:
    pb = table_pb2.DeletionFile(file_type=BITMAP, read_version=4, id=77)
    assert deletion_file_path(3, pb) == "_deletions/3-4-77.bin"
    pb.file_type = ARROW
    assert deletion_file_path(3, pb) == "_deletions/3-4-77.arrow"


@pytest.mark.parametrize(
    ("encoding", "n", "file_type"),
    [("arrow", 10, ARROW), ("bitmap", 10, BITMAP), ("auto", 4999, ARROW), ("auto", 5000, BITMAP)],
)
def test_write_then_read(encoding: str, n: int, file_type: int) -> None:
    storage = MemoryStorage()
    offsets = BitMap(range(0, 3 * n, 3))
    pb = write_deletion_vector(storage, 2, 9, offsets, encoding=encoding)  # type: ignore[arg-type]
    assert (pb.file_type, pb.read_version, pb.num_deleted_rows) == (file_type, 9, n)
    assert 0 <= pb.id < 2**64
    assert read_deletion_vector(storage, 2, pb) == offsets


def test_arrow_file_schema_is_one_non_null_uint32_column() -> None:
    data = encode_arrow_deletions(BitMap([5, 1]))
    table = pa.ipc.open_file(pa.BufferReader(data)).read_all()
    assert table.schema == pa.schema([pa.field("row_id", pa.uint32(), nullable=False)])
    assert sorted(table.column(0).to_pylist()) == [1, 5]
    assert data[:6] == b"ARROW1"


def test_ids_are_random() -> None:
    storage = MemoryStorage()
    ids = {write_deletion_vector(storage, 0, 1, BitMap([1])).id for _ in range(20)}
    assert len(ids) == 20


def test_empty_deletion_vector_refused() -> None:
    with pytest.raises(InvalidOperationError):
        write_deletion_vector(MemoryStorage(), 0, 1, BitMap())


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


@pytest.mark.parametrize(
    "data",
    [
        b"not arrow at all",
        _ipc(pa.table({"row_id": pa.array([1], pa.int32())})),
        _ipc(pa.table({"other": pa.array([1], pa.uint32())})),
        _ipc(pa.table({"row_id": pa.array([1, None], pa.uint32())})),
    ],
    ids=["garbage", "int32", "wrong-name", "nulls"],
)
def test_corrupt_arrow_deletion_file(data: bytes) -> None:
    with pytest.raises(CorruptDeletionFileError):
        decode_deletion_file(data, ARROW)


def test_corrupt_bitmap_deletion_file() -> None:
    with pytest.raises(CorruptDeletionFileError):
        decode_deletion_file(b"\x01\x02\x03", BITMAP)


def test_unknown_deletion_type_and_missing_file() -> None:
    with pytest.raises(CorruptDeletionFileError, match="unknown"):
        decode_deletion_file(encode_bitmap_deletions(BitMap([1])), 7)
    pb = table_pb2.DeletionFile(file_type=ARROW, read_version=1, id=1)
    with pytest.raises(CorruptDeletionFileError, match="missing"):
        read_deletion_vector(MemoryStorage(), 0, pb)
    pb.base_id = 1
    with pytest.raises(UnsupportedFeatureError):
        deletion_file_path(0, pb)


# ----------------------------------------------------------------- row ids


@pytest.mark.parametrize(
    ("values", "kind"),
    [
        ([], RangeSegment),
        ([5, 6, 7], RangeSegment),
        ([v for v in range(100) if v != 50], RangeWithHolesSegment),
        ([1, 2, 4, 5, 7, 8], RangeWithBitmapSegment),  # what pylance wrote for an update
        ([0, 1000, 5000], SortedArraySegment),
        ([3, 1, 2], ArraySegment),
    ],
)
def test_encoder_choice(values: list[int], kind: type) -> None:
    seg = segment_for_values(values)
    assert isinstance(seg, kind)
    assert list(seg.values()) == values
    assert len(seg) == len(values)
    assert decode_row_id_sequence(encode_row_id_sequence(values)) == values


def test_holes_are_absolute_values_and_bitmap_is_lsb_first() -> None:
    pb = rowids_pb2.RowIdSequence()
    pb.ParseFromString(encode_row_id_sequence([*range(100, 198), 199]))
    holes = pb.segments[0].range_with_holes
    assert (holes.start, holes.end) == (100, 200)
    assert decode_u64_array(holes.holes) == [198]
    bitmap = RangeWithBitmapSegment(10, 13, bytes([0b101]))
    assert list(bitmap.values()) == [10, 12]


def test_u64_array_widths() -> None:
    assert encode_u64_array([7, 9]).WhichOneof("array") == "u16_array"
    assert encode_u64_array([0, 70_000]).WhichOneof("array") == "u32_array"
    assert encode_u64_array([0, 2**40]).WhichOneof("array") == "u64_array"
    assert decode_u64_array(encode_u64_array([2**63, 2**63 + 65535])) == [2**63, 2**63 + 65535]


def test_multi_segment_sequences() -> None:
    segs = [RangeSegment(0, 3), ArraySegment((9, 8)), SortedArraySegment((20, 30))]
    data = encode_row_id_segments(segs)
    assert decode_row_id_segments(data) == segs
    assert decode_row_id_sequence(data) == [0, 1, 2, 9, 8, 20, 30]
    assert row_id_sequence_len(data) == 7
    assert decode_row_id_sequence(fresh_row_id_sequence(10, 3)) == [10, 11, 12]


def test_malformed_row_id_bytes() -> None:
    with pytest.raises(FormatError):
        decode_row_id_sequence(b"\xff\xff")
    pb = rowids_pb2.RowIdSequence()
    seg = pb.segments.add()
    seg.sorted_array.u16_array.base = 0
    seg.sorted_array.u16_array.offsets = b"\x01"  # odd length
    with pytest.raises(FormatError, match="multiple of 2"):
        decode_row_id_sequence(pb.SerializeToString())
    bad = rowids_pb2.RowIdSequence()
    bad.segments.add().range.start = 5  # end < start
    with pytest.raises(FormatError, match="end"):
        decode_row_id_sequence(bad.SerializeToString())


def test_version_sequences() -> None:
    assert decode_version_sequence(fresh_version_sequence(10, 3)) == [(10, 3)]
    runs = [(2, 1), (3, 1), (0, 7), (4, 2)]
    assert decode_version_sequence(encode_version_sequence(runs)) == [(5, 1), (4, 2)]
    pb = rowids_pb2.RowDatasetVersionSequence()
    pb.ParseFromString(encode_version_sequence([(5, 1), (4, 2)]))
    assert [(r.span.range.start, r.span.range.end, r.version) for r in pb.runs] == [
        (0, 5, 1),
        (5, 9, 2),
    ]


# ----------------------------------------------------------------- flags


def test_compute_feature_flags() -> None:
    m = table_pb2.Manifest()
    assert compute_feature_flags(m, stable_row_ids=False) == (0, 0)
    m.fragments.add(id=0)
    m.fragments.add(id=1).deletion_file.num_deleted_rows = 1
    m.config["k"] = "v"
    m.base_paths.add(id=1, path="s3://x")
    reader, writer = compute_feature_flags(m, stable_row_ids=True, inline_transaction_only=True)
    assert reader == FLAG_DELETION_FILES | FLAG_STABLE_ROW_IDS | FLAG_BASE_PATHS
    assert writer == reader | FLAG_TABLE_CONFIG | FLAG_DISABLE_TRANSACTION_FILE
    assert describe_flags(writer | 256) == [
        "deletion_files",
        "stable_row_ids",
        "table_config",
        "base_paths",
        "disable_transaction_file",
        "unknown(256)",
    ]
