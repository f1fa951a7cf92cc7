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
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import time
import uuid as uuid_mod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import attrs
import pyarrow as pa  # type: ignore[import-untyped]

from txn_engine import jsontext
from txn_engine.conflicts.isolation import READ_PREDICATE
from txn_engine.conflicts.rebase import options_for
from txn_engine.errors import (
    CommitStateUnknownError,
    DatasetNotFoundError,
    InvalidOperationError,
    SchemaMismatchError,
    StorageError,
    TxnEngineError,
)
from txn_engine.model import Fragment, LanceField
from txn_engine.ops import Append, Operation, Overwrite, Update
from txn_engine.redact import redact_uri
from txn_engine.retry import RetryPolicy
from txn_engine.schema_check import is_lossless
from txn_engine.spark import _staging
from txn_engine.spark._options import DEFAULT_STAGING_RETENTION_SECONDS, WriteOptions
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
    "commit_fragments",
    "find_write",
    "sweep_staged_writes",
]

_log = logging.getLogger("txn_engine.spark")

#: Transaction property that carries a write's job-level identity.
WRITE_ID_PROPERTY = "txn_engine.spark.write_id"
#: Column name (and Spark DDL ``"fragment string"``) of the batches
#: :meth:`FragmentCollector.map_in_arrow` yields.
FRAGMENT_COLUMN = "fragment"
#: Backoff between the driver's commit calls whose outcome was unknown (a storage failure
#: at the wrong moment; each call first looks for the transaction by its uuid): a fixed
#: 50 ms unit, slots doubling from 4, at most 2 s a sleep. Its ``max_attempts`` is replaced
#: by the ``commit_attempts`` write option.
UNKNOWN_OUTCOME_RETRY = RetryPolicy(
    max_attempts=3,
    adaptive=False,
    initial_unit=0.05,
    slot_growth="exponential",
    max_slots=None,
    max_delay=2.0,
)
#: Re-planning budget of a ``mergeSchema`` append's Merge when concurrent commits preempt it
#: (every concurrent Append does; a re-plan re-reads the latest manifest, no data is
#: rewritten): 11 plans (``commit_attempts`` when larger) within 60 s, the commit loop's
#: backoff between.
MERGE_SCHEMA_RETRY = RetryPolicy(max_attempts=11, deadline=60.0)
#: Namespace for turning a caller-chosen write id into a transaction uuid.
_WRITE_ID_NAMESPACE = uuid_mod.UUID("5b0d8a52-61f4-4c55-9d8e-2f3b1a7c9e01")

WriteMode = Literal["append", "overwrite"]
FragmentLike = Any  # dict | str | bytes | lance.fragment.FragmentMetadata


