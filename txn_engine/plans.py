"""Planning helpers of the writer API (:mod:`txn_engine.api`): what a
:class:`~txn_engine.api.Table` call reads off a snapshot and pylance's plan before it builds
its transaction (the rows a predicate matches, an Update's rewritten fragments, index
coverage, column paths)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import attrs
from pyroaring import BitMap64

from txn_engine._proto import table_pb2
from txn_engine.dataset import Dataset
from txn_engine.errors import InvalidOperationError
from txn_engine.format.flags import FLAG_STABLE_ROW_IDS
from txn_engine.format.rowids import encode_row_id_sequence
from txn_engine.interop import as_fragments, as_transaction
from txn_engine.model import Fragment
from txn_engine.ops import Update

__all__ = [
    "FRAG_REUSE",
    "SYSTEM_INDICES",
    "delete_plan",
    "digest",
    "dropped",
    "indexed",
    "lance_module",
    "matching_rows",
    "paths",
    "quote",
    "remaps_indices",
    "to_arrow",
    "update_plan",
    "with_inserted",
]


def lance_module(module: str = "lance") -> Any:
    """A pylance module (untyped on purpose: planning code passes pylance objects along)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - the package extra is documented
        raise InvalidOperationError(
            "this call plans with pylance: install it (pip install 'txn_engine[lance]')"
        ) from exc


FRAG_REUSE = "__lance_frag_reuse"
SYSTEM_INDICES = frozenset({FRAG_REUSE, "__lance_mem_wal"})


def remaps_indices(snapshot: Dataset) -> bool:
    """Whether compacting this version keeps indices by a deferred remap (the fragment
    reuse record). Not under stable row ids, where pylance 14 refuses it: the builder then
    takes the compacted fragments out of each index's coverage (queries scan them)."""
    stable = bool(snapshot.manifest.reader_feature_flags & FLAG_STABLE_ROW_IDS)
    return not stable and any(i.name not in SYSTEM_INDICES for i in snapshot.indices)


def indexed(snapshot: Dataset, fragment_ids: set[int]) -> bool:
    """Whether a (non-system) index covers one of ``fragment_ids``."""
    return any(
        i.name not in SYSTEM_INDICES and i.fragment_bitmap and i.fragment_bitmap & fragment_ids
        for i in snapshot.indices
    )


def digest(fragment: Fragment) -> table_pb2.FragmentReuseIndexDetails.FragmentDigest:
    deleted = fragment.deletion_file.num_deleted_rows if fragment.deletion_file else 0
    return table_pb2.FragmentReuseIndexDetails.FragmentDigest(
        id=fragment.id, physical_rows=fragment.physical_rows, num_deleted_rows=deleted
    )


def to_arrow(data: Any) -> Any:
    import pyarrow as pa  # type: ignore[import-untyped]

    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if hasattr(data, "to_arrow"):
        return data.to_arrow()
    if hasattr(data, "__arrow_c_stream__"):
        return pa.table(data)
    if isinstance(data, Mapping):
        return pa.table(dict(data))
    raise InvalidOperationError(
        f"expected a pyarrow.Table, RecordBatch or a dict of columns, got {type(data).__name__}"
    )


def matching_rows(lds: Any, predicate: str | None) -> BitMap64:
    """Row addresses of the live rows matching ``predicate`` (all rows when None)."""
    table = lds.to_table(columns=[], filter=predicate, with_row_address=True)
    return BitMap64(table.column("_rowaddr").to_pylist())


def delete_plan(
    lds: Any, predicate: str | None
) -> tuple[tuple[Fragment, ...], tuple[int, ...], BitMap64]:
    """(updated fragments, removed fragment ids, affected row addresses) of deleting the
    rows matching ``predicate`` from the fragments that hold some."""
    affected = matching_rows(lds, predicate)
    touched = sorted({addr >> 32 for addr in affected})
    updated: list[Fragment] = []
    removed: list[int] = []
    for fid in touched:
        frag = lds.get_fragment(fid)
        meta = frag.delete(predicate) if predicate is not None else None
        if meta is None:
            removed.append(fid)
        else:
            updated.append(as_fragments([meta])[0])
    return tuple(updated), tuple(removed), affected


def update_plan(
    lds: Any,
    snapshot: Dataset,
    values: Mapping[str, str],
    where: str | None,
    storage_options: Mapping[str, str] | None,
) -> Update:
    import pyarrow as pa

    write_fragments = lance_module("lance.fragment").write_fragments

    schema = snapshot.schema
    unknown = [c for c in values if c not in schema.names]
    if unknown:
        raise InvalidOperationError(f"update: no column(s) {unknown} in the table")
    exprs = {name: values.get(name, quote(name)) for name in schema.names}
    stable = bool(snapshot.manifest_pb.reader_feature_flags & FLAG_STABLE_ROW_IDS)
    scanned = lds.to_table(columns=exprs, filter=where, with_row_id=stable)
    rows = pa.Table.from_arrays(
        [scanned.column(n).cast(schema.field(n).type) for n in schema.names], schema=schema
    )
    updated, removed, affected = delete_plan(lds, where if where is not None else "true")
    new: tuple[Fragment, ...] = ()
    if rows.num_rows:
        txn = write_fragments(rows, lds, return_transaction=True, storage_options=storage_options)
        op = as_transaction(txn).operation
        new = op.fragments  # type: ignore[union-attr]
        if stable:  # the rewritten rows keep their stable row ids, as pylance's update does
            ids = scanned.column("_rowid").to_pylist()
            kept: list[Fragment] = []
            for frag in new:
                part, ids = ids[: frag.physical_rows], ids[frag.physical_rows :]
                kept.append(attrs.evolve(frag, row_id_sequence=encode_row_id_sequence(part)))
            new = tuple(kept)
    ids = {f.name: f.id for f in snapshot.manifest_pb.fields if f.parent_id == -1}
    return Update(
        removed_fragment_ids=removed,
        updated_fragments=updated,
        new_fragments=new,
        fields_modified=sorted(ids[c] for c in values),
        affected_rows=affected,
    )


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"' if not name.isidentifier() else name


def with_inserted(op: Update, record: bytes | None, hashes: frozenset[int]) -> Update:
    return attrs.evolve(op, inserted_rows=record, inserted_key_hashes=hashes)


def paths(fields: Any) -> dict[int, str]:
    """Field id -> dotted name path."""
    out: dict[int, str] = {}
    for f in fields:
        out[f.id] = f.name if f.parent_id == -1 else f"{out[f.parent_id]}.{f.name}"
    return out


def dropped(path: str, drop: set[str]) -> bool:
    return any(path == d or path.startswith(d + ".") for d in drop)
