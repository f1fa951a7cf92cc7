"""Conformance suite: every backend honours the Storage contract (txn_engine/storage/base.py).

The same tests run against LocalStorage, MemoryStorage, FsspecStorage over fsspec's memory
filesystem (a private store) and FsspecStorage over fsspec's local filesystem.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import fsspec
import pytest

from txn_engine.errors import (
    InvalidStorageArgumentError,
    ObjectExistsError,
    ObjectNotFoundError,
    StorageError,
)
from txn_engine.storage import FsspecStorage, LocalStorage, MemoryStorage, Storage

BACKENDS = ["local", "memory", "fsspec-memory", "fsspec-local"]


def make_storage(kind: str, tmp_path: Path) -> Storage:
    """A fresh, empty storage of the given kind."""
    if kind == "local":
        return LocalStorage(tmp_path / "ds.lance")
    if kind == "memory":
        return MemoryStorage()
    if kind == "fsspec-memory":
        fs = fsspec.filesystem("memory", global_store=False, skip_instance_cache=True)
        return FsspecStorage(fs, "memory://ds.lance")
    if kind == "fsspec-local":
        return FsspecStorage(fsspec.filesystem("file"), str(tmp_path / "ds.lance"))
    raise AssertionError(kind)


@pytest.fixture(params=BACKENDS)
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    return make_storage(request.param, tmp_path)


MANIFEST = "_versions/18446744073709551614.manifest"


def test_is_a_storage(storage: Storage) -> None:
    assert isinstance(storage, Storage)
    assert isinstance(storage.uri, str)
    assert storage.uri


def test_put_if_absent_creates_then_refuses(storage: Storage) -> None:
    storage.put_if_absent(MANIFEST, b"first")
    with pytest.raises(ObjectExistsError) as info:
        storage.put_if_absent(MANIFEST, b"second")
    assert isinstance(info.value, FileExistsError)
    assert isinstance(info.value, StorageError)
    assert storage.get(MANIFEST) == b"first"


def test_put_if_absent_refuses_after_put(storage: Storage) -> None:
    storage.put("_transactions/0-a.txn", b"x")
    with pytest.raises(ObjectExistsError):
        storage.put_if_absent("_transactions/0-a.txn", b"y")
    assert storage.get("_transactions/0-a.txn") == b"x"


def test_put_overwrites(storage: Storage) -> None:
    storage.put("data/a.lance", b"one")
    storage.put("data/a.lance", b"two!")
    assert storage.get("data/a.lance") == b"two!"
    assert storage.size("data/a.lance") == 4


def test_empty_object(storage: Storage) -> None:
    storage.put_if_absent("_versions/1.manifest", b"")
    assert storage.get("_versions/1.manifest") == b""
    assert storage.size("_versions/1.manifest") == 0
    assert storage.exists("_versions/1.manifest")


def test_top_level_object(storage: Storage) -> None:
    storage.put_if_absent("_latest.manifest", b"top")
    assert storage.get("_latest.manifest") == b"top"
    assert "_latest.manifest" in storage.list("")


def test_missing_object_reads(storage: Storage) -> None:
    for call in (
        lambda: storage.get("_versions/9.manifest"),
        lambda: storage.size("_versions/9.manifest"),
        lambda: storage.get_range("_versions/9.manifest", 0, 4),
        lambda: storage.get_range("_versions/9.manifest", 2, 2),
    ):
        with pytest.raises(ObjectNotFoundError) as info:
            call()
        assert isinstance(info.value, FileNotFoundError)
    assert not storage.exists("_versions/9.manifest")


def test_get_range(storage: Storage) -> None:
    storage.put("f.bin", bytes(range(10)))
    assert storage.get_range("f.bin", 2, 5) == bytes([2, 3, 4])
    assert storage.get_range("f.bin", 0, 10) == bytes(range(10))
    assert storage.get_range("f.bin", 7, 100) == bytes([7, 8, 9])
    assert storage.get_range("f.bin", 10, 20) == b""
    assert storage.get_range("f.bin", 15, 20) == b""
    assert storage.get_range("f.bin", 4, 4) == b""
    for start, end in ((-1, 3), (5, 4)):
        with pytest.raises(InvalidStorageArgumentError):
            storage.get_range("f.bin", start, end)


def test_list_names_direct_children_only(storage: Storage) -> None:
    storage.put_if_absent("_versions/1.manifest", b"1")
    storage.put_if_absent("_versions/2.manifest", b"2")
    storage.put("_versions/nested/3.manifest", b"3")
    storage.put("_transactions/0-x.txn", b"t")
    assert sorted(storage.list("_versions")) == ["1.manifest", "2.manifest"]
    assert sorted(storage.list("_versions/")) == ["1.manifest", "2.manifest"]
    assert list(storage.list("_versions/nested")) == ["3.manifest"]
    assert list(storage.list("_transactions")) == ["0-x.txn"]
    assert list(storage.list("")) == []
    assert list(storage.list("missing")) == []
    assert list(storage.list("missing/deeper")) == []
    # a prefix naming an object (not a directory) lists nothing
    assert list(storage.list("_transactions/0-x.txn")) == []


def test_exists(storage: Storage) -> None:
    storage.put("data/a.lance", b"a")
    assert storage.exists("data/a.lance")
    assert not storage.exists("data")  # directories are not objects
    assert not storage.exists("data/b.lance")
    assert not storage.exists("nowhere/b.lance")


def test_delete(storage: Storage) -> None:
    storage.put("data/a.lance", b"a")
    storage.put("data/b.lance", b"b")
    storage.delete("data/a.lance")
    assert not storage.exists("data/a.lance")
    assert list(storage.list("data")) == ["b.lance"]
    storage.delete("data/a.lance")  # missing is fine
    storage.delete("never/was.here")
    with pytest.raises(ObjectNotFoundError):
        storage.get("data/a.lance")
    storage.put_if_absent("data/a.lance", b"again")  # a deleted name can be created again
    assert storage.get("data/a.lance") == b"again"


BAD_PATHS = [
    "",
    "/abs/path",
    "a/../b",
    "../escape",
    "a//b",
    "./a",
    "a/./b",
    "a\\b",
    "a\x00b",
    "dir/",
]


@pytest.mark.parametrize("bad", BAD_PATHS)
def test_invalid_paths_are_refused(storage: Storage, bad: str) -> None:
    calls: list[Callable[[], object]] = [
        lambda: storage.put_if_absent(bad, b"x"),
        lambda: storage.put(bad, b"x"),
        lambda: storage.get(bad),
        lambda: storage.get_range(bad, 0, 1),
        lambda: storage.size(bad),
        lambda: storage.exists(bad),
        lambda: storage.delete(bad),
    ]
    for call in calls:
        with pytest.raises(InvalidStorageArgumentError) as info:
            call()
        assert isinstance(info.value, ValueError)
        assert not isinstance(info.value, StorageError)


@pytest.mark.parametrize("bad", ["/abs", "a/../b", "..", "a\\b"])
def test_invalid_list_prefix_is_refused(storage: Storage, bad: str) -> None:
    with pytest.raises(InvalidStorageArgumentError):
        storage.list(bad)


@pytest.fixture
def fast_thread_switching() -> Iterator[None]:
    """Switch threads every microsecond so check-then-act races actually interleave
    (with this, raw fsspec MemoryFileSystem.pipe_file(mode="create") lets two threads win
    a few rounds in a hundred)."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def race(create: Callable[[str, bytes], None], path: str, n: int) -> tuple[list[int], list[int]]:
    """Run ``create(path, payload_i)`` in ``n`` threads released together; return the
    indices that won and those that got ObjectExistsError (anything else fails the test)."""
    barrier = threading.Barrier(n)
    won: list[int] = []
    lost: list[int] = []
    errors: list[BaseException] = []

    def contend(i: int) -> None:
        barrier.wait()
        try:
            create(path, f"writer-{i}".encode() * 100)
        except ObjectExistsError:
            lost.append(i)
        except BaseException as exc:
            errors.append(exc)
        else:
            won.append(i)

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    return won, lost


