"""What a Spark write fixes on the driver when it is planned.

Its transaction uuid (derived from a caller-chosen write id, so a re-run is recognised),
the storage it commits through (``storage_factory``, a namespace, or the URI), the read
version it pins (the latest version now, leased while the job runs) and the schema its data
is written with (the table's for an append, columns cast without loss; ``mergeSchema``
widens it, see ``_merge_schema``).
"""

from __future__ import annotations

import importlib
import logging
import uuid as uuid_mod
from collections.abc import Callable, Mapping
from typing import Any, Literal

import attrs
import pyarrow as pa  # type: ignore[import-untyped]

from txn_engine.errors import DatasetNotFoundError, InvalidOperationError, SchemaMismatchError
from txn_engine.schema_check import is_lossless
from txn_engine.spark import _staging
from txn_engine.spark._merge_schema import _add_columns, _data_format, _merges_in_one_version
from txn_engine.spark._options import WriteOptions
from txn_engine.storage import open_storage
from txn_engine.storage.base import Storage

__all__ = ["WRITE_ID_PROPERTY", "WRITE_LEASE_SECONDS", "WriteMode", "check_lossless"]

_log = logging.getLogger("txn_engine.spark")

#: Transaction property that carries a write's job-level identity.
WRITE_ID_PROPERTY = "txn_engine.spark.write_id"
#: Namespace for turning a caller-chosen write id into a transaction uuid.
_WRITE_ID_NAMESPACE = uuid_mod.UUID("5b0d8a52-61f4-4c55-9d8e-2f3b1a7c9e01")
#: How long a batch write's lease on its read version lasts when the driver never releases
#: it (a driver that died): the job's files and history stay protected from cleanup that long.
WRITE_LEASE_SECONDS = 6 * 3600.0

WriteMode = Literal["append", "overwrite"]


def _uuid_for(write_id: str, generated: bool) -> str:
    if generated:
        return write_id
    return str(uuid_mod.uuid5(_WRITE_ID_NAMESPACE, write_id))


def _landed_before(
    storage: Storage, txn_uuid: str, read_version: int, options: WriteOptions
) -> _staging.Landed | None:
    """Where the transaction ``txn_uuid`` of a caller-chosen write id already landed, among
    the ``idempotency_lookback`` versions up to ``read_version`` (a re-run of the write
    commits nothing then), or None."""
    return _staging.find_landed(
        storage,
        txn_uuid,
        after_version=max(0, read_version - options.idempotency_lookback),
    )


def _sweep_old_writes(storage: Storage, uri: str, options: WriteOptions) -> None:
    """Remove the leftovers of writes planned more than ``staging_retention_seconds`` ago
    (``sweep_on_plan``); a failure is logged, never raised: the write goes on."""
    try:
        _staging.sweep(
            storage,
            older_than_seconds=options.staging_retention_seconds,
            write_id_property=WRITE_ID_PROPERTY,
        )
    except Exception as exc:
        _log.warning("sweeping old staged writes of %s failed: %r", uri, exc)


def _load_factory(spec: str) -> Callable[[str, Mapping[str, Any]], Storage]:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise InvalidOperationError(
            f"storage_factory must look like 'package.module:callable', got {spec!r}"
        )
    factory = getattr(importlib.import_module(module_name), attr)
    if not callable(factory):
        raise InvalidOperationError(f"storage_factory {spec!r} is not callable")
    return factory  # type: ignore[no-any-return]


def _open(uri: str, options: WriteOptions) -> Storage:
    if options.namespace and options.table_id:  # commits go through the namespace
        from txn_engine.spark._namespace import namespace_storage

        return namespace_storage(options.namespace, options.table_id, options.storage_options)
    if options.storage_factory:
        return _load_factory(options.storage_factory)(uri, dict(options.storage_options))
    return open_storage(uri, dict(options.storage_options) or None)


@attrs.frozen
class _Pinned:
    """What a write plans against: the read version, the schema the data is written with,
    the columns an append adds (``mergeSchema`` in one version) and, then, the table's
    data file format (the new files must have it)."""

    read_version: int
    schema: pa.Schema
    added_columns: tuple[str, ...] = ()
    data_storage_version: str | None = None


