"""Bounded reads of hostile tables (issue 11, findings 5, 6 and the count_rows / permission
parts of 8): every test here reproduces a probe that used to exhaust memory, hang, say "OK"
or return a negative count, and asserts the typed refusal that replaced it.
"""

from __future__ import annotations

import base64
import errno
import os
import struct
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pytest
from pyroaring import BitMap

from txn_engine._proto import file_pb2, table_pb2, transaction_pb2
from txn_engine.dataset import Dataset
from txn_engine.errors import (
    CorruptDeletionFileError,
    CorruptManifestError,
    FormatError,
    LimitExceededError,
    ObjectNotFoundError,
    StorageError,
    TxnEngineError,
)
from txn_engine.format import manifest_file as manifest_file_module
from txn_engine.format.deletion import (
    declared_deletion_count,
    decode_deletion_file,
    deletion_file_path,
    encode_arrow_deletions,
    encode_bitmap_deletions,
    read_deletion_vector,
)
from txn_engine.format.flags import FLAG_DELETION_FILES
from txn_engine.format.io import read_manifest, read_manifest_entry, read_transaction
from txn_engine.format.manifest_file import encode_manifest_file
from txn_engine.format.naming import (
    NamingScheme,
    VersionEntry,
    manifest_name,
    manifest_path,
    transaction_path,
)
from txn_engine.format.rowids import (
    RangeSegment,
    decode_row_id_sequence,
    encode_row_id_segments,
)
from txn_engine.format.schema import major_version
from txn_engine.storage import LocalStorage, MemoryStorage
from txn_engine.storage.base import Storage, get_bounded
from txn_engine.verify import _pylance14_or_txn_engine, verify

UUID = "12345678-1234-4234-8234-123456789abc"
ARROW, BITMAP = table_pb2.DeletionFile.ARROW_ARRAY, table_pb2.DeletionFile.BITMAP
_SCHEMA = pa.schema([pa.field("row_id", pa.uint32(), nullable=False)])


# ---- helpers ------------------------------------------------------------------------------------


def _arrow_zeros(batches: int, rows_per_batch: int, compression: str | None = "zstd") -> bytes:
    """An ``.arrow`` deletion file of ``batches * rows_per_batch`` zero offsets: zstd turns
    it into a few hundred bytes per batch (a decompression bomb), written batch by batch so
    building it costs one batch of memory."""
    # a zeroed buffer as the data (no numpy: the unit tier runs with the core alone)
    zeros = pa.Array.from_buffers(
        pa.uint32(), rows_per_batch, [None, pa.py_buffer(bytes(4 * rows_per_batch))]
    )
    batch = pa.record_batch([zeros], schema=_SCHEMA)
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_file(sink, _SCHEMA, options=options) as writer:
        for _ in range(batches):
            writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


def _dataset(
    storage: Storage,
    *,
    physical_rows: int,
    deletion: bytes | None = None,
    file_type: int = ARROW,
    num_deleted_rows: int = 0,
) -> None:
    """Version 1 of a one-fragment dataset, optionally with a deletion file of those bytes."""
    frag = table_pb2.DataFragment(id=0, physical_rows=physical_rows)
    frag.files.add(path="0.lance", fields=[0], column_indices=[0], file_major_version=2)
    m = table_pb2.Manifest(version=1, fragments=[frag], max_fragment_id=0)
    m.writer_version.library = "txn_engine"
    m.writer_version.version = "0.1.0"
    if deletion is not None:
        df = m.fragments[0].deletion_file
        df.file_type = file_type
        df.read_version = 1
        df.id = 7
        df.num_deleted_rows = num_deleted_rows
        m.reader_feature_flags = m.writer_feature_flags = FLAG_DELETION_FILES
        storage.put(deletion_file_path(0, df), deletion)
    txn = transaction_pb2.Transaction(read_version=0, uuid=UUID)
    txn.overwrite.SetInParent()
    storage.put_if_absent(manifest_path(1, NamingScheme.V2), encode_manifest_file(m, (), txn))


def _deletion_pb(file_type: int = ARROW) -> table_pb2.DeletionFile:
    return table_pb2.DeletionFile(file_type=file_type, read_version=1, id=7)


