"""The store's clock, read off objects the reader wrote itself.

Every object a store lists carries a modification time the *store* stamped. Two such times
compare in one clock, whatever the clocks of the machines that wrote the objects say, so the
lease protocol judges ages and expiries in store time only:

* an anchor: write an object, list it, and take its listed modification time ``m``; the
  store's time at a later moment is at least ``m`` plus the time elapsed on this process's
  monotonic clock since the write *returned* (:class:`StoreTime`). The estimate never runs
  ahead of the store, since the stamp is taken before the write returns;
* a margin, :data:`STORE_TIME_MARGIN_NS`, added wherever a listed time is compared in a way
  that must not err early: stores truncate the times they list (S3 and Azure to whole
  seconds, measured in ``docs/cleanup.md``) and a store of several servers stamps with
  several clocks.
"""

from __future__ import annotations

import attrs

from txn_engine.clock import Clock

__all__ = ["STORE_TIME_MARGIN_NS", "StoreTime"]

_NS = 1_000_000_000

#: How much later than a listed modification time an object may really have been stamped
#: (truncation to whole seconds, plus skew between a store's servers): 2 s.
STORE_TIME_MARGIN_NS = 2 * _NS


@attrs.frozen
class StoreTime:
    """The store's clock as estimated from one anchor (see the module docstring)."""

    anchor_ns: int
    anchored_at: float
    clock: Clock

    def now_ns(self) -> int:
        """The store's time now, never later than the store's own clock."""
        return self.anchor_ns + int((self.clock.monotonic() - self.anchored_at) * _NS)
