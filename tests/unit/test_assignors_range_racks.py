"""``range`` with racks (assignors/range.py, racks_range.py) against a plain reference written
here index by index from the documented rules — the same plan (:func:`assignors.plan.transport`
on the types of indexes), then each type kept by its rack-blind owners' nodes as far as the plan
allows, the rest in index order to the nodes the plan names, and each node's indexes dealt in
order to its members — member for member, on random groups that take every path: keys of one
byte (translate tables) or wider (sorting), member racks coded in bytes or not (more than 254
racks), nodes in bytes or not (more than 255 relevant racks), fewer partitions than members,
subscriber lists shared or equal but distinct, topics without partition racks, and groups of
several co-partitioned topic sets with the same partition counts (whose indexes and one-index
sets the computation shares)."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType

import pytest

from assignors.api import GroupSpec, MemberSubscription, SubscriptionType, TopicMetadata
from assignors.plan import transport
from assignors.range import RangeAssignor, member_order
from assignors.validation import check_assignment

RANGE = RangeAssignor()
Plain = dict[str, dict[str, frozenset[int]]]


def reference(spec: GroupSpec, topics: Mapping[str, TopicMetadata]) -> Plain:
    """The range assignment with racks, index by index."""
    result: Plain = {m: {} for m in member_order(spec.members)}
    for (n, members), group in co_partitioned(spec, topics).items():
        for m, partitions in zip(members, place(spec, topics, members, group, n), strict=False):
            if partitions:
                for t in group:
                    result[m][t] = partitions
    return result


def place(
    spec: GroupSpec,
    topics: Mapping[str, TopicMetadata],
    members: tuple[str, ...],
    group: list[str],
    n: int,
) -> list[frozenset[int]]:
    """One co-partitioned group's ranges, by member (in order)."""
    rack_of = [spec.members[m].rack_id for m in members]
    quota, extra = divmod(n, len(members))
    counts = [quota + 1] * extra + [quota] * (len(members) - extra)
    replicas = {r for t in group for rs in topics[t].partition_racks.values() for r in rs}
    racks = sorted({r for r in rack_of if r is not None} & replicas)
    blind_owner = [j for j, c in enumerate(counts) for _ in range(c)]
    if not racks:
        return [frozenset(p for p in range(n) if blind_owner[p] == j) for j in range(len(counts))]
    elsewhere = len(racks)
    node = [racks.index(r) if r in racks else elsewhere for r in rack_of]
    # Each index's type: per relevant rack, how many topics of the group are local there.
    kind = [
        tuple(sum(r in topics[t].partition_racks.get(p, frozenset()) for t in group) for r in racks)
        for p in range(n)
    ]
    types = sorted(set(kind))
    capacities = [0] * (elsewhere + 1)
    for j, c in enumerate(counts):
        capacities[node[j]] += c
    flow = transport(
        [kind.count(k) for k in types],
        capacities,
        [[(n + 1) * c for c in k] + [0] for k in types],
    )
    held: dict[tuple[tuple[int, ...], int], list[int]] = {}  # (type, owner's node) -> indexes
    for p in range(n):
        held.setdefault((kind[p], node[blind_owner[p]]), []).append(p)
    pools: list[list[int]] = [[] for _ in capacities]
    for k, wanted in zip(types, flow, strict=True):
        own = [held.get((k, v), []) for v in range(elsewhere + 1)]
        rest: list[int] = []
        for v, indexes in enumerate(own):
            pools[v] += indexes[: wanted[v]]
            rest += indexes[wanted[v] :]
        rest.sort()
        for v, indexes in enumerate(own):
            need = max(0, wanted[v] - len(indexes))
            pools[v] += rest[:need]
            rest = rest[need:]
    out = []
    for j, c in enumerate(counts):
        pool = sorted(pools[node[j]])
        out.append(frozenset(pool[:c]))
        pools[node[j]] = pool[c:]
    return out


def member(
    rack: str | None, subscribed: Iterable[str], instance: str | None = None
) -> MemberSubscription:
    return MemberSubscription(
        rack_id=rack,
        instance_id=instance,
        subscribed_topic_ids=frozenset(subscribed),
        assignment={},
    )


