"""Index operations: CreateIndex and UpdateMemWalState."""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from txn_engine.model import IndexMetadata, MemWal
from txn_engine.ops import _accept

__all__ = ["CreateIndex", "UpdateMemWalState"]


def _tuple_of_IndexMetadata(value: Iterable[IndexMetadata]) -> tuple[IndexMetadata, ...]:
    return _accept.indices(value)  # IndexMetadata only: pylance's Index is converted on entry


def _tuple_of_MemWal(value: Iterable[MemWal]) -> tuple[MemWal, ...]:
    return tuple(value)


@attrs.frozen
class CreateIndex:
    """Add ``new_indices`` (replacing same-name ones) and remove ``removed_indices`` (by uuid)."""

    new_indices: tuple[IndexMetadata, ...] = attrs.field(
        default=(), converter=_tuple_of_IndexMetadata
    )
    removed_indices: tuple[IndexMetadata, ...] = attrs.field(
        default=(), converter=_tuple_of_IndexMetadata
    )


@attrs.frozen
class UpdateMemWalState:
    """Edit the MemWAL list of the ``__lance_mem_wal`` system index."""

    added: tuple[MemWal, ...] = attrs.field(default=(), converter=_tuple_of_MemWal)
    updated: tuple[MemWal, ...] = attrs.field(default=(), converter=_tuple_of_MemWal)
    removed: tuple[MemWal, ...] = attrs.field(default=(), converter=_tuple_of_MemWal)
