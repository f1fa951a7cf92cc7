"""The ``txn-engine`` command line tool.

    txn-engine log URI [--json]                 versions with time, operation, writer
                                                (a damaged version is marked; exit 1)
    txn-engine show URI [--version N] [--json]  summary of one version's manifest
    txn-engine serve-namespace ROOT [--port N]  the Lance REST namespace API over ROOT

Subcommands live in :data:`COMMANDS` (name -> :class:`Command`, in the order ``--help``
lists them); add one by writing a function that configures its argparse sub-parser and one
that runs it and returns the exit code, and listing the ``Command`` in ``_commands``. Errors
from txn_engine print one line to stderr and exit 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, TextIO

from txn_engine import jsontext
from txn_engine._proto import table_pb2
from txn_engine.apps._command import (
    Command,
    parse_options,
    run_command_line,
    storage_option_arguments,
)
from txn_engine.apps._command import build_parser as _build_parser
from txn_engine.apps.stress import COMMAND as STRESS
from txn_engine.dataset import Dataset, version_history
from txn_engine.format.flags import describe_flags

__all__ = ["COMMANDS", "Command", "build_parser", "main"]


# --------------------------------------------------------------------------- helpers


def _table(rows: Sequence[Sequence[str]], headers: Sequence[str]) -> str:
    """Left-aligned columns separated by two spaces."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