@contextmanager
def _peak_python_memory() -> Iterator[list[int]]:
    """Yields a list that holds, after the block, the peak bytes Python allocated in it."""
    out: list[int] = []
    tracemalloc.start()
    try:
        yield out
    finally:
        out.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()


def _finishes(fn: Callable[[], Any], timeout: float) -> tuple[bool, BaseException | None]:
    """Run ``fn`` in a daemon thread; (finished within ``timeout``, what it raised)."""
    raised: list[BaseException | None] = [None]

    def run() -> None:
        try:
            fn()
        except BaseException as exc:
            raised[0] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    return not t.is_alive(), raised[0]


# ---- finding 5: decompression bombs -------------------------------------------------------------


def test_arrow_bomb_refused_before_decompressing_against_physical_rows() -> None:
    bomb = _arrow_zeros(4, 1 << 20)  # 4 Mi rows declared in a few KB
    assert len(bomb) < 16 << 10
    with pytest.raises(LimitExceededError, match="more than the 10"):
        declared_deletion_count(bomb, ARROW, physical_rows=10)
    storage = MemoryStorage()
    _dataset(storage, physical_rows=10, deletion=bomb)
    started = time.perf_counter()
    with pytest.raises(LimitExceededError) as info:
        Dataset.open(storage).count_rows()
    assert time.perf_counter() - started < 2.0
    assert info.value.limit == "deleted_rows"
    with pytest.raises(LimitExceededError):
        read_deletion_vector(storage, 0, _deletion_pb(), physical_rows=10)


def test_arrow_bomb_refused_by_expansion_bound_even_without_physical_rows() -> None:
    bomb = _arrow_zeros(40, 1 << 20)  # 40 Mi rows, 160 MiB uncompressed, ~10 KB on disk
    assert len(bomb) < 64 << 10
    with _peak_python_memory() as peak, pytest.raises(LimitExceededError, match="expansion"):
        decode_deletion_file(bomb, ARROW)
    assert peak[0] < 4 << 20


def test_verify_deep_reports_the_bomb_instead_of_ok(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "ds", fsync=False)
    # num_deleted_rows 1 agrees with the one distinct offset the bomb decodes to
    _dataset(storage, physical_rows=10, deletion=_arrow_zeros(40, 1 << 20), num_deleted_rows=1)
    started = time.perf_counter()
    report = verify(storage, deep=True)
    assert time.perf_counter() - started < 5.0
    assert not report.ok
    assert any(f.invariant == "deletion-file" and "rows" in f.detail for f in report.errors)


def test_compressed_buffer_declaring_a_huge_uncompressed_size_is_refused() -> None:
    good = _arrow_zeros(1, 1000)
    assert len(decode_deletion_file(good, ARROW, physical_rows=1000)) == 1
    # the data buffer's int64 uncompressed-length prefix says 4000: make it 6 GB
    prefix = struct.pack("<q", 4000)
    assert good.count(prefix) == 1
    bomb = good.replace(prefix, struct.pack("<q", 6 << 30))
    with pytest.raises(LimitExceededError, match="uncompressed"):
        decode_deletion_file(bomb, ARROW, physical_rows=1000)


def test_roaring_full_range_refused_from_its_header() -> None:
    full = BitMap()
    full.add_range(0, 1 << 32)  # 2^32 offsets in under 1 MB (run containers)
    raw = encode_bitmap_deletions(full)
    assert len(raw) < 1 << 20
    assert declared_deletion_count(raw, BITMAP) == 1 << 32
    with pytest.raises(LimitExceededError, match="only 180"):
        decode_deletion_file(raw, BITMAP, physical_rows=180)


def test_count_rows_never_negative_for_a_full_range_bitmap() -> None:
    # the probe: count_rows() returned -4,294,967,116 (180 - 2^32)
    full = BitMap()
    full.add_range(0, 1 << 32)
    storage = MemoryStorage()
    _dataset(storage, physical_rows=180, deletion=encode_bitmap_deletions(full), file_type=BITMAP)
    with pytest.raises(LimitExceededError):
        Dataset.open(storage).count_rows()


