"""A commit under a lease: the lease is checked right before each manifest create and once
the create returns, with a clock the test controls (issue 43, finding 2: a writer stalled
past its lease must not land a version whose files a cleanup may have removed)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from txn_engine.commit import commit, replan_and_commit
from txn_engine.dataset import Dataset
from txn_engine.errors import (
    CommitStateUnknownError,
    InvalidOperationError,
    LeaseExpiredError,
)
from txn_engine.format.naming import list_versions
from txn_engine.leases import LEASES_DIR, Lease
from txn_engine.model import DataFile, Fragment, LanceField
from txn_engine.ops import Append, Overwrite
from txn_engine.retention import cleanup
from txn_engine.storage import MemoryStorage
from txn_engine.testing.clocks import ManualClock
from txn_engine.transaction import Transaction

SCHEMA = (LanceField(0, -1, "id", "int64"),)


class _Store(MemoryStorage):
    """A store whose manifest creates take ``create_delay`` seconds of ``clock`` (a request
    that sits in a queue) and that runs ``on_create`` (another writer) right after one."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__()
        self.clock = clock
        self.create_delay = 0.0
        self.on_create: list[Transaction] = []

    def put_if_absent(self, path: str, data: bytes) -> None:
        if path.startswith("_versions/"):
            self.clock.advance(self.create_delay)
        super().put_if_absent(path, data)
        if path.startswith("_versions/") and self.on_create:
            other = self.on_create.pop()
            commit(self, other)


def _frag(store: MemoryStorage) -> Fragment:
    name = f"{uuid.uuid4().hex}.lance"
    store.put(f"data/{name}", b"x")
    return Fragment(0, (DataFile(name, (0,), (0,), 2, 2, 1),), 1)


def _table() -> tuple[_Store, ManualClock]:
    clock = ManualClock()
    store = _Store(clock)
    commit(store, Transaction(0, Overwrite([_frag(store)], SCHEMA)))
    return store, clock


def _versions(store: MemoryStorage) -> list[int]:
    return [e.version for e in list_versions(store)]


def test_a_writer_that_stalled_past_its_lease_creates_nothing() -> None:
    store, clock = _table()
    held = Lease(store, 1, ttl=10.0, owner="w", renew_in_background=False, clock=clock)
    txn = Transaction(1, Append([_frag(store)]))
    clock.advance(11.0)  # paused after writing its data file
    with pytest.raises(LeaseExpiredError, match="re-plan"):
        commit(store, txn, lease=held)
    assert _versions(store) == [1]


def test_a_writer_within_its_lease_commits_and_the_check_renews_a_worn_lease() -> None:
    store, clock = _table()
    held = Lease(store, 1, ttl=10.0, owner="w", renew_in_background=False, clock=clock)
    clock.advance(7.0)  # less than half left: renewed before the create
    result = commit(store, Transaction(1, Append([_frag(store)])), lease=held)
    assert result.version == 2
    assert held.remaining() == pytest.approx(10.0)


def test_a_create_that_returns_after_the_lease_ran_out_is_withdrawn() -> None:
    store, clock = _table()
    held = Lease(store, 1, ttl=10.0, owner="w", renew_in_background=False, clock=clock)
    store.create_delay = 11.0  # sent in time, answered after the lease ran out
    with pytest.raises(LeaseExpiredError, match="withdrawn"):
        commit(store, Transaction(1, Append([_frag(store)])), lease=held)
    assert _versions(store) == [1]


def test_one_that_another_version_was_built_on_cannot_be_withdrawn() -> None:
    store, clock = _table()
    held = Lease(store, 1, ttl=10.0, owner="w", renew_in_background=False, clock=clock)
    store.create_delay = 11.0
    store.on_create = [Transaction(2, Append([_frag(store)]))]
    with pytest.raises(CommitStateUnknownError, match="verify"):
        commit(store, Transaction(1, Append([_frag(store)])), lease=held)
    assert _versions(store) == [1, 2, 3]


def test_a_lease_above_the_read_version_protects_nothing_and_is_refused() -> None:
    store, clock = _table()
    commit(store, Transaction(1, Append([_frag(store)])))
    held = Lease(store, 2, ttl=10.0, owner="w", renew_in_background=False, clock=clock)
    with pytest.raises(InvalidOperationError, match="does not protect"):
        commit(store, Transaction(1, Append([_frag(store)])), lease=held)


def test_the_stalled_writer_of_the_issue_loses_nothing_acknowledged() -> None:
    """Finding 2 as reported: a writer leased its read version, wrote its data file, paused
    past its lease while a cleanup with no retention ran; it must not land a version whose
    data file the cleanup removed."""
    store, clock = _table()
    clock.now_ns = 1_900_000_000 * 10**9  # after the manifests' own timestamps
    held = Lease(store, 1, ttl=10.0, owner="w", renew_in_background=False, clock=clock)
    frag = _frag(store)
    clock.advance(30.0)  # SIGSTOP
    cleanup(store, older_than=timedelta(0), retention_orphans=timedelta(0), progress=False,
            clock=clock)  # fmt: skip
    assert not store.exists(f"data/{frag.files[0].path}")  # the cleaner judged it an orphan
    with pytest.raises(LeaseExpiredError):
        commit(store, Transaction(1, Append([frag])), lease=held)
    assert _versions(store) == [1]


def test_replan_and_commit_plans_under_a_lease_it_releases_after() -> None:
    store, _ = _table()
    seen: list[list[str]] = []

    def plan(snapshot: Dataset) -> Transaction:
        seen.append(list(store.list(LEASES_DIR)))
        return Transaction(snapshot.version, Append([_frag(store)]))

    result = replan_and_commit(store, plan, lease_ttl=60.0)
    assert result.version == 2
    assert len(seen) == 1
    assert len(seen[0]) == 1
    assert store.list(LEASES_DIR) == []


def test_a_plan_under_a_lease_reads_its_snapshot_where_the_lease_found_it() -> None:
    """The lease looks the pinned version up once it is written (the protocol's check);
    the snapshot is read from that entry: the version is not looked up a second time."""
    from txn_engine.storage import RecordingStorage

    store, _ = _table()
    recorded = RecordingStorage(store)
    lookups: list[int] = []

    def plan(snapshot: Dataset) -> Transaction:
        lookups.append(sum(1 for c in recorded.calls if c[0] == "exists"))
        return Transaction(snapshot.version, Append([_frag(store)]))

    result = replan_and_commit(recorded, plan, lease_ttl=60.0)
    assert result.version == 2
    assert lookups == [1]  # the lease's check of version 1, none for the snapshot
    held = Lease(store, None, ttl=60.0, owner="test", renew_in_background=False)
    assert held.entry is not None
    assert held.entry.version == held.version == 2
    held.release()
