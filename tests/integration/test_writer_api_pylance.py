"""The writer API against pylance 14.0.2: every call gives the table pylance gives, and
concurrent writers (pylance's and txn_engine's) keep every acknowledged row; concurrent
upserts never leave a key twice."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import txn_engine as te
from txn_engine.errors import IncompatibleTransactionError, SchemaMismatchError


def _rows(start: int, n: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "v": pa.array([f"s{i}" for i in range(start, start + n)], pa.string()),
            "x": pa.array([float(i) / 2 for i in range(start, start + n)], pa.float64()),
        }
    )


def _base(path: Path) -> str:
    """Four fragments of 25 rows, ids 0..99."""
    uri = str(path)
    lance.write_dataset(_rows(0, 100), uri, max_rows_per_file=25)
    return uri


def _sorted(table: pa.Table) -> pa.Table:
    return table.sort_by("id") if "id" in table.column_names else table


@pytest.fixture
def pair(tmp_path: Path) -> tuple[str, str]:
    """Two copies of one pylance-written table: (for pylance, for txn_engine)."""
    a = _base(tmp_path / "pylance.lance")
    b = str(tmp_path / "txn_engine.lance")
    shutil.copytree(a, b)
    return a, b


def _same(a: str, b: str) -> pa.Table:
    ta, tb = lance.dataset(a).to_table(), lance.dataset(b).to_table()
    assert tb.schema.equals(ta.schema, check_metadata=False)
    assert _sorted(tb).equals(_sorted(ta))
    return tb


# ---- differential: one call, same table -------------------------------------------------------


def test_append(pair: tuple[str, str]) -> None:
    a, b = pair
    lance.write_dataset(_rows(100, 10), a, mode="append")
    result = te.open(b).append(_rows(100, 10))
    assert result.transaction.kind == "Append"
    assert result.transaction.read_version == 1
    assert _same(a, b).num_rows == 110


def test_append_creates_the_dataset(tmp_path: Path) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    lance.write_dataset(_rows(0, 5), a)
    assert te.open(b).append(_rows(0, 5)).version == 1
    _same(a, b)


@pytest.mark.parametrize("transaction_file", [False, True])
def test_transaction_file_reaches_every_writer_api_commit(
    tmp_path: Path, transaction_file: bool
) -> None:
    """``te.open(..., transaction_file=...)`` and the ``txn_engine.writers`` helpers pass it
    to every commit: creating, appending (re-planned), deleting, restoring and a branch
    handle's commits carry the ``.txn`` copy (flag 32 clear) exactly when asked for, and
    pylance reads and appends on top either way."""
    from txn_engine.format.flags import FLAG_DISABLE_TRANSACTION_FILE
    from txn_engine.writers import append_fragments, restore

    uri = str(tmp_path / "t.lance")
    table = te.open(uri, transaction_file=transaction_file)
    results = [table.append(_rows(0, 10)), table.append(_rows(10, 10)), table.delete("id < 3")]
    meta = lance.fragment.write_fragments(_rows(20, 5), uri)
    results.append(
        append_fragments(
            uri, meta, read_version=results[-1].version, transaction_file=transaction_file
        )
    )
    results.append(restore(uri, 2, transaction_file=transaction_file))
    branch = table.create_branch("b")
    results.append(branch.append(_rows(30, 5)))
    for r in results[:-1]:
        m = te.Dataset.open(uri, version=r.version).manifest_pb
        assert bool(m.writer_feature_flags & FLAG_DISABLE_TRANSACTION_FILE) is not transaction_file
        copy = f"{r.transaction.read_version}-{r.transaction.uuid}.txn"
        assert m.transaction_file == (copy if transaction_file else "")
        assert (tmp_path / "t.lance" / "_transactions" / copy).exists() is transaction_file
    b = te.Dataset.open(f"{uri}/tree/b").manifest_pb
    assert bool(b.writer_feature_flags & FLAG_DISABLE_TRANSACTION_FILE) is not transaction_file
    lance.write_dataset(_rows(40, 5), uri, mode="append")
    assert lance.dataset(uri).count_rows() == 20 + 5
    assert lance.dataset(uri, version=results[1].version).count_rows() == 20


def test_overwrite(pair: tuple[str, str]) -> None:
    a, b = pair
    new = pa.table({"id": pa.array([5, 6], pa.int64()), "w": ["p", "q"]})
    lance.write_dataset(new, a, mode="overwrite")
    assert te.open(b).overwrite(new).transaction.kind == "Overwrite"
    _same(a, b)


@pytest.mark.parametrize("predicate", ["id < 10", "id % 3 = 0", "v = 's55'", "id >= 0", "id < 0"])
def test_delete(pair: tuple[str, str], predicate: str) -> None:
    a, b = pair
    lance.dataset(a).delete(predicate)
    result = te.open(b).delete(predicate)
    assert result.transaction.kind == "Delete"
    _same(a, b)
    assert lance.dataset(b).count_rows() == lance.dataset(a).count_rows()


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"v": "upper(v)"}, "id < 30"),
        ({"x": "x * 2", "v": "'same'"}, None),
        ({"id": "id + 1000"}, "id % 2 = 0"),
        ({"v": "'none'"}, "id < 0"),
    ],
)
def test_update(pair: tuple[str, str], values: dict[str, str], where: str | None) -> None:
    a, b = pair
    lance.dataset(a).update(values, where=where)
    te.open(b).update(values, where=where)
    _same(a, b)


@pytest.mark.parametrize(
    "clauses",
    [
        {"when_matched_update_all": True, "when_not_matched_insert_all": True},
        {"when_matched_update_all": False, "when_not_matched_insert_all": True},
        {"when_matched_update_all": True, "when_not_matched_insert_all": False},
        {"when_matched_delete": True, "when_not_matched_insert_all": False},
        {"when_matched_update_all": True, "when_not_matched_by_source_delete": True},
        {"when_matched_update_all": "source.x > 100", "when_not_matched_insert_all": True},
    ],
)
def test_merge_insert(pair: tuple[str, str], clauses: dict[str, Any]) -> None:
    a, b = pair
    source = _rows(90, 20).set_column(2, "x", pa.array([1000.0] * 10 + [1.0] * 10))
    builder = lance.dataset(a).merge_insert("id")
    if clauses.get("when_matched_delete"):
        builder = builder.when_matched_delete()
    elif clauses.get("when_matched_update_all"):
        cond = clauses["when_matched_update_all"]
        builder = builder.when_matched_update_all(condition=None if cond is True else cond)
    if clauses.get("when_not_matched_insert_all", True):
        builder = builder.when_not_matched_insert_all()
    if clauses.get("when_not_matched_by_source_delete"):
        builder = builder.when_not_matched_by_source_delete()
    builder.execute(source)
    te.open(b).merge_insert(source, on="id", **clauses)
    _same(a, b)


def test_compact(pair: tuple[str, str]) -> None:
    a, b = pair
    for path in (a, b):
        lance.dataset(path).delete("id % 4 = 0")
    lance.dataset(a).optimize.compact_files(target_rows_per_fragment=1000)
    result = te.open(b).compact(target_rows_per_fragment=1000)
    assert result is not None
    assert result.transaction.kind == "Rewrite"
    _same(a, b)
    assert len(lance.dataset(b).get_fragments()) == len(lance.dataset(a).get_fragments()) == 1
    assert te.open(b).compact(target_rows_per_fragment=1000) is None  # nothing left to do


def test_compact_under_an_index_keeps_query_results(tmp_path: Path) -> None:
    uri = _base(tmp_path / "t.lance")
    table = te.open(uri)
    table.create_index("id", "BTREE", name="idx")
    table.delete("id % 3 = 0")
    assert table.compact(target_rows_per_fragment=1000) is not None
    ds = lance.dataset(uri)
    for query in ["id = 5", "id = 3", "id < 20", "v = 's50'"]:
        got = ds.to_table(filter=query).column("id").to_pylist()
        want = [i for i in range(100) if i % 3 and _matches(query, i)]
        assert sorted(got) == want, query


def _matches(query: str, i: int) -> bool:
    return {
        "id = 5": i == 5,
        "id = 3": i == 3,
        "id < 20": i < 20,
        "v = 's50'": i == 50,
    }[query]


def test_add_and_drop_columns(pair: tuple[str, str]) -> None:
    a, b = pair
    lance.dataset(a).add_columns({"y": "id * 10", "z": "concat(v, '!')"})
    te.open(b).add_columns({"y": "id * 10", "z": "concat(v, '!')"})
    _same(a, b)
    lance.dataset(a).drop_columns(["v", "y"])
    te.open(b).drop_columns(["v", "y"])
    _same(a, b)
    fields_a = [(f.name(), f.id()) for f in lance.dataset(a).lance_schema.fields()]
    fields_b = [(f.name(), f.id()) for f in lance.dataset(b).lance_schema.fields()]
    assert fields_b == fields_a


def test_add_columns_with_a_function(pair: tuple[str, str]) -> None:
    a, b = pair

    def double(batch: pa.RecordBatch) -> pa.RecordBatch:
        return pa.record_batch([pc.multiply(batch["id"], 2)], names=["d"])

    lance.dataset(a).add_columns(double, read_columns=["id"])
    te.open(b).add_columns(double, read_columns=["id"])
    _same(a, b)


def test_create_index(pair: tuple[str, str]) -> None:
    a, b = pair
    lance.dataset(a).create_scalar_index("id", "BTREE", name="id_idx")
    result = te.open(b).create_index("id", "BTREE", name="id_idx")
    assert result.transaction.kind == "CreateIndex"
    ia, ib = lance.dataset(a).list_indices(), lance.dataset(b).list_indices()
    assert [(i["name"], i["type"], i["fields"]) for i in ib] == [
        (i["name"], i["type"], i["fields"]) for i in ia
    ]
    plan = lance.dataset(b).scanner(filter="id = 42").explain_plan()
    assert "id_idx" in plan
    assert lance.dataset(b).to_table(filter="id = 42").num_rows == 1
    te.open(b).create_index("id", "BTREE", name="id_idx")  # replaced, not duplicated
    assert [i["name"] for i in lance.dataset(b).list_indices()] == ["id_idx"]


def test_restore_and_update_config(pair: tuple[str, str]) -> None:
    a, b = pair
    for path in (a, b):
        lance.dataset(path).delete("id < 50")
    lance.dataset(a, version=1).restore()
    te.open(b).restore(1)
    _same(a, b)
    assert lance.dataset(b).version == lance.dataset(a).version == 3
    lance.dataset(a).update_config({"owner": "me", "drop": None})
    te.open(b).update_config({"owner": "me", "drop": None})
    assert lance.dataset(b).config() == lance.dataset(a).config()


@pytest.mark.parametrize(
    "operation",
    [
        ("update", {"values": {"v": "upper(v)"}, "where": "id % 5 = 0"}),
        ("delete", {"predicate": "id > 80"}),
        ("merge_insert", {"data": _rows(95, 10), "on": "id"}),
    ],
    ids=lambda op: op[0],
)
def test_stable_row_ids_are_kept(tmp_path: Path, operation: tuple[str, dict[str, Any]]) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    lance.write_dataset(_rows(0, 100), a, max_rows_per_file=25, enable_stable_row_ids=True)
    shutil.copytree(a, b)
    name, kwargs = operation
    pds = lance.dataset(a)
    if name == "update":
        pds.update(kwargs["values"], where=kwargs["where"])
    elif name == "delete":
        pds.delete(kwargs["predicate"])
    else:
        pds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(
            kwargs["data"]
        )
    getattr(te.open(b), name)(*kwargs.values())
    _same(a, b)
    ta = lance.dataset(a).to_table(with_row_id=True).sort_by("id")
    tb = lance.dataset(b).to_table(with_row_id=True).sort_by("id")
    assert tb.column("_rowid").equals(ta.column("_rowid"))


# ---- planning pins the read version -------------------------------------------------------------


class _Paused(te.Table):
    """A handle whose planning waits at a barrier once pylance is opened: every writer of
    the barrier has pinned its read version before any of them commits."""

    def __init__(
        self, uri: str, barrier: threading.Barrier, after: threading.Event | None = None
    ) -> None:
        super().__init__(uri)
        self._barrier = barrier
        self._after = after
        self._waited = False

    def to_lance(self, version: int | None = None) -> Any:
        out = super().to_lance(version)
        if not self._waited:
            self._waited = True
            self._barrier.wait(timeout=60)
            if self._after is not None:  # and until the other writer has committed
                assert self._after.wait(timeout=60)
        return out


def _run_all(jobs: list[Callable[[], Any]]) -> list[Any]:
    results: list[Any] = [None] * len(jobs)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = jobs[i]()
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    if errors:
        raise errors[0]
    return results


def test_append_planned_before_an_overwrite_conflicts(tmp_path: Path) -> None:
    uri = _base(tmp_path / "t.lance")
    barrier, done = threading.Barrier(2), threading.Event()
    table = _Paused(uri, barrier, done)

    def overwrite() -> None:
        barrier.wait(timeout=60)
        lance.write_dataset(_rows(500, 1), uri, mode="overwrite")
        done.set()

    def append() -> te.CommitResult:
        return table.append(_rows(100, 2))

    with pytest.raises(IncompatibleTransactionError) as info:
        _run_all([overwrite, append])
    assert info.value.other_operation == "Overwrite"
    assert lance.dataset(uri).to_table().column("id").to_pylist() == [500]


def test_two_upserts_of_one_new_key_planned_together_leave_it_once(tmp_path: Path) -> None:
    uri = _base(tmp_path / "t.lance")
    barrier = threading.Barrier(2)
    rows = [_rows(1000, 1).set_column(1, "v", pa.array([f"writer{i}"])) for i in range(2)]
    tables = [_Paused(uri, barrier) for _ in range(2)]
    results = _run_all([lambda i=i: tables[i].merge_insert(rows[i], on="id") for i in range(2)])
    assert {r.transaction.read_version for r in results} != {1}  # one of them re-planned
    ids = lance.dataset(uri).to_table().column("id").to_pylist()
    assert ids.count(1000) == 1
    assert len(ids) == 101


def test_concurrent_deletes_of_other_rows_of_one_fragment_both_land(tmp_path: Path) -> None:
    uri = _base(tmp_path / "t.lance")
    barrier = threading.Barrier(2)
    tables = [_Paused(uri, barrier) for _ in range(2)]
    results = _run_all([lambda: tables[0].delete("id = 1"), lambda: tables[1].delete("id = 2")])
    assert {r.transaction.read_version for r in results} == {1, 2}  # rebased, not re-planned
    ids = lance.dataset(uri).to_table().column("id").to_pylist()
    assert sorted(ids) == [i for i in range(100) if i not in (1, 2)]


def test_update_and_delete_of_one_row_serialize(tmp_path: Path) -> None:
    uri = _base(tmp_path / "t.lance")
    barrier = threading.Barrier(2)
    tables = [_Paused(uri, barrier) for _ in range(2)]
    _run_all(
        [
            lambda: tables[0].update({"v": "'updated'"}, where="id = 7"),
            lambda: tables[1].delete("id = 7"),
        ]
    )
    table = lance.dataset(uri).to_table()
    assert table.num_rows in (99, 100)
    # either order of the two, never both effects lost or the row duplicated
    rows = table.filter(pc.equal(table["id"], 7)).to_pylist()
    assert rows in ([], [{"id": 7, "v": "updated", "x": 3.5}])
    assert table.num_rows == 99 + len(rows)


def test_pylance_alone_duplicates_that_key(tmp_path: Path) -> None:
    """The oracle's behaviour the rule corrects (two upserts planned at one version)."""
    uri = _base(tmp_path / "t.lance")
    ds = lance.dataset(uri)
    planned = [
        ds.merge_insert("id")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute_uncommitted(_rows(1000, 1))[0]
        for _ in range(2)
    ]
    for txn in planned:
        lance.LanceDataset.commit(uri, txn, read_version=ds.version)
    assert lance.dataset(uri).to_table().column("id").to_pylist().count(1000) == 2


