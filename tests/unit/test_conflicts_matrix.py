"""The conflict matrix as data: shape, docs in sync, pylance-14 corrections present."""

from __future__ import annotations

from pathlib import Path

import pytest

from txn_engine.conflicts import matrix as m
from txn_engine.ops import OPERATION_KINDS

DOCS = Path(__file__).resolve().parents[2] / "docs" / "conflicts.md"


def test_every_ordered_pair_has_exactly_one_rule() -> None:
    assert m.KINDS == OPERATION_KINDS  # rows/columns follow transaction.proto order
    assert set(m.MATRIX) == {(a, b) for a in OPERATION_KINDS for b in OPERATION_KINDS}
    for rule in m.MATRIX.values():
        assert rule in (m.COMPATIBLE, m.RETRYABLE, m.INCOMPATIBLE) or rule.code in m.PREDICATES


def test_constant_rules_have_outcomes_and_predicates_do_not() -> None:
    assert m.COMPATIBLE.outcome is m.Outcome.COMPATIBLE
    assert m.RETRYABLE.outcome is m.Outcome.RETRYABLE
    assert m.INCOMPATIBLE.outcome is m.Outcome.INCOMPATIBLE
    for rule in m.PREDICATES.values():
        assert rule.is_predicate, rule.code
        assert rule.summary


def test_every_predicate_is_used_somewhere() -> None:
    used = {r.code for r in m.MATRIX.values() if r.is_predicate}
    assert used == set(m.PREDICATES)


def test_rule_for_rejects_unknown_kind() -> None:
    assert m.rule_for("Append", "Overwrite") is m.INCOMPATIBLE
    with pytest.raises(KeyError):
        m.rule_for("Append", "Frobnicate")


@pytest.mark.parametrize(
    ("mine", "other", "code"),
    [
        # corrections measured against pylance 14.0.2 (differ from the Lance 1.0 digest)
        ("Append", "Merge", "N1"),
        ("Append", "Project", "N1"),
        ("Update", "Project", "N1"),
        ("Project", "Append", "N2"),
        ("Project", "Update", "N2"),
        ("Project", "DataReplacement", "N2"),
        ("CreateIndex", "CreateIndex", "F1"),
        ("Overwrite", "Overwrite", "K2"),
        ("UpdateConfig", "UpdateConfig", "C2"),
        ("UpdateConfig", "Merge", "C3"),
        ("UpdateConfig", "Restore", "C4"),
        ("Merge", "UpdateConfig", "C5"),
        ("Restore", "UpdateConfig", "C6"),
        ("DataReplacement", "Delete", "E1"),
        ("DataReplacement", "Update", "E2"),
        ("DataReplacement", "Project", "E3"),
        ("DataReplacement", "Merge", "R"),
        # digest rules kept
        ("Delete", "Delete", "D1"),
        ("Update", "Delete", "D1"),
        ("Delete", "Rewrite", "O1"),
        ("Rewrite", "Rewrite", "W2"),
        ("Rewrite", "CreateIndex", "W1"),
        ("CreateIndex", "Rewrite", "I1"),
        ("CreateIndex", "DataReplacement", "I2"),
        ("DataReplacement", "CreateIndex", "I2"),
        ("Merge", "Project", "X"),
        ("Append", "Overwrite", "X"),
        ("Overwrite", "Append", "✓"),
        ("Restore", "Overwrite", "✓"),
        ("UpdateBases", "UpdateBases", "B1"),
        ("UpdateMemWalState", "UpdateMemWalState", "M3"),
    ],
)
def test_cells(mine: str, other: str, code: str) -> None:
    assert m.MATRIX[(mine, other)].code == code


def test_pylance14_corrections_are_marked() -> None:
    for code in ("F1", "K2", "C2", "C3", "C4", "C5", "C6", "N1", "N2", "E1", "E2", "E3"):
        assert m.PREDICATES[code].source == "pylance14"
    for code in ("D1", "O1", "I1", "I2", "W1", "W2", "P1", "K", "C1", "M1", "M2", "M3", "B1"):
        assert m.PREDICATES[code].source == "lance"


def test_clone_row_is_all_compatible() -> None:
    assert all(m.MATRIX[("Clone", other)] is m.COMPATIBLE for other in OPERATION_KINDS)


def test_rendered_table_lists_every_cell() -> None:
    text = m.render_markdown()
    rows = [line for line in text.splitlines() if line.startswith("| **")]
    assert len(rows) == 15
    for mine, line in zip(OPERATION_KINDS, rows, strict=True):
        cells = [c.strip() for c in line.strip("|").split("|")][1:]
        assert cells == [m.MATRIX[(mine, other)].code for other in OPERATION_KINDS]
    for code in m.PREDICATES:
        assert f"| {code} |" in text


def test_docs_conflicts_md_is_rendered_from_the_table() -> None:
    assert m.sync_docs(DOCS, check=True), (
        "docs/conflicts.md is out of date: run `python -m txn_engine.conflicts docs/conflicts.md`"
    )


def test_sync_docs_rewrites_a_stale_section(tmp_path: Path) -> None:
    doc = tmp_path / "c.md"
    doc.write_text(f"intro\n{m.DOCS_BEGIN}\nstale\n{m.DOCS_END}\noutro\n", encoding="utf-8")
    assert not m.sync_docs(doc, check=True)
    assert "stale" in doc.read_text(encoding="utf-8")
    assert not m.sync_docs(doc)
    text = doc.read_text(encoding="utf-8")
    assert "stale" not in text
    assert text.startswith("intro\n")
    assert text.endswith("outro\n")
    assert m.render_markdown() in text
    assert m.sync_docs(doc, check=True)


def test_sync_docs_requires_markers(tmp_path: Path) -> None:
    doc = tmp_path / "c.md"
    doc.write_text("no markers\n", encoding="utf-8")
    with pytest.raises(ValueError, match="markers"):
        m.sync_docs(doc)
