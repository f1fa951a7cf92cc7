"""Parsing the ``df.write.format("txn_lance").option(...)`` options into typed values.

Spark hands a data source its options as strings in a case-insensitive map whose keys
arrive lower-cased, so every option here has a lower-case name. Options that carry a map
have two spellings that are merged (the prefixed keys win):

* one JSON object: ``.option("storage_options", '{"key": "...", "anon": false}')``
  (keeps the case of keys and allows non-string values);
* one option per key: ``.option("storage.endpoint_url", "http://...")`` (key lower-cased
  by Spark, value always a string).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Set
from types import MappingProxyType
from typing import Any

import attrs

from txn_engine import jsontext
from txn_engine.conflicts.isolation import ISOLATION_LEVELS
from txn_engine.errors import InvalidOperationError
from txn_engine.leases import MAX_LEASE_TTL
from txn_engine.redact import RedactingFilter, redact_options
from txn_engine.retry import RetryPolicy

__all__ = [
    "ReadOptions",
    "WriteOptions",
    "commit_retry_policy",
    "parse_read_options",
    "parse_write_options",
]

# the Spark integration logs URIs and option maps: never a secret in a log line
logging.getLogger("txn_engine.spark").addFilter(RedactingFilter())

#: Default upper bound on rows per data file (pylance's own default).
DEFAULT_MAX_ROWS_PER_FILE = 1024 * 1024
#: Default age after which a planned write's leftovers are swept (longer than any write).
DEFAULT_STAGING_RETENTION_SECONDS = 3 * 24 * 3600.0

_MAP_OPTIONS: Mapping[str, str] = MappingProxyType(
    {
        # option name -> prefix of the per-key spelling
        "storage_options": "storage.",
        "lance_storage_options": "lance_storage.",
        "properties": "property.",
        "retry_policy": "retry.",
    }
)

_SCALAR_OPTIONS: frozenset[str] = frozenset(
    {
        "path",
        "namespace",
        "table_id",
        "max_rows_per_file",
        "max_rows_per_group",
        "max_bytes_per_file",
        "data_storage_version",
        "commit_message",
        "write_id",
        "idempotency_lookback",
        "commit_attempts",
        "commit_report",
        "storage_factory",
        "staging_retention_seconds",
        "sweep_on_plan",
        "mergeschema",
        "merge_schema",
        "replacewhere",
        "replace_where",
        "isolation",
    }
)


@attrs.frozen
class WriteOptions:
    """Everything a Spark write can be configured with (see ``docs/spark.md``).

    ``storage_options`` are for txn_engine's own storage (fsspec options such as s3fs's
    ``key``/``secret``/``endpoint_url``; used for the commit, the staging markers and the
    clean-up). ``lance_storage_options`` are for pylance, which writes the data files
    (Lance object-store options such as ``aws_access_key_id``/``aws_endpoint``).
    """

    storage_options: Mapping[str, Any] = attrs.field(factory=dict, repr=lambda v: _masked(v))
    lance_storage_options: Mapping[str, str] = attrs.field(factory=dict, repr=lambda v: _masked(v))
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE
    max_rows_per_group: int | None = None
    max_bytes_per_file: int | None = None
    data_storage_version: str | None = None
    properties: Mapping[str, str] = attrs.field(factory=dict)
    commit_message: str | None = None
    retry_policy: Mapping[str, Any] = attrs.field(factory=dict)
    write_id: str | None = None
    idempotency_lookback: int = 100
    commit_attempts: int = 3
    commit_report: str | None = None
    storage_factory: str | None = None
    staging_retention_seconds: float = DEFAULT_STAGING_RETENTION_SECONDS
    sweep_on_plan: bool = True
    #: ``mergeSchema``: an append may bring new columns (added, all-null for the rows
    #: already there, in a schema-change commit before the append; see docs/spark.md).
    merge_schema: bool = False
    #: ``replaceWhere``: with mode overwrite, replace only the rows matching this Lance SQL
    #: filter by the DataFrame, in one Update (see docs/spark.md).
    replace_where: str | None = None
    #: ``namespace`` / ``table_id``: a namespace table instead of a path; the commit goes
    #: through the namespace (docs/namespace.md)
    namespace: str | None = None
    table_id: str | None = None
    #: ``isolation``: ``"snapshot"`` or ``"serializable"`` for this write's commit (None:
    #: the table's level, snapshot unless its config asks for more; docs/conflicts.md)
    isolation: str | None = None


def _json_object(name: str, text: str) -> dict[str, Any]:
    try:
        value = jsontext.loads(text)
    except ValueError as exc:
        raise InvalidOperationError(f"option {name!r} must be a JSON object: {exc}") from exc
    if not isinstance(value, dict):
        raise InvalidOperationError(
            f"option {name!r} must be a JSON object, got {type(value).__name__}"
        )
    return value


def _scalar(text: str) -> Any:
    """Best-effort typing of a per-key value: bool, int, float, else the string."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            continue
    return text