def racked(topic_id: str, n: int, racks_of: Callable[[int], frozenset[str]]) -> TopicMetadata:
    """A topic of ``n`` partitions, partition p's replicas in ``racks_of(p)``."""
    return TopicMetadata(
        topic_id=topic_id,
        name=topic_id,
        num_partitions=n,
        partition_racks={p: racks_of(p) for p in range(n)},
    )


def assert_as_reference(spec: GroupSpec, topics: Mapping[str, TopicMetadata]) -> Plain:
    """``range``'s result, valid and equal to the reference's, member for member."""
    result = RANGE.assign(spec, topics)
    check_assignment(spec, topics, result)
    plain = {m: dict(a) for m, a in result.members.items()}
    assert plain == reference(spec, topics)
    return plain


def random_group(rng: random.Random) -> tuple[GroupSpec, dict[str, TopicMetadata]]:
    many = rng.random() < 0.1  # hundreds of racks (member racks, and nodes, beyond a byte)
    names = [f"r{j:03d}" for j in range(300 if many else rng.randint(1, 5))]
    # (hundreds of relevant racks: test_hundreds_of_relevant_racks — the plan is slow there)
    replica_names = names[:20] if many else names[: max(1, len(names) - rng.randint(0, 1))]
    n_of = rng.sample([1, 2, 3, 5, 8, 13, 40, 97, 301], rng.randint(1, 2))
    topics: dict[str, TopicMetadata] = {}
    for k in range(rng.choice([1, 2, 3, 4, 6, 12])):
        n = rng.choice(n_of)
        racked = rng.random() < 0.9
        topics[f"t{k:02d}"] = TopicMetadata(
            topic_id=f"t{k:02d}",
            name=f"n{k}",
            num_partitions=n,
            partition_racks={
                p: frozenset(rng.sample(replica_names, rng.randint(1, min(3, len(replica_names)))))
                for p in range(n)
                if racked and rng.random() < 0.9
            },
        )
    ids = sorted(topics)
    buckets = [frozenset(rng.sample(ids, rng.randint(1, len(ids)))) for _ in range(3)]
    heterogeneous = rng.random() < 0.7
    members = {}
    for j in range(rng.choice([1, 2, 5, 9, 30, 310 if many else 60])):
        rack = None if rng.random() < 0.1 else (names[j % 300] if many else rng.choice(names))
        if not many and rng.random() < 0.1:
            rack = "nowhere"  # a rack holding no replica
        members[f"m{rng.randrange(10**6):06d}-{j}"] = member(
            rack,
            rng.choice(buckets) if heterogeneous else buckets[0],
            f"i{rng.randrange(100)}-{j}" if rng.random() < 0.2 else None,
        )
    kind = SubscriptionType.HETEROGENEOUS if heterogeneous else SubscriptionType.HOMOGENEOUS
    return GroupSpec(members=members, subscription_type=kind), topics


@pytest.mark.parametrize("chunk", range(4))
def test_range_with_racks_equals_the_plain_reference(chunk: int) -> None:
    for seed in range(chunk * 40, (chunk + 1) * 40):
        assert_as_reference(*random_group(random.Random(seed)))


