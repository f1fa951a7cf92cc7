"""Pipeline benchmark: four writers on one table, one of them compacting.

    python -m benchmarks.pipeline_conflicts [--seconds S] [--stores local,s3]
                                            [--delay-ms 25] [--json results.json]

For ``S`` seconds (default 15) per engine and store (local disk; ``s3``: moto behind a
loopback proxy adding ``--delay-ms`` to every request; also ``azure``, ``gcs``), four
threads write one table
(10,000 rows to start): a compactor (``compact`` every 2 s), an upserter (``merge_insert``
of 20 rows, half of them new), a deleter (``delete`` of one existing key) and an appender
(20 new rows). Each writer re-plans a refused (retryable) operation up to 10 times, then
counts it as failed. Engines, in the same run:

* ``txn_engine``: the defaults (resolutions beyond Lance on);
* ``txn_engine-lance-rules``: ``ConflictOptions(rebase_rows=False)``, pylance 14's answers
  (the re-plans pylance's rules cause, counted where pylance hides them);
* ``pylance``: pylance 14 alone (its own internal retries; only failures are visible).

Reported per engine: useful commits/s, re-plans, failed operations, compactions lost
(failed after their retries), and errors (an operation that raised anything but a
refusal; the writer goes on).
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["run"]

_KINDS = ("compact", "upsert", "delete", "append")


class _Keys:
    """Keys in the table (shared by the writers; a lock keeps it consistent)."""

    def __init__(self, n: int) -> None:
        self._lock = threading.Lock()
        self._next = n
        self._live = list(range(n))

    def fresh(self, k: int) -> list[int]:
        with self._lock:
            out = list(range(self._next, self._next + k))
            self._next += k
            return out

    def some(self, k: int) -> list[int]:
        with self._lock:
            return random.sample(self._live, min(k, len(self._live)))

    def added(self, keys: list[int]) -> None:
        with self._lock:
            self._live.extend(keys)

    def removed(self, key: int) -> None:
        with self._lock:
            if key in self._live:
                self._live.remove(key)


def _batch(keys: list[int]) -> Any:
    import pyarrow as pa

    return pa.table({"id": pa.array(keys, pa.int64()), "v": pa.array(keys, pa.int64())})


def _ops(
    engine: str, uri: str, keys: _Keys, options: dict[str, str] | None
) -> dict[str, Callable[[], None]]:
    """One callable per writer kind; a retryable refusal raises ``RetryableConflictError``
    (or ``OSError`` naming a conflict, pylance's)."""
    import lance

    if engine == "pylance":

        def upsert() -> None:
            rows = keys.some(10) + keys.fresh(10)
            ds = lance.dataset(uri, storage_options=options)
            ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(
                _batch(rows)
            )
            keys.added(rows[10:])

        def delete() -> None:
            (k,) = keys.some(1)
            lance.dataset(uri, storage_options=options).delete(f"id = {k}")
            keys.removed(k)

        def append() -> None:
            rows = keys.fresh(20)
            lance.write_dataset(_batch(rows), uri, mode="append", storage_options=options)
            keys.added(rows)

        def compact() -> None:
            lance.dataset(uri, storage_options=options).optimize.compact_files()

        return {"compact": compact, "upsert": upsert, "delete": delete, "append": append}
    import txn_engine as te
    from txn_engine.conflicts.rebase import ConflictOptions

    rules = ConflictOptions(rebase_rows=engine == "txn_engine")
    once = te.RetryPolicy(max_attempts=1)  # re-plans are counted by the writer loop

    def table() -> Any:
        return te.open(uri, storage_options=options, conflict_options=rules, retry_policy=once)

    def e_upsert() -> None:
        rows = keys.some(10) + keys.fresh(10)
        table().merge_insert(_batch(rows), on="id")
        keys.added(rows[10:])

    def e_delete() -> None:
        (k,) = keys.some(1)
        table().delete(f"id = {k}")
        keys.removed(k)

    def e_append() -> None:
        rows = keys.fresh(20)
        table().append(_batch(rows))
        keys.added(rows)

    def e_compact() -> None:
        table().compact()

    return {"compact": e_compact, "upsert": e_upsert, "delete": e_delete, "append": e_append}


def _writer(
    kind: str, op: Callable[[], None], stop: float, stats: Counter[str], lock: threading.Lock
) -> None:
    from txn_engine.errors import RetriesExhaustedError, RetryableConflictError

    while time.monotonic() < stop:
        for _ in range(11):
            try:
                op()
            except Exception as exc:
                refused = isinstance(exc, (RetryableConflictError, RetriesExhaustedError)) or (
                    isinstance(exc, OSError) and "conflict" in str(exc).lower()
                )
                if not refused:  # a failure, not a refusal: counted, never silent
                    with lock:
                        stats["errors"] += 1
                        stats[f"error: {type(exc).__name__}: {str(exc)[:200]}"] += 1
                    break
                with lock:
                    stats["replans"] += 1
                    stats[f"replans_{kind}"] += 1
                continue
            with lock:
                stats["commits"] += 1
                stats[f"commits_{kind}"] += 1
            break
        else:
            with lock:
                stats["failed"] += 1
                stats[f"failed_{kind}"] += 1
        if kind == "compact":
            time.sleep(2.0)


def _one(engine: str, seconds: float, uri: str, options: dict[str, str] | None) -> dict[str, Any]:
    import lance

    lance.write_dataset(
        _batch(list(range(10_000))), uri, max_rows_per_file=1000, storage_options=options
    )
    keys = _Keys(10_000)
    ops = _ops(engine, uri, keys, options)
    stats: Counter[str] = Counter()
    lock = threading.Lock()
    stop = time.monotonic() + seconds
    threads = [
        threading.Thread(target=_writer, args=(k, ops[k], stop, stats, lock)) for k in _KINDS
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {
        "engine": engine,
        "seconds": seconds,
        "useful_commits_per_s": round(stats["commits"] / seconds, 2),
        "commits": dict(sorted((k, v) for k, v in stats.items() if k.startswith("commits"))),
        "replans": stats["replans"],
        "replans_by_writer": {k: stats[f"replans_{k}"] for k in _KINDS},
        "failed": stats["failed"],
        "compactions_lost": stats["failed_compact"],
        "errors": stats["errors"],
        "error_messages": sorted(k for k in stats if k.startswith("error: ")),
        "rows_at_end": lance.dataset(uri, storage_options=options).count_rows(),
    }


ENGINES = ("txn_engine", "txn_engine-lance-rules", "pylance")


def run(
    seconds: float = 15.0, stores: tuple[str, ...] = ("local",), delay_ms: float = 25.0
) -> list[dict[str, Any]]:
    """The three engines, one after the other, ``seconds`` each, on each store (the
    emulators behind ``delay_ms``); each row names its store."""
    from benchmarks.object_stores import started_stores

    out: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="pipeline-") as tmp,
        started_stores(list(stores), delay_ms, Path(tmp)) as started,
    ):
        for store in started:
            if store.kind != "local" and not store.delay_ms:
                continue  # the emulators behind the delay only
            for engine in ENGINES:
                row = _one(engine, seconds, store.uri(engine), store.options)
                out.append({"store": store.name, **row})
                print(json.dumps(out[-1]), flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--stores", default="local")
    parser.add_argument("--delay-ms", type=float, default=25.0)
    parser.add_argument("--json", type=str, default=None)
    args = parser.parse_args()
    stores = tuple(k for k in args.stores.split(",") if k)
    results = run(args.seconds, stores, args.delay_ms)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
