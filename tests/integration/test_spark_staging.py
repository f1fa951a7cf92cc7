"""Staging records, markers, finalisation and the sweep (no Spark needed).

Transactions that "landed" are committed with pylance 14.0.2 (carrying the uuid and write
id a Spark write would), so these tests check the clean-up logic against real histories.
"""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import emulators as emu
import lance
import pyarrow as pa
import pytest

from txn_engine.spark import STAGING_DIR, WRITE_ID_PROPERTY, sweep_staged_writes
from txn_engine.spark import _staging as st
from txn_engine.storage import LocalStorage

DAY = 24 * 3600.0


def _dataset(tmp_path: Path) -> str:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"id": pa.array([0], pa.int64())}), uri)
    return uri


def _fragments(uri: str, n: int) -> list[lance.FragmentMetadata]:
    table = pa.table({"id": pa.array(range(1, n + 1), pa.int64())})
    return lance.fragment.write_fragments(table, uri, max_rows_per_file=1)


def _paths(fragments: list[lance.FragmentMetadata]) -> list[str]:
    return [f.data_files()[0].path for f in fragments]


def _land(uri: str, fragments: list[lance.FragmentMetadata], uuid: str, write_id: str) -> int:
    txn = lance.Transaction(
        1,
        lance.LanceOperation.Append(fragments),
        uuid=uuid,
        transaction_properties={WRITE_ID_PROPERTY: write_id},
    )
    return lance.LanceDataset.commit(uri, txn, read_version=1).version


def _data(uri: str) -> set[str]:
    return set(os.listdir(os.path.join(uri, "data")))


def _staged(uri: str) -> list[str]:
    path = os.path.join(uri, STAGING_DIR)
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


def test_write_key_encodes_its_age() -> None:
    key = st.new_write_key(now=1_700_000_000.5)
    assert key.startswith("1700000000500-")
    assert st.key_time(key) == pytest.approx(1_700_000_000.5)
    assert st.key_time("junk") is None


def test_list_staging_groups_markers_and_records(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path))
    st.write_record(storage, "k1", {"uuid": "u"})
    st.put_markers(storage, "k1", ["a.lance", "b.lance"])
    st.put_markers(storage, "k2", ["odd name%/x.lance", "c.lance"])
    staged = st.list_staging(storage)
    assert staged["k1"] == st.StagedWrite("k1", True, frozenset({"a.lance", "b.lance"}))
    # a marker whose name is no data file name claims nothing: it is junk to remove
    assert staged["k2"] == st.StagedWrite(
        "k2", False, frozenset({"c.lance"}), frozenset({"k2~odd%20name%25%2Fx.lance"})
    )
    assert st.read_record(storage, "k1") == {"uuid": "u"}
    assert st.read_record(storage, "missing") is None


def test_finalize_keeps_referenced_files_and_clears_staging(tmp_path: Path) -> None:
    uri = _dataset(tmp_path)
    storage = LocalStorage(uri)
    names = _paths(_fragments(uri, 3))
    st.write_record(storage, "k", {"uuid": "u", "read_version": 1})
    st.put_markers(storage, "k", names)
    stats = st.finalize(storage, "k", keep=names[:1])
    assert (stats.files_removed, stats.failures) == (2, 0)
    assert names[0] in _data(uri)
    assert not set(names[1:]) & _data(uri)
    assert _staged(uri) == []


def test_finalize_keeps_markers_and_record_when_a_delete_fails(tmp_path: Path) -> None:
    uri = _dataset(tmp_path)
    names = _paths(_fragments(uri, 2))

    class FailingDelete(LocalStorage):
        def delete(self, path: str) -> None:
            if path == f"data/{names[0]}":
                raise OSError("injected")
            super().delete(path)

    storage = FailingDelete(uri)
    st.write_record(storage, "k", {"uuid": "u", "read_version": 1})
    st.put_markers(storage, "k", names)
    stats = st.finalize(storage, "k", keep=())
    assert (stats.files_removed, stats.failures) == (1, 1)
    # the marker of the file that could not be deleted and the record stay for the sweep
    assert _staged(uri) == sorted(
        [os.path.basename(st.record_path("k")), os.path.basename(st.marker_path("k", names[0]))]
    )


