"""Dataset read API over hand-built manifests in memory (no pylance needed)."""

from __future__ import annotations

import datetime as dt

import pytest
from pyroaring import BitMap

import txn_engine as te
from txn_engine._proto import table_pb2, transaction_pb2
from txn_engine.dataset import Dataset
from txn_engine.errors import (
    DatasetNotFoundError,
    MixedNamingSchemeError,
    VersionNotFoundError,
)
from txn_engine.format.deletion import write_deletion_vector
from txn_engine.format.manifest_file import encode_manifest_file
from txn_engine.format.naming import NamingScheme, manifest_path, scan_versions
from txn_engine.model import Fragment
from txn_engine.storage import MemoryStorage

UUID = "12345678-1234-4234-8234-123456789abc"


def _commit(
    storage: MemoryStorage,
    version: int,
    fragments: list[table_pb2.DataFragment],
    *,
    op: str = "append",
    scheme: NamingScheme = NamingScheme.V2,
    txn: bool = True,
) -> None:
    m = table_pb2.Manifest(version=version, fragments=fragments)
    m.writer_version.library = "txn_engine"
    m.writer_version.version = "0.1.0"
    m.timestamp.seconds = 1_700_000_000 + version
    m.config["k"] = str(version)
    t = transaction_pb2.Transaction(read_version=version - 1, uuid=UUID)
    getattr(t, op).SetInParent()
    storage.put_if_absent(
        manifest_path(version, scheme), encode_manifest_file(m, (), t if txn else None)
    )


def _frag(fid: int, rows: int) -> table_pb2.DataFragment:
    f = table_pb2.DataFragment(id=fid, physical_rows=rows)
    f.files.add(path=f"{fid}.lance", fields=[0], column_indices=[0], file_major_version=2)
    return f


@pytest.fixture
def storage() -> MemoryStorage:
    s = MemoryStorage()
    _commit(s, 1, [_frag(0, 10)], op="overwrite")
    _commit(s, 2, [_frag(0, 10), _frag(1, 5)])
    f0 = _frag(0, 10)
    f0.deletion_file.CopyFrom(write_deletion_vector(s, 0, 2, BitMap([1, 2, 3])))
    _commit(s, 3, [f0, _frag(1, 5)], op="delete")
    return s


def test_open_latest_and_checkout(storage: MemoryStorage) -> None:
    ds = Dataset.open(storage)
    assert ds.version == 3 == ds.latest_version()
    assert ds.count_rows() == 12
    assert ds.checkout(2).count_rows() == 15
    assert Dataset.open(storage, version=1).count_rows() == 10
    assert [f.id for f in ds.fragments] == [0, 1]
    assert isinstance(ds.fragments[0], Fragment)
    assert ds.fragments[0].num_rows == 7
    assert ds.config == {"k": "3"}
    assert ds.naming_scheme is NamingScheme.V2
    assert ds.uri == storage.uri


def test_unknown_num_deleted_rows_reads_the_file(storage: MemoryStorage) -> None:
    f0 = _frag(0, 10)
    f0.deletion_file.CopyFrom(write_deletion_vector(storage, 0, 3, BitMap([4, 5])))
    f0.deletion_file.num_deleted_rows = 0  # "unknown"
    _commit(storage, 4, [f0])
    assert Dataset.open(storage).fragment_row_counts() == [(0, 10, 2)]


def test_versions_and_transactions(storage: MemoryStorage) -> None:
    ds = Dataset.open(storage, version=2)
    infos = ds.versions()
    assert [(v.version, v.operation, v.read_version) for v in infos] == [
        (1, "Overwrite", 0),
        (2, "Append", 1),
        (3, "Delete", 2),
    ]
    assert infos[0].timestamp == dt.datetime.fromtimestamp(1_700_000_001, tz=dt.UTC)
    assert infos[0].writer == "txn_engine 0.1.0"
    assert infos[0].to_json()["operation"] == "Overwrite"
    assert ds.transaction_proto().WhichOneof("operation") == "append"
    assert ds.transaction_proto(3).WhichOneof("operation") == "delete"
    # the public read returns the library's own attrs Transaction
    assert isinstance(ds.transaction(), te.Transaction)
    assert ds.transaction().kind == "Append"
    assert ds.transaction(3).kind == "Delete"
    assert ds.transaction(3).uuid == ds.transaction_proto(3).uuid


