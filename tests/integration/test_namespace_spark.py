"""Spark and namespace tables: the txn_lance source reads and writes them by id, a driver
commits several jobs' outputs in one namespace transaction, and a streaming micro-batch
that writes two tables lands in both or neither, exactly once."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import txn_engine as te  # noqa: E402
from txn_engine.spark import FragmentCollector  # noqa: E402

pytestmark = [
    pytest.mark.pylance,
    pytest.mark.filterwarnings("ignore:lance is not fork-safe:UserWarning"),
]

_SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def _ids(ns: Any, table: str) -> list[int]:
    ds = lance.dataset(namespace_client=ns, table_id=table.split("."))
    return sorted(ds.to_table()["id"].to_pylist())


def _frame(spark: Any, start: int, end: int) -> Any:
    return spark.range(start, end, numPartitions=2).selectExpr("id", "cast(id as string) as name")


def _namespace(tmp_path: Path) -> Any:
    ns = te.Namespace(str(tmp_path / "root"))
    ns.create_table("db.events", pa.table({"id": [0], "name": ["0"]}, schema=_SCHEMA))
    ns.create_table("db.dims", pa.table({"id": [0], "name": ["0"]}, schema=_SCHEMA))
    return ns


def test_spark_reads_and_writes_namespace_tables_by_id(spark: Any, tmp_path: Path) -> None:
    ns = _namespace(tmp_path)
    root = str(tmp_path / "root")
    writer = _frame(spark, 1, 101).write.format("txn_lance").mode("append")
    writer.option("namespace", root).option("table_id", "db.events").save()
    assert _ids(ns, "db.events") == list(range(101))
    read = spark.read.format("txn_lance").option("namespace", root)
    assert read.option("table_id", "db.events").load().count() == 101
    # a table reserved by a transaction: the Spark commit waits for it and lands after it
    tx = ns.transaction()
    tx.open("db.events").append(pa.table({"id": [1000], "name": ["x"]}, schema=_SCHEMA))
    tx.commit()
    writer = _frame(spark, 200, 210).write.format("txn_lance").mode("append")
    writer.option("namespace", root).option("table_id", "db.events").save()
    assert _ids(ns, "db.events") == [*range(101), *range(200, 210), 1000]


def _job(spark: Any, ns: Any, table: str, start: int, end: int) -> Any:
    """One job's output, written by the executors; the driver holds its transaction."""
    collector = FragmentCollector.plan(
        ns.location(tuple(table.split("."))), mode="append", schema=_SCHEMA
    )
    rows = _frame(spark, start, end).mapInArrow(collector.map_in_arrow(), "fragment string")
    return collector.transaction([r.fragment for r in rows.collect()])


def test_a_driver_commits_several_jobs_atomically(spark: Any, tmp_path: Path) -> None:
    ns = _namespace(tmp_path)
    with ns.transaction() as tx:
        tx.add("db.events", _job(spark, ns, "db.events", 1, 51))
        tx.add("db.dims", _job(spark, ns, "db.dims", 100, 110))
    assert _ids(ns, "db.events") == list(range(51))
    assert _ids(ns, "db.dims") == [0, *range(100, 110)]
    # a driver that fails between the jobs lands neither
    failed = ns.transaction()
    failed.add("db.events", _job(spark, ns, "db.events", 60, 70))
    failed.abort()
    assert _ids(ns, "db.events") == list(range(51))
    assert ns.snapshot(["db.events", "db.dims"]) == {"db.events": 4, "db.dims": 3}


def test_a_streaming_micro_batch_lands_in_both_tables_exactly_once(
    spark: Any, tmp_path: Path
) -> None:
    ns = _namespace(tmp_path)
    source = tmp_path / "source"
    source.mkdir()
    for i in range(3):
        rows = "\n".join(f'{{"id": {10 * i + j}, "name": "r"}}' for j in range(1, 4))
        (source / f"part-{i}.json").write_text(rows)
    landed: list[int] = []

    def both_tables(batch: Any, batch_id: int) -> None:
        tx = ns.transaction(idempotency_key=f"q1-{batch_id}")
        if tx.already_committed:  # a replayed micro-batch (driver restart)
            return
        with tx:
            tx.add("db.events", _batch(ns, batch, "db.events"))
            tx.add("db.dims", _batch(ns, batch, "db.dims"))
        landed.append(batch_id)

    def _batch(ns: Any, batch: Any, table: str) -> Any:
        collector = FragmentCollector.plan(
            ns.location(tuple(table.split("."))), mode="append", schema=_SCHEMA
        )
        rows = batch.mapInArrow(collector.map_in_arrow(), "fragment string").collect()
        return collector.transaction([r.fragment for r in rows])

    frame = spark.readStream.schema("id long, name string").option("maxFilesPerTrigger", 1)
    query = (
        frame.json(str(source))
        .writeStream.foreachBatch(both_tables)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert sorted(landed) == [0, 1, 2]
    expected = [0, 1, 2, 3, 11, 12, 13, 21, 22, 23]
    assert _ids(ns, "db.events") == expected
    assert _ids(ns, "db.dims") == expected
    # the micro-batch replayed after a crash finds its transaction and lands nothing
    replay = spark.read.schema("id long, name string").json(str(source / "part-1.json"))
    both_tables(replay, 1)
    assert _ids(ns, "db.dims") == expected
