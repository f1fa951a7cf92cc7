"""Rebase: moving a checked transaction onto the latest version (``lance-format.md`` §7.3).

* Delete / Update: when a concurrent Delete/Update changed the deletion vector of a fragment
  I also changed (rule D1 marked it), my deletion vector is recomputed as *latest deletion
  vector* union *my affected rows*, written as a new ``.bin`` file named with the latest version,
  and my transaction's ``read_version`` moves to the latest version. If both sides deleted
  or updated the same row, the result is a retryable :class:`Conflict` (rule ``ROWS``). A
  fragment whose rows all end up deleted is removed instead. Without rebasing work the
  read version still moves.
* Every other operation is returned unchanged: it is rebuilt on the latest manifest by the
  builder. (Lance also folds fragment-reuse indices of concurrent compactions into a
  CreateIndex/Rewrite, but only for transactions it holds in memory: the fragment-reuse index
  of a Rewrite is never serialized, so a transaction read from storage never has one, and
  txn_engine's :class:`~txn_engine.ops.Rewrite` carries none.)

Nothing here raises for a conflict; :func:`rebase` returns a :class:`Conflict` instead.
Nothing here does I/O either: deletion vectors are read through the ``read_dv`` callable the
caller passes (the commit loop reads them from storage), and the merged deletion files are
returned as :class:`PendingDeletionFile` values for the caller to write before its manifest.
Format errors raised by ``read_dv`` propagate.

More permissive than Lance, off by default: :attr:`ConflictOptions.derive_affected_rows`
computes the affected rows of a Delete/Update that carries none from its own deletion files
(mine minus the read version's), so two deletes of disjoint rows of one fragment both land
even when the caller did not record ``affected_rows``. See ``docs/conflicts.md``.
"""

from __future__ import annotations

import secrets
import struct
from collections.abc import Callable, Sequence

import attrs
from pyroaring import BitMap, BitMap64

from txn_engine._proto import table_pb2
from txn_engine.builder import find_fragment_index
from txn_engine.conflicts.detect import Conflict, FragmentLookup
from txn_engine.conflicts.matrix import Outcome
from txn_engine.format.deletion import deletion_file_path, encode_bitmap_deletions
from txn_engine.model import DeletionFile
from txn_engine.ops import Delete, Update, UpdateMode
from txn_engine.transaction import Transaction

__all__ = [
    "ConflictOptions",
    "DeletionReader",
    "PendingDeletionFile",
    "Rebased",
    "derive_affected_rows",
    "find_fragment",
    "fragment_offsets",
    "rebase",
]

#: Reads a fragment's deletion vector: ``(fragment_id, DeletionFile pb) -> offsets``.
DeletionReader = Callable[[int, table_pb2.DeletionFile], BitMap]


@attrs.frozen
class PendingDeletionFile:
    """A deletion file a rebase produced: write ``data`` at :attr:`path` before the
    manifest that references it."""

    fragment_id: int
    deletion_file: table_pb2.DeletionFile
    data: bytes

    @property
    def path(self) -> str:
        return deletion_file_path(self.fragment_id, self.deletion_file)


@attrs.frozen
class Rebased:
    """A transaction moved onto the latest version, and the deletion files it now needs."""

    transaction: Transaction
    writes: tuple[PendingDeletionFile, ...] = ()


@attrs.frozen(kw_only=True)
class ConflictOptions:
    """Opt-in behaviour more permissive than Lance (every default matches pylance 14).

    * ``derive_affected_rows``: for a Delete/Update without ``affected_rows`` that meets a
      concurrent Delete/Update on a shared fragment, derive the rows it affected from its
      deletion files (its new deletion vector minus the read version's) and rebase like a
      transaction that carried them. Costs two deletion-file reads per shared fragment and
      only applies to Delete and row-rewriting Update (``REWRITE_COLUMNS`` updates change
      rows in place and cannot be derived). Proven by ``tests/property/test_conflict_props.py``.
    """

    derive_affected_rows: bool = False


def find_fragment(
    fragments: Sequence[table_pb2.DataFragment], fragment_id: int
) -> table_pb2.DataFragment | None:
    """The fragment ``fragment_id`` of a manifest's fragment list (sorted by id), or None
    (the builder's binary search)."""
    pos = find_fragment_index(fragments, fragment_id)
    return None if pos < 0 else fragments[pos]


# A 64-bit roaring bitmap's portable serialization is: the number of 32-bit buckets (u64 LE),
# then per bucket, in key order, its high 32 bits (u32 LE) and the bucket's 32-bit portable
# serialization (RoaringFormatSpec). A row address ``fragment_id << 32 | offset`` puts each
# fragment in one bucket, so moving between addresses and offsets is a matter of headers,
# never a loop over the rows (nor a 2^32-wide mask, which alone costs ~10 ms to build).
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_ONE_BUCKET = struct.Struct("<QI")
_SERIAL_COOKIE = 12347
_SERIAL_COOKIE_NO_RUNCONTAINER = 12346


