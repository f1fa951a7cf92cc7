"""Concurrent writers, every interleaving Hypothesis can find, with and without lost
responses, on the memory and local-disk backends (txn_engine.testing.machine)."""

from __future__ import annotations

import tempfile

from hypothesis import settings

from txn_engine.storage.base import Storage
from txn_engine.storage.local import LocalStorage
from txn_engine.testing.faults import FaultyStorage
from txn_engine.testing.machine import WritersMachine


class MemoryWriters(WritersMachine):
    lose_responses = False


class MemoryWritersLosingResponses(WritersMachine):
    lose_responses = True


class LocalWritersLosingResponses(WritersMachine):
    lose_responses = True

    def make_storage(self) -> Storage:
        return FaultyStorage(LocalStorage(tempfile.mkdtemp(prefix="writers-"), fsync=False))


_settings = settings(stateful_step_count=25)
TestMemoryWriters = MemoryWriters.TestCase
TestMemoryWriters.settings = _settings
TestMemoryWritersLosingResponses = MemoryWritersLosingResponses.TestCase
TestMemoryWritersLosingResponses.settings = _settings
TestLocalWritersLosingResponses = LocalWritersLosingResponses.TestCase
TestLocalWritersLosingResponses.settings = settings(stateful_step_count=15, max_examples=25)


def test_the_machine_catches_an_engine_that_loses_a_deletion(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Mutation check: if deletion files silently drop an offset, an invariant fails."""
    import pytest
    from hypothesis.stateful import run_state_machine_as_test
    from pyroaring import BitMap

    import txn_engine.testing.machine as machine

    original = machine.write_deletion_vector

    def forgetful(storage, fragment_id, version, offsets, **kw):  # type: ignore[no-untyped-def]
        kept = BitMap(sorted(offsets)[:-1]) or BitMap([0])
        return original(storage, fragment_id, version, kept, **kw)

    monkeypatch.setattr(machine, "write_deletion_vector", forgetful)
    with pytest.raises(AssertionError):
        run_state_machine_as_test(MemoryWriters, settings=settings(max_examples=200))
