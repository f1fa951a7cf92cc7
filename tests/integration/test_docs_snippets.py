"""Every ```python block of README.md and docs/*.md runs as written (each in a fresh
namespace, from a temporary working directory).

The documents named here are not covered yet, each with the reason: their blocks are
fragments that need outside context. Their owners make them runnable and delete the entry
(a test fails once an entry names a document that no longer has such blocks).
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOT_YET_RUNNABLE: dict[str, str] = {}
#: Documents read as one story: their blocks run in order in ONE namespace (a block uses the
#: SparkSession and the tables earlier blocks made), in one test each.
IN_ORDER = {"docs/spark.md"}
DOCS = [
    path
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    if str(path.relative_to(ROOT)) not in NOT_YET_RUNNABLE | dict.fromkeys(IN_ORDER, "")
]
_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


def _blocks() -> list[tuple[str, int, str]]:
    out = []
    for path in DOCS:
        for i, match in enumerate(_BLOCK.finditer(path.read_text(encoding="utf-8"))):
            out.append((str(path.relative_to(ROOT)), i, match.group(1)))
    return out


BLOCKS = _blocks()


def test_the_writer_docs_have_blocks() -> None:
    names = {name for name, _, _ in BLOCKS}
    assert {"README.md", "docs/writing.md"} <= names


def test_uncovered_documents_still_need_the_exception() -> None:
    for name in NOT_YET_RUNNABLE:
        text = (ROOT / name).read_text(encoding="utf-8")
        assert _BLOCK.search(text), f"{name} has no python block: drop it from NOT_YET_RUNNABLE"


@pytest.mark.parametrize(("name", "index", "code"), BLOCKS, ids=[f"{n}[{i}]" for n, i, _ in BLOCKS])
def test_block_runs(
    name: str, index: int, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"docs_snippet_{index}"}
    exec(compile(code, f"{name}[{index}]", "exec"), namespace)
    assert os.getcwd() == str(tmp_path)


@pytest.mark.pylance
@pytest.mark.parametrize("name", sorted(IN_ORDER))
def test_document_runs_in_order(
    name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every python block of ``name``, top to bottom, in one namespace; the output a
    ``# ...`` comment right below a ``print(...)`` line promises is printed. The page's own
    ``SparkSession.builder...getOrCreate()`` joins the test run's shared session when
    there is one (the ``spark`` fixture), so the run keeps one session per process."""
    if "spark" in name:
        with contextlib.suppress(pytest.FixtureLookupError):  # else the page makes one
            request.getfixturevalue("spark")
    blocks = _BLOCK.findall((ROOT / name).read_text(encoding="utf-8"))
    assert len(blocks) >= 5, f"{name}: expected its python blocks"
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "docs_document"}
    for index, code in enumerate(blocks):
        capsys.readouterr()
        exec(compile(code, f"{name}[{index}]", "exec"), namespace)
        printed = capsys.readouterr().out.splitlines()
        for promised in re.findall(r"^print\(.*\)\n# (.+)$", code, re.M):
            assert promised in printed, f"{name}[{index}] printed {printed}, not {promised!r}"
    assert os.getcwd() == str(tmp_path)


def _entry_points() -> list[str]:
    """Every ``python -m`` module of the project (a file with a ``__main__`` guard)."""
    found = set()
    for path in [*(ROOT / "benchmarks").glob("*.py"), *(ROOT / "txn_engine").rglob("*.py")]:
        if 'if __name__ == "__main__":' in path.read_text(encoding="utf-8"):
            found.add(".".join(path.relative_to(ROOT).with_suffix("").parts))
    return sorted(m.removesuffix(".__main__") for m in found)


ENTRY_POINTS = _entry_points()


def test_the_known_entry_points_are_found() -> None:
    known = {
        "benchmarks.run",
        "benchmarks.report",
        "txn_engine.conflicts",
        "txn_engine.apps.cli",
        "txn_engine.apps.stress",
    }
    assert known <= set(ENTRY_POINTS)


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_every_python_m_entry_point_has_help(module: str) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", module, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage:")
