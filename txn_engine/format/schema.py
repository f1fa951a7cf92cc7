"""Conversion between Lance schema fields and ``pyarrow.Schema``.

A Lance schema is a flat, pre-order list of ``lance.file.Field`` (a parent before its
children, top-level ``parent_id`` -1) whose ``logical_type`` strings name Arrow types the
way pylance 14.0.2 writes them (``"int64"``, ``"timestamp:us:-"``,
``"fixed_size_list:float:4"``, ``"dict:string:int32:false"``, ``"list.struct"``, ...).
Nested types keep their children as fields of their own (struct members, list items, map
entries); fixed-size lists and dictionaries are single fields.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import pyarrow as pa  # type: ignore[import-untyped]

from txn_engine._proto import file_pb2, table_pb2
from txn_engine.errors import FormatError, InvalidOperationError
from txn_engine.model import LanceField

__all__ = [
    "arrow_to_fields",
    "arrow_to_lance_fields",
    "assign_new_field_ids",
    "fields_to_arrow",
    "logical_type_of",
    "max_field_id",
]

_PLAIN, _VAR_BINARY, _DICTIONARY = 1, 2, 3

_PRIMITIVES: dict[str, pa.DataType] = {
    "null": pa.null(),
    "bool": pa.bool_(),
    "int8": pa.int8(),
    "uint8": pa.uint8(),
    "int16": pa.int16(),
    "uint16": pa.uint16(),
    "int32": pa.int32(),
    "uint32": pa.uint32(),
    "int64": pa.int64(),
    "uint64": pa.uint64(),
    "halffloat": pa.float16(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "large_string": pa.large_string(),
    "binary": pa.binary(),
    "large_binary": pa.large_binary(),
    "date32:day": pa.date32(),
    "date64:ms": pa.date64(),
}
_PRIMITIVE_NAMES = {str(t): name for name, t in _PRIMITIVES.items()}
_VAR_TYPES = {"string", "large_string", "binary", "large_binary"}


def logical_type_of(dtype: pa.DataType) -> str:
    """Lance's logical type string for an Arrow type (nested types: the outer kind only)."""
    if pa.types.is_struct(dtype):
        return "struct"
    if pa.types.is_map(dtype):
        return "map"
    if pa.types.is_large_list(dtype):
        return "large_list.struct" if pa.types.is_struct(dtype.value_type) else "large_list"
    if pa.types.is_list(dtype):
        return "list.struct" if pa.types.is_struct(dtype.value_type) else "list"
    if pa.types.is_fixed_size_list(dtype):
        return f"fixed_size_list:{logical_type_of(dtype.value_type)}:{dtype.list_size}"
    if pa.types.is_dictionary(dtype):
        return (
            f"dict:{logical_type_of(dtype.value_type)}:{logical_type_of(dtype.index_type)}:"
            f"{'true' if dtype.ordered else 'false'}"
        )
    if pa.types.is_fixed_size_binary(dtype) and not pa.types.is_decimal(dtype):
        return f"fixed_size_binary:{dtype.byte_width}"
    if pa.types.is_timestamp(dtype):
        return f"timestamp:{dtype.unit}:{dtype.tz or '-'}"
    if pa.types.is_time32(dtype):
        return f"time32:{dtype.unit}"
    if pa.types.is_time64(dtype):
        return f"time64:{dtype.unit}"
    if pa.types.is_duration(dtype):
        return f"duration:{dtype.unit}"
    if pa.types.is_decimal128(dtype):
        return f"decimal:128:{dtype.precision}:{dtype.scale}"
    if pa.types.is_decimal256(dtype):
        return f"decimal:256:{dtype.precision}:{dtype.scale}"
    name = _PRIMITIVE_NAMES.get(str(dtype))
    if name is None:
        raise InvalidOperationError(f"Arrow type {dtype} has no Lance logical type")
    return name


def _encoding(dtype: pa.DataType) -> int:
    if pa.types.is_dictionary(dtype):
        return _DICTIONARY
    if pa.types.is_struct(dtype) or pa.types.is_null(dtype):
        return 0
    if logical_type_of(dtype) in _VAR_TYPES:
        return _VAR_BINARY
    return _PLAIN


def _children(dtype: pa.DataType) -> list[pa.Field]:
    if pa.types.is_struct(dtype):
        return [dtype.field(i) for i in range(dtype.num_fields)]
    if pa.types.is_map(dtype):
        entries = pa.field(
            "entries",
            pa.struct([dtype.key_field, dtype.item_field]),
            nullable=False,
        )
        return [entries]
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return [dtype.value_field]
    return []


def arrow_to_fields(schema: pa.Schema, *, first_id: int = 0) -> list[file_pb2.Field]:
    """Lance fields for ``schema``, ids assigned pre-order from ``first_id`` (as pylance)."""
    out: list[file_pb2.Field] = []

    def walk(field: pa.Field, parent_id: int) -> None:
        try:
            logical = logical_type_of(field.type)
        except InvalidOperationError as exc:
            raise InvalidOperationError(f"field {field.name!r}: {exc}") from None
        pb = file_pb2.Field(
            id=first_id + len(out),
            parent_id=parent_id,
            name=field.name,
            logical_type=logical,
            nullable=field.nullable,
            encoding=_encoding(field.type),  # type: ignore[arg-type]
        )
        for k, v in (field.metadata or {}).items():
            pb.metadata[k.decode() if isinstance(k, bytes) else k] = (
                v if isinstance(v, bytes) else str(v).encode()
            )
        out.append(pb)
        for child in _children(field.type):
            walk(child, pb.id)

    for field in schema:
        walk(field, -1)
    return out


