"""The plan: which versions stay, which objects go and why (pure once the state is read)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any

import attrs

from txn_engine.contention.offers import HOSTS_DIR, OFFERS_DIR, parse_claim_name, parse_offer_name
from txn_engine.errors import CleanupAbortedError, DatasetNotFoundError, InvalidStorageArgumentError
from txn_engine.format.naming import VERSIONS_DIR, VersionEntry, beacon_dead, scan_versions
from txn_engine.leases import LeaseInfo
from txn_engine.retention._refs import (
    FILE_DIRS,
    INDICES_DIR,
    Refs,
    keep_detached,
    pinned_by_refs,
    read_or_abort,
    referenced_files,
)
from txn_engine.storage.base import Storage
from txn_engine.storage.fsspec_store import FsspecStorage
from txn_engine.storage.listing import ObjectInfo, list_objects
from txn_engine.storage.local import LocalStorage
from txn_engine.storage.obstore_store import ObstoreStorage
from txn_engine.storetime import STORE_TIME_MARGIN_NS

__all__ = [
    "CleanupPlan",
    "CleanupReport",
    "Now",
    "PlannedDelete",
    "State",
    "build_plan",
    "check_duration",
    "check_leases",
    "in_dirs",
    "live_writers",
    "oldest_live",
    "read_state",
]

_NS = 1_000_000_000
_INDEX_PREFIX = INDICES_DIR + "/"


@attrs.frozen
class PlannedDelete:
    """One object cleanup deletes, and why: ``"manifest"`` (a removed version),
    ``"old-version"`` (referenced only by removed versions), ``"orphan"`` (referenced by no
    manifest, older than the retention), ``"lease"`` (an expired lease object),
    ``"offer"`` (an offer whose window has passed), ``"beacon"`` (an expired carrier's
    beacon in ``_versions/``, :func:`txn_engine.format.naming.beacon_name`) or ``"claim"``
    (a claim to host a carrier for a version older than the latest,
    :func:`txn_engine.contention.offers.claim_name`)."""

    path: str
    reason: str
    size: int | None = None
    mtime_ns: int | None = None


@attrs.frozen
class CleanupPlan:
    """What :func:`cleanup` deletes (``dry_run=True`` returns this without deleting)."""

    uri: str
    latest_version: int
    kept_versions: tuple[int, ...]
    removed_versions: tuple[int, ...]
    deletes: tuple[PlannedDelete, ...]
    oldest_lease_version: int | None
    tagged_versions: tuple[int, ...]
    kept_files: int

    @property
    def counts(self) -> dict[str, int]:
        """Number of objects to delete per reason."""
        out = {
            "manifest": 0,
            "old-version": 0,
            "orphan": 0,
            "lease": 0,
            "offer": 0,
            "beacon": 0,
            "claim": 0,
        }
        for d in self.deletes:
            out[d.reason] = out.get(d.reason, 0) + 1
        return out

    @property
    def bytes(self) -> int:
        """Total size of the objects to delete (sizes the listing did not give count 0)."""
        return sum(d.size or 0 for d in self.deletes)

    @property
    def oldest_removed(self) -> int | None:
        """The oldest version whose manifest is removed (None when none is)."""
        return self.removed_versions[0] if self.removed_versions else None

    @property
    def newest_removed(self) -> int | None:
        """The newest version whose manifest is removed (None when none is)."""
        return self.removed_versions[-1] if self.removed_versions else None

    def summary(self) -> str:
        """A few human-readable lines: counts, bytes, oldest/newest removed version."""
        c = self.counts
        removed = (
            f"versions {self.oldest_removed}..{self.newest_removed}"
            if self.removed_versions
            else "no versions"
        )
        kept = self.kept_versions
        lines = [
            f"{self.uri}: latest version {self.latest_version}; removing {removed} "
            f"({len(self.removed_versions)}), keeping {len(kept)}"
            + (f" ({kept[0]}..{kept[-1]})" if kept else ""),
            f"files to delete: {c['old-version']} of removed versions, {c['orphan']} orphans, "
            f"{c['lease']} expired leases, {c['offer']} expired offers, "
            + (f"{c['beacon']} expired carrier beacons, " if c["beacon"] else "")
            + (f"{c['claim']} old carrier claims, " if c["claim"] else "")
            + f"{c['manifest']} manifests; {self.bytes} bytes",
        ]
        if self.oldest_lease_version is not None:
            lines.append(f"oldest live lease pins version {self.oldest_lease_version}")
        if self.tagged_versions:
            lines.append(f"tagged/branch-base versions kept: {list(self.tagged_versions)}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """The full plan as JSON-ready data (every path)."""
        return {
            "uri": self.uri,
            "latest_version": self.latest_version,
            "kept_versions": list(self.kept_versions),
            "removed_versions": list(self.removed_versions),
            "oldest_removed": self.oldest_removed,
            "newest_removed": self.newest_removed,
            "oldest_lease_version": self.oldest_lease_version,
            "tagged_versions": list(self.tagged_versions),
            "counts": self.counts,
            "bytes": self.bytes,
            "kept_files": self.kept_files,
            "deletes": [attrs.asdict(d) for d in self.deletes],
        }


@attrs.frozen
class CleanupReport:
    """What :func:`cleanup` did: the plan it executed, what was deleted and what failed."""

    plan: CleanupPlan
    deleted: int
    failed: tuple[tuple[str, str], ...]
    kept_for_new_leases: int
    seconds: float

    @property
    def ok(self) -> bool:
        """True when every planned delete succeeded."""
        return not self.failed

    def summary(self) -> str:
        """The plan's summary plus the outcome."""
        tail = f"deleted {self.deleted} objects in {self.seconds:.2f}s"
        if self.kept_for_new_leases:
            tail += f"; kept {self.kept_for_new_leases} files a new lease pinned"
        if self.failed:
            tail += f"; {len(self.failed)} deletes failed"
        return self.plan.summary() + "\n" + tail

    def to_json(self) -> dict[str, Any]:
        """The plan plus the outcome as JSON-ready data."""
        out = self.plan.to_json()
        out.update(
            deleted=self.deleted,
            failed=[{"path": p, "error": e} for p, e in self.failed],
            kept_for_new_leases=self.kept_for_new_leases,
            seconds=self.seconds,
        )
        return out


