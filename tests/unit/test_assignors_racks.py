"""Rack-aware assignment (assignors/racks.py, through uniform and range): exact results on
hand-made groups, and properties on generated ones — member sizes exactly the rack-blind ones
(balance first), locality never below the rack-blind result and, for uniform in homogeneous
groups, the best any balanced assignment can reach (a max flow computed here with networkx);
range keeps its co-partitioning; both are deterministic; uniform's incremental path agrees with
the whole computation; with no rack information, or no member in a rack holding a replica, the
result is exactly the rack-blind one."""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Iterable, Mapping

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assignors.api import (
    GroupAssignment,
    GroupSpec,
    MemberSubscription,
    PartitionAssignorError,
    SubscriptionType,
    TopicMetadata,
)
from assignors.conformance._model import make_group_spec, permuted
from assignors.conformance._strategies import scenarios
from assignors.plan import _greedy, greedy_order, transport
from assignors.racks import RackNodes, count_rack_local
from assignors.range import RangeAssignor
from assignors.summary import summarize
from assignors.uniform import UniformAssignor, compute_uniform_changes
from assignors.validation import check_assignment

UNIFORM, RANGE = UniformAssignor(), RangeAssignor()
Plain = dict[str, dict[str, frozenset[int]]]
PROPERTY = settings(
    max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), database=None
)


def member(
    rack: str | None,
    subs: Iterable[str] = ("t",),
    current: Mapping[str, Iterable[int]] | None = None,
) -> MemberSubscription:
    return MemberSubscription(
        rack_id=rack,
        instance_id=None,
        subscribed_topic_ids=frozenset(subs),
        assignment={t: frozenset(p) for t, p in (current or {}).items()},
    )


def topic(t: str, n: int, racks: Mapping[int, str] | None = None) -> TopicMetadata:
    """``racks``: partition -> its replicas' racks as one string of letters ("ab": a and b)."""
    return TopicMetadata(
        topic_id=t,
        name=f"{t}-name",
        num_partitions=n,
        partition_racks={p: frozenset(rs) for p, rs in (racks or {}).items()},
    )


def blind(topics: Mapping[str, TopicMetadata]) -> dict[str, TopicMetadata]:
    """The same topics without rack information."""
    return {t: dataclasses.replace(m, partition_racks={}) for t, m in topics.items()}


def run(assignor: object, spec: GroupSpec, topics: Mapping[str, TopicMetadata]) -> Plain:
    result = assignor.assign(spec, topics)  # type: ignore[attr-defined]
    check_assignment(spec, topics, result)
    return {m: dict(a) for m, a in result.members.items()}


def local(spec: GroupSpec, topics: Mapping[str, TopicMetadata], result: Plain) -> int:
    return sum(count_rack_local(spec.members[m].rack_id, a, topics) for m, a in result.items())


def sizes(result: Plain) -> dict[str, int]:
    return {m: sum(map(len, a.values())) for m, a in result.items()}


def fs(*partitions: int) -> frozenset[int]:
    return frozenset(partitions)


def best_balanced_locality(spec: GroupSpec, topics: Mapping[str, TopicMetadata]) -> int:
    """The most rack-local partitions any assignment of a homogeneous group with member sizes
    q or q+1 can have: a max flow partitions (by their racks) -> racks (where local) -> sink,
    q per member of the rack, plus one extra per member of the rack through a node that lets r
    extras through. (Members of one rack are interchangeable, so this is exact.)"""
    subscribed = next(iter(spec.members.values())).subscribed_topic_ids
    by_racks: dict[frozenset[str], int] = {}
    total = 0
    for t in subscribed:
        n = topics[t].num_partitions
        total += n
        for p in range(n):
            racks = topics[t].partition_racks.get(p, frozenset())
            by_racks[racks] = by_racks.get(racks, 0) + 1
    members: dict[str | None, int] = {}
    for s in spec.members.values():
        members[s.rack_id] = members.get(s.rack_id, 0) + 1
    q, r = divmod(total, len(spec.members))
    g = nx.DiGraph()
    g.add_edge("extra", "sink", capacity=r)
    for racks, n in by_racks.items():
        g.add_edge("source", ("p", racks), capacity=n)
        for rack in members:
            if rack in racks:
                g.add_edge(("p", racks), ("m", rack), capacity=n)
    for rack, count in members.items():
        g.add_edge(("m", rack), "sink", capacity=q * count)
        g.add_edge(("m", rack), "extra", capacity=count)
    if "source" not in g:
        return 0  # nothing to assign
    return int(nx.maximum_flow_value(g, "source", "sink"))


# ---------------------------------------------------------------------- generated groups

RACKS = ("a", "b", "c")


