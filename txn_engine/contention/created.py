"""The versions a carrier of this session created lately, at hand for its writers.

A carrier goes on from the version it just created, and the writers of its session that
wait for it find that version, without a read: the bytes stay in the session's memory
(:class:`CreatedVersions`) for :data:`CREATED_SECONDS`, keyed by the storage object the
carrier and its writers share (not by URI: a table deleted and made again under the same
URI is another object, with other bytes at the same version, and an id reused after its
object died fails the weak reference).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict

from txn_engine.contention.offers import RECENT_SECONDS
from txn_engine.session import current
from txn_engine.storage.base import Storage

__all__ = [
    "CREATED_MAX",
    "CREATED_MAX_BYTES",
    "CREATED_SECONDS",
    "POLL_LIST_EVERY",
    "CreatedVersions",
    "carried_here",
    "forget_created",
    "publish_created",
]

#: A writer waiting for a carrier, and a carrier waiting for offers, list the versions on
#: every this many looks; the others read the next version by its name: one GET however
#: long the history, where a listing's page grows with it (S3 pages hold 1,000 names).
#: The listings keep the beacons in view (a carrier that stopped ends the writers' wait; a
#: hosted carrier steps down for one that ranks before it).
POLL_LIST_EVERY = 4

#: How long the bytes of a version a carrier created stay at hand in its session (seconds),
#: as long as what a commit remembers (:data:`~txn_engine.contention.offers.RECENT_SECONDS`).
CREATED_SECONDS = RECENT_SECONDS

#: How many versions' bytes a session keeps at hand, over all tables, and how many bytes
#: at most (the oldest go first).
CREATED_MAX = 16
CREATED_MAX_BYTES = 32 << 20


class CreatedVersions:
    """A session's memory of the versions its carriers created lately:
    (id(storage), manifest path) -> (a weak reference to that storage, until
    (time.monotonic), the manifest file), bounded by :data:`CREATED_MAX` and
    :data:`CREATED_MAX_BYTES`."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.entries: OrderedDict[tuple[int, str], tuple[weakref.ref[Storage], float, bytes]] = (
            OrderedDict()
        )
        self.bytes = 0

    def publish(self, storage: Storage, path: str, data: bytes) -> None:
        """Keep ``data``, the manifest file a carrier created at ``path`` in ``storage``."""
        try:
            ref = weakref.ref(storage)
        except TypeError:
            return
        key = (id(storage), path)
        with self.lock:
            old = self.entries.pop(key, None)
            if old is not None:
                self.bytes -= len(old[2])
            self.entries[key] = (ref, time.monotonic() + CREATED_SECONDS, data)
            self.bytes += len(data)
            while self.entries and (
                len(self.entries) > CREATED_MAX or self.bytes > CREATED_MAX_BYTES
            ):
                self.bytes -= len(self.entries.popitem(last=False)[1][2])

    def clear(self) -> None:
        """Forget every version."""
        with self.lock:
            self.entries.clear()
            self.bytes = 0

    def get(self, storage: Storage, path: str) -> bytes | None:
        """The bytes kept for ``path`` in this very ``storage`` object, while fresh."""
        with self.lock:
            found = self.entries.get((id(storage), path))
        if found is None or found[0]() is not storage or found[1] <= time.monotonic():
            return None
        return found[2]


def publish_created(storage: Storage, path: str, data: bytes) -> None:
    """A carrier's commit created the version at ``path`` in ``storage`` with manifest file
    ``data`` (:func:`carried_here`). Storage objects that cannot be weakly referenced are
    not kept (their versions are read, as from another process)."""
    current().part(CreatedVersions).publish(storage, path, data)


def forget_created() -> None:
    """Forget every version a carrier of the current session created."""
    current().part(CreatedVersions).clear()


def carried_here(storage: Storage, path: str) -> bytes | None:
    """The manifest file at ``path`` in ``storage`` (this very object) when a carrier of
    the current session created it within :data:`CREATED_SECONDS` (the carrier goes on
    from it, and the writers waiting for it find it, without a read), else None."""
    return current().part(CreatedVersions).get(storage, path)
