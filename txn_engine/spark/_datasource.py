"""The ``txn_lance`` PySpark data source (batch reads and writes, and a streaming sink).

``register(spark)`` once per session, then::

    df.write.format("txn_lance").mode("append").save(uri)
    df.write.format("txn_lance").mode("overwrite").option("max_rows_per_file", 100_000).save(uri)
    spark.read.format("txn_lance").option("version", 3).load(uri)
    df.writeStream.format("txn_lance").option("checkpointLocation", ckpt).start(uri)

Reads: :meth:`TxnLanceDataSource.schema` pins the version when the DataFrame is created
(``load()``), :meth:`TxnLanceDataSource.reader` reads that version's manifest once and
makes the partitions; :meth:`TxnLanceReader.read` scans on the executors.

Spark calls :meth:`TxnLanceDataSource.writer` on the driver when it plans the write (the
read version is pinned there), :meth:`TxnLanceWriter.write` in every task, and
:meth:`TxnLanceWriter.commit` or :meth:`TxnLanceWriter.abort` on the driver, in a separate
Python worker process that receives the pickled writer.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterator
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)

from txn_engine.errors import InvalidOperationError
from txn_engine.spark import _filters
from txn_engine.spark._log_output import ensure_log_output
from txn_engine.spark._namespace import namespace_path
from txn_engine.spark._options import ReadOptions, parse_read_options, parse_write_options
from txn_engine.spark._read import (
    ReadPlan,
    arrow_to_spark_schema,
    group_fragments,
    pin_read_version,
    plan_read,
    scan_fragments,
    spark_arrow_schema,
)
from txn_engine.spark._write import FragmentCollector

__all__ = [
    "DATA_SOURCE_NAME",
    "TxnLanceCommitMessage",
    "TxnLanceDataSource",
    "TxnLanceFilteringReader",
    "TxnLanceInputPartition",
    "TxnLanceReader",
    "TxnLanceWriter",
]

DATA_SOURCE_NAME = "txn_lance"
_log = logging.getLogger("txn_engine.spark")


@dataclasses.dataclass(frozen=True)
class TxnLanceCommitMessage(WriterCommitMessage):
    """What one successful task sends to the driver: its fragments (JSON metadata)."""

    fragments: tuple[str, ...]
    partition_id: int
    attempt: int
    rows: int


def _spark_to_arrow(schema: Any) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    result: pa.Schema = to_arrow_schema(schema, timezone="UTC", prefers_large_types=False)
    return result


class TxnLanceDataSource(DataSource):
    """Reads a Lance dataset into a DataFrame, and writes a DataFrame into one through
    txn_engine (see ``docs/spark.md``).

    The dataset URI is the ``load()`` / ``save()`` path. Options are parsed by
    :func:`txn_engine.spark._options.parse_read_options` /
    :func:`~txn_engine.spark._options.parse_write_options`; unknown options are rejected.
    """

    #: The version :meth:`schema` pinned (Spark pickles the data source after calling it,
    #: so :meth:`reader` sees it); None until then.
    pinned_version: int | None = None
    #: The Arrow table columns of a stream or change feed, fixed by :meth:`schema`.
    feed_columns: pa.Schema | None = None

    @classmethod
    def name(cls) -> str:
        return DATA_SOURCE_NAME

    def _read_args(self) -> tuple[str, ReadOptions]:
        options = dict(self.options)
        uri = options.pop("path", None) or namespace_path(options)
        if not uri:
            raise InvalidOperationError(
                'txn_lance needs the dataset URI: spark.read.format("txn_lance").load(uri)'
            )
        return uri, parse_read_options(options)

    def _feed_uri(self) -> tuple[str, dict[str, str]]:
        options = dict(self.options)
        uri = options.get("path")
        if not uri:
            raise InvalidOperationError(
                'txn_lance needs the dataset URI: spark.readStream.format("txn_lance").load(uri)'
            )
        return uri, options

    def schema(self) -> Any:
        """The Spark schema of the version to read (pinned here, when ``load()`` runs):
        the table schema, or the ``columns`` option's columns of it; for a change feed or
        a stream with its options, the latest version's (see ``_stream_read``)."""
        from txn_engine.spark._feed_options import is_feed_read

        if is_feed_read(self.options):
            from txn_engine.spark._stream_read import feed_spark_schema

            uri, raw = self._feed_uri()
            spark_schema, self.feed_columns = feed_spark_schema(uri, raw)
            return spark_schema
        uri, options = self._read_args()
        plan = plan_read(uri, options)
        self.pinned_version = plan.version
        pin_read_version(uri, options, plan.version)
        return arrow_to_spark_schema(_selected(plan, options))

    def _feed_reader(self, schema: Any, *, streaming: bool) -> Any:
        from txn_engine.spark._feed_options import parse_feed_options
        from txn_engine.spark._stream_read import (
            ChangeFeedReader,
            TxnLanceStreamReader,
            feed_spark_schema,
            resolve_feed_uri,
        )

        uri, raw = self._feed_uri()
        options = parse_feed_options(raw)
        if not streaming and not options.read_change_feed:
            raise InvalidOperationError(
                "startingVersion, maxRowsPerTrigger and the like are options of "
                "spark.readStream or of a change feed (readChangeFeed=true); a batch read "
                "takes version / timestamp / tag"
            )
        columns = self.feed_columns
        if columns is None:
            columns = feed_spark_schema(uri, raw)[1]
        root = resolve_feed_uri(uri, options)
        cls = TxnLanceStreamReader if streaming else ChangeFeedReader
        return cls(root, options, schema, columns)

    def streamReader(self, schema: Any) -> Any:
        """``spark.readStream.format("txn_lance").load(uri)``: versions as offsets (see
        ``txn_engine.spark._stream_read``)."""
        return self._feed_reader(schema, streaming=True)

    def reader(self, schema: Any) -> Any:
        """The reader of the pinned version (or, with a user-given schema, of the version
        the options name, resolved now): one manifest read; the partitions are fixed.
        With ``readChangeFeed``: the change feed of a range of versions."""
        from txn_engine.spark._feed_options import is_feed_read

        if is_feed_read(self.options):
            return self._feed_reader(schema, streaming=False)
        uri, options = self._read_args()
        plan = plan_read(uri, options, version=self.pinned_version)
        _check_requested(plan, schema)
        cls = TxnLanceFilteringReader if options.filter_pushdown else TxnLanceReader
        return cls(plan, schema, options)

    def writer(self, schema: Any, overwrite: bool) -> TxnLanceWriter:
        options = dict(self.options)
        uri = options.pop("path", None) or namespace_path(options)
        if not uri:
            raise InvalidOperationError(
                'txn_lance needs the dataset URI: df.write.format("txn_lance").save(uri)'
            )
        parsed = parse_write_options(options)
        collector = FragmentCollector.plan(
            uri,
            mode="overwrite" if overwrite else "append",
            schema=_spark_to_arrow(schema),
            options=parsed,
        )
        return TxnLanceWriter(collector)

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:
        """The micro-batch writer of ``writeStream.format("txn_lance")`` (append output
        mode; see ``txn_engine.spark._stream``). Spark calls this on the driver for every
        micro-batch; it reads the query id from the checkpoint (or ``streamId``)."""
        from txn_engine.spark._stream import (
            TxnLanceStreamWriter,
            parse_stream_options,
            resolve_query_id,
        )

        options = dict(self.options)
        uri = options.pop("path", None) or namespace_path(options)
        if not uri:
            raise InvalidOperationError(
                'txn_lance needs the dataset URI: df.writeStream.format("txn_lance").start(uri)'
            )
        if overwrite:
            raise InvalidOperationError(
                "txn_lance streaming supports the append output mode only (complete mode "
                "would replace the table every micro-batch)"
            )
        parsed = parse_stream_options(options)
        return TxnLanceStreamWriter(uri, _spark_to_arrow(schema), parsed, resolve_query_id(parsed))


