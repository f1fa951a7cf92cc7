"""Concurrent writers in every interleaving Hypothesis finds (txn_engine.testing.machine):
memory and local-disk backends, with and without storage faults; plus mutation checks
proving the machine's invariants catch a broken engine."""

from __future__ import annotations

import importlib
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

import attrs
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule
from pyroaring import BitMap

from txn_engine.format.naming import NamingScheme
from txn_engine.ops import Delete
from txn_engine.storage import MemoryStorage
from txn_engine.storage.base import Storage
from txn_engine.storage.local import LocalStorage
from txn_engine.testing.fault_storage import FAULT_KINDS
from txn_engine.testing.machine import WritersMachine, find_failure
from txn_engine.testing.model import RemoveRows, read_contents
from txn_engine.transaction import Transaction

# (the package re-exports functions named like some submodules: fetch the modules themselves)
commit_mod = importlib.import_module("txn_engine.loop.create")
detect_mod = importlib.import_module("txn_engine.conflicts.detect")
planner_mod = importlib.import_module("txn_engine.conflicts.planner")
rows_mod = importlib.import_module("txn_engine.builder.rows")
builder_mod = importlib.import_module("txn_engine.builder")
_FAULTS = tuple(k for k in FAULT_KINDS if k != "latency")


class MemoryWriters(WritersMachine):
    pass


class MemoryWritersWithFaults(WritersMachine):
    faults = _FAULTS


class MemoryWritersV1Names(WritersMachine):
    """The same on a dataset with V1 manifest names (``N.manifest``)."""

    naming = NamingScheme.V1
    faults = ("lost_response", "spurious_exists", "crash_after_manifest")


class FourWritersDeletesAndCompactions(WritersMachine):
    """Row-level contention only: concurrent deletes/updates of the same fragments."""

    n_writers = 4
    kinds = ("append", "delete", "delete", "update", "compact")


