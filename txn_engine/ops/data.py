"""Operations that add or replace data and schema: Append, Overwrite, Merge, Project,
DataReplacement."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from txn_engine.model import BasePath, DataFile, Fragment, LanceField, frozen_map
from txn_engine.ops import _accept

__all__ = [
    "Append",
    "DataReplacement",
    "DataReplacementGroup",
    "Merge",
    "Overwrite",
    "Project",
    "SchemaMetadata",
]

#: schema metadata as the operations take it: text keys, byte (or text) values
SchemaMetadata = Mapping[str, bytes | str] | Iterable[tuple[str, bytes | str]]


def _tuple_of_BasePath(value: Iterable[BasePath]) -> tuple[BasePath, ...]:
    return tuple(value)


def _tuple_of_DataReplacementGroup(
    value: Iterable[DataReplacementGroup],
) -> tuple[DataReplacementGroup, ...]:
    return tuple(value)


def _tuple_of_Fragment(value: Iterable[Fragment]) -> tuple[Fragment, ...]:
    return _accept.fragments(value)  # Fragments only: pylance's are converted where they enter


def _tuple_of_LanceField(value: Iterable[LanceField]) -> tuple[LanceField, ...]:
    return _accept.fields(value)  # or a pyarrow.Schema; a pylance LanceSchema is refused


def _opt_config(value: Mapping[str, str] | None) -> tuple[tuple[str, str], ...] | None:
    # empty and absent are the same on the wire
    return frozen_map(value) or None


@attrs.frozen
class Append:
    """Add new fragments (ids 0 are assigned at commit)."""

    fragments: tuple[Fragment, ...] = attrs.field(converter=_tuple_of_Fragment)


def _opt_metadata(value: SchemaMetadata | None) -> tuple[tuple[str, bytes], ...] | None:
    return None if value is None else frozen_map(value)


@attrs.frozen(init=False)
class Overwrite:
    """Replace the whole table (also creates a dataset when ``read_version`` is 0).

    ``schema`` is Lance fields or a ``pyarrow.Schema`` (a pylance ``LanceSchema``:
    :func:`txn_engine.interop.as_fields`); ``schema_metadata`` becomes the table's schema
    metadata (as pylance's Overwrite does), by default the one a ``pyarrow.Schema``
    carries (none for Lance fields). ``config_upsert_values``
    are merged into the existing config; ``initial_bases`` only on creation.
    """

    fragments: tuple[Fragment, ...] = attrs.field(converter=_tuple_of_Fragment)
    schema: tuple[LanceField, ...] = attrs.field(converter=_tuple_of_LanceField)
    schema_metadata: tuple[tuple[str, bytes], ...] = attrs.field(default=(), converter=frozen_map)
    config_upsert_values: tuple[tuple[str, str], ...] | None = attrs.field(
        default=None, converter=_opt_config
    )
    initial_bases: tuple[BasePath, ...] = attrs.field(default=(), converter=_tuple_of_BasePath)

    def __init__(
        self,
        fragments: Iterable[Any],
        schema: Any,
        schema_metadata: SchemaMetadata | None = None,
        config_upsert_values: Mapping[str, str] | None = None,
        initial_bases: Iterable[BasePath] = (),
    ) -> None:
        if schema_metadata is None:
            schema_metadata = _accept.arrow_schema_metadata(schema)
        self.__attrs_init__(fragments, schema, schema_metadata, config_upsert_values, initial_bases)

    @property
    def config_upserts(self) -> Mapping[str, str]:
        return dict(self.config_upsert_values or ())


@attrs.frozen(init=False)
class Merge:
    """Add columns: the complete new fragment list (every existing fragment, same
    ``physical_rows``, then any new ones) and the new schema.

    ``schema`` is Lance fields or a ``pyarrow.Schema`` (a pylance ``LanceSchema``:
    :func:`txn_engine.interop.as_fields`, its metadata
    :func:`txn_engine.interop.schema_metadata_of`); ``schema_metadata`` becomes the table's
    schema metadata (as pylance's Merge does), by default the one a ``pyarrow.Schema``
    carries; None (the default for Lance fields, and what an empty map on the wire reads
    as) keeps the table's.
    """

    fragments: tuple[Fragment, ...] = attrs.field(converter=_tuple_of_Fragment)
    schema: tuple[LanceField, ...] = attrs.field(converter=_tuple_of_LanceField)
    schema_metadata: tuple[tuple[str, bytes], ...] | None = attrs.field(
        default=None, converter=_opt_metadata
    )
    preserves_nullability: bool = False

    def __init__(
        self,
        fragments: Iterable[Any],
        schema: Any,
        schema_metadata: SchemaMetadata | None = None,
        preserves_nullability: bool = False,
    ) -> None:
        if schema_metadata is None:
            schema_metadata = _accept.arrow_schema_metadata(schema)
        self.__attrs_init__(fragments, schema, schema_metadata, preserves_nullability)


@attrs.frozen
class Project:
    """Drop or reorder columns: the new schema (a subset of the current fields)."""

    schema: tuple[LanceField, ...] = attrs.field(converter=_tuple_of_LanceField)
    preserves_nullability: bool = False


@attrs.frozen
class DataReplacementGroup:
    """Replace, in fragment ``fragment_id``, the data file holding ``new_file.fields``."""

    fragment_id: int
    new_file: DataFile = attrs.field(converter=_accept.data_file)


@attrs.frozen
class DataReplacement:
    """Swap data files of some columns of some fragments (Lance marks it unstable)."""

    replacements: tuple[DataReplacementGroup, ...] = attrs.field(
        converter=_tuple_of_DataReplacementGroup
    )
