"""Leases (txn_engine.leases): acquire, renew, expire, release, version None = latest."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Sequence

import pytest

import txn_engine as te
from txn_engine.commit import commit
from txn_engine.errors import (
    DatasetNotFoundError,
    InvalidStorageArgumentError,
    LeaseExpiredError,
    VersionNotFoundError,
)
from txn_engine.format.io import resolve_version
from txn_engine.format.naming import NamingScheme, manifest_name
from txn_engine.leases import (
    CLEANING_DIR,
    LEASES_DIR,
    Lease,
    LeaseInfo,
    lease,
    marker_name,
    read_leases,
)
from txn_engine.model import DataFile, Fragment, LanceField
from txn_engine.ops import Append, Overwrite
from txn_engine.storage import MemoryStorage
from txn_engine.storage.base import Storage
from txn_engine.testing.clocks import ManualClock
from txn_engine.transaction import Transaction

SCHEMA = (LanceField(0, -1, "id", "int64"),)


def _frag() -> Fragment:
    return Fragment(0, (DataFile(f"{uuid.uuid4().hex}.lance", (0,), (0,), 2, 2, 10),), 5)


def _dataset(versions: int = 3) -> MemoryStorage:
    store = MemoryStorage()
    commit(store, Transaction(0, Overwrite([_frag()], SCHEMA)))
    for v in range(1, versions):
        commit(store, Transaction(v, Append([_frag()])))
    return store


def _lease_objects(store: Storage) -> list[dict[str, object]]:
    return [json.loads(store.get(f"{LEASES_DIR}/{n}")) for n in store.list(LEASES_DIR)]


def test_lease_writes_the_contract_object_and_deletes_it_on_exit() -> None:
    store = _dataset(3)
    before = time.time_ns()
    with te.lease(store, 2, ttl=60.0, owner="job-7") as held:
        assert isinstance(held, Lease)
        assert held.version == 2
        (obj,) = _lease_objects(store)
        assert set(obj) == {
            "version", "created_at_ns", "expires_at_ns", "ttl_ns", "owner", "writes", "cleanups",
        }  # fmt: skip
        assert obj["version"] == 2
        assert obj["ttl_ns"] == 60 * 10**9
        assert obj["writes"] is True
        assert obj["cleanups"] == []  # no cleanup was running
        assert obj["owner"] == "job-7"
        created, expires = obj["created_at_ns"], obj["expires_at_ns"]
        assert isinstance(created, int)
        assert isinstance(expires, int)
        assert before <= created <= expires
        assert expires - created >= 59 * 10**9
        assert held.path.startswith(f"{LEASES_DIR}/")
        assert held.path.endswith(".json")
    assert store.list(LEASES_DIR) == []
    assert held.released


def test_version_none_resolves_to_latest_and_is_recorded() -> None:
    store = _dataset(4)
    with te.lease(store, ttl=30.0) as held:
        assert held.version == 4
        assert _lease_objects(store)[0]["version"] == 4
        commit(store, Transaction(4, Append([_frag()])))
        assert held.version == 4  # pinned at acquisition, not following the latest


def test_missing_version_and_missing_dataset_are_typed_errors() -> None:
    store = _dataset(2)
    with pytest.raises(VersionNotFoundError):
        te.lease(store, 9)
    assert store.list(LEASES_DIR) == []
    with pytest.raises(DatasetNotFoundError):
        te.lease(MemoryStorage())
    with pytest.raises(InvalidStorageArgumentError):
        te.lease(store, 1, ttl=0)


def test_renew_pushes_expiry_forward() -> None:
    store = _dataset(2)
    held = Lease(store, 1, ttl=30.0, owner="t", renew_in_background=False)
    first = held.expires_at_ns
    time.sleep(0.01)
    held.renew()
    assert held.expires_at_ns > first
    assert _lease_objects(store)[0]["expires_at_ns"] == held.expires_at_ns
    held.release()
    held.release()  # idempotent
    assert store.list(LEASES_DIR) == []
    with pytest.raises(LeaseExpiredError):
        held.renew()


def test_background_thread_renews_every_third_of_ttl() -> None:
    store = _dataset(2)
    with te.lease(store, 1, ttl=0.3) as held:
        first = held.expires_at_ns
        deadline = time.monotonic() + 5
        while held.expires_at_ns == first and time.monotonic() < deadline:
            time.sleep(0.02)
        assert held.expires_at_ns > first
        # still live well past the first expiry because it keeps renewing
        time.sleep(0.45)
        assert not held.expired
        (info,) = read_leases(store)
        assert info.live(time.time_ns())


def test_a_late_renewal_expires_the_lease() -> None:
    store = _dataset(2)
    held = Lease(store, 1, ttl=0.05, owner="t", renew_in_background=False)
    time.sleep(0.08)
    (info,) = read_leases(store)
    assert not info.live(time.time_ns())
    with pytest.raises(LeaseExpiredError):
        held.renew()
    assert held.expired
    with pytest.raises(LeaseExpiredError):
        held.renew()
    held.release()


def test_read_leases_reports_malformed_objects() -> None:
    store = _dataset(1)
    store.put(f"{LEASES_DIR}/junk.json", b"{not json")
    store.put(f"{LEASES_DIR}/neg.json", b'{"version": -1, "created_at_ns": 1, "expires_at_ns": 2}')
    store.put(f"{LEASES_DIR}/readme.txt", b"ignored")
    infos = {i.path.rsplit("/", 1)[1]: i for i in read_leases(store)}
    assert set(infos) == {"junk.json", "neg.json"}
    assert all(i.version is None and i.error for i in infos.values())
    assert not infos["junk.json"].live(0)


def test_lease_info_liveness() -> None:
    info = LeaseInfo("p", 3, 10, 100, "o")
    assert info.live(99)
    assert not info.live(100)


class _CleanedBetween(MemoryStorage):
    """Deletes version ``victim``'s manifest right after the first lease object is written
    (a cleaner racing the acquisition)."""

    def __init__(self, victim_path: str) -> None:
        super().__init__()
        self.victim_path = victim_path
        self.fired = False

    def put(self, path: str, data: bytes) -> None:
        super().put(path, data)
        if path.startswith(LEASES_DIR) and not self.fired:
            self.fired = True
            self.delete(self.victim_path)


def test_acquisition_rechecks_the_version_after_writing_the_lease() -> None:
    from txn_engine.format.io import resolve_version

    base = _dataset(3)
    victim = resolve_version(base, 2).path
    store = _CleanedBetween(victim)
    for name in base.list("_versions"):
        store.put(f"_versions/{name}", base.get(f"_versions/{name}"))
    store.fired = False
    with pytest.raises(VersionNotFoundError):
        Lease(store, 2, ttl=10.0, owner="t", renew_in_background=False)
    assert store.list(LEASES_DIR) == []  # the useless lease was removed


def test_acquisition_of_latest_retries_when_the_latest_is_cleaned_meanwhile() -> None:
    from txn_engine.format.io import resolve_version

    base = _dataset(3)
    store = _CleanedBetween(resolve_version(base, 3).path)
    for name in base.list("_versions"):
        store.put(f"_versions/{name}", base.get(f"_versions/{name}"))
    store.fired = False
    held = Lease(store, None, ttl=10.0, owner="t", renew_in_background=False)
    assert held.version == 2
    assert len(store.list(LEASES_DIR)) == 1
    held.release()


def _lease_threads() -> list[str]:
    import threading

    return [t.name for t in threading.enumerate() if t.name.startswith("txn_engine-lease")]


def test_one_shared_thread_renews_every_background_lease() -> None:
    # a thread per lease cost as much as the rest of a small writer-API commit
    store = _dataset(2)
    held = [Lease(store, 1, ttl=0.3, owner=f"t{i}") for i in range(12)]
    try:
        assert len(_lease_threads()) == 1
        first = [h.expires_at_ns for h in held]
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(
            h.expires_at_ns == f for h, f in zip(held, first, strict=True)
        ):
            time.sleep(0.02)
        assert all(h.expires_at_ns > f for h, f in zip(held, first, strict=True))
        time.sleep(0.45)  # past every first expiry: all still live
        assert all(info.live(time.time_ns()) for info in read_leases(store))
        assert not any(h.expired for h in held)
    finally:
        for h in held:
            h.release()
    assert store.list(LEASES_DIR) == []
    time.sleep(0.25)  # a released lease is never renewed (its object is not re-created)
    assert store.list(LEASES_DIR) == []
    assert len(_lease_threads()) == 1


def test_a_lease_released_while_its_renewal_runs_leaves_no_object() -> None:
    import threading

    class _SlowPut(MemoryStorage):
        """The renewal's write blocks until the test has called release."""

        def __init__(self) -> None:
            super().__init__()
            self.in_put = threading.Event()
            self.go = threading.Event()
            self.block = False

        def put(self, path: str, data: bytes) -> None:
            if self.block and path.startswith(LEASES_DIR):
                self.in_put.set()
                self.go.wait(5)
            super().put(path, data)

    store = _SlowPut()
    commit(store, Transaction(0, Overwrite([_frag()], SCHEMA)))
    held = Lease(store, 1, ttl=0.15, owner="t")
    store.block = True
    assert store.in_put.wait(5)  # the shared renewer is inside a renewal write
    releasing = threading.Thread(target=held.release)
    releasing.start()
    time.sleep(0.05)
    store.go.set()  # the renewal's write lands, then release deletes the object
    releasing.join(5)
    assert held.released
    store.block = False
    time.sleep(0.2)
    assert store.list(LEASES_DIR) == []


