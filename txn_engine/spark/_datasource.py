"""The ``txn_lance`` PySpark data source (batch writes).

``register(spark)`` once per session, then::

    df.write.format("txn_lance").mode("append").save(uri)
    df.write.format("txn_lance").mode("overwrite").option("max_rows_per_file", 100_000).save(uri)

Spark calls :meth:`TxnLanceDataSource.writer` on the driver when it plans the write (the
read version is pinned there), :meth:`TxnLanceWriter.write` in every task, and
:meth:`TxnLanceWriter.commit` or :meth:`TxnLanceWriter.abort` on the driver, in a separate
Python worker process that receives the pickled writer.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from collections.abc import Iterator
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

from txn_engine.errors import InvalidOperationError
from txn_engine.spark._options import parse_write_options
from txn_engine.spark._write import FragmentCollector

__all__ = ["DATA_SOURCE_NAME", "TxnLanceCommitMessage", "TxnLanceDataSource", "TxnLanceWriter"]

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
    """Writes a DataFrame into a Lance dataset through txn_engine (see ``docs/spark.md``).

    The dataset URI is the ``save()`` path. Options are parsed by
    :func:`txn_engine.spark._options.parse_write_options`; unknown options are rejected.
    """

    @classmethod
    def name(cls) -> str:
        return DATA_SOURCE_NAME

    def writer(self, schema: Any, overwrite: bool) -> TxnLanceWriter:
        options = dict(self.options)
        uri = options.pop("path", None)
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


def _ensure_log_output() -> None:
    """Spark's Python workers configure no logging; make the commit summary visible in
    the driver's log (the worker's stderr) unless the application configured handlers."""
    logger = logging.getLogger("txn_engine.spark")
    if not logger.hasHandlers():
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


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
        _ensure_log_output()
        self.collector.commit(self._fragments(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _ensure_log_output()
        self.collector.abort(self._fragments(messages))
