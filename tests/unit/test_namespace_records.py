"""The namespace's records and names (no pylance, no lance-namespace needed)."""

from __future__ import annotations

import pytest

from txn_engine.errors import CorruptManifestError, InvalidOperationError
from txn_engine.namespace._records import (
    Decision,
    TableEntry,
    TableRecord,
    attempt_id,
    decision_path,
    new_transaction_id,
    parse_table_id,
    started_ns,
    table_location,
)
from txn_engine.namespace._versions import staged_relative


def test_table_ids() -> None:
    assert parse_table_id("db.events") == ("db", "events")
    assert parse_table_id(["db", "ev-1_x"]) == ("db", "ev-1_x")
    assert table_location(("db", "events")) == "db/events.lance"
    for bad in ([], ["..", "x"], ["_hidden"], ["a/b"], ["x.lance"], [""], ["a"] * 9, [7]):
        with pytest.raises(InvalidOperationError):
            parse_table_id(bad)  # type: ignore[arg-type]


def test_transaction_ids_sort_by_age_and_name_safe_objects() -> None:
    first, second = new_transaction_id(), new_transaction_id()
    assert first < second
    born = started_ns(first)
    assert born is not None
    assert born > 0
    assert started_ns("job-1~0") is None
    assert decision_path(first).endswith(f"/transactions/{first}.json")
    assert attempt_id("q1-7", 2) == "q1-7~2"
    for bad in ("../x", "a/b", ""):
        with pytest.raises(InvalidOperationError):
            decision_path(bad)
    with pytest.raises(InvalidOperationError):
        attempt_id("a~b", 0)


def test_records_round_trip_and_refuse_hostile_ones() -> None:
    entry = TableEntry(("db", "t"), 3, "_versions/x.manifest-1", "_versions/x.manifest")
    decided = Decision("t1", "committed", (entry, TableEntry(("u",), None, None, None)))
    back = Decision.from_bytes(decided.to_bytes(), "d")
    assert back == decided
    assert back.entry(["db", "t"]) == entry
    record = TableRecord(("db", "t"), "db/t.lance", {"owner": "me"})
    assert TableRecord.from_bytes(record.to_bytes(), "r") == record
    hostile = [
        b"[]",
        b'{"transaction": "t", "state": "maybe", "tables": []}',
        b'{"transaction": "t", "state": "committed", "tables": [{"id": ["t"], "version": 1,'
        b' "staged": "../../etc/passwd", "path": "_versions/a"}]}',
        b'{"transaction": "t", "state": "committed", "tables": [{"id": ["t"], "version": 1,'
        b' "staged": null, "path": null}]}',
    ]
    for data in hostile:
        with pytest.raises(CorruptManifestError):
            Decision.from_bytes(data, "d")
    with pytest.raises(CorruptManifestError):
        TableRecord.from_bytes(b'{"id": ["t"], "location": "../elsewhere.lance"}', "r")


def test_staged_manifest_paths_stay_in_the_table() -> None:
    parts = ("db", "events")
    name = "18446744073709551613.manifest-6199515a"
    for given in (
        f"tmp/root/db/events.lance/_versions/{name}",
        f"s3://bucket/root/db/events.lance/_versions/{name}",
        f"_versions/{name}",
    ):
        assert staged_relative(parts, given) == f"_versions/{name}"
    for bad in (
        f"tmp/root/db/other.lance/_versions/{name}",
        "tmp/root/db/events.lance/_versions/a/b",
        "tmp/root/db/events.lance/data/x.lance",
        "/etc/passwd",
    ):
        with pytest.raises(InvalidOperationError):
            staged_relative(parts, bad)
