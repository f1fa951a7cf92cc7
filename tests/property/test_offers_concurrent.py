"""Offers under real concurrency: every Append lands exactly once, and every caller is told
the truth about it, while writers carry each other's offers (:mod:`txn_engine.contention.offers`).

Several threads append to one in-memory object store (``read_concurrency = 8``: guarded
creates, offers on) whose requests take a random moment, so that races are lost, offers are
posted, scanned and carried. Generated faults: a manifest create that lands but whose
response is lost, a failed offers listing or read, a failed version listing. Afterwards:

* no uuid is carried by two versions (nothing lands twice);
* a commit that returned a version is carried by exactly that version (``carried`` when
  another writer's version carried it);
* a commit that raised anything but CommitStateUnknownError is carried by no version (an
  offer never lands after its writer gave up);
* the latest manifest holds exactly the fragments of the landed uuids (none lost, none
  doubled).
"""

from __future__ import annotations

import contextlib
import importlib
import random
import threading
import time
import uuid
from collections.abc import Sequence
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from txn_engine.commit import CommitResult, commit
from txn_engine.contention.carrier import Carrier, hosted
from txn_engine.contention.offers import CARRIER_KEY, OFFERS_DIR, carried_uuids, inline_offer
from txn_engine.dataset import Dataset
from txn_engine.errors import CommitStateUnknownError, StorageError
from txn_engine.format.io import latest_version, read_manifest_entry, read_transaction_and_manifest
from txn_engine.format.naming import list_versions
from txn_engine.model import DataFile, Fragment, LanceField
from txn_engine.ops import Append, Overwrite
from txn_engine.retry import RetryPolicy
from txn_engine.storage import MemoryStorage
from txn_engine.transaction import Transaction

SCHEMA = (LanceField(0, -1, "id", "int64"),)
offering_module = importlib.import_module("txn_engine.contention.offering")


def frag(tag: str) -> Fragment:
    return Fragment(0, (DataFile(f"{tag}.lance", (0,), (0,), 2, 2, 100),), 10)


class SlowObjectStore(MemoryStorage):
    """Requests take a random moment; some fail (generated rates, one seeded RNG)."""

    read_concurrency = 8

    def __init__(self, seed: int, lost: float, list_fail: float, inline: bool = False) -> None:
        super().__init__()
        self._rng = random.Random(seed)
        self._rng_lock = threading.Lock()
        self.lost = lost
        self.list_fail = list_fail
        self.armed = False
        #: long keys, as object stores have: offers travel in their names (no GET)
        self.max_path_bytes = 1024 if inline else 0
        self.offers_posted: list[str] = []

    def put(self, path: str, data: bytes) -> None:
        if path.startswith(f"{OFFERS_DIR}/"):
            with self._rng_lock:
                self.offers_posted.append(path.rsplit("/", 1)[-1])
        super().put(path, data)

    def _draw(self) -> float:
        with self._rng_lock:
            return self._rng.random()

    def _pause(self) -> None:
        if self.armed:
            time.sleep(0.002 * self._draw())

    def put_if_absent(self, path: str, data: bytes) -> None:
        self._pause()
        super().put_if_absent(path, data)
        if self.armed and path.startswith("_versions/") and self._draw() < self.lost:
            raise StorageError("response lost (test)")
        self._pause()

    def list(self, prefix: str) -> Sequence[str]:
        self._pause()
        if self.armed and self._draw() < self.list_fail:
            raise StorageError("listing failed (test)")
        return super().list(prefix)

    def get_range(self, path: str, start: int, end: int) -> bytes:
        self._pause()
        if self.armed and path.startswith(OFFERS_DIR) and self._draw() < self.list_fail:
            raise StorageError("offer read failed (test)")
        return super().get_range(path, start, end)


