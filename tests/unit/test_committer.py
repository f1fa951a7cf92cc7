"""txn_engine.Committer: group commit from many threads, each caller with its own outcome,
exactly once per caller transaction even when the group's response is lost."""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from txn_engine.commit import commit, find_transaction
from txn_engine.committer import Committer
from txn_engine.errors import (
    CommitStateUnknownError,
    IncompatibleTransactionError,
    InvalidOperationError,
)
from txn_engine.format.io import read_transaction
from txn_engine.format.naming import list_versions
from txn_engine.model import DataFile, Fragment, LanceField
from txn_engine.ops import Append, Overwrite, UpdateConfig, UpdateMap
from txn_engine.storage import MemoryStorage
from txn_engine.storage.base import Storage
from txn_engine.testing.fault_storage import fault_rules
from txn_engine.testing.faults import Fault, FaultyStorage
from txn_engine.transaction import GROUP_MEMBERS_KEY, Transaction

SCHEMA = (LanceField(0, -1, "id", "int64"),)


def frag(rows: int = 3) -> Fragment:
    return Fragment(0, (DataFile(f"{uuid.uuid4().hex}.lance", (0,), (0,), 2, 2, 100),), rows)


def created() -> MemoryStorage:
    store = MemoryStorage()
    commit(store, Transaction(0, Overwrite([frag()], SCHEMA)))
    return store


def versions(store: Storage) -> list[int]:
    return [e.version for e in list_versions(store)]


def slow(inner: Storage, seconds: float = 0.01) -> FaultyStorage:
    """Every manifest create takes a while, so callers pile up behind it."""
    store = FaultyStorage(inner)
    store.add(
        Fault(
            "put_if_absent",
            "_versions/*",
            mode="hook",
            times=None,
            hook=lambda _m, _p: time.sleep(seconds),
        )
    )
    return store


def test_many_threads_land_each_append_once_in_fewer_versions() -> None:
    inner = created()
    threads, per_thread = 16, 5
    with Committer(slow(inner)) as committer:
        barrier = threading.Barrier(threads)

        def work(_: int) -> list[tuple[str, int]]:
            barrier.wait()
            out = []
            for _ in range(per_thread):
                txn = Transaction(1, Append([frag()]))
                out.append((txn.uuid, committer.commit(txn, timeout=60).version))
            return out

        with ThreadPoolExecutor(threads) as pool:
            landed = [x for chunk in pool.map(work, range(threads)) for x in chunk]
    total = threads * per_thread
    assert len({u for u, _ in landed}) == total
    for txn_uuid, version in landed:
        assert find_transaction(inner, txn_uuid) == version  # exactly where it was reported
    history = versions(inner)
    assert history == list(range(1, len(history) + 1))
    assert len(history) - 1 < total  # grouped: fewer versions than transactions
    assert sum(n for _, n in committer.groups) == total
    assert max(n for _, n in committer.groups) > 1
    # every version's fragment count grew by exactly the group it carried
    frags = 1
    for version, n in committer.groups:
        members = read_transaction(inner, version).transaction_properties.get(GROUP_MEMBERS_KEY)
        assert (len(members.split(",")) if members else 1) == n
        frags += n
    assert frags == 1 + total


def test_other_operations_are_committed_alone_in_order() -> None:
    inner = created()
    committer = Committer(slow(inner, 0.02))
    first = committer.submit(Transaction(1, Append([frag()])))  # worker picks this up alone
    time.sleep(0.005)
    queued = [
        committer.submit(Transaction(1, Append([frag()]))),
        committer.submit(Transaction(1, Append([frag()]))),
        committer.submit(Transaction(1, UpdateConfig(config_updates=UpdateMap({"k": "v"})))),
        committer.submit(Transaction(1, Append([frag()]))),
    ]
    committer.close()
    results = [f.result() for f in (first, *queued)]
    assert results[0].version == 2
    assert results[1].version == results[2].version == 3  # the two Appends grouped
    assert results[3].version == 4  # the config change alone, after them
    assert results[4].version == 5
    assert read_transaction(inner, 4).WhichOneof("operation") == "update_config"


def test_a_conflict_in_a_group_reaches_only_the_members_it_concerns() -> None:
    inner = created()
    commit(inner, Transaction(1, Overwrite([frag()], SCHEMA)))  # 2
    committer = Committer(slow(inner, 0.02))
    blocker = committer.submit(Transaction(2, Append([frag()])))
    time.sleep(0.005)
    stale = committer.submit(Transaction(1, Append([frag()])))  # planned before the Overwrite
    fresh = committer.submit(Transaction(2, Append([frag()])))
    committer.close()
    assert blocker.result().version == 3
    with pytest.raises(IncompatibleTransactionError):
        stale.result()
    assert fresh.result().version == 4


