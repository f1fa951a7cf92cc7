"""A reference model of table contents, for checking writers against a dataset.

Every row carries an identity (its ``rid``, an int) and a value (an int). Two models fold
transactions independently of :mod:`txn_engine.builder`:

* :class:`IntentModel` folds what each writer *meant* (:data:`Effect`: rows added,
  removed, re-valued, the whole table replaced, a version restored, config edited) in
  version order. After every commit the dataset must hold exactly the rows the model
  says, so a lost deletion, a resurrected row or a row landing twice is caught.
* :class:`HistoryModel` folds the transactions *as landed* (the rebased forms read back
  from the dataset) with Lance's semantics (fragment ids from the high-water mark,
  cumulative deletion vectors, rewrites preserving rows) and compares every version's
  manifest with the fold: the committed table equals the serial fold of the committed
  transactions in version order.

Rows are located through a :class:`RowSource`: :class:`SyntheticRows` registers fragments
whose data files are never written (the engine never reads data files, so in-memory tests
need none); :class:`LanceFileRows` reads the ``rid``/``val`` columns of real data files with
pylance.
"""

from __future__ import annotations

import itertools
import operator
import os
import uuid as uuid_mod
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

import attrs
from pyroaring import BitMap

from txn_engine.codec import transaction_from_proto
from txn_engine.errors import TxnEngineError
from txn_engine.format.deletion import read_deletion_vector
from txn_engine.format.io import read_manifest, read_manifest_entry, read_transaction
from txn_engine.format.manifest_file import ManifestFile
from txn_engine.format.naming import VersionEntry, list_versions
from txn_engine.model import DataFile, DeletionFile, Fragment
from txn_engine.ops import (
    Append,
    Clone,
    CreateIndex,
    DataReplacement,
    Delete,
    Merge,
    Overwrite,
    Project,
    ReserveFragments,
    Restore,
    Rewrite,
    Update,
    UpdateBases,
    UpdateConfig,
    UpdateMap,
    UpdateMemWalState,
)
from txn_engine.storage.base import Storage
from txn_engine.transaction import Transaction

__all__ = [
    "AddRows",
    "Contents",
    "EditConfig",
    "Effect",
    "EffectError",
    "FragmentIndex",
    "HistoryModel",
    "IntentModel",
    "LanceFileRows",
    "NoRowChange",
    "RemoveRows",
    "ReplaceTable",
    "RestoreVersion",
    "Row",
    "RowSource",
    "SetValues",
    "StoredContents",
    "SyntheticRows",
    "apply_effect",
    "read_contents",
]

#: One row: ``(rid, value)``.
Row = tuple[int, int]


# ---- where rows live ----------------------------------------------------------------------


class RowSource(Protocol):
    """Knows the rows stored in a fragment's data files."""

    def rows(self, fragment: Fragment) -> Sequence[Row]:
        """``(rid, value)`` of every physical row of ``fragment``, in offset order
        (deleted rows included). Raise ``KeyError`` for a fragment it does not know."""
        ...


class SyntheticRows:
    """Fragments whose data files are never written: the rows of each file are kept here.

    Use :meth:`fragment` to make an (id 0, uncommitted) fragment holding ``rows``. The file
    name is unique, so after compaction or an update the new fragment's rows are known too.
    One instance per dataset under test.
    """

    def __init__(self, prefix: str = "syn") -> None:
        self._prefix = prefix
        self._files: dict[str, tuple[Row, ...]] = {}
        self._counter = itertools.count()

    def fragment(self, rows: Iterable[Row], *, fields: Sequence[int] = (0, 1)) -> Fragment:
        """A new fragment whose single (unwritten) data file holds ``rows``."""
        rows = tuple(rows)
        if not rows:
            raise ValueError("a fragment needs at least one row")
        name = f"{self._prefix}-{next(self._counter)}-{uuid_mod.uuid4().hex[:8]}.lance"
        self._files[name] = rows
        data_file = DataFile(name, tuple(fields), tuple(range(len(fields))), 2, 2, 1)
        return Fragment(0, (data_file,), len(rows))

    def register(self, path: str, rows: Iterable[Row]) -> None:
        """Declare the rows of a data file made elsewhere."""
        self._files[path] = tuple(rows)

    def rows(self, fragment: Fragment) -> Sequence[Row]:
        for data_file in fragment.files:
            found = self._files.get(data_file.path)
            if found is not None:
                return found
        raise KeyError(f"no rows registered for fragment {fragment.id} ({fragment.files})")


