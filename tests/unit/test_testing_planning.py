"""txn_engine.testing.planning: the planning steps the Hypothesis machine and the stress
writers share build the operations and intended effects they promise, and commit."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from pyroaring import BitMap

from txn_engine._proto import table_pb2
from txn_engine.commit import commit
from txn_engine.dataset import Dataset
from txn_engine.format.deletion import read_deletion_vector
from txn_engine.model import Fragment
from txn_engine.ops import Append, Delete, Overwrite, Rewrite, Update
from txn_engine.storage.memory import MemoryStorage
from txn_engine.testing.machine import SCHEMA
from txn_engine.testing.model import (
    Contents,
    NoRowChange,
    RemoveRows,
    Row,
    SetValues,
    SyntheticRows,
    apply_effect,
    read_contents,
)
from txn_engine.testing.planning import compaction, live_offsets, row_change
from txn_engine.transaction import Transaction

ROWS = [(10 + i, i) for i in range(5)]


def _table() -> tuple[MemoryStorage, SyntheticRows, Dataset]:
    storage = MemoryStorage()
    rows = SyntheticRows()
    commit(storage, Transaction(0, Overwrite((rows.fragment(ROWS),), SCHEMA)))
    commit(storage, Transaction(1, Append((rows.fragment([(99, 0)]),))))
    return storage, rows, Dataset.open(storage)


def _land(storage: MemoryStorage, rows: SyntheticRows, ds: Dataset, op: object) -> Contents:
    commit(storage, Transaction(ds.version, op))  # type: ignore[arg-type]
    return read_contents(storage, rows)


def test_deleting_some_rows_writes_a_deletion_vector() -> None:
    storage, rows, ds = _table()
    pb = ds.manifest_pb.fragments[0]
    assert live_offsets(storage, pb) == [0, 1, 2, 3, 4]
    op, effect = row_change(storage, ds.version, pb, ROWS, [0, 1, 2, 3, 4], [3, 1])
    assert isinstance(op, Delete)
    assert effect == RemoveRows([11, 13])
    assert op.deleted_fragment_ids == ()
    (restated,) = op.updated_fragments
    assert restated.deletion_file is not None
    dv = read_deletion_vector(storage, pb.id, restated.deletion_file.to_proto())
    assert dv == BitMap([1, 3])
    assert op.affected_rows is not None
    assert sorted(op.affected_rows) == [(pb.id << 32) | 1, (pb.id << 32) | 3]
    before = read_contents(storage, rows, ds.version)
    assert _land(storage, rows, ds, op) == apply_effect(before, effect)
    after = Dataset.open(storage).manifest_pb.fragments[0]
    assert live_offsets(storage, after) == [0, 2, 4]


def test_a_second_delete_keeps_the_rows_deleted_before() -> None:
    storage, rows, ds = _table()
    pb = ds.manifest_pb.fragments[0]
    first, _ = row_change(storage, ds.version, pb, ROWS, [0, 1, 2, 3, 4], [0])
    _land(storage, rows, ds, first)
    ds = Dataset.open(storage)
    pb = ds.manifest_pb.fragments[0]
    alive = live_offsets(storage, pb)
    op, effect = row_change(storage, ds.version, pb, ROWS, alive, [4], affected_known=False)
    assert isinstance(op, Delete)
    assert op.affected_rows is None
    (restated,) = op.updated_fragments
    assert restated.deletion_file is not None
    dv = read_deletion_vector(storage, pb.id, restated.deletion_file.to_proto())
    assert dv == BitMap([0, 4])
    assert effect == RemoveRows([14])


def test_deleting_every_live_row_removes_the_fragment() -> None:
    storage, _, ds = _table()
    pb = ds.manifest_pb.fragments[1]
    op, effect = row_change(storage, ds.version, pb, [(99, 0)], [0], [0])
    assert isinstance(op, Delete)
    assert (op.deleted_fragment_ids, op.updated_fragments) == ((pb.id,), ())
    assert effect == RemoveRows([99])
    assert not storage.list("_deletions")


def test_update_re_adds_the_rids_with_the_new_values() -> None:
    storage, rows, ds = _table()
    pb = ds.manifest_pb.fragments[0]
    before = read_contents(storage, rows, ds.version)
    op, effect = row_change(
        storage, ds.version, pb, ROWS, [0, 1, 2, 3, 4], [2, 0],
        new_values=[7, 8], new_fragment=rows.fragment,
    )  # fmt: skip
    assert isinstance(op, Update)
    assert effect == SetValues([(10, 7), (12, 8)])
    (new,) = op.new_fragments
    assert rows.rows(new) == ((10, 7), (12, 8))
    assert op.fields_modified == (1,)
    assert _land(storage, rows, ds, op) == apply_effect(before, effect)
    with pytest.raises(ValueError, match="one new value per chosen row"):
        row_change(
            storage,
            ds.version,
            pb,
            ROWS,
            [0, 1],
            [0],
            new_values=[1, 2],
            new_fragment=rows.fragment,
        )


def test_compaction_keeps_the_live_rows_in_order() -> None:
    storage, rows, ds = _table()
    first = ds.manifest_pb.fragments[0]
    delete, _ = row_change(storage, ds.version, first, ROWS, [0, 1, 2, 3, 4], [1])
    _land(storage, rows, ds, delete)
    ds = Dataset.open(storage)
    before = read_contents(storage, rows, ds.version)
    olds = list(ds.manifest_pb.fragments)

    def physical(pb: table_pb2.DataFragment) -> Sequence[Row]:
        return rows.rows(Fragment.from_proto(pb))

    op, effect = compaction(storage, olds, physical, rows.fragment)
    assert isinstance(op, Rewrite)
    assert effect == NoRowChange("compaction")
    (group,) = op.groups
    assert [f.id for f in group.old_fragments] == [pb.id for pb in olds]
    (new,) = group.new_fragments
    assert rows.rows(new) == ((10, 0), (12, 2), (13, 3), (14, 4), (99, 0))
    assert _land(storage, rows, ds, op) == before