def test_missing_transaction_is_reported_not_raised() -> None:
    s = MemoryStorage()
    _commit(s, 1, [], txn=False)
    (info,) = Dataset.open(s).versions()
    assert info.operation is None
    assert info.transaction_error is not None
    assert "no inline transaction" in info.transaction_error


def test_errors() -> None:
    with pytest.raises(DatasetNotFoundError):
        Dataset.open(MemoryStorage())
    s = MemoryStorage()
    _commit(s, 1, [])
    with pytest.raises(VersionNotFoundError):
        Dataset.open(s, version=5)
    _commit(s, 2, [], scheme=NamingScheme.V1)
    # a listing in byte order (memory, S3, GCS, Azure) shows the newest V2 name first and
    # Dataset.open reads only that page: the V2 latest is the latest, as in Lance; a V1 name
    # listed before it ("1.manifest" sorts before every V2 name) or a full listing (local
    # disk, the commit loop's fallback) still refuses mixed names
    assert Dataset.open(s).version == 1
    with pytest.raises(MixedNamingSchemeError):
        scan_versions(s)
    _commit(s, 1, [], scheme=NamingScheme.V1)
    with pytest.raises(MixedNamingSchemeError):
        Dataset.open(s)


def test_manifest_and_indices_are_the_librarys_types(storage: MemoryStorage) -> None:
    # Dataset.manifest / Dataset.indices used to return the raw protobufs
    index = table_pb2.IndexMetadata(name="id_idx", fields=[0], dataset_version=2)
    index.uuid.uuid = bytes(range(16))
    index.fragment_bitmap = BitMap([0, 1]).serialize()
    index.index_details.type_url = "/lance.table.BTreeIndexDetails"
    m = table_pb2.Manifest(version=4, fragments=[_frag(0, 10)], max_fragment_id=0)
    m.writer_version.library = "lance"
    m.writer_version.version = "14.0.2"
    m.writer_version.prerelease = "rc1"
    m.data_format.file_format = "lance"
    m.data_format.version = "2.2"
    m.timestamp.seconds = 1_700_000_004
    m.config["b"], m.config["a"] = "2", "1"
    m.schema_metadata["s"] = b"\x00"
    m.branch = "dev"
    m.base_paths.add(id=1, path="/elsewhere", is_dataset_root=True)
    storage.put_if_absent(manifest_path(4, NamingScheme.V2), encode_manifest_file(m, [index], None))
    ds = Dataset.open(storage)

    man = ds.manifest
    assert isinstance(man, te.dataset.Manifest)
    assert not isinstance(man, table_pb2.Manifest)
    assert man.version == 4
    assert man.fragments == ds.fragments
    assert isinstance(man.fragments[0], Fragment)
    assert dict(man.config) == {"a": "1", "b": "2"} == ds.config
    assert man.config == (("a", "1"), ("b", "2"))  # canonical: sorted pairs, hashable
    assert dict(man.schema_metadata) == {"s": b"\x00"}
    assert man.max_fragment_id == 0
    assert man.branch == "dev"
    assert man.writer_version == te.dataset.WriterVersion("lance", "14.0.2", "rc1")
    assert str(man.writer_version) == "lance 14.0.2-rc1"
    assert man.data_format == te.dataset.DataStorageFormat("lance", "2.2")
    assert man.timestamp == dt.datetime.fromtimestamp(1_700_000_004, tz=dt.UTC)
    assert man.base_paths == (te.BasePath(1, "/elsewhere", None, True),)
    assert man.transaction_section is None
    assert man.index_section is not None
    hash(man)  # frozen attrs value
    assert Dataset.open(storage, version=1).manifest.max_fragment_id is None

    (idx,) = ds.indices
    assert isinstance(idx, te.IndexMetadata)
    assert (idx.name, idx.fields, idx.dataset_version) == ("id_idx", (0,), 2)
    assert idx.fragment_bitmap == frozenset({0, 1})
    assert idx.uuid == "00010203-0405-0607-0809-0a0b0c0d0e0f"
    assert ds.index_names() == ["id_idx"]
    # the raw protobufs stay available under clearly named accessors
    assert isinstance(ds.manifest_pb, table_pb2.Manifest)
    assert ds.manifest_pb.version == 4
    assert isinstance(ds.indices_pb[0], table_pb2.IndexMetadata)
    assert te.IndexMetadata.from_proto(ds.indices_pb[0]) == idx
