"""Manifest and transaction file names, and listing the versions of a dataset.

* V1: ``_versions/{version}.manifest``.
* V2: ``_versions/{u64::MAX - version:020d}.manifest`` (newest sorts first); pylance 14's
  default for new datasets.
* Detached: ``_versions/d{version}.manifest`` (never part of the main line).

Anything else in ``_versions/`` (staging files, ``latest_version_hint.json``) is ignored.
A dataset keeps the scheme of its existing manifests; both schemes at once is an error.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import attrs

from txn_engine.errors import MixedNamingSchemeError
from txn_engine.storage.base import Storage

__all__ = [
    "VERSIONS_DIR",
    "TRANSACTIONS_DIR",
    "U64_MAX",
    "NamingScheme",
    "VersionEntry",
    "detached_manifest_name",
    "detect_scheme",
    "list_versions",
    "list_versions_after",
    "manifest_name",
    "manifest_path",
    "parse_manifest_name",
    "transaction_file_name",
    "transaction_path",
]

VERSIONS_DIR = "_versions"
TRANSACTIONS_DIR = "_transactions"
U64_MAX = (1 << 64) - 1
_SUFFIX = ".manifest"
_V2_NAME_LEN = 20 + len(_SUFFIX)


class NamingScheme(enum.Enum):
    """How version numbers map to manifest file names."""

    V1 = "v1"
    V2 = "v2"


@attrs.frozen
class VersionEntry:
    """One main-line version found in ``_versions/``."""

    version: int
    name: str
    scheme: NamingScheme

    @property
    def path(self) -> str:
        """Path of the manifest relative to the dataset root."""
        return f"{VERSIONS_DIR}/{self.name}"


def manifest_name(version: int, scheme: NamingScheme) -> str:
    """File name (without directory) of main-line ``version`` in ``scheme``."""
    if version < 0 or version >= (1 << 63):
        raise ValueError(f"version {version} is outside the main-line range")
    if scheme is NamingScheme.V1:
        return f"{version}{_SUFFIX}"
    return f"{U64_MAX - version:020d}{_SUFFIX}"


def manifest_path(version: int, scheme: NamingScheme) -> str:
    """Path of main-line ``version`` relative to the dataset root."""
    return f"{VERSIONS_DIR}/{manifest_name(version, scheme)}"


def detached_manifest_name(version: int) -> str:
    """File name of a detached version (its number has the top bit set)."""
    return f"d{version}{_SUFFIX}"


def parse_manifest_name(name: str) -> tuple[int, NamingScheme] | None:
    """Return ``(version, scheme)`` for a main-line manifest name, else ``None``.

    Staging files (``5.manifest-<uuid>``, ``5.manifest#1``), detached versions and junk are
    ``None``.
    """
    if not name.endswith(_SUFFIX) or name.startswith("d"):
        return None
    stem = name[: -len(_SUFFIX)]
    if not stem.isdigit() or not stem.isascii():
        return None
    number = int(stem)
    if len(name) == _V2_NAME_LEN:
        if number > U64_MAX:
            return None
        return U64_MAX - number, NamingScheme.V2
    return number, NamingScheme.V1


def detect_scheme(names: Sequence[str]) -> NamingScheme | None:
    """The scheme of the manifests among ``names`` (None if there are none).

    Raises MixedNamingSchemeError if both are present.
    """
    seen: set[NamingScheme] = set()
    for name in names:
        parsed = parse_manifest_name(name)
        if parsed is not None:
            seen.add(parsed[1])
    if len(seen) > 1:
        raise MixedNamingSchemeError(
            "_versions/ holds both V1 and V2 manifest names; finish the V1->V2 migration first"
        )
    return next(iter(seen), None)


def list_versions(storage: Storage) -> list[VersionEntry]:
    """All main-line versions, ascending. Raises MixedNamingSchemeError on mixed schemes."""
    entries: list[VersionEntry] = []
    schemes: set[NamingScheme] = set()
    for name in storage.list(VERSIONS_DIR):
        parsed = parse_manifest_name(name)
        if parsed is None:
            continue
        version, scheme = parsed
        schemes.add(scheme)
        entries.append(VersionEntry(version, name, scheme))
    if len(schemes) > 1:
        raise MixedNamingSchemeError(
            f"{storage.uri}: _versions/ holds both V1 and V2 manifest names; "
            "finish the V1->V2 migration first"
        )
    entries.sort(key=lambda e: e.version)
    return entries


def list_versions_after(storage: Storage, version: int) -> list[VersionEntry]:
    """Main-line versions newer than ``version``, ascending (one listing)."""
    return [e for e in list_versions(storage) if e.version > version]


def transaction_file_name(read_version: int, uuid: str) -> str:
    """``{read_version}-{uuid}.txn`` (the name recorded in Manifest.transaction_file)."""
    return f"{read_version}-{uuid}.txn"


def transaction_path(file_name: str) -> str:
    """Path of a transaction file relative to the dataset root."""
    return f"{TRANSACTIONS_DIR}/{file_name}"
