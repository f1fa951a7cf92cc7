"""Stable row-id sequences and row-version sequences (``rowids.proto``).

A fragment of a stable-row-id dataset stores its row ids as a serialized
``RowIdSequence`` (``DataFragment.inline_row_ids``): a list of segments, each one of

* :class:`RangeSegment` -- ``[start, end)`` contiguous,
* :class:`RangeWithHolesSegment` -- ``[start, end)`` minus sorted absolute ``holes``,
* :class:`RangeWithBitmapSegment` -- ``[start, end)`` with a presence bitmap (bit *i* is
  ``bitmap[i // 8] >> (i % 8) & 1``, LSB first),
* :class:`SortedArraySegment` / :class:`ArraySegment` -- explicit values,

with arrays stored as ``EncodedU64Array`` (u16 or u32 offsets from a base, or raw u64).

Row-version sequences (``RowDatasetVersionSequence``) record, for consecutive runs of row
positions, the dataset version that created / last updated those rows. Only the run
lengths matter to readers, so this module exposes them as ``(row_count, version)`` pairs.

Encoders choose the representation Lance would (smallest estimated size); decoders accept
every representation. Malformed bytes raise :class:`~txn_engine.errors.FormatError`.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterable, Iterator, Sequence

import attrs
from google.protobuf.message import DecodeError

from txn_engine._proto import rowids_pb2
from txn_engine.errors import FormatError, LimitExceededError

__all__ = [
    "MAX_ROW_IDS",
    "ArraySegment",
    "RangeSegment",
    "RangeWithBitmapSegment",
    "RangeWithHolesSegment",
    "Segment",
    "SortedArraySegment",
    "decode_row_id_sequence",
    "decode_row_id_segments",
    "decode_u64_array",
    "decode_version_sequence",
    "encode_row_id_segments",
    "encode_row_id_sequence",
    "encode_u64_array",
    "encode_version_sequence",
    "fresh_row_id_sequence",
    "fresh_version_sequence",
    "row_id_sequence_len",
    "segment_for_values",
    "segment_from_proto",
    "segment_to_proto",
]

#: Most row ids one fragment's sequence may hold (row offsets within a fragment are u32).
MAX_ROW_IDS = 1 << 32
_U16_MAX = 0xFFFF
_U32_MAX = 0xFFFFFFFF
_U64_MAX = (1 << 64) - 1
_LITTLE = sys.byteorder == "little"


# --------------------------------------------------------------------------- arrays


def _pack(typecode: str, values: Iterable[int]) -> bytes:
    arr = array(typecode, values)
    if not _LITTLE:  # pragma: no cover - big-endian hosts only
        arr.byteswap()
    return arr.tobytes()


def _unpack(typecode: str, data: bytes, what: str) -> list[int]:
    arr = array(typecode)
    if len(data) % arr.itemsize:
        raise FormatError(f"{what}: {len(data)} bytes is not a multiple of {arr.itemsize}")
    arr.frombytes(data)
    if not _LITTLE:  # pragma: no cover
        arr.byteswap()
    return arr.tolist()


def encode_u64_array(values: Sequence[int]) -> rowids_pb2.EncodedU64Array:
    """Encode u64 values as Lance does: u16 offsets from the minimum when the span fits,
    else u32 offsets, else raw u64 (empty -> empty u64 array). Order is preserved."""
    out = rowids_pb2.EncodedU64Array()
    if not values:
        out.u64_array.values = b""
        return out
    lo, hi = min(values), max(values)
    if lo < 0 or hi > _U64_MAX:
        raise ValueError("row ids must be in [0, 2**64)")
    if hi - lo <= _U16_MAX:
        out.u16_array.base = lo
        out.u16_array.offsets = _pack("H", (v - lo for v in values))
    elif hi - lo <= _U32_MAX:
        out.u32_array.base = lo
        out.u32_array.offsets = _pack("I", (v - lo for v in values))
    else:
        out.u64_array.values = _pack("Q", values)
    return out


def decode_u64_array(pb: rowids_pb2.EncodedU64Array) -> list[int]:
    """Decode an ``EncodedU64Array`` to its values. Raises FormatError when malformed."""
    kind = pb.WhichOneof("array")
    if kind == "u16_array":
        base = pb.u16_array.base
        return [base + o for o in _unpack("H", pb.u16_array.offsets, "u16 array")]
    if kind == "u32_array":
        base = pb.u32_array.base
        return [base + o for o in _unpack("I", pb.u32_array.offsets, "u32 array")]
    if kind == "u64_array":
        return _unpack("Q", pb.u64_array.values, "u64 array")
    raise FormatError("EncodedU64Array has no array set")


# --------------------------------------------------------------------------- segments


@attrs.frozen
class RangeSegment:
    """Contiguous ids ``[start, end)``."""

    start: int
    end: int

    def __len__(self) -> int:
        return self.end - self.start

    def values(self) -> Iterator[int]:
        return iter(range(self.start, self.end))


@attrs.frozen
class RangeWithHolesSegment:
    """Ids ``[start, end)`` except the sorted absolute values in ``holes``."""

    start: int
    end: int
    holes: tuple[int, ...]

    def __len__(self) -> int:
        return self.end - self.start - len(self.holes)

    def values(self) -> Iterator[int]:
        holes = set(self.holes)
        return (v for v in range(self.start, self.end) if v not in holes)


@attrs.frozen
class RangeWithBitmapSegment:
    """Ids in ``[start, end)`` whose bit is set in ``bitmap`` (LSB-first)."""

    start: int
    end: int
    bitmap: bytes

    def __len__(self) -> int:
        mask = int.from_bytes(self.bitmap, "little") & ((1 << (self.end - self.start)) - 1)
        return mask.bit_count()

    def values(self) -> Iterator[int]:
        bits = int.from_bytes(self.bitmap, "little")
        return (v for i, v in enumerate(range(self.start, self.end)) if bits >> i & 1)


@attrs.frozen
class SortedArraySegment:
    """Explicit ascending ids."""

    ids: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.ids)

    def values(self) -> Iterator[int]:
        return iter(self.ids)


@attrs.frozen
class ArraySegment:
    """Explicit ids in any order."""

    ids: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.ids)

    def values(self) -> Iterator[int]:
        return iter(self.ids)


Segment = (
    RangeSegment
    | RangeWithHolesSegment
    | RangeWithBitmapSegment
    | SortedArraySegment
    | ArraySegment
)


def _bitmap_for(start: int, end: int, present: Iterable[int]) -> bytes:
    bits = 0
    for v in present:
        bits |= 1 << (v - start)
    return bits.to_bytes((end - start + 7) // 8, "little")


def segment_for_values(values: Sequence[int]) -> Segment:
    """The segment Lance would choose for ``values`` (distinct u64s).

    Sorted and contiguous -> range; sorted with gaps -> the smallest of range-with-holes
    (24 + 4/hole bytes), range-with-bitmap (24 + span/8) and sorted array (24 + 2/value),
    ties favouring that order; unsorted -> array; empty -> ``range(0, 0)``.
    """
    n = len(values)
    if n == 0:
        return RangeSegment(0, 0)
    is_sorted = all(values[i] < values[i + 1] for i in range(n - 1))
    if not is_sorted:
        return ArraySegment(tuple(values))
    lo, hi = values[0], values[-1]
    if hi == (1 << 64) - 1:
        # u64::MAX cannot be the inclusive end of a range (exclusive ends overflow)
        return SortedArraySegment(tuple(values))
    span = hi - lo + 1
    n_holes = span - n
    if n_holes == 0:
        return RangeSegment(lo, hi + 1)
    holes_size = 24 + 4 * n_holes
    bitmap_size = 24 + (span + 7) // 8
    array_size = 24 + 2 * n
    best = min(holes_size, bitmap_size, array_size)
    if best == holes_size:
        present = set(values)
        holes = tuple(v for v in range(lo, hi + 1) if v not in present)
        return RangeWithHolesSegment(lo, hi + 1, holes)
    if best == bitmap_size:
        return RangeWithBitmapSegment(lo, hi + 1, _bitmap_for(lo, hi + 1, values))
    return SortedArraySegment(tuple(values))


def segment_to_proto(segment: Segment) -> rowids_pb2.U64Segment:
    """Encode one segment as its ``U64Segment`` message."""
    pb = rowids_pb2.U64Segment()
    if isinstance(segment, RangeSegment):
        pb.range.start = segment.start
        pb.range.end = segment.end
    elif isinstance(segment, RangeWithHolesSegment):
        pb.range_with_holes.start = segment.start
        pb.range_with_holes.end = segment.end
        pb.range_with_holes.holes.CopyFrom(encode_u64_array(segment.holes))
    elif isinstance(segment, RangeWithBitmapSegment):
        pb.range_with_bitmap.start = segment.start
        pb.range_with_bitmap.end = segment.end
        pb.range_with_bitmap.bitmap = segment.bitmap
    elif isinstance(segment, SortedArraySegment):
        pb.sorted_array.CopyFrom(encode_u64_array(segment.ids))
    else:
        pb.array.CopyFrom(encode_u64_array(segment.ids))
    return pb


def _check_range(start: int, end: int, kind: str) -> None:
    if end < start:
        raise FormatError(f"{kind} segment has end {end} < start {start}")


def segment_from_proto(pb: rowids_pb2.U64Segment) -> Segment:
    """Decode one ``U64Segment``. Raises FormatError when it is malformed."""
    kind = pb.WhichOneof("segment")
    if kind == "range":
        _check_range(pb.range.start, pb.range.end, kind)
        return RangeSegment(pb.range.start, pb.range.end)
    if kind == "range_with_holes":
        r = pb.range_with_holes
        _check_range(r.start, r.end, kind)
        holes = tuple(decode_u64_array(r.holes)) if r.HasField("holes") else ()
        if any(h < r.start or h >= r.end for h in holes):
            raise FormatError("range_with_holes segment has a hole outside its range")
        return RangeWithHolesSegment(r.start, r.end, holes)
    if kind == "range_with_bitmap":
        b = pb.range_with_bitmap
        _check_range(b.start, b.end, kind)
        if len(b.bitmap) * 8 < b.end - b.start:
            raise FormatError(
                f"range_with_bitmap segment: {len(b.bitmap)} bitmap bytes cannot cover "
                f"{b.end - b.start} values"
            )
        return RangeWithBitmapSegment(b.start, b.end, bytes(b.bitmap))
    if kind == "sorted_array":
        return SortedArraySegment(tuple(decode_u64_array(pb.sorted_array)))
    if kind == "array":
        return ArraySegment(tuple(decode_u64_array(pb.array)))
    raise FormatError("U64Segment has no segment set")


# --------------------------------------------------------------------------- sequences


def _parse_sequence(data: bytes) -> rowids_pb2.RowIdSequence:
    pb = rowids_pb2.RowIdSequence()
    try:
        pb.ParseFromString(data)
    except DecodeError as exc:
        raise FormatError(f"undecodable RowIdSequence protobuf: {exc}") from exc
    return pb


def encode_row_id_segments(segments: Iterable[Segment]) -> bytes:
    """Serialize a ``RowIdSequence`` made of the given segments, in order."""
    pb = rowids_pb2.RowIdSequence(segments=[segment_to_proto(s) for s in segments])
    return pb.SerializeToString()


def encode_row_id_sequence(ids: Sequence[int]) -> bytes:
    """Serialize row ids as a one-segment ``RowIdSequence`` (segment chosen like Lance)."""
    return encode_row_id_segments([segment_for_values(ids)])


def fresh_row_id_sequence(start: int, count: int) -> bytes:
    """The sequence of a new fragment given ids ``[start, start + count)``."""
    return encode_row_id_segments([RangeSegment(start, start + count)])


def decode_row_id_segments(data: bytes) -> list[Segment]:
    """Decode a serialized ``RowIdSequence`` to its segments."""
    return [segment_from_proto(s) for s in _parse_sequence(data).segments]


def decode_row_id_sequence(data: bytes, *, max_len: int | None = None) -> list[int]:
    """Decode a serialized ``RowIdSequence`` to the row ids, in row order.

    A range segment of a few bytes can declare billions of ids, so the declared length is
    checked before anything is expanded: more than ``max_len`` ids (pass the fragment's
    ``physical_rows``; default :data:`MAX_ROW_IDS`, a fragment's row offsets being u32)
    raises :class:`~txn_engine.errors.LimitExceededError`.
    """
    segments = decode_row_id_segments(data)
    bound = MAX_ROW_IDS if max_len is None else min(max_len, MAX_ROW_IDS)
    total = sum(len(s) for s in segments)
    if total > bound:
        raise LimitExceededError(
            f"row-id sequence declares {total} row ids, more than the {bound} allowed",
            limit="row_ids",
        )
    out: list[int] = []
    for segment in segments:
        out.extend(segment.values())
    return out


def row_id_sequence_len(data: bytes) -> int:
    """Number of row ids in a serialized sequence, without expanding ranges."""
    return sum(len(s) for s in decode_row_id_segments(data))


def encode_version_sequence(runs: Iterable[tuple[int, int]]) -> bytes:
    """Serialize ``(row_count, version)`` runs covering row positions 0.. in order.

    Adjacent runs with the same version are merged; empty runs are dropped.
    """
    merged: list[list[int]] = []
    for count, version in runs:
        if count < 0 or version < 0:
            raise ValueError("row counts and versions must be non-negative")
        if count == 0:
            continue
        if merged and merged[-1][1] == version:
            merged[-1][0] += count
        else:
            merged.append([count, version])
    pb = rowids_pb2.RowDatasetVersionSequence()
    position = 0
    for count, version in merged:
        run = pb.runs.add()
        run.span.range.start = position
        run.span.range.end = position + count
        run.version = version
        position += count
    return pb.SerializeToString()


def decode_version_sequence(data: bytes) -> list[tuple[int, int]]:
    """Decode a ``RowDatasetVersionSequence`` to ``(row_count, version)`` runs, in order."""
    pb = rowids_pb2.RowDatasetVersionSequence()
    try:
        pb.ParseFromString(data)
    except DecodeError as exc:
        raise FormatError(f"undecodable RowDatasetVersionSequence protobuf: {exc}") from exc
    return [(len(segment_from_proto(run.span)), run.version) for run in pb.runs]


def fresh_version_sequence(n_rows: int, version: int) -> bytes:
    """The created-at / last-updated sequence of a fragment whose rows are all new."""
    return encode_version_sequence([(n_rows, version)])
