"""Deletion files (``_deletions/``): which physical rows of a fragment are deleted.

A deletion file is cumulative: it holds every deleted row offset (0-based, within the
fragment) as of the version that wrote it, never a delta. Two encodings exist and readers
accept either at any size:

* ``.arrow`` (``DeletionFile.file_type`` ARROW_ARRAY = 0): an Arrow IPC *file* whose schema
  is exactly one non-null ``UInt32`` column named ``row_id``.
* ``.bin`` (BITMAP = 1): a 32-bit Roaring bitmap in the portable serialization.

Path: ``_deletions/{fragment_id}-{read_version}-{id}.{arrow|bin}``, ``id`` a random u64.
"""

from __future__ import annotations

import secrets
from typing import Literal

import pyarrow as pa  # type: ignore[import-untyped]
from pyroaring import BitMap

from txn_engine._proto import table_pb2
from txn_engine.errors import (
    CorruptDeletionFileError,
    InvalidOperationError,
    ObjectNotFoundError,
    UnsupportedFeatureError,
)
from txn_engine.storage.base import Storage

__all__ = [
    "ARROW_THRESHOLD",
    "DELETIONS_DIR",
    "DeletionEncoding",
    "decode_deletion_file",
    "deletion_file_path",
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

_ARROW = table_pb2.DeletionFile.ARROW_ARRAY
_BITMAP = table_pb2.DeletionFile.BITMAP
_SCHEMA = pa.schema([pa.field("row_id", pa.uint32(), nullable=False)])
_EXT = {_ARROW: "arrow", _BITMAP: "bin"}


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


def decode_deletion_file(data: bytes, file_type: int, *, what: str = "deletion file") -> BitMap:
    """Decode deletion-file bytes of the given ``DeletionFile.file_type``.

    Raises CorruptDeletionFileError for anything that is not a valid file of that type
    (bad IPC, wrong schema, nulls, bad Roaring bytes, unknown type).
    """
    if file_type == _BITMAP:
        try:
            return BitMap.deserialize(data)
        except Exception as exc:  # pyroaring raises ValueError/OverflowError variously
            raise CorruptDeletionFileError(f"{what}: invalid Roaring bitmap: {exc}") from exc
    if file_type != _ARROW:
        raise CorruptDeletionFileError(f"{what}: unknown deletion file type {file_type}")
    try:
        reader = pa.ipc.open_file(pa.BufferReader(data))
        table = reader.read_all()
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as exc:
        raise CorruptDeletionFileError(f"{what}: not an Arrow IPC file: {exc}") from exc
    schema = table.schema
    if len(schema) != 1 or schema[0].name != "row_id" or schema[0].type != pa.uint32():
        raise CorruptDeletionFileError(
            f"{what}: schema must be exactly one UInt32 column 'row_id', got {schema}"
        )
    column = table.column(0)
    if column.null_count:
        raise CorruptDeletionFileError(f"{what}: column 'row_id' contains nulls")
    result = BitMap()
    for chunk in column.chunks:
        result.update(chunk.to_numpy(zero_copy_only=False))
    return result


def read_deletion_vector(
    storage: Storage, fragment_id: int, deletion_file: table_pb2.DeletionFile
) -> BitMap:
    """Read and decode a fragment's deletion file: the set of deleted row offsets.

    Raises CorruptDeletionFileError (bad bytes, or the file is missing: a manifest that
    references an absent deletion file is corrupt).
    """
    path = deletion_file_path(fragment_id, deletion_file)
    try:
        data = storage.get(path)
    except ObjectNotFoundError as exc:
        raise CorruptDeletionFileError(
            f"{storage.uri}: fragment {fragment_id} references missing deletion file {path}"
        ) from exc
    return decode_deletion_file(data, deletion_file.file_type, what=f"{storage.uri}/{path}")


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