@attrs.frozen
class Now:
    """The moment a plan judges ages and leases at: the cleaner's wall clock, and the
    store's clock when it is known (:mod:`txn_engine.storetime`); listed modification times
    are compared with the store's, never with a machine's."""

    wall_ns: int
    store_ns: int | None = None

    def listing_ns(self) -> int:
        """Now in the clock of listed modification times (the store's when known)."""
        return self.store_ns if self.store_ns is not None else self.wall_ns


def check_leases(leases: Sequence[LeaseInfo]) -> None:
    """Refuse to plan while a lease object cannot be read: what it protects is unknown."""
    for info in leases:
        if info.error is not None:
            raise CleanupAbortedError(
                f"lease object {info.path} is malformed ({info.error}); cleanup cannot tell "
                "what it protects, nothing was deleted. Delete it once its owner is gone.",
                path=info.path,
            )


def oldest_live(leases: Sequence[LeaseInfo], now: Now) -> int | None:
    """The oldest version a live lease pins (None when no lease is live)."""
    check_leases(leases)
    live = [
        i.version for i in leases if i.version is not None and i.live(now.wall_ns, now.store_ns)
    ]
    return min(live) if live else None


def live_writers(leases: Sequence[LeaseInfo], now: Now) -> set[str]:
    """The paths of the live leases of writers (holders that may write files)."""
    return {i.path for i in leases if i.writes and i.live(now.wall_ns, now.store_ns)}


def _old_enough(mtime_ns: int | None, retention_ns: int, now: Now) -> bool:
    """Whether an unreferenced file is older than the orphan retention: in store time with
    the store-time margin (a listed time may be that much earlier than the write); a file
    whose age the store does not tell only with a zero retention."""
    if retention_ns == 0:
        return True
    if mtime_ns is None:
        return False
    margin = STORE_TIME_MARGIN_NS if now.store_ns is not None else 0
    return mtime_ns + margin <= now.listing_ns() - retention_ns


def _lease_gone_long(info: LeaseInfo, retention_ns: int, now: Now) -> bool:
    """An expired lease object that expired longer than the retention ago (it is removed)."""
    if info.error is not None or info.live(now.wall_ns, now.store_ns):
        return False
    if now.store_ns is not None and info.mtime_ns is not None and info.ttl_ns is not None:
        return info.mtime_ns + info.ttl_ns + STORE_TIME_MARGIN_NS + retention_ns <= now.store_ns
    return info.expires_at_ns <= now.wall_ns - retention_ns


