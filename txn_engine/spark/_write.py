"""A distributed write: plan on the driver, write fragments on executors, commit once.

This module does not import pyspark; it is the engine behind the ``txn_lance`` data
source and the commit-hook API for jobs that write fragments themselves (``mapInArrow``,
``foreachPartition``, ...). The life of a write:

1. **plan** (driver): :meth:`FragmentCollector.plan` pins the read version (the latest
   version *now*, 0 when there is no dataset), fixes the target Arrow schema, draws a write
   id and the transaction uuid, and records the write under ``_txn_engine/spark/``.
2. **write** (executors): :meth:`FragmentCollector.write_batches` writes Lance data files
   with pylance and marks each one as produced by this write before returning its
   fragment metadata (JSON).
3. **commit** (driver): :meth:`FragmentCollector.commit` builds ONE Append or Overwrite
   at the pinned read version and commits it through :func:`txn_engine.commit.commit`
   (conflict detection and rebase happen there). The transaction carries the write id;
   a commit whose outcome is unknown is retried and a retry that finds the transaction
   already in the history reports that version instead of committing twice. Files this
   write produced that the transaction does not reference (failed or speculative task
   attempts) are deleted.
4. **abort** (driver): :meth:`FragmentCollector.abort` deletes every file the write
   produced, unless its transaction turns out to have landed.

The steps live in modules of their own: ``_write_plan`` (identity, storage, the pinned read
version and target schema), ``_merge_schema`` and ``_replace_where`` (those two options),
``_write_commit`` (the driver's commit retries and its report) and ``_fragments`` (fragment
metadata); this module ties them together in :class:`FragmentCollector`.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid as uuid_mod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import pyarrow as pa  # type: ignore[import-untyped]

from txn_engine.conflicts.isolation import READ_PREDICATE
from txn_engine.conflicts.rebase import options_for
from txn_engine.errors import InvalidOperationError
from txn_engine.model import Fragment, LanceField
from txn_engine.ops import Append, Operation, Overwrite, Update
from txn_engine.redact import redact_uri
from txn_engine.retry import RetryPolicy
from txn_engine.spark import _staging
from txn_engine.spark._fragments import (
    FragmentLike,
    _file_names,
    _fragment_json,
    _landed_files,
    fragments_summary,
)
from txn_engine.spark._merge_schema import _merge_schema_retry, merge_schema_operation
from txn_engine.spark._options import (
    DEFAULT_STAGING_RETENTION_SECONDS,
    WriteOptions,
    commit_retry_policy,
)
from txn_engine.spark._replace_where import (
    check_replace_where_batch,
    replace_where_rows,
    replace_where_update,
)
from txn_engine.spark._write_commit import SparkCommitResult, commit_until_known, report_commit
from txn_engine.spark._write_plan import (
    WRITE_ID_PROPERTY,
    WriteMode,
    _landed_before,
    _lease_read_version,
    _open,
    _pin,
    _sweep_old_writes,
    _uuid_for,
    check_lossless,
)
from txn_engine.spark._write_tasks import (
    conform_batch,
    record_marked_fragments,
    write_marked_fragments,
)
from txn_engine.storage import open_storage
from txn_engine.storage.base import Storage
from txn_engine.transaction import COMMIT_MESSAGE_KEY, Transaction

if TYPE_CHECKING:
    from txn_engine.commit import CommitResult
    from txn_engine.dataset import Dataset
    from txn_engine.leases import Lease

__all__ = [
    "FRAGMENT_COLUMN",
    "WRITE_ID_PROPERTY",
    "FragmentCollector",
    "SparkCommitResult",
    "WriteMode",
    "check_lossless",
    "commit_fragments",
    "find_write",
    "sweep_staged_writes",
]

_log = logging.getLogger("txn_engine.spark")

#: Column name (and Spark DDL ``"fragment string"``) of the batches
#: :meth:`FragmentCollector.map_in_arrow` yields.
FRAGMENT_COLUMN = "fragment"


@attrs.frozen(eq=False)
class FragmentCollector:
    """A planned distributed write to the Lance dataset at ``uri``; picklable, so it can
    be shipped to executors.

    Create it on the driver with :meth:`plan`; call :meth:`write_batches` (or
    :meth:`map_in_arrow`, or :meth:`record_fragments` for fragments written another
    way) on executors; call :meth:`commit` with every fragment the successful tasks
    returned, or :meth:`abort`, on the driver.
    """

    uri: str = attrs.field(repr=redact_uri)  # no password of a URI in a repr
    mode: WriteMode
    write_id: str
    uuid: str
    write_key: str
    read_version: int
    schema: pa.Schema
    options: WriteOptions
    already_committed_version: int | None = None
    #: the lease pinning ``read_version`` while the job runs (released by commit/abort)
    lease_path: str | None = None
    #: ``mergeSchema``: the columns this append adds to the table (committed with the rows
    #: in one Merge; the data files are written with fresh field ids, remapped at commit)
    added_columns: tuple[str, ...] = ()

    # ------------------------------------------------------------------ planning

    @classmethod
    def plan(
        cls,
        uri: str,
        *,
        mode: WriteMode = "append",
        schema: pa.Schema,
        options: WriteOptions | None = None,
        **option_values: Any,
    ) -> FragmentCollector:
        """Plan a write on the driver: pin the read version now, fix the target schema.

        ``schema`` is the schema of the data to write. For an append to an existing
        dataset the data is written with the dataset's schema (columns matched by name and
        cast, e.g. ``large_string`` to ``string``); the column names must be the same set,
        and every cast must be lossless (:func:`check_lossless`: no string into int64, no
        narrowing).
        For ``mode="overwrite"``, and for an append that creates the dataset, ``schema``
        becomes the table schema. Options come as ``options=WriteOptions(...)`` or as its
        field names (``max_rows_per_file=...``, ``commit_message=...``, ...).

        Raises InvalidOperationError when the columns do not match the dataset, naming
        the column and both types when a cast would lose data.
        """
        if mode not in ("append", "overwrite"):
            raise InvalidOperationError(f"mode must be 'append' or 'overwrite', got {mode!r}")
        if options is None:
            options = WriteOptions(**option_values)
        elif option_values:
            options = attrs.evolve(options, **option_values)
        commit_retry_policy(options)  # fail on bad retry options before anything is written
        if options.replace_where is not None and mode != "overwrite":
            raise InvalidOperationError(
                "replaceWhere replaces rows: use it with mode 'overwrite' (an append adds rows)"
            )
        generated = options.write_id is None
        write_id = str(uuid_mod.uuid4()) if options.write_id is None else options.write_id
        txn_uuid = _uuid_for(write_id, generated)
        key = _staging.new_write_key()
        storage = _open(uri, options)
        pinned = _pin(storage, uri, mode, schema, options)
        read_version, target = pinned.read_version, pinned.schema
        if pinned.added_columns:
            # the new files must have the table's file format (written as a new schema)
            options = attrs.evolve(options, data_storage_version=pinned.data_storage_version)
        collector = cls(
            uri=uri,
            mode=mode,
            write_id=write_id,
            uuid=txn_uuid,
            write_key=key,
            read_version=read_version,
            schema=target,
            options=options,
            lease_path=_lease_read_version(storage, read_version),
            added_columns=pinned.added_columns,
        )
        if not generated and read_version > 0:
            landed = _landed_before(storage, txn_uuid, read_version, options)
            if landed is not None:
                _log.info(
                    "write id %s already landed as version %d; this write commits nothing",
                    write_id,
                    landed.version,
                )
                return attrs.evolve(collector, already_committed_version=landed.version)
        if options.sweep_on_plan:
            _sweep_old_writes(storage, uri, options)
        collector.write_record(storage)
        return collector

    def write_record(self, storage: Storage, **extra: Any) -> None:
        """Record this write under ``_txn_engine/spark/`` (its identity and read version,
        plus ``extra``) before any of its files is written: the sweep finds the files of a
        write whose driver died through it."""
        record = {
            "write_id": self.write_id,
            "uuid": self.uuid,
            "read_version": self.read_version,
            "mode": self.mode,
            "planned_at": time.time(),
        }
        _staging.write_record(storage, self.write_key, {**record, **extra})

    @property
    def creates_dataset(self) -> bool:
        """True when the commit creates the dataset (nothing existed at plan time)."""
        return self.read_version == 0

    def open_storage(self) -> Storage:
        """txn_engine's storage for the dataset (``storage_factory`` if one was given)."""
        return _open(self.uri, self.options)

    # ------------------------------------------------------------------ executors

    def conform(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` with the target schema: columns picked by name, in the target order,
        cast where the types differ. Raises InvalidOperationError for a missing column or
        a null in a non-nullable one."""
        return conform_batch(batch, self.schema)

    def write_batches(self, batches: Iterable[pa.RecordBatch]) -> list[str]:
        """Write ``batches`` as Lance data files (a new fragment every
        ``max_rows_per_file`` rows) and return the fragments' metadata as JSON strings.

        Every data file is marked as produced by this write as soon as it is complete, so
        :meth:`abort` and the post-commit clean-up find it even if this task fails later.
        Writes nothing (and returns ``[]``) when the write id had already landed at plan
        time, or when ``batches`` is empty.
        """
        if self.already_committed_version is not None:
            return []
        return write_marked_fragments(
            batches,
            storage=self.open_storage(),
            uri=self.uri,
            schema=self.schema,
            options=self.options,
            write_key=self.write_key,
            write_id=self.write_id,
            append=self._writes_table_ids,
            conform=self.conform,
            check=self.check_replace_where,
        )

    def check_replace_where(self, batch: pa.RecordBatch) -> None:
        """For ``replaceWhere``: refuse ``batch`` unless every row satisfies the predicate
        (Delta's constraint check: a row the predicate does not select would survive the
        next replace of the same slice, so it is an error, not a silent extra row). The
        predicate is evaluated by pylance on the batch (an in-memory Lance table); a row
        where it is false or null counts. Raises InvalidOperationError naming the predicate
        and the number of such rows; the task fails and nothing of the write lands."""
        predicate = self.options.replace_where
        if predicate is None or not batch.num_rows:
            return
        check_replace_where_batch(predicate, batch, self.uri)

    def record_fragments(self, fragments: Iterable[FragmentLike]) -> list[str]:
        """Mark fragments written by other means (e.g. your own
        ``lance.fragment.write_fragments`` call into this dataset) as produced by this
        write, so abort and the post-commit clean-up know them; returns their JSON."""
        return record_marked_fragments(
            self.open_storage(),
            fragments,
            write_key=self.write_key,
            write_id=self.write_id,
            uri=self.uri,
        )

    def map_in_arrow(self) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
        """A function for ``df.mapInArrow(fn, "fragment string")``: writes the partition
        and yields one row per fragment (column ``fragment``, the JSON metadata)."""

        def write_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            fragments = self.write_batches(batches)
            yield pa.RecordBatch.from_arrays(
                [pa.array(fragments, pa.string())], names=[FRAGMENT_COLUMN]
            )

        return write_partition

    # ------------------------------------------------------------------ driver

    @property
    def _keeps_schema(self) -> bool:
        """Whether the data is written with the table's schema (append, replaceWhere)."""
        return self.mode == "append" or self.options.replace_where is not None

    @property
    def _writes_table_ids(self) -> bool:
        """Whether pylance writes the files with the table's field ids (an append or
        replaceWhere into an existing table that brings no new column); otherwise the
        files get fresh ids (new schema; ``mergeSchema`` remaps them at commit)."""
        return not self.creates_dataset and self._keeps_schema and not self.added_columns

    def transaction(self, fragments: Iterable[FragmentLike]) -> Transaction:
        """The single transaction this write commits (Append, or Overwrite when the mode
        is overwrite or the write creates the dataset, an Update for ``replaceWhere``, a
        Merge for an append that adds columns with ``mergeSchema``), at the pinned read
        version.

        For ``replaceWhere`` this scans the pinned version for the matching rows and writes
        their deletion files (one per affected fragment) before returning."""
        jsons = [_fragment_json(f) for f in fragments]
        if self.added_columns and not self.creates_dataset:
            from txn_engine.dataset import Dataset

            snapshot = Dataset.open(self.open_storage(), version=self.read_version)
            return self._merge_schema_transaction(snapshot, jsons)
        frags = tuple(Fragment.from_lance_json(data) for data in jsons)
        operation: Append | Overwrite | Update
        if self.mode == "append" and not self.creates_dataset:
            operation = Append(fragments=frags)
        elif self.options.replace_where is not None and not self.creates_dataset:
            operation = self._replace_where(frags)
        else:
            from txn_engine.format.schema import arrow_to_fields

            fields = tuple(LanceField.from_proto(f) for f in arrow_to_fields(self.schema))
            operation = Overwrite(
                fragments=frags,
                schema=fields,
                schema_metadata={
                    k.decode() if isinstance(k, bytes) else str(k): v
                    for k, v in (self.schema.metadata or {}).items()
                },
            )
        return self._transaction_of(operation, self.read_version)

    def _transaction_of(self, operation: Operation, read_version: int) -> Transaction:
        """``operation`` as this write's transaction: its uuid, write id and properties."""
        properties = dict(self.options.properties)
        if self.options.commit_message is not None:
            properties[COMMIT_MESSAGE_KEY] = self.options.commit_message
        properties[WRITE_ID_PROPERTY] = self.write_id
        if isinstance(operation, Update) and self.options.replace_where is not None:
            properties[READ_PREDICATE] = self.options.replace_where  # what it read
        return Transaction(
            read_version=read_version,
            operation=operation,
            uuid=self.uuid,
            properties=properties,
        )

    def _merge_schema_transaction(
        self, snapshot: Dataset, jsons: Sequence[Mapping[str, Any]]
    ) -> Transaction:
        """``mergeSchema`` in one version: this write's transaction of the Merge at
        ``snapshot`` that adds the data's new columns and its fragments ``jsons``
        (:func:`~txn_engine.spark._merge_schema.merge_schema_operation`). Raises
        RetryableConflictError when the table at ``snapshot`` no longer fits the files:
        run the job again, it plans against the new schema."""
        operation = merge_schema_operation(
            snapshot, jsons, schema=self.schema, uri=self.uri, read_version=self.read_version
        )
        return self._transaction_of(operation, snapshot.version)

    def _replace_where(self, new_fragments: tuple[Fragment, ...]) -> Update:
        """An Update at the pinned version: the rows matching ``replace_where`` deleted
        (cumulative deletion vectors; fragments left empty removed) and ``new_fragments``
        added. The deleted rows travel as ``affected_rows``, so a concurrent delete of other
        rows of the same fragments rebases instead of conflicting."""
        predicate = self.options.replace_where
        assert predicate is not None
        addresses = replace_where_rows(
            self.uri, self.read_version, predicate, self.options.lance_storage_options
        )
        storage = self.open_storage()
        return replace_where_update(storage, self.read_version, addresses, new_fragments)

    def find_landed(self, storage: Storage | None = None) -> int | None:
        """The version this write's transaction created, if it is in the history."""
        landed = self._landed(storage or self.open_storage())
        return None if landed is None else landed.version

    def _landed(self, storage: Storage) -> _staging.Landed | None:
        return _staging.find_landed(storage, self.uuid, after_version=self.read_version)

    def commit(self, fragments: Iterable[FragmentLike]) -> SparkCommitResult:
        """Commit the fragments of the successful tasks as one transaction (driver side).

        Idempotent: if this write's transaction is already in the history (an earlier
        call whose response was lost, a re-run of the commit) its version is returned and
        nothing new is committed. A commit whose outcome is unknown (storage failure at the
        wrong moment) is retried up to ``commit_attempts`` times, each retry first looking
        for the transaction. Afterwards, files this write produced that the transaction
        does not reference are deleted (best effort, logged).

        Raises the commit errors of :func:`txn_engine.commit.commit`
        (IncompatibleTransactionError, RetriesExhaustedError, ...), and
        CommitStateUnknownError when the outcome is still unknown after every attempt: then
        do not delete anything; call :meth:`commit` again later or :meth:`find_landed`.
        """
        started = time.perf_counter()
        jsons, referenced, rows = fragments_summary(fragments)
        storage = self.open_storage()
        commit_seconds = 0.0
        attempts = 0
        already = False
        version: int | None
        if self.already_committed_version is not None:
            version, already = self.already_committed_version, True
            keep: set[str] = set()
        elif not jsons and self.mode == "append" and not self.creates_dataset:
            version, keep = None, set()
        else:
            txn = self.transaction(jsons)
            version, already, attempts, commit_seconds, keep = self._commit_once(
                storage, txn, referenced, jsons
            )
        stats = _staging.finalize(storage, self.write_key, keep, extra_files=referenced - keep)
        result = SparkCommitResult(
            write_id=self.write_id,
            uuid=self.uuid,
            mode=self.mode,
            read_version=self.read_version,
            version=version,
            fragments=len(jsons),
            rows=rows,
            already_committed=already,
            attempts=attempts,
            commit_seconds=commit_seconds,
            total_seconds=time.perf_counter() - started,
            files_removed=stats.files_removed,
        )
        report_commit(result, self.options.commit_report)
        self._release_lease(storage)
        return result

    def _release_lease(self, storage: Storage) -> None:
        """Drop the lease taken at planning (best effort: it expires anyway)."""
        if self.lease_path is not None:
            with contextlib.suppress(Exception):
                storage.delete(self.lease_path)

    def _commit_once(
        self,
        storage: Storage,
        txn: Transaction,
        referenced: set[str],
        jsons: Sequence[Mapping[str, Any]],
    ) -> tuple[int, bool, int, float, set[str]]:
        """Commit ``txn``; retry (up to ``commit_attempts`` calls) while the outcome is
        unknown. txn_engine's commit finds the transaction by uuid among the versions it
        checks, so a retry of a commit that did land reports it instead of landing twice.
        Returns (version, already_committed, calls, seconds in commit, files to keep)."""
        policy = self._retry_policy()
        return commit_until_known(
            lambda: self._commit_call(storage, txn, jsons, policy),
            lambda: self._landed(storage),
            commit_attempts=self.options.commit_attempts,
            referenced=referenced,
            write_id=self.write_id,
            uri=self.uri,
            read_version=self.read_version,
            operation=txn.kind,
        )

    def _commit_call(
        self,
        storage: Storage,
        txn: Transaction,
        jsons: Sequence[Mapping[str, Any]],
        policy: RetryPolicy | None,
    ) -> CommitResult:
        """One call of txn_engine's commit for ``txn`` (at the pinned read version, so a
        transaction that already landed is found by its uuid). A ``mergeSchema`` Merge that
        a concurrent commit preempts (a Merge conflicts with every concurrent Append,
        Delete, Update, ...) is re-planned on the latest version: the table's fragments
        then plus this write's, no data rewritten; within
        :data:`~txn_engine.spark._merge_schema.MERGE_SCHEMA_RETRY`
        (``RetriesExhaustedError`` when it runs out)."""
        from txn_engine.commit import commit as txn_commit
        from txn_engine.commit import replan_and_commit

        options = options_for(
            None, self.options.isolation, self.uri, dict(self.options.lance_storage_options) or None
        )
        if not self.added_columns or self.creates_dataset:
            lease = self._resumed(storage, txn)
            return txn_commit(
                storage, txn, retry_policy=policy, lease=lease, conflict_options=options
            )
        plans = [txn]

        def plan(snapshot: Dataset) -> Transaction:
            if plans:
                return plans.pop()  # the first plan: the one pinned at planning
            return self._merge_schema_transaction(snapshot, jsons)

        return replan_and_commit(
            storage,
            plan,
            retry_policy=_merge_schema_retry(self.options),
            commit_retry_policy=policy,
            conflict_options=options,
        )

    def _resumed(self, storage: Storage, txn: Transaction) -> Lease | None:
        """The job's lease, taken over for the commit: checked before the manifest create,
        so a job that ran past its lease (or whose lease was removed) gets LeaseExpiredError
        rather than landing files a cleanup may have removed. A lease already released by
        an earlier commit of this same transaction (a retried driver step) is not needed:
        the commit finds the landed version and writes nothing."""
        if self.lease_path is None:
            return None
        from txn_engine.commit import find_transaction
        from txn_engine.errors import LeaseExpiredError
        from txn_engine.leases import Lease

        try:
            return Lease.resume(storage, self.lease_path, owner="txn_engine.spark write")
        except LeaseExpiredError:
            if find_transaction(storage, txn.uuid, since_version=self.read_version) is None:
                raise
            return None

    def _retry_policy(self) -> RetryPolicy | None:
        return commit_retry_policy(self.options)

    def abort(self, fragments: Iterable[FragmentLike] = ()) -> int:
        """Delete every data file this write produced (driver side, after a failed job).

        If the write's transaction turns out to be in the history (a commit whose outcome
        was reported as unknown), the files it references are kept. If the history since
        the read version cannot be read, or is incomplete (versions cleaned up), nothing is
        deleted (a later :func:`sweep_staged_writes` decides). A file that any kept version
        references is never deleted. Returns the number of data files deleted.
        """
        extra = {name for f in fragments for name in _file_names(_fragment_json(f))}
        storage = self.open_storage()
        try:
            outcome = _staging.settle(
                storage,
                self.uuid,
                read_version=self.read_version,
                write_id=self.write_id,
                write_id_property=WRITE_ID_PROPERTY,
            )
        except Exception as exc:
            outcome = _staging.Outcome(None, False, f"cannot read the history: {exc!r}")
        if not outcome.known:
            _log.warning(
                "abort of write %s: whether it landed cannot be told (%s); keeping its files "
                "for sweep_staged_writes",
                self.write_id,
                outcome.reason,
            )
            return 0  # the lease stays until it expires: its files stay protected too
        self._release_lease(storage)
        landed = outcome.landed
        keep = set() if landed is None else _landed_files(landed.transaction)
        stats = _staging.finalize(storage, self.write_key, keep, extra_files=extra)
        _log.info(
            "txn_lance write %s aborted: %d data file(s) removed%s",
            self.write_id,
            stats.files_removed,
            "" if landed is None else f" (its transaction had landed as version {landed.version})",
        )
        return stats.files_removed


def commit_fragments(
    uri: str,
    fragments: Iterable[FragmentLike],
    *,
    mode: WriteMode = "append",
    read_version: int,
    write_id: str,
    schema: pa.Schema | None = None,
    storage_options: Mapping[str, Any] | None = None,
    properties: Mapping[str, str] | None = None,
    commit_message: str | None = None,
    retry_policy: Mapping[str, Any] | None = None,
    commit_attempts: int = 3,
) -> SparkCommitResult:
    """Commit fragments a job wrote itself, once, with exactly-once semantics.

    For jobs that pinned ``read_version`` themselves when they planned the write and carry
    a job-level ``write_id``: calling this twice with the same ``write_id`` commits once
    (the second call finds the first in the versions after ``read_version``); files among
    ``fragments`` that the landed transaction does not reference are then deleted.
    ``schema`` is required for ``mode="overwrite"`` or when ``read_version`` is 0
    (creation). Files of failed tasks are not known here; use :class:`FragmentCollector`
    to have them cleaned up too.
    """
    if schema is None:
        if mode == "overwrite" or read_version == 0:
            raise InvalidOperationError("schema is required to overwrite or create a dataset")
        schema = pa.schema([])
    options = WriteOptions(
        storage_options=dict(storage_options or {}),
        properties=dict(properties or {}),
        commit_message=commit_message,
        retry_policy=dict(retry_policy or {}),
        write_id=write_id,
        commit_attempts=commit_attempts,
    )
    collector = FragmentCollector(
        uri=uri,
        mode=mode,
        write_id=write_id,
        uuid=_uuid_for(write_id, generated=False),
        write_key=_staging.new_write_key(),
        read_version=read_version,
        schema=schema,
        options=options,
    )
    return collector.commit(fragments)


def find_write(
    uri: str,
    write_id: str,
    *,
    after_version: int = 0,
    storage_options: Mapping[str, Any] | None = None,
) -> int | None:
    """The version created by the write with job-level identity ``write_id`` (looking at
    versions newer than ``after_version``), or None if there is none."""
    storage = open_storage(uri, dict(storage_options or {}) or None)
    landed = _staging.find_landed(
        storage, _uuid_for(write_id, generated=False), after_version=after_version
    )
    return None if landed is None else landed.version


def sweep_staged_writes(
    uri: str,
    *,
    older_than_seconds: float = DEFAULT_STAGING_RETENTION_SECONDS,
    storage_options: Mapping[str, Any] | None = None,
) -> _staging.SweepResult:
    """Remove the leftovers of Spark writes planned more than ``older_than_seconds`` ago:
    data files of task attempts that finished after their write was committed or aborted,
    and files of writes whose driver died (kept if their transaction landed). Writes run
    it automatically when they are planned; run it yourself after a crashed driver."""
    storage = open_storage(uri, dict(storage_options or {}) or None)
    return _staging.sweep(
        storage, older_than_seconds=older_than_seconds, write_id_property=WRITE_ID_PROPERTY
    )
