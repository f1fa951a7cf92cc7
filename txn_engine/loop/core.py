"""What one commit call knows of the table (:class:`Core`), and what it returns.

The core is the correctness side of a commit: the transaction as planned and as rebased,
the version it has been checked up to, the listing, the manifests and transactions read.
The contention side (offers, carriers: :mod:`txn_engine.contention`) keeps its own state
and reaches the core only through the hooks of :class:`txn_engine.loop.seam.Contention`.
"""

from __future__ import annotations

import os
from typing import Any

import attrs

from txn_engine._proto import transaction_pb2
from txn_engine.codec import operation_kind_of
from txn_engine.conflicts.detect import Conflict
from txn_engine.conflicts.matrix import Outcome
from txn_engine.conflicts.rebase import ConflictOptions, find_fragment
from txn_engine.errors import (
    HistoryUnavailableError,
    IncompatibleTransactionError,
    RetryableConflictError,
    VersionNotFoundError,
)
from txn_engine.format.io import read_manifest_entry
from txn_engine.format.manifest_file import ManifestFile, decode_manifest_file
from txn_engine.format.naming import VersionEntry, VersionListing
from txn_engine.leases import Lease
from txn_engine.model import Fragment
from txn_engine.storage.base import Storage
from txn_engine.storage.handler import CommitHandler
from txn_engine.transaction import GROUP_MEMBERS_KEY, Transaction

__all__ = [
    "SETTLE_ATTEMPTS",
    "UNKNOWN_REMEDY",
    "CommitResult",
    "Core",
    "NothingToCarry",
    "Uri",
    "carried_in_order",
    "carried_uuids",
    "carries_uuid",
    "conflict_error",
    "first_missing",
    "member_landed",
    "members_of",
]

#: How many times the loop re-reads / re-offers an ambiguous manifest create (or retries a
#: check after one landed) before it gives up with CommitStateUnknownError.
SETTLE_ATTEMPTS = 3

#: What to do about CommitStateUnknownError (a create whose outcome cannot be settled).
UNKNOWN_REMEDY = (
    "do not delete any file this transaction references; commit the same transaction "
    "again (or call txn_engine.find_transaction) to settle it"
)

Uri = str | os.PathLike[str] | Storage


@attrs.frozen
class CommitResult:
    """A landed transaction.

    ``transaction`` is the transaction as landed (a rebased Delete/Update has a newer
    ``read_version`` and merged deletion files); ``attempts`` counts manifest-create
    attempts in this call; ``already_committed`` is True when an earlier call had landed it
    (found by uuid) and this call committed nothing; ``carried`` is True when this call
    offered it and another writer's version carried it (:mod:`txn_engine.contention.offers`).
    """

    version: int
    transaction: Transaction
    attempts: int
    manifest_path: str
    already_committed: bool = False
    carried: bool = False


class NothingToCarry(Exception):
    """A carrier's commit found no offer to carry (:mod:`txn_engine.contention.carrier`):
    nothing was
    created. ``latest``: the newest version it had checked."""

    def __init__(self, latest: int) -> None:
        super().__init__(f"no offer to carry after version {latest}")
        self.latest = latest


def carried_in_order(pb: transaction_pb2.Transaction) -> tuple[str, ...]:
    """The uuids a landed transaction stands for, its own first, then those of the
    transactions it carries (a group commit's members, offers) in the order they landed."""
    members = pb.transaction_properties.get(GROUP_MEMBERS_KEY, "")
    return (pb.uuid, *(m for m in members.split(",") if m and m != pb.uuid))


def carried_uuids(pb: transaction_pb2.Transaction) -> frozenset[str]:
    """The uuids a landed transaction stands for (:func:`carried_in_order`, as a set)."""
    return frozenset(carried_in_order(pb))


def members_of(txn: Transaction) -> tuple[str, ...]:
    """The uuids a transaction carries (:data:`GROUP_MEMBERS_KEY`), in order."""
    value = txn.properties_dict.get(GROUP_MEMBERS_KEY, "")
    return tuple(m for m in value.split(",") if m)


def carries_uuid(pb: transaction_pb2.Transaction, uuid: str) -> bool:
    """Whether a landed transaction is transaction ``uuid``, or a group commit or offer
    carrier that carried it (:class:`~txn_engine.committer.Committer` and
    :mod:`txn_engine.contention.offers` record the carried uuids)."""
    return uuid in carried_uuids(pb)


#: Conflict rules that mean "this version cannot be checked" rather than a real clash.
_HISTORY_RULES = frozenset({"MISSING", "UNREADABLE"})

_HISTORY_REMEDY = (
    "re-plan the operation against the latest version (re-read what it depends on) and "
    "commit the new transaction; keep versions that writers still plan against (leases, "
    "longer cleanup retention). If an earlier attempt of this very transaction had an "
    "unknown outcome, check the data before re-planning: it may have landed in a removed version"
)


def conflict_error(txn: Transaction, conflict: Conflict) -> Exception:
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


def first_missing(listing: VersionListing, newer: list[VersionEntry], since: int) -> int | None:
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
class Core:
    """What one commit call has learned of the table so far (the contention state is
    apart: :class:`txn_engine.loop.seam.Contention`)."""

    handler: CommitHandler
    #: the transaction as given, and as planned now (a rebase replaces ``txn``)
    original: Transaction
    txn: Transaction
    options: ConflictOptions
    #: every version up to this one has been checked against ``txn``
    checked_up_to: int
    manifests: dict[int, ManifestFile] = attrs.field(factory=dict)
    #: manifest bytes read while settling a lost race (decoded only if needed)
    raw: dict[int, bytes] = attrs.field(factory=dict)
    listing: VersionListing = attrs.field(factory=lambda: VersionListing(None))
    #: the transaction of every version read since the read version (None: unreadable)
    transactions: dict[int, transaction_pb2.Transaction | None] = attrs.field(factory=dict)
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
    #: a listing that already shows the version a lost create wanted: the next attempt
    #: starts from it instead of listing again
    prefetched: VersionListing | None = None
    #: the last create was lost in a race (not merely from a stale base): the retry on the
    #: winner waits its rank (``RetryPolicy.chase_ranks``)
    raced: bool = False
    #: ``.txn`` copies started beside creates (path -> copy); the landed one is kept
    copies: dict[str, Any] = attrs.field(factory=dict)
    #: also write the ``_transactions/`` copy (``commit(transaction_file=True)``)
    transaction_file: bool = False
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


def member_landed(state: Core, pb: transaction_pb2.Transaction, version: int) -> Conflict:
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
