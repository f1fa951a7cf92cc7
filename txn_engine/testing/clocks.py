"""Clocks a test controls (:class:`txn_engine.clock.Clock`).

* :class:`ManualClock`: time stands still until the test moves it (``advance``; ``sleep``
  advances it too), with a wall clock that may be skewed from it;
* :class:`FollowClock`: reads a logical time the test keeps elsewhere (a state machine's
  ``now_ns``).
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

__all__ = ["FollowClock", "ManualClock"]

_NS = 1_000_000_000


@attrs.define
class ManualClock:
    """A clock at ``now_ns`` (monotonic and true time); ``skew_ns`` offsets its wall clock."""

    now_ns: int = 1_700_000_000 * _NS
    skew_ns: int = 0

    def wall_ns(self) -> int:
        """The (skewed) wall clock."""
        return self.now_ns + self.skew_ns

    def monotonic(self) -> float:
        """True time in seconds."""
        return self.now_ns / _NS

    def sleep(self, seconds: float) -> None:
        """Move time on by ``seconds``."""
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        """Move time on by ``seconds`` (at least 0)."""
        self.now_ns += max(0, int(seconds * _NS))


@attrs.frozen
class FollowClock:
    """A clock whose wall and monotonic time are ``now_ns()``; sleeping does not move it."""

    now_ns: Callable[[], int]

    def wall_ns(self) -> int:
        """``now_ns()``."""
        return self.now_ns()

    def monotonic(self) -> float:
        """``now_ns()`` in seconds."""
        return self.now_ns() / _NS

    def sleep(self, seconds: float) -> None:
        """Nothing: the test moves the time."""
