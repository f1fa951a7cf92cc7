"""Staging records of in-flight Spark writes: how a write finds every file it produced.

pylance picks data file names itself (random, under ``data/``), so a write cannot put its
files under a prefix of its own. Instead every planned write leaves a trail in one flat
directory of the dataset, ``_txn_engine/spark/``:

* ``{write_key}.write``: the write record, JSON, written on the driver when the write is
  planned (before any task runs): write id, transaction uuid, pinned read version, mode.
* ``{write_key}~{data file name}``: one empty marker per data file, written on the executor
  as soon as pylance reports the file complete and before the task returns.

``write_key`` is ``{milliseconds since the epoch, 13 digits}-{16 hex digits}``: unique per
planned write and sortable by age without reading anything.

Finalising a write (after the commit, or in abort) deletes the data files that have a marker
but are not referenced by the committed transaction, then the markers, then the record, in
that order. So a marker whose record is gone was written after finalisation (a straggling
task attempt) and its file is unreferenced by construction; :func:`sweep` removes those and
the leftovers of writes whose driver died, once they are older than a retention period.

Markers are claims, not proof: anyone who can write to the table can write one. Before a
data file is deleted, :class:`DeleteGuard` checks that

* its name is a plain Lance data file name (one path segment, ``[A-Za-z0-9._-]``, ending in
  ``.lance``): no ``..``, absolute paths, URLs or empty names;
* no other write key claims it;
* no kept version references it: every manifest in ``_versions/`` (main line, detached,
  staged), the versions tags name (``_refs/tags/*.json``) and every manifest of every branch
  (``_refs/branches/*.json``, datasets under ``tree/``). If any of those cannot be read, no
  file is deleted;
* on local disk, it is a regular file (not a symlink) in a directory whose real path is
  inside the table root's real path;
* for a sweep, where the store reports modification times: the file was modified after
  its write was planned (less a clock-skew allowance) and before the retention cut-off.

And a write with a record counts as "never landed" only when every version from its read
version to the latest is listed and its transaction read: a gap (versions removed by
``cleanup_old_versions``) or an unreadable transaction makes the outcome unknown, and then
none of its files are deleted.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import re
import stat
import time
import urllib.parse
import uuid as uuid_mod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import attrs

from txn_engine import jsontext
from txn_engine._proto import transaction_pb2
from txn_engine.contention.offers import carried_uuids
from txn_engine.errors import (
    DatasetNotFoundError,
    FormatError,
    ObjectNotFoundError,
    StorageError,
    TransactionNotFoundError,
    VersionNotFoundError,
)
from txn_engine.format.io import read_transaction
from txn_engine.format.manifest_file import decode_manifest_file
from txn_engine.format.naming import (
    VersionEntry,
    list_versions,
    list_versions_after,
    parse_manifest_name,
    scan_versions,
)
from txn_engine.format.refs import branch_name_from_file
from txn_engine.storage.base import Storage
from txn_engine.storage.obstore_store import is_backend_failure

__all__ = [
    "CLOCK_SKEW_SECONDS",
    "RECORD_SUFFIX",
    "STAGING_DIR",
    "DeleteGuard",
    "FinalizeStats",
    "Landed",
    "Outcome",
    "StagedWrite",
    "SweepResult",
    "finalize",
    "find_landed",
    "is_data_file_name",
    "list_staging",
    "marker_path",
    "new_write_key",
    "put_markers",
    "read_record",
    "record_path",
    "referenced_among",
    "settle",
    "sweep",
    "task_finished",
    "transaction_data_files",
    "write_record",
]

_log = logging.getLogger("txn_engine.spark")

STAGING_DIR = "_txn_engine/spark"
RECORD_SUFFIX = ".write"
_SEP = "~"
#: How much earlier than its write's plan time a file may look (storage vs driver clock)
#: and still be counted as that write's.
CLOCK_SKEW_SECONDS = 15 * 60.0
_KEY = re.compile(r"[0-9]{13}-[0-9a-f]{16}", re.ASCII)
_DATA_FILE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,248}\.lance", re.ASCII)


def new_write_key(now: float | None = None) -> str:
    """A fresh write key ``{ms:013d}-{16 hex}``."""
    ms = int((time.time() if now is None else now) * 1000)
    return f"{ms:013d}-{uuid_mod.uuid4().hex[:16]}"


def key_time(key: str) -> float | None:
    """Seconds since the epoch at which the write ``key`` was planned (None if ``key`` is
    not a write key)."""
    if not _KEY.fullmatch(key):
        return None
    return int(key[:13]) / 1000.0


def is_data_file_name(name: str) -> bool:
    """Whether ``name`` can be the name of a data file a Spark write produced: one path
    segment of ``[A-Za-z0-9._-]`` ending in ``.lance``, not starting with a dot (so no
    ``..``, no absolute path, no URL, no empty name)."""
    return _DATA_FILE_NAME.fullmatch(name) is not None


def record_path(key: str) -> str:
    return f"{STAGING_DIR}/{key}{RECORD_SUFFIX}"


def marker_path(key: str, data_file: str) -> str:
    return f"{STAGING_DIR}/{key}{_SEP}{urllib.parse.quote(data_file, safe='')}"


def write_record(storage: Storage, key: str, record: dict[str, Any]) -> None:
    storage.put(record_path(key), json.dumps(record, sort_keys=True).encode())


def read_record(storage: Storage, key: str) -> dict[str, Any] | None:
    """The record of write ``key``, or None if it is gone or unreadable."""
    try:
        data = storage.get(record_path(key))
    except ObjectNotFoundError:
        return None
    try:
        value = jsontext.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def put_markers(storage: Storage, key: str, data_files: Iterable[str]) -> None:
    """Record data files (paths relative to ``data/``) as produced by write ``key``."""
    for name in data_files:
        storage.put(marker_path(key, name), b"")


@attrs.frozen
class StagedWrite:
    """What ``_txn_engine/spark/`` holds for one write key.

    ``data_files`` are the valid data file names its markers claim; ``junk`` the object
    names (under ``_txn_engine/spark/``) of markers that claim nothing deletable (an
    invalid or non-canonically quoted name): they are removed with the write's trail.
    """

    key: str
    has_record: bool
    data_files: frozenset[str]
    junk: frozenset[str] = frozenset()


def list_staging(storage: Storage) -> dict[str, StagedWrite]:
    """Every write key with a record or markers under ``_txn_engine/spark/``."""
    records: set[str] = set()
    files: dict[str, set[str]] = {}
    junk: dict[str, set[str]] = {}
    for name in storage.list(STAGING_DIR):
        if _SEP in name:
            key, _, quoted = name.partition(_SEP)
            data_file = urllib.parse.unquote(quoted)
            if is_data_file_name(data_file) and marker_path(key, data_file) == (
                f"{STAGING_DIR}/{name}"
            ):
                files.setdefault(key, set()).add(data_file)
            else:
                junk.setdefault(key, set()).add(name)
        elif name.endswith(RECORD_SUFFIX):
            records.add(name[: -len(RECORD_SUFFIX)])
    return {
        key: StagedWrite(
            key, key in records, frozenset(files.get(key, ())), frozenset(junk.get(key, ()))
        )
        for key in records | set(files) | set(junk)
    }


# --------------------------------------------------------------------------- what is kept


class _Prefixed:
    """Read-only view of ``storage`` under ``prefix`` (a branch's dataset at ``tree/...``)."""

    def __init__(self, storage: Storage, prefix: str) -> None:
        self._storage = storage
        self._prefix = prefix

    @property
    def uri(self) -> str:
        return f"{self._storage.uri.rstrip('/')}/{self._prefix}"

    def put_if_absent(self, path: str, data: bytes) -> None:
        raise StorageError("read-only view")

    def put(self, path: str, data: bytes) -> None:
        raise StorageError("read-only view")

    def get(self, path: str) -> bytes:
        return self._storage.get(f"{self._prefix}/{path}")

    def get_range(self, path: str, start: int, end: int) -> bytes:
        return self._storage.get_range(f"{self._prefix}/{path}", start, end)

    def size(self, path: str) -> int:
        return self._storage.size(f"{self._prefix}/{path}")

    def list(self, prefix: str) -> Sequence[str]:
        return self._storage.list(f"{self._prefix}/{prefix}")

    def exists(self, path: str) -> bool:
        return self._storage.exists(f"{self._prefix}/{path}")

    def delete(self, path: str) -> None:
        raise StorageError("read-only view")


def _kept_manifests(storage: Storage, versions: set[int]) -> Iterator[bytes]:
    """The bytes of every manifest under ``_versions/`` (main line, detached, staged),
    each checked to decode; the version numbers of the main-line and detached ones are
    added to ``versions``. A staged manifest that does not decode is skipped; any other
    that does not raises."""
    for name in storage.list("_versions"):
        parsed = parse_manifest_name(name)
        detached = re.fullmatch(r"d([0-9]{1,20})\.manifest", name)
        path = f"_versions/{name}"
        if parsed is not None:
            version: int | None = parsed[0]
        else:
            version = int(detached.group(1)) if detached is not None else None
        if version is None:
            if ".manifest" not in name:
                continue  # latest_version_hint.json and the like
            # a staged manifest (``N.manifest-{uuid}``, ``N.manifest#k``) may be about to
            # become a version: protect what it references if it can be read at all
            try:
                data = storage.get(path)
                decode_manifest_file(data, what=path)
            except (FormatError, StorageError):
                continue
            yield data
            continue
        try:
            data = storage.get(path)
        except ObjectNotFoundError:
            continue  # removed since the listing: no longer a kept version
        decode_manifest_file(data, what=path)  # a manifest this library understands
        versions.add(version)
        yield data


def _json_objects(storage: Storage, directory: str) -> Iterator[tuple[str, dict[str, Any]]]:
    for name in storage.list(directory):
        if not name.endswith(".json"):
            continue
        try:
            value = jsontext.loads(storage.get(f"{directory}/{name}"))
        except ObjectNotFoundError:
            continue
        except ValueError as exc:
            raise FormatError(f"{directory}/{name} is not JSON: {exc}") from exc
        if not isinstance(value, dict):
            raise FormatError(f"{directory}/{name} is not a JSON object")
        yield name[: -len(".json")], value


def _branch_name(escaped: str) -> str:
    """The branch of ``_refs/branches/{escaped}.json``, decoded as pylance encodes it
    (CorruptRefError, a FormatError, for a name pylance could not have written)."""
    return branch_name_from_file(f"{escaped}.json")


def _all_kept_manifests(storage: Storage) -> Iterator[bytes]:
    """Every manifest of every kept version of the table: ``_versions/``, every branch's
    (``_refs/branches/*.json`` → ``tree/{branch}/_versions/``, and on local disk every
    dataset under ``tree/``); then checks that each tag (``_refs/tags/*.json``) names a
    version that was read (raises FormatError otherwise)."""
    main: set[int] = set()
    yield from _kept_manifests(storage, main)
    branches: dict[str, set[int]] = {}
    for escaped, _ in _json_objects(storage, "_refs/branches"):
        name = _branch_name(escaped)
        branches[name] = set()
        yield from _kept_manifests(_Prefixed(storage, f"tree/{name}"), branches[name])
    # on local disk, also branch datasets whose reference is not (yet) written
    known = {f"tree/{name}" for name in branches}
    for tree in _local_branch_dirs(storage):
        if tree not in known:
            yield from _kept_manifests(_Prefixed(storage, tree), set())
    for tag, value in _json_objects(storage, "_refs/tags"):
        branch, version = value.get("branch"), value.get("version")
        kept = main if branch is None else branches.get(str(branch))
        if not isinstance(version, int) or kept is None or version not in kept:
            raise FormatError(
                f"tag {tag!r} names version {version!r} of branch {branch!r}, which is not "
                "there: the files it needs cannot be told"
            )


def referenced_among(storage: Storage, names: Iterable[str]) -> frozenset[str]:
    """Which of the data file ``names`` (relative to ``data/``) a kept version of the table
    references: any manifest in ``_versions/`` (main line, detached, staged), any manifest
    of any branch, with every tag naming a version that is there.

    Each manifest is read once and must decode (so it is one this library understands);
    a name counts as referenced when its bytes occur in the manifest (a data file path is
    stored verbatim; a false match can only keep a file). Memory: one manifest at a time.

    Raises a TxnEngineError (FormatError, StorageError, ...) when any of it cannot be read
    or a tag names a version that is not there: then no file can be proven unreferenced.
    """
    needles = {name: name.encode() for name in names}
    found: set[str] = set()
    if not needles:
        return frozenset()
    for data in _all_kept_manifests(storage):
        for name, needle in needles.items():
            if name not in found and needle in data:
                found.add(name)
    return frozenset(found)


# --------------------------------------------------------------------------- local disk


def _local_root(storage: Storage) -> str | None:
    """The table root's local directory, for local-disk storages (None otherwise)."""
    root = getattr(storage, "root", None)
    if isinstance(root, Path) and callable(getattr(storage, "full_path", None)):
        return str(root)
    fs = getattr(storage, "fs", None)
    if fs is not None and isinstance(root, str):
        protocol = getattr(fs, "protocol", ())
        protocols = (protocol,) if isinstance(protocol, str) else tuple(protocol)
        if {"file", "local"} & set(protocols):
            return os.path.abspath(str(fs._strip_protocol(root)))
    return None


def _local_branch_dirs(storage: Storage) -> list[str]:
    """On local disk: every ``tree/...`` directory holding a ``_versions`` directory (a
    branch whose reference is not written yet is found too)."""
    root = _local_root(storage)
    if root is None:
        return []
    base = os.path.join(root, "tree")
    found: list[str] = []
    for current, dirs, _ in os.walk(base):
        is_dataset = "_versions" in dirs
        if is_dataset:
            found.append("tree/" + os.path.relpath(current, base).replace(os.sep, "/"))
        # do not descend into a dataset's own directories (data/ may hold many files)
        dirs[:] = [d for d in dirs if not d.startswith("_") and not (is_dataset and d == "data")]
    return [t for t in found if t != "tree/."]


def _inside(root: str, directory: str) -> bool:
    real_root = os.path.realpath(root)
    real = os.path.realpath(directory)
    return os.path.commonpath([real_root, real]) == real_root


def _staging_dir_is_safe(storage: Storage) -> bool:
    root = _local_root(storage)
    return root is None or _inside(root, os.path.join(root, *STAGING_DIR.split("/")))


def _mtime_from_info(info: Mapping[str, Any]) -> float | None:
    for key in ("mtime", "LastModified", "last_modified", "updated", "created"):
        value = info.get(key)
        if isinstance(value, datetime.datetime):
            if value.tzinfo is None:
                value = value.replace(tzinfo=datetime.UTC)
            return value.timestamp()
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=datetime.UTC)
            return parsed.timestamp()
    return None


