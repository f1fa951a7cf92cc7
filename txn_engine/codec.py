"""Protobuf codec for transactions: one function per ``operation`` oneof arm, each way.

``transaction_to_proto`` / ``transaction_from_proto`` are the entry points.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from txn_engine._proto import table_pb2, transaction_pb2
from txn_engine.errors import (
    FormatError,
    InvalidOperationError,
    TxnEngineError,
    UnknownOperationError,
)
from txn_engine.model import (
    BasePath,
    DataFile,
    Fragment,
    IndexDetails,
    IndexFile,
    IndexMetadata,
    LanceField,
    MemWal,
    uuid_bytes,
    uuid_text,
)
from txn_engine.ops import (
    Append,
    Clone,
    CompactedSsTable,
    CreateIndex,
    DataReplacement,
    DataReplacementGroup,
    Delete,
    Merge,
    Operation,
    Overwrite,
    Project,
    ReserveFragments,
    Restore,
    Rewrite,
    RewriteGroup,
    RewrittenIndex,
    Update,
    UpdateBases,
    UpdateConfig,
    UpdateMap,
    UpdateMemWalState,
    UpdateMode,
)
from txn_engine.transaction import Transaction

__all__ = [
    "ARM_KINDS",
    "decode_operation",
    "encode_operation",
    "operation_kind_of",
    "transaction_from_proto",
    "transaction_to_proto",
]

T = transaction_pb2.Transaction
_frags = Fragment.from_proto


def _frag_list(pbs: Any) -> tuple[Fragment, ...]:
    return tuple(_frags(p) for p in pbs)


def _fields(pbs: Any) -> tuple[LanceField, ...]:
    return tuple(LanceField.from_proto(p) for p in pbs)


# ---- encode, one per arm -------------------------------------------------------------


def _enc_append(op: Append, pb: T) -> None:
    pb.append.SetInParent()
    pb.append.fragments.extend(f.to_proto() for f in op.fragments)


def _enc_delete(op: Delete, pb: T) -> None:
    d = pb.delete
    d.SetInParent()
    d.updated_fragments.extend(f.to_proto() for f in op.updated_fragments)
    d.deleted_fragment_ids.extend(op.deleted_fragment_ids)
    d.predicate = op.predicate


def _enc_overwrite(op: Overwrite, pb: T) -> None:
    o = pb.overwrite
    o.SetInParent()
    o.fragments.extend(f.to_proto() for f in op.fragments)
    o.schema.extend(f.to_proto() for f in op.schema)
    for k, v in op.schema_metadata:
        o.schema_metadata[k] = v
    for k, s in op.config_upsert_values or ():
        o.config_upsert_values[k] = s
    o.initial_bases.extend(b.to_proto() for b in op.initial_bases)


def _enc_create_index(op: CreateIndex, pb: T) -> None:
    c = pb.create_index
    c.SetInParent()
    c.new_indices.extend(i.to_proto() for i in op.new_indices)
    c.removed_indices.extend(i.to_proto() for i in op.removed_indices)


def _uuid_pb(value: str, what: str) -> table_pb2.UUID:
    return table_pb2.UUID(uuid=uuid_bytes(value, what))


def _enc_rewrite(op: Rewrite, pb: T) -> None:
    r = pb.rewrite
    r.SetInParent()
    for g in op.groups:
        gp = r.groups.add()
        gp.old_fragments.extend(f.to_proto() for f in g.old_fragments)
        gp.new_fragments.extend(f.to_proto() for f in g.new_fragments)
    for ri in op.rewritten_indices:
        rp = r.rewritten_indices.add()
        rp.old_id.CopyFrom(_uuid_pb(ri.old_id, "Rewrite: rewritten index old_id"))
        rp.new_id.CopyFrom(_uuid_pb(ri.new_id, "Rewrite: rewritten index new_id"))
        if ri.new_index_details is not None:
            rp.new_index_details.type_url = ri.new_index_details.type_url
            rp.new_index_details.value = ri.new_index_details.value
        rp.new_index_version = ri.new_index_version
        for f in ri.new_index_files:
            rp.new_index_files.add(path=f.path, size_bytes=f.size_bytes)


def _enc_merge(op: Merge, pb: T) -> None:
    m = pb.merge
    m.SetInParent()
    m.fragments.extend(f.to_proto() for f in op.fragments)
    m.schema.extend(f.to_proto() for f in op.schema)
    for k, v in op.schema_metadata or ():
        m.schema_metadata[k] = v
    m.preserves_nullability = op.preserves_nullability


def _enc_restore(op: Restore, pb: T) -> None:
    pb.restore.version = op.version
    pb.restore.SetInParent()


def _enc_reserve(op: ReserveFragments, pb: T) -> None:
    pb.reserve_fragments.num_fragments = op.num_fragments
    pb.reserve_fragments.SetInParent()


def _enc_update(op: Update, pb: T) -> None:
    u = pb.update
    u.SetInParent()
    u.removed_fragment_ids.extend(op.removed_fragment_ids)
    u.updated_fragments.extend(f.to_proto() for f in op.updated_fragments)
    u.new_fragments.extend(f.to_proto() for f in op.new_fragments)
    u.fields_modified.extend(op.fields_modified)
    for sst in op.compacted_sstables:
        u.compacted_sstables.add(
            shard_id=_uuid_pb(sst.shard_id, "a compacted SSTable shard_id"),
            generation=sst.generation,
        )
    u.fields_for_preserving_frag_bitmap.extend(op.fields_for_preserving_frag_bitmap)
    u.update_mode = int(op.update_mode)  # type: ignore[assignment]
    if op.inserted_rows is not None:
        u.inserted_rows.ParseFromString(op.inserted_rows)
    for frag_id, bitmap in op.updated_fragment_offset_bitmaps:
        u.updated_fragment_offset_bitmaps[frag_id] = bitmap


def _enc_map(m: UpdateMap, pb: transaction_pb2.Transaction.UpdateMap) -> None:
    pb.SetInParent()
    for key, value in m.entries:
        e = pb.update_entries.add(key=key)
        if value is not None:
            e.value = value
    pb.replace = m.replace


def _enc_project(op: Project, pb: T) -> None:
    p = pb.project
    p.SetInParent()
    p.schema.extend(f.to_proto() for f in op.schema)
    p.preserves_nullability = op.preserves_nullability


def _enc_update_config(op: UpdateConfig, pb: T) -> None:
    c = pb.update_config
    c.SetInParent()
    if op.config_updates is not None:
        _enc_map(op.config_updates, c.config_updates)
    if op.table_metadata_updates is not None:
        _enc_map(op.table_metadata_updates, c.table_metadata_updates)
    if op.schema_metadata_updates is not None:
        _enc_map(op.schema_metadata_updates, c.schema_metadata_updates)
    for field_id, m in op.field_metadata_updates:
        _enc_map(m, c.field_metadata_updates[field_id])


def _enc_data_replacement(op: DataReplacement, pb: T) -> None:
    d = pb.data_replacement
    d.SetInParent()
    for g in op.replacements:
        d.replacements.add(fragment_id=g.fragment_id, new_file=g.new_file.to_proto())


def _enc_mem_wal(op: UpdateMemWalState, pb: T) -> None:
    m = pb.update_mem_wal_state
    m.SetInParent()
    m.added.extend(w.to_proto() for w in op.added)
    m.updated.extend(w.to_proto() for w in op.updated)
    m.removed.extend(w.to_proto() for w in op.removed)


def _enc_clone(op: Clone, pb: T) -> None:
    c = pb.clone
    c.SetInParent()
    c.is_shallow = op.is_shallow
    c.ref_version = op.ref_version
    c.ref_path = op.ref_path
    if op.ref_name is not None:
        c.ref_name = op.ref_name
    if op.branch_name is not None:
        c.branch_name = op.branch_name


def _enc_update_bases(op: UpdateBases, pb: T) -> None:
    pb.update_bases.SetInParent()
    pb.update_bases.new_bases.extend(b.to_proto() for b in op.new_bases)


_ENCODERS: Mapping[type, Callable[[Any, T], None]] = MappingProxyType(
    {
        Append: _enc_append,
        Delete: _enc_delete,
        Overwrite: _enc_overwrite,
        CreateIndex: _enc_create_index,
        Rewrite: _enc_rewrite,
        Merge: _enc_merge,
        Restore: _enc_restore,
        ReserveFragments: _enc_reserve,
        Update: _enc_update,
        Project: _enc_project,
        UpdateConfig: _enc_update_config,
        DataReplacement: _enc_data_replacement,
        UpdateMemWalState: _enc_mem_wal,
        Clone: _enc_clone,
        UpdateBases: _enc_update_bases,
    }
)


def encode_operation(op: Operation, pb: T) -> None:
    """Write ``op`` into the ``operation`` oneof of ``pb``."""
    _ENCODERS[type(op)](op, pb)


def transaction_to_proto(txn: Transaction) -> transaction_pb2.Transaction:
    """The protobuf form of ``txn`` (what goes into ``.txn`` files and manifests).

    Raises InvalidOperationError when a value does not fit its Lance field (a fragment id
    or size past a u64, a negative size, a string that is not text): the commit loop
    encodes before it writes anything, so such a transaction writes nothing."""
    try:
        pb = transaction_pb2.Transaction(read_version=txn.read_version, uuid=txn.uuid)
        if txn.tag is not None:
            pb.tag = txn.tag
        for k, v in txn.properties:
            pb.transaction_properties[k] = v
        encode_operation(txn.operation, pb)
    except TxnEngineError:
        raise
    except (ValueError, TypeError, OverflowError) as exc:  # protobuf's range/type checks
        raise InvalidOperationError(
            f"{type(txn.operation).__name__}: a value does not fit its Lance field ({exc})"
        ) from exc
    return pb


# ---- decode, one per arm -------------------------------------------------------------


def _dec_append(pb: T) -> Append:
    return Append(fragments=_frag_list(pb.append.fragments))


def _dec_delete(pb: T) -> Delete:
    d = pb.delete
    return Delete(
        updated_fragments=_frag_list(d.updated_fragments),
        deleted_fragment_ids=tuple(d.deleted_fragment_ids),
        predicate=d.predicate,
    )


def _dec_overwrite(pb: T) -> Overwrite:
    o = pb.overwrite
    return Overwrite(
        fragments=_frag_list(o.fragments),
        schema=_fields(o.schema),
        schema_metadata=dict(o.schema_metadata),
        config_upsert_values=dict(o.config_upsert_values) if len(o.config_upsert_values) else None,
        initial_bases=tuple(BasePath.from_proto(b) for b in o.initial_bases),
    )


def _dec_create_index(pb: T) -> CreateIndex:
    c = pb.create_index
    return CreateIndex(
        new_indices=tuple(IndexMetadata.from_proto(i) for i in c.new_indices),
        removed_indices=tuple(IndexMetadata.from_proto(i) for i in c.removed_indices),
    )


def _dec_rewrite(pb: T) -> Rewrite:
    r = pb.rewrite
    groups = [
        RewriteGroup(_frag_list(g.old_fragments), _frag_list(g.new_fragments)) for g in r.groups
    ]
    if len(r.old_fragments) or len(r.new_fragments):  # legacy single-group form
        groups.insert(0, RewriteGroup(_frag_list(r.old_fragments), _frag_list(r.new_fragments)))
    return Rewrite(
        groups=tuple(groups),
        rewritten_indices=tuple(
            RewrittenIndex(
                old_id=uuid_text(ri.old_id.uuid),
                new_id=uuid_text(ri.new_id.uuid),
                new_index_details=IndexDetails(
                    ri.new_index_details.type_url, ri.new_index_details.value
                )
                if ri.HasField("new_index_details")
                else None,
                new_index_version=ri.new_index_version,
                new_index_files=tuple(IndexFile(f.path, f.size_bytes) for f in ri.new_index_files),
            )
            for ri in r.rewritten_indices
        ),
    )


def _dec_merge(pb: T) -> Merge:
    m = pb.merge
    return Merge(
        fragments=_frag_list(m.fragments),
        schema=_fields(m.schema),
        schema_metadata=dict(m.schema_metadata) if len(m.schema_metadata) else None,
        preserves_nullability=m.preserves_nullability,
    )


def _dec_update(pb: T) -> Update:
    u = pb.update
    return Update(
        removed_fragment_ids=tuple(u.removed_fragment_ids),
        updated_fragments=_frag_list(u.updated_fragments),
        new_fragments=_frag_list(u.new_fragments),
        fields_modified=tuple(u.fields_modified),
        compacted_sstables=tuple(
            CompactedSsTable(uuid_text(s.shard_id.uuid), s.generation) for s in u.compacted_sstables
        ),
        inserted_rows=u.inserted_rows.SerializeToString() if u.HasField("inserted_rows") else None,
        updated_fragment_offset_bitmaps=dict(u.updated_fragment_offset_bitmaps),
        fields_for_preserving_frag_bitmap=tuple(u.fields_for_preserving_frag_bitmap),
        update_mode=UpdateMode(u.update_mode),
    )


def _dec_map(pb: transaction_pb2.Transaction.UpdateMap) -> UpdateMap:
    return UpdateMap(
        entries=[(e.key, e.value if e.HasField("value") else None) for e in pb.update_entries],
        replace=pb.replace,
    )


def _dec_update_config(pb: T) -> UpdateConfig:
    c = pb.update_config
    new_style = (
        c.HasField("config_updates")
        or c.HasField("table_metadata_updates")
        or c.HasField("schema_metadata_updates")
        or len(c.field_metadata_updates) > 0
    )
    legacy = (
        len(c.upsert_values) > 0
        or len(c.delete_keys) > 0
        or len(c.schema_metadata) > 0
        or len(c.field_metadata) > 0
    )
    if new_style and legacy:
        raise FormatError("UpdateConfig mixes the legacy (fields 1-4) and current (6-9) forms")
    if legacy:
        entries: list[tuple[str, str | None]] = list(c.upsert_values.items())
        entries += [(k, None) for k in c.delete_keys]
        return UpdateConfig(
            config_updates=UpdateMap(entries) if entries else None,
            schema_metadata_updates=UpdateMap(dict(c.schema_metadata), replace=True)
            if len(c.schema_metadata)
            else None,
            field_metadata_updates={
                int(fid): UpdateMap(dict(upd.metadata), replace=True)
                for fid, upd in c.field_metadata.items()
            },
        )
    return UpdateConfig(
        config_updates=_dec_map(c.config_updates) if c.HasField("config_updates") else None,
        table_metadata_updates=_dec_map(c.table_metadata_updates)
        if c.HasField("table_metadata_updates")
        else None,
        schema_metadata_updates=_dec_map(c.schema_metadata_updates)
        if c.HasField("schema_metadata_updates")
        else None,
        field_metadata_updates={int(k): _dec_map(v) for k, v in c.field_metadata_updates.items()},
    )


def _dec_data_replacement(pb: T) -> DataReplacement:
    return DataReplacement(
        replacements=tuple(
            DataReplacementGroup(g.fragment_id, DataFile.from_proto(g.new_file))
            for g in pb.data_replacement.replacements
        )
    )


def _dec_mem_wal(pb: T) -> UpdateMemWalState:
    m = pb.update_mem_wal_state
    return UpdateMemWalState(
        added=tuple(MemWal.from_proto(w) for w in m.added),
        updated=tuple(MemWal.from_proto(w) for w in m.updated),
        removed=tuple(MemWal.from_proto(w) for w in m.removed),
    )


def _dec_clone(pb: T) -> Clone:
    c = pb.clone
    return Clone(
        ref_version=c.ref_version,
        ref_path=c.ref_path,
        is_shallow=c.is_shallow,
        ref_name=c.ref_name if c.HasField("ref_name") else None,
        branch_name=c.branch_name if c.HasField("branch_name") else None,
    )


_DECODERS: Mapping[str, Callable[[T], Operation]] = MappingProxyType(
    {
        "append": _dec_append,
        "delete": _dec_delete,
        "overwrite": _dec_overwrite,
        "create_index": _dec_create_index,
        "rewrite": _dec_rewrite,
        "merge": _dec_merge,
        "restore": lambda pb: Restore(pb.restore.version),
        "reserve_fragments": lambda pb: ReserveFragments(pb.reserve_fragments.num_fragments),
        "update": _dec_update,
        "project": lambda pb: Project(
            _fields(pb.project.schema), preserves_nullability=pb.project.preserves_nullability
        ),
        "update_config": _dec_update_config,
        "data_replacement": _dec_data_replacement,
        "update_mem_wal_state": _dec_mem_wal,
        "clone": _dec_clone,
        "update_bases": lambda pb: UpdateBases(
            tuple(BasePath.from_proto(b) for b in pb.update_bases.new_bases)
        ),
    }
)


def _arm_kind(arm: str) -> str:
    """Lance's kind name of a ``Transaction.operation`` oneof arm (``create_index`` ->
    ``CreateIndex``): the name of the operation type it decodes to."""
    return "".join(part.capitalize() for part in arm.split("_"))


#: The ``Transaction.operation`` oneof arm -> the operation kind it decodes to.
ARM_KINDS: Mapping[str, str] = MappingProxyType({arm: _arm_kind(arm) for arm in _DECODERS})


def operation_kind_of(pb: T) -> str | None:
    """Lance's name of a Transaction message's operation kind (``"Append"``,
    ``"CreateIndex"``, ...) without decoding it: for a decodable operation, the same name as
    :func:`txn_engine.ops.operation_kind` of the decoded one. ``None`` when the ``operation``
    oneof is empty; an arm this library does not decode is named too (pylance 14's
    ``data_overlay`` is ``"DataOverlay"``)."""
    arm = pb.WhichOneof("operation")
    if arm is None:
        return None
    return ARM_KINDS.get(arm) or _arm_kind(arm)


def decode_operation(pb: T) -> Operation:
    """The operation of a Transaction message. Raises UnknownOperationError when the
    ``operation`` oneof is empty or holds an arm this library does not know."""
    arm = pb.WhichOneof("operation")
    if arm is None or arm not in _DECODERS:
        raise UnknownOperationError(
            f"transaction {pb.uuid or '?'} (read version {pb.read_version}) carries no "
            "operation this library knows (newer Lance operation, or corrupt)"
        )
    return _DECODERS[arm](pb)


def transaction_from_proto(pb: transaction_pb2.Transaction) -> Transaction:
    """The attrs form of a Transaction message."""
    return Transaction(
        read_version=pb.read_version,
        operation=decode_operation(pb),
        uuid=pb.uuid,
        tag=pb.tag or None,
        properties=dict(pb.transaction_properties),
    )
