"""Rebase of Delete/Update deletion vectors (lance-format.md §7.3): pure, deletion vectors
read through a reader over a MemoryStorage, merged files returned (not written)."""

from __future__ import annotations

import pytest
from pyroaring import BitMap, BitMap64

from txn_engine._proto import table_pb2
from txn_engine.conflicts.detect import Conflict, check
from txn_engine.conflicts.matrix import Outcome
from txn_engine.conflicts.rebase import (
    DeletionReader,
    Rebased,
    derive_affected_rows,
    find_fragment,
    fragment_offsets,
    rebase,
)
from txn_engine.format.deletion import read_deletion_vector, write_deletion_vector
from txn_engine.model import DataFile, DeletionFile, Fragment
from txn_engine.ops import Append, Delete, Update, UpdateMode
from txn_engine.storage import MemoryStorage
from txn_engine.transaction import Transaction

FILES = (DataFile("a.lance", (0,), (0,), 2, 2, 10),)


def _frag(fid: int, dv: table_pb2.DeletionFile | None = None, rows: int = 10) -> Fragment:
    return Fragment(fid, FILES, rows, None if dv is None else DeletionFile.from_proto(dv))


def _pb(frags: list[Fragment]) -> list[table_pb2.DataFragment]:
    return [f.to_proto() for f in frags]


def _reader(store: MemoryStorage) -> DeletionReader:
    return lambda fid, pb: read_deletion_vector(store, fid, pb)


def _addr(fid: int, *offsets: int) -> BitMap64:
    return BitMap64([fid << 32 | o for o in offsets])


def test_fragment_offsets_and_find_fragment() -> None:
    rows = _addr(1, 5, 7) | _addr(2, 1) | BitMap64([3])
    assert fragment_offsets(rows, 1) == BitMap([5, 7])
    assert fragment_offsets(rows, 0) == BitMap([3])
    assert fragment_offsets(rows, 9) == BitMap()
    frags = _pb([_frag(0), _frag(2), _frag(5)])
    assert find_fragment(frags, 2) is frags[1]
    assert find_fragment(frags, 3) is None
    assert find_fragment(frags, 9) is None


def _setup() -> tuple[MemoryStorage, Transaction, Transaction, list[table_pb2.DataFragment]]:
    """Two deletes planned at version 1 on fragment 0: other deleted {1, 2}, mine {7, 8}."""
    store = MemoryStorage()
    other_dv = write_deletion_vector(store, 0, 1, BitMap([1, 2]))
    mine_dv = write_deletion_vector(store, 0, 1, BitMap([7, 8]))
    other = Transaction(1, Delete([_frag(0, other_dv)]))
    mine = Transaction(1, Delete([_frag(0, mine_dv)], affected_rows=_addr(0, 7, 8)))
    latest = _pb([_frag(0, other_dv), _frag(1)])  # version 2 = other landed
    return store, mine, other, latest


def test_disjoint_rows_merge_into_a_new_bin_file() -> None:
    store, mine, other, latest = _setup()
    result = check(mine, other, other_version=2, initial_fragments=lambda i: _frag(i))
    assert result.rebase_fragment_ids == {0}
    rebased = rebase(
        mine,
        read_dv=_reader(store),
        latest_version=2,
        latest_fragments=latest,
        rebase_fragment_ids=result.rebase_fragment_ids,
        initial_fragments=lambda i: _frag(i),
    )
    assert isinstance(rebased, Rebased)
    (pending,) = rebased.writes
    assert pending.fragment_id == 0
    assert pending.path.startswith("_deletions/0-2-")
    assert pending.path.endswith(".bin")
    assert not store.exists(pending.path)  # pure: the commit loop writes it, not rebase
    store.put(pending.path, pending.data)
    txn = rebased.transaction
    assert txn.read_version == 2
    assert txn.uuid == mine.uuid
    op = txn.operation
    assert isinstance(op, Delete)
    (frag,) = op.updated_fragments
    dv = frag.deletion_file
    assert dv is not None
    assert dv.file_type == 1  # BITMAP: rebased files are always .bin
    assert dv.read_version == 2
    assert dv.num_deleted_rows == 4
    assert read_deletion_vector(store, 0, dv.to_proto()) == BitMap([1, 2, 7, 8])
    assert op.affected_rows == _addr(0, 7, 8)


