"""Structured Streaming into a Lance dataset: one version per micro-batch, exactly once.

``df.writeStream.format("txn_lance").option("checkpointLocation", ckpt).start(uri)`` (append
output mode). This module does not import pyspark; the data source classes in
``txn_engine.spark._datasource`` call it. The life of micro-batch ``b`` of query ``q``:

1. **tasks** (executors): :func:`write_stream_task` writes the partition's rows as Lance
   data files, under a staging record of its own (``_txn_engine/spark/``, see
   ``_staging``) that names the batch's transaction uuid, so a crash at any later point
   leaves files that the next commit of the batch or a sweep can attribute and remove.
2. **commit** (driver, Spark's ``commit(messages, batchId)``):
   :func:`commit_stream_batch` commits ONE Append (an Overwrite when it creates the
   dataset) with the deterministic uuid ``uuid5(uri, q, b)`` and the transaction
   properties ``txn_engine.stream.query_id`` / ``txn_engine.stream.batch_id``.
3. **progress**: the per-query progress object ``_txn_engine/streams/<q>.json`` records
   the intent before the commit and the last committed batch id and its version after it
   (never moved backwards).

Before the commit, the progress object records the intent (the batch id, and the latest
version then). A replayed batch (Spark re-runs every batch whose checkpoint commit entry is
missing after a driver crash or restart) is recognised without a fixed lookback window: a
batch id at or below the progress object's last committed batch is committed already; a
batch that is not the pending one never started its commit; for the pending batch every
version after the intent's version is searched for the batch's uuid (however many there
are), and it is committed only when each of those versions was read and none is the
batch's (a gap in the history is an error, never a guess). A commit whose outcome is
unknown (CommitStateUnknownError) is retried with the same uuid, which the commit loop
settles; if it stays unknown the batch fails and its replay settles it.
"""

from __future__ import annotations

import json
import logging
import uuid as uuid_mod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import attrs
import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from txn_engine import jsontext
from txn_engine.errors import (
    DatasetNotFoundError,
    HistoryUnavailableError,
    InvalidOperationError,
    ObjectNotFoundError,
)
from txn_engine.redact import redact_uri
from txn_engine.spark import _staging
from txn_engine.spark._fragments import fragments_summary
from txn_engine.spark._log_output import ensure_log_output
from txn_engine.spark._options import WriteOptions, parse_write_options
from txn_engine.spark._write import FragmentCollector
from txn_engine.spark._write_plan import WRITE_ID_PROPERTY, _open, _pin
from txn_engine.storage.base import Storage

__all__ = [
    "STREAMS_DIR",
    "STREAM_BATCH_ID_PROPERTY",
    "STREAM_QUERY_ID_PROPERTY",
    "StreamBatchResult",
    "StreamOptions",
    "StreamProgress",
    "batch_uuid",
    "commit_stream_batch",
    "parse_stream_options",
    "read_progress",
    "resolve_query_id",
    "write_stream_task",
]

_log = logging.getLogger("txn_engine.spark")

#: Transaction property: the streaming query id of the micro-batch a version holds.
STREAM_QUERY_ID_PROPERTY = "txn_engine.stream.query_id"
#: Transaction property: the micro-batch id (decimal) a version holds.
STREAM_BATCH_ID_PROPERTY = "txn_engine.stream.batch_id"
#: Directory (under the table root) of the per-query progress objects.
STREAMS_DIR = "_txn_engine/streams"
_STREAM_NAMESPACE = uuid_mod.UUID("0f6c3f7e-2d1b-4b8e-9a51-7c4e8d2b6a13")
# Spark's task-local properties naming the running query and micro-batch
_QUERY_ID_KEY = "sql.streaming.queryId"
_BATCH_ID_KEY = "streaming.sql.batchId"
_STREAM_ONLY = ("checkpointlocation", "streamid", "stream_id")
_NOT_FOR_STREAMS: Mapping[str, str] = MappingProxyType(
    {
        "write_id": "the micro-batch identity (query id, batch id) is the write id of a stream",
        "mergeschema": "schema changes are not applied by a stream; add the columns first",
        "merge_schema": "schema changes are not applied by a stream; add the columns first",
        "replacewhere": "a stream only appends",
        "replace_where": "a stream only appends",
    }
)


