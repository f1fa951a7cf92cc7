"""One attempt of the commit loop: refresh what landed, settle our own outcome, plan
against the winners, build, create, check lineage.

:func:`attempt` lists (or takes the prefetched listing), reads the winners, finds this
transaction among them if an earlier create of it landed (exactly once), checks missing
history, plans the retry against the winners (the pure planner,
:func:`txn_engine.conflicts.planner.plan_retry`) and lands it (:func:`land`).
:func:`direct_attempt` is the first attempt on the caller's base, without a listing.
"""

from __future__ import annotations

from collections.abc import Sequence

from txn_engine._proto import transaction_pb2
from txn_engine.builder import ManifestState, build_manifest, max_fragment_id, validate
from txn_engine.codec import transaction_from_proto
from txn_engine.conflicts.detect import Conflict, missing_history_conflict
from txn_engine.conflicts.isolation import READERS, SERIALIZABLE
from txn_engine.conflicts.planner import Winner, plan_retry
from txn_engine.conflicts.rebase import ConflictOptions, PendingDeletionFile, at_table_level
from txn_engine.errors import DatasetNotFoundError, FormatError, VersionNotFoundError
from txn_engine.format.deletion import read_deletion_vector
from txn_engine.format.flags import check_writer_flags
from txn_engine.format.manifest_file import encode_manifest_file
from txn_engine.format.naming import (
    NamingScheme,
    VersionEntry,
    VersionListing,
    manifest_path,
    scan_versions,
    transaction_path,
)
from txn_engine.loop.checks import check_guarded, check_lineage, lapsed, list_after_landing
from txn_engine.loop.core import (
    CommitResult,
    Core,
    carried_uuids,
    carries_uuid,
    conflict_error,
    first_missing,
    member_landed,
    members_of,
)
from txn_engine.loop.create import (
    Guard,
    Peek,
    TransactionCopy,
    create,
    encode_transaction,
    is_ours,
    start_copy,
    state_of,
)
from txn_engine.loop.seam import Contention
from txn_engine.loop.winners import load_winners
from txn_engine.ops import Restore
from txn_engine.retry import RetryBudget
from txn_engine.transaction import Transaction

__all__ = ["attempt", "direct_attempt", "land", "oldest_needed"]


def oldest_needed(state: Core) -> int:
    """The oldest version an attempt may look up in its listing: the read version (it must
    still be there), the versions after the last one checked, a Restore's source."""
    oldest = min(state.original.read_version, state.checked_up_to)
    op = state.txn.operation
    if isinstance(op, Restore):
        oldest = min(oldest, op.version)
    return oldest


def _refresh(state: Core) -> VersionListing:
    """The listing this attempt works from (prefetched by a lost create, else listed), with
    its latest version at or above the read version."""
    storage = state.storage
    listing, state.prefetched = state.prefetched, None
    if listing is None:
        state.handler.finish_pending()  # a version committed but not yet in the listing
        listing = scan_versions(storage, since=oldest_needed(state))
    latest = listing.latest
    if latest is None:
        raise DatasetNotFoundError(f"no Lance dataset at {storage.uri}")
    state.listing = listing
    if latest.version < state.original.read_version:
        raise VersionNotFoundError(
            f"{storage.uri}: read version {state.original.read_version} does not exist "
            f"(latest is {latest.version})"
        )
    return listing


def _winners(
    state: Core, contention: Contention, budget: RetryBudget, newer: list[VersionEntry]
) -> list[Winner] | CommitResult:
    """The versions ``newer`` than the one checked, as winners to plan against; or the
    result when one of them is this transaction (landed by an earlier create: exactly once).
    A group whose member landed alone refuses to land it twice."""
    winners: list[Winner] = []
    for entry, (pb, error) in zip(newer, load_winners(state, contention, newer), strict=True):
        contention.seen(budget, entry.version, pb)
        state.transactions[entry.version] = pb
        if pb is not None and state.members:
            carried = carried_uuids(pb)
            if not state.members.isdisjoint(carried) and state.original.uuid not in carried:
                raise conflict_error(state.txn, member_landed(state, pb, entry.version))
        if pb is not None and carries_uuid(pb, state.original.uuid):
            return _found(state, contention, budget, pb, entry)
        winners.append(Winner(entry.version, pb, error))
    return winners


def _check_history(state: Core, listing: VersionListing, newer: list[VersionEntry]) -> None:
    """Every version from the read version on must be there to be checked (missing history
    is never "no conflict"): HistoryUnavailableError naming the first one gone."""
    missing = first_missing(listing, newer, state.checked_up_to)
    read_version = state.original.read_version
    if state.checked_up_to == read_version and listing.get(read_version) is None:
        missing = read_version  # the plan's own snapshot is gone
    if missing is not None:
        raise conflict_error(state.txn, missing_history_conflict(state.txn, missing))


