"""One simulated run from a seed, and the checks of what it left behind.

:func:`simulate` draws everything from ``seed``: the run's shape (:class:`~._actors.Config`),
the faults, each process's clock skew, every latency, pause, crash and tie. It runs the
processes over the simulated store and checks:

* no acknowledged commit lost or duplicated: every row an acknowledged writer added is in
  the latest version exactly once (through whichever data file a compaction moved it to),
  unless it was a writer without a lease whose data file outlived the orphan retention
  (the contract for such writers; pylance's are like that);
* a refused commit added nothing; one with an unknown outcome is there at most once;
* every version kept is readable, and every file it references is there;
* a leased reader never found its version or one of its files gone;
* every call finished within its budget (virtual time, pauses of its process excepted);
* no process raised anything but txn_engine's typed errors.

Uuids are drawn from the seed while it runs, so a failing seed replays exactly
(:attr:`Result.digest`).
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import uuid
from collections import Counter
from collections.abc import Iterator

import attrs

from txn_engine.commit import commit
from txn_engine.dataset import Dataset
from txn_engine.errors import TxnEngineError
from txn_engine.format.naming import list_versions
from txn_engine.model import LanceField
from txn_engine.ops import Overwrite
from txn_engine.storage import MemoryStorage
from txn_engine.testing.sim._actors import Config, Context, Ledger, Record, programs
from txn_engine.testing.sim._sched import Scheduler
from txn_engine.testing.sim._store import Faults, SimStore, _Object
from txn_engine.transaction import Transaction

__all__ = ["Result", "simulate"]

_NS = 1_000_000_000
SCHEMA = (LanceField(0, -1, "id", "int64"),)
#: the longest a call may take, in virtual seconds, beside its process's pauses
CALL_BUDGET_S = 90.0


@attrs.frozen
class Result:
    """What one seed did and what the checks found (``violations`` empty: it held)."""

    seed: int
    config: Config
    violations: tuple[str, ...]
    digest: str
    steps: int
    requests: int
    calls: Counter[str]

    @property
    def ok(self) -> bool:
        return not self.violations


@contextlib.contextmanager
def _seeded_uuids(rng: random.Random) -> Iterator[None]:
    """``uuid.uuid4`` drawn from ``rng`` meanwhile (a run must replay exactly)."""
    original = uuid.uuid4
    uuid.uuid4 = lambda: uuid.UUID(int=rng.getrandbits(128), version=4)
    try:
        yield
    finally:
        uuid.uuid4 = original


def _faults(rng: random.Random) -> Faults:
    return Faults(
        pause=rng.choice((0.0, 0.01, 0.03)),
        crash=rng.choice((0.0, 0.0005, 0.002)),
        fail_before=rng.choice((0.0, 0.01, 0.03)),
        lost=rng.choice((0.0, 0.01, 0.03)),
        granularity_ns=rng.choice((1_000_000, _NS)),
        jitter_ns=rng.choice((0, 300_000_000)),
        store_skew_ns=rng.randint(-30, 30) * _NS,
    )


def simulate(seed: int, *, config: Config | None = None, faults: Faults | None = None) -> Result:
    """Run seed ``seed`` and check it; ``config`` (its shape) and ``faults`` are drawn from
    the seed unless given (a profile that aims at one hazard)."""
    rng = random.Random(seed)
    drawn_config, drawn_faults = Config.draw(rng), _faults(rng)
    config = config or drawn_config
    faults = faults or drawn_faults
    sched = Scheduler(random.Random(rng.getrandbits(64)))
    store = SimStore(f"sim://seed-{seed}", sched, random.Random(rng.getrandbits(64)), faults)
    ledger = Ledger()
    with _seeded_uuids(random.Random(rng.getrandbits(64))):
        _create(store)
        end_ns = int(config.duration_s * _NS)
        kinds = [*config.writers, *["cleaner"] * config.cleaners, *["tagger"] * config.taggers]
        kinds += ["reader"] * config.readers
        table = programs()
        for i, kind in enumerate(kinds):
            actor_rng = random.Random(rng.getrandbits(64))
            skew = rng.randint(-3600, 3600) * _NS

            def program(
                actor: object, kind: str = kind, actor_rng: random.Random = actor_rng
            ) -> None:
                ctx = Context(store, sched, actor, actor_rng, ledger, config, end_ns)  # type: ignore[arg-type]
                table[kind](ctx)  # type: ignore[operator]

            sched.spawn(f"{kind}-{i}", program, skew_ns=skew)
        try:
            sched.run()
        finally:
            sched.shutdown()
    violations = [
        f"{a.name} raised {type(a.error).__name__}: {a.error}" for a in sched.actors if a.error
    ]
    violations += _check(store, ledger, config)
    return Result(
        seed=seed,
        config=config,
        violations=tuple(violations),
        digest=_digest(store, ledger),
        steps=sched.steps,
        requests=store.requests,
        calls=Counter(f"{r.kind}:{r.outcome}" for r in ledger.records),
    )


def _create(store: SimStore) -> None:
    """Version 1 (created outside the simulation's faults: the table exists to begin with)."""
    snapshot = MemoryStorage()
    commit(snapshot, Transaction(0, Overwrite([], SCHEMA)), timestamp_ns=0)
    for name in snapshot.list("_versions"):
        store.objects[f"_versions/{name}"] = _as_object(snapshot.get(f"_versions/{name}"))


def _as_object(data: bytes) -> _Object:
    return _Object(data, 0)


def _copy(store: SimStore) -> MemoryStorage:
    """The store's objects in a plain memory store (the checks read it without faults)."""
    copy = MemoryStorage()
    for path, obj in store.objects.items():
        copy.put(path, obj.data)
    return copy


def _rows_of(data: bytes) -> list[int]:
    return [int(x) for x in data.decode().split(",") if x]


def _latest_rows(copy: MemoryStorage, violations: list[str]) -> Counter[int]:
    """The rows the latest version holds (a missing data file is a violation)."""
    latest = Dataset.open(copy)
    rows: Counter[int] = Counter()
    for frag in latest.fragments:
        path = f"data/{frag.files[0].path}"
        if not copy.exists(path):
            violations.append(f"latest version {latest.version} references missing {path}")
            continue
        rows.update(_rows_of(copy.get(path)))
    return rows


def _check_versions(copy: MemoryStorage, violations: list[str]) -> None:
    """Every kept version readable, every file it references present."""
    for entry in list_versions(copy):
        try:
            snapshot = Dataset.open(copy, version=entry.version)
        except TxnEngineError as exc:
            violations.append(f"kept version {entry.version} unreadable: {exc}")
            continue
        for frag in snapshot.fragments:
            path = f"data/{frag.files[0].path}"
            if not copy.exists(path):
                violations.append(f"kept version {entry.version} references missing {path}")


def _exempt(record: Record, config: Config) -> bool:
    """A writer without a lease whose data file lived longer than the orphan retention
    before its commit returned: cleanup was free to remove it (the documented contract)."""
    if record.kind != "unleased" or record.wrote_ns is None or record.ended_ns is None:
        return False
    return (record.ended_ns - record.wrote_ns) / _NS > config.retention_s


def _check(store: SimStore, ledger: Ledger, config: Config) -> list[str]:
    violations: list[str] = list(ledger.violations)
    copy = _copy(store)
    rows = _latest_rows(copy, violations)
    _check_versions(copy, violations)
    # a file an unleased writer kept past the retention may be gone: its contract
    exempt = {f for r in ledger.records if _exempt(r, config) for f in r.files}
    violations = [v for v in violations if not any(v.endswith(f) for f in exempt)]
    for record in ledger.records:
        added = record.rows
        if record.outcome == "acked":
            for row in sorted(added):
                if rows[row] == 0 and not _exempt(record, config):
                    violations.append(f"acknowledged row {row} of {record.actor} lost ({record})")
            extra = [r for r in (added | record.moved) if rows[r] > 1]
            if extra:
                violations.append(f"rows {sorted(extra)[:5]} of {record.actor} duplicated")
        elif record.outcome == "failed" and any(rows[r] for r in added):
            violations.append(f"refused commit of {record.actor} landed: {record}")
        elif any(rows[r] > 1 for r in added):
            violations.append(f"{record.outcome} commit of {record.actor} landed twice")
        if record.ended_ns is not None:
            took = (record.ended_ns - record.started_ns) / _NS - record.paused
            if took > CALL_BUDGET_S:
                violations.append(f"{record.actor} call took {took:.1f} s: {record}")
    for start, end, outcome in ledger.cleanups:
        if (end - start) / _NS > CALL_BUDGET_S * 2:
            violations.append(f"a cleanup took {(end - start) / _NS:.1f} s ({outcome})")
    return violations


def _digest(store: SimStore, ledger: Ledger) -> str:
    h = hashlib.sha256()
    for entry in store.log:
        h.update(repr(entry).encode())
    for record in ledger.records:
        h.update(repr((record.actor, record.kind, record.outcome, sorted(record.rows))).encode())
    return h.hexdigest()
