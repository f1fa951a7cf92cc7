"""Offers (:mod:`txn_engine.contention.offers`): a retrying Append carries other writers'
offered Appends.

Each rule of the module docstring has a test here: what is offered and when, what a helper
carries and what it leaves out, how the offering writer learns its outcome, and why it never
reports a failure while its offer may still land (the window). The concurrent exactly-once
property is in ``tests/property/test_offers_concurrent.py``.
"""

from __future__ import annotations

import importlib
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import pytest

from txn_engine._proto import transaction_pb2
from txn_engine.codec import transaction_to_proto
from txn_engine.commit import CommitResult, carries_uuid, commit
from txn_engine.contention.offers import (
    MAX_INLINE_OFFER_BYTES,
    MAX_OFFERS_PER_VERSION,
    OFFER_BASE_KEY,
    OFFER_WINDOW,
    OFFERS_DIR,
    Offer,
    OfferScan,
    Posting,
    Recent,
    carried_uuids,
    carrying,
    inline_offer,
    may_offer,
    offer_name,
    parse_offer_name,
    select_offers,
)
from txn_engine.dataset import Dataset
from txn_engine.errors import (
    CommitStateUnknownError,
    IncompatibleTransactionError,
    ObjectExistsError,
    RetryableConflictError,
    StorageError,
)
from txn_engine.format.io import latest_version, read_transaction, read_transaction_and_manifest
from txn_engine.format.naming import NamingScheme, list_versions, manifest_name
from txn_engine.ops import Append, Delete, Overwrite
from txn_engine.retry import RetryPolicy
from txn_engine.storage import RecordingStorage
from txn_engine.transaction import GROUP_MEMBERS_KEY, Transaction

from .test_guarded_create import SCHEMA, ObjectStore, append, frag, table


def landed_uuids(store: ObjectStore) -> dict[int, frozenset[str]]:
    """Every version's carried uuids (its own and its members')."""
    out = {}
    for entry in list_versions(store):
        pb, _ = read_transaction_and_manifest(store, entry, None)
        assert pb is not None
        out[entry.version] = carried_uuids(pb)
    return out


def post(store: ObjectStore, txn: Transaction, valid_through: int) -> str:
    """Write ``txn`` as an offer, naming the transaction of its read version when the store
    has that version (as a losing writer does)."""
    name = offer_name(valid_through, txn.uuid)
    if any(e.version == txn.read_version for e in list_versions(store)):
        base = read_transaction(store, txn.read_version).uuid
        txn = attrs.evolve(txn, properties={**txn.properties_dict, OFFER_BASE_KEY: base})
    store.put(f"{OFFERS_DIR}/{name}", transaction_to_proto(txn).SerializeToString())
    return name


class Competitors(ObjectStore):
    """Another writer's Append lands right before each of our next ``times`` manifest
    creates: we lose that many races in a row (after our guard listing, so each is a race)."""

    def __init__(self) -> None:
        super().__init__()
        self.times = 0
        self.competing = False
        self.winners: list[CommitResult] = []

    def put_if_absent(self, path: str, data: bytes) -> None:
        if self.times and path.startswith("_versions/") and not self.competing:
            self.times -= 1
            self.competing = True
            try:
                txn = Transaction(latest_version(self).version, Append([frag()]))
                self.winners.append(commit(self, txn, retry_policy=RetryPolicy(offer_after=None)))
            finally:
                self.competing = False
        super().put_if_absent(path, data)


# ---- names, eligibility, merging ------------------------------------------------------------


def test_offer_names_carry_the_window_and_the_uuid() -> None:
    u = str(uuid.uuid4())
    assert parse_offer_name(offer_name(42, u)) == (42, u)
    for junk in ("x.txn", f"{42:020d}-{u}.bin", f"42-{u}.txn", f"{42:020d}-not-a-uuid.txn"):
        assert parse_offer_name(junk) is None
    # digits are ASCII (int() would read ARABIC-INDIC DIGIT ZERO) and the name ends at .txn
    for junk in (f"{chr(0x660) * 20}-{u}.txn", f"{42:020d}-{u}.txn\n"):
        assert parse_offer_name(junk) is None
        assert inline_offer(junk) is None


def test_an_offer_name_may_carry_the_offer_itself() -> None:
    u = str(uuid.uuid4())
    data = transaction_to_proto(Transaction(3, Append([frag()]), uuid=u)).SerializeToString()
    name = offer_name(42, u, data)
    assert parse_offer_name(name) == (42, u)
    assert inline_offer(name) == data
    assert inline_offer(offer_name(42, u)) is None  # a plain name carries nothing
    assert inline_offer(f"{42:020d}-{u}.A.txn") is None  # not base64 (one char left over)
    for junk in (f"{42:020d}-{u}.a+b.txn", f"{42:020d}-{u}..txn", f"{42:020d}-{u}.x/y.txn"):
        assert parse_offer_name(junk) is None
        assert inline_offer(junk) is None


class LongKeys(ObjectStore):
    """An object store whose keys may be ``max_path_bytes`` long (S3, GCS, Azure: 1,024
    less the dataset's prefix)."""

    def __init__(self, max_path_bytes: int) -> None:
        super().__init__()
        self.max_path_bytes = max_path_bytes


