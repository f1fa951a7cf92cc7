"""JSON text read strictly, as Lance reads it: one parser for every JSON object of a table.

Tags, branches, leases, cleanup markers, Spark staging records and stream progress are JSON
objects other processes wrote, so their bytes are input like any other: :func:`loads` is
the only way txn_engine parses them. It differs from :func:`json.loads` where that would
let a hostile file escape as something other than ``ValueError``, or hand back values
the Rust side of Lance (``serde_json``) never does:

* nesting deeper than :data:`MAX_DEPTH` is a ``ValueError``. :func:`json.loads` raises
  ``RecursionError`` for a few thousand ``[``, and a value nested just below Python's
  recursion limit raises it later, in whatever walks it (``str()``, ``==``). Here Lance
  is more lenient: pylance 14.0.2 lists a tag whose unknown field nests 100,000 levels
  deep (it skips fields it does not read). No file Lance or txn_engine writes nests at
  all (a tag, a branch or a lease is a flat object; ``metadata`` maps strings to
  strings), so only a damaged or hostile file is refused, with a typed error;
* ``NaN``, ``Infinity`` and numbers beyond a float's range (``1e400``) are a
  ``ValueError`` (``serde_json`` refuses them; :func:`json.loads` returns a float that
  ``int()`` turns into ``OverflowError``);
* bytes that are not UTF-8 are a ``ValueError`` (``UnicodeDecodeError`` is one).

A caller catches ``ValueError`` and turns it into its own typed error (for example
:class:`~txn_engine.errors.CorruptManifestError` for a tag file).

Numbers given as text outside JSON (option values, a width in a logical type, a version
on a command line) are read by :func:`whole_number`, as strictly: ASCII digits only, as
Rust's ``str::parse`` takes them.
"""

from __future__ import annotations

import json
import math
from typing import Any, NoReturn

__all__ = ["MAX_DEPTH", "loads", "whole_number"]

#: Deepest nesting of arrays and objects accepted: ``serde_json``'s default recursion limit
#: (Lance's parser, for the values it decodes), far below Python's wherever a value is walked.
MAX_DEPTH = 128


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"JSON number {text[:40]!r} is out of range")
    return value


def _constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON value")


def _check_depth(value: Any) -> None:
    """Raise ValueError when ``value`` nests deeper than MAX_DEPTH (walked without
    recursion, once per array or object)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > MAX_DEPTH:
            raise ValueError(f"JSON nested deeper than {MAX_DEPTH} levels")
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


def loads(data: str | bytes | bytearray) -> Any:
    """Parse JSON text; any input that is not strict JSON raises ``ValueError`` (never
    ``RecursionError``, ``OverflowError`` or ``UnicodeDecodeError`` on its own).

    Catch ``ValueError`` and report the file it came from in your own typed error.
    """
    try:
        value = json.loads(data, parse_float=_finite, parse_constant=_constant)
    except RecursionError:
        raise ValueError(f"JSON nested deeper than {MAX_DEPTH} levels") from None
    _check_depth(value)
    return value


def whole_number(text: str, maximum: int) -> int | None:
    """``text`` as a whole number from 0 to ``maximum``, or None when it is not one:
    ASCII digits only (``int`` would also take ``"1_000"``, ``" 7 "`` and non-ASCII
    digits, and raise ``ValueError`` past 4,300 digits, where this stops at the digits
    ``maximum`` has)."""
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(maximum)):
        return None
    value = int(text)
    return value if value <= maximum else None
