"""Classic groups: the shard's component for Kafka's classic group protocol (KIP-848 "Supporting
Online Consumer Group Upgrade"; Kafka 4.0 semantics).

The component owns the classic groups of its shard (a read-only mapping group id ->
:class:`~.classic_group.ClassicGroup`) and their GroupMetadata records, and implements what the
core asks of classic groups (:class:`~coordinator.core.components.ClassicGroupSupport`).

Requests (each takes ``now_ms`` and returns a core :class:`Result`): :meth:`join` (the join
phase of a classic group is :mod:`.classic_join`'s, composed here), :meth:`sync`,
:meth:`heartbeat`, :meth:`leave`; the read :meth:`describe`. Routing by group id: a classic group
-> Kafka's classic state machine (here); a non-empty consumer group -> the classic member is
translated into a heartbeat of the core (:mod:`.classic_members`; a static member that takes the
place of the last KIP-848 member downgrades the group: :mod:`.migration`); an empty consumer group is
deleted and replaced by a classic group (:mod:`.migration`). A JoinGroup or SyncGroup that must
wait at a barrier answers ``Pending(token)``; a later result (another member's request, a timer)
carries ``completions=[(token, response)]``. A request whose own barrier completes at once gets
its response directly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from coordinator.core import records as r
from coordinator.core.commands import (
    ConsumerGroupHeartbeat,
    ListedGroup,
    Pending,
    Result,
    WriteWatch,
)
from coordinator.core.components import ByGroupId
from coordinator.core.errors import (
    CoordinatorError,
    GroupIdNotFoundError,
    IllegalGenerationError,
    IllegalStateError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from coordinator.core.events import Event, LogEvent
from coordinator.core.group import ConsumerGroup
from coordinator.core.offsets import OffsetCommit
from coordinator.core.shard import ShardParts
from coordinator.core.timers import ArmTimer, CancelTimer, DueTimer, TimerOp

from . import messages as m
from .classic_group import (
    ClassicGroup,
    ClassicGroupState,
    ClassicMember,
    RebalanceCause,
    RemovalCause,
    record_size_error,
)
from .classic_join import ClassicJoins, join_response
from .classic_members import ClassicMembers
from .common import (
    CLASSIC_ASSIGNMENT_WRITE,
    CLASSIC_GROUP_TIMER_KINDS,
    CLASSIC_INITIAL_JOIN,
    CLASSIC_JOIN,
    CLASSIC_PENDING,
    CLASSIC_SESSION,
    CLASSIC_SYNC,
    MIXED_JOIN,
    MIXED_SYNC,
    JoinAnswer,
    SyncAnswer,
    check_join_request,
    check_static_owner,
    error_fields,
    leave_error,
    leaving_member_id,
)
from .migration import Migration
from .protocol import CONSUMER_PROTOCOL_TYPE, ProtocolError, decode_subscription

S = ClassicGroupState
_REMOVAL_STARTS = {
    RemovalCause.MEMBER_LEFT: RebalanceCause.MEMBER_LEFT,
    RemovalCause.MEMBER_FENCED_SESSION_TIMEOUT: RebalanceCause.MEMBER_FENCED_SESSION_TIMEOUT,
    RemovalCause.MEMBER_FENCED_REBALANCE_TIMEOUT: RebalanceCause.MEMBER_FENCED_REBALANCE_TIMEOUT,
    RemovalCause.STATIC_MEMBER_REPLACED: RebalanceCause.STATIC_MEMBER_RESTART,
}
"""The cause of the rebalance a removal from a stable group starts."""


class ClassicGroups(ByGroupId[ClassicGroup]):
    def __init__(self, parts: ShardParts) -> None:
        self._ctx = ctx = parts.context
        self._consumer = parts.groups
        self._offsets = parts.offsets
        self._by_group = ctx.undo.new_dict()  # group id -> ClassicGroup
        self.members = ClassicMembers(ctx, consumer=parts.groups)
        self.migration = Migration(ctx, consumer=parts.groups, classic=self, members=self.members)
        self.joins = ClassicJoins(ctx, consumer=parts.groups, classic=self)

    # ------------------------------------------------------------------ used by the bridge

    def add(self, group: ClassicGroup) -> None:
        self._by_group[group.group_id] = group

    def forget(self, group_id: str) -> None:
        """Drop a group that was never written (it has no record to tombstone)."""
        del self._by_group[group_id]

    def next_token(self) -> int:
        return self._ctx.next_token()

    # ================================================================== replay

    def replayers(self) -> dict[r.RecordType, Callable[[r.Record], None]]:
        return {r.RecordType.GROUP_METADATA: self._replay}

    def _replay(self, record: r.Record) -> None:
        key, value = r.typed(record, r.GroupMetadataKey, r.GroupMetadataValue)
        gid = key.group_id
        group = self._by_group.get(gid)
        if value is None:
            self._by_group.discard(gid)
            return
        if gid in self._consumer:
            raise IllegalStateError(
                f"classic group {gid} written while a consumer group of that id exists"
            )
        if group is None or group.to_record_value() != value:
            # Loading (or a record this group's state does not express): rebuild from the record.
            self._by_group[gid] = ClassicGroup.from_record(self._ctx.undo, gid, value)
        else:
            # Live: the handler built the record from this very group; keep the transient state.
            group.set("durable", value)
            if value.rebalance is not None and value.rebalance == group.rebalance.value():
                group.rebalance_recorded(value.rebalance)

    def weight(self, value: ClassicGroup) -> int:
        return 1 + len(value.members)

    def snapshot(self) -> dict[str, object]:
        return {
            "classic_groups": {
                gid: self._by_group[gid].durable
                for gid in sorted(self._by_group)
                if self._by_group[gid].durable is not None
            }
        }

    def records_of_state(self) -> list[r.Record]:
        out = []
        for gid in sorted(self._by_group):
            durable = self._by_group[gid].durable
            if durable is not None:
                out.append(r.classic_group_record(gid, durable))
        return out

    # ================================================================== what the core asks

    def prepare_consumer_group(
        self, result: Result[Any], req: ConsumerGroupHeartbeat, now_ms: int
    ) -> bool:
        return self.migration.prepare_consumer_group(result, req, now_ms)

    def maybe_downgrade(self, result: Result[Any], group: ConsumerGroup, now_ms: int) -> None:
        self.migration.maybe_downgrade(result, group, now_ms)

    def check_offset_commit(self, req: OffsetCommit, transactional: bool = False) -> None:
        """Kafka's ClassicGroup.validateOffsetCommit: a commit with generation < 0 to an empty
        group is an admin's (or a consumer's without group management): accepted; a member id,
        an instance id or a generation are validated (the member, its generation); a commit
        naming none of them to a group with members is refused, unless transactional — older
        TxnOffsetCommit versions carry no member — and, unless transactional, never while the
        group waits for its leader's assignment."""
        group = self._by_group[req.group_id]
        generation = req.generation_id_or_member_epoch
        if generation < 0 and group.state is S.EMPTY:
            return
        if generation >= 0 or req.member_id or req.group_instance_id is not None:
            self._validate_member(group, req.member_id, req.group_instance_id)
            if generation != group.generation:
                raise IllegalGenerationError(
                    f"The received generation id {generation} does not match the generation {group.generation}."
                )
        elif not transactional:
            raise UnknownMemberIdError(
                f"Group {group.group_id} has members: only they may commit offsets."
            )
        if group.state is S.COMPLETING_REBALANCE and not transactional:
            raise RebalanceInProgressError()

    def is_empty(self, group_id: str) -> bool:
        return self._by_group[group_id].state is S.EMPTY

    def subscribed_topics(self, group_id: str) -> frozenset[str]:
        """Kafka's ClassicGroup.isSubscribedToTopic: a group of the consumer protocol that is
        not Empty subscribes to what its members' subscriptions name."""
        group = self._by_group.get(group_id)
        if group is None or group.state is S.EMPTY or group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return frozenset()
        topics: set[str] = set()
        for x in group.members.values():
            metadata = (
                x.metadata(group.protocol_name) if group.protocol_name else b""
            ) or x.protocols[0][1]
            try:
                topics.update(decode_subscription(metadata).topics)
            except ProtocolError:
                continue  # unreadable metadata subscribes to nothing we could name
        return frozenset(topics)

    def delete_group(self, result: Result[Any], group_id: str) -> None:
        group = self._by_group.get(group_id)
        if group is None:
            return
        result.timers += [
            CancelTimer((CLASSIC_PENDING, group_id, mid)) for mid in group.pending_members
        ]
        result.timers += self.cancel_group_timers(group_id)
        if group.durable is not None:
            self._ctx.emit(result, r.classic_group_tombstone(group_id))
        else:
            self.forget(group_id)

    def listed(self) -> list[ListedGroup]:
        return [_listed(gid, group) for gid, group in self._by_group.items()]

    def listed_group(self, group_id: str) -> ListedGroup | None:
        group = self._by_group.get(group_id)
        return None if group is None else _listed(group_id, group)

    def member_count(self) -> int:
        return sum(len(group.members) for group in self._by_group.values())

    # ================================================================== helpers

    @staticmethod
    def finish(result: Result[Any], token: int) -> Result[Any]:
        """The response of a request that may wait: its own completion if it is already in
        ``result``, else ``Pending``."""
        for i, (t, response) in enumerate(result.completions):
            if t == token:
                del result.completions[i]
                result.response = response
                return result
        result.response = Pending(token)
        return result

    @staticmethod
    def cancel_group_timers(gid: str) -> list[TimerOp]:
        return [CancelTimer((k, gid, "")) for k in CLASSIC_GROUP_TIMER_KINDS]

    # ================================================================== JoinGroup

    def join(self, req: m.JoinGroup, now_ms: int) -> Result[JoinAnswer]:
        check_join_request(self._ctx.config, req)
        consumer = self._consumer.get(req.group_id)
        if consumer is not None and consumer.members:
            return self._ctx.run(self.migration.join_consumer_group, consumer, req, now_ms)
        return self._ctx.run(self.joins.join, req, now_ms)

    # ------------------------------------------------------------------ rebalance

    def maybe_prepare_rebalance(
        self,
        result: Result[Any],
        group: ClassicGroup,
        now_ms: int,
        reason: str,
        cause: RebalanceCause,
        client_reason: str | None,
    ) -> None:
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY):
            self.prepare_rebalance(result, group, now_ms, reason, cause, client_reason)

    def prepare_rebalance(
        self,
        result: Result[Any],
        group: ClassicGroup,
        now_ms: int,
        reason: str,
        cause: RebalanceCause,
        client_reason: str | None = None,
    ) -> None:
        """Start (or start over) a rebalance: ``reason`` is for the log, ``cause`` and the
        client's ``client_reason`` for the record that will complete it."""
        gid = group.group_id
        if group.state is S.COMPLETING_REBALANCE:
            # Sync requests that wait for the leader learn the generation is over.
            self._reset_pending_syncs(result, group, RebalanceInProgressError())
        for mid in list(group.pending_sync):
            del group.pending_sync[mid]
        result.timers.append(CancelTimer((CLASSIC_SYNC, gid, "")))
        if group.state is S.EMPTY:
            delay = self._ctx.config.classic_initial_rebalance_delay_ms
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
        group.note_preparing(now_ms, cause, client_reason)
        result.events.append(
            LogEvent(
                event=Event.CLASSIC_REBALANCE_PREPARED,
                group_id=gid,
                fields={"generation": group.generation, "reason": reason},
            )
        )

    def _reset_pending_syncs(
        self, result: Result[Any], group: ClassicGroup, error: CoordinatorError
    ) -> None:
        for x in list(group.members.values()):
            if x.sync_token is not None:
                result.completions.append(
                    (x.sync_token, m.SyncGroupResponse(**error_fields(error)))
                )
                group.put_member(replace(x, sync_token=None))

    def maybe_complete_join(self, result: Result[Any], group: ClassicGroup, now_ms: int) -> None:
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
                group.note_removal(
                    x.member_id, RemovalCause.MEMBER_FENCED_REBALANCE_TIMEOUT, now_ms
                )
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
            self._ctx.emit(result, r.classic_group_record(gid, group.to_record_value()))
            result.events.append(
                LogEvent(
                    event=Event.CLASSIC_GROUP_EMPTIED,
                    group_id=gid,
                    fields={"generation": group.generation},
                )
            )
            return
        group.set("protocol_name", group.select_protocol())
        group.transition(S.COMPLETING_REBALANCE, now_ms)
        for x in joined:
            token = x.join_token
            assert token is not None  # joined: waiting at the barrier
            result.completions.append((token, join_response(group, x)))
            group.put_member(replace(x, join_token=None, is_new=False))
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
        result.events.append(
            LogEvent(
                event=Event.CLASSIC_GENERATION_STABILIZED,
                group_id=gid,
                fields={
                    "generation": group.generation,
                    "members": len(group.members),
                    "leader_id": group.leader_id,
                    "protocol": group.protocol_name,
                },
            )
        )

    # ================================================================== SyncGroup

    def sync(self, req: m.SyncGroup, now_ms: int) -> Result[SyncAnswer]:
        consumer = self._consumer.get(req.group_id)
        if consumer is not None:
            return self._ctx.run(self.members.sync, consumer, req, now_ms)
        group, member = self._member_at(
            req.group_id, req.member_id, req.group_instance_id, req.generation_id
        )
        if _inconsistent(req.protocol_type, group.protocol_type) or _inconsistent(
            req.protocol_name, group.protocol_name
        ):
            raise InconsistentGroupProtocolError(
                "ProtocolType or ProtocolName does not match the group's."
            )
        if group.state is S.EMPTY:
            raise UnknownMemberIdError(f"Group {group.group_id} is empty.")
        if group.state is S.PREPARING_REBALANCE:
            raise RebalanceInProgressError()
        return self._ctx.run(self._sync, group, member, req, now_ms)

    def _sync(
        self, group: ClassicGroup, member: ClassicMember, req: m.SyncGroup, now_ms: int
    ) -> Result[SyncAnswer]:
        result: Result[SyncAnswer] = Result()
        gid = group.group_id
        group.pending_sync.discard(member.member_id)
        result.timers.append(
            ArmTimer((CLASSIC_SESSION, gid, member.member_id), now_ms + member.session_timeout_ms)
        )
        if group.state is S.STABLE:
            result.response = self._sync_response(group, member)
            return result
        if member.sync_token is not None:
            # Its earlier SyncGroup still waits: answered now, never left waiting (Kafka
            # replaces the waiting future and never completes the old one).
            superseded = RebalanceInProgressError(
                "A newer SyncGroup of this member superseded this one."
            )
            result.completions.append(
                (member.sync_token, m.SyncGroupResponse(**error_fields(superseded)))
            )
        token = self.next_token()
        group.put_member(replace(member, sync_token=token))
        if member.member_id == group.leader_id:
            assignments = dict(req.assignments)
            for x in list(group.members.values()):
                group.put_member(replace(x, assignment=assignments.get(x.member_id, b"")))
            too_large = record_size_error(
                gid, group.to_record_value(), self._ctx.config.message_max_bytes
            )
            if too_large is not None:
                # Kafka's append of the record fails (MESSAGE_TOO_LARGE): as a failed write.
                self._fail_assignment(result, group, too_large, now_ms)
                return self.finish(result, token)
            group.transition(S.STABLE, now_ms)
            self._ctx.emit(result, r.classic_group_record(gid, group.to_record_value()))
            # Stable at once (the members' answers wait for the record to be durable); should
            # the write fail or time out, the group is reset (_assignment_not_stored).
            group.set("assignment_write", token)
            result.write_watches.append(
                WriteWatch(CLASSIC_ASSIGNMENT_WRITE, gid, (group.generation, token))
            )
            for x in list(group.members.values()):
                if x.sync_token is not None:
                    result.completions.append((x.sync_token, self._sync_response(group, x)))
                    group.put_member(replace(x, sync_token=None))
            if not group.pending_sync:
                result.timers.append(CancelTimer((CLASSIC_SYNC, gid, "")))
        return self.finish(result, token)

    def write_error_handlers(
        self,
    ) -> dict[str, Callable[[WriteWatch, CoordinatorError, int], Result[None]]]:
        return {CLASSIC_ASSIGNMENT_WRITE: self._assignment_not_stored}

    def _assignment_not_stored(
        self, watch: WriteWatch, error: CoordinatorError, now_ms: int
    ) -> Result[None]:
        group = self._by_group.get(watch.group_id)
        if group is None:
            return Result()
        return self._ctx.run(self._reset_assignment, group, watch, error, now_ms)

    def _reset_assignment(
        self, group: ClassicGroup, watch: WriteWatch, error: CoordinatorError, now_ms: int
    ) -> Result[None]:
        """The write of a leader's SyncGroup (its generation's assignment) failed or was not
        durable within the write timeout, as Kafka's SyncGroup append future failing: if the
        group still is where that SyncGroup left it — the same generation, Stable with that
        assignment (a timed-out write) or back in CompletingRebalance (a failed one, rolled
        back) — every member's assignment is emptied, the members waiting in SyncGroup get
        ``error`` (what the write's own requests got: COORDINATOR_NOT_AVAILABLE, as Kafka's
        ``appendGroupMetadataErrorToResponseError`` maps REQUEST_TIMED_OUT) and a new
        rebalance starts. No record: a write that lands later stands, and the next generation's
        record comes after it. Otherwise the group moved on, and nothing changes."""
        result: Result[None] = Result()
        generation, token = watch.payload
        if group.generation != generation or not (
            group.state is S.COMPLETING_REBALANCE
            or (group.state is S.STABLE and group.assignment_write == token)
        ):
            return result
        self._fail_assignment(result, group, error, now_ms)
        return result

    def _fail_assignment(
        self, result: Result[Any], group: ClassicGroup, error: CoordinatorError, now_ms: int
    ) -> None:
        """Kafka's resetAndPropagateAssignmentWithError, then a rebalance: the members waiting
        in SyncGroup get ``error`` (their session restarts), every assignment is emptied."""
        gid = group.group_id
        generation = group.generation
        for x in list(group.members.values()):
            if x.sync_token is not None:
                result.completions.append(
                    (x.sync_token, m.SyncGroupResponse(**error_fields(error)))
                )
                result.timers.append(
                    ArmTimer((CLASSIC_SESSION, gid, x.member_id), now_ms + x.session_timeout_ms)
                )
            group.put_member(replace(x, assignment=b"", sync_token=None))
        self.prepare_rebalance(
            result,
            group,
            now_ms,
            f"error {error.code.name} when storing the assignment of generation {generation}"
            f" from leader {group.leader_id}",
            RebalanceCause.ASSIGNMENT_NOT_STORED,
        )

    @staticmethod
    def _sync_response(group: ClassicGroup, member: ClassicMember) -> m.SyncGroupResponse:
        return m.SyncGroupResponse(
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            assignment=member.assignment,
        )

    def _member_at(
        self, group_id: str, member_id: str, instance_id: str | None, generation: int
    ) -> tuple[ClassicGroup, ClassicMember]:
        """The group and the member a SyncGroup or Heartbeat comes from, at its generation."""
        group = self._by_group.get(group_id)
        if group is None:
            raise UnknownMemberIdError(f"Group {group_id} not found.")
        member = self._validate_member(group, member_id, instance_id)
        if generation != group.generation:
            raise IllegalGenerationError(
                f"The received generation id {generation} does not match the generation {group.generation} of group {group_id}."
            )
        return group, member

    @staticmethod
    def _validate_member(
        group: ClassicGroup, member_id: str, instance_id: str | None
    ) -> ClassicMember:
        check_static_owner(group.static_members, group.group_id, member_id, instance_id)
        member: ClassicMember | None = group.members.get(member_id)
        if member is None:
            raise UnknownMemberIdError(
                f"Member {member_id} is not a member of group {group.group_id}."
            )
        return member

    # ================================================================== Heartbeat

    def heartbeat(self, req: m.Heartbeat, now_ms: int) -> Result[m.HeartbeatResponse]:
        consumer = self._consumer.get(req.group_id)
        if consumer is not None:
            return self._ctx.run(self.members.heartbeat, consumer, req, now_ms)
        group, member = self._member_at(
            req.group_id, req.member_id, req.group_instance_id, req.generation_id
        )
        if group.state is S.EMPTY:
            raise UnknownMemberIdError(f"Group {group.group_id} is empty.")
        result: Result[m.HeartbeatResponse] = Result()
        result.timers.append(
            ArmTimer(
                (CLASSIC_SESSION, group.group_id, member.member_id),
                now_ms + member.session_timeout_ms,
            )
        )
        if group.state is S.PREPARING_REBALANCE:
            result.response = m.HeartbeatResponse(**error_fields(RebalanceInProgressError()))
        else:
            result.response = m.HeartbeatResponse()
        return result

    # ================================================================== LeaveGroup

    def leave(self, req: m.LeaveGroup, now_ms: int) -> Result[m.LeaveGroupResponse]:
        if not req.group_id.strip():
            raise InvalidGroupIdError(f"Group id '{req.group_id}' is invalid.")
        consumer = self._consumer.get(req.group_id)
        if consumer is not None:
            return self._ctx.run(self.members.leave, consumer, req, now_ms)
        group = self._by_group.get(req.group_id)
        if group is None:
            # As Kafka's GroupCoordinatorService.leaveGroup: "Group was not found" is each
            # member's UNKNOWN_MEMBER_ID, with no top-level error.
            missing = UnknownMemberIdError(f"Group {req.group_id} not found.")
            out = tuple(leave_error(ident, missing) for ident in req.members)
            return Result(response=m.LeaveGroupResponse(members=out))
        return self._ctx.run(self._leave, group, req, now_ms)

    def _leave(
        self, group: ClassicGroup, req: m.LeaveGroup, now_ms: int
    ) -> Result[m.LeaveGroupResponse]:
        result: Result[m.LeaveGroupResponse] = Result()
        gid = group.group_id
        out = []
        for ident in req.members:
            try:
                member_id = leaving_member_id(group.static_members, ident)
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
                out.append(leave_error(ident, e))
                continue
            self._remove_member(
                result,
                group,
                member_id,
                now_ms,
                f"member {member_id} left",
                RemovalCause.MEMBER_LEFT,
                ident.reason,
            )
            out.append(
                m.LeaveMemberResponse(
                    member_id=ident.member_id, group_instance_id=ident.group_instance_id
                )
            )
        result.response = m.LeaveGroupResponse(members=tuple(out))
        return result

    def _remove_member(
        self,
        result: Result[Any],
        group: ClassicGroup,
        member_id: str,
        now_ms: int,
        why: str,
        cause: RemovalCause,
        client_reason: str | None = None,
    ) -> None:
        gid = group.group_id
        member = group.members[member_id]
        error = UnknownMemberIdError(f"Member {member_id} was removed from group {gid}: {why}.")
        if member.join_token is not None:
            # Kafka answers the JoinGroup of a member it removes without a member id.
            result.completions.append(
                (member.join_token, m.JoinGroupResponse(**error_fields(error), member_id=""))
            )
        if member.sync_token is not None:
            result.completions.append(
                (member.sync_token, m.SyncGroupResponse(**error_fields(error)))
            )
        group.remove_member(member_id)
        group.note_removal(member_id, cause, now_ms)
        result.timers.append(CancelTimer((CLASSIC_SESSION, gid, member_id)))
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
            self.prepare_rebalance(
                result, group, now_ms, why, _REMOVAL_STARTS[cause], client_reason
            )
        self.maybe_complete_join(result, group, now_ms)

    # ================================================================== timers

    def timer_handlers(self) -> dict[str, Callable[[DueTimer, int], Result[None]]]:
        handlers: dict[str, Callable[[DueTimer, int], Result[None]]] = dict.fromkeys(
            (CLASSIC_SESSION, CLASSIC_PENDING, *CLASSIC_GROUP_TIMER_KINDS), self._on_timer
        )
        handlers[MIXED_JOIN] = self.members.on_timer
        handlers[MIXED_SYNC] = self.members.on_timer
        return handlers

    def _on_timer(self, timer: DueTimer, now_ms: int) -> Result[None]:
        group = self._by_group.get(timer.key[1])
        if group is None:
            return Result()
        return self._ctx.run(self._on_group_timer, group, timer, now_ms)

    def _on_group_timer(self, group: ClassicGroup, timer: DueTimer, now_ms: int) -> Result[None]:
        kind, gid, mid = timer.key
        result: Result[None] = Result()
        if kind == CLASSIC_SESSION:
            member = group.members.get(mid)
            if member is None:
                return result
            if not member.is_new and (
                member.join_token is not None or member.sync_token is not None
            ):
                # Waiting at a barrier counts as a heartbeat (Kafka's hasSatisfiedHeartbeat),
                # except for a new member: it is removed at the new-member join timeout.
                result.timers.append(ArmTimer(timer.key, now_ms + member.session_timeout_ms))
                return result
            self._remove_member(
                result,
                group,
                mid,
                now_ms,
                "session timeout expired",
                RemovalCause.MEMBER_FENCED_SESSION_TIMEOUT,
            )
        elif kind == CLASSIC_PENDING:
            if mid in group.pending_members:
                del group.pending_members[mid]
                self.maybe_complete_join(result, group, now_ms)
                self._drop_if_unused(group)
        elif kind == CLASSIC_INITIAL_JOIN:
            if group.state is not S.PREPARING_REBALANCE:
                return result
            if group.new_member_added and timer.payload > 0:
                # KIP-134: members keep arriving; wait again (bounded by the rebalance timeout).
                delay = min(self._ctx.config.classic_initial_rebalance_delay_ms, timer.payload)
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
                        self._remove_member(
                            result,
                            group,
                            member_id,
                            now_ms,
                            "did not send SyncGroup in time",
                            RemovalCause.MEMBER_FENCED_REBALANCE_TIMEOUT,
                        )
        else:
            raise IllegalStateError(f"unknown timer kind {kind}")
        return result

    def _drop_if_unused(self, group: ClassicGroup) -> None:
        """A group that never got a member nor a record disappears."""
        if (
            not group.members
            and not group.pending_members
            and group.durable is None
            and group.state is S.EMPTY
        ):
            del self._by_group[group.group_id]

    def on_loaded(self, now_ms: int) -> list[TimerOp]:
        ops: list[TimerOp] = []
        for gid in sorted(self._by_group):
            for x in self._by_group[gid].members.values():
                ops.append(
                    ArmTimer((CLASSIC_SESSION, gid, x.member_id), now_ms + x.session_timeout_ms)
                )
        return ops

    # ================================================================== reads

    def describe(self, group_ids: Iterable[str]) -> list[m.DescribedGroup]:
        """DescribeGroups as Kafka's describeGroups: classic groups, and simple groups (offsets
        only: Kafka's are empty classic groups); any other group id is GROUP_ID_NOT_FOUND."""
        out = []
        for gid in group_ids:
            classic = self._by_group.get(gid)
            if classic is not None:
                stable = classic.state is S.STABLE
                out.append(
                    m.DescribedGroup(
                        group_id=gid,
                        group_state=classic.state.value,
                        protocol_type=classic.protocol_type or "",
                        protocol_data=(classic.protocol_name or "") if stable else "",
                        generation_id=classic.generation,
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
            elif gid in self._consumer:
                # Kafka's classicGroup lookup: a consumer group (also one with classic members,
                # or empty) is not a classic group.
                error = GroupIdNotFoundError(f"Group {gid} is not a classic group.")
                out.append(
                    m.DescribedGroup(group_id=gid, group_state="Dead", **error_fields(error))
                )
            elif gid in self._offsets.simple_groups():
                # Offsets only: Kafka's is an empty classic group without a protocol.
                out.append(
                    m.DescribedGroup(group_id=gid, group_state=S.EMPTY.value, generation_id=0)
                )
            else:
                error = GroupIdNotFoundError(f"Group {gid} not found.")
                out.append(
                    m.DescribedGroup(group_id=gid, group_state="Dead", **error_fields(error))
                )
        return out


def _inconsistent(asked: str | None, held: str | None) -> bool:
    """Kafka's isProtocolInconsistent: both named, and different (SyncGroup v5+ names them; a
    group that never completed a join has no protocol name yet)."""
    return asked is not None and held is not None and asked != held


def _listed(group_id: str, group: ClassicGroup) -> ListedGroup:
    return ListedGroup(
        group_id=group_id,
        protocol_type=group.protocol_type or "",
        group_state=group.state.value,
        group_type="classic",
    )