@pytest.mark.parametrize("file_type", [ARROW, BITMAP])
def test_out_of_range_offsets_refused_by_count_rows(file_type: int) -> None:
    offsets = BitMap([1, 3, 50])  # 50 >= physical_rows 10: pylance 14 fails every scan
    data = (
        encode_arrow_deletions(offsets) if file_type == ARROW else encode_bitmap_deletions(offsets)
    )
    storage = MemoryStorage()
    _dataset(storage, physical_rows=10, deletion=data, file_type=file_type)
    with pytest.raises(CorruptDeletionFileError, match="offset 50"):
        Dataset.open(storage).count_rows()
    # in-range offsets of the same file are fine for a fragment that has the rows
    storage2 = MemoryStorage()
    _dataset(storage2, physical_rows=51, deletion=data, file_type=file_type)
    assert Dataset.open(storage2).count_rows() == 48


def test_recorded_num_deleted_rows_beyond_physical_rows_refused() -> None:
    storage = MemoryStorage()
    data = encode_arrow_deletions(BitMap([1]))
    _dataset(storage, physical_rows=10, deletion=data, num_deleted_rows=1000)
    with pytest.raises(CorruptDeletionFileError, match="1000 deleted rows"):
        Dataset.open(storage).count_rows()


def test_declared_counts_of_real_files_are_exact() -> None:
    offsets = BitMap(range(0, 20_000, 3))
    arrow, bitmap = encode_arrow_deletions(offsets), encode_bitmap_deletions(offsets)
    assert declared_deletion_count(arrow, ARROW, physical_rows=20_000) == len(offsets)
    assert declared_deletion_count(bitmap, BITMAP, physical_rows=20_000) == len(offsets)
    lz4 = _arrow_zeros(3, 700, compression="lz4")
    assert declared_deletion_count(lz4, ARROW, physical_rows=2100) == 2100
    assert decode_deletion_file(lz4, ARROW, physical_rows=2100) == BitMap([0])


def test_row_id_sequence_length_checked_before_expanding() -> None:
    started = time.perf_counter()
    with pytest.raises(LimitExceededError):
        decode_row_id_sequence(encode_row_id_segments([RangeSegment(5, 25)]), max_len=10)
    huge = encode_row_id_segments([RangeSegment(0, 1 << 40)])  # 10 bytes, 2^40 ids
    with pytest.raises(LimitExceededError):
        decode_row_id_sequence(huge)
    assert time.perf_counter() - started < 1.0
    assert decode_row_id_sequence(encode_row_id_segments([RangeSegment(5, 8)]), max_len=3) == [
        5,
        6,
        7,
    ]


# ---- finding 6: unbounded whole-file reads ------------------------------------------------------


def test_sparse_manifest_with_bad_magic_costs_two_blocks(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "ds", fsync=False)
    _dataset(storage, physical_rows=3)
    path = storage.full_path(manifest_path(1, NamingScheme.V2))
    with open(path, "r+b") as f:
        f.truncate(64 << 20)  # sparse 64 MiB, no footer
    with _peak_python_memory() as peak, pytest.raises(CorruptManifestError, match="magic"):
        Dataset.open(storage)
    assert peak[0] < 1 << 20


def test_manifest_larger_than_the_cap_refused_before_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(manifest_file_module, "MAX_MANIFEST_BYTES", 8 << 20, raising=False)
    storage = LocalStorage(tmp_path / "ds", fsync=False)
    _dataset(storage, physical_rows=3)
    path = storage.full_path(manifest_path(1, NamingScheme.V2))
    with open(path, "r+b") as f:  # sparse 32 MiB ending in a plausible footer
        f.truncate(32 << 20)
        f.seek((32 << 20) - 16)
        f.write(struct.pack("<QHH4s", 0, 0, 2, b"LANC"))
    with _peak_python_memory() as peak, pytest.raises(LimitExceededError) as info:
        Dataset.open(storage)
    assert info.value.limit == "MAX_MANIFEST_BYTES"
    assert peak[0] < 1 << 20


def test_large_valid_manifest_still_reads(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "ds", fsync=False)
    frags = []
    for i in range(5000):  # ~300 KB: the footer-first path with a middle read
        f = table_pb2.DataFragment(id=i, physical_rows=10)
        f.files.add(path=f"{i:08d}.lance", fields=[0], column_indices=[0], file_major_version=2)
        frags.append(f)
    m = table_pb2.Manifest(version=1, fragments=frags, max_fragment_id=4999)
    m.writer_version.library = "txn_engine"
    txn = transaction_pb2.Transaction(read_version=0, uuid=UUID)
    txn.overwrite.SetInParent()
    storage.put_if_absent(manifest_path(1, NamingScheme.V2), encode_manifest_file(m, (), txn))
    _, mf = read_manifest(storage)
    assert mf.size > 2 * 64 * 1024  # past two blocks: footer, then the rest
    assert len(mf.manifest.fragments) == 5000
    assert Dataset.open(storage).count_rows() == 50_000


