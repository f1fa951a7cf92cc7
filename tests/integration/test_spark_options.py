"""Parsing of the txn_lance write options (no Spark needed)."""

from __future__ import annotations

import pickle

import pytest

from txn_engine.errors import InvalidOperationError
from txn_engine.spark import WriteOptions, parse_write_options
from txn_engine.spark._options import DEFAULT_MAX_ROWS_PER_FILE, parse_read_options


def test_defaults() -> None:
    options = parse_write_options({"path": "/tmp/x"})
    assert options == WriteOptions()
    assert options.max_rows_per_file == DEFAULT_MAX_ROWS_PER_FILE
    assert options.commit_attempts == 3


def test_map_options_merge_json_and_prefixed_keys() -> None:
    options = parse_write_options(
        {
            "storage_options": '{"Key": "K", "anon": false}',
            "storage.endpoint_url": "http://127.0.0.1:9000",
            "lance_storage.aws_endpoint": "http://127.0.0.1:9000",
            "properties": '{"team": "a"}',
            "property.team": "b",
            "retry.max_attempts": "7",
            "retry.deadline": "1.5",
        }
    )
    assert options.storage_options == {
        "Key": "K",
        "anon": False,
        "endpoint_url": "http://127.0.0.1:9000",
    }
    assert options.lance_storage_options == {"aws_endpoint": "http://127.0.0.1:9000"}
    assert options.properties == {"team": "b"}  # the prefixed key wins
    assert options.retry_policy == {"max_attempts": 7, "deadline": 1.5}


def test_scalars_are_typed_and_validated() -> None:
    options = parse_write_options(
        {
            "MAX_ROWS_PER_FILE": "1000",
            "commit_message": "nightly load",
            "write_id": "Job-7",
            "sweep_on_plan": "false",
            "staging_retention_seconds": "60",
            "isolation": "Serializable",
        }
    )
    assert options.isolation == "serializable"
    assert options.max_rows_per_file == 1000
    assert options.commit_message == "nightly load"
    assert options.write_id == "Job-7"  # values keep their case
    assert options.sweep_on_plan is False
    assert options.staging_retention_seconds == 60.0
    assert pickle.loads(pickle.dumps(options)) == options


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_rows_per_fle": "1"}, "unknown txn_lance option 'max_rows_per_fle'"),
        ({"max_rows_per_file": "0"}, "must be >= 1"),
        ({"max_rows_per_file": "many"}, "must be an integer"),
        ({"storage_options": "[1]"}, "must be a JSON object"),
        ({"storage_options": "{"}, "must be a JSON object"),
        ({"sweep_on_plan": "maybe"}, "must be true or false"),
        ({"commit_attempts": "0"}, "must be >= 1"),
        ({"isolation": "repeatable read"}, "'isolation' must be one of snapshot, serializable"),
        # int() took these: Spark and Lance do not
        ({"max_rows_per_file": "1_000"}, "must be an integer"),
        ({"max_rows_per_file": " 7"}, "must be an integer"),
        ({"max_rows_per_file": "\u0663"}, "must be an integer"),
        # past an i64: failed late, converting inside pylance on the executors
        ({"max_bytes_per_file": str(2**63)}, "must be at most"),
        ({"max_rows_per_group": "9" * 5000}, "must be at most"),
        ({"commit_attempts": "-" + "9" * 30}, "must be >= 1"),
    ],
)
def test_bad_options_are_rejected(options: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidOperationError, match=message):
        parse_write_options(options)


@pytest.mark.parametrize(
    ("value", "message"), [(str(10**12), "at most 315576000 seconds"), ("1e3", "an integer")]
)
def test_a_lease_ttl_no_lease_can_have_is_rejected(value: str, message: str) -> None:
    with pytest.raises(InvalidOperationError, match=message):
        parse_read_options({"path": "/tmp/t.lance", "lease_ttl": value})