@attrs.frozen
class _FileFacts:
    exists: bool
    safe: bool  # a regular file reachable without leaving the table root
    mtime: float | None


def _file_facts(storage: Storage, path: str) -> _FileFacts:
    """Whether ``path`` exists, may be deleted without following a symlink out of the
    table root, and when it was last modified (None when the store does not say)."""
    root = _local_root(storage)
    if root is not None:
        full = os.path.join(root, *path.split("/"))
        try:
            st = os.lstat(full)
        except (FileNotFoundError, NotADirectoryError):
            return _FileFacts(False, True, None)
        safe = stat.S_ISREG(st.st_mode) and _inside(root, os.path.dirname(full))
        return _FileFacts(True, safe, st.st_mtime)
    fs, base = getattr(storage, "fs", None), getattr(storage, "root", None)
    if fs is not None and isinstance(base, str):
        try:
            info = fs.info(f"{base.rstrip('/')}/{path}")
        except FileNotFoundError:
            return _FileFacts(False, True, None)
        except Exception:
            return _FileFacts(True, True, None)
        return _FileFacts(True, True, _mtime_from_info(info))
    store = getattr(storage, "store", None)
    if store is not None:  # obstore: head() gives the object's ``last_modified``
        try:
            import obstore

            meta = obstore.head(store, path)
        except FileNotFoundError:
            return _FileFacts(False, True, None)
        except BaseException as exc:
            if not is_backend_failure(exc):
                raise
            return _FileFacts(True, True, None)
        return _FileFacts(True, True, _mtime_from_info(meta))
    return _FileFacts(True, True, None)


