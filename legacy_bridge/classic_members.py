"""Classic members inside a consumer group (KIP-848 "Supporting Online Consumer Group Upgrade").

A member that speaks the classic protocol in a consumer group is reconciled on its own, like any
member: its JoinGroup is translated into a heartbeat of the core (its generation is its member
epoch), SyncGroup hands it its current assignment, Heartbeat tells it to rejoin (REBALANCE_IN_
PROGRESS) exactly when it must revoke or can collect partitions. There is no group-wide barrier.
Two timers watch it: it must rejoin within its rebalance timeout once told to (``MIXED_JOIN``),
and send SyncGroup within it after its JoinGroup (``MIXED_SYNC``); otherwise it is fenced.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from coordinator.core import records as r
from coordinator.core.commands import ConsumerGroupHeartbeat, Result
from coordinator.core.consumer_groups import ConsumerGroups
from coordinator.core.context import ShardContext
from coordinator.core.errors import (
    CoordinatorError,
    ErrorCode,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from coordinator.core.events import Cause
from coordinator.core.group import ConsumerGroup
from coordinator.core.model import (
    ClassicMemberMetadata,
    ConsumerGroupMember,
    MemberState,
    assignment_minus,
)
from coordinator.core.timeline import TDict
from coordinator.core.timers import REBALANCE, SESSION, ArmTimer, CancelTimer, DueTimer

from . import messages as m
from .common import (
    MIXED_JOIN,
    MIXED_SYNC,
    JoinAnswer,
    SyncAnswer,
    check_static_owner,
    encode_member_assignment,
    error_fields,
    leave_error,
    leaving_member_id,
    rebalance_timeout,
    topic_ids,
)
from .protocol import CONSUMER_PROTOCOL_TYPE, ProtocolError, decode_subscription

MEMBER_TIMER_KINDS = (SESSION, REBALANCE, MIXED_JOIN, MIXED_SYNC)


class ClassicMembers:
    def __init__(self, ctx: ShardContext, *, consumer: ConsumerGroups) -> None:
        self._ctx = ctx
        self._consumer = consumer
        self._join_armed: TDict = ctx.undo.new_dict()  # (group id, member id) -> True

    def forget(self, group_id: str, member_id: str) -> None:
        """The member left its consumer group: no rejoin deadline is pending for it."""
        self._join_armed.discard((group_id, member_id))

    def _member_of(
        self, group: ConsumerGroup, member_id: str, instance_id: str | None
    ) -> ConsumerGroupMember:
        check_static_owner(group.static_members, group.group_id, member_id, instance_id)
        member: ConsumerGroupMember | None = group.members.get(member_id)
        if member is None:
            raise UnknownMemberIdError(
                f"Member {member_id} is not a member of group {group.group_id}."
            )
        if member.classic_member_metadata is None:
            raise UnknownMemberIdError(f"Member {member_id} does not use the classic protocol.")
        return member

    @staticmethod
    def _classic_of(member: ConsumerGroupMember) -> ClassicMemberMetadata:
        classic = member.classic_member_metadata
        if classic is None:
            raise AssertionError(f"member {member.member_id} is not a classic member")
        return classic

    # ------------------------------------------------------------------ JoinGroup

    def join(self, group: ConsumerGroup, req: m.JoinGroup, now_ms: int) -> Result[JoinAnswer]:
        """JoinGroup becomes a heartbeat of the core (the caller runs it as one command)."""
        ctx, gid = self._ctx, group.group_id
        # Kafka's classicGroupJoinToConsumerGroup: the group's size, then the protocols, then
        # the member id.
        max_size = ctx.config.consumer_max_size
        if len(group.members) >= max_size and req.member_id not in group.members:
            raise GroupMaxSizeReachedError(
                f"The consumer group has reached its maximum capacity of {max_size} members."
            )
        if req.protocol_type != CONSUMER_PROTOCOL_TYPE:
            raise InconsistentGroupProtocolError(
                f"Protocol type {req.protocol_type} is not supported by consumer group {gid}."
            )
        # ConsumerGroup.supportsClassicProtocols: one of them supported by every classic member
        # (the joining member, if one already, counted with the protocols it has now).
        names = {n for n, _m in req.protocols}
        for x in group.members.values():
            c = x.classic_member_metadata
            if c is not None:
                names &= {n for n, _ in c.supported_protocols}
        if not names:
            raise InconsistentGroupProtocolError(
                f"Member {req.member_id or '(new)'}'s protocols are not supported by the classic"
                f" members of group {gid}."
            )
        try:
            sub = decode_subscription(req.protocols[0][1])
        except ProtocolError as e:
            raise InconsistentGroupProtocolError(f"Malformed subscription metadata: {e}") from None
        result: Result[JoinAnswer] = Result()
        if not req.member_id and req.group_instance_id is None:
            new_id = ctx.ids.new_member_id()
            result.response = m.JoinGroupResponse(
                error_code=int(ErrorCode.MEMBER_ID_REQUIRED),
                error_message="The group member needs to have a valid member id before actually entering a consumer group.",
                member_id=new_id,
            )
            return result
        # The id handed out by MEMBER_ID_REQUIRED is not tracked in a consumer group: an unknown
        # id joins as a new member (Kafka does the same).
        existing = group.members.get(req.member_id) if req.member_id else None
        if existing is not None and existing.classic_member_metadata is None:
            raise UnknownMemberIdError(f"Member {req.member_id} does not use the classic protocol.")
        member_id = req.member_id or ctx.ids.new_member_id()  # Kafka: a bare Uuid here
        if req.group_instance_id is not None:
            owner = group.static_members.get(req.group_instance_id)
            if req.member_id:
                # Kafka's validateMember: a known member id must still own its instance id (an
                # older incarnation, replaced by a newer one, is fenced).
                check_static_owner(group.static_members, gid, req.member_id, req.group_instance_id)
            elif owner is not None:
                # A restarted static member takes its place back (KIP-345): the old incarnation
                # leaves temporarily so that the core replaces it.
                old = group.members[owner]
                ctx.emit(
                    result,
                    r.current_assignment_record(
                        gid, replace(old, member_epoch=-2, partitions_pending_revocation={})
                    ),
                )
                result.timers += [
                    CancelTimer((MIXED_JOIN, gid, owner)),
                    CancelTimer((MIXED_SYNC, gid, owner)),
                ]
        owned = None if sub.version < 1 else topic_ids(ctx.topics, sub.owned_partitions)
        hb = ConsumerGroupHeartbeat(
            group_id=gid,
            member_id=member_id,
            member_epoch=existing.member_epoch if existing is not None else 0,
            instance_id=req.group_instance_id,
            rack_id=sub.rack_id,
            rebalance_timeout_ms=rebalance_timeout(req),
            subscribed_topic_names=tuple(sub.topics),
            topic_partitions=owned if owned is not None else {},
            client_id=req.client_id,
            client_host=req.client_host,
        )
        classic = ClassicMemberMetadata(
            session_timeout_ms=req.session_timeout_ms, supported_protocols=tuple(req.protocols)
        )
        inner = self._consumer.join_as_classic(hb, classic, now_ms)
        result.absorb(inner)
        self._join_armed.discard((gid, member_id))
        result.timers += [
            CancelTimer((MIXED_JOIN, gid, member_id)),
            ArmTimer((MIXED_SYNC, gid, member_id), now_ms + rebalance_timeout(req)),
        ]
        assert inner.response is not None  # a heartbeat always answers
        result.response = m.JoinGroupResponse(
            generation_id=inner.response.member_epoch,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocol_name=req.protocols[0][0],
            member_id=member_id,
        )
        return result

    # ------------------------------------------------------------------ SyncGroup

    @staticmethod
    def _check_generation(member: ConsumerGroupMember, generation: int) -> None:
        if generation != member.member_epoch:
            raise IllegalGenerationError(
                f"The received generation id {generation} does not match the member epoch {member.member_epoch}."
            )

    @staticmethod
    def _newer_target(group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
        """A target assignment newer than the member's epoch is there to collect. Kafka 4.3
        (KAFKA-20272) compares with the target's epoch, not the group epoch: while the target
        lags a bumped group epoch (computed at most once per assignment interval, or off the
        loop), a rejoin would bring nothing new, and the member would be sent to rejoin again
        and again until the target is computed."""
        return group.assignment_epoch > member.member_epoch

    @classmethod
    def _needs_rejoin(cls, group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
        """KIP-848: a classic member is told to rejoin exactly when it must revoke, or when it
        can collect partitions (a newer target, or withheld partitions that are now free)."""
        if cls._newer_target(group, member) or member.state is MemberState.UNREVOKED_PARTITIONS:
            return True
        if member.state is MemberState.UNRELEASED_PARTITIONS:
            withheld = assignment_minus(
                group.target_of(member.member_id), member.assigned_partitions
            )
            return all(
                group.owner_of(t, p) in (None, member.member_id)
                for t, ps in withheld.items()
                for p in ps
            )
        return False

    def _arm_rejoin(
        self, result: Result[Any], group: ConsumerGroup, member: ConsumerGroupMember, now_ms: int
    ) -> None:
        key = (group.group_id, member.member_id)
        if key not in self._join_armed:
            self._join_armed[key] = True
            result.timers.append(
                ArmTimer(
                    (MIXED_JOIN, group.group_id, member.member_id),
                    now_ms + member.rebalance_timeout_ms,
                )
            )

    def sync(self, group: ConsumerGroup, req: m.SyncGroup, now_ms: int) -> Result[SyncAnswer]:
        member = self._member_of(group, req.member_id, req.group_instance_id)
        self._check_generation(member, req.generation_id)
        classic = self._classic_of(member)
        protocols = classic.supported_protocols
        if (req.protocol_type is not None and req.protocol_type != CONSUMER_PROTOCOL_TYPE) or (
            req.protocol_name is not None and req.protocol_name != protocols[0][0]
        ):
            raise InconsistentGroupProtocolError(
                "ProtocolType or ProtocolName does not match the member's."
            )
        result: Result[SyncAnswer] = Result()
        gid = group.group_id
        if (
            self._newer_target(group, member)
            and member.state is not MemberState.UNREVOKED_PARTITIONS
        ):
            # Kafka's throwIfRebalanceInProgress: the rejoin deadline only; the SyncGroup
            # deadline and the session stay as they were (the member is to rejoin).
            self._arm_rejoin(result, group, member, now_ms)
            result.response = m.SyncGroupResponse(**error_fields(RebalanceInProgressError()))
            return result
        result.timers += [
            CancelTimer((MIXED_SYNC, gid, member.member_id)),
            ArmTimer((SESSION, gid, member.member_id), now_ms + classic.session_timeout_ms),
        ]
        result.response = m.SyncGroupResponse(
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocol_name=protocols[0][0],
            assignment=encode_member_assignment(self._ctx.topics, member),
        )
        return result

    # ------------------------------------------------------------------ Heartbeat

    def heartbeat(
        self, group: ConsumerGroup, req: m.Heartbeat, now_ms: int
    ) -> Result[m.HeartbeatResponse]:
        member = self._member_of(group, req.member_id, req.group_instance_id)
        self._check_generation(member, req.generation_id)
        result: Result[m.HeartbeatResponse] = Result()
        session_ms = self._classic_of(member).session_timeout_ms
        result.timers.append(
            ArmTimer((SESSION, group.group_id, member.member_id), now_ms + session_ms)
        )
        if self._needs_rejoin(group, member):
            self._arm_rejoin(result, group, member, now_ms)
            result.response = m.HeartbeatResponse(**error_fields(RebalanceInProgressError()))
        else:
            result.response = m.HeartbeatResponse()
        return result

    # ------------------------------------------------------------------ LeaveGroup

    def leave(
        self, group: ConsumerGroup, req: m.LeaveGroup, now_ms: int
    ) -> Result[m.LeaveGroupResponse]:
        result: Result[m.LeaveGroupResponse] = Result()
        gid = group.group_id
        out = []
        leaving: list[ConsumerGroupMember] = []
        for ident in req.members:
            try:
                member_id = leaving_member_id(group.static_members, ident)
                member = self._member_of(group, member_id, None)
                if member in leaving:
                    raise UnknownMemberIdError(f"Member {member_id} is listed twice.")
            except CoordinatorError as e:
                out.append(leave_error(ident, e))
                continue
            leaving.append(member)
            # Kafka answers with the member id it removed (named by instance id or not).
            out.append(
                m.LeaveMemberResponse(
                    member_id=member_id, group_instance_id=ident.group_instance_id
                )
            )
        if leaving:
            for x in leaving:
                self.forget(gid, x.member_id)
            self._consumer.remove_members(
                result, group, leaving, now_ms, Cause.MEMBER_LEFT, timer_kinds=MEMBER_TIMER_KINDS
            )
        result.response = m.LeaveGroupResponse(members=tuple(out))
        return result

    # ------------------------------------------------------------------ timers

    def on_timer(self, timer: DueTimer, now_ms: int) -> Result[None]:
        """A classic member did not rejoin, or did not send SyncGroup, in time: it is fenced."""
        kind, gid, mid = timer.key
        group = self._consumer.get(gid)
        member = None if group is None else group.members.get(mid)
        if group is None or member is None or member.classic_member_metadata is None:
            return Result()
        if kind == MIXED_JOIN:
            cause, reason = (
                Cause.CLASSIC_MEMBER_FENCED_JOIN_TIMEOUT,
                "did not rejoin within its rebalance timeout",
            )
        else:
            cause, reason = (
                Cause.CLASSIC_MEMBER_FENCED_SYNC_TIMEOUT,
                "did not send SyncGroup within its rebalance timeout",
            )
        return self._ctx.run(self._fence, group, member, now_ms, cause, reason)

    def _fence(
        self,
        group: ConsumerGroup,
        member: ConsumerGroupMember,
        now_ms: int,
        cause: Cause,
        reason: str,
    ) -> Result[None]:
        self.forget(group.group_id, member.member_id)
        return self._consumer.fence_member(group, member, now_ms, cause, reason)
