"""Model-check the offers protocol (models/commit_protocol.pml, -DOFFERS) with spin.

Three writers, each committing one Append; lost create responses and failed read-backs; a
writer that lost offers itself, any writer reads offers at any moment and may carry them
(or leave them out). Clean builds must verify with no error over every interleaving; each
mutation removes one rule of the protocol, and spin must find the violation it guards
against: a transaction carried twice, or a writer told "failed" whose offer landed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from spin_check import check_model

TWICE = "assertion violated (count<=1)"
FAILED_BUT_LANDED = "assertion violated ( !(failed[w])||(count==0))"


def _check(tmp_path: Path, *defines: str) -> str:
    return check_model(tmp_path, "-DOFFERS", *defines, collapse=True)


def _stored(out: str) -> int:
    found = re.search(r"(\d+) states, stored", out)
    assert found is not None, out
    return int(found.group(1))


@pytest.mark.slow
@pytest.mark.parametrize(
    "defines",
    [
        # two attempts each, offers valid for two versions
        ("-DMAXATT=2",),
        # one attempt: a writer that lost goes on only while its offer is open
        ("-DMAXATT=1",),
        # and writer 0 may offer itself before its first attempt (an early offer)
        ("-DMAXATT=1", "-DEARLY"),
    ],
    ids=["two-attempts", "one-attempt-window-wait", "early-offer"],
)
def test_offers_land_exactly_once_and_answers_are_true(
    tmp_path: Path, defines: tuple[str, ...]
) -> None:
    """No writer is carried by two versions, an acknowledged writer is in the version it
    was told, a writer told "failed" is in none, every writer gets an answer; the state
    count shows the interleavings were explored."""
    out = _check(tmp_path, *defines)
    assert "errors: 0" in out, out
    assert _stored(out) > 1_000_000, out


@pytest.mark.slow
@pytest.mark.parametrize(
    ("defines", "violation"),
    [
        # a helper that does not check the versions after the offer's read version carries
        # an offer its writer already landed
        (("-DWINDOW=3", "-DNO_CARRIED_CHECK"), TWICE),
        # a writer that gives up while its offer is open is carried after its "failed"
        (("-DMAXATT=1", "-DNO_WAIT"), FAILED_BUT_LANDED),
        # the same with an early offer (one made before any race was lost)
        (("-DMAXATT=1", "-DEARLY", "-DNO_WAIT"), FAILED_BUT_LANDED),
        # a helper that ignores the window carries an offer whose writer gave up once the
        # window had passed
        (("-DMAXATT=1", "-DWINDOW=1", "-DNO_WINDOW_CHECK"), FAILED_BUT_LANDED),
    ],
    ids=["no-carried-check", "no-window-wait", "early-no-window-wait", "no-window-check"],
)
def test_each_rule_is_needed(tmp_path: Path, defines: tuple[str, ...], violation: str) -> None:
    out = _check(tmp_path, *defines)
    assert violation in out, out