def _bucket_size(blob: bytes, pos: int) -> int | None:
    """Byte length of the 32-bit portable roaring serialization starting at ``pos``
    (``None`` for a cookie this parser does not know)."""
    start = pos
    (cookie,) = _U32.unpack_from(blob, pos)
    pos += 4
    if cookie & 0xFFFF == _SERIAL_COOKIE:
        n = (cookie >> 16) + 1
        runs = blob[pos : pos + (n + 7) // 8]
        pos += (n + 7) // 8
    elif cookie == _SERIAL_COOKIE_NO_RUNCONTAINER:
        (n,) = _U32.unpack_from(blob, pos)
        pos += 4
        runs = b""
    else:  # pyroaring writes only the two cookies above
        return None
    cards = struct.unpack_from(f"<{2 * n}H", blob, pos)[1::2]
    pos += 4 * n
    if not runs or n >= 4:  # the offset header, absent for small bitmaps with runs
        pos += 4 * n
    for i in range(n):
        if runs and runs[i // 8] >> (i % 8) & 1:
            pos += 2 + 4 * _U16.unpack_from(blob, pos)[0]
        elif cards[i] < 4096:  # stored as cardinality - 1: an array container
            pos += 2 * (cards[i] + 1)
        else:  # a bitset container
            pos += 8192
    return pos - start


def fragment_offsets(rows: BitMap64, fragment_id: int) -> BitMap:
    """The row offsets of ``fragment_id`` among row addresses (``fragment_id << 32 | offset``)."""
    lo = fragment_id << 32
    last = lo | 0xFFFF_FFFF  # rank() counts values <= x; range ends overflow u64 for 2^32 - 1
    if not rows or rows.rank(last) == (rows.rank(lo - 1) if lo else 0):
        return BitMap()
    blob = rows.serialize()
    (buckets,) = _U64.unpack_from(blob)
    pos = _U64.size
    for _ in range(buckets):
        (key,) = _U32.unpack_from(blob, pos)
        pos += 4
        size = _bucket_size(blob, pos)
        if size is None:
            break
        if key == fragment_id:
            return BitMap.deserialize(blob[pos : pos + size])
        pos += size
    return _offsets_by_mask(rows, fragment_id)


def _offsets_by_mask(rows: BitMap64, fragment_id: int) -> BitMap:
    """:func:`fragment_offsets` the slow way (a 2^32-wide mask, then one bucket left)."""
    lo = fragment_id << 32
    mask = BitMap64()
    mask.add_range(lo, lo | 0xFFFF_FFFF)
    mask.add(lo | 0xFFFF_FFFF)
    blob = (rows & mask).serialize()
    if _U64.unpack_from(blob)[0] == 0:
        return BitMap()
    return BitMap.deserialize(blob[_ONE_BUCKET.size :])


def _addresses(fragment_id: int, offsets: BitMap) -> BitMap64:
    if not offsets:
        return BitMap64()
    return BitMap64.deserialize(_ONE_BUCKET.pack(1, fragment_id) + offsets.serialize())


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
    removed = op.deleted_fragment_ids if isinstance(op, Delete) else op.removed_fragment_ids
    rows = BitMap64()
    for frag in op.updated_fragments:
        initial = initial_fragments(frag.id)
        if initial is None or initial.files != frag.files:
            return None
        mine = _dv(read_dv, frag.id, frag.deletion_file)
        before = _dv(read_dv, frag.id, initial.deletion_file)
        rows |= _addresses(frag.id, mine - before)
    for fid in removed:
        initial = initial_fragments(fid)
        if initial is None:
            return None
        everything = BitMap(range(initial.physical_rows))
        rows |= _addresses(fid, everything - _dv(read_dv, fid, initial.deletion_file))
    return rows


def rebase(
    txn: Transaction,
    *,
    latest_version: int,
    latest_fragments: Sequence[table_pb2.DataFragment],
    rebase_fragment_ids: frozenset[int],
    initial_fragments: FragmentLookup | None,
    read_dv: DeletionReader,
    new_id: Callable[[], int] = lambda: secrets.randbits(64),
) -> Rebased | Conflict:
    """Move ``txn`` onto ``latest_version`` (whose fragment list is ``latest_fragments``).

    ``rebase_fragment_ids`` are the fragments :func:`~txn_engine.conflicts.detect.check`
    marked (rule D1). Returns the rebased transaction with one ``.bin`` deletion file per
    merged fragment to write (none when there is nothing to merge; ids from ``new_id``), or a
    retryable ``Conflict`` when my affected rows clash with rows the latest version already
    deleted.
    """
    op = txn.operation
    if not isinstance(op, (Delete, Update)):
        return Rebased(txn)
    if not rebase_fragment_ids:
        return Rebased(txn.with_read_version(latest_version))
    affected = op.affected_rows
    if affected is None or initial_fragments is None:  # D1 never marks fragments then
        raise ValueError("rebasing deletion vectors needs affected_rows and initial fragments")
    new_files: dict[int, DeletionFile] = {}
    writes: list[PendingDeletionFile] = []
    now_empty: list[int] = []
    for fid in sorted(rebase_fragment_ids):
        latest = find_fragment(latest_fragments, fid)
        if latest is None:
            return _conflict(txn, latest_version, f"fragment {fid} no longer exists", [fid], ())
        existing = _pb_dv(read_dv, latest)
        mine = fragment_offsets(affected, fid)
        clash = existing & mine
        if clash:
            sample = tuple(fid << 32 | int(o) for o in list(clash)[:5])
            return _conflict(
                txn,
                latest_version,
                f"both deleted or updated rows of fragment {fid} (row addresses {list(sample)})",
                [fid],
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
            id=new_id(),
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


def _conflict(
    txn: Transaction, version: int, detail: str, fragment_ids: list[int], rows: tuple[int, ...]
) -> Conflict:
    return Conflict(
        outcome=Outcome.RETRYABLE,
        rule="ROWS",
        version=version,
        read_version=txn.read_version,
        mine=txn.kind,
        other=None,
        reason=(
            f"This {txn.kind} transaction was preempted by a concurrent transaction at or "
            f"before version {version}: {detail}. Please retry."
        ),
        fragment_ids=frozenset(fragment_ids),
        row_addresses=rows,
    )
