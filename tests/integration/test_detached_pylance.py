"""Detached commits (``te.commit(..., detached=True)``) against pylance 14.0.2's
``LanceDataset.commit(..., detached=True)``: the same layout, readable by pylance, outside
the main line; txn_engine's readers, cleanup and verify on both engines' detached versions.

Measured with pylance 14.0.2 (each asserted below): a detached version's number has the top
bit set (random otherwise), its manifest is ``_versions/d{number}.manifest``, the latest
version, ``versions()`` and ``latest_version_hint.json`` do not move, the manifest's row
version sequences say ``read_version + 1``; it builds on the version of the dataset it is
given (a URI: the latest, whatever the read version says; txn_engine builds on the read
version); pylance refuses detached commits on V1 manifest
names and for creating a dataset; its ``cleanup_old_versions`` never removes a detached
manifest but deletes the files only it and removed versions reference (the detached version
is then unreadable).
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import timedelta
from pathlib import Path

import lance
import lance.fragment as lf
import pyarrow as pa
import pytest

import txn_engine as te
from txn_engine.errors import InvalidOperationError
from txn_engine.retention import CleanupReport, cleanup
from txn_engine.verify import verify

pytestmark = pytest.mark.pylance

TOP_BIT = 1 << 63
ZERO = timedelta(0)


def _append(uri: str, ids: list[int], read_version: int) -> te.Transaction:
    metas = lf.write_fragments(pa.table({"id": ids}), uri)
    frags = tuple(te.Fragment.from_lance_json(m.to_json()) for m in metas)
    return te.Transaction(read_version, te.Append(fragments=frags))


def _ids(ds: lance.LanceDataset) -> list[int]:
    return sorted(ds.to_table()["id"].to_pylist())


def _hint(uri: str) -> int:
    version: int = json.loads((Path(uri) / "_versions" / "latest_version_hint.json").read_text())[
        "version"
    ]
    return version


def _names(uri: str) -> list[str]:
    return sorted(os.listdir(Path(uri) / "_versions"))


def test_a_detached_commit_lands_as_pylances_does(tmp_path: Path) -> None:
    ours, theirs = str(tmp_path / "ours.lance"), str(tmp_path / "theirs.lance")
    for uri in (ours, theirs):
        lance.write_dataset(pa.table({"id": [1, 2]}), uri)
        lance.write_dataset(pa.table({"id": [3]}), uri, mode="append")
    result = te.commit(ours, _append(ours, [4, 5], 1), detached=True)
    metas = lf.write_fragments(pa.table({"id": [4, 5]}), theirs)
    pylance_detached = lance.LanceDataset.commit(
        lance.dataset(theirs, version=1),
        lance.LanceOperation.Append(metas),
        read_version=1,
        detached=True,
    ).version
    # given a URI, pylance builds on the latest version whatever the read version says
    # (without checking the transaction against the versions between); txn_engine builds on
    # the read version, as pylance does on a dataset opened there
    metas = lf.write_fragments(pa.table({"id": [7]}), theirs)
    on_latest = lance.LanceDataset.commit(
        theirs, lance.LanceOperation.Append(metas), read_version=1, detached=True
    )
    assert _ids(on_latest) == [1, 2, 3, 7]
    for uri, version in ((ours, result.version), (theirs, pylance_detached)):
        assert version & TOP_BIT
        assert f"d{version}.manifest" in _names(uri)
        assert lance.dataset(uri).version == 2
        assert [v["version"] for v in lance.dataset(uri).versions()] == [1, 2]
        assert _hint(uri) == 2
        assert _ids(lance.dataset(uri, version=version)) == [1, 2, 4, 5]
        ds = te.Dataset.open(uri, version=version)
        assert (ds.version, ds.count_rows()) == (version, 4)
        assert te.Dataset.open(uri).version == 2
        assert verify(uri, deep=True, data_files=True).ok
    assert result.manifest_path == f"_versions/d{result.version}.manifest"
    # the main line goes on as if nothing happened, in both engines
    te.commit(ours, _append(ours, [6], 2))
    assert _ids(lance.dataset(ours)) == [1, 2, 3, 6]
    assert _ids(lance.dataset(ours, version=result.version)) == [1, 2, 4, 5]


def test_detached_on_detached_and_restore_as_pylance(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"id": [1, 2]}), uri, enable_stable_row_ids=True)
    lance.write_dataset(pa.table({"id": [3]}), uri, mode="append")
    metas = lf.write_fragments(pa.table({"id": [7]}), uri)
    theirs = lance.LanceDataset.commit(
        uri, lance.LanceOperation.Append(metas), read_version=2, detached=True
    ).version
    ours = te.commit(uri, _append(uri, [8], theirs), detached=True).version
    assert ours != theirs
    assert ours & TOP_BIT
    ds = lance.dataset(uri, version=ours)
    assert _ids(ds) == [1, 2, 3, 7, 8]
    # row version sequences say read_version + 1, as pylance's own detached commit wrote
    # for its rows (3: built on version 2)
    table = ds.to_table(columns=["id", "_row_created_at_version"]).to_pydict()
    created = dict(zip(table["id"], table["_row_created_at_version"], strict=True))
    assert created[7] == 3
    assert created[8] == (theirs + 1) % (1 << 64)
    restored = te.commit(uri, te.Transaction(2, te.Restore(1)), detached=True).version
    assert _ids(lance.dataset(uri, version=restored)) == [1, 2]
    assert lance.dataset(uri).version == 2


def test_what_pylance_refuses_detached_is_refused(tmp_path: Path) -> None:
    v1 = str(tmp_path / "v1.lance")
    lance.write_dataset(pa.table({"id": [1]}), v1, enable_v2_manifest_paths=False)
    txn = _append(v1, [2], 1)
    with pytest.raises(OSError, match="v1 manifest paths"):
        lance.LanceDataset.commit(
            v1, lance.LanceOperation.Append([]), read_version=1, detached=True
        )
    before = _names(v1)
    with pytest.raises(InvalidOperationError, match="V1 manifest names"):
        te.commit(v1, txn, detached=True)
    assert _names(v1) == before
    new = str(tmp_path / "new.lance")
    metas = lf.write_fragments(pa.table({"id": [1]}), new)
    frags = tuple(te.Fragment.from_lance_json(m.to_json()) for m in metas)
    field = te.LanceField(id=0, parent_id=-1, name="id", logical_type="int64")
    with pytest.raises(InvalidOperationError, match="create"):
        te.commit(new, te.Transaction(0, te.Overwrite(frags, [field])), detached=True)
    assert not (Path(new) / "_versions").exists()
    # a main-line commit cannot build on a detached version (pylance fails internally)
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"id": [1]}), uri)
    detached = te.commit(uri, _append(uri, [2], 1), detached=True).version
    with pytest.raises(InvalidOperationError, match="detached"):
        te.commit(uri, _append(uri, [3], detached))
    assert lance.dataset(uri).version == 1


def test_our_cleanup_keeps_detached_versions_readable_where_pylances_does_not(
    tmp_path: Path,
) -> None:
    """Stricter than pylance, on purpose: a detached manifest is never removed (as in
    pylance), and every file one references is kept (pylance deletes those that only it and
    removed versions reference, leaving the detached version unreadable)."""
    ours = str(tmp_path / "ours.lance")
    lance.write_dataset(pa.table({"id": [1, 2]}), ours)
    detached = te.commit(ours, _append(ours, [4], 1), detached=True).version
    lance.write_dataset(pa.table({"id": [9]}), ours, mode="overwrite")
    theirs = str(tmp_path / "theirs.lance")
    shutil.copytree(ours, theirs)
    lance.dataset(theirs).cleanup_old_versions(older_than=ZERO, delete_unverified=True)
    assert f"d{detached}.manifest" in _names(theirs)
    with pytest.raises((OSError, pa.ArrowInvalid), match="Not found"):
        lance.dataset(theirs, version=detached).to_table()
    report = cleanup(ours, older_than=ZERO, retention_orphans=ZERO, progress=False)
    assert isinstance(report, CleanupReport)
    assert report.plan.removed_versions == (1,)
    assert [v["version"] for v in lance.dataset(ours).versions()] == [2]
    assert _ids(lance.dataset(ours, version=detached)) == [1, 2, 4]
    assert verify(ours, deep=True, data_files=True).ok
