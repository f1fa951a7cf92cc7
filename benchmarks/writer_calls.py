"""What users call: txn_engine's writer API against pylance's own calls, call for call.

    python -m benchmarks.writer_calls [--stores local,s3,azure,gcs] [--delay-ms 25]
                                      [--runs 7] [--out DIR]

Twin tables (20,000 rows in 20 fragments: ``id`` int64, ``v`` string) per store, one handle
reused on each side: pylance's ``LanceDataset`` (``ds.insert``, ``ds.delete``, ``ds.update``,
``ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute``,
``ds.optimize.compact_files``, ``ds.create_scalar_index``, ``ds.add_columns``,
``lance.write_dataset(mode="overwrite")``) and txn_engine's ``te.open(uri)`` (``append``,
``delete``, ``update``, ``merge_insert``, ``compact``, ``create_index``, ``add_columns``,
``overwrite``). Calls alternate between the engines (which goes first alternates too);
the result per (store, call) is the median seconds of each and the ratio txn_engine /
pylance (< 1: txn_engine is faster), plus, on the emulators, the requests each call sent
(counted at the loopback proxy in front of the store, which also adds ``--delay-ms`` to
every request). Writes ``writer_calls.json`` and ``writer_calls.png`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa

import txn_engine as te
from benchmarks.object_stores import _PROXIES, Store, started_stores

ROWS, FRAGMENTS = 20_000, 20
CALLS = (
    "append", "delete", "update", "merge_insert", "compact", "create_index", "add_columns",
    "overwrite",
)  # fmt: skip


def _rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                     "v": [f"v{i}" for i in range(start, start + n)]})  # fmt: skip


class _Side:
    """One engine's handle on its twin table and the calls on it."""

    def __init__(self, engine: str, uri: str, options: dict[str, str] | None) -> None:
        self.engine, self.uri, self.options = engine, uri, options
        lance.write_dataset(
            _rows(0, ROWS), uri, max_rows_per_file=ROWS // FRAGMENTS, storage_options=options
        )
        self.next_id = ROWS
        self.columns = 0
        if engine == "pylance":
            self.ds = lance.dataset(uri, storage_options=options)
        else:
            self.table = te.open(uri, storage_options=options)

    def prepare(self, call: str) -> None:
        """Untimed set-up a call needs: small fragments for a compaction to merge."""
        if call == "compact":
            for _ in range(4):
                self.run("append")

    def run(self, call: str) -> None:
        """One call of the writer API under test."""
        k = self.next_id
        if call in ("append", "merge_insert"):
            self.next_id += 100 if call == "append" else 25
        step = getattr(self, f"_{self.engine}_{call}")
        step(k)

    # ---- pylance ----
    def _pylance_append(self, k: int) -> None:
        self.ds.insert(_rows(k, 100))

    def _pylance_delete(self, k: int) -> None:
        self.ds.delete(f"id = {k % ROWS}")

    def _pylance_update(self, k: int) -> None:
        self.ds.update({"v": "'updated'"}, where=f"id = {(k + 7) % ROWS}")

    def _pylance_merge_insert(self, k: int) -> None:
        data = pa.concat_tables([_rows(k - 25 - 1000, 25), _rows(k, 25)])
        self.ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(
            data
        )

    def _pylance_compact(self, k: int) -> None:
        self.ds.optimize.compact_files(target_rows_per_fragment=1024 * 1024)

    def _pylance_create_index(self, k: int) -> None:
        self.ds.create_scalar_index("id", "BTREE", replace=True)

    def _pylance_add_columns(self, k: int) -> None:
        self.columns += 1
        self.ds.add_columns({f"c{self.columns}": "id * 2"})

    def _pylance_overwrite(self, k: int) -> None:
        self.ds = lance.write_dataset(
            _rows(0, 100), self.uri, mode="overwrite", storage_options=self.options
        )
        self.columns = 0

    # ---- txn_engine ----
    def _txn_engine_append(self, k: int) -> None:
        self.table.append(_rows(k, 100))

    def _txn_engine_delete(self, k: int) -> None:
        self.table.delete(f"id = {k % ROWS}")

    def _txn_engine_update(self, k: int) -> None:
        self.table.update({"v": "'updated'"}, where=f"id = {(k + 7) % ROWS}")

    def _txn_engine_merge_insert(self, k: int) -> None:
        self.table.merge_insert(pa.concat_tables([_rows(k - 25 - 1000, 25), _rows(k, 25)]), "id")

    def _txn_engine_compact(self, k: int) -> None:
        self.table.compact(target_rows_per_fragment=1024 * 1024)

    def _txn_engine_create_index(self, k: int) -> None:
        self.table.create_index("id", "BTREE", replace=True)

    def _txn_engine_add_columns(self, k: int) -> None:
        self.columns += 1
        self.table.add_columns({f"c{self.columns}": "id * 2"})

    def _txn_engine_overwrite(self, k: int) -> None:
        self.table.overwrite(_rows(0, 100))
        self.columns = 0


