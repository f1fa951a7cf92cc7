"""Write semantics of the ``txn_lance`` source that Delta users rely on.

* ``mergeSchema``: an append that brings new columns lands in ONE version (a Merge listing
  every fragment of the table plus the new ones, under the wider schema); the rows already
  there read the new columns as null in pylance 14.0.2; a concurrent commit makes the Merge
  re-plan on the latest version without rewriting data.
* ``replaceWhere``: every row the DataFrame writes must match the predicate (Delta's
  constraint check); otherwise the write is refused naming the predicate and nothing lands.
* Streaming: the error when the sink cannot tell the query's identity is typed and says
  what to give.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest

import txn_engine as te
from txn_engine.errors import (
    InvalidOperationError,
    RetryableConflictError,
    SchemaMismatchError,
)
from txn_engine.spark import FragmentCollector

pytestmark = [
    pytest.mark.pylance,
    pytest.mark.filterwarnings("ignore:lance is not fork-safe:UserWarning"),
]


def _operation(uri: str, version: int) -> str:
    return type(lance.dataset(uri).read_transaction(version).operation).__name__


def _data_files(uri: str) -> set[str]:
    return set(os.listdir(os.path.join(uri, "data")))


# --------------------------------------------------------------------------- mergeSchema


def test_merge_schema_append_lands_in_one_version(spark: Any, tmp_path: Path) -> None:
    """The new columns and the new rows arrive together: one version (a Merge), never a
    version with the columns and without the rows. Old rows read the new columns as null;
    the new struct column and a dropped column's id gap are handled."""
    uri = str(tmp_path / "m.lance")
    lance.write_dataset(
        pa.table({"id": [0, 1, 2], "gone": [7, 7, 7], "name": ["0", "1", "2"]}),
        uri,
        max_rows_per_file=2,
    )
    lance.dataset(uri).drop_columns(["gone"])  # version 2; field id 1 stays in old files
    wider = spark.range(10, 14, numPartitions=2).selectExpr(
        "id", "cast(id as string) as name", "id * 2 as twice", "named_struct('x', id) as st"
    )
    wider.write.format("txn_lance").mode("append").option("mergeSchema", "true").save(uri)

    ds = lance.dataset(uri)
    assert ds.version == 3  # ONE version for the columns and the rows (was 2: 3 and 4)
    assert _operation(uri, 3) == "Merge"
    assert ds.schema.names == ["id", "name", "twice", "st"]
    ids = {f.name(): f.id() for f in ds.lance_schema.fields()}
    assert ids["twice"] > 2
    assert ids["st"] > ids["twice"]
    rows = {r["id"]: r for r in ds.to_table().to_pylist()}
    assert rows[1] == {"id": 1, "name": "1", "twice": None, "st": None}
    assert rows[12] == {"id": 12, "name": "12", "twice": 24, "st": {"x": 12}}
    assert sorted(rows) == [0, 1, 2, 10, 11, 12, 13]
    assert ds.count_rows("twice IS NULL") == 3
    assert lance.dataset(uri, version=2).schema.names == ["id", "name"]  # history intact
    # pylance keeps working on the result: its own append and delete
    lance.write_dataset(
        pa.Table.from_pylist(
            [{"id": 20, "name": "20", "twice": 40, "st": {"x": 20}}], schema=ds.schema
        ),
        uri,
        mode="append",
    )
    lance.dataset(uri).delete("id = 0")
    assert sorted(lance.dataset(uri).to_table().column("id").to_pylist()) == [
        1,
        2,
        10,
        11,
        12,
        13,
        20,
    ]
    assert not os.listdir(os.path.join(uri, "_txn_engine", "spark"))


def _plan_wider(uri: str, **options: Any) -> tuple[FragmentCollector, list[str]]:
    schema = pa.schema([("id", pa.int64()), ("extra", pa.string())])
    collector = FragmentCollector.plan(uri, schema=schema, merge_schema=True, **options)
    batch = pa.record_batch([pa.array([100, 101]), pa.array(["a", "b"])], schema=schema)
    return collector, collector.write_batches([batch])


