"""One writer process of a stress run (:mod:`txn_engine.apps.stress`): the operation kinds
and their default mix, the planner that picks each operation, and :func:`run_writer`, the
commit loop a spawned process runs.

Every row carries a unique ``rid`` and a ``val``; the seed fragment (version 1) holds the
rids ``0..SEED_ROWS-1``, which every writer knows; each writer appends fresh rids of its
own. Import the names from :mod:`txn_engine.apps.stress`, which re-exports them.
"""

from __future__ import annotations

import json
import os
import random
import time
import uuid as uuid_mod
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import attrs

from txn_engine.commit import commit
from txn_engine.dataset import Dataset
from txn_engine.errors import (
    CommitConflictError,
    CommitStateUnknownError,
    RetriesExhaustedError,
    StorageError,
    TxnEngineError,
)
from txn_engine.model import DataFile, Fragment
from txn_engine.ops import Append, Operation, UpdateConfig, UpdateMap
from txn_engine.retry import RetryBudget, RetryPolicy
from txn_engine.storage import open_storage
from txn_engine.testing.fault_storage import ChaosStorage
from txn_engine.testing.faults import SimulatedCrash
from txn_engine.testing.journal import Journal
from txn_engine.testing.model import AddRows, EditConfig, Effect, Row
from txn_engine.testing.planning import compaction, live_offsets, row_change
from txn_engine.transaction import Transaction

__all__ = [
    "DEFAULT_MIX",
    "HOT_ROWS",
    "KINDS",
    "ROWS_PER_APPEND",
    "SEED_ROWS",
    "SHARED_CONFIG_KEY",
    "WriterSpec",
    "have_pylance",
    "run_writer",
    "stress_schema",
    "write_rows",
]

#: Every operation kind a stress writer can commit.
KINDS: tuple[str, ...] = ("append", "delete", "shared-delete", "update", "config", "compact")
#: Operation mix (weights) used when none is given.
DEFAULT_MIX: Mapping[str, int] = MappingProxyType(
    {"append": 5, "delete": 2, "shared-delete": 2, "update": 2, "config": 1, "compact": 1}
)
SEED_ROWS = 1000
ROWS_PER_APPEND = 20
SHARED_CONFIG_KEY = "stress.shared"
#: Shared deletes and updates pick among the first live rows of the seed fragment.
HOT_ROWS = 100


def _pa() -> Any:
    import pyarrow as pa  # type: ignore[import-untyped]

    return pa


def have_pylance() -> bool:
    """Whether pylance can be imported (it writes the data files and reads the result)."""
    os.environ.setdefault("LANCE_LOG", "error")  # no "creating dataset" warnings
    try:
        import lance  # noqa: F401
    except ImportError:
        return False
    return True


def stress_schema() -> Any:
    """The pyarrow schema of every stress table: ``rid`` (int64, not null) and ``val``."""
    pa = _pa()
    return pa.schema([pa.field("rid", pa.int64(), nullable=False), pa.field("val", pa.int64())])


def write_rows(
    uri: str,
    rows: Sequence[Row],
    *,
    real: bool,
    lance_options: Mapping[str, str] | None = None,
) -> Any:
    """A new uncommitted fragment holding ``rows`` (a pylance-written data file when
    ``real``, with pylance ``lance_options``; else a synthetic file name that is never
    written)."""
    if not real:
        name = f"synthetic-{uuid_mod.uuid4().hex}.lance"
        return Fragment(0, (DataFile(name, (0, 1), (0, 1), 2, 2, 1),), len(rows))
    import lance

    pa = _pa()
    table = pa.table(
        {
            "rid": pa.array([r for r, _ in rows], pa.int64()),
            "val": pa.array([v for _, v in rows], pa.int64()),
        },
        schema=stress_schema(),
    )
    (meta,) = lance.fragment.write_fragments(
        table,
        uri,
        schema=stress_schema(),
        max_rows_per_file=len(rows) + 1,
        storage_options=dict(lance_options) if lance_options else None,
    )
    return Fragment.from_lance_json(meta.to_json())


