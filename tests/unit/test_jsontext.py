"""Strict JSON for every JSON object of a table (txn_engine.jsontext): what json.loads lets
escape as something other than ValueError, or returns where Lance's parser refuses."""

from __future__ import annotations

import json
import sys
from datetime import timedelta

import pytest

from txn_engine import jsontext
from txn_engine.commit import commit
from txn_engine.errors import CleanupAbortedError, CorruptManifestError, InvalidOperationError
from txn_engine.format.refs import create_tag, list_branches, list_tags, read_tag
from txn_engine.leases import CLEANING_DIR, LEASES_DIR, list_markers, read_leases
from txn_engine.model import DataFile, Fragment, LanceField
from txn_engine.ops import Append, Overwrite
from txn_engine.retention import cleanup
from txn_engine.spark._fragments import _fragment_json
from txn_engine.spark._options import _json_object
from txn_engine.storage import MemoryStorage
from txn_engine.transaction import Transaction


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_nesting_up_to_the_limit_parses_and_beyond_it_is_a_value_error() -> None:
    assert jsontext.loads(_nested(jsontext.MAX_DEPTH)) is not None
    assert jsontext.loads('{"a": ' + _nested(jsontext.MAX_DEPTH - 1) + "}") is not None
    with pytest.raises(ValueError, match="nested deeper"):
        jsontext.loads(_nested(jsontext.MAX_DEPTH + 1))
    with pytest.raises(ValueError, match="nested deeper"):
        jsontext.loads('{"a": ' + _nested(jsontext.MAX_DEPTH) + "}")


@pytest.mark.parametrize("depth", [sys.getrecursionlimit(), 200_000])
def test_nesting_past_the_recursion_limit_is_a_value_error(depth: int) -> None:
    with pytest.raises(RecursionError):  # what json.loads does, so the test means something
        json.loads(_nested(depth))
    with pytest.raises(ValueError, match="nested deeper"):
        jsontext.loads(_nested(depth))


@pytest.mark.parametrize(
    "text", ["NaN", "[Infinity]", '{"v": -Infinity}', "1e400", '{"version": -1e309}']
)
def test_numbers_serde_json_refuses_are_value_errors(text: str) -> None:
    json.loads(text)  # accepted there
    with pytest.raises(ValueError, match=r"out of range|is not a JSON value"):
        jsontext.loads(text)


def test_ordinary_json_is_unchanged() -> None:
    text = '{"a": [1, 2.5, -3e10, true, null, "x\\u00e9"], "b": {"c": 18446744073709551616}}'
    assert jsontext.loads(text) == json.loads(text)
    assert jsontext.loads(text.encode()) == json.loads(text)


def test_non_utf8_bytes_are_a_value_error() -> None:
    with pytest.raises(UnicodeDecodeError):  # a ValueError: what callers catch
        jsontext.loads(b'{"a": "\xff"}')


# ---- the readers -------------------------------------------------------------------------------

SCHEMA = (LanceField(0, -1, "id", "int64"),)


def _frag(name: str) -> Fragment:
    return Fragment(0, (DataFile(name, (0,), (0,), 2, 2, 10),), 10)


def _table() -> MemoryStorage:
    """Two versions: an Overwrite and an Append."""
    store = MemoryStorage()
    commit(store, Transaction(0, Overwrite([_frag("a.lance")], SCHEMA)))
    commit(store, Transaction(1, Append([_frag("b.lance")])))
    return store


def _versions(store: MemoryStorage) -> dict[str, bytes]:
    return {n: store.get(f"_versions/{n}") for n in store.list("_versions")}


DEEP = ('{"branch": null, "version": 1, "x": ' + _nested(100_000) + "}").encode()


def test_a_deep_tag_is_corrupt_for_its_readers_and_cleanup_deletes_nothing() -> None:
    store = _table()
    create_tag(store, "good", 1)
    store.put("_refs/tags/bad.json", DEEP)
    with pytest.raises(CorruptManifestError, match="not JSON"):
        read_tag(store, "bad")
    with pytest.raises(CorruptManifestError):
        list_tags(store)
    before = _versions(store)
    with pytest.raises(CleanupAbortedError, match="nothing deleted"):
        cleanup(store, older_than=timedelta(0), progress=False)
    assert _versions(store) == before


def test_a_branch_with_an_infinite_parent_version_is_corrupt() -> None:
    store = _table()
    store.put("_refs/branches/b.json", b'{"parentVersion": 1e400, "parentBranch": null}')
    with pytest.raises(CorruptManifestError, match="not JSON"):
        list_branches(store)


def test_a_tag_time_beyond_a_datetime_reads_as_no_time() -> None:
    store = _table()
    store.put(
        "_refs/tags/t.json",
        b'{"branch": null, "version": 1, "createdAt": 1e300, "updatedAt": -1e18}',
    )
    tag = read_tag(store, "t")
    assert (tag.version, tag.created_at, tag.updated_at) == (1, None, None)


def test_deep_leases_and_markers_are_malformed_not_crashes() -> None:
    store = _table()
    store.put(f"{LEASES_DIR}/l.json", DEEP)
    store.put(f"{CLEANING_DIR}/c.json", DEEP)
    (info,) = read_leases(store)
    assert info.error is not None
    assert "not JSON" in info.error
    # markers are never read (their names carry what a lease taker needs): not a cleanup's
    assert [(m.uuid, m.floor) for m in list_markers(store)] == [(None, None)]
    with pytest.raises(CleanupAbortedError, match="malformed"):
        cleanup(store, older_than=timedelta(0), progress=False)


def test_spark_json_inputs_are_typed_errors() -> None:
    with pytest.raises(InvalidOperationError, match="JSON object"):
        _json_object("schemaMetadata", _nested(5000))
    with pytest.raises(InvalidOperationError, match="not JSON"):
        _fragment_json("{not json")
    with pytest.raises(InvalidOperationError, match="not JSON"):
        _fragment_json(_nested(5000))


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("_refs/tags/t.json", b'{"branch": [], "version": 1}'),
        ("_refs/tags/t.json", b'{"branch": 5, "version": 1}'),
        ("_refs/branches/b.json", b'{"parentBranch": {}, "parentVersion": 1}'),
    ],
)
def test_cleanup_stops_at_a_ref_whose_branch_is_not_a_name(path: str, body: bytes) -> None:
    """Such a tag would pin version 1 on no branch cleanup can find: it is damaged, and
    cleanup deletes nothing rather than drop the pin (it used to go on, and removed v1)."""
    store = _table()
    store.put(path, body)
    before = _versions(store)
    with pytest.raises(CleanupAbortedError, match="not a branch name"):
        cleanup(store, older_than=timedelta(0), progress=False)
    assert _versions(store) == before


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("4294967295", 2**32 - 1),
        ("4294967296", None),  # past the maximum
        ("1_000", None),  # int() takes these four
        (" 7", None),
        ("7\n", None),
        ("\u0663", None),
        ("\u00b2", None),  # isdigit() but no int()
        ("9" * 5000, None),  # int() raises ValueError past 4,300 digits
        ("-1", None),
        ("", None),
    ],
)
def test_whole_number_reads_ascii_digits_up_to_the_maximum(text: str, expected: int | None) -> None:
    assert jsontext.whole_number(text, 2**32 - 1) == expected
