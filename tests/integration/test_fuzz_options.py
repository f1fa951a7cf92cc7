"""Fuzzing the storage options: hostile option sets for ``open_storage`` and a first request.

A user's options reach two libraries (obstore, and the fsspec filesystems) through
:mod:`txn_engine.storage.options`. Any option set, however wrong, must give a typed error
(:class:`~txn_engine.errors.TxnEngineError`) or a storage, and the first requests through
that storage must fail typed too, quickly, and never show a secret: the values of secret
options are drawn as unique tokens and looked for in every message.

Requests go to a closed port on loopback (``127.0.0.1:1``) with no retries, so nothing leaves
the machine and every request fails at once. Faults this found: a retry timeout past
``timedelta``'s range (``OverflowError`` out of ``open_storage``), a token percent-encoded in
a backend's message, and a panic of the Rust code under obstore
(``aws_container_credentials_relative_uri`` holding a non-URI character).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from txn_engine.errors import TxnEngineError
from txn_engine.storage import open_storage
from txn_engine.storage.options import OPTIONS, is_secret

_PROFILE_EXAMPLES = settings().max_examples
FUZZ = settings(
    max_examples=_PROFILE_EXAMPLES if _PROFILE_EXAMPLES > 100 else min(_PROFILE_EXAMPLES, 60),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

#: options the test sets itself: where requests go, and how long they may take
_FIXED = ("endpoint", "retr", "emulator", "timeout", "proxy")
_NAMES = sorted(
    {spec.name for spec in OPTIONS if not any(part in spec.name for part in _FIXED)}
    | {"key", "secret", "token", "endpoint_url", "client_kwargs", "anon", "no_such_option"}
)
_VALUES = st.one_of(
    st.sampled_from(
        [
            "",
            "0",
            "-1",
            "1",
            "true",
            "false",
            "maybe",
            "\x00",
            "30s",
            "1h",
            "abc",
            "1.5",
            "1e400",
            "99999999999999999999999",
            "{}",
            "[]",
            '{"a": 1}',
            "null",
            "NaN",
            "http://",
            "https://[::1",
            "http://a b",
            "/etc/passwd",
            "%zz",
            "\u00e9",
            "x" * 2000,
        ]
    ),
    st.text(max_size=40),
    st.sampled_from([1, True, 2.5, None, b"x", ["a"], {"k": "v"}]),
)


@st.composite
def option_sets(draw: st.DrawFn) -> tuple[str, dict[str, object], list[str]]:
    """A URI, its options, and the secret tokens among them."""
    scheme = draw(st.sampled_from(["s3", "s3a", "az", "abfs", "gs"]))
    bucket = draw(st.sampled_from(["bkt", "b/p", "B_ad", "b..c", "b:1", "user@b", "\u00e9"]))
    options: dict[str, object] = {}
    secrets: list[str] = []
    for name in draw(st.lists(st.sampled_from(_NAMES), max_size=5, unique=True)):
        if is_secret(name) and draw(st.booleans()):
            token = f"SECRET{draw(st.integers(0, 2**32)):010d}" + draw(
                st.sampled_from(["", "/", "+x=", "\n", " &"])
            )
            secrets.append(token)
            options[name] = token
        else:
            options[name] = draw(_VALUES)
    if scheme.startswith("s3"):
        options["aws_endpoint"] = "http://127.0.0.1:1"
    elif scheme in ("az", "abfs"):
        options["azure_storage_endpoint"] = "http://127.0.0.1:1"
        options.setdefault("azure_storage_account_name", "acct")
    options.update(
        client_max_retries="0",
        client_retry_timeout="1",
        connect_timeout="1s",
        timeout="2s",
        txn_engine_backend="obstore",
    )
    return f"{scheme}://{bucket}/t.lance", options, secrets


@contextlib.contextmanager
def _no_cloud_environment() -> Iterator[None]:
    """Without the machine's ``AWS_*``, ``AZURE_*`` and ``GOOGLE_*`` variables: credentials
    of the machine must not decide the outcome."""
    saved = dict(os.environ)
    for name in [n for n in os.environ if n.startswith(("AWS_", "AZURE_", "GOOGLE_"))]:
        del os.environ[name]
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _requests(uri: str, options: dict[str, object]) -> Iterator[str]:
    """Open the storage and make one request of each kind; yield what each one did."""
    storage = open_storage(uri, options)
    yield repr(storage)
    if uri.startswith("gs://"):
        return  # no endpoint of ours to send GCS requests to
    for call in (
        lambda: storage.exists("_versions/1.manifest"),
        lambda: storage.get("_versions/1.manifest"),
        lambda: storage.list("_versions"),
        lambda: storage.put("data/x.lance", b"x"),
    ):
        try:
            yield repr(call())
        except TxnEngineError as exc:
            yield str(exc)


def _check_quick_and_secret_free(
    uri: str, options: dict[str, object], secrets: list[str], run: Callable[[], list[str]]
) -> None:
    """``run`` (what a storage showed, or its typed error) ends within 30 s and no text of
    it shows a secret."""
    start = time.monotonic()
    with _no_cloud_environment():
        try:
            seen = run()
        except TxnEngineError as exc:
            seen = [str(exc)]
    assert time.monotonic() - start < 30, f"{uri} {sorted(options)} took too long"
    for text in seen:
        for secret in secrets:
            assert secret[:16] not in text, f"secret option value shown: {text[:200]}"


@FUZZ
@given(option_sets())
def test_hostile_storage_options(case: tuple[str, dict[str, object], list[str]]) -> None:
    uri, options, secrets = case
    _check_quick_and_secret_free(uri, options, secrets, lambda: list(_requests(uri, options)))


@st.composite
def fsspec_option_sets(draw: st.DrawFn) -> tuple[str, dict[str, object], list[str]]:
    """The same option sets for the fsspec backend (s3fs, adlfs, gcsfs), with or without the
    options it refuses."""
    uri, options, secrets = draw(option_sets())
    options["txn_engine_backend"] = "fsspec"
    for name in ("client_max_retries", "client_retry_timeout", "connect_timeout", "timeout"):
        if draw(st.booleans()):
            del options[name]
    if uri.startswith("gs://"):
        options.setdefault("token", "anon")  # no probe of a cloud metadata server
    return uri, options, secrets


@FUZZ
@given(fsspec_option_sets())
def test_hostile_storage_options_fsspec(case: tuple[str, dict[str, object], list[str]]) -> None:
    """Opening through the fsspec backend gives a storage or a typed error, quickly, and
    shows no secret. (No requests: s3fs, adlfs and gcsfs retry an unreachable endpoint on
    their own schedules, 5-83 s a request, which the options cannot bound there.)"""
    uri, options, secrets = case
    _check_quick_and_secret_free(uri, options, secrets, lambda: [repr(open_storage(uri, options))])
