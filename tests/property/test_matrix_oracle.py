"""The conflict matrix against a brute-force oracle (style anchors §4 pattern C).

For every ordered pair of the planner's operation kinds, two writers plan operations
against the same snapshot; the first commits, then the second.
When the engine lets the second land (compatible, possibly after a rebase), the table must
be exactly what a *serial* execution of the two intents gives (reference model); when it
raises a conflict, the conflict must be one the matrix allows for that pair and nothing
may have landed. ``event()`` records which pairs were seen and how they ended
(``pytest --hypothesis-show-statistics``).
"""

from __future__ import annotations

import pytest
from hypothesis import event, given, note, settings
from hypothesis import strategies as st

from txn_engine.commit import CommitResult, commit, find_transaction
from txn_engine.conflicts.matrix import MATRIX, Outcome
from txn_engine.dataset import Dataset
from txn_engine.errors import CommitConflictError
from txn_engine.ops import Overwrite
from txn_engine.retry import RetryPolicy
from txn_engine.storage.base import Storage
from txn_engine.storage.memory import MemoryStorage
from txn_engine.testing.machine import ALL_KINDS, SCHEMA, Planner
from txn_engine.testing.model import (
    Contents,
    EffectError,
    HistoryModel,
    IntentModel,
    SyntheticRows,
    apply_effect,
    read_contents,
)
from txn_engine.transaction import Transaction
from txn_engine.verify import verify

_POLICY = RetryPolicy(max_attempts=2, sleep=lambda s: None, randbelow=lambda n: 0)
_SETUP_KINDS = ("append", "delete", "update", "config", "index", "compact")


def _commit_or_conflict(storage: Storage, txn: Transaction) -> CommitResult | CommitConflictError:
    try:
        return commit(storage, txn, retry_policy=_POLICY)
    except CommitConflictError as exc:
        return exc


@pytest.mark.parametrize("second", ALL_KINDS)
@pytest.mark.parametrize("first", ALL_KINDS)
@settings(max_examples=25)
@given(data=st.data(), sizes=st.lists(st.integers(1, 5), min_size=1, max_size=3))
def test_compatible_pairs_give_the_serial_result(
    data: st.DataObject, first: str, second: str, sizes: list[int]
) -> None:
    storage = MemoryStorage()
    rows = SyntheticRows()
    planner = Planner(storage, rows)
    # a small history: fragments of the drawn sizes, then a few serial operations
    start = 0
    frags = []
    for n in sizes:
        frags.append(rows.fragment((rid, 0) for rid in range(start, start + n)))
        start += n
    created = commit(storage, Transaction(0, Overwrite(tuple(frags), SCHEMA)))
    intent = IntentModel(
        created.version, Contents.of((r, 0) for r in range(start)), merge_deletes=True
    )
    for kind in data.draw(st.lists(st.sampled_from(_SETUP_KINDS), max_size=3), label="setup"):
        snapshot = Dataset.open(storage)
        planned = planner.plan(kind, snapshot, data)
        if planned is None:
            continue
        landed = commit(storage, Transaction(snapshot.version, planned[0]))
        intent.land(landed.version, planned[1])

    base = Dataset.open(storage)
    plan_a = planner.plan(first, base, data, 0)
    plan_b = planner.plan(second, base, data, 1)
    if plan_a is None or plan_b is None:
        event("impossible on this snapshot")
        return
    a = Transaction(base.version, plan_a[0])
    b = Transaction(base.version, plan_b[0])
    note(f"first {a.kind}: {plan_a[1]}; second {b.kind}: {plan_b[1]}")
    landed_a = commit(storage, a, retry_policy=_POLICY)
    assert landed_a.version == base.version + 1
    intent.land(landed_a.version, plan_a[1])

    landed_b = _commit_or_conflict(storage, b)
    if isinstance(landed_b, CommitConflictError):
        exc = landed_b
        kind = "retryable" if exc.retryable else "incompatible"
        event(f"{b.kind} after {a.kind}: {kind} ({exc.conflicts[0].rule})")
        assert find_transaction(storage, b.uuid) is None, "a rejected commit left a version"
        rule = MATRIX[(b.kind, a.kind)]
        assert exc.other_operation in (a.kind, None)
        assert rule.outcome is not Outcome.COMPATIBLE, f"matrix says {b.kind} after {a.kind} ✓"
        if rule.outcome is not None:
            assert exc.retryable == (rule.outcome is Outcome.RETRYABLE)
        return
    event(f"{b.kind} after {a.kind}: lands")
    assert landed_b.version == landed_a.version + 1
    try:
        expected = apply_effect(
            intent.contents(), plan_b[1], intent.history, merge_deletes=intent.merge_deletes
        )
    except EffectError as exc:
        raise AssertionError(
            f"{b.kind} landed after {a.kind}, but a serial execution cannot do that: {exc}"
        ) from exc
    diff = expected.difference(read_contents(storage, rows))
    assert diff is None, f"{b.kind} after {a.kind} differs from the serial execution: {diff}"
    assert HistoryModel(storage, rows).advance() == []
    report = verify(storage)
    assert report.ok, report.findings
