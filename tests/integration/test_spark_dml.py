"""Row-level DELETE / UPDATE / MERGE from Spark (``txn_engine.spark.delete/update/merge``).

Spark local mode. Every result is compared with pylance 14.0.2 doing the same
delete / update / merge_insert on a copy of the same table (differential), and the
concurrency tests hold the Spark tasks at a gate (``task_hook``) after the read version was
pinned, let other writers (pylance, txn_engine's Python writer, another Spark merge) commit,
then open the gate.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import lance
import pyarrow as pa
import pytest
from pyspark import cloudpickle

import txn_engine as te
from txn_engine.dataset import Dataset
from txn_engine.errors import InvalidOperationError
from txn_engine.format.deletion import deletion_file_path
from txn_engine.leases import read_leases
from txn_engine.ops import Delete, Update
from txn_engine.spark import DmlResult, delete, merge, update
from txn_engine.spark._dml import DML_STAGING_DIR
from txn_engine.spark._staging import STAGING_DIR
from txn_engine.storage import open_storage

pytestmark = [
    pytest.mark.pylance,
    pytest.mark.filterwarnings("ignore:lance is not fork-safe:UserWarning"),
]


# the task hooks below are shipped to Spark's Python workers, which cannot import this
# module (importlib mode): pickle its functions by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])


# --------------------------------------------------------------------------- helpers


def rows(n: int, start: int = 0) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([None if i % 11 == 0 else f"row-{i}" for i in ids], pa.string()),
            "score": pa.array([i / 4 for i in ids], pa.float64()),
        }
    )


def make_table(root: Any, n: int = 120, per_file: int = 40, name: str = "t.lance") -> str:
    """A pylance-written table with ``n`` rows in fragments of ``per_file`` rows and a
    deletion vector already in place (ids divisible by 13 deleted)."""
    uri = str(root / name)
    lance.write_dataset(rows(n), uri, max_rows_per_file=per_file)
    lance.dataset(uri).delete("id % 13 = 0")
    return uri


def copy(uri: str, name: str) -> str:
    target = os.path.join(os.path.dirname(uri), name)
    shutil.copytree(uri, target)
    return target


def content(uri: str) -> dict[str, list[Any]]:
    table = lance.dataset(uri).to_table()
    return table.sort_by([("id", "ascending"), ("name", "ascending")]).to_pydict()


def operation(uri: str, version: int | None = None) -> Any:
    return Dataset.open(open_storage(uri), version=version).transaction(version).operation


def referenced_deletion_files(uri: str) -> set[str]:
    """Deletion files referenced by any version of the table."""
    storage = open_storage(uri)
    latest = Dataset.open(storage)
    out: set[str] = set()
    for info in latest.versions():
        for pb in Dataset.open(storage, version=info.version).manifest_pb.fragments:
            if pb.HasField("deletion_file"):
                out.add(deletion_file_path(pb.id, pb.deletion_file))
    return out


def listing(uri: str, directory: str) -> set[str]:
    path = os.path.join(uri, directory)
    return set(os.listdir(path)) if os.path.isdir(path) else set()


def assert_no_leftovers(uri: str) -> None:
    """No deletion file that no version references, no staging markers left."""
    on_disk = {f"_deletions/{n}" for n in listing(uri, "_deletions")}
    assert on_disk <= referenced_deletion_files(uri)
    assert listing(uri, DML_STAGING_DIR) == set()
    assert not [n for n in listing(uri, STAGING_DIR) if "~" in n]


def gate_hook(control: str, timeout: float = 120.0) -> Callable[[int], None]:
    """A task hook: announce the task, wait until ``control/go`` exists."""

    def hook(_partition: int) -> None:
        import os as os_
        import time as time_
        import uuid

        open(os_.path.join(control, f"started-{uuid.uuid4().hex}"), "w").close()
        deadline = time_.monotonic() + timeout
        while not os_.path.exists(os_.path.join(control, "go")):
            if time_.monotonic() > deadline:
                raise TimeoutError("the test never opened the gate")
            time_.sleep(0.02)

    return hook


def record_hook(directory: str) -> Callable[[int], None]:
    """A task hook that leaves one file per task (named by its group index)."""

    def hook(partition: int) -> None:
        import os as os_

        open(os_.path.join(directory, str(partition)), "w").close()

    return hook


def wait_started(control: str, errors: list[BaseException], timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not any(n.startswith("started-") for n in os.listdir(control)):
        if errors:
            raise errors[0]
        assert time.monotonic() < deadline, "no task reached the gate"
        time.sleep(0.05)


def in_thread(
    fn: Callable[[], DmlResult],
) -> tuple[threading.Thread, list[Any], list[BaseException]]:
    out: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # reported to the test thread
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out, errors


def join(thread: threading.Thread, out: list[Any], errors: list[BaseException]) -> Any:
    thread.join(timeout=300)
    assert not thread.is_alive()
    if errors:
        raise errors[0]
    return out[0]


# --------------------------------------------------------------------------- differential


@pytest.mark.spark_cluster
def test_delete_equals_pylance_and_commits_a_delete(spark: Any, tmp_path: Any) -> None:
    uri = make_table(tmp_path)
    oracle = copy(uri, "oracle.lance")
    before = lance.dataset(uri).version
    lance.dataset(oracle).delete("id < 45 OR name IS NULL")

    result = delete(spark, uri, "id < 45 OR name IS NULL")

    assert content(uri) == content(oracle)
    assert result.version == before + 1
    assert result.read_version == before
    assert result.attempts == 1
    op = operation(uri)
    assert isinstance(op, Delete)
    # fragment 0 (ids 0-39) is emptied: removed; the others get a deletion vector that
    # keeps the rows deleted before (ids divisible by 13: deletion vectors honoured)
    assert op.deleted_fragment_ids == (0,)
    assert [f.id for f in op.updated_fragments] == [1, 2]
    assert result.rows_deleted == lance.dataset(uri, version=before).count_rows() - (
        lance.dataset(uri).count_rows()
    )
    assert lance.dataset(uri).count_rows(filter="id % 13 = 0") == 0
    assert_no_leftovers(uri)


@pytest.mark.spark_cluster
def test_update_equals_pylance(spark: Any, tmp_path: Any) -> None:
    uri = make_table(tmp_path)
    oracle = copy(uri, "oracle.lance")
    lance.dataset(oracle).update({"name": "'changed'", "score": "score * 2"}, where="id >= 70")

    seen = tmp_path / "tasks"
    seen.mkdir()
    result = update(
        spark,
        uri,
        set={"name": "'changed'", "score": "score * 2"},
        where="id >= 70",
        max_tasks=2,  # 3 fragments in 2 tasks
        task_hook=record_hook(str(seen)),
    )
    assert sorted(os.listdir(seen)) == ["0", "1"]

    assert content(uri) == content(oracle)
    op = operation(uri)
    assert isinstance(op, Update)
    assert op.new_fragments
    assert result.new_fragments == len(op.new_fragments)
    assert result.rows_updated == lance.dataset(uri).count_rows(filter="name = 'changed'")
    assert_no_leftovers(uri)


def test_update_keeps_stable_row_ids_as_pylance(spark: Any, tmp_path: Any) -> None:
    uri = str(tmp_path / "stable.lance")
    lance.write_dataset(rows(60), uri, max_rows_per_file=20, enable_stable_row_ids=True)
    oracle = copy(uri, "oracle.lance")
    lance.dataset(oracle).update({"score": "score + 100"}, where="id % 3 = 0")

    update(spark, uri, set={"score": "score + 100"}, where="id % 3 = 0")

    def by_row_id(path: str) -> dict[int, tuple[Any, ...]]:
        table = lance.dataset(path).to_table(with_row_id=True).to_pydict()
        return {
            rid: (i, n, s)
            for rid, i, n, s in zip(
                table["_rowid"], table["id"], table["name"], table["score"], strict=True
            )
        }

    assert by_row_id(uri) == by_row_id(oracle)
    assert_no_leftovers(uri)


@pytest.mark.spark_cluster
@pytest.mark.parametrize(
    ("when_matched", "when_not_matched"), [("update", "insert"), ("delete", None)]
)
def test_merge_equals_pylance_merge_insert(
    spark: Any, tmp_path: Any, when_matched: Any, when_not_matched: Any
) -> None:
    uri = make_table(tmp_path)
    oracle = copy(uri, "oracle.lance")
    # keys 100-139: 100-119 exist (104 and 117 were deleted: new again), 120-139 are new
    source = rows(40, start=100).set_column(1, "name", pa.array([f"new-{i}" for i in range(40)]))
    builder = lance.dataset(oracle).merge_insert("id")
    builder = (
        builder.when_matched_update_all()
        if when_matched == "update"
        else builder.when_matched_delete()
    )
    if when_not_matched == "insert":
        builder = builder.when_not_matched_insert_all()
    builder.execute(source)

    df = spark.createDataFrame(source.to_pandas())
    result = merge(
        df,
        uri,
        on="id",
        when_matched=when_matched,
        when_not_matched=when_not_matched,
    )

    assert content(uri) == content(oracle)
    op = operation(uri)
    assert isinstance(op, Update)
    if when_not_matched == "insert":
        assert result.rows_inserted == 22
        assert result.rows_updated == 18
        assert op.inserted_rows is not None  # the upsert key record, as te.open().merge_insert
    else:
        assert result.rows_deleted == 18
        assert not op.new_fragments
    assert_no_leftovers(uri)


# --------------------------------------------------------------------------- concurrency


@pytest.mark.spark_cluster
def test_concurrent_disjoint_deletes_in_one_fragment_all_land(spark: Any, tmp_path: Any) -> None:
    """Spark's delete is planned (version pinned, tasks held); pylance and txn_engine's
    Python writer delete other rows of the same fragment and commit first; the Spark
    delete then lands by merging deletion vectors, without re-planning."""
    uri = make_table(tmp_path, n=100, per_file=100)
    oracle = copy(uri, "oracle.lance")
    control = str(tmp_path / "gate")
    os.mkdir(control)
    thread, out, errors = in_thread(
        lambda: delete(spark, uri, "id >= 80", task_hook=gate_hook(control))
    )
    wait_started(control, errors)
    pinned = lance.dataset(uri).version
    # the plan holds a lease on its read version until the commit is decided
    assert [x.version for x in read_leases(open_storage(uri))] == [pinned]
    lance.dataset(uri).delete("id < 10")
    te.open(uri).delete("id >= 40 AND id < 50")
    open(os.path.join(control, "go"), "w").close()
    result = join(thread, out, errors)

    for cond in ("id < 10", "id >= 40 AND id < 50", "id >= 80"):
        lance.dataset(oracle).delete(cond)
    assert content(uri) == content(oracle)
    assert result.read_version == pinned
    assert result.version == pinned + 3
    assert result.attempts == 1  # rebased (deletion vectors merged), not re-planned
    assert isinstance(operation(uri), Delete)
    assert_no_leftovers(uri)


@pytest.mark.spark_cluster
def test_overlapping_concurrent_delete_replans(spark: Any, tmp_path: Any) -> None:
    """pylance deletes some of the same rows while the Spark update is held: the commit is
    preempted (rule ROWS), the update is re-planned at the latest version, the result is
    what the two changes in that order give, and the first plan's files are removed."""
    uri = make_table(tmp_path, n=100, per_file=50)
    oracle = copy(uri, "oracle.lance")
    control = str(tmp_path / "gate")
    os.mkdir(control)
    thread, out, errors = in_thread(
        lambda: update(
            spark, uri, set={"name": "'upd'"}, where="id < 30", task_hook=gate_hook(control)
        )
    )
    wait_started(control, errors)
    pinned = lance.dataset(uri).version
    lance.dataset(uri).delete("id >= 20 AND id < 25")
    # let the held plan finish writing its files before it learns about the conflict
    open(os.path.join(control, "go"), "w").close()
    result = join(thread, out, errors)

    lance.dataset(oracle).delete("id >= 20 AND id < 25")
    lance.dataset(oracle).update({"name": "'upd'"}, where="id < 30")
    assert content(uri) == content(oracle)
    assert result.attempts == 2
    assert result.read_version == pinned + 1
    assert result.version == pinned + 2
    assert result.files_removed >= 2  # the first plan's deletion vector and data file
    assert_no_leftovers(uri)
    assert set(os.listdir(os.path.join(uri, "data"))) == {
        f.path for frag in Dataset.open(open_storage(uri)).fragments for f in frag.files
    }


