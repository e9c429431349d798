"""``roundrobin``: an example server-side assignor for kip848-coordinator.

Partitions are dealt out one at a time, like cards: all partitions of all subscribed topics in
(topic id, partition) order, each to the next member, in member-id order, that subscribes to
its topic. Homogeneous groups come out balanced (sizes differ by at most one); nothing is sticky,
since the current target assignment is ignored - which the conformance kit's figures show.

It is deliberately simple; what it demonstrates is the contract every plugin keeps:

* ``name`` is a class attribute, and the class takes no constructor arguments;
* ``assign`` is pure and deterministic: it sorts member ids and topic ids instead of relying on
  mapping or set order;
* a subscription to a topic missing from the metadata raises ``PartitionAssignorError`` (the
  coordinator answers UNKNOWN_SERVER_ERROR and keeps the group as it was);
* the result names every member, gives each partition to at most one subscriber, uses
  ``frozenset`` partition sets and omits topics with no partitions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from assignors.api import GroupAssignment, GroupSpec, PartitionAssignorError, TopicMetadata

__all__ = ["RoundRobinAssignor"]


class RoundRobinAssignor:
    """Deals partitions round robin over the subscribers; balanced if homogeneous, not sticky."""

    name: ClassVar[str] = "roundrobin"

    def assign(self, group_spec: GroupSpec, topics: Mapping[str, TopicMetadata]) -> GroupAssignment:
        members = sorted(group_spec.members)
        subscribed = {m: group_spec.members[m].subscribed_topic_ids for m in members}
        wanted = sorted({t for subs in subscribed.values() for t in subs})
        for t in wanted:
            if t not in topics:
                first = next(m for m in members if t in subscribed[m])
                raise PartitionAssignorError(
                    f"member {first!r} is subscribed to topic {t!r}, which does not exist"
                )

        dealt: dict[str, dict[str, list[int]]] = {m: {} for m in members}
        turn = 0  # position in the circle of members, carried across topics
        for t in wanted:
            circle = [m for m in members if t in subscribed[m]]
            start = turn % len(circle)
            for p in range(topics[t].num_partitions):
                owner = circle[(start + p) % len(circle)]
                dealt[owner].setdefault(t, []).append(p)
            turn = start + topics[t].num_partitions
        return GroupAssignment(
            members={
                m: {t: frozenset(ps) for t, ps in assignment.items()}
                for m, assignment in dealt.items()
            }
        )
