"""The ``txn-engine`` command line tool.

    txn-engine log URI [--json]                 versions with time, operation, writer
                                                (a damaged version is marked; exit 1)
    txn-engine show URI [--version N] [--json]  summary of one version's manifest
    txn-engine serve-namespace ROOT [--port N]  the Lance REST namespace API over ROOT

Subcommands live in :data:`COMMANDS` (name -> :class:`Command`); add one by registering a
``Command`` with a function that configures its argparse sub-parser and one that runs it
and returns the exit code. Errors from txn_engine print one line to stderr and exit 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TextIO

import attrs

from txn_engine import jsontext
from txn_engine._proto import table_pb2
from txn_engine.dataset import Dataset, version_history
from txn_engine.errors import TxnEngineError
from txn_engine.format.flags import describe_flags

__all__ = ["COMMANDS", "Command", "main", "register"]


@attrs.frozen
class Command:
    """A subcommand: ``configure`` adds its arguments, ``run`` executes it."""

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, TextIO], int]


COMMANDS: dict[str, Command] = {}


def register(command: Command) -> Command:
    """Add a subcommand to :data:`COMMANDS` (later registrations replace earlier ones)."""
    COMMANDS[command.name] = command
    return command


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
        storage_options=_parse_options(getattr(args, "storage_option", [])),
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
    _storage_option_arguments(p)


def _run_log(args: argparse.Namespace, out: TextIO) -> int:
    from txn_engine.format.refs import list_branches, list_tags
    from txn_engine.storage import open_storage

    # no Dataset.open: the latest manifest may be the damaged one; every damaged version
    # is listed with its error (exit 1) and the others as usual
    storage = open_storage(args.uri, _parse_options(args.storage_option))
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


register(Command("log", "list the versions of a dataset", _configure_log, _run_log))


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
    _storage_option_arguments(p)


def _summary(ds: Dataset) -> dict[str, Any]:
    m = ds.manifest_pb
    counts = {fid: (phys, deleted) for fid, phys, deleted in ds.fragment_row_counts()}
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
    fragments = []
    for frag in m.fragments:
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


def _render_show(s: dict[str, Any]) -> str:
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
    parts = ["\n".join(f"{k.ljust(width)}  {v}" for k, v in head)]
    parts.append(
        "Schema:\n"
        + _table(
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
    )
    if s["fragments"]:
        parts.append(
            "Fragments:\n"
            + _table(
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
        )
    else:
        parts.append("Fragments: none")
    if s["indices"]:
        parts.append(
            "Indices:\n"
            + _table(
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
        )
    else:
        parts.append("Indices: none")
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


register(Command("show", "summarise one version of a dataset", _configure_show, _run_show))


# --------------------------------------------------------------------------- stress / verify


def _number(
    kind: Callable[[str], Any], low: float, *, open_low: bool = False, high: float | None = None
) -> Callable[[str], Any]:
    """An argparse ``type``: ``kind`` (int/float) within [low, high] (``open_low``: > low);
    a bad value is a usage error (exit 2) before anything runs."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        below = value <= low if open_low else not value >= low  # `not >=` catches NaN
        if below or (high is not None and not value <= high):
            bound = f"> {low}" if open_low else f">= {low}"
            if high is not None:
                bound = f"between {low} and {high}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {text}")
        return value

    return parse


def _stress_uri(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty (it would be the current directory)")
    if text.startswith("memory://"):
        raise argparse.ArgumentTypeError("memory:// is private to one process; use a directory")
    return text


def _mix_argument(text: str) -> str:
    from txn_engine.apps.stress import KINDS

    try:
        mix = _parse_mix(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"weights must be integers: {text!r}") from None
    unknown = sorted(set(mix or {}) - set(KINDS))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown kinds {unknown}; known: {', '.join(KINDS)}")
    if mix is not None and (any(w < 0 for w in mix.values()) or not any(mix.values())):
        raise argparse.ArgumentTypeError("weights must be >= 0, at least one positive")
    return text


def _faults_argument(text: str) -> str:
    from txn_engine.testing.fault_storage import FAULT_KINDS

    unknown = sorted(set(_parse_faults(text)) - set(FAULT_KINDS))
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown fault kinds {unknown}; known: {', '.join(FAULT_KINDS)} or all"
        )
    return text


