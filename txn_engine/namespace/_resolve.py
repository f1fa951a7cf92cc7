"""Deciding, waiting for and rolling forward namespace transactions; the commit handlers.

A namespace transaction ``T`` first *reserves* each of its tables: it commits a no-op
version there (an ``UpdateConfig`` that sets the config key :data:`MARKER_KEY` to ``T``),
so the next version number of the table is ``T``'s. It then builds and *stages* its change
of each table as that next version (a manifest under ``_versions/<name>.manifest-<T>``,
which no Lance reader lists), and writes its *decision* with create-if-absent: the one
conditional write that makes every change visible at once. Last, it *publishes* each staged
manifest at its canonical name (create-if-absent, same bytes: anyone may do it).

Every writer of a namespace table checks, before it creates a version, the marker its own
manifest carries (config is copied from version to version): a marker ``T`` whose change is
exactly the version being created means that number is ``T``'s. Committed: publish ``T``'s
manifest there (roll forward) and lose the race. Undecided: wait for the decision, and past
``abort_after`` seconds write ``T``'s decision as *aborted* (create-if-absent again: the
first writer of the decision wins, so ``T`` and the aborter never both succeed). Aborted: the
number is free; ``T``'s reservation stays behind as a no-op version.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from txn_engine.errors import (
    AmbiguousWriteError,
    CommitStateUnknownError,
    CorruptManifestError,
    NamespaceTransactionAbortedError,
    ObjectExistsError,
    ObjectNotFoundError,
    StorageError,
)
from txn_engine.format.manifest_file import decode_manifest_file
from txn_engine.format.naming import manifest_path, parse_manifest_name
from txn_engine.namespace._records import (
    MARKER_KEY,
    Decision,
    TableEntry,
    decision_path,
    started_ns,
)
from txn_engine.storage.base import ForwardingStorage, Storage, get_bounded
from txn_engine.storage.handler import StoreCommitHandler

__all__ = ["NamespaceCommitHandler", "Resolver", "ReservingHandler", "marker_of"]

_CACHE_SIZE = 4096
#: the longest pause between two reads of a decision a writer waits for
_POLL_MAX = 0.05
_MAX_MANIFEST = 1 << 30
_MAX_DECISION = 16 << 20

#: may_wait(other) -> whether a waiting transaction may wait for ``other`` (wait-die)
MayWait = Callable[[str], bool]


def marker_of(data: bytes) -> str | None:
    """The namespace transaction marker a manifest file carries (None: none)."""
    return decode_manifest_file(data, check_flags=False).manifest.config.get(MARKER_KEY)


class Resolver:
    """Decisions of one namespace's transactions (``root``: the namespace root storage).

    Final decisions are cached (they never change); ``abort_after`` is how long a writer
    waits for an undecided transaction before it aborts it.
    """

    def __init__(
        self,
        root: Storage,
        *,
        abort_after: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._root = root
        self.abort_after = abort_after
        self._clock = clock
        self._sleep = sleep
        self._cache: OrderedDict[str, Decision] = OrderedDict()
        self._lock = threading.Lock()

    def decision(self, txid: str) -> Decision | None:
        """``txid``'s decision, or None while it is undecided."""
        with self._lock:
            found = self._cache.get(txid)
        if found is not None:
            return found
        path = decision_path(txid)
        try:
            data = get_bounded(self._root, path, _MAX_DECISION)
        except ObjectNotFoundError:
            return None
        decided = Decision.from_bytes(data, f"{self._root.uri}/{path}")
        if decided.transaction != txid:
            raise CorruptManifestError(f"{self._root.uri}/{path}: decision of another id")
        self._remember(decided)
        return decided

    def _remember(self, decided: Decision) -> None:
        with self._lock:
            self._cache[decided.transaction] = decided
            while len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)

    def decide(self, decision: Decision) -> Decision:
        """Write ``decision`` unless one exists; return the decision that stands (ours,
        or the one written first). A lost response is settled by reading it back; one
        that stays unsettled after three tries raises CommitStateUnknownError."""
        path = decision_path(decision.transaction)
        for _ in range(3):
            try:
                self._root.put_if_absent(path, decision.to_bytes())
            except (ObjectExistsError, AmbiguousWriteError):
                found = self.decision(decision.transaction)
                if found is not None:
                    return found
                continue  # the ambiguous write did not land: write it again
            self._remember(decision)
            return decision
        raise CommitStateUnknownError(
            f"the decision of namespace transaction {decision.transaction} could not be "
            "written or read back",
            remedy="commit the same transaction again (same id) to settle it",
        )

    def abort(self, txid: str) -> Decision:
        """Abort ``txid`` unless it is decided already; the decision that stands."""
        return self.decide(Decision(txid, "aborted"))

    def wait(self, txid: str, may_wait: MayWait | None = None) -> Decision:
        """Wait for ``txid``'s decision; abort it after ``abort_after`` seconds. With
        ``may_wait`` (a transaction that holds tables of its own) refusing, raise
        NamespaceTransactionAbortedError at once instead of waiting (wait-die), unless
        ``txid`` started more than ``abort_after`` ago: then abort it."""
        started = self._clock()
        delay = 0.002
        while True:
            found = self.decision(txid)
            if found is not None:
                return found
            if may_wait is not None and not may_wait(txid):
                born = started_ns(txid)
                overdue = born is not None and time.time_ns() - born > self.abort_after * 1e9
                if overdue:  # older, but older than abort_after: its writer is gone
                    return self.abort(txid)
                # give the older one time to take the table before this one runs again
                # (longer than a waiter's longest poll): else a quick re-run reserves it
                # first, again and again
                self._sleep(_POLL_MAX + random.random() * 2 * _POLL_MAX)
                raise NamespaceTransactionAbortedError(
                    f"a table is reserved by the older namespace transaction {txid}: this "
                    "younger one gives way (nothing of it is visible)",
                    remedy="run the transaction again",
                )
            if self._clock() - started >= self.abort_after:
                return self.abort(txid)
            self._sleep(delay)
            delay = min(delay * 2, _POLL_MAX)

    def publish(self, table: Storage, entry: TableEntry, data: bytes | None = None) -> None:
        """Copy a committed transaction's staged manifest to its canonical name (create-if-
        absent; finding the same bytes there is success). ``data``: the staged bytes, when
        the caller staged them itself (no read)."""
        if entry.staged is None or entry.path is None:
            return
        if data is None:
            try:
                data = get_bounded(table, entry.staged, _MAX_MANIFEST)
            except ObjectNotFoundError:
                if table.exists(entry.path):
                    return  # published, and the staged copy already removed
                raise
        try:
            table.put_if_absent(entry.path, data)
        except (ObjectExistsError, AmbiguousWriteError):
            if get_bounded(table, entry.path, _MAX_MANIFEST) != data:
                raise CorruptManifestError(
                    f"{table.uri}/{entry.path}: another manifest took a committed "
                    "transaction's version (a writer that bypasses the namespace?)"
                ) from None
        with contextlib.suppress(StorageError):  # a leftover copy is harmless: never listed
            table.delete(entry.staged)

    def settle(
        self,
        table: Storage,
        parts: Sequence[str],
        version: int,
        marker: str,
        may_wait: MayWait | None = None,
    ) -> None:
        """Before a writer creates ``version`` of ``table`` on a manifest marked by
        ``marker``: return when the number is free; raise ObjectExistsError (after
        publishing it) when it is a committed transaction's."""
        found = self.decision(marker)
        if found is None:
            found = self.wait(marker, may_wait)
        if not found.committed:
            return
        entry = found.entry(parts)
        if entry is not None and entry.version == version:
            self.publish(table, entry)
            raise ObjectExistsError(
                f"{table.uri}: version {version} is namespace transaction {marker}'s"
            )


