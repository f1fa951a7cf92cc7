"""A carrier: one long-lived thread lands every writer's offer on a table.

Writers on an object store that keep losing races offer their Appends to each other
(:mod:`txn_engine.contention.offers`); whichever writer wins the next version carries what it
has read.
Uncoordinated, every writer still races every other for every version, and the slowest commit
ends several round trips after the median (``docs/performance.md``, *A rendezvous, tried*). A
carrier is the rendezvous. Run one for a table for as long as writers contend on it (a
sidecar process, ``txn-engine carry URI``; a thread of a service or of a Spark driver)::

    with txn_engine.Carrier("s3://bucket/table.lance", storage_options=opts):
        ...  # writers anywhere, configured with nothing: commit(...) as always

1. The carrier lists the offers and commits one version carrying every offer it may carry:
   an empty Append of its own, marked :data:`~txn_engine.contention.offers.CARRIER_KEY`,
   through the commit loop, as :func:`txn_engine.commit` does (the checks of any helper, the
   same conditional create). It never creates a version with nothing to carry.
2. While it runs it keeps a beacon in ``_versions/``
   (:func:`~txn_engine.format.naming.beacon_name`; not a manifest), which every listing of
   the versions shows first.
3. A writer in the default policy (``RetryPolicy.wait_for_carrier=None``) whose process has
   listed the beacon or read a carrier version lately posts its offer before its first
   create and reads the new versions for its uuid instead of racing (``True``: from its
   first commit on, told; ``False``: never). Untold, it waits only while its listings show
   a live beacon (a carrier takes its beacon down when it stops). It races as it would
   without a carrier once no carrier version has appeared within its patience
   (``PATIENCE_ATTEMPTS`` x its shortest attempt, at least ``MIN_PATIENCE`` seconds: the
   carrier died; its process then forgets it) or once its offer's window is spent.
4. Writers host one themselves when none runs (``RetryPolicy.host_carrier``; by default on
   a store over the network): a commit that loses a race, with no carrier seen and an
   offer of another process read, starts a carrier thread in its process (:func:`host`:
   one per table per process) and waits for it. A hosted carrier steps down when a
   listing shows a live beacon that ranks before its own (every carrier started with
   :class:`Carrier` ranks before every hosted one; among hosted ones the earliest
   started), so the writers of a table converge on one. It stops after
   :data:`HOST_IDLE_SECONDS` with nothing carried, after :data:`HOST_LONELY_VERSIONS`
   versions in a row carrying only its own process's offers, or when its process exits.

Nothing here decides an outcome: a carried offer is found by uuid exactly as before, a
waiting writer is only a slow one, and the carrier is a writer with an empty transaction.
Two carriers on one table only race each other, as writers do without one.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing.util
import os
import secrets
import threading
import time
from collections.abc import Mapping
from typing import Any

from txn_engine._proto import transaction_pb2
from txn_engine.conflicts.rebase import ConflictOptions
from txn_engine.contention.created import POLL_LIST_EVERY, carried_here
from txn_engine.contention.offering import Offering
from txn_engine.contention.offers import (
    CARRIER_KEY,
    HOSTS_DIR,
    Offer,
    OfferScan,
    carried_uuids,
    claim_name,
    ours,
    peek,
    private_memory,
    remember,
)
from txn_engine.dataset import Dataset
from txn_engine.errors import ObjectExistsError, TxnEngineError
from txn_engine.format.io import read_manifest_entry, read_version_by_name
from txn_engine.format.manifest_file import decode_manifest_file
from txn_engine.format.naming import (
    BEACON_SECONDS,
    U64_MAX,
    VERSIONS_DIR,
    NamingScheme,
    VersionEntry,
    beacon_name,
    live_beacons,
    manifest_name,
    manifest_path,
    scan_versions,
)
from txn_engine.loop.core import Core, NothingToCarry
from txn_engine.loop.driver import drive
from txn_engine.loop.seam import Contention, NoContention
from txn_engine.ops import Append
from txn_engine.retry import RetryPolicy
from txn_engine.session import Session, bind, current, using, wrap
from txn_engine.storage import open_storage
from txn_engine.storage.base import Storage
from txn_engine.storage.handler import commit_handler_for
from txn_engine.transaction import Transaction

#: The policy of a carrier's commits (RetryPolicy is frozen: one instance serves all).
_POLICY = RetryPolicy()

__all__ = [
    "HOST_IDLE_SECONDS",
    "HOST_LONELY_VERSIONS",
    "Carrier",
    "Hosts",
    "contention_for",
    "host",
    "hosted",
    "hosting",
]

#: How often the carrier tries to read the latest version before it gives up (its thread
#: ends; the writers race after their patience).
_REOPEN_TRIES = 3

#: How long the carrier waits for one listing of the offers (seconds) before listing again.
_SCAN_WAIT_SECONDS = 10.0

#: A carrier hosted by writers (:func:`host`) stops after carrying nothing for this long
#: (seconds). Idle, it lists the offers and the versions about once per round trip each.
HOST_IDLE_SECONDS = 5.0

#: A hosted carrier also stops after this many versions in a row that carried only offers
#: of its own process: the writers of other processes have stopped contending, and its
#: own would otherwise wait for it on every commit instead of creating their own versions.
HOST_LONELY_VERSIONS = 4

#: How long the beacon thread waits for the claim to be decided (seconds).
_CLAIM_WAIT_SECONDS = 10.0

#: A process whose carrier yielded to another writer's claim counts as carried for this
#: long (seconds) without listing the elected carrier's beacon (written one round trip
#: after its claim), and hosts none meanwhile. Measured against 1 s on moto S3 + 25 ms
#: (lab, 8 x 8, 8 runs each, alternating): p99 - p50 47-161 ms against 66-163, medians
#: of the runs 88 against 129 ms.
CLAIM_GRACE_SECONDS = 0.3


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
        idle_seconds: float | None = None,
        session: Session | None = None,
    ) -> None:
        #: the session its commits run in (default: the one current where it is made)
        self.session = session or current()
        with using(self.session):
            self.storage = open_storage(uri_or_storage, storage_options)
        #: stop after carrying nothing for this long (seconds; None: run until closed)
        self.idle_seconds = idle_seconds
        self.versions: list[int] = []
        self.error: BaseException | None = None
        #: beacons that could not be written (the carrier goes on: writers that list no
        #: beacon still wait for it once they read one of its versions)
        self.beacon_failures = 0
        #: hosted by writers (:func:`host`): steps down for a carrier that ranks before it
        self.hosted = False
        #: it stepped down for another carrier's live beacon (hosted carriers only)
        self.stepped_down = False
        # the beacon's token ranks the carriers of a table (in byte order): "0..." (started
        # as a carrier) before any hosted one's (:func:`_hosted_token`)
        self._token = "0" + secrets.token_hex(16)[1:]
        #: set once a hosted carrier's first look at the other beacons is done
        self._looked = threading.Event()
        self._first_base: Dataset | None = None
        self._first_known: dict[int, transaction_pb2.Transaction | None] = {}
        self._first_offers: dict[str, Offer] = {}
        self._first_scan: OfferScan | None = None
        #: a hosted carrier's claim (:data:`HOSTS_DIR`), decided before it does anything
        self._claim: str | None = None
        self._claimed = threading.Event()
        #: when it yielded to another writer's claim (time.monotonic), if it did
        self.yielded_at: float | None = None
        self._waits = 0  # waits for offers (every few of them lists the versions)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=bind(self.session, self._run), name="txn-engine-carrier", daemon=True
        )
        self._beacon = threading.Thread(
            target=bind(self.session, self._shine), name="txn-engine-carrier-beacon", daemon=True
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
        current: str | None = None
        if self._claim is not None:
            self._claimed.wait(_CLAIM_WAIT_SECONDS)
        while self._thread.is_alive() and not self._stop.is_set():
            expires_ms = int((time.time() + BEACON_SECONDS) * 1000)
            name = f"{VERSIONS_DIR}/{beacon_name(expires_ms, self._token)}"
            try:
                self.storage.put(name, b"")
            except TxnEngineError:  # best effort: writers also wait on its versions read
                self.beacon_failures += 1
            else:
                if current is not None:
                    with contextlib.suppress(TxnEngineError):
                        self.storage.delete(current)
                current = name
            if self.hosted:  # the first page of the versions: the beacons sort first
                with contextlib.suppress(TxnEngineError):
                    self._look(scan_versions(self.storage, since=U64_MAX).beacons)
                self._looked.set()
            if self._stop.wait(BEACON_SECONDS / 3):
                break
        if current is not None:
            with contextlib.suppress(TxnEngineError):
                self.storage.delete(current)

    def _look(self, beacons: tuple[str, ...]) -> None:
        """A hosted carrier steps down when ``beacons`` (names listed in ``_versions/``)
        show another live carrier that ranks before it (:attr:`_token` order)."""
        uri = self.storage.uri
        if self.hosted and any(t < self._token for _, t in live_beacons(uri, beacons)):
            self.stepped_down = True
            self._stop.set()

    def _take_claim(self) -> bool:
        """A hosted carrier claims the hosting for the version its writer lost to: False
        when another writer's carrier claimed it first (this one yields at once). A claim
        that cannot be written is not a reason to yield (the beacons still rank them)."""
        assert self._claim is not None
        try:
            self.storage.put_if_absent(self._claim, self._token.encode())
        except ObjectExistsError:
            self.yielded_at = time.monotonic()
            self.stepped_down = True
            return False
        except TxnEngineError:
            self._claim = None
            return True
        finally:
            self._claimed.set()
        return True

    def _run(self) -> None:
        claimed: str | None = None  # the claim this carrier holds (taken down when it stops)
        try:
            if self._claim is not None:
                if not self._take_claim():
                    return
                claimed = self._claim  # None: it could not be written
            self._serve()
        except BaseException as exc:  # the writers race on without a carrier
            self.error = exc
        finally:
            self._stop.set()  # the beacon comes down now, not at its next renewal
            if claimed is not None:
                with contextlib.suppress(TxnEngineError):
                    self.storage.delete(claimed)

    def _serve(self) -> None:
        private_memory()
        uri = self.storage.uri
        # a hosted carrier starts from the latest version its writer knows (no read), and
        # at once: carriers hosted together step down within a listing of each other's
        # beacons (the beacon thread looks right after writing its own)
        base = self._first_base or Dataset.open(self.storage)
        self._first_base = None
        # and knows the transactions its writer read (the offers were checked against them)
        first_known, self._first_known = self._first_known, {}
        # and the offers it read, with its listing of them still running, if any
        first_offers, first_scan = self._first_offers, self._first_scan
        self._first_offers, self._first_scan = {}, None
        carried_at = time.monotonic()
        lonely = 0  # versions in a row that carried only this process's offers
        while not self._stop.is_set():
            # what the last commit knew (versions read, offers), with the base as read: the
            # commit recalls it, and the base confirms it
            memory = peek(uri)
            known = dict(first_known) if memory is None else dict(memory.transactions)
            first_known = {}
            known[base.version] = base.manifest_file.transaction
            if memory is None:
                remember(uri, known, first_offers, (), first_scan)
                first_offers, first_scan = {}, None
            else:
                remember(uri, known, memory.offers, memory.dead, memory.scan)
            txn = Transaction(base.version, Append(()), properties={CARRIER_KEY: "1"})
            try:
                result = drive(
                    commit_handler_for(self.storage),
                    txn,
                    contention_for=contention_for,
                    policy=_POLICY,
                    options=ConflictOptions(),
                    base=base,
                )
            except NothingToCarry as nothing:
                idle = self.idle_seconds
                if idle is not None and time.monotonic() - carried_at >= idle:
                    return  # nothing to carry for a while: the writers race without it
                base = self._wait(base, nothing.latest)
                continue
            except TxnEngineError:  # lost too often, a conflict: start again from the latest
                base = self._reopen()
                continue
            self.versions.append(result.version)
            carried_at = time.monotonic()
            base = _created(self.storage, result.version, base.naming_scheme)
            pb = base.manifest_file.transaction
            if pb is not None and any(u != pb.uuid and not ours(u) for u in carried_uuids(pb)):
                lonely = 0
            else:
                lonely += 1
            if self.hosted and lonely >= HOST_LONELY_VERSIONS:
                return  # no other process offers: its writers race alone, one create each

    def _wait(self, base: Dataset, checked: int) -> Dataset:
        """Nothing to carry: wait for the running listing of the offers, and meanwhile list
        the versions and read the newest (other writers may have moved the table on: offers
        checked against newer versions need a newer base), so that the next commit starts
        as soon as both are in."""
        found: list[Dataset] = []
        self._waits += 1
        probe = self._waits % POLL_LIST_EVERY != 0

        def latest() -> None:
            newest = checked
            listed = not probe
            if probe:  # most waits read the next version by its name: one GET
                try:
                    next_one = _probe(self.storage, checked + 1, base.naming_scheme)
                except TxnEngineError:
                    listed = True  # the listing decides
                else:
                    if next_one is not None:
                        found.append(next_one)
                        return
            if listed:
                with contextlib.suppress(TxnEngineError):  # no listing: the base stays
                    listing = scan_versions(self.storage, since=checked)
                    self._look(listing.beacons)
                    if listing.latest is not None:
                        newest = max(newest, listing.latest.version)
            if newest == base.version:
                found.append(base)
                return
            with contextlib.suppress(TxnEngineError):  # unread: the latest is read below
                found.append(_at(self.storage, newest, base.naming_scheme))

        lister = threading.Thread(target=wrap(latest), name="txn-engine-carrier-list", daemon=True)
        lister.start()
        memory = peek(self.storage.uri)
        if memory is not None and memory.scan is not None:
            memory.scan.wait(_SCAN_WAIT_SECONDS)
        lister.join()
        if not found:  # the newest could not be read: the latest, read again (an error
            return self._reopen()  # there ends the carrier)
        return found[0]

    def _reopen(self) -> Dataset:
        """The latest version, read again (a failed read is tried again, three times)."""
        for _ in range(_REOPEN_TRIES - 1):
            with contextlib.suppress(TxnEngineError):
                return Dataset.open(self.storage)
        return Dataset.open(self.storage)


def _decoded(storage: Storage, version: int, scheme: NamingScheme, data: bytes) -> Dataset:
    entry = VersionEntry(version, manifest_name(version, scheme), scheme)
    return Dataset(storage, entry, decode_manifest_file(data, what=f"{storage.uri}/{entry.path}"))


def _created(storage: Storage, version: int, scheme: NamingScheme) -> Dataset:
    """The dataset at ``version``, which the carrier's commit just created: from the bytes
    it wrote (no request), else read (:func:`_at`)."""
    data = carried_here(storage, manifest_path(version, scheme))
    if data is None:
        return _at(storage, version, scheme)
    return _decoded(storage, version, scheme, data)


def _probe(storage: Storage, version: int, scheme: NamingScheme) -> Dataset | None:
    """The dataset at ``version`` read by its name with one GET, None when it does not
    exist yet (:func:`txn_engine.format.io.read_version_by_name`)."""
    data = read_version_by_name(storage, version, scheme)
    return None if data is None else _decoded(storage, version, scheme, data)


def _at(storage: Storage, version: int, scheme: NamingScheme) -> Dataset:
    """The dataset at ``version`` (named in ``scheme``), read with one request."""
    entry = VersionEntry(version, manifest_name(version, scheme), scheme)
    return Dataset(storage, entry, read_manifest_entry(storage, entry))


def _hosted_token() -> str:
    """A hosted carrier's token: "1", its start (Unix ms, 12 hex digits), 19 random hex
    digits. The earliest started ranks first, so a carrier hosted later steps down for one
    already at work rather than displacing it."""
    return f"1{int(time.time() * 1000):012x}{secrets.token_hex(10)[:19]}"


class Hosts:
    """A session's hosted carriers, one per table (by URI) at most, running or lately
    stopped. At exit they take their beacons down (writers elsewhere then race at once
    instead of waiting in vain for their patience)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.carriers: dict[str, Carrier] = {}
        atexit.register(self.close_all)
        # a multiprocessing child ends in os._exit, after its own exit functions, not atexit's
        multiprocessing.util.Finalize(self, self.close_all, exitpriority=10)

    def host(
        self,
        storage: Storage,
        base: Dataset | None = None,
        known: Mapping[int, transaction_pb2.Transaction | None] | None = None,
        offers: Mapping[str, Offer] | None = None,
        scan: OfferScan | None = None,
    ) -> bool:
        """:func:`host` in this session."""
        with self.lock:
            running = self.carriers.get(storage.uri)
            if running is not None and (running.running or _yielded_lately(running)):
                return False
            for uri in [u for u, c in self.carriers.items() if not c.running]:
                del self.carriers[uri]  # stopped ones are not kept (a process may touch many)
            carrier = Carrier(storage, idle_seconds=HOST_IDLE_SECONDS, session=current())
            carrier.hosted = True
            carrier._first_base = base
            carrier._first_known = dict(known or {})
            carrier._first_offers = dict(offers or {})
            carrier._first_scan = scan
            carrier._token = _hosted_token()
            if base is not None:
                carrier._claim = f"{HOSTS_DIR}/{claim_name(base.version)}"
            self.carriers[storage.uri] = carrier.start()
            return True

    def hosted(self, uri: str) -> Carrier | None:
        """This session's last hosted carrier for table ``uri`` (running or not)."""
        with self.lock:
            return self.carriers.get(uri)

    def hosting(self, uri: str) -> bool:
        """:func:`hosting` in this session."""
        carrier = self.hosted(uri)
        if carrier is None:
            return False
        return (carrier.running and not carrier.stepped_down) or _yielded_lately(carrier)

    def close_all(self) -> None:
        """Close every carrier of this session (each waits at most 2 s)."""
        with self.lock:
            carriers = list(self.carriers.values())
        for carrier in carriers:
            carrier.close(timeout=2.0)


