"""Conversion between Lance schema fields and ``pyarrow.Schema``.

A Lance schema is a flat, pre-order list of ``lance.file.Field`` messages: a parent comes
before its children and top-level fields have ``parent_id`` -1. ``logical_type`` names the
Arrow type the way pylance 14.0.2 writes it: ``"int64"``, ``"halffloat"``,
``"timestamp:us:-"``, ``"decimal:128:10:2"``, ``"fixed_size_list:float:4"``,
``"dict:string:int32:false"``, ``"list.struct"``, ``"json"``, and so on.

Struct members, list items and map entries are fields of their own. A fixed-size list is
a single field, unless its item is a struct; then the item and its members follow it.
Dictionaries are single fields too.

What pylance 14.0.2 writes, measured against its manifests and reproduced here:

* ``Field.type`` is always 0 (``PARENT``), whatever the field is. Readers use
  ``logical_type``.
* ``encoding`` is ``DICTIONARY`` for dictionaries, ``VAR_BINARY`` for (large) strings and
  binaries (views and JSON included), ``NONE`` for structs and ``null``, and ``PLAIN``
  for everything else (lists, maps and fixed-size lists included).
* Field metadata is stored as-is and must be UTF-8. For an extension type, the metadata
  holds ``ARROW:extension:name`` and ``ARROW:extension:metadata``, the type is stored as
  its storage type, and ``extension_name`` is set.
* ``arrow.json`` over (large) string, and ``lance.json`` over large binary, become
  ``"json"`` with extension name ``lance.json``. Reading gives back ``pa.json_()``.
* A ``lance-encoding:blob`` field becomes a ``lance.blob.v2`` struct ``{data: large_binary,
  uri: string}``, but only for data storage version 2.2 and later (the pylance 14
  default). Older versions keep the field as written.
* ``lance-schema:unenforced-primary-key`` (true/1/yes) or a valid
  ``...:position`` (u32) marks a primary key column. A position above 0 is stored in
  ``unenforced_primary_key_position``.
* A dictionary's ``ordered`` flag is not kept (always ``false``). A fixed-size list's
  item name, nullability and metadata are not kept, unless the item is a struct.
* ``string_view`` / ``binary_view`` are stored as ``string`` / ``binary``.
* pylance refuses these types, and so does :func:`arrow_to_fields`:
  unions, intervals, run-end encoded, list views, decimal32/64, maps with sorted keys,
  and fixed-size lists of lists or maps.

Reading back (:func:`fields_to_arrow`) goes through the Arrow C data interface, as
pylance's schema does, and gives what ``lance.dataset(uri).schema`` gives. Extension
metadata becomes the extension type when pyarrow knows it: the canonical ones always,
and pylance's (``lance.bfloat16``, ``lance.blob.v2``) once ``lance`` is imported.
Otherwise the storage type is kept with its ``ARROW:extension:*`` metadata. Map entries
are named ``key`` / ``value``.

Depth: both directions refuse a schema nested more than :data:`MAX_SCHEMA_DEPTH` (128)
levels deep with :class:`~txn_engine.errors.LimitExceededError` (``limit="schema depth"``),
checked in one linear pass before anything is converted. A top-level field is level 1;
each struct member, list item, map entry (and its key / value), fixed-size-list item and
dictionary value is one level deeper. pyarrow imports at most 64 levels through the C
data interface, so ``lance.dataset(uri).schema`` in pylance 14.0.2 fails from 63 levels
on: every schema pylance's Python API can show is well inside the limit. pyspark's own
schema code recurses about five frames per level (its ``repr`` of a 200-level struct
exceeds Python's default recursion limit): 128 levels leave it room. Datasets with
deeper schemas still open, count, log, verify and commit; only the Arrow conversion is
refused. The conversions walk the fields with explicit stacks (no recursion), so memory
and time stay linear in the number of fields.

Ids: :func:`arrow_to_fields` numbers a new schema. :func:`assign_new_field_ids` keeps the
ids of known columns and numbers new ones above :func:`max_field_id`.
:func:`project_fields` keeps a subset with its ids.
"""

from __future__ import annotations

import ctypes
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import chain
from types import MappingProxyType

import pyarrow as pa  # type: ignore[import-untyped]

from txn_engine import jsontext
from txn_engine._proto import file_pb2, table_pb2
from txn_engine.errors import FormatError, InvalidOperationError, LimitExceededError
from txn_engine.format.fields import LanceField

__all__ = [
    "EXTENSION_METADATA_KEY",
    "EXTENSION_NAME_KEY",
    "MAX_SCHEMA_DEPTH",
    "PRIMARY_KEY_METADATA_KEY",
    "PRIMARY_KEY_POSITION_METADATA_KEY",
    "arrow_to_fields",
    "arrow_to_lance_fields",
    "arrow_to_schema_metadata",
    "assign_new_field_ids",
    "field_paths",
    "fields_to_arrow",
    "logical_type_of",
    "major_version",
    "max_field_id",
    "project_fields",
    "through_c_data_interface",
]

