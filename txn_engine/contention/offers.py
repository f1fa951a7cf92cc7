"""Offers: writers that keep losing the race for a version carry each other's Appends.

Uncoordinated writers on one table take versions in an order nobody chooses: with 8
processes appending as fast as they can, every version is one winner and seven losers, and a
writer may lose many races in a row while others win twice. Backoff only reorders the
losers (``docs/performance.md``, *Backoff that fits the store*). An offer lets a loser stop
depending on winning at all:

1. A commit of a plain Append (new fragments, ids assigned at commit) that has lost a race
   on an object store writes its transaction to ``_txn_engine_offers/{W}-{uuid}.txn`` (in
   the background; ``W`` is the last version it may land in, a few versions ahead) and goes
   on committing as before. On a store with long keys (object stores) a small offer's
   transaction is in its name too (``{W}-{uuid}.{base64url}.txn``), so that a listing is
   its read.
2. Every Append commit that is retrying lists that directory beside its attempts (in the
   background too) and puts the live offers it can check into the version it creates next:
   one Append carrying its own fragments and theirs, the offers' uuids recorded like a
   group commit's members (:data:`~txn_engine.transaction.GROUP_MEMBERS_KEY`).
3. The offering writer finds its uuid in a new version and returns that version.

Why nothing lands twice or lands unannounced (the proof in ``docs/architecture.md``,
*Offers*, and the tests in ``tests/property/test_offers.py``):

* A transaction is put into an attempt at version ``t`` only after every version from its
  checked read version to ``t - 1`` was read and none of them carries its uuid; versions
  are created one at a time by create-if-absent, so at most one version carries it.
* A helper puts an offer only into versions ``t <= W``. The offering writer does not give
  up (retries exhausted, storage error) while a version ``<= W`` may still be created
  without it having checked it: its budget is extended until it has seen version ``W``,
  and any other error on the way is raised as
  :class:`~txn_engine.errors.CommitStateUnknownError` (committing the same transaction
  again settles it). A conflict is raised as it is: a helper checks the offer against the
  same versions with the same rules, so it finds the same conflict.
* A helper also checks the offer with the conflict rules and validates it against the
  manifest it builds on; an offer it cannot check (a version it has not read, an unreadable
  transaction, an expired window) is left out, never guessed.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import attrs
from pyroaring import BitMap

from txn_engine._proto import table_pb2, transaction_pb2
from txn_engine.codec import transaction_from_proto, transaction_to_proto
from txn_engine.conflicts.detect import Conflict
from txn_engine.conflicts.planner import Winner, plan_retry
from txn_engine.conflicts.rebase import ConflictOptions
from txn_engine.errors import StorageError
from txn_engine.format.io import read_transaction_and_manifest
from txn_engine.format.manifest_file import decode_transaction
from txn_engine.format.naming import (
    NamingScheme,
    VersionEntry,
    carrier_beacon,
    forget_beacon,
    manifest_name,
)
from txn_engine.loop.core import carried_in_order, carried_uuids, members_of
from txn_engine.ops import Append
from txn_engine.session import current, wrap
from txn_engine.storage.base import Storage, get_bounded, max_path_bytes, read_concurrency
from txn_engine.transaction import GROUP_MEMBERS_KEY, Transaction

__all__ = [
    "CARRIER_KEY",
    "CARRIER_SECONDS",
    "HOSTS_DIR",
    "OFFERS_DIR",
    "OFFER_BASE_KEY",
    "OFFER_WINDOW",
    "Offer",
    "OfferScan",
    "Posting",
    "Recent",
    "can_carry",
    "carried_in_order",
    "carried_uuids",
    "carrier_lately",
    "carrying",
    "claim_name",
    "forget_carrier",
    "inline_offer",
    "may_offer",
    "members_of",
    "offer_name",
    "parse_claim_name",
    "parse_offer_name",
    "peek",
    "private_memory",
    "recall",
    "remember",
    "saw_carrier",
    "select_offers",
]

#: Where offers are written, beside ``_versions/`` (Lance ignores the directory).
OFFERS_DIR = "_txn_engine_offers"

#: Where the writers that lost a race to the same version claim the hosting of a carrier
#: (:func:`claim_name`; :func:`txn_engine.contention.carrier.host`), beside ``_versions/``.
HOSTS_DIR = "_txn_engine_hosts"

#: Property of an offered transaction: the uuid of the transaction of the version it was
#: checked up to (its ``read_version``). A helper carries it only into a history where that
#: version is that transaction (not a table re-created at the same URI).
OFFER_BASE_KEY = "txn_engine.offer_base"

#: How many versions after the one its writer lost an offer stays valid.
OFFER_WINDOW = 8

#: At most this many offers go into one version (bounds the manifest's growth per version).
MAX_OFFERS_PER_VERSION = 32

#: An offer larger than this is not read (a hostile file must not exhaust memory).
MAX_OFFER_BYTES = 64 << 20

#: At most this many offers are read by one listing (the oldest first).
MAX_OFFERS_PER_SCAN = 64

#: An offer whose transaction encodes to at most this many bytes also travels in its file
#: name (base64url) where the store's keys are long enough (object stores: 1,024 bytes), so
#: the helper's listing is its read: no GET per offer, one round trip less before an offer
#: can be carried.
MAX_INLINE_OFFER_BYTES = 640

#: For how long a commit that saw contention on a table lets the next commit of this process
#: on that table carry offers from its first attempt (seconds).
RECENT_SECONDS = 1.0

#: At most this many versions' transactions are kept for the next commit (the newest) ...
RECENT_VERSIONS = 1024

#: ... and at most this many bytes of them (their encoded size). A writer that keeps
#: committing from an old read version (a stale plan) checks every version since it, and a
#: version it does not remember is read again on each commit: with 64 remembered, a writer
#: 100 versions behind read 36 of them per commit, and its commits grew by a round trip per
#: 8 versions (docs/performance.md, *A sustained run*).
RECENT_BYTES = 32 << 20

_NAME = re.compile(r"([0-9]{20})-([0-9a-f-]{36})(?:\.([A-Za-z0-9_-]{1,1000}))?\.txn", re.ASCII)

#: Property of a carrier's own transaction (:mod:`txn_engine.contention.carrier`): an empty Append
#: that exists only to carry offers; it is never offered itself.
CARRIER_KEY = "txn_engine.carrier"


def offer_name(valid_through: int, uuid: str, inline: bytes | None = None) -> str:
    """``{valid_through:020d}-{uuid}.txn``: the listing alone shows which offers are live;
    with ``inline`` (the offer's encoded transaction), ``{valid_through:020d}-{uuid}.{b64}.txn``
    (base64url, unpadded): the listing also carries the offer itself."""
    if inline is None:
        return f"{valid_through:020d}-{uuid}.txn"
    payload = base64.urlsafe_b64encode(inline).rstrip(b"=").decode()
    return f"{valid_through:020d}-{uuid}.{payload}.txn"


def parse_offer_name(name: str) -> tuple[int, str] | None:
    """``(valid_through, uuid)`` of an offer's file name, or None for any other name."""
    m = _NAME.fullmatch(name)
    return None if m is None else (int(m.group(1)), m.group(2))


def claim_name(version: int) -> str:
    """``{version:020d}.claim``: the claim, by the writers that lost a race to ``version``,
    of hosting a carrier (one create-if-absent each: the first hosts)."""
    return f"{version:020d}.claim"


def parse_claim_name(name: str) -> int | None:
    """The version of a claim's file name (:func:`claim_name`), or None for any other."""
    m = _CLAIM_NAME.fullmatch(name)
    return None if m is None else int(m.group(1))


_CLAIM_NAME = re.compile(r"([0-9]{20})\.claim", re.ASCII)


def inline_offer(name: str) -> bytes | None:
    """The encoded transaction an offer's file name carries (:func:`offer_name` with
    ``inline``), or None when it carries none or is not an offer's name."""
    m = _NAME.fullmatch(name)
    if m is None or m.group(3) is None:
        return None
    payload = m.group(3)
    try:
        return base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
    except (binascii.Error, ValueError):
        return None


def can_carry(txn: Transaction) -> bool:
    """Whether ``txn`` can carry offers: an Append of new fragments (ids assigned at commit),
    a plain one or a group commit's."""
    op = txn.operation
    return isinstance(op, Append) and all(f.id == 0 for f in op.fragments)


def may_offer(txn: Transaction) -> bool:
    """Whether ``txn`` may be offered: an Append of new fragments that is not itself a
    group (its members would be found under their own uuids only), nor a carrier's."""
    return can_carry(txn) and not members_of(txn) and CARRIER_KEY not in txn.properties_dict


def carrying(txn: Transaction, offers: Sequence[Transaction]) -> Transaction:
    """``txn`` (same uuid, read version and other properties) with the offers' fragments
    appended and their uuids added to its members."""
    if not offers:
        return txn
    assert isinstance(txn.operation, Append)
    fragments = list(txn.operation.fragments)
    for offer in offers:
        assert isinstance(offer.operation, Append)
        fragments.extend(offer.operation.fragments)
    props = txn.properties_dict
    props[GROUP_MEMBERS_KEY] = ",".join((*members_of(txn), *(o.uuid for o in offers)))
    return attrs.evolve(txn, operation=Append(tuple(fragments)), properties=props)


@attrs.frozen
class Offer:
    """A live offer as read: its file name, last version and transaction (whose
    ``read_version`` is the version its writer had checked it against)."""

    name: str
    valid_through: int
    transaction: Transaction


#: How many uuids of its own transactions a session keeps (:func:`ours`).
_OURS_KEEP = 4096


def note_ours(uuid: str) -> None:
    """Transaction ``uuid`` is this session's (a commit on an object store, or an offer)."""
    memory = current().part(OfferMemory)
    with memory.lock:
        memory.ours.pop(uuid, None)
        memory.ours[uuid] = None
        while len(memory.ours) > _OURS_KEEP:
            del memory.ours[next(iter(memory.ours))]


def ours(uuid: str) -> bool:
    """Whether transaction ``uuid`` is one of this session's last :data:`_OURS_KEEP`
    (:func:`note_ours`): an offer or a version whose transaction is not is another
    writer's (another process's, or another session's)."""
    memory = current().part(OfferMemory)
    with memory.lock:
        return uuid in memory.ours


class Posting:
    """An offer being written (in a thread, so it is not a round trip of the commit)."""

    def __init__(
        self, storage: Storage, txn: Transaction, valid_through: int, base_uuid: str
    ) -> None:
        note_ours(txn.uuid)
        self.valid_through = valid_through
        #: the offer is in the store (helpers can find it)
        self.written = False
        self._done = threading.Event()
        self._storage = storage
        props = {**txn.properties_dict, OFFER_BASE_KEY: base_uuid}
        offered = attrs.evolve(txn, properties=props)
        self._data = transaction_to_proto(offered).SerializeToString(deterministic=True)
        self.path = f"{OFFERS_DIR}/{offer_name(valid_through, txn.uuid)}"
        limit = max_path_bytes(storage)
        if limit and len(self._data) <= MAX_INLINE_OFFER_BYTES:  # in the name too, if it fits
            inline = f"{OFFERS_DIR}/{offer_name(valid_through, txn.uuid, self._data)}"
            if len(inline.encode()) <= limit:
                self.path = inline
        self._thread = threading.Thread(
            target=wrap(self._put), name="txn-engine-offer", daemon=True
        )
        self._thread.start()

    def _put(self) -> None:
        try:
            self._storage.put(self.path, self._data)
            self.written = True
        except Exception:  # no offer: the commit goes on alone (nothing depends on it)
            return
        finally:
            self._done.set()

    def wait_written(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the offer's write; whether it is written."""
        self._done.wait(timeout)
        return self.written

    def withdraw(self) -> None:
        """Remove the offer once its writer knows the outcome (in the background, best
        effort: a helper may still have it in hand; the window keeps that safe, and cleanup
        removes expired offers)."""

        def remove() -> None:
            self._thread.join()
            try:
                self._storage.delete(self.path)
            except Exception:
                return

        threading.Thread(target=wrap(remove), name="txn-engine-offer-withdraw", daemon=True).start()


class OfferScan:
    """One listing of ``_txn_engine_offers/`` and reads of the offers not seen before, in a
    thread. :meth:`take` never waits: an unfinished scan is picked up by a later attempt."""

    def __init__(
        self,
        storage: Storage,
        *,
        after: int,
        known: Iterable[str],
        scheme: NamingScheme | None = None,
        have: Iterable[int] = (),
    ) -> None:
        self._storage = storage
        self._after = after
        self._known = frozenset(known)
        self._scheme = scheme
        self._have = frozenset(have)
        self._found: list[Offer] | None = None
        #: transactions of versions up to ``after`` that the offers found were checked
        #: against and the caller had not read (:meth:`transactions`)
        self._transactions: dict[int, transaction_pb2.Transaction] = {}
        self._thread = threading.Thread(
            target=wrap(self._run), name="txn-engine-offers", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        try:
            names = self._storage.list(OFFERS_DIR)
        except StorageError:
            self._found = []
            return
        fresh: list[tuple[int, str]] = []
        for name in names:
            parsed = parse_offer_name(name)
            if parsed is None or name in self._known or parsed[0] <= self._after:
                continue
            fresh.append((parsed[0], name))
        fresh.sort()  # the oldest window first: the writers that have waited longest
        fresh = fresh[:MAX_OFFERS_PER_SCAN]
        versions = self._versions_to_read(fresh)
        inline = [(name, inline_offer(name)) for _, name in fresh]
        named = [_offer_of(name, data, what=name) for name, data in inline if data]
        jobs: list[Callable[[], object]] = [
            *(functools.partial(self._read, name) for name, data in inline if not data),
            *(functools.partial(self._read_version, version) for version in versions),
        ]
        threads = min(read_concurrency(self._storage), len(jobs))
        if threads <= 1:
            read = [job() for job in jobs]
        else:  # one round trip for all of them on an object store
            with ThreadPoolExecutor(threads, thread_name_prefix="txn-engine-offer-read") as pool:
                read = list(pool.map(wrap(lambda job: job()), jobs))
        found = [offer for offer in (*named, *read) if isinstance(offer, Offer)]
        self._found = sorted(found, key=lambda offer: (offer.valid_through, offer.name))

    def _versions_to_read(self, fresh: Sequence[tuple[int, str]]) -> list[int]:
        """The versions up to ``after`` an offer in ``fresh`` was probably checked against
        (its read version is its window's last version less :data:`OFFER_WINDOW`, as this
        module posts them) whose transactions the caller has not read: a helper that
        started after the offer's writer cannot check the offer without them. A version
        read here that an offer turns out not to need is merely unused; one it needs and
        that is not here leaves the offer out, as before."""
        if self._scheme is None or not fresh:
            return []
        first = max(min(w for w, _ in fresh) - OFFER_WINDOW, self._after - OFFER_WINDOW, 0)
        return [v for v in range(first, self._after + 1) if v not in self._have]

    def _read_version(self, version: int) -> None:
        assert self._scheme is not None
        entry = VersionEntry(version, manifest_name(version, self._scheme), self._scheme)
        try:
            pb, _ = read_transaction_and_manifest(self._storage, entry)
        except Exception:  # gone, unreadable or hostile: left out (an offer needing it waits)
            return None
        self._transactions[version] = pb
        return None

    def _read(self, name: str) -> Offer | None:
        path = f"{OFFERS_DIR}/{name}"
        try:
            data = get_bounded(self._storage, path, MAX_OFFER_BYTES)
        except Exception:  # gone (withdrawn) or unreadable: not an offer
            return None
        return _offer_of(name, data, what=path)

    def take(self) -> list[Offer] | None:
        """The offers read, or None while the scan is still running."""
        if self._thread.is_alive():
            return None
        return self._found if self._found is not None else []

    def wait(self, timeout: float | None = None) -> list[Offer] | None:
        """:meth:`take`, after waiting up to ``timeout`` seconds for the scan to finish."""
        self._thread.join(timeout)
        return self.take()

    def transactions(self) -> dict[int, transaction_pb2.Transaction]:
        """Once the scan has finished: the transactions of the versions it read for the
        offers found (versions the caller had not read; see :meth:`_versions_to_read`)."""
        if self._thread.is_alive():
            return {}
        return dict(self._transactions)


def _offer_of(name: str, data: bytes, *, what: str) -> Offer | None:
    """The offer ``name`` holds (``data``: its encoded transaction, read or from the name),
    or None when it is not one: not an offer's name, undecodable or hostile, not an Append
    that may be offered, or a transaction other than the one its name says."""
    parsed = parse_offer_name(name)
    if parsed is None:
        return None
    try:
        txn = transaction_from_proto(decode_transaction(data, what=what))
    except Exception:
        return None
    valid_through, uuid = parsed
    if not may_offer(txn) or txn.uuid != uuid:
        return None
    return Offer(name, valid_through, txn)


def select_offers(
    offers: Iterable[Offer],
    *,
    own: frozenset[str],
    latest: int,
    transactions: Mapping[int, transaction_pb2.Transaction | None],
    validate: Callable[[Transaction], object],
    options: ConflictOptions | None = None,
) -> tuple[list[Transaction], list[str]]:
    """The offers an attempt building on version ``latest`` may carry into ``latest + 1``,
    oldest window first, and the names of offers that can never be carried again (expired,
    or already landed).

    An offer is carried only when its window reaches ``latest + 1``, its uuid is not one of
    ``own``, its read version's transaction is the one it names (:data:`OFFER_BASE_KEY`),
    every version after its read version up to ``latest`` is in ``transactions`` (read,
    with a readable transaction) and none of them carries it, the conflict rules find no
    conflict with any of them, and ``validate`` accepts it on the manifest built on.
    """
    chosen: list[Transaction] = []
    dead: list[str] = []
    for offer in sorted(offers, key=lambda o: (o.valid_through, o.name)):
        txn = offer.transaction
        if offer.valid_through < latest + 1:
            dead.append(offer.name)
            continue
        if txn.uuid in own or txn.read_version > latest or len(chosen) >= MAX_OFFERS_PER_VERSION:
            continue
        base = transactions.get(txn.read_version)
        if base is None or base.uuid != txn.properties_dict.get(OFFER_BASE_KEY):
            continue  # not known to be this table's history (yet)
        winners: list[Winner] = []
        landed = unreadable = False
        for version in range(txn.read_version + 1, latest + 1):
            pb = transactions.get(version)
            if pb is None:  # not read, or unreadable
                unreadable = True
                break
            if txn.uuid in carried_uuids(pb):
                landed = True
                break
            winners.append(Winner(version, pb))
        if landed:
            dead.append(offer.name)
            continue
        if unreadable:
            continue
        plan = plan_retry(
            txn,
            winners,
            latest_version=latest,
            latest_fragments=(),
            initial_fragments=lambda _fid: None,
            read_dv=_no_deletion_reads,
            options=options,
        )
        if isinstance(plan, Conflict) or plan.writes:
            continue  # a conflict (its writer finds the same one), or a rebase to write
        try:
            validate(txn)
        except Exception:
            continue
        chosen.append(txn)
    return chosen, dead


def _no_deletion_reads(fragment_id: int, pb: table_pb2.DeletionFile) -> BitMap:
    raise AssertionError("an Append offer never merges deletion vectors")


@attrs.define
class Recent:
    """What a commit that saw contention knows, kept for the next commit of this process
    on the same table: the transactions of the versions it read (or landed), the offers it
    read and the names of those that can never land."""

    transactions: dict[int, transaction_pb2.Transaction | None]
    offers: dict[str, Offer]
    dead: set[str]
    until: float
    #: a scan of the offers still running when the commit ended
    scan: OfferScan | None = None


#: How long a process goes on waiting for a table's carrier (:mod:`txn_engine.contention.carrier`)
#: after it last read one of its versions (seconds; a wait that finds no carrier ends it).
CARRIER_SECONDS = 10.0


class OfferMemory:
    """A session's memory of contention (:mod:`txn_engine.session`): the uuids of its own
    transactions, what its last contended commit on each table knew (:class:`Recent`), when
    it last read each table's carrier, the encoded sizes of remembered transactions, and a
    thread's own memory apart from the session's (a carrier's: :func:`private_memory`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ours: dict[str, None] = {}
        self.recent: dict[str, Recent] = {}
        self.carriers: dict[str, float] = {}
        self.sizes: dict[str, int] = {}
        self.private = threading.local()

    def own(self) -> dict[str, Recent] | None:
        """The calling thread's own memory, if it has one (:func:`private_memory`)."""
        own: dict[str, Recent] | None = getattr(self.private, "memory", None)
        return own


def private_memory() -> None:
    """Give the calling thread a memory of its own: :func:`remember` and :func:`recall`
    in this thread no longer share the session's (a carrier thread keeps what it knows
    between its commits without taking what the writers of its session remember)."""
    current().part(OfferMemory).private.memory = {}


def remember(
    uri: str,
    transactions: Mapping[int, transaction_pb2.Transaction | None],
    offers: Mapping[str, Offer],
    dead: Iterable[str],
    scan: OfferScan | None = None,
) -> None:
    """Keep what a contended commit on table ``uri`` knows for :data:`RECENT_SECONDS`: the
    transactions of the newest versions, within :data:`RECENT_VERSIONS` and
    :data:`RECENT_BYTES` (a version left out is read again when needed)."""
    memory = current().part(OfferMemory)
    kept: dict[int, transaction_pb2.Transaction | None] = {}
    room = RECENT_BYTES
    for version in sorted(transactions, reverse=True)[:RECENT_VERSIONS]:
        pb = transactions[version]
        room -= 0 if pb is None else _size_of(memory, pb)
        if room < 0:
            break
        kept[version] = pb
    entry = Recent(
        kept,
        dict(offers),
        set(dead),
        time.monotonic() + RECENT_SECONDS,
        scan,
    )
    own = memory.own()
    if own is not None:
        own[uri] = entry
        return
    with memory.lock:
        memory.recent[uri] = entry
        for key in [k for k, r in memory.recent.items() if r.until < time.monotonic()]:
            del memory.recent[key]


#: How many encoded sizes of remembered transactions a session keeps, by uuid (a
#: transaction is remembered by many commits in a row: its size is computed once).
_SIZES_MAX = 4 * RECENT_VERSIONS


def _size_of(memory: OfferMemory, pb: transaction_pb2.Transaction) -> int:
    sizes = memory.sizes
    size = sizes.get(pb.uuid)
    if size is None:
        if len(sizes) >= _SIZES_MAX:
            sizes.clear()
        size = sizes[pb.uuid] = pb.ByteSize()
    return size


def peek(uri: str) -> Recent | None:
    """What :func:`recall` would give, left in place (the calling thread's own memory when
    it has one: :func:`private_memory`)."""
    memory = current().part(OfferMemory)
    own = memory.own()
    if own is not None:
        entry = own.get(uri)
    else:
        with memory.lock:
            entry = memory.recent.get(uri)
    if entry is None or entry.until < time.monotonic():
        return None
    return entry


def recall(uri: str) -> Recent | None:
    """What the last contended commit of this process on ``uri`` knew, if it was recent
    (taken: a commit running beside it starts from nothing)."""
    memory = current().part(OfferMemory)
    own = memory.own()
    if own is not None:
        entry = own.pop(uri, None)
    else:
        with memory.lock:
            entry = memory.recent.pop(uri, None)
    if entry is None or entry.until < time.monotonic():
        return None
    return entry


def saw_carrier(uri: str) -> None:
    """A commit of this process read a version of the carrier of table ``uri``."""
    memory = current().part(OfferMemory)
    with memory.lock:
        memory.carriers[uri] = time.monotonic() + CARRIER_SECONDS


def carrier_lately(uri: str) -> bool:
    """Whether this process read a version of the carrier of ``uri`` within
    :data:`CARRIER_SECONDS`, or its last listing of the versions showed the carrier's live
    beacon (:func:`txn_engine.format.naming.beacon_name`), and no commit since waited for
    it in vain."""
    memory = current().part(OfferMemory)
    with memory.lock:
        until = memory.carriers.get(uri)
        if until is not None and until < time.monotonic():
            del memory.carriers[uri]
            until = None
    return until is not None or carrier_beacon(uri)


def forget_carrier(uri: str) -> None:
    """A commit of this process waited for the carrier of ``uri`` and none came."""
    memory = current().part(OfferMemory)
    with memory.lock:
        memory.carriers.pop(uri, None)
    forget_beacon(uri)
