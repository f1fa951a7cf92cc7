"""The hostile-input fuzz suite (tests/property/test_fuzz_hostile.py) seeded with what
pylance 14.0.2 writes: its manifests (inline transactions, its field order and optional
fields), ``.txn`` files and deletion files (``.arrow`` with zstd buffers, ``.bin`` past
5,000 deleted rows). Same assertions: only TxnEngineError escapes, memory and time bounded.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
import tempfile
from pathlib import Path
from types import ModuleType

import lance
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from txn_engine.dataset import Dataset
from txn_engine.storage import LocalStorage
from txn_engine.verify import verify

pytestmark = pytest.mark.pylance


def _load_fuzz() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "property" / "test_fuzz_hostile.py"
    spec = importlib.util.spec_from_file_location("_fuzz_hostile_shared", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


fuzz = _load_fuzz()


@functools.lru_cache(maxsize=1)
def pylance_seed() -> dict[str, bytes]:
    """Four pylance versions: create, append, a small delete (.arrow) and a large one
    (.bin), the latest carrying both deletion files."""
    with tempfile.TemporaryDirectory() as tmp:
        uri = str(Path(tmp) / "ds")
        lance.write_dataset(pa.table({"a": list(range(10))}), uri)
        lance.write_dataset(pa.table({"a": list(range(10, 10_010))}), uri, mode="append")
        lance.dataset(uri).delete("a < 3")
        lance.dataset(uri).delete("a >= 10 and a < 6010")
        return dict(fuzz.snapshot(LocalStorage(uri)))


@functools.lru_cache(maxsize=1)
def pylance_refs() -> dict[str, bytes]:
    """A tag and a branch as pylance 14 writes them (on version 1 of a table of its own:
    their content, not their target, is what the fuzz mutates)."""
    with tempfile.TemporaryDirectory() as tmp:
        uri = str(Path(tmp) / "refs")
        lance.write_dataset(pa.table({"a": [1, 2]}), uri)
        ds = lance.dataset(uri)
        ds.tags.create("t1", 1)
        ds.create_branch("br1", 1)
        refs = Path(uri) / "_refs"
        return {f"_refs/{p.parent.name}/{p.name}": p.read_bytes() for p in refs.glob("*/*.json")}


def test_pylance_seed_reads_cleanly() -> None:
    seed = pylance_seed()
    kinds = {p.rsplit(".", 1)[1] for p in fuzz.paths(seed, "_deletions")}
    assert kinds == {"arrow", "bin"}
    storage = fuzz.storage_from(seed)
    assert Dataset.open(storage).count_rows() == 10_010 - 3 - 6000
    assert verify(fuzz.storage_from(seed), deep=True).ok
    fuzz.exercise(seed)


@fuzz.FUZZ
@given(st.data())
def test_pylance_manifest_bytes(data: st.DataObject) -> None:
    fuzz.fuzz_manifest_bytes(pylance_seed(), data)


@fuzz.FUZZ
@given(st.data())
def test_pylance_manifest_protobuf(data: st.DataObject) -> None:
    fuzz.fuzz_manifest_protobuf(pylance_seed(), data)


@fuzz.FUZZ
@given(st.data())
def test_pylance_transaction_files(data: st.DataObject) -> None:
    fuzz.fuzz_transaction_files(pylance_seed(), data)


@fuzz.FUZZ
@given(st.data())
def test_pylance_deletion_files(data: st.DataObject) -> None:
    fuzz.fuzz_deletion_files(pylance_seed(), data)


@fuzz.FUZZ
@given(st.data())
def test_pylance_version_listings(data: st.DataObject) -> None:
    fuzz.fuzz_version_listing(pylance_seed(), data)


def test_pylance_refs_are_the_files_the_fuzz_mutates() -> None:
    assert sorted(pylance_refs()) == ["_refs/branches/br1.json", "_refs/tags/t1.json"]


@fuzz.FUZZ
@given(st.data())
def test_pylance_json_side_files(data: st.DataObject) -> None:
    fuzz.fuzz_json_side_files(pylance_seed(), data, pylance_refs())