def test_transaction_file_larger_than_the_cap_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    storage = MemoryStorage()
    m = table_pb2.Manifest(version=1, transaction_file=f"0-{UUID}.txn")
    m.writer_version.library = "txn_engine"
    storage.put_if_absent(manifest_path(1, NamingScheme.V2), encode_manifest_file(m))
    txn = transaction_pb2.Transaction(read_version=0, uuid=UUID, tag="x" * 5000)
    txn.overwrite.SetInParent()
    storage.put(transaction_path(f"0-{UUID}.txn"), txn.SerializeToString())
    assert read_transaction(storage, 1).tag == "x" * 5000
    monkeypatch.setattr(manifest_file_module, "MAX_TRANSACTION_BYTES", 1024, raising=False)
    with pytest.raises(LimitExceededError):
        read_transaction(storage, 1)


def test_deletion_file_larger_than_its_fragment_allows_is_not_read() -> None:
    storage = MemoryStorage()
    _dataset(storage, physical_rows=10, deletion=b"\0" * (1 << 20))
    with pytest.raises(LimitExceededError):
        read_deletion_vector(storage, 0, _deletion_pb(), physical_rows=10)


def _fifo_dataset(tmp_path: Path) -> tuple[LocalStorage, str]:
    storage = LocalStorage(tmp_path / "ds", fsync=False)
    _dataset(storage, physical_rows=10, deletion=encode_arrow_deletions(BitMap([1])))
    path = storage.full_path(deletion_file_path(0, _deletion_pb()))
    os.unlink(path)
    os.mkfifo(path)
    return storage, path


def test_fifo_deletion_file_refused_without_blocking(tmp_path: Path) -> None:
    storage, path = _fifo_dataset(tmp_path)
    try:
        done, raised = _finishes(lambda: Dataset.open(storage).count_rows(), 10.0)
        assert done, "reading a FIFO deletion file blocked"
        assert isinstance(raised, StorageError)
        assert "FIFO" in str(raised)
        for read in (storage.get, lambda p: storage.get_range(p, 0, 4), storage.size):
            rel = deletion_file_path(0, _deletion_pb())
            done, raised = _finishes(lambda read=read, rel=rel: read(rel), 10.0)
            assert done
            assert isinstance(raised, StorageError)
    finally:  # release a reader the old code left blocked in open()
        with suppress(OSError):
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


def test_deletion_file_symlinked_to_dev_zero_refused(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "ds", fsync=False)
    _dataset(storage, physical_rows=10, deletion=encode_arrow_deletions(BitMap([1])))
    path = storage.full_path(deletion_file_path(0, _deletion_pb()))
    os.unlink(path)
    os.symlink("/dev/zero", path)
    with _peak_python_memory() as peak, pytest.raises(StorageError, match="character device"):
        read_deletion_vector(storage, 0, _deletion_pb())
    assert peak[0] < 1 << 20
    with pytest.raises(StorageError):
        storage.get_range(deletion_file_path(0, _deletion_pb()), 0, 1 << 30)


def test_manifest_that_is_a_fifo_refused(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "ds", fsync=False)
    _dataset(storage, physical_rows=3)
    path = storage.full_path(manifest_path(1, NamingScheme.V2))
    os.unlink(path)
    os.mkfifo(path)
    entry = VersionEntry(1, manifest_name(1, NamingScheme.V2), NamingScheme.V2)
    assert not storage.exists(entry.path)  # listings and exists() never show a FIFO...
    try:  # ...but a reader handed its name must not block on it either
        done, raised = _finishes(lambda: read_manifest_entry(storage, entry), 10.0)
        assert done
        assert isinstance(raised, StorageError)
    finally:
        with suppress(OSError):
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


