"""A Spark standalone cluster on 127.0.0.1 for the integration tests: one master and two
workers started from the installed pyspark (``bin/spark-class``), each worker with one core,
so executors are separate JVMs with separate Python workers on "other machines".

``standalone_cluster()`` is a context manager yielding the master URL; the processes run in
a session of their own and are killed (with their executors) when it exits.
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
from collections.abc import Iterator
from pathlib import Path


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
