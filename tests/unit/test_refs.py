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
    validate_branch_name,
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


# Branch file names as pylance 14.0.2 wrote them (measured: ``ds.create_branch(name, 1)``,
# then the names in ``_refs/branches/``; each branch's versions were under ``tree/<name>/``
# with the name as it is, ``/`` making sub-directories)
PYLANCE_BRANCH_FILES = {
    "é": "%C3%A9.json",
    "a/b": "a%2Fb.json",
    "a/b/c": "a%2Fb%2Fc.json",
    "x.y-z_1": "x.y-z_1.json",
    "日本": "%E6%97%A5%E6%9C%AC.json",
    "Ünï/çødé": "%C3%9Cn%C3%AF%2F%C3%A7%C3%B8d%C3%A9.json",
    "k\u093e": "k%E0%A4%BE.json",  # a combining vowel sign (Unicode Other_Alphabetic)
    "Ⓐ": "%E2%92%B6.json",  # a symbol that is Other_Alphabetic
    "\U0001d49c": "%F0%9D%92%9C.json",  # a letter outside the BMP
    "a.": "a..json",
    ".x": ".x.json",
    "a/.b": "a%2F.b.json",
    "main/x": "main%2Fx.json",
    "a.lock/b": "a.lock%2Fb.json",
}


@pytest.mark.parametrize(("name", "file_name"), sorted(PYLANCE_BRANCH_FILES.items()))
def test_branch_files_are_named_as_pylance_names_them(name: str, file_name: str) -> None:
    from txn_engine.format.refs import branch_file_name, branch_name_from_file

    assert branch_file_name(name) == file_name
    assert branch_name_from_file(file_name) == name
    assert validate_branch_name(name) == name


@pytest.mark.parametrize(
    "name",
    # every one refused by pylance 14.0.2's create_branch (measured)
    ["", "main", "a/", "/a", "a//b", "a..b", "a\\b", "a/b.lock", ".lock", "with space",
     "pct%x", "a+b", "a:b", "~t", "a,b", "x\u00ad", "x\U0001f600", "x\u20dd",
     ".", "a/./b", "./a", "a/."],
)  # fmt: skip
def test_branch_names_pylance_refuses_are_refused(name: str) -> None:
    with pytest.raises(InvalidOperationError):
        validate_branch_name(name)


@pytest.mark.parametrize(
    "file_name",
    [
        "..%2F..%2Fx.json",  # pylance: "Failed to decode branch name"
        "%FF.json",  # not UTF-8
        "a%2F%2Fb.json",  # an empty segment
        "%2Fa.json",
        "%c3%a9.json",  # lower-case escapes: pylance never writes them
        "é.json",  # not percent-encoded: pylance never writes it
        "b%20c.json",  # a space: no branch pylance creates
        "x%ZZ.json",
        "main.json",
        ".json",
        "a%2F.%2Fb.json",
    ],
)
def test_branch_files_pylance_could_not_have_written_are_typed_errors(file_name: str) -> None:
    from txn_engine.errors import CorruptRefError
    from txn_engine.format.refs import branch_name_from_file

    with pytest.raises(CorruptRefError) as caught:
        branch_name_from_file(file_name)
    assert caught.value.path == f"_refs/branches/{file_name}"
    assert file_name in str(caught.value)


def test_branches_with_encoded_names_are_listed_and_read(storage: MemoryStorage) -> None:
    from txn_engine.errors import CorruptRefError
    from txn_engine.format.refs import read_branch

    body = json.dumps({"parentBranch": None, "parentVersion": 1}).encode()
    for file_name in ("%C3%A9.json", "a%2Fb.json"):
        storage.put(f"_refs/branches/{file_name}", body)
    assert [(b.name, b.path) for b in list_branches(storage)] == [
        ("a/b", "tree/a/b"),
        ("é", "tree/é"),
    ]
    assert read_branch(storage, "a/b").parent_version == 1
    storage.put("_refs/branches/..%2F..%2Fx.json", body)
    with pytest.raises(CorruptRefError, match=r"\.\.%2F\.\.%2Fx\.json"):
        list_branches(storage)
