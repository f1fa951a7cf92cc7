"""Cleanup: remove old versions and unreferenced files, never what a writer or reader needs.

:func:`cleanup` decides which main-line versions to keep, then deletes the manifests of the
others and every file under ``data/``, ``_deletions/``, ``_indices/`` and
``_transactions/`` that no kept version references:

* **kept versions**: the latest, and every version at or above the latest when the cleanup
  started (its *floor*); the newest ``keep_versions``; every version whose manifest
  timestamp is newer than ``older_than`` ago; every version at or after the oldest live
  lease (:mod:`txn_engine.leases`); every main-line version a tag (``_refs/tags/*.json``)
  names and every main-line version a branch (``_refs/branches/*.json``) was created from;
* **kept files**: every file a kept version references (data files, deletion files, index
  directories, the transaction file, external row-id files), every file of this table that
  a branch's manifests (``tree/<branch>/_versions``) reference through a base path, and every
  file younger than the orphan retention that no manifest references (it may belong to a
  writer that has not committed yet);
* **deleted**: manifests of the other versions; files only those versions referenced
  (whatever their age, like Lance); files no manifest references at all ("orphans") once
  they are older than ``retention_orphans`` by the store's clock (a file whose age the
  store cannot tell only with a zero retention), and only when no writer's lease that may
  own one is live (a lease the cleanup read at its start, or one that recorded its
  marker); lease objects that expired longer than ``retention_orphans`` ago; offers
  (``_txn_engine_offers/``, :mod:`txn_engine.contention.offers`) whose window has passed; claims to
  host a carrier for versions older than the latest; carrier beacons that expired or that
  the store shows unchanged for longer than a running carrier leaves one; markers of
  cleanups that stopped without removing them.

A file is deleted only when it is proved unreferenced: if a manifest (of any version that
is listed), a tag, a branch or a lease cannot be read, :class:`~txn_engine.errors.
CleanupAbortedError` is raised before anything is deleted. Files under other base paths
are never deleted (they belong to other tables), and neither is anything outside the four
directories above and the offers directory.

Order of work (what makes it safe beside running writers and readers; ``docs/cleanup.md``
and the model in ``models/commit_protocol.pml``): list the latest version (the floor) → put
up the marker ``_txn_engine/cleaning/<floor>-<uuid>.json`` (its listed time anchors the
store's clock) → read the leases → list and read the versions, list the files → plan → read
the leases again (recompute if a new lease pins more) → delete manifests, oldest first (a
partial run leaves a contiguous prefix gap; stopped if the marker may have gone stale) →
read the leases once more (``R``; waiting a few seconds for the writers it must wait for)
and keep the files of every version a lease now pins → check the marker was up all along →
take it down → list the versions again and keep the files of every version that landed
meanwhile → delete the files in concurrent batches.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import attrs

from txn_engine.clock import SYSTEM_CLOCK, Clock, SystemClock
from txn_engine.errors import CleanupAbortedError, InvalidStorageArgumentError, TxnEngineError
from txn_engine.format.gaps import record_gaps
from txn_engine.format.io import latest_version, read_manifest_entry
from txn_engine.format.naming import scan_versions
from txn_engine.leases import LeaseInfo, read_leases
from txn_engine.retention._delete import (
    ProgressCallback,
    delete_concurrently,
    delete_many,
    progress_for,
)
from txn_engine.retention._marker import CleanupMarker
from txn_engine.retention._plan import (
    CleanupPlan,
    CleanupReport,
    Now,
    PlannedDelete,
    State,
    build_plan,
    check_duration,
    in_dirs,
    live_writers,
    oldest_live,
    read_state,
)
from txn_engine.retention._refs import FILE_DIRS, keep_detached, referenced_files, root_aliases
from txn_engine.storage import open_storage
from txn_engine.storage.base import Storage
from txn_engine.storage.listing import ObjectInfo, list_objects

__all__ = [
    "FILE_DIRS",
    "CleanupPlan",
    "CleanupReport",
    "ObjectInfo",
    "PlannedDelete",
    "cleanup",
    "delete_many",
    "list_objects",
    "plan_cleanup",
    "referenced_files",
]

_LEASE_ROUNDS = 5
_INDEX_PREFIX = "_indices/"


@attrs.frozen
class _Told:
    """A clock whose wall time is a given instant (``cleanup(now_ns=...)``): every age and
    lease is then judged by that wall clock, not by the store's."""

    now_ns: int
    system: Clock = attrs.field(factory=SystemClock)

    def wall_ns(self) -> int:
        return self.now_ns

    def monotonic(self) -> float:
        return self.system.monotonic()

    def sleep(self, seconds: float) -> None:
        self.system.sleep(seconds)


