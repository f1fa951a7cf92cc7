"""The executor side of a Spark write: Lance data files written by pylance, each marked as
the write's (under its staging record, see ``_staging``) as soon as it is complete.

A task writes only while the write is open (its staging record exists) and, after marking
its files, fails if the write was committed or aborted meanwhile (a straggling attempt):
the driver's commit or abort then finds every file a task produced.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]

from txn_engine.errors import InvalidOperationError
from txn_engine.spark import _staging
from txn_engine.spark._fragments import FragmentLike, _file_names, _fragment_json
from txn_engine.spark._options import WriteOptions
from txn_engine.storage.base import Storage

__all__ = ["conform_batch", "record_marked_fragments", "write_marked_fragments"]


def _chain(first: pa.RecordBatch, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield first
    yield from rest


def conform_batch(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with ``schema``: columns picked by name, in the schema's order, cast where
    the types differ. Raises InvalidOperationError for a missing column or a null in a
    non-nullable one."""
    if batch.schema.equals(schema):
        return batch
    columns = []
    for field in schema:
        index = batch.schema.get_field_index(field.name)
        if index < 0:
            raise InvalidOperationError(f"the data has no column {field.name!r}")
        column = batch.column(index)
        if not column.type.equals(field.type):
            column = column.cast(field.type)
        if not field.nullable and column.null_count:
            raise InvalidOperationError(
                f"column {field.name!r} is not nullable but the data has "
                f"{column.null_count} null(s)"
            )
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _check_open(storage: Storage, *, write_key: str, write_id: str, uri: str) -> None:
    """Refuse to write for a write that was already committed or aborted."""
    if not storage.exists(_staging.record_path(write_key)):
        raise InvalidOperationError(
            f"write {write_id} to {uri} was already committed or aborted (or "
            "was not planned with FragmentCollector.plan); this task writes nothing"
        )


def _check_still_open(
    storage: Storage, names: Iterable[str], *, write_key: str, write_id: str, uri: str
) -> None:
    """After marking: if the write was finalised meanwhile (a straggling attempt),
    remove this attempt's files and fail the attempt."""
    if _staging.task_finished(storage, write_key, names):
        raise InvalidOperationError(
            f"write {write_id} to {uri} was committed or aborted while this "
            "task attempt was writing; its files were removed"
        )


def _lance_arguments(options: WriteOptions, *, append: bool, progress: Any) -> dict[str, Any]:
    """The keyword arguments of pylance's ``write_fragments`` for ``options``: ``append``
    writes the files with the table's field ids (``mode="append"``), otherwise as a new
    schema; ``progress`` is told of every completed file."""
    kwargs: dict[str, Any] = {
        "mode": "append" if append else "overwrite",
        "max_rows_per_file": options.max_rows_per_file,
        "progress": progress,
    }
    if options.max_rows_per_group is not None:
        kwargs["max_rows_per_group"] = options.max_rows_per_group
    if options.max_bytes_per_file is not None:
        kwargs["max_bytes_per_file"] = options.max_bytes_per_file
    if options.data_storage_version is not None:
        kwargs["data_storage_version"] = options.data_storage_version
    if options.lance_storage_options:
        kwargs["storage_options"] = dict(options.lance_storage_options)
    return kwargs


def write_marked_fragments(
    batches: Iterable[pa.RecordBatch],
    *,
    storage: Storage,
    uri: str,
    schema: pa.Schema,
    options: WriteOptions,
    write_key: str,
    write_id: str,
    append: bool,
    conform: Callable[[pa.RecordBatch], pa.RecordBatch],
    check: Callable[[pa.RecordBatch], None],
) -> list[str]:
    """Write the rows of ``batches`` (each ``conform``-ed to ``schema``, then ``check``-ed)
    as Lance data files of ``uri`` (a new fragment every ``max_rows_per_file`` rows; see
    :func:`_lance_arguments` for ``append``) and return the fragments' metadata as JSON
    strings. Every file is marked under ``write_key`` as soon as it is complete; nothing is
    written (``[]``) when ``batches`` has no rows. Raises InvalidOperationError when the
    write ``write_id`` is not open, or was finalised while this task wrote, and the typed
    error ``check`` raised (not pylance's wrapping of it)."""
    import lance
    from lance.progress import FragmentWriteProgress

    class _Marker(FragmentWriteProgress):
        def begin(self, fragment: Any, **kwargs: Any) -> None:
            return None

        def complete(self, fragment: Any, **kwargs: Any) -> None:
            _staging.put_markers(storage, write_key, _file_names(fragment.to_json()))

    iterator = iter(batches)
    first = next(iterator, None)
    while first is not None and first.num_rows == 0:
        first = next(iterator, None)
    if first is None:
        return []

    refused: list[InvalidOperationError] = []

    def conformed() -> Iterator[pa.RecordBatch]:
        assert first is not None
        for batch in _chain(first, iterator):
            if not batch.num_rows:
                continue
            batch = conform(batch)
            try:
                check(batch)
            except InvalidOperationError as exc:
                refused.append(exc)  # pylance re-raises it wrapped: keep the typed one
                raise
            yield batch

    reader = pa.RecordBatchReader.from_batches(schema, conformed())
    kwargs = _lance_arguments(options, append=append, progress=_Marker())
    _check_open(storage, write_key=write_key, write_id=write_id, uri=uri)
    try:
        fragments = lance.fragment.write_fragments(reader, uri, schema=schema, **kwargs)
    except Exception:
        if refused:
            raise refused[0] from None
        raise
    # the last file of a call is not reported through ``complete``
    return record_marked_fragments(
        storage, fragments, write_key=write_key, write_id=write_id, uri=uri
    )


def record_marked_fragments(
    storage: Storage,
    fragments: Iterable[FragmentLike],
    *,
    write_key: str,
    write_id: str,
    uri: str,
) -> list[str]:
    """Mark the data files of ``fragments`` under ``write_key`` and return the fragments'
    metadata as JSON strings. Raises InvalidOperationError (after removing this attempt's
    files) when the write ``write_id`` was committed or aborted meanwhile."""
    out = []
    names: list[str] = []
    for fragment in fragments:
        data = _fragment_json(fragment)
        _staging.put_markers(storage, write_key, _file_names(data))
        names.extend(_file_names(data))
        out.append(json.dumps(data))
    _check_still_open(storage, names, write_key=write_key, write_id=write_id, uri=uri)
    return out
