"""The bridged shard: the core shard plus classic groups, classic members inside consumer groups,
and the online upgrade/downgrade between them (KIP-848 "Supporting Online Consumer Group
Upgrade"; Kafka 4.0 semantics, shared/reference/kafka-coordinator-notes.md 1.11).

Entry points (each takes ``now_ms`` and returns a core :class:`Result`): :meth:`classic_join`,
:meth:`classic_sync`, :meth:`classic_heartbeat`, :meth:`classic_leave`; reads
:meth:`describe_classic_groups`. A JoinGroup or SyncGroup that must wait at a barrier answers
``Pending(token)``; a later result (another member's request, a timer) carries
``completions=[(token, response)]``. A request whose own barrier completes at once gets its
response directly.

Routing by group id: a classic group -> Kafka's classic state machine; a non-empty consumer
group -> the classic member is translated into a heartbeat of the core (per-member
reconciliation, generation = member epoch, no group-wide barrier); an empty consumer group is
deleted and replaced by a classic group (conversions of empty groups are always allowed).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable
from typing import Any

from coordinator.core import records as r
from coordinator.core.commands import ConsumerGroupHeartbeat, Pending, Result
from coordinator.core.errors import (
    CoordinatorError,
    ErrorCode,
    FencedInstanceIdError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidRequestError,
    InvalidSessionTimeoutError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from coordinator.core.group import ConsumerGroup
from coordinator.core.model import (
    Assignment,
    ClassicMemberMetadata,
    ConsumerGroupMember,
    MemberState,
    assignment_minus,
    assignment_union,
)
from coordinator.core.shard import SESSION, GroupCoordinatorShard
from coordinator.core.timers import REBALANCE, ArmTimer, CancelTimer, DueTimer, TimerOp

from . import messages as m
from .classic_group import ClassicGroup, ClassicGroupState, ClassicMember
from .protocol import (
    CONSUMER_PROTOCOL_TYPE,
    AssignmentMessage,
    ProtocolError,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
)

log = logging.getLogger("kip848.bridge")

# Timer kinds (keys are (kind, group id, member id or "")).
CLASSIC_SESSION = "classic-session"
CLASSIC_PENDING = "classic-pending"
CLASSIC_JOIN = "classic-join"
CLASSIC_INITIAL_JOIN = "classic-initial-join"
CLASSIC_SYNC = "classic-sync"
MIXED_JOIN = "classic-member-join"
MIXED_SYNC = "classic-member-sync"

S = ClassicGroupState
_MIGRATION_UPGRADE = ("bidirectional", "upgrade")
_MIGRATION_DOWNGRADE = ("bidirectional", "downgrade")


def _err(error: CoordinatorError) -> dict[str, Any]:
    return {"error_code": int(error.code), "error_message": error.message}


class BridgedShard(GroupCoordinatorShard):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.classic_groups = self.undo.new_dict()  # group id -> ClassicGroup
        self.mixed_join_armed = self.undo.new_dict()  # (group id, member id) -> True
        self._tokens = itertools.count(1)  # process-local, never reused (not rolled back)

    # ================================================================== replay

    def replay_classic_group(
        self, key: r.GroupMetadataKey, value: r.GroupMetadataValue | None
    ) -> None:
        gid = key.group_id
        group = self.classic_groups.get(gid)
        if value is None:
            self.classic_groups.discard(gid)
            return
        if gid in self.groups:
            raise r_illegal(f"classic group {gid} written while a consumer group of that id exists")
        if group is None or group.to_record_value() != value:
            # Loading (or a record this group's state does not express): rebuild from the record.
            self.classic_groups[gid] = ClassicGroup.from_record(self.undo, gid, value)
        else:
            # Live: the handler built the record from this very group; keep the transient state.
            group.set("durable", value)

    # ================================================================== helpers

    def _finish(self, result: Result[Any], token: int) -> Result[Any]:
        """The response of a request that may wait: its own completion if it is already in
        ``result``, else ``Pending``."""
        for i, (t, response) in enumerate(result.completions):
            if t == token:
                del result.completions[i]
                result.response = response
                return result
        result.response = Pending(token)
        return result

    def _topic_names(self, a: Assignment) -> tuple[tuple[str, tuple[int, ...]], ...]:
        by_id = self.topics.by_id
        out = []
        for topic_id in sorted(a, key=lambda t: by_id[t].name if t in by_id else t):
            t = by_id.get(topic_id)
            if t is not None:
                out.append((t.name, tuple(sorted(a[topic_id]))))
        return tuple(out)

    def _topic_ids(
        self, tps: Iterable[tuple[str, Iterable[int]]], taken: set[tuple[str, int]] | None = None
    ) -> dict[str, frozenset[int]]:
        """Names -> ids; unknown topics, out-of-range and (if ``taken``) already-claimed
        partitions are dropped."""
        by_name = self.topics.by_name
        out: dict[str, set[int]] = {}
        for name, partitions in tps:
            t = by_name.get(name)
            if t is None:
                continue
            for p in partitions:
                if not 0 <= p < t.num_partitions:
                    continue
                if taken is not None:
                    if (t.topic_id, p) in taken:
                        continue
                    taken.add((t.topic_id, p))
                out.setdefault(t.topic_id, set()).add(p)
        return {t: frozenset(ps) for t, ps in out.items()}

    def _check_join_request(self, req: m.JoinGroup) -> None:
        if not req.group_id.strip():
            raise InvalidGroupIdError(f"Group id '{req.group_id}' is invalid.")
        if req.group_instance_id is not None and not req.group_instance_id.strip():
            raise InvalidRequestError("GroupInstanceId can't be empty.")
        lo, hi = (
            self.config.classic_min_session_timeout_ms,
            self.config.classic_max_session_timeout_ms,
        )
        if not lo <= req.session_timeout_ms <= hi:
            raise InvalidSessionTimeoutError(
                f"SessionTimeoutMs {req.session_timeout_ms} is out of range [{lo}, {hi}]."
            )
        if not req.protocol_type or not req.protocols:
            raise InconsistentGroupProtocolError("ProtocolType and Protocols must be set.")

    @staticmethod
    def _rebalance_timeout(req: m.JoinGroup) -> int:
        return req.rebalance_timeout_ms if req.rebalance_timeout_ms > 0 else req.session_timeout_ms

    # ================================================================== JoinGroup

    def classic_join(self, req: m.JoinGroup, now_ms: int) -> Result[Any]:
        self._check_join_request(req)
        consumer = self.groups.get(req.group_id)
        if consumer is not None and consumer.members:
            return self._run(self._mixed_join, consumer, req, now_ms)
        return self._run(self._classic_join, req, now_ms)

    def _classic_join(self, req: m.JoinGroup, now_ms: int) -> Result[Any]:
        result: Result[Any] = Result()
        gid = req.group_id
        if gid in self.groups:  # an empty consumer group: replaced by a classic group
            self._delete_empty_consumer_group(result, gid)
        group = self.classic_groups.get(gid)
        if group is None:
            if req.member_id:
                raise UnknownMemberIdError(f"Group {gid} has no member {req.member_id}.")
            group = ClassicGroup(self.undo, gid)
            self.classic_groups[gid] = group
        if req.member_id and not (
            req.member_id in group.pending_members and req.group_instance_id is None
        ):
            # Kafka's validateMember: the instance id must still belong to this member id (an
            # older incarnation, replaced by a newer one, is fenced), and the member must exist.
            _check_static_owner(group.static_members, gid, req.member_id, req.group_instance_id)
            if req.member_id not in group.members:
                raise UnknownMemberIdError(
                    f"Member {req.member_id} is not a member of group {gid}."
                )
        names = tuple(n for n, _m in req.protocols)
        if req.member_id in group.members:
            member = group.members[req.member_id]
            others = [x for x in group.members.values() if x.member_id != member.member_id]
            if others and not self._supported_by(group, others, req.protocol_type, names):
                raise InconsistentGroupProtocolError(
                    f"The protocols of member {req.member_id} are not supported by group {gid}."
                )
            return self._join_existing(result, group, member, req, now_ms)
        if not group.supports_protocols(req.protocol_type, names):
            raise InconsistentGroupProtocolError(
                f"Protocol type {req.protocol_type} with protocols {list(names)} is not supported by group {gid}."
            )
        static_owner = (
            None
            if req.group_instance_id is None
            else group.static_members.get(req.group_instance_id)
        )
        if (
            static_owner is None
            and len(group.members)
            + len(group.pending_members)
            - (req.member_id in group.pending_members)
            >= self.config.classic_max_size
        ):
            raise GroupMaxSizeReachedError(
                f"The classic group {gid} has reached its maximum size of {self.config.classic_max_size}."
            )
        if req.member_id:  # a pending dynamic member comes back with its id
            group.pending_members.discard(req.member_id)
            result.timers.append(CancelTimer((CLASSIC_PENDING, gid, req.member_id)))
            return self._add_member_and_rebalance(result, group, req.member_id, req, now_ms)
        if req.group_instance_id is None:
            # KIP-394: a dynamic member's first join only gets a member id.
            new_id = self.ids.new_member_id()
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
        new_id = f"{req.group_instance_id}-{self.ids.new_member_id()}"
        if static_owner is not None:
            return self._replace_static(
                result, group, group.members[static_owner], new_id, req, now_ms
            )
        return self._add_member_and_rebalance(result, group, new_id, req, now_ms)

    @staticmethod
    def _supported_by(
        group: ClassicGroup, others: list[ClassicMember], protocol_type: str, names: tuple[str, ...]
    ) -> bool:
        if protocol_type != group.protocol_type and group.protocol_type is not None:
            return False
        common = set(names)
        for x in others:
            common &= set(x.protocol_names())
        return bool(common)

    def _new_member(self, member_id: str, req: m.JoinGroup, token: int | None) -> ClassicMember:
        return ClassicMember(
            member_id=member_id,
            group_instance_id=req.group_instance_id,
            client_id=req.client_id,
            client_host=req.client_host,
            rebalance_timeout_ms=self._rebalance_timeout(req),
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
        token = next(self._tokens)
        if not group.members:
            group.set("protocol_type", req.protocol_type)
        group.put_member(self._new_member(member_id, req, token))
        group.set("new_member_added", True)
        result.timers.append(
            ArmTimer((CLASSIC_SESSION, group.group_id, member_id), now_ms + req.session_timeout_ms)
        )
        self._maybe_prepare_rebalance(result, group, now_ms, f"adding member {member_id}")
        self._maybe_complete_join(result, group, now_ms)
        return self._finish(result, token)

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
            result.response = self._join_response(group, member)
            return result
        if state is S.STABLE and same and member.member_id != group.leader_id:
            result.response = self._join_response(group, member)
            return result
        token = next(self._tokens)
        if member.join_token is not None:
            result.completions.append(
                (
                    member.join_token,
                    m.JoinGroupResponse(
                        **_err(
                            RebalanceInProgressError(
                                "A newer JoinGroup of this member superseded this one."
                            )
                        ),
                        member_id=member.member_id,
                    ),
                )
            )
        group.put_member(
            ClassicMember(
                member_id=member.member_id,
                group_instance_id=member.group_instance_id,
                client_id=req.client_id,
                client_host=req.client_host,
                rebalance_timeout_ms=self._rebalance_timeout(req),
                session_timeout_ms=req.session_timeout_ms,
                protocol_type=req.protocol_type,
                protocols=tuple(req.protocols),
                assignment=member.assignment,
                join_token=token,
                sync_token=member.sync_token,
                is_new=member.is_new,
            )
        )
        result.timers.append(
            ArmTimer(
                (CLASSIC_SESSION, group.group_id, member.member_id), now_ms + req.session_timeout_ms
            )
        )
        self._maybe_prepare_rebalance(result, group, now_ms, f"member {member.member_id} rejoined")
        self._maybe_complete_join(result, group, now_ms)
        return self._finish(result, token)

    def _replace_static(
        self,
        result: Result[Any],
        group: ClassicGroup,
        old: ClassicMember,
        new_id: str,
        req: m.JoinGroup,
        now_ms: int,
    ) -> Result[Any]:
        """A static member restarted with a new member id: the old id is fenced."""
        gid = group.group_id
        fenced = FencedInstanceIdError(f"Static member {old.member_id} was replaced by {new_id}.")
        if old.join_token is not None:
            result.completions.append(
                (old.join_token, m.JoinGroupResponse(**_err(fenced), member_id=old.member_id))
            )
        if old.sync_token is not None:
            result.completions.append((old.sync_token, m.SyncGroupResponse(**_err(fenced))))
        result.timers.append(CancelTimer((CLASSIC_SESSION, gid, old.member_id)))
        was_leader = group.leader_id == old.member_id
        same = old.protocols == tuple(req.protocols)
        group.remove_member(old.member_id)
        new = self._new_member(new_id, req, None)
        new = ClassicMember(**{**_fields(new), "assignment": old.assignment, "is_new": False})
        group.put_member(new)
        if was_leader:
            group.set("leader_id", new_id)
        result.timers.append(
            ArmTimer((CLASSIC_SESSION, gid, new_id), now_ms + req.session_timeout_ms)
        )
        if group.state is S.STABLE and same:
            # KIP-345: the same static member is back; no rebalance. Persist the new id.
            self._emit(result, r.classic_group_record(gid, group.to_record_value()))
            response = self._join_response(group, new)
            if was_leader:
                response = m.JoinGroupResponse(
                    **{
                        **_fields(response),
                        "skip_assignment": True,
                        "members": self._member_list(group),
                    }
                )
            result.response = response
            return result
        token = next(self._tokens)
        group.put_member(ClassicMember(**{**_fields(new), "join_token": token}))
        self._maybe_prepare_rebalance(
            result, group, now_ms, f"static member {new_id} replaced {old.member_id}"
        )
        self._maybe_complete_join(result, group, now_ms)
        return self._finish(result, token)

    def _member_list(self, group: ClassicGroup) -> tuple[m.JoinGroupMember, ...]:
        return tuple(
            m.JoinGroupMember(
                member_id=x.member_id,
                group_instance_id=x.group_instance_id,
                metadata=x.metadata(group.protocol_name),
            )
            for x in group.members.values()
        )

    def _join_response(self, group: ClassicGroup, member: ClassicMember) -> m.JoinGroupResponse:
        leader = group.leader_id or ""
        return m.JoinGroupResponse(
            generation_id=group.generation,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=leader,
            member_id=member.member_id,
            members=self._member_list(group) if member.member_id == leader else (),
        )

    # ------------------------------------------------------------------ rebalance

    def _maybe_prepare_rebalance(
        self, result: Result[Any], group: ClassicGroup, now_ms: int, reason: str
    ) -> None:
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY):
            self._prepare_rebalance(result, group, now_ms, reason)

    def _prepare_rebalance(
        self, result: Result[Any], group: ClassicGroup, now_ms: int, reason: str
    ) -> None:
        gid = group.group_id
        if group.state is S.COMPLETING_REBALANCE:
            # Sync requests that wait for the leader learn the generation is over.
            self._reset_pending_syncs(result, group, RebalanceInProgressError())
        for mid in list(group.pending_sync):
            del group.pending_sync[mid]
        result.timers.append(CancelTimer((CLASSIC_SYNC, gid, "")))
        if group.state is S.EMPTY:
            delay = self.config.classic_initial_rebalance_delay_ms
            remaining = max(group.max_rebalance_timeout_ms() - delay, 0)
            group.set("new_member_added", False)
            result.timers.append(
                ArmTimer((CLASSIC_INITIAL_JOIN, gid, ""), now_ms + delay, remaining)
            )
        else:
            result.timers.append(
                ArmTimer(
                    (CLASSIC_JOIN, gid, ""),
                    now_ms + group.max_rebalance_timeout_ms(),
                    group.generation,
                )
            )
        group.transition(S.PREPARING_REBALANCE, now_ms)
        log.info(
            "[GroupId %s] Preparing to rebalance (generation %d): %s.",
            gid,
            group.generation,
            reason,
        )

    def _reset_pending_syncs(
        self, result: Result[Any], group: ClassicGroup, error: CoordinatorError
    ) -> None:
        for x in list(group.members.values()):
            if x.sync_token is not None:
                result.completions.append((x.sync_token, m.SyncGroupResponse(**_err(error))))
                group.put_member(ClassicMember(**{**_fields(x), "sync_token": None}))

    def _maybe_complete_join(self, result: Result[Any], group: ClassicGroup, now_ms: int) -> None:
        if (
            group.state is S.PREPARING_REBALANCE
            and group.previous_state is not S.EMPTY
            and group.all_joined()
        ):
            self._complete_join(result, group, now_ms)

    def _complete_join(self, result: Result[Any], group: ClassicGroup, now_ms: int) -> None:
        gid = group.group_id
        result.timers.append(CancelTimer((CLASSIC_JOIN, gid, "")))
        result.timers.append(CancelTimer((CLASSIC_INITIAL_JOIN, gid, "")))
        for x in list(group.members.values()):
            if x.join_token is None and x.group_instance_id is None:
                group.remove_member(x.member_id)  # dynamic members that did not rejoin
                result.timers.append(CancelTimer((CLASSIC_SESSION, gid, x.member_id)))
        joined = [x for x in group.members.values() if x.join_token is not None]
        if group.members and not joined:
            # Nobody rejoined (only static members left): wait another rebalance timeout.
            result.timers.append(
                ArmTimer(
                    (CLASSIC_JOIN, gid, ""),
                    now_ms + group.max_rebalance_timeout_ms(),
                    group.generation,
                )
            )
            return
        if group.leader_id is None or group.members[group.leader_id].join_token is None:
            group.set("leader_id", joined[0].member_id if joined else None)
        group.set("generation", group.generation + 1)
        if not group.members:
            # Kafka's initNextGeneration: the protocol name goes, the protocol type stays.
            group.set("protocol_name", None)
            group.transition(S.EMPTY, now_ms)
            self._emit(result, r.classic_group_record(gid, group.to_record_value()))
            log.info("[GroupId %s] Generation %d is empty.", gid, group.generation)
            return
        group.set("protocol_name", group.select_protocol())
        group.transition(S.COMPLETING_REBALANCE, now_ms)
        for x in joined:
            response = self._join_response(group, x)
            result.completions.append((x.join_token, response))  # type: ignore[arg-type]
            group.put_member(ClassicMember(**{**_fields(x), "join_token": None, "is_new": False}))
            result.timers.append(
                ArmTimer((CLASSIC_SESSION, gid, x.member_id), now_ms + x.session_timeout_ms)
            )
        for x in group.members.values():
            group.pending_sync[x.member_id] = True
        result.timers.append(
            ArmTimer(
                (CLASSIC_SYNC, gid, ""), now_ms + group.max_rebalance_timeout_ms(), group.generation
            )
        )
        log.info(
            "[GroupId %s] Stabilized generation %d with %d members (leader %s, protocol %s).",
            gid,
            group.generation,
            len(group.members),
            group.leader_id,
            group.protocol_name,
        )

    # ================================================================== SyncGroup

    def classic_sync(self, req: m.SyncGroup, now_ms: int) -> Result[Any]:
        consumer = self.groups.get(req.group_id)
        if consumer is not None:
            return self._run(self._mixed_sync, consumer, req, now_ms)
        group = self.classic_groups.get(req.group_id)
        if group is None:
            raise UnknownMemberIdError(f"Group {req.group_id} not found.")
        member = self._validate_classic_member(group, req.member_id, req.group_instance_id)
        if req.generation_id != group.generation:
            raise IllegalGenerationError(
                f"The received generation id {req.generation_id} does not match the generation {group.generation} of group {group.group_id}."
            )
        if (req.protocol_type is not None and req.protocol_type != group.protocol_type) or (
            req.protocol_name is not None and req.protocol_name != group.protocol_name
        ):
            raise InconsistentGroupProtocolError(
                "ProtocolType or ProtocolName does not match the group's."
            )
        if group.state is S.EMPTY:
            raise UnknownMemberIdError(f"Group {group.group_id} is empty.")
        if group.state is S.PREPARING_REBALANCE:
            raise RebalanceInProgressError()
        return self._run(self._classic_sync, group, member, req, now_ms)

    def _classic_sync(
        self, group: ClassicGroup, member: ClassicMember, req: m.SyncGroup, now_ms: int
    ) -> Result[Any]:
        result: Result[Any] = Result()
        gid = group.group_id
        group.pending_sync.discard(member.member_id)
        result.timers.append(
            ArmTimer((CLASSIC_SESSION, gid, member.member_id), now_ms + member.session_timeout_ms)
        )
        if group.state is S.STABLE:
            result.response = self._sync_response(group, member)
            return result
        token = next(self._tokens)
        group.put_member(ClassicMember(**{**_fields(member), "sync_token": token}))
        if member.member_id == group.leader_id:
            assignments = dict(req.assignments)
            for x in list(group.members.values()):
                group.put_member(
                    ClassicMember(**{**_fields(x), "assignment": assignments.get(x.member_id, b"")})
                )
            group.transition(S.STABLE, now_ms)
            self._emit(result, r.classic_group_record(gid, group.to_record_value()))
            for x in list(group.members.values()):
                if x.sync_token is not None:
                    result.completions.append((x.sync_token, self._sync_response(group, x)))
                    group.put_member(ClassicMember(**{**_fields(x), "sync_token": None}))
            if not group.pending_sync:
                result.timers.append(CancelTimer((CLASSIC_SYNC, gid, "")))
        return self._finish(result, token)

    def _sync_response(self, group: ClassicGroup, member: ClassicMember) -> m.SyncGroupResponse:
        return m.SyncGroupResponse(
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            assignment=member.assignment,
        )

    def _validate_classic_member(
        self, group: ClassicGroup, member_id: str, instance_id: str | None
    ) -> ClassicMember:
        _check_static_owner(group.static_members, group.group_id, member_id, instance_id)
        member = group.members.get(member_id)
        if member is None:
            raise UnknownMemberIdError(
                f"Member {member_id} is not a member of group {group.group_id}."
            )
        return member

    # ================================================================== Heartbeat

    def classic_heartbeat(self, req: m.Heartbeat, now_ms: int) -> Result[Any]:
        consumer = self.groups.get(req.group_id)
        if consumer is not None:
            return self._run(self._mixed_heartbeat, consumer, req, now_ms)
        group = self.classic_groups.get(req.group_id)
        if group is None:
            raise UnknownMemberIdError(f"Group {req.group_id} not found.")
        member = self._validate_classic_member(group, req.member_id, req.group_instance_id)
        if req.generation_id != group.generation:
            raise IllegalGenerationError(
                f"The received generation id {req.generation_id} does not match the generation {group.generation} of group {group.group_id}."
            )
        if group.state is S.EMPTY:
            raise UnknownMemberIdError(f"Group {group.group_id} is empty.")
        result: Result[Any] = Result()
        result.timers.append(
            ArmTimer(
                (CLASSIC_SESSION, group.group_id, member.member_id),
                now_ms + member.session_timeout_ms,
            )
        )
        if group.state is S.PREPARING_REBALANCE:
            result.response = m.HeartbeatResponse(**_err(RebalanceInProgressError()))
        else:
            result.response = m.HeartbeatResponse()
        return result

    # ================================================================== LeaveGroup

    def classic_leave(self, req: m.LeaveGroup, now_ms: int) -> Result[Any]:
        if not req.group_id.strip():
            raise InvalidGroupIdError(f"Group id '{req.group_id}' is invalid.")
        consumer = self.groups.get(req.group_id)
        if consumer is not None:
            return self._run(self._mixed_leave, consumer, req, now_ms)
        group = self.classic_groups.get(req.group_id)
        if group is None:
            raise UnknownMemberIdError(f"Group {req.group_id} not found.")
        return self._run(self._classic_leave, group, req, now_ms)

    def _classic_leave(self, group: ClassicGroup, req: m.LeaveGroup, now_ms: int) -> Result[Any]:
        result: Result[Any] = Result()
        gid = group.group_id
        out = []
        for ident in req.members:
            try:
                member_id = _leaving_member_id(group.static_members, ident)
                if ident.group_instance_id is None:
                    if member_id in group.pending_members:
                        del group.pending_members[member_id]
                        result.timers.append(CancelTimer((CLASSIC_PENDING, gid, member_id)))
                        out.append(
                            m.LeaveMemberResponse(member_id=ident.member_id, group_instance_id=None)
                        )
                        continue
                    if member_id not in group.members:
                        raise UnknownMemberIdError(
                            f"Member {member_id} is not a member of group {gid}."
                        )
            except CoordinatorError as e:
                out.append(
                    m.LeaveMemberResponse(
                        member_id=ident.member_id,
                        group_instance_id=ident.group_instance_id,
                        **_err(e),
                    )
                )
                continue
            self._remove_classic_member(
                result, group, member_id, now_ms, f"member {member_id} left"
            )
            out.append(
                m.LeaveMemberResponse(
                    member_id=ident.member_id, group_instance_id=ident.group_instance_id
                )
            )
        result.response = m.LeaveGroupResponse(members=tuple(out))
        return result

    def _remove_classic_member(
        self, result: Result[Any], group: ClassicGroup, member_id: str, now_ms: int, why: str
    ) -> None:
        gid = group.group_id
        member = group.members[member_id]
        error = UnknownMemberIdError(f"Member {member_id} was removed from group {gid}: {why}.")
        if member.join_token is not None:
            result.completions.append(
                (member.join_token, m.JoinGroupResponse(**_err(error), member_id=member_id))
            )
        if member.sync_token is not None:
            result.completions.append((member.sync_token, m.SyncGroupResponse(**_err(error))))
        group.remove_member(member_id)
        result.timers.append(CancelTimer((CLASSIC_SESSION, gid, member_id)))
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
            self._prepare_rebalance(result, group, now_ms, why)
        self._maybe_complete_join(result, group, now_ms)

    # ================================================================== timers

    def on_bridge_timer(self, timer: DueTimer, now_ms: int) -> Result[None]:
        kind, gid, mid = timer.key
        if kind in (MIXED_JOIN, MIXED_SYNC):
            cg = self.groups.get(gid)
            member = None if cg is None else cg.members.get(mid)
            if cg is None or member is None or member.classic_member_metadata is None:
                return Result()
            what = "rejoin" if kind == MIXED_JOIN else "send SyncGroup"
            return self._run(
                self._fence_classic_member,
                cg,
                member,
                now_ms,
                f"did not {what} within its rebalance timeout",
            )
        group = self.classic_groups.get(gid)
        if group is None:
            return Result()
        return self._run(self._on_classic_timer, group, timer, now_ms)

    def _fence_classic_member(
        self, group: ConsumerGroup, member: ConsumerGroupMember, now_ms: int, why: str
    ) -> Result[Any]:
        self.mixed_join_armed.discard((group.group_id, member.member_id))
        return self._fence_member(group, member, now_ms, why)

    def _on_classic_timer(self, group: ClassicGroup, timer: DueTimer, now_ms: int) -> Result[Any]:
        kind, gid, mid = timer.key
        result: Result[Any] = Result()
        if kind == CLASSIC_SESSION:
            member = group.members.get(mid)
            if member is None:
                return result
            if member.join_token is not None or member.sync_token is not None:
                # Waiting at a barrier counts as a heartbeat.
                result.timers.append(ArmTimer(timer.key, now_ms + member.session_timeout_ms))
                return result
            self._remove_classic_member(result, group, mid, now_ms, "session timeout expired")
        elif kind == CLASSIC_PENDING:
            if mid in group.pending_members:
                del group.pending_members[mid]
                self._maybe_complete_join(result, group, now_ms)
                self._drop_if_unused(group)
        elif kind == CLASSIC_INITIAL_JOIN:
            if group.state is not S.PREPARING_REBALANCE:
                return result
            if group.new_member_added and timer.payload > 0:
                # KIP-134: members keep arriving; wait again (bounded by the rebalance timeout).
                delay = min(self.config.classic_initial_rebalance_delay_ms, timer.payload)
                group.set("new_member_added", False)
                result.timers.append(
                    ArmTimer((CLASSIC_INITIAL_JOIN, gid, ""), now_ms + delay, timer.payload - delay)
                )
            else:
                self._complete_join(result, group, now_ms)
        elif kind == CLASSIC_JOIN:
            if group.state is S.PREPARING_REBALANCE and group.generation == timer.payload:
                self._complete_join(result, group, now_ms)
        elif kind == CLASSIC_SYNC:
            if (
                group.generation == timer.payload
                and group.pending_sync
                and group.state in (S.COMPLETING_REBALANCE, S.STABLE)
            ):
                late = list(group.pending_sync)
                for member_id in late:
                    if member_id in group.members:
                        self._remove_classic_member(
                            result, group, member_id, now_ms, "did not send SyncGroup in time"
                        )
        else:
            raise r_illegal(f"unknown timer kind {kind}")
        return result

    def _drop_if_unused(self, group: ClassicGroup) -> None:
        """A group that never got a member nor a record disappears."""
        if (
            not group.members
            and not group.pending_members
            and group.durable is None
            and group.state is S.EMPTY
        ):
            del self.classic_groups[group.group_id]

    def on_loaded(self, now_ms: int) -> list[TimerOp]:
        ops = super().on_loaded(now_ms)
        for gid in sorted(self.classic_groups):
            for x in self.classic_groups[gid].members.values():
                ops.append(
                    ArmTimer((CLASSIC_SESSION, gid, x.member_id), now_ms + x.session_timeout_ms)
                )
        return ops

    # ================================================================== classic members in consumer groups

    def _classic_member_of(
        self, group: ConsumerGroup, member_id: str, instance_id: str | None
    ) -> ConsumerGroupMember:
        _check_static_owner(group.static_members, group.group_id, member_id, instance_id)
        member = group.members.get(member_id)
        if member is None:
            raise UnknownMemberIdError(
                f"Member {member_id} is not a member of group {group.group_id}."
            )
        if member.classic_member_metadata is None:
            raise UnknownMemberIdError(f"Member {member_id} does not use the classic protocol.")
        return member

    def _mixed_join(self, group: ConsumerGroup, req: m.JoinGroup, now_ms: int) -> Result[Any]:
        """KIP-848: a classic member in a consumer group is reconciled on its own; JoinGroup is
        translated into a heartbeat of the core (its generation is its member epoch)."""
        gid = group.group_id
        if req.protocol_type != CONSUMER_PROTOCOL_TYPE:
            raise InconsistentGroupProtocolError(
                f"Protocol type {req.protocol_type} is not supported by consumer group {gid}."
            )
        names = {n for n, _m in req.protocols}
        for x in group.members.values():
            c = x.classic_member_metadata
            if (
                c is not None
                and x.member_id != req.member_id
                and not names & {n for n, _ in c.supported_protocols}
            ):
                raise InconsistentGroupProtocolError(
                    f"The protocols {sorted(names)} share none with member {x.member_id} of group {gid}."
                )
        try:
            sub = decode_subscription(req.protocols[0][1])
        except ProtocolError as e:
            raise InconsistentGroupProtocolError(f"Malformed subscription metadata: {e}") from None
        result: Result[Any] = Result()
        if not req.member_id and req.group_instance_id is None:
            new_id = self.ids.new_member_id()
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
        member_id = req.member_id or f"{req.group_instance_id}-{self.ids.new_member_id()}"
        if req.group_instance_id is not None:
            owner = group.static_members.get(req.group_instance_id)
            if req.member_id:
                # Kafka's validateMember: a known member id must still own its instance id (an
                # older incarnation, replaced by a newer one, is fenced).
                _check_static_owner(group.static_members, gid, req.member_id, req.group_instance_id)
            elif owner is not None:
                # A restarted static member takes its place back (KIP-345): the old incarnation
                # leaves temporarily so that the core replaces it.
                old = group.members[owner]
                self._emit(
                    result,
                    r.current_assignment_record(
                        gid, _with(old, member_epoch=-2, partitions_pending_revocation={})
                    ),
                )
                result.timers += [
                    CancelTimer((MIXED_JOIN, gid, owner)),
                    CancelTimer((MIXED_SYNC, gid, owner)),
                ]
        owned = None if sub.version < 1 else self._topic_ids(sub.owned_partitions)
        hb = ConsumerGroupHeartbeat(
            group_id=gid,
            member_id=member_id,
            member_epoch=existing.member_epoch if existing is not None else 0,
            instance_id=req.group_instance_id,
            rack_id=sub.rack_id,
            rebalance_timeout_ms=self._rebalance_timeout(req),
            subscribed_topic_names=tuple(sub.topics),
            topic_partitions=owned if owned is not None else {},
            client_id=req.client_id,
            client_host=req.client_host,
        )
        classic = ClassicMemberMetadata(
            session_timeout_ms=req.session_timeout_ms, supported_protocols=tuple(req.protocols)
        )
        inner = self._heartbeat(hb, now_ms, classic)
        result.records += inner.records
        result.timers += inner.timers
        result.completions += inner.completions
        self.mixed_join_armed.discard((gid, member_id))
        result.timers += [
            CancelTimer((MIXED_JOIN, gid, member_id)),
            ArmTimer((MIXED_SYNC, gid, member_id), now_ms + self._rebalance_timeout(req)),
        ]
        result.response = m.JoinGroupResponse(
            generation_id=inner.response.member_epoch,  # type: ignore[union-attr]
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocol_name=req.protocols[0][0],
            member_id=member_id,
        )
        return result

    def _check_mixed_generation(self, member: ConsumerGroupMember, generation: int) -> None:
        if generation != member.member_epoch:
            raise IllegalGenerationError(
                f"The received generation id {generation} does not match the member epoch {member.member_epoch}."
            )

    def _needs_rejoin(self, group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
        """KIP-848: a classic member is told to rejoin exactly when it must revoke, or when it
        can collect partitions (a newer epoch, or withheld partitions that are now free)."""
        if (
            group.group_epoch > member.member_epoch
            or member.state is MemberState.UNREVOKED_PARTITIONS
        ):
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
        if key not in self.mixed_join_armed:
            self.mixed_join_armed[key] = True
            result.timers.append(
                ArmTimer(
                    (MIXED_JOIN, group.group_id, member.member_id),
                    now_ms + member.rebalance_timeout_ms,
                )
            )

    def _mixed_sync(self, group: ConsumerGroup, req: m.SyncGroup, now_ms: int) -> Result[Any]:
        member = self._classic_member_of(group, req.member_id, req.group_instance_id)
        self._check_mixed_generation(member, req.generation_id)
        protocols = member.classic_member_metadata.supported_protocols  # type: ignore[union-attr]
        if (req.protocol_type is not None and req.protocol_type != CONSUMER_PROTOCOL_TYPE) or (
            req.protocol_name is not None and req.protocol_name != protocols[0][0]
        ):
            raise InconsistentGroupProtocolError(
                "ProtocolType or ProtocolName does not match the member's."
            )
        result: Result[Any] = Result()
        gid = group.group_id
        session_ms = member.classic_member_metadata.session_timeout_ms  # type: ignore[union-attr]
        result.timers += [
            CancelTimer((MIXED_SYNC, gid, member.member_id)),
            ArmTimer((SESSION, gid, member.member_id), now_ms + session_ms),
        ]
        if (
            group.group_epoch > member.member_epoch
            and member.state is not MemberState.UNREVOKED_PARTITIONS
        ):
            self._arm_rejoin(result, group, member, now_ms)
            result.response = m.SyncGroupResponse(**_err(RebalanceInProgressError()))
            return result
        result.response = m.SyncGroupResponse(
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocol_name=protocols[0][0],
            assignment=self._encode_member_assignment(member),
        )
        return result

    def _encode_member_assignment(self, member: ConsumerGroupMember) -> bytes:
        version = 0
        c = member.classic_member_metadata
        if c is not None and c.supported_protocols:
            try:
                version = min(decode_subscription(c.supported_protocols[0][1]).version, 3)
            except ProtocolError:
                version = 0
        return encode_assignment(
            AssignmentMessage(
                version=version, assigned_partitions=self._topic_names(member.assigned_partitions)
            )
        )

    def _mixed_heartbeat(self, group: ConsumerGroup, req: m.Heartbeat, now_ms: int) -> Result[Any]:
        member = self._classic_member_of(group, req.member_id, req.group_instance_id)
        self._check_mixed_generation(member, req.generation_id)
        result: Result[Any] = Result()
        session_ms = member.classic_member_metadata.session_timeout_ms  # type: ignore[union-attr]
        result.timers.append(
            ArmTimer((SESSION, group.group_id, member.member_id), now_ms + session_ms)
        )
        if self._needs_rejoin(group, member):
            self._arm_rejoin(result, group, member, now_ms)
            result.response = m.HeartbeatResponse(**_err(RebalanceInProgressError()))
        else:
            result.response = m.HeartbeatResponse()
        return result

    def _mixed_leave(self, group: ConsumerGroup, req: m.LeaveGroup, now_ms: int) -> Result[Any]:
        result: Result[Any] = Result()
        gid = group.group_id
        out = []
        leaving: list[ConsumerGroupMember] = []
        for ident in req.members:
            try:
                member_id = _leaving_member_id(group.static_members, ident)
                member = self._classic_member_of(group, member_id, None)
                if member in leaving:
                    raise UnknownMemberIdError(f"Member {member_id} is listed twice.")
            except CoordinatorError as e:
                out.append(
                    m.LeaveMemberResponse(
                        member_id=ident.member_id,
                        group_instance_id=ident.group_instance_id,
                        **_err(e),
                    )
                )
                continue
            leaving.append(member)
            out.append(
                m.LeaveMemberResponse(
                    member_id=ident.member_id, group_instance_id=ident.group_instance_id
                )
            )
        if leaving:
            for x in leaving:
                self._remove_member_records(result, gid, x.member_id)
                if x.subscribed_topic_regex:
                    self._maybe_drop_regex(result, group, x.subscribed_topic_regex)
                self.mixed_join_armed.discard((gid, x.member_id))
                result.timers += self._cancel_member_timers(gid, x.member_id)
            metadata = self._subscription_metadata(group)
            if metadata != group.subscription_metadata:
                self._emit(result, r.partition_metadata_record(gid, metadata))
            self._emit(result, r.group_epoch_record(gid, group.group_epoch + 1, group.group_uid))
            group.set("metadata_checked", (self.topics.version, group.group_epoch))
            log.info(
                "[GroupId %s] Classic members %s left; group epoch is now %d.",
                gid,
                [x.member_id for x in leaving],
                group.group_epoch,
            )
            self._after_member_removed(result, group, now_ms)
        result.response = m.LeaveGroupResponse(members=tuple(out))
        return result

    @staticmethod
    def _cancel_member_timers(gid: str, member_id: str) -> list[TimerOp]:
        return [
            CancelTimer((k, gid, member_id)) for k in (SESSION, REBALANCE, MIXED_JOIN, MIXED_SYNC)
        ]

    # ================================================================== upgrade and downgrade

    def _delete_empty_consumer_group(self, result: Result[Any], gid: str) -> None:
        group = self.groups[gid]
        for regex in sorted(group.resolved_regexes):
            self._emit(result, r.regex_tombstone(gid, regex))
        self._emit(result, r.target_assignment_epoch_tombstone(gid))
        self._emit(result, r.partition_metadata_tombstone(gid))
        self._emit(result, r.group_epoch_tombstone(gid))

    def _before_consumer_heartbeat(
        self, result: Result[Any], req: ConsumerGroupHeartbeat, now_ms: int
    ) -> None:
        group = self.classic_groups.get(req.group_id)
        if group is None:
            return
        gid = group.group_id
        if req.member_epoch != 0:
            raise GroupIdNotFoundError(f"Group {gid} is not a consumer group.")
        if not group.members:
            # An empty classic group is simply replaced (always allowed).
            for mid in list(group.pending_members):
                result.timers.append(CancelTimer((CLASSIC_PENDING, gid, mid)))
            result.timers += self._cancel_group_timers(gid)
            if group.durable is not None:
                self._emit(result, r.classic_group_tombstone(gid))
            else:
                del self.classic_groups[gid]
            return
        self._upgrade(result, group, now_ms)

    @staticmethod
    def _cancel_group_timers(gid: str) -> list[TimerOp]:
        return [
            CancelTimer((k, gid, "")) for k in (CLASSIC_JOIN, CLASSIC_INITIAL_JOIN, CLASSIC_SYNC)
        ]

    def _upgrade(self, result: Result[Any], group: ClassicGroup, now_ms: int) -> None:
        """Classic -> consumer group (KIP-848 "Online Migration"): every classic member becomes a
        member at epoch = generation owning what its last assignment gave it; no partition moves."""
        gid = group.group_id
        policy = self.config.consumer_migration_policy
        if policy not in _MIGRATION_UPGRADE:
            raise GroupIdNotFoundError(
                f"Cannot upgrade classic group {gid} to a consumer group: group.consumer.migration.policy is {policy}."
            )
        if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            raise GroupIdNotFoundError(
                f"Group {gid} is not a consumer group (protocol type {group.protocol_type})."
            )
        if len(group.members) > self.config.consumer_max_size:
            raise GroupIdNotFoundError(
                f"Cannot upgrade classic group {gid}: its {len(group.members)} members exceed group.consumer.max.size."
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
            except ProtocolError as e:
                raise InvalidRequestError(
                    f"Cannot upgrade classic group {gid}: member {x.member_id} has malformed embedded protocol bytes: {e}"
                ) from None
            decoded.append((x, sub, assignment))
        # Answer whatever waits at the classic barriers; their clients rejoin as members.
        for x in group.members.values():
            if x.join_token is not None:
                result.completions.append(
                    (
                        x.join_token,
                        m.JoinGroupResponse(
                            **_err(RebalanceInProgressError()), member_id=x.member_id
                        ),
                    )
                )
            if x.sync_token is not None:
                result.completions.append(
                    (x.sync_token, m.SyncGroupResponse(**_err(RebalanceInProgressError())))
                )
        for mid in list(group.pending_members):
            result.timers.append(CancelTimer((CLASSIC_PENDING, gid, mid)))
        result.timers += self._cancel_group_timers(gid)
        epoch = group.generation
        if group.durable is not None:
            self._emit(result, r.classic_group_tombstone(gid))
        else:
            del self.classic_groups[gid]
        taken: set[tuple[str, int]] = set()
        assigned = {
            x.member_id: self._topic_ids(a.assigned_partitions, taken) for x, _s, a in decoded
        }
        # A cooperative member may still own partitions its last assignment dropped (it is
        # revoking them; the leader held them back from everyone). They stay its own, pending
        # revocation, so they are not handed out before it lets go. Kafka takes only the
        # assignment here, and then an upgrade during a cooperative rebalance can give such a
        # partition to a new member while its owner still has it (found by the simulator).
        revoking = {
            x.member_id: self._topic_ids(sub.owned_partitions, taken) for x, sub, _a in decoded
        }
        members = []
        for x, sub, _assignment in decoded:
            owned = assigned[x.member_id]
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
                assigned_partitions=owned,
                partitions_pending_revocation=revoking[x.member_id],
            )
            members.append(member)
            self._emit(result, r.member_metadata_record(gid, member))
        cgroup = self.groups[gid]
        self._emit(result, r.partition_metadata_record(gid, self._subscription_metadata(cgroup)))
        self._emit(result, r.group_epoch_record(gid, epoch, self.ids.new_group_uid()))
        for x in members:
            self._emit(result, r.target_assignment_record(gid, x.member_id, x.assigned_partitions))
        self._emit(result, r.target_assignment_epoch_record(gid, epoch))
        for x in members:
            self._emit(result, r.current_assignment_record(gid, x))
        cgroup.set("metadata_checked", (self.topics.version, cgroup.group_epoch))
        for x, _s, _a in decoded:
            result.timers += [
                CancelTimer((CLASSIC_SESSION, gid, x.member_id)),
                ArmTimer((SESSION, gid, x.member_id), now_ms + x.session_timeout_ms),
            ]
        log.info(
            "[GroupId %s] Upgraded classic group (generation %d, %d members) to a consumer group.",
            gid,
            epoch,
            len(members),
        )

    def _after_member_removed(self, result: Result[Any], group: ConsumerGroup, now_ms: int) -> None:
        """Consumer -> classic group once only classic members remain (KIP-848 downgrade)."""
        if not group.members or any(
            x.classic_member_metadata is None for x in group.members.values()
        ):
            return
        if self.config.consumer_migration_policy not in _MIGRATION_DOWNGRADE:
            return
        if len(group.members) > self.config.classic_max_size:
            return
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
        generation = group.group_epoch
        for x in members:
            self._remove_member_records(result, gid, x.member_id)
            self.mixed_join_armed.discard((gid, x.member_id))
            result.timers += self._cancel_member_timers(gid, x.member_id)
        for regex in sorted(group.resolved_regexes):
            self._emit(result, r.regex_tombstone(gid, regex))
        self._emit(result, r.target_assignment_epoch_tombstone(gid))
        self._emit(result, r.partition_metadata_tombstone(gid))
        self._emit(result, r.group_epoch_tombstone(gid))
        classic = ClassicGroup(self.undo, gid)
        for x in members:
            c = x.classic_member_metadata
            assert c is not None
            classic.put_member(
                ClassicMember(
                    member_id=x.member_id,
                    group_instance_id=x.instance_id,
                    client_id=x.client_id,
                    client_host=x.client_host,
                    rebalance_timeout_ms=x.rebalance_timeout_ms,
                    session_timeout_ms=c.session_timeout_ms,
                    protocol_type=CONSUMER_PROTOCOL_TYPE,
                    protocols=c.supported_protocols,
                    assignment=self._encode_member_assignment(
                        _with(x, assigned_partitions=owned[x.member_id])
                    ),
                )
            )
        classic.protocol_type = CONSUMER_PROTOCOL_TYPE
        classic.generation = generation
        classic.protocol_name = classic.select_protocol()
        classic.state = S.STABLE
        classic.state_timestamp_ms = now_ms
        self.classic_groups[gid] = classic
        self._emit(result, r.classic_group_record(gid, classic.to_record_value()))
        for x in members:
            result.timers.append(
                ArmTimer(
                    (CLASSIC_SESSION, gid, x.member_id),
                    now_ms + x.classic_member_metadata.session_timeout_ms,
                )
            )  # type: ignore[union-attr]
        self._prepare_rebalance(result, classic, now_ms, "downgraded from a consumer group")
        log.info(
            "[GroupId %s] Downgraded consumer group (epoch %d) to a classic group.", gid, generation
        )

    # ================================================================== reads

    def describe_classic_groups(self, group_ids: Iterable[str]) -> list[m.DescribedGroup]:
        out = []
        for gid in group_ids:
            classic = self.classic_groups.get(gid)
            consumer = self.groups.get(gid)
            if classic is not None:
                stable = classic.state is S.STABLE
                out.append(
                    m.DescribedGroup(
                        group_id=gid,
                        group_state=classic.state.value,
                        protocol_type=classic.protocol_type or "",
                        protocol_data=(classic.protocol_name or "") if stable else "",
                        members=tuple(
                            m.DescribedMember(
                                member_id=x.member_id,
                                group_instance_id=x.group_instance_id,
                                client_id=x.client_id,
                                client_host=x.client_host,
                                member_metadata=x.metadata(classic.protocol_name)
                                if stable
                                else b"",
                                member_assignment=x.assignment if stable else b"",
                            )
                            for x in classic.members.values()
                        ),
                    )
                )
            elif consumer is not None:
                state = {
                    "Empty": "Empty",
                    "Assigning": "PreparingRebalance",
                    "Reconciling": "CompletingRebalance",
                    "Stable": "Stable",
                }[consumer.state().value]
                out.append(
                    m.DescribedGroup(
                        group_id=gid,
                        group_state=state,
                        protocol_type=CONSUMER_PROTOCOL_TYPE,
                        protocol_data=consumer.preferred_assignor(self.assignor_names),
                        members=tuple(
                            m.DescribedMember(
                                member_id=x.member_id,
                                group_instance_id=x.instance_id,
                                client_id=x.client_id,
                                client_host=x.client_host,
                                member_metadata=(
                                    x.classic_member_metadata.supported_protocols[0][1]
                                    if x.classic_member_metadata
                                    else _subscription_bytes(x)
                                ),
                                member_assignment=self._encode_member_assignment(x),
                            )
                            for x in (consumer.members[mid] for mid in sorted(consumer.members))
                        ),
                    )
                )
            else:
                error = GroupIdNotFoundError(f"Group {gid} not found.")
                out.append(m.DescribedGroup(group_id=gid, group_state="Dead", **_err(error)))
        return out

    def list_groups(self, states: Any = (), types: Any = ()) -> list[Any]:
        from coordinator.core.offsets import ListedGroup

        listed = [
            g for g in super().list_groups(states, types) if g.group_id not in self.classic_groups
        ]
        want_states = {s.lower() for s in states}
        want_types = {t.lower() for t in types}
        for gid, group in self.classic_groups.items():
            entry = ListedGroup(
                group_id=gid,
                protocol_type=group.protocol_type or "",
                group_state=group.state.value,
                group_type="classic",
            )
            if want_states and entry.group_state.lower() not in want_states:
                continue
            if want_types and "classic" not in want_types:
                continue
            listed.append(entry)
        return sorted(listed, key=lambda g: g.group_id)

    def offset_commit(self, req: Any, now_ms: int) -> Result[Any]:
        group = self.classic_groups.get(req.group_id)
        if group is None:
            return super().offset_commit(req, now_ms)
        generation = req.generation_id_or_member_epoch
        instance = getattr(req, "group_instance_id", None)
        if not (generation < 0 and not req.member_id and group.state is S.EMPTY):
            self._validate_classic_member(group, req.member_id, instance)
            if generation != group.generation:
                raise IllegalGenerationError(
                    f"The received generation id {generation} does not match the generation {group.generation}."
                )
            if group.state is S.COMPLETING_REBALANCE:
                raise RebalanceInProgressError()
        return self._run(self._offset_commit, req, now_ms)

    def snapshot(self) -> dict[str, Any]:
        snap = super().snapshot()
        snap["classic_groups"] = {
            gid: self.classic_groups[gid].durable
            for gid in sorted(self.classic_groups)
            if self.classic_groups[gid].durable is not None
        }
        return snap

    def records_of_state(self) -> list[r.Record]:
        out = [
            r.classic_group_record(gid, self.classic_groups[gid].durable)  # type: ignore[arg-type]
            for gid in sorted(self.classic_groups)
            if self.classic_groups[gid].durable is not None
        ]
        return out + super().records_of_state()


def _check_static_owner(
    static_members: Any, group_id: str, member_id: str, instance_id: str | None
) -> None:
    """A request naming an instance id must come from the member that owns it."""
    if instance_id is None:
        return
    owner = static_members.get(instance_id)
    if owner is None:
        raise UnknownMemberIdError(f"Instance id {instance_id} is unknown in group {group_id}.")
    if owner != member_id:
        raise FencedInstanceIdError(
            f"Static member {member_id} with instance id {instance_id} was fenced by member {owner}."
        )


def _leaving_member_id(static_members: Any, ident: m.LeaveMember) -> str:
    """The member a LeaveGroup entry names: by instance id (which must be known and, if a member
    id is given too, owned by it) or by member id."""
    if ident.group_instance_id is None:
        return ident.member_id
    owner = static_members.get(ident.group_instance_id)
    if owner is None:
        raise UnknownMemberIdError(f"Instance id {ident.group_instance_id} is unknown.")
    if ident.member_id and ident.member_id != owner:
        raise FencedInstanceIdError(
            f"Static member {ident.member_id} with instance id {ident.group_instance_id} was fenced by member {owner}."
        )
    return owner


def _fields(x: Any) -> dict[str, Any]:
    return {f: getattr(x, f) for f in x.__slots__}


def _with(member: ConsumerGroupMember, **changes: Any) -> ConsumerGroupMember:
    from dataclasses import replace

    return replace(member, **changes)


def _subscription_bytes(member: ConsumerGroupMember) -> bytes:
    from .protocol import encode_subscription

    return encode_subscription(
        Subscription(version=3, topics=member.subscribed_topic_names, rack_id=member.rack_id)
    )


def r_illegal(message: str) -> Exception:
    from coordinator.core.errors import IllegalStateError

    return IllegalStateError(message)
