"""Read API: open a Lance dataset at one version and describe it::

    ds = Dataset.open("/data/table.lance")          # latest version
    ds.version, ds.count_rows(), ds.schema
    [v.operation for v in ds.versions()]            # ["Overwrite", "Append", ...]
    ds.checkout(1).count_rows()

Everything here reads; nothing writes. A :class:`Dataset` is an immutable snapshot of one
version: re-open (or :meth:`Dataset.checkout`) to see newer commits.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from txn_engine._proto import table_pb2, transaction_pb2
from txn_engine.codec import operation_kind_of
from txn_engine.errors import (
    CorruptDeletionFileError,
    DataFileError,
    FormatError,
    InvalidOperationError,
    TxnEngineError,
)
from txn_engine.format.datafile import legacy_row_count
from txn_engine.format.deletion import read_deletion_vector
from txn_engine.format.fields import LanceField, frozen_map
from txn_engine.format.io import (
    latest_version,
    read_manifest,
    read_manifest_entry,
    read_transaction,
)
from txn_engine.format.manifest_file import ManifestFile
from txn_engine.format.naming import NamingScheme, VersionEntry, list_versions
from txn_engine.interop import is_pylance
from txn_engine.model import BasePath, Fragment, IndexMetadata
from txn_engine.storage import open_storage
from txn_engine.storage.base import Storage

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

    from txn_engine.format.refs import Branch, Tag
    from txn_engine.transaction import Transaction

__all__ = [
    "DataStorageFormat",
    "Dataset",
    "Manifest",
    "VersionInfo",
    "WriterVersion",
    "as_base",
    "version_history",
]


def _tagged_version(storage: Storage, tag: str) -> int:
    """The main-line version tag ``tag`` names (VersionNotFoundError if none)."""
    from txn_engine.format.refs import read_tag

    found = read_tag(storage, tag)
    if found.branch is not None:
        raise InvalidOperationError(
            f"tag {tag!r} points at branch {found.branch!r}; txn_engine opens main-line "
            "versions only"
        )
    return found.version


def _timestamp(manifest: table_pb2.Manifest) -> _dt.datetime | None:
    """The manifest's commit time; FormatError when it is not a representable time."""
    if not manifest.HasField("timestamp"):
        return None
    ts = manifest.timestamp
    if ts.seconds == 0 and ts.nanos == 0:
        return None
    try:
        if not 0 <= ts.nanos < 1_000_000_000:
            raise ValueError("nanos outside 0..999999999")
        return _dt.datetime.fromtimestamp(ts.seconds, tz=_dt.UTC) + _dt.timedelta(
            microseconds=ts.nanos // 1000
        )
    except (OverflowError, OSError, ValueError) as exc:
        raise FormatError(
            f"manifest timestamp {ts.seconds}s {ts.nanos}ns is out of range ({exc})"
        ) from None


def _writer(manifest: table_pb2.Manifest) -> str:
    if not manifest.HasField("writer_version"):
        return ""
    w = manifest.writer_version
    version = w.version
    if w.HasField("prerelease") and w.prerelease:
        version += f"-{w.prerelease}"
    return f"{w.library} {version}".strip()


@attrs.frozen
class WriterVersion:
    """The library that wrote a manifest (``"lance"``, ``"txn_engine"``, ...) and its
    version (``prerelease`` / ``build_metadata`` None when absent)."""

    library: str
    version: str
    prerelease: str | None = None
    build_metadata: str | None = None

    def __str__(self) -> str:
        version = self.version + (f"-{self.prerelease}" if self.prerelease else "")
        return f"{self.library} {version}".strip()


@attrs.frozen
class DataStorageFormat:
    """The data file format of the table (``file_format`` ``"lance"``, ``version`` e.g.
    ``"2.2"``)."""

    file_format: str
    version: str


def _opt(pb: Any, name: str) -> Any:
    return getattr(pb, name) if pb.HasField(name) else None


