"""Multi-table atomic commits through a Lance namespace (``docs/namespace.md``).

:class:`Namespace` (needs the ``namespace`` extra: lance-namespace, installed with pylance)
is a ``lance_namespace.LanceNamespace`` that keeps tables under ids in a directory or an
object-store prefix; pylance 14 opens, reads and commits through it, and
``Namespace.transaction()`` commits changes to several tables all or nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from txn_engine.namespace._core import NamespaceCore
from txn_engine.namespace._records import MARKER_KEY, Decision, TableEntry
from txn_engine.namespace._transaction import NamespaceTransaction

if TYPE_CHECKING:
    from txn_engine.namespace._lance import Namespace

__all__ = [
    "MARKER_KEY",
    "Decision",
    "Namespace",
    "NamespaceCore",
    "NamespaceTransaction",
    "TableEntry",
]


def __getattr__(name: str) -> Any:
    if name == "Namespace":  # lance_namespace is imported only when it is asked for
        try:
            from txn_engine.namespace._lance import Namespace
        except ImportError as exc:
            raise ImportError(
                "txn_engine.Namespace needs lance-namespace: pip install 'txn_engine[namespace]'"
            ) from exc
        return Namespace
    raise AttributeError(name)
