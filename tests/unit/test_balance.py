"""The balancer: every partition led by a live node, evenly, moved a few at a time."""

from __future__ import annotations

from collections import Counter

from hypothesis import assume, given
from hypothesis import strategies as st

from coordinator.runtime.balance import Placement, awaited, balance

PAIRS = st.lists(
    st.tuples(st.sampled_from([None, 1, 2, 3, 4, 5]), st.sampled_from([None, 1, 2, 3, 4, 5])),
    min_size=1,
    max_size=60,
)
"""(leader, target) of each partition: any of five nodes, or none."""


def settle(placements: list[Placement], live: list[int], max_moving: int = 2) -> list[int | None]:
    """Run the balancer, let every node take what it is given, until nothing changes."""
    for _ in range(200):
        targets = balance(placements, live, max_moving=max_moving)
        nxt = [
            Placement(leader=t, target=t, pinned=p.pinned)
            for p, t in zip(placements, targets, strict=True)
        ]
        if nxt == placements:
            return targets
        placements = nxt
    raise AssertionError("the balancer never settles")


def test_a_first_node_gets_everything() -> None:
    assert balance([Placement(None, None)] * 5, [7]) == [7] * 5


def test_three_nodes_share_fifty_partitions_evenly() -> None:
    targets = balance([Placement(None, None)] * 50, [3, 1, 2])
    assert Counter(targets) == {1: 17, 2: 17, 3: 16}
    # Round robin by load: neighbours go to different nodes.
    assert targets[:6] == [1, 2, 3, 1, 2, 3]


def test_a_dead_nodes_partitions_go_to_the_survivors_at_once() -> None:
    before = balance([Placement(None, None)] * 50, [1, 2, 3])
    placements = [Placement(leader=t, target=t) for t in before]
    after = balance(placements, [1, 2], max_moving=1)  # no limit for orphans
    assert all(t in (1, 2) for t in after)
    assert Counter(after) == {1: 25, 2: 25}
    # Survivors keep what they had.
    assert all(a == b for a, b in zip(after, before, strict=True) if b in (1, 2))


def test_a_new_node_receives_its_share_a_few_at_a_time() -> None:
    placements = [Placement(leader=1 + p % 2, target=1 + p % 2) for p in range(50)]
    step = balance(placements, [1, 2, 3], max_moving=2)
    moved = [p for p in range(50) if step[p] != placements[p].target]
    assert len(moved) == 2 and all(step[p] == 3 for p in moved)
    assert Counter(settle(placements, [1, 2, 3])) == {1: 17, 2: 17, 3: 16}


def test_pinned_partitions_stay_while_their_node_lives() -> None:
    placements = [Placement(leader=1, target=1, pinned=True)] * 4 + [Placement(2, 2)] * 2
    assert balance(placements, [1, 2]) == [1, 1, 1, 1, 2, 2]  # uneven, but pinned
    assert balance(placements, [2]) == [2] * 6  # its node gone: moved after all


def test_no_live_node_changes_nothing() -> None:
    placements = [Placement(1, 1), Placement(None, 2)]
    assert balance(placements, []) == [1, 2]


@given(
    PAIRS,
    st.sets(st.integers(1, 5), min_size=1),
    st.integers(1, 5),
)
def test_invariants(pairs: list[tuple[int | None, int | None]], live: set[int], limit: int) -> None:
    placements = [Placement(leader=a, target=b) for a, b in pairs]
    targets = balance(placements, sorted(live), max_moving=limit)
    assert all(t in live for t in targets)  # every partition has a live target
    for p, (placement, t) in enumerate(zip(placements, targets, strict=True)):
        if placement.target in live and t != placement.target:
            # Only rebalancing moves a live target, and never past the limit.
            moving = sum(
                1
                for q, pl in enumerate(placements)
                if pl.leader in live and targets[q] != pl.leader
            )
            assert moving <= max(
                limit, sum(1 for pl in placements if pl.leader in live and pl.target != pl.leader)
            ), p
    final = Counter(settle(placements, sorted(live), limit))
    loads = [final.get(n, 0) for n in live]
    assert max(loads) - min(loads) <= 1
    # Deterministic.
    assert balance(placements, sorted(live), max_moving=limit) == targets


