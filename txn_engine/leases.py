"""Leases: small objects in the table that pin a version against cleanup.

A writer planning against a version, or a reader scanning one, takes a lease::

    with txn_engine.lease(uri) as held:            # version=None: the latest
        plan_and_commit(held.version)              # commit(..., lease=held)

The lease is the JSON object ``_txn_engine/leases/<uuid>.json``::

    {"version": 7, "created_at_ns": ..., "expires_at_ns": ..., "ttl_ns": ...,
     "owner": "host:pid", "writes": true, "cleanups": ["<marker uuid>", ...]}

written when the lease is taken, rewritten every ``ttl / 3`` seconds (one daemon thread per
process renews every lease that asks for it), and deleted when the ``with`` block exits (or
on :meth:`Lease.release`). While a lease lives, :func:`txn_engine.retention.cleanup` keeps
its version and every later one with every file they reference; while a *writer's* lease
(``writes=True``, the default) that cleanup may not have seen lives, cleanup deletes no
unreferenced file at all (it cannot tell the holder's uncommitted files from others).

**No clock of another machine decides anything.** Whether a lease is still live is judged
by cleanup in the *store's* clock: the modification time the store lists for the lease
object (stamped when it was last written) plus its ``ttl_ns`` plus
:data:`~txn_engine.storetime.STORE_TIME_MARGIN_NS`, against the store's time now, read off
the cleanup's own marker (:mod:`txn_engine.storetime`). The holder judges its own lease by
its own monotonic clock, from the moment it *sent* the last successful write: that moment
precedes the store's stamp, so whenever the holder finds its lease live, no cleanup has yet
found it expired. Stores that list no modification times (``memory://``) fall back to the
wall clocks (``expires_at_ns`` against the cleaner's clock: one machine, or synchronized
clocks).

**The protocol with cleanup** (checked with spin: ``models/commit_protocol.pml``):

1. cleanup lists the versions, puts up a marker ``_txn_engine/cleaning/<floor>-<uuid>.json``
   (``floor``: the latest version it listed; it never removes a version at or above it),
   then reads the leases, lists the versions and the files, plans, removes manifests,
   reads the leases again (``R``) and lists the versions again before it deletes files;
2. the holder writes its lease, then lists the markers. With none up, a cleanup that
   starts later reads the lease. With markers up, the holder records their uuids in its
   lease (``cleanups``, one more write) and, if its version is below a marker's floor,
   moves the lease to the latest version (``version=None``) or waits, bounded, for those
   markers to go (a given version); then it checks the version still exists.

A cleanup that missed a lease (it read the leases before the lease was written) had its
marker up when the holder listed the markers, so every file the holder writes afterwards
was either listed by the cleanup after the holder recorded the marker in its lease (so
``R`` shows the note, and the cleanup deletes no unreferenced file) or not listed at all.
Nobody waits on a marker for correctness: a cleanup that was killed leaves a marker that
costs writers one write per lease until a later cleanup removes it (markers unchanged in
store time for :data:`MARKER_STALE_NS`).

**Before a manifest create** the commit loop calls :meth:`Lease.check`: a lease with less
than half its ``ttl`` left is renewed first, and one that expired (the holder stalled past
its ``ttl``: GC, a paused VM, SIGSTOP) raises :class:`~txn_engine.errors.LeaseExpiredError`
and nothing is created. After the create, :meth:`Lease.held` must still be true, or the
commit is withdrawn (:mod:`txn_engine.commit`).
"""

from __future__ import annotations

import heapq
import itertools
import json
import os
import re
import socket
import threading
import uuid as uuid_module
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, TypeGuard

import attrs

from txn_engine import jsontext
from txn_engine.clock import SYSTEM_CLOCK, Clock
from txn_engine.errors import (
    DatasetNotFoundError,
    InvalidStorageArgumentError,
    LeaseExpiredError,
    StorageError,
    VersionNotFoundError,
)
from txn_engine.format.io import latest_version, resolve_version
from txn_engine.format.naming import VersionEntry
from txn_engine.storage import open_storage
from txn_engine.storage.base import Storage
from txn_engine.storage.listing import list_objects
from txn_engine.storetime import STORE_TIME_MARGIN_NS

