"""Backend-specific behaviour: local staging/link/fsync and multi-process exclusivity,
memory sharing, the fsspec capability table, commit locks, unsafe mode, error mapping,
open_storage dispatch and RecordingStorage counts."""

from __future__ import annotations

import errno
import importlib.util
import multiprocessing
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import fsspec
import pytest
from fsspec.implementations.dirfs import DirFileSystem
from fsspec.implementations.memory import MemoryFileSystem
from fsspec.spec import AbstractFileSystem

from txn_engine.errors import (
    AmbiguousWriteError,
    AtomicityUnsupportedError,
    InvalidStorageArgumentError,
    ObjectExistsError,
    ObjectNotFoundError,
    StorageError,
)
from txn_engine.storage import (
    FSSPEC_CAPABILITIES,
    Atomicity,
    FsspecStorage,
    LocalStorage,
    MemoryStorage,
    RecordingStorage,
    Storage,
    atomicity_of,
    open_storage,
    resolve_options,
)
from txn_engine.storage._probe import PROBE_DIR, forget_probes
from txn_engine.storage.fsspec_store import _memory_lock

# ---------------------------------------------------------------------------- helpers


@pytest.fixture(autouse=True)
def _fresh_probes() -> Iterator[None]:
    """Every test starts with no store proven (the probe cache is process-wide)."""
    forget_probes()
    yield
    forget_probes()


def race(
    creators: Sequence[Callable[[str, bytes], None]], path: str
) -> tuple[list[int], list[int]]:
    """Thread ``i`` calls ``creators[i](path, payload_i)``, all released together; return
    (winners, losers). Any error other than ObjectExistsError fails the test."""
    n = len(creators)
    barrier = threading.Barrier(n)
    won: list[int] = []
    lost: list[int] = []
    errors: list[BaseException] = []

    def contend(i: int) -> None:
        barrier.wait()
        try:
            creators[i](path, b"w%d" % i)
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


@pytest.fixture
def fast_thread_switching() -> Iterator[None]:
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def private_memfs() -> Any:
    return fsspec.filesystem("memory", global_store=False, skip_instance_cache=True)


class FakeObjectStore(AbstractFileSystem):  # type: ignore[misc]
    """An in-memory stand-in for an object-store filesystem that records how it is used.

    It claims to come from the s3fs package so that the capability table trusts it; its
    ``pipe_file(mode="create")`` is a conditional put, ``open`` is forbidden, a ranged read
    starting past the end fails like S3's HTTP 416, and ``fail`` injects write errors.
    """

    __module__ = "s3fs.fake_for_tests"
    protocol = ("s3", "s3a")
    cachable = False  # a fresh instance per construction (fsspec caches by arguments)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.objects: dict[str, bytes] = {}
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.fail: BaseException | None = None
        self.fail_reads: BaseException | None = None

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        path = self._strip_protocol(path)
        self.calls.append(("pipe_file", path, {"mode": mode, **kwargs}))
        if self.fail is not None:
            raise self.fail
        if mode == "create" and path in self.objects:
            raise FileExistsError(path)
        self.objects[path] = bytes(value)

    def cat_file(
        self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any
    ) -> bytes:
        path = self._strip_protocol(path)
        self.calls.append(("cat_file", path, {"start": start, "end": end}))
        if self.fail_reads is not None:
            raise self.fail_reads
        if path not in self.objects:
            raise FileNotFoundError(path)
        data = self.objects[path]
        if start is not None and start >= len(data):
            raise OSError(errno.EINVAL, "InvalidRange (HTTP 416)")
        return data[start:end]

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        path = self._strip_protocol(path)
        self.calls.append(("info", path, kwargs))
        if path in self.objects:
            return {"name": path, "type": "file", "size": len(self.objects[path])}
        if any(k.startswith(path + "/") for k in self.objects):
            return {"name": path, "type": "directory", "size": 0}
        raise FileNotFoundError(path)

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[dict[str, Any]]:
        path = self._strip_protocol(path).rstrip("/")
        self.calls.append(("ls", path, kwargs))
        out: dict[str, dict[str, Any]] = {}
        for key, value in self.objects.items():
            if key.startswith(path + "/"):
                rest = key[len(path) + 1 :]
                if "/" in rest:
                    sub = f"{path}/{rest.split('/')[0]}"
                    out[sub] = {"name": sub, "type": "directory", "size": 0}
                else:
                    out[key] = {"name": key, "type": "file", "size": len(value)}
        if not out:
            raise FileNotFoundError(path)
        return list(out.values())

    def rm_file(self, path: str) -> None:
        path = self._strip_protocol(path)
        self.calls.append(("rm_file", path, {}))
        self.objects.pop(path, None)

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        raise AssertionError(f"open({path!r}, {mode!r}) must never be used")


# ------------------------------------------------------------------------------ local


