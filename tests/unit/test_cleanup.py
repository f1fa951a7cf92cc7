"""cleanup (txn_engine.retention): which versions and files are kept, orphan retention,
leases, tags/branches, base paths, aborts that delete nothing, batching and progress."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from txn_engine.commit import commit
from txn_engine.errors import (
    CleanupAbortedError,
    DatasetNotFoundError,
    InvalidStorageArgumentError,
)
from txn_engine.format.io import resolve_version
from txn_engine.format.naming import list_versions
from txn_engine.leases import CLEANING_DIR, LEASES_DIR, MARKER_STALE_NS, Lease
from txn_engine.model import BasePath, DataFile, Fragment, LanceField
from txn_engine.ops import Append, Overwrite
from txn_engine.retention import (
    CleanupPlan,
    CleanupReport,
    ObjectInfo,
    cleanup,
    delete_many,
    list_objects,
    plan_cleanup,
)
from txn_engine.storage import LocalStorage, MemoryStorage
from txn_engine.storage.base import Storage
from txn_engine.testing.clocks import ManualClock
from txn_engine.transaction import Transaction

SCHEMA = (LanceField(0, -1, "id", "int64"),)
ZERO = timedelta(0)
DAY = timedelta(days=1)
NS = 10**9


def _frag(store: Storage, base_id: int | None = None) -> Fragment:
    name = f"{uuid.uuid4().hex}.lance"
    if base_id is None:
        store.put(f"data/{name}", b"x" * 10)
    return Fragment(0, (DataFile(name, (0,), (0,), 2, 2, 10, base_id),), 5)


def _history(store: Storage) -> list[set[str]]:
    """v1 overwrite(a), v2 append(b), v3 overwrite(c), v4 append(d), v5 append(e): returns
    the data file paths each version references."""
    # with the ``.txn`` copies (``transaction_file=True``): cleanup removes those too
    commit(store, Transaction(0, Overwrite([_frag(store)], SCHEMA)), transaction_file=True)
    commit(store, Transaction(1, Append([_frag(store)])), transaction_file=True)
    commit(store, Transaction(2, Overwrite([_frag(store)], SCHEMA)), transaction_file=True)
    commit(store, Transaction(3, Append([_frag(store)])), transaction_file=True)
    commit(store, Transaction(4, Append([_frag(store)])), transaction_file=True)
    return [_data_of(store, v) for v in range(1, 6)]


def _data_of(store: Storage, version: int) -> set[str]:
    from txn_engine.format.io import read_manifest

    _, mf = read_manifest(store, version)
    return {f"data/{df.path}" for frag in mf.manifest.fragments for df in frag.files}


def _versions(store: Storage) -> list[int]:
    return [e.version for e in list_versions(store)]


def _all_files(store: Storage) -> set[str]:
    return {o.path for d in ("data", "_transactions", "_deletions") for o in list_objects(store, d)}


def test_removes_old_versions_and_only_their_files() -> None:
    store = MemoryStorage()
    refs = _history(store)
    report = cleanup(store, older_than=ZERO, retention_orphans=DAY, progress=False)
    assert isinstance(report, CleanupReport)
    assert report.ok
    assert _versions(store) == [5]
    assert report.plan.removed_versions == (1, 2, 3, 4)
    present = _all_files(store)
    assert refs[4] <= present  # every file of the kept version exists
    assert not (refs[1] | refs[0]) & present  # overwritten data is gone
    txns = {p for p in present if p.startswith("_transactions/")}
    assert len(txns) == 1  # only the kept version's transaction file
    assert report.plan.counts["manifest"] == 4
    assert report.deleted == len(report.plan.deletes)


def test_keep_versions_and_older_than_keep_newest() -> None:
    store = MemoryStorage()
    refs = _history(store)
    plan = plan_cleanup(store, older_than=ZERO, keep_versions=3)
    assert plan.kept_versions == (3, 4, 5)
    assert plan.removed_versions == (1, 2)
    report = cleanup(store, older_than=ZERO, keep_versions=3, progress=False)
    assert isinstance(report, CleanupReport)
    assert _versions(store) == [3, 4, 5]
    assert refs[2] | refs[3] | refs[4] <= _all_files(store)
    # every version is younger than a day: nothing goes
    assert plan_cleanup(store, older_than=DAY).removed_versions == ()
    # judged at a clock one hour ahead, versions are older than 30 minutes
    later = time.time_ns() + 3600 * NS
    assert plan_cleanup(store, older_than=timedelta(minutes=30), now_ns=later).kept_versions == (5,)


def test_dry_run_deletes_nothing_and_reports_the_plan() -> None:
    store = MemoryStorage()
    _history(store)
    before = _all_files(store)
    plan = cleanup(store, older_than=ZERO, dry_run=True)
    assert isinstance(plan, CleanupPlan)
    assert _versions(store) == [1, 2, 3, 4, 5]
    assert _all_files(store) == before
    data = plan.to_json()
    assert data["oldest_removed"] == 1
    assert data["newest_removed"] == 4
    assert data["counts"]["manifest"] == 4
    assert len(data["deletes"]) == len(plan.deletes)
    assert json.loads(json.dumps(data)) == data
    assert "removing versions 1..4" in plan.summary()


def test_live_lease_keeps_every_version_from_it_on() -> None:
    store = MemoryStorage()
    refs = _history(store)
    with Lease(store, 2, ttl=60.0, owner="t", renew_in_background=False):
        report = cleanup(store, older_than=ZERO, progress=False)
        assert isinstance(report, CleanupReport)
        assert report.plan.oldest_lease_version == 2
        assert _versions(store) == [2, 3, 4, 5]
        assert refs[1] | refs[2] <= _all_files(store)
    # released: the next cleanup removes them
    cleanup(store, older_than=ZERO, progress=False)
    assert _versions(store) == [5]


def test_expired_lease_protects_nothing_and_is_removed_after_the_retention() -> None:
    store = MemoryStorage()
    _history(store)
    held = Lease(store, 2, ttl=0.01, owner="t", renew_in_background=False)
    time.sleep(0.03)
    report = cleanup(store, older_than=ZERO, retention_orphans=ZERO, progress=False)
    assert isinstance(report, CleanupReport)
    assert report.plan.oldest_lease_version is None
    assert _versions(store) == [5]
    assert report.plan.counts["lease"] == 1
    assert store.list(LEASES_DIR) == []
    held.release()


def test_malformed_lease_aborts_before_any_delete() -> None:
    store = MemoryStorage()
    _history(store)
    store.put(f"{LEASES_DIR}/bad.json", b"[]")
    with pytest.raises(CleanupAbortedError) as info:
        cleanup(store, older_than=ZERO)
    assert info.value.path == f"{LEASES_DIR}/bad.json"
    assert _versions(store) == [1, 2, 3, 4, 5]


def test_unreadable_manifest_aborts_and_deletes_nothing() -> None:
    store = MemoryStorage()
    _history(store)
    before = _all_files(store)
    entry = resolve_version(store, 5)
    store.put(entry.path, b"garbage")
    with pytest.raises(CleanupAbortedError) as info:
        cleanup(store, older_than=ZERO, retention_orphans=ZERO)
    assert info.value.path == entry.path
    assert _versions(store) == [1, 2, 3, 4, 5]
    assert _all_files(store) == before


def test_tags_and_branch_bases_keep_their_versions() -> None:
    store = MemoryStorage()
    refs = _history(store)
    store.put("_refs/tags/release-1.json", json.dumps({"branch": None, "version": 2}).encode())
    store.put("_refs/tags/on-branch.json", json.dumps({"branch": "b", "version": 1}).encode())
    store.put(
        "_refs/branches/feat.json",
        json.dumps({"parentBranch": None, "parentVersion": 1}).encode(),
    )
    report = cleanup(store, older_than=ZERO, progress=False)
    assert isinstance(report, CleanupReport)
    assert report.plan.tagged_versions == (1, 2)
    assert _versions(store) == [1, 2, 5]
    assert refs[0] | refs[1] | refs[4] <= _all_files(store)
    store.put("_refs/tags/broken.json", b"{")
    with pytest.raises(CleanupAbortedError):
        cleanup(store, older_than=ZERO)


def test_branch_manifests_referencing_this_table_keep_those_files(tmp_path: Path) -> None:
    root = tmp_path / "t.lance"
    store = LocalStorage(root, fsync=False)
    refs = _history(store)
    shared = next(iter(refs[1]))  # a file of version 2, overwritten by version 3
    branch = LocalStorage(root / "tree" / "feat", fsync=False)
    base = BasePath(0, str(root), is_dataset_root=True)
    frag = Fragment(0, (DataFile(shared.split("/", 1)[1], (0,), (0,), 2, 2, 10, 0),), 5)
    commit(branch, Transaction(0, Overwrite([frag], SCHEMA, initial_bases=(base,))))
    store.put("_refs/branches/feat.json", json.dumps({"parentBranch": "x"}).encode())
    report = cleanup(store, older_than=ZERO, retention_orphans=ZERO, progress=False)
    assert isinstance(report, CleanupReport)
    assert _versions(store) == [5]
    assert store.exists(shared)
    assert not (refs[0] - {shared}) & _all_files(store)


def test_files_under_another_base_path_are_never_touched(tmp_path: Path) -> None:
    other = LocalStorage(tmp_path / "elsewhere", fsync=False)
    other.put("data/far.lance", b"far")
    store = LocalStorage(tmp_path / "t.lance", fsync=False)
    base = BasePath(7, str(tmp_path / "elsewhere"), is_dataset_root=True)
    far = Fragment(0, (DataFile("far.lance", (0,), (0,), 2, 2, 3, 7),), 1)
    commit(store, Transaction(0, Overwrite([far], SCHEMA, initial_bases=(base,))))
    commit(store, Transaction(1, Overwrite([_frag(store)], SCHEMA)))
    report = cleanup(store, older_than=ZERO, retention_orphans=ZERO, progress=False)
    assert isinstance(report, CleanupReport)
    assert _versions(store) == [2]
    assert other.exists("data/far.lance")


def test_orphans_go_only_after_the_retention(tmp_path: Path) -> None:
    store = LocalStorage(tmp_path / "t.lance", fsync=False)
    refs = _history(store)
    store.put("data/old-orphan.lance", b"o" * 7)
    store.put("data/young-orphan.lance", b"y")
    store.put("_deletions/0-3-99.arrow", b"d")
    store.put("_indices/0000aaaa-0000-4000-8000-000000000000/part.idx", b"i")
    store.put("_txn_engine/spark/keep.json", b"not ours")
    old = time.time() - 3 * 86400
    for rel in ("data/old-orphan.lance", "_deletions/0-3-99.arrow"):
        os.utime(store.full_path(rel), (old, old))
    os.utime(store.full_path("_indices/0000aaaa-0000-4000-8000-000000000000/part.idx"), (old, old))
    report = cleanup(store, older_than=ZERO, retention_orphans=DAY, keep_versions=5, progress=False)
    assert isinstance(report, CleanupReport)
    orphans = {d.path for d in report.plan.deletes if d.reason == "orphan"}
    assert orphans == {
        "data/old-orphan.lance",
        "_deletions/0-3-99.arrow",
        "_indices/0000aaaa-0000-4000-8000-000000000000/part.idx",
    }
    assert report.plan.bytes == 7 + 1 + 1
    assert store.exists("data/young-orphan.lance")
    assert store.exists("_txn_engine/spark/keep.json")
    assert set().union(*refs) <= _all_files(store)  # all five versions kept


def test_orphans_without_a_known_age_need_zero_retention() -> None:
    store = MemoryStorage()
    _history(store)
    store.put("data/orphan.lance", b"o")
    cleanup(store, older_than=ZERO, keep_versions=5, retention_orphans=DAY, progress=False)
    assert store.exists("data/orphan.lance")
    cleanup(store, older_than=ZERO, keep_versions=5, retention_orphans=ZERO, progress=False)
    assert not store.exists("data/orphan.lance")


def test_symlinked_data_directory_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.lance").write_bytes(b"v")
    root = tmp_path / "t.lance"
    root.mkdir()
    (root / "data").symlink_to(outside, target_is_directory=True)
    assert list_objects(LocalStorage(root), "data") == []


class _LateLease(MemoryStorage):
    """Takes a lease on ``version`` right after cleanup deletes its first manifest (a
    reader that checked the version just before the delete)."""

    def __init__(self) -> None:
        super().__init__()
        self.version = 0
        self.armed = False

    def delete(self, path: str) -> None:
        super().delete(path)
        if self.armed and path.startswith("_versions/"):
            self.armed = False
            self.put(
                f"{LEASES_DIR}/late.json",
                json.dumps(
                    {
                        "version": self.version,
                        "created_at_ns": time.time_ns(),
                        "expires_at_ns": time.time_ns() + 60 * NS,
                        "owner": "late",
                    }
                ).encode(),
            )


def test_a_lease_that_appears_after_manifest_deletes_keeps_its_files() -> None:
    store = _LateLease()
    refs = _history(store)
    store.version, store.armed = 2, True
    report = cleanup(store, older_than=ZERO, progress=False)
    assert isinstance(report, CleanupReport)
    assert report.kept_for_new_leases >= 1
    assert refs[1] <= _all_files(store)  # version 2's files survive


def test_delete_many_prefers_the_storage_batch_method() -> None:
    calls: list[list[str]] = []

    class Batched(MemoryStorage):
        def delete_many(self, paths: list[str]) -> list[tuple[str, str]]:
            calls.append(list(paths))
            for p in paths:
                self.delete(p)
            return []

    store = Batched()
    for i in range(5):
        store.put(f"data/{i}", b"")
    assert delete_many(store, [f"data/{i}" for i in range(5)]) == []
    assert calls == [[f"data/{i}" for i in range(5)]]
    assert store.list("data") == []


def test_many_orphans_are_deleted_in_concurrent_batches_with_progress() -> None:
    store = MemoryStorage()
    commit(store, Transaction(0, Overwrite([_frag(store)], SCHEMA)))
    for i in range(2500):
        store.put(f"data/orphan-{i}.lance", b"")
    seen: list[tuple[int, int]] = []
    report = cleanup(
        store,
        older_than=ZERO,
        retention_orphans=ZERO,
        progress=lambda done, total: seen.append((done, total)),
        workers=4,
    )
    assert isinstance(report, CleanupReport)
    assert report.deleted == 2500
    assert len(store.list("data")) == 1
    assert seen[-1] == (2500, 2500)
    assert len(seen) >= 3  # one report per batch


def test_progress_line_on_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    store = MemoryStorage()
    _history(store)
    cleanup(store, older_than=ZERO, progress=True)
    err = capsys.readouterr().err
    assert "cleanup: deleting [" in err
    assert err.endswith("(100.0%)\n")


def test_argument_and_dataset_errors() -> None:
    store = MemoryStorage()
    with pytest.raises(DatasetNotFoundError):
        cleanup(store, older_than=ZERO)
    _history(store)
    with pytest.raises(InvalidStorageArgumentError):
        cleanup(store, older_than=ZERO, keep_versions=0)
    with pytest.raises(InvalidStorageArgumentError):
        cleanup(store, older_than=timedelta(seconds=-1))
    with pytest.raises(InvalidStorageArgumentError):
        cleanup(store, older_than=5)  # type: ignore[arg-type]


def test_object_info_from_custom_listing() -> None:
    class Listed(MemoryStorage):
        def list_objects(self, prefix: str) -> list[ObjectInfo]:
            return [ObjectInfo(f"{prefix}/x", 3, 1)]

    assert list_objects(Listed(), "data") == [ObjectInfo("data/x", 3, 1)]


def test_cli_cleanup_dry_run_json_then_real_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from txn_engine.apps.cli import main

    store = LocalStorage(tmp_path / "t.lance", fsync=False)
    refs = _history(store)
    uri = str(tmp_path / "t.lance")
    code = main(
        ["cleanup", uri, "--older-than", "0", "--keep-versions", "2", "--dry-run", "--json"]
    )
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["dry_run"] is True
    assert data["removed_versions"] == [1, 2, 3]
    assert data["kept_versions"] == [4, 5]
    assert _versions(store) == [1, 2, 3, 4, 5]
    code = main(["cleanup", uri, "--older-than", "0s", "--orphan-retention", "1d"])
    out = capsys.readouterr().out
    assert code == 0
    assert "removing versions 1..4" in out
    assert "deleted" in out
    assert _versions(store) == [5]
    assert refs[4] <= _all_files(store)
    assert main(["cleanup", uri, "--older-than", "7x"]) == 2
    assert main(["cleanup", uri, "--older-than", "1d", "--keep-versions", "0"]) == 1
    assert "keep_versions" in capsys.readouterr().err


def test_verify_tells_cleaned_up_history_from_damage() -> None:
    from txn_engine.verify import verify

    store = MemoryStorage()
    _history(store)
    store.put("_refs/tags/t.json", json.dumps({"branch": None, "version": 2}).encode())
    cleanup(store, older_than=ZERO, keep_versions=2, progress=False)
    assert _versions(store) == [2, 4, 5]
    report = verify(store)
    assert report.ok, report.findings
    assert [(f.invariant, f.severity) for f in report.findings] == [
        ("cleaned-up", "info"),
        ("cleaned-up", "info"),
    ]
    assert report.infos == report.findings
    assert report.warnings == ()
    assert report.to_json()["infos"] == 2
    assert str(report.findings[0]).startswith("info: v2: cleaned-up")
    # the gap cleanup left stays cleaned up once the tag goes (cleanup recorded it,
    # tests/unit/test_gaps.py); a gap above an unpinned version nothing recorded is damage
    store.delete("_refs/tags/t.json")
    assert verify(store).ok
    for name in store.list("_txn_engine/gaps"):
        store.delete(f"_txn_engine/gaps/{name}")
    report = verify(store)
    assert not report.ok
    assert [f.invariant for f in report.errors] == ["no-gaps"]
    # removing a version in the middle of an untouched history is damage too
    other = MemoryStorage()
    _history(other)
    other.delete(resolve_version(other, 3).path)
    assert [f.invariant for f in verify(other).errors] == ["no-gaps"]


def test_a_live_writers_lease_keeps_every_unreferenced_file_until_it_goes(
    tmp_path: Path,
) -> None:
    """Cleanup cannot tell a lease holder's uncommitted files from other orphans, and no
    clock (neither the writer's nor a listed modification time) decides it: while a
    writer's lease it read at its start is live, it deletes no unreferenced file at all."""
    store = LocalStorage(tmp_path / "t.lance", fsync=False)
    _history(store)
    held = Lease(store, 5, ttl=600.0, owner="w", renew_in_background=False)
    store.put("data/before.lance", b"b")
    store.put("data/in-flight.lance", b"i")
    old = time.time() - 10 * 86400
    os.utime(store.full_path("data/before.lance"), (old, old))
    report = cleanup(store, older_than=ZERO, retention_orphans=ZERO, progress=False,
                     wait_for_writers=ZERO)  # fmt: skip
    assert isinstance(report, CleanupReport)
    assert store.exists("data/before.lance")
    assert store.exists("data/in-flight.lance")  # the lease holder may still commit it
    assert report.kept_for_new_leases >= 2
    assert {d.path for d in plan_cleanup(store, older_than=ZERO, retention_orphans=ZERO).deletes
            }.isdisjoint({"data/before.lance", "data/in-flight.lance"})  # fmt: skip
    held.release()
    cleanup(store, older_than=ZERO, retention_orphans=ZERO, progress=False)
    assert not store.exists("data/before.lance")
    assert not store.exists("data/in-flight.lance")


def test_a_readers_lease_pins_versions_but_no_files() -> None:
    store = MemoryStorage()
    refs = _history(store)
    store.put("data/orphan.lance", b"o")
    with Lease(store, 2, ttl=600.0, owner="r", writes=False, renew_in_background=False):
        cleanup(store, older_than=ZERO, retention_orphans=ZERO, progress=False)
        assert _versions(store) == [2, 3, 4, 5]
        assert refs[1] <= _all_files(store)
        assert not store.exists("data/orphan.lance")


def test_cleanup_waits_a_little_for_a_writer_that_is_about_to_finish() -> None:
    store = MemoryStorage()
    _history(store)
    store.put("data/orphan.lance", b"o")
    held = Lease(store, 5, ttl=600.0, owner="w", renew_in_background=False)
    reads = [0]
    original = store.list

    def listing(prefix: str) -> list[str]:
        if prefix == LEASES_DIR:
            reads[0] += 1
            if reads[0] == 4:  # the writer finishes while cleanup waits for it
                held.release()
        return list(original(prefix))

    store.list = listing  # type: ignore[method-assign]
    report = cleanup(store, older_than=ZERO, retention_orphans=ZERO, progress=False)
    assert isinstance(report, CleanupReport)
    assert not store.exists("data/orphan.lance")
    assert reads[0] >= 4


def test_lease_clock_stamps_the_object() -> None:
    store = MemoryStorage()
    _history(store)
    held = Lease(store, 3, ttl=2.0, owner="w", renew_in_background=False,
                 clock=ManualClock(now_ns=10 * NS))  # fmt: skip
    (obj,) = [json.loads(store.get(f"{LEASES_DIR}/{n}")) for n in store.list(LEASES_DIR)]
    assert obj["created_at_ns"] == 10 * NS
    assert obj["expires_at_ns"] == 12 * NS
    held.release()


class _Hooked(MemoryStorage):
    """Runs ``hook`` once, right after the first manifest delete."""

    def __init__(self) -> None:
        super().__init__()
        self.hook: Callable[[], None] | None = None
        self.seen_markers: list[list[str]] = []

    def delete(self, path: str) -> None:
        super().delete(path)
        if path.startswith("_versions/"):
            self.seen_markers.append(list(self.list(CLEANING_DIR)))
            hook, self.hook = self.hook, None
            if hook is not None:
                hook()


def test_manifests_are_deleted_under_a_marker_that_is_removed_after() -> None:
    store = _Hooked()
    _history(store)
    cleanup(store, older_than=ZERO, progress=False)
    assert len(store.seen_markers) == 4
    assert all(len(m) == 1 for m in store.seen_markers)
    assert store.list(CLEANING_DIR) == []


def test_a_version_that_lands_during_cleanup_keeps_its_orphan_files() -> None:
    """An in-flight writer's file is an orphan when cleanup lists; the writer commits (and
    releases its lease) before the file deletes: the re-listing keeps the file."""
    store = _Hooked()
    _history(store)
    store.put("data/in-flight.lance", b"x")
    frag = Fragment(0, (DataFile("in-flight.lance", (0,), (0,), 2, 2, 1),), 5)
    store.hook = lambda: commit(store, Transaction(5, Append([frag])))
    report = cleanup(store, older_than=ZERO, retention_orphans=ZERO, progress=False)
    assert isinstance(report, CleanupReport)
    assert "data/in-flight.lance" in {d.path for d in report.plan.deletes}
    assert store.exists("data/in-flight.lance")
    assert _versions(store) == [5, 6]


class _Stalling(MemoryStorage):
    """Advances ``clock`` by ``pause`` seconds on the first manifest delete (the cleanup
    process stalls right there: a GC pause, a stopped VM)."""

    def __init__(self, clock: ManualClock, pause: float) -> None:
        super().__init__()
        self.clock, self.pause = clock, pause

    def delete(self, path: str) -> None:
        super().delete(path)
        if path.startswith("_versions/") and self.pause:
            self.clock.advance(self.pause)
            self.pause = 0.0


def test_a_cleanup_that_stalled_long_enough_to_lose_its_marker_stops_deleting() -> None:
    """Another cleanup removes a marker unchanged for MARKER_STALE_NS, and lease takers miss
    it from then on: a cleanup that stalled half that long deletes no more manifests and
    no unreferenced file (it may have listed a file whose writer missed its marker)."""
    clock = ManualClock(now_ns=time.time_ns() + 60 * NS)
    store = _Stalling(clock, pause=MARKER_STALE_NS / NS / 2)
    refs = _history(store)
    store.put("data/orphan.lance", b"o")
    report = cleanup(store, older_than=ZERO, retention_orphans=ZERO, progress=False, clock=clock)
    assert isinstance(report, CleanupReport)
    assert report.plan.removed_versions == (1, 2, 3, 4)
    assert _versions(store) == [2, 3, 4, 5]  # the first delete, then it stopped
    assert store.exists("data/orphan.lance")
    assert refs[1] | refs[2] <= _all_files(store)
    # a shorter pause (the marker is rewritten every BEAT_SECONDS) changes nothing
    clock2 = ManualClock(now_ns=time.time_ns() + 60 * NS)
    store2 = _Stalling(clock2, pause=MARKER_STALE_NS / NS / 2 - 1)
    _history(store2)
    store2.put("data/orphan.lance", b"o")
    cleanup(store2, older_than=ZERO, retention_orphans=ZERO, progress=False, clock=clock2)
    assert _versions(store2) == [5]
    assert not store2.exists("data/orphan.lance")


@pytest.mark.parametrize("unlink_at", [True, False], ids=["dir-fd", "whole-paths"])
def test_local_delete_many_across_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unlink_at: bool
) -> None:
    import txn_engine.retention._delete as delete_module

    monkeypatch.setattr(delete_module, "_UNLINK_AT", unlink_at)  # False: as on Windows
    store = LocalStorage(tmp_path)
    for path in ("data/a.lance", "_indices/u1/x", "_indices/u1/y", "_indices/u2/z"):
        store.put(path, b"1")
    failures = delete_many(
        store,
        ["data/a.lance", "_indices/u1/x", "_indices/u2/z", "data/missing", "gone/dir/f", "../up"],
    )
    assert [p for p, _ in failures] == ["../up"]  # an invalid path is reported, not deleted
    assert _local_files(tmp_path) == {"_indices/u1/y"}
    assert delete_many(store, ["_indices/u1"]) == []  # a directory is never removed
    assert _local_files(tmp_path) == {"_indices/u1/y"}


