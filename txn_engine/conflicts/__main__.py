"""``python -m txn_engine.conflicts [docs/conflicts.md]``: re-render the matrix section."""

from __future__ import annotations

import sys

from txn_engine.conflicts.matrix import sync_docs


def main(argv: list[str]) -> int:
    target = argv[0] if argv else "docs/conflicts.md"
    print("up to date" if sync_docs(target) else f"rewrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
