"""Cleanup: remove old versions and unreferenced files, never what a writer or reader needs.

:func:`cleanup` decides which main-line versions to keep, then deletes the manifests of the
others and every file under ``data/``, ``_deletions/``, ``_indices/`` and
``_transactions/`` that no kept version references:

* **kept versions**: the latest; the newest ``keep_versions``; every version whose manifest
  timestamp is newer than ``older_than`` ago; every version at or after the oldest live
  lease (:mod:`txn_engine.lease`); every main-line version a tag (``_refs/tags/*.json``)
  names and every main-line version a branch (``_refs/branches/*.json``) was created from;
* **kept files**: every file a kept version references (data files, deletion files, index
  directories, the transaction file, external row-id files), every file of this table that
  a branch's manifests (``tree/<branch>/_versions``) reference through a base path, and every
  file younger than the orphan retention that no manifest references (it may belong to a
  writer that has not committed yet);
* **deleted**: manifests of the other versions; files only those versions referenced
  (whatever their age, like Lance); files no manifest references at all ("orphans") once
  they are older than ``retention_orphans`` (by the listing's modification time; a file
  whose age the storage cannot tell is only deleted when the retention is zero) and were
  written before the oldest live lease was taken (a lease holder's uncommitted files are
  kept whatever the retention); lease objects that expired longer than
  ``retention_orphans`` ago; offers (``_txn_engine_offers/``, :mod:`txn_engine.offers`)
  whose window has passed (the latest version is at or above the last version they may
  land in: no version can carry them any more).

A file is deleted only when it is proved unreferenced: if a manifest (of any version that
is listed), a tag, a branch or a lease cannot be read, :class:`~txn_engine.errors.
CleanupAbortedError` is raised before anything is deleted. Files under other base paths
are never deleted (they belong to other tables), and neither is anything outside the four
directories above and the offers directory.

Order of work (what makes it safe beside running writers and readers, see
``docs/cleanup.md`` and the model in ``models/commit_protocol.pml``): put up a marker
``_txn_engine/cleaning/<uuid>.json`` (lease takers wait while it is there) → read leases →
list → read manifests → plan → read leases again (recompute if a new lease pins more) →
delete manifests, oldest first (a partial run leaves a contiguous prefix gap; stopped
before the marker expires) → remove the marker → read leases once more and keep the files
of every version a lease now pins → list the versions again and keep the files of every
version that landed meanwhile → delete the files in concurrent batches.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import threading
import time
import uuid as uuid_module
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import IO, Any

import attrs

from txn_engine import jsontext
from txn_engine._proto import table_pb2
from txn_engine.errors import (
    CleanupAbortedError,
    DatasetNotFoundError,
    InvalidStorageArgumentError,
    StorageError,
    TxnEngineError,
)
from txn_engine.format.deletion import DELETIONS_DIR
from txn_engine.format.io import read_manifest_entry
from txn_engine.format.naming import (
    TRANSACTIONS_DIR,
    VERSIONS_DIR,
    VersionEntry,
    beacon_expiry,
    scan_versions,
)
from txn_engine.lease import CLEANING_DIR, LeaseInfo, read_leases
from txn_engine.offers import HOSTS_DIR, OFFERS_DIR, parse_claim_name, parse_offer_name
from txn_engine.storage import open_storage
from txn_engine.storage._files import is_staging_name
from txn_engine.storage.base import Storage
from txn_engine.storage.fsspec_store import FsspecStorage
from txn_engine.storage.local import LocalStorage
from txn_engine.storage.obstore_store import ObstoreStorage, is_backend_failure

__all__ = [
    "FILE_DIRS",
    "CleanupPlan",
    "CleanupReport",
    "ObjectInfo",
    "PlannedDelete",
    "cleanup",
    "delete_many",
    "list_objects",
    "plan_cleanup",
    "referenced_files",
]

DATA_DIR = "data"
INDICES_DIR = "_indices"
#: The directories whose files cleanup may delete (besides manifests and expired leases).
FILE_DIRS = (DATA_DIR, DELETIONS_DIR, INDICES_DIR, TRANSACTIONS_DIR)
_INDEX_PREFIX = INDICES_DIR + "/"
TAGS_DIR = "_refs/tags"
BRANCHES_DIR = "_refs/branches"
_NS = 1_000_000_000
_BATCH = 1000
_LEASE_ROUNDS = 5
#: How long a cleanup marker lives, and how long before its expiry manifest deletes stop.
_MARKER_TTL_NS = 600 * _NS
_MARKER_MARGIN_NS = 60 * _NS

ProgressCallback = Callable[[int, int], None]


# --------------------------------------------------------------------------- listing


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


def _obstore_call(storage: ObstoreStorage, op: str, fn: Callable[[], Any]) -> Any:
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

    result: list[ObjectInfo] = _obstore_call(storage, "list", run)
    return result


# --------------------------------------------------------------------------- deleting


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
            _obstore_call(storage, "delete", lambda: obstore.delete(storage.store, list(paths)))
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


def _progress_for(progress: bool | ProgressCallback | None, total: int) -> ProgressCallback | None:
    if callable(progress):
        return progress
    if progress is None:
        progress = sys.stderr.isatty()
    if not progress or total == 0:
        return None
    return _Progress(total, sys.stderr, "cleanup: deleting")


def _delete_concurrently(
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
    if len(batches) <= 1:
        for batch in batches:
            run(batch)
        return failures
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="txn_engine-cleanup") as ex:
        for future in [ex.submit(run, b) for b in batches]:
            future.result()
    return failures


# --------------------------------------------------------------------------- references


def _norm_root(text: str) -> str:
    for scheme in ("file://",):
        if text.startswith(scheme):
            text = text[len(scheme) :]
    return text.rstrip("/")


def _root_aliases(storage: Storage) -> set[str]:
    """Spellings of this table's root that a base path may use."""
    aliases = {_norm_root(storage.uri)}
    if isinstance(storage, LocalStorage):
        root = str(storage.root)
        aliases |= {root.rstrip("/"), os.path.realpath(root).rstrip("/")}
    elif isinstance(storage, FsspecStorage):
        aliases.add(storage.root.rstrip("/"))
    elif isinstance(storage, ObstoreStorage):
        aliases.add(storage.uri.split("://", 1)[-1].rstrip("/"))
    return {a for a in aliases if a}