def posted(store: ObjectStore, txn: Transaction) -> str:
    """Post ``txn`` as an offer (as a losing writer does) and wait for the put."""
    posting = Posting(store, txn, 10, str(uuid.uuid4()))
    posting._thread.join()
    (name,) = store.list(OFFERS_DIR)
    assert posting.path == f"{OFFERS_DIR}/{name}"
    return name


def test_an_offer_travels_in_its_name_where_the_keys_are_long_enough() -> None:
    txn = Transaction(3, Append([frag()]))
    store = LongKeys(1024)
    name = posted(store, txn)
    data = inline_offer(name)
    assert data is not None
    assert store.get(f"{OFFERS_DIR}/{name}") == data  # the body holds the same bytes
    # too short for it (a local store declares 0; a long dataset prefix leaves little)
    assert inline_offer(posted(LongKeys(0), txn)) is None
    assert inline_offer(posted(LongKeys(len(f"{OFFERS_DIR}/{name}") - 1), txn)) is None
    # a large offer is read, not named
    many = Transaction(3, Append([frag() for _ in range(40)]))
    assert len(transaction_to_proto(many).SerializeToString()) > MAX_INLINE_OFFER_BYTES
    assert inline_offer(posted(LongKeys(1024), many)) is None


def test_the_scan_takes_named_offers_from_the_listing_without_reading_them() -> None:
    store = LongKeys(1024)
    good = Transaction(3, Append([frag()]))
    good_name = posted(store, good)
    store.put(f"{OFFERS_DIR}/{good_name}", b"")  # the body is not read at all
    # hostile or wrong names are not offers: another uuid, junk bytes, not an Append
    other = Transaction(3, Append([frag()]))
    wrong = offer_name(10, str(uuid.uuid4()), transaction_to_proto(other).SerializeToString())
    junk = offer_name(10, str(uuid.uuid4()), b"\xff not a transaction")
    delete = Transaction(3, Delete([], [], "id > 0"))
    not_append = offer_name(10, delete.uuid, transaction_to_proto(delete).SerializeToString())
    for name in (wrong, junk, not_append):
        store.put(f"{OFFERS_DIR}/{name}", b"")
    recording = RecordingStorage(store)
    found = taken(OfferScan(recording, after=5, known=[]))
    assert [o.transaction.uuid for o in found] == [good.uuid]
    assert found[0].transaction == attrs.evolve(
        good, properties=found[0].transaction.properties_dict
    )
    assert [method for method, _ in recording.calls] == ["list"]


def test_only_plain_appends_of_new_fragments_are_offered() -> None:
    assert may_offer(Transaction(1, Append([frag()])))
    assert not may_offer(Transaction(1, Append([frag().with_id(7)])))  # ids chosen already
    assert not may_offer(Transaction(1, Delete([], [], "id > 0")))
    group = Transaction(1, Append([frag()]), properties={GROUP_MEMBERS_KEY: "a,b"})
    assert not may_offer(group)  # a group's members are found under their own uuids


def test_carrying_appends_the_fragments_and_records_the_uuids() -> None:
    mine = Transaction(3, Append([frag()]), properties={"k": "v"})
    a, b = Transaction(2, Append([frag(), frag()])), Transaction(3, Append([frag()]))
    merged = carrying(mine, [a, b])
    assert (merged.uuid, merged.read_version) == (mine.uuid, 3)
    assert isinstance(merged.operation, Append)
    assert len(merged.operation.fragments) == 4
    assert merged.properties_dict["k"] == "v"
    pb = transaction_to_proto(merged)
    assert carried_uuids(pb) == {mine.uuid, a.uuid, b.uuid}
    assert carrying(mine, []) is mine


# ---- what a helper carries ------------------------------------------------------------------


def append_pb(version: int) -> transaction_pb2.Transaction:
    return transaction_to_proto(Transaction(version - 1, Append([frag()])))


#: the transaction of version 5, the read version of the offers below
BASE = append_pb(5)


def choose(
    offers: Sequence[Offer],
    latest: int,
    transactions: dict[int, transaction_pb2.Transaction | None],
    own: frozenset[str] = frozenset(),
    validate: object = None,
) -> tuple[list[Transaction], list[str]]:
    """select_offers with version 5 known (``BASE``) unless ``transactions`` says otherwise."""

    def ok(txn: Transaction) -> None:
        if callable(validate):
            validate(txn)

    known = {5: BASE, **transactions}
    return select_offers(offers, own=own, latest=latest, transactions=known, validate=ok)


def offer(read_version: int, valid_through: int, base_uuid: str | None = None) -> Offer:
    """An offer checked up to ``read_version``, whose transaction is ``BASE`` by default."""
    props = {OFFER_BASE_KEY: base_uuid if base_uuid is not None else BASE.uuid}
    txn = Transaction(read_version, Append([frag()]), properties=props)
    return Offer(offer_name(valid_through, txn.uuid), valid_through, txn)


def test_a_live_offer_checked_against_every_version_since_its_read_version_is_carried() -> None:
    o = offer(5, 9)
    chosen, dead = choose([o], 7, {6: append_pb(6), 7: append_pb(7)})
    assert chosen == [o.transaction]
    assert dead == []


def test_an_offer_is_carried_only_into_versions_within_its_window() -> None:
    o = offer(5, 7)
    assert choose([o], 6, {6: append_pb(6)})[0] == [o.transaction]  # into 7: the last one
    chosen, dead = choose([o], 7, {6: append_pb(6), 7: append_pb(7)})  # into 8: expired
    assert chosen == []
    assert dead == [o.name]


