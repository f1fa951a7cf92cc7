"""Carriers hosted by the writers themselves, on a real object store (moto S3 through
obstore): writer processes in the default policy that contend host carriers
(``RetryPolicy.host_carrier``), the carriers converge on one beacon (the losers of one race
by a claim), every commit lands exactly once where its caller was told, pylance 14.0.2
reads every version, and the beacons and the claims come down when the processes exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import lance
import pyarrow as pa
import pytest

from txn_engine.contention.offers import CARRIER_KEY, HOSTS_DIR, carried_uuids
from txn_engine.dataset import Dataset
from txn_engine.format.io import read_transaction
from txn_engine.format.naming import VERSIONS_DIR, live_beacons
from txn_engine.storage import open_storage

from . import emulators as emu

pytestmark = pytest.mark.pylance

# one writer process: ``COMMITS`` Appends in the default policy (each from the latest
# version), one JSON line per commit, "done" once done; it exits when its stdin closes
_WRITER = """
import json, sys, uuid
from txn_engine import commit
from txn_engine.dataset import Dataset
from txn_engine.model import DataFile, Fragment
from txn_engine.ops import Append
from txn_engine.storage import open_storage
from txn_engine.transaction import Transaction

uri, opts, commits = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
storage = open_storage(uri, opts)
sys.stdin.readline()  # the start signal: every process is ready
for _ in range(commits):
    u = str(uuid.uuid4())
    frag = Fragment(0, (DataFile(f"{u}.lance", (0,), (0,), 2, 2),), 3)
    base = Dataset.open(storage)
    r = commit(storage, Transaction(base.version, Append([frag]), uuid=u), base=base)
    print(json.dumps({"uuid": u, "version": r.version, "carried": r.carried}), flush=True)
print("done", flush=True)
sys.stdin.readline()  # the parent looks at the beacons, then lets it exit
"""


def _beacons(storage: Any) -> list[tuple[int, str]]:
    return live_beacons(storage.uri, storage.list(VERSIONS_DIR))


def test_contending_writer_processes_host_one_carrier_and_take_it_down_on_exit(
    moto_server: Any, request: pytest.FixtureRequest
) -> None:
    # 25 ms per request, as on a store over a network (a lost race hosts a carrier only
    # when an attempt takes a network round trip: commit.HOST_MIN_ATTEMPT_SECONDS)
    proxy = emu.LoopbackProxy(moto_server.endpoint, delay=0.025)
    request.addfinalizer(proxy.stop)
    opts = {**moto_server.lance_options(), "aws_endpoint": proxy.endpoint}
    uri = moto_server.uri(emu.unique_name("hosted"))
    lance.write_dataset(pa.table({"a": pa.array([0], pa.int64())}), uri, storage_options=opts)
    storage = open_storage(uri, opts)
    n, commits = 4, 8
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, uri, json.dumps(opts), str(commits)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(n)
    ]
    try:
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        results: list[dict[str, Any]] = []
        for p in procs:
            assert p.stdout is not None
            for line in p.stdout:
                if line.strip() == "done":
                    break
                results.append(json.loads(line))
        assert len(results) == n * commits
        # the processes still run: their hosted carriers converge on one beacon (the others
        # step down within a listing of seeing it), which idles out after a few seconds
        deadline = time.monotonic() + 3
        while len(_beacons(storage)) > 1:
            assert time.monotonic() < deadline, f"{_beacons(storage)} carriers still run"
            time.sleep(0.05)
        latest = Dataset.open(storage).version
        by_carrier = [
            v
            for v in range(2, latest + 1)
            if CARRIER_KEY in read_transaction(storage, v).transaction_properties
        ]
        assert by_carrier, "no carrier was hosted: every writer raced"
        landed: dict[str, list[int]] = {}
        for v in range(2, latest + 1):
            for u in carried_uuids(read_transaction(storage, v)):
                landed.setdefault(u, []).append(v)
        for r in results:
            assert landed[r["uuid"]] == [r["version"]]  # exactly once, where it was told
            if r["version"] in by_carrier:
                assert r["carried"]
        ds = lance.dataset(uri, storage_options=opts)
        assert [v["version"] for v in ds.versions()] == list(range(1, latest + 1))
        assert ds.count_rows() == 1 + 3 * n * commits
    finally:
        for p in procs:
            if p.stdin is not None and not p.stdin.closed:
                p.stdin.close()  # exit: the hosted carriers take their beacons down
        for p in procs:
            p.wait(30)
    assert [p.returncode for p in procs] == [0] * n
    assert _beacons(storage) == []
    assert [name for name in storage.list(VERSIONS_DIR) if name.startswith(".")] == []
    # the carrier that won the claim for a version took its claim down too
    assert storage.list(HOSTS_DIR) == []
