"""Reading a Lance dataset from Spark: pin a version, split it into partitions, scan.

This module does not import pyspark at import time; it is the engine behind
``spark.read.format("txn_lance")``:

1. **resolve** (driver): :func:`resolve_version` turns the ``version`` / ``timestamp`` /
   ``tag`` options (or none: the latest version) into one version number;
2. **plan** (driver): :func:`plan_read` reads that version's manifest once and keeps what
   the scan needs: the table schema and each fragment's id and live row count;
   :func:`group_fragments` makes the Spark partitions (one per fragment, small fragments
   grouped by rows);
3. **scan** (executors): :func:`scan_fragments` opens the pinned version with pylance and
   reads the partition's fragments (deletion vectors applied by pylance), with the
   requested columns and the pushed-down filter, as Arrow batches of the Spark schema.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import attrs
import pyarrow as pa  # type: ignore[import-untyped]

from txn_engine import session
from txn_engine.errors import (
    InvalidOperationError,
    VersionNotFoundError,
)
from txn_engine.spark._options import ReadOptions
from txn_engine.storage import open_storage
from txn_engine.storage.base import Storage

__all__ = [
    "ReadPlan",
    "arrow_to_spark_schema",
    "group_fragments",
    "parse_timestamp",
    "plan_read",
    "read_tag",
    "pin_read_version",
    "resolve_version",
    "scan_fragments",
    "spark_arrow_schema",
]


@attrs.frozen
class ReadPlan:
    """One pinned version of a dataset, as the Spark scan needs it (picklable).

    ``schema`` is the table schema at ``version``; ``fragments`` holds ``(fragment id,
    live rows)`` per fragment, sorted by id (live rows as the manifest records them:
    physical rows minus the rows its deletion file declares)."""

    uri: str
    version: int
    schema: pa.Schema
    fragments: tuple[tuple[int, int], ...]

    @property
    def rows(self) -> int:
        return sum(rows for _, rows in self.fragments)


def parse_timestamp(text: str) -> int:
    """A ``timestamp`` option as integer nanoseconds since the epoch.

    Accepts ISO 8601 (``2026-11-22T18:00:00+00:00``, ``2026-11-22 18:00:00``; without an
    offset it is UTC) or a number of seconds since the epoch."""
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return round(seconds * 1_000_000) * 1000
    try:
        moment = _dt.datetime.fromisoformat(text.strip())
    except ValueError as exc:
        raise InvalidOperationError(
            f"option 'timestamp' must be ISO 8601 or seconds since the epoch, got {text!r}"
        ) from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_dt.UTC)
    delta = moment - _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


def read_tag(storage: Storage, tag: str) -> int:
    """The version a pylance tag (``_refs/tags/<tag>.json``) points at.

    Raises VersionNotFoundError when the tag does not exist, InvalidOperationError for an
    invalid tag name or a tag of a branch (reads are of the main branch)."""
    from txn_engine.format.refs import read_tag as read_ref

    found = read_ref(storage, tag)
    if found.branch not in (None, "", "main"):
        raise InvalidOperationError(
            f"tag {tag!r} points at version {found.version} of branch {found.branch!r}; "
            "txn_lance reads the main branch only"
        )
    return found.version


def _manifest_nanos(manifest: Any) -> int | None:
    if not manifest.HasField("timestamp"):
        return None
    ts = manifest.timestamp
    if ts.seconds == 0 and ts.nanos == 0:
        return None
    return int(ts.seconds) * 1_000_000_000 + int(ts.nanos)


def resolve_version(storage: Storage, options: ReadOptions) -> int:
    """The version a read with ``options`` shows: ``version``, the version a ``tag``
    points at, the latest version committed at or before ``timestamp``, or the latest.

    Raises DatasetNotFoundError, VersionNotFoundError (no such version or tag, or nothing
    committed at or before the timestamp), InvalidOperationError."""
    from txn_engine.format.io import latest_version, read_manifest_entry, resolve_version
    from txn_engine.format.naming import list_versions

    if options.version is not None:
        return resolve_version(storage, options.version).version
    if options.tag is not None:
        version = read_tag(storage, options.tag)
        return resolve_version(storage, version).version
    if options.timestamp is not None:
        cutoff = parse_timestamp(options.timestamp)
        for entry in reversed(list_versions(storage)):
            try:
                nanos = _manifest_nanos(read_manifest_entry(storage, entry).manifest)
            except VersionNotFoundError:
                continue  # cleaned up meanwhile: older versions may still qualify
            if nanos is not None and nanos <= cutoff:
                return entry.version
        raise VersionNotFoundError(
            f"{storage.uri}: no version was committed at or before {options.timestamp}"
        )
    return latest_version(storage).version


def pin_read_version(uri: str, options: ReadOptions, version: int) -> None:
    """Lease ``version`` for ``options.lease_ttl`` seconds (none when 0), so a concurrent
    :func:`txn_engine.retention.cleanup` keeps what the DataFrame reads. The lease is not
    renewed nor released: it expires (the driver-side planning runs in a short-lived
    Python worker, which cannot keep renewing it). A version already gone is left to the
    scan to report."""
    from txn_engine.errors import DatasetNotFoundError, VersionNotFoundError
    from txn_engine.leases import Lease

    if options.lease_ttl <= 0:
        return
    storage = open_storage(
        uri, dict(options.storage_options or options.lance_storage_options) or None
    )
    with contextlib.suppress(VersionNotFoundError, DatasetNotFoundError):
        Lease(
            storage,
            version,
            ttl=float(options.lease_ttl),
            owner="txn_engine.spark read",
            writes=False,
            renew_in_background=False,
        )


def plan_read(uri: str, options: ReadOptions, *, version: int | None = None) -> ReadPlan:
    """Pin the version to read (``version`` if given, else :func:`resolve_version`) and
    read its manifest once: schema and fragments."""
    from txn_engine.format.io import read_manifest
    from txn_engine.format.schema import fields_to_arrow

    if options.namespace and options.table_id and version is None:
        from txn_engine.spark._namespace import roll_forward

        roll_forward(
            options.namespace,
            options.table_id,
            dict(options.storage_options or options.lance_storage_options) or None,
        )
    storage = open_storage(
        uri, dict(options.storage_options or options.lance_storage_options) or None
    )
    pinned = resolve_version(storage, options) if version is None else version
    _, manifest_file = read_manifest(storage, pinned)
    manifest = manifest_file.manifest
    schema = fields_to_arrow(list(manifest.fields), dict(manifest.schema_metadata))
    fragments = []
    for fragment in manifest.fragments:
        deleted = (
            fragment.deletion_file.num_deleted_rows if fragment.HasField("deletion_file") else 0
        )
        fragments.append((int(fragment.id), max(0, int(fragment.physical_rows) - int(deleted))))
    fragments.sort()
    return ReadPlan(uri=uri, version=pinned, schema=schema, fragments=tuple(fragments))


def group_fragments(
    fragments: Sequence[tuple[int, int]], rows_per_partition: int
) -> list[tuple[int, ...]]:
    """Fragment ids per Spark partition, in fragment order: consecutive fragments are
    grouped while the group has fewer than ``rows_per_partition`` live rows; a fragment
    with at least that many rows is a partition of its own. Fragments whose rows are all
    deleted are skipped."""
    groups: list[tuple[int, ...]] = []
    current: list[int] = []
    rows = 0
    for fragment_id, live in fragments:
        if live <= 0:
            continue
        if current and rows + live > rows_per_partition:
            groups.append(tuple(current))
            current, rows = [], 0
        current.append(fragment_id)
        rows += live
        if rows >= rows_per_partition:
            groups.append(tuple(current))
            current, rows = [], 0
    if current:
        groups.append(tuple(current))
    return groups


# --------------------------------------------------------------------------- types

#: Arrow types Spark has no equivalent for, read as the nearest lossless Spark type.
_WIDENED: Mapping[pa.DataType, pa.DataType] = MappingProxyType(
    {
        pa.uint8(): pa.int16(),
        pa.uint16(): pa.int32(),
        pa.uint32(): pa.int64(),
        pa.uint64(): pa.decimal128(20, 0),
        pa.float16(): pa.float32(),
    }
)


def arrow_to_spark_schema(schema: pa.Schema) -> Any:
    """The Spark ``StructType`` of an Arrow table schema (imports pyspark).

    Unsigned integers are widened (``uint64`` to ``decimal(20,0)``), ``halffloat`` to
    ``float``. Raises InvalidOperationError naming a column Spark cannot represent (read
    the other columns with the ``columns`` option)."""
    from pyspark.sql.pandas.types import from_arrow_type
    from pyspark.sql.types import StructField, StructType

    fields = []
    for field in schema:
        arrow_type = _WIDENED.get(field.type, field.type)
        try:
            spark_type = from_arrow_type(arrow_type)
        except Exception as exc:
            raise InvalidOperationError(
                f"column {field.name!r} has the Arrow type {field.type}, which Spark cannot "
                f"represent ({exc}); leave it out with the 'columns' option"
            ) from exc
        fields.append(StructField(field.name, spark_type, nullable=True))
    return StructType(fields)


def spark_arrow_schema(spark_schema: Any) -> pa.Schema:
    """The exact Arrow schema Spark expects read batches to have for ``spark_schema``."""
    from pyspark.sql.pandas.types import to_arrow_schema

    result: pa.Schema = to_arrow_schema(spark_schema, timezone="UTC")
    return result


# --------------------------------------------------------------------------- executors

#: How many opened pylance datasets a session keeps (the least recently used one goes first).
_DATASETS_KEPT = 4


class OpenedDatasets:
    """A session's opened pylance datasets by (URI, version, storage options) (its part of a
    :class:`~txn_engine.session.Session`): on an executor, the default session of the Python
    worker, which is reused across tasks. Bounded (:data:`_DATASETS_KEPT`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.datasets: OrderedDict[tuple[str, int, str], Any] = OrderedDict()


def _open_lance(uri: str, version: int, storage_options: Mapping[str, str]) -> Any:
    """pylance's dataset at ``version``, cached per session (on an executor: per Python
    worker; workers are reused across tasks, and opening costs a manifest read)."""
    import lance

    key = (uri, version, json.dumps(dict(storage_options), sort_keys=True))
    opened = session.current().part(OpenedDatasets)
    with opened.lock:
        found = opened.datasets.get(key)
        if found is not None:
            opened.datasets.move_to_end(key)
            return found
    dataset = lance.dataset(uri, version=version, storage_options=dict(storage_options) or None)
    with opened.lock:
        opened.datasets[key] = dataset
        while len(opened.datasets) > _DATASETS_KEPT:
            opened.datasets.popitem(last=False)
    return dataset


def scan_fragments(
    uri: str,
    version: int,
    fragment_ids: Sequence[int],
    *,
    target: pa.Schema,
    filter: str | None = None,
    batch_size: int | None = None,
    lance_storage_options: Mapping[str, str] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Scan ``fragment_ids`` of ``version`` with pylance (deleted rows skipped), yielding
    batches cast to ``target`` (the columns read are ``target``'s names)."""
    dataset = _open_lance(uri, version, lance_storage_options or {})
    columns = list(target.names)
    kwargs: dict[str, Any] = {"columns": columns}
    if filter is not None:
        kwargs["filter"] = filter
    if batch_size is not None:
        kwargs["batch_size"] = batch_size
    for fragment_id in fragment_ids:
        fragment = dataset.get_fragment(fragment_id)
        if fragment is None:
            raise VersionNotFoundError(f"{uri}: fragment {fragment_id} is not in version {version}")
        for batch in fragment.to_batches(**kwargs):
            if batch.num_rows == 0:
                continue
            if not batch.schema.equals(target):
                batch = pa.RecordBatch.from_arrays(
                    [
                        batch.column(name).cast(field.type)
                        for name, field in zip(columns, target, strict=True)
                    ],
                    schema=target,
                )
            yield batch
