"""Rack locality of consumer groups, for the scrape-time gauge
``kip848_consumer_group_rack_local_ratio``: the share of a group's assigned partitions whose
member reads them from a replica in its own rack (docs/assignors.md "Rack-aware assignment").

Read on the event loop from the shards' groups (read-only). A member's count is kept between
scrapes and computed again only when the member or its group's subscription metadata changed
(both are immutable values replaced on every change), so a scrape of a settled coordinator costs
one identity check per member. Groups are reported only when rack information matters to them:
some member has a rack and some subscribed topic has partition racks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from assignors.api import TopicMetadata
from assignors.racks import count_rack_local


class RackLocality:
    """Per group: (rack-local partitions, assigned partitions), cached per member."""

    def __init__(self) -> None:
        # group id -> (subscription metadata, its topics by id, member id -> (member, local))
        self._groups: dict[
            str, tuple[Any, dict[str, TopicMetadata], dict[str, tuple[Any, int]]]
        ] = {}

    def read(self, shards: Iterable[Any]) -> dict[str, tuple[int, int]]:
        """group id -> (local, assigned), for the groups where racks matter."""
        out: dict[str, tuple[int, int]] = {}
        seen: dict[str, tuple[Any, dict[str, TopicMetadata], dict[str, tuple[Any, int]]]] = {}
        for shard in shards:
            for group_id, group in shard.groups.items():
                counted = self._group(group_id, group)
                if counted is not None:
                    seen[group_id], out[group_id] = counted
        self._groups = seen  # groups gone since the last scrape are forgotten
        return out

    def _group(
        self, group_id: str, group: Any
    ) -> (
        tuple[tuple[Any, dict[str, TopicMetadata], dict[str, tuple[Any, int]]], tuple[int, int]]
        | None
    ):
        metadata: Mapping[str, TopicMetadata] = group.subscription_metadata
        if not any(t.partition_racks for t in metadata.values()):
            return None
        members = group.members
        if not any(m.rack_id is not None for m in members.values()):
            return None
        cached = self._groups.get(group_id)
        if cached is not None and cached[0] is metadata:
            by_id, before = cached[1], cached[2]
        else:
            by_id, before = {t.topic_id: t for t in metadata.values()}, {}
        counts: dict[str, tuple[Any, int]] = {}
        local = assigned = 0
        for member_id, member in members.items():
            known = before.get(member_id)
            if known is not None and known[0] is member:
                n = known[1]
            else:
                n = count_rack_local(member.rack_id, member.assigned_partitions, by_id)
            counts[member_id] = (member, n)
            local += n
            assigned += sum(map(len, member.assigned_partitions.values()))
        return (metadata, by_id, counts), (local, assigned)
