"""Row-level mutations: Delete and Update."""

from __future__ import annotations

import enum
from collections.abc import Iterable

import attrs
from pyroaring import BitMap64

from txn_engine.model import Fragment, MemWal

__all__ = ["Delete", "Update", "UpdateMode"]


def _tuple_of_Fragment(value: Iterable[Fragment]) -> tuple[Fragment, ...]:
    return tuple(value)


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


class UpdateMode(enum.IntEnum):
    """How an Update rewrites data."""

    REWRITE_ROWS = 0
    REWRITE_COLUMNS = 1


@attrs.frozen
class Update:
    """Update rows: remove fragments, replace updated fragments, add new fragments.

    ``fields_modified`` lists field ids whose values changed (indices on them lose the
    updated fragments). ``affected_rows`` as for :class:`Delete`.
    """

    removed_fragment_ids: tuple[int, ...] = attrs.field(default=(), converter=_ids)
    updated_fragments: tuple[Fragment, ...] = attrs.field(default=(), converter=_tuple_of_Fragment)
    new_fragments: tuple[Fragment, ...] = attrs.field(default=(), converter=_tuple_of_Fragment)
    fields_modified: tuple[int, ...] = attrs.field(default=(), converter=_ids)
    mem_wal_to_merge: MemWal | None = None
    fields_for_preserving_frag_bitmap: tuple[int, ...] = attrs.field(default=(), converter=_ids)
    update_mode: UpdateMode = attrs.field(default=UpdateMode.REWRITE_ROWS, converter=UpdateMode)
    affected_rows: BitMap64 | None = attrs.field(
        default=None, converter=_rows, eq=False, hash=False, repr=False
    )