@st.composite
def racked_groups(draw: st.DrawFn) -> tuple[GroupSpec, dict[str, TopicMetadata]]:
    """1-3 topics of 1-12 partitions whose partitions have replicas in 0-3 of racks a, b, c;
    1-8 members in a, b, c, d (a rack with no replica) or none; homogeneous or not; no, a
    random or a stale-free current assignment."""
    n_topics = draw(st.integers(1, 3))
    topics = {}
    for k in range(n_topics):
        t = f"t{k}"
        n = draw(st.integers(1, 12))
        masks = draw(st.lists(st.integers(0, 7), min_size=n, max_size=n))
        topics[t] = topic(
            t,
            n,
            {p: "".join(r for b, r in enumerate(RACKS) if m >> b & 1) for p, m in enumerate(masks)},
        )
    names = sorted(topics)
    homogeneous = draw(st.booleans())
    n_members = draw(st.integers(1, 8))
    racks = draw(
        st.lists(
            st.sampled_from(["a", "b", "c", "d", None]), min_size=n_members, max_size=n_members
        )
    )
    subs = []
    for _ in range(n_members):
        if homogeneous:
            subs.append(tuple(names))
        else:
            chosen = draw(st.lists(st.sampled_from(names), unique=True, max_size=len(names)))
            subs.append(tuple(sorted(chosen)))
    current: list[dict[str, list[int]]] = [{} for _ in range(n_members)]
    if draw(st.booleans()):
        for t in names:
            for p in range(topics[t].num_partitions):
                owners = [j for j in range(n_members) if t in subs[j]]
                pick = draw(st.integers(0, len(owners)))
                if pick:
                    current[owners[pick - 1]].setdefault(t, []).append(p)
    members = {f"m{j}": member(racks[j], subs[j], current[j]) for j in range(n_members)}
    return make_group_spec(members), topics


@PROPERTY
@given(racked_groups())
def test_uniform_balance_first_then_locality(
    group: tuple[GroupSpec, dict[str, TopicMetadata]],
) -> None:
    spec, topics = group
    with_racks, without = run(UNIFORM, spec, topics), run(UNIFORM, spec, blind(topics))
    # The same sizes (only which members of a subscription get the extra partition may
    # differ), so balance is exactly the rack-blind one.
    spread = sorted(sizes(with_racks).values())
    assert spread == sorted(sizes(without).values())
    for subscription in {s.subscribed_topic_ids for s in spec.members.values()}:
        same = [m for m, s in spec.members.items() if s.subscribed_topic_ids == subscription]
        assert sorted(sizes(with_racks)[m] for m in same) == sorted(sizes(without)[m] for m in same)
    if spec.subscription_type is SubscriptionType.HOMOGENEOUS:
        assert spread[-1] - spread[0] <= 1
        assert local(spec, topics, with_racks) == best_balanced_locality(spec, topics)
    assert local(spec, topics, with_racks) >= local(spec, topics, without)
    # Deterministic: again, and on an equal input built in another order.
    assert run(UNIFORM, spec, topics) == with_racks
    spec2, topics2 = permuted(spec, topics)
    assert run(UNIFORM, spec2, topics2) == with_racks


@PROPERTY
@given(racked_groups())
def test_range_keeps_its_counts_and_co_partitioning(
    group: tuple[GroupSpec, dict[str, TopicMetadata]],
) -> None:
    spec, topics = group
    with_racks, without = run(RANGE, spec, topics), run(RANGE, spec, blind(topics))
    for m in spec.members:
        assert {t: len(p) for t, p in with_racks[m].items()} == {
            t: len(p) for t, p in without[m].items()
        }
    # Range's contract: topics with the same partition count and the same subscribers are
    # co-partitioned (a member gets the same indexes of each).
    subscribers = {
        t: frozenset(m for m, s in spec.members.items() if t in s.subscribed_topic_ids)
        for t in topics
    }
    for a in topics:
        for b in topics:
            if (
                a < b
                and subscribers[a] == subscribers[b]
                and topics[a].num_partitions == topics[b].num_partitions
            ):
                assert all(with_racks[m].get(a) == with_racks[m].get(b) for m in spec.members)
    assert local(spec, topics, with_racks) >= local(spec, topics, without)
    assert run(RANGE, spec, topics) == with_racks
    spec2, topics2 = permuted(spec, topics)
    assert run(RANGE, spec2, topics2) == with_racks


@PROPERTY
@given(scenarios())
def test_without_a_relevant_rack_the_result_is_the_rack_blind_one(scenario) -> None:  # type: ignore[no-untyped-def]
    """Partition racks that no member is in (members moved to rack "elsewhere"), or no rack at
    all: exactly the rack-blind result, member for member."""
    spec, topics = scenario.group_spec(), scenario.topic_metadata()
    moved = GroupSpec(
        members={
            m: dataclasses.replace(s, rack_id=None if s.rack_id is None else "elsewhere")
            for m, s in spec.members.items()
        },
        subscription_type=spec.subscription_type,
        partition_owners=spec.partition_owners,
    )
    for assignor in (UNIFORM, RANGE):
        expected = run(assignor, moved, blind(topics))
        assert run(assignor, moved, topics) == expected
        assert run(assignor, spec, blind(topics)) == expected


