"""The cleanup benchmark (benchmarks/cleanup.py) runs and both engines leave the same files."""

from __future__ import annotations

from pathlib import Path

from benchmarks.cleanup import bench_local, bench_s3, describe, run
from benchmarks.report import render, render_cleanup


def test_local_cleanup_benchmark_deletes_every_orphan_like_pylance(tmp_path: Path) -> None:
    row = bench_local(tmp_path, 300)
    assert row["same_files_left"] is True
    # 300 orphans + version 1's manifest and transaction file, for both
    assert row["txn_engine_deleted"] == 302
    assert row["pylance_deleted"] == 302
    assert row["pylance_s"] > 0
    assert row["txn_engine_s"] > 0
    assert "300 orphans" in describe(row)
    assert list(tmp_path.iterdir()) == []


def test_quick_run_has_one_local_row(tmp_path: Path) -> None:
    (row,) = run(tmp_path / "nested", quick=True)
    assert row["store"] == "local"
    assert row["orphans"] == 2_000
    assert row["same_files_left"] is True


def test_local_benchmark_alternates_engines_and_reports_medians(tmp_path: Path) -> None:
    row = bench_local(tmp_path, 50, runs=3)
    assert row["runs"] == 3
    assert len(row["pylance_runs_s"]) == len(row["txn_engine_runs_s"]) == 3
    assert row["pylance_s"] == sorted(row["pylance_runs_s"])[1]
    assert row["txn_engine_s"] == sorted(row["txn_engine_runs_s"])[1]
    assert row["same_files_left"] is True


def test_report_renders_the_cleanup_rows_as_a_table() -> None:
    rows = [
        {
            "store": "local",
            "orphans": 100_000,
            "runs": 3,
            "pylance_s": 7.0,
            "txn_engine_s": 5.25,
            "ratio": 0.75,
            "pylance_deleted": 100_002,
            "txn_engine_deleted": 100_002,
            "same_files_left": True,
        },
        {
            "store": "moto-s3",
            "orphans": 10_000,
            "runs": 1,
            "pylance_s": None,
            "txn_engine_s": 12.5,
            "ratio": None,
            "pylance_deleted": None,
            "txn_engine_deleted": 10_002,
            "same_files_left": None,
        },
    ]
    table = render_cleanup(rows)
    assert "| local | 100,000 | 3 | 7.00 | 5.25 | 0.75 | 100,002 / 100,002 | yes |" in table
    assert "| moto-s3 | 10,000 | 1 | n/a | 12.50 | n/a | n/a / 10,002 | n/a |" in table
    # render() of a whole results.json includes it after the other sections
    results = {
        "append_latency": [],
        "contention": [],
        "conflict_check": [],
        "storage_ops": [],
        "peak_memory_mib": {
            "pylance": 1.0,
            "pylance_delta": 0.0,
            "txn_engine": 1.0,
            "txn_engine_delta": 0.0,
        },
        "cleanup": rows,
    }
    assert "| local | 100,000 | 3 | 7.00 | 5.25 | 0.75 |" in render(results)


def test_s3_benchmark_smoke_both_engines_leave_the_same_objects() -> None:
    row = bench_s3(40)
    assert row["same_files_left"] is True
    assert row["txn_engine_deleted"] == row["pylance_deleted"] == 42
    assert row["runs"] == 1
    assert row["setup_s"] > 0
    assert "moto-s3" in describe(row)
