"""A carrier: one long-lived thread lands every writer's offer on a table.

Writers on an object store that keep losing races offer their Appends to each other
(:mod:`txn_engine.offers`); whichever writer wins the next version carries what it has read.
Uncoordinated, every writer still races every other for every version, and the slowest commit
ends several round trips after the median (``docs/performance.md``, *A rendezvous, tried*). A
carrier is the rendezvous. Run one for a table for as long as writers contend on it (a
sidecar process, ``txn-engine carry URI``; a thread of a service or of a Spark driver)::

    with txn_engine.Carrier("s3://bucket/table.lance", storage_options=opts):
        ...  # writers anywhere, configured with nothing: commit(...) as always

1. The carrier lists the offers and commits one version carrying every offer it may carry:
   an empty Append of its own, marked :data:`~txn_engine.offers.CARRIER_KEY`, through
   :func:`txn_engine.commit` (the checks of any helper, the same conditional create). It
   never creates a version with nothing to carry.
2. While it runs it keeps a beacon in ``_versions/``
   (:func:`~txn_engine.format.naming.beacon_name`; not a manifest), which every listing of
   the versions shows first.
3. A writer in the default policy (``RetryPolicy.wait_for_carrier=None``) whose process has
   listed the beacon or read a carrier version lately posts its offer before its first
   create and reads the new versions for its uuid instead of racing (``True``: from its
   first commit on, told; ``False``: never). It races as it would without a carrier once no
   carrier version has appeared within its patience (``PATIENCE_ATTEMPTS`` x its shortest
   attempt, at least ``MIN_PATIENCE`` seconds: the carrier died; its process then forgets
   it) or once its offer's window is spent.

Nothing here decides an outcome: a carried offer is found by uuid exactly as before, a
waiting writer is only a slow one, and the carrier is a writer with an empty transaction.
Two carriers on one table only race each other, as writers do without one.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from txn_engine.errors import TxnEngineError
from txn_engine.format.io import read_manifest_entry
from txn_engine.format.naming import (
    VERSIONS_DIR,
    NamingScheme,
    VersionEntry,
    beacon_name,
    manifest_name,
    scan_versions,
)
from txn_engine.offers import CARRIER_KEY, peek, private_memory, remember
from txn_engine.storage import open_storage
from txn_engine.storage.base import Storage

if TYPE_CHECKING:
    from txn_engine.dataset import Dataset

__all__ = ["Carrier"]

#: How often the carrier tries to read the latest version before it gives up (its thread
#: ends; the writers race after their patience).
_REOPEN_TRIES = 3

#: How long the carrier waits for one listing of the offers (seconds) before listing again.
_SCAN_WAIT_SECONDS = 10.0

#: How long a carrier's beacon says it runs (seconds); a new one every third of it.
BEACON_SECONDS = 10.0


class Carrier:
    """Carries the offers of the writers of one table, in a thread, until :meth:`close`.

    ``uri_or_storage`` and ``storage_options`` are those of :func:`txn_engine.commit`.
    Offers exist on object stores only (guarded creates); elsewhere a carrier finds nothing
    to carry. ``versions`` lists the versions it created. An error ends the thread (the
    writers then race, as without a carrier): :attr:`error` holds it.
    """

    def __init__(
        self,
        uri_or_storage: str | os.PathLike[str] | Storage,
        *,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.storage = open_storage(uri_or_storage, storage_options)
        self.versions: list[int] = []
        self.error: BaseException | None = None
        #: beacons that could not be written (the carrier goes on: writers that list no
        #: beacon still wait for it once they read one of its versions)
        self.beacon_failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="txn-engine-carrier", daemon=True)
        self._beacon = threading.Thread(
            target=self._shine, name="txn-engine-carrier-beacon", daemon=True
        )

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"Carrier({self.storage.uri!r}, {state}, {len(self.versions)} versions)"

    @property
    def running(self) -> bool:
        """Whether the carrier's thread is alive (it ends on :meth:`close` or an error)."""
        return self._thread.is_alive()

    def start(self) -> Carrier:
        """Start carrying (returns ``self``)."""
        self._thread.start()
        self._beacon.start()
        return self

    def close(self, timeout: float | None = 30.0) -> None:
        """Stop after the commit in flight, if any (the beacon is taken down first)."""
        self._stop.set()
        for thread in (self._beacon, self._thread):
            if thread.is_alive():
                thread.join(timeout)

    def __enter__(self) -> Carrier:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _shine(self) -> None:
        """Keep a beacon in ``_versions/`` while carrying (:func:`txn_engine.format.naming.
        beacon_name`): every listing of the versions shows it (opening the table, a commit's
        listings), so writers wait for the carrier from their next commit on without being
        told. A new beacon every third of its life; removed on close (an expired one left
        behind by a crash means nothing, and cleanup removes it)."""
        token = uuid.uuid4().hex
        current: str | None = None
        while self._thread.is_alive():
            expires_ms = int((time.time() + BEACON_SECONDS) * 1000)
            name = f"{VERSIONS_DIR}/{beacon_name(expires_ms, token)}"
            try:
                self.storage.put(name, b"")
            except TxnEngineError:  # best effort: writers also wait on its versions read
                self.beacon_failures += 1
            else:
                if current is not None:
                    with contextlib.suppress(TxnEngineError):
                        self.storage.delete(current)
                current = name
            if self._stop.wait(BEACON_SECONDS / 3):
                break
        if current is not None:
            with contextlib.suppress(TxnEngineError):
                self.storage.delete(current)

    def _run(self) -> None:
        try:
            self._serve()
        except BaseException as exc:  # the writers race on without a carrier
            self.error = exc

    def _serve(self) -> None:
        from txn_engine.commit import NothingToCarry, commit
        from txn_engine.dataset import Dataset
        from txn_engine.ops import Append
        from txn_engine.transaction import Transaction

        private_memory()
        uri = self.storage.uri
        base = Dataset.open(self.storage)
        while not self._stop.is_set():
            # what the last commit knew (versions read, offers), with the base as read: the
            # commit recalls it, and the base confirms it
            memory = peek(uri)
            known = {} if memory is None else dict(memory.transactions)
            known[base.version] = base.manifest_file.transaction
            if memory is None:
                remember(uri, known, {}, ())
            else:
                remember(uri, known, memory.offers, memory.dead, memory.scan)
            txn = Transaction(base.version, Append(()), properties={CARRIER_KEY: "1"})
            try:
                result = commit(self.storage, txn, base=base)
            except NothingToCarry as nothing:
                base = self._wait(base, nothing.latest)
                continue
            except TxnEngineError:  # lost too often, a conflict: start again from the latest
                base = self._reopen()
                continue
            self.versions.append(result.version)
            base = _at(self.storage, result.version, base.naming_scheme)

    def _wait(self, base: Dataset, checked: int) -> Dataset:
        """Nothing to carry: wait for the running listing of the offers, and meanwhile list
        the versions (other writers may have moved the table on: offers checked against
        newer versions need a newer base)."""
        listed: list[int] = []

        def latest() -> None:
            with contextlib.suppress(TxnEngineError):  # no listing: the base stays
                entry = scan_versions(self.storage, since=checked).latest
                if entry is not None:
                    listed.append(entry.version)

        lister = threading.Thread(target=latest, name="txn-engine-carrier-list", daemon=True)
        lister.start()
        memory = peek(self.storage.uri)
        if memory is not None and memory.scan is not None:
            memory.scan.wait(_SCAN_WAIT_SECONDS)
        lister.join()
        newest = max([checked, *listed])
        if newest == base.version:
            return base
        with contextlib.suppress(TxnEngineError):
            return _at(self.storage, newest, base.naming_scheme)
        return self._reopen()

    def _reopen(self) -> Dataset:
        """The latest version, read again (a failed read is tried again, three times)."""
        from txn_engine.dataset import Dataset

        for _ in range(_REOPEN_TRIES - 1):
            with contextlib.suppress(TxnEngineError):
                return Dataset.open(self.storage)
        return Dataset.open(self.storage)


def _at(storage: Storage, version: int, scheme: NamingScheme) -> Dataset:
    """The dataset at ``version`` (named in ``scheme``), read with one request."""
    from txn_engine.dataset import Dataset

    entry = VersionEntry(version, manifest_name(version, scheme), scheme)
    return Dataset(storage, entry, read_manifest_entry(storage, entry))