@pytest.mark.spark_cluster
def test_concurrent_spark_merges_insert_a_new_key_once(spark: Any, tmp_path: Any) -> None:
    """Two Spark merges planned at the same version both insert key 1000: the second to
    commit is preempted (rule U1, the key record) and re-planned, and updates the row."""
    uri = make_table(tmp_path, n=40, per_file=40)
    gates = [str(tmp_path / f"gate{i}") for i in range(2)]
    jobs = []
    for i, control in enumerate(gates):
        os.mkdir(control)
        src = spark.createDataFrame(
            [(1000, f"merge-{i}", float(i))], "id long, name string, score double"
        )
        hook = gate_hook(control)
        jobs.append(in_thread(lambda src=src, hook=hook: merge(src, uri, on="id", task_hook=hook)))
    for control, (_t, _o, errors) in zip(gates, jobs, strict=True):
        wait_started(control, errors)
    pinned = lance.dataset(uri).version
    for control in gates:
        open(os.path.join(control, "go"), "w").close()
    results = [join(*job) for job in jobs]

    table = lance.dataset(uri).to_table(filter="id = 1000").to_pydict()
    assert table["id"] == [1000]
    assert sorted(r.attempts for r in results) == [1, 2]
    assert sorted(r.rows_inserted for r in results) == [0, 1]
    second = max(results, key=lambda r: r.attempts)
    assert table["name"] == [f"merge-{results.index(second)}"]
    assert lance.dataset(uri).version == pinned + 2
    assert lance.dataset(uri).count_rows() == 40 - 4 + 1  # ids 0, 13, 26, 39 deleted
    assert_no_leftovers(uri)


