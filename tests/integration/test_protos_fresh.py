"""The committed generated protobuf modules match protos/*.proto."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_generated_modules_are_up_to_date() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_protos.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_pylance14_transaction_offset_field_is_23() -> None:
    from txn_engine._proto import table_pb2

    fields = table_pb2.Manifest.DESCRIPTOR.fields_by_name
    assert fields["transaction_section"].number == 23
    assert fields["transaction_section_deprecated"].number == 21
    assert fields["index_section"].number == 6
