"""The retry planner: what my transaction becomes on top of the versions that won (pure).

:func:`plan_retry` takes my transaction and the versions committed since it was read (the
*winners*, in version order, each with its transaction as read from storage or the error that
kept it from being read) and decides, without I/O of its own:

* a winner whose transaction could not be read, or whose operation this library does not
  know, is a conflict (missing history is never "no conflict");
* pairs the matrix makes compatible by kinds alone need not even be decoded;
* every other pair is checked (:func:`txn_engine.conflicts.detect.check`); when
  :attr:`ConflictOptions.derive_affected_rows` is on, my operation's handler may derive
  what it affected from its own files and the pair is checked again (a Delete/Update
  without affected rows that meets only rule D1: ``Handler.with_derived_rows``);
* what survives is rebased onto the latest version by its handler (deletion-vector merge
  for Delete/Update), returning the transaction to commit and the deletion files to write
  first.

The commit loop (:mod:`txn_engine.commit`) keeps the I/O: it lists, reads the winners, calls
this, writes the pending deletion files, builds and creates the manifest.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import attrs

from txn_engine._proto import table_pb2, transaction_pb2
from txn_engine.builder import handler_for
from txn_engine.codec import operation_kind_of, transaction_from_proto
from txn_engine.conflicts.detect import (
    Check,
    Conflict,
    FragmentLookup,
    check,
    missing_history_conflict,
    unreadable_conflict,
)
from txn_engine.conflicts.isolation import READERS, SERIALIZABLE, serializable_conflict
from txn_engine.conflicts.matrix import MATRIX, Outcome
from txn_engine.conflicts.rebase import (
    ConflictOptions,
    DeletionReader,
    PendingDeletionFile,
    Rebased,
    rebase,
)
from txn_engine.conflicts.resolve import carry_into, renumber_carried, resolve
from txn_engine.conflicts.upsert import added_keys_collide
from txn_engine.errors import ObjectNotFoundError, VersionNotFoundError
from txn_engine.model import Fragment
from txn_engine.ops import Delete
from txn_engine.transaction import Transaction

__all__ = ["Winner", "always_compatible", "plan_retry"]


@attrs.frozen
class Winner:
    """A version committed after my read version: its transaction as read from storage, or
    the error that kept it from being read (then ``transaction`` is None)."""

    version: int
    transaction: transaction_pb2.Transaction | None
    error: Exception | None = None


def always_compatible(mine: str, other: str | None) -> bool:
    """Whether the matrix makes this pair compatible whatever the two operations hold (a
    constant rule: no predicate, no rebase), so the other's content need not be decoded."""
    if other is None:
        return False
    rule = MATRIX.get((mine, other))
    return rule is not None and rule.outcome is Outcome.COMPATIBLE


def _unreadable(mine: Transaction, winner: Winner) -> Conflict:
    error = winner.error
    if isinstance(error, (VersionNotFoundError, ObjectNotFoundError)):
        return missing_history_conflict(mine, winner.version, error)
    return unreadable_conflict(mine, winner.version, error or ValueError("?"), other_uuid=None)


class _Plan:
    """The planner's state over the winners: my transaction as it is rebuilt, my fragments
    as they now stand (a resolution may restate them), and what the rebase must do."""

    def __init__(self, txn: Transaction, initial: FragmentLookup, options: ConflictOptions) -> None:
        self.mine = txn
        self.initial = initial
        self.options = options
        self.overlay: dict[int, Fragment] = {}
        self.rebase_ids: set[int] = set()
        self.tolerant: set[int] = set()
        self.strict: set[int] = set()
        self.carry: set[int] = set()
        self.carry_conflict: Conflict | None = None

    def lookup(self, fragment_id: int) -> Fragment | None:
        found = self.overlay.get(fragment_id)
        return found if found is not None else self.initial(fragment_id)

    def check(self, other: Transaction, version: int, read_dv: DeletionReader) -> Check:
        result = check(self.mine, other, other_version=version, initial_fragments=self.lookup)
        derive = self.options.derive_affected_rows or self.options.rebase_rows
        if result.conflicts and derive:
            derived = handler_for(self.mine.operation).with_derived_rows(
                self.mine, [c.rule for c in result.conflicts], self.lookup, read_dv
            )
            if derived is not None:
                self.mine = derived
                result = check(
                    self.mine, other, other_version=version, initial_fragments=self.lookup
                )
        return result

    def resolve(
        self,
        other: Transaction,
        result: Check,
        version: int,
        latest: Sequence[table_pb2.DataFragment],
        read_dv: DeletionReader,
    ) -> Check:
        """``result`` after a resolution beyond Lance (unchanged when there is none)."""
        rules = [c.rule for c in result.conflicts]
        res = resolve(self.mine, other, rules, lookup=self.lookup, latest=latest, read_dv=read_dv)
        if res is None:
            return result
        self.mine = res.transaction
        self.overlay.update(res.overlay)
        self.rebase_ids -= res.dropped
        self.rebase_ids |= res.rebase_ids
        if res.carry_ids:
            self.carry |= res.carry_ids
            self.carry_conflict = self.carry_conflict or result.conflicts[0]
        if res.carry_ids or res.settled:
            return Check()
        return check(self.mine, other, other_version=version, initial_fragments=self.lookup)

    def landed(self, other: Transaction, result: Check) -> None:
        ids = result.rebase_fragment_ids
        self.rebase_ids |= ids
        both_delete = isinstance(self.mine.operation, Delete) and isinstance(
            other.operation, Delete
        )
        (self.tolerant if both_delete and self.options.rebase_rows else self.strict).update(ids)


