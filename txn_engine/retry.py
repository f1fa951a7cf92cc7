"""Retry budgets and backoff for the commit loop (and for re-planning).

:class:`RetryPolicy` says how long a commit may keep trying: at most ``max_attempts``
attempts and, optionally, at most ``deadline`` seconds. Between attempts the loop sleeps a
:class:`SlotBackoff` delay, like Lance: the time unit is 1.1 x the duration of the first
attempt (so the delay adapts to how long a commit takes on this store), and attempt ``n``
(0-based) waits a random whole number of units below a slot count.

The slot count is where txn_engine differs from Lance by default. Lance doubles it on
every lost race (4, 8, 16, ... ``2**(n + 2)``); txn_engine grows it quadratically
(4, 9, 16, 25, ... ``(n + 2)**2``, *polynomial backoff*). Under sustained contention,
doubling lets writers that just started a commit (whose first attempt does not wait)
capture the store from writers that have lost a few times and now sleep for thousands of
units: measured with 16 processes appending to one local dataset, Lance's schedule left
single sleeps of 7-17 s and 16-63 commits/s; the quadratic one at most 1.6 s and
62-89 commits/s. Losing more often but waiting less, a writer needs more attempts, so the
default budget is 50 attempts, which still allows far less waiting in total (at most
about 43,000 units over 49 sleeps) than Lance's 20 doubling attempts (about 2.1 million
units over 19 sleeps). ``RetryPolicy.lance()`` gives Lance's schedule and budget exactly.
Backoff decides only *when* an attempt starts, never what it commits: the conflict checks
and exactly-once guarantees are the same under every policy.

Two bounds fit the schedule to object stores, where a request costs 20-100 ms (measured on
moto's S3 behind a proxy adding 25 ms per request, 4-8 writer processes; see
docs/performance.md), and leave it unchanged on local disk, where a unit is milliseconds:

* the unit is at most ``max_unit`` (default 0.2 s, about three requests). The first attempt
  also pays one-off costs (the store's atomicity probe on the first create in a process, the
  ``.txn`` copy, and one read per version it is behind: 1-2 s for a writer 40-60 versions
  behind on that store), and every later sleep is counted in its units;
* the window a sleep is drawn from, slots x unit, is at most ``max_window`` (default 0.8 s):
  slots grow quadratically until then. Unbounded, a writer that lost four or five races drew
  from 36-49 slots of a 100-300 ms unit: single sleeps of 2.9 s (4 writers) and 10-13 s
  (8 writers), p99 commit latency 8.7-38 s against a median of 0.3 s. On a store the tail of
  a contended commit is mostly lost races (a writer that retries must list, read and create,
  while one that just opened the table needs one create), and a growing window only pushes
  the losers further back. On local disk (units of 1-15 ms) 0.8 s is 50-800 slots: the
  quadratic schedule above, as measured there.

**The ranked chase (object stores).** A writer that lost a race there usually knows the
winner already: its manifest was read back while settling the lost create (one GET). Then
there is no reason to sleep: the retry builds on that winner at once (``chases=None``:
always; Lance sleeps). What it waits instead is its *rank*: ``(chase_ranks - lost) x
chase_step`` x its shortest attempt (default 6 ranks of 0.1: 0.5 to 0 attempts), so that
among the writers retrying on the same winner the one that has lost most often sends its
create first and wins. Measured with 8 processes appending on the delayed GCS emulator, 8
commits each: p99 2.0-2.8 s against a median of 0.3 s without ranks (one writer lost 30
races in a row, another won 8 of 8), 0.82-0.93 s against 0.62-0.67 s with them, at the same
commits/s (docs/performance.md). A first attempt that lost only because its base was
behind (the guard listing shows the winner) retries with no wait at all.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Literal

import attrs

from txn_engine.errors import InvalidOperationError

__all__ = ["RetryBudget", "RetryPolicy", "SlotBackoff", "SlotGrowth", "UnitBasis"]

#: How the number of backoff slots grows with each lost race.
SlotGrowth = Literal["quadratic", "exponential"]

#: Which attempt duration the adaptive backoff unit is taken from.
UnitBasis = Literal["shortest", "first"]


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """How long to keep trying, and how long to wait between tries.

    * ``max_attempts``: total attempts (default 50; Lance's ``num_retries`` default is 20,
      see the module docstring for why more, cheaper attempts here).
    * ``deadline``: seconds, counted from the start of the first attempt; a retry happens
      only if it can start (after its backoff sleep) before the deadline. ``None`` = no time
      limit (Lance's commit loop has none). An attempt in progress is never interrupted.
    * ``initial_unit``: backoff unit (seconds) until the first attempt's duration is known.
    * ``unit_factor``: the unit becomes ``unit_factor`` x an attempt's duration (Lance: 1.1);
      set ``adaptive=False`` to always use ``initial_unit``.
    * ``unit_basis``: which attempt: ``"first"`` (default, as Lance) or ``"shortest"`` (the
      shortest attempt so far: what a retry costs on this store, without the first attempt's
      one-off costs).
    * ``max_unit``: upper bound of the adaptive unit, seconds (default 0.2, about three
      requests to an object store); ``None`` = unbounded (Lance).
    * ``slot_growth``: ``"quadratic"`` (default: ``(n + 2)**2`` slots after the n-th lost
      race) or ``"exponential"`` (Lance: ``2**(n + 2)``).
    * ``max_slots``: optional cap of the slot count (``None``: no cap, the default).
    * ``max_window``: the slot count stops growing where slots x unit would exceed this many
      seconds (default 0.8: no single sleep of a second or more on a slow store; on local
      disk hundreds of slots); ``None`` = unbounded (Lance).
    * ``max_delay``: optional cap of a single sleep, seconds.
    * ``chases``: on an object store, how many attempts in a row may follow a lost race at
      once, without a backoff sleep, when the winner's manifest is already known (read
      back while settling our create); ``None``: always. ``chase_ranks`` / ``chase_step``:
      such an immediate retry first waits ``(chase_ranks - lost) * chase_step`` x the
      shortest attempt (``lost``: races this commit has lost, at most ``chase_ranks``), so
      that among writers retrying on the same winner the one that has lost most often
      sends its create first (0 ranks: no wait).
    * ``offer_after``: on an object store, an Append of new fragments that has lost this
      many races offers itself to the other writers (:mod:`txn_engine.contention.offers`: whichever
      retrying Append commits next carries it); an Append commit that is retrying carries
      the live offers it can check. ``None``: neither (Lance).
    * ``offer_early``: such an Append whose process saw contention on the table within the
      last second (a commit of it lost a race there) offers itself beside its first
      attempt instead of after its first lost race, unless its read version is older than
      the versions that commit saw (default True; ``docs/architecture.md``, *Offers*).
    * ``wait_for_carrier``: whether an Append waits for the table's
      :class:`txn_engine.Carrier` (:mod:`txn_engine.contention.carrier`) instead of racing it. On an
      object store a waiting Append posts its offer and reads the versions until the
      carrier's version that carries it; it races as without a carrier when no carrier
      version appears within its patience
      (``txn_engine.contention.offering.PATIENCE_ATTEMPTS`` x its
      shortest attempt, at least ``MIN_PATIENCE`` seconds). ``None`` (default): once its
      process has seen a carrier lately (a listing showed its live beacon, or a version
      read was one of its), unless the commit raced before it saw one, and only while its
      listings show the carrier's live beacon; so writers need no configuration when a
      carrier runs, and stop waiting as soon as it is gone. True:
      from the first attempt on (the writer is told a carrier runs: its first commit does
      not race either). False: never.
    * ``host_carrier``: whether an Append that loses a race while its process sees no
      carrier starts one for the table in its process (:func:`txn_engine.contention.carrier.host`:
      one per table per process; it steps down for a carrier that ranks before it, so the
      writers of a table converge on one, and stops after
      :data:`~txn_engine.contention.carrier.HOST_IDLE_SECONDS` with nothing to carry). ``None``
      (default): on a store over the network (not ``memory://``), unless
      ``wait_for_carrier`` is False. True: on any object store (guarded creates). False:
      never.
    * ``clock`` (monotonic seconds), ``sleep`` and ``randbelow`` (``n -> int in [0, n)``)
      are injectable for tests; they do not take part in equality.
    """

    max_attempts: int = 50
    deadline: float | None = None
    initial_unit: float = 0.05
    unit_factor: float = 1.1
    adaptive: bool = True
    unit_basis: UnitBasis = "first"
    max_unit: float | None = 0.2
    slot_growth: SlotGrowth = "quadratic"
    max_slots: int | None = None
    max_window: float | None = 0.8
    max_delay: float | None = None
    chases: int | None = None
    chase_ranks: int = 6
    chase_step: float = 0.1
    offer_after: int | None = 1
    offer_early: bool = True
    wait_for_carrier: bool | None = None
    host_carrier: bool | None = None
    clock: Callable[[], float] = attrs.field(default=time.monotonic, eq=False, repr=False)
    sleep: Callable[[float], None] = attrs.field(default=time.sleep, eq=False, repr=False)
    randbelow: Callable[[int], int] = attrs.field(
        default=random.SystemRandom().randrange, eq=False, repr=False
    )

    def __attrs_post_init__(self) -> None:
        # InvalidOperationError is a ValueError: callers catching that still do
        if self.max_attempts < 1:
            raise InvalidOperationError(f"max_attempts must be >= 1, got {self.max_attempts}")
        for name in (
            "deadline",
            "initial_unit",
            "unit_factor",
            "max_delay",
            "max_unit",
            "max_window",
        ):
            value = getattr(self, name)
            if value is not None and not value >= 0:  # NaN too
                raise InvalidOperationError(f"{name} must be >= 0, got {value}")
        if self.slot_growth not in ("quadratic", "exponential"):
            raise InvalidOperationError(
                f"slot_growth must be 'quadratic' or 'exponential', got {self.slot_growth!r}"
            )
        if self.unit_basis not in ("shortest", "first"):
            raise InvalidOperationError(
                f"unit_basis must be 'shortest' or 'first', got {self.unit_basis!r}"
            )
        if self.chases is not None and self.chases < 0:
            raise InvalidOperationError(f"chases must be >= 0 or None, got {self.chases}")
        if self.chase_ranks < 0 or self.chase_step < 0:
            raise InvalidOperationError(
                f"chase_ranks and chase_step must be >= 0, got {self.chase_ranks}, "
                f"{self.chase_step}"
            )
        if self.offer_after is not None and self.offer_after < 1:
            raise InvalidOperationError(f"offer_after must be >= 1 or None, got {self.offer_after}")
        if self.max_slots is not None and self.max_slots < 1:
            raise InvalidOperationError(f"max_slots must be >= 1 or None, got {self.max_slots}")

    @classmethod
    def lance(cls) -> RetryPolicy:
        """Lance's commit retry loop exactly: 20 attempts, slots doubling from 4 without a
        cap, unit 1.1 x the first attempt without a cap."""
        return cls(
            max_attempts=20,
            slot_growth="exponential",
            max_slots=None,
            unit_basis="first",
            max_unit=None,
            max_window=None,
            chases=0,
            chase_ranks=0,
            offer_after=None,
        )

    @classmethod
    def replanning(cls) -> RetryPolicy:
        """Lance's budget for re-planning delete/update/merge-insert: 10 retries (11
        attempts), 30 s."""
        return cls(max_attempts=11, deadline=30.0)

    def budget(self) -> RetryBudget:
        """A fresh budget (one per commit call): starts the clock now."""
        return RetryBudget(self)


class SlotBackoff:
    """Slot backoff: the n-th delay (0-based) is ``randbelow(slots) * unit`` where
    ``slots`` is ``(n + 2)**2`` (quadratic) or ``2**(n + 2)`` (exponential, Lance's), at
    most ``max_slots`` and at most ``max_window / unit`` (never below 1) when given."""

    def __init__(
        self,
        unit: float,
        randbelow: Callable[[int], int],
        growth: SlotGrowth = "exponential",
        max_slots: int | None = None,
        max_window: float | None = None,
    ) -> None:
        self.unit = unit
        self.attempt = 0
        self.growth = growth
        self.max_slots = max_slots
        self.max_window = max_window
        self._randbelow = randbelow

    def slots(self) -> int:
        """Number of slots the next delay is drawn from."""
        if self.growth == "quadratic":
            slots = (self.attempt + 2) ** 2
        else:
            slots = int(2 ** (self.attempt + 2))
        if self.max_slots is not None:
            slots = min(slots, self.max_slots)
        if self.max_window is not None and self.unit > 0:
            slots = min(slots, max(1, int(self.max_window / self.unit)))
        return slots

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
        self.shortest_attempt_seconds: float | None = None
        self.backoff = SlotBackoff(
            policy.initial_unit,
            policy.randbelow,
            policy.slot_growth,
            policy.max_slots,
            policy.max_window,
        )
        self.slept: list[float] = []
        self._attempt_started: float | None = None
        #: where the first attempt is measured from when not :attr:`started`
        #: (:meth:`restart_first_attempt`)
        self._first_from: float | None = None

    def elapsed(self) -> float:
        return self.policy.clock() - self.started

    def restart_first_attempt(self) -> None:
        """Before the first attempt: the time spent so far was waiting, not attempting (a
        writer that waited for a carrier and now races), so the first attempt, which sets
        the backoff unit, the rank waits and the patience, is measured from now."""
        if self.attempts == 0:
            self._first_from = self.policy.clock()

    def start_attempt(self) -> int:
        """Count an attempt; returns its 1-based number."""
        self.attempts += 1
        self._attempt_started = self.policy.clock()
        return self.attempts

    def attempt_seconds(self) -> float:
        """How long the attempt in progress (or the last one) has taken so far."""
        started = self._attempt_started if self._attempt_started is not None else self.started
        return self.policy.clock() - started

    def exhausted_reason(self) -> str | None:
        """Why no further attempt may start (``None`` if one may)."""
        p = self.policy
        if self.attempts >= p.max_attempts:
            return f"{self.attempts} attempt(s) made, max_attempts={p.max_attempts}"
        if p.deadline is not None and self.elapsed() >= p.deadline:
            return f"deadline of {p.deadline:g}s reached after {self.elapsed():.3f}s"
        return None

    def may_chase(self) -> bool:
        """Whether the attempt that just lost may be followed at once (see ``chases``)."""
        chases = self.policy.chases
        return chases is None or self.attempts < chases

    def chase(self, *, ranked: bool = True) -> bool:
        """Before an immediate retry on a known winner: record the attempt's duration and,
        after a lost race (``ranked``), wait the rank delay (``chase_ranks``); ``False``
        when the budget is spent."""
        _, shortest = self._record_attempt()
        if self.exhausted_reason() is not None:
            return False
        p = self.policy
        if ranked and p.chase_ranks > 0 and shortest > 0:
            lost = min(self.attempts, p.chase_ranks)
            delay = (p.chase_ranks - lost) * p.chase_step * shortest
            if delay > 0:
                self.slept.append(delay)
                p.sleep(delay)
        return True

    def _record_attempt(self) -> tuple[float, float]:
        """Record the duration of the attempt that just ended; returns the first and the
        shortest attempt's durations."""
        p = self.policy
        now = p.clock()
        first = self.first_attempt_seconds
        if first is None:
            since = self.started if self._first_from is None else self._first_from
            first = self.first_attempt_seconds = now - since
            duration = first
        else:
            duration = now - (self._attempt_started if self._attempt_started is not None else now)
        shortest = self.shortest_attempt_seconds
        if shortest is None or duration < shortest:
            shortest = self.shortest_attempt_seconds = duration
        return first, shortest

    def wait(self) -> bool:
        """After a lost attempt: sleep the backoff delay and return ``True``, or return
        ``False`` (without sleeping) when no further attempt fits the budget."""
        p = self.policy
        first, shortest = self._record_attempt()
        if p.adaptive:
            basis = first if p.unit_basis == "first" else shortest
            unit = p.unit_factor * basis
            self.backoff.unit = unit if p.max_unit is None else min(unit, p.max_unit)
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