__all__ = [
    "CLEANING_DIR",
    "LEASES_DIR",
    "MARKER_STALE_NS",
    "MAX_LEASE_TTL",
    "Lease",
    "LeaseInfo",
    "MarkerInfo",
    "lease",
    "list_markers",
    "marker_name",
    "parse_marker_name",
    "read_leases",
]

#: the longest lease: ten years in seconds (a longer one is a pin, not a lease; an infinite
#: one cannot be written as an expiry time)
MAX_LEASE_TTL = 315_576_000.0
#: Where lease objects live, relative to the dataset root.
LEASES_DIR = "_txn_engine/leases"
#: Where running cleanups put their markers (see the module docstring).
CLEANING_DIR = "_txn_engine/cleaning"
#: A marker the store shows unchanged for this long (store time) belongs to a cleanup that
#: stopped without taking it down: a later cleanup removes it. A running cleanup rewrites
#: its marker every few seconds.
MARKER_STALE_NS = 60 * 1_000_000_000
_NS = 1_000_000_000
_ACQUIRE_ATTEMPTS = 8
#: :meth:`Lease.check` renews a lease with less than this fraction of its ttl left.
_RENEW_BELOW = 0.5
#: A marker's name: ``<floor>-<uuid>.json``; the floor is a version number.
_MARKER = re.compile(r"(0|[1-9][0-9]{0,18})-([0-9a-f]{32})\.json", re.ASCII)


@attrs.frozen
class LeaseInfo:
    """One lease object as read back from storage.

    ``version`` is ``None`` (and ``error`` says why) when the object is not a valid lease;
    cleanup refuses to run while such an object exists, because it cannot tell what the
    object protects. ``mtime_ns`` is the store's modification time of the object (None when
    the store lists none); ``ttl_ns`` None for a lease written without one (older writers).
    """

    path: str
    version: int | None
    created_at_ns: int
    expires_at_ns: int
    owner: str
    error: str | None = None
    ttl_ns: int | None = None
    writes: bool = True
    cleanups: tuple[str, ...] = ()
    mtime_ns: int | None = None

    def live(self, now_ns: int, store_now_ns: int | None = None) -> bool:
        """Whether the lease still protects its version: in store time when both the
        store's time now (``store_now_ns``) and the object's modification time are known
        (its last write + ``ttl_ns`` + the store-time margin), else by the wall clock
        ``now_ns`` against ``expires_at_ns``."""
        if self.error is not None:
            return False
        if store_now_ns is not None and self.mtime_ns is not None and self.ttl_ns is not None:
            return self.mtime_ns + self.ttl_ns + STORE_TIME_MARGIN_NS > store_now_ns
        return self.expires_at_ns > now_ns


@attrs.frozen
class MarkerInfo:
    """A running cleanup's marker as listed: its name, the cleanup's uuid and floor (None
    when the name is not a marker's: another tool's object, or a forgery)."""

    name: str
    uuid: str | None
    floor: int | None
    mtime_ns: int | None = None


def marker_name(floor: int, uuid: str) -> str:
    """The name of a cleanup's marker: it removes no version at or above ``floor``."""
    return f"{floor}-{uuid}.json"


def parse_marker_name(name: str) -> tuple[int, str] | None:
    """``(floor, uuid)`` of a marker's name; None for any other name."""
    found = _MARKER.fullmatch(name)
    return None if found is None else (int(found.group(1)), found.group(2))


def list_markers(storage: Storage, *, times: bool = False) -> list[MarkerInfo]:
    """The cleanup markers up now (one listing; ``times``: with the store's modification
    times, where the store lists them)."""
    if times:
        objects = list_objects(storage, CLEANING_DIR)
        named = [(o.path.rsplit("/", 1)[-1], o.mtime_ns) for o in objects]
    else:
        named = [(name, None) for name in storage.list(CLEANING_DIR)]
    out = []
    for name, mtime in sorted(named):
        parsed = parse_marker_name(name)
        floor, uuid = (None, None) if parsed is None else parsed
        out.append(MarkerInfo(name, uuid, floor, mtime))
    return out


