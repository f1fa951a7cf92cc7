"""Time as an input: the one place the lease and cleanup logic reads a clock.

Leases, cleanup markers and the store-time estimates of :mod:`txn_engine.storetime` take a
:class:`Clock` instead of calling :mod:`time`, so a test (or a deterministic simulation,
:mod:`txn_engine.testing.sim`) can give them a clock it controls: wall time that is skewed
or jumps, monotonic time that advances only when the test says so, sleeps that advance it.

Wall time (:meth:`Clock.wall_ns`) is used only to stamp objects for humans and for tools
that read them (a lease's ``created_at_ns``, a manifest's timestamp); no protection rests
on comparing it across machines. Elapsed time is measured with :meth:`Clock.monotonic`.
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

import attrs

__all__ = ["SYSTEM_CLOCK", "Clock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    """Wall time, monotonic time and sleeping, as one object."""

    def wall_ns(self) -> int:
        """Nanoseconds since the Unix epoch by this machine's (possibly skewed) clock."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (only differences mean anything)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (at least 0)."""
        ...


@attrs.frozen
class SystemClock:
    """The machine's clocks: :func:`time.time_ns`, :func:`time.monotonic`, :func:`time.sleep`."""

    def wall_ns(self) -> int:
        """Nanoseconds since the epoch (``time.time_ns``)."""
        return time.time_ns()

    def monotonic(self) -> float:
        """``time.monotonic()``."""
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        """``time.sleep(max(0, seconds))``."""
        time.sleep(max(0.0, seconds))


#: The clock every lease and cleanup uses unless given another.
SYSTEM_CLOCK: Clock = SystemClock()
