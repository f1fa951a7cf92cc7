"""Structured Streaming into ``txn_lance``: one version per micro-batch, exactly once.

The commit protocol is tested directly first (no Spark: replays, 500 commits between a
crash and the replay, unknown outcomes, history gaps), then end to end: streaming queries
run in driver subprocesses that are killed at each step of a micro-batch and restarted on
the same checkpoint, in local mode and on a standalone cluster (master and two workers),
and in the test's own session (``spark`` fixture: local mode and the cluster).
Every table is read back with pylance 14.0.2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)


import spark_cluster  # noqa: E402

from txn_engine import Transaction, UpdateConfig, commit  # noqa: E402
from txn_engine.errors import (  # noqa: E402
    CommitStateUnknownError,
    HistoryUnavailableError,
    InvalidOperationError,
)
from txn_engine.format.io import read_transaction  # noqa: E402
from txn_engine.format.naming import list_versions  # noqa: E402
from txn_engine.ops import UpdateMap  # noqa: E402
from txn_engine.spark import (  # noqa: E402
    STAGING_DIR,
    WriteOptions,
    _staging,
)
from txn_engine.spark._stream import (  # noqa: E402
    STREAM_BATCH_ID_PROPERTY,
    STREAM_QUERY_ID_PROPERTY,
    StreamOptions,
    batch_uuid,
    commit_stream_batch,
    parse_stream_options,
    read_progress,
    resolve_query_id,
    write_stream_task,
)
from txn_engine.storage import open_storage  # noqa: E402

pytestmark = [
    pytest.mark.pylance,
    pytest.mark.filterwarnings("ignore:lance is not fork-safe:UserWarning"),
]

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
QUERY = "7d3c2a10-0000-4000-8000-000000000001"


def rows(start: int, end: int) -> pa.RecordBatch:
    ids = list(range(start, end))
    return pa.RecordBatch.from_arrays(
        [pa.array(ids, pa.int64()), pa.array([f"row-{i}" for i in ids], pa.string())],
        schema=SCHEMA,
    )


def run_batch(
    uri: str,
    batch_id: int,
    start: int,
    end: int,
    *,
    options: WriteOptions | None = None,
    hook: Any = None,
) -> Any:
    """One micro-batch as Spark runs it: two tasks, then the driver commit."""
    options = options or WriteOptions()
    mid = (start + end) // 2
    keys, fragments = [], []
    for lo, hi in ((start, mid), (mid, end)):
        key, frags = write_stream_task(
            uri, [rows(lo, hi)], schema=SCHEMA, options=options, query_id=QUERY, batch_id=batch_id
        )
        keys.append(key)
        fragments.extend(frags)
    return commit_stream_batch(
        uri,
        query_id=QUERY,
        batch_id=batch_id,
        fragments=fragments,
        write_keys=keys,
        schema=SCHEMA,
        options=options,
        hook=hook,
    )


def stream_versions(uri: str) -> list[tuple[int, str, str]]:
    """(version, query id, batch id) of every version a stream committed, ascending."""
    storage = open_storage(uri)
    out = []
    for entry in list_versions(storage):
        props = read_transaction(storage, entry).transaction_properties
        if STREAM_BATCH_ID_PROPERTY in props:
            out.append(
                (entry.version, props[STREAM_QUERY_ID_PROPERTY], props[STREAM_BATCH_ID_PROPERTY])
            )
    return out


def all_ids(uri: str) -> list[int]:
    return sorted(lance.dataset(uri).to_table(columns=["id"]).column("id").to_pylist())


def assert_clean(uri: str) -> None:
    """Every data file is referenced by some version and no staging record is left."""
    referenced: set[str] = set()
    for v in lance.dataset(uri).versions():
        ds = lance.dataset(uri, version=v["version"])
        referenced |= {f.path for frag in ds.get_fragments() for f in frag.data_files()}
    assert set(os.listdir(os.path.join(uri, "data"))) == referenced
    staging = os.path.join(uri, STAGING_DIR)
    assert (sorted(os.listdir(staging)) if os.path.isdir(staging) else []) == []


class Crash(Exception):
    pass


def crash_at(stage: str) -> Any:
    def hook(seen: str) -> None:
        if seen == stage:
            raise Crash(stage)

    return hook


# --------------------------------------------------------------------------- protocol


def test_each_batch_is_one_version_with_its_identity(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    first = run_batch(uri, 0, 0, 100)
    second = run_batch(uri, 1, 100, 250)
    assert (first.version, second.version) == (1, 2)
    assert not first.already_committed
    assert not second.already_committed
    assert all_ids(uri) == list(range(250))
    assert stream_versions(uri) == [(1, QUERY, "0"), (2, QUERY, "1")]
    storage = open_storage(uri)
    assert read_transaction(storage, list_versions(storage)[1]).uuid == batch_uuid(uri, QUERY, 1)
    progress = read_progress(open_storage(uri), QUERY)
    assert progress is not None
    assert (progress.batch_id, progress.version) == (1, 2)
    assert progress.pending_batch_id is None  # the intent is cleared once recorded
    assert_clean(uri)


def test_replay_of_a_committed_batch_commits_nothing(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    run_batch(uri, 0, 0, 100)
    run_batch(uri, 1, 100, 200)
    for batch, (lo, hi) in ((1, (100, 200)), (0, (0, 100))):
        replay = run_batch(uri, batch, lo, hi)  # fresh task files, as a Spark replay writes
        assert replay.already_committed
        assert replay.files_removed == 2
    assert lance.dataset(uri).version == 2
    assert all_ids(uri) == list(range(200))
    assert_clean(uri)


def test_crash_after_the_commit_put_then_500_commits_then_replay(tmp_path: Path) -> None:
    """The batch landed, the driver died before recording it; 500 other commits land
    before the replay. A fixed lookback of 100 versions would miss it; the intent in the
    progress object points the search at the right place."""
    uri = str(tmp_path / "t.lance")
    run_batch(uri, 0, 0, 100)
    with pytest.raises(Crash):
        run_batch(uri, 1, 100, 200, hook=crash_at("committed"))
    assert lance.dataset(uri).version == 2
    storage = open_storage(uri)
    for i in range(500):
        txn = Transaction(2 + i, UpdateConfig(config_updates=UpdateMap({"other": str(i)})))
        commit(storage, txn)
    assert lance.dataset(uri).version == 502
    uuid = batch_uuid(uri, QUERY, 1)
    assert _staging.find_landed(storage, uuid, after_version=502 - 100) is None
    replay = run_batch(uri, 1, 100, 200)
    assert replay.already_committed
    assert replay.version == 2
    nxt = run_batch(uri, 2, 200, 300)
    assert nxt.version == 503
    assert all_ids(uri) == list(range(300))
    assert [b for _, _, b in stream_versions(uri)] == ["0", "1", "2"]
    assert_clean(uri)


@pytest.mark.parametrize("stage", ["tasks_done", "committed", "progress_written"])
def test_crash_at_each_driver_step_then_replay(tmp_path: Path, stage: str) -> None:
    uri = str(tmp_path / "t.lance")
    run_batch(uri, 0, 0, 100)
    if stage == "tasks_done":
        # tasks wrote their files, the driver died before its commit began
        for lo, hi in ((100, 150), (150, 200)):
            write_stream_task(
                uri,
                [rows(lo, hi)],
                schema=SCHEMA,
                options=WriteOptions(),
                query_id=QUERY,
                batch_id=1,
            )
    else:
        with pytest.raises(Crash):
            run_batch(uri, 1, 100, 200, hook=crash_at(stage))
    replay = run_batch(uri, 1, 100, 200)
    assert replay.already_committed == (stage != "tasks_done")
    assert all_ids(uri) == list(range(200))
    assert [b for _, _, b in stream_versions(uri)] == ["0", "1"]
    assert_clean(uri)  # the crashed run's staged files are gone too


def test_unknown_commit_outcome_is_settled_not_guessed(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    run_batch(uri, 0, 0, 100)
    flag = tmp_path / "lose"
    faulty = WriteOptions(
        storage_factory="conftest_spark:faulty_storage",
        storage_options={"lose_response_flag": str(flag), "outage_reads": 1000},
        commit_attempts=2,
    )
    flag.touch()
    with pytest.raises(CommitStateUnknownError):
        run_batch(uri, 1, 100, 200, options=faulty)
    assert lance.dataset(uri).version == 2  # it did land; nobody could tell
    replay = run_batch(uri, 1, 100, 200)
    assert replay.already_committed
    assert replay.version == 2
    # a short outage: the same call re-commits the same uuid and the loop settles it
    flag.touch()
    brief = WriteOptions(
        storage_factory="conftest_spark:faulty_storage",
        storage_options={"lose_response_flag": str(flag), "outage_reads": 1},
    )
    settled = run_batch(uri, 2, 200, 300, options=brief)
    assert not flag.exists()
    assert settled.version == 3
    assert lance.dataset(uri).version == 3
    assert all_ids(uri) == list(range(300))
    assert [b for _, _, b in stream_versions(uri)] == ["0", "1", "2"]


def test_history_gap_for_the_pending_batch_is_an_error(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    run_batch(uri, 0, 0, 100)
    with pytest.raises(Crash):
        run_batch(uri, 1, 100, 200, hook=crash_at("committed"))
    storage = open_storage(uri)
    for i in range(3):
        commit(storage, Transaction(2 + i, UpdateConfig(config_updates=UpdateMap({"k": str(i)}))))
    # versions 2..4 removed (as an aggressive cleanup would): did batch 1 land? unknowable
    for entry in list_versions(storage):
        if 2 <= entry.version <= 4:
            storage.delete(entry.path)
    with pytest.raises(HistoryUnavailableError):
        run_batch(uri, 1, 100, 200)
    assert lance.dataset(uri).version == 5


def test_batch_not_pending_needs_no_history(tmp_path: Path) -> None:
    """Old versions cleaned up between batches do not block the next batch: only a batch
    whose commit was started searches the history."""
    uri = str(tmp_path / "t.lance")
    run_batch(uri, 0, 0, 100)
    run_batch(uri, 1, 100, 200)
    storage = open_storage(uri)
    commit(storage, Transaction(2, UpdateConfig(config_updates=UpdateMap({"k": "v"}))))
    for entry in list_versions(storage):
        if entry.version < 3:
            storage.delete(entry.path)
    result = run_batch(uri, 2, 200, 300)
    assert result.version == 4
    assert not result.already_committed
    assert all_ids(uri) == list(range(300))


def test_stream_options(tmp_path: Path) -> None:
    parsed = parse_stream_options(
        {"checkpointLocation": "/x", "max_rows_per_file": "10", "path": "/t"}
    )
    assert parsed.checkpoint_location == "/x"
    assert parsed.write.max_rows_per_file == 10
    for bad in ("write_id", "mergeSchema", "replaceWhere"):
        with pytest.raises(InvalidOperationError, match="not supported by streaming"):
            parse_stream_options({bad: "x"})
    with pytest.raises(InvalidOperationError, match="unknown txn_lance option"):
        parse_stream_options({"max_rows_per_fil": "1"})
    with pytest.raises(InvalidOperationError, match="checkpointLocation"):
        resolve_query_id(StreamOptions(WriteOptions()))
    (tmp_path / "metadata").write_text('{"id":"abc-123"}\n')
    assert resolve_query_id(StreamOptions(WriteOptions(), str(tmp_path))) == "abc-123"
    assert resolve_query_id(StreamOptions(WriteOptions(), str(tmp_path), "mine")) == "mine"
    with pytest.raises(InvalidOperationError, match="streamId"):
        resolve_query_id(StreamOptions(WriteOptions(), str(tmp_path / "nothing")))


# --------------------------------------------------------------------------- Spark end to end

DRIVER = r"""
import json, os, sys