def test_local_staging_file_never_ends_in_manifest_and_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The named staging file (where there is no O_TMPFILE; Linux creates through an
    unnamed inode, tests/unit/test_local_create.py): never a manifest name, in the same
    directory, removed after the link, also after a lost race."""
    from txn_engine.storage import _files

    monkeypatch.setattr(_files, "_TMPFILE", None)
    links: list[tuple[str, str]] = []
    replaces: list[tuple[str, str]] = []
    real_link, real_replace = os.link, os.replace

    def spy_link(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        links.append((os.fspath(src), os.fspath(dst)))
        real_link(src, dst, *args, **kwargs)

    def spy_replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        replaces.append((os.fspath(src), os.fspath(dst)))
        real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "link", spy_link)
    monkeypatch.setattr(os, "replace", spy_replace)
    monkeypatch.setattr(os, "rename", lambda *a, **k: pytest.fail("os.rename used"))
    st = LocalStorage(tmp_path)
    st.put_if_absent("_versions/1.manifest", b"one")
    with pytest.raises(ObjectExistsError):
        st.put_if_absent("_versions/1.manifest", b"two")
    st.put("_transactions/0-a.txn", b"txn")

    assert [dst for _, dst in links] == [str(tmp_path / "_versions/1.manifest")] * 2
    assert len(replaces) == 1
    for src, dst in [*links, *replaces]:
        assert not src.endswith("manifest")
        assert os.path.dirname(src) == os.path.dirname(dst)  # same directory, same device
        assert not os.path.exists(src)  # staging cleaned up, also after the lost race
    assert sorted(os.listdir(tmp_path / "_versions")) == ["1.manifest"]
    assert sorted(os.listdir(tmp_path / "_transactions")) == ["0-a.txn"]
    assert st.get("_versions/1.manifest") == b"one"


def test_local_list_hides_inflight_staging_files(tmp_path: Path) -> None:
    st = LocalStorage(tmp_path)
    st.put_if_absent("_versions/1.manifest", b"x")
    (tmp_path / "_versions" / f"2.manifest.{'ab' * 16}.tmp").write_bytes(b"partial")
    (tmp_path / "_versions" / "3.manifest.not-staging.tmp").write_bytes(b"kept")
    assert sorted(st.list("_versions")) == ["1.manifest", "3.manifest.not-staging.tmp"]


def test_local_fsyncs_file_and_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real = os.fsync

    def spy_fsync(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", spy_fsync)
    LocalStorage(tmp_path).put_if_absent("_versions/1.manifest", b"x")
    assert len(synced) == 2  # the staging file, then the directory
    LocalStorage(tmp_path).put("a.bin", b"x")
    assert len(synced) == 4
    LocalStorage(tmp_path, fsync=False).put_if_absent("_versions/2.manifest", b"x")
    LocalStorage(tmp_path, fsync=False).put("b.bin", b"x")
    assert len(synced) == 4
    # .txn files are redundant copies of the manifests' inline transactions: no fsync
    LocalStorage(tmp_path).put("_transactions/1-u.txn", b"x")
    assert len(synced) == 4
    LocalStorage(tmp_path, no_fsync_prefixes=()).put("_transactions/2-u.txn", b"x")
    assert len(synced) == 6
    # leases protect processes of this machine, which a power cut ends too: no fsync
    LocalStorage(tmp_path).put("_txn_engine/leases/u.json", b"{}")
    assert len(synced) == 6
    LocalStorage(tmp_path).put("_txn_engine/other.json", b"{}")  # anything else is synced
    assert len(synced) == 8


def test_local_without_hard_links_refuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_links(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    st = LocalStorage(tmp_path)
    with pytest.raises(AtomicityUnsupportedError) as info:
        st.put_if_absent("_versions/1.manifest", b"x")
    assert isinstance(info.value.__cause__, OSError)
    assert os.listdir(tmp_path / "_versions") == []  # staging removed, nothing published


def test_local_error_mapping(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    st = LocalStorage(tmp_path)
    st.put("file", b"x")
    st.put("dir/a", b"a")
    # a parent that is a file: reads say "not found", writes fail as StorageError
    with pytest.raises(ObjectNotFoundError):
        st.get("file/child")
    assert not st.exists("file/child")
    for write in (st.put, st.put_if_absent):
        with pytest.raises(StorageError) as info:
            write("file/child", b"y")
        assert not isinstance(info.value, (ObjectNotFoundError, ObjectExistsError))
        assert isinstance(info.value.__cause__, OSError)
    # a directory is not an object
    with pytest.raises(ObjectNotFoundError):
        st.get("dir")
    with pytest.raises(ObjectNotFoundError):
        st.size("dir")
    st.delete("dir")  # no-op
    assert st.exists("dir/a")

    def denied(*args: Any, **kwargs: Any) -> Any:
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr("txn_engine.storage.local.open", denied, raising=False)
    with pytest.raises(StorageError) as info2:
        st.get("dir/a")
    assert not isinstance(info2.value, ObjectNotFoundError)
    assert isinstance(info2.value.__cause__, PermissionError)


def test_local_file_uris(tmp_path: Path) -> None:
    target = tmp_path / "with space" / "ds.lance"
    uri = "file://" + quote(str(target))
    st = LocalStorage(uri)
    assert st.uri == uri
    assert st.root == target
    st.put_if_absent("_versions/1.manifest", b"x")
    assert (target / "_versions" / "1.manifest").read_bytes() == b"x"
    assert LocalStorage("file://localhost" + quote(str(target))).get("_versions/1.manifest") == b"x"
    with pytest.raises(InvalidStorageArgumentError):
        LocalStorage("file://otherhost/data")
    assert LocalStorage(target).root == target  # PathLike


@pytest.mark.parametrize("root", ["a\x00b", "file:///tmp/a%00b", "a\ud800b"])
def test_local_root_no_path_can_hold_is_refused(root: str) -> None:
    # found by fuzzing URIs: the first request raised ValueError ("embedded null byte")
    # or UnicodeEncodeError ("surrogates not allowed")
    with pytest.raises(InvalidStorageArgumentError, match="NUL byte or a lone surrogate"):
        open_storage(root)


def test_object_paths_with_a_lone_surrogate_are_refused(tmp_path: Path) -> None:
    st = LocalStorage(tmp_path)
    for call in (
        lambda: st.exists("a\ud800b"),
        lambda: st.get("_versions/\ud800.manifest"),
        lambda: st.put("data/\udbff.lance", b"x"),
        lambda: st.list("a\ud800"),
        lambda: MemoryStorage().put_if_absent("x\ud800", b"x"),
    ):
        with pytest.raises(InvalidStorageArgumentError, match="lone surrogate"):
            call()
    # a non-UTF-8 name the OS listed (surrogateescape) still names its file
    st.put("data/\udcff", b"x")
    assert st.list("data") == ["\udcff"]
    assert st.get("data/\udcff") == b"x"
    st.delete("data/\udcff")
    assert st.list("data") == []


def _process_contender(root: str, paths: int, barrier: Any, results: Any, idx: int) -> None:
    st = LocalStorage(root)
    barrier.wait()
    wins = []
    for k in range(paths):
        try:
            st.put_if_absent(f"_versions/{k}.manifest", b"p%d" % idx)
        except ObjectExistsError:
            continue
        wins.append(k)
    results.put((idx, wins))


def test_local_put_if_absent_exclusive_across_processes(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    n, paths = 4, 25
    barrier = ctx.Barrier(n)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_process_contender, args=(str(tmp_path), paths, barrier, results, i))
        for i in range(n)
    ]
    for p in procs:
        p.start()
    outcome = dict(results.get(timeout=60) for _ in range(n))
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    winners: dict[int, int] = {}
    for idx, wins in outcome.items():
        for k in wins:
            assert k not in winners, f"path {k} won by {winners[k]} and {idx}"
            winners[k] = idx
    assert sorted(winners) == list(range(paths))
    st = LocalStorage(tmp_path)
    for k, idx in winners.items():
        assert st.get(f"_versions/{k}.manifest") == b"p%d" % idx
    assert len(os.listdir(tmp_path / "_versions")) == paths  # no staging leftovers


# ----------------------------------------------------------------------------- memory


def test_memory_instances_are_private_and_shared_handles_share() -> None:
    a, b = MemoryStorage(), MemoryStorage()
    a.put("x", b"1")
    assert not b.exists("x")
    assert a.uri != b.uri

    name = "test-storage-shared"
    try:
        s1, s2 = MemoryStorage.shared(name), MemoryStorage.shared(name)
        assert s1 is not s2
        assert s1.uri == s2.uri == f"memory://{name}"
        s1.put_if_absent("_versions/1.manifest", b"v1")
        assert s2.get("_versions/1.manifest") == b"v1"
        with pytest.raises(ObjectExistsError):
            s2.put_if_absent("_versions/1.manifest", b"other")
        assert not MemoryStorage.shared(name + "-other").exists("_versions/1.manifest")
        via_uri = open_storage(f"memory://{name}")
        assert isinstance(via_uri, MemoryStorage)
        assert via_uri.get("_versions/1.manifest") == b"v1"
    finally:
        MemoryStorage.drop_shared(name)
        MemoryStorage.drop_shared(name + "-other")
    assert not MemoryStorage.shared(name).exists("_versions/1.manifest")
    MemoryStorage.drop_shared(name)


# the 8-handle race on one memory:// store: TestSharedMemoryStorage in test_storage.py


# ----------------------------------------------------------------------------- fsspec


def test_capability_table() -> None:
    assert atomicity_of(fsspec.filesystem("file")) is Atomicity.LOCAL_LINK
    assert atomicity_of(private_memfs()) is Atomicity.LOCKED_CREATE
    assert atomicity_of(DirFileSystem(path="/x", fs=private_memfs())) is Atomicity.NONE
    assert atomicity_of(FakeObjectStore()) is Atomicity.CONDITIONAL_PUT

    class ClaimsS3(FakeObjectStore):
        __module__ = "somebody_else.fs"

    assert atomicity_of(ClaimsS3()) is Atomicity.NONE  # protocol alone is not trusted

    class Unknown(FakeObjectStore):
        protocol = ("sftp", "ssh")

    assert atomicity_of(Unknown()) is Atomicity.NONE
    assert {p for p, (_, a) in FSSPEC_CAPABILITIES.items() if a is Atomicity.CONDITIONAL_PUT} == {
        "s3",
        "s3a",
        "gs",
        "gcs",
        "az",
        "abfs",
        "abfss",
    }


def test_conditional_put_uses_pipe_file_create_never_open() -> None:
    fs = FakeObjectStore()
    st = FsspecStorage(fs, "s3://bucket/ds.lance")
    assert st.root == "bucket/ds.lance"
    st.put_if_absent("_versions/1.manifest", b"m1")
    with pytest.raises(ObjectExistsError) as info:
        st.put_if_absent("_versions/1.manifest", b"m2")
    assert isinstance(info.value.__cause__, FileExistsError)
    st.put("_transactions/0-a.txn", b"t")
    writes = [(path, kw["mode"]) for name, path, kw in fs.calls if name == "pipe_file"]
    # the atomicity probe: one object created twice (the second refused), then deleted
    probe = writes[0][0]
    assert probe.startswith(f"bucket/ds.lance/{PROBE_DIR}/")
    assert writes[:2] == [(probe, "create"), (probe, "create")]
    assert ("rm_file", probe, {}) in fs.calls
    assert probe not in fs.objects
    assert writes[2:] == [
        ("bucket/ds.lance/_versions/1.manifest", "create"),
        ("bucket/ds.lance/_versions/1.manifest", "create"),
        ("bucket/ds.lance/_transactions/0-a.txn", "overwrite"),
    ]
    assert st.get("_versions/1.manifest") == b"m1"


def test_object_store_reads_bypass_listing_caches() -> None:
    fs = FakeObjectStore()
    st = FsspecStorage(fs, "s3://bucket/ds")
    st.put("_versions/1.manifest", b"abc")
    assert st.list("_versions") == ["1.manifest"]
    assert st.exists("_versions/1.manifest")
    assert st.size("_versions/1.manifest") == 3
    for name, _, kw in fs.calls:
        if name in ("ls", "info"):
            assert kw.get("refresh") is True


def test_object_store_range_past_end_is_empty() -> None:
    fs = FakeObjectStore()
    st = FsspecStorage(fs, "s3://bucket/ds")
    st.put("f", b"0123456789")
    assert st.get_range("f", 3, 6) == b"345"
    assert st.get_range("f", 10, 20) == b""
    assert st.get_range("f", 12, 20) == b""
    assert st.get_range("f", 5, 5) == b""
    assert not any(n == "cat_file" and kw["start"] == 5 for n, _, kw in fs.calls)


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (TimeoutError("timed out"), AmbiguousWriteError),
        (ConnectionResetError(errno.ECONNRESET, "reset"), AmbiguousWriteError),
        (PermissionError(errno.EACCES, "denied"), StorageError),
        (RuntimeError("boom"), StorageError),
    ],
)
def test_fsspec_write_error_mapping(exc: BaseException, expected: type[StorageError]) -> None:
    fs = FakeObjectStore()
    st = FsspecStorage(fs, "s3://bucket/ds")
    st.put_if_absent("proven", b"")  # runs the atomicity probe before the failures start
    fs.fail = exc
    for write in (st.put_if_absent, st.put):
        with pytest.raises(StorageError) as info:
            write("_versions/1.manifest", b"x")
        assert type(info.value) is expected
        assert info.value.__cause__ is exc


def test_fsspec_read_error_mapping() -> None:
    fs = FakeObjectStore()
    st = FsspecStorage(fs, "s3://bucket/ds")
    st.put("a", b"x")
    with pytest.raises(ObjectNotFoundError):
        st.get("missing")
    fs.fail_reads = TimeoutError("slow")
    with pytest.raises(StorageError) as info:
        st.get("a")
    assert type(info.value) is StorageError  # reads are never "ambiguous writes"
    assert isinstance(info.value.__cause__, TimeoutError)


def test_non_atomic_fs_refuses_put_if_absent() -> None:
    mem = private_memfs()
    st = FsspecStorage(DirFileSystem(path="/ds", fs=mem), "")
    assert st.atomicity is Atomicity.NONE
    with pytest.raises(AtomicityUnsupportedError) as info:
        st.put_if_absent("_versions/1.manifest", b"x")
    assert "commit_lock" in str(info.value)
    assert isinstance(info.value, StorageError)
    assert not mem.exists("/ds/_versions/1.manifest")
    # everything else works without atomicity
    st.put("data/a", b"a")
    assert st.get("data/a") == b"a"
    assert st.list("data") == ["a"]


def test_commit_lock_wraps_check_and_write() -> None:
    events: list[str] = []
    mem = private_memfs()
    real_pipe = mem.pipe_file

    def spy_pipe(path: str, value: bytes, **kwargs: Any) -> None:
        events.append(f"write {path}")
        real_pipe(path, value, **kwargs)

    mem.pipe_file = spy_pipe
    dirfs = DirFileSystem(path="/ds", fs=mem)

    @contextmanager
    def lock(path: str) -> Iterator[None]:
        events.append(f"enter {path}")
        try:
            yield
        finally:
            events.append(f"exit {path}")

    st = FsspecStorage(dirfs, "", commit_lock=lock)
    st.put_if_absent("_versions/1.manifest", b"one")
    with pytest.raises(ObjectExistsError):
        st.put_if_absent("_versions/1.manifest", b"two")
    assert st.get("_versions/1.manifest") == b"one"
    assert events == [
        "enter _versions/1.manifest",
        "write /ds/_versions/1.manifest",
        "exit _versions/1.manifest",
        "enter _versions/1.manifest",
        "exit _versions/1.manifest",
    ]


# a commit lock makes a non-atomic filesystem exclusive: TestFsspecWithCommitLock in
# test_storage.py (the whole Storage contract, its 8-way race included)


def test_unsafe_mode_is_check_then_write() -> None:
    st = FsspecStorage(DirFileSystem(path="/ds", fs=private_memfs()), "", unsafe=True)
    st.put_if_absent("_versions/1.manifest", b"one")
    with pytest.raises(ObjectExistsError):
        st.put_if_absent("_versions/1.manifest", b"two")  # sequential callers are refused

    # ... but two concurrent callers that both pass the existence check both "win":
    # this is the documented hazard of unsafe mode.
    class BothSeeAbsent(DirFileSystem):  # type: ignore[misc]
        barrier = threading.Barrier(2)

        def info(self, path: str, **kwargs: Any) -> Any:
            try:
                return super().info(path, **kwargs)
            finally:
                self.barrier.wait(timeout=10)

    racy = FsspecStorage(BothSeeAbsent(path="/ds2", fs=private_memfs()), "", unsafe=True)
    won, lost = race([racy.put_if_absent] * 2, "_versions/1.manifest")
    assert sorted(won) == [0, 1]
    assert lost == []


def test_fsspec_memory_lock_is_shared_per_store() -> None:
    a = MemoryFileSystem(skip_instance_cache=True)  # global store
    b = MemoryFileSystem(skip_instance_cache=True)
    c = private_memfs()
    assert _memory_lock(a) is _memory_lock(b)
    assert _memory_lock(a) is not _memory_lock(c)
    assert _memory_lock(c) is _memory_lock(c)


def test_fsspec_memory_lock_is_the_stores_not_the_sessions() -> None:
    """The store is process-wide, so its lock is too: a fresh session takes the same one
    (else two sessions could create one path at once); a private store's filesystem still
    pickles (the lock is no part of its state)."""
    import pickle

    from txn_engine import session

    shared = MemoryFileSystem(skip_instance_cache=True)
    private = private_memfs()
    before = (_memory_lock(shared), _memory_lock(private))
    with session.using(session.Session()):
        assert (_memory_lock(shared), _memory_lock(private)) == before
    private.pipe_file("/x", b"1")
    copy = pickle.loads(pickle.dumps(private))
    assert copy.cat_file("/x") == b"1"


def test_fsspec_local_matches_local_storage(tmp_path: Path) -> None:
    st = FsspecStorage(fsspec.filesystem("file"), "file://" + str(tmp_path))
    assert st.atomicity is Atomicity.LOCAL_LINK
    st.put_if_absent("_versions/1.manifest", b"x")
    (tmp_path / "_versions" / f"2.manifest.{'cd' * 16}.tmp").write_bytes(b"partial")
    assert st.list("_versions") == ["1.manifest"]
    assert LocalStorage(tmp_path).get("_versions/1.manifest") == b"x"


# ----------------------------------------------------------------------- open_storage


class _OptsFS(DirFileSystem):  # type: ignore[misc]
    """A filesystem registered under a test-only protocol; records its options."""

    protocol = "txntestfs"
    cachable = False

    def __init__(self, **kwargs: Any) -> None:
        self.options = dict(kwargs)
        super().__init__(path="/opts", fs=private_memfs())


def test_open_storage_dispatch(tmp_path: Path) -> None:
    local = open_storage(str(tmp_path))
    assert isinstance(local, LocalStorage)
    assert isinstance(open_storage(tmp_path), LocalStorage)
    file_uri = open_storage("file://" + str(tmp_path))
    assert isinstance(file_uri, LocalStorage)
    assert file_uri.uri == "file://" + str(tmp_path)
    mem = MemoryStorage()
    assert open_storage(mem) is mem
    assert isinstance(open_storage("memory://test-open-dispatch"), MemoryStorage)
    MemoryStorage.drop_shared("test-open-dispatch")


def test_open_storage_fsspec_scheme_passes_options_lock_and_unsafe() -> None:
    fsspec.register_implementation("txntestfs", _OptsFS, clobber=True)
    st = open_storage("txntestfs://bucket/ds", {"anon": True})
    assert isinstance(st, FsspecStorage)
    assert st.uri == "txntestfs://bucket/ds"
    assert st.fs.options == {"anon": True}
    with pytest.raises(AtomicityUnsupportedError):
        st.put_if_absent("_versions/1.manifest", b"x")
    unsafe = open_storage("txntestfs://bucket/ds", unsafe=True)
    assert isinstance(unsafe, FsspecStorage)
    unsafe.put_if_absent("_versions/1.manifest", b"x")
    entered: list[str] = []

    @contextmanager
    def lock(path: str) -> Iterator[None]:
        entered.append(path)
        yield

    locked = open_storage("txntestfs://bucket/ds2", commit_lock=lock)
    locked.put_if_absent("_versions/1.manifest", b"x")
    assert entered == ["bucket/ds2/_versions/1.manifest"]


def test_open_storage_errors(tmp_path: Path) -> None:
    with pytest.raises(InvalidStorageArgumentError):
        open_storage("nosuchscheme-xyz://bucket/ds")
    with pytest.raises(InvalidStorageArgumentError):
        open_storage(MemoryStorage(), {"key": "x"})
    with pytest.raises(InvalidStorageArgumentError):
        open_storage(MemoryStorage(), unsafe=True)
    with pytest.raises(InvalidStorageArgumentError):
        open_storage(str(tmp_path), {"key": "x"})
    with pytest.raises(InvalidStorageArgumentError):
        open_storage(42)  # type: ignore[arg-type]


def test_open_storage_missing_backend_package_names_the_extra() -> None:
    if importlib.util.find_spec("s3fs") is None:
        with pytest.raises(StorageError, match=r"txn_engine\[s3\]"):
            open_storage("s3://bucket/ds")
    else:  # s3fs present: the table trusts its class
        st = open_storage("s3://bucket/ds", {"anon": True, "txn_engine_backend": "fsspec"})
        assert isinstance(st, FsspecStorage)
        assert st.atomicity is Atomicity.CONDITIONAL_PUT


# ------------------------------------------------------- atomicity probe (issue 11.3)


class IgnoresConditions(FakeObjectStore):
    """An object store (or a proxy in front of one) that drops ``If-None-Match``: every
    create succeeds and overwrites."""

    __module__ = "s3fs.fake_for_tests"  # trusted by the capability table, as s3fs is

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        super().pipe_file(path, value, mode="overwrite", **kwargs)


def test_probe_refuses_a_store_that_ignores_conditional_creates() -> None:
    fs = IgnoresConditions()
    st = FsspecStorage(fs, "s3://bucket/ds")
    with pytest.raises(AtomicityUnsupportedError) as info:
        st.put_if_absent("_versions/1.manifest", b"m1")
    message = str(info.value)
    assert "s3+ddb://" in message
    assert "txn_engine_unsafe_no_atomicity_check" in message
    assert "_versions/1.manifest" not in fs.objects  # nothing committed
    assert not any(k.startswith(f"bucket/ds/{PROBE_DIR}") for k in fs.objects)  # cleaned up
    with pytest.raises(AtomicityUnsupportedError):  # refused every time, not just once
        st.put_if_absent("_versions/1.manifest", b"m1")
    # the explicit opt-outs: the option (open_storage) or unsafe=True / check_atomicity=False
    FsspecStorage(fs, "s3://bucket/ds", unsafe=True).put_if_absent("_versions/1.manifest", b"x")
    FsspecStorage(fs, "s3://bucket/ds", check_atomicity=False).put_if_absent("a", b"x")
    assert fs.objects["bucket/ds/_versions/1.manifest"] == b"x"


def test_probe_runs_once_per_store_and_prefix() -> None:
    fs = FakeObjectStore()

    def probes() -> int:
        return sum(1 for n, p, _ in fs.calls if n == "pipe_file" and f"/{PROBE_DIR}/" in p)

    FsspecStorage(fs, "s3://bucket/ds").put_if_absent("_versions/1.manifest", b"1")
    assert probes() == 2
    FsspecStorage(fs, "s3://bucket/ds").put_if_absent("_versions/2.manifest", b"2")
    assert probes() == 2  # same store, bucket and prefix: proven already
    FsspecStorage(fs, "s3://bucket/other").put_if_absent("_versions/1.manifest", b"1")
    assert probes() == 4
    st = FsspecStorage(fs, "s3://bucket/ds")
    st.put("data/x.lance", b"")  # plain writes never probe
    assert probes() == 4


def test_probe_failure_is_a_plain_storage_error() -> None:
    fs = FakeObjectStore()
    fs.fail = TimeoutError("lost")
    st = FsspecStorage(fs, "s3://bucket/ds")
    with pytest.raises(StorageError) as info:
        st.put_if_absent("_versions/1.manifest", b"x")
    # never AmbiguousWriteError/ObjectExistsError: the commit loop would read those as
    # "maybe my manifest landed" / "lost the race"
    assert type(info.value) is StorageError
    assert "probe" in str(info.value)


# ------------------------------------------------------ one option dialect (issue 14.2)

LANCE_S3 = {
    "aws_access_key_id": "AKIDEXAMPLE",
    "aws_secret_access_key": "s3cr3t-value-xyz",
    "aws_session_token": "t0ken-value-xyz",
    "aws_endpoint": "http://127.0.0.1:9",
    "aws_region": "eu-west-3",
    "allow_http": "true",
}


def test_fsspec_spellings_are_aliases() -> None:
    old = {
        "key": "AKIDEXAMPLE",
        "secret": "s3cr3t-value-xyz",
        "endpoint_url": "http://127.0.0.1:9",
        "client_kwargs": {"region_name": "eu-west-3"},
    }
    resolved = resolve_options("s3", old)
    assert dict(resolved.values) == {
        "aws_access_key_id": "AKIDEXAMPLE",
        "aws_secret_access_key": "s3cr3t-value-xyz",
        "aws_endpoint": "http://127.0.0.1:9",
        "aws_region": "eu-west-3",
    }
    assert resolved.fsspec_arguments() == {
        "key": "AKIDEXAMPLE",
        "secret": "s3cr3t-value-xyz",
        "endpoint_url": "http://127.0.0.1:9",
        "client_kwargs": {"region_name": "eu-west-3"},
    }
    config, client, _ = resolved.obstore_arguments()
    assert config["aws_access_key_id"] == "AKIDEXAMPLE"
    assert client == {"allow_http": True}  # an explicit http:// endpoint allows http
    https = resolve_options("s3", {"endpoint_url": "https://s3.example"}).obstore_arguments()
    assert https[1] == {}
    # two spellings of one option must agree; the secret is not echoed
    with pytest.raises(InvalidStorageArgumentError) as info:
        resolve_options("s3", {"secret": "aaaa-1", "aws_secret_access_key": "bbbb-2"})
    assert "aaaa-1" not in str(info.value)
    assert "bbbb-2" not in str(info.value)


@pytest.mark.parametrize(
    "value",
    [str(2**32), "99999999999999999999999", "-1", "1_000", " 7", "7 ", "\u0667", "1e3", "", "x"],
)
@pytest.mark.parametrize("name", ["client_max_retries", "client_retry_timeout"])
def test_integer_options_out_of_range_or_not_ascii_digits_are_typed_errors(
    name: str, value: str
) -> None:
    # 10**23 seconds made timedelta raise OverflowError out of open_storage; "1_000" and
    # Arabic-Indic digits were taken by int() though Lance refuses them
    resolved = resolve_options("s3", {name: value})
    with pytest.raises(InvalidStorageArgumentError, match=f"{name} must be a whole number"):
        resolved.obstore_arguments()


def test_integer_options_at_the_bounds() -> None:
    _, _, retry = resolve_options(
        "s3", {"client_max_retries": "0", "client_retry_timeout": str(2**32 - 1)}
    ).obstore_arguments()
    assert retry["max_retries"] == 0
    assert retry["retry_timeout"].total_seconds() == 2**32 - 1


@pytest.mark.parametrize(
    ("scheme", "name", "value"),
    [
        ("s3", "client_max_retries", "0"),
        ("az", "client_max_retries", "3"),
        ("gs", "client_retry_timeout", "1"),
        ("s3", "timeout", "2s"),
        ("az", "connect_timeout", "1s"),
        ("gs", "pool_idle_timeout", "30s"),
        ("az", "azure_storage_token", "tok-SECRET-4711"),
    ],
)
def test_options_the_fsspec_backend_cannot_honour_are_refused(
    scheme: str, name: str, value: str
) -> None:
    # client_max_retries was accepted and ignored: adlfs then retried a request to an
    # unreachable endpoint for 83 s, with the user's "0" in hand
    resolved = resolve_options(scheme, {name: value, "txn_engine_backend": "fsspec"})
    with pytest.raises(InvalidStorageArgumentError, match=name) as info:
        resolved.fsspec_arguments()
    assert "txn_engine[obstore]" in str(info.value)
    assert "SECRET" not in str(info.value)
    timing = name.endswith(("timeout", "retries"))
    assert ("own timeouts and retries" in str(info.value)) is timing
    # refused before any fsspec filesystem is looked up (no extra needed to see it)
    with pytest.raises(InvalidStorageArgumentError, match=name):
        open_storage(f"{scheme}://bucket/t.lance", {name: value, "txn_engine_backend": "fsspec"})
    # the obstore backend takes every one of them
    config, client, retry = resolved.obstore_arguments()
    assert name in {*config, *client} or retry


def test_azure_and_gcs_lance_names_translate_for_fsspec(tmp_path: Path) -> None:
    azure = resolve_options(
        "az",
        {
            "azure_storage_account_name": "acct",
            "azure_storage_account_key": "a2V5",
            "azure_storage_endpoint": "http://127.0.0.1:10000/acct",
            "allow_http": "true",
        },
    ).fsspec_arguments()
    assert azure == {
        "connection_string": "DefaultEndpointsProtocol=http;AccountName=acct;AccountKey=a2V5;"
        "BlobEndpoint=http://127.0.0.1:10000/acct;"
    }
    plain = resolve_options(
        "abfs", {"azure_storage_account_name": "acct", "azure_storage_account_key": "a2V5"}
    ).fsspec_arguments()
    assert plain == {"account_name": "acct", "account_key": "a2V5"}
    account = tmp_path / "sa.json"
    account.write_text('{"gcs_base_url": "http://127.0.0.1:4443", "disable_oauth": true}')
    gcs = resolve_options("gs", {"google_service_account": str(account)}).fsspec_arguments()
    assert gcs == {"endpoint_url": "http://127.0.0.1:4443", "token": "anon"}
    real = tmp_path / "real.json"
    real.write_text('{"type": "service_account"}')
    assert resolve_options("gs", {"google_service_account": str(real)}).fsspec_arguments() == {
        "token": str(real)
    }


def test_environment_endpoint_and_region_reach_s3fs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT", "http://127.0.0.1:7")
    monkeypatch.setenv("AWS_REGION", "ap-south-1")
    args = resolve_options("s3", {}).fsspec_arguments()
    assert args == {
        "endpoint_url": "http://127.0.0.1:7",
        "client_kwargs": {"region_name": "ap-south-1"},
    }
    explicit = resolve_options("s3", {"aws_endpoint": "http://127.0.0.1:8"}).fsspec_arguments()
    assert explicit["endpoint_url"] == "http://127.0.0.1:8"  # options win over the environment


def test_unknown_option_is_refused_naming_the_accepted_ones() -> None:
    for backend in ("obstore", "fsspec"):
        with pytest.raises(InvalidStorageArgumentError) as info:
            open_storage(
                "s3://bucket/ds",
                {"aws_acess_key_id": "AKIDEXAMPLE", "txn_engine_backend": backend},
            )
        message = str(info.value)
        assert "aws_acess_key_id" in message
        assert "aws_access_key_id" in message
        assert "aws_endpoint" in message
    with pytest.raises(InvalidStorageArgumentError, match="azure_storage_account_name"):
        open_storage("az://container/ds", {"aws_region": "x"})  # an S3 name on Azure
    with pytest.raises(InvalidStorageArgumentError, match="'obstore' or 'fsspec'"):
        open_storage("s3://bucket/ds", {"txn_engine_backend": "boto"})


class _FailingFS(DirFileSystem):  # type: ignore[misc]
    """A filesystem whose constructor quotes its password in the error (as some do)."""

    protocol = "txntestfailfs"
    cachable = False

    def __init__(self, **kwargs: Any) -> None:
        raise ValueError(f"login refused for user {kwargs['username']} / {kwargs['password']}")


def test_filesystem_construction_errors_hide_secrets() -> None:
    fsspec.register_implementation("txntestfailfs", _FailingFS, clobber=True)
    with pytest.raises(StorageError) as info:
        open_storage("txntestfailfs://x/ds", {"username": "alice", "password": "hunter2-pw"})
    assert "hunter2-pw" not in str(info.value)
    assert "alice" in str(info.value)  # the rest of the message stays useful
    assert info.value.__cause__ is None


class _QuotingFS(AbstractFileSystem):
    """Raises as gcsfs did for a token given as credentials: the URL of the failed request,
    with the token percent-encoded in its query, in the message."""

    protocol = "txntestquotefs"

    def __init__(self, **kwargs: Any) -> None:
        token = kwargs["token"]
        raise ConnectionError(
            f"Max retries exceeded with url: /tokeninfo?access_token={quote(token, safe='')}"
            f" (user {kwargs['username']}, repr {token!r})"
        )


@pytest.mark.parametrize("secret", ["SECba3fc03c/", "tok+en=with/odd&chars", "new\nline"])
def test_filesystem_construction_errors_hide_encoded_secrets(secret: str) -> None:
    # found by fuzzing open_storage: the exact value was masked, its percent-encoding was not
    fsspec.register_implementation("txntestquotefs", _QuotingFS, clobber=True)
    with pytest.raises(StorageError) as info:
        open_storage("txntestquotefs://x/ds", {"username": "alice", "token": secret})
    text = str(info.value)
    for form in (secret, quote(secret, safe=""), quote(secret), secret.replace("/", "%2F")):
        assert form not in text
    assert "alice" in text


# -------------------------------------------------------------------------- recording


def test_recording_storage_counts_calls_and_bytes() -> None:
    rec = RecordingStorage(MemoryStorage())
    assert isinstance(rec, Storage)
    rec.put_if_absent("_versions/1.manifest", b"12345")
    with pytest.raises(ObjectExistsError):
        rec.put_if_absent("_versions/1.manifest", b"67")
    rec.put("_transactions/a.txn", b"abc")
    assert rec.get("_versions/1.manifest") == b"12345"
    assert rec.get_range("_versions/1.manifest", 1, 3) == b"23"
    assert rec.size("_versions/1.manifest") == 5
    assert list(rec.list("_versions")) == ["1.manifest"]
    assert rec.exists("nope") is False
    rec.delete("_transactions/a.txn")
    with pytest.raises(ObjectNotFoundError):
        rec.get("_transactions/a.txn")

    assert rec.counts == {
        "put_if_absent": 2,
        "put": 1,
        "get": 2,
        "get_range": 1,
        "size": 1,
        "list": 1,
        "exists": 1,
        "delete": 1,
    }
    assert rec.bytes_written == 8  # the lost race wrote nothing
    assert rec.bytes_read == 7
    assert rec.calls[:3] == [
        ("put_if_absent", "_versions/1.manifest"),
        ("put_if_absent", "_versions/1.manifest"),
        ("put", "_transactions/a.txn"),
    ]
    assert ("list", "_versions") in rec.calls
    assert rec.snapshot()["bytes_read"] == 7
    assert rec.uri == rec.inner.uri

    rec.reset()
    assert rec.counts == {}
    assert rec.calls == []
    assert rec.bytes_read == rec.bytes_written == 0
    rec.get("_versions/1.manifest")
    assert rec.counts["get"] == 1


def test_recording_storage_is_thread_safe() -> None:
    rec = RecordingStorage(MemoryStorage())
    rec.put("x", b"abcd")

    def reader() -> None:
        for _ in range(500):
            rec.get("x")

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert rec.counts["get"] == 2000
    assert rec.bytes_read == 8000
    assert len(rec.calls) == 2001


# ---------------------------------------------------------------------------- pylance


def test_lance_options_are_the_same_set_without_txn_engine_names() -> None:
    """stress and the Spark source hand pylance the set the user gave txn_engine."""
    from txn_engine.errors import InvalidStorageArgumentError
    from txn_engine.storage.options import lance_options

    given = {
        "key": "AK",  # an old fsspec alias: resolved to Lance's name
        "aws_endpoint": "http://127.0.0.1:9",
        "txn_engine_backend": "obstore",
    }
    assert lance_options("s3://b/t.lance", given) == {
        "aws_access_key_id": "AK",
        "aws_endpoint": "http://127.0.0.1:9",
    }
    assert lance_options("/local/t.lance", given) is None
    assert lance_options("s3://b/t.lance", None) is None
    with pytest.raises(InvalidStorageArgumentError, match="pylance cannot take"):
        lance_options("s3://b/t.lance", {"client_kwargs": {"verify": False}})


def test_is_storage_checks_the_protocol_and_remembers_only_a_yes(tmp_path: Path) -> None:
    """``is_storage`` answers as ``isinstance(x, Storage)`` (the runtime protocol check,
    10-25 us) and remembers a class once an instance of it passed; an object that lacks
    the methods is never remembered, so ``open_storage`` still refuses it."""
    from txn_engine import session
    from txn_engine.storage import base

    known = session.current().part(base.StorageClasses).known
    st = LocalStorage(str(tmp_path))
    assert base.is_storage(st)
    assert LocalStorage in known
    assert base.is_storage(MemoryStorage())

    class NotAStore:
        def get(self, path: str) -> bytes:
            return b""

    assert not base.is_storage(NotAStore())
    assert NotAStore not in known
    with pytest.raises(InvalidStorageArgumentError):
        open_storage(NotAStore())  # type: ignore[arg-type]
    assert open_storage(st) is st
