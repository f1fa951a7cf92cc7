"""A carrier against uncoordinated writers: the contention tail (issue 14, item 4).

    python -m benchmarks.rendezvous_lab [--store gcs] [--delay-ms 25] [--writers 8]
                                        [--commits 8] [--runs 2] [--stale]
                                        [--modes carrier,seen,default,hosted] [--hosts 2]

Each round, on one delayed store: ``--writers`` processes make ``--commits`` Appends each
as in the contention cell of :mod:`benchmarks.object_stores` (open the latest version, then
commit; ``--stale``: every commit planned at the starting version), all starting at one
barrier, in three modes (``--modes``): with a :class:`txn_engine.Carrier` running in one more
process (started before the clock) and the writers told of it
(``RetryPolicy(wait_for_carrier=True)``); with the carrier and the default policy (writers
wait for it once they have read one of its versions or its beacon); with the default policy
and no carrier; and (``hosted``, not run unless named) with ``--hosts`` of the writer
processes each running a carrier thread of their own until their last commit. Reported per
run: p50/p99 of the commits (and each writer's latencies), versions created (by a
carrier), manifest creates per commit, failures, and a landed check (fragments added =
acknowledged commits: a carrier adds none of its own).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import tempfile
from pathlib import Path
from typing import Any

import txn_engine as te
from benchmarks import object_stores as ob
from txn_engine.contention.offers import CARRIER_KEY
from txn_engine.format.io import read_transaction_and_manifest
from txn_engine.format.naming import list_versions

_START: Any = None
_DONE: Any = None


def _init(start: Any, done: Any) -> None:
    global _START, _DONE
    _START, _DONE = start, done


def _carrier(args: tuple[ob.Store, str]) -> int:
    """A ``txn_engine.Carrier`` from before the clock until the writers are done; returns
    how many versions it created."""
    store, uri = args
    carrier = te.Carrier(ob._storage(store, uri)).start()
    _START.wait()
    _DONE.wait()
    carrier.close()
    if carrier.error is not None:
        raise carrier.error
    return len(carrier.versions)


def _writer(args: tuple[ob.Store, str, int, int, str, bool, bool]) -> dict[str, Any]:
    """``n`` Appends as in the contention cell (fresh: open the latest, commit from it;
    stale: every commit planned at the starting version). ``host``: this writer's process
    also runs a ``txn_engine.Carrier`` thread, from before the clock until its own last
    commit (it leaves when its writes are done, as a writer that comes and goes would)."""
    store, uri, n, read_version, policy, stale, host = args
    carrier = te.Carrier(ob._storage(store, uri)).start() if host else None
    try:
        out = ob._writer("txn_engine", store, uri, n, stale, read_version, _START.wait, policy)
    finally:
        if carrier is not None:
            carrier.close()
    out["carrier_versions"] = 0 if carrier is None else len(carrier.versions)
    return out


def _probe(store: ob.Store) -> list[float]:
    """The store's round trip under the cell's load: one conditional PUT of 1 KiB (of a new
    name, beside the table) every 0.1 s from the start barrier until the writers are done;
    returns each PUT's ms. It sees the queue of the emulator and the machine's CPU as the
    writers' own requests do, at about 5-8 requests per second of its own."""
    probe = ob._FloorProbe(store, 1024)
    try:
        probe.once()  # the connection, before the clock
        _START.wait()
        samples = []
        while not _DONE.is_set():
            samples.append(1000 * probe.once())
            _DONE.wait(0.1)
        return samples
    finally:
        probe.close()


def _carrier_versions(store: ob.Store, uri: str, since: int) -> int:
    """How many versions after ``since`` a carrier created (their transactions say so)."""
    storage = ob._storage(store, uri)
    count = 0
    for entry in list_versions(storage):
        if entry.version > since:
            pb, _ = read_transaction_and_manifest(storage, entry, None)
            count += CARRIER_KEY in pb.transaction_properties
    return count


#: The lab's modes: (a carrier runs, the writers' policy in ``object_stores.POLICIES``).
MODES = {
    "carrier": (True, "wait-for-carrier"),  # writers told of it: none races it
    "seen": (True, "default"),  # writers not told: they wait once they read its versions
    "default": (False, "default"),  # no carrier started: writers host one when they race
    "racing": (False, "racing"),  # no carrier, none hosted: writers race
    # ``hosts`` of the writer processes each run a carrier thread of their own (not run by
    # default: a measurement of carriers inside the writers, docs/performance.md)
    "hosted": (False, "default"),
}


