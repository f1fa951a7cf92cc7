"""The latest-version hint on local disk (``_versions/latest_version_hint.json``).

What is proved here: a cold commit and ``Dataset.open`` from a URI do not list ``_versions/``
when the hint is right; a stale hint costs O(log gap) existence checks; every hint that
cannot be trusted (ahead of the latest, naming a removed version, garbage, empty, huge, a
directory, a V1 dataset, a cleanup since it was written) gives the listing's answer; the
commit loop's missing-history check still sees a removed version; a commit writes the hint
with pylance's bytes, without fsync, and a failed hint write fails nothing; cleanup keeps it.
"""

from __future__ import annotations

import math
import os
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from txn_engine._proto import table_pb2
from txn_engine.commit import commit
from txn_engine.dataset import Dataset
from txn_engine.errors import HistoryUnavailableError
from txn_engine.format.io import latest_version
from txn_engine.format.manifest_file import decode_manifest_file, encode_manifest_file
from txn_engine.format.naming import (
    TXN_HINT_PATH,
    VERSION_HINT_PATH,
    NamingScheme,
    list_versions,
    manifest_name,
    parse_manifest_name,
    parse_version_hint,
    scan_versions,
    version_hint_bytes,
    write_version_hint,
)
from txn_engine.format.refs import create_tag
from txn_engine.model import DataFile, Fragment, LanceField
from txn_engine.ops import Append, Overwrite
from txn_engine.retention import CleanupReport, cleanup
from txn_engine.storage import LocalStorage, MemoryStorage, RecordingStorage
from txn_engine.storage._files import is_staging_name, staging_path
from txn_engine.testing.fsclock import next_tick
from txn_engine.transaction import Transaction

# these tests exercise the hint path: use it on their small tables too
pytestmark = pytest.mark.usefixtures("hint_on_every_table")

SCHEMA = (LanceField(0, -1, "id", "int64"),)


def frag() -> Fragment:
    return Fragment(0, (DataFile(f"{uuid.uuid4().hex}.lance", (0,), (0,), 2, 2, 100),), 10)


def make_table(root: Path, versions: int, naming: NamingScheme | None = None) -> str:
    """A local table with ``versions`` real commits (each writes the hint)."""
    uri = str(root / "t.lance")
    commit(uri, Transaction(0, Overwrite([frag()], SCHEMA)), naming=naming)
    for v in range(1, versions):
        commit(uri, Transaction(v, Append([frag()])))
    return uri


def hint_of(uri: str) -> bytes:
    return Path(uri, TXN_HINT_PATH).read_bytes()


def set_hint(uri: str, data: bytes) -> None:
    Path(uri, TXN_HINT_PATH).write_bytes(data)


def copy_versions(uri: str, up_to: int) -> None:
    """Make versions 2..up_to from manifest 1 (its version field set to each), written as a
    writer that does not update the hint would (cheap history, no commit loop)."""
    directory = Path(uri, "_versions")
    one = decode_manifest_file((directory / manifest_name(1, NamingScheme.V2)).read_bytes())
    manifest = table_pb2.Manifest()
    manifest.CopyFrom(one.manifest)
    for v in range(2, up_to + 1):
        manifest.version = v
        data = encode_manifest_file(manifest, one.indices, one.transaction)
        (directory / manifest_name(v, NamingScheme.V2)).write_bytes(data)


def remove_versions(uri: str, versions: range | list[int]) -> None:
    """Delete manifests as a cleanup would."""
    for v in versions:
        os.unlink(Path(uri, "_versions", manifest_name(v, NamingScheme.V2)))


def recorder(uri: str) -> RecordingStorage:
    return RecordingStorage(LocalStorage(uri))


def listed(rec: RecordingStorage) -> int:
    return sum(1 for method, path in rec.calls if method == "list" and path == "_versions")


def trusted(uri: str, version: int) -> bool:
    """Whether nothing in ``_versions/`` is stamped later than ``version``'s manifest: what
    the hint path checks. A create stamps the manifest and the directory in one system call,
    which now and then straddles a clock tick (more often on a loaded machine): then the
    hint is not trusted and the answer comes from a listing, as it must."""
    directory = Path(uri, "_versions")
    manifest = directory / manifest_name(version, NamingScheme.V2)
    return directory.stat().st_mtime_ns <= manifest.stat().st_ctime_ns


def probe_bound(gap: int) -> int:
    """Existence checks the hint path may make for a hint ``gap`` versions behind: the
    start, gallop and binary search (2 log2(gap + 1) + 1), one more for ``since``."""
    return 2 * int(math.log2(gap + 1)) + 3


# ---- the hint is right: no listing ---------------------------------------------------------


