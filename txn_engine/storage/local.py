"""Local-disk storage: atomic create-if-absent by hard link, fsync of file and directory."""

from __future__ import annotations

import contextlib
import errno
import os
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

from txn_engine.errors import ObjectExistsError, ObjectNotFoundError, StorageError

__all__ = ["LocalStorage"]


@contextlib.contextmanager
def _mapped(path: str) -> Iterator[None]:
    try:
        yield
    except FileNotFoundError as exc:
        raise ObjectNotFoundError(f"{path}: no such object") from exc
    except FileExistsError as exc:
        raise ObjectExistsError(f"{path}: already exists") from exc
    except OSError as exc:
        raise StorageError(f"{path}: {exc}") from exc


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:  # some filesystems refuse fsync on directories
        if exc.errno not in (errno.EINVAL, errno.EBADF):
            raise
    finally:
        os.close(fd)


class LocalStorage:
    """A dataset rooted at a local directory.

    ``put_if_absent`` writes a staging file next to the target (its name never ends in
    ``manifest``), fsyncs it, hard-links it to the final name (``link`` fails if the name
    exists, atomically, on every POSIX filesystem), removes the staging name and fsyncs the
    directory. ``rename`` is never used for it: it silently replaces.
    """

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        text = os.fspath(root)
        if text.startswith("file://"):
            text = text[len("file://") :]
        self._uri = os.fspath(root)
        self._root = Path(text).absolute()
        self._fsync = fsync

    @property
    def uri(self) -> str:
        """The dataset root as given."""
        return self._uri

    @property
    def root(self) -> Path:
        """The absolute local path of the dataset root."""
        return self._root

    def _path(self, path: str) -> Path:
        return self._root / path

    def _write_staging(self, target: Path, data: bytes) -> Path:
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = target.with_name(f".{target.name}.{uuid.uuid4().hex}.staging")
        with open(staging, "wb") as fh:
            fh.write(data)
            if self._fsync:
                fh.flush()
                os.fsync(fh.fileno())
        return staging

    def put_if_absent(self, path: str, data: bytes) -> None:
        """Create ``path`` only if absent (atomic). Raises ObjectExistsError if present."""
        target = self._path(path)
        with _mapped(path):
            staging = self._write_staging(target, data)
            try:
                os.link(staging, target)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(staging)
            if self._fsync:
                _fsync_dir(target.parent)

    def put(self, path: str, data: bytes) -> None:
        """Write ``path`` (replacing any existing object atomically)."""
        target = self._path(path)
        with _mapped(path):
            staging = self._write_staging(target, data)
            try:
                os.replace(staging, target)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(staging)
                raise
            if self._fsync:
                _fsync_dir(target.parent)

    def get(self, path: str) -> bytes:
        """Read the whole object."""
        with _mapped(path), open(self._path(path), "rb") as fh:
            return fh.read()

    def get_range(self, path: str, start: int, end: int) -> bytes:
        """Read bytes ``[start, end)`` (clamped to the object's size)."""
        with _mapped(path), open(self._path(path), "rb") as fh:
            fh.seek(start)
            return fh.read(max(0, end - start))

    def size(self, path: str) -> int:
        """Size of the object in bytes."""
        with _mapped(path):
            return self._path(path).stat().st_size

    def list(self, prefix: str) -> Sequence[str]:
        """Names of the objects in directory ``prefix`` (staging files excluded)."""
        try:
            with os.scandir(self._path(prefix)) as it:
                return [e.name for e in it if not e.name.startswith(".") and e.is_file()]
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StorageError(f"{prefix}: {exc}") from exc

    def exists(self, path: str) -> bool:
        """Whether an object exists at ``path``."""
        return self._path(path).is_file()

    def delete(self, path: str) -> None:
        """Delete ``path`` if present."""
        with _mapped(path), contextlib.suppress(FileNotFoundError):
            os.unlink(self._path(path))

    def __repr__(self) -> str:
        return f"LocalStorage({self._uri!r})"