EXTENSION_NAME_KEY = "ARROW:extension:name"
EXTENSION_METADATA_KEY = "ARROW:extension:metadata"
PRIMARY_KEY_METADATA_KEY = "lance-schema:unenforced-primary-key"
PRIMARY_KEY_POSITION_METADATA_KEY = "lance-schema:unenforced-primary-key:position"
_BLOB_KEY = "lance-encoding:blob"
_BLOB_V2 = "lance.blob.v2"
_LANCE_JSON = "lance.json"
_ARROW_JSON = "arrow.json"
_BFLOAT16 = "lance.bfloat16"

_NONE = file_pb2.NONE
_PLAIN = file_pb2.PLAIN
_VAR_BINARY = file_pb2.VAR_BINARY
_DICTIONARY = file_pb2.DICTIONARY

_PRIMITIVES: Mapping[str, pa.DataType] = MappingProxyType(
    {
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
)


def _primitive_names() -> Mapping[pa.DataType, str]:
    """The name of each primitive Arrow type (built once, for :data:`_PRIMITIVE_NAMES`)."""
    names = {t: name for name, t in _PRIMITIVES.items()}
    if hasattr(pa, "string_view"):  # pyarrow >= 16; pylance stores views as their plain type
        names[pa.string_view()] = "string"
        names[pa.binary_view()] = "binary"
    return MappingProxyType(names)


_PRIMITIVE_NAMES = _primitive_names()
_VAR_BINARY_NAMES = frozenset({"string", "large_string", "binary", "large_binary"})
_UNITS = frozenset({"s", "ms", "us", "ns"})
# Rust's `u32::from_str`: an optional '+', then ASCII digits.
_U32 = re.compile(r"\+?[0-9]+")
_json_type: Callable[[pa.DataType], pa.DataType] | None = getattr(pa, "json_", None)

#: The deepest schema nesting txn_engine converts (see the module docstring for how levels
#: are counted). Deeper schemas raise LimitExceededError(limit="schema depth").
MAX_SCHEMA_DEPTH = 128


def _too_deep(what: str) -> LimitExceededError:
    return LimitExceededError(
        f"{what} is nested more than {MAX_SCHEMA_DEPTH} levels deep, the most txn_engine "
        "converts (pyarrow, and so pylance's Python API, reads at most 64 levels); "
        "flatten the schema",
        limit="schema depth",
    )


def _type_nesting(logical: str) -> int:
    """Levels a Lance logical type nests inside its own field (fixed-size-list items and
    dictionary values that are not fields of their own)."""
    nested = logical.count("fixed_size_list:") + logical.count("dict:")
    return nested - 1 if logical.startswith("fixed_size_list:struct:") else nested


def _check_arrow_depth(schema: pa.Schema, blob_v2: bool) -> None:
    """Refuse ``schema`` if it nests deeper than MAX_SCHEMA_DEPTH; one iterative pass."""
    stack: list[tuple[pa.DataType, int, pa.Field]] = []
    for field in schema:
        stack.append((field.type, 1, field))
    while stack:
        dtype, level, field = stack.pop()
        if blob_v2 and _BLOB_KEY.encode() in (field.metadata or {}):
            level += 1  # stored as a struct {data, uri}
        if level > MAX_SCHEMA_DEPTH:
            raise _too_deep(f"Arrow field {field.name!r}")
        storage = _storage(dtype)
        if pa.types.is_dictionary(storage):
            stack.append((storage.value_type, level + 1, field))
        elif pa.types.is_fixed_size_list(storage):
            stack.append((storage.value_type, level + 1, storage.value_field))
        else:
            stack.extend((child.type, level + 1, child) for child in _children(storage))


def _unsupported(dtype: pa.DataType, why: str = "") -> InvalidOperationError:
    return InvalidOperationError(
        f"Arrow type {dtype} has no Lance logical type{': ' + why if why else ''}"
    )


def _storage(dtype: pa.DataType) -> pa.DataType:
    return dtype.storage_type if isinstance(dtype, pa.BaseExtensionType) else dtype


# ---------------------------------------------------------------------------------------
# Arrow -> Lance
# ---------------------------------------------------------------------------------------


def logical_type_of(dtype: pa.DataType) -> str:
    """Lance's ``logical_type`` string for an Arrow type, as pylance 14.0.2 writes it.

    Nested types give only their outer kind (``"struct"``, ``"list"``, ``"map"``, ...);
    their children are fields of their own (see :func:`arrow_to_fields`). For an extension
    type you get its storage type's string, except ``arrow.json`` over (large) string,
    which gives ``"json"``. A field that holds ``ARROW:extension:*`` in its metadata
    rather than in its type is handled only by :func:`arrow_to_fields`. Raises
    InvalidOperationError for a type pylance refuses to store.
    """
    if isinstance(dtype, pa.BaseExtensionType):
        if dtype.extension_name == _ARROW_JSON and _is_string(dtype.storage_type):
            return "json"
        dtype = dtype.storage_type
    # hashing a nested type costs time and memory proportional to its depth: only the
    # childless ones can be primitives
    name = _PRIMITIVE_NAMES.get(dtype) if dtype.num_fields == 0 else None
    if name is not None:
        return name
    if pa.types.is_struct(dtype):
        return "struct"
    if pa.types.is_map(dtype):
        if dtype.keys_sorted:
            raise _unsupported(dtype, "pylance does not store maps with sorted keys")
        return "map"
    if pa.types.is_large_list(dtype):
        return (
            "large_list.struct" if pa.types.is_struct(_storage(dtype.value_type)) else "large_list"
        )
    if pa.types.is_list(dtype):
        return "list.struct" if pa.types.is_struct(_storage(dtype.value_type)) else "list"
    if pa.types.is_fixed_size_list(dtype):
        return _fixed_size_list_logical(dtype, outermost=True)
    if pa.types.is_dictionary(dtype):
        value = logical_type_of(dtype.value_type)
        if _has_children(value) or ":" in value:
            # pylance refuses what its 4-part "dict:value:index:ordered" cannot parse back
            raise _unsupported(dtype, "pylance stores dictionaries of simple values only")
        # pylance writes `false` whatever the Arrow `ordered` flag says
        return f"dict:{value}:{logical_type_of(dtype.index_type)}:false"
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
    if pa.types.is_fixed_size_binary(dtype) and not pa.types.is_decimal(dtype):
        return f"fixed_size_binary:{dtype.byte_width}"
    raise _unsupported(dtype)


def _is_string(dtype: pa.DataType) -> bool:
    return bool(pa.types.is_string(dtype) or pa.types.is_large_string(dtype))


def _has_children(logical: str) -> bool:
    return logical in ("struct", "map") or logical.startswith(("list", "large_list"))


def _takes_children(logical: str) -> bool:
    return _has_children(logical) or logical.startswith("fixed_size_list:struct:")


def _fixed_size_list_logical(dtype: pa.DataType, *, outermost: bool) -> str:
    item: pa.Field = dtype.value_field
    if _is_bfloat16(item):
        inner = _BFLOAT16
    else:
        item_type = _storage(item.type)
        if pa.types.is_fixed_size_list(item_type):
            inner = _fixed_size_list_logical(item_type, outermost=False)
        else:
            inner = logical_type_of(item_type)
            if inner == "struct" and not outermost:
                raise _unsupported(dtype, "a fixed-size list of structs cannot be nested")
            if inner != "struct" and _has_children(inner):
                raise _unsupported(dtype, "fixed-size lists of lists or maps are not supported")
    return f"fixed_size_list:{inner}:{dtype.list_size}"


def _is_bfloat16(item: pa.Field) -> bool:
    if _storage(item.type) != pa.binary(2):
        return False
    if isinstance(item.type, pa.BaseExtensionType):
        return bool(item.type.extension_name == _BFLOAT16)
    return (item.metadata or {}).get(EXTENSION_NAME_KEY.encode()) == _BFLOAT16.encode()


def _encoding(dtype: pa.DataType, logical: str) -> int:
    if pa.types.is_dictionary(dtype):
        return _DICTIONARY
    if logical in _VAR_BINARY_NAMES or logical == "json":
        return _VAR_BINARY
    if logical in ("struct", "null"):
        return _NONE
    return _PLAIN


def _children(dtype: pa.DataType) -> list[pa.Field]:
    if pa.types.is_struct(dtype):
        return [dtype.field(i) for i in range(dtype.num_fields)]
    if pa.types.is_map(dtype):
        entries = pa.struct([dtype.key_field, dtype.item_field])
        return [pa.field("entries", entries, nullable=False)]
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return [dtype.value_field]
    if pa.types.is_fixed_size_list(dtype) and pa.types.is_struct(_storage(dtype.value_type)):
        return [dtype.value_field]
    return []


class _CArrowSchema(ctypes.Structure):
    """The Arrow C data interface's ``struct ArrowSchema``."""

    _fields_ = [
        ("format", ctypes.c_char_p),
        ("name", ctypes.c_char_p),
        ("metadata", ctypes.c_void_p),
        ("flags", ctypes.c_int64),
        ("n_children", ctypes.c_int64),
        ("children", ctypes.c_void_p),
        ("dictionary", ctypes.c_void_p),
        ("release", ctypes.c_void_p),
        ("private_data", ctypes.c_void_p),
    ]


_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)


