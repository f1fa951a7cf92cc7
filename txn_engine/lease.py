"""Leases: small objects in the table that pin a version against cleanup.

A writer planning against a version, or a reader scanning one, takes a lease::

    with txn_engine.lease(uri, version) as held:    # version=None: the latest
        plan_and_commit(held.version)

The lease is the JSON object ``_txn_engine/leases/<uuid>.json``::

    {"version": 7, "created_at_ns": ..., "expires_at_ns": ..., "owner": "host:pid"}

written when the lease is taken, rewritten with a later ``expires_at_ns`` every ``ttl / 3``
seconds (one daemon thread per process renews every lease that asks for it), and deleted
when the ``with`` block exits (or on :meth:`Lease.release`).
:func:`txn_engine.cleanup.cleanup` keeps every version at or after the oldest *live*
(unexpired) lease, every file those versions reference, and every file written since the
oldest live lease was created (the files of a writer that took its lease before writing
them and has not committed yet).

Protocol (what makes a lease effective):

1. cleanup writes a marker ``_txn_engine/cleaning/<uuid>.json`` (with an expiry) before
   it reads the leases, deletes manifests only while the marker is unexpired, and removes
   the marker when it is done deleting manifests; it reads the leases again (and lists the
   versions again) before it deletes any data, deletion, index or transaction file;
2. the holder writes the lease object, waits until no unexpired cleanup marker exists, and
   then checks that the leased version's manifest still exists (with ``version=None`` it
   re-resolves the latest and tries again if the version it recorded was removed).

A cleanup that read the leases before the lease was written was already running (its
marker was there) when the holder looked for markers, so the holder waited for its
manifest deletes to end and its check sees them; a cleanup that started later reads the
lease. Either way, once :func:`lease` returns, the leased version and every later one stay,
with every file they reference (the model in ``models/commit_protocol.pml`` checks this).

A lease that expired (its holder stalled for longer than ``ttl``) protects nothing:
:meth:`Lease.renew` then raises :class:`~txn_engine.errors.LeaseExpiredError` and the
holder must re-plan.

Expiry is judged with the cleaner's wall clock against the holder's ``expires_at_ns``: keep
clock skew between machines well below ``ttl`` (the default ``ttl`` is ten minutes).
"""

from __future__ import annotations

import heapq
import itertools
import json
import os
import socket
import threading
import time
import uuid as uuid_module
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, TypeGuard

import attrs

from txn_engine import jsontext
from txn_engine.errors import (
    DatasetNotFoundError,
    InvalidStorageArgumentError,
    LeaseExpiredError,
    StorageError,
    VersionNotFoundError,
)
from txn_engine.format.io import latest_version, resolve_version
from txn_engine.storage import open_storage
from txn_engine.storage.base import Storage

__all__ = [
    "CLEANING_DIR",
    "LEASES_DIR",
    "MAX_LEASE_TTL",
    "Lease",
    "LeaseInfo",
    "lease",
    "read_leases",
    "running_cleanups",
]

#: Where lease objects live, relative to the dataset root.
#: the longest lease: ten years in seconds (a longer one is a pin, not a lease; an infinite
#: one cannot be written as an expiry time)
MAX_LEASE_TTL = 315_576_000.0
LEASES_DIR = "_txn_engine/leases"
#: Where running cleanups put their markers (see the module docstring).
CLEANING_DIR = "_txn_engine/cleaning"
_NS = 1_000_000_000
_ACQUIRE_ATTEMPTS = 8


@attrs.frozen
class LeaseInfo:
    """One lease object as read back from storage.

    ``version`` is ``None`` (and ``error`` says why) when the object is not a valid lease;
    cleanup refuses to run while such an object exists, because it cannot tell what the
    object protects.
    """

    path: str
    version: int | None
    created_at_ns: int
    expires_at_ns: int
    owner: str
    error: str | None = None

    def live(self, now_ns: int) -> bool:
        """Whether the lease still protects its version at wall-clock time ``now_ns``."""
        return self.error is None and self.expires_at_ns > now_ns


