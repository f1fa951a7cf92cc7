"""One call per operation: plan with pylance, commit with txn_engine.

::

    import txn_engine as te

    table = te.open("/data/events.lance")
    table.append(pyarrow_table)
    table.delete("id < 10")
    table.update({"status": "'done'"}, where="id = 7")
    table.merge_insert(new_rows, on="id")          # upsert
    table.compact()

Every call

1. opens the latest version (the **read version**, pinned when planning starts) and opens
   pylance's dataset at that same version;
2. plans the operation with pylance (``write_fragments``, ``merge_insert(...)
   .execute_uncommitted``, ``LanceFragment.delete`` / ``merge_columns``,
   ``Compaction.plan``, ``create_index_uncommitted``): data files are written, nothing is
   committed by pylance;
3. commits the resulting :class:`~txn_engine.Transaction` (read version = the pinned one)
   with :func:`txn_engine.commit`, so a concurrent commit that conflicts is detected;
4. on :class:`~txn_engine.errors.RetryableConflictError` re-plans from a fresh read
   (:func:`txn_engine.replan_and_commit`) within the table's re-planning ``retry_policy``.

Each returns the :class:`~txn_engine.CommitResult`. Errors are txn_engine's: what pylance
raises while planning becomes :class:`~txn_engine.errors.InvalidOperationError` (a bad
predicate, an unknown column, ...) or :class:`~txn_engine.errors.StorageError`.

pylance (``pip install 'txn_engine[lance]'``) is needed for the calls that plan with it
(all but :meth:`Table.restore` and :meth:`Table.update_config`); the rest of txn_engine
imports without it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import time
import uuid as uuid_module
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import attrs

from txn_engine._proto import table_pb2
from txn_engine.commit import CommitResult, commit, replan_and_commit
from txn_engine.conflicts.isolation import ISOLATION_CONFIG, ISOLATION_LEVELS, READ_PREDICATE
from txn_engine.conflicts.rebase import ConflictOptions, options_for
from txn_engine.dataset import Dataset
from txn_engine.errors import (
    DatasetNotFoundError,
    InvalidOperationError,
    StorageError,
    TxnEngineError,
)
from txn_engine.format.refs import (
    Branch,
    Tag,
    create_tag,
    delete_tag,
    list_branches,
    list_tags,
    read_branch,
)
from txn_engine.interop import (
    as_fields,
    as_fragments,
    as_index,
    as_transaction,
    schema_metadata_of,
)
from txn_engine.leases import MAX_LEASE_TTL
from txn_engine.model import Fragment, IndexDetails, IndexMetadata, LanceField
from txn_engine.ops import (
    CreateIndex,
    Delete,
    Operation,
    Project,
    ReserveFragments,
    Restore,
    Rewrite,
    RewriteGroup,
    Update,
    UpdateConfig,
    UpdateMap,
)
from txn_engine.plans import (
    FRAG_REUSE,
    delete_plan,
    digest,
    dropped,
    indexed,
    lance_module,
    paths,
    remaps_indices,
    to_arrow,
    update_plan,
    with_inserted,
)
from txn_engine.retry import RetryPolicy
from txn_engine.schema_check import conform
from txn_engine.session import Session, current, using
from txn_engine.storage import open_storage
from txn_engine.storage.base import Storage
from txn_engine.transaction import Transaction

__all__ = ["Table", "open"]

_Uri = str | os.PathLike[str]

#: who holds the leases the writer handle takes (shown by cleanup tools)
_OWNER = f"txn_engine.api:{os.getpid()}"


@contextlib.contextmanager
def _planning(what: str) -> Iterator[None]:
    """Turn what pylance raises while planning into txn_engine errors."""
    try:
        yield
    except TxnEngineError:
        raise
    except OSError as exc:
        raise StorageError(f"{what}: pylance failed while planning: {exc}") from exc
    except Exception as exc:
        raise InvalidOperationError(f"{what}: pylance refused the plan: {exc}") from exc


_M = TypeVar("_M", bound=Callable[..., Any])


def _in_session(method: _M) -> _M:
    """Run a :class:`Table` method in the handle's session."""

    @functools.wraps(method)
    def run(self: Table, *args: Any, **kwargs: Any) -> Any:
        with using(self.session):
            return method(self, *args, **kwargs)

    return run  # type: ignore[return-value]