# --------------------------------------------------------------------------- finalising


@attrs.define
class DeleteGuard:
    """Decides, file by file, whether a write's data file may be deleted (see the module
    docstring for the rules). One guard reads the kept versions at most once.

    ``listing`` is the whole of ``_txn_engine/spark/`` (to see other writes' claims);
    ``cutoff`` (seconds since the epoch: a sweep's retention cut-off) enables the age rules.
    """

    storage: Storage
    listing: Mapping[str, StagedWrite]
    cutoff: float | None = None
    _known: dict[str, bool] = attrs.field(factory=dict)
    _referenced_error: BaseException | None = None
    _claims: dict[str, set[str]] | None = None

    def _claimed_elsewhere(self, key: str, name: str) -> bool:
        if self._claims is None:
            self._claims = {}
            for k, staged in self.listing.items():
                for data_file in staged.data_files:
                    self._claims.setdefault(data_file, set()).add(k)
        return bool(self._claims.get(name, set()) - {key})

    def prefetch(self, names: Iterable[str]) -> None:
        """Learn in one pass over the kept versions which of ``names`` they reference
        (a sweep asks for every candidate at once; later questions about other names cost
        another pass)."""
        if self._referenced_error is not None:
            return
        pending = {n for n in names if is_data_file_name(n)} - set(self._known)
        if not pending:
            return
        try:
            found = referenced_among(self.storage, pending)
        except Exception as exc:
            self._referenced_error = exc
            _log.warning(
                "cannot read every kept version of %s (%r): no data file is deleted",
                self.storage.uri,
                exc,
            )
            return
        self._known.update({name: name in found for name in pending})

    def is_referenced(self, name: str) -> bool | None:
        """Whether a kept version references ``data/{name}`` (None: cannot be told)."""
        self.prefetch([name])
        if self._referenced_error is not None:
            return None
        return self._known[name]

    def verdict(self, key: str, name: str) -> Literal["delete", "keep", "retry"]:
        """``"delete"``, ``"keep"`` (never this write's to delete: release the marker) or
        ``"retry"`` (cannot be decided now: keep the marker and the record)."""
        if not is_data_file_name(name) or self._claimed_elsewhere(key, name):
            return "keep"
        facts = _file_facts(self.storage, f"data/{name}")
        if not facts.exists:
            return "keep"
        if not facts.safe:
            _log.warning(
                "data/%s of write %s is not a regular file inside the table "
                "root (a symlink?): not deleted",
                name,
                key,
            )
            return "keep"
        if self.cutoff is not None and facts.mtime is not None:
            if facts.mtime > self.cutoff:
                return "retry"  # younger than the retention: a write may still need it
            planned = key_time(key)
            if planned is not None and facts.mtime < planned - CLOCK_SKEW_SECONDS:
                return "keep"  # older than the write that claims it: not its file
        referenced = self.is_referenced(name)
        if referenced is None:
            return "retry"
        return "keep" if referenced else "delete"


