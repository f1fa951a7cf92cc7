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

Beyond the rule (``ConflictOptions.key_reader``, which ``te.open`` and the Spark integration
set): when the only conflicts are U1 against a transaction that added rows without an
inserted-keys filter (an Append, pylance's merge-insert or update), the keys of the rows it
added are read (:class:`PylanceKeyReader`) and the upsert lands when none of them is a key
it inserts (:func:`added_keys_collide`). That is what a serial run gives: the added rows
hold none of my keys, so every key I insert is still new after them, and the rows I update
are in fragments the other did not touch (the matrix checked that).

The rule is the Update handler's (:func:`txn_engine.builder.rows.upsert_conflict`) and
the filter lives beside it (``txn_engine.builder._keys``); this module re-exports both
and plans an upsert's filter against a pylance dataset (:func:`inserted_rows_filter`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from txn_engine.builder._keys import (
    FPP,
    bloom_filter,
    filter_field_ids,
    key_hash,
    key_hashes,
    may_contain,
)
from txn_engine.builder.rows import upsert_conflict
from txn_engine.conflicts.isolation import added_fragments
from txn_engine.model import Fragment
from txn_engine.ops import Append, Update
from txn_engine.transaction import Transaction

__all__ = [
    "FPP",
    "KeyReader",
    "PylanceKeyReader",
    "added_keys_collide",
    "bloom_filter",
    "inserted_rows_filter",
    "key_hash",
    "key_hashes",
    "may_contain",
    "upsert_conflict",
]


def inserted_rows_filter(
    lds: Any,
    snapshot: Any,
    source: Any,
    keys: Sequence[str],
    inserted_rows: int | None = None,
    touched: Sequence[int] | None = None,
) -> tuple[bytes, frozenset[int]]:
    """(the ``inserted_rows`` record, the exact key hashes) of an upsert of ``source`` on
    ``keys`` planned against pylance dataset ``lds`` / txn_engine ``snapshot``: the keys
    of the source rows that are not in the table at that version.

    ``inserted_rows``: how many rows the plan inserts (pylance's ``num_inserted_rows``),
    when known. None inserted, or every source row inserted (so none of their keys is in
    the table), decides the keys without scanning the table; otherwise the table's rows
    with the source's keys are read: only those of the fragments in ``touched`` when given
    (the fragments the plan updated or removed, for an upsert that touches every matched
    row: a key it finds nowhere else would only be counted as inserted, which makes the
    conflict checks stricter, never looser)."""
    ids = {f.name: f.id for f in snapshot.manifest.fields if f.parent_id == -1}
    field_ids = [ids[k] for k in keys]
    wanted = set(key_hashes(source, keys))
    if inserted_rows == 0:
        inserted: frozenset[int] = frozenset()
    elif inserted_rows is not None and inserted_rows == source.num_rows:
        inserted = frozenset(wanted)
    else:
        existing = _existing(lds, source, keys, touched)
        inserted = frozenset(wanted - set(key_hashes(existing, keys)))
    return bloom_filter(field_ids, inserted), inserted


def _existing(lds: Any, source: Any, keys: Sequence[str], touched: Sequence[int] | None) -> Any:
    """The key columns of the table's rows (of the fragments ``touched`` when given) that
    may hold one of ``source``'s keys."""
    scan: dict[str, Any] = {"columns": list(keys)}
    if len(keys) == 1:
        import pyarrow.compute as pc  # type: ignore[import-untyped]

        scan["filter"] = pc.field(keys[0]).isin(source.column(keys[0]).unique())
    if touched is None:
        return lds.to_table(**scan)
    fragments = [f for f in (lds.get_fragment(i) for i in sorted(set(touched))) if f is not None]
    if not fragments:
        return source.select(list(keys)).slice(0, 0)  # no row of the table was touched
    return lds.scanner(**scan, fragments=fragments).to_table()


#: ``(version, fragments, key field ids) -> the key hashes of the rows of those fragments
#: (as committed in ``version``)``, or None when they cannot be read
KeyReader = Callable[[int, Sequence[Fragment], Sequence[int]], "frozenset[int] | None"]


def _unfiltered_rows(other: Transaction) -> tuple[Fragment, ...] | None:
    """The fragments ``other`` added rows in without recording their keys (an Append, or
    an Update with no inserted-keys filter), or None when it is not such a transaction."""
    op = other.operation
    if isinstance(op, Append) or (isinstance(op, Update) and op.inserted_rows is None):
        return added_fragments(other)
    return None


def added_keys_collide(
    mine: Transaction, other: Transaction, version: int, reader: KeyReader
) -> bool:
    """Whether the rows ``other`` (committed at ``version``) added may hold a key my upsert
    inserts: True unless ``reader`` read every added row's key and none is one of mine."""
    op = mine.operation
    if not isinstance(op, Update) or not op.inserted_key_hashes or op.inserted_rows is None:
        return True
    field_ids = filter_field_ids(op.inserted_rows)
    added = _unfiltered_rows(other)
    if not field_ids or added is None:
        return True
    hashes = reader(version, added, field_ids)
    return hashes is None or not hashes.isdisjoint(op.inserted_key_hashes)


class PylanceKeyReader:
    """A :data:`KeyReader` for the dataset at ``uri``: reads the key columns straight from
    the added fragments' data files with pylance's file reader (no dataset open per
    version; every physical row, so a row deleted since only adds a hash, never hides
    one). The key columns' names come from the latest schema, read once per reader."""

    def __init__(self, uri: str, storage_options: dict[str, str] | None = None) -> None:
        self.uri = uri
        self.storage_options = storage_options
        self._names: dict[int, str] = {}

    def _names_of(self, field_ids: Sequence[int]) -> list[str] | None:
        if any(i not in self._names for i in field_ids):
            import lance

            ds: Any = lance.dataset(self.uri, storage_options=self.storage_options)
            self._names = {f.id(): f.name() for f in ds.lance_schema.fields()}
        if any(i not in self._names for i in field_ids):
            return None
        return [self._names[i] for i in field_ids]

    def __call__(
        self, version: int, fragments: Sequence[Fragment], field_ids: Sequence[int]
    ) -> frozenset[int] | None:
        from lance.file import LanceFileReader

        names = self._names_of(field_ids)
        if names is None:
            return None
        hashes: set[int] = set()
        root = self.uri.rstrip("/")
        for frag in fragments:
            holding = [f for f in frag.files if set(field_ids) <= set(f.fields)]
            if len(holding) != 1 or holding[0].base_id is not None:
                return None  # keys split over files, or stored under another base
            reader = LanceFileReader(
                f"{root}/data/{holding[0].path}",
                storage_options=self.storage_options,
                columns=names,
            )
            hashes.update(key_hashes(reader.read_all().to_table(), names))
        return frozenset(hashes)