def test_a_forked_child_renews_its_own_leases_even_if_the_fork_caught_the_renewer() -> None:
    import importlib
    import os
    import signal

    lease_module = importlib.import_module("txn_engine.leases")  # (te.lease is the function)

    store = _dataset(2)
    with Lease(store, 1, ttl=30.0, owner="parent"):  # the parent's renewer is running
        renewer = lease_module._RENEWER
        with renewer._cond:  # the fork happens while the renewer holds its lock
            pid = os.fork()
            if pid == 0:  # child: a background lease must not wait for the parent's lock
                signal.alarm(10)
                try:
                    with Lease(store, 1, ttl=0.3, owner="child") as held:
                        first = held.expires_at_ns
                        time.sleep(0.4)
                        os._exit(0 if held.expires_at_ns > first else 2)
                except BaseException:
                    os._exit(3)
        _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status)
    assert os.WEXITSTATUS(status) == 0


@pytest.mark.parametrize("ttl", [float("inf"), float("nan"), 0.0, -1.0, 315_576_000.5, 1e30])
def test_a_ttl_no_lease_can_have_is_refused(ttl: float) -> None:
    # inf raised OverflowError (int(inf) for the expiry); 1e30 wrote an expiry 10**39 ns
    # away, a pin that never ends
    store = _dataset()
    with pytest.raises(InvalidStorageArgumentError, match="lease ttl must be"):
        lease(store, 1, ttl=ttl)
    assert read_leases(store) == []
    with lease(store, 1, ttl=315_576_000.0) as held:  # ten years: the longest
        assert [info.version for info in read_leases(store)] == [held.version]