@attrs.frozen
class Manifest:
    """One version's manifest as immutable values (what :attr:`Dataset.manifest` returns).

    Mirrors Lance's ``Manifest`` message: ``fields`` is the flattened schema (use
    :attr:`Dataset.schema` for a ``pyarrow.Schema``), ``fragments`` sorted by id,
    mappings as sorted ``(key, value)`` tuples (``dict(m.config)`` for a dict).
    ``max_fragment_id`` / ``index_section`` / ``transaction_section`` / ``branch`` are None
    when the manifest does not record them; ``timestamp`` is None when unset.
    """

    version: int
    fields: tuple[LanceField, ...]
    fragments: tuple[Fragment, ...]
    schema_metadata: tuple[tuple[str, bytes], ...] = attrs.field(converter=frozen_map)
    config: tuple[tuple[str, str], ...] = attrs.field(converter=frozen_map)
    table_metadata: tuple[tuple[str, str], ...] = attrs.field(converter=frozen_map)
    timestamp: _dt.datetime | None
    tag: str
    reader_feature_flags: int
    writer_feature_flags: int
    max_fragment_id: int | None
    next_row_id: int
    writer_version: WriterVersion | None
    data_format: DataStorageFormat | None
    base_paths: tuple[BasePath, ...]
    branch: str | None
    version_aux_data: int
    index_section: int | None
    transaction_file: str
    transaction_section: int | None

    @classmethod
    def from_proto(
        cls, pb: table_pb2.Manifest, *, fragments: tuple[Fragment, ...] | None = None
    ) -> Manifest:
        """Convert a ``Manifest`` protobuf (FormatError for an unrepresentable timestamp)."""
        wv = pb.writer_version if pb.HasField("writer_version") else None
        df = pb.data_format if pb.HasField("data_format") else None
        return cls(
            version=pb.version,
            fields=tuple(LanceField.from_proto(f) for f in pb.fields),
            fragments=fragments
            if fragments is not None
            else tuple(Fragment.from_proto(f) for f in pb.fragments),
            schema_metadata=dict(pb.schema_metadata),
            config=dict(pb.config),
            table_metadata=dict(pb.table_metadata),
            timestamp=_timestamp(pb),
            tag=pb.tag,
            reader_feature_flags=pb.reader_feature_flags,
            writer_feature_flags=pb.writer_feature_flags,
            max_fragment_id=_opt(pb, "max_fragment_id"),
            next_row_id=pb.next_row_id,
            writer_version=None
            if wv is None
            else WriterVersion(
                wv.library, wv.version, _opt(wv, "prerelease"), _opt(wv, "build_metadata")
            ),
            data_format=None if df is None else DataStorageFormat(df.file_format, df.version),
            base_paths=tuple(BasePath.from_proto(b) for b in pb.base_paths),
            branch=_opt(pb, "branch"),
            version_aux_data=pb.version_aux_data,
            index_section=_opt(pb, "index_section"),
            transaction_file=pb.transaction_file,
            transaction_section=_opt(pb, "transaction_section"),
        )