def test_pylance_reads_and_commits_over_the_recorded_keys(tmp_path: Path) -> None:
    uri = _base(tmp_path / "t.lance")
    stale = lance.dataset(uri)
    result = te.open(uri).merge_insert(_rows(100, 3), on="id")
    assert result.transaction.operation.inserted_rows  # type: ignore[union-attr]
    read_back = lance.dataset(uri).read_transaction(result.version)
    assert read_back.read_version == 1
    # pylance checks its own upsert planned at version 1 against ours: it decodes the record
    planned, _ = (
        stale.merge_insert("id").when_not_matched_insert_all().execute_uncommitted(_rows(500, 1))
    )
    lance.LanceDataset.commit(uri, planned, read_version=1)
    assert lance.dataset(uri).count_rows() == 104


def test_an_upsert_re_plans_after_a_concurrent_pylance_append(tmp_path: Path) -> None:
    uri = _base(tmp_path / "t.lance")
    barrier, done = threading.Barrier(2), threading.Event()
    table = _Paused(uri, barrier, done)

    def pylance_append() -> None:
        barrier.wait(timeout=60)
        lance.write_dataset(_rows(2000, 1), uri, mode="append")
        done.set()

    _run_all([pylance_append, lambda: table.merge_insert(_rows(2000, 1), on="id")])
    assert lance.dataset(uri).to_table().column("id").to_pylist().count(2000) == 1


