"""The values an operation handler's conflict policy works with (pure, no I/O).

A handler (:class:`~txn_engine.builder.Handler`) holds the predicates of the matrix rules
where its operation type is *mine* (the transaction being committed), and its rebase. They
see the pair through a :class:`RuleContext` and record what they find with its ``retry`` /
``incompatible`` methods; :mod:`txn_engine.conflicts.detect` (a layer above) implements the
context and turns the records into :class:`~txn_engine.conflicts.Conflict` values. A rebase
returns :class:`Rebased` (the transaction moved onto the latest version and the deletion
files to write before its manifest) or :class:`RowClash` (both sides deleted or updated
the same rows), which :mod:`txn_engine.conflicts.rebase` turns into a retryable conflict.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, TypeVar

import attrs
from pyroaring import BitMap

from txn_engine._proto import table_pb2
from txn_engine.format.deletion import deletion_file_path
from txn_engine.model import Fragment
from txn_engine.transaction import Transaction

__all__ = [
    "DeletionReader",
    "FragmentLookup",
    "PendingDeletionFile",
    "Predicate",
    "RebaseTarget",
    "Rebased",
    "RowClash",
    "RuleContext",
    "expect",
]

_T = TypeVar("_T")

#: Returns my fragment ``id`` as of my transaction's read version (``None`` if absent).
FragmentLookup = Callable[[int], Fragment | None]

#: Reads a fragment's deletion vector: ``(fragment_id, DeletionFile pb) -> offsets``.
DeletionReader = Callable[[int, table_pb2.DeletionFile], BitMap]


class RuleContext(Protocol):
    """What a rule's predicate sees of one pair: my transaction, the one committed at
    ``version`` since my read version (``other``), and how to look up my fragments as of
    my read version (``lookup``; None when unavailable). A predicate records conflicts with
    :meth:`retry` / :meth:`incompatible` (``ids`` keywords: ``fragment_ids``, ``keys``,
    ``field_ids``, ``index_names``) and fragments whose deletion vectors must be merged in
    ``rebase_ids``; it never raises for a conflict."""

    @property
    def mine(self) -> Transaction: ...

    @property
    def other(self) -> Transaction: ...

    @property
    def version(self) -> int: ...

    @property
    def lookup(self) -> FragmentLookup | None: ...

    @property
    def conflicts(self) -> Sequence[object]:
        """What was recorded so far (empty: nothing yet)."""
        ...

    @property
    def rebase_ids(self) -> set[int]: ...

    def retry(self, detail: str = "", **ids: Iterable[int] | Iterable[str]) -> None: ...

    def incompatible(self, detail: str = "", **ids: Iterable[int] | Iterable[str]) -> None: ...


#: A matrix rule's predicate (named by its rule code in the handler's ``rules``).
Predicate = Callable[[RuleContext], None]


def expect(op: object, cls: type[_T]) -> _T:
    """``op`` as a ``cls`` (the matrix is keyed by kind, so a mismatch is a bug: TypeError)."""
    if not isinstance(op, cls):
        raise TypeError(f"expected {cls.__name__}, got {type(op).__name__}")
    return op


@attrs.frozen
class PendingDeletionFile:
    """A deletion file a rebase produced: write ``data`` at :attr:`path` before the
    manifest that references it."""

    fragment_id: int
    deletion_file: table_pb2.DeletionFile
    data: bytes

    @property
    def path(self) -> str:
        return deletion_file_path(self.fragment_id, self.deletion_file)


@attrs.frozen
class RebaseTarget:
    """What a rebase moves a transaction onto: the latest ``version`` and its
    ``fragments`` (sorted by id), the fragments my predicates marked
    (``RuleContext.rebase_ids``, rule D1), my fragments as of my read version
    (``initial_fragments``; None when nothing is marked), how to read a deletion vector
    (``read_dv``) and where the ids of new deletion files come from (``new_id``)."""

    version: int
    fragments: Sequence[table_pb2.DataFragment]
    rebase_fragment_ids: frozenset[int]
    initial_fragments: FragmentLookup | None
    read_dv: DeletionReader
    new_id: Callable[[], int]
    #: fragments where only concurrent Deletes met my Delete: rows both deleted are merged
    tolerant_fragment_ids: frozenset[int] = frozenset()


@attrs.frozen
class Rebased:
    """A transaction moved onto the latest version, and the deletion files it now needs."""

    transaction: Transaction
    writes: tuple[PendingDeletionFile, ...] = ()


@attrs.frozen
class RowClash:
    """A rebase found rows both sides deleted or updated (or a fragment gone): my
    transaction must be re-planned. ``rows`` samples the clashing row addresses."""

    detail: str
    fragment_ids: tuple[int, ...] = ()
    rows: tuple[int, ...] = ()
