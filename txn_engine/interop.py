"""pylance objects in, txn_engine values out: every conversion in one place.

The library's values (:mod:`txn_engine.model`, :mod:`txn_engine.ops`,
:class:`~txn_engine.transaction.Transaction`) hold only the library's own types: given a
pylance object, they refuse it with InvalidOperationError naming the function here that
converts it. pylance objects are converted once, where they enter the library:
:func:`txn_engine.commit` and ``replan_and_commit`` (a pylance ``Transaction``), the writer
API (:mod:`txn_engine.writers`, :class:`txn_engine.Table`), the
:class:`~txn_engine.Committer` and the Spark source, all with these functions:

=====================================  ==========================================
pylance 14                             txn_engine
=====================================  ==========================================
``FragmentMetadata`` (or its JSON)     :class:`~txn_engine.model.Fragment`
``lance.LanceOperation.*``             the operation types of :mod:`txn_engine.ops`
``lance.dataset.Transaction``          :class:`~txn_engine.transaction.Transaction`
``lance.dataset.Index``                :class:`~txn_engine.model.IndexMetadata`
``LanceSchema`` / ``pyarrow.Schema``   a tuple of :class:`~txn_engine.model.LanceField`
``LanceDataset``                       :class:`~txn_engine.dataset.Dataset` (``base=``;
                                       :func:`txn_engine.dataset.as_base`)
=====================================  ==========================================

Anything else is refused with :class:`~txn_engine.errors.InvalidOperationError` saying
what was expected. pylance is never imported here: its objects are recognised by
their class (module ``lance...`` and name), so the core imports without pylance installed.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, cast, get_args

from txn_engine import ops
from txn_engine.errors import InvalidOperationError
from txn_engine.model import (
    DataFile,
    Fragment,
    IndexDetails,
    IndexFile,
    IndexMetadata,
    LanceField,
)
from txn_engine.ops import Operation, UpdateMap
from txn_engine.ops._accept import arrow_schema_metadata, is_pylance, pylance_name
from txn_engine.ops.data import SchemaMetadata
from txn_engine.transaction import Transaction

__all__ = [
    "SchemaMetadata",
    "as_data_file",
    "as_fields",
    "as_fragment",
    "as_fragments",
    "as_index",
    "as_indices",
    "as_operation",
    "as_transaction",
    "is_pylance",
    "schema_metadata_of",
]


def _refuse(what: str, value: object) -> InvalidOperationError:
    cls = type(value)
    return InvalidOperationError(
        f"expected {what}, got {cls.__module__}.{cls.__qualname__}: {value!r:.200}"
    )


# ---- fragments and files ----------------------------------------------------------------


def as_fragment(value: object) -> Fragment:
    """A :class:`Fragment` from a Fragment, a pylance ``FragmentMetadata``, its
    ``to_json()`` dict or JSON text."""
    if type(value) is Fragment:
        return value
    if isinstance(value, Fragment):
        return value
    if is_pylance(value, "FragmentMetadata") or isinstance(value, (Mapping, str, bytes)):
        return Fragment.from_lance_json(value)
    raise _refuse("a txn_engine.Fragment or a pylance FragmentMetadata", value)


def as_fragments(values: Iterable[object]) -> tuple[Fragment, ...]:
    """:func:`as_fragment` of each value (a single fragment is refused: give a list)."""
    if isinstance(values, (Fragment, str, bytes, Mapping)) or is_pylance(
        values, "FragmentMetadata"
    ):
        raise _refuse("a sequence of fragments", values)
    try:
        items = tuple(values)
    except TypeError:
        raise _refuse("a sequence of fragments", values) from None
    for v in items:  # the common case (decoding, building from Fragments): nothing to convert
        if type(v) is not Fragment:
            return tuple(as_fragment(v) for v in items)
    return cast("tuple[Fragment, ...]", items)


def as_data_file(value: object) -> DataFile:
    """A :class:`DataFile` from a DataFile or a pylance ``DataFile``."""
    if isinstance(value, DataFile):
        return value
    if is_pylance(value, "DataFile"):
        v: Any = value
        return DataFile(
            path=str(v.path),
            fields=tuple(v.fields),
            column_indices=tuple(v.column_indices),
            file_major_version=int(v.file_major_version),
            file_minor_version=int(v.file_minor_version),
            file_size_bytes=int(getattr(v, "file_size_bytes", 0) or 0),
            base_id=getattr(v, "base_id", None),
        )
    raise _refuse("a txn_engine.DataFile or a pylance DataFile", value)


# ---- schemas ----------------------------------------------------------------------------


def _lance_schema_fields(schema: Any) -> tuple[LanceField, ...]:
    """LanceFields of a pylance ``LanceSchema``: types from its Arrow form, ids from the
    LanceSchema itself (they are what the data files were written with)."""
    from txn_engine.format.schema import arrow_to_lance_fields

    ids: dict[tuple[str, ...], int] = {}

    def walk(field: Any, path: tuple[str, ...]) -> None:
        here = (*path, str(field.name()))
        ids.setdefault(here, int(field.id()))
        for child in field.children():
            walk(child, here)

    for top in schema.fields():
        walk(top, ())
    fields = arrow_to_lance_fields(schema.to_pyarrow())
    path_of: dict[int, tuple[str, ...]] = {-1: ()}
    new_id: dict[int, int] = {-1: -1}
    out: list[LanceField] = []
    for f in fields:
        path = (*path_of[f.parent_id], f.name)
        path_of[f.id] = path
        if path not in ids:
            raise InvalidOperationError(
                f"LanceSchema field {'.'.join(path)!r} has no id txn_engine can match"
            )
        new_id[f.id] = ids[path]
    for f in fields:
        out.append(_with_ids(f, new_id[f.id], new_id[f.parent_id]))
    return tuple(out)


def _with_ids(f: LanceField, field_id: int, parent_id: int) -> LanceField:
    import attrs

    return attrs.evolve(f, id=field_id, parent_id=parent_id)


def as_fields(value: object) -> tuple[LanceField, ...]:
    """Lance fields from a sequence of :class:`LanceField`, a pylance ``LanceSchema``
    (ids kept) or a ``pyarrow.Schema`` (ids assigned in pre-order from 0)."""
    if is_pylance(value, "LanceSchema"):
        return _lance_schema_fields(value)
    if type(value).__name__ == "Schema" and type(value).__module__.startswith("pyarrow"):
        from txn_engine.format.schema import arrow_to_lance_fields

        return arrow_to_lance_fields(value)
    if isinstance(value, (str, bytes, Mapping)):
        raise _refuse("Lance fields, a pylance LanceSchema or a pyarrow.Schema", value)
    try:
        items = tuple(cast("Iterable[object]", value))
    except TypeError:
        raise _refuse("Lance fields, a pylance LanceSchema or a pyarrow.Schema", value) from None
    out: list[LanceField] = []
    for item in items:
        if not isinstance(item, LanceField):
            raise _refuse("a txn_engine.LanceField", item)
        out.append(item)
    return tuple(out)


def schema_metadata_of(schema: object) -> dict[str, bytes] | None:
    """The schema-level metadata a pylance ``LanceSchema`` or a ``pyarrow.Schema`` carries
    (empty when it has none); None for anything else (Lance fields carry none)."""
    if is_pylance(schema, "LanceSchema"):
        return arrow_schema_metadata(cast("Any", schema).to_pyarrow())
    return arrow_schema_metadata(schema)


# ---- indices -----------------------------------------------------------------------------


def _millis(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.UTC)
        return int(value.timestamp() * 1000)
    return int(value)


def as_index(value: object) -> IndexMetadata:
    """An :class:`IndexMetadata` from one, or from a pylance ``Index`` (what
    ``create_index_uncommitted`` returns)."""
    if isinstance(value, IndexMetadata):
        return value
    if is_pylance(value, "Index"):
        v: Any = value
        details = v.index_details
        frag_ids = v.fragment_ids
        files = [
            IndexFile(str(f.path), int(getattr(f, "size_bytes", 0) or 0)) for f in v.files or ()
        ]
        return IndexMetadata(
            uuid=str(v.uuid),
            name=str(v.name),
            fields=tuple(int(x) for x in v.fields),
            dataset_version=int(v.dataset_version),
            fragment_bitmap=None if frag_ids is None else [int(x) for x in frag_ids],
            index_details=None if details is None else IndexDetails(details[0], bytes(details[1])),
            index_version=None if v.index_version is None else int(v.index_version),
            created_at=_millis(v.created_at),
            base_id=v.base_id,
            files=files,
            covering_fields=tuple(int(x) for x in (v.covering_fields or ())),
        )
    raise _refuse("a txn_engine.IndexMetadata or a pylance Index", value)


def as_indices(values: Iterable[object]) -> tuple[IndexMetadata, ...]:
    """:func:`as_index` of each value."""
    if isinstance(values, IndexMetadata) or is_pylance(values, "Index"):
        raise _refuse("a sequence of indices", values)
    return tuple(as_index(v) for v in values)


# ---- operations ---------------------------------------------------------------------------


def _update_map(value: Any) -> UpdateMap | None:
    if value is None:
        return None
    return UpdateMap(dict(value.updates), replace=bool(value.replace))


def _append(v: Any) -> Operation:
    return ops.Append(as_fragments(v.fragments))


def _delete(v: Any) -> Operation:
    return ops.Delete(
        updated_fragments=as_fragments(v.updated_fragments),
        deleted_fragment_ids=tuple(v.deleted_fragment_ids),
        predicate=str(v.predicate or ""),
    )


def _overwrite(v: Any) -> Operation:
    if v.initial_bases:
        raise InvalidOperationError(
            "pylance Overwrite with initial_bases: build txn_engine.Overwrite with "
            "BasePath values instead"
        )
    schema = v.new_schema
    return ops.Overwrite(as_fragments(v.fragments), as_fields(schema), schema_metadata_of(schema))


def _update(v: Any) -> Operation:
    offsets = v.updated_fragment_offsets or {}
    return ops.Update(
        removed_fragment_ids=tuple(v.removed_fragment_ids),
        updated_fragments=as_fragments(v.updated_fragments),
        new_fragments=as_fragments(v.new_fragments),
        fields_modified=tuple(v.fields_modified),
        fields_for_preserving_frag_bitmap=tuple(v.fields_for_preserving_frag_bitmap or ()),
        update_mode=ops.UpdateMode.REWRITE_COLUMNS
        if str(v.update_mode).lower() == "rewrite_columns"
        else ops.UpdateMode.REWRITE_ROWS,
        updated_fragment_offset_bitmaps={int(k): bytes(b) for k, b in offsets.items()},
    )


def _merge(v: Any) -> Operation:
    return ops.Merge(
        as_fragments(v.fragments),
        as_fields(v.schema),
        schema_metadata_of(v.schema),  # None for Lance fields: the table's is kept
        preserves_nullability=bool(v.preserves_nullability),
    )


def _project(v: Any) -> Operation:
    return ops.Project(as_fields(v.schema), preserves_nullability=bool(v.preserves_nullability))


def _restore(v: Any) -> Operation:
    return ops.Restore(int(v.version))


def _create_index(v: Any) -> Operation:
    return ops.CreateIndex(as_indices(v.new_indices), as_indices(v.removed_indices))


def _rewritten_index(r: Any) -> ops.RewrittenIndex:
    return ops.RewrittenIndex(
        old_id=str(r.old_id),
        new_id=str(r.new_id),
        new_index_details=IndexDetails(str(r.new_details_type_url), bytes(r.new_details_value))
        if r.new_details_type_url
        else None,
        new_index_version=int(r.new_index_version or 0),
    )


def _rewrite(v: Any) -> Operation:
    return ops.Rewrite(
        groups=[
            ops.RewriteGroup(as_fragments(g.old_fragments), as_fragments(g.new_fragments))
            for g in v.groups
        ],
        rewritten_indices=[_rewritten_index(r) for r in v.rewritten_indices],
    )


def _data_replacement(v: Any) -> Operation:
    return ops.DataReplacement(
        [
            ops.DataReplacementGroup(int(g.fragment_id), as_data_file(g.new_file))
            for g in v.replacements
        ]
    )


def _update_config(v: Any) -> Operation:
    return ops.UpdateConfig(
        config_updates=_update_map(v.config_updates),
        table_metadata_updates=_update_map(v.table_metadata_updates),
        schema_metadata_updates=_update_map(v.schema_metadata_updates),
        field_metadata_updates={
            int(k): _update_map(m) or UpdateMap()
            for k, m in (v.field_metadata_updates or {}).items()
        },
    )


def _clone(v: Any) -> Operation:
    return ops.Clone(
        is_shallow=bool(v.is_shallow),
        ref_name=v.ref_name,
        ref_version=int(v.ref_version),
        ref_path=str(v.ref_path),
        branch_name=v.branch_name,
    )


#: The converter of each pylance ``LanceOperation.*`` class, by class name.
_FROM_PYLANCE: Mapping[str, Callable[[Any], Operation]] = MappingProxyType(
    {
        "Append": _append,
        "Delete": _delete,
        "Overwrite": _overwrite,
        "Update": _update,
        "Merge": _merge,
        "Project": _project,
        "Restore": _restore,
        "CreateIndex": _create_index,
        "Rewrite": _rewrite,
        "DataReplacement": _data_replacement,
        "UpdateConfig": _update_config,
        "Clone": _clone,
    }
)


def _operation_from_pylance(name: str, v: Any) -> Operation:
    """The txn_engine operation of ``v``, a pylance ``LanceOperation.{name}`` value;
    InvalidOperationError for a kind the library has no equivalent of."""
    convert = _FROM_PYLANCE.get(name)
    if convert is None:
        raise InvalidOperationError(
            f"pylance LanceOperation.{name} has no txn_engine equivalent (supported: "
            f"{', '.join(_FROM_PYLANCE)})"
        )
    return convert(v)


#: the classes of the Operation union
_OPERATION_TYPES: tuple[type, ...] = get_args(Operation)


def as_operation(value: object) -> Operation:
    """A txn_engine operation from one, or from a pylance ``LanceOperation.*`` value."""
    if isinstance(value, _OPERATION_TYPES):
        return cast("Operation", value)
    name = pylance_name(value)
    if name is not None and hasattr(value, "__dataclass_fields__"):
        return _operation_from_pylance(name, value)
    raise _refuse(
        "a txn_engine operation (txn_engine.Append, ...) or a lance.LanceOperation", value
    )


def as_transaction(value: object, *, detached: bool = False) -> Transaction:
    """A :class:`~txn_engine.transaction.Transaction` from one, or from a pylance
    ``Transaction`` (``read_transaction``, ``execute_uncommitted``, ...): same read
    version, uuid and properties. Its read version must be a main-line version number
    (0 to 2**63 - 1), or with ``detached`` (a detached commit's) any version number: a
    detached version (top bit set) too."""
    if isinstance(value, Transaction):
        txn = value
    elif is_pylance(value, "Transaction"):
        v: Any = value
        txn = Transaction(
            int(v.read_version),
            as_operation(v.operation),
            uuid=str(v.uuid),
            properties=dict(v.transaction_properties or {}),
        )
    else:
        raise _refuse("a txn_engine.Transaction or a pylance Transaction", value)
    read = txn.read_version
    if type(read) is not int or not 0 <= read < 1 << (64 if detached else 63):
        hint = ""
        if type(read) is int and 1 << 63 <= read < 1 << 64:
            hint = ": a detached version, which only a detached commit builds on (detached=True)"
        raise InvalidOperationError(
            f"a transaction's read_version is a version number "
            f"(0 to 2**{64 if detached else 63} - 1), got {read!r}{hint}"
        )
    return txn
