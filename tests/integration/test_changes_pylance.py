"""The change feed (``Table.changes`` / ``changes_since``), checked against pylance 14.0.2.

Every operation's rows are compared with what pylance reads at the versions around it;
the differential property (the feed between two versions, applied to the table at the
first, gives the table at the second) runs on random histories of appends, deletes,
updates, upserts and compactions written by txn_engine and by pylance, with and without
stable row ids.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import txn_engine as te
from txn_engine import changes as feed
from txn_engine.errors import HistoryUnavailableError, InvalidOperationError, SchemaChangedError

pytestmark = [
    pytest.mark.pylance,
    pytest.mark.filterwarnings("ignore:lance is not fork-safe:UserWarning"),
]


def rows(ids: list[int], tag: str = "v") -> pa.Table:
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "value": pa.array([f"{tag}{i}" for i in ids])}
    )


def kinds(table: pa.Table) -> list[tuple[int, str, int, str]]:
    """(version, change type, id, value) per change row, sorted."""
    d = table.to_pydict()
    return sorted(zip(d["_commit_version"], d["_change_type"], d["id"], d["value"], strict=True))


def multiset(table: pa.Table) -> Counter[tuple[Any, ...]]:
    d = table.select(["id", "value"]).to_pydict()
    return Counter(zip(d["id"], d["value"], strict=True))


def apply(start: Counter[tuple[Any, ...]], changes: pa.Table) -> Counter[tuple[Any, ...]]:
    """The feed applied to a multiset of rows, version by version (removals first)."""
    out = Counter(start)
    d = changes.to_pydict()
    versions = d["_commit_version"]
    assert versions == sorted(versions), "the feed is in version order"
    for kind, key in zip(d["_change_type"], zip(d["id"], d["value"], strict=True), strict=True):
        if kind in (feed.DELETE, feed.UPDATE_PREIMAGE):
            assert out[key] > 0, f"{kind} of a row that is not there: {key}"
            out[key] -= 1
        else:
            out[key] += 1
    return +out


def test_each_operation_and_its_change_rows(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    t = te.open(uri)
    t.append(rows([0, 1, 2, 3]))  # v1: creates the table
    t.append(rows([4, 5]))  # v2
    t.delete("id = 1")  # v3
    t.update({"value": "'changed'"}, where="id = 2")  # v4: no key, no row ids
    t.merge_insert(rows([3, 9], "m"), on="id")  # v5: the key is recorded
    t.restore(2)  # v6
    t.compact()  # v7: no change
    assert t.version == 7
    got = kinds(t.changes(1, 7))
    assert got == sorted(
        [(1, "insert", i, f"v{i}") for i in range(4)]
        + [(2, "insert", 4, "v4"), (2, "insert", 5, "v5")]
        + [(3, "delete", 1, "v1")]
        + [(4, "delete", 2, "v2"), (4, "insert", 2, "changed")]
        + [(5, "update_preimage", 3, "v3"), (5, "update_postimage", 3, "m3")]
        + [(5, "insert", 9, "m9")]
        # the restore brings back version 2: every row removed since returns, and the
        # rows added since go
        + [(6, "delete", 2, "changed"), (6, "delete", 3, "m3"), (6, "delete", 9, "m9")]
        + [(6, "insert", i, f"v{i}") for i in (1, 2, 3)]
    )
    # the feed's columns and types
    table = t.changes(5, 5)
    assert table.schema.names == ["id", "value", *feed.feed_schema(pa.schema([])).names]
    assert table.schema.field("_commit_timestamp").type == pa.timestamp("us", tz="UTC")
    stamp = lance.dataset(uri, version=5).versions()[4]["timestamp"]
    assert abs(table["_commit_timestamp"][0].as_py().replace(tzinfo=None) - stamp) < dt.timedelta(
        milliseconds=1
    )
    # each range applied to the version before gives the version at its end
    for a in range(0, 7):
        for b in range(max(a, 1), 8):
            before = multiset(lance.dataset(uri, version=a).to_table()) if a else Counter()
            after = multiset(lance.dataset(uri, version=b).to_table())
            assert apply(before, t.changes(a + 1, b)) == after, (a, b)


def test_changes_since_and_ranges(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    t = te.open(uri)
    t.append(rows([0]))
    t.append(rows([1]))
    assert kinds(t.changes_since(1)) == [(2, "insert", 1, "v1")]
    empty = t.changes_since(2)
    assert empty.num_rows == 0
    assert "_change_type" in empty.schema.names
    reader = t.changes(1, reader=True)
    assert isinstance(reader, pa.RecordBatchReader)
    assert reader.read_all().num_rows == 2
    assert t.changes(1, 2, columns=["id"]).schema.names[:2] == ["id", "_change_type"]
    for bad in ((0, 1), (1, 3), (3, 1)):
        with pytest.raises(InvalidOperationError):
            t.changes(*bad)
    with pytest.raises(InvalidOperationError, match="are not in the table"):
        t.changes(1, 2, columns=["nope"])


def test_pylance_written_table_with_stable_row_ids_pairs_updates(tmp_path: Path) -> None:
    """pylance's own update and merge_insert keep the rewritten rows' stable row ids:
    the feed pairs their images by row id."""
    uri = str(tmp_path / "t.lance")
    ds = lance.write_dataset(rows(list(range(6))), uri, enable_stable_row_ids=True)
    ds.update({"value": "'u'"}, where="id < 2")  # v2
    ds = lance.dataset(uri)
    ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(
        rows([4, 7], "m")
    )  # v3
    ds = lance.dataset(uri)
    ds.delete("id = 5")  # v4
    got = kinds(te.open(uri).changes(2, 4))
    assert got == sorted(
        [(2, "update_preimage", i, f"v{i}") for i in (0, 1)]
        + [(2, "update_postimage", i, "u") for i in (0, 1)]
        + [(3, "update_preimage", 4, "v4"), (3, "update_postimage", 4, "m4")]
        + [(3, "insert", 7, "m7"), (4, "delete", 5, "v5")]
    )


def test_pylance_upsert_without_row_ids_or_keys_is_delete_and_insert(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    ds = lance.write_dataset(rows([0, 1]), uri)
    ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(
        rows([1, 2], "m")
    )
    assert kinds(te.open(uri).changes(2)) == [
        (2, "delete", 1, "v1"),
        (2, "insert", 1, "m1"),
        (2, "insert", 2, "m2"),
    ]


def test_history_cleaned_up_is_an_error(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    t = te.open(uri)
    for i in range(4):
        t.append(rows([i]))
    lance.dataset(uri).cleanup_old_versions(older_than=dt.timedelta(0))
    with pytest.raises(HistoryUnavailableError, match="version 1 ") as caught:
        t.changes(2, 4)  # needs version 1 (the rows before it) too
    assert caught.value.conflicting_version == 1
    with pytest.raises(HistoryUnavailableError):
        t.changes(4)  # version 3 is gone too
    assert kinds(t.changes(5, 4)) == []  # empty range after the kept version


def test_a_schema_change_in_the_range_names_the_version(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    t = te.open(uri)
    t.append(rows([0]))
    t.add_columns({"extra": "id * 2"})  # v2: no row of the columns read changes
    t.append(pa.table({"id": pa.array([1], pa.int64()), "value": ["v1"], "extra": [2]}))
    assert kinds(t.changes(1, 3)) == [(1, "insert", 0, "v0"), (3, "insert", 1, "v1")]
    assert t.changes(1, 3).schema.names[:2] == ["id", "value"]  # as the range starts
    assert t.changes(3, 3).column("extra").to_pylist() == [2]
    t.drop_columns(["value"])  # v4
    with pytest.raises(SchemaChangedError) as caught:
        t.changes(1, 4)
    assert caught.value.version == 4
    assert caught.value.column == "value"
    assert "start a new read at version 4" in str(caught.value)


def test_the_feed_holds_a_lease_while_it_is_read(tmp_path: Path) -> None:
    from txn_engine.leases import read_leases
    from txn_engine.storage import open_storage

    uri = str(tmp_path / "t.lance")
    t = te.open(uri)
    for i in range(3):
        t.append(rows([i]))
    reader = t.changes(3, reader=True)
    storage = open_storage(uri)
    assert [lease.version for lease in read_leases(storage)] == [2]
    reader.read_all()
    assert read_leases(storage) == []


def test_100k_changed_rows_stream_in_bounded_memory(tmp_path: Path) -> None:
    """100,000 rows inserted by one version and deleted by the next (200,000 change rows,
    ~50 MB of values): the reader holds one batch at a time."""
    uri = str(tmp_path / "t.lance")
    n, width = 100_000, 256
    payload = pa.array([f"{i:0{width}d}" for i in range(n)])
    data = pa.table({"id": pa.array(range(n), pa.int64()), "value": payload})
    lance.write_dataset(data, uri, max_rows_per_file=25_000)
    lance.dataset(uri).delete("id >= 0")
    materialised = 2 * data.nbytes
    baseline = pa.total_allocated_bytes()
    peak, count, inserted, deleted = 0, 0, 0, 0
    for batch in te.open(uri).changes(1, 2, reader=True):
        count += batch.num_rows
        kinds_ = batch.column("_change_type").to_pylist()
        inserted += kinds_.count("insert")
        deleted += kinds_.count("delete")
        peak = max(peak, pa.total_allocated_bytes() - baseline)
        del batch
    assert (count, inserted, deleted) == (2 * n, n, n)
    assert peak < materialised / 10, (peak, materialised)


# --------------------------------------------------------------------------- differential

OPS = st.sampled_from(["append", "delete", "update", "upsert", "compact", "pylance_upsert"])


def _run(t: te.Table, uri: str, op: str, draw: Any, counter: list[int]) -> None:
    fresh = list(range(counter[0], counter[0] + draw(st.integers(1, 4))))
    known = list(range(counter[0]))
    counter[0] += len(fresh)
    if op == "append":
        t.append(rows(fresh, "a"))
    elif op == "delete" and known:
        t.delete(f"id % {draw(st.integers(2, 5))} = {draw(st.integers(0, 1))}")
    elif op == "update" and known:
        t.update({"value": f"'u{counter[0]}'"}, where=f"id % 3 = {draw(st.integers(0, 2))}")
    elif op == "upsert":
        picked = draw(st.lists(st.sampled_from(known), max_size=3, unique=True)) if known else []
        t.merge_insert(rows(picked + fresh, f"m{counter[0]}-"), on="id")
    elif op == "pylance_upsert":
        picked = draw(st.lists(st.sampled_from(known), max_size=3, unique=True)) if known else []
        (
            lance.dataset(uri)
            .merge_insert("id")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute(rows(picked + fresh, f"p{counter[0]}-"))
        )
    elif op == "compact":
        t.compact()


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data(), stable=st.booleans(), ops=st.lists(OPS, min_size=1, max_size=6))
def test_feed_applied_to_the_first_version_gives_the_second(
    tmp_path_factory: pytest.TempPathFactory, data: Any, stable: bool, ops: list[str]
) -> None:
    uri = str(tmp_path_factory.mktemp("diff") / "t.lance")
    lance.write_dataset(rows([0, 1, 2], "s"), uri, enable_stable_row_ids=stable)
    t = te.open(uri)
    counter = [3]
    for op in ops:
        _run(t, uri, op, data.draw, counter)
    latest = t.version
    a = data.draw(st.integers(0, latest - 1), label="a")
    b = data.draw(st.integers(max(a, 1), latest), label="b")
    before = multiset(lance.dataset(uri, version=a).to_table()) if a else Counter()
    after = multiset(lance.dataset(uri, version=b).to_table())
    changes = t.changes(a + 1, b)
    assert apply(before, changes) == after
    # images come in pairs of one row each: same key, same version
    d = changes.to_pydict()
    pre = Counter(
        (v, i)
        for v, k, i in zip(d["_commit_version"], d["_change_type"], d["id"], strict=True)
        if k == "update_preimage"
    )
    post = Counter(
        (v, i)
        for v, k, i in zip(d["_commit_version"], d["_change_type"], d["id"], strict=True)
        if k == "update_postimage"
    )
    assert pre == post
