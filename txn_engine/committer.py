"""Group commit: many threads, one version per group of compatible transactions.

A web service, a multi-threaded writer or a Spark driver committing many jobs shares one
:class:`Committer` per table. Callers hand it transactions from any thread::

    with txn_engine.Committer("/data/table.lance") as committer:
        result = committer.commit(txn)          # blocks; or committer.submit(txn) -> Future

One worker thread takes everything queued since its last commit and lands it in order:
consecutive Appends become **one** Append (one conditional PUT of one manifest for N
transactions); any other operation is committed alone, in its place in the order. Each caller
gets its own outcome:

* its :class:`~txn_engine.commit.CommitResult` (the group's version, the caller's own
  transaction);
* its own typed conflict: when a group meets a conflict (say an Overwrite landed after the
  oldest member's read version), every member is committed alone, so only the members the
  conflict really concerns get the error;
* :class:`~txn_engine.errors.CommitStateUnknownError` when the group's PUT response was lost
  and could not be settled. Exactly once still holds per caller: the group transaction
  records its members' uuids (``txn_engine.group_members``), so committing the caller's
  transaction again, here or with :func:`txn_engine.commit` anywhere, finds it if the group
  landed and lands it once if not.
* a transaction submitted again while a copy of it (same uuid) is queued, say by a caller
  whose ``commit(txn, timeout=...)`` timed out, lands once: the later copy gets the first
  one's outcome (its version, ``already_committed=True``, or the same error). A copy submitted
  while the first one is being committed, or after it landed, is committed on its own and
  found landed by its uuid (``already_committed``). A *different* transaction under a uuid
  already queued gets :class:`~txn_engine.errors.InvalidOperationError`.

While batches commit, the committer holds a :func:`txn_engine.lease` at or below the
oldest read version queued, so a concurrent :func:`txn_engine.retention.cleanup` keeps the
history the members must be checked against. The lease is kept from batch to batch while it
still covers the batch (taking one costs round trips: on an object store more than the
group commit itself); it is taken again, at the batch's oldest read version, when a batch
reads below it or when it is older than ``repin_after`` seconds, and released once the
committer has been idle for ``idle_release`` seconds, and on :meth:`Committer.close`.

The group's read version is the oldest member's, so the group is checked against every
version any member has not seen; an Append is compatible with other Appends, so grouping
never makes a conflict that committing one by one would not (the fallback above settles the
rare Overwrite-in-between case precisely).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, InvalidStateError
from typing import Any

import attrs

from txn_engine.commit import CommitResult, commit
from txn_engine.conflicts.rebase import ConflictOptions
from txn_engine.contention.offers import can_carry
from txn_engine.errors import (
    CommitConflictError,
    CommitStateUnknownError,
    DatasetNotFoundError,
    InvalidOperationError,
    TxnEngineError,
    VersionNotFoundError,
)
from txn_engine.interop import as_transaction, is_pylance
from txn_engine.leases import Lease, lease
from txn_engine.ops import Append
from txn_engine.retry import RetryPolicy
from txn_engine.session import Session, bind, current, using
from txn_engine.storage import open_storage
from txn_engine.storage.base import Storage
from txn_engine.transaction import GROUP_MEMBERS_KEY, Transaction

__all__ = ["Committer"]

#: the longest wait a Committer's worker accepts (``threading`` cannot wait much longer)
_MAX_WAIT = 1e6


@attrs.define
class _Pending:
    txn: Transaction
    future: Future[CommitResult]


class Committer:
    """A thread-safe, in-process group committer for one table (see the module docstring).

    * ``max_group``: most transactions in one version (default 256).
    * ``retry_policy`` / ``conflict_options`` / ``transaction_file``: as for
      :func:`txn_engine.commit`, per commit.
    * ``repin_after`` / ``idle_release``: seconds after which the lease the committer holds
      is moved up to the oldest queued read version / released when nothing is queued
      (defaults 30 and 1): how long a committer may keep cleanup from removing versions.
    * ``session``: the :class:`~txn_engine.session.Session` its commits use (default: the
      one current when it is made).

    Use it as a context manager, or call :meth:`close` when done: queued transactions are
    still committed, then the worker stops. :meth:`submit` after close raises
    :class:`~txn_engine.errors.InvalidOperationError`.
    """

    def __init__(
        self,
        uri_or_storage: str | os.PathLike[str] | Storage,
        *,
        storage_options: Mapping[str, Any] | None = None,
        retry_policy: RetryPolicy | None = None,
        conflict_options: ConflictOptions | None = None,
        max_group: int = 256,
        repin_after: float = 30.0,
        idle_release: float = 1.0,
        transaction_file: bool = False,
        session: Session | None = None,
    ) -> None:
        if type(max_group) is not int or max_group < 1:
            raise InvalidOperationError(f"max_group must be an integer >= 1, got {max_group!r}")
        for name, seconds in (("repin_after", repin_after), ("idle_release", idle_release)):
            # the worker waits this long: NaN or infinity would end it (OverflowError)
            if not isinstance(seconds, (int, float)) or not 0 <= seconds < _MAX_WAIT:
                raise InvalidOperationError(
                    f"{name} must be a number of seconds from 0 to {_MAX_WAIT:g}, got {seconds!r}"
                )
        #: the session its commits run in (default: the one current where it is made)
        self.session = session or current()
        with using(self.session):
            self._storage = open_storage(uri_or_storage, storage_options)
        self._policy = retry_policy
        self._options = conflict_options
        self._transaction_file = transaction_file
        self._max_group = max_group
        self._queue: list[_Pending] = []
        self._cv = threading.Condition()
        self._closed = False
        self._worker: threading.Thread | None = None
        self._repin_after = repin_after
        self._idle_release = idle_release
        self._pin: Lease | None = None  # held by the worker thread only
        self._pinned_at = 0.0
        #: versions landed by this committer and how many transactions each carried
        self.groups: list[tuple[int, int]] = []

    def __repr__(self) -> str:
        return f"Committer({self._storage!r}, queued={len(self._queue)})"

    # ---- public ---------------------------------------------------------------------------

    def submit(self, transaction: Transaction) -> Future[CommitResult]:
        """Queue ``transaction`` (a txn_engine Transaction, or pylance's own, converted
        here); the Future gives its CommitResult or raises its error."""
        return self.submit_all([transaction])[0]

    def submit_all(self, transactions: Sequence[Transaction]) -> list[Future[CommitResult]]:
        """Queue ``transactions`` together, in order (the worker sees all of them at once,
        so consecutive Appends among them land in one version); one Future each. A pylance
        ``Transaction`` is converted here (:func:`txn_engine.interop.as_transaction`)."""
        transactions = [_entering(transaction) for transaction in transactions]
        futures: list[Future[CommitResult]] = [Future() for _ in transactions]
        with self._cv:
            if self._closed:
                raise InvalidOperationError("this Committer is closed")
            self._queue.extend(_Pending(t, f) for t, f in zip(transactions, futures, strict=True))
            if self._worker is None:
                self._worker = threading.Thread(
                    target=bind(self.session, self._run), name="txn_engine-committer", daemon=True
                )
                self._worker.start()
            self._cv.notify()
        return futures

    def commit(self, transaction: Transaction, timeout: float | None = None) -> CommitResult:
        """Commit ``transaction`` (possibly together with other callers'); block until it
        landed or failed. Raises what :func:`txn_engine.commit` raises."""
        return self.submit(transaction).result(timeout)

    def close(self) -> None:
        """Commit what is queued, then stop the worker (idempotent)."""
        with self._cv:
            self._closed = True
            self._cv.notify()
            worker = self._worker
        if worker is not None:
            worker.join()

    def __enter__(self) -> Committer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- the worker -----------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                with self._cv:
                    while not self._queue and not self._closed:
                        if self._pin is None:
                            self._cv.wait()
                        elif not self._cv.wait(self._idle_release) and not self._queue:
                            break  # idle: release the lease below, outside the lock
                    if not self._queue and self._closed:
                        return
                    batch, self._queue = self._queue, []
                if not batch:
                    self._unpin()
                    continue
                try:
                    self._commit_batch(batch)
                except BaseException as exc:  # the worker lives on: no Future is left waiting
                    for item in batch:
                        if not item.future.done():
                            with contextlib.suppress(InvalidStateError):
                                item.future.set_exception(exc)
                    if not isinstance(exc, Exception):
                        raise
        finally:
            self._unpin()

    def _commit_batch(self, batch: Sequence[_Pending]) -> None:
        live, copies = _distinct(batch)
        if not live:
            return
        try:
            self._cover(min(p.txn.read_version for p in live))
        except TxnEngineError:
            # no lease (the store failed): the commits still check every version they
            # need and report one a cleanup removed, so none is skipped
            self._unpin()
        for run in _runs(live, self._max_group):
            if len(run) == 1:
                self._settle_alone(run[0])
            else:
                self._group(run)
        for copy, first in copies:
            _settle_copy(copy, first)

    def _cover(self, version: int) -> None:
        """Hold a lease at or below ``version`` (the oldest read version of the batch):
        keep the one held when it covers it and is younger than ``repin_after``; else take
        one at ``version`` and then release the old one."""
        held = self._pin
        now = time.monotonic()
        if (
            held is not None
            and held.held()
            and held.version <= version
            and now - self._pinned_at < self._repin_after
        ):
            return
        self._pin = self._lease(version)
        self._pinned_at = now
        if held is not None:
            with contextlib.suppress(Exception):
                held.release()

    def _unpin(self) -> None:
        held, self._pin = self._pin, None
        if held is not None:
            with contextlib.suppress(Exception):
                held.release()

    def _lease(self, version: int) -> Lease | None:
        """A lease on the oldest read version queued, held while the batch commits, so a
        cleanup keeps the history its members must be checked against (None when the
        version is already gone: the commits then report it)."""
        if version <= 0:
            return None
        try:
            return lease(self._storage, version, owner="txn_engine.Committer")
        except (VersionNotFoundError, DatasetNotFoundError):
            return None

    def _commit(self, txn: Transaction) -> CommitResult:
        """Commit under the batch's lease: checked before the create; one that lapsed (the
        worker stalled past its ttl) is taken again first, on the read version, so that
        nothing is created on a history a cleanup may have removed meanwhile."""
        held = self._pin
        if held is not None and not held.held():
            self._cover(txn.read_version)  # takes a new one
            held = self._pin
        return commit(
            self._storage,
            txn,
            retry_policy=self._policy,
            conflict_options=self._options,
            transaction_file=self._transaction_file,
            lease=held if held is not None and held.version <= txn.read_version else None,
        )

    def _group(self, live: Sequence[_Pending]) -> None:
        group = _merge([p.txn for p in live])
        try:
            result = self._commit(group)
        except CommitConflictError:
            for item in live:  # each member alone: only the ones concerned get the error
                self._settle_alone(item)
            return
        except CommitStateUnknownError as exc:
            for item in live:
                item.future.set_exception(
                    CommitStateUnknownError(
                        f"the group commit carrying transaction {item.txn.uuid} has an unknown "
                        f"outcome ({exc})",
                        read_version=item.txn.read_version,
                        operation=item.txn.kind,
                        remedy=(
                            "do not delete any file this transaction references; commit the "
                            "same transaction again: it is found if the group landed"
                        ),
                    )
                )
            return
        except TxnEngineError:
            # nothing landed (commit raises CommitStateUnknownError when it may have): one
            # member the group could not take (a path no reader can open, ...) must not
            # fail the others, so each is committed alone and gets its own outcome
            for item in live:
                self._settle_alone(item)
            return
        except BaseException as exc:
            for item in live:
                item.future.set_exception(exc)
            return
        self.groups.append((result.version, len(live)))
        for item in live:
            item.future.set_result(
                CommitResult(result.version, item.txn, result.attempts, result.manifest_path)
            )

    def _settle_alone(self, item: _Pending) -> None:
        """Commit a (running) member on its own and settle its future."""
        try:
            result = self._commit(item.txn)
        except BaseException as exc:
            item.future.set_exception(exc)
            return
        if not result.already_committed:
            self.groups.append((result.version, 1))
        item.future.set_result(result)


def _distinct(
    batch: Sequence[_Pending],
) -> tuple[list[_Pending], list[tuple[_Pending, _Pending]]]:
    """The batch's items to commit, each marked running (cancelled ones dropped), one per
    transaction uuid; and the later copies of a uuid, each with its first copy, whose outcome
    it gets (a caller whose wait timed out may submit its transaction again: it must not land
    twice). A different transaction under a uuid already queued is refused here."""
    first: dict[str, _Pending] = {}
    live: list[_Pending] = []
    copies: list[tuple[_Pending, _Pending]] = []
    for item in batch:
        if not item.future.set_running_or_notify_cancel():
            continue  # cancelled while queued
        seen = first.setdefault(item.txn.uuid, item)
        if seen is item:
            live.append(item)
        elif seen.txn == item.txn:
            copies.append((item, seen))
        else:
            item.future.set_exception(
                InvalidOperationError(
                    f"another transaction with uuid {item.txn.uuid} is queued in this "
                    "Committer: give each transaction its own uuid (the same transaction "
                    "submitted again is committed once)"
                )
            )
    return live, copies


def _settle_copy(copy: _Pending, first: _Pending) -> None:
    """Settle a later copy of a transaction with its first copy's (settled) outcome: the
    version it landed in, as already committed, or the same error."""
    error = first.future.exception(timeout=0)
    if error is not None:
        copy.future.set_exception(error)
    else:
        copy.future.set_result(attrs.evolve(first.future.result(0), already_committed=True))


def _entering(transaction: object) -> Transaction:
    """``transaction`` as the library's Transaction (pylance's converted), its read version
    checked to be a version number; InvalidOperationError for anything else."""
    if not isinstance(transaction, Transaction) and not is_pylance(transaction, "Transaction"):
        raise InvalidOperationError(
            "Committer.submit takes a txn_engine.Transaction (or a pylance Transaction), got "
            f"{type(transaction).__name__}"
        )
    return as_transaction(transaction)


def _runs(batch: Sequence[_Pending], max_group: int) -> list[list[_Pending]]:
    """Split the queue, in order, into runs of groupable Appends and single others."""
    runs: list[list[_Pending]] = []
    for item in batch:
        if (
            can_carry(item.txn)
            and runs
            and can_carry(runs[-1][0].txn)
            and len(runs[-1]) < max_group
        ):
            runs[-1].append(item)
        else:
            runs.append([item])
    return runs


def _merge(members: Sequence[Transaction]) -> Transaction:
    """One Append carrying every member's fragments, read at the oldest member's version
    (so it is checked against everything any member has not seen)."""
    fragments = tuple(
        f for t in members if isinstance(t.operation, Append) for f in t.operation.fragments
    )
    return Transaction(
        min(t.read_version for t in members),
        Append(fragments),
        properties={GROUP_MEMBERS_KEY: ",".join(t.uuid for t in members)},
    )
