"""The contention tail across store latencies (issue 14, item 4: 20-100 ms per request).

    python -m benchmarks.tail_sweep [--stores s3,azure,gcs] [--delays 25,50,100]
                                    [--writers 4,8] [--commits 8] [--runs 3]
                                    [--modes default] [--out DIR] [--plot FILE]

For each store and each delay, the store is started behind a loopback proxy that holds every
request for that delay; its round trip is measured (one conditional PUT of 1 KiB, median of
15), then the contention cells of :mod:`benchmarks.rendezvous_lab` run ``--runs`` times each
(``--writers`` processes x ``--commits`` Appends, fresh and stale, in each of ``--modes``),
interleaved. Reported per store, delay, mode and cell: p50, p99 and p99 - p50 in round trips
(the median and the range over the runs; and p99 - p50 of the commits after each writer's
first, the tail of sustained contention), failures and the landed check. If the tail is
bound by the protocol (round trips on the critical path), p99 - p50 in round trips stays
the same as the delay grows; if by the machine (CPU of the writer processes, the emulator),
it shrinks.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import object_stores as ob
from benchmarks.rendezvous_lab import MODES, run_lab


def sweep(
    kinds: list[str],
    delays: list[float],
    writers: list[int],
    commits: int,
    runs: int,
    modes: tuple[str, ...] = ("default",),
) -> list[dict[str, Any]]:
    """One row per store, delay, mode, writers, read version and run (the lab's rows, with
    the delay and the round trip measured on that store)."""
    rows: list[dict[str, Any]] = []
    for kind in kinds:
        for delay in delays:
            with (
                tempfile.TemporaryDirectory() as work,
                ob.started_stores([kind], delay, Path(work)) as stores,
            ):
                store = stores[-1]  # the delayed one
                round_trip = ob.floor(store, 15)["put_if_absent_ms"]
                print(f"{store.name}: round trip {round_trip:.1f} ms", flush=True)
                for run in range(runs):
                    for n in writers:
                        for stale in (False, True):
                            for row in run_lab(store, n, commits, 1, stale, modes, probe=True):
                                row.update(
                                    kind=kind, delay_ms=delay, round_trip_ms=round_trip, run=run
                                )
                                row.update(_later(row.pop("latencies_ms", None) or []))
                                rows.append(row)
    return rows


def _later(per_writer: list[list[float]]) -> dict[str, float]:
    """p50 and p99 (ms) of the commits after each writer's first: the tail of sustained
    contention, without the first race (whose losers wait for a carrier to start)."""
    later = sorted(x for lat in per_writer for x in lat[1:])
    return {"p50_later_ms": ob._pct(later, 0.50), "p99_later_ms": ob._pct(later, 0.99)}


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per store, delay, mode and cell: p50, p99 and p99 - p50 in round trips over the
    runs (median, min, max), failures and unaccounted commits summed."""
    cells: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows:
        key = (row["kind"], row["delay_ms"], row["mode"], row["writers"], row["read_version"])
        cells.setdefault(key, []).append(row)
    out = []
    for (kind, delay, mode, n, rv), runs in sorted(cells.items()):
        rt = runs[0]["round_trip_ms"]
        gaps = [(r["p99_ms"] - r["p50_ms"]) / rt for r in runs]
        out.append(
            {
                "kind": kind,
                "delay_ms": delay,
                "round_trip_ms": rt,
                "mode": mode,
                "writers": n,
                "read_version": rv,
                "runs": len(runs),
                "p50_rt": statistics.median(r["p50_ms"] / rt for r in runs),
                "p99_rt": statistics.median(r["p99_ms"] / rt for r in runs),
                "gap_rt": statistics.median(gaps),
                "gap_rt_min": min(gaps),
                "gap_rt_max": max(gaps),
                # the same after each writer's first commit (sustained contention)
                "gap_later_rt": statistics.median(
                    (r["p99_later_ms"] - r["p50_later_ms"]) / rt for r in runs
                ),
                # the same in round trips measured while the cell ran (a conditional PUT
                # every 0.1 s beside the writers): what a request cost under that load
                "loaded_rt_ms": statistics.median(r["loaded_round_trip_ms"] for r in runs),
                "gap_loaded_rt": statistics.median(
                    (r["p99_ms"] - r["p50_ms"]) / r["loaded_round_trip_ms"] for r in runs
                ),
                "failures": sum(r["failures"] for r in runs),
                "unaccounted": sum(r["unaccounted"] for r in runs),
            }
        )
    return out


