"""What an operation touches that conflict rules compare on both sides: the existing
fragments it changes in place or removes (rule O1) and the config keys it upserts and
deletes (rules K, K2, C1, C2).

Both are read from the operation's own fields, whatever its type, so a rule of one
handler asks them of the other side's operation without looking its handler up: the
handler modules use this module, and the registry of handlers
(:mod:`txn_engine.builder._registry`) imports them.
"""

from __future__ import annotations

from txn_engine.builder._policy import RuleContext
from txn_engine.ops import (
    DataReplacement,
    Delete,
    Merge,
    Overwrite,
    Rewrite,
    Update,
    UpdateConfig,
    UpdateMap,
)

__all__ = [
    "NO_CONFIG_EDITS",
    "ConfigEdits",
    "config_edits",
    "config_keys",
    "fragments_overlap",
    "key_clash",
    "map_edits",
    "modified_fragment_ids",
    "removed_fragment_ids",
    "replaced_fragment_ids",
    "row_change_fragment_ids",
]

#: The config keys an operation edits: (upserted, deleted).
ConfigEdits = tuple[frozenset[str], frozenset[str]]

NO_CONFIG_EDITS: ConfigEdits = (frozenset(), frozenset())


def removed_fragment_ids(op: Delete | Update) -> frozenset[int]:
    """The fragments a Delete or an Update removes whole."""
    return frozenset(op.deleted_fragment_ids if isinstance(op, Delete) else op.removed_fragment_ids)


def row_change_fragment_ids(op: Delete | Update) -> frozenset[int]:
    """The fragments a Delete or an Update changes: updated (a new deletion file) or
    removed."""
    return frozenset(f.id for f in op.updated_fragments) | removed_fragment_ids(op)


def replaced_fragment_ids(op: DataReplacement) -> frozenset[int]:
    """The fragments whose data files a DataReplacement replaces."""
    return frozenset(r.fragment_id for r in op.replacements)


def modified_fragment_ids(op: object) -> frozenset[int]:
    """Existing fragments ``op`` changes in place or removes (rule O1 compares them):
    Delete/Update: updated and removed ids; Rewrite: old fragments; DataReplacement:
    replaced fragments; Merge: every fragment it lists; any other: none."""
    if isinstance(op, (Delete, Update)):
        return row_change_fragment_ids(op)
    if isinstance(op, Rewrite):
        return op.old_fragment_ids
    if isinstance(op, Merge):
        return frozenset(f.id for f in op.fragments)
    if isinstance(op, DataReplacement):
        return replaced_fragment_ids(op)
    return frozenset()


def map_edits(m: UpdateMap | None) -> ConfigEdits:
    """The keys an :class:`~txn_engine.ops.UpdateMap` upserts and deletes (None: none)."""
    if m is None:
        return NO_CONFIG_EDITS
    return m.upserted_keys, m.deleted_keys


def config_edits(op: object) -> ConfigEdits:
    """The config keys ``op`` upserts and deletes (rules K, K2, C1, C2 compare them):
    Overwrite: its config upserts; UpdateConfig: its config updates; any other: none."""
    if isinstance(op, Overwrite):
        return frozenset(op.config_upserts), frozenset()
    if isinstance(op, UpdateConfig):
        return map_edits(op.config_updates)
    return NO_CONFIG_EDITS


def key_clash(a: ConfigEdits, b: ConfigEdits) -> frozenset[str]:
    """Keys upserted by one side and upserted or deleted by the other."""
    (a_up, a_del), (b_up, b_del) = a, b
    return (a_up & (b_up | b_del)) | (b_up & a_del)


# ---- rules over what both sides touch (several families use them) ----------------------------


def fragments_overlap(c: RuleContext) -> None:
    """Rule O1: retryable when the fragments the other modified overlap mine."""
    mine = modified_fragment_ids(c.mine.operation)
    other = modified_fragment_ids(c.other.operation)
    overlap = other & mine
    if overlap:
        c.retry(f"both touched fragment(s) {sorted(overlap)}", fragment_ids=overlap)


def config_keys(c: RuleContext) -> None:
    """Rule K: incompatible when both sides edit one config key (an upsert against an
    upsert or a delete)."""
    mine = config_edits(c.mine.operation)
    other = config_edits(c.other.operation)
    clash = key_clash(mine, other)
    if clash:
        c.incompatible(f"both changed config key(s) {sorted(clash)}", keys=clash)
