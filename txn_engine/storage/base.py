"""The storage contract every backend implements.

A :class:`Storage` is rooted at one dataset URI; every path it takes is relative to that
root and uses ``/`` separators (``_versions/18446744073709551614.manifest``,
``_transactions/0-<uuid>.txn``, ``data/<name>.lance``). Empty, ``.`` or ``..`` segments, a
leading ``/``, backslashes and NUL bytes are refused with
:class:`~txn_engine.errors.InvalidStorageArgumentError` (as are negative byte ranges).
Directories are not objects: ``exists`` is ``False`` for them and ``list`` names objects only.

Guarantees a backend must give (the commit protocol is only correct if they hold):

1. **Mutual exclusion per path** -- :meth:`Storage.put_if_absent` creates the object only
   if no object exists at that path, atomically: of any number of concurrent callers (in
   any process, on any machine using the same backend type) exactly one succeeds, the
   others get :class:`~txn_engine.errors.ObjectExistsError`.
2. **Atomic visibility** -- a reader sees either no object or the complete bytes, never a
   prefix.
3. **Read-after-write and list-after-write consistency** -- once ``put_if_absent``/``put``
   returned, every later :meth:`get` and :meth:`list` (from any client) sees the object.

A backend that cannot give (1) must raise
:class:`~txn_engine.errors.AtomicityUnsupportedError` from ``put_if_absent`` unless the
caller supplied a commit lock or explicitly opted into unsafe mode.

On object stores, ``ObjectExistsError`` can also mean that *this* call created the object
on an earlier attempt whose response was lost (the client library retried internally and
the retry hit the precondition). A caller that must know who won (the commit loop) reads
the object back and compares it with what it wrote.

Failures map to the hierarchy in :mod:`txn_engine.errors`: a missing object is
:class:`~txn_engine.errors.ObjectNotFoundError`; a write whose outcome is unknown (timeout,
lost response) is :class:`~txn_engine.errors.AmbiguousWriteError`; anything else is
:class:`~txn_engine.errors.StorageError` with the backend's exception as ``__cause__``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from txn_engine import session
from txn_engine.errors import LimitExceededError

__all__ = [
    "DEFAULT_OBJECT_STORE_READ_CONCURRENCY",
    "OBJECT_KEY_BYTES",
    "ForwardingStorage",
    "Storage",
    "get_bounded",
    "is_storage",
    "max_path_bytes",
    "read_concurrency",
]

#: Concurrent reads an object-store backend allows one commit (reading the versions it is
#: behind); each read is a round trip, so they overlap. Local and memory stores read serially.
DEFAULT_OBJECT_STORE_READ_CONCURRENCY = 8


@runtime_checkable
class Storage(Protocol):
    """A dataset-rooted object store with atomic create-if-absent (see module docstring)."""

    @property
    def uri(self) -> str:
        """The dataset root this storage is bound to, as the user gave it."""
        ...

    def put_if_absent(self, path: str, data: bytes) -> None:
        """Create ``path`` with ``data`` only if nothing exists there (atomic, guarantee 1).

        Raises ObjectExistsError when the object already exists (see the module docstring
        for the lost-response caveat), AtomicityUnsupportedError when the backend cannot
        do this atomically and was given no commit lock / unsafe opt-in.
        """
        ...

    def put(self, path: str, data: bytes) -> None:
        """Write ``path`` unconditionally (overwrites). Used for transaction, deletion and
        data files, whose names are unique per writer."""
        ...

    def get(self, path: str) -> bytes:
        """Return the whole object. Raises ObjectNotFoundError if absent."""
        ...

    def get_range(self, path: str, start: int, end: int) -> bytes:
        """Return bytes ``[start, end)`` of the object (clamped to its size)."""
        ...

    def size(self, path: str) -> int:
        """Return the object's size in bytes. Raises ObjectNotFoundError if absent."""
        ...

    def list(self, prefix: str) -> Sequence[str]:
        """Return the names (not paths) of the objects directly under directory ``prefix``
        (e.g. ``"_versions"``), in no guaranteed order. A missing directory lists empty."""
        ...

    def exists(self, path: str) -> bool:
        """Return whether an object exists at ``path``."""
        ...

    def delete(self, path: str) -> None:
        """Delete ``path``; deleting a missing object is not an error."""
        ...


