"""Conformance: every in-process backend honours the Storage contract
(txn_engine/storage/base.py), through the shared suite
:class:`txn_engine.testing.conformance.StorageConformance`.

LocalStorage, MemoryStorage (private, and ``memory://`` shared handles), FsspecStorage over
fsspec's memory filesystem (a private store), over fsspec's local filesystem, and over a
non-atomic filesystem with a commit lock plug in here; the object stores (S3, Azure,
GCS through obstore and fsspec) plug into the same suite in
tests/integration/test_object_stores.py.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import fsspec
import pytest
from fsspec.implementations.dirfs import DirFileSystem

from txn_engine.storage import FsspecStorage, LocalStorage, MemoryStorage, Storage
from txn_engine.storage.base import read_concurrency
from txn_engine.testing.conformance import StorageConformance


class TestLocalStorage(StorageConformance):
    @pytest.fixture
    def storage(self, tmp_path: Path) -> Storage:
        return LocalStorage(tmp_path / "ds.lance")

    def clients(self, storage: Storage, n: int) -> list[Storage]:
        assert isinstance(storage, LocalStorage)
        return [storage, *(LocalStorage(storage.root) for _ in range(n - 1))]


class TestMemoryStorage(StorageConformance):
    @pytest.fixture
    def storage(self) -> Storage:
        return MemoryStorage()


class TestSharedMemoryStorage(StorageConformance):
    """``memory://name`` handles: independent objects over one named store."""

    @pytest.fixture
    def storage(self, request: pytest.FixtureRequest) -> Any:
        name = f"conformance-{request.node.name}"
        MemoryStorage.drop_shared(name)
        yield MemoryStorage.shared(name)
        MemoryStorage.drop_shared(name)

    def clients(self, storage: Storage, n: int) -> list[Storage]:
        name = storage.uri.removeprefix("memory://")
        return [storage, *(MemoryStorage.shared(name) for _ in range(n - 1))]


class TestFsspecMemory(StorageConformance):
    @pytest.fixture
    def storage(self) -> Storage:
        fs = fsspec.filesystem("memory", global_store=False, skip_instance_cache=True)
        return FsspecStorage(fs, "memory://ds.lance")

    def clients(self, storage: Storage, n: int) -> list[Storage]:
        assert isinstance(storage, FsspecStorage)
        return [storage, *(FsspecStorage(storage.fs, "memory://ds.lance") for _ in range(n - 1))]


class TestFsspecLocal(StorageConformance):
    @pytest.fixture
    def storage(self, tmp_path: Path) -> Storage:
        return FsspecStorage(fsspec.filesystem("file"), str(tmp_path / "ds.lance"))

    def clients(self, storage: Storage, n: int) -> list[Storage]:
        return [
            storage,
            *(FsspecStorage(fsspec.filesystem("file"), storage.uri) for _ in range(n - 1)),
        ]


class TestFsspecWithCommitLock(StorageConformance):
    """A filesystem without atomic create (fsspec's DirFileSystem over a private memory
    store) conforms once a commit lock excludes every writer."""

    @pytest.fixture
    def storage(self) -> Storage:
        mutex = threading.Lock()

        @contextmanager
        def lock(path: str) -> Iterator[None]:
            with mutex:
                yield

        memory = fsspec.filesystem("memory", global_store=False, skip_instance_cache=True)
        fs = DirFileSystem(path="/ds", fs=memory)
        return FsspecStorage(fs, "", commit_lock=lock, uri="dir+memory://ds")


def test_local_and_memory_stores_read_serially() -> None:
    """Only object stores declare concurrent reads (the commit loop reads winners at once
    there); a local disk or memory store is read one object at a time."""
    assert read_concurrency(MemoryStorage()) == 1
    assert read_concurrency(LocalStorage("/nonexistent/ds")) == 1
    assert read_concurrency(FsspecStorage(fsspec.filesystem("file"), "/nonexistent/ds")) == 1

    class Declares:
        read_concurrency = 500

    class Nonsense:
        read_concurrency = "many"

    assert read_concurrency(Declares()) == 64  # type: ignore[arg-type]  # bounded
    assert read_concurrency(Nonsense()) == 1  # type: ignore[arg-type]


def test_only_object_stores_declare_long_keys() -> None:
    """Object stores declare what is left of their 1,024-byte keys after the dataset's
    prefix (offers then travel in their names); local and memory stores declare nothing."""
    from txn_engine.storage import RecordingStorage
    from txn_engine.storage.base import OBJECT_KEY_BYTES, max_path_bytes

    assert max_path_bytes(MemoryStorage()) == 0
    assert max_path_bytes(LocalStorage("/nonexistent/ds")) == 0
    assert max_path_bytes(FsspecStorage(fsspec.filesystem("file"), "/nonexistent/ds")) == 0
    # (the obstore backends: tests/integration/test_offers_pylance.py, on moto S3)

    class Declares(MemoryStorage):
        max_path_bytes = 5000

    assert max_path_bytes(RecordingStorage(Declares())) == OBJECT_KEY_BYTES

    class Nonsense:
        max_path_bytes = True

    assert max_path_bytes(Declares()) == OBJECT_KEY_BYTES  # bounded
    assert max_path_bytes(Nonsense()) == 0  # type: ignore[arg-type]
