"""``spark.read.format("txn_lance")`` in Spark local mode, checked against pylance 14.0.2.

Every read is compared with pylance's ``to_table()`` of the same version (row count and an
order-independent checksum of every column), on pylance-written tables with deletion
vectors, time travel by version, timestamp and tag, filters pushed into the scan, the
``columns`` option, and one table on moto S3.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from pathlib import Path
from typing import Any

import emulators as emu
import lance
import pyarrow as pa
import pytest

from txn_engine.errors import InvalidOperationError, VersionNotFoundError
from txn_engine.format.io import read_manifest_entry
from txn_engine.format.naming import list_versions
from txn_engine.spark._filters import translate, translate_one
from txn_engine.spark._options import ReadOptions, parse_read_options
from txn_engine.spark._read import (
    _manifest_nanos,
    group_fragments,
    parse_timestamp,
    plan_read,
    read_tag,
    resolve_version,
)
from txn_engine.storage import open_storage

pytestmark = [
    pytest.mark.pylance,
    pytest.mark.filterwarnings("ignore:lance is not fork-safe:UserWarning"),
]


# --------------------------------------------------------------------------- helpers


def table(start: int, n: int) -> pa.Table:
    """Rows with an int, a string with nulls, a double, a bool, a date and a struct."""
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([None if i % 7 == 0 else f"row-{i}" for i in ids], pa.string()),
            "score": pa.array([i / 4 for i in ids], pa.float64()),
            "flag": pa.array([i % 3 == 0 for i in ids], pa.bool_()),
            "day": pa.array([dt.date(2020, 1, 1) + dt.timedelta(days=i % 400) for i in ids]),
            "small": pa.array([i % 100 for i in ids], pa.int32()),
            "nested": pa.array([{"a": i, "b": str(i)} for i in ids]),
        }
    )


def _canonical(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _canonical(v)) for k, v in value.items()))
    if hasattr(value, "asDict"):
        return _canonical(value.asDict(recursive=True))
    return value


def checksum(rows: list[dict[str, Any]]) -> tuple[int, str]:
    """(row count, order-independent digest of every row)."""
    digests = sorted(
        hashlib.sha256(repr(sorted((k, _canonical(v)) for k, v in r.items())).encode()).digest()
        for r in rows
    )
    return len(rows), hashlib.sha256(b"".join(digests)).hexdigest()


def spark_rows(df: Any) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in df.collect()]


def pylance_rows(uri: str, **kwargs: Any) -> list[dict[str, Any]]:
    version = kwargs.pop("version", None)
    storage_options = kwargs.pop("storage_options", None)
    ds = lance.dataset(uri, version=version, storage_options=storage_options)
    rows: list[dict[str, Any]] = ds.to_table(**kwargs).to_pylist()
    return rows


def read(spark: Any, uri: str, **options: Any) -> Any:
    reader = spark.read.format("txn_lance")
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load(uri)


@pytest.fixture
def deleted_table(tmp_path: Path) -> str:
    """A pylance-written table: 5 fragments of 400 rows over three versions, then rows
    deleted from two fragments (deletion vectors) and one fragment emptied."""
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(table(0, 1200), uri, max_rows_per_file=400)
    ds = lance.write_dataset(table(1200, 800), uri, mode="append", max_rows_per_file=400)
    ds.delete("id % 5 = 1 AND id < 700")
    ds.delete("id >= 1600")  # the last fragment: every row deleted
    ds.delete("id = 1201")
    return uri


# --------------------------------------------------------------------------- reads


@pytest.mark.spark_cluster
def test_latest_with_deletions_equals_pylance(spark: Any, deleted_table: str) -> None:
    uri = deleted_table
    df = read(spark, uri)
    assert df.schema.fieldNames() == ["id", "name", "score", "flag", "day", "small", "nested"]
    ours = spark_rows(df)
    theirs = pylance_rows(uri)
    assert len(theirs) == 2000 - 140 - 400 - 1
    assert checksum(ours) == checksum(theirs)
    assert df.count() == lance.dataset(uri).count_rows()


@pytest.mark.spark_cluster
def test_time_travel_by_version(spark: Any, deleted_table: str) -> None:
    uri = deleted_table
    for version in (1, 2, 3, 5):
        ours = spark_rows(read(spark, uri, version=version))
        assert checksum(ours) == checksum(pylance_rows(uri, version=version)), version
    assert len(spark_rows(read(spark, uri, version=1))) == 1200


def test_time_travel_by_timestamp_matches_pylance_asof(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(table(0, 10), uri)
    lance.write_dataset(table(10, 20), uri, mode="append")
    lance.write_dataset(table(30, 5), uri, mode="append")
    versions = lance.dataset(uri).versions()
    # pylance reports (and compares) naive local times; astimezone() reads them as local
    local = [v["timestamp"] for v in versions]
    stamps = [t.astimezone(dt.UTC) for t in local]
    assert stamps == sorted(stamps)
    middle = stamps[1] + (stamps[2] - stamps[1]) / 2
    cases = [
        (stamps[0] + (stamps[1] - stamps[0]) / 2, 1),
        (middle, 2),
        (stamps[2] + dt.timedelta(hours=1), 3),
    ]
    for moment, expected in cases:
        # pylance's asof keeps versions strictly before the cutoff
        naive = moment.astimezone().replace(tzinfo=None)
        assert lance.dataset(uri, asof=naive).version == expected
        storage = open_storage(uri)
        assert resolve_version(storage, ReadOptions(timestamp=moment.isoformat())) == expected
        ours = spark_rows(read(spark, uri, timestamp=moment.isoformat()))
        assert checksum(ours) == checksum(pylance_rows(uri, version=expected)), moment
    # At a version's own commit time. pylance's versions() timestamps pass through a float
    # and can be off by about a microsecond either way, so its asof is not the oracle
    # here: the manifest's nanoseconds are. At the microsecond at or after version 2's
    # nanoseconds, that version; a microsecond before, the one before it.
    storage = open_storage(uri)
    entry = next(e for e in list_versions(storage) if e.version == 2)
    nanos = _manifest_nanos(read_manifest_entry(storage, entry).manifest)
    assert nanos is not None
    at = -(-nanos // 1000)  # microseconds, rounded up
    for micros, expected in ((at, 2), (at - 1, 1)):
        moment = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=micros)
        assert resolve_version(storage, ReadOptions(timestamp=moment.isoformat())) == expected
    epoch = str(middle.timestamp())
    assert resolve_version(open_storage(uri), ReadOptions(timestamp=epoch)) == 2
    assert len(spark_rows(read(spark, uri, timestamp=middle.isoformat()))) == 30
    with pytest.raises(VersionNotFoundError, match="at or before"):
        resolve_version(open_storage(uri), ReadOptions(timestamp="2000-01-01T00:00:00"))


@pytest.mark.spark_cluster
def test_time_travel_by_tag(spark: Any, deleted_table: str) -> None:
    uri = deleted_table
    ds = lance.dataset(uri)
    ds.tags.create("nightly", 2)
    ds.tags.create("after-delete", 3)
    storage = open_storage(uri)
    assert read_tag(storage, "nightly") == 2
    ours = spark_rows(read(spark, uri, tag="nightly"))
    assert checksum(ours) == checksum(pylance_rows(uri, version=2))
    assert len(ours) == 2000
    ours = spark_rows(read(spark, uri, tag="after-delete"))
    assert checksum(ours) == checksum(pylance_rows(uri, version=3))
    with pytest.raises(VersionNotFoundError, match="no tag 'missing'"):
        read_tag(storage, "missing")
    with pytest.raises(InvalidOperationError, match="escape"):
        read_tag(storage, "../escape")


def test_version_pinned_when_the_dataframe_is_created(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(table(0, 100), uri)
    df = read(spark, uri)
    lance.write_dataset(table(100, 50), uri, mode="append")  # lands after load()
    assert df.count() == 100
    assert sorted(r["id"] for r in df.select("id").collect()) == list(range(100))
    assert read(spark, uri).count() == 150


@pytest.mark.spark_cluster
def test_one_partition_per_fragment_or_grouped(spark: Any, deleted_table: str) -> None:
    uri = deleted_table
    live = [f for f in lance.dataset(uri).get_fragments() if f.count_rows() > 0]
    assert len(live) == 4
    assert read(spark, uri, rows_per_partition=1).rdd.getNumPartitions() == 4
    assert read(spark, uri).rdd.getNumPartitions() == 1  # all small: one group
    assert read(spark, uri, rows_per_partition=700).rdd.getNumPartitions() == 3
    plan = plan_read(uri, ReadOptions())
    assert [rows for _, rows in plan.fragments] == [320, 340, 400, 399]  # emptied one dropped


def test_group_fragments() -> None:
    frags = [(0, 10), (1, 10), (2, 100), (3, 0), (4, 5), (5, 5)]
    assert group_fragments(frags, 1) == [(0,), (1,), (2,), (4,), (5,)]
    assert group_fragments(frags, 20) == [(0, 1), (2,), (4, 5)]
    assert group_fragments(frags, 1000) == [(0, 1, 2, 4, 5)]
    assert group_fragments([], 5) == []


def test_columns_option_projects(spark: Any, deleted_table: str) -> None:
    uri = deleted_table
    df = read(spark, uri, columns="name,id")
    assert df.schema.fieldNames() == ["name", "id"]
    assert checksum(spark_rows(df)) == checksum(pylance_rows(uri, columns=["name", "id"]))
    with pytest.raises(Exception, match="not in the table"):
        read(spark, uri, columns="id,nope").collect()


def test_user_schema_subset_is_read(spark: Any, deleted_table: str) -> None:
    uri = deleted_table
    df = spark.read.format("txn_lance").schema("small int, id bigint").load(uri)
    assert checksum(spark_rows(df)) == checksum(pylance_rows(uri, columns=["small", "id"]))
    bad = spark.read.format("txn_lance").schema("id string").load(uri)
    with pytest.raises(Exception, match="'id' is bigint"):
        bad.collect()


FILTER_CASES = [
    # (Spark SQL condition, the same in Lance SQL for the oracle)
    ("id > 1500", "id > 1500"),
    ("id = 42", "id = 42"),
    ("id <= 10 or id >= 1990", "id <= 10 OR id >= 1990"),
    ("name is null", "name IS NULL"),
    ("name is not null and small < 3", "name IS NOT NULL AND small < 3"),
    ("small in (1, 2, 99)", "small IN (1, 2, 99)"),
    ("name like 'row-12%'", "starts_with(name, 'row-12')"),
    ("name like '%99'", "ends_with(name, '99')"),
    ("name like '%-5%'", "contains(name, '-5')"),
    ("not flag", "NOT flag"),
    ("day >= date'2020-12-30'", "day >= date '2020-12-30'"),
    ("name <> 'row-3'", "name <> 'row-3'"),
    ("score > 400.5", "score > 400.5"),
    ("nested.a = 7", "nested.a = 7"),
]


@pytest.mark.parametrize(("spark_sql", "lance_sql"), FILTER_CASES)
def test_filters_equal_pylance(
    spark: Any, deleted_table: str, spark_sql: str, lance_sql: str
) -> None:
    uri = deleted_table
    ours = spark_rows(read(spark, uri).where(spark_sql))
    theirs = pylance_rows(uri, filter=lance_sql)
    assert checksum(ours) == checksum(theirs)
    plain = spark_rows(read(spark, uri, filter_pushdown="false").where(spark_sql))
    assert checksum(plain) == checksum(theirs)


@pytest.mark.spark_cluster
def test_filters_are_pushed_into_the_scan(spark: Any, deleted_table: str) -> None:
    uri = deleted_table
    df = read(spark, uri).where("id > 1500 and name like 'row-15%' and score > 1.0")
    plan = df._jdf.queryExecution().executedPlan().toString()
    # Spark keeps only the filter that was not pushed (floats stay with Spark)
    filters = [line for line in plan.splitlines() if "Filter (" in line]
    assert len(filters) == 1, plan
    assert "score#" in filters[0], plan
    assert "1500" not in plan, plan
    assert "row-15" not in plan, plan
    unpushed = read(spark, uri, filter_pushdown="false").where("id > 1500")
    assert "1500" in unpushed._jdf.queryExecution().executedPlan().toString()
    assert sorted(r["id"] for r in df.collect()) == [i for i in range(1501, 1600) if i % 7]


class _F:
    """Stand-ins with the class names and fields of pyspark's filters."""