#: the largest integer option (an i64, as Lance's own counts and sizes are)
_MAX_INT = 2**63 - 1


def _int(name: str, text: str, *, minimum: int) -> int:
    """An integer option (every one has ``minimum >= 0``): ASCII digits only, as Spark and
    Lance parse it (``int`` would also take ``"1_000"`` or ``" 7"``), from ``minimum`` to
    2**63 - 1 (a larger row count or size failed late, inside pylance on the executors)."""
    value = jsontext.whole_number(text, _MAX_INT)
    if value is None:
        body = text[1:] if text.startswith("-") else text
        if not (body.isascii() and body.isdigit()):
            raise InvalidOperationError(f"option {name!r} must be an integer, got {text[:40]!r}")
        if text.startswith("-"):
            raise InvalidOperationError(f"option {name!r} must be >= {minimum}, got {text[:40]}")
        raise InvalidOperationError(f"option {name!r} must be at most {_MAX_INT}, got {text[:40]}")
    if value < minimum:
        raise InvalidOperationError(f"option {name!r} must be >= {minimum}, got {value}")
    return value


def _bool(name: str, text: str) -> bool:
    low = text.strip().lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise InvalidOperationError(f"option {name!r} must be true or false, got {text!r}")


#: Integer write options and their smallest allowed value.
_INT_OPTIONS: Mapping[str, int] = MappingProxyType(
    {
        "max_rows_per_file": 1,
        "max_rows_per_group": 1,
        "max_bytes_per_file": 1,
        "idempotency_lookback": 0,
        "commit_attempts": 1,
    }
)


