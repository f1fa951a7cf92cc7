"""Helpers the Spark integration tests ship to Spark's Python workers.

This module is imported by name inside executor and driver-side Python workers (the test
session puts ``tests/integration`` on ``PYTHONPATH`` before starting Spark), so everything
a task or a commit needs (barriers, fault-injecting storage) lives here rather than in the
test module, which workers cannot import.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from txn_engine.errors import AmbiguousWriteError, StorageError
from txn_engine.storage import LocalStorage
from txn_engine.storage.base import Storage, get_bounded

HERE = os.path.dirname(os.path.abspath(__file__))


# --------------------------------------------------------------------------- barriers


def gate(control_dir: str, *, timeout: float = 90.0):  # type: ignore[no-untyped-def]
    """A ``mapInArrow`` function that announces its task (``started-*`` file in
    ``control_dir``), waits until ``control_dir/go`` exists, then passes the rows through.

    Lets a test hold tasks after the write was planned (read version pinned) and before
    the driver commits, to interleave other writers deterministically.
    """

    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        open(os.path.join(control_dir, f"started-{uuid.uuid4().hex}"), "w").close()
        deadline = time.monotonic() + timeout
        while not os.path.exists(os.path.join(control_dir, "go")):
            if time.monotonic() > deadline:
                raise TimeoutError("the test never opened the gate")
            time.sleep(0.02)
        yield from batches

    return fn


def wait_started(
    control_dir: str, count: int, errors: list[BaseException], *, timeout: float = 90.0
) -> None:
    """Wait until ``count`` tasks wait at the gate; re-raise the first error a job
    thread reported meanwhile."""
    deadline = time.monotonic() + timeout
    while sum(n.startswith("started-") for n in os.listdir(control_dir)) < count:
        if errors:
            raise errors[0]
        if time.monotonic() > deadline:
            raise TimeoutError(f"fewer than {count} tasks reached the gate")
        time.sleep(0.02)


def open_gate(control_dir: str) -> None:
    open(os.path.join(control_dir, "go"), "w").close()


def fail_partition(partition: int, *, after_batches: int = 1, always: bool = True):  # type: ignore[no-untyped-def]
    """A ``mapInArrow`` function that raises in ``partition`` after passing
    ``after_batches`` batches through (in every attempt, or only in attempt 0)."""

    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        failing = ctx.partitionId() == partition and (always or ctx.attemptNumber() == 0)
        for i, batch in enumerate(batches):
            if failing and i >= after_batches:
                raise RuntimeError(f"injected failure in partition {partition}")
            yield batch
        if failing:
            raise RuntimeError(f"injected failure in partition {partition}")

    return fn


def small_batches(rows: int):  # type: ignore[no-untyped-def]
    """A ``mapInArrow`` function that re-chunks its input into batches of ``rows`` rows."""

    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for start in range(0, batch.num_rows, rows):
                yield batch.slice(start, rows)

    return fn


def collector_writer_failing_first_attempt(collector: Any, partition: int):  # type: ignore[no-untyped-def]
    """A ``mapInArrow`` function for the commit-hook API: writes the partition with
    ``collector`` and then, in attempt 0 of ``partition``, fails *after* its files exist
    (as if the executor was lost before reporting)."""
    write = collector.map_in_arrow()

    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        out = list(write(batches))
        if ctx.partitionId() == partition and ctx.attemptNumber() == 0:
            raise RuntimeError("injected failure after the fragments were written")
        yield from out

    return fn


# --------------------------------------------------------------------------- storage faults


class FaultyStorage:
    """LocalStorage with two one-shot faults, each armed by a flag file (one-shot across
    processes: whoever removes the flag file fires the fault).

    * ``lose_response_flag``: the next manifest create-if-absent (a commit) reaches the
      disk, then reports AmbiguousWriteError (a lost response), and the next
      ``outage_reads`` reads of that manifest fail too, so that the commit loop cannot
      settle the outcome and raises CommitStateUnknownError to the driver.
    * ``crash_after_marker_flag``: in attempt 0 of a Spark task, the first staging-marker
      write reaches the disk and then the Python worker exits hard (``os._exit``): a task
      lost after its data file was complete.
    * ``hold_dir`` (with ``hold_partition``, ``hold_after_markers``): in attempt 0 of that
      partition's task (in every attempt with ``hold_every_attempt``), once that many data
      files are complete and marked, the writer announces itself (``held-{pid}`` in
      ``hold_dir``) and holds, inside pylance's write, until its executor JVM is gone: for
      a test that kills the executor mid-write.
    """

    def __init__(self, root: str, options: Mapping[str, Any]) -> None:
        self._inner = LocalStorage(root)
        self._lose = options.get("lose_response_flag")
        self._crash = options.get("crash_after_marker_flag")
        self._outage: dict[str, int] = {}
        self._outage_reads = int(options.get("outage_reads", 3))
        self._hold_dir = options.get("hold_dir")
        self._hold_partition = int(options.get("hold_partition", 1))
        self._hold_after = int(options.get("hold_after_markers", 2))
        self._hold_every = str(options.get("hold_every_attempt", "")).lower() == "true"
        self._marked = 0

    @staticmethod
    def _fire(flag: str | None) -> bool:
        if not flag:
            return False
        try:
            os.remove(flag)
        except FileNotFoundError:
            return False
        return True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    @property
    def uri(self) -> str:
        return self._inner.uri

    def put_if_absent(self, path: str, data: bytes) -> None:
        self._inner.put_if_absent(path, data)
        if path.startswith("_versions/") and self._fire(self._lose):
            self._outage[path] = self._outage_reads
            raise AmbiguousWriteError(f"injected: the response to creating {path} was lost")

    def _read_fault(self, path: str) -> None:
        left = self._outage.get(path, 0)
        if left:
            self._outage[path] = left - 1
            raise StorageError(f"injected: reading {path} failed (outage)")

    def get(self, path: str) -> bytes:
        self._read_fault(path)
        return self._inner.get(path)

    def get_range(self, path: str, start: int, end: int) -> bytes:
        self._read_fault(path)
        return self._inner.get_range(path, start, end)

    def get_bounded(self, path: str, max_bytes: int) -> bytes:
        # the commit loop reads an ambiguous create back through get_bounded: the outage
        # must reach it too (the inner store's own get_bounded would bypass get/get_range)
        self._read_fault(path)
        return get_bounded(self._inner, path, max_bytes)

    def put(self, path: str, data: bytes) -> None:
        self._inner.put(path, data)
        if "~" in path and path.startswith("_txn_engine/spark/") and self._crash:
            from pyspark import TaskContext

            ctx = TaskContext.get()
            if ctx is not None and ctx.attemptNumber() == 0 and self._fire(self._crash):
                os._exit(17)
        if "~" in path and path.startswith("_txn_engine/spark/") and self._hold_dir:
            from pyspark import TaskContext

            ctx = TaskContext.get()
            if (
                ctx is not None
                and (ctx.attemptNumber() == 0 or self._hold_every)
                and ctx.partitionId() == self._hold_partition
            ):
                self._marked += 1
                if self._marked == self._hold_after:
                    _hold_until_executor_dies(self._hold_dir)


def _hold_until_executor_dies(control_dir: str, timeout: float = 120.0) -> None:
    import spark_cluster

    executor = spark_cluster.executor_jvm(os.getpid())
    open(os.path.join(control_dir, f"held-{os.getpid()}"), "w").close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(executor, 0)
        except ProcessLookupError:
            os._exit(1)  # orphaned: the executor is gone
        time.sleep(0.05)
    raise TimeoutError("nobody killed this executor")


def faulty_storage(uri: str, options: Mapping[str, Any]) -> Storage:
    """``storage_factory`` entry point: ``conftest_spark:faulty_storage``."""
    return FaultyStorage(uri, options)  # type: ignore[return-value]


# --------------------------------------------------------------------------- streaming crashes


#: Set by a test's driver script to its process group (pyspark's worker daemon moves the
#: Python workers into a group of their own, so a worker cannot use its own).
DRIVER_PGID_ENV = "TXN_LANCE_TEST_DRIVER_PGID"


def _kill_driver() -> None:
    """Kill the whole driver application at once (the test starts the driver script in a
    session of its own): JVM, driver Python process and driver-side Python workers."""
    import signal

    os.killpg(int(os.environ[DRIVER_PGID_ENV]), signal.SIGKILL)
    os._exit(137)  # this worker is in another group


def _fire_once(flag: str) -> bool:
    try:
        os.remove(flag)
    except FileNotFoundError:
        return False
    return True


def _crash(flag: str, barrier: str, parties: int, *, timeout: float = 300.0) -> None:
    """At a crash point: once per ``flag``. With a ``barrier`` directory, announce this
    point there and hold it until ``parties`` points (of concurrent queries in the same
    driver) are held, so one kill stops every query at its own point."""
    if not _fire_once(flag):
        return
    if barrier:
        open(os.path.join(barrier, flag.strip(os.sep).replace(os.sep, "_")), "w").close()
        deadline = time.monotonic() + timeout
        while len(os.listdir(barrier)) < parties and time.monotonic() < deadline:
            time.sleep(0.05)
    _kill_driver()


def _crashing_stream_source() -> type:
    """The ``txn_lance`` source with a crash point: options ``crash_at`` (``before_tasks``,
    ``after_tasks``, ``after_commit``, ``after_checkpoint``), ``crash_batch`` (the
    micro-batch, default 1), ``crash_flag`` (a file; the crash fires once, when it
    removes the file) and ``crash_barrier`` / ``crash_parties`` (see :func:`_crash`)."""
    from txn_engine.spark._datasource import TxnLanceDataSource
    from txn_engine.spark._stream import TxnLanceStreamWriter

    class CrashingStreamWriter(TxnLanceStreamWriter):
        crash_at = ""
        crash_flag = ""
        crash_barrier = ""
        crash_parties = 1
        crash_batch = 1
        batch = -1

        def commit(self, messages: list[Any], batchId: int) -> None:
            self.batch = batchId
            super().commit(messages, batchId)

        def _hook(self, stage: str) -> None:
            wanted = {"after_tasks": "tasks_done", "after_commit": "committed"}.get(self.crash_at)
            if stage == wanted and self.batch == self.crash_batch:
                _crash(self.crash_flag, self.crash_barrier, self.crash_parties)

    class CrashingStreamSource(TxnLanceDataSource):
        @classmethod
        def name(cls) -> str:
            return "txn_lance_crashing"

        def streamWriter(self, schema: Any, overwrite: bool) -> Any:
            options = dict(self.options)
            crash_at = options.pop("crash_at", "")
            flag = options.pop("crash_flag", "")
            batch = int(options.pop("crash_batch", "") or 1)
            barrier = options.pop("crash_barrier", "")
            parties = int(options.pop("crash_parties", "") or 1)
            checkpoint = options.get("checkpointlocation", options.get("checkpointLocation", ""))
            # Spark plans micro-batch N after writing offsets/N (and commits/N-1)
            if crash_at == "before_tasks" and _planned(checkpoint) == batch:
                _crash(flag, barrier, parties)
            if crash_at == "after_checkpoint" and os.path.exists(
                os.path.join(checkpoint, "commits", str(batch))
            ):
                _crash(flag, barrier, parties)
            self.options = options
            plain = super().streamWriter(schema, overwrite)
            writer = CrashingStreamWriter(plain.uri, plain.schema, plain.options, plain.query_id)
            writer.crash_at, writer.crash_flag, writer.crash_batch = crash_at, flag, batch
            writer.crash_barrier, writer.crash_parties = barrier, parties
            return writer

    return CrashingStreamSource


def _planned(checkpoint: str) -> int:
    offsets = os.path.join(checkpoint, "offsets")
    names = [int(n) for n in os.listdir(offsets) if n.isdigit()] if os.path.isdir(offsets) else []
    return max(names, default=-1)


def register_crashing_stream_source(spark: Any) -> None:
    spark.dataSource.register(_crashing_stream_source())
