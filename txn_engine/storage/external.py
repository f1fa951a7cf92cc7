"""Commits coordinated by an external manifest store (Lance's DynamoDB commit protocol).

Use this when the object store cannot create an object only-if-absent (an S3-compatible
store without ``If-None-Match``, or any fsspec filesystem outside the capability table), or
to share one commit log with pylance writers that use ``s3+ddb://bucket/ds?ddbTableName=T``.
A key-value store with conditional puts decides which writer owns each version;
the object store only holds bytes.

:class:`ExternalCommitHandler` is the :class:`~txn_engine.storage.handler.CommitHandler`
(the commit loop tells it the version and the manifest path; it parses no names):

``commit(version, path, data)``
    1. refuse (``ObjectExistsError``) if ``path`` already exists (a version written before
       the dataset used the store);
    2. write ``data`` to a staging object ``<path>-<uuid4>``;
    3. **claim** the version: ``store.put_if_not_exists(base_uri, version, staging, size)``.
       A taken version raises ``ObjectExistsError`` (the staging object is deleted). From here
       on the version is committed, whatever happens next;
    4. **finalize**: copy the staging bytes to ``path``, repoint the store entry at it
       (``put_if_exists``), delete the staging object. A failure here is not reported: the
       next reader or writer finishes the job (below).

``finish_pending()``
    asks the store for its latest version and finalizes every claimed-but-unfinalized
    version at the top (**repair**), so a version whose writer crashed after step 3 is never
    missed by a listing; the commit loop calls it before listing ``_versions/``, which would
    otherwise keep losing the race for a version it cannot see.

``resolve(version, path)``
    the manifest exists, or the store holds a claim for it (finalized on the spot).

:class:`ExternalManifestStorage` is the same dataset as a :class:`~txn_engine.storage.Storage`
for code that takes one (``open_storage("s3+ddb://...")``, readers): everything passes
through to the blob store, except that reading ``_versions/`` completes pending commits
first and hides staging objects, and it carries the handler as ``commit_handler``.

Keys are Lance's: ``base_uri`` is the dataset path inside the bucket (``my/ds`` for
``s3://bucket/my/ds``) and entry paths are object paths inside the bucket
(``my/ds/_versions/<name>.manifest``), so txn_engine and pylance (``s3+ddb://``) writers
can share one DynamoDB table and repair each other's crashed commits. Every writer of a
dataset must go through the same store: a writer that creates manifests directly can
collide with a claimed version.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import threading
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Final, Protocol, runtime_checkable

import attrs

from txn_engine.errors import (
    AmbiguousWriteError,
    InvalidStorageArgumentError,
    ObjectExistsError,
    ObjectNotFoundError,
    StorageError,
    TxnEngineError,
)
from txn_engine.storage._paths import check_path, check_prefix
from txn_engine.storage.base import Storage, max_path_bytes, read_concurrency
from txn_engine.storage.fsspec_store import FsspecStorage, _is_ambiguous

__all__ = [
    "DynamoDBManifestStore",
    "ExternalCommitHandler",
    "ExternalManifestStorage",
    "InMemoryManifestStore",
    "ManifestLocation",
    "ManifestStore",
    "default_base_uri",
]

VERSIONS_DIR: Final = "_versions"
_VERSIONS_PREFIX: Final = VERSIONS_DIR + "/"
COMMITTER: Final = "txn_engine"
_STAGING = re.compile(r"\A([0-9]+)\.manifest-[0-9a-fA-F-]{32,36}\Z", re.ASCII)
_BUCKET_PROTOCOLS: Final = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss"})


@attrs.frozen
class ManifestLocation:
    """One entry of a manifest store: where ``version`` of ``base_uri`` lives.

    ``path`` is an object path as stored (staging while the version is being finalized,
    the final ``..._versions/<name>.manifest`` afterwards).
    """

    base_uri: str
    version: int
    path: str
    size: int | None = None
    e_tag: str | None = None
    committer: str | None = None


@runtime_checkable
class ManifestStore(Protocol):
    """A key-value store mapping ``(base_uri, version)`` to a manifest path.

    Implementations must make :meth:`put_if_not_exists` atomic (exactly one of any number
    of concurrent callers for one key succeeds) and reads strongly consistent.
    """

    def put_if_not_exists(
        self, base_uri: str, version: int, path: str, size: int, e_tag: str | None
    ) -> None:
        """Claim ``version``. Raises ObjectExistsError if it is already claimed;
        AmbiguousWriteError if the outcome is unknown; StorageError otherwise."""
        ...

    def put_if_exists(
        self, base_uri: str, version: int, path: str, size: int, e_tag: str | None
    ) -> None:
        """Repoint an existing entry. Raises ObjectNotFoundError if there is none."""
        ...

    def get(self, base_uri: str, version: int) -> ManifestLocation | None:
        """The entry for ``version``, or None."""
        ...

    def get_latest(self, base_uri: str) -> ManifestLocation | None:
        """The entry with the highest version for ``base_uri``, or None."""
        ...


# ---- stores ---------------------------------------------------------------------------------


class InMemoryManifestStore:
    """A thread-safe, process-local :class:`ManifestStore` (tests, single-process setups)."""

    def __init__(self) -> None:
        self._entries: dict[str, dict[int, ManifestLocation]] = {}
        self._lock = threading.Lock()

    def put_if_not_exists(
        self, base_uri: str, version: int, path: str, size: int, e_tag: str | None
    ) -> None:
        """Claim ``version`` (ObjectExistsError if taken)."""
        with self._lock:
            versions = self._entries.setdefault(base_uri, {})
            if version in versions:
                raise ObjectExistsError(f"{base_uri}: version {version} is already claimed")
            versions[version] = ManifestLocation(base_uri, version, path, size, e_tag, COMMITTER)

    def put_if_exists(
        self, base_uri: str, version: int, path: str, size: int, e_tag: str | None
    ) -> None:
        """Repoint ``version`` (ObjectNotFoundError if absent)."""
        with self._lock:
            versions = self._entries.get(base_uri, {})
            if version not in versions:
                raise ObjectNotFoundError(f"{base_uri}: version {version} is not claimed")
            versions[version] = ManifestLocation(base_uri, version, path, size, e_tag, COMMITTER)

    def get(self, base_uri: str, version: int) -> ManifestLocation | None:
        """The entry for ``version`` or None."""
        with self._lock:
            return self._entries.get(base_uri, {}).get(version)

    def get_latest(self, base_uri: str) -> ManifestLocation | None:
        """The highest entry for ``base_uri`` or None."""
        with self._lock:
            versions = self._entries.get(base_uri)
            if not versions:
                return None
            return versions[max(versions)]


class DynamoDBManifestStore:
    """:class:`ManifestStore` on a DynamoDB table, in Lance's schema.

    The table has HASH key ``base_uri`` (S) and RANGE key ``version`` (N); items carry
    ``path`` (S), ``committer`` (S), ``size`` (N) and optionally ``e_tag`` (S). Claims use
    ``attribute_not_exists`` conditions, repoints ``attribute_exists``; reads are
    consistent. The same table can be used by pylance (``s3+ddb://bucket/ds?ddbTableName=T``).

    Pass a boto3 DynamoDB ``client``, or the arguments to make one (``endpoint_url`` for
    a local server). The key schema is checked once at construction
    (``check_schema=False`` skips it); :meth:`create_table` makes a suitable table.
    """

    def __init__(
        self,
        table_name: str,
        *,
        client: Any = None,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        committer: str = COMMITTER,
        check_schema: bool = True,
    ) -> None:
        self.table_name = table_name
        self.committer = committer
        if client is None:
            client = _boto3_client(
                endpoint_url=endpoint_url,
                region_name=region_name,
                aws_access_key_id=aws_access_key_id,
                aws_secret_access_key=aws_secret_access_key,
            )
        self.client: Any = client
        if check_schema:
            self._check_schema()

    def __repr__(self) -> str:
        return f"DynamoDBManifestStore({self.table_name!r})"

    @staticmethod
    def create_table(client: Any, table_name: str) -> None:
        """Create ``table_name`` with Lance's key schema (on-demand billing) and wait for it."""
        client.create_table(
            TableName=table_name,
            KeySchema=[
                {"AttributeName": "base_uri", "KeyType": "HASH"},
                {"AttributeName": "version", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "base_uri", "AttributeType": "S"},
                {"AttributeName": "version", "AttributeType": "N"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        client.get_waiter("table_exists").wait(TableName=table_name)

    def _check_schema(self) -> None:
        desc = self._call(
            "DescribeTable", None, self.client.describe_table, TableName=self.table_name
        )
        keys = {k["KeyType"]: k["AttributeName"] for k in desc["Table"].get("KeySchema", [])}
        if keys != {"HASH": "base_uri", "RANGE": "version"}:
            raise InvalidStorageArgumentError(
                f"DynamoDB table {self.table_name!r} must have HASH key 'base_uri' (S) and "
                f"RANGE key 'version' (N); it has {keys}"
            )

    def _call(self, op: str, write: str | None, fn: Any, **kwargs: Any) -> Any:
        try:
            return fn(**kwargs)
        except TxnEngineError:
            raise
        except Exception as exc:
            code = _client_error_code(exc)
            if code == "ConditionalCheckFailedException" and write == "create":
                raise ObjectExistsError(f"{op} on {self.table_name}: already claimed") from exc
            if code == "ConditionalCheckFailedException" and write == "update":
                raise ObjectNotFoundError(f"{op} on {self.table_name}: no such entry") from exc
            if code == "ResourceNotFoundException":
                raise StorageError(
                    f"DynamoDB table {self.table_name!r} does not exist "
                    "(DynamoDBManifestStore.create_table makes one)"
                ) from exc
            if write is not None and _is_ambiguous(exc):
                raise AmbiguousWriteError(
                    f"{op} on {self.table_name}: the write may or may not have landed ({exc!r})"
                ) from exc
            raise StorageError(f"{op} on {self.table_name} failed: {exc!r}") from exc

    def _item(
        self, base_uri: str, version: int, path: str, size: int, e_tag: str | None
    ) -> dict[str, Any]:
        item: dict[str, Any] = {
            "base_uri": {"S": base_uri},
            "version": {"N": str(version)},
            "path": {"S": path},
            "committer": {"S": self.committer},
            "size": {"N": str(size)},
        }
        if e_tag is not None:
            item["e_tag"] = {"S": e_tag}
        return item

    def put_if_not_exists(
        self, base_uri: str, version: int, path: str, size: int, e_tag: str | None
    ) -> None:
        """Claim ``version`` (ObjectExistsError if taken)."""
        self._call(
            "PutItem",
            "create",
            self.client.put_item,
            TableName=self.table_name,
            Item=self._item(base_uri, version, path, size, e_tag),
            ConditionExpression="attribute_not_exists(#b) AND attribute_not_exists(#v)",
            ExpressionAttributeNames={"#b": "base_uri", "#v": "version"},
        )

    def put_if_exists(
        self, base_uri: str, version: int, path: str, size: int, e_tag: str | None
    ) -> None:
        """Repoint ``version`` (ObjectNotFoundError if absent)."""
        self._call(
            "PutItem",
            "update",
            self.client.put_item,
            TableName=self.table_name,
            Item=self._item(base_uri, version, path, size, e_tag),
            ConditionExpression="attribute_exists(#b) AND attribute_exists(#v)",
            ExpressionAttributeNames={"#b": "base_uri", "#v": "version"},
        )

    def get(self, base_uri: str, version: int) -> ManifestLocation | None:
        """The entry for ``version`` (consistent read) or None."""
        out = self._call(
            "GetItem",
            None,
            self.client.get_item,
            TableName=self.table_name,
            Key={"base_uri": {"S": base_uri}, "version": {"N": str(version)}},
            ConsistentRead=True,
        )
        item = out.get("Item")
        return None if item is None else self._location(item)

    def get_latest(self, base_uri: str) -> ManifestLocation | None:
        """The highest entry for ``base_uri`` (consistent query, newest first) or None."""
        out = self._call(
            "Query",
            None,
            self.client.query,
            TableName=self.table_name,
            KeyConditionExpression="#b = :b",
            ExpressionAttributeNames={"#b": "base_uri"},
            ExpressionAttributeValues={":b": {"S": base_uri}},
            ScanIndexForward=False,
            Limit=1,
            ConsistentRead=True,
        )
        items = out.get("Items") or []
        return self._location(items[0]) if items else None

    def _location(self, item: Mapping[str, Any]) -> ManifestLocation:
        try:
            return ManifestLocation(
                base_uri=item["base_uri"]["S"],
                version=int(item["version"]["N"]),
                path=item["path"]["S"],
                size=int(item["size"]["N"]) if "size" in item else None,
                e_tag=item["e_tag"]["S"] if "e_tag" in item else None,
                committer=item["committer"]["S"] if "committer" in item else None,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise StorageError(
                f"malformed item in DynamoDB table {self.table_name}: {item}"
            ) from exc


def _client_error_code(exc: BaseException) -> str | None:
    response = getattr(exc, "response", None)
    if isinstance(response, Mapping):
        error = response.get("Error")
        if isinstance(error, Mapping):
            code = error.get("Code")
            return str(code) if code is not None else None
    return None


def _boto3_client(**kwargs: Any) -> Any:
    try:
        boto3: Any = importlib.import_module("boto3")
    except ImportError as exc:
        raise StorageError("DynamoDBManifestStore needs boto3 (pip install boto3)") from exc
    args = {k: v for k, v in kwargs.items() if v is not None}
    args.setdefault(
        "region_name",
        os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
    )
    return boto3.client("dynamodb", **args)


# ---- the commit handler -----------------------------------------------------------------------


def default_base_uri(inner: Storage) -> str:
    """The ``base_uri`` Lance uses for a dataset: for bucket stores (S3, GCS, Azure) the path
    inside the bucket (``my/ds`` for ``s3://bucket/my/ds``), otherwise ``inner.uri``."""
    from txn_engine.storage.obstore_store import ObstoreStorage

    if isinstance(inner, ObstoreStorage):
        return inner.prefix
    if isinstance(inner, FsspecStorage):
        protocol = inner.fs.protocol
        primary = protocol if isinstance(protocol, str) else protocol[0]
        if primary in _BUCKET_PROTOCOLS:
            return inner.root.partition("/")[2]
    return inner.uri.rstrip("/")


def _names_version(stem: str, version: int) -> bool:
    """Whether manifest name stem ``stem`` is ``version``'s, in the V1 or the V2 scheme."""
    if len(stem) == 20:  # V2: u64::MAX - version, zero-padded
        return int(stem) == 2**64 - 1 - version
    return stem == str(version)


def is_staging_manifest_name(name: str) -> bool:
    """Whether ``name`` is a staging manifest (``<name>.manifest-<uuid>``)."""
    return _STAGING.match(name) is not None


class ExternalCommitHandler:
    """A :class:`~txn_engine.storage.handler.CommitHandler` whose versions are decided by
    ``store`` (Lance's external manifest protocol; see the module docstring).

    ``inner`` holds the bytes; its ``put_if_absent`` is never used for manifests, so it need
    not be atomic. ``base_uri`` keys this dataset in the store (default
    :func:`default_base_uri`, which matches Lance's DynamoDB keys). The commit loop gives
    the version and the manifest path of every call: nothing here parses manifest names.
    """

    def __init__(
        self, inner: Storage, store: ManifestStore, *, base_uri: str | None = None
    ) -> None:
        self.inner = inner
        self.store = store
        self.base_uri = default_base_uri(inner) if base_uri is None else base_uri.rstrip("/")
        self._prefix = f"{self.base_uri}/" if self.base_uri else ""

    def __repr__(self) -> str:
        return f"ExternalCommitHandler({self.inner!r}, {self.store!r}, base_uri={self.base_uri!r})"

    @property
    def storage(self) -> Storage:
        """The blob store holding the manifests (``inner``)."""
        return self.inner

    # -- paths as stored ----------------------------------------------------------------------

    def _stored(self, rel: str) -> str:
        return f"{self._prefix}{rel}"

    def _relative(self, stored: str) -> str:
        if not stored.startswith(self._prefix):
            raise StorageError(
                f"manifest store entry {stored!r} is outside the dataset {self.base_uri!r}"
            )
        return check_path(stored[len(self._prefix) :])

    def _staged(self, location: ManifestLocation) -> bool:
        """Whether the entry still points at a staging object (claimed, not finalized)."""
        return is_staging_manifest_name(self._relative(location.path).rpartition("/")[2])

    # -- the protocol -------------------------------------------------------------------------

    def claim(self, version: int, path: str, data: bytes) -> ManifestLocation:
        """Steps 1-3 of a commit: write the staging object and claim ``version`` for it.

        After this returns the version is committed (readers complete it). Raises
        ObjectExistsError when the version is taken or ``path`` already exists,
        AmbiguousWriteError when the claim's outcome is unknown (the staging object is kept:
        :meth:`resolve` settles it). :meth:`commit` is ``claim`` followed by :meth:`finalize`.
        """
        check_path(path)
        if self.inner.exists(path):
            raise ObjectExistsError(f"commit: manifest already exists: {path}")
        staging = f"{path}-{uuid.uuid4()}"
        self.inner.put(staging, data)
        stored = self._stored(staging)
        try:
            self.store.put_if_not_exists(self.base_uri, version, stored, len(data), None)
        except ObjectExistsError:
            entry = self.store.get(self.base_uri, version)
            if entry is None or entry.path != stored:  # not our own retried request
                self._delete_quietly(staging)
                raise
        except AmbiguousWriteError:
            raise
        except StorageError:
            self._delete_quietly(staging)
            raise
        return ManifestLocation(self.base_uri, version, stored, len(data), None, COMMITTER)

    def finalize(self, location: ManifestLocation, data: bytes | None = None) -> str:
        """Make the claimed ``location`` final: copy its staging object to the final name,
        repoint the store entry, delete the staging object. Idempotent and safe to run
        concurrently with other finalizers. Returns the final path (relative).

        ``data`` is the staging object's content if the caller has it (the claiming writer
        does), saving one read."""
        rel = self._relative(location.path)
        directory, _, name = rel.rpartition("/")
        match = _STAGING.match(name)
        if match is None:
            return rel  # already final
        if directory != VERSIONS_DIR or not _names_version(match.group(1), location.version):
            # finalizing would copy it over another version's manifest, or outside _versions/
            raise StorageError(
                f"manifest store entry for version {location.version} of {self.base_uri!r} "
                f"points at {location.path!r}, not a staging manifest of that version; "
                "nothing finalized"
            )
        final = f"{directory}/{match.group(1)}.manifest"
        try:
            if data is None:
                data = self.inner.get(rel)
        except ObjectNotFoundError:
            # Another finalizer copied it and removed the staging object (it deletes the
            # staging object only after the copy and the repoint).
            if self.inner.exists(final):
                return final
            raise StorageError(
                f"{self.inner.uri}: version {location.version} is claimed at {location.path} "
                "but neither that staging object nor the final manifest exists"
            ) from None
        self.inner.put(final, data)
        self.store.put_if_exists(
            self.base_uri, location.version, self._stored(final), len(data), None
        )
        self._delete_quietly(rel)
        return final

    def _delete_quietly(self, rel: str) -> None:
        with contextlib.suppress(StorageError):
            self.inner.delete(rel)

    def commit(self, version: int, path: str, data: bytes) -> None:
        """Claim ``version`` in the store, then finalize (a failure after the claim is left
        for :meth:`finish_pending` / :meth:`resolve`: the version is committed)."""
        location = self.claim(version, path, data)
        with contextlib.suppress(StorageError):  # committed; the next reader completes it
            self.finalize(location, data)

    def resolve(self, version: int, path: str) -> bool:
        """Whether ``version`` exists at ``path``: the manifest is there, or the store holds
        a claim for it (finalized now). One existence check when the manifest is there."""
        if self.inner.exists(check_path(path)):
            return True
        entry = self.store.get(self.base_uri, version)
        if entry is None:
            return False
        rel = self._relative(entry.path)
        if rel != path and not rel.startswith(f"{path}-"):
            return False  # claimed under the other naming scheme
        return self.finalize(entry) == path and self.inner.exists(path)

    def finish_pending(self) -> list[str]:
        """Finalize the claimed-but-unfinalized versions at the top of the store (a writer
        that stopped between claim and finalize), newest first down to the first final
        entry; return their final paths, ascending. One ``get_latest`` when none is pending
        (every writer of the dataset completes what it lists before building on it)."""
        finished: list[str] = []
        entry = self.store.get_latest(self.base_uri)
        while entry is not None and self._staged(entry):
            finished.append(self.finalize(entry))
            entry = self.store.get(self.base_uri, entry.version - 1) if entry.version > 1 else None
        finished.reverse()
        return finished


# ---- the storage view ---------------------------------------------------------------------------


class ExternalManifestStorage:
    """The blob store of a dataset whose commits an external store decides, as a
    :class:`~txn_engine.storage.Storage` for code that takes one (readers, ``s3+ddb://``).

    It carries its :class:`ExternalCommitHandler` as ``commit_handler``, which the commit
    loop uses (:func:`~txn_engine.storage.handler.commit_handler_for`). Every method passes
    through to ``inner``, except that reading ``_versions/`` first completes pending commits
    (``commit_handler.finish_pending()``: a listing shows every committed version, and staging
    objects are hidden), and that creating a manifest with ``put_if_absent`` is refused: a
    manifest is created by the commit handler, which is told its version.
    """

    def __init__(
        self, inner: Storage, store: ManifestStore, *, base_uri: str | None = None
    ) -> None:
        self.commit_handler = ExternalCommitHandler(inner, store, base_uri=base_uri)

    def __repr__(self) -> str:
        h = self.commit_handler
        return f"ExternalManifestStorage({h.inner!r}, {h.store!r}, base_uri={h.base_uri!r})"

    @property
    def inner(self) -> Storage:
        """The blob store."""
        return self.commit_handler.inner

    @property
    def store(self) -> ManifestStore:
        """The manifest store deciding commits."""
        return self.commit_handler.store

    @property
    def base_uri(self) -> str:
        """The dataset's key in the manifest store."""
        return self.commit_handler.base_uri

    @property
    def uri(self) -> str:
        """The dataset root (``inner.uri``)."""
        return self.inner.uri

    @property
    def read_concurrency(self) -> int:
        """The blob store's (see :func:`~txn_engine.storage.base.read_concurrency`)."""
        return read_concurrency(self.inner)

    @property
    def max_path_bytes(self) -> int:
        """The blob store's (see :func:`~txn_engine.storage.base.max_path_bytes`)."""
        return max_path_bytes(self.inner)

    def _completed(self, path: str) -> bool:
        """A manifest missing from the blob store: complete pending commits; is it there now?"""
        return path.startswith(_VERSIONS_PREFIX) and path in self.commit_handler.finish_pending()

    def put_if_absent(self, path: str, data: bytes) -> None:
        """Pass-through, except for manifests (InvalidStorageArgumentError: they are created
        by ``commit_handler.commit(version, path, data)``; a storage wrapping this one must
        forward ``commit_handler``)."""
        if check_path(path).startswith(_VERSIONS_PREFIX):
            raise InvalidStorageArgumentError(
                f"{path}: manifests of this dataset are created by its commit handler "
                "(commit_handler.commit(version, path, data)); a storage wrapping "
                f"{type(self).__name__} must forward its commit_handler attribute"
            )
        self.inner.put_if_absent(path, data)

    def put(self, path: str, data: bytes) -> None:
        """Pass-through."""
        self.inner.put(path, data)

    def get(self, path: str) -> bytes:
        """Pass-through; a claimed-but-unfinalized manifest is completed first."""
        try:
            return self.inner.get(path)
        except ObjectNotFoundError:
            if not self._completed(path):
                raise
        return self.inner.get(path)

    def get_range(self, path: str, start: int, end: int) -> bytes:
        """Pass-through; a claimed-but-unfinalized manifest is completed first."""
        try:
            return self.inner.get_range(path, start, end)
        except ObjectNotFoundError:
            if not self._completed(path):
                raise
        return self.inner.get_range(path, start, end)

    def size(self, path: str) -> int:
        """Pass-through; a claimed-but-unfinalized manifest is completed first."""
        try:
            return self.inner.size(path)
        except ObjectNotFoundError:
            if not self._completed(path):
                raise
        return self.inner.size(path)

    def exists(self, path: str) -> bool:
        """Pass-through; a claimed-but-unfinalized manifest is completed and exists."""
        return self.inner.exists(path) or self._completed(path)

    def delete(self, path: str) -> None:
        """Pass-through (the store entry of a deleted manifest is kept)."""
        self.inner.delete(path)

    def list(self, prefix: str) -> Sequence[str]:
        """Pass-through, except ``_versions``: pending commits are completed first, and
        staging objects are hidden."""
        if check_prefix(prefix) != VERSIONS_DIR:
            return list(self.inner.list(prefix))
        self.commit_handler.finish_pending()
        return [n for n in self.inner.list(prefix) if not is_staging_manifest_name(n)]
