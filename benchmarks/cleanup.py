"""Cleanup benchmark: deleting many orphan files, txn_engine vs pylance 14.0.2, same run.

    python -m benchmarks.cleanup [--quick] [--orphans N] [--runs R] [--s3-orphans N]
                                 [--json results.json]

A small pylance-written table (two versions) gets ``N`` orphan files in ``data/`` (files
no manifest references, as left by writers that never committed). Two identical copies are
cleaned, one by pylance's ``cleanup_old_versions`` and one by :func:`txn_engine.retention.
cleanup`, with the same semantics:

* local disk: orphans back-dated 8 days; pylance's default (unverified files older than 7
  days go) against txn_engine's default orphan retention (7 days);
* moto S3 (only when ``moto`` is installed and ``--s3-orphans`` > 0): a store cannot be
  back-dated, so pylance runs with ``delete_unverified=True`` and txn_engine with a zero
  retention.

Both must leave the same files (txn_engine's record of the versions it removed,
``_txn_engine/gaps/``, aside); the result is seconds per engine and the ratio
txn_engine / pylance (< 1: txn_engine is faster). ``benchmarks.run`` calls :func:`run`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa

from txn_engine.retention import CleanupReport, cleanup

_KEY, _SECRET, _REGION = "testing", "testing", "us-east-1"


def _table() -> pa.Table:
    return pa.table({"a": list(range(100))})


def _removed(stats: Any) -> int:
    """Objects pylance's cleanup removed (manifests and every kind of file)."""
    return int(
        stats.old_versions
        + stats.data_files_removed
        + stats.transaction_files_removed
        + stats.index_files_removed
        + stats.deletion_files_removed
    )


def _files(root: Path) -> set[str]:
    out: set[str] = set()
    for directory, _, names in os.walk(root):
        for name in names:
            rel = os.path.relpath(os.path.join(directory, name), root)
            # txn_engine's own bookkeeping (the record of the versions it removed) aside
            if not rel.endswith("latest_version_hint.json") and not rel.startswith("_txn_engine"):
                out.add(rel)
    return out


def _local_copies(root: Path, orphans: int) -> tuple[str, str]:
    base = root / "base.lance"
    lance.write_dataset(_table(), str(base))
    lance.write_dataset(_table(), str(base), mode="append")
    data = base / "data"
    old = time.time() - 8 * 86400
    for i in range(orphans):
        path = data / f"orphan-{i:07d}.lance"
        path.write_bytes(b"o")
        os.utime(path, (old, old))
    p, t = root / "pylance.lance", root / "txn_engine.lance"
    shutil.copytree(base, p)
    shutil.copytree(base, t)
    shutil.rmtree(base)
    return str(p), str(t)