spec = json.loads(sys.argv[1])
sys.path.insert(0, spec["here"])
import conftest_spark as cs
os.environ[cs.DRIVER_PGID_ENV] = str(os.getpgid(0))  # inherited by the JVM and its workers
from pyspark.sql import SparkSession

from txn_engine.spark import register

builder = (
    SparkSession.builder.master(spec["master"])
    .appName("txn_lance-stream-driver")
    .config("spark.ui.enabled", "false")
    .config("spark.sql.shuffle.partitions", "2")
    .config("spark.driver.memory", "512m")
)
if spec["master"].startswith("spark://"):
    builder = builder.config("spark.executor.memory", "512m").config("spark.executor.cores", "1")
spark = builder.getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
register(spark)
cs.register_crashing_stream_source(spark)
out = {}
for job in spec["jobs"]:
    if job["kind"] == "streams":  # started together, then awaited (crash points + barrier)
        queries = []
        for stream in job["streams"]:
            frame = (
                spark.readStream.schema("id long, name string")
                .option("maxFilesPerTrigger", 1)
                .json(stream["source"])
                .repartition(2)
            )
            writer = frame.writeStream.format("txn_lance_crashing")
            for key in ("crash_at", "crash_flag", "crash_barrier", "crash_parties"):
                writer = writer.option(key, str(stream.get(key, "")))
            queries.append(
                writer.option("checkpointLocation", stream["checkpoint"])
                .option("max_rows_per_file", "40")
                .trigger(availableNow=True)
                .start(stream["uri"])
            )
        for query in queries:
            query.awaitTermination()
    elif job["kind"] == "stream":
        frame = (
            spark.readStream.schema("id long, name string")
            .option("maxFilesPerTrigger", 1)
            .json(job["source"])
            .repartition(2)
        )
        query = (
            frame.writeStream.format("txn_lance_crashing")
            .option("checkpointLocation", job["checkpoint"])
            .option("crash_at", job.get("crash_at", ""))
            .option("crash_flag", job.get("crash_flag", ""))
            .option("max_rows_per_file", "40")
            .trigger(availableNow=True)
            .start(job["uri"])
        )
        query.awaitTermination()
        out[job["uri"]] = {"query_id": str(query.id)}
    elif job["kind"] == "batch":
        for lo, hi, parts in ((0, 1000, 4), (1000, 1500, 2)):
            (
                spark.range(lo, hi, numPartitions=parts)
                .selectExpr("id", "concat('row-', cast(id as string)) as name")
                .write.format("txn_lance")
                .mode("append")
                .option("max_rows_per_file", "300")
                .save(job["uri"])
            )
    elif job["kind"] == "read":
        row = spark.read.format("txn_lance").load(job["uri"]).selectExpr(
            "count(*) as n", "sum(id) as s", "count(distinct id) as d"
        ).collect()[0]
        out["read:" + job["uri"]] = {"count": row.n, "sum": row.s, "distinct": row.d}
