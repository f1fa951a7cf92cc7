"""Handlers of the row-level mutations: Delete and Update.

Besides validation and their effect on the manifest, their conflict policy: the fragments
they modify (rule O1), rule D1 against a concurrent Delete/Update (retry, or rebase when
the affected rows are known), the rebase itself (the latest deletion vector merged with
my affected rows into a new ``.bin`` file; both sides deleting one row is a clash), the
affected rows derived from a transaction's own deletion files (opt-in), and for Update the
upsert key check U1 and the MemWAL rule M1.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType

import attrs
from pyroaring import BitMap, BitMap64

from txn_engine._proto import table_pb2
from txn_engine.builder._common import (
    Ids,
    ManifestState,
    assign_row_ids,
    check_existing,
    check_new_fragments,
    extend_sorted,
    field_ids_of,
    find_fragment_index,
    index_bitmap,
    invalid,
    remove_fragments,
    replace_fragments,
    set_bitmap,
)
from txn_engine.builder._handler import Build, Handler
from txn_engine.builder._keys import filter_field_ids, may_contain
from txn_engine.builder._policy import (
    DeletionReader,
    FragmentLookup,
    PendingDeletionFile,
    Predicate,
    Rebased,
    RebaseTarget,
    RowClash,
    RuleContext,
    expect,
)
from txn_engine.builder._row_addresses import addresses, fragment_offsets
from txn_engine.builder._touches import (
    fragments_overlap,
    removed_fragment_ids,
    row_change_fragment_ids,
)
from txn_engine.builder.data import nullability_kept
from txn_engine.builder.index import same_mem_wal
from txn_engine.format.deletion import encode_bitmap_deletions
from txn_engine.format.rowids import (
    decode_row_id_sequence,
    decode_version_sequence,
    encode_version_sequence,
    fresh_version_sequence,
)
from txn_engine.model import DeletionFile
from txn_engine.ops import Append, Delete, Operation, Update, UpdateMemWalState, UpdateMode
from txn_engine.transaction import Transaction


def _check_restated(
    current: ManifestState | None, txn: Transaction, removed: Iterable[int], op: Delete | Update
) -> ManifestState:
    """The checks Delete and Update share: removed and updated fragments exist, are not
    both, and keep their physical rows."""
    assert current is not None  # the driver refuses these operations without a dataset
    kind = txn.kind
    removed = list(removed)
    updated = [f.id for f in op.updated_fragments]
    both = set(removed) & set(updated)
    if both:
        raise invalid(f"{kind}: fragments {sorted(both)} are both updated and removed")
    check_existing(current, [*removed, *updated], kind)
    for frag in op.updated_fragments:
        pos = find_fragment_index(current.manifest.fragments, frag.id)
        if frag.physical_rows != current.manifest.fragments[pos].physical_rows:
            raise invalid(f"{kind}: fragment {frag.id} changed physical_rows")
    return current


def _d1(c: RuleContext) -> None:
    """Rule D1: Delete/Update against a concurrent Delete/Update."""
    mine = c.mine.operation
    other = c.other.operation
    if not isinstance(mine, (Delete, Update)) or not isinstance(other, (Delete, Update)):
        raise TypeError("D1 applies to Delete/Update pairs only")
    mine_ids = row_change_fragment_ids(mine)
    other_updated = {f.id: f for f in other.updated_fragments}
    other_removed = removed_fragment_ids(other)
    shared = (frozenset(other_updated) | other_removed) & mine_ids
    if not shared:
        return
    if mine.affected_rows is None or not mine.updated_fragments:
        c.retry(
            f"both changed fragment(s) {sorted(shared)} and no affected_rows are known to rebase",
            fragment_ids=shared,
        )
        return
    if c.lookup is None:
        c.retry(
            f"fragment(s) {sorted(shared)} changed; read-version copies unavailable",
            fragment_ids=shared,
        )
        return
    rebase: set[int] = set()
    for fid in sorted(frozenset(other_updated) & mine_ids):
        initial = c.lookup(fid)
        if initial is None:
            continue
        theirs = other_updated[fid]
        if theirs.files != initial.files:
            c.retry(f"the data files of fragment {fid} were rewritten", fragment_ids=[fid])
            return
        if theirs.deletion_file != initial.deletion_file:
            rebase.add(fid)
    for fid in sorted(other_removed & mine_ids):
        if c.lookup(fid) is not None:
            c.retry(f"fragment {fid} was removed", fragment_ids=[fid])
            return
    c.rebase_ids.update(rebase)


def upsert_conflict(mine: Operation, other: Operation) -> str | None:
    """Why my upsert cannot land after ``other`` (rule U1), or None. Only an Update with
    ``inserted_key_hashes`` is an upsert here; everything else returns None."""
    if not isinstance(mine, Update) or mine.inserted_key_hashes is None:
        return None
    if not mine.inserted_key_hashes or mine.inserted_rows is None:
        return None
    if isinstance(other, Append):
        if any(f.physical_rows for f in other.fragments):
            return "a concurrent Append added rows that may hold keys this upsert inserts"
        return None
    if not isinstance(other, Update):
        return None
    if other.inserted_rows is None:
        if other.new_fragments:
            return (
                "a concurrent Update added rows and records no inserted keys (pylance's "
                "merge-insert or an update): they may hold keys this upsert inserts"
            )
        return None
    if filter_field_ids(other.inserted_rows) != filter_field_ids(mine.inserted_rows):
        return "a concurrent upsert recorded keys over other columns"
    for h in mine.inserted_key_hashes:
        if may_contain(other.inserted_rows, h):
            return "a concurrent upsert inserted a key this upsert inserts"
    return None


def _u1(c: RuleContext) -> None:
    """Rule U1: concurrent upserts must not insert the same new key twice."""
    reason = upsert_conflict(c.mine.operation, c.other.operation)
    if reason is not None:
        c.retry(reason)


def _m1(c: RuleContext) -> None:
    """Rule M1: my Update merges a MemWAL the other added or updated."""
    mine = expect(c.mine.operation, Update)
    other = expect(c.other.operation, UpdateMemWalState)
    merging = () if mine.mem_wal_to_merge is None else (mine.mem_wal_to_merge,)
    if not same_mem_wal(c, other.added, merging):
        same_mem_wal(c, other.updated, merging)


class _RowsHandler:
    """The conflict policy Delete and Update share (mixed into both handlers)."""

    def with_derived_rows(
        self,
        txn: Transaction,
        rules: Sequence[str],
        initial_fragments: FragmentLookup,
        read_dv: DeletionReader,
    ) -> Transaction | None:
        op = txn.operation
        if not isinstance(op, (Delete, Update)) or op.affected_rows is not None:
            return None
        if not all(code == "D1" for code in rules):
            return None
        rows = derive_affected_rows(txn, initial_fragments, read_dv)
        if rows is None:
            return None
        return attrs.evolve(txn, operation=attrs.evolve(op, affected_rows=rows))

    def rebase(self, txn: Transaction, target: RebaseTarget) -> Rebased | RowClash:
        return rebase_deletions(txn, target)


class DeleteHandler(_RowsHandler, Handler[Delete]):
    """Remove whole fragments and restate others (with new deletion files)."""

    keeps_fields = True

    prunes_indices = True
    rules: Mapping[str, Predicate] = MappingProxyType({"D1": _d1, "O1": fragments_overlap})

    def validate(self, current: ManifestState | None, txn: Transaction, op: Delete) -> None:
        _check_restated(current, txn, op.deleted_fragment_ids, op)

    def apply(self, build: Build, op: Delete) -> list[int] | None:
        remove_fragments(build.manifest, op.deleted_fragment_ids)
        replace_fragments(build.manifest, op.updated_fragments)
        return [f.id for f in op.updated_fragments]


class UpdateHandler(_RowsHandler, Handler[Update]):
    """Remove fragments, restate updated ones, add new ones (updated rows move there).

    An upsert (an Update with ``inserted_key_hashes``) also checks, after the matrix's
    rule, that no concurrent transaction may hold a key it inserts (U1)."""

    prunes_indices = True
    rules: Mapping[str, Predicate] = MappingProxyType(
        {"U1": _u1, "D1": _d1, "O1": fragments_overlap, "N1": nullability_kept, "M1": _m1}
    )
    follow_up_rules = ("U1",)

    def validate(self, current: ManifestState | None, txn: Transaction, op: Update) -> None:
        current = _check_restated(current, txn, op.removed_fragment_ids, op)
        check_new_fragments(
            current, op.new_fragments, field_ids_of(current.manifest.fields), txn.kind
        )

    def explicit_ids(self, op: Update) -> Iterable[int]:
        return [f.id for f in op.new_fragments]

    def apply(self, build: Build, op: Update) -> list[int] | None:
        m = build.manifest
        remove_fragments(m, op.removed_fragment_ids)
        replace_fragments(m, op.updated_fragments)
        if op.fields_modified and op.updated_fragments:
            modified = set(op.fields_modified)
            updated = BitMap(f.id for f in op.updated_fragments)
            for index in build.indices:
                bm = index_bitmap(index)
                if bm is not None and modified & set(index.fields):
                    set_bitmap(index, bm - updated)
        assert build.current is not None
        added = _update_new_fragments(
            build.current.manifest, m, build.indices, op, build.ids, build.stable, build.version
        )
        extend_sorted(m, added)
        return [f.id for f in op.updated_fragments] + [pb.id for pb in added]


def _expand_runs(data: bytes, n_rows: int) -> list[int]:
    versions: list[int] = []
    for count, v in decode_version_sequence(data):
        versions.extend([v] * count)
    if len(versions) < n_rows:
        versions.extend([1] * (n_rows - len(versions)))
    return versions


class _CreatedAt:
    """Created-at version of existing rows by stable row id (for rows an Update moves).

    Looks in the fragments the update touched first and scans the others only for ids it
    did not find there (which a well-formed Update never needs).
    """

    def __init__(self, manifest: table_pb2.Manifest, touched: Iterable[int]) -> None:
        self._manifest = manifest
        self._touched = sorted(set(touched))

    def _scan(self, frag: table_pb2.DataFragment, wanted: set[int], out: dict[int, int]) -> None:
        if not frag.HasField("inline_row_ids"):
            return
        row_ids = decode_row_id_sequence(frag.inline_row_ids)
        if wanted.isdisjoint(row_ids):
            return
        if frag.HasField("inline_created_at_versions"):
            versions = _expand_runs(frag.inline_created_at_versions, len(row_ids))
        else:
            versions = [1] * len(row_ids)
        for offset, row_id in enumerate(row_ids):
            if row_id in wanted:
                out[row_id] = versions[offset]
                wanted.discard(row_id)

    def lookup(self, row_ids: Iterable[int]) -> dict[int, int]:
        wanted = set(row_ids)
        out: dict[int, int] = {}
        frags = self._manifest.fragments
        for fid in self._touched:
            if not wanted:
                return out
            pos = find_fragment_index(frags, fid)
            if pos >= 0:
                self._scan(frags[pos], wanted, out)
        if wanted:
            touched = set(self._touched)
            for frag in frags:
                if not wanted:
                    break
                if frag.id not in touched:
                    self._scan(frag, wanted, out)
        return out


def _update_new_fragments(
    current: table_pb2.Manifest,
    m: table_pb2.Manifest,
    indices: list[table_pb2.IndexMetadata],
    op: Update,
    ids: Ids,
    stable: bool,
    version: int,
) -> list[table_pb2.DataFragment]:
    """New fragments of an Update with ids and, on stable-row-id datasets, row ids and
    version sequences: rows that carry their old row id keep their created-at version,
    inserted rows are created now; every row was last updated now (pylance 14)."""
    # Lance's "register pure rewritten fragments in index bitmaps" step is not applied:
    # pylance 14.0.2 never applies it on its own commit path (measured), and index
    # bitmaps must match what it writes.
    out = []
    touched = [*op.removed_fragment_ids, *(f.id for f in op.updated_fragments)]
    created_at = _CreatedAt(current, touched) if stable else None
    for frag in op.new_fragments:
        pb = frag.to_proto()
        if pb.id == 0:
            pb.id = ids.take()
        if created_at is not None:
            carried = (
                decode_row_id_sequence(pb.inline_row_ids) if pb.HasField("inline_row_ids") else []
            )
            known = created_at.lookup(carried) if carried else {}
            assign_row_ids(pb, m)
            runs = [(1, known.get(row_id, version)) for row_id in carried]
            runs.append((pb.physical_rows - len(carried), version))
            pb.inline_created_at_versions = encode_version_sequence(runs)
            pb.inline_last_updated_at_versions = fresh_version_sequence(pb.physical_rows, version)
        out.append(pb)
    return out


# ---- rebase: deletion vectors merged (rule D1) ---------------------------------------------------


def _dv(read_dv: DeletionReader, fragment_id: int, deletion: DeletionFile | None) -> BitMap:
    if deletion is None:
        return BitMap()
    return read_dv(fragment_id, deletion.to_proto())


def _pb_dv(read_dv: DeletionReader, fragment: table_pb2.DataFragment) -> BitMap:
    if not fragment.HasField("deletion_file"):
        return BitMap()
    return read_dv(fragment.id, fragment.deletion_file)


def derive_affected_rows(
    txn: Transaction, initial_fragments: FragmentLookup, read_dv: DeletionReader
) -> BitMap64 | None:
    """The row addresses a Delete/Update removed, computed from its deletion files.

    For each updated fragment: its deletion vector minus the read version's; for each
    removed fragment: every row not already deleted at the read version. ``None`` when it
    cannot be derived (not a Delete / row-rewriting Update, no updated fragments, or a
    fragment whose data files it changed).
    """
    op = txn.operation
    if not isinstance(op, (Delete, Update)) or not op.updated_fragments:
        return None
    if isinstance(op, Update) and op.update_mode is UpdateMode.REWRITE_COLUMNS:
        return None
    rows = BitMap64()
    for frag in op.updated_fragments:
        initial = initial_fragments(frag.id)
        if initial is None or initial.files != frag.files:
            return None
        mine = _dv(read_dv, frag.id, frag.deletion_file)
        before = _dv(read_dv, frag.id, initial.deletion_file)
        rows |= addresses(frag.id, mine - before)
    for fid in removed_fragment_ids(op):
        initial = initial_fragments(fid)
        if initial is None:
            return None
        everything = BitMap(range(initial.physical_rows))
        rows |= addresses(fid, everything - _dv(read_dv, fid, initial.deletion_file))
    return rows


def rebase_deletions(txn: Transaction, target: RebaseTarget) -> Rebased | RowClash:
    """A Delete/Update moved onto ``target.version``: for each fragment of
    ``target.rebase_fragment_ids`` the latest deletion vector merged with my affected rows
    (a new ``.bin`` file to write; a fragment left with no rows is removed instead); a
    :class:`RowClash` when both deleted or updated one row. Without fragments to merge,
    only the read version moves."""
    op = txn.operation
    if not isinstance(op, (Delete, Update)):
        return Rebased(txn)
    latest_version, latest_fragments = target.version, target.fragments
    initial_fragments, read_dv = target.initial_fragments, target.read_dv
    if not target.rebase_fragment_ids:
        return Rebased(txn.with_read_version(latest_version))
    affected = op.affected_rows
    if affected is None or initial_fragments is None:  # D1 never marks fragments then
        raise ValueError("rebasing deletion vectors needs affected_rows and initial fragments")
    new_files: dict[int, DeletionFile] = {}
    writes: list[PendingDeletionFile] = []
    now_empty: list[int] = []
    for fid in sorted(target.rebase_fragment_ids):
        pos = find_fragment_index(latest_fragments, fid)
        if pos < 0:
            return RowClash(f"fragment {fid} no longer exists", (fid,))
        latest = latest_fragments[pos]
        existing = _pb_dv(read_dv, latest)
        mine = fragment_offsets(affected, fid)
        clash = existing & mine
        if clash and fid not in target.tolerant_fragment_ids:
            sample = tuple(fid << 32 | int(o) for o in list(clash)[:5])
            return RowClash(
                f"both deleted or updated rows of fragment {fid} (row addresses {list(sample)})",
                (fid,),
                sample,
            )
        merged = existing | mine
        initial = initial_fragments(fid)
        physical = initial.physical_rows if initial is not None else latest.physical_rows
        if physical and len(merged) >= physical:
            now_empty.append(fid)
            continue
        pb = table_pb2.DeletionFile(
            file_type=table_pb2.DeletionFile.BITMAP,
            read_version=latest_version,
            id=target.new_id(),
            num_deleted_rows=len(merged),
        )
        writes.append(PendingDeletionFile(fid, pb, encode_bitmap_deletions(merged)))
        new_files[fid] = DeletionFile.from_proto(pb)
    updated = tuple(
        attrs.evolve(f, deletion_file=new_files[f.id]) if f.id in new_files else f
        for f in op.updated_fragments
        if f.id not in now_empty
    )
    new_op: Delete | Update
    if isinstance(op, Delete):
        ids = _extend(op.deleted_fragment_ids, now_empty)
        new_op = attrs.evolve(op, updated_fragments=updated, deleted_fragment_ids=ids)
    else:
        ids = _extend(op.removed_fragment_ids, now_empty)
        new_op = attrs.evolve(op, updated_fragments=updated, removed_fragment_ids=ids)
    return Rebased(attrs.evolve(txn, read_version=latest_version, operation=new_op), tuple(writes))


def _extend(ids: tuple[int, ...], more: list[int]) -> tuple[int, ...]:
    return ids + tuple(i for i in more if i not in ids)
