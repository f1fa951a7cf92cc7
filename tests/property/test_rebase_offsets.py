"""Row addresses <-> fragment offsets in ``conflicts.rebase``: the header-level shortcuts
(no loop over rows, no numpy) agree with the plain set arithmetic for every container kind
(array, bitset, run) and any mix of fragments."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from pyroaring import BitMap, BitMap64

from txn_engine.conflicts import rebase

_fragment_ids = st.sampled_from([0, 1, 2, 7, 255, 65_536, (1 << 32) - 1])
# offsets as sparse picks (array containers), dense ranges (bitset / run containers) or both
_offsets = st.one_of(
    st.lists(st.integers(0, (1 << 32) - 1), max_size=50),
    st.tuples(st.integers(0, (1 << 32) - 200_000), st.integers(0, 150_000)).map(
        lambda t: list(range(t[0], t[0] + t[1], 1))
    ),
    st.tuples(st.integers(0, 1 << 20), st.integers(1, 5_000), st.integers(1, 3)).map(
        lambda t: list(range(t[0], t[0] + t[1] * t[2], t[2]))
    ),
)


@settings(max_examples=60, deadline=None)
@given(
    parts=st.dictionaries(_fragment_ids, _offsets, max_size=5),
    probe=_fragment_ids,
    optimize=st.booleans(),
)
def test_fragment_offsets_matches_set_arithmetic(
    parts: dict[int, list[int]], probe: int, optimize: bool
) -> None:
    rows = BitMap64()
    for fid, offs in parts.items():
        rows.update((fid << 32) | o for o in offs)
    if optimize:
        rows.run_optimize()
    expected = BitMap(parts.get(probe, []))
    got = rebase.fragment_offsets(rows, probe)
    assert got == expected
    assert got == rebase._offsets_by_mask(rows, probe)
    assert rebase._addresses(probe, got) == BitMap64((probe << 32) | o for o in expected)


def test_fragment_offsets_bitset_and_run_buckets_before_the_probe() -> None:
    # buckets of every container kind ahead of the probed one must be skipped exactly
    rows = BitMap64(range(1 << 32, (1 << 32) + 70_000))  # bitset containers (fragment 1)
    rows.update((2 << 32) + o for o in range(0, 300_000, 3))  # bitsets with gaps (fragment 2)
    rows.update((3 << 32) + o for o in (5, 9, 1 << 31))  # arrays (fragment 3)
    rows.run_optimize()  # fragment 1 becomes run containers
    rows.update((9 << 32) + o for o in (0, 4_000_000_000))
    assert rebase.fragment_offsets(rows, 9) == BitMap([0, 4_000_000_000])
    assert rebase.fragment_offsets(rows, 3) == BitMap([5, 9, 1 << 31])
    assert rebase.fragment_offsets(rows, 2) == BitMap(range(0, 300_000, 3))
    assert rebase.fragment_offsets(rows, 4) == BitMap()
