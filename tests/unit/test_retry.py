"""RetryPolicy / SlotBackoff / RetryBudget with an injected clock, sleep and randomness."""

from __future__ import annotations

import random

import attrs
import pytest

from txn_engine.retry import RetryPolicy, SlotBackoff


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds


def test_slot_backoff_slots_double_from_four_in_lances_schedule() -> None:
    draws: list[int] = []

    def top(n: int) -> int:
        draws.append(n)
        return n - 1

    b = SlotBackoff(0.1, top, "exponential")
    assert [b.next_delay() for _ in range(4)] == pytest.approx([0.3, 0.7, 1.5, 3.1])
    assert draws == [4, 8, 16, 32]
    assert b.attempt == 4


def test_slot_backoff_slots_grow_quadratically() -> None:
    draws: list[int] = []

    def top(n: int) -> int:
        draws.append(n)
        return n - 1

    # max_window=None: the growth law itself; the default bounds the window (next test)
    b = RetryPolicy(randbelow=top, max_window=None).budget().backoff
    assert [b.next_delay() for _ in range(5)] == pytest.approx(
        [0.05 * 3, 0.05 * 8, 0.05 * 15, 0.05 * 24, 0.05 * 35]
    )
    assert draws == [4, 9, 16, 25, 36]


def test_default_window_stops_growing_at_0_8_seconds() -> None:
    """Issue 14 item 4: on a store with 25 ms requests the unbounded quadratic schedule slept
    up to 2.9 s (4 writers) and 10-13 s (8 writers). Slots now grow only while slots x unit
    stays within 0.8 s: 4 slots of a 0.2 s unit, 16 of 0.05 s, 160 of 5 ms (local disk)."""
    for unit, cap in ((0.2, 4), (0.05, 16), (0.005, 160)):
        draws: list[int] = []

        def top(n: int, draws: list[int] = draws) -> int:
            draws.append(n)
            return n - 1

        b = RetryPolicy(randbelow=top).budget().backoff
        b.unit = unit
        delays = [b.next_delay() for _ in range(40)]
        assert draws == [min((n + 2) ** 2, cap) for n in range(40)]
        assert max(delays) < 0.8
        assert max(delays) == pytest.approx((cap - 1) * unit)
    b = SlotBackoff(2.0, lambda n: n - 1, "quadratic", max_window=0.8)
    assert b.slots() == 1  # a unit beyond the window: no sleep rather than a long one
    assert SlotBackoff(0.1, lambda n: 0, "quadratic", max_slots=3).slots() == 3


def test_default_budget_waits_far_less_in_total_than_lances() -> None:
    """50 quadratic attempts allow fewer units of sleep than Lance's 20 doubling ones, and
    the default's window bounds every sleep below 0.8 s whatever the unit."""
    quadratic = sum((n + 2) ** 2 - 1 for n in range(RetryPolicy().max_attempts - 1))
    lance = RetryPolicy.lance()
    exponential = sum(2 ** (n + 2) - 1 for n in range(lance.max_attempts - 1))
    assert (lance.max_attempts, lance.slot_growth, lance.max_window) == (20, "exponential", None)
    assert quadratic < exponential / 40  # 42,875 vs 2,097,129 units
    assert RetryPolicy().max_window == 0.8  # so 49 sleeps total under 40 s on any store


def test_lances_schedule_is_uncapped_and_keeps_the_first_attempts_unit() -> None:
    clock = FakeClock()
    draws: list[int] = []

    def top(n: int) -> int:
        draws.append(n)
        return n - 1

    policy = attrs.evolve(RetryPolicy.lance(), clock=clock.now, sleep=clock.sleep, randbelow=top)
    assert (policy.unit_basis, policy.max_slots, policy.max_unit, policy.max_window) == (
        "first",
        None,
        None,
        None,
    )
    budget = policy.budget()
    for duration in (0.1, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01):
        budget.start_attempt()
        clock.t += duration
        assert budget.wait()
    assert draws == [4, 8, 16, 32, 64, 128, 256]
    assert budget.backoff.unit == pytest.approx(0.11)  # the first attempt's, not the shortest


def test_unit_follows_the_shortest_attempt_when_asked() -> None:
    """The first attempt also pays one-off costs (opening the store, the atomicity probe, the
    .txn write); a retry costs a listing, a read and a put. The unit follows the cheapest."""
    clock = FakeClock()
    policy = RetryPolicy(
        clock=clock.now,
        sleep=clock.sleep,
        randbelow=lambda n: 1,
        max_unit=None,
        unit_basis="shortest",
    )
    budget = policy.budget()
    budget.start_attempt()
    clock.t += 0.3  # first attempt: 300 ms
    assert budget.wait()
    assert budget.backoff.unit == pytest.approx(0.33)
    budget.start_attempt()
    clock.t += 0.08  # a retry: 80 ms
    assert budget.wait()
    assert budget.backoff.unit == pytest.approx(0.088)
    budget.start_attempt()
    clock.t += 0.5  # a slower retry does not raise it again
    assert budget.wait()
    assert budget.backoff.unit == pytest.approx(0.088)
    assert clock.sleeps == pytest.approx([0.33, 0.088, 0.088])
    assert budget.shortest_attempt_seconds == pytest.approx(0.08)
    assert budget.first_attempt_seconds == pytest.approx(0.3)