def _split_options(
    options: Mapping[str, str],
    map_options: Mapping[str, str],
    scalar_options: Set[str],
    *,
    what: str,
    typed_maps: frozenset[str] = frozenset(),
) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    """Spark's option map (names lower-cased) and the map options gathered from both
    spellings: the JSON object (``storage_options``) and one option per key
    (``storage.<key>``, which wins). Values of the ``typed_maps`` per-key options are read
    as JSON scalars. Raises InvalidOperationError naming an unknown option."""
    lowered = {str(k).lower(): str(v) for k, v in options.items()}
    maps: dict[str, dict[str, Any]] = {name: {} for name in map_options}
    for name in map_options:
        if name in lowered:
            maps[name].update(_json_object(name, lowered[name]))
    for key, value in lowered.items():
        if key in map_options or key in scalar_options:
            continue
        for name, prefix in map_options.items():
            if key.startswith(prefix) and len(key) > len(prefix):
                maps[name][key[len(prefix) :]] = _scalar(value) if name in typed_maps else value
                break
        else:
            known = sorted(scalar_options | set(map_options))
            prefixes = sorted(map_options.values())
            raise InvalidOperationError(
                f"unknown txn_lance {what} {key!r}; known options: {', '.join(known)}; "
                f"per-key prefixes: {', '.join(p + '<key>' for p in prefixes)}"
            )
    return lowered, maps


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    """Turn a Spark option map into :class:`WriteOptions`.

    Unknown option names are rejected (a misspelt ``max_rows_per_file`` would otherwise be
    ignored silently). Raises :class:`~txn_engine.errors.InvalidOperationError` naming the
    offending option.
    """
    lowered, maps = _split_options(
        options,
        _MAP_OPTIONS,
        _SCALAR_OPTIONS,
        what="option",
        typed_maps=frozenset({"retry_policy"}),
    )
    kwargs: dict[str, Any] = {
        "storage_options": maps["storage_options"],
        "lance_storage_options": {k: str(v) for k, v in maps["lance_storage_options"].items()},
        "properties": {k: str(v) for k, v in maps["properties"].items()},
        "retry_policy": maps["retry_policy"],
    }
    for name, minimum in _INT_OPTIONS.items():
        if name in lowered:
            kwargs[name] = _int(name, lowered[name], minimum=minimum)
    if "staging_retention_seconds" in lowered:
        try:
            kwargs["staging_retention_seconds"] = float(lowered["staging_retention_seconds"])
        except ValueError as exc:
            raise InvalidOperationError(
                "option 'staging_retention_seconds' must be a number of seconds"
            ) from exc
    if "sweep_on_plan" in lowered:
        kwargs["sweep_on_plan"] = _bool("sweep_on_plan", lowered["sweep_on_plan"])
    for name in ("mergeschema", "merge_schema"):
        if name in lowered:
            kwargs["merge_schema"] = _bool("mergeSchema", lowered[name])
    for name in ("replacewhere", "replace_where"):
        if name in lowered:
            if not lowered[name].strip():
                raise InvalidOperationError("option 'replaceWhere' must be a filter expression")
            kwargs["replace_where"] = lowered[name]
    if "isolation" in lowered:
        kwargs["isolation"] = _isolation(lowered["isolation"])
    for name in (
        "data_storage_version",
        "commit_message",
        "write_id",
        "commit_report",
        "storage_factory",
        "namespace",
        "table_id",
    ):
        if name in lowered and lowered[name] != "":
            kwargs[name] = lowered[name]
    return WriteOptions(**kwargs)


def commit_retry_policy(options: WriteOptions) -> RetryPolicy | None:
    """The commit loop's retry policy from the ``retry.*`` options (None: its default).
    Raises InvalidOperationError naming the options when they do not make a policy."""
    if not options.retry_policy:
        return None
    try:
        return RetryPolicy(**dict(options.retry_policy))
    except (TypeError, ValueError) as exc:
        raise InvalidOperationError(
            f"bad retry policy options {dict(options.retry_policy)}: {exc}"
        ) from exc


def _isolation(text: str) -> str:
    level = text.strip().lower()
    if level not in ISOLATION_LEVELS:
        raise InvalidOperationError(
            f"option 'isolation' must be one of {', '.join(ISOLATION_LEVELS)}, got {text[:40]!r}"
        )
    return level


# --------------------------------------------------------------------------- reads

_READ_SCALAR_OPTIONS: frozenset[str] = frozenset(
    {
        "path",
        "namespace",
        "table_id",
        "version",
        "timestamp",
        "tag",
        "columns",
        "rows_per_partition",
        "batch_size",
        "filter_pushdown",
        "lease_ttl",
    }
)
_READ_MAP_OPTIONS: Mapping[str, str] = MappingProxyType(
    {
        "storage_options": "storage.",
        "lance_storage_options": "lance_storage.",
    }
)


def _masked(value: Mapping[str, Any]) -> str:
    """Storage options as shown in a repr: secret-looking values are ``***``."""
    return repr(redact_options(value))