# ---- time as an input: the holder's monotonic clock, store time, markers ------------------


class _SlowPuts(MemoryStorage):
    """A store whose lease writes take ``delay`` seconds of the given clock."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__()
        self.clock = clock
        self.delay = 0.0

    def put(self, path: str, data: bytes) -> None:
        self.clock.advance(self.delay)
        super().put(path, data)


def _clocked_dataset(clock: ManualClock, versions: int = 3) -> _SlowPuts:
    store = _SlowPuts(clock)
    base = _dataset(versions)
    for name in base.list("_versions"):
        store.put(f"_versions/{name}", base.get(f"_versions/{name}"))
    return store


def test_the_holder_judges_its_lease_by_its_own_monotonic_clock_not_the_wall_clock() -> None:
    clock = ManualClock()
    store = _clocked_dataset(clock)
    held = Lease(store, 2, ttl=10.0, owner="t", renew_in_background=False, clock=clock)
    clock.skew_ns = -(10**12)  # the wall clock jumps back 1,000 s: nothing changes
    clock.advance(9.9)
    assert held.held()
    assert 0 < held.remaining() <= 0.1 + 1e-9
    clock.skew_ns = 10**12  # ... or ahead
    assert held.held()
    clock.advance(0.2)
    assert not held.held()  # 10.1 s after its write was sent


def test_check_before_a_create_renews_a_lease_past_half_its_ttl() -> None:
    clock = ManualClock()
    store = _clocked_dataset(clock)
    held = Lease(store, 2, ttl=10.0, owner="t", renew_in_background=False, clock=clock)
    clock.advance(4.0)
    written = _lease_objects(store)[0]["expires_at_ns"]
    held.check()  # 6 s left: no renewal
    assert _lease_objects(store)[0]["expires_at_ns"] == written
    clock.advance(2.0)
    held.check()  # 4 s left: renewed first
    assert held.remaining() == pytest.approx(10.0)
    assert _lease_objects(store)[0]["expires_at_ns"] > written


def test_check_refuses_a_lease_its_holder_stalled_past() -> None:
    clock = ManualClock()
    store = _clocked_dataset(clock)
    held = Lease(store, 2, ttl=10.0, owner="t", renew_in_background=False, clock=clock)
    clock.advance(10.0)  # a GC pause, a stopped VM, SIGSTOP: no renewal ran
    with pytest.raises(LeaseExpiredError, match="re-plan"):
        held.check()
    assert held.expired
    with pytest.raises(LeaseExpiredError):
        held.check()  # and stays refused


def test_a_renewal_that_reaches_the_store_after_the_expiry_does_not_revive_the_lease() -> None:
    clock = ManualClock()
    store = _clocked_dataset(clock)
    held = Lease(store, 2, ttl=10.0, owner="t", renew_in_background=False, clock=clock)
    clock.advance(8.0)
    store.delay = 3.0  # the renewal is sent with 2 s left and lands 1 s after the expiry
    with pytest.raises(LeaseExpiredError):
        held.renew()
    assert held.expired
    assert not held.held()


def test_lease_liveness_in_store_time_ignores_the_machines_clocks() -> None:
    ns = 10**9
    info = LeaseInfo("p", 3, 0, 5 * ns, "o", ttl_ns=10 * ns, mtime_ns=100 * ns)
    # store time known: last write 100 s (store clock) + ttl 10 s + the 2 s margin
    assert info.live(10**18, store_now_ns=111 * ns)  # the cleaner's wall clock says "far later"
    assert not info.live(0, store_now_ns=112 * ns)  # ... or "far earlier": only store time counts
    # no store time: the wall clocks (expires_at_ns against the cleaner's)
    assert info.live(4 * ns)
    assert not info.live(5 * ns)
    # a lease written without ttl_ns (an older writer) is judged by the wall clocks
    old = LeaseInfo("p", 3, 0, 5 * ns, "o", mtime_ns=100 * ns)
    assert not old.live(6 * ns, store_now_ns=1)


def _marker(store: Storage, floor: int) -> str:
    name = marker_name(floor, uuid.uuid4().hex)
    store.put(f"{CLEANING_DIR}/{name}", b"{}")
    return name


def test_a_lease_taken_while_a_cleanup_runs_records_its_marker_and_never_waits() -> None:
    clock = ManualClock()
    store = _clocked_dataset(clock, versions=4)
    name = _marker(store, 2)
    before = clock.monotonic()
    held = Lease(store, None, ttl=10.0, owner="t", renew_in_background=False, clock=clock)
    assert clock.monotonic() == before  # no sleep
    (obj,) = _lease_objects(store)
    assert obj["cleanups"] == [name]
    assert obj["version"] == 4
    held.release()


def test_a_latest_lease_below_a_cleanups_floor_moves_up_to_the_latest() -> None:
    class _Stale(_SlowPuts):
        """The latest resolves to version 2 the first time (a listing served before 3, 4)."""

        stale = True

        def list(self, prefix: str) -> Sequence[str]:
            names = super().list(prefix)
            if prefix == "_versions" and self.stale:
                self.stale = False
                return [
                    n for n in names if n in {manifest_name(v, NamingScheme.V2) for v in (1, 2)}
                ]
            return names

    clock = ManualClock()
    store = _Stale(clock)
    base = _dataset(4)
    for n in base.list("_versions"):
        store.put(f"_versions/{n}", base.get(f"_versions/{n}"))
    _marker(store, 4)  # a cleanup that listed version 4 as the latest may remove 2
    held = Lease(store, None, ttl=10.0, owner="t", renew_in_background=False, clock=clock)
    assert held.version == 4
    assert _lease_objects(store)[0]["version"] == 4
    held.release()


class _HookedClock(ManualClock):
    """A manual clock that calls ``hook(seconds)`` on every sleep (after moving on)."""

    def __init__(self) -> None:
        super().__init__()
        self.hook: Callable[[float], None] = lambda seconds: None

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        self.hook(seconds)


def test_a_given_version_below_a_cleanups_floor_waits_bounded_then_is_checked() -> None:
    clock = _HookedClock()
    store = _clocked_dataset(clock, versions=4)
    name = _marker(store, 4)
    victim = resolve_version(store, 2).path
    sleeps: list[float] = []

    def cleanup_runs(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 2:  # the cleanup removes version 2, then takes its marker down
            store.delete(victim)
            store.delete(f"{CLEANING_DIR}/{name}")

    clock.hook = cleanup_runs
    with pytest.raises(VersionNotFoundError):
        Lease(store, 2, ttl=10.0, owner="t", renew_in_background=False, clock=clock)
    assert len(sleeps) == 2
    assert store.list(LEASES_DIR) == []
    # a marker that never goes (a forged one, or a cleanup killed with it up): the wait ends
    _marker(store, 4)
    clock.hook = lambda seconds: None
    started = clock.monotonic()
    held = Lease(store, 3, ttl=10.0, owner="t", renew_in_background=False, wait=2.0, clock=clock)
    assert 2.0 <= clock.monotonic() - started < 3.5
    assert held.version == 3
    held.release()
