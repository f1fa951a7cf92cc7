"""Regression: ``writers.append_fragments`` must not commit against the version it finds at
commit time (issue 13: rows planned before a pylance overwrite landed on top of it)."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest
from lance.fragment import write_fragments

from txn_engine import writers
from txn_engine.errors import IncompatibleTransactionError, InvalidOperationError


def _table(ids: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64())})


@pytest.fixture
def uri(tmp_path: Path) -> str:
    path = str(tmp_path / "t.lance")
    lance.write_dataset(_table([1, 2]), path)
    return path


def test_fragments_planned_before_an_overwrite_conflict(uri: str) -> None:
    planned_at = lance.dataset(uri).version
    frags = write_fragments(_table([100, 101]), uri)
    lance.write_dataset(_table([7]), uri, mode="overwrite")
    with pytest.raises(IncompatibleTransactionError) as info:
        writers.append_fragments(uri, frags, read_version=planned_at)
    assert info.value.other_operation == "Overwrite"
    assert lance.dataset(uri).to_table().column("id").to_pylist() == [7]


def test_pylance_write_transaction_carries_its_read_version(uri: str) -> None:
    planned = write_fragments(_table([100, 101]), uri, return_transaction=True)
    lance.write_dataset(_table([7]), uri, mode="overwrite")
    with pytest.raises(IncompatibleTransactionError):
        writers.append_fragments(uri, planned)
    assert lance.dataset(uri).to_table().column("id").to_pylist() == [7]


def test_without_a_read_version_nothing_is_committed(uri: str) -> None:
    frags = write_fragments(_table([100, 101]), uri)
    lance.write_dataset(_table([7]), uri, mode="overwrite")
    with pytest.raises(InvalidOperationError, match="read_version"):
        writers.append_fragments(uri, frags)
    assert lance.dataset(uri).to_table().column("id").to_pylist() == [7]


def test_append_fragments_still_lands_without_a_conflict(uri: str) -> None:
    planned = write_fragments(_table([100]), uri, return_transaction=True)
    lance.write_dataset(_table([3]), uri, mode="append")  # appends do not conflict
    result = writers.append_fragments(uri, planned)
    assert result.transaction.read_version == 1
    assert sorted(lance.dataset(uri).to_table().column("id").to_pylist()) == [1, 2, 3, 100]