def test_merge_schema_on_file_format_2_0(tmp_path: Path) -> None:
    """Files of the table's own format (2.0 here; the executors write a fresh schema, so
    the format is passed explicitly), field ids remapped: pylance reads every row."""
    uri = str(tmp_path / "f.lance")
    lance.write_dataset(pa.table({"id": [1, 2]}), uri, data_storage_version="2.0")
    collector, fragments = _plan_wider(uri)
    result = collector.commit(fragments)
    assert result.version == 2
    assert result.read_version == 1
    ds = lance.dataset(uri)
    assert ds.data_storage_version == "2.0"
    assert sorted(ds.to_table().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "extra": None},
        {"id": 2, "extra": None},
        {"id": 100, "extra": "a"},
        {"id": 101, "extra": "b"},
    ]


def test_merge_schema_replans_over_a_concurrent_append(tmp_path: Path) -> None:
    """A pylance append lands between the plan and the commit: the Merge (preempted, as
    Lance's rules say) is re-planned on the latest version; both appends are there once,
    the concurrent one's rows null in the new column; still one version for ours."""
    uri = str(tmp_path / "c.lance")
    lance.write_dataset(pa.table({"id": [1, 2]}), uri)
    collector, fragments = _plan_wider(uri)
    lance.write_dataset(pa.table({"id": [3]}), uri, mode="append")  # version 2
    result = collector.commit(fragments)
    assert result.version == 3
    assert not result.already_committed
    assert _operation(uri, 3) == "Merge"
    rows = sorted(lance.dataset(uri).to_table().to_pylist(), key=lambda r: r["id"])
    assert rows == [
        {"id": 1, "extra": None},
        {"id": 2, "extra": None},
        {"id": 3, "extra": None},
        {"id": 100, "extra": "a"},
        {"id": 101, "extra": "b"},
    ]
    # committing the same fragments again finds the landed Merge: exactly once
    again = collector.commit(fragments)
    assert again.version == 3
    assert again.already_committed
    assert lance.dataset(uri).version == 3


