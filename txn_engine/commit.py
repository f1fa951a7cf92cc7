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

import contextlib
import os
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NoReturn

import attrs

from txn_engine._proto import transaction_pb2
from txn_engine.builder import WRITER_LIBRARY, ManifestState, build_manifest, validate
from txn_engine.builder import max_fragment_id as _high  # issue 46: the carry's fragment ids
from txn_engine.carrier import POLL_LIST_EVERY, carried_here, host, hosting, publish_created
from txn_engine.clock import SYSTEM_CLOCK, Clock
from txn_engine.codec import operation_kind_of, transaction_from_proto, transaction_to_proto
from txn_engine.conflicts.detect import (
    Conflict,
    missing_history_conflict,
)
from txn_engine.conflicts.isolation import READERS, SERIALIZABLE
from txn_engine.conflicts.lineage import descends_from
from txn_engine.conflicts.matrix import Outcome
from txn_engine.conflicts.planner import Winner, plan_retry
from txn_engine.conflicts.rebase import ConflictOptions, at_table_level, find_fragment
from txn_engine.dataset import Dataset, as_base
from txn_engine.errors import (
    AtomicityUnsupportedError,
    CommitStateUnknownError,
    DatasetAlreadyExistsError,
    DatasetNotFoundError,
    FormatError,
    HistoryUnavailableError,
    IncompatibleTransactionError,
    InvalidOperationError,
    InvalidStorageArgumentError,
    LeaseExpiredError,
    ObjectExistsError,
    ObjectNotFoundError,
    RetriesExhaustedError,
    RetryableConflictError,
    StorageError,
    TxnEngineError,
    VersionNotFoundError,
)
from txn_engine.format.deletion import read_deletion_vector
from txn_engine.format.flags import check_writer_flags
from txn_engine.format.io import (
    latest_version,
    read_manifest,
    read_manifest_entry,
    read_transaction_and_manifest,
    read_version_by_name,
)
from txn_engine.format.manifest_file import (
    MAX_MANIFEST_BYTES,
    ManifestFile,
    decode_manifest_file,
    encode_manifest_file,
)
from txn_engine.format.naming import (
    U64_MAX,
    VERSIONS_DIR,
    NamingScheme,
    VersionEntry,
    VersionListing,
    carrier_beacon,
    detached_manifest_name,
    hint_replaces_listing,
    manifest_name,
    manifest_path,
    scan_versions,
    transaction_file_name,
    transaction_path,
    write_version_hint,
)
from txn_engine.interop import as_transaction
from txn_engine.leases import Lease
from txn_engine.model import Fragment
from txn_engine.offers import (
    CARRIER_KEY,
    OFFER_WINDOW,
    OFFERS_DIR,
    Offer,
    OfferScan,
    Posting,
    can_carry,
    carried_uuids,
    carrier_lately,
    carrying,
    forget_carrier,
    may_offer,
    members_of,
    note_ours,
    ours,
    parse_offer_name,
    recall,
    remember,
    saw_carrier,
    select_offers,
)
from txn_engine.ops import Clone, Restore
from txn_engine.retry import RetryBudget, RetryPolicy
from txn_engine.storage import open_storage
from txn_engine.storage.base import Storage, get_bounded, read_concurrency
from txn_engine.storage.handler import CommitHandler, StoreCommitHandler, commit_handler_for
from txn_engine.transaction import Transaction

__all__ = [
    "CommitResult",
    "ConflictOptions",
    "RetryPolicy",
    "carries_uuid",
    "commit",
    "find_transaction",
    "replan_and_commit",
]

#: How many times the loop re-reads / re-offers an ambiguous manifest create before it
#: gives up with CommitStateUnknownError.
SETTLE_ATTEMPTS = 3

#: What to do about CommitStateUnknownError (a create whose outcome cannot be settled).
_UNKNOWN_REMEDY = (
    "do not delete any file this transaction references; commit the same transaction "
    "again (or call txn_engine.find_transaction) to settle it"
)

#: The policy of a commit not given one (RetryPolicy is frozen: one instance serves all).
_DEFAULT_POLICY = RetryPolicy()

#: Seconds a guarded create waits for its guard listing to be sent first (see _Guard.lead).
_GUARD_LEAD = 0.001

_Uri = str | os.PathLike[str] | Storage


@attrs.frozen
class CommitResult:
    """A landed transaction.

    ``transaction`` is the transaction as landed (a rebased Delete/Update has a newer
    ``read_version`` and merged deletion files); ``attempts`` counts manifest-create
    attempts in this call; ``already_committed`` is True when an earlier call had landed it
    (found by uuid) and this call committed nothing; ``carried`` is True when this call
    offered it and another writer's version carried it (:mod:`txn_engine.offers`).
    """

    version: int
    transaction: Transaction
    attempts: int
    manifest_path: str
    already_committed: bool = False
    carried: bool = False


class NothingToCarry(Exception):
    """A carrier's commit found no offer to carry (:mod:`txn_engine.carrier`): nothing was
    created. ``latest``: the newest version it had checked."""

    def __init__(self, latest: int) -> None:
        super().__init__(f"no offer to carry after version {latest}")
        self.latest = latest


# ---- helpers ------------------------------------------------------------------------------


#: Conflict rules that mean "this version cannot be checked" rather than a real clash.
_HISTORY_RULES = frozenset({"MISSING", "UNREADABLE"})

_HISTORY_REMEDY = (
    "re-plan the operation against the latest version (re-read what it depends on) and "
    "commit the new transaction; keep versions that writers still plan against (leases, "
    "longer cleanup retention). If an earlier attempt of this very transaction had an "
    "unknown outcome, check the data before re-planning: it may have landed in a removed version"
)


def _conflict_error(txn: Transaction, conflict: Conflict) -> Exception:
    cls: type[Exception]
    remedy = conflict.remedy
    if conflict.rule in _HISTORY_RULES:
        cls, remedy = HistoryUnavailableError, _HISTORY_REMEDY
    elif conflict.retryable:
        cls = RetryableConflictError
    else:
        cls = IncompatibleTransactionError
    return cls(
        conflict.reason,
        read_version=txn.read_version,
        conflicting_version=conflict.version,
        operation=txn.kind,
        other_operation=conflict.other,
        remedy=remedy,
        conflicts=(conflict,),
    )


def _first_missing(listing: VersionListing, newer: list[VersionEntry], since: int) -> int | None:
    """The first version in ``(since, latest]`` absent from ``listing`` (None if complete)."""
    latest = listing.latest
    if latest is None or len(newer) == latest.version - since:
        return None  # versions are distinct and ascending: the count proves contiguity
    expected = since + 1
    for entry in newer:
        if entry.version != expected:
            return expected
        expected += 1
    return expected  # pragma: no cover - the count check above already ruled this out


@attrs.define
class _State:
    """What one commit call has learned so far."""

    handler: CommitHandler
    original: Transaction
    txn: Transaction
    options: ConflictOptions
    checked_up_to: int
    manifests: dict[int, ManifestFile] = attrs.field(factory=dict)
    #: manifest bytes read while settling a lost race (decoded only if needed)
    raw: dict[int, bytes] = attrs.field(factory=dict)
    listing: VersionListing = attrs.field(factory=lambda: VersionListing(None))
    #: a group commit's member uuids (none for a plain transaction)
    members: frozenset[str] = frozenset()
    #: the transaction encoded for the manifest (and its ``_transactions/`` file name),
    #: reused by later attempts unless a rebase changed the transaction
    encoded: tuple[Transaction, str, transaction_pb2.Transaction] | None = None
    #: guard listings: each create runs beside a listing of ``_versions/`` (object stores)
    guarded: bool = False
    #: a store without concurrent requests whose ``_versions/`` was one directory block when
    #: the commit began (:func:`~txn_engine.format.naming.hint_replaces_listing`), without
    #: ``assume_latest``: the direct first create is checked by a listing taken after it,
    #: and the version hint is neither read nor written
    hintless: bool = False
    #: a guard listing that already shows the version a lost create wanted: the next
    #: attempt starts from it instead of listing again
    prefetched: VersionListing | None = None
    #: polls made while deferring to a carrier (every few of them is a listing)
    polls: int = 0
    #: the create was lost in a race (not merely from a stale base): the retry on the
    #: winner waits its rank (``RetryPolicy.chase_ranks``)
    raced: bool = False
    #: a create of this call was lost in a race (or two creates were lost): offers are
    #: made and read from then on (a stale first attempt alone does not count)
    contended: bool = False
    #: a create of this call was lost, in a race or from a stale base (another writer is
    #: active either way): offers are read and carried from then on, and the next commit of
    #: this process on the table recalls them; offers are only *made* once ``contended``
    lost: bool = False
    #: listings of the offers started by this call
    scans: int = 0
    #: ``.txn`` copies started beside creates (path -> copy); the landed one is kept
    copies: dict[str, _TransactionCopy] = attrs.field(factory=dict)
    #: also write the ``_transactions/`` copy (``commit(transaction_file=True)``)
    transaction_file: bool = False
    #: offers (:mod:`txn_engine.offers`): after how many lost races this transaction offers
    #: itself (None: never); whether its attempts carry other writers' offers
    offer_after: int | None = None
    carries_offers: bool = False
    #: the transaction of every version read since the read version (offers are checked
    #: against them), the offers read so far, the names of those that can never land
    transactions: dict[int, transaction_pb2.Transaction | None] = attrs.field(factory=dict)
    offers: dict[str, Offer] = attrs.field(factory=dict)
    dead_offers: set[str] = attrs.field(factory=set)
    scan: OfferScan | None = None
    posting: Posting | None = None
    #: an Append that can be offered, on a store with offers (whatever the policy: an
    #: earlier call may have offered it); the windows of earlier calls' offers of it, once
    #: listed; keep this call's offer (the outcome is unknown: a call made again reads it)
    offerable: bool = False
    earlier_windows: list[int] | None = None
    keep_offer: bool = False
    #: a recent commit of this process on this table saw contention: carry offers from the
    #: first attempt on (:func:`txn_engine.offers.recall`)
    recalled: bool = False
    #: the recalled transactions' uuids by version, until one of them is confirmed by a
    #: fresh read (``recall_ok``); a mismatch (a table re-created at the URI) drops them
    recalled_versions: dict[int, str] = attrs.field(factory=dict)
    recall_ok: bool = False
    #: when a carrier's version (:mod:`txn_engine.carrier`) was last read by this call
    #: (its base, or a version it lost a race to; ``RetryPolicy.clock``): while recent, a
    #: writer that may wait for the carrier (``RetryPolicy.wait_for_carrier``) waits on
    carrier_seen_at: float | None = None
    #: the base is a Dataset just opened (a direct first attempt): an offer may be posted
    #: from its version before any listing
    fresh_base: bool = False
    #: a carrier's own empty transaction (never created without offers to carry)
    carrier: bool = False
    #: when a writer told of a carrier (``wait_for_carrier=True``) began to wait for it
    wait_started: float | None = None
    #: a lost race starts a carrier in this process when none is seen
    #: (``RetryPolicy.host_carrier``)
    hosts: bool = False
    #: the lease protecting the read version and the transaction's files (checked before
    #: and after each create)
    lease: Lease | None = None

    @property
    def storage(self) -> Storage:
        """The blob store the handler commits into (every read and plain write goes here)."""
        return self.handler.storage

    def manifest(self, version: int) -> ManifestFile:
        """The decoded manifest of ``version`` (cached; one read)."""
        mf = self.manifests.get(version)
        if mf is None and version in self.raw:
            mf = decode_manifest_file(
                self.raw.pop(version), what=f"{self.storage.uri} version {version}"
            )
            self.manifests[version] = mf
        if mf is None:
            entry = self.listing.get(version)
            if entry is None:
                raise VersionNotFoundError(
                    f"{self.storage.uri}: version {version} does not exist (cleaned up?)"
                )
            mf = read_manifest_entry(self.storage, entry)
            self.manifests[version] = mf
        return mf

    def initial_fragment(self, fragment_id: int) -> Fragment | None:
        """My fragment as of my transaction's current read version."""
        pb = find_fragment(self.manifest(self.txn.read_version).manifest.fragments, fragment_id)
        return None if pb is None else Fragment.from_proto(pb)