@attrs.frozen
class FinalizeStats:
    """What :func:`finalize` did: data files removed, markers removed, data files kept
    (claimed by the write but kept: referenced, not provably its own, or gone), and
    ``failures``: deletes that raised or files that could not be decided now (logged); the
    record then stays for a later sweep."""

    files_removed: int = 0
    markers_removed: int = 0
    failures: int = 0
    files_kept: int = 0


def _delete_marker(storage: Storage, key: str, obj: str) -> bool:
    try:
        storage.delete(obj)
    except Exception as exc:
        _log.warning("could not delete marker %s of write %s: %r", obj, key, exc)
        return False
    return True


def _remove(
    guard: DeleteGuard, key: str, names: Iterable[str], marked: set[str], *, data: bool
) -> FinalizeStats:
    """For each name: delete ``data/{name}`` if ``data`` and the guard allows, then its
    marker (if marked) unless the file could not be deleted or decided."""
    storage = guard.storage
    files = markers = failures = kept = 0
    names = sorted(names)
    if data:  # one pass over the kept versions for all of them
        guard.prefetch(n for n in names if not guard._claimed_elsewhere(key, n))
    for name in names:
        if data:
            verdict = guard.verdict(key, name)
            if verdict == "retry":
                failures += 1
                continue
            if verdict == "delete":
                try:
                    storage.delete(f"data/{name}")
                    files += 1
                except Exception as exc:
                    failures += 1
                    _log.warning("could not delete data/%s of write %s: %r", name, key, exc)
                    continue
            else:
                kept += 1
        if name in marked:
            if _delete_marker(storage, key, marker_path(key, name)):
                markers += 1
            else:
                failures += 1
    return FinalizeStats(files, markers, failures, kept)