def test_unit_is_capped_at_max_unit_by_default() -> None:
    """A first attempt that read 60 versions it was behind (1.5 s on a 25 ms store) must not
    make every later sleep seconds long: the unit stops at 0.2 s (about three requests)."""
    clock = FakeClock()
    policy = RetryPolicy(clock=clock.now, sleep=clock.sleep, randbelow=lambda n: n - 1)
    assert policy.max_unit == 0.2
    budget = policy.budget()
    budget.start_attempt()
    clock.t += 1.5
    assert budget.wait()
    assert budget.backoff.unit == pytest.approx(0.2)
    assert clock.sleeps == [pytest.approx(0.6)]  # 3 units of 0.2 s, not of 1.65 s
    budget.start_attempt()
    clock.t += 0.05  # the unit stays the first attempt's (capped)
    assert budget.wait()
    assert budget.backoff.unit == pytest.approx(0.2)
    assert clock.sleeps[1] == pytest.approx(0.6)  # still 4 slots: 0.8 s / 0.2 s
    assert RetryPolicy.lance().max_unit is None


def test_no_default_sleep_reaches_the_window() -> None:
    """Whatever the draws and attempt durations (10 ms to 3 s), no single default sleep
    reaches 0.8 s (the previous default slept up to 48 units of 3.3 s here)."""
    rng = random.Random(11)
    for _ in range(50):
        clock = FakeClock()
        budget = RetryPolicy(clock=clock.now, sleep=clock.sleep, randbelow=rng.randrange).budget()
        for _ in range(30):
            budget.start_attempt()
            clock.t += rng.uniform(0.01, 3.0)
            assert budget.wait()
        assert max(clock.sleeps, default=0.0) < 0.8


def test_non_adaptive_unit() -> None:
    clock = FakeClock()
    policy = RetryPolicy(
        adaptive=False, initial_unit=0.5, clock=clock.now, sleep=clock.sleep, randbelow=lambda n: 2
    )
    budget = policy.budget()
    budget.start_attempt()
    clock.t += 3
    assert budget.wait()
    assert clock.sleeps == [1.0]


def test_attempt_budget() -> None:
    clock = FakeClock()
    policy = RetryPolicy(max_attempts=3, clock=clock.now, sleep=clock.sleep, randbelow=lambda n: 0)
    budget = policy.budget()
    results = []
    for _ in range(5):
        budget.start_attempt()
        ok = budget.wait()
        results.append(ok)
        if not ok:
            break
    assert results == [True, True, False]
    assert budget.attempts == 3
    assert "max_attempts=3" in (budget.exhausted_reason() or "")


def test_deadline_budget_stops_before_a_sleep_that_would_cross_it() -> None:
    clock = FakeClock()
    policy = RetryPolicy(
        deadline=1.0,
        adaptive=False,
        initial_unit=0.3,
        clock=clock.now,
        sleep=clock.sleep,
        randbelow=lambda n: 1,
    )
    budget = policy.budget()
    budget.start_attempt()
    clock.t += 0.1
    assert budget.wait()  # 0.1 + 0.3 < 1.0
    budget.start_attempt()
    clock.t += 0.4  # now 0.8
    assert not budget.wait()  # 0.8 + 0.3 >= 1.0
    assert clock.sleeps == [0.3]
    assert clock.t == pytest.approx(0.8)


def test_deadline_reason_and_max_delay() -> None:
    clock = FakeClock()
    policy = RetryPolicy(
        deadline=10, max_delay=0.05, clock=clock.now, sleep=clock.sleep, randbelow=lambda n: n - 1
    )
    budget = policy.budget()
    budget.start_attempt()
    clock.t += 1.0
    assert budget.wait()
    assert clock.sleeps == [0.05]  # capped (3 units of 0.2 s otherwise)
    clock.t = 11
    assert "deadline" in (budget.exhausted_reason() or "")


