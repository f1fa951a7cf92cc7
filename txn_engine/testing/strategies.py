"""Hypothesis strategies for txn_engine values: model types, every operation, Transactions.

Two families:

* *Wire-level* strategies (:func:`transactions`, :func:`operations`, one per operation
  kind in :data:`OPERATION_STRATEGIES`) produce any value the protobuf codec must
  round-trip, valid against a dataset or not.
* :func:`valid_transaction` draws, for a given current manifest, a transaction that the
  builder must accept (used by the builder property tests and the harness).

Requires the ``hypothesis`` test dependency.
"""

from __future__ import annotations

import uuid as uuid_mod
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import attrs
from hypothesis import strategies as st

from txn_engine._proto import table_pb2, transaction_pb2
from txn_engine.builder._common import index_bitmap
from txn_engine.format.flags import FLAG_STABLE_ROW_IDS
from txn_engine.format.rowids import (
    decode_row_id_sequence,
    decode_version_sequence,
    encode_row_id_sequence,
    encode_version_sequence,
)
from txn_engine.model import (
    BasePath,
    DataFile,
    DeletionFile,
    DeletionFileType,
    ExternalFile,
    Fragment,
    IndexDetails,
    IndexFile,
    IndexMetadata,
    LanceField,
    MemWal,
    MemWalId,
    MemWalState,
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
    "OPERATION_STRATEGIES",
    "base_paths",
    "data_files",
    "deletion_files",
    "fragments",
    "index_metadata",
    "lance_schemas",
    "mem_wals",
    "operations",
    "transactions",
    "update_maps",
    "uuids",
    "valid_transaction",
]

U32 = 2**32 - 1
U64 = 2**64 - 1
I32 = 2**31 - 1

_small = st.integers(0, 1_000)
_u32 = st.integers(0, U32)
_u64 = st.integers(0, U64)
_names = st.text(st.characters(codec="utf-8"), max_size=12)
_keys = st.text("abcdefghij._-", min_size=1, max_size=6)
_paths = st.text("abcdef0123456789", min_size=1, max_size=12).map(lambda s: f"{s}.lance")


def uuids() -> st.SearchStrategy[str]:
    """Hyphenated lowercase UUID strings (as Lance writes them)."""
    return st.uuids().map(str)


def data_files(fields: Sequence[int] | None = None) -> st.SearchStrategy[DataFile]:
    """A DataFile; holding exactly ``fields`` when given (one column index each)."""
    field_ids = (
        st.just(tuple(fields)) if fields is not None else st.lists(_small, max_size=4).map(tuple)
    )
    return field_ids.flatmap(
        lambda ids: st.builds(
            DataFile,
            path=_paths,
            fields=st.just(ids),
            column_indices=st.just(tuple(range(len(ids)))),
            file_major_version=st.just(2),
            file_minor_version=st.sampled_from([0, 1, 2]),
            file_size_bytes=_u64,
            base_id=st.none() | _u32,
        )
    )


def deletion_files() -> st.SearchStrategy[DeletionFile]:
    return st.builds(
        DeletionFile,
        file_type=st.sampled_from(list(DeletionFileType)),
        read_version=_u64,
        id=_u64,
        num_deleted_rows=_u64,
        base_id=st.none() | _u32,
    )


_external = st.builds(ExternalFile, path=_paths, offset=_u64, size=_u64)
_sequence = st.none() | st.binary(max_size=16) | _external


def fragments(
    *, ids: st.SearchStrategy[int] = _u64, fields: Sequence[int] | None = None
) -> st.SearchStrategy[Fragment]:
    """Any wire-valid Fragment (the sequences are opaque bytes or external files)."""
    return st.builds(
        Fragment,
        id=ids,
        files=st.lists(data_files(fields), min_size=1, max_size=3).map(tuple),
        physical_rows=_u64,
        deletion_file=st.none() | deletion_files(),
        row_id_sequence=_sequence,
        last_updated_at_version_sequence=_sequence,
        created_at_version_sequence=_sequence,
    )


