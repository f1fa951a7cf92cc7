"""Handlers of the compaction operations: Rewrite and ReserveFragments.

Besides validation and their effect on the manifest, the Rewrite's conflict rules: the
fragments it rewrites (rule O1), W1 (a concurrent CreateIndex: a fragment-reuse index must
come alone; other indices must not cover what I rewrite) and W2 (two rewrites of one
fragment).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

from pyroaring import BitMap

from txn_engine._proto import table_pb2
from txn_engine.builder._common import (
    FRAG_REUSE_INDEX,
    Ids,
    ManifestState,
    check_existing,
    check_new_fragments,
    extend_sorted,
    field_ids_of,
    find_fragment_index,
    index_bitmap,
    invalid,
    new_fragment_pb,
    set_bitmap,
)
from txn_engine.builder._handler import Build, Handler
from txn_engine.builder._policy import Predicate, RuleContext, expect
from txn_engine.builder._touches import fragments_overlap
from txn_engine.builder.index import index_vs_rewrite
from txn_engine.format.flags import FLAG_STABLE_ROW_IDS
from txn_engine.model import uuid_bytes, uuid_text
from txn_engine.ops import CreateIndex, ReserveFragments, Rewrite
from txn_engine.transaction import Transaction


def _w1(c: RuleContext) -> None:
    mine = expect(c.mine.operation, Rewrite)
    other = expect(c.other.operation, CreateIndex)
    if any(i.name == FRAG_REUSE_INDEX for i in other.new_indices):
        if len(other.new_indices) != 1 or len(other.removed_indices) != 1:
            c.incompatible(
                "a fragment-reuse index committed together with other index changes",
                index_names=[FRAG_REUSE_INDEX],
            )
        return
    index_vs_rewrite(c, other, mine, "fragment(s) {ids} were indexed concurrently")


def _w2(c: RuleContext) -> None:
    mine = expect(c.mine.operation, Rewrite)
    other = expect(c.other.operation, Rewrite)
    overlap = mine.old_fragment_ids & other.old_fragment_ids
    if overlap:
        c.retry(f"both rewrote fragment(s) {sorted(overlap)}", fragment_ids=overlap)


class RewriteHandler(Handler[Rewrite]):
    """Replace groups of fragments by new ones holding the same rows; index bitmaps are
    remapped for the rewritten indices (all of them on stable-row-id datasets)."""

    rules: Mapping[str, Predicate] = MappingProxyType(
        {"O1": fragments_overlap, "W1": _w1, "W2": _w2}
    )

    def validate(self, current: ManifestState | None, txn: Transaction, op: Rewrite) -> None:
        assert current is not None  # the driver refuses Rewrite without a dataset
        kind = txn.kind
        schema_ids = field_ids_of(current.manifest.fields)
        olds = [f.id for g in op.groups for f in g.old_fragments]
        check_existing(current, olds, kind)
        stable = bool(current.manifest.reader_feature_flags & FLAG_STABLE_ROW_IDS)
        for group in op.groups:
            if not group.old_fragments:
                raise invalid("Rewrite: a group has no old fragments")
            check_new_fragments(
                current, group.new_fragments, schema_ids, kind, numbered_deletions=True
            )
            if stable and any(f.row_id_sequence is None for f in group.new_fragments):
                raise invalid(
                    "Rewrite on a stable-row-id dataset: every new fragment must carry the "
                    "row ids of the rows it took over (row_id_sequence)"
                )
        known = {bytes(i.uuid.uuid) for i in current.indices}
        for ri in op.rewritten_indices:
            if uuid_bytes(ri.old_id, "Rewrite: rewritten index old_id") not in known:
                raise invalid(f"Rewrite: rewritten index {ri.old_id} does not exist")
        reuse = op.frag_reuse_index
        if reuse is not None:
            new_ids = {f.id for g in op.groups for f in g.new_fragments}
            if reuse.name != FRAG_REUSE_INDEX or not (reuse.fragment_bitmap or set()) <= new_ids:
                raise invalid(
                    f"Rewrite: a deferred remap records the {FRAG_REUSE_INDEX} index over the "
                    "new fragments (whose ids it must give)"
                )

    def explicit_ids(self, op: Rewrite) -> Iterable[int]:
        return [f.id for g in op.groups for f in g.new_fragments]

    def apply(self, build: Build, op: Rewrite) -> list[int] | None:
        return _apply_rewrite(
            build.manifest, build.indices, op, build.ids, build.stable, build.version
        )


class ReserveFragmentsHandler(Handler[ReserveFragments]):
    """Raise the fragment-id high-water mark so the ids below it are never handed out."""

    keeps_indices = True
    keeps_fields = True

    touches_fragments = False

    def validate(
        self, current: ManifestState | None, txn: Transaction, op: ReserveFragments
    ) -> None:
        if op.num_fragments < 0:
            raise invalid("ReserveFragments: num_fragments must be >= 0")

    def apply(self, build: Build, op: ReserveFragments) -> list[int] | None:
        m = build.manifest
        stored = m.max_fragment_id if m.HasField("max_fragment_id") else 0
        m.max_fragment_id = stored + op.num_fragments
        return None


def _apply_rewrite(
    m: table_pb2.Manifest,
    indices: list[table_pb2.IndexMetadata],
    op: Rewrite,
    ids: Ids,
    stable: bool,
    version: int,
) -> list[int]:
    """Apply the groups and remap index bitmaps; returns the new fragments' ids."""
    replacements: list[tuple[BitMap, BitMap]] = []
    new_ids: list[int] = []
    for group in op.groups:
        # rewritten fragments carry their rows' ids and version sequences (compaction
        # computes them); only unassigned fragment ids are filled in here
        new_pbs = [new_fragment_pb(f, ids, m, False, version) for f in group.new_fragments]
        old_ids = [f.id for f in group.old_fragments]
        positions = [find_fragment_index(m.fragments, fid) for fid in old_ids]
        if any(p < 0 for p in positions):
            missing = [fid for fid, p in zip(old_ids, positions, strict=True) if p < 0]
            raise invalid(f"Rewrite: old fragments {missing} no longer exist")
        for pos in sorted(positions, reverse=True):
            del m.fragments[pos]
        # reserved ids usually sort after every existing one: a plain append
        extend_sorted(m, new_pbs)
        new_ids.extend(p.id for p in new_pbs)
        replacements.append((BitMap(old_ids), BitMap(p.id for p in new_pbs)))
    rewritten = {ri.old_id: ri for ri in op.rewritten_indices}
    deferred = op.frag_reuse_index is not None
    for index in indices:
        key = uuid_text(index.uuid.uuid)
        ri = rewritten.get(key)
        if not stable and ri is None and (not deferred or index.name == FRAG_REUSE_INDEX):
            continue
        bm = index_bitmap(index)
        if bm is not None:
            for old, new in replacements:
                overlap = bm & old
                if not overlap:
                    continue
                if overlap != old:
                    raise invalid(
                        f"Rewrite: index {index.name} covers only part of a group being "
                        "compacted (split of indexed and non-indexed data)"
                    )
                bm = (bm - old) | new if (ri is not None or not stable or deferred) else bm - old
            set_bitmap(index, bm)
        if ri is not None:
            index.uuid.uuid = uuid_bytes(ri.new_id, "Rewrite: rewritten index new_id")
            if ri.new_index_details is not None:
                index.index_details.type_url = ri.new_index_details.type_url
                index.index_details.value = ri.new_index_details.value
            index.index_version = ri.new_index_version
            if ri.new_index_files:
                del index.files[:]
                for f in ri.new_index_files:
                    index.files.add(path=f.path, size_bytes=f.size_bytes)
    if op.frag_reuse_index is not None:
        _add_frag_reuse_version(indices, op.frag_reuse_index.to_proto())
    return new_ids


