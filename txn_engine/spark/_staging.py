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
"""

from __future__ import annotations

import json
import logging
import time
import urllib.parse
import uuid as uuid_mod
from collections.abc import Iterable, Iterator
from typing import Any

import attrs

from txn_engine._proto import transaction_pb2
from txn_engine.errors import (
    DatasetNotFoundError,
    FormatError,
    ObjectNotFoundError,
    TransactionNotFoundError,
    VersionNotFoundError,
)
from txn_engine.format.io import read_transaction
from txn_engine.format.naming import VersionEntry, list_versions, list_versions_after
from txn_engine.storage.base import Storage

__all__ = [
    "RECORD_SUFFIX",
    "STAGING_DIR",
    "FinalizeStats",
    "Landed",
    "StagedWrite",
    "SweepResult",
    "finalize",
    "find_landed",
    "list_staging",
    "marker_path",
    "new_write_key",
    "put_markers",
    "read_record",
    "record_path",
    "sweep",
    "task_finished",
    "transaction_data_files",
    "write_record",
]

_log = logging.getLogger("txn_engine.spark")

STAGING_DIR = "_txn_engine/spark"
RECORD_SUFFIX = ".write"
_SEP = "~"


def new_write_key(now: float | None = None) -> str:
    """A fresh write key ``{ms:013d}-{16 hex}``."""
    ms = int((time.time() if now is None else now) * 1000)
    return f"{ms:013d}-{uuid_mod.uuid4().hex[:16]}"


def key_time(key: str) -> float | None:
    """Seconds since the epoch at which the write ``key`` was planned (None if malformed)."""
    head = key.split("-", 1)[0]
    return int(head) / 1000.0 if head.isdigit() and len(head) == 13 else None


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
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def put_markers(storage: Storage, key: str, data_files: Iterable[str]) -> None:
    """Record data files (paths relative to ``data/``) as produced by write ``key``."""
    for name in data_files:
        storage.put(marker_path(key, name), b"")


@attrs.frozen
class StagedWrite:
    """What ``_txn_engine/spark/`` holds for one write key."""

    key: str
    has_record: bool
    data_files: frozenset[str]


def list_staging(storage: Storage) -> dict[str, StagedWrite]:
    """Every write key with a record or markers under ``_txn_engine/spark/``."""
    records: set[str] = set()
    files: dict[str, set[str]] = {}
    for name in storage.list(STAGING_DIR):
        if _SEP in name:
            key, _, quoted = name.partition(_SEP)
            files.setdefault(key, set()).add(urllib.parse.unquote(quoted))
        elif name.endswith(RECORD_SUFFIX):
            records.add(name[: -len(RECORD_SUFFIX)])
    return {
        key: StagedWrite(key, key in records, frozenset(files.get(key, ())))
        for key in records | set(files)
    }


@attrs.frozen
class FinalizeStats:
    """What :func:`finalize` removed; ``failures`` counts deletes that raised (logged)."""

    files_removed: int = 0
    markers_removed: int = 0
    failures: int = 0


def _remove(
    storage: Storage, key: str, names: Iterable[str], marked: set[str], *, data: bool
) -> tuple[int, int, int]:
    """Delete ``data/{name}`` (if ``data``) and then its marker (if marked), per name.
    A name whose data file cannot be deleted keeps its marker. Returns (files, markers,
    failures)."""
    files = markers = failures = 0
    for name in sorted(names):
        if data:
            try:
                storage.delete(f"data/{name}")
                files += 1
            except Exception as exc:
                failures += 1
                _log.warning("could not delete data/%s of write %s: %r", name, key, exc)
                continue
        if name in marked:
            try:
                storage.delete(marker_path(key, name))
                markers += 1
            except Exception as exc:
                failures += 1
                _log.warning("could not delete marker of %s (write %s): %r", name, key, exc)
    return files, markers, failures


def finalize(
    storage: Storage,
    key: str,
    keep: Iterable[str],
    *,
    extra_files: Iterable[str] = (),
    staged: StagedWrite | None = None,
) -> FinalizeStats:
    """Delete the files of write ``key`` that are not in ``keep``, then its markers, then
    its record, then whatever a straggling task marked meanwhile (that order is what makes
    :func:`sweep` and the tasks' own check safe, see :func:`task_finished`).

    ``extra_files`` are data files known to belong to the write even without a marker (the
    fragments in Spark's commit messages). A file that cannot be deleted keeps its marker
    and the record, so a later :func:`sweep` retries; nothing here raises for a failed
    delete (the failure is logged and counted).
    """
    keep_set = set(keep)
    if staged is None:
        staged = list_staging(storage).get(key, StagedWrite(key, True, frozenset()))
    marked = set(staged.data_files)
    removed, markers, failures = _remove(
        storage, key, (marked | set(extra_files)) - keep_set, marked, data=True
    )
    if failures:
        return FinalizeStats(removed, markers, failures)
    _, kept_markers, failures = _remove(storage, key, marked & keep_set, marked, data=False)
    markers += kept_markers
    if failures:
        return FinalizeStats(removed, markers, failures)
    try:
        storage.delete(record_path(key))
    except Exception as exc:
        _log.warning("could not delete the record of write %s: %r", key, exc)
        return FinalizeStats(removed, markers, 1)
    # A task attempt that marked files before the record vanished but checked the record
    # before that, too, did not clean up after itself: its markers are visible now.
    late = list_staging(storage).get(key)
    if late is not None and late.data_files:
        late_marked = set(late.data_files)
        files2, markers2, failures = _remove(
            storage, key, late_marked - keep_set, late_marked, data=True
        )
        removed, markers = removed + files2, markers + markers2
    return FinalizeStats(removed, markers, failures)


def task_finished(storage: Storage, key: str, data_files: Iterable[str]) -> bool:
    """Called by a task attempt after it marked its files: if write ``key`` has already
    been committed or aborted (its record is gone), delete the attempt's files and markers
    and return True; otherwise return False.

    Together with :func:`finalize` (record deleted, then markers listed again) this leaves
    no file of a straggling attempt behind: either the attempt sees the record gone and
    cleans up, or its markers were written before the record was deleted and the second
    listing in :func:`finalize` finds them.
    """
    if storage.exists(record_path(key)):
        return False
    names = set(data_files)
    _remove(storage, key, names, names, data=True)
    return True


@attrs.frozen
class Landed:
    """A transaction found in the dataset's history: the version it created and itself."""

    version: int
    transaction: transaction_pb2.Transaction


def _entries_after(storage: Storage, after_version: int) -> list[VersionEntry]:
    if after_version <= 0:
        return list_versions(storage)
    return list_versions_after(storage, after_version)


def find_landed(
    storage: Storage,
    uuid: str,
    *,
    after_version: int,
    write_id: str | None = None,
    write_id_property: str | None = None,
) -> Landed | None:
    """The version created by the transaction ``uuid`` (or carrying ``write_id`` in
    ``write_id_property``), looking only at versions newer than ``after_version``.

    Versions whose transaction cannot be read are skipped (ours always carry one). Raises
    StorageError when the history cannot be listed or read: the caller must then treat the
    outcome as unknown.
    """
    try:
        entries = _entries_after(storage, after_version)
    except DatasetNotFoundError:
        return None
    for entry in entries:
        try:
            txn = read_transaction(storage, entry)
        except (TransactionNotFoundError, VersionNotFoundError, FormatError):
            continue
        if txn.uuid == uuid:
            return Landed(entry.version, txn)
        if (
            write_id is not None
            and write_id_property is not None
            and txn.transaction_properties.get(write_id_property) == write_id
        ):
            return Landed(entry.version, txn)
    return None


def _fragments_of(txn: transaction_pb2.Transaction) -> Iterator[Any]:
    op = txn.WhichOneof("operation")
    if op == "append":
        yield from txn.append.fragments
    elif op == "overwrite":
        yield from txn.overwrite.fragments


def transaction_data_files(txn: transaction_pb2.Transaction) -> set[str]:
    """The data file paths (relative to ``data/``) an Append/Overwrite transaction added."""
    return {f.path for frag in _fragments_of(txn) for f in frag.files}


@attrs.frozen
class SweepResult:
    """What :func:`sweep` did: write keys finalised, data files removed, keys skipped
    because their outcome could not be established (retried by the next sweep)."""

    writes_finalized: int = 0
    files_removed: int = 0
    skipped: int = 0


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
      transaction landed, keep the files it references and delete the rest; otherwise
      delete all of them.

    ``older_than_seconds`` must exceed the longest-running write: a write still running
    when it is swept loses its files and its commit then fails.
    """
    current = time.time() if now is None else now
    finalized = removed = skipped = 0
    for key, staged in sorted(list_staging(storage).items()):
        planned = key_time(key)
        if planned is None or current - planned < older_than_seconds:
            continue
        keep: set[str] = set()
        if staged.has_record:
            record = read_record(storage, key)
            if record is None:
                skipped += 1
                continue
            try:
                landed = find_landed(
                    storage,
                    str(record["uuid"]),
                    after_version=int(record["read_version"]),
                    write_id=record.get("write_id"),
                    write_id_property=write_id_property,
                )
            except Exception as exc:
                _log.warning("sweep: cannot tell whether write %s landed: %r", key, exc)
                skipped += 1
                continue
            if landed is not None:
                keep = transaction_data_files(landed.transaction)
        stats = finalize(storage, key, keep, staged=staged)
        removed += stats.files_removed
        if stats.failures:
            skipped += 1
        else:
            finalized += 1
    return SweepResult(finalized, removed, skipped)