class Table:
    """A writer handle on one Lance dataset (see the module docstring). Create with
    :func:`txn_engine.open`.

    ``retry_policy`` is the re-planning budget (default
    :meth:`RetryPolicy.replanning`), ``commit_retry_policy`` the budget of each commit
    (default :class:`RetryPolicy`), ``conflict_options`` opt-in permissive rules.
    ``transaction_file=True`` also writes each commit's ``_transactions/*.txn`` copy, as
    pylance does (default: the transaction inline in the manifest only; see
    :func:`txn_engine.commit`).
    ``lance_storage_options`` are given to pylance (default: ``storage_options``).
    ``uri`` may also be a ready :class:`~txn_engine.storage.Storage` (its versions are then
    created by its commit handler: a namespace table's, see ``docs/namespace.md``).
    ``branch`` names a branch (``_refs/branches/``, pylance's too): every read and commit of
    the handle is then on that branch (its versions are under ``tree/<branch>/``); the main
    line is untouched. ``lease_ttl``: seconds each call's lease lives past each renewal
    (renewed every third of it while the call runs): a call whose process stalls for longer
    (a GC pause, a stopped VM) gets LeaseExpiredError before its commit instead of landing
    a version whose files a cleanup may have removed. ``session``: the
    :class:`~txn_engine.session.Session` every call of the handle uses (default: the one
    current when the handle is made).
    """

    def __init__(
        self,
        uri: _Uri | Storage,
        *,
        branch: str | None = None,
        storage_options: Mapping[str, Any] | None = None,
        lance_storage_options: Mapping[str, str] | None = None,
        retry_policy: RetryPolicy | None = None,
        commit_retry_policy: RetryPolicy | None = None,
        conflict_options: ConflictOptions | None = None,
        transaction_file: bool = False,
        lease_ttl: float = 600.0,
        isolation: str | None = None,
        session: Session | None = None,
    ) -> None:
        #: the session every call of the handle runs in (default: the one current here)
        self.session = session or current()
        with using(self.session):
            self._setup(uri, branch, storage_options, lance_storage_options, lease_ttl)
        self.retry_policy = retry_policy
        self.commit_retry_policy = commit_retry_policy
        # "snapshot" (default) or "serializable" (docs/conflicts.md, Isolation)
        self.conflict_options = options_for(
            conflict_options, isolation, self._uri, self._lance_options
        )
        self.transaction_file = transaction_file
        self.lease_ttl = lease_ttl

    def _setup(
        self,
        uri: _Uri | Storage,
        branch: str | None,
        storage_options: Mapping[str, Any] | None,
        lance_storage_options: Mapping[str, str] | None,
        lease_ttl: float,
    ) -> None:
        """Check the options; open the table's storage (its branch's, with ``branch``)."""
        if not 0 < lease_ttl <= MAX_LEASE_TTL:
            raise InvalidOperationError(
                f"lease_ttl must be seconds above 0 and at most {MAX_LEASE_TTL:g}, "
                f"got {lease_ttl!r}"
            )
        if isinstance(uri, str | os.PathLike):
            self._root_uri = os.fspath(uri)
            self._root: Storage = open_storage(self._root_uri, storage_options)
        else:  # a ready Storage (a namespace table's, with its commit handler)
            if branch is not None:
                raise InvalidOperationError("open a branch by its dataset URI, not a Storage")
            self._root_uri = uri.uri
            self._root = open_storage(uri, storage_options)
        self._options = dict(storage_options) if storage_options is not None else None
        self._branch = branch
        if branch is None:
            self._uri, self._storage = self._root_uri, self._root
        else:
            found = read_branch(self._root, branch)  # VersionNotFoundError when absent
            self._uri = f"{self._root_uri.rstrip('/')}/{found.path}"
            self._storage = open_storage(self._uri, storage_options)
        if lance_storage_options is None and storage_options is not None:
            lance_storage_options = {str(k): str(v) for k, v in storage_options.items()}
        self._lance_options = dict(lance_storage_options) if lance_storage_options else None

    # ------------------------------------------------------------------ reading

    @property
    def uri(self) -> str:
        """The dataset URI (as given; a branch's own root is ``<uri>/tree/<branch>``)."""
        return self._root_uri

    @property
    def branch(self) -> str | None:
        """The branch this handle reads and commits (None: the main line)."""
        return self._branch

    @_in_session
    def dataset(self, version: int | None = None) -> Dataset:
        """The txn_engine :class:`Dataset` at ``version`` (default: latest)."""
        return Dataset.open(self._storage, version=version)

    @property
    @_in_session
    def version(self) -> int:
        """The latest version now in storage."""
        return self.dataset().latest_version()

    @_in_session
    def to_lance(self, version: int | None = None) -> Any:
        """pylance's ``LanceDataset`` at ``version`` (default: latest), for reading."""
        lance = lance_module()
        with _planning("open"):
            return lance.dataset(
                self._uri,
                version=version,
                storage_options=self._lance_options,
            )

    @_in_session
    def to_table(self, **scan: Any) -> Any:
        """The latest version read by pylance as a ``pyarrow.Table`` (``scan``: pylance's
        ``to_table`` arguments, e.g. ``filter="id < 10"``)."""
        with _planning("read"):
            return self.to_lance().to_table(**scan)

    @_in_session
    def changes(
        self,
        start_version: int,
        end_version: int | None = None,
        *,
        columns: Sequence[str] | None = None,
        reader: bool = False,
    ) -> Any:
        """The row changes of versions ``start_version`` to ``end_version`` (both
        included; default: up to the latest) as a ``pyarrow.Table``, or with
        ``reader=True`` a ``RecordBatchReader`` (bounded memory, for large ranges): the
        table's columns (or ``columns``) plus ``_change_type``, ``_commit_version`` and
        ``_commit_timestamp`` (see :mod:`txn_engine.changes`). Needs pylance. Raises
        HistoryUnavailableError when a version of the range was cleaned up."""
        from txn_engine import changes as feed

        call = feed.change_reader if reader else feed.changes
        return call(
            self._uri,
            start_version,
            end_version,
            columns=columns,
            storage_options=self._options,
            lance_storage_options=self._lance_options,
        )

    @_in_session
    def changes_since(
        self, version: int, *, columns: Sequence[str] | None = None, reader: bool = False
    ) -> Any:
        """The row changes committed after ``version`` up to the latest (empty when
        ``version`` is the latest); as :meth:`changes`."""
        return self.changes(version + 1, None, columns=columns, reader=reader)

    def __repr__(self) -> str:
        from txn_engine.redact import redact_uri

        branch = "" if self._branch is None else f", branch={self._branch!r}"
        return f"Table({redact_uri(self._root_uri)!r}{branch})"

    # ------------------------------------------------------------------ machinery

    def _exists(self) -> bool:
        try:
            Dataset.open(self._storage)
        except DatasetNotFoundError:
            return False
        return True

    def _run(
        self,
        what: str,
        plan: Callable[[Dataset, Any], Operation | Transaction],
        *,
        with_lance: bool = True,
        properties: Mapping[str, str] | None = None,
        if_missing: Callable[[], CommitResult] | None = None,
    ) -> CommitResult:
        """Plan at the pinned latest version (pylance opened at that version too),
        commit, re-plan on a retryable conflict. A lease (``lease_ttl``) pins the read
        version and the files the plan writes against cleanup from before planning starts
        until the commit is decided, and is checked before the manifest create
        (LeaseExpiredError when the plan outlived it). ``if_missing`` answers instead when
        there is no dataset to plan against (append / overwrite create it)."""
        calls: list[int] = []

        def planned(snapshot: Dataset) -> Transaction:
            calls.append(snapshot.version)
            lds = self.to_lance(snapshot.version) if with_lance else None
            with _planning(what):
                out = plan(snapshot, lds)
            if isinstance(out, Transaction):
                return out
            return Transaction(snapshot.version, out, properties=properties or {})

        try:
            return replan_and_commit(
                self._storage,
                planned,
                retry_policy=self.retry_policy,
                commit_retry_policy=self.commit_retry_policy,
                conflict_options=self.conflict_options,
                transaction_file=self.transaction_file,
                lease_ttl=self.lease_ttl,
                lease_owner=_OWNER,
            )
        except DatasetNotFoundError:
            if if_missing is None or calls:  # planned against a dataset that then vanished
                raise
            return if_missing()

    def _create(self, data: Any, schema: Any, what: str) -> CommitResult:
        """Create the dataset (read version 0) from ``data``."""
        write_fragments = lance_module("lance.fragment").write_fragments

        with _planning(what):
            txn = write_fragments(
                data,
                self._uri,
                schema=schema,
                mode="overwrite",
                return_transaction=True,
                storage_options=self._lance_options,
            )
        op = as_transaction(txn).operation
        return commit(
            self._storage,
            Transaction(0, op),
            retry_policy=self.commit_retry_policy,
            transaction_file=self.transaction_file,
        )

    # ------------------------------------------------------------------ data

    @_in_session
    def append(
        self,
        data: Any,
        *,
        allow_lossy_cast: bool = False,
        properties: Mapping[str, str] | None = None,
    ) -> CommitResult:
        """Append rows (a ``pyarrow.Table``, ``RecordBatch`` or anything with
        ``to_arrow``/``__arrow_c_stream__``); creates the dataset if there is none.

        The data is conformed to the table schema first: columns are matched by name and
        reordered, missing nullable columns become nulls, and a type is converted only when
        no value can change (``int32`` -> ``int64``, ``float`` -> ``double``, ``string`` ->
        ``large_string``, ...). Any other type difference raises
        :class:`~txn_engine.errors.SchemaMismatchError` naming the column and both types;
        with ``allow_lossy_cast=True`` such columns are cast value by value and the call
        still fails if a value does not fit.
        """
        table = to_arrow(data)
        write_fragments = lance_module("lance.fragment").write_fragments

        def plan(snapshot: Dataset, lds: Any) -> Operation:
            conformed = conform(table, snapshot.schema, allow_lossy_cast=allow_lossy_cast)
            txn = write_fragments(
                conformed, lds, return_transaction=True, storage_options=self._lance_options
            )
            return as_transaction(txn).operation

        return self._run(
            "append",
            plan,
            properties=properties,
            if_missing=None if self._branch else lambda: self._create(table, None, "append"),
        )

    @_in_session
    def overwrite(
        self,
        data: Any,
        *,
        schema: Any = None,
        properties: Mapping[str, str] | None = None,
    ) -> CommitResult:
        """Replace the table's rows and schema with ``data`` (creates the dataset if there
        is none). Indices are dropped; the config is kept. Columns whose name exists keep
        their field id, as pylance does."""
        table = to_arrow(data)
        write_fragments = lance_module("lance.fragment").write_fragments

        def plan(snapshot: Dataset, lds: Any) -> Operation:
            txn = write_fragments(
                table,
                lds,
                schema=schema,
                mode="overwrite",
                return_transaction=True,
                storage_options=self._lance_options,
            )
            return as_transaction(txn).operation

        return self._run(
            "overwrite",
            plan,
            properties=properties,
            if_missing=None if self._branch else lambda: self._create(table, schema, "overwrite"),
        )

    @_in_session
    def delete(
        self, predicate: str, *, properties: Mapping[str, str] | None = None
    ) -> CommitResult:
        """Delete the rows matching the SQL ``predicate`` (e.g. ``"id < 10"``).

        Only fragments holding matching rows get a new deletion file; a fragment whose
        rows all go is removed. The deleted rows travel as ``affected_rows``, so a
        concurrent delete of other rows of the same fragment is rebased, not a conflict.
        A predicate matching nothing still commits a version, as pylance does.
        """

        def plan(snapshot: Dataset, lds: Any) -> Operation:
            updated, removed, affected = delete_plan(lds, predicate)
            return Delete(
                updated_fragments=updated,
                deleted_fragment_ids=removed,
                predicate=predicate,
                affected_rows=affected,
            )

        return self._run("delete", plan, properties=properties)

    @_in_session
    def update(
        self,
        values: Mapping[str, str],
        where: str | None = None,
        *,
        properties: Mapping[str, str] | None = None,
    ) -> CommitResult:
        """Set columns to SQL expressions (``{"price": "price * 2", "tag": "'sale'"}``)
        on the rows matching ``where`` (default: every row).

        Planned like pylance's ``update``: the matching rows are deleted from their
        fragments and rewritten, with the new values, into new fragments (one ``Update``).
        Raises InvalidOperationError for an unknown column or a bad expression.
        """
        if not values:
            raise InvalidOperationError("update: give at least one column to set")

        def plan(snapshot: Dataset, lds: Any) -> Operation:
            return update_plan(lds, snapshot, values, where, self._lance_options)

        read = {READ_PREDICATE: where or "", **(properties or {})}  # what it read (issue 46)
        return self._run("update", plan, properties=read)

    @_in_session
    def merge_insert(
        self,
        data: Any,
        on: str | Sequence[str],
        *,
        when_matched_update_all: bool | str = True,
        when_not_matched_insert_all: bool = True,
        when_matched_delete: bool = False,
        when_not_matched_by_source_delete: bool | str = False,
        properties: Mapping[str, str] | None = None,
    ) -> CommitResult:
        """Upsert ``data`` on the key column(s) ``on`` with pylance's merge-insert.

        * ``when_matched_update_all``: replace matched target rows (a SQL string: only
          where that condition holds, e.g. ``"target.ts < source.ts"``);
        * ``when_not_matched_insert_all``: insert source rows whose key is new;
        * ``when_matched_delete``: delete matched target rows instead;
        * ``when_not_matched_by_source_delete``: delete target rows absent from the source
          (a SQL string: only those matching it).

        The keys this upsert inserts are recorded in its transaction (a bloom filter in
        ``inserted_rows``, which pylance 14 reads and ignores), so two upserts planned at
        the same version that insert the same new key cannot both land: the second one is
        re-planned and updates the row the first inserted.
        """
        keys = [on] if isinstance(on, str) else list(on)
        table = to_arrow(data)

        def plan(snapshot: Dataset, lds: Any) -> Transaction:
            from txn_engine.conflicts.upsert import inserted_rows_filter

            builder = lds.merge_insert(keys)
            if when_matched_delete:
                builder = builder.when_matched_delete()
            elif when_matched_update_all:
                cond = when_matched_update_all
                builder = builder.when_matched_update_all(
                    condition=None if cond is True else str(cond)
                )
            if when_not_matched_insert_all:
                builder = builder.when_not_matched_insert_all()
            if when_not_matched_by_source_delete:
                cond = when_not_matched_by_source_delete
                builder = builder.when_not_matched_by_source_delete(
                    expr=None if cond is True else str(cond)
                )
            ptxn, stats = builder.execute_uncommitted(table)
            txn = as_transaction(ptxn)
            op = txn.operation
            if when_not_matched_insert_all and isinstance(op, Update):
                inserted = stats.get("num_inserted_rows") if isinstance(stats, Mapping) else None
                every_match = when_matched_delete or when_matched_update_all is True
                touched = [f.id for f in op.updated_fragments] + list(op.removed_fragment_ids)
                record, hashes = inserted_rows_filter(
                    lds,
                    snapshot,
                    table,
                    keys,
                    inserted if isinstance(inserted, int) else None,
                    touched if every_match else None,
                )
                op = with_inserted(op, record, hashes)
            return Transaction(snapshot.version, op, properties=properties or {})

        return self._run("merge_insert", plan)

    # ------------------------------------------------------------------ layout

    @_in_session
    def compact(
        self,
        *,
        target_rows_per_fragment: int = 1024 * 1024,
        materialize_deletions: bool = True,
        materialize_deletions_threshold: float = 0.1,
        num_threads: int | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> CommitResult | None:
        """Compact small fragments and materialize deletions (pylance's
        ``Compaction.plan`` / ``CompactionTask.execute``, options as pylance's).

        Returns None when there is nothing to compact (nothing is committed then).

        Indices stay correct the way pylance's ``defer_index_remap`` keeps them: when an
        index covers rewritten fragments (and row ids are not stable), the new fragments'
        ids are reserved first (a ``ReserveFragments`` version, as pylance commits too),
        and the ``Rewrite`` records the old -> new row addresses in the
        ``__lance_frag_reuse`` system index; the index files are kept and cover the new
        fragments, and readers (pylance) remap through it.
        """
        options: dict[str, Any] = {
            "target_rows_per_fragment": target_rows_per_fragment,
            "materialize_deletions": materialize_deletions,
            "materialize_deletions_threshold": materialize_deletions_threshold,
        }
        if num_threads is not None:
            options["num_threads"] = num_threads
        if not self._exists():
            raise DatasetNotFoundError(f"no Lance dataset at {self._uri}")
        empty: list[bool] = []

        def plan(snapshot: Dataset, lds: Any) -> Operation:
            Compaction = lance_module("lance.optimize").Compaction

            remap = remaps_indices(snapshot)
            opts = {**options, "defer_index_remap": True} if remap else options
            results = [task.execute(lds) for task in Compaction.plan(lds, opts).tasks]
            groups = [
                RewriteGroup(
                    as_fragments(result.original_fragments), as_fragments(result.new_fragments)
                )
                for result in results
            ]
            if not groups:
                empty.append(True)
            old_ids = {f.id for g in groups for f in g.old_fragments}
            if not remap or not indexed(snapshot, old_ids):
                return Rewrite(groups)
            return self._deferred_remap(snapshot, groups, results)

        # nothing to compact: answer without committing an empty Rewrite
        probe = self.dataset()
        lds = self.to_lance(probe.version)
        Compaction = lance_module("lance.optimize").Compaction

        with _planning("compact"):
            if not Compaction.plan(lds, options).tasks:
                return None
        return self._run("compact", plan, properties=properties)

    def _deferred_remap(
        self, snapshot: Dataset, groups: list[RewriteGroup], results: list[Any]
    ) -> Rewrite:
        """Reserve the new fragments' ids (one ReserveFragments commit), then a Rewrite
        with those ids and this compaction's ``__lance_frag_reuse`` version, as pylance's
        ``Compaction.commit(..., {"defer_index_remap": True})`` records them."""
        count = sum(len(g.new_fragments) for g in groups)
        reserved = commit(
            self._storage,
            Transaction(snapshot.version, ReserveFragments(count)),
            retry_policy=self.commit_retry_policy,
            transaction_file=self.transaction_file,
        )
        high = Dataset.open(self._storage, version=reserved.version).manifest.max_fragment_id
        ids = iter(range((high or 0) - count + 1, (high or 0) + 1))
        details = table_pb2.FragmentReuseIndexDetails()
        entry = details.inline.versions.add(dataset_version=reserved.version)
        placed: list[RewriteGroup] = []
        for group, result in zip(groups, results, strict=True):
            news = tuple(attrs.evolve(f, id=next(ids)) for f in group.new_fragments)
            placed.append(RewriteGroup(group.old_fragments, news))
            addrs = json.loads(result.json()).get("row_addrs")
            if addrs is None:
                raise InvalidOperationError(
                    "compact: pylance's compaction result carries no row addresses"
                )
            entry.groups.add(
                changed_row_addrs=bytes(addrs),
                old_fragments=[digest(f) for f in group.old_fragments],
                new_fragments=[digest(f) for f in news],
            )
        reuse = IndexMetadata(
            uuid=str(uuid_module.uuid4()),
            name=FRAG_REUSE,
            fields=(),
            dataset_version=reserved.version,
            fragment_bitmap=[f.id for g in placed for f in g.new_fragments],
            index_details=IndexDetails(
                "/lance.table.FragmentReuseIndexDetails", details.SerializeToString()
            ),
            index_version=0,
            created_at=time.time_ns() // 1_000_000,
        )
        return Rewrite(placed, frag_reuse_index=reuse)

    @_in_session
    def add_columns(
        self,
        transforms: Mapping[str, str] | Callable[[Any], Any],
        read_columns: Sequence[str] | None = None,
        *,
        properties: Mapping[str, str] | None = None,
    ) -> CommitResult:
        """Add columns computed per fragment: ``{"name": "SQL expression"}`` or a
        function from a ``pyarrow.RecordBatch`` (of ``read_columns``) to a RecordBatch of
        the new columns (pylance's ``LanceFragment.merge_columns``). One ``Merge``."""
        from txn_engine.ops import Merge

        def plan(snapshot: Dataset, lds: Any) -> Operation:
            frags: list[Fragment] = []
            schema: Any = None
            cols = list(read_columns) if read_columns is not None else None
            for frag in lds.get_fragments():
                meta, schema = frag.merge_columns(
                    dict(transforms) if isinstance(transforms, Mapping) else transforms,
                    columns=cols,
                )
                frags.append(as_fragments([meta])[0])
            if schema is None:
                raise InvalidOperationError("add_columns: the table has no fragments")
            # pylance's LanceSchema, converted here (its metadata too, as pylance's Merge)
            return Merge(frags, as_fields(schema), schema_metadata_of(schema))

        return self._run("add_columns", plan, properties=properties)

    @_in_session
    def drop_columns(
        self, columns: Sequence[str], *, properties: Mapping[str, str] | None = None
    ) -> CommitResult:
        """Drop columns (top-level names or dotted nested paths) from the schema (a
        ``Project``; the data files are untouched, as with pylance)."""
        drop = {columns} if isinstance(columns, str) else set(columns)

        def plan(snapshot: Dataset, _lds: Any) -> Operation:
            fields = snapshot.manifest_pb.fields
            by_id = paths(fields)
            missing = sorted(c for c in drop if c not in by_id.values())
            if missing:
                raise InvalidOperationError(f"drop_columns: no column(s) {missing} in the table")
            kept = [LanceField.from_proto(f) for f in fields if not dropped(by_id[f.id], drop)]
            if not any(f.parent_id == -1 for f in kept):
                raise InvalidOperationError("drop_columns: cannot drop every column")
            return Project(tuple(kept))

        return self._run("drop_columns", plan, with_lance=False, properties=properties)

    @_in_session
    def create_index(
        self,
        column: str | Sequence[str],
        index_type: str,
        *,
        name: str | None = None,
        replace: bool = True,
        properties: Mapping[str, str] | None = None,
        **options: Any,
    ) -> CommitResult:
        """Build an index with pylance's ``create_index_uncommitted`` over every fragment
        of the pinned version (``index_type`` e.g. ``"BTREE"``, ``"BITMAP"``,
        ``"IVF_PQ"``; ``options`` as pylance's) and commit it. An index of the same name is
        replaced (``replace=False``: refused instead)."""

        def plan(snapshot: Dataset, lds: Any) -> Operation:
            frag_ids = [f.id for f in snapshot.fragments]
            index = as_index(
                lds.create_index_uncommitted(
                    column,
                    index_type,
                    name=name,
                    replace=replace,
                    fragment_ids=frag_ids,
                    **options,
                )
            )
            removed = [i for i in snapshot.indices if i.name == index.name]
            if removed and not replace:
                raise InvalidOperationError(f"create_index: index {index.name!r} exists")
            return CreateIndex(new_indices=[index], removed_indices=removed)

        return self._run("create_index", plan, properties=properties)

    # ------------------------------------------------------------------ versions and config

    @_in_session
    def restore(self, version: int, *, properties: Mapping[str, str] | None = None) -> CommitResult:
        """Make the content of ``version`` the newest version (later versions stay)."""

        if type(version) is not int:  # checkout(None) would be the latest
            raise InvalidOperationError(f"restore: a version is a whole number, got {version!r}")

        def plan(snapshot: Dataset, _lds: Any) -> Operation:
            snapshot.checkout(version)  # VersionNotFoundError before anything is written
            return Restore(version)

        return self._run("restore", plan, with_lance=False, properties=properties)

    @_in_session
    def update_config(
        self,
        upserts: Mapping[str, str | None] | None = None,
        *,
        replace: bool = False,
        table_metadata: Mapping[str, str | None] | None = None,
        schema_metadata: Mapping[str, str | None] | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> CommitResult:
        """Edit the config (key -> value; None deletes the key; ``replace`` clears it
        first), and optionally the table metadata and schema metadata. The key
        ``txn_engine.isolation`` takes ``"snapshot"`` or ``"serializable"`` (the table's
        isolation level, ``docs/conflicts.md``); another value is refused."""
        level = (upserts or {}).get(ISOLATION_CONFIG)
        if level is not None and level not in ISOLATION_LEVELS:
            raise InvalidOperationError(
                f"config {ISOLATION_CONFIG} must be one of {', '.join(ISOLATION_LEVELS)}, "
                f"got {level!r}"
            )
        config = (
            UpdateMap(upserts or {}, replace=replace) if upserts is not None or replace else None
        )

        def plan(_snapshot: Dataset, _lds: Any) -> Operation:
            return UpdateConfig(
                config_updates=config,
                table_metadata_updates=None
                if table_metadata is None
                else UpdateMap(table_metadata),
                schema_metadata_updates=None
                if schema_metadata is None
                else UpdateMap(schema_metadata),
            )

        return self._run("update_config", plan, with_lance=False, properties=properties)

    # ------------------------------------------------------------------ tags and branches

    @_in_session
    def tags(self) -> list[Tag]:
        """Every tag (``_refs/tags/``, pylance's too), sorted by name."""
        return list_tags(self._root)

    @_in_session
    def create_tag(
        self, name: str, version: int | None = None, *, metadata: Mapping[str, str] | None = None
    ) -> Tag:
        """Tag ``version`` (default: the latest) as ``name``; pylance reads it
        (``lance.dataset(uri, version=name)``) and cleanup keeps the version. Raises
        InvalidOperationError for a bad or existing name, VersionNotFoundError.
        Main-line versions only: on a branch handle it raises InvalidOperationError."""
        if self._branch is not None:
            raise InvalidOperationError(
                f"create_tag: {self!r} is a branch handle; txn_engine tags main-line versions "
                "(tag a branch version with pylance: ds.tags.create(name, (branch, version)))"
            )
        target = self.version if version is None else version
        return create_tag(self._root, name, target, metadata=metadata)

    @_in_session
    def delete_tag(self, name: str) -> None:
        """Delete tag ``name`` (the version stays). VersionNotFoundError if none."""
        delete_tag(self._root, name)

    @_in_session
    def branches(self) -> list[Branch]:
        """Every branch of the dataset (``_refs/branches/``), sorted by name."""
        return list_branches(self._root)

    @_in_session
    def create_branch(self, name: str, version: int | None = None) -> Table:
        """Create branch ``name`` from ``version`` (default: the latest) of this handle's
        line and return a handle on it. The branch is created by pylance
        (``LanceDataset.create_branch``: its refs file and its first version, which reads
        the parent's files in place); what the returned handle commits lands on the branch.
        Names are pylance's (``/``-separated, any script: ``"team/é"``; see
        :func:`txn_engine.format.refs.validate_branch_name`). Raises InvalidOperationError
        when the name is invalid or taken."""
        from txn_engine.format.refs import validate_branch_name

        validate_branch_name(name)
        if name in {b.name for b in list_branches(self._root)}:
            # (pylance 14 fails with an internal error here)
            raise InvalidOperationError(f"create_branch: branch {name!r} already exists")
        lance = lance_module()
        target = self.version if version is None else version
        # VersionNotFoundError / InvalidOperationError here, not pylance's "Dataset at path
        # ... was not found" (a StorageError) for version 0 or 2**63
        self.dataset(target)
        reference: Any = target if self._branch is None else (self._branch, target)
        with _planning("create_branch"):
            root = lance.dataset(self._root_uri, storage_options=self._lance_options)
            try:
                root.create_branch(name, reference, storage_options=self._lance_options)
            except OSError as exc:
                if "Ref is invalid" not in str(exc):
                    raise
                # a name Python cannot tell from pylance's (a combining accent)
                raise InvalidOperationError(f"create_branch: {exc}") from exc
        return Table(
            self._root_uri,
            branch=name,
            storage_options=self._options,
            lance_storage_options=self._lance_options,
            retry_policy=self.retry_policy,
            commit_retry_policy=self.commit_retry_policy,
            conflict_options=self.conflict_options,
            transaction_file=self.transaction_file,
            session=self.session,
        )


def open(
    uri: _Uri,
    *,
    branch: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    lance_storage_options: Mapping[str, str] | None = None,
    retry_policy: RetryPolicy | None = None,
    commit_retry_policy: RetryPolicy | None = None,
    conflict_options: ConflictOptions | None = None,
    transaction_file: bool = False,
    lease_ttl: float = 600.0,
    isolation: str | None = None,
    session: Session | None = None,
) -> Table:
    """A :class:`Table` writer handle on the dataset at ``uri`` (which need not exist yet:
    ``append`` / ``overwrite`` create it). With ``branch``, the handle reads and commits
    that existing branch (VersionNotFoundError if there is none; ``create_branch`` makes
    one). The options are :class:`Table`'s."""
    return Table(
        uri,
        branch=branch,
        storage_options=storage_options,
        lance_storage_options=lance_storage_options,
        retry_policy=retry_policy,
        commit_retry_policy=commit_retry_policy,
        conflict_options=conflict_options,
        transaction_file=transaction_file,
        lease_ttl=lease_ttl,
        isolation=isolation,
        session=session,
    )