def _fields_from_shape(shape: Sequence[int], names: Sequence[str]) -> tuple[LanceField, ...]:
    """A pre-order schema: shape[i] = number of children of top-level column i."""
    out: list[LanceField] = []
    next_id = 0
    for i, n_children in enumerate(shape):
        parent = next_id
        logical = "struct" if n_children else "int64"
        out.append(LanceField(parent, -1, f"{names[i]}_{i}", logical))
        next_id += 1
        for j in range(n_children):
            out.append(LanceField(next_id, parent, f"c{j}", "string", nullable=bool(j % 2)))
            next_id += 1
    return tuple(out)


def lance_schemas(max_columns: int = 4) -> st.SearchStrategy[tuple[LanceField, ...]]:
    """Valid Lance schemas (pre-order ids from 0, parents before children)."""
    return st.lists(st.integers(0, 2), min_size=1, max_size=max_columns).flatmap(
        lambda shape: st.lists(
            st.text("abcxyz", min_size=1, max_size=3), min_size=len(shape), max_size=len(shape)
        ).map(lambda names: _fields_from_shape(shape, names))
    )


_any_fields = st.builds(
    LanceField,
    id=st.integers(-1, I32),
    parent_id=st.integers(-1, I32),
    name=_names,
    logical_type=st.sampled_from(["int64", "string", "struct", "list", "float"]),
    nullable=st.booleans(),
    metadata=st.dictionaries(_keys, st.binary(max_size=4), max_size=2),
    extension_name=st.sampled_from(["", "arrow.json"]),
    unenforced_primary_key=st.booleans(),
    encoding=st.integers(0, 4),
    type=st.integers(0, 2),
)


def base_paths() -> st.SearchStrategy[BasePath]:
    return st.builds(
        BasePath,
        id=_u32,
        path=st.text("abc/:", min_size=1, max_size=10),
        name=st.none() | _names,
        is_dataset_root=st.booleans(),
    )


def index_metadata() -> st.SearchStrategy[IndexMetadata]:
    return st.builds(
        IndexMetadata,
        uuid=uuids(),
        name=_names,
        fields=st.lists(st.integers(0, I32), max_size=3).map(tuple),
        dataset_version=_u64,
        fragment_bitmap=st.none() | st.frozensets(st.integers(0, U32), max_size=8),
        index_details=st.none()
        | st.builds(
            IndexDetails,
            type_url=st.sampled_from(
                ["/lance.table.BTreeIndexDetails", "/lance.index.pb.VectorIndexDetails"]
            ),
            value=st.binary(max_size=8),
        ),
        index_version=st.none() | st.integers(-(2**31), I32),
        created_at=st.none() | _u64,
        base_id=st.none() | _u32,
        files=st.lists(st.builds(IndexFile, path=_paths, size_bytes=_u64), max_size=2).map(tuple),
        covering_fields=st.lists(st.integers(0, I32), max_size=2).map(tuple),
    )


def mem_wals() -> st.SearchStrategy[MemWal]:
    return st.builds(
        MemWal,
        id=st.builds(MemWalId, region=_names, generation=_u64),
        mem_table_location=_names,
        wal_location=_names,
        wal_entries=st.binary(max_size=8),
        state=st.sampled_from(list(MemWalState)),
        owner_id=_names,
        last_updated_dataset_version=_u64,
    )


def update_maps() -> st.SearchStrategy[UpdateMap]:
    return st.builds(
        UpdateMap,
        entries=st.dictionaries(_keys, st.none() | _names, max_size=4),
        replace=st.booleans(),
    )


def _inserted_rows() -> st.SearchStrategy[bytes]:
    def build(ids: list[int], bits: bytes, n: int, fpp: float) -> bytes:
        pb = transaction_pb2.Transaction.KeyExistenceFilter(field_ids=ids)
        pb.bloom.bits = bits
        pb.bloom.num_bits = n
        pb.bloom.fpp = fpp
        return pb.SerializeToString()

    return st.builds(
        build,
        st.lists(st.integers(0, 100), max_size=3),
        st.binary(max_size=8),
        _u64,
        st.floats(0, 1),
    )


_frags = st.lists(fragments(), max_size=3).map(tuple)
_ids = st.lists(_u64, max_size=4).map(tuple)
_u32_ids = st.lists(_u32, max_size=4).map(tuple)

