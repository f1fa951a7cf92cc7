"""Conflict detection: pure functions from two transactions to :class:`Conflict` values.

``detect(mine, other, other_version=v)`` looks up ``MATRIX[(mine.kind, other.kind)]`` and,
for a named predicate, evaluates it on the two operations. It never raises for a conflict
and does no I/O; the commit loop decides what to raise. :func:`check` additionally returns
which of my fragments need their deletion vectors merged (rule D1) before I can land.

Every predicate is a small function named after its rule code; ``_PREDICATES`` maps codes
to them and a test checks that every predicate of the matrix has one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import TypeVar

import attrs

from txn_engine.builder import FRAG_REUSE_INDEX
from txn_engine.conflicts.matrix import MATRIX, Outcome, Rule
from txn_engine.conflicts.upsert import upsert_conflict
from txn_engine.model import Fragment, MemWal
from txn_engine.ops import (
    CreateIndex,
    DataReplacement,
    Delete,
    Merge,
    Operation,
    Overwrite,
    Project,
    Rewrite,
    Update,
    UpdateBases,
    UpdateConfig,
    UpdateMap,
    UpdateMemWalState,
)
from txn_engine.transaction import Transaction

__all__ = [
    "Check",
    "Conflict",
    "FragmentLookup",
    "check",
    "detect",
    "missing_history_conflict",
    "modified_fragment_ids",
    "unreadable_conflict",
]

_T = TypeVar("_T")

#: Returns my fragment ``id`` as of my transaction's read version (``None`` if absent).
FragmentLookup = Callable[[int], Fragment | None]


@attrs.frozen
class Conflict:
    """Why my transaction cannot land on top of the one committed at ``version``.

    ``rule`` is the matrix code that fired (``"X"``, ``"R"``, ``"D1"``, ...), ``"ROWS"`` for
    a row-level clash found while merging deletion vectors, or ``"UNREADABLE"`` when the
    committed version's transaction could not be read or has an unknown operation
    (``other`` is then ``None``). The id/key sets say what both sides touched.
    """

    outcome: Outcome
    rule: str
    version: int
    read_version: int
    mine: str
    other: str | None
    reason: str
    fragment_ids: frozenset[int] = frozenset()
    keys: frozenset[str] = frozenset()
    field_ids: frozenset[int] = frozenset()
    index_names: frozenset[str] = frozenset()
    row_addresses: tuple[int, ...] = ()
    other_uuid: str | None = None

    @property
    def retryable(self) -> bool:
        return self.outcome is Outcome.RETRYABLE

    @property
    def remedy(self) -> str:
        """One line telling the caller what to do."""
        if self.retryable:
            return (
                "re-read the latest version, re-plan the operation and commit again "
                "(txn_engine.replan_and_commit automates this)"
            )
        if self.rule == "UNREADABLE":
            return (
                f"version {self.version} cannot be checked; inspect it (txn-engine show "
                f"{self.version}) before committing on top of it"
            )
        return (
            f"this {self.mine} can never land on top of version {self.version}; build a "
            "new operation from the current state or give up"
        )


@attrs.frozen
class Check:
    """Result of :func:`check`: the conflicts (empty = compatible) and my fragments whose
    deletion vectors must be merged with the latest ones before landing (rule D1)."""

    conflicts: tuple[Conflict, ...] = ()
    rebase_fragment_ids: frozenset[int] = frozenset()

    @property
    def compatible(self) -> bool:
        return not self.conflicts


def modified_fragment_ids(op: Operation) -> frozenset[int]:
    """Existing fragments an operation changes in place or removes (empty for the rest).

    Delete/Update: updated and removed ids; Rewrite: old fragments; DataReplacement:
    replaced fragments; Merge: every fragment it lists.
    """
    if isinstance(op, Delete):
        return frozenset(f.id for f in op.updated_fragments) | frozenset(op.deleted_fragment_ids)
    if isinstance(op, Update):
        return frozenset(f.id for f in op.updated_fragments) | frozenset(op.removed_fragment_ids)
    if isinstance(op, Rewrite):
        return op.old_fragment_ids
    if isinstance(op, DataReplacement):
        return frozenset(r.fragment_id for r in op.replacements)
    if isinstance(op, Merge):
        return frozenset(f.id for f in op.fragments)
    return frozenset()


def _removed_ids(op: Delete | Update) -> frozenset[int]:
    return frozenset(op.deleted_fragment_ids if isinstance(op, Delete) else op.removed_fragment_ids)


class _Ctx:
    """What a predicate sees; it records conflicts with :meth:`retry` / :meth:`incompatible`."""

    def __init__(
        self, mine: Transaction, other: Transaction, version: int, lookup: FragmentLookup | None
    ) -> None:
        self.mine = mine
        self.other = other
        self.version = version
        self.lookup = lookup
        self.conflicts: list[Conflict] = []
        self.rebase_ids: set[int] = set()
        self.rule = ""

    def _add(self, outcome: Outcome, detail: str, **ids: Iterable[int] | Iterable[str]) -> None:
        mine, other, v = self.mine.kind, self.other.kind, self.version
        if outcome is Outcome.RETRYABLE:
            head = f"This {mine} transaction was preempted by concurrent transaction {other}"
        else:
            head = f"This {mine} transaction is incompatible with concurrent transaction {other}"
        head += f" at version {v}"
        self.conflicts.append(
            Conflict(
                outcome=outcome,
                rule=self.rule,
                version=v,
                read_version=self.mine.read_version,
                mine=mine,
                other=other,
                reason=f"{head} ({self.rule}: {detail})." if detail else f"{head} ({self.rule}).",
                fragment_ids=frozenset(int(i) for i in ids.get("fragment_ids", ())),
                keys=frozenset(str(k) for k in ids.get("keys", ())),
                field_ids=frozenset(int(i) for i in ids.get("field_ids", ())),
                index_names=frozenset(str(n) for n in ids.get("index_names", ())),
                other_uuid=self.other.uuid,
            )
        )

    def retry(self, detail: str = "", **ids: Iterable[int] | Iterable[str]) -> None:
        self._add(Outcome.RETRYABLE, detail, **ids)

    def incompatible(self, detail: str = "", **ids: Iterable[int] | Iterable[str]) -> None:
        self._add(Outcome.INCOMPATIBLE, detail, **ids)


def _op(op: Operation, cls: type[_T]) -> _T:
    if not isinstance(op, cls):  # the matrix is keyed by kind, so this cannot happen
        raise TypeError(f"expected {cls.__name__}, got {type(op).__name__}")
    return op


# ---- config / metadata helpers -------------------------------------------------------------


def _config_edits(op: Operation) -> tuple[frozenset[str], frozenset[str]]:
    """(upserted, deleted) config keys of an Overwrite / UpdateConfig (Lance's view)."""
    if isinstance(op, Overwrite):
        return frozenset(op.config_upserts), frozenset()
    if isinstance(op, UpdateConfig) and op.config_updates is not None:
        return op.config_updates.upserted_keys, op.config_updates.deleted_keys
    return frozenset(), frozenset()


def _map_edits(m: UpdateMap | None) -> tuple[frozenset[str], frozenset[str]]:
    if m is None:
        return frozenset(), frozenset()
    return m.upserted_keys, m.deleted_keys


def _key_clash(
    a: tuple[frozenset[str], frozenset[str]], b: tuple[frozenset[str], frozenset[str]]
) -> frozenset[str]:
    """Keys upserted by one side and upserted or deleted by the other."""
    (a_up, a_del), (b_up, b_del) = a, b
    return (a_up & (b_up | b_del)) | (b_up & a_del)


def _changes_schema_or_field_metadata(op: UpdateConfig) -> bool:
    return op.schema_metadata_updates is not None or bool(op.field_metadata_updates)


def _field_ids(op: UpdateConfig) -> frozenset[int]:
    return frozenset(fid for fid, _ in op.field_metadata_updates)


# ---- predicates (one per rule code) ------------------------------------------------------------


def _d1(c: _Ctx) -> None:
    mine = c.mine.operation
    other = c.other.operation
    if not isinstance(mine, (Delete, Update)) or not isinstance(other, (Delete, Update)):
        raise TypeError("D1 applies to Delete/Update pairs only")
    mine_ids = modified_fragment_ids(mine)
    other_updated = {f.id: f for f in other.updated_fragments}
    other_removed = _removed_ids(other)
    shared = (frozenset(other_updated) | other_removed) & mine_ids
    if not shared:
        return
    if mine.affected_rows is None or not mine.updated_fragments:
        c.retry(
            f"both changed fragment(s) {sorted(shared)} and no affected_rows are known to rebase",
            fragment_ids=shared,
        )
        return
    if c.lookup is None:
        c.retry(
            f"fragment(s) {sorted(shared)} changed; read-version copies unavailable",
            fragment_ids=shared,
        )
        return
    rebase: set[int] = set()
    for fid in sorted(frozenset(other_updated) & mine_ids):
        initial = c.lookup(fid)
        if initial is None:
            continue
        theirs = other_updated[fid]
        if theirs.files != initial.files:
            c.retry(f"the data files of fragment {fid} were rewritten", fragment_ids=[fid])
            return
        if theirs.deletion_file != initial.deletion_file:
            rebase.add(fid)
    for fid in sorted(other_removed & mine_ids):
        if c.lookup(fid) is not None:
            c.retry(f"fragment {fid} was removed", fragment_ids=[fid])
            return
    c.rebase_ids |= rebase


def _o1(c: _Ctx) -> None:
    overlap = modified_fragment_ids(c.other.operation) & modified_fragment_ids(c.mine.operation)
    if overlap:
        c.retry(f"both touched fragment(s) {sorted(overlap)}", fragment_ids=overlap)


def _f1(c: _Ctx) -> None:
    mine = _op(c.mine.operation, CreateIndex)
    other = _op(c.other.operation, CreateIndex)
    same = {i.name for i in mine.new_indices} & {i.name for i in other.new_indices}
    if same:
        c.retry(f"both created index(es) named {sorted(same)}", index_names=same)


def _bitmap_union(indices: Iterable[object]) -> set[int] | None:
    out: set[int] = set()
    for idx in indices:
        bitmap = getattr(idx, "fragment_bitmap", None)
        if bitmap is None:
            return None
        out |= bitmap
    return out


def _index_vs_rewrite(c: _Ctx, index: CreateIndex, rewrite: Rewrite, moved_reason: str) -> None:
    """I1 and W1: retryable when the rewrite moved a fragment the new index covers (or the
    index covers unknown fragments). ``moved_reason`` is formatted with ``{ids}``."""
    covered = _bitmap_union(index.new_indices)
    if covered is None:
        c.retry(
            "a new index has no fragment bitmap", index_names=[i.name for i in index.new_indices]
        )
        return
    moved = rewrite.old_fragment_ids & covered
    if moved:
        c.retry(moved_reason.format(ids=sorted(moved)), fragment_ids=moved)


def _i1(c: _Ctx) -> None:
    mine = _op(c.mine.operation, CreateIndex)
    other = _op(c.other.operation, Rewrite)
    _index_vs_rewrite(c, mine, other, "the rewrite moved indexed fragment(s) {ids}")


def _i2(c: _Ctx) -> None:
    a, b = c.mine.operation, c.other.operation
    index_op, repl_op = (a, b) if isinstance(a, CreateIndex) else (b, a)
    index_op = _op(index_op, CreateIndex)
    repl_op = _op(repl_op, DataReplacement)
    indexed = {f for idx in index_op.new_indices for f in idx.fields}
    replaced = {f for r in repl_op.replacements for f in r.new_file.fields}
    common = indexed & replaced
    if common:
        c.retry(f"field(s) {sorted(common)} are both indexed and replaced", field_ids=common)


def _w1(c: _Ctx) -> None:
    mine = _op(c.mine.operation, Rewrite)
    other = _op(c.other.operation, CreateIndex)
    if any(i.name == FRAG_REUSE_INDEX for i in other.new_indices):
        if len(other.new_indices) != 1 or len(other.removed_indices) != 1:
            c.incompatible(
                "a fragment-reuse index committed together with other index changes",
                index_names=[FRAG_REUSE_INDEX],
            )
        return
    _index_vs_rewrite(c, other, mine, "fragment(s) {ids} were indexed concurrently")


def _w2(c: _Ctx) -> None:
    mine = _op(c.mine.operation, Rewrite)
    other = _op(c.other.operation, Rewrite)
    overlap = mine.old_fragment_ids & other.old_fragment_ids
    if overlap:
        c.retry(f"both rewrote fragment(s) {sorted(overlap)}", fragment_ids=overlap)


def _p1(c: _Ctx) -> None:
    mine = _op(c.mine.operation, DataReplacement)
    other = _op(c.other.operation, DataReplacement)
    for r in mine.replacements:
        for o in other.replacements:
            if r.fragment_id != o.fragment_id:
                continue
            common = set(r.new_file.fields) & set(o.new_file.fields)
            if common:
                c.retry(
                    f"both replaced field(s) {sorted(common)} of fragment {r.fragment_id}",
                    fragment_ids=[r.fragment_id],
                    field_ids=common,
                )
                return


def _k(c: _Ctx) -> None:
    clash = _key_clash(_config_edits(c.mine.operation), _config_edits(c.other.operation))
    if clash:
        c.incompatible(f"both changed config key(s) {sorted(clash)}", keys=clash)


def _k2(c: _Ctx) -> None:
    _k(c)
    if not c.conflicts:
        c.retry("a concurrent Overwrite replaced the table")


def _c1(c: _Ctx) -> None:
    mine = _op(c.mine.operation, UpdateConfig)
    if _changes_schema_or_field_metadata(mine):
        c.incompatible(
            "schema/field metadata edits cannot survive an Overwrite", field_ids=_field_ids(mine)
        )
        return
    _k(c)


def _c2(c: _Ctx) -> None:
    mine = _op(c.mine.operation, UpdateConfig)
    other = _op(c.other.operation, UpdateConfig)
    clash = _key_clash(_config_edits(mine), _config_edits(other))
    if clash:
        c.incompatible(f"both changed config key(s) {sorted(clash)}", keys=clash)
        return
    clash = _key_clash(
        _map_edits(mine.table_metadata_updates), _map_edits(other.table_metadata_updates)
    )
    if clash:
        c.incompatible(f"both changed table metadata key(s) {sorted(clash)}", keys=clash)
        return
    if mine.schema_metadata_updates is not None and other.schema_metadata_updates is not None:
        c.incompatible("both changed the schema metadata")
        return
    common = _field_ids(mine) & _field_ids(other)
    if common:
        c.incompatible(f"both changed metadata of field(s) {sorted(common)}", field_ids=common)


def _c3(c: _Ctx) -> None:
    mine = _op(c.mine.operation, UpdateConfig)
    if _changes_schema_or_field_metadata(mine):
        c.retry(
            "the schema changed under my schema/field metadata edits", field_ids=_field_ids(mine)
        )


def _c4(c: _Ctx) -> None:
    mine = _op(c.mine.operation, UpdateConfig)
    if _changes_schema_or_field_metadata(mine):
        c.incompatible(
            "schema/field metadata edits cannot survive a Restore", field_ids=_field_ids(mine)
        )


def _c5(c: _Ctx) -> None:
    other = _op(c.other.operation, UpdateConfig)
    if _changes_schema_or_field_metadata(other):
        c.retry("the other changed schema/field metadata", field_ids=_field_ids(other))


def _c6(c: _Ctx) -> None:
    other = _op(c.other.operation, UpdateConfig)
    if _changes_schema_or_field_metadata(other):
        c.incompatible("the other changed schema/field metadata", field_ids=_field_ids(other))


def _n1(c: _Ctx) -> None:
    other = c.other.operation
    if not isinstance(other, (Merge, Project)):
        raise TypeError("N1 applies to Merge/Project only")
    if not other.preserves_nullability:
        c.retry("the schema changed without preserves_nullability")


def _n2(c: _Ctx) -> None:
    mine = _op(c.mine.operation, Project)
    if not mine.preserves_nullability:
        c.retry("rows were written under the old schema and preserves_nullability is not set")


def _replaced(op: DataReplacement) -> frozenset[int]:
    return frozenset(r.fragment_id for r in op.replacements)


def _e1(c: _Ctx) -> None:
    mine = _op(c.mine.operation, DataReplacement)
    other = _op(c.other.operation, Delete)
    gone = _replaced(mine) & frozenset(other.deleted_fragment_ids)
    if gone:
        c.incompatible(f"target fragment(s) {sorted(gone)} were removed", fragment_ids=gone)


def _e2(c: _Ctx) -> None:
    mine = _op(c.mine.operation, DataReplacement)
    other = _op(c.other.operation, Update)
    targets = _replaced(mine)
    gone = targets & frozenset(other.removed_fragment_ids)
    if gone:
        c.incompatible(f"target fragment(s) {sorted(gone)} were removed", fragment_ids=gone)
        return
    changed = targets & frozenset(f.id for f in other.updated_fragments)
    if changed:
        c.retry(f"target fragment(s) {sorted(changed)} were updated", fragment_ids=changed)


def _e3(c: _Ctx) -> None:
    mine = _op(c.mine.operation, DataReplacement)
    other = _op(c.other.operation, Project)
    if not other.preserves_nullability:
        c.retry("the schema changed without preserves_nullability")
        return
    kept = {f.id for f in other.schema}
    for r in mine.replacements:
        dropped = set(r.new_file.fields) - kept
        if dropped:
            c.incompatible(
                f"target field(s) {sorted(dropped)} in fragment {r.fragment_id} were dropped",
                fragment_ids=[r.fragment_id],
                field_ids=dropped,
            )
            return


def _same_mem_wal(c: _Ctx, committed: tuple[MemWal, ...], mine: tuple[MemWal, ...]) -> bool:
    """Lance's pairwise MemWAL check; records a conflict and returns True on a clash."""
    if not committed or not mine:
        return False
    if len(committed) > 1 or len(mine) > 1:
        c.incompatible("committing more than one MemWAL at a time is not supported")
        return True
    if committed[0].id == mine[0].id:
        c.incompatible(
            f"both changed MemWAL {committed[0].id.region}/{committed[0].id.generation}",
            keys=[f"{committed[0].id.region}/{committed[0].id.generation}"],
        )
        return True
    return False


def _m1(c: _Ctx) -> None:
    mine = _op(c.mine.operation, Update)
    other = _op(c.other.operation, UpdateMemWalState)
    merging = () if mine.mem_wal_to_merge is None else (mine.mem_wal_to_merge,)
    if not _same_mem_wal(c, other.added, merging):
        _same_mem_wal(c, other.updated, merging)


def _m2(c: _Ctx) -> None:
    other = _op(c.other.operation, Update)
    if other.mem_wal_to_merge is None:
        c.incompatible("the Update merged no MemWAL")


def _m3(c: _Ctx) -> None:
    mine = _op(c.mine.operation, UpdateMemWalState)
    other = _op(c.other.operation, UpdateMemWalState)
    if not (other.added or other.updated) or not (mine.added or mine.updated):
        return
    for committed, to_commit in (
        (other.added, mine.added),
        (other.added, mine.updated),
        (other.updated, mine.added),
        (other.updated, mine.updated),
    ):
        if _same_mem_wal(c, committed, to_commit):
            return


def _b1(c: _Ctx) -> None:
    mine = _op(c.mine.operation, UpdateBases)
    other = _op(c.other.operation, UpdateBases)
    for new in mine.new_bases:
        for old in other.new_bases:
            if new.id != 0 and new.id == old.id:
                c.incompatible(f"both added base path id {new.id}", keys=[str(new.id)])
                return
            if new.name is not None and new.name == old.name:
                c.incompatible(f"both added base path name {new.name!r}", keys=[new.name])
                return
            if new.path == old.path:
                c.incompatible(f"both added base path {new.path!r}", keys=[new.path])
                return


def _u1(c: _Ctx) -> None:
    reason = upsert_conflict(c.mine.operation, c.other.operation)
    if reason is not None:
        c.retry(reason)


_PREDICATES: Mapping[str, Callable[[_Ctx], None]] = MappingProxyType(
    {
        "D1": _d1,
        "O1": _o1,
        "F1": _f1,
        "I1": _i1,
        "I2": _i2,
        "W1": _w1,
        "W2": _w2,
        "P1": _p1,
        "K": _k,
        "K2": _k2,
        "C1": _c1,
        "C2": _c2,
        "C3": _c3,
        "C4": _c4,
        "C5": _c5,
        "C6": _c6,
        "N1": _n1,
        "N2": _n2,
        "E1": _e1,
        "E2": _e2,
        "E3": _e3,
        "M1": _m1,
        "M2": _m2,
        "M3": _m3,
        "B1": _b1,
        "U1": _u1,
    }
)


def check(
    mine: Transaction,
    other: Transaction,
    *,
    other_version: int,
    initial_fragments: FragmentLookup | None = None,
) -> Check:
    """Evaluate the matrix rule for my transaction after ``other`` (committed at
    ``other_version``).

    ``initial_fragments`` returns my fragments as of my read version; rule D1 needs it to
    decide whether a concurrent Delete/Update on a shared fragment can be rebased (only
    when my Delete/Update carries ``affected_rows``). Without it such cases are retryable.
    """
    ctx = _Ctx(mine, other, other_version, initial_fragments)
    rule: Rule | None = MATRIX.get((mine.kind, other.kind))
    if rule is None:  # an operation kind newer than this matrix: be conservative
        ctx.rule = "UNKNOWN"
        ctx.incompatible("no conflict rule for this pair of operation kinds")
        return Check(tuple(ctx.conflicts))
    ctx.rule = rule.code
    if rule.outcome is Outcome.RETRYABLE:
        ctx.retry()
    elif rule.outcome is Outcome.INCOMPATIBLE:
        ctx.incompatible()
    elif rule.outcome is None:
        _PREDICATES[rule.code](ctx)
    if not ctx.conflicts and rule.code != "U1" and isinstance(mine.operation, Update):
        ctx.rule = "U1"  # an upsert also checks the keys it inserts (after D1 etc.)
        _u1(ctx)
    return Check(tuple(ctx.conflicts), frozenset(ctx.rebase_ids))


def detect(
    mine: Transaction,
    other: Transaction,
    *,
    other_version: int,
    initial_fragments: FragmentLookup | None = None,
) -> tuple[Conflict, ...]:
    """The conflicts between my transaction and ``other`` (empty: compatible)."""
    return check(
        mine, other, other_version=other_version, initial_fragments=initial_fragments
    ).conflicts


def unreadable_conflict(
    mine: Transaction, version: int, error: BaseException, *, other_uuid: str | None = None
) -> Conflict:
    """The conservative conflict for a committed version whose transaction cannot be read,
    decoded, or carries an operation this library does not know."""
    return Conflict(
        outcome=Outcome.INCOMPATIBLE,
        rule="UNREADABLE",
        version=version,
        read_version=mine.read_version,
        mine=mine.kind,
        other=None,
        reason=(
            f"This {mine.kind} transaction cannot be checked against version {version}: its "
            f"transaction is unreadable or unknown ({type(error).__name__}: {error})."
        ),
        other_uuid=other_uuid,
    )


def missing_history_conflict(
    mine: Transaction, version: int, error: BaseException | None = None
) -> Conflict:
    """The conflict for a version my transaction must be checked against (or its read
    version) that is missing from the history: cleaned up, deleted, or gone while read.

    Missing history is never "no conflict": the transaction cannot be proved safe.
    """
    cause = "" if error is None else f" ({type(error).__name__}: {error})"
    return Conflict(
        outcome=Outcome.INCOMPATIBLE,
        rule="MISSING",
        version=version,
        read_version=mine.read_version,
        mine=mine.kind,
        other=None,
        reason=(
            f"This {mine.kind} transaction (read version {mine.read_version}) cannot be "
            f"checked: version {version} is missing from the history (cleaned up?){cause}."
        ),
    )
