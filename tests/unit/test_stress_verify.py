"""txn-engine stress and verify: the showcase run passes, and the checker catches breakage."""

from __future__ import annotations

import shutil
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from txn_engine.cli import main
from txn_engine.format.naming import list_versions
from txn_engine.storage import open_storage
from txn_engine.stress import run_stress
from txn_engine.verify import verify


def test_stress_with_lost_responses_lands_every_commit_exactly_once(tmp_path: Path) -> None:
    report = run_stress(
        str(tmp_path / "ds"), writers=3, commits=8, fault_rate=0.3, seed=7, progress=None
    )
    assert report.ok, report.render()
    assert report.committed == 24
    assert report.failed == 0
    assert report.pylance_rows == report.expected_rows == report.txn_engine_rows
    assert report.attempts >= report.committed
    assert len(list_versions(open_storage(str(tmp_path / "ds")))) == 25  # seed + 24


def test_stress_cli_exit_code_and_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["stress", str(tmp_path / "ds"), "--writers", "2", "--commits", "4", "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert '"ok": true' in out
    assert '"committed": 8' in out


def test_stress_refuses_an_existing_dataset(tmp_path: Path) -> None:
    lance.write_dataset(pa.table({"a": [1]}), str(tmp_path / "ds"))
    assert main(["stress", str(tmp_path / "ds"), "--writers", "1", "--commits", "1"]) == 1


def _pylance_dataset(path: Path) -> str:
    uri = str(path)
    lance.write_dataset(pa.table({"a": list(range(10))}), uri)
    lance.write_dataset(pa.table({"a": list(range(10))}), uri, mode="append")
    lance.dataset(uri).delete("a < 3")
    return uri


def test_verify_passes_on_a_pylance_history(tmp_path: Path) -> None:
    report = verify(_pylance_dataset(tmp_path / "ds"), deep=True)
    assert report.ok, report.findings
    assert report.versions == 3
    assert report.live_rows == 14


def test_verify_finds_a_gap_and_a_duplicated_transaction(tmp_path: Path) -> None:
    uri = _pylance_dataset(tmp_path / "ds")
    storage = open_storage(uri)
    entries = list_versions(storage)
    # copy version 3's manifest to version 5: a gap (no 4) and a uuid landing twice
    v5 = entries[-1].name.replace(
        str((1 << 64) - 1 - 3).zfill(20), str((1 << 64) - 1 - 5).zfill(20)
    )
    shutil.copy(Path(uri) / "_versions" / entries[-1].name, Path(uri) / "_versions" / v5)
    report = verify(uri)
    invariants = {f.invariant for f in report.findings}
    assert "no-gaps" in invariants
    assert "exactly-once" in invariants
    assert "version-field" in invariants
    assert main(["verify", uri]) == 1


def test_verify_finds_a_corrupt_manifest(tmp_path: Path) -> None:
    uri = _pylance_dataset(tmp_path / "ds")
    entries = list_versions(open_storage(uri))
    path = Path(uri) / "_versions" / entries[1].name
    path.write_bytes(path.read_bytes()[:-7])
    report = verify(uri)
    assert [f.invariant for f in report.findings] == ["manifest-decodes"]
    assert report.findings[0].version == 2
