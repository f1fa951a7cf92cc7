"""Spark reads and writes of namespace tables: ``.option("namespace", root)
.option("table_id", "db.events")`` instead of a path (``docs/namespace.md``, *Spark*).

The table's location comes from the namespace; the driver's commits go through the
namespace's commit handler (so a table reserved by a namespace transaction is settled
first), and a read rolls a committed transaction's version forward before it pins one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from txn_engine.errors import InvalidOperationError
from txn_engine.namespace._core import NamespaceCore
from txn_engine.namespace._records import join_uri, parse_table_id, table_location
from txn_engine.namespace._transaction import WithHandler
from txn_engine.storage.base import Storage

__all__ = ["namespace_path", "namespace_storage", "roll_forward"]


def namespace_path(options: Mapping[str, str]) -> str | None:
    """The table location the ``namespace`` / ``table_id`` options name (None without
    ``namespace``); InvalidOperationError when only one of them is given."""
    lowered = {str(k).lower(): str(v) for k, v in options.items()}
    root, table = lowered.get("namespace"), lowered.get("table_id")
    if not root and not table:
        return None
    if not root or not table:
        raise InvalidOperationError("give both options namespace and table_id (or a path)")
    return join_uri(root.rstrip("/"), table_location(parse_table_id(table)))


def _namespace(root: str, storage_options: Mapping[str, Any] | None) -> NamespaceCore:
    return NamespaceCore(root, dict(storage_options) if storage_options else None)


def namespace_storage(
    root: str, table_id: str, storage_options: Mapping[str, Any] | None
) -> Storage:
    """The table's storage whose versions go through the namespace's commit handler."""
    ns = _namespace(root, storage_options)
    parts = ns.require(table_id)
    return WithHandler(ns.table_storage(parts), ns.handler(parts))


def roll_forward(root: str, table_id: str, storage_options: Mapping[str, Any] | None) -> None:
    """Publish a committed transaction's version of the table, if one waits."""
    ns = _namespace(root, storage_options)
    ns.latest(ns.require(table_id))