@settings(max_examples=6, deadline=None)
@given(
    writes=st.lists(
        st.lists(st.integers(0, 12), min_size=1, max_size=4, unique=True), min_size=2, max_size=3
    )
)
def test_concurrent_upserts_never_duplicate_a_key(
    tmp_path_factory: pytest.TempPathFactory, writes: list[list[int]]
) -> None:
    uri = str(tmp_path_factory.mktemp("upserts") / "t.lance")
    lance.write_dataset(pa.table({"id": pa.array([0, 1], pa.int64()), "w": [-1, -1]}), uri)
    barrier = threading.Barrier(len(writes))
    tables = [_Paused(uri, barrier) for _ in writes]

    def job(i: int) -> Callable[[], te.CommitResult]:
        data = pa.table({"id": pa.array(writes[i], pa.int64()), "w": [i] * len(writes[i])})
        return lambda: tables[i].merge_insert(data, on="id")

    _run_all([job(i) for i in range(len(writes))])
    ids = lance.dataset(uri).to_table().column("id").to_pylist()
    assert len(ids) == len(set(ids)), f"duplicate keys: {sorted(ids)}"
    assert set(ids) == {0, 1}.union(*map(set, writes))  # every upsert landed


# ---- mixed concurrent writers -----------------------------------------------------------------


