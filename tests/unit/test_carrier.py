"""The carrier (txn_engine.carrier): it lands the offers of writers told to wait for it, never
creates a version with nothing to carry, and a writer told of a carrier that is not there
races after its patience."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from txn_engine import Carrier
from txn_engine.carrier import BEACON_SECONDS
from txn_engine.commit import MIN_PATIENCE, CommitResult, _saw_carrier, _State, commit
from txn_engine.conflicts.rebase import ConflictOptions
from txn_engine.dataset import Dataset
from txn_engine.errors import StorageError
from txn_engine.format.io import read_transaction_and_manifest
from txn_engine.format.naming import (
    BEACON_PREFIX,
    U64_MAX,
    VERSIONS_DIR,
    beacon_expiry,
    beacon_name,
    carrier_beacon,
    list_versions,
    scan_versions,
)
from txn_engine.model import DataFile, Fragment, LanceField
from txn_engine.offers import (
    CARRIER_KEY,
    OFFER_WINDOW,
    OFFERS_DIR,
    carried_uuids,
    carrier_lately,
    may_offer,
    parse_offer_name,
    peek,
    private_memory,
    recall,
    remember,
)
from txn_engine.ops import Append, Overwrite
from txn_engine.retry import RetryBudget, RetryPolicy
from txn_engine.storage import MemoryStorage, RecordingStorage
from txn_engine.storage.handler import commit_handler_for
from txn_engine.transaction import Transaction

SCHEMA = (LanceField(0, -1, "id", "int64"),)
TOLD = RetryPolicy(wait_for_carrier=True)


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


def test_a_writer_whose_base_is_a_stopped_carriers_version_races_after_its_patience(
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
    assert time.monotonic() - started >= MIN_PATIENCE
    # the wait is not its first attempt: that is measured from when it began to race
    (budget,) = budgets
    assert budget._first_from is not None
    assert budget._first_from - budget.started >= MIN_PATIENCE
    monkeypatch.undo()
    assert not result.carried
    assert result.attempts == 1
    # told never to wait, it races at once
    started = time.monotonic()
    _, result = append(store, RetryPolicy(wait_for_carrier=False))
    assert time.monotonic() - started < MIN_PATIENCE
    assert result.attempts == 1


def test_a_process_that_read_a_carriers_version_waits_for_it_until_it_waits_in_vain() -> None:
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
    assert time.monotonic() - started >= MIN_PATIENCE
    assert not vain.carried
    assert vain.attempts == 1
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
    from txn_engine import offers
    from txn_engine.format import naming

    with naming._beacons_lock:
        naming._beacons.pop(uri, None)
    with offers._recent_lock:
        offers._carriers.pop(uri, None)


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
        state = _State(
            handler=commit_handler_for(store),
            original=Transaction(1, Append([frag("x")])),
            txn=Transaction(1, Append([frag("x")])),
            options=ConflictOptions(),
            checked_up_to=1,
            contended=contended,
        )
        _saw_carrier(state, RetryPolicy(wait_for_carrier=told))
        assert carrier_lately(store.uri)
        assert (state.carrier_seen_at is not None) is waits


def test_a_crashed_carriers_beacon_costs_one_vain_wait_not_one_per_commit() -> None:
    """A carrier that crashed leaves its beacon until it expires. The first commit that
    waits for it in vain discredits it: later commits race at once although every listing
    still shows it; a running carrier's next beacon (a later expiry) is believed again."""
    store = table()
    now_ms = int(time.time() * 1000)
    stale = f"{VERSIONS_DIR}/{beacon_name(now_ms + 60_000, uuid.uuid4().hex)}"
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
    store.put(f"{VERSIONS_DIR}/{beacon_name(now_ms + 120_000, uuid.uuid4().hex)}", b"")
    scan_versions(store, since=U64_MAX)
    assert carrier_beacon(store.uri)  # a later beacon: a carrier at work again


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