def _load_transaction(
    state: _State, entry: VersionEntry
) -> tuple[transaction_pb2.Transaction | None, Exception | None]:
    """The transaction pb of a newer version (reusing a cached manifest), or the error."""
    try:
        # a manifest read while settling a lost race is decoded rather than read again
        cached = (
            state.manifest(entry.version)
            if entry.version in state.raw
            else state.manifests.get(entry.version)
        )
        pb, whole = read_transaction_and_manifest(state.storage, entry, cached)
    except (FormatError, VersionNotFoundError, ObjectNotFoundError) as exc:
        return None, exc
    if whole is not None:
        state.manifests[entry.version] = whole
    return pb, None


def _load_winners(
    state: _State, newer: list[VersionEntry]
) -> list[tuple[transaction_pb2.Transaction | None, Exception | None]]:
    """The transactions of the versions ``newer`` than the one checked, in version order.

    The newest manifest is read whole (the next version is built on it; its inline
    transaction comes free), the others only as far as their inline transaction. On a
    store that serves reads concurrently (``read_concurrency`` > 1: object stores) they are
    read by a bounded thread pool, so k versions behind cost about k / threads round trips
    instead of k; the order of the results is the order of ``newer``.
    """
    latest = newer[-1].version if newer else None

    def load(entry: VersionEntry) -> tuple[transaction_pb2.Transaction | None, Exception | None]:
        if entry.version == latest:
            try:
                state.manifest(entry.version)
            except (FormatError, VersionNotFoundError) as exc:
                return None, exc
        return _load_transaction(state, entry)

    def load_all(
        entries: list[VersionEntry],
    ) -> list[tuple[transaction_pb2.Transaction | None, Exception | None]]:
        threads = min(read_concurrency(state.storage), len(entries))
        if threads <= 1:
            return [load(entry) for entry in entries]
        with ThreadPoolExecutor(threads, thread_name_prefix="txn-engine-read") as pool:
            return list(pool.map(load, entries))

    # versions this process read in a commit just before (a stale read version: the same
    # versions again) are not read again: only the newest of them is, and if its
    # transaction is the one recalled the others are taken as recalled (a version's
    # manifest is created once and never rewritten; a table re-created at the URI fails
    # the check, and then every version is read)
    reuse = {
        e.version
        for e in newer
        if e.version != latest
        and e.version in state.recalled_versions
        and state.transactions.get(e.version) is not None
    }
    if not reuse:
        return load_all(newer)
    probe = None if state.recall_ok else max(reuse)
    to_read = [e for e in newer if e.version not in reuse or e.version == probe]
    got = dict(zip((e.version for e in to_read), load_all(to_read), strict=True))
    if probe is not None:
        pb, _error = got[probe]
        if pb is None or pb.uuid != state.recalled_versions[probe]:  # not this history
            rest = [e for e in newer if e.version not in got]
            got.update(zip((e.version for e in rest), load_all(rest), strict=True))
    return [
        got[e.version] if e.version in got else (state.transactions[e.version], None) for e in newer
    ]


def carries_uuid(pb: transaction_pb2.Transaction, uuid: str) -> bool:
    """Whether a landed transaction is transaction ``uuid``, or a group commit or offer
    carrier that carried it (:class:`~txn_engine.committer.Committer` and
    :mod:`txn_engine.offers` record the carried uuids)."""
    return uuid in carried_uuids(pb)


def _member_landed(state: _State, pb: transaction_pb2.Transaction, version: int) -> Conflict:
    """A group whose member already landed in ``version`` (an earlier group's unknown outcome,
    resubmitted): the group must not land it twice; its members are committed one by one."""
    return Conflict(
        outcome=Outcome.INCOMPATIBLE,
        rule="MEMBER",
        version=version,
        read_version=state.txn.read_version,
        mine=state.txn.kind,
        other=operation_kind_of(pb),
        reason=(
            f"A transaction of this group already landed in version {version}; "
            "commit the members one by one."
        ),
    )


def _read_back(handler: CommitHandler, version: int, path: str) -> bytes | None:
    """The bytes of version ``version`` at ``path`` (None when it does not exist), a
    committed-but-unfinished version completed first (``handler.resolve``)."""
    # bounded: a hostile file at our version's name must not exhaust memory
    try:
        return get_bounded(handler.storage, path, MAX_MANIFEST_BYTES)
    except ObjectNotFoundError:
        if not handler.resolve(version, path):
            return None
    return get_bounded(handler.storage, path, MAX_MANIFEST_BYTES)


def _settle(
    handler: CommitHandler,
    path: str,
    data: bytes,
    cause: BaseException,
    txn: Transaction,
    version: int,
    guard: Lease | None = None,
) -> bytes:
    """Decide whether an ambiguous manifest create landed: return the bytes now at
    ``path`` (``data`` itself when ours is there, else the winner's manifest, which the
    next attempt reuses). Raises CommitStateUnknownError when it cannot be decided."""
    last: BaseException = cause
    for _ in range(SETTLE_ATTEMPTS):
        try:
            found = _read_back(handler, version, path)
        except ObjectNotFoundError:
            found = None
        except FormatError:
            return b""  # not a manifest we could have written: another writer's, or junk
        except StorageError as exc:
            last = exc
            continue
        if found is not None:
            return found
        if guard is not None:
            guard.check()  # the same bytes created again: still under the lease
        try:  # nothing there: offer the very same bytes again at the same name
            handler.commit(version, path, data)
        except ObjectExistsError:
            continue
        except (AtomicityUnsupportedError, InvalidStorageArgumentError):
            raise
        except StorageError as exc:
            last = exc
            continue
        return data
    raise CommitStateUnknownError(
        f"the outcome of creating {path} for transaction {txn.uuid} is unknown "
        f"({type(last).__name__}: {last})",
        read_version=txn.read_version,
        operation=txn.kind,
        remedy=_UNKNOWN_REMEDY,
    ) from last


def _create(
    handler: CommitHandler,
    version: int,
    path: str,
    data: bytes,
    txn: Transaction,
    peek: _Peek | None = None,
    guard: Lease | None = None,
) -> bytes:
    """``handler.commit`` with settlement: the bytes now at ``path`` (``data`` if ours).
    ``peek``: a read of ``path`` sent beside the create; when the create finds the name
    taken and the peek found a manifest there, those bytes settle it (a version's manifest
    is never replaced), so the read-back is not one more round trip. ``guard``: the lease
    that protects what the transaction read and wrote, checked right before the create
    (:meth:`~txn_engine.leases.Lease.check`: LeaseExpiredError, nothing created)."""
    if guard is not None:
        guard.check()
    try:
        handler.commit(version, path, data)
    except ObjectExistsError as exc:
        found = peek.result() if peek is not None else None
        if found is not None:
            return found
        return _settle(handler, path, data, exc, txn, version, guard)
    except (AtomicityUnsupportedError, InvalidStorageArgumentError):
        raise
    except StorageError as exc:
        return _settle(handler, path, data, exc, txn, version, guard)
    return data


def _landed(found: bytes, data: bytes) -> bool:
    return found is data or found == data


