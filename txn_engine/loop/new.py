"""Commits that create rather than race: a new dataset (or a shallow clone), and detached
versions (outside the main line, no conflict checks)."""

from __future__ import annotations

import secrets

from txn_engine.builder import ManifestState, build_manifest, validate
from txn_engine.codec import transaction_from_proto
from txn_engine.dataset import Dataset
from txn_engine.errors import (
    DatasetAlreadyExistsError,
    InvalidOperationError,
    RetriesExhaustedError,
    VersionNotFoundError,
)
from txn_engine.format.io import (
    latest_version,
    read_manifest,
    read_manifest_entry,
    read_transaction_and_manifest,
)
from txn_engine.format.manifest_file import ManifestFile, encode_manifest_file
from txn_engine.format.naming import (
    U64_MAX,
    VERSIONS_DIR,
    NamingScheme,
    VersionEntry,
    detached_manifest_name,
    manifest_path,
    scan_versions,
    write_version_hint,
)
from txn_engine.loop.core import CommitResult
from txn_engine.loop.create import create, is_ours, state_of, write_transaction_file
from txn_engine.ops import Clone, Restore
from txn_engine.storage import open_storage
from txn_engine.storage.base import Storage
from txn_engine.storage.handler import CommitHandler, StoreCommitHandler
from txn_engine.transaction import Transaction

__all__ = ["DETACHED_BIT", "commit_detached", "commit_new"]


def commit_new(
    handler: CommitHandler,
    txn: Transaction,
    naming: NamingScheme | None,
    timestamp_ns: int | None,
    stable_row_ids: bool,
    transaction_file: bool,
) -> CommitResult:
    """Create the dataset (``read_version`` 0), or a shallow clone of another: a single
    attempt; an existing dataset raises DatasetAlreadyExistsError (unless it was this very
    transaction, landed by an earlier call)."""
    op = txn.operation
    clone_source: ManifestState | None = None
    target = 1
    if isinstance(op, Clone):
        source = open_storage(op.ref_path)
        entry = _source_entry(source, op.ref_version)
        clone_source = state_of(read_manifest_entry(source, entry))
        target = op.ref_version
    scheme = naming or NamingScheme.V2
    path = manifest_path(target, scheme)
    storage = handler.storage
    handler.finish_pending()
    listing = scan_versions(storage)
    if listing:
        existing = listing.get(target)
        if existing is not None:
            pb, _ = read_transaction_and_manifest(storage, existing)
            if pb.uuid == txn.uuid:
                return CommitResult(
                    existing.version, transaction_from_proto(pb), 0, existing.path, True
                )
        latest = listing.latest.version if listing.latest is not None else 0
        raise DatasetAlreadyExistsError(
            f"{storage.uri} already holds a dataset (latest version {latest}); "
            f"commit with read_version={latest} to overwrite it"
        )
    validate(None, txn)
    name, pb = write_transaction_file(storage, txn, transaction_file)
    state = build_manifest(
        None,
        txn,
        version=target,
        transaction_file=name,
        timestamp_ns=timestamp_ns,
        clone_source=clone_source,
        stable_row_ids=stable_row_ids,
    )
    data = encode_manifest_file(state.manifest, state.indices, pb, owned=True)
    if not is_ours(create(handler, target, path, data, txn), data):
        raise DatasetAlreadyExistsError(
            f"{storage.uri}: another writer created the dataset concurrently"
        )
    write_version_hint(storage, target)  # local disk only, best effort
    return CommitResult(target, txn, 1, path)


def _source_entry(source: Storage, version: int) -> VersionEntry:
    """The listing entry of a clone's source version."""
    entry = scan_versions(source, since=version).get(version)
    if entry is None:
        raise VersionNotFoundError(f"{source.uri}: version {version} does not exist")
    return entry


#: The top bit of a detached version's number (pylance's DETACHED_VERSION_MASK).
DETACHED_BIT = 1 << 63

#: Draws of a detached version number before giving up (a draw is taken with odds 2**-63).
_DETACHED_DRAWS = 10


def commit_detached(
    handler: CommitHandler,
    txn: Transaction,
    base: Dataset | ManifestFile | None,
    timestamp_ns: int | None,
    transaction_file: bool,
) -> CommitResult:
    """``commit(..., detached=True)``, as pylance's ``LanceDataset.commit(...,
    detached=True)``: ``txn`` applied to the version it reads (main line or detached, no
    conflict checks: no other commit builds on the new version's number), landing as
    ``_versions/d{number}.manifest`` with a random number whose top bit is set; the main
    line, its latest version and the version hint do not move. As in pylance, the rows'
    version sequences say read version + 1. Refused (InvalidOperationError, nothing
    written): creating a dataset, V1 manifest names, an external manifest store (a
    main-line commit reading a detached version is refused by :func:`as_transaction`)."""
    op = txn.operation
    storage = handler.storage
    if txn.read_version == 0 or isinstance(op, Clone):
        raise InvalidOperationError(
            "detached commits cannot create a dataset (as in pylance): create it with a "
            "main-line commit first"
        )
    if not isinstance(handler, StoreCommitHandler):
        raise InvalidOperationError(
            f"detached commits are not supported with an external manifest store "
            f"({handler!r}), which decides main-line versions only: commit to a branch "
            "instead (txn_engine.open(uri).create_branch)"
        )
    if latest_version(storage).scheme is not NamingScheme.V2:
        raise InvalidOperationError(
            "detached commits cannot be used with V1 manifest names (as in pylance): "
            "commit to a branch instead (txn_engine.open(uri).create_branch)"
        )
    mf = base.manifest_file if isinstance(base, Dataset) else base
    if mf is None or mf.manifest.version != txn.read_version:
        mf = read_manifest(storage, txn.read_version)[1]
    current = state_of(mf)
    restore = state_of(read_manifest(storage, op.version)[1]) if isinstance(op, Restore) else None
    validate(current, txn)
    name, pb = write_transaction_file(storage, txn, transaction_file)
    built = build_manifest(
        current,
        txn,
        version=min(current.manifest.version + 1, U64_MAX),
        transaction_file=name,
        timestamp_ns=timestamp_ns,
        restore_source=restore,
    )
    for attempt in range(1, _DETACHED_DRAWS + 1):
        version = secrets.randbits(64) | DETACHED_BIT
        built.manifest.version = version
        data = encode_manifest_file(built.manifest, built.indices, pb, owned=True)
        path = f"{VERSIONS_DIR}/{detached_manifest_name(version)}"
        if is_ours(create(handler, version, path, data, txn), data):
            return CommitResult(version, txn, attempt, path)
    raise RetriesExhaustedError(
        f"{txn.kind} transaction {txn.uuid}: {_DETACHED_DRAWS} detached version numbers "
        "drawn were all taken",
        read_version=txn.read_version,
        operation=txn.kind,
        remedy="the random source repeats itself: check it, then commit again",
    )
