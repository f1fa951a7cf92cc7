"""Row-level MERGE from Spark (:func:`merge`): one Spark job, one driver commit.

The machinery it shares with DELETE and UPDATE (the pinned read version and its lease, the
tasks' deletion vectors and data files, the commit and its re-plans, the clean-up) is
``_dml``'s; see its docstring. A merge plans in four steps:

1. the target's key columns and row addresses, read at the pinned version by one task per
   fragment group (:func:`_merge_target`);
2. the source joined with them, rows shuffled so that every target fragment's matches
   meet in one partition (:func:`_merge_shuffled`);
3. one task per partition writes a cumulative deletion vector for each fragment with
   matched rows and the updated and inserted rows as new data files
   (:func:`_apply_merge`);
4. the tasks' messages become ONE Update, with the inserted keys recorded
   (:func:`_merge_planned`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal, Unpack

import attrs
import pyarrow as pa  # type: ignore[import-untyped]
from pyroaring import BitMap

from txn_engine.dataset import Dataset
from txn_engine.errors import InvalidOperationError
from txn_engine.ops import Update
from txn_engine.spark._dml import (
    _ROWADDR,
    DmlOptions,
    DmlResult,
    TaskHook,
    _assemble,
    _Attempt,
    _Context,
    _delete_rows,
    _fragments_message,
    _open_lance,
    _Planned,
    _table_field_ids,
)
from txn_engine.spark._write import FragmentCollector
from txn_engine.storage import open_storage
from txn_engine.transaction import Transaction

__all__ = ["MatchedAction", "NotMatchedAction", "merge"]

_PART = "_txn_part"

MatchedAction = Literal["update", "delete"]
NotMatchedAction = Literal["insert"]
BatchFunction = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


def merge(
    source: Any,
    uri: str,
    on: str | Sequence[str],
    *,
    when_matched: MatchedAction | None = "update",
    when_not_matched: NotMatchedAction | None = "insert",
    **options: Unpack[DmlOptions],
) -> DmlResult:
    """Merge the DataFrame ``source`` into the table at ``uri`` on the key column(s)
    ``on``, like pylance's ``merge_insert(on)``:

    * ``when_matched="update"``: a target row whose key is in ``source`` is replaced by the
      source row (``when_matched_update_all``); ``"delete"``: it is deleted; None: kept;
    * ``when_not_matched="insert"``: source rows whose key is not in the table are
      inserted (``when_not_matched_insert_all``); None: dropped.

    ``source`` must have the table's columns (any order; types converted without loss, as
    for appends) unless the merge only deletes, which needs just the keys. A target row
    matched by two source rows is refused (InvalidOperationError). One ``Update`` commit;
    the inserted keys are recorded, so a concurrent merge inserting one of them makes this
    one re-plan (the key lands once). Other arguments as :func:`~txn_engine.spark.delete`.
    """
    keys = [on] if isinstance(on, str) else list(on)
    if not keys:
        raise InvalidOperationError("merge: give at least one key column (on=...)")
    if when_matched not in ("update", "delete", None):
        raise InvalidOperationError(
            f"merge: when_matched must be 'update', 'delete' or None, got {when_matched!r}"
        )
    if when_not_matched not in ("insert", None):
        raise InvalidOperationError(
            f"merge: when_not_matched must be 'insert' or None, got {when_not_matched!r}"
        )
    spark = source.sparkSession
    ctx = _Context.make(spark, uri, "merge", options)
    return ctx.run(
        lambda snapshot, attempt: _plan_merge(
            ctx, snapshot, attempt, source, keys, when_matched, when_not_matched
        )
    )


def _parallelism(spark: Any) -> int:
    """Partitions for the merge's shuffle: the default parallelism (the shuffle partitions
    setting where there is no SparkContext, as with Spark Connect)."""
    try:
        return max(1, int(spark.sparkContext.defaultParallelism))
    except Exception:
        return max(1, int(spark.conf.get("spark.sql.shuffle.partitions", "200")))


@attrs.frozen(eq=False)
class _MergeTask:
    """What a task applying a merge needs (pickled to the executors with
    :func:`_merge_applier`'s function): the table at the pinned ``version``, the plan's
    ``key`` (its deletion files are marked with it), the pinned fragments (protobuf bytes
    by id), the key columns, the columns of the rows written, the actions, the staging
    write of the new data files (None when the merge writes no rows) and the test hook."""

    uri: str
    version: int
    storage_options: Mapping[str, Any]
    key: str
    fragments: Mapping[int, bytes]
    keys: list[str]
    columns: list[str]
    when_matched: MatchedAction | None
    when_not_matched: NotMatchedAction | None
    collector: FragmentCollector | None
    hook: TaskHook | None


def _plan_merge(
    ctx: _Context,
    snapshot: Dataset,
    attempts: list[_Attempt],
    source: Any,
    keys: list[str],
    when_matched: MatchedAction | None,
    when_not_matched: NotMatchedAction | None,
) -> _Planned:
    """Plan the merge at ``snapshot`` (one Spark job; its files are ``attempts``' last
    entry): check the columns, read the target's keys, join, apply per target fragment,
    and return the Update to commit. Raises InvalidOperationError for mismatched columns,
    a target row matched twice, or a failed job."""
    writes_rows = when_matched == "update" or when_not_matched == "insert"
    data_schema = _merge_data_schema(snapshot.schema, source, keys, writes_rows=writes_rows)
    attempt = ctx.new_attempt(data_schema=data_schema)
    attempts.append(attempt)
    columns = list(snapshot.schema.names) if writes_rows else keys
    task = _MergeTask(
        uri=ctx.uri,
        version=snapshot.version,
        storage_options=dict(ctx.storage_options),
        key=attempt.key,
        fragments={pb.id: pb.SerializeToString() for pb in snapshot.manifest_pb.fragments},
        keys=keys,
        columns=columns,
        when_matched=when_matched,
        when_not_matched=when_not_matched,
        collector=attempt.collector,
        hook=ctx.task_hook,
    )
    target = _merge_target(ctx, snapshot, keys)
    shuffled = _merge_shuffled(ctx, source.select(*columns), target, keys, when_not_matched)
    rows = ctx.collect(shuffled.mapInArrow(_merge_applier(task), "message string"))
    messages = [json.loads(r[0]) for r in rows if r[0] is not None]
    return _merge_planned(ctx, snapshot, messages, keys, when_matched, when_not_matched)


def _merge_data_schema(
    schema: pa.Schema, source: Any, keys: list[str], *, writes_rows: bool
) -> pa.Schema | None:
    """Check the key columns (in the table's ``schema`` and in ``source``) and, when the
    merge ``writes_rows``, that the source has exactly the table's columns; the Arrow schema
    of the rows it writes (the source's, in the table's column order), or None when it
    writes none. Raises InvalidOperationError naming the missing or unexpected columns."""
    from pyspark.sql.pandas.types import to_arrow_schema

    missing = [k for k in keys if k not in schema.names]
    if missing:
        raise InvalidOperationError(f"merge: no key column(s) {missing} in the table")
    absent = [k for k in keys if k not in source.columns]
    if absent:
        raise InvalidOperationError(f"merge: the source has no key column(s) {absent}")
    if not writes_rows:
        return None
    names = set(schema.names)
    extra = sorted(set(source.columns) - names)
    lacking = sorted(names - set(source.columns))
    if extra or lacking:
        raise InvalidOperationError(
            f"merge: the source's columns must be the table's (missing: {lacking}, "
            f"unexpected: {extra})"
        )
    return to_arrow_schema(
        source.select(*schema.names).schema, timezone="UTC", prefers_large_types=False
    )


def _key_scanner(
    uri: str,
    version: int,
    lance_options: Mapping[str, str] | None,
    keys: list[str],
    groups: list[list[tuple[int, bytes]]],
    hook: TaskHook | None,
) -> BatchFunction:
    """The function of the target scan's tasks: for each fragment group index it is given
    (``hook(index)`` first), the key columns and row addresses (``_rowaddr``, int64) of the
    group's fragments at ``version``."""

    def scan_keys(partition: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        lds = None
        for batch in partition:
            for index in batch.column(0).to_pylist():
                if hook is not None:
                    hook(index)
                lds = lds or _open_lance(uri, version, lance_options)
                for fid, _pb in groups[index]:
                    table = lds.get_fragment(fid).to_table(columns=keys, with_row_address=True)
                    arrays = [table.column(k) for k in keys]
                    arrays.append(table.column(_ROWADDR).cast(pa.int64()))
                    yield from pa.Table.from_arrays(arrays, names=[*keys, _ROWADDR]).to_batches()

    return scan_keys


def _merge_target(ctx: _Context, snapshot: Dataset, keys: list[str]) -> Any:
    """Step 1: the target's keys and row addresses at ``snapshot`` as a DataFrame (columns
    ``keys`` and ``_rowaddr``), read by one task per fragment group."""
    from pyspark.sql.pandas.types import from_arrow_type
    from pyspark.sql.types import LongType, StructField, StructType

    key_fields = [snapshot.schema.field(k) for k in keys]
    groups = ctx.groups(snapshot)
    scan_keys = _key_scanner(
        ctx.uri, snapshot.version, ctx.lance_options, keys, groups, ctx.task_hook
    )
    target_type = StructType(
        [StructField(f.name, from_arrow_type(f.type), True) for f in key_fields]
        + [StructField(_ROWADDR, LongType(), True)]
    )
    spark = ctx.spark
    if groups:
        return spark.range(0, len(groups), 1, len(groups)).mapInArrow(scan_keys, target_type)
    return spark.createDataFrame([], target_type)


def _merge_shuffled(
    ctx: _Context,
    src: Any,
    target: Any,
    keys: list[str],
    when_not_matched: NotMatchedAction | None,
) -> Any:
    """Step 2: the source rows ``src`` joined with ``target`` on ``keys`` (a left join when
    unmatched rows are inserted), repartitioned so that the rows of one target fragment meet
    in one partition (unmatched rows spread by the hash of their keys)."""
    from pyspark.sql import functions as F

    how = "left" if when_not_matched == "insert" else "inner"
    joined = src.join(target, on=keys, how=how)
    parts = _parallelism(ctx.spark)
    part = F.when(
        F.col(_ROWADDR).isNull(), -1 - F.pmod(F.hash(*[F.col(k) for k in keys]), F.lit(parts))
    ).otherwise(F.shiftright(F.col(_ROWADDR), 32))
    return joined.withColumn(_PART, part).repartition(parts, F.col(_PART))


def _merge_applier(task: _MergeTask) -> BatchFunction:
    """Step 3's task function (``mapInArrow``, ``"message string"``): ``task.hook`` first,
    then one message (:func:`_apply_merge`) for the partition's rows, none when it has
    none."""

    def apply(partition: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        if task.hook is not None:
            task_context = TaskContext.get()
            task.hook(task_context.partitionId() if task_context is not None else -1)
        batches = [b for b in partition if b.num_rows]
        if not batches:
            return
        message = _apply_merge(task, pa.Table.from_batches(batches))
        out = pa.array([json.dumps(message)], pa.string())
        yield pa.RecordBatch.from_arrays([out], ["message"])

    return apply


def _match_rows(addresses: list[int | None]) -> tuple[dict[int, BitMap], list[int], list[int]]:
    """The joined rows' target addresses sorted out: the matched offsets by fragment id,
    the indexes of the matched rows and of the unmatched ones (no address). Raises
    InvalidOperationError when two source rows match the same target row."""
    by_fragment: dict[int, BitMap] = {}
    matched_index: list[int] = []
    inserted_index: list[int] = []
    for i, address in enumerate(addresses):
        if address is None:
            inserted_index.append(i)
            continue
        offsets = by_fragment.setdefault(address >> 32, BitMap())
        offset = address & 0xFFFFFFFF
        if offset in offsets:
            raise InvalidOperationError(
                f"merge: a target row (fragment {address >> 32}, offset {offset}) is "
                "matched by more than one source row; make the source keys unique"
            )
        offsets.add(offset)
        matched_index.append(i)
    return by_fragment, matched_index, inserted_index


def _apply_merge(task: _MergeTask, rows: pa.Table) -> dict[str, Any]:
    """One partition of joined ``rows``: the deletion vectors of the matched target rows
    (when matched rows are updated or deleted) and the kept rows (updated, inserted)
    written as new fragments; returns the task's message (changes, new fragments, the
    inserted keys' hashes and the counts)."""
    from txn_engine.conflicts.upsert import key_hashes

    storage = open_storage(task.uri, dict(task.storage_options) or None)
    by_fragment, matched_index, inserted_index = _match_rows(rows.column(_ROWADDR).to_pylist())
    changes = []
    if task.when_matched is not None:
        for fid, offsets in sorted(by_fragment.items()):
            changes.append(
                _delete_rows(storage, task.key, task.version, fid, task.fragments[fid], offsets)
            )
    keep = (matched_index if task.when_matched == "update" else []) + (
        inserted_index if task.when_not_matched == "insert" else []
    )
    new: list[str] = []
    hashes: list[int] = []
    collector = task.collector
    if keep and collector is not None:
        chosen = rows.select(task.columns).take(pa.array(sorted(keep), pa.int64()))
        conformed = pa.Table.from_batches(
            [collector.conform(b) for b in chosen.to_batches()], schema=collector.schema
        )
        new = _fragments_message(collector, conformed, None)
        if task.when_not_matched == "insert" and inserted_index:
            fresh = rows.select(task.keys).take(pa.array(inserted_index, pa.int64()))
            hashes = key_hashes(fresh, task.keys)
    return {
        "changes": changes,
        "new_fragments": new,
        "inserted": hashes,
        "matched": len(matched_index),
        "inserted_rows": len(inserted_index) if task.when_not_matched == "insert" else 0,
    }


def _merge_planned(
    ctx: _Context,
    snapshot: Dataset,
    messages: list[dict[str, Any]],
    keys: list[str],
    when_matched: MatchedAction | None,
    when_not_matched: NotMatchedAction | None,
) -> _Planned:
    """Step 4: the tasks' ``messages`` as ONE Update at ``snapshot`` (the inserted keys
    recorded when unmatched rows are inserted) and the rows it deletes, updates and
    inserts."""
    from txn_engine.conflicts.upsert import bloom_filter

    updated, removed, affected, new, hashes = _assemble(messages)
    matched = sum(int(m.get("matched", 0)) for m in messages)
    inserted = sum(int(m.get("inserted_rows", 0)) for m in messages)
    op = Update(
        removed_fragment_ids=tuple(removed),
        updated_fragments=tuple(updated),
        new_fragments=tuple(new),
        affected_rows=affected,
    )
    if when_not_matched == "insert":
        ids = _table_field_ids(snapshot)
        op = attrs.evolve(
            op,
            inserted_rows=bloom_filter([ids[k] for k in keys], hashes),
            inserted_key_hashes=frozenset(hashes),
        )
    deleted = matched if when_matched == "delete" else 0
    updated_rows = matched if when_matched == "update" else 0
    return _Planned(
        Transaction(snapshot.version, op, properties=ctx.properties),
        deleted,
        updated_rows,
        inserted,
    )
