"""``txn-engine serve-namespace``: pylance's RestNamespace commits through it; several
processes share one server; bad requests get the spec's error codes."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from lance.namespace import RestNamespace

import txn_engine as te
from txn_engine.namespace._rest import NamespaceServer

pytestmark = pytest.mark.pylance

_CLI = [sys.executable, "-m", "txn_engine.apps.cli"]

_WRITER = """
import sys
import lance, pyarrow as pa
from lance.namespace import RestNamespace
url, first, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
client = RestNamespace(uri=url)
for i in range(first, first + count):
    ds = lance.dataset(namespace_client=client, table_id=["db", "events"])
    ds.insert(pa.table({"id": [i]}))
print("ok")
"""


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A ``txn-engine serve-namespace`` process on a free loopback port."""
    root = tmp_path / "root"
    te.Namespace(root).create_table("db.events", pa.table({"id": [0]}))
    proc = subprocess.Popen(
        [*_CLI, "serve-namespace", str(root), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "http://127.0.0.1:" in line, line + (proc.stderr.read() if proc.stderr else "")
        yield line.split(" on ")[1].split()[0], root
    finally:
        proc.terminate()
        proc.wait(10)


def _post(url: str, route: str, body: Any = None) -> tuple[int, dict[str, Any]]:
    data = b"" if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{url}{route}", data=data, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_restnamespace_clients_of_several_processes_commit_through_one_server(
    served: tuple[str, Path],
) -> None:
    url, root = served
    writers = [
        subprocess.Popen([sys.executable, "-c", _WRITER, url, str(first), "5"], text=True)
        for first in (100, 200, 300)
    ]
    client = RestNamespace(uri=url)
    ds = lance.dataset(namespace_client=client, table_id=["db", "events"])
    ds.delete("id = 0")
    assert [w.wait(120) for w in writers] == [0, 0, 0]
    expected = sorted(i for first in (100, 200, 300) for i in range(first, first + 5))
    final = lance.dataset(namespace_client=client, table_id=["db", "events"])
    assert sorted(final.to_table()["id"].to_pylist()) == expected
    direct = lance.dataset(str(root / "db" / "events.lance"))
    assert direct.version == final.version == 17  # 1 + 15 inserts + the delete


def test_spec_error_codes(served: tuple[str, Path]) -> None:
    url, _root = served
    status, answer = _post(url, "/v1/table/db$missing/describe", {})
    assert (status, answer["code"]) == (404, 4)
    status, answer = _post(url, "/v1/table/db$events/version/describe", {"version": 99})
    assert (status, answer["code"]) == (404, 11)
    request = {"version": 1, "manifest_path": "db/events.lance/_versions/x.manifest-1"}
    status, answer = _post(url, "/v1/table/db$events/version/create", request)
    assert (status, answer["code"]) == (400, 13)  # no staged manifest there
    status, answer = _post(url, "/v1/table/db$events/declare", {})
    assert (status, answer["code"]) == (409, 5)
    status, answer = _post(url, "/v1/table/..$x/describe", {})
    assert (status, answer["code"]) == (400, 13)  # an id part that is no safe name
    status, answer = _post(url, "/v1/nothing/here", {})
    assert status == 404
    raw = urllib.request.Request(f"{url}/v1/table/db$events/describe", data=b"{", method="POST")
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(raw, timeout=30)
    assert caught.value.code == 400
    status, answer = _post(url, "/v1/table/db$events/describe", {})
    assert status == 200
    assert answer["managed_versioning"] is True
    status, answer = _post(url, "/v1/table/db$events/version/list?limit=1&descending=true")
    assert status == 200
    assert [v["version"] for v in answer["versions"]] == [1]


def test_transactions_and_rest_writers_share_a_namespace(tmp_path: Path) -> None:
    ns = te.Namespace(tmp_path / "root", share_storage_options=False)
    ns.create_table("db.events", pa.table({"id": [0]}))
    ns.create_table("db.dims", pa.table({"id": [0]}))
    with NamespaceServer(ns, port=0) as server:
        client = RestNamespace(uri=server.url)
        with ns.transaction() as tx:
            tx.open("db.events").append(pa.table({"id": [1]}))
            tx.open("db.dims").append(pa.table({"id": [1]}))
        ds = lance.dataset(namespace_client=client, table_id=["db", "dims"])
        assert sorted(ds.to_table()["id"].to_pylist()) == [0, 1]
        ds.insert(pa.table({"id": [2]}))
        made = lance.write_dataset(pa.table({"id": [7]}), namespace_client=client, table_id=["t"])
        assert made.version == 1
    assert ns.snapshot(["db.events", "db.dims", "t"]) == {"db.events": 3, "db.dims": 4, "t": 1}