def _encode(
    version: int, created_at_ns: int, expires_at_ns: int, ttl_ns: int, owner: str,
    writes: bool, cleanups: Sequence[str],
) -> bytes:  # fmt: skip
    return json.dumps(
        {
            "version": version,
            "created_at_ns": created_at_ns,
            "expires_at_ns": expires_at_ns,
            "ttl_ns": ttl_ns,
            "owner": owner,
            "writes": writes,
            "cleanups": list(cleanups),
        },
        sort_keys=True,
    ).encode()


def _count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _decode(path: str, data: bytes, mtime_ns: int | None) -> LeaseInfo:
    try:
        obj = jsontext.loads(data)
    except ValueError as exc:  # jsontext: anything that is not strict JSON
        return LeaseInfo(path, None, 0, 0, "", error=f"not JSON: {exc}")
    if not isinstance(obj, dict):
        return LeaseInfo(path, None, 0, 0, "", error="not a JSON object")
    version, created, expires = (
        obj.get("version"),
        obj.get("created_at_ns"),
        obj.get("expires_at_ns"),
    )
    if not (_count(version) and _count(created) and _count(expires)):
        return LeaseInfo(path, None, 0, 0, "", error="version/created_at_ns/expires_at_ns")
    ttl, writes, cleanups = obj.get("ttl_ns"), obj.get("writes", True), obj.get("cleanups", [])
    if not isinstance(writes, bool):
        return LeaseInfo(path, None, 0, 0, "", error="writes is not true or false")
    if not isinstance(cleanups, list) or not all(isinstance(c, str) for c in cleanups):
        return LeaseInfo(path, None, 0, 0, "", error="cleanups is not a list of names")
    owner = obj.get("owner")
    return LeaseInfo(
        path,
        version,
        created,
        expires,
        owner if isinstance(owner, str) else "",
        ttl_ns=ttl if _count(ttl) else None,
        writes=writes,
        cleanups=tuple(cleanups),
        mtime_ns=mtime_ns,
    )


def read_leases(storage: Storage) -> list[LeaseInfo]:
    """Every lease object of the dataset (live, expired and malformed ones), by path, with
    the store's modification times where it lists them.

    A lease deleted between the listing and its read is skipped (it was released).
    """
    found: list[LeaseInfo] = []
    for obj in sorted(list_objects(storage, LEASES_DIR), key=lambda o: o.path):
        if not obj.path.endswith(".json") or obj.path.count("/") != LEASES_DIR.count("/") + 1:
            continue
        try:
            data = storage.get(obj.path)
        except FileNotFoundError:  # ObjectNotFoundError: released meanwhile
            continue
        found.append(_decode(obj.path, data, obj.mtime_ns))
    return found


def _listed(storage: Storage, path: str) -> LeaseInfo | None:
    """The lease object at ``path`` with its listed modification time (None when absent)."""
    for info in read_leases(storage):
        if info.path == path:
            return info
    return None


def _default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class _Renewer:
    """The one daemon thread of a process that renews every background lease when due.

    Starting a thread per lease cost about as much as the rest of a small commit; one
    shared thread renews each lease every ``ttl / 3`` seconds instead. A lease leaves the
    schedule when :meth:`Lease.release` runs or its renewal says to stop. After ``fork``
    the child starts its own thread on first use.
    """

    def __init__(self) -> None:
        self._seq = itertools.count()
        self._reset()

    def _reset(self) -> None:
        """Start empty (also in a forked child: the parent's lock may have been held by its
        renewer thread at the fork, and the parent's leases are the parent's to renew)."""
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Lease]] = []
        self._thread: threading.Thread | None = None
        self._pid = 0

    def add(self, held: Lease, interval: float) -> None:
        with self._cond:
            if len(self._heap) > 1024:  # released leases wait for their turn to leave: purge
                self._heap = [e for e in self._heap if not e[2].released]
                heapq.heapify(self._heap)
            entry = (SYSTEM_CLOCK.monotonic() + interval, next(self._seq), held)
            heapq.heappush(self._heap, entry)
            thread = self._thread
            if thread is None or self._pid != os.getpid() or not thread.is_alive():
                self._pid = os.getpid()
                self._thread = threading.Thread(
                    target=self._loop, name="txn_engine-lease-renewer", daemon=True
                )
                self._thread.start()
            elif self._heap[0] is entry:  # due before everything else: wait less
                self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while True:
                    # released leases leave the schedule at once
                    while self._heap and self._heap[0][2].released:
                        heapq.heappop(self._heap)
                    now = SYSTEM_CLOCK.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        _, _, held = heapq.heappop(self._heap)
                        break
                    self._cond.wait(None if not self._heap else self._heap[0][0] - now)
            interval = held._renew_tick()  # outside the lock: it writes
            if interval is not None:
                with self._cond:
                    due = SYSTEM_CLOCK.monotonic() + interval
                    heapq.heappush(self._heap, (due, next(self._seq), held))