def _chain(first: pa.RecordBatch, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield first
    yield from rest


def _uuid_for(write_id: str, generated: bool) -> str:
    if generated:
        return write_id
    return str(uuid_mod.uuid5(_WRITE_ID_NAMESPACE, write_id))


def _load_factory(spec: str) -> Callable[[str, Mapping[str, Any]], Storage]:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise InvalidOperationError(
            f"storage_factory must look like 'package.module:callable', got {spec!r}"
        )
    factory = getattr(importlib.import_module(module_name), attr)
    if not callable(factory):
        raise InvalidOperationError(f"storage_factory {spec!r} is not callable")
    return factory  # type: ignore[no-any-return]


def _fragment_json(value: FragmentLike) -> dict[str, Any]:
    """A fragment as the dict ``FragmentMetadata.to_json()`` returns."""
    if hasattr(value, "to_json"):
        value = value.to_json()
    if isinstance(value, (str, bytes)):
        try:
            value = jsontext.loads(value)
        except ValueError as exc:
            raise InvalidOperationError(f"fragment metadata is not JSON: {exc}") from exc
    if not isinstance(value, Mapping):
        raise InvalidOperationError(
            f"expected fragment metadata (dict, JSON text or FragmentMetadata), "
            f"got {type(value).__name__}"
        )
    return dict(value)


def _file_names(fragment: Mapping[str, Any]) -> list[str]:
    return [str(f["path"]) for f in fragment.get("files", ())]


def fragments_summary(
    fragments: Iterable[FragmentLike],
) -> tuple[list[dict[str, Any]], set[str], int]:
    """Fragments as the dicts ``FragmentMetadata.to_json()`` returns, the data files they
    reference and their rows (what a driver commit works from)."""
    jsons = [_fragment_json(f) for f in fragments]
    referenced = {name for data in jsons for name in _file_names(data)}
    return jsons, referenced, sum(int(data.get("physical_rows") or 0) for data in jsons)


@attrs.frozen
class SparkCommitResult:
    """What a driver commit did.

    ``version`` is the version the write created (also when an earlier attempt had
    already landed it: then ``already_committed`` is True), or None for an append of zero
    rows, which commits nothing. ``commit_seconds`` is the time spent in
    :func:`txn_engine.commit.commit` (conflict checks and rebase included);
    ``total_seconds`` also counts building the transaction and the clean-up of
    unreferenced files. ``attempts`` counts calls of :func:`txn_engine.commit.commit`
    (more than one when an outcome was unknown and the commit was retried);
    ``already_committed`` means the transaction was found in the history instead of being
    landed by the last call.
    """

    write_id: str
    uuid: str
    mode: str
    read_version: int
    version: int | None
    fragments: int
    rows: int
    already_committed: bool
    attempts: int
    commit_seconds: float
    total_seconds: float
    files_removed: int

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


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
        _retry_policy(options)  # fail on bad retry options before anything is written
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
            landed = _staging.find_landed(
                storage,
                txn_uuid,
                after_version=max(0, read_version - options.idempotency_lookback),
            )
            if landed is not None:
                _log.info(
                    "write id %s already landed as version %d; this write commits nothing",
                    write_id,
                    landed.version,
                )
                return attrs.evolve(collector, already_committed_version=landed.version)
        if options.sweep_on_plan:
            try:
                _staging.sweep(
                    storage,
                    older_than_seconds=options.staging_retention_seconds,
                    write_id_property=WRITE_ID_PROPERTY,
                )
            except Exception as exc:
                _log.warning("sweeping old staged writes of %s failed: %r", uri, exc)
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
        if batch.schema.equals(self.schema):
            return batch
        columns = []
        for field in self.schema:
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
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)

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
        import lance
        from lance.progress import FragmentWriteProgress

        storage = self.open_storage()
        key = self.write_key

        class _Marker(FragmentWriteProgress):
            def begin(self, fragment: Any, **kwargs: Any) -> None:
                return None

            def complete(self, fragment: Any, **kwargs: Any) -> None:
                _staging.put_markers(storage, key, _file_names(fragment.to_json()))

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
                batch = self.conform(batch)
                try:
                    self.check_replace_where(batch)
                except InvalidOperationError as exc:
                    refused.append(exc)  # pylance re-raises it wrapped: keep the typed one
                    raise
                yield batch

        reader = pa.RecordBatchReader.from_batches(self.schema, conformed())
        kwargs: dict[str, Any] = {
            "mode": "append" if self._writes_table_ids else "overwrite",
            "max_rows_per_file": self.options.max_rows_per_file,
            "progress": _Marker(),
        }
        if self.options.max_rows_per_group is not None:
            kwargs["max_rows_per_group"] = self.options.max_rows_per_group
        if self.options.max_bytes_per_file is not None:
            kwargs["max_bytes_per_file"] = self.options.max_bytes_per_file
        if self.options.data_storage_version is not None:
            kwargs["data_storage_version"] = self.options.data_storage_version
        if self.options.lance_storage_options:
            kwargs["storage_options"] = dict(self.options.lance_storage_options)
        self._check_open(storage)
        try:
            fragments = lance.fragment.write_fragments(
                reader, self.uri, schema=self.schema, **kwargs
            )
        except Exception:
            if refused:
                raise refused[0] from None
            raise
        out = []
        names: list[str] = []
        for fragment in fragments:
            data = fragment.to_json()
            # the last file of a call is not reported through ``complete``
            _staging.put_markers(storage, key, _file_names(data))
            names.extend(_file_names(data))
            out.append(json.dumps(data))
        self._check_still_open(storage, names)
        return out

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
        import lance

        check = f"({predicate}) IS NOT TRUE"
        try:
            scratch = lance.write_dataset(
                pa.Table.from_batches([batch]), f"memory://replace-where-{uuid_mod.uuid4().hex}"
            )
            outside = scratch.count_rows(filter=check)
        except Exception as exc:  # pylance's parse / planning errors
            raise InvalidOperationError(
                f"replaceWhere {predicate!r} is not a Lance filter over the data written to "
                f"{redact_uri(self.uri)}: {exc}"
            ) from exc
        if outside:
            raise InvalidOperationError(
                f"replaceWhere {predicate!r}: {outside} row(s) of the data written to "
                f"{redact_uri(self.uri)} do not match the predicate (it is false or null for "
                "them); every row a replaceWhere writes must match it. Filter the DataFrame "
                "with the same condition, or widen the predicate; nothing was committed"
            )

    def _check_open(self, storage: Storage) -> None:
        """Refuse to write for a write that was already committed or aborted."""
        if not storage.exists(_staging.record_path(self.write_key)):
            raise InvalidOperationError(
                f"write {self.write_id} to {self.uri} was already committed or aborted (or "
                "was not planned with FragmentCollector.plan); this task writes nothing"
            )

    def _check_still_open(self, storage: Storage, names: Iterable[str]) -> None:
        """After marking: if the write was finalised meanwhile (a straggling attempt),
        remove this attempt's files and fail the attempt."""
        if _staging.task_finished(storage, self.write_key, names):
            raise InvalidOperationError(
                f"write {self.write_id} to {self.uri} was committed or aborted while this "
                "task attempt was writing; its files were removed"
            )

    def record_fragments(self, fragments: Iterable[FragmentLike]) -> list[str]:
        """Mark fragments written by other means (e.g. your own
        ``lance.fragment.write_fragments`` call into this dataset) as produced by this
        write, so abort and the post-commit clean-up know them; returns their JSON."""
        storage = self.open_storage()
        out = []
        names: list[str] = []
        for fragment in fragments:
            data = _fragment_json(fragment)
            _staging.put_markers(storage, self.write_key, _file_names(data))
            names.extend(_file_names(data))
            out.append(json.dumps(data))
        self._check_still_open(storage, names)
        return out

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
        """``mergeSchema`` in one version: a Merge at ``snapshot`` listing every fragment
        of the table unchanged plus the new ones, under the table's schema widened by the
        columns the data adds (nullable, ids above every id in use, dropped columns' ids
        included). The existing fragments have no data file for the new columns, so their
        rows read them as null (pylance 14 reads such a fragment that way).

        The executors wrote the files as a new schema (fresh ids, pre-order from 0); their
        ``fields`` are remapped to the table's ids here, by column path. Raises
        RetryableConflictError when the table at ``snapshot`` no longer fits the files (a
        concurrent commit changed the type of one of the columns, added a non-nullable
        column the data lacks): run the job again, it plans against the new schema."""
        from txn_engine.builder import max_fragment_id
        from txn_engine.errors import RetryableConflictError
        from txn_engine.format.schema import arrow_to_fields, max_field_id
        from txn_engine.ops import Merge

        manifest = snapshot.manifest_pb
        table = snapshot.schema
        for field in table:
            index = self.schema.get_field_index(field.name)
            same = index >= 0 and self.schema.field(index).type.equals(field.type)
            if (index >= 0 and not same) or (index < 0 and not field.nullable):
                raise RetryableConflictError(
                    f"mergeSchema append to {redact_uri(self.uri)}: column {field.name!r} of "
                    f"the table at version {snapshot.version} is {field.type}"
                    f"{'' if field.nullable else ' not null'}; the data files were written "
                    f"for version {self.read_version}'s schema",
                    read_version=self.read_version,
                    conflicting_version=snapshot.version,
                    operation="Merge",
                    remedy="run the write again; it plans against the new schema",
                )
        new = pa.schema([field for field in self.schema if field.name not in table.names])
        added = arrow_to_fields(
            new,
            first_id=max_field_id(manifest) + 1,
            data_storage_version=_data_format(manifest) or "2.2",
        )
        fields = [*manifest.fields, *added]
        wanted = _field_ids_by_path(fields)
        mapping = {
            fresh: wanted[path]
            for path, fresh in _field_ids_by_path(arrow_to_fields(self.schema)).items()
        }
        high = max_fragment_id(manifest)
        next_id = 0 if high is None else high + 1
        appended = []
        for offset, data in enumerate(jsons):
            data = dict(data)
            data["id"] = next_id + offset
            data["files"] = [
                {**f, "fields": [mapping.get(i, i) for i in f.get("fields", ())]}
                for f in data.get("files", ())
            ]
            appended.append(Fragment.from_lance_json(data))
        operation = Merge(
            fragments=(*snapshot.fragments, *appended),
            schema=tuple(LanceField.from_proto(f) for f in [*manifest.fields, *added]),
            schema_metadata=dict(manifest.schema_metadata),
            preserves_nullability=True,
        )
        return self._transaction_of(operation, snapshot.version)

    def _replace_where(self, new_fragments: tuple[Fragment, ...]) -> Update:
        """An Update at the pinned version: the rows matching ``replace_where`` deleted
        (cumulative deletion vectors; fragments left empty removed) and ``new_fragments``
        added. The deleted rows travel as ``affected_rows``, so a concurrent delete of other
        rows of the same fragments rebases instead of conflicting."""
        import lance
        from pyroaring import BitMap, BitMap64

        from txn_engine.format.deletion import read_deletion_vector, write_deletion_vector
        from txn_engine.format.io import read_manifest

        predicate = self.options.replace_where
        assert predicate is not None
        dataset = lance.dataset(
            self.uri,
            version=self.read_version,
            storage_options=dict(self.options.lance_storage_options) or None,
        )
        try:
            matched = dataset.to_table(columns=[], filter=predicate, with_row_address=True)
        except Exception as exc:  # pylance's parse / planning errors
            raise InvalidOperationError(
                f"replaceWhere {predicate!r} is not a Lance filter over {self.uri}: {exc}"
            ) from exc
        addresses = matched.column("_rowaddr").to_pylist()
        by_fragment: dict[int, BitMap] = {}
        for address in addresses:
            by_fragment.setdefault(address >> 32, BitMap()).add(address & 0xFFFFFFFF)
        storage = self.open_storage()
        _, manifest_file = read_manifest(storage, self.read_version)
        pbs = {pb.id: pb for pb in manifest_file.manifest.fragments}
        removed: list[int] = []
        updated: list[Fragment] = []
        for fragment_id, offsets in sorted(by_fragment.items()):
            pb = pbs[fragment_id]
            existing = (
                read_deletion_vector(storage, fragment_id, pb.deletion_file)
                if pb.HasField("deletion_file")
                else BitMap()
            )
            total = existing | offsets
            if len(total) >= pb.physical_rows:
                removed.append(fragment_id)
                continue
            deletion = write_deletion_vector(storage, fragment_id, self.read_version, total)
            copy = type(pb)()
            copy.CopyFrom(pb)
            copy.deletion_file.CopyFrom(deletion)
            updated.append(Fragment.from_proto(copy))
        return Update(
            removed_fragment_ids=tuple(removed),
            updated_fragments=tuple(updated),
            new_fragments=new_fragments,
            affected_rows=BitMap64(addresses),
        )

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
        _log.info(
            "txn_lance %s write %s -> version %s (read version %d): %d fragments, %d rows; "
            "txn_engine commit %.3f s in %d attempt(s), driver commit total %.3f s%s; "
            "%d unreferenced file(s) removed",
            self.mode,
            self.write_id,
            version,
            self.read_version,
            result.fragments,
            rows,
            commit_seconds,
            attempts,
            result.total_seconds,
            " (already committed)" if already else "",
            stats.files_removed,
        )
        if self.options.commit_report:
            _write_report(self.options.commit_report, result.to_json())
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
        retry = attrs.evolve(UNKNOWN_OUTCOME_RETRY, max_attempts=self.options.commit_attempts)
        budget = retry.budget()  # the commit_attempts calls and the sleeps between them
        last: BaseException | None = None
        spent = 0.0
        while True:
            attempt = budget.start_attempt()
            t0 = time.perf_counter()
            try:
                result = self._commit_call(storage, txn, jsons, policy)
            except (CommitStateUnknownError, StorageError) as exc:
                last = exc
            except TxnEngineError:
                raise
            except OSError as exc:  # a raw backend error from a custom storage_factory
                last = exc
            else:
                spent += time.perf_counter() - t0
                keep = (
                    _operation_files(result.transaction) if result.already_committed else referenced
                )
                return result.version, result.already_committed, attempt, spent, keep
            spent += time.perf_counter() - t0
            _log.warning(
                "commit of write %s, call %d: outcome unknown (%r); retrying (a landed "
                "transaction is found by its uuid, never committed twice)",
                self.write_id,
                attempt,
                last,
            )
            if not budget.wait():
                break
        calls_made = budget.attempts
        try:
            landed = self._landed(storage)
        except Exception:  # the history is unreadable too: the outcome stays unknown
            landed = None
        if landed is not None:
            return (
                landed.version,
                True,
                calls_made,
                spent,
                _landed_files(landed.transaction),
            )
        raise CommitStateUnknownError(
            f"the commit of write {self.write_id} to {self.uri} failed {calls_made} time(s) "
            f"with an unknown outcome; last error: {last!r}",
            read_version=self.read_version,
            operation=txn.kind,
            remedy="call commit() again with the same fragments, or find_landed(); do not "
            "delete the data files",
        ) from last

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
        then plus this write's, no data rewritten; within :data:`MERGE_SCHEMA_RETRY`
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
        return _retry_policy(self.options)

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