def host(
    storage: Storage,
    base: Dataset | None = None,
    known: Mapping[int, transaction_pb2.Transaction | None] | None = None,
    offers: Mapping[str, Offer] | None = None,
    scan: OfferScan | None = None,
) -> bool:
    """Start a carrier for the table at ``storage`` in the current session, hosted (it
    steps down for a carrier that ranks before it and stops after
    :data:`HOST_IDLE_SECONDS` with nothing carried), unless the session's last one for the
    table still runs. ``base``: the latest version the caller knows (else the carrier reads
    it); ``known``: the transactions of the versions it read (the carrier does not read
    them again when it checks offers against them); ``offers`` and ``scan``: the offers it
    read and its listing of them still running (the carrier's first version carries them
    without a listing of its own). Returns whether one was started. Called by a commit that
    lost a race while no carrier was seen (``RetryPolicy.host_carrier``)."""
    return current().part(Hosts).host(storage, base, known, offers, scan)


def hosted(uri: str) -> Carrier | None:
    """The current session's last hosted carrier for table ``uri`` (running or not)."""
    return current().part(Hosts).hosted(uri)


def hosting(uri: str) -> bool:
    """Whether the current session's hosted carrier for table ``uri`` runs (it has not
    stopped or stepped down): its writers may wait for it before its beacon is listed."""
    return current().part(Hosts).hosting(uri)