def test_partitions_of_nodes_expected_back_wait_for_them() -> None:
    """After an outage of PostgreSQL the controller is back before the others: their
    partitions keep their targets (each node takes its own back), nothing new goes to them,
    and nothing moves to even out the load until they are back or given up."""
    expired = [Placement(leader=None, target=t) for t in (1, 1, 2, 2, 3, 3)]
    assert balance(expired, [2], returning={1, 3}) == [1, 1, 2, 2, 3, 3]
    # A partition nobody was to lead goes to a live node, not to one expected back.
    assert balance([*expired, Placement(None, None)], [2], returning={1, 3})[6] == 2
    # Uneven among the live nodes, yet nothing moves while node 3 is expected back ...
    uneven = [Placement(leader=1, target=1)] * 4 + [Placement(None, 3)] * 2
    assert balance(uneven, [1, 2], returning={3}) == [1, 1, 1, 1, 3, 3]
    # ... and once it is given up its partitions go to the least loaded, and the rest evens out.
    assert balance(uneven, [1, 2]) == [1, 1, 1, 2, 2, 2]


@given(
    PAIRS,
    st.sets(st.integers(1, 5), min_size=1),
    st.sets(st.integers(1, 5), min_size=1),
)
def test_nodes_expected_back_keep_their_partitions(
    pairs: list[tuple[int | None, int | None]], live: set[int], returning: set[int]
) -> None:
    returning -= live
    assume(returning)
    placements = [Placement(leader=a, target=b) for a, b in pairs]
    targets = balance(placements, sorted(live), returning=returning)
    for placement, t in zip(placements, targets, strict=True):
        if placement.target in live | returning:
            assert t == placement.target  # kept: no move while a node is expected back
        else:
            assert t in live  # nothing new for a node expected back


def test_a_cluster_started_again_gives_each_partition_back_to_its_node() -> None:
    """Every node stopped (their leases and registrations ran out, the targets stay) and
    started again one by one. The first node up expects back the nodes the partitions are
    targeted at (``awaited``): it keeps their partitions for them and takes only its own; as
    each comes back it takes its own: one take per partition, nothing moved to even out. The
    controller's decisions are replayed as the nodes take what is targeted at them."""
    targets = [1, 2, 3] * 4
    placements = [Placement(leader=None, target=t) for t in targets]
    assert awaited(placements, [1]) == {2, 3}
    takes: Counter[int] = Counter()
    for live in ([1], [1, 2], [1, 2, 3]):
        out = balance(placements, live, returning=awaited(placements, live))
        assert out == targets
        placements = [
            Placement(leader=t if t in live else p.leader, target=t)
            for p, t in zip(placements, out, strict=True)
        ]
        for p, placement in enumerate(placements):
            if placement.leader in live and takes[p] == 0:
                takes[p] += 1
    assert takes == Counter(range(12))
    assert awaited(placements, [1, 2, 3]) == set()
    # Before: the first node up took every partition (each of nodes 2's and 3's moved twice).
    assert balance([Placement(None, t) for t in targets], [1]) == [1] * 12


def test_a_node_not_back_within_the_grace_has_its_partitions_spread() -> None:
    """Node 3 does not come back: once the starting node gives it up (no longer returning),
    its partitions go to the live nodes, evenly, at once (nobody serves them), and nothing
    else moves."""
    targets = [1, 2, 3] * 4
    placements = [Placement(leader=t if t != 3 else None, target=t) for t in targets]
    assert balance(placements, [1, 2], returning={3}) == targets
    out = balance(placements, [1, 2])
    assert [out[p] for p in range(12) if targets[p] != 3] == [1, 2] * 4
    assert sorted(Counter(out).values()) == [6, 6]


def test_awaited_names_only_targets_not_live() -> None:
    """A fresh store targets no node; a node every partition was moved away from (it left, or
    was given up) is not awaited; a node not live that partitions still target is."""
    assert awaited([Placement(None, None)] * 3, [1]) == set()
    assert awaited([Placement(1, 1), Placement(None, 2), Placement(2, 4)], [1, 2]) == {4}
    assert awaited([Placement(None, 5), Placement(None, 5)], []) == {5}