@pytest.mark.spark_cluster
def test_spark_merge_and_python_merge_insert_same_new_key(spark: Any, tmp_path: Any) -> None:
    """txn_engine's Python writer upserts key 500 while a Spark merge that inserts it is
    held: the Spark merge re-plans (the Python upsert's key record) and updates the row."""
    uri = make_table(tmp_path, n=40, per_file=40)
    control = str(tmp_path / "gate")
    os.mkdir(control)
    src = spark.createDataFrame([(500, "spark", 1.0)], "id long, name string, score double")
    thread, out, errors = in_thread(lambda: merge(src, uri, on="id", task_hook=gate_hook(control)))
    wait_started(control, errors)
    te.open(uri).merge_insert(
        pa.table({"id": pa.array([500], pa.int64()), "name": ["python"], "score": [2.0]}),
        on="id",
    )
    open(os.path.join(control, "go"), "w").close()
    result = join(thread, out, errors)

    assert lance.dataset(uri).to_table(filter="id = 500").to_pydict() == {
        "id": [500],
        "name": ["spark"],
        "score": [1.0],
    }
    assert result.attempts == 2
    assert result.rows_updated == 1
    assert result.rows_inserted == 0
    assert_no_leftovers(uri)


# --------------------------------------------------------------------------- failures


