"""Render a benchmarks results.json as the Markdown tables of docs/performance.md.

python -m benchmarks.report [benchmarks/results/results.json]
python -m benchmarks.report benchmarks/results/object_stores.json   # the object-store tables
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
    """The Markdown tables for one results.json (or object_stores.json)."""
    if "stores" in results:
        return render_object_stores(results)
    if "append_latency" not in results:  # python -m benchmarks.cleanup --json
        return "\n".join(render_cleanup(results.get("cleanup", []))) + "\n"
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
    out += ["", "| case | lists | reads | writes | other | bytes read | Lance (digest §8) |"]
    out.append("|---|---:|---:|---:|---|---:|---|")
    for r in results["storage_ops"]:
        lance = r["lance_expected"]
        other = ", ".join(f"{n} {m}" for m, n in sorted(r.get("other", {}).items())) or "none"
        out.append(
            f"| k = {r['k']} | {r['lists']} | {r['reads']} | {r['writes']} | {other} | "
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
    if results.get("cleanup"):
        out += ["", *render_cleanup(results["cleanup"])]
    return "\n".join(out) + "\n"


def render_cleanup(rows: list[dict[str, Any]]) -> list[str]:
    """The cleanup table (workload 7, ``benchmarks/cleanup.py``): seconds to delete the
    orphans per engine (medians of the timed runs), the ratio, objects each deleted, and
    whether both left the same files. A row measured for one engine only shows n/a for
    the other."""
    out = [
        "Cleanup of orphan files (seconds, medians of the timed runs; ratio txn_engine / "
        "pylance, below 1 is faster):",
        "",
        "| store | orphans | runs | pylance s | txn_engine s | ratio | deleted (pylance / "
        "txn_engine) | same files left |",
        "|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        same = r.get("same_files_left")
        out.append(
            f"| {r['store']} | {r['orphans']:,} | {r.get('runs', 1)} | "
            f"{_num(r.get('pylance_s'), '.2f')} | {_num(r.get('txn_engine_s'), '.2f')} | "
            f"{_num(r.get('ratio'), '.2f')} | {_num(r.get('pylance_deleted'), ',')} / "
            f"{_num(r.get('txn_engine_deleted'), ',')} | "
            f"{'n/a' if same is None else ('yes' if same else 'NO')} |"
        )
    return out


#: Issue 14's targets: (name, test over one store's results) -- see docs/performance.md.
WARM_VS_PYLANCE = 0.5
WARM_VS_FLOOR = 1.3
COLD_VS_PYLANCE = 0.7
CONTENTION_VS_PYLANCE = 1.5
COMMITTER_VS_PYLANCE = 5.0
LOCAL_WARM10_VS_FLOOR = 2.0


def _cell(x: dict[str, Any]) -> str:
    return (
        f"{x['commits_per_s']:.1f} ({x['p50_ms']:.0f}/{x['p99_ms']:.0f}; {x['failures']}"
        + (f"; {x['unaccounted']:+d} unaccounted" if x.get("unaccounted") else "")
        + ")"
    )


def _requests(row: dict[str, Any]) -> str:
    """``pylance / txn_engine`` request counts of one timed commit, where a proxy saw them."""
    p, t = row.get("pylance_requests"), row.get("txn_engine_requests")
    if not p and not t:
        return "n/a"
    return f"{len(p or [])} / {len(t or [])}"


def floor_of(entry: dict[str, Any], row: dict[str, Any]) -> float:
    """The floor a commit is held to: one create-if-absent of a manifest of its size,
    measured next to it (``floor_same_size_ms``; results of older runs: the store's 1 KiB
    floor)."""
    same = row.get("floor_same_size_ms")
    return float(same) if same else float(entry["floor"]["put_if_absent_ms"])


def targets(entry: dict[str, Any]) -> list[tuple[str, float, float, bool]]:
    """(target, measured, bound, met) for one store's results: latency targets are upper
    bounds on ratios, throughput targets lower bounds."""
    out: list[tuple[str, float, float, bool]] = []
    local = entry["kind"] == "local"
    for r in entry.get("append_latency", []):
        name = f"{r['mode']} {r['fragments']:,}"
        floor = floor_of(entry, r)
        if local:
            out.append((f"{name}: txn_engine / pylance", r["ratio"], 1.0, r["ratio"] <= 1.0))
            if r["mode"] == "warm" and r["fragments"] == min(
                x["fragments"] for x in entry.get("append_latency", [])
            ):
                ratio = r["txn_engine_ms"] / floor
                bound = LOCAL_WARM10_VS_FLOOR
                out.append((f"{name}: txn_engine / floor", ratio, bound, ratio <= bound))
        elif r["mode"] == "warm":
            out.append(
                (f"{name}: / pylance", r["ratio"], WARM_VS_PYLANCE, r["ratio"] <= WARM_VS_PYLANCE)
            )
            ratio = r["txn_engine_ms"] / floor
            out.append((f"{name}: / floor", ratio, WARM_VS_FLOOR, ratio <= WARM_VS_FLOOR))
        else:
            bound = COLD_VS_PYLANCE
            out.append((f"{name}: / pylance", r["ratio"], bound, r["ratio"] <= bound))
    for r in entry.get("contention", []):
        if "throughput_ratio" not in r:
            continue
        bound = 1.0 if local else CONTENTION_VS_PYLANCE
        ok = r["throughput_ratio"] >= bound and r["txn_engine"]["failures"] == 0
        name = f"{r['processes']} procs {r['read_version']}: commits/s vs pylance, 0 failed"
        out.append((name, r["throughput_ratio"], bound, ok))
    th = entry.get("threads")
    if th and "committer_ratio" in th:
        ok = th["committer_ratio"] >= COMMITTER_VS_PYLANCE and th["committer"]["failures"] == 0
        out.append(
            (
                f"{th['threads']} threads Committer vs pylance",
                th["committer_ratio"],
                COMMITTER_VS_PYLANCE,
                ok,
            )
        )
    return out


def summary_table(results: dict[str, Any]) -> list[str]:
    """One row per store: the ratios issue 14 sets targets for (10-fragment Appends, the
    lowest contention ratio, failed commits, the 16-thread Committer)."""
    out = [
        "| store | floor ms | warm 10 vs pylance | warm 10 vs floor | cold 10 vs pylance | "
        "lowest contention ratio | failed (pylance / txn_engine) | unaccounted | "
        "Committer vs pylance |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for entry in results["stores"]:
        rows = {(r["fragments"], r["mode"]): r for r in entry.get("append_latency", [])}
        if not rows:
            continue
        small = min(f for f, _ in rows)
        warm, cold = rows[(small, "warm")], rows[(small, "cold")]
        floor = floor_of(entry, warm)
        cells = [r for r in entry.get("contention", []) if "throughput_ratio" in r]
        lowest = min((r["throughput_ratio"] for r in cells), default=None)
        failed = (
            f"{sum(r['pylance']['failures'] for r in cells)} / "
            f"{sum(r['txn_engine']['failures'] for r in cells)}"
        )
        unaccounted = sum(
            abs(r[e].get("unaccounted", 0)) for r in cells for e in ("pylance", "txn_engine")
        )
        th = entry.get("threads") or {}
        out.append(
            f"| {entry['store']} | {floor:.1f} | {warm['ratio']:.2f} | "
            f"{warm['txn_engine_ms'] / floor:.2f} | {cold['ratio']:.2f} | "
            f"{_num(lowest, '.2f')} | {failed} | {unaccounted} | "
            f"{_num(th.get('committer_ratio'), '.2f')} |"
        )
    return out


def render_object_stores(results: dict[str, Any]) -> str:
    """The Markdown tables for one object_stores.json: a summary, then per store the floor,
    Append latency, contention, threads, backoff schedules if compared, and the targets met
    or missed."""
    out: list[str] = [*summary_table(results), ""]
    for entry in results["stores"]:
        floor = entry["floor"]
        what = "fsynced exclusive create" if entry["kind"] == "local" else "conditional PUT"
        out += [
            f"#### {entry['store']}",
            "",
            f"Floor: one {what} {floor['put_if_absent_ms']:.2f} ms, one GET "
            f"{floor['get_ms']:.2f} ms (medians)."
            + (
                f" A LIST and a conditional PUT sent together (a warm commit's "
                f"requests alone): {floor['together_ms']:.2f} ms."
                if "together_ms" in floor
                else ""
            ),
            "",
            "| fragments | mode | pylance ms | txn_engine ms | ratio | x 1 KiB floor "
            "| manifest KiB | same-size floor ms | x same-size floor | requests |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in entry.get("append_latency", []):
            size = r.get("manifest_bytes")
            out.append(
                f"| {r['fragments']:,} | {r['mode']} | {r['pylance_ms']:.1f} | "
                f"{r['txn_engine_ms']:.1f} | {r['ratio']:.2f} | "
                f"{r['txn_engine_ms'] / floor['put_if_absent_ms']:.2f} | "
                f"{_num(None if size is None else size / 1024, '.1f')} | "
                f"{_num(r.get('floor_same_size_ms'), '.1f')} | "
                f"{r['txn_engine_ms'] / floor_of(entry, r):.2f} | {_requests(r)} |"
            )
        for r in entry.get("append_latency", [])[:2]:
            if r.get("txn_engine_requests") and r.get("pylance_requests"):
                out.append(
                    f"\nRequests of one {r['mode']} commit ({r['fragments']:,} fragments): "
                    f"pylance {', '.join(r['pylance_requests'])}; txn_engine "
                    f"{', '.join(r['txn_engine_requests'])}."
                )
        out += [
            "",
            "| processes | read version | pylance | txn_engine | attempts | longest sleep ms "
            "| ratio |",
            "|---:|---|---|---|---:|---:|---:|",
        ]
        for r in entry.get("contention", []):
            p, t = r.get("pylance"), r["txn_engine"]
            out.append(
                f"| {r['processes']} | {r['read_version']} | {_cell(p) if p else 'n/a'} | "
                f"{_cell(t)} | {_num(t.get('attempts_per_commit'), '.2f')} | "
                f"{_num(t.get('max_sleep_ms'), '.0f')} | {_num(r.get('throughput_ratio'), '.2f')} |"
            )
        th = entry.get("threads")
        if th:
            committer = (
                _cell(th["committer"]) + f", {th['committer'].get('versions', 'n/a')} versions"
                if "committer" in th
                else "n/a (no `txn_engine.Committer` in this build)"
            )
            out += [
                "",
                f"{th['threads']} threads of one process: pylance {_cell(th['pylance'])}; "
                f"txn_engine `commit` {_cell(th['txn_engine'])} (ratio "
                f"{th['throughput_ratio']:.2f}); `Committer` {committer}.",
            ]
        if entry.get("backoff"):
            out += [
                "",
                "Backoff schedules (txn_engine only, same store, same run):",
                "",
                "| schedule | processes | read version | commits/s (p50/p99; failed) | attempts "
                "| longest sleep ms | commits / versions |",
                "|---|---:|---|---|---:|---:|---|",
            ]
            for r in entry["backoff"]:
                t = r["txn_engine"]
                out.append(
                    f"| {r['policy']} | {r['processes']} | {r['read_version']} | {_cell(t)} | "
                    f"{_num(t.get('attempts_per_commit'), '.2f')} | "
                    f"{_num(t.get('max_sleep_ms'), '.0f')} | "
                    f"{t.get('commits', '-')} / {t.get('versions', '-')} |"
                )
        checks = targets(entry)
        missed = [c for c in checks if not c[3]]
        out += ["", f"Targets met: {len(checks) - len(missed)} of {len(checks)}."]
        for name, measured, bound, _ in missed:
            out.append(f"- missed: {name} = {measured:.2f} (target {bound:g})")
        out.append("")
    out.append(
        "Cells: commits/s (p50/p99 ms; failed commits). Ratio: txn_engine / pylance (latency: "
        "below 1 is faster; throughput: above 1 is more)."
    )
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
        help="the results file written by python -m benchmarks.run (results.json, or "
        "object_stores.json from --stores)",
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    sys.stdout.write(render(json.loads(Path(args.results).read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
