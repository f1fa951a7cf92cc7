"""Does a newer version descend from ours? (pure; no I/O)

Create-if-absent alone is not enough once versions are cleaned up: a writer lists version
``N - 1`` as the latest and prepares ``N``; meanwhile another writer creates ``N`` and
``N + 1`` and a cleanup removes ``N`` (it is no longer the latest). The first writer's
create of ``N`` then *succeeds*, but ``N + 1`` was built on the removed ``N``, not on it:
its change is not in the main line although the store accepted it.

Lance manifests record no parent, so the commit loop decides from content: whatever our
transaction changed relative to its base (fragments added, changed or removed; config
keys, indices, columns, the fragment high-water mark) must still be in ``N + 1`` unless
``N + 1``'s own transaction touched it (what each operation type touches, replaces or
leaves alone is its handler's: :class:`txn_engine.builder.Handler`). An Overwrite or
Restore above ours (or an operation this library cannot read) replaces the table whatever
it was built on, so nothing proves that it descends from ours: the answer is then "no"
(the commit is refused, never acknowledged off the main line; a real follower that
overwrote within that instant makes a refusal that loses nothing, since its table does
not depend on ours).
"""

from __future__ import annotations

from collections.abc import Sequence

from txn_engine._proto import table_pb2
from txn_engine.builder import handler_for
from txn_engine.ops import Operation

__all__ = ["descends_from"]

_Signature = tuple[tuple[str, ...], str]


def _signature(pb: table_pb2.DataFragment) -> _Signature:
    deletion = ""
    if pb.HasField("deletion_file"):
        d = pb.deletion_file
        deletion = f"{d.file_type}:{d.read_version}:{d.id}:{d.num_deleted_rows}"
    return tuple(f.path for f in pb.files), deletion


def _fragments(m: table_pb2.Manifest) -> dict[int, _Signature]:
    return {f.id: _signature(f) for f in m.fragments}


def _index_ids(indices: Sequence[table_pb2.IndexMetadata]) -> frozenset[str]:
    return frozenset(i.uuid.SerializeToString(deterministic=True).hex() for i in indices)


def _field_ids(m: table_pb2.Manifest) -> frozenset[int]:
    return frozenset(f.id for f in m.fields)


def descends_from(
    base: table_pb2.Manifest,
    ours: table_pb2.Manifest,
    newer: table_pb2.Manifest,
    newer_operation: Operation | None,
    *,
    base_indices: Sequence[table_pb2.IndexMetadata] = (),
    our_indices: Sequence[table_pb2.IndexMetadata] = (),
    newer_indices: Sequence[table_pb2.IndexMetadata] = (),
    proof: bool = False,
) -> bool:
    """Whether ``newer`` (the version right above ``ours``) carries the change ``ours``
    made over ``base``. False proves that ``newer`` was built on another manifest at our
    version number (one removed by cleanup): our version is not in the main line.

    Compared: fragments added, changed or removed; config keys; the fragment high-water
    mark (never lowered by any operation); index uuids and schema field ids where
    ``newer``'s operation leaves them alone. A change with none of these (an empty one)
    cannot be told apart, and loses nothing if it is off the main line.

    A fragment ours added or changed that ``newer``'s own operation touched again gets the
    benefit of the doubt (``newer`` may have changed it on top of ours), except that one we
    added must keep at least one of its data files; one we removed that ``newer``'s
    operation touched is taken as removed on top of ours. With ``proof=True`` there is no
    benefit of the doubt: a touched fragment counts as carried only when it is one we added
    and ``newer`` still holds one of its data files, and something only ours can have put
    there must be in ``newer`` (a data or deletion file it wrote, an index it created), so an
    empty change, a config edit or a removal alone proves nothing. The commit loop asks for
    proof when the version ours was built on is gone, where ``newer`` may have been built
    on another history.
    """
    if newer_operation is None:
        return False
    handler = handler_for(newer_operation)
    if handler.replaces_table:
        return False  # replaces the table: no content can show it was built on ours
    before, after, then = _fragments(base), _fragments(ours), _fragments(newer)
    touched = handler.modified_fragment_ids(newer_operation)
    # with proof: something only ours can have put there (a data or deletion file it wrote,
    # an index it created) must be in newer
    evidence = _our_fragments_in(before, after, then, touched, proof=proof)
    if evidence is None or not _our_removals_kept(before, after, then, touched, proof=proof):
        return False
    if base.max_fragment_id < ours.max_fragment_id and newer.max_fragment_id < ours.max_fragment_id:
        return False  # the high-water mark we raised went down again
    if not handler.edits_config and not _our_config_in(base, ours, newer):
        return False
    if handler.keeps_indices:
        indexed = _our_indices_in(base_indices, our_indices, newer_indices)
        if indexed is None:
            return False  # an index we added is missing, or one we removed is back
        evidence = evidence or indexed
    if handler.keeps_fields:
        was_f, now_f, then_f = _field_ids(base), _field_ids(ours), _field_ids(newer)
        if not (now_f - was_f) <= then_f or (was_f - now_f) & then_f:
            return False  # a column we added is missing, or one we dropped is back
    return evidence or not proof


