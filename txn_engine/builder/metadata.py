"""Handlers of the metadata operations: UpdateConfig and UpdateBases.

Besides validation and their effect on the manifest, their conflict rules: UpdateConfig's
C1-C4 (config and metadata keys against Overwrite, UpdateConfig, Merge, Restore), C5 and
C6 (the Merge's and the Restore's side: :func:`metadata_edits_retry`,
:func:`metadata_edits_incompatible`), and UpdateBases' B1 (two new bases sharing an id, a
name or a path).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from txn_engine._proto import table_pb2
from txn_engine.builder._common import ManifestState, field_ids_of, invalid
from txn_engine.builder._handler import Build, Handler
from txn_engine.builder._policy import Predicate, RuleContext, expect
from txn_engine.builder._touches import config_keys, key_clash, map_edits
from txn_engine.ops import UpdateBases, UpdateConfig
from txn_engine.transaction import Transaction


def _changes_schema_or_field_metadata(op: UpdateConfig) -> bool:
    return op.schema_metadata_updates is not None or bool(op.field_metadata_updates)


def _field_ids(op: UpdateConfig) -> frozenset[int]:
    return frozenset(fid for fid, _ in op.field_metadata_updates)


def _c1(c: RuleContext) -> None:
    mine = expect(c.mine.operation, UpdateConfig)
    if _changes_schema_or_field_metadata(mine):
        c.incompatible(
            "schema/field metadata edits cannot survive an Overwrite", field_ids=_field_ids(mine)
        )
        return
    config_keys(c)


def _c2(c: RuleContext) -> None:
    mine = expect(c.mine.operation, UpdateConfig)
    other = expect(c.other.operation, UpdateConfig)
    clash = key_clash(map_edits(mine.config_updates), map_edits(other.config_updates))
    if clash:
        c.incompatible(f"both changed config key(s) {sorted(clash)}", keys=clash)
        return
    clash = key_clash(
        map_edits(mine.table_metadata_updates), map_edits(other.table_metadata_updates)
    )
    if clash:
        c.incompatible(f"both changed table metadata key(s) {sorted(clash)}", keys=clash)
        return
    if mine.schema_metadata_updates is not None and other.schema_metadata_updates is not None:
        c.incompatible("both changed the schema metadata")
        return
    common = _field_ids(mine) & _field_ids(other)
    if common:
        c.incompatible(f"both changed metadata of field(s) {sorted(common)}", field_ids=common)


def _c3(c: RuleContext) -> None:
    mine = expect(c.mine.operation, UpdateConfig)
    if _changes_schema_or_field_metadata(mine):
        c.retry(
            "the schema changed under my schema/field metadata edits", field_ids=_field_ids(mine)
        )


def _c4(c: RuleContext) -> None:
    mine = expect(c.mine.operation, UpdateConfig)
    if _changes_schema_or_field_metadata(mine):
        c.incompatible(
            "schema/field metadata edits cannot survive a Restore", field_ids=_field_ids(mine)
        )


def metadata_edits_retry(c: RuleContext) -> None:
    """Rule C5 (a Merge of mine): retryable when the other UpdateConfig changed schema or
    field metadata."""
    other = expect(c.other.operation, UpdateConfig)
    if _changes_schema_or_field_metadata(other):
        c.retry("the other changed schema/field metadata", field_ids=_field_ids(other))


def metadata_edits_incompatible(c: RuleContext) -> None:
    """Rule C6 (a Restore of mine): incompatible when the other UpdateConfig changed
    schema or field metadata."""
    other = expect(c.other.operation, UpdateConfig)
    if _changes_schema_or_field_metadata(other):
        c.incompatible("the other changed schema/field metadata", field_ids=_field_ids(other))


def _b1(c: RuleContext) -> None:
    mine = expect(c.mine.operation, UpdateBases)
    other = expect(c.other.operation, UpdateBases)
    for new in mine.new_bases:
        for old in other.new_bases:
            if new.id != 0 and new.id == old.id:
                c.incompatible(f"both added base path id {new.id}", keys=[str(new.id)])
                return
            if new.name is not None and new.name == old.name:
                c.incompatible(f"both added base path name {new.name!r}", keys=[new.name])
                return
            if new.path == old.path:
                c.incompatible(f"both added base path {new.path!r}", keys=[new.path])
                return


class UpdateConfigHandler(Handler[UpdateConfig]):
    """Edit the config, table metadata, schema metadata and field metadata maps."""

    edits_config = True
    keeps_indices = True
    keeps_fields = True

    touches_fragments = False
    rules: Mapping[str, Predicate] = MappingProxyType({"C1": _c1, "C2": _c2, "C3": _c3, "C4": _c4})

    def validate(self, current: ManifestState | None, txn: Transaction, op: UpdateConfig) -> None:
        assert current is not None  # the driver refuses UpdateConfig without a dataset
        schema_ids = field_ids_of(current.manifest.fields)
        for field_id, _ in op.field_metadata_updates:
            if field_id not in schema_ids:
                raise invalid(f"UpdateConfig: field with id {field_id} does not exist")

    def apply(self, build: Build, op: UpdateConfig) -> list[int] | None:
        m = build.manifest
        if op.config_updates is not None:
            op.config_updates.apply_to(m.config)
        if op.table_metadata_updates is not None:
            op.table_metadata_updates.apply_to(m.table_metadata)
        if op.schema_metadata_updates is not None:
            op.schema_metadata_updates.apply_to(m.schema_metadata, str.encode)
        if op.field_metadata_updates:
            by_id = {f.id: f for f in m.fields}
            for field_id, u in op.field_metadata_updates:
                field = by_id.get(field_id)
                if field is None:
                    raise invalid(f"UpdateConfig: field with id {field_id} does not exist")
                u.apply_to(field.metadata, str.encode)
        return None


class UpdateBasesHandler(Handler[UpdateBases]):
    """Register new base paths (ids, names and paths must not clash with existing ones)."""

    keeps_indices = True
    keeps_fields = True

    touches_fragments = False
    rules: Mapping[str, Predicate] = MappingProxyType({"B1": _b1})

    def validate(self, current: ManifestState | None, txn: Transaction, op: UpdateBases) -> None:
        assert current is not None  # the driver refuses UpdateBases without a dataset
        _merge_bases(current.manifest, op)  # raises on name/path clashes

    def apply(self, build: Build, op: UpdateBases) -> list[int] | None:
        build.manifest.base_paths.extend(_merge_bases(build.manifest, op))
        return None


def _merge_bases(m: table_pb2.Manifest, op: UpdateBases) -> list[table_pb2.BasePath]:
    names = {b.name for b in m.base_paths if b.HasField("name")}
    paths = {b.path for b in m.base_paths}
    next_id = max((b.id for b in m.base_paths), default=0) + 1
    out = []
    ids = {b.id for b in m.base_paths}
    for base in op.new_bases:
        if base.id and base.id in ids:
            raise invalid(f"UpdateBases: base id {base.id} is already in use")
        if base.name is not None and base.name in names:
            raise invalid(f"UpdateBases: a base named {base.name!r} already exists")
        if base.path in paths:
            raise invalid(f"UpdateBases: a base with path {base.path!r} already exists")
        pb = base.to_proto()
        if pb.id == 0:
            pb.id = next_id
        next_id = max(next_id, pb.id + 1)
        ids.add(pb.id)
        if base.name is not None:
            names.add(base.name)
        paths.add(base.path)
        out.append(pb)
    return out
