"""A pass-through :class:`~txn_engine.storage.Storage` that counts what it is asked to do.

Benchmarks and commit-loop tests wrap a backend in :class:`RecordingStorage` to assert how
many storage operations (and bytes) one commit costs, without patching anything.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence

from txn_engine.storage.base import Storage, max_path_bytes, read_concurrency

__all__ = ["RecordingStorage"]


class RecordingStorage:
    """Wrap ``inner`` and record every call (thread-safe).

    * ``counts[method]``: number of calls per method name, failed calls included;
    * ``calls``: ``(method, path)`` in call order (``list`` records its prefix);
    * ``bytes_written``: bytes passed to ``put``/``put_if_absent`` calls that returned
      normally (a lost create-if-absent race adds nothing);
    * ``bytes_read``: bytes returned by ``get``/``get_range``.

    :meth:`reset` zeroes everything (e.g. after setting up a dataset, before the commit
    being measured). :meth:`snapshot` returns the counts as a plain dict.
    """

    def __init__(self, inner: Storage) -> None:
        self.inner = inner
        self.counts: Counter[str] = Counter()
        self.calls: list[tuple[str, str]] = []
        self.bytes_read = 0
        self.bytes_written = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RecordingStorage({self.inner!r})"

    def reset(self) -> None:
        """Forget everything recorded so far."""
        with self._lock:
            self.counts = Counter()
            self.calls = []
            self.bytes_read = 0
            self.bytes_written = 0

    def snapshot(self) -> dict[str, int]:
        """Return ``counts`` plus ``bytes_read``/``bytes_written`` as one plain dict."""
        with self._lock:
            out = dict(self.counts)
            out["bytes_read"] = self.bytes_read
            out["bytes_written"] = self.bytes_written
            return out

    def _record(self, method: str, path: str) -> None:
        with self._lock:
            self.counts[method] += 1
            self.calls.append((method, path))

    def _read(self, n: int) -> None:
        with self._lock:
            self.bytes_read += n

    def _wrote(self, n: int) -> None:
        with self._lock:
            self.bytes_written += n

    @property
    def uri(self) -> str:
        """The wrapped storage's URI."""
        return self.inner.uri

    @property
    def read_concurrency(self) -> int:
        """The wrapped storage's (see :func:`~txn_engine.storage.base.read_concurrency`)."""
        return read_concurrency(self.inner)

    @property
    def max_path_bytes(self) -> int:
        """The wrapped storage's (see :func:`~txn_engine.storage.base.max_path_bytes`)."""
        return max_path_bytes(self.inner)

    def put_if_absent(self, path: str, data: bytes) -> None:
        """Delegate and record."""
        self._record("put_if_absent", path)
        self.inner.put_if_absent(path, data)
        self._wrote(len(data))

    def put(self, path: str, data: bytes) -> None:
        """Delegate and record."""
        self._record("put", path)
        self.inner.put(path, data)
        self._wrote(len(data))

    def get(self, path: str) -> bytes:
        """Delegate and record."""
        self._record("get", path)
        data = self.inner.get(path)
        self._read(len(data))
        return data

    def get_range(self, path: str, start: int, end: int) -> bytes:
        """Delegate and record."""
        self._record("get_range", path)
        data = self.inner.get_range(path, start, end)
        self._read(len(data))
        return data

    def size(self, path: str) -> int:
        """Delegate and record."""
        self._record("size", path)
        return self.inner.size(path)

    def list(self, prefix: str) -> Sequence[str]:
        """Delegate and record."""
        self._record("list", prefix)
        return self.inner.list(prefix)

    def exists(self, path: str) -> bool:
        """Delegate and record."""
        self._record("exists", path)
        return self.inner.exists(path)

    def delete(self, path: str) -> None:
        """Delegate and record."""
        self._record("delete", path)
        self.inner.delete(path)
