"""Records of the versions txn_engine's cleanup removed (txn_engine.format.gaps): written
before any manifest is deleted, merged and pruned so they stay small, read strictly (a
hostile record is reported and ignored, never a crash), and what verify makes of them."""

from __future__ import annotations

import importlib
import json
import uuid
from datetime import timedelta

import pytest

from txn_engine.commit import commit
from txn_engine.errors import StorageError
from txn_engine.format.gaps import GAPS_DIR, read_gaps, record_gaps
from txn_engine.format.naming import list_versions
from txn_engine.model import DataFile, Fragment, LanceField
from txn_engine.ops import Append, Overwrite
from txn_engine.retention import cleanup
from txn_engine.storage import MemoryStorage
from txn_engine.storage.base import Storage
from txn_engine.transaction import Transaction
from txn_engine.verify import verify

gaps_module = importlib.import_module("txn_engine.format.gaps")
SCHEMA = (LanceField(0, -1, "id", "int64"),)
ZERO = timedelta(0)


def _frag(store: Storage) -> Fragment:
    name = f"{uuid.uuid4().hex}.lance"
    store.put(f"data/{name}", b"x" * 10)
    return Fragment(0, (DataFile(name, (0,), (0,), 2, 2, 10),), 5)


def _appends(store: Storage, n: int) -> None:
    for _ in range(n):
        latest = list_versions(store)[-1].version if store.list("_versions") else 0
        op = Overwrite([_frag(store)], SCHEMA) if latest == 0 else Append([_frag(store)])
        commit(store, Transaction(latest, op))


def _versions(store: Storage) -> list[int]:
    return [e.version for e in list_versions(store)]


def _tag(store: Storage, name: str, version: int) -> None:
    store.put(f"_refs/tags/{name}.json", json.dumps({"branch": None, "version": version}).encode())


def _records(store: Storage) -> list[str]:
    return sorted(store.list(GAPS_DIR))


def test_a_gap_cleanup_left_stays_cleaned_up_when_its_tag_goes() -> None:
    store = MemoryStorage()
    _appends(store, 6)
    _tag(store, "t", 3)
    cleanup(store, older_than=ZERO, progress=False)
    assert _versions(store) == [3, 6]
    store.delete("_refs/tags/t.json")
    report = verify(store)
    assert report.ok, report.findings
    assert [(f.version, f.invariant) for f in report.findings] == [
        (3, "cleaned-up"),
        (6, "cleaned-up"),
    ]
    assert "versions 4..5 removed" in report.findings[1].detail
    # removing a version by hand is not cleanup
    _appends(store, 3)
    store.delete(list_versions(store)[3].path)  # version 8
    assert [(f.version, f.invariant) for f in verify(store).errors] == [(9, "no-gaps")]


class _Watched(MemoryStorage):
    """Records, at each manifest delete, whether the gap records covered the version."""

    def __init__(self) -> None:
        super().__init__()
        self.covered_at_delete: list[bool] = []
        self.fail_puts_under: str | None = None

    def delete(self, path: str) -> None:
        if path.startswith("_versions/") and path.endswith(".manifest"):
            version = next(e.version for e in list_versions(self) if e.path == path)
            self.covered_at_delete.append(read_gaps(self).covers(version, version))
        super().delete(path)

    def put_if_absent(self, path: str, data: bytes) -> None:
        if self.fail_puts_under is not None and path.startswith(self.fail_puts_under):
            raise StorageError("injected")
        super().put_if_absent(path, data)


def test_the_record_is_written_before_the_first_manifest_delete() -> None:
    store = _Watched()
    _appends(store, 6)
    _tag(store, "t", 3)
    store.fail_puts_under = GAPS_DIR
    with pytest.raises(StorageError):
        cleanup(store, older_than=ZERO, progress=False)
    assert _versions(store) == [1, 2, 3, 4, 5, 6]  # no record: nothing removed
    store.fail_puts_under = None
    cleanup(store, older_than=ZERO, progress=False)
    assert _versions(store) == [3, 6]
    assert store.covered_at_delete == [True, True, True, True]