@PROPERTY
@given(racked_groups())
def test_uniform_incremental_path_equals_the_whole_computation(
    group: tuple[GroupSpec, dict[str, TopicMetadata]],
) -> None:
    """``assign_changes`` answers every homogeneous group with a summary, racks relevant or
    not, and its changes laid over the current targets are the whole result, member for
    member; without the held partitions counted by racks it declines groups where racks are
    relevant (the plan needs them)."""
    spec, topics = group
    summary = summarize(spec, topics)
    if summary is None:
        return
    changes = compute_uniform_changes(dataclasses.replace(spec, target_summary=summary), topics)
    whole = run(UNIFORM, spec, topics)
    homogeneous = spec.subscription_type is SubscriptionType.HOMOGENEOUS
    assert (changes is not None) == homogeneous
    if changes is not None:
        merged = {m: dict(changes.get(m, s.assignment)) for m, s in spec.members.items()}
        assert merged == whole
    racks_matter = any(  # some member's rack holds a replica of a topic it subscribes to
        s.rack_id in rs
        for s in spec.members.values()
        for t in s.subscribed_topic_ids
        for rs in topics[t].partitions_by_racks()
    )
    uncounted = dataclasses.replace(summary, held_by_racks=None)
    declined = compute_uniform_changes(dataclasses.replace(spec, target_summary=uncounted), topics)
    assert (declined is None) == (racks_matter or not homogeneous)


@PROPERTY
@given(racked_groups())
def test_a_settled_uniform_group_stays_as_it_is(
    group: tuple[GroupSpec, dict[str, TopicMetadata]],
) -> None:
    """Computing again from the result moves nothing (stable: stickiness once placed)."""
    spec, topics = group
    first = run(UNIFORM, spec, topics)
    again = make_group_spec(
        {m: dataclasses.replace(s, assignment=first[m]) for m, s in spec.members.items()}
    )
    assert run(UNIFORM, again, topics) == first


@st.composite
def settled_then_changed(
    draw: st.DrawFn,
) -> tuple[GroupSpec, dict[str, TopicMetadata]]:
    """A homogeneous group settled by the whole computation, then changed as the coordinator
    sees it: 1-12 racks (more than 8 masks of free partitions in a topic), each partition
    with replicas in 0-4 of them; 1-16 members in those racks, in a rack with no replica or in
    none; then one member leaves, or one joins (also to a group settled after a leave, whose
    members above the new quota may hold just one partition of their last topic), or several
    leave and join at once, and a topic may gain partitions (unassigned)."""
    racks = [f"r{j:02d}" for j in range(draw(st.integers(1, 12)))]
    topics = {}
    for k in range(draw(st.integers(1, 3))):
        n = draw(st.integers(1, 40))
        sets = draw(
            st.lists(st.frozensets(st.sampled_from(racks), max_size=4), min_size=n, max_size=n)
        )
        topics[f"t{k}"] = TopicMetadata(
            topic_id=f"t{k}",
            name=f"t{k}-name",
            num_partitions=n,
            partition_racks={p: rs for p, rs in enumerate(sets) if rs},
        )
    names = tuple(sorted(topics))
    rack_ids = st.sampled_from([*racks, "elsewhere", None])
    count = draw(st.integers(1, 16))
    first = {f"m{j:02d}": member(draw(rack_ids), names) for j in range(count)}
    settled = run(UNIFORM, make_group_spec(first), topics)
    change = draw(st.sampled_from(["leave", "join", "both", "leave, then join"]))
    ids = sorted(first)
    if change == "leave, then join" and count > 1:  # settled again after a leave
        gone = draw(st.sampled_from(ids))
        ids.remove(gone)
        first = {m: first[m] for m in ids}
        left = {m: member(s.rack_id, names, settled[m]) for m, s in first.items()}
        settled = run(UNIFORM, make_group_spec(left), topics)
        count -= 1
        change = "join"
    leaving: set[str] = set()
    if change != "join" and count > 1:
        leaving = set(draw(st.lists(st.sampled_from(ids), min_size=1, max_size=count - 1)))
        if change == "leave":
            leaving = {min(leaving)}
    joining = 0 if change == "leave" else draw(st.integers(1, 1 if change == "join" else 3))
    members = {
        m: member(s.rack_id, names, settled[m]) for m, s in first.items() if m not in leaving
    }
    for j in range(joining):
        members[f"n{j}"] = member(draw(rack_ids), names)
    if draw(st.booleans()):  # a topic gains partitions: nobody holds them
        t = draw(st.sampled_from(names))
        more = draw(st.integers(1, 20))
        old = topics[t]
        extra = draw(
            st.lists(
                st.frozensets(st.sampled_from(racks), max_size=4), min_size=more, max_size=more
            )
        )
        racks_of = dict(old.partition_racks)
        racks_of.update({old.num_partitions + i: rs for i, rs in enumerate(extra) if rs})
        topics[t] = dataclasses.replace(
            old, num_partitions=old.num_partitions + more, partition_racks=racks_of
        )
    return make_group_spec(members), topics


@PROPERTY
@given(settled_then_changed())
def test_uniform_incremental_path_after_leaves_and_joins_equals_the_whole_computation(
    group: tuple[GroupSpec, dict[str, TopicMetadata]],
) -> None:
    """The incremental path's shortcuts for small changes (a member giving up its whole last
    topic, a single node receiving what moves, the free partitions of one mask or of up to 8
    masks, the members below their count found per node) give the whole computation's result
    on settled groups after one leave, one join or several of both, with partitions added."""
    spec, topics = group
    incremental_equals_whole(spec, topics)


