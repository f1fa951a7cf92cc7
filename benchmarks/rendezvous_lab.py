"""Lab: what a rendezvous would do for the contention tail (issue 14, item 4).

    python -m benchmarks.rendezvous_lab [--store gcs] [--delay-ms 25] [--writers 8]
                                        [--commits 8] [--runs 2]

Not a mode of txn_engine: an experiment that bounds what a coordinated scheme can reach, so
that the default (uncoordinated writers, ``docs/performance.md`` *A rendezvous, tried*) can be
compared with it. One *carrier* process, started and warmed before the clock, commits one
Append after another, each carrying every offer (``txn_engine.offers``) its listing found;
``--writers`` processes each make ``--commits`` Appends the same way as the contention cell
of :mod:`benchmarks.object_stores` (open the latest version, then commit), except that a
writer never creates a version itself: it posts its transaction as an offer and reads the
new versions until one carries it. A writer whose offer's window passes uncarried commits
it with :func:`txn_engine.commit` (counted as a fallback). Reported per run: p50/p99 of the
writers' commits, the versions created, fallbacks, and a landed check (fragments added =
the writers' commits + the carrier's own).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import txn_engine as te
from benchmarks import object_stores as ob
from txn_engine.commit import commit
from txn_engine.dataset import Dataset
from txn_engine.format.io import read_transaction_and_manifest
from txn_engine.format.naming import scan_versions
from txn_engine.offers import OFFER_WINDOW, Posting, carried_uuids, recall, remember

_START: Any = None
_DONE: Any = None


def _init(start: Any, done: Any) -> None:
    global _START, _DONE
    _START, _DONE = start, done


def _carrier(args: tuple[ob.Store, str]) -> int:
    """Commit Appends back to back, carrying every offer listed, until the writers are done;
    returns how many versions this process created."""
    store, uri = args
    _, frag = ob._one_fragment(store, uri)
    storage = ob._storage(store, uri)
    base = Dataset.open(storage)
    _START.wait()
    made = 0
    while not _DONE.is_set():
        memory = recall(storage.uri)  # carry offers from the first attempt on
        if memory is None:
            remember(storage.uri, {}, {}, ())
        else:
            remember(storage.uri, memory.transactions, memory.offers, memory.dead, memory.scan)
        result = commit(storage, te.Transaction(base.version, te.Append((frag,))), base=base)
        made += 1
        base = Dataset.open(storage, version=result.version)
    return made


def _writer(args: tuple[ob.Store, str, int]) -> tuple[list[float], int]:
    """``n`` Appends, each offered and waited for; latencies (ms) and fallbacks."""
    store, uri, n = args
    _, frag = ob._one_fragment(store, uri)
    storage = ob._storage(store, uri)
    Dataset.open(storage)  # connection pool warm before the clock
    _START.wait()
    latencies: list[float] = []
    fallbacks = 0
    with ThreadPoolExecutor(8) as pool:
        for _ in range(n):
            started = time.perf_counter()
            base = Dataset.open(storage)
            txn = te.Transaction(base.version, te.Append((frag,)))
            base_txn = base.manifest_file.transaction
            assert base_txn is not None
            window = base.version + OFFER_WINDOW
            posting = Posting(storage, txn, window, base_txn.uuid)
            checked, found = base.version, False
            while not found and checked < window:
                newer = scan_versions(storage, since=checked).after(checked)
                read = pool.map(lambda e: read_transaction_and_manifest(storage, e)[0], newer)
                found = any(txn.uuid in carried_uuids(pb) for pb in read)
                if newer:
                    checked = newer[-1].version
            if not found:
                fallbacks += 1
                commit(storage, txn)
            posting.withdraw()
            latencies.append(1000 * (time.perf_counter() - started))
    return latencies, fallbacks


def run_lab(store: ob.Store, writers: int, commits: int, runs: int) -> list[dict[str, Any]]:
    ctx = mp.get_context("spawn")
    out = []
    for r in range(runs):
        uri = ob.build_table(store, f"lab{r}", 10)
        rv = ob._latest_version(store, uri)
        before = ob._fragment_count(store, uri)
        start, done = ctx.Barrier(writers + 1), ctx.Event()
        with ctx.Pool(writers + 1, initializer=_init, initargs=(start, done)) as pool:
            carrier = pool.apply_async(_carrier, ((store, uri),))
            results = pool.map(_writer, [(store, uri, commits)] * writers, chunksize=1)
            done.set()
            carrier_versions = carrier.get()
        lat = sorted(x for latencies, _ in results for x in latencies)
        landed = ob._fragment_count(store, uri) - before
        row: dict[str, Any] = {
            "store": store.name,
            "writers": writers,
            "commits": len(lat),
            "p50_ms": ob._pct(lat, 0.50),
            "p99_ms": ob._pct(lat, 0.99),
            "max_ms": lat[-1],
            "fallbacks": sum(f for _, f in results),
            "versions": ob._latest_version(store, uri) - rv,
            "carrier_versions": carrier_versions,
            "unaccounted": landed - len(lat) - carrier_versions,
        }
        out.append(row)
        print(
            f"{store.name} run {r}: p50 {row['p50_ms']:.0f} ms, p99 {row['p99_ms']:.0f} ms "
            f"(p99 - p50 {row['p99_ms'] - row['p50_ms']:.0f}), {row['versions']} versions "
            f"({carrier_versions} by the carrier), {row['fallbacks']} fallbacks, "
            f"unaccounted {row['unaccounted']}",
            flush=True,
        )
        ob._drop(store, uri)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="gcs", choices=("s3", "azure", "gcs"))
    parser.add_argument("--delay-ms", type=float, default=25.0)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--commits", type=int, default=8)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ob.REPO / "benchmarks" / "results")
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory() as work,
        ob.started_stores([args.store], args.delay_ms, Path(work)) as stores,
    ):
        store = stores[-1]  # the delayed one
        rows = run_lab(store, args.writers, args.commits, args.runs)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rendezvous_lab.json").write_text(json.dumps(rows, indent=2))
    return 0 if all(r["unaccounted"] == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