class LocalWritersWithFaults(WritersMachine):
    faults = _FAULTS

    def make_storage(self) -> Storage:
        self.root = tempfile.mkdtemp(prefix="writers-")
        return LocalStorage(self.root, fsync=False)

    def teardown(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


class _ObjectStoreMemory(MemoryStorage):
    """A memory store that declares concurrent requests, as an object store does."""

    read_concurrency = 8


class GuardedWriters(WritersMachine):
    """Writers on a store that serves requests concurrently: every create is guarded (a
    listing and the ``.txn`` copy beside it), a Dataset base creates read_version + 1 at
    once, a lost race retries at once on the winner (``txn_engine.commit``, *Guarded
    creates*), with every operation kind, stale plans, rebases and group commits."""

    n_writers = 4
    kinds = ("append", "append", "delete", "update", "compact", "overwrite")

    def make_storage(self) -> Storage:
        return _ObjectStoreMemory()


TestMemoryWriters = MemoryWriters.TestCase
TestMemoryWriters.settings = settings(stateful_step_count=80)
TestMemoryWritersWithFaults = MemoryWritersWithFaults.TestCase
TestMemoryWritersWithFaults.settings = settings(stateful_step_count=80)
TestMemoryWritersV1Names = MemoryWritersV1Names.TestCase
TestMemoryWritersV1Names.settings = settings(stateful_step_count=80)
TestFourWritersDeletesAndCompactions = FourWritersDeletesAndCompactions.TestCase
TestFourWritersDeletesAndCompactions.settings = settings(stateful_step_count=80)
TestLocalWritersWithFaults = LocalWritersWithFaults.TestCase
TestLocalWritersWithFaults.settings = settings(stateful_step_count=40)
TestGuardedWriters = GuardedWriters.TestCase
TestGuardedWriters.settings = settings(stateful_step_count=80)


# ---- the machine catches broken engines ----------------------------------------------------


@pytest.fixture
def patched(monkeypatch: pytest.MonkeyPatch) -> Callable[[Any, str, Any], None]:
    """``patched(module, name, value)``: monkeypatch for the duration of the test."""
    return lambda obj, name, value: monkeypatch.setattr(obj, name, value)


def test_catches_a_rebase_that_drops_the_other_writers_deletions(
    patched: Callable[[Any, str, Any], None],
) -> None:
    """Merging deletion vectors keeps only my offsets: a concurrent deletion is lost."""
    patched(rows_mod, "_pb_dv", lambda read_dv, fragment: BitMap())
    message = find_failure(FourWritersDeletesAndCompactions)
    assert any(
        sign in message
        for sign in ("deletion lost", "rows lost", "unexpected rows", "present twice", "not live")
    ), message


def test_catches_missing_conflict_detection(patched: Callable[[Any, str, Any], None]) -> None:
    """An engine that never detects conflicts resurrects or loses rows."""
    patched(planner_mod, "check", lambda *a, **k: detect_mod.Check())
    find_failure(FourWritersDeletesAndCompactions)


def test_catches_a_settlement_that_claims_unlanded_commits(
    patched: Callable[[Any, str, Any], None],
) -> None:
    """Treating every ambiguous create as landed acknowledges commits that are not there."""
    patched(commit_mod, "_settle", lambda storage, path, data, *a: data)  # "ours is there"

    class Faulty(WritersMachine):
        faults = ("fail_before_write", "spurious_exists")
        kinds = ("append",)

    assert "acknowledged at" in find_failure(Faulty)


def test_catches_fragment_ids_reused(patched: Callable[[Any, str, Any], None]) -> None:
    """A builder that forgets the high-water mark hands a removed fragment's id out again."""
    patched(
        builder_mod, "max_fragment_id", lambda m: m.fragments[-1].id if len(m.fragments) else None
    )

    class Deleting(WritersMachine):
        kinds = ("append", "delete", "delete")
        interleave = False

    message = find_failure(Deleting)
    assert "ids" in message


# ---- extending the machine with your own writer (as docs/testing.md shows) --------------------


class CustomWriters(WritersMachine):
    """A user's own planner (here: delete whole fragments) plugged into the machine."""

    kinds = ("append",)

    @precondition(lambda self: any(w.snapshot is not None and w.txn is None for w in self.writers))
    @rule(data=st.data())
    def plan_with_my_writer(self, data: st.DataObject) -> None:
        i = next(i for i, w in enumerate(self.writers) if w.snapshot is not None and w.txn is None)
        writer = self.writers[i]
        assert writer.snapshot is not None
        fragments = list(writer.snapshot.fragments)
        if not fragments:
            return
        victim = data.draw(st.sampled_from(fragments), label="fragment to drop")
        live = read_contents(self.inner, self.rows, writer.snapshot.version).by_rid
        rids = [rid for rid, _ in self.rows.rows(victim) if rid in live]
        txn = Transaction(writer.snapshot.version, Delete(deleted_fragment_ids=(victim.id,)))
        writer.txn, writer.effect = txn, RemoveRows(rids)
        self.effects[txn.uuid] = writer.effect


TestCustomWriters = CustomWriters.TestCase
TestCustomWriters.settings = settings(stateful_step_count=30)


class GroupedWriters(WritersMachine):
    """Plans also committed together through one Committer (group commit): Appends in one
    version, the rest alone in order; every invariant above still holds per writer."""

    grouped = True
    kinds = ("append", "append", "append", "delete", "config", "overwrite")
    faults = ("lost_response", "unknown_outcome")


TestGroupedWriters = GroupedWriters.TestCase
TestGroupedWriters.settings = settings(stateful_step_count=60)


def test_catches_a_group_commit_that_forgets_its_members(
    patched: Callable[[Any, str, Any], None],
) -> None:
    """Without the members' uuids in the group transaction, a member whose group outcome
    was unknown cannot be found: committing it again lands it a second time."""
    committer_mod = importlib.import_module("txn_engine.committer")
    real = committer_mod._merge

    def forgetful(members: Any) -> Any:
        merged = real(members)
        return attrs.evolve(merged, properties={})

    patched(committer_mod, "_merge", forgetful)

    class Grouped(WritersMachine):
        grouped = True
        kinds = ("append",)
        faults = ("unknown_outcome",)

    find_failure(Grouped)
