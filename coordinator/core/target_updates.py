"""When and where a consumer group's target assignment is computed, the joins parked until a
group's first one, and a member moved toward the target.

* Batching (Kafka 4.3, ``group.consumer.assignment.interval.ms``): the next target is computed
  no sooner than the interval after the previous one; meanwhile an ASSIGN timer waits for the
  moment it is due (:meth:`TargetUpdates.update`).
* Offloading: a group of ``group.consumer.assignor.offload.min.members`` members or more has
  its target computed outside the event loop: the result asks the runtime for it, whose inputs
  are prepared a few members at a time (:meth:`TargetUpdates.prepare_job`,
  :meth:`~TargetUpdates.job`) and whose outcome is installed into the group as it is then
  (:meth:`TargetUpdates.apply`). A small change is computed inline all the same when the
  assignor computes only what changes (:meth:`TargetUpdates._small_change`): a worker process
  is reached by pickling the group's inputs, tens of milliseconds for 10,000 members, against a
  tenth of one for the incremental computation of a join.
* Parked joins (a driver that answers later, batching on): the members that join a group
  before its first target wait for it and are answered when it is installed, a command's worth
  at a time (:meth:`TargetUpdates.park`, :meth:`~TargetUpdates.first_target`,
  :meth:`~TargetUpdates.answer_waiting`).

One :class:`TargetUpdates` per shard, a part of its consumer groups (``consumer_groups.py``):
it writes the target assignment records and answers parked joins. :func:`reconcile_member`
moves a member toward the group's target (the heartbeat's step 5, and a parked join's answer).
"""

from __future__ import annotations

from collections.abc import Mapping
from heapq import nsmallest
from typing import Any

from assignors.api import PartitionAssignor

from . import records as r
from .commands import ConsumerGroupHeartbeatResponse, HeartbeatAssignment, Pending, Result
from .context import ShardContext
from .errors import CoordinatorError, UnknownServerError
from .events import Event, LogEvent
from .group import ConsumerGroup
from .group_configs import GroupConfigs
from .model import (
    EMPTY_ASSIGNMENT,
    Assignment,
    ConsumerGroupMember,
    MemberState,
    assignment_minus,
)
from .reconciliation import compute_next_member
from .target_assignment import (
    AssignmentJob,
    AssignmentOutcome,
    assignment_job,
    compute_target_assignment,
    incremental_method,
    incremental_target_assignment,
    outcome_is_stale,
    outcome_records,
    refresh_spec_cache_part,
)
from .timers import ASSIGN, REBALANCE, SESSION, ArmTimer, CancelTimer, DueTimer

ANSWERS_PER_COMMAND = 64
"""Parked joins answered by one command (each: the member's reconciliation, its record)."""


