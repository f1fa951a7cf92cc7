"""Storage-backend checks that need optional packages (s3fs, obstore, pylance): the unit
tier runs with the core alone, so they live here. No server is needed (closed loopback ports
and the local disk)."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest

from txn_engine.errors import AmbiguousWriteError, InvalidStorageArgumentError, StorageError
from txn_engine.storage import FsspecStorage, LocalStorage, ObstoreStorage, open_storage, redact
from txn_engine.storage._probe import forget_probes

LANCE_S3 = {
    "aws_access_key_id": "AKIDEXAMPLE",
    "aws_secret_access_key": "s3cr3t-value-xyz",
    "aws_session_token": "t0ken-value-xyz",
    "aws_endpoint": "http://127.0.0.1:9",
    "aws_region": "eu-west-3",
    "allow_http": "true",
}


@pytest.fixture(autouse=True)
def _fresh_probes() -> Iterator[None]:
    """Every test starts with no store proven (the probe cache is process-wide)."""
    forget_probes()
    yield
    forget_probes()


def test_lance_option_names_reach_s3fs() -> None:
    st = open_storage("s3://bucket/ds", {**LANCE_S3, "txn_engine_backend": "fsspec"})
    assert isinstance(st, FsspecStorage)
    assert st.fs.key == "AKIDEXAMPLE"
    assert st.fs.secret == "s3cr3t-value-xyz"
    assert st.fs.token == "t0ken-value-xyz"
    assert st.fs.endpoint_url == "http://127.0.0.1:9"
    assert st.fs.client_kwargs["region_name"] == "eu-west-3"


def test_default_backend_is_obstore_and_secrets_stay_hidden() -> None:
    st = open_storage("s3://bucket/ds", LANCE_S3)
    assert isinstance(st, ObstoreStorage)
    assert st.prefix == "ds"
    shown = repr(st) + repr(st.options) + str(redact(LANCE_S3))
    for secret in ("s3cr3t-value-xyz", "t0ken-value-xyz", "AKIDEXAMPLE"):
        assert secret not in shown
    assert "***" in repr(st.options)

    def lock(path: str) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    # a commit lock is an fsspec feature: without a backend named, the lock selects fsspec
    assert isinstance(open_storage("s3://bucket/ds", LANCE_S3, commit_lock=lock), FsspecStorage)
    with pytest.raises(InvalidStorageArgumentError, match="fsspec backend only"):
        open_storage(
            "s3://bucket/ds", {**LANCE_S3, "txn_engine_backend": "obstore"}, commit_lock=lock
        )
    # an fsspec-only spelling keeps an existing fsspec configuration on fsspec ...
    kept = open_storage("s3://bucket/ds", {**LANCE_S3, "config_kwargs": {}})
    assert isinstance(kept, FsspecStorage)
    gcs = open_storage("gs://bucket/ds", {"token": "anon", "endpoint_url": "http://127.0.0.1:9"})
    assert isinstance(gcs, FsspecStorage)
    # ... and is refused, naming the Lance spellings, when obstore is asked for explicitly
    with pytest.raises(InvalidStorageArgumentError, match="only for the fsspec backend"):
        open_storage(
            "s3://bucket/ds", {**LANCE_S3, "config_kwargs": {}, "txn_engine_backend": "obstore"}
        )


def test_without_obstore_cloud_uris_fall_back_to_fsspec(monkeypatch: pytest.MonkeyPatch) -> None:
    import txn_engine.storage as storage_module

    monkeypatch.setattr(storage_module, "obstore_available", lambda: False)
    st = open_storage("s3://bucket/ds", LANCE_S3)
    assert isinstance(st, FsspecStorage)
    assert st.fs.key == "AKIDEXAMPLE"

    def missing(protocol: str) -> Any:
        raise ImportError(f"no {protocol} package")

    monkeypatch.setattr(fsspec, "get_filesystem_class", missing)
    with pytest.raises(StorageError, match=r"txn_engine\[s3\]") as info:
        open_storage("s3://bucket/ds", LANCE_S3)
    assert "txn_engine[obstore]" in str(info.value)


def test_obstore_error_mapping_without_a_server() -> None:
    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    options = {
        **LANCE_S3,
        "aws_endpoint": f"http://127.0.0.1:{port}",
        "client_max_retries": "0",
        "connect_timeout": "2s",
    }
    st = open_storage("s3://bucket/ds", options, unsafe=True)  # unsafe: no probe
    with pytest.raises(AmbiguousWriteError) as write_info:
        st.put("_versions/1.manifest", b"x")
    with pytest.raises(StorageError) as read_info:
        st.get("_versions/1.manifest")
    assert type(read_info.value) is StorageError  # reads are never ambiguous writes
    with pytest.raises(InvalidStorageArgumentError):
        st.get("../escape")
    for text in (str(write_info.value), str(read_info.value)):
        assert "s3cr3t-value-xyz" not in text
        assert "\n" not in text  # one line, no debug dump


@pytest.mark.pylance
def test_pylance_ignores_inflight_staging_files(tmp_path: Path) -> None:
    """A staging file left in ``_versions/`` (crash between write and unlink) is not taken
    for a version by pylance 14, and LocalStorage reads pylance's manifests as written."""
    import lance
    import pyarrow as pa

    uri = str(tmp_path / "ds.lance")
    lance.write_dataset(pa.table({"a": [1, 2, 3]}), uri)
    st = LocalStorage(uri)
    before = sorted(st.list("_versions"))  # pylance 14 also writes latest_version_hint.json
    [manifest] = [n for n in before if n.endswith(".manifest")]
    raw = (tmp_path / "ds.lance" / "_versions" / manifest).read_bytes()
    assert st.get(f"_versions/{manifest}") == raw
    assert st.size(f"_versions/{manifest}") == len(raw)

    # a staging file for the next version, as create_exclusive names it, with garbage bytes
    from txn_engine.storage._files import staging_path

    staging = staging_path(
        str(tmp_path / "ds.lance" / "_versions" / "18446744073709551613.manifest")
    )
    assert not staging.endswith("manifest")
    Path(staging).write_bytes(b"not a manifest")
    ds = lance.dataset(uri)
    assert ds.version == 1
    assert ds.count_rows() == 3
    assert sorted(st.list("_versions")) == before


