"""Storage on ``obstore``: Python bindings of the Rust ``object_store`` crate pylance uses.

The default backend for ``s3://``, ``gs://`` and ``az://``/``abfs://`` URIs when ``obstore``
is installed (``pip install 'txn_engine[obstore]'``). Create-if-absent is obstore's
conditional put (``mode="create"``), which object_store sends as:

* S3: ``PutObject`` with ``If-None-Match: *`` (412 becomes ObjectExistsError);
* GCS: an upload with the generation precondition ``x-goog-if-generation-match: 0``;
* Azure: ``Put Blob`` with ``If-None-Match: *`` (409 ``BlobAlreadyExists``).

Bodies are sent in one request (no multipart) for creates, so the precondition covers the
whole object. Nothing is cached: every ``list``/``exists``/``size`` asks the server.

Options are Lance's names (see :mod:`txn_engine.storage.options`); credentials missing from
them are read from the environment by object_store exactly as pylance reads them.

Before the first ``put_if_absent`` on a (store, bucket/container, prefix) in a process, the
store's enforcement of the precondition is probed (see :mod:`txn_engine.storage._probe`);
a store that ignores it raises :class:`~txn_engine.errors.AtomicityUnsupportedError`.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from txn_engine import session
from txn_engine.errors import (
    AmbiguousWriteError,
    InvalidStorageArgumentError,
    LimitExceededError,
    ObjectExistsError,
    ObjectNotFoundError,
    StorageError,
    TxnEngineError,
)
from txn_engine.redact import redact_text
from txn_engine.storage._paths import check_path, check_prefix, check_range
from txn_engine.storage._probe import ensure_conditional_create
from txn_engine.storage.base import DEFAULT_OBJECT_STORE_READ_CONCURRENCY, OBJECT_KEY_BYTES
from txn_engine.storage.options import StorageOptions, resolve_options, store_kind

__all__ = ["ObstoreStorage", "is_backend_failure", "obstore_available"]

_GS_SCHEMES: Mapping[str, str] = MappingProxyType({"gs": "gs", "gcs": "gs"})
_CLIENT_ERROR = re.compile(r"status code: 4\d\d")
_SAS_QUERY = re.compile(
    r"([?&](?:sig|se|sp|sv|st|spr|srt|ss|skoid|sktid|X-Amz-Signature|X-Amz-Credential|"
    r"X-Amz-Security-Token)=)[^&\s\"']*",
    re.IGNORECASE,
)


def obstore_available() -> bool:
    """Whether the ``obstore`` package can be imported."""
    try:
        importlib.import_module("obstore")
    except ImportError:
        return False
    return True


def _obstore() -> Any:
    try:
        return importlib.import_module("obstore")
    except ImportError as exc:
        raise StorageError(
            "the obstore backend needs the obstore package (pip install 'txn_engine[obstore]')"
        ) from exc


def is_backend_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure of a request to handle like any other: an ``Exception``,
    or a panic of the Rust code under obstore (pyo3's ``PanicException`` derives from
    ``BaseException``; object_store 0.14 panics, for one, on a request whose URL it built
    from an option holding a character a URI cannot, ``aws_container_credentials_relative_uri``).
    Not KeyboardInterrupt, SystemExit, ..."""
    return isinstance(exc, Exception) or type(exc).__name__ == "PanicException"


def _exceptions() -> Any:
    return importlib.import_module("obstore.exceptions")


#: How many obstore clients a session keeps (the least recently used one goes first).
_CLIENTS_MAX = 64