class TargetUpdates:
    """A shard's consumer groups' target updates and parked joins (see the module doc)."""

    def __init__(
        self,
        ctx: ShardContext,
        configs: GroupConfigs,
        by_group: Mapping[str, ConsumerGroup],
        assignors: Mapping[str, PartitionAssignor],
        assignor_names: tuple[str, ...],
    ) -> None:
        self._ctx = ctx
        self._configs = configs
        self._by_group = by_group  # the consumer groups' own (read here, never replaced)
        self._assignors = assignors
        self._assignor_names = assignor_names

    # ------------------------------------------------------------------ parked joins

    def park(
        self, result: Result[Any], group: ConsumerGroup, member_id: str, now_ms: int
    ) -> Result[Any]:
        """Park a join until the group's first target is installed (:meth:`answer_waiting`);
        the first parked join asks for that target once the joins queued behind it are in. A
        parked member's join sent again (a retry, a duplicate) is parked beside the first: both
        get the answer."""
        gid = group.group_id
        token = self._ctx.next_token()
        waiting = group.waiting
        if not waiting:
            result.parked_joins.append((gid, True))
            group.set("parked_at", group.assignment_epoch)
        waiting[member_id] = (*waiting.get(member_id, ()), token)
        session_ms = self._configs.session_timeout_ms(gid)
        result.timers.append(ArmTimer((SESSION, gid, member_id), now_ms + session_ms))
        result.response = Pending(token)
        return result

    def first_target(self, group_id: str, now_ms: int) -> Result[None]:
        """The group has parked joins (``parked_joins``): the first time (the joins queued
        behind the first one are in), compute its first target (inline, or off the loop for a
        big group); once a target is installed, answer the next of them. The result asks for
        another call (``parked_joins``) while some are left to answer. (A command:
        ``ConsumerGroups.first_target`` runs it.)"""
        result: Result[None] = Result()
        group = self._by_group.get(group_id)
        if group is None or not group.waiting:
            return result
        if group.assignment_epoch > group.parked_at or group.group_epoch <= group.assignment_epoch:
            self.answer_waiting(result, group, now_ms)  # a target is there: answer
            return result
        try:
            self.update(result, group, now_ms, first=True)
        except CoordinatorError as exc:  # the assignor failed (nothing changed): say so
            self.answer_waiting(result, group, now_ms, exc)
        return result

    def answer_waiting(
        self,
        result: Result[Any],
        group: ConsumerGroup,
        now_ms: int,
        error: CoordinatorError | None = None,
    ) -> None:
        """Answer parked joins (in arrival order), as their join would have been answered with
        the target the group has now: reconciled toward it, the assignment in full, its session
        timer armed anew. At most
        ``ANSWERS_PER_COMMAND`` of them (a command is not preempted: a burst of thousands is
        answered over many turns); the result asks for another call while some are left. An
        ``error`` goes to all of them at once."""
        waiting = group.waiting
        if not waiting:
            return
        gid = group.group_id
        interval_ms = self._configs.heartbeat_interval_ms(gid)
        session_ms = self._configs.session_timeout_ms(gid)
        if error is None and len(waiting) > ANSWERS_PER_COMMAND:  # the first of thousands
            first = nsmallest(ANSWERS_PER_COMMAND, waiting.items(), key=_first_token)
            result.parked_joins.append((group.group_id, False))
        else:
            first = sorted(waiting.items(), key=_first_token)
        for member_id, tokens in first:
            del waiting[member_id]
            if error is not None:
                result.completions += [(token, error) for token in tokens]
                continue
            final = reconcile_member(
                self._ctx, result, group, group.members[member_id], EMPTY_ASSIGNMENT, now_ms
            )
            pending = pending_partitions(group, final)
            group.reported_pending[member_id] = pending
            response = ConsumerGroupHeartbeatResponse(
                member_id=member_id,
                member_epoch=final.member_epoch,
                heartbeat_interval_ms=interval_ms,
                assignment=HeartbeatAssignment(assigned=final.assigned_partitions, pending=pending),
            )
            result.completions += [(token, response) for token in tokens]
            # Its session starts over with its answer: the wait was the server's, not silence.
            result.timers.append(ArmTimer((SESSION, gid, member_id), now_ms + session_ms))

    # ------------------------------------------------------------------ targets

    def update(
        self, result: Result[Any], group: ConsumerGroup, now_ms: int, *, first: bool = False
    ) -> None:
        """The group epoch is ahead of the target: compute a new target now, or say when.

        Batching (Kafka 4.3): the next target is computed no sooner than the assignment
        interval after the previous one (``assignment_timestamp_ms``); until then members get
        the last target (at its epoch) and an ASSIGN timer is armed for the moment it is due,
        so the computation does not wait for the next heartbeat. At once when the interval is
        0, when the group has no target yet (new or emptied: nobody would have anything) or
        when the last computation carries no timestamp. A group of
        ``group.consumer.assignor.offload.min.members`` members or more (once it has a target,
        or its parked joins wait for the first: ``first``) has it computed outside the event
        loop: the result asks the runtime for it (``offloads``) and :meth:`apply` installs the
        outcome — unless the change is small and its assignor incremental
        (:meth:`_small_change`); smaller groups inline. Parked joins are answered once a target
        is installed."""
        gid = group.group_id
        interval = self._configs.assignment_interval_ms(gid)
        key = (ASSIGN, gid, "")
        if interval and group.assignment_timestamp_ms and group.target:
            due = group.assignment_timestamp_ms + interval
            if now_ms < due:
                result.timers.append(ArmTimer(key, due))
                return
        config = self._ctx.config
        assignor = self._assignors[group.preferred_assignor(self._assignor_names)]
        stamp = now_ms if interval else 0
        if (
            config.consumer_assignor_offload_enable
            and (group.target or first)
            and len(group.members) >= config.consumer_assignor_offload_min_members
        ):
            records = self._small_change(group, assignor, stamp)
            if records is None:
                group.set("offload_asked_at", group.assignment_epoch)
                result.offloads.append(gid)
                return
        else:
            records = compute_target_assignment(group, group.group_epoch, assignor, stamp)
        for record in records:
            self._ctx.emit(result, record)
        self.answer_waiting(result, group, now_ms)
        # An ASSIGN timer armed earlier is left alone: when it fires, the target is either up
        # to date (nothing to do) or behind and due (exactly when it should be computed).

    def _small_change(
        self, group: ConsumerGroup, assignor: PartitionAssignor, stamp: int
    ) -> list[r.Record] | None:
        """The records of a big group's next target computed inline, when that costs less than
        shipping its inputs to a worker: its assignor computes only what changes
        (``assign_changes``), at most
        ``group.consumer.assignor.offload.inline.max.changed.members`` members changed since
        the last computation (``spec_dirty``: members that joined, left or changed, and those
        whose target it changed), the subscription metadata is the one the inputs were built
        for, and no computation asked off the loop is pending (the target is the one it was
        asked from: members that joined before it was copied would be computed here). None
        (the caller offloads) otherwise, and when the assignor declines or fails (the worker
        meets the same and reports it): the records are those the offloaded path writes."""
        bound = self._ctx.config.consumer_assignor_offload_inline_max_changed_members
        cache = group.spec_cache
        if (
            not bound
            or len(group.spec_dirty) > bound
            or cache is None
            or cache.metadata is not group.subscription_metadata
            or cache.free_stale
            or group.offload_asked_at == group.assignment_epoch
            or incremental_method(assignor) is None
        ):
            return None
        try:
            return incremental_target_assignment(group, group.group_epoch, assignor, stamp)
        except CoordinatorError:
            return None

    def prepare_job(self, group_id: str, members: int) -> bool:
        """Bring the inputs of the group's next offloaded computation (its spec cache) up to
        date for at most ``members`` members (a read: derived state, undo-logged); True when
        they are up to date (or there is nothing to compute). A big group's inputs are
        prepared over several commands so that no one command holds the loop for all of them
        (10,000 new members: about 50 ms)."""
        group = self._by_group.get(group_id)
        if group is None or group.group_epoch <= group.assignment_epoch:
            return True
        return refresh_spec_cache_part(group, members)

    def job(self, group_id: str) -> AssignmentJob | None:
        """The inputs of an offloaded computation for the group as it is now (a read), or None
        when there is nothing to compute (the group is gone or its target is up to date)."""
        group = self._by_group.get(group_id)
        if group is None or group.group_epoch <= group.assignment_epoch:
            return None
        assignor = group.preferred_assignor(self._assignor_names)
        return assignment_job(group, group.group_epoch, assignor)

    def apply(self, outcome: AssignmentOutcome, now_ms: int) -> Result[None]:
        """An offloaded computation is back: install its target into the group as it is now
        (members that left skipped, replaced static members remapped, members that joined since
        keep their target), discard it if it is stale (the group was deleted or re-created, or
        its target is already at that epoch), or log its error (the target stays). If the group
        moved on meanwhile, the next computation is scheduled as after any other. (A command:
        ``ConsumerGroups.apply_assignment`` runs it.)"""
        result: Result[None] = Result()
        group = self._by_group.get(outcome.group_id)
        stale = outcome_is_stale(group, outcome)
        if stale is not None:
            result.events.append(
                LogEvent(
                    event=Event.TARGET_ASSIGNMENT_DISCARDED,
                    group_id=outcome.group_id,
                    fields={"epoch": outcome.epoch, "reason": stale},
                )
            )
        elif outcome.error is not None:
            result.events.append(
                LogEvent(
                    event=Event.TARGET_ASSIGNMENT_FAILED,
                    group_id=outcome.group_id,
                    fields={"error": outcome.error},
                )
            )
            if group is not None:  # parked joins hear of it (they join again)
                error = UnknownServerError(
                    f"Failed to compute a new target assignment for epoch {outcome.epoch}: "
                    f"{outcome.error}"
                )
                self.answer_waiting(result, group, now_ms, error)
            return result  # the next eligible heartbeat or timer tries again (Kafka)
        if group is None:
            return result
        if stale is None:
            interval = self._configs.assignment_interval_ms(group.group_id)
            for record in outcome_records(group, outcome, now_ms if interval else 0):
                self._ctx.emit(result, record)
            self.answer_waiting(result, group, now_ms)
        if group.group_epoch > group.assignment_epoch:
            self.update(result, group, now_ms)
        return result

    def on_assign_timer(self, timer: DueTimer, now_ms: int) -> Result[None]:
        """The assignment interval of a group has passed: compute its target if it is behind
        and has members (an emptied group has nobody to assign to; its next member's join
        computes one at once)."""
        group = self._by_group.get(timer.key[1])
        result: Result[None] = Result()
        if group is None or not group.members or group.group_epoch <= group.assignment_epoch:
            return result
        return self._ctx.run(self._assign_now, result, group, now_ms)

    def _assign_now(self, result: Result[None], group: ConsumerGroup, now_ms: int) -> Result[None]:
        self.update(result, group, now_ms)
        return result


