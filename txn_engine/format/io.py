"""Reading a dataset's versions, manifests and transactions from a Storage."""

from __future__ import annotations

import struct
from typing import NoReturn

from google.protobuf.message import DecodeError

from txn_engine._proto import table_pb2, transaction_pb2
from txn_engine.errors import (
    CorruptManifestError,
    DatasetNotFoundError,
    InvalidOperationError,
    LimitExceededError,
    ObjectNotFoundError,
    TransactionNotFoundError,
    VersionNotFoundError,
)
from txn_engine.format import manifest_file as _mf
from txn_engine.format.flags import check_reader_flags
from txn_engine.format.manifest_file import (
    FOOTER_SIZE,
    MAGIC,
    ManifestFile,
    decode_manifest_file,
    decode_transaction,
    inline_transaction_offset,
)
from txn_engine.format.naming import (
    U64_MAX,
    NamingScheme,
    VersionEntry,
    detached_manifest_name,
    manifest_name,
    manifest_path,
    scan_versions,
    transaction_path,
)
from txn_engine.storage.base import Storage, get_bounded

__all__ = [
    "HEAD_READ_SIZE",
    "latest_version",
    "read_manifest",
    "read_manifest_bytes",
    "read_manifest_entry",
    "read_transaction",
    "read_transaction_and_manifest",
    "read_version_by_name",
    "resolve_version",
]

#: Bytes fetched from the start (and, for larger files, the end) of a manifest file when
#: only its inline transaction is needed: the transaction sits at the start of the file,
#: right after the index section, so one ranged read usually suffices.
HEAD_READ_SIZE = 64 * 1024
_U32 = struct.Struct("<I")


def latest_version(storage: Storage) -> VersionEntry:
    """The newest main-line version. Raises DatasetNotFoundError if there is none."""
    latest = scan_versions(storage, since=U64_MAX).latest  # the newest name: one page
    if latest is None:
        raise DatasetNotFoundError(
            f"no Lance dataset at {storage.uri} (no manifests in _versions/)"
        )
    return latest


def resolve_version(
    storage: Storage, version: int, scheme: NamingScheme | None = None
) -> VersionEntry:
    """Locate ``version`` without listing: try the V2 name, then V1 (or only ``scheme``);
    a number with the top bit set is a detached version (``_versions/d{version}.manifest``,
    never listed among the main line's)."""
    if type(version) is not int:  # bool, float, str, ...: a caller's mistake
        raise InvalidOperationError(f"a version is a whole number, got {version!r}")
    schemes = [scheme] if scheme is not None else [NamingScheme.V2, NamingScheme.V1]
    if not 0 <= version < 1 << 63:
        schemes = []  # no main-line version has that number
        if 1 << 63 <= version <= U64_MAX and scheme is not NamingScheme.V1:
            detached = detached_manifest_name(version)  # only V2 tables have them
            if storage.exists(f"_versions/{detached}"):
                return VersionEntry(version, detached, NamingScheme.V2)
    for s in schemes:
        name = manifest_name(version, s)
        if storage.exists(f"_versions/{name}"):
            return VersionEntry(version, name, s)
    if not storage.list("_versions"):
        raise DatasetNotFoundError(f"no Lance dataset at {storage.uri}")
    raise VersionNotFoundError(f"{storage.uri}: version {version} does not exist")


def _check_manifest_size(size: int, what: str) -> None:
    cap = _mf.MAX_MANIFEST_BYTES
    if size > cap:
        raise LimitExceededError(
            f"{what}: manifest file is {size} bytes, more than txn_engine reads "
            f"(MAX_MANIFEST_BYTES = {cap})",
            limit="MAX_MANIFEST_BYTES",
        )