def test_an_offer_is_left_out_when_a_version_since_its_read_version_was_not_read() -> None:
    o = offer(5, 12)
    assert choose([o], 7, {7: append_pb(7)}) == ([], [])  # 6 not read
    assert choose([o], 7, {6: None, 7: append_pb(7)}) == ([], [])  # 6 unreadable
    assert choose([o], 7, {5: None, 6: append_pb(6), 7: append_pb(7)}) == ([], [])  # 5


def test_an_offer_of_another_history_is_left_out() -> None:
    """Its read version's transaction is not the one it names: another incarnation of a
    table at the same URI (or junk); it is never carried."""
    o = offer(5, 12, base_uuid=str(uuid.uuid4()))
    assert choose([o], 6, {6: append_pb(6)}) == ([], [])
    assert choose([offer(5, 12)], 6, {6: append_pb(6)})[0] != []


def test_an_offer_already_landed_is_never_carried_again() -> None:
    o = offer(5, 12)
    carrier = transaction_to_proto(carrying(Transaction(5, Append([frag()])), [o.transaction]))
    chosen, dead = choose([o], 7, {6: carrier, 7: append_pb(7)})
    assert chosen == []
    assert dead == [o.name]
    mine = transaction_to_proto(o.transaction)  # landed by its own writer
    chosen, dead = choose([o], 6, {6: mine})
    assert chosen == []
    assert dead == [o.name]


def test_an_offer_that_conflicts_with_a_version_since_is_left_out() -> None:
    o = offer(5, 12)
    overwrite = transaction_to_proto(Transaction(5, Overwrite([frag()], SCHEMA)))
    assert choose([o], 6, {6: overwrite}) == ([], [])


def test_own_uuids_invalid_offers_and_the_cap_are_respected() -> None:
    o = offer(5, 12)
    assert choose([o], 5, {}, own=frozenset({o.transaction.uuid})) == ([], [])

    def refuse(txn: Transaction) -> None:
        raise ValueError("schema mismatch")

    assert choose([o], 5, {}, validate=refuse) == ([], [])
    many = [offer(5, 6 + i) for i in range(MAX_OFFERS_PER_VERSION + 5)]
    chosen, _ = choose(many, 5, {})
    assert len(chosen) == MAX_OFFERS_PER_VERSION
    # the oldest windows first: the writers that have waited longest
    assert chosen == [o.transaction for o in many[:MAX_OFFERS_PER_VERSION]]


# ---- the scan of the offers directory -------------------------------------------------------


def taken(scan: OfferScan) -> list[Offer]:
    """The offers a scan read, once it has finished (at most 5 s)."""
    deadline = time.monotonic() + 5
    found = scan.take()
    while found is None and time.monotonic() < deadline:
        time.sleep(0.01)
        found = scan.take()
    assert found is not None
    return found


def test_the_scan_reads_live_offers_and_skips_junk_expired_and_known_ones() -> None:
    store = ObjectStore()
    good = Transaction(3, Append([frag()]))
    post(store, good, 10)
    expired = Transaction(3, Append([frag()]))
    post(store, expired, 4)
    known = Transaction(3, Append([frag()]))
    known_name = post(store, known, 10)
    wrong = Transaction(3, Append([frag()]))  # named after another uuid
    store.put(
        f"{OFFERS_DIR}/{offer_name(10, str(uuid.uuid4()))}",
        transaction_to_proto(wrong).SerializeToString(),
    )
    store.put(f"{OFFERS_DIR}/{offer_name(10, str(uuid.uuid4()))}", b"\xff not a transaction")
    store.put(f"{OFFERS_DIR}/notes.txt", b"hello")
    delete = Transaction(3, Delete([], [], "id > 0"))
    post(store, delete, 10)  # not an Append: never carried
    found = taken(OfferScan(store, after=5, known=[known_name]))
    assert [o.transaction.uuid for o in found] == [good.uuid]


def test_the_scan_reads_the_transactions_an_offer_was_checked_against() -> None:
    """A helper that began after an offer's writer has not read the offer's read version
    nor the versions after it: the scan reads their transactions beside the offers (only
    those the helper does not have, only as far back as a live window reaches)."""
    store = ObjectStore()
    table(store, appends=4)  # versions 1..5
    offered = Transaction(2, Append([frag()]))
    post(store, offered, 2 + OFFER_WINDOW)
    scan = OfferScan(store, after=5, known=[], scheme=NamingScheme.V2, have=[5])
    assert [o.transaction.uuid for o in taken(scan)] == [offered.uuid]
    got = scan.transactions()
    assert sorted(got) == [2, 3, 4]
    assert all(got[v].uuid == read_transaction(store, v).uuid for v in got)
    # without the naming scheme (or with no offer) nothing but the offers is read
    plain = OfferScan(store, after=5, known=[])
    taken(plain)
    assert plain.transactions() == {}
    empty = ObjectStore()
    table(empty, appends=4)
    none = OfferScan(empty, after=5, known=[], scheme=NamingScheme.V2)
    assert taken(none) == []
    assert none.transactions() == {}


# ---- the commit loop ------------------------------------------------------------------------


