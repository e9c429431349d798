"""How the rack-aware assignors count (assignors/racks.py, racks_range.py, uniform.py): the
C-level counts against plain Python counts partition by partition, the checks those passes make
on the way (an index out of range, an owner who is no member), and the fast cleanup of
``uniform`` with racks against its general path."""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from collections.abc import Mapping
from itertools import chain

import pytest

from assignors import racks_members
from assignors.api import (
    GroupSpec,
    MemberSubscription,
    PartitionAssignorError,
    SubscriptionType,
    TopicMetadata,
)
from assignors.loads import member_loads
from assignors.racks import RackNodes, count_owned, ones_at, relevant_racks
from assignors.racks_members import _first, _less
from assignors.racks_range import Indexes, _deal, _index_keys
from assignors.range import RangeAssignor
from assignors.summary import summarize
from assignors.uniform import UniformAssignor, _Builder
from assignors.validation import check_assignment

UNIFORM, RANGE = UniformAssignor(), RangeAssignor()
RACKS = ("a", "b", "c", "d", "e", "f", "g", "h", "i", "j")


def racked_topics(
    rng: random.Random, count: int, sizes: tuple[int, ...], racks: int
) -> dict[str, TopicMetadata]:
    """Topics whose partitions have replicas in 1-3 of the first ``racks`` racks (a few
    partitions with none known)."""
    names = RACKS[:racks]
    out = {}
    for k in range(count):
        n = rng.choice(sizes)
        out[f"t{k:03d}"] = TopicMetadata(
            topic_id=f"t{k:03d}",
            name=f"n{k}",
            num_partitions=n,
            partition_racks={
                p: frozenset(rng.sample(names, rng.randint(1, min(3, racks))))
                for p in range(n)
                if rng.random() < 0.9
            },
        )
    return out


def dealt(
    rng: random.Random, ids: list[str], topics: Mapping[str, TopicMetadata], share: float = 0.8
) -> dict[str, dict[str, frozenset[int]]]:
    """Each partition to a random member, or to nobody (``1 - share`` of them)."""
    held: dict[str, dict[str, set[int]]] = {m: {} for m in ids}
    for t, metadata in topics.items():
        for p in range(metadata.num_partitions):
            if rng.random() < share:
                held[rng.choice(ids)].setdefault(t, set()).add(p)
    return {m: {t: frozenset(ps) for t, ps in a.items()} for m, a in held.items()}


def owners_of(current: Mapping[str, Mapping[str, frozenset[int]]]) -> dict[str, dict[int, str]]:
    owners: dict[str, dict[int, str]] = {}
    for m in sorted(current):
        for t, ps in current[m].items():
            owners.setdefault(t, {}).update(dict.fromkeys(sorted(ps, key=lambda p: -p), m))
    return owners


def counted_one_by_one(
    nodes: RackNodes,
    rack_of: Mapping[str, str | None],
    current: Mapping[str, Mapping[str, frozenset[int]]],
    topics: Mapping[str, TopicMetadata],
) -> Counter[tuple[int, int]]:
    counts: Counter[tuple[int, int]] = Counter()
    for m, assignment in current.items():
        for t, ps in assignment.items():
            for p in ps:
                racks = topics[t].partition_racks.get(p, frozenset())
                counts[(nodes.mask(racks), nodes.node(rack_of[m]))] += 1
    return counts


@pytest.mark.parametrize("seed", range(40))
def test_count_owned_counts_what_a_count_partition_by_partition_does(seed: int) -> None:
    rng = random.Random(seed)
    racks = rng.randint(1, 8)
    topics = racked_topics(rng, rng.randint(1, 6), (1, 7, 100, 256, 257, 900), racks)
    ids = [f"m{j:02d}" for j in range(rng.randint(1, 30))]
    rack_of = {m: rng.choice([*RACKS[: racks + 1], None]) for m in ids}  # one rack without replicas
    current = dealt(rng, ids, topics, rng.choice([0.8, 1.0]))  # some topics held whole, or all
    relevant = relevant_racks(rack_of.values(), sorted(topics), topics)
    if not relevant:
        return
    nodes = RackNodes(relevant)
    counted = count_owned(
        nodes, ids, [rack_of[m] for m in ids], owners_of(current), sorted(topics), topics
    )
    assert counted is not None
    assert counted.counts == counted_one_by_one(nodes, rack_of, current, topics)
    assert counted.node_of == [nodes.node(rack_of[m]) for m in ids]
    assert counted.by_member == {m: nodes.node(rack_of[m]) for m in ids}
    # Given the loads, the partitions local everywhere are counted from them: the same counts.
    loads = [sum(map(len, current[m].values())) for m in ids]
    owners = owners_of(current)
    with_loads = count_owned(
        nodes, ids, [rack_of[m] for m in ids], owners, sorted(topics), topics, loads
    )
    assert with_loads is not None
    assert with_loads.counts == counted.counts