class LanceFileRows:
    """Rows of real Lance data files under ``{root}/data/``, read with pylance's file reader
    (local datasets only). ``rid_column`` and ``value_column`` name the columns (a missing
    value column reads as 0). Results are cached by file path (data files are immutable).
    """

    def __init__(
        self, root: str | os.PathLike[str], *, rid_column: str = "rid", value_column: str = "val"
    ) -> None:
        self._root = os.fspath(root)
        if self._root.startswith("file://"):
            self._root = self._root[len("file://") :]
        self._rid = rid_column
        self._val = value_column
        self._cache: dict[str, tuple[Row, ...]] = {}

    def rows(self, fragment: Fragment) -> Sequence[Row]:
        for data_file in fragment.files:
            cached = self._cache.get(data_file.path)
            if cached is not None:
                return cached
        import lance.file

        for data_file in fragment.files:
            path = os.path.join(self._root, "data", data_file.path)
            if not os.path.exists(path):
                continue
            table = lance.file.LanceFileReader(path).read_all().to_table()
            if self._rid not in table.column_names:
                continue
            rids = table.column(self._rid).to_pylist()
            vals = (
                table.column(self._val).to_pylist()
                if self._val in table.column_names
                else [0] * len(rids)
            )
            rows = tuple((int(r), int(v or 0)) for r, v in zip(rids, vals, strict=True))
            self._cache[data_file.path] = rows
            return rows
        raise KeyError(f"fragment {fragment.id}: no readable data file with a {self._rid} column")


# ---- contents -----------------------------------------------------------------------------


@attrs.frozen
class Contents:
    """What a table holds: rows (sorted, duplicates kept so they can be reported) and config."""

    rows: tuple[Row, ...] = ()
    config: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, rows: Iterable[Row], config: Mapping[str, str] | None = None) -> Contents:
        """Canonical contents from any iterable of rows and a config mapping."""
        return cls(tuple(sorted(rows)), tuple(sorted((config or {}).items())))

    @property
    def by_rid(self) -> dict[int, int]:
        """``rid -> value`` (the last one for a duplicated rid)."""
        return dict(self.rows)

    @property
    def config_dict(self) -> dict[str, str]:
        return dict(self.config)

    def duplicated_rids(self) -> list[int]:
        """Rids present more than once (must be empty)."""
        counts = Counter(r for r, _ in self.rows)
        return sorted(r for r, n in counts.items() if n > 1)

    def difference(self, actual: Contents, *, limit: int = 5) -> str | None:
        """A one-line description of how ``actual`` differs from these (expected) contents,
        or None when they are equal."""
        if self == actual:
            return None
        parts: list[str] = []
        dup = actual.duplicated_rids()
        if dup:
            parts.append(f"rids present twice: {dup[:limit]}")
        mine, theirs = self.by_rid, actual.by_rid
        lost = sorted(set(mine) - set(theirs))
        extra = sorted(set(theirs) - set(mine))
        changed = sorted(r for r in set(mine) & set(theirs) if mine[r] != theirs[r])
        if lost:
            parts.append(f"{len(lost)} rows lost (rids {lost[:limit]})")
        if extra:
            parts.append(f"{len(extra)} unexpected rows (rids {extra[:limit]})")
        if changed:
            parts.append(
                f"{len(changed)} rows with other values ("
                + ", ".join(f"rid {r}: {mine[r]} != {theirs[r]}" for r in changed[:limit])
                + ")"
            )
        if self.config != actual.config:
            parts.append(f"config {self.config_dict} != {actual.config_dict}")
        return "; ".join(parts) or "contents differ"


def _deleted(storage: Storage, fragment: Fragment) -> BitMap:
    if fragment.deletion_file is None:
        return BitMap()
    return read_deletion_vector(storage, fragment.id, fragment.deletion_file.to_proto())


