"""A Hypothesis state machine over a namespace: multi-table transactions (some crashing
before or after their commit point), single-table writers (txn_engine's and pylance's),
readers through the namespace and a cleaner. No reader ever sees part of a transaction;
no acknowledged transaction is ever lost, nor lands twice."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from datetime import timedelta
from typing import Any

import lance
import pyarrow as pa
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

import txn_engine as te
from txn_engine.errors import NamespaceTransactionAbortedError

pytestmark = pytest.mark.pylance

TABLES = ("db.a", "db.b", "db.c")


def _rows(tag: int) -> pa.Table:
    return pa.table({"id": pa.array([tag], pa.int64())})


class NamespaceMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp()
        self.ns = te.Namespace(self.dir, abort_after=0.02)
        for t in TABLES:
            self.ns.create_table(t, _rows(0))
        self.tags = itertools.count(1)
        #: tag -> tables it must be in (acknowledged, or decided by a writer that died)
        self.landed: dict[int, tuple[str, ...]] = {}
        #: tag -> tables of a transaction whose writer died before its commit point
        self.lost: dict[int, tuple[str, ...]] = {}

    def teardown(self) -> None:
        try:
            self.read_each_table()  # the end state: every acknowledged tag, exactly once
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def _writer(self) -> Any:
        """Another process's view of the namespace (its own caches)."""
        return te.Namespace(self.dir, abort_after=0.02)

    @rule(
        tables=st.lists(st.sampled_from(TABLES), min_size=2, max_size=3, unique=True),
        crash=st.sampled_from(["none", "none", "before_decision", "after_decision"]),
    )
    def transaction(self, tables: list[str], crash: str) -> None:
        tag = next(self.tags)
        writer = self._writer()
        if crash == "after_decision":
            writer.publish_all = lambda decided, staged=None: None  # dies right after its decision
        tx = writer.transaction()
        try:
            for t in tables:
                tx.open(t).append(_rows(tag))
        except NamespaceTransactionAbortedError:  # gave way to an older, undecided one
            tx.abort()
            self.lost[tag] = tuple(tables)  # nothing of it may ever be visible
            return
        if crash == "before_decision":
            self.lost[tag] = tuple(tables)  # the writer is gone: nothing is decided
            return
        tx.commit()
        self.landed[tag] = tuple(tables)

    @rule(table=st.sampled_from(TABLES), pylance=st.booleans())
    def single_table_write(self, table: str, pylance: bool) -> None:
        tag = next(self.tags)
        writer = self._writer()
        if pylance:
            lance.dataset(namespace_client=writer, table_id=table.split(".")).insert(_rows(tag))
        else:
            writer.open(table).append(_rows(tag))
        self.landed[tag] = (table,)

    @rule(table=st.sampled_from(TABLES))
    def cleaner(self, table: str) -> None:
        self._writer().cleanup(
            table,
            older_than=timedelta(0),
            retention_orphans=timedelta(0),
            progress=False,
        )

    @precondition(lambda self: bool(self.landed))
    @rule()
    def consistent_read(self) -> None:
        reader = self._writer()
        snap = reader.snapshot(list(TABLES))
        seen = {
            t: _tags(lance.dataset(reader.location(tuple(t.split("."))), version=snap[t]))
            for t in TABLES
        }
        self._check(seen)

    @rule()
    def read_each_table(self) -> None:
        reader = self._writer()
        seen = {
            t: _tags(lance.dataset(namespace_client=reader, table_id=t.split("."))) for t in TABLES
        }
        self._check(seen)

    def _check(self, seen: dict[str, list[int]]) -> None:
        for table, tags in seen.items():
            assert len(tags) == len(set(tags)), f"a row landed twice in {table}"
        for tag, tables in self.landed.items():
            for t in tables:  # acknowledged (or decided): never lost, in every table
                assert tag in seen[t], f"tag {tag} missing from {t}"
        for tag, tables in self.lost.items():
            assert all(tag not in seen[t] for t in tables), f"partial/lost tx {tag} visible"


def _tags(ds: Any) -> list[int]:
    return [i for i in ds.to_table()["id"].to_pylist() if i != 0]


TestNamespaceMachine = NamespaceMachine.TestCase
TestNamespaceMachine.settings = settings(
    max_examples=25, stateful_step_count=15, deadline=None, database=None
)