#: One strategy per operation kind (wire-level: anything the codec must round-trip).
OPERATION_STRATEGIES: Mapping[str, st.SearchStrategy[Any]] = MappingProxyType(
    {
        "Append": st.builds(Append, fragments=_frags),
        "Delete": st.builds(
            Delete, updated_fragments=_frags, deleted_fragment_ids=_ids, predicate=_names
        ),
        "Overwrite": st.builds(
            Overwrite,
            fragments=_frags,
            schema=st.lists(_any_fields, max_size=3).map(tuple),
            schema_metadata=st.dictionaries(_keys, st.binary(max_size=4), max_size=2),
            config_upsert_values=st.none() | st.dictionaries(_keys, _names, max_size=3),
            initial_bases=st.lists(base_paths(), max_size=2).map(tuple),
        ),
        "CreateIndex": st.builds(
            CreateIndex,
            new_indices=st.lists(index_metadata(), max_size=2).map(tuple),
            removed_indices=st.lists(index_metadata(), max_size=2).map(tuple),
        ),
        "Rewrite": st.builds(
            Rewrite,
            groups=st.lists(
                st.builds(RewriteGroup, old_fragments=_frags, new_fragments=_frags), max_size=2
            ).map(tuple),
            rewritten_indices=st.lists(
                st.builds(
                    RewrittenIndex,
                    old_id=uuids(),
                    new_id=uuids(),
                    new_index_details=st.none()
                    | st.builds(IndexDetails, type_url=_names, value=st.binary(max_size=4)),
                    new_index_version=_u32,
                    new_index_files=st.lists(
                        st.builds(IndexFile, path=_paths, size_bytes=_u64), max_size=2
                    ).map(tuple),
                ),
                max_size=2,
            ).map(tuple),
        ),
        "Merge": st.builds(
            Merge,
            fragments=_frags,
            schema=st.lists(_any_fields, max_size=3).map(tuple),
            # an empty map on the wire is a Merge that keeps the table's (None)
            schema_metadata=st.none()
            | st.dictionaries(_keys, st.binary(max_size=4), min_size=1, max_size=2),
            preserves_nullability=st.booleans(),
        ),
        "Restore": st.builds(Restore, version=_u64),
        "ReserveFragments": st.builds(ReserveFragments, num_fragments=_u32),
        "Update": st.builds(
            Update,
            removed_fragment_ids=_ids,
            updated_fragments=_frags,
            new_fragments=_frags,
            fields_modified=_u32_ids,
            fields_for_preserving_frag_bitmap=_u32_ids,
            update_mode=st.sampled_from(list(UpdateMode)),
            compacted_sstables=st.lists(
                st.builds(CompactedSsTable, shard_id=uuids(), generation=_u64), max_size=2
            ).map(tuple),
            inserted_rows=st.none() | _inserted_rows(),
            updated_fragment_offset_bitmaps=st.dictionaries(
                _u64, st.binary(max_size=6), max_size=2
            ),
        ),
        "Project": st.builds(
            Project,
            schema=st.lists(_any_fields, max_size=3).map(tuple),
            preserves_nullability=st.booleans(),
        ),
        "UpdateConfig": st.builds(
            UpdateConfig,
            config_updates=st.none() | update_maps(),
            table_metadata_updates=st.none() | update_maps(),
            schema_metadata_updates=st.none() | update_maps(),
            field_metadata_updates=st.dictionaries(
                st.integers(-(2**31), I32), update_maps(), max_size=2
            ),
        ),
        "DataReplacement": st.builds(
            DataReplacement,
            replacements=st.lists(
                st.builds(DataReplacementGroup, fragment_id=_u64, new_file=data_files()), max_size=3
            ).map(tuple),
        ),
        "UpdateMemWalState": st.builds(
            UpdateMemWalState,
            added=st.lists(mem_wals(), max_size=2).map(tuple),
            updated=st.lists(mem_wals(), max_size=2).map(tuple),
            removed=st.lists(mem_wals(), max_size=2).map(tuple),
        ),
        "Clone": st.builds(
            Clone,
            ref_version=_u64,
            ref_path=st.text("abc/", min_size=1, max_size=10),
            is_shallow=st.booleans(),
            ref_name=st.none() | _names,
            branch_name=st.none() | _names,
        ),
        "UpdateBases": st.builds(
            UpdateBases, new_bases=st.lists(base_paths(), max_size=3).map(tuple)
        ),
    }
)


