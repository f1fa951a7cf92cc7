"""Shapes of runs that aim at one hazard each (``simulate(seed, config=..., faults=...)``).

* :data:`STALLS`: leased writers whose processes stall for about their lease's ttl while
  cleanups with no orphan retention run: the lease checks around the create decide;
* :data:`RETENTION`: writers without a lease (pylance's kind) protected only by a 3 s orphan
  retention, on a store that lists whole seconds with 0.3 s of skew between its servers:
  the store-time margin decides.
"""

from __future__ import annotations

from txn_engine.testing.sim._actors import Config
from txn_engine.testing.sim._store import Faults

__all__ = ["RETENTION", "STALLS"]

_NS = 1_000_000_000

STALLS = (
    Config(
        duration_s=30, writers=("raw", "raw", "api"), cleaners=2, taggers=0, readers=0,
        lease_ttl=3.0, retention_s=0.0,
    ),
    Faults(
        pause=0.08, pause_s=(1.0, 4.0), crash=0.0, fail_before=0.0, lost=0.02,
        granularity_ns=_NS, jitter_ns=300_000_000,
    ),
)  # fmt: skip

RETENTION = (
    Config(
        duration_s=30, writers=("unleased", "unleased", "unleased"), cleaners=2, taggers=0,
        readers=0, lease_ttl=3.0, retention_s=3.0,
    ),
    Faults(
        pause=0.08, pause_s=(0.5, 3.5), crash=0.0, fail_before=0.0, lost=0.0,
        granularity_ns=_NS, jitter_ns=300_000_000,
    ),
)  # fmt: skip