def _plus(a: FinalizeStats, b: FinalizeStats) -> FinalizeStats:
    return FinalizeStats(
        a.files_removed + b.files_removed,
        a.markers_removed + b.markers_removed,
        a.failures + b.failures,
        a.files_kept + b.files_kept,
    )


def finalize(
    storage: Storage,
    key: str,
    keep: Iterable[str],
    *,
    extra_files: Iterable[str] = (),
    staged: StagedWrite | None = None,
    guard: DeleteGuard | None = None,
) -> FinalizeStats:
    """Delete the files of write ``key`` that are not in ``keep``, then its markers, then
    its record, then whatever a straggling task marked meanwhile (that order is what makes
    :func:`sweep` and the tasks' own check safe, see :func:`task_finished`).

    ``extra_files`` are data files known to belong to the write even without a marker (the
    fragments in Spark's commit messages). Every delete goes through a
    :class:`DeleteGuard` (``guard``, or one made here): a file another write claims, one
    a kept version references, an invalid name or a symlink is kept (and its marker
    released). A file that cannot be deleted or decided keeps its marker and the record,
    so a later :func:`sweep` retries; nothing here raises for a failed delete (the failure
    is logged and counted).
    """
    if not _staging_dir_is_safe(storage):
        _log.warning("%s/%s leaves the table root: nothing is deleted", storage.uri, STAGING_DIR)
        return FinalizeStats(failures=1)
    keep_set = set(keep)
    if guard is None:
        guard = DeleteGuard(storage, list_staging(storage))
    if staged is None:
        staged = guard.listing.get(key, StagedWrite(key, True, frozenset()))
    marked = set(staged.data_files)
    extra = set(extra_files)
    stats = _remove(guard, key, (marked | extra) - keep_set, marked, data=True)
    if stats.failures:
        return stats
    stats = _plus(stats, _remove(guard, key, marked & keep_set, marked, data=False))
    stats = attrs.evolve(stats, files_kept=stats.files_kept + len((marked | extra) & keep_set))
    for obj in sorted(staged.junk):
        if _delete_marker(storage, key, f"{STAGING_DIR}/{obj}"):
            stats = attrs.evolve(stats, markers_removed=stats.markers_removed + 1)
        else:
            stats = attrs.evolve(stats, failures=stats.failures + 1)
    if stats.failures:
        return stats
    try:
        storage.delete(record_path(key))
    except Exception as exc:
        _log.warning("could not delete the record of write %s: %r", key, exc)
        return attrs.evolve(stats, failures=1)
    # A task attempt that marked files before the record vanished but checked the record
    # before that, too, did not clean up after itself: its markers are visible now.
    listing = list_staging(storage)
    late = listing.get(key)
    if late is not None and late.data_files:
        late_marked = set(late.data_files)
        guard = attrs.evolve(guard, listing=listing, claims=None)
        stats = _plus(stats, _remove(guard, key, late_marked - keep_set, late_marked, data=True))
    return stats