_RENEWER = _Renewer()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_RENEWER._reset)


class Lease:
    """A held lease (see the module docstring); use it as a context manager.

    ``version`` is the pinned version (the latest at acquisition when none was given).
    ``writes``: the holder may write data files before it commits (a writer; the default);
    ``False`` for a reader, whose lease pins versions only. The lease renews itself from a
    daemon thread every ``ttl / 3`` seconds until :meth:`release` (``renew_in_background=
    False``: only :meth:`renew` and :meth:`check` renew it). ``wait``: seconds to wait at
    most, when a given ``version`` is below a running cleanup's floor, for that cleanup to
    finish (the version is then checked; it may be gone). ``clock``: the wall and monotonic
    clocks (tests and simulations give their own).
    """

    def __init__(
        self,
        storage: Storage,
        version: int | None,
        *,
        ttl: float,
        owner: str,
        writes: bool = True,
        renew_in_background: bool = True,
        wait: float = 30.0,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if not 0 < ttl <= MAX_LEASE_TTL:  # NaN and infinity too (int(inf) raised OverflowError)
            raise InvalidStorageArgumentError(
                f"lease ttl must be a number of seconds above 0 and at most {MAX_LEASE_TTL:g} "
                f"(ten years), got {ttl!r}"
            )
        if not 0 <= wait < MAX_LEASE_TTL:
            raise InvalidStorageArgumentError(f"lease wait must be seconds >= 0, got {wait!r}")
        self._storage = storage
        self._clock = clock
        self._ttl_ns = int(ttl * _NS)
        self._ttl = ttl
        self._owner = owner
        self._writes = writes
        self._wait = wait
        self._id = str(uuid_module.uuid4())
        self._path = f"{LEASES_DIR}/{self._id}.json"
        self._lock = threading.Lock()
        self._released = False
        self._expired = False
        self._created_at_ns = clock.wall_ns()
        self._expires_at_ns = 0
        #: monotonic time the last successful write was sent (the lease is held until
        #: ``_sent_at + ttl`` by the holder's clock)
        self._sent_at = clock.monotonic()
        self._cleanups: tuple[str, ...] = ()
        self.last_error: BaseException | None = None
        self._entry: VersionEntry | None = None
        self._version = self._acquire(version)
        if renew_in_background:
            _RENEWER.add(self, ttl / 3)

    @classmethod
    def resume(
        cls,
        storage: Storage,
        path: str,
        *,
        owner: str | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> Lease:
        """Take over the lease object at ``path`` that another process wrote (a Spark job's
        planning worker, whose commit runs in another worker), renewing it at once; the
        result is checked before a create like any lease (not renewed in the background).

        The renewal must land before the lease ran out, judged in store time (the object's
        listed modification time before and after the renewal) where the store lists
        times, else by ``expires_at_ns`` against this machine's clock (the writer's host).
        Raises :class:`~txn_engine.errors.LeaseExpiredError` when it did not (or the object
        is gone or not a lease): cleanup may have removed what it protected.
        """
        before = _listed(storage, path)
        if before is None or before.version is None or before.ttl_ns is None:
            raise LeaseExpiredError(f"lease {path} is gone or is not a lease: re-plan")
        held = cls.__new__(cls)
        held._setup(storage, path, before, owner, clock)
        held._write(before.version)
        after = _listed(storage, path)
        if before.mtime_ns is not None and after is not None and after.mtime_ns is not None:
            lapsed = after.mtime_ns >= before.mtime_ns + before.ttl_ns
        else:
            lapsed = clock.wall_ns() >= before.expires_at_ns
        if lapsed:
            held._expired = True
            raise LeaseExpiredError(
                f"lease {path} on version {before.version} ran out before it was taken over "
                "(the job ran longer than its lease): cleanup may have removed its files"
            )
        return held

    def _setup(
        self, storage: Storage, path: str, info: LeaseInfo, owner: str | None, clock: Clock
    ) -> None:
        """The state of a lease taken over by :meth:`resume`."""
        assert info.version is not None
        assert info.ttl_ns is not None
        self._storage, self._clock, self._path = storage, clock, path
        self._ttl_ns, self._ttl = info.ttl_ns, info.ttl_ns / _NS
        self._owner = owner or info.owner
        self._writes, self._wait, self._id = info.writes, 0.0, path.rsplit("/", 1)[-1]
        self._lock = threading.Lock()
        self._released = self._expired = False
        self._created_at_ns, self._expires_at_ns = info.created_at_ns, info.expires_at_ns
        self._sent_at = clock.monotonic()
        self._cleanups = info.cleanups
        self.last_error = None
        self._entry = None
        self._version = info.version

    def _write(self, version: int) -> None:
        sent = self._clock.monotonic()
        expires = self._clock.wall_ns() + self._ttl_ns
        data = _encode(
            version, self._created_at_ns, expires, self._ttl_ns, self._owner, self._writes,
            self._cleanups,
        )  # fmt: skip
        self._storage.put(self._path, data)
        self._expires_at_ns = expires
        self._sent_at = sent

    def _acquire(self, version: int | None) -> int:
        for _ in range(_ACQUIRE_ATTEMPTS):
            # (a given version is checked only after the lease is written: that check is the
            # one the protocol needs, and a version that is absent fails it the same way)
            target = latest_version(self._storage).version if version is None else version
            self._write(target)
            target = self._note_cleanups(target, version is None)
            try:
                self._entry = resolve_version(self._storage, target)
            except (VersionNotFoundError, DatasetNotFoundError):
                # cleaned up between resolving and writing the lease: it protects nothing
                self._storage.delete(self._path)
                if version is not None:
                    raise
                continue
            return target
        raise VersionNotFoundError(
            f"{self._storage.uri}: the latest version kept being cleaned up while a lease "
            f"was taken ({_ACQUIRE_ATTEMPTS} attempts)"
        )

    def _note_cleanups(self, target: int, latest: bool) -> int:
        """Step 2 of the protocol, after the lease is written: record the markers up now in
        the lease, and move it above their floors (``latest``) or wait for them, bounded."""
        markers = list_markers(self._storage)
        if not markers:
            return target
        floor = max((m.floor for m in markers if m.floor is not None), default=0)
        if target < floor and latest:
            target = max(target, latest_version(self._storage).version)
        self._cleanups = tuple(m.name for m in markers)
        self._write(target)
        if target < floor and not latest:
            self._wait_below(target)
        return target

    def _wait_below(self, version: int) -> None:
        """Wait (at most ``wait`` seconds) until no marker whose floor is above ``version``
        is up: such a cleanup may remove ``version``, which is checked right after."""
        deadline = self._clock.monotonic() + self._wait
        delay = 0.02
        while self._clock.monotonic() < deadline:
            if not any(
                m.floor is not None and m.floor > version for m in list_markers(self._storage)
            ):
                return
            self._clock.sleep(min(delay, max(0.0, deadline - self._clock.monotonic())))
            delay = min(delay * 2, 1.0)

    @property
    def version(self) -> int:
        """The version this lease pins (every version at or after it is kept)."""
        return self._version

    @property
    def entry(self) -> VersionEntry | None:
        """Where the pinned version's manifest was found once the lease was up (read it
        from there without looking it up again); None for a lease taken over with
        :meth:`resume`."""
        return self._entry

    @property
    def path(self) -> str:
        """The lease object's path relative to the dataset root."""
        return self._path

    @property
    def owner(self) -> str:
        """The owner recorded in the lease object."""
        return self._owner

    @property
    def ttl(self) -> float:
        """Seconds the lease lives past each write."""
        return self._ttl

    @property
    def expires_at_ns(self) -> int:
        """Wall-clock expiry (ns since the epoch) as last written (informative only)."""
        return self._expires_at_ns

    @property
    def expired(self) -> bool:
        """True once the lease was found expired (it protects nothing)."""
        return self._expired

    @property
    def released(self) -> bool:
        """True after :meth:`release`."""
        return self._released

    def remaining(self) -> float:
        """Seconds the lease is still held for, by this process's monotonic clock (counted
        from when its last write was sent; at most ``ttl``)."""
        return self._sent_at + self._ttl - self._clock.monotonic()

    def held(self) -> bool:
        """Whether the lease still protects its version now: not released, and its last
        write was sent less than ``ttl`` ago (then no cleanup has found it expired)."""
        return not self._released and not self._expired and self.remaining() > 0

    def renew(self) -> None:
        """Push the expiry ``ttl`` seconds into the future now.

        Raises :class:`~txn_engine.errors.LeaseExpiredError` when the lease had already
        expired (or was released), or when the renewal reached the store only after it
        expired; :class:`~txn_engine.errors.StorageError` when the write failed (the lease
        is still held until its current expiry; try again).
        """
        with self._lock:
            if self._released:
                raise LeaseExpiredError(f"lease {self._path} was released")
            if not self.held():
                raise self._expire()
            deadline = self._sent_at + self._ttl
            self._write(self._version)
            if self._clock.monotonic() >= deadline:  # the old one ran out before it landed
                raise self._expire()

    def _expire(self) -> LeaseExpiredError:
        self._expired = True
        return LeaseExpiredError(
            f"lease {self._path} on version {self._version} expired before it was "
            "renewed (the holder stalled for longer than its ttl, or storage failed that "
            "long); cleanup may have removed what it protected: re-read and re-plan"
        )

    def check(self) -> None:
        """Before a commit's manifest create: raise :class:`~txn_engine.errors.
        LeaseExpiredError` when the lease no longer protects its version, renewing it first
        when less than half its ``ttl`` is left (a renewal that fails leaves it as it was)."""
        if self._released:
            raise LeaseExpiredError(f"lease {self._path} was released before the commit")
        if self.remaining() < self._ttl * _RENEW_BELOW:
            try:
                self.renew()
            except StorageError as exc:
                self.last_error = exc
        if not self.held():
            raise self._expire()

    def _renew_tick(self) -> float | None:
        """One background renewal; the delay until the next one, or None to stop."""
        try:
            self.renew()
        except LeaseExpiredError as exc:
            if not self._released:
                self.last_error = exc
            return None
        except StorageError as exc:  # transient: retry soon
            self.last_error = exc
            return self._ttl / 12
        return self._ttl / 3

    def release(self) -> None:
        """Stop renewing and delete the lease object (idempotent; never raises for the
        store: a lease object the delete could not remove protects until it expires, and
        cleanup removes it later; the error is kept in :attr:`last_error`)."""
        with self._lock:
            if self._released:
                return
            self._released = True
            # a renewal writes under the lock and checks ``_released`` first, so none can
            # re-create the object after the delete below
            try:
                self._storage.delete(self._path)
            except StorageError as exc:
                self.last_error = exc

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"Lease(version={self._version}, path={self._path!r}, owner={self._owner!r})"


def lease(
    uri_or_storage: str | os.PathLike[str] | Storage,
    version: int | None = None,
    *,
    ttl: float = 600.0,
    owner: str | None = None,
    writes: bool = True,
    storage_options: Mapping[str, Any] | None = None,
) -> Lease:
    """Take a lease pinning ``version`` (``None``: the latest, resolved and recorded).

    Use it as a context manager; the lease renews itself every ``ttl / 3`` seconds and is
    deleted on exit. Pass it to :func:`txn_engine.commit` (``lease=``) so the commit checks
    it before creating its manifest. ``writes=False`` for a reader that writes no files.
    Raises :class:`~txn_engine.errors.VersionNotFoundError` when the version does not exist
    (or was cleaned up while the lease was taken),
    :class:`~txn_engine.errors.DatasetNotFoundError` when there is no dataset.
    """
    storage = open_storage(uri_or_storage, storage_options)
    return Lease(
        storage,
        version,
        ttl=ttl,
        owner=owner if owner is not None else _default_owner(),
        writes=writes,
    )
