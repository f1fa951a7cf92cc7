"""One manifest create and what runs beside it: settling an ambiguous outcome exactly once,
the guard listing, the read-back peek, the ``_transactions/`` copy."""

from __future__ import annotations

import contextlib
import threading
import time

from txn_engine._proto import transaction_pb2
from txn_engine.builder import ManifestState
from txn_engine.codec import transaction_to_proto
from txn_engine.errors import (
    AtomicityUnsupportedError,
    CommitStateUnknownError,
    FormatError,
    InvalidStorageArgumentError,
    ObjectExistsError,
    ObjectNotFoundError,
    StorageError,
)
from txn_engine.format.manifest_file import MAX_MANIFEST_BYTES, ManifestFile
from txn_engine.format.naming import (
    VersionListing,
    scan_versions,
    transaction_file_name,
    transaction_path,
)
from txn_engine.leases import Lease
from txn_engine.loop.core import SETTLE_ATTEMPTS, UNKNOWN_REMEDY, Core
from txn_engine.session import wrap
from txn_engine.storage.base import Storage, get_bounded, read_concurrency
from txn_engine.storage.handler import CommitHandler
from txn_engine.transaction import Transaction

__all__ = [
    "Guard",
    "Peek",
    "TransactionCopy",
    "create",
    "encode_transaction",
    "is_ours",
    "start_copy",
    "state_of",
    "write_transaction_file",
]

#: Seconds a guarded create waits for its guard listing to be sent first (see Guard.lead).
_GUARD_LEAD = 0.001


def _read_back(handler: CommitHandler, version: int, path: str) -> bytes | None:
    """The bytes of version ``version`` at ``path`` (None when it does not exist), a
    committed-but-unfinished version completed first (``handler.resolve``)."""
    # bounded: a hostile file at our version's name must not exhaust memory
    try:
        return get_bounded(handler.storage, path, MAX_MANIFEST_BYTES)
    except ObjectNotFoundError:
        if not handler.resolve(version, path):
            return None
    return get_bounded(handler.storage, path, MAX_MANIFEST_BYTES)


def _settle(
    handler: CommitHandler,
    path: str,
    data: bytes,
    cause: BaseException,
    txn: Transaction,
    version: int,
    guard: Lease | None = None,
) -> bytes:
    """Decide whether an ambiguous manifest create landed: return the bytes now at
    ``path`` (``data`` itself when ours is there, else the winner's manifest, which the
    next attempt reuses). Raises CommitStateUnknownError when it cannot be decided."""
    last: BaseException = cause
    for _ in range(SETTLE_ATTEMPTS):
        try:
            found = _read_back(handler, version, path)
        except ObjectNotFoundError:
            found = None
        except FormatError:
            return b""  # not a manifest we could have written: another writer's, or junk
        except StorageError as exc:
            last = exc
            continue
        if found is not None:
            return found
        if guard is not None:
            guard.check()  # the same bytes created again: still under the lease
        try:  # nothing there: offer the very same bytes again at the same name
            handler.commit(version, path, data)
        except ObjectExistsError:
            continue
        except (AtomicityUnsupportedError, InvalidStorageArgumentError):
            raise
        except StorageError as exc:
            last = exc
            continue
        return data
    raise CommitStateUnknownError(
        f"the outcome of creating {path} for transaction {txn.uuid} is unknown "
        f"({type(last).__name__}: {last})",
        read_version=txn.read_version,
        operation=txn.kind,
        remedy=UNKNOWN_REMEDY,
    ) from last


def create(
    handler: CommitHandler,
    version: int,
    path: str,
    data: bytes,
    txn: Transaction,
    peek: Peek | None = None,
    guard: Lease | None = None,
) -> bytes:
    """``handler.commit`` with settlement: the bytes now at ``path`` (``data`` if ours).
    ``peek``: a read of ``path`` sent beside the create; when the create finds the name
    taken and the peek found a manifest there, those bytes settle it (a version's manifest
    is never replaced), so the read-back is not one more round trip. ``guard``: the lease
    that protects what the transaction read and wrote, checked right before the create
    (:meth:`~txn_engine.leases.Lease.check`: LeaseExpiredError, nothing created)."""
    if guard is not None:
        guard.check()
    try:
        handler.commit(version, path, data)
    except ObjectExistsError as exc:
        found = peek.result() if peek is not None else None
        if found is not None:
            return found
        return _settle(handler, path, data, exc, txn, version, guard)
    except (AtomicityUnsupportedError, InvalidStorageArgumentError):
        raise
    except StorageError as exc:
        return _settle(handler, path, data, exc, txn, version, guard)
    return data


def is_ours(found: bytes, data: bytes) -> bool:
    """Whether the bytes found at the target are the ones this create sent."""
    return found is data or found == data


