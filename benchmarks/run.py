"""Benchmarks of txn_engine against pylance 14.0.2, in one run, on this machine.

    python -m benchmarks.run [--quick] [--out benchmarks/results]

For every figure both medians are printed with the ratio txn_engine / pylance (< 1 means
txn_engine is faster). Results go to ``<out>/results.json`` and a plot of commit latency
against table size to ``<out>/append_latency.png``. See docs/performance.md.

Workloads:
1. single-writer Append of one fragment on tables of 10 .. 100,000 fragments, cold (from a
   URI) and warm (pylance: a LanceDataset handle; txn_engine: ``base=`` an opened Dataset);
2. contention: P writer processes x C Appends, fresh and stale read versions;
3. conflict-check cost: one commit whose read version is k versions behind;
4. storage operations per commit (RecordingStorage), uncontended and k behind;
5. peak memory (max RSS of a fresh process) committing to the largest table;
6. Spark reads through txn_lance vs pylance's to_table (``benchmarks/spark_read.py``; a
   20,000-row smoke under ``--quick``).
7. cleanup: deleting 100,000 orphan files on local disk (and 10,000 on moto S3) against
   pylance's ``cleanup_old_versions`` (``benchmarks/cleanup.py``; 2,000 local under
   ``--quick``).

``--stores s3,azure,gcs,local`` (or ``all``) runs the object-store benchmarks instead
(``benchmarks/object_stores.py``: emulators on loopback, each also behind a per-request
delay; with ``--quick`` a seconds-long smoke on moto).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa

import txn_engine as te
from txn_engine.commit import commit
from txn_engine.dataset import Dataset
from txn_engine.format.schema import arrow_to_lance_fields
from txn_engine.storage import open_storage
from txn_engine.storage.recording import RecordingStorage

SCHEMA = pa.schema([pa.field("a", pa.int64())])


def _one_fragment(uri: str) -> tuple[Any, te.Fragment]:
    (meta,) = lance.fragment.write_fragments(pa.table({"a": [1]}, schema=SCHEMA), uri)
    return meta, te.Fragment.from_lance_json(meta.to_json())


def build_table(root: Path, n_fragments: int) -> str:
    """A dataset of ``n_fragments`` one-row fragments sharing one data file."""
    uri = str(root / f"t{n_fragments}")
    _, frag = _one_fragment(uri)
    frags = tuple(te.Fragment(0, frag.files, 1) for _ in range(n_fragments))
    commit(uri, te.Transaction(0, te.Overwrite(frags, arrow_to_lance_fields(SCHEMA))))
    return uri


def _median_ms(samples: list[float]) -> float:
    return 1000 * statistics.median(samples)


def _append_latency(uri: str, runs: int, warm: bool) -> tuple[float, float]:
    """Median seconds per one-fragment Append: (pylance, txn_engine), each on its own copy."""
    p_uri, t_uri = uri + "-p", uri + "-t"
    shutil.copytree(uri, p_uri)
    shutil.copytree(uri, t_uri)
    meta, frag = _one_fragment(p_uri)
    shutil.copytree(Path(p_uri) / "data", Path(t_uri) / "data", dirs_exist_ok=True)
    p_samples, t_samples = [], []
    ds = lance.dataset(p_uri)
    for i in range(runs + 1):
        start = time.perf_counter()
        if warm:
            ds = lance.LanceDataset.commit(
                ds, lance.LanceOperation.Append([meta]), read_version=ds.version
            )
        else:
            version = ds.version
            ds = lance.LanceDataset.commit(
                p_uri, lance.LanceOperation.Append([meta]), read_version=version
            )
        if i:
            p_samples.append(time.perf_counter() - start)
    storage = open_storage(t_uri)
    base = Dataset.open(storage)
    version = base.version
    for i in range(runs + 1):
        if warm:
            start = time.perf_counter()
            result = commit(storage, te.Transaction(base.version, te.Append((frag,))), base=base)
            elapsed = time.perf_counter() - start
            base = Dataset.open(storage, version=result.version)
        else:
            start = time.perf_counter()
            result = commit(t_uri, te.Transaction(version, te.Append((frag,))))
            elapsed = time.perf_counter() - start
            version = result.version
        if i:
            t_samples.append(elapsed)
    shutil.rmtree(p_uri)
    shutil.rmtree(t_uri)
    return statistics.median(p_samples), statistics.median(t_samples)


_START: Any = None  # a multiprocessing Barrier shared by one pool's workers


def _init_worker(barrier: Any) -> None:
    global _START
    _START = barrier


def _contention_worker(args: tuple[str, str, int, bool, int]) -> dict[str, Any]:
    engine, uri, n, stale, read_version = args
    meta, frag = _one_fragment(uri)
    _START.wait()  # every writer starts committing at once (start-up excluded)
    lat: list[float] = []
    failures = 0
    attempts = 0
    first = time.time()
    for _ in range(n):
        start = time.perf_counter()
        try:
            if engine == "pylance":
                rv = read_version if stale else lance.dataset(uri).version
                lance.LanceDataset.commit(uri, lance.LanceOperation.Append([meta]), read_version=rv)
            else:
                rv = read_version if stale else Dataset.open(uri).version
                result = commit(uri, te.Transaction(rv, te.Append((frag,))))
                attempts += result.attempts
            lat.append(time.perf_counter() - start)
        except Exception:
            failures += 1
    return {
        "latencies": lat,
        "failures": failures,
        "attempts": attempts,
        "first": first,
        "last": time.time(),
    }


def _contention_run(
    pool: Any, uri: str, engine: str, procs: int, per: int, stale: bool
) -> dict[str, Any]:
    rv = Dataset.open(uri).version
    results = pool.map(_contention_worker, [(engine, uri, per, stale, rv)] * procs, chunksize=1)
    # throughput over the span in which commits ran (all writers start at one barrier)
    elapsed = max(r["last"] for r in results) - min(r["first"] for r in results)
    lat = sorted(x for r in results for x in r["latencies"])
    ok = len(lat)
    return {
        "commits_per_s": ok / elapsed,
        "p50_ms": 1000 * lat[len(lat) // 2] if lat else float("nan"),
        "p99_ms": 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else float("nan"),
        "failures": sum(r["failures"] for r in results),
        # pylance does not report its attempts
        "attempts_per_commit": (
            sum(r["attempts"] for r in results) / ok if ok and engine == "txn_engine" else None
        ),
    }


def _contention(
    root: Path, engine: str, procs: int, per: int, stale: bool, runs: int
) -> dict[str, Any]:
    """One warm-up and ``runs`` timed runs (each on a new 10-fragment table) in one pool of
    ``procs`` spawned processes: medians of throughput and latency percentiles, failures
    summed over the timed runs."""
    ctx = mp.get_context("spawn")
    samples = []
    with ctx.Pool(procs, initializer=_init_worker, initargs=(ctx.Barrier(procs),)) as pool:
        for r in range(runs + 1):
            uri = build_table(root / f"c{engine}{procs}{int(stale)}r{r}", 10)
            sample = _contention_run(pool, uri, engine, procs, per, stale)
            shutil.rmtree(uri)
            if r:
                samples.append(sample)
    out: dict[str, Any] = {
        key: statistics.median(s[key] for s in samples)
        for key in ("commits_per_s", "p50_ms", "p99_ms")
    }
    attempts = [s["attempts_per_commit"] for s in samples if s["attempts_per_commit"] is not None]
    out["attempts_per_commit"] = statistics.median(attempts) if attempts else None
    out["failures"] = sum(s["failures"] for s in samples)
    out["runs"] = [s["commits_per_s"] for s in samples]
    return out


def _behind(root: Path, k: int, runs: int) -> tuple[float, float, float, float]:
    """Seconds for one Append k versions behind and for a fresh one (pylance, txn_engine)."""
    out = []
    for engine in ("pylance", "txn_engine"):
        behind, fresh = [], []
        for r in range(runs):
            uri = build_table(root / f"k{k}{engine}{r}", 10)
            meta, frag = _one_fragment(uri)
            v0 = Dataset.open(uri).version
            for _ in range(k):
                commit(uri, te.Transaction(Dataset.open(uri).version, te.Append((frag,))))
            for mode, rv in (("behind", v0), ("fresh", Dataset.open(uri).version)):
                start = time.perf_counter()
                if engine == "pylance":
                    lance.LanceDataset.commit(
                        uri, lance.LanceOperation.Append([meta]), read_version=rv
                    )
                else:
                    commit(uri, te.Transaction(rv, te.Append((frag,))))
                (behind if mode == "behind" else fresh).append(time.perf_counter() - start)
            shutil.rmtree(uri)
        out += [statistics.median(behind), statistics.median(fresh)]
    return out[0], out[1], out[2], out[3]


def _storage_ops(root: Path, k: int) -> dict[str, Any]:
    uri = build_table(root / f"ops{k}", 10)
    _, frag = _one_fragment(uri)
    v0 = Dataset.open(uri).version
    for _ in range(k):
        commit(uri, te.Transaction(Dataset.open(uri).version, te.Append((frag,))))
    rec = RecordingStorage(open_storage(uri))
    commit(rec, te.Transaction(v0, te.Append((frag,))))
    counts = dict(rec.counts)
    return {
        "k": k,
        "lists": counts.get("list", 0),
        "reads": counts.get("get", 0) + counts.get("get_range", 0),
        "writes": counts.get("put", 0) + counts.get("put_if_absent", 0),
        "other": {
            m: c
            for m, c in counts.items()
            if m not in ("list", "get", "get_range", "put", "put_if_absent")
        },
        "bytes_read": rec.bytes_read,
        "lance_expected": {"lists": 1, "reads": 2 * k, "writes": 2},
    }


_MEM_SCRIPT = """
import sys, lance, pyarrow as pa
import txn_engine as te
from txn_engine.commit import commit
from txn_engine.dataset import Dataset
engine, uri = sys.argv[1], sys.argv[2]
def hwm():
    # VmHWM: peak RSS of this process image (ru_maxrss would include the parent's at fork)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