def _pin(
    storage: Storage, uri: str, mode: WriteMode, schema: pa.Schema, options: WriteOptions
) -> _Pinned:
    """The read version (the latest version now) and the target schema."""
    from txn_engine.format.io import latest_version

    try:
        entry = latest_version(storage)
    except DatasetNotFoundError:
        return _Pinned(0, schema)
    if mode == "overwrite" and options.replace_where is None:
        return _Pinned(entry.version, schema)
    from txn_engine.dataset import Dataset

    if options.replace_where is not None and options.merge_schema:
        raise InvalidOperationError("replaceWhere cannot be combined with mergeSchema")

    current = Dataset.open(storage, version=entry.version)
    target = current.schema
    theirs, ours = set(target.names), set(schema.names)
    read_version = entry.version
    if options.merge_schema and theirs < ours:
        check_lossless(schema, target, what=f"cannot append to {uri}")
        if _merges_in_one_version(current.manifest_pb):
            new = [field.with_nullable(True) for field in schema if field.name not in theirs]
            return _Pinned(
                read_version,
                pa.schema([*target, *new], metadata=target.metadata),
                tuple(field.name for field in new),
                _data_format(current.manifest_pb),
            )
        read_version = _add_columns(storage, uri, schema, options)
        target = Dataset.open(storage, version=read_version).schema
        theirs = set(target.names)
    if theirs != ours:
        hint = "" if options.merge_schema else "; new columns need .option('mergeSchema', 'true')"
        missing, unexpected = sorted(theirs - ours), sorted(ours - theirs)
        column = (missing or unexpected)[0]
        raise SchemaMismatchError(
            f"cannot append to {uri}: the data's columns do not match the dataset's "
            f"(missing: {missing}, unexpected: {unexpected}){hint}",
            column=column,
            expected=str(target.field(column).type) if column in theirs else None,
            actual=str(schema.field(column).type) if column in ours else None,
        )
    check_lossless(schema, target, what=f"cannot append to {uri}")
    return _Pinned(read_version, target)


def check_lossless(data: pa.Schema, table: pa.Schema, *, what: str = "cannot write") -> None:
    """Refuse data whose columns cannot be cast to the table's types without loss.

    The rules are the Python writer API's (:func:`txn_engine.schema_check.is_lossless`):
    widening integers and floats, integers into floats that hold them exactly, the string,
    binary and list families in either width, decimals that keep every digit, finer
    timestamp units (zone or no zone alike), dates, dictionaries of the value type, a
    ``list`` into a ``fixed_size_list`` (a wrong length fails the task, it is never padded
    or cut), structs field by field with the same field names. Raises SchemaMismatchError (an
    InvalidOperationError; ``column``, ``expected``, ``actual``) naming the column and both
    types, e.g. a string column appended to an int64 one.
    """
    for field in table:
        index = data.get_field_index(field.name)
        if index < 0:
            continue
        source = data.field(index).type
        if not is_lossless(source, field.type, same_struct_fields=True):
            raise SchemaMismatchError(
                f"{what}: column {field.name!r} is {source} in the data but {field.type} in "
                "the table, and casting would lose or reinterpret values; cast the column "
                "in the DataFrame first (or overwrite the table to change its type)",
                column=field.name,
                expected=str(field.type),
                actual=str(source),
            )


def _lease_read_version(storage: Storage, read_version: int) -> str | None:
    """Lease ``read_version`` for the job (not renewed: commit and abort run in other
    Python workers, which release it by path). None when there is nothing to pin."""
    from txn_engine.errors import DatasetNotFoundError, VersionNotFoundError
    from txn_engine.leases import Lease

    if read_version <= 0:
        return None
    try:
        held = Lease(
            storage,
            read_version,
            ttl=WRITE_LEASE_SECONDS,
            owner="txn_engine.spark write",
            renew_in_background=False,
        )
    except (VersionNotFoundError, DatasetNotFoundError):
        return None  # already gone: the commit reports it
    return held.path
