"""Fault wrappers keep a wrapped storage's commit authority (``s3+ddb://``).

A fault injector around a storage that carries its own commit handler must not bypass it
(that would skip the manifest store) nor refuse to commit: the wrapper's manifest-create
faults apply to the authority's commit, and the commit loop settles them as usual.
"""

from __future__ import annotations

import random
import uuid

from txn_engine.commit import commit
from txn_engine.dataset import Dataset
from txn_engine.model import DataFile, Fragment, LanceField
from txn_engine.ops import Append, Overwrite
from txn_engine.storage import (
    ExternalManifestStorage,
    InMemoryManifestStore,
    MemoryStorage,
    StoreCommitHandler,
    commit_handler_for,
)
from txn_engine.testing.fault_storage import ChaosStorage
from txn_engine.testing.faults import Fault, FaultyStorage, WrappedCommitHandler
from txn_engine.transaction import Transaction

SCHEMA = (LanceField(0, -1, "id", "int64"),)


def frag(rows: int = 10) -> Fragment:
    return Fragment(0, (DataFile(f"{uuid.uuid4().hex}.lance", (0,), (0,), 2, 2, 100),), rows)


def external() -> tuple[ExternalManifestStorage, InMemoryManifestStore]:
    store = InMemoryManifestStore()
    return ExternalManifestStorage(MemoryStorage(), store, base_uri="ds"), store


def test_a_plain_store_keeps_its_own_create_through_the_wrapper() -> None:
    wrapper = FaultyStorage(MemoryStorage())
    handler = commit_handler_for(wrapper)
    assert isinstance(handler, StoreCommitHandler)
    assert handler.storage is wrapper


def test_a_lost_response_on_the_authority_is_settled_exactly_once() -> None:
    view, store = external()
    wrapper = FaultyStorage(view)
    lost = wrapper.add(Fault("put_if_absent", "_versions/*", mode="after", times=1))
    assert isinstance(commit_handler_for(wrapper), WrappedCommitHandler)
    first = commit(wrapper, Transaction(0, Overwrite([frag()], SCHEMA)))
    second = commit(wrapper, Transaction(first.version, Append([frag()])))
    assert lost.fired == 1
    assert (first.version, second.version) == (1, 2)
    assert store.get_latest("ds") is not None  # the manifest store decided, not the blob store
    assert Dataset.open(view).version == 2
    assert len(Dataset.open(view).fragments) == 2


def test_chaos_faults_reach_the_authority_and_every_commit_lands_once() -> None:
    view, _ = external()
    chaos = ChaosStorage(view, rate=0.5, kinds=("lost_response",), rng=random.Random(7))
    version = commit(chaos, Transaction(0, Overwrite([frag()], SCHEMA))).version
    for _ in range(10):
        version = commit(chaos, Transaction(version, Append([frag()]))).version
    assert chaos.injected["lost_response"] > 0
    ds = Dataset.open(view)
    assert ds.version == 11
    assert len(ds.fragments) == 11