def test_sweep_removes_stragglers_and_dead_writes_only_when_old(tmp_path: Path) -> None:
    uri = _dataset(tmp_path)
    storage = LocalStorage(uri)
    now = time.time()
    old, young = st.new_write_key(now=now - 2 * DAY), st.new_write_key(now=now - 60)
    straggler, dead, fresh = (_paths(_fragments(uri, 1)) for _ in range(3))
    _set_mtime(uri, straggler, now - 2 * DAY + 60)  # files written after their plan
    _set_mtime(uri, dead, now - 3 * DAY + 60)
    st.put_markers(storage, old, straggler)  # no record: written after finalisation
    dead_key = st.new_write_key(now=now - 3 * DAY)  # driver died, never landed
    st.write_record(storage, dead_key, {"uuid": "never", "read_version": 1, "write_id": "w"})
    st.put_markers(storage, dead_key, dead)
    st.write_record(storage, young, {"uuid": "y", "read_version": 1, "write_id": "y"})
    st.put_markers(storage, young, fresh)  # in flight: must survive
    result = st.sweep(storage, older_than_seconds=DAY, now=now)
    assert (result.writes_finalized, result.files_removed, result.skipped) == (2, 2, 0)
    assert fresh[0] in _data(uri)
    assert not {straggler[0], dead[0]} & _data(uri)
    assert {n.split("~")[0].split(".")[0] for n in _staged(uri)} == {young}


def test_sweep_keeps_files_of_a_write_that_landed(tmp_path: Path) -> None:
    uri = _dataset(tmp_path)
    storage = LocalStorage(uri)
    frags = _fragments(uri, 3)
    names = _paths(frags)
    key = st.new_write_key(now=1_000.0)
    st.write_record(
        storage,
        key,
        {"uuid": "6f1c7b8e-0000-4000-8000-000000000001", "read_version": 1, "write_id": "w-1"},
    )
    st.put_markers(storage, key, names)
    version = _land(uri, frags[:2], "6f1c7b8e-0000-4000-8000-000000000001", "w-1")
    result = sweep_staged_writes(uri, older_than_seconds=0)
    assert (result.writes_finalized, result.files_removed) == (1, 1)
    assert set(names[:2]) <= _data(uri)
    assert names[2] not in _data(uri)
    ds = lance.dataset(uri)
    assert ds.version == version
    assert ds.count_rows() == 3
    assert _staged(uri) == []


def test_find_landed_matches_uuid(tmp_path: Path) -> None:
    uri = _dataset(tmp_path)
    storage = LocalStorage(uri)
    frags = _fragments(uri, 1)
    uuid = "6f1c7b8e-0000-4000-8000-000000000002"
    version = _land(uri, frags, uuid, "job-9")
    by_uuid = st.find_landed(storage, uuid, after_version=1)
    assert by_uuid is not None
    assert by_uuid.version == version
    assert st.transaction_data_files(by_uuid.transaction) == set(_paths(frags))
    # a write is its uuid (Spark derives it from the write id), found by
    # txn_engine.commit.find_transaction; another uuid is not it
    assert st.find_landed(storage, "other", after_version=0) is None
    assert st.find_landed(storage, uuid, after_version=version) is None
    assert st.find_landed(LocalStorage(str(tmp_path / "none")), uuid, after_version=0) is None


def test_record_is_json(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path))
    st.write_record(storage, "k", {"read_version": 3, "uuid": "u"})
    raw = (tmp_path / STAGING_DIR / "k.write").read_text()
    assert json.loads(raw) == {"read_version": 3, "uuid": "u"}


