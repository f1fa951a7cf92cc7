"""Row positions through a compaction (pure): where the rows of a Rewrite group's old
fragments are in its new fragments.

A compaction copies the live rows of a group's old fragments, in the group's order and in
row order, into its new fragments. The row at offset ``o`` of old fragment ``i`` (live at
the compaction's read version) is therefore row number ``base_i + rank(o)`` of the
concatenated new fragments, where ``base_i`` counts the live rows of the old fragments
before ``i``. That needs the old fragments' physical rows and deletion vectors *as the
compaction read them* (the group's own ``old_fragments``, deletion files included) and the
new fragments' physical rows; :func:`group_map` refuses (``None``) when the counts do not
add up, and on stable-row-id tables :meth:`GroupMap.move` also checks each moved row keeps
its row id (an inconsistency is ``None`` too: never a guess).
"""

from __future__ import annotations

import bisect

import attrs
from pyroaring import BitMap

from txn_engine.builder._policy import DeletionReader
from txn_engine.format.rowids import decode_row_id_sequence
from txn_engine.model import Fragment
from txn_engine.ops import RewriteGroup

__all__ = ["GroupMap", "group_map"]


def _row_ids(frag: Fragment) -> list[int] | None:
    seq = frag.row_id_sequence
    if not isinstance(seq, bytes):
        return None
    return decode_row_id_sequence(seq)


@attrs.frozen
class GroupMap:
    """The row mapping of one Rewrite group (see the module docstring)."""

    old: tuple[Fragment, ...]
    kept: tuple[BitMap, ...]  # live offsets of each old fragment at the rewrite's read
    bases: tuple[int, ...]  # live rows of the old fragments before each one
    new: tuple[Fragment, ...]
    starts: tuple[int, ...]  # first row number of each new fragment

    def old_index(self, fragment_id: int) -> int | None:
        for i, frag in enumerate(self.old):
            if frag.id == fragment_id:
                return i
        return None

    def live_offsets(self, fragment_id: int) -> BitMap | None:
        """The offsets of ``fragment_id`` the rewrite copied (None: not in this group)."""
        i = self.old_index(fragment_id)
        return None if i is None else self.kept[i]

    def move(self, fragment_id: int, offsets: BitMap) -> dict[int, BitMap] | None:
        """``offsets`` of old fragment ``fragment_id`` as {new fragment position in the
        group: offsets there}; None when one of them was not copied (deleted at the
        rewrite's read version) or a row id does not match."""
        i = self.old_index(fragment_id)
        if i is None or not offsets <= self.kept[i]:
            return None
        kept = self.kept[i]
        old_ids = _row_ids(self.old[i])
        out: dict[int, BitMap] = {}
        new_ids: dict[int, list[int] | None] = {}
        for o in offsets:
            row = self.bases[i] + kept.rank(o) - 1
            j = bisect.bisect_right(self.starts, row) - 1
            local = row - self.starts[j]
            if old_ids is not None:
                if j not in new_ids:
                    new_ids[j] = _row_ids(self.new[j])
                ids = new_ids[j]
                if ids is None or local >= len(ids) or ids[local] != old_ids[o]:
                    return None
            out.setdefault(j, BitMap()).add(local)
        return out


def group_map(group: RewriteGroup, read_dv: DeletionReader) -> GroupMap | None:
    """The mapping of ``group`` (deletion vectors read with ``read_dv``; a read error
    propagates), or None when the old fragments' live rows do not equal the new
    fragments' physical rows."""
    kept: list[BitMap] = []
    bases: list[int] = []
    total = 0
    for frag in group.old_fragments:
        rows = BitMap()
        rows.add_range(0, frag.physical_rows)
        if frag.deletion_file is not None:
            rows -= read_dv(frag.id, frag.deletion_file.to_proto())
        bases.append(total)
        kept.append(rows)
        total += len(rows)
    starts: list[int] = []
    count = 0
    for frag in group.new_fragments:
        starts.append(count)
        count += frag.physical_rows
    if count != total or not starts:
        return None
    return GroupMap(
        tuple(group.old_fragments),
        tuple(kept),
        tuple(bases),
        tuple(group.new_fragments),
        tuple(starts),
    )
