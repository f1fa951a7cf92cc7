"""Where a namespace keeps things, and the records it writes (no lance_namespace needed).

Layout under the namespace root (a directory or an object-store prefix)::

    <root>/db/events.lance/                  the table ["db", "events"]: a plain Lance dataset
    <root>/_txn_namespace/tables/db$events.json        the table's registry record
    <root>/_txn_namespace/namespaces/db.json           a declared child namespace
    <root>/_txn_namespace/transactions/<id>.json       a transaction's decision (commit point)

Every record is written once with create-if-absent and never changed (a dropped table's
record is deleted): readers cache what they read.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from txn_engine import jsontext
from txn_engine.errors import CorruptManifestError, InvalidOperationError

__all__ = [
    "MARKER_KEY",
    "META_DIR",
    "RESERVATION_KEY",
    "Decision",
    "TableEntry",
    "TableRecord",
    "decision_path",
    "new_transaction_id",
    "parse_table_id",
    "table_key",
]

#: the config key a namespace transaction sets on each table it reserves (its id); every
#: later version carries it on (config is copied), so a writer sees from its own manifest
#: which transaction last reserved the table
MARKER_KEY = "txn_engine.namespace.transaction"
#: the transaction property of a reservation version (the no-op version a namespace
#: transaction commits first on each of its tables)
RESERVATION_KEY = "txn_engine.namespace.reservation"
META_DIR = "_txn_namespace"
_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")
_TXID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.~\-]{0,127}")
_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,119}")
_MAX_DEPTH = 8
_MAX_RECORD_BYTES = 16 << 20


def parse_table_id(table_id: str | Sequence[str]) -> tuple[str, ...]:
    """A table (or namespace) id as a tuple of parts: ``"db.events"`` or ``["db",
    "events"]``. Each part is 1-128 letters, digits, ``_``, ``.``, ``-`` starting with a
    letter or digit (so no part is ``..`` or a hidden name); at most 8 parts.
    Raises InvalidOperationError otherwise."""
    parts = tuple(table_id.split(".")) if isinstance(table_id, str) else tuple(table_id)
    if not parts or len(parts) > _MAX_DEPTH:
        raise InvalidOperationError(f"a table id has 1 to {_MAX_DEPTH} parts, got {parts!r}")
    for part in parts:
        if not isinstance(part, str) or not _PART.fullmatch(part) or part.endswith(".lance"):
            raise InvalidOperationError(
                f"table id part {part!r}: use 1-128 letters, digits, '_', '.', '-' "
                "starting with a letter or digit (and not ending in '.lance')"
            )
    return parts


def table_key(parts: Sequence[str]) -> str:
    """The registry name of a table id (parts joined by ``$``, the REST delimiter)."""
    return "$".join(parts)


def table_location(parts: Sequence[str]) -> str:
    """Where a table's dataset lives, relative to the namespace root."""
    return "/".join(parts) + ".lance"


def new_transaction_id() -> str:
    """A fresh transaction id: its start time (ns since the epoch, 16 hex digits) and a
    uuid, so ids sort by age (the wait-die order of :class:`NamespaceTransaction`)."""
    return f"{time.time_ns():016x}-{uuid.uuid4().hex}"


def check_transaction_id(txid: str) -> str:
    """Refuse an id that is not a safe object name (InvalidOperationError)."""
    if not isinstance(txid, str) or not _TXID.fullmatch(txid):
        raise InvalidOperationError(
            f"transaction id {txid!r}: use 1-128 letters, digits, '_', '.', '-'"
        )
    return txid


def started_ns(txid: str) -> int | None:
    """When a generated transaction id started (ns since the epoch); None for others."""
    found = re.fullmatch(r"([0-9a-f]{16})-[0-9a-f]{32}", txid)
    return int(found.group(1), 16) if found else None


def attempt_id(key: str, attempt: int) -> str:
    """The transaction id of attempt ``attempt`` under idempotency key ``key``."""
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise InvalidOperationError(
            f"idempotency key {key!r}: use 1-120 letters, digits, '_', '.', '-'"
        )
    return f"{key}~{attempt}"


def attempt_marker_path(txid: str) -> str:
    """The claim of an attempt under an idempotency key (written once, when it starts)."""
    return f"{META_DIR}/attempts/{check_transaction_id(txid)}"


def decision_path(txid: str) -> str:
    """The commit point of transaction ``txid`` (relative to the namespace root)."""
    return f"{META_DIR}/transactions/{check_transaction_id(txid)}.json"