def read_manifest_bytes(storage: Storage, path: str, *, what: str | None = None) -> bytes:
    """The bytes of the manifest file at ``path``, read footer first.

    On a storage with ``get_tail(path, n)`` (object stores with suffix ranges: S3, GCS) the
    last block and the size come in one request: a file of at most :data:`HEAD_READ_SIZE`
    bytes costs that request alone, a larger one (size capped, footer validated first) one
    more for the rest. Otherwise (``get_head(path, n)``, where the store has it, gives the
    first block and the size in one request):

    A file of at most :data:`HEAD_READ_SIZE` bytes costs one ranged read. A larger one:
    its size is checked against ``MAX_MANIFEST_BYTES`` (LimitExceededError), then its last
    block is read and the footer (magic, manifest position and length) validated
    (CorruptManifestError), and only then is the rest read. So neither a huge file nor a
    non-manifest costs more than two blocks of memory. ObjectNotFoundError if absent.
    """
    label = what if what is not None else f"{storage.uri}/{path}"
    tail_reader = getattr(storage, "get_tail", None)
    got = tail_reader(path, HEAD_READ_SIZE) if callable(tail_reader) else None
    if got is not None:
        return _read_from_tail(storage, path, got[0], got[1], label)
    head_reader = getattr(storage, "get_head", None)
    known: int | None = None
    head: bytes
    if callable(head_reader):  # the first block and the size in one request
        got_head: tuple[bytes, int] = head_reader(path, HEAD_READ_SIZE)
        head, known = got_head
    else:
        head = storage.get_range(path, 0, HEAD_READ_SIZE)
    if len(head) < HEAD_READ_SIZE:
        return head
    size = storage.size(path) if known is None else known
    _check_manifest_size(size, label)
    if size <= HEAD_READ_SIZE:
        return head[:size]
    if size <= 2 * HEAD_READ_SIZE:  # two blocks at most: the decoder checks the footer
        data = head + storage.get_range(path, HEAD_READ_SIZE, size)
        if len(data) != size:
            raise CorruptManifestError(f"{label}: file changed size while being read")
        return data
    start = size - HEAD_READ_SIZE
    tail = storage.get_range(path, start, size)
    if len(tail) != size - start or tail[-4:] != MAGIC:
        raise CorruptManifestError(
            f"{label}: bad magic {tail[-4:]!r} (expected b'LANC'); truncated or not a manifest"
        )
    (pos,) = struct.unpack_from("<Q", tail, len(tail) - FOOTER_SIZE)
    if pos + 4 > size - FOOTER_SIZE:
        raise CorruptManifestError(f"{label}: manifest position {pos} is outside the file")
    if pos >= start:
        (length,) = _U32.unpack_from(tail, pos - start)
    elif pos + 4 <= HEAD_READ_SIZE:
        (length,) = _U32.unpack_from(head, pos)
    else:
        prefix = storage.get_range(path, pos, pos + 4)
        length = _U32.unpack(prefix)[0] if len(prefix) == 4 else -1
    if pos + 4 + length != size - FOOTER_SIZE:
        raise CorruptManifestError(
            f"{label}: manifest length {length} at offset {pos} does not end at the footer"
        )
    middle = storage.get_range(path, HEAD_READ_SIZE, start) if start > HEAD_READ_SIZE else b""
    data = b"".join((head, middle, tail))
    if len(data) != size:
        raise CorruptManifestError(f"{label}: file changed size while being read")
    return data


def _read_from_tail(storage: Storage, path: str, tail: bytes, size: int, label: str) -> bytes:
    """The rest of :func:`read_manifest_bytes` once the last block (``tail``) and the
    size are known: cap the size, validate the footer, then read what precedes the block."""
    if size <= len(tail):  # the whole file
        return tail if size == len(tail) else _changed(label)
    _check_manifest_size(size, label)
    start = size - len(tail)
    if tail[-4:] != MAGIC:
        raise CorruptManifestError(
            f"{label}: bad magic {tail[-4:]!r} (expected b'LANC'); truncated or not a manifest"
        )
    (pos,) = struct.unpack_from("<Q", tail, len(tail) - FOOTER_SIZE)
    if pos + 4 > size - FOOTER_SIZE:
        raise CorruptManifestError(f"{label}: manifest position {pos} is outside the file")
    if pos >= start:  # the manifest starts in the last block: check it before reading on
        (length,) = _U32.unpack_from(tail, pos - start)
        _check_manifest_span(pos, length, size, label)
    data = storage.get_range(path, 0, start) + tail
    if len(data) != size:
        _changed(label)
    (length,) = _U32.unpack_from(data, pos)
    _check_manifest_span(pos, length, size, label)
    return data


