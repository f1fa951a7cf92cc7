"""Model-check cleanup beside the commit protocol (models/commit_protocol.pml, -DCLEANER).

With leases, the cleanup marker and the re-listing before file deletes, spin finds no
violation over every interleaving of two writers (lost and failed responses included) and
a cleaner: no kept version references a missing file, no leased writer finds its history
removed, and every earlier property of the commit protocol holds. Each variant without
one of the three mechanisms shows the failure it prevents.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from spin_check import check_model


def _check(tmp_path: Path, *defines: str) -> str:
    return check_model(tmp_path, "-DCLEANER", "-DNW=2", *defines, collapse=True)


@pytest.mark.slow
def test_cleanup_with_leases_loses_nothing_in_any_interleaving(tmp_path: Path) -> None:
    out = _check(tmp_path)
    assert "errors: 0" in out, out
    assert "states, stored" in out


@pytest.mark.slow
@pytest.mark.parametrize(
    ("variant", "violation"),
    [
        ("-DNO_LEASES", "assertion violated  !(lost_file)"),
        ("-DNO_RELIST", "assertion violated  !(lost_file)"),
        ("-DNO_MARKER", "assertion violated  !(leased_lost_history)"),
    ],
)
def test_each_mechanism_is_needed(tmp_path: Path, variant: str, violation: str) -> None:
    out = _check(tmp_path, variant)
    assert violation in out, out