def test_lost_group_response_is_unknown_for_each_member_and_settles_exactly_once() -> None:
    inner = created()
    store = FaultyStorage(inner)
    committer = Committer(store)
    gate = threading.Event()
    store.add(Fault("put_if_absent", "_versions/*", mode="hook", hook=lambda _m, _p: gate.wait(5)))
    head = committer.submit(Transaction(1, Append([frag()])))
    time.sleep(0.01)
    for rule in fault_rules("unknown_outcome"):  # the next create's response and read-back fail
        store.add(rule)
    members = [Transaction(1, Append([frag()])) for _ in range(3)]
    futures = [committer.submit(t) for t in members]
    gate.set()
    assert head.result(timeout=10).version == 2
    for f in futures:
        with pytest.raises(CommitStateUnknownError, match="commit the same transaction again"):
            f.result(timeout=10)
    store.clear()
    assert versions(inner) == [1, 2, 3]  # the group did land, unseen
    # committing a member again (directly, or through a committer in a new group) finds it
    again = commit(inner, members[0])
    assert (again.version, again.already_committed) == (3, True)
    newcomer = Transaction(1, Append([frag()]))
    with Committer(slow(inner)) as second:
        r1 = second.submit(Transaction(1, Append([frag()])))  # occupies the worker
        r2, r3 = second.submit(members[1]), second.submit(newcomer)
    assert r1.result().version == 4
    assert (r2.result().version, r2.result().already_committed) == (3, True)
    assert r3.result().version == 5
    assert find_transaction(inner, members[1].uuid) == 3
    assert versions(inner) == [1, 2, 3, 4, 5]


def test_closed_committer_refuses_and_non_transactions_are_refused() -> None:
    committer = Committer(created())
    with pytest.raises(InvalidOperationError, match="Transaction"):
        committer.submit("not a transaction")  # type: ignore[arg-type]
    committer.close()
    with pytest.raises(InvalidOperationError, match="closed"):
        committer.submit(Transaction(1, Append([frag()])))
    with pytest.raises(InvalidOperationError):
        Committer(MemoryStorage(), max_group=0)


def test_the_committer_leases_the_oldest_read_version_while_it_commits() -> None:
    """A cleanup running while a batch commits sees a lease on the oldest read version
    queued (and none once the batch is done)."""
    from txn_engine.leases import read_leases

    inner = created()
    commit(inner, Transaction(1, Append([frag()])))  # 2
    seen: list[list[int]] = []
    store = FaultyStorage(inner)
    store.add(
        Fault(
            "put_if_absent",
            "_versions/*",
            mode="hook",
            hook=lambda _m, _p: seen.append([x.version for x in read_leases(inner)]),
        )
    )
    with Committer(store) as committer:
        futures = committer.submit_all(
            [Transaction(2, Append([frag()])), Transaction(1, Append([frag()]))]
        )
    assert [f.result().version for f in futures] == [3, 3]
    assert seen == [[1]]
    assert read_leases(inner) == []


def test_the_committer_keeps_its_lease_from_batch_to_batch_and_releases_it_when_idle() -> None:
    """Batches whose read versions the held lease covers reuse it (one lease object written
    for several batches: taking one costs round trips); a batch reading below it takes a
    new one at its oldest read version; an idle committer releases it."""
    from txn_engine.leases import read_leases
    from txn_engine.storage import RecordingStorage

    inner = created()
    commit(inner, Transaction(1, Append([frag()])))  # 2
    rec = RecordingStorage(inner)
    with Committer(rec, idle_release=0.3) as committer:
        assert committer.commit(Transaction(2, Append([frag()]))).version == 3
        assert committer.commit(Transaction(3, Append([frag()]))).version == 4
        assert committer.commit(Transaction(4, Append([frag()]))).version == 5
        lease_writes = {c[1] for c in rec.calls if c[0] == "put" and "leases/" in c[1]}
        assert len(lease_writes) == 1
        assert [x.version for x in read_leases(inner)] == [2]
        assert committer.commit(Transaction(1, Append([frag()]))).version == 6  # below it
        assert [x.version for x in read_leases(inner)] == [1]
        deadline = time.monotonic() + 5
        while read_leases(inner) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert read_leases(inner) == []  # idle: released
        assert committer.commit(Transaction(6, Append([frag()]))).version == 7
    assert read_leases(inner) == []  # closed: released


def test_the_committer_moves_its_lease_up_after_repin_after() -> None:
    from txn_engine.leases import read_leases

    inner = created()
    with Committer(inner, repin_after=0.0) as committer:
        committer.commit(Transaction(1, Append([frag()])))  # 2
        committer.commit(Transaction(2, Append([frag()])))  # 3: re-pinned at 2
        assert [x.version for x in read_leases(inner)] == [2]