def _exported_metadata(field: pa.Field) -> dict[bytes, bytes]:
    """The metadata another Arrow library (pylance's arrow-rs) sees for ``field``: its own
    plus, for an extension type, ``ARROW:extension:name`` / ``ARROW:extension:metadata``."""
    capsule = field.__arrow_c_schema__()
    c_schema = _CArrowSchema.from_address(_capsule_pointer(capsule, b"arrow_schema"))
    out: dict[bytes, bytes] = {}
    if not c_schema.metadata:
        return out

    def i32(at: int) -> int:
        return int.from_bytes(ctypes.string_at(at, 4), sys.byteorder, signed=True)

    at = c_schema.metadata
    count = i32(at)
    at += 4
    for _ in range(count):
        key_len = i32(at)
        key = ctypes.string_at(at + 4, key_len)
        at += 4 + key_len
        value_len = i32(at)
        out[key] = ctypes.string_at(at + 4, value_len)
        at += 4 + value_len
    return out


def _text_metadata(field: pa.Field, where: Callable[[], str]) -> dict[str, bytes]:
    if isinstance(field.type, pa.BaseExtensionType):
        raw: Mapping[bytes, bytes] = _exported_metadata(field)
    else:
        raw = field.metadata or {}
    out: dict[str, bytes] = {}
    for key, value in raw.items():
        try:
            text_key = key.decode() if isinstance(key, bytes) else str(key)
            value = value if isinstance(value, bytes) else str(value).encode()
            value.decode()
        except UnicodeDecodeError:
            raise InvalidOperationError(
                f"field {where()!r}: metadata key {key!r} or its value is not UTF-8 text "
                "(Lance stores field metadata as text)"
            ) from None
        out[text_key] = value
    return out


