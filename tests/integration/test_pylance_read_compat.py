"""txn_engine reads what pylance 14.0.2 writes, and pylance reads what txn_engine writes.

The oracle is pylance itself: for every version of datasets built by every kind of commit
(see ``conftest.build_history``) txn_engine must report the same versions, fragments, row
counts, schema, index names and operation; manifests re-encoded by txn_engine and
deletion files written by it must give pylance identical tables.
"""

from __future__ import annotations

import shutil
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyroaring import BitMap

from txn_engine._proto import table_pb2, transaction_pb2
from txn_engine.dataset import Dataset
from txn_engine.format.deletion import (
    ARROW_THRESHOLD,
    DeletionEncoding,
    deletion_file_path,
    read_deletion_vector,
    write_deletion_vector,
)
from txn_engine.format.flags import compute_feature_flags
from txn_engine.format.io import read_manifest, read_transaction
from txn_engine.format.manifest_file import decode_manifest_file, encode_manifest_file
from txn_engine.format.naming import NamingScheme, list_versions, manifest_path
from txn_engine.format.rowids import (
    decode_row_id_segments,
    decode_row_id_sequence,
    encode_row_id_sequence,
)
from txn_engine.storage import LocalStorage

if TYPE_CHECKING:
    from tests.integration.conftest import History

pytestmark = pytest.mark.pylance


def _pylance_operation(ds: lance.LanceDataset, version: int) -> str | None:
    """The operation name pylance's Python API gives, or None where it cannot name it
    (ReserveFragments comes back as ``BaseOperation``; a Rewrite with rewritten indices
    makes ``read_transaction`` raise TypeError in pylance 14.0.2)."""
    try:
        txn = ds.read_transaction(version)
    except TypeError:
        return None
    name = type(txn.operation).__name__
    return None if name == "BaseOperation" else name


def _index_names(ds: lance.LanceDataset) -> list[str]:
    return sorted(d.name for d in ds.describe_indices())


def test_versions_fragments_rows_indices_match_pylance(history: History) -> None:
    uri = str(history.path)
    latest = lance.dataset(uri)
    ours = Dataset.open(uri)
    assert [v.version for v in ours.versions()] == [v["version"] for v in latest.versions()]
    assert ours.version == latest.version
    expected_scheme = NamingScheme.V2 if history.v2_paths else NamingScheme.V1
    assert ours.naming_scheme is expected_scheme
    for info in ours.versions():
        v = info.version
        theirs = lance.dataset(uri, version=v)
        mine = ours.checkout(v)
        assert mine.version == theirs.version == v
        assert [f.id for f in mine.fragments] == [f.fragment_id for f in theirs.get_fragments()]
        assert mine.count_rows() == theirs.count_rows(), f"version {v}"
        assert sorted(mine.index_names()) == _index_names(theirs), f"version {v}"
        assert mine.config == theirs.config(), f"version {v}"
        per_fragment = {fid: phys - deleted for fid, phys, deleted in mine.fragment_row_counts()}
        for frag in theirs.get_fragments():
            assert per_fragment[frag.fragment_id] == frag.count_rows()


def test_schema_matches_pylance(history: History) -> None:
    uri = str(history.path)
    ours = Dataset.open(uri)
    for info in ours.versions():
        mine = ours.checkout(info.version)
        theirs = lance.dataset(uri, version=info.version)
        assert mine.schema.equals(theirs.schema, check_metadata=True), f"version {info.version}"


def test_operation_names_match_pylance(history: History) -> None:
    uri = str(history.path)
    theirs = lance.dataset(uri)
    ours = Dataset.open(uri)
    names = {v.version: v.operation for v in ours.versions()}
    assert names == history.operations
    for version, name in names.items():
        assert ours.transaction(version).read_version == version - 1 or name == "Rewrite"
        pylance_name = _pylance_operation(theirs, version)
        if pylance_name is not None:
            assert pylance_name == name, f"version {version}"