def test_mixed_writers_keep_every_acknowledged_row(tmp_path: Path) -> None:
    uri = _base(tmp_path / "t.lance")
    acked: list[int] = []
    lock = threading.Lock()

    def te_appends(start: int) -> None:
        table = te.open(uri)
        for k in range(5):
            rows = _rows(start + k * 3, 3)
            table.append(rows)
            with lock:
                acked.extend(rows.column("id").to_pylist())

    def pylance_appends(start: int) -> None:
        for k in range(5):
            rows = _rows(start + k * 3, 3)
            lance.write_dataset(rows, uri, mode="append")
            with lock:
                acked.extend(rows.column("id").to_pylist())

    def te_maintenance() -> None:
        table = te.open(uri)
        for k in range(3):
            table.delete(f"id = {k}")
            table.update({"v": "upper(v)"}, where=f"id = {50 + k}")
            table.compact(target_rows_per_fragment=50)

    _run_all(
        [
            lambda: te_appends(1000),
            lambda: te_appends(2000),
            lambda: pylance_appends(3000),
            lambda: pylance_appends(4000),
            te_maintenance,
        ]
    )
    ids = lance.dataset(uri).to_table().column("id").to_pylist()
    assert len(ids) == len(set(ids))
    expected = (set(range(100)) - {0, 1, 2}) | set(acked)
    assert set(ids) == expected
    assert len(acked) == 60


def test_append_refuses_a_lossy_column(tmp_path: Path) -> None:
    uri = _base(tmp_path / "t.lance")
    bad = pa.table({"id": ["0", "1"], "v": ["a", "b"], "x": [1.0, 2.0]})
    with pytest.raises(SchemaMismatchError) as info:
        te.open(uri).append(bad)
    assert (info.value.column, info.value.expected, info.value.actual) == ("id", "int64", "string")
    assert lance.dataset(uri).version == 1
    narrow = pa.table(
        {"id": pa.array([700], pa.int32()), "v": ["n"], "x": pa.array([0.5], pa.float32())}
    )
    te.open(uri).append(narrow)  # widening is lossless: accepted
    assert lance.dataset(uri).to_table(filter="id = 700").column("x").to_pylist() == [0.5]
