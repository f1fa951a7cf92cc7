"""The cleanup benchmark (benchmarks/cleanup.py) runs and both engines leave the same files."""

from __future__ import annotations

from pathlib import Path

from benchmarks.cleanup import bench_local, describe, run


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
