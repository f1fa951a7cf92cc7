"""Listing objects with their sizes and modification times (the store's own clock).

:func:`list_objects` is what cleanup lists files with, and what the lease protocol reads the
store's clock from (:mod:`txn_engine.storetime`): the modification time a store lists for an
object is stamped by the store, so two such times compare in one clock, whatever the clocks
of the machines that wrote the objects say.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from txn_engine.errors import StorageError
from txn_engine.storage._files import is_staging_name
from txn_engine.storage.base import Storage
from txn_engine.storage.fsspec_store import FsspecStorage
from txn_engine.storage.local import LocalStorage
from txn_engine.storage.obstore_store import ObstoreStorage, is_backend_failure

__all__ = ["ObjectInfo", "list_objects", "obstore_call"]

_NS = 1_000_000_000


@attrs.frozen
class ObjectInfo:
    """One listed object: path relative to the dataset root, size and modification time
    (``None`` when the storage does not tell)."""

    path: str
    size: int | None = None
    mtime_ns: int | None = None


def list_objects(storage: Storage, prefix: str) -> list[ObjectInfo]:
    """Every object under directory ``prefix`` (recursively) with size and mtime.

    Uses ``storage.list_objects(prefix)`` when the storage has one (an optional extension
    of the Storage protocol), the local directory tree for :class:`LocalStorage` (symlinked
    directories are not entered), ``fs.find`` for :class:`FsspecStorage`, and otherwise
    the plain listing of ``prefix`` (plus of each ``_indices/<uuid>`` directory the caller
    names through :func:`plan_cleanup`), without times.
    """
    custom = getattr(storage, "list_objects", None)
    if callable(custom):
        return list(custom(prefix))
    if isinstance(storage, LocalStorage):
        return _list_local(storage, prefix)
    if isinstance(storage, FsspecStorage):
        return _list_fsspec(storage, prefix)
    if isinstance(storage, ObstoreStorage):
        return _list_obstore(storage, prefix)
    return [ObjectInfo(f"{prefix}/{name}") for name in storage.list(prefix)]


def _list_local(storage: LocalStorage, prefix: str) -> list[ObjectInfo]:
    top = os.path.join(str(storage.root), *prefix.split("/"))
    out: list[ObjectInfo] = []
    try:
        if os.path.islink(top) or not os.path.isdir(top):
            return out  # never follow a symlinked directory out of the table
    except OSError:
        return out
    stack = [(top, prefix)]
    append = out.append
    while stack:
        directory, rel = stack.pop()
        try:
            with os.scandir(directory) as it:
                entries = list(it)
        except FileNotFoundError:
            continue
        for entry in entries:
            name = entry.name
            try:
                # the directory entry's type costs no system call; one lstat per file
                # gives size and mtime (a directory is never stat'ed)
                if entry.is_dir(follow_symlinks=False):
                    stack.append((entry.path, f"{rel}/{name}"))
                    continue
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                if name.endswith(".tmp") and is_staging_name(name):
                    continue  # an in-flight LocalStorage.put: not ours to judge
                append(ObjectInfo(f"{rel}/{name}", st.st_size, st.st_mtime_ns))
    return out


_MTIME_KEYS = ("mtime", "LastModified", "last_modified", "updated", "created")


def _mtime_ns(info: Mapping[str, Any]) -> int | None:
    for key in _MTIME_KEYS:
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, (int, float)):
            return int(value * _NS)
        timestamp = getattr(value, "timestamp", None)
        if callable(timestamp):
            return int(timestamp() * _NS)
    return None


def _list_fsspec(storage: FsspecStorage, prefix: str) -> list[ObjectInfo]:
    fs = storage.fs
    root = storage.root
    full = f"{root}/{prefix}" if root else prefix
    try:
        found = fs.find(full, detail=True, withdirs=False)
    except FileNotFoundError:
        return []
    out: list[ObjectInfo] = []
    for name, info in found.items():
        if info.get("type", "file") != "file":
            continue
        stripped = str(fs._strip_protocol(name)).lstrip("/") if root == "" else name
        rel_name = str(fs._strip_protocol(stripped))
        root_norm = root.lstrip("/")
        rel_name = rel_name.lstrip("/")
        if root_norm and rel_name.startswith(root_norm + "/"):
            rel = rel_name[len(root_norm) + 1 :]
        elif not root_norm:
            rel = rel_name
        else:
            continue
        size = info.get("size")
        out.append(ObjectInfo(rel, int(size) if size is not None else None, _mtime_ns(info)))
    return out


def obstore_call(storage: ObstoreStorage, op: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except FileNotFoundError:
        raise
    except BaseException as exc:
        if not is_backend_failure(exc):
            raise
        raise StorageError(f"{op} under {storage.uri} failed: {type(exc).__name__}") from exc


def _list_obstore(storage: ObstoreStorage, prefix: str) -> list[ObjectInfo]:
    import obstore

    def run() -> list[ObjectInfo]:
        out: list[ObjectInfo] = []
        for batch in obstore.list(storage.store, prefix):
            for meta in batch:
                path = str(meta["path"])
                if not path.startswith(prefix + "/"):
                    continue
                size = meta.get("size")
                out.append(
                    ObjectInfo(
                        path,
                        int(size) if size is not None else None,
                        _mtime_ns({"last_modified": meta.get("last_modified")}),
                    )
                )
        return out

    result: list[ObjectInfo] = obstore_call(storage, "list", run)
    return result