def test_get_bounded_default_and_local_agree(tmp_path: Path) -> None:
    for storage in (MemoryStorage(), LocalStorage(tmp_path / "b", fsync=False)):
        storage.put("x/y", b"0123456789")
        assert get_bounded(storage, "x/y", 10) == b"0123456789"
        with pytest.raises(LimitExceededError) as info:
            get_bounded(storage, "x/y", 9)
        assert info.value.limit == "max_bytes"
        with pytest.raises(ObjectNotFoundError):
            get_bounded(storage, "x/none", 9)


# ---- finding 8 (part): permission denied is a storage failure, not a decode failure -------------


def test_permission_denied_manifest_is_a_storage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = LocalStorage(tmp_path / "ds", fsync=False)
    _dataset(storage, physical_rows=3)

    def denied(*args: Any, **kwargs: Any) -> Any:
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr("txn_engine.storage.local.open", denied, raising=False)
    with pytest.raises(TxnEngineError) as info:
        Dataset.open(storage)
    assert isinstance(info.value, StorageError)
    assert not isinstance(info.value, (FormatError, ObjectNotFoundError))
    assert "permission denied" in str(info.value).lower()
    assert isinstance(info.value.__cause__, PermissionError)


def test_unknown_deletion_file_type_in_a_transaction_is_a_format_error() -> None:
    # found by the fuzz suite: DeletionFileType(127) leaked a bare ValueError from
    # Dataset.transaction() and from commit's decoding of intervening versions
    from txn_engine.codec import transaction_from_proto

    txn = transaction_pb2.Transaction(read_version=1, uuid=UUID)
    frag = txn.delete.updated_fragments.add(id=0, physical_rows=10)
    frag.deletion_file.file_type = 127  # type: ignore[assignment]
    with pytest.raises(CorruptDeletionFileError, match="type 127"):
        transaction_from_proto(txn)


def test_commit_on_exhausted_fragment_ids_is_a_typed_error() -> None:
    # found by the fuzz suite: a manifest whose max_fragment_id is u32::MAX made the next
    # Append's builder raise protobuf's bare ValueError("Value out of range") from commit
    from txn_engine.commit import commit
    from txn_engine.model import DataFile, Fragment
    from txn_engine.ops import Append
    from txn_engine.transaction import Transaction

    storage = MemoryStorage()
    frag = table_pb2.DataFragment(id=0, physical_rows=3)
    frag.files.add(path="0.lance", fields=[0], column_indices=[0], file_major_version=2)
    m = table_pb2.Manifest(version=1, fragments=[frag], max_fragment_id=0xFFFFFFFF)
    m.fields.add(name="a", id=0, parent_id=-1, logical_type="int64", type=file_pb2.Field.LEAF)
    m.writer_version.library = "txn_engine"
    m.data_format.file_format = "lance"
    m.data_format.version = "2.0"
    txn = transaction_pb2.Transaction(read_version=0, uuid=UUID)
    txn.overwrite.SetInParent()
    storage.put_if_absent(manifest_path(1, NamingScheme.V2), encode_manifest_file(m, (), txn))
    new = Fragment(0, (DataFile("1.lance", (0,), (0,), 2, 0, 10),), 3)
    with pytest.raises(LimitExceededError, match="max_fragment_id"):
        commit(storage, Transaction(1, Append([new])))


@pytest.mark.parametrize("physical_rows", [None, 10])
def test_arrow_deletion_file_with_a_non_utf8_column_name_is_corrupt(
    physical_rows: int | None,
) -> None:
    """A column name that is not UTF-8 (pyarrow raises UnicodeDecodeError reading it) is a
    corrupt deletion file, not a crash; the message does not echo the undecodable name.
    Found by the hostile-deletion-file fuzz at 2,000 examples."""
    good = encode_arrow_deletions(BitMap([1, 2]))
    assert good.count(b"row_id") == 2  # the schema is in the header and in the footer
    hostile = good.replace(b"row_id", b"\xff\xffw_id")
    with pytest.raises(CorruptDeletionFileError, match="not UTF-8"):
        decode_deletion_file(hostile, ARROW, physical_rows=physical_rows)
    # one bad byte in the footer's copy of the name (the one a file reader reads)
    last = good.rindex(b"row_id")
    once = good[:last] + b"\xff" + good[last + 1 :]
    with pytest.raises(CorruptDeletionFileError, match="not UTF-8"):
        decode_deletion_file(once, ARROW, physical_rows=physical_rows)