def operations() -> st.SearchStrategy[Operation]:
    """Any operation of any kind."""
    return st.one_of(*OPERATION_STRATEGIES.values())


def transactions(operation: st.SearchStrategy[Any] | None = None) -> st.SearchStrategy[Transaction]:
    """Wire-level Transactions (``operation`` defaults to :func:`operations`)."""
    return st.builds(
        Transaction,
        read_version=_u64,
        operation=operation if operation is not None else operations(),
        uuid=uuids(),
        tag=st.none() | _names.filter(bool),
        properties=st.dictionaries(_keys, _names, max_size=3),
    )


# ---- transactions valid against a current manifest --------------------------------------------


def _schema_ids(manifest: table_pb2.Manifest) -> list[int]:
    return [f.id for f in manifest.fields]


def _leaf_ids(manifest: table_pb2.Manifest) -> list[int]:
    parents = {f.parent_id for f in manifest.fields}
    return [f.id for f in manifest.fields if f.id not in parents]


def _new_fragment(draw: Callable[[Any], Any], manifest: table_pb2.Manifest) -> Fragment:
    fields = _leaf_ids(manifest)
    minor = 2
    if manifest.HasField("data_format"):
        major_s, _, minor_s = manifest.data_format.version.partition(".")
        minor = int(minor_s) if major_s == "2" and minor_s.isdigit() else 2
    rows = draw(st.integers(1, 200))
    return Fragment(
        id=0,
        files=(
            DataFile(
                path=f"{uuid_mod.UUID(int=draw(st.integers(0, 2**128 - 1))).hex}.lance",
                fields=fields,
                column_indices=range(len(fields)),
                file_major_version=2,
                file_minor_version=minor,
                file_size_bytes=draw(st.integers(1, 10_000)),
            ),
        ),
        physical_rows=rows,
    )


def _deleted(draw: Callable[[Any], Any], pb: table_pb2.DataFragment, version: int) -> Fragment:
    frag = Fragment.from_proto(pb)
    already = frag.num_deleted_rows
    more = draw(st.integers(1, max(1, pb.physical_rows - already - 1)))
    return Fragment(
        id=frag.id,
        files=frag.files,
        physical_rows=frag.physical_rows,
        deletion_file=DeletionFile(
            DeletionFileType.ARROW_ARRAY,
            read_version=version,
            id=draw(st.integers(0, U64)),
            num_deleted_rows=min(pb.physical_rows - 1, already + more),
        ),
    )


@st.composite
def valid_transaction(
    draw: Callable[[Any], Any],
    manifest: table_pb2.Manifest,
    indices: Sequence[table_pb2.IndexMetadata] = (),
    kinds: Sequence[str] = (
        "Append",
        "Delete",
        "Update",
        "Rewrite",
        "ReserveFragments",
        "UpdateConfig",
        "CreateIndex",
        "Merge",
        "Project",
        "Overwrite",
        "UpdateBases",
    ),
) -> Transaction:
    """A transaction the builder must accept on top of ``manifest`` (version N, read
    version N). Deletion files and data files it names are not written anywhere."""
    version = manifest.version
    frags = list(manifest.fragments)
    usable = [k for k in kinds if frags or k not in ("Delete", "Update", "Rewrite")]
    kind = draw(st.sampled_from(usable))
    op: Operation
    if kind == "Append":
        op = Append([_new_fragment(draw, manifest) for _ in range(draw(st.integers(0, 3)))])
    elif kind in ("Delete", "Update"):
        op = _row_change(draw, kind, manifest)
    elif kind == "Rewrite":
        op = _rewrite(draw, manifest, indices)
    elif kind == "ReserveFragments":
        op = ReserveFragments(draw(st.integers(0, 5)))
    elif kind == "UpdateConfig":
        op = _update_config(draw, manifest)
    elif kind == "CreateIndex":
        op = _create_index(draw, manifest, indices)
    elif kind == "Merge":
        op = _merge(manifest)
    elif kind == "Project":
        op = _project(draw, manifest)
    elif kind == "Overwrite":
        fields = [LanceField.from_proto(f) for f in manifest.fields]
        op = Overwrite(
            [_new_fragment(draw, manifest) for _ in range(draw(st.integers(0, 2)))],
            fields,
            config_upsert_values=draw(st.none() | st.dictionaries(_keys, _names, max_size=2)),
        )
    else:  # UpdateBases
        op = _update_bases(draw, manifest)
    return Transaction(version, op, uuid=draw(uuids()))


