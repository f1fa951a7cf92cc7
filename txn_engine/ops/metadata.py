"""Metadata operations: UpdateConfig and UpdateBases."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import Any

import attrs

from txn_engine.model import BasePath

__all__ = ["UpdateBases", "UpdateConfig", "UpdateMap"]


def _tuple_of_BasePath(value: Iterable[BasePath]) -> tuple[BasePath, ...]:
    return tuple(value)


def _entries(
    value: Mapping[str, str | None] | Iterable[tuple[str, str | None]],
) -> tuple[tuple[str, str | None], ...]:
    items = value.items() if isinstance(value, Mapping) else value
    return tuple(sorted(((str(k), v) for k, v in items), key=lambda kv: kv[0]))


@attrs.frozen
class UpdateMap:
    """Edits of a string map: ``(key, value)`` upserts, ``(key, None)`` deletes. With
    ``replace`` the map is cleared first (then only entries with a value are inserted)."""

    entries: tuple[tuple[str, str | None], ...] = attrs.field(default=(), converter=_entries)
    replace: bool = False

    @property
    def upserted_keys(self) -> frozenset[str]:
        return frozenset(k for k, v in self.entries if v is not None)

    @property
    def deleted_keys(self) -> frozenset[str]:
        return frozenset(k for k, v in self.entries if v is None)

    def apply(self, current: Mapping[str, str]) -> dict[str, str]:
        """``current`` edited (a new dict; ``current`` is left alone)."""
        result = dict(current)
        self.apply_to(result)
        return result

    def apply_to(
        self, target: MutableMapping[str, Any], encode: Callable[[str], Any] = str
    ) -> None:
        """Edit ``target`` in place (a dict or a protobuf map); ``encode`` turns each value
        into what the map holds (``str.encode`` for a protobuf map of bytes)."""
        if self.replace:
            target.clear()
        for key, value in self.entries:
            if value is None:
                if key in target:
                    del target[key]
            else:
                target[key] = encode(value)


def _opt_map(value: UpdateMap | Mapping[str, str | None] | None) -> UpdateMap | None:
    if value is None or isinstance(value, UpdateMap):
        return value
    return UpdateMap(value)


def _field_maps(
    value: Mapping[int, UpdateMap] | Iterable[tuple[int, UpdateMap]] | None,
) -> tuple[tuple[int, UpdateMap], ...]:
    if value is None:
        return ()
    items = value.items() if isinstance(value, Mapping) else value
    return tuple(
        sorted(((int(k), _opt_map(v) or UpdateMap()) for k, v in items), key=lambda kv: kv[0])
    )


@attrs.frozen
class UpdateConfig:
    """Edit the table config, table metadata, schema metadata and field metadata."""

    config_updates: UpdateMap | None = attrs.field(default=None, converter=_opt_map)
    table_metadata_updates: UpdateMap | None = attrs.field(default=None, converter=_opt_map)
    schema_metadata_updates: UpdateMap | None = attrs.field(default=None, converter=_opt_map)
    field_metadata_updates: tuple[tuple[int, UpdateMap], ...] = attrs.field(
        default=(), converter=_field_maps
    )


@attrs.frozen
class UpdateBases:
    """Register new base paths (``id`` 0 = assign at commit)."""

    new_bases: tuple[BasePath, ...] = attrs.field(converter=_tuple_of_BasePath)