def _dash(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


def _index_type(index: table_pb2.IndexMetadata) -> str:
    if not index.HasField("index_details"):
        return "unknown"
    name = index.index_details.type_url.rsplit("/", 1)[-1].rsplit(".", 1)[-1]
    return name.removesuffix("IndexDetails") or "unknown"


def _open(args: argparse.Namespace) -> Dataset:
    return Dataset.open(
        args.uri,
        version=getattr(args, "version", None),
        storage_options=parse_options(getattr(args, "storage_option", [])),
    )


def _tags_by_version(ds: Dataset) -> dict[int, list[str]]:
    """Main-line version -> names of the tags (``_refs/tags/``) pointing at it."""
    out: dict[int, list[str]] = {}
    for tag in ds.tags():
        if tag.branch is None:
            out.setdefault(tag.version, []).append(tag.name)
    return out


def _version_or_tag(text: str) -> int | str:
    """``--version`` of show: a number, or a tag name."""
    number = jsontext.whole_number(text, 2**63 - 1)
    return text if number is None else number  # "²" or 5,000 digits: a tag name


# --------------------------------------------------------------------------- log


def _configure_log(p: argparse.ArgumentParser) -> None:
    p.add_argument("uri", help="dataset URI or path")
    p.add_argument("--json", action="store_true", help="machine-readable JSON output")
    storage_option_arguments(p)


def _run_log(args: argparse.Namespace, out: TextIO) -> int:
    from txn_engine.format.refs import list_branches, list_tags
    from txn_engine.storage import open_storage

    # no Dataset.open: the latest manifest may be the damaged one; every damaged version
    # is listed with its error (exit 1) and the others as usual
    storage = open_storage(args.uri, parse_options(args.storage_option))
    versions = version_history(storage)
    if not versions:
        Dataset.open(storage)  # raises DatasetNotFoundError with the usual message
    tags: dict[int, list[str]] = {}
    for tag in list_tags(storage):
        if tag.branch is None:
            tags.setdefault(tag.version, []).append(tag.name)
    branches = list_branches(storage)
    status = 1 if any(v.error for v in versions) else 0
    if args.json:
        records = [{**v.to_json(), "tags": tags.get(v.version, [])} for v in versions]
        json.dump(records, out, indent=2)
        out.write("\n")
        return status
    rows = [
        [
            str(v.version),
            "-" if v.timestamp is None else v.timestamp.strftime("%Y-%m-%d %H:%M:%S UTC"),
            v.operation or ("UNREADABLE" if v.error else "?"),
            _dash(v.read_version),
            _dash(v.writer),
            _dash(v.uuid),
            ", ".join(tags.get(v.version, [])) or "-",
        ]
        for v in versions
    ]
    out.write(_table(rows, ["VERSION", "TIMESTAMP", "OPERATION", "READ", "WRITER", "UUID", "TAGS"]))
    out.write("\n")
    for b in branches:
        parent = b.parent_branch or "main"
        out.write(f"branch {b.name}: from {parent} version {b.parent_version}\n")
    for v in versions:
        if v.error:
            out.write(f"v{v.version}: {v.error}\n")
    return status


# --------------------------------------------------------------------------- show


def _configure_show(p: argparse.ArgumentParser) -> None:
    p.add_argument("uri", help="dataset URI or path")
    p.add_argument(
        "--version",
        type=_version_or_tag,
        default=None,
        help="version number or tag name to show (default latest)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable JSON output")
    storage_option_arguments(p)


def _schema_summary(m: table_pb2.Manifest) -> list[dict[str, Any]]:
    """One record per field of ``m``, with its nesting depth (top-level fields: 0)."""
    depth: dict[int, int] = {}
    schema = []
    for f in m.fields:
        depth[f.id] = depth.get(f.parent_id, -1) + 1
        schema.append(
            {
                "id": f.id,
                "parent_id": f.parent_id,
                "name": f.name,
                "type": f.logical_type,
                "nullable": f.nullable,
                "depth": depth[f.id],
            }
        )
    return schema


def _fragments_summary(ds: Dataset) -> list[dict[str, Any]]:
    """One record per fragment of ``ds``: files, rows (physical, deleted, live), deletion
    file, stable row ids."""
    counts = {fid: (phys, deleted) for fid, phys, deleted in ds.fragment_row_counts()}
    fragments = []
    for frag in ds.manifest_pb.fragments:
        phys, deleted = counts[frag.id]
        fragments.append(
            {
                "id": frag.id,
                "files": len(frag.files),
                "physical_rows": phys,
                "deleted_rows": deleted,
                "rows": phys - deleted,
                "deletion_file": None
                if not frag.HasField("deletion_file")
                else {
                    "type": "bitmap" if frag.deletion_file.file_type else "arrow",
                    "read_version": frag.deletion_file.read_version,
                    "id": frag.deletion_file.id,
                },
                "stable_row_ids": frag.WhichOneof("row_id_sequence") is not None,
            }
        )
    return fragments


def _summary(ds: Dataset) -> dict[str, Any]:
    """What ``txn-engine show`` prints of one version (its ``--json`` output)."""
    m = ds.manifest_pb
    schema = _schema_summary(m)
    fragments = _fragments_summary(ds)
    indices = [
        {
            "name": i.name,
            "type": _index_type(i),
            "fields": list(i.fields),
            "uuid": i.uuid.uuid.hex(),
            "dataset_version": i.dataset_version,
        }
        for i in ds.indices_pb
    ]
    from txn_engine.redact import redact_uri

    return {
        "uri": redact_uri(ds.uri),
        "version": ds.version,
        "manifest": ds.manifest_path,
        "naming_scheme": ds.naming_scheme.name,
        "data_format": f"{m.data_format.file_format} {m.data_format.version}".strip() or None,
        "writer": (
            f"{m.writer_version.library} {m.writer_version.version}"
            if m.HasField("writer_version")
            else None
        ),
        "timestamp": _manifest_time(m),
        "schema": schema,
        "schema_metadata": sorted(m.schema_metadata),
        "fragments": fragments,
        "rows": sum(f["rows"] for f in fragments),
        "deleted_rows": sum(f["deleted_rows"] for f in fragments),
        "max_fragment_id": m.max_fragment_id if m.HasField("max_fragment_id") else None,
        "next_row_id": m.next_row_id,
        "indices": indices,
        "config": dict(sorted(m.config.items())),
        "table_metadata": dict(sorted(m.table_metadata.items())),
        "reader_feature_flags": {
            "value": m.reader_feature_flags,
            "names": describe_flags(m.reader_feature_flags),
        },
        "writer_feature_flags": {
            "value": m.writer_feature_flags,
            "names": describe_flags(m.writer_feature_flags),
        },
        "transaction_file": m.transaction_file or None,
        "inline_transaction": ds.manifest_file.transaction is not None,
        "tag": m.tag or None,
        "tags": ds.tags_of(),
    }


def _manifest_time(m: table_pb2.Manifest) -> str | None:
    """The commit time as ISO 8601, or a note when it is out of range (a damaged field
    does not hide the rest of the version)."""
    if not m.HasField("timestamp"):
        return None
    try:
        return str(m.timestamp.ToDatetime().isoformat()) + "Z"
    except (ValueError, OverflowError, OSError):
        return f"out of range ({m.timestamp.seconds}s {m.timestamp.nanos}ns)"


def _show_head(s: dict[str, Any]) -> str:
    """The ``key  value`` lines at the top of ``txn-engine show``."""

    def flags(f: dict[str, Any]) -> str:
        return f"{f['value']} ({', '.join(f['names'])})" if f["names"] else "0"

    head = [
        ("uri", s["uri"]),
        ("version", str(s["version"])),
        ("tags", ", ".join(s["tags"]) or "-"),
        ("manifest", s["manifest"]),
        ("naming scheme", s["naming_scheme"]),
        ("data format", _dash(s["data_format"])),
        ("writer", _dash(s["writer"])),
        ("timestamp", _dash(s["timestamp"])),
        ("rows", f"{s['rows']} ({s['deleted_rows']} deleted)"),
        ("fragments", f"{len(s['fragments'])} (max id {_dash(s['max_fragment_id'])})"),
        ("reader flags", flags(s["reader_feature_flags"])),
        ("writer flags", flags(s["writer_feature_flags"])),
        (
            "transaction",
            _dash(s["transaction_file"]) + (" (inline)" if s["inline_transaction"] else ""),
        ),
    ]
    width = max(len(k) for k, _ in head)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in head)


