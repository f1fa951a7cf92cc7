"""Deletion files (``_deletions/``): which physical rows of a fragment are deleted.

A deletion file is cumulative: it holds every deleted row offset (0-based, within the
fragment) as of the version that wrote it, never a delta. Two encodings exist and readers
accept either at any size:

* ``.arrow`` (``DeletionFile.file_type`` ARROW_ARRAY = 0): an Arrow IPC *file* whose schema
  is exactly one non-null ``UInt32`` column named ``row_id``.
* ``.bin`` (BITMAP = 1): a 32-bit Roaring bitmap in the portable serialization.

Path: ``_deletions/{fragment_id}-{read_version}-{id}.{arrow|bin}``, ``id`` a random u64.

Bounds (hostile files): a deletion file lists each deleted offset of its fragment once, so
it can never hold more entries than the fragment has physical rows, nor an offset at or past
``physical_rows``. Before anything is decompressed or expanded, the decoder reads what the
file *declares* -- the row count of every Arrow record batch and the uncompressed size of
each of its (zstd / lz4) buffers, or the cardinality of every Roaring container -- and
refuses, with :class:`~txn_engine.errors.LimitExceededError`, a file declaring more entries
than ``physical_rows`` (when the caller knows it), more than 2^32 (offsets are u32), or an
Arrow file that would expand to more than :data:`MAX_ARROW_EXPANSION` times its size (and
more than :data:`ARROW_EXPANSION_FLOOR` bytes: Lance writes ``.arrow`` only below 5 000
rows). Files larger than :func:`deletion_file_size_limit` are not read at all. Offsets at
or past ``physical_rows`` raise :class:`~txn_engine.errors.CorruptDeletionFileError`
(pylance 14 counts such a file's entries in ``count_rows`` but fails every scan of the
fragment, and wraps below zero when ``num_deleted_rows`` exceeds ``physical_rows``).
"""

from __future__ import annotations

import secrets
import struct
import sys
from array import array
from collections.abc import Mapping
from types import MappingProxyType
from typing import Literal

import pyarrow as pa  # type: ignore[import-untyped]
from pyroaring import BitMap

from txn_engine._proto import table_pb2
from txn_engine.errors import (
    CorruptDeletionFileError,
    InvalidOperationError,
    LimitExceededError,
    ObjectNotFoundError,
    UnsupportedFeatureError,
)
from txn_engine.storage.base import Storage, get_bounded

__all__ = [
    "ARROW_EXPANSION_FLOOR",
    "ARROW_THRESHOLD",
    "DELETIONS_DIR",
    "MAX_ARROW_EXPANSION",
    "MAX_DELETION_FILE_BYTES",
    "MAX_DELETION_ROWS",
    "DeletionEncoding",
    "declared_deletion_count",
    "decode_deletion_file",
    "deletion_file_path",
    "deletion_file_size_limit",
    "encode_arrow_deletions",
    "encode_bitmap_deletions",
    "read_deletion_vector",
    "write_deletion_vector",
]

DELETIONS_DIR = "_deletions"
#: ``"auto"`` writes ``.arrow`` below this many deleted rows and ``.bin`` from it on
#: (Lance switches its in-memory deletion vector to a bitmap past 5 000 entries).
ARROW_THRESHOLD = 5000
DeletionEncoding = Literal["arrow", "bitmap", "auto"]
#: Offsets are u32: no deletion file can list more entries than this.
MAX_DELETION_ROWS = 1 << 32
#: Largest deletion file read when the fragment's row count is unknown (bytes).
MAX_DELETION_FILE_BYTES = 1 << 30
#: An ``.arrow`` file may declare up to this many times its own size in uncompressed bytes...
MAX_ARROW_EXPANSION = 16
#: ...or this many bytes (1 M rows), whichever is larger.
ARROW_EXPANSION_FLOOR = 4 << 20

_ARROW = table_pb2.DeletionFile.ARROW_ARRAY
_BITMAP = table_pb2.DeletionFile.BITMAP
_SCHEMA = pa.schema([pa.field("row_id", pa.uint32(), nullable=False)])
_EXT: Mapping[int, str] = MappingProxyType({_ARROW: "arrow", _BITMAP: "bin"})