# ---- one writer process ----------------------------------------------------------------------


@attrs.frozen
class WriterSpec:
    """Everything a writer process needs (picklable). ``journal_dir`` receives
    ``w{writer}.jsonl`` (the journal) and ``w{writer}.stats.json`` (written at the end)."""

    uri: str
    writer: int
    commits: int
    journal_dir: str
    seed_path: str
    mix: tuple[tuple[str, int], ...] = tuple(DEFAULT_MIX.items())
    real: bool = True
    fault_rate: float = 0.0
    fault_kinds: tuple[str, ...] = ("lost_response",)
    latency: float = 0.0
    max_attempts: int = 50
    deadline: float | None = None
    max_delay: float | None = None
    replans: int = 5
    seed: int = 0
    storage_options: tuple[tuple[str, Any], ...] = ()
    lance_storage_options: tuple[tuple[str, str], ...] = ()


@attrs.define
class _Stats:
    writer: int
    committed: int = 0
    failed: int = 0
    attempts: int = 0
    replans: int = 0
    latencies: list[float] = attrs.field(factory=list)
    conflicts: Counter[str] = attrs.field(factory=Counter)
    exhausted: int = 0
    unknown: int = 0
    crashed: int = 0
    storage_errors: int = 0
    injected: dict[str, int] = attrs.field(factory=dict)
    by_kind: Counter[str] = attrs.field(factory=Counter)
    errors: list[str] = attrs.field(factory=list)
    seconds: float = 0.0


def _conflict_label(exc: CommitConflictError) -> str:
    rule = getattr(exc.conflicts[0], "rule", "") if exc.conflicts else ""
    label = f"{exc.operation} after {exc.other_operation or 'rows'}"
    return f"{label} ({rule})" if rule else label


class _Planner:
    """The stress workload of one writer (see the module docstring)."""

    def __init__(self, spec: WriterSpec, storage: Any, rng: random.Random) -> None:
        self.spec = spec
        self.storage = storage
        self.rng = rng
        self.known: dict[str, tuple[Row, ...]] = {
            spec.seed_path: tuple((rid, 0) for rid in range(SEED_ROWS))
        }
        self.own: list[str] = []
        self.next_rid = (spec.writer + 1) * 1_000_000_000

    def _new_fragment(self, rows: Sequence[Row]) -> Any:
        return write_rows(
            self.spec.uri,
            rows,
            real=self.spec.real,
            lance_options=dict(self.spec.lance_storage_options) or None,
        )

    def _find(self, ds: Any, paths: Sequence[str]) -> list[Any]:
        wanted = set(paths)
        fragments = ds.manifest_pb.fragments
        return [pb for pb in fragments if len(pb.files) and pb.files[0].path in wanted]

    def plan(
        self, kind: str, ds: Dataset
    ) -> tuple[Operation, Effect, dict[str, tuple[Row, ...]]] | None:
        """``(operation, intended effect, new data files' rows)`` or None if impossible.
        The operations are built by :mod:`txn_engine.testing.planning`, as the Hypothesis
        machine's; only the choices (a seeded ``random.Random``) are the stress run's own."""
        rng = self.rng
        files: dict[str, tuple[Row, ...]] = {}

        def new_fragment(rows: Sequence[Row]) -> Any:
            frag = self._new_fragment(rows)
            files[frag.files[0].path] = tuple(rows)
            return frag

        if kind == "append":
            rows = tuple((self.next_rid + i, 0) for i in range(ROWS_PER_APPEND))
            self.next_rid += ROWS_PER_APPEND
            return Append((new_fragment(rows),)), AddRows(rows), files
        if kind == "config":
            key = SHARED_CONFIG_KEY if rng.random() < 0.3 else f"stress.w{self.spec.writer}"
            value = f"{self.spec.writer}.{rng.randrange(1 << 30)}"
            config = UpdateConfig(config_updates=UpdateMap({key: value}))
            return config, EditConfig(((key, value),)), files

        if kind == "compact":
            targets = self._find(ds, self.own)
            if len(targets) < 2:
                return None
            start = rng.randrange(len(targets) - 1)
            olds = targets[start : start + rng.randint(2, 4)]
            rewrite, no_change = compaction(
                self.storage, olds, lambda pb: self.known[pb.files[0].path], new_fragment
            )
            return rewrite, no_change, files

        # delete / shared-delete / update: some rows of one fragment whose rows are known
        if kind == "shared-delete" or (kind == "update" and rng.random() < 0.5):
            pool = [self.spec.seed_path]
        else:
            pool = list(self.own)
        candidates = self._find(ds, pool)
        if not candidates:
            return None
        pb = rng.choice(candidates)
        alive = live_offsets(self.storage, pb)
        if not alive:
            return None
        offsets = alive[:HOT_ROWS] if pb.files[0].path == self.spec.seed_path else alive
        # (the seed fragment is a hot spot: writers clash on its first rows)
        chosen = sorted(rng.sample(offsets, min(len(offsets), rng.randint(1, 3))))
        values = None if kind != "update" else [rng.randint(1, 1 << 30) for _ in chosen]
        op, effect = row_change(
            self.storage,
            ds.version,
            pb,
            self.known[pb.files[0].path],
            alive,
            chosen,
            new_values=values,
            new_fragment=new_fragment,
        )
        return op, effect, files

    def landed(self, files: Mapping[str, tuple[Row, ...]]) -> None:
        """Our commit landed: its new data files are ours to delete from / compact."""
        for path, rows in files.items():
            self.known[path] = rows
            self.own.append(path)