def _show_schema(s: dict[str, Any]) -> str:
    """The ``Schema:`` table of ``txn-engine show`` (nested fields indented)."""
    return "Schema:\n" + _table(
        [
            [
                "  " * f["depth"] + f["name"],
                f["type"],
                "yes" if f["nullable"] else "no",
                str(f["id"]),
            ]
            for f in s["schema"]
        ],
        ["FIELD", "TYPE", "NULLABLE", "ID"],
    )


def _show_fragments(s: dict[str, Any]) -> str:
    """The ``Fragments:`` table of ``txn-engine show``."""
    if not s["fragments"]:
        return "Fragments: none"
    return "Fragments:\n" + _table(
        [
            [
                str(f["id"]),
                str(f["files"]),
                str(f["physical_rows"]),
                str(f["deleted_rows"]),
                str(f["rows"]),
                "-"
                if f["deletion_file"] is None
                else f"{f['deletion_file']['type']}@{f['deletion_file']['read_version']}",
            ]
            for f in s["fragments"]
        ],
        ["ID", "FILES", "PHYSICAL", "DELETED", "ROWS", "DELETION FILE"],
    )


def _show_indices(s: dict[str, Any]) -> str:
    """The ``Indices:`` table of ``txn-engine show``."""
    if not s["indices"]:
        return "Indices: none"
    return "Indices:\n" + _table(
        [
            [
                i["name"],
                i["type"],
                ",".join(map(str, i["fields"])),
                str(i["dataset_version"]),
                i["uuid"],
            ]
            for i in s["indices"]
        ],
        ["NAME", "TYPE", "FIELDS", "VERSION", "UUID"],
    )


def _render_show(s: dict[str, Any]) -> str:
    """``txn-engine show``'s text for a :func:`_summary`."""
    parts = [_show_head(s), _show_schema(s), _show_fragments(s), _show_indices(s)]
    if s["config"]:
        parts.append("Config:\n" + "\n".join(f"  {k} = {v}" for k, v in s["config"].items()))
    else:
        parts.append("Config: none")
    if s["table_metadata"]:
        parts.append(
            "Table metadata:\n" + "\n".join(f"  {k} = {v}" for k, v in s["table_metadata"].items())
        )
    return "\n\n".join(parts) + "\n"


