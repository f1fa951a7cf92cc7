"""Spark read benchmark: ``spark.read.format("txn_lance")`` against pylance's own
``to_table`` on the same table, in the same run.

    python -m benchmarks.spark_read [--rows 10000000] [--runs 2]

A pylance-written table of ``rows`` rows (``id`` int64, ``k`` int32 = id % 1000, ``v``
double, ``s`` string of 1..3 characters), one fragment per million rows, is scanned:

* **full scan**: every row and column. pylance: ``to_table()``; Spark: the DataFrame
  written to Spark's ``noop`` sink (every row materialised in the executors, nothing sent to
  the driver);
* **selective scan**: ``k = 7`` (0.1 % of the rows, spread over every fragment). pylance:
  ``to_table(filter="k = 7")``; Spark: ``where("k = 7")``, with the filter pushed into
  pylance's scan and, for comparison, with ``filter_pushdown=false`` (Spark filters).

Figures are rows of the table per second (the selective scan reads the whole table to find
its rows), medians of ``runs`` runs after one warm-up, and the ratio Spark / pylance (< 1:
Spark is slower). Spark runs in local mode with as many threads as the machine has cores.
``benchmarks.run`` calls :func:`run` (with a tiny table under ``--quick``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

ROWS_PER_FRAGMENT = 1_000_000


def build_table(uri: str, rows: int) -> None:
    """The benchmark table (written by pylance, in chunks to bound memory)."""
    chunk = min(rows, ROWS_PER_FRAGMENT)
    mode = "create"
    for start in range(0, rows, chunk):
        ids = np.arange(start, min(rows, start + chunk), dtype=np.int64)
        table = pa.table(
            {
                "id": ids,
                "k": (ids % 1000).astype(np.int32),
                "v": ids * 0.5,
                "s": pc.cast(pa.array(ids & 255), pa.string()),
            }
        )
        lance.write_dataset(table, uri, mode=mode, max_rows_per_file=ROWS_PER_FRAGMENT)
        mode = "append"


def _median_seconds(fn: Callable[[], int], runs: int, expected: int) -> float:
    fn()  # warm-up (page cache, Python workers)
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        got = fn()
        samples.append(time.perf_counter() - start)
        if got != expected:
            raise AssertionError(f"scan returned {got} rows, expected {expected}")
    return statistics.median(samples)


def _session() -> tuple[Any, bool]:
    """(SparkSession, whether this module started it): a session already running in this
    process (a test run, a notebook) is used and left running."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from txn_engine.spark import register

    active = SparkSession.getActiveSession()
    if active is not None:
        register(active)
        return active, False
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "lance is not fork-safe", UserWarning)
        spark = (
            SparkSession.builder.master(f"local[{os.cpu_count() or 2}]")
            .appName("txn_engine-spark-read-benchmark")
            .config("spark.ui.enabled", "false")
            .config("spark.driver.memory", "2g")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark, True


def _noop(df: Any) -> None:
    df.write.format("noop").mode("overwrite").save()


def run(rows: int = 10_000_000, runs: int = 2, root: str | None = None) -> dict[str, Any]:
    """Build the table under ``root`` (a temporary directory by default), time the scans,
    return the figures (see the module docstring)."""
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        uri = str(Path(tmp) / "bench.lance")
        started = time.perf_counter()
        build_table(uri, rows)
        build_s = time.perf_counter() - started
        ds = lance.dataset(uri)
        selected = ds.count_rows(filter="k = 7")
        fragments = len(ds.get_fragments())

        p_full = _median_seconds(lambda: ds.to_table().num_rows, runs, rows)
        p_sel = _median_seconds(lambda: ds.to_table(filter="k = 7").num_rows, runs, selected)

        spark, started_here = _session()
        try:

            def spark_full() -> int:
                _noop(spark.read.format("txn_lance").load(uri))
                return rows

            def spark_count(pushdown: bool) -> Callable[[], int]:
                def fn() -> int:
                    df = (
                        spark.read.format("txn_lance")
                        .option("filter_pushdown", str(pushdown).lower())
                        .load(uri)
                        .where("k = 7")
                    )
                    return int(df.count())

                return fn

            s_full = _median_seconds(spark_full, runs, rows)
            s_sel = _median_seconds(spark_count(True), runs, selected)
            s_sel_nopush = _median_seconds(spark_count(False), runs, selected)
            partitions = spark.read.format("txn_lance").load(uri).rdd.getNumPartitions()
        finally:
            if started_here:
                spark.stop()

    def rate(seconds: float) -> float:
        return rows / seconds

    return {
        "rows": rows,
        "fragments": fragments,
        "spark_partitions": partitions,
        "selected_rows": selected,
        "cores": os.cpu_count(),
        "runs": runs,
        "build_s": build_s,
        "full_scan": {
            "pylance_rows_per_s": rate(p_full),
            "spark_rows_per_s": rate(s_full),
            "ratio": p_full / s_full,
        },
        "selective_scan": {
            "pylance_rows_per_s": rate(p_sel),
            "spark_rows_per_s": rate(s_sel),
            "spark_no_pushdown_rows_per_s": rate(s_sel_nopush),
            "ratio": p_sel / s_sel,
        },
    }


def describe(result: dict[str, Any]) -> str:
    """The figures as the lines ``benchmarks.run`` prints."""
    full, sel = result["full_scan"], result["selective_scan"]
    return "\n".join(
        [
            f"   {result['rows']:,} rows, {result['fragments']} fragments, "
            f"{result['spark_partitions']} Spark partitions, {result['cores']} cores",
            f"   full scan       pylance {full['pylance_rows_per_s']:>13,.0f} rows/s  "
            f"Spark {full['spark_rows_per_s']:>13,.0f} rows/s  ratio {full['ratio']:.2f}",
            f"   k = 7 (0.1 %)   pylance {sel['pylance_rows_per_s']:>13,.0f} rows/s  "
            f"Spark {sel['spark_rows_per_s']:>13,.0f} rows/s  ratio {sel['ratio']:.2f}  "
            f"(no pushdown: {sel['spark_no_pushdown_rows_per_s']:,.0f} rows/s)",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    result = run(rows=args.rows, runs=args.runs)
    print(json.dumps(result, indent=2) if args.json else describe(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