def _encode_transaction(state: _State, txn: Transaction) -> tuple[str, transaction_pb2.Transaction]:
    """The transaction's protobuf and ``_transactions/`` file name (cached per transaction;
    the name is empty when the transaction is stored inline only)."""
    if state.encoded is None or state.encoded[0] is not txn:
        name = transaction_file_name(txn.read_version, txn.uuid) if state.transaction_file else ""
        state.encoded = (txn, name, transaction_to_proto(txn))
    return state.encoded[1], state.encoded[2]


def _write_transaction_file(
    storage: Storage, txn: Transaction, write: bool
) -> tuple[str, transaction_pb2.Transaction]:
    """The transaction's protobuf, and the name of its ``_transactions/`` copy once written
    (empty, and nothing written, unless ``write``)."""
    pb = transaction_to_proto(txn)
    if not write:
        return "", pb
    name = transaction_file_name(txn.read_version, txn.uuid)
    storage.put(transaction_path(name), pb.SerializeToString(deterministic=True))
    return name, pb


def _state_of(mf: ManifestFile) -> ManifestState:
    return ManifestState(manifest=mf.manifest, indices=tuple(mf.indices))


# ---- creation --------------------------------------------------------------------------------


def _commit_new(
    handler: CommitHandler,
    txn: Transaction,
    naming: NamingScheme | None,
    timestamp_ns: int | None,
    stable_row_ids: bool,
    transaction_file: bool,
) -> CommitResult:
    op = txn.operation
    clone_source: ManifestState | None = None
    target = 1
    if isinstance(op, Clone):
        source = open_storage(op.ref_path)
        entry = _source_entry(source, op.ref_version)
        clone_source = _state_of(read_manifest_entry(source, entry))
        target = op.ref_version
    scheme = naming or NamingScheme.V2
    path = manifest_path(target, scheme)
    storage = handler.storage
    handler.finish_pending()
    listing = scan_versions(storage)
    if listing:
        existing = listing.get(target)
        if existing is not None:
            pb, _ = read_transaction_and_manifest(storage, existing)
            if pb.uuid == txn.uuid:
                return CommitResult(
                    existing.version, transaction_from_proto(pb), 0, existing.path, True
                )
        latest = listing.latest.version if listing.latest is not None else 0
        raise DatasetAlreadyExistsError(
            f"{storage.uri} already holds a dataset (latest version {latest}); "
            f"commit with read_version={latest} to overwrite it"
        )
    validate(None, txn)
    name, pb = _write_transaction_file(storage, txn, transaction_file)
    state = build_manifest(
        None,
        txn,
        version=target,
        transaction_file=name,
        timestamp_ns=timestamp_ns,
        clone_source=clone_source,
        stable_row_ids=stable_row_ids,
    )
    data = encode_manifest_file(state.manifest, state.indices, pb, owned=True)
    if not _landed(_create(handler, target, path, data, txn), data):
        raise DatasetAlreadyExistsError(
            f"{storage.uri}: another writer created the dataset concurrently"
        )
    write_version_hint(storage, target)  # local disk only, best effort
    return CommitResult(target, txn, 1, path)


def _source_entry(source: Storage, version: int) -> VersionEntry:
    entry = scan_versions(source, since=version).get(version)
    if entry is None:
        raise VersionNotFoundError(f"{source.uri}: version {version} does not exist")
    return entry


# ---- detached versions -------------------------------------------------------------------------

#: The top bit of a detached version's number (pylance's DETACHED_VERSION_MASK).
DETACHED_BIT = 1 << 63
#: Draws of a detached version number before giving up (a draw is taken with odds 2**-63).
_DETACHED_DRAWS = 10


def _commit_detached(
    handler: CommitHandler,
    txn: Transaction,
    base: Dataset | ManifestFile | None,
    timestamp_ns: int | None,
    transaction_file: bool,
) -> CommitResult:
    """``commit(..., detached=True)``, as pylance's ``LanceDataset.commit(...,
    detached=True)``: ``txn`` applied to the version it reads (main line or detached, no
    conflict checks: no other commit builds on the new version's number), landing as
    ``_versions/d{number}.manifest`` with a random number whose top bit is set; the main
    line, its latest version and the version hint do not move. As in pylance, the rows'
    version sequences say read version + 1. Refused (InvalidOperationError, nothing
    written): creating a dataset, V1 manifest names, an external manifest store (a
    main-line commit reading a detached version is refused by :func:`as_transaction`)."""
    op = txn.operation
    storage = handler.storage
    if txn.read_version == 0 or isinstance(op, Clone):
        raise InvalidOperationError(
            "detached commits cannot create a dataset (as in pylance): create it with a "
            "main-line commit first"
        )
    if not isinstance(handler, StoreCommitHandler):
        raise InvalidOperationError(
            f"detached commits are not supported with an external manifest store "
            f"({handler!r}), which decides main-line versions only: commit to a branch "
            "instead (txn_engine.open(uri).create_branch)"
        )
    if latest_version(storage).scheme is not NamingScheme.V2:
        raise InvalidOperationError(
            "detached commits cannot be used with V1 manifest names (as in pylance): "
            "commit to a branch instead (txn_engine.open(uri).create_branch)"
        )
    mf = base.manifest_file if isinstance(base, Dataset) else base
    if mf is None or mf.manifest.version != txn.read_version:
        mf = read_manifest(storage, txn.read_version)[1]
    current = _state_of(mf)
    restore = _state_of(read_manifest(storage, op.version)[1]) if isinstance(op, Restore) else None
    validate(current, txn)
    name, pb = _write_transaction_file(storage, txn, transaction_file)
    built = build_manifest(
        current,
        txn,
        version=min(current.manifest.version + 1, U64_MAX),
        transaction_file=name,
        timestamp_ns=timestamp_ns,
        restore_source=restore,
    )
    for attempt in range(1, _DETACHED_DRAWS + 1):
        version = secrets.randbits(64) | DETACHED_BIT
        built.manifest.version = version
        data = encode_manifest_file(built.manifest, built.indices, pb, owned=True)
        path = f"{VERSIONS_DIR}/{detached_manifest_name(version)}"
        if _landed(_create(handler, version, path, data, txn), data):
            return CommitResult(version, txn, attempt, path)
    raise RetriesExhaustedError(
        f"{txn.kind} transaction {txn.uuid}: {_DETACHED_DRAWS} detached version numbers "
        "drawn were all taken",
        read_version=txn.read_version,
        operation=txn.kind,
        remedy="the random source repeats itself: check it, then commit again",
    )


# ---- the loop --------------------------------------------------------------------------------


