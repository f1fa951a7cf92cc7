"""Hostile tables and hostile arguments at the command line (issue 11, findings 8-10).

* one bad version (timestamp out of range, undecodable manifest, hostile data-file path)
  is reported for that version while ``log`` / ``verify`` go on with the others;
* ``stress`` validates every option before touching storage and never says PASSED for a
  run that committed nothing;
* secrets (storage options, URI user info) never reach a message, repr or report.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from txn_engine._proto import table_pb2
from txn_engine.apps.cli import main
from txn_engine.commit import commit
from txn_engine.dataset import Dataset
from txn_engine.format.io import read_manifest, read_transaction
from txn_engine.format.manifest_file import encode_manifest_file
from txn_engine.ops import Append, Overwrite
from txn_engine.storage import open_storage
from txn_engine.testing.machine import SCHEMA
from txn_engine.testing.model import SyntheticRows
from txn_engine.transaction import Transaction
from txn_engine.verify import verify

# --------------------------------------------------------------------------- helpers


def _history(path: Path, versions: int = 3) -> str:
    """A local dataset with ``versions`` versions (Overwrite, then Appends)."""
    uri = str(path / "t.lance")
    rows = SyntheticRows()
    commit(uri, Transaction(0, Overwrite((rows.fragment([(0, 0), (1, 0)]),), SCHEMA)))
    for v in range(1, versions):
        commit(uri, Transaction(v, Append((rows.fragment([(v + 10, 0)]),))))
    return uri


def _rewrite(uri: str, version: int, edit: Callable[[table_pb2.Manifest], None]) -> None:
    """Replace the manifest of ``version`` by a copy changed by ``edit`` (same transaction)."""
    storage = open_storage(uri)
    entry, mf = read_manifest(storage, version)
    m = table_pb2.Manifest()
    m.CopyFrom(mf.manifest)
    edit(m)
    txn = read_transaction(storage, entry, mf)
    (Path(uri) / entry.path).write_bytes(encode_manifest_file(m, mf.indices, txn))


def _set_timestamp(seconds: int, nanos: int = 0) -> Callable[[table_pb2.Manifest], None]:
    def edit(m: table_pb2.Manifest) -> None:
        m.timestamp.seconds = seconds
        m.timestamp.nanos = nanos

    return edit


def _garble(uri: str, version: int) -> None:
    storage = open_storage(uri)
    entry, _ = read_manifest(storage, version)
    (Path(uri) / entry.path).write_bytes(b"not a manifest at all" * 4)


# --------------------------------------------------------------------------- finding 8


@pytest.mark.parametrize(
    ("seconds", "nanos"),
    [(2**62, 0), (-(2**62), 0), (253_402_300_800, 0), (-62_135_596_801, 0), (0, -5)],
)
def test_versions_survive_a_timestamp_out_of_range(
    tmp_path: Path, seconds: int, nanos: int
) -> None:
    uri = _history(tmp_path)
    _rewrite(uri, 2, _set_timestamp(seconds, nanos))
    infos = Dataset.open(uri).versions()
    assert [v.version for v in infos] == [1, 2, 3]
    assert infos[0].timestamp is not None
    assert infos[2].timestamp is not None
    assert infos[0].error is None
    assert infos[2].error is None
    bad = infos[1]
    assert bad.operation == "Append"  # the rest of the version is still shown
    if nanos < 0:  # out of protobuf's range but still a point in time
        assert bad.error is not None
        assert "timestamp" in bad.error
    else:
        assert bad.timestamp is None
        assert bad.error is not None
        assert "timestamp" in bad.error
    json.dumps([v.to_json() for v in infos])


def test_versions_mark_an_undecodable_manifest_and_go_on(tmp_path: Path) -> None:
    uri = _history(tmp_path)
    _garble(uri, 2)
    infos = Dataset.open(uri).versions()
    assert [v.version for v in infos] == [1, 2, 3]
    assert [v.operation for v in infos] == ["Overwrite", None, "Append"]
    assert infos[1].error is not None
    assert infos[1].error.startswith("CorruptManifestError")
    assert infos[0].error is None
    assert infos[2].error is None


def test_log_prints_the_other_versions_and_marks_the_bad_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = _history(tmp_path, versions=4)
    _garble(uri, 2)
    _rewrite(uri, 3, _set_timestamp(2**62))
    assert main(["log", uri]) == 1
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert [line.split()[0] for line in lines[1:5]] == ["1", "2", "3", "4"]
    assert "UNREADABLE" in lines[2]
    assert "Append" in lines[3]
    assert "Append" in lines[4]
    assert any(line.startswith("v2: CorruptManifestError") for line in lines)
    assert any(line.startswith("v3: ") and "timestamp" in line for line in lines)
    assert main(["log", uri, "--json"]) == 1
    records = json.loads(capsys.readouterr().out)
    assert [r["version"] for r in records] == [1, 2, 3, 4]
    assert records[1]["error"].startswith("CorruptManifestError")
    assert records[3]["error"] is None


def test_log_goes_on_when_the_latest_manifest_is_undecodable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = _history(tmp_path)
    _garble(uri, 3)
    assert main(["log", uri, "--json"]) == 1
    records = json.loads(capsys.readouterr().out)
    assert [r["operation"] for r in records] == ["Overwrite", "Append", None]
    assert records[2]["error"].startswith("CorruptManifestError")


@pytest.mark.parametrize("path", ["../../outside.lance", "/etc/passwd", "a/../../b", "x\\y", ""])
def test_verify_data_files_reports_a_hostile_path_as_a_finding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], path: str
) -> None:
    uri = _history(tmp_path)

    def edit(m: table_pb2.Manifest) -> None:
        m.fragments[0].files[0].path = path

    _rewrite(uri, 3, edit)
    report = verify(uri, data_files=True)
    files = [f for f in report.findings if f.invariant == "data-files"]
    bad = [f for f in files if "fragment 0" in f.detail]
    assert len(bad) == 1
    assert bad[0].version == 3
    assert "not a path inside data/" in bad[0].detail
    # the rest of the run went on: the other (synthetic, absent) data files are checked
    assert {f.detail.split(":")[0] for f in files} == {"fragment 0", "fragment 1", "fragment 2"}
    assert not report.ok
    assert report.live_rows == 4
    assert main(["verify", uri, "--data-files", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False
    assert any("not a path inside data/" in f["detail"] for f in out["findings"])


# --------------------------------------------------------------------------- finding 9

_BAD_STRESS_OPTIONS = [
    (["--fault-rate", "2"], "--fault-rate"),
    (["--fault-rate", "-0.1"], "--fault-rate"),
    (["--fault-rate", "nan"], "--fault-rate"),
    (["--max-attempts", "0"], "--max-attempts"),
    (["--deadline", "-1"], "--deadline"),
    (["--deadline", "0"], "--deadline"),
    (["--replans", "-3"], "--replans"),
    (["--writers", "0"], "--writers"),
    (["--commits", "-1"], "--commits"),
    (["--latency", "-5"], "--latency"),
    (["--max-delay", "-1"], "--max-delay"),
    (["--mix", "append=1,explode=2"], "--mix"),
    (["--mix", "append=-1"], "--mix"),
    (["--faults", "meteor"], "--faults"),
]


@pytest.mark.parametrize(("extra", "option"), _BAD_STRESS_OPTIONS)
def test_stress_refuses_bad_options_before_touching_storage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], option: str
) -> None:
    target = tmp_path / "s.lance"
    assert main(["stress", str(target), "--synthetic", *extra]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1
    assert option in errors[0]
    assert "Traceback" not in err
    assert not target.exists()


def test_stress_refuses_an_empty_uri_instead_of_writing_into_the_cwd(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for uri in ("", "  "):
        assert main(["stress", uri, "--synthetic", "--writers", "1", "--commits", "1"]) == 2
        assert "must not be empty" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "kwargs",
    [
        {"fault_rate": 2.0},
        {"max_attempts": 0},
        {"deadline": -1.0},
        {"replans": -3},
        {"latency": -1.0},
        {"mix": {"append": -1, "delete": 2}},
    ],
)
def test_run_stress_checks_every_option_first(tmp_path: Path, kwargs: dict[str, object]) -> None:
    from txn_engine.apps.stress import run_stress
    from txn_engine.errors import InvalidOperationError

    target = tmp_path / "s.lance"
    with pytest.raises(InvalidOperationError):
        run_stress(str(target), writers=1, commits=1, synthetic=True, progress=None, **kwargs)  # type: ignore[arg-type]
    assert not target.exists()


def test_run_stress_refuses_an_empty_uri(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from txn_engine.apps.stress import run_stress
    from txn_engine.errors import InvalidStorageArgumentError

    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidStorageArgumentError):
        run_stress("", writers=1, commits=1, synthetic=True, progress=None)
    assert list(tmp_path.iterdir()) == []


def test_a_stress_run_that_commits_nothing_is_not_passed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # every manifest create fails before writing: nothing can land
    args = ["stress", str(tmp_path / "s.lance"), "--synthetic", "--writers", "1"]
    args += ["--commits", "2", "--fault-rate", "1", "--faults", "fail_before_write"]
    args += ["--max-attempts", "2", "--replans", "0", "--json"]
    assert main(args) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["committed"] == 0
    assert report["ok"] is False
    assert any("no operation committed" in f for f in report["findings"])


# --------------------------------------------------------------------------- finding 10

SECRET = "S3cr3tValue/xyz+42"


def test_unrecognized_arguments_never_echo_an_option_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = _history(tmp_path)
    # `log` takes no -o: argparse used to print "unrecognized arguments: -o secret=..."
    assert main(["log", uri, "-o", f"aws_secret_access_key={SECRET}", f"--bogus={SECRET}"]) == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments" in err
    assert "--bogus" in err
    assert SECRET not in err


def test_a_malformed_option_is_a_usage_error_that_does_not_echo_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = _history(tmp_path)
    assert main(["verify", uri, "-o", SECRET]) == 2  # no '=': the whole item may be a secret
    assert main(["verify", uri, "-o", f"client_kwargs={{{SECRET}"]) == 2  # bad JSON
    err = capsys.readouterr().err
    assert "expected name=value" in err
    assert "'client_kwargs' is not valid JSON" in err
    assert SECRET not in err


def test_command_errors_never_echo_option_values_or_uri_passwords(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a local dataset takes no storage options: the error names them, not their values
    code = main(["verify", str(tmp_path / "none"), "-o", f"aws_session_token={SECRET}"])
    assert code == 1
    assert main(["log", f"file://user:{SECRET}@/nowhere"]) == 1
    assert main(["verify", f"memory://user:{SECRET}@host/t", "--json"]) == 1  # a report
    captured = capsys.readouterr()
    assert captured.err.count("error:") == 2
    assert SECRET not in captured.err + captured.out
    assert "file://***@/nowhere" in captured.err
    assert json.loads(captured.out)["uri"] == "memory://***@host/t"


def test_library_errors_and_reports_hide_uri_passwords() -> None:
    from txn_engine.errors import CommitError, DatasetNotFoundError, StorageError

    for exc in (
        DatasetNotFoundError(f"no dataset at s3://AKIA:{SECRET}@bucket/t"),
        StorageError(f"list failed for gs://u:{SECRET}@b/t"),
        CommitError(f"at s3://AKIA:{SECRET}@bucket/t", read_version=3),
    ):
        assert SECRET not in str(exc)
        assert "://***@" in str(exc)
    with pytest.raises(DatasetNotFoundError) as caught:
        Dataset.open(f"memory://user:{SECRET}@host/t")
    assert SECRET not in str(caught.value)
    report = verify(f"memory://user:{SECRET}@host/t")
    assert SECRET not in report.uri
    assert SECRET not in json.dumps(report.to_json())


def test_spark_reprs_and_logs_hide_storage_options(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    import pyarrow as pa

    from txn_engine.spark._options import ReadOptions, parse_write_options
    from txn_engine.spark._write import FragmentCollector

    options = parse_write_options(
        {
            "storage_options": json.dumps({"aws_secret_access_key": SECRET, "region": "eu"}),
            "lance_storage.account_key": SECRET,
            "lance_storage.sas_token": SECRET,
        }
    )
    collector = FragmentCollector(
        uri=f"s3://AKIA:{SECRET}@bucket/t.lance",
        mode="append",
        write_id="w",
        uuid="u",
        write_key="k",
        read_version=1,
        schema=pa.schema([]),
        options=options,
    )
    shown = repr(collector) + repr(options) + repr(ReadOptions(storage_options={"token": SECRET}))
    assert SECRET not in shown
    assert "'region': 'eu'" in shown  # only the secret-looking values are masked
    assert "s3://***@bucket/t.lance" in shown
    with caplog.at_level(logging.INFO, logger="txn_engine.spark"):
        logging.getLogger("txn_engine.spark").info(
            "commit to %s with %s", collector.uri, {"aws_session_token": SECRET}
        )
    assert caplog.records
    assert SECRET not in caplog.text


def test_the_redaction_helper() -> None:
    from txn_engine.redact import looks_secret, redact_options, redact_text, redact_uri

    for key in ("aws_secret_access_key", "account_key", "sas_token", "password", "session"):
        assert looks_secret(key)
    for key in ("region", "endpoint", "allow_http", "max_retries"):
        assert not looks_secret(key)
    assert redact_uri(f"s3://AKIA:{SECRET}@bucket/t") == "s3://***@bucket/t"
    assert redact_uri("abfss://container@acct.dfs.core.windows.net/t") == (
        "abfss://container@acct.dfs.core.windows.net/t"  # a container name, not a secret
    )
    assert redact_uri(f"az://c/t?sv=2024&sig={SECRET}") == "az://c/t?sv=2024&sig=***"
    nested = redact_options({"client_kwargs": {"aws_secret_access_key": SECRET}, "a": "b"})
    assert nested == {"client_kwargs": {"aws_secret_access_key": "***"}, "a": "b"}
    assert SECRET not in redact_text(f"failed: password={SECRET}")
    assert redact_text(f"value {SECRET} leaked", secrets=[SECRET]) == "value *** leaked"


def test_show_hides_a_uri_password(capsys: pytest.CaptureFixture[str]) -> None:
    uri = f"memory://user:{SECRET}@host/shown"
    commit(open_storage(uri), Transaction(0, Overwrite((), SCHEMA)))
    assert main(["show", uri, "--json"]) == 0
    out = capsys.readouterr().out
    assert SECRET not in out
    assert json.loads(out)["uri"] == "memory://***@host/shown"


def test_show_marks_a_timestamp_out_of_range_and_shows_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = _history(tmp_path)
    _rewrite(uri, 3, _set_timestamp(2**62))
    assert main(["show", uri, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["timestamp"] == f"out of range ({2**62}s 0ns)"
    assert shown["version"] == 3
    assert main(["show", uri]) == 0
    assert "out of range" in capsys.readouterr().out


def test_show_takes_a_tag_named_by_a_unicode_digit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``²`` is a valid tag name (alphanumeric) and ``isdigit()``: show read it as a version
    number, and ``int()`` failed."""
    from txn_engine.format.refs import create_tag

    uri = _history(tmp_path, 3)
    create_tag(open_storage(uri), "\u00b2", 2)
    assert main(["show", uri, "--version", "\u00b2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["version"] == 2