@pytest.mark.parametrize("chunk", range(2))
def test_current_sets_placed_again_are_given_back(chunk: int) -> None:
    """Random groups (as above) placed, then placed again after a member leaves and another
    joins, the first result being the members' current target — some of its sets replaced by
    equal copies, equal mutable sets or sets with one index more, some members' assignments
    read-only mappings: the result is the reference's, member for member, only frozensets,
    and where a member's set of the first topic of a co-partitioned group of two or more
    partitions per member, placed by racks, is equal to its current one (a frozenset), it is
    that very object (not where a member of the group has a read-only mapping: none is
    compared there)."""
    given_back = 0
    for seed in range(chunk * 40, (chunk + 1) * 40):
        rng = random.Random(seed)
        spec, topics = random_group(rng)
        first = {m: dict(a) for m, a in RANGE.assign(spec, topics).members.items()}
        members = dict(spec.members)
        del members[rng.choice(sorted(members))]
        joiner = spec.members[rng.choice(sorted(spec.members))]
        members["zz-new"] = dataclasses.replace(joiner, instance_id=None)
        current: dict[str, Mapping[str, frozenset[int]]] = {}
        read_only = set()
        for m in members:
            mine: dict[str, frozenset[int]] = dict(first.get(m, {}))
            for t, partitions in mine.items():
                roll = rng.random()
                if roll < 0.1:
                    mine[t] = frozenset(list(partitions))  # equal, another object
                elif roll < 0.15:
                    mine[t] = set(partitions)  # type: ignore[assignment]
                elif roll < 0.2:
                    mine[t] = partitions | {max(partitions) + 1}
            current[m] = mine
            if rng.random() < 0.02:
                current[m] = MappingProxyType(mine)
                read_only.add(m)
        again = GroupSpec(
            members={m: dataclasses.replace(s, assignment=current[m]) for m, s in members.items()},
            subscription_type=spec.subscription_type,
        )
        result = assert_as_reference(again, topics)
        assert all(type(s) is frozenset for a in result.values() for s in a.values())
        for (n, group_members), group in co_partitioned(again, topics).items():
            replicas = {r for t in group for rs in topics[t].partition_racks.values() for r in rs}
            if (
                n < 2 * len(group_members)
                or read_only.intersection(group_members)
                or not replicas.intersection(again.members[m].rack_id for m in group_members)
            ):
                continue  # (runs of one index, none compared, or placed rack-blind)
            for m in group_members:
                held = current[m].get(group[0])
                if type(held) is frozenset and result[m].get(group[0]) == held:
                    assert result[m][group[0]] is held
                    given_back += 1
    assert given_back > 20


def co_partitioned(
    spec: GroupSpec, topics: Mapping[str, TopicMetadata]
) -> dict[tuple[int, tuple[str, ...]], list[str]]:
    """(partition count, subscribers in order) -> the co-partitioned topics, sorted."""
    order = member_order(spec.members)
    subscribers: dict[str, list[str]] = {}
    for m in order:
        for t in sorted(spec.members[m].subscribed_topic_ids):
            subscribers.setdefault(t, []).append(m)
    groups: dict[tuple[int, tuple[str, ...]], list[str]] = {}
    for t in sorted(subscribers):
        if topics[t].num_partitions > 0:
            groups.setdefault((topics[t].num_partitions, tuple(subscribers[t])), []).append(t)
    return groups


def test_buckets_alike_share_indexes_but_not_placements() -> None:
    """Five buckets of members, each on its own two co-partitioned topics of 60 partitions
    (their subscriber lists equal only within a bucket), racks laid out alike but each topic's
    replicas its own: each bucket placed on its own racks, as the reference does; members
    beyond the partitions get none, and the one-index sets are shared between buckets."""
    rng = random.Random(5)
    topics = {}
    members = {}
    for b in range(5):
        mine = []
        for k in range(2):
            t = f"b{b}t{k}"
            mine.append(t)
            topics[t] = TopicMetadata(
                topic_id=t,
                name=t,
                num_partitions=60,
                partition_racks={
                    p: frozenset(rng.sample(["a", "b", "c"], rng.randint(2, 3))) for p in range(60)
                },
            )
        for j in range(90):
            members[f"b{b}m{j:02d}"] = member("abc"[j % 3], mine)
    spec = GroupSpec(members=members, subscription_type=SubscriptionType.HETEROGENEOUS)
    result = assert_as_reference(spec, topics)
    by_index: dict[int, set[int]] = {}
    for a in result.values():
        for s in a.values():
            by_index.setdefault(min(s), set()).add(id(s))
    assert all(len(ids) == 1 for ids in by_index.values())  # one set per index, shared
    assert sum(1 for a in result.values() if not a) == 5 * 30