@pytest.mark.parametrize(
    ("n", "index", "whole"),
    [
        (10, 10, False),  # a small topic: past the end
        (10, 300, False),  # not a byte
        (10, -1, False),
        (10, -1, True),
        (300, 300, False),  # a big topic: past the end
        (300, 700, False),
        (300, -301, False),  # before the start, even read from the end
        (300, -1, True),  # a topic held whole: its indexes do not add up
        (300, -290, True),
    ],
)
def test_count_owned_refuses_an_index_out_of_range(n: int, index: int, whole: bool) -> None:
    topics = {
        "t": TopicMetadata(
            topic_id="t", name="t", num_partitions=n, partition_racks={0: frozenset("a")}
        )
    }
    owned = dict.fromkeys(range(n - 1 if whole else n // 2), "m0")
    owned[index] = "m1"
    counted = count_owned(RackNodes(["a"]), ["m0", "m1"], ["a", "b"], {"t": owned}, ["t"], topics)
    assert counted is None


def test_count_owned_refuses_an_owner_who_is_no_member_and_too_many_nodes() -> None:
    topics = {
        "t": TopicMetadata(
            topic_id="t", name="t", num_partitions=4, partition_racks={0: frozenset("a")}
        )
    }
    assert (
        count_owned(RackNodes(["a"]), ["m0"], ["a"], {"t": {0: "m0", 1: "gone"}}, ["t"], topics)
        is None
    )
    many = RackNodes([f"r{j:03d}" for j in range(254)])  # 255 nodes: no byte left for nobody
    assert count_owned(many, ["m0"], ["r000"], {"t": {0: "m0"}}, ["t"], topics) is None


def two_racks_topic(n: int) -> dict[str, TopicMetadata]:
    """Partitions 0..n-3 local to racks a and b, n-2 to a alone, n-1 to b alone."""
    racks = {p: frozenset("ab") for p in range(n - 2)} | {
        n - 2: frozenset("a"),
        n - 1: frozenset("b"),
    }
    return {"t": TopicMetadata(topic_id="t", name="t", num_partitions=n, partition_racks=racks)}


@pytest.mark.parametrize("n", [3, 4, 8, 300])
def test_count_owned_with_loads_counts_the_partitions_local_everywhere_from_them(n: int) -> None:
    """Members in a, b and none; given the loads, the partitions local to a and b are not
    looked up: each node's count of them is its members' load less its other counts. With one
    such partition (n = 3) the rest is one key; with none looked up at all, too."""
    topics = two_racks_topic(n)
    ids, racks = ["m0", "m1", "m2"], ["a", "b", None]
    rack_of = dict(zip(ids, racks, strict=True))
    everywhere = list(range(n - 2))
    current = {
        "m0": {"t": frozenset([*everywhere[::3], n - 2])},
        "m1": {"t": frozenset([*everywhere[1::3], n - 1])},
        "m2": {"t": frozenset(everywhere[2::3])} if n > 4 else {},
    }
    loads = [sum(map(len, current[m].values())) for m in ids]
    nodes = RackNodes(["a", "b"])
    counted = count_owned(nodes, ids, racks, owners_of(current), ["t"], topics, loads)
    assert counted is not None
    assert counted.counts == counted_one_by_one(nodes, rack_of, current, topics)
    # Every partition local everywhere: nothing is looked up.
    whole = {
        "t": TopicMetadata(
            topic_id="t",
            name="t",
            num_partitions=n,
            partition_racks={p: frozenset("ab") for p in range(n)},
        )
    }
    current = {
        "m0": {"t": frozenset(range(0, n, 2))},
        "m1": {"t": frozenset(range(1, n, 2))},
        "m2": {},
    }
    loads = [sum(map(len, current[m].values())) for m in ids]
    counted = count_owned(nodes, ids, racks, owners_of(current), ["t"], whole, loads)
    assert counted is not None
    assert counted.counts == counted_one_by_one(nodes, rack_of, current, whole)


@pytest.mark.parametrize("n", [1, 2, 5, 300])
@pytest.mark.parametrize("free", [False, True])
def test_count_owned_with_loads_and_one_partition_not_local_everywhere(n: int, free: bool) -> None:
    """Partition 0 local to rack a alone, the others (none for n = 1) to a and b: a topic
    whose holders looked up are one (an ``itemgetter`` of one key gives the value, not a
    tuple), held whole or with partition 0 free (then looked up one by one)."""
    racks_of = {0: frozenset("a")} | {p: frozenset("ab") for p in range(1, n)}
    topics = {
        "t": TopicMetadata(topic_id="t", name="t", num_partitions=n, partition_racks=racks_of)
    }
    ids, racks = ["m0", "m1", "m2"], ["a", "b", None]
    rack_of = dict(zip(ids, racks, strict=True))
    held = range(1 if free else 0, n)
    current = {m: {"t": frozenset(held[j::3])} for j, m in enumerate(ids) if held[j::3]}
    loads = [sum(map(len, current.get(m, {}).values())) for m in ids]
    nodes = RackNodes(["a", "b"])
    owners = owners_of(current)
    for given in (None, loads):
        counted = count_owned(nodes, ids, racks, owners, ["t"], topics, given)
        assert counted is not None
        assert counted.counts == counted_one_by_one(nodes, rack_of, current, topics)
    # Partition 0's holder no member: declined, whether it is looked up or not.
    if not free:
        gone = {"t": {**owners["t"], 0: "gone"}}
        assert count_owned(nodes, ids, racks, gone, ["t"], topics, loads) is None


def test_count_owned_with_loads_checks_what_it_does_not_look_up() -> None:
    """An owner who is no member (of a partition local everywhere): when no member holds that
    partition the loads fall short of the owners, and the count declines; when a member holds
    it all the same, the count is the members' own. An index out of range, or more owners than
    the loads add up to, is declined too."""
    topics = two_racks_topic(8)  # 0-5 local to a and b, 6 to a, 7 to b
    ids, racks = ["m0", "m1"], ["a", "b"]
    nodes = RackNodes(["a", "b"])
    current = {"m0": {"t": frozenset({0, 1, 2, 6})}, "m1": {"t": frozenset({3, 4, 5, 7})}}
    rack_of = dict(zip(ids, racks, strict=True))
    expected = counted_one_by_one(nodes, rack_of, current, topics)

    def count(owned: dict[int, str], loads: list[int]) -> object:
        counted = count_owned(nodes, ids, racks, {"t": owned}, ["t"], topics, loads)
        return None if counted is None else counted.counts

    owned = owners_of(current)["t"]
    assert count(owned, [4, 4]) == expected
    assert count({**owned, 2: "gone"}, [4, 4]) == expected  # m0 holds 2 all the same
    assert count({**owned, 2: "gone"}, [3, 4]) is None  # nobody holds 2: the loads fall short
    assert count({**owned, 8: "m1"}, [4, 5]) is None  # an index out of range
    assert count({**owned, 6: "gone"}, [4, 4]) is None  # looked up: no member
    assert count(owned, [4, 5]) is None  # the loads do not add up to the owners
    assert count({**owned, 1: "m1"}, [4, 4]) == expected  # the members' own count


def test_uniform_with_racks_and_an_owner_who_is_no_member_reads_the_members(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The owners name someone who is no member for a partition a member holds (the loads
    still add up to the owners): the count declines and the members' assignments decide, as
    the general cleanup does (the owners stood for the holders before, and the placement
    failed: "a node could not give up what the plan says")."""
    racks = {0: frozenset("a"), 1: frozenset("b"), 2: frozenset("a"), 3: frozenset("b")}
    topics = {"t": TopicMetadata(topic_id="t", name="t", num_partitions=4, partition_racks=racks)}
    current = {"m0": {"t": frozenset({0, 1})}, "m1": {"t": frozenset({2, 3})}}
    members = {
        m: MemberSubscription(
            rack_id=rack,
            instance_id=None,
            subscribed_topic_ids=frozenset({"t"}),
            assignment=current[m],
        )
        for m, rack in (("m0", "a"), ("m1", "b"))
    }
    spec = GroupSpec(
        members=members,
        subscription_type=SubscriptionType.HOMOGENEOUS,
        partition_owners={"t": {0: "m0", 1: "gone", 2: "m1", 3: "m1"}},
    )
    result = UNIFORM.assign(spec, topics)
    check_assignment(spec, topics, result)
    assert result.members == {"m0": {"t": frozenset({0, 2})}, "m1": {"t": frozenset({1, 3})}}
    assert result.members == general_path(monkeypatch, spec, topics)


def general_path(
    monkeypatch: pytest.MonkeyPatch, spec: GroupSpec, topics: Mapping[str, TopicMetadata]
) -> object:
    with monkeypatch.context() as m:
        m.setattr(_Builder, "_clean_from_owners", lambda self: False)
        m.setattr(_Builder, "_clean_one_class", lambda self: False)
        return UNIFORM.assign(spec, topics).members


@pytest.mark.parametrize("seed", range(300))
def test_uniform_with_racks_from_the_owners_equals_the_general_path(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Targets from the owners (counted by count_owned), sometimes with an index out of range
    — past the end, negative, in a small or a big topic, held whole or in part — equal the
    result of the general cleanup, which looks at every member's partitions."""
    rng = random.Random(seed)
    topics = racked_topics(rng, rng.randint(1, 4), (3, 40, 257, 400), rng.randint(1, 4))
    ids = [f"m{j:02d}" for j in range(rng.randint(1, 12))]
    current = dealt(rng, ids, topics)
    if rng.random() < 0.5:
        t = rng.choice(sorted(topics))
        n = topics[t].num_partitions
        m = rng.choice(ids)
        current[m] = {
            **current[m],
            t: current[m].get(t, frozenset()) | {rng.choice([n, -1, -n, n + 1, 2 * n])},
        }
    members = {
        m: MemberSubscription(
            rack_id=rng.choice(["a", "b", "c", "z", None]),
            instance_id=None,
            subscribed_topic_ids=frozenset(topics),
            assignment=current[m],
        )
        for m in ids
    }
    owners = owners_of(current)
    if rng.random() < 0.3 and owners:
        # An owner who is no member, of a partition some member holds all the same (the
        # coordinator's owners never are so; the count takes such a partition local
        # everywhere from the loads).
        t = rng.choice(sorted(owners))
        owners[t] = {**owners[t], rng.choice(sorted(owners[t])): "gone"}
    spec = GroupSpec(
        members=members,
        subscription_type=SubscriptionType.HOMOGENEOUS,
        partition_owners=owners,
    )
    result = UNIFORM.assign(spec, topics)
    check_assignment(spec, topics, result)
    assert result.members == general_path(monkeypatch, spec, topics)


@pytest.mark.parametrize("seed", range(30))
def test_loads_are_the_members_sums(seed: int) -> None:
    """Mostly one topic each (the sizes' runs are sliced), or not (prefix sums), or exactly."""
    rng = random.Random(seed)
    share = rng.choice([0.0, 0.05, 0.5])
    assignments: list[dict[str, frozenset[int]]] = []
    for _ in range(rng.randint(1, 200)):
        topics = 1 if rng.random() >= share else rng.choice([0, 2, 3])
        assignments.append({f"t{k}": frozenset(range(rng.randint(1, 5))) for k in range(topics)})
    assert member_loads(assignments) == [sum(map(len, a.values())) for a in assignments]


def test_loads_of_a_member_across_more_than_255_topics() -> None:
    """Mostly one topic each, one member across 300 (its count does not fit a byte)."""
    assignments = [{"t": frozenset({1, 2})} for _ in range(40)]
    assignments[7] = {f"t{k}": frozenset({k}) for k in range(300)}
    assignments[9] = {}
    expected = [sum(map(len, a.values())) for a in assignments]
    assert member_loads(assignments) == expected
    assert member_loads([assignments[7]]) == [300]


@pytest.mark.parametrize(
    ("topics", "n", "racks"),
    [
        (1, 50, 4),
        (2, 50, 3),
        (2, 30, 2),
        (3, 50, 3),
        (255, 4, 3),
        (256, 4, 2),
        (300, 7, 3),
        (600, 3, 4),
        (5, 20, 9),
    ],
)
def test_index_keys_equal_the_index_by_index_sums(topics: int, n: int, racks: int) -> None:
    """The keys of range's indexes through integer lanes (by chunks of 255 topics, lanes of 1,
    2 or 8 bytes; one or two topics by one translate of both masks) equal the same sums index
    by index (a list owner sequence takes that way)."""
    rng = random.Random(topics * n)
    meta = racked_topics(rng, topics, (n,), racks)
    group = sorted(meta)
    nodes = RackNodes(RACKS[:racks])
    owner = bytes(rng.randrange(nodes.count) for _ in range(n))
    keys = _index_keys(nodes, group, n, meta, owner, topics + 1)
    assert keys == _index_keys(nodes, group, n, meta, list(owner), topics + 1)
    weights = [[0] * racks for _ in range(n)]
    for t in group:
        for p in range(n):
            for v, rack in enumerate(nodes.racks):
                weights[p][v] += rack in meta[t].partition_racks.get(p, frozenset())
    expected = [
        sum(c * (topics + 1) ** (racks - 1 - v) for v, c in enumerate(w)) * nodes.count + owner[p]
        for p, w in enumerate(weights)
    ]
    assert keys == expected


@pytest.mark.parametrize("coded", [True, False])
def test_deal_gives_each_member_its_run(coded: bool) -> None:
    """Per node its indexes, ascending, in runs to its members in order — the first ``extra``
    members one more, a node without members, runs of one index (the one-index sets shared
    through :class:`Indexes`) — alike with the nodes as bytes (C-level) or as lists; indexes
    that do not fit their node's members are an internal error."""

    def deal(node: list[int], quota: int, extra: int, node_of: list[int], indexes: Indexes):
        if coded:
            return _deal(bytes(node), quota, extra, bytes(node_of), 3, indexes)
        return _deal(node, quota, extra, node_of, 3, indexes)

    node = [0, 1, 0, 0, 1]  # node 2 has no members
    # Two each: node 0 holds 2, 4, 5, 6, 7, 9; node 1 holds 0, 1, 3, 8.
    assert deal(node, 2, 0, [1, 1, 0, 1, 0, 0, 0, 0, 1, 0], Indexes(10)) == [
        frozenset({2, 4}),
        frozenset({0, 1}),
        frozenset({5, 6}),
        frozenset({7, 9}),
        frozenset({3, 8}),
    ]
    # Two to the first three, then one: node 0 holds 1, 2, 4, 6, 7; node 1 holds 0, 3, 5.
    indexes = Indexes(8)
    dealt = deal(node, 1, 3, [1, 0, 0, 1, 0, 1, 0, 0], indexes)
    assert dealt == [frozenset({1, 2}), frozenset({0, 3}), frozenset({4, 6}), fs(7), fs(5)]
    assert dealt[3] is indexes.ones()[7] and dealt[4] is indexes.ones()[5]
    # One each to the first three (fewer partitions than members).
    dealt = deal([0, 1, 0], 0, 3, [1, 0, 0], indexes := Indexes(3))
    assert dealt == [fs(1), fs(0), fs(2)]
    assert all(s is indexes.ones()[min(s)] for s in dealt)
    with pytest.raises(PartitionAssignorError, match="do not fit"):
        deal(node, 1, 3, [1, 0, 0, 1, 0, 1, 0, 1], Indexes(8))  # node 1 one too many


@pytest.mark.parametrize("coded", [True, False])
def test_deal_gives_back_the_current_sets_it_places_again(coded: bool) -> None:
    """With the members' current sets, a member whose run is its current set gets that very
    set back; the others — a current set with one index more or one less, another member's
    run, none (empty), an equal ``set`` (mutable: never given back) — get a new one; the
    runs are those dealt without current sets."""
    node = [0, 1, 0, 0, 1]
    node_of = [1, 1, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0]  # quota 2, the first four get 3
    dealt = _deal(node, 2, 4, node_of, 3, Indexes(14))
    assert dealt == [fs(2, 4, 5), fs(0, 1, 3), fs(6, 7, 9), fs(10, 11, 13), fs(8, 12)]
    current: list[frozenset[int]] = [
        fs(2, 4, 5),  # its run: given back
        fs(0, 1, 3, 8),  # one more
        fs(6, 7),  # one less
        fs(0, 1, 3),  # another member's run
        frozenset(),
    ]
    mutable = set(dealt[4])
    if coded:
        again = _deal(bytes(node), 2, 4, bytes(node_of), 3, Indexes(14), current)
    else:
        again = _deal(node, 2, 4, node_of, 3, Indexes(14), current)
    assert again == dealt
    assert again[0] is current[0]
    assert all(again[j] is not current[j] for j in range(1, 5))
    with_set = _deal(node, 2, 4, node_of, 3, Indexes(14), [*dealt[:4], mutable])  # type: ignore[list-item]
    assert with_set == dealt
    assert all(with_set[j] is dealt[j] for j in range(4))
    assert type(with_set[4]) is frozenset


@pytest.mark.parametrize("quota", [2, 4, 5, 6, 7, 8, 20])
def test_deal_makes_runs_of_any_size_as_frozensets(quota: int) -> None:
    """Runs of every size (those of five to seven indexes made through a dict, sized for them
    at once) are frozensets of exactly the node's next indexes, fresh or compared with the
    current sets (a changed one made anew, an unchanged one given back)."""
    node = [0, 1, 0]
    n = 3 * quota + 1  # the first member one more
    node_of = [int(i % 3 == 1) for i in range(n)]  # node 0: 2 · quota + 1 indexes, node 1: quota
    zero = [i for i in range(n) if i % 3 != 1]
    one = [i for i in range(n) if i % 3 == 1]
    expected = [fs(*zero[: quota + 1]), fs(*one), fs(*zero[quota + 1 :])]
    for coded in (True, False):
        nodes, owners = (bytes(node), bytes(node_of)) if coded else (node, node_of)
        dealt = _deal(nodes, quota, 1, owners, 2, Indexes(n))
        assert dealt == expected and all(type(s) is frozenset for s in dealt)
        current = [expected[0], fs(*one[1:]), expected[2]]
        again = _deal(nodes, quota, 1, owners, 2, Indexes(n), current)
        assert again == expected and again[0] is current[0] and again[2] is current[2]
        assert type(again[1]) is frozenset


def fs(*partitions: int) -> frozenset[int]:
    return frozenset(partitions)


def test_range_over_hundreds_of_co_partitioned_topics() -> None:
    """300 co-partitioned topics (their counts by chunks of 255): every member gets as many
    indexes as rack-blind, the same of every topic, at least as many local ones; racks
    without partitions' replicas change nothing."""
    rng = random.Random(7)
    meta = racked_topics(rng, 300, (12,), 3)
    members = {
        f"m{j}": MemberSubscription(
            rack_id="abc"[j % 3],
            instance_id=None,
            subscribed_topic_ids=frozenset(meta),
            assignment={},
        )
        for j in range(5)
    }
    spec = GroupSpec(members=members, subscription_type=SubscriptionType.HOMOGENEOUS)
    result = RANGE.assign(spec, meta)
    check_assignment(spec, meta, result)
    plain = {t: TopicMetadata(topic_id=t, name=m.name, num_partitions=12) for t, m in meta.items()}
    blind = RANGE.assign(spec, plain).members
    for m, a in result.members.items():
        assert {t: len(ps) for t, ps in a.items()} == {t: len(ps) for t, ps in blind[m].items()}
        assert len(set(a.values())) == 1  # the same indexes of every topic

    def local(assignment: Mapping[str, Mapping[str, frozenset[int]]]) -> int:
        return sum(
            spec.members[m].rack_id in meta[t].partition_racks.get(p, frozenset())
            for m, a in assignment.items()
            for t, ps in a.items()
            for p in ps
        )

    assert local(result.members) > local(blind)


def test_first_ids_across_sorted_buckets() -> None:
    """The k smallest ids across disjoint sorted buckets, as prefix lengths of each."""
    buckets = [("a", "d", "g", "k"), ("b", "c", "h"), ("e", "f", "i", "j")]
    everything = sorted(chain.from_iterable(buckets))
    for k in range(len(everything) + 2):
        first = set(everything[:k])
        assert _first(buckets, k) == [sum(m in first for m in b) for b in buckets]
    assert _first([("x", "y")], 1) == [1]
    assert _first([(), ("x",)], 1) == [0, 1]


@pytest.mark.parametrize("seed", range(25))
def test_the_incremental_path_splits_buckets_as_the_whole_computation(seed: int) -> None:
    """A settled group with members in racks with replicas and in several without (x, y,
    none: one node) that newcomers join, then members leave: the quota moves, so a node's
    extra partitions go to a prefix of several (rack, load) buckets; assign_changes (the
    members in buckets) equals assign member for member, and names exactly the members whose
    assignment changes."""
    rng = random.Random(seed)
    topics = racked_topics(rng, 2, (60, 90), 3)
    racks = ["a", "b", "c", "x", "y", None]
    rack_of = {f"m{j:02d}": rng.choice(racks) for j in range(rng.randint(6, 20))}
    current: dict[str, dict[str, frozenset[int]]] = {m: {} for m in rack_of}
    for step in ("settle", "join", "leave"):
        if step == "join":
            for j in range(rng.randint(1, 4)):
                rack_of[f"n{j}"] = rng.choice(racks)
                current[f"n{j}"] = {}
        elif step == "leave":
            for m in rng.sample(sorted(rack_of), rng.randint(1, 3)):
                del rack_of[m], current[m]
        members = {
            m: MemberSubscription(
                rack_id=r,
                instance_id=None,
                subscribed_topic_ids=frozenset(topics),
                assignment=current[m],
            )
            for m, r in rack_of.items()
        }
        spec = GroupSpec(
            members=members,
            subscription_type=SubscriptionType.HOMOGENEOUS,
            partition_owners=owners_of(current),
        )
        whole = UNIFORM.assign(spec, topics).members
        summary = summarize(spec, topics)
        assert summary is not None and summary.members_by_rack is not None
        given = dataclasses.replace(spec, target_summary=summary)
        changes = UNIFORM.assign_changes(given, topics)
        assert changes is not None
        assert {m: changes.get(m, s.assignment) for m, s in members.items()} == whole, step
        assert sorted(changes) == sorted(m for m in whole if whole[m] is not members[m].assignment)
        current = {m: dict(a) for m, a in whole.items()}


def test_without_the_members_by_rack_the_incremental_path_declines() -> None:
    """A summary that counts the held partitions by racks but not the members (as a plugin
    might build it): with racks relevant, assign_changes leaves the group to assign."""
    topics = {
        "t": TopicMetadata(
            topic_id="t", name="t", num_partitions=4, partition_racks={0: frozenset("a")}
        )
    }
    members = {
        m: MemberSubscription(
            rack_id="a", instance_id=None, subscribed_topic_ids=frozenset("t"), assignment={}
        )
        for m in ("m0", "m1")
    }
    spec = GroupSpec(members=members, subscription_type=SubscriptionType.HOMOGENEOUS)
    summary = summarize(spec, topics)
    assert summary is not None
    given = dataclasses.replace(
        spec, target_summary=dataclasses.replace(summary, members_by_rack=None)
    )
    assert UNIFORM.assign_changes(given, topics) is None
    assert (
        UNIFORM.assign_changes(dataclasses.replace(spec, target_summary=summary), topics)
        is not None
    )


def test_relevant_racks_replica_racks_and_memo() -> None:
    """The racks some member is in and some topic holds a replica in (a member without a rack,
    a rack without replicas, topics without racks: none of them); a topic's replica racks and
    what an assignor keeps with its metadata, computed once."""
    topics = {
        "t0": TopicMetadata(topic_id="t0", name="t0", num_partitions=3),
        "t1": TopicMetadata(
            topic_id="t1",
            name="t1",
            num_partitions=3,
            partition_racks={0: frozenset("ab"), 2: frozenset("c")},
        ),
        "t2": TopicMetadata(
            topic_id="t2", name="t2", num_partitions=1, partition_racks={0: frozenset("d")}
        ),
    }
    assert topics["t1"].replica_racks() == frozenset("abc")
    assert topics["t0"].replica_racks() == frozenset()
    everything = ["t0", "t1", "t2"]
    assert relevant_racks(["a", None, "z", "d", "a"], everything, topics) == ["a", "d"]
    assert relevant_racks(["c"], ["t0", "t2"], topics) == []
    assert relevant_racks([None], everything, topics) == []
    assert relevant_racks(["c", "a"], ["t1", "t2"], topics) == ["a", "c"]
    made: list[int] = []

    def make() -> int:
        made.append(1)
        return len(made)

    assert topics["t1"].memo("k", make) == 1
    assert topics["t1"].memo("k", make) == 1
    assert topics["t1"].memo("other", make) == 2
    assert topics["t2"].memo("k", make) == 3


@pytest.mark.parametrize("seed", range(60))
def test_heterogeneous_uniform_with_racks_from_the_owners_equals_without_them(seed: int) -> None:
    """Several subscription classes, some topics only one class subscribes: the holders of
    those are read from the owners (the coordinator's inverse of the targets) instead of the
    members' assignments — same result as with no owners given, also when an owner's index
    is out of range (the class's count falls short: the holders from the members instead) or
    a member of another class is named (not used), and after the classes trade partitions."""
    rng = random.Random(seed)
    topics = racked_topics(rng, rng.randint(2, 5), (3, 40, 257, 400), rng.randint(1, 4))
    names = sorted(topics)
    ids = [f"m{j:02d}" for j in range(rng.randint(2, 14))]
    subscriptions = [
        frozenset(rng.sample(names, rng.randint(1, len(names)))) for _ in range(rng.randint(2, 3))
    ]
    subscribed = {m: rng.choice(subscriptions) for m in ids}
    held: dict[str, dict[str, set[int]]] = {m: {} for m in ids}
    for t in names:
        takers = [m for m in ids if t in subscribed[m]]
        for p in range(topics[t].num_partitions):
            if takers and rng.random() < 0.8:
                held[rng.choice(takers)].setdefault(t, set()).add(p)
    current = {m: {t: frozenset(ps) for t, ps in a.items()} for m, a in held.items()}
    owners = owners_of(current)
    fault = rng.random()
    if fault < 0.25 and owners:  # an index out of range, as many owners as held partitions
        t = rng.choice(sorted(owners))
        owned = owners[t]
        moved = max(owned)
        owned[topics[t].num_partitions + 3] = owned.pop(moved)
    elif fault < 0.4 and owners:  # a member of another subscription named as an owner
        t = rng.choice(sorted(owners))
        others = [m for m in ids if t not in subscribed[m]]
        if others:
            owners[t][next(iter(owners[t]))] = rng.choice(others)
    members = {
        m: MemberSubscription(
            rack_id=rng.choice(["a", "b", "c", "z", None]),
            instance_id=None,
            subscribed_topic_ids=subscribed[m],
            assignment=current[m],
        )
        for m in ids
    }
    spec = GroupSpec(
        members=members,
        subscription_type=SubscriptionType.HETEROGENEOUS,
        partition_owners=owners,
    )
    result = UNIFORM.assign(spec, topics)
    check_assignment(spec, topics, result)
    without = dataclasses.replace(spec, partition_owners={})
    assert result.members == UNIFORM.assign(without, topics).members


def two_classes_on_their_own_topics(
    seed: int, share: int, stranger: str | None = None
) -> tuple[GroupSpec, dict[str, TopicMetadata], list[str]]:
    """Twelve members in racks a, b, c, two classes of six on two topics of their own (300
    partitions each), each taker holding ``share`` of each topic in a run (the last taker
    nothing when the shares do not cover the topic); ``stranger``: the owner named for
    partition 3 of the first topic (which the first member holds)."""
    rng = random.Random(seed)
    topics = racked_topics(rng, 4, (300,), 3)
    names = sorted(topics)
    ids = [f"m{j:02d}" for j in range(12)]
    subscribed = {
        m: frozenset(names[:2]) if j < 6 else frozenset(names[2:]) for j, m in enumerate(ids)
    }
    current: dict[str, dict[str, frozenset[int]]] = {m: {} for m in ids}
    for t in names:
        takers = [m for m in ids if t in subscribed[m]]
        for k, m in enumerate(takers):
            if (k + 1) * share <= 300:
                current[m][t] = frozenset(range(k * share, k * share + share))
    members = {
        m: MemberSubscription(
            rack_id="abc"[j % 3],
            instance_id=None,
            subscribed_topic_ids=subscribed[m],
            assignment=current[m],
        )
        for j, m in enumerate(ids)
    }
    owners = owners_of(current)
    if stranger is not None:
        owners[names[0]][3] = stranger
    spec = GroupSpec(
        members=members,
        subscription_type=SubscriptionType.HETEROGENEOUS,
        partition_owners=owners,
    )
    return spec, topics, names


def test_heterogeneous_uniform_reads_the_holders_of_a_class_s_own_topics_from_the_owners(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The owners are used (not only the members' assignments) when a class has topics of its
    own — holders looked up and partitions counted from them —, and the result is the one
    without owners."""
    spec, topics, names = two_classes_on_their_own_topics(3, 40)
    import assignors.racks_uniform as racks_uniform

    calls: list[frozenset[str]] = []
    original = racks_uniform._ClassSettle._some_holders

    def spy(self: racks_uniform._ClassSettle, topic_ids: list[str], owners: object) -> object:
        calls.append(frozenset(owners.only))  # type: ignore[attr-defined]
        return original(self, topic_ids, owners)  # type: ignore[arg-type]

    monkeypatch.setattr(racks_uniform._ClassSettle, "_some_holders", spy)
    result = UNIFORM.assign(spec, topics)
    monkeypatch.undo()
    check_assignment(spec, topics, result)
    assert sorted(calls, key=sorted) == [frozenset(names[:2]), frozenset(names[2:])]
    without = dataclasses.replace(spec, partition_owners={})
    assert result.members == UNIFORM.assign(without, topics).members


@pytest.mark.parametrize("stranger", ["m07", "ghost"])
def test_heterogeneous_uniform_with_an_owner_outside_the_class_reads_the_members(
    stranger: str,
) -> None:
    """A class's own topic whose owners name someone outside the class (a member of the
    other class, or no member at all) is counted from the members' assignments, like the
    class's other topics: the result is the one without owners."""
    spec, topics, _names = two_classes_on_their_own_topics(5, 55, stranger)
    result = UNIFORM.assign(spec, topics)
    check_assignment(spec, topics, result)
    without = dataclasses.replace(spec, partition_owners={})
    assert result.members == UNIFORM.assign(without, topics).members


def test_range_places_by_lanes_as_by_sorting_the_indexes(monkeypatch: pytest.MonkeyPatch) -> None:
    """On random heterogeneous racked groups — buckets of members on their own co-partitioned
    topics, some buckets laid out alike, or alike but for one partition's racks or one
    member's rack, members out of every rack, with current assignments — ``range`` places each
    group's indexes by key lanes (one byte per index, a translate table changing at a few
    positions) exactly as sorting the indexes by key does, member for member; the cases cover
    keys kept in part by their node and types sent to several nodes."""
    import assignors.racks_range as racks_range

    lanes_calls: list[int] = []
    kept_in_part: list[int] = []
    split_types: list[int] = []
    by_lanes, position = racks_range._nodes_by_lanes, racks_range._position

    def lanes_spy(
        keys: bytes, stride: int, codes: list[int], sizes: list[int], flow: list[list[int]]
    ) -> bytes:
        lanes_calls.append(len(keys))
        for j, wanted in enumerate(flow):
            own = sizes[j * stride : (j + 1) * stride]
            kept_in_part.extend(v for v, size in enumerate(own) if 0 < wanted[v] < size)
        return by_lanes(keys, stride, codes, sizes, flow)

    def position_spy(keys: bytes, moving: list[tuple[int, int]], count: int) -> int:
        if count and len(moving) > 1:
            split_types.append(count)
        return position(keys, moving, count)

    def by_order(
        keys: bytes, stride: int, codes: list[int], sizes: list[int], flow: list[list[int]]
    ) -> bytes:
        counted = Counter(keys)
        found = sorted(counted)
        ranks = [codes.index(k // stride) for k in found]
        return bytes(
            racks_range._nodes_by_order(list(keys), stride, codes, found, ranks, counted, flow)
        )

    for seed in range(120):
        rng = random.Random(seed)
        racks = rng.randint(2, 5)
        n = rng.choice([6, 13, 40, 97])
        base = racked_topics(rng, rng.randint(1, 3), (n,), racks)
        topics: dict[str, TopicMetadata] = {}
        subscribed: dict[str, frozenset[str]] = {}
        member_racks = [rng.choice([None, *RACKS[: racks + 1]]) for _ in range(rng.randint(1, 30))]
        for b in range(rng.randint(2, 5)):
            mine = {}
            for t, metadata in base.items():
                racks_of = dict(metadata.partition_racks)
                if b and rng.random() < 0.5:  # alike but for one partition's racks
                    racks_of[rng.randrange(n)] = frozenset({rng.choice(RACKS[:racks])})
                mine[f"{t}b{b}"] = dataclasses.replace(
                    metadata, topic_id=f"{t}b{b}", partition_racks=racks_of
                )
            topics.update(mine)
            bucket_racks = list(member_racks)
            if b and rng.random() < 0.5:  # alike but for one member's rack
                bucket_racks[rng.randrange(len(bucket_racks))] = rng.choice(RACKS[:racks])
            for j, rack in enumerate(bucket_racks):
                subscribed[f"b{b}m{j:02d}|{rack}"] = frozenset(mine)
        ids = sorted(subscribed)
        current = dealt(rng, ids, topics)
        members = {
            m: MemberSubscription(
                rack_id=None if m.endswith("|None") else m.rsplit("|", 1)[1],
                instance_id=None,
                subscribed_topic_ids=subscribed[m],
                assignment={t: ps for t, ps in current[m].items() if t in subscribed[m]},
            )
            for m in ids
        }
        spec = GroupSpec(members=members, subscription_type=SubscriptionType.HETEROGENEOUS)
        monkeypatch.setattr(racks_range, "_nodes_by_lanes", lanes_spy)
        monkeypatch.setattr(racks_range, "_position", position_spy)
        result = RANGE.assign(spec, topics)
        monkeypatch.setattr(racks_range, "_nodes_by_lanes", by_order)
        assert result.members == RANGE.assign(spec, topics).members, seed
        monkeypatch.undo()
        check_assignment(spec, topics, result)
    assert len(lanes_calls) > 300
    assert kept_in_part  # some node kept the lowest indexes of a key and gave up the rest
    assert split_types  # some type's moving indexes went to more than one node


@pytest.mark.parametrize("seed", range(20))
def test_less_and_ones_at_find_what_a_comparison_one_by_one_finds(seed: int) -> None:
    """The lanes of :func:`_less` (values 0..255, equal, one apart, at the ends; few ones
    found one by one, many by one pass) and its refusal of a value that is not a byte."""
    rng = random.Random(seed)
    n = rng.choice([1, 2, 31, 32, 33, 1000])
    top = rng.choice([1, 2, 12, 255])
    low = [rng.randint(0, top) for _ in range(n)]
    high = [v if rng.random() < 0.9 else rng.randint(0, top) for v in low]
    assert _less(low, high) == [i for i in range(n) if low[i] < high[i]]
    assert _less(high, low) == [i for i in range(n) if high[i] < low[i]]
    flags = bytes(int(rng.random() < rng.choice([0.01, 0.5])) for _ in range(n))
    assert ones_at(flags) == [i for i in range(n) if flags[i]]
    assert _less([*low, 256], [*high, 0]) is None
    assert _less([*low, 0], [*high, -1]) is None


@pytest.mark.parametrize("seed", range(40))
def test_uniform_with_racks_is_the_same_without_the_members_loads_as_bytes(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """The rack-aware members' targets and who is above or below them, found through bytes
    (loads up to 255) or through lists (the path for bigger loads, and here for all): the same
    assignment, on random holdings and on a settled group after a leave or a join (loads of
    q and q + 1); some groups have members holding more than 255 partitions."""
    rng = random.Random(seed)
    topics = racked_topics(rng, rng.randint(1, 4), (40, 300, 2000), rng.randint(1, 4))
    ids = [f"m{j:02d}" for j in range(rng.randint(2, 12))]
    rack_of = {m: rng.choice(["a", "b", "c", "z", None]) for m in ids}

    def spec_of(
        members: list[str], current: Mapping[str, Mapping[str, frozenset[int]]]
    ) -> GroupSpec:
        return GroupSpec(
            members={
                m: MemberSubscription(
                    rack_id=rack_of[m],
                    instance_id=None,
                    subscribed_topic_ids=frozenset(topics),
                    assignment=current.get(m, {}),
                )
                for m in members
            },
            subscription_type=SubscriptionType.HOMOGENEOUS,
            partition_owners=owners_of({m: current[m] for m in members if m in current}),
        )

    if rng.random() < 0.5:
        current: Mapping[str, Mapping[str, frozenset[int]]] = dealt(rng, ids, topics, 0.8)
        members = ids
    else:  # settled, then one leaves or one joins
        before = ids[:-1] if rng.random() < 0.5 else ids
        current = UNIFORM.assign(spec_of(before, {}), topics).members
        members = ids if len(before) < len(ids) else ids[:-1]
    spec = spec_of(members, current)
    result = UNIFORM.assign(spec, topics)
    check_assignment(spec, topics, result)
    with monkeypatch.context() as m:
        m.setattr(racks_members, "_as_bytes", lambda values: None)
        assert UNIFORM.assign(spec, topics).members == result.members