def run_writer(spec: WriterSpec, progress: Any = None, start: Any = None) -> None:
    """One writer process: ``spec.commits`` operations, journaled; stats written at the
    end. ``progress`` (a shared int array, one slot per writer, no lock: a writer killed
    with SIGKILL cannot leave a lock held) is set to -1 once warmed up, then counts finished
    operations; ``start`` (an Event) is awaited after warming up."""
    rng = random.Random(spec.seed * 1000 + spec.writer)
    storage, chaos = _writer_storage(spec, rng)
    stats = _Stats(spec.writer)
    writer = _Writer(spec, storage, chaos, _Planner(spec, storage, rng), stats)
    kinds = [k for k, _ in spec.mix]
    weights = [w for _, w in spec.mix]
    directory = Path(spec.journal_dir)
    _warm_up(spec, storage, progress, start)
    began = time.perf_counter()
    with Journal(directory / f"w{spec.writer}.jsonl") as journal:
        for i in range(spec.commits):
            writer.operation(rng.choices(kinds, weights)[0], journal)
            if progress is not None:
                progress[spec.writer] = i + 1
    stats.seconds = time.perf_counter() - began
    if chaos is not None:
        stats.injected = dict(chaos.injected)
    out = directory / f"w{spec.writer}.stats.json"
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(attrs.asdict(stats)))
    os.replace(tmp, out)


def _writer_storage(spec: WriterSpec, rng: random.Random) -> tuple[Any, ChaosStorage | None]:
    """The writer's storage, and the fault injector wrapped around it when ``spec`` asks
    for faults or latency (its random stream is drawn from ``rng``); else None."""
    storage: Any = open_storage(spec.uri, dict(spec.storage_options) or None)
    if spec.fault_rate <= 0 and spec.latency <= 0:
        return storage, None
    chaos = ChaosStorage(
        storage,
        rate=spec.fault_rate,
        kinds=spec.fault_kinds,
        latency=spec.latency,
        rng=random.Random(rng.random()),
    )
    return chaos, chaos