def plan_cleanup(
    uri: str | os.PathLike[str] | Storage,
    *,
    older_than: timedelta,
    keep_versions: int = 1,
    retention_orphans: timedelta = timedelta(days=7),
    storage_options: Mapping[str, Any] | None = None,
    now_ns: int | None = None,
) -> CleanupPlan:
    """The plan :func:`cleanup` would execute now (nothing is deleted)."""
    result = cleanup(
        uri,
        older_than=older_than,
        keep_versions=keep_versions,
        retention_orphans=retention_orphans,
        dry_run=True,
        storage_options=storage_options,
        now_ns=now_ns,
    )
    if not isinstance(result, CleanupPlan):  # pragma: no cover - dry_run returns the plan
        raise TypeError("cleanup(dry_run=True) returned a report")
    return result


@attrs.frozen
class _Settings:
    older_ns: int
    keep_versions: int
    retention_ns: int
    writers_wait: float = 5.0


def cleanup(
    uri: str | os.PathLike[str] | Storage,
    *,
    older_than: timedelta,
    keep_versions: int = 1,
    retention_orphans: timedelta = timedelta(days=7),
    dry_run: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    progress: bool | ProgressCallback | None = None,
    workers: int = 16,
    now_ns: int | None = None,
    clock: Clock | None = None,
    wait_for_writers: timedelta = timedelta(seconds=5),
) -> CleanupPlan | CleanupReport:
    """Remove old versions and unreferenced files (see the module docstring for the rules).

    ``older_than``: versions whose manifest timestamp is newer than this are kept.
    ``keep_versions`` (>= 1): the newest N versions are kept whatever their age.
    ``retention_orphans``: files no manifest references are deleted only once older than
    this (keep it longer than your slowest writer without a lease takes from writing data
    to committing: pylance's writers, other tools).
    ``dry_run``: return the :class:`CleanupPlan` and delete nothing.
    ``progress``: ``None`` shows a progress line when stderr is a terminal; ``True``/``False``
    force it on/off; a callable gets ``(done, total)``. ``workers``: concurrent delete
    batches. ``wait_for_writers``: how long to wait, at most, for writers whose leases may
    own unreferenced files this run listed (past it those files wait for a later run).
    ``now_ns``: judge every age and lease by this wall-clock instant instead of the store's
    clock (tests). ``clock``: the clocks to use (tests and simulations).

    Returns a :class:`CleanupReport` (or the plan when ``dry_run``). Raises
    :class:`~txn_engine.errors.CleanupAbortedError` (nothing deleted) when a manifest, tag,
    branch or lease cannot be read, :class:`~txn_engine.errors.DatasetNotFoundError` when
    there is no dataset, :class:`~txn_engine.errors.InvalidStorageArgumentError` for bad
    arguments.
    """
    settings = _checked_settings(
        older_than, keep_versions, retention_orphans, wait_for_writers, workers=workers
    )
    storage = open_storage(uri, storage_options)
    told = now_ns is not None
    run_clock: Clock = _Told(now_ns) if now_ns is not None else (clock or SYSTEM_CLOCK)
    if dry_run:
        return _dry_run(storage, settings, run_clock)
    started = run_clock.monotonic()
    floor = latest_version(storage).version
    marker = CleanupMarker.put_up(storage, run_clock, floor, wall_clock=told)
    try:
        seen = read_leases(storage)
        plan, state, oldest, removed_now = _plan_and_delete_manifests(
            storage, marker, seen, settings
        )
        leases = _final_leases(storage, marker, seen, settings.writers_wait)
        intact = marker.intact()
    finally:
        marker.take_down()
    files, kept_late = _files_to_delete(storage, plan, state, marker, seen, leases, oldest,
                                        removed_now, intact)  # fmt: skip
    manifests = [d.path for d in plan.deletes if d.reason == "manifest"][: len(removed_now)]
    total = len(manifests) + len(files)
    reporter = progress_for(progress, total)
    if reporter is not None:
        reporter(len(manifests), total)
    failed = delete_concurrently(
        storage, files, workers=workers, progress=reporter, done_before=len(manifests), total=total
    )
    if reporter is not None and not files:
        reporter(total, total)
    return CleanupReport(
        plan=plan,
        deleted=total - len(failed),
        failed=tuple(failed),
        kept_for_new_leases=kept_late,
        seconds=run_clock.monotonic() - started,
    )