def _check_manifest_span(pos: int, length: int, size: int, label: str) -> None:
    if pos + 4 + length != size - FOOTER_SIZE:
        raise CorruptManifestError(
            f"{label}: manifest length {length} at offset {pos} does not end at the footer"
        )


def _changed(label: str) -> NoReturn:
    raise CorruptManifestError(f"{label}: file changed size while being read")


def read_manifest_entry(storage: Storage, entry: VersionEntry) -> ManifestFile:
    """Read (footer first, size-capped: :func:`read_manifest_bytes`) and strictly decode
    the manifest file of ``entry``."""
    what = f"{storage.uri}/{entry.path}"
    try:
        data = read_manifest_bytes(storage, entry.path, what=what)
    except ObjectNotFoundError as exc:
        raise VersionNotFoundError(
            f"{storage.uri}: version {entry.version} vanished ({entry.path})"
        ) from exc
    return decode_manifest_file(data, what=what)


def read_version_by_name(storage: Storage, version: int, scheme: NamingScheme) -> bytes | None:
    """The manifest file of main-line ``version`` (named in ``scheme``), read by its name
    with one request (size-capped), or None when it does not exist. Versions are created in
    order, so a missing one also means no newer one exists yet (cleanup removes only
    older versions, which a listing, not this, must be trusted to show)."""
    try:
        return get_bounded(storage, manifest_path(version, scheme), _mf.MAX_MANIFEST_BYTES)
    except ObjectNotFoundError:
        return None


def read_manifest(
    storage: Storage, version: int | None = None
) -> tuple[VersionEntry, ManifestFile]:
    """Read the latest manifest, or ``version``. Raises DatasetNotFoundError,
    VersionNotFoundError, CorruptManifestError, UnsupportedFeatureError."""
    entry = latest_version(storage) if version is None else resolve_version(storage, version)
    return entry, read_manifest_entry(storage, entry)


def _plausible(txn: transaction_pb2.Transaction) -> bool:
    return len(txn.uuid) == 36 and txn.WhichOneof("operation") is not None


def _transaction_from_head(head: bytes) -> transaction_pb2.Transaction | None:
    """Find the inline transaction in the first bytes of a manifest file without the footer.

    The file starts with [IndexSection]? [Transaction]? Manifest. Returns None when unsure.
    """
    offset = 0
    for _ in range(2):
        if offset + 4 > len(head):
            return None
        (length,) = _U32.unpack_from(head, offset)
        end = offset + 4 + length
        if end > len(head):
            return None
        txn = transaction_pb2.Transaction()
        try:
            txn.ParseFromString(head[offset + 4 : end])
        except DecodeError:
            pass
        else:
            if _plausible(txn):
                return txn
        offset = end
    return None


def _as_entry(storage: Storage, entry_or_version: VersionEntry | int) -> VersionEntry:
    if isinstance(entry_or_version, VersionEntry):
        return entry_or_version
    return resolve_version(storage, entry_or_version)


def read_transaction(
    storage: Storage,
    entry_or_version: VersionEntry | int,
    manifest_file: ManifestFile | None = None,
) -> transaction_pb2.Transaction:
    """The transaction that created a version (a VersionEntry, or a version number).

    Uses the inline copy (reading only the head of the manifest file when that suffices),
    then ``_transactions/{transaction_file}``. Pass ``manifest_file`` when you already have
    it to save a read. Raises TransactionNotFoundError when neither copy exists,
    VersionNotFoundError when the version does not, CorruptManifestError on bad bytes.
    """
    return read_transaction_and_manifest(storage, entry_or_version, manifest_file)[0]


