"""Row-level mutations: Delete and Update."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping

import attrs
from pyroaring import BitMap64

from txn_engine.model import Fragment, MemWal
from txn_engine.ops import _accept

__all__ = ["CompactedSsTable", "Delete", "Update", "UpdateMode"]


def _tuple_of_Fragment(value: Iterable[Fragment]) -> tuple[Fragment, ...]:
    return _accept.fragments(value)  # Fragments only: pylance's are converted where they enter


def _ids(value: object) -> tuple[int, ...]:
    return tuple(int(v) for v in value)  # type: ignore[attr-defined]


def _rows(value: object) -> BitMap64 | None:
    if value is None or isinstance(value, BitMap64):
        return value
    return BitMap64(value)  # type: ignore[arg-type]


@attrs.frozen
class Delete:
    """Delete rows: fragments whose deletion vector changed (full replacement fragments)
    and fragments removed entirely.

    ``affected_rows`` (row addresses ``fragment_id << 32 | offset`` of the rows this delete
    removed) is not serialized; when given, a concurrent delete of *other* rows of the same
    fragment can be rebased instead of being a conflict.
    """

    updated_fragments: tuple[Fragment, ...] = attrs.field(default=(), converter=_tuple_of_Fragment)
    deleted_fragment_ids: tuple[int, ...] = attrs.field(default=(), converter=_ids)
    predicate: str = ""
    affected_rows: BitMap64 | None = attrs.field(
        default=None, converter=_rows, eq=False, hash=False, repr=False
    )


@attrs.frozen
class CompactedSsTable:
    """pylance 14: a MemWAL shard sstable (shard uuid, generation) an Update compacted."""

    shard_id: str
    generation: int


def _sstables(value: Iterable[CompactedSsTable]) -> tuple[CompactedSsTable, ...]:
    return tuple(value)


def _offset_bitmaps(
    value: Mapping[int, bytes] | Iterable[tuple[int, bytes]],
) -> tuple[tuple[int, bytes], ...]:
    items = value.items() if isinstance(value, Mapping) else value
    return tuple(sorted((int(k), bytes(v)) for k, v in items))


class UpdateMode(enum.IntEnum):
    """How an Update rewrites data."""

    REWRITE_ROWS = 0
    REWRITE_COLUMNS = 1


@attrs.frozen
class Update:
    """Update rows: remove fragments, replace updated fragments, add new fragments.

    ``fields_modified`` lists field ids whose values changed (indices on them lose the
    updated fragments). ``affected_rows`` as for :class:`Delete`.

    pylance 14 wire fields: ``compacted_sstables`` (field 5, which Lance 1.0 used for
    ``mem_wal_to_merge``), ``inserted_rows`` (a serialized KeyExistenceFilter, kept opaque)
    and ``updated_fragment_offset_bitmaps`` (fragment id -> portable roaring bitmap of the
    updated row offsets). ``mem_wal_to_merge`` is no longer on the wire; it is kept in
    memory for the MemWAL conflict rules of in-process callers.
    """

    removed_fragment_ids: tuple[int, ...] = attrs.field(default=(), converter=_ids)
    updated_fragments: tuple[Fragment, ...] = attrs.field(default=(), converter=_tuple_of_Fragment)
    new_fragments: tuple[Fragment, ...] = attrs.field(default=(), converter=_tuple_of_Fragment)
    fields_modified: tuple[int, ...] = attrs.field(default=(), converter=_ids)
    mem_wal_to_merge: MemWal | None = None
    fields_for_preserving_frag_bitmap: tuple[int, ...] = attrs.field(default=(), converter=_ids)
    update_mode: UpdateMode = attrs.field(default=UpdateMode.REWRITE_ROWS, converter=UpdateMode)
    compacted_sstables: tuple[CompactedSsTable, ...] = attrs.field(default=(), converter=_sstables)
    inserted_rows: bytes | None = None
    updated_fragment_offset_bitmaps: tuple[tuple[int, bytes], ...] = attrs.field(
        default=(), converter=_offset_bitmaps
    )
    affected_rows: BitMap64 | None = attrs.field(
        default=None, converter=_rows, eq=False, hash=False, repr=False
    )
    #: hashes of the keys this upsert inserts (:mod:`txn_engine.conflicts.upsert`); in
    #: memory only, like ``affected_rows``: lets the commit test them against a concurrent
    #: upsert's ``inserted_rows`` filter exactly
    inserted_key_hashes: frozenset[int] | None = attrs.field(
        default=None, eq=False, hash=False, repr=False
    )
