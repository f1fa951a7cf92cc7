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

from collections.abc import Sequence

import attrs

from txn_engine._proto import table_pb2, transaction_pb2
from txn_engine.builder import handler_for
from txn_engine.codec import operation_kind_of, transaction_from_proto
from txn_engine.conflicts.detect import (
    Conflict,
    FragmentLookup,
    check,
    missing_history_conflict,
    unreadable_conflict,
)
from txn_engine.conflicts.matrix import MATRIX, Outcome
from txn_engine.conflicts.rebase import ConflictOptions, DeletionReader, Rebased, rebase
from txn_engine.errors import ObjectNotFoundError, VersionNotFoundError
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


def plan_retry(
    txn: Transaction,
    winners: Sequence[Winner],
    *,
    latest_version: int,
    latest_fragments: Sequence[table_pb2.DataFragment],
    initial_fragments: FragmentLookup,
    read_dv: DeletionReader,
    options: ConflictOptions | None = None,
) -> Rebased | Conflict:
    """``txn`` moved on top of ``winners`` (ascending, ending at ``latest_version`` whose
    fragments are ``latest_fragments``), or the first conflict. ``initial_fragments`` looks
    up my fragments as of my read version; ``read_dv`` reads a deletion vector."""
    options = options or ConflictOptions()
    mine = txn
    rebase_ids: set[int] = set()
    for winner in winners:
        pb = winner.transaction
        if pb is not None and always_compatible(mine.kind, operation_kind_of(pb)):
            continue  # decided by the kinds alone: the other's content is not needed
        if pb is None:
            return _unreadable(mine, winner)
        try:
            other = transaction_from_proto(pb)
        except Exception as exc:  # undecodable or unknown operation: conservative conflict
            return unreadable_conflict(mine, winner.version, exc, other_uuid=pb.uuid)
        result = check(
            mine, other, other_version=winner.version, initial_fragments=initial_fragments
        )
        if result.conflicts and options.derive_affected_rows:
            derived = handler_for(mine.operation).with_derived_rows(
                mine, [c.rule for c in result.conflicts], initial_fragments, read_dv
            )
            if derived is not None:
                mine = derived
                result = check(
                    mine, other, other_version=winner.version, initial_fragments=initial_fragments
                )
        if result.conflicts:
            return result.conflicts[0]
        rebase_ids |= result.rebase_fragment_ids
    return rebase(
        mine,
        latest_version=latest_version,
        latest_fragments=latest_fragments,
        rebase_fragment_ids=frozenset(rebase_ids),
        initial_fragments=initial_fragments if rebase_ids else None,
        read_dv=read_dv,
    )
