"""Row addresses (``fragment_id << 32 | offset`` in a 64-bit roaring bitmap) and the row
offsets of one fragment among them, moved between without a loop over the rows.
"""

from __future__ import annotations

import struct

from pyroaring import BitMap, BitMap64

__all__ = ["addresses", "fragment_offsets", "offsets_by_mask"]

# A 64-bit roaring bitmap's portable serialization is: the number of 32-bit buckets (u64 LE),
# then per bucket, in key order, its high 32 bits (u32 LE) and the bucket's 32-bit portable
# serialization (RoaringFormatSpec). A row address ``fragment_id << 32 | offset`` puts each
# fragment in one bucket, so moving between addresses and offsets is a matter of headers,
# never a loop over the rows (nor a 2^32-wide mask, which alone costs ~10 ms to build).
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_ONE_BUCKET = struct.Struct("<QI")
_SERIAL_COOKIE = 12347
_SERIAL_COOKIE_NO_RUNCONTAINER = 12346


def _bucket_size(blob: bytes, pos: int) -> int | None:
    """Byte length of the 32-bit portable roaring serialization starting at ``pos``
    (``None`` for a cookie this parser does not know)."""
    start = pos
    (cookie,) = _U32.unpack_from(blob, pos)
    pos += 4
    if cookie & 0xFFFF == _SERIAL_COOKIE:
        n = (cookie >> 16) + 1
        runs = blob[pos : pos + (n + 7) // 8]
        pos += (n + 7) // 8
    elif cookie == _SERIAL_COOKIE_NO_RUNCONTAINER:
        (n,) = _U32.unpack_from(blob, pos)
        pos += 4
        runs = b""
    else:  # pyroaring writes only the two cookies above
        return None
    cards = struct.unpack_from(f"<{2 * n}H", blob, pos)[1::2]
    pos += 4 * n
    if not runs or n >= 4:  # the offset header, absent for small bitmaps with runs
        pos += 4 * n
    for i in range(n):
        if runs and runs[i // 8] >> (i % 8) & 1:
            pos += 2 + 4 * _U16.unpack_from(blob, pos)[0]
        elif cards[i] < 4096:  # stored as cardinality - 1: an array container
            pos += 2 * (cards[i] + 1)
        else:  # a bitset container
            pos += 8192
    return pos - start


def fragment_offsets(rows: BitMap64, fragment_id: int) -> BitMap:
    """The row offsets of ``fragment_id`` among row addresses (``fragment_id << 32 | offset``)."""
    lo = fragment_id << 32
    last = lo | 0xFFFF_FFFF  # rank() counts values <= x; range ends overflow u64 for 2^32 - 1
    if not rows or rows.rank(last) == (rows.rank(lo - 1) if lo else 0):
        return BitMap()
    blob = rows.serialize()
    (buckets,) = _U64.unpack_from(blob)
    pos = _U64.size
    for _ in range(buckets):
        (key,) = _U32.unpack_from(blob, pos)
        pos += 4
        size = _bucket_size(blob, pos)
        if size is None:
            break
        if key == fragment_id:
            return BitMap.deserialize(blob[pos : pos + size])
        pos += size
    return offsets_by_mask(rows, fragment_id)


def offsets_by_mask(rows: BitMap64, fragment_id: int) -> BitMap:
    """:func:`fragment_offsets` the slow way (a 2^32-wide mask, then one bucket left)."""
    lo = fragment_id << 32
    mask = BitMap64()
    mask.add_range(lo, lo | 0xFFFF_FFFF)
    mask.add(lo | 0xFFFF_FFFF)
    blob = (rows & mask).serialize()
    if _U64.unpack_from(blob)[0] == 0:
        return BitMap()
    return BitMap.deserialize(blob[_ONE_BUCKET.size :])


def addresses(fragment_id: int, offsets: BitMap) -> BitMap64:
    """The row addresses of ``offsets`` in fragment ``fragment_id``."""
    if not offsets:
        return BitMap64()
    return BitMap64.deserialize(_ONE_BUCKET.pack(1, fragment_id) + offsets.serialize())
