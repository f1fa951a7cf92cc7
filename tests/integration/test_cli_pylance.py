"""``txn-engine log`` / ``show`` on a dataset written by pylance 14.0.2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from txn_engine.apps.cli import COMMANDS, main

pytestmark = pytest.mark.pylance


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "ds.lance"
    table = pa.table(
        {"id": pa.array(range(100), pa.int64()), "name": [f"n{i}" for i in range(100)]}
    )
    ds = lance.write_dataset(table, str(path), max_rows_per_file=40)
    ds.delete("id < 10")
    ds.create_scalar_index("id", "BTREE")
    ds.update_config({"owner": "cli-test"})
    return path


def test_log_table(dataset: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["log", str(dataset)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "VERSION",
        "TIMESTAMP",
        "OPERATION",
        "READ",
        "WRITER",
        "UUID",
        "TAGS",
    ]
    ops = [line.split()[4] for line in lines[1:]]  # timestamp is "date time UTC"
    assert ops == ["Overwrite", "Delete", "CreateIndex", "UpdateConfig"]
    assert all("lance 14.0.2" in line for line in lines[1:])
    # columns are aligned: OPERATION starts at the same offset on every line
    starts = {line.index(op) for line, op in zip(lines[1:], ops, strict=True)}
    assert starts == {lines[0].index("OPERATION")}


def test_log_json(dataset: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["log", str(dataset), "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [r["version"] for r in records] == [1, 2, 3, 4]
    assert [r["read_version"] for r in records] == [0, 1, 2, 3]
    assert records[1]["operation"] == "Delete"
    assert records[0]["writer"] == "lance 14.0.2"
    assert len(records[0]["uuid"]) == 36
    assert records[0]["timestamp"].startswith("20")


def test_show_json(dataset: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", str(dataset), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["version"] == 4
    assert s["rows"] == 90 == lance.dataset(str(dataset)).count_rows()
    assert s["deleted_rows"] == 10
    assert [f["name"] for f in s["schema"]] == ["id", "name"]
    assert [f["id"] for f in s["fragments"]] == [0, 1, 2]
    assert s["fragments"][0]["deletion_file"]["type"] == "arrow"
    assert [(i["name"], i["type"]) for i in s["indices"]] == [("id_idx", "BTree")]
    assert s["config"] == {"owner": "cli-test"}
    assert s["reader_feature_flags"]["names"] == ["deletion_files"]
    assert "table_config" in s["writer_feature_flags"]["names"]
    assert s["naming_scheme"] == "V2"
    assert s["data_format"] == "lance 2.2"


def test_show_text_and_version(dataset: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", str(dataset), "--version", "1"]) == 0
    out = capsys.readouterr().out
    assert "version        1" in out
    assert "rows           100 (0 deleted)" in out
    assert "Indices: none" in out
    assert "Schema:" in out
    assert "Fragments:" in out


def test_missing_dataset_is_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", str(tmp_path / "nope")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "no Lance dataset" in err
    assert "Traceback" not in err


def test_missing_version_is_one_line_error(
    dataset: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", str(dataset), "--version", "99"]) == 1
    err = capsys.readouterr().err
    assert "version 99 does not exist" in err
    assert err.count("\n") == 1


def test_usage_error_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["frobnicate"]) == 2
    assert "invalid choice" in capsys.readouterr().err


def test_commands_registry_has_room_for_more() -> None:
    assert {"log", "show"} <= set(COMMANDS)


def test_module_entry_point_subprocess(dataset: Path) -> None:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-m", "txn_engine.apps.cli", "log", str(dataset)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "CreateIndex" in done.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "txn_engine.apps.cli", "log", str(dataset) + "-missing"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 1
    assert "Traceback" not in bad.stderr
    assert bad.stderr.startswith("txn-engine log: error:")
