"""``txn-engine stress``: N writer processes committing to one dataset, then a verdict.

Every row carries a unique ``rid`` and a ``val``. Each writer process commits, in a
configurable mix (:data:`DEFAULT_MIX`):

* ``append``: a new fragment of fresh rids;
* ``delete``: some rows of one of its own fragments;
* ``shared-delete``: some of the first live rows of the seed fragment every writer knows
  (concurrent deletes of one fragment are rebased, or conflict when they hit the same
  rows, then are re-planned);
* ``update``: new values for some rows of the seed fragment or of its own (delete + the
  same rids re-added with new values, one Update transaction);
* ``config``: upserts its own config key, or the shared one (a concurrent upsert of the
  same key is an incompatible conflict);
* ``compact``: rewrites several of its own fragments into one (a Rewrite).

A retryable conflict is re-planned from a fresh read (up to ``replans`` times). Before each
commit the writer journals its intent (:mod:`txn_engine.testing.journal`), after it the
outcome. Afterwards the run is verified:

* :func:`txn_engine.verify.verify` checks the whole history;
* every version equals the fold of the journaled intents in version order (nothing lost,
  duplicated or resurrected), every acknowledged commit is there exactly once, no rejected
  one is, and the landed transactions fold to the same tables
  (:func:`txn_engine.testing.journal.check_history`);
* pylance 14 (when installed) reads the latest version: the same rows and values.

Data files are written with pylance (``lance.fragment.write_fragments``); without pylance
(or with ``synthetic=True``) fragments name files that are never written.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import shutil
import sys
import tempfile
import time
import uuid as uuid_mod
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import attrs

from txn_engine.carrier import Carrier
from txn_engine.commit import commit
from txn_engine.dataset import Dataset
from txn_engine.errors import (
    CommitConflictError,
    CommitStateUnknownError,
    DatasetNotFoundError,
    InvalidOperationError,
    InvalidStorageArgumentError,
    RetriesExhaustedError,
    StorageError,
    TxnEngineError,
)
from txn_engine.format.io import latest_version
from txn_engine.format.schema import arrow_to_lance_fields
from txn_engine.model import DataFile, Fragment
from txn_engine.ops import (
    Append,
    Operation,
    Overwrite,
    UpdateConfig,
    UpdateMap,
)
from txn_engine.redact import looks_secret, redact_text, redact_uri
from txn_engine.retry import RetryPolicy
from txn_engine.storage import open_storage
from txn_engine.storage.options import lance_options
from txn_engine.testing.fault_storage import FAULT_KINDS, ChaosStorage
from txn_engine.testing.faults import SimulatedCrash
from txn_engine.testing.journal import Journal, check_history, read_journals
from txn_engine.testing.model import (
    AddRows,
    Contents,
    EditConfig,
    Effect,
    LanceFileRows,
    Row,
)
from txn_engine.testing.planning import compaction, live_offsets, row_change
from txn_engine.transaction import Transaction
from txn_engine.verify import verify

__all__ = [
    "DEFAULT_MIX",
    "KINDS",
    "StressReport",
    "WriterSpec",
    "check_stress_options",
    "run_stress",
    "run_writer",
    "verify_run",
]

#: Every operation kind a stress writer can commit.
KINDS: tuple[str, ...] = ("append", "delete", "shared-delete", "update", "config", "compact")
#: Operation mix (weights) used when none is given.
DEFAULT_MIX: Mapping[str, int] = {
    "append": 5,
    "delete": 2,
    "shared-delete": 2,
    "update": 2,
    "config": 1,
    "compact": 1,
}
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


def _schema() -> Any:
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
        schema=_schema(),
    )
    (meta,) = lance.fragment.write_fragments(
        table,
        uri,
        schema=_schema(),
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
    storage: Any = open_storage(spec.uri, dict(spec.storage_options) or None)
    chaos: ChaosStorage | None = None
    if spec.fault_rate > 0 or spec.latency > 0:
        chaos = ChaosStorage(
            storage,
            rate=spec.fault_rate,
            kinds=spec.fault_kinds,
            latency=spec.latency,
            rng=random.Random(rng.random()),
        )
        storage = chaos
    planner = _Planner(spec, storage, rng)
    stats = _Stats(spec.writer)
    kinds = [k for k, _ in spec.mix]
    weights = [w for _, w in spec.mix]
    policy = RetryPolicy(
        max_attempts=spec.max_attempts, deadline=spec.deadline, max_delay=spec.max_delay
    )
    # re-planning after a retryable conflict: up to ``replans`` more plans, at once (the
    # conflict is a fact of the history, not a lost race to back off from)
    replanning = RetryPolicy(max_attempts=spec.replans + 1, adaptive=False, initial_unit=0.0)
    directory = Path(spec.journal_dir)
    if spec.real:
        import lance  # noqa: F401  (warm up before the clock starts)
    Dataset.open(storage)
    if start is not None:
        if progress is not None:
            progress[spec.writer] = -1  # warmed up, waiting for the start
        start.wait()
        if progress is not None:
            progress[spec.writer] = 0
    began = time.perf_counter()
    with Journal(directory / f"w{spec.writer}.jsonl") as journal:
        for i in range(spec.commits):
            kind = rng.choices(kinds, weights)[0]
            started = time.perf_counter()
            plans = replanning.budget()
            while True:
                plans.start_attempt()
                try:
                    ds = Dataset.open(storage)
                    planned = planner.plan(kind, ds)
                    if planned is None:  # e.g. nothing of its own left to delete
                        kind = "append"
                        planned = planner.plan(kind, ds)
                except TxnEngineError as exc:  # e.g. an injected read failure
                    stats.errors.append(f"planning: {type(exc).__name__}: {exc}")
                    stats.failed += 1
                    break
                assert planned is not None
                op, effect, files = planned
                txn = Transaction(ds.version, op)
                journal.intent(txn.uuid, effect, files)
                try:
                    result = commit(storage, txn, retry_policy=policy, base=ds)
                except CommitConflictError as exc:
                    journal.rejected(txn.uuid, "conflict")
                    stats.conflicts[_conflict_label(exc)] += 1
                    if exc.retryable and plans.wait():
                        stats.replans += 1
                        continue
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
                    if chaos is None:  # not injected: worth showing
                        stats.errors.append(f"{type(exc).__name__}: {exc}")
                except TxnEngineError as exc:
                    stats.errors.append(f"{type(exc).__name__}: {exc}")
                    stats.failed += 1
                else:
                    journal.ack(txn.uuid, result.version)
                    planner.landed(files)
                    stats.committed += 1
                    stats.by_kind[kind] += 1
                    stats.attempts += result.attempts
                    stats.latencies.append(time.perf_counter() - started)
                break
            if progress is not None:
                progress[spec.writer] = i + 1
    stats.seconds = time.perf_counter() - began
    if chaos is not None:
        stats.injected = dict(chaos.injected)
    out = directory / f"w{spec.writer}.stats.json"
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(attrs.asdict(stats)))
    os.replace(tmp, out)


# ---- the report ------------------------------------------------------------------------------


@attrs.frozen
class StressReport:
    """The outcome of a stress run; ``ok`` is the verification verdict."""

    uri: str
    writers: int
    commits_requested: int
    committed: int
    failed: int
    seconds: float
    latency_p50_ms: float
    latency_p99_ms: float
    attempts: int
    replans: int
    conflicts: Mapping[str, int]
    retries_exhausted: int
    state_unknown: int
    crashed: int
    storage_errors: int
    faults_injected: Mapping[str, int]
    by_kind: Mapping[str, int]
    errors: tuple[str, ...]
    findings: tuple[str, ...]
    versions: int
    expected_rows: int | None
    txn_engine_rows: int | None
    pylance_rows: int | None
    synthetic: bool = False
    #: versions created by the run's carrier (``carrier=True``), else None
    carrier_versions: int | None = None

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def commits_per_second(self) -> float:
        return self.committed / self.seconds if self.seconds else 0.0

    def render(self) -> str:
        """The human-readable report ``txn-engine stress`` prints."""

        def counts(mapping: Mapping[str, int]) -> str:
            items = sorted(mapping.items(), key=lambda kv: (-kv[1], kv[0]))
            return ", ".join(f"{k} {v}" for k, v in items) or "none"

        per_writer = self.commits_requested // max(self.writers, 1)
        lines = [
            f"stress run on {self.uri}: {self.writers} writers x {per_writer} operations",
            f"  committed          {self.committed} ({counts(self.by_kind)})",
            f"  not committed      {self.failed}",
            f"  throughput         {self.commits_per_second:.1f} commits/s "
            f"over {self.seconds:.2f} s",
            f"  commit latency     p50 {self.latency_p50_ms:.1f} ms, "
            f"p99 {self.latency_p99_ms:.1f} ms (plan to acknowledgement, re-plans included)",
            f"  attempts           {self.attempts} manifest writes "
            f"({self.attempts / max(self.committed, 1):.2f} per commit), "
            f"{self.replans} re-plans after retryable conflicts",
            f"  conflicts          {counts(self.conflicts)}",
            f"  retries exhausted  {self.retries_exhausted}",
            f"  outcome unknown    {self.state_unknown}; simulated crashes {self.crashed}; "
            f"storage errors {self.storage_errors}",
        ]
        if self.faults_injected:
            lines.append(f"  faults injected    {counts(self.faults_injected)}")
        if self.carrier_versions is not None:
            lines.append(f"  carrier            {self.carrier_versions} versions carrying offers")
        pylance = str(self.pylance_rows)
        if self.pylance_rows is None:
            pylance = "n/a (synthetic data files)" if self.synthetic else "n/a (not installed)"
        lines.append(
            f"  rows               expected {self.expected_rows}, txn_engine "
            f"{self.txn_engine_rows}, pylance {pylance} ({self.versions} versions checked)"
        )
        lines += [f"  error              {e}" for e in self.errors[:5]]
        if self.ok:
            lines.append("  verification       PASSED")
        else:
            lines.append(f"  verification       FAILED ({len(self.findings)} findings)")
            lines += [f"    - {f}" for f in self.findings[:20]]
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict[str, Any]:
        data = attrs.asdict(self)
        data["ok"] = self.ok
        data["commits_per_second"] = self.commits_per_second
        return data


def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# ---- running and verifying ---------------------------------------------------------------------


def create_seed(
    uri: str,
    *,
    real: bool,
    storage_options: Mapping[str, Any] | None = None,
    lance_storage_options: Mapping[str, str] | None = None,
) -> tuple[str, str]:
    """Create the dataset (version 1: the seed fragment of rids ``0..SEED_ROWS-1``); return
    ``(seed data file path, transaction uuid)``. Refuses an existing dataset."""
    storage = open_storage(uri, storage_options)
    try:
        latest_version(storage)
    except DatasetNotFoundError:
        pass
    else:
        raise TxnEngineError(f"{uri} already holds a dataset; stress needs a fresh location")
    frag = write_rows(
        uri,
        [(rid, 0) for rid in range(SEED_ROWS)],
        real=real,
        lance_options=lance_storage_options,
    )
    txn = Transaction(0, Overwrite((frag,), arrow_to_lance_fields(_schema())))
    commit(storage, txn)
    return frag.files[0].path, txn.uuid


def _local_root(uri: str) -> str | None:
    if "://" not in uri:
        return uri
    if uri.startswith("file://"):
        return uri[len("file://") :]
    return None


def verify_run(
    uri: str,
    journal_dir: str | os.PathLike[str],
    *,
    seed_path: str,
    real: bool,
    storage_options: Mapping[str, Any] | None = None,
    lance_storage_options: Mapping[str, str] | None = None,
    foreign: Any = None,
    progress: TextIO | None = None,
) -> tuple[list[str], Contents | None, int, int | None]:
    """Verify a run from its journals: ``(findings, expected contents, versions checked,
    pylance row count)``. ``foreign(rid)`` admits versions written by journal-less writers
    that only touch such rids (see :func:`txn_engine.testing.journal.check_history`).
    The history checks take time linear in the history. When ``progress`` is a terminal,
    a status line there tells how far they are (nothing is written to anything else)."""
    status = _StatusLine.on(progress)
    began = time.perf_counter()
    if status is not None:
        status.show("verifying: history invariants", force=True)
    storage = open_storage(uri, storage_options)
    summary = read_journals(sorted(Path(journal_dir).glob("w*.jsonl")))
    seed_rows = tuple((rid, 0) for rid in range(SEED_ROWS))
    summary.rows.register(seed_path, seed_rows)
    root = _local_root(uri)
    fallback = LanceFileRows(root) if real and root is not None else None
    findings = [str(f) for f in verify(storage, data_files=real and root is not None).errors]
    check = check_history(
        storage,
        summary,
        first_contents=Contents.of(seed_rows),
        fallback_rows=fallback,
        foreign=foreign,
        progress=None
        if status is None
        else lambda done, total: status.show(f"verifying: {done}/{total} version checks"),
    )
    findings += check.findings
    pylance_rows: int | None = None
    if real and have_pylance():
        import lance

        if status is not None:
            status.show("verifying: pylance reads the latest version", force=True)

        options = dict(lance_storage_options) if lance_storage_options else None
        table = lance.dataset(uri, storage_options=options).to_table(columns=["rid", "val"])
        pairs = list(
            zip(table.column("rid").to_pylist(), table.column("val").to_pylist(), strict=True)
        )
        pylance_rows = len(pairs)
        if check.expected is not None:
            read = Contents.of(
                ((int(r), int(v or 0)) for r, v in pairs), check.expected.config_dict
            )
            diff = check.expected.difference(read)
            if diff is not None:
                findings.append(f"pylance reads other rows than expected: {diff}")
    if status is not None:
        status.done(f"verified {check.versions} versions in {time.perf_counter() - began:.1f} s")
    return findings, check.expected, check.versions, pylance_rows


class _StatusLine:
    """One ``[stress]`` line rewritten in place on a terminal (at most 5 times a second)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.last = 0.0

    @classmethod
    def on(cls, out: TextIO | None) -> _StatusLine | None:
        """A status line on ``out`` when it is a terminal, else None (stay quiet)."""
        try:
            return cls(out) if out is not None and out.isatty() else None
        except (AttributeError, ValueError):  # no isatty, or a closed stream
            return None

    def show(self, text: str, *, force: bool = False) -> None:
        now = time.perf_counter()
        if force or now - self.last >= 0.2:
            self.out.write(f"\r\x1b[K[stress] {text}")
            self.out.flush()
            self.last = now

    def done(self, text: str) -> None:
        self.out.write(f"\r\x1b[K[stress] {text}\n")
        self.out.flush()


