"""A coordinator shard: the single-threaded state machine that owns a set of groups.

Entry points take a command and ``now_ms`` and return a :class:`Result`. A handler validates
(raising a typed :class:`CoordinatorError` before changing anything), then *emits* records: each
emitted record is appended to the result and immediately replayed through :meth:`replay` — the
only code that changes state, and the same code that loads a store. If the handler fails after
emitting, the shard rolls its state back to where the handler began, so an error never leaves a
trace. The runtime calls :meth:`mark` before a command, makes the records durable, and calls
:meth:`rollback` if the write fails or :meth:`release` once it is durable.

Timers are returned as operations (arm/cancel, keyed) and fire back in as
:meth:`on_timer` commands. The shard holds no clock, no IO, no randomness (ids come from an
injected :class:`IdSource`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from assignors.api import PartitionAssignor, TopicMetadata

from . import records as r
from .commands import (
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatResponse,
    HeartbeatAssignment,
    IdSource,
    Result,
)
from .config import GROUP_CONFIGS, ConfigError, GroupCoordinatorConfig, check_group_config
from .errors import (
    FencedInstanceIdError,
    FencedMemberEpochError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    IllegalStateError,
    InvalidConfigError,
    InvalidRequestError,
    UnknownMemberIdError,
    UnreleasedInstanceIdError,
    UnsupportedAssignorError,
)
from .group import ConsumerGroup, GroupState
from .model import (
    EMPTY_ASSIGNMENT,
    Assignment,
    ClassicMemberMetadata,
    ConsumerGroupMember,
    MemberState,
    TopicsImage,
    assignment_minus,
)
from .offsets import OffsetsMixin
from .reconciliation import compute_next_member
from .regex import compile_regex, resolve_regex
from .target_assignment import compute_target_assignment
from .timeline import TDict, UndoLog
from .timers import REBALANCE, SESSION, ArmTimer, CancelTimer, DueTimer, TimerOp

log = logging.getLogger("kip848.core")

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
SESSION_TIMEOUT_CONFIG = "consumer.session.timeout.ms"
HEARTBEAT_INTERVAL_CONFIG = "consumer.heartbeat.interval.ms"


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberDescription:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: Assignment
    target_assignment: Assignment
    member_type: int  # -1 unknown, 0 classic, 1 consumer
    state: str


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupDescription:
    group_id: str
    group_uid: str
    group_state: str
    group_epoch: int
    assignment_epoch: int
    assignor_name: str
    members: tuple[MemberDescription, ...]


class GroupCoordinatorShard(OffsetsMixin):
    def __init__(
        self,
        *,
        config: GroupCoordinatorConfig,
        assignors: Sequence[PartitionAssignor],
        ids: IdSource,
        topics: TopicsImage | None = None,
    ) -> None:
        if not assignors:
            raise ValueError("at least one assignor is required")
        self.config = config
        self.assignors: dict[str, PartitionAssignor] = {a.name: a for a in assignors}
        self.assignor_names: tuple[str, ...] = tuple(a.name for a in assignors)
        self.ids = ids
        self.topics = topics if topics is not None else TopicsImage()
        self.undo = UndoLog()
        self.groups: TDict = self.undo.new_dict()  # group id -> ConsumerGroup
        self.group_configs: TDict = self.undo.new_dict()  # group id -> {name: value}
        self.offsets: TDict = (
            self.undo.new_dict()
        )  # group id -> TDict((topic, partition) -> OffsetCommitValue)
        self._regex_cache: dict[str, tuple[int, frozenset[str]]] = {}  # soft, process-local

    # ------------------------------------------------------------------ transactions

    def mark(self) -> int:
        return self.undo.mark()

    def rollback(self, mark: int) -> None:
        self.undo.rollback(mark)

    def release(self, mark: int) -> None:
        self.undo.release(mark)

    def set_topics(self, image: TopicsImage) -> None:
        """A new topics image (metadata update). Groups notice on their next heartbeat."""
        self.topics = image

    # ------------------------------------------------------------------ replay

    def replay(self, record: r.Record) -> None:
        """Apply one record. The only place state changes."""
        key = record.key
        value = record.value
        t = key.TYPE
        if t == r.GroupConfigKey.TYPE:
            self._replay_group_config(key, value)  # type: ignore[arg-type]
            return
        if t == 1:
            self.replay_offset(key, value)  # type: ignore[arg-type]
            return
        if t == r.TopicKey.TYPE:
            raise IllegalStateError(
                "topic registry records belong to the topic registry, not a shard"
            )
        if t == r.GroupMetadataKey.TYPE:
            self.replay_classic_group(key, value)  # type: ignore[arg-type]
            return
        group_id = key.group_id  # type: ignore[union-attr]
        group = self.groups.get(group_id)
        if value is None:
            if group is None:
                return  # tombstone of something already gone
        elif group is None:
            group = ConsumerGroup(self.undo, group_id)
            self.groups[group_id] = group
        if t == 5:
            group.replay_member_metadata(key.member_id, value)  # type: ignore[union-attr,arg-type]
        elif t == 8:
            group.replay_current_assignment(key.member_id, value)  # type: ignore[union-attr,arg-type]
        elif t == 7:
            group.replay_target_member(key.member_id, value)  # type: ignore[union-attr,arg-type]
        elif t == 3:
            if value is None:
                group.check_deletable()
                del self.groups[group_id]
            else:
                group.set("group_epoch", value.epoch)  # type: ignore[attr-defined]
                group.set("group_uid", value.group_uid)  # type: ignore[attr-defined]
        elif t == 6:
            group.set("assignment_epoch", -1 if value is None else value.assignment_epoch)  # type: ignore[attr-defined]
        elif t == 4:
            metadata = {} if value is None else {m.name: m for m in value.topics}  # type: ignore[attr-defined]
            group.set("subscription_metadata", metadata)
        elif t == 16:
            group.replay_regex(key.regular_expression, value)  # type: ignore[union-attr,arg-type]
        else:
            raise IllegalStateError(f"unknown record type {t}")

    def replay_classic_group(
        self, key: r.GroupMetadataKey, value: r.GroupMetadataValue | None
    ) -> None:
        """Classic groups belong to the legacy bridge (``legacy_bridge.BridgedShard``)."""
        raise IllegalStateError(f"classic group record for {key.group_id} needs the legacy bridge")

    # Hooks of the legacy bridge (KIP-848 "Supporting Online Consumer Group Upgrade"); the plain
    # core has no classic groups, so they do nothing here.

    def _before_consumer_heartbeat(
        self, result: Result[Any], req: ConsumerGroupHeartbeat, now_ms: int
    ) -> None:
        """Before a ConsumerGroupHeartbeat: the bridge upgrades a classic group of that id."""

    def _after_member_removed(self, result: Result[Any], group: ConsumerGroup, now_ms: int) -> None:
        """After a member left or was fenced: the bridge may downgrade to a classic group."""

    def on_bridge_timer(self, timer: DueTimer, now_ms: int) -> Result[None]:
        raise IllegalStateError(f"unknown timer kind {timer.key[0]}")

    def _replay_group_config(self, key: r.GroupConfigKey, value: r.GroupConfigValue | None) -> None:
        configs = dict(self.group_configs.get(key.group_id, {}))
        if value is None:
            configs.pop(key.name, None)
        else:
            configs[key.name] = value.value
        if configs:
            self.group_configs[key.group_id] = configs
        else:
            self.group_configs.discard(key.group_id)

    def _emit(self, result: Result[Any], record: r.Record) -> None:
        result.records.append(record)
        self.replay(record)

    def _run(self, handler: Any, *args: Any) -> Result[Any]:
        """Run a handler; if it raises, undo whatever it had replayed."""
        mark = self.undo.mark()
        try:
            return handler(*args)
        except BaseException:
            self.undo.rollback(mark)
            raise

    # ------------------------------------------------------------------ configs

    def session_timeout_ms(self, group_id: str) -> int:
        value = self.group_configs.get(group_id, {}).get(SESSION_TIMEOUT_CONFIG)
        return int(value) if value is not None else self.config.consumer_session_timeout_ms

    def heartbeat_interval_ms(self, group_id: str) -> int:
        value = self.group_configs.get(group_id, {}).get(HEARTBEAT_INTERVAL_CONFIG)
        return int(value) if value is not None else self.config.consumer_heartbeat_interval_ms

    def alter_group_configs(self, group_id: str, changes: Mapping[str, str | None]) -> Result[None]:
        """Set (value) or delete (None) per-group dynamic configs. Validated as a whole before
        anything is written; takes effect on the group's next heartbeat. The group need not exist
        (KIP-848 "Dynamic Group Configuration")."""
        if not group_id.strip():
            raise InvalidRequestError("Group id can't be empty.")
        current = dict(self.group_configs.get(group_id, {}))
        for name, value in changes.items():
            if value is None:
                if name not in GROUP_CONFIGS:
                    raise InvalidConfigError(
                        f"unknown group config '{name}' (supported: {', '.join(GROUP_CONFIGS)})"
                    )
                current.pop(name, None)
            else:
                try:
                    current[name] = str(check_group_config(self.config, name, value))
                except ConfigError as exc:
                    raise InvalidConfigError(str(exc)) from None
        session = int(current.get(SESSION_TIMEOUT_CONFIG, self.config.consumer_session_timeout_ms))
        interval = int(
            current.get(HEARTBEAT_INTERVAL_CONFIG, self.config.consumer_heartbeat_interval_ms)
        )
        if interval >= session:
            raise InvalidConfigError(
                f"{HEARTBEAT_INTERVAL_CONFIG} ({interval}) must be less than {SESSION_TIMEOUT_CONFIG} ({session})."
            )
        return self._run(self._alter_group_configs, group_id, changes)

    def _alter_group_configs(
        self, group_id: str, changes: Mapping[str, str | None]
    ) -> Result[None]:
        result: Result[None] = Result()
        for name in sorted(changes):
            value = changes[name]
            self._emit(
                result,
                r.group_config_record(group_id, name, None if value is None else str(int(value))),
            )
        return result

    def group_config(self, group_id: str) -> dict[str, str]:
        """Effective per-group configs (overrides, else the broker defaults)."""
        overrides = self.group_configs.get(group_id, {})
        return {
            SESSION_TIMEOUT_CONFIG: overrides.get(
                SESSION_TIMEOUT_CONFIG, str(self.config.consumer_session_timeout_ms)
            ),
            HEARTBEAT_INTERVAL_CONFIG: overrides.get(
                HEARTBEAT_INTERVAL_CONFIG, str(self.config.consumer_heartbeat_interval_ms)
            ),
        }

    # ------------------------------------------------------------------ heartbeat

    def consumer_group_heartbeat(
        self, req: ConsumerGroupHeartbeat, now_ms: int
    ) -> Result[ConsumerGroupHeartbeatResponse]:
        """ConsumerGroupHeartbeat (KIP-848 "Request Handling"; Kafka 4.0 semantics)."""
        self.check_heartbeat_request(req)
        if req.member_epoch < 0:
            return self._run(self._leave, req, now_ms)
        return self._run(self._heartbeat, req, now_ms)

    def check_heartbeat_request(self, req: ConsumerGroupHeartbeat) -> None:
        """Request validation (KIP-848 "Request Validation", Kafka 4.0 relaxations)."""

        def invalid(message: str) -> InvalidRequestError:
            return InvalidRequestError(message)

        if not req.group_id.strip():
            raise invalid("GroupId can't be empty.")
        if req.instance_id is not None and not req.instance_id.strip():
            raise invalid("InstanceId can't be empty.")
        if req.rack_id is not None and not req.rack_id.strip():
            raise invalid("RackId can't be empty.")
        epoch = req.member_epoch
        if epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise invalid("MemberEpoch is invalid.")
        if epoch != 0 and not req.member_id.strip():
            raise invalid("MemberId can't be empty.")
        if req.member_id and not req.member_id.strip():
            raise invalid("MemberId can't be blank.")
        if req.rebalance_timeout_ms != -1 and req.rebalance_timeout_ms <= 0:
            raise invalid(
                f"RebalanceTimeoutMs must be larger than zero, got {req.rebalance_timeout_ms}."
            )
        if epoch == 0:
            if req.rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if req.topic_partitions is None or req.topic_partitions:
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                raise invalid(
                    "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
                )
        if epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH and req.instance_id is None:
            raise invalid("InstanceId can't be null.")
        if req.topic_partitions:
            for topic_id, partitions in req.topic_partitions.items():
                if any(p < 0 for p in partitions):
                    raise invalid(
                        f"TopicPartitions has a negative partition index for topic {topic_id}."
                    )
        if req.server_assignor is not None and req.server_assignor not in self.assignors:
            raise UnsupportedAssignorError(
                f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: "
                f"{', '.join(self.assignor_names)}."
            )
        if req.subscribed_topic_regex:
            compile_regex(
                req.subscribed_topic_regex
            )  # INVALID_REGULAR_EXPRESSION, before any change

    def _heartbeat(
        self, req: ConsumerGroupHeartbeat, now_ms: int, classic: ClassicMemberMetadata | None = None
    ) -> Result[ConsumerGroupHeartbeatResponse]:
        """``classic``: the member speaks the classic protocol (a JoinGroup translated by the
        legacy bridge); None for a ConsumerGroupHeartbeat."""
        result: Result[ConsumerGroupHeartbeatResponse] = Result()
        if classic is None:
            self._before_consumer_heartbeat(result, req, now_ms)
        group_id = req.group_id
        group: ConsumerGroup | None = self.groups.get(group_id)
        epoch = req.member_epoch
        owned = req.topic_partitions
        if group is None and epoch != 0:
            raise GroupIdNotFoundError(f"Consumer group {group_id} not found.")
        member_id = req.member_id or self.ids.new_member_id()

        # 1. Find or create the member, validating its epoch (KIP-848 "Fencing"). A full group
        # refuses any member id it does not know, except a static member taking its place back.
        if (
            group is not None
            and len(group.members) >= self.config.consumer_max_size
            and member_id not in group.members
            and (req.instance_id is None or req.instance_id not in group.static_members)
        ):
            raise GroupMaxSizeReachedError(
                f"The consumer group has reached its maximum capacity of {self.config.consumer_max_size} members."
            )
        member, replaced = self._find_or_create_member(group, member_id, req)
        before_assigned = member.assigned_partitions
        before_pending = (
            self._pending(group, member) if group is not None and replaced is None else None
        )
        if replaced is not None:
            self._replace_static_member(result, group, replaced, member)  # type: ignore[arg-type]
            result.timers += self._cancel_timers(group_id, replaced.member_id)

        # 2. Apply the request's "null means unchanged" fields.
        updated = self._updated_member(member, req, classic)
        is_new = group is None or member_id not in group.members
        bump = False
        if is_new or updated != member:
            self._emit(result, r.member_metadata_record(group_id, updated))
            bump = (
                updated.subscribed_topic_names != member.subscribed_topic_names
                or updated.subscribed_topic_regex != member.subscribed_topic_regex
                or updated.server_assignor_name != member.server_assignor_name
            )
        group = self.groups[group_id]
        new_group = group.group_uid == ""
        if (
            member.subscribed_topic_regex
            and member.subscribed_topic_regex != updated.subscribed_topic_regex
        ):
            self._maybe_drop_regex(result, group, member.subscribed_topic_regex)

        # 3. Refresh subscription metadata (and regexes) when needed; bump the group epoch.
        if bump or new_group or group.metadata_checked != (self.topics.version, group.group_epoch):
            bump = self._refresh_metadata(result, group, now_ms) or bump
            if bump or new_group:
                uid = group.group_uid or self.ids.new_group_uid()
                self._emit(
                    result,
                    r.group_epoch_record(group_id, group.group_epoch + (1 if bump else 0), uid),
                )
                if bump:
                    log.info("[GroupId %s] Bumped group epoch to %d.", group_id, group.group_epoch)
            group.set("metadata_checked", (self.topics.version, group.group_epoch))

        # 4. A new target assignment when the group epoch is ahead (KIP-848 "Assignment Epoch").
        if group.group_epoch > group.assignment_epoch:
            assignor = self.assignors[group.preferred_assignor(self.assignor_names)]
            for record in compute_target_assignment(group, group.group_epoch, assignor):
                self._emit(result, record)

        # 5. Reconcile the member toward its target (KIP-848 "Member Epoch").
        member = group.members[member_id]
        final = self._reconcile(result, group, member, owned, now_ms)

        # 6. Session timeout and response.
        session_ms = (
            classic.session_timeout_ms if classic is not None else self.session_timeout_ms(group_id)
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
        pending = self._pending(group, final)
        reported = group.reported_pending.get(member_id, before_pending)
        assignment = None
        if full or final.assigned_partitions != before_assigned or pending != reported:
            assignment = HeartbeatAssignment(assigned=final.assigned_partitions, pending=pending)
            if pending != reported or member_id not in group.reported_pending:
                group.reported_pending[member_id] = pending
        result.response = ConsumerGroupHeartbeatResponse(
            member_id=member_id,
            member_epoch=final.member_epoch,
            heartbeat_interval_ms=self.heartbeat_interval_ms(group_id),
            assignment=assignment,
        )
        return result

    def _find_or_create_member(
        self, group: ConsumerGroup | None, member_id: str, req: ConsumerGroupHeartbeat
    ) -> tuple[ConsumerGroupMember, ConsumerGroupMember | None]:
        """(member, replaced static member or None)."""
        epoch = req.member_epoch
        instance_id = req.instance_id
        existing = None if group is None else group.members.get(member_id)
        if instance_id is None or group is None:
            if existing is None:
                if epoch != 0:
                    raise UnknownMemberIdError(
                        f"Member {member_id} is not a member of group {req.group_id}."
                    )
                return ConsumerGroupMember(member_id=member_id), None
            self._check_member_epoch(existing, epoch, req.topic_partitions)
            return existing, None
        static_id = group.static_members.get(instance_id)
        static = None if static_id is None else group.members[static_id]
        if epoch == 0:
            if static is None:
                if existing is not None:
                    self._check_member_epoch(existing, epoch, req.topic_partitions)
                    return existing, None
                return ConsumerGroupMember(member_id=member_id), None
            if static.member_id == member_id:
                # The same incarnation re-joining (e.g. its join response was lost).
                self._check_member_epoch(static, epoch, req.topic_partitions)
                return static, None
            if static.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise UnreleasedInstanceIdError(
                    f"Static member {member_id} with instance id {instance_id} cannot join the group "
                    f"because the instance id is owned by {static.member_id} member."
                )
            if existing is not None:
                raise InvalidRequestError(
                    f"Member {member_id} is already in group {req.group_id}; it cannot take over "
                    f"instance id {instance_id}."
                )
            replacement = replace(
                static, member_id=member_id, member_epoch=0, previous_member_epoch=0
            )
            return replacement, static
        if static is None:
            raise UnknownMemberIdError(f"Instance id {instance_id} is unknown.")
        if static.member_id != member_id:
            raise FencedInstanceIdError(
                f"Static member {member_id} with instance id {instance_id} was fenced by member "
                f"{static.member_id}."
            )
        self._check_member_epoch(static, epoch, req.topic_partitions)
        return static, None

    @staticmethod
    def _check_member_epoch(
        member: ConsumerGroupMember, received: int, owned: Assignment | None
    ) -> None:
        current = member.member_epoch
        if received == 0 or received == current:
            return  # epoch 0: a known member re-joins after being fenced (KAFKA-19233).
        if received > current:
            raise FencedMemberEpochError(
                f"The consumer group member has a greater member epoch ({received}) than the one known "
                f"by the group coordinator ({current}). The member must abandon all its partitions and rejoin."
            )
        # Lost-response exception (KIP-848 "Request Handling" 3): the previous epoch is accepted
        # when everything the member owns is still assigned to it.
        if received != member.previous_member_epoch or not _is_subset(
            owned, member.assigned_partitions
        ):
            raise FencedMemberEpochError(
                f"The consumer group member has a smaller member epoch ({received}) than the one known "
                f"by the group coordinator ({current}). The member must abandon all its partitions and rejoin."
            )

    def _replace_static_member(
        self,
        result: Result[Any],
        group: ConsumerGroup,
        old: ConsumerGroupMember,
        new: ConsumerGroupMember,
    ) -> None:
        """A static member re-joins under a new member id: it takes over the old member's
        subscription and target, and its current partitions at epoch 0 (KIP-848 "Static Membership")."""
        gid = group.group_id
        old_target = group.target_of(old.member_id)
        self._remove_member_records(result, gid, old.member_id)
        self._emit(result, r.member_metadata_record(gid, new))
        self._emit(result, r.target_assignment_record(gid, new.member_id, old_target))
        self._emit(result, r.current_assignment_record(gid, new))
        log.info(
            "[GroupId %s] Static member with instance id %s re-joins as %s, replacing %s.",
            gid,
            new.instance_id,
            new.member_id,
            old.member_id,
        )

    @staticmethod
    def _updated_member(
        member: ConsumerGroupMember,
        req: ConsumerGroupHeartbeat,
        classic: ClassicMemberMetadata | None = None,
    ) -> ConsumerGroupMember:
        changes: dict[str, Any] = {}
        if req.instance_id is not None and req.instance_id != member.instance_id:
            changes["instance_id"] = req.instance_id
        if req.rack_id is not None and req.rack_id != member.rack_id:
            changes["rack_id"] = req.rack_id
        if (
            req.rebalance_timeout_ms != -1
            and req.rebalance_timeout_ms != member.rebalance_timeout_ms
        ):
            changes["rebalance_timeout_ms"] = req.rebalance_timeout_ms
        if req.server_assignor is not None and req.server_assignor != member.server_assignor_name:
            changes["server_assignor_name"] = req.server_assignor
        if req.subscribed_topic_names is not None:
            names = tuple(sorted(set(req.subscribed_topic_names)))
            if names != member.subscribed_topic_names:
                changes["subscribed_topic_names"] = names
        if req.subscribed_topic_regex is not None:
            regex = req.subscribed_topic_regex or None
            if regex != member.subscribed_topic_regex:
                changes["subscribed_topic_regex"] = regex
        if req.client_id != member.client_id:
            changes["client_id"] = req.client_id
        if req.client_host != member.client_host:
            changes["client_host"] = req.client_host
        if member.classic_member_metadata != classic:
            changes["classic_member_metadata"] = classic
        return replace(member, **changes) if changes else member

    def _refresh_metadata(self, result: Result[Any], group: ConsumerGroup, now_ms: int) -> bool:
        """Re-resolve regexes and recompute subscription metadata against the topics image.
        Returns True if the subscription metadata changed (a group epoch bump is due)."""
        gid = group.group_id
        image = self.topics
        for regex in sorted(group.regex_members):
            resolved = group.resolved_regexes.get(regex)
            topics = self._resolve(regex)
            if resolved is None or resolved[0] != topics:
                self._emit(result, r.regex_record(gid, regex, topics, image.version, now_ms))
        metadata = self._subscription_metadata(group)
        if metadata != group.subscription_metadata:
            self._emit(result, r.partition_metadata_record(gid, metadata))
            return True
        return False

    def _resolve(self, regex: str) -> frozenset[str]:
        """Resolve against the current image; cached per (regex, image version) in this process
        only (image versions restart with the process, so persisted versions are not trusted)."""
        cached = self._regex_cache.get(regex)
        if cached is not None and cached[0] == self.topics.version:
            return cached[1]
        topics = resolve_regex(regex, self.topics.by_name)
        if len(self._regex_cache) > 4096:
            self._regex_cache.clear()
        self._regex_cache[regex] = (self.topics.version, topics)
        return topics

    def _subscription_metadata(self, group: ConsumerGroup) -> dict[str, TopicMetadata]:
        by_name = self.topics.by_name
        out = {}
        for name in group.topic_subscribers:
            t = by_name.get(name)
            if t is not None:
                out[name] = TopicMetadata(
                    topic_id=t.topic_id, name=name, num_partitions=t.num_partitions
                )
        return out

    def _maybe_drop_regex(self, result: Result[Any], group: ConsumerGroup, regex: str) -> None:
        """The last member using a regex dropped it: delete its resolution."""
        if regex not in group.regex_members and regex in group.resolved_regexes:
            self._emit(result, r.regex_tombstone(group.group_id, regex))

    def _reconcile(
        self,
        result: Result[Any],
        group: ConsumerGroup,
        member: ConsumerGroupMember,
        owned: Assignment | None,
        now_ms: int,
    ) -> ConsumerGroupMember:
        epoch = group.assignment_epoch
        if member.is_reconciled_to(epoch):
            return member
        updated = compute_next_member(
            member, epoch, group.target_of(member.member_id), group.owner_of, owned
        )
        if updated is member:
            return member
        gid = group.group_id
        self._emit(result, r.current_assignment_record(gid, updated))
        key = (REBALANCE, gid, member.member_id)
        if updated.classic_member_metadata is None:
            if updated.state is MemberState.UNREVOKED_PARTITIONS:
                result.timers.append(
                    ArmTimer(key, now_ms + updated.rebalance_timeout_ms, updated.member_epoch)
                )
            else:
                result.timers.append(CancelTimer(key))
        return updated

    @staticmethod
    def _pending(group: ConsumerGroup | None, member: ConsumerGroupMember) -> Assignment:
        if group is None:
            return EMPTY_ASSIGNMENT
        return assignment_minus(group.target_of(member.member_id), member.assigned_partitions)

    # ------------------------------------------------------------------ leaving and fencing

    def _leave(
        self, req: ConsumerGroupHeartbeat, now_ms: int
    ) -> Result[ConsumerGroupHeartbeatResponse]:
        group = self.groups.get(req.group_id)
        if group is None:
            raise GroupIdNotFoundError(f"Consumer group {req.group_id} not found.")
        member_id, epoch = req.member_id, req.member_epoch
        if req.instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise UnknownMemberIdError(
                    f"Member {member_id} is not a member of group {req.group_id}."
                )
        else:
            static_id = group.static_members.get(req.instance_id)
            if static_id is None:
                raise UnknownMemberIdError(f"Instance id {req.instance_id} is unknown.")
            if static_id != member_id:
                raise FencedInstanceIdError(
                    f"Static member {member_id} with instance id {req.instance_id} was fenced by member "
                    f"{static_id}."
                )
            member = group.members[static_id]
            if epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                # Temporary leave: keep the member and its partitions for its session timeout.
                result: Result[ConsumerGroupHeartbeatResponse] = Result()
                leaving = replace(
                    member,
                    member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                    partitions_pending_revocation=EMPTY_ASSIGNMENT,
                )
                self._emit(result, r.current_assignment_record(group.group_id, leaving))
                result.response = ConsumerGroupHeartbeatResponse(
                    member_id=member_id,
                    member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                    heartbeat_interval_ms=0,
                )
                log.info(
                    "[GroupId %s] Static member %s temporarily left.", group.group_id, member_id
                )
                return result
        result = self._fence_member(group, member, now_ms, "left the group")
        result.response = ConsumerGroupHeartbeatResponse(
            member_id=member_id, member_epoch=LEAVE_GROUP_MEMBER_EPOCH, heartbeat_interval_ms=0
        )
        return result

    def _remove_member_records(self, result: Result[Any], group_id: str, member_id: str) -> None:
        self._emit(result, r.current_assignment_tombstone(group_id, member_id))
        self._emit(result, r.target_assignment_tombstone(group_id, member_id))
        self._emit(result, r.member_metadata_tombstone(group_id, member_id))

    def _fence_member(
        self, group: ConsumerGroup, member: ConsumerGroupMember, now_ms: int, why: str
    ) -> Result[Any]:
        """Remove a member: 3 tombstones, recomputed subscription metadata, group epoch + 1."""
        result: Result[Any] = Result()
        gid = group.group_id
        self._remove_member_records(result, gid, member.member_id)
        if member.subscribed_topic_regex:
            self._maybe_drop_regex(result, group, member.subscribed_topic_regex)
        metadata = self._subscription_metadata(group)
        if metadata != group.subscription_metadata:
            self._emit(result, r.partition_metadata_record(gid, metadata))
        self._emit(result, r.group_epoch_record(gid, group.group_epoch + 1, group.group_uid))
        group.set("metadata_checked", (self.topics.version, group.group_epoch))
        result.timers += self._cancel_timers(gid, member.member_id)
        log.info(
            "[GroupId %s] Member %s %s; group epoch is now %d.",
            gid,
            member.member_id,
            why,
            group.group_epoch,
        )
        self._after_member_removed(result, group, now_ms)
        return result

    @staticmethod
    def _cancel_timers(group_id: str, member_id: str) -> list[TimerOp]:
        return [
            CancelTimer((SESSION, group_id, member_id)),
            CancelTimer((REBALANCE, group_id, member_id)),
        ]

    # ------------------------------------------------------------------ timers

    def on_timer(self, timer: DueTimer, now_ms: int) -> Result[None]:
        """A session or rebalance timer fired. Stale timers (member gone, epoch moved on) do nothing."""
        kind, group_id, member_id = timer.key
        if kind != SESSION and kind != REBALANCE:
            return self.on_bridge_timer(timer, now_ms)
        group = self.groups.get(group_id)
        member = None if group is None else group.members.get(member_id)
        if member is None or group is None:
            return Result()
        if kind == SESSION:
            return self._run(self._fence_member, group, member, now_ms, "session timeout expired")
        if kind == REBALANCE:
            if member.member_epoch != timer.payload:
                return Result()
            return self._run(
                self._fence_member,
                group,
                member,
                now_ms,
                f"failed to revoke partitions from epoch {timer.payload} within its rebalance timeout",
            )
        raise IllegalStateError(f"unknown timer kind {kind}")

    def on_loaded(self, now_ms: int) -> list[TimerOp]:
        """After loading: session timers for every member, rebalance timers for members that
        were revoking (KIP-848 "Fail Over")."""
        ops: list[TimerOp] = []
        for group_id in sorted(self.groups):
            group = self.groups[group_id]
            session_ms = self.session_timeout_ms(group_id)
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

    def describe_group(self, group_id: str) -> GroupDescription:
        group = self.groups.get(group_id)
        if group is None:
            raise GroupIdNotFoundError(f"Group {group_id} not found.")
        members = []
        for member_id in sorted(group.members):
            m = group.members[member_id]
            members.append(
                MemberDescription(
                    member_id=m.member_id,
                    instance_id=m.instance_id,
                    rack_id=m.rack_id,
                    member_epoch=m.member_epoch,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    subscribed_topic_names=m.subscribed_topic_names,
                    subscribed_topic_regex=m.subscribed_topic_regex,
                    assignment=m.assigned_partitions,
                    target_assignment=group.target_of(member_id),
                    member_type=0 if m.classic_member_metadata is not None else 1,
                    state=m.state.name,
                )
            )
        return GroupDescription(
            group_id=group_id,
            group_uid=group.group_uid,
            group_state=group.state().value,
            group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=group.preferred_assignor(self.assignor_names),
            members=tuple(members),
        )

    def group_state(self, group_id: str) -> GroupState:
        group = self.groups.get(group_id)
        return GroupState.DEAD if group is None else group.state()

    def snapshot(self) -> dict[str, Any]:
        """Everything replay determines, canonical and comparable."""
        return {
            "groups": {gid: self.groups[gid].snapshot() for gid in sorted(self.groups)},
            "group_configs": {
                gid: dict(sorted(c.items())) for gid, c in sorted(self.group_configs.items())
            },
            "offsets": {
                gid: {f"{t}-{p}": v for (t, p), v in sorted(o.items())}
                for gid, o in sorted(self.offsets.items())
            },
        }

    def records_of_state(self) -> list[r.Record]:
        """The canonical record list that rebuilds the current state (a compacted log)."""
        out: list[r.Record] = []
        for gid in sorted(self.groups):
            g = self.groups[gid]
            for mid in sorted(g.members):
                out.append(r.member_metadata_record(gid, g.members[mid]))
            for regex in sorted(g.resolved_regexes):
                topics, version = g.resolved_regexes[regex]
                out.append(r.regex_record(gid, regex, topics, version, 0))
            out.append(r.partition_metadata_record(gid, dict(g.subscription_metadata)))
            out.append(r.group_epoch_record(gid, g.group_epoch, g.group_uid))
            for mid in sorted(g.target):
                out.append(r.target_assignment_record(gid, mid, g.target[mid]))
            out.append(r.target_assignment_epoch_record(gid, g.assignment_epoch))
            for mid in sorted(g.members):
                out.append(r.current_assignment_record(gid, g.members[mid]))
        for gid in sorted(self.group_configs):
            for name, value in sorted(self.group_configs[gid].items()):
                out.append(r.group_config_record(gid, name, value))
        for gid in sorted(self.offsets):
            for (topic, partition), value in sorted(self.offsets[gid].items()):
                out.append(r.offset_commit_record(gid, topic, partition, value))
        return out


def _is_subset(owned: Assignment | None, assigned: Mapping[str, frozenset[int]]) -> bool:
    if owned is None:
        return False
    for topic_id, partitions in owned.items():
        mine = assigned.get(topic_id)
        if mine is None:
            if partitions:
                return False
        elif not mine.issuperset(partitions):
            return False
    return True