def test_dense_delete_writes_bitmap_that_we_read(history: History) -> None:
    ds = Dataset.open(str(history.path))
    dense = [v for v, op in history.operations.items() if op == "Delete"][1]
    snap = ds.checkout(dense)
    kinds = {
        f.deletion_file.file_type for f in snap.manifest_pb.fragments if f.HasField("deletion_file")
    }
    assert table_pb2.DeletionFile.BITMAP in kinds
    for frag in snap.manifest_pb.fragments:
        if frag.HasField("deletion_file"):
            dv = read_deletion_vector(snap.storage, frag.id, frag.deletion_file)
            assert len(dv) == frag.deletion_file.num_deleted_rows
            assert max(dv) < frag.physical_rows


def test_stable_row_id_sequences_match_pylance_rowids(
    history_factory: Callable[[str], History],
) -> None:
    history = history_factory("stable-row-ids")
    uri = str(history.path)
    ours = Dataset.open(uri)
    update = next(v for v, op in history.operations.items() if op == "Update")
    for version in (update - 1, update, update + 1):
        snap = ours.checkout(version)
        theirs = lance.dataset(uri, version=version)
        for frag in snap.manifest_pb.fragments:
            assert frag.WhichOneof("row_id_sequence") == "inline_row_ids"
            ids = decode_row_id_sequence(frag.inline_row_ids)
            assert len(ids) == frag.physical_rows
            if len(decode_row_id_segments(frag.inline_row_ids)) == 1:
                # Same encoder choice as Lance: byte-identical re-encoding.
                assert encode_row_id_sequence(ids) == frag.inline_row_ids
            deleted = BitMap()
            if frag.HasField("deletion_file"):
                deleted = read_deletion_vector(snap.storage, frag.id, frag.deletion_file)
            live = [rid for offset, rid in enumerate(ids) if offset not in deleted]
            table = theirs.get_fragment(frag.id).to_table(columns=[], with_row_id=True)
            assert table.column("_rowid").to_pylist() == live


def test_pylance_manifests_reencode_byte_identically(history: History) -> None:
    storage = LocalStorage(str(history.path))
    for entry in list_versions(storage):
        data = storage.get(entry.path)
        mf = decode_manifest_file(data)
        assert encode_manifest_file(mf.manifest, mf.indices, mf.transaction) == data


def _commit(
    storage: LocalStorage,
    manifest: table_pb2.Manifest,
    indices: tuple[table_pb2.IndexMetadata, ...],
    transaction: transaction_pb2.Transaction | None,
) -> int:
    """Write ``manifest`` as the next version (test helper; the real loop is commit.py)."""
    entries = list_versions(storage)
    version = entries[-1].version + 1
    m = table_pb2.Manifest()
    m.CopyFrom(manifest)
    m.version = version
    storage.put_if_absent(
        manifest_path(version, entries[-1].scheme), encode_manifest_file(m, indices, transaction)
    )
    return version


def test_reencoded_manifests_give_identical_tables(history: History, tmp_path: Path) -> None:
    copy = tmp_path / "copy.lance"
    shutil.copytree(history.path, copy)
    storage = LocalStorage(str(copy))
    originals = [e.version for e in list_versions(storage)]
    new_versions = {}
    for v in originals:
        _, mf = read_manifest(storage, v)
        new_versions[v] = _commit(storage, mf.manifest, mf.indices, mf.transaction)
    for v, nv in new_versions.items():
        expected = lance.dataset(str(history.path), version=v)
        got = lance.dataset(str(copy), version=nv)
        assert got.to_table().equals(expected.to_table()), f"version {v} as {nv}"
        assert got.count_rows() == expected.count_rows()
        assert _index_names(got) == _index_names(expected)
    # pylance can keep committing on top of a manifest txn_engine wrote.
    latest = lance.dataset(str(copy))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        appended = lance.write_dataset(latest.to_table().slice(0, 3), str(copy), mode="append")
    assert appended.version == max(new_versions.values()) + 1
    assert appended.count_rows() == latest.count_rows() + 3
    assert Dataset.open(str(copy)).count_rows() == appended.count_rows()