def _primary_key(metadata: Mapping[str, bytes]) -> tuple[bool, int | None]:
    """(is a primary key column, position) from pylance's primary-key metadata."""
    flag = metadata.get(PRIMARY_KEY_METADATA_KEY)
    is_key = flag is not None and flag.decode().lower() in ("true", "1", "yes")
    raw_position = metadata.get(PRIMARY_KEY_POSITION_METADATA_KEY)
    position = None
    if raw_position is not None and _U32.fullmatch(raw_position.decode()):
        value = int(raw_position.decode())
        position = value if value < 2**32 else None
    return is_key or position is not None, position


#: the leading number of a version string ("2.1", "0.39.0"): ASCII digits, at most 9 of them
_MAJOR = re.compile(r"([0-9]{1,9})(?:\.|\Z)", re.ASCII)


def major_version(text: str) -> int | None:
    """The major number of a version string read from a table (``"2.1"`` gives 2,
    ``"0.39.0"`` 0), or None when it does not start with one: a string a table holds is
    input, so ``"\u00b2"`` (``isdigit()`` but no ``int()``) or 5,000 digits (past
    ``int()``'s limit) give None instead of an escaped ValueError."""
    match = _MAJOR.match(text)
    return None if match is None else int(match[1])


def _version_tuple(data_storage_version: str) -> tuple[int, int]:
    if data_storage_version in ("legacy", "0.1"):
        return (0, 1)
    match = re.fullmatch(r"([0-9]{1,9})\.([0-9]{1,9})", data_storage_version, re.ASCII)
    if match is None:
        raise InvalidOperationError(
            f"data_storage_version {data_storage_version!r} is not 'legacy' or 'MAJOR.MINOR'"
        )
    return int(match[1]), int(match[2])


def arrow_to_fields(
    schema: pa.Schema, *, first_id: int = 0, data_storage_version: str = "2.2"
) -> list[file_pb2.Field]:
    """The Lance fields pylance 14.0.2 writes for ``schema``.

    Ids are assigned pre-order (a parent before its children, depth first) from
    ``first_id``, the way Lance numbers a new schema. Every attribute matches pylance's
    manifest field by field (see the module docstring for what that means per type).
    ``data_storage_version`` is the dataset's data format (``"2.2"`` is pylance 14's
    default); it only matters for blob columns.

    Raises InvalidOperationError, naming the field, for a type pylance cannot store,
    non-UTF-8 metadata, and the schemas pylance refuses: a top-level name with ``.`` in
    it, duplicate top-level names, or a primary-key column that is not a leaf, is
    nullable, or sits under a nullable or list parent.
    """
    blob_v2 = _version_tuple(data_storage_version) >= (2, 2)
    _check_arrow_depth(schema, blob_v2)
    out: list[file_pb2.Field] = []
    seen: set[str] = set()
    for field in schema:
        if "." in field.name:
            raise InvalidOperationError(
                f"top-level field {field.name!r} has a '.' in its name, which Lance refuses "
                "(it separates nested field names); use a struct column instead"
            )
        if field.name in seen:
            raise InvalidOperationError(f"duplicate top-level field name {field.name!r}")
        seen.add(field.name)
        # pre-order with an explicit stack: children pushed in reverse come out in order
        stack: list[tuple[pa.Field, int]] = [(field, -1)]
        while stack:
            current, parent_id = stack.pop()
            children = _convert(current, parent_id, first_id, out, blob_v2)
            stack.extend((child, out[-1].id) for child in reversed(children))
    return out


