"""Resolutions beyond Lance: pairs pylance 14 refuses that have one correct result.

The matrix (:mod:`txn_engine.conflicts.matrix`) says what pylance 14 does; with
:attr:`~txn_engine.conflicts.rebase.ConflictOptions.rebase_rows` (the default) the retry
planner then resolves these conflicts instead of refusing them (``docs/conflicts.md``,
*Beyond Lance*):

* **my Delete/Update after a Rewrite** of fragments I changed: the rows I deleted are found
  in the rewritten fragments (:mod:`txn_engine.builder.remap`) and my transaction becomes a
  Delete/Update of those (their deletion vectors merged at rebase);
* **my Delete/Update after a Merge** (new columns on the same physical rows): my
  restated fragments take the Merge's files, my deletion vectors are merged at rebase;
* **my Rewrite after a Delete/Update** of fragments I rewrote: the rows deleted since my
  read version are mapped into my new fragments, which carry them as deletion files;
* **my Merge after a Delete**: my fragments take the latest deletion files.

Everything needed is read through ``read_dv`` or found in the transactions; a deletion file
that cannot be read raises (the commit loop reports it) and anything that does not add up
(counts, row ids, a fragment gone or its files changed) keeps the conflict: ``None``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs
from pyroaring import BitMap, BitMap64

from txn_engine._proto import table_pb2
from txn_engine.builder import DeletionReader, FragmentLookup, PendingDeletionFile
from txn_engine.builder._row_addresses import addresses, fragment_offsets
from txn_engine.builder.remap import group_map
from txn_engine.builder.rows import derive_affected_rows
from txn_engine.conflicts.rebase import find_fragment
from txn_engine.format.deletion import deletion_file_path, encode_bitmap_deletions
from txn_engine.model import DeletionFile, Fragment
from txn_engine.ops import Delete, Merge, Rewrite, RewriteGroup, Update, UpdateMode
from txn_engine.transaction import Transaction

__all__ = ["Resolution", "carry_into", "renumber_carried", "resolve"]

_ROWS = (Delete, Update)


@attrs.frozen
class Resolution:
    """My transaction after a resolved pair: ``transaction``, my fragments as they now
    stand (``overlay``: looked up before my read version's), fragments whose deletion
    vectors must be merged at rebase (``rebase_ids``), fragments no longer mine
    (``dropped``) and fragments whose later deletions my Rewrite/Merge must carry
    (``carry_ids``)."""

    transaction: Transaction
    overlay: tuple[tuple[int, Fragment], ...] = ()
    rebase_ids: frozenset[int] = frozenset()
    dropped: frozenset[int] = frozenset()
    carry_ids: frozenset[int] = frozenset()
    #: the pair needs no further check (the conflict is resolved as it stands)
    settled: bool = False


def _removed(op: Delete | Update) -> tuple[int, ...]:
    return op.deleted_fragment_ids if isinstance(op, Delete) else op.removed_fragment_ids


def _modified(op: Delete | Update) -> frozenset[int]:
    return frozenset(f.id for f in op.updated_fragments) | frozenset(_removed(op))


def _my_rows(txn: Transaction, lookup: FragmentLookup, read_dv: DeletionReader) -> BitMap64 | None:
    op = txn.operation
    assert isinstance(op, _ROWS)
    if op.affected_rows is not None:
        return op.affected_rows
    if op.updated_fragments:
        return derive_affected_rows(txn, lookup, read_dv)
    rows = BitMap64()
    for fid in _removed(op):  # a delete that only removed whole fragments
        initial = lookup(fid)
        if initial is None:
            return None
        live = BitMap()
        live.add_range(0, initial.physical_rows)
        if initial.deletion_file is not None:
            live -= read_dv(fid, initial.deletion_file.to_proto())
        rows |= addresses(fid, live)
    return rows


def _landed(
    latest: Sequence[table_pb2.DataFragment], frag: Fragment
) -> table_pb2.DataFragment | None:
    """The fragment of ``latest`` holding ``frag``'s data files (its id may have been
    assigned at commit), or None."""
    if not frag.files:
        return None
    path = frag.files[0].path
    for pb in latest:
        if pb.files and pb.files[0].path == path and (not frag.id or pb.id == frag.id):
            return pb
    return None


def _restate(
    op: Delete | Update,
    dropped: frozenset[int],
    added: list[Fragment],
    rows: BitMap64,
) -> Delete | Update:
    updated = tuple(f for f in op.updated_fragments if f.id not in dropped) + tuple(added)
    removed = tuple(i for i in _removed(op) if i not in dropped)
    if isinstance(op, Delete):
        return attrs.evolve(
            op, updated_fragments=updated, deleted_fragment_ids=removed, affected_rows=rows
        )
    return attrs.evolve(
        op, updated_fragments=updated, removed_fragment_ids=removed, affected_rows=rows
    )


def _keep(rows: BitMap64, dropped: frozenset[int]) -> BitMap64:
    out = BitMap64()
    for fid in {r >> 32 for r in rows} - dropped:
        out |= addresses(fid, fragment_offsets(rows, fid))
    return out


def _through_rewrite(
    txn: Transaction,
    rewrite: Rewrite,
    lookup: FragmentLookup,
    latest: Sequence[table_pb2.DataFragment],
    read_dv: DeletionReader,
) -> Resolution | None:
    op = txn.operation
    assert isinstance(op, _ROWS)
    overlap = _modified(op) & rewrite.old_fragment_ids
    rows = _my_rows(txn, lookup, read_dv)
    if rows is None:
        return None
    moved_rows = _keep(rows, overlap)
    added: list[Fragment] = []
    overlay: list[tuple[int, Fragment]] = []
    for group in rewrite.groups:
        mine = [f.id for f in group.old_fragments if f.id in overlap]
        if not mine:
            continue
        gm = group_map(group, read_dv)
        if gm is None:
            return None
        moved: dict[int, BitMap] = {}
        for fid in mine:
            where = gm.move(fid, fragment_offsets(rows, fid))
            if where is None:
                return None
            for j, offsets in where.items():
                moved[j] = moved.get(j, BitMap()) | offsets
        for j, offsets in sorted(moved.items()):
            landed = _landed(latest, group.new_fragments[j])
            if landed is None:
                return None
            added.append(Fragment.from_proto(landed))
            overlay.append((landed.id, attrs.evolve(group.new_fragments[j], id=landed.id)))
            moved_rows |= addresses(landed.id, offsets)
    new_op = _restate(op, overlap, added, moved_rows)
    return Resolution(
        attrs.evolve(txn, operation=new_op),
        tuple(overlay),
        frozenset(i for i, _ in overlay),
        overlap,
    )


def _through_merge(
    txn: Transaction,
    merge: Merge,
    lookup: FragmentLookup,
    read_dv: DeletionReader,
) -> Resolution | None:
    op = txn.operation
    assert isinstance(op, _ROWS)
    rows = _my_rows(txn, lookup, read_dv)
    if rows is None:
        return None
    theirs = {f.id: f for f in merge.fragments}
    updated: list[Fragment] = []
    overlay: list[tuple[int, Fragment]] = []
    for frag in op.updated_fragments:
        new = theirs.get(frag.id)
        initial = lookup(frag.id)
        if new is None or initial is None or new.physical_rows != initial.physical_rows:
            return None
        if not set(initial.files) <= set(new.files):
            return None  # the Merge rewrote a file I read: rows may differ
        updated.append(attrs.evolve(frag, files=new.files))
        overlay.append((frag.id, attrs.evolve(new, deletion_file=initial.deletion_file)))
    if any(fid not in theirs for fid in _removed(op)):
        return None
    ids = frozenset(f.id for f in updated)
    if isinstance(op, Delete):
        new_op: Delete | Update = attrs.evolve(
            op, updated_fragments=tuple(updated), affected_rows=rows
        )
    else:
        if op.update_mode is UpdateMode.REWRITE_COLUMNS or op.new_fragments:
            return None  # new rows without the Merge's columns
        new_op = attrs.evolve(op, updated_fragments=tuple(updated), affected_rows=rows)
    return Resolution(attrs.evolve(txn, operation=new_op), tuple(overlay), ids, settled=True)


def _delete_after_delete(txn: Transaction, other: Delete) -> Resolution | None:
    """My Delete after another Delete of a shared fragment: a fragment it removed is
    gone (my rows there were deleted too); a fragment I remove stays removed (its rows,
    theirs included, are all deleted); the rest is merged at rebase (rule D1)."""
    op = txn.operation
    assert isinstance(op, Delete)
    gone = frozenset(other.deleted_fragment_ids) & _modified(op)
    mine_left = _modified(op) - gone
    theirs = frozenset(f.id for f in other.updated_fragments)
    rows = op.affected_rows
    new_op = attrs.evolve(
        op,
        updated_fragments=tuple(f for f in op.updated_fragments if f.id not in gone),
        deleted_fragment_ids=tuple(i for i in op.deleted_fragment_ids if i not in gone),
        affected_rows=None if rows is None else _keep(rows, gone),
    )
    settled = not (theirs & mine_left) - frozenset(op.deleted_fragment_ids)
    if not gone and not settled:
        return None
    return Resolution(attrs.evolve(txn, operation=new_op), dropped=gone, settled=settled)


def resolve(
    txn: Transaction,
    other: Transaction,
    rules: Sequence[str],
    *,
    lookup: FragmentLookup,
    latest: Sequence[table_pb2.DataFragment],
    read_dv: DeletionReader,
) -> Resolution | None:
    """``txn`` resolved against ``other`` whose check found the conflicts of ``rules``,
    or None (the conflict stands)."""
    mine, theirs = txn.operation, other.operation
    if isinstance(mine, Delete) and isinstance(theirs, Delete) and set(rules) == {"D1"}:
        return _delete_after_delete(txn, theirs)
    if isinstance(mine, _ROWS):
        if isinstance(mine, Update) and mine.update_mode is UpdateMode.REWRITE_COLUMNS:
            return None
        if isinstance(theirs, Rewrite) and set(rules) == {"O1"}:
            return _through_rewrite(txn, theirs, lookup, latest, read_dv)
        if isinstance(theirs, Merge) and set(rules) == {"R"}:
            return _through_merge(txn, theirs, lookup, read_dv)
        return None
    if isinstance(mine, Rewrite) and isinstance(theirs, _ROWS) and set(rules) == {"O1"}:
        if isinstance(theirs, Update) and theirs.update_mode is UpdateMode.REWRITE_COLUMNS:
            return None
        return Resolution(txn, carry_ids=_modified(theirs) & mine.old_fragment_ids)
    if isinstance(mine, Merge) and isinstance(theirs, Delete) and set(rules) == {"R"}:
        return Resolution(txn, carry_ids=_modified(theirs))
    return None


def carry_into(
    txn: Transaction,
    carry_ids: frozenset[int],
    *,
    latest: Sequence[table_pb2.DataFragment],
    high: int | None,
    read_dv: DeletionReader,
    new_id: Callable[[], int],
) -> tuple[Transaction, tuple[PendingDeletionFile, ...]] | None:
    """My Rewrite or Merge with the deletions that landed on ``carry_ids`` since it was
    planned, or None when they cannot be carried. ``high``: the latest manifest's highest
    fragment id (new ids for rewritten fragments that must carry a deletion file)."""
    op = txn.operation
    if isinstance(op, Merge):
        return _carry_merge(txn, op, latest)
    assert isinstance(op, Rewrite)
    groups: list[RewriteGroup] = []
    writes: list[PendingDeletionFile] = []
    next_id = (high or 0) + 1
    for group in op.groups:
        if not {f.id for f in group.old_fragments} & carry_ids:
            groups.append(group)
            continue
        out = _carry_group(group, latest, read_dv, next_id, txn.read_version, new_id)
        if out is None:
            return None
        new_group, more, next_id = out
        groups.append(new_group)
        writes.extend(more)
    return attrs.evolve(txn, operation=attrs.evolve(op, groups=tuple(groups))), tuple(writes)


def _carry_group(
    group: RewriteGroup,
    latest: Sequence[table_pb2.DataFragment],
    read_dv: DeletionReader,
    next_id: int,
    read_version: int,
    new_id: Callable[[], int],
) -> tuple[RewriteGroup, list[PendingDeletionFile], int] | None:
    gm = group_map(group, read_dv)
    if gm is None:
        return None
    deleted: dict[int, BitMap] = {}
    for old in group.old_fragments:
        now = find_fragment(latest, old.id)
        if now is None or tuple(Fragment.from_proto(now).files) != tuple(old.files):
            return None  # removed (every row deleted) or its data rewritten in place
        live = gm.live_offsets(old.id)
        assert live is not None
        dv = read_dv(old.id, now.deletion_file) if now.HasField("deletion_file") else BitMap()
        gone = live & dv
        where = gm.move(old.id, gone)
        if where is None:
            return None
        for j, offsets in where.items():
            deleted[j] = deleted.get(j, BitMap()) | offsets
    news: list[Fragment] = []
    writes: list[PendingDeletionFile] = []
    for j, frag in enumerate(group.new_fragments):
        rows = deleted.get(j)
        if not rows:
            news.append(frag)
            continue
        if len(rows) >= frag.physical_rows:
            return None  # every row of a new fragment deleted: re-plan instead
        fid = frag.id
        if not fid:
            fid, next_id = next_id, next_id + 1
        pb = table_pb2.DeletionFile(
            file_type=table_pb2.DeletionFile.BITMAP,
            read_version=read_version,
            id=new_id(),
            num_deleted_rows=len(rows),
        )
        writes.append(PendingDeletionFile(fid, pb, encode_bitmap_deletions(rows)))
        news.append(attrs.evolve(frag, id=fid, deletion_file=DeletionFile.from_proto(pb)))
    return RewriteGroup(group.old_fragments, tuple(news)), writes, next_id


def _carry_merge(
    txn: Transaction, op: Merge, latest: Sequence[table_pb2.DataFragment]
) -> tuple[Transaction, tuple[PendingDeletionFile, ...]] | None:
    frags: list[Fragment] = []
    for frag in op.fragments:
        now = find_fragment(latest, frag.id)
        if now is None:
            return None  # removed by a delete of all its rows: re-plan
        if now.physical_rows != frag.physical_rows:
            return None
        dv = DeletionFile.from_proto(now.deletion_file) if now.HasField("deletion_file") else None
        frags.append(attrs.evolve(frag, deletion_file=dv))
    return attrs.evolve(txn, operation=attrs.evolve(op, fragments=tuple(frags))), ()


def renumber_carried(
    txn: Transaction,
    latest: Sequence[table_pb2.DataFragment],
    high: int | None,
    read_dv: DeletionReader,
    pending: Sequence[PendingDeletionFile] = (),
) -> tuple[Transaction, tuple[PendingDeletionFile, ...]] | None:
    """My Rewrite with each new fragment that carries a deletion file under an id the
    latest version now uses (an earlier attempt numbered it; a concurrent writer took the
    id since) numbered above ``high`` and every id my fragments use, its deletion file
    written under the new id; and the deletion files to write: ``pending`` (this plan's,
    not written yet: a moved fragment's vector is taken from there, not read from the
    store) with the moved ones in place of theirs. None when ``high`` is unknown."""
    op = txn.operation
    if not isinstance(op, Rewrite):
        return txn, tuple(pending)
    news = [f for g in op.groups for f in g.new_fragments]
    taken = [
        f
        for f in news
        if f.id and f.deletion_file is not None and find_fragment(latest, f.id) is not None
    ]
    if not taken:
        return txn, tuple(pending)
    if high is None:
        return None
    next_id = max([high, *(f.id for f in news)]) + 1
    by_path = {p.path: p for p in pending}
    moved: dict[int, Fragment] = {}
    writes: list[PendingDeletionFile] = []
    for frag in taken:
        assert frag.deletion_file is not None
        pb = frag.deletion_file.to_proto()
        own = by_path.pop(deletion_file_path(frag.id, pb), None)
        rows = BitMap.deserialize(own.data) if own is not None else read_dv(frag.id, pb)
        writes.append(PendingDeletionFile(next_id, pb, encode_bitmap_deletions(rows)))
        moved[frag.id] = attrs.evolve(frag, id=next_id)
        next_id += 1
    groups = tuple(
        RewriteGroup(g.old_fragments, tuple(moved.get(f.id, f) for f in g.new_fragments))
        for g in op.groups
    )
    rest = tuple(by_path.values())
    return attrs.evolve(txn, operation=attrs.evolve(op, groups=groups)), rest + tuple(writes)