def test_local_delete_does_not_follow_a_symlinked_parent_directory(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.lance").write_bytes(b"v")
    root = tmp_path / "t.lance"
    root.mkdir()
    (root / "data").symlink_to(outside, target_is_directory=True)
    failures = delete_many(LocalStorage(root), ["data/victim.lance"])
    assert [p for p, _ in failures] == ["data/victim.lance"]
    assert (outside / "victim.lance").exists()


def _local_files(root: Path) -> set[str]:
    return {str(p.relative_to(root)).replace(os.sep, "/") for p in root.rglob("*") if p.is_file()}


def test_offers_whose_window_has_passed_are_removed_live_ones_kept() -> None:
    """An offer (``_txn_engine_offers/{last version}-{uuid}.txn``) is removed once the
    latest version is at or above the last version it may land in; a live one, and any
    other file in that directory, is kept whatever the retention."""
    from txn_engine.contention.offers import OFFERS_DIR, offer_name

    store = MemoryStorage()
    _history(store)  # latest is 5
    # plain names and names carrying the offer itself (base64url, as on object stores)
    dead = [
        f"{OFFERS_DIR}/{offer_name(v, str(uuid.uuid4()), i)}" for v, i in ((2, None), (5, b"t"))
    ]
    live = [
        f"{OFFERS_DIR}/{offer_name(v, str(uuid.uuid4()), i)}" for v, i in ((6, b"t"), (13, None))
    ]
    other = f"{OFFERS_DIR}/notes.txt"
    for path in (*dead, *live, other):
        store.put(path, b"x")
    plan = cleanup(store, older_than=ZERO, retention_orphans=ZERO, dry_run=True, progress=False)
    assert isinstance(plan, CleanupPlan)
    assert sorted(d.path for d in plan.deletes if d.reason == "offer") == sorted(dead)
    assert plan.counts["offer"] == 2
    assert "2 expired offers" in plan.summary()
    cleanup(store, older_than=ZERO, retention_orphans=ZERO, progress=False)
    left = sorted(f"{OFFERS_DIR}/{n}" for n in store.list(OFFERS_DIR))
    assert left == sorted([*live, other])


def test_expired_carrier_beacons_are_removed_live_ones_kept() -> None:
    """A carrier's beacon (``_versions/.txn-engine-carrier-{expiry ms}-{token}``) is
    removed once it has expired; a live one is kept, and so is every version."""
    from txn_engine.format.naming import beacon_name

    store = MemoryStorage()
    _history(store)
    now_ns = time.time_ns()
    now_ms = now_ns // 1_000_000
    expired = f"_versions/{beacon_name(now_ms - 1, uuid.uuid4().hex)}"
    live = f"_versions/{beacon_name(now_ms + 60_000, uuid.uuid4().hex)}"
    for path in (expired, live):
        store.put(path, b"")
    versions = sorted(store.list("_versions"))
    plan = cleanup(
        store, older_than=ZERO, keep_versions=100, dry_run=True, progress=False, now_ns=now_ns
    )
    assert isinstance(plan, CleanupPlan)
    assert [d.path for d in plan.deletes] == [expired]
    assert plan.counts["beacon"] == 1
    assert "1 expired carrier beacons" in plan.summary()
    cleanup(store, older_than=ZERO, keep_versions=100, progress=False, now_ns=now_ns)
    assert sorted(store.list("_versions")) == sorted(set(versions) - {expired.split("/")[1]})


def test_carrier_claims_of_versions_before_the_latest_are_removed() -> None:
    """A claim to host a carrier (``_txn_engine_hosts/{version}.claim``) is read only by
    the writers that lost the race to that version: it is removed once a newer version
    exists; the latest's, and any other file there, is kept whatever the retention."""
    from txn_engine.contention.offers import HOSTS_DIR, claim_name

    store = MemoryStorage()
    _history(store)  # latest is 5
    old = [f"{HOSTS_DIR}/{claim_name(v)}" for v in (1, 4)]
    kept = [f"{HOSTS_DIR}/{claim_name(5)}", f"{HOSTS_DIR}/notes.txt"]
    for path in (*old, *kept):
        store.put(path, b"token")
    plan = cleanup(store, older_than=ZERO, keep_versions=100, dry_run=True, progress=False)
    assert isinstance(plan, CleanupPlan)
    assert sorted(d.path for d in plan.deletes) == sorted(old)
    assert plan.counts["claim"] == 2
    assert "2 old carrier claims" in plan.summary()
    cleanup(store, older_than=ZERO, keep_versions=100, progress=False)
    assert sorted(f"{HOSTS_DIR}/{n}" for n in store.list(HOSTS_DIR)) == sorted(kept)


@pytest.mark.parametrize(("name", "file_name"), [("é", "%C3%A9.json"), ("a/é", "a%2F%C3%A9.json")])
def test_a_branch_pylance_percent_encodes_keeps_the_files_it_references(
    tmp_path: Path, name: str, file_name: str
) -> None:
    """The branch's file name is decoded as pylance encodes it (``_refs/branches/%C3%A9.json``
    is the branch ``é``, whose versions are under ``tree/é/``), so its manifests are read."""
    root = tmp_path / "t.lance"
    store = LocalStorage(root, fsync=False)
    refs = _history(store)
    shared = next(iter(refs[1]))  # a file of version 2, overwritten by version 3
    branch = LocalStorage(root / "tree" / name, fsync=False)
    base = BasePath(0, str(root), is_dataset_root=True)
    frag = Fragment(0, (DataFile(shared.split("/", 1)[1], (0,), (0,), 2, 2, 10, 0),), 5)
    commit(branch, Transaction(0, Overwrite([frag], SCHEMA, initial_bases=(base,))))
    store.put(f"_refs/branches/{file_name}", json.dumps({"parentBranch": "x"}).encode())
    report = cleanup(store, older_than=ZERO, retention_orphans=ZERO, progress=False)
    assert isinstance(report, CleanupReport)
    assert _versions(store) == [5]
    assert store.exists(shared)
    # and a branch manifest cleanup cannot read stops it, as the main line's do
    (root / "tree" / name / "_versions" / "18446744073709551613.manifest").write_bytes(b"junk")
    with pytest.raises(CleanupAbortedError) as caught:
        cleanup(store, older_than=ZERO, retention_orphans=ZERO, progress=False)
    assert caught.value.path == f"tree/{name}/_versions/18446744073709551613.manifest"


@pytest.mark.parametrize("file_name", ["..%2F..%2Fx.json", "%FF.json", "%c3%a9.json"])
def test_a_branch_file_pylance_could_not_have_written_aborts_naming_it(file_name: str) -> None:
    store = MemoryStorage()
    _history(store)
    before = {o.path for o in list_objects(store, "data")}
    path = f"_refs/branches/{file_name}"
    store.put(path, json.dumps({"parentBranch": None, "parentVersion": 1}).encode())
    with pytest.raises(CleanupAbortedError) as caught:
        cleanup(store, older_than=ZERO, retention_orphans=ZERO, progress=False)
    assert caught.value.path == path
    assert file_name in str(caught.value)
    assert _versions(store) == [1, 2, 3, 4, 5]
    assert {o.path for o in list_objects(store, "data")} == before