# executors that ran tasks (the driver's block manager is not one of them)
out["executors"] = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
with open(spec["result"], "w") as handle:
    json.dump(out, handle)
spark.stop()
"""

KILL_POINTS = ["before_tasks", "after_tasks", "after_commit", "after_checkpoint"]
FILES, ROWS_PER_FILE = 3, 50  # three micro-batches (one file each) of 50 rows


def make_source(directory: Path) -> None:
    directory.mkdir(parents=True)
    for i in range(FILES):
        write_source_file(directory, i)


def start_driver(work: Path, master: str, jobs: list[dict[str, Any]]) -> subprocess.Popen[bytes]:
    """A Spark application in a subprocess (its own process group, so a crash hook can
    kill the whole driver: JVM, Python driver and driver-side Python workers)."""
    work.mkdir(parents=True, exist_ok=True)
    script = work / "driver.py"
    script.write_text(DRIVER)
    spec = {"here": HERE, "master": master, "jobs": jobs, "result": str(work / "result.json")}
    log = (work / "driver.log").open("wb")
    return subprocess.Popen(
        [sys.executable, str(script), json.dumps(spec)],
        env=spark_cluster.cluster_env(work),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def finish(proc: subprocess.Popen[bytes], work: Path, *, killed: bool) -> dict[str, Any]:
    try:
        code = proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
    log = (work / "driver.log").read_text(errors="replace")[-3000:]
    if killed:
        assert code == -9, f"the driver was not killed (exit {code}):\n{log}"
        return {}
    assert code == 0, f"the driver failed (exit {code}):\n{log}"
    result: dict[str, Any] = json.loads((work / "result.json").read_text())
    return result


def stream_job(base: Path, point: str = "") -> dict[str, Any]:
    return {
        "kind": "stream",
        "source": str(base / "source"),
        "checkpoint": str(base / "checkpoint"),
        "uri": str(base / "t.lance"),
        "crash_at": point,
        "crash_flag": str(base / "crash.flag") if point else "",
    }


def other_commits(uri: str, count: int) -> None:
    storage = open_storage(uri)
    start = lance.dataset(uri).version
    for i in range(count):
        txn = Transaction(start + i, UpdateConfig(config_updates=UpdateMap({"other": str(i)})))
        commit(storage, txn)


def check_stream_table(base: Path) -> None:
    """Every source row exactly once, one version per micro-batch (each batch once, in
    order), recorded under the checkpoint's query id; nothing staged or unreferenced."""
    uri = str(base / "t.lance")
    assert all_ids(uri) == list(range(FILES * ROWS_PER_FILE))
    query_id = json.loads((base / "checkpoint" / "metadata").read_text())["id"]
    versions = stream_versions(uri)
    assert [(q, b) for _, q, b in versions] == [(query_id, str(b)) for b in range(FILES)]
    assert_clean(uri)


