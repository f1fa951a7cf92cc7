"""Every error txn_engine raises, in one tree.

Catch the narrowest class that tells you what to do next::

    TxnEngineError                      root of everything this library raises
    ├── InvalidOperationError (+ValueError)
    │   │                               the transaction is malformed or does not fit the
    │   │                               dataset (unknown fragment id, schema mismatch, ...);
    │   │                               nothing was written. Fix the transaction.
    │   └── SchemaMismatchError         appended data has a column whose type cannot be
    │                                   converted to the table's without loss (names the
    │                                   column and both types); cast it, or opt in
    ├── CommitError                     a commit did not (knowingly) land
    │   ├── CommitConflictError         a concurrent commit conflicts with this one
    │   │   ├── RetryableConflictError  re-read the dataset, re-plan the operation, commit again
    │   │   │   └── NamespaceTransactionAbortedError
    │   │   │                       a namespace transaction gave way or was aborted before
    │   │   │                       its commit point; nothing visible: run it again
    │   │   └── IncompatibleTransactionError
    │   │       │                       the operation can never land on top of what was
    │   │       │                       committed; give up or build a different operation
    │   │       └── HistoryUnavailableError
    │   │                               a version between the read version and the latest
    │   │                               is gone (cleaned up) or unreadable: the commit
    │   │                               cannot be checked; re-plan from the latest version
    │   ├── RetriesExhaustedError       contention: the retry budget ran out before the
    │   │                               commit won a version; trying again later may work
    │   └── CommitStateUnknownError     storage failed in a way that may or may not have
    │                                   created the version; do NOT clean up its files;
    │                                   call ``txn_engine.find_transaction`` or retry the
    │                                   same transaction (exactly-once settles it)
    ├── FormatError (+ValueError)       bytes on storage are not a valid Lance artefact
    │   ├── CorruptManifestError        truncated file, bad footer/magic, bad offsets,
    │   │                               undecodable protobuf
    │   ├── UnsupportedFeatureError     a feature flag this library does not understand
    │   ├── MixedNamingSchemeError      V1 and V2 manifest names in one ``_versions/``
    │   ├── TransactionNotFoundError    a version's transaction is neither inline nor in
    │   │                               ``_transactions/``
    │   ├── UnknownOperationError       a transaction whose operation this library does not
    │   │                               know (written by a newer Lance)
    │   ├── CorruptDeletionFileError    a deletion file that cannot be decoded
    │   ├── CorruptRefError             a file under ``_refs/`` whose name pylance could not
    │   │                               have written (``path`` names it)
    │   ├── DataFileError               a data file needed to count rows (legacy manifests
    │   │                               without physical_rows) is missing or unreadable
    │   └── LimitExceededError          a declared size, count or depth exceeds what the
    │                                   format allows (or what the library bounds); refused
    │                                   before any large allocation
    ├── DatasetNotFoundError (+FileNotFoundError)
    │                                   no dataset at that URI
    ├── VersionNotFoundError (+LookupError)
    │                                   the dataset exists, that version does not
    ├── DatasetAlreadyExistsError       creation (Overwrite with read_version 0, Clone)
    │                                   found a dataset already there
    ├── CleanupAbortedError             cleanup could not prove which files are unreferenced
    │                                   (a kept manifest or a lease is unreadable); nothing
    │                                   was deleted. Fix or remove the named object, rerun
    ├── LeaseExpiredError               a lease was not renewed before it expired: cleanup
    │                                   may have removed what it protected; re-plan
    ├── UnsupportedChangeError          a version in a change feed or stream range changed
    │   │                               the table in a way that reader cannot express
    │   ├── NonAppendVersionError       a streamed version deletes or rewrites rows: skip
    │   │                               such versions or read the change feed
    │   └── SchemaChangedError          the columns read changed within the range: start
    │                                   a new read after the schema change
    ├── InvalidStorageArgumentError (+ValueError)
    │                                   a storage path, byte range, URI or option is
    │                                   malformed; nothing was read or written. Fix the call.
    └── StorageError (+OSError)         the storage backend failed
        ├── ObjectExistsError (+FileExistsError)
        │                               create-if-absent lost: the object exists (the commit
        │                               loop turns this into a retry, users rarely see it)
        ├── ObjectNotFoundError (+FileNotFoundError)
        │                               a read of an object that is not there
        ├── AtomicityUnsupportedError   the backend cannot create-if-absent atomically and
        │                               no commit lock / unsafe opt-in was given
        └── AmbiguousWriteError         a write may or may not have reached the store
                                        (lost response); the loop settles it by reading back

Every commit error carries the context the caller needs to act: the transaction's read
version, the version it conflicted with, both operation kinds and a one-line remedy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "AmbiguousWriteError",
    "AtomicityUnsupportedError",
    "CleanupAbortedError",
    "CommitConflictError",
    "CommitError",
    "CommitStateUnknownError",
    "CorruptDeletionFileError",
    "CorruptManifestError",
    "CorruptRefError",
    "DataFileError",
    "DatasetAlreadyExistsError",
    "DatasetNotFoundError",
    "FormatError",
    "HistoryUnavailableError",
    "IncompatibleTransactionError",
    "InvalidOperationError",
    "InvalidStorageArgumentError",
    "LeaseExpiredError",
    "LimitExceededError",
    "MixedNamingSchemeError",
    "NamespaceTransactionAbortedError",
    "NonAppendVersionError",
    "ObjectExistsError",
    "ObjectNotFoundError",
    "RetriesExhaustedError",
    "RetryableConflictError",
    "SchemaChangedError",
    "SchemaMismatchError",
    "StorageError",
    "TransactionNotFoundError",
    "TxnEngineError",
    "UnknownOperationError",
    "UnsupportedChangeError",
    "UnsupportedFeatureError",
    "VersionNotFoundError",
]


class TxnEngineError(Exception):
    """Root of every error txn_engine raises; catch it to handle them all.

    Messages never carry a URI's password: ``scheme://user:password@...`` is shown as
    ``scheme://***@...`` (:func:`txn_engine.redact.redact_userinfo`).
    """

    def __init__(self, *args: Any) -> None:
        from txn_engine.redact import redact_userinfo

        super().__init__(*(redact_userinfo(a) if isinstance(a, str) else a for a in args))


class InvalidOperationError(TxnEngineError, ValueError):
    """The transaction is invalid for this dataset; nothing was written.

    Raised before any I/O that could change the dataset. Fix the transaction (the message
    names the offending fragment id, field, or key) and commit again.
    """


class SchemaMismatchError(InvalidOperationError):
    """Data to append has a column whose type the table's cannot hold without loss, or a
    column the table lacks; nothing was written.

    ``column`` is the column's (dotted) name, ``expected`` the table's type and ``actual``
    the data's (as text; ``None`` for a column missing on one side). Cast the column, or
    pass ``allow_lossy_cast=True`` to convert value by value (a value that does not fit
    still fails).
    """

    def __init__(
        self,
        message: str,
        *,
        column: str,
        expected: str | None = None,
        actual: str | None = None,
    ) -> None:
        super().__init__(message)
        self.column = column
        self.expected = expected
        self.actual = actual


class CommitError(TxnEngineError):
    """A commit did not land (or its outcome is unknown, see subclasses).

    Attributes are ``None`` where they do not apply.
    """

    def __init__(
        self,
        message: str,
        *,
        read_version: int | None = None,
        conflicting_version: int | None = None,
        operation: str | None = None,
        other_operation: str | None = None,
        remedy: str | None = None,
        conflicts: Sequence[Any] = (),
    ) -> None:
        self.read_version = read_version
        self.conflicting_version = conflicting_version
        self.operation = operation
        self.other_operation = other_operation
        self.remedy = remedy
        self.conflicts = tuple(conflicts)
        full = message if remedy is None else f"{message} Help: {remedy}"
        super().__init__(full)


class CommitConflictError(CommitError):
    """A concurrently committed transaction conflicts with this one.

    ``retryable`` tells the caller what to do: ``True`` means re-read the latest version,
    re-plan the operation (re-run the scan that chose rows/fragments) and commit again;
    ``False`` means the operation can never land on top of what was committed.
    ``conflicts`` holds the :class:`txn_engine.conflicts.Conflict` values that caused it.
    """

    retryable: bool = False


class RetryableConflictError(CommitConflictError):
    """Preempted by a concurrent commit: re-plan from a fresh read and commit again.

    ``txn_engine.replan_and_commit`` automates this.
    """

    retryable = True


class NamespaceTransactionAbortedError(RetryableConflictError):
    """A namespace transaction (``Namespace.transaction()``) was aborted before its commit
    point: it gave way to an older transaction holding one of its tables, or another
    writer aborted it after waiting longer than ``abort_after``. Nothing of it is
    visible; run it again (with a new transaction id).
    """


class IncompatibleTransactionError(CommitConflictError):
    """The transaction cannot land on top of a concurrent commit (e.g. Append after an
    Overwrite, same config key changed by both). Do not retry the same operation; decide
    what the application wants given the new state of the dataset.
    """

    retryable = False


class HistoryUnavailableError(IncompatibleTransactionError):
    """A version the commit must check against (between its read version and the latest),
    or the read version itself, is missing or cannot be read (typically removed by cleanup).

    Missing history is never taken as "no conflict": the transaction cannot be proved safe
    and is refused. Re-plan the operation against the latest version (re-read the data it
    depends on) and commit the new transaction; keep versions that writers still plan
    against (leases, longer retention) to avoid this. ``conflicting_version`` is the first
    version that could not be read.
    """


class RetriesExhaustedError(CommitError):
    """The commit kept losing the race for the next version until the retry budget ran out.

    This is contention, not incompatibility: nothing is wrong with the transaction. Retry
    later, or raise ``RetryPolicy.max_attempts`` / ``deadline``. The transaction did not land.
    """


class CommitStateUnknownError(CommitError):
    """Storage failed in a way that leaves the outcome unknown: the version may exist.

    Do not delete any file the transaction references. Commit the *same* transaction again
    (same uuid): txn_engine finds it if it landed and reports the original version instead
    of committing twice.
    """


class FormatError(TxnEngineError, ValueError):
    """Bytes read from storage are not a valid Lance artefact. Nothing was modified."""


class CorruptManifestError(FormatError):
    """A manifest file is truncated, has a bad footer or offsets, or undecodable protobuf."""


class UnsupportedFeatureError(FormatError):
    """The dataset uses a feature flag this library does not understand.

    ``flag`` is the lowest unknown bit and ``kind`` is ``"reader"`` or ``"writer"``. Reading
    (reader flags) or committing (writer flags) such a dataset is refused so that it is never
    misread or corrupted; upgrade txn_engine.
    """

    def __init__(self, message: str, *, flag: int, kind: str) -> None:
        self.flag = flag
        self.kind = kind
        super().__init__(message)


class MixedNamingSchemeError(FormatError):
    """``_versions/`` holds both V1 (``N.manifest``) and V2 (inverted, 20 digit) names.

    Lance refuses such datasets too; finish (or undo) the V1 → V2 migration first.
    """


class TransactionNotFoundError(FormatError):
    """A version's transaction is neither inline in its manifest nor in ``_transactions/``.

    A concurrent commit cannot be checked against such a version, so the commit loop treats
    it as an incompatible conflict; the message names the version.
    """


class UnknownOperationError(FormatError):
    """A transaction carries no operation this library knows (newer Lance, or corrupt).

    The commit loop treats a concurrent version with such a transaction as an incompatible
    conflict that names the version.
    """


class CorruptDeletionFileError(FormatError):
    """A deletion file could not be decoded (bad Arrow IPC, bad roaring bitmap, bad schema)."""


class CorruptRefError(FormatError):
    """A file under ``_refs/`` (a tag or a branch) has a name pylance 14 could not have
    written: it does not decode to a valid ref name, or is not that name's encoding (such as
    ``_refs/branches/..%2F..%2Fx.json``). ``path`` names the file; remove or rename it.
    """

    def __init__(self, message: str, *, path: str | None = None) -> None:
        self.path = path
        super().__init__(message)


class DataFileError(FormatError):
    """A data file the manifest references is missing or not a readable Lance file.

    Raised only where txn_engine must look inside a data file: manifests written by very
    old Lance releases record no ``physical_rows``, so the row count comes from the file.
    """


class LimitExceededError(FormatError):
    """Bytes on storage declare a size, count or nesting depth beyond what the format allows
    or what txn_engine bounds (a manifest larger than its cap, a deletion file declaring more
    rows than its fragment holds, a schema nested deeper than the documented limit).

    Refused before any allocation proportional to the declared size; nothing was modified.
    ``limit`` names the bound that was exceeded.
    """

    def __init__(self, message: str, *, limit: str | None = None) -> None:
        self.limit = limit
        super().__init__(message)


class DatasetNotFoundError(TxnEngineError, FileNotFoundError):
    """There is no Lance dataset at the URI (no readable ``_versions/`` manifest)."""


class VersionNotFoundError(TxnEngineError, LookupError):
    """The dataset exists but the requested version does not (or was cleaned up)."""


class DatasetAlreadyExistsError(TxnEngineError):
    """Creating a dataset (first Overwrite, Clone) found one already at the URI.

    Commit with ``read_version`` set to the existing latest version to overwrite it.
    """


class CleanupAbortedError(TxnEngineError):
    """Cleanup refused to delete anything: it could not prove which files are unreferenced.

    Raised before any delete when a manifest that cleanup would keep (or a lease object)
    cannot be read or decoded. ``path`` names the object. Repair or remove it (a malformed
    lease file can be deleted once its writer is known to be gone) and run cleanup again.
    """

    def __init__(self, message: str, *, path: str | None = None) -> None:
        self.path = path
        super().__init__(message)


class LeaseExpiredError(TxnEngineError):
    """A lease expired before it was renewed (the renewer was paused, or storage failed for
    longer than the TTL). Cleanup may since have removed the versions and files it protected:
    stop using the leased version, re-read the dataset and re-plan under a new lease.
    """


class UnsupportedChangeError(TxnEngineError):
    """A version in the range of a change feed or a streaming read changed the table in a
    way that reader cannot deliver; nothing was read past it.

    ``version`` is that version, ``operation`` its transaction's operation (Lance's name:
    ``delete``, ``overwrite``, ...) and ``remedy`` what to do instead (also in the message).
    """

    def __init__(
        self, message: str, *, version: int, operation: str, remedy: str | None = None
    ) -> None:
        self.version = version
        self.operation = operation
        self.remedy = remedy
        super().__init__(message if remedy is None else f"{message} Help: {remedy}")


class NonAppendVersionError(UnsupportedChangeError):
    """A version read by ``readStream.format("txn_lance")`` deletes or rewrites rows
    (Delete, Overwrite, Restore, ...), which a stream of added rows cannot express.

    Restart the query with ``skipChangeCommits=true`` (such versions are skipped: their
    removals are not seen downstream) or read the change feed (``readChangeFeed=true``).
    """


class SchemaChangedError(UnsupportedChangeError):
    """A column read by a change feed or a stream is missing or has another type at
    ``version`` (a schema change within the range).

    Read the range up to ``version - 1``, then start a new read (a new streaming
    checkpoint) at ``version`` with the new schema.
    """

    def __init__(
        self,
        message: str,
        *,
        version: int,
        operation: str,
        column: str,
        remedy: str | None = None,
    ) -> None:
        self.column = column
        super().__init__(message, version=version, operation=operation, remedy=remedy)


class InvalidStorageArgumentError(TxnEngineError, ValueError):
    """A storage call was malformed: an absolute or ``..`` path, a negative byte range, an
    unknown URI scheme, options passed alongside a ready-made storage object.

    This is a programming error, not a backend failure (so it is deliberately not a
    :class:`StorageError` and a retry loop never swallows it). Nothing was read or written.
    """


class StorageError(TxnEngineError, OSError):
    """The storage backend failed. ``__cause__`` holds the backend's own exception."""


class ObjectExistsError(StorageError, FileExistsError):
    """Create-if-absent found the object already there (the race for a version was lost)."""


class ObjectNotFoundError(StorageError, FileNotFoundError):
    """A read, size or ranged read of an object that does not exist."""


class AtomicityUnsupportedError(StorageError):
    """The backend cannot create an object only-if-absent atomically.

    Pass a commit lock, use a backend that supports it (local disk, S3, GCS, Azure, memory),
    or opt into unsafe mode if exactly one writer ever commits.
    """


class AmbiguousWriteError(StorageError):
    """A write may or may not have reached the store (timeout, lost response).

    The commit loop settles this by reading the target back; users see
    :class:`CommitStateUnknownError` only when that is impossible.
    """