def run_lab(
    store: ob.Store,
    writers: int,
    commits: int,
    runs: int,
    stale: bool = False,
    modes: tuple[str, ...] = ("carrier", "seen", "default"),
    hosts: int = 2,
    probe: bool = False,
) -> list[dict[str, Any]]:
    """``runs`` rounds of ``modes`` (:data:`MODES`), interleaved. ``probe``: one more
    process times a conditional PUT every 0.1 s while the writers run (:func:`_probe`);
    each row then has ``loaded_round_trip_ms``, the median of its samples."""
    ctx = mp.get_context("spawn")
    out = []
    for r in range(runs):
        for mode in modes:
            uri = ob.build_table(store, f"lab{mode[0]}{r}", 10)
            rv = ob._latest_version(store, uri)
            before = ob._fragment_count(store, uri)
            carried, policy = MODES[mode]
            start, done = ctx.Barrier(writers + int(carried) + int(probe)), ctx.Event()
            processes = writers + 1 + int(probe)
            with ctx.Pool(processes, initializer=_init, initargs=(start, done)) as pool:
                carrier = pool.apply_async(_carrier, ((store, uri),)) if carried else None
                prober = pool.apply_async(_probe, (store,)) if probe else None
                hosted = hosts if mode == "hosted" else 0
                results = pool.map(
                    _writer,
                    [(store, uri, commits, rv, policy, stale, w < hosted) for w in range(writers)],
                    chunksize=1,
                )
                done.set()
                if carrier is not None:
                    carrier.get()
                probed = prober.get() if prober is not None else []
            # read from the table: carriers hosted by the writers report to no one
            carrier_versions = _carrier_versions(store, uri, rv)
            lat = sorted(1000 * x for res in results for x in res["latencies"])
            landed = ob._fragment_count(store, uri) - before
            row: dict[str, Any] = {
                "store": store.name,
                "mode": mode,
                "hosts": hosted,
                "read_version": "stale" if stale else "fresh",
                "writers": writers,
                "commits": len(lat),
                "failures": sum(res["failures"] for res in results),
                "creates_per_commit": sum(res["attempts"] for res in results) / max(1, len(lat)),
                "p50_ms": ob._pct(lat, 0.50),
                "p99_ms": ob._pct(lat, 0.99),
                "max_ms": lat[-1] if lat else float("nan"),
                "versions": ob._latest_version(store, uri) - rv,
                "carrier_versions": carrier_versions,
                "unaccounted": landed - len(lat),
                # the conditional PUT's round trip while the writers ran (ms; probe=True)
                "loaded_round_trip_ms": statistics.median(probed) if probed else None,
                "probe_samples": len(probed),
                # each writer's commit latencies in order (ms): where in a run the tail is.
                # Not rounded: percentiles taken from them must compare exactly with max_ms
                "latencies_ms": [[1000 * x for x in res["latencies"]] for res in results],
            }
            out.append(row)
            print(
                f"{store.name} {mode:8s} {row['read_version']} x{writers} run {r}: "
                f"p50 {row['p50_ms']:.0f} ms, p99 "
                f"{row['p99_ms']:.0f} ms (p99 - p50 {row['p99_ms'] - row['p50_ms']:.0f}), "
                f"{row['versions']} versions ({carrier_versions} by a carrier"
                + (f", {hosted} writers hosting one" if hosted else "")
                + "), "
                f"{row['creates_per_commit']:.2f} creates per commit, {row['failures']} failed, "
                f"unaccounted {row['unaccounted']}"
                + (f", PUT under load {row['loaded_round_trip_ms']:.0f} ms" if probed else ""),
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
    parser.add_argument("--stale", action="store_true", help="plan every commit at the start")
    parser.add_argument(
        "--modes",
        default="carrier,seen,default",
        help=f"comma-separated, of {', '.join(MODES)}",
    )
    parser.add_argument(
        "--hosts", type=int, default=2, help="mode hosted: writer processes with a carrier"
    )
    parser.add_argument("--out", type=Path, default=ob.REPO / "benchmarks" / "results")
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory() as work,
        ob.started_stores([args.store], args.delay_ms, Path(work)) as stores,
    ):
        store = stores[-1]  # the delayed one
        modes = tuple(m for m in args.modes.split(",") if m)
        rows = run_lab(store, args.writers, args.commits, args.runs, args.stale, modes, args.hosts)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rendezvous_lab.json").write_text(json.dumps(rows, indent=2))
    return 0 if all(r["unaccounted"] == 0 and r["failures"] == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
