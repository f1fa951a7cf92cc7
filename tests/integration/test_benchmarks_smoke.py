"""The benchmark command runs end to end (quick sizes) and writes its JSON and plot."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.report import render
from benchmarks.run import main


def test_quick_benchmark_writes_results_and_plot(tmp_path: Path) -> None:
    assert main(["--quick", "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert {r["fragments"] for r in results["append_latency"]} == {10, 100}
    for row in results["append_latency"]:
        assert row["pylance_ms"] > 0
        assert row["txn_engine_ms"] > 0
    assert all(r["txn_engine"]["failures"] == 0 for r in results["contention"])
    ops = results["storage_ops"][0]
    # a small table's _versions/ is listed (cheaper than checking the latest-version hint);
    # one write: the manifest (the transaction inline only, no .txn copy by default)
    assert (ops["lists"], ops["writes"]) == (1, 1)
    assert results["storage_ops"][1]["reads"] <= results["storage_ops"][1]["k"] + 1
    assert (tmp_path / "append_latency.png").stat().st_size > 1000
    assert all(len(r["txn_engine"]["runs"]) == 2 for r in results["contention"])
    table = render(results)
    assert "| 100 | warm |" in table
    assert "| 2 | stale |" in table
    assert "| local | 2,000 | 1 |" in table  # workload 7, cleanup


def test_store_time_measures_the_listed_times_against_the_clock(tmp_path: Path) -> None:
    from benchmarks.store_time import measure

    out = measure(str(tmp_path / "t"), None, 30)
    assert out["objects"] == 30
    # local disk lists nanoseconds, stamped by the kernel's tick: far inside the margin
    assert out["granularity"] in ("1 ns", "1 us")
    assert 0 <= out["early_ms"] < 100
    assert out["within_margin"] is True
