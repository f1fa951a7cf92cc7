"""The conflict matrix as data: one rule per ordered pair of operation kinds.

``MATRIX[(mine, other)]`` is the :class:`Rule` that decides whether *my* transaction (the
one being committed) can land after *other* (a transaction already committed at a version
newer than my read version). Kinds are the names of :data:`txn_engine.ops.OPERATION_KINDS`.

A rule is either a constant (:data:`COMPATIBLE`, :data:`RETRYABLE`, :data:`INCOMPATIBLE`)
or a named predicate (``D1``, ``O1``, ``F1``, ...) that :mod:`txn_engine.conflicts.detect`
evaluates on the two operations. Each rule's ``summary`` is what ``docs/conflicts.md``
shows; that file is rendered from this module (:func:`render_markdown`, :func:`sync_docs`;
``python -m txn_engine.conflicts``) and a test fails when they differ.

The rules follow Lance's conflict resolver (``lance-format.md`` §7.2) corrected by what
pylance 14.0.2 measurably does (``pylance14-conflict-matrix.md``: 841 ordered pairs). Rules
whose ``source`` is ``"pylance14"`` are those corrections.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

import attrs

__all__ = [
    "COMPATIBLE",
    "DOCS_BEGIN",
    "DOCS_END",
    "INCOMPATIBLE",
    "KINDS",
    "KIND_ABBREVIATIONS",
    "MATRIX",
    "PREDICATES",
    "RETRYABLE",
    "Outcome",
    "Rule",
    "render_markdown",
    "rule_for",
    "sync_docs",
]


class Outcome(enum.Enum):
    """What a rule decided for one pair of transactions."""

    COMPATIBLE = "compatible"
    """My transaction can land (possibly after a rebase)."""
    RETRYABLE = "retryable"
    """Preempted: re-read the dataset, re-plan the operation and commit again."""
    INCOMPATIBLE = "incompatible"
    """My operation can never land on top of the other one."""


@attrs.frozen
class Rule:
    """One cell rule. ``outcome`` is set for constant rules and ``None`` for predicates,
    whose outcome depends on the two operations (see :mod:`txn_engine.conflicts.detect`).

    ``source`` is ``"lance"`` (Lance's resolver, ``lance-format.md`` §7.2),
    ``"pylance14"`` (a correction measured against pylance 14.0.2) or ``"txn_engine"``
    (stricter than Lance on purpose: rule U1, concurrent upserts of one new key).
    """

    code: str
    summary: str
    outcome: Outcome | None = None
    source: str = "lance"

    @property
    def is_predicate(self) -> bool:
        return self.outcome is None


COMPATIBLE = Rule("✓", "compatible: lands (rebuilt on the latest manifest)", Outcome.COMPATIBLE)
RETRYABLE = Rule("R", "retryable: re-plan from a fresh read and commit again", Outcome.RETRYABLE)
INCOMPATIBLE = Rule("X", "incompatible: can never land on top of the other", Outcome.INCOMPATIBLE)

# ---- named predicates -------------------------------------------------------------------

D1 = Rule(
    "D1",
    "Delete/Update vs Delete/Update. Disjoint fragments: ✓. Shared fragment without "
    "`affected_rows`: R. With `affected_rows`: R if the other changed the data files of, or "
    "removed, a shared fragment; otherwise rebase (merge deletion vectors into a new `.bin`; "
    "R when both deleted/updated the same rows).",
)
O1 = Rule(
    "O1",
    "R if the fragments the other touched (Rewrite: old fragments; DataReplacement: replaced "
    "fragments; Delete/Update: updated and removed fragments) overlap the fragments I modify "
    "(the same sets for my operation); else ✓.",
)
F1 = Rule(
    "F1",
    "CreateIndex vs CreateIndex: R if both commit an index with the same name (even over "
    "disjoint fragments); different names ✓.",
    source="pylance14",
)
I1 = Rule(
    "I1",
    "CreateIndex vs Rewrite: R if one of my new indices has no fragment bitmap, or the "
    "Rewrite's old fragments intersect my indices' fragment bitmaps; else ✓.",
)
I2 = Rule(
    "I2",
    "CreateIndex vs DataReplacement (either direction): R if a replaced file's fields "
    "intersect the fields of the new indices; else ✓.",
)
W1 = Rule(
    "W1",
    "Rewrite vs CreateIndex: a committed fragment-reuse index must be exactly 1 new + 1 "
    "removed index (else X); otherwise R if one of its new indices has no fragment bitmap "
    "or its bitmaps intersect my old fragments; else ✓.",
)
W2 = Rule("W2", "Rewrite vs Rewrite: R if the old-fragment sets overlap; else ✓.")
P1 = Rule(
    "P1",
    "DataReplacement vs DataReplacement: R if both replace the same field in the same "
    "fragment; else ✓.",
)
K = Rule(
    "K",
    "Overwrite vs UpdateConfig: X if a config key upserted by one side is upserted or "
    "deleted by the other; else ✓.",
)
K2 = Rule(
    "K2",
    "Overwrite vs Overwrite: X on a config key conflict (as K); otherwise R.",
    source="pylance14",
)
C1 = Rule(
    "C1",
    "UpdateConfig vs Overwrite: X if I change schema or field metadata, or on a config key "
    "conflict; else ✓.",
)
C2 = Rule(
    "C2",
    "UpdateConfig vs UpdateConfig: X on a config key conflict, a table-metadata key "
    "conflict, if both change schema metadata, or both change metadata of one field; else ✓. "
    "(Delete-vs-delete of a key is fine.)",
    source="pylance14",
)
C3 = Rule(
    "C3",
    "UpdateConfig vs Merge: R if I change schema or field metadata; else ✓.",
    source="pylance14",
)
C4 = Rule(
    "C4",
    "UpdateConfig vs Restore: X if I change schema or field metadata; else ✓.",
    source="pylance14",
)
C5 = Rule(
    "C5",
    "Merge vs UpdateConfig: R if the other changed schema or field metadata; else ✓.",
    source="pylance14",
)
C6 = Rule(
    "C6",
    "Restore vs UpdateConfig: X if the other changed schema or field metadata; else ✓.",
    source="pylance14",
)
N1 = Rule(
    "N1",
    "Append/Update vs Merge/Project: R unless the other sets `preserves_nullability`; then ✓.",
    source="pylance14",
)
N2 = Rule(
    "N2",
    "Project vs Append/Update/DataReplacement: R unless I set `preserves_nullability`; then ✓.",
    source="pylance14",
)
E1 = Rule(
    "E1",
    "DataReplacement vs Delete: X if the other removed a fragment I replace; else ✓ (a new "
    "deletion vector is kept).",
    source="pylance14",
)
E2 = Rule(
    "E2",
    "DataReplacement vs Update: X if the other removed a fragment I replace, R if it "
    "updated one; else ✓.",
    source="pylance14",
)
E3 = Rule(
    "E3",
    "DataReplacement vs Project: R unless the Project sets `preserves_nullability`; then X "
    "if it dropped a field I replace; else ✓.",
    source="pylance14",
)
M1 = Rule(
    "M1",
    "Update vs UpdateMemWalState: X if the other added or updated the MemWAL my Update "
    "merges; else ✓.",
)
M2 = Rule("M2", "UpdateMemWalState vs Update: ✓ if the Update merges a MemWAL; else X.")
M3 = Rule(
    "M3",
    "UpdateMemWalState vs UpdateMemWalState: ✓ if either only trims (no added/updated); X "
    "if both add/update the same MemWAL id; else ✓.",
)
B1 = Rule(
    "B1",
    "UpdateBases vs UpdateBases: X if two new bases share a non-zero id, a name or a path; else ✓.",
)

U1 = Rule(
    "U1",
    "Update vs Append (and after D1, Update vs Update): ✓, unless my Update is an upsert "
    "that records the keys it inserts (txn_engine's merge_insert); then R if the other "
    "may hold one of those keys: an Append adding rows, an Update adding rows without an "
    "inserted-keys filter, or one whose filter may contain one of my keys.",
    source="txn_engine",
)

#: Every named predicate, by code.
PREDICATES: Mapping[str, Rule] = MappingProxyType(
    {
        r.code: r
        for r in (
            D1,
            O1,
            F1,
            I1,
            I2,
            W1,
            W2,
            P1,
            K,
            K2,
            C1,
            C2,
            C3,
            C4,
            C5,
            C6,
            N1,
            N2,
            E1,
            E2,
            E3,
            M1,
            M2,
            M3,
            B1,
            U1,
        )
    }
)

#: Short column/row labels used in the rendered table.
KIND_ABBREVIATIONS: Mapping[str, str] = MappingProxyType(
    {
        "Append": "Append",
        "Delete": "Delete",
        "Overwrite": "Overwrite",
        "CreateIndex": "CreateIndex",
        "Rewrite": "Rewrite",
        "Merge": "Merge",
        "Restore": "Restore",
        "ReserveFragments": "Rsv",
        "Update": "Update",
        "Project": "Project",
        "UpdateConfig": "Cfg",
        "DataReplacement": "DRep",
        "UpdateMemWalState": "MemWal",
        "Clone": "Clone",
        "UpdateBases": "Bases",
    }
)

_Y, _R, _X = COMPATIBLE, RETRYABLE, INCOMPATIBLE

# Rows: mine. Columns (in this order): Append, Delete, Overwrite, CreateIndex, Rewrite,
# Merge, Restore, ReserveFragments, Update, Project, UpdateConfig, DataReplacement,
# UpdateMemWalState, Clone, UpdateBases (= OPERATION_KINDS; a test checks they agree; a pair
# of kinds without a rule is treated as incompatible by detection).
_ROWS: Mapping[str, tuple[Rule, ...]] = MappingProxyType({
    #                    App Del Ovw  CIdx Rwr Mrg Rst Rsv Upd Prj Cfg DRep MemW Cln Bas
    "Append":           (_Y, _Y, _X, _Y, _Y, N1, _X, _Y, _Y, N1, _Y, _Y, _X, _Y, _Y),
    "Delete":           (_Y, D1, _X, _Y, O1, _R, _X, _Y, D1, _Y, _Y, O1, _X, _Y, _Y),
    "Overwrite":        (_Y, _Y, K2, _Y, _Y, _Y, _Y, _Y, _Y, _Y, K,  _Y, _X, _Y, _Y),
    "CreateIndex":      (_Y, _Y, _X, F1, I1, _Y, _X, _Y, _Y, _Y, _Y, I2, _X, _Y, _Y),
    "Rewrite":          (_Y, O1, _X, W1, W2, _R, _X, _Y, O1, _Y, _Y, O1, _Y, _Y, _Y),
    "Merge":            (_R, _R, _X, _Y, _R, _R, _X, _Y, _R, _X, C5, _R, _X, _Y, _Y),
    "Restore":          (_Y, _Y, _Y, _Y, _Y, _Y, _Y, _Y, _Y, _Y, C6, _Y, _X, _Y, _Y),
    "ReserveFragments": (_Y, _Y, _X, _Y, _Y, _Y, _X, _Y, _Y, _Y, _Y, _Y, _Y, _Y, _Y),
    "Update":           (U1, D1, _X, _Y, O1, _R, _X, _Y, D1, N1, _Y, O1, M1, _Y, _Y),
    "Project":          (N2, _Y, _X, _Y, _Y, _R, _X, _Y, N2, _R, _Y, N2, _X, _Y, _Y),
    "UpdateConfig":     (_Y, _Y, C1, _Y, _Y, C3, C4, _Y, _Y, _Y, C2, _Y, _Y, _Y, _Y),
    "DataReplacement":  (_Y, E1, _X, I2, O1, _R, _X, _Y, E2, E3, _Y, P1, _X, _Y, _Y),
    "UpdateMemWalState":(_X, _X, _X, _Y, _Y, _X, _X, _Y, M2, _X, _Y, _X, M3, _X, _Y),
    "Clone":            (_Y, _Y, _Y, _Y, _Y, _Y, _Y, _Y, _Y, _Y, _Y, _Y, _Y, _Y, _Y),
    "UpdateBases":      (_Y, _Y, _Y, _Y, _Y, _Y, _Y, _Y, _Y, _Y, _Y, _Y, _Y, _Y, B1),
})  # fmt: skip


#: The kinds the matrix has rules for (rows and columns, in this order).
KINDS: tuple[str, ...] = tuple(_ROWS)


def _build() -> Mapping[tuple[str, str], Rule]:
    table: dict[tuple[str, str], Rule] = {}
    for mine, row in _ROWS.items():
        for other, rule in zip(KINDS, row, strict=True):
            table[(mine, other)] = rule
    return MappingProxyType(table)


#: ``MATRIX[(mine_kind, other_kind)]``: the rule for my transaction after ``other``.
MATRIX: Mapping[tuple[str, str], Rule] = _build()


def rule_for(mine_kind: str, other_kind: str) -> Rule:
    """The rule for (my kind, committed kind). Raises KeyError for a kind without rules."""
    return MATRIX[(mine_kind, other_kind)]


# ---- rendering ------------------------------------------------------------------------

DOCS_BEGIN = "<!-- BEGIN GENERATED MATRIX (txn_engine.conflicts.matrix.render_markdown) -->"
DOCS_END = "<!-- END GENERATED MATRIX -->"


def render_markdown() -> str:
    """The matrix and the rule legend as Markdown (what ``docs/conflicts.md`` embeds)."""
    abbrev = KIND_ABBREVIATIONS
    lines = [
        "Rows: my operation (being committed). Columns: the operation already committed at a "
        "version newer than my read version.",
        "",
        "| mine \\ other | " + " | ".join(abbrev[k] for k in KINDS) + " |",
        "|---|" + "---|" * len(KINDS),
    ]
    for mine in KINDS:
        cells = " | ".join(MATRIX[(mine, other)].code for other in KINDS)
        lines.append(f"| **{mine}** | {cells} |")
    lines += [
        "",
        "Abbreviations: "
        + ", ".join(f"{short} = {kind}" for kind, short in abbrev.items() if short != kind)
        + ".",
        "",
        "| rule | meaning | source |",
        "|---|---|---|",
    ]
    for rule in (COMPATIBLE, RETRYABLE, INCOMPATIBLE, *PREDICATES.values()):
        source = {
            "pylance14": "pylance 14.0.2 (measured)",
            "txn_engine": "txn_engine (stricter than Lance: no duplicate upserted keys)",
        }.get(rule.source, "Lance resolver")
        lines.append(f"| {rule.code} | {rule.summary} | {source} |")
    return "\n".join(lines) + "\n"


def _spliced(text: str) -> str:
    start = text.find(DOCS_BEGIN)
    end = text.find(DOCS_END)
    if start < 0 or end < start:
        raise ValueError(f"the document lacks the markers {DOCS_BEGIN!r} ... {DOCS_END!r}")
    head = text[: start + len(DOCS_BEGIN)]
    return f"{head}\n{render_markdown()}{text[end:]}"


def sync_docs(path: str | Path, *, check: bool = False) -> bool:
    """Re-render the generated section of ``path`` (``docs/conflicts.md``).

    Returns whether the file was already up to date. With ``check`` the file is not
    written (use it in tests and CI).
    """
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    new = _spliced(text)
    if new == text:
        return True
    if not check:
        p.write_text(new, encoding="utf-8")
    return False