def test_cold_open_and_commit_from_a_uri_do_not_list_versions(tmp_path: Path) -> None:
    """With a correct hint, ``Dataset.open`` and a cold commit cost no ``list`` of
    ``_versions/``; without the hint (the control) the same open lists once."""
    uri = make_table(tmp_path, 3)
    assert hint_of(uri) == b'{"version":3}'
    rec = recorder(uri)
    assert Dataset.open(rec).version == 3
    assert listed(rec) == (0 if trusted(uri, 3) else 1)
    before = listed(rec)
    rec.reset()
    result = commit(rec, Transaction(3, Append([frag()])))
    assert result.version == 4
    assert listed(rec) == before
    assert rec.counts.get("list", 0) == before
    assert hint_of(uri) == b'{"version":4}'
    # the control: the same open without a hint lists once
    os.unlink(Path(uri, TXN_HINT_PATH))
    rec.reset()
    assert Dataset.open(rec).version == 4
    assert listed(rec) == 1


@pytest.mark.parametrize("gap", [1, 1000])
def test_a_stale_hint_finds_the_latest_in_log_gap_probes(tmp_path: Path, gap: int) -> None:
    """The hint names version h; versions h+1..h+gap were written by writers that did not
    update it. The true latest is found with O(log gap) existence checks and no listing,
    by ``latest_version`` and by a cold commit."""
    uri = make_table(tmp_path, 1)  # hint = 1
    copy_versions(uri, 1 + gap)
    latest = 1 + gap
    rec = recorder(uri)
    assert latest_version(rec).version == latest
    assert listed(rec) == 0
    assert rec.counts["exists"] <= probe_bound(gap)
    if gap == 1000:
        assert rec.counts["exists"] < 25  # against 1,000 names listed
    rec.reset()
    assert commit(rec, Transaction(latest, Append([frag()]))).version == latest + 1
    assert listed(rec) == 0
    assert hint_of(uri) == version_hint_bytes(latest + 1)


def test_since_newer_than_the_hint_starts_from_since(tmp_path: Path) -> None:
    """A commit whose read version is newer than the hint starts its probes there."""
    uri = make_table(tmp_path, 1)
    copy_versions(uri, 600)
    rec = recorder(uri)
    listing = scan_versions(rec, since=600)
    assert listing.latest is not None
    assert listing.latest.version == 600
    assert rec.counts["exists"] == 3  # the hint's version 1, then 600 exists, 601 does not
    assert listed(rec) == 0


# ---- hints that cannot be trusted: the listing's answer ---------------------------------------


def test_a_hint_ahead_of_the_latest_falls_back_to_a_listing(tmp_path: Path) -> None:
    uri = make_table(tmp_path, 4)
    set_hint(uri, b'{"version":9}')
    rec = recorder(uri)
    assert latest_version(rec).version == 4
    assert listed(rec) == 1


def test_a_hint_naming_a_removed_version_falls_back(tmp_path: Path) -> None:
    uri = make_table(tmp_path, 8)
    remove_versions(uri, range(1, 5))
    set_hint(uri, b'{"version":3}')  # written after the removal: still not a version
    rec = recorder(uri)
    assert latest_version(rec).version == 8
    assert [e.version for e in scan_versions(rec, since=2)] == [5, 6, 7, 8]
    assert listed(rec) == 2


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"garbage",
        b'{"version":-1}',
        b'{"version":"4"}',
        b'{"version":4.0}',
        b'{"version":04}',
        b'{"version":4,"x":1}',
        b'{"version":9223372036854775808}',  # 2**63: not a main-line version
        b'{"version":99999999999999999999}',
        b'{"version":true}',
        b'{"version":2}' + b" " * 100,  # more than 64 bytes: not read
        b"\xff\xfe{",
    ],
)
def test_garbage_hints_fall_back_to_a_listing(tmp_path: Path, data: bytes) -> None:
    uri = make_table(tmp_path, 3)
    set_hint(uri, data)
    rec = recorder(uri)
    assert parse_version_hint(data) is None or len(data) > 64
    assert latest_version(rec).version == 3
    assert listed(rec) == 1


def test_a_huge_hint_is_not_read(tmp_path: Path) -> None:
    uri = make_table(tmp_path, 3)
    set_hint(uri, b'{"version":2}' + b" " * (8 << 20))
    rec = recorder(uri)
    assert latest_version(rec).version == 3
    assert listed(rec) == 1
    assert rec.bytes_read < 1 << 16  # the 8 MB file was refused by its size