def commit(
    uri_or_storage: _Uri,
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
) -> CommitResult:
    """Commit ``transaction`` to the dataset at ``uri_or_storage``; return where it landed.

    ``transaction`` is a :class:`~txn_engine.transaction.Transaction` or pylance's own
    (``read_transaction``, any ``*_uncommitted`` call), converted on the way in.

    * ``retry_policy``: attempts / deadline / backoff when losing the race for a version
      (default :class:`RetryPolicy`: 50 attempts, slot backoff with quadratic growth;
      ``RetryPolicy.lance()`` for Lance's exact schedule).
    * ``naming``: manifest naming for a *new* dataset (default V2, as pylance 14); an
      existing dataset keeps its scheme.
    * ``conflict_options``: opt-in rules more permissive than Lance (default: none).
    * ``base``: the manifest at ``transaction.read_version`` if the caller has it (a
      :class:`~txn_engine.dataset.Dataset`, a ManifestFile, or pylance's ``LanceDataset``).
      On an object store, with a Dataset the first attempt creates the next version
      straight away, beside a guard listing that checks the base was the latest (one round
      trip uncontended). On local disk the create comes first and one listing after it
      checks it; ``assume_latest=True`` checks with one existence check instead (cheaper
      on a long history): opt in only where no cleanup that ignores leases (pylance's
      ``cleanup_old_versions``) can run while the base is held.
    * ``timestamp_ns``: the manifest timestamp (default: now).
    * ``enable_stable_row_ids``: only when creating a dataset (it cannot be switched on
      later; an existing dataset keeps its setting).
    * ``transaction_file``: the transaction always travels inline in the manifest, and by
      default only there: the manifest carries writer flag 32 (``disable_transaction_file``)
      and no ``_transactions/`` object is written (one request fewer per commit; pylance 14
      reads the inline copy). Pass True to also write ``_transactions/{read_version}-{uuid}.txn``
      as pylance does, for a table that Lance writers older than inline transactions also
      commit to (they refuse a table whose writer flags they do not know rather than miss a
      conflict). See ``docs/architecture.md`` (*Inline transactions*).
    * ``lease``: the :class:`~txn_engine.leases.Lease` taken before planning (at or below
      ``transaction.read_version``, before the transaction's files were written): checked
      right before every manifest create, so a writer that stalled past its lease gets
      LeaseExpiredError instead of landing a version whose files a cleanup removed.
    * ``detached``: land the transaction outside the main line, as pylance's
      ``commit(..., detached=True)``: a version whose number has the top bit set
      (``CommitResult.version``; read it with ``Dataset.open(uri, version=n)`` or
      ``lance.dataset(uri, version=n)``), applied to the version it reads without conflict
      checks; the latest version does not move. V2 manifest names and an existing dataset
      only. See ``docs/writing.md`` (*Detached versions*).

    Raises RetryableConflictError (re-plan and retry; see :func:`replan_and_commit`),
    IncompatibleTransactionError, RetriesExhaustedError (contention), CommitStateUnknownError
    (outcome unknown: commit the same transaction again to settle it), InvalidOperationError
    (nothing written), DatasetAlreadyExistsError, DatasetNotFoundError, VersionNotFoundError,
    StorageError (before the manifest create: nothing landed).
    """
    handler = commit_handler_for(open_storage(uri_or_storage, storage_options))
    transaction = as_transaction(transaction, detached=detached)  # pylance's too
    base = as_base(base)
    policy = retry_policy or _DEFAULT_POLICY
    if lease is not None and lease.version > transaction.read_version:
        raise InvalidOperationError(
            f"the lease pins version {lease.version}, above the transaction's read version "
            f"{transaction.read_version}: it does not protect what the transaction read"
        )
    if detached:
        return _commit_detached(handler, transaction, base, timestamp_ns, transaction_file)
    if transaction.read_version == 0 or isinstance(transaction.operation, Clone):
        return _commit_new(
            handler, transaction, naming, timestamp_ns, enable_stable_row_ids, transaction_file
        )
    state = _State(
        handler=handler,
        original=transaction,
        txn=transaction,
        options=conflict_options or ConflictOptions(),
        checked_up_to=transaction.read_version,
        members=frozenset(members_of(transaction)),
        guarded=_guards(handler),
        transaction_file=transaction_file,
        lease=lease,
    )
    state.offerable = state.guarded and may_offer(transaction)
    state.carrier = CARRIER_KEY in transaction.properties_dict
    if state.guarded and policy.offer_after is not None and can_carry(transaction):
        state.carries_offers = True
        if may_offer(transaction):
            state.offer_after = policy.offer_after
        recent = recall(state.storage.uri)
        if recent is not None:
            state.recalled = True
            state.transactions.update(recent.transactions)
            state.recalled_versions = {
                v: pb.uuid for v, pb in recent.transactions.items() if pb is not None
            }
            state.offers.update(recent.offers)
            state.dead_offers |= recent.dead
            state.scan = recent.scan
    state.hosts = state.offer_after is not None and not state.carrier and _may_host(state, policy)
    if state.hosts or state.carrier:
        note_ours(transaction.uuid)  # a version of it is not another process's
    direct: NamingScheme | None = None
    if base is not None:
        mf = base.manifest_file if isinstance(base, Dataset) else base
        if mf.manifest.version != transaction.read_version:
            raise InvalidOperationError(
                f"base is version {mf.manifest.version}, the transaction reads version "
                f"{transaction.read_version}"
            )
        state.manifests[transaction.read_version] = mf
        if _is_carrier(mf.transaction):
            _saw_carrier(state, policy)  # a carrier is at work (or was lately)
        if isinstance(base, Dataset) and not isinstance(transaction.operation, Restore):
            direct = base.naming_scheme
            # without concurrent requests (local disk): the listing after the create
            # instead of before it, where it is a listing and not the version hint
            # (assume_latest: the existence check alone)
            state.hintless = (
                not state.guarded
                and not assume_latest
                and isinstance(handler, StoreCommitHandler)
                and not hint_replaces_listing(handler.storage)
            )
            if not (assume_latest or state.guarded or state.hintless):
                direct = None
    if state.carrier_seen_at is None and carrier_lately(state.storage.uri):
        state.carrier_seen_at = policy.clock()  # this process read a carrier's version lately
    budget = policy.budget()
    landed: CommitResult | None = None
    if policy.offer_early:
        _offer(state, budget, early=True)
    state.fresh_base = direct is not None
    if direct is not None and _defers(state, budget):
        direct = None  # the carrier's next version carries this one
    # a commit that must list first (no base to create on) and may wait for a carrier it
    # has not seen yet: the listing may show one, so it is read before the create
    look_first = (
        direct is None
        and policy.wait_for_carrier is None
        and state.offer_after is not None
        and state.carrier_seen_at is None
    )
    waited = False
    try:
        while True:
            if direct is None and _defers(state, budget):
                landed = _poll(state, budget)
                if landed is not None:
                    return landed
                waited = True
                continue
            if look_first:
                look_first = False
                landed = _attempt(state, budget, None, create=False)  # no extra request:
                if landed is not None:
                    return attrs.evolve(landed, attempts=0)
                if carrier_lately(state.storage.uri):
                    _saw_carrier(state, policy)  # its listing showed the carrier's beacon
                state.prefetched = state.listing  # the next attempt starts from this listing
                continue
            if waited:  # the wait for a carrier was not an attempt: it sets no schedule
                budget.restart_first_attempt()
            budget.start_attempt()
            if direct is not None:  # first attempt: create read_version + 1 straight away
                landed = _direct_attempt(state, budget, timestamp_ns, direct)
                direct = None
            else:
                landed = _attempt(state, budget, timestamp_ns)
            if landed is not None:
                if not (landed.already_committed or landed.carried or state.hintless):
                    write_version_hint(state.storage, landed.version)  # local disk only
                return landed
            _offer(state, budget)
            if state.hosts and (
                hosting(state.storage.uri)
                or (
                    not carrier_lately(state.storage.uri)
                    and budget.attempt_seconds() >= HOST_MIN_ATTEMPT_SECONDS
                    and (_foreign_winner(state) or _foreign_offer(state))
                )
            ):
                # lost to txn_engine writers of other processes, and no carrier seen: one
                # starts here, and this commit (its offer posted) waits for it
                if host(
                    state.storage,
                    _known_latest(state),
                    _known_transactions(state),
                    state.offers,
                    state.scan,
                ):
                    state.scan = None  # the carrier's now: this commit waits, reads no offers
                state.carrier_seen_at = budget.policy.clock()
            if state.prefetched is not None and budget.chase(ranked=_ranked(state)):
                continue  # the winner is known: retry on it at once (after its rank)
            if not budget.wait():
                if _open_window(state) is not None:
                    continue  # a helper may still land it: go on until its window is seen
                raise RetriesExhaustedError(
                    f"{state.txn.kind} transaction {state.txn.uuid} lost the race for a new "
                    f"version {budget.attempts} time(s) "
                    f"({budget.exhausted_reason() or 'deadline'})",
                    read_version=transaction.read_version,
                    conflicting_version=state.checked_up_to + 1,
                    operation=state.txn.kind,
                    remedy="contention, not a conflict: retry later or raise RetryPolicy budgets",
                )
    except Exception as exc:
        if not state.offerable or _decided_by_rules(exc):
            raise
        try:
            window = _open_window(state)
        except StorageError:
            window = _UNKNOWN_WINDOW  # the offers could not be listed: assume one is open
        if window is None:
            raise
        state.keep_offer = True  # the call made again reads its window from it
        if isinstance(exc, CommitStateUnknownError):
            raise
        until = "" if window == _UNKNOWN_WINDOW else f" up to {window}"
        raise CommitStateUnknownError(
            f"{state.txn.kind} transaction {state.txn.uuid} was offered to the other writers "
            f"and may still land in a version{until} ({type(exc).__name__}: {exc})",
            read_version=transaction.read_version,
            operation=state.txn.kind,
            remedy=_UNKNOWN_REMEDY,
        ) from exc
    finally:
        _withdraw_copies(state, landed)
        if state.posting is not None and not state.keep_offer:
            state.posting.withdraw()
        if state.carries_offers and (
            state.lost or state.recalled or state.carrier_seen_at is not None
        ):  # a commit that waited for a carrier read the versions the next one reads
            _take_scan(state)
            remember(
                state.storage.uri, state.transactions, state.offers, state.dead_offers, state.scan
            )


def _ranked(state: _State) -> bool:
    """Whether the immediate retry on a known winner waits its rank: after a lost race,
    unless this call holds other writers' offers (its create lands theirs too, so it goes
    first: measured, docs/performance.md *Offers*)."""
    if not state.raced:
        return False
    _take_scan(state)  # a listing of the offers that has finished counts already
    return not any(o.transaction.uuid != state.original.uuid for o in state.offers.values())


def _offer(
    state: _State, budget: RetryBudget, *, early: bool = False, carrier: bool = False
) -> None:
    """After a lost race: offer the transaction to the other writers once it has lost
    ``RetryPolicy.offer_after`` races (:mod:`txn_engine.offers`). ``early``, before the
    first attempt (``RetryPolicy.offer_early``): only right after a contended commit of this
    process on the table (recalled), and not from a read version older than what that
    commit saw (the window would be spent). ``carrier``: before the first attempt, because
    a carrier is at work (:mod:`txn_engine.carrier`). It is offered as checked up to the
    version built on, valid for :data:`~txn_engine.offers.OFFER_WINDOW` versions."""
    if state.offer_after is None or state.posting is not None:
        return
    if early:
        newest_recalled = max(state.recalled_versions, default=0)
        if not state.recalled or state.original.read_version < newest_recalled:
            return
    elif not carrier and (not state.contended or budget.attempts < state.offer_after):
        return
    checked = state.checked_up_to
    base = _transaction_of(state, checked)
    if base is None:
        return  # the transaction of the version checked up to is not known: no offer
    state.posting = Posting(
        state.storage, state.txn.with_read_version(checked), checked + OFFER_WINDOW, base.uuid
    )


#: A writer waiting for a carrier races again when no carrier version has appeared for this
#: many of its shortest attempts (no carrier runs, or it cannot carry the offer) ... A
#: shortest attempt is about one round trip, and a carrier a lost race has just started needs
#: up to about 7 for its first version (its claim, two listings of the offers, its create,
#: and a read-back and a second create when the first race's winner takes that version).
#: With 4, its waiters on a 100 ms store raced it (docs/performance.md, *Offers*).
PATIENCE_ATTEMPTS = 8

#: ... and at least this long (seconds).
MIN_PATIENCE = 0.3

#: How long a writer that waits for a carrier from its first attempt on waits for its offer
#: to be written before it races instead (seconds).
_POST_WAIT_SECONDS = 1.0


#: A waiting writer's pause between two reads that found nothing new (seconds).
_POLL_PAUSE = 0.005