def _operation_files(txn: Transaction) -> set[str]:
    """Data file paths added by an Append/Overwrite/Update Transaction (empty for other
    kinds)."""
    op = txn.operation
    fragments = op.new_fragments if isinstance(op, Update) else getattr(op, "fragments", ())
    return {f.path for fragment in fragments for f in fragment.files}


def _landed_files(txn: Any) -> set[str]:
    """Data file paths a landed transaction (protobuf) added, Update's new fragments too."""
    if txn.WhichOneof("operation") == "update":
        return {f.path for fragment in txn.update.new_fragments for f in fragment.files}
    return _staging.transaction_data_files(txn)


def _retry_policy(options: WriteOptions) -> RetryPolicy | None:
    """The commit loop's retry policy from the ``retry.*`` options (None: its default)."""
    if not options.retry_policy:
        return None
    try:
        return RetryPolicy(**dict(options.retry_policy))
    except (TypeError, ValueError) as exc:
        raise InvalidOperationError(
            f"bad retry policy options {dict(options.retry_policy)}: {exc}"
        ) from exc


def _open(uri: str, options: WriteOptions) -> Storage:
    if options.namespace and options.table_id:  # commits go through the namespace
        from txn_engine.spark._namespace import namespace_storage

        return namespace_storage(options.namespace, options.table_id, options.storage_options)
    if options.storage_factory:
        return _load_factory(options.storage_factory)(uri, dict(options.storage_options))
    return open_storage(uri, dict(options.storage_options) or None)


