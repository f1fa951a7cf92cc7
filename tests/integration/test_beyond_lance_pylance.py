"""The pairs pylance 14 refuses that txn_engine resolves (``docs/conflicts.md``, *Beyond
Lance*), on real datasets: the second transaction is planned at the same version as the
first, lands after it without a re-plan, and the table equals pylance applying the two
operations one after the other; pylance itself refuses the same interleaving."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest

import txn_engine as te
from txn_engine.commit import commit
from txn_engine.conflicts.rebase import ConflictOptions
from txn_engine.errors import InvalidOperationError, RetryableConflictError
from txn_engine.testing.interleave import Step, lance_apply, table_rows

lance = pytest.importorskip("lance")

COMPACT = Step("compact")
DELETE_ONE = Step("delete", ("id = 37",))
UPSERT = Step(
    "merge_insert",
    (pa.table({"id": pa.array([5, 55], pa.int64()), "v": pa.array([-5, -55], pa.int64())}), "id"),
)
ADD_COLUMN = Step("add_columns", ({"w": "id * 2"},))

PAIRS = [
    ("compact-then-delete", COMPACT, DELETE_ONE),
    ("delete-then-compact", DELETE_ONE, COMPACT),
    ("delete-overlapping", Step("delete", ("id < 50",)), Step("delete", ("id < 60",))),
    ("compact-then-upsert", COMPACT, UPSERT),
    ("upsert-then-compact", UPSERT, COMPACT),
    ("add-column-then-delete", ADD_COLUMN, DELETE_ONE),
    ("delete-then-add-column", DELETE_ONE, ADD_COLUMN),
]


def _table(path: Path, *, stable: bool) -> str:
    uri = str(path / "t.lance")
    data = pa.table({"id": pa.array(range(100), pa.int64()), "v": pa.array(range(100), pa.int64())})
    lance.write_dataset(data, uri, max_rows_per_file=25, enable_stable_row_ids=stable)
    lance.dataset(uri).delete("id = 3 or id = 80")  # deletion vectors before anything
    return uri


@pytest.mark.parametrize("stable", [False, True], ids=["addresses", "stable-row-ids"])
@pytest.mark.parametrize(("name", "first", "second"), PAIRS, ids=[p[0] for p in PAIRS])
def test_pair_lands_and_equals_serial_pylance(
    tmp_path: Path, name: str, first: Step, second: Step, stable: bool
) -> None:
    uri = _table(tmp_path, stable=stable)
    oracle = str(tmp_path / "oracle.lance")
    shutil.copytree(uri, oracle)
    table = te.open(uri)
    planned = second.plan(table)  # planned at the same version as the first
    getattr(table, first.method)(*first.args, **dict(first.kwargs))
    with pytest.raises(RetryableConflictError):  # pylance 14's answer
        commit(table._storage, planned, conflict_options=ConflictOptions(rebase_rows=False))
    result = commit(table._storage, planned)
    assert result.attempts == 1
    lance_apply(oracle, first)
    lance_apply(oracle, second)
    assert table_rows(uri) == table_rows(oracle)
    ds = lance.dataset(uri)
    assert ds.count_rows() == lance.dataset(oracle).count_rows()
    if stable:
        got = ds.to_table(columns=["id"], with_row_id=True).sort_by("id")
        want = lance.dataset(oracle).to_table(columns=["id"], with_row_id=True).sort_by("id")
        assert got.column("_rowid").to_pylist() == want.column("_rowid").to_pylist()


@pytest.mark.parametrize("compact_first", [True, False], ids=["compact-first", "delete-first"])
def test_indexed_table_answers_index_queries_like_serial_pylance(
    tmp_path: Path, compact_first: bool
) -> None:
    """A BTREE index over the compacted fragments (through the fragment-reuse record):
    after the resolved pair, index queries answer as pylance's serial run. (Address
    tables only: on a stable-row-id table, an indexed table compacted by
    ``Table.compact`` answers index queries with no rows even without a concurrent
    writer, a defect of its own.)"""
    uri = _table(tmp_path, stable=False)
    lance.dataset(uri).create_scalar_index("id", "BTREE")
    oracle = str(tmp_path / "oracle.lance")
    shutil.copytree(uri, oracle)
    table = te.open(uri)
    first, second = (COMPACT, DELETE_ONE) if compact_first else (DELETE_ONE, COMPACT)
    planned = second.plan(table)
    getattr(table, first.method)(*first.args, **dict(first.kwargs))
    assert commit(table._storage, planned).attempts == 1
    lance_apply(oracle, first)
    lance_apply(oracle, second)
    for where in ("id = 37", "id = 36", "id = 38", "id < 40", "id >= 90", "id = 3"):
        got = lance.dataset(uri).to_table(filter=where).sort_by("id").to_pylist()
        want = lance.dataset(oracle).to_table(filter=where).sort_by("id").to_pylist()
        assert got == want, where
    assert table_rows(uri) == table_rows(oracle)


@pytest.mark.parametrize(
    ("appended", "refused"), [(5, True), (500, False)], ids=["matching", "not-matching"]
)
def test_serializable_delete_conflicts_with_an_append_its_predicate_matches(
    tmp_path: Path, appended: int, refused: bool
) -> None:
    """``isolation="serializable"``: a delete of ``id < 50`` planned before an Append is
    refused (retryable) exactly when the appended rows match, evaluated on the appended
    fragment with pylance; the default (snapshot, Lance's) lands it either way."""
    uri = _table(tmp_path, stable=False)
    serial = te.open(uri, isolation="serializable")
    planned = Step("delete", ("id < 50",)).plan(serial)
    rows = pa.table({"id": pa.array([appended], pa.int64()), "v": pa.array([0], pa.int64())})
    te.open(uri).append(rows)
    options = serial.conflict_options
    assert options is not None
    assert options.isolation == "serializable"
    if refused:
        with pytest.raises(RetryableConflictError) as info:
            commit(serial._storage, planned, conflict_options=options)
        assert info.value.conflicts[0].rule == "SER"
    else:
        commit(serial._storage, planned, conflict_options=options)
    commit(serial._storage, planned)  # snapshot: lands (or finds it landed)
    assert lance.dataset(uri).to_table(filter="id < 50").num_rows == (1 if refused else 0)


def test_serializable_update_records_its_predicate_for_pylance(tmp_path: Path) -> None:
    """An update records what it read in a transaction property; pylance 14 still reads
    the manifest and the transaction."""
    uri = _table(tmp_path, stable=False)
    table = te.open(uri, isolation="serializable", transaction_file=True)
    result = table.update({"v": "v + 1"}, where="id = 10")
    ds = lance.dataset(uri)
    assert ds.to_table(filter="id = 10").column("v").to_pylist() == [11]
    txn = ds.read_transaction(result.version)  # pylance reads the inline transaction
    assert txn.transaction_properties["txn_engine.read_predicate"] == "id = 10"
    assert dict(result.transaction.properties)["txn_engine.read_predicate"] == "id = 10"


@pytest.mark.parametrize(
    ("appended", "refused"), [(5, True), (500, False)], ids=["matching", "not-matching"]
)
def test_a_table_set_to_serializable_is_serializable_for_every_writer(
    tmp_path: Path, appended: int, refused: bool
) -> None:
    """The config key ``txn_engine.isolation`` (set here with pylance's own
    ``update_config``) makes a default writer serializable: a delete of ``id < 50`` planned
    before an Append of matching rows is refused (rule SER), one of non-matching rows
    lands; a writer asking for snapshot cannot weaken the table; a bare ``commit`` with no
    row matcher refuses any added rows (never a guess that they do not match)."""
    uri = _table(tmp_path, stable=False)
    lance.dataset(uri).update_config({"txn_engine.isolation": "serializable"})
    writer = te.open(uri, isolation="snapshot")
    planned = Step("delete", ("id < 50",)).plan(writer)
    rows = pa.table({"id": pa.array([appended], pa.int64()), "v": pa.array([0], pa.int64())})
    te.open(uri).append(rows)
    if refused:
        with pytest.raises(RetryableConflictError) as info:
            commit(writer._storage, planned, conflict_options=writer.conflict_options)
        assert info.value.conflicts[0].rule == "SER"
    else:
        with pytest.raises(RetryableConflictError) as bare:
            commit(writer._storage, planned)  # no matcher: the added rows cannot be checked
        assert "cannot be checked" in bare.value.conflicts[0].reason
        commit(writer._storage, planned, conflict_options=writer.conflict_options)
    assert lance.dataset(uri).to_table(filter="id < 50").num_rows == (50 if refused else 0)
    lance.dataset(uri).update_config({"txn_engine.isolation": "snapshot"})
    if refused:  # the table back at snapshot: the same plan lands (Lance's rules)
        commit(writer._storage, planned, conflict_options=writer.conflict_options)
        assert lance.dataset(uri).to_table(filter="id < 50").num_rows == 1


def test_update_config_sets_the_isolation_level_and_refuses_an_unknown_one(
    tmp_path: Path,
) -> None:
    uri = _table(tmp_path, stable=False)
    table = te.open(uri)
    before = lance.dataset(uri).version
    with pytest.raises(InvalidOperationError, match=r"txn_engine\.isolation"):
        table.update_config({"txn_engine.isolation": "repeatable-read"})
    assert lance.dataset(uri).version == before  # nothing written
    table.update_config({"txn_engine.isolation": "serializable"})
    assert lance.dataset(uri).config()["txn_engine.isolation"] == "serializable"


@pytest.mark.parametrize("stable", [False, True], ids=["addresses", "stable-row-ids"])
@pytest.mark.parametrize("collide", [False, True], ids=["other-keys", "same-key"])
def test_an_upsert_lands_after_an_append_of_other_keys(
    tmp_path: Path, stable: bool, collide: bool
) -> None:
    """Rule U1 refuses an upsert that inserts new keys after a concurrent Append (the
    Append records no keys). With the key reader ``te.open`` carries, the appended rows'
    keys are read: none of the upsert's new keys among them, it lands and the table equals
    pylance's serial run (append, then upsert); one of them there, it stays refused (it
    would insert that key twice). A bare ``commit`` (no key reader) keeps rule U1."""
    uri = _table(tmp_path, stable=stable)
    oracle = str(tmp_path / "oracle.lance")
    shutil.copytree(uri, oracle)
    table = te.open(uri)
    source = pa.table({"id": pa.array([10, 500], pa.int64()), "v": pa.array([-1, -2], pa.int64())})
    upsert = Step("merge_insert", (source, "id"))
    planned = upsert.plan(table)
    appended = pa.table(
        {"id": pa.array([500 if collide else 600, 601], pa.int64()), "v": pa.array([7, 8])}
    )
    append = Step("append", (appended,))
    table.append(appended)
    with pytest.raises(RetryableConflictError) as bare:
        commit(table._storage, planned)
    assert bare.value.conflicts[0].rule == "U1"
    if collide:
        with pytest.raises(RetryableConflictError) as info:
            commit(table._storage, planned, conflict_options=table.conflict_options)
        assert info.value.conflicts[0].rule == "U1"
        return
    commit(table._storage, planned, conflict_options=table.conflict_options)
    lance_apply(oracle, append)
    lance_apply(oracle, upsert)
    assert table_rows(uri) == table_rows(oracle)


def test_a_compaction_renumbered_after_a_lost_race_carries_its_new_deletions(
    tmp_path: Path,
) -> None:
    """A compaction that carried a delete into a new fragment numbered above the latest id
    loses its create to an Append (which takes that id) and a Delete of another compacted
    row. Its next attempt carries the second delete too (a new deletion file, not written
    yet) and moves the fragment to a free id: the deletion vector it moves is the pending
    one, not a file read from the store (that read failed, "references missing deletion
    file"). It lands, equal to pylance's serial run, and every referenced file exists."""
    from txn_engine.storage import LocalStorage

    uri = _table(tmp_path, stable=False)
    oracle = str(tmp_path / "oracle.lance")
    shutil.copytree(uri, oracle)
    table = te.open(uri)
    compact = Step("compact")
    planned = compact.plan(table)
    first = Step("delete", ("id = 10",))
    appended = pa.table({"id": pa.array([900, 901], pa.int64()), "v": pa.array([1, 2])})
    then = [Step("append", (appended,)), Step("delete", ("id = 20",))]
    getattr(te.open(uri), first.method)(*first.args)

    class Racing(LocalStorage):
        def put_if_absent(self, path: str, data: bytes) -> None:
            if path.startswith("_versions/") and then:
                while then:  # they land first: this create loses the race
                    step = then.pop(0)
                    getattr(te.open(uri), step.method)(*step.args)
            super().put_if_absent(path, data)

    result = commit(Racing(uri), planned)
    assert result.attempts >= 2
    for step in (first, Step("append", (appended,)), Step("delete", ("id = 20",)), compact):
        lance_apply(oracle, step)
    assert table_rows(uri) == table_rows(oracle)
    ds = lance.dataset(uri)
    assert 10 not in ds.to_table().column("id").to_pylist()
    assert 20 not in ds.to_table().column("id").to_pylist()
    for frag in ds.get_fragments():
        if frag.metadata.deletion_file is not None:
            assert (Path(uri) / frag.metadata.deletion_file.path(frag.fragment_id)).exists()