def _encode(version: int, created_at_ns: int, expires_at_ns: int, owner: str) -> bytes:
    return json.dumps(
        {
            "version": version,
            "created_at_ns": created_at_ns,
            "expires_at_ns": expires_at_ns,
            "owner": owner,
        },
        sort_keys=True,
    ).encode()


def _count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _decode(path: str, data: bytes) -> LeaseInfo:
    try:
        obj = jsontext.loads(data)
    except ValueError as exc:  # jsontext: anything that is not strict JSON
        return LeaseInfo(path, None, 0, 0, "", error=f"not JSON: {exc}")
    if not isinstance(obj, dict):
        return LeaseInfo(path, None, 0, 0, "", error="not a JSON object")
    version, created, expires, owner = (
        obj.get("version"),
        obj.get("created_at_ns"),
        obj.get("expires_at_ns"),
        obj.get("owner"),
    )
    if not (_count(version) and _count(created) and _count(expires)):
        return LeaseInfo(path, None, 0, 0, "", error="version/created_at_ns/expires_at_ns")
    return LeaseInfo(path, version, created, expires, owner if isinstance(owner, str) else "")


def read_leases(storage: Storage) -> list[LeaseInfo]:
    """Every lease object of the dataset (live, expired and malformed ones), by path.

    A lease deleted between the listing and its read is skipped (it was released).
    """
    found: list[LeaseInfo] = []
    for name in sorted(storage.list(LEASES_DIR)):
        if not name.endswith(".json"):
            continue
        path = f"{LEASES_DIR}/{name}"
        try:
            data = storage.get(path)
        except FileNotFoundError:  # ObjectNotFoundError: released meanwhile
            continue
        found.append(_decode(path, data))
    return found


def running_cleanups(storage: Storage, now_ns: int) -> list[int]:
    """Expiry times (ns) of the cleanup markers that are still unexpired at ``now_ns``.

    A marker that cannot be read or decoded is ignored (cleanup writes whole objects; a
    malformed one is not a running cleanup's).
    """
    out: list[int] = []
    for name in storage.list(CLEANING_DIR):
        if not name.endswith(".json"):
            continue
        try:
            obj = jsontext.loads(storage.get(f"{CLEANING_DIR}/{name}"))
        except (FileNotFoundError, ValueError):
            continue
        expires = obj.get("expires_at_ns") if isinstance(obj, dict) else None
        if _count(expires) and expires > now_ns:
            out.append(expires)
    return out


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
            entry = (time.monotonic() + interval, next(self._seq), held)
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
                    now = time.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        _, _, held = heapq.heappop(self._heap)
                        break
                    self._cond.wait(None if not self._heap else self._heap[0][0] - now)
            interval = held._renew_tick()  # outside the lock: it writes
            if interval is not None:
                with self._cond:
                    heapq.heappush(self._heap, (time.monotonic() + interval, next(self._seq), held))


_RENEWER = _Renewer()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_RENEWER._reset)


