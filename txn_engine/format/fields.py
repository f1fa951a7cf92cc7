"""A Lance schema field (``file.proto`` ``Field``) as an immutable value.

It lives in the format layer because the schema is part of what is on storage:
:mod:`txn_engine.format.schema` converts lists of these to and from Arrow, and
:mod:`txn_engine.model` re-exports the class with the other values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from txn_engine._proto import file_pb2

__all__ = ["LanceField", "frozen_map"]


def frozen_map(
    value: Mapping[Any, Any] | Iterable[tuple[Any, Any]] | None,
) -> tuple[tuple[Any, Any], ...]:
    """Canonical immutable form of a mapping: a tuple of (key, value) pairs sorted by key."""
    if value is None:
        return ()
    items = value.items() if isinstance(value, Mapping) else value
    return tuple(sorted(items, key=lambda kv: kv[0]))


@attrs.frozen
class LanceField:
    """One node of a Lance schema (flattened pre-order; top-level ``parent_id`` is -1)."""

    id: int
    parent_id: int
    name: str
    logical_type: str
    nullable: bool = True
    metadata: tuple[tuple[str, bytes], ...] = attrs.field(default=(), converter=frozen_map)
    extension_name: str = ""
    unenforced_primary_key: bool = False
    encoding: int = 0
    type: int = 0

    def to_proto(self) -> file_pb2.Field:
        pb = file_pb2.Field(
            id=self.id,
            parent_id=self.parent_id,
            name=self.name,
            logical_type=self.logical_type,
            nullable=self.nullable,
            extension_name=self.extension_name,
            unenforced_primary_key=self.unenforced_primary_key,
            encoding=self.encoding,  # type: ignore[arg-type]
            type=self.type,  # type: ignore[arg-type]
        )
        for k, v in self.metadata:
            pb.metadata[k] = v
        return pb

    @classmethod
    def from_proto(cls, pb: file_pb2.Field) -> LanceField:
        return cls(
            id=pb.id,
            parent_id=pb.parent_id,
            name=pb.name,
            logical_type=pb.logical_type,
            nullable=pb.nullable,
            metadata=dict(pb.metadata),
            extension_name=pb.extension_name,
            unenforced_primary_key=pb.unenforced_primary_key,
            encoding=int(pb.encoding),
            type=int(pb.type),
        )
