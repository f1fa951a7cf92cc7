"""Sessions: every memory the library keeps between calls is on a ``Session``; a fresh one
starts from nothing, and the calls that take ``session=`` (and the threads they start) use
it instead of the default one."""

from __future__ import annotations

import threading
import time
import uuid

import txn_engine as te
from txn_engine.commit import commit
from txn_engine.contention.offers import OfferMemory
from txn_engine.dataset import Dataset
from txn_engine.format.naming import BEACON_SECONDS, VERSIONS_DIR, beacon_name, carrier_beacon
from txn_engine.model import DataFile, Fragment, LanceField
from txn_engine.ops import Append, Overwrite
from txn_engine.retry import RetryPolicy
from txn_engine.session import Session, current, default, using, wrap
from txn_engine.storage import MemoryStorage
from txn_engine.transaction import Transaction

SCHEMA = (LanceField(0, -1, "id", "int64"),)


class _Memory:
    def __init__(self) -> None:
        self.items: list[int] = []


class ObjectStore(MemoryStorage):
    """In memory, served concurrently as an object store is (guarded creates, offers)."""

    read_concurrency = 8


def frag(tag: str) -> Fragment:
    return Fragment(0, (DataFile(f"{tag}.lance", (0,), (0,), 2, 2, 100),), 10)


def test_a_part_is_made_once_per_session() -> None:
    a, b = Session(), Session()
    assert a.part(_Memory) is a.part(_Memory)
    assert a.part(_Memory) is not b.part(_Memory)
    a.part(_Memory).items.append(1)
    assert b.part(_Memory).items == []
    assert "_Memory" in repr(a)


def test_using_makes_a_session_current_and_restores_the_one_before() -> None:
    outer, inner = Session(), Session()
    assert current() is default()
    with using(outer):
        assert current() is outer
        with using(inner):
            assert current() is inner
        with using(None):  # None keeps the current one
            assert current() is outer
        assert current() is outer
    assert current() is default()
    assert te.Session is Session
    assert te.session.current is current


def test_a_thread_sees_the_session_only_when_its_work_is_wrapped() -> None:
    mine = Session()
    seen: dict[str, Session] = {}
    with using(mine):
        plain = threading.Thread(target=lambda: seen.setdefault("plain", current()))
        wrapped = threading.Thread(target=wrap(lambda: seen.setdefault("wrapped", current())))
    plain.start()
    wrapped.start()
    plain.join()
    wrapped.join()
    assert seen == {"plain": default(), "wrapped": mine}


def test_a_contended_commit_remembers_in_its_own_session_only() -> None:
    """A commit that lost a race on an object store keeps what it read for the next commit
    on the table, and notes its transaction as its own: in the session it was given, not in
    the default one (a fresh session recalls nothing of it)."""
    store = ObjectStore(f"memory://session-{uuid.uuid4().hex}")
    commit(store, Transaction(0, Overwrite([frag("seed")], SCHEMA)))
    base = Dataset.open(store)
    commit(store, Transaction(1, Append([frag("winner")])), base=base)
    mine = Session()
    loser = Transaction(1, Append([frag("loser")]))
    policy = RetryPolicy(wait_for_carrier=False, host_carrier=False)
    result = commit(store, loser, base=base, retry_policy=policy, session=mine)
    assert result.version == 3
    assert result.attempts == 2  # the direct create lost to the winner's version 2
    assert store.uri in mine.part(OfferMemory).recent
    assert store.uri not in default().part(OfferMemory).recent
    assert store.uri not in Session().part(OfferMemory).recent
    kept = mine.part(OfferMemory).recent[store.uri].transactions
    assert kept[2] is not None  # the winner's transaction, read for the retry
    assert kept[3] is not None
    assert kept[3].uuid == loser.uuid  # and its own, landed


def test_a_table_and_a_committer_commit_in_their_own_session() -> None:
    """``te.open(..., session=)`` and ``Committer(..., session=)`` run their calls (the
    committer's worker thread included) in the session given: the carrier beacon their
    listings show is remembered there, not in the default session."""
    from txn_engine.committer import Committer

    for kind in ("committer", "table"):
        store = ObjectStore(f"memory://session-{uuid.uuid4().hex}")
        commit(store, Transaction(0, Overwrite([frag("seed")], SCHEMA)))
        expires = int((time.time() + BEACON_SECONDS) * 1000)
        store.put(f"{VERSIONS_DIR}/{beacon_name(expires, '0' * 32)}", b"")
        mine = Session()
        policy = RetryPolicy(wait_for_carrier=False, host_carrier=False)
        if kind == "committer":
            with Committer(store, retry_policy=policy, session=mine) as committer:
                landed = committer.commit(Transaction(1, Append([frag("grouped")])))
            assert landed.version == 2
        else:
            table = te.open(store, session=mine)
            assert table.session is mine
            assert table.version == 1
        with using(mine):
            assert carrier_beacon(store.uri), kind
        assert not carrier_beacon(store.uri), kind
