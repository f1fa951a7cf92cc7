"""Reading a Lance table incrementally: ``spark.readStream.format("txn_lance")`` and the
change feed (``option("readChangeFeed", "true")``, batch and streaming).

Offsets are table versions: ``{"version": v}`` means every version up to ``v`` has
been delivered. A new query without a starting option begins with
``{"version": L, "snapshot": true}``: its first micro-batch is the table as of version
``L`` (the latest when the query first started), the later ones the versions after it.
A micro-batch ``(start, end]`` reads, for each version in it:

* a plain stream: the rows the version added (an Append's fragments, an Update's new
  fragments); compaction, index and metadata versions are skipped; a version that
  deletes or rewrites rows raises NonAppendVersionError (or, with
  ``skipChangeCommits``, is skipped);
* a change feed: the version's row changes (``txn_engine.changes``).

The driver-side reader (one long-lived Python worker per query) holds a lease on the
last committed offset's version, so cleanup keeps every version a replay may read;
Spark replays a micro-batch from its offset log after a restart and the versions are
immutable, so a replay reads the same rows. Executors read with pylance.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import attrs
import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxFiles,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from txn_engine.changes import (
    NO_ROW_CHANGE,
    RowSelection,
    VersionChanges,
    feed_schema,
    live_rows,
    pin_history,
    plan_version,
    read_version_changes,
)
from txn_engine.errors import (
    HistoryUnavailableError,
    InvalidOperationError,
    NonAppendVersionError,
    VersionNotFoundError,
)
from txn_engine.leases import Lease
from txn_engine.spark._feed_options import FeedOptions, parse_feed_options
from txn_engine.spark._read import (
    arrow_to_spark_schema,
    parse_timestamp,
    scan_fragments,
    spark_arrow_schema,
)
from txn_engine.storage import open_storage
from txn_engine.storage.base import Storage

__all__ = [
    "ChangeFeedReader",
    "FeedPartition",
    "StreamPartition",
    "TxnLanceStreamReader",
    "feed_spark_schema",
    "resolve_feed_uri",
]

_OWNER = "txn_engine.spark stream read"
_SCHEMA_OPS = frozenset({"merge", "project", "data_replacement"})
#: planned versions kept by a stream reader (versions past the committed offset)
_PLANS_KEPT = 4096


def resolve_feed_uri(uri: str, options: FeedOptions) -> str:
    """The root of the table the read follows: ``uri``, or its branch's root."""
    if options.branch is None:
        return uri
    from txn_engine.format.refs import read_branch

    found = read_branch(open_storage(uri, options.txn_storage_options), options.branch)
    return f"{uri.rstrip('/')}/{found.path}"


def _table_columns(storage: Storage, options: FeedOptions, version: int | None) -> pa.Schema:
    from txn_engine.format.io import read_manifest
    from txn_engine.format.schema import fields_to_arrow

    _, manifest_file = read_manifest(storage, version)
    schema = fields_to_arrow(list(manifest_file.manifest.fields), {})
    if options.columns is None:
        return schema
    missing = [c for c in options.columns if schema.get_field_index(c) < 0]
    if missing:
        raise InvalidOperationError(
            f"option 'columns': {missing} not in the table (columns: {schema.names})"
        )
    return pa.schema([schema.field(c) for c in options.columns])


def feed_spark_schema(uri: str, raw: dict[str, str]) -> tuple[Any, pa.Schema]:
    """(Spark schema, Arrow table columns) of a streaming or change-feed read: the
    table's columns (or ``columns``) as the read starts (the version before the starting
    version; without one, the latest), plus the change columns with ``readChangeFeed``."""
    from txn_engine.format.io import latest_version

    options = parse_feed_options(raw)
    storage = open_storage(resolve_feed_uri(uri, options), options.txn_storage_options)
    first = _starting_version(storage, options)
    at = None if first is None else min(max(1, first - 1), latest_version(storage).version)
    columns = _table_columns(storage, options, at)
    shown = feed_schema(columns) if options.read_change_feed else columns
    return arrow_to_spark_schema(shown), columns


def _version_at(storage: Storage, timestamp: str, *, at_or_after: bool) -> int:
    """The first version committed at or after ``timestamp`` (or the last one at or
    before it); VersionNotFoundError when there is none."""
    from txn_engine.changes import manifest_nanos
    from txn_engine.format.io import read_manifest_entry
    from txn_engine.format.naming import list_versions

    cutoff = parse_timestamp(timestamp)
    entries = list_versions(storage)
    for entry in entries if at_or_after else reversed(entries):
        try:
            nanos = manifest_nanos(read_manifest_entry(storage, entry).manifest)
        except VersionNotFoundError:
            continue
        if nanos is not None and (nanos >= cutoff if at_or_after else nanos <= cutoff):
            return entry.version
    where = "at or after" if at_or_after else "at or before"
    raise VersionNotFoundError(f"{storage.uri}: no version was committed {where} {timestamp}")


