"""The key-existence filter an upsert records in its Update's ``inserted_rows`` field.

pylance 14's ``KeyExistenceFilter``: the key columns' field ids and a bloom filter of the
keys an upsert inserted. :func:`bloom_filter` writes one, :func:`may_contain` tests a key
hash against one (True when unsure), :func:`filter_field_ids` reads its key columns. The
upsert rule U1 that uses them is the Update handler's (:mod:`txn_engine.builder.rows`);
planning an upsert's filter against a pylance dataset is
:func:`txn_engine.conflicts.upsert.inserted_rows_filter`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Sequence
from typing import Any

from txn_engine._proto import transaction_pb2

__all__ = ["FPP", "bloom_filter", "filter_field_ids", "key_hash", "key_hashes", "may_contain"]

#: False-positive rate of the recorded filters (a false positive costs one re-plan).
FPP = 0.001

_MASK64 = (1 << 64) - 1


def _encode(value: Any) -> bytes:
    if value is None:
        return b"n"
    if isinstance(value, bool):
        return b"b1" if value else b"b0"
    if isinstance(value, int):
        return b"i" + str(value).encode()
    if isinstance(value, float):
        return b"f" + repr(value).encode()
    if isinstance(value, str):
        return b"s" + value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return b"y" + bytes(value)
    return b"o" + str(value).encode("utf-8")


def key_hash(key: Sequence[Any]) -> int:
    """A stable 64-bit hash of one key (a tuple of column values)."""
    h = hashlib.blake2b(digest_size=8, person=b"te-upsert")
    for part in key:
        data = _encode(part)
        h.update(len(data).to_bytes(4, "little"))
        h.update(data)
    return int.from_bytes(h.digest(), "little")


def key_hashes(table: Any, keys: Sequence[str]) -> list[int]:
    """The :func:`key_hash` of every row of a pyarrow table's ``keys`` columns."""
    columns = [table.column(k).to_pylist() for k in keys]
    return [key_hash(row) for row in zip(*columns, strict=True)]


def _shape(num_items: int) -> tuple[int, int]:
    """(num_bits, num_hashes) for ``num_items`` at :data:`FPP`."""
    n = max(num_items, 1)
    bits = max(64, math.ceil(-n * math.log(FPP) / (math.log(2) ** 2)))
    bits = (bits + 7) // 8 * 8
    return bits, max(1, round(bits / n * math.log(2)))


def _positions(h: int, num_bits: int, num_hashes: int) -> Iterable[int]:
    h1, h2 = h & 0xFFFFFFFF, (h >> 32) | 1
    for i in range(num_hashes):
        yield ((h1 + i * h2) & _MASK64) % num_bits


def bloom_filter(field_ids: Sequence[int], hashes: Iterable[int]) -> bytes:
    """A serialized ``KeyExistenceFilter`` holding ``hashes`` over ``field_ids``."""
    items = sorted(set(hashes))
    num_bits, num_hashes = _shape(len(items))
    bits = bytearray(num_bits // 8)
    for h in items:
        for p in _positions(h, num_bits, num_hashes):
            bits[p >> 3] |= 1 << (p & 7)
    pb = transaction_pb2.Transaction.KeyExistenceFilter(field_ids=list(field_ids))
    pb.bloom.bits = bytes(bits)
    pb.bloom.num_bits = num_bits
    pb.bloom.num_items = len(items)
    pb.bloom.fpp = FPP
    return pb.SerializeToString()


def may_contain(record: bytes, h: int) -> bool:
    """Whether the filter ``record`` may hold the key hash ``h`` (True when unsure)."""
    pb = transaction_pb2.Transaction.KeyExistenceFilter()
    try:
        pb.ParseFromString(record)
    except Exception:
        return True
    bloom = pb.bloom
    if bloom.num_items == 0:
        return False
    if bloom.num_bits == 0 or len(bloom.bits) * 8 < bloom.num_bits:
        return True
    num_bits, num_hashes = _shape(bloom.num_items)
    if num_bits != bloom.num_bits:  # not a filter of this module's shape: be conservative
        return True
    bits = bloom.bits
    return all(bits[p >> 3] & (1 << (p & 7)) for p in _positions(h, bloom.num_bits, num_hashes))


def filter_field_ids(record: bytes) -> tuple[int, ...] | None:
    """The key columns (field ids) of the filter ``record``; None when unreadable."""
    pb = transaction_pb2.Transaction.KeyExistenceFilter()
    try:
        pb.ParseFromString(record)
    except Exception:
        return None
    return tuple(pb.field_ids)
