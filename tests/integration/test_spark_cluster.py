"""``txn_lance`` on a Spark standalone cluster (a master and two workers on 127.0.0.1, one
core each, so the two executors are JVMs of their own with Python workers of their own):
an executor killed in the middle of a write, and jobs of two driver threads appending and
merging into one table at once. The read, stream, DML and concurrency tests of the other
``test_spark*`` modules also run there (``@pytest.mark.spark_cluster``). Every outcome is
read back with pylance 14.0.2.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import lance
import pytest
import spark_cluster

from txn_engine.spark import STAGING_DIR, activate, merge
from txn_engine.storage._files import is_staging_name

pytestmark = [
    pytest.mark.pylance,
    pytest.mark.filterwarnings("ignore:lance is not fork-safe:UserWarning"),
]

ON_CLUSTER = pytest.mark.parametrize("spark", ["cluster"], indirect=True)


def ids_frame(spark: Any, start: int, end: int, partitions: int) -> Any:
    return spark.range(start, end, numPartitions=partitions).selectExpr(
        "id", "concat('row-', cast(id as string)) as name"
    )


def data_files(uri: str) -> set[str]:
    return set(os.listdir(os.path.join(uri, "data")))


def markers(uri: str) -> set[str]:
    """Names of the data files marked in the staging area (``{write key}~{file}``). A
    marker still being written (its staging name, ``{marker}.{uuid hex}.tmp``, seen while
    another thread of the held task writes it) is not a mark yet."""
    path = os.path.join(uri, STAGING_DIR)
    names = os.listdir(path) if os.path.isdir(path) else []
    return {n.split("~", 1)[1] for n in names if "~" in n and not is_staging_name(n)}


def referenced(uri: str) -> set[str]:
    """Data files referenced by any version of the table."""
    out: set[str] = set()
    for v in lance.dataset(uri).versions():
        ds = lance.dataset(uri, version=v["version"])
        out |= {f.path for frag in ds.get_fragments() for f in frag.data_files()}
    return out


def id_counts(uri: str) -> Counter[int]:
    return Counter(lance.dataset(uri).to_table(columns=["id"]).column("id").to_pylist())


def wait_for(
    predicate: Any,
    what: str,
    errors: list[BaseException],
    timeout: float = 120.0,
    detail: Any = None,
) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if errors:
            raise errors[0]
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {detail and detail()}"
        time.sleep(0.05)


# --------------------------------------------------------------------------- executor killed


@ON_CLUSTER
def test_executor_killed_mid_write_lands_every_row_once_and_cleans_up(
    spark: Any, tmp_path: Path
) -> None:
    """Partition 1's first attempt has written and marked two data files (and holds inside
    pylance's write, in the marker write of the second) when its executor JVM is killed
    (SIGKILL). Spark runs the task again on an executor that is alive; the write commits
    one version with every row exactly once, and the files of the lost attempt are deleted
    by the clean-up after the commit (docs/spark.md: files of attempts lost with their
    executor). Nothing is left in ``data/`` that no version
    references, and nothing under the staging area."""
    spark_cluster.wait_executors(spark, 2)
    uri = str(tmp_path / "t.lance")
    ids_frame(spark, 0, 10, 1).write.format("txn_lance").mode("append").save(uri)
    seeded = data_files(uri)
    control = tmp_path / "control"
    control.mkdir()
    report = tmp_path / "commit.json"
    errors: list[BaseException] = []

    def job() -> None:
        try:
            activate(spark)
            (
                ids_frame(spark, 1000, 1800, 2)  # 400 rows per partition: 4 files each
                .write.format("txn_lance")
                .mode("append")
                .option("max_rows_per_file", "100")
                .option("commit_report", str(report))
                .option("storage_factory", "conftest_spark:faulty_storage")
                .option("storage.hold_dir", str(control))
                .option("storage.hold_partition", "1")
                .option("storage.hold_after_markers", "2")
                .save(uri)
            )
        except BaseException as exc:  # reported to the test thread
            errors.append(exc)

    thread = threading.Thread(target=job, daemon=True)
    thread.start()
    wait_for(lambda: any(n.startswith("held-") for n in os.listdir(control)), "the hold", errors)
    (held,) = [n for n in os.listdir(control) if n.startswith("held-")]
    # the held attempt (partition 1's first) has two complete, marked files; partition 0
    # runs on the other executor
    victim = spark_cluster.executor_jvm(int(held.split("-", 1)[1]))
    executor = spark_cluster.executor_id(victim)
    written_before_kill = data_files(uri) - seeded
    marked_before_kill = markers(uri)
    os.kill(victim, signal.SIGKILL)
    thread.join(300)
    assert not thread.is_alive()
    assert errors == []

    ds = lance.dataset(uri)
    assert ds.version == 2
    counts = id_counts(uri)
    assert sorted(counts) == [*range(10), *range(1000, 1800)]
    assert set(counts.values()) == {1}  # every row exactly once
    assert len(ds.get_fragments()) == 1 + 8  # the seed, then 2 partitions x 4 files
    # the lost attempt's files: written and marked before the kill, referenced by no version
    lost = marked_before_kill - referenced(uri)
    assert len(lost) >= 2, (marked_before_kill, referenced(uri))
    assert lost <= written_before_kill
    assert json.loads(report.read_text())["files_removed"] >= len(lost)
    assert not lost & data_files(uri)  # deleted
    assert data_files(uri) == referenced(uri)  # no partial or orphaned file either
    assert sorted(os.listdir(os.path.join(uri, STAGING_DIR))) == []
    # the master replaced the executor; later tests get two again
    spark_cluster.wait_executors(spark, 2)
    assert executor not in spark_cluster.executor_ids(spark)


@ON_CLUSTER
def test_executor_killed_in_every_attempt_fails_the_job_and_lands_nothing(
    spark: Any, tmp_path: Path
) -> None:
    """Every attempt of partition 1 loses its executor after writing two files (three
    attempts: spark.task.maxFailures). The job fails, Spark calls abort: no version, and
    every file the write produced (both partitions' marked files) is deleted."""
    spark_cluster.wait_executors(spark, 2)
    uri = str(tmp_path / "t.lance")
    ids_frame(spark, 0, 10, 1).write.format("txn_lance").mode("append").save(uri)
    seeded = data_files(uri)
    control = tmp_path / "control"
    control.mkdir()
    errors: list[BaseException] = []

    def job() -> None:
        try:
            activate(spark)
            (
                ids_frame(spark, 1000, 1800, 2)
                .write.format("txn_lance")
                .mode("append")
                .option("max_rows_per_file", "100")
                .option("storage_factory", "conftest_spark:faulty_storage")
                .option("storage.hold_dir", str(control))
                .option("storage.hold_partition", "1")
                .option("storage.hold_every_attempt", "true")
                .save(uri)
            )
        except BaseException as exc:  # expected: the job fails
            errors.append(exc)

    thread = threading.Thread(target=job, daemon=True)
    thread.start()
    killed: set[str] = set()
    written: set[str] = set()
    deadline = time.monotonic() + 300
    while thread.is_alive() and time.monotonic() < deadline:
        for name in os.listdir(control):
            if name.startswith("held-") and name not in killed:
                written |= data_files(uri) - seeded
                os.kill(spark_cluster.executor_jvm(int(name.split("-", 1)[1])), signal.SIGKILL)
                killed.add(name)
        time.sleep(0.05)
    thread.join(60)
    assert not thread.is_alive()
    assert len(killed) == 3  # one executor lost per attempt, then Spark gave up
    assert len(errors) == 1
    assert "failed 3 times" in str(errors[0]) or "ExecutorLostFailure" in str(errors[0])
    assert len(written) >= 2  # files had been written when the executors died
    ds = lance.dataset(uri)
    assert ds.version == 1  # nothing landed
    assert sorted(id_counts(uri)) == list(range(10))
    assert data_files(uri) == seeded  # abort deleted every file of the write
    assert sorted(os.listdir(os.path.join(uri, STAGING_DIR))) == []
    spark_cluster.wait_executors(spark, 2)


# --------------------------------------------------------------------------- concurrent jobs


@ON_CLUSTER
def test_two_driver_threads_append_and_merge_at_once(spark: Any, tmp_path: Path) -> None:
    """Two threads of one driver run jobs against the cluster at the same time, each a
    sequence of appends (ids of their own) and merges that insert the same new key in the
    same round. Every acknowledged append lands exactly once (no acknowledged row lost,
    none twice); of two merges inserting one new key, one inserts it and the other updates
    the row (the key is there once); one version per job."""
    uri = str(tmp_path / "t.lance")
    ids_frame(spark, 0, 10, 1).write.format("txn_lance").mode("append").save(uri)
    rounds = 2
    appended: dict[int, list[tuple[int, int]]] = {0: [], 1: []}
    merged: dict[int, list[Any]] = {0: [], 1: []}
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def worker(me: int) -> None:
        try:
            activate(spark)
            start.wait(60)
            for r in range(rounds):
                lo = 10_000 * (me + 1) + 100 * r
                ids_frame(spark, lo, lo + 50, 2).write.format("txn_lance").mode("append").save(
                    uri
                )
                appended[me].append((lo, lo + 50))
                source = spark.createDataFrame(
                    [(900 + r, f"merge-{me}-{r}")], "id long, name string"
                )
                merged[me].append(merge(source, uri, on="id"))
        except BaseException as exc:  # reported to the test thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(me,), daemon=True) for me in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert not any(t.is_alive() for t in threads)
    assert errors == []

    counts = id_counts(uri)
    expected = [*range(10), *(900 + r for r in range(rounds))]
    for me in (0, 1):
        assert len(appended[me]) == rounds
        for lo, hi in appended[me]:
            expected += range(lo, hi)
    assert sorted(counts) == sorted(expected)
    assert set(counts.values()) == {1}
    keys = lance.dataset(uri).to_table(filter="id >= 900 AND id < 1000").to_pydict()
    names = dict(zip(keys["id"], keys["name"], strict=True))
    for r in range(rounds):
        results = [merged[me][r] for me in (0, 1)]
        assert sorted(x.rows_inserted for x in results) == [0, 1]
        assert sorted(x.rows_updated for x in results) == [0, 1]
        # the row holds the values of the merge that committed last
        last = max((0, 1), key=lambda me: merged[me][r].version)
        assert names[900 + r] == f"merge-{last}-{r}"
    assert lance.dataset(uri).version == 1 + 2 * rounds * 2
    assert data_files(uri) == referenced(uri)

