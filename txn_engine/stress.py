"""``txn-engine stress``: N writer processes committing to one dataset, then a verdict.

Every row carries a unique ``rid``. Each writer appends fragments of fresh rids, deletes
rows (of the shared seed fragment, so that concurrent deletes of one fragment rebase or
conflict, and of its own fragments), updates rows (delete + re-append the same rids with a
new value, one Update transaction) and upserts config keys, in a configurable mix. Writers
record every commit they were told landed. Afterwards:

* :func:`txn_engine.verify.verify` checks the whole history;
* the expected rid set (seed + acknowledged appends - acknowledged deletes) must equal the
  rids pylance 14 reads back, with no duplicates (when pylance is installed);
* every acknowledged transaction uuid must be in the history exactly once.

Data files are written with pylance (``lance.fragment.write_fragments``); without pylance
the run uses fragments whose files do not exist and verifies with txn_engine alone.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

import attrs

from txn_engine.errors import (
    CommitConflictError,
    CommitStateUnknownError,
    RetriesExhaustedError,
    TxnEngineError,
)
from txn_engine.retry import RetryPolicy

__all__ = ["DEFAULT_MIX", "StressReport", "run_stress"]

#: Operation mix (weights) used when none is given.
DEFAULT_MIX: Mapping[str, int] = {
    "append": 5,
    "delete": 2,
    "shared-delete": 2,
    "update": 1,
    "config": 1,
}
SEED_ROWS = 2000
ROWS_PER_APPEND = 20


def _pa() -> Any:
    import pyarrow as pa  # type: ignore[import-untyped]

    return pa


def _have_pylance() -> bool:
    try:
        import lance  # noqa: F401
    except ImportError:
        return False
    return True


def _schema() -> Any:
    pa = _pa()
    return pa.schema([pa.field("rid", pa.int64(), nullable=False), pa.field("val", pa.int64())])


def _write_fragment(uri: str, rids: Sequence[int], val: int, real: bool) -> Any:
    from txn_engine.model import DataFile, Fragment

    if not real:
        name = f"synthetic-{os.getpid()}-{rids[0]}-{random.getrandbits(32)}.lance"
        return Fragment(0, (DataFile(name, (0, 1), (0, 1), 2, 2, 1),), len(rids))
    import lance

    pa = _pa()
    table = pa.table(
        {"rid": pa.array(rids, pa.int64()), "val": pa.array([val] * len(rids))}, schema=_schema()
    )
    (meta,) = lance.fragment.write_fragments(
        table, uri, schema=_schema(), max_rows_per_file=len(rids) + 1
    )
    return Fragment.from_lance_json(meta.to_json())


@attrs.define
class _WriterStats:
    writer: int
    committed: int = 0
    failed: int = 0
    attempts: int = 0
    latencies: list[float] = attrs.field(factory=list)
    conflicts: Counter[str] = attrs.field(factory=Counter)
    exhausted: int = 0
    unknown: int = 0
    appended: list[int] = attrs.field(factory=list)
    deleted: list[int] = attrs.field(factory=list)
    uuids: list[str] = attrs.field(factory=list)
    errors: list[str] = attrs.field(factory=list)


def _fragment_by_path(manifest: Any, path: str) -> Any:
    for frag in reversed(manifest.fragments):
        if any(df.path == path for df in frag.files):
            return frag
    return None


def _writer_main(
    uri: str,
    writer: int,
    commits: int,
    mix: Mapping[str, int],
    fault_rate: float,
    max_attempts: int,
    real: bool,
    seed: int,
    progress: Any,
    out: Any,
) -> None:
    """One writer process (spawned): commits ``commits`` transactions, reports stats."""
    from pyroaring import BitMap, BitMap64

    from txn_engine.commit import commit
    from txn_engine.dataset import Dataset
    from txn_engine.format.deletion import read_deletion_vector, write_deletion_vector
    from txn_engine.model import Fragment
    from txn_engine.ops import Append, Delete, Update, UpdateConfig, UpdateMap
    from txn_engine.storage import open_storage
    from txn_engine.transaction import Transaction

    rng = random.Random(seed * 1000 + writer)
    storage = open_storage(uri)
    if fault_rate > 0:
        storage = _LossyStorage(storage, fault_rate, rng)
    stats = _WriterStats(writer)
    own: dict[str, tuple[int, int]] = {}  # data file path -> (first rid, rows)
    next_rid = (writer + 1) * 1_000_000_000
    kinds = list(mix)
    weights = [mix[k] for k in kinds]
    policy = RetryPolicy(max_attempts=max_attempts)

    def plan(kind: str, ds: Dataset) -> tuple[Transaction, list[int], list[int]] | None:
        nonlocal next_rid
        if kind == "append":
            rids = list(range(next_rid, next_rid + ROWS_PER_APPEND))
            next_rid += ROWS_PER_APPEND
            frag = _write_fragment(uri, rids, 0, real)
            own[frag.files[0].path] = (rids[0], len(rids))
            return Transaction(ds.version, Append((frag,))), rids, []
        if kind == "config":
            op = UpdateConfig(config_updates=UpdateMap({f"w{writer}": str(rng.random())}))
            return Transaction(ds.version, op), [], []
        if kind == "shared-delete":
            target: tuple[Any, int] | None = None
            frag_pb = ds.manifest.fragments[0] if len(ds.manifest.fragments) else None
            if frag_pb is not None and frag_pb.id == 0:
                target = (frag_pb, 0)
        else:
            candidates = [(p, v) for p, v in own.items() if v[0] >= 0]
            rng.shuffle(candidates)
            target = None
            for path, (first, _) in candidates:
                frag_pb = _fragment_by_path(ds.manifest, path)
                if frag_pb is not None:
                    target = (frag_pb, first)
                    break
        if target is None:
            return None
        frag_pb, first = target
        existing = (
            read_deletion_vector(storage, frag_pb.id, frag_pb.deletion_file)
            if frag_pb.HasField("deletion_file")
            else BitMap()
        )
        alive = [o for o in range(frag_pb.physical_rows) if o not in existing]
        if len(alive) < 2:
            return None
        chosen = BitMap(rng.sample(alive, min(len(alive) - 1, rng.randint(1, 3))))
        rids = [first + o for o in chosen]
        affected = BitMap64((frag_pb.id << 32) | o for o in chosen)
        dv = write_deletion_vector(storage, frag_pb.id, ds.version, existing | chosen)
        copy = type(frag_pb)()
        copy.CopyFrom(frag_pb)
        copy.deletion_file.CopyFrom(dv)
        updated = Fragment.from_proto(copy)
        if kind == "update":
            new = _write_fragment(uri, rids, rng.randint(1, 1 << 30), real)
            own[new.files[0].path] = (-1, 0)  # rids not contiguous: never a delete target
            op_u = Update(
                updated_fragments=(updated,), new_fragments=(new,), affected_rows=affected
            )
            # the same rids are deleted and re-added: the live set does not change
            return Transaction(ds.version, op_u), [], []
        return (
            Transaction(ds.version, Delete(updated_fragments=(updated,), affected_rows=affected)),
            [],
            rids,
        )

    done = 0
    while done < commits:
        kind = rng.choices(kinds, weights)[0]
        started = time.perf_counter()
        for _replan in range(5):
            try:
                ds = Dataset.open(storage)
                planned = plan(kind, ds)
                if planned is None:
                    kind = "append"
                    continue
                txn, added, removed = planned
                result = commit(storage, txn, retry_policy=policy, base=ds)
            except CommitConflictError as exc:
                rule = getattr(exc.conflicts[0], "rule", "") if exc.conflicts else ""
                label = f"{exc.operation}<-{exc.other_operation or 'rows'}"
                stats.conflicts[f"{label} ({rule})" if rule else label] += 1
                if exc.retryable:
                    continue
                stats.failed += 1
                break
            except RetriesExhaustedError:
                stats.exhausted += 1
                stats.failed += 1
                break
            except CommitStateUnknownError:
                stats.unknown += 1
                stats.failed += 1
                break
            except TxnEngineError as exc:
                stats.errors.append(f"{type(exc).__name__}: {exc}")
                stats.failed += 1
                break
            else:
                stats.committed += 1
                stats.attempts += result.attempts
                stats.latencies.append(time.perf_counter() - started)
                stats.appended.extend(added)
                stats.deleted.extend(removed)
                stats.uuids.append(result.transaction.uuid)
                break
        done += 1
        with progress.get_lock():
            progress.value += 1
    out.put(attrs.asdict(stats))


class _LossyStorage:
    """Loses the response of a ``_versions/`` create with probability ``rate`` (the write
    lands, the writer sees AmbiguousWriteError): exercises exactly-once settlement."""

    def __init__(self, inner: Any, rate: float, rng: random.Random) -> None:
        self._inner = inner
        self._rate = rate
        self._rng = rng

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    @property
    def uri(self) -> str:
        return str(self._inner.uri)

    def put_if_absent(self, path: str, data: bytes) -> None:
        from txn_engine.errors import AmbiguousWriteError

        self._inner.put_if_absent(path, data)
        if path.startswith("_versions/") and self._rng.random() < self._rate:
            raise AmbiguousWriteError(f"injected lost response for {path}")


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
    conflicts: Mapping[str, int]
    retries_exhausted: int
    state_unknown: int
    errors: tuple[str, ...]
    findings: tuple[str, ...]
    expected_rows: int
    txn_engine_rows: int | None
    pylance_rows: int | None

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def commits_per_second(self) -> float:
        return self.committed / self.seconds if self.seconds else 0.0

    def render(self) -> str:
        lines = [
            f"stress run on {self.uri}: {self.writers} writers x "
            f"{self.commits_requested // max(self.writers, 1)} commits",
            f"  committed        {self.committed} ({self.failed} not committed)",
            f"  throughput       {self.commits_per_second:.1f} commits/s over {self.seconds:.2f} s",
            f"  latency          p50 {self.latency_p50_ms:.1f} ms, "
            f"p99 {self.latency_p99_ms:.1f} ms",
            f"  attempts         {self.attempts} "
            f"({self.attempts / max(self.committed, 1):.2f} per commit)",
            f"  retries exhausted {self.retries_exhausted}; outcome unknown {self.state_unknown}",
            "  conflicts        "
            + (", ".join(f"{k}: {v}" for k, v in sorted(self.conflicts.items())) or "none"),
            f"  rows             expected {self.expected_rows}, txn_engine "
            f"{self.txn_engine_rows}, pylance "
            f"{'n/a (pylance not installed)' if self.pylance_rows is None else self.pylance_rows}",
        ]
        lines += [f"  error            {e}" for e in self.errors[:5]]
        if self.ok:
            lines.append("  verification     PASSED")
        else:
            lines.append(f"  verification     FAILED ({len(self.findings)} findings)")
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


def _create_seed(uri: str, real: bool) -> None:
    from txn_engine.commit import commit
    from txn_engine.errors import DatasetNotFoundError
    from txn_engine.format.io import latest_version
    from txn_engine.format.schema import arrow_to_lance_fields
    from txn_engine.ops import Overwrite
    from txn_engine.storage import open_storage
    from txn_engine.transaction import Transaction

    storage = open_storage(uri)
    try:
        latest_version(storage)
    except DatasetNotFoundError:
        pass
    else:
        raise TxnEngineError(f"{uri} already holds a dataset; stress needs a fresh location")
    frag = _write_fragment(uri, list(range(SEED_ROWS)), 0, real)
    commit(storage, Transaction(0, Overwrite((frag,), arrow_to_lance_fields(_schema()))))


def run_stress(
    uri: str,
    *,
    writers: int = 4,
    commits: int = 25,
    mix: Mapping[str, int] | None = None,
    fault_rate: float = 0.0,
    max_attempts: int = 20,
    seed: int = 0,
    progress: TextIO | None = sys.stderr,
) -> StressReport:
    """Run the stress workload on a fresh dataset at ``uri`` and verify the result."""
    from txn_engine.dataset import Dataset
    from txn_engine.verify import verify

    mix = dict(DEFAULT_MIX if mix is None else mix)
    unknown_kinds = set(mix) - set(DEFAULT_MIX)
    if unknown_kinds:
        raise ValueError(f"unknown operation kinds in mix: {sorted(unknown_kinds)}")
    real = _have_pylance()
    _create_seed(uri, real)
    ctx = mp.get_context("spawn")
    counter = ctx.Value("i", 0)
    queue = ctx.Queue()
    procs = [
        ctx.Process(
            target=_writer_main,
            args=(uri, w, commits, mix, fault_rate, max_attempts, real, seed, counter, queue),
        )
        for w in range(writers)
    ]
    started = time.perf_counter()
    for p in procs:
        p.start()
    total = writers * commits
    results: list[dict[str, Any]] = []
    while len(results) < writers:
        try:
            results.append(queue.get(timeout=0.5))
        except Exception:  # queue.Empty
            if not any(p.is_alive() for p in procs) and queue.empty():
                break
        if progress is not None:
            progress.write(f"\r  {counter.value}/{total} commits attempted")
            progress.flush()
    for p in procs:
        p.join(timeout=30)
    elapsed = time.perf_counter() - started
    if progress is not None:
        progress.write("\n")
    findings: list[str] = []
    if len(results) < writers:
        findings.append(f"{writers - len(results)} writer processes died without a report")
    appended = [r for s in results for r in s["appended"]]
    deleted = [r for s in results for r in s["deleted"]]
    expected = (set(range(SEED_ROWS)) | set(appended)) - set(deleted)
    report = verify(uri)
    findings += [str(f) for f in report.findings]
    ds = Dataset.open(uri)
    landed = set()
    for info in ds.versions():
        if info.uuid:
            landed.add(info.uuid)
    for s in results:
        for u in s["uuids"]:
            if u not in landed:
                findings.append(f"acknowledged transaction {u} is not in the history")
    te_rows = ds.count_rows()
    if te_rows != len(expected):
        findings.append(f"txn_engine counts {te_rows} live rows, expected {len(expected)}")
    pylance_rows = None
    if real:
        import lance

        table = lance.dataset(uri).to_table(columns=["rid"])
        rids = table.column("rid").to_pylist()
        pylance_rows = len(rids)
        if len(set(rids)) != len(rids):
            findings.append(f"pylance reads {len(rids) - len(set(rids))} duplicated rows")
        if set(rids) != expected:
            lost = len(expected - set(rids))
            extra = len(set(rids) - expected)
            findings.append(
                f"pylance rows differ from the expected set: {lost} lost, {extra} unexpected"
            )
    latencies = [x for s in results for x in s["latencies"]]
    conflicts: Counter[str] = Counter()
    for s in results:
        conflicts.update(s["conflicts"])
    return StressReport(
        uri=uri,
        writers=writers,
        commits_requested=total,
        committed=sum(s["committed"] for s in results),
        failed=sum(s["failed"] for s in results),
        seconds=elapsed,
        latency_p50_ms=1000 * _percentile(latencies, 0.5),
        latency_p99_ms=1000 * _percentile(latencies, 0.99),
        attempts=sum(s["attempts"] for s in results),
        conflicts=dict(conflicts),
        retries_exhausted=sum(s["exhausted"] for s in results),
        state_unknown=sum(s["unknown"] for s in results),
        errors=tuple(e for s in results for e in s["errors"]),
        findings=tuple(findings),
        expected_rows=len(expected),
        txn_engine_rows=te_rows,
        pylance_rows=pylance_rows,
    )
