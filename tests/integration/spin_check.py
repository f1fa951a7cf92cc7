"""Run spin on the commit-protocol model and return the verifier's report.

Shared by the model-checking tests: spin generates the verifier (``pan.c``) for
``models/commit_protocol.pml`` with the given ``-D`` defines, gcc builds it with
safety checks, and ``pan`` explores every interleaving; the tests assert on its output.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

MODEL = Path(__file__).resolve().parents[2] / "models" / "commit_protocol.pml"


def check_model(workdir: Path, *defines: str, collapse: bool = False, model: Path = MODEL) -> str:
    """Verify ``model`` (default: the commit protocol) with ``defines`` in ``workdir``;
    return pan's stdout."""
    spin = shutil.which("spin")
    assert spin is not None, "spin is required (scripts/install_system_deps.sh installs it)"
    subprocess.run([spin, *defines, "-a", str(model)], cwd=workdir, check=True, capture_output=True)
    cflags = ["-O2", "-DSAFETY", *(["-DCOLLAPSE"] if collapse else [])]
    subprocess.run(
        ["gcc", *cflags, "-o", "pan", "pan.c"], cwd=workdir, check=True, capture_output=True
    )
    run = subprocess.run(
        ["./pan", "-m100000"], cwd=workdir, capture_output=True, text=True, check=False
    )
    return run.stdout