def _add_frag_reuse_version(
    indices: list[table_pb2.IndexMetadata], ours: table_pb2.IndexMetadata
) -> None:
    """Replace the fragment-reuse index by ``ours`` carrying the current one's versions
    followed by ours (what pylance 14's deferred remap records; merged here so a
    compaction that landed meanwhile keeps its version)."""
    current = next((i for i in indices if i.name == FRAG_REUSE_INDEX), None)
    if current is not None:
        before = table_pb2.FragmentReuseIndexDetails()
        before.ParseFromString(current.index_details.value)
        if before.WhichOneof("content") != "inline":
            raise invalid(
                f"Rewrite: the {FRAG_REUSE_INDEX} index keeps its versions in a file; "
                "txn_engine appends only to inline ones (trim it, or compact with pylance)"
            )
        mine = table_pb2.FragmentReuseIndexDetails()
        mine.ParseFromString(ours.index_details.value)
        merged = table_pb2.FragmentReuseIndexDetails()
        merged.inline.versions.extend(before.inline.versions)
        merged.inline.versions.extend(mine.inline.versions)
        ours.index_details.value = merged.SerializeToString()
        if current.HasField("index_version"):
            ours.index_version = current.index_version
    indices[:] = [*(i for i in indices if i.name != FRAG_REUSE_INDEX), ours]