def _make(name: str, fields: dict[str, Any]) -> Any:
    obj = type(name, (_F,), {})()
    for key, value in fields.items():
        setattr(obj, key, value)
    return obj


def test_filter_translation() -> None:
    from pyspark.sql.datasource import (
        EqualNullSafe,
        EqualTo,
        GreaterThan,
        In,
        IsNotNull,
        IsNull,
        LessThan,
        Not,
        StringContains,
    )

    schema = table(0, 1).schema.append(pa.field("u8", pa.uint8()))
    assert translate_one(EqualTo(("id",), 3), schema) == "`id` = 3"
    assert translate_one(EqualTo(("name",), "it's"), schema) == "`name` = 'it''s'"
    assert translate_one(EqualTo(("name",), "a\\b"), schema) == "`name` = 'a\\b'"
    assert translate_one(GreaterThan(("day",), dt.date(2021, 2, 3)), schema) == (
        "`day` > date '2021-02-03'"
    )
    assert translate_one(In(("small",), (1, 2)), schema) == "`small` IN (1, 2)"
    assert translate_one(Not(IsNull(("name",))), schema) == "NOT (`name` IS NULL)"
    assert translate_one(IsNotNull(("score",)), schema) == "`score` IS NOT NULL"
    assert translate_one(EqualNullSafe(("id",), None), schema) == "`id` IS NULL"
    assert translate_one(EqualNullSafe(("id",), 4), schema) == ("(`id` IS NOT NULL AND `id` = 4)")
    assert translate_one(StringContains(("name",), "%_"), schema) == "contains(`name`, '%_')"
    # not pushed: floats, nested paths, out-of-range ints, wrong kinds, NULL in IN,
    # timestamps as dates, unknown columns, unknown filter classes
    not_pushed = [
        LessThan(("score",), 1.5),
        EqualTo(("nested", "a"), 1),
        EqualTo(("small",), 2**31),
        EqualTo(("u8",), -1),
        EqualTo(("id",), "3"),
        EqualTo(("id",), True),
        EqualTo(("flag",), 1),
        In(("id",), (1, None)),
        In(("id",), ()),
        EqualTo(("day",), dt.datetime(2020, 1, 1, 5)),
        EqualTo(("nope",), 1),
        StringContains(("id",), "1"),
        _make("StringMatchesRegex", {"attribute": ("name",), "value": "x"}),
    ]
    for spark_filter in not_pushed:
        assert translate_one(spark_filter, schema) is None, spark_filter
    pushed = EqualTo(("id",), 1)
    expression, rest = translate([pushed, *not_pushed], schema)
    assert expression == "(`id` = 1)"
    assert all(a is b for a, b in zip(rest, not_pushed, strict=True))


