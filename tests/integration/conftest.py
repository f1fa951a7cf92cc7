"""Shared fixtures of the integration tests.

* Datasets written by pylance 14.0.2 (the oracle) for the format-layer tests
  (``history_factory``, ``history``).
* The object-store emulators of ``emulators.py`` (``moto_server``, ``azurite_server``,
  ``fake_gcs_server``, ``loopback_proxy``): one server per kind per pytest process. Test
  modules use ``import emulators as emu`` for the helpers (``emu.unique_name``, ...).
* Spark: ``spark`` is the process's one SparkSession (local mode, ``local[2,3]``). A test
  marked ``@pytest.mark.spark_cluster`` runs twice, with ``spark`` in local mode and on a
  standalone cluster (a master and two workers on 127.0.0.1, executors in processes of
  their own), ``parametrize("spark", ["cluster"], indirect=True)`` runs a test on the
  cluster only, and ``standalone`` gives the cluster's URL to a test whose driver runs in a
  subprocess. The cluster is started once per pytest process, when the first test that
  needs it runs; those tests run last (and, under xdist with ``--dist loadgroup``, in one
  worker), so the session switches master at most twice.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

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
# ... and test modules import them (emulators, spark_cluster, conftest_spark) by name too
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

import emulators  # noqa: E402
import spark_cluster  # noqa: E402

# modules that still load emulators.py by path under this name get this same module (one
# set of fixture functions, one server per kind)
sys.modules.setdefault("txn_engine_tests_emulators", emulators)

moto_server = emulators.moto_server
azurite_server = emulators.azurite_server
fake_gcs_server = emulators.fake_gcs_server
loopback_proxy = emulators.loopback_proxy


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


# --------------------------------------------------------------------------- Spark

SPARK_CLUSTER_GROUP = "spark-cluster"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "spark_cluster: run the test with `spark` in local mode and on the standalone cluster",
    )
    # pytest-xdist registers it; also without xdist (-p no:xdist), as the hook below sets it
    config.addinivalue_line("markers", "xdist_group(name): run these tests in one xdist worker")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.definition.get_closest_marker("spark_cluster") and (
        "spark" in metafunc.fixturenames
    ):
        metafunc.parametrize("spark", ["local", "cluster"], indirect=True)


def _on_cluster(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    if callspec is not None and callspec.params.get("spark") == "cluster":
        return True
    return "spark_cluster_master" in getattr(item, "fixturenames", ())


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Cluster tests last (one switch of the session's master) and in one xdist group
    (one cluster per run under ``--dist loadgroup``)."""
    cluster = [item for item in items if _on_cluster(item)]
    if not cluster:
        return
    for item in cluster:
        item.add_marker(pytest.mark.xdist_group(SPARK_CLUSTER_GROUP))
        _join_xdist_group(config, item, SPARK_CLUSTER_GROUP)
    chosen = {id(item) for item in cluster}
    items[:] = [item for item in items if id(item) not in chosen] + cluster


def _join_xdist_group(config: pytest.Config, item: pytest.Item, group: str) -> None:
    """What pytest-xdist's loadgroup mode does with an ``xdist_group`` mark: suffix the
    node id with ``@group``, by which the controller sends the group to one worker.
    pytest-xdist 3.8 sets ``item._nodeid``, which pytest 9.2 no longer reads (the id is
    ``item._id``), so without this the group is ignored and every worker starts a cluster."""
    if not config.getoption("loadgroup", default=False) or item.nodeid.endswith(f"@{group}"):
        return
    if hasattr(item, "_id"):
        from _pytest.nodeid import coerce_node_id

        item._id = coerce_node_id(f"{item.nodeid}@{group}")


@pytest.fixture(scope="session")
def spark_sessions() -> Iterator[spark_cluster.Sessions]:
    """The process's SparkSession holder (stopped at the end of the run)."""
    sessions = spark_cluster.Sessions()
    yield sessions
    sessions.stop()


@pytest.fixture(scope="session")
def spark_cluster_master(
    tmp_path_factory: pytest.TempPathFactory, spark_sessions: spark_cluster.Sessions
) -> Iterator[str]:
    """A standalone master and two workers (one core each) on 127.0.0.1, started when a
    test first needs them; ``spark://127.0.0.1:<port>``."""
    work = tmp_path_factory.mktemp("spark-cluster")
    with spark_cluster.standalone_cluster(work) as master:
        try:
            yield master
        finally:
            spark_sessions.release(master)  # before the cluster goes


@pytest.fixture
def spark(request: pytest.FixtureRequest, spark_sessions: spark_cluster.Sessions) -> Any:
    """The SparkSession (``txn_lance`` registered): local mode, or on the standalone
    cluster for the ``cluster`` parameter (see ``spark_cluster`` marker)."""
    where = getattr(request, "param", "local")
    if where == "cluster":
        return spark_sessions.get(request.getfixturevalue("spark_cluster_master"))
    assert where == "local", where
    return spark_sessions.get(spark_cluster.LOCAL_MASTER)


@pytest.fixture
def standalone(spark_cluster_master: str, spark_sessions: spark_cluster.Sessions) -> str:
    """The cluster's URL for a driver in a subprocess: this process's session is stopped
    first if it is on the cluster (an application takes every core of the cluster, so a
    second one would wait for it)."""
    spark_sessions.release(spark_cluster_master)
    return spark_cluster_master