def bench_local(root: Path, orphans: int, runs: int = 1) -> dict[str, Any]:
    """Seconds to delete ``orphans`` back-dated orphan files on local disk, per engine:
    ``runs`` timed runs, each on fresh identical copies, the engines taking turns going
    first (the second one runs while the disk still settles the first one's deletes);
    medians."""
    times: dict[str, list[float]] = {"pylance": [], "txn_engine": []}
    deleted: dict[str, int] = {}
    same = True
    for run in range(runs):
        p_uri, t_uri = _local_copies(root, orphans)
        order = ("pylance", "txn_engine") if run % 2 == 0 else ("txn_engine", "pylance")
        for engine in order:
            start = time.perf_counter()
            if engine == "pylance":
                stats = lance.dataset(p_uri).cleanup_old_versions(older_than=timedelta(0))
                deleted[engine] = _removed(stats)
            else:
                report = cleanup(t_uri, older_than=timedelta(0), progress=False)
                assert isinstance(report, CleanupReport)
                deleted[engine] = report.deleted
            times[engine].append(time.perf_counter() - start)
        same = same and _files(Path(p_uri)) == _files(Path(t_uri))
        shutil.rmtree(p_uri)
        shutil.rmtree(t_uri)
    p_s, t_s = statistics.median(times["pylance"]), statistics.median(times["txn_engine"])
    return {
        "store": "local",
        "orphans": orphans,
        "runs": runs,
        "pylance_s": p_s,
        "txn_engine_s": t_s,
        "ratio": t_s / p_s if p_s else float("inf"),
        "pylance_runs_s": times["pylance"],
        "txn_engine_runs_s": times["txn_engine"],
        "pylance_deleted": deleted["pylance"],
        "txn_engine_deleted": deleted["txn_engine"],
        "same_files_left": same,
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _moto() -> Iterator[str]:
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        import urllib.request

        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("moto server did not start") from None
                time.sleep(0.2)
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def bench_s3(orphans: int) -> dict[str, Any]:
    """Seconds to delete ``orphans`` orphan objects on moto S3, per engine (one run), and
    the seconds the setup took (``setup_s``: 2 x ``orphans`` requests to moto).

    moto's server handles one request at a time. pylance 14's cleanup sends one
    ``DeleteObjects`` request per file (302 requests for 300 orphans, counted at a loopback
    proxy); txn_engine sends one per batch of up to 1,000 keys, so what limits it is moto's
    own work per key."""
    import boto3

    setup_start = time.perf_counter()
    with _moto() as endpoint:
        s3 = boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id=_KEY,
            aws_secret_access_key=_SECRET,
            region_name=_REGION,
        )
        s3.create_bucket(Bucket="bench")
        lance_opts = {
            "aws_endpoint": endpoint,
            "aws_access_key_id": _KEY,
            "aws_secret_access_key": _SECRET,
            "aws_region": _REGION,
            "allow_http": "true",
        }
        uris = {name: f"s3://bench/{name}.lance" for name in ("pylance", "txn_engine")}
        lance.write_dataset(_table(), uris["pylance"], storage_options=lance_opts)
        lance.write_dataset(_table(), uris["pylance"], mode="append", storage_options=lance_opts)

        def put(i: int) -> None:
            key = f"pylance.lance/data/orphan-{i:07d}.lance"
            s3.put_object(Bucket="bench", Key=key, Body=b"o")

        with ThreadPoolExecutor(16) as ex:
            list(ex.map(put, range(orphans)))
        # the same table byte for byte under the second name (server-side copies)
        source = [
            o["Key"]
            for page in s3.get_paginator("list_objects_v2").paginate(
                Bucket="bench", Prefix="pylance.lance/"
            )
            for o in page.get("Contents", [])
        ]

        def copy(key: str) -> None:
            target = "txn_engine.lance/" + key[len("pylance.lance/") :]
            s3.copy_object(Bucket="bench", Key=target, CopySource={"Bucket": "bench", "Key": key})

        with ThreadPoolExecutor(16) as ex:
            list(ex.map(copy, source))
        time.sleep(0.05)
        setup_s = time.perf_counter() - setup_start
        start = time.perf_counter()
        stats = lance.dataset(uris["pylance"], storage_options=lance_opts).cleanup_old_versions(
            older_than=timedelta(0), delete_unverified=True
        )
        p_s = time.perf_counter() - start
        start = time.perf_counter()
        report = cleanup(
            uris["txn_engine"],
            older_than=timedelta(0),
            retention_orphans=timedelta(0),
            storage_options=lance_opts,
            progress=False,
        )
        t_s = time.perf_counter() - start
        assert isinstance(report, CleanupReport)

        def keys(prefix: str) -> set[str]:
            out: set[str] = set()
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket="bench", Prefix=prefix):
                out |= {
                    o["Key"][len(prefix) :]
                    for o in page.get("Contents", [])
                    if not o["Key"].endswith("latest_version_hint.json")
                    and not o["Key"][len(prefix) :].startswith("_txn_engine")
                }
            return out

        return {
            "store": "moto-s3",
            "orphans": orphans,
            "runs": 1,
            "setup_s": setup_s,
            "pylance_s": p_s,
            "txn_engine_s": t_s,
            "ratio": t_s / p_s if p_s else float("inf"),
            "pylance_deleted": _removed(stats),
            "txn_engine_deleted": report.deleted,
            "same_files_left": keys("pylance.lance/") == keys("txn_engine.lance/"),
        }


def _moto_available() -> bool:
    try:
        import boto3  # noqa: F401
        import moto.server  # noqa: F401
    except ImportError:
        return False
    return True


def run(root: Path, *, quick: bool) -> list[dict[str, Any]]:
    """The cleanup rows of ``benchmarks.run``: local disk (2,000 orphans, one run, quick;
    100,000 orphans, medians of 3 runs, full) and, in a full run with moto installed,
    10,000 orphans on moto S3 (one run: the setup alone is 20,000 requests to moto)."""
    root.mkdir(parents=True, exist_ok=True)
    rows = [bench_local(root, 2_000) if quick else bench_local(root, 100_000, runs=3)]
    if not quick and _moto_available():
        rows.append(bench_s3(10_000))
    return rows


def describe(row: dict[str, Any]) -> str:
    """One printed line for a result row."""
    return (
        f"   {row['store']:<8} {row['orphans']:>7} orphans: pylance {row['pylance_s']:8.2f}s  "
        f"txn_engine {row['txn_engine_s']:8.2f}s  ratio {row['ratio']:5.2f}"
        f"  same files left: {row['same_files_left']}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 local orphans, no S3")
    parser.add_argument("--orphans", type=int, default=None, help="local orphan files")
    parser.add_argument("--runs", type=int, default=None, help="timed local runs (medians)")
    parser.add_argument("--s3-orphans", type=int, default=None, help="moto S3 orphan objects")
    parser.add_argument(
        "--json", default=None, help='write {"cleanup": rows} here (python -m benchmarks.report)'
    )
    args = parser.parse_args(argv)
    local = args.orphans if args.orphans is not None else (2_000 if args.quick else 100_000)
    runs = args.runs if args.runs is not None else (1 if args.quick else 3)
    s3 = args.s3_orphans if args.s3_orphans is not None else (0 if args.quick else 10_000)
    print("7. cleanup of orphan files (seconds)")
    rows = []
    if local:
        with tempfile.TemporaryDirectory() as tmp:
            rows.append(bench_local(Path(tmp), local, runs=runs))
            print(describe(rows[-1]), flush=True)
    if s3 and _moto_available():
        rows.append(bench_s3(s3))
        print(describe(rows[-1]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"cleanup": rows}, indent=2))
    return 0 if all(r["same_files_left"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