def deletion_file_path(fragment_id: int, deletion_file: table_pb2.DeletionFile) -> str:
    """Path (relative to the dataset root) of a fragment's deletion file.

    Raises CorruptDeletionFileError for an unknown ``file_type`` and UnsupportedFeatureError
    for a file stored under another base path (``base_id`` set; not supported here).
    """
    ext = _EXT.get(deletion_file.file_type)
    if ext is None:
        raise CorruptDeletionFileError(
            f"fragment {fragment_id}: unknown deletion file type {deletion_file.file_type}"
        )
    if deletion_file.HasField("base_id"):
        raise UnsupportedFeatureError(
            f"fragment {fragment_id}: deletion file under base path {deletion_file.base_id}; "
            "base paths are not supported by this version of txn_engine",
            flag=16,
            kind="reader",
        )
    return f"{DELETIONS_DIR}/{fragment_id}-{deletion_file.read_version}-{deletion_file.id}.{ext}"


def encode_arrow_deletions(offsets: BitMap) -> bytes:
    """Serialize offsets as an ``.arrow`` deletion file (uncompressed IPC file, one batch)."""
    array = pa.array(offsets.to_array(), type=pa.uint32())
    batch = pa.record_batch([array], schema=_SCHEMA)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, _SCHEMA) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


def encode_bitmap_deletions(offsets: BitMap) -> bytes:
    """Serialize offsets as a ``.bin`` deletion file (portable 32-bit Roaring)."""
    return bytes(offsets.serialize())


def deletion_file_size_limit(physical_rows: int | None) -> int:
    """Largest deletion file (bytes) that can be valid for a fragment of ``physical_rows``
    rows (``None``: unknown): 16 bytes per row plus 64 KiB covers either encoding's worst
    case (uncompressed Arrow is 4 bytes per row plus framing; Roaring at most 8 bytes of
    header per container plus 2 per value), never more than :data:`MAX_DELETION_FILE_BYTES`.
    """
    if physical_rows is None:
        return MAX_DELETION_FILE_BYTES
    return min(MAX_DELETION_FILE_BYTES, (64 << 10) + 16 * max(0, physical_rows))


# ---- what a file declares, read without decompressing --------------------------------------

_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_U16 = struct.Struct("<H")
_ARROW_MAGIC = b"ARROW1"
_RECORD_BATCH = 3  # MessageHeader.RecordBatch


class _FlatBuffer:
    """Just enough of the FlatBuffers wire format to read Arrow IPC metadata tables, with
    every offset bounds-checked (struct.error / _Bad on anything out of range)."""

    class Bad(Exception):
        pass

    def __init__(self, buf: bytes) -> None:
        self.buf = buf

    def _check(self, pos: int, n: int) -> None:
        if pos < 0 or pos + n > len(self.buf):
            raise self.Bad(f"offset {pos} (+{n}) outside {len(self.buf)} bytes")

    def root(self) -> int:
        self._check(0, 4)
        return int(_U32.unpack_from(self.buf, 0)[0])

    def field(self, table: int, index: int) -> int | None:
        """Absolute position of field ``index`` of the table at ``table`` (None: absent)."""
        self._check(table, 4)
        vtable = table - _I32.unpack_from(self.buf, table)[0]
        self._check(vtable, 4)
        vsize = _U16.unpack_from(self.buf, vtable)[0]
        slot = 4 + 2 * index
        if slot + 2 > vsize:
            return None
        self._check(vtable + slot, 2)
        rel = _U16.unpack_from(self.buf, vtable + slot)[0]
        return None if rel == 0 else table + rel

    def i64(self, pos: int | None, default: int = 0) -> int:
        if pos is None:
            return default
        self._check(pos, 8)
        return int(_I64.unpack_from(self.buf, pos)[0])

    def u8(self, pos: int | None, default: int = 0) -> int:
        if pos is None:
            return default
        self._check(pos, 1)
        return self.buf[pos]

    def ref(self, pos: int) -> int:
        """Follow a uoffset (to a table, vector or union value)."""
        self._check(pos, 4)
        return pos + int(_U32.unpack_from(self.buf, pos)[0])

    def vector(self, pos: int | None, elem_size: int) -> list[int]:
        """Positions of the elements of the vector of structs the field at ``pos`` refers to."""
        if pos is None:
            return []
        start = self.ref(pos)
        self._check(start, 4)
        n = _U32.unpack_from(self.buf, start)[0]
        self._check(start + 4, n * elem_size)
        return [start + 4 + i * elem_size for i in range(n)]


