"""Deterministic simulation (txn_engine.testing.sim): time is a test input.

Writers (raw commits under a lease, replan_and_commit as the writer API runs it, writers
without a lease), compactions, cleanups with short retentions, taggers and leased readers
run over a simulated store whose clock, listed modification times (coarse, skewed,
lagging), latencies, lost responses, process pauses and crashes come from a seed. A run
checks: no acknowledged commit lost or duplicated, every kept version readable with every
file it references, no leased reader finding its version gone, every call within budget.

``TXN_ENGINE_SIM_SEEDS`` sets how many drawn seeds run (default 200); ``python -m
txn_engine.testing.sim --seeds 20000`` runs many more and prints the failing ones.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable

import pytest

from txn_engine.testing.sim import profiles, simulate

SEEDS = int(os.environ.get("TXN_ENGINE_SIM_SEEDS", "200"))


@pytest.mark.parametrize("block", range(4))
def test_drawn_seeds_hold_every_invariant(block: int) -> None:
    size = -(-SEEDS // 4)
    for seed in range(block * size, min(SEEDS, (block + 1) * size)):
        result = simulate(seed)
        assert result.ok, (seed, result.config, result.violations[:5])
        assert result.requests > 0


@pytest.mark.parametrize("profile", ["STALLS", "RETENTION"])
def test_the_hazard_profiles_hold_every_invariant(profile: str) -> None:
    config, faults = getattr(profiles, profile)
    for seed in range(60):
        result = simulate(seed, config=config, faults=faults)
        assert result.ok, (seed, result.violations[:5])


def test_a_seed_replays_exactly() -> None:
    for seed in (3, 17):
        first, again = simulate(seed), simulate(seed)
        assert first.digest == again.digest
        assert (first.steps, first.requests, first.calls) == (
            again.steps,
            again.requests,
            again.calls,
        )
    assert simulate(3).digest != simulate(4).digest


def _first_failure(
    config: object, faults: object, seeds: int, kind: Callable[[str], bool] = lambda v: True
) -> tuple[int, tuple[str, ...]] | None:
    """The first seed with a violation that ``kind`` accepts, and its violations."""
    for seed in range(seeds):
        result = simulate(seed, config=config, faults=faults)  # type: ignore[arg-type]
        if any(kind(v) for v in result.violations):
            return seed, result.violations
    return None


def test_without_the_lease_check_before_the_create_a_seed_loses_data(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The mutation: a writer no longer checks its lease before its manifest create."""
    lease_module = importlib.import_module("txn_engine.leases")
    monkeypatch.setattr(lease_module.Lease, "check", lambda self: None)
    found = _first_failure(*profiles.STALLS, seeds=150)
    assert found is not None, "no seed noticed the missing lease check"
    seed, violations = found
    assert (
        simulate(seed, config=profiles.STALLS[0], faults=profiles.STALLS[1]).violations
        == violations
    )


def test_without_the_store_time_margin_a_seed_loses_data(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutation: listed modification times compared as if exact (no margin for whole
    seconds and skew between the store's servers)."""
    names = ("txn_engine.leases", "txn_engine.retention._plan", "txn_engine.retention._marker")
    with monkeypatch.context() as patch:
        for name in names:
            patch.setattr(importlib.import_module(name), "STORE_TIME_MARGIN_NS", 0)
        # a deleted file of a kept version: what the margin prevents (a writer stalled past
        # the retention, which the profile also draws, is outside the unleased contract)
        found = _first_failure(
            *profiles.RETENTION, seeds=300, kind=lambda v: "missing" in v or "lost" in v
        )
    assert found is not None, "no seed noticed the missing margin"
    config, faults = profiles.RETENTION
    assert simulate(found[0], config=config, faults=faults).ok  # with the margin it holds
