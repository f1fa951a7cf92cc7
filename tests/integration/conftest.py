"""Datasets written by pylance 14.0.2 (the oracle) for the format-layer integration tests."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from pathlib import Path

import attrs
import lance
import pyarrow as pa
import pytest

N_ROWS = 12_000

# Spark's Python workers import test helpers (storage factories, hooks in conftest_spark) by
# module name: whichever test module starts the pytest process's Spark session first (a
# session is shared once created), its workers must find tests/integration on their path.
_HERE = str(Path(__file__).resolve().parent)
os.environ["PYTHONPATH"] = os.pathsep.join(
    dict.fromkeys([_HERE, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])
)


@attrs.frozen
class History:
    """A pylance-written dataset and the operation each version was made by."""

    path: Path
    operations: dict[int, str]
    v2_paths: bool
    stable_row_ids: bool


def _table(start: int, n: int) -> pa.Table:
    return pa.table(
        {
            "a": pa.array(range(start, start + n), pa.int64()),
            "b": pa.array([f"s{i}" for i in range(start, start + n)], pa.string()),
        }
    )


def build_history(path: Path, *, v2_paths: bool, stable_row_ids: bool) -> History:
    """Write one dataset through every kind of commit the tests need.

    Versions: create, append, sparse delete, dense delete (> 5 000 rows: .bin deletion
    file), add column x2, drop column, BTree index, update, config upsert, schema metadata,
    compaction (ReserveFragments + Rewrite), overwrite, append.
    """
    ops: dict[int, str] = {}
    uri = str(path)

    def record(ds: lance.LanceDataset, op: str) -> lance.LanceDataset:
        ds = lance.dataset(uri)
        ops[ds.version] = op
        return ds

    ds = lance.write_dataset(
        _table(0, N_ROWS),
        uri,
        max_rows_per_file=8000,
        enable_v2_manifest_paths=v2_paths,
        enable_stable_row_ids=stable_row_ids,
    )
    ds = record(ds, "Overwrite")
    ds = record(lance.write_dataset(_table(N_ROWS, 100), uri, mode="append"), "Append")
    ds.delete("a < 5")
    ds = record(ds, "Delete")
    ds.delete("a >= 100 AND a < 6000")
    ds = record(ds, "Delete")
    ds.add_columns({"c": "a * 2"})
    ds = record(ds, "Merge")
    ds.add_columns({"d": "a * 3"})
    ds = record(ds, "Merge")
    ds.drop_columns(["d"])
    ds = record(ds, "Project")
    ds.create_scalar_index("a", "BTREE")
    ds = record(ds, "CreateIndex")
    ds.update({"c": "c + 1"}, where="a < 50")
    ds = record(ds, "Update")
    ds.update_config({"txn_engine.test": "yes"})
    ds = record(ds, "UpdateConfig")
    ds.replace_schema_metadata({"owner": "tests"})
    ds = record(ds, "UpdateConfig")
    before = ds.version
    ds.optimize.compact_files(target_rows_per_fragment=50_000)
    ds = lance.dataset(uri)
    # Compaction commits ReserveFragments (when it needs fragment ids) and then Rewrite.
    for v in range(before + 1, ds.version):
        ops[v] = "ReserveFragments"
    ops[ds.version] = "Rewrite"
    ds = record(lance.write_dataset(_table(0, 500), uri, mode="overwrite"), "Overwrite")
    record(lance.write_dataset(_table(500, 50), uri, mode="append"), "Append")
    return History(path, ops, v2_paths, stable_row_ids)


VARIANTS = {
    "v2-names": {"v2_paths": True, "stable_row_ids": False},
    "v1-names": {"v2_paths": False, "stable_row_ids": False},
    "stable-row-ids": {"v2_paths": True, "stable_row_ids": True},
}


@pytest.fixture(scope="session")
def history_factory(
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[[str], History]:
    """``factory(variant)`` -> the (cached) History of a VARIANTS entry."""
    cache: dict[str, History] = {}

    def factory(variant: str) -> History:
        if variant not in cache:
            path = tmp_path_factory.mktemp(f"hist-{variant}") / "ds.lance"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cache[variant] = build_history(path, **VARIANTS[variant])
        return cache[variant]

    return factory


@pytest.fixture(params=sorted(VARIANTS))
def history(request: pytest.FixtureRequest, history_factory: Callable[[str], History]) -> History:
    """Each pylance-written History variant in turn."""
    return history_factory(request.param)
