"""Writer journals: what real writer processes meant, checked against what landed.

A writer process appends to its own JSON-lines journal *before* each commit (the
transaction uuid, the intended :data:`~txn_engine.testing.model.Effect` and the rows of every
data file it wrote) and after it (acknowledged at version N, or rejected). Appends are
flushed line by line, so a writer killed with SIGKILL loses at most its in-flight commit's
acknowledgement, never an intent: its last commit may or may not have landed, and the
check below handles both.

:func:`check_history` then walks the dataset's versions in order and folds each landed
transaction's intent (:class:`~txn_engine.testing.model.IntentModel` semantics): every
version must hold exactly the rows the fold says, every acknowledged uuid must be in the
history once at its acknowledged version, and no rejected uuid may be there. Versions made
by writers without a journal (e.g. pylance) are allowed through ``foreign``: they may only
change rows whose rid ``foreign`` accepts.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import attrs

from txn_engine.contention.offers import carried_in_order
from txn_engine.errors import TxnEngineError
from txn_engine.format.io import read_manifest_entry, read_transaction
from txn_engine.format.manifest_file import ManifestFile
from txn_engine.format.naming import VersionEntry, list_versions
from txn_engine.model import Fragment
from txn_engine.ops import UpdateMap
from txn_engine.storage.base import Storage
from txn_engine.testing.model import (
    AddRows,
    Contents,
    EditConfig,
    Effect,
    EffectError,
    FragmentIndex,
    HistoryModel,
    NoRowChange,
    RemoveRows,
    ReplaceTable,
    RestoreVersion,
    Row,
    RowSource,
    SetValues,
    StoredContents,
    SyntheticRows,
    _Versioned,
)

__all__ = [
    "ChainedRows",
    "HistoryCheck",
    "Journal",
    "JournalSummary",
    "check_history",
    "effect_from_json",
    "effect_to_json",
    "read_journals",
]


# ---- effects as JSON ----------------------------------------------------------------------


def effect_to_json(effect: Effect) -> dict[str, Any]:
    """A JSON-serializable form of ``effect`` (inverse: :func:`effect_from_json`)."""
    if isinstance(effect, AddRows):
        return {"kind": "add", "rows": [list(r) for r in effect.rows]}
    if isinstance(effect, RemoveRows):
        return {"kind": "remove", "rids": list(effect.rids)}
    if isinstance(effect, SetValues):
        return {"kind": "set", "rows": [list(r) for r in effect.rows]}
    if isinstance(effect, ReplaceTable):
        return {
            "kind": "replace",
            "rows": [list(r) for r in effect.rows],
            "config": [list(kv) for kv in effect.config_upserts],
        }
    if isinstance(effect, RestoreVersion):
        return {"kind": "restore", "version": effect.version}
    if isinstance(effect, EditConfig):
        return {"kind": "config", "entries": [list(kv) for kv in effect.entries]}
    return {"kind": "none", "what": effect.what}


def effect_from_json(data: Mapping[str, Any]) -> Effect:
    """Parse :func:`effect_to_json` output."""
    kind = data["kind"]
    if kind == "add":
        return AddRows((int(r), int(v)) for r, v in data["rows"])
    if kind == "remove":
        return RemoveRows(int(r) for r in data["rids"])
    if kind == "set":
        return SetValues((int(r), int(v)) for r, v in data["rows"])
    if kind == "replace":
        return ReplaceTable(
            ((int(r), int(v)) for r, v in data["rows"]),
            tuple((str(k), str(v)) for k, v in data.get("config", ())),
        )
    if kind == "restore":
        return RestoreVersion(int(data["version"]))
    if kind == "config":
        return EditConfig(
            tuple((str(k), None if v is None else str(v)) for k, v in data["entries"])
        )
    if kind == "none":
        return NoRowChange(str(data.get("what", "")))
    raise ValueError(f"unknown effect kind {kind!r}")


# ---- writing ------------------------------------------------------------------------------


class Journal:
    """One writer's journal file (JSON lines, appended and flushed per record)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._file: IO[str] = open(self.path, "a", encoding="utf-8")  # noqa: SIM115

    def _write(self, record: Mapping[str, Any]) -> None:
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._file.flush()

    def intent(
        self, uuid: str, effect: Effect, files: Mapping[str, Sequence[Row]] | None = None
    ) -> None:
        """Before committing ``uuid``: what it will do, and the rows of the data files it
        wrote (path relative to ``data/`` -> rows in offset order)."""
        self._write(
            {
                "t": "intent",
                "uuid": uuid,
                "effect": effect_to_json(effect),
                "files": {p: [list(r) for r in rows] for p, rows in (files or {}).items()},
            }
        )

    def ack(self, uuid: str, version: int) -> None:
        """The commit of ``uuid`` was acknowledged at ``version``."""
        self._write({"t": "ack", "uuid": uuid, "version": version})

    def rejected(self, uuid: str, why: str) -> None:
        """``uuid`` definitely did not land (conflict, or failure before the manifest)."""
        self._write({"t": "rejected", "uuid": uuid, "why": why})

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---- reading and checking -----------------------------------------------------------------


