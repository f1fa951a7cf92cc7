"""The pipeline of docs/spark.md end to end on S3 (moto), on the standalone cluster: a
stream ingests into a ``txn_lance`` table (checkpointed, one version per micro-batch),
``txn_engine.spark.merge`` upserts into it, later changes land, and ``spark.read`` of a
pinned version returns exactly what pylance 14.0.2 reads at that version of the same S3
table.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import emulators as emu
import lance
import pytest

from txn_engine.spark import delete, merge

pytestmark = [
    pytest.mark.pylance,
    pytest.mark.filterwarnings("ignore:lance is not fork-safe:UserWarning"),
]

FILES, ROWS = 3, 40  # three micro-batches of 40 rows


def source_files(directory: Path) -> None:
    directory.mkdir()
    for i in range(FILES):
        lines = [
            json.dumps({"id": n, "name": f"ingest-{n}", "amount": n * 1.5})
            for n in range(i * ROWS, (i + 1) * ROWS)
        ]
        (directory / f"part-{i}.json").write_text("\n".join(lines) + "\n")


def rows(table_or_rows: Any) -> list[tuple[Any, ...]]:
    """Sorted (id, name, amount) tuples of a pylance table or of collected Spark rows."""
    if hasattr(table_or_rows, "to_pylist"):
        items = table_or_rows.to_pylist()
    else:
        items = [r.asDict() for r in table_or_rows]
    return sorted((r["id"], r["name"], r["amount"]) for r in items)


@pytest.mark.parametrize("spark", ["cluster"], indirect=True)
def test_stream_upsert_then_read_a_pinned_version_on_s3(
    spark: Any, moto_server: Any, tmp_path: Path
) -> None:
    uri = moto_server.uri(emu.unique_name("pipeline"))
    options = moto_server.lance_options()  # Lance's names: txn_engine and pylance alike
    source = tmp_path / "source"
    source_files(source)

    # 1. ingest: a checkpointed stream, one file (micro-batch) at a time
    writer = (
        spark.readStream.schema("id long, name string, amount double")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
        .repartition(2)
        .writeStream.format("txn_lance")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
    )
    for key, value in options.items():
        writer = writer.option(f"storage.{key}", value).option(f"lance_storage.{key}", value)
    query = writer.trigger(availableNow=True).start(uri)
    query.awaitTermination()
    assert query.exception() is None
    ingested = lance.dataset(uri, storage_options=options)
    assert ingested.version == FILES  # one version per micro-batch
    assert ingested.count_rows() == FILES * ROWS

    # 2. upsert: ids 100-119 exist (updated), 120-139 are new (inserted)
    updates = spark.createDataFrame(
        [(n, f"upsert-{n}", -float(n)) for n in range(100, 140)],
        "id long, name string, amount double",
    )
    upserted = merge(updates, uri, on="id", storage_options=options)
    assert (upserted.rows_updated, upserted.rows_inserted) == (20, 20)
    pinned = upserted.version
    assert pinned == FILES + 1

    # 3. the table moves on
    deleted = delete(spark, uri, "id < 30 OR name = 'upsert-130'", storage_options=options)
    assert deleted.version == pinned + 1

    # 4. read the pinned version with Spark; pylance is the oracle
    reader = spark.read.format("txn_lance").option("version", str(pinned))
    for key, value in options.items():
        reader = reader.option(f"storage.{key}", value)
    ours = rows(reader.load(uri).collect())
    theirs = rows(lance.dataset(uri, version=pinned, storage_options=options).to_table())
    assert ours == theirs
    expected = {n: (f"ingest-{n}", n * 1.5) for n in range(100)}
    expected.update({n: (f"upsert-{n}", -float(n)) for n in range(100, 140)})
    assert ours == sorted((n, *v) for n, v in expected.items())
    latest = spark.read.format("txn_lance")
    for key, value in options.items():
        latest = latest.option(f"storage.{key}", value)
    now = rows(latest.load(uri).collect())
    assert now == rows(lance.dataset(uri, storage_options=options).to_table())
    assert len(now) == 140 - 30 - 1
