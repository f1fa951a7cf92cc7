"""``spark.readStream.format("txn_lance")`` and the change feed from Spark.

In the test's own session (local mode, and on the standalone cluster), on moto S3, and
in driver subprocesses killed at each step of a micro-batch and restarted on their
checkpoint. Tables are built with txn_engine and pylance 14.0.2 and every result is
compared with what pylance reads.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import emulators as emu
import lance
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import spark_cluster

import txn_engine as te
from txn_engine import Append, Transaction, commit
from txn_engine.changes import manifest_nanos
from txn_engine.errors import InvalidOperationError
from txn_engine.format.io import read_manifest
from txn_engine.leases import read_leases
from txn_engine.spark import merge
from txn_engine.spark._feed_options import parse_feed_options
from txn_engine.storage import open_storage

pytestmark = [
    pytest.mark.pylance,
    pytest.mark.filterwarnings("ignore:lance is not fork-safe:UserWarning"),
]
HERE = os.path.dirname(os.path.abspath(__file__))


def rows(ids: list[int], tag: str = "v") -> pa.Table:
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "value": pa.array([f"{tag}{i}" for i in ids])}
    )


def tiny_appends(uri: str, count: int) -> None:
    """``count`` one-row versions (ids 0, 1, ...), cheaply: the first by pylance, the data
    files of the others by one pylance call, each committed as its own Append by
    txn_engine."""
    lance.write_dataset(rows([0]), uri)
    fragments = lance.fragment.write_fragments(
        rows(list(range(1, count))), uri, max_rows_per_file=1
    )
    storage = open_storage(uri)
    for version, fragment in enumerate(fragments, start=1):
        commit(storage, Transaction(version, Append(te.interop.as_fragments([fragment]))))


def run(
    spark: Any,
    reader: Any,
    checkpoint: Path,
    leases: tuple[str, list[int]] | None = None,
    **trigger: Any,
) -> list[tuple[int, list[int]]]:
    """Run ``reader`` (a streaming DataFrame) to the end (availableNow by default);
    (batch id, ids in the batch) per micro-batch. With ``leases``, the versions of the
    source's leases on table ``leases[0]`` while each batch runs go to ``leases[1]``."""
    seen: list[tuple[int, list[int]]] = []

    def sink(frame: Any, batch_id: int) -> None:
        seen.append((batch_id, sorted(r.id for r in frame.select("id").collect())))
        if leases is not None:  # the versions the source pins while the batch runs
            held = read_leases(open_storage(leases[0]))
            leases[1].extend(h.version for h in held if h.owner == "txn_engine.spark stream read")

    query = (
        reader.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(**(trigger or {"availableNow": True}))
        .start()
    )
    query.awaitTermination()
    return seen


def stream(spark: Any, uri: str, **options: Any) -> Any:
    reader = spark.readStream.format("txn_lance")
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load(uri)


