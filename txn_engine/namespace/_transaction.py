"""A namespace transaction: changes to several tables that land together or not at all.

The steps (``docs/namespace.md`` draws them, ``models/namespace.pml`` checks them):

1. ``tx.open(table)`` *reserves* the table: a no-op version marked with the transaction's
   id (:mod:`txn_engine.namespace._resolve`); the next version number is the transaction's.
2. The returned :class:`~txn_engine.Table` plans each call as usual (pylance, txn_engine's
   conflict rules, re-planning) and its commit *stages* the manifest instead of creating it.
3. ``commit()`` (the ``with`` block's end) writes the decision, create-if-absent: the
   commit point. Then every staged manifest is published at its canonical name.

A crash before 3 leaves reservations that other writers abort after ``abort_after``; a
crash after it leaves staged manifests that the next reader or writer publishes.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from txn_engine.commit import CommitResult, commit
from txn_engine.conflicts.rebase import ConflictOptions
from txn_engine.errors import (
    IncompatibleTransactionError,
    InvalidOperationError,
    NamespaceTransactionAbortedError,
    RetriesExhaustedError,
    RetryableConflictError,
    StorageError,
)
from txn_engine.namespace._records import (
    MARKER_KEY,
    RESERVATION_KEY,
    Decision,
    TableEntry,
    new_transaction_id,
)
from txn_engine.namespace._resolve import ReservingHandler
from txn_engine.namespace._tables import NamespaceTables
from txn_engine.ops import UpdateConfig, UpdateMap
from txn_engine.retry import RetryPolicy
from txn_engine.storage.base import ForwardingStorage, Storage
from txn_engine.storage.handler import CommitHandler
from txn_engine.transaction import Transaction

if TYPE_CHECKING:
    from txn_engine.api import Table

__all__ = ["NamespaceTransaction", "Reserved", "StagingHandler", "WithHandler"]

_RESERVE_ATTEMPTS = 50
_POLICY = RetryPolicy(offer_after=None, host_carrier=False)


class WithHandler(ForwardingStorage):
    """A table's storage whose versions are created by ``commit_handler``."""

    def __init__(self, inner: Storage, handler: CommitHandler) -> None:
        super().__init__(inner)
        self.commit_handler = handler


class StagingHandler:
    """The commit handler of a table inside a transaction: the commit loop's "create
    version N" stages the manifest (N must be the reserved number) and records it."""

    def __init__(self, storage: Storage, txid: str, version: int) -> None:
        self._storage = storage
        self._txid = txid
        self.version = version
        self.staged: tuple[str, str] | None = None  # (staged path, canonical path)
        self.data: bytes | None = None  # the staged manifest

    @property
    def storage(self) -> Storage:
        """The table's storage."""
        return self._storage

    def commit(self, version: int, path: str, data: bytes) -> None:
        """Stage ``data`` as ``version`` (the reserved one; anything else means the
        reservation was aborted meanwhile)."""
        if self.staged is not None:
            raise InvalidOperationError(
                "a namespace transaction changes each table once: open another "
                "transaction for the next change"
            )
        if version != self.version:
            raise NamespaceTransactionAbortedError(
                f"{self._storage.uri}: namespace transaction {self._txid} reserved version "
                f"{self.version - 1} but the table moved on (it was aborted meanwhile)",
                remedy="run the transaction again",
            )
        staged = f"{path}-{self._txid}"
        self._storage.put(staged, data)
        self.staged = (staged, path)
        self.data = data

    def resolve(self, version: int, path: str) -> bool:
        """Whether ``version`` is staged here."""
        return self.staged is not None and version == self.version and path == self.staged[1]

    def finish_pending(self) -> Sequence[str]:
        """Nothing is pending in a stage."""
        return ()


@attrs.define
class Reserved:
    """A table a transaction reserved: its reservation version and the staged change."""

    parts: tuple[str, ...]
    storage: Storage
    version: int
    handler: StagingHandler
    table: Any = None


def reserve(
    ns: NamespaceTables,
    parts: tuple[str, ...],
    txid: str,
    may_wait: Callable[[str], bool] | None,
) -> Reserved:
    """Commit the reservation version of ``parts`` for ``txid`` (see the module doc)."""
    storage = ns.table_storage(parts)
    handler = ReservingHandler(storage, ns.resolver, parts, own=txid, may_wait=may_wait)
    view = WithHandler(storage, handler)
    op = UpdateConfig(config_updates=UpdateMap(entries=((MARKER_KEY, txid),)))
    last: Exception | None = None
    for _ in range(_RESERVE_ATTEMPTS):
        base = ns.latest(parts)
        handler.known = {base.version: base.manifest_pb.config.get(MARKER_KEY)}
        txn = Transaction(base.version, op, properties={RESERVATION_KEY: txid})
        try:
            landed = commit(view, txn, base=base, retry_policy=_POLICY)
        except (RetryableConflictError, IncompatibleTransactionError) as exc:
            if isinstance(exc, NamespaceTransactionAbortedError):
                raise
            last = exc  # another reservation landed first: settle it and go again
            continue
        staging = StagingHandler(storage, txid, landed.version + 1)
        return Reserved(parts, storage, landed.version, staging)
    raise RetriesExhaustedError(
        f"{storage.uri}: could not reserve the table for namespace transaction {txid}",
        remedy="contention: retry later",
    ) from last