class Scripted(ObjectStore):
    """Runs ``hooks[k]`` right before the k-th manifest create of the thread named "A"
    (after its guard listing was served), so that another writer wins that race."""

    def __init__(self) -> None:
        super().__init__()
        self.hooks: list[object] = []
        self.creates = 0
        self.inside = False
        self.fail_listing = False

    def put_if_absent(self, path: str, data: bytes) -> None:
        if (
            path.startswith("_versions/")
            and threading.current_thread().name == "A"
            and not self.inside
        ):
            k, self.creates = self.creates, self.creates + 1
            if k < len(self.hooks) and callable(hook := self.hooks[k]):
                self.inside = True  # the hook's own commits are not A's creates
                try:
                    hook()
                finally:
                    self.inside = False
        super().put_if_absent(path, data)

    def list(self, prefix: str) -> Sequence[str]:
        if self.fail_listing and prefix == "_versions":
            raise StorageError("listing refused (test)")
        return super().list(prefix)

    def compete(self, **props: str) -> None:
        txn = Transaction(latest_version(self).version, Append([frag()]), properties=props)
        commit(self, txn, retry_policy=RetryPolicy(offer_after=None))

    def wait_for_offer(self) -> None:
        deadline = time.monotonic() + 5
        while not super().list(OFFERS_DIR) and time.monotonic() < deadline:
            time.sleep(0.005)

    def compete_after_the_scan(self) -> None:
        """Let A's listing of the offers (started when it lost its last race) finish, then
        win this race too."""
        time.sleep(0.05)
        self.compete()

    def carrier_of(self, uuid: str) -> Callable[[], None]:
        """A hook: once A's offer is written, the next version carries ``uuid`` (what a
        helper writes)."""

        def carrier() -> None:
            self.wait_for_offer()
            self.compete(**{GROUP_MEMBERS_KEY: uuid})

        return carrier


def run_a(
    store: Scripted,
    txn: Transaction,
    policy: RetryPolicy | None = None,
    *,
    use_base: bool = True,
    base: Dataset | None = None,
) -> object:
    """Commit ``txn`` (from ``base``, else from a Dataset base at the latest version unless
    ``use_base`` is False) in a thread named "A"; the result or the error."""
    if base is None and use_base:
        base = Dataset.open(store)
    out: list[object] = []

    def go() -> None:
        try:
            out.append(commit(store, txn, base=base, retry_policy=policy))
        except Exception as exc:
            out.append(exc)

    th = threading.Thread(target=go, name="A")
    th.start()
    th.join()
    return out[0]


def offer_withdrawn(store: ObjectStore) -> bool:
    deadline = time.monotonic() + 5
    while store.list(OFFERS_DIR) and time.monotonic() < deadline:
        time.sleep(0.005)
    return not store.list(OFFERS_DIR)


class ReadsRecorded(Scripted):
    """Scripted, and records the manifest creates of A that found the name taken, and
    every read of a version's manifest with the thread that made it."""

    def __init__(self) -> None:
        super().__init__()
        self.lost: set[str] = set()
        self.reads: list[tuple[str, str]] = []  # (thread, path)

    def put_if_absent(self, path: str, data: bytes) -> None:
        try:
            super().put_if_absent(path, data)
        except ObjectExistsError:
            if threading.current_thread().name == "A" and path.startswith("_versions/"):
                self.lost.add(path)
            raise

    def get_range(self, path: str, start: int, end: int) -> bytes:
        if path.startswith("_versions/"):
            self.reads.append((threading.current_thread().name, path))
        return super().get_range(path, start, end)


def test_a_retrying_append_carries_a_live_offer_and_the_offer_is_found_once() -> None:
    """A loses two races; the listing of the offers that its first lost race started finds
    the live offer and A's retry carries it, once. That listing reads the transactions the
    offer was checked against that A has not read, but not the winner's manifest A has just
    read back to settle its lost create (a round trip less before a carrier hosted then
    can carry the offer)."""
    store = ReadsRecorded()
    table(store)
    offered = Transaction(1, Append([frag()]))
    post(store, offered, 1 + OFFER_WINDOW)

    store.hooks = [store.compete, store.compete_after_the_scan]
    mine = Transaction(1, Append([frag()]))
    r = run_a(store, mine)
    assert isinstance(r, CommitResult)
    assert r.attempts == 3
    assert landed_uuids(store)[r.version] == {mine.uuid, offered.uuid}
    winner = f"_versions/{manifest_name(2, NamingScheme.V2)}"  # A's first lost race
    assert winner in store.lost
    assert [t for t, p in store.reads if p == winner and t.startswith("txn-engine-offer")] == []
    assert r.transaction == mine  # the caller's own transaction, not the carrier
    assert not r.already_committed
    assert not r.carried
    # the offer's writer, committing it (again), finds it there and lands nothing
    again = commit(store, offered)
    assert (again.version, again.already_committed) == (r.version, True)
    assert sum(offered.uuid in u for u in landed_uuids(store).values()) == 1


def test_no_offer_is_carried_before_the_writer_has_lost_a_race() -> None:
    """A first attempt does not read offers: an uncontended commit stays one round trip
    (a stale base that loses its first create lists them once, beside the retry:
    ``tests/unit/test_guarded_create.py``)."""
    store = Scripted()
    table(store)
    offered = Transaction(1, Append([frag()]))
    post(store, offered, 1 + OFFER_WINDOW)
    r = run_a(store, Transaction(1, Append([frag()])))
    assert isinstance(r, CommitResult)
    assert r.attempts == 1
    assert offered.uuid not in landed_uuids(store)[r.version]