def test_merge_schema_lost_response_lands_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Merge's commit lands but its response is lost (after a concurrent append made
    it re-plan): the next call, pinned at the planning version again, finds the landed
    Merge by its uuid; one Merge, every row once."""
    import importlib

    from txn_engine.errors import CommitStateUnknownError

    module = importlib.import_module("txn_engine.commit")
    real = module.commit
    lost: list[int] = []

    def lose_first_landing(storage: Any, txn: Any, **kwargs: Any) -> Any:
        result = real(storage, txn, **kwargs)
        if not lost:
            lost.append(result.version)
            raise CommitStateUnknownError("response lost", read_version=txn.read_version)
        return result

    uri = str(tmp_path / "u.lance")
    lance.write_dataset(pa.table({"id": [1]}), uri)
    collector, fragments = _plan_wider(uri)
    lance.write_dataset(pa.table({"id": [2]}), uri, mode="append")  # version 2
    monkeypatch.setattr(module, "commit", lose_first_landing)
    result = collector.commit(fragments)
    assert lost == [3]
    assert result.version == 3
    assert result.already_committed
    assert result.attempts == 2
    ds = lance.dataset(uri)
    assert ds.version == 3
    assert sorted(ds.to_table().column("id").to_pylist()) == [1, 2, 100, 101]


def test_merge_schema_concurrent_same_column(tmp_path: Path) -> None:
    """Two mergeSchema appends adding the same column: the second re-plans onto the
    first's field (same name and type), both land, the column exists once. One adding it
    with another type cannot land its files: RetryableConflictError (run it again)."""
    uri = str(tmp_path / "s.lance")
    lance.write_dataset(pa.table({"id": [1]}), uri)
    first, first_fragments = _plan_wider(uri)
    second, second_fragments = _plan_wider(uri)
    other_type = pa.schema([("id", pa.int64()), ("extra", pa.int32())])
    third = FragmentCollector.plan(uri, schema=other_type, merge_schema=True)
    third_fragments = third.write_batches(
        [pa.record_batch([pa.array([7]), pa.array([7], pa.int32())], schema=other_type)]
    )
    assert first.commit(first_fragments).version == 2
    assert second.commit(second_fragments).version == 3
    ds = lance.dataset(uri)
    assert ds.schema.names == ["id", "extra"]
    assert sorted(ds.to_table().column("extra").to_pylist(), key=str) == [
        None,
        "a",
        "a",
        "b",
        "b",
    ]
    before = _data_files(uri)
    with pytest.raises(RetryableConflictError, match="column 'extra'"):
        third.commit(third_fragments)
    assert lance.dataset(uri).version == 3
    third.abort(third_fragments)
    assert _data_files(uri) < before  # the refused write's file is gone


def test_merge_schema_many_concurrent_appends(tmp_path: Path) -> None:
    """Four pylance appenders racing the Merge's commit: every row lands exactly once and
    the Merge is one version."""
    uri = str(tmp_path / "r.lance")
    lance.write_dataset(pa.table({"id": [0]}), uri)
    collector, fragments = _plan_wider(uri)
    barrier = threading.Barrier(5)

    def appender(n: int) -> None:
        barrier.wait()
        for i in range(3):
            lance.write_dataset(pa.table({"id": [1000 * (n + 1) + i]}), uri, mode="append")

    threads = [threading.Thread(target=appender, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    barrier.wait()
    result = collector.commit(fragments)
    for t in threads:
        t.join()
    ds = lance.dataset(uri)
    merges = [v for v in range(2, ds.version + 1) if _operation(uri, v) == "Merge"]
    assert merges == [result.version]
    ids = ds.to_table().column("id").to_pylist()
    assert sorted(ids) == sorted(
        [0, 100, 101] + [1000 * (n + 1) + i for n in range(4) for i in range(3)]
    )
    assert ds.count_rows("extra IS NOT NULL") == 2


def test_merge_schema_stable_row_ids_takes_two_commits(tmp_path: Path) -> None:
    """On a table with stable row ids the columns are added first (a Merge's new
    fragments would get no row ids), then the rows appended: documented, still correct."""
    uri = str(tmp_path / "st.lance")
    lance.write_dataset(pa.table({"id": [1, 2]}), uri, enable_stable_row_ids=True)
    collector, fragments = _plan_wider(uri)
    assert collector.read_version == 2  # the column addition committed at planning
    result = collector.commit(fragments)
    assert result.version == 3
    assert [_operation(uri, v) for v in (2, 3)] == ["Merge", "Append"]
    ds = lance.dataset(uri)
    rows = ds.to_table(with_row_id=True).to_pylist()
    assert sorted(r["_rowid"] for r in rows) == [0, 1, 2, 3]
    assert sorted((r["id"], r["extra"]) for r in rows if r["extra"]) == [(100, "a"), (101, "b")]


# --------------------------------------------------------------------------- schema errors


def test_schema_errors_are_typed_like_the_python_api(tmp_path: Path) -> None:
    """A lossy column and a column set that does not match raise SchemaMismatchError (as
    ``txn_engine.open(uri).append`` does) with the column and both types as attributes."""
    uri = str(tmp_path / "e.lance")
    lance.write_dataset(pa.table({"id": pa.array([1], pa.int64()), "n": ["a"]}), uri)
    lossy = pa.schema([("id", pa.string()), ("n", pa.string())])
    with pytest.raises(SchemaMismatchError, match="column 'id' is string") as info:
        FragmentCollector.plan(uri, schema=lossy)
    assert (info.value.column, info.value.expected, info.value.actual) == ("id", "int64", "string")
    extra = pa.schema([("id", pa.int64()), ("n", pa.string()), ("x", pa.float64())])
    with pytest.raises(SchemaMismatchError, match="new columns need") as info:
        FragmentCollector.plan(uri, schema=extra)
    assert (info.value.column, info.value.expected, info.value.actual) == ("x", None, "double")
    assert lance.dataset(uri).version == 1


# --------------------------------------------------------------------------- replaceWhere


def _parts(uri: str) -> None:
    lance.write_dataset(pa.table({"id": list(range(8)), "part": [i % 2 for i in range(8)]}), uri)


def test_replace_where_refuses_rows_outside_the_predicate(spark: Any, tmp_path: Path) -> None:
    """A row the predicate does not select (or for which it is null) makes the write fail
    with an error naming the predicate; nothing lands and no file is left."""
    uri = str(tmp_path / "rw.lance")
    _parts(uri)
    before = _data_files(uri)
    df = spark.createDataFrame([(100, 1), (101, 0)], "id long, part long")
    with pytest.raises(Exception, match=r"replaceWhere 'part = 1': 1 row\(s\)") as info:
        df.write.format("txn_lance").mode("overwrite").option("replaceWhere", "part = 1").save(uri)
    assert "InvalidOperationError" in str(info.value)
    assert lance.dataset(uri).version == 1
    assert _data_files(uri) == before
    nulls = spark.createDataFrame([(100, None)], "id long, part long")
    with pytest.raises(Exception, match=r"false or null"):
        nulls.write.format("txn_lance").mode("overwrite").option("replaceWhere", "part = 1").save(
            uri
        )
    assert lance.dataset(uri).version == 1
    # rows that all match: replaced in one version
    ok = spark.createDataFrame([(100, 1), (101, 1)], "id long, part long")
    ok.write.format("txn_lance").mode("overwrite").option("replaceWhere", "part = 1").save(uri)
    ds = lance.dataset(uri)
    assert ds.version == 2
    assert sorted(ds.to_table(filter="part = 1").column("id").to_pylist()) == [100, 101]
    assert sorted(ds.to_table(filter="part = 0").column("id").to_pylist()) == [0, 2, 4, 6]


def test_replace_where_check_is_typed_on_the_collector(tmp_path: Path) -> None:
    """Through the commit hook the error is the typed InvalidOperationError itself, raised
    by the task's write before any file of the batch is committed."""
    uri = str(tmp_path / "rc.lance")
    _parts(uri)
    schema = pa.schema([("id", pa.int64()), ("part", pa.int64())])
    collector = FragmentCollector.plan(
        uri, mode="overwrite", schema=schema, replace_where="part = 1"
    )
    bad = pa.record_batch([pa.array([100, 5]), pa.array([1, 0])], schema=schema)
    with pytest.raises(InvalidOperationError, match=r"replaceWhere 'part = 1': 1 row"):
        collector.write_batches([bad])
    good = pa.record_batch([pa.array([100, 101]), pa.array([1, 1])], schema=schema)
    result = collector.commit(collector.write_batches([good]))
    assert result.version == 2
    assert sorted(lance.dataset(uri).to_table().column("id").to_pylist()) == [
        0,
        2,
        4,
        6,
        100,
        101,
    ]


