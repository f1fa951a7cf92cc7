"""RetryPolicy / SlotBackoff / RetryBudget with an injected clock, sleep and randomness."""

from __future__ import annotations

import random

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


def test_slot_backoff_slots_grow_quadratically_by_default() -> None:
    draws: list[int] = []

    def top(n: int) -> int:
        draws.append(n)
        return n - 1

    b = RetryPolicy(randbelow=top).budget().backoff
    assert [b.next_delay() for _ in range(5)] == pytest.approx(
        [0.05 * 3, 0.05 * 8, 0.05 * 15, 0.05 * 24, 0.05 * 35]
    )
    assert draws == [4, 9, 16, 25, 36]


def test_default_budget_waits_far_less_in_total_than_lances() -> None:
    """50 quadratic attempts allow fewer units of sleep than Lance's 20 doubling ones."""
    quadratic = sum((n + 2) ** 2 - 1 for n in range(RetryPolicy().max_attempts - 1))
    lance = RetryPolicy.lance()
    exponential = sum(2 ** (n + 2) - 1 for n in range(lance.max_attempts - 1))
    assert (lance.max_attempts, lance.slot_growth) == (20, "exponential")
    assert quadratic < exponential / 40  # 42,875 vs 2,097,129 units


def test_slot_backoff_delays_are_whole_units_within_bounds() -> None:
    rng = random.Random(7)
    for _ in range(200):
        growth = rng.choice(["quadratic", "exponential"])
        b = SlotBackoff(0.01, rng.randrange, growth)
        for n in range(6):
            d = b.next_delay()
            slots = (n + 2) ** 2 if growth == "quadratic" else 2 ** (n + 2)
            assert 0 <= d <= (slots - 1) * 0.01 + 1e-12
            assert abs(d / 0.01 - round(d / 0.01)) < 1e-9


def test_unit_adapts_to_first_attempt_duration() -> None:
    clock = FakeClock()
    policy = RetryPolicy(clock=clock.now, sleep=clock.sleep, randbelow=lambda n: 1)
    budget = policy.budget()
    budget.start_attempt()
    clock.t += 0.2  # the first attempt took 200 ms
    assert budget.wait()
    assert budget.backoff.unit == pytest.approx(0.22)
    assert clock.sleeps == [pytest.approx(0.22)]
    budget.start_attempt()
    clock.t += 5.0  # later attempts do not change the unit
    assert budget.wait()
    assert budget.backoff.unit == pytest.approx(0.22)


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
    assert clock.sleeps == [0.05]  # capped (unit 1.1 s x 3 slots otherwise)
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
    assert RetryPolicy().deadline is None
