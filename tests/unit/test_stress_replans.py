"""The stress writer re-plans a retryable conflict within its re-planning budget (a
RetryPolicy of ``replans + 1`` plans), and gives up on an incompatible one at once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from txn_engine.apps import _stress_writer, stress
from txn_engine.errors import IncompatibleTransactionError, RetryableConflictError


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: type, replans: int) -> Any:
    uri = str(tmp_path / "t.lance")
    seed_path, _ = stress.create_seed(uri, real=False)
    planned: list[int] = []

    def preempted(storage: Any, txn: Any, **_: Any) -> Any:
        planned.append(txn.read_version)
        raise error("preempted", read_version=txn.read_version, operation=txn.kind)

    monkeypatch.setattr(_stress_writer, "commit", preempted)  # the writer's commit
    spec = stress.WriterSpec(
        uri=uri,
        writer=0,
        commits=2,
        journal_dir=str(tmp_path),
        seed_path=seed_path,
        mix=(("config", 1),),
        real=False,
        replans=replans,
    )
    stress.run_writer(spec)
    return json.loads((tmp_path / "w0.stats.json").read_text()), planned


def test_retryable_conflicts_are_re_planned_within_the_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stats, planned = _run(tmp_path, monkeypatch, RetryableConflictError, replans=2)
    assert planned == [1] * 6  # 2 operations x (1 plan + 2 re-plans)
    assert (stats["replans"], stats["failed"], stats["committed"]) == (4, 2, 0)


def test_incompatible_conflicts_are_not_re_planned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stats, planned = _run(tmp_path, monkeypatch, IncompatibleTransactionError, replans=2)
    assert planned == [1, 1]
    assert (stats["replans"], stats["failed"]) == (0, 2)