def test_straggling_attempt_cleans_up_after_itself(tmp_path: Path) -> None:
    uri = _dataset(tmp_path)
    storage = LocalStorage(uri)
    on_time, late = _paths(_fragments(uri, 1)), _paths(_fragments(uri, 1))
    st.write_record(storage, "k", {"uuid": "u", "read_version": 1})
    st.put_markers(storage, "k", on_time)
    assert st.task_finished(storage, "k", on_time) is False  # write still open
    st.finalize(storage, "k", keep=on_time)
    # an attempt that marks its files after the write was finalised removes them itself
    st.put_markers(storage, "k", late)
    assert st.task_finished(storage, "k", late) is True
    assert on_time[0] in _data(uri)
    assert late[0] not in _data(uri)
    assert _staged(uri) == []


def test_finalize_second_pass_catches_markers_written_during_finalisation(
    tmp_path: Path,
) -> None:
    uri = _dataset(tmp_path)
    late = _paths(_fragments(uri, 1))

    class MarkerDuringFinalize(LocalStorage):
        """Simulates an attempt that marks its file (and checks the record) just before
        the record is deleted."""

        def delete(self, path: str) -> None:
            if path == st.record_path("k"):
                st.put_markers(self, "k", late)
                assert st.task_finished(self, "k", late) is False
            super().delete(path)

    storage = MarkerDuringFinalize(uri)
    st.write_record(storage, "k", {"uuid": "u", "read_version": 1})
    stats = st.finalize(storage, "k", keep=())
    assert (stats.files_removed, stats.failures) == (1, 0)
    assert late[0] not in _data(uri)
    assert _staged(uri) == []


# --------------------------------------------------------------------------- issue 11
# The sweep must never delete a file a kept version references, must treat missing history
# as "unknown", and markers must not steer deletes (forged, traversing, symlinked paths).


def _live(uri: str) -> set[str]:
    """Data files the latest version references (as pylance reads them)."""
    return {f.path for frag in lance.dataset(uri).get_fragments() for f in frag.data_files()}


def _set_mtime(uri: str, names: list[str], when: float) -> None:
    for name in names:
        os.utime(os.path.join(uri, "data", name), (when, when))


def _dead_write(
    storage: LocalStorage, uri: str, planned: float, names: list[str], **rec: object
) -> str:
    """The staging trail of a write planned at ``planned`` whose driver died: a record and
    one marker per file; the files' mtimes put them just after the plan."""
    key = st.new_write_key(now=planned)
    st.write_record(storage, key, {"read_version": 1, "write_id": "w", **rec})
    st.put_markers(storage, key, names)
    _set_mtime(uri, names, planned + 60)
    return key


def test_sweep_keeps_a_landed_write_whose_version_was_cleaned_up(tmp_path: Path) -> None:
    """Finding 2: land, driver dies, pylance appends and cleans up (the landed version is
    gone), the next sweep must keep the files the latest version references."""
    uri = _dataset(tmp_path)
    storage = LocalStorage(uri)
    frags = _fragments(uri, 2)
    names = _paths(frags)
    uuid = "6f1c7b8e-0000-4000-8000-000000000011"
    now = time.time()
    _dead_write(storage, uri, now - 2 * DAY, names, uuid=uuid, write_id="w-11")
    assert _land(uri, frags, uuid, "w-11") == 2
    lance.write_dataset(pa.table({"id": pa.array([99], pa.int64())}), uri, mode="append")
    lance.dataset(uri).cleanup_old_versions(older_than=timedelta(0))
    assert [v["version"] for v in lance.dataset(uri).versions()] == [3]
    result = st.sweep(storage, older_than_seconds=DAY, write_id_property=WRITE_ID_PROPERTY)
    assert result.files_removed == 0
    assert set(names) <= _data(uri)
    assert lance.dataset(uri).to_table()["id"].to_pylist() == [0, 1, 2, 99]


