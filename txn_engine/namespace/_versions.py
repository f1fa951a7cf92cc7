"""Version creation by manifest staged elsewhere (pylance's ``create_table_version``, the
REST ``BatchCommitTables``), and the restamping an atomic batch needs.

A single ``create_table_version(N, staged)`` is the table's create-if-absent of version N
with the staged bytes, through the namespace's commit handler (so a reserved number is
settled first). A batch is a namespace transaction: each table is reserved, which takes the
number N the client built for; the client's manifest is then restamped as N + 1 (its version
field and the transaction marker in its config; nothing else changes, since the reservation
between is a no-op), staged, and the decision commits them all.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

from txn_engine.errors import (
    CorruptManifestError,
    InvalidOperationError,
    ObjectExistsError,
    ObjectNotFoundError,
    StorageError,
    VersionNotFoundError,
)
from txn_engine.format.manifest_file import decode_manifest_file, encode_manifest_file
from txn_engine.format.naming import (
    VERSIONS_DIR,
    NamingScheme,
    manifest_path,
    scan_versions,
)
from txn_engine.namespace._records import MARKER_KEY, table_location
from txn_engine.namespace._transaction import NamespaceTransaction, reserve
from txn_engine.storage.base import Storage, get_bounded

if TYPE_CHECKING:
    from txn_engine.namespace._core import NamespaceCore

__all__ = ["StagedVersion", "commit_staged", "create_version", "staged_relative"]

_MAX_MANIFEST = 1 << 30


@attrs.frozen
class StagedVersion:
    """A client's request: make ``version`` of table ``parts`` from the manifest it
    staged at ``staged`` (relative to the table)."""

    parts: tuple[str, ...]
    version: int
    staged: str
    naming: NamingScheme | None = None


def staged_relative(parts: Sequence[str], given: str) -> str:
    """The path, relative to the table, of a manifest a client staged: pylance names it by
    its object-store path (``<prefix>/db/events.lance/_versions/<name>``), a REST client
    maybe by URI. It must be a file directly under this table's ``_versions/``."""
    text = str(given)
    marker = f"{VERSIONS_DIR}/"
    if text.startswith(marker):
        prefix, name = "", text[len(marker) :]
    else:
        at = text.rfind(f"/{marker}")
        if at < 0:
            raise InvalidOperationError(f"manifest_path {given!r} is not under _versions/")
        prefix, name = text[:at], text[at + len(marker) + 1 :]
    if prefix and not prefix.rstrip("/").endswith(table_location(parts)):
        raise InvalidOperationError(f"manifest_path {given!r} is not under this table")
    if not name or "/" in name or "\\" in name or name in (".", ".."):
        raise InvalidOperationError(f"manifest_path {given!r} is not a file of _versions/")
    return f"{marker}{name}"


def _scheme(storage: Storage, asked: NamingScheme | None) -> NamingScheme:
    listing = scan_versions(storage)
    found = listing.scheme
    if found is not None and asked is not None and found != asked:
        raise InvalidOperationError(f"the table names its manifests {found.name}, not {asked.name}")
    return found or asked or NamingScheme.V2


def _read_staged(storage: Storage, item: StagedVersion) -> bytes:
    try:
        data = get_bounded(storage, item.staged, _MAX_MANIFEST)
    except ObjectNotFoundError:
        raise InvalidOperationError(f"no staged manifest at {item.staged}") from None
    mf = decode_manifest_file(data, what=f"{storage.uri}/{item.staged}")
    if mf.manifest.version != item.version:
        raise InvalidOperationError(
            f"the staged manifest is version {mf.manifest.version}, not {item.version}"
        )
    return data


def create_version(ns: NamespaceCore, item: StagedVersion) -> str:
    """Create one version from a staged manifest (ObjectExistsError when the number is
    taken, VersionNotFoundError when the version below it does not exist); return the
    canonical path. The staged file is removed after (best effort)."""
    storage = ns.table_storage(item.parts)
    data = _read_staged(storage, item)
    scheme = _scheme(storage, item.naming)
    below = item.version - 1
    if (
        below >= 1
        and not storage.exists(manifest_path(below, scheme))
        and scan_versions(storage).get(below) is None
    ):
        raise VersionNotFoundError(
            f"version {below} of {'.'.join(item.parts)} does not exist: "
            f"version {item.version} cannot follow it"
        )
    path = manifest_path(item.version, scheme)
    ns.handler(item.parts).commit(item.version, path, data)
    with contextlib.suppress(StorageError):  # a leftover staged file is never listed
        storage.delete(item.staged)
    return path


def restamp(data: bytes, version: int, txid: str) -> bytes:
    """The manifest file ``data`` as ``version``, marked by transaction ``txid``."""
    mf = decode_manifest_file(data)
    manifest = mf.manifest
    manifest.version = version
    manifest.config[MARKER_KEY] = txid
    out = encode_manifest_file(manifest, mf.indices, mf.transaction, owned=True)
    back = decode_manifest_file(out)
    if back.manifest.version != version:
        raise CorruptManifestError("a restamped manifest did not read back")
    return out


def commit_staged(ns: NamespaceCore, items: Sequence[StagedVersion]) -> dict[str, int]:
    """Land every staged version together (all or nothing; ObjectExistsError when a table
    moved past the version its manifest was built on). Returns the version each table's
    change became, by dotted id."""
    if len({i.parts for i in items}) != len(items):
        raise InvalidOperationError("a batch creates at most one version per table")
    tx = NamespaceTransaction(ns)
    try:
        for item in sorted(items, key=lambda i: i.parts):  # one order: no deadlock
            storage = ns.table_storage(item.parts)
            data = _read_staged(storage, item)
            _scheme(storage, item.naming)
            held = reserve(ns, item.parts, tx.id, None)
            tx.adopt(held)
            if held.version != item.version:
                raise ObjectExistsError(
                    f"{'.'.join(item.parts)}: version {item.version} exists (the table "
                    f"is at {held.version - 1}); rebuild the manifest on the latest version"
                )
            new = held.version + 1
            held.handler.commit(
                new, manifest_path(new, _scheme(storage, None)), restamp(data, new, tx.id)
            )
    except BaseException:
        tx.abort()
        raise
    return tx.commit()