def read_contents(storage: Storage, source: RowSource, version: int | None = None) -> Contents:
    """The rows and config of ``version`` (latest by default) as stored: every fragment's
    rows from ``source`` minus its deletion vector."""
    _, mf = read_manifest(storage, version)
    return _contents_from_pb(storage, source, mf.manifest)


class _FragmentReader:
    """Rows and deletion vectors of fragments, each deletion file read once: deletion files
    are immutable (a new deletion writes a new file), so a history check reads each of them
    once however many versions keep it."""

    def __init__(self, storage: Storage, source: RowSource) -> None:
        self.storage = storage
        self.source = source
        self._deleted: dict[tuple[int, DeletionFile], frozenset[int]] = {}
        self.deletion_reads = 0

    def deleted(self, fragment: Fragment) -> frozenset[int]:
        if fragment.deletion_file is None:
            return frozenset()
        key = (fragment.id, fragment.deletion_file)
        found = self._deleted.get(key)
        if found is None:
            found = frozenset(_deleted(self.storage, fragment))
            self.deletion_reads += 1
            self._deleted[key] = found
        return found

    def live(self, fragment: Fragment) -> tuple[Row, ...]:
        deleted = self.deleted(fragment)
        rows = self.source.rows(fragment)
        if not deleted:
            return tuple(rows)
        return tuple(row for offset, row in enumerate(rows) if offset not in deleted)


_ENCODE = operator.methodcaller("SerializeToString", deterministic=True)
_ID = operator.attrgetter("id")


class FragmentIndex:
    """A manifest's fragments by id and their encoded bytes, to tell what changed between
    two versions without decoding a fragment into Python values (built with C-level loops:
    a version costs little per fragment it keeps unchanged). Build it once per manifest and
    give it to each checker."""

    __slots__ = ("by_id", "keys")

    def __init__(self, manifest: Any) -> None:
        fragments = list(manifest.fragments)
        ids = list(map(_ID, fragments))
        self.by_id: dict[int, Any] = dict(zip(ids, fragments, strict=True))
        self.keys: dict[int, bytes] = dict(zip(ids, map(_ENCODE, fragments), strict=True))

    def changes(self, previous: Mapping[int, bytes]) -> tuple[list[int], list[int]]:
        """``(ids new or changed, ids gone or changed)`` since the ``previous`` keys."""
        new = self.keys.items() - previous.items()
        old = previous.items() - self.keys.items()
        return [fid for fid, _ in new], [fid for fid, _ in old]


class StoredContents:
    """The stored contents of one version after another, kept up to date from what changed
    between consecutive manifests: a fragment whose encoding did not change costs a bytes
    comparison, only new or changed fragments have their rows and deletion vector read
    (each deletion file once). Checking every version of a history this way takes time
    linear in the history, where reading each version's contents whole is quadratic.

    Call :meth:`advance` with each manifest in version order (versions may be skipped).
    """

    def __init__(self, storage: Storage, source: RowSource) -> None:
        self._reader = _FragmentReader(storage, source)
        self._keys: dict[int, bytes] = {}
        self._live: dict[int, tuple[Row, ...]] = {}
        #: ``rid -> values`` of the stored rows (a rid stored twice has two values)
        self.values: dict[int, list[int]] = {}
        self.config: dict[str, str] = {}

    @property
    def deletion_reads(self) -> int:
        """Deletion files read so far."""
        return self._reader.deletion_reads

    def advance(self, manifest: Any, index: FragmentIndex | None = None) -> set[int]:
        """Move to ``manifest`` (a ``Manifest`` protobuf; ``index``: its
        :class:`FragmentIndex` if built already); returns the rids whose stored rows
        changed. Raises ``KeyError`` (rows unknown to the source) or TxnEngineError (a
        deletion file unreadable) and then stays at the previous manifest."""
        index = FragmentIndex(manifest) if index is None else index
        new, old = index.changes(self._keys)
        added = {fid: self._reader.live(Fragment.from_proto(index.by_id[fid])) for fid in new}
        changed: set[int] = set()
        for fid in old:
            for rid, value in self._live.pop(fid):
                values = self.values[rid]
                values.remove(value)
                if not values:
                    del self.values[rid]
                changed.add(rid)
        for fid, rows in added.items():
            self._live[fid] = rows
            for rid, value in rows:
                self.values.setdefault(rid, []).append(value)
                changed.add(rid)
        self._keys = index.keys
        self.config = dict(manifest.config)
        return changed

    def contents(self) -> Contents:
        """The current version's contents."""
        return Contents.of(
            ((rid, v) for rid, values in self.values.items() for v in values), self.config
        )