def _arrow_declared_rows(data: bytes, what: str, max_rows: int) -> int:
    """Total rows the record batches of an Arrow IPC file declare, after checking that no
    (compressed) buffer declares an uncompressed size beyond what that many u32 values need.

    Reads only the footer and each batch's metadata: nothing is decompressed.
    """
    if len(data) < 2 * len(_ARROW_MAGIC) + 4 or not (
        data.startswith(_ARROW_MAGIC) and data.endswith(_ARROW_MAGIC)
    ):
        raise CorruptDeletionFileError(f"{what}: not an Arrow IPC file (no ARROW1 magic)")
    try:
        footer_len = _I32.unpack_from(data, len(data) - 10)[0]
        footer_start = len(data) - 10 - footer_len
        if footer_len <= 0 or footer_start < 8:
            raise _FlatBuffer.Bad(f"footer length {footer_len}")
        footer = _FlatBuffer(data[footer_start : len(data) - 10])
        root = footer.root()
        if footer.vector(footer.field(root, 2), 24):
            raise _FlatBuffer.Bad("dictionary batches in a deletion file")
        total = 0
        for block in footer.vector(footer.field(root, 3), 24):
            offset = footer.i64(block)
            meta_len = _I32.unpack_from(footer.buf, block + 8)[0]
            body_len = footer.i64(block + 16)
            if offset < 8 or meta_len < 8 or body_len < 0:
                raise _FlatBuffer.Bad(f"record batch block at {offset}")
            if offset + meta_len + body_len > footer_start:
                raise _FlatBuffer.Bad(f"record batch at {offset} runs past the footer")
            pos = offset
            if _U32.unpack_from(data, pos)[0] == 0xFFFFFFFF:  # continuation marker
                pos += 4
            fb_len = _I32.unpack_from(data, pos)[0]
            if fb_len <= 0 or pos + 4 + fb_len > offset + meta_len:
                raise _FlatBuffer.Bad(f"message metadata at {offset}")
            msg = _FlatBuffer(data[pos + 4 : pos + 4 + fb_len])
            mroot = msg.root()
            if msg.u8(msg.field(mroot, 1)) != _RECORD_BATCH:
                raise _FlatBuffer.Bad(f"block at {offset} is not a record batch")
            header_pos = msg.field(mroot, 2)
            if header_pos is None:
                raise _FlatBuffer.Bad(f"record batch at {offset} has no header")
            batch = msg.ref(header_pos)
            rows = msg.i64(msg.field(batch, 0))
            if rows < 0:
                raise _FlatBuffer.Bad(f"negative row count {rows}")
            total += rows
            if total > max_rows:
                raise LimitExceededError(
                    f"{what}: declares at least {total} deleted rows, more than the "
                    f"{max_rows} it can hold",
                    limit="deleted_rows",
                )
            nodes = msg.vector(msg.field(batch, 1), 16)
            if any(msg.i64(n) != rows for n in nodes):
                raise _FlatBuffer.Bad(f"record batch at {offset}: column length != {rows}")
            if msg.field(batch, 3) is None:  # uncompressed: buffers are their own size
                continue
            body = offset + meta_len
            bound = 4 * rows + 64
            for buf in msg.vector(msg.field(batch, 2), 16):
                b_off, b_len = msg.i64(buf), msg.i64(buf + 8)
                if b_off < 0 or b_len < 0 or b_off + b_len > body_len:
                    raise _FlatBuffer.Bad(f"buffer [{b_off}, +{b_len}) outside the body")
                if b_len < 8:
                    continue
                declared = _I64.unpack_from(data, body + b_off)[0]
                if declared > bound:
                    raise LimitExceededError(
                        f"{what}: a compressed buffer declares {declared} bytes uncompressed "
                        f"for {rows} rows (at most {bound})",
                        limit="deleted_rows",
                    )
    except (struct.error, _FlatBuffer.Bad) as exc:
        raise CorruptDeletionFileError(f"{what}: malformed Arrow IPC file: {exc}") from exc
    return total


_ROARING_NO_RUNS = 12346
_ROARING_RUNS = 12347


