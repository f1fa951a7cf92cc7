"""``python -m txn_engine.conflicts [docs/conflicts.md] [--check]``: re-render the matrix
section of the conflicts document."""

from __future__ import annotations

import argparse
import sys

from txn_engine.conflicts.matrix import sync_docs


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m txn_engine.conflicts",
        description="Re-render the generated conflict-matrix section of a Markdown file "
        "from txn_engine.conflicts.matrix.",
    )
    parser.add_argument("target", nargs="?", default="docs/conflicts.md", help="the document")
    parser.add_argument(
        "--check", action="store_true", help="only check; exit 1 if the file is out of date"
    )
    args = parser.parse_args(argv)
    fresh = sync_docs(args.target, check=args.check)
    if args.check:
        print("up to date" if fresh else f"{args.target} is out of date")
        return 0 if fresh else 1
    print("up to date" if fresh else f"rewrote {args.target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