def task_finished(storage: Storage, key: str, data_files: Iterable[str]) -> bool:
    """Called by a task attempt after it marked its files: if write ``key`` has already
    been committed or aborted (its record is gone), delete the attempt's files and markers
    and return True; otherwise return False.

    Together with :func:`finalize` (record deleted, then markers listed again) this leaves
    no file of a straggling attempt behind: either the attempt sees the record gone and
    cleans up, or its markers were written before the record was deleted and the second
    listing in :func:`finalize` finds them. The files are this attempt's own (named by
    pylance in this process), so only the name and local-disk checks apply.
    """
    if storage.exists(record_path(key)):
        return False
    for name in sorted(set(data_files)):
        if is_data_file_name(name) and _file_facts(storage, f"data/{name}").safe:
            try:
                storage.delete(f"data/{name}")
            except Exception as exc:
                _log.warning("could not delete data/%s of write %s: %r", name, key, exc)
                continue
        _delete_marker(storage, key, marker_path(key, name))
    return True


# --------------------------------------------------------------------------- history


@attrs.frozen
class Landed:
    """A transaction found in the dataset's history: the version it created and itself."""

    version: int
    transaction: transaction_pb2.Transaction


def _entries_after(storage: Storage, after_version: int) -> list[VersionEntry]:
    if after_version <= 0:
        return list_versions(storage)
    return list_versions_after(storage, after_version)