def _roaring_declared_cardinality(data: bytes, what: str) -> int:
    """Sum of the container cardinalities a portable Roaring bitmap declares (header only)."""
    try:
        (cookie,) = _U32.unpack_from(data, 0)
        if cookie & 0xFFFF == _ROARING_RUNS:
            n = (cookie >> 16) + 1
            pos = 4 + (n + 7) // 8
        elif cookie == _ROARING_NO_RUNS:
            (n,) = _U32.unpack_from(data, 4)
            pos = 8
        else:
            raise CorruptDeletionFileError(f"{what}: invalid Roaring bitmap (cookie {cookie})")
        if n > 1 << 16:
            raise CorruptDeletionFileError(
                f"{what}: invalid Roaring bitmap: {n} containers (at most 65536)"
            )
        if pos + 4 * n > len(data):
            raise CorruptDeletionFileError(
                f"{what}: invalid Roaring bitmap: header of {n} containers is truncated"
            )
        total = 0
        previous = -1
        for i in range(n):
            key, card_minus_1 = struct.unpack_from("<HH", data, pos + 4 * i)
            if key <= previous:
                raise CorruptDeletionFileError(
                    f"{what}: invalid Roaring bitmap: container keys not ascending"
                )
            previous = key
            total += card_minus_1 + 1
    except struct.error as exc:
        raise CorruptDeletionFileError(f"{what}: invalid Roaring bitmap: {exc}") from exc
    return total


def _row_bound(physical_rows: int | None) -> int:
    if physical_rows is None:
        return MAX_DELETION_ROWS
    return min(MAX_DELETION_ROWS, max(0, physical_rows))


def declared_deletion_count(
    data: bytes,
    file_type: int,
    *,
    physical_rows: int | None = None,
    what: str = "deletion file",
) -> int:
    """The number of entries a deletion file declares, read from its metadata only (Arrow
    footer and batch headers, Roaring container headers): nothing is decompressed.

    Raises LimitExceededError when that is more than ``physical_rows`` (if given), more
    than 2^32, or (Arrow) more than the expansion bound of the module docstring;
    CorruptDeletionFileError when the metadata is malformed.
    """
    limit = _row_bound(physical_rows)
    if file_type == _BITMAP:
        declared = _roaring_declared_cardinality(data, what)
    elif file_type == _ARROW:
        declared = _arrow_declared_rows(data, what, limit)
        expansion = max(ARROW_EXPANSION_FLOOR, MAX_ARROW_EXPANSION * len(data))
        if 4 * declared > expansion:
            raise LimitExceededError(
                f"{what}: {len(data)} bytes declare {declared} rows ({4 * declared} bytes "
                f"uncompressed), beyond the {expansion}-byte expansion bound",
                limit="MAX_ARROW_EXPANSION",
            )
    else:
        raise CorruptDeletionFileError(f"{what}: unknown deletion file type {file_type}")
    if declared > limit:
        raise LimitExceededError(
            f"{what}: declares {declared} deleted rows but the fragment has only {limit}",
            limit="deleted_rows",
        )
    return declared


def decode_deletion_file(
    data: bytes,
    file_type: int,
    *,
    what: str = "deletion file",
    physical_rows: int | None = None,
) -> BitMap:
    """Decode deletion-file bytes of the given ``DeletionFile.file_type``.

    Pass the fragment's ``physical_rows`` whenever it is known: the declared entry count is
    then checked against it before anything is decompressed (:func:`declared_deletion_count`),
    and an offset ``>= physical_rows`` is refused after decoding.

    Raises CorruptDeletionFileError for anything that is not a valid file of that type
    (bad IPC, wrong schema, nulls, bad Roaring bytes, unknown type, out-of-range offsets)
    and LimitExceededError for a file declaring more entries than it can hold.
    """
    declared_deletion_count(data, file_type, physical_rows=physical_rows, what=what)
    result = _decode(data, file_type, what)
    limit = _row_bound(physical_rows)
    if len(result) > limit:  # a Roaring run container may hold more than its header says
        raise LimitExceededError(
            f"{what}: holds {len(result)} deleted rows but the fragment has only {limit}",
            limit="deleted_rows",
        )
    if physical_rows is not None and result and result.max() >= physical_rows:
        raise CorruptDeletionFileError(
            f"{what}: deletes offset {result.max()}, past the fragment's {physical_rows} rows"
        )
    return result


def _check_arrow_schema(schema: pa.Schema, what: str) -> None:
    """Exactly one UInt32 column ``row_id``, else CorruptDeletionFileError. A hostile file
    may name its columns in bytes that are not UTF-8 (pyarrow raises UnicodeDecodeError
    reading the name): corrupt too, and the name is not echoed."""
    try:
        names = schema.names
    except UnicodeDecodeError as exc:
        raise CorruptDeletionFileError(
            f"{what}: a column name of the Arrow schema is not UTF-8 ({len(schema)} columns)"
        ) from exc
    if names != ["row_id"] or schema.field(0).type != pa.uint32():
        got = ", ".join(f"{field.name!r}: {field.type}" for field in schema)
        raise CorruptDeletionFileError(
            f"{what}: schema must be exactly one UInt32 column 'row_id', got ({got})"
        )