def test_overlapping_rows_are_a_retryable_conflict() -> None:
    store, mine, _, latest = _setup()
    assert isinstance(mine.operation, Delete)
    clash = Transaction(1, Delete(mine.operation.updated_fragments, affected_rows=_addr(0, 2, 7)))
    out = rebase(
        clash,
        read_dv=_reader(store),
        latest_version=2,
        latest_fragments=latest,
        rebase_fragment_ids=frozenset({0}),
        initial_fragments=lambda i: _frag(i),
    )
    assert isinstance(out, Conflict)
    assert out.outcome is Outcome.RETRYABLE
    assert out.rule == "ROWS"
    assert out.row_addresses == (2,)
    assert out.fragment_ids == {0}


def test_fragment_fully_deleted_after_merge_is_removed() -> None:
    store = MemoryStorage()
    other_dv = write_deletion_vector(store, 0, 1, BitMap(range(5)))
    mine_dv = write_deletion_vector(store, 0, 1, BitMap(range(5, 10)))
    mine = Transaction(
        1, Update(updated_fragments=[_frag(0, mine_dv)], affected_rows=_addr(0, *range(5, 10)))
    )
    out = rebase(
        mine,
        read_dv=_reader(store),
        latest_version=2,
        latest_fragments=_pb([_frag(0, other_dv)]),
        rebase_fragment_ids=frozenset({0}),
        initial_fragments=lambda i: _frag(i),
    )
    assert isinstance(out, Rebased)
    assert out.writes == ()  # nothing to write: the fragment is removed instead
    out = out.transaction
    assert isinstance(out.operation, Update)
    assert out.operation.updated_fragments == ()
    assert out.operation.removed_fragment_ids == (0,)


def test_missing_latest_fragment_is_retryable() -> None:
    store, mine, _, _ = _setup()
    out = rebase(
        mine,
        read_dv=_reader(store),
        latest_version=3,
        latest_fragments=_pb([_frag(1)]),
        rebase_fragment_ids=frozenset({0}),
        initial_fragments=lambda i: _frag(i),
    )
    assert isinstance(out, Conflict)
    assert out.retryable


def test_no_rebase_work_only_moves_read_version_of_delete_update() -> None:
    store = MemoryStorage()
    t = Transaction(1, Delete(deleted_fragment_ids=[3]))
    out = rebase(
        t,
        read_dv=_reader(store),
        latest_version=4,
        latest_fragments=[],
        rebase_fragment_ids=frozenset(),
        initial_fragments=None,
    )
    assert isinstance(out, Rebased)
    assert out.writes == ()
    assert out.transaction.read_version == 4
    a = Transaction(1, Append([_frag(0)]))
    assert (
        rebase(
            a,
            read_dv=_reader(store),
            latest_version=4,
            latest_fragments=[],
            rebase_fragment_ids=frozenset(),
            initial_fragments=None,
        ).transaction
        is a
    )
    assert store.list("_deletions") == []


def test_rebase_without_affected_rows_is_a_programming_error() -> None:
    store, mine, _, latest = _setup()
    assert isinstance(mine.operation, Delete)
    bare = Transaction(1, Delete(mine.operation.updated_fragments))
    with pytest.raises(ValueError, match="affected_rows"):
        rebase(
            bare,
            read_dv=_reader(store),
            latest_version=2,
            latest_fragments=latest,
            rebase_fragment_ids=frozenset({0}),
            initial_fragments=lambda i: _frag(i),
        )


