"""A reusable Hypothesis state machine of concurrent writers, and its reference model.

Writers are phase machines: each one **reads** a version, **plans** an operation against
it and later **commits** it; Hypothesis interleaves those steps of N writers in one thread,
deterministically, so any failure shrinks to a short, replayable script. Storage can lose
responses (a manifest create lands but the writer sees an error) to test exactly-once.

Rows have identities: a fragment's data file is named ``r{first_rid}-{rows}.lance`` (no
file is written: the engine never reads data files), so the live rows of any version are
computable from its manifest and deletion vectors. The reference model folds the
acknowledged transactions in version order; after every step the dataset must equal it.

Use it for your own writer by subclassing :class:`WritersMachine` (override
:meth:`WritersMachine.make_storage`, or add new ``@rule`` methods; overriding an existing
rule method without re-decorating it removes that rule), then::

    TestWriters = WritersMachine.TestCase
"""

from __future__ import annotations

import re
from typing import Any

import attrs
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from pyroaring import BitMap, BitMap64

from txn_engine.commit import commit
from txn_engine.conflicts.matrix import MATRIX, Outcome
from txn_engine.dataset import Dataset
from txn_engine.errors import (
    CommitConflictError,
    CommitStateUnknownError,
    RetriesExhaustedError,
)
from txn_engine.format.deletion import read_deletion_vector, write_deletion_vector
from txn_engine.format.schema import arrow_to_lance_fields
from txn_engine.model import DataFile, Fragment
from txn_engine.ops import Append, Delete, Overwrite, UpdateConfig, UpdateMap
from txn_engine.retry import RetryPolicy
from txn_engine.storage.base import Storage
from txn_engine.storage.memory import MemoryStorage
from txn_engine.testing.faults import Fault, FaultyStorage
from txn_engine.transaction import Transaction
from txn_engine.verify import verify

__all__ = ["N_WRITERS", "WritersMachine", "live_rids", "synthetic_fragment"]

N_WRITERS = 3
_NAME = re.compile(r"r(\d+)-(\d+)\.lance$")


def synthetic_fragment(first_rid: int, rows: int) -> Fragment:
    """A fragment whose (never written) data file name records its rows' identities."""
    return Fragment(0, (DataFile(f"r{first_rid}-{rows}.lance", (0,), (0,), 2, 2, 1),), rows)


def live_rids(storage: Storage, version: int | None = None) -> list[int]:
    """Row identities visible in ``version`` (latest by default), with multiplicity."""
    ds = Dataset.open(storage, version=version)
    rids: list[int] = []
    for frag in ds.manifest.fragments:
        match = _NAME.search(frag.files[0].path)
        assert match is not None, frag.files[0].path
        first = int(match.group(1))
        deleted = (
            read_deletion_vector(storage, frag.id, frag.deletion_file)
            if frag.HasField("deletion_file")
            else BitMap()
        )
        rids.extend(first + o for o in range(frag.physical_rows) if o not in deleted)
    return rids


@attrs.define
class _Writer:
    read: Dataset | None = None
    planned: Transaction | None = None
    added: list[int] = attrs.field(factory=list)
    removed: list[int] = attrs.field(factory=list)