def _yielded_lately(carrier: Carrier) -> bool:
    """Whether ``carrier`` yielded to another writer's claim within the grace."""
    at = carrier.yielded_at
    return at is not None and time.monotonic() - at < CLAIM_GRACE_SECONDS


class _SessionHosts:
    """The :class:`~txn_engine.contention.offering.Hosting` of the current session."""

    def host(
        self,
        storage: Storage,
        base: Dataset | None,
        known: Mapping[int, transaction_pb2.Transaction | None],
        offers: Mapping[str, Offer],
        scan: OfferScan | None,
    ) -> bool:
        """:func:`host`."""
        return host(storage, base, known, offers, scan)

    def hosting(self, uri: str) -> bool:
        """:func:`hosting`."""
        return hosting(uri)


_SESSION_HOSTS = _SessionHosts()


def contention_for(core: Core, policy: RetryPolicy) -> Contention:
    """The contention handling of a commit (:data:`~txn_engine.loop.seam.ContentionFactory`):
    offers and carriers where creates are guarded (object stores; with
    ``RetryPolicy.offer_after=None`` it neither offers nor carries, but still finds an
    offer an earlier call of the transaction left), else the plain loop
    (:class:`~txn_engine.loop.seam.NoContention`)."""
    if not core.guarded:
        return NoContention(core)
    return Offering(core, policy, _SESSION_HOSTS)
