"""A Spark application (run as a subprocess by ``test_spark_stream_read.py``) that streams
a Lance table into per-batch Parquet outputs, with a crash point in the source.

``crash_at`` names the step of micro-batch ``crash_batch`` at which the whole driver
(JVM and Python) is killed: ``latest_offset`` (the end offset chosen, not yet in Spark's
offset log), ``partitions`` (the offset log written, the batch not run), ``sink`` (the
batch's output written, Spark's commit log not), ``commit`` (the commit log written,
the source not told). Every run of a batch keeps its own output directory
(``out/batch-<id>-<run>``), so the test can check that a replay read the same rows.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from typing import Any

spec = json.loads(sys.argv[1])
sys.path.insert(0, spec["here"])
import conftest_spark as cs  # noqa: E402

os.environ[cs.DRIVER_PGID_ENV] = str(os.getpgid(0))
from pyspark.sql import SparkSession  # noqa: E402

from txn_engine.spark import register  # noqa: E402


def crashing_source() -> type:
    from txn_engine.spark._datasource import TxnLanceDataSource
    from txn_engine.spark._stream_read import TxnLanceStreamReader

    class CrashingReader(TxnLanceStreamReader):
        point, flag, batch, barrier, parties = "", "", 1, "", 1

        def _at(self, point: str, batch: int) -> None:
            if point == self.point and batch == self.batch:
                cs._crash(self.flag, self.barrier, self.parties)

        def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:
            end = super().latestOffset(start, limit)
            if end != start:
                self._at("latest_offset", _batches_planned(self.checkpoint))
            return end

        def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Any:
            self._at("partitions", _batches_planned(self.checkpoint) - 1)
            return super().partitions(start, end)

        def commit(self, end: dict[str, Any]) -> None:
            self._at("commit", _batches_committed(self.checkpoint) - 1)
            super().commit(end)

    class CrashingSource(TxnLanceDataSource):
        @classmethod
        def name(cls) -> str:
            return "txn_lance_crashing_read"

        crash: tuple[str, ...] = ("", "", "", "", "1")
        _keys = ("crash_at", "crash_flag", "crash_checkpoint", "crash_barrier", "crash_parties")

        def _strip(self) -> None:
            options = dict(self.options)
            if "crash_at" in options:
                self.crash = tuple(options.pop(k, "") for k in self._keys)
                self.options = options

        def schema(self) -> Any:
            self._strip()
            return super().schema()

        def streamReader(self, schema: Any) -> Any:
            self._strip()
            plain = super().streamReader(schema)
            reader = CrashingReader(plain.uri, plain.options, plain.spark_schema, plain.columns)
            reader.point, reader.flag, reader.checkpoint, reader.barrier = self.crash[:4]
            reader.parties = int(self.crash[4] or 1)
            return reader

    return CrashingSource


def _batches_planned(checkpoint: str) -> int:
    path = os.path.join(checkpoint, "offsets")
    return len([n for n in os.listdir(path) if n.isdigit()]) if os.path.isdir(path) else 0


def _batches_committed(checkpoint: str) -> int:
    path = os.path.join(checkpoint, "commits")
    return len([n for n in os.listdir(path) if n.isdigit()]) if os.path.isdir(path) else 0


spark = (
    SparkSession.builder.master(spec["master"])
    .appName("txn_lance-stream-read-driver")
    .config("spark.ui.enabled", "false")
    .config("spark.sql.shuffle.partitions", "2")
    .config("spark.driver.memory", "512m")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
register(spark)
spark.dataSource.register(crashing_source())
run = uuid.uuid4().hex[:8]
queries = []
for job in spec["streams"]:

    def sink(frame: Any, batch_id: int, job: dict[str, Any] = job) -> None:
        frame.write.parquet(os.path.join(job["out"], f"batch-{batch_id}-{run}"))
        if batch_id == job["crash_batch"] and job["crash_at"] == "sink":
            # output written, Spark's commit log not
            cs._crash(job["crash_flag"], job["crash_barrier"], job["crash_parties"])

    source_point = job["crash_at"] if job["crash_at"] != "sink" else ""
    queries.append(
        spark.readStream.format("txn_lance_crashing_read")
        .option("startingVersion", 1)
        .option("maxVersionsPerTrigger", job["versions_per_batch"])
        .option("crash_at", source_point)
        .option("crash_flag", job["crash_flag"])
        .option("crash_checkpoint", job["checkpoint"])
        .option("crash_barrier", job["crash_barrier"])
        .option("crash_parties", str(job["crash_parties"]))
        .load(job["uri"])
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", job["checkpoint"])
        .trigger(availableNow=True)
        .start()
    )
for query in queries:
    query.awaitTermination()
spark.stop()