@pytest.mark.usefixtures("fast_thread_switching")
def test_put_if_absent_race_has_exactly_one_winner(storage: Storage) -> None:
    rounds = 60
    for r in range(rounds):
        path = f"_versions/{r}.manifest"
        won, lost = race(storage.put_if_absent, path, 8)
        assert len(won) == 1, f"round {r}: winners {won}"
        assert len(lost) == 7
        assert storage.get(path) == f"writer-{won[0]}".encode() * 100
    assert sorted(storage.list("_versions")) == sorted(f"{r}.manifest" for r in range(rounds))


def _uniform(payload: bytes, size: int) -> bool:
    return len(payload) == size and payload == payload[:1] * size


def test_readers_never_see_partial_objects(storage: Storage) -> None:
    size = 256 * 1024
    versions = 40
    stop = threading.Event()
    bad: list[str] = []
    seen: set[bytes] = set()

    def reader() -> None:
        while not stop.is_set():
            for path in ("data/overwritten.bin", *(f"_versions/{v}.manifest" for v in range(4))):
                try:
                    data = storage.get(path)
                except ObjectNotFoundError:
                    continue
                if not _uniform(data, size):
                    bad.append(f"{path}: {len(data)} bytes")
                seen.add(data[:1])

    readers = [threading.Thread(target=reader) for _ in range(2)]
    for t in readers:
        t.start()
    try:
        for v in range(versions):
            storage.put("data/overwritten.bin", bytes([v]) * size)
        for v in range(4):
            storage.put_if_absent(f"_versions/{v}.manifest", bytes([200 + v]) * size)
        # on a loaded machine the readers may not have been scheduled yet: the objects exist
        # now, so give them a bounded moment to observe some
        deadline = time.monotonic() + 20
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop.set()
        for t in readers:
            t.join()
    assert bad == []
    assert storage.get("data/overwritten.bin") == bytes([versions - 1]) * size
    assert seen  # the readers did observe objects


def test_same_name_in_other_directory_is_independent(storage: Storage) -> None:
    storage.put_if_absent("a/x", b"1")
    storage.put_if_absent("b/x", b"2")
    assert storage.get("a/x") == b"1"
    assert storage.get("b/x") == b"2"


def test_object_and_directory_share_no_state_in_listing(storage: Storage) -> None:
    storage.put("d/f", b"1")
    storage.put("d/sub/g", b"2")
    assert list(storage.list("d")) == ["f"]