@attrs.frozen
class _Pinned:
    """What a write plans against: the read version, the schema the data is written with,
    the columns an append adds (``mergeSchema`` in one version) and, then, the table's
    data file format (the new files must have it)."""

    read_version: int
    schema: pa.Schema
    added_columns: tuple[str, ...] = ()
    data_storage_version: str | None = None


def _pin(
    storage: Storage, uri: str, mode: WriteMode, schema: pa.Schema, options: WriteOptions
) -> _Pinned:
    """The read version (the latest version now) and the target schema."""
    from txn_engine.format.io import latest_version

    try:
        entry = latest_version(storage)
    except DatasetNotFoundError:
        return _Pinned(0, schema)
    if mode == "overwrite" and options.replace_where is None:
        return _Pinned(entry.version, schema)
    from txn_engine.dataset import Dataset

    if options.replace_where is not None and options.merge_schema:
        raise InvalidOperationError("replaceWhere cannot be combined with mergeSchema")

    current = Dataset.open(storage, version=entry.version)
    target = current.schema
    theirs, ours = set(target.names), set(schema.names)
    read_version = entry.version
    if options.merge_schema and theirs < ours:
        check_lossless(schema, target, what=f"cannot append to {uri}")
        if _merges_in_one_version(current.manifest_pb):
            new = [field.with_nullable(True) for field in schema if field.name not in theirs]
            return _Pinned(
                read_version,
                pa.schema([*target, *new], metadata=target.metadata),
                tuple(field.name for field in new),
                _data_format(current.manifest_pb),
            )
        read_version = _add_columns(storage, uri, schema, options)
        target = Dataset.open(storage, version=read_version).schema
        theirs = set(target.names)
    if theirs != ours:
        hint = "" if options.merge_schema else "; new columns need .option('mergeSchema', 'true')"
        missing, unexpected = sorted(theirs - ours), sorted(ours - theirs)
        column = (missing or unexpected)[0]
        raise SchemaMismatchError(
            f"cannot append to {uri}: the data's columns do not match the dataset's "
            f"(missing: {missing}, unexpected: {unexpected}){hint}",
            column=column,
            expected=str(target.field(column).type) if column in theirs else None,
            actual=str(schema.field(column).type) if column in ours else None,
        )
    check_lossless(schema, target, what=f"cannot append to {uri}")
    return _Pinned(read_version, target)


