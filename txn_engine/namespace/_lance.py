""":class:`Namespace`: the namespace as a ``lance_namespace.LanceNamespace`` (what pylance
and the REST server call). Needs the ``namespace`` extra (lance-namespace, which pylance 14
also installs).

Requests arrive as the spec's pydantic models (from Python) or as dict-like objects (from
pylance's Rust side, and from the REST server); answers are the spec's models. Errors are the
spec's (``lance_namespace.errors``): a missing table is TableNotFoundError, a version that is
taken ConcurrentModificationError, and so on (:func:`spec_error`).
"""

from __future__ import annotations

import functools
import io
import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import lance_namespace as ln
from lance_namespace import errors as lerr

from txn_engine.errors import (
    CommitStateUnknownError,
    DatasetAlreadyExistsError,
    DatasetNotFoundError,
    InvalidOperationError,
    InvalidStorageArgumentError,
    LimitExceededError,
    ObjectExistsError,
    RetryableConflictError,
    StorageError,
    TxnEngineError,
    VersionNotFoundError,
)
from txn_engine.format.naming import NamingScheme, manifest_path, scan_versions
from txn_engine.jsontext import whole_number
from txn_engine.namespace._core import NamespaceCore
from txn_engine.namespace._records import (
    META_DIR,
    join_uri,
    namespace_record_path,
    table_location,
)
from txn_engine.namespace._snapshot import snapshot
from txn_engine.namespace._versions import (
    StagedVersion,
    commit_staged,
    create_version,
    staged_relative,
)
from txn_engine.redact import looks_secret, redact_text, redact_uri

__all__ = ["Namespace", "spec_error"]

_F = TypeVar("_F", bound=Callable[..., Any])
_PAGE = 1000


def spec_error(exc: BaseException) -> lerr.LanceNamespaceError:
    """The spec's error for a txn_engine error (message redacted)."""
    text = redact_text(str(exc))
    if isinstance(exc, lerr.LanceNamespaceError):
        return exc
    kind: type[lerr.LanceNamespaceError]
    if isinstance(exc, DatasetNotFoundError):
        kind = lerr.TableNotFoundError
    elif isinstance(exc, DatasetAlreadyExistsError):
        kind = lerr.TableAlreadyExistsError
    elif isinstance(exc, VersionNotFoundError):
        kind = lerr.TableVersionNotFoundError
    elif isinstance(exc, ObjectExistsError | RetryableConflictError):
        kind = lerr.ConcurrentModificationError
    elif isinstance(exc, InvalidOperationError | InvalidStorageArgumentError | LimitExceededError):
        kind = lerr.InvalidInputError
    elif isinstance(exc, StorageError | CommitStateUnknownError):
        kind = lerr.ServiceUnavailableError
    else:
        kind = lerr.InternalError
    return kind(text)


def _spec_errors(fn: _F) -> _F:
    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except lerr.LanceNamespaceError:
            raise
        except (TxnEngineError, ValueError, KeyError, TypeError) as exc:
            raise spec_error(exc) from exc

    return wrapped  # type: ignore[return-value]


def _plain(request: Any) -> dict[str, Any]:
    """A request as a plain dict (pydantic model, dict, or pylance's dict-like)."""
    if request is None:
        return {}
    dump = getattr(request, "model_dump", None)
    if callable(dump):
        return dict(dump())
    try:
        return {str(k): request[k] for k in request.keys()}  # noqa: SIM118
    except (AttributeError, TypeError) as exc:
        raise lerr.InvalidInputError(f"a request must be a mapping: {type(request)}") from exc


def _id(req: Mapping[str, Any]) -> list[str]:
    ident = req.get("id")
    if not isinstance(ident, list) or not all(isinstance(p, str) for p in ident):
        raise lerr.InvalidInputError("the request needs an 'id': a list of strings")
    return ident


def _token(req: Mapping[str, Any]) -> int:
    start = whole_number(str(req.get("page_token") or "0"), maximum=1 << 40)
    if start is None:
        raise lerr.InvalidInputError("'page_token' is not one this namespace gave")
    return start