def incremental_equals_whole(spec: GroupSpec, topics: Mapping[str, TopicMetadata]) -> Plain:
    """Asserts that the incremental path (from the summary the coordinator would keep) names
    exactly the members whose assignment changes and gives them the whole computation's
    result; returns that result."""
    summary = summarize(spec, topics)
    assert summary is not None
    changes = compute_uniform_changes(dataclasses.replace(spec, target_summary=summary), topics)
    assert changes is not None
    whole = run(UNIFORM, spec, topics)
    assert {m: dict(changes.get(m, s.assignment)) for m, s in spec.members.items()} == whole
    assert {m for m, s in spec.members.items() if whole[m] != dict(s.assignment)} == set(changes)
    return whole


def test_uniform_incremental_path_with_more_relevant_racks_than_a_byte_holds() -> None:
    """Ten relevant racks (a partition's mask needs more than a byte: no byte per partition is
    kept), 200 members on two topics of 1,000 partitions: a leave (its few partitions' masks
    looked up one by one), the same leave with partitions added to a topic (more than 8 masks
    among them), then a join to the group settled after the leave (the members above the new
    quota give up the one partition of their last topic they took) — each through the
    incremental path is the whole computation's result."""
    racks = [f"r{j}" for j in range(10)]

    def layout(n: int, step: int) -> dict[int, frozenset[str]]:
        return {p: frozenset({racks[p % 10], racks[(p * step + 1) % 10]}) for p in range(n)}

    names = ("t0", "t1")
    meta = {
        t: TopicMetadata(topic_id=t, name=t, num_partitions=1000, partition_racks=layout(1000, k))
        for k, t in enumerate(names, start=3)
    }
    grown = dict(meta)
    grown["t1"] = dataclasses.replace(
        meta["t1"], num_partitions=1030, partition_racks=layout(1030, 4)
    )
    first = {f"m{j:03d}": member(racks[j % 10], names) for j in range(200)}
    settled = run(UNIFORM, make_group_spec(first), meta)
    left = {m: member(s.rack_id, names, settled[m]) for m, s in first.items() if m != "m103"}

    incremental_equals_whole(make_group_spec(left), grown)
    after = incremental_equals_whole(make_group_spec(left), meta)
    joined = {m: member(s.rack_id, names, after[m]) for m, s in left.items()}
    joined["new"] = member("r0", names)
    incremental_equals_whole(make_group_spec(joined), meta)


def test_the_incremental_path_declines_buckets_that_do_not_hold_every_member() -> None:
    """A summary whose members by rack and load miss a member (not what the coordinator
    keeps): the incremental path declines (None: the whole computation runs) instead of
    planning for other members."""
    meta = {"t": topic("t", 6, {p: "ab" if p % 2 else "bc" for p in range(6)})}
    spec = make_group_spec({"m0": member("a"), "m1": member("b"), "m2": member("c")})
    summary = summarize(spec, meta)
    assert summary is not None and summary.members_by_rack is not None
    assert compute_uniform_changes(dataclasses.replace(spec, target_summary=summary), meta)
    short = {r: dict(by_load) for r, by_load in summary.members_by_rack.items() if r != "c"}
    broken = dataclasses.replace(summary, members_by_rack=short)
    assert compute_uniform_changes(dataclasses.replace(spec, target_summary=broken), meta) is None


def test_partition_masks_in_bytes_when_they_fit() -> None:
    """Each partition's mask as one byte (kept with a big topic's metadata per tuple of
    relevant racks, made afresh for a small one); none when the topic's sets of racks are not
    coded in a byte (more than 256 of them) or a mask needs more than 8 racks — the masks by
    partition are then a list, the same."""
    pairs = [frozenset({f"r{a:02d}", f"r{b:02d}"}) for a in range(25) for b in range(a + 1, 25)]

    def topic_of(n: int, sets: int) -> TopicMetadata:
        racks = {p: pairs[p % sets] for p in range(n)}
        return TopicMetadata(topic_id=f"{n}", name=f"{n}", num_partitions=n, partition_racks=racks)

    three = ["r00", "r01", "r02"]
    for racks, metadata, coded, kept in (
        (three, topic_of(30, 30), True, False),
        (three, topic_of(5000, 30), True, True),
        (three, topic_of(300, 300), False, False),
        ([f"r{j:02d}" for j in range(9)], topic_of(5000, 30), False, False),
    ):
        nodes = RackNodes(racks)
        masks = [nodes.mask(metadata.partition_racks[p]) for p in range(metadata.num_partitions)]
        found = nodes.mask_bytes(metadata)
        assert (found is not None) == coded
        if found is not None:
            assert list(found) == masks
            assert (RackNodes(racks).mask_bytes(metadata) is found) == kept
        assert list(nodes.masks_by_partition(metadata)) == masks


# ---------------------------------------------------------------------- exact cases


