"""Conflict detection: pure functions from two transactions to :class:`Conflict` values.

``detect(mine, other, other_version=v)`` looks up ``MATRIX[(mine.kind, other.kind)]`` and,
for a named predicate, evaluates it on the two operations. It never raises for a conflict
and does no I/O; the commit loop decides what to raise. :func:`check` additionally returns
which of my fragments need their deletion vectors merged (rule D1) before I can land.

The predicates are the operation handlers' (:class:`txn_engine.builder.Handler`, one
module per operation family): each names its rules by code in ``Handler.rules``, for the
cells of its row of the matrix; this module is the driver that evaluates the cell's rule
on my operation's handler and turns what it records into :class:`Conflict` values. A test
checks that every predicate of the matrix has an implementation on every handler whose
row uses it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from txn_engine.builder import HANDLERS, FragmentLookup, Predicate, handler_for
from txn_engine.conflicts.matrix import MATRIX, Outcome, Rule
from txn_engine.ops import Operation
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

    @classmethod
    def of_transaction(
        cls, mine: Transaction, outcome: Outcome, rule: str, version: int, reason: str, **rest: Any
    ) -> Conflict:
        """A conflict of ``mine`` (its read version and kind filled in) with no other
        transaction to name unless ``rest`` gives one; ``rest``: the other fields."""
        rest.setdefault("other", None)
        return cls(
            outcome=outcome,
            rule=rule,
            version=version,
            read_version=mine.read_version,
            mine=mine.kind,
            reason=reason,
            **rest,
        )

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
    """Existing fragments an operation changes in place or removes (empty for the rest):
    its handler's :meth:`~txn_engine.builder.Handler.modified_fragment_ids`.

    Delete/Update: updated and removed ids; Rewrite: old fragments; DataReplacement:
    replaced fragments; Merge: every fragment it lists.
    """
    handler = HANDLERS.get(type(op))
    return frozenset() if handler is None else handler.modified_fragment_ids(op)


class _Ctx:
    """What a predicate sees (a :class:`~txn_engine.builder.RuleContext`); it records
    conflicts with :meth:`retry` / :meth:`incompatible`."""

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


#: Every rule code a handler implements -> its predicate (a test checks this equals the
#: matrix's named predicates). Detection looks predicates up on my operation's handler.
_PREDICATES: Mapping[str, Predicate] = MappingProxyType(
    {code: rule for h in HANDLERS.values() for code, rule in h.rules.items()}
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
    handler = handler_for(mine.operation)
    if rule.outcome is Outcome.RETRYABLE:
        ctx.retry()
    elif rule.outcome is Outcome.INCOMPATIBLE:
        ctx.incompatible()
    elif rule.outcome is None:
        handler.rules[rule.code](ctx)
    for code in handler.follow_up_rules:  # e.g. an upsert's key check (U1) after D1
        if not ctx.conflicts and rule.code != code:
            ctx.rule = code
            handler.rules[code](ctx)
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
    return Conflict.of_transaction(
        mine,
        Outcome.INCOMPATIBLE,
        "UNREADABLE",
        version,
        f"This {mine.kind} transaction cannot be checked against version {version}: its "
        f"transaction is unreadable or unknown ({type(error).__name__}: {error}).",
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
    return Conflict.of_transaction(
        mine,
        Outcome.INCOMPATIBLE,
        "MISSING",
        version,
        f"This {mine.kind} transaction (read version {mine.read_version}) cannot be "
        f"checked: version {version} is missing from the history (cleaned up?){cause}.",
    )