def run_writers(
    store: SlowObjectStore,
    writers: int,
    commits: int,
    with_base: bool,
    policy: RetryPolicy | None = None,
) -> dict[str, tuple[Transaction, object]]:
    """``writers`` threads, each committing ``commits`` Appends of one new fragment (named
    after the transaction's uuid); the outcome of each transaction by uuid."""
    outcomes: dict[str, tuple[Transaction, object]] = {}
    lock = threading.Lock()
    start = threading.Barrier(writers)
    policy = policy or RetryPolicy(max_attempts=8)  # small: exhaustion is exercised too

    def writer() -> None:
        start.wait()
        for _ in range(commits):
            try:
                base = Dataset.open(store) if with_base else None
                version = base.version if base is not None else latest_version(store).version
            except StorageError:
                continue
            u = str(uuid.uuid4())
            txn = Transaction(version, Append([frag(u)]), uuid=u)
            try:
                out: object = commit(store, txn, base=base, retry_policy=policy)
            except Exception as exc:
                out = exc
            with lock:
                outcomes[u] = (txn, out)

    threads = [threading.Thread(target=writer) for _ in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


def check(store: SlowObjectStore, outcomes: dict[str, tuple[Transaction, object]]) -> int:
    """The invariants of the module docstring; returns how many uuids rode in a carrier."""
    store.armed = False
    carriers: dict[str, list[int]] = {}
    carried_by_others = 0
    for entry in list_versions(store):
        pb, _ = read_transaction_and_manifest(store, entry, None)
        uuids = carried_uuids(pb)
        carried_by_others += len(uuids) - 1
        for u in uuids:
            carriers.setdefault(u, []).append(entry.version)
    doubled = {u: v for u, v in carriers.items() if len(v) > 1}
    assert not doubled, f"landed twice: {doubled}"
    for u, (_txn, out) in outcomes.items():
        where = carriers.get(u, [])
        if isinstance(out, CommitResult):
            assert where == [out.version], (u, out, where)
        elif not isinstance(out, CommitStateUnknownError):
            assert where == [], f"{u} raised {out!r} but landed in {where}"
    for entry in list_versions(store):  # a carrier's version always carries somebody
        pb, _ = read_transaction_and_manifest(store, entry, None)
        if CARRIER_KEY in pb.transaction_properties:
            assert carried_uuids(pb) - {pb.uuid}, f"version {entry.version}: carried nothing"
    latest = read_manifest_entry(store, list_versions(store)[-1])
    files = sorted(f.files[0].path for f in latest.manifest.fragments)
    landed = sorted(f"{u}.lance" for u in carriers if u in outcomes)
    assert files == sorted([*landed, "seed.lance"])
    return carried_by_others


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    writers=st.integers(2, 6),
    commits=st.integers(1, 4),
    lost=st.sampled_from([0.0, 0.1, 0.3]),
    list_fail=st.sampled_from([0.0, 0.05, 0.2]),
    with_base=st.booleans(),
    inline=st.booleans(),
    carrier=st.booleans(),
    told=st.sampled_from([True, None]),
    hosts=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_offers_land_exactly_once_and_every_caller_is_told_the_truth(
    writers: int,
    commits: int,
    lost: float,
    list_fail: float,
    with_base: bool,
    inline: bool,
    carrier: bool,
    told: bool | None,
    hosts: bool,
    seed: int,
) -> None:
    """``carrier``: a txn_engine.Carrier runs beside the writers (it may die of a generated
    fault: they race after their patience). ``told``: the writers wait for it from their
    first attempt (True) or once they have read one of its versions (None, the default).
    ``hosts``: a writer that loses a race with no carrier seen starts one in the process
    (``RetryPolicy.host_carrier``), which steps down for a running one and waits with the
    writers' faults like any other."""
    store = SlowObjectStore(seed, lost, list_fail, inline)
    commit(store, Transaction(0, Overwrite([frag("seed")], SCHEMA)))
    store.armed = True
    policy = RetryPolicy(
        max_attempts=8, wait_for_carrier=told if carrier else None, host_carrier=hosts
    )
    running = Carrier(store).start() if carrier else None
    # threads of one process post every offer here, and memory is fast: a lost race counts
    # as lost among several processes' writers over a network (else none would host one)
    hosting = contextlib.ExitStack()
    if hosts:
        foreign = patch.object(offering_module.Offering, "_foreign_offer", lambda self: True)
        hosting.enter_context(foreign)
        hosting.enter_context(patch.object(offering_module, "HOST_MIN_ATTEMPT_SECONDS", 0.0))
    try:
        with hosting:
            outcomes = run_writers(store, writers, commits, with_base, policy)
    finally:
        if running is not None:
            running.close()
        host = hosted(store.uri)
        if host is not None:
            host.close()
    check(store, outcomes)


@pytest.mark.parametrize("inline", [False, True])
def test_contended_writers_do_carry_each_other(inline: bool) -> None:
    """Without faults, 6 writers appending 6 times each: some versions carry other
    writers' offers (the mechanism is exercised, not only allowed), and every commit
    lands exactly once; with long keys every offer travels in its name."""
    carried = 0
    for seed in range(3):
        store = SlowObjectStore(seed, 0.0, 0.0, inline)
        commit(store, Transaction(0, Overwrite([frag("seed")], SCHEMA)))
        store.armed = True
        outcomes = run_writers(store, 6, 6, with_base=True, policy=RetryPolicy())
        assert all(isinstance(out, CommitResult) for _t, out in outcomes.values())
        carried += check(store, outcomes)
        assert store.offers_posted
        assert all((inline_offer(n) is not None) == inline for n in store.offers_posted)
    assert carried > 0