def _relative_to_root(full: str, aliases: set[str]) -> str | None:
    candidate = _norm_root(full)
    variants = {candidate}
    if candidate.startswith("/"):
        variants.add(os.path.realpath(candidate))
    if "://" in candidate:
        variants.add(candidate.split("://", 1)[1])
    for v in variants:
        for a in aliases:
            if v.startswith(a + "/"):
                return v[len(a) + 1 :]
    return None


@attrs.frozen
class _Refs:
    """What one manifest references: exact paths and index directories (relative)."""

    files: frozenset[str]
    index_dirs: frozenset[str]


def _uuid_text(pb: table_pb2.UUID) -> str | None:
    try:
        return str(uuid_module.UUID(bytes=bytes(pb.uuid)))
    except ValueError:
        return None


def _resolve(
    name: str,
    sub: str,
    base_id: int | None,
    bases: Mapping[int, table_pb2.BasePath],
    aliases: set[str],
    what: str,
) -> str | None:
    """Path relative to this root of a file named ``name`` (relative to ``sub``) with an
    optional base; None when it lives outside this table. Raises for an unknown base."""
    if base_id is None:
        return f"{sub}/{name}"
    base = bases.get(base_id)
    if base is None:
        raise CleanupAbortedError(f"{what}: references unknown base path id {base_id}")
    full = (
        f"{base.path.rstrip('/')}/{sub}/{name}"
        if base.is_dataset_root
        else (f"{base.path.rstrip('/')}/{name}")
    )
    return _relative_to_root(full, aliases)