def _patience(budget: RetryBudget) -> float:
    shortest = budget.shortest_attempt_seconds or 0.0
    return max(MIN_PATIENCE, PATIENCE_ATTEMPTS * shortest)


def _defers(state: _State, budget: RetryBudget) -> bool:
    """Whether the next attempt waits for the table's carrier (``RetryPolicy.
    wait_for_carrier``, :mod:`txn_engine.carrier`) instead of racing it: this call's offer
    is written and may still land in the next version, and a carrier was seen (its version
    or its beacon: :func:`_saw_carrier`, or by this process lately) or, told of one, the
    wait began, within the patience. A commit without a fresh Dataset base reads the
    versions before it offers (its offer then starts from the latest version). The offer
    is posted here (and its write waited for) once the transaction of the version it is
    checked up to is known (until then the wait is a read of the versions), and posted
    again from the latest version checked once its window is spent."""
    told = budget.policy.wait_for_carrier
    if told is False or state.offer_after is None:
        return False
    now = budget.policy.clock()
    if told and state.wait_started is None:
        state.wait_started = now  # told: the wait counts as a sighting
    sightings = [t for t in (state.carrier_seen_at, state.wait_started) if t is not None]
    if not sightings:
        return False  # no carrier seen: race as without one
    if now - max(sightings) >= _patience(budget):
        if state.carrier_seen_at is not None:
            forget_carrier(state.storage.uri)  # waited in vain: the next commits race at once
        return False  # no carrier at work: race as without one
    posting = state.posting
    if posting is not None and posting.valid_through <= state.checked_up_to:
        # its window is spent (a stale read version, or versions that could not carry it):
        # every version up to it has been checked, so a new offer from here on is safe
        posting.withdraw()
        state.posting = None
    if state.posting is None and not state.fresh_base and not state.listing:
        return True  # a stale or cold base: read the versions first, offer from the latest
    if state.posting is None:
        _offer(state, budget, carrier=True)
        if state.posting is None:  # the base's transaction is not known yet: read it first
            checked = state.checked_up_to
            return checked not in state.manifests and state.transactions.get(checked) is None
    posting = state.posting
    posting.wait_written(_POST_WAIT_SECONDS)  # an early offer's write may be in flight too
    return posting.written and posting.valid_through > state.checked_up_to


def _foreign_offer(state: _State) -> bool:
    """Whether this commit has read an offer another process posted (writers of several
    processes contend: a carrier would carry theirs too), in a scan that has finished or
    carried by a version it read. Writers of one process, or one writer racing writers that
    make no offers (pylance), host none: a carrier would only make their commits wait."""
    _take_scan(state)  # never waits: a scan still running is looked at after the next loss
    own = state.original.uuid
    if any(
        o.transaction.uuid != own and not ours(o.transaction.uuid) for o in state.offers.values()
    ):
        return True
    return any(
        u != own and u != pb.uuid and not ours(u)
        for pb in state.transactions.values()
        if pb is not None
        for u in carried_uuids(pb)
    )


#: A lost attempt hosts a carrier only if it took at least this long (seconds): where a
#: round trip is cheaper (a store next door, the emulators without delay), racing costs
#: less than the carrier's coordination (offer, listings, a thread hop each way).
#: Measured in docs/performance.md (*Carriers hosted by the writers*).
HOST_MIN_ATTEMPT_SECONDS = 0.02


def _latest_at_hand(state: _State) -> tuple[VersionEntry, ManifestFile] | None:
    """The latest version this lost attempt listed, with its manifest when it is at hand
    (read back from the create it lost, or read for the checks; never read here)."""
    listing = state.prefetched or state.listing
    latest = listing.latest if listing else None
    if latest is None or not (latest.version in state.manifests or latest.version in state.raw):
        return None
    try:
        return latest, state.manifest(latest.version)
    except TxnEngineError:  # an unreadable winner: nothing at hand
        return None


def _foreign_winner(state: _State) -> bool:
    """Whether the version this commit just lost to (its manifest at hand) was written by a
    txn_engine writer of another process: a writer that makes offers, which a carrier would
    carry too (pylance's versions say "lance")."""
    at_hand = _latest_at_hand(state)
    if at_hand is None:
        return False
    mf = at_hand[1]
    return (
        mf.manifest.writer_version.library == WRITER_LIBRARY
        and mf.transaction is not None
        and not ours(mf.transaction.uuid)
    )


def _transaction_of(state: _State, version: int) -> transaction_pb2.Transaction | None:
    """The transaction of ``version`` as this commit knows it: read since the read version,
    or in a manifest it holds (its base: a stale base is held only there); None if neither."""
    pb = state.transactions.get(version)
    if pb is None and version in state.manifests:
        pb = state.manifests[version].transaction
    return pb


def _known_transactions(state: _State) -> dict[int, transaction_pb2.Transaction | None]:
    """The transactions of the versions this commit has read, its base's among them: the
    offers of the writers it raced are checked up to that version, and a carrier it hosts
    would otherwise read it again before its first create."""
    known = dict(state.transactions)
    for version in state.manifests:
        pb = _transaction_of(state, version)
        if pb is not None:
            known[version] = pb
    return known


def _known_latest(state: _State) -> Dataset | None:
    """The latest version as this lost attempt read it, when its manifest is at hand: a
    carrier hosted now starts from it without a read (else it reads the latest itself)."""
    at_hand = _latest_at_hand(state)
    return None if at_hand is None else Dataset(state.storage, *at_hand)


def _may_host(state: _State, policy: RetryPolicy) -> bool:
    """Whether this commit may start a carrier in its process (``RetryPolicy.host_carrier``):
    by default on a store over the network, for a writer that may wait for one."""
    if policy.host_carrier is False or policy.wait_for_carrier is False:
        return False
    return policy.host_carrier is True or not state.storage.uri.startswith("memory://")


def _is_carrier(pb: transaction_pb2.Transaction | None) -> bool:
    """Whether a landed transaction is a carrier's (:data:`~txn_engine.offers.CARRIER_KEY`)."""
    return pb is not None and CARRIER_KEY in pb.transaction_properties


def _saw_carrier(state: _State, policy: RetryPolicy) -> None:
    """This call read a carrier's version or beacon: the next commits of this process on
    the table may wait for the carrier for a while (``RetryPolicy.wait_for_carrier``), and
    so may this one, unless it has already raced without knowing of it. Such a commit has
    offered itself and races on (whoever wins may carry it): switching it to waiting
    midway made the slowest commits slower (docs/performance.md, *A carrier*)."""
    saw_carrier(state.storage.uri)
    if state.carrier_seen_at is None and not policy.wait_for_carrier and state.contended:
        return
    state.carrier_seen_at = policy.clock()


def _poll(state: _State, budget: RetryBudget) -> CommitResult | None:
    """While deferring to a carrier: read the new versions for this transaction (the
    checks of an attempt, without a create); the result once it is found. Waits a little
    when nothing new appeared (the listing itself is the round trip on an object store)."""
    before = state.checked_up_to
    uri = state.storage.uri
    found = None if _probed_nothing(state) else _attempt(state, budget, None, create=False)
    if found is not None:  # no create was made for it here: the attempts are the earlier ones
        return attrs.evolve(found, attempts=budget.attempts)
    if budget.policy.wait_for_carrier is None and not (carrier_beacon(uri) or hosting(uri)):
        # untold, it waits only while the listings show a live beacon: none (the carrier
        # stopped and took it down, or its versions outlived it) means race now rather
        # than wait out the patience
        forget_carrier(uri)
        state.carrier_seen_at = None
        return None
    if state.checked_up_to == before:
        budget.policy.sleep(_POLL_PAUSE)  # the listing paces the polls on an object store
    return None


def _probed_nothing(state: _State) -> bool:
    """A poll that reads the next version by its name: True when it is not there yet
    (nothing new), False when the attempt's checks should run on it (read, or created by
    a carrier of this process: no read, and added to the last listing), or on a listing.
    Every :data:`~txn_engine.carrier.POLL_LIST_EVERY` polls a listing runs beside the
    read (it keeps the beacons in view) and is used when the read found nothing. Only
    where the listing is the list of versions (``state.guarded``), its scheme known."""
    state.polls += 1
    listing = state.listing
    if not state.guarded or listing is None or listing.scheme is None:
        return False
    version = state.checked_up_to + 1
    path = manifest_path(version, listing.scheme)
    data = carried_here(state.storage, path)
    if data is None:
        lister = None
        if state.polls % POLL_LIST_EVERY == 0:
            lister = _Guard(state.storage, since=_oldest_needed(state))
        try:
            data = read_version_by_name(state.storage, version, listing.scheme)
        except StorageError:
            if lister is None:
                return False  # a listing decides
        if data is None:
            listed = None if lister is None else lister.result()
            if listed is None:
                return True  # nothing new (or no listing either: the next poll reads again)
            state.prefetched = listed
            return False
    state.raw[version] = data
    state.prefetched = listing.with_version(version)
    return False


#: The window of an offer that could not be looked up (the offers directory did not list).
_UNKNOWN_WINDOW = 1 << 64


def _open_window(state: _State) -> int | None:
    """The last version an offer of this transaction may still land in, when a version up to
    it has not been checked for this transaction's uuid (this call's offer, or one an
    earlier call with an unknown outcome left in the offers directory); None when no offer
    is open. A version known only to exist (a create lost to it) is not checked: it may be
    the carrier. Raises StorageError when the directory cannot be listed."""
    if not state.offerable:
        return None
    windows = [state.posting.valid_through] if state.posting is not None else []
    if state.earlier_windows is None:
        names = state.storage.list(OFFERS_DIR)
        state.earlier_windows = [
            parsed[0]
            for parsed in map(parse_offer_name, names)
            if parsed is not None and parsed[1] == state.original.uuid
        ]
    windows.extend(state.earlier_windows)
    window = max(windows, default=0)
    return window if window > state.checked_up_to else None