def _run_show(args: argparse.Namespace, out: TextIO) -> int:
    summary = _summary(_open(args))
    if args.json:
        json.dump(summary, out, indent=2)
        out.write("\n")
    else:
        out.write(_render_show(summary))
    return 0


# --------------------------------------------------------------------------- verify


def _configure_verify(p: argparse.ArgumentParser) -> None:
    p.add_argument("uri", help="dataset URI")
    p.add_argument("--deep", action="store_true", help="check deletion files of every version")
    p.add_argument(
        "--data-files",
        action="store_true",
        help="also check that the data files of the latest version (--deep: all) exist",
    )
    storage_option_arguments(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _run_verify(args: argparse.Namespace, out: TextIO) -> int:
    from txn_engine.verify import verify

    report = verify(
        args.uri,
        storage_options=parse_options(args.storage_option),
        deep=args.deep,
        data_files=args.data_files,
    )
    if args.json:
        json.dump(report.to_json(), out, indent=2)
        out.write("\n")
    else:
        out.write(
            f"{report.uri}: {report.versions} versions, latest {report.latest_version}, "
            f"{report.live_rows} live rows\n"
        )
        for finding in report.findings:
            out.write(f"  {finding}\n")
        warned = f" ({len(report.warnings)} warnings)" if report.warnings else ""
        out.write(
            f"OK: every invariant holds{warned}\n"
            if report.ok
            else f"FAILED: {len(report.errors)} errors{warned}\n"
        )
    return 0 if report.ok else 1


#: Seconds per unit of a duration argument (``7d``, ``12h``, ...).
_DURATION_UNITS: Mapping[str, int] = MappingProxyType(
    {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
)


def _parse_duration(text: str) -> Any:
    """``7d``, ``12h``, ``30m``, ``45s``, ``2w`` or plain seconds (``0``) -> timedelta."""
    from datetime import timedelta

    raw = text.strip().lower()
    unit = raw[-1:] if raw[-1:] in _DURATION_UNITS else "s"
    number = raw[:-1] if raw[-1:] in _DURATION_UNITS else raw
    try:
        value = float(number)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 7d, 12h, 30m)") from None
    if value < 0 or value != value:
        raise argparse.ArgumentTypeError(f"duration must not be negative: {text!r}")
    return timedelta(seconds=value * _DURATION_UNITS[unit])


def _configure_cleanup(p: argparse.ArgumentParser) -> None:
    p.add_argument("uri", help="dataset URI")
    p.add_argument(
        "--older-than",
        type=_parse_duration,
        default="14d",
        help="remove versions older than this (7d, 12h, 30m, 0); default 14d",
    )
    p.add_argument(
        "--keep-versions", type=int, default=1, help="always keep the newest N versions (>= 1)"
    )
    p.add_argument(
        "--orphan-retention",
        type=_parse_duration,
        default="7d",
        help="delete files no version references only once older than this; default 7d",
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan, delete nothing")
    p.add_argument("--no-progress", action="store_true", help="no progress line even on a terminal")
    storage_option_arguments(p)
    p.add_argument("--json", action="store_true", help="the full plan/report as JSON")


def _run_cleanup(args: argparse.Namespace, out: TextIO) -> int:
    from txn_engine.retention import CleanupReport, cleanup

    result = cleanup(
        args.uri,
        older_than=args.older_than,
        keep_versions=args.keep_versions,
        retention_orphans=args.orphan_retention,
        dry_run=args.dry_run,
        storage_options=parse_options(args.storage_option),
        progress=False if (args.no_progress or args.json) else None,
    )
    if args.json:
        data = result.to_json()
        data["dry_run"] = args.dry_run
        json.dump(data, out, indent=2)
        out.write("\n")
    else:
        out.write(("dry run: nothing deleted\n" if args.dry_run else "") + result.summary() + "\n")
    return 0 if not isinstance(result, CleanupReport) or result.ok else 1


def _configure_carry(p: argparse.ArgumentParser) -> None:
    p.add_argument("uri", help="dataset URI (an object store: offers exist only there)")
    p.add_argument(
        "--for",
        dest="duration",
        type=_parse_duration,
        default=None,
        help="stop after this long (30s, 10m, 2h); default: until interrupted (Ctrl-C, SIGTERM)",
    )
    storage_option_arguments(p)
    p.add_argument("--json", action="store_true", help="print the versions created as JSON")


def _run_carry(args: argparse.Namespace, out: TextIO) -> int:
    import signal
    import threading
    import time

    from txn_engine.contention.carrier import Carrier
    from txn_engine.storage.base import read_concurrency

    carrier = Carrier(args.uri, storage_options=parse_options(args.storage_option))
    stop = threading.Event()
    previous = None
    if threading.current_thread() is threading.main_thread():  # SIGTERM stops it like Ctrl-C
        previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    deadline = None if args.duration is None else time.monotonic() + args.duration.total_seconds()
    shown = 0
    if not args.json:
        out.write(f"carrying the offers of {carrier.storage.uri} (Ctrl-C to stop)\n")
        if read_concurrency(carrier.storage) <= 1:
            out.write("note: not an object store: its writers make no offers to carry\n")
        out.flush()
    carrier.start()
    try:
        while not stop.is_set() and carrier.error is None and carrier.running:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            stop.wait(0.5 if left is None else min(0.5, left))
            if not args.json:
                for version in carrier.versions[shown:]:
                    out.write(f"version {version}\n")
                shown = len(carrier.versions)
                out.flush()
    except KeyboardInterrupt:
        pass
    finally:
        carrier.close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    if args.json:
        json.dump({"uri": carrier.storage.uri, "versions": carrier.versions}, out, indent=2)
        out.write("\n")
    else:
        for version in carrier.versions[shown:]:
            out.write(f"version {version}\n")
        out.write(f"stopped: {len(carrier.versions)} versions created\n")
    if carrier.error is not None:
        raise carrier.error
    return 0


def _configure_serve_namespace(p: argparse.ArgumentParser) -> None:
    p.add_argument("root", help="the namespace root: a directory, or s3:// gs:// az:// prefix")
    p.add_argument("--port", type=int, default=2333, help="port (default 2333; 0: any free)")
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this machine only)",
    )
    p.add_argument(
        "--abort-after",
        type=float,
        default=30.0,
        help="seconds a writer waits for an undecided transaction before aborting it",
    )
    storage_option_arguments(p)


