"""``descends_from`` with and without the benefit of the doubt (``proof=True``).

A newer version whose own operation touched a fragment ours added or changed may have
changed it on top of ours: by default that counts as carried (one we added must keep a data
file). With ``proof=True`` (the commit loop, when the version ours was built on is gone from
the listing after our create, so the newer one may stand on another history) only a
fragment we added whose data file the newer version still holds counts.
"""

from __future__ import annotations

import pytest

from txn_engine._proto import table_pb2
from txn_engine.conflicts.lineage import descends_from
from txn_engine.model import DataFile, DeletionFile, DeletionFileType, Fragment
from txn_engine.ops import Delete, UpdateConfig, UpdateMap


def frag(fid: int, path: str, dv: int | None = None) -> Fragment:
    deletion = None if dv is None else DeletionFile(DeletionFileType.BITMAP, 1, dv, 1)
    return Fragment(fid, (DataFile(path, (0,), (0,), 2, 2),), 10, deletion_file=deletion)


def manifest(*frags: Fragment) -> table_pb2.Manifest:
    m = table_pb2.Manifest(version=1)
    m.fragments.extend(f.to_proto() for f in frags)
    m.max_fragment_id = max(f.id for f in frags)
    return m


BASE = manifest(frag(0, "a.lance"))


@pytest.mark.parametrize("proof", [False, True])
def test_our_added_fragment_changed_again_with_its_file_kept_is_proved(proof: bool) -> None:
    ours = manifest(frag(0, "a.lance"), frag(1, "b.lance"))
    changed = frag(1, "b.lance", dv=7)
    newer = manifest(frag(0, "a.lance"), changed)
    assert descends_from(BASE, ours, newer, Delete(updated_fragments=(changed,)), proof=proof)


def test_our_added_fragment_removed_again_is_proved_only_with_the_doubt() -> None:
    ours = manifest(frag(0, "a.lance"), frag(1, "b.lance"))
    newer = manifest(frag(0, "a.lance"))
    newer.max_fragment_id = 1
    op = Delete(deleted_fragment_ids=(1,))
    assert descends_from(BASE, ours, newer, op)
    assert not descends_from(BASE, ours, newer, op, proof=True)


def test_a_fragment_we_changed_and_newer_changed_again_is_proved_only_with_the_doubt() -> None:
    ours = manifest(frag(0, "a.lance", dv=1))
    theirs = frag(0, "a.lance", dv=2)
    newer = manifest(theirs)
    op = Delete(updated_fragments=(theirs,))
    assert descends_from(BASE, ours, newer, op)
    assert not descends_from(BASE, ours, newer, op, proof=True)


def test_an_untouched_fragment_is_compared_exactly_either_way() -> None:
    ours = manifest(frag(0, "a.lance", dv=1))
    other = frag(5, "c.lance")
    newer = manifest(frag(0, "a.lance", dv=1), other)
    assert descends_from(BASE, ours, newer, Delete(updated_fragments=(other,)), proof=True)
    newer = manifest(frag(0, "a.lance", dv=9), other)
    assert not descends_from(BASE, ours, newer, Delete(updated_fragments=(other,)))


def test_a_fragment_we_removed_that_newer_removed_too_is_proved_only_with_the_doubt() -> None:
    """Found by the cleanup state machine: our Delete removed every row of fragment 0; the
    newer version (an Update built on another history) removed fragment 0 itself."""
    ours = manifest(frag(0, "a.lance"))
    del ours.fragments[:]
    newer = manifest(frag(2, "d.lance"))
    op = Delete(deleted_fragment_ids=(0,))
    assert descends_from(BASE, ours, newer, op)
    assert not descends_from(BASE, ours, newer, op, proof=True)


def test_a_change_with_nothing_only_ours_could_write_is_proved_only_with_the_doubt() -> None:
    """Found by the cleanup state machine: an UpdateConfig removing a key that was not set
    (an empty change) carries no evidence of itself."""
    ours = manifest(frag(0, "a.lance"))
    newer = manifest(frag(0, "a.lance"))
    op = UpdateConfig(config_updates=UpdateMap({"b": "1"}))
    assert descends_from(BASE, ours, newer, op)
    assert not descends_from(BASE, ours, newer, op, proof=True)
    # an untouched fragment of ours, as we left it: a deletion file only we wrote
    ours = manifest(frag(0, "a.lance", dv=1))
    newer = manifest(frag(0, "a.lance", dv=1))
    assert descends_from(BASE, ours, newer, op, proof=True)
