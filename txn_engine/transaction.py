"""The Transaction: one operation planned against a read version."""

from __future__ import annotations

import uuid as uuid_mod
from collections.abc import Mapping
from typing import get_args

import attrs

from txn_engine.model import frozen_map
from txn_engine.ops import Operation, _accept, operation_kind

__all__ = ["COMMIT_MESSAGE_KEY", "GROUP_MEMBERS_KEY", "Transaction"]

#: Transaction property Lance reserves for a commit message.
COMMIT_MESSAGE_KEY = "__lance_commit_message"

#: Transaction property of a group commit (:class:`txn_engine.Committer`): the uuids of the
#: transactions it carries, comma-separated, so each one is found (exactly once) by its own uuid.
GROUP_MEMBERS_KEY = "txn_engine.group_members"


def _new_uuid() -> str:
    return str(uuid_mod.uuid4())


def _tag(value: str | None) -> str | None:
    return value or None  # an empty tag is no tag on the wire


def _props(value: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    return frozen_map(value)


#: the classes of the Operation union
_OPERATION_TYPES: tuple[type, ...] = get_args(Operation)


def _operation(value: Operation) -> Operation:
    """``value`` if it is a txn_engine operation; anything else (a pylance
    ``LanceOperation.*`` value too: :func:`txn_engine.interop.as_operation`) is refused."""
    if isinstance(value, _OPERATION_TYPES):
        return value
    raise _accept.refusal(
        "a txn_engine operation (txn_engine.Append, ...)", value, "as_operation(...)"
    )


@attrs.frozen
class Transaction:
    """An operation planned against ``read_version`` (0 when creating a dataset).

    ``uuid`` identifies the transaction everywhere (its ``.txn`` file name, the inline copy
    in its manifest); committing the same Transaction twice lands it at most once.
    """

    read_version: int
    #: a txn_engine operation (pylance's ``lance.LanceOperation.*``: convert it with
    #: :func:`txn_engine.interop.as_operation`, or commit pylance's own Transaction)
    operation: Operation = attrs.field(converter=_operation)
    uuid: str = attrs.field(factory=_new_uuid)
    tag: str | None = attrs.field(default=None, converter=_tag)
    properties: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_props)

    @property
    def kind(self) -> str:
        """The operation kind name, e.g. ``"Append"``."""
        return operation_kind(self.operation)

    @property
    def properties_dict(self) -> dict[str, str]:
        return dict(self.properties)

    def with_read_version(self, version: int) -> Transaction:
        return attrs.evolve(self, read_version=version)

    @property
    def file_name(self) -> str:
        """The transaction file name ``{read_version}-{uuid}.txn``."""
        return f"{self.read_version}-{self.uuid}.txn"