@attrs.frozen
class JournalSummary:
    """Every journal of a run, merged."""

    intents: Mapping[str, Effect]
    acked: Mapping[str, int]
    rejected: Mapping[str, str]
    rows: SyntheticRows
    duplicate_acks: tuple[str, ...] = ()


def read_journals(paths: Iterable[str | os.PathLike[str]]) -> JournalSummary:
    """Merge journals. A torn last line (the writer died mid-write) is ignored."""
    intents: dict[str, Effect] = {}
    acked: dict[str, int] = {}
    rejected: dict[str, str] = {}
    duplicates: list[str] = []
    rows = SyntheticRows()
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # only possible for the last line of a killed writer
                uuid = record["uuid"]
                if record["t"] == "intent":
                    intents[uuid] = effect_from_json(record["effect"])
                    for p, file_rows in record["files"].items():
                        rows.register(p, ((int(r), int(v)) for r, v in file_rows))
                elif record["t"] == "ack":
                    if uuid in acked:
                        duplicates.append(uuid)
                    acked[uuid] = int(record["version"])
                elif record["t"] == "rejected":
                    rejected[uuid] = str(record["why"])
    return JournalSummary(intents, acked, rejected, rows, tuple(duplicates))


class ChainedRows:
    """Ask each row source in turn (e.g. journal-registered files, then files on disk)."""

    def __init__(self, *sources: RowSource) -> None:
        self.sources = sources

    def rows(self, fragment: Fragment) -> Sequence[Row]:
        for source in self.sources:
            try:
                return source.rows(fragment)
            except KeyError:
                continue
        raise KeyError(f"no source knows the rows of fragment {fragment.id} ({fragment.files})")


@attrs.frozen
class HistoryCheck:
    """Result of :func:`check_history`. ``ok`` when there are no findings."""

    findings: tuple[str, ...]
    versions: int
    expected: Contents | None
    landed_unacknowledged: int
    foreign_versions: int

    @property
    def ok(self) -> bool:
        return not self.findings


def check_history(
    storage: Storage,
    journal: JournalSummary,
    *,
    first_version: int = 1,
    first_contents: Contents,
    fallback_rows: RowSource | None = None,
    foreign: Callable[[int], bool] | None = None,
    max_findings: int = 20,
    progress: Callable[[int, int], None] | None = None,
    merge_deletes: bool = True,
) -> HistoryCheck:
    """Fold the journal intents over the landed history from ``first_version`` (whose
    contents are ``first_contents``) and compare every version (see module docstring).
    From version 1, the landed transactions themselves are folded too
    (:class:`~txn_engine.testing.model.HistoryModel`).

    Time is linear in the history: each manifest is read once per fold, each deletion file
    once, and a version costs what its transaction and its manifest changed (the stored
    contents are kept up to date from each manifest's changed fragments,
    :class:`~txn_engine.testing.model.StoredContents`; the expected contents from each
    intent); both folds take each version in one pass. ``progress(done, total)`` is called
    after each version (total: the versions to check). ``merge_deletes`` as in
    :func:`~txn_engine.testing.model.apply_effect` (True: the writers committed with
    txn_engine's default conflict options, under which overlapping deletes both land)."""
    source = journal.rows if fallback_rows is None else ChainedRows(journal.rows, fallback_rows)
    entries = [e for e in list_versions(storage) if e.version >= first_version]
    walk = _HistoryWalk(storage, journal, first_version, first_contents, source, merge_deletes)
    for done, entry in enumerate(entries, 1):
        if len(walk.fold.findings) + len(walk.landed_findings) >= max_findings:
            break
        read = walk.read(entry)
        if read is None:
            continue
        if progress is not None:
            progress(done, len(entries))
        walk.compare(entry, *read, foreign=foreign)
    return walk.result(len(entries), max_findings)


