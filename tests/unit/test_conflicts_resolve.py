"""Resolutions beyond Lance at the planner level (pure): renumbering carried fragments,
and the row mapping through a compaction."""

from __future__ import annotations

from pyroaring import BitMap

from txn_engine.builder.remap import group_map
from txn_engine.conflicts.resolve import renumber_carried
from txn_engine.model import DataFile, DeletionFile, DeletionFileType, Fragment
from txn_engine.ops import Rewrite, RewriteGroup
from txn_engine.transaction import Transaction


def _frag(fid: int, rows: int, dv: DeletionFile | None = None) -> Fragment:
    return Fragment(fid, (DataFile(f"f{fid}.lance", (0,), (0,), 2, 2, 10),), rows, dv)


DV = DeletionFile(DeletionFileType.BITMAP, 3, 77, 2)


def test_a_carried_fragment_whose_id_was_taken_is_numbered_again() -> None:
    txn = Transaction(1, Rewrite([RewriteGroup([_frag(0, 10)], [_frag(5, 10, DV)])]))
    latest = [_frag(5, 3).to_proto()]  # an Append took id 5 meanwhile
    out = renumber_carried(txn, latest, 9, lambda fid, pb: BitMap([1, 2]))
    assert out is not None
    moved, writes = out
    assert isinstance(moved.operation, Rewrite)
    (new,) = moved.operation.groups[0].new_fragments
    assert new.id == 10
    assert new.deletion_file == DV
    (w,) = writes
    assert w.fragment_id == 10
    assert BitMap.deserialize(w.data) == BitMap([1, 2])
    assert renumber_carried(txn, latest, None, lambda fid, pb: BitMap()) is None
    free = [_frag(6, 3).to_proto()]
    assert renumber_carried(txn, free, 9, lambda fid, pb: BitMap()) == (txn, ())


def test_a_renumbered_fragment_takes_its_vector_from_this_plans_pending_write() -> None:
    """The deletion file of a carried fragment planned in this same attempt is not on the
    store yet: it is moved from the pending writes (the read would fail), and the new id
    is above every id my fragments use, not only above ``high``."""
    from txn_engine.builder import PendingDeletionFile
    from txn_engine.format.deletion import encode_bitmap_deletions

    txn = Transaction(
        1, Rewrite([RewriteGroup([_frag(0, 10)], [_frag(5, 10, DV), _frag(10, 10)])])
    )
    pending = PendingDeletionFile(5, DV.to_proto(), encode_bitmap_deletions(BitMap([4])))
    other = PendingDeletionFile(10, DV.to_proto(), b"kept")
    latest = [_frag(5, 3).to_proto()]

    def never(fid: int, pb: object) -> BitMap:
        raise AssertionError("read from the store")

    out = renumber_carried(txn, latest, 9, never, (pending, other))
    assert out is not None
    moved, writes = out
    assert isinstance(moved.operation, Rewrite)
    assert [f.id for f in moved.operation.groups[0].new_fragments] == [11, 10]
    assert [w.fragment_id for w in writes] == [10, 11]
    assert writes[0] is other
    assert BitMap.deserialize(writes[1].data) == BitMap([4])


def test_rows_move_through_a_compaction_in_order() -> None:
    """Old fragments 0 (10 rows, 2 deleted) and 1 (5 rows) into new fragments of 8 and 5:
    fragment 0's live offsets fill the first new fragment, fragment 1 the second."""
    old0 = _frag(0, 10, DV)
    group = RewriteGroup([old0, _frag(1, 5)], [_frag(0, 8), _frag(0, 5)])
    gm = group_map(group, lambda fid, pb: BitMap([0, 4]) if fid == 0 else BitMap())
    assert gm is not None
    assert gm.move(0, BitMap([1, 9])) == {0: BitMap([0, 7])}
    assert gm.move(1, BitMap([0, 4])) == {1: BitMap([0, 4])}
    assert gm.move(0, BitMap([4])) is None  # already deleted when compacted: not found
    short = RewriteGroup([old0, _frag(1, 5)], [_frag(0, 12)])
    assert group_map(short, lambda fid, pb: BitMap([0, 4]) if fid == 0 else BitMap()) is None