def test_each_member_reads_from_its_own_rack() -> None:
    meta = {"t": topic("t", 6, {0: "a", 1: "b", 2: "c", 3: "a", 4: "b", 5: "c"})}
    spec = make_group_spec({"m1": member("c"), "m2": member("b"), "m3": member("a")})
    assert run(UNIFORM, spec, meta) == {
        "m1": {"t": fs(2, 5)},
        "m2": {"t": fs(1, 4)},
        "m3": {"t": fs(0, 3)},
    }
    # Rack-blind, the same group gets contiguous runs: m1 0-1, m2 2-3, m3 4-5 (none local).
    assert run(UNIFORM, spec, blind(meta)) == {
        "m1": {"t": fs(0, 1)},
        "m2": {"t": fs(2, 3)},
        "m3": {"t": fs(4, 5)},
    }
    assert run(RANGE, spec, meta) == run(UNIFORM, spec, meta)


def test_a_rack_with_more_consumers_than_partitions() -> None:
    """Rack a holds 2 of 3 partitions and has 3 consumers; rack b holds 1 and has 1. Balance
    (1 each, one member empty) comes first; the empty member is one in rack a, whose two
    other consumers read locally; rack b's consumer reads its own partition."""
    meta = {"t": topic("t", 3, {0: "b", 1: "a", 2: "a"})}
    spec = make_group_spec(
        {"a1": member("a"), "a2": member("a"), "a3": member("a"), "b1": member("b")}
    )
    assert run(UNIFORM, spec, meta) == {
        "a1": {"t": fs(1)},
        "a2": {"t": fs(2)},
        "a3": {},
        "b1": {"t": fs(0)},
    }
    # Range: the first three in member order get one each (its counts); their rack-blind
    # ranges already give two of them a local partition, the most possible: they stay.
    assert run(RANGE, spec, meta) == {
        "a1": {"t": fs(0)},
        "a2": {"t": fs(1)},
        "a3": {"t": fs(2)},
        "b1": {},
    }


def test_the_extra_partition_goes_to_the_rack_with_local_replicas() -> None:
    """5 partitions over 2 members: one gets 3. Rack-blind it is the first member (b1); with
    racks it is the member whose rack holds 3 of them."""
    meta = {"t": topic("t", 5, {0: "a", 1: "a", 2: "a", 3: "b", 4: "b"})}
    spec = make_group_spec({"b1": member("b"), "z-a1": member("a")})
    assert run(UNIFORM, spec, blind(meta)) == {"b1": {"t": fs(0, 1, 2)}, "z-a1": {"t": fs(3, 4)}}
    assert run(UNIFORM, spec, meta) == {"b1": {"t": fs(3, 4)}, "z-a1": {"t": fs(0, 1, 2)}}


def test_a_rack_without_consumers() -> None:
    """Partitions only rack c holds are local to nobody: they fill what is left, after every
    member took its local ones."""
    meta = {"t": topic("t", 6, {0: "c", 1: "a", 2: "c", 3: "b", 4: "c", 5: "ab"})}
    spec = make_group_spec({"m1": member("b"), "m2": member("a")})
    # Local: 3 (b) to m1, 1 and 5 (a, b) to m2; the rest fill up in partition order.
    assert run(UNIFORM, spec, meta) == {"m1": {"t": fs(2, 3, 4)}, "m2": {"t": fs(0, 1, 5)}}
    assert local(spec, meta, run(UNIFORM, spec, meta)) == 3
    # Range: rack-blind m1 has 0-2 and m2 3-5; the local ones swap (1 to m2, 3 to m1) and
    # those local to nobody stay with their rack-blind owner (0, 2 with m1; 4 with m2).
    assert run(RANGE, spec, blind(meta)) == {"m1": {"t": fs(0, 1, 2)}, "m2": {"t": fs(3, 4, 5)}}
    assert run(RANGE, spec, meta) == {"m1": {"t": fs(0, 2, 3)}, "m2": {"t": fs(1, 4, 5)}}


def test_locality_before_stickiness_and_a_settled_group_keeps_everything() -> None:
    """m1 (rack a) holds the partitions local to b and m2 (rack b) those local to a: they swap.
    Once placed, computing again changes nothing (the members get their own mappings back)."""
    meta = {"t": topic("t", 4, {0: "a", 1: "a", 2: "b", 3: "b"})}
    spec = make_group_spec(
        {"m1": member("a", current={"t": [2, 3]}), "m2": member("b", current={"t": [0, 1]})}
    )
    placed = run(UNIFORM, spec, meta)
    assert placed == {"m1": {"t": fs(0, 1)}, "m2": {"t": fs(2, 3)}}
    settled = make_group_spec(
        {"m1": member("a", current=placed["m1"]), "m2": member("b", current=placed["m2"])}
    )
    result = UNIFORM.assign(settled, meta)
    assert all(result.members[m] is settled.members[m].assignment for m in ("m1", "m2"))


