"""The namespace itself, without the lance_namespace types (those are in ``_lance.py``).

:class:`NamespaceCore` keeps tables under ids in a directory or an object-store prefix,
creates their versions through :class:`~txn_engine.namespace._resolve.NamespaceCommitHandler`,
and runs transactions across them (:mod:`txn_engine.namespace._transaction`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from txn_engine.dataset import Dataset
from txn_engine.errors import (
    DatasetAlreadyExistsError,
    DatasetNotFoundError,
    InvalidOperationError,
    ObjectExistsError,
    ObjectNotFoundError,
    VersionNotFoundError,
)
from txn_engine.format.naming import VERSIONS_DIR, scan_versions
from txn_engine.namespace._records import (
    MARKER_KEY,
    META_DIR,
    Decision,
    TableRecord,
    attempt_id,
    attempt_marker_path,
    join_uri,
    parse_table_id,
    table_location,
    table_record_path,
)
from txn_engine.namespace._resolve import NamespaceCommitHandler, Resolver
from txn_engine.namespace._transaction import NamespaceTransaction, WithHandler
from txn_engine.retry import RetryPolicy
from txn_engine.storage import open_storage
from txn_engine.storage.base import Storage, get_bounded, read_concurrency

if TYPE_CHECKING:
    from txn_engine.api import Table

__all__ = ["NamespaceCore"]

_MAX_RECORD = 1 << 20
_MAX_ATTEMPTS = 1000
#: namespace tables commit without offers and carriers: every version goes through the
#: namespace's handler, which a carrier of another process would not use
_COMMIT_POLICY = RetryPolicy(offer_after=None, host_carrier=False)


class NamespaceCore:
    """Tables under ids in ``root_uri`` (see :class:`txn_engine.Namespace`)."""

    def __init__(
        self,
        root_uri: str | os.PathLike[str],
        storage_options: Mapping[str, Any] | None = None,
        *,
        abort_after: float = 30.0,
    ) -> None:
        self.root_uri = os.fspath(root_uri).rstrip("/") or "/"
        self.storage_options = dict(storage_options) if storage_options else None
        self.root: Storage = open_storage(self.root_uri, self.storage_options)
        self.resolver = Resolver(self.root, abort_after=abort_after)
        self._storages: dict[tuple[str, ...], Storage] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ tables

    @staticmethod
    def parse(table_id: str | Sequence[str]) -> tuple[str, ...]:
        """A table id as parts (``"db.events"`` or ``["db", "events"]``)."""
        return parse_table_id(table_id)

    def location(self, parts: Sequence[str]) -> str:
        """The table's dataset URI (a path for a local root)."""
        return join_uri(self.root_uri, table_location(parts))

    def table_storage(self, parts: Sequence[str]) -> Storage:
        """The table's storage (opened once per namespace)."""
        key = tuple(parts)
        with self._lock:
            found = self._storages.get(key)
            if found is None:
                found = open_storage(self.location(key), self.storage_options)
                self._storages[key] = found
            return found

    def record(self, parts: Sequence[str]) -> TableRecord | None:
        """The table's registry record (None: not registered)."""
        path = table_record_path(parts)
        try:
            data = get_bounded(self.root, path, _MAX_RECORD)
        except ObjectNotFoundError:
            return None
        return TableRecord.from_bytes(data, f"{self.root.uri}/{path}")

    def require(self, table_id: str | Sequence[str]) -> tuple[str, ...]:
        """The parts of a registered table (DatasetNotFoundError otherwise)."""
        parts = self.parse(table_id)
        if self.record(parts) is None:
            raise DatasetNotFoundError(f"no table {'.'.join(parts)} in {self.root.uri}")
        return parts

    def declare(
        self, table_id: str | Sequence[str], properties: Mapping[str, str] | None = None
    ) -> TableRecord:
        """Register a table (no data yet); DatasetAlreadyExistsError when it is."""
        parts = self.parse(table_id)
        record = TableRecord(parts, table_location(parts), dict(properties or {}))
        try:
            self.root.put_if_absent(table_record_path(parts), record.to_bytes())
        except ObjectExistsError:
            raise DatasetAlreadyExistsError(
                f"table {'.'.join(parts)} already exists in {self.root.uri}"
            ) from None
        return record

    def list_tables(self, prefix: Sequence[str] = ()) -> list[str]:
        """The registered tables (dotted ids) under the namespace ``prefix``, sorted."""
        want = tuple(prefix)
        out = []
        for name in self.root.list(f"{META_DIR}/tables"):
            if not name.endswith(".json"):
                continue
            parts = tuple(name[: -len(".json")].split("$"))
            if parts[: len(want)] == want and len(parts) > len(want):
                out.append(".".join(parts))
        return sorted(out)

    def drop(self, table_id: str | Sequence[str]) -> None:
        """Deregister the table and delete its manifests (its data files are left under
        its location for ``rm``; no reader can open the table afterwards)."""
        parts = self.require(table_id)
        storage = self.table_storage(parts)
        self.root.delete(table_record_path(parts))
        for name in storage.list(VERSIONS_DIR):
            storage.delete(f"{VERSIONS_DIR}/{name}")

    def deregister(self, table_id: str | Sequence[str]) -> None:
        """Deregister the table; its dataset stays at its location."""
        self.root.delete(table_record_path(self.require(table_id)))

    def table_with(self, parts: tuple[str, ...], storage: Storage) -> Table:
        """A writer handle over ``storage`` (a table storage with a commit handler)."""
        from txn_engine.api import Table

        options = self.storage_options
        lance = {str(k): str(v) for k, v in options.items()} if options else None
        return Table(storage, lance_storage_options=lance, commit_retry_policy=_COMMIT_POLICY)

    def handler(self, parts: tuple[str, ...]) -> NamespaceCommitHandler:
        """The commit handler every single-table writer of ``parts`` uses."""
        return NamespaceCommitHandler(self.table_storage(parts), self.resolver, parts)

    def open(self, table_id: str | Sequence[str]) -> Table:
        """A :class:`~txn_engine.Table` whose commits go through the namespace."""
        parts = self.require(table_id)
        return self.table_with(parts, WithHandler(self.table_storage(parts), self.handler(parts)))

    def create_table(
        self,
        table_id: str | Sequence[str],
        data: Any,
        *,
        properties: Mapping[str, str] | None = None,
    ) -> Table:
        """Register a table and write its first version from ``data`` (a pyarrow table;
        an empty one gives an empty table of its schema). DatasetAlreadyExistsError when
        the table exists."""
        parts = self.parse(table_id)
        self.declare(parts, properties)
        table = self.open(parts)
        table.overwrite(data)
        return table

    # ------------------------------------------------------------------ versions

    def latest(self, parts: Sequence[str]) -> Dataset:
        """The latest version of a table as the namespace sees it: a committed
        transaction's version not yet published is published first (rolled forward)."""
        storage = self.table_storage(parts)
        ds = Dataset.open(storage)
        marker = ds.manifest_pb.config.get(MARKER_KEY)
        if marker is None:
            return ds
        decided = self.resolver.decision(marker)
        if decided is None or not decided.committed:
            return ds
        entry = decided.entry(parts)
        if entry is None or entry.version != ds.version + 1:
            return ds
        self.resolver.publish(storage, entry)
        return Dataset.open(storage, version=entry.version)

    def versions(self, parts: Sequence[str]) -> list[Any]:
        """Every version entry of a table (after rolling the latest forward)."""
        try:
            self.latest(parts)
        except DatasetNotFoundError:
            return []
        return list(scan_versions(self.table_storage(parts)))

    def cleanup(self, table_id: str | Sequence[str], **options: Any) -> Any:
        """:func:`txn_engine.cleanup` of a table, after rolling its latest version
        forward (so a committed transaction's staged manifest is published, and its data
        files referenced, before cleanup looks). ``options`` as for ``cleanup``."""
        from txn_engine.retention import cleanup

        parts = self.require(table_id)
        self.latest(parts)
        return cleanup(self.table_storage(parts), **options)

    def publish_all(
        self, decided: Decision, staged: Mapping[tuple[str, ...], bytes] | None = None
    ) -> None:
        """Publish every staged manifest of a committed transaction (concurrently on
        object stores). ``staged``: the manifests' bytes by table, where the caller has
        them."""
        entries = [e for e in decided.tables if e.version is not None]
        known = staged or {}
        jobs = [(self.table_storage(e.id), e, known.get(e.id)) for e in entries]
        if len(jobs) <= 1 or read_concurrency(self.root) <= 1:
            for job in jobs:
                self.resolver.publish(*job)
            return
        with ThreadPoolExecutor(min(8, len(jobs))) as pool:
            for done in [pool.submit(self.resolver.publish, *job) for job in jobs]:
                done.result()

    def transaction(
        self, transaction_id: str | None = None, *, idempotency_key: str | None = None
    ) -> NamespaceTransaction:
        """A transaction across tables (see :class:`NamespaceTransaction`).

        ``idempotency_key`` (a Spark query id and micro-batch id, a job run id): the
        transaction lands at most once under that key. Attempts are ``<key>~0``,
        ``<key>~1``, ...: a committed attempt makes the returned transaction
        ``already_committed``; an undecided one (a writer that died, or one still running
        with the same key) is aborted first; the first attempt never used is returned.
        Only one writer at a time should use a key."""
        if idempotency_key is None:
            return NamespaceTransaction(self, transaction_id)
        if transaction_id is not None:
            raise InvalidOperationError("give transaction_id or idempotency_key, not both")
        for attempt in range(_MAX_ATTEMPTS):
            txid = attempt_id(idempotency_key, attempt)
            decided = self.resolver.decision(txid)
            if decided is None:
                try:  # claim the attempt: of two writers with one key, one gets it
                    self.root.put_if_absent(attempt_marker_path(txid), b"")
                    return NamespaceTransaction(self, txid)
                except ObjectExistsError:
                    decided = self.resolver.abort(txid)  # used, and undecided: end it
            if decided.committed:
                return NamespaceTransaction(self, txid)
        raise InvalidOperationError(
            f"idempotency key {idempotency_key!r} has {_MAX_ATTEMPTS} aborted attempts"
        )

    def check_version(self, parts: Sequence[str], version: int) -> Dataset:
        """The table at ``version`` (VersionNotFoundError when it does not exist)."""
        try:
            return Dataset.open(self.table_storage(parts), version=version)
        except DatasetNotFoundError as exc:
            raise VersionNotFoundError(str(exc)) from exc

    def require_no_marker_edit(self, config_keys: Sequence[str]) -> None:
        """Refuse an edit of the namespace's own config key."""
        if MARKER_KEY in config_keys:
            raise InvalidOperationError(f"the config key {MARKER_KEY} is the namespace's")
