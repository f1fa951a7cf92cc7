"""Compaction: Rewrite and ReserveFragments."""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from txn_engine.model import Fragment, IndexDetails, IndexFile, IndexMetadata
from txn_engine.ops import _accept

__all__ = ["ReserveFragments", "Rewrite", "RewriteGroup", "RewrittenIndex"]


def _tuple_of_Fragment(value: Iterable[Fragment]) -> tuple[Fragment, ...]:
    return _accept.fragments(value)  # Fragments only: pylance's are converted where they enter


def _tuple_of_IndexFile(value: Iterable[IndexFile]) -> tuple[IndexFile, ...]:
    return tuple(value)


def _tuple_of_RewriteGroup(value: Iterable[RewriteGroup]) -> tuple[RewriteGroup, ...]:
    return tuple(value)


def _tuple_of_RewrittenIndex(value: Iterable[RewrittenIndex]) -> tuple[RewrittenIndex, ...]:
    return tuple(value)


@attrs.frozen
class RewriteGroup:
    """Old fragments replaced by new ones holding the same live rows."""

    old_fragments: tuple[Fragment, ...] = attrs.field(converter=_tuple_of_Fragment)
    new_fragments: tuple[Fragment, ...] = attrs.field(converter=_tuple_of_Fragment)


@attrs.frozen
class RewrittenIndex:
    """An index remapped to the rewritten fragments under a new uuid."""

    old_id: str
    new_id: str
    new_index_details: IndexDetails | None = None
    new_index_version: int = 0
    new_index_files: tuple[IndexFile, ...] = attrs.field(default=(), converter=_tuple_of_IndexFile)


@attrs.frozen
class Rewrite:
    """Compaction: each group's old fragments are replaced by its new fragments."""

    groups: tuple[RewriteGroup, ...] = attrs.field(converter=_tuple_of_RewriteGroup)
    rewritten_indices: tuple[RewrittenIndex, ...] = attrs.field(
        default=(), converter=_tuple_of_RewrittenIndex
    )
    #: Deferred index remap (pylance's ``defer_index_remap``): this compaction's version of
    #: the ``__lance_frag_reuse`` system index (old -> new row addresses, one version entry;
    #: the builder appends it to the manifest's), so indices keep their files and readers
    #: remap. Every index covering a rewritten group then covers its new fragments. Like
    #: pylance 14, not part of the encoded transaction: it lands in the manifest.
    frag_reuse_index: IndexMetadata | None = None

    @property
    def old_fragment_ids(self) -> frozenset[int]:
        return frozenset(f.id for g in self.groups for f in g.old_fragments)


@attrs.frozen
class ReserveFragments:
    """Reserve ``num_fragments`` fragment ids (raises ``max_fragment_id``)."""

    num_fragments: int
