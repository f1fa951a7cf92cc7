"""The little txn_engine needs to know about Lance *data* files: row counts of legacy files.

Manifests written by Lance before ~0.8 leave ``DataFragment.physical_rows`` at 0
("unknown"); readers then take the row count from the data file itself. A legacy (v0.1)
Lance file ends with ``u64 metadata_pos | u16 major | u16 minor | b"LANC"``; at
``metadata_pos`` a u32-length-prefixed ``Metadata`` protobuf whose packed field 2
``batch_offsets`` ends with the total row count. This module parses exactly that, with a
minimal wire-format reader (no generated message needed).
"""

from __future__ import annotations

import struct

from txn_engine.errors import DataFileError, ObjectNotFoundError
from txn_engine.storage.base import Storage

__all__ = ["DATA_DIR", "legacy_row_count", "parse_legacy_row_count"]

DATA_DIR = "data"
_FOOTER = struct.Struct("<QHH4s")
_TAIL = 64 * 1024


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise DataFileError("truncated varint in data file metadata")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _batch_offsets(message: bytes) -> list[int]:
    pos = 0
    offsets: list[int] = []
    while pos < len(message):
        key, pos = _varint(message, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(message, pos)
            if field == 2:
                offsets.append(value)
        elif wire == 2:
            length, pos = _varint(message, pos)
            end = pos + length
            if end > len(message):
                raise DataFileError("truncated field in data file metadata")
            if field == 2:
                inner = pos
                while inner < end:
                    value, inner = _varint(message, inner)
                    offsets.append(value)
            pos = end
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise DataFileError(f"unsupported wire type {wire} in data file metadata")
    return offsets


def parse_legacy_row_count(tail: bytes, file_size: int) -> int:
    """Row count from the last bytes of a legacy Lance file (``tail`` ends at EOF).

    Raises DataFileError when the bytes are not a legacy Lance file footer + metadata.
    """
    if len(tail) < _FOOTER.size:
        raise DataFileError("data file too short for a Lance footer")
    pos, major, _minor, magic = _FOOTER.unpack_from(tail, len(tail) - _FOOTER.size)
    if magic != b"LANC":
        raise DataFileError(f"data file has bad magic {magic!r}")
    if major != 0:
        raise DataFileError(
            f"data file is Lance file format {major}.x, which records no batch offsets"
        )
    start = file_size - len(tail)
    rel = pos - start
    if rel < 0 or rel + 4 > len(tail) - _FOOTER.size:
        raise DataFileError(f"data file metadata position {pos} outside the file tail")
    (length,) = struct.unpack_from("<I", tail, rel)
    body = tail[rel + 4 : rel + 4 + length]
    if len(body) != length:
        raise DataFileError("data file metadata is truncated")
    offsets = _batch_offsets(body)
    return offsets[-1] if offsets else 0


def legacy_row_count(storage: Storage, path: str) -> int:
    """Row count of the legacy data file at ``data/{path}``.

    Raises DataFileError when the file is missing or is not a legacy Lance file.
    """
    full = f"{DATA_DIR}/{path}"
    try:
        size = storage.size(full)
        tail = storage.get_range(full, max(0, size - _TAIL), size)
    except ObjectNotFoundError as exc:
        raise DataFileError(
            f"{storage.uri}: data file {full} is missing; its row count is not recorded "
            "in the manifest (physical_rows = 0), so the fragment cannot be counted"
        ) from exc
    try:
        return parse_legacy_row_count(tail, size)
    except DataFileError as exc:
        raise DataFileError(f"{storage.uri}/{full}: {exc}") from exc