def check_duration(name: str, value: timedelta) -> int:
    """``value`` in whole ns; a non-timedelta or a negative one is refused."""
    if not isinstance(value, timedelta):
        raise InvalidStorageArgumentError(f"{name} must be a timedelta, got {value!r}")
    if value < timedelta(0):
        raise InvalidStorageArgumentError(f"{name} must not be negative, got {value}")
    return int(value.total_seconds() * _NS)


@attrs.define
class State:
    """Everything read for a plan (reused when only the leases changed)."""

    entries: list[VersionEntry]
    refs: dict[int, Refs]
    timestamps: dict[int, int]
    sizes: dict[int, int]
    pinned: set[int]
    branch_files: set[str]
    branch_dirs: set[str]
    listing: list[ObjectInfo]
    offers: list[ObjectInfo] = attrs.field(factory=list)
    #: claims to host a carrier (:data:`txn_engine.contention.offers.HOSTS_DIR`)
    claims: list[ObjectInfo] = attrs.field(factory=list)
    #: carrier beacons in ``_versions/`` (:func:`txn_engine.format.naming.beacon_name`)
    #: with their listed modification times (None when the store lists none)
    beacons: tuple[tuple[str, int | None], ...] = ()


def read_state(
    storage: Storage, aliases: set[str], *, beat: Callable[[], None] | None = None
) -> State:
    """Everything a plan needs: the versions and what each references, the pins of tags and
    branches, and the listed files (``beat`` is called between manifest reads: a running
    cleanup keeps its marker fresh)."""
    listing_versions = scan_versions(storage)
    entries = list(listing_versions)
    if not entries:
        raise DatasetNotFoundError(f"no Lance dataset at {storage.uri} (no manifests)")
    refs: dict[int, Refs] = {}
    timestamps: dict[int, int] = {}
    sizes: dict[int, int] = {}
    for entry in entries:
        if beat is not None:
            beat()
        mf = read_or_abort(storage, entry)
        f, d = referenced_files(mf.manifest, mf.indices, aliases=aliases, what=entry.path)
        refs[entry.version] = Refs(f, d)
        ts = mf.manifest.timestamp
        timestamps[entry.version] = ts.seconds * _NS + ts.nanos
        sizes[entry.version] = mf.size
    pinned, branch_files, branch_dirs = pinned_by_refs(storage, aliases)
    keep_detached(storage, aliases, branch_files, branch_dirs)  # kept like a branch's
    listing: list[ObjectInfo] = []
    for directory in FILE_DIRS:
        listing.extend(list_objects(storage, directory))
    if not lists_recursively(storage):
        # a plain listing cannot see into sub-directories: list each known index directory
        known = {p for r in refs.values() for p in r.index_dirs} | branch_dirs
        seen = {o.path for o in listing}
        for index_dir in sorted(known):
            for obj in list_objects(storage, index_dir):
                if obj.path not in seen:
                    listing.append(obj)
    offers = list_objects(storage, OFFERS_DIR)
    claims = list_objects(storage, HOSTS_DIR)
    return State(
        entries,
        refs,
        timestamps,
        sizes,
        pinned,
        branch_files,
        branch_dirs,
        listing,
        offers,
        claims,
        _beacon_times(storage, listing_versions.beacons),
    )


def lists_recursively(storage: Storage) -> bool:
    return callable(getattr(storage, "list_objects", None)) or isinstance(
        storage, (LocalStorage, FsspecStorage, ObstoreStorage)
    )


def in_dirs(path: str, dirs: Iterable[str]) -> bool:
    if not path.startswith(INDICES_DIR + "/"):
        return False  # index directories are the only directory references
    return any(path.startswith(d + "/") for d in dirs)


def _beacon_times(storage: Storage, names: tuple[str, ...]) -> tuple[tuple[str, int | None], ...]:
    """Each listed beacon with its modification time (one more listing, only when a beacon
    is there)."""
    if not names:
        return ()
    times = {o.path.rsplit("/", 1)[-1]: o.mtime_ns for o in list_objects(storage, VERSIONS_DIR)}
    return tuple((name, times.get(name)) for name in names)


