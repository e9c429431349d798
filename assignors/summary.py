"""A :class:`~assignors.api.TargetSummary` computed from scratch, for tests and tools.

The coordinator keeps its summary up to date member by member as targets change; this is the
reference it is tested against, and what the conformance kit gives an
:class:`~assignors.api.IncrementalPartitionAssignor`. O(members + partitions).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from assignors.api import GroupSpec, TargetSummary, TopicId, TopicMetadata

__all__ = ["summarize"]


def summarize(
    group_spec: GroupSpec, topics: Mapping[TopicId, TopicMetadata]
) -> TargetSummary | None:
    """The summary of the spec's current assignments, or None when they are not what a summary
    promises (a topic outside the member's subscription or ``topics``, an empty set, an index
    out of range, a partition held twice)."""
    loads: dict[str, int] = {}
    held: dict[TopicId, set[int]] = {t: set() for t in topics}
    racked = any(m.partition_racks for m in topics.values())
    by_racks: Counter[tuple[frozenset[str], str | None]] = Counter()
    for member_id, spec in group_spec.members.items():
        load = 0
        for t, partitions in spec.assignment.items():
            if not partitions or t not in spec.subscribed_topic_ids or t not in topics:
                return None
            if min(partitions) < 0 or max(partitions) >= topics[t].num_partitions:
                return None
            if not held[t].isdisjoint(partitions):
                return None
            held[t].update(partitions)
            load += len(partitions)
            if racked:
                racks = topics[t].partition_racks
                by_racks.update((racks.get(p, frozenset()), spec.rack_id) for p in partitions)
        loads[member_id] = load
    by_load: dict[int, list[str]] = {}
    by_rack: dict[str | None, dict[int, list[str]]] = {}
    for member_id in sorted(loads):
        by_load.setdefault(loads[member_id], []).append(member_id)
        rack = group_spec.members[member_id].rack_id
        by_rack.setdefault(rack, {}).setdefault(loads[member_id], []).append(member_id)
    return TargetSummary(
        member_loads=loads,
        members_by_load={k: tuple(ids) for k, ids in sorted(by_load.items())},
        unassigned={
            t: tuple(p for p in range(max(0, m.num_partitions)) if p not in held[t])
            for t, m in sorted(topics.items())
        },
        held_by_racks=dict(by_racks) if racked else None,
        members_by_rack={
            rack: {k: tuple(ids) for k, ids in sorted(by.items())} for rack, by in by_rack.items()
        }
        if racked
        else None,
    )
