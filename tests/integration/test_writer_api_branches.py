"""Committing to a branch: ``te.open(uri, branch=...)`` against pylance 14.0.2's own branch
writes (``tree/<branch>/_versions/``), both ways."""

from __future__ import annotations

import shutil
from pathlib import Path

import lance
import pyarrow as pa
import pytest

import txn_engine as te
from txn_engine.errors import InvalidOperationError, VersionNotFoundError


def _rows(start: int, n: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "v": pa.array([f"s{i}" for i in range(start, start + n)], pa.string()),
        }
    )


def _branch_table(uri: str, branch: str = "dev") -> pa.Table:
    return lance.dataset(uri).checkout_version((branch, None)).to_table().sort_by("id")


def _main_versions(uri: str) -> list[str]:
    return sorted(p.name for p in (Path(uri) / "_versions").iterdir())


@pytest.fixture
def pair(tmp_path: Path) -> tuple[str, str]:
    """Two copies of one pylance-written table (4 fragments, ids 0..99), no branch yet:
    (for pylance, for txn_engine). Branches are made per copy (a branch records the
    absolute root it was forked from)."""
    a = str(tmp_path / "pylance.lance")
    lance.write_dataset(_rows(0, 100), a, max_rows_per_file=25)
    b = str(tmp_path / "txn_engine.lance")
    shutil.copytree(a, b)
    return a, b


def test_every_call_commits_to_the_branch_as_pylance_does(pair: tuple[str, str]) -> None:
    a, b = pair
    main_before = _main_versions(a)
    ours = te.open(b).create_branch("dev", 1)
    assert ours.branch == "dev"
    theirs = lance.dataset(a).create_branch("dev", 1)

    theirs = lance.write_dataset(_rows(100, 10), theirs, mode="append")
    ours.append(_rows(100, 10))
    theirs.delete("id < 5")
    ours.delete("id < 5")
    theirs = lance.dataset(a).checkout_version(("dev", None))
    theirs.update({"v": "'upd'"}, where="id >= 105")
    ours.update({"v": "'upd'"}, where="id >= 105")
    theirs = lance.dataset(a).checkout_version(("dev", None))
    theirs.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(
        _rows(108, 5)
    )
    ours.merge_insert(_rows(108, 5), on="id")
    theirs = lance.dataset(a).checkout_version(("dev", None))
    theirs.add_columns({"w": "id * 2"})
    ours.add_columns({"w": "id * 2"})
    theirs = lance.dataset(a).checkout_version(("dev", None))
    theirs.create_scalar_index("id", "BTREE")
    ours.create_index("id", "BTREE")
    theirs = lance.dataset(a).checkout_version(("dev", None))
    theirs.optimize.compact_files()
    ours.compact()

    # pylance reads what txn_engine committed on the branch: the same table
    ta, tb = _branch_table(a), _branch_table(b)
    assert tb.schema.equals(ta.schema, check_metadata=False)
    assert tb.equals(ta)
    assert tb.num_rows == 108
    assert ours.to_table().sort_by("id").equals(tb)
    # the main line of both copies is untouched; the branch's versions are its own
    assert _main_versions(a) == main_before == _main_versions(b)
    assert te.open(b).to_table().sort_by("id").equals(lance.dataset(a).to_table().sort_by("id"))
    snap = te.Dataset.open(b, branch="dev")
    assert snap.manifest.branch == "dev"
    kinds = [v.operation for v in snap.versions()]
    assert kinds[0] == "Clone"  # the fork pylance wrote
    assert kinds[1:5] == ["Append", "Delete", "Update", "Update"]
    assert (Path(b) / "tree" / "dev" / "_versions").is_dir()
    assert [b.name for b in te.open(b).branches()] == ["dev"]
    assert lance.dataset(b).checkout_version(("dev", None)).version == snap.version


