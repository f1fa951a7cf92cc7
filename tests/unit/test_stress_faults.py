"""The named storage faults (txn_engine.testing.fault_storage) drive the commit loop to the
outcomes docs/testing.md promises, deterministically (fault_rules) and at random
(ChaosStorage)."""

from __future__ import annotations

import random
import time

import pytest

from txn_engine.commit import commit, find_transaction
from txn_engine.errors import (
    AmbiguousWriteError,
    CommitStateUnknownError,
    ObjectExistsError,
)
from txn_engine.ops import Append, Overwrite
from txn_engine.retry import RetryPolicy
from txn_engine.storage.memory import MemoryStorage
from txn_engine.testing.fault_storage import FAULT_KINDS, LANDING_FAULTS, ChaosStorage, fault_rules
from txn_engine.testing.faults import Fault, FaultyStorage, SimulatedCrash
from txn_engine.testing.machine import SCHEMA
from txn_engine.testing.model import SyntheticRows
from txn_engine.transaction import Transaction

_OUTCOMES: dict[str, tuple[type[BaseException] | None, bool]] = {
    # kind: (error the caller sees, whether the transaction is in the history afterwards)
    "lost_response": (None, True),
    "fail_before_write": (None, True),
    "spurious_exists": (None, True),
    "latency": (None, True),
    "transaction_file_fails": (None, True),  # the .txn copy comes after the manifest
    "crash_before_manifest": (SimulatedCrash, False),
    "crash_after_manifest": (SimulatedCrash, True),
    "unknown_outcome": (CommitStateUnknownError, True),
}


def _dataset() -> tuple[MemoryStorage, SyntheticRows]:
    storage, rows = MemoryStorage(), SyntheticRows()
    commit(storage, Transaction(0, Overwrite((rows.fragment([(0, 0)]),), SCHEMA)))
    return storage, rows


def test_every_kind_has_a_documented_outcome() -> None:
    assert set(_OUTCOMES) == set(FAULT_KINDS)
    assert {k for k, (error, _) in _OUTCOMES.items() if error is None} == LANDING_FAULTS


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_fault_rules_lead_to_the_documented_outcome(kind: str) -> None:
    storage, rows = _dataset()
    faulty = FaultyStorage(storage)
    for rule in fault_rules(kind):
        faulty.add(rule)
    txn = Transaction(1, Append((rows.fragment([(1, 0)]),)))
    error, lands = _OUTCOMES[kind]
    if error is None:
        result = commit(faulty, txn)
        assert result.version == 2
    else:
        with pytest.raises(error):
            commit(faulty, txn)
    faulty.clear()
    assert (find_transaction(storage, txn.uuid) == 2) is lands
    if kind == "unknown_outcome":  # committing it again settles it, without a second copy
        again = commit(storage, txn)
        assert again.already_committed
        assert again.version == 2
    assert len(storage.list("_versions")) == (2 if lands else 1)


def test_latency_rule_slows_every_call() -> None:
    storage, rows = _dataset()
    faulty = FaultyStorage(storage)
    for rule in fault_rules("latency", delay=0.01):
        faulty.add(rule)
    started = time.perf_counter()
    commit(faulty, Transaction(1, Append((rows.fragment([(1, 0)]),))))
    elapsed = time.perf_counter() - started
    assert len(faulty.log) >= 3  # list, read, writes
    assert elapsed >= 0.01 * len(faulty.log)


def test_unknown_fault_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown fault kind"):
        fault_rules("gremlins")
    with pytest.raises(ValueError, match="unknown fault kinds"):
        ChaosStorage(MemoryStorage(), rate=0.1, kinds=("gremlins",))
    with pytest.raises(ValueError, match="rate"):
        ChaosStorage(MemoryStorage(), rate=1.5)


@pytest.mark.parametrize(
    ("kind", "error"),
    [
        ("lost_response", AmbiguousWriteError),
        ("fail_before_write", AmbiguousWriteError),
        ("spurious_exists", ObjectExistsError),
        ("crash_before_manifest", SimulatedCrash),
        ("crash_after_manifest", SimulatedCrash),
    ],
)
def test_chaos_storage_injects_each_kind_on_manifest_creates(
    kind: str, error: type[BaseException]
) -> None:
    inner = MemoryStorage()
    chaos = ChaosStorage(inner, rate=1.0, kinds=(kind,), rng=random.Random(0))
    chaos.put("data/x.lance", b"x")  # other writes are left alone
    with pytest.raises(error):
        chaos.put_if_absent("_versions/1.manifest", b"m")
    landed = kind in ("lost_response", "crash_after_manifest")
    assert inner.exists("_versions/1.manifest") is landed
    assert chaos.injected == {kind: 1}


def test_chaos_storage_commits_settle_exactly_once() -> None:
    storage, rows = _dataset()
    chaos = ChaosStorage(
        storage,
        rate=0.5,
        kinds=("lost_response", "fail_before_write", "spurious_exists", "transaction_file_fails"),
        rng=random.Random(1),
    )
    policy = RetryPolicy(max_attempts=5, sleep=lambda s: None)
    acknowledged = []
    for i in range(40):
        txn = Transaction(1, Append((rows.fragment([(100 + i, 0)]),)))
        # a failing .txn copy comes after the manifest landed: every commit is acknowledged
        result = commit(chaos, txn, retry_policy=policy, transaction_file=True)
        acknowledged.append((txn.uuid, result.version))
    assert chaos.injected["transaction_file_fails"] > 0
    assert sum(chaos.injected.values()) > 10
    for uuid, version in acknowledged:
        assert find_transaction(storage, uuid) == version
    assert len(storage.list("_versions")) == 1 + len(acknowledged)


@pytest.mark.parametrize("mode", ["after", "crash_after"])
def test_after_faults_apply_to_the_next_call_that_takes_effect(mode: str) -> None:
    """A create that loses its race by itself does not use up a lost-response / crash-after
    rule: it models a response lost after the write happened."""
    inner = MemoryStorage()
    inner.put_if_absent("_versions/a", b"theirs")
    faulty = FaultyStorage(inner)
    rule = faulty.add(Fault("put_if_absent", "_versions/*", mode=mode))  # type: ignore[arg-type]
    with pytest.raises(ObjectExistsError):
        faulty.put_if_absent("_versions/a", b"mine")
    assert (rule.fired, rule.exhausted) == (0, False)
    with pytest.raises(SimulatedCrash if mode == "crash_after" else AmbiguousWriteError):
        faulty.put_if_absent("_versions/b", b"mine")
    assert inner.get("_versions/b") == b"mine"
    assert rule.exhausted