def _run_serve_namespace(args: argparse.Namespace, out: TextIO) -> int:
    from txn_engine.namespace import Namespace
    from txn_engine.namespace._rest import NamespaceServer
    from txn_engine.redact import redact_uri

    ns = Namespace(
        args.root,
        parse_options(args.storage_option),
        abort_after=args.abort_after,
        share_storage_options=False,
    )
    server = NamespaceServer(ns, args.host, args.port)
    out.write(f"serving {redact_uri(args.root)} on {server.url} (Ctrl-C to stop)\n")
    out.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


# --------------------------------------------------------------------------- main


def _commands() -> dict[str, Command]:
    """Every subcommand by name, in the order ``--help`` lists them."""
    commands = (
        Command("log", "list the versions of a dataset", _configure_log, _run_log),
        Command("show", "summarise one version of a dataset", _configure_show, _run_show),
        STRESS,
        Command(
            "verify", "check the invariants of a dataset's history", _configure_verify, _run_verify
        ),
        Command(
            "cleanup",
            "remove old versions and unreferenced files (keeps leased, tagged, young ones)",
            _configure_cleanup,
            _run_cleanup,
        ),
        Command(
            "carry",
            "run a carrier: land the offers of contending writers on an object store",
            _configure_carry,
            _run_carry,
        ),
        Command(
            "serve-namespace",
            "serve a namespace over the Lance REST namespace API (pylance's RestNamespace)",
            _configure_serve_namespace,
            _run_serve_namespace,
        ),
    )
    return {command.name: command for command in commands}


#: Every subcommand by name (read-only: list a new one in ``_commands``).
COMMANDS: Mapping[str, Command] = MappingProxyType(_commands())


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser with every subcommand of :data:`COMMANDS`."""
    return _build_parser(COMMANDS)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 1 error, 2 usage error)."""
    return run_command_line(COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