def _lineage(out: Sequence[file_pb2.Field], first_id: int, parent_id: int) -> list[file_pb2.Field]:
    """The already converted ancestors of a field whose parent is ``parent_id``, top first."""
    chain_: list[file_pb2.Field] = []
    while parent_id != -1:
        node = out[parent_id - first_id]
        chain_.append(node)
        parent_id = node.parent_id
    chain_.reverse()
    return chain_


def _convert(
    field: pa.Field,
    parent_id: int,
    first_id: int,
    out: list[file_pb2.Field],
    blob_v2: bool,
) -> list[pa.Field]:
    """Append the Lance field of ``field`` to ``out``; return its children to convert."""

    def where() -> str:  # the dotted path, only built for an error message
        return ".".join([*(a.name for a in _lineage(out, first_id, parent_id)), field.name])

    metadata = _text_metadata(field, where)
    storage = _storage(field.type)
    ext_name = metadata.get(EXTENSION_NAME_KEY)
    children: list[pa.Field]
    if blob_v2 and _BLOB_KEY in metadata:
        del metadata[_BLOB_KEY]
        metadata[EXTENSION_NAME_KEY] = _BLOB_V2.encode()
        logical = "struct"
        children = [pa.field("data", pa.large_binary()), pa.field("uri", pa.string())]
    elif (ext_name == _ARROW_JSON.encode() and _is_string(storage)) or (
        ext_name == _LANCE_JSON.encode() and pa.types.is_large_binary(storage)
    ):
        metadata[EXTENSION_NAME_KEY] = _LANCE_JSON.encode()
        logical = "json"
        children = []
    else:
        try:
            logical = logical_type_of(storage)
        except InvalidOperationError as exc:
            raise InvalidOperationError(f"field {where()!r}: {exc}") from None
        children = _children(storage)
    pb = file_pb2.Field(
        id=first_id + len(out),
        parent_id=parent_id,
        name=field.name,
        logical_type=logical,
        nullable=field.nullable,
        encoding=_encoding(storage, logical),  # type: ignore[arg-type]
        metadata=metadata,
    )
    extension = metadata.get(EXTENSION_NAME_KEY)
    if extension:
        pb.extension_name = extension.decode()
    is_key, position = _primary_key(metadata)
    if is_key:
        _check_primary_key(pb, bool(children), _lineage(out, first_id, parent_id), where())
        pb.unenforced_primary_key = True
        if position:
            pb.unenforced_primary_key_position = position
    out.append(pb)
    return children


def _check_primary_key(
    pb: file_pb2.Field, has_children: bool, ancestors: Sequence[file_pb2.Field], where: str
) -> None:
    if has_children:
        raise InvalidOperationError(f"primary key column {where!r} must be a leaf field")
    for node in (*ancestors, pb):
        if node.nullable:
            raise InvalidOperationError(
                f"primary key column {where!r}: it and all its parents must be non-nullable "
                f"({node.name!r} is nullable)"
            )
        if node is not pb and node.logical_type.startswith(("list", "large_list")):
            raise InvalidOperationError(
                f"primary key column {where!r} must not be inside a list ({node.name!r})"
            )


def arrow_to_lance_fields(
    schema: pa.Schema, *, first_id: int = 0, data_storage_version: str = "2.2"
) -> tuple[LanceField, ...]:
    """:func:`arrow_to_fields` as attrs values (what Overwrite/Merge/Project take)."""
    return tuple(
        LanceField.from_proto(pb)
        for pb in arrow_to_fields(
            schema, first_id=first_id, data_storage_version=data_storage_version
        )
    )


def arrow_to_schema_metadata(schema: pa.Schema) -> dict[str, bytes]:
    """``schema.metadata`` as a manifest's ``schema_metadata`` (text keys, byte values).

    Raises InvalidOperationError when a key or value is not UTF-8 (pylance stores text).
    """
    out: dict[str, bytes] = {}
    for key, value in (schema.metadata or {}).items():
        try:
            value.decode()
            out[key.decode()] = value
        except UnicodeDecodeError:
            raise InvalidOperationError(
                f"schema metadata key {key!r} or its value is not UTF-8 text"
            ) from None
    return out


# ---------------------------------------------------------------------------------------
# Lance -> Arrow
# ---------------------------------------------------------------------------------------