@attrs.frozen
class VersionInfo:
    """One main-line version as :meth:`Dataset.versions` reports it.

    ``operation``/``read_version``/``uuid`` are ``None`` when the version's transaction is
    missing or unreadable (very old datasets); ``transaction_error`` then says why.
    ``error`` is set (``"<ErrorClass>: <message>"``, the class from
    :mod:`txn_engine.errors`) when the version itself is damaged: its manifest cannot be
    read or decoded (then everything but ``version`` and ``manifest_name`` is empty), or a
    field such as the timestamp is out of range (then that field is ``None``).
    """

    version: int
    timestamp: _dt.datetime | None
    operation: str | None
    read_version: int | None
    writer: str
    uuid: str | None
    tag: str
    manifest_name: str
    transaction_error: str | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict of the record (timestamp as ISO 8601)."""
        return {
            "version": self.version,
            "timestamp": None if self.timestamp is None else self.timestamp.isoformat(),
            "operation": self.operation,
            "read_version": self.read_version,
            "writer": self.writer,
            "uuid": self.uuid,
            "tag": self.tag,
            "manifest": self.manifest_name,
            "transaction_error": self.transaction_error,
            "error": self.error,
        }


class Dataset:
    """A Lance dataset opened at one version (immutable snapshot).

    Create with :meth:`Dataset.open`. Raises from :mod:`txn_engine.errors`:
    DatasetNotFoundError, VersionNotFoundError, CorruptManifestError,
    UnsupportedFeatureError, MixedNamingSchemeError.
    """

    def __init__(self, storage: Storage, entry: VersionEntry, manifest_file: ManifestFile):
        self._storage = storage
        self._entry = entry
        self._file = manifest_file
        self._fragments: tuple[Fragment, ...] | None = None
        self._manifest: Manifest | None = None
        self._indices: tuple[IndexMetadata, ...] | None = None

    @classmethod
    def open(
        cls,
        uri: str | os.PathLike[str] | Storage,
        *,
        version: int | str | None = None,
        storage_options: Mapping[str, Any] | None = None,
        branch: str | None = None,
    ) -> Dataset:
        """Open the dataset at ``uri`` (path, ``file://``, ``memory://``, fsspec URI, or a
        ready :class:`~txn_engine.storage.Storage`) at ``version`` (default: latest; a
        string is a tag name, as in pylance). With ``branch``, ``version`` is a version of
        that branch (whose root is ``<uri>/tree/<branch>``; VersionNotFoundError when there
        is no such branch)."""
        storage = open_storage(uri, storage_options)
        if branch is not None:
            from txn_engine.format.refs import read_branch

            if isinstance(uri, Storage):
                raise InvalidOperationError("open a branch by its dataset URI, not a Storage")
            found = read_branch(storage, branch)
            storage = open_storage(f"{os.fspath(uri).rstrip('/')}/{found.path}", storage_options)
            if isinstance(version, str):
                raise InvalidOperationError("a branch version is a number, not a tag name")
        if isinstance(version, str):
            version = _tagged_version(storage, version)
        entry, manifest_file = read_manifest(storage, version)
        return cls(storage, entry, manifest_file)

    # ------------------------------------------------------------------ refs

    def tags(self) -> list[Tag]:
        """Every tag of the dataset (``_refs/tags/``), sorted by name."""
        from txn_engine.format.refs import list_tags

        return list_tags(self._storage)

    def tags_of(self, version: int | None = None) -> list[str]:
        """Names of the main-line tags pointing at ``version`` (default: this one)."""
        target = self.version if version is None else version
        return [t.name for t in self.tags() if t.branch is None and t.version == target]

    def branches(self) -> list[Branch]:
        """Every branch of the dataset (``_refs/branches/``), sorted by name; open one with
        ``Dataset.open(uri, branch=name)``, commit to one with ``txn_engine.open(uri,
        branch=name)``."""
        from txn_engine.format.refs import list_branches

        return list_branches(self._storage)

    # ------------------------------------------------------------------ identity

    @property
    def uri(self) -> str:
        """The dataset root as given to :meth:`open`."""
        return self._storage.uri

    @property
    def storage(self) -> Storage:
        """The storage the dataset is read from."""
        return self._storage

    @property
    def version(self) -> int:
        """The version this snapshot shows."""
        return self._entry.version

    @property
    def naming_scheme(self) -> NamingScheme:
        """V1 (``N.manifest``) or V2 (inverted 20-digit) manifest names."""
        return self._entry.scheme

    @property
    def manifest_path(self) -> str:
        """Path of this version's manifest file relative to the root."""
        return self._entry.path

    @property
    def manifest_file(self) -> ManifestFile:
        """The decoded manifest file (manifest, indices, inline transaction, size)."""
        return self._file

    @property
    def manifest(self) -> Manifest:
        """This version's manifest as an immutable :class:`Manifest` value."""
        if self._manifest is None:
            self._manifest = Manifest.from_proto(self._file.manifest, fragments=self.fragments)
        return self._manifest

    @property
    def manifest_pb(self) -> table_pb2.Manifest:
        """The raw ``Manifest`` protobuf of this version (do not mutate); for code that
        works on the wire format, e.g. the builder."""
        return self._file.manifest

    # ------------------------------------------------------------------ content

    @property
    def fragments(self) -> tuple[Fragment, ...]:
        """The fragments of this version, sorted by id, as attrs values."""
        if self._fragments is None:
            self._fragments = tuple(Fragment.from_proto(f) for f in self.manifest_pb.fragments)
        return self._fragments

    @property
    def indices(self) -> tuple[IndexMetadata, ...]:
        """This version's indices (segments, system indices too) as
        :class:`~txn_engine.IndexMetadata` values, in manifest order."""
        if self._indices is None:
            self._indices = tuple(IndexMetadata.from_proto(i) for i in self._file.indices)
        return self._indices

    @property
    def indices_pb(self) -> tuple[table_pb2.IndexMetadata, ...]:
        """The raw ``IndexMetadata`` protobufs of this version's index section (do not
        mutate)."""
        return self._file.indices

    def index_names(self) -> list[str]:
        """Names of the indices of this version, in manifest order (system indices too)."""
        return [i.name for i in self._file.indices]

    @property
    def schema(self) -> pa.Schema:
        """The table schema as a ``pyarrow.Schema`` (with schema metadata)."""
        from txn_engine.format.schema import fields_to_arrow

        return fields_to_arrow(
            list(self.manifest_pb.fields), dict(self.manifest_pb.schema_metadata)
        )

    @property
    def config(self) -> dict[str, str]:
        """The table config (``Manifest.config``)."""
        return dict(self.manifest_pb.config)

    @property
    def table_metadata(self) -> dict[str, str]:
        """Free-form table metadata (``Manifest.table_metadata``)."""
        return dict(self.manifest_pb.table_metadata)

    def fragment_row_counts(self) -> list[tuple[int, int, int]]:
        """``(fragment_id, physical_rows, deleted_rows)`` per fragment.

        Unknown counts (0 in old manifests, or any count in a manifest without
        ``writer_version``) are read from the data / deletion files, as Lance does.
        A deletion file (or recorded ``num_deleted_rows``) claiming more rows than the
        fragment has, or an offset at or past ``physical_rows``, raises
        CorruptDeletionFileError / LimitExceededError (pylance 14 fails scans of such a
        fragment and its ``count_rows`` goes negative or wraps), never a negative count.
        """
        # Like Lance: manifests without writer_version (Lance < 0.8.x) may carry wrong
        # physical_rows, so the count comes from the data file then (and when it is 0).
        trusted = self.manifest_pb.HasField("writer_version")
        out: list[tuple[int, int, int]] = []
        for frag in self.manifest_pb.fragments:
            physical = frag.physical_rows
            if (physical == 0 or not trusted) and len(frag.files):
                first = frag.files[0]
                if first.file_major_version == 0 and first.file_minor_version < 3:
                    physical = legacy_row_count(self._storage, first.path)
                elif physical == 0:
                    raise DataFileError(
                        f"{self.uri}: fragment {frag.id} records no physical_rows and its "
                        f"data files are Lance file format {first.file_major_version}."
                        f"{first.file_minor_version}, whose row count txn_engine cannot read"
                    )
            deleted = 0
            if frag.HasField("deletion_file"):
                deleted = frag.deletion_file.num_deleted_rows
                if deleted == 0:
                    dv = read_deletion_vector(
                        self._storage, frag.id, frag.deletion_file, physical_rows=physical
                    )
                    deleted = len(dv)
                elif deleted > physical:  # pylance 14 wraps below zero here
                    raise CorruptDeletionFileError(
                        f"{self.uri}: fragment {frag.id} records {deleted} deleted rows but "
                        f"has only {physical} physical rows"
                    )
            out.append((frag.id, physical, deleted))
        return out

    def count_rows(self) -> int:
        """Live rows: physical rows minus deleted rows, over all fragments."""
        return sum(physical - deleted for _, physical, deleted in self.fragment_row_counts())

    # ------------------------------------------------------------------ history

    def transaction(self, version: int | None = None) -> Transaction:
        """The :class:`~txn_engine.Transaction` that created ``version`` (default: this
        one), as attrs values.

        Inline copy first, then ``_transactions/``; TransactionNotFoundError if neither,
        UnknownOperationError for an operation this library does not know
        (:meth:`transaction_proto` still returns it then).
        """
        from txn_engine.codec import transaction_from_proto

        return transaction_from_proto(self.transaction_proto(version))

    def transaction_proto(self, version: int | None = None) -> transaction_pb2.Transaction:
        """The raw ``Transaction`` protobuf that created ``version`` (default: this one)."""
        if version is None or version == self.version:
            return read_transaction(self._storage, self._entry, self._file)
        return read_transaction(self._storage, version)

    def versions(self) -> list[VersionInfo]:
        """Every main-line version of the dataset, ascending (not only up to this one).

        A damaged version does not stop the listing: its record carries ``error``.
        """
        return version_history(self._storage, known=(self._entry, self._file))

    def latest_version(self) -> int:
        """The newest main-line version now in storage (may be newer than ``version``)."""
        return latest_version(self._storage).version

    def checkout(self, version: int | str | None = None) -> Dataset:
        """A snapshot of ``version`` (default: the latest; a string: a tag) of the same
        dataset."""
        if isinstance(version, str):
            version = _tagged_version(self._storage, version)
        entry, mf = read_manifest(self._storage, version)
        return Dataset(self._storage, entry, mf)

    def __repr__(self) -> str:
        from txn_engine.redact import redact_uri

        return f"Dataset(uri={redact_uri(self.uri)!r}, version={self.version})"


