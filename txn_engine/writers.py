"""Writer helpers for common jobs, each one transaction through :func:`txn_engine.commit`.

Data files are written by whatever produces them (for example pylance's
``lance.fragment.write_fragments``); these helpers describe them to the dataset:

* :func:`append_fragments` - add fragments (``Append``);
* :func:`delete_rows` - delete rows of one fragment by physical offset, writing a new
  *cumulative* deletion file in the encoding Lance would choose (``Delete``);
* :func:`overwrite` - replace the table, or create the dataset (``Overwrite``);
* :func:`update_config` - edit config / table metadata / schema and field metadata
  (``UpdateConfig``);
* :func:`add_columns` - publish fragments that gained columns (``Merge``);
* :func:`restore` - make an old version the newest (``Restore``).

Each returns the :class:`~txn_engine.commit.CommitResult` and raises what
:func:`txn_engine.commit` raises; ``retry_policy`` and ``transaction_file`` are passed to
it. Fragments may be given as :class:`~txn_engine.Fragment` values, pylance
``FragmentMetadata`` objects, their ``to_json()`` dicts or JSON text.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from pyroaring import BitMap, BitMap64

from txn_engine._proto import table_pb2
from txn_engine.builder import find_fragment_index
from txn_engine.commit import CommitResult, commit
from txn_engine.dataset import Dataset
from txn_engine.errors import DatasetNotFoundError, InvalidOperationError
from txn_engine.format.deletion import (
    DeletionEncoding,
    read_deletion_vector,
    write_deletion_vector,
)
from txn_engine.format.naming import NamingScheme
from txn_engine.format.schema import arrow_to_lance_fields, assign_new_field_ids, max_field_id
from txn_engine.interop import as_fields, as_transaction, is_pylance, schema_metadata_of
from txn_engine.interop import as_fragment as _as_fragment
from txn_engine.model import Fragment, LanceField
from txn_engine.ops import Append, Delete, Merge, Overwrite, Restore, UpdateConfig, UpdateMap
from txn_engine.retry import RetryPolicy
from txn_engine.storage import open_storage
from txn_engine.storage.base import Storage
from txn_engine.transaction import Transaction

__all__ = [
    "FragmentLike",
    "add_columns",
    "append_fragments",
    "as_fragment",
    "delete_rows",
    "overwrite",
    "restore",
    "update_config",
]

#: What the helpers accept as a fragment description.
FragmentLike = Fragment | Mapping[str, Any] | str | bytes | Any
_Uri = str | os.PathLike[str] | Storage


def as_fragment(value: FragmentLike) -> Fragment:
    """A :class:`Fragment` from a Fragment, a pylance ``FragmentMetadata``, its
    ``to_json()`` dict or JSON text. Raises InvalidOperationError otherwise."""
    return _as_fragment(value)


def _schema(schema: pa.Schema | Sequence[LanceField] | Any) -> tuple[LanceField, ...]:
    """Lance fields from a pyarrow.Schema, Lance fields or a pylance ``LanceSchema``."""
    if isinstance(schema, pa.Schema):
        return arrow_to_lance_fields(schema)
    return as_fields(schema)


def _open(
    uri: _Uri, storage_options: Mapping[str, Any] | None, read_version: int | None
) -> Dataset:
    return Dataset.open(open_storage(uri, storage_options), version=read_version)


def _txn(
    read_version: int,
    op: Any,
    tag: str | None,
    properties: Mapping[str, str] | None,
) -> Transaction:
    return Transaction(read_version, op, tag=tag, properties=properties or {})


def append_fragments(
    uri: _Uri,
    fragments: Iterable[FragmentLike] | Any,
    *,
    read_version: int | None = None,
    storage_options: Mapping[str, Any] | None = None,
    retry_policy: RetryPolicy | None = None,
    transaction_file: bool = False,
    tag: str | None = None,
    properties: Mapping[str, str] | None = None,
) -> CommitResult:
    """Append fragments whose data files already exist under ``data/``.

    ``read_version`` is the version the data was planned against: read it *before*
    writing the data files. A concurrent commit since then that the Append cannot land on
    (an Overwrite, a Restore, a schema change) then raises a conflict instead of the rows
    landing on top of it. ``fragments`` may instead be the pylance ``Transaction`` that
    ``write_fragments(..., return_transaction=True)`` returns: its read version is used.
    Without either, InvalidOperationError is raised (nothing is written): the version to
    check against cannot be known after the fact. :meth:`txn_engine.Table.append` does
    all of this in one call.

    Fragment ids 0 are assigned at commit (after the dataset's high-water mark).
    """
    if is_pylance(fragments, "Transaction"):
        planned = as_transaction(fragments)
        if not isinstance(planned.operation, Append):
            raise InvalidOperationError(
                f"append_fragments: the pylance transaction is a {planned.kind}, not an Append"
            )
        if read_version is None:
            read_version = planned.read_version
        frags = planned.operation.fragments
    else:
        frags = tuple(as_fragment(f) for f in fragments)
    if read_version is None:
        raise InvalidOperationError(
            "append_fragments: give read_version (the version read before the data files "
            "were written) or pylance's write_fragments(..., return_transaction=True); "
            "committing against the latest version could land the rows on top of a "
            "concurrent overwrite (a lost update)"
        )
    ds = _open(uri, storage_options, read_version)
    return commit(
        ds.storage,
        _txn(ds.version, Append(frags), tag, properties),
        retry_policy=retry_policy,
        base=ds,
        transaction_file=transaction_file,
    )


def delete_rows(
    uri: _Uri,
    fragment_id: int,
    offsets: Iterable[int],
    *,
    read_version: int | None = None,
    encoding: DeletionEncoding = "auto",
    predicate: str = "",
    storage_options: Mapping[str, Any] | None = None,
    retry_policy: RetryPolicy | None = None,
    transaction_file: bool = False,
    tag: str | None = None,
    properties: Mapping[str, str] | None = None,
) -> CommitResult:
    """Delete rows of fragment ``fragment_id`` given by physical offsets (0-based, deleted
    rows included in the numbering).

    Reads the fragment's current deletion vector, adds ``offsets`` and writes a new
    cumulative deletion file (``encoding="auto"``: ``.arrow`` below 5 000 deleted rows,
    ``.bin`` from there on, as Lance does). When every row ends up deleted the fragment is
    removed instead. Offsets already deleted are fine; if nothing new is deleted a version
    is still committed (as pylance does for a delete that matches nothing). The rows
    removed travel as ``affected_rows``, so a concurrent delete of *other* rows of the same
    fragment rebases instead of conflicting.

    Raises InvalidOperationError for an unknown fragment or an offset outside
    ``[0, physical_rows)``; nothing is written then.
    """
    ds = _open(uri, storage_options, read_version)
    storage = ds.storage
    frags = ds.manifest_pb.fragments
    pos = find_fragment_index(frags, fragment_id)
    if pos < 0:
        raise InvalidOperationError(
            f"delete_rows: fragment {fragment_id} does not exist in version {ds.version}"
        )
    pb = frags[pos]
    wanted = BitMap(offsets)
    if wanted and wanted.max() >= pb.physical_rows:
        raise InvalidOperationError(
            f"delete_rows: offset {wanted.max()} is outside fragment {fragment_id} "
            f"({pb.physical_rows} physical rows)"
        )
    existing = (
        read_deletion_vector(storage, fragment_id, pb.deletion_file)
        if pb.HasField("deletion_file")
        else BitMap()
    )
    added = wanted - existing
    total = existing | wanted
    affected = BitMap64((fragment_id << 32) | offset for offset in added)
    op: Delete
    if len(total) >= pb.physical_rows:
        op = Delete(
            deleted_fragment_ids=(fragment_id,), predicate=predicate, affected_rows=affected
        )
    elif not added:
        op = Delete(predicate=predicate, affected_rows=affected)
    else:
        deletion = write_deletion_vector(storage, fragment_id, ds.version, total, encoding=encoding)
        updated = _with_deletion(pb, deletion)
        op = Delete(updated_fragments=(updated,), predicate=predicate, affected_rows=affected)
    return commit(
        storage,
        _txn(ds.version, op, tag, properties),
        retry_policy=retry_policy,
        base=ds,
        transaction_file=transaction_file,
    )


def _with_deletion(pb: table_pb2.DataFragment, deletion: table_pb2.DeletionFile) -> Fragment:
    """The attrs Fragment of ``pb`` with ``deletion`` as its deletion file."""
    copy = table_pb2.DataFragment()
    copy.CopyFrom(pb)
    copy.deletion_file.CopyFrom(deletion)
    return Fragment.from_proto(copy)


def overwrite(
    uri: _Uri,
    fragments: Iterable[FragmentLike],
    schema: pa.Schema | Sequence[LanceField],
    *,
    schema_metadata: Mapping[str, bytes | str] | None = None,
    config_upserts: Mapping[str, str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    retry_policy: RetryPolicy | None = None,
    transaction_file: bool = False,
    naming: NamingScheme | None = None,
    enable_stable_row_ids: bool = False,
    tag: str | None = None,
    properties: Mapping[str, str] | None = None,
) -> CommitResult:
    """Replace the whole table with ``fragments`` (or create the dataset if there is none).

    ``schema`` is a ``pyarrow.Schema`` or Lance fields. From a ``pyarrow.Schema``, field
    ids are those pylance's ``write_fragments`` writes into the data files: pre-order from 0
    for a new dataset; on an existing one, columns with a known name path keep their id and
    new columns get ids above every id ever used. Its metadata becomes the schema metadata
    unless ``schema_metadata`` is given. Indices are dropped; the config is kept and
    ``config_upserts`` merged in. ``naming`` and ``enable_stable_row_ids`` only apply when
    creating.
    """
    frags = tuple(as_fragment(f) for f in fragments)
    if schema_metadata is None and isinstance(schema, pa.Schema) and schema.metadata:
        schema_metadata = dict(schema.metadata)
    meta = {
        (k.decode() if isinstance(k, bytes) else str(k)): (
            v if isinstance(v, bytes) else v.encode()
        )
        for k, v in (schema_metadata or {}).items()
    }
    storage = open_storage(uri, storage_options)
    try:
        ds: Dataset | None = Dataset.open(storage)
    except DatasetNotFoundError:
        ds = None
    if ds is not None and isinstance(schema, pa.Schema):
        # columns that already exist keep their field ids (what pylance's write_fragments
        # puts in the data files), new ones come after every id ever used
        fields = tuple(
            LanceField.from_proto(f)
            for f in assign_new_field_ids(
                list(ds.manifest_pb.fields), schema, first_new_id=max_field_id(ds.manifest_pb) + 1
            )
        )
    else:
        fields = _schema(schema)
    op = Overwrite(frags, fields, schema_metadata=meta, config_upsert_values=config_upserts)
    read_version = 0 if ds is None else ds.version
    return commit(
        storage,
        _txn(read_version, op, tag, properties),
        retry_policy=retry_policy,
        naming=naming,
        enable_stable_row_ids=enable_stable_row_ids,
        base=ds,
        transaction_file=transaction_file,
    )


def update_config(
    uri: _Uri,
    upserts: Mapping[str, str | None] | None = None,
    *,
    replace: bool = False,
    table_metadata: Mapping[str, str | None] | UpdateMap | None = None,
    schema_metadata: Mapping[str, str | None] | UpdateMap | None = None,
    field_metadata: Mapping[int, Mapping[str, str | None] | UpdateMap] | None = None,
    read_version: int | None = None,
    storage_options: Mapping[str, Any] | None = None,
    retry_policy: RetryPolicy | None = None,
    transaction_file: bool = False,
    tag: str | None = None,
    properties: Mapping[str, str] | None = None,
) -> CommitResult:
    """Edit the table config (``upserts``: key -> value, or None to delete the key;
    ``replace=True`` clears the config first), and optionally the table metadata, schema
    metadata and per-field metadata (plain mappings upsert/delete; pass an
    :class:`~txn_engine.UpdateMap` to replace a whole map).

    Concurrent edits of the same config key conflict (IncompatibleTransactionError).
    """

    def as_map(value: Mapping[str, str | None] | UpdateMap | None) -> UpdateMap | None:
        if value is None or isinstance(value, UpdateMap):
            return value
        return UpdateMap(value)

    config = UpdateMap(upserts or {}, replace=replace) if upserts is not None or replace else None
    op = UpdateConfig(
        config_updates=config,
        table_metadata_updates=as_map(table_metadata),
        schema_metadata_updates=as_map(schema_metadata),
        field_metadata_updates={
            int(k): as_map(v) or UpdateMap() for k, v in (field_metadata or {}).items()
        },
    )
    ds = _open(uri, storage_options, read_version)
    return commit(
        ds.storage,
        _txn(ds.version, op, tag, properties),
        retry_policy=retry_policy,
        base=ds,
        transaction_file=transaction_file,
    )


def add_columns(
    uri: _Uri,
    fragments: Iterable[FragmentLike],
    schema: pa.Schema | Sequence[LanceField] | Any,
    *,
    read_version: int,
    storage_options: Mapping[str, Any] | None = None,
    retry_policy: RetryPolicy | None = None,
    transaction_file: bool = False,
    tag: str | None = None,
    properties: Mapping[str, str] | None = None,
) -> CommitResult:
    """Publish new columns: ``fragments`` is the *complete* fragment list of
    ``read_version``, each with its new data files (for example what pylance's
    ``LanceFragment.merge_columns`` returns), and ``schema`` the new schema (the
    ``LanceSchema`` ``merge_columns`` returns, Lance fields, or a ``pyarrow.Schema`` whose
    pre-order ids must then match the data files).

    Raises InvalidOperationError if a fragment is missing or its row count changed.
    """
    frags = tuple(as_fragment(f) for f in fragments)
    ds = _open(uri, storage_options, read_version)
    op = Merge(frags, _schema(schema), schema_metadata=schema_metadata_of(schema))
    return commit(
        ds.storage,
        _txn(ds.version, op, tag, properties),
        retry_policy=retry_policy,
        base=ds,
        transaction_file=transaction_file,
    )


def restore(
    uri: _Uri,
    version: int,
    *,
    storage_options: Mapping[str, Any] | None = None,
    retry_policy: RetryPolicy | None = None,
    transaction_file: bool = False,
    tag: str | None = None,
    properties: Mapping[str, str] | None = None,
) -> CommitResult:
    """Make the content of ``version`` the newest version (later versions stay readable)."""
    ds = _open(uri, storage_options, None)
    return commit(
        ds.storage,
        _txn(ds.version, Restore(version), tag, properties),
        retry_policy=retry_policy,
        base=ds,
        transaction_file=transaction_file,
    )