def check_stress_options(
    uri: str,
    *,
    writers: int = 4,
    commits: int = 25,
    mix: Mapping[str, int] | None = None,
    fault_rate: float = 0.0,
    fault_kinds: Sequence[str] = ("lost_response",),
    latency: float = 0.0,
    max_attempts: int = 50,
    deadline: float | None = None,
    max_delay: float | None = None,
    replans: int = 5,
) -> None:
    """Check :func:`run_stress`'s options, all of them, before anything touches storage.

    Raises InvalidStorageArgumentError for an empty or ``memory://`` URI and
    InvalidOperationError (a ValueError) naming the first bad option otherwise.
    """
    if not uri.strip():
        raise InvalidStorageArgumentError(
            "stress needs a dataset URI or directory (an empty one means the current one)"
        )
    if uri.startswith("memory://"):
        raise InvalidStorageArgumentError(
            "stress runs writer processes: memory:// is private to one process; use a "
            "directory or a shared store"
        )

    def bad(message: str) -> InvalidOperationError:
        return InvalidOperationError(f"stress: {message}")

    if writers < 1:
        raise bad(f"writers must be >= 1, got {writers}")
    if commits < 0:
        raise bad(f"commits must be >= 0, got {commits}")
    weights = dict(DEFAULT_MIX if mix is None else mix)
    unknown_kinds = set(weights) - set(KINDS)
    if unknown_kinds:
        raise bad(f"unknown operation kinds in mix: {sorted(unknown_kinds)}; known: {KINDS}")
    if any(w < 0 for w in weights.values()) or not any(w > 0 for w in weights.values()):
        raise bad("the operation mix needs non-negative weights, at least one positive")
    bad_faults = set(fault_kinds) - set(FAULT_KINDS)
    if bad_faults:
        raise bad(f"unknown fault kinds {sorted(bad_faults)}; known: {FAULT_KINDS}")
    if not 0.0 <= fault_rate <= 1.0:  # also refuses NaN
        raise bad(f"fault rate must be a probability in [0, 1], got {fault_rate}")
    if not latency >= 0.0:
        raise bad(f"latency must be >= 0, got {latency}")
    if max_attempts < 1:
        raise bad(f"max attempts must be >= 1, got {max_attempts}")
    if deadline is not None and not deadline > 0.0:
        raise bad(f"deadline must be > 0 seconds, got {deadline}")
    if max_delay is not None and not max_delay >= 0.0:
        raise bad(f"max delay must be >= 0 seconds, got {max_delay}")
    if replans < 0:
        raise bad(f"replans must be >= 0, got {replans}")


