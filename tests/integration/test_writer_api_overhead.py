"""What one writer-API call costs beyond pylance's own work: no thread started per call
(one shared lease renewer per process), the read version's manifest read once per plan."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pytest

import txn_engine as te
from txn_engine.dataset import Dataset


def test_appends_start_no_thread_per_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = str(tmp_path / "t.lance")
    te.open(uri).append(pa.table({"id": [0]}))
    started: list[str] = []
    real_start = threading.Thread.start

    def counting_start(self: threading.Thread) -> None:
        started.append(self.name)
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", counting_start)
    for i in range(1, 6):
        te.open(uri).append(pa.table({"id": [i]}))
    # each call holds a lease renewed in the background: by the process's one renewer
    assert len([n for n in started if n.startswith("txn_engine-lease")]) <= 1
    assert sorted(te.open(uri).to_table().column("id").to_pylist()) == list(range(6))


def test_an_append_opens_the_dataset_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One read of the read version's manifest per plan: the snapshot, read from where the
    lease's check found it (no ``Dataset.open``, which would look the version up again)."""
    import importlib

    uri = str(tmp_path / "t.lance")
    table = te.open(uri)
    table.append(pa.table({"id": [0]}))
    opened: list[int | str | None] = []
    read: list[int] = []
    real_open = Dataset.open.__func__  # type: ignore[attr-defined]
    commit_module = importlib.import_module("txn_engine.commit")
    real_read = commit_module.read_manifest_entry

    def counting_open(cls: type[Dataset], *args: object, **kwargs: object) -> Dataset:
        opened.append(kwargs.get("version"))  # type: ignore[arg-type]
        return real_open(cls, *args, **kwargs)  # type: ignore[no-any-return]

    def counting_read(storage: object, entry: object) -> object:
        read.append(entry.version)  # type: ignore[attr-defined]
        return real_read(storage, entry)

    monkeypatch.setattr(Dataset, "open", classmethod(counting_open))
    monkeypatch.setattr(commit_module, "read_manifest_entry", counting_read)
    table.append(pa.table({"id": [1]}))
    assert opened == []  # no separate lookup of the version
    assert read == [1]  # the read version's snapshot, read once
    read.clear()
    # creates it: the lease finds no version to pin, so no snapshot is read at all
    te.open(str(tmp_path / "new.lance")).append(pa.table({"id": [1]}))
    assert opened == []
    assert read == []
