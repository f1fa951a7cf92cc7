"""Row-level DELETE / UPDATE / MERGE from Spark: executors per fragment, one driver commit.

::

    from txn_engine.spark import delete, merge, update

    delete(spark, uri, "status = 'gone'")
    update(spark, uri, set={"price": "price * 2"}, where="category = 'sale'")
    merge(updates_df, uri, on="id", when_matched="update", when_not_matched="insert")

Each call

1. pins the **read version** (the latest version when planning starts) and takes a
   :class:`~txn_engine.leases.Lease` on it, so cleanup keeps that version and the files
   the job writes until the commit is decided;
2. runs one Spark job over the pinned version's fragments (one task per fragment, or per
   group of fragments when there are more than ``max_tasks``). Each task opens its
   fragments with pylance *at the pinned version*, finds the affected rows, writes a
   cumulative deletion vector per fragment (``_deletions/``) and, for updates and merges,
   the rewritten or inserted rows as new data files; it returns commit messages (the new
   fragment metadata and the affected row offsets). For a merge, the target's key columns
   are read the same way (one task per fragment) and joined with the source DataFrame by
   Spark, then rows are shuffled so that every fragment's matches meet in one task;
3. commits ONE transaction on the driver, the Lance operation pylance writes for the same
   change: ``Delete`` for :func:`delete`, ``Update`` (removed, updated and new fragments)
   for :func:`update` and :func:`merge`, with ``read_version`` = the pinned version and the
   affected rows recorded (``affected_rows``), so a concurrent delete or update of *other*
   rows of the same fragments is rebased (deletion vectors merged), not a conflict;
4. on a retryable conflict (the same rows were changed concurrently, a fragment was
   rewritten, a concurrent upsert inserted one of this merge's new keys, ...) re-plans the
   whole operation at the latest version (a new Spark job) within ``retry_policy``
   (default :data:`DML_RETRY_POLICY`: 10 re-plans, 30 minutes).

Files written by a plan that did not land (a failed task, a failed job, a preempted attempt)
are deleted by the driver; nothing is committed then. A commit whose outcome is unknown
(:class:`~txn_engine.errors.CommitStateUnknownError`) keeps every file.

A merge that inserts rows records the inserted keys in its Update (``inserted_rows``, the
filter :meth:`txn_engine.Table.merge_insert` writes), so two concurrent merges (Spark or
Python) inserting the same new key never both land: rule ``U1`` makes the later one
re-plan, and the re-plan updates the row the first inserted. :func:`merge` and its planning
steps are in ``_dml_merge``.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypedDict, Unpack

import attrs
import pyarrow as pa  # type: ignore[import-untyped]
from pyroaring import BitMap, BitMap64

from txn_engine.commit import CommitResult, replan_and_commit
from txn_engine.conflicts.isolation import READ_PREDICATE
from txn_engine.conflicts.rebase import ConflictOptions, options_for
from txn_engine.dataset import Dataset
from txn_engine.errors import (
    CommitStateUnknownError,
    InvalidOperationError,
    ObjectNotFoundError,
    StorageError,
    TxnEngineError,
)
from txn_engine.format.deletion import (
    deletion_file_path,
    read_deletion_vector,
    write_deletion_vector,
)
from txn_engine.format.flags import FLAG_STABLE_ROW_IDS
from txn_engine.format.rowids import encode_row_id_sequence
from txn_engine.model import Fragment
from txn_engine.ops import Delete, Operation, Update
from txn_engine.redact import redact_uri
from txn_engine.retry import RetryPolicy
from txn_engine.spark import _staging
from txn_engine.spark._options import WriteOptions
from txn_engine.spark._write import FragmentCollector
from txn_engine.storage import open_storage
from txn_engine.storage.base import Storage
from txn_engine.transaction import Transaction

__all__ = [
    "DML_RETRY_POLICY",
    "DML_STAGING_DIR",
    "DmlOptions",
    "DmlResult",
    "delete",
    "update",
]

_log = logging.getLogger("txn_engine.spark")

#: Where the tasks of a row-level change record the deletion files they wrote (one empty
#: marker ``{key}~{quoted path}`` per file), so the driver can remove them when the plan
#: does not land.
DML_STAGING_DIR = "_txn_engine/spark-dml"
_SEP = "~"
_DELETION_PATH = re.compile(r"_deletions/[0-9]+-[0-9]+-[0-9]+\.(arrow|bin)", re.ASCII)
_ERROR_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception): .+$", re.M)
_OWNER = f"txn_engine.spark.dml:{os.getpid()}"
_ROWADDR = "_rowaddr"

#: Default re-planning budget: 11 plans (10 re-plans) within 30 minutes. Lance's 30 s
#: (:meth:`RetryPolicy.replanning`) is for planning in process; here each plan is a Spark job.
DML_RETRY_POLICY = RetryPolicy(max_attempts=11, deadline=1800.0)

TaskHook = Callable[[int], None]


class DmlOptions(TypedDict, total=False):
    """The keyword options :func:`delete`, :func:`update` and :func:`merge` share.

    ``storage_options`` are txn_engine's (and pylance's, unless ``lance_storage_options``
    are given); ``retry_policy`` is the re-planning budget (default
    :data:`DML_RETRY_POLICY`), ``commit_retry_policy`` the budget of each commit,
    ``conflict_options`` the commit's :class:`~txn_engine.ConflictOptions`;
    ``isolation`` (``"snapshot"`` or ``"serializable"``) the commit's isolation level
    (None: the table's, ``docs/conflicts.md``); ``properties`` are recorded in the
    transaction. ``max_tasks`` caps the number of
    tasks (fragments are grouped round-robin beyond it); ``task_hook(partition)`` runs on
    the executor at the start of every task (fault injection in tests).
    """

    storage_options: Mapping[str, Any] | None
    lance_storage_options: Mapping[str, str] | None
    retry_policy: RetryPolicy | None
    commit_retry_policy: RetryPolicy | None
    conflict_options: ConflictOptions | None
    isolation: str | None
    properties: Mapping[str, str] | None
    max_tasks: int | None
    task_hook: TaskHook | None


@attrs.frozen
class DmlResult:
    """What a row-level change did.

    ``version`` is the version it created; ``read_version`` the version the plan that
    landed was made at (later than the first pinned one after a re-plan); ``attempts`` the
    number of plans (Spark jobs) it took. ``rows_deleted`` / ``rows_updated`` /
    ``rows_inserted`` count target rows deleted, rows rewritten with new values and new
    rows; ``fragments_changed`` the fragments that got a deletion vector or were removed.
    ``files_removed`` counts files of plans that did not land (and of the landed plan's
    rebased deletion vectors) that were deleted.
    """

    operation: str
    version: int
    read_version: int
    attempts: int
    rows_deleted: int
    rows_updated: int
    rows_inserted: int
    fragments_changed: int
    new_fragments: int
    files_removed: int
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


# --------------------------------------------------------------------------- public calls


def delete(
    spark: Any,
    uri: str,
    condition: str,
    **options: Unpack[DmlOptions],
) -> DmlResult:
    """Delete the rows of the Lance table at ``uri`` matching the Lance SQL ``condition``
    (e.g. ``"id < 10 AND status = 'gone'"``), on Spark's executors; one ``Delete`` commit.

    Fragments whose rows all go are removed; the others get a cumulative deletion vector.
    A condition matching nothing still commits a version, as pylance does.

    ``options`` are the :class:`DmlOptions` (storage options, re-planning and commit
    budgets, transaction properties, ``max_tasks``, ``task_hook``). Raises
    InvalidOperationError for a bad condition or a failed job (nothing committed, its
    files removed), RetriesExhaustedError when concurrent writers kept preempting it, and
    the other commit errors.
    """
    ctx = _Context.make(spark, uri, "delete", options)
    return ctx.run(lambda snapshot, attempt: _plan_delete(ctx, snapshot, attempt, condition))


def update(
    spark: Any,
    uri: str,
    set: Mapping[str, str],
    where: str | None = None,
    **options: Unpack[DmlOptions],
) -> DmlResult:
    """Set columns to Lance SQL expressions (``set={"price": "price * 2", "tag": "'x'"}``)
    on the rows matching ``where`` (default: every row), on Spark's executors.

    Like pylance's ``update``: the matching rows get a deletion vector in their fragments
    and are rewritten, with the new values, into new fragments; one ``Update`` commit
    (stable row ids, when the table has them, are kept). Other arguments as :func:`delete`.
    Raises InvalidOperationError for an unknown column or a bad expression.
    """
    if not set:
        raise InvalidOperationError("update: give at least one column to set")
    values = dict(set)
    ctx = _Context.make(spark, uri, "update", options)
    return ctx.run(lambda snapshot, attempt: _plan_update(ctx, snapshot, attempt, values, where))


# --------------------------------------------------------------------------- driver machinery


@attrs.frozen
class _Attempt:
    """The files one plan wrote: deletion files (marked under :data:`DML_STAGING_DIR`
    with ``key``) and data files (a FragmentCollector's staging write)."""

    key: str
    collector: FragmentCollector | None = None


@attrs.frozen
class _Planned:
    transaction: Transaction
    rows_deleted: int
    rows_updated: int
    rows_inserted: int


@attrs.frozen(eq=False)
class _Context:
    spark: Any
    uri: str = attrs.field(repr=redact_uri)
    what: str
    storage_options: Mapping[str, Any]
    lance_options: Mapping[str, str] | None
    retry_policy: RetryPolicy | None
    commit_retry_policy: RetryPolicy | None
    conflict_options: ConflictOptions | None
    properties: Mapping[str, str]
    max_tasks: int | None
    task_hook: TaskHook | None

    @classmethod
    def make(cls, spark: Any, uri: str, what: str, options: DmlOptions) -> _Context:
        max_tasks = options.get("max_tasks")
        if max_tasks is not None and max_tasks < 1:
            raise InvalidOperationError(f"max_tasks must be at least 1, got {max_tasks}")
        storage_options = options.get("storage_options")
        lance_storage_options = options.get("lance_storage_options")
        if lance_storage_options is None and storage_options:
            lance_storage_options = {str(k): str(v) for k, v in storage_options.items()}
        return cls(
            spark=spark,
            uri=os.fspath(uri),
            what=what,
            storage_options=dict(storage_options or {}),
            lance_options=dict(lance_storage_options) if lance_storage_options else None,
            retry_policy=options.get("retry_policy"),
            commit_retry_policy=options.get("commit_retry_policy"),
            conflict_options=options_for(
                options.get("conflict_options"),
                options.get("isolation"),
                os.fspath(uri),
                dict(lance_storage_options) if lance_storage_options else None,
            ),
            properties=dict(options.get("properties") or {}),
            max_tasks=max_tasks,
            task_hook=options.get("task_hook"),
        )

    def storage(self) -> Storage:
        return open_storage(self.uri, dict(self.storage_options) or None)

    def groups(self, snapshot: Dataset) -> list[list[tuple[int, bytes]]]:
        """The pinned version's fragments (id, protobuf bytes) in task groups, round-robin."""
        items = [(pb.id, pb.SerializeToString()) for pb in snapshot.manifest_pb.fragments]
        count = len(items) if self.max_tasks is None else min(len(items), self.max_tasks)
        return [items[i::count] for i in range(count)] if count else []

    def new_attempt(self, *, data_schema: pa.Schema | None) -> _Attempt:
        collector = None
        if data_schema is not None:
            collector = FragmentCollector.plan(
                self.uri,
                mode="append",
                schema=data_schema,
                options=WriteOptions(
                    storage_options=dict(self.storage_options),
                    lance_storage_options=dict(self.lance_options or {}),
                    sweep_on_plan=False,
                ),
            )
            attempt = _Attempt(collector.write_key, collector)
        else:
            attempt = _Attempt(_staging.new_write_key())
        self.storage().put(_record(attempt.key), b"")
        return attempt

    def run(self, plan: Callable[[Dataset, list[_Attempt]], _Planned]) -> DmlResult:
        """Plan (a Spark job) at the pinned latest version, commit, re-plan on a
        retryable conflict; clean up the files of every plan that did not land."""
        started = time.perf_counter()
        storage = self.storage()
        attempts: list[_Attempt] = []
        outcome: list[_Planned] = []
        removed = 0
        calls = 0

        def planned(snapshot: Dataset) -> Transaction:
            nonlocal removed, calls
            calls += 1
            for previous in attempts:  # a re-plan: the previous plan did not land
                removed += _discard(storage, previous, keep=())
            attempts.clear()
            try:
                result = plan(snapshot, attempts)
            except BaseException:
                for attempt in attempts:
                    removed += _discard(storage, attempt, keep=())
                attempts.clear()
                raise
            outcome[:] = [result]
            return result.transaction

        try:
            committed: CommitResult = replan_and_commit(
                storage,
                planned,
                retry_policy=self.retry_policy or DML_RETRY_POLICY,
                commit_retry_policy=self.commit_retry_policy,
                conflict_options=self.conflict_options,
                lease_ttl=600.0,
                lease_owner=_OWNER,
            )
        except CommitStateUnknownError:
            raise  # keep every file: the plan may have landed
        except BaseException:
            for attempt in attempts:
                removed += _discard(storage, attempt, keep=())
            raise
        keep = _referenced_files(committed.transaction)
        for attempt in attempts:
            removed += _discard(storage, attempt, keep=keep)
        done = outcome[0]
        op = committed.transaction.operation
        changed = len(op.updated_fragments) + len(_removed_ids(op))  # type: ignore[union-attr]
        new = len(op.new_fragments) if isinstance(op, Update) else 0
        result = DmlResult(
            operation=self.what,
            version=committed.version,
            read_version=done.transaction.read_version,
            attempts=calls,
            rows_deleted=done.rows_deleted,
            rows_updated=done.rows_updated,
            rows_inserted=done.rows_inserted,
            fragments_changed=changed,
            new_fragments=new,
            files_removed=removed,
            seconds=time.perf_counter() - started,
        )
        _log.info("txn_lance %s of %s: %s", self.what, redact_uri(self.uri), result.to_json())
        return result

    def run_job(
        self,
        groups: Sequence[Any],
        task: Callable[[int, Any], list[str]],
        attempt: _Attempt,
    ) -> list[dict[str, Any]]:
        """One task per group (partition ``i`` runs ``task(i, groups[i])``); the messages
        the tasks returned, decoded. A failed job raises InvalidOperationError /
        StorageError (the caller removes what the tasks wrote)."""
        if not groups:
            return []
        hook = self.task_hook
        shipped = list(groups)

        def run_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                for index in batch.column(0).to_pylist():
                    if hook is not None:
                        hook(index)
                    out = task(index, shipped[index])
                    yield pa.RecordBatch.from_arrays([pa.array(out, pa.string())], ["message"])

        frame = self.spark.range(0, len(shipped), 1, len(shipped))
        rows = self.collect(frame.mapInArrow(run_partition, "message string"))
        return [json.loads(r[0]) for r in rows if r[0] is not None]

    def collect(self, frame: Any) -> list[Any]:
        try:
            return list(frame.collect())
        except TxnEngineError:
            raise
        except Exception as exc:
            text = str(exc)
            # the task's own error is the last "SomeError: ..." line of the worker traceback
            causes = _ERROR_LINE.findall(text)
            cause = causes[-1].strip() if causes else text[:500]
            message = (
                f"{self.what} of {redact_uri(self.uri)}: the Spark job failed, nothing was "
                f"committed and its files are removed: {cause}"
            )
            if "StorageError" in cause or "OSError" in cause:
                raise StorageError(message) from exc
            raise InvalidOperationError(message) from exc


def _removed_ids(op: Operation) -> tuple[int, ...]:
    if isinstance(op, Delete):
        return op.deleted_fragment_ids
    if isinstance(op, Update):
        return op.removed_fragment_ids
    return ()


def _referenced_files(txn: Transaction) -> set[str]:
    """Deletion file paths and data file names (relative to ``data/``) the landed
    transaction references among what it adds."""
    op = txn.operation
    out: set[str] = set()
    if isinstance(op, (Delete, Update)):
        for frag in op.updated_fragments:
            if frag.deletion_file is not None:
                out.add(deletion_file_path(frag.id, frag.deletion_file.to_proto()))
    if isinstance(op, Update):
        out |= {f.path for frag in op.new_fragments for f in frag.files}
    return out


def _marker(key: str, path: str) -> str:
    return f"{DML_STAGING_DIR}/{key}{_SEP}{urllib.parse.quote(path, safe='')}"


def _mark_deletion_file(storage: Storage, key: str, path: str) -> None:
    storage.put(_marker(key, path), b"")


def _record(key: str) -> str:
    """The object that says plan ``key`` is open (its tasks may still write)."""
    return f"{DML_STAGING_DIR}/{key}.open"


def _remove_marked(storage: Storage, key: str, keep: set[str]) -> int:
    """Delete the deletion files marked for ``key`` (not in ``keep``) and their markers."""
    removed = 0
    prefix = f"{key}{_SEP}"
    try:
        names = [n for n in storage.list(DML_STAGING_DIR) if n.startswith(prefix)]
    except (StorageError, OSError) as exc:
        _log.warning("listing %s failed: %r", DML_STAGING_DIR, exc)
        return 0
    for name in names:
        path = urllib.parse.unquote(name[len(prefix) :])
        try:
            if _DELETION_PATH.fullmatch(path) and path not in keep:
                try:
                    storage.delete(path)
                    removed += 1
                except ObjectNotFoundError:
                    pass
            storage.delete(f"{DML_STAGING_DIR}/{name}")
        except (StorageError, OSError) as exc:
            _log.warning("could not remove %s: %r", path, exc)
    return removed


def _discard(storage: Storage, attempt: _Attempt, *, keep: Iterable[str]) -> int:
    """Delete the files ``attempt`` wrote that are not in ``keep``, then its markers, then
    its record, then what a straggling task marked meanwhile (a task that finds the record
    gone after marking removes its own file). Best effort (failures are logged; a later
    sweep of staged writes handles data files). Returns the number of files deleted."""
    keep_set = set(keep)
    removed = _remove_marked(storage, attempt.key, keep_set)
    try:
        storage.delete(_record(attempt.key))
    except ObjectNotFoundError:
        pass
    except (StorageError, OSError) as exc:
        _log.warning("could not remove %s: %r", _record(attempt.key), exc)
    removed += _remove_marked(storage, attempt.key, keep_set)
    if attempt.collector is not None:
        stats = _staging.finalize(storage, attempt.collector.write_key, keep_set)
        removed += stats.files_removed
    return removed


def _offsets_b64(offsets: BitMap) -> str:
    return base64.b64encode(offsets.serialize()).decode()


def _offsets(text: str) -> BitMap:
    return BitMap.deserialize(base64.b64decode(text))


def _addresses(fragment_id: int, offsets: BitMap) -> BitMap64:
    base = fragment_id << 32
    return BitMap64(base | o for o in offsets)


# --------------------------------------------------------------------------- executor side


def _open_lance(uri: str, version: int, lance_options: Mapping[str, str] | None) -> Any:
    import lance

    return lance.dataset(
        uri, version=version, storage_options=dict(lance_options) if lance_options else None
    )


def _delete_rows(
    storage: Storage,
    key: str,
    version: int,
    fragment_id: int,
    fragment_pb: bytes,
    offsets: BitMap,
) -> dict[str, Any]:
    """Write the cumulative deletion vector of one fragment (existing | ``offsets``) and
    return its message: the updated fragment (protobuf, base64) or ``removed``."""
    from txn_engine._proto import table_pb2

    pb = table_pb2.DataFragment()
    pb.ParseFromString(fragment_pb)
    existing = (
        read_deletion_vector(storage, fragment_id, pb.deletion_file)
        if pb.HasField("deletion_file")
        else BitMap()
    )
    total = existing | offsets
    message: dict[str, Any] = {"fragment_id": fragment_id, "offsets": _offsets_b64(offsets)}
    if len(total) >= pb.physical_rows:
        message["removed"] = True
        return message
    deletion = write_deletion_vector(storage, fragment_id, version, total)
    path = deletion_file_path(fragment_id, deletion)
    _mark_deletion_file(storage, key, path)
    if not storage.exists(_record(key)):  # the plan was finalised: a straggling attempt
        storage.delete(path)
        storage.delete(_marker(key, path))
        raise InvalidOperationError(
            f"plan {key} was committed or abandoned while this task attempt was running; "
            "its deletion file was removed"
        )
    pb.deletion_file.CopyFrom(deletion)
    message["fragment"] = base64.b64encode(pb.SerializeToString()).decode()
    return message


def _fragments_message(
    collector: FragmentCollector, table: pa.Table, row_ids: list[int] | None
) -> list[str]:
    """Write ``table`` as new fragments; their metadata (protobuf, base64), with the
    rewritten rows' stable row ids when ``row_ids`` is given."""
    if not table.num_rows:
        return []
    written = collector.write_batches(table.to_batches())
    out = []
    ids = row_ids
    for text in written:
        frag = Fragment.from_lance_json(text)
        if ids is not None:
            part, ids = ids[: frag.physical_rows], ids[frag.physical_rows :]
            frag = attrs.evolve(frag, row_id_sequence=encode_row_id_sequence(part))
        out.append(base64.b64encode(frag.to_proto().SerializeToString()).decode())
    return out


# --------------------------------------------------------------------------- planning


def _table_field_ids(snapshot: Dataset) -> dict[str, int]:
    return {f.name: f.id for f in snapshot.manifest_pb.fields if f.parent_id == -1}


def _stable_row_ids(snapshot: Dataset) -> bool:
    return bool(snapshot.manifest_pb.reader_feature_flags & FLAG_STABLE_ROW_IDS)


def _quote(name: str) -> str:
    return name if name.isidentifier() else '"' + name.replace('"', '""') + '"'


def _assemble(
    messages: Iterable[dict[str, Any]],
) -> tuple[list[Fragment], list[int], BitMap64, list[Fragment], list[int]]:
    """(updated fragments, removed ids, affected row addresses, new fragments, inserted
    key hashes) from the tasks' messages."""
    updated: list[Fragment] = []
    removed: list[int] = []
    affected = BitMap64()
    new: list[Fragment] = []
    hashes: list[int] = []
    from txn_engine._proto import table_pb2

    for message in messages:
        for change in message.get("changes", ()):
            fid = int(change["fragment_id"])
            affected |= _addresses(fid, _offsets(change["offsets"]))
            if change.get("removed"):
                removed.append(fid)
            else:
                pb = table_pb2.DataFragment()
                pb.ParseFromString(base64.b64decode(change["fragment"]))
                updated.append(Fragment.from_proto(pb))
        for text in message.get("new_fragments", ()):
            pb = table_pb2.DataFragment()
            pb.ParseFromString(base64.b64decode(text))
            new.append(Fragment.from_proto(pb))
        hashes.extend(int(h) for h in message.get("inserted", ()))
    updated.sort(key=lambda f: f.id)
    removed.sort()
    return updated, removed, affected, new, hashes


def _plan_delete(
    ctx: _Context, snapshot: Dataset, attempts: list[_Attempt], condition: str
) -> _Planned:
    attempt = ctx.new_attempt(data_schema=None)
    attempts.append(attempt)
    version = snapshot.version
    uri, lance_options, storage_options = ctx.uri, ctx.lance_options, dict(ctx.storage_options)
    key = attempt.key

    def task(_index: int, group: list[tuple[int, bytes]]) -> list[str]:
        storage = open_storage(uri, storage_options or None)
        lds = _open_lance(uri, version, lance_options)
        changes = []
        for fid, pb in group:
            matched = lds.get_fragment(fid).to_table(
                columns=[], filter=condition, with_row_address=True
            )
            offsets = BitMap(a & 0xFFFFFFFF for a in matched.column(_ROWADDR).to_pylist())
            if offsets:
                changes.append(_delete_rows(storage, key, version, fid, pb, offsets))
        return [json.dumps({"changes": changes})]

    _check_filter(ctx, snapshot, condition)
    messages = ctx.run_job(ctx.groups(snapshot), task, attempt)
    updated, removed, affected, _new, _ = _assemble(messages)
    op = Delete(
        updated_fragments=tuple(updated),
        deleted_fragment_ids=tuple(removed),
        predicate=condition,
        affected_rows=affected,
    )
    return _Planned(Transaction(version, op, properties=ctx.properties), len(affected), 0, 0)


def _check_filter(ctx: _Context, snapshot: Dataset, condition: str | None) -> None:
    """Refuse a bad filter on the driver (pylance parses it against the schema) before
    any task runs."""
    if condition is None:
        return
    try:
        lds = _open_lance(ctx.uri, snapshot.version, ctx.lance_options)
        lds.scanner(columns=[], filter=condition, limit=1, with_row_address=True).to_table()
    except Exception as exc:
        raise InvalidOperationError(
            f"{ctx.what}: {condition!r} is not a Lance filter over this table: {exc}"
        ) from exc


def _plan_update(
    ctx: _Context,
    snapshot: Dataset,
    attempts: list[_Attempt],
    values: Mapping[str, str],
    where: str | None,
) -> _Planned:
    schema = snapshot.schema
    unknown = [c for c in values if c not in schema.names]
    if unknown:
        raise InvalidOperationError(f"update: no column(s) {unknown} in the table")
    exprs = {name: values.get(name, _quote(name)) for name in schema.names}
    try:
        lds = _open_lance(ctx.uri, snapshot.version, ctx.lance_options)
        lds.scanner(columns=exprs, filter=where, limit=1).to_table()
    except Exception as exc:
        raise InvalidOperationError(f"update: pylance refused the expressions: {exc}") from exc
    attempt = ctx.new_attempt(data_schema=schema)
    attempts.append(attempt)
    collector = attempt.collector
    assert collector is not None
    version = snapshot.version
    uri, lance_options, storage_options = ctx.uri, ctx.lance_options, dict(ctx.storage_options)
    stable = _stable_row_ids(snapshot)
    key = attempt.key

    def task(_index: int, group: list[tuple[int, bytes]]) -> list[str]:
        storage = open_storage(uri, storage_options or None)
        lds = _open_lance(uri, version, lance_options)
        changes = []
        tables = []
        row_ids: list[int] = []
        for fid, pb in group:
            scanned = lds.get_fragment(fid).to_table(
                columns=exprs, filter=where, with_row_address=True, with_row_id=stable
            )
            if not scanned.num_rows:
                continue
            offsets = BitMap(a & 0xFFFFFFFF for a in scanned.column(_ROWADDR).to_pylist())
            tables.append(
                pa.Table.from_arrays(
                    [scanned.column(n).cast(schema.field(n).type) for n in schema.names],
                    schema=schema,
                )
            )
            if stable:
                row_ids.extend(scanned.column("_rowid").to_pylist())
            changes.append(_delete_rows(storage, key, version, fid, pb, offsets))
        rows = pa.concat_tables(tables) if tables else schema.empty_table()
        new = _fragments_message(collector, rows, row_ids if stable else None)
        return [json.dumps({"changes": changes, "new_fragments": new})]

    messages = ctx.run_job(ctx.groups(snapshot), task, attempt)
    updated, removed, affected, new, _ = _assemble(messages)
    ids = _table_field_ids(snapshot)
    op = Update(
        removed_fragment_ids=tuple(removed),
        updated_fragments=tuple(updated),
        new_fragments=tuple(new),
        fields_modified=sorted(ids[c] for c in values),
        affected_rows=affected,
    )
    rows = len(affected)
    read = {READ_PREDICATE: where or "", **ctx.properties}  # what it read (serializable)
    return _Planned(Transaction(version, op, properties=read), 0, rows, 0)
