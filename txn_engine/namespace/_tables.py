"""What a namespace transaction (:mod:`txn_engine.namespace._transaction`) uses of its
namespace, as a Protocol: the transaction module needs no import of
:class:`~txn_engine.namespace._core.NamespaceCore`, which imports it (and satisfies this).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from txn_engine.dataset import Dataset
from txn_engine.namespace._records import Decision
from txn_engine.namespace._resolve import Resolver
from txn_engine.storage.base import Storage

if TYPE_CHECKING:
    from txn_engine.api import Table

__all__ = ["NamespaceTables"]


class NamespaceTables(Protocol):
    """The tables of a namespace and its transaction records, as a transaction across them
    reads and changes them."""

    @property
    def resolver(self) -> Resolver:
        """The namespace's transaction records (decisions, reservations)."""
        ...

    def require(self, table_id: str | Sequence[str]) -> tuple[str, ...]:
        """The parts of a registered table (DatasetNotFoundError otherwise)."""
        ...

    def table_storage(self, parts: Sequence[str]) -> Storage:
        """The table's storage (opened once per namespace)."""
        ...

    def latest(self, parts: Sequence[str]) -> Dataset:
        """The latest version of a table, a committed transaction's rolled forward."""
        ...

    def table_with(self, parts: tuple[str, ...], storage: Storage) -> Table:
        """A writer handle over ``storage`` (a table storage with a commit handler)."""
        ...

    def publish_all(
        self, decided: Decision, staged: Mapping[tuple[str, ...], bytes] | None = None
    ) -> None:
        """Publish every staged manifest of a committed transaction."""
        ...
