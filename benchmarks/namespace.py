"""Namespace benchmarks (docs/namespace.md, *Performance*).

1. Single-table commits through the namespace against direct ones, same run, same table,
   alternating: a warm Append of one fragment (``commit(..., base=)``) through the
   namespace's commit handler vs the store's own; medians and their ratio.
2. Multi-table transactions per second: ``W`` writer threads each run transactions that
   append one fragment to 2 tables drawn at random from ``K`` (``tx.add``), for a fixed
   time; committed transactions per second and how many gave way (wait-die) and ran again.

Run: ``python -m benchmarks.namespace [--stores local,s3] [--delay-ms 25] [--seconds 8]``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

import txn_engine as te
from benchmarks.object_stores import SCHEMA, Store, _one_fragment, _requests, started_stores
from txn_engine.commit import commit
from txn_engine.dataset import Dataset
from txn_engine.errors import NamespaceTransactionAbortedError
from txn_engine.namespace._transaction import WithHandler


def _namespace(store: Store, label: str) -> Any:
    return te.Namespace(store.uri(label), store.options)


def single_table(store: Store, runs: int) -> dict[str, Any]:
    """Median warm commit, direct vs through the namespace (alternating)."""
    ns = _namespace(store, "single")
    ns.create_table("t", pa.table({"a": [1]}, schema=SCHEMA))
    parts = ("t",)
    storage = ns.table_storage(parts)
    via = WithHandler(storage, ns.handler(parts))
    _, frag = _one_fragment(store, ns.location(parts))
    times: dict[str, list[float]] = {"direct": [], "namespace": []}
    for i in range(2 * runs + 2):
        kind = "direct" if i % 2 == 0 else "namespace"
        base = Dataset.open(storage)
        target = storage if kind == "direct" else via
        start = time.perf_counter()
        commit(target, te.Transaction(base.version, te.Append((frag,))), base=base)
        elapsed = time.perf_counter() - start
        if i >= 2:  # the first pair warms connections up
            times[kind].append(elapsed)
    direct = 1000 * statistics.median(times["direct"])
    through = 1000 * statistics.median(times["namespace"])
    return {
        "store": store.name,
        "direct_ms": round(direct, 2),
        "namespace_ms": round(through, 2),
        "ratio": round(through / direct, 2),
        "runs": runs,
    }


def multi_table(store: Store, tables: int, writers: int, seconds: float) -> dict[str, Any]:
    """Committed 2-table transactions per second with ``writers`` threads."""
    ns = _namespace(store, f"multi{tables}")
    names = [f"t{i}" for i in range(tables)]
    frags = {}
    for name in names:
        ns.create_table(name, pa.table({"a": [1]}, schema=SCHEMA))
        _, frags[name] = _one_fragment(store, ns.location((name,)))
    done, gave_way, errors = [0], [0], []
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        mine = te.Namespace(ns.root_uri, store.options)  # each writer its own caches
        try:
            while time.monotonic() < stop:
                pair = rng.sample(names, 2)
                try:
                    with mine.transaction() as tx:
                        for name in pair:
                            version = mine.latest((name,)).version
                            tx.add(name, te.Transaction(version, te.Append((frags[name],))))
                except NamespaceTransactionAbortedError:
                    with lock:
                        gave_way[0] += 1
                    continue
                with lock:
                    done[0] += 1
        except Exception as exc:
            errors.append(repr(exc))

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(writers)]
    start = time.monotonic()
    with _requests(store) as requests:  # what the delaying proxy forwarded (S3 only)
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    elapsed = time.monotonic() - start
    return {
        "store": store.name,
        "tables": tables,
        "writers": writers,
        "tx_per_s": round(done[0] / elapsed, 1),
        "committed": done[0],
        "gave_way": gave_way[0],
        "requests_per_tx": round(len(requests) / done[0], 1) if requests and done[0] else None,
        "requests_per_s": round(len(requests) / elapsed, 1) if requests else None,
        "errors": errors[:3],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--stores", default="local,s3")
    parser.add_argument("--delay-ms", type=float, default=25.0)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--tables", default="2,10,100")
    parser.add_argument("--writers", default="1,2,4,8")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    results: dict[str, list[dict[str, Any]]] = {"single": [], "multi": []}
    with tempfile.TemporaryDirectory() as work:
        kinds = args.stores.split(",")
        with started_stores(kinds, args.delay_ms, Path(work)) as stores:
            chosen = [s for s in stores if s.kind == "local" or s.delay_ms]
            for store in chosen:
                row = single_table(store, args.runs)
                results["single"].append(row)
                print(json.dumps(row), flush=True)
            for store in chosen:
                for tables in (int(x) for x in args.tables.split(",")):
                    for writers in (int(x) for x in args.writers.split(",")):
                        row = multi_table(store, tables, writers, args.seconds)
                        results["multi"].append(row)
                        print(json.dumps(row), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
