"""Rebalances read from the durable record stream: epoch bumps with their cause, rebalance
durations, completed classic rebalances.

The tracker is fed the records of every command once their batch is durable (never a change
that was rolled back), the way the loader replays them, and keeps a small shadow per group:
the group epoch, the target assignment epoch, and per member its epoch and what it asked for.
From one command's records it tells:

* **an epoch bump** (a ``ConsumerGroupMetadata`` record with a higher epoch) and its **cause**,
  from what else the same command wrote: a member tombstoned by a timer is ``member_fenced``,
  otherwise ``member_left``; a static member's new id replacing an old one ``member_replaced``;
  a new member ``member_joined``; a member's new subscription, assignor or rack
  ``subscription_changed`` / ``assignor_changed`` / ``rack_changed``; a resolved regex
  ``regex_resolved``; new subscription metadata (topics created, deleted, grown)
  ``metadata_changed``. Each bump is counted and logged (logger ``kip848.rebalance``) with the
  group, the new epoch, the cause and the members concerned;
* **the end of a rebalance**: the group's target assignment is at the group epoch and every
  member has reconciled to it (the group is Stable). The time since the first bump that started
  the rebalance goes into ``kip848_rebalance_duration_seconds``; a bump during a rebalance
  extends it; a group that empties ends it without a duration.
* **a completed classic rebalance**: a classic group's ``GroupMetadata`` with a new generation.

Costs nothing on steady heartbeats: they write no records.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from coordinator.core import records as r

from .logs import log_fields
from .metrics import CoordinatorMetrics

log = logging.getLogger("kip848.rebalance")

FENCING_TIMERS = ("session", "rebalance")


class _Member:
    __slots__ = ("ask", "epoch")

    def __init__(self, ask: tuple[Any, ...], epoch: int) -> None:
        self.ask = ask  # (topic names, regex, assignor, rack)
        self.epoch = epoch


class _Group:
    __slots__ = ("assignment_epoch", "epoch", "members", "started")

    def __init__(self, epoch: int = 0, assignment_epoch: int = 0) -> None:
        self.epoch = epoch
        self.assignment_epoch = assignment_epoch
        self.members: dict[str, _Member] = {}
        self.started: float | None = None  # monotonic time of the bump that began a rebalance


def _ask(value: Any) -> tuple[Any, ...]:
    return (
        tuple(sorted(value.subscribed_topic_names)),
        value.subscribed_topic_regex,
        value.server_assignor,
        value.rack_id,
    )


_ASK_CAUSES = ("subscription_changed", "subscription_changed", "assignor_changed", "rack_changed")


class RebalanceTracker:
    def __init__(self, metrics: CoordinatorMetrics | None) -> None:
        self.metrics = metrics
        self.groups: dict[str, _Group] = {}
        self.classic_generations: dict[str, int] = {}

    def seed(self, shards: Sequence[Any]) -> None:
        """Start from the loaded state (so a restart does not count every member as new)."""
        for shard in shards:
            for gid, group in shard.groups.items():
                g = self.groups[gid] = _Group(group.group_epoch, group.assignment_epoch)
                for mid, m in group.members.items():
                    g.members[mid] = _Member(
                        (
                            tuple(sorted(m.subscribed_topic_names)),
                            m.subscribed_topic_regex,
                            m.server_assignor_name,
                            m.rack_id,
                        ),
                        m.member_epoch,
                    )
            for gid, group in getattr(shard, "classic_groups", {}).items():
                self.classic_generations[gid] = group.generation

    def apply(self, records: Sequence[Any], timer: str | None) -> None:
        """The records of one command, now durable; ``timer`` is the kind of the timer that ran
        the command (None for a request)."""
        touched: dict[str, list[Any]] = {}
        for rec in records:
            kind = type(rec.key)
            if kind is r.OffsetCommitKey or kind is r.TopicKey or kind is r.GroupConfigKey:
                continue
            touched.setdefault(rec.key.group_id, []).append(rec)
        now = time.monotonic()
        for gid, recs in touched.items():
            self._apply_group(gid, recs, timer, now)

    def _apply_group(self, gid: str, recs: list[Any], timer: str | None, now: float) -> None:
        g = self.groups.get(gid)
        if g is None:
            g = self.groups[gid] = _Group()
        joined: list[str] = []
        left: list[str] = []
        asked: list[tuple[str, str]] = []  # (cause, member id)
        new_epoch: int | None = None
        deleted = regex = metadata = False
        for rec in recs:
            kind, value = type(rec.key), rec.value
            if kind is r.ConsumerGroupMetadataKey:
                if value is None:
                    deleted = True
                else:
                    new_epoch = value.epoch
            elif kind is r.ConsumerGroupMemberMetadataKey:
                mid = rec.key.member_id
                member = g.members.get(mid)
                if value is None:
                    if member is not None:
                        del g.members[mid]
                        left.append(mid)
                elif member is None:
                    g.members[mid] = _Member(_ask(value), 0)
                    joined.append(mid)
                else:
                    ask = _ask(value)
                    for i, (old, new) in enumerate(zip(member.ask, ask, strict=True)):
                        if old != new:
                            asked.append((_ASK_CAUSES[i], mid))
                            break
                    member.ask = ask
            elif kind is r.ConsumerGroupCurrentMemberAssignmentKey:
                member = g.members.get(rec.key.member_id)
                if member is not None and value is not None:
                    member.epoch = value.member_epoch
            elif kind is r.ConsumerGroupTargetAssignmentMetadataKey:
                if value is not None:
                    g.assignment_epoch = value.assignment_epoch
            elif kind is r.ConsumerGroupRegularExpressionKey:
                regex = True
            elif kind is r.ConsumerGroupPartitionMetadataKey:
                metadata = True
            elif kind is r.GroupMetadataKey:
                self._classic(gid, value)
        if deleted:
            self.groups.pop(gid, None)
            return
        if new_epoch is not None and new_epoch > g.epoch:
            if joined and left:
                cause, who = "member_replaced", [*left, *joined]
            elif left:
                cause = "member_fenced" if timer in FENCING_TIMERS else "member_left"
                who = left
            elif joined:
                cause, who = "member_joined", joined
            elif asked:
                cause, who = asked[0][0], [m for _, m in asked]
            elif regex:
                cause, who = "regex_resolved", []
            elif metadata:
                cause, who = "metadata_changed", []
            else:
                cause, who = "other", []
            self._bumped(gid, g, new_epoch, cause, who, timer, now)
        self._check_reconciled(g, now)

    def _bumped(
        self,
        gid: str,
        g: _Group,
        epoch: int,
        cause: str,
        members: list[str],
        timer: str | None,
        now: float,
    ) -> None:
        previous = g.epoch
        g.epoch = epoch
        if self.metrics is not None:
            self.metrics.rebalance(cause)
        if g.started is None:
            g.started = now
        log_fields(
            log,
            logging.INFO,
            f"[GroupId {gid}] Bumped group epoch from {previous} to {epoch}: {cause}.",
            group_id=gid,
            group_epoch=epoch,
            previous_group_epoch=previous,
            cause=cause,
            member_ids=",".join(members) or None,
            timer=timer,
        )

    def _check_reconciled(self, g: _Group, now: float) -> None:
        if g.started is None:
            return
        if not g.members:
            g.started = None  # emptied: no rebalance left to finish
            return
        epoch = g.epoch
        if g.assignment_epoch != epoch:
            return
        for m in g.members.values():
            if m.epoch != epoch:
                return
        seconds = now - g.started
        g.started = None
        if self.metrics is not None:
            self.metrics.rebalance_completed("consumer", seconds)

    def _classic(self, gid: str, value: Any) -> None:
        if value is None:
            self.classic_generations.pop(gid, None)
            return
        previous = self.classic_generations.get(gid, 0)
        self.classic_generations[gid] = value.generation
        if value.generation > previous and value.members and self.metrics is not None:
            self.metrics.classic_rebalances.inc()