def _checked_settings(
    older_than: timedelta,
    keep_versions: int,
    retention_orphans: timedelta,
    wait_for_writers: timedelta,
    *,
    workers: int,
) -> _Settings:
    """:func:`cleanup`'s arguments as settings, each checked first
    (InvalidStorageArgumentError for a bad one; ``workers`` is only checked)."""
    if isinstance(keep_versions, bool) or not isinstance(keep_versions, int) or keep_versions < 1:
        raise InvalidStorageArgumentError(f"keep_versions must be >= 1, got {keep_versions!r}")
    if workers < 1:
        raise InvalidStorageArgumentError(f"workers must be >= 1, got {workers!r}")
    return _Settings(
        check_duration("older_than", older_than),
        keep_versions,
        check_duration("retention_orphans", retention_orphans),
        check_duration("wait_for_writers", wait_for_writers) / 1e9,
    )


def _dry_run(storage: Storage, settings: _Settings, clock: Clock) -> CleanupPlan:
    """The plan now, with no marker: judged by the wall clock; no unreferenced file is
    planned while a writer's lease is live (a run now would keep them)."""
    leases = read_leases(storage)
    state = read_state(storage, root_aliases(storage))
    now = Now(clock.wall_ns())
    plan = _make_plan(storage, state, leases, settings, now, oldest_live(leases, now), None)
    if not live_writers(leases, now):
        return plan
    return attrs.evolve(plan, deletes=tuple(d for d in plan.deletes if d.reason != "orphan"))


def _make_plan(
    storage: Storage, state: State, leases: Sequence[LeaseInfo], settings: _Settings,
    now: Now, oldest: int | None, floor: int | None,
) -> CleanupPlan:  # fmt: skip
    return build_plan(
        storage,
        state,
        now=now,
        older_than_ns=settings.older_ns,
        keep_versions=settings.keep_versions,
        retention_ns=settings.retention_ns,
        oldest_lease=oldest,
        leases=leases,
        floor=floor,
    )


def _plan_and_delete_manifests(
    storage: Storage, marker: CleanupMarker, leases: list[LeaseInfo], settings: _Settings
) -> tuple[CleanupPlan, State, int | None, list[int]]:
    """Under the marker: the state, the plan (leases re-read until they stop moving it),
    the manifest deletes, oldest first, while the marker is fresh. Returns the plan, the
    state, the oldest lease and the versions whose manifests were deleted."""
    oldest = oldest_live(leases, marker.now())
    state = read_state(storage, root_aliases(storage), beat=marker.beat)
    plan = _make_plan(storage, state, leases, settings, marker.now(), oldest, marker.floor)
    # leases taken while we read: a lease pinning a version we plan to remove moves the
    # plan (bounded rounds; the last round's plan only ever keeps more)
    for _ in range(_LEASE_ROUNDS):
        leases = read_leases(storage)
        merged = _min_opt(oldest, oldest_live(leases, marker.now()))
        if merged == oldest:
            break
        oldest = merged
        plan = _make_plan(storage, state, leases, settings, marker.now(), oldest, marker.floor)
    removed_now: list[int] = []
    paths = [d.path for d in plan.deletes if d.reason == "manifest"]
    record_gaps(storage, plan.removed_versions, plan.kept_versions)  # before any delete
    for version, path in zip(plan.removed_versions, paths, strict=True):
        marker.beat()
        if not marker.fresh():
            break  # another cleanup may have removed the marker: leave the rest
        storage.delete(path)  # oldest first: a partial run leaves a contiguous prefix gap
        removed_now.append(version)
    return plan, state, oldest, removed_now