@attrs.frozen
class StreamOptions:
    """The options of ``writeStream.format("txn_lance")``: every write option of
    :class:`~txn_engine.spark._options.WriteOptions` except ``write_id``, ``mergeSchema``
    and ``replaceWhere``, plus ``checkpointLocation`` (where Spark keeps the query's
    checkpoint; its ``metadata`` file holds the query id) and ``streamId`` (an explicit
    query id, for checkpoints the sink cannot read; it must change whenever the
    checkpoint is reset, since batch ids then start again at 0)."""

    write: WriteOptions
    checkpoint_location: str | None = None
    stream_id: str | None = None


def parse_stream_options(options: Mapping[str, str]) -> StreamOptions:
    """Turn a Spark option map into :class:`StreamOptions`; unknown options and the batch
    write options a stream cannot honour are refused (InvalidOperationError)."""
    lowered = {str(k).lower(): str(v) for k, v in options.items()}
    for name, why in _NOT_FOR_STREAMS.items():
        if name in lowered:
            raise InvalidOperationError(f"option {name!r} is not supported by streaming: {why}")
    stream_id = lowered.get("streamid") or lowered.get("stream_id") or None
    checkpoint = lowered.get("checkpointlocation") or None
    rest = {k: v for k, v in lowered.items() if k not in _STREAM_ONLY}
    return StreamOptions(
        write=parse_write_options(rest), checkpoint_location=checkpoint, stream_id=stream_id
    )


def resolve_query_id(options: StreamOptions) -> str:
    """The query id a stream's versions are recorded under: ``streamId`` if given, else
    the ``id`` in ``<checkpointLocation>/metadata`` (Spark writes it when the query is
    first started and keeps it across restarts). Raises InvalidOperationError when
    neither is available."""
    if options.stream_id:
        return options.stream_id
    if not options.checkpoint_location:
        raise InvalidOperationError(
            "txn_lance streaming needs the query's identity to commit each micro-batch "
            "exactly once: give .option('checkpointLocation', path) on the writeStream (the "
            "session-wide spark.sql.streaming.checkpointLocation is not passed to Python "
            "data sources), or .option('streamId', id) naming the query"
        )
    import fsspec

    path = options.checkpoint_location.rstrip("/") + "/metadata"
    try:
        with fsspec.open(path, "r") as handle:
            text = handle.readline()
        query_id = jsontext.loads(text)["id"]
    except Exception as exc:
        raise InvalidOperationError(
            f"cannot read the query id from {redact_uri(path)} ({exc!r}); give "
            ".option('streamId', ...) naming the query"
        ) from exc
    if not isinstance(query_id, str) or not query_id:
        raise InvalidOperationError(f"{redact_uri(path)} holds no query id")
    return query_id


def batch_uuid(uri: str, query_id: str, batch_id: int) -> str:
    """The transaction uuid of micro-batch ``batch_id`` of query ``query_id`` into
    ``uri``: the same in every attempt and replay of the batch."""
    return str(uuid_mod.uuid5(_STREAM_NAMESPACE, f"{uri}\n{query_id}\n{batch_id}"))


def _write_id(query_id: str, batch_id: int) -> str:
    return f"stream:{query_id}:{batch_id}"


def _progress_path(query_id: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in query_id)
    return f"{STREAMS_DIR}/{safe}.json"