def _decided_by_rules(exc: BaseException) -> bool:
    """A conflict found by the conflict rules: a helper checking the offer against the
    same versions finds it too, so the offer cannot land after it."""
    return isinstance(exc, (RetryableConflictError, IncompatibleTransactionError)) and not (
        isinstance(exc, HistoryUnavailableError)
    )


def _guards(handler: CommitHandler) -> bool:
    """Whether creates run beside a guard listing: on a store that serves requests
    concurrently (object stores) whose own create-if-absent decides, so that its listing
    is the list of versions."""
    return isinstance(handler, StoreCommitHandler) and read_concurrency(handler.storage) > 1


def _withdraw_copies(state: _State, landed: CommitResult | None) -> None:
    """Remove the ``.txn`` copies started beside creates that did not land (best effort:
    a leftover is an orphan that cleanup removes). The landed transaction's copy stays,
    and so does one at the path of a transaction an earlier call landed. A transaction
    carried by another writer's version keeps none: that version names the carrier's."""
    keep = None
    if landed is not None and not landed.carried:
        keep = transaction_path(
            transaction_file_name(landed.transaction.read_version, landed.transaction.uuid)
        )
    for path, copy in state.copies.items():
        if path != keep:
            copy.withdraw()


def _table_level(state: _State, latest_version: int, winners: Sequence[Winner]) -> ConflictOptions:
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


def _attempt(
    state: _State, budget: RetryBudget, timestamp_ns: int | None, *, create: bool = True
) -> CommitResult | None:
    """One attempt. Returns the result, or None when the race for the version was lost.
    Without ``create`` (a writer deferring to a carrier) it stops after the checks: the
    result when this transaction is found landed, else None."""
    storage = state.storage
    listing, state.prefetched = state.prefetched, None
    if listing is None:
        state.handler.finish_pending()  # a version committed but not yet in the listing
        listing = scan_versions(storage, since=_oldest_needed(state))
    latest = listing.latest
    if latest is None:
        raise DatasetNotFoundError(f"no Lance dataset at {storage.uri}")
    state.listing = listing
    if latest.version < state.original.read_version:
        raise VersionNotFoundError(
            f"{storage.uri}: read version {state.original.read_version} does not exist "
            f"(latest is {latest.version})"
        )
    newer = listing.after(state.checked_up_to)
    winners: list[Winner] = []
    for entry, (pb, error) in zip(newer, _load_winners(state, newer), strict=True):
        _fresh_transaction(state, entry.version, pb)
        if pb is not None and state.members:
            carried = carried_uuids(pb)
            if not state.members.isdisjoint(carried) and state.original.uuid not in carried:
                raise _conflict_error(state.txn, _member_landed(state, pb, entry.version))
        if pb is not None and carries_uuid(pb, state.original.uuid):
            if _is_carrier(pb):
                _saw_carrier(state, budget.policy)  # carried by it: the next commits wait
            return _found(state, budget, pb, entry)
        winners.append(Winner(entry.version, pb, error))
    # only now (the uuid check above may have found this transaction already landed):
    # every version from the read version on must be there to be checked
    missing = _first_missing(listing, newer, state.checked_up_to)
    read_version = state.original.read_version
    if state.checked_up_to == read_version and listing.get(read_version) is None:
        missing = read_version  # the plan's own snapshot is gone
    if missing is not None:
        raise _conflict_error(state.txn, missing_history_conflict(state.txn, missing))
    # the latest manifest (for rebase), unless it is the unreadable one the planner refuses
    base_file = state.manifests.get(latest.version) if winners else None
    plan = plan_retry(
        state.txn,
        winners,
        latest_version=latest.version,
        latest_fragments=() if base_file is None else base_file.manifest.fragments,
        initial_fragments=state.initial_fragment,
        read_dv=lambda fid, pb: read_deletion_vector(storage, fid, pb),
        options=_table_level(state, latest.version, winners),
        latest_max_fragment_id=None if base_file is None else _high(base_file.manifest),
    )
    if isinstance(plan, Conflict):
        raise _conflict_error(state.txn, plan)
    if base_file is None:
        base_file = state.manifest(latest.version)
    check_writer_flags(base_file.manifest)
    txn = state.txn = plan.transaction
    if any(_is_carrier(w.transaction) for w in winners):
        _saw_carrier(state, budget.policy)  # a carrier is at work
    state.checked_up_to = latest.version
    if not create:
        return None
    current = _state_of(base_file)
    validate(current, txn)
    for pending in plan.writes:  # merged deletion vectors, before the manifest naming them
        storage.put(pending.path, pending.data)
    restore_source = None
    if isinstance(txn.operation, Restore):
        restore_source = _state_of(state.manifest(txn.operation.version))
    offers = _offers_to_carry(state, budget, latest.version, current, latest.scheme)
    return _land(
        state, budget, current, latest.version, latest.scheme, timestamp_ns, restore_source, offers
    )


