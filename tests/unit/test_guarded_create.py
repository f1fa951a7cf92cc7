"""Guarded creates: on an object store each manifest create runs beside a listing.

On a store that serves requests concurrently (``read_concurrency`` > 1) and decides versions
with its own create-if-absent, :func:`txn_engine.commit.commit` starts a guard listing of
``_versions/``, the ``.txn`` copy and the manifest create together; the listing then decides
the lineage check. With ``base=`` a Dataset the first attempt does not list first. These tests
pin the requests each case makes and the cases the guard decides.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Iterator, Sequence

import pytest

from txn_engine.commit import CommitResult, commit
from txn_engine.dataset import Dataset
from txn_engine.errors import CommitStateUnknownError, HistoryUnavailableError, StorageError
from txn_engine.format.io import latest_version
from txn_engine.format.naming import NamingScheme, list_versions, manifest_name
from txn_engine.model import DataFile, Fragment, LanceField
from txn_engine.ops import Append, Overwrite
from txn_engine.retry import RetryPolicy
from txn_engine.storage import MemoryStorage, RecordingStorage
from txn_engine.storage.base import Storage
from txn_engine.transaction import Transaction

SCHEMA = (LanceField(0, -1, "id", "int64"),)


class ObjectStore(MemoryStorage):
    """An in-memory store that declares concurrent requests, like an object store."""

    read_concurrency = 8


def frag() -> Fragment:
    return Fragment(0, (DataFile(f"{uuid.uuid4().hex}.lance", (0,), (0,), 2, 2, 100),), 10)


def append(store: Storage) -> CommitResult:
    return commit(store, Transaction(latest_version(store).version, Append([frag()])))


def versions(store: Storage) -> list[int]:
    return [e.version for e in list_versions(store)]


def remove(store: Storage, version: int) -> None:
    store.delete(f"_versions/{manifest_name(version, NamingScheme.V2)}")


def table(store: Storage, appends: int = 0) -> None:
    commit(store, Transaction(0, Overwrite([frag()], SCHEMA)))
    for _ in range(appends):
        append(store)


def names(rec: RecordingStorage) -> list[str]:
    return sorted(c[0] for c in rec.calls)


def test_warm_uncontended_commit_is_one_round_trip_of_two_requests() -> None:
    """base= a Dataset: the listing and the manifest create, nothing else (no read, no
    existence check, no ``.txn`` copy by default); the listing was started first."""
    inner = ObjectStore()
    table(inner)
    rec = RecordingStorage(inner)
    r = commit(rec, Transaction(1, Append([frag()])), base=Dataset.open(inner))
    assert r.version == 2
    assert names(rec) == ["list", "put_if_absent"]
    assert rec.calls[0][0] == "list"
    assert inner.list("_transactions") == []


def test_warm_uncontended_commit_with_the_copy_is_one_round_trip_of_three_requests() -> None:
    """``transaction_file=True``: the ``.txn`` copy goes out beside the listing and the
    create (not before them)."""
    inner = ObjectStore()
    table(inner)
    rec = RecordingStorage(inner)
    txn = Transaction(1, Append([frag()]))
    r = commit(rec, txn, base=Dataset.open(inner), transaction_file=True)
    assert r.version == 2
    assert names(rec) == ["list", "put", "put_if_absent"]
    assert rec.calls[0][0] == "list"
    assert inner.exists(f"_transactions/1-{r.transaction.uuid}.txn")


def test_cold_uncontended_commit_lists_reads_then_creates_beside_a_listing() -> None:
    """From a URI: list, read the latest manifest, then the guarded create (listing, copy,
    create in flight together); no existence check after it."""
    inner = ObjectStore()
    table(inner)
    rec = RecordingStorage(inner)
    r = commit(rec, Transaction(1, Append([frag()])))
    assert r.version == 2
    assert rec.calls[0][0] == "list"
    assert rec.counts["list"] == 2
    assert rec.counts.get("exists", 0) == 0
    assert rec.counts["put_if_absent"] == 1
    assert rec.counts.get("put", 0) == 0  # no .txn copy by default
    assert sorted(c[0] for c in rec.calls[-2:]) == ["list", "put_if_absent"]


@pytest.mark.parametrize("k", [1, 3, 8])
def test_k_behind_costs_the_lost_create_and_the_reads_of_the_new_versions(k: int) -> None:
    """A Dataset base k versions behind: the direct create loses, its guard listing already
    shows the winners, so the next attempt starts from it at once (no backoff sleep, no
    third listing of the versions) and reads each intervening version once. Another writer
    is active, so one listing of the offers runs beside the retry (``docs/architecture.md``,
    *Offers*); a stale base alone makes no offer."""
    inner = ObjectStore()
    table(inner)
    base = Dataset.open(inner)
    for _ in range(k):
        append(inner)
    rec = RecordingStorage(inner)
    slept: list[float] = []
    r = commit(
        rec,
        Transaction(1, Append([frag()])),
        base=base,
        retry_policy=RetryPolicy(sleep=slept.append),
    )
    assert r.version == k + 2
    assert r.attempts == 2
    assert slept == []
    deadline = time.monotonic() + 5  # the offers listing runs in a thread of its own
    while rec.counts.get("list", 0) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    listed = [c[1] for c in rec.calls if c[0] == "list"]
    assert sorted(listed) == ["_txn_engine_offers", "_versions", "_versions"]  # 2 guards
    assert rec.counts["put_if_absent"] == 2
    assert rec.counts.get("put", 0) == 0  # no offer, no .txn copy
    reads = {c[1] for c in rec.calls if c[0] in ("get", "get_range", "size")}
    assert reads <= {f"_versions/{manifest_name(v, NamingScheme.V2)}" for v in range(2, k + 2)}
    assert rec.counts.get("exists", 0) == 0


class Slow(ObjectStore):
    """Every request takes ``delay`` seconds; records the most requests in flight."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()

    def _slow(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        time.sleep(self.delay)
        with self._lock:
            self.in_flight -= 1

    def list(self, prefix: str) -> Sequence[str]:
        self._slow()
        return super().list(prefix)

    def put(self, path: str, data: bytes) -> None:
        self._slow()
        super().put(path, data)

    def put_if_absent(self, path: str, data: bytes) -> None:
        self._slow()
        super().put_if_absent(path, data)


def test_the_three_requests_are_in_flight_together() -> None:
    inner = Slow(0.0)
    table(inner)
    base = Dataset.open(inner)
    inner.delay = 0.05
    inner.max_in_flight = 0
    commit(inner, Transaction(1, Append([frag()])), base=base, transaction_file=True)
    assert inner.max_in_flight == 3
    inner.max_in_flight = 0
    commit(inner, Transaction(2, Append([frag()])), base=Dataset.open(inner))
    assert inner.max_in_flight == 2  # no copy: the listing and the create


class ListAfterCreate(ObjectStore):
    """The listing is served only after the manifest create landed (case c)."""

    def __init__(self) -> None:
        super().__init__()
        self.created = threading.Event()
        self.armed = False

    def list(self, prefix: str) -> Sequence[str]:
        if self.armed:
            assert self.created.wait(5)
        return super().list(prefix)

    def put_if_absent(self, path: str, data: bytes) -> None:
        super().put_if_absent(path, data)
        if path.startswith("_versions/"):
            self.created.set()


def test_a_listing_that_shows_our_version_falls_back_to_the_existence_check() -> None:
    """The guard listing came after our create: it shows a manifest at our version, which
    may be ours or one a cleanup removed since; the existence check of the next version
    decides (nothing there: accepted)."""
    inner = ListAfterCreate()
    table(inner)
    base = Dataset.open(inner)
    inner.created.clear()
    inner.armed = True
    rec = RecordingStorage(inner)
    r = commit(rec, Transaction(1, Append([frag()])), base=base)
    assert r.version == 2
    assert ("exists", f"_versions/{manifest_name(3, NamingScheme.V2)}") in rec.calls


def test_a_stale_base_landing_below_a_gap_is_withdrawn() -> None:
    """Base at v2; v3, v4, v5 land and a cleanup removes 1-4 (keeping the latest): the
    direct create of v3 succeeds in the freed slot. An existence check of v4 finds nothing;
    the guard listing shows v5 above a gap, so ours is withdrawn and nothing is left."""
    store = ObjectStore()
    table(store, appends=1)  # 1, 2
    base = Dataset.open(store)
    for _ in range(3):
        append(store)  # 3, 4, 5
    for v in (1, 2, 3, 4):
        remove(store, v)
    mine = Transaction(2, Append([frag()]))
    with pytest.raises(HistoryUnavailableError, match="withdrawn"):
        commit(store, mine, base=base, transaction_file=True)
    assert versions(store) == [5]
    assert store.list("_transactions") == []  # the copy went out, and was removed


def test_the_copies_of_lost_attempts_are_removed_and_the_landed_one_kept() -> None:
    """The copy started beside a lost create has the landed transaction's name (an Append
    is not rebased): one file, the landed one; a failed commit leaves none."""
    store = ObjectStore()
    table(store)
    base = Dataset.open(store)
    append(store)  # 2: our direct create of 2 loses
    mine = Transaction(1, Append([frag()]))
    r = commit(store, mine, base=base, transaction_file=True)
    assert r.version == 3
    assert store.list("_transactions") == [f"1-{mine.uuid}.txn"]


def test_local_style_stores_list_after_the_create() -> None:
    """Without concurrent requests (local disk), the create is not guarded: with a Dataset
    base the create comes first and one listing after it checks it (then the copy, when
    asked for); without a base: list, read, create, then the existence check."""
    inner = MemoryStorage()
    table(inner)
    rec = RecordingStorage(inner)
    commit(rec, Transaction(1, Append([frag()])), base=Dataset.open(inner))
    assert [c[0] for c in rec.calls] == ["put_if_absent", "list"]
    rec = RecordingStorage(inner)
    txn = Transaction(2, Append([frag()]))
    commit(rec, txn, base=Dataset.open(inner), transaction_file=True)
    assert [c[0] for c in rec.calls] == ["put_if_absent", "list", "put"]
    rec = RecordingStorage(inner)
    commit(rec, Transaction(3, Append([frag()])))
    assert [c[0] for c in rec.calls] == ["list", "get_range", "put_if_absent", "exists"]


class FailingLists(ObjectStore):
    """The first ``failures`` listings fail (a storage error)."""

    def __init__(self) -> None:
        super().__init__()
        self.failures = 0
        self.lists = 0

    def list(self, prefix: str) -> Sequence[str]:
        self.lists += 1
        if self.failures > 0:
            self.failures -= 1
            raise StorageError("list failed")
        return super().list(prefix)


def test_a_failed_guard_listing_is_taken_again_after_the_create() -> None:
    """Stale base at v2; v3, v4, v5 land and 1-4 are removed. The guard listing fails: the
    existence check alone (v4 absent) would accept ours in the freed slot 3; the listing
    taken again after the create shows v5 above a gap: withdrawn."""
    store = FailingLists()
    table(store, appends=1)
    base = Dataset.open(store)
    for _ in range(3):
        append(store)
    for v in (1, 2, 3, 4):
        remove(store, v)
    store.failures = 1
    with pytest.raises(HistoryUnavailableError, match="withdrawn"):
        commit(store, Transaction(2, Append([frag()])), base=base)
    assert versions(store) == [5]


def test_no_listing_at_all_after_a_landed_create_is_an_unknown_outcome() -> None:
    """Every listing fails after the create landed: nothing proves the lineage, so the
    outcome is unknown (not success, not 'nothing landed'); committing the same transaction
    again settles it exactly once."""
    store = FailingLists()
    table(store)
    base = Dataset.open(store)
    mine = Transaction(1, Append([frag()]))
    store.failures = 4  # the guard listing and the three taken after the create
    with pytest.raises(CommitStateUnknownError):
        commit(store, mine, base=base)
    again = commit(store, mine)
    assert again.already_committed
    assert again.version == 2
    assert versions(store) == [1, 2]


def test_a_failed_guard_listing_then_a_good_one_accepts() -> None:
    store = FailingLists()
    table(store)
    base = Dataset.open(store)
    store.failures, store.lists = 1, 0
    r = commit(store, Transaction(1, Append([frag()])), base=base)
    assert r.version == 2
    assert store.lists == 2  # the failed guard listing and the one after the create


class CompetitorFirst(ObjectStore):
    """Another writer's Append lands right before our first manifest create (after our
    guard listing was served)."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False

    def put_if_absent(self, path: str, data: bytes) -> None:
        if self.armed and path.startswith("_versions/"):
            self.armed = False
            append(self)
        super().put_if_absent(path, data)


def test_a_race_lost_just_after_the_listing_is_retried_at_once_on_the_winner() -> None:
    """The winner landed after our guard listing: its manifest, read back while settling,
    is the base of the next attempt at once: no backoff sleep (only the rank wait of a
    first lost race, 5 steps of 0.1 x the attempt's duration), no listing before the
    second create (its own guard listing runs beside it)."""
    store = CompetitorFirst()
    table(store)
    base = Dataset.open(store)
    store.armed = True
    rec = RecordingStorage(store)
    slept: list[float] = []
    start = time.monotonic()
    r = commit(
        rec,
        Transaction(1, Append([frag()])),
        base=base,
        # offers (their own background listing and put) are tested in test_offers.py
        retry_policy=RetryPolicy(sleep=slept.append, offer_after=None),
    )
    elapsed = time.monotonic() - start
    assert r.version == 3
    assert r.attempts == 2
    assert len(slept) == 1
    assert 0 < slept[0] <= 0.5 * elapsed  # the rank wait, not a backoff window
    creates = [i for i, c in enumerate(rec.calls) if c[0] == "put_if_absent"]
    assert len(creates) == 2
    between = [c[0] for c in rec.calls[creates[0] + 1 : creates[1]]]
    assert between.count("list") <= 1  # only the second attempt's guard listing
    assert rec.counts["list"] == 2
    assert versions(store) == [1, 2, 3]


class OrderedRequests(ObjectStore):
    """Records the order in which the listing and the manifest create reach the store."""

    def __init__(self) -> None:
        super().__init__()
        self.order: list[str] = []

    def list(self, prefix: str) -> Sequence[str]:
        self.order.append("list")
        return super().list(prefix)

    def list_ordered(self, prefix: str) -> Iterator[str]:
        self.order.append("list")
        return iter(sorted(MemoryStorage.list(self, prefix)))

    def put_if_absent(self, path: str, data: bytes) -> None:
        if path.startswith("_versions/"):
            self.order.append("create")
        super().put_if_absent(path, data)


def test_the_guard_listing_is_sent_before_the_create() -> None:
    """The guard listing is started, and on its way, before the create is sent: over many
    commits the listing always reaches the store first. (A listing answered after our
    create shows our own version and costs an existence check, case c. On S3 + 25 ms the
    create's short wait for the listing to be sent took those checks from 9 of 31 warm
    commits to 0 of 31, p90 73 -> 46 ms; in memory the order holds without it, so this
    test pins the order, not the wait.)"""
    store = OrderedRequests()
    table(store)
    for _ in range(30):
        base = Dataset.open(store)
        store.order.clear()
        commit(store, Transaction(base.version, Append([frag()])), base=base)
        assert store.order[:2] == ["list", "create"], store.order


class CompetitorFirstTimes(ObjectStore):
    """Another writer's Append lands right before each of our next ``times`` manifest
    creates (after our guard listing was served): we lose ``times`` races in a row."""

    def __init__(self) -> None:
        super().__init__()
        self.times = 0
        self.competing = False

    def put_if_absent(self, path: str, data: bytes) -> None:
        if self.times and path.startswith("_versions/") and not self.competing:
            self.times -= 1
            self.competing = True  # the competitor's own create does not compete
            try:
                append(self)
            finally:
                self.competing = False
        super().put_if_absent(path, data)


def _lose_races(
    times: int, policy: RetryPolicy
) -> tuple[CommitResult, RecordingStorage, list[int]]:
    """Commit one Append from a Dataset base while other writers win our next ``times``
    races; the result, the recorded requests and the versions afterwards."""
    store = CompetitorFirstTimes()
    table(store)
    base = Dataset.open(store)
    store.times = times
    rec = RecordingStorage(store)
    r = commit(rec, Transaction(1, Append([frag()])), base=base, retry_policy=policy)
    return r, rec, versions(store)


def test_repeated_lost_races_are_chased_with_shrinking_rank_waits() -> None:
    """Seven races lost in a row, each to a winner read back while settling: every retry
    builds on that winner at once, waiting only its rank (shrinking with each loss: a
    writer that has lost more sends its create sooner than writers that lost less), never
    a backoff window, and no listing is taken besides the guard listings."""
    slept: list[float] = []
    r, rec, landed = _lose_races(7, RetryPolicy(sleep=slept.append, offer_after=None))
    assert r.version == 9
    assert r.attempts == 8
    assert len(slept) == 5  # ranks 5..1 steps; from the 6th loss on no wait
    assert all(a > b for a, b in itertools.pairwise(slept))
    assert rec.counts["list"] == 8  # one guard listing per create
    assert landed == list(range(1, 10))


def test_limited_chases_fall_back_to_the_backoff_schedule() -> None:
    """``RetryPolicy(chases=3, chase_ranks=0)`` (the schedule before the ranked chase):
    after three lost races the loop sleeps the backoff schedule and lists again."""
    slept: list[float] = []
    policy = RetryPolicy(sleep=slept.append, chases=3, chase_ranks=0, randbelow=lambda n: 1)
    r, rec, landed = _lose_races(5, policy)
    assert r.version == 7
    assert r.attempts == 6
    assert len(slept) == 3  # the 3rd, 4th and 5th losses back off
    assert rec.counts["list"] > 6  # after a backoff the attempt lists first
    assert landed == list(range(1, 8))
