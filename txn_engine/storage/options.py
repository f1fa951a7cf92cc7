"""One storage-option dialect: Lance's names, for every backend.

The options a user already gives pylance (``aws_access_key_id``, ``aws_endpoint``,
``allow_http``, ``azure_storage_account_name``, ``google_service_account``, ...) are
accepted unchanged by :func:`txn_engine.storage.open_storage` and so by every entry point
built on it (``commit``, ``Dataset.open``, the writers, the CLI, the Spark source). This
module holds the one table of accepted names (:data:`OPTIONS`), resolves aliases (the older
fsspec spellings such as ``key``/``secret``/``endpoint_url``), and translates the result for
each backend:

* the ``obstore`` backend (Rust ``object_store``, the library pylance uses) takes the Lance
  names almost verbatim (:meth:`StorageOptions.obstore_arguments`);
* the ``fsspec`` backend translates them to s3fs / adlfs / gcsfs keyword arguments
  (:meth:`StorageOptions.fsspec_arguments`).

Two options belong to txn_engine itself (pylance ignores names it does not know, so one
option set can be shared):

* ``txn_engine_backend``: ``"obstore"`` (the default when ``obstore`` is installed) or
  ``"fsspec"``;
* ``txn_engine_unsafe_no_atomicity_check``: ``"true"`` skips the once-per-process check that
  the store really refuses a second create of one object (see ``docs/backends.md``). Only
  for stores known to honour conditional writes whose probe is impossible (e.g. no delete
  permission).

An unknown name raises :class:`~txn_engine.errors.InvalidStorageArgumentError` listing the
accepted ones. Values of secret options never appear in messages or reprs: :func:`redact`
shows them as ``***``. Credentials from the environment (``AWS_ACCESS_KEY_ID``,
``AWS_ENDPOINT``, ``AZURE_STORAGE_ACCOUNT_NAME``, ...) are read by the backend as pylance
reads them; explicit options win.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final, Literal

import attrs

from txn_engine import jsontext
from txn_engine.errors import InvalidStorageArgumentError

__all__ = [
    "BACKEND_OPTION",
    "OPTIONS",
    "UNSAFE_OPTION",
    "OptionSpec",
    "StorageOptions",
    "is_secret",
    "lance_options",
    "redact",
    "resolve_options",
    "store_kind",
]

StoreKind = Literal["s3", "gcs", "azure"]

BACKEND_OPTION: Final = "txn_engine_backend"
UNSAFE_OPTION: Final = "txn_engine_unsafe_no_atomicity_check"

_SCHEME_KIND: Final[Mapping[str, StoreKind]] = MappingProxyType(
    {
        "s3": "s3",
        "s3a": "s3",
        "gs": "gcs",
        "gcs": "gcs",
        "az": "azure",
        "abfs": "azure",
        "abfss": "azure",
        "adl": "azure",
    }
)

#: azurite's well-known development account (public, documented by Microsoft); used for
#: ``azure_storage_use_emulator`` exactly as object_store does.
_EMULATOR_ACCOUNT: Final = "devstoreaccount1"
_EMULATOR_KEY: Final = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


@attrs.frozen
class OptionSpec:
    """One accepted option.

    ``target`` says where the obstore backend puts it: ``"config"`` (the store's config,
    under the Lance name), ``"client"`` (HTTP client options, under ``client_key``),
    ``"retry"`` (retry config) or ``"none"`` (used by txn_engine itself). ``fsspec`` names
    the fsspec keyword it becomes (dotted for nested dicts, e.g.
    ``client_kwargs.region_name``); ``None`` means the fsspec backend does not support it,
    ``""`` that it is handled specially or has no effect there.
    """

    name: str
    kinds: frozenset[str]
    target: Literal["config", "client", "retry", "none"] = "config"
    client_key: str = ""
    fsspec: str | None = ""
    secret: bool = False
    aliases: tuple[str, ...] = ()


def _s3(name: str, fsspec: str | None = None, **kw: Any) -> OptionSpec:
    return OptionSpec(name, frozenset({"s3"}), fsspec=fsspec, **kw)


def _az(name: str, fsspec: str | None = None, **kw: Any) -> OptionSpec:
    return OptionSpec(name, frozenset({"azure"}), fsspec=fsspec, **kw)


def _gcs(name: str, fsspec: str | None = None, **kw: Any) -> OptionSpec:
    return OptionSpec(name, frozenset({"gcs"}), fsspec=fsspec, **kw)


_ALL: Final = frozenset({"s3", "gcs", "azure"})


def _client(name: str, fsspec: str | None = None, *, key: str | None = None) -> OptionSpec:
    return OptionSpec(name, _ALL, target="client", client_key=key or name, fsspec=fsspec)


OPTIONS: Final[tuple[OptionSpec, ...]] = (
    # ---- S3 (object_store's AmazonS3ConfigKey names, as pylance takes them) ----
    _s3("aws_access_key_id", "key", secret=True, aliases=("access_key_id", "key")),
    _s3("aws_secret_access_key", "secret", secret=True, aliases=("secret_access_key", "secret")),
    _s3("aws_session_token", "token", secret=True, aliases=("aws_token", "session_token")),
    _s3("aws_endpoint", "endpoint_url", aliases=("aws_endpoint_url", "endpoint", "endpoint_url")),
    _s3("aws_region", "client_kwargs.region_name", aliases=("region",)),
    _s3("aws_default_region", "client_kwargs.region_name", aliases=("default_region",)),
    _s3("aws_virtual_hosted_style_request", ""),
    _s3("aws_skip_signature", "anon", aliases=("skip_signature",)),
    _s3("aws_request_payer", "requester_pays"),
    _s3("aws_unsigned_payload"),
    _s3("aws_checksum_algorithm"),
    _s3("aws_imdsv1_fallback"),
    _s3("aws_metadata_endpoint"),
    _s3("aws_container_credentials_relative_uri"),
    _s3("aws_s3_express"),
    _s3("aws_server_side_encryption"),
    _s3("aws_sse_kms_key_id"),
    _s3("aws_sse_bucket_key_enabled"),
    _s3("aws_conditional_put"),
    _s3("aws_disable_tagging", ""),
    # Lance's DynamoDB commit store (s3+ddb://); plain s3:// ignores it, as pylance does.
    OptionSpec("dynamodb_endpoint", frozenset({"s3"}), target="none", fsspec=""),
    # ---- Azure (AzureConfigKey) ----
    _az(
        "azure_storage_account_name",
        "account_name",
        aliases=("azure_storage_account", "account_name"),
    ),
    _az(
        "azure_storage_account_key",
        "account_key",
        secret=True,
        aliases=("azure_storage_access_key", "azure_storage_master_key", "account_key"),
    ),
    _az("azure_storage_endpoint", "", aliases=("azure_endpoint",)),
    _az("azure_storage_use_emulator", "", aliases=("use_emulator",)),
    _az(
        "azure_storage_sas_key",
        "sas_token",
        secret=True,
        aliases=("azure_storage_sas_token", "sas_token"),
    ),
    _az("azure_storage_token", None, secret=True, aliases=("bearer_token",)),
    _az("azure_storage_client_id", "client_id", aliases=("azure_client_id",)),
    _az(
        "azure_storage_client_secret",
        "client_secret",
        secret=True,
        aliases=("azure_client_secret",),
    ),
    _az("azure_storage_tenant_id", "tenant_id", aliases=("azure_tenant_id",)),
    _az("azure_use_fabric_endpoint"),
    _az("azure_msi_endpoint"),
    _az("azure_use_azure_cli"),
    _az("azure_skip_signature", "anon"),
    _az("azure_disable_tagging", ""),
    # ---- GCS (GoogleConfigKey) ----
    _gcs(
        "google_service_account",
        "",
        aliases=("google_service_account_path", "service_account", "service_account_path"),
    ),
    _gcs("google_service_account_key", "", secret=True, aliases=("service_account_key",)),
    _gcs("google_application_credentials", "token"),
    _gcs("google_skip_signature", ""),
    # ---- HTTP client options (ClientConfigKey), all stores ----
    _client("allow_http", ""),
    _client("allow_invalid_certificates"),
    _client("connect_timeout"),
    _client("timeout"),
    _client("pool_idle_timeout"),
    _client("pool_max_idle_per_host"),
    _client("proxy_url"),
    _client("proxy_ca_certificate"),
    _client("proxy_excludes"),
    _client("user_agent"),
    _client("http1_only"),
    _client("http2_only"),
    # ---- Lance's retry options ----
    # s3fs, adlfs and gcsfs retry on schedules of their own, with no per-filesystem way to
    # bound them: the fsspec backend refuses these rather than ignore them
    OptionSpec("client_max_retries", _ALL, target="retry", fsspec=None),
    OptionSpec("client_retry_timeout", _ALL, target="retry", fsspec=None),
    # ---- txn_engine's own ----
    OptionSpec(BACKEND_OPTION, _ALL, target="none", fsspec=""),
    OptionSpec(UNSAFE_OPTION, _ALL, target="none", fsspec=""),
)
"""Every accepted option, in Lance's spelling; see the module docstring."""

