"""The simulated processes: writers of three kinds, a compactor, cleanups, a tagger, a reader.

Each runs txn_engine's own code (``commit``, ``replan_and_commit``, ``Lease``, ``cleanup``,
``create_tag``) against the simulated store with its own clocks, and reports what it was
told to the :class:`~txn_engine.testing.sim._world.Ledger`: which rows an acknowledged
commit added (or moved), which a refused one did not, what a leased reader found.

A data file's bytes are the row ids it holds (``ids,...``), so the checks can follow rows
through compactions without a real file format.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import random
from collections.abc import Iterable
from datetime import timedelta

import attrs

from txn_engine.commit import commit, replan_and_commit
from txn_engine.dataset import Dataset
from txn_engine.errors import CommitStateUnknownError, TxnEngineError
from txn_engine.format.naming import list_versions
from txn_engine.format.refs import create_tag, delete_tag, list_tags
from txn_engine.leases import Lease
from txn_engine.model import DataFile, Fragment
from txn_engine.ops import Append, Rewrite, RewriteGroup
from txn_engine.retention import cleanup
from txn_engine.retry import RetryPolicy
from txn_engine.testing.sim._sched import Actor, ActorClock, Scheduler
from txn_engine.testing.sim._store import SimStore
from txn_engine.transaction import Transaction

__all__ = ["Config", "Ledger", "Record", "programs"]

_NS = 1_000_000_000


@attrs.frozen
class Config:
    """What one run simulates (drawn from its seed by :func:`Config.draw`)."""

    duration_s: float
    writers: tuple[str, ...]  # "raw" | "api" | "unleased" | "compactor"
    cleaners: int
    taggers: int
    readers: int
    lease_ttl: float
    retention_s: float

    @classmethod
    def draw(cls, rng: random.Random) -> Config:
        kinds = ("raw", "api", "unleased", "compactor")
        return cls(
            duration_s=rng.uniform(20, 45),
            writers=tuple(rng.choice(kinds) for _ in range(rng.randint(2, 4))),
            cleaners=rng.randint(1, 2),
            taggers=rng.randint(0, 1),
            readers=rng.randint(0, 1),
            lease_ttl=rng.choice((3.0, 5.0, 8.0)),
            retention_s=rng.choice((0.0, 0.0, 3.0, 6.0)),
        )


@attrs.define
class Record:
    """One call of a writer: what it wrote and what it was told."""

    actor: str
    kind: str
    started_ns: int
    rows: frozenset[int] = frozenset()
    #: rows a compaction moved (acknowledged: they must still be there once)
    moved: frozenset[int] = frozenset()
    #: the data files it wrote
    files: list[str] = attrs.field(factory=list)
    wrote_ns: int | None = None
    ended_ns: int | None = None
    outcome: str = "open"  # "acked" | "failed" | "unknown" | "crashed" | "open"
    error: str = ""
    paused: float = 0.0
    version: int | None = None


@attrs.define
class Ledger:
    """What the processes were told, for the checks."""

    records: list[Record] = attrs.field(factory=list)
    #: data file path -> the rows it holds (as written)
    files: dict[str, frozenset[int]] = attrs.field(factory=dict)
    violations: list[str] = attrs.field(factory=list)
    cleanups: list[tuple[int, int, str]] = attrs.field(factory=list)  # (start, end, outcome)
    next_row: int = 0

    def new_rows(self, n: int) -> frozenset[int]:
        rows = frozenset(range(self.next_row, self.next_row + n))
        self.next_row += n
        return rows


@attrs.frozen
class Context:
    """What a program needs: the store, its clocks, the ledger, the run's settings."""

    store: SimStore
    sched: Scheduler
    actor: Actor
    rng: random.Random
    ledger: Ledger
    config: Config
    end_ns: int

    @property
    def clock(self) -> ActorClock:
        return ActorClock(self.sched, self.actor)

    def running(self) -> bool:
        return self.sched.now_ns < self.end_ns

    def policy(self) -> RetryPolicy:
        clock = self.clock
        return RetryPolicy(
            max_attempts=30,
            deadline=20.0,
            clock=clock.monotonic,
            sleep=clock.sleep,
            randbelow=self.rng.randrange,
        )

    def data_file(self, rows: Iterable[int], record: Record) -> Fragment:
        """Write a data file holding ``rows`` for ``record``; the fragment naming it."""
        held = frozenset(rows)
        name = f"{self.rng.getrandbits(64):016x}.lance"
        record.files.append(f"data/{name}")
        self.ledger.files[f"data/{name}"] = held
        self.store.put(f"data/{name}", ",".join(map(str, sorted(held))).encode())
        return Fragment(0, (DataFile(name, (0,), (0,), 2, 2, 8),), len(held))

    def lease(self, writes: bool = True) -> Lease:
        return Lease(
            self.store, None, ttl=self.config.lease_ttl, owner=self.actor.name, writes=writes,
            renew_in_background=False, wait=1.0, clock=self.clock,
        )  # fmt: skip

    def idle(self, low: float = 0.0, high: float = 1.0) -> None:
        self.clock.sleep(self.rng.uniform(low, high))