def test_policy_validation_and_equality() -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError, match="deadline"):
        RetryPolicy(deadline=-1)
    assert RetryPolicy(max_attempts=3) == RetryPolicy(max_attempts=3, sleep=lambda s: None)
    r = RetryPolicy.replanning()
    assert (r.max_attempts, r.deadline) == (11, 30.0)
    assert RetryPolicy().max_attempts == 50
    with pytest.raises(ValueError, match="slot_growth"):
        RetryPolicy(slot_growth="linear")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unit_basis"):
        RetryPolicy(unit_basis="last")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_slots"):
        RetryPolicy(max_slots=0)
    defaults = RetryPolicy()
    assert (defaults.max_slots, defaults.unit_basis, defaults.max_unit, defaults.max_window) == (
        None,
        "first",
        0.2,
        0.8,
    )
    with pytest.raises(ValueError, match="max_unit"):
        RetryPolicy(max_unit=-0.1)
    with pytest.raises(ValueError, match="max_window"):
        RetryPolicy(max_window=-1)
    assert RetryPolicy().deadline is None


def test_a_chase_waits_its_rank_the_more_races_lost_the_sooner() -> None:
    """An immediate retry on a known winner after a lost race waits ``(chase_ranks - lost)
    x chase_step x the shortest attempt``: a writer that has lost more races sends its
    create earlier than one that has lost fewer, and from ``chase_ranks`` losses on it
    does not wait at all. Only the budget ends chasing (``chases=None``, the default)."""
    clock = FakeClock()
    policy = RetryPolicy(clock=clock.now, sleep=clock.sleep, max_attempts=9)
    assert (policy.chases, policy.chase_ranks, policy.chase_step) == (None, 6, 0.1)
    budget = policy.budget()
    waits = []
    for _ in range(8):
        budget.start_attempt()
        clock.t += 0.05  # every attempt: 50 ms
        assert budget.may_chase()
        before = len(clock.sleeps)
        assert budget.chase(ranked=True)
        waits.append(sum(clock.sleeps[before:]))
    assert waits == pytest.approx([0.025, 0.02, 0.015, 0.01, 0.005, 0, 0, 0])
    budget.start_attempt()  # the 9th attempt spends the budget
    clock.t += 0.05
    assert not budget.chase(ranked=True)


def test_a_chase_after_a_stale_base_does_not_wait() -> None:
    """``ranked=False`` (the first create lost only because the base was behind): the retry
    starts at once, with no rank wait."""
    clock = FakeClock()
    budget = RetryPolicy(clock=clock.now, sleep=clock.sleep).budget()
    budget.start_attempt()
    clock.t += 0.05
    assert budget.chase(ranked=False)
    assert clock.sleeps == []


def test_chase_limits_and_lances_schedule_has_none() -> None:
    """``chases=N``: only the first N attempts may be followed at once (then the backoff
    schedule); Lance's schedule never chases and never waits a rank."""
    budget = RetryPolicy(chases=3).budget()
    allowed = []
    for _ in range(5):
        budget.start_attempt()
        allowed.append(budget.may_chase())
    assert allowed == [True, True, False, False, False]
    lance = RetryPolicy.lance()
    assert (lance.chases, lance.chase_ranks) == (0, 0)
    b = lance.budget()
    b.start_attempt()
    assert not b.may_chase()
    with pytest.raises(ValueError, match="chases"):
        RetryPolicy(chases=-1)
    with pytest.raises(ValueError, match="chase_ranks"):
        RetryPolicy(chase_ranks=-1)


def test_a_wait_for_a_carrier_before_the_first_attempt_sets_no_schedule() -> None:
    """A writer that waited 3 s for a carrier and then races: its first attempt (the basis
    of the rank wait, the backoff unit and the patience) is the attempt, not the wait.
    Counted from the start, the rank wait after a lost race was 0.5 x 3 s (seen as 1.6-2.7 s
    commits in the lab when a carrier left)."""
    clock = FakeClock()
    budget = RetryPolicy(clock=clock.now, sleep=clock.sleep).budget()
    clock.t = 3.0  # waited for a carrier
    budget.restart_first_attempt()
    budget.start_attempt()
    clock.t = 3.04  # one attempt: 40 ms
    assert budget.chase(ranked=True)
    assert budget.first_attempt_seconds == pytest.approx(0.04)
    assert clock.sleeps == [pytest.approx(5 * 0.1 * 0.04)]  # 6 ranks, 1 lost: 0.5 x 40 ms
    # without the restart the same wait counts: the old figure
    clock2 = FakeClock()
    other = RetryPolicy(clock=clock2.now, sleep=clock2.sleep).budget()
    clock2.t = 3.0
    other.start_attempt()
    clock2.t = 3.04
    other.chase(ranked=True)
    assert clock2.sleeps == [pytest.approx(0.5 * 3.04)]
    # after the first attempt a restart changes nothing
    budget.restart_first_attempt()
    assert budget.first_attempt_seconds == pytest.approx(0.04)