def run_stress(
    uri: str,
    *,
    writers: int = 4,
    commits: int = 25,
    mix: Mapping[str, int] | None = None,
    fault_rate: float = 0.0,
    fault_kinds: Sequence[str] = ("lost_response",),
    latency: float = 0.0,
    max_attempts: int = 50,
    deadline: float | None = None,
    max_delay: float | None = None,
    replans: int = 5,
    seed: int = 0,
    synthetic: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    lance_storage_options: Mapping[str, str] | None = None,
    progress: TextIO | None = sys.stderr,
    keep_journals: str | os.PathLike[str] | None = None,
    carrier: bool = False,
) -> StressReport:
    """Create a dataset at ``uri``, run ``writers`` processes of ``commits`` operations
    each, and verify the result (see the module docstring).

    ``fault_rate``/``fault_kinds``/``latency`` inject storage faults in the writers
    (:class:`~txn_engine.testing.fault_storage.ChaosStorage`); ``max_attempts``,
    ``deadline`` and ``max_delay`` (cap of one backoff sleep) form each commit's
    :class:`~txn_engine.retry.RetryPolicy` (default: the engine's); ``replans``
    bounds re-planning after retryable conflicts. ``storage_options`` (Lance's names, see
    ``docs/backends.md``) configure both txn_engine's storage and pylance's, which writes the
    data files and reads the result back; ``lance_storage_options`` overrides pylance's set.
    ``progress`` receives a live status line (None: quiet).
    ``keep_journals`` copies the writers' journals there. ``carrier``: a
    :class:`~txn_engine.carrier.Carrier` runs in this process for the whole run (the
    writers, in the default policy, wait for it once they have seen it; offers exist on
    object stores only); its failure is a finding.

    Every option is checked first (:func:`check_stress_options`), before the dataset is
    created. A run that committed nothing although commits were requested is a failure.
    """
    mix = dict(DEFAULT_MIX if mix is None else mix)
    if lance_storage_options is None:  # one option set: pylance takes the same (Lance's names)
        lance_storage_options = lance_options(str(uri), storage_options)
    check_stress_options(
        uri,
        writers=writers,
        commits=commits,
        mix=mix,
        fault_rate=fault_rate,
        fault_kinds=fault_kinds,
        latency=latency,
        max_attempts=max_attempts,
        deadline=deadline,
        max_delay=max_delay,
        replans=replans,
    )
    real = not synthetic and have_pylance()
    seed_path, _ = create_seed(
        uri,
        real=real,
        storage_options=storage_options,
        lance_storage_options=lance_storage_options,
    )
    journal_dir = tempfile.mkdtemp(prefix="txn-engine-stress-")
    try:
        specs = [
            WriterSpec(
                uri=uri,
                writer=w,
                commits=commits,
                journal_dir=journal_dir,
                seed_path=seed_path,
                mix=tuple(mix.items()),
                real=real,
                fault_rate=fault_rate,
                fault_kinds=tuple(fault_kinds),
                latency=latency,
                max_attempts=max_attempts,
                deadline=deadline,
                max_delay=max_delay,
                replans=replans,
                seed=seed,
                storage_options=tuple((storage_options or {}).items()),
                lance_storage_options=tuple((lance_storage_options or {}).items()),
            )
            for w in range(writers)
        ]
        running = Carrier(uri, storage_options=storage_options).start() if carrier else None
        try:
            stats, seconds = _run_processes(specs, progress)
        finally:
            if running is not None:
                running.close()
        findings_before = []
        if running is not None and running.error is not None:
            failure = running.error
            findings_before.append(f"the carrier failed: {type(failure).__name__}: {failure}")
        findings, expected, versions, pylance_rows = verify_run(
            uri,
            journal_dir,
            seed_path=seed_path,
            real=real,
            storage_options=storage_options,
            lance_storage_options=lance_storage_options,
            progress=progress,
        )
        findings[:0] = findings_before
        if keep_journals is not None:
            shutil.copytree(journal_dir, keep_journals, dirs_exist_ok=True)
    finally:
        shutil.rmtree(journal_dir, ignore_errors=True)
    if len(stats) < writers:
        findings.insert(0, f"{writers - len(stats)} writer processes died without a report")
    committed = sum(s["committed"] for s in stats)
    if commits and not committed:  # nothing was exercised: never a pass
        findings.insert(0, f"no operation committed ({writers * commits} requested)")
    try:
        te_rows: int | None = Dataset.open(uri, storage_options=storage_options).count_rows()
    except TxnEngineError as exc:
        findings.append(f"txn_engine cannot count rows: {exc}")
        te_rows = None
    if expected is not None and te_rows is not None and te_rows != len(expected.rows):
        findings.append(f"txn_engine counts {te_rows} live rows, expected {len(expected.rows)}")
    latencies = [x for s in stats for x in s["latencies"]]
    # messages of any exception a writer hit end up in the report: no option value in them
    secrets = [
        v
        for options in (storage_options, lance_storage_options)
        for k, v in (options or {}).items()
        if isinstance(v, str) and looks_secret(k)
    ]
    conflicts: Counter[str] = Counter()
    injected: Counter[str] = Counter()
    by_kind: Counter[str] = Counter()
    for s in stats:
        conflicts.update(s["conflicts"])
        injected.update(s["injected"])
        by_kind.update(s["by_kind"])
    return StressReport(
        uri=redact_uri(uri),
        writers=writers,
        commits_requested=writers * commits,
        committed=committed,
        failed=sum(s["failed"] for s in stats),
        seconds=seconds,
        latency_p50_ms=1000 * _percentile(latencies, 0.5),
        latency_p99_ms=1000 * _percentile(latencies, 0.99),
        attempts=sum(s["attempts"] for s in stats),
        replans=sum(s["replans"] for s in stats),
        conflicts=dict(conflicts),
        retries_exhausted=sum(s["exhausted"] for s in stats),
        state_unknown=sum(s["unknown"] for s in stats),
        crashed=sum(s["crashed"] for s in stats),
        storage_errors=sum(s["storage_errors"] for s in stats),
        faults_injected=dict(injected),
        by_kind=dict(by_kind),
        errors=tuple(redact_text(e, secrets=secrets) for s in stats for e in s["errors"]),
        findings=tuple(redact_text(f, secrets=secrets) for f in findings),
        versions=versions,
        expected_rows=None if expected is None else len(expected.rows),
        txn_engine_rows=te_rows,
        pylance_rows=pylance_rows,
        synthetic=not real,
        carrier_versions=None if running is None else len(running.versions),
    )