class NamespaceCommitHandler(StoreCommitHandler):
    """The store's create-if-absent, after :meth:`Resolver.settle` of the marker the new
    manifest carries (see the module docstring). Every writer of a namespace table
    creates its versions through this handler (or its :class:`ReservingHandler`)."""

    def __init__(
        self,
        storage: Storage,
        resolver: Resolver,
        parts: Sequence[str],
        *,
        own: str | None = None,
        may_wait: MayWait | None = None,
    ) -> None:
        super().__init__(storage)
        self._resolver = resolver
        self._parts = tuple(parts)
        self._own = own
        self._may_wait = may_wait

    def __repr__(self) -> str:
        return f"NamespaceCommitHandler({self._storage!r}, {self._parts!r})"

    @property
    def storage(self) -> Storage:
        """The table's storage, as a view that carries this handler: whatever the commit
        loop starts from it (a carrier it hosts, a retry) creates versions through the
        namespace too."""
        return _HandlerView(self._storage, self)

    def commit(self, version: int, path: str, data: bytes) -> None:
        """Settle the marker, then create the manifest (ObjectExistsError when taken)."""
        marker = marker_of(data)
        if marker is not None and marker != self._own:
            self._resolver.settle(self.storage, self._parts, version, marker, self._may_wait)
        super().commit(version, path, data)


class ReservingHandler(NamespaceCommitHandler):
    """Commits a transaction's reservation: its manifest carries the transaction's own
    marker, so the marker to settle is the one of the version below (read here, unless
    ``known`` gives it: ``{version: marker}`` of the base the caller just read)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.known: dict[int, str | None] = {}

    def commit(self, version: int, path: str, data: bytes) -> None:
        """Settle the marker of ``version - 1``, then create the reservation."""
        parsed = parse_manifest_name(path.rsplit("/", 1)[-1])
        if version - 1 in self.known:
            marker = self.known[version - 1]
            if marker is not None and marker != self._own:
                self._resolver.settle(self.storage, self._parts, version, marker, self._may_wait)
        elif parsed is not None and version > 1:
            below = manifest_path(version - 1, parsed[1])
            try:
                marker = marker_of(get_bounded(self.storage, below, _MAX_MANIFEST))
            except ObjectNotFoundError:
                marker = None  # gone (cleaned up): the commit loop decides
            if marker is not None and marker != self._own:
                self._resolver.settle(self.storage, self._parts, version, marker, self._may_wait)
        StoreCommitHandler.commit(self, version, path, data)


class _HandlerView(ForwardingStorage):
    """A storage whose ``commit_handler`` is the namespace's (see
    :attr:`NamespaceCommitHandler.storage`)."""

    def __init__(self, inner: Storage, handler: NamespaceCommitHandler) -> None:
        super().__init__(inner)
        self.commit_handler = handler
