"""The keys an upsert inserts (recorded in its Update, checked against concurrent upserts
and appends) are decided without a scan of the table when pylance's plan says it inserts
no row or every source row, and equal what the scan finds in every case."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest

import txn_engine as te
from txn_engine.conflicts.upsert import inserted_rows_filter, key_hashes


class _NoScan:
    """A pylance dataset that must not be scanned."""

    def __init__(self, lds: Any) -> None:
        self._lds = lds

    def to_table(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the table was scanned")


def _plan(lds: Any, source: pa.Table) -> dict[str, int]:
    builder = lds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
    _txn, stats = builder.execute_uncommitted(source)
    return dict(stats)


@pytest.mark.parametrize(
    ("ids", "scans"),
    [([10, 11, 12], False), ([1, 2], False), ([2, 3, 10], True)],
    ids=["all-new", "all-existing", "mixed"],
)
def test_inserted_keys_equal_the_scans_and_skip_it_when_the_plan_decides(
    tmp_path: Path, ids: list[int], scans: bool
) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}), uri)
    lds = lance.dataset(uri)
    snapshot = te.Dataset.open(uri)
    source = pa.table({"id": ids, "v": ["x"] * len(ids)})
    stats = _plan(lds, source)
    by_scan = inserted_rows_filter(lds, snapshot, source, ["id"])
    expected = frozenset(key_hashes(pa.table({"id": [i for i in ids if i > 3]}), ["id"]))
    assert by_scan[1] == expected
    inserted = stats["num_inserted_rows"]
    if scans:
        with pytest.raises(AssertionError, match="scanned"):
            inserted_rows_filter(_NoScan(lds), snapshot, source, ["id"], inserted)
    else:
        assert inserted_rows_filter(_NoScan(lds), snapshot, source, ["id"], inserted) == by_scan
    assert inserted_rows_filter(lds, snapshot, source, ["id"], inserted) == by_scan


def test_an_upsert_of_new_keys_records_them_all(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}), uri)
    source = pa.table({"id": [7, 8], "v": ["x", "y"]})
    result = te.open(uri).merge_insert(source, "id")
    op = result.transaction.operation
    assert isinstance(op, te.Update)
    assert op.inserted_key_hashes == frozenset(key_hashes(source, ["id"]))
    assert sorted(lance.dataset(uri).to_table()["id"].to_pylist()) == [1, 2, 3, 7, 8]


@pytest.mark.parametrize("stable", [False, True], ids=["row-addresses", "stable-row-ids"])
def test_a_mixed_upsert_reads_only_the_fragments_its_plan_touched(
    tmp_path: Path, stable: bool
) -> None:
    """An upsert that updates every matched row touches every fragment holding one of its
    existing keys: reading only those fragments finds the same inserted keys as a scan of
    the whole table. A key outside them is only counted as inserted (stricter checks)."""
    uri = str(tmp_path / "t.lance")
    for i in range(4):  # four fragments of ten rows
        rows = pa.table({"id": list(range(i * 10, i * 10 + 10)), "v": ["a"] * 10})
        lance.write_dataset(
            rows, uri, mode="append" if i else "create", enable_stable_row_ids=stable
        )
    lds = lance.dataset(uri)
    snapshot = te.Dataset.open(uri)
    source = pa.table({"id": [12, 13, 31, 100, 101], "v": ["x"] * 5})
    txn, _stats = (
        lds.merge_insert("id")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute_uncommitted(source)
    )
    op = te.interop.as_transaction(txn).operation
    assert isinstance(op, te.Update)
    touched = [f.id for f in op.updated_fragments] + list(op.removed_fragment_ids)
    assert sorted(touched) == [1, 3]  # the fragments of 12, 13 and 31
    by_scan = inserted_rows_filter(lds, snapshot, source, ["id"])
    assert by_scan[1] == frozenset(key_hashes(pa.table({"id": [100, 101]}), ["id"]))
    assert inserted_rows_filter(lds, snapshot, source, ["id"], None, touched) == by_scan
    # not the fragments of 31: its key is counted as inserted (a stricter record)
    partial = inserted_rows_filter(lds, snapshot, source, ["id"], None, [1])
    assert partial[1] == by_scan[1] | frozenset(key_hashes(pa.table({"id": [31]}), ["id"]))
    nothing = inserted_rows_filter(lds, snapshot, source, ["id"], None, [])
    assert nothing[1] == frozenset(key_hashes(source, ["id"]))


def test_a_conditional_upsert_still_scans_the_table(tmp_path: Path) -> None:
    """``when_matched_update_all="..."`` may leave a matched row untouched: its key is not
    inserted, which only a scan of the whole table can tell."""
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}), uri)
    source = pa.table({"id": [1, 2, 9], "v": ["x", "y", "z"]})
    result = te.open(uri).merge_insert(source, "id", when_matched_update_all="target.v = 'a'")
    op = result.transaction.operation
    assert isinstance(op, te.Update)
    assert op.inserted_key_hashes == frozenset(key_hashes(pa.table({"id": [9]}), ["id"]))