def test_a_hint_that_is_a_directory_is_ignored_and_not_written(tmp_path: Path) -> None:
    """A hint path that cannot be read is ignored; one that cannot be written fails no
    commit."""
    uri = make_table(tmp_path, 2)
    os.unlink(Path(uri, TXN_HINT_PATH))
    os.mkdir(Path(uri, TXN_HINT_PATH))
    rec = recorder(uri)
    assert latest_version(rec).version == 2
    assert listed(rec) == 1
    assert commit(uri, Transaction(2, Append([frag()]))).version == 3
    assert Path(uri, TXN_HINT_PATH).is_dir()
    assert [e.version for e in list_versions(LocalStorage(uri))] == [1, 2, 3]


def test_a_cleanup_after_the_hint_makes_it_list(tmp_path: Path) -> None:
    """The hint names a version that a tag kept (5); later versions were written by writers
    that did not update it, then a cleanup removed 6..15. Probing from 5 would stop at 5;
    because ``_versions/`` changed after the hint was written, the answer comes from a
    listing: 20."""
    uri = make_table(tmp_path, 5)  # hint = 5
    copy_versions(uri, 20)
    next_tick(Path(uri, "_versions"))
    remove_versions(uri, range(6, 16))
    rec = recorder(uri)
    assert latest_version(rec).version == 20
    assert listed(rec) == 1
    assert [e.version for e in scan_versions(rec, since=5) if e.version >= 5] == [
        5,
        16,
        17,
        18,
        19,
        20,
    ]


def test_a_v1_dataset_lists(tmp_path: Path) -> None:
    """The hint of a V1 dataset (pylance writes one) names no V2 manifest: one listing."""
    uri = make_table(tmp_path, 3, naming=NamingScheme.V1)
    assert hint_of(uri) == b'{"version":3}'
    rec = recorder(uri)
    entry = latest_version(rec)
    assert (entry.version, entry.scheme) == (3, NamingScheme.V1)
    assert listed(rec) == 1


def test_missing_history_is_still_seen_through_the_hint(tmp_path: Path) -> None:
    """Version 7 was removed, then a commit wrote the hint (11): a commit reading version 5
    checks 5..11 without listing, finds 7 missing and raises HistoryUnavailableError, as it
    does with a listing."""
    uri = make_table(tmp_path, 10)
    next_tick(Path(uri, "_versions"))
    remove_versions(uri, [7])
    next_tick(Path(uri, "_versions"))
    commit(uri, Transaction(10, Append([frag()])))  # writes the hint: 11
    rec = recorder(uri)
    listing = scan_versions(rec, since=5)
    assert listed(rec) == 0
    assert [e.version for e in listing] == [5, 6, 8, 9, 10, 11]
    rec.reset()
    with pytest.raises(HistoryUnavailableError) as info:
        commit(rec, Transaction(5, Append([frag()])))
    assert info.value.conflicting_version == 7
    assert listed(rec) == 0
    os.unlink(Path(uri, TXN_HINT_PATH))  # the same through a listing
    with pytest.raises(HistoryUnavailableError) as listed_info:
        commit(recorder(uri), Transaction(5, Append([frag()])))
    assert listed_info.value.conflicting_version == 7


def test_full_listings_ignore_the_hint(tmp_path: Path) -> None:
    """``since=None`` (log, cleanup, verify) always lists."""
    uri = make_table(tmp_path, 3)
    rec = recorder(uri)
    assert [e.version for e in scan_versions(rec)] == [1, 2, 3]
    assert listed(rec) == 1


# ---- writing it ---------------------------------------------------------------------------