def version_history(
    storage: Storage, *, known: tuple[VersionEntry, ManifestFile] | None = None
) -> list[VersionInfo]:
    """Every main-line version in ``storage``, ascending, as :class:`VersionInfo` records.

    Works when some manifests (the latest included) are damaged: such a version's record
    carries ``error`` and the others are read as usual. ``known`` is an already decoded
    manifest to reuse. Raises only when the version listing itself fails.
    """
    out: list[VersionInfo] = []
    for entry in list_versions(storage):
        damage: str | None = None
        try:
            if known is not None and entry == known[0]:
                mf = known[1]
            else:
                mf = read_manifest_entry(storage, entry)
        except TxnEngineError as exc:
            out.append(_unreadable(entry, exc))
            continue
        m = mf.manifest
        try:
            timestamp = _timestamp(m)
        except FormatError as exc:
            timestamp, damage = None, f"{type(exc).__name__}: {exc}"
        op: str | None = None
        read_version: int | None = None
        uuid: str | None = None
        error: str | None = None
        try:
            txn = read_transaction(storage, entry, mf)
        except TxnEngineError as exc:
            error = str(exc)
        else:
            op = operation_kind_of(txn)
            read_version = txn.read_version
            uuid = txn.uuid
        out.append(
            VersionInfo(
                version=entry.version,
                timestamp=timestamp,
                operation=op,
                read_version=read_version,
                writer=_writer(m),
                uuid=uuid,
                tag=m.tag,
                manifest_name=entry.name,
                transaction_error=error,
                error=damage,
            )
        )
    return out


def _unreadable(entry: VersionEntry, exc: TxnEngineError) -> VersionInfo:
    return VersionInfo(
        version=entry.version,
        timestamp=None,
        operation=None,
        read_version=None,
        writer="",
        uuid=None,
        tag="",
        manifest_name=entry.name,
        error=f"{type(exc).__name__}: {exc}",
    )


def as_base(value: object) -> Dataset | ManifestFile | None:
    """What ``commit(base=...)`` takes: a :class:`Dataset`, a ManifestFile, None, or a
    pylance ``LanceDataset`` (opened with txn_engine at the same version). Anything else
    raises InvalidOperationError."""
    if value is None or isinstance(value, (Dataset, ManifestFile)):
        return value
    if is_pylance(value, "LanceDataset"):
        v: Any = value
        return Dataset.open(str(v.uri), version=int(v.version))
    raise InvalidOperationError(
        f"expected a txn_engine.Dataset or a pylance LanceDataset as base, got "
        f"{type(value).__module__}.{type(value).__qualname__}"
    )