def test_records_merge_into_one_and_are_pruned_below_the_oldest_version() -> None:
    store = MemoryStorage()
    _appends(store, 4)
    _tag(store, "a", 2)
    for round_ in range(5):  # each round: a tag, two more versions, a cleanup
        _appends(store, 2)
        _tag(store, f"r{round_}", _versions(store)[-1] - 1)
        cleanup(store, older_than=ZERO, progress=False)
        assert len(_records(store)) == 1
    assert _versions(store) == [2, 5, 7, 9, 11, 13, 14]
    # version 1 (removed by the first round) is below the oldest version: pruned
    assert read_gaps(store).ranges == ((3, 4), (6, 6), (8, 8), (10, 10), (12, 12))
    assert verify(store).ok
    for name in store.list("_refs/tags"):
        store.delete(f"_refs/tags/{name}")
    assert verify(store).ok  # every gap is recorded
    cleanup(store, older_than=ZERO, progress=False)
    assert _versions(store) == [14]
    cleanup(store, older_than=ZERO, progress=False)  # the next run prunes what is below
    assert _records(store) == []
    assert verify(store).ok


def test_a_record_never_vouches_for_versions_no_cleanup_removed() -> None:
    store = MemoryStorage()
    _appends(store, 6)
    store.delete(list_versions(store)[3].path)  # version 4 lost: damage
    _tag(store, "t", 2)
    cleanup(store, older_than=ZERO, progress=False)  # removes 1, 3, 5 around the loss
    assert _versions(store) == [2, 6]
    assert read_gaps(store).ranges == ((1, 1), (3, 3), (5, 5))
    store.delete("_refs/tags/t.json")
    (error,) = verify(store).errors
    assert (error.version, error.invariant) == (6, "no-gaps")
    assert "versions 3..5" in error.detail


def test_many_ranges_are_split_into_bounded_records(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gaps_module, "MAX_RANGES_PER_RECORD", 3)
    store = MemoryStorage()
    removed = list(range(1, 40, 2))  # 20 ranges of one version
    record_gaps(store, removed, [40])
    assert len(_records(store)) == 7
    assert read_gaps(store).ranges == tuple((v, v) for v in removed)
    # the next cleanup lists 40 and 41 only: everything below 40 is gone for good, so the
    # records are pruned to what is at or above it, in one record
    record_gaps(store, [40], [41])
    assert read_gaps(store).ranges == ((40, 40),)
    assert len(_records(store)) == 1


@pytest.mark.parametrize(
    "body",
    [
        b"{",
        b"[]",
        b'{"removed": 5}',
        b'{"removed": [[3]]}',
        b'{"removed": [[5, 3]]}',
        b'{"removed": [[0, 3]]}',
        b'{"removed": [[true, 3]]}',
        b'{"removed": [[1, 9223372036854775808]]}',
        b'{"removed": [[1.5, 3]]}',
        b'{"removed": [[1, 1e400]]}',
        b'{"removed": ' + b"[" * 200 + b"]" * 200 + b"}",
        b'{"removed": [[1, 2]], "pad": "' + b"x" * (300 * 1024) + b'"}',
    ],
)
def test_a_hostile_record_is_reported_and_ignored(body: bytes) -> None:
    store = MemoryStorage()
    _appends(store, 6)
    _tag(store, "t", 3)
    cleanup(store, older_than=ZERO, progress=False)
    store.delete("_refs/tags/t.json")
    bad = f"{GAPS_DIR}/forged.json"
    store.put(bad, body)
    found = read_gaps(store)
    assert [path for path, _ in found.bad] == [bad]
    assert found.ranges == ((1, 2), (4, 5))  # the good record still counts
    report = verify(store)
    assert report.ok, report.findings
    assert [(f.invariant, f.severity) for f in report.warnings] == [("gap-record", "warning")]
    assert bad in report.warnings[0].detail
    _appends(store, 2)
    _tag(store, "u", 7)
    cleanup(store, older_than=ZERO, progress=False)  # neither crashes nor deletes it
    assert store.exists(bad)
    assert verify(store).ok


def test_two_cleanups_merging_at_once_keep_both_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """B read the records before A replaced them: B's merge lacks A's ranges and deletes a
    record A already deleted; A's record stays, so the union still covers everything."""
    store = MemoryStorage()
    record_gaps(store, [2], [1, 3, 4, 5, 6, 7, 8])
    stale = read_gaps(store)
    record_gaps(store, [4], [1, 3, 5, 6, 7, 8])  # cleanup A
    monkeypatch.setattr(gaps_module, "read_gaps", lambda storage: stale)
    record_gaps(store, [6], [1, 3, 5, 7, 8])  # cleanup B, on what it read before A wrote
    monkeypatch.undo()
    assert len(_records(store)) == 2
    assert read_gaps(store).ranges == ((2, 2), (4, 4), (6, 6))
    record_gaps(store, [], [1, 3, 5, 7, 8])  # the next run merges them
    assert len(_records(store)) == 1
    assert read_gaps(store).ranges == ((2, 2), (4, 4), (6, 6))
