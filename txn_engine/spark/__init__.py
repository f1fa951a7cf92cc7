"""Spark integration: executors write Lance data files, the driver commits once.

Two ways in (see ``docs/spark.md``):

* the ``txn_lance`` PySpark data source::

      from txn_engine.spark import register
      register(spark)
      df.write.format("txn_lance").mode("append").save("s3://bucket/table.lance")

* the commit hook, for jobs that write fragments themselves::

      collector = FragmentCollector.plan(uri, mode="append", schema=arrow_schema)
      rows = df.mapInArrow(collector.map_in_arrow(), "fragment string").collect()
      collector.commit([r.fragment for r in rows])

* row-level changes run on the executors and committed once by the driver::

      from txn_engine.spark import delete, merge, update
      delete(spark, uri, "id < 10")
      update(spark, uri, set={"status": "'done'"}, where="id = 7")
      merge(updates_df, uri, on="id")   # update matched rows, insert new keys

Needs the ``spark`` extra (pyspark, pandas, pylance) for the data source; the commit hook
itself needs only pylance on the executors.
"""

from __future__ import annotations

from typing import Any

from txn_engine.spark._dml import DML_RETRY_POLICY, DmlOptions, DmlResult, delete, update
from txn_engine.spark._dml_merge import merge
from txn_engine.spark._options import WriteOptions, parse_write_options
from txn_engine.spark._staging import STAGING_DIR, SweepResult
from txn_engine.spark._write import (
    FRAGMENT_COLUMN,
    WRITE_ID_PROPERTY,
    FragmentCollector,
    SparkCommitResult,
    WriteMode,
    commit_fragments,
    find_write,
    sweep_staged_writes,
)

__all__ = [
    "DATA_SOURCE_NAME",
    "DML_RETRY_POLICY",
    "DmlOptions",
    "DmlResult",
    "FRAGMENT_COLUMN",
    "STAGING_DIR",
    "STREAMS_DIR",
    "STREAM_BATCH_ID_PROPERTY",
    "STREAM_QUERY_ID_PROPERTY",
    "WRITE_ID_PROPERTY",
    "FragmentCollector",
    "SparkCommitResult",
    "StreamProgress",
    "SweepResult",
    "TxnLanceDataSource",
    "TxnLanceStreamWriter",
    "TxnLanceWriter",
    "WriteMode",
    "WriteOptions",
    "activate",
    "commit_fragments",
    "delete",
    "find_write",
    "merge",
    "parse_write_options",
    "read_progress",
    "register",
    "sweep_staged_writes",
    "update",
]

DATA_SOURCE_NAME = "txn_lance"


def register(spark: Any, *, filter_pushdown: bool = True) -> None:
    """Register the ``txn_lance`` data source with a SparkSession (once per session).

    With ``filter_pushdown`` (the default) this also sets the session conf
    ``spark.sql.python.filterPushdown.enabled=true``, without which Spark hands Python data
    sources no filters (and refuses readers that accept them); reads then push comparisons,
    IN, IS NULL, ... on primitive columns into pylance's scan.
    """
    from txn_engine.spark._datasource import TxnLanceDataSource

    spark.dataSource.register(TxnLanceDataSource)
    if filter_pushdown:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")


def activate(spark: Any) -> None:
    """Make ``spark`` the active session of the calling thread.

    Spark resolves ``format("txn_lance")`` against the *active* session of the JVM thread
    that runs the query, and a Python thread other than the one that created the session
    has none (the write then fails with DATA_SOURCE_NOT_FOUND). Call this at the start of
    such a thread. A no-op for Spark Connect sessions.
    """
    jvm = getattr(spark, "_jvm", None)
    jsession = getattr(spark, "_jsparkSession", None)
    if jvm is None or jsession is None:
        return
    jvm.org.apache.spark.sql.SparkSession.setActiveSession(jsession)


def __getattr__(name: str) -> Any:
    # the data source classes import pyspark; load them only when asked for
    if name in (
        "TxnLanceDataSource",
        "TxnLanceWriter",
        "TxnLanceCommitMessage",
        "TxnLanceReader",
        "TxnLanceFilteringReader",
    ):
        from txn_engine.spark import _datasource

        return getattr(_datasource, name)
    if name in _STREAM_NAMES:
        from txn_engine.spark import _stream

        return getattr(_stream, name)
    raise AttributeError(f"module 'txn_engine.spark' has no attribute {name!r}")


# the streaming sink (``writeStream.format("txn_lance")``, see docs/spark.md) imports pyspark
_STREAM_NAMES = (
    "STREAMS_DIR",
    "STREAM_BATCH_ID_PROPERTY",
    "STREAM_QUERY_ID_PROPERTY",
    "StreamProgress",
    "TxnLanceStreamWriter",
    "read_progress",
)