def test_read_options() -> None:
    options = parse_read_options(
        {
            "path": "/x",
            "version": "3",
            "columns": "a, b",
            "storage.key": "SECRET-KEY",
            "lance_storage.aws_secret_access_key": "SECRET-2",
            "rows_per_partition": "10",
            "filter_pushdown": "false",
        }
    )
    assert options.version == 3
    assert options.columns == ("a", "b")
    assert options.storage_options == {"key": "SECRET-KEY"}
    assert options.rows_per_partition == 10
    assert not options.filter_pushdown
    assert "SECRET" not in repr(options)
    with pytest.raises(InvalidOperationError, match="at most one"):
        parse_read_options({"version": "1", "tag": "t"})
    with pytest.raises(InvalidOperationError, match="unknown txn_lance read option 'verison'"):
        parse_read_options({"verison": "1"})
    with pytest.raises(InvalidOperationError, match="'version' must be >= 1"):
        parse_read_options({"version": "0"})
    assert parse_timestamp("1.5") == 1_500_000_000
    assert parse_timestamp("1970-01-01T00:00:02") == 2_000_000_000
    assert parse_timestamp("1970-01-01T01:00:02+01:00") == 2_000_000_000
    with pytest.raises(InvalidOperationError, match="ISO 8601"):
        parse_timestamp("yesterday")


