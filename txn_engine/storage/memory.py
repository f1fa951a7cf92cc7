"""In-memory storage: instance-scoped by default, shareable by name, thread-safe.

Unlike fsspec's ``MemoryFileSystem`` (one class-level dict shared by every instance), each
:class:`MemoryStorage` owns its store unless you ask for a named shared one, so tests do not
leak state into each other. All guarantees of the storage contract hold within one process.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator, Sequence
from typing import ClassVar

from txn_engine.errors import ObjectExistsError, ObjectNotFoundError
from txn_engine.storage._paths import check_path, check_prefix, check_range

__all__ = ["MemoryStorage"]


class _Store:
    """The backing state: objects by path plus a per-directory name index (fast listing)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.objects: dict[str, bytes] = {}
        self.dirs: dict[str, set[str]] = {}

    def add(self, path: str, data: bytes) -> None:
        """Store ``data`` at ``path``; caller holds the lock."""
        directory, _, name = path.rpartition("/")
        self.objects[path] = data
        self.dirs.setdefault(directory, set()).add(name)

    def remove(self, path: str) -> None:
        """Drop ``path`` if present; caller holds the lock."""
        if self.objects.pop(path, None) is None:
            return
        directory, _, name = path.rpartition("/")
        names = self.dirs[directory]
        names.discard(name)
        if not names:
            del self.dirs[directory]


_anonymous_ids = itertools.count(1)


class MemoryStorage:
    """A thread-safe in-process object store implementing
    :class:`~txn_engine.storage.Storage`.

    ``MemoryStorage()`` is private to the instance (its ``uri`` is a unique
    ``memory://anonymous-N``). ``MemoryStorage.shared(name)`` returns a new handle onto the
    process-wide store called ``name``: every handle for the same name sees the same
    objects, which is how tests run several writers against one dataset in one process.
    Call :meth:`drop_shared` to forget a named store.

    Objects are immutable ``bytes``; :meth:`get` returns them without copying.
    """

    _shared: ClassVar[dict[str, _Store]] = {}
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, uri: str | None = None, *, _store: _Store | None = None) -> None:
        self._uri = uri if uri is not None else f"memory://anonymous-{next(_anonymous_ids)}"
        self._store = _store if _store is not None else _Store()

    @classmethod
    def shared(cls, name: str) -> MemoryStorage:
        """Return a handle onto the process-wide store ``name`` (created on first use)."""
        with cls._shared_lock:
            store = cls._shared.get(name)
            if store is None:
                store = cls._shared[name] = _Store()
        return cls(f"memory://{name}", _store=store)

    @classmethod
    def drop_shared(cls, name: str) -> None:
        """Forget the shared store ``name`` (existing handles keep their objects)."""
        with cls._shared_lock:
            cls._shared.pop(name, None)

    def __repr__(self) -> str:
        return f"MemoryStorage({self._uri!r})"

    @property
    def uri(self) -> str:
        """``memory://<name>`` (or ``memory://anonymous-N`` for a private store)."""
        return self._uri

    def put_if_absent(self, path: str, data: bytes) -> None:
        """Create ``path`` iff absent (atomic under the store lock)."""
        check_path(path)
        blob = bytes(data)
        store = self._store
        with store.lock:
            if path in store.objects:
                raise ObjectExistsError(f"object already exists: {self._uri}/{path}")
            store.add(path, blob)

    def put(self, path: str, data: bytes) -> None:
        """Write ``path`` unconditionally."""
        check_path(path)
        blob = bytes(data)
        with self._store.lock:
            self._store.add(path, blob)

    def get(self, path: str) -> bytes:
        """Return the object; ObjectNotFoundError if absent."""
        check_path(path)
        with self._store.lock:
            blob = self._store.objects.get(path)
        if blob is None:
            raise ObjectNotFoundError(f"no object at {self._uri}/{path}")
        return blob

    def get_range(self, path: str, start: int, end: int) -> bytes:
        """Return bytes ``[start, end)`` clamped to the object's size."""
        check_range(start, end)
        return self.get(path)[start:end]

    def size(self, path: str) -> int:
        """Return the object's size; ObjectNotFoundError if absent."""
        return len(self.get(path))

    def list(self, prefix: str) -> Sequence[str]:
        """Return the names directly under directory ``prefix`` (missing → empty)."""
        directory = check_prefix(prefix)
        with self._store.lock:
            names = self._store.dirs.get(directory)
            return list(names) if names else []

    def list_ordered(self, prefix: str) -> Iterator[str]:
        """The names directly under directory ``prefix`` in byte order (an ordered store,
        as S3, GCS and Azure are: :func:`txn_engine.format.naming.scan_versions` stops
        early on them)."""
        return iter(sorted(self.list(prefix)))

    def exists(self, path: str) -> bool:
        """Whether an object exists at ``path``."""
        check_path(path)
        with self._store.lock:
            return path in self._store.objects

    def delete(self, path: str) -> None:
        """Delete ``path``; missing is fine."""
        check_path(path)
        with self._store.lock:
            self._store.remove(path)