def get_bounded(storage: Storage, path: str, max_bytes: int, *, what: str | None = None) -> bytes:
    """Return the whole object at ``path``, refusing one larger than ``max_bytes`` *before*
    reading it (:class:`~txn_engine.errors.LimitExceededError`, ``limit="max_bytes"``).

    Use it instead of :meth:`Storage.get` for anything whose size a hostile writer controls.
    A backend may implement ``get_bounded(path, max_bytes)`` itself (local disk does: one
    open, ``fstat``, refusal of non-regular files); otherwise this asks :meth:`Storage.size`
    and reads ``[0, size)`` with :meth:`Storage.get_range`, so every backend and wrapper
    keeps working without change. Raises ObjectNotFoundError when the object is absent.
    """
    label = what if what is not None else f"{storage.uri}/{path}"
    native = getattr(storage, "get_bounded", None)
    if callable(native):
        data = native(path, max_bytes)
        if not isinstance(data, bytes):
            data = bytes(data)
    else:
        size = storage.size(path)
        if size > max_bytes:
            raise LimitExceededError(
                f"{label}: object is {size} bytes, more than the {max_bytes} allowed here",
                limit="max_bytes",
            )
        data = storage.get_range(path, 0, size)
    if len(data) > max_bytes:  # the object grew between size() and the read
        raise LimitExceededError(
            f"{label}: object is more than the {max_bytes} bytes allowed here",
            limit="max_bytes",
        )
    return data


class StorageClasses:
    """The classes whose instances a session found to be :class:`Storage` (its part of a
    :class:`~txn_engine.session.Session`). No lock: a set's ``in`` and ``add`` are atomic,
    and two threads adding the same class add it once."""

    def __init__(self) -> None:
        self.known: set[type] = set()


def is_storage(obj: object) -> bool:
    """``isinstance(obj, Storage)``, remembered per class (in the current session) once
    true: a runtime-checkable protocol check looks up every method (10-25 us), and the
    commit path asks it several times per commit with the same storage classes."""
    cls = type(obj)
    known = session.current().part(StorageClasses).known
    if cls in known:
        return True
    if isinstance(obj, Storage):
        known.add(cls)
        return True
    return False


def read_concurrency(storage: Storage) -> int:
    """How many reads of ``storage`` one caller may run at once (at least 1).

    A backend declares it with a ``read_concurrency`` attribute: object stores, where each
    read is a network round trip, allow several (the commit loop reads the versions it is
    behind concurrently); local and memory stores, and anything that does not say, get 1.
    """
    value = getattr(storage, "read_concurrency", 1)
    if isinstance(value, bool) or not isinstance(value, int):
        return 1
    return max(1, min(value, 64))


#: The longest object key (UTF-8 bytes) S3, Google Cloud Storage and Azure Blob Storage
#: accept.
OBJECT_KEY_BYTES = 1024


def max_path_bytes(storage: Storage) -> int:
    """The longest path (UTF-8 bytes) an object under ``storage``'s root may have, when a
    caller wants to put information in a name (0: not declared; use short names only).

    A backend declares it with a ``max_path_bytes`` attribute: object stores, whose keys
    may be 1,024 bytes long, declare what is left of that after the dataset's own prefix;
    local and memory stores, and anything that does not say, get 0."""
    value = getattr(storage, "max_path_bytes", 0)
    if isinstance(value, bool) or not isinstance(value, int):
        return 0
    return max(0, min(value, OBJECT_KEY_BYTES))


class ForwardingStorage:
    """A Storage that passes every call to ``inner``: subclass it to change a few calls of a
    wrapped storage (stamp writes, refuse some paths) and inherit the rest unchanged,
    ``read_concurrency`` included."""

    def __init__(self, inner: Storage) -> None:
        self.inner = inner

    @property
    def uri(self) -> str:
        """The wrapped storage's URI."""
        return self.inner.uri

    @property
    def read_concurrency(self) -> int:
        """The wrapped storage's (see :func:`read_concurrency`)."""
        return read_concurrency(self.inner)

    @property
    def max_path_bytes(self) -> int:
        """The wrapped storage's (see :func:`max_path_bytes`)."""
        return max_path_bytes(self.inner)

    def put_if_absent(self, path: str, data: bytes) -> None:
        """Pass-through."""
        self.inner.put_if_absent(path, data)

    def put(self, path: str, data: bytes) -> None:
        """Pass-through."""
        self.inner.put(path, data)

    def get(self, path: str) -> bytes:
        """Pass-through."""
        return self.inner.get(path)

    def get_range(self, path: str, start: int, end: int) -> bytes:
        """Pass-through."""
        return self.inner.get_range(path, start, end)

    def size(self, path: str) -> int:
        """Pass-through."""
        return self.inner.size(path)

    def list(self, prefix: str) -> Sequence[str]:
        """Pass-through."""
        return self.inner.list(prefix)

    def exists(self, path: str) -> bool:
        """Pass-through."""
        return self.inner.exists(path)

    def delete(self, path: str) -> None:
        """Pass-through."""
        self.inner.delete(path)