def failing_hook(uri: str, partition: int) -> Callable[[int], None]:
    """Fails task ``partition`` (every attempt) once the other tasks wrote their files."""

    def hook(index: int) -> None:
        import os as os_
        import time as time_

        if index != partition:
            return
        deadline = time_.monotonic() + 60
        while time_.monotonic() < deadline:
            staging = os_.path.join(uri, "_txn_engine", "spark")
            marks = os_.listdir(staging) if os_.path.isdir(staging) else []
            if sum("~" in n for n in marks) >= 2:
                break
            time_.sleep(0.05)
        time_.sleep(0.5)
        raise RuntimeError(f"injected failure in task {partition}")

    return hook


@pytest.mark.spark_cluster
def test_failing_task_commits_nothing_and_removes_its_files(spark: Any, tmp_path: Any) -> None:
    uri = make_table(tmp_path, n=90, per_file=30)
    before = content(uri)
    version = lance.dataset(uri).version
    data_before = listing(uri, "data")
    deletions_before = listing(uri, "_deletions")

    with pytest.raises(InvalidOperationError, match="injected failure"):
        update(spark, uri, set={"name": "'x'"}, where="id % 2 = 0", task_hook=failing_hook(uri, 1))

    assert lance.dataset(uri).version == version
    assert content(uri) == before
    assert listing(uri, "data") == data_before
    assert listing(uri, "_deletions") == deletions_before
    assert_no_leftovers(uri)


