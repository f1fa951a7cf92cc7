"""The writers machine with a cleaner between any two steps (txn_engine.testing.machine,
``cleaner = True``): every file of every kept version exists, no acknowledged row is lost,
commits across removed history are refused with HistoryUnavailableError (never a silent
pass), leased writers never lose their history; plus mutation checks proving the cleaner
invariants catch a cleanup that ignores leases or deletes referenced files."""

from __future__ import annotations

import importlib
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

import attrs
import pytest
from hypothesis import settings

from txn_engine.storage.base import Storage
from txn_engine.storage.local import LocalStorage
from txn_engine.testing.machine import WritersMachine, find_failure

cleanup_mod = importlib.import_module("txn_engine.retention")


class CleanedWriters(WritersMachine):
    """Every writer leases its snapshot (long leases, or short ones that expire unless the
    writer commits within 3 steps, after which it must re-plan)."""

    cleaner = True
    lease_ttls = (3.0, 10.0**6)


class CleanedWritersWithFaults(WritersMachine):
    cleaner = True
    lease_ttls = (3.0, 10.0**6)
    faults = ("lost_response", "spurious_exists", "crash_before_manifest", "unknown_outcome")


class CleanedUnleasedWriters(WritersMachine):
    """Writers without leases (and cleanups keeping orphans long enough for any plan): a
    cleanup may remove the history a writer planned on, even the slot it is about to
    create; the commit must then be refused, never acknowledged off the main line."""

    cleaner = True
    lease_ttls = (None,)
    orphan_retentions = (10**6,)


class CleanedLocalWriters(WritersMachine):
    cleaner = True
    lease_ttls = (3.0, 10.0**6)
    kinds = ("append", "delete", "update", "compact", "overwrite", "restore")

    def make_storage(self) -> Storage:
        self.root = tempfile.mkdtemp(prefix="cleaned-writers-")
        return LocalStorage(self.root, fsync=False)

    def teardown(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


TestCleanedWriters = CleanedWriters.TestCase
TestCleanedWriters.settings = settings(stateful_step_count=60)
TestCleanedWritersWithFaults = CleanedWritersWithFaults.TestCase
TestCleanedWritersWithFaults.settings = settings(stateful_step_count=50)
TestCleanedUnleasedWriters = CleanedUnleasedWriters.TestCase
TestCleanedUnleasedWriters.settings = settings(stateful_step_count=60)
TestCleanedLocalWriters = CleanedLocalWriters.TestCase
TestCleanedLocalWriters.settings = settings(stateful_step_count=30, max_examples=20)


# ---- the cleaner invariants catch a broken cleanup -----------------------------------------


@pytest.fixture
def patched(monkeypatch: pytest.MonkeyPatch) -> Callable[[Any, str, Any], None]:
    return lambda obj, name, value: monkeypatch.setattr(obj, name, value)


def test_catches_a_cleanup_that_ignores_leases(patched: Callable[[Any, str, Any], None]) -> None:
    """Without leases a planning writer's history (and files) go: a leased writer sees it."""
    patched(cleanup_mod, "read_leases", lambda storage: [])
    message = find_failure(CleanedWriters)
    assert any(
        sign in message
        for sign in (
            "leased writer",
            "live lease",
            "references removed files",
            "deleted files",
            "a silent pass",
        )
    ), message


def test_catches_a_cleanup_that_deletes_files_kept_versions_reference(
    patched: Callable[[Any, str, Any], None],
) -> None:
    """A cleanup that takes the kept versions' files for the removed versions' files."""
    original = cleanup_mod.build_plan

    def careless(storage: Any, state: Any, **kw: Any) -> Any:
        plan = original(storage, state, **kw)
        kept = {p for v in plan.kept_versions for p in state.refs[v].files}
        extra = tuple(
            cleanup_mod.PlannedDelete(p, "old-version")
            for p in sorted(kept)
            if p.startswith("data/") and plan.removed_versions
        )
        return attrs.evolve(plan, deletes=plan.deletes + extra)

    patched(cleanup_mod, "build_plan", careless)
    message = find_failure(CleanedWriters)
    assert "deleted files" in message or "references removed files" in message, message
