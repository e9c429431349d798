"""The ``range`` assignor (Kafka 4.0): contiguous ranges per topic, recomputed from scratch.

Theory of operation
-------------------
Members are ordered once: static members first, by instance id (then member id), then dynamic
members by member id. For each topic, its subscribers keep that order; with ``n`` partitions and
``s`` subscribers each gets ``n // s`` consecutive partitions and the first ``n % s`` get one
more. Members beyond the partition count get nothing from that topic.

Consequences worth knowing:

* Topics with equal partition counts and equal subscribers are *co-partitioned*: the member
  that gets partitions 3-5 of one topic gets partitions 3-5 of the other (joins on keys).
* The assignor is not sticky (KAFKA-16944): adding or removing a member can shift every range.
  Because static members sort first by instance id, a static member that restarts with a new
  member id gets exactly its old ranges back.
* It is not balanced across topics: with many small topics the first members get one partition
  of each. Use ``uniform`` for balance.

The current target assignment does not change the result, which depends only on
subscriptions, instance ids and partition counts (and racks, below). Identical ranges are
shared as one frozenset; with racks, a member whose indexes are those of its current set gets
that set back (a leave or a join leaves most co-partitioned groups as they were: no new set is
made for them).

Racks. When members are in racks that hold replicas of a topic's partitions, each member still
gets exactly as many partitions of every topic as above (the first ``n % s`` one more), and
co-partitioned topics still give a member the same partition indexes; but which indexes is
chosen by :func:`assignors.racks_range.place_ranges`: as many partitions as possible with a replica in
the member's rack (an index counts once per co-partitioned topic it is local in), then as much
of the member's rack-blind range as that allows. With no rack information, or no member in a
rack holding a replica, the ranges are exactly the rack-blind ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import islice, repeat
from operator import attrgetter
from typing import ClassVar

from assignors.api import (
    GroupAssignment,
    GroupSpec,
    MemberAssignment,
    MemberSubscription,
    PartitionAssignorError,
    SubscriptionType,
    TopicId,
    TopicMetadata,
)
from assignors.racks_range import MemberRacks, Shared, place_ranges

__all__ = ["RangeAssignor", "compute_range_assignment", "member_order"]

_rack_id = attrgetter("rack_id")
_assignment = attrgetter("assignment")


class RangeAssignor:
    """Contiguous partition ranges per topic; co-partitions equal topics; not sticky."""

    name: ClassVar[str] = "range"
    rack_aware: ClassVar[bool] = True

    def assign(
        self, group_spec: GroupSpec, topics: Mapping[TopicId, TopicMetadata]
    ) -> GroupAssignment:
        return GroupAssignment(members=compute_range_assignment(group_spec, topics))


def member_order(members: Mapping[str, MemberSubscription]) -> list[str]:
    """Static members by instance id, then dynamic members by member id."""
    static = sorted((s.instance_id, m) for m, s in members.items() if s.instance_id is not None)
    dynamic = sorted(m for m, s in members.items() if s.instance_id is None)
    return [m for _, m in static] + dynamic


def compute_range_assignment(
    group_spec: GroupSpec, topics: Mapping[TopicId, TopicMetadata]
) -> dict[str, MemberAssignment]:
    """The range assignment as a plain ``member id -> {topic id: frozenset}`` dict."""
    specs = group_spec.members
    if not specs:
        return {}
    order = member_order(specs)

    # Subscribers of each topic, in member order. Members with the same subscription share one
    # list, so a homogeneous group costs O(topics), not O(members x topics).
    if group_spec.subscription_type is SubscriptionType.HOMOGENEOUS:
        groups = {specs[order[0]].subscribed_topic_ids: order}
    else:
        groups = {}
        for member_id in order:
            groups.setdefault(specs[member_id].subscribed_topic_ids, []).append(member_id)
    subscribers: dict[TopicId, list[str]] = {}
    for subscription, group in groups.items():
        missing = [t for t in subscription if t not in topics]
        if missing:
            raise PartitionAssignorError(
                f"member {group[0]!r} is subscribed to topic {min(missing)!r}, "
                "which is not in the topic metadata"
            )
        for t in subscription:
            if t in subscribers:
                subscribers[t] = subscribers[t] + group
            else:
                subscribers[t] = group
    if len(groups) > 1:
        position = {m: i for i, m in enumerate(order)}
        for t, members in subscribers.items():
            subscribers[t] = sorted(members, key=position.__getitem__)

    result: dict[str, dict[TopicId, frozenset[int]]] = {m: {} for m in order}
    # (partition count, subscriber count) -> the ranges, so co-partitioned topics share them.
    cache: dict[tuple[int, int], list[frozenset[int]]] = {}
    racked = any(topics[t].partition_racks for t in subscribers)
    co_partitioned = _co_partitioned(subscribers, topics)
    racks: dict[int, MemberRacks] = {}  # by id of the subscriber list
    getting: dict[int, int] = {}  # by id of the subscriber list: how many get partitions
    subscribed: dict[int, list[TopicId]] = {}  # by id of the subscriber list: its topics
    if racked:
        for count, ordered, group in co_partitioned:
            key = id(ordered)
            getting[key] = max(getting.get(key, 0), min(count, len(ordered)))
            subscribed.setdefault(key, []).extend(group)
    shared = Shared()
    firsts: dict[int, list[MemberSubscription]] = {}  # by id of the subscriber list
    placed: dict[TopicId, tuple[list[str], list[frozenset[int]]]] = {}
    for count, ordered, group in co_partitioned:
        dealt: list[frozenset[int]] | None = None
        if racked:
            coded = racks.get(id(ordered))
            if coded is None:
                mine = firsts[id(ordered)] = list(
                    map(specs.__getitem__, islice(ordered, getting[id(ordered)]))
                )
                coded = racks[id(ordered)] = _member_racks(
                    specs, ordered, mine, subscribed[id(ordered)], topics
                )
            current = None
            # (members in no rack are placed rack-blind; runs of one index are shared sets)
            if coded.names and count >= 2 * len(ordered):
                current = _current(firsts[id(ordered)], group[0])
            dealt = place_ranges(coded, group, count, topics, shared, current)
        if dealt is None:
            dealt = cache.get((count, len(ordered)))
            if dealt is None:
                dealt = cache[(count, len(ordered))] = _ranges(count, len(ordered))
        subscription = specs[ordered[0]].subscribed_topic_ids
        if (
            len(group) >= 3  # (fewer: as fast topic by topic, without a new dict each)
            and len(subscription) == len(group)
            and groups.get(subscription) == ordered
            and subscription.issuperset(group)
        ):  # the members' topics are exactly the group's: one dict each, made C-level
            result.update(zip(ordered, map(dict.fromkeys, repeat(group), dealt), strict=False))
        else:
            placed.update(dict.fromkeys(group, (ordered, dealt)))
    for t in sorted(placed):  # topic by topic, in order
        ordered, dealt = placed[t]
        for member_id, partitions in zip(ordered, dealt, strict=False):
            if partitions:
                result[member_id][t] = partitions
    return result  # type: ignore[return-value]


def _member_racks(
    specs: Mapping[str, MemberSubscription],
    ordered: list[str],
    firsts: list[MemberSubscription],
    subscribed: list[TopicId],
    topics: Mapping[TopicId, TopicMetadata],
) -> MemberRacks:
    """The racks of ``ordered`` (members in order), coded for the first ones (``firsts``: their
    subscriptions). The set of all their racks matters only where it meets the racks holding
    replicas of the topics they are placed on (``subscribed``): when the first members' racks
    hold all of those, the others' cannot add any; otherwise it is read from every member's
    subscription when they are every member, else from the list."""
    first = list(map(_rack_id, firsts))
    if len(first) == len(ordered):
        return MemberRacks(first, len(ordered))
    held = frozenset().union(*(topics[t].replica_racks() for t in subscribed))
    if held.issubset(first):
        return MemberRacks(first, len(ordered))
    everyone = specs.values() if len(ordered) == len(specs) else map(specs.__getitem__, ordered)
    return MemberRacks(first, len(ordered), map(_rack_id, everyone))


def _current(members: list[MemberSubscription], topic: TopicId) -> list[frozenset[int]] | None:
    """The members' current sets of ``topic`` (empty for a member without), for the placement
    to give back as they are where it places the same indexes (:func:`place_ranges`): no new
    set is made for them. None (nothing to compare) when none of a sample of the members
    holds any of the topic (a first assignment: one pass over the members saved), or when
    their assignments are not dicts (read C-level with ``dict.get``)."""
    step = max(1, len(members) // _SAMPLED)
    assignments = map(_assignment, members)
    try:
        if not any(map(dict.get, map(_assignment, members[::step]), repeat(topic))):
            return None
        return list(map(dict.get, assignments, repeat(topic), repeat(_NONE)))
    except TypeError:
        return None


_SAMPLED = 16
"""Members sampled by :func:`_current` for any current set of the topic."""

_NONE: frozenset[int] = frozenset()


def _co_partitioned(
    subscribers: dict[TopicId, list[str]], topics: Mapping[TopicId, TopicMetadata]
) -> list[tuple[int, list[str], list[TopicId]]]:
    """The topics with partitions, by co-partitioned group (same partition count, same
    subscribers): each group's partition count, its subscribers (in order) and its topics
    (sorted); groups in the order of their first topic."""
    # Equal subscriber lists are one: a topic's list is matched, once per list object (a
    # homogeneous group's topics share one), against the first few lists seen with the same
    # length and ends (a list comparison is C-level, and equal lists of one group hold the same
    # strings), past those by value (a tuple's hash).
    groups: dict[tuple[int, int], tuple[list[str], list[TopicId]]] = {}
    canonical: dict[int, list[str]] = {}
    by_ends: dict[tuple[int, str, str], list[list[str]]] = {}
    by_value: dict[tuple[str, ...], list[str]] = {}
    for t in sorted(subscribers):
        count = topics[t].num_partitions
        if count <= 0:
            continue
        members = subscribers[t]
        same = canonical.get(id(members))
        if same is None:
            alike = by_ends.setdefault((len(members), members[0], members[-1]), [])
            same = next((seen for seen in alike if seen == members), None)
            if same is None:
                if len(alike) < _COMPARED:
                    alike.append(members)
                    same = members
                else:
                    same = by_value.setdefault(tuple(members), members)
            canonical[id(members)] = same
        groups.setdefault((count, id(same)), (same, []))[1].append(t)
    return [(count, ordered, group) for (count, _), (ordered, group) in groups.items()]


_COMPARED = 8
"""Distinct subscriber lists of one length and the same ends compared one by one; the others
are found by value."""


def _ranges(count: int, subscribers: int) -> list[frozenset[int]]:
    """The non-empty ranges of ``count`` partitions over ``subscribers`` members, in order."""
    quota, extra = divmod(count, subscribers)
    out: list[frozenset[int]] = []
    start = 0
    for i in range(min(count, subscribers)):
        end = start + quota + (1 if i < extra else 0)
        out.append(frozenset(range(start, end)))
        start = end
    return out
