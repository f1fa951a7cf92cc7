"""A consistent read of several namespace tables: versions that never split a transaction.

Reading each table's latest version one after the other can see a transaction ``T`` on a
table read after ``T``'s commit point and miss it on a table read before. So the snapshot
reads every table twice (passes ``a`` and ``b``). Any transaction that the first pass
splits committed before that pass ended, so the second pass sees all of it: its version on
a table where ``a`` missed it lies in ``(a[t], b[t]]``. The snapshot looks at the versions
of those ranges; if one is a transaction's change (the decision of its marker names that
very version) and that transaction changed another table of the snapshot at or below what
``a`` read, ``a`` is split and the snapshot starts again from ``b``. Otherwise ``a`` is
consistent. Transactions on one table only never split anything and cost no reads beyond
the two passes' listings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from txn_engine.dataset import Dataset
from txn_engine.errors import RetriesExhaustedError
from txn_engine.namespace._records import MARKER_KEY

if TYPE_CHECKING:
    from txn_engine.namespace._core import NamespaceCore

__all__ = ["snapshot"]

_PASSES = 20


def snapshot(ns: NamespaceCore, tables: Sequence[tuple[str, ...]]) -> dict[str, int]:
    """The version of each table (by dotted id) in one consistent cut (see the module
    docstring). RetriesExhaustedError when transactions kept splitting it."""
    first = _pass(ns, tables)
    for _ in range(_PASSES):
        second = _pass(ns, tables)
        if not _split(ns, tables, first, second):
            return {".".join(p): v for p, v in first.items()}
        first = second
    raise RetriesExhaustedError(
        f"a consistent snapshot of {len(tables)} tables was split by transactions "
        f"{_PASSES} times in a row",
        remedy="retry later",
    )


def _pass(ns: NamespaceCore, tables: Sequence[tuple[str, ...]]) -> dict[tuple[str, ...], int]:
    return {parts: ns.latest(parts).version for parts in tables}


def _split(
    ns: NamespaceCore,
    tables: Sequence[tuple[str, ...]],
    first: Mapping[tuple[str, ...], int],
    second: Mapping[tuple[str, ...], int],
) -> bool:
    """Whether ``first`` splits a transaction (see the module docstring)."""
    for parts in tables:
        storage = ns.table_storage(parts)
        for version in range(first[parts] + 1, second[parts] + 1):
            marker = Dataset.open(storage, version=version).manifest_pb.config.get(MARKER_KEY)
            decided = ns.resolver.decision(marker) if marker else None
            if decided is None or not decided.committed:
                continue
            mine = decided.entry(parts)
            if mine is None or mine.version != version:
                continue  # a later version carrying an older marker
            for other in decided.tables:
                seen = first.get(other.id)
                changed = other.version is not None and other.id != parts
                if changed and seen is not None and other.version <= seen:  # type: ignore[operator]
                    return True  # changed there too, and the first pass saw that change
    return False
