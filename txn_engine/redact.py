"""Keep secrets out of messages, reprs, logs and reports.

Storage options and URIs often carry credentials: ``-o aws_secret_access_key=...``,
``s3://KEY:SECRET@bucket/table``, an Azure SAS token in a query string. Every place in
txn_engine that puts a URI or options into text a person or a log may see passes them
through this module first::

    redact_uri("s3://AKIA:s3cr3t@bucket/t.lance")    # 's3://***@bucket/t.lance'
    redact_options({"account_key": "abc", "region": "eu"})
                                                     # {'account_key': '***', 'region': 'eu'}
    redact_text("bad option secret_key=abc for s3://a:b@bkt/x")
                                                     # 'bad option secret_key=*** for s3://***@bkt/x'

An option key *looks secret* when, lower-cased, it contains one of :data:`SECRET_KEY_PARTS`
(``key``, ``secret``, ``token``, ``password``, ``credential``, ``sas``, ``session``, ...);
its value becomes ``"***"`` whatever it is. Redaction errs on the side of hiding: a
harmless value under such a key is hidden too.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, quote_plus

__all__ = [
    "MASK",
    "SECRET_KEY_PARTS",
    "RedactingFilter",
    "looks_secret",
    "redact_options",
    "redact_text",
    "redact_uri",
    "redact_userinfo",
]

#: What a secret is replaced by.
MASK = "***"

#: Lower-case fragments that make an option key (or query parameter) secret.
SECRET_KEY_PARTS: tuple[str, ...] = (
    "key",
    "secret",
    "token",
    "password",
    "passwd",
    "pwd",
    "credential",
    "sas",
    "session",
    "signature",
    "sig",
    "auth",
    "private",
    "cookie",
    "connection_string",
)

# scheme://user:password@ (a password may hold '/', as AWS secret keys do). User info
# without a ':' is kept: in abfss://container@account... it names the container.
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<info>[^\s@/?#:]*:[^\s@]*)@")
# key=value / key: value pairs in free text whose key looks secret
_PAIR = re.compile(
    r"(?P<key>[A-Za-z0-9_.\-]*(?:" + "|".join(SECRET_KEY_PARTS) + r")[A-Za-z0-9_.\-]*)"
    r"(?P<sep>\s*[=:]\s*|['\"]\s*:\s*['\"]?)"
    r"(?P<value>[^\s,;&'\"})\]]+)",
    re.IGNORECASE,
)


def looks_secret(key: object) -> bool:
    """True if an option key or query parameter name looks like it holds a secret: it
    contains one of :data:`SECRET_KEY_PARTS` (every option the storage option table marks
    secret does, and a test keeps it so; this module imports nothing of the library, so the
    error messages of every layer can use it)."""
    text = str(key).lower()
    return any(part in text for part in SECRET_KEY_PARTS)


def redact_userinfo(text: str) -> str:
    """``text`` with every ``scheme://user:password@`` turned into ``scheme://***@``."""
    if "@" not in text:
        return text
    return _USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", text)


def redact_options(options: Mapping[Any, Any] | None) -> dict[Any, Any]:
    """A copy of ``options`` with the values of secret-looking keys replaced by ``"***"``.

    Nested mappings (e.g. fsspec's ``client_kwargs``) are redacted too, to a bounded depth
    (deeper levels are masked whole). URIs among the values lose their user info.
    """
    if not options:
        return {}
    return _redact_mapping(options, depth=0)


def _redact_mapping(options: Mapping[Any, Any], depth: int) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for key, value in options.items():
        if looks_secret(key):
            out[key] = MASK
        elif isinstance(value, Mapping):
            out[key] = MASK if depth >= 8 else _redact_mapping(value, depth + 1)
        elif isinstance(value, str):
            out[key] = redact_text(value)
        else:
            out[key] = value
    return out


def redact_uri(uri: object) -> str:
    """``uri`` as text without user info (``s3://k:s@b/p`` -> ``s3://***@b/p``) and with
    the values of secret-looking query parameters (SAS tokens, signatures) masked."""
    text = redact_userinfo(str(uri))
    if "?" in text:
        head, _, query = text.partition("?")
        parts = []
        for item in query.split("&"):
            name, sep, _value = item.partition("=")
            parts.append(f"{name}={MASK}" if sep and looks_secret(name) else item)
        text = f"{head}?{'&'.join(parts)}"
    return text


def redact_text(text: object, secrets: Iterable[str] = ()) -> str:
    """``text`` with URI user info, ``key=value`` pairs whose key looks secret, and every
    literal in ``secrets`` (values the caller knows are secret) replaced by ``"***"``."""
    out = str(text)
    forms = {form for s in secrets if s for form in _spellings(s)}
    for secret in sorted(forms, key=len, reverse=True):
        out = out.replace(secret, MASK)
    out = redact_userinfo(out)
    return _PAIR.sub(lambda m: f"{m['key']}{m['sep']}{MASK}", out)


def _spellings(secret: str) -> set[str]:
    """``secret`` as a library may quote it in a message: verbatim, percent-encoded in a
    URL (gcsfs put a token given as credentials into ``?access_token=`` of the URL its
    connection error names), or escaped as in a repr or JSON."""
    forms = {
        secret,
        quote(secret, safe=""),
        quote(secret),
        quote_plus(secret),
        quote_plus(secret, safe="/"),
        secret.encode("unicode_escape").decode("ascii"),
        json.dumps(secret)[1:-1],
    }
    return {form for form in forms if form}


class RedactingFilter(logging.Filter):
    """A logging filter that passes every record's final message through
    :func:`redact_text`; add it to a logger that may log URIs or options
    (``logging.getLogger(__name__).addFilter(RedactingFilter())``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = redact_text(record.getMessage())
        record.args = None
        return True
