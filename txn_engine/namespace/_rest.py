"""The Lance REST namespace API over a :class:`~txn_engine.Namespace` (``txn-engine
serve-namespace``): pylance's ``RestNamespace`` and any other Lance REST client open, read and
commit through it, several processes and a Spark cluster sharing one server.

Every route is ``POST /v1/...`` as in the spec (the list routes also ``GET``); a table or
namespace id in the path is its parts joined by the ``delimiter`` query parameter (default
``$``). Errors answer the spec's
``ErrorResponse`` (``{"error", "code", "detail"}``) with its HTTP status: 404 for a missing
table, namespace or version, 409 for one that exists or a concurrent modification, 400 for
bad input, 503 when the store failed. Responses never carry a secret: the server's namespace
hands out no secret storage option (``share_storage_options=False``), messages are redacted,
and the request log holds the method, the route and the status only.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import MappingProxyType
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from lance_namespace import errors as lerr

from txn_engine.namespace._lance import Namespace, spec_error
from txn_engine.redact import RedactingFilter, redact_text

__all__ = ["NamespaceServer", "handle"]

_LOG = logging.getLogger("txn_engine.namespace.rest")
_LOG.addFilter(RedactingFilter())
_MAX_BODY = 256 << 20
_STATUS: Mapping[int, int] = MappingProxyType(
    {
        lerr.ErrorCode.UNSUPPORTED: 406,
        lerr.ErrorCode.NAMESPACE_NOT_FOUND: 404,
        lerr.ErrorCode.NAMESPACE_ALREADY_EXISTS: 409,
        lerr.ErrorCode.NAMESPACE_NOT_EMPTY: 409,
        lerr.ErrorCode.TABLE_NOT_FOUND: 404,
        lerr.ErrorCode.TABLE_ALREADY_EXISTS: 409,
        lerr.ErrorCode.TABLE_VERSION_NOT_FOUND: 404,
        lerr.ErrorCode.INVALID_INPUT: 400,
        lerr.ErrorCode.CONCURRENT_MODIFICATION: 409,
        lerr.ErrorCode.SERVICE_UNAVAILABLE: 503,
        lerr.ErrorCode.INTERNAL: 500,
    }
)
# route (after /v1/; {id}: the table or namespace id) -> the namespace's method
_ROUTES: Mapping[str, str] = MappingProxyType(
    {
        "namespace/{id}/create": "create_namespace",
        "namespace/{id}/describe": "describe_namespace",
        "namespace/{id}/drop": "drop_namespace",
        "namespace/{id}/exists": "namespace_exists",
        "namespace/{id}/list": "list_namespaces",
        "namespace/{id}/table/list": "list_tables",
        "table/{id}/describe": "describe_table",
        "table/{id}/exists": "table_exists",
        "table/{id}/declare": "declare_table",
        "table/{id}/drop": "drop_table",
        "table/{id}/deregister": "deregister_table",
        "table/{id}/create": "create_table",
        "table/{id}/version/list": "list_table_versions",
        "table/{id}/version/create": "create_table_version",
        "table/{id}/version/describe": "describe_table_version",
        "table/{id}/version/delete": "batch_delete_table_versions",
        "table/version/batch-create": "batch_create_table_versions",
        "table/batch-commit": "batch_commit_tables",
    }
)
_INTS = ("limit", "version")
_BOOLS = ("descending", "with_table_uri", "load_detailed_metadata", "check_declared")


def _route(path: str) -> tuple[str, str | None] | None:
    """(method name, raw id) of a request path, or None when no route matches."""
    if not path.startswith("/v1/"):
        return None
    parts = path[len("/v1/") :].strip("/").split("/")
    for pattern, method in _ROUTES.items():
        want = pattern.split("/")
        if len(want) != len(parts):
            continue
        ident = None
        for w, p in zip(want, parts, strict=True):
            if w == "{id}":
                ident = unquote(p)
            elif w != p:
                break
        else:
            return method, ident
    return None


def _request(ident: str | None, query: Mapping[str, list[str]], body: bytes, arrow: bool) -> Any:
    req: dict[str, Any] = {}
    if body and not arrow:
        try:
            loaded = json.loads(body)
        except ValueError as exc:
            raise lerr.InvalidInputError(f"the request body is not JSON: {exc}") from exc
        if not isinstance(loaded, dict):
            raise lerr.InvalidInputError("the request body must be a JSON object")
        req.update(loaded)
    for key, values in query.items():
        value: Any = values[-1]
        if key in _INTS:
            if not value.isdigit():
                raise lerr.InvalidInputError(f"query parameter {key} must be a whole number")
            value = int(value)
        elif key in _BOOLS:
            value = value.lower() == "true"
        req[key] = value
    if ident is not None:
        delimiter = str(req.pop("delimiter", "$") or "$")
        req["id"] = [] if ident in ("", delimiter) else ident.split(delimiter)
    return req


def handle(ns: Namespace, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
    """Answer one request: ``path`` with its query string, ``body`` as sent. Returns the
    HTTP status and the JSON object to send."""
    url = urlsplit(path)
    found = _route(url.path)
    if found is None:
        return 404, {"error": f"no route {url.path}", "code": int(lerr.ErrorCode.UNSUPPORTED)}
    method, ident = found
    try:
        query = parse_qs(url.query, keep_blank_values=True)
        arrow = method == "create_table"
        req = _request(ident, query, body, arrow)
        call: Callable[..., Any] = getattr(ns, method)
        out = call(req, body) if arrow else call(req)
    except Exception as exc:
        err = spec_error(exc)
        status = _STATUS.get(err.code, 500)
        return status, {"error": redact_text(str(err)), "code": int(err.code)}
    answer = out.to_dict() if hasattr(out, "to_dict") else (out or {})
    return 200, dict(answer or {})


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length < 0 or length > _MAX_BODY:
            self._send(413, {"error": "request body too large", "code": 13})
            return
        body = self.rfile.read(length) if length else b""
        status, answer = handle(self.server.namespace, self.path, body)
        self._send(status, answer)

    def do_GET(self) -> None:  # the spec's list routes are GETs with query parameters
        status, answer = handle(self.server.namespace, self.path, b"")
        self._send(status, answer)

    def _send(self, status: int, answer: Mapping[str, Any]) -> None:
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        route = urlsplit(self.path).path
        _LOG.info("%s %s %s", self.command, route, args[1] if len(args) > 1 else "")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], namespace: Namespace) -> None:
        super().__init__(address, _Handler)
        self.namespace = namespace


class NamespaceServer:
    """Serve ``namespace`` over the Lance REST API on ``host:port`` (default loopback; port
    0 picks a free one, see :attr:`port`). ``start()`` serves in a background thread,
    ``serve_forever()`` in this one; ``close()`` stops. A context manager."""

    def __init__(self, namespace: Namespace, host: str = "127.0.0.1", port: int = 2333) -> None:
        self.namespace = namespace
        self._server = _Server((host, port), namespace)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port served on."""
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """The base URL clients connect to (``RestNamespace(uri=server.url)``)."""
        host = str(self._server.server_address[0])
        return f"http://{host}:{self.port}"

    def start(self) -> NamespaceServer:
        """Serve in a daemon thread."""
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve until :meth:`close` (or KeyboardInterrupt)."""
        self._server.serve_forever()

    def close(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> NamespaceServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