def _configure_stress(p: argparse.ArgumentParser) -> None:
    from txn_engine.apps.stress import DEFAULT_MIX, KINDS
    from txn_engine.testing.fault_storage import FAULT_KINDS

    p.add_argument(
        "uri",
        type=_stress_uri,
        help="where to create the dataset (a fresh local directory by default)",
    )
    p.add_argument(
        "--writers", type=_number(int, 1), default=4, help="writer processes (default 4)"
    )
    p.add_argument(
        "--commits", type=_number(int, 0), default=25, help="operations per writer (default 25)"
    )
    p.add_argument(
        "--mix",
        type=_mix_argument,
        default=None,
        help="operation weights, kinds: "
        + ", ".join(KINDS)
        + " (default "
        + ",".join(f"{k}={w}" for k, w in DEFAULT_MIX.items())
        + ")",
    )
    p.add_argument(
        "--fault-rate",
        type=_number(float, 0.0, high=1.0),
        default=0.0,
        help="probability that a manifest create (or transaction-file write) suffers a fault",
    )
    p.add_argument(
        "--faults",
        type=_faults_argument,
        default="lost_response",
        help="comma-separated fault kinds to inject at --fault-rate, or 'all': "
        + ", ".join(FAULT_KINDS),
    )
    p.add_argument(
        "--latency",
        type=_number(float, 0.0),
        default=0.0,
        help="added storage latency per call, in ms",
    )
    p.add_argument(
        "--max-attempts", type=_number(int, 1), default=50, help="commit attempts per try"
    )
    p.add_argument(
        "--deadline",
        type=_number(float, 0.0, open_low=True),
        default=None,
        help="seconds per commit (retries)",
    )
    p.add_argument(
        "--max-delay",
        type=_number(float, 0.0),
        default=None,
        help="cap of one retry backoff sleep, seconds",
    )
    p.add_argument(
        "--replans",
        type=_number(int, 0),
        default=5,
        help="re-plans after a retryable conflict (default 5)",
    )
    p.add_argument(
        "--synthetic", action="store_true", help="do not write data files (no pylance needed)"
    )
    p.add_argument(
        "--carrier",
        action="store_true",
        help="run a carrier beside the writers (txn-engine carry; object stores only)",
    )
    p.add_argument("--seed", type=int, default=0, help="random seed")
    _storage_option_arguments(p)
    p.add_argument(
        "--lance-option",
        type=_option_item,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a storage option for pylance only (default: the -o set), repeatable",
    )
    p.add_argument("--json", action="store_true", help="machine-readable report")