def render(summary: list[dict[str, Any]]) -> str:
    """A markdown table of :func:`summarize`'s rows."""
    lines = [
        "| store | delay ms | round trip ms | mode | cell | runs | p50 RT | p99 RT "
        "| p99 - p50 RT: median (range) | after the first commits "
        "| round trip under load ms | p99 - p50 in those | failed | unaccounted |",
        "|---|---:|---:|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for s in summary:
        lines.append(
            f"| {s['kind']} | {s['delay_ms']:g} | {s['round_trip_ms']:.1f} | {s['mode']} "
            f"| {s['writers']} {s['read_version']} | {s['runs']} | {s['p50_rt']:.1f} "
            f"| {s['p99_rt']:.1f} | {s['gap_rt']:.1f} ({s['gap_rt_min']:.1f}-"
            f"{s['gap_rt_max']:.1f}) | {s['gap_later_rt']:.1f} | {s['loaded_rt_ms']:.1f} "
            f"| {s['gap_loaded_rt']:.1f} | {s['failures']} "
            f"| {s['unaccounted']} |"
        )
    return "\n".join(lines)


def plot(summary: list[dict[str, Any]], path: Path) -> None:
    """p99 - p50 in round trips against the delay, one panel per store, one line per cell
    (the median over the runs, the range as a bar); below, the same in the round trip
    timed under load (the median run's)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = sorted({s["kind"] for s in summary})
    fig, axes = plt.subplots(
        2, len(kinds), figsize=(4.2 * len(kinds), 7.6), sharey=True, squeeze=False
    )
    for col, kind in enumerate(kinds):
        cells = sorted(
            {(s["mode"], s["writers"], s["read_version"]) for s in summary if s["kind"] == kind}
        )
        for mode, n, rv in cells:
            pts = sorted(
                (s["delay_ms"], s)
                for s in summary
                if (s["kind"], s["mode"], s["writers"], s["read_version"]) == (kind, mode, n, rv)
            )
            xs = [d for d, _ in pts]
            ys = [s["gap_rt"] for _, s in pts]
            lo = [s["gap_rt"] - s["gap_rt_min"] for _, s in pts]
            hi = [s["gap_rt_max"] - s["gap_rt"] for _, s in pts]
            label = f"{n} {rv}" if len({c[0] for c in cells}) == 1 else f"{mode} {n} {rv}"
            axes[0][col].errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=label)
            ys = [s["gap_loaded_rt"] for _, s in pts]
            axes[1][col].plot(xs, ys, marker="o", label=label)
        for row in range(2):
            ax = axes[row][col]
            ax.axhline(3, color="grey", linestyle="--", linewidth=1)
            ax.set_title(kind if row == 0 else f"{kind}: in the round trip under load")
            ax.set_xlabel("delay per request, ms")
            ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("p99 - p50, in round trips")
    axes[1][0].set_ylabel("p99 - p50, in round trips under load")
    axes[0][0].legend(fontsize=8)
    fig.suptitle("The contention tail of txn_engine against the store's latency")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", default="s3,azure,gcs", type=ob.parse_stores)
    parser.add_argument("--delays", default="25,50,100", type=_floats)
    parser.add_argument("--writers", default="4,8", type=_ints)
    parser.add_argument("--commits", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--modes", default="default", help=f"comma-separated, of {', '.join(MODES)}"
    )
    parser.add_argument("--out", type=Path, default=ob.REPO / "benchmarks" / "results")
    parser.add_argument("--plot", type=Path, default=None, help="draw the tail to this PNG")
    args = parser.parse_args(argv)
    kinds = [k for k in args.stores if k != "local"]
    if not kinds:
        parser.error("the sweep needs an object store (s3, azure, gcs)")
    modes = tuple(m for m in args.modes.split(",") if m)
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"unknown modes {unknown}; known: {', '.join(MODES)}")
    rows = sweep(kinds, args.delays, args.writers, args.commits, args.runs, modes)
    summary = summarize(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tail_sweep.json").write_text(
        json.dumps({"rows": rows, "summary": summary}, indent=2)
    )
    print(render(summary))
    if args.plot is not None:
        plot(summary, args.plot)
    return 0 if all(s["failures"] == 0 and s["unaccounted"] == 0 for s in summary) else 1


if __name__ == "__main__":
    raise SystemExit(main())