def test_bad_condition_is_refused_before_any_task(spark: Any, tmp_path: Any) -> None:
    uri = make_table(tmp_path, n=20, per_file=20)
    version = lance.dataset(uri).version
    with pytest.raises(InvalidOperationError, match="no_such_column"):
        delete(spark, uri, "no_such_column > 3")
    with pytest.raises(InvalidOperationError, match="no column"):
        update(spark, uri, set={"nope": "1"})
    assert lance.dataset(uri).version == version


# --------------------------------------------------------------------------- stragglers


def test_a_straggling_task_removes_its_own_deletion_file(tmp_path: Any) -> None:
    """A task attempt that writes a deletion file after its plan was finalised (the
    plan's record is gone) deletes the file and fails."""
    from pyroaring import BitMap

    from txn_engine.spark._dml import _delete_rows

    uri = make_table(tmp_path, n=20, per_file=20)
    storage = open_storage(uri)
    snapshot = Dataset.open(storage)
    pb = snapshot.manifest_pb.fragments[0]
    before = listing(uri, "_deletions")
    with pytest.raises(InvalidOperationError, match="abandoned"):
        _delete_rows(
            storage,
            "0000000000000-0123456789abcdef",
            snapshot.version,
            pb.id,
            pb.SerializeToString(),
            BitMap([1, 2]),
        )
    assert listing(uri, "_deletions") == before
    assert listing(uri, DML_STAGING_DIR) == set()


def test_discard_removes_files_marked_while_it_ran(tmp_path: Any) -> None:
    """A task that marked a deletion file between the driver's first listing and the
    removal of the plan's record (so it saw the record) is caught by the second listing."""
    from txn_engine.spark._dml import _Attempt, _discard, _marker, _record
    from txn_engine.storage import LocalStorage

    key = "0000000000000-0123456789abcdef"
    late = "_deletions/7-3-99.arrow"

    class Racing(LocalStorage):
        def delete(self, path: str) -> None:
            if path == _record(key):  # a task marks its file just before the record goes
                self.put(late, b"x")
                self.put(_marker(key, late), b"")
            super().delete(path)

    storage = Racing(str(tmp_path))
    early = "_deletions/5-3-42.arrow"
    storage.put(_record(key), b"")
    for path in (early, "_deletions/6-3-43.bin"):
        storage.put(path, b"x")
        storage.put(_marker(key, path), b"")

    removed = _discard(storage, _Attempt(key), keep={"_deletions/6-3-43.bin"})

    assert removed == 2
    assert sorted(storage.list("_deletions")) == ["6-3-43.bin"]
    assert storage.list(DML_STAGING_DIR) == []


@pytest.mark.parametrize("isolation", ["snapshot", "serializable"])
def test_a_serializable_delete_is_replanned_after_an_append_its_condition_matches(
    spark: Any, tmp_path: Any, isolation: str
) -> None:
    """``isolation="serializable"``: a delete of ``id >= 80`` whose tasks are held at the
    gate while a row with id 500 is appended is refused at its commit (rule SER) and
    re-planned, so the appended row is deleted too; at snapshot (Lance's rule) the plan
    lands as it was and the appended row stays."""
    uri = make_table(tmp_path)
    control = str(tmp_path / "gate")
    os.mkdir(control)
    thread, out, errors = in_thread(
        lambda: delete(
            spark, uri, "id >= 80", isolation=isolation, task_hook=gate_hook(control)
        )
    )
    wait_started(control, errors)
    te.open(uri).append(rows(1, start=500))
    open(os.path.join(control, "go"), "w").close()
    result = join(thread, out, errors)
    ids = lance.dataset(uri).to_table().column("id").to_pylist()
    assert max(ids) == (79 if isolation == "serializable" else 500)
    assert result.attempts == (2 if isolation == "serializable" else 1)
