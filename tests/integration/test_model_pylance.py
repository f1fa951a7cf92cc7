"""Fragment <-> pylance 14.0.2 fragment JSON, against real pylance fragments: what txn_engine
writes, pylance parses back to the same metadata."""

from __future__ import annotations

import json
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from lance.fragment import FragmentMetadata

from txn_engine import Fragment

pytestmark = pytest.mark.pylance


@pytest.mark.parametrize("stable_row_ids", [False, True])
def test_to_lance_json_round_trips_through_a_real_pylance_fragment(
    tmp_path: Path, stable_row_ids: bool
) -> None:
    uri = str(tmp_path / "ds")
    ds = lance.write_dataset(
        pa.table({"a": list(range(10))}), uri, enable_stable_row_ids=stable_row_ids
    )
    ds.delete("a < 2")
    meta = lance.dataset(uri).get_fragments()[0].metadata
    frag = Fragment.from_lance_json(meta)
    assert (frag.row_id_sequence is not None) == stable_row_ids
    assert frag.deletion_file is not None
    out = frag.to_lance_json()
    assert out == meta.to_json()  # exactly what pylance writes
    assert FragmentMetadata.from_json(json.dumps(out)).to_json() == meta.to_json()
    # a fragment txn_engine never saw from pylance: without its deletion file
    plain = Fragment.from_lance_json({**out, "deletion_file": None}).to_lance_json()
    back = FragmentMetadata.from_json(json.dumps(plain)).to_json()
    assert back == {**meta.to_json(), "deletion_file": None}
