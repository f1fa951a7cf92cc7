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

One writer process is :func:`run_writer` (:mod:`txn_engine.apps._stress_writer`, whose names
this module re-exports); :data:`COMMAND` is the ``txn-engine stress`` subcommand, which
``python -m txn_engine.apps.stress`` runs alone.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import attrs

from txn_engine.apps._command import (
    Command,
    number,
    option_item,
    parse_options,
    run_command_line,
    storage_option_arguments,
)
from txn_engine.apps._stress_writer import (
    DEFAULT_MIX,
    HOT_ROWS,
    KINDS,
    ROWS_PER_APPEND,
    SEED_ROWS,
    SHARED_CONFIG_KEY,
    WriterSpec,
    have_pylance,
    run_writer,
    stress_schema,
    write_rows,
)
from txn_engine.commit import commit
from txn_engine.contention.carrier import Carrier
from txn_engine.dataset import Dataset
from txn_engine.errors import (
    DatasetNotFoundError,
    InvalidOperationError,
    InvalidStorageArgumentError,
    TxnEngineError,
)
from txn_engine.format.io import latest_version
from txn_engine.format.schema import arrow_to_lance_fields
from txn_engine.ops import Overwrite
from txn_engine.redact import looks_secret, redact_text, redact_uri
from txn_engine.storage import open_storage
from txn_engine.storage.options import lance_options
from txn_engine.testing.fault_storage import FAULT_KINDS
from txn_engine.testing.journal import check_history, read_journals
from txn_engine.testing.model import Contents, LanceFileRows
from txn_engine.transaction import Transaction
from txn_engine.verify import verify

