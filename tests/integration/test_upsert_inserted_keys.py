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
