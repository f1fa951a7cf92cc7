"""How exact the modification times a store lists are: the margin cleanup needs.

    python -m benchmarks.store_time [--objects 200] [--stores local,s3,azure,gcs]

Cleanup judges the age of an unreferenced file (and of lease and marker objects) by the
modification time the store lists, against the store's own time now (read off an object it
creates), never against a writer's clock. What remains is the store's own error: how coarse
its listed times are, and how far a listed time may lie before the moment the object was
really created. This benchmark measures both per store. For each of ``--objects`` objects it
reads the local clock just before and just after the create (the emulators run on this
machine, so the clock is theirs), then lists them:

* ``granularity``: the coarsest unit every listed time is a whole multiple of (1 s: S3's
  ``LastModified``);
* ``early_ms``: how much earlier than the clock read before the create a listed time was,
  at most (truncation to whole seconds makes this up to 1,000 ms);
* ``late_ms``: how much later than the clock read after the create, at most.

``txn_engine.storetime.STORE_TIME_MARGIN_NS`` (2 s) must exceed ``early_ms`` and
``late_ms`` on every store, with room for skew between a real store's servers. Prints one
JSON object.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.object_stores import ALL_STORES, started_stores
from txn_engine.storage import open_storage
from txn_engine.storage.listing import list_objects
from txn_engine.storetime import STORE_TIME_MARGIN_NS

_UNITS = ((1_000_000_000, "1 s"), (1_000_000, "1 ms"), (1_000, "1 us"), (1, "1 ns"))


def _granularity(times: list[int]) -> str:
    for unit, name in _UNITS:
        if all(t % unit == 0 for t in times):
            return name
    return "1 ns"


def measure(uri: str, options: dict[str, str] | None, objects: int) -> dict[str, Any]:
    """Create ``objects`` objects under ``uri``, list them, compare with the clock."""
    storage = open_storage(uri, options)
    around: dict[str, tuple[int, int]] = {}
    for i in range(objects):
        path = f"probe/{i:05d}-{uuid.uuid4().hex[:8]}"
        before = time.time_ns()
        storage.put_if_absent(path, b"x")
        around[path] = (before, time.time_ns())
        if i % 7 == 0:
            time.sleep(0.003)  # spread the creates over sub-second phases
    listed = {info.path: info.mtime_ns for info in list_objects(storage, "probe")}
    times = [t for t in listed.values() if t is not None]
    if len(times) != objects:
        return {"objects": objects, "listed_with_times": len(times)}
    early = max(before - listed[p] for p, (before, _) in around.items())  # type: ignore[operator]
    late = max(listed[p] - after for p, (_, after) in around.items())  # type: ignore[operator]
    return {
        "objects": objects,
        "granularity": _granularity(times),
        "early_ms": round(max(early, 0) / 1e6, 3),
        "late_ms": round(max(late, 0) / 1e6, 3),
        "margin_ms": STORE_TIME_MARGIN_NS / 1e6,
        "within_margin": max(early, late) < STORE_TIME_MARGIN_NS,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=200)
    parser.add_argument("--stores", default=",".join(ALL_STORES))
    args = parser.parse_args(argv)
    kinds = [k for k in args.stores.split(",") if k]
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp, started_stores(kinds, 0.0, Path(tmp)) as stores:
        for store in stores:
            out[store.name] = measure(store.uri("probe"), store.options, args.objects)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