@pytest.mark.parametrize("transaction_file", [False, True])
def test_group_versions_carry_the_transaction_file_only_when_asked(
    transaction_file: bool,
) -> None:
    """``Committer(transaction_file=...)`` reaches every commit: the grouped version's
    ``.txn`` copy is there exactly when asked for, and its inline transaction always."""
    inner = created()
    with Committer(inner, transaction_file=transaction_file) as committer:
        futures = committer.submit_all([Transaction(1, Append([frag()])) for _ in range(3)])
    (version,) = {f.result().version for f in futures}
    group = read_transaction(inner, version)
    assert len(group.transaction_properties[GROUP_MEMBERS_KEY].split(",")) == 3
    copies = inner.list("_transactions")
    assert copies == ([f"{group.read_version}-{group.uuid}.txn"] if transaction_file else [])


def test_a_member_the_group_cannot_take_fails_alone() -> None:
    """A member whose data file path no reader could open made the group commit raise
    InvalidOperationError, and every member of the group got it; now the others land."""
    store = created()
    bad = Fragment(0, (DataFile("../outside.lance", (0,), (0,), 2, 2, 100),), 3)
    with Committer(store) as committer:
        futures = committer.submit_all(
            [
                Transaction(1, Append([frag()])),
                Transaction(1, Append([bad])),
                Transaction(1, Append([frag()])),
            ]
        )
    assert futures[0].result(timeout=10).version == 2
    with pytest.raises(InvalidOperationError, match="outside"):
        futures[1].result(timeout=10)
    assert futures[2].result(timeout=10).version == 3
    assert versions(store) == [1, 2, 3]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"idle_release": float("inf")},
        {"idle_release": float("nan")},
        {"idle_release": -1.0},
        {"repin_after": float("nan")},
        {"max_group": 1.5},
    ],
)
def test_settings_that_would_stop_the_worker_are_refused(kwargs: dict[str, float]) -> None:
    # idle_release=inf ended the worker thread (OverflowError in Condition.wait) after its
    # first batch: every later Future waited forever
    with pytest.raises(InvalidOperationError):
        Committer(created(), **kwargs)  # type: ignore[arg-type]


def test_a_read_version_that_is_no_version_number_is_refused_at_submit() -> None:
    # a read_version of "1" mixed with ints ended the worker (TypeError in min())
    with Committer(created()) as committer:
        with pytest.raises(InvalidOperationError, match="read_version"):
            committer.submit_all(
                [Transaction(1, Append([frag()])), Transaction("1", Append([frag()]))]
            )  # type: ignore[arg-type]
        assert committer.submit(Transaction(1, Append([frag()]))).result(timeout=10).version == 2


def test_the_worker_survives_a_batch_that_fails_outside_any_commit() -> None:
    """Whatever fails around a batch's commits (here: taking the lease) fails, or skips,
    that step only: every Future is settled and the worker takes the next batch."""
    inner = created()
    store = FaultyStorage(inner)
    store.add(Fault("put", "_txn_engine/leases/*", mode="error", times=None))
    with Committer(store) as committer:
        first = committer.submit(Transaction(1, Append([frag()])))
        assert first.result(timeout=10).version == 2  # committed without the lease
        second = committer.submit(Transaction(2, Append([frag()])))
        assert second.result(timeout=10).version == 3


def rows_at_latest(store: Storage) -> int:
    from txn_engine.dataset import Dataset

    return Dataset.open(store).count_rows()


def gated(inner: Storage) -> tuple[FaultyStorage, threading.Event, threading.Event]:
    """A store whose first manifest create waits for the returned gate: the worker is busy
    with its first batch (``entered`` is set once it is) while the test queues more."""
    store = FaultyStorage(inner)
    gate, entered = threading.Event(), threading.Event()

    def hold(_method: str, _path: str) -> None:
        entered.set()
        gate.wait(5)

    store.add(Fault("put_if_absent", "_versions/*", mode="hook", hook=hold))
    return store, gate, entered


def test_a_transaction_queued_twice_in_one_batch_lands_once_and_both_callers_get_it() -> None:
    """A caller whose commit(txn, timeout=...) timed out submits the same transaction again
    while the first copy is still queued: the group lands its rows once, both Futures give
    the one version (the copy as already committed), and the group records each uuid once."""
    inner = created()
    store, gate, entered = gated(inner)
    committer = Committer(store)
    head = committer.submit(Transaction(1, Append([frag()])))  # occupies the worker
    assert entered.wait(5)
    twice = Transaction(1, Append([frag(5)]))
    other = Transaction(1, Append([frag(7)]))
    with pytest.raises(TimeoutError):
        committer.commit(twice, timeout=0.01)
    again = committer.submit(twice)
    later = committer.submit(other)
    gate.set()
    committer.close()
    assert rows_at_latest(inner) == 3 + 3 + 5 + 7  # the rows of `twice` once
    members = read_transaction(inner, 3).transaction_properties[GROUP_MEMBERS_KEY].split(",")
    assert sorted(members) == sorted([twice.uuid, other.uuid])
    assert head.result().version == 2
    result = again.result(timeout=10)
    assert result.version == 3
    assert result.already_committed
    assert result.transaction == twice
    assert later.result().version == 3
    assert not later.result().already_committed
    assert committer.groups == [(2, 1), (3, 2)]