@pytest.mark.parametrize("isolation", ["snapshot", "serializable"])
def test_replace_where_at_serializable_refuses_a_concurrent_matching_append(
    tmp_path: Path, isolation: str
) -> None:
    """The ``isolation`` write option: a replaceWhere of ``part = 1`` planned before a
    concurrent Append of a ``part = 1`` row. Snapshot (Lance's rule) lands it and keeps the
    appended row beside the replacement (write skew); serializable refuses the commit
    (retryable, rule SER: the predicate it recorded matches the appended row) and lands
    nothing."""
    uri = str(tmp_path / "rs.lance")
    _parts(uri)
    schema = pa.schema([("id", pa.int64()), ("part", pa.int64())])
    collector = FragmentCollector.plan(
        uri, mode="overwrite", schema=schema, replace_where="part = 1", isolation=isolation
    )
    good = pa.record_batch([pa.array([100, 101]), pa.array([1, 1])], schema=schema)
    fragments = collector.write_batches([good])
    te.open(uri).append(pa.table({"id": pa.array([50], pa.int64()), "part": [1]}))
    if isolation == "serializable":
        with pytest.raises(RetryableConflictError) as info:
            collector.commit(fragments)
        assert info.value.conflicts[0].rule == "SER"
        assert lance.dataset(uri).version == 2
        return
    collector.commit(fragments)
    ds = lance.dataset(uri)
    assert sorted(ds.to_table(filter="part = 1").column("id").to_pylist()) == [50, 100, 101]
    txn = ds.read_transaction(ds.version)
    assert txn.transaction_properties["txn_engine.read_predicate"] == "part = 1"


# --------------------------------------------------------------------------- streaming


def test_stream_without_query_identity_is_a_typed_clear_error() -> None:
    from txn_engine.spark._stream import parse_stream_options, resolve_query_id

    with pytest.raises(InvalidOperationError) as info:
        resolve_query_id(parse_stream_options({}))
    message = str(info.value)
    assert "checkpointLocation" in message
    assert "streamId" in message
    assert "spark.sql.streaming.checkpointLocation" in message  # the session conf pitfall
    assert resolve_query_id(parse_stream_options({"streamId": "q1"})) == "q1"