def _int(req: Mapping[str, Any], key: str) -> int | None:
    value = req.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise lerr.InvalidInputError(f"'{key}' must be a whole number >= 0")
    return value


class Namespace(NamespaceCore, ln.LanceNamespace):
    """Tables under ids in a directory or object-store prefix, with multi-table
    transactions; a ``lance_namespace.LanceNamespace`` that pylance 14 opens.

    ``Namespace(root_uri, storage_options=...)``. Tables: ``create_table(id, data)``,
    ``open(id)`` (a :class:`~txn_engine.Table` committing through the namespace),
    ``lance.dataset(namespace_client=ns, table_id=[...])``. Transactions:
    ``with ns.transaction() as tx: tx.open(a).append(...); tx.open(b).delete(...)``;
    ``snapshot(ids)`` reads several tables consistently. ``abort_after``: seconds a writer
    waits for an undecided transaction before aborting it. ``share_storage_options``:
    whether ``describe_table`` hands the storage options (credentials included) to the
    caller; the REST server passes False (only options that are no secret go out).
    See ``docs/namespace.md``.
    """

    def __init__(
        self,
        root_uri: str | os.PathLike[str],
        storage_options: Mapping[str, Any] | None = None,
        *,
        abort_after: float = 30.0,
        share_storage_options: bool = True,
    ) -> None:
        super().__init__(root_uri, storage_options, abort_after=abort_after)
        self.share_storage_options = share_storage_options

    def namespace_id(self) -> str:
        """An id for this namespace (its root, without credentials)."""
        return f"txn_engine.Namespace {{ root: {redact_uri(self.root_uri)!r} }}"

    def __repr__(self) -> str:
        return f"Namespace({redact_uri(self.root_uri)!r})"

    def snapshot(self, table_ids: Sequence[str | Sequence[str]]) -> dict[str, int]:
        """One consistent version per table (by dotted id): no transaction is split."""
        return snapshot(self, [self.require(t) for t in table_ids])

    def _options_out(self) -> dict[str, str]:
        options = self.storage_options or {}
        out = {str(k): str(v) for k, v in options.items()}
        if not self.share_storage_options:
            out = {k: v for k, v in out.items() if not looks_secret(k)}
        return out

    def _store_path(self, parts: Sequence[str], rel: str) -> str:
        """A table file's path as Lance's object store names it (what pylance sends and
        expects): the key in the bucket, or a local path without its leading ``/``."""
        full = join_uri(self.location(parts), rel)
        scheme, sep, rest = full.partition("://")
        if sep and scheme != "file":
            return rest.split("/", 1)[1] if "/" in rest else ""
        return (rest if sep else os.path.abspath(full)).lstrip("/")

    def _version_entry(self, parts: Sequence[str], entry: Any) -> ln.TableVersion:
        return ln.TableVersion(
            version=entry.version,
            manifest_path=self._store_path(parts, entry.path),
        )

    # ------------------------------------------------------------------ namespaces

    @_spec_errors
    def create_namespace(self, request: Any) -> ln.CreateNamespaceResponse:
        """Declare a child namespace (NamespaceAlreadyExistsError when it exists)."""
        req = _plain(request)
        parts = self.parse(_id(req))
        props = {str(k): str(v) for k, v in (req.get("properties") or {}).items()}
        try:
            body = json.dumps({"id": list(parts), "properties": props}, sort_keys=True)
            self.root.put_if_absent(namespace_record_path(parts), body.encode())
        except ObjectExistsError:
            if req.get("mode") in ("exist_ok", "ExistOk"):
                return ln.CreateNamespaceResponse(properties={})
            raise lerr.NamespaceAlreadyExistsError(".".join(parts)) from None
        return ln.CreateNamespaceResponse(properties=props)

    def _namespace_known(self, parts: Sequence[str]) -> bool:
        if not parts:
            return True
        if self.root.exists(namespace_record_path(parts)):
            return True
        return bool(self.list_tables(parts)) or any(
            n.startswith(".".join(parts) + ".") for n in self._namespaces()
        )

    def _namespaces(self) -> list[str]:
        names = self.root.list(f"{META_DIR}/namespaces")
        return sorted(n[: -len(".json")].replace("$", ".") for n in names if n.endswith(".json"))

    @_spec_errors
    def list_namespaces(self, request: Any) -> ln.ListNamespacesResponse:
        """The child namespaces of ``id`` (declared ones and those holding tables)."""
        parts = tuple(_plain(request).get("id") or ())
        found = set()
        for dotted in self._namespaces() + self.list_tables(parts):
            names = dotted.split(".")
            if tuple(names[: len(parts)]) == parts and len(names) > len(parts) + (
                0 if dotted in self._namespaces() else 1
            ):
                found.add(names[len(parts)])
        return ln.ListNamespacesResponse(namespaces=sorted(found))

    @_spec_errors
    def describe_namespace(self, request: Any) -> ln.DescribeNamespaceResponse:
        """A namespace that exists (NamespaceNotFoundError otherwise)."""
        parts = tuple(_plain(request).get("id") or ())
        if not self._namespace_known(parts):
            raise lerr.NamespaceNotFoundError(".".join(parts))
        return ln.DescribeNamespaceResponse(properties={})

    @_spec_errors
    def namespace_exists(self, request: Any) -> ln.NamespaceExistsResponse:
        """NamespaceNotFoundError unless the namespace exists."""
        self.describe_namespace(request)
        return ln.NamespaceExistsResponse()

    @_spec_errors
    def drop_namespace(self, request: Any) -> ln.DropNamespaceResponse:
        """Remove a declared namespace with no tables (NamespaceNotEmptyError)."""
        parts = tuple(_plain(request).get("id") or ())
        if self.list_tables(parts):
            raise lerr.NamespaceNotEmptyError(".".join(parts))
        self.root.delete(namespace_record_path(self.parse(list(parts))))
        return ln.DropNamespaceResponse()

    # ------------------------------------------------------------------ tables

    @_spec_errors
    def list_tables(self, request: Any = ()) -> Any:
        """From Python with a prefix tuple: dotted ids. With a spec request: the names
        of the tables directly in namespace ``id``."""
        if isinstance(request, tuple | list):
            return NamespaceCore.list_tables(self, request)
        req = _plain(request)
        parts = tuple(req.get("id") or ())
        names = [
            t.split(".")[-1]
            for t in NamespaceCore.list_tables(self, parts)
            if len(t.split(".")) == len(parts) + 1
        ]
        start = _token(req)
        limit = _int(req, "limit") or _PAGE
        page = names[start : start + limit]
        token = str(start + limit) if start + limit < len(names) else None
        return ln.ListTablesResponse(tables=page, page_token=token)

    @_spec_errors
    def describe_table(self, request: Any) -> ln.DescribeTableResponse:
        """Where the table is; ``managed_versioning`` (commits come back here)."""
        parts = self.require(_id(_plain(request)))
        declared = not scan_versions(self.table_storage(parts))
        return ln.DescribeTableResponse(
            table=parts[-1],
            namespace=list(parts[:-1]),
            location=self.location(parts),
            storage_options=self._options_out(),
            managed_versioning=True,
            is_only_declared=declared,
        )

    @_spec_errors
    def table_exists(self, request: Any) -> ln.TableExistsResponse:
        """TableNotFoundError unless the table is registered."""
        self.require(_id(_plain(request)))
        return ln.TableExistsResponse()

    @_spec_errors
    def declare_table(self, request: Any) -> ln.DeclareTableResponse:
        """Register a table without data (TableAlreadyExistsError)."""
        req = _plain(request)
        parts = self.parse(_id(req))
        if req.get("location") not in (None, self.location(parts), table_location(parts)):
            raise lerr.InvalidInputError("a namespace table lives at its own location")
        self.declare(parts, req.get("properties"))
        return ln.DeclareTableResponse(
            location=self.location(parts),
            storage_options=self._options_out(),
            managed_versioning=True,
        )

    def create_table(
        self,
        request: Any,
        request_data: Any = None,
        *,
        properties: Mapping[str, str] | None = None,
    ) -> Any:
        """``create_table(table_id, data)`` from Python: register the table, write its first
        version from ``data`` (a pyarrow table; an empty one gives an empty table of its
        schema) and return its :class:`~txn_engine.Table` (DatasetAlreadyExistsError when
        it exists). With a spec ``CreateTableRequest`` and Arrow IPC bytes: the spec's
        call (``mode``: create, exist_ok, overwrite)."""
        if isinstance(request, str | list | tuple):
            return NamespaceCore.create_table(self, request, request_data, properties=properties)
        return self._create_table_spec(request, request_data)

    @_spec_errors
    def _create_table_spec(self, request: Any, request_data: Any) -> ln.CreateTableResponse:
        import pyarrow as pa  # type: ignore[import-untyped]

        req = _plain(request)
        parts = self.parse(_id(req))
        mode = str(req.get("mode") or "create").lower().replace("_", "")
        try:
            data = pa.ipc.open_stream(io.BytesIO(bytes(request_data or b""))).read_all()
        except (pa.ArrowInvalid, OSError) as exc:
            raise lerr.InvalidInputError(f"request data is not an Arrow IPC stream: {exc}") from exc
        if self.record(parts) is None:
            NamespaceCore.create_table(self, parts, data, properties=req.get("properties"))
        elif mode == "existok":
            pass
        elif mode == "overwrite":
            self.open(parts).overwrite(data)
        else:
            raise lerr.TableAlreadyExistsError(".".join(parts))
        return ln.CreateTableResponse(
            location=self.location(parts),
            version=self.latest(parts).version,
            storage_options=self._options_out(),
        )

    @_spec_errors
    def drop_table(self, request: Any) -> ln.DropTableResponse:
        """Deregister the table and delete its manifests."""
        parts = self.require(_id(_plain(request)))
        self.drop(parts)
        return ln.DropTableResponse(id=list(parts), location=self.location(parts))

    @_spec_errors
    def deregister_table(self, request: Any) -> ln.DeregisterTableResponse:
        """Deregister the table; its dataset stays where it is."""
        parts = self.require(_id(_plain(request)))
        self.deregister(parts)
        return ln.DeregisterTableResponse(id=list(parts), location=self.location(parts))

    # ------------------------------------------------------------------ versions

    @_spec_errors
    def list_table_versions(self, request: Any) -> ln.ListTableVersionsResponse:
        """The table's versions (``descending``, ``limit``, ``page_token``), after
        rolling a committed transaction's version forward."""
        req = _plain(request)
        parts = self.require(_id(req))
        entries = self.versions(parts)
        if req.get("descending"):
            entries.reverse()
        start = _token(req)
        limit = _int(req, "limit") or _PAGE
        page = entries[start : start + limit]
        token = str(start + limit) if start + limit < len(entries) else None
        return ln.ListTableVersionsResponse(
            versions=[self._version_entry(parts, e) for e in page], page_token=token
        )

    @_spec_errors
    def describe_table_version(self, request: Any) -> ln.DescribeTableVersionResponse:
        """One version (default: the latest, rolled forward)."""
        req = _plain(request)
        parts = self.require(_id(req))
        version = _int(req, "version")
        ds = self.latest(parts) if version is None else self.check_version(parts, version)
        entry = scan_versions(self.table_storage(parts)).get(ds.version)
        if entry is None:
            raise VersionNotFoundError(f"version {ds.version} of {'.'.join(parts)}")
        return ln.DescribeTableVersionResponse(version=self._version_entry(parts, entry))

    def _staged(self, req: Mapping[str, Any]) -> StagedVersion:
        parts = self.require(_id(req))
        version = _int(req, "version")
        if version is None or version < 1:
            raise lerr.InvalidInputError("'version' must be a whole number >= 1")
        if req.get("branch") is not None:
            raise lerr.UnsupportedOperationError("namespace tables have no branches here")
        scheme = req.get("naming_scheme")
        naming = None if scheme is None else NamingScheme[str(scheme).upper()]
        staged = staged_relative(parts, str(req.get("manifest_path") or ""))
        return StagedVersion(parts, version, staged, naming)

    @_spec_errors
    def create_table_version(self, request: Any) -> ln.CreateTableVersionResponse:
        """Make ``version`` from the staged ``manifest_path``, if no such version exists
        (ConcurrentModificationError when it does)."""
        item = self._staged(_plain(request))
        path = create_version(self, item)
        return ln.CreateTableVersionResponse(
            version=ln.TableVersion(
                version=item.version, manifest_path=self._store_path(item.parts, path)
            )
        )

    @_spec_errors
    def batch_create_table_versions(self, request: Any) -> ln.BatchCreateTableVersionsResponse:
        """Create versions of several tables, all or none (see ``commit_staged``)."""
        entries = [_plain(e) for e in (_plain(request).get("entries") or [])]
        items = [self._staged(e) for e in entries]
        landed = commit_staged(self, items)
        return ln.BatchCreateTableVersionsResponse(
            versions=[self._landed(i.parts, landed) for i in items]
        )

    def _landed(self, parts: Sequence[str], landed: Mapping[str, int]) -> ln.TableVersion:
        version = landed[".".join(parts)]
        scheme = scan_versions(self.table_storage(parts)).scheme or NamingScheme.V2
        path = self._store_path(parts, manifest_path(version, scheme))
        return ln.TableVersion(version=version, manifest_path=path)

    @_spec_errors
    def batch_commit_tables(self, request: Any) -> ln.BatchCommitTablesResponse:
        """DeclareTable and CreateTableVersion operations, committed all or nothing
        (declarations first; DeleteTableVersions and DeregisterTable are refused in a
        batch: UnsupportedOperationError)."""
        ops = [_plain(o) for o in (_plain(request).get("operations") or [])]
        declares, items = [], []
        for op in ops:
            if op.get("delete_table_versions") or op.get("deregister_table"):
                raise lerr.UnsupportedOperationError(
                    "BatchCommitTables here takes DeclareTable and CreateTableVersion only"
                )
            if op.get("declare_table"):
                declares.append(_plain(op["declare_table"]))
            elif op.get("create_table_version"):
                items.append(self._staged(_plain(op["create_table_version"])))
            else:
                raise lerr.InvalidInputError("an operation names none of the known kinds")
        declared = [self.declare_table(d) for d in declares]
        landed = commit_staged(self, items) if items else {}
        results: list[ln.CommitTableResult] = []
        it_declared, it_items = iter(declared), iter(items)
        for op in ops:
            if op.get("declare_table"):
                results.append(ln.CommitTableResult(declare_table=next(it_declared)))
            else:
                item = next(it_items)
                results.append(
                    ln.CommitTableResult(
                        create_table_version=ln.CreateTableVersionResponse(
                            version=self._landed(item.parts, landed)
                        )
                    )
                )
        return ln.BatchCommitTablesResponse(results=results)

    @_spec_errors
    def batch_delete_table_versions(self, request: Any) -> ln.BatchDeleteTableVersionsResponse:
        """Delete the manifests of versions in ``ranges`` (never the latest)."""
        req = _plain(request)
        parts = self.require(_id(req))
        storage = self.table_storage(parts)
        latest = self.latest(parts).version
        deleted = 0
        for entry in scan_versions(storage):
            for r in req.get("ranges") or []:
                rng = _plain(r)
                start, end = int(rng.get("start_version", 0)), int(rng.get("end_version", -1))
                inside = entry.version >= start and (end == -1 or entry.version < end)
                if inside and entry.version != latest:
                    storage.delete(entry.path)
                    deleted += 1
                    break
        return ln.BatchDeleteTableVersionsResponse(deleted_count=deleted)