def _warm_up(spec: WriterSpec, storage: Any, progress: Any, start: Any) -> None:
    """Import pylance and open the dataset before the clock starts; then, given a
    ``start`` event, mark this writer waiting (-1 in ``progress``) and wait for it."""
    if spec.real:
        import lance  # noqa: F401  (warm up before the clock starts)
    Dataset.open(storage)
    if start is not None:
        if progress is not None:
            progress[spec.writer] = -1  # warmed up, waiting for the start
        start.wait()
        if progress is not None:
            progress[spec.writer] = 0


class _Writer:
    """The commit loop of one writer: plan an operation, journal its intent, commit it,
    journal and count the outcome (:meth:`operation`, once per operation)."""

    def __init__(
        self,
        spec: WriterSpec,
        storage: Any,
        chaos: ChaosStorage | None,
        planner: _Planner,
        stats: _Stats,
    ) -> None:
        self.storage = storage
        self.chaos = chaos
        self.planner = planner
        self.stats = stats
        self.policy = RetryPolicy(
            max_attempts=spec.max_attempts, deadline=spec.deadline, max_delay=spec.max_delay
        )
        # re-planning after a retryable conflict: up to ``replans`` more plans, at once (the
        # conflict is a fact of the history, not a lost race to back off from)
        self.replanning = RetryPolicy(
            max_attempts=spec.replans + 1, adaptive=False, initial_unit=0.0
        )

    def operation(self, kind: str, journal: Journal) -> None:
        """One operation of ``kind`` (an append when nothing of that kind can be planned),
        re-planned from a fresh read after a retryable conflict, within the budget."""
        started = time.perf_counter()
        plans = self.replanning.budget()
        while True:
            plans.start_attempt()
            try:
                ds = Dataset.open(self.storage)
                planned = self.planner.plan(kind, ds)
                if planned is None:  # e.g. nothing of its own left to delete
                    kind = "append"
                    planned = self.planner.plan(kind, ds)
            except TxnEngineError as exc:  # e.g. an injected read failure
                self.stats.errors.append(f"planning: {type(exc).__name__}: {exc}")
                self.stats.failed += 1
                return
            assert planned is not None
            if not self._commit(kind, ds, planned, journal, started, plans):
                return

    def _commit(
        self,
        kind: str,
        ds: Dataset,
        planned: tuple[Operation, Effect, dict[str, tuple[Row, ...]]],
        journal: Journal,
        started: float,
        plans: RetryBudget,
    ) -> bool:
        """Commit one plan made on ``ds``, journal and count its outcome; True when it is
        to be planned again (a retryable conflict, and ``plans`` has a plan left)."""
        op, effect, files = planned
        stats = self.stats
        txn = Transaction(ds.version, op)
        journal.intent(txn.uuid, effect, files)
        try:
            result = commit(self.storage, txn, retry_policy=self.policy, base=ds)
        except CommitConflictError as exc:
            journal.rejected(txn.uuid, "conflict")
            stats.conflicts[_conflict_label(exc)] += 1
            if exc.retryable and plans.wait():
                stats.replans += 1
                return True
            stats.failed += 1
        except RetriesExhaustedError:
            journal.rejected(txn.uuid, "retries exhausted")
            stats.exhausted += 1
            stats.failed += 1
        except CommitStateUnknownError:
            stats.unknown += 1  # may have landed: the journal intent covers it
            stats.failed += 1
        except SimulatedCrash:
            stats.crashed += 1  # "died" mid-commit: may have landed (crash after)
            stats.failed += 1
        except StorageError as exc:
            journal.rejected(txn.uuid, "storage error before the manifest")
            stats.storage_errors += 1
            stats.failed += 1
            if self.chaos is None:  # not injected: worth showing
                stats.errors.append(f"{type(exc).__name__}: {exc}")
        except TxnEngineError as exc:
            stats.errors.append(f"{type(exc).__name__}: {exc}")
            stats.failed += 1
        else:
            journal.ack(txn.uuid, result.version)
            self.planner.landed(files)
            stats.committed += 1
            stats.by_kind[kind] += 1
            stats.attempts += result.attempts
            stats.latencies.append(time.perf_counter() - started)
        return False