def _timed(store: Store, side: _Side, call: str) -> tuple[float, int | None]:
    """Seconds one call took and the requests it sent (None without a proxy)."""
    side.prepare(call)
    proxy = _PROXIES.get(store.name)
    before = len(proxy.requests) if proxy is not None else 0
    start = time.perf_counter()
    side.run(call)
    seconds = time.perf_counter() - start
    return seconds, (len(proxy.requests) - before if proxy is not None else None)


def measure_store(store: Store, runs: int, calls: tuple[str, ...] = CALLS) -> list[dict[str, Any]]:
    """Every call ``runs`` times on each engine's twin table, alternating."""
    sides = {e: _Side(e, store.uri(e), store.options) for e in ("pylance", "txn_engine")}
    rows = []
    for call in calls:
        samples: dict[str, list[float]] = {e: [] for e in sides}
        requests: dict[str, list[int]] = {e: [] for e in sides}
        for i in range(runs + 1):  # the first round warms both up and is not counted
            order = list(sides) if i % 2 == 0 else list(reversed(sides))
            for engine in order:
                seconds, sent = _timed(store, sides[engine], call)
                if i:
                    samples[engine].append(seconds)
                    if sent is not None:
                        requests[engine].append(sent)
        p, t = (statistics.median(samples[e]) for e in ("pylance", "txn_engine"))
        rows.append({
            "store": store.name, "call": call, "runs": runs,
            "pylance_ms": round(p * 1e3, 2), "txn_engine_ms": round(t * 1e3, 2),
            "ratio": round(t / p, 3),
            "requests": {e: int(statistics.median(r)) for e, r in requests.items() if r},
        })  # fmt: skip
    return rows


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """One panel per store: median ms per call, pylance beside txn_engine."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stores = list(dict.fromkeys(r["store"] for r in rows))
    fig, axes = plt.subplots(1, len(stores), figsize=(5 * len(stores), 4.2), squeeze=False)
    for ax, name in zip(axes[0], stores, strict=True):
        sel = [r for r in rows if r["store"] == name]
        xs = range(len(sel))
        ax.bar([x - 0.2 for x in xs], [r["pylance_ms"] for r in sel], 0.4, label="pylance 14.0.2")
        ax.bar([x + 0.2 for x in xs], [r["txn_engine_ms"] for r in sel], 0.4, label="txn_engine")
        ax.set_xticks(list(xs), [r["call"] for r in sel], rotation=45, ha="right")
        ax.set_yscale("log")
        ax.set_ylabel("median ms per call")
        ax.set_title(name)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", default="local,s3,azure,gcs")
    parser.add_argument("--delay-ms", type=float, default=25.0)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--calls", default=",".join(CALLS))
    parser.add_argument("--out", type=Path, default=Path("benchmark-results"))
    args = parser.parse_args(argv)
    kinds = [k for k in args.stores.split(",") if k]
    calls = tuple(c for c in args.calls.split(",") if c)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, started_stores(
        kinds, args.delay_ms, Path(tmp)
    ) as stores:
        for store in stores:
            if store.kind != "local" and not store.delay_ms:
                continue  # the emulators behind the delay only
            rows.extend(measure_store(store, args.runs, calls))
            print(json.dumps(rows[-len(calls) :]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "writer_calls.json").write_text(json.dumps(rows, indent=2))
    plot(rows, args.out / "writer_calls.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