def test_commits_write_pylance_bytes_without_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Create and append write ``{"version":N}``; the write never fsyncs (the store itself
    fsyncs manifests), leaves no staging file, and its staging name is no manifest name."""
    uri = make_table(tmp_path, 1)
    assert hint_of(uri) == b'{"version":1}'
    synced: list[int] = []
    real_fsync = os.fsync

    def counting(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting)
    write_version_hint(LocalStorage(uri, fsync=True), 7)
    assert synced == []
    assert hint_of(uri) == b'{"version":7}'
    assert commit(uri, Transaction(1, Append([frag()]))).version == 2
    assert synced  # the manifest create itself is fsynced
    assert hint_of(uri) == b'{"version":2}'
    names = os.listdir(Path(uri, "_versions"))
    manifests = [manifest_name(v, NamingScheme.V2) for v in (1, 2)]
    assert sorted(names) == sorted(manifests)  # the hint is not in _versions/
    assert os.listdir(Path(uri, TXN_HINT_PATH).parent) == [Path(TXN_HINT_PATH).name]
    staging = os.path.basename(staging_path(str(Path(uri, TXN_HINT_PATH))))
    assert is_staging_name(staging)
    assert parse_manifest_name(staging) is None


def test_no_hint_is_written_where_the_store_lists_in_order() -> None:
    store = MemoryStorage()
    commit(store, Transaction(0, Overwrite([frag()], SCHEMA)))
    commit(store, Transaction(1, Append([frag()])))
    assert not store.exists(VERSION_HINT_PATH)


def test_an_already_committed_transaction_does_not_rewrite_the_hint(tmp_path: Path) -> None:
    uri = make_table(tmp_path, 2)
    txn = Transaction(2, Append([frag()]))
    assert commit(uri, txn).version == 3
    commit(uri, Transaction(3, Append([frag()])))  # hint: 4
    again = commit(uri, txn)
    assert again.already_committed
    assert again.version == 3
    assert hint_of(uri) == b'{"version":4}'


def test_cleanup_keeps_the_hint(tmp_path: Path) -> None:
    """Cleanup removing every old version (and every orphan) leaves the hint alone."""
    uri = make_table(tmp_path, 5)
    os.utime(Path(uri, TXN_HINT_PATH), (0, 0))  # old enough to be an orphan
    before = hint_of(uri)
    report = cleanup(
        uri,
        older_than=timedelta(0),
        keep_versions=1,
        retention_orphans=timedelta(0),
        progress=False,
        now_ns=time.time_ns() + 10**12,
    )
    assert isinstance(report, CleanupReport)
    assert report.plan.removed_versions == (1, 2, 3, 4)
    assert hint_of(uri) == before == b'{"version":5}'
    assert latest_version(recorder(uri)).version == 5


def test_a_hint_naming_a_removed_version_is_not_used_for_a_newer_since(tmp_path: Path) -> None:
    """Versions 3 and 5 were removed, then a hint naming 3 was written. A caller asking from
    version 4 (newer than the hint) must not probe from 4 and stop at the gap: the hint names
    no version, so it is not used at all and the latest is 6."""
    uri = make_table(tmp_path, 6)
    next_tick(Path(uri, "_versions"))
    remove_versions(uri, [3, 5])
    next_tick(Path(uri, "_versions"))
    set_hint(uri, b'{"version":3}')
    rec = recorder(uri)
    versions, latest = scan_versions(rec, since=4), 6
    assert versions.latest is not None
    assert versions.latest.version == latest
    assert [e.version for e in versions if e.version >= 4] == [4, 6]
    assert listed(rec) == 1


# ---- a hint can never move the latest below a version that exists (issue 43, finding 3) ----


def _tagged_gap(tmp_path: Path) -> tuple[str, int, int]:
    """Versions 1..3, version 3 tagged, ten more versions, then a cleanup that keeps the tag
    and the latest: ``_versions/`` holds 3 and 13, a gap between. Returns (uri, 3, 13)."""
    uri = make_table(tmp_path, 3)
    create_tag(LocalStorage(uri), "keep", 3)
    for v in range(3, 13):
        commit(uri, Transaction(v, Append([frag()])))
    cleanup(uri, older_than=timedelta(0), progress=False, now_ns=time.time_ns() + 10**12)
    assert [e.version for e in list_versions(LocalStorage(uri))] == [3, 13]
    return uri, 3, 13


@pytest.mark.parametrize("where", [TXN_HINT_PATH, VERSION_HINT_PATH])
def test_a_hint_written_late_below_a_cleaned_gap_is_not_the_latest(
    tmp_path: Path, where: str
) -> None:
    """A writer delayed between its create of version 3 and its hint write resumes after
    the tag, ten versions and the cleanup, and writes the hint for 3 (or a co-writer forges
    pylance's). The hint is newer than every change of ``_versions/``; still the latest is
    13, and an append commits 14, never 4 (the slot the cleanup freed)."""
    uri, tagged, latest = _tagged_gap(tmp_path)
    next_tick(Path(uri, "_versions"))
    Path(uri, where).write_bytes(version_hint_bytes(tagged))  # the late (or forged) hint
    assert latest_version(LocalStorage(uri)).version == latest
    assert Dataset.open(uri).version == latest
    assert scan_versions(LocalStorage(uri), since=tagged).latest.version == latest  # type: ignore[union-attr]
    result = commit(uri, Transaction(Dataset.open(uri).version, Append([frag()])))
    assert result.version == latest + 1
    assert [e.version for e in list_versions(LocalStorage(uri))] == [tagged, latest, latest + 1]
    # a commit planned at the tagged version itself is checked against the whole gap
    with pytest.raises(HistoryUnavailableError):
        commit(uri, Transaction(tagged, Append([frag()])))


def test_the_delayed_writers_own_hint_write_is_the_one_of_the_issue(tmp_path: Path) -> None:
    """The same through write_version_hint, as the delayed writer calls it."""
    uri, tagged, latest = _tagged_gap(tmp_path)
    write_version_hint(LocalStorage(uri), tagged)
    assert hint_of(uri) == version_hint_bytes(tagged)
    assert latest_version(LocalStorage(uri)).version == latest
