"""A running cleanup's marker: put up before the leases are read, kept fresh, taken down.

The marker ``_txn_engine/cleaning/<floor>-<uuid>.json`` tells lease takers that a cleanup
may have read the leases before theirs was written (:mod:`txn_engine.leases`, step 2). Its
name carries the floor (the latest version listed before it went up: the cleanup removes no
version at or above it), so a lease taker needs no read of it. The marker also anchors the
store's clock for the run (:mod:`txn_engine.storetime`).

A cleanup rewrites its marker every :data:`BEAT_SECONDS` while it works; another cleanup
removes a marker the store shows unchanged for :data:`~txn_engine.leases.MARKER_STALE_NS`
(its cleanup stopped without taking it down). So a cleanup that stalled for half that long
may have lost its marker, and lease takers may have missed it meanwhile: it then deletes
no more manifests, and no unreferenced files (:meth:`CleanupMarker.intact`).
"""

from __future__ import annotations

import json
import uuid as uuid_module

from txn_engine.clock import Clock
from txn_engine.errors import TxnEngineError
from txn_engine.leases import CLEANING_DIR, MARKER_STALE_NS, list_markers, marker_name
from txn_engine.retention._plan import Now
from txn_engine.storage.base import Storage
from txn_engine.storetime import STORE_TIME_MARGIN_NS, StoreTime

__all__ = ["BEAT_SECONDS", "CleanupMarker"]

_NS = 1_000_000_000
#: How often a running cleanup rewrites its marker (seconds).
BEAT_SECONDS = 10.0
#: The longest pause between two rewrites after which the marker may have been removed by
#: another cleanup (half the staleness another cleanup judges it by).
_MAX_GAP_SECONDS = MARKER_STALE_NS / _NS / 2
#: What an older reader of markers looks at: an expiry well past any run's end.
_LEGACY_TTL_NS = 600 * _NS


class CleanupMarker:
    """This cleanup's marker (see the module docstring). :meth:`put_up` writes it."""

    def __init__(self, storage: Storage, clock: Clock, floor: int, wall_clock: bool) -> None:
        self._storage = storage
        self._clock = clock
        self.floor = floor
        self.name = marker_name(floor, uuid_module.uuid4().hex)
        self.path = f"{CLEANING_DIR}/{self.name}"
        self._started_ns = clock.wall_ns()
        self._sent: float | None = None
        self._gap = 0.0
        self._store: StoreTime | None = None
        self._stale_others: list[str] = []
        #: judge every time by the wall clock (a cleanup told what time it is)
        self._wall_clock = wall_clock

    @classmethod
    def put_up(
        cls, storage: Storage, clock: Clock, floor: int, *, wall_clock: bool
    ) -> CleanupMarker:
        """Write the marker, then list the markers once: the listing anchors the store's
        clock on this one and finds the stale markers of cleanups that stopped."""
        marker = cls(storage, clock, floor, wall_clock)
        marker._write()
        written_at = clock.monotonic()
        listed = list_markers(storage, times=True)
        mine = next((m for m in listed if m.name == marker.name), None)
        if mine is not None and mine.mtime_ns is not None and not wall_clock:
            marker._store = StoreTime(mine.mtime_ns, written_at, clock)
            stale_before = marker._store.now_ns() - MARKER_STALE_NS - STORE_TIME_MARGIN_NS
            marker._stale_others = [
                f"{CLEANING_DIR}/{m.name}"
                for m in listed
                if m.name != marker.name and m.mtime_ns is not None and m.mtime_ns < stale_before
            ]
        return marker

    def _write(self) -> None:
        sent = self._clock.monotonic()
        body = {
            "started_at_ns": self._started_ns,
            "expires_at_ns": self._clock.wall_ns() + _LEGACY_TTL_NS,
            "floor": self.floor,
        }
        self._storage.put(self.path, json.dumps(body, sort_keys=True).encode())
        if self._sent is not None:
            self._gap = max(self._gap, sent - self._sent)
        self._sent = sent

    @property
    def clock(self) -> Clock:
        """The clocks this cleanup runs on."""
        return self._clock

    def beat(self) -> None:
        """Rewrite the marker when :data:`BEAT_SECONDS` have passed since the last write (a
        failed rewrite is only a longer gap)."""
        if self._sent is not None and self._clock.monotonic() - self._sent < BEAT_SECONDS:
            return
        try:
            self._write()
        except TxnEngineError:  # a gap, judged by fresh() / intact()
            return

    def fresh(self) -> bool:
        """Whether no other cleanup can have found the marker stale yet (no pause between
        two of its writes, nor since the last one, reached half the staleness)."""
        if self._sent is None:
            return False
        current = self._clock.monotonic() - self._sent
        return max(self._gap, current) < _MAX_GAP_SECONDS

    def intact(self) -> bool:
        """After the files were listed: the marker was up, unbroken, all along (then every
        lease taker that could write a listed file either was read or recorded it)."""
        return self.fresh() and self._storage.exists(self.path)

    def now(self) -> Now:
        """The moment to judge ages and leases at (store time when the store lists times)."""
        store = None if self._store is None else self._store.now_ns()
        return Now(self._clock.wall_ns(), store)

    def take_down(self) -> None:
        """Remove this marker, and the stale markers of cleanups that stopped."""
        self._storage.delete(self.path)
        for path in self._stale_others:
            try:
                self._storage.delete(path)
            except TxnEngineError:  # best effort: the next cleanup tries again
                continue