def test_a_helper_that_began_after_the_offer_carries_it() -> None:
    """The offer was checked up to version 1; two versions landed since; A opens the table at
    version 3 (it never read versions 1-3 before), loses two races, and carries the offer:
    its listing of the offers read the transactions of the versions the offer needs."""
    store = Scripted()
    table(store)
    offered = Transaction(1, Append([frag()]))
    post(store, offered, 1 + OFFER_WINDOW)
    store.compete()
    store.compete()  # versions 2 and 3: neither carries the offer

    store.hooks = [store.compete, store.compete_after_the_scan]
    mine = Transaction(3, Append([frag()]))
    r = run_a(store, mine)
    assert isinstance(r, CommitResult)
    assert r.attempts == 3
    assert landed_uuids(store)[r.version] == {mine.uuid, offered.uuid}
    assert sum(offered.uuid in u for u in landed_uuids(store).values()) == 1


def test_a_stale_first_attempt_lets_the_next_commit_carry_from_its_first_attempt() -> None:
    """A1's base is one version behind (no race, so A1 makes no offer) but another writer is
    active: A1 lists the offers once, and A2, the next commit of this process, carries a live
    offer in its first attempt (if A1's retry did not already carry it): exactly once."""
    store = ObjectStore()
    table(store)
    base = Dataset.open(store)
    append(store)  # version 2: A1's base (version 1) is stale
    offered = Transaction(2, Append([frag()]))
    post(store, offered, 2 + OFFER_WINDOW)
    rec = RecordingStorage(store)
    r1 = commit(rec, Transaction(1, Append([frag()])), base=base)
    assert r1.attempts == 2
    assert rec.counts.get("put", 0) == 0  # a stale base alone is not offered
    time.sleep(0.1)  # A1's listing of the offers finishes (it runs in a thread)
    a2 = Transaction(r1.version, Append([frag()]))
    r2 = commit(store, a2, base=Dataset.open(store))
    assert r2.attempts == 1
    landed = landed_uuids(store)
    assert [v for v, u in landed.items() if offered.uuid in u] in ([r1.version], [r2.version])


@pytest.mark.parametrize("with_offer", [False, True])
def test_a_retry_holding_offers_skips_its_rank_wait(with_offer: bool) -> None:
    """The rank wait orders the writers retrying on the same winner; one that holds other
    writers' offers goes first (its create lands them too). A loses three races; its offer
    listing finishes by the second at the latest: from then on its retries do not wait."""
    store = Scripted()
    table(store)
    if with_offer:
        post(store, Transaction(1, Append([frag()])), 1 + OFFER_WINDOW)

    store.hooks = [store.compete, store.compete_after_the_scan, store.compete]
    slept: list[float] = []
    r = run_a(store, Transaction(1, Append([frag()])), RetryPolicy(sleep=slept.append))
    assert isinstance(r, CommitResult)
    assert r.attempts == 4
    if with_offer:  # at most the first retry waits (the listing may already be done then)
        assert len(slept) <= 1
    else:
        assert len(slept) == 3


def test_the_offering_writer_is_told_its_carrier_version() -> None:
    """A loses a race and offers itself; the next version is a carrier of A (what a helper
    writes): A returns that version with ``carried``; exactly one version carries A; the
    offer is withdrawn."""
    store = Scripted()
    table(store)
    a = Transaction(1, Append([frag()]))

    store.hooks = [store.compete, store.carrier_of(a.uuid)]
    r = run_a(store, a)
    assert isinstance(r, CommitResult)
    assert r.carried
    assert not r.already_committed
    assert r.transaction == a
    landed = landed_uuids(store)
    assert [v for v, u in landed.items() if a.uuid in u] == [r.version] == [3]
    assert offer_withdrawn(store)


def test_a_carried_transaction_keeps_no_transaction_file_of_its_own() -> None:
    """With ``transaction_file=True`` each attempt writes a ``.txn`` copy beside its create;
    carried, none of them landed (the carrier's version names the carrier's copy): all of
    A's copies are withdrawn. Found by tests/property/test_guarded_create.py."""
    store = Scripted()
    table(store)
    a = Transaction(1, Append([frag()]))

    store.hooks = [store.compete, store.carrier_of(a.uuid)]
    base = Dataset.open(store)
    out: list[CommitResult] = []
    th = threading.Thread(
        target=lambda: out.append(commit(store, a, base=base, transaction_file=True)), name="A"
    )
    th.start()
    th.join()
    assert out[0].carried
    deadline = time.monotonic() + 5
    while any(a.uuid in n for n in store.list("_transactions")) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert not any(a.uuid in n for n in store.list("_transactions"))


def test_a_writer_with_a_live_offer_does_not_give_up_until_its_window_is_seen() -> None:
    """max_attempts=1: without an offer the first lost race ends the commit; with one the
    commit goes on (a helper could still land it) and lands itself."""
    store = Scripted()
    table(store)
    store.hooks = [store.compete, store.compete]
    r = run_a(store, Transaction(1, Append([frag()])), RetryPolicy(max_attempts=1))
    assert isinstance(r, CommitResult)
    assert r.attempts == 3
    store = Scripted()
    table(store)
    store.hooks = [store.compete]
    alone = RetryPolicy(max_attempts=1, offer_after=None)
    r = run_a(store, Transaction(1, Append([frag()])), alone)
    assert type(r).__name__ == "RetriesExhaustedError"


