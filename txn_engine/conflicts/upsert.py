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

The rule is the Update handler's (:func:`txn_engine.builder.rows.upsert_conflict`) and
the filter lives beside it (``txn_engine.builder._keys``); this module re-exports both
and plans an upsert's filter against a pylance dataset (:func:`inserted_rows_filter`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from txn_engine.builder._keys import FPP, bloom_filter, key_hash, key_hashes, may_contain
from txn_engine.builder.rows import upsert_conflict

__all__ = [
    "FPP",
    "bloom_filter",
    "inserted_rows_filter",
    "key_hash",
    "key_hashes",
    "may_contain",
    "upsert_conflict",
]


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
