"""``python -m benchmarks.soak``: stress runs with faults on the emulators, and its verdict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest

from benchmarks import soak
from txn_engine.apps import stress


def test_a_soak_run_on_s3_lands_faults_and_passes(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    args = ["--stores", "s3", "--seeds", "1", "--writers", "2", "--commits", "3"]
    code = soak.main([*args, "--fault-rate", "0.5", "--json", str(out)])
    assert code == 0
    (record,) = json.loads(out.read_text())
    assert (record["store"], record["seed"], record["backend"]) == ("s3", 1, "obstore")
    report = record["report"]
    assert report["ok"]
    assert not report["findings"]
    assert report["committed"] >= 1
    assert not report["synthetic"]  # odd seed: pylance's data files, read back by pylance
    assert report["pylance_rows"] == report["expected_rows"]
    assert sum(report["faults_injected"].values()) >= 1


def test_a_failed_verdict_fails_the_soak(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = stress.run_stress

    def failing(*args: Any, **kwargs: Any) -> stress.StressReport:
        return attrs.evolve(real(*args, **kwargs), findings=("a finding",))

    monkeypatch.setattr(stress, "run_stress", failing)
    code = soak.main(["--stores", "gcs", "--seeds", "2", "--writers", "1", "--commits", "2"])
    assert code == 1
    err = capsys.readouterr().err
    assert "gcs seed 2: FAILED (1 findings)" in err
    assert "- a finding" in err


def test_seed_and_store_arguments() -> None:
    assert soak._seeds("1-3,7") == [1, 2, 3, 7]
    with pytest.raises(SystemExit):
        soak.main(["--stores", "s3,hdfs"])
