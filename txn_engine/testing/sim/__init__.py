"""Deterministic simulation of writers, compactions, cleanups, taggers and readers over a
store whose clock, listed modification times, latencies, lost responses and process pauses
and crashes are all drawn from one seed: time is a test input.

::

    from txn_engine.testing.sim import simulate

    result = simulate(7)
    assert result.ok, result.violations      # simulate(7) again replays it exactly

``python -m txn_engine.testing.sim --seeds 5000`` runs many seeds and prints the failing
ones. See :mod:`txn_engine.testing.sim._world` for what is checked.
"""

from __future__ import annotations

from txn_engine.testing.sim._actors import Config
from txn_engine.testing.sim._sched import SimCrash, SimStuck
from txn_engine.testing.sim._store import Faults, SimStore
from txn_engine.testing.sim._world import Result, simulate

__all__ = ["Config", "Faults", "Result", "SimCrash", "SimStore", "SimStuck", "simulate"]