def _settle(ctx: Context, record: Record, outcome: str, error: BaseException | None = None) -> None:
    record.outcome = outcome
    record.error = "" if error is None else f"{type(error).__name__}: {error}"[:200]
    record.ended_ns = ctx.sched.now_ns
    record.paused = ctx.actor.paused - record.paused


def _call(ctx: Context, kind: str, body: object) -> None:
    """Run one writer call ``body(record)``, settling its record from what it raised."""
    record = Record(ctx.actor.name, kind, ctx.sched.now_ns, paused=ctx.actor.paused)
    ctx.ledger.records.append(record)
    try:
        body(record)  # type: ignore[operator]
    except CommitStateUnknownError as exc:
        _settle(ctx, record, "unknown", exc)
    except TxnEngineError as exc:
        _settle(ctx, record, "failed", exc)
    else:
        _settle(ctx, record, "acked")


def raw_writer(ctx: Context) -> None:
    """Lease, write a data file, ``commit(..., lease=)``, release."""
    while ctx.running():

        def body(record: Record) -> None:
            held = ctx.lease()
            try:
                record.rows = ctx.ledger.new_rows(ctx.rng.randint(1, 3))
                frag = ctx.data_file(record.rows, record)
                record.wrote_ns = ctx.sched.now_ns
                txn = Transaction(held.version, Append([frag]))
                result = commit(
                    ctx.store, txn, lease=held, retry_policy=ctx.policy(),
                    timestamp_ns=ctx.clock.wall_ns(),
                )  # fmt: skip
                record.version = result.version
            finally:
                with contextlib.suppress(TxnEngineError):  # it expires
                    held.release()

        _call(ctx, "raw", body)
        ctx.idle()


def api_writer(ctx: Context) -> None:
    """``replan_and_commit`` with a lease per plan, as the writer API calls it."""
    while ctx.running():

        def body(record: Record) -> None:
            def plan(snapshot: Dataset) -> Transaction:
                record.rows = ctx.ledger.new_rows(ctx.rng.randint(1, 3))
                frag = ctx.data_file(record.rows, record)
                record.wrote_ns = ctx.sched.now_ns
                return Transaction(snapshot.version, Append([frag]))

            result = replan_and_commit(
                ctx.store, plan, retry_policy=ctx.policy(), commit_retry_policy=ctx.policy(),
                lease_ttl=ctx.config.lease_ttl, lease_owner=ctx.actor.name,
                lease_clock=ctx.clock, timestamp_ns=ctx.clock.wall_ns(),
            )  # fmt: skip
            record.version = result.version

        _call(ctx, "api", body)
        ctx.idle()


def unleased_writer(ctx: Context) -> None:
    """No lease: protected only by the orphan retention (as pylance's writers are)."""
    while ctx.running():

        def body(record: Record) -> None:
            read = Dataset.open(ctx.store).version
            record.rows = ctx.ledger.new_rows(ctx.rng.randint(1, 3))
            frag = ctx.data_file(record.rows, record)
            record.wrote_ns = ctx.sched.now_ns
            result = commit(
                ctx.store, Transaction(read, Append([frag])), retry_policy=ctx.policy(),
                timestamp_ns=ctx.clock.wall_ns(),
            )  # fmt: skip
            record.version = result.version

        _call(ctx, "unleased", body)
        ctx.idle()


