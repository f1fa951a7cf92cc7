"""The carrier (txn_engine.contention.carrier): it lands the offers of writers told to wait
for it, never
creates a version with nothing to carry, and a writer told of a carrier that is not there
races after its patience."""

from __future__ import annotations

import gc
import importlib
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from txn_engine import Carrier
from txn_engine.codec import transaction_to_proto
from txn_engine.commit import CommitResult, commit
from txn_engine.conflicts.rebase import ConflictOptions
from txn_engine.contention import carrier as carrier_module
from txn_engine.contention.carrier import BEACON_SECONDS, hosted
from txn_engine.contention.offering import MIN_PATIENCE, Offering
from txn_engine.contention.offers import (
    CARRIER_KEY,
    HOSTS_DIR,
    OFFER_WINDOW,
    OFFERS_DIR,
    Offer,
    Posting,
    carried_uuids,
    carrier_lately,
    carrying,
    claim_name,
    may_offer,
    note_ours,
    parse_offer_name,
    peek,
    private_memory,
    recall,
    remember,
)
from txn_engine.dataset import Dataset
from txn_engine.errors import StorageError
from txn_engine.format.io import read_transaction_and_manifest
from txn_engine.format.manifest_file import decode_manifest_file, encode_manifest_file
from txn_engine.format.naming import (
    BEACON_PREFIX,
    U64_MAX,
    VERSIONS_DIR,
    NamingScheme,
    beacon_expiry,
    beacon_name,
    carrier_beacon,
    forget_beacon,
    list_versions,
    live_beacons,
    manifest_name,
    scan_versions,
)
from txn_engine.loop.core import Core
from txn_engine.model import DataFile, Fragment, LanceField
from txn_engine.ops import Append, Overwrite
from txn_engine.retry import RetryBudget, RetryPolicy
from txn_engine.session import current
from txn_engine.storage import MemoryStorage, RecordingStorage
from txn_engine.storage.handler import commit_handler_for
from txn_engine.transaction import Transaction

SCHEMA = (LanceField(0, -1, "id", "int64"),)
TOLD = RetryPolicy(wait_for_carrier=True)
offering_module = importlib.import_module("txn_engine.contention.offering")
attempt_module = importlib.import_module("txn_engine.loop.attempt")
create_module = importlib.import_module("txn_engine.loop.create")
created_module = importlib.import_module("txn_engine.contention.created")


def a_state(store: MemoryStorage, txn: Transaction, **kw: Any) -> Offering:
    """A commit's contention state for ``txn`` on ``store``, checked up to version 1: each
    of ``kw`` set on the core or on the contention state, whichever has it."""
    core = Core(
        handler=commit_handler_for(store),
        original=txn,
        txn=txn,
        options=ConflictOptions(),
        checked_up_to=1,
        guarded=True,
    )
    state = Offering(core, RetryPolicy(), carrier_module._SESSION_HOSTS)
    for name, value in kw.items():
        target = core if hasattr(core, name) else state
        assert hasattr(target, name), name
        setattr(target, name, value)
    return state


def frag(tag: str) -> Fragment:
    return Fragment(0, (DataFile(f"{tag}.lance", (0,), (0,), 2, 2, 100),), 10)


class ObjectStore(MemoryStorage):
    """In memory, but served concurrently as an object store is (guarded creates, offers),
    each request taking a moment."""

    read_concurrency = 8

    def put_if_absent(self, path: str, data: bytes) -> None:
        time.sleep(0.002)
        super().put_if_absent(path, data)

    def list(self, prefix: str) -> list[str]:
        time.sleep(0.002)
        return list(super().list(prefix))


def table() -> ObjectStore:
    store = ObjectStore()
    commit(store, Transaction(0, Overwrite([frag("seed")], SCHEMA)))
    return store


def append(store: ObjectStore, policy: RetryPolicy = TOLD) -> tuple[str, CommitResult]:
    base = Dataset.open(store)
    u = str(uuid.uuid4())
    return u, commit(
        store, Transaction(base.version, Append([frag(u)]), uuid=u), base=base, retry_policy=policy
    )