def _our_fragments_in(
    before: dict[int, _Signature],
    after: dict[int, _Signature],
    then: dict[int, _Signature],
    touched: frozenset[int],
    *,
    proof: bool,
) -> bool | None:
    """None when a fragment ours (``after``) added or changed over its base (``before``)
    is not in the newer version (``then``) as :func:`descends_from` requires (``touched``:
    the fragments the newer operation modified); else whether the newer version still
    holds one of them as only ours can have put it there (evidence, for ``proof``)."""
    evidence = False
    for fid, sig in after.items():
        if before.get(fid) == sig:
            continue  # not ours to check
        if fid not in touched:
            if then.get(fid) != sig:
                return None  # a fragment we added or changed is not in newer as we left it
            evidence = True
        elif proof and (fid in before or fid not in then or not set(sig[0]) & set(then[fid][0])):
            return None  # touched again by newer: nothing proves that ours was under it
        elif proof:
            evidence = True  # one of the data files we added is still there
        elif fid not in before and fid in then and not set(sig[0]) & set(then[fid][0]):
            # newer changed a fragment we added (new columns, deletions) yet holds none of
            # its data files: it is another writer's fragment under the same id
            return None
    return evidence


def _our_removals_kept(
    before: dict[int, _Signature],
    after: dict[int, _Signature],
    then: dict[int, _Signature],
    touched: frozenset[int],
    *,
    proof: bool,
) -> bool:
    """Whether every fragment ours (``after``) removed from its base (``before``) is still
    gone in the newer version (``then``); one the newer operation touched (``touched``)
    counts as removed on top of ours, but proves nothing with ``proof``."""
    for fid in before.keys() - after.keys():
        if fid in touched and proof:
            return False  # newer removed (or changed) it too: nothing proves ours was under it
        if fid not in touched and fid in then:
            return False  # a fragment we removed is back
    return True


def _our_config_in(
    base: table_pb2.Manifest, ours: table_pb2.Manifest, newer: table_pb2.Manifest
) -> bool:
    """Whether every config key ours changed over ``base`` has our value in ``newer``."""
    for key in set(base.config) | set(ours.config):
        mine = ours.config.get(key)
        if base.config.get(key) != mine and newer.config.get(key) != mine:
            return False
    return True


def _our_indices_in(
    base_indices: Sequence[table_pb2.IndexMetadata],
    our_indices: Sequence[table_pb2.IndexMetadata],
    newer_indices: Sequence[table_pb2.IndexMetadata],
) -> bool | None:
    """None when an index ours added is missing from ``newer_indices`` or one ours removed
    is back; else whether ours added one (evidence, for ``proof``)."""
    was, now, then_ids = (
        _index_ids(base_indices),
        _index_ids(our_indices),
        _index_ids(newer_indices),
    )
    if not (now - was) <= then_ids or (was - now) & then_ids:
        return None
    return bool(now - was)