def test_errors_reach_the_user(spark: Any, tmp_path: Path, deleted_table: str) -> None:
    with pytest.raises(Exception, match="version 99 does not exist"):
        read(spark, deleted_table, version=99).collect()
    with pytest.raises(Exception, match="no Lance dataset"):
        read(spark, str(tmp_path / "nothing.lance")).collect()
    with pytest.raises(Exception, match="unknown txn_lance read option"):
        read(spark, deleted_table, max_rows_per_file=3).collect()


def test_table_written_by_txn_lance_and_empty_table(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    src = spark.range(0, 3000, numPartitions=3).selectExpr(
        "id", "cast(id % 10 as int) as k", "concat('v', cast(id as string)) as v"
    )
    src.write.format("txn_lance").mode("append").option("max_rows_per_file", "700").save(uri)
    df = read(spark, uri, rows_per_partition=1)
    assert df.rdd.getNumPartitions() == len(lance.dataset(uri).get_fragments())
    assert checksum(spark_rows(df)) == checksum(pylance_rows(uri))
    assert df.where("k = 3").count() == 300

    empty = str(tmp_path / "empty.lance")
    lance.write_dataset(pa.table({"a": pa.array([], pa.int64())}), empty)
    assert read(spark, empty).count() == 0
    assert read(spark, empty).schema.simpleString() == "struct<a:bigint>"


def test_types_spark_lacks_are_widened(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    data = pa.table(
        {
            "u8": pa.array([0, 255], pa.uint8()),
            "u32": pa.array([0, 2**32 - 1], pa.uint32()),
            "u64": pa.array([0, 2**64 - 1], pa.uint64()),
            "ls": pa.array(["a", "b"], pa.large_string()),
            "vec": pa.array([[1.0, 2.0], [3.0, 4.0]], pa.list_(pa.float32(), 2)),
        }
    )
    lance.write_dataset(data, uri)
    df = read(spark, uri)
    assert df.schema.simpleString() == (
        "struct<u8:smallint,u32:bigint,u64:decimal(20,0),ls:string,vec:array<float>>"
    )
    rows = sorted(spark_rows(df), key=lambda r: r["u8"])
    assert rows[1]["u8"] == 255
    assert rows[1]["u32"] == 2**32 - 1
    assert int(rows[1]["u64"]) == 2**64 - 1
    assert rows[1]["vec"] == [3.0, 4.0]


@pytest.mark.spark_cluster
def test_read_on_moto_s3(spark: Any, moto_server: Any) -> None:
    uri = moto_server.uri(emu.unique_name("spark-read"))
    lance_options = moto_server.lance_options()
    lance.write_dataset(table(0, 900), uri, max_rows_per_file=300, storage_options=lance_options)
    ds = lance.dataset(uri, storage_options=lance_options)
    ds.delete("id < 100")
    reader = spark.read.format("txn_lance").option("rows_per_partition", "1")
    for key, value in lance_options.items():  # one set: used by txn_engine and pylance
        reader = reader.option(f"storage.{key}", value)
    df = reader.load(uri)
    assert df.rdd.getNumPartitions() == 3
    theirs = pylance_rows(uri, storage_options=lance_options)
    assert len(theirs) == 800
    assert checksum(spark_rows(df)) == checksum(theirs)
    assert df.where("id >= 850").count() == 50


def test_a_read_leases_its_pinned_version_against_cleanup(tmp_path: Path) -> None:
    """Creating the DataFrame (the data source's schema(), where the version is pinned)
    leases that version, so txn_engine's cleanup keeps it for the read; lease_ttl=0 opts
    out. Runs the driver-side planning directly (no Spark session needed)."""
    import time
    from datetime import timedelta

    from txn_engine.leases import read_leases
    from txn_engine.retention import cleanup
    from txn_engine.spark._datasource import TxnLanceDataSource

    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"id": pa.array([1, 2], pa.int64())}), uri)
    source = TxnLanceDataSource({"path": uri})
    source.schema()
    storage = open_storage(uri)
    (held,) = read_leases(storage)
    assert held.version == 1
    assert held.expires_at_ns > time.time_ns() + 3500 * 10**9
    for i in (3, 4):
        lance.write_dataset(pa.table({"id": pa.array([i], pa.int64())}), uri, mode="append")
    cleanup(uri, older_than=timedelta(0), progress=False)
    assert lance.dataset(uri, version=1).to_table()["id"].to_pylist() == [1, 2]
    unleased = str(tmp_path / "u.lance")
    lance.write_dataset(pa.table({"id": pa.array([1], pa.int64())}), unleased)
    TxnLanceDataSource({"path": unleased, "lease_ttl": "0"}).schema()
    assert read_leases(open_storage(unleased)) == []
