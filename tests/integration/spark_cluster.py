"""A Spark standalone cluster on 127.0.0.1 for the integration tests: one master and two
workers started from the installed pyspark (``bin/spark-class``), each worker with one core,
so executors are separate JVMs with separate Python workers on "other machines".

``standalone_cluster()`` is a context manager yielding the master URL; the processes run in
a session of their own and are killed (with their executors) when it exits.

:class:`Sessions` holds the pytest process's one SparkSession (a driver JVM runs one
SparkContext at a time) and switches it between local mode and the cluster on demand; the
fixtures in ``conftest.py`` use it. :func:`executor_jvm` finds the executor JVM that runs
a given Python worker (to kill it mid-task).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: Local mode for the tests: two task slots, a failed task is tried up to 3 times.
LOCAL_MASTER = "local[2,3]"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


def cluster_env(work: Path) -> dict[str, str]:
    """The environment the cluster's JVMs (and their Python workers) run with."""
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ)
    paths = [here, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env.update(
        SPARK_HOME=spark_home(),
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join(dict.fromkeys(paths)),
        SPARK_DAEMON_MEMORY="256m",
        SPARK_WORKER_DIR=str(work / "worker"),
        SPARK_LOG_DIR=str(work / "logs"),
    )
    return env


def _wait_master(url: str, workers: int, timeout: float) -> None:
    """Wait until the master's JSON status says ALIVE with ``workers`` alive workers."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                last = json.loads(response.read().decode())
            if (
                isinstance(last, dict)
                and last.get("status") == "ALIVE"
                and int(last.get("aliveworkers", 0)) >= workers
            ):
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.5)
    raise TimeoutError(f"the Spark cluster did not come up ({url}: {str(last)[:300]})")


@contextlib.contextmanager
def standalone_cluster(work: Path, *, workers: int = 2, timeout: float = 180.0) -> Iterator[str]:
    """Start a master and ``workers`` workers (1 core, 1 GiB each) on 127.0.0.1; yield
    ``spark://127.0.0.1:<port>``; kill everything on exit."""
    work.mkdir(parents=True, exist_ok=True)
    env = cluster_env(work)
    spark_class = os.path.join(spark_home(), "bin", "spark-class")
    port, ui = _free_port(), _free_port()
    master = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []

    def start(args: list[str], log: str) -> None:
        with open(work / log, "wb") as out:
            procs.append(
                subprocess.Popen(
                    [spark_class, *args],
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )

    try:
        start(
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(ui),
            ],
            "master.log",
        )
        _wait_master(f"http://127.0.0.1:{ui}/json/", 0, timeout)
        for i in range(workers):
            start(
                [
                    "org.apache.spark.deploy.worker.Worker",
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    "1",
                    "--memory",
                    "1g",
                    "--webui-port",
                    str(_free_port()),
                    "--work-dir",
                    str(work / f"worker-{i}"),
                    master,
                ],
                f"worker-{i}.log",
            )
        _wait_master(f"http://127.0.0.1:{ui}/json/", workers, timeout)
        yield master
    finally:
        for proc in reversed(procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        for proc in procs:
            proc.wait(timeout=30)


# --------------------------------------------------------------------------- sessions


def prepare_driver_env() -> None:
    """The environment a SparkSession started in this process needs: this interpreter for
    every Python worker, loopback addresses, and ``tests/integration`` on ``PYTHONPATH``
    (Python workers import ``conftest_spark`` by name)."""
    here = os.path.dirname(os.path.abspath(__file__))
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    paths = [here, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))


def start_session(master: str) -> Any:
    """A SparkSession on ``master`` (``LOCAL_MASTER`` or a ``spark://`` URL) with the
    settings every test expects, and ``txn_lance`` registered."""
    prepare_driver_env()
    from pyspark.sql import SparkSession

    from txn_engine.spark import register

    builder = (
        SparkSession.builder.master(master)
        .appName("txn_engine-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "20000")
    )
    if master.startswith("spark://"):
        builder = (
            builder.config("spark.executor.memory", "512m")
            .config("spark.executor.cores", "1")
            .config("spark.task.maxFailures", "3")  # as LOCAL_MASTER's
        )
    with warnings.catch_warnings():
        # pylance warns in an at-fork hook; Spark forks to start its JVM gateway
        warnings.filterwarnings("ignore", "lance is not fork-safe", UserWarning)
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session


class Sessions:
    """The one SparkSession of this process, started lazily and switched between masters
    (stop, then start on the other master) when a test asks for another one."""

    def __init__(self) -> None:
        self.session: Any = None
        self.master: str | None = None
        self.started = 0  # sessions started (each switch costs one)

    def get(self, master: str) -> Any:
        if self.session is not None and self.master == master:
            return self.session
        self.stop()
        self.session = start_session(master)
        self.master = master
        self.started += 1
        return self.session

    def release(self, master: str) -> None:
        """Stop the session if it runs on ``master`` (before the cluster goes away, or
        so that an application started elsewhere gets the cluster's cores)."""
        if self.master == master:
            self.stop()

    def stop(self) -> None:
        if self.session is not None:
            session, self.session, self.master = self.session, None, None
            session.stop()


def executor_count(session: Any) -> int:
    """Executors registered with ``session``'s driver (the driver itself not counted)."""
    return int(session.sparkContext._jsc.sc().getExecutorMemoryStatus().size()) - 1


def executor_ids(session: Any) -> set[str]:
    """Ids of the executors registered with ``session``'s driver."""
    text = str(session.sparkContext._jsc.sc().getExecutorIds().toString())  # "List(0, 1)"
    inner = text[text.index("(") + 1 : text.rindex(")")]
    return {part.strip() for part in inner.split(",") if part.strip()}


def wait_executors(session: Any, count: int, timeout: float = 120.0) -> None:
    """Wait until ``count`` executors are registered (e.g. after one was killed and the
    master launched a replacement)."""
    deadline = time.monotonic() + timeout
    while executor_count(session) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"fewer than {count} executors after {timeout} s")
        time.sleep(0.2)


# --------------------------------------------------------------------------- processes


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as handle:
        # pid (comm) state ppid ...; comm may contain spaces and parentheses
        return int(handle.read().rsplit(")", 1)[1].split()[1])


def _cmdline(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as handle:
        return [part.decode(errors="replace") for part in handle.read().split(b"\0") if part]


def executor_jvm(pid: int) -> int:
    """The executor JVM (``CoarseGrainedExecutorBackend``) among the ancestors of process
    ``pid`` (a Python worker: forked by the executor's ``pyspark.daemon``, itself a child
    of the executor JVM). Linux only (reads ``/proc``)."""
    current = pid
    while current > 1:
        if any("CoarseGrainedExecutorBackend" in part for part in _cmdline(current)):
            return current
        current = _parent(current)
    raise LookupError(f"process {pid} does not run under a Spark executor")


def executor_id(pid: int) -> str:
    """The executor id in the command line of executor JVM ``pid``."""
    args = _cmdline(pid)
    return args[args.index("--executor-id") + 1]