def _found(
    state: _State, budget: RetryBudget, pb: transaction_pb2.Transaction, entry: VersionEntry
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
    carried = not mine and state.posting is not None
    return CommitResult(
        entry.version,
        txn,
        budget.attempts - 1,
        entry.path,
        already_committed=not carried,
        carried=carried,
    )


def _take_scan(state: _State) -> None:
    """Add the offers of a finished scan (an unfinished one is left running)."""
    scan = state.scan
    if scan is None:
        return
    found = scan.take()
    if found is None:
        return
    for version, pb in scan.transactions().items():
        if state.transactions.get(version) is None:
            state.transactions[version] = pb
    for offer in found:
        if offer.name not in state.dead_offers:
            state.offers.setdefault(offer.name, offer)
    state.scan = None


def _fresh_transaction(state: _State, version: int, pb: transaction_pb2.Transaction | None) -> None:
    """Record the transaction of ``version`` as just read; it confirms (or, differing,
    drops) what was recalled from an earlier commit of this process."""
    recalled = state.recalled_versions.get(version)
    if recalled is not None and not state.recall_ok:
        if pb is not None and pb.uuid == recalled:
            state.recall_ok = True
        else:
            _forget_recalled(state)
    state.transactions[version] = pb


def _forget_recalled(state: _State) -> None:
    """Drop what was recalled (it was not confirmed to be this table's history)."""
    for version in state.recalled_versions:
        state.transactions.pop(version, None)
    state.recalled_versions = {}
    state.offers.clear()
    state.dead_offers.clear()


def _start_scan(state: _State, latest: int, scheme: NamingScheme) -> None:
    """List and read the offers not known yet that may still land after ``latest``, and
    the transactions of the versions up to ``latest`` they were checked against that this
    call has not read (an offer posted before this call began names an older version).
    A winner's manifest read back from a lost create is not read again: the next attempt
    and a carrier hosted now take its transaction from those bytes."""
    state.scans += 1
    state.scan = OfferScan(
        state.storage,
        after=latest,
        known=(*state.offers, *state.dead_offers),
        scheme=scheme,
        have=(*(v for v, pb in state.transactions.items() if pb is not None), *state.raw),
    )


def _offers_to_carry(
    state: _State, budget: RetryBudget, latest: int, current: ManifestState, scheme: NamingScheme
) -> list[Transaction]:
    """The other writers' offers this attempt carries into ``latest + 1`` (a retrying
    Append only; :func:`txn_engine.offers.select_offers`). The listing of offers runs in the
    background beside the attempts; one that has not finished is picked up later."""
    if not state.carries_offers or not (state.lost or state.recalled):
        return []
    if state.recalled_versions and not state.recall_ok:
        _forget_recalled(state)  # nothing read yet confirms it: do not rely on it
    _take_scan(state)
    if state.scan is None and (state.contended or state.recalled or not state.scans):
        _start_scan(state, latest, scheme)  # a stale base alone is worth one listing
    if not state.offers:
        return []
    chosen, dead = select_offers(
        state.offers.values(),
        own=state.members | {state.original.uuid},
        latest=latest,
        transactions=state.transactions,
        validate=lambda txn: validate(current, txn),
        options=state.options,
    )
    for name in dead:
        state.offers.pop(name, None)
        state.dead_offers.add(name)
    return chosen


def _oldest_needed(state: _State) -> int:
    """The oldest version an attempt may look up in its listing: the read version (it must
    still be there), the versions after the last one checked, a Restore's source."""
    oldest = min(state.original.read_version, state.checked_up_to)
    op = state.txn.operation
    if isinstance(op, Restore):
        oldest = min(oldest, op.version)
    return oldest


def _direct_attempt(
    state: _State, budget: RetryBudget, timestamp_ns: int | None, scheme: NamingScheme
) -> CommitResult | None:
    """A first attempt without listing: the caller's base (the read version) is taken to be
    the latest, so the next version is created straight away. Losing that race (or a slot
    freed by cleanup, caught by the lineage check) falls back to the listing loop, which
    checks every version in between; nothing is skipped."""
    base_file = state.manifest(state.original.read_version)
    check_writer_flags(base_file.manifest)
    current = _state_of(base_file)
    validate(current, state.txn)
    latest = state.original.read_version
    if state.carries_offers:
        _fresh_transaction(state, latest, base_file.transaction)
    offers = _offers_to_carry(state, budget, latest, current, scheme)
    return _land(state, budget, current, latest, scheme, timestamp_ns, None, offers, state.hintless)


def _land(
    state: _State,
    budget: RetryBudget,
    current: ManifestState,
    latest: int,
    scheme: NamingScheme,
    timestamp_ns: int | None,
    restore_source: ManifestState | None,
    carried: list[Transaction] | None = None,
    list_after: bool = False,
) -> CommitResult | None:
    """Build the next manifest on ``current`` (version ``latest``) and create it, carrying
    the other writers' offers in ``carried`` (:mod:`txn_engine.offers`). Returns the result,
    or None when another writer took the version (its manifest is kept for the next
    attempt).

    On an object store (``state.guarded``) the requests are in flight at once: a guard
    listing of ``_versions/`` (started first), the manifest create and, with
    ``transaction_file=True``, the ``_transactions/`` copy; the listing then decides the
    lineage check (:func:`_check_guarded`), so an uncontended commit is one round trip.
    Elsewhere (local disk) the copy is written after the create and its check: a listing
    taken after it (``list_after``: a direct first attempt) or the existence check
    (:func:`_check_lineage`). The copy is redundant (pylance 14 reads the inline
    transaction): a failed copy fails nothing."""
    if state.carrier and not carried:
        raise NothingToCarry(latest)
    storage = state.storage
    guard = _Guard(storage, since=latest) if state.guarded else None
    txn = state.txn
    landing = carrying(txn, carried) if carried else txn
    name, pb = _encode_transaction(state, landing)
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
    peek = None
    if guard is not None:
        if copy_path:
            copy = _start_copy(state, copy_path, copy_data)
        guard.lead()
        if state.carrier:
            # a carrier's lost create costs every writer it carries a round trip more: its
            # read-back goes beside the create (docs/architecture.md, *Guarded creates*)
            peek = _Peek(storage, path)
    try:
        found = _create(state.handler, target, path, data, txn, peek, state.lease)
    except BaseException:
        if guard is not None:
            guard.result()  # do not leave the listing running behind an error
        raise
    finally:
        if peek is not None:
            peek.result()  # no request of this attempt outlives it
    listing = guard.result() if guard is not None else None
    if not _landed(found, data):
        if found:
            state.raw[target] = found  # the winner's manifest: the next attempt needs it
        latest_listed = None if listing is None else listing.latest
        # a race: a second loss, or a winner that landed after our guard listing was served
        state.contended = (
            state.contended
            or budget.attempts > 1
            or (listing is not None and (latest_listed is None or latest_listed.version < target))
        )
        state.lost = True
        if state.carries_offers and state.scan is None and (state.contended or not state.scans):
            _start_scan(state, target, scheme)  # read the offers while the retry is prepared
        if latest_listed is not None and latest_listed.version >= target:
            state.prefetched = listing  # it already shows the winner: no need to list again
            # a first attempt may just have had a stale base (k behind: no wait); a
            # repeated loss is a race
            state.raced = budget.attempts > 1
        elif listing is not None and found and listing.scheme is scheme and budget.may_chase():
            # the winner landed just after the listing (a race): we read it back, so the
            # next attempt builds on it at once (its own guard listing checks it again)
            state.prefetched = listing.with_version(target)
            state.raced = state.contended = True
        return None
    if state.lease is not None and not state.lease.held():
        _lapsed(state, target, path)
    if guard is None:
        if copy_path:
            copy = _TransactionCopy(storage, copy_path, copy_data)
            state.copies[copy_path] = copy
        if list_after:
            listing = _list_after_landing(state, target, path)
            _check_guarded(state, target, scheme, current, built, path, listing, after=True)
        else:
            _check_lineage(state, target, scheme, current, built, path)
    elif listing is not None:
        _check_guarded(state, target, scheme, current, built, path, listing)
    else:  # the guard listing failed: list again, now that ours has landed
        listing = _list_after_landing(state, target, path)
        _check_guarded(state, target, scheme, current, built, path, listing, after=True)
    if copy is not None:
        copy.join()
    if state.carries_offers:
        state.transactions[target] = pb  # the next commit may check offers against it
    if state.carrier:  # it goes on from its own version, and its writers find it, unread
        publish_created(storage, path, data)
    return CommitResult(target, txn, budget.attempts, path)


def _list_after_landing(state: _State, version: int, path: str) -> VersionListing:
    """A listing taken after our create of ``version`` landed (the guard listing failed, or
    a direct first attempt on local disk), never read from the version hint. The existence
    check alone is not enough in its place (a stale base whose next two
    versions a cleanup removed); if no listing can be had, the outcome is unknown:
    CommitStateUnknownError (committing the same transaction again settles it)."""
    last: Exception | None = None
    for _ in range(SETTLE_ATTEMPTS):
        try:  # never from the version hint: ours may sit in a slot a cleanup freed
            return scan_versions(state.storage, since=version - 1, hint=False)
        except StorageError as exc:
            last = exc
    raise CommitStateUnknownError(
        f"{path} for transaction {state.txn.uuid} was created, but no listing of the "
        f"versions could check that a cleanup had not freed version {version} below newer "
        f"ones ({type(last).__name__}: {last})",
        read_version=state.txn.read_version,
        operation=state.txn.kind,
        remedy=_UNKNOWN_REMEDY,
    ) from last


def _start_copy(state: _State, path: str, data: bytes) -> _TransactionCopy:
    """The ``.txn`` copy for a guarded create: started now (beside the create), or the one
    an earlier attempt started when it is the same file."""
    earlier = state.copies.get(path)
    if earlier is not None:
        if earlier.data == data:
            return earlier
        earlier.join()  # the same name with other bytes (a rebase): this write goes last
    copy = _TransactionCopy(state.storage, path, data)
    state.copies[path] = copy
    return copy


class _Guard:
    """A listing of ``_versions/`` started in a thread before a guarded create."""

    def __init__(self, storage: Storage, since: int) -> None:
        self._storage = storage
        self._since = since
        self._listing: VersionListing | None = None
        self._sent = threading.Event()
        self._thread = threading.Thread(target=self._run, name="txn-engine-guard", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        self._sent.set()
        with contextlib.suppress(Exception):  # no listing: the existence check decides
            self._listing = scan_versions(self._storage, since=self._since)

    def lead(self) -> None:
        """Wait until the listing is on its way (at most a moment), so that the create
        sent next usually reaches the store after it: a listing answered before our
        create decides the lineage alone; one answered after it shows our version and
        costs an existence check (case c of :func:`_check_guarded`)."""
        self._sent.wait(_GUARD_LEAD)
        time.sleep(_GUARD_LEAD)

    def result(self) -> VersionListing | None:
        """The listing (None if it failed), once it is done."""
        self._thread.join()
        return self._listing


class _Peek:
    """A bounded read of a version's manifest, started in a thread beside its create (by a
    carrier, whose lost create every writer it carries waits for). Its result is the bytes
    found (None when there were none, or the read failed: the create's settlement then
    reads back as usual)."""

    def __init__(self, storage: Storage, path: str) -> None:
        self._storage, self._path = storage, path
        self._found: bytes | None = None
        self._thread = threading.Thread(target=self._run, name="txn-engine-peek", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with contextlib.suppress(Exception):  # not found, too large, unreachable: no peek
            self._found = get_bounded(self._storage, self._path, MAX_MANIFEST_BYTES)

    def result(self) -> bytes | None:
        """The bytes the read found, once it is done."""
        self._thread.join()
        return self._found


class _TransactionCopy:
    """Writes the ``_transactions/`` copy of a transaction. On a store that serves requests
    concurrently (``read_concurrency`` > 1: object stores) it starts at once, in a thread
    (beside the create, or beside the lineage check), so it is not one more sequential
    round trip; elsewhere (local disk) it is written by :meth:`join`, after the check. A
    failed copy is ignored (pylance 14 reads the inline transaction)."""

    def __init__(self, storage: Storage, path: str, data: bytes) -> None:
        self._storage, self._path, self.data = storage, path, data
        self._thread: threading.Thread | None = None
        self._done = False
        if read_concurrency(storage) > 1:
            self._thread = threading.Thread(
                target=self._write, name="txn-engine-txn-copy", daemon=True
            )
            self._thread.start()

    def _write(self) -> None:
        with contextlib.suppress(StorageError):
            self._storage.put(self._path, self.data)

    def join(self) -> None:
        """The copy is written (or failed) when this returns."""
        if self._thread is None:
            if not self._done:
                self._done = True
                self._write()
        else:
            self._thread.join()

    def withdraw(self) -> None:
        """The transaction did not land here: remove the copy if it was started (best
        effort; a leftover is an orphan that cleanup removes)."""
        if self._thread is None and not self._done:
            return
        if self._thread is not None:
            self._thread.join()
        with contextlib.suppress(Exception):
            self._storage.delete(self._path)


def _check_guarded(
    state: _State,
    version: int,
    scheme: NamingScheme,
    base: ManifestState,
    ours: ManifestState,
    path: str,
    listing: VersionListing,
    *,
    after: bool = False,
) -> None:
    """After a guarded create of ``version``: decide the lineage from the guard listing,
    which was taken beside the create (before it landed, or after; ``after``: a listing
    known to be taken after it landed, so one that shows nothing above ours proves it).

    * It shows the read-side version ``version - 1`` as the latest and nothing at or above
      ours: accepted. A version above ours that the listing missed would have to be created,
      built on a manifest at our number, and that manifest removed by a cleanup, all while
      our create was in flight: a cleanup deleting a version younger than one round trip,
      which txn_engine's cleanup never does while the writer's lease or ``older_than`` holds
      it (``docs/architecture.md``, *Guarded creates*).
    * It shows a version at ours and none above (ours, if the listing came after the
      create; or one a cleanup removed since): the existence check decides
      (:func:`_check_lineage`), as after an unguarded create.
    * It shows the version right above ours: it must descend from ours (:func:`_check_lineage`,
      read without another existence check; gone by the time it is read: withdrawn).
    * It shows versions above ours but not the next one: ours landed in a slot a cleanup
      freed, below versions that cannot have been built on it: withdrawn.
    * It shows the version right above ours but not the version ours was built on: maybe a
      stale base whose history a cleanup removed, so the lineage check gives no benefit of
      the doubt (``descends_from(proof=True)``): a newer version that changed again the
      fragments ours changed does not prove it was built on ours: withdrawn.

    A failed guard listing is taken again after the create (:func:`_list_after_landing`).
    A listing taken after our create that no longer shows ours, below newer versions: a
    cleanup removed ours after it landed, and whether they were built on it cannot be told
    (:func:`_removed_after_landing`).
    """
    if not listing.after(version):
        latest = listing.latest
        if after or (latest is not None and latest.version == version - 1):
            return
        _check_lineage(state, version, scheme, base, ours, path)  # (c)
        return
    if after and listing.get(version) is None:
        _removed_after_landing(state, version, path)
    if listing.get(version + 1) is not None:
        # the version ours was built on gone too: maybe a stale base whose history a cleanup
        # removed, so the next version must prove that it carries ours
        proof = listing.get(version - 1) is None
        _check_lineage(state, version, scheme, base, ours, path, listed=True, proof=proof)
        return
    _withdraw(state, version, path)


def _removed_after_landing(state: _State, version: int, path: str) -> NoReturn:
    """Our manifest at ``version`` landed, and a listing taken after that shows newer
    versions but not ours: a cleanup removed it, younger than this commit, which only a
    cleanup that ignores leases and age does (pylance's ``cleanup_old_versions`` with
    ``older_than=0``). The newer versions may have been built on ours (it landed as the
    latest) or on a manifest our create replaced in a freed slot; their content cannot
    always tell, so neither "landed" nor "withdrawn" is known: CommitStateUnknownError.
    Nothing is deleted (ours is gone already)."""
    raise CommitStateUnknownError(
        f"{path} for transaction {state.txn.uuid} was created, then removed by a cleanup "
        f"before it could be checked; versions above {version} exist and may or may not "
        "carry it",
        read_version=state.txn.read_version,
        operation=state.txn.kind,
        remedy=(
            "look for this transaction's effect in the table before committing it again; "
            "run txn_engine's cleanup (it keeps leased versions) or pylance's with an "
            "older_than of minutes beside live writers"
        ),
    )


def _check_lineage(
    state: _State,
    version: int,
    scheme: NamingScheme,
    base: ManifestState,
    ours: ManifestState,
    path: str,
    *,
    listed: bool = False,
    proof: bool = False,
) -> None:
    """After creating ``version``: if a newer version already exists it must descend from
    ours. One that does not was built on an earlier manifest at our version number that a
    cleanup removed while this commit ran (create-if-absent then succeeded in the freed
    slot): our manifest is withdrawn and HistoryUnavailableError raised (nothing landed).

    Costs one existence check when no newer version is there (the common case).
    """
    above = VersionEntry(version + 1, manifest_name(version + 1, scheme), scheme)
    if not listed and not _exists_after_landing(state, above, path):
        return
    newer, op = _read_above(state, above, path)
    if newer is not None and descends_from(
        base.manifest,
        ours.manifest,
        newer.manifest,
        op.operation if op is not None else None,
        base_indices=base.indices,
        our_indices=ours.indices,
        newer_indices=newer.indices,
        proof=proof,
    ):
        return
    _withdraw(
        state,
        version,
        path,
        f"version {version + 1} was not built on the manifest this commit created in its place "
        "(or nothing shows that it was: it replaces the table, or cannot be read)",
    )


def _read_above(
    state: _State, above: VersionEntry, ours: str
) -> tuple[ManifestFile | None, Transaction | None]:
    """The manifest of the version above ours (and its transaction), or None when it is gone
    or not a manifest we can read: then nothing proves it was built on ours (a version built
    on ours is younger than our create's round trip, and no cleanup that keeps our version
    removes its successor first). A read that fails for the store's sake is tried again;
    one that keeps failing leaves the outcome unknown (withdrawing ours could cut a version
    built on it out of the history): CommitStateUnknownError."""
    last: Exception | None = None
    for _ in range(SETTLE_ATTEMPTS):
        try:
            newer = read_manifest_entry(state.storage, above)
            op = None if newer.transaction is None else transaction_from_proto(newer.transaction)
        except (ObjectNotFoundError, VersionNotFoundError):
            return None, None  # seen, then gone
        except StorageError as exc:
            last = exc
            continue
        except Exception:  # not a manifest (or a transaction) this library can read
            return None, None
        return newer, op
    raise CommitStateUnknownError(
        f"{ours} for transaction {state.txn.uuid} was created, but version "
        f"{above.version} above it could not be read to check that it was built on it "
        f"({type(last).__name__}: {last})",
        read_version=state.txn.read_version,
        operation=state.txn.kind,
        remedy=_UNKNOWN_REMEDY,
    ) from last


def _exists_after_landing(state: _State, entry: VersionEntry, ours: str) -> bool:
    """Whether version ``entry`` exists, asked after our manifest ``ours`` landed: a
    failed check is tried again, and one that keeps failing leaves the outcome unknown
    (ours is there; whether a cleanup freed its slot cannot be told): never a plain
    StorageError, which says nothing landed."""
    last: Exception | None = None
    for _ in range(SETTLE_ATTEMPTS):
        try:
            return state.handler.resolve(entry.version, entry.path)
        except StorageError as exc:
            last = exc
    raise CommitStateUnknownError(
        f"{ours} for transaction {state.txn.uuid} was created, but whether version "
        f"{entry.version} exists could not be checked ({type(last).__name__}: {last})",
        read_version=state.txn.read_version,
        operation=state.txn.kind,
        remedy=_UNKNOWN_REMEDY,
    ) from last


def _take_back(state: _State, path: str) -> None:
    """Delete our landed manifest at ``path`` (tried again on a storage failure; one that
    keeps failing leaves it landed: CommitStateUnknownError, never a plain StorageError)."""
    last: Exception | None = None
    for _ in range(SETTLE_ATTEMPTS):
        try:
            state.storage.delete(path)
            return
        except StorageError as exc:
            last = exc
    raise CommitStateUnknownError(
        f"{path} for transaction {state.txn.uuid} had to be withdrawn, but it could not be "
        f"deleted ({type(last).__name__}: {last})",
        read_version=state.txn.read_version,
        operation=state.txn.kind,
        remedy=_UNKNOWN_REMEDY,
    ) from last


def _withdraw(state: _State, version: int, path: str, why: str = "") -> NoReturn:
    """Our manifest at ``version`` landed in a slot a cleanup freed, below versions not
    built on it: delete it and raise HistoryUnavailableError (nothing landed)."""
    _take_back(state, path)
    conflict = missing_history_conflict(state.txn, version)
    why = why or (
        f"versions above {version} exist but version {version + 1} does not, so none of "
        "them can have been built on the manifest this commit created"
    )
    raise _conflict_error(
        state.txn,
        attrs.evolve(
            conflict,
            reason=(
                f"Version {version} was removed by a cleanup while this {state.txn.kind} "
                f"transaction (read version {state.txn.read_version}) was committing: {why}, "
                "so that manifest has been withdrawn. Nothing landed."
            ),
        ),
    )


def _lapsed(state: _State, version: int, path: str) -> NoReturn:
    """Our manifest at ``version`` landed, but the lease protecting the transaction's files
    had run out by the time the create returned (the request, or this process, stalled for
    longer than the lease's ttl): a cleanup may have removed them meanwhile. Withdrawn when
    no version above it exists yet (LeaseExpiredError: nothing landed, re-plan); else it
    cannot be taken back (CommitStateUnknownError: check the table's files)."""
    lease = state.lease
    assert lease is not None
    scheme = state.listing.scheme or NamingScheme.V2
    above = VersionEntry(version + 1, manifest_name(version + 1, scheme), scheme)
    if not _exists_after_landing(state, above, path):
        _take_back(state, path)
        raise LeaseExpiredError(
            f"{state.txn.kind} transaction {state.txn.uuid}: its lease {lease.path} expired "
            f"while version {version} was being created, so a cleanup may have removed its "
            "files; the version was withdrawn and nothing landed: re-plan under a new lease"
        )
    raise CommitStateUnknownError(
        f"{path} for transaction {state.txn.uuid} landed after its lease {lease.path} "
        f"expired, and version {version + 1} was already built on it: a cleanup may have "
        "removed the files it references",
        read_version=state.txn.read_version,
        operation=state.txn.kind,
        remedy="check the table with `txn-engine verify --data-files` before writing more",
    )


# ---- lookups and re-planning ------------------------------------------------------------------


def find_transaction(
    uri_or_storage: _Uri,
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
    uri_or_storage: _Uri,
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
        held = None
        if lease_ttl is not None:
            held = Lease(
                storage,
                None,
                ttl=lease_ttl,
                owner=lease_owner,
                renew_in_background=lease_clock is None,
                clock=lease_clock or SYSTEM_CLOCK,
            )
        try:
            snapshot = Dataset.open(storage, version=None if held is None else held.version)
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
                raise RetriesExhaustedError(
                    f"{txn.kind} was preempted {budget.attempts} time(s) by concurrent "
                    f"commits ({budget.exhausted_reason() or 'deadline'}); too much write "
                    "contention",
                    read_version=txn.read_version,
                    conflicting_version=exc.conflicting_version,
                    operation=txn.kind,
                    other_operation=exc.other_operation,
                    remedy="retry later, or raise the re-planning RetryPolicy budgets",
                    conflicts=exc.conflicts,
                ) from exc
        finally:
            if held is not None:
                held.release()
