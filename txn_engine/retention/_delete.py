"""Deleting the planned objects: in concurrent batches, through the store's bulk delete
(S3 ``DeleteObjects``, 1,000 keys a request) or, on local disk, as unlinks relative to one
open descriptor per directory (a symlinked parent directory is never followed)."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import IO

from txn_engine.errors import StorageError, TxnEngineError
from txn_engine.storage.base import Storage
from txn_engine.storage.fsspec_store import FsspecStorage
from txn_engine.storage.listing import obstore_call
from txn_engine.storage.local import LocalStorage
from txn_engine.storage.obstore_store import ObstoreStorage

__all__ = ["ProgressCallback", "delete_concurrently", "delete_many", "progress_for"]

_BATCH = 1000

ProgressCallback = Callable[[int, int], None]


def delete_many(storage: Storage, paths: Sequence[str]) -> list[tuple[str, str]]:
    """Delete ``paths`` (relative to the root) in one batch; return ``(path, error)`` for
    each failure. Uses ``storage.delete_many`` when the storage has it (an optional
    extension of the Storage protocol), the store's bulk delete for fsspec filesystems
    (S3 ``DeleteObjects``, 1000 keys per request), and one ``delete`` per path otherwise.
    """
    custom = getattr(storage, "delete_many", None)
    if callable(custom):
        result = custom(paths)
        return list(result) if result is not None else []
    if isinstance(storage, ObstoreStorage) and len(paths) > 1:
        import obstore

        try:
            obstore_call(storage, "delete", lambda: obstore.delete(storage.store, list(paths)))
        except (StorageError, FileNotFoundError):
            pass  # fall back to single deletes, which report each failure
        else:
            return []
    if isinstance(storage, FsspecStorage) and len(paths) > 1:
        root = storage.root
        fulls = [f"{root}/{p}" if root else p for p in paths]
        try:
            storage.fs.rm(fulls)
        except FileNotFoundError:
            pass  # some were gone already: check one by one below
        except Exception:  # fall back to single deletes, which map errors
            pass
        else:
            return []
    if isinstance(storage, LocalStorage):
        return _delete_local(storage, paths)
    failures: list[tuple[str, str]] = []
    for path in paths:
        try:
            storage.delete(path)
        except TxnEngineError as exc:
            failures.append((path, str(exc)))
    return failures


_O_DIRECTORY: int = getattr(os, "O_DIRECTORY", 0)
_O_NOFOLLOW: int = getattr(os, "O_NOFOLLOW", 0)
#: Whether this platform unlinks relative to an open directory (POSIX; not Windows).
_UNLINK_AT = os.unlink in os.supports_dir_fd and bool(_O_DIRECTORY and _O_NOFOLLOW)


def _delete_local(storage: LocalStorage, paths: Sequence[str]) -> list[tuple[str, str]]:
    """Unlink each path (validated like every storage path); missing is fine.

    The paths of one directory are unlinked relative to one open descriptor of it (the
    kernel resolves only the file name, not the whole path, once per file). A parent
    directory that is a symlink is not followed (a failure for each of its paths): the
    listing never enters one, so it was swapped in after the plan was made."""
    failures: list[tuple[str, str]] = []
    by_dir: dict[str, list[tuple[str, str]]] = {}
    for path in paths:
        try:
            full = storage.full_path(path)
        except TxnEngineError as exc:
            failures.append((path, str(exc)))
            continue
        directory, _, name = full.rpartition(os.sep)
        by_dir.setdefault(directory, []).append((path, name))
    if not _UNLINK_AT:  # no unlink relative to a directory here: whole paths
        for items in by_dir.values():
            for path, _ in items:
                try:
                    os.unlink(storage.full_path(path))
                except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                    continue
                except OSError as exc:
                    failures.append((path, str(exc)))
        return failures
    for directory, items in by_dir.items():
        try:
            fd = os.open(directory, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW)
        except FileNotFoundError:
            continue  # the directory is gone: so are its files
        except NotADirectoryError:
            if os.path.islink(directory):
                reason = f"{directory} is a symbolic link: not followed"
                failures.extend((path, reason) for path, _ in items)
            continue  # a file there now: none of the paths exists
        except OSError as exc:
            failures.extend((path, str(exc)) for path, _ in items)
            continue
        try:
            for path, name in items:
                try:
                    os.unlink(name, dir_fd=fd)
                except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                    continue
                except OSError as exc:
                    failures.append((path, str(exc)))
        finally:
            os.close(fd)
    return failures


class _Progress:
    """A plain-text progress line on a terminal's stderr (``\\r``-rewritten)."""

    def __init__(self, total: int, stream: IO[str], label: str) -> None:
        self.total = total
        self.stream = stream
        self.label = label
        self.last = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self.last < 0.1:
            return
        self.last = now
        width = 30
        filled = width * done // total if total else width
        pct = 100.0 * done / total if total else 100.0
        bar = "#" * filled + "." * (width - filled)
        end = "\n" if done >= total else ""
        self.stream.write(f"\r{self.label} [{bar}] {done}/{total} ({pct:5.1f}%){end}")
        self.stream.flush()


def progress_for(progress: bool | ProgressCallback | None, total: int) -> ProgressCallback | None:
    if callable(progress):
        return progress
    if progress is None:
        progress = sys.stderr.isatty()
    if not progress or total == 0:
        return None
    return _Progress(total, sys.stderr, "cleanup: deleting")


def delete_concurrently(
    storage: Storage,
    paths: Sequence[str],
    *,
    workers: int,
    progress: ProgressCallback | None,
    done_before: int,
    total: int,
) -> list[tuple[str, str]]:
    failures: list[tuple[str, str]] = []
    lock = threading.Lock()
    done = [done_before]

    def run(batch: Sequence[str]) -> None:
        failed = delete_many(storage, batch)
        with lock:
            failures.extend(failed)
            done[0] += len(batch)
            if progress is not None:
                progress(done[0], total)

    batches = [paths[i : i + _BATCH] for i in range(0, len(paths), _BATCH)]
    # spread small jobs over the workers too
    if len(batches) < workers and len(paths) > workers:
        size = max(1, -(-len(paths) // workers))
        batches = [paths[i : i + size] for i in range(0, len(paths), size)]
    if len(batches) <= 1 or workers == 1:
        for batch in batches:
            run(batch)
        return failures
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="txn_engine-cleanup") as ex:
        for future in [ex.submit(run, b) for b in batches]:
            future.result()
    return failures