def test_the_extension_ends_once_the_window_has_passed() -> None:
    """Losing every race: the commit gives up (RetriesExhaustedError) only after it has
    seen the last version its offer could land in, and no version carries it."""
    store = Scripted()
    table(store)
    store.hooks = [store.compete] * (OFFER_WINDOW + 5)
    a = Transaction(1, Append([frag()]))
    r = run_a(store, a, RetryPolicy(max_attempts=1))
    assert type(r).__name__ == "RetriesExhaustedError"
    assert latest_version(store).version >= 1 + OFFER_WINDOW
    assert store.creates <= OFFER_WINDOW + 1
    assert not any(a.uuid in u for u in landed_uuids(store).values())


def test_a_writer_whose_last_lost_race_is_to_its_carrier_is_told_carried() -> None:
    """The race for the last version of the window is lost to a version that carries the
    offer: losing the create says that version exists, not what it holds, so the writer
    reads it before it gives up, and is told the version that carries it (found by a
    generated run of the concurrent property, where the writer was told
    RetriesExhaustedError while its transaction had landed)."""
    store = Scripted()
    table(store)
    a = Transaction(1, Append([frag()]))
    store.hooks = [store.compete] * (OFFER_WINDOW - 1) + [store.carrier_of(a.uuid)]
    r = run_a(store, a, RetryPolicy(max_attempts=1))
    assert isinstance(r, CommitResult), r
    assert r.carried
    assert r.version == 1 + OFFER_WINDOW
    assert landed_uuids(store)[r.version] >= {a.uuid}


def test_a_storage_error_while_the_offer_is_live_is_an_unknown_outcome() -> None:
    """After the offer, the listing fails: the offer may still land through a helper, so
    the error is CommitStateUnknownError (commit again to settle), not a plain failure."""

    def scenario(policy: RetryPolicy) -> object:
        store = Scripted()
        table(store)

        def lose_then_break_listing() -> None:
            store.compete()
            store.fail_listing = True

        store.hooks = [lose_then_break_listing]
        slow = RetryPolicy(chases=0, sleep=lambda s: time.sleep(0.05))
        return run_a(store, Transaction(1, Append([frag()])), policy if policy else slow)

    err = scenario(RetryPolicy(chases=0, sleep=lambda s: time.sleep(0.05)))
    assert isinstance(err, CommitStateUnknownError), err
    assert "offered" in str(err)
    plain = scenario(RetryPolicy(chases=0, offer_after=None, sleep=lambda s: None))
    assert isinstance(plain, StorageError)
    assert not isinstance(plain, CommitStateUnknownError)


def test_a_conflict_while_the_offer_is_live_is_raised_as_it_is() -> None:
    """A conflict found by the rules is final: helpers check the offer against the same
    versions with the same rules, so it cannot land after it."""
    store = Scripted()
    table(store)

    def overwrite() -> None:
        store.wait_for_offer()
        v = latest_version(store).version
        commit(store, Transaction(v, Overwrite([frag()], SCHEMA)))

    store.hooks = [store.compete, overwrite]
    a = Transaction(1, Append([frag()]))
    err = run_a(store, a)
    assert isinstance(err, (RetryableConflictError, IncompatibleTransactionError)), err
    assert not isinstance(err, CommitStateUnknownError)
    assert not any(a.uuid in u for u in landed_uuids(store).values())
    # a helper would leave it out for the same reason
    pbs = {}
    for entry in list_versions(store):
        pb, _ = read_transaction_and_manifest(store, entry, None)
        pbs[entry.version] = pb
    latest = latest_version(store).version
    o = Offer(offer_name(1 + OFFER_WINDOW, a.uuid), 1 + OFFER_WINDOW, a.with_read_version(2))
    assert choose([o], latest, {v: pbs[v] for v in range(3, latest + 1)})[0] == []


def test_carriers_are_read_by_the_normal_uuid_search() -> None:
    offered = Transaction(1, Append([frag()]), uuid="x")
    pb = transaction_to_proto(carrying(Transaction(2, Append([frag()])), [offered]))
    assert carries_uuid(pb, "x")


# ---- what a contended commit leaves for the next one --------------------------------------


def test_the_next_commit_after_a_contended_one_carries_from_its_first_attempt() -> None:
    """A1 lost two races (it read the offers meanwhile); A2, the next commit of this
    process on the table, carries a live offer in its first attempt, with no listing of
    offers before it: what A1 knew (offers, the transactions of the versions it read or
    landed) is recalled."""
    store = Scripted()
    table(store)
    a1 = Transaction(1, Append([frag()]))
    # offered on top of the version A1 will land (4): A1 cannot carry it, A2 can
    y = Transaction(4, Append([frag()]), properties={OFFER_BASE_KEY: a1.uuid})
    store.put(f"{OFFERS_DIR}/{offer_name(12, y.uuid)}", transaction_to_proto(y).SerializeToString())

    store.hooks = [store.compete, store.compete_after_the_scan]
    r1 = run_a(store, a1)
    assert isinstance(r1, CommitResult)
    assert r1.version == 4
    assert y.uuid not in landed_uuids(store)[4]
    base = Dataset.open(store)
    rec = RecordingStorage(store)
    a2 = Transaction(4, Append([frag()]))
    r2 = commit(rec, a2, base=base)
    assert r2.attempts == 1
    assert landed_uuids(store)[r2.version] == {a2.uuid, y.uuid}
    assert rec.counts["put_if_absent"] == 1