def _kept_versions(
    state: State, *, now: Now, older_than_ns: int, keep_versions: int,
    oldest_lease: int | None, floor: int | None,
) -> set[int]:  # fmt: skip
    versions = [e.version for e in state.entries]
    cutoff = now.wall_ns - older_than_ns  # manifest timestamps, as pylance judges them
    kept: set[int] = {versions[-1]}
    kept |= set(versions[-keep_versions:])
    kept |= {v for v in versions if state.timestamps[v] > cutoff}
    for lowest in (oldest_lease, floor):
        if lowest is not None:
            kept |= {v for v in versions if v >= lowest}
    kept |= state.pinned & set(versions)
    return kept


def _file_deletes(
    state: State, kept: set[int], removed: list[int], retention_ns: int, now: Now
) -> tuple[list[PlannedDelete], int]:
    kept_files: set[str] = set(state.branch_files)
    kept_dirs: set[str] = set(state.branch_dirs)
    for v in kept:
        kept_files |= state.refs[v].files
        kept_dirs |= state.refs[v].index_dirs
    removed_files: set[str] = set()
    removed_dirs: set[str] = set()
    for v in removed:
        removed_files |= state.refs[v].files
        removed_dirs |= state.refs[v].index_dirs
    deletes: list[PlannedDelete] = []
    add = deletes.append
    kept_count = 0
    # one pass per listed file: index-directory checks only for paths under _indices/
    for obj in state.listing:
        p = obj.path
        in_index = p.startswith(_INDEX_PREFIX)
        if p in kept_files or (in_index and in_dirs(p, kept_dirs)):
            kept_count += 1
            continue
        if p in removed_files or (in_index and in_dirs(p, removed_dirs)):
            add(PlannedDelete(p, "old-version", obj.size, obj.mtime_ns))
        elif _old_enough(obj.mtime_ns, retention_ns, now):
            add(PlannedDelete(p, "orphan", obj.size, obj.mtime_ns))
    return deletes, kept_count


def _housekeeping_deletes(
    state: State, leases: Sequence[LeaseInfo], retention_ns: int, now: Now
) -> list[PlannedDelete]:
    """Expired leases, spent offers, old claims, dead carriers' beacons."""
    latest = state.entries[-1].version
    out = [PlannedDelete(i.path, "lease") for i in leases if _lease_gone_long(i, retention_ns, now)]
    for obj in state.offers:  # an offer whose window has passed can never land
        parsed = parse_offer_name(obj.path.rsplit("/", 1)[-1])
        if parsed is not None and parsed[0] <= latest:
            out.append(PlannedDelete(obj.path, "offer", obj.size, obj.mtime_ns))
    for obj in state.claims:  # only the losers of a race to that version ever read it
        claimed = parse_claim_name(obj.path.rsplit("/", 1)[-1])
        if claimed is not None and claimed < latest:
            out.append(PlannedDelete(obj.path, "claim", obj.size, obj.mtime_ns))
    for name, mtime in state.beacons:  # a hint to wait, and only while its carrier runs
        if beacon_dead(name, mtime, now.wall_ns, now.store_ns):
            out.append(PlannedDelete(f"{VERSIONS_DIR}/{name}", "beacon"))
    return out


def build_plan(
    storage: Storage,
    state: State,
    *,
    now: Now,
    older_than_ns: int,
    keep_versions: int,
    retention_ns: int,
    oldest_lease: int | None,
    leases: Sequence[LeaseInfo],
    floor: int | None = None,
) -> CleanupPlan:
    """The plan for ``state`` (see :mod:`txn_engine.retention` for the rules): ``floor``,
    the latest version when the cleanup put up its marker, is kept with every later one."""
    kept = _kept_versions(
        state, now=now, older_than_ns=older_than_ns, keep_versions=keep_versions,
        oldest_lease=oldest_lease, floor=floor,
    )  # fmt: skip
    removed = [e.version for e in state.entries if e.version not in kept]
    by_version = {e.version: e for e in state.entries}
    deletes = [PlannedDelete(by_version[v].path, "manifest", state.sizes[v]) for v in removed]
    files, kept_count = _file_deletes(state, kept, removed, retention_ns, now)
    deletes += files
    deletes += _housekeeping_deletes(state, leases, retention_ns, now)
    return CleanupPlan(
        uri=storage.uri,
        latest_version=state.entries[-1].version,
        kept_versions=tuple(sorted(kept)),
        removed_versions=tuple(removed),
        deletes=tuple(deletes),
        oldest_lease_version=oldest_lease,
        tagged_versions=tuple(sorted(state.pinned)),
        kept_files=kept_count,
    )