def table_record_path(parts: Sequence[str]) -> str:
    return f"{META_DIR}/tables/{table_key(parts)}.json"


def namespace_record_path(parts: Sequence[str]) -> str:
    return f"{META_DIR}/namespaces/{table_key(parts)}.json"


def _load(data: bytes, what: str) -> dict[str, Any]:
    if len(data) > _MAX_RECORD_BYTES:
        raise CorruptManifestError(f"{what}: record larger than {_MAX_RECORD_BYTES} bytes")
    try:
        obj = jsontext.loads(data)
    except ValueError as exc:
        raise CorruptManifestError(f"{what}: not a JSON record: {exc}") from exc
    if not isinstance(obj, dict):
        raise CorruptManifestError(f"{what}: not a JSON object")
    return obj


@attrs.frozen
class TableRecord:
    """A table registered in the namespace: its id, location (relative to the root) and
    the properties given when it was declared."""

    id: tuple[str, ...]
    location: str
    properties: Mapping[str, str] = attrs.field(factory=dict)

    def to_bytes(self) -> bytes:
        body = {"id": list(self.id), "location": self.location, "properties": self.properties}
        return json.dumps(body, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes, what: str) -> TableRecord:
        obj = _load(data, what)
        ident, location, props = obj.get("id"), obj.get("location"), obj.get("properties", {})
        if not isinstance(location, str) or not isinstance(props, dict):
            raise CorruptManifestError(f"{what}: malformed table record")
        try:
            parts = parse_table_id(ident if isinstance(ident, list) else [])
        except InvalidOperationError as exc:
            raise CorruptManifestError(f"{what}: {exc}") from exc
        if location != table_location(parts):
            raise CorruptManifestError(f"{what}: location {location!r} is not the table's own")
        return cls(parts, location, {str(k): str(v) for k, v in props.items()})


@attrs.frozen
class TableEntry:
    """One table of a decided transaction: the version its change became (None: the
    table was reserved but not changed) and where its staged manifest waits."""

    id: tuple[str, ...]
    version: int | None
    staged: str | None
    path: str | None


@attrs.frozen
class Decision:
    """The commit point of a namespace transaction: ``committed`` with every table's
    entry, or ``aborted``. Written once (create-if-absent); whoever writes it first
    decides."""

    transaction: str
    state: str
    tables: tuple[TableEntry, ...] = ()

    @property
    def committed(self) -> bool:
        return self.state == "committed"

    def entry(self, parts: Sequence[str]) -> TableEntry | None:
        wanted = tuple(parts)
        return next((e for e in self.tables if e.id == wanted), None)

    def to_bytes(self) -> bytes:
        tables = [
            {"id": list(e.id), "version": e.version, "staged": e.staged, "path": e.path}
            for e in self.tables
        ]
        body = {"transaction": self.transaction, "state": self.state, "tables": tables}
        return json.dumps(body, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes, what: str) -> Decision:
        obj = _load(data, what)
        txid, state, tables = obj.get("transaction"), obj.get("state"), obj.get("tables")
        if not isinstance(txid, str) or state not in ("committed", "aborted"):
            raise CorruptManifestError(f"{what}: malformed decision")
        if not isinstance(tables, list):
            raise CorruptManifestError(f"{what}: malformed decision tables")
        return cls(txid, str(state), tuple(_entry(t, what) for t in tables))


def _entry(obj: object, what: str) -> TableEntry:
    if not isinstance(obj, dict):
        raise CorruptManifestError(f"{what}: malformed decision entry")
    version, staged, path = obj.get("version"), obj.get("staged"), obj.get("path")
    ok = (
        (version is None or (isinstance(version, int) and not isinstance(version, bool)))
        and (staged is None or isinstance(staged, str))
        and (path is None or isinstance(path, str))
        and (version is None) == (staged is None) == (path is None)
    )
    if not ok:
        raise CorruptManifestError(f"{what}: malformed decision entry")
    ident = obj.get("id")
    try:
        parts = parse_table_id(ident if isinstance(ident, list) else [])
    except InvalidOperationError as exc:
        raise CorruptManifestError(f"{what}: {exc}") from exc
    for p in (staged, path):
        if p is not None and (not p.startswith("_versions/") or "/" in p[10:] or ".." in p):
            raise CorruptManifestError(f"{what}: manifest path {p!r} outside _versions/")
    return TableEntry(parts, version, staged, path)


def join_uri(root: str, rel: str) -> str:
    """``root`` and a relative path joined with one ``/`` (a local root stays a path)."""
    return f"{os.fspath(root).rstrip('/')}/{rel}"