@attrs.frozen
class StreamProgress:
    """The per-query progress object.

    ``batch_id`` / ``version``: the last committed batch and the version holding it (the
    latest version then, for an empty batch); -1 / 0 before the first commit.
    ``pending_batch_id`` / ``pending_after``: the batch whose commit was started (the
    intent, written before the commit) and the latest version when it was started, so
    the batch can only have landed after ``pending_after``; None when no commit is in
    flight. A batch above ``batch_id`` that is not pending never started its commit."""

    query_id: str
    batch_id: int
    version: int
    pending_batch_id: int | None = None
    pending_after: int | None = None


def read_progress(storage: Storage, query_id: str) -> StreamProgress | None:
    """The progress object of ``query_id``, None if the query never committed here.

    Raises StorageError when it cannot be read, and InvalidOperationError when it is not
    a progress object of this query (a damaged object is never taken as "nothing
    committed")."""
    try:
        raw = storage.get(_progress_path(query_id))
    except ObjectNotFoundError:
        return None
    try:
        data = jsontext.loads(raw)
        pending = data.get("pending_batch_id")
        after = data.get("pending_after")
        progress = StreamProgress(
            str(data["query_id"]),
            int(data["batch_id"]),
            int(data["version"]),
            None if pending is None else int(pending),
            None if after is None else int(after),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InvalidOperationError(
            f"the stream progress object {_progress_path(query_id)} is damaged ({exc!r}); "
            "restore it or restart the query with a new checkpoint / streamId"
        ) from exc
    if progress.query_id != query_id:
        raise InvalidOperationError(
            f"{_progress_path(query_id)} belongs to query {progress.query_id}, not {query_id}"
        )
    return progress


def _put_progress(storage: Storage, progress: StreamProgress) -> None:
    storage.put(_progress_path(progress.query_id), json.dumps(attrs.asdict(progress)).encode())


# --------------------------------------------------------------------------- executors


def write_stream_task(
    uri: str,
    batches: Iterable[pa.RecordBatch],
    *,
    schema: pa.Schema,
    options: WriteOptions,
    query_id: str,
    batch_id: int,
) -> tuple[str, list[str]]:
    """One task of micro-batch ``batch_id``: write ``batches`` as Lance data files.

    Records a staging write (fresh key, the batch's uuid, the latest version as read
    version) before any file is written, marks each file, and returns ``(write key,
    fragment JSONs)`` for the commit message."""
    storage = _open(uri, options)
    pinned = _pin(storage, uri, "append", schema, attrs.evolve(options, merge_schema=False))
    key = _staging.new_write_key()
    collector = _batch_collector(
        uri,
        query_id,
        batch_id,
        write_key=key,
        read_version=pinned.read_version,
        schema=pinned.schema,
        options=options,
    )
    collector.write_record(storage, stream_query_id=query_id, stream_batch_id=batch_id)
    return key, collector.write_batches(batches)


def _batch_collector(
    uri: str,
    query_id: str,
    batch_id: int,
    *,
    write_key: str,
    read_version: int,
    schema: pa.Schema,
    options: WriteOptions,
) -> FragmentCollector:
    """The write of micro-batch ``batch_id`` (the same identity in its tasks and its
    driver commit): transaction uuid and write id derived from the batch, the query id and
    batch id recorded as transaction properties."""
    properties = dict(options.properties)
    properties[STREAM_QUERY_ID_PROPERTY] = query_id
    properties[STREAM_BATCH_ID_PROPERTY] = str(batch_id)
    return FragmentCollector(
        uri=uri,
        mode="append",
        write_id=_write_id(query_id, batch_id),
        uuid=batch_uuid(uri, query_id, batch_id),
        write_key=write_key,
        read_version=read_version,
        schema=schema,
        options=attrs.evolve(options, properties=properties),
    )


# --------------------------------------------------------------------------- driver


@attrs.frozen
class StreamBatchResult:
    """What the commit of one micro-batch did. ``version`` is the version holding the
    batch (None for an empty batch); ``already_committed`` means a replay found the batch
    committed (by the progress object or in the history) and committed nothing."""

    query_id: str
    batch_id: int
    uuid: str
    version: int | None
    already_committed: bool
    rows: int
    fragments: int
    files_removed: int


def _latest(storage: Storage) -> int:
    from txn_engine.format.io import latest_version

    try:
        return latest_version(storage).version
    except DatasetNotFoundError:
        return 0


def _staged_of_batch(storage: Storage, txn_uuid: str) -> list[str]:
    """Write keys of staging records that belong to the batch (this run's tasks and the
    tasks of runs that crashed)."""
    keys = []
    for key, staged in _staging.list_staging(storage).items():
        if not staged.has_record:
            continue
        record = _staging.read_record(storage, key)
        if record is not None and record.get("uuid") == txn_uuid:
            keys.append(key)
    return keys


def _pending_landed(
    storage: Storage, uri: str, query_id: str, batch_id: int, progress: StreamProgress
) -> _staging.Landed | None:
    """The transaction of micro-batch ``batch_id`` if it is the batch whose commit was
    started before (``progress``'s pending batch) and it landed, in a version after
    ``pending_after`` (however many versions came since); None otherwise. Raises
    HistoryUnavailableError when a version since then is missing or unreadable."""
    if progress.pending_batch_id != batch_id:
        return None
    after = progress.pending_after or 0
    outcome = _staging.settle(
        storage,
        batch_uuid(uri, query_id, batch_id),
        read_version=after,
        write_id=_write_id(query_id, batch_id),
        write_id_property=WRITE_ID_PROPERTY,
    )
    if not outcome.known:
        raise HistoryUnavailableError(
            f"cannot tell whether micro-batch {batch_id} of stream {query_id} "
            f"already landed in {redact_uri(uri)}: {outcome.reason}",
            read_version=after,
            operation="Append",
            remedy="restore the versions after the one named, or restart the query "
            "with a new checkpoint / streamId after checking the table by hand",
        )
    return outcome.landed


def _settle_batch(
    storage: Storage,
    uri: str,
    query_id: str,
    batch_id: int,
    progress: StreamProgress,
    *,
    jsons: list[dict[str, Any]],
    referenced: set[str],
    write_keys: Sequence[str],
    schema: pa.Schema,
    options: WriteOptions,
) -> tuple[int | None, bool, set[str], int]:
    """Recognise a replay of micro-batch ``batch_id`` (by ``progress``; for the pending
    batch, in the history) or commit it: record the intent in the progress object, then
    commit its Append at the latest version. Returns (the version holding the batch, or
    None when it holds none; whether it was committed already; the data files to keep;
    the version the progress object records for an empty batch)."""
    if batch_id <= progress.batch_id:
        version = progress.version if batch_id == progress.batch_id else None
        return version, True, set(), progress.version
    landed = _pending_landed(storage, uri, query_id, batch_id, progress)
    latest = _latest(storage)
    if landed is not None:
        return landed.version, True, _staging.transaction_data_files(landed.transaction), latest
    if not jsons:
        return None, False, set(), latest
    # the intent first: a crash from here on makes the replay search the history
    _put_progress(
        storage,
        attrs.evolve(progress, pending_batch_id=batch_id, pending_after=latest),
    )
    collector = _batch_collector(
        uri,
        query_id,
        batch_id,
        write_key=write_keys[0] if write_keys else _staging.new_write_key(),
        read_version=latest,
        schema=schema,
        options=options,
    )
    txn = collector.transaction(jsons)
    version, already, _, _, keep = collector._commit_once(storage, txn, referenced, jsons)
    return version, already, keep, latest


def _remove_unreferenced(
    storage: Storage,
    txn_uuid: str,
    write_keys: Sequence[str],
    keep: set[str],
    referenced: set[str],
) -> int:
    """Finalise the staging writes of the batch (``write_keys`` and those of crashed runs):
    remove their files that are not in ``keep``. Returns the number of files removed."""
    removed = 0
    for key in dict.fromkeys([*write_keys, *_staged_of_batch(storage, txn_uuid)]):
        stats = _staging.finalize(storage, key, keep, extra_files=referenced - keep)
        removed += stats.files_removed
    return removed


def commit_stream_batch(
    uri: str,
    *,
    query_id: str,
    batch_id: int,
    fragments: Iterable[Any],
    write_keys: Sequence[str] = (),
    schema: pa.Schema,
    options: WriteOptions,
    hook: Callable[[str], None] | None = None,
) -> StreamBatchResult:
    """Commit micro-batch ``batch_id`` of ``query_id`` exactly once (driver side).

    ``fragments`` are the tasks' fragment JSONs, ``write_keys`` their staging keys,
    ``schema`` the stream's Arrow schema (the table schema when this batch creates the
    dataset). Recognises a replay (progress object; for the batch whose commit was started,
    every version since the intent), commits otherwise, advances the progress object, and
    removes the batch's files that the landed transaction does not reference (replays,
    failed attempts, crashed runs).

    Raises HistoryUnavailableError when a version since the batch's recorded intent is
    missing or unreadable (whether the batch landed cannot be told: restore the history
    or give a new ``streamId``), CommitStateUnknownError when the commit's outcome stays
    unknown (the replay of the batch settles it), and the commit errors of
    :func:`txn_engine.commit.commit`. ``hook(stage)`` (tests) is called with
    ``"committed"`` and ``"progress_written"``.
    """
    jsons, referenced, rows = fragments_summary(fragments)
    storage = _open(uri, options)
    txn_uuid = batch_uuid(uri, query_id, batch_id)
    progress = read_progress(storage, query_id) or StreamProgress(query_id, -1, 0)
    version, already, keep, latest = _settle_batch(
        storage,
        uri,
        query_id,
        batch_id,
        progress,
        jsons=jsons,
        referenced=referenced,
        write_keys=write_keys,
        schema=schema,
        options=options,
    )
    if hook is not None:
        hook("committed")
    if batch_id > progress.batch_id:
        _put_progress(
            storage,
            StreamProgress(query_id, batch_id, version if version is not None else latest),
        )
    if hook is not None:
        hook("progress_written")
    removed = _remove_unreferenced(storage, txn_uuid, write_keys, keep, referenced)
    result = StreamBatchResult(
        query_id=query_id,
        batch_id=batch_id,
        uuid=txn_uuid,
        version=version,
        already_committed=already,
        rows=rows,
        fragments=len(jsons),
        files_removed=removed,
    )
    _log.info(
        "txn_lance stream %s batch %d -> version %s%s: %d fragments, %d rows; %d "
        "unreferenced file(s) removed",
        query_id,
        batch_id,
        version,
        " (already committed: replay)" if already else "",
        len(jsons),
        rows,
        removed,
    )
    return result


def task_identity(local_property: Any) -> tuple[str | None, int | None]:
    """(query id, batch id) from Spark's task-local properties (``local_property`` is
    ``TaskContext.getLocalProperty``); None where Spark did not set them."""
    query = local_property(_QUERY_ID_KEY)
    batch = local_property(_BATCH_ID_KEY)
    return (query or None), (int(batch) if batch not in (None, "") else None)


# --------------------------------------------------------------------------- Spark classes


@attrs.frozen
class TxnLanceStreamMessage(WriterCommitMessage):
    """What one task of a micro-batch sends to the driver."""

    write_key: str
    fragments: tuple[str, ...]
    query_id: str
    batch_id: int
    partition_id: int
    attempt: int


class TxnLanceStreamWriter(DataSourceStreamArrowWriter):
    """The stream writer Spark makes for every micro-batch (pickled to the tasks and to
    the driver-side commit worker)."""

    def __init__(self, uri: str, schema: pa.Schema, options: StreamOptions, query_id: str):
        self.uri = uri
        self.schema = schema
        self.options = options
        self.query_id = query_id

    def __repr__(self) -> str:
        return f"TxnLanceStreamWriter(uri={redact_uri(self.uri)!r}, query_id={self.query_id!r})"

    def _hook(self, stage: str) -> None:
        """Called between the steps of a micro-batch commit (``"tasks_done"``,
        ``"committed"``, ``"progress_written"``); a no-op (tests inject crashes here)."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TxnLanceStreamMessage:
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is None:
            raise InvalidOperationError("TxnLanceStreamWriter.write runs in a Spark task")
        spark_query, batch_id = task_identity(context.getLocalProperty)
        if batch_id is None:
            raise InvalidOperationError(
                "Spark did not tell the task its micro-batch id (local property "
                f"{_BATCH_ID_KEY!r}); txn_lance streaming needs micro-batch execution"
            )
        if self.options.stream_id is None and spark_query not in (None, self.query_id):
            raise InvalidOperationError(
                f"the checkpoint names query {self.query_id} but Spark runs query "
                f"{spark_query}; give .option('streamId', ...)"
            )
        key, fragments = write_stream_task(
            self.uri,
            iterator,
            schema=self.schema,
            options=self.options.write,
            query_id=self.query_id,
            batch_id=batch_id,
        )
        return TxnLanceStreamMessage(
            key,
            tuple(fragments),
            self.query_id,
            batch_id,
            context.partitionId(),
            context.attemptNumber(),
        )

    def _messages(self, messages: Sequence[Any]) -> list[TxnLanceStreamMessage]:
        out = []
        for message in messages:
            if isinstance(message, TxnLanceStreamMessage):
                out.append(message)
            elif message is not None:
                raise InvalidOperationError(
                    f"unexpected commit message type {type(message).__name__}"
                )
        return out

    def commit(self, messages: list[Any], batchId: int) -> None:
        ensure_log_output()
        ours = self._messages(messages)
        for message in ours:
            if message.batch_id != batchId or message.query_id != self.query_id:
                raise InvalidOperationError(
                    f"a task wrote for query {message.query_id} batch {message.batch_id}, "
                    f"not for query {self.query_id} batch {batchId}"
                )
        self._hook("tasks_done")
        commit_stream_batch(
            self.uri,
            query_id=self.query_id,
            batch_id=batchId,
            fragments=[f for m in ours for f in m.fragments],
            write_keys=[m.write_key for m in ours],
            schema=self.schema,
            options=self.options.write,
            hook=self._hook,
        )

    def abort(self, messages: list[Any], batchId: int) -> None:
        """A failed micro-batch: remove what its tasks wrote unless the batch's
        transaction is in the history (then its files stay); a replay commits it."""
        ensure_log_output()
        ours = self._messages(messages)
        storage = _open(self.uri, self.options.write)
        txn_uuid = batch_uuid(self.uri, self.query_id, batchId)
        try:
            progress = read_progress(storage, self.query_id)
            keep: set[str] = set()
            if progress is not None and progress.pending_batch_id == batchId:
                outcome = _staging.settle(
                    storage,
                    txn_uuid,
                    read_version=progress.pending_after or 0,
                    write_id=_write_id(self.query_id, batchId),
                    write_id_property=WRITE_ID_PROPERTY,
                )
                if not outcome.known:
                    return  # a later sweep decides
                if outcome.landed is not None:
                    keep = _staging.transaction_data_files(outcome.landed.transaction)
        except Exception as exc:
            _log.warning("abort of stream batch %d: outcome unknown (%r)", batchId, exc)
            return
        extra = {
            str(f["path"])
            for m in ours
            for text in m.fragments
            for f in jsontext.loads(text).get("files", ())
        }
        for key in dict.fromkeys(
            [*(m.write_key for m in ours), *_staged_of_batch(storage, txn_uuid)]
        ):
            _staging.finalize(storage, key, keep, extra_files=extra - keep)
