"""txn_engine.verify on histories pylance 14.0.2 wrote: a good one passes, and a gap, a
duplicated transaction or a corrupt manifest in one is caught (``txn-engine verify`` too)."""

from __future__ import annotations

import shutil
from datetime import timedelta
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


def _tagged_history(path: Path) -> str:
    uri = str(path)
    lance.write_dataset(pa.table({"a": list(range(5))}), uri)
    for _ in range(5):
        lance.write_dataset(pa.table({"a": list(range(5))}), uri, mode="append")
    lance.dataset(uri).tags.create("release-1", 3)
    return uri


def test_history_our_cleanup_removed_stays_cleaned_up_after_the_tag_goes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tag pinned version 3 across txn_engine's cleanup (versions 4 and 5 removed above
    it); pylance deletes the tag: the gap is still told from damage (the cleanup recorded
    it under ``_txn_engine/gaps/`` before removing anything)."""
    from txn_engine.retention import cleanup

    uri = _tagged_history(tmp_path / "ds")
    cleanup(uri, older_than=timedelta(0), progress=False)
    assert [v["version"] for v in lance.dataset(uri).versions()] == [3, 6]
    lance.dataset(uri).tags.delete("release-1")
    report = verify(uri, deep=True, data_files=True)
    assert report.ok, report.findings
    assert [(f.version, f.invariant, f.severity) for f in report.findings] == [
        (3, "cleaned-up", "info"),
        (6, "cleaned-up", "info"),
    ]
    assert main(["verify", uri]) == 0
    capsys.readouterr()
    # damage is still damage: a manifest lost from the middle of what is left
    lance.write_dataset(pa.table({"a": [1]}), uri, mode="append")
    lance.write_dataset(pa.table({"a": [1]}), uri, mode="append")
    (entry,) = [e for e in list_versions(open_storage(uri)) if e.version == 7]
    (Path(uri) / entry.path).unlink()
    assert [f.invariant for f in verify(uri).errors] == ["no-gaps"]


def test_a_gap_pylances_cleanup_left_is_an_error_once_its_tag_goes(tmp_path: Path) -> None:
    """pylance's cleanup leaves no record: while the tag lives, the versions below the gap
    are all pinned and verify calls it cleaned up; once the tag is deleted nothing tells the
    gap from lost versions, so it is a no-gaps error whose detail says so (docs/cleanup.md)."""
    uri = _tagged_history(tmp_path / "ds")
    ds = lance.dataset(uri)
    ds.cleanup_old_versions(older_than=timedelta(0), error_if_tagged_old_versions=False)
    assert [v["version"] for v in lance.dataset(uri).versions()] == [3, 6]
    assert not (Path(uri) / "_txn_engine").exists()  # pylance keeps no record of it
    assert verify(uri).ok
    lance.dataset(uri).tags.delete("release-1")
    (error,) = verify(uri).errors
    assert (error.version, error.invariant) == (6, "no-gaps")
    assert "versions 4..5" in error.detail
    assert "error_if_tagged_old_versions" in error.detail