K = TypeVar("K")
V = TypeVar("V")
_ABSENT: Any = object()


class _Versioned(Generic[K, V]):
    """A dict folded version after version that can still tell any earlier folded version:
    each version records the previous values of the keys it changed (an undo log). A fold
    step costs what it changes; recalling version ``u`` costs the changes since ``u``."""

    def __init__(self) -> None:
        self.current: dict[K, V] = {}
        self._undo: dict[int, dict[K, Any]] = {}
        self.pending: dict[K, Any] = {}

    def set(self, key: K, value: V) -> None:
        if key not in self.pending:
            self.pending[key] = self.current.get(key, _ABSENT)
        self.current[key] = value

    def pop(self, key: K) -> V | None:
        if key not in self.current:
            return None
        if key not in self.pending:
            self.pending[key] = self.current[key]
        return self.current.pop(key)

    def replace(self, new: Mapping[K, V]) -> None:
        for key in [k for k in self.current if k not in new]:
            self.pop(key)
        for key, value in new.items():
            if self.current.get(key, _ABSENT) is not value:
                self.set(key, value)

    def commit(self, version: int) -> None:
        self._undo[version] = self.pending
        self.pending = {}

    def rollback(self) -> None:
        for key, old in self.pending.items():
            if old is _ABSENT:
                self.current.pop(key, None)
            else:
                self.current[key] = old
        self.pending = {}

    def at(self, version: int) -> dict[K, V]:
        """The dict as committed at ``version`` (KeyError: never committed)."""
        if version not in self._undo:
            raise KeyError(version)
        state = dict(self.current)
        for later in sorted((u for u in self._undo if u > version), reverse=True):
            for key, old in self._undo[later].items():
                if old is _ABSENT:
                    state.pop(key, None)
                else:
                    state[key] = old
        return state


# ---- writer intent ------------------------------------------------------------------------


def _rows(value: Iterable[Row]) -> tuple[Row, ...]:
    return tuple((int(r), int(v)) for r, v in value)


def _rids(value: Iterable[int]) -> tuple[int, ...]:
    return tuple(int(r) for r in value)


def _pairs(value: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    return tuple(value)


def _edits(value: Iterable[tuple[str, str | None]]) -> tuple[tuple[str, str | None], ...]:
    return tuple(value)


@attrs.frozen
class AddRows:
    """New rows (their rids must not exist yet)."""

    rows: tuple[Row, ...] = attrs.field(converter=_rows)


@attrs.frozen
class RemoveRows:
    """Delete rows by rid (they must all be live: deleting a row twice is a bug)."""

    rids: tuple[int, ...] = attrs.field(converter=_rids)


@attrs.frozen
class SetValues:
    """Give existing rows new values (an update)."""

    rows: tuple[Row, ...] = attrs.field(converter=_rows)


@attrs.frozen
class ReplaceTable:
    """Overwrite: the table becomes ``rows``; ``config_upserts`` are merged into the config."""

    rows: tuple[Row, ...] = attrs.field(converter=_rows)
    config_upserts: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_pairs)


@attrs.frozen
class RestoreVersion:
    """The table (rows and config) becomes what it was at ``version``."""

    version: int


@attrs.frozen
class EditConfig:
    """Config upserts (``value``) and deletes (``None``)."""

    entries: tuple[tuple[str, str | None], ...] = attrs.field(converter=_edits)


@attrs.frozen
class NoRowChange:
    """Compaction, index creation, reservations...: rows and config stay as they are."""

    what: str = ""