def _row_change(
    draw: Callable[[Any], Any], kind: str, manifest: table_pb2.Manifest
) -> Delete | Update:
    """A Delete or an Update (``kind``) removing some fragments of ``manifest`` (which has
    some) and deleting rows of others."""
    version = manifest.version
    frags = list(manifest.fragments)
    chosen = draw(st.lists(st.sampled_from(frags), min_size=1, max_size=3, unique_by=id))
    chosen.sort(key=lambda f: f.id)
    split = draw(st.integers(0, len(chosen)))
    removed = [f.id for f in chosen[:split]]
    updated = [_deleted(draw, f, version) for f in chosen[split:] if f.physical_rows > 1]
    if kind == "Delete":
        return Delete(updated, removed, predicate=draw(st.sampled_from(["a > 1", "true"])))
    fields_modified = draw(st.lists(st.sampled_from(_leaf_ids(manifest)), max_size=2))
    return Update(
        removed_fragment_ids=removed,
        updated_fragments=updated,
        new_fragments=[_new_fragment(draw, manifest) for _ in range(draw(st.integers(0, 2)))],
        fields_modified=sorted(set(fields_modified)),
    )


def _rewrite(
    draw: Callable[[Any], Any],
    manifest: table_pb2.Manifest,
    indices: Sequence[table_pb2.IndexMetadata],
) -> Rewrite:
    """A Rewrite of one group of consecutive fragments of ``manifest`` (which has some)."""
    frags = list(manifest.fragments)
    start = draw(st.integers(0, len(frags) - 1))
    count = draw(st.integers(1, min(3, len(frags) - start)))
    stable = bool(manifest.reader_feature_flags & FLAG_STABLE_ROW_IDS)
    if stable:
        count = _group_under_same_indices(frags, start, count, indices)
    olds = [Fragment.from_proto(f) for f in frags[start : start + count]]
    if stable:  # the rows keep their ids
        news = [_compacted(draw, manifest, frags[start : start + count])]
    else:
        news = [_new_fragment(draw, manifest) for _ in range(draw(st.integers(1, 2)))]
    return Rewrite([RewriteGroup(olds, news)])


def _group_under_same_indices(
    frags: Sequence[table_pb2.DataFragment],
    start: int,
    count: int,
    indices: Sequence[table_pb2.IndexMetadata],
) -> int:
    """How many of the ``count`` fragments from ``start`` one stable-row-id Rewrite group
    may take: Lance refuses a group that joins fragments an index covers with fragments it
    does not (the index is not remapped), so the group stops at the first fragment covered
    by other indices than the group's first."""
    covered = [index_bitmap(i) for i in indices]

    def covering(fid: int) -> list[bool]:
        return [bm is not None and fid in bm for bm in covered]

    first = covering(frags[start].id)
    return next((k for k in range(1, count) if covering(frags[start + k].id) != first), count)


def _compacted(
    draw: Callable[[Any], Any],
    manifest: table_pb2.Manifest,
    olds: Sequence[table_pb2.DataFragment],
) -> Fragment:
    """The one new fragment of a stable-row-id Rewrite of ``olds``: compaction carries
    each row's id and versions into it."""
    row_ids: list[int] = []
    created: list[tuple[int, int]] = []
    last: list[tuple[int, int]] = []
    for f in olds:
        row_ids.extend(decode_row_id_sequence(f.inline_row_ids))
        created.extend(decode_version_sequence(f.inline_created_at_versions))
        last.extend(decode_version_sequence(f.inline_last_updated_at_versions))
    base = _new_fragment(draw, manifest)
    return attrs.evolve(
        base,
        physical_rows=len(row_ids),
        row_id_sequence=encode_row_id_sequence(row_ids),
        created_at_version_sequence=encode_version_sequence(created),
        last_updated_at_version_sequence=encode_version_sequence(last),
    )