def test_sweep_keeps_files_when_history_since_the_read_version_is_missing(
    tmp_path: Path,
) -> None:
    """Missing history is "unknown": a version between the write's read version and the
    latest is gone, so whether the write landed cannot be told; nothing is deleted."""
    uri = _dataset(tmp_path)
    storage = LocalStorage(uri)
    names = _paths(_fragments(uri, 2))  # referenced by no version
    now = time.time()
    key = _dead_write(
        storage, uri, now - 2 * DAY, names, uuid="6f1c7b8e-0000-4000-8000-000000000012"
    )
    for i in (7, 8):
        lance.write_dataset(pa.table({"id": pa.array([i], pa.int64())}), uri, mode="append")
    lance.dataset(uri).cleanup_old_versions(older_than=timedelta(0))
    assert [v["version"] for v in lance.dataset(uri).versions()] == [3]
    result = st.sweep(storage, older_than_seconds=DAY, write_id_property=WRITE_ID_PROPERTY)
    assert result.files_removed == 0
    assert set(names) <= _data(uri)
    # the outcome can never be learnt (missing versions do not come back): the staging
    # trail is released, the files are left to Lance's own orphan clean-up
    assert result.files_kept == 2
    assert not [n for n in _staged(uri) if n.startswith(key)]


def test_forged_marker_cannot_delete_a_file_of_the_latest_version(tmp_path: Path) -> None:
    """Finding 4: an empty marker (no record) named after a live data file."""
    uri = _dataset(tmp_path)
    storage = LocalStorage(uri)
    live = sorted(_live(uri))
    st.put_markers(storage, st.new_write_key(now=time.time() - 5 * DAY), live)
    result = sweep_staged_writes(uri, older_than_seconds=0)
    assert result.files_removed == 0
    assert set(live) <= _data(uri)
    assert lance.dataset(uri).count_rows() == 1
    assert _staged(uri) == []  # the forged marker itself is gone


def test_forged_marker_cannot_delete_a_file_of_an_older_kept_version(tmp_path: Path) -> None:
    uri = _dataset(tmp_path)
    storage = LocalStorage(uri)
    old = sorted(_live(uri))
    lance.write_dataset(pa.table({"id": pa.array([5], pa.int64())}), uri, mode="overwrite")
    st.put_markers(storage, st.new_write_key(now=time.time() - 5 * DAY), old)
    assert sweep_staged_writes(uri, older_than_seconds=0).files_removed == 0
    assert lance.dataset(uri, version=1).to_table()["id"].to_pylist() == [0]


def test_forged_marker_cannot_delete_a_tagged_or_branched_file(tmp_path: Path) -> None:
    uri = _dataset(tmp_path)
    storage = LocalStorage(uri)
    lance.write_dataset(pa.table({"id": pa.array([1], pa.int64())}), uri, mode="append")
    ds = lance.dataset(uri)
    tagged = sorted(_live(uri))
    ds.tags.create("keep", 2)
    branch = ds.create_branch("feat/x", 2)
    lance.write_dataset(pa.table({"id": pa.array([2], pa.int64())}), branch, mode="append")
    on_branch = sorted(
        {f.path for frag in lance.dataset(branch.uri).get_fragments() for f in frag.data_files()}
    )
    lance.write_dataset(pa.table({"id": pa.array([9], pa.int64())}), uri, mode="overwrite")
    st.put_markers(storage, st.new_write_key(now=time.time() - 5 * DAY), tagged + on_branch)
    assert sweep_staged_writes(uri, older_than_seconds=0).files_removed == 0
    assert lance.dataset(uri, version="keep").to_table()["id"].to_pylist() == [0, 1]
    assert sorted(lance.dataset(branch.uri).to_table()["id"].to_pylist()) == [0, 1, 2]