def test_recalled_knowledge_that_a_fresh_read_contradicts_is_dropped(
    monkeypatch: Any,
) -> None:
    """What is recalled is used only once a fresh read confirms it is this table's history
    (same transaction at some version): a table re-created at the same URI differs, and an
    offer that only the recalled (stale) transactions would let through is not carried."""
    commit_module = importlib.import_module("txn_engine.contention.offering")

    store = ObjectStore()
    table(store, appends=2)  # versions 1..3
    stale = {2: append_pb(2), 3: append_pb(3)}  # not this table's versions 2 and 3
    y = Transaction(2, Append([frag()]), properties={OFFER_BASE_KEY: stale[2].uuid})
    o = Offer(offer_name(12, y.uuid), 12, y)
    recent = Recent(dict(stale), {o.name: o}, set(), time.monotonic() + 10)
    monkeypatch.setattr(commit_module, "recall", lambda uri: recent)
    a = Transaction(3, Append([frag()]))
    r = commit(store, a, base=Dataset.open(store))
    assert landed_uuids(store)[r.version] == {a.uuid}
    # an offer on a recalled history that the fresh read of the base (version 4) confirms
    confirmed = {v: read_transaction(store, v) for v in (2, 3, 4)}
    z = Transaction(2, Append([frag()]), properties={OFFER_BASE_KEY: confirmed[2].uuid})
    oz = Offer(offer_name(12, z.uuid), 12, z)
    recent = Recent(confirmed, {oz.name: oz}, set(), time.monotonic() + 10)
    monkeypatch.setattr(commit_module, "recall", lambda uri: recent)
    b = Transaction(r.version, Append([frag()]))
    r2 = commit(store, b, base=Dataset.open(store))
    assert landed_uuids(store)[r2.version] == {b.uuid, z.uuid}


def test_an_unknown_outcome_keeps_the_offer_and_the_call_made_again_honours_its_window() -> None:
    """The first call ends with CommitStateUnknownError while its offer is open: the offer
    stays in the directory. The same transaction committed again (as the error says), with
    a budget of one attempt and a competitor winning every race, does not report
    RetriesExhaustedError before the latest version has passed that offer's window (a
    helper holding it could still land it until then)."""
    store = Scripted()
    table(store)
    a = Transaction(1, Append([frag()]))

    def lose_then_break_listing() -> None:
        store.compete()
        store.fail_listing = True

    store.hooks = [lose_then_break_listing]
    slow = RetryPolicy(chases=0, sleep=lambda s: time.sleep(0.05))
    err = run_a(store, a, slow)
    assert isinstance(err, CommitStateUnknownError)
    time.sleep(0.1)  # a withdrawal would have happened by now
    (name,) = store.list(OFFERS_DIR)
    window, uuid_ = parse_offer_name(name) or (0, "")
    assert uuid_ == a.uuid
    assert window == 1 + OFFER_WINDOW
    store.fail_listing = False
    store.creates = 0
    store.hooks = [store.compete] * (OFFER_WINDOW + 5)
    again = run_a(store, a, RetryPolicy(max_attempts=1, offer_after=None), use_base=False)
    assert type(again).__name__ == "RetriesExhaustedError"
    assert latest_version(store).version >= window
    assert store.creates > 1  # it went on past its one attempt
    assert not any(a.uuid in u for u in landed_uuids(store).values())


def test_a_spark_write_carried_by_another_version_is_settled_as_landed() -> None:
    """The Spark data source settles an unknown outcome by searching the history for its
    transaction: one carried inside another writer's version is found there (and the
    carrier's transaction, which names the write's files, is what it keeps files by)."""
    from txn_engine.spark import _staging

    store = ObjectStore()
    table(store)
    offered = Transaction(1, Append([frag()]))
    commit(store, carrying(Transaction(1, Append([frag()])), [offered]))
    out = _staging.settle(store, offered.uuid, read_version=1)
    assert out.known
    assert out.landed is not None
    assert out.landed.version == 2
    kept = _staging.transaction_data_files(out.landed.transaction)
    assert isinstance(offered.operation, Append)
    assert offered.operation.fragments[0].files[0].path in {p.rsplit("/", 1)[-1] for p in kept}
    assert _staging.settle(store, str(uuid.uuid4()), read_version=1).landed is None


# ---- early offers: a commit right after a contended one offers itself at once ----------------


def contended_then(store: Scripted, second: Callable[[], None] | None) -> CommitResult:
    """A1 loses two races (a contended commit: the next commit of this process recalls it);
    ``second`` runs right before the first create of A's next commit."""
    store.hooks = [store.compete, store.compete_after_the_scan, None, second]
    r1 = run_a(store, Transaction(1, Append([frag()])))
    assert isinstance(r1, CommitResult)
    assert r1.attempts == 3
    return r1