def test_index_fragment_bitmap_that_is_not_roaring_is_a_format_error() -> None:
    """An inline transaction (or manifest index) whose index names bytes that are not a
    Roaring bitmap as its fragment_bitmap: FormatError, not pyroaring's ValueError. Found
    by the mutated-manifest fuzz at the nightly profile (seed 2215)."""
    from txn_engine.builder._common import index_bitmap
    from txn_engine.codec import transaction_from_proto

    txn = transaction_pb2.Transaction(read_version=1, uuid=UUID)
    removed = txn.create_index.removed_indices.add(name="i1", fragment_bitmap=b"\x00\x01bad")
    removed.uuid.uuid = bytes(16)
    with pytest.raises(FormatError, match=r"i1.*not a valid Roaring"):
        transaction_from_proto(txn)
    with pytest.raises(FormatError, match="not a valid Roaring"):
        index_bitmap(table_pb2.IndexMetadata(name="i2", fragment_bitmap=b"\xff" * 9))
    good = table_pb2.IndexMetadata(name="i3", fragment_bitmap=BitMap([0, 2]).serialize())
    assert index_bitmap(good) == BitMap([0, 2])


@pytest.mark.parametrize(
    ("text", "major"),
    [("2.1", 2), ("0.39.0", 0), ("14", 14), ("\u00b2", None), ("1" * 5000 + ".0", None),
     ("\u0663.0", None), ("", None), ("x.1", None), ("2x", None)],
)  # fmt: skip
def test_major_version_of_table_strings_never_raises(text: str, major: int | None) -> None:
    assert major_version(text) == major


def test_verify_reads_a_writer_version_that_is_not_a_number() -> None:
    """verify's fragment-id check asks which writer wrote a manifest; a writer version of
    ``²`` (isdigit() but no int()) raised ValueError out of it."""
    m = table_pb2.Manifest()
    m.writer_version.library = "lance"
    for text, expected in (("\u00b2", False), ("1" * 5000, False), ("14.0.2", True)):
        m.writer_version.version = text
        assert _pylance14_or_txn_engine(m) is expected


#: A two-row Arrow deletion file whose data buffer says it is 1 byte long (found by
#: ``test_fuzz_hostile.py::test_hostile_deletion_files``): pyarrow reads it without a
#: complaint, and decoding it then raised a bare ValueError.
_SHORT_BUFFER_ARROW = base64.b64decode(
    "QVJST1cxAAD/////eAAAABAAAAAAAAoADAAGAAUACAAKAAAAAAEEAAwAAAAIAAgAAAAEAAgAAAAEAAAAAQAA"
    "ABQAAAAQABQACAAAAAcADAAAABAAEAAAAAAAAAIQAAAAIAAAAAQAAAAAAAAABgAAAHJvd19pZAAAAAAGAAgA"
    "BAAGAAAAIAAAAP////+IAAAAFAAAAAAAAAAMABYABgAFAAgADAAMAAAAAAMEABgAAAAIAAAAAAAAAAAACgAY"
    "AAwABAAIAAoAAAA8AAAAEAAAAAIAAAAAAAAAAAAAAAIAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAABAAAA"
    "AAAAAAAAAAABAAAAAgAAAAAAAAAAAAAAAAAAAAEAAAACAAAA/////wAAAAAQAAAADAAUAAYACAAMABAADAAA"
    "AAAABAA0AAAAJAAAAAQAAAABAAAAiAAAAAAAAACQAAAAAAAAAAgAAAAAAAAAAAAAAAgACAAAAAQACAAAAAQA"
    "AAABAAAAFAAAABAAFAAIAAAABwAMAAAAEAAQAAAAAAAAAhAAAAAgAAAABAAAAAAAAAAGAAAAcm93X2lkAAAA"
    "AAYACAAEAAYAAAAgAAAAoAAAAEFSUk9XMQ=="
)


def test_an_arrow_deletion_file_with_a_short_buffer_is_corrupt_not_a_crash() -> None:
    table = pa.ipc.open_file(pa.BufferReader(_SHORT_BUFFER_ARROW)).read_all()  # no complaint
    assert (table.num_rows, table.column(0).chunks[0].buffers()[1].size) == (2, 1)
    with pytest.raises(CorruptDeletionFileError, match="too small"):
        decode_deletion_file(_SHORT_BUFFER_ARROW, ARROW, physical_rows=10)
