"""A reusable Hypothesis state machine of concurrent writers, with reference models.

Writers are phase machines (``docs/testing.md``): each one **begins** (reads the latest
version), **plans** an operation against that snapshot (append, delete, update, compact,
config edit, overwrite, restore, index) and later **commits** it. Hypothesis interleaves
the steps of N writers in one thread, deterministically, so any failure shrinks to a short
replayable script. A commit can also be *overtaken inside its attempt*: another planned
writer commits at the moment this one creates its manifest (a storage hook), so this one
loses the race and its commit loop re-checks, rebases and retries. And a commit can suffer
a storage fault (:mod:`txn_engine.testing.fault_storage`: lost response, failure before the
write, spurious "already exists", failing transaction file, crash before / after the
manifest, unknown outcome); the machine predicts what each must lead to and asserts it.

Every row has an identity (``rid``) and a value; data files are synthetic
(:class:`~txn_engine.testing.model.SyntheticRows`). After every step:

* the table of every new version equals the fold of the writers' intents in version order
  (:class:`~txn_engine.testing.model.IntentModel`): no row lost, duplicated, resurrected,
  no deletion lost, config as a serial execution leaves it;
* the table equals the fold of the landed (rebased) transactions with Lance's semantics
  (:class:`~txn_engine.testing.model.HistoryModel`);
* :func:`txn_engine.verify.verify` finds nothing (no gaps, ids unique and never reused, ...);
* every acknowledged commit is in the history exactly once, at the acknowledged version,
  and every rejected commit (conflict, storage error, crash before the manifest) is absent;
* every conflict raised is one the conflict matrix allows for that pair of operations.

With ``cleaner = True`` a cleaner (:func:`txn_engine.retention.cleanup`) runs between any two
steps, including between a writer's plan and its commit, on a logical wall clock (one
second per step). Writers then write their data files when they plan, and each takes a
lease (:mod:`txn_engine.leases`) on the version it reads: a long one, a short one that
expires unless the writer commits soon, or none. A writer renews its lease before it
commits and re-plans when the lease expired; a writer without a lease re-plans when a
cleanup ran whose orphan retention its data files had outlived (the contract of an
unleased writer). Then also, after every step:

* every file every kept version references exists (data, deletion and transaction files);
* no acknowledged row is lost (the intent fold above, version by version);
* a commit that found a version between its read version and the latest already removed
  was refused with :class:`~txn_engine.errors.HistoryUnavailableError`, never acknowledged,
  and that error is raised only when history really is missing; writers holding a live
  lease never see it (nor a missing file while planning);
* ``verify`` reports removed history as "cleaned-up" information, nothing else.

Reuse it for another backend by subclassing and overriding :meth:`WritersMachine.make_storage`
(and :meth:`WritersMachine.teardown`), restrict ``kinds`` / ``faults`` / ``n_writers``, then::

    TestMyBackend = MyWriters.TestCase
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any, ClassVar

import attrs
from hypothesis import HealthCheck, Phase, event, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from txn_engine._proto import table_pb2
from txn_engine.commit import CommitResult, commit, find_transaction
from txn_engine.committer import Committer
from txn_engine.conflicts.matrix import MATRIX, Outcome
from txn_engine.dataset import Dataset
from txn_engine.errors import (
    CommitConflictError,
    CommitStateUnknownError,
    HistoryUnavailableError,
    InvalidOperationError,
    LeaseExpiredError,
    StorageError,
    TxnEngineError,
    VersionNotFoundError,
)
from txn_engine.format.io import read_manifest_entry, read_transaction
from txn_engine.format.naming import NamingScheme, list_versions
from txn_engine.leases import Lease
from txn_engine.model import DataFile, Fragment, IndexDetails, IndexMetadata, LanceField
from txn_engine.ops import (
    Append,
    CreateIndex,
    Delete,
    Merge,
    Operation,
    Overwrite,
    ReserveFragments,
    Restore,
    Update,
    UpdateConfig,
    UpdateMap,
)
from txn_engine.retention import FILE_DIRS, CleanupReport, ObjectInfo, cleanup, referenced_files
from txn_engine.retry import RetryPolicy
from txn_engine.storage.base import ForwardingStorage, Storage
from txn_engine.storage.memory import MemoryStorage
from txn_engine.testing.clocks import FollowClock
from txn_engine.testing.fault_storage import fault_rules
from txn_engine.testing.faults import Fault, FaultyStorage, SimulatedCrash
from txn_engine.testing.model import (
    AddRows,
    Contents,
    EditConfig,
    Effect,
    HistoryModel,
    IntentModel,
    NoRowChange,
    ReplaceTable,
    RestoreVersion,
    Row,
    SyntheticRows,
    read_contents,
)
from txn_engine.testing.planning import compaction, live_offsets, row_change
from txn_engine.transaction import GROUP_MEMBERS_KEY, Transaction
from txn_engine.verify import verify

__all__ = [
    "ALL_KINDS",
    "SCHEMA",
    "ClockedStorage",
    "Planner",
    "WritersMachine",
    "find_failure",
    "live_offsets",
]

#: Operation kinds the machine can plan (weights come from repetition in ``kinds``).
ALL_KINDS: tuple[str, ...] = (
    "append",
    "delete",
    "update",
    "compact",
    "config",
    "overwrite",
    "restore",
    "index",
    "merge",
    "reserve",
)

#: The schema of the machine's tables: ``rid`` (identity) and ``val`` (value), both int64.
SCHEMA = (LanceField(0, -1, "rid", "int64"), LanceField(1, -1, "val", "int64"))
_FIRST_ROWS: tuple[Row, ...] = tuple((rid, 0) for rid in range(8))


def _no_sleep(_seconds: float) -> None:
    return None


_NS = 1_000_000_000


class ClockedStorage(ForwardingStorage):
    """A storage wrapper that stamps every object it writes with a (logical) wall clock and
    lists objects with those times (``list_objects``, the optional Storage extension
    :func:`txn_engine.retention.list_objects` uses), so cleanup's orphan retention can be
    driven deterministically. Objects written around it have no time (never orphan-aged).
    """

    def __init__(self, inner: Storage, clock: Any) -> None:
        super().__init__(inner)
        self.clock = clock
        self.mtimes: dict[str, int] = {}

    def put_if_absent(self, path: str, data: bytes) -> None:
        self.inner.put_if_absent(path, data)
        self.mtimes[path] = self.clock()

    def put(self, path: str, data: bytes) -> None:
        self.inner.put(path, data)
        self.mtimes[path] = self.clock()

    def delete(self, path: str) -> None:
        self.inner.delete(path)
        self.mtimes.pop(path, None)

    def list_objects(self, prefix: str) -> Sequence[ObjectInfo]:
        """Every object under ``prefix`` this wrapper wrote and that still exists."""
        return [
            ObjectInfo(p, None, t)
            for p, t in sorted(self.mtimes.items())
            if p.startswith(prefix + "/") and self.inner.exists(p)
        ]


def _data_files(value: Any) -> Iterator[DataFile]:
    """Every DataFile inside an operation (fragments, rewrite groups, merges, ...)."""
    if isinstance(value, DataFile):
        yield value
    elif attrs.has(type(value)):
        for field in attrs.fields(type(value)):
            yield from _data_files(getattr(value, field.name))
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _data_files(item)


@attrs.define
class _Writer:
    snapshot: Dataset | None = None
    txn: Transaction | None = None
    effect: Effect | None = None
    lease: Lease | None = None
    planned_at: int = 0
    wrote_files: bool = False


@attrs.define
class _Outcome:
    kind: str  # acked | conflict | storage_error | crash | unknown | invalid
    result: CommitResult | None = None
    error: BaseException | None = None


class WritersMachine(RuleBasedStateMachine):
    """N writers reading, planning and committing in any interleaving (see module doc)."""

    #: Number of concurrent writers.
    n_writers: ClassVar[int] = 3
    #: Kinds a plan draws from (repeat a kind to make it likelier).
    kinds: ClassVar[tuple[str, ...]] = (
        "append",
        "append",
        "delete",
        "delete",
        "update",
        "compact",
        "config",
        "overwrite",
        "restore",
        "index",
        "merge",
        "reserve",
    )
    #: Fault kinds a commit may suffer (``fault_storage.FAULT_KINDS``); empty: none.
    faults: ClassVar[tuple[str, ...]] = ()
    #: Whether a commit can be overtaken by another writer inside its attempt.
    interleave: ClassVar[bool] = True
    #: Manifest naming of the dataset under test (None: the default, V2).
    naming: ClassVar[NamingScheme | None] = None
    #: Whether a cleaner runs between steps (see the module docstring).
    cleaner: ClassVar[bool] = False
    #: Whether planned transactions may also be committed together through one
    #: :class:`~txn_engine.committer.Committer` (consecutive Appends in one version).
    grouped: ClassVar[bool] = False
    #: Lease TTLs (seconds of the machine's clock, one per step) a writer draws from when it
    #: begins; None: no lease.
    lease_ttls: ClassVar[tuple[float | None, ...]] = (None, None, 3.0, 10.0**6)
    #: Orphan retentions (seconds, one per step) the cleaner draws from.
    orphan_retentions: ClassVar[tuple[int, ...]] = (0, 2, 4, 10**6, 10**6)

    def __init__(self) -> None:
        super().__init__()
        self.now_ns = time.time_ns()
        base = self.make_storage()
        self.clocked = ClockedStorage(base, lambda: self.now_ns) if self.cleaner else None
        self.inner: Storage = self.clocked if self.clocked is not None else base
        self.cleanups: list[tuple[int, int]] = []  # (when, orphan cutoff) of every run
        self.landed_since_cleanup = 0
        self.storage = FaultyStorage(self.inner)
        self.rows = SyntheticRows()
        first = Transaction(0, Overwrite((self.rows.fragment(_FIRST_ROWS),), SCHEMA))
        if self.cleaner:
            for df in _data_files(first.operation):
                self.inner.put(f"data/{df.path}", b"synthetic")
        created = commit(self.inner, first, naming=self.naming)
        self.intent = IntentModel(created.version, Contents.of(_FIRST_ROWS), merge_deletes=True)
        self.history = HistoryModel(self.inner, self.rows)
        self.effects: dict[str, Effect] = {first.uuid: ReplaceTable(_FIRST_ROWS)}
        #: group uuid -> member uuid -> its rows, while a group's members are being checked
        self._group_rows: dict[str, dict[str, AddRows]] = {}
        self.acked: dict[str, int] = {first.uuid: created.version}
        self.rejected: set[str] = set()
        self.landed: dict[str, int] = {first.uuid: created.version}
        self.writers = [_Writer() for _ in range(self.n_writers)]
        self.planner = Planner(self.inner, self.rows)

    def make_storage(self) -> Storage:
        """The backend under test (override for another one)."""
        return MemoryStorage()

    def policy(self) -> RetryPolicy:
        """The commit retry policy: instant, deterministic backoff."""
        return RetryPolicy(max_attempts=4, sleep=_no_sleep, randbelow=lambda n: 0)

    # ---- rules ------------------------------------------------------------------------

    @precondition(lambda self: any(x.txn is None for x in self.writers))
    @rule(data=st.data())
    def begin(self, data: st.DataObject) -> None:
        """A writer without a plan reads the latest version."""
        idle = [i for i, x in enumerate(self.writers) if x.txn is None]
        w = data.draw(st.sampled_from(idle), label="writer")
        self._tick()
        snapshot = Dataset.open(self.inner)
        held = None
        if self.cleaner:
            ttl = data.draw(st.sampled_from(self.lease_ttls), label="lease ttl")
            if ttl is not None:
                held = Lease(
                    self.inner,
                    snapshot.version,
                    ttl=ttl,
                    owner=f"writer-{w}",
                    renew_in_background=False,
                    clock=FollowClock(lambda: self.now_ns),
                )
        note(f"writer {w} reads version {snapshot.version} (lease: {held is not None})")
        self.writers[w] = _Writer(snapshot=snapshot, lease=held)

    def _tick(self) -> None:
        self.now_ns += _NS

    def _drop(self, w: int, why: str) -> None:
        """Writer ``w`` abandons its plan (and lease) and starts over."""
        note(f"writer {w} starts over: {why}")
        event(f"writer starts over: {why.split(' (')[0]}")
        writer = self.writers[w]
        if writer.lease is not None:
            writer.lease.release()
        if writer.txn is not None:
            self.rejected.add(writer.txn.uuid)
        self.writers[w] = _Writer()

    @precondition(lambda self: any(x.snapshot is not None and x.txn is None for x in self.writers))
    @rule(data=st.data())
    def plan(self, data: st.DataObject) -> None:
        """A writer that has read a version plans an operation against it."""
        ready = [i for i, x in enumerate(self.writers) if x.snapshot is not None and x.txn is None]
        w = data.draw(st.sampled_from(ready), label="writer")
        writer = self.writers[w]
        assert writer.snapshot is not None
        kind = data.draw(st.sampled_from(self.kinds), label="kind")
        self._tick()
        failure: TxnEngineError | None = None
        try:
            planned = self.planner.plan(kind, writer.snapshot, data, w)
            if planned is None:  # nothing to do for that kind on this snapshot: append instead
                planned = self.planner.plan("append", writer.snapshot, data, w)
        except TxnEngineError as exc:
            failure = exc
        if failure is not None:
            # only a writer whose snapshot cleanup may remove can find its files gone
            assert self.cleaner, failure
            assert not self._protected(writer), f"a leased writer's snapshot was cleaned: {failure}"
            self._drop(w, f"its snapshot was cleaned up ({failure})")
            return
        assert planned is not None
        op, effect = planned
        txn = Transaction(writer.snapshot.version, op)
        note(f"writer {w} plans {txn.kind} on v{txn.read_version}: {effect}")
        writer.txn = txn
        writer.effect = effect
        writer.planned_at = self.now_ns
        self.effects[txn.uuid] = effect
        if self.clocked is not None:  # a real writer writes its data files before committing
            known = {df.path for pb in writer.snapshot.manifest_pb.fragments for df in pb.files}
            for df in _data_files(op):
                if df.path not in known:
                    self.inner.put(f"data/{df.path}", b"synthetic")
            # (deletion files the plan wrote are stamped with this step's time too)
            writer.wrote_files = self.now_ns in self.clocked.mtimes.values()

    def _protected(self, writer: _Writer) -> bool:
        """Whether the writer holds a lease that is live now."""
        return (
            writer.lease is not None
            and not writer.lease.expired
            and self.now_ns < writer.lease.expires_at_ns
        )

    # ---- the cleaner ------------------------------------------------------------------

    @precondition(lambda self: self.cleaner and self.landed_since_cleanup > 0)
    @rule(data=st.data())
    def clean(self, data: st.DataObject) -> None:
        """Cleanup runs: old versions go (keeping the newest 1..3), and orphans past a
        retention of 0..4 steps (or none)."""
        self._tick()
        keep = data.draw(st.integers(1, 3), label="keep versions")
        retention = data.draw(st.sampled_from(self.orphan_retentions), label="orphan retention")
        report = cleanup(
            self.inner,
            older_than=timedelta(0),
            keep_versions=keep,
            retention_orphans=timedelta(seconds=retention),
            progress=False,
            workers=1,
            now_ns=self.now_ns,
            wait_for_writers=timedelta(0),  # one step: the writers move between steps
        )
        assert isinstance(report, CleanupReport)
        gone = {d.path for d in report.plan.deletes if not self.inner.exists(d.path)}
        for entry in list_versions(self.inner):
            mf = read_manifest_entry(self.inner, entry)
            files, _ = referenced_files(mf.manifest, mf.indices, what=entry.path)
            assert not files & gone, f"cleanup deleted files v{entry.version} references"
        event(f"cleanup removed {'some' if report.plan.removed_versions else 'no'} versions")
        if report.plan.counts["orphan"]:
            event("cleanup removed orphan files")
        note(
            f"cleanup (keep {keep}, retention {retention}s) removed versions "
            f"{list(report.plan.removed_versions)}, {report.deleted} objects"
        )
        self.cleanups.append((self.now_ns, self.now_ns - retention * _NS))
        self.landed_since_cleanup = 0

    def _stale(self, writer: _Writer) -> str | None:
        """Why the writer must not commit its plan (the lease/retention contract)."""
        if writer.lease is not None:
            try:
                writer.lease.renew()
            except LeaseExpiredError:
                return "its lease expired before the commit"
            return None
        if writer.wrote_files and any(cutoff >= writer.planned_at for _, cutoff in self.cleanups):
            return "a cleanup ran whose orphan retention its data files outlived"
        return None

    @precondition(lambda self: any(x.txn is not None for x in self.writers))
    @rule(data=st.data())
    def commit_planned(self, data: st.DataObject) -> None:
        """A writer commits its plan, possibly overtaken mid-attempt, possibly with a fault."""
        ready = [i for i, x in enumerate(self.writers) if x.txn is not None]
        w = data.draw(st.sampled_from(ready), label="writer")
        self._tick()
        if self.cleaner:
            why = self._stale(self.writers[w])
            if why is not None:
                self._drop(w, why)
                return
            ready = [i for i in ready if i == w or self._stale(self.writers[i]) is None]
        others = [i for i in ready if i != w]
        overtakers: list[int] = []
        if self.interleave and others:
            overtakers = data.draw(
                st.lists(st.sampled_from(others), unique=True, max_size=2), label="overtaken by"
            )
        fault = data.draw(st.sampled_from(("none", *self.faults)), label="fault")
        rules: list[Fault] = [] if fault == "none" else fault_rules(fault)
        # inline-only (the default) or also the .txn copy (which that fault needs to fire)
        copy = fault == "transaction_file_fails" or data.draw(st.booleans(), label=".txn copy")

        if overtakers:
            hooked = tuple(overtakers)

            def overtake(_method: str, _path: str) -> None:
                for other in hooked:
                    note(f"writer {other} commits while writer {w} creates its manifest")
                    self._commit(other, [])
                for r in rules:  # the fault hits the overtaken writer's retry
                    self.storage.add(r)

            self.storage.add(Fault("put_if_absent", "_versions/*", mode="hook", hook=overtake))
        else:
            for r in rules:
                self.storage.add(r)
        note(f"writer {w} commits (fault: {fault}, .txn copy: {copy})")
        self._commit(w, rules, fault, transaction_file=copy)

    @precondition(lambda self: self.grouped and sum(x.txn is not None for x in self.writers) >= 2)
    @rule(data=st.data())
    def commit_together(self, data: st.DataObject) -> None:
        """Several writers hand their plans to one Committer at once: consecutive Appends
        land as one version (one create), anything else alone in order; each writer gets
        its own outcome, possibly under a fault hitting the group's create."""
        ready = [i for i, x in enumerate(self.writers) if x.txn is not None]
        if self.cleaner:
            ready = [i for i in ready if self._stale(self.writers[i]) is None]
            if len(ready) < 2:
                return
        chosen = data.draw(
            st.lists(st.sampled_from(ready), unique=True, min_size=2), label="together"
        )
        self._tick()
        # a fault must hit the group's one create: only when every plan is an Append (one
        # group); an unknown outcome only when none of them can conflict (each read the
        # latest version), since a conflict makes the members commit one by one
        plans = [self.writers[i].txn for i in chosen]
        appends = all(t is not None and isinstance(t.operation, Append) for t in plans)
        latest = max(e.version for e in list_versions(self.inner))
        fresh = all(t is not None and t.read_version == latest for t in plans)
        kinds = [
            k
            for k in ("lost_response", "unknown_outcome")
            if k in self.faults and appends and (fresh or k == "lost_response")
        ]
        fault = data.draw(st.sampled_from(("none", *kinds)), label="fault")
        rules: list[Fault] = [] if fault == "none" else fault_rules(fault)
        for r in rules:
            self.storage.add(r)
        note(f"writers {chosen} commit together (fault: {fault})")
        txns = [self.writers[i].txn for i in chosen]
        outcomes = self._attempt_together([t for t in txns if t is not None])
        for i, outcome in zip(chosen, outcomes, strict=True):
            self._commit(i, rules, fault, outcome=outcome)

    def _attempt_together(self, txns: Sequence[Transaction]) -> list[_Outcome]:
        committer = Committer(self.storage, retry_policy=self.policy())
        futures = committer.submit_all(txns)  # queued at once: grouping is deterministic
        committer.close()
        outcomes = []
        for future in futures:
            try:
                outcomes.append(_Outcome("acked", result=future.result()))
            except BaseException as exc:
                outcomes.append(self._classify(exc))
        grouped = [n for _, n in committer.groups if n > 1]
        if grouped:
            event("a group of Appends landed as one version")
        return outcomes

    @staticmethod
    def _classify(exc: BaseException) -> _Outcome:
        if isinstance(exc, CommitConflictError):
            return _Outcome("conflict", error=exc)
        if isinstance(exc, CommitStateUnknownError):
            return _Outcome("unknown", error=exc)
        if isinstance(exc, StorageError):
            return _Outcome("storage_error", error=exc)
        if isinstance(exc, SimulatedCrash):
            return _Outcome("crash", error=exc)
        if isinstance(exc, InvalidOperationError):
            return _Outcome("invalid", error=exc)
        if isinstance(exc, VersionNotFoundError):
            return _Outcome("gone", error=exc)
        raise exc

    # ---- committing -------------------------------------------------------------------

    def _attempt(
        self, txn: Transaction, base: Dataset | None, transaction_file: bool = False
    ) -> _Outcome:
        try:
            result = commit(
                self.storage,
                txn,
                retry_policy=self.policy(),
                base=base,
                transaction_file=transaction_file,
            )
        except CommitConflictError as exc:
            return _Outcome("conflict", error=exc)
        except CommitStateUnknownError as exc:
            return _Outcome("unknown", error=exc)
        except StorageError as exc:
            return _Outcome("storage_error", error=exc)
        except SimulatedCrash as exc:
            return _Outcome("crash", error=exc)
        except InvalidOperationError as exc:  # a plan valid at its read version was refused:
            return _Outcome("invalid", error=exc)  # a conflict the engine failed to detect
        except VersionNotFoundError as exc:  # (a Restore whose version cleanup removed)
            return _Outcome("gone", error=exc)
        return _Outcome("acked", result=result)

    def _commit(
        self,
        w: int,
        rules: Sequence[Fault],
        fault: str = "none",
        *,
        outcome: _Outcome | None = None,
        transaction_file: bool = False,
    ) -> None:
        writer = self.writers[w]
        txn = writer.txn
        assert txn is not None
        assert writer.effect is not None
        self.writers[w] = _Writer()  # whatever happens, the writer starts over
        listed = {e.version for e in list_versions(self.inner)}
        gap = [v for v in range(txn.read_version + 1, max(listed) + 1) if v not in listed]
        if outcome is None:
            outcome = self._attempt(txn, writer.snapshot, transaction_file)
        if writer.lease is not None:
            writer.lease.release()
        fired = any(r.fired for r in rules)
        self.storage.clear()  # stop injecting (and drop an unfired hook) before checking
        landed = find_transaction(self.inner, txn.uuid)
        note(f"  -> {outcome.kind}{'' if outcome.error is None else ': ' + str(outcome.error)}")
        if gap:
            event(f"commit across removed history: {outcome.kind}")
            note(f"  versions {gap} between v{txn.read_version} and the latest were removed")
            assert outcome.kind != "acked", (
                f"{txn.kind} on v{txn.read_version} was acknowledged although versions {gap} "
                "it had to be checked against were cleaned up (a silent pass)"
            )
        if outcome.kind == "conflict" and isinstance(outcome.error, HistoryUnavailableError):
            self._check_history_missing(txn, outcome.error, protected=writer.lease is not None)
        elif outcome.kind == "conflict":
            assert isinstance(outcome.error, CommitConflictError)
            self._check_conflict(txn, outcome.error)
        expected = self._expected_outcomes(fault if fired else "none")
        if outcome.kind == "gone":
            op = txn.operation
            assert self.cleaner, outcome.error
            assert isinstance(op, Restore), outcome.error
            listed = {e.version for e in list_versions(self.inner)}
            assert op.version not in listed, f"Restore of v{op.version}: {outcome.error}"
            expected = ("gone",)
        assert outcome.kind in expected, (
            f"{txn.kind} under fault {fault!r} (fired={fired}) ended {outcome.kind!r}: "
            f"{outcome.error!r}; expected one of {expected}"
        )
        if outcome.kind == "acked":
            assert outcome.result is not None
            assert outcome.result.transaction.uuid == txn.uuid
            assert txn.uuid not in self.acked, "a transaction was acknowledged twice"
            assert landed == outcome.result.version, (
                f"acknowledged at v{outcome.result.version}, found at {landed}"
            )
            self.acked[txn.uuid] = outcome.result.version
        elif outcome.kind == "unknown" or (
            outcome.kind == "crash" and fault.endswith("after_manifest")
        ):
            assert landed is not None, f"{fault}: the manifest was written but is not there"
            if outcome.kind == "unknown":
                # committing the same transaction again settles it: found, not landed twice
                again = commit(self.inner, txn, retry_policy=self.policy())
                assert again.already_committed
                assert again.version == landed
        else:
            assert landed is None, f"a rejected commit ({outcome.kind}) left version {landed}"
            self.rejected.add(txn.uuid)
        if landed is not None:
            self.landed[txn.uuid] = landed
            self.landed_since_cleanup += 1
            self._note_group(landed, txn, writer.effect)

    def _note_group(self, version: int, member: Transaction, effect: Effect) -> None:
        """A member landed inside a group commit: the version's own uuid is the group's;
        its effect is the members' effects in order (an AddRows of all their rows)."""
        pb = read_transaction(self.inner, version)
        if pb.uuid == member.uuid:
            return
        assert isinstance(effect, AddRows), f"only Appends are grouped, got {effect!r}"
        members = pb.transaction_properties[GROUP_MEMBERS_KEY].split(",")
        assert member.uuid in members
        rows = self._group_rows.setdefault(pb.uuid, {})
        rows[member.uuid] = effect
        if set(rows) == set(members):  # every member accounted for: the group's effect
            combined = tuple(r for m in members for r in rows[m].rows)
            self.effects[pb.uuid] = AddRows(combined)
            self.landed[pb.uuid] = version

    @staticmethod
    def _expected_outcomes(fault: str) -> tuple[str, ...]:
        if fault in (
            "none",
            "lost_response",
            "fail_before_write",
            "spurious_exists",
            "transaction_file_fails",  # the .txn copy is written after the manifest landed
            "latency",
        ):
            return ("acked", "conflict")
        if fault in ("crash_before_manifest", "crash_after_manifest"):
            return ("crash",)
        if fault == "unknown_outcome":
            return ("unknown",)
        raise AssertionError(f"no expectation for fault {fault!r}")

    def _check_history_missing(
        self, txn: Transaction, exc: HistoryUnavailableError, *, protected: bool
    ) -> None:
        """HistoryUnavailableError only when a version the commit needs really is gone, and
        never for a writer whose live lease pinned its read version."""
        assert self.cleaner, f"history unavailable without a cleaner: {exc}"
        assert not protected, f"a writer holding a live lease lost its history: {exc}"
        listed = {e.version for e in list_versions(self.inner)}
        needed = range(txn.read_version, max(listed) + 1)
        assert any(v not in listed for v in needed), (
            f"HistoryUnavailableError but versions {txn.read_version}.. are all there: {exc}"
        )

    def _check_conflict(self, txn: Transaction, exc: CommitConflictError) -> None:
        """Every conflict raised must be one the matrix can produce for that pair."""
        mine, other = exc.operation, exc.other_operation
        assert mine == txn.kind
        if other is None:  # row-level overlap found while merging deletion vectors
            assert mine in ("Delete", "Update"), exc
            assert exc.retryable, exc
            self._check_rows_really_overlap(txn)
            return
        rule_ = MATRIX[(mine, other)]
        assert rule_.outcome is not Outcome.COMPATIBLE, (
            f"{mine} vs {other} raised a conflict, but the matrix says always compatible"
        )
        if rule_.outcome is not None:
            assert exc.retryable == (rule_.outcome is Outcome.RETRYABLE), exc

    def _check_rows_really_overlap(self, txn: Transaction) -> None:
        """A ROWS conflict: a row address this Delete/Update removes was deleted (or its
        fragment removed) by a commit after its read version."""
        op = txn.operation
        assert isinstance(op, (Delete, Update))
        removes = self._removed_addresses(txn) if op.affected_rows is None else op.affected_rows
        latest = Dataset.open(self.inner).manifest_pb
        by_id = {pb.id: pb for pb in latest.fragments}
        gone = []
        for address in removes:
            pb = by_id.get(address >> 32)
            if pb is None or (address & 0xFFFFFFFF) not in live_offsets(self.inner, pb):
                gone.append(address)
        assert gone, f"ROWS conflict, but every row {txn.kind} removes is still in place"

    def _removed_addresses(self, txn: Transaction) -> list[int]:
        """The row addresses a Delete/Update without recorded affected rows removes, read
        from its deletion files against its read version's (as the engine derives them)."""
        op = txn.operation
        assert isinstance(op, (Delete, Update))
        read = Dataset.open(self.inner, version=txn.read_version).manifest_pb
        before = {pb.id: set(live_offsets(self.inner, pb)) for pb in read.fragments}
        removed = op.deleted_fragment_ids if isinstance(op, Delete) else op.removed_fragment_ids
        out = [(fid << 32) | o for fid in removed for o in sorted(before.get(fid, ()))]
        for frag in op.updated_fragments:
            after = set(live_offsets(self.inner, frag.to_proto()))
            out += [(frag.id << 32) | o for o in sorted(before.get(frag.id, set()) - after)]
        assert out, f"ROWS conflict, but {txn.kind} removes no row"
        return out

    # ---- invariants -------------------------------------------------------------------

    @invariant()
    def every_version_equals_the_fold_of_intents(self) -> None:
        """Fold the new versions' intents in version order and compare each version."""
        for entry in list_versions(self.inner):
            if entry.version <= self.intent.latest:
                continue
            uuid = read_transaction(self.inner, entry).uuid
            assert uuid in self.effects, f"v{entry.version}: a transaction no writer made"
            assert uuid not in self.rejected, f"v{entry.version}: a rejected commit landed"
            assert self.landed.get(uuid) == entry.version, (
                f"v{entry.version}: transaction {uuid} expected at {self.landed.get(uuid)}"
            )
            expected = self.intent.land(entry.version, self.effects[uuid])
            actual = read_contents(self.inner, self.rows, entry.version)
            diff = expected.difference(actual)
            assert diff is None, f"v{entry.version}: {diff}"

    @invariant()
    def every_version_equals_the_fold_of_landed_transactions(self) -> None:
        findings = self.history.advance()
        assert not findings, findings

    @invariant()
    def history_is_well_formed(self) -> None:
        report = verify(self.inner)
        findings = [f for f in report.findings if not (self.cleaner and f.severity == "info")]
        assert not findings, [str(f) for f in findings]  # warnings included
        assert all(f.invariant == "cleaned-up" for f in report.infos), report.infos

    @invariant()
    def every_file_of_every_kept_version_exists(self) -> None:
        if not self.cleaner:
            return  # data files are synthetic (never written) without a cleaner
        for entry in list_versions(self.inner):
            mf = read_manifest_entry(self.inner, entry)
            files, _ = referenced_files(mf.manifest, mf.indices, what=entry.path)
            # (a .txn file is a redundant copy a commit with an unknown outcome may not have
            # written; the cleaner's own deletes of any referenced file are checked in clean)
            missing = sorted(
                p for p in files if not p.startswith("_transactions/") and not self.inner.exists(p)
            )
            assert not missing, f"v{entry.version} references removed files {missing}"
            assert all(p.split("/", 1)[0] in FILE_DIRS for p in files)

    @invariant()
    def acknowledged_commits_are_there_once(self) -> None:
        by_uuid: dict[str, list[int]] = {}
        entries = list_versions(self.inner)
        for entry in entries:
            pb = read_transaction(self.inner, entry)
            members = pb.transaction_properties.get(GROUP_MEMBERS_KEY)
            for uuid in (pb.uuid, *(members.split(",") if members else ())):
                by_uuid.setdefault(uuid, []).append(entry.version)
        listed = {e.version for e in entries}
        for uuid, version in self.acked.items():
            if self.cleaner and version not in listed and uuid not in by_uuid:
                continue  # cleaned up (its rows are checked through the later versions)
            assert by_uuid.get(uuid) == [version], (uuid, version, by_uuid.get(uuid))


