"""The stress verdict's history checks take time linear in the history.

``check_history`` (the journal fold plus the landed-transaction fold of
:class:`~txn_engine.testing.model.HistoryModel`) used to rebuild every version's contents
whole: each version read the deletion file of every fragment it kept and decoded every
fragment again, so a history twice as long cost four times as much (4.6 s at 500 versions,
22.6 s at 1,000, ~70 s at 2,000). Wall time is a flaky witness; the work is counted
instead, on a deterministic history: storage reads per version, deletion files read, and
fragments decoded must grow in proportion to the history, not faster.
"""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyroaring import BitMap

from txn_engine.apps.stress import run_stress
from txn_engine.commit import commit
from txn_engine.format.deletion import write_deletion_vector
from txn_engine.format.io import read_manifest
from txn_engine.model import DeletionFile, Fragment
from txn_engine.ops import Append, Delete, Overwrite
from txn_engine.storage.memory import MemoryStorage
from txn_engine.storage.recording import RecordingStorage
from txn_engine.testing.journal import Journal, check_history, read_journals
from txn_engine.testing.machine import SCHEMA
from txn_engine.testing.model import AddRows, Contents, RemoveRows, SyntheticRows
from txn_engine.transaction import Transaction

SEED = [(rid, 0) for rid in range(4)]


