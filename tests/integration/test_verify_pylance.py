"""txn_engine.verify on histories pylance 14.0.2 wrote: a good one passes, and a gap, a
duplicated transaction or a corrupt manifest in one is caught (``txn-engine verify`` too)."""

from __future__ import annotations

import shutil
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from txn_engine.apps.cli import main
from txn_engine.format.naming import list_versions
from txn_engine.storage import open_storage
from txn_engine.verify import verify

pytestmark = pytest.mark.pylance


def _pylance_dataset(path: Path) -> str:
    uri = str(path)
    lance.write_dataset(pa.table({"a": list(range(10))}), uri)
    lance.write_dataset(pa.table({"a": list(range(10))}), uri, mode="append")
    lance.dataset(uri).delete("a < 3")
    return uri


def test_passes_on_a_pylance_history(tmp_path: Path) -> None:
    report = verify(_pylance_dataset(tmp_path / "ds"), deep=True, data_files=True)
    assert report.ok, report.findings
    assert report.findings == ()
    assert report.versions == 3
    assert report.live_rows == 14


def test_finds_a_gap_and_a_duplicated_transaction(tmp_path: Path) -> None:
    uri = _pylance_dataset(tmp_path / "ds")
    entries = list_versions(open_storage(uri))
    # copy version 3's manifest to version 5: a gap (no 4) and a uuid landing twice
    v5 = entries[-1].name.replace(
        str((1 << 64) - 1 - 3).zfill(20), str((1 << 64) - 1 - 5).zfill(20)
    )
    shutil.copy(Path(uri) / "_versions" / entries[-1].name, Path(uri) / "_versions" / v5)
    report = verify(uri)
    invariants = {f.invariant for f in report.findings}
    assert {"no-gaps", "exactly-once", "version-field"} <= invariants
    assert not report.ok
    assert main(["verify", uri]) == 1


def test_finds_a_corrupt_manifest(tmp_path: Path) -> None:
    uri = _pylance_dataset(tmp_path / "ds")
    entries = list_versions(open_storage(uri))
    path = Path(uri) / "_versions" / entries[1].name
    path.write_bytes(path.read_bytes()[:-7])
    report = verify(uri)
    assert [f.invariant for f in report.findings] == ["manifest-decodes"]
    assert report.findings[0].version == 2


def test_cli_json_and_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = _pylance_dataset(tmp_path / "ds")
    assert main(["verify", uri, "--json", "--deep", "--data-files"]) == 0
    assert '"ok": true' in capsys.readouterr().out
    assert main(["verify", str(tmp_path / "nothing")]) == 1
