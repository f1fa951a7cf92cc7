"""Real processes on local disk: 8 txn_engine writer processes (appends, deletes of their own
and of a shared fragment, updates, config updates, compactions; the stress workload of
``txn_engine.apps.stress``), some killed with SIGKILL at random points, while a pylance 14.0.2
writer appends, deletes, updates and compacts on the same dataset.

Afterwards: pylance reads every version; every version equals the fold of the writers'
journaled intents (killed writers' in-flight commits included whether or not they landed),
with pylance's versions touching only pylance's rows; every acknowledged commit is there
exactly once; pylance's own acknowledged rows are all there with their values; pylance
reads exactly the expected table; txn_engine's checker passes.

The same stress workload also runs on ``s3://`` (moto), with lost responses injected."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from pathlib import Path
from typing import Any

import emulators as emu  # the fixtures come from conftest.py
import lance
import pyarrow as pa

from txn_engine.apps.stress import (
    SEED_ROWS,
    WriterSpec,
    create_seed,
    run_stress,
    start_writers,
    verify_run,
)
from txn_engine.verify import verify

WRITERS = 8
OPERATIONS = 20
KILLED = 3
PYLANCE_RIDS = 5_000_000_000_000  # pylance's rows: rids from here on, never used by the others
MIX = (
    ("append", 4),
    ("delete", 2),
    ("shared-delete", 2),
    ("update", 2),
    ("config", 1),
    ("compact", 1),
)
SCHEMA = pa.schema([pa.field("rid", pa.int64(), nullable=False), pa.field("val", pa.int64())])


class PylanceWriter(threading.Thread):
    """Appends, deletes, updates and compacts through pylance; remembers what it was told
    landed (its rows only: nobody else touches them)."""

    def __init__(self, uri: str, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.uri = uri
        self.stop = stop
        self.rows: dict[int, int] = {}
        self.done: dict[str, int] = {}
        self.failed = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # reported by the test
            self.error = exc

    def _run(self) -> None:
        rng = random.Random(5)
        next_rid = PYLANCE_RIDS
        while not self.stop.is_set():
            kind = rng.choice(["append", "append", "delete", "update", "compact"])
            if kind != "append" and not self.rows:
                kind = "append"
            try:
                if kind == "append":
                    rids = list(range(next_rid, next_rid + 10))
                    next_rid += 10
                    table = pa.table({"rid": rids, "val": [0] * len(rids)}, schema=SCHEMA)
                    lance.write_dataset(table, self.uri, mode="append")
                    self.rows.update(dict.fromkeys(rids, 0))
                elif kind == "delete":
                    victim = rng.choice(sorted(self.rows))
                    lance.dataset(self.uri).delete(f"rid = {victim}")
                    del self.rows[victim]
                elif kind == "update":
                    victim = rng.choice(sorted(self.rows))
                    value = rng.randint(1, 1000)
                    lance.dataset(self.uri).update({"val": str(value)}, where=f"rid = {victim}")
                    self.rows[victim] = value
                else:
                    lance.dataset(self.uri).optimize.compact_files(target_rows_per_fragment=500)
                self.done[kind] = self.done.get(kind, 0) + 1
            except OSError:  # pylance gave up on a conflict: nothing was acknowledged
                self.failed += 1
            time.sleep(0.05)  # a busy writer, not a flood of versions


def test_eight_processes_some_killed_with_a_pylance_writer(tmp_path: Path) -> None:
    os.environ.setdefault("LANCE_LOG", "error")
    uri = str(tmp_path / "ds")
    journals = tmp_path / "journals"
    journals.mkdir()
    seed_path, _ = create_seed(uri, real=True)
    specs = [
        WriterSpec(
            uri=uri,
            writer=w,
            commits=OPERATIONS,
            journal_dir=str(journals),
            seed_path=seed_path,
            mix=MIX,
            seed=11,
            deadline=20.0,
            max_delay=0.25,  # a writer starved by pylance's commits must not sleep for minutes
        )
        for w in range(WRITERS)
    ]
    procs, progress, start = start_writers(specs)
    deadline = time.monotonic() + 60
    while any(p.is_alive() and progress[i] != -1 for i, p in enumerate(procs)):
        assert time.monotonic() < deadline, "writers did not start"
        time.sleep(0.05)
    stop = threading.Event()
    pylance = PylanceWriter(uri, stop)
    pylance.start()
    start.set()

    # kill some writers with SIGKILL at random points of their run
    rng = random.Random(3)
    victims = rng.sample(range(WRITERS), KILLED)
    for w in victims:
        target = rng.randint(1, OPERATIONS - 2)
        patience = time.monotonic() + 10
        while procs[w].is_alive() and progress[w] < target and time.monotonic() < patience:
            time.sleep(0.005)
        time.sleep(rng.uniform(0, 0.02))  # somewhere inside the next operation
        if procs[w].is_alive():
            os.kill(procs[w].pid, signal.SIGKILL)
    for p in procs:
        p.join(timeout=300)
    patience = time.monotonic() + 30  # let pylance make a few commits of each kind
    while sum(pylance.done.values()) < 12 and pylance.is_alive() and time.monotonic() < patience:
        time.sleep(0.05)
    stop.set()
    pylance.join(timeout=120)
    assert pylance.error is None, repr(pylance.error)
    survivors = [w for w in range(WRITERS) if w not in victims]
    assert all(procs[w].exitcode == 0 for w in survivors), [p.exitcode for p in procs]
    assert all(procs[w].exitcode == -signal.SIGKILL for w in victims if progress[w] < OPERATIONS)
    assert all((journals / f"w{w}.stats.json").exists() for w in survivors)

    # pylance reads every version
    versions = lance.dataset(uri).versions()
    for info in versions:
        table = lance.dataset(uri, version=info["version"]).to_table(columns=["rid"])
        rids = table.column("rid").to_pylist()
        assert len(rids) == len(set(rids)), f"v{info['version']}: a row is there twice"

    # every version is the fold of the journaled intents (pylance's versions: its rows only)
    findings, expected, checked, pylance_rows = verify_run(
        uri, journals, seed_path=seed_path, real=True, foreign=lambda rid: rid >= PYLANCE_RIDS
    )
    assert findings == [], findings
    assert expected is not None
    assert checked == len(versions)
    assert pylance_rows == len(expected.rows)
    # pylance's acknowledged rows are all there, with the values it last wrote
    mine = {r: v for r, v in expected.rows if r >= PYLANCE_RIDS}
    assert mine == pylance.rows
    assert sum(pylance.done.values()) >= 12
    assert pylance.done.get("append", 0) >= 1
    # the writers really ran, and were really killed mid-run
    assert sum(min(max(0, x), OPERATIONS) for x in progress) >= WRITERS * OPERATIONS // 2
    assert any(0 < progress[w] < OPERATIONS for w in victims)
    assert len(expected.rows) > SEED_ROWS // 2

    report = verify(uri, deep=True, data_files=True)
    assert report.ok, [str(f) for f in report.findings]
    assert report.live_rows == len(expected.rows)


# ---- the same workload on an object store ----------------------------------------------------


def test_stress_writer_processes_on_s3(moto_server: Any) -> None:
    """``txn-engine stress`` on ``s3://`` (moto): pylance-written data files, lost responses
    injected, every version checked against the journals, pylance reads the result. One
    storage option set in Lance's spelling serves the commits and pylance's data writers."""
    report = run_stress(
        moto_server.uri(emu.unique_name("stress")),
        writers=3,
        commits=8,
        fault_rate=0.2,
        fault_kinds=("lost_response", "spurious_exists"),
        storage_options=moto_server.lance_options(),  # one set, Lance's names, for both
        progress=None,
    )
    assert report.ok, report.render()
    assert report.committed == 24
    assert report.versions == 25
    assert report.pylance_rows == report.expected_rows == report.txn_engine_rows