@pytest.mark.spark_cluster
def test_stream_of_appends_snapshot_then_versions_then_restart(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    t = te.open(uri)
    t.append(rows([0, 1, 2]))
    t.append(rows([3]))
    ckpt = tmp_path / "ckpt"
    # no starting option: the table as of now in one batch, then every later version
    assert run(spark, stream(spark, uri), ckpt) == [(0, [0, 1, 2, 3])]
    t.append(rows([4, 5]))
    t.compact()  # skipped silently
    t.append(rows([6]))
    batches = run(spark, stream(spark, uri), ckpt)
    assert batches == [(1, [4, 5, 6])]
    assert sorted(i for _, ids in batches for i in ids) == [4, 5, 6]
    # the source's lease is released when an AvailableNow query has read everything
    owners = {lease.owner for lease in read_leases(open_storage(uri))}
    assert "txn_engine.spark stream read" not in owners


@pytest.mark.spark_cluster
def test_a_stream_of_1000_commits_in_order(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    tiny_appends(uri, 1000)
    assert lance.dataset(uri).version == 1000
    reader = stream(spark, uri, startingVersion=1, maxVersionsPerTrigger=250)
    pinned: list[int] = []
    batches = run(spark, reader, tmp_path / "c", (uri, pinned))
    # while batch k runs the source pins the version it starts after (1: the first)
    assert pinned == [1, 250, 500, 750]
    assert [b for b, _ in batches] == [0, 1, 2, 3]
    assert [ids for _, ids in batches] == [list(range(k * 250, (k + 1) * 250)) for k in range(4)]


def test_admission_control_and_starting_points(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    t = te.open(uri)
    t.append(rows([0, 1, 2]))  # v1: 3 rows
    for i in range(3, 8):
        t.append(rows([i]))  # v2..v6: one row each
    # whole versions, at least one, within maxRowsPerTrigger
    got = run(spark, stream(spark, uri, startingVersion=1, maxRowsPerTrigger=2), tmp_path / "a")
    assert [ids for _, ids in got] == [[0, 1, 2], [3, 4], [5, 6], [7]]
    got = run(spark, stream(spark, uri, startingVersion=4), tmp_path / "b")
    assert [ids for _, ids in got] == [[5, 6, 7]]
    got = run(spark, stream(spark, uri, startingVersion="latest"), tmp_path / "l")
    assert [ids for _, ids in got if ids] == []  # (Spark runs one empty first batch)
    # version 5's commit time, exactly (pylance's versions() rounds through a float)
    nanos = manifest_nanos(read_manifest(open_storage(uri), 5)[1].manifest)
    assert nanos is not None
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    stamp = (epoch + dt.timedelta(microseconds=nanos // 1000)).isoformat()
    got = run(spark, stream(spark, uri, startingTimestamp=stamp), tmp_path / "ts")
    assert [ids for _, ids in got] == [[6, 7]]  # versions 5 and 6
    t.create_tag("from4", 4)
    got = run(
        spark, stream(spark, uri, startingTag="from4", maxVersionsPerTrigger=1), tmp_path / "tag"
    )
    assert [ids for _, ids in got] == [[5], [6], [7]]
    # Trigger.AvailableNow stops at the versions there when the query starts; a
    # processing-time trigger keeps going: a commit made meanwhile is read
    t.append(rows([8]))
    assert [
        ids for _, ids in run(spark, stream(spark, uri, startingVersion=7), tmp_path / "n")
    ] == [[8]]


def test_non_append_versions_fail_with_the_version_and_the_options(
    spark: Any, tmp_path: Path
) -> None:
    uri = str(tmp_path / "t.lance")
    t = te.open(uri)
    t.append(rows([0, 1]))
    t.append(rows([2]))
    t.delete("id = 0")  # v3
    t.append(rows([3]))  # v4
    t.merge_insert(rows([1, 9], "m"), on="id")  # v5: an Update: its new rows stream
    with pytest.raises(Exception, match=r"NonAppendVersionError: version 3 \(delete\)") as caught:
        run(spark, stream(spark, uri, startingVersion=1), tmp_path / "a")
    assert "skipChangeCommits" in str(caught.value)
    assert "readChangeFeed" in str(caught.value)
    got = run(
        spark, stream(spark, uri, startingVersion=1, skipChangeCommits="true"), tmp_path / "b"
    )
    assert sorted(i for _, ids in got for i in ids) == sorted([0, 1, 2, 3, 1, 9])
    running = stream(spark, uri, startingVersion=6)  # the columns as of version 5
    t.drop_columns(["value"])  # v6: a schema change; the stream cannot go on
    with pytest.raises(Exception, match=r"SchemaChangedError: version 6 \(project\)"):
        run(spark, running, tmp_path / "c")


def test_stream_and_feed_of_a_branch(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    main = te.open(uri)
    main.append(rows([0]))
    dev = main.create_branch("dev")
    dev.append(rows([1]))  # the branch's version 2
    main.append(rows([100]))  # main's version 2: not on the branch
    got = run(spark, stream(spark, uri, branch="dev", startingVersion=2), tmp_path / "c")
    assert [ids for _, ids in got] == [[1]]
    feed = spark.read.format("txn_lance").option("readChangeFeed", "true").option("branch", "dev")
    assert sorted(r.id for r in feed.load(uri).collect()) == [0, 1]


def test_feed_options() -> None:
    parsed = parse_feed_options(
        {"startingVersion": "3", "maxRowsPerTrigger": "10", "readChangeFeed": "true"}
    )
    assert (parsed.starting_version, parsed.max_rows_per_trigger, parsed.read_change_feed) == (
        3,
        10,
        True,
    )
    assert parse_feed_options({"startingversion": "latest"}).starting_version == "latest"
    for bad in (
        {"startingVersion": "1", "startingTimestamp": "0"},
        {"startingVersion": "0"},
        {"maxRowsPerTrigger": "x"},
        {"version": "1"},
        {"endingVersion": "2", "endingTimestamp": "0"},
    ):
        with pytest.raises(InvalidOperationError):
            parse_feed_options(bad)


# --------------------------------------------------------------------------- change feed


def spark_feed(df: Any) -> list[tuple[int, str, int, str]]:
    return sorted(
        (r._commit_version, r._change_type, r.id, r.value)
        for r in df.select("_commit_version", "_change_type", "id", "value").collect()
    )


def python_feed(uri: str, start: int, end: int | None = None) -> list[tuple[int, str, int, str]]:
    d = te.open(uri).changes(start, end).to_pydict()
    return sorted(zip(d["_commit_version"], d["_change_type"], d["id"], d["value"], strict=True))


@pytest.mark.spark_cluster
def test_change_feed_batch_equals_the_python_feed(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    t = te.open(uri)
    t.append(rows([0, 1, 2, 3]))
    t.delete("id = 1")
    t.merge_insert(rows([2, 8], "m"), on="id")
    t.compact()
    df = (
        spark.read.format("txn_lance")
        .option("readChangeFeed", "true")
        .option("startingVersion", 2)
        .option("endingVersion", 4)
        .load(uri)
    )
    assert df.columns == ["id", "value", "_change_type", "_commit_version", "_commit_timestamp"]
    assert spark_feed(df) == python_feed(uri, 2, 4)
    assert ("3", "update_preimage") in {(str(v), k) for v, k, _, _ in spark_feed(df)}
    with pytest.raises(Exception, match="readChangeFeed"):
        spark.read.format("txn_lance").option("startingVersion", 1).load(uri).collect()


@pytest.mark.spark_cluster
def test_pipeline_raw_table_change_feed_merged_downstream(spark: Any, tmp_path: Path) -> None:
    """raw -> change feed stream -> merge into a second table; the downstream table ends
    equal to the raw one, whatever the mix of inserts, updates and deletes."""
    raw, clean = str(tmp_path / "raw.lance"), str(tmp_path / "clean.lance")
    t = te.open(raw)
    t.append(rows([0, 1, 2, 3]))
    te.open(clean).append(rows([0, 1, 2, 3]))

    def apply(frame: Any, batch_id: int) -> None:
        apply_changes(frame, clean)

    def drain() -> None:
        (
            stream(spark, raw, readChangeFeed="true", startingVersion=2)
            .writeStream.foreachBatch(apply)
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
            .awaitTermination()
        )

    t.merge_insert(rows([1, 5], "m"), on="id")
    t.delete("id = 2")
    drain()
    t.update({"value": "'late'"}, where="id = 0")
    t.append(rows([7]))
    t.compact()
    drain()
    assert sorted(te.open(clean).to_table().to_pylist(), key=str) == sorted(
        te.open(raw).to_table().to_pylist(), key=str
    )


def apply_changes(frame: Any, target: str) -> None:
    """Apply a change-feed micro-batch to ``target`` keyed by ``id``: the last change of
    each key wins (deletes first, then upserts), each a ``txn_engine.spark.merge``."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    # within a version the removals come first: a delete and an insert of one key in
    # one version (an update without row ids or recorded keys) is the insert
    order = F.when(F.col("_change_type") == "delete", 0).otherwise(1)
    last = (
        frame.where("_change_type != 'update_preimage'")
        .withColumn(
            "_n",
            F.row_number().over(
                Window.partitionBy("id").orderBy(F.desc("_commit_version"), F.desc(order))
            ),
        )
        .where("_n = 1")
        .cache()
    )
    gone = last.where("_change_type = 'delete'").select("id")
    if gone.count():
        merge(gone, target, on="id", when_matched="delete", when_not_matched=None)
    upserts = last.where("_change_type != 'delete'").select("id", "value")
    if upserts.count():
        merge(upserts, target, on="id")
    last.unpersist()


def test_stream_and_feed_on_moto_s3(spark: Any, moto_server: Any, tmp_path: Path) -> None:
    uri = moto_server.uri(emu.unique_name("stream-read"))
    options = moto_server.lance_options()
    t = te.open(uri, storage_options=options)
    t.append(rows([0, 1]))
    t.append(rows([2]))
    t.delete("id = 0")

    def with_storage(reader: Any) -> Any:
        for key, value in options.items():
            reader = reader.option(f"storage.{key}", value)
        return reader

    feed = with_storage(spark.read.format("txn_lance").option("readChangeFeed", "true")).load(uri)
    assert spark_feed(feed) == [
        (1, "insert", 0, "v0"),
        (1, "insert", 1, "v1"),
        (2, "insert", 2, "v2"),
        (3, "delete", 0, "v0"),
    ]
    reader = with_storage(spark.readStream.format("txn_lance").option("startingVersion", 1))
    reader = reader.option("maxVersionsPerTrigger", 1).option("skipChangeCommits", "true")
    seen: list[list[int]] = []
    query = (
        reader.load(uri)
        .writeStream.foreachBatch(lambda f, b: seen.append(sorted(r.id for r in f.collect())))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert seen == [[0, 1], [2], []]  # version 3 (a delete) skipped: an empty batch


# --------------------------------------------------------------------------- driver killed


CRASH_POINTS = ["latest_offset", "partitions", "sink", "commit"]


def _driver(work: Path, master: str, spec: dict[str, Any]) -> int:
    work.mkdir(parents=True, exist_ok=True)
    log = (work / f"driver-{len(os.listdir(work))}.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "stream_read_driver.py"), json.dumps(spec)],
        env=spark_cluster.cluster_env(work),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        return proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)


def test_driver_killed_at_each_step_then_restarted_reads_every_row_once(tmp_path: Path) -> None:
    """One query per kill point (each streams 40 one-row versions, 10 per micro-batch),
    all in one driver, each held at its point of micro-batch 1 until all are, then the
    driver application is killed and the queries restarted on their checkpoints. Every
    run of a batch kept its output: a batch run twice read the same rows, and each row
    is in exactly one batch."""
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    streams = []
    for point in CRASH_POINTS:
        base = tmp_path / point
        base.mkdir()
        tiny_appends(str(base / "t.lance"), 40)
        (base / "crash.flag").touch()
        streams.append(
            {
                "uri": str(base / "t.lance"),
                "out": str(base / "out"),
                "checkpoint": str(base / "ckpt"),
                "versions_per_batch": 10,
                "crash_at": point,
                "crash_batch": 1,
                "crash_flag": str(base / "crash.flag"),
                "crash_barrier": str(barrier),
                "crash_parties": len(CRASH_POINTS),
            }
        )
    spec = {"here": HERE, "master": "local[2]", "streams": streams}
    assert _driver(tmp_path / "runs", "local[2]", spec) == -9
    assert len(os.listdir(barrier)) == len(CRASH_POINTS)  # every query at its point
    assert _driver(tmp_path / "runs", "local[2]", spec) == 0
    for point in CRASH_POINTS:
        out = tmp_path / point / "out"
        runs: dict[int, list[list[int]]] = {}
        for name in sorted(os.listdir(out)):
            ids = pq.read_table(out / name).column("id").to_pylist()
            runs.setdefault(int(name.split("-")[1]), []).append(sorted(ids))
        assert sorted(runs) == [0, 1, 2, 3], point
        for batch, attempts in runs.items():
            assert all(a == attempts[0] for a in attempts), (point, batch, attempts)
            assert attempts[0] == list(range(batch * 10, batch * 10 + 10)), point
        replayed = [b for b, attempts in runs.items() if len(attempts) > 1]
        assert replayed == ([1] if point == "sink" else []), point