class _HistoryWalk:
    """:func:`check_history` over the versions in order: :meth:`read` each one, then
    :meth:`compare` it; :meth:`result` at the end. Holds both folds and what was seen of
    each transaction."""

    def __init__(
        self,
        storage: Storage,
        journal: JournalSummary,
        first_version: int,
        first_contents: Contents,
        source: RowSource,
        merge_deletes: bool,
    ) -> None:
        self.storage = storage
        self.journal = journal
        self.first_version = first_version
        # from version 1 the landed transactions are folded too, in the same pass (one read
        # of each manifest, one index of its fragments for both folds)
        self.landed = HistoryModel(storage, source) if first_version == 1 else None
        self.landed_findings: list[str] = []
        self.fold = _IntentFold(
            first_version, first_contents, StoredContents(storage, source), merge_deletes
        )
        self.seen: dict[str, int] = {}  # uuid -> the version it landed as
        self.unacked = 0
        self.foreign_versions = 0

    def read(self, entry: VersionEntry) -> tuple[ManifestFile, FragmentIndex] | None:
        """The manifest of ``entry`` and the index of its fragments, folded into the landed
        fold; None when it cannot be read (a finding)."""
        try:
            mf = read_manifest_entry(self.storage, entry)
            index = FragmentIndex(mf.manifest)
        except TxnEngineError as exc:
            self.fold.findings.append(f"v{entry.version}: cannot read: {exc}")
            if self.landed is not None:
                self.landed_findings += self.landed.fold(entry)
            return None
        if self.landed is not None:
            self.landed_findings += self.landed.fold(entry, mf, index)
        return mf, index

    def compare(
        self,
        entry: VersionEntry,
        mf: ManifestFile,
        index: FragmentIndex,
        *,
        foreign: Callable[[int], bool] | None,
    ) -> None:
        """Fold the intents of the transactions version ``entry`` stands for and compare
        (a version in no journal is a finding, or, given ``foreign``, may change only the
        rows it accepts)."""
        v = entry.version
        try:
            pb = read_transaction(self.storage, entry, mf)
            self.fold.read(mf.manifest, index)
        except (TxnEngineError, KeyError) as exc:
            self.fold.findings.append(f"v{v}: cannot read: {exc}")
            return
        # the transactions the version stands for: its own and, for a group commit or a
        # version that carried other writers' offers, those it carried (in order)
        uuids = carried_in_order(pb)
        self._landed_once(v, uuids)
        journaled = [u for u in uuids if u in self.journal.intents]
        if v == self.first_version:
            self.fold.check_first(v)
        elif journaled:
            for u in journaled:
                if u not in self.journal.acked:
                    self.unacked += 1
                elif self.journal.acked[u] != v:
                    self.fold.findings.append(
                        f"v{v}: transaction {u} was acknowledged at v{self.journal.acked[u]}"
                    )
            self.fold.land(v, [self.journal.intents[u] for u in journaled])
        elif foreign is None:
            self.fold.findings.append(f"v{v}: transaction {pb.uuid} is in no journal")
            self.fold.resync(v)
        else:  # a foreign writer's version: only foreign rows may change
            self.foreign_versions += 1
            self.fold.foreign(v, foreign)

    def _landed_once(self, v: int, uuids: Sequence[str]) -> None:
        """Record that ``uuids`` landed as version ``v``: a finding for one that landed
        before, or whose writer was told it did not."""
        for u in uuids:
            if u in self.seen:
                self.fold.findings.append(
                    f"v{v}: transaction {u} already landed as v{self.seen[u]}"
                )
            self.seen[u] = v
            if u in self.journal.rejected:
                self.fold.findings.append(
                    f"v{v}: transaction {u} landed but its writer was told it did not"
                )

    def result(self, versions: int, max_findings: int) -> HistoryCheck:
        """The check of the ``versions`` walked: the findings (acknowledged transactions
        missing from the history and twice-acknowledged ones added), at most
        ``max_findings``."""
        findings = self.fold.findings
        for uuid, version in self.journal.acked.items():
            if uuid not in self.seen:
                findings.append(
                    f"acknowledged transaction {uuid} (v{version}) is not in the history"
                )
        for uuid in self.journal.duplicate_acks:
            findings.append(f"transaction {uuid} was acknowledged twice")
        findings += self.landed_findings[: max(0, max_findings - len(findings))]
        return HistoryCheck(
            tuple(findings[:max_findings]),
            versions,
            self.fold.contents() if versions else None,
            self.unacked,
            self.foreign_versions,
        )