_AnyField = file_pb2.Field | LanceField


def _width(text: str) -> int:
    """A fixed size in a logical type (``fixed_size_binary:16``): ASCII digits below 2^31
    (Arrow's int32 sizes; pylance 14 writes ``fixed_size_binary:0``), else ValueError
    (not OverflowError, nor a negative width pyarrow would take)."""
    width = jsontext.whole_number(text, 2**31 - 1)
    if width is None:
        raise ValueError(f"fixed size {text[:20]!r} is not in 0..2^31-1")
    return width


def _parse(logical: str, children: Sequence[pa.Field]) -> pa.DataType:
    """The Arrow type of a Lance logical type string; ValueError when it is unknown or
    does not fit ``children``."""
    primitive = _PRIMITIVES.get(logical)
    if primitive is not None:
        return primitive
    if logical == "struct":
        return pa.struct(list(children))
    if logical in ("list", "list.struct", "large_list", "large_list.struct"):
        if len(children) != 1:
            raise ValueError(f"a {logical} field needs exactly one child field")
        return (pa.large_list if logical.startswith("large") else pa.list_)(children[0])
    if logical == "map":
        if len(children) != 1 or not pa.types.is_struct(children[0].type):
            raise ValueError("a map field needs one entries struct child")
        entries = children[0].type
        if entries.num_fields != 2:
            raise ValueError("map entries need a key and a value field")
        return pa.map_(entries.field(0), entries.field(1))
    parts = logical.split(":")
    head = parts[0]
    if head == "fixed_size_list" and len(parts) >= 3:
        inner, size = logical[len("fixed_size_list:") :].rsplit(":", 1)
        if inner == _BFLOAT16:
            item = pa.field(
                "item",
                pa.binary(2),
                metadata={EXTENSION_NAME_KEY: _BFLOAT16, EXTENSION_METADATA_KEY: ""},
            )
        elif inner == "struct":
            if len(children) != 1:
                raise ValueError("a fixed-size list of structs needs one item child")
            item = children[0]
        else:
            item = pa.field("item", _parse(inner, ()))
        return pa.list_(item, _width(size))
    if head == "dict" and len(parts) >= 4:
        value, index, _ordered = logical[len("dict:") :].rsplit(":", 2)
        return pa.dictionary(_parse(index, ()), _parse(value, ()))
    if head == "fixed_size_binary" and len(parts) == 2:
        return pa.binary(_width(parts[1]))
    if head == "timestamp" and len(parts) >= 3 and parts[1] in _UNITS:
        tz = ":".join(parts[2:])
        return pa.timestamp(parts[1], None if tz in ("-", "") else tz)
    if head in ("time32", "time64", "duration") and len(parts) == 2 and parts[1] in _UNITS:
        maker = {"time32": pa.time32, "time64": pa.time64, "duration": pa.duration}[head]
        return maker(parts[1])
    if head == "decimal" and len(parts) == 4 and parts[1] in ("128", "256"):
        maker = pa.decimal128 if parts[1] == "128" else pa.decimal256
        return maker(int(parts[2]), int(parts[3]))
    raise ValueError(f"unknown Lance logical type {logical!r}")


def _field_metadata(f: _AnyField) -> dict[bytes, bytes]:
    items: Iterable[tuple[str, bytes]] = (
        f.metadata.items() if isinstance(f, file_pb2.Field) else f.metadata
    )
    metadata = {k.encode(): v for k, v in items}
    if f.extension_name and EXTENSION_NAME_KEY.encode() not in metadata:
        metadata[EXTENSION_NAME_KEY.encode()] = f.extension_name.encode()
    return metadata