def _matches(
    txn: transaction_pb2.Transaction,
    uuid: str,
    write_id: str | None,
    write_id_property: str | None,
) -> bool:
    if uuid in carried_uuids(txn):  # its own version, or one that carried it (offers)
        return True
    return (
        write_id is not None
        and write_id_property is not None
        and txn.transaction_properties.get(write_id_property) == write_id
    )


def find_landed(storage: Storage, uuid: str, *, after_version: int) -> Landed | None:
    """The version created by the transaction ``uuid`` (or by a group commit that carried
    it), looking only at versions newer than ``after_version``, with that transaction.

    The search is :func:`txn_engine.commit.find_transaction`'s. A Spark write's uuid is
    derived from its write id, so a write is found by its uuid alone. Versions whose
    transaction cannot be read are skipped, so None means "not found", not "never landed":
    use :func:`settle` to tell those apart. Raises StorageError when the history cannot be
    listed or read.
    """
    from txn_engine.commit import find_transaction

    try:
        version = find_transaction(storage, uuid, since_version=after_version)
        return None if version is None else Landed(version, read_transaction(storage, version))
    except DatasetNotFoundError:
        return None


@attrs.frozen
class Outcome:
    """Whether a write's transaction landed: ``landed`` when it is in the history;
    ``known`` False when the history since its read version is incomplete (a version was
    cleaned up or cannot be read), so that "not found" does not mean "never landed"."""

    landed: Landed | None
    known: bool
    reason: str = ""


def settle(
    storage: Storage,
    uuid: str,
    *,
    read_version: int,
    write_id: str | None = None,
    write_id_property: str | None = None,
) -> Outcome:
    """Look for the transaction ``uuid`` (or ``write_id``) in every version after
    ``read_version``. The answer "never landed" (``landed`` None, ``known`` True) is given
    only when each of those versions is listed and its transaction read. Raises
    StorageError when the history cannot be listed or read (try again later).
    """
    try:
        listing = scan_versions(storage)
    except FormatError as exc:
        return Outcome(None, False, f"the versions cannot be listed: {exc}")
    latest = listing.latest
    if latest is None:
        return Outcome(None, True)  # no dataset: nothing ever landed
    entries = listing.after(read_version)
    if latest.version < read_version:
        return Outcome(None, False, f"latest version {latest.version} < read version")
    expected = read_version + 1
    for entry in entries:
        if entry.version != expected:
            return Outcome(None, False, f"version {expected} is missing (cleaned up?)")
        expected += 1
        try:
            txn = read_transaction(storage, entry)
        except (TransactionNotFoundError, VersionNotFoundError, FormatError) as exc:
            return Outcome(None, False, f"version {entry.version} cannot be read: {exc}")
        if _matches(txn, uuid, write_id, write_id_property):
            return Outcome(Landed(entry.version, txn), True)
    return Outcome(None, True)