def _selected(plan: ReadPlan, options: ReadOptions) -> pa.Schema:
    if options.columns is None:
        return plan.schema
    missing = [c for c in options.columns if plan.schema.get_field_index(c) < 0]
    if missing:
        raise InvalidOperationError(
            f"option 'columns': {missing} not in the table at version {plan.version} "
            f"(columns: {plan.schema.names})"
        )
    return pa.schema([plan.schema.field(c) for c in options.columns])


def _check_requested(plan: ReadPlan, schema: Any) -> None:
    """Every column Spark asks for exists at the pinned version with the same type."""
    for field in schema.fields:
        index = plan.schema.get_field_index(field.name)
        if index < 0:
            raise InvalidOperationError(
                f"column {field.name!r} is not in {plan.uri} at version {plan.version} "
                f"(columns: {plan.schema.names})"
            )
        ours = arrow_to_spark_schema(pa.schema([plan.schema.field(index)])).fields[0].dataType
        if ours != field.dataType:
            raise InvalidOperationError(
                f"column {field.name!r} is {ours.simpleString()} in {plan.uri} at version "
                f"{plan.version}, but the schema asks for {field.dataType.simpleString()}"
            )


@dataclasses.dataclass(frozen=True)
class TxnLanceInputPartition(InputPartition):
    """One Spark input partition: fragment ids of the pinned version."""

    fragment_ids: tuple[int, ...]