def referenced_files(
    manifest: table_pb2.Manifest,
    indices: Iterable[table_pb2.IndexMetadata],
    *,
    aliases: set[str] | None = None,
    what: str = "manifest",
) -> tuple[frozenset[str], frozenset[str]]:
    """The files of this table one manifest references: ``(paths, index directories)``,
    relative to the root. Files under base paths outside this table are not included.

    Raises :class:`~txn_engine.errors.CleanupAbortedError` for a reference cleanup cannot
    resolve (an unknown base path id, an unknown deletion file type).
    """
    aliases = aliases or set()
    bases = {b.id: b for b in manifest.base_paths}
    files: set[str] = set()
    dirs: set[str] = set()

    def base_of(msg: Any) -> int | None:
        return int(msg.base_id) if msg.HasField("base_id") else None

    for frag in manifest.fragments:
        for df in frag.files:
            p = _resolve(df.path, DATA_DIR, base_of(df), bases, aliases, what)
            if p is not None:
                files.add(p)
        if frag.HasField("deletion_file"):
            dfile = frag.deletion_file
            ext = {0: "arrow", 1: "bin"}.get(dfile.file_type)
            if ext is None:
                raise CleanupAbortedError(
                    f"{what}: fragment {frag.id} has a deletion file of unknown type "
                    f"{dfile.file_type}"
                )
            name = f"{frag.id}-{dfile.read_version}-{dfile.id}.{ext}"
            p = _resolve(name, DELETIONS_DIR, base_of(dfile), bases, aliases, what)
            if p is not None:
                files.add(p)
        for field in (
            "external_row_ids",
            "external_last_updated_at_versions",
            "external_created_at_versions",
        ):
            if frag.HasField(field):
                ext_path = getattr(frag, field).path
                rel = (
                    _relative_to_root(ext_path, aliases)
                    if "://" in ext_path or (ext_path.startswith("/"))
                    else ext_path
                )
                if rel:
                    files.add(rel)
    for index in indices:
        text = _uuid_text(index.uuid)
        if text is None:
            raise CleanupAbortedError(f"{what}: index {index.name!r} has a malformed uuid")
        p = _resolve(text, INDICES_DIR, base_of(index), bases, aliases, what)
        if p is not None:
            dirs.add(p)
    if manifest.transaction_file:
        files.add(f"{TRANSACTIONS_DIR}/{manifest.transaction_file}")
    return frozenset(files), frozenset(dirs)


# --------------------------------------------------------------------------- the plan


@attrs.frozen
class PlannedDelete:
    """One object cleanup deletes, and why: ``"manifest"`` (a removed version),
    ``"old-version"`` (referenced only by removed versions), ``"orphan"`` (referenced by no
    manifest, older than the retention), ``"lease"`` (an expired lease object),
    ``"offer"`` (an offer whose window has passed), ``"beacon"`` (an expired carrier's
    beacon in ``_versions/``, :func:`txn_engine.format.naming.beacon_name`) or ``"claim"``
    (a claim to host a carrier for a version older than the latest,
    :func:`txn_engine.offers.claim_name`)."""

    path: str
    reason: str
    size: int | None = None
    mtime_ns: int | None = None


