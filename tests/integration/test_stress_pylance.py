"""txn-engine stress: the showcase run passes (pylance-written and synthetic data, with
every fault kind injected), the CLI reports and exits as documented, and the run's
verification catches a history that does not match the writers' journals."""

from __future__ import annotations

import json
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from txn_engine.apps.cli import main
from txn_engine.apps.stress import SEED_ROWS, run_stress, verify_run
from txn_engine.commit import commit
from txn_engine.format.naming import list_versions
from txn_engine.ops import UpdateConfig, UpdateMap
from txn_engine.storage import open_storage
from txn_engine.testing.fault_storage import FAULT_KINDS
from txn_engine.transaction import Transaction


def test_stress_run_lands_and_verifies_every_commit(tmp_path: Path) -> None:
    journals = tmp_path / "journals"
    report = run_stress(
        str(tmp_path / "ds"), writers=3, commits=12, seed=7, progress=None, keep_journals=journals
    )
    assert report.ok, report.render()
    assert report.committed == 36
    assert report.failed == 0
    assert report.pylance_rows == report.expected_rows == report.txn_engine_rows
    assert report.expected_rows is not None
    assert report.expected_rows > SEED_ROWS // 2
    assert report.attempts >= report.committed
    assert report.versions == 37  # seed + 36
    assert len(list_versions(open_storage(str(tmp_path / "ds")))) == 37
    assert sorted(p.name for p in journals.glob("*.jsonl")) == ["w0.jsonl", "w1.jsonl", "w2.jsonl"]
    assert report.latency_p50_ms > 0
    assert report.latency_p99_ms >= report.latency_p50_ms


def test_stress_under_every_fault_kind_settles_every_commit(tmp_path: Path) -> None:
    report = run_stress(
        str(tmp_path / "ds"),
        writers=3,
        commits=15,
        fault_rate=0.5,
        fault_kinds=FAULT_KINDS,
        seed=3,
        progress=None,
    )
    assert report.ok, report.render()
    assert report.committed + report.failed == 45
    assert sum(report.faults_injected.values()) > 5
    assert report.crashed + report.state_unknown + report.storage_errors == report.failed
    assert "faults injected" in report.render()


def test_synthetic_stress_needs_no_data_files(tmp_path: Path) -> None:
    report = run_stress(str(tmp_path / "ds"), writers=2, commits=10, synthetic=True, progress=None)
    assert report.ok, report.render()
    assert report.pylance_rows is None
    assert not (tmp_path / "ds" / "data").exists()


def test_stress_cli_json_report_and_progress(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["stress", str(tmp_path / "ds"), "--writers", "2", "--commits", "4", "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    data = json.loads(out)
    assert data["ok"] is True
    assert data["committed"] == 8
    assert data["versions"] == 9
    faulty = ["--mix", "append=1,config=1", "--faults", "all", "--fault-rate", "0.1"]
    code = main(["stress", str(tmp_path / "ds2"), "--writers", "1", "--commits", "3", *faulty])
    captured = capsys.readouterr()
    assert code == 0, captured.out
    assert "verification       PASSED" in captured.out
    assert "[stress] 3/3 operations done" in captured.err


@pytest.mark.parametrize(
    "args",
    [
        ["--mix", "append=1,frobnicate=2"],
        ["--faults", "gremlins", "--fault-rate", "0.5"],
        ["-o", "no-equals-sign"],
    ],
)
def test_stress_cli_rejects_bad_options(
    tmp_path: Path, args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # usage errors (exit 2), found before anything is created
    assert main(["stress", str(tmp_path / "ds"), "--commits", "1", *args]) == 2
    assert "error" in capsys.readouterr().err
    assert not (tmp_path / "ds").exists()


def test_stress_refuses_an_existing_dataset_and_memory_uris(tmp_path: Path) -> None:
    lance.write_dataset(pa.table({"a": [1]}), str(tmp_path / "ds"))
    assert main(["stress", str(tmp_path / "ds"), "--writers", "1", "--commits", "1"]) == 1
    assert main(["stress", "memory://x", "--writers", "1", "--commits", "1"]) == 2


def test_verification_catches_a_commit_no_writer_made(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    journals = tmp_path / "journals"
    report = run_stress(uri, writers=1, commits=3, progress=None, keep_journals=journals)
    assert report.ok, report.render()
    # someone else changes the table behind the writers' backs
    latest = list_versions(open_storage(uri))[-1].version
    commit(uri, Transaction(latest, UpdateConfig(config_updates=UpdateMap({"x": "y"}))))
    seed_path = lance.dataset(uri, version=1).get_fragments()[0].data_files()[0].path
    findings, _, versions, rows = verify_run(uri, journals, seed_path=seed_path, real=True)
    assert versions == 5
    assert rows == report.pylance_rows
    assert any("is in no journal" in f for f in findings), findings
