"""Schema safety of ``txn_lance`` appends: no silent lossy casts.

An append whose DataFrame column cannot be cast to the table's type without loss (a string
into int64, a double into bigint, a narrowing, a time zone dropped) is refused when the
write is planned, naming the column and both types, before any task writes a file. Lossless
widenings (int into bigint, array into a fixed-size vector column) still land, and pylance
14.0.2 reads the values back unchanged.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest

from txn_engine.errors import InvalidOperationError
from txn_engine.spark import FragmentCollector
from txn_engine.spark._write_plan import check_lossless

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # conftest_spark (the gate used by the concurrency test)
    sys.path.insert(0, HERE)

pytestmark = [
    pytest.mark.pylance,
    pytest.mark.filterwarnings("ignore:lance is not fork-safe:UserWarning"),
]


def _table(tmp_path: Path) -> str:
    """A pylance-written table: id int64, name string, small int32, vec float32[2],
    at (UTC timestamp), local (timestamp without zone), s struct<a int64, b string>."""
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(
        pa.table(
            {
                "id": pa.array([1, 2], pa.int64()),
                "name": pa.array(["a", "b"], pa.string()),
                "small": pa.array([1, 2], pa.int32()),
                "vec": pa.array([[0.5, 1.5], [2.5, 3.5]], pa.list_(pa.float32(), 2)),
                "at": pa.array([0, 1], pa.timestamp("us", tz="UTC")),
                "local": pa.array([0, 1], pa.timestamp("us")),
                "s": pa.array([{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]),
            }
        ),
        uri,
    )
    return uri


GOOD = [
    "cast(id as bigint) as id",
    "cast(id as string) as name",
    "cast(id as int) as small",
    "array(cast(id as float), cast(id as float)) as vec",
    "timestamp_seconds(id) as at",
    "cast(timestamp_seconds(id) as timestamp_ntz) as local",
    "named_struct('a', id, 'b', cast(id as string)) as s",
]


def _frame(spark: Any, replace: dict[int, str] | None = None) -> Any:
    exprs = list(GOOD)
    for index, expr in (replace or {}).items():
        exprs[index] = expr
    return spark.range(10, 13, numPartitions=1).selectExpr(*exprs)


@pytest.mark.parametrize(
    ("index", "expr", "column", "data_type", "table_type"),
    [
        (0, "cast(id as string) as id", "id", "string", "int64"),
        (0, "cast(id as double) as id", "id", "double", "int64"),
        (2, "id as small", "small", "int64", "int32"),
        (1, "id as name", "name", "int64", "string"),
        (4, "cast(timestamp_seconds(id) as timestamp_ntz) as at", "at", "timestamp[us]", "tz=UTC"),
        (5, "timestamp_seconds(id) as local", "local", "tz=UTC", "timestamp[us]"),
        (3, "array(cast(id as double), cast(id as double)) as vec", "vec", "double", "float"),
        (6, "named_struct('a', cast(id as string), 'b', 'z') as s", "s", "string", "int64"),
    ],
)
def test_lossy_append_is_refused_naming_column_and_types(
    spark: Any,
    tmp_path: Path,
    index: int,
    expr: str,
    column: str,
    data_type: str,
    table_type: str,
) -> None:
    uri = _table(tmp_path)
    before = set(os.listdir(os.path.join(uri, "data")))
    df = _frame(spark, {index: expr})
    with pytest.raises(Exception, match=f"column '{column}' is ") as info:
        df.write.format("txn_lance").mode("append").save(uri)
    message = str(info.value)
    assert data_type in message
    assert table_type in message
    ds = lance.dataset(uri)
    assert ds.version == 1
    assert ds.count_rows() == 2
    assert set(os.listdir(os.path.join(uri, "data"))) == before  # no task wrote anything


def test_lossless_append_lands_with_exact_values(spark: Any, tmp_path: Path) -> None:
    uri = _table(tmp_path)
    _frame(spark).write.format("txn_lance").mode("append").save(uri)
    ds = lance.dataset(uri)
    assert ds.version == 2
    assert ds.schema.field("vec").type == pa.list_(pa.float32(), 2)
    rows = {r["id"]: r for r in ds.to_table().to_pylist()}
    assert sorted(rows) == [1, 2, 10, 11, 12]
    assert rows[11]["name"] == "11"
    assert rows[11]["small"] == 11
    assert rows[11]["vec"] == [11.0, 11.0]
    assert rows[12]["s"] == {"a": 12, "b": "12"}


def test_commit_hook_plan_refuses_too(tmp_path: Path) -> None:
    uri = _table(tmp_path)
    schema = lance.dataset(uri).schema
    bad = schema.set(schema.get_field_index("id"), pa.field("id", pa.string()))
    with pytest.raises(InvalidOperationError, match="column 'id' is string in the data but int64"):
        FragmentCollector.plan(uri, mode="append", schema=bad)
    # the same schema can replace the table: overwrite sets the types
    FragmentCollector.plan(uri, mode="overwrite", schema=bad)


@pytest.mark.parametrize(
    ("source", "target", "ok"),
    [
        (pa.int32(), pa.int64(), True),
        (pa.int64(), pa.int32(), False),
        (pa.uint32(), pa.int64(), True),
        (pa.uint64(), pa.int64(), False),
        (pa.int8(), pa.uint8(), False),
        (pa.int16(), pa.float32(), True),
        (pa.int32(), pa.float32(), False),
        (pa.int32(), pa.float64(), True),
        (pa.int64(), pa.float64(), False),
        (pa.float32(), pa.float64(), True),
        (pa.float64(), pa.float32(), False),
        (pa.string(), pa.large_string(), True),
        (pa.large_string(), pa.string(), True),
        (pa.string(), pa.binary(), False),
        (pa.binary(), pa.large_binary(), True),
        (pa.decimal128(10, 2), pa.decimal128(12, 3), True),
        (pa.decimal128(10, 2), pa.decimal128(10, 3), False),
        (pa.decimal128(10, 2), pa.decimal128(12, 1), False),
        (pa.timestamp("us", tz="UTC"), pa.timestamp("ns", tz="Europe/Paris"), True),
        (pa.timestamp("ns"), pa.timestamp("us"), False),
        (pa.timestamp("us"), pa.timestamp("us", tz="UTC"), False),
        (pa.date32(), pa.date64(), True),
        (pa.list_(pa.int32()), pa.large_list(pa.int64()), True),
        (pa.list_(pa.float64()), pa.list_(pa.float32(), 4), False),
        (pa.list_(pa.float32()), pa.list_(pa.float32(), 4), True),
        (pa.list_(pa.float32(), 3), pa.list_(pa.float32(), 4), False),
        (pa.string(), pa.dictionary(pa.int32(), pa.string()), True),
        (
            pa.struct([("b", pa.string()), ("a", pa.int32())]),
            pa.struct([("a", pa.int64()), ("b", pa.string())]),
            True,
        ),
        (pa.struct([("a", pa.int64())]), pa.struct([("a", pa.int64()), ("b", pa.string())]), False),
        (pa.bool_(), pa.int8(), False),
    ],
)
def test_lossless_table(source: pa.DataType, target: pa.DataType, ok: bool) -> None:
    data, table = pa.schema([("c", source)]), pa.schema([("c", target)])
    if ok:
        check_lossless(data, table)
    else:
        with pytest.raises(InvalidOperationError, match=re.escape(f"column 'c' is {source} in")):
            check_lossless(data, table)


# --------------------------------------------------------------------------- mergeSchema


def test_merge_schema_adds_columns_then_appends(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "m.lance")
    spark.range(0, 4, numPartitions=1).selectExpr("id", "cast(id as string) as name").write.format(
        "txn_lance"
    ).mode("append").save(uri)
    wider = spark.range(10, 13, numPartitions=1).selectExpr(
        "id", "cast(id as string) as name", "id * 2 as twice", "named_struct('x', id) as st"
    )
    with pytest.raises(Exception, match=r"unexpected: \['st', 'twice'\]\); new columns need"):
        wider.write.format("txn_lance").mode("append").save(uri)
    assert lance.dataset(uri).version == 1
    wider.write.format("txn_lance").mode("append").option("mergeSchema", "true").save(uri)
    ds = lance.dataset(uri)
    assert ds.version == 2  # the columns and the rows in one Merge
    assert type(ds.read_transaction(2).operation).__name__ == "Merge"
    assert ds.schema.names == ["id", "name", "twice", "st"]
    rows = {r["id"]: r for r in ds.to_table().to_pylist()}
    assert rows[1] == {"id": 1, "name": "1", "twice": None, "st": None}
    assert rows[11] == {"id": 11, "name": "11", "twice": 22, "st": {"x": 11}}
    assert lance.dataset(uri, version=1).schema.names == ["id", "name"]  # history intact
    # the same DataFrame again: the columns exist now, a plain append (no Merge)
    wider.write.format("txn_lance").mode("append").option("mergeSchema", "true").save(uri)
    assert type(lance.dataset(uri).read_transaction(3).operation).__name__ == "Append"
    assert lance.dataset(uri).count_rows() == 10


def test_merge_schema_field_ids_skip_dropped_columns(spark: Any, tmp_path: Path) -> None:
    """A dropped column's id stays in old data files: the new column gets a fresh id, and
    the old rows read it as null (not the dropped column's values)."""
    uri = str(tmp_path / "d.lance")
    lance.write_dataset(pa.table({"a": [1, 2], "b": [10, 20], "c": ["x", "y"]}), uri)
    lance.dataset(uri).drop_columns(["b"])
    df = spark.range(5, 7, numPartitions=1).selectExpr(
        "id as a", "cast(id as string) as c", "id * 100 as d"
    )
    df.write.format("txn_lance").mode("append").option("mergeschema", "true").save(uri)
    ds = lance.dataset(uri)
    assert {f.name(): f.id() for f in ds.lance_schema.fields()} == {"a": 0, "c": 2, "d": 3}
    rows = sorted(ds.to_table().to_pylist(), key=lambda r: r["a"])
    assert rows == [
        {"a": 1, "c": "x", "d": None},
        {"a": 2, "c": "y", "d": None},
        {"a": 5, "c": "5", "d": 500},
        {"a": 6, "c": "6", "d": 600},
    ]


def test_merge_schema_still_refuses_lossy_columns(spark: Any, tmp_path: Path) -> None:
    uri = _table(tmp_path)
    df = _frame(spark, {0: "cast(id as string) as id"}).selectExpr("*", "1 as extra")
    with pytest.raises(Exception, match="column 'id' is string"):
        df.write.format("txn_lance").mode("append").option("mergeSchema", "true").save(uri)
    ds = lance.dataset(uri)
    assert ds.version == 1  # no schema change either
    assert "extra" not in ds.schema.names


# --------------------------------------------------------------------------- replaceWhere


def _parts(spark: Any, uri: str) -> None:
    """1000 rows (id, part = id % 4, name) in fragments of at most 300 rows."""
    spark.range(0, 1000, numPartitions=2).selectExpr(
        "id", "cast(id % 4 as int) as part", "concat('r', cast(id as string)) as name"
    ).write.format("txn_lance").mode("append").option("max_rows_per_file", "300").save(uri)


def _replacement(spark: Any, start: int, n: int, part: int = 1) -> Any:
    return spark.range(start, start + n, numPartitions=1).selectExpr(
        "id", f"cast({part} as int) as part", "concat('new', cast(id as string)) as name"
    )


def _rows(uri: str, version: int | None = None) -> set[tuple[int, int, str]]:
    table = lance.dataset(uri, version=version).to_table()
    return set(
        zip(
            table.column("id").to_pylist(),
            table.column("part").to_pylist(),
            table.column("name").to_pylist(),
            strict=True,
        )
    )


def _replace(df: Any, uri: str, predicate: str) -> None:
    df.write.format("txn_lance").mode("overwrite").option("replaceWhere", predicate).save(uri)


def test_replace_where_replaces_matching_rows_in_one_update(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "r.lance")
    _parts(spark, uri)
    before = _rows(uri)
    old_files = {f.path for fr in lance.dataset(uri).get_fragments() for f in fr.data_files()}
    _replace(_replacement(spark, 5000, 10), uri, "part = 1")
    ds = lance.dataset(uri)
    assert ds.version == 2
    assert type(ds.read_transaction(2).operation).__name__ == "Update"
    expected = {r for r in before if r[1] != 1} | {(i, 1, f"new{i}") for i in range(5000, 5010)}
    assert _rows(uri) == expected
    assert _rows(uri, version=1) == before  # history intact
    # deletion vectors, no rewrite: every old data file is still read
    files = {f.path for fr in ds.get_fragments() for f in fr.data_files()}
    assert old_files < files
    assert all(fr.deletion_file() is not None for fr in ds.get_fragments() if fr.fragment_id < 4)
    # and the txn_lance reader agrees with pylance
    read = spark.read.format("txn_lance").load(uri)
    assert {(r["id"], r["part"], r["name"]) for r in read.collect()} == expected


def test_replace_where_removes_fragments_it_empties(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "r.lance")
    _parts(spark, uri)
    before = _rows(uri)
    first = min(fr.fragment_id for fr in lance.dataset(uri).get_fragments())
    first_ids = lance.dataset(uri).get_fragment(first).to_table(columns=["id"]).column("id")
    low, high = min(first_ids.to_pylist()), max(first_ids.to_pylist())
    # every written row must match the predicate (ids 7000-7002: the second arm)
    predicate = f"(id >= {low} AND id <= {high}) OR id >= 7000"
    _replace(_replacement(spark, 7000, 3, part=0), uri, predicate)
    ds = lance.dataset(uri)
    update = ds.read_transaction(2).operation
    assert first in list(update.removed_fragment_ids)
    assert first not in {fr.fragment_id for fr in ds.get_fragments()}
    expected = {r for r in before if not low <= r[0] <= high} | {
        (i, 0, f"new{i}") for i in range(7000, 7003)
    }
    assert _rows(uri) == expected


def _gated_replace(
    spark: Any, uri: str, control: str, predicate: str, errors: list[BaseException]
) -> None:
    import conftest_spark as cs

    from txn_engine.spark import activate

    try:
        activate(spark)
        df = _replacement(spark, 9000, 5).mapInArrow(
            cs.gate(control), "id long, part int, name string"
        )
        _replace(df, uri, predicate)
    except BaseException as exc:
        errors.append(exc)


def test_replace_where_with_concurrent_pylance_delete(spark: Any, tmp_path: Path) -> None:
    """A pylance delete of other rows lands between the replaceWhere's planning and its
    commit: both land (deletion vectors merged); a delete of the same rows conflicts and
    the replaceWhere fails, leaving pylance's delete as the only change."""
    import threading

    import conftest_spark as cs

    for overlap in (False, True):
        uri = str(tmp_path / f"c{overlap}.lance")
        _parts(spark, uri)
        before = _rows(uri)
        control = tmp_path / f"gate{overlap}"
        control.mkdir()
        errors: list[BaseException] = []
        job = threading.Thread(
            target=_gated_replace, args=(spark, uri, str(control), "part = 1", errors)
        )
        job.start()
        cs.wait_started(str(control), 1, errors)  # planned: version 1 pinned
        theirs = "part = 1 AND id < 100" if overlap else "part = 2"
        lance.dataset(uri).delete(theirs)
        cs.open_gate(str(control))
        job.join(300)
        assert not job.is_alive()
        ds = lance.dataset(uri)
        if overlap:
            assert len(errors) == 1
            assert "onflict" in str(errors[0])
            assert ds.version == 2
            assert _rows(uri) == {r for r in before if not (r[1] == 1 and r[0] < 100)}
        else:
            assert errors == []
            assert ds.version == 3
            assert type(ds.read_transaction(3).operation).__name__ == "Update"
            expected = {r for r in before if r[1] not in (1, 2)} | {
                (i, 1, f"new{i}") for i in range(9000, 9005)
            }
            assert _rows(uri) == expected


def test_replace_where_refusals(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "r.lance")
    _parts(spark, uri)
    df = _replacement(spark, 1, 2)
    with pytest.raises(Exception, match="use it with mode 'overwrite'"):
        df.write.format("txn_lance").mode("append").option("replaceWhere", "part = 1").save(uri)
    with pytest.raises(Exception, match="is not a Lance filter"):
        _replace(df, uri, "no_such_column = 1")
    lossy = df.selectExpr("cast(id as string) as id", "part", "name")
    with pytest.raises(Exception, match="column 'id' is string"):
        _replace(lossy, uri, "part = 1")
    assert lance.dataset(uri).version == 1
