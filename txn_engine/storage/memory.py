"""In-memory storage: instance-scoped (or shared by name), thread-safe."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import ClassVar

from txn_engine.errors import ObjectExistsError, ObjectNotFoundError

__all__ = ["MemoryStorage"]


class _Store:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.objects: dict[str, bytes] = {}


class MemoryStorage:
    """A dict of path -> bytes behind a lock. Every guarantee of the Storage contract holds
    within one process. ``MemoryStorage.shared(name)`` gives handles onto one store, to let
    several writers in one process share a dataset."""

    _shared: ClassVar[dict[str, _Store]] = {}
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, uri: str = "memory://", *, _store: _Store | None = None) -> None:
        self._uri = uri
        self._store = _store if _store is not None else _Store()

    @classmethod
    def shared(cls, name: str) -> MemoryStorage:
        """A handle onto the process-wide store called ``name`` (created on first use)."""
        with cls._shared_lock:
            store = cls._shared.setdefault(name, _Store())
        return cls(f"memory://{name}", _store=store)

    @property
    def uri(self) -> str:
        """``memory://<name>``."""
        return self._uri

    def put_if_absent(self, path: str, data: bytes) -> None:
        """Create ``path`` only if absent."""
        with self._store.lock:
            if path in self._store.objects:
                raise ObjectExistsError(f"{path}: already exists")
            self._store.objects[path] = bytes(data)

    def put(self, path: str, data: bytes) -> None:
        """Write ``path`` unconditionally."""
        with self._store.lock:
            self._store.objects[path] = bytes(data)

    def get(self, path: str) -> bytes:
        """Read the whole object."""
        with self._store.lock:
            try:
                return self._store.objects[path]
            except KeyError:
                raise ObjectNotFoundError(f"{path}: no such object") from None

    def get_range(self, path: str, start: int, end: int) -> bytes:
        """Read bytes ``[start, end)``."""
        return self.get(path)[start:end]

    def size(self, path: str) -> int:
        """Size in bytes."""
        return len(self.get(path))

    def list(self, prefix: str) -> Sequence[str]:
        """Names directly under directory ``prefix``."""
        base = prefix.rstrip("/") + "/"
        with self._store.lock:
            keys = list(self._store.objects)
        return [k[len(base) :] for k in keys if k.startswith(base) and "/" not in k[len(base) :]]

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists."""
        with self._store.lock:
            return path in self._store.objects

    def delete(self, path: str) -> None:
        """Delete ``path`` if present."""
        with self._store.lock:
            self._store.objects.pop(path, None)

    def __repr__(self) -> str:
        return f"MemoryStorage({self._uri!r})"