def compactor(ctx: Context) -> None:
    """Lease, rewrite up to three fragments into one data file, commit the Rewrite."""
    while ctx.running():

        def body(record: Record) -> None:
            held = ctx.lease()
            try:
                snapshot = Dataset.open(ctx.store, version=held.version)
                olds = list(snapshot.fragments)[: ctx.rng.randint(2, 3)]
                if len(olds) < 2:
                    return
                rows = frozenset().union(
                    *(ctx.ledger.files.get(f"data/{f.files[0].path}", frozenset()) for f in olds)
                )
                record.moved = rows
                new = ctx.data_file(rows, record)
                record.wrote_ns = ctx.sched.now_ns
                txn = Transaction(held.version, Rewrite([RewriteGroup(olds, [new])]))
                result = commit(
                    ctx.store, txn, lease=held, retry_policy=ctx.policy(),
                    timestamp_ns=ctx.clock.wall_ns(),
                )  # fmt: skip
                record.version = result.version
            finally:
                with contextlib.suppress(TxnEngineError):
                    held.release()

        _call(ctx, "compactor", body)
        ctx.idle(0.5, 3.0)


def cleaner(ctx: Context) -> None:
    """txn_engine's cleanup in a loop, with short retentions."""
    while ctx.running():
        start = ctx.sched.now_ns
        try:
            cleanup(
                ctx.store,
                older_than=timedelta(seconds=ctx.rng.choice((0, 0, 1, 3))),
                keep_versions=ctx.rng.randint(1, 3),
                retention_orphans=timedelta(seconds=ctx.config.retention_s),
                progress=False,
                workers=1,
                clock=ctx.clock,
                wait_for_writers=timedelta(seconds=ctx.rng.choice((0, 0.5, 2))),
            )
            outcome = "ok"
        except TxnEngineError as exc:
            outcome = type(exc).__name__
        ctx.ledger.cleanups.append((start, ctx.sched.now_ns, outcome))
        ctx.idle(0.2, 3.0)


def tagger(ctx: Context) -> None:
    """Tags a version now and then (cleanup keeps it), and deletes a tag."""
    count = 0
    while ctx.running():
        try:
            versions = [e.version for e in list_versions(ctx.store)]
            tags = list_tags(ctx.store)
            if tags and ctx.rng.random() < 0.4:
                delete_tag(ctx.store, ctx.rng.choice(tags).name)
            elif versions:
                count += 1
                now = _dt.datetime.fromtimestamp(ctx.clock.wall_ns() / _NS, tz=_dt.UTC)
                create_tag(ctx.store, f"t{count}", ctx.rng.choice(versions), now=now)
        except TxnEngineError:
            pass
        ctx.idle(0.5, 4.0)


def reader(ctx: Context) -> None:
    """Leases the latest (a reader's lease) and checks, while it holds it, that the version
    and every file it references are there."""
    while ctx.running():
        try:
            held = ctx.lease(writes=False)
        except TxnEngineError:
            ctx.idle()
            continue
        try:
            snapshot = Dataset.open(ctx.store, version=held.version)
            for frag in snapshot.fragments:
                path = f"data/{frag.files[0].path}"
                found = ctx.store.exists(path)
                if not found and held.held():
                    ctx.ledger.violations.append(
                        f"{ctx.actor.name}: leased version {held.version} references missing {path}"
                    )
        except TxnEngineError as exc:
            if held.held() and "does not exist" in str(exc):
                ctx.ledger.violations.append(f"{ctx.actor.name}: leased version gone: {exc}")
        finally:
            with contextlib.suppress(TxnEngineError):
                held.release()
        ctx.idle(0.2, 2.0)


def programs() -> dict[str, object]:
    """Each actor kind's program."""
    return {
        "raw": raw_writer,
        "api": api_writer,
        "unleased": unleased_writer,
        "compactor": compactor,
        "cleaner": cleaner,
        "tagger": tagger,
        "reader": reader,
    }
