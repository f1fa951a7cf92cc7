"""A fault soak on the object-store emulators: ``txn-engine stress`` runs, seed after seed.

Each run is :func:`txn_engine.apps.stress.run_stress` on a fresh table: ``--writers``
processes of ``--commits`` operations each (the default mix), with every storage fault kind
but ``latency`` injected at ``--fault-rate``. A carrier runs beside the writers on every
third seed. Data files are pylance's on odd seeds and synthetic on even ones. GCS is always
synthetic: fake-gcs-server does not take pylance's uploads. Each run ends in the stress
verdict: the history checker holds, every acknowledged commit landed exactly once, and
pylance reads the expected rows.

The stores are those of :mod:`benchmarks.object_stores` (moto S3, azurite, fake-gcs-server,
started here on 127.0.0.1). ``--delay-ms`` puts a loopback proxy that holds each request
back that long in front of every store. ``--backend fsspec`` makes the commits go through
s3fs / adlfs / gcsfs, while pylance keeps its own client.

    python -m benchmarks.soak --seeds 1-6 --writers 8 --commits 30 --fault-rate 0.3
    python -m benchmarks.soak --stores s3,gcs --backend fsspec --delay-ms 25 --json soak.json

One line per run goes to stderr. The exit code is 1 when any run's verdict failed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

STORES = ("s3", "azure", "gcs")


def _seeds(text: str) -> list[int]:
    """``1-6`` or ``1,4,9`` (or both: ``1-3,7``)."""
    seeds: list[int] = []
    for part in text.split(","):
        low, dash, high = part.partition("-")
        if dash:
            seeds.extend(range(int(low), int(high) + 1))
        else:
            seeds.append(int(part))
    if not seeds:
        raise argparse.ArgumentTypeError("no seeds given")
    return seeds


def _stores(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = sorted(set(names) - set(STORES))
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"stores are {', '.join(STORES)}; got {text!r}")
    return names


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.soak",
        description="txn-engine stress runs with storage faults on the object-store emulators",
    )
    parser.add_argument("--stores", type=_stores, default=list(STORES), help="s3,azure,gcs")
    parser.add_argument("--seeds", type=_seeds, default=[1, 2, 3], help="e.g. 1-6 or 1,4,9")
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--commits", type=int, default=12, help="operations per writer")
    parser.add_argument("--fault-rate", type=float, default=0.2)
    parser.add_argument("--backend", choices=("obstore", "fsspec"), default="obstore")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="per request, by proxy")
    parser.add_argument("--json", type=Path, default=None, help="write every run's report")
    return parser


def soak(args: argparse.Namespace, workdir: Path) -> list[dict[str, Any]]:
    """Run the soak ``args`` describe; return one record per run."""
    from benchmarks.object_stores import started_stores
    from txn_engine.apps.stress import run_stress
    from txn_engine.testing.fault_storage import FAULT_KINDS

    kinds = [kind for kind in FAULT_KINDS if kind != "latency"]
    records: list[dict[str, Any]] = []
    with started_stores(args.stores, args.delay_ms, workdir) as stores:
        chosen = [store for store in stores if store.delay_ms == args.delay_ms]
        for seed in args.seeds:
            for store in chosen:
                options = dict(store.options or {})
                started = time.monotonic()
                report = run_stress(
                    store.uri(f"soak{seed}"),
                    writers=args.writers,
                    commits=args.commits,
                    fault_rate=args.fault_rate,
                    fault_kinds=kinds,
                    seed=seed,
                    synthetic=seed % 2 == 0 or store.kind == "gcs",
                    storage_options={**options, "txn_engine_backend": args.backend},
                    lance_storage_options=options,
                    progress=None,
                    carrier=seed % 3 == 0,
                )
                seconds = time.monotonic() - started
                record = {
                    "store": store.name,
                    "seed": seed,
                    "backend": args.backend,
                    "seconds": round(seconds, 1),
                    "report": report.to_json(),
                }
                records.append(record)
                verdict = "ok" if report.ok else f"FAILED ({len(report.findings)} findings)"
                print(
                    f"[soak] {store.name} seed {seed}: {verdict}, "
                    f"{report.committed} of {report.commits_requested} committed, "
                    f"{sum(report.faults_injected.values())} faults injected, {seconds:.1f} s",
                    file=sys.stderr,
                    flush=True,
                )
                for finding in report.findings[:10]:
                    print(f"[soak]   - {finding}", file=sys.stderr, flush=True)
    return records


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="txn-engine-soak-") as workdir:
        records = soak(args, Path(workdir))
    failed = [r for r in records if not r["report"]["ok"]]
    print(
        f"[soak] {len(records)} runs, {len(failed)} failed "
        f"({args.writers} writers x {args.commits} operations, fault rate {args.fault_rate:g}, "
        f"{args.backend}, {args.delay_ms:g} ms per request)",
        file=sys.stderr,
    )
    if args.json is not None:
        args.json.write_text(json.dumps(records, indent=2, sort_keys=True))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
