"""txn_engine.testing.model.LanceFileRows reads the rows of data files pylance 14.0.2 wrote."""

from __future__ import annotations

from pathlib import Path

import attrs
import lance
import pyarrow as pa
import pytest

from txn_engine.model import Fragment
from txn_engine.testing.model import LanceFileRows

pytestmark = pytest.mark.pylance


def test_lance_file_rows_reads_pylance_data_files(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    schema = pa.schema([pa.field("rid", pa.int64()), pa.field("val", pa.int64())])
    (meta,) = lance.fragment.write_fragments(
        pa.table({"rid": [7, 8], "val": [1, 2]}, schema=schema), uri, schema=schema
    )
    frag = Fragment.from_lance_json(meta.to_json())
    assert list(LanceFileRows(uri).rows(frag)) == [(7, 1), (8, 2)]
    with pytest.raises(KeyError):
        LanceFileRows(uri).rows(attrs.evolve(frag, files=()))
