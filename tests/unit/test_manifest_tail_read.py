"""Reading a manifest footer first in one request on stores with suffix ranges.

A storage offering ``get_tail(path, n)`` (the obstore backend on S3 and GCS) returns the last
``n`` bytes and the object's size together: a manifest of at most one block then costs one
request, a larger one two (the footer is validated before the rest is read), where ranged
reads alone cost up to four. The bytes are the same either way; hostile files are refused
the same way.
"""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from txn_engine._proto import table_pb2, transaction_pb2
from txn_engine.errors import CorruptManifestError, LimitExceededError
from txn_engine.format import manifest_file as manifest_file_module
from txn_engine.format.io import HEAD_READ_SIZE, read_manifest_bytes
from txn_engine.format.manifest_file import encode_manifest_file
from txn_engine.storage import MemoryStorage, RecordingStorage

PATH = "_versions/x.manifest"


class CountingStore(MemoryStorage):
    """A memory store that counts its read requests."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[str] = []

    def get_range(self, path: str, start: int, end: int) -> bytes:
        self.requests.append("get_range")
        return super().get_range(path, start, end)

    def size(self, path: str) -> int:
        self.requests.append("size")
        return super().size(path)


class TailStore(CountingStore):
    """With suffix ranges (``get_tail``), as obstore on S3 and GCS."""

    def get_tail(self, path: str, n: int) -> tuple[bytes, int] | None:
        self.requests.append("get_tail")
        data = self.get(path)
        return data[-n:], len(data)


def manifest(fragments: int) -> bytes:
    m = table_pb2.Manifest(version=1, max_fragment_id=max(fragments - 1, 0))
    for i in range(fragments):
        f = m.fragments.add(id=i, physical_rows=10)
        f.files.add(path=f"{i:08d}.lance", fields=[0], column_indices=[0], file_major_version=2)
    m.writer_version.library = "txn_engine"
    txn = transaction_pb2.Transaction(read_version=0, uuid=str(uuid.uuid4()))
    txn.overwrite.SetInParent()
    return encode_manifest_file(m, (), txn)


@pytest.mark.parametrize(("fragments", "requests"), [(10, 1), (2000, 2), (8000, 2)])
def test_footer_first_costs_one_request_per_block_read(fragments: int, requests: int) -> None:
    data = manifest(fragments)
    store = TailStore()
    store.put(PATH, data)
    assert read_manifest_bytes(store, PATH) == data
    assert len(store.requests) == requests
    assert store.requests[0] == "get_tail"
    plain = RecordingStorage(store)  # without get_tail: ranged reads, same bytes
    assert read_manifest_bytes(plain, PATH) == data
    if fragments > 10:
        assert len(data) > HEAD_READ_SIZE
        assert len(plain.calls) > requests


@settings(max_examples=60, deadline=None)
@given(
    st.binary(min_size=0, max_size=3 * HEAD_READ_SIZE),
    st.booleans(),
    st.sampled_from(["tail", "head"]),
)
def test_junk_is_refused_or_returned_whole_exactly_as_with_ranged_reads(
    junk: bytes, magic: bool, kind: str
) -> None:
    """Whatever the bytes, the footer-first read (``get_tail``) and the head read with the
    size (``get_head``) agree with plain ranged reads: the same bytes, or the same error."""
    if magic and len(junk) >= 16:
        junk = junk[:-4] + b"LANC"
    tail_store: MemoryStorage = TailStore() if kind == "tail" else HeadStore()
    plain_store = MemoryStorage()
    tail_store.put(PATH, junk)
    plain_store.put(PATH, junk)

    def outcome(store: MemoryStorage) -> bytes | type[Exception]:
        try:
            return read_manifest_bytes(store, PATH)
        except (CorruptManifestError, LimitExceededError) as exc:
            return type(exc)

    assert outcome(tail_store) == outcome(plain_store)


def test_bad_footer_is_refused_before_the_rest_is_read() -> None:
    data = bytearray(manifest(2000))
    data[-4:] = b"NOPE"
    store = TailStore()
    store.put(PATH, bytes(data))
    with pytest.raises(CorruptManifestError, match="magic"):
        read_manifest_bytes(store, PATH)
    assert store.requests == ["get_tail"]


def test_a_manifest_starting_in_the_last_block_with_a_bad_length_is_refused_at_once() -> None:
    size = 3 * HEAD_READ_SIZE
    pos = size - 1000
    data = bytearray(size)
    struct.pack_into("<I", data, pos, 5)  # claims 5 bytes: does not reach the footer
    struct.pack_into("<QHH4s", data, size - 16, pos, 0, 2, b"LANC")
    store = TailStore()
    store.put(PATH, bytes(data))
    with pytest.raises(CorruptManifestError, match="does not end at the footer"):
        read_manifest_bytes(store, PATH)
    assert store.requests == ["get_tail"]


def test_a_file_over_the_cap_is_refused_before_the_rest_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(manifest_file_module, "MAX_MANIFEST_BYTES", 100_000, raising=False)
    store = TailStore()
    data = manifest(6000)
    assert len(data) > 100_000
    store.put(PATH, data)
    with pytest.raises(LimitExceededError):
        read_manifest_bytes(store, PATH)
    assert store.requests == ["get_tail"]


class HeadStore(CountingStore):
    """With ``get_head`` (the first block and the size in one request) but no suffix
    ranges, as obstore on Azure."""

    def get_head(self, path: str, n: int) -> tuple[bytes, int]:
        self.requests.append("get_head")
        data = self.get(path)
        return data[:n], len(data)


@pytest.mark.parametrize(("fragments", "requests"), [(10, 1), (2000, 2), (8000, 3)])
def test_without_suffix_ranges_the_head_read_brings_the_size(fragments: int, requests: int) -> None:
    """No separate size request: one for a small manifest, two up to two blocks, three
    beyond (the footer still validated before the middle is read)."""
    data = manifest(fragments)
    store = HeadStore()
    store.put(PATH, data)
    assert read_manifest_bytes(store, PATH) == data
    assert store.requests[0] == "get_head"
    assert "size" not in store.requests
    assert len(store.requests) == requests
