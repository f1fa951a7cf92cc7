"""What a table's manifests, tags and branches reference: the files cleanup must keep."""

from __future__ import annotations

import os
import uuid as uuid_module
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from txn_engine import jsontext
from txn_engine._proto import table_pb2
from txn_engine.errors import (
    CleanupAbortedError,
    CorruptRefError,
    InvalidStorageArgumentError,
    TxnEngineError,
    VersionNotFoundError,
)
from txn_engine.format.deletion import DELETIONS_DIR
from txn_engine.format.io import read_manifest_entry
from txn_engine.format.naming import (
    TRANSACTIONS_DIR,
    VERSIONS_DIR,
    NamingScheme,
    VersionEntry,
    parse_detached_name,
    scan_versions,
)
from txn_engine.format.refs import branch_name_from_file
from txn_engine.storage.base import Storage
from txn_engine.storage.fsspec_store import FsspecStorage
from txn_engine.storage.local import LocalStorage
from txn_engine.storage.obstore_store import ObstoreStorage

__all__ = [
    "BRANCHES_DIR",
    "DATA_DIR",
    "FILE_DIRS",
    "INDICES_DIR",
    "TAGS_DIR",
    "Refs",
    "keep_detached",
    "pinned_by_refs",
    "read_or_abort",
    "referenced_files",
    "root_aliases",
]

DATA_DIR = "data"
INDICES_DIR = "_indices"
#: The directories whose files cleanup may delete (besides manifests and expired leases).
FILE_DIRS = (DATA_DIR, DELETIONS_DIR, INDICES_DIR, TRANSACTIONS_DIR)
TAGS_DIR = "_refs/tags"
BRANCHES_DIR = "_refs/branches"


def _norm_root(text: str) -> str:
    for scheme in ("file://",):
        if text.startswith(scheme):
            text = text[len(scheme) :]
    return text.rstrip("/")


def root_aliases(storage: Storage) -> set[str]:
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
class Refs:
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


def pinned_by_refs(storage: Storage, aliases: set[str]) -> tuple[set[int], set[str], set[str]]:
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
        branch_root = f"tree/{_branch_name(path)}"
        for entry in _branch_versions(storage, branch_root):
            mf = read_or_abort(storage, entry, prefix=branch_root)
            f, d = referenced_files(mf.manifest, mf.indices, aliases=aliases, what=entry.path)
            files |= f
            dirs |= d
    return versions, files, dirs


def _branch_name(path: str) -> str:
    """The branch whose refs file is ``path``, decoded as pylance encodes it; a name pylance
    could not have written stops the cleanup (its branch's files cannot be placed)."""
    try:
        return branch_name_from_file(path.rsplit("/", 1)[1])
    except CorruptRefError as exc:
        raise CleanupAbortedError(f"{exc}; nothing deleted", path=path) from exc


def keep_detached(storage: Storage, aliases: set[str], files: set[str], dirs: set[str]) -> None:
    """Add to ``files`` / ``dirs`` what every detached version (``_versions/d{n}.manifest``,
    ``commit(..., detached=True)``) references. No cleanup removes a detached manifest
    (pylance's neither), and this one keeps what they read (pylance's deletes the files
    only they and removed versions reference: stricter on purpose, docs/cleanup.md). One
    that cannot be read stops the cleanup (CleanupAbortedError naming it)."""
    for name in storage.list(VERSIONS_DIR):
        number = parse_detached_name(name)
        if number is None:
            continue
        try:
            mf = read_or_abort(storage, VersionEntry(number, name, NamingScheme.V2))
        except CleanupAbortedError as exc:
            if isinstance(exc.__cause__, VersionNotFoundError):
                continue  # deleted since the listing
            raise
        f, d = referenced_files(mf.manifest, mf.indices, aliases=aliases, what=f"_versions/{name}")
        files |= f
        dirs |= d


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


def read_or_abort(storage: Storage, entry: VersionEntry, prefix: str | None = None) -> Any:
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
