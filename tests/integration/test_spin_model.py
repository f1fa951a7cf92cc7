"""Model-check the commit protocol (models/commit_protocol.pml) with spin."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from spin_check import check_model


def _check(tmp_path: Path, *defines: str) -> str:
    return check_model(tmp_path, *defines)


@pytest.mark.slow
def test_commit_protocol_holds_for_every_interleaving(tmp_path: Path) -> None:
    out = _check(tmp_path)
    assert "errors: 0" in out, out
    assert "states, stored" in out


@pytest.mark.slow
def test_model_finds_double_commit_without_uuid_dedup(tmp_path: Path) -> None:
    out = _check(tmp_path, "-DNO_DEDUP")
    assert "assertion violated (count<=1)" in out, out
