"""The commit loop: land a transaction exactly once, or say precisely why not.

:func:`commit` follows Lance's ``commit_transaction`` (``lance-format.md`` §8):

1. list ``_versions/`` once; take the versions newer than the one already checked;
2. load their transactions (the inline copy, reading as little of each manifest as the
   format allows; ``_transactions/`` as a fallback). If one of them *is* this transaction
   (same uuid) an earlier call landed it: return that version, commit nothing;
3. check this transaction against each of them in version order
   (:func:`txn_engine.conflicts.detect.check`); a conflict raises
   :class:`~txn_engine.errors.RetryableConflictError` or
   :class:`~txn_engine.errors.IncompatibleTransactionError`. Missing history is never "no
   conflict": when the read version or any version between it and the latest is missing
   (cleaned up) or its transaction cannot be read, the commit raises
   :class:`~txn_engine.errors.HistoryUnavailableError` (an incompatible conflict naming the
   first such version) and writes nothing;
4. rebase (merge deletion vectors of concurrent Delete/Update), build the next manifest on
   the latest one (:mod:`txn_engine.builder`) with the transaction inline, and create it
   with ``put_if_absent`` in the dataset's naming scheme;
5. lineage: if a version above the one just created already exists, it must descend from
   ours (:mod:`txn_engine.conflicts.lineage`); one that does not was built on an earlier
   manifest at our version number that a cleanup removed while we were committing (the
   create succeeded in the freed slot), so ours is withdrawn and HistoryUnavailableError
   raised. With ``transaction_file=True`` ``_transactions/{read_version}-{uuid}.txn``, the
   redundant copy of the inline transaction, is then written (its failure does not fail a
   landed commit); by default the transaction is inline only (writer flag 32);
6. on losing the race, back off (:class:`~txn_engine.retry.RetryPolicy`) and repeat from 1.

**Guarded creates (object stores).** On a store that serves requests concurrently and
decides versions with its own create-if-absent (S3, GCS, Azure), step 4's create runs beside
a *guard listing* of ``_versions/`` (started first; and the ``.txn`` copy when it is asked
for): two requests in flight, one round trip. The guard listing then decides step 5 without
another request in the common case: it shows the version we built on as the latest and
nothing at or above ours (accepted), the version right above ours (it must descend from
ours), versions above ours with a gap (ours landed in a freed slot: withdrawn), or our
version and nothing above (the existence check decides). A lost create whose guard listing
already shows the winner retries from that listing at once. With a
:class:`~txn_engine.dataset.Dataset` as ``base`` the first attempt skips steps 1-3 (the base
is taken to be the latest and the guard listing checks it): an uncontended warm commit is
one round trip. What this leaves open, and why txn_engine's cleanup cannot trigger it, is in
``docs/architecture.md`` (*Guarded creates*).

With a Dataset as ``base`` on a store without concurrent requests (local disk), the first
attempt also skips steps 1-3: it creates the next version, then lists ``_versions/`` once,
and that listing, taken after the create, decides step 5 as a guard listing would (nothing
above ours: accepted; ``docs/architecture.md``, *Listing after the create*). Where
``_versions/`` is past one directory block the version hint replaces listings, and the hint
cannot vouch for a version created in a freed slot, so there the first attempt lists first
as the loop does. With ``assume_latest=True`` the listing is replaced by the existence check
(opt in only where no lease-ignoring cleanup runs). Losing the race falls back to the loop
above, which checks every version in between.

Exactly once: when the manifest create fails in a way that leaves its outcome unknown
(lost response, timeout, any storage error after the request may have reached the store,
or ``ObjectExistsError`` that may be the store answering our own retried request), the loop
reads the target version back *before doing anything else*: our bytes there mean it landed;
another writer's mean we lost the race; nothing there means the same bytes are offered
again at the same name (so a delayed original and the repeat cannot both land). If that
cannot be settled, :class:`~txn_engine.errors.CommitStateUnknownError` is raised and nothing
is deleted; committing the same transaction again settles it (step 2).

Creating a dataset (``read_version`` 0) is a single attempt: an existing dataset raises
:class:`~txn_engine.errors.DatasetAlreadyExistsError` (unless it was this very transaction).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from txn_engine.clock import SYSTEM_CLOCK, Clock
from txn_engine.conflicts.rebase import ConflictOptions
from txn_engine.contention.carrier import contention_for
from txn_engine.dataset import Dataset, as_base
from txn_engine.errors import (
    FormatError,
    InvalidOperationError,
    RetriesExhaustedError,
    RetryableConflictError,
    VersionNotFoundError,
)
from txn_engine.format.io import read_manifest_entry, read_transaction_and_manifest
from txn_engine.format.manifest_file import ManifestFile
from txn_engine.format.naming import NamingScheme, scan_versions
from txn_engine.interop import as_transaction
from txn_engine.leases import Lease
from txn_engine.loop.core import CommitResult, NothingToCarry, Uri, carries_uuid
from txn_engine.loop.driver import drive
from txn_engine.loop.new import DETACHED_BIT, commit_detached, commit_new
from txn_engine.ops import Clone
from txn_engine.retry import RetryBudget, RetryPolicy
from txn_engine.session import Session, using
from txn_engine.storage import open_storage
from txn_engine.storage.base import Storage
from txn_engine.storage.handler import commit_handler_for
from txn_engine.transaction import Transaction

__all__ = [
    "DETACHED_BIT",
    "CommitResult",
    "ConflictOptions",
    "NothingToCarry",
    "RetryPolicy",
    "carries_uuid",
    "commit",
    "find_transaction",
    "replan_and_commit",
]

#: The policy of a commit not given one (RetryPolicy is frozen: one instance serves all).
_DEFAULT_POLICY = RetryPolicy()


def commit(
    uri_or_storage: Uri,
    transaction: Transaction | Any,
    *,
    storage_options: Mapping[str, Any] | None = None,
    retry_policy: RetryPolicy | None = None,
    naming: NamingScheme | None = None,
    conflict_options: ConflictOptions | None = None,
    base: Dataset | ManifestFile | Any | None = None,
    timestamp_ns: int | None = None,
    enable_stable_row_ids: bool = False,
    assume_latest: bool = False,
    transaction_file: bool = False,
    lease: Lease | None = None,
    detached: bool = False,
    session: Session | None = None,
) -> CommitResult:
    """Commit ``transaction`` to the dataset at ``uri_or_storage``; return where it landed.

    ``transaction`` is a :class:`~txn_engine.transaction.Transaction` or pylance's own
    (``read_transaction``, any ``*_uncommitted`` call), converted on the way in.

    * ``retry_policy``: attempts / deadline / backoff when losing the race for a version
      (default :class:`RetryPolicy`: 50 attempts, quadratic slot backoff;
      ``RetryPolicy.lance()`` for Lance's exact schedule).
    * ``naming``: manifest naming for a *new* dataset (default V2); ``conflict_options``:
      opt-in rules more permissive than Lance (default: none).
    * ``base``: the manifest at ``transaction.read_version`` if you have it (a
      :class:`~txn_engine.dataset.Dataset`, a ManifestFile, pylance's ``LanceDataset``).
      With a Dataset the first attempt creates the next version straight away, checked
      beside it (object stores: a guard listing, one round trip) or after it (local disk:
      one listing; ``assume_latest=True``: one existence check, only where no cleanup that
      ignores leases, such as pylance's ``cleanup_old_versions``, runs meanwhile).
    * ``timestamp_ns``: the manifest timestamp (default: now); ``enable_stable_row_ids``:
      only when creating a dataset.
    * ``transaction_file``: also write ``_transactions/{read_version}-{uuid}.txn`` as pylance
      does (by default the transaction is inline only, writer flag 32: one request fewer;
      needed only beside Lance writers older than inline transactions;
      ``docs/architecture.md``, *Inline transactions*).
    * ``lease``: the :class:`~txn_engine.leases.Lease` taken before planning, checked right
      before every create: a writer that stalled past it gets LeaseExpiredError instead of
      landing a version whose files a cleanup removed.
    * ``detached``: land it outside the main line, as pylance's ``commit(...,
      detached=True)`` (``docs/writing.md``, *Detached versions*).
    * ``session``: the :class:`~txn_engine.session.Session` to use (default: the current).

    Raises RetryableConflictError (re-plan and retry; see :func:`replan_and_commit`),
    IncompatibleTransactionError, RetriesExhaustedError (contention), CommitStateUnknownError
    (outcome unknown: commit the same transaction again to settle it), InvalidOperationError
    (nothing written), DatasetAlreadyExistsError, DatasetNotFoundError, VersionNotFoundError,
    StorageError (before the manifest create: nothing landed).
    """

    with using(session):
        handler = commit_handler_for(open_storage(uri_or_storage, storage_options))
        transaction = as_transaction(transaction, detached=detached)  # pylance's too
        base = as_base(base)
        if lease is not None and lease.version > transaction.read_version:
            raise InvalidOperationError(
                f"the lease pins version {lease.version}, above the transaction's read "
                f"version {transaction.read_version}: it does not protect what it read"
            )
        if detached:
            return commit_detached(handler, transaction, base, timestamp_ns, transaction_file)
        if transaction.read_version == 0 or isinstance(transaction.operation, Clone):
            return commit_new(
                handler, transaction, naming, timestamp_ns, enable_stable_row_ids, transaction_file
            )
        return drive(
            handler,
            transaction,
            contention_for=contention_for,
            policy=retry_policy or _DEFAULT_POLICY,
            options=conflict_options or ConflictOptions(),
            base=base,
            timestamp_ns=timestamp_ns,
            assume_latest=assume_latest,
            transaction_file=transaction_file,
            lease=lease,
        )


def find_transaction(
    uri_or_storage: Uri,
    uuid: str,
    *,
    since_version: int = 0,
    storage_options: Mapping[str, Any] | None = None,
) -> int | None:
    """The version created by transaction ``uuid`` (looking at versions newer than
    ``since_version``), or None. Versions whose transaction cannot be read are skipped.

    Use it after :class:`~txn_engine.errors.CommitStateUnknownError` to learn whether a
    transaction landed (committing it again does the same and lands it if it did not).
    """
    handler = commit_handler_for(open_storage(uri_or_storage, storage_options))
    storage = handler.storage
    handler.finish_pending()
    for entry in reversed(scan_versions(storage, since=since_version).after(since_version)):
        try:
            pb, _ = read_transaction_and_manifest(storage, entry)
        except (FormatError, VersionNotFoundError):
            continue
        if carries_uuid(pb, uuid):
            return entry.version
    return None


def replan_and_commit(
    uri_or_storage: Uri,
    plan: Callable[[Dataset], Transaction],
    *,
    retry_policy: RetryPolicy | None = None,
    commit_retry_policy: RetryPolicy | None = None,
    storage_options: Mapping[str, Any] | None = None,
    conflict_options: ConflictOptions | None = None,
    timestamp_ns: int | None = None,
    transaction_file: bool = False,
    lease_ttl: float | None = None,
    lease_owner: str = "txn_engine.replan_and_commit",
    lease_clock: Clock | None = None,
) -> CommitResult:
    """Plan a transaction against the latest version and commit it; on a retryable
    conflict, re-plan from a fresh read and try again (what Lance's delete / update /
    merge-insert builders do).

    ``plan(dataset)`` must build a new Transaction (``read_version = dataset.version``)
    from the snapshot it is given, each time it is called. ``retry_policy`` is the
    re-planning budget (default :meth:`RetryPolicy.replanning`: 10 retries, 30 s; the
    first attempt is never cut short); ``commit_retry_policy`` the budget of each commit.
    ``lease_ttl``: each plan first takes a :class:`~txn_engine.leases.Lease` (that many
    seconds, renewed in the background) on the latest version and reads its snapshot at
    the leased version, so a cleanup keeps it and the files ``plan`` writes until the
    commit is decided; the commit checks the lease before its create. Raises
    RetriesExhaustedError (chained to the last RetryableConflictError) when the budget runs
    out; LeaseExpiredError when a plan outlived its lease; every other error propagates
    unchanged. ``transaction_file``: as for :func:`commit`. ``lease_clock``: the clock the
    leases run on; given one, a lease is renewed only by its checks, not in the background
    (tests and simulations drive the time).
    """
    storage = open_storage(uri_or_storage, storage_options)
    policy = retry_policy or RetryPolicy.replanning()
    budget = policy.budget()
    while True:
        budget.start_attempt()
        held = _lease(storage, lease_ttl, lease_owner, lease_clock)
        try:
            snapshot = _snapshot(storage, held)
            # A plan's own errors (a RetryableConflictError included) propagate unchanged:
            # only the commit's conflicts are re-planned.
            txn = as_transaction(plan(snapshot))
        except BaseException:
            if held is not None:
                held.release()
            raise
        try:
            return commit(
                storage,
                txn,
                retry_policy=commit_retry_policy,
                conflict_options=conflict_options,
                base=snapshot if txn.read_version == snapshot.version else None,
                timestamp_ns=timestamp_ns,
                transaction_file=transaction_file,
                lease=held if held is not None and held.version <= txn.read_version else None,
            )
        except RetryableConflictError as exc:
            if not budget.wait():
                raise _preempted(txn, budget, exc) from exc
        finally:
            if held is not None:
                held.release()


def _lease(storage: Storage, ttl: float | None, owner: str, clock: Clock | None) -> Lease | None:
    """The lease a plan of :func:`replan_and_commit` takes first (None without ``ttl``)."""
    if ttl is None:
        return None
    return Lease(
        storage,
        None,
        ttl=ttl,
        owner=owner,
        renew_in_background=clock is None,
        clock=clock or SYSTEM_CLOCK,
    )


def _preempted(
    txn: Transaction, budget: RetryBudget, exc: RetryableConflictError
) -> RetriesExhaustedError:
    """The error of :func:`replan_and_commit` when its re-planning budget ran out."""
    return RetriesExhaustedError(
        f"{txn.kind} was preempted {budget.attempts} time(s) by concurrent "
        f"commits ({budget.exhausted_reason() or 'deadline'}); too much write "
        "contention",
        read_version=txn.read_version,
        conflicting_version=exc.conflicting_version,
        operation=txn.kind,
        other_operation=exc.other_operation,
        remedy="retry later, or raise the re-planning RetryPolicy budgets",
        conflicts=exc.conflicts,
    )


def _snapshot(storage: Storage, held: Lease | None) -> Dataset:
    """The dataset a plan of :func:`replan_and_commit` reads: the latest, or the version
    its lease pins, read from where the lease found it (one read, no second lookup)."""
    if held is None:
        return Dataset.open(storage)
    entry = held.entry
    assert entry is not None  # a lease this call took (only a resumed lease has none)
    return Dataset(storage, entry, read_manifest_entry(storage, entry))
