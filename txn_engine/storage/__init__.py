"""Storage backends. See :mod:`txn_engine.storage.base` for the contract they implement
and ``docs/backends.md`` for each backend's guarantees.

* :class:`LocalStorage`: local disk (plain paths, ``file://``); create-if-absent by hard link.
* :class:`MemoryStorage`: in-process, thread-safe; ``memory://name`` URIs.
* :class:`FsspecStorage`: any fsspec filesystem; atomic only where the capability table
  says so (S3, GCS, Azure, local, memory), otherwise a commit lock or ``unsafe=True``.
* :class:`RecordingStorage`: wraps another storage and counts its operations.
* :class:`ExternalManifestStorage`: commits decided by an external manifest store
  (DynamoDB, as Lance's ``s3+ddb://``) over any storage.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from txn_engine.errors import InvalidStorageArgumentError, StorageError, TxnEngineError
from txn_engine.storage.base import Storage
from txn_engine.storage.external import (
    DynamoDBManifestStore,
    ExternalManifestStorage,
    InMemoryManifestStore,
    ManifestLocation,
    ManifestStore,
    open_dynamodb_storage,
)
from txn_engine.storage.fsspec_store import (
    FSSPEC_CAPABILITIES,
    Atomicity,
    CommitLock,
    FsspecStorage,
    atomicity_of,
)
from txn_engine.storage.local import LocalStorage
from txn_engine.storage.memory import MemoryStorage
from txn_engine.storage.recording import RecordingStorage

__all__ = [
    "FSSPEC_CAPABILITIES",
    "Atomicity",
    "CommitLock",
    "DynamoDBManifestStore",
    "ExternalManifestStorage",
    "FsspecStorage",
    "InMemoryManifestStore",
    "LocalStorage",
    "ManifestLocation",
    "ManifestStore",
    "MemoryStorage",
    "RecordingStorage",
    "Storage",
    "atomicity_of",
    "open_dynamodb_storage",
    "open_storage",
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
    * any other scheme (``s3://``, ``gs://``, ``az://``, ...) → :class:`FsspecStorage` over
      ``fsspec.filesystem(scheme, **storage_options)``. ``storage_options`` are fsspec
      options (s3fs: ``key``, ``secret``, ``endpoint_url``, ...), not Lance's;
    * ``s3+ddb://bucket/path?ddbTableName=T`` → :class:`ExternalManifestStorage` over S3
      with DynamoDB table ``T`` deciding commits (:func:`open_dynamodb_storage`; extra
      option ``dynamodb_endpoint``), interoperable with pylance's ``s3+ddb://``.

    ``commit_lock`` and ``unsafe`` only apply to fsspec filesystems without atomic
    create-if-absent (see :class:`FsspecStorage`); local and memory storage are always
    atomic, so they are accepted and ignored there.

    Raises :class:`~txn_engine.errors.InvalidStorageArgumentError` for an unknown scheme,
    :class:`~txn_engine.errors.StorageError` if the scheme's fsspec package is missing or
    the filesystem cannot be created.
    """
    if not isinstance(uri, (str, os.PathLike)):
        if not isinstance(uri, Storage):
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
    return _open_fsspec(text, scheme, storage_options, commit_lock=commit_lock, unsafe=unsafe)


def _open_fsspec(
    uri: str,
    scheme: str,
    storage_options: Mapping[str, Any] | None,
    *,
    commit_lock: CommitLock | None,
    unsafe: bool,
) -> FsspecStorage:
    import fsspec

    try:
        cls = fsspec.get_filesystem_class(scheme)
    except ValueError as exc:
        raise InvalidStorageArgumentError(f"unknown storage scheme {scheme!r} in {uri!r}") from exc
    except ImportError as exc:
        extra = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "az": "azure", "abfs": "azure"}
        hint = f" (pip install 'txn_engine[{extra[scheme]}]')" if scheme in extra else ""
        raise StorageError(f"the fsspec backend for {scheme}:// is not installed{hint}") from exc
    try:
        fs = cls(**dict(storage_options or {}))
    except TxnEngineError:
        raise
    except Exception as exc:
        raise StorageError(f"cannot create the {scheme}:// filesystem: {exc!r}") from exc
    return FsspecStorage(fs, uri, commit_lock=commit_lock, unsafe=unsafe, uri=uri)
