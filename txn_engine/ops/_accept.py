"""What the operations and the Transaction accept: the library's own values only.

pylance objects are converted where they enter the library (:func:`txn_engine.commit`,
``replan_and_commit``, the writer API, the :class:`~txn_engine.Committer`, the Spark
source), by :mod:`txn_engine.interop`. Given to an operation's field or to a
Transaction, one is refused here with :class:`~txn_engine.errors.InvalidOperationError`
naming the conversion to use. pylance is never imported: its objects are recognised by
their class (module ``lance...`` and name), as :mod:`txn_engine.interop` recognises them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, cast

from txn_engine.errors import InvalidOperationError
from txn_engine.model import DataFile, Fragment, IndexMetadata, LanceField

__all__ = [
    "arrow_schema_metadata",
    "data_file",
    "fields",
    "fragments",
    "indices",
    "is_pylance",
    "pylance_name",
    "refusal",
]

#: The txn_engine.interop call that converts each pylance class the library knows.
_CONVERSIONS: Mapping[str, str] = MappingProxyType(
    {
        "FragmentMetadata": "as_fragments([...])",
        "DataFile": "as_data_file(...)",
        "LanceSchema": "as_fields(...)",
        "Index": "as_indices([...])",
        "Transaction": "as_transaction(...)",
    }
)


def pylance_name(value: object) -> str | None:
    """``"Append"``, ``"FragmentMetadata"``, ... for a pylance object, else None."""
    cls = type(value)
    module = getattr(cls, "__module__", "") or ""
    if module == "lance" or module.startswith("lance."):
        return cls.__name__
    return None


def is_pylance(value: object, name: str | None = None) -> bool:
    """Whether ``value`` is a pylance object (of class ``name`` when given)."""
    found = pylance_name(value)
    return found is not None and (name is None or found == name)


def _remedy(value: object, name: str, conversion: str) -> str:
    """What to do with ``value``, a pylance object of class ``name``, given where
    ``conversion`` (the txn_engine.interop call for the expected value) would convert one."""
    call = _CONVERSIONS.get(name)
    if call is None:  # a lance.LanceOperation.* value is a dataclass
        call = "as_operation(...)" if hasattr(value, "__dataclass_fields__") else conversion
    return (
        f"a pylance {name}: convert it with txn_engine.interop.{call}, or pass pylance's own "
        "operation/transaction to txn_engine.commit, which converts it"
    )


def refusal(what: str, value: object, conversion: str) -> InvalidOperationError:
    """The error for ``value`` given where ``what`` is expected. For a pylance object it
    names what to do: the txn_engine.interop call (``conversion`` for the expected value),
    or committing pylance's own operation or transaction; for a fragment's JSON,
    :meth:`~txn_engine.model.Fragment.from_lance_json`."""
    cls = type(value)
    message = f"expected {what}, got {cls.__module__}.{cls.__qualname__}: {value!r:.200}"
    name = pylance_name(value)
    if name is not None:
        message += f"; {_remedy(value, name, conversion)}"
    elif conversion.startswith("as_fragments") and isinstance(value, (Mapping, str, bytes)):
        message += (
            "; a fragment's JSON: build it with txn_engine.Fragment.from_lance_json(...) "
            "(or txn_engine.interop.as_fragments([...]))"
        )
    return InvalidOperationError(message)


def _items(values: object, what: str, conversion: str) -> tuple[object, ...]:
    """``values`` as a tuple: a single value (a str, a mapping, a pylance object) or a
    non-iterable one is refused: give a sequence."""
    if isinstance(values, (str, bytes, Mapping)) or pylance_name(values) is not None:
        raise refusal(what, values, conversion)
    try:
        return tuple(cast("Iterable[object]", values))
    except TypeError:
        raise refusal(what, values, conversion) from None


def _sequence(values: object, cls: type, plural: str, conversion: str) -> tuple[Any, ...]:
    """The ``cls`` values of the sequence ``values`` (``plural``: what they are called);
    a single ``cls`` value, and any item that is not one, is refused."""
    what = f"a sequence of {plural} (txn_engine.{cls.__name__} values)"
    if isinstance(values, cls):
        raise refusal(what, values, conversion)
    items = _items(values, what, conversion)
    for item in items:
        if not isinstance(item, cls):
            raise refusal(f"a txn_engine.{cls.__name__}", item, conversion)
    return items


def fragments(values: Iterable[Fragment]) -> tuple[Fragment, ...]:
    """The :class:`Fragment` values of ``values``; anything else is refused."""
    return _sequence(values, Fragment, "fragments", "as_fragments([...])")


def data_file(value: DataFile) -> DataFile:
    """``value`` if it is a :class:`DataFile`; anything else is refused."""
    if isinstance(value, DataFile):
        return value
    raise refusal("a txn_engine.DataFile", value, "as_data_file(...)")


def indices(values: Iterable[IndexMetadata]) -> tuple[IndexMetadata, ...]:
    """The :class:`IndexMetadata` values of ``values``; anything else is refused."""
    return _sequence(values, IndexMetadata, "indices", "as_indices([...])")


def _is_arrow_schema(value: object) -> bool:
    cls = type(value)
    return cls.__name__ == "Schema" and (getattr(cls, "__module__", "") or "").startswith("pyarrow")


def fields(value: object) -> tuple[LanceField, ...]:
    """Lance fields from a sequence of :class:`LanceField` or a ``pyarrow.Schema`` (ids
    assigned in pre-order from 0); anything else is refused."""
    if _is_arrow_schema(value):
        from txn_engine.format.schema import arrow_to_lance_fields

        return arrow_to_lance_fields(cast("Any", value))
    what = "Lance fields or a pyarrow.Schema"
    out: list[LanceField] = []
    for item in _items(value, what, "as_fields(...)"):
        if not isinstance(item, LanceField):
            raise refusal("a txn_engine.LanceField", item, "as_fields(...)")
        out.append(item)
    return tuple(out)


def arrow_schema_metadata(schema: object) -> dict[str, bytes] | None:
    """The schema-level metadata a ``pyarrow.Schema`` carries (empty when it has none);
    None for anything else (Lance fields carry none)."""
    if not _is_arrow_schema(schema):
        return None
    from txn_engine.format.schema import arrow_to_schema_metadata

    return arrow_to_schema_metadata(cast("Any", schema))