def test_submit_all_of_the_same_transaction_twice_lands_it_once() -> None:
    inner = created()
    txn = Transaction(1, Append([frag(4)]))
    with Committer(inner) as committer:
        futures = committer.submit_all([txn, txn])
    assert rows_at_latest(inner) == 3 + 4
    first, second = (f.result(timeout=10) for f in futures)
    assert (first.version, first.already_committed) == (2, False)
    assert (second.version, second.already_committed) == (2, True)
    assert versions(inner) == [1, 2]


def test_copies_among_other_operations_land_once() -> None:
    """The copies are not next to each other (an operation committed alone between them):
    still one landing, the later copy told where."""
    inner = created()
    txn = Transaction(1, Append([frag(4)]))
    config = Transaction(1, UpdateConfig(config_updates=UpdateMap({"k": "v"})))
    with Committer(inner) as committer:
        futures = committer.submit_all([txn, config, txn])
    results = [f.result(timeout=10) for f in futures]
    assert [r.version for r in results] == [2, 3, 2]
    assert results[2].already_committed
    assert rows_at_latest(inner) == 3 + 4


def test_a_copy_submitted_while_the_first_is_in_flight_lands_once() -> None:
    """The worker is creating the first copy's version when the second is queued: the next
    batch's commit finds the uuid landed (already_committed), alone or in a group."""
    inner = created()
    store, gate, entered = gated(inner)
    committer = Committer(store)
    txn = Transaction(1, Append([frag(4)]))
    first = committer.submit(txn)
    assert entered.wait(5)  # the worker is in the create
    copy, newcomer = committer.submit_all([txn, Transaction(1, Append([frag(6)]))])
    gate.set()
    committer.close()
    assert (first.result().version, first.result().already_committed) == (2, False)
    assert (copy.result().version, copy.result().already_committed) == (2, True)
    assert newcomer.result().version == 3
    assert rows_at_latest(inner) == 3 + 4 + 6
    assert versions(inner) == [1, 2, 3]


def test_a_copy_submitted_after_its_group_landed_is_found_already_committed() -> None:
    inner = created()
    txn = Transaction(1, Append([frag(4)]))
    with Committer(inner) as committer:
        landed = committer.submit_all([txn, Transaction(1, Append([frag()]))])
        assert {f.result(timeout=10).version for f in landed} == {2}
        again = committer.commit(txn, timeout=10)
        assert (again.version, again.already_committed) == (2, True)
        # and as a member of the next group: the others of that group still land once
        futures = committer.submit_all([txn, Transaction(2, Append([frag(2)]))])
        assert (futures[0].result(timeout=10).version, futures[0].result().already_committed) == (
            2,
            True,
        )
        assert futures[1].result(timeout=10).version == 3
    assert rows_at_latest(inner) == 3 + 4 + 3 + 2
    assert versions(inner) == [1, 2, 3]


def test_a_different_transaction_with_a_queued_uuid_is_refused() -> None:
    """Two different transactions under one uuid cannot both land exactly once: the copy
    that differs from the one queued first gets InvalidOperationError, the first lands."""
    inner = created()
    txn = Transaction(1, Append([frag(4)]))
    forged = Transaction(1, Append([frag(9)]), uuid=txn.uuid)
    with Committer(inner) as committer:
        futures = committer.submit_all([txn, forged])
    assert futures[0].result(timeout=10).version == 2
    with pytest.raises(InvalidOperationError, match="uuid"):
        futures[1].result(timeout=10)
    assert rows_at_latest(inner) == 3 + 4


def test_a_cancelled_first_copy_leaves_the_second_to_land() -> None:
    inner = created()
    store, gate, entered = gated(inner)
    committer = Committer(store)
    head = committer.submit(Transaction(1, Append([frag()])))
    assert entered.wait(5)
    txn = Transaction(1, Append([frag(4)]))
    first = committer.submit(txn)
    assert first.cancel()
    second = committer.submit(txn)
    gate.set()
    committer.close()
    assert head.result().version == 2
    assert (second.result(timeout=10).version, second.result().already_committed) == (3, False)
    assert rows_at_latest(inner) == 3 + 3 + 4