def fields_to_arrow(
    fields: Iterable[file_pb2.Field] | Iterable[LanceField],
    schema_metadata: Mapping[str, bytes] | None = None,
) -> pa.Schema:
    """The Arrow schema of a Lance field list, equal to ``lance.dataset(uri).schema``.

    ``schema_metadata`` is the manifest's ``schema_metadata``; it becomes the schema's
    metadata. Extension types come back as pyarrow extension types when pyarrow knows
    them. ``"json"`` comes back as ``pa.json_()`` (as pylance returns it).

    Raises FormatError, naming the field and the type string, for a logical type this
    library does not know (written by a newer Lance, or corrupt). It also raises
    FormatError for a field listed before its parent, a repeated field id, or children
    that do not fit their parent's type, and LimitExceededError (``limit="schema depth"``)
    for a schema nested deeper than :data:`MAX_SCHEMA_DEPTH`, before converting anything.
    """
    items: list[_AnyField] = list(fields)
    level: dict[int, int] = {-1: 0}  # a field's nesting level (top-level fields: 1)
    for f in items:
        parent_level = level.get(f.parent_id)
        if parent_level is None:
            raise FormatError(f"field {f.name!r} (id {f.id}) comes before its parent {f.parent_id}")
        if f.id in level:
            raise FormatError(f"field {f.name!r}: field id {f.id} is used twice")
        level[f.id] = parent_level + 1
        if parent_level + 1 + _type_nesting(f.logical_type) > MAX_SCHEMA_DEPTH:
            raise _too_deep(f"Lance field {f.name!r} (id {f.id})")

    # bottom-up without recursion: in reverse pre-order every child is built before its
    # parent; siblings are collected backwards and reversed once
    built: dict[int, list[pa.Field]] = {}
    for f in reversed(items):
        children = built.pop(f.id, [])
        children.reverse()
        built.setdefault(f.parent_id, []).append(_build_field(f, children))
    top = built.get(-1, [])
    top.reverse()
    schema = pa.schema(top, metadata=dict(schema_metadata) if schema_metadata else None)
    try:
        return through_c_data_interface(schema)
    except (pa.ArrowException, ValueError, TypeError):
        # an extension type rejects its storage type (pylance fails to read such a
        # schema), or the schema is deeper than pyarrow's C data import takes (64
        # levels): keep the fields as built for the columns where that happens
        kept = []
        for field in top:
            try:
                kept.append(through_c_data_interface(pa.schema([field])).field(0))
            except (pa.ArrowException, ValueError, TypeError):
                kept.append(field)
        return pa.schema(kept, metadata=schema.metadata)


def _build_field(f: _AnyField, children: list[pa.Field]) -> pa.Field:
    """The Arrow field of one Lance field whose children are already built."""
    metadata = _field_metadata(f)
    if f.logical_type == "json":
        if children:
            raise FormatError(f"field {f.name!r} of type 'json' cannot have child fields")
        metadata.pop(EXTENSION_NAME_KEY.encode(), None)
        metadata.pop(EXTENSION_METADATA_KEY.encode(), None)
        if _json_type is not None:
            dtype = _json_type(pa.string())
        else:  # pyarrow < 19 has no JSON type; the name keeps the meaning
            dtype = pa.string()
            metadata[EXTENSION_NAME_KEY.encode()] = _ARROW_JSON.encode()
    else:
        try:
            if children and not _takes_children(f.logical_type):
                raise ValueError("a field of this type cannot have child fields")
            dtype = _parse(f.logical_type, children)
        except (ValueError, TypeError, OverflowError, pa.ArrowException) as exc:
            raise FormatError(
                f"field {f.name!r} of Lance logical type {f.logical_type!r}: {exc}"
            ) from exc
    return pa.field(f.name, dtype, nullable=f.nullable, metadata=metadata or None)


class _CSchemaHolder:  # an object exposing only __arrow_c_schema__
    def __init__(self, schema: pa.Schema) -> None:
        self._schema = schema

    def __arrow_c_schema__(self) -> object:
        return self._schema.__arrow_c_schema__()


def through_c_data_interface(schema: pa.Schema) -> pa.Schema:
    """``schema`` exported and imported through the Arrow C data interface, as pylance
    hands its schema to pyarrow. This turns ``ARROW:extension:*`` metadata into the
    registered extension types, and gives map entries the names ``key`` and ``value``."""
    return pa.schema(_CSchemaHolder(schema))


# ---------------------------------------------------------------------------------------
# Field ids
# ---------------------------------------------------------------------------------------


def max_field_id(
    source: table_pb2.Manifest | Iterable[file_pb2.Field] | Iterable[LanceField],
    data_files_fields: Iterable[Iterable[int]] = (),
) -> int:
    """The largest field id in use, or -1 if there is none.

    ``source`` is a manifest, or a list of schema fields plus ``data_files_fields`` (the
    ``DataFile.fields`` lists of the dataset's data files). For a manifest, every data
    file of every fragment counts too. A new column must get an id above this: a dropped
    column's id stays in old data files, so it is never reused.
    """
    if isinstance(source, table_pb2.Manifest):
        schema_fields: Iterable[file_pb2.Field | LanceField] = source.fields
        data_files_fields = chain(
            data_files_fields, (df.fields for frag in source.fragments for df in frag.files)
        )
    else:
        schema_fields = source
    top = max((f.id for f in schema_fields), default=-1)
    for ids in data_files_fields:
        top = max(top, max(ids, default=-1))
    return top


def field_paths(
    fields: Iterable[file_pb2.Field] | Iterable[LanceField],
) -> dict[tuple[str, ...], int]:
    """Each field's name path (top-level name first) mapped to its id.

    Map entries and list items are named as Lance names them (``entries``, ``item``).
    Where struct members share a name (Lance allows it below the top level), the first
    one has the path. Raises FormatError for a field listed before its parent and
    LimitExceededError for a schema deeper than :data:`MAX_SCHEMA_DEPTH`.
    """
    items: list[_AnyField] = list(fields)
    out: dict[tuple[str, ...], int] = {}
    for f, keyed in zip(items, _keyed_paths(items), strict=True):
        out.setdefault(tuple(name for name, _ in keyed), f.id)
    return out


