"""The Spark writer's driver-side retry loops run on RetryPolicy budgets (no backoff of their
own): the calls of a commit whose outcome stays unknown, and mergeSchema's re-planning.

No Spark session: the driver side of a write is called directly.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any

import attrs
import lance
import pyarrow as pa
import pytest

from txn_engine.errors import (
    CommitStateUnknownError,
    RetriesExhaustedError,
    RetryableConflictError,
)
from txn_engine.spark import FragmentCollector, _merge_schema, _write_commit

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # the faulty storage factory is named "conftest_spark:..."
    sys.path.insert(0, HERE)

pytestmark = pytest.mark.pylance

SCHEMA = pa.schema([("id", pa.int64())])


def _recorded(policy: Any, sleeps: list[float]) -> Any:
    """``policy`` recording its sleeps instead of sleeping, drawing the highest slot."""
    return attrs.evolve(policy, sleep=sleeps.append, randbelow=lambda n: n - 1)


def _dataset(tmp_path: Path) -> str:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"id": pa.array([0], pa.int64())}), uri)
    return uri


def test_unknown_outcome_calls_back_off_by_the_retry_policy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every call loses its response and the history stays unreadable: ``commit_attempts``
    calls, with the policy's sleeps between them (50 ms unit, slots doubling from 4), then
    CommitStateUnknownError naming the number of calls."""
    sleeps: list[float] = []
    monkeypatch.setattr(
        _write_commit,
        "UNKNOWN_OUTCOME_RETRY",
        _recorded(_write_commit.UNKNOWN_OUTCOME_RETRY, sleeps),
    )
    uri = _dataset(tmp_path)
    flag = tmp_path / "lose"
    collector = FragmentCollector.plan(
        uri,
        schema=SCHEMA,
        storage_factory="conftest_spark:faulty_storage",
        storage_options={"lose_response_flag": str(flag), "outage_reads": 1000},
        commit_attempts=3,
    )
    fragments = collector.write_batches([pa.record_batch([pa.array([1, 2], pa.int64())], ["id"])])
    flag.touch()
    with pytest.raises(CommitStateUnknownError, match="failed 3 time"):
        collector.commit(fragments)
    assert not flag.exists()  # the fault fired
    assert sleeps == [pytest.approx(3 * 0.05), pytest.approx(7 * 0.05)]
    assert lance.dataset(uri).version == 2  # it landed; nobody could tell


def test_unknown_outcome_sleep_is_capped() -> None:
    """The policy's single sleep never exceeds 2 s, however many calls were lost."""
    sleeps: list[float] = []
    budget = attrs.evolve(
        _recorded(_write_commit.UNKNOWN_OUTCOME_RETRY, sleeps), max_attempts=10
    ).budget()
    while True:
        budget.start_attempt()
        if not budget.wait():
            break
    assert budget.attempts == 10
    assert len(sleeps) == 9
    assert sleeps[:3] == [pytest.approx(s * 0.05) for s in (3, 7, 15)]
    assert max(sleeps) <= 2.0


def test_merge_schema_replans_within_its_retry_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A column addition preempted on every plan: re-planned with the policy's backoff
    between plans, then the last conflict is raised; nothing is committed."""
    sleeps: list[float] = []
    three = attrs.evolve(_merge_schema.MERGE_SCHEMA_RETRY, max_attempts=3)
    monkeypatch.setattr(_merge_schema, "MERGE_SCHEMA_RETRY", _recorded(three, sleeps))
    plans: list[int] = []

    def preempted(storage: Any, txn: Any, **_: Any) -> Any:
        plans.append(txn.read_version)
        raise RetryableConflictError(f"preempted {len(plans)}", read_version=txn.read_version)

    # the module, not the function txn_engine re-exports under the same name
    monkeypatch.setattr(importlib.import_module("txn_engine.commit"), "commit", preempted)
    uri = _dataset(tmp_path)
    wider = pa.schema([("id", pa.int64()), ("name", pa.string())])
    # the columns and the rows land in one Merge, committed (and re-planned) by commit()
    collector = FragmentCollector.plan(uri, schema=wider, merge_schema=True, commit_attempts=4)
    batch = pa.record_batch([pa.array([1]), pa.array(["a"])], schema=wider)
    with pytest.raises(RetriesExhaustedError) as info:
        collector.commit(collector.write_batches([batch]))
    assert "preempted 4" in str(info.value.__cause__)
    assert plans == [1, 1, 1, 1]
    assert len(sleeps) == 3  # between the plans, as long as a plan took (not slept here)
    assert all(s > 0 for s in sleeps)
    assert lance.dataset(uri).version == 1