def test_obstore_clients_are_shared_per_table_and_options() -> None:
    """Building an obstore client costs milliseconds (TLS setup): every open_storage of the
    same table with the same options shares one; other options or ``skip_instance_cache``
    get their own."""
    from txn_engine.storage import open_storage

    opts = {
        "aws_access_key_id": "a",
        "aws_secret_access_key": "b",
        "aws_endpoint": "http://127.0.0.1:9",
        "allow_http": "true",
        "aws_region": "us-east-1",
    }
    one = open_storage("s3://bucket/t.lance", opts)
    two = open_storage("s3://bucket/t.lance", dict(opts))
    assert one._store is two._store  # type: ignore[attr-defined]
    other_key = open_storage("s3://bucket/t.lance", {**opts, "aws_secret_access_key": "c"})
    assert other_key._store is not one._store  # type: ignore[attr-defined]
    other_table = open_storage("s3://bucket/u.lance", opts)
    assert other_table._store is not one._store  # type: ignore[attr-defined]
    fresh = open_storage("s3://bucket/t.lance", {**opts, "skip_instance_cache": True})
    assert fresh._store is not one._store  # type: ignore[attr-defined]


def test_a_panic_under_obstore_is_a_storage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # found by fuzzing the options: object_store 0.14 panics building the credentials
    # request from a relative URI holding a character no URI may hold, and pyo3's
    # PanicException (a BaseException) escaped every storage call as it was
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    storage = open_storage(
        "s3://bkt/t.lance",
        {
            "aws_endpoint": "http://127.0.0.1:1",
            "aws_container_credentials_relative_uri": "\u00e9",
            "client_max_retries": "0",
            "client_retry_timeout": "1",
            "txn_engine_backend": "obstore",
        },
    )
    with pytest.raises(StorageError, match="PanicException"):
        storage.exists("_versions/1.manifest")
    with pytest.raises(StorageError):
        storage.get("_versions/1.manifest")
    # a write that panicked may or may not have been sent: ambiguous, never "not written"
    with pytest.raises(AmbiguousWriteError):
        storage.put("data/x.lance", b"x")


def test_only_panics_and_exceptions_are_mapped(monkeypatch: pytest.MonkeyPatch) -> None:
    from txn_engine.storage import obstore_store

    PanicException = type("PanicException", (BaseException,), {})
    storage = open_storage("s3://bkt/t.lance", {"txn_engine_backend": "obstore"})

    class Raising:
        def __init__(self, exc: BaseException) -> None:
            self.exc = exc

        def head(self, *_: Any, **__: Any) -> Any:
            raise self.exc

    monkeypatch.setattr(obstore_store, "_obstore", lambda: Raising(PanicException("boom")))
    with pytest.raises(StorageError, match="boom"):
        storage.size("x")
    monkeypatch.setattr(obstore_store, "_obstore", lambda: Raising(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        storage.size("x")
