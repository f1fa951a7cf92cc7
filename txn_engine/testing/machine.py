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

Reuse it for another backend by subclassing and overriding :meth:`WritersMachine.make_storage`
(and :meth:`WritersMachine.teardown`), restrict ``kinds`` / ``faults`` / ``n_writers``, then::

    TestMyBackend = MyWriters.TestCase
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import ClassVar

import attrs
from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from pyroaring import BitMap, BitMap64

from txn_engine._proto import table_pb2
from txn_engine.commit import CommitResult, commit, find_transaction
from txn_engine.conflicts.matrix import MATRIX, Outcome
from txn_engine.dataset import Dataset
from txn_engine.errors import (
    CommitConflictError,
    CommitStateUnknownError,
    InvalidOperationError,
    StorageError,
)
from txn_engine.format.deletion import read_deletion_vector, write_deletion_vector
from txn_engine.format.io import read_transaction
from txn_engine.format.naming import NamingScheme, list_versions
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
    Rewrite,
    RewriteGroup,
    Update,
    UpdateConfig,
    UpdateMap,
)
from txn_engine.retry import RetryPolicy
from txn_engine.storage.base import Storage
from txn_engine.storage.memory import MemoryStorage
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
    RemoveRows,
    ReplaceTable,
    RestoreVersion,
    Row,
    SetValues,
    SyntheticRows,
    read_contents,
)
from txn_engine.transaction import Transaction
from txn_engine.verify import verify

__all__ = ["ALL_KINDS", "SCHEMA", "Planner", "WritersMachine", "live_offsets"]

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


def live_offsets(storage: Storage, fragment: table_pb2.DataFragment) -> list[int]:
    """Offsets of the rows of ``fragment`` its deletion vector does not delete."""
    deleted = (
        read_deletion_vector(storage, fragment.id, fragment.deletion_file)
        if fragment.HasField("deletion_file")
        else BitMap()
    )
    return [o for o in range(fragment.physical_rows) if o not in deleted]