def plan_retry(
    txn: Transaction,
    winners: Sequence[Winner],
    *,
    latest_version: int,
    latest_fragments: Sequence[table_pb2.DataFragment],
    initial_fragments: FragmentLookup,
    read_dv: DeletionReader,
    options: ConflictOptions | None = None,
    latest_max_fragment_id: int | None = None,
) -> Rebased | Conflict:
    """``txn`` moved on top of ``winners`` (ascending, ending at ``latest_version`` whose
    fragments are ``latest_fragments``), or the first conflict. ``initial_fragments`` looks
    up my fragments as of my read version; ``read_dv`` reads a deletion vector;
    ``latest_max_fragment_id`` is the latest manifest's fragment-id high-water mark (a
    Rewrite carrying deletions numbers its new fragments above it)."""
    plan = _Plan(txn, initial_fragments, options or ConflictOptions())
    for winner in winners:
        pb = winner.transaction
        serializable = plan.options.isolation == SERIALIZABLE and plan.mine.kind in READERS
        if (
            pb is not None
            and not serializable
            and always_compatible(plan.mine.kind, operation_kind_of(pb))
        ):
            continue  # decided by the kinds alone: the other's content is not needed
        if pb is None:
            return _unreadable(plan.mine, winner)
        try:
            other = transaction_from_proto(pb)
        except Exception as exc:  # undecodable or unknown operation: conservative conflict
            return unreadable_conflict(plan.mine, winner.version, exc, other_uuid=pb.uuid)
        result = plan.check(other, winner.version, read_dv)
        if result.conflicts and plan.options.rebase_rows:
            result = plan.resolve(other, result, winner.version, latest_fragments, read_dv)
        if result.conflicts and _keys_apart(plan, other, result, winner.version):
            result = Check(rebase_fragment_ids=result.rebase_fragment_ids)
        if result.conflicts:
            return result.conflicts[0]
        if serializable:
            why = serializable_conflict(plan.mine, other, winner.version, plan.options.row_matcher)
            if why is not None:
                return _not_serializable(plan.mine, other, winner.version, why)
        plan.landed(other, result)
    return _finish(plan, latest_version, latest_fragments, read_dv, latest_max_fragment_id)


def _keys_apart(plan: _Plan, other: Transaction, result: Check, version: int) -> bool:
    """Whether ``result``'s conflicts are all rule U1 and the rows ``other`` added hold
    none of the keys my upsert inserts (read with the options' key reader)."""
    reader = plan.options.key_reader
    if reader is None or any(c.rule != "U1" for c in result.conflicts):
        return False
    return not added_keys_collide(plan.mine, other, version, reader)


def _not_serializable(mine: Transaction, other: Transaction, version: int, why: str) -> Conflict:
    return Conflict.of_transaction(
        mine,
        Outcome.RETRYABLE,
        "SER",
        version,
        f"This {mine.kind} transaction is not serializable after concurrent transaction "
        f"{other.kind} at version {version}: {why}. Please retry.",
        other=other.kind,
        other_uuid=other.uuid,
    )


def _finish(
    plan: _Plan,
    latest_version: int,
    latest_fragments: Sequence[table_pb2.DataFragment],
    read_dv: DeletionReader,
    high: int | None,
) -> Rebased | Conflict:
    mine = plan.mine
    writes: tuple[PendingDeletionFile, ...] = ()
    if plan.carry:
        carried = carry_into(
            mine,
            frozenset(plan.carry),
            latest=latest_fragments,
            high=high,
            read_dv=read_dv,
            new_id=lambda: secrets.randbits(64),
        )
        if carried is None:
            assert plan.carry_conflict is not None
            return plan.carry_conflict
        mine, writes = carried
    renumbered = renumber_carried(mine, latest_fragments, high, read_dv, writes)
    if renumbered is None:
        return Conflict.of_transaction(
            mine,
            Outcome.RETRYABLE,
            "ROWS",
            latest_version,
            f"This {mine.kind} transaction numbered a rewritten fragment (to carry a "
            "deletion file) that a concurrent transaction has since used. Please retry.",
        )
    mine, writes = renumbered
    out = rebase(
        mine,
        latest_version=latest_version,
        latest_fragments=latest_fragments,
        rebase_fragment_ids=frozenset(plan.rebase_ids),
        initial_fragments=plan.lookup if plan.rebase_ids else None,
        read_dv=read_dv,
        tolerant_fragment_ids=frozenset(plan.tolerant - plan.strict),
    )
    if isinstance(out, Conflict) or not writes:
        return out
    return attrs.evolve(out, writes=writes + out.writes)
