"""The join phase of classic groups: JoinGroup on a classic group (Kafka's classicGroupJoin,
for new, known and static members), composed into :class:`~.classic_groups.ClassicGroups`.

A join adds or updates a member and starts or joins a rebalance; the rebalance itself — the
barrier, completing the join phase, the generation — stays with the classic groups, asked
through :class:`JoinSupport`. A join that waits at the barrier answers ``Pending(token)``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any, Protocol

from coordinator.core import records as r
from coordinator.core.commands import Result
from coordinator.core.consumer_groups import ConsumerGroups
from coordinator.core.context import ShardContext
from coordinator.core.errors import (
    ErrorCode,
    FencedInstanceIdError,
    GroupMaxSizeReachedError,
    InconsistentGroupProtocolError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from coordinator.core.timers import ArmTimer, CancelTimer

from . import messages as m
from .classic_group import (
    ClassicGroup,
    ClassicGroupState,
    ClassicMember,
    RebalanceCause,
    RemovalCause,
    record_size_error,
)
from .common import (
    CLASSIC_PENDING,
    CLASSIC_SESSION,
    NEW_MEMBER_JOIN_TIMEOUT_MS,
    JoinAnswer,
    check_static_owner,
    error_fields,
    rebalance_timeout,
)
from .protocol import ProtocolError, decode_subscription

S = ClassicGroupState


def _subscribed_topics(protocols: Iterable[tuple[str, bytes]]) -> frozenset[str] | None:
    """The topics a classic member's first protocol subscribes to (the embedded consumer
    protocol: every protocol of a consumer carries the same subscription); None if unreadable."""
    for _name, metadata in protocols:
        try:
            return frozenset(decode_subscription(metadata).topics)
        except ProtocolError:
            return None
    return None


class JoinSupport(Protocol):
    """What the join phase asks of the classic groups."""

    def get(self, group_id: str) -> ClassicGroup | None: ...

    def add(self, group: ClassicGroup) -> None: ...

    def maybe_prepare_rebalance(
        self,
        result: Result[Any],
        group: ClassicGroup,
        now_ms: int,
        reason: str,
        cause: RebalanceCause,
        client_reason: str | None,
    ) -> None: ...

    def maybe_complete_join(
        self, result: Result[Any], group: ClassicGroup, now_ms: int
    ) -> None: ...

    def finish(self, result: Result[Any], token: int) -> Result[Any]: ...


class ClassicJoins:
    """JoinGroup on the classic groups of one shard."""

    def __init__(
        self, ctx: ShardContext, *, consumer: ConsumerGroups, classic: JoinSupport
    ) -> None:
        self._ctx = ctx
        self._consumer = consumer
        self._classic = classic

    def join(self, req: m.JoinGroup, now_ms: int) -> Result[JoinAnswer]:
        """Kafka's classicGroupJoinToClassicGroup, in its order: the group (an unknown group
        with a member id: UNKNOWN_MEMBER_ID), its size limit, the protocols, then the member."""
        result: Result[JoinAnswer] = Result()
        gid = req.group_id
        if gid in self._consumer:  # an empty consumer group: replaced by a classic group
            self._consumer.delete_group(result, gid)
        group = self._classic.get(gid)
        if group is None:
            if req.member_id:
                raise UnknownMemberIdError(f"Group {gid} has no member {req.member_id}.")
            group = ClassicGroup(self._ctx.undo, gid)
            self._classic.add(group)
        if self._refused_as_full(result, group, req, now_ms):
            return result
        names = tuple(n for n, _m in req.protocols)
        if not group.supports_protocols(req.protocol_type, names):
            # Kafka's supportsProtocols: a protocol every member supports, the joining member's
            # current protocols counted too when it is a member already.
            raise InconsistentGroupProtocolError(
                f"Protocol type {req.protocol_type} with protocols {list(names)} is not supported by group {gid}."
            )
        if req.member_id and not (
            req.member_id in group.pending_members and req.group_instance_id is None
        ):
            # Kafka's validateMember: the instance id must still belong to this member id (an
            # older incarnation, replaced by a newer one, is fenced), and the member must exist.
            check_static_owner(group.static_members, gid, req.member_id, req.group_instance_id)
            if req.member_id not in group.members:
                raise UnknownMemberIdError(
                    f"Member {req.member_id} is not a member of group {gid}."
                )
            return self._join_existing(result, group, group.members[req.member_id], req, now_ms)
        if req.member_id:  # a pending dynamic member comes back with its id
            group.pending_members.discard(req.member_id)
            result.timers.append(CancelTimer((CLASSIC_PENDING, gid, req.member_id)))
            return self._add_member_and_rebalance(result, group, req.member_id, req, now_ms)
        if req.group_instance_id is None:
            # KIP-394: a dynamic member's first join only gets a member id, Kafka's
            # ``<client.id>-<uuid>``: client-side assignors (range, roundrobin) order members by
            # it, so clients of one application get a stable order.
            new_id = f"{req.client_id}-{self._ctx.ids.new_uuid()}"
            group.pending_members[new_id] = True
            result.timers.append(
                ArmTimer((CLASSIC_PENDING, gid, new_id), now_ms + req.session_timeout_ms)
            )
            result.response = m.JoinGroupResponse(
                error_code=int(ErrorCode.MEMBER_ID_REQUIRED),
                error_message="The group member needs to have a valid member id before actually entering a consumer group.",
                member_id=new_id,
            )
            return result
        new_id = f"{req.group_instance_id}-{self._ctx.ids.new_uuid()}"
        static_owner = group.static_members.get(req.group_instance_id)
        if static_owner is not None:
            return self._replace_static(
                result, group, group.members[static_owner], new_id, req, now_ms
            )
        return self._add_member_and_rebalance(result, group, new_id, req, now_ms)

    def _refused_as_full(
        self, result: Result[Any], group: ClassicGroup, req: m.JoinGroup, now_ms: int
    ) -> bool:
        """group.max.size, as Kafka's acceptJoiningMember: Stable or CompletingRebalance admit
        their members and newcomers while the members are fewer than the limit; a rebalance
        admits the members waiting in JoinGroup and anyone while fewer than the limit wait
        (the members that rejoin last are left out when the limit was lowered); an Empty group
        admits anyone. Member ids handed out by MEMBER_ID_REQUIRED are not counted, and a
        static member's new incarnation is a newcomer. A newcomer refused gets
        GROUP_MAX_SIZE_REACHED; a member refused is removed, and answered so (True)."""
        max_size = self._ctx.config.classic_max_size
        member = group.members.get(req.member_id) if req.member_id else None
        if group.state is S.PREPARING_REBALANCE:
            waiting = sum(x.join_token is not None for x in group.members.values())
            if (member is not None and member.join_token is not None) or waiting < max_size:
                return False
        elif group.state is S.EMPTY or member is not None or len(group.members) < max_size:
            return False
        if member is None:
            raise GroupMaxSizeReachedError(
                f"The classic group {group.group_id} has reached its maximum size of {max_size}."
            )
        # A member that rejoins a rebalance after the group filled up (it did not wait in
        # JoinGroup, so no request of it is parked): Kafka removes it, as one that did not
        # rejoin in time, and answers without a member id.
        group.remove_member(member.member_id)
        group.note_removal(member.member_id, RemovalCause.MEMBER_FENCED_REBALANCE_TIMEOUT, now_ms)
        result.timers.append(CancelTimer((CLASSIC_SESSION, group.group_id, member.member_id)))
        self._classic.maybe_complete_join(result, group, now_ms)
        full = GroupMaxSizeReachedError(
            f"The classic group {group.group_id} has reached its maximum size of {max_size}:"
            f" member {member.member_id}, which rejoined after it filled up, was removed."
        )
        result.response = m.JoinGroupResponse(**error_fields(full), member_id="")
        return True

    @staticmethod
    def _new_member(member_id: str, req: m.JoinGroup, token: int | None) -> ClassicMember:
        return ClassicMember(
            member_id=member_id,
            group_instance_id=req.group_instance_id,
            client_id=req.client_id,
            client_host=req.client_host,
            rebalance_timeout_ms=rebalance_timeout(req),
            session_timeout_ms=req.session_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=tuple(req.protocols),
            join_token=token,
            is_new=True,
        )

    def _add_member_and_rebalance(
        self,
        result: Result[Any],
        group: ClassicGroup,
        member_id: str,
        req: m.JoinGroup,
        now_ms: int,
    ) -> Result[Any]:
        token = self._ctx.next_token()
        if not group.members:
            group.set("protocol_type", req.protocol_type)
        group.put_member(self._new_member(member_id, req, token))
        group.set("new_member_added", True)
        # Kafka: a new member's deadline is the new-member join timeout, not its session.
        result.timers.append(
            ArmTimer(
                (CLASSIC_SESSION, group.group_id, member_id), now_ms + NEW_MEMBER_JOIN_TIMEOUT_MS
            )
        )
        self._classic.maybe_prepare_rebalance(
            result,
            group,
            now_ms,
            f"adding member {member_id}",
            RebalanceCause.MEMBER_JOINED,
            req.reason,
        )
        self._classic.maybe_complete_join(result, group, now_ms)
        return self._classic.finish(result, token)

    def _join_existing(
        self,
        result: Result[Any],
        group: ClassicGroup,
        member: ClassicMember,
        req: m.JoinGroup,
        now_ms: int,
    ) -> Result[Any]:
        same = member.protocols == tuple(req.protocols)
        state = group.state
        if state is S.COMPLETING_REBALANCE and same:
            # Its join response was lost: answer it again.
            result.response = join_response(group, member)
            return result
        if state is S.STABLE and same and member.member_id != group.leader_id:
            result.response = join_response(group, member)
            return result
        token = self._ctx.next_token()
        if member.join_token is not None:
            superseded = RebalanceInProgressError(
                "A newer JoinGroup of this member superseded this one."
            )
            result.completions.append(
                (
                    member.join_token,
                    m.JoinGroupResponse(**error_fields(superseded), member_id=member.member_id),
                )
            )
        group.put_member(
            ClassicMember(
                member_id=member.member_id,
                group_instance_id=member.group_instance_id,
                client_id=req.client_id,
                client_host=req.client_host,
                rebalance_timeout_ms=rebalance_timeout(req),
                session_timeout_ms=req.session_timeout_ms,
                protocol_type=req.protocol_type,
                protocols=tuple(req.protocols),
                assignment=member.assignment,
                join_token=token,
                sync_token=member.sync_token,
                is_new=member.is_new,
            )
        )
        if not member.is_new:  # a new member keeps its join deadline
            result.timers.append(
                ArmTimer(
                    (CLASSIC_SESSION, group.group_id, member.member_id),
                    now_ms + req.session_timeout_ms,
                )
            )
        cause = (
            RebalanceCause.MEMBER_REJOINED
            if _subscribed_topics(member.protocols) == _subscribed_topics(tuple(req.protocols))
            else RebalanceCause.SUBSCRIPTION_CHANGED
        )
        self._classic.maybe_prepare_rebalance(
            result, group, now_ms, f"member {member.member_id} rejoined", cause, req.reason
        )
        self._classic.maybe_complete_join(result, group, now_ms)
        return self._classic.finish(result, token)

    def _replace_static(
        self,
        result: Result[Any],
        group: ClassicGroup,
        old: ClassicMember,
        new_id: str,
        req: m.JoinGroup,
        now_ms: int,
    ) -> Result[Any]:
        """A static member restarted with a new member id: the old id is fenced. A Stable
        group it comes back to is not rebalanced unless its protocols change the protocol the
        group would select (Kafka's updateStaticMemberThenRebalanceOrCompleteJoin: other
        metadata, e.g. another subscription, alone does not); otherwise the member joins a
        rebalance (always from CompletingRebalance: the leader may have assigned the old id)."""
        gid = group.group_id
        fenced = FencedInstanceIdError(f"Static member {old.member_id} was replaced by {new_id}.")
        if old.join_token is not None:
            result.completions.append(
                (
                    old.join_token,
                    m.JoinGroupResponse(**error_fields(fenced), member_id=old.member_id),
                )
            )
        if old.sync_token is not None:
            result.completions.append((old.sync_token, m.SyncGroupResponse(**error_fields(fenced))))
        result.timers.append(CancelTimer((CLASSIC_SESSION, gid, old.member_id)))
        leader = group.leader_id
        group.remove_member(old.member_id)
        # Kafka's replaceStaticMember + updateMember: the new incarnation keeps the old one's
        # client id and host and its assignment, and takes the request's protocols and timeouts.
        new = replace(
            self._new_member(new_id, req, None),
            client_id=old.client_id,
            client_host=old.client_host,
            protocol_type=old.protocol_type,
            assignment=old.assignment,
            is_new=False,
        )
        group.put_member(new)
        if leader == old.member_id:
            group.set("leader_id", new_id)
        result.timers.append(
            ArmTimer((CLASSIC_SESSION, gid, new_id), now_ms + req.session_timeout_ms)
        )
        if group.state is S.STABLE and group.select_protocol() == group.protocol_name:
            # KIP-345: the same static member is back; no rebalance while the group's protocol
            # stays (its metadata may differ: a returning leader sees it in the member list,
            # KIP-814). Persist the new id and the member's protocols; a record too large
            # fails as Kafka's write does, undoing the replacement (the handler's rollback).
            value = group.to_record_value()
            too_large = record_size_error(gid, value, self._ctx.config.message_max_bytes)
            if too_large is not None:
                raise too_large
            self._ctx.emit(result, r.classic_group_record(gid, value))
            result.response = self._restarted(group, new, leader, req)
            return result
        group.note_removal(old.member_id, RemovalCause.STATIC_MEMBER_REPLACED, now_ms)
        token = self._ctx.next_token()
        group.put_member(replace(new, join_token=token))
        self._classic.maybe_prepare_rebalance(
            result,
            group,
            now_ms,
            f"static member {new_id} replaced {old.member_id}",
            RebalanceCause.STATIC_MEMBER_RESTART,
            req.reason,
        )
        self._classic.maybe_complete_join(result, group, now_ms)
        return self._classic.finish(result, token)

    @staticmethod
    def _restarted(
        group: ClassicGroup, member: ClassicMember, leader: str | None, req: m.JoinGroup
    ) -> m.JoinGroupResponse:
        """The JoinGroup answer of a static member back in a Stable group without a rebalance:
        a leader gets the member list to check, and is told to skip the assignment (KIP-814,
        JoinGroup v9+); an older leader is answered as a follower, with the leader it had
        before (Kafka: the old incarnation's id), so that it only collects its assignment."""
        response = join_response(group, member)
        if member.member_id != group.leader_id:
            return response
        if req.supports_skip_assignment:
            return replace(response, skip_assignment=True, members=_member_list(group))
        return replace(response, leader=leader or "", members=())


def _member_list(group: ClassicGroup) -> tuple[m.JoinGroupMember, ...]:
    return tuple(
        m.JoinGroupMember(
            member_id=x.member_id,
            group_instance_id=x.group_instance_id,
            metadata=x.metadata(group.protocol_name),
        )
        for x in group.members.values()
    )


def join_response(group: ClassicGroup, member: ClassicMember) -> m.JoinGroupResponse:
    """A member's JoinGroup answer: the leader gets the members' metadata."""
    leader = group.leader_id or ""
    return m.JoinGroupResponse(
        generation_id=group.generation,
        protocol_type=group.protocol_type,
        protocol_name=group.protocol_name,
        leader=leader,
        member_id=member.member_id,
        members=_member_list(group) if member.member_id == leader else (),
    )