def arrow_to_lance_fields(schema: pa.Schema, *, first_id: int = 0) -> tuple[LanceField, ...]:
    """:func:`arrow_to_fields` as attrs values (what Overwrite/Merge/Project take)."""
    return tuple(LanceField.from_proto(pb) for pb in arrow_to_fields(schema, first_id=first_id))


def _parse(logical: str, children: Sequence[pa.Field], name: str) -> pa.DataType:
    if logical in _PRIMITIVES:
        return _PRIMITIVES[logical]
    if logical == "struct":
        return pa.struct(list(children))
    if logical in ("list", "list.struct", "large_list", "large_list.struct"):
        if len(children) != 1:
            raise FormatError(f"field {name!r}: a list needs exactly one child field")
        return (pa.large_list if logical.startswith("large") else pa.list_)(children[0])
    if logical == "map":
        if len(children) != 1 or not pa.types.is_struct(children[0].type):
            raise FormatError(f"field {name!r}: a map needs one entries struct")
        entries = children[0].type
        if entries.num_fields != 2:
            raise FormatError(f"field {name!r}: map entries need a key and a value")
        return pa.map_(entries.field(0), entries.field(1))
    parts = logical.split(":")
    head = parts[0]
    try:
        if head == "fixed_size_list":
            inner, size = logical[len("fixed_size_list:") :].rsplit(":", 1)
            return pa.list_(pa.field("item", _parse(inner, (), name)), int(size))
        if head == "dict":
            value, index, ordered = logical[len("dict:") :].rsplit(":", 2)
            return pa.dictionary(
                _parse(index, (), name), _parse(value, (), name), ordered == "true"
            )
        if head == "fixed_size_binary":
            return pa.binary(int(parts[1]))
        if head == "timestamp":
            tz = ":".join(parts[2:])
            return pa.timestamp(parts[1], None if tz in ("-", "") else tz)
        if head == "time32":
            return pa.time32(parts[1])
        if head == "time64":
            return pa.time64(parts[1])
        if head == "duration":
            return pa.duration(parts[1])
        if head == "decimal":
            width, precision, scale = parts[1], int(parts[2]), int(parts[3])
            return (pa.decimal256 if width == "256" else pa.decimal128)(precision, scale)
    except (ValueError, IndexError, pa.ArrowInvalid) as exc:
        raise FormatError(f"field {name!r}: bad logical type {logical!r}: {exc}") from exc
    raise FormatError(f"field {name!r}: unknown Lance logical type {logical!r}")


def fields_to_arrow(
    fields: Iterable[file_pb2.Field] | Iterable[LanceField],
    schema_metadata: Mapping[str, bytes] | None = None,
) -> pa.Schema:
    """The Arrow schema of a Lance field list. Raises FormatError for unknown types or a
    child that comes before its parent."""
    by_parent: dict[int, list[file_pb2.Field | LanceField]] = {}
    known: set[int] = {-1}
    for f in fields:
        if f.parent_id not in known:
            raise FormatError(f"field {f.name!r} (id {f.id}) comes before its parent {f.parent_id}")
        known.add(f.id)
        by_parent.setdefault(f.parent_id, []).append(f)

    def build(f: file_pb2.Field | LanceField) -> pa.Field:
        children = [build(c) for c in by_parent.get(f.id, [])]
        metadata = dict(f.metadata.items()) if isinstance(f, file_pb2.Field) else dict(f.metadata)
        return pa.field(
            f.name,
            _parse(f.logical_type, children, f.name),
            nullable=f.nullable,
            metadata=metadata or None,
        )

    top = [build(f) for f in by_parent.get(-1, [])]
    return pa.schema(top, metadata=dict(schema_metadata) if schema_metadata else None)


def max_field_id(manifest: table_pb2.Manifest) -> int:
    """Largest field id used by the schema or any data file (-1 if none): ids of dropped
    columns still stored in data files are never reused."""
    top = max((f.id for f in manifest.fields), default=-1)
    for frag in manifest.fragments:
        for df in frag.files:
            if len(df.fields):
                top = max(top, max(df.fields))
    return top


def assign_new_field_ids(
    existing: Sequence[file_pb2.Field], new_schema: pa.Schema, *, first_new_id: int
) -> list[file_pb2.Field]:
    """Fields for ``new_schema`` where fields already in ``existing`` (same name path) keep
    their ids and new ones get ids from ``first_new_id`` (pre-order)."""
    paths: dict[tuple[str, ...], int] = {}
    by_id = {f.id: f for f in existing}

    def path_of(f: file_pb2.Field) -> tuple[str, ...]:
        names = [f.name]
        while f.parent_id != -1:
            f = by_id[f.parent_id]
            names.append(f.name)
        return tuple(reversed(names))

    for f in existing:
        paths[path_of(f)] = f.id
    fresh = arrow_to_fields(new_schema)
    fresh_by_id = {f.id: f for f in fresh}
    old_to_new: dict[int, int] = {}
    next_id = first_new_id

    def fresh_path(f: file_pb2.Field) -> tuple[str, ...]:
        names = [f.name]
        while f.parent_id != -1:
            f = fresh_by_id[f.parent_id]
            names.append(f.name)
        return tuple(reversed(names))

    for f in fresh:
        known_id = paths.get(fresh_path(f))
        if known_id is None:
            known_id = next_id
            next_id += 1
        old_to_new[f.id] = known_id
    for f in fresh:
        f.id = old_to_new[f.id]
        if f.parent_id != -1:
            f.parent_id = old_to_new[f.parent_id]
    return fresh