def test_derive_affected_rows_from_deletion_files() -> None:
    store = MemoryStorage()
    before = write_deletion_vector(store, 0, 1, BitMap([0]))
    after = write_deletion_vector(store, 0, 2, BitMap([0, 4, 6]))
    initial = {0: _frag(0, before), 1: _frag(1, rows=3)}
    t = Transaction(2, Delete([_frag(0, after)], deleted_fragment_ids=[1]))
    rows = derive_affected_rows(t, initial.get, _reader(store))
    assert rows == _addr(0, 4, 6) | _addr(1, 0, 1, 2)
    cols = Transaction(
        2, Update(updated_fragments=[_frag(0, after)], update_mode=UpdateMode.REWRITE_COLUMNS)
    )
    assert derive_affected_rows(cols, initial.get, _reader(store)) is None
    whole = Transaction(2, Delete(deleted_fragment_ids=[1]))
    assert derive_affected_rows(whole, initial.get, _reader(store)) is None
    other_files = Fragment(0, (DataFile("b.lance", (0,)),), 10)
    assert (
        derive_affected_rows(Transaction(2, Delete([other_files])), initial.get, _reader(store))
        is None
    )


# ---- the retry planner: pure, I/O injected -------------------------------------------------


def test_plan_retry_is_pure_and_returns_what_to_write() -> None:
    """Given the winners as values and a deletion-vector reader, the planner decides
    (check, derive rows, rebase) without touching storage: the reader is its only input."""
    from txn_engine.codec import transaction_to_proto
    from txn_engine.conflicts.planner import Winner, plan_retry
    from txn_engine.conflicts.rebase import ConflictOptions
    from txn_engine.errors import VersionNotFoundError

    store, mine, other, latest = _setup()
    assert isinstance(mine.operation, Delete)
    bare = Transaction(1, Delete(mine.operation.updated_fragments))  # no affected rows
    reads: list[int] = []

    def read_dv(fid: int, pb: table_pb2.DeletionFile) -> BitMap:
        reads.append(fid)
        return read_deletion_vector(store, fid, pb)

    winners = [Winner(2, transaction_to_proto(other))]
    kw = {"latest_version": 2, "latest_fragments": latest, "initial_fragments": _frag}
    listed = store.list("_deletions")
    lance = ConflictOptions(rebase_rows=False)
    strict = plan_retry(bare, winners, read_dv=read_dv, options=lance, **kw)  # type: ignore[arg-type]
    assert isinstance(strict, Conflict)
    assert strict.rule == "D1"  # Lance's rule: same fragment, no rows known
    assert reads == []
    derived = plan_retry(
        bare,
        winners,
        read_dv=read_dv,
        options=ConflictOptions(derive_affected_rows=True, rebase_rows=False),
        **kw,
    )  # type: ignore[arg-type]
    by_default = plan_retry(bare, winners, read_dv=read_dv, **kw)  # type: ignore[arg-type]
    assert isinstance(by_default, Rebased)  # beyond Lance: rows derived by default
    assert isinstance(derived, Rebased)
    assert by_default.transaction.operation.affected_rows == _addr(0, 7, 8)  # type: ignore[union-attr]
    assert [w.data for w in by_default.writes] == [w.data for w in derived.writes]
    assert isinstance(derived, Rebased)
    assert derived.transaction.read_version == 2
    op = derived.transaction.operation
    assert isinstance(op, Delete)
    assert op.affected_rows == _addr(0, 7, 8)
    assert len(derived.writes) == 1
    assert reads  # deletion vectors were read through the reader only
    assert store.list("_deletions") == listed  # and nothing was written
    gone = plan_retry(mine, [Winner(2, None, VersionNotFoundError("gone"))], read_dv=read_dv, **kw)  # type: ignore[arg-type]
    assert isinstance(gone, Conflict)
    assert gone.rule == "MISSING"