def _starting_version(storage: Storage, options: FeedOptions) -> int | None:
    """The first version a read delivers the changes of; None: a snapshot first."""
    from txn_engine.format.io import latest_version, resolve_version
    from txn_engine.spark._read import read_tag

    if options.starting_version == "latest":
        return latest_version(storage).version + 1
    if isinstance(options.starting_version, int):
        return options.starting_version
    if options.starting_timestamp is not None:
        return _version_at(storage, options.starting_timestamp, at_or_after=True)
    if options.starting_tag is not None:
        return resolve_version(storage, read_tag(storage, options.starting_tag)).version
    return None


# --------------------------------------------------------------------------- partitions


@dataclasses.dataclass(frozen=True)
class StreamPartition(InputPartition):
    """Rows to stream: ``(version, fragment ids)`` pairs, each fragment's live rows read
    at that version."""

    items: tuple[tuple[int, tuple[int, ...]], ...]


@dataclasses.dataclass(frozen=True)
class FeedPartition(InputPartition):
    """The change rows of one planned version."""

    changes: VersionChanges


def _group(
    pieces: Sequence[tuple[int, RowSelection]], rows_per_partition: int
) -> list[StreamPartition]:
    """``(version, selection)`` pieces in order, grouped into partitions of about
    ``rows_per_partition`` rows."""
    out: list[StreamPartition] = []
    current: list[tuple[int, list[int]]] = []
    rows = 0
    for version, selection in pieces:
        if current and rows + selection.rows > rows_per_partition:
            out.append(StreamPartition(tuple((v, tuple(f)) for v, f in current)))
            current, rows = [], 0
        if current and current[-1][0] == version:
            current[-1][1].append(selection.fragment_id)
        else:
            current.append((version, [selection.fragment_id]))
        rows += selection.rows
    if current:
        out.append(StreamPartition(tuple((v, tuple(f)) for v, f in current)))
    return out


# --------------------------------------------------------------------------- the stream


def _non_append(changes: VersionChanges) -> NonAppendVersionError:
    what = (
        "changes the schema"
        if changes.operation in _SCHEMA_OPS
        else f"deletes or rewrites rows ({changes.rows_removed} removed)"
    )
    return NonAppendVersionError(
        f"version {changes.version} ({changes.operation}) {what}, which a stream of added "
        "rows cannot deliver",
        version=changes.version,
        operation=changes.operation,
        remedy="restart the query with .option('skipChangeCommits', 'true') to skip such "
        "versions (their removed rows are then not seen downstream), or read the change "
        "feed with .option('readChangeFeed', 'true')",
    )


def appended(changes: VersionChanges, *, skip_changes: bool) -> list[RowSelection] | None:
    """The selections a plain stream reads of a version: its added rows (an Update's
    new fragments); [] for a version that changes no row; None for a non-append
    version that is skipped. Raises NonAppendVersionError for one that is not."""
    if changes.operation in _SCHEMA_OPS:
        pass  # a schema change ends a plain stream (or is skipped), whatever it changed
    elif changes.operation in NO_ROW_CHANGE or (not changes.removed and not changes.added):
        return []
    elif not changes.removed and changes.operation != "restore":
        return list(changes.added)  # an Append, or an Overwrite that creates the table
    if changes.operation == "update" and not changes.in_place:
        removed = {s.fragment_id for s in changes.removed}
        new = [s for s in changes.added if s.offsets is None and s.fragment_id not in removed]
        if len(new) == len(changes.added):
            return new
    if skip_changes:
        return None
    raise _non_append(changes)


@attrs.define
class _Driver:
    """The driver-side state of one query (not pickled to the executors)."""

    storage: Storage
    lease: Lease | None = None
    plans: dict[int, VersionChanges] = attrs.field(factory=dict)
    manifests: dict[int, Any] = attrs.field(factory=dict)
    target: int | None = None


class TxnLanceStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``readStream.format("txn_lance")``; see the module docstring. Constructed on the
    driver and pickled to the executors, so ``__init__`` does no I/O."""

    def __init__(self, uri: str, options: FeedOptions, schema: Any, columns: pa.Schema):
        self.uri = uri
        self.options = options
        self.spark_schema = schema
        self.columns = columns
        self._driver: _Driver | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_driver"] = None  # leases and caches stay on the driver
        return state

    # ---------------------------------------------------------------- driver state

    def _state(self) -> _Driver:
        if self._driver is None:
            self._driver = _Driver(open_storage(self.uri, self.options.txn_storage_options))
        return self._driver

    def _pin(self, version: int) -> None:
        """Hold a lease on ``version`` (every later version is kept with it)."""
        state = self._state()
        version = max(1, version)
        if state.lease is not None and state.lease.version == version and not state.lease.expired:
            return
        old = state.lease
        state.lease = pin_history(state.storage, version, owner=_OWNER, ttl=self.options.lease_ttl)
        if old is not None:
            old.release()

    def _plan(self, version: int) -> VersionChanges:
        state = self._state()
        found = state.plans.get(version)
        if found is None:
            from txn_engine.format.io import read_manifest

            try:
                current = read_manifest(state.storage, version)[1].manifest
                before = state.manifests.pop(version - 1, None)
                found = plan_version(
                    state.storage, version, self.columns, before=before, after=current
                )
                state.manifests = {version: current}  # the next version's "before"
            except VersionNotFoundError as exc:
                raise HistoryUnavailableError(
                    f"{self.uri}: version {version} is gone (cleaned up?): the stream cannot "
                    "continue without a gap; start a new query (new checkpoint) from a "
                    "later version",
                    conflicting_version=version,
                ) from exc
            if len(state.plans) >= _PLANS_KEPT:
                state.plans.pop(min(state.plans))
            state.plans[version] = found
        return found

    def _latest(self) -> int:
        from txn_engine.format.io import latest_version

        state = self._state()
        latest = latest_version(state.storage).version
        return latest if state.target is None else min(latest, state.target)

    # ---------------------------------------------------------------- Spark's calls

    def initialOffset(self) -> dict[str, Any]:
        from txn_engine.format.io import latest_version

        state = self._state()
        first = _starting_version(state.storage, self.options)
        latest = latest_version(state.storage).version
        if first is None:
            return {"version": latest, "snapshot": True}
        if first > latest + 1:
            raise InvalidOperationError(
                f"{self.uri}: the stream starts at version {first}, after the latest "
                f"version {latest}"
            )
        return {"version": first - 1}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_rows_per_trigger is not None:
            return ReadMaxRows(self.options.max_rows_per_trigger)
        if self.options.max_versions_per_trigger is not None:
            # Spark has no "versions" limit for Python sources: a file count stands in
            return ReadMaxFiles(self.options.max_versions_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._state().target = self._latest()

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return {"version": self._latest()}

    def _limits(self, limit: ReadLimit) -> tuple[int | None, int | None]:
        if isinstance(limit, ReadAllAvailable):
            return None, None
        rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        versions = self.options.max_versions_per_trigger
        if isinstance(limit, ReadMaxFiles):
            versions = limit.max_files
        return rows, versions

    def _rows(self, changes: VersionChanges) -> int:
        if self.options.read_change_feed:
            return changes.rows_removed + changes.rows_added
        chosen = appended(changes, skip_changes=True)
        return sum(s.rows for s in chosen or ())

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The end of the next micro-batch: whole versions after ``start`` within the
        limit (at least one); a non-append version ends the batch before it (it raises
        when it is the first)."""
        self._pin(int(start["version"]))
        if start.get("snapshot"):
            return {"version": int(start["version"])}
        max_rows, max_versions = self._limits(limit)
        end, rows = int(start["version"]), 0
        for version in range(end + 1, self._latest() + 1):
            changes = self._plan(version)
            if not self.options.read_change_feed:
                try:
                    appended(changes, skip_changes=self.options.skip_change_commits)
                except NonAppendVersionError:
                    if end > int(start["version"]):
                        break  # deliver what comes before it first
                    raise
            size = self._rows(changes)
            if end > int(start["version"]) and max_rows is not None and rows + size > max_rows:
                break
            end, rows = version, rows + size
            if max_versions is not None and end - int(start["version"]) >= max_versions:
                break
        state = self._state()
        if state.target is not None and end == int(start["version"]) >= state.target:
            # Trigger.AvailableNow is done (Spark does not call stop() reliably): a
            # restart pins again
            self.stop()
        return {"version": end}

    def _snapshot(self, version: int) -> list[StreamPartition]:
        from txn_engine.format.io import read_manifest

        _, manifest_file = read_manifest(self._state().storage, version)
        from txn_engine.changes import check_columns

        check_columns(manifest_file.manifest, self.columns, "snapshot")
        pieces = [
            (version, RowSelection(int(f.id), None, live_rows(f)))
            for f in sorted(manifest_file.manifest.fragments, key=lambda f: f.id)
        ]
        return _group(pieces, self.options.rows_per_partition)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        self._pin(int(start["version"]))
        if start.get("snapshot"):
            if self.options.read_change_feed:
                return [FeedPartition(_snapshot_changes(self._state().storage, start["version"]))]
            return self._snapshot(int(start["version"]))
        versions = range(int(start["version"]) + 1, int(end["version"]) + 1)
        if self.options.read_change_feed:
            return [FeedPartition(self._plan(v)) for v in versions]
        pieces: list[tuple[int, RowSelection]] = []
        for version in versions:
            chosen = appended(self._plan(version), skip_changes=self.options.skip_change_commits)
            pieces.extend((version, s) for s in chosen or ())
        return _group(pieces, self.options.rows_per_partition)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from _read_partition(
            self.uri, self.options, self.spark_schema, self.columns, partition
        )

    def commit(self, end: dict[str, Any]) -> None:
        """Spark will not ask for versions up to ``end`` again: move the lease there."""
        self._pin(int(end["version"]))
        state = self._state()
        for version in [v for v in state.plans if v <= int(end["version"])]:
            del state.plans[version]

    def stop(self) -> None:
        if self._driver is not None and self._driver.lease is not None:
            self._driver.lease.release()
            self._driver.lease = None


