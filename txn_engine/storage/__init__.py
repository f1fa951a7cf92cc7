"""Storage backends. See :mod:`txn_engine.storage.base` for the contract they implement
and ``docs/backends.md`` for each backend's guarantees.

* :class:`LocalStorage`: local disk (plain paths, ``file://``); create-if-absent by hard link.
* :class:`MemoryStorage`: in-process, thread-safe; ``memory://name`` URIs.
* :class:`ObstoreStorage`: S3, GCS and Azure through ``obstore`` (Rust ``object_store``,
  as pylance); the default for ``s3://``, ``gs://``, ``az://``/``abfs://`` when installed.
* :class:`FsspecStorage`: any fsspec filesystem; atomic only where the capability table
  says so (S3, GCS, Azure, local, memory), otherwise a commit lock or ``unsafe=True``.
  Chosen for cloud URIs with the storage option ``txn_engine_backend="fsspec"``.
* :class:`RecordingStorage`: wraps another storage and counts its operations.
* :class:`ExternalManifestStorage`: commits decided by an external manifest store
  (DynamoDB, as Lance's ``s3+ddb://``) over any storage.

What makes a version exist is a :class:`CommitHandler` (:mod:`txn_engine.storage.handler`):
:class:`StoreCommitHandler` (the storage's own create-if-absent, the default) or
:class:`ExternalCommitHandler` (the manifest store); :func:`commit_handler_for` picks it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs

from txn_engine.errors import InvalidStorageArgumentError, StorageError, TxnEngineError
from txn_engine.redact import redact_text
from txn_engine.storage.base import Storage, is_storage
from txn_engine.storage.external import (
    DynamoDBManifestStore,
    ExternalCommitHandler,
    ExternalManifestStorage,
    InMemoryManifestStore,
    ManifestLocation,
    ManifestStore,
)
from txn_engine.storage.fsspec_store import (
    FSSPEC_CAPABILITIES,
    Atomicity,
    CommitLock,
    FsspecStorage,
    atomicity_of,
)
from txn_engine.storage.handler import CommitHandler, StoreCommitHandler, commit_handler_for
from txn_engine.storage.local import LocalStorage
from txn_engine.storage.memory import MemoryStorage
from txn_engine.storage.obstore_store import ObstoreStorage, obstore_available
from txn_engine.storage.options import (
    BACKEND_OPTION,
    UNSAFE_OPTION,
    StorageOptions,
    is_secret,
    redact,
    resolve_options,
    store_kind,
)
from txn_engine.storage.recording import RecordingStorage

__all__ = [
    "FSSPEC_CAPABILITIES",
    "Atomicity",
    "CommitHandler",
    "CommitLock",
    "DynamoDBManifestStore",
    "ExternalCommitHandler",
    "ExternalManifestStorage",
    "FsspecStorage",
    "InMemoryManifestStore",
    "LocalStorage",
    "ManifestLocation",
    "ManifestStore",
    "MemoryStorage",
    "ObstoreStorage",
    "RecordingStorage",
    "Storage",
    "StorageOptions",
    "StoreCommitHandler",
    "atomicity_of",
    "commit_handler_for",
    "open_dynamodb_storage",
    "open_storage",
    "redact",
    "resolve_options",
]

_SCHEME = re.compile(r"\A([A-Za-z][A-Za-z0-9+.-]+)://")


def open_storage(
    uri: str | os.PathLike[str] | Storage,
    storage_options: Mapping[str, Any] | None = None,
    *,
    commit_lock: CommitLock | None = None,
    unsafe: bool = False,
) -> Storage:
    """Return the :class:`Storage` for a dataset URI.

    * a :class:`Storage` instance is returned as is (passing options with it is an error);
    * a plain path or ``file://`` URI → :class:`LocalStorage`;
    * ``memory://name`` → ``MemoryStorage.shared(name)``: txn_engine's own process-wide
      named store (not fsspec's global memory filesystem, not pylance's ``memory://``);
    * ``s3://``, ``s3a://``, ``gs://``, ``gcs://``, ``az://``, ``abfs[s]://`` →
      :class:`ObstoreStorage` when ``obstore`` is installed, else (or with the option
      ``txn_engine_backend="fsspec"``) :class:`FsspecStorage` over s3fs / gcsfs / adlfs.
      ``storage_options`` use **Lance's names** (``aws_access_key_id``, ``aws_endpoint``,
      ``allow_http``, ``azure_storage_account_name``, ``google_service_account``, ...; the
      table is :data:`txn_engine.storage.options.OPTIONS`), the same set pylance takes;
      the older fsspec spellings (``key``, ``secret``, ``endpoint_url``, ``client_kwargs``)
      are accepted as aliases. Before the first manifest create on such a store, the store
      is probed once per session for real conditional-write support
      (AtomicityUnsupportedError if it has none; opt out with
      ``txn_engine_unsafe_no_atomicity_check="true"`` or ``unsafe=True``);
    * any other scheme → :class:`FsspecStorage` over
      ``fsspec.filesystem(scheme, **storage_options)`` (options passed through unchanged);
    * ``s3+ddb://bucket/path?ddbTableName=T`` → :class:`ExternalManifestStorage` over S3
      with DynamoDB table ``T`` deciding commits (:func:`open_dynamodb_storage`; extra
      option ``dynamodb_endpoint``), interoperable with pylance's ``s3+ddb://``.

    ``commit_lock`` only applies to fsspec filesystems without atomic create-if-absent
    (see :class:`FsspecStorage`); ``unsafe`` there means check-then-write, and on cloud
    stores it skips the atomicity probe. Local and memory storage are always atomic, so
    both are accepted and ignored there.

    Raises :class:`~txn_engine.errors.InvalidStorageArgumentError` for an unknown scheme or
    an unknown option name (the message lists the accepted ones; secret values are never
    shown), :class:`~txn_engine.errors.StorageError` if no backend package for the scheme
    is installed or the filesystem cannot be created.
    """
    if not isinstance(uri, (str, os.PathLike)):
        if not is_storage(uri):
            raise InvalidStorageArgumentError(
                f"expected a URI, a path or a Storage, got {type(uri).__name__}"
            )
        if storage_options or commit_lock is not None or unsafe:
            raise InvalidStorageArgumentError(
                "storage_options, commit_lock and unsafe cannot be applied to an existing "
                "Storage object; configure the Storage itself"
            )
        return uri
    text = os.fspath(uri)
    match = _SCHEME.match(text)
    if match is None or match.group(1).lower() == "file":
        if storage_options:
            raise InvalidStorageArgumentError(
                f"storage_options are not supported for local paths: {sorted(storage_options)}"
            )
        return LocalStorage(text)
    scheme = match.group(1).lower()
    if scheme == "memory":
        if storage_options:
            raise InvalidStorageArgumentError(
                f"storage_options are not supported for memory://: {sorted(storage_options)}"
            )
        return MemoryStorage.shared(text[match.end() :].rstrip("/"))
    if scheme == "s3+ddb":
        if commit_lock is not None or unsafe:
            raise InvalidStorageArgumentError(
                "s3+ddb:// commits through DynamoDB; commit_lock and unsafe do not apply"
            )
        return open_dynamodb_storage(text, storage_options)
    if store_kind(scheme) is not None:
        return _open_cloud(text, scheme, storage_options, commit_lock=commit_lock, unsafe=unsafe)
    return _open_fsspec(text, scheme, storage_options, commit_lock=commit_lock, unsafe=unsafe)


def _open_cloud(
    uri: str,
    scheme: str,
    storage_options: Mapping[str, Any] | None,
    *,
    commit_lock: CommitLock | None,
    unsafe: bool,
) -> Storage:
    """S3 / GCS / Azure: Lance-named options, obstore by default, fsspec on request."""
    options = resolve_options(scheme, storage_options)
    backend = options.backend
    if backend is None:
        # an fsspec-only spelling (client_kwargs extras, connection_string, gcsfs token...)
        # or a commit lock keeps an existing fsspec configuration on fsspec
        fsspec_only = options.fsspec_only_names()
        use_fsspec = commit_lock is not None or bool(fsspec_only) or not obstore_available()
        backend = "fsspec" if use_fsspec else "obstore"
    if backend == "obstore":
        if commit_lock is not None:
            raise InvalidStorageArgumentError(
                "commit_lock applies to the fsspec backend only (obstore's conditional put "
                f"is atomic); pass {BACKEND_OPTION}='fsspec' to use a lock"
            )
        return ObstoreStorage(uri, options, unsafe=unsafe)
    return _open_fsspec(
        uri,
        scheme,
        options.fsspec_arguments(),
        commit_lock=commit_lock,
        unsafe=unsafe,
        check_atomicity=not options.unsafe_no_atomicity_check,
    )


def _open_fsspec(
    uri: str,
    scheme: str,
    storage_options: Mapping[str, Any] | None,
    *,
    commit_lock: CommitLock | None,
    unsafe: bool,
    check_atomicity: bool = True,
) -> FsspecStorage:
    import fsspec

    try:
        cls = fsspec.get_filesystem_class(scheme)
    except ValueError as exc:
        raise InvalidStorageArgumentError(f"unknown storage scheme {scheme!r} in {uri!r}") from exc
    except ImportError as exc:
        extra = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "az": "azure", "abfs": "azure"}
        hint = f" (pip install 'txn_engine[{extra[scheme]}]')" if scheme in extra else ""
        raise StorageError(
            f"no backend for {scheme}:// is installed{hint}"
            + (" (or pip install 'txn_engine[obstore]')" if store_kind(scheme) else "")
        ) from exc
    options = {k: v for k, v in (storage_options or {}).items() if k != UNSAFE_OPTION}
    if storage_options and UNSAFE_OPTION in storage_options:
        check_atomicity = False
    try:
        fs = cls(**options)
    except TxnEngineError:
        raise
    except Exception as exc:
        # the message of a constructor error may quote an option value: mask the secrets
        secrets = [
            value
            for name, value in options.items()
            if is_secret(str(name)) and isinstance(value, str) and len(value) >= 4
        ]
        text = redact_text(str(exc), secrets)
        raise StorageError(
            f"cannot create the {scheme}:// filesystem ({type(exc).__name__}: {text}) with "
            f"options {redact(options)}"
        ) from None
    return FsspecStorage(
        fs, uri, commit_lock=commit_lock, unsafe=unsafe, uri=uri, check_atomicity=check_atomicity
    )


def open_dynamodb_storage(
    uri: str, storage_options: Mapping[str, Any] | None = None
) -> ExternalManifestStorage:
    """Open ``s3+ddb://bucket/path?ddbTableName=TABLE`` as Lance does: S3 for the bytes
    (through :func:`~txn_engine.storage.open_storage`, so obstore by default), DynamoDB
    table ``TABLE`` for commits.

    ``storage_options`` are Lance's S3 options (``aws_access_key_id``,
    ``aws_secret_access_key``, ``aws_endpoint``, ``aws_region``, ``allow_http``, ...; the
    older s3fs spellings ``key``/``secret``/``endpoint_url``/``client_kwargs`` are aliases)
    plus ``dynamodb_endpoint`` (default: env ``DYNAMODB_ENDPOINT``, else AWS). The DynamoDB
    client reuses the keys and the region. The S3 store is not probed for conditional
    writes: manifests are never created on it directly.
    """
    head, _, query = uri.partition("?")
    if not head.startswith("s3+ddb://"):
        raise InvalidStorageArgumentError(f"not an s3+ddb:// URI: {uri!r}")
    tables = parse_qs(query).get("ddbTableName")
    if not tables or not tables[0]:
        raise InvalidStorageArgumentError(
            f"{uri!r} needs the DynamoDB table as a query parameter: ?ddbTableName=TABLE"
        )
    options = resolve_options("s3", storage_options)
    endpoint = options.get("dynamodb_endpoint") or os.environ.get("DYNAMODB_ENDPOINT")
    store = DynamoDBManifestStore(
        tables[0],
        endpoint_url=endpoint,
        region_name=options.get("aws_region") or options.get("aws_default_region"),
        aws_access_key_id=options.get("aws_access_key_id"),
        aws_secret_access_key=options.get("aws_secret_access_key"),
    )
    s3_uri = "s3://" + head[len("s3+ddb://") :]
    return ExternalManifestStorage(open_storage(s3_uri, storage_options, unsafe=True), store)