(meta,) = lance.fragment.write_fragments(pa.table({"a": [1]}), uri)
before = hwm()
if engine == "pylance":
    v = lance.dataset(uri).version
    lance.LanceDataset.commit(uri, lance.LanceOperation.Append([meta]), read_version=v)
else:
    v = Dataset.open(uri).version
    commit(uri, te.Transaction(v, te.Append((te.Fragment.from_lance_json(meta.to_json()),))))
print(before, hwm())
"""


def _peak_memory(uri: str) -> dict[str, float]:
    out = {}
    for engine in ("pylance", "txn_engine"):
        copy = uri + f"-mem-{engine}"
        shutil.copytree(uri, copy)
        res = subprocess.run(
            [sys.executable, "-c", _MEM_SCRIPT, engine, copy],
            capture_output=True,
            text=True,
            check=True,
        )
        before, after = (int(x) for x in res.stdout.split())
        out[engine] = after / 1024  # MiB (VmHWM is in KiB)
        out[f"{engine}_delta"] = (after - before) / 1024
        shutil.rmtree(copy)
    return out


def _ratio(t: float, p: float) -> float:
    return t / p if p else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (CI smoke run)")
    parser.add_argument("--out", default="benchmarks/results")
    from benchmarks import object_stores

    parser.add_argument(
        "--stores",
        type=object_stores.parse_stores,
        default=None,
        help="run the object-store benchmarks on these stores (s3,azure,gcs,local or all)",
    )
    object_stores.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.stores is not None:
        with tempfile.TemporaryDirectory() as tmp:
            object_stores.run(
                ["s3"] if args.quick else args.stores,
                quick=args.quick,
                delay_ms=args.delay_ms,
                out_dir=Path(args.out),
                workdir=Path(tmp),
                compare_backoff=args.compare_backoff,
                plots_dir=Path(args.plots) if args.plots else None,
            )
        print(f"results: {Path(args.out) / 'object_stores.json'}")
        return 0
    sizes = [10, 100] if args.quick else [10, 1_000, 10_000, 100_000]
    runs = 3 if args.quick else 7
    procs = [1, 2] if args.quick else [1, 2, 4, 8]
    per = 5 if args.quick else 50
    ks = [10] if args.quick else [10, 100, 1_000]
    contention_runs = 2 if args.quick else 5
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"quick": args.quick, "runs": runs}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        print("1. Append latency (median ms)          pylance  txn_engine  ratio")
        latency = []
        for n in sizes:
            uri = build_table(root, n)
            for warm in (False, True):
                p, t = _append_latency(uri, runs, warm)
                row = {
                    "fragments": n,
                    "mode": "warm" if warm else "cold",
                    "pylance_ms": 1000 * p,
                    "txn_engine_ms": 1000 * t,
                    "ratio": _ratio(t, p),
                }
                latency.append(row)
                print(
                    f"   {n:>7} fragments {row['mode']:<5}      {1000 * p:8.2f}  {1000 * t:10.2f}"
                    f"  {row['ratio']:5.2f}"
                )
        results["append_latency"] = latency
        results["peak_memory_mib"] = _peak_memory(build_table(root / "mem", sizes[-1]))
        print(f"5. peak RSS at {sizes[-1]} fragments (MiB): {results['peak_memory_mib']}")
        print("2. contention (commits/s, p50/p99 ms, failures)")
        contention = []
        for stale in (False, True):
            for n in procs:
                row: dict[str, Any] = {
                    "processes": n,
                    "read_version": "stale" if stale else "fresh",
                }
                for engine in ("pylance", "txn_engine"):
                    row[engine] = _contention(
                        root / f"{engine}{n}{stale}", engine, n, per, stale, contention_runs
                    )
                row["throughput_ratio"] = _ratio(
                    row["txn_engine"]["commits_per_s"], row["pylance"]["commits_per_s"]
                )
                contention.append(row)
                p, t = row["pylance"], row["txn_engine"]
                print(
                    f"   {n} procs {row['read_version']:<5} pylance {p['commits_per_s']:6.1f}/s "
                    f"({p['p50_ms']:.1f}/{p['p99_ms']:.1f}, {p['failures']} failed)  txn_engine "
                    f"{t['commits_per_s']:6.1f}/s ({t['p50_ms']:.1f}/{t['p99_ms']:.1f}, "
                    f"{t['failures']} failed, {t['attempts_per_commit'] or 0:.2f} attempts/commit)"
                    f"  ratio {row['throughput_ratio']:.2f}"
                )
        results["contention"] = contention
        print("3. conflict-check cost per intervening Append (us)")
        behind = []
        for k in ks:
            pb, pf, tb, tf = _behind(root, k, 3 if args.quick else 5)
            row = {
                "k": k,
                "pylance_us_per_version": 1e6 * (pb - pf) / k,
                "txn_engine_us_per_version": 1e6 * (tb - tf) / k,
                "pylance_ms": 1000 * pb,
                "txn_engine_ms": 1000 * tb,
            }
            behind.append(row)
            print(
                f"   k={k:<5} pylance {row['pylance_us_per_version']:8.1f}  txn_engine "
                f"{row['txn_engine_us_per_version']:8.1f}"
            )
        results["conflict_check"] = behind
        results["storage_ops"] = [_storage_ops(root, k) for k in (0, *ks[:1])]
        for row in results["storage_ops"]:
            print(
                f"4. storage ops, k={row['k']}: lists {row['lists']} reads {row['reads']} "
                f"writes {row['writes']} (Lance: {row['lance_expected']})"
            )
        from benchmarks import spark_read

        print("6. Spark reads (txn_lance) vs pylance to_table, rows/s")
        results["spark_read"] = spark_read.run(
            rows=20_000 if args.quick else 10_000_000, runs=1 if args.quick else 2, root=tmp
        )
        print(spark_read.describe(results["spark_read"]))
        from benchmarks import cleanup as cleanup_benchmark

        print("7. cleanup of orphan files (seconds)")
        results["cleanup"] = cleanup_benchmark.run(root / "cleanup", quick=args.quick)
        for row in results["cleanup"]:
            print(cleanup_benchmark.describe(row))
    (out_dir / "results.json").write_text(json.dumps(results, indent=2))
    _plot(results["append_latency"], out_dir / "append_latency.png")
    print(f"results: {out_dir / 'results.json'}, plot: {out_dir / 'append_latency.png'}")
    return 0


def _plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for mode in ("cold", "warm"):
        sel = [r for r in rows if r["mode"] == mode]
        xs = [r["fragments"] for r in sel]
        ax.plot(xs, [r["pylance_ms"] for r in sel], "o--", label=f"pylance 14.0.2 ({mode})")
        ax.plot(xs, [r["txn_engine_ms"] for r in sel], "s-", label=f"txn_engine ({mode})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("fragments in table")
    ax.set_ylabel("median Append commit latency (ms)")
    ax.set_title("One-fragment Append, local disk")
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
