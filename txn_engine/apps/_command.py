"""The parts every ``txn-engine`` subcommand shares: :class:`Command`, the argparse types of
common options, and the parser and entry point built from a set of commands.

:mod:`txn_engine.apps.cli` lists every command; :mod:`txn_engine.apps.stress` runs its own
alone (``python -m txn_engine.apps.stress``). Both build on this module, which imports
neither.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn, TextIO

import attrs

from txn_engine import jsontext
from txn_engine.errors import TxnEngineError

__all__ = [
    "Command",
    "build_parser",
    "number",
    "option_item",
    "parse_options",
    "run_command_line",
    "storage_option_arguments",
]


@attrs.frozen
class Command:
    """A subcommand: ``configure`` adds its arguments, ``run`` executes it."""

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, TextIO], int]


# --------------------------------------------------------------------------- option types


def number(
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


def option_item(text: str) -> str:
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


def storage_option_arguments(p: argparse.ArgumentParser) -> None:
    """Add the repeatable ``-o`` / ``--storage-option KEY=VALUE`` option to ``p`` (read
    it back with :func:`parse_options`)."""
    p.add_argument(
        "-o",
        "--storage-option",
        type=option_item,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="storage option in Lance's names (aws_access_key_id, aws_endpoint, aws_region, "
        "allow_http, azure_storage_account_name, ...), repeatable; a VALUE starting with { "
        "is parsed as JSON",
    )


def parse_options(items: Sequence[str]) -> dict[str, Any] | None:
    """``KEY=VALUE`` items as storage options (a value starting with ``{`` is JSON); None
    when there are none."""
    options: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"storage option {item!r} is not KEY=VALUE")
        options[key] = jsontext.loads(value) if value.startswith("{") else value
    return options or None


# --------------------------------------------------------------------------- parser and main


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


def build_parser(commands: Mapping[str, Command]) -> argparse.ArgumentParser:
    """The ``txn-engine`` argparse parser with a sub-parser for each of ``commands``."""
    parser = _Parser(prog="txn-engine", description="Inspect and operate on Lance datasets.")
    parser.add_argument("--version", action="version", version=f"txn-engine {_package_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in commands.values():
        p = sub.add_parser(command.name, help=command.help, description=command.help)
        command.configure(p)
        p.set_defaults(_command=command)
    return parser


def run_command_line(commands: Mapping[str, Command], argv: Sequence[str] | None) -> int:
    """Parse ``argv`` (None: ``sys.argv``) against ``commands`` and run the chosen one;
    returns the exit code (0 ok, 1 error, 2 usage error). An error from txn_engine (or an
    OSError, a ValueError) prints one line, secrets masked, to stderr."""
    parser = build_parser(commands)
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
