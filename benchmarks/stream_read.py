"""Streaming-read benchmark: ``spark.readStream.format("txn_lance")`` against a batch
read of the same rows, and the latency from a commit to its rows in a downstream table.

    python -m benchmarks.stream_read [--rows 2000000] [--versions 20] [--runs 2]
                                     [--commits 30] [--delay-ms 25] [--quick] [--out DIR]

1. **Throughput** (local disk): a table of ``rows`` rows (``id`` int64, ``v`` double,
   ``s`` string) in ``versions`` Append versions is read whole by a batch read
   (``spark.read.format("txn_lance")`` into Spark's ``noop`` sink), by the streaming
   source (``startingVersion=1``, ``Trigger.AvailableNow``, ``maxVersionsPerTrigger`` =
   a quarter of the versions, into the ``noop`` sink: four micro-batches; and all of
   them: one micro-batch) and by a batch
   change-feed read (``readChangeFeed``). Rows of the table per second, medians of
   ``runs`` runs after one warm-up (a fresh checkpoint each run).
2. **Commit-to-downstream latency**: a query streams the table into a second table
   (``writeStream.format("txn_lance")``, ``Trigger.ProcessingTime("1 second")``) while
   ``commits`` one-row Appends land on the source, one every 0.7 s. A commit's latency
   is the downstream version's commit time minus the source version's (both read from
   the change feeds: same machine, same clock); p50 / p99 over the commits. On local
   disk and on moto S3 behind a proxy that holds every request ``delay_ms`` ms.

Results: ``<out>/stream_read.json`` and the plot ``<out>/stream_read.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa

import txn_engine as te
from benchmarks.spark_read import _session


def build_table(uri: str, rows: int, versions: int) -> None:
    """``rows`` rows in ``versions`` Append versions (written by pylance)."""
    per = max(1, rows // versions)
    for k in range(versions):
        ids = np.arange(k * per, (k + 1) * per, dtype=np.int64)
        table = pa.table({"id": ids, "v": ids * 0.5, "s": pa.array((ids & 255).astype(str))})
        lance.write_dataset(table, uri, mode="append" if k else "create")


def _median(fn: Callable[[int], None], runs: int) -> float:
    fn(-1)  # warm-up
    samples = []
    for i in range(runs):
        start = time.perf_counter()
        fn(i)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def throughput(spark: Any, root: Path, rows: int, versions: int, runs: int) -> dict[str, Any]:
    uri = str(root / "throughput.lance")
    build_table(uri, rows, versions)
    total = lance.dataset(uri).count_rows()

    def batch(_: int) -> None:
        spark.read.format("txn_lance").load(uri).write.format("noop").mode("overwrite").save()

    def feed(_: int) -> None:
        df = spark.read.format("txn_lance").option("readChangeFeed", "true").load(uri)
        df.write.format("noop").mode("overwrite").save()

    def stream(i: int, per_batch: int) -> None:
        query = (
            spark.readStream.format("txn_lance")
            .option("startingVersion", 1)
            .option("maxVersionsPerTrigger", per_batch)
            .load(uri)
            .writeStream.format("noop")
            .option("checkpointLocation", str(root / f"ckpt-throughput-{per_batch}-{i}"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        read = sum(p["numInputRows"] for p in query.recentProgress)
        if read != total:
            raise AssertionError(f"the stream read {read} rows, expected {total}")

    quarter = max(1, versions // 4)
    seconds = {
        "batch": _median(batch, runs),
        "stream": _median(lambda i: stream(i, quarter), runs),
        "stream_one_batch": _median(lambda i: stream(i, versions), runs),
    }
    seconds["change_feed"] = _median(feed, runs)
    return {
        "rows": total,
        "versions": versions,
        "runs": runs,
        **{f"{k}_rows_per_s": total / s for k, s in seconds.items()},
        "stream_over_batch": seconds["batch"] / seconds["stream"],
        "stream_one_batch_over_batch": seconds["batch"] / seconds["stream_one_batch"],
    }


def _feed_times(uri: str, options: dict[str, str] | None) -> dict[int, int]:
    """id -> commit time (ns) of the version that inserted it."""
    table = te.open(uri, storage_options=options).changes(1, columns=["id"])
    stamps = table.column("_commit_timestamp").cast(pa.int64()).to_pylist()
    return {i: s * 1000 for i, s in zip(table.column("id").to_pylist(), stamps, strict=True)}


def latency(
    spark: Any, root: Path, store: str, base: str, options: dict[str, str] | None, commits: int
) -> dict[str, Any]:
    """Commit-to-downstream latency of ``commits`` one-row commits (see the docstring)."""
    source, target = f"{base}/source.lance", f"{base}/target.lance"
    table = te.open(source, storage_options=options)
    table.append(pa.table({"id": pa.array([-1], pa.int64())}))
    reader = spark.readStream.format("txn_lance").option("startingVersion", "latest")
    writer_options = {}
    for key, value in (options or {}).items():
        reader = reader.option(f"storage.{key}", value)
        writer_options[f"storage.{key}"] = writer_options[f"lance_storage.{key}"] = value
    writer = reader.load(source).writeStream.format("txn_lance")
    for key, value in writer_options.items():
        writer = writer.option(key, value)
    query = (
        writer.option("checkpointLocation", str(root / f"ckpt-latency-{store}"))
        .trigger(processingTime="1 second")
        .start(target)
    )
    try:
        deadline = time.monotonic() + 300
        while not query.recentProgress and time.monotonic() < deadline:
            time.sleep(0.2)  # the query's first (empty) batch: Python workers started
        time.sleep(2)
        for i in range(commits):
            table.append(pa.table({"id": pa.array([i], pa.int64())}))
            time.sleep(0.7)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if te.open(target, storage_options=options).to_table().num_rows >= commits:
                    break
            except Exception:  # not created yet
                pass
            time.sleep(0.5)
    finally:
        query.stop()
    src, dst = _feed_times(source, options), _feed_times(target, options)
    ms = sorted((dst[i] - src[i]) / 1e6 for i in range(commits) if i in dst)
    if len(ms) != commits:
        raise AssertionError(f"{commits - len(ms)} commits never reached the downstream table")
    return {
        "store": store,
        "commits": commits,
        "p50_ms": statistics.median(ms),
        "p99_ms": ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))],
        "max_ms": ms[-1],
        "ms": ms,
    }


def run(
    *,
    rows: int = 2_000_000,
    versions: int = 20,
    runs: int = 2,
    commits: int = 30,
    delay_ms: float = 25.0,
    root: str | None = None,
) -> dict[str, Any]:
    from benchmarks.object_stores import started_stores

    spark, started_here = _session()
    try:
        with tempfile.TemporaryDirectory(dir=root) as tmp:
            work = Path(tmp)
            result: dict[str, Any] = {"cores": os.cpu_count()}
            result["throughput"] = throughput(spark, work, rows, versions, runs)
            rows_ = [latency(spark, work, "local", str(work / "local"), None, commits)]
            with started_stores(["s3"], delay_ms, work / "stores") as stores:
                delayed = stores[-1]
                rows_.append(
                    latency(
                        spark,
                        work,
                        delayed.name,
                        delayed.uri("lat").removesuffix(".lance"),
                        delayed.options,
                        commits,
                    )
                )
            result["latency"] = rows_
    finally:
        if started_here:
            spark.stop()
    return result


def describe(result: dict[str, Any]) -> str:
    t = result["throughput"]
    lines = [
        f"   {t['rows']:,} rows in {t['versions']} versions, {result['cores']} cores",
        f"   batch read   {t['batch_rows_per_s']:>12,.0f} rows/s",
        f"   stream read  {t['stream_rows_per_s']:>12,.0f} rows/s  (4 micro-batches; "
        f"stream / batch {t['stream_over_batch']:.2f})",
        f"   stream read  {t['stream_one_batch_rows_per_s']:>12,.0f} rows/s  (1 micro-batch; "
        f"stream / batch {t['stream_one_batch_over_batch']:.2f})",
        f"   change feed  {t['change_feed_rows_per_s']:>12,.0f} rows/s",
    ]
    for row in result["latency"]:
        lines.append(
            f"   commit -> downstream ({row['store']}, trigger 1 s): p50 {row['p50_ms']:.0f} ms, "
            f"p99 {row['p99_ms']:.0f} ms ({row['commits']} commits)"
        )
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    t = result["throughput"]
    names = ["batch read", "stream\n(4 batches)", "stream\n(1 batch)", "change feed"]
    values = [
        t["batch_rows_per_s"],
        t["stream_rows_per_s"],
        t["stream_one_batch_rows_per_s"],
        t["change_feed_rows_per_s"],
    ]
    left.bar(names, [v / 1e6 for v in values])
    left.set_ylabel("million rows / s")
    left.set_title(f"{t['rows']:,} rows, {t['versions']} versions")
    for row in result["latency"]:
        right.plot(sorted(row["ms"]), label=f"{row['store']} (p50 {row['p50_ms']:.0f} ms)")
    right.set_xlabel("commits, sorted by latency")
    right.set_ylabel("commit -> downstream (ms)")
    right.set_title("Trigger.ProcessingTime 1 s")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--versions", type=int, default=20)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--commits", type=int, default=30)
    parser.add_argument("--delay-ms", type=float, default=25.0)
    parser.add_argument("--quick", action="store_true", help="a tiny run (seconds)")
    parser.add_argument("--out", default="bench-out")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.versions, args.runs, args.commits = 20_000, 4, 1, 3
    result = run(
        rows=args.rows,
        versions=args.versions,
        runs=args.runs,
        commits=args.commits,
        delay_ms=args.delay_ms,
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "stream_read.json").write_text(json.dumps(result, indent=2))
    plot(result, out / "stream_read.png")
    print(describe(result))
    print(f"results: {out / 'stream_read.json'}, plot: {out / 'stream_read.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