_KeyedPath = tuple[tuple[str, int], ...]


def _keyed_paths(fields: Iterable[_AnyField]) -> list[_KeyedPath]:
    """Each field's path as (name, how many earlier siblings have that name) pairs: unique
    even where siblings share a name."""
    path_of_id: dict[int, _KeyedPath] = {-1: ()}
    seen: dict[tuple[int, str], int] = {}
    out: list[_KeyedPath] = []
    for f in fields:
        parent = path_of_id.get(f.parent_id)
        if parent is None:
            raise FormatError(f"field {f.name!r} (id {f.id}) comes before its parent {f.parent_id}")
        if len(parent) >= MAX_SCHEMA_DEPTH:  # paths are tuples: bound their length
            raise _too_deep(f"Lance field {f.name!r} (id {f.id})")
        occurrence = seen.get((f.parent_id, f.name), 0)
        seen[(f.parent_id, f.name)] = occurrence + 1
        path = (*parent, (f.name, occurrence))
        path_of_id[f.id] = path
        out.append(path)
    return out


def assign_new_field_ids(
    existing: Sequence[file_pb2.Field] | Sequence[LanceField],
    new_schema: pa.Schema,
    *,
    first_new_id: int | None = None,
    data_files_fields: Iterable[Iterable[int]] = (),
    data_storage_version: str = "2.2",
) -> list[file_pb2.Field]:
    """Fields for ``new_schema`` when it adds columns to a dataset whose schema is
    ``existing`` (Merge / add-columns style).

    A field whose name path is already in ``existing`` with the same logical type keeps
    its id. Every other field gets a fresh id, pre-order, from ``first_new_id``. That
    includes a field whose type changed and everything below a field with a fresh id.
    ``first_new_id`` defaults to ``max_field_id(existing, data_files_fields) + 1``: pass
    the data files' field lists, or ``max_field_id(manifest) + 1``, so that dropped
    columns' ids are never reused. Raises InvalidOperationError as
    :func:`arrow_to_fields` does.
    """
    if first_new_id is None:
        first_new_id = max_field_id(existing, data_files_fields) + 1
    olds: list[_AnyField] = list(existing)
    old_ids = {path: f.id for f, path in zip(olds, _keyed_paths(olds), strict=True)}
    old_types = {f.id: f.logical_type for f in existing}
    fresh = arrow_to_fields(new_schema, data_storage_version=data_storage_version)
    new_id_of: dict[int, int] = {-1: -1}
    renumbered: set[int] = set()
    next_id = first_new_id
    for f, path in zip(fresh, _keyed_paths(fresh), strict=True):
        known = old_ids.get(path)
        if (
            known is None
            or old_types[known] != f.logical_type
            or new_id_of[f.parent_id] in renumbered
        ):
            known = next_id
            next_id += 1
            renumbered.add(known)
        new_id_of[f.id] = known
    for f in fresh:
        f.id, f.parent_id = new_id_of[f.id], new_id_of[f.parent_id]
    return fresh


def project_fields(
    fields: Sequence[file_pb2.Field] | Sequence[LanceField],
    names: Iterable[str | Sequence[str]],
) -> list[file_pb2.Field]:
    """The fields that keep only the columns ``names``, with their ids (for Project /
    drop columns).

    Each name is a top-level column name, a dotted path to a nested field (``"s.x"``), or
    a tuple of path components. A selected field keeps its parents and all of its
    children; order and ids are unchanged. To drop columns, pass the names you keep.
    Raises InvalidOperationError for a name that is not in the schema.
    """
    pbs = [f if isinstance(f, file_pb2.Field) else f.to_proto() for f in fields]
    paths = field_paths(pbs)
    chosen: set[int] = set()
    on_the_way: set[int] = set()
    for name in names:
        path: tuple[str, ...]
        if isinstance(name, str):
            path = (name,) if (name,) in paths else tuple(name.split("."))
        else:
            path = tuple(name)
        if path not in paths:
            raise InvalidOperationError(f"column {'.'.join(path)!r} is not in the schema")
        chosen.add(paths[path])
        on_the_way.update(paths[path[:depth]] for depth in range(1, len(path)))
    selected: list[file_pb2.Field] = []
    whole: set[int] = set()  # chosen fields and everything below them
    for pb in pbs:
        if pb.id in chosen or pb.parent_id in whole:
            whole.add(pb.id)
        elif pb.id not in on_the_way:
            continue
        copy = file_pb2.Field()
        copy.CopyFrom(pb)
        selected.append(copy)
    return selected