Effect = AddRows | RemoveRows | SetValues | ReplaceTable | RestoreVersion | EditConfig | NoRowChange


class EffectError(AssertionError):
    """An effect does not fit the contents it is applied to (e.g. a row deleted twice)."""


def apply_effect(
    contents: Contents,
    effect: Effect,
    history: Mapping[int, Contents] | None = None,
    *,
    merge_deletes: bool = False,
) -> Contents:
    """The contents after ``effect``. ``history`` (version -> contents) serves
    :class:`RestoreVersion`. Raises :class:`EffectError` when a precondition fails.

    ``merge_deletes``: a :class:`RemoveRows` may name rows already gone (a Delete that
    landed beside an overlapping Delete, as txn_engine's default ``rebase_rows`` resolves:
    serially, its predicate no longer matches the rows the other removed). Without it,
    such a delete is an error, as in pylance 14, which refuses the second Delete."""
    rows = contents.by_rid
    config = contents.config_dict
    if isinstance(effect, AddRows):
        clash = sorted(r for r, _ in effect.rows if r in rows)
        if clash:
            raise EffectError(f"appended rids already present: {clash[:5]}")
        rows.update(effect.rows)
    elif isinstance(effect, RemoveRows):
        missing = sorted(r for r in effect.rids if r not in rows)
        if missing and not merge_deletes:
            raise EffectError(f"deleted rids that are not live (deleted twice?): {missing[:5]}")
        for r in effect.rids:
            rows.pop(r, None)
    elif isinstance(effect, SetValues):
        missing = sorted(r for r, _ in effect.rows if r not in rows)
        if missing:
            raise EffectError(f"updated rids that are not live: {missing[:5]}")
        rows.update(effect.rows)
    elif isinstance(effect, ReplaceTable):
        rows = dict(effect.rows)
        config.update(effect.config_upserts)
    elif isinstance(effect, RestoreVersion):
        if history is None or effect.version not in history:
            raise EffectError(f"restore of version {effect.version}: contents unknown")
        return history[effect.version]
    elif isinstance(effect, EditConfig):
        config = UpdateMap(effect.entries).apply(config)
    elif isinstance(effect, NoRowChange):
        return contents
    else:  # pragma: no cover - exhaustive
        raise TypeError(f"unknown effect {effect!r}")
    return Contents.of(rows.items(), config)


class IntentModel:
    """Expected contents per version: the fold, in version order, of the effects of the
    transactions that landed.

    Create it with the contents of the first version, then call :meth:`land` for each
    following version (in order) with the effect its writer intended. ``merge_deletes``
    as in :func:`apply_effect`: True for writers committing with txn_engine's default
    conflict options, False for pylance 14's rules.
    """

    def __init__(
        self, first_version: int, contents: Contents, *, merge_deletes: bool = False
    ) -> None:
        self.history: dict[int, Contents] = {first_version: contents}
        self.latest = first_version
        self.merge_deletes = merge_deletes

    def land(self, version: int, effect: Effect) -> Contents:
        """Fold ``effect`` as version ``version`` (must be ``latest + 1``)."""
        if version != self.latest + 1:
            raise EffectError(f"version {version} landed after {self.latest}")
        contents = apply_effect(
            self.history[self.latest], effect, self.history, merge_deletes=self.merge_deletes
        )
        self.history[version] = contents
        self.latest = version
        return contents

    def contents(self, version: int | None = None) -> Contents:
        return self.history[self.latest if version is None else version]


# ---- the landed history -------------------------------------------------------------------


@attrs.frozen
class _Frag:
    fragment: Fragment
    rows: tuple[Row, ...]
    deleted: frozenset[int]

    def live(self) -> list[Row]:
        return [row for offset, row in enumerate(self.rows) if offset not in self.deleted]