@pytest.mark.parametrize("racked", [520, 521])
def test_hundreds_of_relevant_racks(racked: int) -> None:
    """260 members, one in each of 260 racks, and one in no rack, on two co-partitioned topics
    of 522 partitions, partition p with a replica in rack p % 260 but the last ones (262
    nodes: nodes no longer fit a byte, nor the members' racks): as the reference. With 521
    racked partitions, rack r000 holds three indexes for its member's two: the plan splits
    their type (kept in part by its node, the rest sent elsewhere)."""
    racks = [f"r{j:03d}" for j in range(260)]
    topics = {
        t: TopicMetadata(
            topic_id=t,
            name=t,
            num_partitions=522,
            partition_racks={p: frozenset({racks[p % 260]}) for p in range(racked)},
        )
        for t in ("x", "y")
    }
    members = {
        f"m{j:03d}": member(racks[(j * 7) % 260] if j < 260 else None, topics) for j in range(261)
    }
    assert_as_reference(
        GroupSpec(members=members, subscription_type=SubscriptionType.HOMOGENEOUS), topics
    )


def test_members_whose_topics_are_the_group_are_filled_alike() -> None:
    """Members whose topics are exactly one co-partitioned group of three or more get one
    dict each, made at once (the same set for every topic of the group); the same members also
    subscribed to a topic without partitions go topic by topic: the same result."""
    rng = random.Random(11)
    topics = {
        t: TopicMetadata(
            topic_id=t,
            name=t,
            num_partitions=n,
            partition_racks={p: frozenset(rng.sample("abc", 2)) for p in range(n)},
        )
        for t, n in (("v", 30), ("x", 30), ("y", 30), ("z", 0), ("w", 7))
    }
    for heterogeneous in (False, True):
        kind = SubscriptionType.HETEROGENEOUS if heterogeneous else SubscriptionType.HOMOGENEOUS
        results = []
        for subscribed in ("vxy", "vxyz"):
            members = {f"m{j:02d}": member("abc"[j % 3], subscribed) for j in range(12)}
            if heterogeneous:  # and others on a topic of their own
                members.update({f"o{j}": member("abc"[j % 3], "w") for j in range(4)})
            results.append(
                assert_as_reference(GroupSpec(members=members, subscription_type=kind), topics)
            )
        assert results[0] == results[1]
        assert all(a["v"] is a["x"] is a["y"] for m, a in results[0].items() if m.startswith("m"))


def test_many_subscriber_lists_alike_at_their_ends() -> None:
    """Ten topic pairs, each pair's subscribers all members but one (a different one per
    pair): ten distinct subscriber lists of one length with the same first and last member
    (those past the first few are matched by value); each pair stays co-partitioned, as the
    reference places it."""
    rng = random.Random(3)
    topics = {
        f"t{k:02d}": TopicMetadata(
            topic_id=f"t{k:02d}",
            name=f"t{k:02d}",
            num_partitions=6,
            partition_racks={p: frozenset(rng.sample("abc", 2)) for p in range(6)},
        )
        for k in range(20)
    }
    members = {
        f"m{j:02d}": member("abc"[j % 3], [t for k, t in enumerate(topics) if k % 10 + 1 != j])
        for j in range(12)
    }
    spec = GroupSpec(members=members, subscription_type=SubscriptionType.HETEROGENEOUS)
    result = assert_as_reference(spec, topics)
    for k in range(10):
        pair = f"t{k:02d}", f"t{k + 10:02d}"
        assert all(a[pair[0]] is a[pair[1]] for a in result.values() if pair[0] in a)