def test_a_commit_right_after_a_contended_one_offers_itself_before_its_first_attempt() -> None:
    """A2 follows a contended A1 within a second: its offer is posted beside its first
    attempt (not after a lost race), checked up to its read version, and a carrier that
    lands first is A2's answer after that one attempt."""
    store = Scripted()
    table(store)
    seen: list[list[str]] = []
    box: list[Transaction] = []

    def carrier() -> None:
        store.wait_for_offer()
        seen.append(list(store.list(OFFERS_DIR)))
        store.compete(**{GROUP_MEMBERS_KEY: box[0].uuid})

    r1 = contended_then(store, carrier)
    a2 = Transaction(r1.version, Append([frag()]))
    box.append(a2)
    r2 = run_a(store, a2)
    assert isinstance(r2, CommitResult)
    assert seen == [[offer_name(r1.version + OFFER_WINDOW, a2.uuid)]]
    assert (r2.carried, r2.attempts, r2.version) == (True, 1, r1.version + 1)
    assert sum(a2.uuid in u for u in landed_uuids(store).values()) == 1
    assert offer_withdrawn(store)


@pytest.mark.parametrize("case", ["policy-off", "stale-read-version", "no-recent-contention"])
def test_no_early_offer_when_off_stale_or_without_recent_contention(case: str) -> None:
    """No offer before the first attempt with ``RetryPolicy(offer_early=False)``, for a
    read version older than the versions the contended commit saw (the window would be
    spent already), or when no recent commit of this process saw contention."""
    store = Scripted()
    table(store)
    listed: list[list[str]] = []

    def look() -> None:
        time.sleep(0.05)  # an offer posted beside the attempt would be written by now
        listed.append(list(store.list(OFFERS_DIR)))

    if case == "no-recent-contention":
        store.hooks = [look]
        r = run_a(store, Transaction(1, Append([frag()])))
    else:
        r1 = contended_then(store, look)
        read = r1.version if case == "policy-off" else r1.version - 1
        r = run_a(
            store,
            Transaction(read, Append([frag()])),
            RetryPolicy(offer_early=case != "policy-off"),
            base=Dataset.open(store, version=read),
        )
    assert isinstance(r, CommitResult)
    assert listed == [[]]


def test_an_early_offer_whose_own_attempt_lands_is_withdrawn_and_never_carried() -> None:
    """A2 offers itself early and then wins its own first create: the offer is withdrawn,
    and a helper that read it before the withdrawal finds A2's version and drops it."""
    store = Scripted()
    table(store)
    held: list[Offer] = []

    def grab() -> None:
        store.wait_for_offer()
        scan = OfferScan(store, after=0, known=())
        held.extend(taken(scan))

    r1 = contended_then(store, grab)
    a2 = Transaction(r1.version, Append([frag()]))
    r2 = run_a(store, a2)
    assert isinstance(r2, CommitResult)
    assert (r2.carried, r2.attempts, r2.version) == (False, 1, r1.version + 1)
    assert [o.transaction.uuid for o in held] == [a2.uuid]
    assert offer_withdrawn(store)
    transactions = {v: read_transaction(store, v) for v in range(1, r2.version + 1)}
    assert choose(held, r2.version, transactions) == ([], [held[0].name])


def test_a_stale_plan_committed_again_reads_only_the_versions_it_has_not_seen() -> None:
    """A writer that commits again and again from one old read version (a stale plan)
    checks every version since it each time. What its last contended commit read is
    remembered, far enough back to cover a history 100 versions long: the next commit
    reads the versions it has not seen and the newest one again (which confirms the rest),
    not the 100 before. With 64 versions remembered it read 36 of them again."""
    store = Scripted()
    table(store, appends=100)  # versions 1..101
    stale = Transaction(1, Append([frag()]))
    store.hooks = [store.compete]  # the first commit loses one race: it saw contention
    first = run_a(store, stale, use_base=False)
    assert isinstance(first, CommitResult)
    assert first.version == 103
    store.compete()  # one more version (104) the next commit has not seen
    rec = RecordingStorage(store)
    again = commit(rec, Transaction(1, Append([frag()])))
    assert again.version == 105
    manifest_reads = {p for m, p in rec.calls if m in ("get", "get_range") and "_versions/" in p}
    assert len(manifest_reads) <= 3, sorted(manifest_reads)


def test_what_is_remembered_is_bounded_by_versions_and_by_bytes(monkeypatch: Any) -> None:
    """The memory a contended commit leaves keeps the newest versions' transactions only,
    within RECENT_VERSIONS and RECENT_BYTES; an unreadable version (None) costs nothing."""
    offers_module = importlib.import_module("txn_engine.contention.offers")
    uri = f"memory://bounded-{uuid.uuid4().hex}"
    small = {v: append_pb(v) for v in range(1, 2001)}
    offers_module.remember(uri, small, {}, ())
    kept = offers_module.recall(uri)
    assert kept is not None
    assert sorted(kept.transactions) == list(range(2001 - offers_module.RECENT_VERSIONS, 2001))
    size = small[1].ByteSize()
    monkeypatch.setattr(offers_module, "RECENT_BYTES", 10 * size + size // 2)
    mixed: dict[int, transaction_pb2.Transaction | None] = {**small}
    mixed[2000] = None
    offers_module.remember(uri, mixed, {}, ())
    kept = offers_module.recall(uri)
    assert kept is not None
    assert sorted(kept.transactions) == list(range(1990, 2001))
    assert kept.transactions[2000] is None