def _option_item(text: str) -> str:
    """An argparse ``type`` for ``-o KEY=VALUE``: checked now (exit 2), never echoed."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError("expected name=value")
    if value.startswith("{"):
        try:
            jsontext.loads(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"the value of {key!r} is not valid JSON") from None
    return text


def _storage_option_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-o",
        "--storage-option",
        type=_option_item,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="storage option in Lance's names (aws_access_key_id, aws_endpoint, aws_region, "
        "allow_http, azure_storage_account_name, ...), repeatable; a VALUE starting with { "
        "is parsed as JSON",
    )


def _parse_options(items: Sequence[str]) -> dict[str, Any] | None:
    options: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"storage option {item!r} is not KEY=VALUE")
        options[key] = jsontext.loads(value) if value.startswith("{") else value
    return options or None


def _parse_mix(text: str | None) -> dict[str, int] | None:
    if not text:
        return None
    mix: dict[str, int] = {}
    for part in text.split(","):
        name, _, weight = part.partition("=")
        mix[name.strip()] = int(weight or 1)
    return mix


def _parse_faults(text: str) -> list[str]:
    from txn_engine.testing.fault_storage import FAULT_KINDS

    if text.strip() == "all":
        return list(FAULT_KINDS)
    return [k.strip() for k in text.split(",") if k.strip()]


def _run_stress(args: argparse.Namespace, out: TextIO) -> int:
    from txn_engine.apps.stress import run_stress

    report = run_stress(
        args.uri,
        writers=args.writers,
        commits=args.commits,
        mix=_parse_mix(args.mix),
        fault_rate=args.fault_rate,
        fault_kinds=_parse_faults(args.faults),
        latency=args.latency / 1000.0,
        max_attempts=args.max_attempts,
        deadline=args.deadline,
        max_delay=args.max_delay,
        replans=args.replans,
        synthetic=args.synthetic,
        seed=args.seed,
        storage_options=_parse_options(args.storage_option),
        lance_storage_options=_parse_options(args.lance_option),
        progress=None if args.json else sys.stderr,
        carrier=args.carrier,
    )
    if args.json:
        json.dump(report.to_json(), out, indent=2)
        out.write("\n")
    else:
        out.write(report.render())
    return 0 if report.ok else 1


register(
    Command(
        "stress",
        "run N concurrent writer processes on a new dataset, then verify it",
        _configure_stress,
        _run_stress,
    )
)


def _configure_verify(p: argparse.ArgumentParser) -> None:
    p.add_argument("uri", help="dataset URI")
    p.add_argument("--deep", action="store_true", help="check deletion files of every version")
    p.add_argument(
        "--data-files",
        action="store_true",
        help="also check that the data files of the latest version (--deep: all) exist",
    )
    _storage_option_arguments(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _run_verify(args: argparse.Namespace, out: TextIO) -> int:
    from txn_engine.verify import verify

    report = verify(
        args.uri,
        storage_options=_parse_options(args.storage_option),
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


register(
    Command("verify", "check the invariants of a dataset's history", _configure_verify, _run_verify)
)


_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


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
    _storage_option_arguments(p)
    p.add_argument("--json", action="store_true", help="the full plan/report as JSON")


def _run_cleanup(args: argparse.Namespace, out: TextIO) -> int:
    from txn_engine.retention import CleanupReport, cleanup

    result = cleanup(
        args.uri,
        older_than=args.older_than,
        keep_versions=args.keep_versions,
        retention_orphans=args.orphan_retention,
        dry_run=args.dry_run,
        storage_options=_parse_options(args.storage_option),
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


register(
    Command(
        "cleanup",
        "remove old versions and unreferenced files (keeps leased, tagged, young ones)",
        _configure_cleanup,
        _run_cleanup,
    )
)


def _configure_carry(p: argparse.ArgumentParser) -> None:
    p.add_argument("uri", help="dataset URI (an object store: offers exist only there)")
    p.add_argument(
        "--for",
        dest="duration",
        type=_parse_duration,
        default=None,
        help="stop after this long (30s, 10m, 2h); default: until interrupted (Ctrl-C, SIGTERM)",
    )
    _storage_option_arguments(p)
    p.add_argument("--json", action="store_true", help="print the versions created as JSON")


def _run_carry(args: argparse.Namespace, out: TextIO) -> int:
    import signal
    import threading
    import time

    from txn_engine.carrier import Carrier
    from txn_engine.storage.base import read_concurrency

    carrier = Carrier(args.uri, storage_options=_parse_options(args.storage_option))
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


register(
    Command(
        "carry",
        "run a carrier: land the offers of contending writers on an object store",
        _configure_carry,
        _run_carry,
    )
)


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
    _storage_option_arguments(p)


def _run_serve_namespace(args: argparse.Namespace, out: TextIO) -> int:
    from txn_engine.namespace import Namespace
    from txn_engine.namespace._rest import NamespaceServer
    from txn_engine.redact import redact_uri

    ns = Namespace(
        args.root,
        _parse_options(args.storage_option),
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


register(
    Command(
        "serve-namespace",
        "serve a namespace over the Lance REST namespace API (pylance's RestNamespace)",
        _configure_serve_namespace,
        _run_serve_namespace,
    )
)


# --------------------------------------------------------------------------- main


def _package_version() -> str:
    from txn_engine._version import __version__

    return __version__


class _Parser(argparse.ArgumentParser):
    """argparse that never echoes a secret: usage errors go through
    :func:`txn_engine.redact.redact_text`, and of unrecognized arguments only the option
    names are shown (``-o secret=...`` would otherwise be printed whole)."""

    def error(self, message: str) -> NoReturn:
        from txn_engine.redact import MASK, redact_text

        prefix = "unrecognized arguments: "
        if message.startswith(prefix):
            shown = [
                token.split("=", 1)[0] + ("=" + MASK if "=" in token else "")
                if token.startswith("-")
                else MASK
                for token in message[len(prefix) :].split()
            ]
            message = prefix + " ".join(shown)
        super().error(redact_text(message))


def _option_values(args: argparse.Namespace) -> list[str]:
    """The values of secret-looking ``-o`` / ``--lance-option`` options (masked wherever
    they appear in a message, e.g. quoted back by a backend)."""
    from txn_engine.redact import looks_secret

    items = [*getattr(args, "storage_option", []), *getattr(args, "lance_option", [])]
    pairs = [item.partition("=") for item in items]
    return [value for key, _, value in pairs if value and looks_secret(key)]


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser with every registered subcommand."""
    parser = _Parser(prog="txn-engine", description="Inspect and operate on Lance datasets.")
    parser.add_argument("--version", action="version", version=f"txn-engine {_package_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS.values():
        p = sub.add_parser(command.name, help=command.help, description=command.help)
        command.configure(p)
        p.set_defaults(_command=command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 1 error, 2 usage error)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code) if isinstance(exc.code, int) else 2
    command: Command = args._command
    try:
        return command.run(args, sys.stdout)
    except BrokenPipeError:  # pragma: no cover - e.g. piping into `head`
        return 0
    except (TxnEngineError, OSError, ValueError) as exc:
        from txn_engine.redact import redact_text

        text = redact_text(str(exc), secrets=_option_values(args)).strip()
        message = text.splitlines()[0] if text else type(exc).__name__
        print(f"txn-engine {command.name}: error: {message}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