def test_forged_marker_cannot_steer_a_commits_clean_up(tmp_path: Path) -> None:
    """A marker under a live write's key (the key is visible in its record's name) naming
    a live data file: the write's own finalisation after its commit must keep the file."""
    uri = _dataset(tmp_path)
    storage = LocalStorage(uri)
    live = sorted(_live(uri))
    mine = _paths(_fragments(uri, 1))
    st.write_record(storage, "k", {"uuid": "u", "read_version": 1})
    st.put_markers(storage, "k", mine + live)
    stats = st.finalize(storage, "k", keep=mine)
    assert (stats.files_removed, stats.failures) == (0, 0)
    assert set(live + mine) <= _data(uri)
    assert lance.dataset(uri).count_rows() == 1
    assert _staged(uri) == []


@pytest.mark.parametrize(
    "name",
    ["../victim.lance", "sub/x.lance", "/tmp/abs.lance", "s3://bucket/x.lance", "", ".", ".."],
)
def test_marker_paths_are_validated(tmp_path: Path, name: str) -> None:
    uri = _dataset(tmp_path)
    victims = [Path(uri) / "victim.lance", Path(uri) / "data" / "sub" / "x.lance"]
    for victim in victims:
        victim.parent.mkdir(parents=True, exist_ok=True)
        victim.write_bytes(b"not yours")
    key = st.new_write_key(now=time.time() - 5 * DAY)
    (Path(uri) / STAGING_DIR).mkdir(parents=True, exist_ok=True)
    marker = Path(uri) / STAGING_DIR / f"{key}~{quote(name, safe='')}"
    marker.write_bytes(b"")
    result = sweep_staged_writes(uri, older_than_seconds=0)
    assert result.files_removed == 0
    assert all(v.exists() for v in victims)
    assert not marker.exists()


def test_sweep_never_deletes_through_a_symlinked_data_dir(tmp_path: Path) -> None:
    uri = _dataset(tmp_path)
    outside = tmp_path / "outside"
    os.rename(os.path.join(uri, "data"), outside)
    os.symlink(outside, os.path.join(uri, "data"))
    (outside / "precious.lance").write_bytes(b"outside the table")
    st.put_markers(
        LocalStorage(uri), st.new_write_key(now=time.time() - 5 * DAY), ["precious.lance"]
    )
    assert sweep_staged_writes(uri, older_than_seconds=0).files_removed == 0
    assert (outside / "precious.lance").read_bytes() == b"outside the table"


def test_sweep_never_deletes_a_symlinked_data_file(tmp_path: Path) -> None:
    uri = _dataset(tmp_path)
    target = tmp_path / "elsewhere.lance"
    target.write_bytes(b"x")
    link = Path(uri) / "data" / "link.lance"
    os.symlink(target, link)
    st.put_markers(LocalStorage(uri), st.new_write_key(now=time.time() - 5 * DAY), ["link.lance"])
    assert sweep_staged_writes(uri, older_than_seconds=0).files_removed == 0
    assert link.is_symlink()
    assert target.exists()


def test_file_claimed_by_two_writes_is_kept(tmp_path: Path) -> None:
    """A forged old marker naming the file of a write still in flight (young record and its
    own marker): the old key cannot prove the file is its own."""
    uri = _dataset(tmp_path)
    storage = LocalStorage(uri)
    now = time.time()
    inflight = _paths(_fragments(uri, 1))
    young = st.new_write_key(now=now - 60)
    st.write_record(storage, young, {"uuid": "y", "read_version": 1, "write_id": "y"})
    st.put_markers(storage, young, inflight)
    _set_mtime(uri, inflight, now - 2 * DAY)  # even an old-looking file
    st.put_markers(storage, st.new_write_key(now=now - 3 * DAY), inflight)
    assert st.sweep(storage, older_than_seconds=DAY).files_removed == 0
    assert inflight[0] in _data(uri)