class Lease:
    """A held lease (see the module docstring); use it as a context manager.

    Taking a lease waits while a cleanup is deleting manifests (see the module docstring).
    ``version`` is the pinned version (the latest at acquisition when none was given).
    The lease renews itself from a daemon thread every ``ttl / 3`` seconds until
    :meth:`release`; :meth:`renew` renews now. ``expired`` turns true when a renewal came
    too late; from then on the version is not protected. ``clock`` (wall-clock ns; tests)
    stamps ``created_at_ns`` and ``expires_at_ns``.
    """

    def __init__(
        self,
        storage: Storage,
        version: int | None,
        *,
        ttl: float,
        owner: str,
        renew_in_background: bool = True,
        clock: Callable[[], int] = time.time_ns,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not 0 < ttl <= MAX_LEASE_TTL:  # NaN and infinity too (int(inf) raised OverflowError)
            raise InvalidStorageArgumentError(
                f"lease ttl must be a number of seconds above 0 and at most {MAX_LEASE_TTL:g} "
                f"(ten years), got {ttl!r}"
            )
        self._storage = storage
        self._clock = clock
        self._sleep = sleep
        self._ttl_ns = int(ttl * _NS)
        self._ttl = ttl
        self._owner = owner
        self._id = str(uuid_module.uuid4())
        self._path = f"{LEASES_DIR}/{self._id}.json"
        self._lock = threading.Lock()
        self._released = False
        self._expired = False
        self._created_at_ns = clock()
        self._expires_at_ns = 0
        self.last_error: BaseException | None = None
        self._version = self._acquire(version)
        if renew_in_background:
            _RENEWER.add(self, ttl / 3)

    def _write(self, version: int) -> None:
        now = self._clock()
        expires = now + self._ttl_ns
        self._storage.put(self._path, _encode(version, self._created_at_ns, expires, self._owner))
        self._expires_at_ns = expires

    def _acquire(self, version: int | None) -> int:
        for _ in range(_ACQUIRE_ATTEMPTS):
            # (a given version is checked only after the lease is written: that check is the
            # one the protocol needs, and a version that is absent fails it the same way)
            target = latest_version(self._storage).version if version is None else version
            self._write(target)
            self._wait_for_cleanups()
            try:
                resolve_version(self._storage, target)
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

    def _wait_for_cleanups(self) -> None:
        """Wait until no cleanup that may have missed this lease is deleting manifests."""
        delay = 0.02
        while True:
            running = running_cleanups(self._storage, self._clock())
            if not running:
                return
            self._sleep(delay)
            delay = min(delay * 2, 1.0)

    @property
    def version(self) -> int:
        """The version this lease pins (every version at or after it is kept)."""
        return self._version

    @property
    def path(self) -> str:
        """The lease object's path relative to the dataset root."""
        return self._path

    @property
    def owner(self) -> str:
        """The owner recorded in the lease object."""
        return self._owner

    @property
    def expires_at_ns(self) -> int:
        """Wall-clock expiry (ns since the epoch) as last written."""
        return self._expires_at_ns

    @property
    def expired(self) -> bool:
        """True once a renewal found the lease already expired (it protects nothing)."""
        return self._expired

    @property
    def released(self) -> bool:
        """True after :meth:`release`."""
        return self._released

    def renew(self) -> None:
        """Push the expiry ``ttl`` seconds into the future now.

        Raises :class:`~txn_engine.errors.LeaseExpiredError` when the lease had already
        expired (or was released); :class:`~txn_engine.errors.StorageError` when the write
        failed (the lease is still valid until its current expiry; try again).
        """
        with self._lock:
            if self._released:
                raise LeaseExpiredError(f"lease {self._path} was released")
            if self._expired or self._clock() >= self._expires_at_ns:
                self._expired = True
                raise LeaseExpiredError(
                    f"lease {self._path} on version {self._version} expired before it was "
                    "renewed; cleanup may have removed what it protected: re-plan"
                )
            self._write(self._version)

    def _renew_tick(self) -> float | None:
        """One background renewal; the delay until the next one, or None to stop."""
        try:
            self.renew()
        except LeaseExpiredError as exc:
            if not self._released:
                self.last_error = exc
            return None
        except StorageError as exc:  # transient: retry at the next tick
            self.last_error = exc
        return self._ttl / 3

    def release(self) -> None:
        """Stop renewing and delete the lease object (idempotent)."""
        with self._lock:
            if self._released:
                return
            self._released = True
            # a renewal writes under the lock and checks ``_released`` first, so none can
            # re-create the object after the delete below
            self._storage.delete(self._path)

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
    storage_options: Mapping[str, Any] | None = None,
) -> Lease:
    """Take a lease pinning ``version`` (``None``: the latest, resolved and recorded).

    Use it as a context manager; the lease renews itself every ``ttl / 3`` seconds and is
    deleted on exit. Raises :class:`~txn_engine.errors.VersionNotFoundError` when the
    version does not exist (or was cleaned up while the lease was taken),
    :class:`~txn_engine.errors.DatasetNotFoundError` when there is no dataset.
    """
    storage = open_storage(uri_or_storage, storage_options)
    return Lease(storage, version, ttl=ttl, owner=owner if owner is not None else _default_owner())