@attrs.frozen
class ReadOptions:
    """Everything ``spark.read.format("txn_lance")`` can be configured with.

    At most one of ``version`` / ``timestamp`` / ``tag`` (time travel; default: the
    latest version when the DataFrame is created). ``timestamp`` is ISO 8601 (without an
    offset it is UTC) or seconds since the epoch: the latest version committed at or
    before it. ``columns`` restricts the DataFrame to those columns (the only way to prune
    columns: Spark 4.3 does not tell Python data sources which columns a query uses).
    ``rows_per_partition``: fragments with fewer live rows are grouped into one Spark
    partition up to about this many rows; a larger fragment is a partition of its own.
    ``storage_options`` are for txn_engine's manifest reads (driver),
    ``lance_storage_options`` for pylance's data-file reads (executors); both take Lance's
    option names, and when only one set is given it is used for both.
    ``lease_ttl``: seconds the pinned version is leased for when the DataFrame is created
    (``txn_engine.retention`` keeps it that long; 0: no lease).
    """

    version: int | None = None
    timestamp: str | None = None
    tag: str | None = None
    columns: tuple[str, ...] | None = None
    rows_per_partition: int = DEFAULT_MAX_ROWS_PER_FILE
    batch_size: int | None = None
    filter_pushdown: bool = True
    lease_ttl: int = 3600
    storage_options: Mapping[str, Any] = attrs.field(factory=dict, repr=_masked)
    lance_storage_options: Mapping[str, str] = attrs.field(factory=dict, repr=_masked)
    #: ``namespace`` / ``table_id``: a namespace table instead of a path
    namespace: str | None = None
    table_id: str | None = None


def parse_read_options(options: Mapping[str, str]) -> ReadOptions:
    """Turn a Spark read option map into :class:`ReadOptions`.

    Unknown option names are rejected, as for writes. Raises
    :class:`~txn_engine.errors.InvalidOperationError` naming the offending option (also
    when more than one of ``version``, ``timestamp`` and ``tag`` is given).
    """
    lowered, maps = _split_options(
        options, _READ_MAP_OPTIONS, _READ_SCALAR_OPTIONS, what="read option"
    )
    travel = [name for name in ("version", "timestamp", "tag") if lowered.get(name, "") != ""]
    if len(travel) > 1:
        raise InvalidOperationError(
            f"give at most one of the read options version, timestamp and tag; got {travel}"
        )
    kwargs: dict[str, Any] = {
        "storage_options": maps["storage_options"],
        "lance_storage_options": {k: str(v) for k, v in maps["lance_storage_options"].items()},
    }
    if lowered.get("version", "") != "":
        kwargs["version"] = _int("version", lowered["version"], minimum=1)
    for name in ("timestamp", "tag", "namespace", "table_id"):
        if lowered.get(name, "") != "":
            kwargs[name] = lowered[name]
    if "columns" in lowered:
        names = tuple(c.strip() for c in lowered["columns"].split(",") if c.strip())
        if not names:
            raise InvalidOperationError("option 'columns' must name at least one column")
        kwargs["columns"] = names
    if "rows_per_partition" in lowered:
        kwargs["rows_per_partition"] = _int(
            "rows_per_partition", lowered["rows_per_partition"], minimum=1
        )
    if "batch_size" in lowered:
        kwargs["batch_size"] = _int("batch_size", lowered["batch_size"], minimum=1)
    if "filter_pushdown" in lowered:
        kwargs["filter_pushdown"] = _bool("filter_pushdown", lowered["filter_pushdown"])
    if "lease_ttl" in lowered:
        kwargs["lease_ttl"] = ttl = _int("lease_ttl", lowered["lease_ttl"], minimum=0)
        if ttl > MAX_LEASE_TTL:
            raise InvalidOperationError(
                f"option 'lease_ttl' must be at most {MAX_LEASE_TTL:.0f} seconds (ten years), "
                f"got {ttl}"
            )
    return ReadOptions(**kwargs)