def _first_token(item: tuple[str, tuple[int, ...]]) -> int:
    """A parked member's first token: when its join arrived."""
    return item[1][0]


# ------------------------------------------------------------------ a member toward its target


def reconcile_member(
    ctx: ShardContext,
    result: Result[Any],
    group: ConsumerGroup,
    member: ConsumerGroupMember,
    owned: Assignment | None,
    now_ms: int,
    resubscribed: bool = False,
) -> ConsumerGroupMember:
    """Move the member toward its target (reconciliation's ``compute_next_member``): its
    current assignment record and its rebalance timer. While the target lags behind the group
    epoch (batching, offloading), the member's subscription filters it (and a member whose
    subscription just dropped topics revokes them at its epoch): see reconciliation."""
    epoch = group.assignment_epoch
    lagging = group.group_epoch > epoch
    if member.is_reconciled_to(epoch) and not (lagging and resubscribed):
        return member
    subscribed = subscribed_ids(group, member) if lagging else None
    updated = compute_next_member(
        member, epoch, group.target_of(member.member_id), group.owner_of, owned, subscribed
    )
    if updated is member:
        return member
    gid = group.group_id
    ctx.emit(result, r.current_assignment_record(gid, updated))
    key = (REBALANCE, gid, member.member_id)
    if updated.classic_member_metadata is None:
        if updated.state is MemberState.UNREVOKED_PARTITIONS:
            result.timers.append(
                ArmTimer(key, now_ms + updated.rebalance_timeout_ms, updated.member_epoch)
            )
        else:
            result.timers.append(CancelTimer(key))
    return updated


def subscribed_ids(group: ConsumerGroup, member: ConsumerGroupMember) -> frozenset[str]:
    """The ids of the existing topics the member subscribes to."""
    metadata = group.subscription_metadata
    return frozenset(
        metadata[name].topic_id for name in group.effective_topics(member) if name in metadata
    )


def pending_partitions(group: ConsumerGroup | None, member: ConsumerGroupMember) -> Assignment:
    """What the member's target adds to what it has (our response's pending partitions);
    while the target lags, only of topics the member still subscribes to."""
    if group is None:
        return EMPTY_ASSIGNMENT
    pending = assignment_minus(group.target_of(member.member_id), member.assigned_partitions)
    if pending and group.group_epoch > group.assignment_epoch:
        subscribed = subscribed_ids(group, member)
        pending = {t: ps for t, ps in pending.items() if t in subscribed}
    return pending