#: fsspec-only spellings: accepted (and passed through) with ``txn_engine_backend="fsspec"``.
_FSSPEC_ONLY: Final[Mapping[str, frozenset[str]]] = MappingProxyType(
    {
        "s3": frozenset(
            {
                "client_kwargs",
                "config_kwargs",
                "s3_additional_kwargs",
                "anon",
                "use_ssl",
                "skip_instance_cache",
                "use_listings_cache",
                "default_block_size",
                "profile",
                "username",
                "password",
                "version_aware",
                "cache_regions",
                "asynchronous",
                "loop",
            }
        ),
        "azure": frozenset(
            {
                "connection_string",
                "credential",
                "anon",
                "account_host",
                "skip_instance_cache",
                "use_listings_cache",
                "asynchronous",
                "loop",
            }
        ),
        "gcs": frozenset(
            {
                "token",
                "project",
                "endpoint_url",
                "access",
                "consistency",
                "requester_pays",
                "skip_instance_cache",
                "use_listings_cache",
                "asynchronous",
                "loop",
            }
        ),
    }
)

_SECRET_WORDS: Final = ("secret", "password", "token", "credential", "sas", "connection_string")


def is_secret(name: str) -> bool:
    """Whether the value of option ``name`` must never be shown (keys, tokens, passwords)."""
    lowered = name.lower()
    for spec in OPTIONS:
        if lowered == spec.name or lowered in spec.aliases:
            return spec.secret or any(w in lowered for w in _SECRET_WORDS)
    return lowered.endswith(("key", "key_id")) or any(w in lowered for w in _SECRET_WORDS)


