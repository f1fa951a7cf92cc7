"""Encoding and strict decoding of manifest files (``_versions/*.manifest``).

Layout written (what pylance 14.0.2 writes)::

    [u32 len | IndexSection]      only when there are indices; Manifest.index_section = 0
    [u32 len | Transaction]       the inline transaction; Manifest.transaction_section (23)
    [u32 len | Manifest]
    [u64 manifest_pos | u16 0 | u16 2 | b"LANC"]   16-byte footer

Offsets are positions of the length prefixes. The decoder validates every offset and length
and raises :class:`~txn_engine.errors.CorruptManifestError` instead of misreading.

Size bounds (hostile tables cannot make a reader allocate more): each section's length is a
u32, so the format itself allows at most three 4 GiB sections; txn_engine reads at most
:data:`MAX_MANIFEST_BYTES` per manifest file and :data:`MAX_TRANSACTION_BYTES` per ``.txn``
file and refuses larger ones with :class:`~txn_engine.errors.LimitExceededError` before
reading them. pylance 14 writes about 82 bytes per fragment, so the default 1 GiB is a
manifest of some 13 million fragments; raise the module attribute if you have more.
"""

from __future__ import annotations

import struct
from typing import Literal

import attrs
from google.protobuf.message import DecodeError

from txn_engine._proto import table_pb2, transaction_pb2
from txn_engine.errors import CorruptManifestError
from txn_engine.format.flags import check_reader_flags

__all__ = [
    "FOOTER_SIZE",
    "MAGIC",
    "MAX_MANIFEST_BYTES",
    "MAX_TRANSACTION_BYTES",
    "ManifestFile",
    "decode_manifest_file",
    "decode_transaction",
    "encode_manifest_file",
    "inline_transaction_offset",
    "read_footer",
]

MAGIC = b"LANC"
FOOTER_SIZE = 16
#: Largest manifest file txn_engine reads (bytes); larger ones raise LimitExceededError.
MAX_MANIFEST_BYTES = 1 << 30
#: Largest ``_transactions/*.txn`` file txn_engine reads (bytes).
MAX_TRANSACTION_BYTES = 1 << 30
_FOOTER = struct.Struct("<QHH4s")
_U32 = struct.Struct("<I")
_SECTION_FIELDS: tuple[
    Literal["index_section", "transaction_section", "transaction_section_deprecated"], ...
] = ("index_section", "transaction_section", "transaction_section_deprecated")
_MAJOR, _MINOR = 0, 2


@attrs.frozen
class ManifestFile:
    """A decoded manifest file: the manifest, its indices and its inline transaction."""

    manifest: table_pb2.Manifest
    indices: tuple[table_pb2.IndexMetadata, ...]
    transaction: transaction_pb2.Transaction | None
    size: int


def inline_transaction_offset(manifest: table_pb2.Manifest) -> int | None:
    """Offset of the inline transaction: field 23 (pylance 14), else field 21 (older)."""
    if manifest.HasField("transaction_section"):
        return manifest.transaction_section
    if manifest.HasField("transaction_section_deprecated"):
        return manifest.transaction_section_deprecated
    return None


def encode_manifest_file(
    manifest: table_pb2.Manifest,
    indices: tuple[table_pb2.IndexMetadata, ...] | list[table_pb2.IndexMetadata] = (),
    transaction: transaction_pb2.Transaction | bytes | None = None,
    *,
    owned: bool = False,
) -> bytes:
    """Serialize a manifest file. The caller's ``manifest`` is left as it was.

    Section offsets are set to what is written here; offsets carried over from an older
    manifest (fields 6, 21, 23) are cleared first, since a stale offset makes readers fail.
    Serialization is deterministic (map entries sorted), so equal inputs give equal bytes,
    and a manifest pylance wrote re-encodes to pylance's bytes.

    ``owned=True``: no other thread reads ``manifest`` during the call (say, one just
    built), so the offsets are set on it for the serialization and cleared after instead
    of on a copy (a copy of 10,000 fragments is about 0.7 ms).
    """
    stale = any(manifest.HasField(name) for name in _SECTION_FIELDS)
    if owned and not stale:
        m = manifest
    else:
        m = table_pb2.Manifest()
        m.CopyFrom(manifest)
        for name in _SECTION_FIELDS:
            m.ClearField(name)
    parts: list[bytes] = []
    offset = 0
    try:
        if indices:
            blob = table_pb2.IndexSection(indices=list(indices)).SerializeToString(
                deterministic=True
            )
            m.index_section = offset
            parts.append(_U32.pack(len(blob)))
            parts.append(blob)
            offset += 4 + len(blob)
        if transaction is not None:
            blob = (
                transaction
                if isinstance(transaction, bytes)
                else transaction.SerializeToString(deterministic=True)
            )
            m.transaction_section = offset
            parts.append(_U32.pack(len(blob)))
            parts.append(blob)
            offset += 4 + len(blob)
        body = m.SerializeToString(deterministic=True)
    finally:
        if m is manifest:
            for name in _SECTION_FIELDS:
                m.ClearField(name)
    if len(body) >= 1 << 32:
        raise CorruptManifestError("manifest too large to encode (>= 4 GiB)")
    parts.append(_U32.pack(len(body)))
    parts.append(body)
    parts.append(_FOOTER.pack(offset, _MAJOR, _MINOR, MAGIC))
    return b"".join(parts)


