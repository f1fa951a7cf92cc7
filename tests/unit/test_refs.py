"""Tags and branches in ``_refs/`` (txn_engine.format.refs), in pylance 14's layout."""

from __future__ import annotations

import datetime as dt
import json

import pytest

import txn_engine as te
from txn_engine.errors import InvalidOperationError, VersionNotFoundError
from txn_engine.format.refs import (
    create_tag,
    delete_tag,
    list_branches,
    list_tags,
    read_tag,
    validate_ref_name,
)
from txn_engine.storage import MemoryStorage


@pytest.fixture
def storage() -> MemoryStorage:
    s = MemoryStorage()
    field = te.LanceField(id=0, parent_id=-1, name="id", logical_type="int64")
    te.commit(s, te.Transaction(0, te.Overwrite(fragments=[], schema=[field])))
    te.commit(s, te.Transaction(1, te.UpdateConfig(config_updates={"k": "v"})))
    return s


def test_created_tag_has_pylances_layout(storage: MemoryStorage) -> None:
    when = dt.datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=dt.UTC)
    tag = create_tag(storage, "release-1", 1, metadata={"by": "me"}, now=when)
    body = json.loads(storage.get("_refs/tags/release-1.json"))
    assert body == {
        "branch": None,
        "version": 1,
        "createdAt": "2026-01-02T03:04:05.123456000Z",
        "updatedAt": "2026-01-02T03:04:05.123456000Z",
        "manifestSize": storage.size(te.Dataset.open(storage, version=1).manifest_path),
        "metadata": {"by": "me"},
    }
    assert read_tag(storage, "release-1") == tag
    assert tag.created_at == when


def test_list_open_and_delete(storage: MemoryStorage) -> None:
    create_tag(storage, "b", 2)
    create_tag(storage, "a", 1)
    create_tag(storage, "é", 1)
    assert "%C3%A9.json" in storage.list("_refs/tags")
    assert [(t.name, t.version) for t in list_tags(storage)] == [("a", 1), ("b", 2), ("é", 1)]
    ds = te.Dataset.open(storage, version="a")
    assert ds.version == 1
    assert ds.tags_of() == ["a", "é"]
    assert ds.checkout("b").config == {"k": "v"}
    delete_tag(storage, "a")
    assert [t.name for t in list_tags(storage)] == ["b", "é"]
    with pytest.raises(VersionNotFoundError, match="no tag 'a'"):
        te.Dataset.open(storage, version="a")
    with pytest.raises(VersionNotFoundError):
        delete_tag(storage, "a")


def test_tag_conflicts_and_bad_targets(storage: MemoryStorage) -> None:
    create_tag(storage, "t", 1)
    with pytest.raises(InvalidOperationError, match="already exists"):
        create_tag(storage, "t", 2)
    assert read_tag(storage, "t").version == 1
    with pytest.raises(VersionNotFoundError):
        create_tag(storage, "u", 9)
    assert storage.list("_refs/tags") == ["t.json"]


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "empty"),
        (".x", "begin with a dot"),
        ("a..b", "consecutive dots"),
        ("x.lock", ".lock"),
        ("a/b", "characters"),
        ("a b", "characters"),
    ],
)
def test_names_pylance_refuses_are_refused(name: str, why: str) -> None:
    with pytest.raises(InvalidOperationError, match=why):
        validate_ref_name(name)


@pytest.mark.parametrize("name", ["x.y", "-a", "a_b-1", "é", "v1.0"])
def test_names_pylance_accepts_are_accepted(name: str) -> None:
    assert validate_ref_name(name) == name


def test_branches_are_read(storage: MemoryStorage) -> None:
    body = {
        "parentBranch": None,
        "identifier": {"version_mapping": [[2, "abc"]]},
        "parentVersion": 2,
        "createAt": 1795371749,
        "manifestSize": 423,
        "metadata": {},
    }
    storage.put("_refs/branches/dev.json", json.dumps(body).encode())
    (branch,) = list_branches(storage)
    assert (branch.name, branch.parent_version, branch.parent_branch) == ("dev", 2, None)
    assert branch.path == "tree/dev"
    assert branch.created_at == dt.datetime.fromtimestamp(1795371749, tz=dt.UTC)
    assert te.Dataset.open(storage).branches() == [branch]