def test_pylance_and_txn_engine_take_turns_on_one_branch(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(_rows(0, 10), uri)
    lance.dataset(uri).create_branch("exp", 1)
    ours = te.open(uri, branch="exp")
    first = ours.append(_rows(10, 5))
    assert first.transaction.read_version == 1  # planned on pylance's fork
    # pylance builds on txn_engine's branch version
    lance.write_dataset(
        _rows(15, 5), lance.dataset(uri).checkout_version(("exp", None)), mode="append"
    )
    # and txn_engine on pylance's
    second = ours.delete("id % 2 = 0")
    assert second.transaction.read_version == first.version + 1
    ds = lance.dataset(uri).checkout_version(("exp", None))
    assert ds.version == second.version
    assert sorted(ds.to_table().column("id").to_pylist()) == list(range(1, 20, 2))
    assert lance.dataset(uri).count_rows() == 10  # main line untouched
    assert te.Dataset.open(uri, branch="exp").count_rows() == 10
    assert te.Dataset.open(uri).count_rows() == 10


def test_a_write_planned_before_a_branch_overwrite_conflicts(tmp_path: Path) -> None:
    from lance.fragment import write_fragments

    uri = str(tmp_path / "t.lance")
    lance.write_dataset(_rows(0, 10), uri)
    branch = te.open(uri).create_branch("b")
    read = te.Dataset.open(uri, branch="b")
    frags = write_fragments(_rows(50, 2), branch.to_lance(read.version))
    lance.write_dataset(
        _rows(90, 1), lance.dataset(uri).checkout_version(("b", None)), mode="overwrite"
    )
    with pytest.raises(te.errors.IncompatibleTransactionError):
        # a branch's root is a dataset root of its own: the low-level commit takes it too
        te.commit(
            f"{uri}/tree/b", lance.Transaction(read.version, lance.LanceOperation.Append(frags))
        )
    assert _branch_table(uri, "b").column("id").to_pylist() == [90]


def test_branch_handles_refuse_what_they_cannot_do(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    te.open(uri).append(_rows(0, 3))
    with pytest.raises(VersionNotFoundError):
        te.open(uri, branch="nope")
    with pytest.raises(VersionNotFoundError):
        te.Dataset.open(uri, branch="nope")
    branch = te.open(uri).create_branch("b")
    with pytest.raises(InvalidOperationError):
        branch.create_tag("t1")
    with pytest.raises(InvalidOperationError):
        te.open(uri).create_branch("b")  # taken
    with pytest.raises(InvalidOperationError):
        te.open(uri).create_branch("../x")
    assert repr(branch).endswith("branch='b')")


def test_what_txn_engine_commits_on_a_branch_survives_a_main_line_cleanup(tmp_path: Path) -> None:
    import datetime as dt

    from txn_engine.retention import cleanup

    uri = str(tmp_path / "t.lance")
    main = te.open(uri)
    main.append(_rows(0, 2))
    main.append(_rows(2, 1))
    dev = main.create_branch("dev", 1)
    dev.append(_rows(10, 1))
    dev.delete("id = 0")
    main.delete("id = 1")
    main.append(_rows(3, 1))
    report = cleanup(uri, older_than=dt.timedelta(0), keep_versions=1)
    assert report.deleted > 0  # main-line history went
    # the fork's version and every file of the branch stay: pylance reads the branch whole
    assert _branch_table(uri, "dev").column("id").to_pylist() == [1, 10]
    assert dev.to_table().sort_by("id").column("id").to_pylist() == [1, 10]
    assert main.to_table().sort_by("id").column("id").to_pylist() == [0, 2, 3]


def test_overwrite_restore_and_config_on_a_branch_as_pylance(pair: tuple[str, str]) -> None:
    a, b = pair
    theirs = lance.dataset(a).create_branch("dev", 1)
    ours = te.open(b).create_branch("dev", 1)
    lance.write_dataset(_rows(500, 3), theirs, mode="overwrite")
    ours.overwrite(_rows(500, 3))
    assert _branch_table(b).equals(_branch_table(a))
    theirs = lance.dataset(a).checkout_version(("dev", 1))
    theirs.restore()
    ours.restore(1)
    assert _branch_table(b).equals(_branch_table(a))
    assert _branch_table(b).num_rows == 100
    lance.dataset(a).checkout_version(("dev", None)).update_config({"k": "v"})
    ours.update_config({"k": "v"})
    for uri in (a, b):
        dev = lance.dataset(uri).checkout_version(("dev", None))
        assert dev.config().get("k") == "v"
        assert dev.version == 4
        assert te.Dataset.open(uri, branch="dev").manifest.branch == "dev"
        assert "k" not in lance.dataset(uri).config()  # the main line's config is untouched


@pytest.mark.parametrize("version", [0, 2**63, 2**64])
def test_create_branch_from_no_version_is_version_not_found(tmp_path: Path, version: int) -> None:
    # pylance's "Dataset at path ... was not found" (a StorageError) or "int too big to
    # convert" reached the caller for these; nothing is created
    uri = str(tmp_path / "t.lance")
    table = te.open(uri)
    table.append(_rows(0, 10))
    with pytest.raises(VersionNotFoundError):
        table.create_branch("dev", version)
    assert table.branches() == []


@pytest.mark.parametrize("version", [None, 1.5, True, "1"])
def test_restore_of_no_version_number_is_an_invalid_operation(
    tmp_path: Path, version: object
) -> None:
    # restore(None) checked out the latest, then failed comparing None (TypeError)
    uri = str(tmp_path / "t.lance")
    table = te.open(uri)
    table.append(_rows(0, 10))
    with pytest.raises(InvalidOperationError, match="a version is a whole number"):
        table.restore(version)  # type: ignore[arg-type]
    assert table.version == 1