def _merges_in_one_version(manifest: Any) -> bool:
    """Whether ``mergeSchema`` can add the columns and the rows in one Merge: not for
    tables with stable row ids (a Merge's new fragments get no row ids, so the columns are
    added first, then the rows appended) nor for legacy (v1) data files, whose field ids
    live in the files themselves."""
    from txn_engine.format.flags import FLAG_STABLE_ROW_IDS
    from txn_engine.format.schema import major_version

    if manifest.reader_feature_flags & FLAG_STABLE_ROW_IDS:
        return False
    major = major_version(_data_format(manifest) or "")
    return major is not None and major >= 2


def _data_format(manifest: Any) -> str | None:
    """The Lance file format version of a manifest's data files (``"2.0"``, ...)."""
    return str(manifest.data_format.version) if manifest.HasField("data_format") else None


def _field_ids_by_path(fields: Iterable[Any]) -> dict[tuple[str, ...], int]:
    """Lance field id of every field (protobuf ``Field``) by its path of names."""
    fields = list(fields)
    by_id = {f.id: f for f in fields}
    out: dict[tuple[str, ...], int] = {}
    for f in fields:
        path = [f.name]
        parent = f.parent_id
        while parent in by_id and len(path) <= len(fields):  # bounded, even for a cycle
            path.append(by_id[parent].name)
            parent = by_id[parent].parent_id
        out[tuple(reversed(path))] = f.id
    return out


