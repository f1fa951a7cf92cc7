"""Model-check the namespace commit (models/namespace.pml) with spin: reservations, staged
changes, one decision, publication, roll-forward by writers and readers, snapshots, and
crashes at every step of the transaction."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from spin_check import check_model

MODEL = Path(__file__).resolve().parents[2] / "models" / "namespace.pml"


@pytest.mark.slow
def test_namespace_commit_holds_for_every_interleaving(tmp_path: Path) -> None:
    out = check_model(tmp_path, model=MODEL)
    assert "errors: 0" in out, out
    assert "states, stored" in out


@pytest.mark.slow
@pytest.mark.parametrize(
    ("define", "violated"),
    [
        ("-DNO_SETTLE", "assertion violated (in0==in1)"),  # writers ignore markers
        ("-DONE_PASS", "assertion violated (in0==in1)"),  # a snapshot of one pass splits
        ("-DPUBLISH_FIRST", "assertion violated (slot["),  # visible before the decision
    ],
)
def test_the_model_fails_without_each_mechanism(tmp_path: Path, define: str, violated: str) -> None:
    out = check_model(tmp_path, define, model=MODEL)
    assert violated in out, out
