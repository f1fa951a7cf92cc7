"""Staging records, markers, finalisation and the sweep (no Spark needed).

Transactions that "landed" are committed with pylance 14.0.2 (carrying the uuid and write
id a Spark write would), so these tests check the clean-up logic against real histories.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

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
    st.put_markers(storage, "k2", ["odd name%/x.lance"])
    staged = st.list_staging(storage)
    assert staged["k1"] == st.StagedWrite("k1", True, frozenset({"a.lance", "b.lance"}))
    assert staged["k2"] == st.StagedWrite("k2", False, frozenset({"odd name%/x.lance"}))
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
    now = 1_800_000_000.0
    old, young = st.new_write_key(now=now - 2 * DAY), st.new_write_key(now=now - 60)
    straggler, dead, fresh = (_paths(_fragments(uri, 1)) for _ in range(3))
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


def test_find_landed_matches_uuid_or_write_id(tmp_path: Path) -> None:
    uri = _dataset(tmp_path)
    storage = LocalStorage(uri)
    frags = _fragments(uri, 1)
    uuid = "6f1c7b8e-0000-4000-8000-000000000002"
    version = _land(uri, frags, uuid, "job-9")
    by_uuid = st.find_landed(storage, uuid, after_version=1)
    assert by_uuid is not None
    assert by_uuid.version == version
    assert st.transaction_data_files(by_uuid.transaction) == set(_paths(frags))
    by_id = st.find_landed(
        storage, "other", after_version=0, write_id="job-9", write_id_property=WRITE_ID_PROPERTY
    )
    assert by_id is not None
    assert by_id.version == version
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