class HistoryModel:
    """Folds a dataset's landed transactions in version order, with Lance's semantics, and
    compares each version's manifest with the fold.

    Call :meth:`advance` whenever new versions may exist; it returns findings (strings;
    empty when everything agrees). Checked per version: the rows and config equal the fold;
    fragment ids are the ones Lance assigns (high-water mark + 1, ...); a Delete/Update
    keeps every offset the fragment's previous deletion vector had (no deletion lost) and
    leaves its data files alone; a Rewrite's new fragments hold exactly the live rows of
    the old ones.

    Time is linear in the history: a version costs what its transaction changed plus a
    bytes comparison of each fragment with the previous manifest's; each manifest is read
    once and each deletion file once (the fold keeps an undo log, so a Restore can recall
    any folded version).
    """

    #: findings spelled out in full (both tables listed); later ones name the fragments
    DETAILED_FINDINGS = 20

    def __init__(self, storage: Storage, source: RowSource) -> None:
        self.storage = storage
        self.source = source
        self._reader = _FragmentReader(storage, source)
        self._fragments: _Versioned[int, _Frag] = _Versioned()
        self._configs: dict[int, Mapping[str, str]] = {}
        self._highs: dict[int, int | None] = {}
        self._folded: int | None = None  # the version the fold is at
        self._manifest_keys: dict[int, bytes] = {}  # of the last manifest compared
        self._manifest_frags: dict[int, Fragment] = {}
        self._differ: set[int] = set()  # fragment ids where the fold and the manifest differ
        self._detailed = 0
        self.latest = 0

    @property
    def deletion_reads(self) -> int:
        """Deletion files read so far (each at most once)."""
        return self._reader.deletion_reads

    def advance(self, progress: Callable[[int, int], None] | None = None) -> list[str]:
        """Fold every version newer than the last one folded; return the findings.
        ``progress(done, total)`` is called after each version."""
        findings: list[str] = []
        entries = [e for e in list_versions(self.storage) if e.version > self.latest]
        for done, entry in enumerate(entries, 1):
            findings += self.fold(entry)
            if progress is not None:
                progress(done, len(entries))
        return findings

    def fold(
        self,
        entry: VersionEntry,
        manifest_file: ManifestFile | None = None,
        index: FragmentIndex | None = None,
    ) -> list[str]:
        """Fold one version newer than the last one folded (:meth:`advance` calls it for
        each); ``manifest_file`` / ``index``: the version's, when the caller read it
        already. Returns the findings."""
        v = entry.version
        try:
            mf = (
                read_manifest_entry(self.storage, entry) if manifest_file is None else manifest_file
            )
            txn = transaction_from_proto(read_transaction(self.storage, entry, mf))
        except TxnEngineError as exc:
            self.latest = v
            return [f"v{v}: unreadable: {exc}"]
        try:
            problems = self._apply(self._folded == v - 1, txn, v)
        except (KeyError, EffectError, TxnEngineError) as exc:
            self._fragments.rollback()
            self.latest = v
            return [f"v{v} ({txn.kind}): cannot fold: {exc}"]
        findings = [f"v{v} ({txn.kind}): {p}" for p in problems]
        folded_changes = set(self._fragments.pending)
        self._fragments.commit(v)
        self._folded = self.latest = v
        try:
            findings += self._compare(v, txn.kind, mf.manifest, folded_changes, index)
        except (KeyError, TxnEngineError) as exc:
            findings.append(f"v{v} ({txn.kind}): cannot read the stored rows: {exc}")
        return findings

    def contents(self, version: int | None = None) -> Contents:
        """The folded contents of ``version`` (latest folded by default)."""
        version = self._folded if version is None else version
        if version is None:
            raise KeyError("nothing folded yet")
        config = self._configs[version]
        fragments = (
            self._fragments.current if version == self._folded else self._fragments.at(version)
        )
        return Contents.of((row for f in fragments.values() for row in f.live()), config)

    # ---- comparing ----------------------------------------------------------------------

    def _compare(
        self, v: int, kind: str, manifest: Any, folded: set[int], index: FragmentIndex | None
    ) -> list[str]:
        """Compare the fragments the fold or the manifest changed (and those that differed
        before); spell the whole difference out only when there is one."""
        index = FragmentIndex(manifest) if index is None else index
        changed, gone = index.changes(self._manifest_keys)
        for fid in gone:
            del self._manifest_frags[fid]
        for fid in changed:
            self._manifest_frags[fid] = Fragment.from_proto(index.by_id[fid])
        self._manifest_keys = index.keys
        fold = self._fragments.current
        for fid in {*folded, *changed, *gone, *self._differ}:
            mine, theirs = fold.get(fid), self._manifest_frags.get(fid)
            same = (mine is None and theirs is None) or (
                mine is not None
                and theirs is not None
                and tuple(self.source.rows(theirs)) == mine.rows
                and self._reader.deleted(theirs) == mine.deleted
            )
            if same:
                self._differ.discard(fid)
            else:
                self._differ.add(fid)
        config = self._configs[v]
        if not self._differ and dict(manifest.config) == config:
            return []
        self._detailed += 1
        if self._detailed > self.DETAILED_FINDINGS:
            return [
                f"v{v} ({kind}): table differs from the serial fold (fragments "
                f"{sorted(self._differ)[:10]}, or the config)"
            ]
        out: list[str] = []
        expected_ids = {fid: f.rows for fid, f in fold.items()}
        actual_ids = {
            fid: tuple(self.source.rows(frag)) for fid, frag in self._manifest_frags.items()
        }
        if expected_ids != actual_ids:
            out.append(
                f"v{v} ({kind}): fragment ids {sorted(actual_ids)} but the fold has "
                f"{sorted(expected_ids)} (or their rows differ)"
            )
        actual = Contents.of(
            (row for frag in self._manifest_frags.values() for row in self._reader.live(frag)),
            dict(manifest.config),
        )
        folded_contents = Contents.of((row for f in fold.values() for row in f.live()), config)
        diff = folded_contents.difference(actual)
        if diff is not None:
            out.append(f"v{v} ({kind}): table differs from the serial fold: {diff}")
        return out

    # ---- folding ----------------------------------------------------------------------

    def _assign(
        self, frags: Iterable[Fragment], high: int | None
    ) -> tuple[list[_Frag], int | None]:
        out: list[_Frag] = []
        for frag in frags:
            if frag.id == 0:
                high = 0 if high is None else high + 1
                frag = frag.with_id(high)
            else:
                high = frag.id if high is None else max(high, frag.id)
            deleted = self._reader.deleted(frag)
            out.append(_Frag(frag, tuple(self.source.rows(frag)), deleted))
        return out, high

    def _updated(self, updated: Iterable[Fragment], problems: list[str]) -> None:
        fragments = self._fragments
        for frag in updated:
            old = fragments.current.get(frag.id)
            if old is None:
                problems.append(f"updated fragment {frag.id} does not exist")
                continue
            if frag.files != old.fragment.files:
                problems.append(f"fragment {frag.id}: data files changed by a row mutation")
            deleted = self._reader.deleted(frag)
            lost = old.deleted - deleted
            if lost:
                problems.append(
                    f"fragment {frag.id}: deletion lost (offsets {sorted(lost)[:5]} deleted "
                    "before are live again)"
                )
            if deleted and max(deleted) >= frag.physical_rows:
                problems.append(f"fragment {frag.id}: deleted offset beyond physical_rows")
            fragments.set(frag.id, _Frag(frag, old.rows, deleted))

    def _apply(self, chained: bool, txn: Transaction, version: int) -> list[str]:
        """Fold ``txn`` as ``version`` into the (pending) fragments; records its config and
        high-water mark. ``chained``: the fold is at ``version - 1``."""
        op = txn.operation
        problems: list[str] = []
        fragments = self._fragments
        config: Mapping[str, str]
        if not chained:
            if not isinstance(op, Overwrite):
                raise EffectError(f"version {version} has no folded predecessor")
            fragments.replace({})
            config, high = {}, None
        else:
            assert self._folded is not None
            config, high = self._configs[self._folded], self._highs[self._folded]
        if isinstance(op, Overwrite):
            news, high = self._assign(op.fragments, high)
            fragments.replace({f.fragment.id: f for f in news})
            config = {**config, **dict(op.config_upserts)}
        elif isinstance(op, Append):
            high = self._add(op.fragments, high)
        elif isinstance(op, (Delete, Update)):
            high = self._fold_row_change(op, high, problems)
        elif isinstance(op, Rewrite):
            high = self._fold_rewrite(op, high, problems)
        elif isinstance(op, Restore):
            config, high = self._fold_restore(op, high)
        elif isinstance(op, UpdateConfig):
            if op.config_updates is not None:
                config = op.config_updates.apply(config)
        elif isinstance(op, ReserveFragments):
            high = (high or 0) + op.num_fragments
        elif isinstance(op, Merge):
            merged: dict[int, _Frag] = {}
            for given in op.fragments:
                known = fragments.current.get(given.id)
                rows = known.rows if known is not None else tuple(self.source.rows(given))
                merged[given.id] = _Frag(given, rows, self._reader.deleted(given))
            fragments.replace(merged)
        elif isinstance(op, DataReplacement):
            for replacement in op.replacements:
                if replacement.fragment_id not in fragments.current:
                    problems.append(f"replaced fragment {replacement.fragment_id} does not exist")
        elif isinstance(op, Clone):
            raise EffectError("Clone is not modelled")
        elif isinstance(op, (CreateIndex, Project, UpdateBases, UpdateMemWalState)):
            pass
        else:  # pragma: no cover - exhaustive
            raise EffectError(f"unknown operation {txn.kind}")
        if fragments.current:
            top = max(fragments.current)
            high = top if high is None else max(high, top)
        self._configs[version] = config
        self._highs[version] = high
        return problems

    def _add(self, frags: Iterable[Fragment], high: int | None) -> int | None:
        """Add new fragments (ids assigned above ``high`` where they have none); returns the
        new high-water mark."""
        news, high = self._assign(frags, high)
        for f in news:
            self._fragments.set(f.fragment.id, f)
        return high

    def _fold_row_change(
        self, op: Delete | Update, high: int | None, problems: list[str]
    ) -> int | None:
        """Fold a Delete or an Update: fragments removed, updated, added (an Update's new
        rows); returns the new high-water mark."""
        fragments = self._fragments
        removed = op.deleted_fragment_ids if isinstance(op, Delete) else op.removed_fragment_ids
        for fid in removed:
            if fragments.pop(fid) is None:
                problems.append(f"removed fragment {fid} does not exist")
        self._updated(op.updated_fragments, problems)
        if isinstance(op, Update):
            high = self._add(op.new_fragments, high)
        return high

    def _fold_rewrite(self, op: Rewrite, high: int | None, problems: list[str]) -> int | None:
        """Fold a Rewrite: each group's new fragments replace its old ones and must hold the
        same live rows; returns the new high-water mark."""
        fragments = self._fragments
        for group in op.groups:
            old_rows: list[Row] = []
            for old in group.old_fragments:
                frag = fragments.pop(old.id)
                if frag is None:
                    problems.append(f"rewritten fragment {old.id} does not exist")
                    continue
                old_rows += frag.live()
            news, high = self._assign(group.new_fragments, high)
            new_rows = [row for f in news for row in f.live()]
            if sorted(new_rows) != sorted(old_rows):
                problems.append(
                    f"rewrite of fragments {[f.id for f in group.old_fragments]} does not "
                    "preserve their live rows"
                )
            for f in news:
                fragments.set(f.fragment.id, f)
        return high

    def _fold_restore(self, op: Restore, high: int | None) -> tuple[Mapping[str, str], int | None]:
        """Fold a Restore: the fragments of the restored (folded) version come back;
        returns its config and the high-water mark, never lowered."""
        try:
            restored = self._fragments.at(op.version)
        except KeyError:
            raise EffectError(f"restore of version {op.version}, which was not folded") from None
        self._fragments.replace(restored)
        source_high = self._highs[op.version]
        if source_high is not None:
            high = source_high if high is None else max(high, source_high)
        return self._configs[op.version], high


def _contents_from_pb(storage: Storage, source: RowSource, manifest: Any) -> Contents:
    rows: list[Row] = []
    for pb in manifest.fragments:
        frag = Fragment.from_proto(pb)
        deleted = _deleted(storage, frag)
        rows.extend(row for offset, row in enumerate(source.rows(frag)) if offset not in deleted)
    return Contents.of(rows, dict(manifest.config))