@pytest.fixture
def plain_dataset(tmp_path: Path) -> Path:
    path = tmp_path / "plain.lance"
    table = pa.table({"a": pa.array(range(30_000), pa.int64())})
    lance.write_dataset(table, str(path), max_rows_per_file=10_000)
    return path


@pytest.mark.parametrize(
    ("encoding", "offsets"),
    [
        ("arrow", BitMap([0, 7, 42, 9_999])),
        ("bitmap", BitMap([0, 7, 42, 9_999])),
        ("arrow", BitMap(range(0, 10_000, 2))),
        ("bitmap", BitMap(range(0, 10_000, 2))),
        ("auto", BitMap(range(1, 10_000, 3))),
    ],
)
def test_deletion_files_we_write_are_honoured_by_pylance(
    plain_dataset: Path, encoding: DeletionEncoding, offsets: BitMap
) -> None:
    storage = LocalStorage(str(plain_dataset))
    entry, mf = read_manifest(storage)
    frag_index = 1
    frag = mf.manifest.fragments[frag_index]
    dv = write_deletion_vector(storage, frag.id, entry.version, offsets, encoding=encoding)
    expected_type = {
        "arrow": table_pb2.DeletionFile.ARROW_ARRAY,
        "bitmap": table_pb2.DeletionFile.BITMAP,
        "auto": table_pb2.DeletionFile.ARROW_ARRAY
        if len(offsets) < ARROW_THRESHOLD
        else table_pb2.DeletionFile.BITMAP,
    }[encoding]
    assert dv.file_type == expected_type
    assert storage.exists(deletion_file_path(frag.id, dv))
    manifest = table_pb2.Manifest()
    manifest.CopyFrom(mf.manifest)
    manifest.fragments[frag_index].deletion_file.CopyFrom(dv)
    reader, writer = compute_feature_flags(manifest, stable_row_ids=False)
    manifest.reader_feature_flags, manifest.writer_feature_flags = reader, writer
    txn = transaction_pb2.Transaction(read_version=entry.version, uuid=str(uuid.uuid4()))
    txn.delete.updated_fragments.append(manifest.fragments[frag_index])
    txn.delete.predicate = "test"
    manifest.transaction_file = ""
    version = _commit(storage, manifest, mf.indices, txn)

    theirs = lance.dataset(str(plain_dataset))
    assert theirs.version == version
    assert theirs.count_rows() == 30_000 - len(offsets)
    deleted_values = pa.array([10_000 + o for o in offsets], pa.int64())
    column = pa.array(range(30_000), pa.int64())
    keep = pc.invert(pc.is_in(column, value_set=deleted_values))
    expected = pa.table({"a": column}).filter(keep)
    assert theirs.to_table().equals(expected)
    assert Dataset.open(str(plain_dataset)).count_rows() == theirs.count_rows()
    assert read_transaction(storage, version).delete.predicate == "test"
    frag_meta = theirs.get_fragment(frag.id).metadata
    assert frag_meta.deletion_file is not None
    assert frag_meta.deletion_file.num_deleted_rows == len(offsets)


@pytest.mark.parametrize("digits", [21, 25])
def test_v1_listing_with_a_name_past_a_u64_matches_pylance(tmp_path: Path, digits: int) -> None:
    """Beside a V1 table's manifests, a name of more than 19 digits is no u64 and pylance
    skips it; so does txn_engine (it took 21+ digits for the latest version before)."""
    uri = str(tmp_path / "v1")
    lance.write_dataset(pa.table({"a": [1]}), uri, enable_v2_manifest_paths=False)
    lance.write_dataset(pa.table({"a": [2]}), uri, mode="append")
    versions = Path(uri) / "_versions"
    shutil.copy(versions / "2.manifest", versions / f"{'1' * digits}.manifest")
    ours = [e.version for e in list_versions(LocalStorage(uri))]
    theirs = [v["version"] for v in lance.dataset(uri).versions()]
    assert ours == theirs == [1, 2]
    assert Dataset.open(LocalStorage(uri)).version == lance.dataset(uri).version == 2