class SharedClients:
    """A session's obstore clients by (store class, URL, configuration) (its part of a
    :class:`~txn_engine.session.Session`): building one costs ~5 ms (TLS setup), more than a
    request to a nearby store, and a client is thread-safe and holds a connection pool, so
    every ``open_storage`` of the same table with the same options in one session shares
    one. Bounded (:data:`_CLIENTS_MAX`); ``skip_instance_cache=true`` (fsspec's switch)
    asks for a client of its own."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.clients: OrderedDict[tuple[Any, ...], Any] = OrderedDict()


def _frozen(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _frozen(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return (type(value).__name__, repr(value))


def _truthy_option(value: Any) -> bool:
    return value is True or str(value).strip().lower() in {"1", "true", "yes", "on"}


def _client(cls: Any, url: str, kwargs: Mapping[str, Any], *, fresh: bool) -> Any:
    """The obstore client for ``url`` with ``kwargs`` (shared in the current session unless
    ``fresh``)."""
    if fresh:
        return cls.from_url(url, **kwargs)
    key = (cls, url, _frozen(kwargs))
    shared = session.current().part(SharedClients)
    with shared.lock:
        client = shared.clients.get(key)
        if client is not None:
            shared.clients.move_to_end(key)
            return client
    client = cls.from_url(url, **kwargs)
    with shared.lock:
        client = shared.clients.setdefault(key, client)
        shared.clients.move_to_end(key)
        while len(shared.clients) > _CLIENTS_MAX:
            shared.clients.popitem(last=False)
    return client


class ObstoreStorage:
    """:class:`~txn_engine.storage.Storage` on an obstore ``S3Store``/``GCSStore``/
    ``AzureStore`` rooted at ``uri`` (``s3://bucket/path``, ``gs://bucket/path``,
    ``az://container/path``, ``abfs[s]://container@account.dfs.core.windows.net/path``).

    ``options`` are storage options in Lance's spelling (a mapping, or already resolved
    :class:`~txn_engine.storage.options.StorageOptions`). ``unsafe=True`` (or the option
    ``txn_engine_unsafe_no_atomicity_check='true'``) skips the atomicity probe.

    Errors: a missing object is ObjectNotFoundError; a lost create race ObjectExistsError
    (which, after a client-side retry of a lost response, can also mean this call created
    it: the commit loop reads back); a write that failed in transport or with a 5xx status
    AmbiguousWriteError; anything else StorageError. Messages never carry secret option
    values or signed-URL parameters.
    """

    def __init__(
        self,
        uri: str,
        options: Mapping[str, Any] | StorageOptions | None = None,
        *,
        unsafe: bool = False,
    ) -> None:
        scheme, sep, rest = uri.partition("://")
        kind = store_kind(scheme) if sep else None
        if kind is None:
            raise InvalidStorageArgumentError(
                f"the obstore backend takes s3://, gs:// or az:// / abfs:// URIs, got {uri!r}"
            )
        resolved = (
            options if isinstance(options, StorageOptions) else resolve_options(scheme, options)
        )
        self._uri = uri
        self._kind = kind
        self._options = resolved
        self._secrets = resolved.secrets()
        self._hide_causes = resolved.get("azure_storage_sas_key") is not None
        self._unsafe = unsafe or resolved.unsafe_no_atomicity_check
        url = f"{_GS_SCHEMES.get(scheme.lower(), scheme.lower())}://{rest}".rstrip("/")
        self._location = url
        config, client, retry = resolved.obstore_arguments()
        _obstore()  # a clear StorageError when the package is missing
        store_module = importlib.import_module("obstore.store")
        cls = {"s3": "S3Store", "gcs": "GCSStore", "azure": "AzureStore"}[kind]
        kwargs: dict[str, Any] = {"config": config}
        if client:  # an empty dict would replace the environment's (AWS_ALLOW_HTTP, ...)
            env = {"s3": "AWS", "gcs": "GOOGLE", "azure": "AZURE"}[kind] + "_ALLOW_HTTP"
            if "allow_http" not in client and os.environ.get(env):
                client["allow_http"] = os.environ[env].strip().lower() in {"1", "true", "yes"}
            kwargs["client_options"] = client
        if retry:
            kwargs["retry_config"] = retry
        fresh = _truthy_option(resolved.fsspec_extra.get("skip_instance_cache"))
        try:
            self._store: Any = _client(getattr(store_module, cls), url, kwargs, fresh=fresh)
        except BaseException as exc:
            if not is_backend_failure(exc):
                raise
            raise InvalidStorageArgumentError(
                f"cannot configure the obstore {kind} store for {self._where()}: {self._scrub(exc)}"
            ) from None
        endpoint = (
            config.get("aws_endpoint")
            or config.get("azure_storage_endpoint")
            or config.get("google_service_account")
            or ""
        )
        self._probe_key = ("obstore", kind, endpoint, self._location)

    def __repr__(self) -> str:
        return f"ObstoreStorage({self._kind!r}, {self._where()!r})"

    def _where(self) -> str:
        return _SAS_QUERY.sub(r"\1***", self._location)

    #: reads are network round trips: a commit reads the versions it is behind concurrently
    read_concurrency = DEFAULT_OBJECT_STORE_READ_CONCURRENCY

    @property
    def max_path_bytes(self) -> int:
        """What is left of the store's 1,024-byte keys after the dataset root's prefix."""
        prefix = self.prefix
        used = len(prefix.encode()) + 1 if prefix else 0
        return max(0, OBJECT_KEY_BYTES - used)

    @property
    def uri(self) -> str:
        """The dataset root as given."""
        return self._uri

    @property
    def store(self) -> Any:
        """The underlying obstore store (its prefix is the dataset root)."""
        return self._store

    @property
    def prefix(self) -> str:
        """The dataset root inside the bucket/container (``my/ds`` for ``s3://b/my/ds``)."""
        return str(getattr(self._store, "prefix", None) or "").strip("/")

    @property
    def kind(self) -> str:
        """``"s3"``, ``"gcs"`` or ``"azure"``."""
        return self._kind

    @property
    def options(self) -> StorageOptions:
        """The resolved options (repr redacts secrets)."""
        return self._options

    # -- errors ------------------------------------------------------------------------------

    def _scrub(self, exc: BaseException) -> str:
        text = str(exc).split("\n\nDebug source:", 1)[0].strip()
        text = redact_text(text, [secret for secret in self._secrets if len(secret) >= 4])
        text = _SAS_QUERY.sub(r"\1***", text)
        return f"{type(exc).__name__}: {text}"

    def _cause(self, exc: BaseException) -> BaseException | None:
        """The backend exception to chain, or None when its text could carry a secret
        (object_store puts request URLs, and so SAS query parameters, in its messages)."""
        return None if self._hide_causes else exc

    @contextlib.contextmanager
    def _mapped(self, op: str, path: str, *, write: bool) -> Iterator[None]:
        errors = _exceptions()
        try:
            yield
        except TxnEngineError:
            raise
        except FileNotFoundError as exc:
            if write:
                raise StorageError(
                    f"{op} {path} failed (missing bucket or container?): {self._scrub(exc)}"
                ) from self._cause(exc)
            raise ObjectNotFoundError(f"{op}: no object at {path}") from self._cause(exc)
        except (errors.AlreadyExistsError, errors.PreconditionError) as exc:
            if write:
                cause = self._cause(exc)
                raise ObjectExistsError(f"{op}: object already exists: {path}") from cause
            raise StorageError(f"{op} {path} failed: {self._scrub(exc)}") from self._cause(exc)
        except (
            errors.PermissionDeniedError,
            errors.UnauthenticatedError,
            errors.InvalidPathError,
            errors.NotSupportedError,
            errors.UnknownConfigurationKeyError,
        ) as exc:
            raise StorageError(f"{op} {path} failed: {self._scrub(exc)}") from self._cause(exc)
        except BaseException as exc:
            if not is_backend_failure(exc):
                raise
            message = self._scrub(exc)
            if write and not _CLIENT_ERROR.search(message):
                raise AmbiguousWriteError(
                    f"{op} {path}: the write may or may not have landed ({message}); read it back"
                ) from self._cause(exc)
            raise StorageError(f"{op} {path} failed: {message}") from self._cause(exc)

    # -- the Storage contract ----------------------------------------------------------------

    def _create(self, path: str, data: bytes) -> None:
        with self._mapped("put_if_absent", path, write=True):
            _obstore().put(self._store, path, data, mode="create", use_multipart=False)

    def _delete(self, path: str) -> None:
        self.delete(path)

    def put_if_absent(self, path: str, data: bytes) -> None:
        """Create ``path`` iff absent (conditional put); ObjectExistsError if it exists.

        The first call per store, bucket and prefix in the current session probes that the
        store enforces the precondition (AtomicityUnsupportedError if it does not)."""
        check_path(path)
        if not self._unsafe:
            ensure_conditional_create(
                self._probe_key, f"{self._kind} store {self._where()}", self._create, self._delete
            )
        self._create(path, data)

    def put(self, path: str, data: bytes) -> None:
        """Write ``path`` unconditionally."""
        check_path(path)
        with self._mapped("put", path, write=True):
            _obstore().put(self._store, path, data)

    def get(self, path: str) -> bytes:
        """Return the whole object; ObjectNotFoundError if absent."""
        check_path(path)
        with self._mapped("get", path, write=False):
            return bytes(_obstore().get(self._store, path).bytes())

    def get_range(self, path: str, start: int, end: int) -> bytes:
        """Return bytes ``[start, end)`` clamped to the object's size."""
        check_range(start, end)
        check_path(path)
        if start == end:
            self.size(path)
            return b""
        try:
            with self._mapped("get_range", path, write=False):
                data = bytes(_obstore().get_range(self._store, path, start=start, end=end))
        except ObjectNotFoundError:
            raise
        except StorageError:
            # stores answer HTTP 416 for a range starting at or past the end
            if start > 0 and start >= self.size(path):
                return b""
            raise
        return data[: end - start]

    def get_bounded(self, path: str, max_bytes: int) -> bytes:
        """The whole object in one request, refused (LimitExceededError) when the response
        says it is larger than ``max_bytes``, before its body is read. One GET instead of a
        HEAD and a ranged GET: the read-back of a lost create (the winner's manifest, which
        a writer that lost the race builds on) is then one round trip."""
        check_path(path)
        with self._mapped("get_bounded", path, write=False):
            result = _obstore().get(self._store, path)
            size = int(result.meta["size"])
            data = bytes(result.bytes()) if size <= max_bytes else None
        if data is None or len(data) > max_bytes:
            raise LimitExceededError(
                f"{self.uri}/{path}: object is {size} bytes, more than the {max_bytes} "
                "allowed here",
                limit="max_bytes",
            )
        return data

    def get_tail(self, path: str, n: int) -> tuple[bytes, int] | None:
        """The last ``n`` bytes of the object (all of it if smaller) and its size, in one
        request (a suffix range); None where the store has no suffix ranges (Azure): the
        caller then reads ranges. ObjectNotFoundError if absent. The manifest reader uses
        it to read a manifest footer first in one round trip."""
        check_path(path)
        if n <= 0 or self._kind == "azure":
            return None
        with self._mapped("get_tail", path, write=False):
            result = _obstore().get(self._store, path, options={"range": {"suffix": n}})
            size = int(result.meta["size"])
            data = bytes(result.bytes())
        return data, size

    def get_head(self, path: str, n: int) -> tuple[bytes, int]:
        """The first ``n`` bytes of the object (all of it if smaller) and its size, in one
        request (a ranged GET answers with the whole size); ObjectNotFoundError if absent.
        The manifest reader uses it where there is no suffix range (Azure)."""
        check_path(path)
        check_range(0, n)
        with self._mapped("get_head", path, write=False):
            result = _obstore().get(self._store, path, options={"range": (0, max(n, 1))})
            size = int(result.meta["size"])
            data = bytes(result.bytes())
        return data[:n], size

    def size(self, path: str) -> int:
        """Return the object's size; ObjectNotFoundError if absent."""
        check_path(path)
        with self._mapped("size", path, write=False):
            meta = _obstore().head(self._store, path)
        return int(meta["size"])

    def list(self, prefix: str) -> Sequence[str]:
        """Return the object names directly under directory ``prefix`` (missing → empty)."""
        rel = check_prefix(prefix)
        with self._mapped("list", rel or "/", write=False):
            result = _obstore().list_with_delimiter(self._store, rel or None)
        names: list[str] = []
        for meta in result["objects"]:
            name = str(meta["path"]).rpartition("/")[2]
            if name:
                names.append(name)
        return names

    def list_ordered(self, prefix: str) -> Iterator[str] | None:
        """The names directly under directory ``prefix`` in byte order, fetched a page
        (1,000 names) at a time as the caller iterates, so stopping early saves requests;
        None for an S3 Express directory bucket, which does not list in order.
        :func:`txn_engine.format.naming.scan_versions` uses it to read only the newest
        versions."""
        rel = check_prefix(prefix)
        bucket = self._location.partition("://")[2].partition("/")[0]
        if self._kind == "s3" and bucket.endswith("--x-s3"):
            return None
        return self._ordered(rel)

    def _ordered(self, rel: str) -> Iterator[str]:
        base = f"{rel}/" if rel else ""
        with self._mapped("list", rel or "/", write=False):
            for chunk in _obstore().list(self._store, rel or None, chunk_size=1000):
                for meta in chunk:
                    path = str(meta["path"])
                    name = path[len(base) :] if path.startswith(base) else path
                    if name and "/" not in name:
                        yield name

    def exists(self, path: str) -> bool:
        """Whether an object (not a directory) exists at ``path``."""
        try:
            self.size(path)
        except ObjectNotFoundError:
            return False
        return True

    def delete(self, path: str) -> None:
        """Delete ``path``; a missing object is not an error."""
        check_path(path)
        with self._mapped("delete", path, write=True):
            try:
                _obstore().delete(self._store, path)
            except FileNotFoundError:
                return