@attrs.frozen
class CleanupPlan:
    """What :func:`cleanup` deletes (``dry_run=True`` returns this without deleting)."""

    uri: str
    latest_version: int
    kept_versions: tuple[int, ...]
    removed_versions: tuple[int, ...]
    deletes: tuple[PlannedDelete, ...]
    oldest_lease_version: int | None
    tagged_versions: tuple[int, ...]
    kept_files: int

    @property
    def counts(self) -> dict[str, int]:
        """Number of objects to delete per reason."""
        out = {
            "manifest": 0,
            "old-version": 0,
            "orphan": 0,
            "lease": 0,
            "offer": 0,
            "beacon": 0,
            "claim": 0,
        }
        for d in self.deletes:
            out[d.reason] = out.get(d.reason, 0) + 1
        return out

    @property
    def bytes(self) -> int:
        """Total size of the objects to delete (sizes the listing did not give count 0)."""
        return sum(d.size or 0 for d in self.deletes)

    @property
    def oldest_removed(self) -> int | None:
        """The oldest version whose manifest is removed (None when none is)."""
        return self.removed_versions[0] if self.removed_versions else None

    @property
    def newest_removed(self) -> int | None:
        """The newest version whose manifest is removed (None when none is)."""
        return self.removed_versions[-1] if self.removed_versions else None

    def summary(self) -> str:
        """A few human-readable lines: counts, bytes, oldest/newest removed version."""
        c = self.counts
        removed = (
            f"versions {self.oldest_removed}..{self.newest_removed}"
            if self.removed_versions
            else "no versions"
        )
        kept = self.kept_versions
        lines = [
            f"{self.uri}: latest version {self.latest_version}; removing {removed} "
            f"({len(self.removed_versions)}), keeping {len(kept)}"
            + (f" ({kept[0]}..{kept[-1]})" if kept else ""),
            f"files to delete: {c['old-version']} of removed versions, {c['orphan']} orphans, "
            f"{c['lease']} expired leases, {c['offer']} expired offers, "
            + (f"{c['beacon']} expired carrier beacons, " if c["beacon"] else "")
            + (f"{c['claim']} old carrier claims, " if c["claim"] else "")
            + f"{c['manifest']} manifests; {self.bytes} bytes",
        ]
        if self.oldest_lease_version is not None:
            lines.append(f"oldest live lease pins version {self.oldest_lease_version}")
        if self.tagged_versions:
            lines.append(f"tagged/branch-base versions kept: {list(self.tagged_versions)}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """The full plan as JSON-ready data (every path)."""
        return {
            "uri": self.uri,
            "latest_version": self.latest_version,
            "kept_versions": list(self.kept_versions),
            "removed_versions": list(self.removed_versions),
            "oldest_removed": self.oldest_removed,
            "newest_removed": self.newest_removed,
            "oldest_lease_version": self.oldest_lease_version,
            "tagged_versions": list(self.tagged_versions),
            "counts": self.counts,
            "bytes": self.bytes,
            "kept_files": self.kept_files,
            "deletes": [attrs.asdict(d) for d in self.deletes],
        }


@attrs.frozen
class CleanupReport:
    """What :func:`cleanup` did: the plan it executed, what was deleted and what failed."""

    plan: CleanupPlan
    deleted: int
    failed: tuple[tuple[str, str], ...]
    kept_for_new_leases: int
    seconds: float

    @property
    def ok(self) -> bool:
        """True when every planned delete succeeded."""
        return not self.failed

    def summary(self) -> str:
        """The plan's summary plus the outcome."""
        tail = f"deleted {self.deleted} objects in {self.seconds:.2f}s"
        if self.kept_for_new_leases:
            tail += f"; kept {self.kept_for_new_leases} files a new lease pinned"
        if self.failed:
            tail += f"; {len(self.failed)} deletes failed"
        return self.plan.summary() + "\n" + tail

    def to_json(self) -> dict[str, Any]:
        """The plan plus the outcome as JSON-ready data."""
        out = self.plan.to_json()
        out.update(
            deleted=self.deleted,
            failed=[{"path": p, "error": e} for p, e in self.failed],
            kept_for_new_leases=self.kept_for_new_leases,
            seconds=self.seconds,
        )
        return out


def _read_json_refs(storage: Storage, directory: str) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    for name in sorted(storage.list(directory)):
        if not name.endswith(".json"):
            continue
        path = f"{directory}/{name}"
        try:
            obj = jsontext.loads(storage.get(path))
        except FileNotFoundError:
            continue  # deleted meanwhile
        except ValueError as exc:  # jsontext: anything that is not strict JSON
            raise CleanupAbortedError(
                f"{path}: unreadable ({exc}); nothing deleted", path=path
            ) from exc
        if not isinstance(obj, dict):
            raise CleanupAbortedError(f"{path}: not a JSON object; nothing deleted", path=path)
        out.append((path, obj))
    return out


def _int_field(obj: Mapping[str, Any], key: str, path: str) -> int:
    value = obj.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise CleanupAbortedError(f"{path}: no valid {key!r}; nothing deleted", path=path)
    return value


def _branch_field(obj: Mapping[str, Any], key: str, path: str) -> None:
    """A ref's branch is null (the main line) or a name: anything else (``[]``, ``5``) is a
    damaged file whose pin cannot be placed, so cleanup stops rather than guess."""
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise CleanupAbortedError(
            f"{path}: {key!r} is not a branch name; nothing deleted", path=path
        )


def _pinned_by_refs(storage: Storage, aliases: set[str]) -> tuple[set[int], set[str], set[str]]:
    """Main-line versions pinned by tags and branch bases, plus the files of this table
    that branch manifests reference (through base paths)."""
    versions: set[int] = set()
    files: set[str] = set()
    dirs: set[str] = set()
    for path, obj in _read_json_refs(storage, TAGS_DIR):
        _branch_field(obj, "branch", path)
        if obj.get("branch") is None:
            versions.add(_int_field(obj, "version", path))
        # a tag on a branch version is protected through the branch's files below
    for path, obj in _read_json_refs(storage, BRANCHES_DIR):
        _branch_field(obj, "parentBranch", path)
        if obj.get("parentBranch") is None:
            versions.add(_int_field(obj, "parentVersion", path))
        name = path.rsplit("/", 1)[1][: -len(".json")].replace("%2F", "/")
        branch_root = f"tree/{name}"
        for entry in _branch_versions(storage, branch_root):
            mf = _read_or_abort(storage, entry, prefix=branch_root)
            f, d = referenced_files(mf.manifest, mf.indices, aliases=aliases, what=entry.path)
            files |= f
            dirs |= d
    return versions, files, dirs


class _Prefixed:
    """A read-only view of a sub-directory of a storage (for branch manifests)."""

    def __init__(self, storage: Storage, prefix: str) -> None:
        self._s = storage
        self._p = prefix

    @property
    def uri(self) -> str:
        return f"{self._s.uri.rstrip('/')}/{self._p}"

    def get(self, path: str) -> bytes:
        return self._s.get(f"{self._p}/{path}")

    def get_range(self, path: str, start: int, end: int) -> bytes:
        return self._s.get_range(f"{self._p}/{path}", start, end)

    def size(self, path: str) -> int:
        return self._s.size(f"{self._p}/{path}")

    def list(self, prefix: str) -> Sequence[str]:
        return self._s.list(f"{self._p}/{prefix}")

    def exists(self, path: str) -> bool:
        return self._s.exists(f"{self._p}/{path}")

    def put_if_absent(self, path: str, data: bytes) -> None:
        raise InvalidStorageArgumentError("read-only view")

    def put(self, path: str, data: bytes) -> None:
        raise InvalidStorageArgumentError("read-only view")

    def delete(self, path: str) -> None:
        raise InvalidStorageArgumentError("read-only view")


def _branch_versions(storage: Storage, branch_root: str) -> list[VersionEntry]:
    return list(scan_versions(_Prefixed(storage, branch_root)))


def _read_or_abort(storage: Storage, entry: VersionEntry, prefix: str | None = None) -> Any:
    source: Storage = storage if prefix is None else _Prefixed(storage, prefix)
    try:
        return read_manifest_entry(source, entry)
    except TxnEngineError as exc:
        where = entry.path if prefix is None else f"{prefix}/{entry.path}"
        raise CleanupAbortedError(
            f"{storage.uri}: cannot read {where} ({exc}); cleanup cannot prove which files "
            "are unreferenced, nothing was deleted",
            path=where,
        ) from exc


def _oldest_live(leases: Sequence[LeaseInfo], now_ns: int) -> int | None:
    for info in leases:
        if info.error is not None:
            raise CleanupAbortedError(
                f"lease object {info.path} is malformed ({info.error}); cleanup cannot tell "
                "what it protects, nothing was deleted. Delete it once its owner is gone.",
                path=info.path,
            )
    live = [i.version for i in leases if i.live(now_ns) and i.version is not None]
    return min(live) if live else None


def _lease_floor(leases: Sequence[LeaseInfo], now_ns: int) -> int | None:
    """When the oldest live lease was created: files written since may be a holder's."""
    created = [i.created_at_ns for i in leases if i.live(now_ns)]
    return min(created) if created else None


def _orphan_expired(
    mtime_ns: int | None, retention_ns: int, cutoff_ns: int, lease_floor: int | None
) -> bool:
    """Whether an unreferenced file may go: older than the retention, and written before
    the oldest live lease was taken (a file of unknown age only with a zero retention and
    no live lease)."""
    if mtime_ns is None:
        return retention_ns == 0 and lease_floor is None
    return mtime_ns <= cutoff_ns and (lease_floor is None or mtime_ns < lease_floor)


def _check_duration(name: str, value: timedelta) -> int:
    if not isinstance(value, timedelta):
        raise InvalidStorageArgumentError(f"{name} must be a timedelta, got {value!r}")
    if value < timedelta(0):
        raise InvalidStorageArgumentError(f"{name} must not be negative, got {value}")
    return int(value.total_seconds() * _NS)


@attrs.define
class _State:
    """Everything read for a plan (reused when only the leases changed)."""

    entries: list[VersionEntry]
    refs: dict[int, _Refs]
    timestamps: dict[int, int]
    sizes: dict[int, int]
    pinned: set[int]
    branch_files: set[str]
    branch_dirs: set[str]
    listing: list[ObjectInfo]
    offers: list[ObjectInfo] = attrs.field(factory=list)
    #: claims to host a carrier (:data:`txn_engine.offers.HOSTS_DIR`)
    claims: list[ObjectInfo] = attrs.field(factory=list)
    #: carrier beacons in ``_versions/`` (names; :func:`txn_engine.format.naming.beacon_name`)
    beacons: tuple[str, ...] = ()


def _read_state(storage: Storage, aliases: set[str]) -> _State:
    listing_versions = scan_versions(storage)
    entries = list(listing_versions)
    if not entries:
        raise DatasetNotFoundError(f"no Lance dataset at {storage.uri} (no manifests)")
    refs: dict[int, _Refs] = {}
    timestamps: dict[int, int] = {}
    sizes: dict[int, int] = {}
    for entry in entries:
        mf = _read_or_abort(storage, entry)
        f, d = referenced_files(mf.manifest, mf.indices, aliases=aliases, what=entry.path)
        refs[entry.version] = _Refs(f, d)
        ts = mf.manifest.timestamp
        timestamps[entry.version] = ts.seconds * _NS + ts.nanos
        sizes[entry.version] = mf.size
    pinned, branch_files, branch_dirs = _pinned_by_refs(storage, aliases)
    listing: list[ObjectInfo] = []
    for directory in FILE_DIRS:
        listing.extend(list_objects(storage, directory))
    if not _lists_recursively(storage):
        # a plain listing cannot see into sub-directories: list each known index directory
        known = {p for r in refs.values() for p in r.index_dirs} | branch_dirs
        seen = {o.path for o in listing}
        for index_dir in sorted(known):
            for obj in list_objects(storage, index_dir):
                if obj.path not in seen:
                    listing.append(obj)
    offers = list_objects(storage, OFFERS_DIR)
    claims = list_objects(storage, HOSTS_DIR)
    return _State(
        entries,
        refs,
        timestamps,
        sizes,
        pinned,
        branch_files,
        branch_dirs,
        listing,
        offers,
        claims,
        listing_versions.beacons,
    )


def _lists_recursively(storage: Storage) -> bool:
    return callable(getattr(storage, "list_objects", None)) or isinstance(
        storage, (LocalStorage, FsspecStorage, ObstoreStorage)
    )


def _in_dirs(path: str, dirs: Iterable[str]) -> bool:
    if not path.startswith(INDICES_DIR + "/"):
        return False  # index directories are the only directory references
    return any(path.startswith(d + "/") for d in dirs)


def _build_plan(
    storage: Storage,
    state: _State,
    *,
    now_ns: int,
    older_than_ns: int,
    keep_versions: int,
    retention_ns: int,
    oldest_lease: int | None,
    leases: Sequence[LeaseInfo],
) -> CleanupPlan:
    floor = _lease_floor(leases, now_ns)
    versions = [e.version for e in state.entries]
    latest = versions[-1]
    cutoff = now_ns - older_than_ns
    kept: set[int] = {latest}
    kept |= set(versions[-keep_versions:])
    kept |= {v for v in versions if state.timestamps[v] > cutoff}
    if oldest_lease is not None:
        kept |= {v for v in versions if v >= oldest_lease}
    kept |= state.pinned & set(versions)
    removed = [v for v in versions if v not in kept]
    kept_files: set[str] = set(state.branch_files)
    kept_dirs: set[str] = set(state.branch_dirs)
    for v in kept:
        kept_files |= state.refs[v].files
        kept_dirs |= state.refs[v].index_dirs
    removed_files: set[str] = set()
    removed_dirs: set[str] = set()
    for v in removed:
        removed_files |= state.refs[v].files
        removed_dirs |= state.refs[v].index_dirs
    orphan_cutoff = now_ns - retention_ns
    deletes: list[PlannedDelete] = []
    by_version = {e.version: e for e in state.entries}
    for v in removed:
        deletes.append(PlannedDelete(by_version[v].path, "manifest", state.sizes[v]))
    kept_count = 0
    add = deletes.append
    # one pass per listed file: index-directory checks only for paths under _indices/
    for obj in state.listing:
        p = obj.path
        in_index = p.startswith(_INDEX_PREFIX)
        if p in kept_files or (in_index and _in_dirs(p, kept_dirs)):
            kept_count += 1
            continue
        if p in removed_files or (in_index and _in_dirs(p, removed_dirs)):
            add(PlannedDelete(p, "old-version", obj.size, obj.mtime_ns))
        elif _orphan_expired(obj.mtime_ns, retention_ns, orphan_cutoff, floor):
            add(PlannedDelete(p, "orphan", obj.size, obj.mtime_ns))
    for info in leases:
        if info.error is None and info.expires_at_ns <= orphan_cutoff and not info.live(now_ns):
            deletes.append(PlannedDelete(info.path, "lease"))
    for obj in state.offers:  # an offer whose window has passed can never land
        parsed = parse_offer_name(obj.path.rsplit("/", 1)[-1])
        if parsed is not None and parsed[0] <= latest:
            add(PlannedDelete(obj.path, "offer", obj.size, obj.mtime_ns))
    for obj in state.claims:  # only the losers of a race to that version ever read it
        claimed = parse_claim_name(obj.path.rsplit("/", 1)[-1])
        if claimed is not None and claimed < latest:
            add(PlannedDelete(obj.path, "claim", obj.size, obj.mtime_ns))
    for name in state.beacons:  # a carrier's beacon is a hint to wait, and only while live
        expires_ms = beacon_expiry(name)
        if expires_ms is not None and expires_ms * 1_000_000 <= now_ns:
            add(PlannedDelete(f"{VERSIONS_DIR}/{name}", "beacon"))
    return CleanupPlan(
        uri=storage.uri,
        latest_version=latest,
        kept_versions=tuple(sorted(kept)),
        removed_versions=tuple(removed),
        deletes=tuple(deletes),
        oldest_lease_version=oldest_lease,
        tagged_versions=tuple(sorted(state.pinned)),
        kept_files=kept_count,
    )


def plan_cleanup(
    uri: str | os.PathLike[str] | Storage,
    *,
    older_than: timedelta,
    keep_versions: int = 1,
    retention_orphans: timedelta = timedelta(days=7),
    storage_options: Mapping[str, Any] | None = None,
    now_ns: int | None = None,
) -> CleanupPlan:
    """The plan :func:`cleanup` would execute now (nothing is deleted)."""
    result = cleanup(
        uri,
        older_than=older_than,
        keep_versions=keep_versions,
        retention_orphans=retention_orphans,
        dry_run=True,
        storage_options=storage_options,
        now_ns=now_ns,
    )
    if not isinstance(result, CleanupPlan):  # pragma: no cover - dry_run returns the plan
        raise TypeError("cleanup(dry_run=True) returned a report")
    return result


def cleanup(
    uri: str | os.PathLike[str] | Storage,
    *,
    older_than: timedelta,
    keep_versions: int = 1,
    retention_orphans: timedelta = timedelta(days=7),
    dry_run: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    progress: bool | ProgressCallback | None = None,
    workers: int = 16,
    now_ns: int | None = None,
) -> CleanupPlan | CleanupReport:
    """Remove old versions and unreferenced files (see the module docstring for the rules).

    ``older_than``: versions whose manifest timestamp is newer than this are kept.
    ``keep_versions`` (>= 1): the newest N versions are kept whatever their age.
    ``retention_orphans``: files no manifest references are deleted only once older than
    this (keep it longer than your slowest writer takes from writing data to committing).
    ``dry_run``: return the :class:`CleanupPlan` and delete nothing.
    ``progress``: ``None`` shows a progress line when stderr is a terminal; ``True``/``False``
    force it on/off; a callable gets ``(done, total)``. ``workers``: concurrent delete
    batches. ``now_ns``: the wall clock to judge ages and leases by (tests).

    Returns a :class:`CleanupReport` (or the plan when ``dry_run``). Raises
    :class:`~txn_engine.errors.CleanupAbortedError` (nothing deleted) when a manifest, tag,
    branch or lease cannot be read, :class:`~txn_engine.errors.DatasetNotFoundError` when
    there is no dataset, :class:`~txn_engine.errors.InvalidStorageArgumentError` for bad
    arguments.
    """
    if isinstance(keep_versions, bool) or not isinstance(keep_versions, int) or keep_versions < 1:
        raise InvalidStorageArgumentError(f"keep_versions must be >= 1, got {keep_versions!r}")
    if workers < 1:
        raise InvalidStorageArgumentError(f"workers must be >= 1, got {workers!r}")
    older_ns = _check_duration("older_than", older_than)
    retention_ns = _check_duration("retention_orphans", retention_orphans)
    storage = open_storage(uri, storage_options)
    started = time.monotonic()
    clock: Callable[[], int] = (lambda: now_ns) if now_ns is not None else time.time_ns
    aliases = _root_aliases(storage)

    if dry_run:
        leases = read_leases(storage)
        state = _read_state(storage, aliases)
        return _build_plan(
            storage,
            state,
            now_ns=clock(),
            older_than_ns=older_ns,
            keep_versions=keep_versions,
            retention_ns=retention_ns,
            oldest_lease=_oldest_live(leases, clock()),
            leases=leases,
        )
    marker = f"{CLEANING_DIR}/{uuid_module.uuid4()}.json"
    deadline = clock() + _MARKER_TTL_NS
    # the marker goes up before the first lease read: a lease written after that read waits
    # for the marker to go before checking its version (txn_engine.lease)
    storage.put(
        marker,
        json.dumps({"started_at_ns": clock(), "expires_at_ns": deadline}).encode(),
    )
    try:
        plan, state, oldest, removed_now = _plan_and_delete_manifests(
            storage,
            aliases,
            clock=clock,
            deadline=deadline - _MARKER_MARGIN_NS,
            older_ns=older_ns,
            keep_versions=keep_versions,
            retention_ns=retention_ns,
        )
    finally:
        storage.delete(marker)
    manifests = [d.path for d in plan.deletes if d.reason == "manifest"][: len(removed_now)]

    # a lease written between our last read and the manifest deletes pins a version whose
    # manifest may be gone; keep the files of that version and every later one (and of the
    # planned versions whose manifests the deadline left in place)
    leases = read_leases(storage)
    late = _oldest_live(leases, clock())
    floor = _lease_floor(leases, clock())
    protect_files: set[str] = set()
    protect_dirs: set[str] = set()
    for v in plan.removed_versions:
        if v not in removed_now or (
            late is not None and (oldest is None or late < oldest) and v >= late
        ):
            protect_files |= state.refs[v].files
            protect_dirs |= state.refs[v].index_dirs
    # ...and a version that landed since we listed references its files (a writer may have
    # committed an "orphan" and released its lease in the meantime)
    settled = _protect_new_versions(storage, state, aliases, protect_files, protect_dirs)
    files = (
        [
            d.path
            for d in plan.deletes
            if d.reason != "manifest"
            and d.path not in protect_files
            and not (d.path.startswith(_INDEX_PREFIX) and _in_dirs(d.path, protect_dirs))
            and not (
                d.reason == "orphan"
                and floor is not None
                and (d.mtime_ns is None or d.mtime_ns >= floor)
            )
        ]
        if settled
        else []
    )
    kept_late = len(plan.deletes) - len(plan.removed_versions) - len(files)
    total = len(manifests) + len(files)
    reporter = _progress_for(progress, total)
    if reporter is not None:
        reporter(len(manifests), total)
    failed = _delete_concurrently(
        storage,
        files,
        workers=workers,
        progress=reporter,
        done_before=len(manifests),
        total=total,
    )
    if reporter is not None and not files:
        reporter(total, total)
    return CleanupReport(
        plan=plan,
        deleted=total - len(failed),
        failed=tuple(failed),
        kept_for_new_leases=kept_late,
        seconds=time.monotonic() - started,
    )


def _plan_and_delete_manifests(
    storage: Storage,
    aliases: set[str],
    *,
    clock: Callable[[], int],
    deadline: int,
    older_ns: int,
    keep_versions: int,
    retention_ns: int,
) -> tuple[CleanupPlan, _State, int | None, list[int]]:
    """Steps 1-3 (under the marker): leases, state, plan, manifest deletes, oldest first
    and only before ``deadline``. Returns the plan, the state, the oldest lease and the
    versions whose manifests were deleted."""
    leases = read_leases(storage)
    oldest = _oldest_live(leases, clock())
    state = _read_state(storage, aliases)

    def make(oldest_lease: int | None, infos: Sequence[LeaseInfo]) -> CleanupPlan:
        return _build_plan(
            storage,
            state,
            now_ns=clock(),
            older_than_ns=older_ns,
            keep_versions=keep_versions,
            retention_ns=retention_ns,
            oldest_lease=oldest_lease,
            leases=infos,
        )

    plan = make(oldest, leases)
    # leases taken while we read: a lease pinning a version we plan to remove moves the
    # plan (bounded rounds; the last round's plan only ever keeps more)
    for _ in range(_LEASE_ROUNDS):
        leases = read_leases(storage)
        merged = _min_opt(oldest, _oldest_live(leases, clock()))
        if merged == oldest:
            break
        oldest = merged
        plan = make(oldest, leases)
    removed_now: list[int] = []
    paths = [d.path for d in plan.deletes if d.reason == "manifest"]
    for version, path in zip(plan.removed_versions, paths, strict=True):
        if clock() >= deadline:
            break  # the marker is about to expire: leave the rest for the next run
        storage.delete(path)  # oldest first: a partial run leaves a contiguous prefix gap
        removed_now.append(version)
    return plan, state, oldest, removed_now


def _protect_new_versions(
    storage: Storage,
    state: _State,
    aliases: set[str],
    files: set[str],
    dirs: set[str],
) -> bool:
    """Add the references of every version listed now but not when the plan was made;
    False when one cannot be read (then no file may be deleted this run)."""
    for entry in scan_versions(storage):
        if entry.version in state.refs:
            continue
        try:
            mf = read_manifest_entry(storage, entry)
            f, d = referenced_files(mf.manifest, mf.indices, aliases=aliases, what=entry.path)
        except TxnEngineError:
            return False
        files |= f
        dirs |= d
    return True


def _min_opt(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)
