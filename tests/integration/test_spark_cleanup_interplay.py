"""pylance's ``cleanup_old_versions`` at every step of a Spark write's life cycle.

A Spark write is planned (read version pinned, record written), its tasks write data files
and mark them, the driver commits one transaction and then cleans up (unreferenced files,
markers, record), and the next write's plan sweeps what a dead driver left. At each of
those points a concurrent pylance writer appends and runs
``cleanup_old_versions(older_than=timedelta(0))`` (only the latest version survives). After
every step and at the end:

* no acknowledged row is lost and none is duplicated (pylance's appends, and the Spark
  write's rows once its commit returned or its transaction landed);
* every kept version reads in pylance;
* every data file of the latest version exists.

The life cycle is driven through :class:`FragmentCollector` in-process (the engine behind
the data source; the steps are its real code paths, with the clean-up injected between
them); the last test runs the ``txn_lance`` data source in Spark local mode with the
clean-up while its tasks are held.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import attrs
import lance
import pyarrow as pa
import pytest

from txn_engine.errors import CommitError
from txn_engine.spark import STAGING_DIR, FragmentCollector
from txn_engine.spark import _staging as st

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

pytestmark = [
    pytest.mark.pylance,
    pytest.mark.filterwarnings("ignore:lance is not fork-safe:UserWarning"),
]

SCHEMA = pa.schema([("id", pa.int64())])
STEPS = ("before_tasks", "after_tasks", "after_commit", "after_finalize", "before_next_sweep")


class DriverDied(Exception):
    """The driver process is gone (raised where its clean-up step would start)."""


def _rows(start: int, end: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, end), pa.int64())})


def _batches(start: int, end: int) -> list[pa.RecordBatch]:
    return _rows(start, end).to_batches(max_chunksize=25)


def _file_names(fragments: list[str]) -> set[str]:
    """The data file names of fragments (JSON, as ``write_batches`` returns them)."""
    return {f["path"] for fragment in fragments for f in json.loads(fragment)["files"]}


@attrs.define
class Table:
    """The dataset under test and the rows acknowledged to writers so far."""

    uri: str
    expected: list[int]
    next_id: int = 10_000

    def concurrent_cleanup(self) -> None:
        """A pylance writer appends (acknowledged), then removes every old version."""
        rows = list(range(self.next_id, self.next_id + 3))
        self.next_id += 3
        lance.write_dataset(_rows(rows[0], rows[-1] + 1), self.uri, mode="append")
        self.expected += rows
        lance.dataset(self.uri).cleanup_old_versions(older_than=timedelta(0))
        self.check()

    def check(self) -> None:
        ds = lance.dataset(self.uri)
        assert sorted(ds.to_table(columns=["id"])["id"].to_pylist()) == sorted(self.expected)
        for v in ds.versions():
            lance.dataset(self.uri, version=v["version"]).to_table()
        for fragment in ds.get_fragments():
            for data_file in fragment.data_files():
                assert os.path.isfile(os.path.join(self.uri, "data", data_file.path))


def _cases() -> Iterator[Any]:
    for step in STEPS:
        yield pytest.param(step, False, id=f"{step}")
    # the driver dies after the commit landed, before its clean-up step
    for step in ("after_commit", "before_next_sweep"):
        yield pytest.param(step, True, id=f"{step}-driver-dies")


@pytest.mark.parametrize(("step", "driver_dies"), list(_cases()))
def test_cleanup_at_every_step_of_a_spark_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str, driver_dies: bool
) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(_rows(0, 10), uri)
    table = Table(uri, list(range(10)))

    done: set[str] = set()

    def at(point: str) -> None:
        if point == step and point not in done:
            done.add(point)
            table.concurrent_cleanup()

    collector = FragmentCollector.plan(uri, mode="append", schema=SCHEMA, max_rows_per_file=50)
    finalize, sweep = st.finalize, st.sweep

    def finalize_hook(storage: Any, key: str, *args: Any, **kwargs: Any) -> st.FinalizeStats:
        if key == collector.write_key and "committing" in done and "finalize" not in done:
            done.add("finalize")  # this write's driver, right after its commit landed
            table.expected += range(100, 200)
            at("after_commit")
            if driver_dies:
                raise DriverDied
        return finalize(storage, key, *args, **kwargs)

    def sweep_hook(*args: Any, **kwargs: Any) -> st.SweepResult:
        at("before_next_sweep")
        return sweep(*args, **kwargs)

    monkeypatch.setattr(st, "finalize", finalize_hook)
    monkeypatch.setattr(st, "sweep", sweep_hook)

    at("before_tasks")
    fragments = collector.write_batches(_batches(100, 200))  # 2 data files
    lost_attempt = collector.write_batches(_batches(100, 150))  # a task attempt Spark dropped
    assert len(fragments) == 2
    assert len(lost_attempt) == 1
    at("after_tasks")
    done.add("committing")
    try:
        result = collector.commit(fragments)
    except DriverDied:
        pass  # it landed (its rows joined ``expected`` then): they must survive
    except CommitError:
        assert "finalize" not in done
        done.discard("committing")
        collector.abort(fragments)  # what Spark does after a failed commit
    else:
        assert result.version is not None
        assert "finalize" in done  # its rows joined ``expected`` when it landed
        at("after_finalize")
    table.check()

    # the next write: its plan sweeps the trail a dead driver left (retention 0 here); a
    # clean-up right after it pinned its read version makes its commit fail
    # (HistoryUnavailableError): it aborts and the job runs again, as a scheduler would
    for _ in range(2):
        nxt = FragmentCollector.plan(uri, mode="append", schema=SCHEMA, staging_retention_seconds=0)
        written = nxt.write_batches(_batches(500, 510))
        try:
            nxt.commit(written)
        except CommitError:
            nxt.abort(written)
            table.check()
        else:
            break
    else:
        raise AssertionError("the next write failed twice")
    table.expected += range(500, 510)
    table.check()
    # nothing is left staged: every trail was finalised or released
    staged = os.path.join(uri, STAGING_DIR)
    assert not os.path.isdir(staged) or os.listdir(staged) == []
    # the dropped attempt's file is garbage: removed by the commit's (or abort's) clean-up;
    # after a dead driver and a removed history it is kept (the outcome is unknown)
    dropped = _file_names(lost_attempt)
    present = set(os.listdir(os.path.join(uri, "data")))
    assert (dropped <= present) if driver_dies else not (dropped & present)


def test_abort_keeps_files_when_the_history_since_the_read_version_is_gone(
    tmp_path: Path,
) -> None:
    """A commit whose outcome was reported unknown, then the versions after its read
    version are cleaned up: abort cannot tell whether it landed and deletes nothing."""
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(_rows(0, 10), uri)
    collector = FragmentCollector.plan(uri, mode="append", schema=SCHEMA)
    fragments = collector.write_batches(_batches(100, 130))
    names = _file_names(fragments)
    for start in (20, 30):
        lance.write_dataset(_rows(start, start + 2), uri, mode="append")
    lance.dataset(uri).cleanup_old_versions(older_than=timedelta(0))
    assert collector.abort(fragments) == 0
    assert names <= set(os.listdir(os.path.join(uri, "data")))


# --------------------------------------------------------------------------- Spark


def _in_thread(fn: Callable[[], None], errors: list[BaseException]) -> threading.Thread:
    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_spark_write_with_cleanup_while_its_tasks_run(spark: Any, tmp_path: Path) -> None:
    import conftest_spark as cs

    from txn_engine.spark import activate

    uri = str(tmp_path / "t.lance")
    lance.write_dataset(_rows(0, 10), uri)
    table = Table(uri, list(range(10)))
    control = tmp_path / "gate"
    control.mkdir()
    errors: list[BaseException] = []

    def job(gated: bool) -> None:
        activate(spark)
        df = spark.range(1000, 1400, numPartitions=2)
        if gated:
            df = df.mapInArrow(cs.gate(str(control)), "id long")
        df.write.format("txn_lance").mode("append").save(uri)

    thread = _in_thread(lambda: job(True), errors)
    cs.wait_started(str(control), 2, errors)  # planned (read version 1 pinned), tasks held
    table.concurrent_cleanup()  # the pinned read version is removed
    cs.open_gate(str(control))
    thread.join(120)
    if errors:
        # the commit could not be checked against the removed history: Spark aborted the
        # write, which removed its files and its staging trail; the job runs again
        assert len(errors) == 1
        assert "HistoryUnavailableError" in str(errors[0])
        table.check()
        assert os.listdir(os.path.join(uri, STAGING_DIR)) == []
        job(False)
    table.expected += range(1000, 1400)
    table.check()
    table.concurrent_cleanup()  # after the driver's clean-up
    # the next Spark write sweeps with retention 0 and keeps everything referenced
    spark.range(2000, 2010, numPartitions=1).write.format("txn_lance").mode("append").option(
        "staging_retention_seconds", "0"
    ).save(uri)
    table.expected += range(2000, 2010)
    table.check()
    assert os.listdir(os.path.join(uri, STAGING_DIR)) == []


def test_a_planned_write_leases_its_read_version_until_commit_or_abort(tmp_path: Path) -> None:
    """A planned Spark write leases its read version (cleanup keeps the history its commit
    checks against and its files); commit and abort release it."""
    from txn_engine.leases import read_leases
    from txn_engine.retention import cleanup
    from txn_engine.storage import open_storage

    uri = str(tmp_path / "t.lance")
    lance.write_dataset(_rows(0, 10), uri)
    storage = open_storage(uri)
    collector = FragmentCollector.plan(uri, mode="append", schema=SCHEMA)
    assert [x.version for x in read_leases(storage)] == [1]
    for i in (2, 3):  # pylance moves on and cleans up everything it can
        lance.write_dataset(_rows(10 * i, 10 * i + 5), uri, mode="append")
    cleanup(uri, older_than=timedelta(0), progress=False)
    assert 1 in [v["version"] for v in lance.dataset(uri).versions()]  # kept by the lease
    fragments = collector.write_batches(_batches(100, 150))
    result = collector.commit(fragments)
    assert result.version == 4
    assert read_leases(storage) == []
    aborted = FragmentCollector.plan(uri, mode="append", schema=SCHEMA)
    assert [x.version for x in read_leases(storage)] == [4]
    aborted.abort()
    assert read_leases(storage) == []
