"""Tags and branches as pylance 14.0.2 writes and reads them; shown by log and show."""

from __future__ import annotations

import json
from pathlib import Path

import lance
import pyarrow as pa
import pytest

import txn_engine as te
from txn_engine.apps.cli import main


@pytest.fixture
def uri(tmp_path: Path) -> str:
    path = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"id": [1]}), path)
    lance.write_dataset(pa.table({"id": [2]}), path, mode="append")
    lance.write_dataset(pa.table({"id": [3]}), path, mode="append")
    return path


def test_pylance_tags_are_read(uri: str) -> None:
    ds = lance.dataset(uri)
    ds.tags.create("release-1", 1)
    size = ds.tags.list()["release-1"]["manifest_size"]
    # a non-ASCII name: pylance 14.0.2 writes it percent-encoded (and then fails to list
    # it itself); txn_engine reads it
    ds.tags.create("é", 2)
    tags = te.open(uri).tags()
    assert [(t.name, t.version, t.branch) for t in tags] == [("release-1", 1, None), ("é", 2, None)]
    assert tags[0].created_at is not None
    assert tags[0].manifest_size == size
    assert te.Dataset.open(uri, version="release-1").count_rows() == 1
    assert te.Dataset.open(uri, version="é").count_rows() == 2


def test_our_tags_are_read_by_pylance(uri: str) -> None:
    table = te.open(uri)
    table.create_tag("v2", 2, metadata={"note": "x"})
    table.create_tag("latest")
    listed = lance.dataset(uri).tags.list()
    assert listed["v2"]["version"] == 2
    assert listed["v2"]["metadata"] == {"note": "x"}
    assert listed["latest"]["version"] == 3
    assert lance.dataset(uri, version="v2").count_rows() == 2
    lance.dataset(uri).tags.delete("latest")  # pylance deletes what we wrote
    table.delete_tag("v2")
    assert lance.dataset(uri).tags.list() == {}


def test_branches_are_listed_and_shown(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    lance.dataset(uri).create_branch("dev", 2)
    (branch,) = te.Dataset.open(uri).branches()
    assert (branch.name, branch.parent_version) == ("dev", 2)
    assert main(["log", uri]) == 0
    assert "branch dev: from main version 2" in capsys.readouterr().out


def test_log_and_show_display_tags(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    lance.dataset(uri).tags.create("release-1", 2)
    te.open(uri).create_tag("first", 1)
    assert main(["log", uri, "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [r["tags"] for r in records] == [["first"], ["release-1"], []]
    assert main(["log", uri]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[-1] == "TAGS"
    assert lines[2].rstrip().endswith("release-1")
    assert main(["show", uri, "--version", "release-1", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["version"], summary["tags"]) == (2, ["release-1"])
    assert main(["show", uri, "--version", "first"]) == 0
    assert "tags           first" in capsys.readouterr().out


def test_version_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"txn-engine {te.__version__}"


BRANCH_NAMES = ["é", "a/b", "日本/x.y-z_1", "k\u093e"]


def test_branch_names_pylance_encodes_are_placed_as_pylance_places_them(uri: str) -> None:
    """pylance's branch names (``/``, non-ASCII: its refs file names percent-encode them, its
    ``tree/<name>/`` directories do not) are read, committed to and created by txn_engine
    where pylance reads and creates them."""
    ds = lance.dataset(uri)
    for name in BRANCH_NAMES:
        ds.create_branch(name, 2)
    assert [b.name for b in te.open(uri).branches()] == sorted(ds.branches.list())
    for name in BRANCH_NAMES:
        table = te.open(uri, branch=name)
        assert table.version == 2
        table.append(pa.table({"id": [10]}))
        assert sorted(lance.dataset(f"{uri}/tree/{name}").to_table()["id"].to_pylist()) == [
            1, 2, 10
        ]  # fmt: skip
    made = te.open(uri).create_branch("new/é", 1)
    assert made.branch == "new/é"
    assert "new/é" in lance.dataset(uri).branches.list()
    assert (Path(uri) / "_refs" / "branches" / "new%2F%C3%A9.json").exists()
    assert lance.dataset(f"{uri}/tree/new/é").count_rows() == 1
    for bad in ("a//b", "main", "a b", "e\u0301"):
        with pytest.raises(te.errors.InvalidOperationError):
            te.open(uri).create_branch(bad)
    assert sorted(lance.dataset(uri).branches.list()) == sorted([*BRANCH_NAMES, "new/é"])
