"""Detached commits (``commit(..., detached=True)``): a version outside the main line, and
how readers, cleanup and verify treat detached manifests (pylance's layout and behaviour:
``tests/integration/test_detached_pylance.py``)."""

from __future__ import annotations

import importlib
import uuid
from datetime import timedelta

import pytest

from txn_engine.commit import commit
from txn_engine.dataset import Dataset
from txn_engine.errors import (
    CleanupAbortedError,
    InvalidOperationError,
    RetriesExhaustedError,
    VersionNotFoundError,
)
from txn_engine.format.naming import NamingScheme, list_versions
from txn_engine.model import DataFile, Fragment, LanceField
from txn_engine.ops import Append, Overwrite, UpdateConfig
from txn_engine.retention import CleanupReport, cleanup
from txn_engine.storage import MemoryStorage
from txn_engine.storage.base import Storage
from txn_engine.storage.external import ExternalManifestStorage, InMemoryManifestStore
from txn_engine.transaction import Transaction
from txn_engine.verify import verify

commit_module = importlib.import_module("txn_engine.loop.new")  # where detached numbers are drawn
SCHEMA = (LanceField(0, -1, "id", "int64"),)
TOP_BIT = 1 << 63
ZERO = timedelta(0)


def _frag(store: Storage) -> Fragment:
    name = f"{uuid.uuid4().hex}.lance"
    store.put(f"data/{name}", b"x" * 10)
    return Fragment(0, (DataFile(name, (0,), (0,), 2, 2, 10),), 5)


def _table(store: Storage) -> None:
    commit(store, Transaction(0, Overwrite([_frag(store)], SCHEMA)))
    commit(store, Transaction(1, Append([_frag(store)])))


def test_a_detached_version_is_outside_the_main_line() -> None:
    store = MemoryStorage()
    _table(store)
    result = commit(store, Transaction(1, Append([_frag(store)])), detached=True)
    assert result.version & TOP_BIT
    assert result.manifest_path == f"_versions/d{result.version}.manifest"
    assert store.exists(result.manifest_path)
    assert [e.version for e in list_versions(store)] == [1, 2]
    assert Dataset.open(store).version == 2
    ds = Dataset.open(store, version=result.version)
    assert (ds.version, ds.count_rows(), len(ds.fragments)) == (result.version, 10, 2)
    assert ds.manifest.version == result.version
    # the main line goes on from its own latest, not from the detached version
    assert commit(store, Transaction(2, UpdateConfig(config_updates={"k": "v"}))).version == 3
    with pytest.raises(VersionNotFoundError):
        Dataset.open(store, version=TOP_BIT | 12345)


def test_a_taken_detached_number_is_drawn_again(monkeypatch: pytest.MonkeyPatch) -> None:
    store = MemoryStorage()
    _table(store)
    taken = commit(store, Transaction(1, Append([_frag(store)])), detached=True).version
    draws = iter([taken, taken, 7])
    monkeypatch.setattr(commit_module.secrets, "randbits", lambda bits: next(draws))
    result = commit(store, Transaction(2, Append([_frag(store)])), detached=True)
    assert (result.version, result.attempts) == (TOP_BIT | 7, 3)
    assert Dataset.open(store, version=taken).count_rows() == 10  # not overwritten
    monkeypatch.setattr(commit_module.secrets, "randbits", lambda bits: taken)
    with pytest.raises(RetriesExhaustedError):
        commit(store, Transaction(2, Append([_frag(store)])), detached=True)


def test_detached_commits_pylance_refuses_are_refused() -> None:
    v1 = MemoryStorage()
    commit(v1, Transaction(0, Overwrite([], SCHEMA)), naming=NamingScheme.V1)
    with pytest.raises(InvalidOperationError, match="V1 manifest names"):
        commit(v1, Transaction(1, Append([_frag(v1)])), detached=True)
    with pytest.raises(InvalidOperationError, match="create"):
        commit(MemoryStorage(), Transaction(0, Overwrite([], SCHEMA)), detached=True)
    store = MemoryStorage()
    _table(store)
    detached = commit(store, Transaction(2, Append([_frag(store)])), detached=True).version
    with pytest.raises(InvalidOperationError, match="detached"):
        commit(store, Transaction(detached, Append([_frag(store)])))
    # an external manifest store decides main-line versions only
    external = ExternalManifestStorage(MemoryStorage(), InMemoryManifestStore(), base_uri="ds")
    commit(external, Transaction(0, Overwrite([], SCHEMA)))
    with pytest.raises(InvalidOperationError, match="branch"):
        commit(external, Transaction(1, UpdateConfig(config_updates={"k": "v"})), detached=True)
    assert [e.version for e in list_versions(external)] == [1]


def test_cleanup_keeps_detached_manifests_and_their_files_and_stops_on_a_bad_one() -> None:
    store = MemoryStorage()
    _table(store)
    extra = _frag(store)
    detached = commit(store, Transaction(1, Append([extra])), detached=True)
    commit(store, Transaction(2, Overwrite([_frag(store)], SCHEMA)))
    report = cleanup(store, older_than=ZERO, retention_orphans=ZERO, progress=False)
    assert isinstance(report, CleanupReport)
    assert report.plan.removed_versions == (1, 2)
    assert store.exists(detached.manifest_path)
    assert Dataset.open(store, version=detached.version).count_rows() == 10
    for frag in Dataset.open(store, version=detached.version).fragments:
        assert store.exists(f"data/{frag.files[0].path}")
    assert verify(store, deep=True, data_files=True).ok
    bad = f"_versions/d{TOP_BIT | 99}.manifest"
    store.put(bad, b"not a manifest")
    with pytest.raises(CleanupAbortedError) as caught:
        cleanup(store, older_than=ZERO, retention_orphans=ZERO, progress=False)
    assert caught.value.path == bad
    findings = verify(store).errors
    assert [(f.version, f.invariant) for f in findings] == [(TOP_BIT | 99, "manifest-decodes")]