def start_writers(specs: Sequence[WriterSpec]) -> tuple[list[Any], Any, Any]:
    """Spawn one process per spec, warmed up and waiting; returns ``(processes, progress
    array, start event)``: set the event to let them go."""
    ctx = mp.get_context("spawn")
    progress = ctx.Array("i", len(specs), lock=False)
    start = ctx.Event()
    procs = [ctx.Process(target=run_writer, args=(spec, progress, start)) for spec in specs]
    for p in procs:
        p.start()
    return procs, progress, start


def _run_processes(
    specs: Sequence[WriterSpec], out: TextIO | None
) -> tuple[list[dict[str, Any]], float]:
    procs, progress, start = start_writers(specs)
    total = sum(s.commits for s in specs)
    tty = out is not None and out.isatty()
    # start the clock once every writer has imported its libraries and opened the dataset
    while any(p.is_alive() and progress[i] != -1 for i, p in enumerate(procs)):
        time.sleep(0.05)
    start.set()
    began = time.perf_counter()
    last_line = 0.0
    while any(p.is_alive() for p in procs):
        time.sleep(0.2)
        now = time.perf_counter()
        if out is not None and (tty or now - last_line >= 2.0):
            done = sum(max(0, x) for x in progress)
            line = (
                f"[stress] {done}/{total} operations, {now - began:.1f} s, "
                f"{done / max(now - began, 1e-9):.1f} ops/s"
            )
            out.write(f"\r{line}" if tty else line + "\n")
            out.flush()
            last_line = now
    for p in procs:
        p.join()
    # the slowest writer's own clock: from the common start to its last operation
    stats: list[dict[str, Any]] = []
    for spec in specs:
        path = Path(spec.journal_dir) / f"w{spec.writer}.stats.json"
        if path.exists():
            stats.append(json.loads(path.read_text()))
    seconds = max((s["seconds"] for s in stats), default=time.perf_counter() - began)
    if out is not None:
        done = sum(max(0, x) for x in progress)
        out.write(("\r" if tty else "") + f"[stress] {done}/{total} operations done\n")
        out.flush()
    return stats, seconds


if __name__ == "__main__":
    from txn_engine.apps.cli import main

    sys.exit(main(["stress", *sys.argv[1:]]))