def _add_columns(storage: Storage, uri: str, data: pa.Schema, options: WriteOptions) -> int:
    """``mergeSchema``: commit the data's columns the table lacks as new nullable columns
    (a Merge of the unchanged fragments with the wider schema, as pylance's
    ``add_columns(pa.field(...))`` writes it); the rows already there read them as null.
    Re-planned on the latest version when a concurrent commit conflicts (a few times).
    Returns the version that has every column of ``data``."""
    from txn_engine.commit import commit as txn_commit
    from txn_engine.dataset import Dataset
    from txn_engine.errors import RetryableConflictError
    from txn_engine.format.schema import arrow_to_fields, max_field_id
    from txn_engine.ops import Merge

    budget = _merge_schema_retry(options).budget()
    while True:
        budget.start_attempt()
        current = Dataset.open(storage)
        have = set(current.schema.names)
        new = [field.with_nullable(True) for field in data if field.name not in have]
        if not new:
            return current.version
        manifest = current.manifest_pb
        added = arrow_to_fields(pa.schema(new), first_id=max_field_id(manifest) + 1)
        fields = tuple(LanceField.from_proto(f) for f in [*manifest.fields, *added])
        names = ", ".join(field.name for field in new)
        properties = dict(options.properties)
        properties[COMMIT_MESSAGE_KEY] = f"txn_lance mergeSchema: add columns {names}"
        txn = Transaction(
            read_version=current.version,
            operation=Merge(
                fragments=current.fragments,
                schema=fields,
                schema_metadata=dict(manifest.schema_metadata),
                preserves_nullability=True,
            ),
            properties=properties,
        )
        try:
            result = txn_commit(storage, txn, retry_policy=_retry_policy(options))
        except RetryableConflictError:
            if budget.wait():
                continue  # re-plan on the version that preempted this one
            raise
        _log.info("mergeSchema: %s gained columns %s in version %d", uri, names, result.version)
        return result.version


