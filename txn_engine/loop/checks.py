"""The checks after a create landed: lineage (a version above ours must descend from it),
a slot a cleanup freed (ours withdrawn), a lease that ran out while the create was in
flight. Each one that cannot be decided raises CommitStateUnknownError, never a plain
StorageError (which says nothing landed)."""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn, TypeVar

import attrs

from txn_engine.builder import ManifestState
from txn_engine.codec import transaction_from_proto
from txn_engine.conflicts.detect import missing_history_conflict
from txn_engine.conflicts.lineage import descends_from
from txn_engine.errors import (
    CommitStateUnknownError,
    LeaseExpiredError,
    ObjectNotFoundError,
    StorageError,
    VersionNotFoundError,
)
from txn_engine.format.io import read_manifest_entry
from txn_engine.format.manifest_file import ManifestFile
from txn_engine.format.naming import (
    NamingScheme,
    VersionEntry,
    VersionListing,
    manifest_name,
    scan_versions,
)
from txn_engine.loop.core import SETTLE_ATTEMPTS, UNKNOWN_REMEDY, Core, conflict_error
from txn_engine.transaction import Transaction

__all__ = ["check_guarded", "check_lineage", "lapsed", "list_after_landing"]

_T = TypeVar("_T")


def list_after_landing(state: Core, version: int, path: str) -> VersionListing:
    """A listing taken after our create of ``version`` landed (the guard listing failed, or
    a direct first attempt on local disk), never read from the version hint. The existence
    check alone is not enough in its place (a stale base whose next two
    versions a cleanup removed); if no listing can be had, the outcome is unknown:
    CommitStateUnknownError (committing the same transaction again settles it)."""
    return _after_landing(
        state,
        # never from the version hint: ours may sit in a slot a cleanup freed
        lambda: scan_versions(state.storage, since=version - 1, hint=False),
        f"{path} for transaction {state.txn.uuid} was created, but no listing of the "
        f"versions could check that a cleanup had not freed version {version} below newer "
        "ones",
    )


def _after_landing(state: Core, request: Callable[[], _T], failed: str) -> _T:
    """``request``, sent after our create landed, tried again on a storage failure; one
    that keeps failing leaves the outcome unknown: CommitStateUnknownError saying
    ``failed`` (never a plain StorageError, which says nothing landed)."""
    last: Exception | None = None
    for _ in range(SETTLE_ATTEMPTS):
        try:
            return request()
        except StorageError as exc:
            last = exc
    raise CommitStateUnknownError(
        f"{failed} ({type(last).__name__}: {last})",
        read_version=state.txn.read_version,
        operation=state.txn.kind,
        remedy=UNKNOWN_REMEDY,
    ) from last


def check_guarded(
    state: Core,
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
      (:func:`check_lineage`), as after an unguarded create.
    * It shows the version right above ours: it must descend from ours (:func:`check_lineage`,
      read without another existence check; gone by the time it is read: withdrawn).
    * It shows versions above ours but not the next one: ours landed in a slot a cleanup
      freed, below versions that cannot have been built on it: withdrawn.
    * It shows the version right above ours but not the version ours was built on: maybe a
      stale base whose history a cleanup removed, so the lineage check gives no benefit of
      the doubt (``descends_from(proof=True)``): a newer version that changed again the
      fragments ours changed does not prove it was built on ours: withdrawn.

    A failed guard listing is taken again after the create (:func:`list_after_landing`).
    A listing taken after our create that no longer shows ours, below newer versions: a
    cleanup removed ours after it landed, and whether they were built on it cannot be told
    (:func:`_removed_after_landing`).
    """
    if not listing.after(version):
        latest = listing.latest
        if after or (latest is not None and latest.version == version - 1):
            return
        check_lineage(state, version, scheme, base, ours, path)  # (c)
        return
    if after and listing.get(version) is None:
        _removed_after_landing(state, version, path)
    if listing.get(version + 1) is not None:
        # the version ours was built on gone too: maybe a stale base whose history a cleanup
        # removed, so the next version must prove that it carries ours
        proof = listing.get(version - 1) is None
        check_lineage(state, version, scheme, base, ours, path, listed=True, proof=proof)
        return
    _withdraw(state, version, path)


def _removed_after_landing(state: Core, version: int, path: str) -> NoReturn:
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


def check_lineage(
    state: Core,
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
    state: Core, above: VersionEntry, ours: str
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
        remedy=UNKNOWN_REMEDY,
    ) from last


def _exists_after_landing(state: Core, entry: VersionEntry, ours: str) -> bool:
    """Whether version ``entry`` exists, asked after our manifest ``ours`` landed: a
    failed check is tried again, and one that keeps failing leaves the outcome unknown
    (ours is there; whether a cleanup freed its slot cannot be told): never a plain
    StorageError, which says nothing landed."""
    return _after_landing(
        state,
        lambda: state.handler.resolve(entry.version, entry.path),
        f"{ours} for transaction {state.txn.uuid} was created, but whether version "
        f"{entry.version} exists could not be checked",
    )


def _take_back(state: Core, path: str) -> None:
    """Delete our landed manifest at ``path`` (tried again on a storage failure; one that
    keeps failing leaves it landed: CommitStateUnknownError, never a plain StorageError)."""
    _after_landing(
        state,
        lambda: state.storage.delete(path),
        f"{path} for transaction {state.txn.uuid} had to be withdrawn, but it could not be "
        "deleted",
    )


def _withdraw(state: Core, version: int, path: str, why: str = "") -> NoReturn:
    """Our manifest at ``version`` landed in a slot a cleanup freed, below versions not
    built on it: delete it and raise HistoryUnavailableError (nothing landed)."""
    _take_back(state, path)
    conflict = missing_history_conflict(state.txn, version)
    why = why or (
        f"versions above {version} exist but version {version + 1} does not, so none of "
        "them can have been built on the manifest this commit created"
    )
    raise conflict_error(
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


def lapsed(state: Core, version: int, path: str) -> NoReturn:
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
