"""txn_engine's cleanup against pylance 14.0.2's ``cleanup_old_versions`` on the same tables.

* differential: copies of the same pylance-written history (every operation kind, V1 and V2
  names, stable row ids; a tag on an old version, an old and a young orphan) cleaned by
  each; the same versions and the same files remain, and pylance reads every kept version;
* ``verify`` after pylance's cleanup with a tag keeping an old version exits 0;
* in-flight writers across the two cleanups: what each cleanup does to files the other's
  writer has written but not committed yet (measured; see docs/cleanup.md).
"""

from __future__ import annotations

import os
import shutil
import time
import warnings
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import attrs
import lance
import lance.fragment as lf
import pyarrow as pa
import pytest

import txn_engine as te
from txn_engine.apps.cli import main
from txn_engine.retention import CleanupReport, cleanup, plan_cleanup
from txn_engine.verify import verify

from .conftest import History

ZERO = timedelta(0)


def _files(root: Path) -> set[str]:
    out: set[str] = set()
    for directory, _, names in os.walk(root):
        for name in names:
            rel = os.path.relpath(os.path.join(directory, name), root)
            if rel != os.path.join("_versions", "latest_version_hint.json"):
                out.add(rel.replace(os.sep, "/"))
    return out


def _versions(uri: Path) -> list[int]:
    return [v["version"] for v in lance.dataset(str(uri)).versions()]


def _prepared(history: History, tmp_path: Path) -> tuple[Path, Path]:
    """Two identical copies of the history, each with a tag on version 3 and two orphans
    (one 8 days old, one new)."""
    a, b = tmp_path / "pylance.lance", tmp_path / "txn_engine.lance"
    shutil.copytree(history.path, a)
    lance.dataset(str(a)).tags.create("release-1", 3)
    old = time.time() - 8 * 86400
    for name, mtime in (("orphan-old.lance", old), ("orphan-young.lance", None)):
        path = a / "data" / name
        path.write_bytes(b"orphan")
        if mtime is not None:
            os.utime(path, (mtime, mtime))
    shutil.copytree(a, b)  # copytree keeps modification times
    time.sleep(0.05)  # every manifest is now strictly older than "now"
    return a, b


@pytest.mark.parametrize("keep", [1, 4])
def test_same_versions_and_files_as_pylance_cleanup(
    history: History, tmp_path: Path, keep: int
) -> None:
    a, b = _prepared(history, tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stats = lance.dataset(str(a)).cleanup_old_versions(
            older_than=ZERO,
            retain_versions=None if keep == 1 else keep,
            error_if_tagged_old_versions=False,
        )
    report = cleanup(str(b), older_than=ZERO, keep_versions=keep, progress=False)
    assert isinstance(report, CleanupReport)
    assert report.ok
    assert stats.old_versions == len(report.plan.removed_versions)
    assert _versions(b) == _versions(a)
    assert 3 in _versions(b)
    # the same files, but for txn_engine's record of the versions it removed (docs/cleanup.md)
    records = {p for p in _files(b) if p.startswith("_txn_engine/")}
    assert records
    assert all(p.startswith("_txn_engine/gaps/") for p in records)
    assert _files(b) - records == _files(a)
    assert "data/orphan-young.lance" in _files(b)
    assert "data/orphan-old.lance" not in _files(b)
    for v in _versions(b):  # pylance reads every kept version of ours
        ours = lance.dataset(str(b), version=v).to_table()
        theirs = lance.dataset(str(a), version=v).to_table()
        assert ours.equals(theirs)
    assert verify(str(b), data_files=True).ok


def test_dry_run_matches_what_pylance_explains(history: History, tmp_path: Path) -> None:
    a, b = _prepared(history, tmp_path)
    before = _files(b)
    plan = plan_cleanup(str(b), older_than=ZERO)
    assert _files(b) == before
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stats = lance.dataset(str(a)).cleanup_old_versions(
            older_than=ZERO, error_if_tagged_old_versions=False
        )
    gone = before - _files(a)
    planned = {d.path for d in plan.deletes}
    assert planned == gone
    assert plan.counts["manifest"] == stats.old_versions
    assert plan.bytes == stats.bytes_removed


def test_verify_exits_0_after_pylance_cleanup_with_a_tag(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    table = pa.table({"a": list(range(20))})
    lance.write_dataset(table, uri)
    for _ in range(5):
        lance.write_dataset(table, uri, mode="append")
    ds = lance.dataset(uri)
    ds.tags.create("release-1", 3)
    time.sleep(0.05)
    with pytest.raises(Exception, match="tag"):  # pylance refuses by default
        ds.cleanup_old_versions(older_than=ZERO)
    ds.cleanup_old_versions(older_than=ZERO, error_if_tagged_old_versions=False)
    assert _versions(Path(uri)) == [3, 6]
    report = verify(uri, deep=True, data_files=True)
    assert report.ok, report.findings
    assert [f.invariant for f in report.infos] == ["cleaned-up", "cleaned-up"]
    assert main(["verify", uri]) == 0


def _append_planned(uri: str, rows: int) -> tuple[te.Transaction, list[str]]:
    """A txn_engine writer's plan: data files written by pylance, not committed yet."""
    metas = lf.write_fragments(pa.table({"a": list(range(rows))}), uri)
    frags = [te.Fragment.from_lance_json(m.to_json()) for m in metas]
    paths = [f"data/{df.path}" for f in frags for df in f.files]
    read_version = lance.dataset(uri).version
    return te.Transaction(read_version, te.Append(fragments=tuple(frags))), paths


def _base(tmp_path: Path) -> str:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"a": list(range(10))}), uri)
    lance.write_dataset(pa.table({"a": list(range(10))}), uri, mode="overwrite")
    time.sleep(0.05)
    return uri