def read_transaction_and_manifest(
    storage: Storage,
    entry_or_version: VersionEntry | int,
    manifest_file: ManifestFile | None = None,
) -> tuple[transaction_pb2.Transaction, ManifestFile | None]:
    """Like :func:`read_transaction`, also returning the decoded manifest file when it had
    to be read whole (``None`` when the head of the file sufficed), so callers can reuse it.
    """
    entry = _as_entry(storage, entry_or_version)
    if manifest_file is None:
        try:
            head = storage.get_range(entry.path, 0, HEAD_READ_SIZE)
        except ObjectNotFoundError as exc:
            raise VersionNotFoundError(
                f"{storage.uri}: version {entry.version} vanished ({entry.path})"
            ) from exc
        # the inline transaction sits at the head: parse only it (not the manifest, whose
        # fragment list is what makes a version expensive to decode)
        txn = _transaction_from_head(head)
        if txn is not None:
            return txn, None
        if len(head) < HEAD_READ_SIZE:  # the whole (small) file: decode it once, reuse it
            manifest_file = decode_manifest_file(head, what=f"{storage.uri}/{entry.path}")
        else:
            txn, manifest = _transaction_via_tail(storage, entry, head)
            if txn is not None:
                return txn, None
            return _transaction_file(storage, entry, manifest), None
    if manifest_file.transaction is not None:
        return manifest_file.transaction, manifest_file
    return _transaction_file(storage, entry, manifest_file.manifest), manifest_file


def _transaction_via_tail(
    storage: Storage, entry: VersionEntry, head: bytes
) -> tuple[transaction_pb2.Transaction | None, table_pb2.Manifest]:
    """For a large manifest file: read the footer and manifest from the tail, then only
    the inline transaction section (never the whole file)."""
    what = f"{storage.uri}/{entry.path}"
    size = storage.size(entry.path)
    _check_manifest_size(size, what)
    start = max(0, size - HEAD_READ_SIZE)
    tail = storage.get_range(entry.path, start, size)
    if len(tail) < FOOTER_SIZE + 4 or tail[-4:] != MAGIC:
        raise CorruptManifestError(f"{what}: bad magic or truncated footer")
    (pos,) = struct.unpack_from("<Q", tail, len(tail) - FOOTER_SIZE)
    limit = size - FOOTER_SIZE
    if pos + 4 > limit:
        raise CorruptManifestError(f"{what}: manifest position {pos} is outside the file")
    if pos < start:
        tail = storage.get_range(entry.path, pos, start) + tail
        start = pos
    (length,) = _U32.unpack_from(tail, pos - start)
    if pos + 4 + length != limit:
        raise CorruptManifestError(
            f"{what}: manifest length {length} at offset {pos} does not end at the footer"
        )
    manifest = table_pb2.Manifest()
    try:
        manifest.ParseFromString(tail[pos - start + 4 : len(tail) - FOOTER_SIZE])
    except DecodeError as exc:
        raise CorruptManifestError(f"{what}: undecodable manifest protobuf: {exc}") from exc
    check_reader_flags(manifest)
    offset = inline_transaction_offset(manifest)
    if offset is None:
        return None, manifest
    if offset + 4 > pos:
        raise CorruptManifestError(f"{what}: inline transaction offset {offset} is outside")
    if offset + 4 <= len(head):
        (length,) = _U32.unpack_from(head, offset)
    else:
        (length,) = _U32.unpack(storage.get_range(entry.path, offset, offset + 4))
    end = offset + 4 + length
    if end > pos:
        raise CorruptManifestError(
            f"{what}: inline transaction at offset {offset} claims {length} bytes, past the "
            "manifest"
        )
    if end <= len(head):
        blob = head[offset + 4 : end]
    elif offset + 4 < len(head):
        blob = head[offset + 4 :] + storage.get_range(entry.path, len(head), end)
    else:
        blob = storage.get_range(entry.path, offset + 4, end)
    return decode_transaction(blob, what=f"{what} (inline transaction)"), manifest


def _transaction_file(
    storage: Storage, entry: VersionEntry, manifest: table_pb2.Manifest
) -> transaction_pb2.Transaction:
    name = manifest.transaction_file
    if not name:
        raise TransactionNotFoundError(
            f"{storage.uri}: version {entry.version} has no inline transaction "
            "and no transaction file"
        )
    try:
        blob = get_bounded(
            storage,
            transaction_path(name),
            _mf.MAX_TRANSACTION_BYTES,
            what=f"{storage.uri}/_transactions/{name}",
        )
    except ObjectNotFoundError as exc:
        raise TransactionNotFoundError(
            f"{storage.uri}: version {entry.version} names transaction file "
            f"{name}, which is missing"
        ) from exc
    return decode_transaction(blob, what=f"{storage.uri}/_transactions/{name}")