def _plan(
    state: Core, winners: Sequence[Winner], latest: int
) -> tuple[ManifestState, tuple[PendingDeletionFile, ...]]:
    """Plan the transaction against the winners (rebase, or a conflict raised): the state
    of the latest manifest it is built on, and the files the plan must write first."""
    storage = state.storage
    # the latest manifest (for rebase), unless it is the unreadable one the planner refuses
    base_file = state.manifests.get(latest) if winners else None
    plan = plan_retry(
        state.txn,
        winners,
        latest_version=latest,
        latest_fragments=() if base_file is None else base_file.manifest.fragments,
        initial_fragments=state.initial_fragment,
        read_dv=lambda fid, pb: read_deletion_vector(storage, fid, pb),
        options=_table_level(state, latest, winners),
        latest_max_fragment_id=None if base_file is None else max_fragment_id(base_file.manifest),
    )
    if isinstance(plan, Conflict):
        raise conflict_error(state.txn, plan)
    if base_file is None:
        base_file = state.manifest(latest)
    check_writer_flags(base_file.manifest)
    state.txn = plan.transaction
    state.checked_up_to = latest
    return state_of(base_file), tuple(plan.writes)


def attempt(
    state: Core,
    contention: Contention,
    budget: RetryBudget,
    timestamp_ns: int | None,
    *,
    create: bool = True,
) -> CommitResult | None:
    """One attempt. Returns the result, or None when the race for the version was lost.
    Without ``create`` (a writer deferring to a carrier) it stops after the checks: the
    result when this transaction is found landed, else None."""
    listing = _refresh(state)
    latest = listing.latest
    assert latest is not None
    newer = listing.after(state.checked_up_to)
    winners = _winners(state, contention, budget, newer)
    if isinstance(winners, CommitResult):
        return winners
    # only now (the uuid check above may have found this transaction already landed)
    _check_history(state, listing, newer)
    current, writes = _plan(state, winners, latest.version)
    if not create:
        return None
    txn = state.txn
    validate(current, txn)
    for pending in writes:  # merged deletion vectors, before the manifest naming them
        state.storage.put(pending.path, pending.data)
    restore_source = None
    if isinstance(txn.operation, Restore):
        restore_source = state_of(state.manifest(txn.operation.version))
    landing = contention.landing(budget, latest.version, current, latest.scheme)
    return land(
        state, contention, budget, current, latest.version, latest.scheme, timestamp_ns,
        restore_source, landing,
    )  # fmt: skip


def _found(
    state: Core,
    contention: Contention,
    budget: RetryBudget,
    pb: transaction_pb2.Transaction,
    entry: VersionEntry,
) -> CommitResult:
    """The result for this transaction found in ``entry``'s version: landed by an earlier
    call or an ambiguous create of this one (``already_committed``), or carried there as
    this call's offer (``carried``)."""
    mine = pb.uuid == state.original.uuid
    txn = state.original
    if mine:
        landed = transaction_from_proto(pb)
        # the landed form (a rebased Delete), unless offers were carried along with it
        txn = landed if members_of(landed) == members_of(state.original) else state.txn
    carried = not mine and contention.offered()
    return CommitResult(
        entry.version,
        txn,
        budget.attempts - 1,
        entry.path,
        already_committed=not carried,
        carried=carried,
    )


def _table_level(state: Core, latest_version: int, winners: Sequence[Winner]) -> ConflictOptions:
    """The commit's conflict options at the isolation level the table asks for (the config
    key ``txn_engine.isolation`` of the latest version, :func:`at_table_level`). Read only
    when it can matter: a Delete/Update with winners to check, not serializable already.
    An unreadable latest manifest leaves the options as they are: the planner refuses the
    winner, or the read after the plan raises."""
    options = state.options
    if not winners or options.isolation == SERIALIZABLE or state.txn.kind not in READERS:
        return options
    try:
        latest = state.manifest(latest_version)
    except FormatError:
        return options
    return at_table_level(options, latest.manifest.config)


def direct_attempt(
    state: Core,
    contention: Contention,
    budget: RetryBudget,
    timestamp_ns: int | None,
    scheme: NamingScheme,
) -> CommitResult | None:
    """A first attempt without listing: the caller's base (the read version) is taken to be
    the latest, so the next version is created straight away. Losing that race (or a slot
    freed by cleanup, caught by the lineage check) falls back to the listing loop, which
    checks every version in between; nothing is skipped."""
    base_file = state.manifest(state.original.read_version)
    check_writer_flags(base_file.manifest)
    current = state_of(base_file)
    validate(current, state.txn)
    latest = state.original.read_version
    contention.seen(budget, latest, base_file.transaction, base=True)
    landing = contention.landing(budget, latest, current, scheme)
    return land(
        state, contention, budget, current, latest, scheme, timestamp_ns, None, landing,
        list_after=state.hintless,
    )  # fmt: skip


