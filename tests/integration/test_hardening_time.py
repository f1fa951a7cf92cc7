"""Issue 43's time findings, reproduced against real components (pylance 14.0.2 writing the
data files, local disk and moto S3, whose listed modification times are whole seconds).

* Finding 1: a leased writer's data file written right after its lease lists as *older*
  than the lease (coarse store times, or a store clock behind the writer's); a cleanup with
  no orphan retention deleted it and the acknowledged append was unreadable. Now nothing
  compares those clocks: the file survives while the lease is live, pylance reads it.
* Finding 2: a writer paused past its lease (its renewals stopped too, as under SIGSTOP)
  while a cleanup ran; its append landed with its data file gone. Now it gets
  LeaseExpiredError and the table stays readable.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from lance.fragment import write_fragments

import txn_engine as te
from txn_engine.errors import LeaseExpiredError
from txn_engine.leases import Lease
from txn_engine.storage import open_storage

ZERO = timedelta(0)


@pytest.fixture(params=["local", "s3"])
def table(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """A fresh table URI and its (Lance-named) storage options, on local disk or moto."""
    if request.param == "local":
        yield str(tmp_path / "t.lance"), {}
        return
    import emulators as emu

    info = request.getfixturevalue("moto_server")
    yield info.uri(emu.unique_name("time")), info.lance_options()


def _rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64())})


def _ids(uri: str, options: dict[str, str]) -> list[int]:
    return sorted(lance.dataset(uri, storage_options=options or None).to_table()["id"].to_pylist())


def test_a_leased_writers_data_file_survives_a_cleanup_with_no_retention(
    table: tuple[str, dict[str, str]],
) -> None:
    uri, options = table
    lance.write_dataset(_rows(0, 5), uri, storage_options=options or None)
    storage = open_storage(uri, options or None)
    with Lease(storage, None, ttl=600.0, owner="writer") as held:
        frags = write_fragments(_rows(5, 5), uri, storage_options=options or None)
        report = te.cleanup(
            storage, older_than=ZERO, retention_orphans=ZERO, progress=False,
            wait_for_writers=ZERO,
        )  # fmt: skip
        assert isinstance(report, te.retention.CleanupReport)
        assert report.kept_for_new_leases >= 1  # the writer's file, unreferenced yet
        txn = lance.Transaction(held.version, lance.LanceOperation.Append(frags))
        assert te.commit(storage, txn, lease=held).version == 2
    assert _ids(uri, options) == list(range(10))
    # once the lease is gone the next cleanup may remove what no version references, and
    # nothing the latest version references
    te.cleanup(storage, older_than=ZERO, retention_orphans=ZERO, progress=False)
    assert _ids(uri, options) == list(range(10))


def _stalled_write_fragments(monkeypatch: pytest.MonkeyPatch, stall: Callable[[], None]) -> None:
    """pylance's write_fragments, then ``stall`` (the writer paused after its data files)."""
    import lance.fragment as fragment_module

    original = fragment_module.write_fragments

    def writing(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        stall()
        return out

    monkeypatch.setattr(fragment_module, "write_fragments", writing)


def test_a_writer_stalled_past_its_lease_is_refused_and_the_table_stays_readable(
    table: tuple[str, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    uri, options = table
    writer = te.open(uri, storage_options=options or None, lease_ttl=1.0)
    writer.append(_rows(0, 5))
    # SIGSTOP stops the renewing thread too: no background renewal of the call's lease
    renewer = importlib.import_module("txn_engine.leases")._RENEWER
    monkeypatch.setattr(renewer, "add", lambda held, interval: None)

    def stall() -> None:
        time.sleep(1.2)  # past the lease; a cleanup with no retention runs meanwhile
        te.cleanup(
            uri, older_than=ZERO, retention_orphans=ZERO, progress=False,
            storage_options=options or None, wait_for_writers=ZERO,
        )  # fmt: skip

    _stalled_write_fragments(monkeypatch, stall)
    with pytest.raises(LeaseExpiredError):
        writer.append(_rows(5, 5))
    assert _ids(uri, options) == list(range(5))
    assert lance.dataset(uri, storage_options=options or None).version == 1