PylanceCleanup = Callable[[str], None]


def test_pylance_cleanup_keeps_an_in_flight_txn_engine_writers_files(tmp_path: Path) -> None:
    uri = _base(tmp_path)
    txn, paths = _append_planned(uri, 7)
    lance.dataset(uri).cleanup_old_versions(older_than=ZERO)  # default: unverified kept 7 days
    assert all((Path(uri) / p).exists() for p in paths)
    te.commit(uri, txn)
    assert lance.dataset(uri).count_rows() == 17


def test_pylance_delete_unverified_removes_an_in_flight_writers_files(tmp_path: Path) -> None:
    """Measured hazard (documented): ``delete_unverified=True`` deletes files a txn_engine
    writer has written but not committed; leases do not help, pylance does not read them."""
    uri = _base(tmp_path)
    _, paths = _append_planned(uri, 7)
    with te.lease(uri):
        lance.dataset(uri).cleanup_old_versions(older_than=ZERO, delete_unverified=True)
    assert not any((Path(uri) / p).exists() for p in paths)


def test_our_cleanup_keeps_an_in_flight_pylance_writers_files(tmp_path: Path) -> None:
    uri = _base(tmp_path)
    metas = lf.write_fragments(pa.table({"a": list(range(5))}), uri)
    read_version = lance.dataset(uri).version
    report = cleanup(uri, older_than=ZERO, progress=False)  # default orphan retention: 7 days
    assert isinstance(report, CleanupReport)
    assert report.plan.counts["orphan"] == 0
    lance.LanceDataset.commit(uri, lance.LanceOperation.Append(metas), read_version=read_version)
    assert lance.dataset(uri).count_rows() == 15


def test_our_cleanup_keeps_leased_versions_readable_by_pylance(tmp_path: Path) -> None:
    uri = _base(tmp_path)
    with te.lease(uri, 1) as held:
        lance.write_dataset(pa.table({"a": [1]}), uri, mode="overwrite")
        cleanup(uri, older_than=ZERO, retention_orphans=ZERO, progress=False)
        assert _versions(Path(uri)) == [1, 2, 3]
        assert lance.dataset(uri, version=held.version).count_rows() == 10
    cleanup(uri, older_than=ZERO, retention_orphans=ZERO, progress=False)
    assert _versions(Path(uri)) == [3]
    assert lance.dataset(uri).count_rows() == 1


@pytest.mark.parametrize("name", ["é", "Ünï/çødé", "a/b"])
def test_our_cleanup_keeps_what_a_branch_pylance_named_references(
    tmp_path: Path, name: str
) -> None:
    """A branch pylance created (its refs file percent-encoded, ``_refs/branches/%C3%A9.json``,
    its versions under ``tree/é/``) is read by cleanup: a file of the main table only that
    branch references survives a cleanup with a zero orphan retention."""
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"a": [1, 2]}), uri)
    branch = lance.dataset(uri).create_branch(name, 1)
    assert Path(branch.uri) == Path(uri) / "tree" / name
    # rows written into the main table's data/ and committed on the branch through the
    # branch's base path 0 (the main table's root, which pylance's branch lists)
    metas = lf.write_fragments(pa.table({"a": [3]}), uri)
    frags = [te.Fragment.from_lance_json(m.to_json()) for m in metas]
    shared = [
        attrs.evolve(f, files=tuple(attrs.evolve(df, base_id=0) for df in f.files)) for f in frags
    ]
    te.commit(branch.uri, te.Transaction(1, te.Append(fragments=tuple(shared))))
    assert sorted(lance.dataset(branch.uri).to_table()["a"].to_pylist()) == [1, 2, 3]
    lance.write_dataset(pa.table({"a": [9]}), uri, mode="overwrite")
    (listed,) = te.open(uri).branches()
    assert listed.name == name
    report = cleanup(uri, older_than=ZERO, retention_orphans=ZERO, progress=False)
    assert isinstance(report, CleanupReport)
    assert _versions(Path(uri)) == [1, 2]  # the branch's base is kept
    assert all((Path(uri) / "data" / df.path).exists() for f in frags for df in f.files)
    assert sorted(lance.dataset(branch.uri).to_table()["a"].to_pylist()) == [1, 2, 3]
    assert sorted(te.open(uri, branch=name).to_table()["a"].to_pylist()) == [1, 2, 3]
