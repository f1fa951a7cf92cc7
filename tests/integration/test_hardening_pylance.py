"""Bounds taken from what pylance 14.0.2 reads back: at the bound pylance reads what
txn_engine wrote; one past it txn_engine refuses the commit (pylance itself would panic)."""

from __future__ import annotations

import uuid
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from txn_engine import commit
from txn_engine.builder.index import MAX_INDEX_CREATED_AT_MS
from txn_engine.errors import InvalidOperationError
from txn_engine.model import IndexMetadata
from txn_engine.ops import CreateIndex
from txn_engine.transaction import Transaction


def _index(created_at: int) -> IndexMetadata:
    return IndexMetadata(str(uuid.uuid4()), "i", (0,), 1, frozenset({0}), created_at=created_at)


def test_index_created_at_bound_is_what_pylance_reads(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"id": pa.array([1, 2], pa.int64())}), uri)
    with pytest.raises(InvalidOperationError, match="created_at"):
        commit(uri, Transaction(1, CreateIndex(new_indices=[_index(MAX_INDEX_CREATED_AT_MS + 1)])))
    assert lance.dataset(uri).version == 1
    commit(uri, Transaction(1, CreateIndex(new_indices=[_index(MAX_INDEX_CREATED_AT_MS)])))
    ds = lance.dataset(uri)
    assert ds.version == 2
    assert [i["name"] for i in ds.list_indices()] == ["i"]  # pylance panicked one past it


def test_one_past_the_bound_pylance_cannot_list_the_indices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bound is tight: written anyway (the check lifted), pylance 14 panics."""
    from txn_engine.builder import index as index_builder

    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"id": pa.array([1, 2], pa.int64())}), uri)
    monkeypatch.setattr(index_builder, "MAX_INDEX_CREATED_AT_MS", 2**63)
    commit(uri, Transaction(1, CreateIndex(new_indices=[_index(MAX_INDEX_CREATED_AT_MS + 1)])))
    with pytest.raises(BaseException, match="Invalid timestamp") as info:
        lance.dataset(uri).list_indices()
    assert type(info.value).__name__ == "PanicException"