@attrs.define
class _Writer:
    snapshot: Dataset | None = None
    txn: Transaction | None = None
    effect: Effect | None = None


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

    def __init__(self) -> None:
        super().__init__()
        self.inner = self.make_storage()
        self.storage = FaultyStorage(self.inner)
        self.rows = SyntheticRows()
        first = Transaction(0, Overwrite((self.rows.fragment(_FIRST_ROWS),), SCHEMA))
        created = commit(self.inner, first, naming=self.naming)
        self.intent = IntentModel(created.version, Contents.of(_FIRST_ROWS))
        self.history = HistoryModel(self.inner, self.rows)
        self.effects: dict[str, Effect] = {first.uuid: ReplaceTable(_FIRST_ROWS)}
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
        snapshot = Dataset.open(self.inner)
        note(f"writer {w} reads version {snapshot.version}")
        self.writers[w] = _Writer(snapshot=snapshot)

    @precondition(lambda self: any(x.snapshot is not None and x.txn is None for x in self.writers))
    @rule(data=st.data())
    def plan(self, data: st.DataObject) -> None:
        """A writer that has read a version plans an operation against it."""
        ready = [i for i, x in enumerate(self.writers) if x.snapshot is not None and x.txn is None]
        w = data.draw(st.sampled_from(ready), label="writer")
        writer = self.writers[w]
        assert writer.snapshot is not None
        kind = data.draw(st.sampled_from(self.kinds), label="kind")
        planned = self.planner.plan(kind, writer.snapshot, data, w)
        if planned is None:  # nothing to do for that kind on this snapshot: append instead
            planned = self.planner.plan("append", writer.snapshot, data, w)
            assert planned is not None
        op, effect = planned
        txn = Transaction(writer.snapshot.version, op)
        note(f"writer {w} plans {txn.kind} on v{txn.read_version}: {effect}")
        writer.txn = txn
        writer.effect = effect
        self.effects[txn.uuid] = effect

    @precondition(lambda self: any(x.txn is not None for x in self.writers))
    @rule(data=st.data())
    def commit_planned(self, data: st.DataObject) -> None:
        """A writer commits its plan, possibly overtaken mid-attempt, possibly with a fault."""
        ready = [i for i, x in enumerate(self.writers) if x.txn is not None]
        w = data.draw(st.sampled_from(ready), label="writer")
        others = [i for i in ready if i != w]
        overtakers: list[int] = []
        if self.interleave and others:
            overtakers = data.draw(
                st.lists(st.sampled_from(others), unique=True, max_size=2), label="overtaken by"
            )
        fault = data.draw(st.sampled_from(("none", *self.faults)), label="fault")
        rules: list[Fault] = [] if fault == "none" else fault_rules(fault)

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
        note(f"writer {w} commits (fault: {fault})")
        self._commit(w, rules, fault)

    # ---- committing -------------------------------------------------------------------

    def _attempt(self, txn: Transaction, base: Dataset | None) -> _Outcome:
        try:
            result = commit(self.storage, txn, retry_policy=self.policy(), base=base)
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
        return _Outcome("acked", result=result)

    def _commit(self, w: int, rules: Sequence[Fault], fault: str = "none") -> None:
        writer = self.writers[w]
        txn = writer.txn
        assert txn is not None
        assert writer.effect is not None
        self.writers[w] = _Writer()  # whatever happens, the writer starts over
        outcome = self._attempt(txn, writer.snapshot)
        fired = any(r.fired for r in rules)
        self.storage.clear()  # stop injecting (and drop an unfired hook) before checking
        landed = find_transaction(self.inner, txn.uuid)
        note(f"  -> {outcome.kind}{'' if outcome.error is None else ': ' + str(outcome.error)}")
        if outcome.kind == "conflict":
            assert isinstance(outcome.error, CommitConflictError)
            self._check_conflict(txn, outcome.error)
        expected = self._expected_outcomes(fault if fired else "none")
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
        assert op.affected_rows is not None, "ROWS conflict without known affected rows"
        latest = Dataset.open(self.inner).manifest
        by_id = {pb.id: pb for pb in latest.fragments}
        gone = []
        for address in op.affected_rows:
            pb = by_id.get(address >> 32)
            if pb is None or (address & 0xFFFFFFFF) not in live_offsets(self.inner, pb):
                gone.append(address)
        assert gone, f"ROWS conflict, but every row {txn.kind} removes is still in place"

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
        assert not report.findings, [str(f) for f in report.findings]  # warnings included

    @invariant()
    def acknowledged_commits_are_there_once(self) -> None:
        by_uuid: dict[str, list[int]] = {}
        for entry in list_versions(self.inner):
            by_uuid.setdefault(read_transaction(self.inner, entry).uuid, []).append(entry.version)
        for uuid, version in self.acked.items():
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
        frags = list(ds.manifest.fragments)
        if kind == "append":
            rows = [(next(self.rids), 0) for _ in range(data.draw(st.integers(1, 6), label="rows"))]
            return Append((self.rows.fragment(rows),)), AddRows(rows)
        if kind in ("delete", "update"):
            if not frags:
                return None
            pb = frags[data.draw(st.integers(0, len(frags) - 1), label="fragment")]
            frag = Fragment.from_proto(pb)
            physical = self.rows.rows(frag)
            alive = live_offsets(self.storage, pb)
            # mostly some rows (deletion vectors to merge with concurrent ones), sometimes
            # the whole fragment
            everything = len(alive) == 1 or data.draw(st.integers(0, 3), label="all rows") == 0
            chosen = sorted(
                alive
                if everything
                else data.draw(
                    st.lists(
                        st.sampled_from(alive), min_size=1, max_size=len(alive) - 1, unique=True
                    ),
                    label="rows",
                )
            )
            known = data.draw(st.booleans(), label="affected rows known")
            affected = BitMap64((pb.id << 32) | o for o in chosen) if known else None
            whole = len(chosen) == len(alive)
            updated: tuple[Fragment, ...] = ()
            if not whole:
                dv = write_deletion_vector(
                    self.storage,
                    pb.id,
                    ds.version,
                    BitMap(o for o in range(pb.physical_rows) if o not in alive) | BitMap(chosen),
                )
                copy = table_pb2.DataFragment()
                copy.CopyFrom(pb)
                copy.deletion_file.CopyFrom(dv)
                updated = (Fragment.from_proto(copy),)
            removed = (pb.id,) if whole else ()
            rids = [physical[o][0] for o in chosen]
            if kind == "delete":
                op: Operation = Delete(updated, removed, "rid in (...)", affected_rows=affected)
                return op, RemoveRows(rids)
            new_rows = [(rid, next(self.values)) for rid in rids]
            op = Update(
                removed_fragment_ids=removed,
                updated_fragments=updated,
                new_fragments=(self.rows.fragment(new_rows),),
                fields_modified=(1,),
                affected_rows=affected,
            )
            return op, SetValues(new_rows)
        if kind == "compact":
            if not frags:
                return None
            start = data.draw(st.integers(0, len(frags) - 1), label="first fragment")
            count = data.draw(st.integers(1, min(3, len(frags) - start)), label="fragments")
            olds = frags[start : start + count]
            live: list[Row] = []
            for pb in olds:
                physical = self.rows.rows(Fragment.from_proto(pb))
                live += [physical[o] for o in live_offsets(self.storage, pb)]
            group = RewriteGroup(
                tuple(Fragment.from_proto(pb) for pb in olds), (self.rows.fragment(live),)
            )
            return Rewrite((group,)), NoRowChange("compaction")
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
            if ds.version < 2:
                return None
            version = data.draw(st.integers(1, ds.version - 1), label="version")
            return Restore(version), RestoreVersion(version)
        if kind == "index":
            index = IndexMetadata(
                uuid=str(data.draw(st.uuids(), label="uuid")),
                name=data.draw(st.sampled_from(("i1", "i2")), label="name"),
                fields=(0,),
                dataset_version=ds.version,
                fragment_bitmap=frozenset(pb.id for pb in frags),
                index_details=IndexDetails("/lance.table.BTreeIndexDetails"),
            )
            return CreateIndex(new_indices=(index,)), NoRowChange("index")
        if kind == "merge":
            fields = [LanceField.from_proto(f) for f in ds.manifest.fields]
            new_id = max([f.id for f in fields] + [-1]) + 1
            merged = []
            for pb in frags:
                frag = Fragment.from_proto(pb)
                extra = DataFile(f"merge-{new_id}-{pb.id}-{next(self.values)}.lance", (new_id,))
                merged.append(attrs.evolve(frag, files=(*frag.files, extra)))
            schema = (*fields, LanceField(new_id, -1, f"m{new_id}", "int64"))
            return Merge(tuple(merged), schema), NoRowChange("new column")
        if kind == "reserve":
            return ReserveFragments(data.draw(st.integers(1, 3), label="ids")), NoRowChange()
        raise ValueError(f"unknown kind {kind!r}")
