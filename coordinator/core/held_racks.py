"""The targets' partitions counted by racks, for the target summary
(:attr:`assignors.api.TargetSummary.held_by_racks`).

A rack-aware assignor plans on how many held partitions have a replica in their member's rack
and where the others could go; counting that from the targets visits every partition. The
spec cache keeps the count instead, beside the rest of the summary, and brings it up to date
from what the members' old and new targets differ by — a member whose rack changed
(KAFKA-20909) is counted again in full; when many members changed (a first target, a whole
reassignment) everything is recounted from the targets' owners in C-level passes per topic.
Every write goes through the undo log, as the rest of the cache."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from itertools import repeat

from assignors.api import TopicId, TopicMetadata

from .group import ConsumerGroup
from .model import EMPTY_ASSIGNMENT, Assignment
from .timeline import TDict, UndoLog

NO_RACKS: frozenset[str] = frozenset()
"""The racks of a partition whose racks are unknown."""
_GONE = object()  # an owner that is no member (not counted)

Key = tuple[frozenset[str], str | None]


def any_racks(topics: Mapping[TopicId, TopicMetadata]) -> bool:
    """Does some topic have partition racks (so that the count is worth keeping)?"""
    return any(t.partition_racks for t in topics.values())


class HeldRacks:
    """``counts``: (a partition's racks, its member's rack) -> how many partitions of the
    members' targets (topics of ``topics`` only; pairs counting none absent); ``rack_of``: the
    rack each member's target was counted under (every member the summary counted)."""

    __slots__ = ("counts", "rack_of", "topics")

    RECOUNT_SHARE = 4
    """Recount from the owners when more than one member in this many changed (0: never, but
    for a new cache)."""

    def __init__(self, log: UndoLog, topics: Mapping[TopicId, TopicMetadata]) -> None:
        self.topics = topics
        self.counts: TDict = log.new_dict()
        self.rack_of: TDict = log.new_dict()

    def update(
        self,
        group: ConsumerGroup,
        todo: Collection[str],
        counted: Mapping[str, Assignment],
        fresh: bool,
        *,
        partial: bool = False,
    ) -> None:
        """Bring the count up to date for the members in ``todo``; ``counted``: each member's
        target as last counted (the summary's, not yet updated), ``fresh``: nothing is counted
        yet; ``partial``: other members' changes are still to be counted (never recount from
        the targets then: they hold those changes already)."""
        members_of, target_of, rack_of = group.members, group.target, self.rack_of
        many = fresh or (not partial and len(todo) * self.RECOUNT_SHARE > len(members_of))
        delta: Counter[Key] = Counter()
        for member_id in todo:
            member = members_of.get(member_id)
            old = counted.get(member_id)
            old_rack = rack_of.get(member_id)
            if member is None:
                new, rack = None, None
            else:
                new, rack = target_of.get(member_id, EMPTY_ASSIGNMENT), member.rack_id
            if old is new and old_rack == rack:
                continue
            if not many:
                if old is not None and new is not None and old_rack == rack:
                    self._differences(delta, old, new, rack)
                else:
                    if old is not None:
                        self._tally(delta, old, old_rack, -1)
                    if new is not None:
                        self._tally(delta, new, rack, 1)
            if new is None:
                rack_of.discard(member_id)
            elif old_rack != rack or member_id not in rack_of:
                rack_of[member_id] = rack
        if many:
            self._recount(group)
            return
        counts = self.counts
        for key, d in delta.items():
            if d:
                counts.increment(key, d)

    def _tally(self, delta: Counter[Key], target: Assignment, rack: str | None, sign: int) -> None:
        topics = self.topics
        for t, partitions in target.items():
            metadata = topics.get(t)
            if metadata is not None and partitions:
                by_racks = Counter(map(metadata.partition_racks.get, partitions, repeat(NO_RACKS)))
                for racks, k in by_racks.items():
                    delta[(racks, rack)] += sign * k

    def _differences(
        self, delta: Counter[Key], old: Assignment, new: Assignment, rack: str | None
    ) -> None:
        for t in old.keys() | new.keys():
            a, b = old.get(t), new.get(t)
            if a is b:
                continue
            if a and b:
                self._tally(delta, {t: a - b}, rack, -1)
                self._tally(delta, {t: b - a}, rack, 1)
            elif a:
                self._tally(delta, {t: a}, rack, -1)
            elif b:
                self._tally(delta, {t: b}, rack, 1)

    def _recount(self, group: ConsumerGroup) -> None:
        """Count every member's target again (per topic, from its owners: C-level passes) and
        write what differs."""
        rack_by_member = {m: member.rack_id for m, member in group.members.items()}
        owners_of = group.target_owners
        total: Counter[tuple[frozenset[str], object]] = Counter()
        for t, metadata in self.topics.items():
            owners = owners_of.get(t)
            if owners:
                total.update(
                    zip(
                        map(metadata.partition_racks.get, owners, repeat(NO_RACKS)),
                        map(rack_by_member.get, owners.values(), repeat(_GONE)),
                        strict=True,
                    )
                )
        counts = self.counts
        now = {k: n for k, n in total.items() if k[1] is not _GONE}
        gone = [k for k in counts if k not in now]
        if gone:
            counts.del_many(gone)
        for key, n in now.items():
            if counts.get(key) != n:
                counts[key] = n
