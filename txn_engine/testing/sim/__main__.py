"""``python -m txn_engine.testing.sim --seeds N [--first S] [--profile stalls|retention]``:
run N seeds, print each failing one with what it broke, exit 1 if any failed."""

from __future__ import annotations

import argparse
import sys
import time

from txn_engine.testing.sim import profiles
from txn_engine.testing.sim._world import simulate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m txn_engine.testing.sim")
    parser.add_argument("--seeds", type=int, default=1000)
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--profile", choices=("drawn", "stalls", "retention"), default="drawn")
    args = parser.parse_args(argv)
    shape = {"stalls": profiles.STALLS, "retention": profiles.RETENTION}.get(args.profile)
    started, failed = time.monotonic(), 0
    for seed in range(args.first, args.first + args.seeds):
        result = (
            simulate(seed) if shape is None else simulate(seed, config=shape[0], faults=shape[1])
        )
        if not result.ok:
            failed += 1
            print(f"seed {seed}: {len(result.violations)} violation(s)")
            for violation in result.violations[:5]:
                print(f"  {violation}")
    took = time.monotonic() - started
    print(f"{args.seeds} seeds ({args.profile}), {failed} failed, {took:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