def land(
    state: Core,
    contention: Contention,
    budget: RetryBudget,
    current: ManifestState,
    latest: int,
    scheme: NamingScheme,
    timestamp_ns: int | None,
    restore_source: ManifestState | None,
    landing: Transaction,
    *,
    list_after: bool = False,
) -> CommitResult | None:
    """Build the next manifest on ``current`` (version ``latest``) with ``landing`` (the
    transaction, or it carrying other writers' offers: ``Contention.landing``) and create
    it. Returns the result, or None when another writer took the version (its manifest is
    kept for the next attempt).

    On an object store (``state.guarded``) the requests are in flight at once: a guard
    listing of ``_versions/`` (started first), the manifest create and, with
    ``transaction_file=True``, the ``_transactions/`` copy; the listing then decides the
    lineage check (:func:`~txn_engine.loop.checks.check_guarded`), so an uncontended commit
    is one round trip. Elsewhere (local disk) the copy is written after the create and its
    check: a listing taken after it (``list_after``: a direct first attempt) or the
    existence check (:func:`~txn_engine.loop.checks.check_lineage`). The copy is redundant
    (pylance 14 reads the inline transaction): a failed copy fails nothing."""
    storage = state.storage
    guard = Guard(storage, since=latest) if state.guarded else None
    name, pb = encode_transaction(state, landing)
    target = latest + 1
    built = build_manifest(
        current,
        landing,
        version=target,
        transaction_file=name,
        timestamp_ns=timestamp_ns,
        restore_source=restore_source,
    )
    data = encode_manifest_file(built.manifest, built.indices, pb, owned=True)
    path = manifest_path(target, scheme)
    copy_path = transaction_path(name) if name else ""  # no name: inline only, no copy
    copy_data = pb.SerializeToString(deterministic=True) if copy_path else b""
    copy = None
    if guard is not None and copy_path:
        copy = start_copy(state, copy_path, copy_data)
    found, listing = _send(state, contention, guard, target, path, data)
    if not is_ours(found, data):
        _lost(state, contention, budget, target, scheme, found, listing)
        return None
    if state.lease is not None and not state.lease.held():
        lapsed(state, target, path)
    if guard is None and copy_path:
        copy = TransactionCopy(storage, copy_path, copy_data)
        state.copies[copy_path] = copy
    _check_landed(
        state, target, scheme, current, built, path, listing, guard is not None, list_after
    )
    if copy is not None:
        copy.join()
    contention.landed(target, path, data, pb)
    return CommitResult(target, state.txn, budget.attempts, path)


def _send(
    state: Core,
    contention: Contention,
    guard: Guard | None,
    target: int,
    path: str,
    data: bytes,
) -> tuple[bytes, VersionListing | None]:
    """The create of ``target`` (its guard listing led first, a peek beside it when the
    contention asks for one): the bytes now at ``path`` and the guard listing."""
    peek = None
    if guard is not None:
        guard.lead()
        if contention.peeks:
            # a carrier's lost create costs every writer it carries a round trip more: its
            # read-back goes beside the create (docs/architecture.md, *Guarded creates*)
            peek = Peek(state.storage, path)
    try:
        found = create(state.handler, target, path, data, state.txn, peek, state.lease)
    except BaseException:
        if guard is not None:
            guard.result()  # do not leave the listing running behind an error
        raise
    finally:
        if peek is not None:
            peek.result()  # no request of this attempt outlives it
    return found, guard.result() if guard is not None else None


def _lost(
    state: Core,
    contention: Contention,
    budget: RetryBudget,
    target: int,
    scheme: NamingScheme,
    found: bytes,
    listing: VersionListing | None,
) -> None:
    """Another writer took ``target``: keep its manifest for the next attempt, and start
    that attempt from the guard listing when it already shows the winner (or from the
    winner read back, when it landed just after the listing was served)."""
    if found:
        state.raw[target] = found  # the winner's manifest: the next attempt needs it
    latest_listed = None if listing is None else listing.latest
    winner: str | None = None
    if latest_listed is not None and latest_listed.version >= target:
        winner = "listed"
    elif listing is not None and found and listing.scheme is scheme and budget.may_chase():
        winner = "read"
    contention.lost(budget, target, listing, scheme, winner)
    if winner == "listed":
        assert listing is not None
        state.prefetched = listing  # it already shows the winner: no need to list again
        # a first attempt may just have had a stale base (k behind: no wait); a repeated
        # loss is a race
        state.raced = budget.attempts > 1
    elif winner == "read":
        assert listing is not None
        # the winner landed just after the listing (a race): we read it back, so the next
        # attempt builds on it at once (its own guard listing checks it again)
        state.prefetched = listing.with_version(target)
        state.raced = True


def _check_landed(
    state: Core,
    target: int,
    scheme: NamingScheme,
    current: ManifestState,
    built: ManifestState,
    path: str,
    listing: VersionListing | None,
    guarded: bool,
    list_after: bool,
) -> None:
    """The lineage check of the version just created, by the guard listing, a listing
    taken after it, or the existence check (:mod:`txn_engine.loop.checks`)."""
    if not guarded:
        if list_after:
            listing = list_after_landing(state, target, path)
            check_guarded(state, target, scheme, current, built, path, listing, after=True)
        else:
            check_lineage(state, target, scheme, current, built, path)
    elif listing is not None:
        check_guarded(state, target, scheme, current, built, path, listing)
    else:  # the guard listing failed: list again, now that ours has landed
        listing = list_after_landing(state, target, path)
        check_guarded(state, target, scheme, current, built, path, listing, after=True)
