"""The latest-version hint never changes an answer, only its cost.

For random local tables -- versions committed by writers that update the hint and by writers
that do not, old versions removed as a cleanup would (never the latest), hints written late
by a slow writer, garbage hints and hints naming no version -- ``scan_versions(st, since=s)``
gives the full listing's versions in ``[s, latest]`` and its latest, and lists nothing when
the last commit wrote the hint. The commit loop lands the same version, or raises the same
conflict for missing history, with and without the hint.

A hint is only ever written the way a writer writes it: the version it just created, when
every version from it to the latest still existed (a slow writer may write it after others
committed, not after a cleanup removed versions above it). See ``docs/backends.md``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from txn_engine.commit import commit
from txn_engine.errors import TxnEngineError
from txn_engine.format.naming import (
    U64_MAX,
    VERSION_HINT_PATH,
    VERSIONS_DIR,
    NamingScheme,
    manifest_name,
    scan_versions,
    version_hint_bytes,
)
from txn_engine.model import DataFile, Fragment, LanceField
from txn_engine.ops import Append, Overwrite
from txn_engine.storage import LocalStorage, RecordingStorage
from txn_engine.storage.base import Storage
from txn_engine.testing.fsclock import next_tick
from txn_engine.transaction import Transaction

# these tests exercise the hint path: use it on their small tables too
pytestmark = pytest.mark.usefixtures("hint_on_every_table")

SCHEMA = (LanceField(0, -1, "id", "int64"),)
GARBAGE = [
    b"",
    b"{}",
    b"nope",
    b'{"version":-3}',
    b'{"version":1e3}',
    b'{"version":' + b"9" * 25 + b"}",
]

# events: ("commit", writes_hint) | ("cleanup", mask) | ("late", pick) | ("bad", pick)
_event = st.one_of(
    st.tuples(st.just("commit"), st.booleans()),
    st.tuples(st.just("cleanup"), st.integers(0, (1 << 12) - 1)),
    st.tuples(st.just("late"), st.integers(0, 1000)),
    st.tuples(st.just("bad"), st.integers(0, 1000)),
)
_history = st.lists(_event, min_size=1, max_size=10)


def frag() -> Fragment:
    return Fragment(0, (DataFile(f"{uuid.uuid4().hex}.lance", (0,), (0,), 2, 2, 100),), 10)


class Opaque:
    """A writer that does not know about the hint: forwards to a LocalStorage that the hint
    code cannot see through (no ``inner``)."""

    def __init__(self, inner: LocalStorage) -> None:
        self._s = inner

    @property
    def uri(self) -> str:
        return f"opaque+{self._s.uri}"

    def put_if_absent(self, path: str, data: bytes) -> None:
        self._s.put_if_absent(path, data)

    def put(self, path: str, data: bytes) -> None:
        self._s.put(path, data)

    def get(self, path: str) -> bytes:
        return self._s.get(path)

    def get_range(self, path: str, start: int, end: int) -> bytes:
        return self._s.get_range(path, start, end)

    def size(self, path: str) -> int:
        return self._s.size(path)

    def list(self, prefix: str) -> Sequence[str]:
        return self._s.list(prefix)

    def exists(self, path: str) -> bool:
        return self._s.exists(path)

    def delete(self, path: str) -> None:
        self._s.delete(path)


class Table:
    """A local table driven by a history of events; ``real``: real commits (else empty
    manifest files, enough for listings)."""

    def __init__(self, root: Path, real: bool) -> None:
        self.root, self.real = root, real
        self.store = LocalStorage(root, fsync=False)
        self.existing: list[int] = []
        self.created = 0
        self.last_wrote_hint = False
        self._create(writes_hint=True)

    def _path(self, version: int) -> Path:
        return self.root / VERSIONS_DIR / manifest_name(version, NamingScheme.V2)

    def _hint(self, data: bytes) -> None:
        self.store.put_unsynced(VERSION_HINT_PATH, data)

    def _create(self, writes_hint: bool) -> None:
        version = self.created + 1
        if self.real:
            writer: Storage = self.store if writes_hint else Opaque(self.store)
            op = Overwrite([frag()], SCHEMA) if version == 1 else Append([frag()])
            assert commit(writer, Transaction(version - 1, op)).version == version
        else:
            self._path(version).parent.mkdir(parents=True, exist_ok=True)
            self._path(version).write_bytes(b"")
            if writes_hint:
                self._hint(version_hint_bytes(version))
        self.created = version
        self.existing.append(version)

    def apply(self, kind: str, arg: int | bool) -> None:
        self.last_wrote_hint = False
        if kind == "commit":
            self._create(writes_hint=bool(arg))
            self.last_wrote_hint = bool(arg)
        elif kind == "cleanup":  # never the latest
            gone = [v for i, v in enumerate(self.existing[:-1]) if int(arg) >> (i % 12) & 1]
            for v in gone:
                os.unlink(self._path(v))
            self.existing = [v for v in self.existing if v not in gone]
        elif kind == "late":  # a slow writer's hint: a version of the top contiguous run
            run = [self.existing[-1]]
            for v in reversed(self.existing[:-1]):
                if v != run[-1] - 1:
                    break
                run.append(v)
            self._hint(version_hint_bytes(run[int(arg) % len(run)]))
        else:  # garbage, or a number that names no version (removed, or not yet made)
            absent = [v for v in range(0, self.created + 3) if v not in self.existing]
            choices = GARBAGE + [version_hint_bytes(v) for v in absent]
            self._hint(choices[int(arg) % len(choices)])
        next_tick(self.root / VERSIONS_DIR)


def _restricted(storage: Storage, since: int) -> tuple[list[int], int | None]:
    listing = scan_versions(storage, since=since)
    latest = listing.latest
    return [e.version for e in listing if e.version >= since], (
        None if latest is None else latest.version
    )


def _played(root: Path, history: list[tuple[str, int | bool]], *, real: bool) -> Table:
    """A table at ``root`` after ``history`` (a clock tick after its creation)."""
    table = Table(root, real=real)
    next_tick(table.root / VERSIONS_DIR)
    for kind, arg in history:
        table.apply(kind, arg)
    return table


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=_history, picks=st.lists(st.integers(0, 1000), min_size=1, max_size=4))
def test_scan_with_the_hint_answers_what_the_full_listing_answers(
    history: list[tuple[str, int | bool]], picks: list[int]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        table = _played(Path(tmp) / "t.lance", history, real=False)
        full = [e.version for e in scan_versions(table.store)]
        assert full == table.existing
        candidates = [*range(0, table.created + 3), U64_MAX]
        for pick in picks:
            since = candidates[pick % len(candidates)]
            rec = RecordingStorage(table.store)
            versions, latest = _restricted(rec, since)
            assert latest == full[-1]
            assert versions == [v for v in full if v >= since]
            if table.last_wrote_hint and full[-1] - since < 256:
                assert rec.counts["list"] == 0  # a fresh hint answered alone


def _outcome(storage: Storage, read_version: int) -> tuple[str, int | None]:
    try:
        return "landed", commit(storage, Transaction(read_version, Append([frag()]))).version
    except TxnEngineError as exc:
        return type(exc).__name__, getattr(exc, "conflicting_version", None)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=_history, pick=st.integers(0, 1000))
def test_the_commit_loop_decides_the_same_with_and_without_the_hint(
    history: list[tuple[str, int | bool]], pick: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        table = _played(Path(tmp) / "with.lance", history, real=True)
        without = Path(tmp) / "without.lance"
        shutil.copytree(table.root, without)
        (without / VERSION_HINT_PATH).unlink(missing_ok=True)
        read_version = [*range(1, table.created + 2)][pick % (table.created + 1)]
        rec = RecordingStorage(table.store)
        hinted = _outcome(rec, read_version)
        listed = _outcome(LocalStorage(without, fsync=False), read_version)
        assert hinted == listed
        if table.last_wrote_hint and hinted[0] == "landed":
            assert rec.counts["list"] == 0
