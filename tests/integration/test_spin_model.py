"""Model-check the commit protocol (models/commit_protocol.pml) with spin."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

MODEL = Path(__file__).resolve().parents[2] / "models" / "commit_protocol.pml"


def _check(tmp_path: Path, *defines: str) -> str:
    spin = shutil.which("spin")
    assert spin is not None, "spin is required (scripts/install_system_deps.sh installs it)"
    subprocess.run(
        [spin, *defines, "-a", str(MODEL)], cwd=tmp_path, check=True, capture_output=True
    )
    subprocess.run(
        ["gcc", "-O2", "-DSAFETY", "-o", "pan", "pan.c"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    run = subprocess.run(
        ["./pan", "-m100000"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    return run.stdout


@pytest.mark.slow
def test_commit_protocol_holds_for_every_interleaving(tmp_path: Path) -> None:
    out = _check(tmp_path)
    assert "errors: 0" in out, out
    assert "states, stored" in out


@pytest.mark.slow
def test_model_finds_double_commit_without_uuid_dedup(tmp_path: Path) -> None:
    out = _check(tmp_path, "-DNO_DEDUP")
    assert "assertion violated (count<=1)" in out, out