def _decode(data: bytes, file_type: int, what: str) -> BitMap:
    if file_type == _BITMAP:
        try:
            return BitMap.deserialize(data)
        except Exception as exc:  # pyroaring raises ValueError/OverflowError variously
            raise CorruptDeletionFileError(f"{what}: invalid Roaring bitmap: {exc}") from exc
    try:
        reader = pa.ipc.open_file(pa.BufferReader(data))
        _check_arrow_schema(reader.schema, what)
        table = reader.read_all()
        table.validate()  # buffers as long as their arrays say (Arrow does not check on read)
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as exc:
        raise CorruptDeletionFileError(f"{what}: not a valid Arrow IPC file: {exc}") from exc
    column = table.column(0)
    if column.null_count:
        raise CorruptDeletionFileError(f"{what}: column 'row_id' contains nulls")
    result = BitMap()
    for chunk in column.chunks:
        # the chunk's data buffer as array('I') (no numpy: the core does not depend on it);
        # pyroaring adds a typed buffer in C, item by item it would be slow
        values = array("I")
        buf = chunk.buffers()[1]  # long enough: the table was validated
        start = chunk.offset * 4
        if buf is not None and len(chunk):
            values.frombytes(memoryview(buf)[start : start + 4 * len(chunk)])
        if sys.byteorder == "big":  # Arrow buffers are little-endian
            values.byteswap()
        result |= BitMap(values)
    return result


def read_deletion_vector(
    storage: Storage,
    fragment_id: int,
    deletion_file: table_pb2.DeletionFile,
    *,
    physical_rows: int | None = None,
) -> BitMap:
    """Read and decode a fragment's deletion file: the set of deleted row offsets.

    Pass the fragment's ``physical_rows`` when known (see :func:`decode_deletion_file`):
    the file's size, declared count and offsets are then bounded by it. Raises
    CorruptDeletionFileError (bad bytes, out-of-range offsets, or the file is missing: a
    manifest that references an absent deletion file is corrupt), LimitExceededError (a
    file larger or declaring more rows than the fragment allows), StorageError.
    """
    path = deletion_file_path(fragment_id, deletion_file)
    what = f"{storage.uri}/{path}"
    try:
        data = get_bounded(storage, path, deletion_file_size_limit(physical_rows), what=what)
    except ObjectNotFoundError as exc:
        raise CorruptDeletionFileError(
            f"{storage.uri}: fragment {fragment_id} references missing deletion file {path}"
        ) from exc
    return decode_deletion_file(
        data, deletion_file.file_type, what=what, physical_rows=physical_rows
    )


def write_deletion_vector(
    storage: Storage,
    fragment_id: int,
    read_version: int,
    offsets: BitMap,
    *,
    encoding: DeletionEncoding = "auto",
) -> table_pb2.DeletionFile:
    """Write a cumulative deletion file for a fragment and return its ``DeletionFile`` pb.

    ``offsets`` are all deleted row offsets of the fragment (not just new ones).
    ``encoding="auto"`` picks ``.arrow`` below :data:`ARROW_THRESHOLD` entries, else
    ``.bin``. The id is a fresh random u64, so the path never collides with another
    writer's. Put the returned pb into the fragment's ``deletion_file``.
    """
    if not offsets:
        raise InvalidOperationError(
            f"fragment {fragment_id}: refusing to write an empty deletion file "
            "(clear the fragment's deletion_file instead)"
        )
    if encoding == "auto":
        encoding = "arrow" if len(offsets) < ARROW_THRESHOLD else "bitmap"
    if encoding == "arrow":
        file_type, data = _ARROW, encode_arrow_deletions(offsets)
    elif encoding == "bitmap":
        file_type, data = _BITMAP, encode_bitmap_deletions(offsets)
    else:
        raise InvalidOperationError(f"unknown deletion file encoding {encoding!r}")
    pb = table_pb2.DeletionFile(
        file_type=file_type,
        read_version=read_version,
        id=secrets.randbits(64),
        num_deleted_rows=len(offsets),
    )
    storage.put(deletion_file_path(fragment_id, pb), data)
    return pb
