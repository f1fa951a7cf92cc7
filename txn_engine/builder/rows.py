"""Handlers of the row-level mutations: Delete and Update.

Their conflict policy (rebasing on a concurrent Delete/Update of the same fragments by
merging deletion vectors when the affected rows are disjoint) lives with the conflict
rules in :mod:`txn_engine.conflicts`, a layer above the builder.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyroaring import BitMap

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
from txn_engine.builder._registry import Build, Handler, register
from txn_engine.format.rowids import (
    decode_row_id_sequence,
    decode_version_sequence,
    encode_version_sequence,
    fresh_version_sequence,
)
from txn_engine.ops import Delete, Update
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


@register(Delete)
class DeleteHandler(Handler[Delete]):
    """Remove whole fragments and restate others (with new deletion files)."""

    prunes_indices = True

    def validate(self, current: ManifestState | None, txn: Transaction, op: Delete) -> None:
        _check_restated(current, txn, op.deleted_fragment_ids, op)

    def apply(self, build: Build, op: Delete) -> list[int] | None:
        remove_fragments(build.manifest, op.deleted_fragment_ids)
        replace_fragments(build.manifest, op.updated_fragments)
        return [f.id for f in op.updated_fragments]


@register(Update)
class UpdateHandler(Handler[Update]):
    """Remove fragments, restate updated ones, add new ones (updated rows move there)."""

    prunes_indices = True

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
