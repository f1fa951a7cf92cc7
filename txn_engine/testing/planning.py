"""Planning steps shared by the test writers: the Hypothesis machine's
:class:`~txn_engine.testing.machine.Planner` and the ``txn-engine stress`` writers.

Each function builds an operation against a snapshot together with the effect its writer
intends (:mod:`txn_engine.testing.model`), writing the deletion files a real writer writes
before committing. What varies between the writers (which rows, which values, how a new
data file is made) comes in as arguments, so the callers differ only in how they choose
(Hypothesis draws or a seeded ``random.Random``). No hypothesis import: the stress
application runs without it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pyroaring import BitMap, BitMap64

from txn_engine._proto import table_pb2
from txn_engine.format.deletion import read_deletion_vector, write_deletion_vector
from txn_engine.model import Fragment
from txn_engine.ops import Delete, Rewrite, RewriteGroup, Update
from txn_engine.storage.base import Storage
from txn_engine.testing.model import NoRowChange, RemoveRows, Row, SetValues

__all__ = ["NewFragment", "compaction", "live_offsets", "row_change"]

#: Makes an uncommitted fragment holding ``rows`` (a data file written, or synthetic).
NewFragment = Callable[[Sequence[Row]], Fragment]


def live_offsets(storage: Storage, fragment: table_pb2.DataFragment) -> list[int]:
    """Offsets of the rows of ``fragment`` its deletion vector does not delete."""
    deleted = (
        read_deletion_vector(storage, fragment.id, fragment.deletion_file)
        if fragment.HasField("deletion_file")
        else BitMap()
    )
    return [o for o in range(fragment.physical_rows) if o not in deleted]


def row_change(
    storage: Storage,
    version: int,
    fragment: table_pb2.DataFragment,
    physical: Sequence[Row],
    alive: Sequence[int],
    chosen: Sequence[int],
    *,
    new_values: Sequence[int] | None = None,
    new_fragment: NewFragment | None = None,
    affected_known: bool = True,
) -> tuple[Delete, RemoveRows] | tuple[Update, SetValues]:
    """Delete (``new_values`` None) or update the rows at offsets ``chosen`` of
    ``fragment`` (snapshot ``version``; ``physical``: the rows of its data file by offset;
    ``alive``: its live offsets, e.g. :func:`live_offsets`).

    Taking every live row removes the fragment; otherwise a deletion vector (the deleted
    rows plus ``chosen``) is written to ``storage`` now and the fragment restated with it.
    An update re-adds the same rids with ``new_values`` (one per chosen offset, in order) in
    a fragment from ``new_fragment``. ``affected_known`` records the row addresses in
    ``affected_rows`` (what lets concurrent row changes of one fragment rebase)."""
    chosen = sorted(chosen)
    affected = BitMap64((fragment.id << 32) | o for o in chosen) if affected_known else None
    updated: tuple[Fragment, ...] = ()
    whole = len(chosen) == len(alive)
    if not whole:
        deleted = BitMap(range(fragment.physical_rows)) - BitMap(alive)
        dv = write_deletion_vector(storage, fragment.id, version, deleted | BitMap(chosen))
        copy = table_pb2.DataFragment()
        copy.CopyFrom(fragment)
        copy.deletion_file.CopyFrom(dv)
        updated = (Fragment.from_proto(copy),)
    removed = (fragment.id,) if whole else ()
    rids = [physical[o][0] for o in chosen]
    if new_values is None:
        return Delete(updated, removed, "rid in (...)", affected_rows=affected), RemoveRows(rids)
    if new_fragment is None or len(new_values) != len(rids):
        raise ValueError("an update needs new_fragment and one new value per chosen row")
    new_rows = [(rid, value) for rid, value in zip(rids, new_values, strict=True)]
    update = Update(
        removed_fragment_ids=removed,
        updated_fragments=updated,
        new_fragments=(new_fragment(new_rows),),
        fields_modified=(1,),
        affected_rows=affected,
    )
    return update, SetValues(new_rows)


def compaction(
    storage: Storage,
    olds: Sequence[table_pb2.DataFragment],
    physical: Callable[[table_pb2.DataFragment], Sequence[Row]],
    new_fragment: NewFragment,
) -> tuple[Rewrite, NoRowChange]:
    """Rewrite the fragments ``olds`` into one new fragment holding their live rows, in
    order (``physical``: a fragment's rows by offset); the table's rows do not change."""
    live = [physical(pb)[o] for pb in olds for o in live_offsets(storage, pb)]
    group = RewriteGroup(tuple(Fragment.from_proto(pb) for pb in olds), (new_fragment(live),))
    return Rewrite((group,)), NoRowChange("compaction")
