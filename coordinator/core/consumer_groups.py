"""Consumer groups: the KIP-848 protocol (Kafka's GroupMetadataManager, consumer-group part).

The component owns the consumer groups of its shard (a read-only mapping group id ->
:class:`ConsumerGroup`) and the records that change them (member metadata, current and target
assignments, group and assignment epochs, subscription metadata, resolved regexes). Its command
is ConsumerGroupHeartbeat (join, heartbeat, leave); its timers are the members' session and
rebalance timeouts. The legacy bridge joins classic members through :meth:`join_as_classic` and
is asked to convert groups through the shard's :class:`~.components.ClassicGroupSupport`.

Its parts: ``membership.py`` (who a heartbeat is from: the request checks, the member found or
created, its epoch), ``subscriptions.py`` (subscription metadata and regexes),
``target_updates.py`` (when and where a target is computed, parked joins, a member moved toward
its target) and ``group_descriptions.py`` (describe, list).
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from assignors.api import PartitionAssignor, TopicMetadata

from . import group_descriptions as descriptions
from . import records as r
from .commands import (
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatResponse,
    HeartbeatAssignment,
    ListedGroup,
    Result,
)
from .components import ByGroupId
from .context import ShardContext
from .errors import (
    CoordinatorError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    IllegalStateError,
    UnknownMemberIdError,
)
from .events import Cause, Event, LogEvent, epoch_bumped
from .group import ConsumerGroup, GroupState
from .group_configs import GroupConfigs
from .group_descriptions import GroupDescription
from .membership import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    check_heartbeat_request,
    check_new_regex,
    find_or_create_member,
    leaving_member,
    updated_member,
)
from .model import (
    EMPTY_ASSIGNMENT,
    ClassicMemberMetadata,
    ConsumerGroupMember,
    MemberState,
)
from .subscriptions import Subscriptions, TopicFilter
from .target_assignment import (
    AssignmentJob,
    AssignmentOutcome,
)
from .target_updates import TargetUpdates, pending_partitions, reconcile_member
from .timers import ASSIGN, REBALANCE, SESSION, ArmTimer, CancelTimer, DueTimer, TimerOp

if TYPE_CHECKING:
    from .components import ClassicGroupSupport

_SUBSCRIBING = frozenset({Cause.MEMBER_JOINED, Cause.SUBSCRIPTION_CHANGED, Cause.REGEX_CHANGED})
"""Causes that change the subscribed topics (and so the subscription metadata) themselves."""


class ConsumerGroups(ByGroupId[ConsumerGroup]):
    def __init__(
        self,
        ctx: ShardContext,
        *,
        assignors: Sequence[PartitionAssignor],
        configs: GroupConfigs,
    ) -> None:
        if not assignors:
            raise ValueError("at least one assignor is required")
        self._ctx = ctx
        self._configs = configs
        self.assignors: dict[str, PartitionAssignor] = {a.name: a for a in assignors}
        self.assignor_names: tuple[str, ...] = tuple(a.name for a in assignors)
        self._by_group = ctx.undo.new_dict()  # group id -> ConsumerGroup
        self._subscriptions = Subscriptions(ctx)
        self._targets = TargetUpdates(
            ctx, configs, self._by_group, self.assignors, self.assignor_names
        )
        self.classic: ClassicGroupSupport | None = None
        """Set once by the shard: the classic groups of the same shard (upgrade/downgrade)."""
        self.other_groups: Container[str] = ()
        """Set once by the shard: the ids of its groups of another type — classic groups, and
        simple groups known only through their offsets (Kafka's are classic groups too)."""
        self.topic_filter: TopicFilter | None = None
        """Set by the server: may (principal, client host) describe this topic? A regex resolved
        in a member's heartbeat matches only the topics it allows (KIP-848 with Kafka's
        KAFKA-18813: the resolution is the triggering member's). None: every topic. A pure
        predicate (the authorizer's decision); the core only calls it."""
        self.parks_joins = False
        """Set by a driver that can answer a command's response later (the runtime: a
        ``Pending`` response, answered by a later result's ``completions``): then, with batching
        on, the members that join a group before its first target are parked and answered when
        it is installed, and that target waits for the joins queued behind the first one
        (``parked_joins``), so a new group's first target covers a burst of joins at once."""

    def _classic(self) -> ClassicGroupSupport:
        if self.classic is None:
            raise AssertionError("the shard wires its classic groups at construction")
        return self.classic

    # ------------------------------------------------------------------ heartbeat

    def consumer_group_heartbeat(
        self, req: ConsumerGroupHeartbeat, now_ms: int
    ) -> Result[ConsumerGroupHeartbeatResponse]:
        """ConsumerGroupHeartbeat (KIP-848 "Request Handling"; Kafka 4.0 semantics)."""
        check_heartbeat_request(req, self.assignor_names)
        if req.member_epoch < 0:
            return self._ctx.run(self._leave, req, now_ms)
        return self._ctx.run(self._heartbeat, req, now_ms, None)

    def join_as_classic(
        self, req: ConsumerGroupHeartbeat, classic: ClassicMemberMetadata, now_ms: int
    ) -> Result[ConsumerGroupHeartbeatResponse]:
        """A classic member's JoinGroup, translated by the legacy bridge into a heartbeat (no
        request validation, no group conversion; the caller runs it inside its own command)."""
        return self._heartbeat(req, now_ms, classic)

    def _heartbeat(
        self, req: ConsumerGroupHeartbeat, now_ms: int, classic: ClassicMemberMetadata | None
    ) -> Result[ConsumerGroupHeartbeatResponse]:
        """``classic``: the member speaks the classic protocol (a JoinGroup translated by the
        legacy bridge); None for a ConsumerGroupHeartbeat."""
        ctx = self._ctx
        result: Result[ConsumerGroupHeartbeatResponse] = Result()
        upgraded = False
        if classic is None:
            # A classic group of that id is converted, replaced or refused (KIP-848 upgrade).
            upgraded = self._classic().prepare_consumer_group(result, req, now_ms)
        group_id = req.group_id
        group: ConsumerGroup | None = self._by_group.get(group_id)
        epoch = req.member_epoch
        owned = req.topic_partitions
        if group is None and epoch != 0:
            self._group_or_raise(group_id, "Consumer group")
        member_id = req.member_id or ctx.ids.new_member_id()

        # 1. Find or create the member, validating its epoch (KIP-848 "Fencing"). A full group
        # refuses any member id it does not know, before anything else is looked at — also a
        # static member coming back under a new member id (Kafka's throwIfConsumerGroupIsFull).
        max_size = ctx.config.consumer_max_size
        if group is not None and len(group.members) >= max_size and member_id not in group.members:
            raise GroupMaxSizeReachedError(
                f"The consumer group has reached its maximum capacity of {max_size} members."
            )
        member, replaced = find_or_create_member(group, member_id, req, classic is not None)
        check_new_regex(member, req)
        before_assigned = member.assigned_partitions
        before_pending = (
            pending_partitions(group, member) if group is not None and replaced is None else None
        )
        if group is not None and replaced is not None:
            self._replace_static_member(result, group, replaced, member)
            result.timers += self._cancel_timers(group_id, replaced.member_id)

        # 2. Apply the request's "null means unchanged" fields.
        updated = updated_member(member, req, classic)
        is_new = group is None or member_id not in group.members
        causes: list[Cause] = []
        old_regex, new_regex = member.subscribed_topic_regex, updated.subscribed_topic_regex
        regex_changed = old_regex != new_regex
        if is_new or updated != member:
            ctx.emit(result, r.member_metadata_record(group_id, updated))
            if updated.subscribed_topic_names != member.subscribed_topic_names:
                causes.append(Cause.SUBSCRIPTION_CHANGED)
            if regex_changed:
                # A resolved regex (one other members use, or the one dropped) changes what the
                # member subscribes to at once; a new regex, once it is resolved, off the
                # heartbeat path (Kafka 4.x), which bumps the epoch then.
                g = self._by_group[group_id]
                if g.effective_topics(member) != g.effective_topics(updated):
                    causes.append(Cause.REGEX_CHANGED)
            if updated.server_assignor_name != member.server_assignor_name:
                causes.append(Cause.ASSIGNOR_CHANGED)
            if updated.rack_id != member.rack_id:  # KAFKA-20909 (never when omitted)
                causes.append(Cause.RACK_CHANGED)
            if is_new and causes:
                causes = [Cause.MEMBER_JOINED]
        group = self._by_group[group_id]
        new_group = group.group_uid == ""
        if old_regex and regex_changed:
            self._subscriptions.maybe_drop_regex(result, group, old_regex)
        if group.regex_members:
            self._subscriptions.maybe_ask_regexes(
                result, group, now_ms, req, regex_changed and bool(new_regex)
            )

        # 3. Refresh subscription metadata when needed; bump the group epoch.
        image_version = ctx.topics.version
        if (
            causes
            or new_group
            or upgraded
            or regex_changed
            or group.metadata_checked != (image_version, group.group_epoch)
        ):
            # New subscription metadata is a cause of its own only when no change of the
            # member's subscription explains it (topics created, deleted, or grown; a regex
            # dropped).
            if self._subscriptions.refresh(result, group) and not _SUBSCRIBING.intersection(causes):
                causes.append(
                    Cause.REGEX_CHANGED if regex_changed else Cause.TOPIC_METADATA_CHANGED
                )
            if new_group and not causes:
                causes.append(Cause.MEMBER_JOINED)  # a new group starts at epoch 1
            if upgraded and not causes and group.subscription_metadata:
                # The heartbeat that converted a classic group. Kafka's conversion
                # (ConsumerGroup.fromClassicGroup, createConsumerGroupRecords) leaves the new
                # group without subscription metadata, so that heartbeat finds the metadata
                # changed and bumps the epoch, whoever it comes from: a static member replacing
                # its classic incarnation (KAFKA-17228), or a member joining (epoch 0, accepted
                # since KAFKA-19233) under the member id of a classic member with the same
                # subscription; a new member bumps it anyway. A new target from the topics as
                # they are now, not the classic leader's last assignment (docs/legacy_bridge.md).
                causes.append(Cause.TOPIC_METADATA_CHANGED)
            if causes or new_group:
                uid = group.group_uid or ctx.ids.new_group_uid()
                bumped = group.group_epoch + (1 if causes else 0)
                ctx.emit(result, r.group_epoch_record(group_id, bumped, uid))
                if causes:
                    result.events.append(
                        epoch_bumped(group_id, group.group_epoch, tuple(causes), (member_id,))
                    )
            group.set("metadata_checked", (image_version, group.group_epoch))

        # 4. A new target assignment when the group epoch is ahead (KIP-848 "Assignment Epoch"),
        # at most once per assignment interval, off the loop for a big group. Before a group's
        # first target (nobody in it answered yet), a join is parked until that target exists.
        if (
            classic is None
            and replaced is None
            and epoch == 0
            and (is_new or member_id in group.waiting)
            and self._before_first_target(group, member_id)
        ):
            return self._targets.park(result, group, member_id, now_ms)
        if group.group_epoch > group.assignment_epoch:
            self._targets.update(result, group, now_ms)

        # 5. Reconcile the member toward its target (KIP-848 "Member Epoch").
        member = group.members[member_id]
        resubscribed = Cause.SUBSCRIPTION_CHANGED in causes or Cause.REGEX_CHANGED in causes
        final = reconcile_member(self._ctx, result, group, member, owned, now_ms, resubscribed)

        # 6. Session timeout and response.
        session_ms = (
            classic.session_timeout_ms
            if classic is not None
            else self._configs.session_timeout_ms(group_id)
        )
        result.timers.append(ArmTimer((SESSION, group_id, member_id), now_ms + session_ms))
        # The assignment is sent only on a join, on a full request (all the fields a client sends
        # after an error: rebalance timeout, subscription, owned partitions) or when it changed
        # (Kafka: hasAssignedPartitionsChanged); absent means "unchanged" to the client. Our
        # Assignment also carries the pending partitions, so a change of those counts too; a
        # new epoch with the same assigned and pending partitions (e.g. the heartbeat that
        # acknowledges a revocation) carries none.
        full = epoch == 0 or (
            req.rebalance_timeout_ms != -1
            and (req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None)
            and owned is not None
        )
        pending = pending_partitions(group, final)
        reported = group.reported_pending.get(member_id, before_pending)
        assignment = None
        if full or final.assigned_partitions != before_assigned or pending != reported:
            assignment = HeartbeatAssignment(assigned=final.assigned_partitions, pending=pending)
            if pending != reported or member_id not in group.reported_pending:
                group.reported_pending[member_id] = pending
        result.response = ConsumerGroupHeartbeatResponse(
            member_id=member_id,
            member_epoch=final.member_epoch,
            heartbeat_interval_ms=self._configs.heartbeat_interval_ms(group_id),
            assignment=assignment,
        )
        return result

    def _before_first_target(self, group: ConsumerGroup, member_id: str) -> bool:
        """Is this join (of a new member, or of a parked one sent again) to be parked: joins
        are parked (a driver that answers later, batching on), and every other member of the
        group is itself parked, waiting for the first target (a new group, or one that was
        emptied)?"""
        others_answered = len(group.members) - len(group.waiting)
        if member_id not in group.waiting:
            others_answered -= 1  # the new member itself
        return (
            self.parks_joins
            and others_answered == 0
            and group.group_epoch > group.assignment_epoch
            and self._configs.assignment_interval_ms(group.group_id) > 0
        )

    def first_target(self, group_id: str, now_ms: int) -> Result[None]:
        """The group has parked joins (``parked_joins``): the first time (the joins queued
        behind the first one are in), compute its first target (inline, or off the loop for a
        big group); once a target is installed, answer the next of them. The result asks for
        another call (``parked_joins``) while some are left to answer."""
        return self._ctx.run(self._targets.first_target, group_id, now_ms)

    def _replace_static_member(
        self,
        result: Result[Any],
        group: ConsumerGroup,
        old: ConsumerGroupMember,
        new: ConsumerGroupMember,
    ) -> None:
        """A static member re-joins under a new member id: it takes over the old member's
        subscription and target, and its current partitions at epoch 0 (KIP-848 "Static Membership")."""
        emit, gid = self._ctx.emit, group.group_id
        old_target = group.target_of(old.member_id)
        self.remove_member_records(result, gid, old.member_id)
        emit(result, r.member_metadata_record(gid, new))
        emit(result, r.target_assignment_record(gid, new.member_id, old_target))
        emit(result, r.current_assignment_record(gid, new))
        result.events.append(
            LogEvent(
                event=Event.STATIC_MEMBER_REPLACED,
                group_id=gid,
                fields={
                    "instance_id": new.instance_id,
                    "member_id": new.member_id,
                    "replaced_member_id": old.member_id,
                },
            )
        )

    def resolve_regexes(self, group_id: str, now_ms: int) -> Result[None]:
        """Resolve the group's regexes against the topics image (the runtime runs this as a
        command of its own, asked by a heartbeat: ``Subscriptions.maybe_ask_regexes``). Each
        regex the group still subscribes to gets its resolution record (Kafka writes them all:
        the timestamp is the group's last refresh); a changed resolution bumps the group epoch
        (KIP-848 "Regex Based Subscription"; also one that became empty, KAFKA-19899), and so
        does new subscription metadata. With a ``topic_filter``, a regex resolves only to the
        topics the member whose heartbeat asked may describe (Kafka's TopicRegexResolver)."""
        return self._ctx.run(self._resolve_regexes, group_id, now_ms)

    def _resolve_regexes(self, group_id: str, now_ms: int) -> Result[None]:
        result: Result[None] = Result()
        group = self._by_group.get(group_id)
        if group is None:
            return result
        subscriptions = self._subscriptions
        changed = subscriptions.resolve_regexes(result, group, now_ms, self.topic_filter)
        if not group.regex_members:
            return result
        if subscriptions.refresh(result, group) or changed:
            self._ctx.emit(
                result, r.group_epoch_record(group_id, group.group_epoch + 1, group.group_uid)
            )
            group.set("metadata_checked", (self._ctx.topics.version, group.group_epoch))
            result.events.append(
                epoch_bumped(group_id, group.group_epoch, (Cause.REGEX_RESOLVED,), ())
            )
            if group.members:
                try:
                    self._targets.update(result, group, now_ms)
                except CoordinatorError as exc:  # the assignor failed: nothing of it was written
                    result.events.append(
                        LogEvent(
                            event=Event.TARGET_ASSIGNMENT_FAILED,
                            group_id=group_id,
                            fields={"error": exc.message},
                        )
                    )  # the resolution stands; the next heartbeat computes the target
        return result

    def subscription_metadata(self, group: ConsumerGroup) -> dict[str, TopicMetadata]:
        """The group's subscription metadata from the topics image (``Subscriptions.metadata``;
        the legacy bridge writes it when it converts a classic group)."""
        return self._subscriptions.metadata(group)

    # ------------------------------------------------------------------ target assignment

    def prepare_assignment_job(self, group_id: str, members: int) -> bool:
        """Bring the inputs of the group's next offloaded computation up to date for at most
        ``members`` members (``TargetUpdates.prepare_job``)."""
        return self._targets.prepare_job(group_id, members)

    def assignment_job(self, group_id: str) -> AssignmentJob | None:
        """The inputs of an offloaded computation for the group as it is now
        (``TargetUpdates.job``)."""
        return self._targets.job(group_id)

    def apply_assignment(self, outcome: AssignmentOutcome, now_ms: int) -> Result[None]:
        """An offloaded computation is back: install its target, discard it, or log its error
        (``TargetUpdates.apply``)."""
        return self._ctx.run(self._targets.apply, outcome, now_ms)

    # ------------------------------------------------------------------ leaving and fencing

    def _leave(
        self, req: ConsumerGroupHeartbeat, now_ms: int
    ) -> Result[ConsumerGroupHeartbeatResponse]:
        group = self._group_or_raise(req.group_id)
        member_id = req.member_id
        member = leaving_member(group, req)
        if req.instance_id is not None and req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # Temporary leave: keep the member and its partitions for its session timeout.
            result: Result[ConsumerGroupHeartbeatResponse] = Result()
            leaving = replace(
                member,
                member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                partitions_pending_revocation=EMPTY_ASSIGNMENT,
            )
            self._ctx.emit(result, r.current_assignment_record(group.group_id, leaving))
            result.response = ConsumerGroupHeartbeatResponse(
                member_id=member_id,
                member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                heartbeat_interval_ms=0,
            )
            result.events.append(
                LogEvent(
                    event=Event.STATIC_MEMBER_LEFT_TEMPORARILY,
                    group_id=group.group_id,
                    fields={"member_id": member_id, "instance_id": req.instance_id},
                )
            )
            return result
        result = self.fence_member(group, member, now_ms, Cause.MEMBER_LEFT)
        result.response = ConsumerGroupHeartbeatResponse(
            member_id=member_id, member_epoch=LEAVE_GROUP_MEMBER_EPOCH, heartbeat_interval_ms=0
        )
        return result

    def remove_member_records(self, result: Result[Any], group_id: str, member_id: str) -> None:
        """The member's three tombstones, in the order replay requires (a parked join of the
        member is answered: it is gone)."""
        group = self._by_group.get(group_id)
        if group is not None and member_id in group.waiting:
            tokens = group.waiting[member_id]
            del group.waiting[member_id]
            gone = UnknownMemberIdError(
                f"Member {member_id} was removed from group {group_id} before the group's "
                "first target assignment was computed."
            )
            result.completions += [(token, gone) for token in tokens]
        emit = self._ctx.emit
        emit(result, r.current_assignment_tombstone(group_id, member_id))
        emit(result, r.target_assignment_tombstone(group_id, member_id))
        emit(result, r.member_metadata_tombstone(group_id, member_id))

    def fence_member(
        self,
        group: ConsumerGroup,
        member: ConsumerGroupMember,
        now_ms: int,
        cause: Cause,
        reason: str | None = None,
    ) -> Result[Any]:
        """Remove a member: 3 tombstones, recomputed subscription metadata, group epoch + 1."""
        result: Result[Any] = Result()
        self.remove_members(result, group, [member], now_ms, cause, reason)
        return result

    def remove_members(
        self,
        result: Result[Any],
        group: ConsumerGroup,
        members: Sequence[ConsumerGroupMember],
        now_ms: int,
        cause: Cause,
        reason: str | None = None,
        timer_kinds: Iterable[str] = (SESSION, REBALANCE),
    ) -> None:
        """Remove members (each: its tombstones, its regex if it was the last user, its timers of
        ``timer_kinds`` cancelled), recompute the subscription metadata, bump the group epoch once;
        then the classic groups may take the group over (KIP-848 downgrade)."""
        emit, gid = self._ctx.emit, group.group_id
        kinds = tuple(timer_kinds)
        for member in members:
            self.remove_member_records(result, gid, member.member_id)
            if member.subscribed_topic_regex:
                self._subscriptions.maybe_drop_regex(result, group, member.subscribed_topic_regex)
            result.timers += [CancelTimer((k, gid, member.member_id)) for k in kinds]
        self._subscriptions.refresh(result, group)
        emit(result, r.group_epoch_record(gid, group.group_epoch + 1, group.group_uid))
        if not group.members:
            # An empty group keeps no target to catch up with: its assignment epoch follows the
            # group epoch (Kafka 4.3, KAFKA-20442), the batching timestamp unchanged.
            emit(
                result,
                r.target_assignment_epoch_record(
                    gid, group.group_epoch, group.assignment_timestamp_ms
                ),
            )
        group.set("metadata_checked", (self._ctx.topics.version, group.group_epoch))
        result.events.append(
            epoch_bumped(
                gid, group.group_epoch, (cause,), tuple(m.member_id for m in members), reason
            )
        )
        self._classic().maybe_downgrade(result, group, now_ms)
        if (
            group.members
            and self._by_group.get(gid) is group
            and self._configs.assignment_interval_ms(gid)
        ):
            # Batching (issue 14: unlike Kafka, never wait for some member's heartbeat once the
            # interval has passed): the remaining members' target is computed now if the last
            # computation is an interval old, else the ASSIGN timer is armed for the moment it
            # is. With the interval at 0 the next heartbeat computes it, as before Kafka 4.3.
            self._targets.update(result, group, now_ms)

    @staticmethod
    def _cancel_timers(group_id: str, member_id: str) -> list[TimerOp]:
        return [
            CancelTimer((SESSION, group_id, member_id)),
            CancelTimer((REBALANCE, group_id, member_id)),
        ]

    def delete_group(self, result: Result[Any], group_id: str) -> None:
        """Delete an empty group (DeleteGroups, expiration, replaced by a classic group): the
        tombstones of its regexes, target assignment epoch, subscription metadata and epoch."""
        group = self._by_group.get(group_id)
        if group is None:
            return
        emit = self._ctx.emit
        for regex in sorted(group.resolved_regexes):
            emit(result, r.regex_tombstone(group_id, regex))
        emit(result, r.target_assignment_epoch_tombstone(group_id))
        emit(result, r.partition_metadata_tombstone(group_id))
        emit(result, r.group_epoch_tombstone(group_id))

    # ------------------------------------------------------------------ timers

    def timer_handlers(self) -> dict[str, Callable[[DueTimer, int], Result[None]]]:
        return {
            SESSION: self._on_member_timer,
            REBALANCE: self._on_member_timer,
            ASSIGN: self._targets.on_assign_timer,
        }

    def _on_member_timer(self, timer: DueTimer, now_ms: int) -> Result[None]:
        """A session or rebalance timer fired. Stale timers (member gone, epoch moved on) do nothing."""
        kind, group_id, member_id = timer.key
        group = self._by_group.get(group_id)
        member = None if group is None else group.members.get(member_id)
        if member is None or group is None:
            return Result()
        if kind == SESSION:
            return self._ctx.run(
                self.fence_member,
                group,
                member,
                now_ms,
                Cause.MEMBER_FENCED_SESSION_TIMEOUT,
                "session timeout expired",
            )
        if member.member_epoch != timer.payload:
            return Result()
        return self._ctx.run(
            self.fence_member,
            group,
            member,
            now_ms,
            Cause.MEMBER_FENCED_REBALANCE_TIMEOUT,
            f"failed to revoke partitions from epoch {timer.payload} within its rebalance timeout",
        )

    def on_loaded(self, now_ms: int) -> list[TimerOp]:
        """After loading: session timers for every member, rebalance timers for members that
        were revoking (KIP-848 "Fail Over"), and the assignment timer of every group whose
        target was behind its epoch (a computation due or in flight when the coordinator
        stopped)."""
        ops: list[TimerOp] = []
        for group_id in sorted(self._by_group):
            group = self._by_group[group_id]
            if group.members and group.group_epoch > group.assignment_epoch:
                # A target was due (or being computed) when the coordinator stopped.
                due = group.assignment_timestamp_ms + self._configs.assignment_interval_ms(group_id)
                ops.append(ArmTimer((ASSIGN, group_id, ""), max(now_ms, due)))
            session_ms = self._configs.session_timeout_ms(group_id)
            for member_id in sorted(group.members):
                m = group.members[member_id]
                timeout = (
                    m.classic_member_metadata.session_timeout_ms
                    if m.classic_member_metadata
                    else session_ms
                )
                ops.append(ArmTimer((SESSION, group_id, member_id), now_ms + timeout))
                if (
                    m.state is MemberState.UNREVOKED_PARTITIONS
                    and m.classic_member_metadata is None
                ):
                    ops.append(
                        ArmTimer(
                            (REBALANCE, group_id, member_id),
                            now_ms + m.rebalance_timeout_ms,
                            m.member_epoch,
                        )
                    )
        return ops

    # ------------------------------------------------------------------ reads

    def describe(self, group_id: str) -> GroupDescription:
        return descriptions.describe(self._group_or_raise(group_id), self.assignor_names)

    def _group_or_raise(self, group_id: str, kind: str = "Group") -> ConsumerGroup:
        """The consumer group ``group_id``, else GROUP_ID_NOT_FOUND with Kafka's messages: for a
        group of another type, and for none ("Group ... not found." as its consumerGroup lookup
        for ConsumerGroupDescribe and a leave; ``kind`` "Consumer group" for a heartbeat)."""
        group = self._by_group.get(group_id)
        if group is None:
            if group_id in self.other_groups:
                raise GroupIdNotFoundError(f"Group {group_id} is not a consumer group.")
            raise GroupIdNotFoundError(f"{kind} {group_id} not found.")
        return group

    def state_of(self, group_id: str) -> GroupState:
        group = self._by_group.get(group_id)
        return GroupState.DEAD if group is None else group.state()

    def listed(self) -> list[ListedGroup]:
        """ListGroups entries of the consumer groups."""
        return [descriptions.listed(gid, self._by_group[gid]) for gid in sorted(self._by_group)]

    def listed_group(self, group_id: str) -> ListedGroup | None:
        """The ListGroups entry of the consumer group ``group_id``; None if there is none."""
        group = self._by_group.get(group_id)
        return None if group is None else descriptions.listed(group_id, group)

    # ------------------------------------------------------------------ records

    def replayers(self) -> dict[r.RecordType, Callable[[r.Record], None]]:
        t = r.RecordType
        return {
            t.CONSUMER_GROUP_METADATA: self._replay_group_metadata,
            t.CONSUMER_GROUP_PARTITION_METADATA: self._replay_partition_metadata,
            t.CONSUMER_GROUP_MEMBER_METADATA: self._replay_member_metadata,
            t.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: self._replay_target_assignment_metadata,
            t.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: self._replay_target_assignment_member,
            t.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: self._replay_current_assignment,
            t.CONSUMER_GROUP_REGULAR_EXPRESSION: self._replay_regex,
        }

    def _group(self, group_id: str, value: object | None) -> ConsumerGroup | None:
        """The group a record is about; a value creates it, a tombstone of a missing group is
        for something already gone (None)."""
        group: ConsumerGroup | None = self._by_group.get(group_id)
        if group is None and value is not None:
            group = ConsumerGroup(self._ctx.undo, group_id)
            self._by_group[group_id] = group
        return group

    def adopt(self, group: ConsumerGroup) -> None:
        """Install a group the loader built from its records at once (``group_load.py``): the
        group that replaying those records one by one creates. Its id must be new here."""
        if group.group_id in self._by_group:
            raise IllegalStateError(f"group {group.group_id} is loaded twice")
        self._by_group[group.group_id] = group

    def _replay_member_metadata(self, record: r.Record) -> None:
        key, value = r.typed(
            record, r.ConsumerGroupMemberMetadataKey, r.ConsumerGroupMemberMetadataValue
        )
        group = self._group(key.group_id, value)
        if group is not None:
            group.replay_member_metadata(key.member_id, value)

    def _replay_current_assignment(self, record: r.Record) -> None:
        key, value = r.typed(
            record,
            r.ConsumerGroupCurrentMemberAssignmentKey,
            r.ConsumerGroupCurrentMemberAssignmentValue,
        )
        group = self._group(key.group_id, value)
        if group is not None:
            group.replay_current_assignment(key.member_id, value)

    def _replay_target_assignment_member(self, record: r.Record) -> None:
        key, value = r.typed(
            record,
            r.ConsumerGroupTargetAssignmentMemberKey,
            r.ConsumerGroupTargetAssignmentMemberValue,
        )
        group = self._group(key.group_id, value)
        if group is not None:
            group.replay_target_member(key.member_id, value)

    def _replay_group_metadata(self, record: r.Record) -> None:
        key, value = r.typed(record, r.ConsumerGroupMetadataKey, r.ConsumerGroupMetadataValue)
        group = self._group(key.group_id, value)
        if group is None:
            return
        if value is None:
            group.check_deletable()
            del self._by_group[key.group_id]
        else:
            group.replay_group_metadata(value)

    def _replay_target_assignment_metadata(self, record: r.Record) -> None:
        key, value = r.typed(
            record,
            r.ConsumerGroupTargetAssignmentMetadataKey,
            r.ConsumerGroupTargetAssignmentMetadataValue,
        )
        group = self._group(key.group_id, value)
        if group is not None:
            group.replay_target_metadata(value)

    def _replay_partition_metadata(self, record: r.Record) -> None:
        key, value = r.typed(
            record, r.ConsumerGroupPartitionMetadataKey, r.ConsumerGroupPartitionMetadataValue
        )
        group = self._group(key.group_id, value)
        if group is not None:
            group.replay_partition_metadata(value)

    def _replay_regex(self, record: r.Record) -> None:
        key, value = r.typed(
            record, r.ConsumerGroupRegularExpressionKey, r.ConsumerGroupRegularExpressionValue
        )
        group = self._group(key.group_id, value)
        if group is not None:
            group.replay_regex(key.regular_expression, value)

    def weight(self, value: ConsumerGroup) -> int:
        return 1 + len(value.members)

    def snapshot(self) -> dict[str, object]:
        return {"groups": {gid: self._by_group[gid].snapshot() for gid in sorted(self._by_group)}}

    def records_of_state(self) -> list[r.Record]:
        out: list[r.Record] = []
        for gid in sorted(self._by_group):
            g = self._by_group[gid]
            for mid in sorted(g.members):
                out.append(r.member_metadata_record(gid, g.members[mid]))
            for regex in sorted(g.resolved_regexes):
                topics, version = g.resolved_regexes[regex]
                out.append(r.regex_record(gid, regex, topics, version, g.regex_refreshed_ms))
            out.append(r.partition_metadata_record(gid, dict(g.subscription_metadata)))
            out.append(r.group_epoch_record(gid, g.group_epoch, g.group_uid))
            for mid in sorted(g.target):
                out.append(r.target_assignment_record(gid, mid, g.target[mid]))
            out.append(
                r.target_assignment_epoch_record(gid, g.assignment_epoch, g.assignment_timestamp_ms)
            )
            for mid in sorted(g.members):
                out.append(r.current_assignment_record(gid, g.members[mid]))
        return out