class NamespaceTransaction:
    """Changes to several tables of a :class:`~txn_engine.Namespace`, committed together.

    Use it as a context manager (``with ns.transaction() as tx:``): the block's end
    commits, an exception in it aborts. ``tx.open(table_id)`` returns a
    :class:`~txn_engine.Table` whose calls plan now and land at the commit; each table
    changes once per transaction (one call; a second raises InvalidOperationError).
    Tables must exist (``Namespace.create_table``). ``tx.id`` names the transaction:
    ``Namespace.transaction(transaction_id=tx.id)`` after a crash tells whether it landed
    (``already_committed``).
    """

    def __init__(self, ns: NamespaceTables, transaction_id: str | None = None) -> None:
        self._ns = ns
        self.id = transaction_id or new_transaction_id()
        self._reserved: dict[tuple[str, ...], Reserved] = {}
        self._lock = threading.Lock()
        self.decision: Decision | None = None
        if transaction_id is not None:
            self.decision = ns.resolver.decision(self.id)

    @property
    def already_committed(self) -> bool:
        """Whether this transaction id is decided as committed (nothing more to do)."""
        return self.decision is not None and self.decision.committed

    def _may_wait(self, other: str) -> bool:
        """Wait-die: wait for an older transaction, give way to a younger one, unless
        this one holds no table yet (then waiting can deadlock nobody)."""
        return not self._reserved or self.id < other

    def _held(self, table_id: str | Sequence[str]) -> Reserved:
        if self.decision is not None:
            raise InvalidOperationError(f"namespace transaction {self.id} is already decided")
        parts = self._ns.require(table_id)
        with self._lock:
            found = self._reserved.get(parts)
            if found is None:
                found = reserve(self._ns, parts, self.id, self._may_wait)
                found.table = self._ns.table_with(parts, WithHandler(found.storage, found.handler))
                self._reserved[parts] = found
        return found

    def open(self, table_id: str | Sequence[str]) -> Table:
        """The table's writer handle inside this transaction (reserving it first)."""
        return self._held(table_id).table  # type: ignore[no-any-return]

    def add(
        self,
        table_id: str | Sequence[str],
        transaction: Transaction | Any,
        *,
        conflict_options: ConflictOptions | None = None,
    ) -> CommitResult:
        """Add a transaction planned elsewhere (a Spark job's ``FragmentCollector
        .transaction(fragments)``, pylance's ``*_uncommitted``) as this table's change. It
        is checked against every version after its read version by txn_engine's rules, as
        :func:`txn_engine.commit` does (RetryableConflictError: plan it again), and lands
        at the transaction's commit point."""
        held = self._held(table_id)
        view = WithHandler(held.storage, held.handler)
        return commit(view, transaction, retry_policy=_POLICY, conflict_options=conflict_options)

    def adopt(self, reserved: Reserved) -> None:
        """Count a table reserved by :func:`reserve` for this transaction as its own."""
        with self._lock:
            self._reserved[reserved.parts] = reserved

    def commit(self) -> dict[str, int]:
        """Write the commit point, publish every change; return the new version of each
        changed table (by dotted id). Calling it again after CommitStateUnknownError
        settles the same transaction."""
        if self.decision is None:
            entries = tuple(_entry(r) for r in self._reserved.values())
            if not any(e.version is not None for e in entries):
                self.abort()
                return {}
            decided = self._ns.resolver.decide(Decision(self.id, "committed", entries))
            self.decision = decided
        if not self.decision.committed:
            raise NamespaceTransactionAbortedError(
                f"namespace transaction {self.id} was aborted before its commit point "
                "(another writer waited longer than abort_after)",
                remedy="run the transaction again",
            )
        staged = {p: r.handler.data for p, r in self._reserved.items() if r.handler.data}
        self._ns.publish_all(self.decision, staged)
        return {".".join(e.id): e.version for e in self.decision.tables if e.version is not None}

    def abort(self) -> None:
        """Abort (nothing becomes visible); a decided transaction stays as decided."""
        if self.decision is None:
            self.decision = self._ns.resolver.abort(self.id)

    def __enter__(self) -> NamespaceTransaction:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.commit()
            return
        with contextlib.suppress(StorageError):  # others abort it after abort_after anyway
            self.abort()


def _entry(reserved: Reserved) -> TableEntry:
    staged = reserved.handler.staged
    if staged is None:
        return TableEntry(reserved.parts, None, None, None)
    return TableEntry(reserved.parts, reserved.handler.version, staged[0], staged[1])