class Planner:
    """Plans the machine's operation kinds (:data:`ALL_KINDS`) against a snapshot, drawing
    the details from Hypothesis. Usable on its own (the matrix-vs-oracle test does).

    ``storage`` receives the deletion files plans write; ``rows`` registers the synthetic
    data files of new fragments; fresh rids start at ``first_rid``.
    """

    def __init__(self, storage: Storage, rows: SyntheticRows, *, first_rid: int = 1000) -> None:
        self.storage = storage
        self.rows = rows
        self.rids = itertools.count(first_rid)
        self.values = itertools.count(1)

    def plan(
        self, kind: str, ds: Dataset, data: st.DataObject, w: int = 0
    ) -> tuple[Operation, Effect] | None:
        """An operation of ``kind`` planned against snapshot ``ds`` and its intended effect;
        None when ``kind`` is impossible on that snapshot (e.g. delete on an empty table).
        Deletion vectors are written now, as a real writer does before committing."""
        frags = list(ds.manifest_pb.fragments)
        if kind == "append":
            rows = [(next(self.rids), 0) for _ in range(data.draw(st.integers(1, 6), label="rows"))]
            return Append((self.rows.fragment(rows),)), AddRows(rows)
        if kind in ("delete", "update"):
            return self._row_change(kind, ds, frags, data) if frags else None
        if kind == "compact":
            if not frags:
                return None
            start = data.draw(st.integers(0, len(frags) - 1), label="first fragment")
            count = data.draw(st.integers(1, min(3, len(frags) - start)), label="fragments")
            olds = frags[start : start + count]
            return compaction(
                self.storage,
                olds,
                lambda pb: self.rows.rows(Fragment.from_proto(pb)),
                self.rows.fragment,
            )
        if kind == "config":
            key = data.draw(st.sampled_from("abc"), label="key")
            value = data.draw(st.none() | st.sampled_from(("1", "2", str(w))), label="value")
            return UpdateConfig(config_updates=UpdateMap({key: value})), EditConfig(((key, value),))
        if kind == "overwrite":
            rows = [(next(self.rids), 0) for _ in range(data.draw(st.integers(1, 4), label="rows"))]
            upserts = {"o": str(w)} if data.draw(st.booleans(), label="config") else None
            op = Overwrite((self.rows.fragment(rows),), SCHEMA, config_upsert_values=upserts)
            return op, ReplaceTable(rows, tuple((upserts or {}).items()))
        if kind == "restore":
            older = [e.version for e in list_versions(self.storage) if e.version < ds.version]
            if not older:  # (cleanup may have removed the older versions)
                return None
            version = data.draw(st.sampled_from(older), label="version")
            return Restore(version), RestoreVersion(version)
        if kind == "index":
            return self._index(ds, frags, data)
        if kind == "merge":
            return self._merge(ds, frags)
        if kind == "reserve":
            return ReserveFragments(data.draw(st.integers(1, 3), label="ids")), NoRowChange()
        raise ValueError(f"unknown kind {kind!r}")

    def _row_change(
        self,
        kind: str,
        ds: Dataset,
        frags: Sequence[table_pb2.DataFragment],
        data: st.DataObject,
    ) -> tuple[Operation, Effect]:
        """A delete or an update (``kind``) of some rows of one of ``frags`` (not empty),
        its deletion vector written now."""
        pb = frags[data.draw(st.integers(0, len(frags) - 1), label="fragment")]
        physical = self.rows.rows(Fragment.from_proto(pb))
        alive = live_offsets(self.storage, pb)
        # mostly some rows (deletion vectors to merge with concurrent ones), sometimes
        # the whole fragment
        everything = len(alive) == 1 or data.draw(st.integers(0, 3), label="all rows") == 0
        chosen = sorted(
            alive
            if everything
            else data.draw(
                st.lists(st.sampled_from(alive), min_size=1, max_size=len(alive) - 1, unique=True),
                label="rows",
            )
        )
        known = data.draw(st.booleans(), label="affected rows known")
        values = None if kind == "delete" else [next(self.values) for _ in chosen]
        return row_change(
            self.storage,
            ds.version,
            pb,
            physical,
            alive,
            chosen,
            new_values=values,
            new_fragment=self.rows.fragment,
            affected_known=known,
        )

    def _index(
        self, ds: Dataset, frags: Sequence[table_pb2.DataFragment], data: st.DataObject
    ) -> tuple[Operation, Effect]:
        """A CreateIndex of a new index on field 0 over every fragment of ``frags``."""
        index = IndexMetadata(
            uuid=str(data.draw(st.uuids(), label="uuid")),
            name=data.draw(st.sampled_from(("i1", "i2")), label="name"),
            fields=(0,),
            dataset_version=ds.version,
            fragment_bitmap=frozenset(pb.id for pb in frags),
            index_details=IndexDetails("/lance.table.BTreeIndexDetails"),
        )
        return CreateIndex(new_indices=(index,)), NoRowChange("index")

    def _merge(
        self, ds: Dataset, frags: Sequence[table_pb2.DataFragment]
    ) -> tuple[Operation, Effect]:
        """A Merge adding a new int64 column: a data file of it in every one of ``frags``."""
        fields = [LanceField.from_proto(f) for f in ds.manifest_pb.fields]
        new_id = max([f.id for f in fields] + [-1]) + 1
        merged = []
        for pb in frags:
            frag = Fragment.from_proto(pb)
            extra = DataFile(f"merge-{new_id}-{pb.id}-{next(self.values)}.lance", (new_id,))
            merged.append(attrs.evolve(frag, files=(*frag.files, extra)))
        schema = (*fields, LanceField(new_id, -1, f"m{new_id}", "int64"))
        return Merge(tuple(merged), schema), NoRowChange("new column")


def find_failure(
    machine: type[RuleBasedStateMachine], *, max_examples: int = 300, steps: int = 40
) -> str:
    """Run ``machine`` expecting its invariants to fail; return the failure's message.

    Use it for mutation checks: break the engine on purpose (monkeypatch one function), then
    call this to show that the machine notices, and assert on the message. The run only
    generates (no shrinking: finding the bug is the point), is derandomized and keeps no
    example database, so it is reproducible. Raises ``AssertionError`` if no example failed
    within ``max_examples`` runs of ``steps`` steps (the mutation went unnoticed).
    """
    hunt = settings(
        phases=[Phase.generate],
        report_multiple_bugs=False,
        derandomize=True,
        max_examples=max_examples,
        stateful_step_count=steps,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    try:
        run_state_machine_as_test(machine, settings=hunt)
    except AssertionError as failure:
        return str(failure)
    raise AssertionError(f"{machine.__name__} found no failure in {max_examples} examples")