def _blockers(
    leases: Sequence[LeaseInfo], seen: Sequence[LeaseInfo], marker: CleanupMarker
) -> set[str]:
    """The live writers' leases that may own a file this run listed: one read at the start
    (the cleanup may have listed files it wrote), or one that recorded this marker (it was
    written after the start, then saw the marker)."""
    now = marker.now()
    live = live_writers(leases, now)
    at_start = {i.path for i in seen if i.writes}
    noted = {i.path for i in leases if marker.name in i.cleanups}
    return live & (at_start | noted)


def _final_leases(
    storage: Storage, marker: CleanupMarker, seen: list[LeaseInfo], wait: float
) -> list[LeaseInfo]:
    """The leases read after the manifest deletes (``R``), read again (for at most
    ``wait`` seconds) while writers this run must wait for hold theirs: they may still
    commit what it listed as unreferenced."""
    clock = marker.clock
    deadline = clock.monotonic() + wait
    leases = read_leases(storage)
    delay = 0.05
    while _blockers(leases, seen, marker) and clock.monotonic() < deadline:
        clock.sleep(delay)
        delay = min(delay * 2, 0.5)
        marker.beat()
        leases = read_leases(storage)
    return leases


def _files_to_delete(
    storage: Storage, plan: CleanupPlan, state: State, marker: CleanupMarker,
    seen: Sequence[LeaseInfo], leases: Sequence[LeaseInfo], oldest: int | None,
    removed_now: Sequence[int], intact: bool,
) -> tuple[list[str], int]:  # fmt: skip
    """The planned files still safe to delete, and how many planned ones are kept: those of
    versions a lease pins now (one written between our reads and the manifest deletes), of
    versions whose manifests stayed, of versions that landed since the listing; and every
    unreferenced file while a writer's lease may own it (or the marker may have lapsed)."""
    late = oldest_live(leases, marker.now())
    protect_files: set[str] = set()
    protect_dirs: set[str] = set()
    for v in plan.removed_versions:
        if v not in removed_now or (
            late is not None and (oldest is None or late < oldest) and v >= late
        ):
            protect_files |= state.refs[v].files
            protect_dirs |= state.refs[v].index_dirs
    settled = _protect_new_versions(storage, state, protect_files, protect_dirs)
    orphans_ok = intact and not _blockers(leases, seen, marker)
    files = (
        [
            d.path
            for d in plan.deletes
            if d.reason != "manifest"
            and d.path not in protect_files
            and not (d.path.startswith(_INDEX_PREFIX) and in_dirs(d.path, protect_dirs))
            and (orphans_ok or d.reason != "orphan")
        ]
        if settled
        else []
    )
    return files, len(plan.deletes) - len(plan.removed_versions) - len(files)


def _protect_new_versions(storage: Storage, state: State, files: set[str], dirs: set[str]) -> bool:
    """Add the references of every version listed now but not when the plan was made;
    False when one cannot be read (then no file may be deleted this run)."""
    aliases = root_aliases(storage)
    try:  # a detached version may have landed meanwhile
        keep_detached(storage, aliases, files, dirs)
    except CleanupAbortedError:
        return False
    for entry in scan_versions(storage):
        if entry.version in state.refs:
            continue
        try:
            mf = read_manifest_entry(storage, entry)
            f, d = referenced_files(mf.manifest, mf.indices, aliases=aliases, what=entry.path)
        except TxnEngineError:
            return False
        files |= f
        dirs |= d
    return True


def _min_opt(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)