def _fragments_of(txn: transaction_pb2.Transaction) -> Iterator[Any]:
    op = txn.WhichOneof("operation")
    if op == "append":
        yield from txn.append.fragments
    elif op == "overwrite":
        yield from txn.overwrite.fragments
    elif op == "merge":  # a mergeSchema append: every fragment, the new ones among them
        yield from txn.merge.fragments


def transaction_data_files(txn: transaction_pb2.Transaction) -> set[str]:
    """The data file paths (relative to ``data/``) an Append/Overwrite/Merge transaction
    references."""
    return {f.path for frag in _fragments_of(txn) for f in frag.files}


# --------------------------------------------------------------------------- sweep


@attrs.frozen
class SweepResult:
    """What :func:`sweep` did: write keys finalised, data files removed, keys skipped
    because their outcome or their files could not be decided now (retried by the next
    sweep), and data files kept (landed, referenced by a kept version, claimed by another
    write, not provably the write's own, or of a write whose outcome can never be known)."""

    writes_finalized: int = 0
    files_removed: int = 0
    skipped: int = 0
    files_kept: int = 0


def sweep(
    storage: Storage,
    *,
    older_than_seconds: float,
    write_id_property: str | None = None,
    now: float | None = None,
) -> SweepResult:
    """Clean up after writes planned more than ``older_than_seconds`` ago.

    * markers without a record (task attempts that finished after their write was
      finalised): their data files are unreferenced; delete them;
    * writes with a record (their driver died before commit or abort finished): if their
      transaction landed, keep the files it references and delete the rest; if every
      version since their read version was read and none is theirs, delete their files;
      if that history is incomplete (versions cleaned up, unreadable), keep every file
      and drop the trail (the outcome can never be learnt; unreferenced files are left to
      Lance's own orphan clean-up).

    Every delete is checked by a :class:`DeleteGuard` (kept versions, tags and branches
    read once per sweep, other writes' claims, names, symlinks, file ages).
    ``older_than_seconds`` must exceed the longest-running write.
    """
    current = time.time() if now is None else now
    finalized = removed = skipped = kept = 0
    if not _staging_dir_is_safe(storage):
        _log.warning("%s/%s leaves the table root: not swept", storage.uri, STAGING_DIR)
        return SweepResult(skipped=1)
    listing = list_staging(storage)
    guard = DeleteGuard(storage, listing, cutoff=current - older_than_seconds)
    due = {
        key: staged
        for key, staged in sorted(listing.items())
        if (planned := key_time(key)) is not None and current - planned >= older_than_seconds
    }
    if any(staged.data_files for staged in due.values()):
        # one pass over the kept versions for every file a due write claims
        guard.prefetch(name for staged in due.values() for name in staged.data_files)
    for key, staged in due.items():
        keep: set[str] = set()
        if staged.has_record:
            record = read_record(storage, key)
            if record is None:
                skipped += 1
                continue
            try:
                outcome = settle(
                    storage,
                    str(record["uuid"]),
                    read_version=int(record["read_version"]),
                    write_id=record.get("write_id"),
                    write_id_property=write_id_property,
                )
            except Exception as exc:
                _log.warning("sweep: cannot tell whether write %s landed: %r", key, exc)
                skipped += 1
                continue
            if not outcome.known:
                _log.warning(
                    "sweep: whether write %s landed cannot be told (%s); its %d data "
                    "file(s) are kept",
                    key,
                    outcome.reason,
                    len(staged.data_files),
                )
                keep = set(staged.data_files)
            elif outcome.landed is not None:
                keep = transaction_data_files(outcome.landed.transaction)
        stats = finalize(storage, key, keep, staged=staged, guard=guard)
        removed += stats.files_removed
        kept += stats.files_kept
        if stats.failures:
            skipped += 1
        else:
            finalized += 1
    return SweepResult(finalized, removed, skipped, kept)