def redact(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """A copy of ``options`` safe to print: secret values (and nested dicts) become ``***``
    (the one redaction rule of :func:`txn_engine.redact.redact_options`)."""
    from txn_engine.redact import redact_options

    return {str(name): value for name, value in redact_options(options).items()}


def store_kind(scheme: str) -> StoreKind | None:
    """``"s3"``, ``"gcs"`` or ``"azure"`` for a URI scheme, else None (generic fsspec)."""
    return _SCHEME_KIND.get(scheme.lower())


_BY_NAME: Final[Mapping[str, OptionSpec]] = MappingProxyType({spec.name: spec for spec in OPTIONS})


def _lookup(kind: StoreKind, name: str) -> OptionSpec | None:
    lowered = name.lower()
    for spec in OPTIONS:
        if kind in spec.kinds and (lowered == spec.name or lowered in spec.aliases):
            return spec
    return None


def accepted_names(kind: StoreKind) -> list[str]:
    """The Lance-spelled option names accepted for store ``kind`` (aliases not listed)."""
    return sorted(spec.name for spec in OPTIONS if kind in spec.kinds)


def _as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _truthy(value: str | None) -> bool:
    return value is not None and value.strip().lower() in {"1", "true", "yes", "on"}


@attrs.frozen(repr=False)
class StorageOptions:
    """Options for one store, resolved to Lance's names (see :func:`resolve_options`).

    ``values`` maps canonical names to strings; ``fsspec_extra`` holds fsspec-only
    spellings (``client_kwargs``, ``connection_string``, ...), usable only with the fsspec
    backend. The repr never shows a secret.
    """

    kind: StoreKind
    values: Mapping[str, str]
    fsspec_extra: Mapping[str, Any] = attrs.field(factory=dict)

    def __repr__(self) -> str:
        shown = redact({**self.values, **self.fsspec_extra})
        return f"StorageOptions({self.kind!r}, {shown!r})"

    @property
    def backend(self) -> str | None:
        """The backend asked for with ``txn_engine_backend`` (None: the default)."""
        return self.values.get(BACKEND_OPTION)

    @property
    def unsafe_no_atomicity_check(self) -> bool:
        """Whether ``txn_engine_unsafe_no_atomicity_check`` is true."""
        return _truthy(self.values.get(UNSAFE_OPTION))

    def secrets(self) -> list[str]:
        """The secret values given (to scrub them from backend error messages)."""
        found = [v for k, v in self.values.items() if is_secret(k) and v]
        found += [str(v) for k, v in self.fsspec_extra.items() if is_secret(k) and v]
        return found

    def get(self, name: str) -> str | None:
        """The value of canonical option ``name``, else None."""
        return self.values.get(name)

    def fsspec_only_names(self) -> list[str]:
        """The fsspec-only spellings given (cache switches aside), sorted."""
        return sorted(set(self.fsspec_extra) - _CACHE_KNOBS)

    # -- obstore -----------------------------------------------------------------------------

    def obstore_arguments(self) -> tuple[dict[str, str], dict[str, Any], dict[str, Any]]:
        """``(config, client_options, retry_config)`` for an obstore store constructor.

        Raises InvalidStorageArgumentError if an fsspec-only option was given.
        """
        fsspec_only = self.fsspec_only_names()
        if fsspec_only:
            raise InvalidStorageArgumentError(
                f"options {fsspec_only} exist only for the fsspec backend; "
                f"use Lance's names ({', '.join(accepted_names(self.kind))}) or pass "
                f"{BACKEND_OPTION}='fsspec'"
            )
        config: dict[str, str] = {}
        client: dict[str, Any] = {}
        retry: dict[str, Any] = {}
        for name, value in self.values.items():
            spec = _BY_NAME[name]
            if spec.target == "config":
                config[name] = value
            elif spec.target == "client":
                client[spec.client_key] = _truthy(value) if name in _BOOL_CLIENT else value
            elif spec.target == "retry":
                retry[name] = value
        endpoint = config.get("aws_endpoint") or config.get("azure_storage_endpoint") or ""
        if endpoint.lower().startswith("http://") and "allow_http" not in self.values:
            # an explicit http:// endpoint is consent enough (s3fs/adlfs never asked more)
            client["allow_http"] = True
        if self.kind == "azure" and _truthy(config.get("azure_storage_use_emulator")):
            config.setdefault("azure_storage_account_name", _EMULATOR_ACCOUNT)
            config.setdefault("azure_storage_account_key", _EMULATOR_KEY)
        retry_config: dict[str, Any] = {}
        if "client_max_retries" in retry:
            retry_config["max_retries"] = _int_option("client_max_retries", retry)
        if "client_retry_timeout" in retry:
            import datetime

            seconds = _int_option("client_retry_timeout", retry)
            retry_config["retry_timeout"] = datetime.timedelta(seconds=seconds)
        return config, client, retry_config

    # -- fsspec ------------------------------------------------------------------------------

    def fsspec_arguments(self) -> dict[str, Any]:
        """Keyword arguments for the s3fs / adlfs / gcsfs filesystem constructor.

        Raises InvalidStorageArgumentError for an option the fsspec backend cannot honour.
        """
        out: dict[str, Any] = {}
        unsupported: list[str] = []
        for name, value in self.values.items():
            spec = _BY_NAME[name]
            if spec.fsspec is None:
                unsupported.append(name)
            elif spec.fsspec:
                _set_dotted(out, spec.fsspec, _fsspec_value(spec.fsspec, value))
        if unsupported:
            why = (
                "s3fs, adlfs and gcsfs keep their own timeouts and retries"
                if any(name.endswith(("timeout", "retries")) for name in unsupported)
                else "they have no fsspec counterpart"
            )
            raise InvalidStorageArgumentError(
                f"the fsspec backend cannot honour {sorted(unsupported)} ({why}); remove "
                "them, or use the obstore backend: install 'txn_engine[obstore]' and drop "
                f"{BACKEND_OPTION}='fsspec'"
            )
        if self.kind == "s3":
            self._fsspec_s3(out)
        elif self.kind == "azure":
            self._fsspec_azure(out)
        else:
            self._fsspec_gcs(out)
        for name, value in self.fsspec_extra.items():
            if isinstance(value, Mapping) and isinstance(out.get(name), dict):
                out[name] = {**out[name], **value}
            else:
                out[name] = value
        return out

    def _fsspec_s3(self, out: dict[str, Any]) -> None:
        if "endpoint_url" not in out:  # object_store's environment names, as pylance reads them
            for env in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"):
                if os.environ.get(env):
                    out["endpoint_url"] = os.environ[env]
                    break
        kwargs = out.get("client_kwargs", {})
        if "region_name" not in kwargs:
            region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
            if region:
                out.setdefault("client_kwargs", {})["region_name"] = region
        if _truthy(self.values.get("aws_virtual_hosted_style_request")):
            out.setdefault("config_kwargs", {}).setdefault("s3", {})["addressing_style"] = "virtual"

    def _fsspec_azure(self, out: dict[str, Any]) -> None:
        endpoint = self.values.get("azure_storage_endpoint")
        if _truthy(self.values.get("azure_storage_use_emulator")) and not endpoint:
            endpoint = f"http://127.0.0.1:10000/{_EMULATOR_ACCOUNT}"
            out.setdefault("account_name", _EMULATOR_ACCOUNT)
            out.setdefault("account_key", _EMULATOR_KEY)
        if endpoint:
            account = out.pop("account_name", None) or os.environ.get(
                "AZURE_STORAGE_ACCOUNT_NAME", ""
            )
            key = out.pop("account_key", None) or os.environ.get("AZURE_STORAGE_ACCOUNT_KEY")
            scheme = endpoint.partition("://")[0] or "https"
            parts = [f"DefaultEndpointsProtocol={scheme}", f"AccountName={account}"]
            if key:
                parts.append(f"AccountKey={key}")
            sas = out.pop("sas_token", None)
            if sas:
                parts.append(f"SharedAccessSignature={str(sas).lstrip('?')}")
            parts.append(f"BlobEndpoint={endpoint}")
            out["connection_string"] = ";".join(parts) + ";"

    def _fsspec_gcs(self, out: dict[str, Any]) -> None:
        if _truthy(self.values.get("google_skip_signature")):
            out["token"] = "anon"
        key = self.values.get("google_service_account_key")
        if key:
            out["token"] = _json_object("google_service_account_key", key)
        path = self.values.get("google_service_account")
        if path:
            # object_store reads a custom endpoint (``gcs_base_url``) and ``disable_oauth``
            # from the service-account file; gcsfs takes them as arguments.
            try:
                with open(path, encoding="utf-8") as handle:
                    account = json.load(handle)
            except (OSError, ValueError) as exc:
                raise InvalidStorageArgumentError(
                    f"google_service_account: cannot read a JSON file at {path!r}: "
                    f"{type(exc).__name__}"
                ) from None
            if not isinstance(account, dict):
                raise InvalidStorageArgumentError(
                    f"google_service_account: {path!r} is not a JSON object"
                )
            if account.get("gcs_base_url"):
                out["endpoint_url"] = str(account["gcs_base_url"])
            out["token"] = "anon" if account.get("disable_oauth") else path


#: fsspec instance/listing cache switches. obstore honours ``skip_instance_cache`` too (a
#: client of its own instead of the one shared by every ``open_storage`` of the same table and
#: options) and ignores ``use_listings_cache`` (it caches no listing).
_CACHE_KNOBS: Final = frozenset({"skip_instance_cache", "use_listings_cache"})

_BOOL_CLIENT: Final = frozenset(
    {"allow_http", "allow_invalid_certificates", "http1_only", "http2_only"}
)


#: the largest value of an integer option (``client_max_retries``, ``client_retry_timeout``
#: in seconds): far past any real use, and within what obstore and ``timedelta`` convert
_MAX_INT_OPTION: Final = 2**32 - 1


def _int_option(name: str, values: Mapping[str, str]) -> int:
    """The option's value as an integer in ``[0, _MAX_INT_OPTION]``: ASCII digits only, as
    Lance parses it (Python's ``int`` would also take ``"1_000"``, ``" 7 "`` or an
    Arabic-Indic seven), else InvalidStorageArgumentError."""
    text = values[name]
    value = jsontext.whole_number(text, _MAX_INT_OPTION)
    if value is None:
        raise InvalidStorageArgumentError(
            f"{name} must be a whole number from 0 to {_MAX_INT_OPTION}, got {text[:40]!r}"
        )
    return value


def _json_object(name: str, text: str) -> dict[str, Any]:
    try:
        value = jsontext.loads(text)
    except ValueError:
        raise InvalidStorageArgumentError(f"{name} is not valid JSON") from None
    if not isinstance(value, dict):
        raise InvalidStorageArgumentError(f"{name} is not a JSON object")
    return value


def _fsspec_value(target: str, value: str) -> Any:
    if target in {"anon", "requester_pays"}:
        return _truthy(value)
    return value


def _set_dotted(out: dict[str, Any], dotted: str, value: Any) -> None:
    head, _, rest = dotted.partition(".")
    if not rest:
        out.setdefault(head, value)
        return
    inner = out.setdefault(head, {})
    _set_dotted(inner, rest, value)


def resolve_options(scheme: str, options: Mapping[str, Any] | None) -> StorageOptions:
    """Resolve ``options`` for a ``scheme`` of a cloud store (s3, gs, az, abfs, ...).

    Lance's names are kept, aliases (older fsspec spellings such as ``key``/``secret``/
    ``endpoint_url``, ``client_kwargs={"region_name": ...}``) are mapped to them, and
    fsspec-only spellings are kept apart. Raises InvalidStorageArgumentError for an unknown
    name (the message lists the accepted ones), for two spellings of one option with
    different values, or for a scheme that is not a cloud store.
    """
    kind = store_kind(scheme)
    if kind is None:
        raise InvalidStorageArgumentError(f"no option table for scheme {scheme!r}")
    values: dict[str, str] = {}
    extra: dict[str, Any] = {}
    unknown: list[str] = []
    for raw_name, value in (options or {}).items():
        if not isinstance(raw_name, str):
            raise InvalidStorageArgumentError(
                f"storage option names must be strings, got {type(raw_name).__name__}"
            )
        if value is None:
            continue
        spec = _lookup(kind, raw_name)
        if spec is None:
            if raw_name in _FSSPEC_ONLY[kind]:
                if kind == "s3" and raw_name == "client_kwargs" and isinstance(value, Mapping):
                    value = dict(value)
                    region = value.pop("region_name", None)
                    if region is not None:
                        _put(values, "aws_region", _as_text(region), raw_name)
                    endpoint = value.pop("endpoint_url", None)
                    if endpoint is not None:
                        _put(values, "aws_endpoint", _as_text(endpoint), raw_name)
                    if not value:
                        continue
                if kind == "s3" and raw_name == "anon":
                    _put(values, "aws_skip_signature", _as_text(value), raw_name)
                    continue
                if raw_name in {"skip_instance_cache", "use_listings_cache"}:
                    extra[raw_name] = value  # caching knobs (see _CACHE_KNOBS)
                    continue
                extra[raw_name] = value
                continue
            unknown.append(raw_name)
            continue
        if isinstance(value, Mapping):
            raise InvalidStorageArgumentError(f"storage option {raw_name!r} takes a string")
        _put(values, spec.name, _as_text(value), raw_name)
    if unknown:
        raise InvalidStorageArgumentError(
            f"unknown storage option(s) {sorted(unknown)} for {scheme}://; accepted: "
            f"{', '.join(accepted_names(kind))} (older fsspec spellings such as "
            f"{', '.join(sorted(_FSSPEC_ONLY[kind])[:4])} are accepted too)"
        )
    backend = values.get(BACKEND_OPTION)
    if backend is not None and backend not in {"obstore", "fsspec"}:
        raise InvalidStorageArgumentError(
            f"{BACKEND_OPTION} must be 'obstore' or 'fsspec', got {backend!r}"
        )
    return StorageOptions(kind, values, extra)


def _put(values: dict[str, str], name: str, value: str, given_as: str) -> None:
    old = values.get(name)
    if old is not None and old != value:
        shown = "***" if is_secret(name) else f"{old!r} and {value!r}"
        raise InvalidStorageArgumentError(
            f"storage option {name!r} given twice with different values ({shown}; "
            f"last spelling {given_as!r})"
        )
    values[name] = value


def lance_options(uri: str, options: Mapping[str, Any] | None) -> dict[str, str] | None:
    """The storage options to hand pylance for ``uri``, from the same set txn_engine takes:
    Lance's names (aliases resolved), without txn_engine's own options. None for local
    paths and when nothing is left. Raises like :func:`resolve_options` (an unknown name, or
    an fsspec-only spelling pylance cannot take)."""
    if not options:
        return None
    scheme = uri.split("://", 1)[0] if "://" in uri else ""
    if store_kind(scheme) is None:
        return None
    resolved = resolve_options(scheme, options)
    if resolved.fsspec_extra:
        raise InvalidStorageArgumentError(
            f"storage option(s) {sorted(resolved.fsspec_extra)} exist only for the fsspec "
            "backend; pylance cannot take them: give Lance's names instead"
        )
    own = {BACKEND_OPTION, UNSAFE_OPTION}
    out = {k: v for k, v in resolved.values.items() if k not in own}
    return out or None