def _snapshot_changes(storage: Storage, version: int) -> VersionChanges:
    """The table at ``version`` as one version of inserts (a change feed's snapshot)."""
    from txn_engine.changes import manifest_nanos
    from txn_engine.format.io import read_manifest

    _, manifest_file = read_manifest(storage, version)
    manifest = manifest_file.manifest
    added = tuple(
        RowSelection(int(f.id), None, live_rows(f))
        for f in sorted(manifest.fragments, key=lambda f: f.id)
    )
    return VersionChanges(int(version), manifest_nanos(manifest), "snapshot", (), added)


def _cast(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    if batch.schema.equals(target):
        return batch
    return pa.RecordBatch.from_arrays(
        [batch.column(f.name).cast(f.type) for f in target], schema=target
    )


def _read_partition(
    uri: str, options: FeedOptions, spark_schema: Any, columns: pa.Schema, partition: Any
) -> Iterator[pa.RecordBatch]:
    """The Arrow batches of one stream or feed partition, in Spark's schema."""
    target = spark_arrow_schema(spark_schema)
    if isinstance(partition, FeedPartition):
        for batch in read_version_changes(
            uri,
            partition.changes,
            columns,
            lance_storage_options=options.pylance_storage_options,
            batch_rows=options.batch_size or 8192,
        ):
            yield _cast(batch, target)
        return
    assert isinstance(partition, StreamPartition)
    for version, fragment_ids in partition.items:
        yield from scan_fragments(
            uri,
            version,
            fragment_ids,
            target=target,
            batch_size=options.batch_size,
            lance_storage_options=options.pylance_storage_options,
        )


# --------------------------------------------------------------------------- batch feed


class ChangeFeedReader(DataSourceReader):
    """``spark.read.format("txn_lance").option("readChangeFeed", "true")``: one partition
    per version of ``startingVersion`` (default 1) to ``endingVersion`` (default: the
    latest), planned on the driver when the DataFrame is read."""

    def __init__(self, uri: str, options: FeedOptions, schema: Any, columns: pa.Schema):
        self.uri = uri
        self.options = options
        self.spark_schema = schema
        self.columns = columns
        storage = open_storage(uri, options.txn_storage_options)
        self.plans = _plan_range(storage, options, columns)

    def partitions(self) -> Sequence[InputPartition]:
        return [FeedPartition(p) for p in self.plans] or [StreamPartition(())]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from _read_partition(
            self.uri, self.options, self.spark_schema, self.columns, partition
        )


def _plan_range(storage: Storage, options: FeedOptions, columns: pa.Schema) -> list[VersionChanges]:
    """Every version's plan of a batch change feed, under a lease of ``lease_ttl``
    seconds (not renewed: the planning worker is short-lived) on the version before the
    range, so cleanup keeps what the executors read."""
    from txn_engine.changes import check_range, require_history

    first = _starting_version(storage, options) or 1
    last = options.ending_version
    if options.ending_timestamp is not None:
        last = _version_at(storage, options.ending_timestamp, at_or_after=False)
    first, last = check_range(storage, first, last)
    pin_history(storage, max(1, first - 1), owner=_OWNER, ttl=float(options.lease_ttl), renew=False)
    require_history(storage, max(1, first - 1), last)
    return [plan_version(storage, v, columns) for v in range(first, last + 1)]