class _IntentFold:
    """The expected contents (the fold of intents) next to the stored ones, both updated
    version by version; only the rids either side changed are compared, and the set of rids
    that differ is kept, so a version costs what it changed."""

    def __init__(
        self, first_version: int, first: Contents, stored: StoredContents, merge_deletes: bool
    ) -> None:
        self.first = first
        self.merge_deletes = merge_deletes
        self.stored = stored
        self.rows: _Versioned[int, int] = _Versioned()
        self.rows.replace(first.by_rid)
        self.rows.commit(first_version)
        self.configs: dict[int, Mapping[str, str]] = {first_version: first.config_dict}
        self.config: Mapping[str, str] = self.configs[first_version]
        self.differ: set[int] = set()  # rids where expected and stored differ
        self.changed: set[int] = set()  # rids the last manifest changed
        self.findings: list[str] = []

    def read(self, manifest: Any, index: FragmentIndex) -> None:
        """Advance the stored contents to ``manifest`` (KeyError / TxnEngineError: unread)."""
        self.changed = self.stored.advance(manifest, index)

    def contents(self) -> Contents:
        return Contents.of(self.rows.current.items(), self.config)

    def _update(self, rids: Iterable[int]) -> None:
        expected, stored = self.rows.current, self.stored.values
        for rid in rids:
            values = stored.get(rid)
            mine = expected.get(rid)
            if (values is None and mine is None) or (values == [mine]):
                self.differ.discard(rid)
            else:
                self.differ.add(rid)

    def _differs(self) -> bool:
        return bool(self.differ) or dict(self.config) != self.stored.config

    def _difference(self) -> str:
        return self.contents().difference(self.stored.contents()) or "contents differ"

    def _commit(self, v: int) -> None:
        self.rows.commit(v)
        self.configs[v] = self.config

    def check_first(self, v: int) -> None:
        """The first version holds the first contents (the fold does not move)."""
        self._update({*self.changed, *self.rows.current})
        if self._differs():
            self.findings.append(f"v{v}: {self._difference()}")

    def resync(self, v: int) -> None:
        """Take the stored contents as the expected ones from here on."""
        self._update(self.changed)
        for rid in list(self.differ):
            values = self.stored.values.get(rid)
            if values is None:
                self.rows.pop(rid)
            else:
                self.rows.set(rid, values[-1])
        self.config = dict(self.stored.config)
        self._update(list(self.differ))
        self._commit(v)

    def foreign(self, v: int, foreign: Callable[[int], bool]) -> None:
        """A journal-less writer's version: its rows are taken as stored."""
        self._update(self.changed)
        for rid in [r for r in self.differ if foreign(r)]:
            values = self.stored.values.get(rid)
            if values is None:
                self.rows.pop(rid)
            else:
                self.rows.set(rid, values[-1])
        self._update([r for r in self.differ if foreign(r)])
        if self._differs():  # a journal writer's row changed: only foreign rows may
            self._differs_finding(v)
            return
        self._commit(v)

    def land(self, v: int, effects: Effect | Sequence[Effect]) -> None:
        """Fold ``effects`` (one, or those of the transactions one version carried, in
        order) as version ``v`` and compare."""
        try:
            touched: set[int] = set()
            for effect in [effects] if not isinstance(effects, Sequence) else effects:
                touched.update(self._apply(effect))
        except EffectError as exc:
            self.rows.rollback()
            self.findings.append(f"v{v}: intent does not fit the previous version: {exc}")
            self.resync(v)
            return
        self._update({*touched, *self.changed})
        if self._differs():
            self._differs_finding(v)
            return
        self._commit(v)

    def _differs_finding(self, v: int) -> None:
        self.findings.append(f"v{v}: table differs from the fold of intents: {self._difference()}")
        self.resync(v)

    def _apply(self, effect: Effect) -> Iterable[int]:
        """Apply ``effect`` to the pending rows (the preconditions of
        :func:`~txn_engine.testing.model.apply_effect`); return the rids it touched."""
        rows = self.rows
        current = rows.current
        if isinstance(effect, AddRows):
            clash = sorted(r for r, _ in effect.rows if r in current)
            if clash:
                raise EffectError(f"appended rids already present: {clash[:5]}")
            for rid, value in effect.rows:
                rows.set(rid, value)
            return [r for r, _ in effect.rows]
        if isinstance(effect, RemoveRows):
            missing = sorted(r for r in effect.rids if r not in current)
            if missing and not self.merge_deletes:
                raise EffectError(f"deleted rids that are not live (deleted twice?): {missing[:5]}")
            for rid in effect.rids:
                if rid in current:
                    rows.pop(rid)
            return effect.rids
        if isinstance(effect, SetValues):
            missing = sorted(r for r, _ in effect.rows if r not in current)
            if missing:
                raise EffectError(f"updated rids that are not live: {missing[:5]}")
            for rid, value in effect.rows:
                rows.set(rid, value)
            return [r for r, _ in effect.rows]
        if isinstance(effect, (ReplaceTable, RestoreVersion)):
            config: Mapping[str, str]
            if isinstance(effect, ReplaceTable):
                table: Mapping[int, int] = dict(effect.rows)
                config = {**self.config, **dict(effect.config_upserts)}
            else:
                try:
                    table = rows.at(effect.version)
                    config = self.configs[effect.version]
                except KeyError:
                    raise EffectError(
                        f"restore of version {effect.version}: contents unknown"
                    ) from None
            before = set(current)
            rows.replace(table)
            self.config = config
            return before | set(table)
        if isinstance(effect, EditConfig):
            self.config = UpdateMap(effect.entries).apply(self.config)
            return ()
        if isinstance(effect, NoRowChange):
            return ()
        raise TypeError(f"unknown effect {effect!r}")  # pragma: no cover - exhaustive