def test_a_join_keeps_everything_local_with_one_move_more() -> None:
    """3 racks, every partition in two of them; a settled group of three (one per rack), and a
    fourth member joins in rack a. Everyone drops to 3: a1 and c1 give a2 partitions local to
    it, and b1's extra partition (local to b and c only) goes to c1, which gave one more: one
    move beyond what the newcomer receives keeps every partition local."""
    racks = {p: ("ab", "bc", "ca")[p % 3] for p in range(12)}
    meta = {"t": topic("t", 12, racks)}
    three = {"a1": member("a"), "b1": member("b"), "c1": member("c")}
    settled = run(UNIFORM, make_group_spec(three), meta)
    assert local(make_group_spec(three), meta, settled) == 12
    four = {m: member(s.rack_id, current=settled[m]) for m, s in three.items()}
    four["a2"] = member("a")
    spec = make_group_spec(four)
    joined = run(UNIFORM, spec, meta)
    assert sizes(joined) == {"a1": 3, "a2": 3, "b1": 3, "c1": 3}
    assert joined == {
        "a1": {"t": fs(0, 3, 6)},
        "a2": {"t": fs(8, 9, 11)},
        "b1": {"t": fs(1, 4, 7)},
        "c1": {"t": fs(2, 5, 10)},
    }
    assert local(spec, meta, joined) == 12
    moved = sum(len(settled[m]["t"] - joined[m]["t"]) for m in three)
    assert moved == 4


def test_a_partition_leaving_the_node_anyway_goes_in_place_of_an_alike_one() -> None:
    """Rack b holds 5 of 6 partitions (m1: 0 and 1, m2: 2 and 3, m3: 4); a1 joins in rack a and
    b must give it one partition local to a. The plan picks one of partition 0's kind (a, b and
    c), which m2, the member of b above its count, does not hold; m2's partition 2 (a and b) is
    as local to a and to b, so it goes in its place: one move, not two (m1 giving up 0 and
    taking m2's 3), and the incremental path agrees."""
    meta = {"t": topic("t", 6, {0: "abc", 1: "bc", 2: "ab", 3: "bc", 4: "b", 5: "bc"})}
    current = {"c1": [5], "m1": [0, 1], "m2": [2, 3], "m3": [4]}
    members = {m: member("c" if m == "c1" else "b", current={"t": ps}) for m, ps in current.items()}
    members["a1"] = member("a")
    spec = make_group_spec(members)
    joined = incremental_equals_whole(spec, meta)
    assert joined == {
        "a1": {"t": fs(2)},
        "c1": {"t": fs(5)},
        "m1": {"t": fs(0, 1)},
        "m2": {"t": fs(3)},
        "m3": {"t": fs(4)},
    }
    assert local(spec, meta, joined) == best_balanced_locality(spec, meta) == 6


