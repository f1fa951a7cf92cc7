"""Reading the versions that landed since the one checked: their transactions (the
winners the plan is checked against), as few bytes and round trips as the format allows."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from txn_engine._proto import transaction_pb2
from txn_engine.errors import FormatError, ObjectNotFoundError, VersionNotFoundError
from txn_engine.format.io import read_transaction_and_manifest
from txn_engine.format.naming import VersionEntry
from txn_engine.loop.core import Core
from txn_engine.loop.seam import Contention
from txn_engine.session import wrap
from txn_engine.storage.base import read_concurrency

__all__ = ["load_winners"]

_Loaded = tuple[transaction_pb2.Transaction | None, Exception | None]


def _load_transaction(state: Core, entry: VersionEntry) -> _Loaded:
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


def _load_all(state: Core, entries: Sequence[VersionEntry], latest: int | None) -> list[_Loaded]:
    """Read ``entries`` (the newest, ``latest``, whole: the next version is built on it; its
    inline transaction comes free), by a bounded thread pool on a store that serves reads
    concurrently; the results in the order of ``entries``."""

    def load(entry: VersionEntry) -> _Loaded:
        if entry.version == latest:
            try:
                state.manifest(entry.version)
            except (FormatError, VersionNotFoundError) as exc:
                return None, exc
        return _load_transaction(state, entry)

    threads = min(read_concurrency(state.storage), len(entries))
    if threads <= 1:
        return [load(entry) for entry in entries]
    with ThreadPoolExecutor(threads, thread_name_prefix="txn-engine-read") as pool:
        return list(pool.map(wrap(load), entries))


def load_winners(
    state: Core, contention: Contention, newer: Sequence[VersionEntry]
) -> list[_Loaded]:
    """The transactions of the versions ``newer`` than the one checked, in version order.

    The newest manifest is read whole, the others only as far as their inline
    transaction. On a store that serves reads concurrently (``read_concurrency`` > 1: object
    stores) k versions behind cost about k / threads round trips instead of k.

    Versions whose transactions are known from a commit just before (``contention.
    reusable``: a stale read version reads the same versions again) are not read again:
    only the probe is, and if its transaction is not the one known (a table re-created at
    the URI) every version is read (a version's manifest is created once, never rewritten).
    """
    latest = newer[-1].version if newer else None
    reuse, probe, expected = contention.reusable(newer, latest)
    if not reuse:
        return _load_all(state, newer, latest)
    to_read = [e for e in newer if e.version not in reuse or e.version == probe]
    got = dict(zip((e.version for e in to_read), _load_all(state, to_read, latest), strict=True))
    if probe is not None:
        pb, _error = got[probe]
        if pb is None or pb.uuid != expected:  # not this history
            rest = [e for e in newer if e.version not in got]
            got.update(zip((e.version for e in rest), _load_all(state, rest, latest), strict=True))
    return [
        got[e.version] if e.version in got else (state.transactions[e.version], None) for e in newer
    ]
