"""The ``txn_lance`` data source and the commit hook in Spark local mode.

One SparkSession (the ``spark`` fixture of ``conftest.py``: ``local[2,3]``, 2 threads, a
failed task is retried up to 3 attempts) is shared by every test; the concurrency tests
also run on the standalone cluster. Every outcome is checked by reading the dataset with pylance
14.0.2.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import conftest_spark as cs  # noqa: E402

from txn_engine.spark import (  # noqa: E402
    STAGING_DIR,
    WRITE_ID_PROPERTY,
    FragmentCollector,
    activate,
    commit_fragments,
)

pytestmark = [
    pytest.mark.pylance,
    # pylance warns in an at-fork hook; Spark forks to start its JVM gateway
    pytest.mark.filterwarnings("ignore:lance is not fork-safe:UserWarning"),
]


# --------------------------------------------------------------------------- helpers


def ids_frame(spark: Any, start: int, end: int, partitions: int = 2) -> Any:
    return spark.range(start, end, numPartitions=partitions).selectExpr(
        "id", "concat('row-', cast(id as string)) as name"
    )


def data_files(uri: str) -> set[str]:
    path = os.path.join(uri, "data")
    return set(os.listdir(path)) if os.path.isdir(path) else set()


def staging_entries(uri: str) -> list[str]:
    path = os.path.join(uri, STAGING_DIR)
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


def referenced_files(ds: lance.LanceDataset) -> set[str]:
    return {f.path for frag in ds.get_fragments() for f in frag.data_files()}


def ids(ds: lance.LanceDataset) -> list[int]:
    return sorted(ds.to_table(columns=["id"]).column("id").to_pylist())


def report(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def wait_idle(spark: Any, timeout: float = 60.0) -> None:
    """Wait until no Spark stage runs. A failed job returns (and its abort runs) while
    tasks of its other partitions may still run: stragglers, which clean up after
    themselves when they find the write finished."""
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + timeout
    while tracker.getActiveStageIds():
        assert time.monotonic() < deadline, "Spark stages still running"
        time.sleep(0.05)


def assert_clean(uri: str) -> None:
    """Every data file is referenced by some version and no staging state is left."""
    ds = lance.dataset(uri)
    referenced: set[str] = set()
    for v in ds.versions():
        referenced |= referenced_files(lance.dataset(uri, version=v["version"]))
    assert data_files(uri) == referenced
    assert staging_entries(uri) == []


# --------------------------------------------------------------------------- modes


@pytest.mark.spark_cluster
def test_append_creates_then_appends(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    rep = tmp_path / "commit.json"
    (
        ids_frame(spark, 0, 1000)
        .write.format("txn_lance")
        .mode("append")
        .option("max_rows_per_file", "300")
        .option("commit_message", "first load")
        .option("property.pipeline", "nightly")
        .option("commit_report", str(rep))
        .save(uri)
    )
    ds = lance.dataset(uri)
    assert ds.version == 1
    assert ids(ds) == list(range(1000))
    assert len(ds.get_fragments()) == 4  # 2 partitions x ceil(500 / 300)
    assert ds.schema.names == ["id", "name"]
    first = report(rep)
    assert first["version"] == 1
    assert first["rows"] == 1000
    assert first["read_version"] == 0
    txn = ds.read_transaction(1)
    assert txn.transaction_properties[WRITE_ID_PROPERTY] == first["write_id"]
    assert txn.transaction_properties["pipeline"] == "nightly"
    assert txn.transaction_properties["__lance_commit_message"] == "first load"
    assert txn.uuid == first["uuid"]

    ids_frame(spark, 1000, 1500).write.format("txn_lance").mode("append").option(
        "commit_report", str(rep)
    ).save(uri)
    ds = lance.dataset(uri)
    assert ds.version == 2
    assert ids(ds) == list(range(1500))
    second = report(rep)
    assert (second["read_version"], second["version"]) == (1, 2)
    assert second["write_id"] != first["write_id"]
    assert type(ds.read_transaction(2).operation).__name__ == "Append"
    assert_clean(uri)


def test_overwrite_new_and_existing_dataset(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    ids_frame(spark, 0, 100).write.format("txn_lance").mode("overwrite").save(uri)
    ds = lance.dataset(uri)
    assert (ds.version, ids(ds)) == (1, list(range(100)))

    other = spark.range(0, 10, numPartitions=1).selectExpr(
        "cast(id * 2 as int) as k", "named_struct('x', id, 'y', cast(id as string)) as s"
    )
    other.write.format("txn_lance").mode("overwrite").save(uri)
    ds = lance.dataset(uri)
    assert ds.version == 2
    assert ds.schema.names == ["k", "s"]
    assert ds.schema.field("k").type == pa.int32()
    assert sorted(ds.to_table().column("k").to_pylist()) == list(range(0, 20, 2))
    rows = sorted(ds.to_table().to_pylist(), key=lambda r: r["k"])
    assert rows[3] == {"k": 6, "s": {"x": 3, "y": "3"}}
    assert type(ds.read_transaction(2).operation).__name__ == "Overwrite"
    assert ids(lance.dataset(uri, version=1)) == list(range(100))  # time travel intact
    assert staging_entries(uri) == []


def test_empty_dataframes(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    ids_frame(spark, 0, 10, partitions=1).write.format("txn_lance").mode("append").save(uri)
    empty = ids_frame(spark, 0, 0)
    empty.write.format("txn_lance").mode("append").save(uri)
    assert lance.dataset(uri).version == 1  # appending nothing commits nothing
    empty.write.format("txn_lance").mode("overwrite").save(uri)
    ds = lance.dataset(uri)
    assert (ds.version, ds.count_rows(), ds.schema.names) == (2, 0, ["id", "name"])
    assert_clean(uri)


def test_append_to_dataset_pylance_created(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(
        pa.table(
            {
                "name": pa.array(["a", "b"], pa.string()),
                "id": pa.array([-2, -1], pa.int64()),
            }
        ),
        uri,
    )
    # Spark sends large_string/other column order: conformed to the dataset's schema
    ids_frame(spark, 0, 50).write.format("txn_lance").mode("append").save(uri)
    ds = lance.dataset(uri)
    assert ds.version == 2
    assert ds.schema.names == ["name", "id"]
    assert ds.schema.field("name").type == pa.string()
    assert ids(ds) == [-2, -1, *range(50)]
    assert_clean(uri)


def test_append_with_mismatched_columns_fails_before_writing(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"id": pa.array([1], pa.int64())}), uri)
    before = data_files(uri)
    with pytest.raises(Exception, match="do not match"):
        ids_frame(spark, 0, 10).write.format("txn_lance").mode("append").save(uri)
    assert lance.dataset(uri).version == 1
    assert data_files(uri) == before
    assert staging_entries(uri) == []


def test_unknown_option_is_rejected(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="unknown txn_lance option 'max_rows_per_fle'"):
        ids_frame(spark, 0, 10).write.format("txn_lance").mode("append").option(
            "max_rows_per_fle", "10"
        ).save(str(tmp_path / "t.lance"))


# --------------------------------------------------------------------------- concurrency


def _gated_write(
    spark: Any, uri: str, control: str, start: int, end: int, errors: list[BaseException]
) -> None:
    try:
        activate(spark)  # a new thread has no active session to find txn_lance in
        df = ids_frame(spark, start, end, partitions=1).mapInArrow(
            cs.gate(control), "id long, name string"
        )
        df.write.format("txn_lance").mode("append").save(uri)
    except BaseException as exc:  # reported by the test thread
        errors.append(exc)


@pytest.mark.spark_cluster
def test_two_jobs_append_concurrently(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    ids_frame(spark, 0, 10, partitions=1).write.format("txn_lance").mode("append").save(uri)
    control = tmp_path / "gate"
    control.mkdir()
    errors: list[BaseException] = []
    threads = [
        threading.Thread(target=_gated_write, args=(spark, uri, str(control), a, b, errors))
        for a, b in ((1000, 1400), (2000, 2300))
    ]
    for t in threads:
        t.start()
    cs.wait_started(str(control), 2, errors)  # both writes planned: both pinned version 1
    cs.open_gate(str(control))
    for t in threads:
        t.join(120)
    assert errors == []
    ds = lance.dataset(uri)
    assert ds.version == 3
    assert ids(ds) == [*range(10), *range(1000, 1400), *range(2000, 2300)]
    txns = [ds.read_transaction(v) for v in (2, 3)]
    assert [t.read_version for t in txns] == [1, 1]  # the second one was rebased
    assert len({t.transaction_properties[WRITE_ID_PROPERTY] for t in txns}) == 2
    assert_clean(uri)


@pytest.mark.spark_cluster
def test_append_races_txn_engine_delete_and_pylance_writer(spark: Any, tmp_path: Path) -> None:
    from txn_engine.commit import commit
    from txn_engine.dataset import Dataset
    from txn_engine.ops import Delete
    from txn_engine.transaction import Transaction

    uri = str(tmp_path / "t.lance")
    lance.write_dataset(
        pa.table({"id": pa.array(range(100), pa.int64()), "name": ["x"] * 100}),
        uri,
        max_rows_per_file=50,
    )  # fragments 0 (ids 0-49) and 1 (ids 50-99)
    control = tmp_path / "gate"
    control.mkdir()
    errors: list[BaseException] = []
    job = threading.Thread(target=_gated_write, args=(spark, uri, str(control), 1000, 1200, errors))
    job.start()
    cs.wait_started(str(control), 1, errors)  # planned at version 1, tasks held at the gate
    # a txn_engine delete of fragment 0 ...
    base = Dataset.open(uri)
    commit(uri, Transaction(base.version, Delete(deleted_fragment_ids=(0,), predicate="id < 50")))
    # ... and a pylance append land before the Spark job commits
    lance.write_dataset(
        pa.table({"id": pa.array([500, 501], pa.int64()), "name": ["p", "p"]}), uri, mode="append"
    )
    cs.open_gate(str(control))
    job.join(120)
    assert errors == []
    ds = lance.dataset(uri)
    assert ds.version == 4
    assert ids(ds) == [*range(50, 100), 500, 501, *range(1000, 1200)]
    spark_txn = ds.read_transaction(4)
    assert spark_txn.read_version == 1  # pinned when the write was planned
    assert WRITE_ID_PROPERTY in spark_txn.transaction_properties
    assert_clean(uri)


# --------------------------------------------------------------------------- failures


def test_failing_task_aborts_without_trace(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    ids_frame(spark, 0, 10, partitions=1).write.format("txn_lance").mode("append").save(uri)
    before = data_files(uri)
    df = ids_frame(spark, 0, 4000, partitions=2).mapInArrow(
        cs.small_batches(500), "id long, name string"
    )
    df = df.mapInArrow(cs.fail_partition(1, after_batches=2), "id long, name string")
    with pytest.raises(Exception, match="injected failure"):
        df.write.format("txn_lance").mode("append").option("max_rows_per_file", "500").save(uri)
    wait_idle(spark)
    ds = lance.dataset(uri)
    assert ds.version == 1
    assert ids(ds) == list(range(10))
    assert data_files(uri) == before
    assert staging_entries(uri) == []


@pytest.mark.spark_cluster
def test_files_of_a_lost_task_attempt_are_removed(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    flag = tmp_path / "crash.flag"
    flag.touch()
    rep = tmp_path / "commit.json"
    (
        ids_frame(spark, 0, 2000, partitions=2)
        .write.format("txn_lance")
        .mode("append")
        .option("max_rows_per_file", "400")
        .option("storage_factory", "conftest_spark:faulty_storage")
        .option("storage.crash_after_marker_flag", str(flag))
        .option("commit_report", str(rep))
        .save(uri)
    )
    assert not flag.exists()  # the fault fired: one attempt died after writing a file
    ds = lance.dataset(uri)
    assert ids(ds) == list(range(2000))
    assert len(ds.get_fragments()) == 6  # 2 partitions x ceil(1000 / 400)
    assert report(rep)["files_removed"] >= 1
    assert_clean(uri)


def test_commit_retried_after_lost_response(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    ids_frame(spark, 0, 10, partitions=1).write.format("txn_lance").mode("append").save(uri)
    flag = tmp_path / "lose.flag"
    flag.touch()
    rep = tmp_path / "commit.json"
    (
        ids_frame(spark, 100, 300)
        .write.format("txn_lance")
        .mode("append")
        .option("storage_factory", "conftest_spark:faulty_storage")
        .option("storage.lose_response_flag", str(flag))
        .option("commit_report", str(rep))
        .save(uri)
    )
    assert not flag.exists()  # the manifest write landed and its response was lost
    ds = lance.dataset(uri)
    assert ds.version == 2  # exactly one new version
    assert ids(ds) == [*range(10), *range(100, 300)]
    result = report(rep)
    # call 1 ended in CommitStateUnknownError; call 2 found the transaction by its uuid
    assert (result["version"], result["attempts"], result["already_committed"]) == (2, 2, True)
    assert_clean(uri)


def test_rerun_with_same_write_id_commits_once(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    ids_frame(spark, 0, 10, partitions=1).write.format("txn_lance").mode("append").save(uri)
    rep = tmp_path / "commit.json"
    for _ in range(2):
        ids_frame(spark, 100, 200).write.format("txn_lance").mode("append").option(
            "write_id", "job-2026-11-22"
        ).option("commit_report", str(rep)).save(uri)
    ds = lance.dataset(uri)
    assert ds.version == 2
    assert ids(ds) == [*range(10), *range(100, 200)]
    second = report(rep)
    assert (second["version"], second["already_committed"]) == (2, True)
    assert_clean(uri)


# --------------------------------------------------------------------------- commit hook


def test_commit_hook_with_map_in_arrow(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"id": pa.array([-1], pa.int64()), "name": ["seed"]}), uri)
    df = ids_frame(spark, 0, 1000)
    collector = FragmentCollector.plan(
        uri,
        mode="append",
        schema=pa.schema([("id", pa.int64()), ("name", pa.string())]),
        max_rows_per_file=200,
    )
    rows = df.mapInArrow(
        cs.collector_writer_failing_first_attempt(collector, partition=0), "fragment string"
    ).collect()
    fragments = [r.fragment for r in rows]
    assert len(fragments) == 6  # 2 partitions x ceil(500 / 200); attempt 0's are dropped
    result = collector.commit(fragments)
    assert (result.version, result.read_version, result.rows) == (2, 1, 1000)
    assert result.files_removed == 3  # the files of the failed first attempt
    ds = lance.dataset(uri)
    assert ids(ds) == [-1, *range(1000)]
    assert_clean(uri)
    # committing the same fragments again (a retried driver step) changes nothing
    again = collector.commit(fragments)
    assert (again.version, again.already_committed) == (2, True)
    assert lance.dataset(uri).version == 2
    # an abort after the transaction landed keeps its files
    assert collector.abort(fragments) == 0
    assert ids(lance.dataset(uri)) == [-1, *range(1000)]
    assert_clean(uri)


def test_commit_fragments_is_idempotent_per_write_id(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"id": pa.array([0], pa.int64())}), uri)
    frags = lance.fragment.write_fragments(
        pa.table({"id": pa.array(range(1, 11), pa.int64())}), uri
    )
    first = commit_fragments(uri, frags, read_version=1, write_id="batch-7")
    second = commit_fragments(uri, frags, read_version=1, write_id="batch-7")
    assert (first.version, first.already_committed) == (2, False)
    assert (second.version, second.already_committed) == (2, True)
    ds = lance.dataset(uri)
    assert ds.version == 2
    assert ids(ds) == list(range(11))


# --------------------------------------------------------------------------- scale


def test_one_million_rows_append(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    rep = tmp_path / "commit.json"
    ids_frame(spark, 0, 10, partitions=1).write.format("txn_lance").mode("append").save(uri)
    df = spark.range(0, 1_000_000, numPartitions=4).selectExpr(
        "id", "cast(id % 1000 as int) as bucket", "cast(id * 0.5 as double) as value"
    )
    started = time.perf_counter()
    df.write.format("txn_lance").mode("overwrite").option("commit_report", str(rep)).save(uri)
    overwrite_job = time.perf_counter() - started
    started = time.perf_counter()
    (
        df.selectExpr("id + 1000000 as id", "bucket", "value")
        .write.format("txn_lance")
        .mode("append")
        .option("max_rows_per_file", "100000")
        .option("commit_report", str(rep))
        .save(uri)
    )
    append_job = time.perf_counter() - started
    result = report(rep)
    ds = lance.dataset(uri)
    assert ds.version == 3
    assert ds.count_rows() == 2_000_000
    overwritten = {f.fragment_id for f in lance.dataset(uri, version=2).get_fragments()}
    assert len(overwritten) == 4  # one file per partition (250 000 < max_rows_per_file)
    appended = [f for f in ds.get_fragments() if f.fragment_id not in overwritten]
    assert len(appended) == 12  # 4 partitions x ceil(250 000 / 100 000)
    assert sum(f.count_rows() for f in appended) == 1_000_000
    assert (result["fragments"], result["rows"], result["version"]) == (12, 1_000_000, 3)
    print(
        f"\n1M-row append: job {append_job:.2f} s, driver commit total "
        f"{result['total_seconds'] * 1000:.1f} ms (txn_engine commit "
        f"{result['commit_seconds'] * 1000:.1f} ms); 1M-row overwrite job {overwrite_job:.2f} s"
    )
    assert_clean(uri)
