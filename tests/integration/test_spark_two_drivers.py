"""Two Spark applications (separate driver processes, each its own JVM) write one table at once.

Each driver appends its own id range through the ``txn_lance`` source, then merges a source
whose keys overlap the other driver's (``txn_engine.spark.merge``, insert when not matched,
update when matched). Both start their jobs at one file barrier. Whatever the interleaving:
every appended row lands exactly once, every merged key exists exactly once (two merges
inserting the same new key never both land), and every driver's commits succeed (conflicts
are re-planned within the budget).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import spark_cluster

DRIVER = r"""
import json, os, sys, time

spec = json.loads(sys.argv[1])
from pyspark.sql import SparkSession

from txn_engine.spark import merge, register

spark = (
    SparkSession.builder.master("local[2]")
    .appName(f"txn_lance-driver-{spec['name']}")
    .config("spark.ui.enabled", "false")
    .config("spark.sql.shuffle.partitions", "2")
    .config("spark.driver.memory", "512m")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
register(spark)
# the barrier: both drivers are up (JVM started) before either writes
open(os.path.join(spec["barrier"], spec["name"]), "w").close()
deadline = time.time() + 300
while len(os.listdir(spec["barrier"])) < 2:
    if time.time() > deadline:
        raise SystemExit("the other driver never came up")
    time.sleep(0.05)
lo, hi = spec["append"]
(
    spark.range(lo, hi, numPartitions=2)
    .selectExpr("id", "concat('append-', cast(id as string)) as name")
    .write.format("txn_lance")
    .mode("append")
    .save(spec["uri"])
)
keys = spec["merge"]
source = spark.createDataFrame([(k, f"merge-{spec['name']}") for k in keys], "id long, name string")
result = merge(source, spec["uri"], on="id")
with open(spec["result"], "w") as handle:
    json.dump({"inserted": result.rows_inserted, "updated": result.rows_updated}, handle)
spark.stop()
"""


def _start(work: Path, spec: dict[str, Any]) -> subprocess.Popen[bytes]:
    script = work / "driver.py"
    script.write_text(DRIVER)
    log = (work / f"{spec['name']}.log").open("wb")
    return subprocess.Popen(
        [sys.executable, str(script), json.dumps(spec)],
        env=spark_cluster.cluster_env(work),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


@pytest.mark.slow
def test_two_driver_processes_append_and_merge_at_once(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(
        pa.table({"id": pa.array(range(10), pa.int64()), "name": ["seed"] * 10}), uri
    )
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    shared_new = [5000, 5001, 5002]  # both drivers insert these: each must exist once
    specs = [
        {
            "name": "a",
            "uri": uri,
            "barrier": str(barrier),
            "append": [1000, 1300],
            "merge": [*shared_new, 1, 6000],
            "result": str(tmp_path / "a.json"),
        },
        {
            "name": "b",
            "uri": uri,
            "barrier": str(barrier),
            "append": [2000, 2250],
            "merge": [*shared_new, 2, 7000],
            "result": str(tmp_path / "b.json"),
        },
    ]
    procs = [_start(tmp_path, spec) for spec in specs]
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=600))
        finally:
            if proc.poll() is None:
                proc.kill()
    logs = {
        s["name"]: (tmp_path / f"{s['name']}.log").read_text(errors="replace")[-3000:]
        for s in specs
    }
    assert codes == [0, 0], logs

    table = lance.dataset(uri).to_table().to_pydict()
    got = sorted(table["id"])
    expected = sorted([*range(10), *range(1000, 1300), *range(2000, 2250), *shared_new, 6000, 7000])
    assert got == expected  # every row once: no append lost or doubled, no key twice
    names = dict(zip(table["id"], table["name"], strict=True))
    assert names[1] == "merge-a"  # matched keys updated
    assert names[2] == "merge-b"
    assert {names[k] for k in shared_new} <= {"merge-a", "merge-b"}
    results = [json.loads(Path(s["result"]).read_text()) for s in specs]
    # of the three shared new keys, each was inserted by exactly one driver
    assert sum(r["inserted"] for r in results) == len(shared_new) + 2
    # 1 seed version + 2 appends + 2 merges (a merge re-planned never lands twice)
    assert lance.dataset(uri).version == 5