def encode_transaction(state: Core, txn: Transaction) -> tuple[str, transaction_pb2.Transaction]:
    """The transaction's protobuf and ``_transactions/`` file name (cached per transaction;
    the name is empty when the transaction is stored inline only)."""
    if state.encoded is None or state.encoded[0] is not txn:
        name = transaction_file_name(txn.read_version, txn.uuid) if state.transaction_file else ""
        state.encoded = (txn, name, transaction_to_proto(txn))
    return state.encoded[1], state.encoded[2]


def write_transaction_file(
    storage: Storage, txn: Transaction, write: bool
) -> tuple[str, transaction_pb2.Transaction]:
    """The transaction's protobuf, and the name of its ``_transactions/`` copy once written
    (empty, and nothing written, unless ``write``)."""
    pb = transaction_to_proto(txn)
    if not write:
        return "", pb
    name = transaction_file_name(txn.read_version, txn.uuid)
    storage.put(transaction_path(name), pb.SerializeToString(deterministic=True))
    return name, pb


def state_of(mf: ManifestFile) -> ManifestState:
    """The builder's view of a manifest file."""
    return ManifestState(manifest=mf.manifest, indices=tuple(mf.indices))


def start_copy(state: Core, path: str, data: bytes) -> TransactionCopy:
    """The ``.txn`` copy for a guarded create: started now (beside the create), or the one
    an earlier attempt started when it is the same file."""
    earlier: TransactionCopy | None = state.copies.get(path)
    if earlier is not None:
        if earlier.data == data:
            return earlier
        earlier.join()  # the same name with other bytes (a rebase): this write goes last
    copy = TransactionCopy(state.storage, path, data)
    state.copies[path] = copy
    return copy


class Guard:
    """A listing of ``_versions/`` started in a thread before a guarded create."""

    def __init__(self, storage: Storage, since: int) -> None:
        self._storage = storage
        self._since = since
        self._listing: VersionListing | None = None
        self._sent = threading.Event()
        self._thread = threading.Thread(
            target=wrap(self._run), name="txn-engine-guard", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        self._sent.set()
        with contextlib.suppress(Exception):  # no listing: the existence check decides
            self._listing = scan_versions(self._storage, since=self._since)

    def lead(self) -> None:
        """Wait until the listing is on its way (at most a moment), so that the create
        sent next usually reaches the store after it: a listing answered before our
        create decides the lineage alone; one answered after it shows our version and
        costs an existence check (case c of :func:`_check_guarded`)."""
        self._sent.wait(_GUARD_LEAD)
        time.sleep(_GUARD_LEAD)

    def result(self) -> VersionListing | None:
        """The listing (None if it failed), once it is done."""
        self._thread.join()
        return self._listing


class Peek:
    """A bounded read of a version's manifest, started in a thread beside its create (by a
    carrier, whose lost create every writer it carries waits for). Its result is the bytes
    found (None when there were none, or the read failed: the create's settlement then
    reads back as usual)."""

    def __init__(self, storage: Storage, path: str) -> None:
        self._storage, self._path = storage, path
        self._found: bytes | None = None
        self._thread = threading.Thread(target=wrap(self._run), name="txn-engine-peek", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with contextlib.suppress(Exception):  # not found, too large, unreachable: no peek
            self._found = get_bounded(self._storage, self._path, MAX_MANIFEST_BYTES)

    def result(self) -> bytes | None:
        """The bytes the read found, once it is done."""
        self._thread.join()
        return self._found


class TransactionCopy:
    """Writes the ``_transactions/`` copy of a transaction. On a store that serves requests
    concurrently (``read_concurrency`` > 1: object stores) it starts at once, in a thread
    (beside the create, or beside the lineage check), so it is not one more sequential
    round trip; elsewhere (local disk) it is written by :meth:`join`, after the check. A
    failed copy is ignored (pylance 14 reads the inline transaction)."""

    def __init__(self, storage: Storage, path: str, data: bytes) -> None:
        self._storage, self._path, self.data = storage, path, data
        self._thread: threading.Thread | None = None
        self._done = False
        if read_concurrency(storage) > 1:
            self._thread = threading.Thread(
                target=wrap(self._write), name="txn-engine-txn-copy", daemon=True
            )
            self._thread.start()

    def _write(self) -> None:
        with contextlib.suppress(StorageError):
            self._storage.put(self._path, self.data)

    def join(self) -> None:
        """The copy is written (or failed) when this returns."""
        if self._thread is None:
            if not self._done:
                self._done = True
                self._write()
        else:
            self._thread.join()

    def withdraw(self) -> None:
        """The transaction did not land here: remove the copy if it was started (best
        effort; a leftover is an orphan that cleanup removes)."""
        if self._thread is None and not self._done:
            return
        if self._thread is not None:
            self._thread.join()
        with contextlib.suppress(Exception):
            self._storage.delete(self._path)