def read_footer(data: bytes, *, what: str = "manifest") -> int:
    """Validate the footer of a whole manifest file and return the manifest position."""
    if len(data) < FOOTER_SIZE + 4:
        raise CorruptManifestError(
            f"{what}: file is {len(data)} bytes, too short for a Lance manifest (truncated?)"
        )
    pos, _major, _minor, magic = _FOOTER.unpack_from(data, len(data) - FOOTER_SIZE)
    if magic != MAGIC:
        raise CorruptManifestError(
            f"{what}: bad magic {magic!r} (expected b'LANC'); truncated or not a manifest"
        )
    limit = len(data) - FOOTER_SIZE
    if pos + 4 > limit:
        raise CorruptManifestError(
            f"{what}: manifest position {pos} is outside the file ({len(data)} bytes)"
        )
    (length,) = _U32.unpack_from(data, pos)
    if pos + 4 + length != limit:
        raise CorruptManifestError(
            f"{what}: manifest length {length} at offset {pos} does not end at the footer "
            f"(file {len(data)} bytes)"
        )
    return int(pos)


def _section(data: bytes, offset: int, limit: int, what: str, name: str) -> bytes:
    if offset + 4 > limit:
        raise CorruptManifestError(f"{what}: {name} offset {offset} is outside the file")
    (length,) = _U32.unpack_from(data, offset)
    end = offset + 4 + length
    if end > limit:
        raise CorruptManifestError(
            f"{what}: {name} at offset {offset} claims {length} bytes, past the manifest"
        )
    return data[offset + 4 : end]


def decode_transaction(blob: bytes, *, what: str = "transaction") -> transaction_pb2.Transaction:
    """Parse raw Transaction protobuf bytes (a ``.txn`` file or an inline section)."""
    txn = transaction_pb2.Transaction()
    try:
        txn.ParseFromString(blob)
    except DecodeError as exc:
        raise CorruptManifestError(f"{what}: undecodable transaction protobuf: {exc}") from exc
    return txn


def decode_manifest_file(
    data: bytes, *, what: str = "manifest", check_flags: bool = True
) -> ManifestFile:
    """Decode a whole manifest file with strict validation.

    Raises CorruptManifestError for truncation, bad magic, out-of-range offsets or lengths
    and undecodable protobuf; UnsupportedFeatureError for unknown reader flags (unless
    ``check_flags`` is false).
    """
    pos = read_footer(data, what=what)
    manifest = table_pb2.Manifest()
    try:
        manifest.ParseFromString(data[pos + 4 : len(data) - FOOTER_SIZE])
    except DecodeError as exc:
        raise CorruptManifestError(f"{what}: undecodable manifest protobuf: {exc}") from exc
    if check_flags:
        check_reader_flags(manifest)
    indices: tuple[table_pb2.IndexMetadata, ...] = ()
    if manifest.HasField("index_section"):
        blob = _section(data, manifest.index_section, pos, what, "index section")
        section = table_pb2.IndexSection()
        try:
            section.ParseFromString(blob)
        except DecodeError as exc:
            raise CorruptManifestError(f"{what}: undecodable index section: {exc}") from exc
        indices = tuple(section.indices)
    transaction = None
    txn_offset = inline_transaction_offset(manifest)
    if txn_offset is not None:
        blob = _section(data, txn_offset, pos, what, "inline transaction")
        transaction = decode_transaction(blob, what=f"{what} (inline transaction)")
    return ManifestFile(manifest=manifest, indices=indices, transaction=transaction, size=len(data))