@pytest.mark.parametrize("members", [7, 30])
def test_big_topics_reach_the_best_locality_after_joins_and_leaves(members: int) -> None:
    """Topics of thousands of partitions in few rack sets (held partitions are counted group by
    group there), three racks, two replicas each; the group settles, one member leaves, one
    joins: every time the locality of the best balanced assignment (networkx), and the
    incremental path (held partitions counted by the summary) gives the same result."""
    layout = ("ab", "bc", "ca", "ab", "ca")
    meta = {
        t: topic(t, n, {p: layout[(p // 7 + k) % len(layout)] for p in range(n)})
        for k, (t, n) in enumerate((("t0", 2000), ("t1", 1500)))
    }
    racks = {f"m{j:03d}": "abc"[j % 3] for j in range(members)}
    current: Plain = {m: {} for m in racks}
    for step in ("start", "leave", "join"):
        if step == "leave":
            del racks["m001"], current["m001"]
        elif step == "join":
            racks["z-new"] = "a"
            current["z-new"] = {}
        spec = make_group_spec({m: member(r, ("t0", "t1"), current[m]) for m, r in racks.items()})
        result = run(UNIFORM, spec, meta)
        assert local(spec, meta, result) == best_balanced_locality(spec, meta), step
        summary = summarize(spec, meta)
        changes = compute_uniform_changes(dataclasses.replace(spec, target_summary=summary), meta)
        assert changes is not None
        assert {m: dict(changes.get(m, s.assignment)) for m, s in spec.members.items()} == result
        spread = sorted(sizes(result).values())
        assert spread[-1] - spread[0] <= 1
        current = result


def test_hundreds_of_racks() -> None:
    """300 racks, one member in each (301 nodes: no node fits in a byte any more), a topic of
    601 partitions each with a replica in one rack (p % 300) and the last in none: everyone
    gets two local partitions, one member a third; after a leave the same through the whole
    computation and the incremental path; range too."""
    racks = [f"r{j:03d}" for j in range(300)]
    meta = {
        "t": TopicMetadata(
            topic_id="t",
            name="t-name",
            num_partitions=601,
            partition_racks={p: frozenset({racks[p % 300]}) for p in range(600)},
        )
    }
    current: Plain = {f"m{j:03d}": {} for j in range(300)}
    for step in ("start", "leave"):
        if step == "leave":
            del current["m150"]
        spec = make_group_spec({m: member(racks[int(m[1:])], ("t",), current[m]) for m in current})
        result = run(UNIFORM, spec, meta)
        assert local(spec, meta, result) == best_balanced_locality(spec, meta)
        summary = summarize(spec, meta)
        changes = compute_uniform_changes(dataclasses.replace(spec, target_summary=summary), meta)
        assert changes is not None
        assert {m: dict(changes.get(m, s.assignment)) for m, s in spec.members.items()} == result
        current = result
    assert local(spec, meta, current) == 598  # m150's two partitions are local to nobody left
    by_range = run(RANGE, spec, meta)
    assert local(spec, meta, by_range) == 598


def test_range_places_co_partitioned_topics_together() -> None:
    """Two co-partitioned topics: an index counts once per topic it is local in; a member gets
    the same indexes of both."""
    meta = {
        "x": topic("x", 4, {0: "b", 1: "b", 2: "a", 3: "a"}),
        "y": topic("y", 4, {0: "b", 1: "a", 2: "a", 3: "a"}),
    }
    spec = make_group_spec({"m1": member("a", "xy"), "m2": member("b", "xy")})
    assert run(RANGE, spec, meta) == {
        "m1": {"x": fs(2, 3), "y": fs(2, 3)},
        "m2": {"x": fs(0, 1), "y": fs(0, 1)},
    }


def test_no_rack_information_gives_todays_result() -> None:
    meta = {"t": topic("t", 7)}
    spec = make_group_spec({"m1": member("a"), "m2": member("b"), "m3": member(None)})
    assert run(UNIFORM, spec, meta) == {
        "m1": {"t": fs(0, 1, 2)},
        "m2": {"t": fs(3, 4)},
        "m3": {"t": fs(5, 6)},
    }


# ---------------------------------------------------------------------- the plan


@pytest.mark.parametrize(
    ("supplies", "capacities", "weights", "extras", "room", "value"),
    [
        # the greedy start is optimal
        ([2, 1], [2, 1], [[5, 0], [0, 5]], 0, (), 15),
        # greedy would fill node 0 with type 0; type 1 is only good there
        ([1, 1], [1, 1], [[5, 4], [5, 0]], 0, (), 9),
        # one extra unit: it goes where it is worth most
        ([3], [1, 1], [[2, 5]], 1, (1, 1), 12),
    ],
)
def test_transport_is_exact(
    supplies: list[int],
    capacities: list[int],
    weights: list[list[int]],
    extras: int,
    room: tuple[int, ...],
    value: int,
) -> None:
    flow = transport(supplies, capacities, weights, extras=extras, extra_room=room)
    assert [sum(row) for row in flow] == supplies
    got = [sum(flow[i][v] for i in range(len(supplies))) for v in range(len(capacities))]
    assert all(g >= c for g, c in zip(got, capacities, strict=True))
    assert sum(got) == sum(capacities) + extras
    assert (
        sum(
            w * f for wr, fr in zip(weights, flow, strict=True) for w, f in zip(wr, fr, strict=True)
        )
        == value
    )


@st.composite
def transport_problems(
    draw: st.DrawFn,
) -> tuple[list[int], list[int], list[list[int]], int, list[int]]:
    types, nodes = draw(st.integers(1, 12)), draw(st.integers(1, 4))
    weights = [
        draw(st.lists(st.integers(0, 30), min_size=nodes, max_size=nodes)) for _ in range(types)
    ]
    capacities = draw(st.lists(st.integers(0, 9), min_size=nodes, max_size=nodes))
    room = draw(st.lists(st.integers(0, 3), min_size=nodes, max_size=nodes))
    extras = draw(st.integers(0, sum(room)))
    total = sum(capacities) + extras
    cuts = sorted(draw(st.lists(st.integers(0, total), min_size=types - 1, max_size=types - 1)))
    supplies = [b - a for a, b in zip([0, *cuts], [*cuts, total], strict=True)]
    return supplies, capacities, weights, extras, room


def _networkx_best(
    supplies: list[int],
    capacities: list[int],
    weights: list[list[int]],
    extras: int,
    room: list[int],
) -> int:
    g = nx.DiGraph()
    for i, s in enumerate(supplies):
        g.add_edge("s", ("t", i), capacity=s, weight=0)
        for v, w in enumerate(weights[i]):
            g.add_edge(("t", i), ("n", v), capacity=s, weight=-w)
    for v, c in enumerate(capacities):
        g.add_edge(("n", v), "sink", capacity=c, weight=0)
        g.add_edge(("n", v), "x", capacity=room[v], weight=0)
    g.add_edge("x", "sink", capacity=extras, weight=0)
    flow = nx.max_flow_min_cost(g, "s", "sink")
    return -int(nx.cost_of_flow(g, flow))


@PROPERTY
@given(transport_problems())
def test_transport_matches_an_independent_min_cost_flow(
    problem: tuple[list[int], list[int], list[list[int]], int, list[int]],
) -> None:
    supplies, capacities, weights, extras, room = problem
    flow = transport(supplies, capacities, weights, extras=extras, extra_room=room)
    assert [sum(row) for row in flow] == supplies
    for v in range(len(capacities)):
        got = sum(row[v] for row in flow)
        assert capacities[v] <= got <= capacities[v] + room[v]
    # The same plan with the extras each node takes: what it receives beyond its capacity.
    taken: list[int] = []
    again = transport(supplies, capacities, weights, extras=extras, extra_room=room, taken=taken)
    assert again == flow
    assert taken == [sum(row[v] for row in flow) - c for v, c in enumerate(capacities)]
    value = sum(
        w * f for wr, fr in zip(weights, flow, strict=True) for w, f in zip(wr, fr, strict=True)
    )
    assert value == _networkx_best(supplies, capacities, weights, extras, room)


def _plain_greedy(
    supplies: list[int],
    capacities: list[int],
    weights: list[list[int]],
    extras: int,
    room: list[int],
) -> tuple[list[list[int]], list[int], bool]:
    """The greedy start as documented, step by step: types by their best weight, highest
    first (then by index), each to its nodes by weight, highest first (then by index), while
    they have room: their capacity, then their share of the extras."""
    nodes = len(capacities)
    left, spare, taken = list(capacities), list(room), [0] * nodes
    flow = [[0] * nodes for _ in supplies]
    for i in sorted(range(len(supplies)), key=lambda i: (-max(weights[i]), i)):
        s = supplies[i]
        for v in sorted(range(nodes), key=lambda v: (-weights[i][v], v)):
            take = min(s, left[v])
            more = min(s - take, spare[v], extras) if extras else 0
            left[v] -= take
            spare[v] -= more
            extras -= more
            taken[v] += more
            flow[i][v] += take + more
            s -= take + more
    best = all(
        not f or w == max(row)
        for row, fr in zip(weights, flow, strict=True)
        for w, f in zip(row, fr, strict=True)
    )
    return flow, taken, best


@PROPERTY
@given(transport_problems())
def test_greedy_start_is_the_documented_rule(
    problem: tuple[list[int], list[int], list[list[int]], int, list[int]],
) -> None:
    """The plan's greedy start (its shortcuts for a type that its first best node takes
    whole, with or without extras, included) places every unit as the rule written out step
    by step does; also from a visiting order the caller kept (``greedy_order``)."""
    supplies, capacities, weights, extras, room = problem
    expected = _plain_greedy(supplies, capacities, weights, extras, room)
    assert _greedy(supplies, capacities, weights, extras, room) == expected
    order = greedy_order(weights)
    assert _greedy(supplies, capacities, weights, extras, room, order) == expected


def test_transport_without_nodes_refuses_in_band() -> None:
    """Units and no node to take them (all of them extras, no room): the plan's own error,
    not a ValueError from looking for a type's best node among none."""
    with pytest.raises(PartitionAssignorError, match="cannot place everything"):
        transport([1], [], [[]], extras=1, extra_room=[])


def test_rack_local_counts() -> None:
    meta = {"t": topic("t", 4, {0: "ab", 1: "b", 3: "a"}), "u": topic("u", 2)}
    assert count_rack_local("a", {"t": fs(0, 1, 2, 3), "u": fs(0)}, meta) == 2
    assert count_rack_local(None, {"t": fs(0)}, meta) == 0
    assert count_rack_local("a", {"gone": fs(0)}, meta) == 0


def test_assign_result_types() -> None:
    """Placed results are plain dicts of frozensets, as the coordinator's fast checks expect."""
    meta = {"t": topic("t", 4, {0: "a", 1: "b"})}
    spec = make_group_spec({"m1": member("b"), "m2": member("a")})
    result = UNIFORM.assign(spec, meta)
    assert isinstance(result, GroupAssignment)
    for a in result.members.values():
        assert type(a) is dict and all(type(p) is frozenset for p in a.values())


@pytest.mark.parametrize("racked", [True, False])
def test_no_computation_leaves_a_reference_cycle(racked: bool) -> None:
    """What a computation builds is freed by reference counting as soon as it ends: no path of
    either assignor (a whole computation, a leave through ``assign``, the incremental path from
    the summary, range) leaves objects that only the cyclic garbage collector can free — the
    coordinator runs that collector itself, between callbacks, and its worker processes after
    each job, so a cycle costs a scan of what it holds (a roster whose targets referred back to
    it kept every member's input alive: 16 objects here, tens of thousands in a big group)."""
    n, layout = 60, ("ab", "bc", "ca", "abc")
    meta = {
        t: topic(t, n, {p: layout[(p + k) % len(layout)] for p in range(n)} if racked else None)
        for k, t in enumerate(("t0", "t1"))
    }
    racks = {f"m{j:02d}": "abc"[j % 3] for j in range(12)}
    whole = run(
        UNIFORM, make_group_spec({m: member(r, ("t0", "t1")) for m, r in racks.items()}), meta
    )
    del racks["m04"]
    spec = make_group_spec({m: member(r, ("t0", "t1"), whole[m]) for m, r in racks.items()})
    with_summary = dataclasses.replace(spec, target_summary=summarize(spec, meta))
    calls = {
        "uniform whole": lambda: UNIFORM.assign(
            make_group_spec({m: member(r, ("t0", "t1")) for m, r in racks.items()}), meta
        ),
        "uniform leave": lambda: UNIFORM.assign(spec, meta),
        "uniform incremental": lambda: compute_uniform_changes(with_summary, meta),
        "range": lambda: RANGE.assign(spec, meta),
    }
    gc.collect()
    left = {}
    gc.disable()
    try:
        for name, call in calls.items():
            assert call() is not None
            left[name] = gc.collect()
    finally:
        gc.enable()
    assert left == dict.fromkeys(calls, 0)