class TxnLanceReader(DataSourceReader):
    """Scans one pinned version; pickled to the executors with its plan."""

    def __init__(self, plan: ReadPlan, schema: Any, options: ReadOptions) -> None:
        self.plan = plan
        self.options = options
        self.columns = tuple(schema.fieldNames())
        self.spark_schema = schema
        self.filter: str | None = None

    def partitions(self) -> list[TxnLanceInputPartition]:
        groups = group_fragments(self.plan.fragments, self.options.rows_per_partition)
        # Spark replaces an empty list with one partition of its own; return ours instead
        return [TxnLanceInputPartition(ids) for ids in groups] or [TxnLanceInputPartition(())]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, TxnLanceInputPartition)
        yield from scan_fragments(
            self.plan.uri,
            self.plan.version,
            partition.fragment_ids,
            target=spark_arrow_schema(self.spark_schema),
            filter=self.filter,
            batch_size=self.options.batch_size,
            lance_storage_options=self.options.lance_storage_options
            or {k: str(v) for k, v in self.options.storage_options.items()},
        )


class TxnLanceFilteringReader(TxnLanceReader):
    """A :class:`TxnLanceReader` that takes Spark's filters (pushed to pylance's scan).

    Spark calls :meth:`pushFilters` only when ``spark.sql.python.filterPushdown.enabled``
    is true (``register`` sets it) and refuses a reader with it otherwise; the
    ``filter_pushdown=false`` read option selects the plain reader."""

    def pushFilters(self, filters: list[Any]) -> list[Any]:
        """Keep the filters Lance evaluates identically (see ``txn_engine.spark._filters``)
        for the scan; return the others for Spark to apply."""
        expression, rest = _filters.translate(filters, self.plan.schema)
        self.filter = expression
        return rest


class TxnLanceWriter(DataSourceArrowWriter):
    """The per-write object Spark pickles to the tasks and to the commit worker."""

    def __init__(self, collector: FragmentCollector) -> None:
        self.collector = collector

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TxnLanceCommitMessage:
        from pyspark import TaskContext

        context = TaskContext.get()
        partition = context.partitionId() if context is not None else -1
        attempt = context.attemptNumber() if context is not None else 0
        fragments = self.collector.write_batches(iterator)
        rows = sum(int(json.loads(text).get("physical_rows") or 0) for text in fragments)
        return TxnLanceCommitMessage(tuple(fragments), partition, attempt, rows)

    @staticmethod
    def _fragments(messages: list[WriterCommitMessage | None]) -> list[str]:
        out: list[str] = []
        for message in messages:
            if isinstance(message, TxnLanceCommitMessage):
                out.extend(message.fragments)
            elif message is not None:
                raise InvalidOperationError(
                    f"unexpected commit message type {type(message).__name__}"
                )
        return out

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        ensure_log_output()
        self.collector.commit(self._fragments(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        ensure_log_output()
        self.collector.abort(self._fragments(messages))