def crash_and_restart(
    tmp_path: Path,
    master: str,
    points: list[str],
    interleave: int,
    *,
    first_jobs: tuple[dict[str, Any], ...] = (),
    restart_jobs: tuple[dict[str, Any], ...] = (),
) -> dict[str, Any]:
    """Run one query per kill point, concurrently in one driver; each holds at its point
    until all are there, then the driver application is killed. Land ``interleave`` other
    commits on the after_commit table, restart every query on its checkpoint in one
    application, check each table. ``first_jobs`` run in the first driver before the
    queries start, ``restart_jobs`` in the second after they end; returns the second
    driver's results."""
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    streams = []
    for point in points:
        base = tmp_path / point
        make_source(base / "source")
        (base / "crash.flag").touch()
        streams.append(
            {**stream_job(base, point), "crash_barrier": str(barrier), "crash_parties": len(points)}
        )
    crash_run = tmp_path / "crash-run"
    finish(
        start_driver(crash_run, master, [*first_jobs, {"kind": "streams", "streams": streams}]),
        crash_run,
        killed=True,
    )
    for point in points:
        assert not (tmp_path / point / "crash.flag").exists()  # the kill point was reached
    assert len(os.listdir(barrier)) == len(points)  # all held at their points together
    landed = {"before_tasks": 1, "after_tasks": 1, "after_commit": 2, "after_checkpoint": 2}
    for point in points:
        base = tmp_path / point
        batches = [b for _, _, b in stream_versions(str(base / "t.lance"))]
        assert batches == [str(b) for b in range(landed[point])], point
        # Spark's checkpoint entry for batch 1 exists only past the checkpoint write
        assert (base / "checkpoint" / "commits" / "1").exists() == (point == "after_checkpoint")
    # the tasks of batch 1 had written (staged) files when the driver died after them
    assert os.listdir(tmp_path / "after_tasks" / "t.lance" / STAGING_DIR)
    other_commits(str(tmp_path / "after_commit" / "t.lance"), interleave)
    restart = tmp_path / "restart"
    streams = [stream_job(tmp_path / point) for point in points]
    jobs = [{"kind": "streams", "streams": streams}]
    jobs += [{"kind": "read", "uri": stream["uri"]} for stream in streams]
    jobs += restart_jobs
    result = finish(start_driver(restart, master, jobs), restart, killed=False)
    total = FILES * ROWS_PER_FILE
    for point in points:
        check_stream_table(tmp_path / point)
        read = result["read:" + str(tmp_path / point / "t.lance")]
        assert read == {"count": total, "sum": total * (total - 1) // 2, "distinct": total}
    return result


def test_driver_killed_at_each_step_of_a_micro_batch_local(tmp_path: Path) -> None:
    crash_and_restart(tmp_path, "local[2]", KILL_POINTS, interleave=500)


def write_source_file(directory: Path, index: int) -> None:
    lines = [
        json.dumps({"id": n, "name": f"row-{n}"})
        for n in range(index * ROWS_PER_FILE, (index + 1) * ROWS_PER_FILE)
    ]
    (directory / f"part-{index}.json").write_text("\n".join(lines) + "\n")


def run_stream(spark: Any, source: Path, checkpoint: Path, uri: str) -> str:
    """One availableNow run of a file-source query (one file per micro-batch, two tasks
    per batch) into ``txn_lance``; returns the query id."""
    query = (
        spark.readStream.schema("id long, name string")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
        .repartition(2)
        .writeStream.format("txn_lance")
        .option("checkpointLocation", str(checkpoint))
        .option("max_rows_per_file", "40")
        .trigger(availableNow=True)
        .start(uri)
    )
    query.awaitTermination()
    assert query.exception() is None
    return str(query.id)


@pytest.mark.spark_cluster
def test_stream_in_session_one_version_per_batch_then_restart(spark: Any, tmp_path: Path) -> None:
    """A query in the test's own session (local mode, and with executors on the cluster's
    two workers): three micro-batches, three versions, each source row once; a fourth
    file, and the query restarted on its checkpoint adds one version, no replays."""
    source, checkpoint = tmp_path / "source", tmp_path / "checkpoint"
    uri = str(tmp_path / "t.lance")
    make_source(source)
    query_id = run_stream(spark, source, checkpoint, uri)
    assert all_ids(uri) == list(range(FILES * ROWS_PER_FILE))
    assert stream_versions(uri) == [(v + 1, query_id, str(v)) for v in range(FILES)]
    write_source_file(source, FILES)
    assert run_stream(spark, source, checkpoint, uri) == query_id  # same query, restarted
    assert all_ids(uri) == list(range((FILES + 1) * ROWS_PER_FILE))
    assert stream_versions(uri) == [(v + 1, query_id, str(v)) for v in range(FILES + 1)]
    assert_clean(uri)


def test_driver_killed_at_each_step_of_a_micro_batch_on_a_standalone_cluster(
    tmp_path: Path, standalone: str
) -> None:
    """Executors on the cluster's two workers. The first driver writes a batch table
    (create, then append) and reads it, then runs one streaming query per kill point and
    is killed with all four held at their points; the second restarts every query on its
    checkpoint and reads everything back."""
    written = str(tmp_path / "batch.lance")
    result = crash_and_restart(
        tmp_path,
        standalone,
        KILL_POINTS,
        interleave=100,
        first_jobs=({"kind": "batch", "uri": written}, {"kind": "read", "uri": written}),
        restart_jobs=({"kind": "read", "uri": written},),
    )
    ds = lance.dataset(written)
    assert ds.version == 2
    assert all_ids(written) == list(range(1500))
    assert len(ds.get_fragments()) == 6  # one fragment per partition (4 + 2; 250 rows each)
    assert result["read:" + written] == {"count": 1500, "sum": 1500 * 1499 // 2, "distinct": 1500}
    assert result["executors"] == 2  # one executor on each worker


def test_abort_removes_the_batch_files_unless_it_landed(tmp_path: Path) -> None:
    """Spark aborts a micro-batch whose tasks failed: its files go, the table is unchanged;
    the abort of a batch that did land (the driver lost track) keeps what it references."""
    from txn_engine.spark._stream import TxnLanceStreamMessage, TxnLanceStreamWriter

    uri = str(tmp_path / "t.lance")
    run_batch(uri, 0, 0, 100)
    writer = TxnLanceStreamWriter(
        uri, SCHEMA, StreamOptions(WriteOptions(), stream_id=QUERY), QUERY
    )

    def task_messages(batch: int, lo: int, hi: int) -> list[Any]:
        key, frags = write_stream_task(
            uri,
            [rows(lo, hi)],
            schema=SCHEMA,
            options=WriteOptions(),
            query_id=QUERY,
            batch_id=batch,
        )
        return [TxnLanceStreamMessage(key, tuple(frags), QUERY, batch, 0, 0), None]

    before = set(os.listdir(os.path.join(uri, "data")))
    writer.abort(task_messages(1, 100, 200), 1)
    assert set(os.listdir(os.path.join(uri, "data"))) == before
    assert lance.dataset(uri).version == 1
    assert_clean(uri)
    with pytest.raises(Crash):
        run_batch(uri, 1, 100, 200, hook=crash_at("committed"))
    writer.abort(task_messages(1, 100, 200), 1)  # landed: its files stay, the replay's go
    assert all_ids(uri) == list(range(200))
    assert_clean(uri)