def _merge_schema_retry(options: WriteOptions) -> RetryPolicy:
    """``mergeSchema``'s re-planning budget: :data:`MERGE_SCHEMA_RETRY`, with at least
    ``commit_attempts`` plans."""
    attempts = max(MERGE_SCHEMA_RETRY.max_attempts, options.commit_attempts)
    return attrs.evolve(MERGE_SCHEMA_RETRY, max_attempts=attempts)


def check_lossless(data: pa.Schema, table: pa.Schema, *, what: str = "cannot write") -> None:
    """Refuse data whose columns cannot be cast to the table's types without loss.

    The rules are the Python writer API's (:func:`txn_engine.schema_check.is_lossless`):
    widening integers and floats, integers into floats that hold them exactly, the string,
    binary and list families in either width, decimals that keep every digit, finer
    timestamp units (zone or no zone alike), dates, dictionaries of the value type, a
    ``list`` into a ``fixed_size_list`` (a wrong length fails the task, it is never padded
    or cut), structs field by field with the same field names. Raises SchemaMismatchError (an
    InvalidOperationError; ``column``, ``expected``, ``actual``) naming the column and both
    types, e.g. a string column appended to an int64 one.
    """
    for field in table:
        index = data.get_field_index(field.name)
        if index < 0:
            continue
        source = data.field(index).type
        if not is_lossless(source, field.type, same_struct_fields=True):
            raise SchemaMismatchError(
                f"{what}: column {field.name!r} is {source} in the data but {field.type} in "
                "the table, and casting would lose or reinterpret values; cast the column "
                "in the DataFrame first (or overwrite the table to change its type)",
                column=field.name,
                expected=str(field.type),
                actual=str(source),
            )


def _write_report(path: str, report: Mapping[str, Any]) -> None:
    import fsspec

    try:
        with fsspec.open(path, "w") as handle:
            json.dump(report, handle, sort_keys=True)
    except Exception as exc:
        _log.warning("could not write the commit report to %s: %r", path, exc)


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


#: How long a batch write's lease on its read version lasts when the driver never releases
#: it (a driver that died): the job's files and history stay protected from cleanup that long.
WRITE_LEASE_SECONDS = 6 * 3600.0


def _lease_read_version(storage: Storage, read_version: int) -> str | None:
    """Lease ``read_version`` for the job (not renewed: commit and abort run in other
    Python workers, which release it by path). None when there is nothing to pin."""
    from txn_engine.errors import DatasetNotFoundError, VersionNotFoundError
    from txn_engine.leases import Lease

    if read_version <= 0:
        return None
    try:
        held = Lease(
            storage,
            read_version,
            ttl=WRITE_LEASE_SECONDS,
            owner="txn_engine.spark write",
            renew_in_background=False,
        )
    except (VersionNotFoundError, DatasetNotFoundError):
        return None  # already gone: the commit reports it
    return held.path
