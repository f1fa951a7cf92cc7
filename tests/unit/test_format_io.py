"""Reading versions, manifests and transactions from a Storage."""

from __future__ import annotations

import pytest

from txn_engine._proto import table_pb2, transaction_pb2
from txn_engine.errors import (
    CorruptManifestError,
    DatasetNotFoundError,
    TransactionNotFoundError,
    VersionNotFoundError,
)
from txn_engine.format.io import (
    HEAD_READ_SIZE,
    latest_version,
    read_manifest,
    read_transaction,
    read_transaction_and_manifest,
)
from txn_engine.format.manifest_file import encode_manifest_file
from txn_engine.format.naming import NamingScheme, manifest_path, transaction_path
from txn_engine.storage import MemoryStorage
from txn_engine.storage.recording import RecordingStorage

UUID = "12345678-1234-4234-8234-123456789abc"


def _txn(read_version: int, *, n_fragments: int = 1) -> transaction_pb2.Transaction:
    txn = transaction_pb2.Transaction(read_version=read_version, uuid=UUID)
    for _ in range(n_fragments):
        f = txn.append.fragments.add(physical_rows=5)
        f.files.add(path="p" * 60, fields=[0], column_indices=[0])
    return txn


def _put(
    storage: MemoryStorage,
    version: int,
    *,
    inline: bool = True,
    txn_file: bool = True,
    scheme: NamingScheme = NamingScheme.V2,
    n_fragments: int = 1,
    manifest_fragments: int = 0,
) -> transaction_pb2.Transaction:
    txn = _txn(version - 1, n_fragments=n_fragments)
    m = table_pb2.Manifest(version=version)
    for i in range(manifest_fragments):
        f = m.fragments.add(id=i, physical_rows=5)
        f.files.add(path="q" * 60, fields=[0], column_indices=[0])
    if txn_file:
        name = f"{version - 1}-{UUID}.txn"
        m.transaction_file = name
        storage.put(transaction_path(name), txn.SerializeToString())
    data = encode_manifest_file(m, (), txn if inline else None)
    storage.put_if_absent(manifest_path(version, scheme), data)
    return txn


def test_missing_manifest_is_dataset_not_found() -> None:
    storage = MemoryStorage()
    with pytest.raises(DatasetNotFoundError):
        latest_version(storage)
    with pytest.raises(DatasetNotFoundError):
        read_manifest(storage)
    with pytest.raises(DatasetNotFoundError):
        read_manifest(storage, 1)


def test_version_that_does_not_exist() -> None:
    storage = MemoryStorage()
    _put(storage, 1)
    with pytest.raises(VersionNotFoundError, match="version 7 does not exist"):
        read_manifest(storage, 7)
    with pytest.raises(VersionNotFoundError):
        read_transaction(storage, 7)


def test_latest_and_specific_versions_both_schemes() -> None:
    for scheme in NamingScheme:
        storage = MemoryStorage()
        for v in (1, 2, 3):
            _put(storage, v, scheme=scheme)
        entry, mf = read_manifest(storage)
        assert (entry.version, entry.scheme, mf.manifest.version) == (3, scheme, 3)
        entry, mf = read_manifest(storage, 2)
        assert (entry.version, mf.manifest.version) == (2, 2)


def test_inline_transaction_preferred() -> None:
    storage = MemoryStorage()
    txn = _put(storage, 1)
    storage.put(transaction_path(f"0-{UUID}.txn"), b"\xff garbage")
    assert read_transaction(storage, 1) == txn


def test_transaction_file_fallback() -> None:
    storage = MemoryStorage()
    txn = _put(storage, 1, inline=False)
    assert read_transaction(storage, 1) == txn


def test_no_transaction_anywhere() -> None:
    storage = MemoryStorage()
    _put(storage, 1, inline=False, txn_file=False)
    with pytest.raises(TransactionNotFoundError, match="no inline transaction"):
        read_transaction(storage, 1)


def test_transaction_file_missing() -> None:
    storage = MemoryStorage()
    _put(storage, 1, inline=False)
    storage.delete(transaction_path(f"0-{UUID}.txn"))
    with pytest.raises(TransactionNotFoundError, match="missing"):
        read_transaction(storage, 1)


def test_corrupt_transaction_file() -> None:
    storage = MemoryStorage()
    _put(storage, 1, inline=False)
    storage.put(transaction_path(f"0-{UUID}.txn"), b"\x0a\xff\xff\xff\xff\x0f")
    with pytest.raises(CorruptManifestError):
        read_transaction(storage, 1)


def test_large_manifest_small_transaction_read_from_head_only() -> None:
    inner = MemoryStorage()
    txn = _put(inner, 1, manifest_fragments=3000)
    entry, mf = read_manifest(inner, 1)
    assert mf.size > 3 * HEAD_READ_SIZE
    storage = RecordingStorage(inner)
    got, decoded = read_transaction_and_manifest(storage, entry)
    assert (got, decoded) == (txn, None)
    snap = storage.snapshot()
    assert (snap.get("get", 0), snap["get_range"]) == (0, 1)
    assert snap["bytes_read"] <= HEAD_READ_SIZE


def test_large_transaction_read_without_reading_whole_file() -> None:
    inner = MemoryStorage()
    txn = _put(inner, 1, n_fragments=3000, manifest_fragments=3000)
    entry, mf = read_manifest(inner, 1)
    assert mf.transaction == txn
    storage = RecordingStorage(inner)
    got, decoded = read_transaction_and_manifest(storage, entry)
    assert (got, decoded) == (txn, None)
    snap = storage.snapshot()
    assert snap.get("get", 0) == 0
    assert snap["bytes_read"] <= mf.size


def test_reuses_given_manifest_file_without_io() -> None:
    inner = MemoryStorage()
    txn = _put(inner, 1)
    entry, mf = read_manifest(inner, 1)
    storage = RecordingStorage(inner)
    assert read_transaction(storage, entry, mf) == txn
    assert sum(storage.counts.values()) == 0
