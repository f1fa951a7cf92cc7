"""Handlers of the metadata operations: UpdateConfig and UpdateBases."""

from __future__ import annotations

from txn_engine._proto import table_pb2
from txn_engine.builder._common import (
    ManifestState,
    apply_update_map_bytes,
    apply_update_map_str,
    field_ids_of,
    invalid,
)
from txn_engine.builder._registry import Build, Handler, register
from txn_engine.ops import UpdateBases, UpdateConfig
from txn_engine.transaction import Transaction


@register(UpdateConfig)
class UpdateConfigHandler(Handler[UpdateConfig]):
    """Edit the config, table metadata, schema metadata and field metadata maps."""

    touches_fragments = False

    def validate(self, current: ManifestState | None, txn: Transaction, op: UpdateConfig) -> None:
        assert current is not None  # the driver refuses UpdateConfig without a dataset
        schema_ids = field_ids_of(current.manifest.fields)
        for field_id, _ in op.field_metadata_updates:
            if field_id not in schema_ids:
                raise invalid(f"UpdateConfig: field with id {field_id} does not exist")

    def apply(self, build: Build, op: UpdateConfig) -> list[int] | None:
        m = build.manifest
        if op.config_updates is not None:
            apply_update_map_str(m.config, op.config_updates.entries, op.config_updates.replace)
        if op.table_metadata_updates is not None:
            u = op.table_metadata_updates
            apply_update_map_str(m.table_metadata, u.entries, u.replace)
        if op.schema_metadata_updates is not None:
            u = op.schema_metadata_updates
            apply_update_map_bytes(m.schema_metadata, u.entries, u.replace)
        if op.field_metadata_updates:
            by_id = {f.id: f for f in m.fields}
            for field_id, u in op.field_metadata_updates:
                field = by_id.get(field_id)
                if field is None:
                    raise invalid(f"UpdateConfig: field with id {field_id} does not exist")
                apply_update_map_bytes(field.metadata, u.entries, u.replace)
        return None


@register(UpdateBases)
class UpdateBasesHandler(Handler[UpdateBases]):
    """Register new base paths (ids, names and paths must not clash with existing ones)."""

    touches_fragments = False

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