def test_wide_keys_of_types_sent_whole_or_split_as_the_reference(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Groups of 4 to 12 co-partitioned topics over 3 or 4 racks (keys beyond a byte: the
    indexes are placed from their keys one by one, not by translate tables), members spread
    unevenly over the racks: a type the plan sends to one node goes there whole, the indexes
    of a type it splits are kept by their node or sent on in index order — as the reference,
    member for member; the cases cover both, in one computation and apart."""
    import assignors.racks_range as racks_range

    by_order = racks_range._nodes_by_order
    seen: list[tuple[int, int]] = []  # per call: (types sent whole, types split)

    def spy(
        keys: list[int],
        stride: int,
        codes: list[int],
        found: list[int],
        ranks: list[int],
        counted: dict[int, int],
        flow: list[list[int]],
    ) -> bytes | bytearray | list[int]:
        split = sum(1 for row in flow if len(row) - row.count(0) > 1)
        seen.append((len(flow) - split, split))
        return by_order(keys, stride, codes, found, ranks, counted, flow)

    monkeypatch.setattr(racks_range, "_nodes_by_order", spy)
    for seed in range(40):
        rng = random.Random(seed)
        racks = ["a", "b", "c", "d"][: rng.randint(3, 4)]
        n = rng.choice([7, 30, 61])
        topics = {
            f"t{k:02d}": racked(
                f"t{k:02d}",
                n,
                lambda _p, rng=rng, racks=racks: frozenset(rng.sample(racks, rng.randint(1, 2))),
            )
            for k in range(rng.randint(4, 12))
        }
        weights = [rng.random() for _ in racks]
        members = {
            f"m{j:02d}": member(rng.choices(racks, weights)[0], topics)
            for j in range(rng.randint(2, 25))
        }
        assert_as_reference(
            GroupSpec(members=members, subscription_type=SubscriptionType.HOMOGENEOUS), topics
        )
    assert len(seen) > 30  # (the others: members in one rack, keys in a byte)
    assert any(split for _, split in seen)
    assert any(whole and split for whole, split in seen)
    assert any(not split for _, split in seen)


@pytest.mark.parametrize("last", ["c", "nowhere"])
@pytest.mark.parametrize("heterogeneous", [False, True])
def test_racks_only_of_members_beyond_the_partitions_count(heterogeneous: bool, last: str) -> None:
    """The members' racks are coded only for those that get partitions, but every member's
    rack counts: members past the partition count alone in rack c (which holds replicas) make
    it a node of the plan that takes nothing, as the reference has it (the plan differs
    without it); alone in a rack holding no replica, they change nothing (their racks need not
    be read)."""
    rng = random.Random(2)
    topics = {
        t: TopicMetadata(
            topic_id=t,
            name=t,
            num_partitions=12,
            partition_racks={p: frozenset(rng.sample("abc", 2)) for p in range(12)},
        )
        for t in ("x", "y", "z")
    }
    members = {f"m{j:02d}": member("ab"[j % 2] if j < 14 else last, "xyz") for j in range(18)}
    if heterogeneous:  # the last members on one topic more
        members.update({f"m{j:02d}": member(last, "xyzw") for j in range(14, 18)})
        topics["w"] = TopicMetadata(topic_id="w", name="w", num_partitions=2)
    kind = SubscriptionType.HETEROGENEOUS if heterogeneous else SubscriptionType.HOMOGENEOUS
    assert_as_reference(GroupSpec(members=members, subscription_type=kind), topics)


@pytest.mark.parametrize(
    ("topics", "racks"), [(20, 2), (40, 3), (255, 4), (300, 5), (17, 7), (70, 8)]
)
def test_index_keys_of_topics_local_everywhere(topics: int, racks: int) -> None:
    """Every partition of every topic with a replica in every rack: each index's count per rack
    is the number of topics (four racks' counts share a byte for a fold, then two for a few
    more: none may carry into another's part), except a rack missing from one topic's last
    partition."""
    from assignors.racks import RackNodes
    from assignors.racks_range import _index_keys

    names = [f"r{j}" for j in range(racks)]
    n = 6
    meta = {
        f"t{k:03d}": racked(
            f"t{k:03d}", n, lambda p, k=k: frozenset(names[1:] if (k, p) == (0, n - 1) else names)
        )
        for k in range(topics)
    }
    nodes = RackNodes(names)
    owner = bytes(p % nodes.count for p in range(n))
    base = topics + 1
    keys = _index_keys(nodes, sorted(meta), n, meta, owner, base)
    counts = [[topics] * racks for _ in range(n)]
    counts[n - 1][0] -= 1
    assert keys == [
        sum(c * base ** (racks - 1 - v) for v, c in enumerate(row)) * nodes.count + owner[p]
        for p, row in enumerate(counts)
    ]
