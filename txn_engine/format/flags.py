"""Lance feature flags (Manifest fields 9 and 10).

A reader must refuse a manifest whose ``reader_feature_flags`` has a bit it does not know;
a writer must refuse to commit on top of one whose ``writer_feature_flags`` has such a bit.
Flags are recomputed from content on every commit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

from txn_engine._proto import table_pb2
from txn_engine.errors import UnsupportedFeatureError

__all__ = [
    "FLAG_BASE_PATHS",
    "FLAG_COVERING_INDEX",
    "FLAG_DATA_OVERLAYS",
    "FLAG_DELETION_FILES",
    "FLAG_DISABLE_TRANSACTION_FILE",
    "FLAG_STABLE_ROW_IDS",
    "FLAG_TABLE_CONFIG",
    "FLAG_USE_V2_FORMAT_DEPRECATED",
    "FLAG_NAMES",
    "KNOWN_READER_FLAGS",
    "KNOWN_WRITER_FLAGS",
    "check_reader_flags",
    "check_writer_flags",
    "compute_feature_flags",
    "describe_flags",
]

FLAG_DELETION_FILES = 1
FLAG_STABLE_ROW_IDS = 2
FLAG_USE_V2_FORMAT_DEPRECATED = 4
FLAG_TABLE_CONFIG = 8
FLAG_BASE_PATHS = 16
FLAG_DISABLE_TRANSACTION_FILE = 32
#: pylance 14: data overlay files (DataFragment.overlays). pylance 14.0.2 itself refuses to
#: read it, and so does txn_engine (not in the known masks).
FLAG_DATA_OVERLAYS = 64
#: pylance 14: an index with covering fields (IndexMetadata.covering_fields).
FLAG_COVERING_INDEX = 128

#: Lance's name of each feature flag bit.
FLAG_NAMES: Mapping[int, str] = MappingProxyType(
    {
        FLAG_DELETION_FILES: "deletion_files",
        FLAG_STABLE_ROW_IDS: "stable_row_ids",
        FLAG_USE_V2_FORMAT_DEPRECATED: "use_v2_format_deprecated",
        FLAG_TABLE_CONFIG: "table_config",
        FLAG_BASE_PATHS: "base_paths",
        FLAG_DISABLE_TRANSACTION_FILE: "disable_transaction_file",
        FLAG_DATA_OVERLAYS: "data_overlays",
        FLAG_COVERING_INDEX: "covering_index",
    }
)

#: Bits this library understands: 1..32 and 128 (covering indices, carried through
#: untouched). 64 (data overlays) and every bit above 128 are refused.
KNOWN_READER_FLAGS = 63 | FLAG_COVERING_INDEX
KNOWN_WRITER_FLAGS = 63 | FLAG_COVERING_INDEX


def describe_flags(value: int) -> list[str]:
    """Names of the bits set in ``value`` (``"unknown(64)"`` for bits this library lacks)."""
    names = []
    bit = 1
    while bit <= value:
        if value & bit:
            names.append(FLAG_NAMES.get(bit, f"unknown({bit})"))
        bit <<= 1
    return names


def _lowest_unknown(value: int, known: int) -> int:
    unknown = value & ~known
    return unknown & -unknown


def check_reader_flags(manifest: table_pb2.Manifest) -> None:
    """Raise UnsupportedFeatureError if the manifest needs a reader feature we lack."""
    bit = _lowest_unknown(manifest.reader_feature_flags, KNOWN_READER_FLAGS)
    if bit:
        raise UnsupportedFeatureError(
            f"version {manifest.version} uses reader feature flag {bit} "
            f"(reader_feature_flags={manifest.reader_feature_flags}), which this version of "
            "txn_engine does not understand; it cannot be read safely",
            flag=bit,
            kind="reader",
        )


def check_writer_flags(manifest: table_pb2.Manifest) -> None:
    """Raise UnsupportedFeatureError if committing on top of ``manifest`` needs a writer
    feature we lack (writing could corrupt the dataset)."""
    bit = _lowest_unknown(manifest.writer_feature_flags, KNOWN_WRITER_FLAGS)
    if bit:
        raise UnsupportedFeatureError(
            f"version {manifest.version} uses writer feature flag {bit} "
            f"(writer_feature_flags={manifest.writer_feature_flags}), which this version of "
            "txn_engine does not understand; refusing to commit on top of it",
            flag=bit,
            kind="writer",
        )


def compute_feature_flags(
    manifest: table_pb2.Manifest,
    *,
    stable_row_ids: bool,
    inline_transaction_only: bool = False,
    indices: Iterable[table_pb2.IndexMetadata] = (),
    deletion_files: bool | None = None,
) -> tuple[int, int]:
    """Return ``(reader_flags, writer_flags)`` implied by the manifest's content.

    Deletion files -> 1, stable row ids -> 2, non-empty config -> 8 (writer only), base
    paths -> 16, no transaction file -> 32 (writer only). ``deletion_files``: whether some
    fragment has a deletion file, when the caller knows (None: the fragments are scanned
    until the first one is found, which on a table without deletions is every fragment).
    """
    reader = 0
    writer = 0
    if deletion_files is None:
        deletion_files = any(frag.HasField("deletion_file") for frag in manifest.fragments)
    if deletion_files:
        reader |= FLAG_DELETION_FILES
        writer |= FLAG_DELETION_FILES
    if stable_row_ids:
        reader |= FLAG_STABLE_ROW_IDS
        writer |= FLAG_STABLE_ROW_IDS
    if len(manifest.config):
        writer |= FLAG_TABLE_CONFIG
    if len(manifest.base_paths):
        reader |= FLAG_BASE_PATHS
        writer |= FLAG_BASE_PATHS
    if inline_transaction_only:
        writer |= FLAG_DISABLE_TRANSACTION_FILE
    if any(len(index.covering_fields) for index in indices):
        reader |= FLAG_COVERING_INDEX
        writer |= FLAG_COVERING_INDEX
    return reader, writer
