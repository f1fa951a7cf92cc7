"""Concurrent upserts must not insert the same new key twice (rule ``U1``).

Lance's resolver lets two merge-inserts planned at the same version both insert a key
that neither saw (they touch no common fragment); pylance 14.0.2 leaves the key twice.
txn_engine records, in the Update's ``inserted_rows`` field (pylance 14's
``KeyExistenceFilter``: the key columns' field ids and a bloom filter), the keys an upsert
inserted. pylance 14 reads the field and ignores it.

When *my* transaction is an upsert planned by :meth:`txn_engine.Table.merge_insert` (its
Update carries ``inserted_key_hashes``, the exact hashes of the keys it inserts), a
concurrent transaction conflicts (retryable: re-planning turns my insert into an update):

* an Update whose ``inserted_rows`` filter, on the same key columns, may contain one of
  my keys (a bloom false positive only costs a re-plan);
* an Update that adds rows but records no filter (pylance's merge-insert, an update), or
  a filter over other columns: it may hold my keys;
* an Append that adds rows (it records nothing).

An Update without ``inserted_key_hashes`` (pylance's, or one built by hand) is checked as
Lance checks it.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Sequence
from typing import Any

from txn_engine._proto import transaction_pb2
from txn_engine.ops import Append, Operation, Update

__all__ = [
    "FPP",
    "bloom_filter",
    "inserted_rows_filter",
    "key_hash",
    "key_hashes",
    "may_contain",
    "upsert_conflict",
]

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


def _field_ids(record: bytes) -> tuple[int, ...] | None:
    pb = transaction_pb2.Transaction.KeyExistenceFilter()
    try:
        pb.ParseFromString(record)
    except Exception:
        return None
    return tuple(pb.field_ids)


def upsert_conflict(mine: Operation, other: Operation) -> str | None:
    """Why my upsert cannot land after ``other`` (rule U1), or None. Only an Update with
    ``inserted_key_hashes`` is an upsert here; everything else returns None."""
    if not isinstance(mine, Update) or mine.inserted_key_hashes is None:
        return None
    if not mine.inserted_key_hashes or mine.inserted_rows is None:
        return None
    if isinstance(other, Append):
        if any(f.physical_rows for f in other.fragments):
            return "a concurrent Append added rows that may hold keys this upsert inserts"
        return None
    if not isinstance(other, Update):
        return None
    if other.inserted_rows is None:
        if other.new_fragments:
            return (
                "a concurrent Update added rows and records no inserted keys (pylance's "
                "merge-insert or an update): they may hold keys this upsert inserts"
            )
        return None
    if _field_ids(other.inserted_rows) != _field_ids(mine.inserted_rows):
        return "a concurrent upsert recorded keys over other columns"
    for h in mine.inserted_key_hashes:
        if may_contain(other.inserted_rows, h):
            return "a concurrent upsert inserted a key this upsert inserts"
    return None


def inserted_rows_filter(
    lds: Any, snapshot: Any, source: Any, keys: Sequence[str]
) -> tuple[bytes, frozenset[int]]:
    """(the ``inserted_rows`` record, the exact key hashes) of an upsert of ``source`` on
    ``keys`` planned against pylance dataset ``lds`` / txn_engine ``snapshot``: the keys
    of the source rows that are not in the table at that version."""
    ids = {f.name: f.id for f in snapshot.manifest.fields if f.parent_id == -1}
    field_ids = [ids[k] for k in keys]
    wanted = set(key_hashes(source, keys))
    if len(keys) == 1:
        import pyarrow.compute as pc  # type: ignore[import-untyped]

        values = source.column(keys[0]).unique()
        existing = lds.to_table(columns=list(keys), filter=pc.field(keys[0]).isin(values))
    else:
        existing = lds.to_table(columns=list(keys))
    inserted = frozenset(wanted - set(key_hashes(existing, keys)))
    return bloom_filter(field_ids, inserted), inserted