def _seeded(tmp_path: Path) -> tuple[MemoryStorage, SyntheticRows, Fragment, Path]:
    """A table at version 1 holding the seed rows, the rows registry, the seed fragment and
    the path of writer 0's journal."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    storage = MemoryStorage()
    rows = SyntheticRows()
    seed = rows.fragment(SEED)
    commit(storage, Transaction(0, Overwrite((seed,), SCHEMA)))
    return storage, rows, seed, tmp_path / "w0.jsonl"


def _history(tmp_path: Path, versions: int) -> tuple[MemoryStorage, Path, str]:
    """``versions`` versions: a seed, then Appends of 3 rows, every third version a Delete
    of one row of an older fragment (a new deletion file each time, so deletion files
    accumulate over the kept fragments, as in a stress run)."""
    storage, rows, seed, journal_path = _seeded(tmp_path)
    live: dict[int, list[int]] = {}  # fragment id -> live offsets
    physical: dict[int, tuple[tuple[int, int], ...]] = {}
    next_rid = 100
    with Journal(journal_path) as journal:
        for version in range(1, versions):
            if version % 3 == 0 and any(len(o) > 1 for o in live.values()):
                candidates = sorted(f for f, o in live.items() if len(o) > 1)
                fid = candidates[version % len(candidates)]
                offset = live[fid].pop(0)
                deleted = BitMap(o for o in range(3) if o not in live[fid])
                pb = next(f for f in read_manifest(storage)[1].manifest.fragments if f.id == fid)
                dv = DeletionFile.from_proto(write_deletion_vector(storage, fid, version, deleted))
                frag = Fragment.from_proto(pb)
                updated = Fragment(frag.id, frag.files, frag.physical_rows, deletion_file=dv)
                txn = Transaction(version, Delete(updated_fragments=(updated,)))
                journal.intent(txn.uuid, RemoveRows([physical[fid][offset][0]]))
            else:
                new = [(next_rid + i, version) for i in range(3)]
                next_rid += 3
                frag = rows.fragment(new)
                txn = Transaction(version, Append((frag,)))
                journal.intent(txn.uuid, AddRows(new), {frag.files[0].path: new})
            landed = commit(storage, txn)
            journal.ack(txn.uuid, landed.version)
            if isinstance(txn.operation, Append):
                fid = read_manifest(storage)[1].manifest.fragments[-1].id
                live[fid] = [0, 1, 2]
                physical[fid] = tuple(new)
    seed_path = seed.files[0].path
    return storage, journal_path, seed_path


class _Counted:
    """What one ``check_history`` call did."""

    def __init__(self) -> None:
        self.reads: Counter[str] = Counter()
        self.decoded = 0


@pytest.fixture
def count_decodes(monkeypatch: pytest.MonkeyPatch) -> _Counted:
    counted = _Counted()
    original = Fragment.from_proto.__func__  # type: ignore[attr-defined]

    def counting(cls: Any, pb: Any) -> Fragment:
        counted.decoded += 1
        return original(cls, pb)  # type: ignore[no-any-return]

    monkeypatch.setattr(Fragment, "from_proto", classmethod(counting))
    return counted


def _check(tmp_path: Path, versions: int, counted: _Counted) -> _Counted:
    storage, journal_path, seed_path = _history(tmp_path / str(versions), versions)
    recording = RecordingStorage(storage)
    summary = read_journals([journal_path])
    summary.rows.register(seed_path, SEED)
    counted.decoded = 0
    result = check_history(recording, summary, first_contents=Contents.of(SEED))
    assert result.ok, result.findings
    assert result.versions == versions
    out = _Counted()
    out.decoded = counted.decoded
    for method, path in recording.calls:
        if path.startswith("_deletions/"):
            out.reads["_deletions"] += method in ("get", "get_range", "get_bounded")
        elif method in ("get", "get_range", "get_bounded", "size", "list"):
            out.reads[method] += 1
    return out


def test_history_checks_do_work_linear_in_the_history(
    tmp_path: Path, count_decodes: _Counted
) -> None:
    small = _check(tmp_path, 60, count_decodes)
    large = _check(tmp_path, 240, count_decodes)  # 4x the history
    deletions_written = sum(1 for v in range(1, 240) if v % 3 == 0)
    # each deletion file is read at most once per fold (two folds), however many versions
    # keep it; the old checks re-read every kept one at every version (quadratic: 19,039)
    assert large.reads["_deletions"] <= 2 * deletions_written, large.reads
    # 4x the versions: at most ~4x the reads and decodes (quadratic work would be ~16x)
    for what in ("get", "get_range", "size", "_deletions", "list"):
        limit = 4.5 * max(small.reads[what], 1)
        assert large.reads[what] <= limit, (what, small.reads, large.reads)
    assert large.decoded <= 4.5 * small.decoded, (small.decoded, large.decoded)
    # and absolutely: a bounded number of fragment decodes per version
    assert large.decoded <= 6 * 240, large.decoded


def test_a_wrong_version_late_in_a_long_history_is_still_found(tmp_path: Path) -> None:
    """The incremental comparison misses nothing: a row of the history's last version that
    the journal says was deleted, but was not, is reported at that version."""
    storage, journal_path, seed_path = _history(tmp_path, 90)
    rows = SyntheticRows()
    frag = rows.fragment([(5000, 1)])
    txn = Transaction(89, Append((frag,)))
    with Journal(journal_path) as journal:  # the journal claims a different row
        journal.intent(txn.uuid, AddRows([(5001, 1)]), {frag.files[0].path: [(5000, 1)]})
        journal.ack(txn.uuid, commit(storage, txn).version)
    summary = read_journals([journal_path])
    summary.rows.register(seed_path, SEED)
    result = check_history(storage, summary, first_contents=Contents.of(SEED))
    assert len(result.findings) == 1, result.findings
    assert result.findings[0].startswith("v91: table differs from the fold of intents: "), (
        result.findings
    )


def test_progress_reports_every_version(tmp_path: Path) -> None:
    storage, journal_path, seed_path = _history(tmp_path, 30)
    summary = read_journals([journal_path])
    summary.rows.register(seed_path, SEED)
    seen: list[tuple[int, int]] = []
    check_history(
        storage,
        summary,
        first_contents=Contents.of(SEED),
        progress=lambda done, total: seen.append((done, total)),
    )
    assert seen == [(i, 30) for i in range(1, 31)]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_stress_verdict_shows_progress_on_a_terminal_only(tmp_path: Path) -> None:
    terminal = _Terminal()
    report = run_stress(
        str(tmp_path / "a.lance"), writers=1, commits=4, synthetic=True, progress=terminal
    )
    assert report.ok, report.findings
    shown = terminal.getvalue()
    assert "\r\x1b[K[stress] verifying: history invariants" in shown
    assert f"[stress] verified {report.versions} versions in " in shown
    piped = io.StringIO()  # not a terminal: the verdict checks stay quiet
    report = run_stress(
        str(tmp_path / "b.lance"), writers=1, commits=4, synthetic=True, progress=piped
    )
    assert report.ok, report.findings
    assert "verif" not in piped.getvalue()


def _carried_history(tmp_path: Path, *, ack_member_at: int | None = None) -> list[str]:
    """A seed, one Append, then one version carrying two transactions (its own and an
    offered one, as txn_engine.contention.offers writes them), each journaled with its own rows:
    the findings of check_history."""
    from txn_engine.contention.offers import carrying

    storage, rows, seed, journal_path = _seeded(tmp_path)
    with Journal(journal_path) as journal:
        first = [(100, 1), (101, 1)]
        f1 = rows.fragment(first)
        t1 = Transaction(1, Append((f1,)))
        journal.intent(t1.uuid, AddRows(first), {f1.files[0].path: first})
        journal.ack(t1.uuid, commit(storage, t1).version)
        own, offered = [(200, 2)], [(300, 2), (301, 2)]
        fo, fx = rows.fragment(own), rows.fragment(offered)
        mine = Transaction(2, Append((fo,)))
        other = Transaction(2, Append((fx,)))
        journal.intent(mine.uuid, AddRows(own), {fo.files[0].path: own})
        journal.intent(other.uuid, AddRows(offered), {fx.files[0].path: offered})
        landed = commit(storage, carrying(mine, [other]))
        journal.ack(mine.uuid, landed.version)
        journal.ack(other.uuid, ack_member_at or landed.version)
    summary = read_journals([journal_path])
    summary.rows.register(seed.files[0].path, SEED)
    return list(check_history(storage, summary, first_contents=Contents.of(SEED)).findings)


def test_a_version_that_carried_other_transactions_is_checked_against_all_of_them(
    tmp_path: Path,
) -> None:
    """A carrier (an offer, or a group commit) holds the rows of every transaction it
    carried: the fold applies all their intents; each one is acknowledged at that version;
    a member acknowledged elsewhere is reported."""
    assert _carried_history(tmp_path / "ok") == []
    findings = _carried_history(tmp_path / "bad", ack_member_at=7)
    assert any("was acknowledged at v7" in f for f in findings), findings
