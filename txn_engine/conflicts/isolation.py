"""Isolation levels: ``"snapshot"`` (the default, Lance's) and ``"serializable"``.

Under snapshot isolation a Delete or Update planned at version *v* is checked against the
fragments and rows it changed (the matrix). Under serializable isolation it also conflicts
(retryable) with a concurrent transaction that added rows its predicate could match: the
rows it would have read had it run after that transaction. Blind appends never conflict
with each other at either level.

What a transaction read is its predicate: a Delete's own ``predicate`` (Lance serializes
it), or the transaction property :data:`READ_PREDICATE` (pylance 14 reads transaction
properties and ignores unknown keys). An empty predicate reads every row. A Delete/Update
that records neither read an unknown set of rows: any concurrent added row conflicts.

A table asks for a level with the config key :data:`ISOLATION_CONFIG`
(``"txn_engine.isolation"``); every txn_engine writer takes the stronger of its own level
and the one the latest version's config names (:func:`table_isolation`), so a writer can
ask for serializable on a snapshot table but cannot weaken a serializable one.

:func:`serializable_conflict` is pure: whether added rows match a predicate is asked of a
:data:`RowMatcher` (:func:`pylance_matcher` evaluates it with pylance on the added
fragments' rows); without one, any added row conflicts (never a guess that they do not).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from txn_engine.model import Fragment
from txn_engine.ops import Append, Delete, Update
from txn_engine.transaction import Transaction

__all__ = [
    "ISOLATION_CONFIG",
    "ISOLATION_LEVELS",
    "PylanceMatcher",
    "READERS",
    "READ_PREDICATE",
    "added_fragments",
    "SERIALIZABLE",
    "SNAPSHOT",
    "RowMatcher",
    "pylance_matcher",
    "read_predicate",
    "serializable_conflict",
    "table_isolation",
]

SNAPSHOT = "snapshot"
SERIALIZABLE = "serializable"
ISOLATION_LEVELS = (SNAPSHOT, SERIALIZABLE)

#: the kinds whose predicate a concurrent insert can invalidate (serializable isolation)
READERS = frozenset({"Delete", "Update"})

#: table config key naming the table's isolation level (a floor for every txn_engine writer)
ISOLATION_CONFIG = "txn_engine.isolation"

#: transaction property holding the SQL predicate a Delete/Update read ("" = every row)
READ_PREDICATE = "txn_engine.read_predicate"

#: ``(version, fragments, predicate) -> whether a live row of those fragments (as committed
#: in ``version``) matches the SQL predicate``
RowMatcher = Callable[[int, Sequence[Fragment], str], bool]


def table_isolation(config: Mapping[str, str]) -> str:
    """The isolation level a table's ``config`` asks for: :data:`SNAPSHOT` when the key
    :data:`ISOLATION_CONFIG` is absent or ``"snapshot"``, else :data:`SERIALIZABLE` (a value
    this version does not know is taken as the strongest level it knows, never weaker)."""
    value = config.get(ISOLATION_CONFIG)
    if value is None or value.strip().lower() == SNAPSHOT:
        return SNAPSHOT
    return SERIALIZABLE


def read_predicate(txn: Transaction) -> str | None:
    """The predicate ``txn`` read (``""``: every row), or None when it records none."""
    recorded = dict(txn.properties).get(READ_PREDICATE)
    if recorded is not None:
        return recorded
    op = txn.operation
    if isinstance(op, Delete) and op.predicate:
        return op.predicate
    return None


def added_fragments(other: Transaction) -> tuple[Fragment, ...]:
    """The fragments with rows that ``other`` (an Append or an Update) added; empty for
    every other operation."""
    op = other.operation
    if isinstance(op, Append):
        frags = op.fragments
    elif isinstance(op, Update):
        frags = op.new_fragments
    else:
        return ()
    return tuple(f for f in frags if f.physical_rows)


def serializable_conflict(
    mine: Transaction, other: Transaction, version: int, matches: RowMatcher | None
) -> str | None:
    """Why ``mine`` (a Delete/Update) cannot land serializably after ``other`` (committed
    at ``version``), or None. Only transactions that add rows can conflict."""
    if not isinstance(mine.operation, (Delete, Update)):
        return None
    added = added_fragments(other)
    if not added:
        return None
    predicate = read_predicate(mine)
    if predicate is None:
        return "it records no predicate, and a concurrent transaction added rows"
    if not predicate.strip():
        return "it read every row, and a concurrent transaction added rows"
    if matches is None:
        return "a concurrent transaction added rows that cannot be checked against its predicate"
    if matches(version, added, predicate):
        return f"a concurrent transaction added rows matching its predicate ({predicate})"
    return None


class PylanceMatcher:
    """A :data:`RowMatcher` reading the added fragments of the dataset at ``uri`` with
    pylance (found in the committed version by their data files)."""

    def __init__(self, uri: str, storage_options: dict[str, str] | None = None) -> None:
        self.uri = uri
        self.storage_options = storage_options

    def __call__(self, version: int, fragments: Sequence[Fragment], predicate: str) -> bool:
        import lance

        ds: Any = lance.dataset(self.uri, version=version, storage_options=self.storage_options)
        paths = {f.files[0].path for f in fragments if f.files}
        found = 0
        for frag in ds.get_fragments():
            files = frag.data_files()
            if files and files[0].path in paths:
                found += 1
                if frag.count_rows(filter=predicate) > 0:
                    return True
        return found < len(paths)  # a fragment not found cannot be proved unmatched


def pylance_matcher(uri: str, storage_options: dict[str, str] | None = None) -> RowMatcher:
    """The :class:`PylanceMatcher` of the dataset at ``uri``."""
    return PylanceMatcher(uri, storage_options)
