"""te.Namespace on an object store (moto S3): pylance commits through it, transactions
land atomically and roll forward, and the REST server hands out no secret."""

from __future__ import annotations

import json
import logging
import urllib.request
from typing import Any

import emulators as emu  # the fixtures come from conftest.py
import lance
import pyarrow as pa
import pytest
from lance.namespace import RestNamespace

import txn_engine as te
from txn_engine.namespace._rest import NamespaceServer

pytestmark = pytest.mark.pylance


def _ids(ds: Any) -> list[int]:
    return sorted(ds.to_table()["id"].to_pylist())


def test_namespace_on_s3(moto_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    root = moto_server.uri(emu.unique_name("ns"))
    options = moto_server.lance_options()
    ns = te.Namespace(root, options)
    ns.create_table("db.events", pa.table({"id": [1]}))
    ns.create_table("db.dims", pa.table({"id": [1]}))
    ds = lance.dataset(namespace_client=ns, table_id=["db", "events"])
    ds.insert(pa.table({"id": [2]}))
    ds.delete("id = 1")
    with ns.transaction() as tx:
        tx.open("db.events").append(pa.table({"id": [3]}))
        tx.open("db.dims").append(pa.table({"id": [3]}))
    monkeypatch.setattr(ns, "publish_all", lambda decided, staged=None: None)  # dies here
    with ns.transaction() as tx:
        tx.open("db.events").append(pa.table({"id": [4]}))
        tx.open("db.dims").append(pa.table({"id": [4]}))
    reader = te.Namespace(root, options)
    assert reader.snapshot(["db.events", "db.dims"]) == {"db.events": 7, "db.dims": 5}
    assert _ids(lance.dataset(namespace_client=reader, table_id=["db", "dims"])) == [1, 3, 4]
    direct = lance.dataset(reader.location(("db", "events")), storage_options=options)
    assert _ids(direct) == [2, 3, 4]


def test_rest_server_on_s3_hands_out_no_secret(
    moto_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    root = moto_server.uri(emu.unique_name("ns"))
    options = moto_server.lance_options()
    secret = options["aws_secret_access_key"]
    ns = te.Namespace(root, options, share_storage_options=False)
    ns.create_table("db.events", pa.table({"id": [1]}))
    caplog.set_level(logging.INFO, logger="txn_engine.namespace.rest")
    bodies: list[bytes] = []
    with NamespaceServer(ns, port=0) as server:
        for route in (
            "/v1/table/db$events/describe",
            "/v1/table/db$events/version/list",
            "/v1/table/db$missing/describe",
            "/v1/table/db$events/declare",
        ):
            request = urllib.request.Request(f"{server.url}{route}", data=b"{}", method="POST")
            try:
                with urllib.request.urlopen(request, timeout=30) as answer:
                    bodies.append(answer.read())
            except urllib.error.HTTPError as exc:
                bodies.append(exc.read())
        described = json.loads(bodies[0])
        assert described["storage_options"]["aws_region"] == options["aws_region"]
        assert "aws_secret_access_key" not in described["storage_options"]
        # a client brings its own credentials; its commits go through the server
        client = RestNamespace(uri=server.url)
        ds = lance.dataset(
            namespace_client=client, table_id=["db", "events"], storage_options=options
        )
        ds.insert(pa.table({"id": [2]}))
    assert all(secret.encode() not in body for body in bodies)
    assert secret not in caplog.text
    assert "POST /v1/table/db$events/describe" in caplog.text
    assert _ids(lance.dataset(ns.location(("db", "events")), storage_options=options)) == [1, 2]
