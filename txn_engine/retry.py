"""Retry budgets and backoff for the commit loop (and for re-planning).

:class:`RetryPolicy` says how long a commit may keep trying: at most ``max_attempts``
attempts and, optionally, at most ``deadline`` seconds. Between attempts the loop sleeps a
:class:`SlotBackoff` delay, like Lance: the time unit is 1.1 x the duration of the first
attempt (so the delay adapts to how long a commit takes on this store), and attempt ``n``
(0-based) waits a random whole number of units in ``[0, 2**(n + 2))``.

Clock, sleep and randomness are injectable so tests run instantly and deterministically::

    clock = FakeClock()
    policy = RetryPolicy(max_attempts=5, clock=clock.now, sleep=clock.sleep)
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import attrs

__all__ = ["RetryBudget", "RetryPolicy", "SlotBackoff"]


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """How long to keep trying, and how long to wait between tries.

    * ``max_attempts``: total attempts (Lance's default ``num_retries`` is 20 and it makes
      at least one attempt).
    * ``deadline``: seconds, counted from the start of the first attempt; a retry happens
      only if it can start (after its backoff sleep) before the deadline. ``None`` = no time
      limit (Lance's commit loop has none). An attempt in progress is never interrupted.
    * ``initial_unit``: backoff unit (seconds) until the first attempt's duration is known.
    * ``unit_factor``: the unit becomes ``unit_factor`` x the first attempt's duration
      (Lance: 1.1); set ``adaptive=False`` to always use ``initial_unit``.
    * ``max_delay``: optional cap of a single sleep.
    * ``clock`` (monotonic seconds), ``sleep`` and ``randbelow`` (``n -> int in [0, n)``)
      are injectable for tests; they do not take part in equality.
    """

    max_attempts: int = 20
    deadline: float | None = None
    initial_unit: float = 0.05
    unit_factor: float = 1.1
    adaptive: bool = True
    max_delay: float | None = None
    clock: Callable[[], float] = attrs.field(default=time.monotonic, eq=False, repr=False)
    sleep: Callable[[float], None] = attrs.field(default=time.sleep, eq=False, repr=False)
    randbelow: Callable[[int], int] = attrs.field(
        default=random.SystemRandom().randrange, eq=False, repr=False
    )

    def __attrs_post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        for name in ("deadline", "initial_unit", "unit_factor", "max_delay"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")

    @classmethod
    def replanning(cls) -> RetryPolicy:
        """Lance's budget for re-planning delete/update/merge-insert: 10 retries (11
        attempts), 30 s."""
        return cls(max_attempts=11, deadline=30.0)

    def budget(self) -> RetryBudget:
        """A fresh budget (one per commit call): starts the clock now."""
        return RetryBudget(self)


class SlotBackoff:
    """Lance's slot backoff: attempt ``n`` waits ``randbelow(2**(n + 2)) * unit``."""

    def __init__(self, unit: float, randbelow: Callable[[int], int]) -> None:
        self.unit = unit
        self.attempt = 0
        self._randbelow = randbelow

    def slots(self) -> int:
        """Number of slots the next delay is drawn from."""
        return int(2 ** (self.attempt + 2))

    def next_delay(self) -> float:
        """The next delay in seconds (advances the attempt counter)."""
        slot = self._randbelow(self.slots())
        self.attempt += 1
        return slot * self.unit


class RetryBudget:
    """The running state of one :class:`RetryPolicy` (attempts made, elapsed time, backoff).

    The commit loop calls :meth:`start_attempt` before each attempt and, after losing a
    race, :meth:`wait` which sleeps and returns ``True`` or returns ``False`` when the
    budget is spent.
    """

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self.started = policy.clock()
        self.attempts = 0
        self.first_attempt_seconds: float | None = None
        self.backoff = SlotBackoff(policy.initial_unit, policy.randbelow)
        self.slept: list[float] = []

    def elapsed(self) -> float:
        return self.policy.clock() - self.started

    def start_attempt(self) -> int:
        """Count an attempt; returns its 1-based number."""
        self.attempts += 1
        return self.attempts

    def exhausted_reason(self) -> str | None:
        """Why no further attempt may start (``None`` if one may)."""
        p = self.policy
        if self.attempts >= p.max_attempts:
            return f"{self.attempts} attempt(s) made, max_attempts={p.max_attempts}"
        if p.deadline is not None and self.elapsed() >= p.deadline:
            return f"deadline of {p.deadline:g}s reached after {self.elapsed():.3f}s"
        return None

    def wait(self) -> bool:
        """After a lost attempt: sleep the backoff delay and return ``True``, or return
        ``False`` (without sleeping) when no further attempt fits the budget."""
        p = self.policy
        if self.first_attempt_seconds is None:
            self.first_attempt_seconds = self.elapsed()
            if p.adaptive:
                self.backoff.unit = p.unit_factor * self.first_attempt_seconds
        if self.exhausted_reason() is not None:
            return False
        delay = self.backoff.next_delay()
        if p.max_delay is not None:
            delay = min(delay, p.max_delay)
        if p.deadline is not None and self.elapsed() + delay >= p.deadline:
            return False
        self.slept.append(delay)
        if delay > 0:
            p.sleep(delay)
        return True