class WritersMachine(RuleBasedStateMachine):
    """N writers reading, planning and committing in any interleaving (see module doc)."""

    lose_responses: bool = True

    def __init__(self) -> None:
        super().__init__()
        self.storage = self.make_storage()
        schema = arrow_to_lance_fields(_schema())
        commit(self.storage, Transaction(0, Overwrite((synthetic_fragment(0, 8),), schema)))
        self.next_rid = 1000
        self.expected: set[int] = set(range(8))
        self.acked: dict[str, int] = {}
        self.writers = [_Writer() for _ in range(N_WRITERS)]

    def make_storage(self) -> Storage:
        """The backend under test (override for another one)."""
        inner = MemoryStorage()
        return FaultyStorage(inner) if self.lose_responses else inner

    # ---- rules ------------------------------------------------------------------------

    @rule(w=st.integers(0, N_WRITERS - 1))
    def read(self, w: int) -> None:
        """Writer ``w`` reads the latest version (and drops any stale plan)."""
        self.writers[w] = _Writer(read=Dataset.open(self.storage))

    @precondition(lambda self: any(x.read is not None and x.planned is None for x in self.writers))
    @rule(data=st.data())
    def plan(self, data: st.DataObject) -> None:
        """A writer that has read plans an append, a delete of some rows, or a config edit."""
        ready = [i for i, x in enumerate(self.writers) if x.read is not None and x.planned is None]
        w = data.draw(st.sampled_from(ready), label="writer")
        writer = self.writers[w]
        ds = writer.read
        assert ds is not None
        kind = data.draw(st.sampled_from(["append", "delete", "config"]), label="kind")
        frags = ds.manifest.fragments
        if kind == "delete" and len(frags):
            frag = frags[data.draw(st.integers(0, len(frags) - 1), label="fragment")]
            deleted = (
                read_deletion_vector(self.storage, frag.id, frag.deletion_file)
                if frag.HasField("deletion_file")
                else BitMap()
            )
            alive = [o for o in range(frag.physical_rows) if o not in deleted]
            if len(alive) > 1:
                chosen = data.draw(
                    st.lists(
                        st.sampled_from(alive), min_size=1, max_size=len(alive) - 1, unique=True
                    ),
                    label="offsets",
                )
                match = _NAME.search(frag.files[0].path)
                assert match is not None
                first = int(match.group(1))
                dv = write_deletion_vector(
                    self.storage, frag.id, ds.version, deleted | BitMap(chosen)
                )
                pb = type(frag)()
                pb.CopyFrom(frag)
                pb.deletion_file.CopyFrom(dv)
                writer.planned = Transaction(
                    ds.version,
                    Delete(
                        updated_fragments=(Fragment.from_proto(pb),),
                        affected_rows=BitMap64((frag.id << 32) | o for o in chosen),
                    ),
                )
                writer.removed = [first + o for o in chosen]
                return
            kind = "append"
        if kind == "config":
            key = data.draw(st.sampled_from(["a", "b", "c"]), label="key")
            writer.planned = Transaction(
                ds.version, UpdateConfig(config_updates=UpdateMap({key: str(w)}))
            )
            return
        rows = data.draw(st.integers(2, 6), label="rows")
        first = self.next_rid
        self.next_rid += rows
        writer.planned = Transaction(ds.version, Append((synthetic_fragment(first, rows),)))
        writer.added = list(range(first, first + rows))

    @precondition(lambda self: any(x.planned is not None for x in self.writers))
    @rule(data=st.data(), lose=st.booleans())
    def commit_planned(self, data: st.DataObject, lose: bool) -> None:
        """A writer commits its plan; the manifest create may lose its response."""
        ready = [i for i, x in enumerate(self.writers) if x.planned is not None]
        w = data.draw(st.sampled_from(ready), label="writer")
        writer = self.writers[w]
        txn = writer.planned
        assert txn is not None
        if lose and isinstance(self.storage, FaultyStorage):
            self.storage.add(Fault("put_if_absent", "_versions/*", mode="after", times=1))
        try:
            result = commit(
                self.storage, txn, retry_policy=RetryPolicy(max_attempts=3, sleep=lambda s: None)
            )
        except CommitConflictError as exc:
            self._check_conflict_is_in_matrix(exc)
            self.writers[w] = _Writer()
            return
        except (RetriesExhaustedError, CommitStateUnknownError):
            # not acknowledged: it may have landed; find out like a caller would
            result = None
        finally:
            if isinstance(self.storage, FaultyStorage):
                self.storage.clear()
        if result is None:
            from txn_engine.commit import find_transaction

            version = find_transaction(self.storage, txn.uuid)
            if version is None:
                self.writers[w] = _Writer()
                return
            landed_version = version
        else:
            landed_version = result.version
        assert txn.uuid not in self.acked, "a transaction was acknowledged twice"
        self.acked[txn.uuid] = landed_version
        self.expected |= set(writer.added)
        self.expected -= set(writer.removed)
        self.writers[w] = _Writer()

    def _check_conflict_is_in_matrix(self, exc: CommitConflictError) -> None:
        """Every conflict raised must be one the matrix can produce for that pair."""
        mine, other = exc.operation, exc.other_operation
        if other is None:  # row-level overlap found while rebasing deletion vectors
            assert mine in ("Delete", "Update")
            assert exc.retryable
            return
        assert mine is not None
        rule_ = MATRIX[(mine, other)]
        assert rule_.outcome is not Outcome.COMPATIBLE, (
            f"{mine} vs {other} raised a conflict, but the matrix says always compatible"
        )
        if rule_.outcome is not None:
            assert exc.retryable == (rule_.outcome is Outcome.RETRYABLE)

    # ---- invariants -------------------------------------------------------------------

    @invariant()
    def table_equals_the_serial_fold(self) -> None:
        rids = live_rids(self.storage)
        assert len(rids) == len(set(rids)), "a row is visible twice"
        assert set(rids) == self.expected

    @invariant()
    def history_is_well_formed(self) -> None:
        report = verify(self.storage)
        assert report.ok, [str(f) for f in report.findings]

    @invariant()
    def acknowledged_commits_landed_once_where_acknowledged(self) -> None:
        ds = Dataset.open(self.storage)
        by_uuid = {info.uuid: info.version for info in ds.versions() if info.uuid}
        for uuid, version in self.acked.items():
            assert by_uuid.get(uuid) == version


def _schema() -> Any:
    import pyarrow as pa  # type: ignore[import-untyped]

    return pa.schema([pa.field("rid", pa.int64())])
