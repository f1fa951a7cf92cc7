"""Render a benchmarks results.json as the Markdown tables of docs/performance.md.

python -m benchmarks.report [benchmarks/results/results.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any


def _num(x: Any, fmt: str) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return format(x, fmt)


def render(results: dict[str, Any]) -> str:
    """The Markdown tables for one results.json."""
    out = ["| fragments | mode | pylance ms | txn_engine ms | ratio |", "|---:|---|---:|---:|---:|"]
    for r in results["append_latency"]:
        out.append(
            f"| {r['fragments']:,} | {r['mode']} | {r['pylance_ms']:.2f} | "
            f"{r['txn_engine_ms']:.2f} | {r['ratio']:.2f} |"
        )
    out += [
        "",
        "Contention (medians of the timed runs: commits/s; p50/p99 ms; failed commits summed; "
        "txn_engine's attempts per commit):",
        "",
        "| processes | read version | pylance | txn_engine | attempts | ratio |",
        "|---:|---|---|---|---:|---:|",
    ]
    for r in results["contention"]:
        p, t = r["pylance"], r["txn_engine"]
        out.append(
            f"| {r['processes']} | {r['read_version']} | {p['commits_per_s']:.0f} "
            f"({p['p50_ms']:.1f}/{p['p99_ms']:.0f}; {p['failures']}) | {t['commits_per_s']:.0f} "
            f"({t['p50_ms']:.1f}/{t['p99_ms']:.0f}; {t['failures']}) | "
            f"{_num(t.get('attempts_per_commit'), '.2f')} | {r['throughput_ratio']:.2f} |"
        )
    out += [
        "",
        "Conflict-check cost per intervening Append (µs; one commit k versions behind minus a "
        "fresh one, divided by k):",
        "",
        "| k | pylance | txn_engine |",
        "|---:|---:|---:|",
    ]
    for r in results["conflict_check"]:
        out.append(
            f"| {r['k']:,} | {r['pylance_us_per_version']:.1f} | "
            f"{r['txn_engine_us_per_version']:.1f} |"
        )
    out += ["", "| case | lists | reads | writes | bytes read | Lance (digest §8) |"]
    out.append("|---|---:|---:|---:|---:|---|")
    for r in results["storage_ops"]:
        lance = r["lance_expected"]
        out.append(
            f"| k = {r['k']} | {r['lists']} | {r['reads']} | {r['writes']} | "
            f"{r['bytes_read']:,} | {lance['lists']} list, {lance['reads']} reads, "
            f"{lance['writes']} writes |"
        )
    mem = results["peak_memory_mib"]
    out += [
        "",
        f"Peak memory (VmHWM) committing one Append to the largest table: pylance "
        f"{mem['pylance']:.0f} MiB (+{mem['pylance_delta']:.0f} MiB for the commit), txn_engine "
        f"{mem['txn_engine']:.0f} MiB (+{mem['txn_engine_delta']:.0f} MiB).",
    ]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.report",
        description="Render a benchmarks results.json as the Markdown tables of "
        "docs/performance.md (printed to stdout).",
    )
    parser.add_argument(
        "results",
        nargs="?",
        default="benchmarks/results/results.json",
        help="the results file written by python -m benchmarks.run",
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    sys.stdout.write(render(json.loads(Path(args.results).read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