def test_sweep_keeps_files_younger_than_the_retention_or_older_than_their_write(
    tmp_path: Path,
) -> None:
    """Where the store tells a file's age, an old write can only own files created after
    it was planned and before the retention cut-off."""
    uri = _dataset(tmp_path)
    storage = LocalStorage(uri)
    now = time.time()
    young, older, own = (_paths(_fragments(uri, 1)) for _ in range(3))
    key = st.new_write_key(now=now - 3 * DAY)
    st.put_markers(storage, key, young + older + own)  # straggler markers, no record
    _set_mtime(uri, young, now - 60)
    _set_mtime(uri, older, now - 10 * DAY)
    _set_mtime(uri, own, now - 3 * DAY + 60)
    result = st.sweep(storage, older_than_seconds=DAY)
    assert result.files_removed == 1
    assert own[0] not in _data(uri)
    assert {young[0], older[0]} <= _data(uri)


def test_an_unreadable_kept_version_stops_every_delete(tmp_path: Path) -> None:
    uri = _dataset(tmp_path)
    storage = LocalStorage(uri)
    orphan = _paths(_fragments(uri, 1))
    key = st.new_write_key(now=time.time() - 5 * DAY)
    st.put_markers(storage, key, orphan)  # straggler markers: the file is unreferenced
    detached = Path(uri) / "_versions" / "d9223372036854775809.manifest"
    detached.write_bytes(b"not a manifest")
    result = sweep_staged_writes(uri, older_than_seconds=0)
    assert (result.files_removed, result.skipped) == (0, 1)
    assert orphan[0] in _data(uri)
    assert _staged(uri)  # the trail stays for a later sweep
    detached.unlink()
    assert sweep_staged_writes(uri, older_than_seconds=0).files_removed == 1
    assert orphan[0] not in _data(uri)


def test_a_tag_naming_a_missing_version_stops_every_delete(tmp_path: Path) -> None:
    uri = _dataset(tmp_path)
    storage = LocalStorage(uri)
    orphan = _paths(_fragments(uri, 1))
    st.put_markers(storage, st.new_write_key(now=time.time() - 5 * DAY), orphan)
    storage.put("_refs/tags/gone.json", json.dumps({"branch": None, "version": 7}).encode())
    result = sweep_staged_writes(uri, older_than_seconds=0)
    assert (result.files_removed, result.skipped) == (0, 1)
    assert orphan[0] in _data(uri)


def test_a_branch_without_its_reference_still_protects_its_files(tmp_path: Path) -> None:
    """A branch dataset under ``tree/`` is found on local disk even before (or without)
    its ``_refs/branches`` JSON; the files its manifests reference are kept."""
    uri = _dataset(tmp_path)
    storage = LocalStorage(uri)
    ds = lance.dataset(uri)
    source = sorted(_live(uri))
    branch = ds.create_branch("b1", 1)
    lance.write_dataset(pa.table({"id": pa.array([5], pa.int64())}), uri, mode="overwrite")
    # only the branch still references the version-1 files of the main line
    for name in os.listdir(os.path.join(uri, "_versions")):
        if name == "18446744073709551614.manifest":
            os.unlink(os.path.join(uri, "_versions", name))
    for name in os.listdir(os.path.join(uri, "_refs", "branches")):
        os.unlink(os.path.join(uri, "_refs", "branches", name))
    st.put_markers(storage, st.new_write_key(now=time.time() - 5 * DAY), source)
    assert sweep_staged_writes(uri, older_than_seconds=0).files_removed == 0
    assert lance.dataset(branch.uri).to_table()["id"].to_pylist() == [0]


