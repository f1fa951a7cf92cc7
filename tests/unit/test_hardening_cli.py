"""Hostile tables and hostile arguments at the command line (issue 11, findings 8-10).

* one bad version (timestamp out of range, undecodable manifest, hostile data-file path)
  is reported for that version while ``log`` / ``verify`` go on with the others;
* ``stress`` validates every option before touching storage and never says PASSED for a
  run that committed nothing;
* secrets (storage options, URI user info) never reach a message, repr or report.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from txn_engine._proto import table_pb2
from txn_engine.cli import main
from txn_engine.commit import commit
from txn_engine.dataset import Dataset
from txn_engine.format.io import read_manifest, read_transaction
from txn_engine.format.manifest_file import encode_manifest_file
from txn_engine.ops import Append, Overwrite
from txn_engine.storage import open_storage
from txn_engine.testing.machine import SCHEMA
from txn_engine.testing.model import SyntheticRows
from txn_engine.transaction import Transaction
from txn_engine.verify import verify

# --------------------------------------------------------------------------- helpers


def _history(path: Path, versions: int = 3) -> str:
    """A local dataset with ``versions`` versions (Overwrite, then Appends)."""
    uri = str(path / "t.lance")
    rows = SyntheticRows()
    commit(uri, Transaction(0, Overwrite((rows.fragment([(0, 0), (1, 0)]),), SCHEMA)))
    for v in range(1, versions):
        commit(uri, Transaction(v, Append((rows.fragment([(v + 10, 0)]),))))
    return uri


def _rewrite(uri: str, version: int, edit: Callable[[table_pb2.Manifest], None]) -> None:
    """Replace the manifest of ``version`` by a copy changed by ``edit`` (same transaction)."""
    storage = open_storage(uri)
    entry, mf = read_manifest(storage, version)
    m = table_pb2.Manifest()
    m.CopyFrom(mf.manifest)
    edit(m)
    txn = read_transaction(storage, entry, mf)
    (Path(uri) / entry.path).write_bytes(encode_manifest_file(m, mf.indices, txn))


def _set_timestamp(seconds: int, nanos: int = 0) -> Callable[[table_pb2.Manifest], None]:
    def edit(m: table_pb2.Manifest) -> None:
        m.timestamp.seconds = seconds
        m.timestamp.nanos = nanos

    return edit


def _garble(uri: str, version: int) -> None:
    storage = open_storage(uri)
    entry, _ = read_manifest(storage, version)
    (Path(uri) / entry.path).write_bytes(b"not a manifest at all" * 4)


# --------------------------------------------------------------------------- finding 8


@pytest.mark.parametrize(
    ("seconds", "nanos"),
    [(2**62, 0), (-(2**62), 0), (253_402_300_800, 0), (-62_135_596_801, 0), (0, -5)],
)
def test_versions_survive_a_timestamp_out_of_range(
    tmp_path: Path, seconds: int, nanos: int
) -> None:
    uri = _history(tmp_path)
    _rewrite(uri, 2, _set_timestamp(seconds, nanos))
    infos = Dataset.open(uri).versions()
    assert [v.version for v in infos] == [1, 2, 3]
    assert infos[0].timestamp is not None
    assert infos[2].timestamp is not None
    assert infos[0].error is None
    assert infos[2].error is None
    bad = infos[1]
    assert bad.operation == "Append"  # the rest of the version is still shown
    if nanos < 0:  # out of protobuf's range but still a point in time
        assert bad.error is not None
        assert "timestamp" in bad.error
    else:
        assert bad.timestamp is None
        assert bad.error is not None
        assert "timestamp" in bad.error
    json.dumps([v.to_json() for v in infos])


def test_versions_mark_an_undecodable_manifest_and_go_on(tmp_path: Path) -> None:
    uri = _history(tmp_path)
    _garble(uri, 2)
    infos = Dataset.open(uri).versions()
    assert [v.version for v in infos] == [1, 2, 3]
    assert [v.operation for v in infos] == ["Overwrite", None, "Append"]
    assert infos[1].error is not None
    assert infos[1].error.startswith("CorruptManifestError")
    assert infos[0].error is None
    assert infos[2].error is None


def test_log_prints_the_other_versions_and_marks_the_bad_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = _history(tmp_path, versions=4)
    _garble(uri, 2)
    _rewrite(uri, 3, _set_timestamp(2**62))
    assert main(["log", uri]) == 1
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert [line.split()[0] for line in lines[1:5]] == ["1", "2", "3", "4"]
    assert "UNREADABLE" in lines[2]
    assert "Append" in lines[3]
    assert "Append" in lines[4]
    assert any(line.startswith("v2: CorruptManifestError") for line in lines)
    assert any(line.startswith("v3: ") and "timestamp" in line for line in lines)
    assert main(["log", uri, "--json"]) == 1
    records = json.loads(capsys.readouterr().out)
    assert [r["version"] for r in records] == [1, 2, 3, 4]
    assert records[1]["error"].startswith("CorruptManifestError")
    assert records[3]["error"] is None


def test_log_goes_on_when_the_latest_manifest_is_undecodable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = _history(tmp_path)
    _garble(uri, 3)
    assert main(["log", uri, "--json"]) == 1
    records = json.loads(capsys.readouterr().out)
    assert [r["operation"] for r in records] == ["Overwrite", "Append", None]
    assert records[2]["error"].startswith("CorruptManifestError")


@pytest.mark.parametrize("path", ["../../outside.lance", "/etc/passwd", "a/../../b", "x\\y", ""])
def test_verify_data_files_reports_a_hostile_path_as_a_finding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], path: str
) -> None:
    uri = _history(tmp_path)

    def edit(m: table_pb2.Manifest) -> None:
        m.fragments[0].files[0].path = path

    _rewrite(uri, 3, edit)
    report = verify(uri, data_files=True)
    files = [f for f in report.findings if f.invariant == "data-files"]
    bad = [f for f in files if "fragment 0" in f.detail]
    assert len(bad) == 1
    assert bad[0].version == 3
    assert "not a path inside data/" in bad[0].detail
    # the rest of the run went on: the other (synthetic, absent) data files are checked
    assert {f.detail.split(":")[0] for f in files} == {"fragment 0", "fragment 1", "fragment 2"}
    assert not report.ok
    assert report.live_rows == 4
    assert main(["verify", uri, "--data-files", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False
    assert any("not a path inside data/" in f["detail"] for f in out["findings"])