def test_a_carrier_lands_the_commits_of_writers_told_to_wait_for_it() -> None:
    store = table()
    results: list[tuple[str, CommitResult]] = []
    lock = threading.Lock()
    start = threading.Barrier(4)

    def writer() -> None:
        start.wait()
        for _ in range(3):
            got = append(store)
            with lock:
                results.append(got)

    with Carrier(store) as carrier:
        threads = [threading.Thread(target=writer) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert carrier.error is None
    assert len(results) == 12
    landed: dict[str, list[int]] = {}
    carrier_versions = []
    for entry in list_versions(store):
        pb, _ = read_transaction_and_manifest(store, entry, None)
        if CARRIER_KEY in pb.transaction_properties:
            carrier_versions.append(entry.version)
            assert carried_uuids(pb) - {pb.uuid}, "a carrier version with nothing carried"
        for u in carried_uuids(pb):
            landed.setdefault(u, []).append(entry.version)
    assert carrier_versions == carrier.versions != []
    for u, result in results:
        assert landed[u] == [result.version]  # exactly once, where the caller was told
        if result.version in carrier_versions:
            assert result.carried
    # writers waited instead of racing (a writer whose patience ran out would have raced)
    assert any(result.attempts == 0 for _, result in results)
    latest = Dataset.open(store).manifest
    files = sorted(f.files[0].path for f in latest.fragments)
    assert files == sorted(["seed.lance", *(f"{u}.lance" for u, _ in results)])


def test_a_carrier_creates_no_version_without_offers() -> None:
    store = table()
    before = Dataset.open(store).version
    with Carrier(store) as carrier:
        time.sleep(0.3)
        assert "running" in repr(carrier)
    assert carrier.error is None
    assert carrier.versions == []
    assert Dataset.open(store).version == before
    assert "stopped" in repr(carrier)


def test_a_writer_told_of_a_carrier_that_is_not_there_races_after_its_patience() -> None:
    store = table()
    started = time.monotonic()
    u, result = append(store)
    assert time.monotonic() - started >= MIN_PATIENCE
    assert not result.carried
    assert result.attempts >= 1
    (pb, _) = read_transaction_and_manifest(store, list_versions(store)[-1], None)
    assert pb.uuid == u


def test_a_waiter_gives_a_starting_carrier_eight_of_its_attempts() -> None:
    """A writer whose offer is written waits for the carrier it saw for ``PATIENCE_ATTEMPTS``
    (8) of its shortest attempts: a carrier that a lost race has just started needs up to
    about 7 round trips for its first version. With 4, the waiters of a starting carrier
    on a 100 ms store raced it after 4 round trips and took the version it was creating."""
    store = table()
    now = [1000.0]
    policy = RetryPolicy(clock=lambda: now[0])
    txn = Transaction(1, Append([frag("waiter")]))
    base_uuid = Dataset.open(store, version=1).manifest_file.transaction.uuid
    state = a_state(store, txn, offer_after=1, fresh_base=True, carrier_seen_at=now[0])
    state.posting = Posting(store, txn, 1 + OFFER_WINDOW, base_uuid)
    state.posting.wait_written(2)
    assert state.posting.written
    budget = policy.budget()
    budget.shortest_attempt_seconds = 0.1  # a round trip of 100 ms
    for waited in (0.0, 0.39, 0.41, 0.79):  # 0.41: past a patience of 4 attempts
        now[0] = 1000.0 + waited
        assert state._defers(budget), waited
    now[0] = 1000.0 + 0.81
    assert not state._defers(budget)  # no carrier version: it races


def test_a_writer_not_told_races_at_once() -> None:
    store = table()
    started = time.monotonic()
    _, result = append(store, RetryPolicy())
    assert time.monotonic() - started < MIN_PATIENCE
    assert result.attempts == 1


def carried_version(store: ObjectStore) -> int:
    """A carrier version at the head of ``store``: one told writer's commit, carried."""
    with Carrier(store) as carrier:
        _, result = append(store)
    assert carrier.error is None
    assert result.carried
    return result.version


def test_a_writer_not_told_waits_once_its_base_is_a_carriers_version() -> None:
    store = table()
    carried_version(store)
    with Carrier(store) as carrier:
        _u, result = append(store, RetryPolicy())  # the default: wait once a carrier is seen
    assert carrier.error is None
    assert result.carried  # it never raced: the carrier landed it
    assert result.attempts == 0
    assert result.version in carrier.versions


def test_a_writer_whose_base_is_a_stopped_carriers_version_races_once_it_lists_no_beacon(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = table()
    carried_version(store)
    budgets: list[RetryBudget] = []
    make_budget = RetryPolicy.budget

    def recorded(policy: RetryPolicy) -> RetryBudget:
        budgets.append(make_budget(policy))
        return budgets[-1]

    monkeypatch.setattr(RetryPolicy, "budget", recorded)
    started = time.monotonic()
    _u, result = append(store, RetryPolicy())
    # the carrier's beacon is gone: one listing, and it races (not its patience)
    assert time.monotonic() - started < MIN_PATIENCE
    # the wait is not its first attempt: that is measured from when it began to race
    (budget,) = budgets
    assert budget._first_from is not None
    assert budget._first_from > budget.started
    monkeypatch.undo()
    assert not result.carried
    assert result.attempts == 1
    # told never to wait, it races at once
    started = time.monotonic()
    _, result = append(store, RetryPolicy(wait_for_carrier=False))
    assert time.monotonic() - started < MIN_PATIENCE
    assert result.attempts == 1


def test_a_process_that_read_a_carriers_version_waits_for_it_while_its_beacon_is_listed() -> None:
    store = table()
    with Carrier(store) as carrier:
        _, told = append(store)  # carried: this process has read a carrier's version
        _, racer = append(store, RetryPolicy(wait_for_carrier=False, offer_after=None))
        assert told.carried
        assert not racer.carried
        _, lately = append(store, RetryPolicy())
    assert carrier.error is None
    assert lately.carried
    assert lately.attempts == 0
    started = time.monotonic()
    _, vain = append(store, RetryPolicy())  # base: the carrier's version; no carrier runs
    # one listing, which shows no beacon: it races at once instead of waiting its patience
    assert time.monotonic() - started < MIN_PATIENCE
    assert not vain.carried
    assert vain.attempts == 1
    assert not carrier_lately(store.uri)
    started = time.monotonic()
    _, after = append(store, RetryPolicy())  # the vain wait ended the process's belief
    assert time.monotonic() - started < MIN_PATIENCE
    assert after.attempts == 1


def beacons(store: ObjectStore) -> list[int]:
    """The expiries (Unix ms) of the carrier beacons in ``_versions/``."""
    return [e for e in map(beacon_expiry, store.list(VERSIONS_DIR)) if e is not None]


def wait_for_beacon(store: ObjectStore) -> None:
    deadline = time.monotonic() + 2
    while not beacons(store):
        assert time.monotonic() < deadline, "no beacon"
        time.sleep(0.01)


def test_a_running_carrier_keeps_a_live_beacon_and_takes_it_down() -> None:
    store = table()
    with Carrier(store):
        wait_for_beacon(store)
        (expires,) = beacons(store)
        assert expires > time.time() * 1000 + 0.5 * BEACON_SECONDS * 1000
        listing = scan_versions(store, since=U64_MAX)  # one page: the beacon sorts first
        assert listing.latest is not None
        assert listing.latest.version == 1  # not a version
        assert len(listing.beacons) == 1
        assert carrier_beacon(store.uri)
    assert beacons(store) == []
    scan_versions(store, since=U64_MAX)
    assert not carrier_beacon(store.uri)  # a listing without it forgets it
    # an expired beacon is not a live one
    store.put(f"{VERSIONS_DIR}/{beacon_name(int(time.time() * 1000) - 1, uuid.uuid4().hex)}", b"")
    assert len(scan_versions(store, since=U64_MAX).beacons) == 1
    assert not carrier_beacon(store.uri)


class NoBeacon(ObjectStore):
    """A store that refuses the carrier's beacon (a PUT into ``_versions/`` fails)."""

    def put(self, path: str, data: bytes) -> None:
        if path.startswith(f"{VERSIONS_DIR}/{BEACON_PREFIX}"):
            raise StorageError(f"{path}: refused")
        super().put(path, data)


def test_a_carrier_whose_beacon_cannot_be_written_carries_on() -> None:
    store = NoBeacon()
    commit(store, Transaction(0, Overwrite([frag("seed")], SCHEMA)))
    with Carrier(store) as carrier:
        deadline = time.monotonic() + 2
        while not carrier.beacon_failures:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        _, result = append(store)  # told: it waits, and is carried
    assert carrier.error is None
    assert beacons(store) == []
    assert result.carried
    assert result.version in carrier.versions


def test_a_writer_that_opened_the_table_beside_a_running_carrier_never_races() -> None:
    """No carrier version in the table, nothing in the process's memory: opening the table
    lists the carrier's beacon, so the first commit (default policy) waits for it."""
    store = table()
    with Carrier(store) as carrier:
        wait_for_beacon(store)
        _, result = append(store, RetryPolicy())
    assert carrier.error is None
    assert result.carried
    assert result.attempts == 0
    assert result.version in carrier.versions


def unknown(uri: str) -> None:
    """This process forgets the carrier of ``uri`` without discrediting its beacon (its
    thread's own listings may tell the process again at any moment)."""
    from txn_engine.contention import offers
    from txn_engine.format import naming
    from txn_engine.session import current

    seen = current().part(naming.SeenBeacons)
    with seen.lock:
        seen.live.pop(uri, None)
    memory = current().part(offers.OfferMemory)
    with memory.lock:
        memory.carriers.pop(uri, None)


def test_a_cold_or_stale_commit_reads_the_listing_before_it_creates_and_waits() -> None:
    """Without a Dataset to create on (no base, or a manifest of an older version) a commit
    lists first: beside a running carrier that listing shows the beacon, so it does not
    create (no request more than before: the create attempt reuses the listing)."""
    store = table()
    racer = RetryPolicy(wait_for_carrier=False)
    stale = Dataset.open(store).manifest_file
    append(store, racer)
    with Carrier(store) as carrier:
        wait_for_beacon(store)
        unknown(store.uri)  # nothing known before the commit's own listing
        cold = commit(store, Transaction(2, Append([frag("cold")])))
        unknown(store.uri)
        late = commit(store, Transaction(1, Append([frag("stale")])), base=stale)
    assert carrier.error is None
    for result in (cold, late):
        assert result.carried
        assert result.attempts == 0
        assert result.version in carrier.versions


def test_a_stale_commit_reads_again_only_the_newest_version_its_process_read() -> None:
    """What a commit of this process just read (recalled: a waiting or contended commit
    leaves it) is not read again by the next one from the same stale read version: only
    the newest recalled version, as a check, and the versions after it. A recalled history
    that check contradicts (a table re-created at the URI) is read again whole."""
    for tampered in (False, True):
        store = table()
        v1 = Dataset.open(store).manifest_file
        for _ in range(6):
            append(store, RetryPolicy(wait_for_carrier=False))
        pbs = {
            e.version: read_transaction_and_manifest(store, e, None)[0]
            for e in list_versions(store)
        }
        recalled = {v: pbs[v] for v in range(2, 8)}
        if tampered:
            other = type(pbs[6])()
            other.CopyFrom(pbs[6])
            other.uuid = str(uuid.uuid4())
            recalled[6] = other
        remember(store.uri, recalled, {}, ())
        rec = RecordingStorage(store)
        u = str(uuid.uuid4())
        txn = Transaction(1, Append([frag(u)]), uuid=u)
        result = commit(rec, txn, base=v1, retry_policy=RetryPolicy(wait_for_carrier=False))
        assert result.version == 8
        read = sorted(
            U64_MAX - int(path.rsplit("/", 1)[-1].split(".")[0])
            for method, path in rec.calls
            if method == "get_range" and path.startswith(f"{VERSIONS_DIR}/")
        )
        assert read == ([2, 3, 4, 5, 6, 7] if tampered else [6, 7])
        (pb, _) = read_transaction_and_manifest(store, list_versions(store)[-1], None)
        assert pb.uuid == u


def test_a_commit_that_raced_before_it_saw_a_carrier_races_on_the_next_ones_wait() -> None:
    """The rule of ``_saw_carrier``: a sighting midway through a commit that has already
    raced tells the process, and that commit only if it was told of a carrier."""
    for told, contended, waits in (
        (None, False, True),
        (None, True, False),
        (True, True, True),
    ):
        store = ObjectStore()
        state = a_state(store, Transaction(1, Append([frag("x")])), contended=contended)
        state._saw_carrier(RetryPolicy(wait_for_carrier=told))
        assert carrier_lately(store.uri)
        assert (state.carrier_seen_at is not None) is waits


def test_a_crashed_carriers_beacon_costs_one_vain_wait_not_one_per_commit() -> None:
    """A carrier that crashed leaves its beacon until it expires. The first commit that
    waits for it in vain discredits it: later commits race at once although every listing
    still shows it; a running carrier's next beacon (a later expiry) is believed again."""
    store = table()
    now_ms = int(time.time() * 1000)
    stale = f"{VERSIONS_DIR}/{beacon_name(now_ms + 9_000, uuid.uuid4().hex)}"
    store.put(stale, b"")
    started = time.monotonic()
    append(store, RetryPolicy())  # opens (lists the beacon), waits in vain, races
    assert time.monotonic() - started >= MIN_PATIENCE
    for _ in range(3):
        started = time.monotonic()
        _, result = append(store, RetryPolicy())
        assert time.monotonic() - started < MIN_PATIENCE
        assert result.attempts == 1
    assert not carrier_beacon(store.uri)
    store.put(f"{VERSIONS_DIR}/{beacon_name(now_ms + 12_000, uuid.uuid4().hex)}", b"")
    scan_versions(store, since=U64_MAX)
    assert carrier_beacon(store.uri)  # a later beacon: a carrier at work again


@pytest.mark.parametrize("ahead_ms", [31_000, 3_600_000, 10**15])
def test_a_beacon_claiming_a_far_expiry_is_not_believed(ahead_ms: int) -> None:
    """A running carrier writes its beacon BEACON_SECONDS ahead by its own clock; one that
    claims a much later expiry (forged, or a crashed carrier whose clock ran fast) is not a
    carrier at work: no commit waits for it, in a new process or not."""
    store = table()
    far = f"{VERSIONS_DIR}/{beacon_name(int(time.time() * 1000) + ahead_ms, uuid.uuid4().hex)}"
    store.put(far, b"")
    scan_versions(store, since=U64_MAX)
    assert not carrier_beacon(store.uri)
    started = time.monotonic()
    _, result = append(store, RetryPolicy())
    assert time.monotonic() - started < MIN_PATIENCE
    assert result.attempts == 1


def test_a_carriers_transaction_is_never_offered() -> None:
    mine = Transaction(3, Append([]), properties={CARRIER_KEY: "1"})
    assert not may_offer(mine)
    assert may_offer(Transaction(3, Append([frag("x")])))


class Posted(ObjectStore):
    """Records the windows of the offers posted (the last version each may land in)."""

    def __init__(self) -> None:
        super().__init__()
        self.windows: list[int] = []

    def put(self, path: str, data: bytes) -> None:
        parsed = parse_offer_name(path.rsplit("/", 1)[-1])
        if path.startswith(f"{OFFERS_DIR}/") and parsed is not None:
            self.windows.append(parsed[0])
        super().put(path, data)

    put_if_absent = put


def stale_table() -> tuple[Posted, Dataset]:
    """A table 10 versions past the Dataset returned (opened at version 1)."""
    store = Posted()
    commit(store, Transaction(0, Overwrite([frag("seed")], SCHEMA)))
    opened = Dataset.open(store)
    for _ in range(10):
        append(store, RetryPolicy(wait_for_carrier=False))
    return store, opened


def carried_once(store: ObjectStore, u: str, result: CommitResult, carrier: Carrier) -> None:
    assert carrier.error is None
    assert result.carried
    assert result.attempts == 0  # it never raced
    assert result.version in carrier.versions
    landed = [
        e.version
        for e in list_versions(store)
        if u in carried_uuids(read_transaction_and_manifest(store, e, None)[0])
    ]
    assert landed == [result.version]


def test_a_stale_writer_told_of_a_carrier_offers_again_once_its_window_is_spent() -> None:
    store, opened = stale_table()
    u = str(uuid.uuid4())
    txn = Transaction(1, Append([frag(u)]), uuid=u)
    with Carrier(store) as carrier:
        result = commit(store, txn, base=opened, retry_policy=TOLD)
    carried_once(store, u, result, carrier)
    # a Dataset base is offered from at once (valid through 9); that window was spent
    # before the offer could be carried: offered again from the latest version checked
    assert store.windows[:2] == [1 + OFFER_WINDOW, 11 + OFFER_WINDOW]


def test_a_commit_without_a_dataset_base_offers_from_the_latest_version_it_read() -> None:
    store, opened = stale_table()
    for base in (None, opened.manifest_file):  # cold, and a stale manifest
        store.windows.clear()
        u = str(uuid.uuid4())
        txn = Transaction(1, Append([frag(u)]), uuid=u)
        with Carrier(store) as carrier:
            result = commit(store, txn, base=base, retry_policy=TOLD)
        carried_once(store, u, result, carrier)
        latest = result.version - 1
        assert store.windows == [latest + OFFER_WINDOW]  # one offer, never spent


def test_peek_leaves_the_memory_and_a_private_memory_is_the_threads_own() -> None:
    uri = f"memory://peek-{uuid.uuid4()}"
    remember(uri, {3: None}, {}, ())
    assert peek(uri) is not None
    assert peek(uri) is not None  # still there
    seen: list[object] = []

    def carrier_thread() -> None:
        private_memory()
        seen.append(peek(uri))  # the process's memory is not this thread's
        remember(uri, {4: None}, {}, ())
        seen.append(sorted(peek(uri).transactions))  # type: ignore[union-attr]

    t = threading.Thread(target=carrier_thread)
    t.start()
    t.join()
    assert seen == [None, [4]]
    taken = recall(uri)
    assert taken is not None
    assert sorted(taken.transactions) == [3]  # the thread's remember left it alone
    assert peek(uri) is None  # recall took it


# ---- carriers hosted by the writers (RetryPolicy.host_carrier) --------------------------


@pytest.fixture
def quick_hosts(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Hosted carriers idle out fast here, and none outlives its test. Every lost race
    counts as lost among writers of several processes (``_foreign_offer``: in one test
    process, no offer is another process's)."""
    monkeypatch.setattr(carrier_module, "HOST_IDLE_SECONDS", 0.4)
    monkeypatch.setattr(Offering, "_foreign_offer", lambda self: True)
    monkeypatch.setattr(offering_module, "HOST_MIN_ATTEMPT_SECONDS", 0.0)  # memory is fast
    yield
    hosts = current().part(carrier_module.Hosts)
    with hosts.lock:
        carriers = list(hosts.carriers.values())
        hosts.carriers.clear()
    for c in carriers:
        c.close()


def lose_a_race(
    store: ObjectStore, policy: RetryPolicy, note: list[str] | None = None
) -> CommitResult:
    """Another writer takes the next version first: this commit's direct create loses.
    ``note``: the losing transaction's uuid is appended to it."""
    base = Dataset.open(store)
    commit(store, Transaction(base.version, Append([frag("winner")])))
    u = str(uuid.uuid4())
    if note is not None:
        note.append(u)
    result = commit(
        store, Transaction(base.version, Append([frag(u)]), uuid=u), base=base, retry_policy=policy
    )
    return result


def wait_until(check: Any, seconds: float = 3.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture
def foreign_offers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The offers a carrier carries count as other processes' (it never stops as lonely)."""
    monkeypatch.setattr(carrier_module, "ours", lambda uuid: False)


@pytest.mark.usefixtures("quick_hosts", "foreign_offers")
def test_a_writer_that_loses_a_race_hosts_a_carrier_the_next_commits_wait_for() -> None:
    store = table()
    lost = lose_a_race(store, RetryPolicy(host_carrier=True))
    carrier = hosted(store.uri)
    assert carrier is not None
    assert carrier.hosted
    # the commit that lost waits for the carrier it started, which carries it
    assert lost.attempts == 1
    assert lost.carried
    assert carrier.versions == [lost.version]
    wait_for_beacon(store)
    results = [append(store, RetryPolicy()) for _ in range(3)]  # told nothing
    assert all(r.carried and r.attempts == 0 for _, r in results)
    assert [lost.version] + [r.version for _, r in results] == carrier.versions
    # nothing more to carry: it stops after its idle time and takes its beacon down
    wait_until(lambda: not carrier.running)
    assert carrier.error is None
    assert not carrier.stepped_down
    # its beacon thread takes the beacon down just after the carrier's thread ends
    wait_until(lambda: beacons(store) == [])
    # the next commit reads its version, lists no beacon and races: a lost race hosts again
    lose_a_race(store, RetryPolicy(host_carrier=True))
    assert not carrier_lately(store.uri)
    assert lose_a_race(store, RetryPolicy(host_carrier=True)).carried
    again = hosted(store.uri)
    assert again is not None
    assert again is not carrier
    assert again.running


class Interposed(ObjectStore):
    """An object store where another writer's commit lands just before the next manifest
    create (``before``): that create loses the race."""

    before: Any = None

    def put_if_absent(self, path: str, data: bytes) -> None:
        before, self.before = self.before, None
        if before is not None and path.startswith(f"{VERSIONS_DIR}/"):
            before()
        super().put_if_absent(path, data)


@pytest.mark.usefixtures("quick_hosts")
def test_a_carrier_hosted_by_a_stale_writer_knows_its_read_versions_transaction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The offers of the writers that lost a race are checked up to their read version: a
    carrier hosted by a writer with a stale base (a ManifestFile, listed before its
    create) gets that version's transaction from it, so it does not read the version again
    before its first create (a round trip: traced on GCS + 100 ms, stale writers)."""
    handed: list[dict[int, Any]] = []

    def host(storage: Any, base: Any, known: Any, offers: Any, scan: Any) -> bool:
        handed.append(dict(known))
        return False  # none started: the commit races on

    monkeypatch.setattr(carrier_module, "host", host)
    store = Interposed()
    commit(store, Transaction(0, Overwrite([frag("seed")], SCHEMA)))
    read = Dataset.open(store, version=1).manifest_file
    store.before = lambda: commit(store, Transaction(1, Append([frag("winner")])))
    result = commit(
        store,
        Transaction(1, Append([frag("stale")])),
        base=read,
        retry_policy=RetryPolicy(host_carrier=True),
    )
    assert result.version == 3  # it lost version 2, then landed on it
    assert handed, "the lost race hosted no carrier"
    known = handed[0]
    assert known.get(1) is not None
    assert known[1].uuid == read.transaction.uuid


class NetworkStore(ObjectStore):
    """An object store in memory that says it is over the network (an ``s3://`` URI)."""

    def __init__(self) -> None:
        super().__init__()
        self._network_uri = f"s3://bucket/{uuid.uuid4().hex}.lance"

    @property
    def uri(self) -> str:
        return self._network_uri


@pytest.mark.usefixtures("quick_hosts")
@pytest.mark.parametrize(
    ("policy", "hosts"),
    [
        (RetryPolicy(), True),  # the default, on a store over the network
        (RetryPolicy(host_carrier=False), False),
        (RetryPolicy(wait_for_carrier=False), False),  # never waits: hosts none either
        (RetryPolicy(offer_after=None), False),  # no offers: a carrier could carry nothing
    ],
)
def test_who_hosts_a_carrier_by_default(policy: RetryPolicy, hosts: bool) -> None:
    store = NetworkStore()
    commit(store, Transaction(0, Overwrite([frag("seed")], SCHEMA)))
    lose_a_race(store, policy)
    assert (hosted(store.uri) is not None) is hosts
    # in memory (memory://) only when asked (host_carrier=True)
    memory = table()
    lose_a_race(memory, policy)
    assert hosted(memory.uri) is None


def started_hosted(store: ObjectStore, first: str) -> Carrier:
    """A hosted carrier whose beacon token begins with hex digit ``first``."""
    c = Carrier(store, idle_seconds=30)
    c.hosted = True
    c._token = first + uuid.uuid4().hex[1:]
    return c.start()


def assert_carries(store: ObjectStore, carrier: Carrier) -> None:
    """A writer's next commit (told of a carrier) is carried by ``carrier``."""
    _, result = append(store)
    assert result.carried
    assert result.version in carrier.versions


def test_hosted_carriers_step_down_for_one_that_ranks_before_them() -> None:
    store = table()
    with Carrier(store) as deployed, Carrier(store) as other_deployed:
        wait_until(lambda: len(beacons(store)) == 2)
        low, high = started_hosted(store, "1"), started_hosted(store, "2")
        try:
            # every carrier started as one ranks before every hosted one
            wait_until(lambda: not low.running and not high.running)
            assert low.stepped_down
            assert high.stepped_down
            assert low.error is None
            assert high.error is None
            assert deployed.running
            assert other_deployed.running
            assert not deployed.stepped_down
        finally:
            low.close()
            high.close()
    assert beacons(store) == []
    # among hosted ones, the lowest token goes on
    low, high = started_hosted(store, "1"), started_hosted(store, "2")
    try:
        wait_until(lambda: not high.running)
        assert high.stepped_down
        time.sleep(0.2)
        assert low.running
        assert not low.stepped_down
        assert_carries(store, low)  # the one left carries
    finally:
        low.close()
        high.close()
    assert low.error is None
    assert high.error is None


def test_a_hosted_carrier_does_not_step_down_for_a_discredited_beacon() -> None:
    store = table()
    crashed = f"{VERSIONS_DIR}/{beacon_name(int(time.time() * 1000) + 9_000, '0' * 32)}"
    store.put(crashed, b"")  # a crashed carrier's, ranking before any hosted one
    scan_versions(store, since=U64_MAX)
    assert carrier_beacon(store.uri)
    forget_beacon(store.uri)  # a vain wait for it discredited it in this process
    c = started_hosted(store, "f")
    try:
        assert c._looked.wait(2)
        time.sleep(0.05)
        assert c.running
        assert not c.stepped_down
    finally:
        c.close()
    assert c.error is None


class Stalled(Carrier):
    """A carrier that keeps its beacon and carries nothing (a carrier stuck on the way)."""

    def _serve(self) -> None:
        self._stop.wait()


def test_a_waiting_writer_races_as_soon_as_a_listing_shows_the_beacon_gone() -> None:
    store = table()
    stalled = Stalled(store).start()
    wait_for_beacon(store)
    outcome: list[CommitResult] = []
    began = threading.Event()

    def writer() -> None:
        began.set()
        outcome.append(append(store, RetryPolicy())[1])  # it lists the beacon and waits

    thread = threading.Thread(target=writer)
    started = time.monotonic()
    thread.start()
    began.wait()
    time.sleep(0.05)
    stalled.close()  # the beacon comes down first
    thread.join()
    elapsed = time.monotonic() - started
    (result,) = outcome
    assert not result.carried
    assert result.attempts == 1
    # without the rule it waited out its patience (MIN_PATIENCE at least) for a version
    assert elapsed < MIN_PATIENCE
    assert not carrier_lately(store.uri)  # and the process forgot the carrier


@pytest.mark.usefixtures("quick_hosts")
def test_a_hosted_carrier_that_carries_only_its_own_processs_offers_stops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After it has carried another process's offer, HOST_LONELY_VERSIONS versions in a row
    carrying only offers this process posted make it leave (the other processes' writers
    stopped contending; this process's writers then create their own versions, one create
    each, instead of waiting)."""
    monkeypatch.setattr(carrier_module, "HOST_IDLE_SECONDS", 30.0)  # only the lonely rule
    store = table()
    first: list[str] = []
    real = carrier_module.ours
    # the offer of the commit that lost counts as another process's
    monkeypatch.setattr(carrier_module, "ours", lambda u: real(u) and u not in first)
    lost = lose_a_race(store, RetryPolicy(host_carrier=True), note=first)
    carrier = hosted(store.uri)
    assert carrier is not None
    assert lost.carried
    lonely = carrier_module.HOST_LONELY_VERSIONS
    results = [append(store, RetryPolicy())[1] for _ in range(lonely)]
    wait_until(lambda: not carrier.running)
    assert len(carrier.versions) == 1 + lonely
    assert all(r.carried for r in results)
    assert carrier.error is None
    assert not carrier.stepped_down
    # its beacon thread takes the beacon down just after the carrier's thread ends
    wait_until(lambda: beacons(store) == [])
    _, alone = append(store, RetryPolicy())
    assert not alone.carried
    assert alone.attempts == 1


def test_only_a_txn_engine_version_of_another_process_is_a_foreign_winner(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``_foreign_winner``: the version a commit just lost to, its manifest read back, was
    written by txn_engine (its writer library) in another process (its transaction's uuid
    is not this process's). A version pylance wrote, or one of this process, is not."""
    store = table()
    winner = Transaction(1, Append([frag("winner")]))
    commit(store, winner)  # a commit that hosts nothing notes nothing as this process's
    listing = scan_versions(store)
    (entry,) = listing.after(1)
    data = store.get(entry.path)

    def lost_to(raw: bytes) -> bool:
        mine = Transaction(1, Append([frag("mine")]))
        state = a_state(store, mine, raw={entry.version: raw}, listing=listing)
        return state._foreign_winner()

    assert lost_to(data)
    mf = decode_manifest_file(data)
    mf.manifest.writer_version.library = "lance"  # as pylance writes it
    assert not lost_to(encode_manifest_file(mf.manifest, mf.indices, mf.transaction))
    note_ours(winner.uuid)  # this process's own
    assert not lost_to(data)
    # a commit that lost to pylance alone hosts no carrier and does not wait (however
    # long its attempt took)
    monkeypatch.setattr(offering_module, "HOST_MIN_ATTEMPT_SECONDS", 0.0)
    lone = table()
    base = Dataset.open(lone)
    commit(lone, Transaction(base.version, Append([frag("w")])))
    with_lance = scan_versions(lone).latest
    assert with_lance is not None
    path = with_lance.path
    mf = decode_manifest_file(lone.get(path))
    mf.manifest.writer_version.library = "lance"
    lone.delete(path)
    lone.put(path, encode_manifest_file(mf.manifest, mf.indices, mf.transaction))
    u = str(uuid.uuid4())
    started = time.monotonic()
    result = commit(
        lone,
        Transaction(base.version, Append([frag(u)]), uuid=u),
        base=base,
        retry_policy=RetryPolicy(host_carrier=True),
    )
    assert time.monotonic() - started < MIN_PATIENCE
    assert result.attempts == 2
    assert not result.carried
    assert hosted(lone.uri) is None


def test_only_an_offer_of_another_process_makes_a_lost_race_host_a_carrier() -> None:
    """``_foreign_offer``: an offer this process posted (another thread's) or none is not
    a reason to host; one it did not post, read or carried by a version read, is."""
    store = ObjectStore()
    mine = Transaction(1, Append([frag("mine")]))
    neighbour = Transaction(1, Append([frag("neighbour")]))
    stranger = Transaction(1, Append([frag("stranger")]))

    def state(**kw: Any) -> Offering:
        return a_state(store, mine, **kw)

    posting = Posting(store, neighbour, 1 + OFFER_WINDOW, "base")  # posted by this process
    posting.wait_written(2)
    posted = Offer("n", 1 + OFFER_WINDOW, neighbour)
    foreign = Offer("s", 1 + OFFER_WINDOW, stranger)
    assert not state()._foreign_offer()
    assert not state(offers={"n": posted})._foreign_offer()
    assert not state(offers={"m": Offer("m", 9, mine)})._foreign_offer()
    assert state(offers={"n": posted, "s": foreign})._foreign_offer()
    # a version read that carried another process's offer
    carried_by_winner = transaction_to_proto(carrying(neighbour, [stranger]))
    assert state(transactions={2: carried_by_winner})._foreign_offer()
    own_carried = transaction_to_proto(carrying(stranger, [neighbour]))
    assert not state(transactions={2: own_carried})._foreign_offer()


@pytest.mark.usefixtures("quick_hosts", "foreign_offers")
def test_a_process_keeps_no_stopped_hosted_carrier() -> None:
    """A process that touches many tables does not keep a carrier per table: a stopped
    one is dropped when the next is hosted."""
    first, second = table(), table()
    lose_a_race(first, RetryPolicy(host_carrier=True))
    old = hosted(first.uri)
    assert old is not None
    old.close()
    lose_a_race(second, RetryPolicy(host_carrier=True))
    assert hosted(first.uri) is None
    assert hosted(second.uri) is not None


@pytest.mark.usefixtures("quick_hosts")
def test_a_race_lost_in_less_than_a_network_round_trip_hosts_no_carrier(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where an attempt is quicker than HOST_MIN_ATTEMPT_SECONDS (a store next door),
    racing costs less than a carrier's coordination: a lost race hosts none."""
    monkeypatch.setattr(offering_module, "HOST_MIN_ATTEMPT_SECONDS", 10.0)
    store = table()
    result = lose_a_race(store, RetryPolicy(host_carrier=True))
    assert hosted(store.uri) is None
    assert not result.carried
    assert result.attempts == 2


def test_a_carrier_goes_on_from_the_manifest_it_wrote(monkeypatch: pytest.MonkeyPatch) -> None:
    """After a version of its own the carrier does not read that version back: its next
    base is decoded from the bytes it created (one GET per carried version less)."""
    reads: list[int] = []
    real_at = carrier_module._at

    def counted(storage: Any, version: int, scheme: Any) -> Dataset:
        reads.append(version)
        return real_at(storage, version, scheme)

    monkeypatch.setattr(carrier_module, "_at", counted)
    store = table()
    with Carrier(store) as carrier:
        wait_for_beacon(store)
        for _ in range(3):
            _, result = append(store)
            assert result.carried
    assert carrier.error is None
    assert len(carrier.versions) == 3
    assert not set(carrier.versions) & set(reads)  # none of its own versions read back


class Counted(ObjectStore):
    """Counts, per thread name, the listings of ``_versions/`` and the manifest reads."""

    def __init__(self) -> None:
        super().__init__()
        self.lists: list[str] = []
        self.reads: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def _note(self, where: list[Any], what: Any) -> None:
        with self._lock:
            where.append(what)

    def list_ordered(self, prefix: str) -> Iterator[str]:
        if prefix.rstrip("/") == VERSIONS_DIR:
            self._note(self.lists, threading.current_thread().name)
        return super().list_ordered(prefix)

    def size(self, path: str) -> int:
        if path.startswith(f"{VERSIONS_DIR}/") and path.endswith(".manifest"):
            self._note(self.reads, (threading.current_thread().name, path))
        return super().size(path)


def counted_table() -> Counted:
    store = Counted()
    commit(store, Transaction(0, Overwrite([frag("seed")], SCHEMA)))
    return store


def test_a_waiting_writer_reads_the_next_version_by_name_and_lists_every_few_polls() -> None:
    """A listing's page grows with the history; a read of the next version by its name
    does not. The writer still lists now and then (the beacons stay in view)."""
    store = counted_table()
    stalled = Stalled(store).start()
    wait_for_beacon(store)
    store.lists.clear()
    store.reads.clear()
    result = append(store, TOLD)[1]  # waits out its patience for a carrier that carries nothing
    stalled.close()
    assert not result.carried
    writer = threading.current_thread().name
    lists = store.lists.count(writer)
    next_name = f"{VERSIONS_DIR}/{manifest_name(2, NamingScheme.V2)}"
    probes = sum(1 for who, path in store.reads if who == writer and path == next_name)
    # the opening listing, the polls' listings, and the lost race's guard listing
    assert probes >= 8
    assert lists <= 2 + probes // (carrier_module.POLL_LIST_EVERY - 1) + 1
    assert probes >= 2 * (lists - 2)


def test_a_writer_finds_the_version_its_own_processs_carrier_created_without_reading_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The carrier leaves the bytes of each version it created in the process
    (``carrier.publish_created``, after its checks): a writer's poll after that takes them
    without a read. A poll whose read went out before (it raced the create) may read it."""
    store = counted_table()
    writer = threading.current_thread().name
    published: dict[str, int] = {}  # path -> how many reads were noted when it was published
    real_publish = offering_module.publish_created

    def noted(storage: Any, path: str, data: bytes) -> None:
        published.setdefault(path, len(store.reads))
        real_publish(storage, path, data)

    monkeypatch.setattr(offering_module, "publish_created", noted)
    names = []
    with Carrier(store) as carrier:
        for _ in range(6):
            base = Dataset.open(store)
            since = len(store.reads)
            txn = Transaction(base.version, Append([frag(str(uuid.uuid4()))]))
            result = commit(store, txn, base=base, retry_policy=TOLD)
            assert result.carried
            name = f"{VERSIONS_DIR}/{manifest_name(result.version, NamingScheme.V2)}"
            names.append(name)
            # read after the carrier published it: the shortcut was missed
            assert (writer, name) not in store.reads[max(since, published[name]) :]
    assert carrier.error is None
    assert set(names) <= set(published)


def test_a_carriers_versions_are_at_hand_per_storage_object_for_a_moment_and_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``created.carried_here`` answers for the very storage object the carrier created the
    version through (the one its writers share), for ``CREATED_SECONDS``, within bounds:
    a table made again under the same URI (another object) never gets the old table's
    bytes for its own version of the same number."""
    created_module.forget_created()
    memory = current().part(created_module.CreatedVersions)
    path = f"{VERSIONS_DIR}/{manifest_name(2, NamingScheme.V2)}"
    a = ObjectStore("memory://same-name")
    b = ObjectStore("memory://same-name")  # the table made again: same URI, other bytes
    created_module.publish_created(a, path, b"a's version 2")
    assert created_module.carried_here(a, path) == b"a's version 2"
    assert created_module.carried_here(b, path) is None
    other_version = f"{VERSIONS_DIR}/{manifest_name(3, NamingScheme.V2)}"
    assert created_module.carried_here(a, other_version) is None
    now = time.monotonic()
    later = now + created_module.CREATED_SECONDS + 0.01
    monkeypatch.setattr(time, "monotonic", lambda: later)
    assert created_module.carried_here(a, path) is None  # a moment only
    monkeypatch.undo()
    names = [f"{VERSIONS_DIR}/{manifest_name(v, NamingScheme.V2)}" for v in range(1, 40)]
    for name in names:
        created_module.publish_created(a, name, b"x")
    assert len(memory.entries) == created_module.CREATED_MAX  # the oldest went
    assert created_module.carried_here(a, names[0]) is None
    assert created_module.carried_here(a, names[-1]) == b"x"
    monkeypatch.setattr(created_module, "CREATED_MAX_BYTES", 10)
    created_module.publish_created(a, names[0], b"y" * 8)
    created_module.publish_created(a, names[1], b"z" * 8)
    assert created_module.carried_here(a, names[0]) is None
    assert created_module.carried_here(a, names[1]) == b"z" * 8
    assert memory.bytes <= 10
    # an object gone: whatever object takes its id next fails the weak reference
    gone = ObjectStore()
    created_module.publish_created(gone, path, b"gone's")
    key = (id(gone), path)
    del gone
    gc.collect()
    assert memory.entries[key][0]() is None
    created_module.forget_created()
    assert memory.bytes == 0


def test_a_writer_never_takes_a_carried_version_of_an_older_table_under_its_uri() -> None:
    """A carrier of this process carried version 2 of a table; the table is made again
    under the same URI and a writer waits for a carrier there: it reads the new table's
    version 2 (carrying its own offer), not the old bytes (keyed by URI, as before, they
    were taken for the new table's version 2: the writer then checked the wrong history,
    and failed with HistoryUnavailableError or CommitStateUnknownError)."""
    old = ObjectStore("memory://made-again")
    commit(old, Transaction(0, Overwrite([frag("old-seed")], SCHEMA)))
    with Carrier(old) as carrier:
        wait_for_beacon(old)
        _u, first = append(old)
    assert first.carried
    assert carrier.error is None

    class SlowOffers(ObjectStore):
        """Its carrier lists the offers slowly: the writer reads the next version by its
        name several times before the carrier creates it."""

        def list(self, prefix: str) -> list[str]:
            if prefix.startswith(OFFERS_DIR):
                time.sleep(0.05)
            return super().list(prefix)

    new = SlowOffers("memory://made-again")
    commit(new, Transaction(0, Overwrite([frag("new-seed")], SCHEMA)))
    landed: list[str] = []
    with Carrier(new) as carrier:
        wait_for_beacon(new)
        for expected in range(first.version, first.version + 3):
            u, result = append(new)
            landed.append(u)
            assert result.carried
            assert result.version == expected  # the first: the number the old one carried
    assert carrier.error is None
    fragments = Dataset.open(new).manifest_file.manifest.fragments
    assert {f.files[0].path for f in fragments} == {"new-seed.lance"} | {
        f"{u}.lance" for u in landed
    }


def test_an_idle_carrier_reads_the_next_version_by_name_and_lists_every_few_waits() -> None:
    store = counted_table()
    with Carrier(store) as carrier:
        time.sleep(0.4)
        _u, result = append(store, RetryPolicy(wait_for_carrier=False, host_carrier=False))
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline and len(store.lists) < 12:
            time.sleep(0.01)
    assert carrier.error is None
    assert carrier.versions == []
    lists = store.lists.count("txn-engine-carrier-list")
    probes = sum(1 for who, _ in store.reads if who == "txn-engine-carrier-list")
    assert lists >= 2
    assert probes >= (carrier_module.POLL_LIST_EVERY - 2) * lists
    # the version a writer created beside it was found (read by its name, or listed)
    created = manifest_name(result.version, NamingScheme.V2)
    assert any(path.endswith(created) for _, path in store.reads)


def claimed_hosted(store: ObjectStore, base: Dataset, first: str) -> Carrier:
    """A hosted carrier claiming the hosting for ``base``'s version, as :func:`host` does."""
    c = Carrier(store, idle_seconds=30)
    c.hosted = True
    c._token = first + uuid.uuid4().hex[1:]
    c._first_base = base
    c._claim = f"{HOSTS_DIR}/{claim_name(base.version)}"
    return c


def test_the_carriers_hosted_by_the_losers_of_one_race_elect_one_by_claim() -> None:
    store = table()
    base = Dataset.open(store)
    # the later token claims first: the claim, not the rank, decides among them
    first, second = claimed_hosted(store, base, "2"), claimed_hosted(store, base, "1")
    first.start()
    assert first._claimed.wait(2)
    second.start()
    try:
        wait_until(lambda: not second.running)
        assert second.stepped_down
        assert second.yielded_at is not None
        assert second.error is None
        wait_until(lambda: len(beacons(store)) == 1)
        time.sleep(0.1)
        assert first.running
        assert not first.stepped_down
        # the one that yielded wrote no beacon: the only one is the claimant's
        (token,) = {
            t for _, t in live_beacons(store.uri, store.list(VERSIONS_DIR)) if t.startswith("2")
        }
        assert store.get(f"{HOSTS_DIR}/{claim_name(base.version)}") == token.encode()
        assert_carries(store, first)
    finally:
        first.close()
        second.close()
    assert first.error is None
    # the claimant takes its claim down with its beacon
    assert store.list(HOSTS_DIR) == []
    assert beacons(store) == []


@pytest.mark.usefixtures("quick_hosts")
def test_a_process_whose_carrier_yielded_to_a_claim_counts_as_carried_for_a_moment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(carrier_module, "CLAIM_GRACE_SECONDS", 0.2)
    store = table()
    base = Dataset.open(store)
    store.put(f"{HOSTS_DIR}/{claim_name(base.version)}", b"another process's")
    assert carrier_module.host(store, base)
    carrier = hosted(store.uri)
    assert carrier is not None
    wait_until(lambda: carrier.yielded_at is not None)
    assert carrier.stepped_down
    assert carrier_module.hosting(store.uri)  # its writers wait for the claimant's carrier
    assert not carrier_module.host(store, base)  # and nobody here hosts again meanwhile
    time.sleep(0.25)
    assert not carrier_module.hosting(store.uri)
    assert beacons(store) == []
    assert carrier.versions == []


class NoClaims(ObjectStore):
    def put_if_absent(self, path: str, data: bytes) -> None:
        if path.startswith(f"{HOSTS_DIR}/"):
            raise StorageError("throttled")
        super().put_if_absent(path, data)


def test_a_claim_that_cannot_be_written_does_not_stop_a_hosted_carrier() -> None:
    store = NoClaims()
    commit(store, Transaction(0, Overwrite([frag("seed")], SCHEMA)))
    c = claimed_hosted(store, Dataset.open(store), "1").start()
    try:
        wait_until(lambda: len(beacons(store)) == 1)
        assert c.running
        assert not c.stepped_down
        assert c.yielded_at is None
        assert_carries(store, c)
    finally:
        c.close()
    assert c.error is None


def test_a_lost_create_is_settled_by_the_read_sent_beside_it() -> None:
    """``_create`` with a peek (a read of the version's manifest sent beside the create):
    when the create finds the name taken, the bytes the peek found settle it, and no
    read-back follows; a peek that found nothing leaves the read-back as it was."""
    store = table()
    _, won = append(store, RetryPolicy(wait_for_carrier=False))  # version 2, another's
    path = won.manifest_path
    rec = RecordingStorage(store)
    handler = commit_handler_for(rec)
    late = Transaction(1, Append([frag("late")]))
    peek = create_module.Peek(rec, path)
    peek.result()  # served before our create: it found the winner
    assert create_module.create(handler, 2, path, b"ours", late, peek) == store.get(path)
    assert [m for m, p in rec.calls if p == path] == ["size", "get_range", "put_if_absent"]
    rec.reset()  # without a peek: the read-back comes after the lost create
    assert create_module.create(handler, 2, path, b"ours", late) == store.get(path)
    assert [m for m, p in rec.calls if p == path] == ["put_if_absent", "size", "get_range"]
    # a peek served before the winner landed found nothing: the read-back settles it
    third = f"{VERSIONS_DIR}/{manifest_name(3, NamingScheme.V2)}"
    empty = create_module.Peek(rec, third)
    assert empty.result() is None
    append(store, RetryPolicy(wait_for_carrier=False))  # version 3, another's
    rec.reset()
    assert create_module.create(handler, 3, third, b"ours", late, empty) == store.get(third)
    assert [m for m, p in rec.calls if p == third] == ["put_if_absent", "size", "get_range"]
    # our own bytes found there (a create whose first response was lost): ours landed
    fourth = f"{VERSIONS_DIR}/{manifest_name(4, NamingScheme.V2)}"
    store.put_if_absent(fourth, b"ours")
    mine = create_module.Peek(rec, fourth)
    assert create_module.create(handler, 4, fourth, b"ours", late, mine) == b"ours"


def test_only_a_carriers_creates_send_the_read_beside_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """The peek goes with a carrier's creates (a lost one costs every writer it carries a
    round trip), not with a writer's own."""
    made: list[tuple[str, str]] = []

    class Spy(create_module.Peek):  # type: ignore[misc,name-defined]
        def __init__(self, storage: Any, path: str) -> None:
            made.append((threading.current_thread().name, path))
            super().__init__(storage, path)

    monkeypatch.setattr(attempt_module, "Peek", Spy)
    store = table()
    append(store, RetryPolicy(wait_for_carrier=False))
    assert made == []  # a writer racing on its own
    with Carrier(store) as carrier:
        u, result = append(store)
    carried_once(store, u, result, carrier)
    assert result.manifest_path in [path for _, path in made]
    assert all(name != threading.current_thread().name for name, _ in made)