def test_fsspec_local_storage_follows_the_same_rules(tmp_path: Path) -> None:
    import fsspec

    from txn_engine.storage.fsspec_store import FsspecStorage

    uri = _dataset(tmp_path)
    storage = FsspecStorage(fsspec.filesystem("file"), uri)
    now = time.time()
    live = sorted(_live(uri))
    dead = _paths(_fragments(uri, 1))
    _dead_write(storage, uri, now - 2 * DAY, dead, uuid="6f1c7b8e-0000-4000-8000-000000000013")
    st.put_markers(storage, st.new_write_key(now=now - 2 * DAY), live)  # forged
    outside = tmp_path / "outside.lance"
    outside.write_bytes(b"x")
    os.utime(outside, (now - 2 * DAY + 60, now - 2 * DAY + 60))  # old enough to sweep
    os.symlink(outside, os.path.join(uri, "data", "link.lance"))
    st.put_markers(storage, st.new_write_key(now=now - 2 * DAY), ["link.lance"])
    result = st.sweep(storage, older_than_seconds=DAY)
    assert result.files_removed == 1
    assert dead[0] not in _data(uri)
    assert set(live) <= _data(uri)
    assert outside.exists()
    assert os.path.islink(os.path.join(uri, "data", "link.lance"))
    assert lance.dataset(uri).count_rows() == 1


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        ({"mtime": 1_700_000_000.5}, 1_700_000_000.5),
        ({"LastModified": datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)}, 1_700_000_000.0),
        ({"last_modified": datetime(2023, 11, 14, 22, 13, 20)}, 1_700_000_000.0),
        ({"updated": "2023-11-14T22:13:20.000Z"}, 1_700_000_000.0),
        ({"size": 3}, None),
    ],
)
def test_modification_times_from_fsspec_info(
    info: dict[str, object], expected: float | None
) -> None:
    assert st._mtime_from_info(info) == expected


# --------------------------------------------------------------------------- object store




@pytest.mark.parametrize("backend", ["obstore", "fsspec"])
def test_sweep_on_s3_keeps_live_and_young_files_and_removes_a_dead_write(
    moto_server: Any, backend: str
) -> None:
    """On an object store the same rules hold; file ages come from the store's
    last-modified time (a file younger than the retention waits for a later sweep)."""
    from txn_engine.storage import open_storage

    lance_opts = moto_server.lance_options()
    uri = moto_server.uri(emu.unique_name("sweep"))
    lance.write_dataset(
        pa.table({"id": pa.array([0], pa.int64())}), uri, storage_options=lance_opts
    )
    storage = open_storage(uri, {**lance_opts, "txn_engine_backend": backend})
    live = sorted(
        f.path
        for frag in lance.dataset(uri, storage_options=lance_opts).get_fragments()
        for f in frag.data_files()
    )
    table = pa.table({"id": pa.array([1, 2], pa.int64())})
    dead = [
        f.data_files()[0].path
        for f in lance.fragment.write_fragments(
            table, uri, max_rows_per_file=1, storage_options=lance_opts
        )
    ]
    now = time.time()
    key = st.new_write_key(now=now - 2 * DAY)
    st.write_record(
        storage, key, {"uuid": "6f1c7b8e-0000-4000-8000-000000000014", "read_version": 1}
    )
    st.put_markers(storage, key, dead)
    st.put_markers(storage, st.new_write_key(now=now - 2 * DAY), live)  # forged
    # the files are seconds old: with a one-day retention they are not swept yet
    young = st.sweep(storage, older_than_seconds=DAY, now=now)
    assert (young.files_removed, young.skipped) == (0, 2)  # both keys wait
    assert all(storage.exists(f"data/{n}") for n in dead)
    # a day later (as the sweep sees it) they are: the dead write's go, the live one stays
    later = st.sweep(storage, older_than_seconds=DAY, now=now + DAY + 60)
    assert later.files_removed == 2
    assert not any(storage.exists(f"data/{n}") for n in dead)
    assert all(storage.exists(f"data/{n}") for n in live)
    assert lance.dataset(uri, storage_options=lance_opts).count_rows() == 1
    assert storage.list(STAGING_DIR) == []