__all__ = [
    "COMMAND",
    "DEFAULT_MIX",
    "HOT_ROWS",
    "KINDS",
    "ROWS_PER_APPEND",
    "SEED_ROWS",
    "SHARED_CONFIG_KEY",
    "StressReport",
    "WriterSpec",
    "check_stress_options",
    "have_pylance",
    "run_stress",
    "run_writer",
    "verify_run",
    "write_rows",
]

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
    txn = Transaction(0, Overwrite((frag,), arrow_to_lance_fields(stress_schema())))
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
    :class:`~txn_engine.contention.carrier.Carrier` runs in this process for the whole run (the
    writers, in the default policy, wait for it once they have seen it; offers exist on
    object stores only); its failure is a finding.

    Every option is checked first (:func:`check_stress_options`), before the dataset is
    created. A run that committed nothing although commits were requested is a failure.
    """
    mix = dict(DEFAULT_MIX if mix is None else mix)
    if lance_storage_options is None:  # one option set: pylance takes the same (Lance's names)
        lance_storage_options = lance_options(str(uri), storage_options)
    like = WriterSpec(  # every writer's, but for its number, journal and seed file
        uri=uri,
        writer=0,
        commits=commits,
        journal_dir="",
        seed_path="",
        mix=tuple(mix.items()),
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
    _check_spec(like, writers)
    run = _Run(
        like=attrs.evolve(like, real=not synthetic and have_pylance()),
        writers=writers,
        storage_options=storage_options,
        lance_storage_options=lance_storage_options,
        progress=progress,
        keep_journals=keep_journals,
        carrier=carrier,
    )
    return run.report(run.execute())


def _check_spec(like: WriterSpec, writers: int) -> None:
    """:func:`check_stress_options` of a run of ``writers`` writers each like ``like``."""
    check_stress_options(
        like.uri,
        writers=writers,
        commits=like.commits,
        mix=dict(like.mix),
        fault_rate=like.fault_rate,
        fault_kinds=like.fault_kinds,
        latency=like.latency,
        max_attempts=like.max_attempts,
        deadline=like.deadline,
        max_delay=like.max_delay,
        replans=like.replans,
    )


@attrs.define
class _Outcome:
    """What a run leaves to report: the writers' stats, its verification's findings (more
    are added as the report is made) and what it counted."""

    stats: list[dict[str, Any]]
    seconds: float
    findings: list[str]
    expected: Contents | None
    versions: int
    pylance_rows: int | None
    carrier_versions: int | None


@attrs.frozen
class _Run:
    """One stress run, its options checked: :meth:`execute` it, then make its
    :meth:`report`."""

    like: WriterSpec  #: every writer's spec, but for its number, journal and seed file
    writers: int
    storage_options: Mapping[str, Any] | None
    lance_storage_options: Mapping[str, str] | None
    progress: TextIO | None
    keep_journals: str | os.PathLike[str] | None
    carrier: bool

    def execute(self) -> _Outcome:
        """Create the dataset, run the writers (beside a carrier when ``carrier``), verify
        the history from their journals (copied to ``keep_journals`` when given)."""
        uri, real = self.like.uri, self.like.real
        seed_path, _ = create_seed(
            uri,
            real=real,
            storage_options=self.storage_options,
            lance_storage_options=self.lance_storage_options,
        )
        journal_dir = tempfile.mkdtemp(prefix="txn-engine-stress-")
        try:
            specs = [
                attrs.evolve(self.like, writer=w, journal_dir=journal_dir, seed_path=seed_path)
                for w in range(self.writers)
            ]
            running = None
            if self.carrier:
                running = Carrier(uri, storage_options=self.storage_options).start()
            try:
                stats, seconds = _run_processes(specs, self.progress)
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
                storage_options=self.storage_options,
                lance_storage_options=self.lance_storage_options,
                progress=self.progress,
            )
            findings[:0] = findings_before
            if self.keep_journals is not None:
                shutil.copytree(journal_dir, self.keep_journals, dirs_exist_ok=True)
        finally:
            shutil.rmtree(journal_dir, ignore_errors=True)
        carried = None if running is None else len(running.versions)
        return _Outcome(stats, seconds, findings, expected, versions, pylance_rows, carried)

    def _check_outcome(self, outcome: _Outcome) -> int | None:
        """Add the findings about the run as a whole to ``outcome``'s (writers that died,
        nothing committed, txn_engine counting other rows than expected); return the rows
        txn_engine counts (None: it cannot)."""
        findings, stats = outcome.findings, outcome.stats
        writers, commits = self.writers, self.like.commits
        if len(stats) < writers:
            findings.insert(0, f"{writers - len(stats)} writer processes died without a report")
        committed = sum(s["committed"] for s in stats)
        if commits and not committed:  # nothing was exercised: never a pass
            findings.insert(0, f"no operation committed ({writers * commits} requested)")
        try:
            te_rows: int | None = Dataset.open(
                self.like.uri, storage_options=self.storage_options
            ).count_rows()
        except TxnEngineError as exc:
            findings.append(f"txn_engine cannot count rows: {exc}")
            te_rows = None
        expected = outcome.expected
        if expected is not None and te_rows is not None and te_rows != len(expected.rows):
            findings.append(f"txn_engine counts {te_rows} live rows, expected {len(expected.rows)}")
        return te_rows

    def report(self, outcome: _Outcome) -> StressReport:
        """The report of an executed run (its last checks added to ``outcome``'s findings),
        with no option value in any message."""
        te_rows = self._check_outcome(outcome)
        stats, expected = outcome.stats, outcome.expected
        latencies = [x for s in stats for x in s["latencies"]]
        # messages of any exception a writer hit end up in the report: no option value in them
        secrets = [
            v
            for options in (self.storage_options, self.lance_storage_options)
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
            uri=redact_uri(self.like.uri),
            writers=self.writers,
            commits_requested=self.writers * self.like.commits,
            committed=sum(s["committed"] for s in stats),
            failed=sum(s["failed"] for s in stats),
            seconds=outcome.seconds,
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
            findings=tuple(redact_text(f, secrets=secrets) for f in outcome.findings),
            versions=outcome.versions,
            expected_rows=None if expected is None else len(expected.rows),
            txn_engine_rows=te_rows,
            pylance_rows=outcome.pylance_rows,
            synthetic=not self.like.real,
            carrier_versions=outcome.carrier_versions,
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


# ---- the ``txn-engine stress`` command ---------------------------------------------------------


def _stress_uri(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty (it would be the current directory)")
    if text.startswith("memory://"):
        raise argparse.ArgumentTypeError("memory:// is private to one process; use a directory")
    return text


def _parse_mix(text: str | None) -> dict[str, int] | None:
    if not text:
        return None
    mix: dict[str, int] = {}
    for part in text.split(","):
        name, _, weight = part.partition("=")
        mix[name.strip()] = int(weight or 1)
    return mix


def _parse_faults(text: str) -> list[str]:
    if text.strip() == "all":
        return list(FAULT_KINDS)
    return [k.strip() for k in text.split(",") if k.strip()]


def _mix_argument(text: str) -> str:
    try:
        mix = _parse_mix(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"weights must be integers: {text!r}") from None
    unknown = sorted(set(mix or {}) - set(KINDS))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown kinds {unknown}; known: {', '.join(KINDS)}")
    if mix is not None and (any(w < 0 for w in mix.values()) or not any(mix.values())):
        raise argparse.ArgumentTypeError("weights must be >= 0, at least one positive")
    return text


def _faults_argument(text: str) -> str:
    unknown = sorted(set(_parse_faults(text)) - set(FAULT_KINDS))
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown fault kinds {unknown}; known: {', '.join(FAULT_KINDS)} or all"
        )
    return text


def _configure_stress(p: argparse.ArgumentParser) -> None:
    """The arguments of ``txn-engine stress``: the workload, then the commits' retries and
    the storage."""
    _workload_arguments(p)
    _retry_arguments(p)
    p.add_argument(
        "--synthetic", action="store_true", help="do not write data files (no pylance needed)"
    )
    p.add_argument(
        "--carrier",
        action="store_true",
        help="run a carrier beside the writers (txn-engine carry; object stores only)",
    )
    p.add_argument("--seed", type=int, default=0, help="random seed")
    storage_option_arguments(p)
    p.add_argument(
        "--lance-option",
        type=option_item,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a storage option for pylance only (default: the -o set), repeatable",
    )
    p.add_argument("--json", action="store_true", help="machine-readable report")


def _workload_arguments(p: argparse.ArgumentParser) -> None:
    """Where the stress run writes, how many writers commit what, and the faults injected."""
    p.add_argument(
        "uri",
        type=_stress_uri,
        help="where to create the dataset (a fresh local directory by default)",
    )
    p.add_argument("--writers", type=number(int, 1), default=4, help="writer processes (default 4)")
    p.add_argument(
        "--commits", type=number(int, 0), default=25, help="operations per writer (default 25)"
    )
    p.add_argument(
        "--mix",
        type=_mix_argument,
        default=None,
        help="operation weights, kinds: "
        + ", ".join(KINDS)
        + " (default "
        + ",".join(f"{k}={w}" for k, w in DEFAULT_MIX.items())
        + ")",
    )
    p.add_argument(
        "--fault-rate",
        type=number(float, 0.0, high=1.0),
        default=0.0,
        help="probability that a manifest create (or transaction-file write) suffers a fault",
    )
    p.add_argument(
        "--faults",
        type=_faults_argument,
        default="lost_response",
        help="comma-separated fault kinds to inject at --fault-rate, or 'all': "
        + ", ".join(FAULT_KINDS),
    )
    p.add_argument(
        "--latency",
        type=number(float, 0.0),
        default=0.0,
        help="added storage latency per call, in ms",
    )


def _retry_arguments(p: argparse.ArgumentParser) -> None:
    """How each commit retries, and how often a writer plans again after a conflict."""
    p.add_argument(
        "--max-attempts", type=number(int, 1), default=50, help="commit attempts per try"
    )
    p.add_argument(
        "--deadline",
        type=number(float, 0.0, open_low=True),
        default=None,
        help="seconds per commit (retries)",
    )
    p.add_argument(
        "--max-delay",
        type=number(float, 0.0),
        default=None,
        help="cap of one retry backoff sleep, seconds",
    )
    p.add_argument(
        "--replans",
        type=number(int, 0),
        default=5,
        help="re-plans after a retryable conflict (default 5)",
    )


def _run_stress_command(args: argparse.Namespace, out: TextIO) -> int:
    report = run_stress(
        args.uri,
        writers=args.writers,
        commits=args.commits,
        mix=_parse_mix(args.mix),
        fault_rate=args.fault_rate,
        fault_kinds=_parse_faults(args.faults),
        latency=args.latency / 1000.0,
        max_attempts=args.max_attempts,
        deadline=args.deadline,
        max_delay=args.max_delay,
        replans=args.replans,
        synthetic=args.synthetic,
        seed=args.seed,
        storage_options=parse_options(args.storage_option),
        lance_storage_options=parse_options(args.lance_option),
        progress=None if args.json else sys.stderr,
        carrier=args.carrier,
    )
    if args.json:
        json.dump(report.to_json(), out, indent=2)
        out.write("\n")
    else:
        out.write(report.render())
    return 0 if report.ok else 1


#: The ``txn-engine stress`` subcommand (:mod:`txn_engine.apps.cli` lists it).
COMMAND = Command(
    "stress",
    "run N concurrent writer processes on a new dataset, then verify it",
    _configure_stress,
    _run_stress_command,
)


if __name__ == "__main__":
    sys.exit(run_command_line({COMMAND.name: COMMAND}, ["stress", *sys.argv[1:]]))