def _update_config(draw: Callable[[Any], Any], manifest: table_pb2.Manifest) -> UpdateConfig:
    """An UpdateConfig of any of config, table, schema and field metadata."""
    field_updates = {}
    ids = _schema_ids(manifest)
    if ids and draw(st.booleans()):
        field_updates[draw(st.sampled_from(ids))] = draw(update_maps())
    return UpdateConfig(
        config_updates=draw(st.none() | update_maps()),
        table_metadata_updates=draw(st.none() | update_maps()),
        schema_metadata_updates=draw(st.none() | update_maps()),
        field_metadata_updates=field_updates,
    )


def _create_index(
    draw: Callable[[Any], Any],
    manifest: table_pb2.Manifest,
    indices: Sequence[table_pb2.IndexMetadata],
) -> CreateIndex:
    """A CreateIndex of a new index on one leaf field over every fragment, removing some
    named ones of ``indices``."""
    ids = _leaf_ids(manifest)
    new = IndexMetadata(
        uuid=draw(uuids()),
        name=draw(st.sampled_from(["i1", "i2"])),
        fields=(draw(st.sampled_from(ids)),),
        dataset_version=manifest.version,
        fragment_bitmap=frozenset(f.id for f in manifest.fragments),
        index_details=IndexDetails("/lance.table.BTreeIndexDetails"),
    )
    removed_idx = [IndexMetadata.from_proto(i) for i in indices if draw(st.booleans()) and i.name]
    return CreateIndex(new_indices=[new], removed_indices=removed_idx)


def _merge(manifest: table_pb2.Manifest) -> Merge:
    """A Merge adding a new int32 column: a data file of it in every fragment."""
    fields = [LanceField.from_proto(f) for f in manifest.fields]
    new_id = max([f.id for f in fields] + [-1]) + 1
    new_field = LanceField(new_id, -1, f"m{new_id}", "int32")
    merged = []
    for f in manifest.fragments:
        frag = Fragment.from_proto(f)
        extra = DataFile(
            path=f"m{new_id}-{frag.id}.lance",
            fields=(new_id,),
            column_indices=(0,),
            file_minor_version=f.files[0].file_minor_version if len(f.files) else 2,
        )
        # as pylance's merge_columns: the fragment as the table has it (deletions, row
        # ids), one data file more
        merged.append(attrs.evolve(frag, files=(*frag.files, extra)))
    return Merge(merged, (*fields, new_field))


def _project(draw: Callable[[Any], Any], manifest: table_pb2.Manifest) -> Project:
    """A Project keeping some top-level fields (at least one) and their children."""
    fields = [LanceField.from_proto(f) for f in manifest.fields]
    top = [f for f in fields if f.parent_id == -1]
    keep_top = {f.id for f in draw(st.lists(st.sampled_from(top), min_size=1, unique_by=id))}
    kept: list[LanceField] = []
    kept_ids: set[int] = set()
    for field in fields:
        if field.id in keep_top or field.parent_id in kept_ids:
            kept.append(field)
            kept_ids.add(field.id)
    return Project(kept)


def _update_bases(draw: Callable[[Any], Any], manifest: table_pb2.Manifest) -> UpdateBases:
    """An UpdateBases adding one base path of a new name and path."""
    taken_paths = {b.path for b in manifest.base_paths}
    taken_names = {b.name for b in manifest.base_paths if b.HasField("name")}
    name = draw(st.text("xyz", min_size=1, max_size=8).filter(lambda n: n not in taken_names))
    path = draw(
        st.text("pqr/", min_size=1, max_size=8)
        .map(lambda p: f"mem://{p}")
        .filter(lambda p: p not in taken_paths)
    )
    return UpdateBases([BasePath(0, path, name=name)])
