"""Online migration between classic and consumer groups (KIP-848 "Online Migration"; Kafka 4.0,
``group.consumer.migration.policy``; conversions of empty groups are always allowed).

* Upgrade: a ConsumerGroupHeartbeat (epoch 0) for a non-empty classic group converts it — every
  classic member becomes a consumer-group member at epoch = generation, owning what its last
  assignment gave it; no partition moves. That heartbeat then bumps the epoch (Kafka's
  conversion writes no subscription metadata; ``ConsumerGroups._heartbeat``). An empty classic
  group is simply replaced.
* Downgrade: when the last consumer-protocol member leaves a consumer group whose remaining
  members all speak the classic protocol, it becomes a classic group (Stable at the group epoch,
  each member keeping what it may still own) and a rebalance starts. Also when a classic static
  member's JoinGroup takes the place of the last consumer-protocol member (same
  ``group.instance.id``: a rolling downgrade of a static fleet; Kafka 4.0+, KAFKA-17317): the
  group becomes a classic group, rebalancing only when the joining member's subscription
  differs (KAFKA-19546) or the target assignment lags the group epoch (KAFKA-20273).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Protocol

from coordinator.core import records as r
from coordinator.core.commands import ConsumerGroupHeartbeat, Result
from coordinator.core.consumer_groups import ConsumerGroups
from coordinator.core.context import ShardContext
from coordinator.core.errors import (
    GroupIdNotFoundError,
    RebalanceInProgressError,
)
from coordinator.core.events import Event, LogEvent
from coordinator.core.group import ConsumerGroup
from coordinator.core.model import (
    ClassicMemberMetadata,
    ConsumerGroupMember,
    MemberState,
    assignment_union,
)
from coordinator.core.timers import SESSION, ArmTimer, CancelTimer, TimerOp

from . import messages as m
from .classic_group import ClassicGroup, ClassicMember, RebalanceCause
from .classic_members import MEMBER_TIMER_KINDS, ClassicMembers
from .common import (
    CLASSIC_PENDING,
    CLASSIC_SESSION,
    MIGRATION_DOWNGRADE,
    MIGRATION_UPGRADE,
    JoinAnswer,
    encode_member_assignment,
    error_fields,
    topic_ids,
)
from .protocol import (
    CONSUMER_PROTOCOL_TYPE,
    AssignmentMessage,
    ProtocolError,
    Subscription,
    decode_assignment,
    decode_subscription,
)


class MigrationSupport(Protocol):
    """What a conversion between a classic and a consumer group asks of the classic groups
    (``classic_groups.ClassicGroups``)."""

    def get(self, group_id: str) -> ClassicGroup | None: ...

    def add(self, group: ClassicGroup) -> None: ...

    def forget(self, group_id: str) -> None: ...

    def cancel_group_timers(self, gid: str) -> list[TimerOp]: ...

    def prepare_rebalance(
        self,
        result: Result[Any],
        group: ClassicGroup,
        now_ms: int,
        reason: str,
        cause: RebalanceCause,
        client_reason: str | None = None,
    ) -> None: ...


class Migration:
    def __init__(
        self,
        ctx: ShardContext,
        *,
        consumer: ConsumerGroups,
        classic: MigrationSupport,
        members: ClassicMembers,
    ) -> None:
        self._ctx = ctx
        self._consumer = consumer
        self._classic = classic
        self._members = members

    # ------------------------------------------------------------------ upgrade

    def prepare_consumer_group(
        self, result: Result[Any], req: ConsumerGroupHeartbeat, now_ms: int
    ) -> bool:
        """Before a ConsumerGroupHeartbeat: a classic group of that id is converted (epoch 0
        only; True), replaced if empty, or the request refused."""
        group = self._classic.get(req.group_id)
        if group is None:
            return False
        gid = group.group_id
        if req.member_epoch != 0:
            raise GroupIdNotFoundError(f"Group {gid} is not a consumer group.")
        if not group.members:
            # An empty classic group is simply replaced (always allowed).
            self._drop_classic_group(result, group)
            return False
        self._upgrade(result, group, now_ms)
        return True

    def _drop_classic_group(self, result: Result[Any], group: ClassicGroup) -> None:
        gid = group.group_id
        for mid in list(group.pending_members):
            result.timers.append(CancelTimer((CLASSIC_PENDING, gid, mid)))
        result.timers += self._classic.cancel_group_timers(gid)
        if group.durable is not None:
            self._ctx.emit(result, r.classic_group_tombstone(gid))
        else:
            self._classic.forget(gid)

    def _upgrade(self, result: Result[Any], group: ClassicGroup, now_ms: int) -> None:
        """Classic -> consumer group: every classic member becomes a member at epoch =
        generation owning what its last assignment gave it; no partition moves."""
        ctx, gid = self._ctx, group.group_id
        policy = ctx.config.consumer_migration_policy
        # Kafka's validateOnlineUpgrade and convertToConsumerGroup: every refusal is
        # GROUP_ID_NOT_FOUND, with these messages.
        cannot = f"Cannot upgrade classic group {gid} to consumer group because"
        if policy not in MIGRATION_UPGRADE:
            raise GroupIdNotFoundError(f"{cannot} online upgrade is disabled.")
        if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            raise GroupIdNotFoundError(
                f"{cannot} the group does not use the consumer embedded protocol."
            )
        if len(group.members) > ctx.config.consumer_max_size:
            raise GroupIdNotFoundError(
                f"{cannot} the group size exceeds the consumer group maximum size."
            )
        decoded: list[tuple[ClassicMember, Subscription, AssignmentMessage]] = []
        for x in group.members.values():
            # A member that joined during a rebalance may not list the protocol voted at the
            # last generation: read its own (every consumer protocol carries the same subscription).
            metadata = (
                x.metadata(group.protocol_name) if group.protocol_name else b""
            ) or x.protocols[0][1]
            try:
                sub = decode_subscription(metadata)
                assignment = (
                    decode_assignment(x.assignment) if x.assignment else AssignmentMessage()
                )
            except ProtocolError:
                raise GroupIdNotFoundError(
                    f"{cannot} the embedded consumer protocol is malformed."
                ) from None
            decoded.append((x, sub, assignment))
        # Answer whatever waits at the classic barriers; their clients rejoin as members.
        for x in group.members.values():
            if x.join_token is not None:
                result.completions.append(
                    (
                        x.join_token,
                        m.JoinGroupResponse(
                            **error_fields(RebalanceInProgressError()), member_id=x.member_id
                        ),
                    )
                )
            if x.sync_token is not None:
                result.completions.append(
                    (x.sync_token, m.SyncGroupResponse(**error_fields(RebalanceInProgressError())))
                )
        epoch = group.generation
        self._drop_classic_group(result, group)
        image = ctx.topics
        taken: set[tuple[str, int]] = set()
        assigned = {
            x.member_id: topic_ids(image, a.assigned_partitions, taken) for x, _s, a in decoded
        }
        # A cooperative member may still own partitions its last assignment dropped (it is
        # revoking them; the leader held them back from everyone). They stay its own, pending
        # revocation, so they are not handed out before it lets go. Kafka takes only the
        # assignment here, and then an upgrade during a cooperative rebalance can give such a
        # partition to a new member while its owner still has it (found by the simulator).
        revoking = {
            x.member_id: topic_ids(image, sub.owned_partitions, taken) for x, sub, _a in decoded
        }
        members = []
        for x, sub, _assignment in decoded:
            member = ConsumerGroupMember(
                member_id=x.member_id,
                instance_id=x.group_instance_id,
                rack_id=sub.rack_id,
                client_id=x.client_id,
                client_host=x.client_host,
                subscribed_topic_names=tuple(sorted(set(sub.topics))),
                rebalance_timeout_ms=x.rebalance_timeout_ms,
                classic_member_metadata=ClassicMemberMetadata(
                    session_timeout_ms=x.session_timeout_ms, supported_protocols=x.protocols
                ),
                member_epoch=epoch,
                previous_member_epoch=epoch - 1 if epoch > 0 else 0,
                state=MemberState.UNREVOKED_PARTITIONS
                if revoking[x.member_id]
                else MemberState.STABLE,
                assigned_partitions=assigned[x.member_id],
                partitions_pending_revocation=revoking[x.member_id],
            )
            members.append(member)
            ctx.emit(result, r.member_metadata_record(gid, member))
        cgroup = self._consumer[gid]
        ctx.emit(
            result, r.partition_metadata_record(gid, self._consumer.subscription_metadata(cgroup))
        )
        ctx.emit(result, r.group_epoch_record(gid, epoch, ctx.ids.new_group_uid()))
        for member in members:
            ctx.emit(
                result,
                r.target_assignment_record(gid, member.member_id, member.assigned_partitions),
            )
        ctx.emit(result, r.target_assignment_epoch_record(gid, epoch))
        for member in members:
            ctx.emit(result, r.current_assignment_record(gid, member))
        cgroup.set("metadata_checked", (image.version, cgroup.group_epoch))
        for x, _s, _a in decoded:
            result.timers += [
                CancelTimer((CLASSIC_SESSION, gid, x.member_id)),
                ArmTimer((SESSION, gid, x.member_id), now_ms + x.session_timeout_ms),
            ]
        result.events.append(
            LogEvent(
                event=Event.GROUP_UPGRADED,
                group_id=gid,
                fields={"generation": epoch, "members": len(members)},
            )
        )

    # ------------------------------------------------------------------ downgrade

    def _may_downgrade(self, group: ConsumerGroup, but: str | None = None) -> bool:
        """Every member but ``but`` speaks the classic protocol, and the policy and
        ``group.classic.max.size`` allow a classic group of the group's size (Kafka's
        validateOnlineDowngradeWith{Fenced,Replaced}Member)."""
        config = self._ctx.config
        return (
            all(
                x.classic_member_metadata is not None
                for mid, x in group.members.items()
                if mid != but
            )
            and config.consumer_migration_policy in MIGRATION_DOWNGRADE
            and len(group.members) <= config.classic_max_size
        )

    def maybe_downgrade(self, result: Result[Any], group: ConsumerGroup, now_ms: int) -> None:
        """Consumer -> classic group once only classic members remain (KIP-848 downgrade)."""
        if not group.members or not self._may_downgrade(group):
            return
        # Kafka converts *instead of* removing the member (no epoch bump): the classic generation
        # is the group epoch the remaining members were given. The removal that calls this has
        # bumped it already, hence one less — else each classic member's next Heartbeat (its
        # generation = its member epoch) is ILLEGAL_GENERATION instead of REBALANCE_IN_PROGRESS
        # and real clients drop their partitions as lost (tests/e2e/test_kafka_migration.py).
        classic = self._to_classic(result, group, group.group_epoch - 1, now_ms)
        self._classic.prepare_rebalance(
            result, classic, now_ms, "downgraded from a consumer group", RebalanceCause.DOWNGRADED
        )

    def join_consumer_group(
        self, group: ConsumerGroup, req: m.JoinGroup, now_ms: int
    ) -> Result[JoinAnswer]:
        """A classic member's JoinGroup to a non-empty consumer group. A static member that takes
        the place of the last consumer-protocol member (its ``group.instance.id``) downgrades the
        group (Kafka 4.0+ classicGroupJoinToConsumerGroup, KAFKA-17317): the member first takes
        its place in the consumer group (the same records as any static replacement), then the
        group becomes a classic group, Stable at the group epoch the replaced member had, the
        joining member owning what it took over. A rebalance starts only when the join bumped the
        group epoch (a different subscription, KAFKA-19546; new topic metadata), the target
        assignment lagged the epoch (KAFKA-20273) or a member is still reconciling; else the
        members keep their partitions.

        The JoinGroup keeps the answer of the join into the consumer group, as Kafka's does: no
        leader, no member list, the member's epoch as the generation and its first protocol. Its
        SyncGroup then reads its assignment from the classic group, whose generation and
        protocol they are unless the join changed something; else the classic group's checks
        answer it (ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL, REBALANCE_IN_PROGRESS) and
        it rejoins."""
        instance_id = req.group_instance_id
        replaced = None if instance_id is None else group.static_members.get(instance_id)
        downgrade = replaced is not None and self._may_downgrade(group, but=replaced)
        epoch, stale = group.group_epoch, group.group_epoch > group.assignment_epoch
        target_epoch = group.assignment_epoch
        topics = None if replaced is None else group.members[replaced].subscribed_topic_names
        result = self._members.join(group, req, now_ms)
        joined = result.response
        if not downgrade or not isinstance(joined, m.JoinGroupResponse) or joined.error_code:
            return result
        # The generation Kafka answers: the epoch its join reaches, reconciling against the
        # target from before the join (it computes none while downgrading), or 0 when the join
        # changed the subscription (it then skips the reconciliation). Ours may have computed a
        # newer target at the join; that epoch is one the classic group never had.
        subscription_changed = group.members[joined.member_id].subscribed_topic_names != topics
        generation = 0 if subscription_changed else min(joined.generation_id, target_epoch)
        result.response = replace(joined, generation_id=generation)
        # Kafka rebalances when the join changed the subscription (KAFKA-19546) or the target
        # lagged the group epoch (KAFKA-20273). Ours also when the join bumped the epoch for new
        # topic metadata, or a member is still reconciling (not Stable at the group epoch):
        # Kafka then keeps a classic group whose generation that member does not have
        # (ILLEGAL_GENERATION on its next heartbeat) and whose assignments leave partitions
        # where the target would have moved them, until some later rebalance.
        rebalance = (
            stale
            or group.group_epoch != epoch
            or group.group_epoch > group.assignment_epoch
            or any(
                x.member_epoch != epoch or x.state is not MemberState.STABLE
                for x in group.members.values()
            )
        )
        classic = self._to_classic(result, group, epoch, now_ms)
        if rebalance:
            self._classic.prepare_rebalance(
                result,
                classic,
                now_ms,
                "downgraded from a consumer group by a static member with a new subscription "
                "or a stale target assignment",
                RebalanceCause.DOWNGRADED,
                req.reason,
            )
        return result

    def _to_classic(
        self, result: Result[Any], group: ConsumerGroup, generation: int, now_ms: int
    ) -> ClassicGroup:
        """Replace the consumer group, all of whose members speak the classic protocol, by a
        classic group Stable at ``generation``: in one batch, every consumer-group record's
        tombstone, then the classic group's GroupMetadata record."""
        ctx = self._ctx
        gid = group.group_id
        members = [group.members[mid] for mid in sorted(group.members)]
        # Each member keeps what it may still own: its assigned partitions plus those it has not
        # finished revoking (disjoint across members by the ownership invariant). Kafka writes the
        # *target* here; then a partition a member still holds but is targeted elsewhere looks
        # free, and an upgrade right after (before the classic rebalance completes) hands it to
        # someone else while its owner still has it (found by the simulator, seed 5094).
        owned = {
            x.member_id: assignment_union(x.assigned_partitions, x.partitions_pending_revocation)
            for x in members
        }
        for x in members:
            self._consumer.remove_member_records(result, gid, x.member_id)
            self._members.forget(gid, x.member_id)
            result.timers += [CancelTimer((k, gid, x.member_id)) for k in MEMBER_TIMER_KINDS]
        self._consumer.delete_group(result, gid)
        image = ctx.topics
        classic_members = []
        for x in members:
            c = x.classic_member_metadata
            assert c is not None  # every member is a classic member (checked above)
            classic_members.append(
                ClassicMember(
                    member_id=x.member_id,
                    group_instance_id=x.instance_id,
                    client_id=x.client_id,
                    client_host=x.client_host,
                    rebalance_timeout_ms=x.rebalance_timeout_ms,
                    session_timeout_ms=c.session_timeout_ms,
                    protocol_type=CONSUMER_PROTOCOL_TYPE,
                    protocols=c.supported_protocols,
                    assignment=encode_member_assignment(
                        image, replace(x, assigned_partitions=owned[x.member_id])
                    ),
                )
            )
        classic = ClassicGroup.stable(
            ctx.undo,
            gid,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            generation=generation,
            members=classic_members,
            now_ms=now_ms,
        )
        self._classic.add(classic)
        ctx.emit(result, r.classic_group_record(gid, classic.to_record_value()))
        for cm in classic_members:
            result.timers.append(
                ArmTimer((CLASSIC_SESSION, gid, cm.member_id), now_ms + cm.session_timeout_ms)
            )
        result.events.append(
            LogEvent(event=Event.GROUP_DOWNGRADED, group_id=gid, fields={"group_epoch": generation})
        )
        return classic
