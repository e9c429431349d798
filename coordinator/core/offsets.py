"""Committed offsets and group administration (Kafka 4.0's OffsetMetadataManager semantics).

* OffsetCommit: a consumer-protocol member must send exactly its current member epoch
  (STALE_MEMBER_EPOCH for lower *or* higher), a classic member its generation
  (ILLEGAL_GENERATION); an unknown member gets UNKNOWN_MEMBER_ID. Epoch < 0 with no members is an
  admin/manual commit and is accepted; on a missing group it creates a "simple" group (offsets
  only). Epoch >= 0 on a missing group: GROUP_ID_NOT_FOUND. Metadata longer than
  ``offset.metadata.max.bytes``: OFFSET_METADATA_TOO_LARGE for that partition. A topic is named
  or given by id; it must exist (UNKNOWN_TOPIC_OR_PARTITION / UNKNOWN_TOPIC_ID).
* OffsetFetch: member id None + epoch < 0 → no checks; otherwise the member must exist and the
  epoch match. Unknown group → every partition answers -1 (Kafka does not fail the fetch).
* OffsetDelete: GROUP_ID_NOT_FOUND for an unknown group; GROUP_SUBSCRIBED_TO_TOPIC for topics
  the group subscribes to; otherwise a tombstone per existing offset.
* Expiry: offsets of topics the group no longer subscribes to expire ``offsets.retention.minutes``
  after their commit; an empty group whose offsets are all gone is deleted.
* Deleting a group (DeleteGroups, expiry) also deletes its group config overrides, in the same
  batch (Kafka).
* Offsets of a deleted topic are deleted with it (a re-created topic starts fresh).

Offsets are keyed by topic *name*, as in Kafka 4.0's records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import records as r
from .commands import Result
from .errors import (
    CoordinatorError,
    ErrorCode,
    GroupIdNotFoundError,
    IllegalGenerationError,
    InvalidRequestError,
    NonEmptyGroupError,
    StaleMemberEpochError,
    UnknownMemberIdError,
)
from .group import ConsumerGroup, GroupState
from .model import ZERO_TOPIC_ID

if TYPE_CHECKING:
    from .shard import GroupCoordinatorShard

NO_OFFSET = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitPartition:
    partition_index: int
    committed_offset: int
    committed_leader_epoch: int = -1
    committed_metadata: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitTopic:
    name: str = ""
    topic_id: str = ZERO_TOPIC_ID
    partitions: tuple[OffsetCommitPartition, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommit:
    group_id: str
    generation_id_or_member_epoch: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
    topics: tuple[OffsetCommitTopic, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionResult:
    partition_index: int
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicResult:
    name: str
    topic_id: str
    partitions: tuple[PartitionResult, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitResponse:
    topics: tuple[TopicResult, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetFetchTopic:
    name: str = ""
    topic_id: str = ZERO_TOPIC_ID
    partition_indexes: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetFetchGroup:
    group_id: str
    member_id: str | None = None
    member_epoch: int = -1
    topics: tuple[OffsetFetchTopic, ...] | None = None  # None = every committed offset


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchedPartition:
    partition_index: int
    committed_offset: int = NO_OFFSET
    committed_leader_epoch: int = -1
    metadata: str | None = ""
    error_code: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchedTopic:
    name: str
    topic_id: str
    partitions: tuple[FetchedPartition, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetFetchGroupResponse:
    group_id: str
    topics: tuple[FetchedTopic, ...] = ()
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetDeleteResponse:
    topics: tuple[TopicResult, ...] = field(default_factory=tuple)


@dataclass(frozen=True, slots=True, kw_only=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    group_state: str
    group_type: str


def commit_error_response(req: OffsetCommit, error: CoordinatorError) -> OffsetCommitResponse:
    """A group-level error repeated on every partition, as Kafka answers OffsetCommit."""
    return OffsetCommitResponse(
        topics=tuple(
            TopicResult(
                name=t.name,
                topic_id=t.topic_id,
                partitions=tuple(
                    PartitionResult(
                        partition_index=p.partition_index,
                        error_code=error.code,
                        error_message=error.message,
                    )
                    for p in t.partitions
                ),
            )
            for t in req.topics
        )
    )


def _validate_member(group: ConsumerGroup, member_id: str, epoch: int) -> None:
    member = group.members.get(member_id)
    if member is None:
        raise UnknownMemberIdError(f"Member {member_id} is not a member of group {group.group_id}.")
    if epoch != member.member_epoch:
        if member.classic_member_metadata is not None:
            raise IllegalGenerationError(
                f"The received generation id {epoch} does not match the expected member epoch {member.member_epoch}."
            )
        raise StaleMemberEpochError(
            f"The received member epoch {epoch} does not match the expected member epoch {member.member_epoch}."
        )


class OffsetsMixin:
    """Offset and group-administration handlers of :class:`GroupCoordinatorShard`."""

    def offset_commit(
        self: GroupCoordinatorShard, req: OffsetCommit, now_ms: int
    ) -> Result[OffsetCommitResponse]:
        if not req.group_id.strip():
            raise InvalidRequestError("GroupId can't be empty.")
        group = self.groups.get(req.group_id)
        epoch = req.generation_id_or_member_epoch
        if group is None:
            if epoch >= 0:
                if req.group_id not in self.offsets:
                    raise GroupIdNotFoundError(f"Group {req.group_id} not found.")
                # A simple group (offsets only) has no members: Kafka's ClassicGroup validates
                # the member of any commit with a generation >= 0.
                raise UnknownMemberIdError(
                    f"Member {req.member_id} is not a member of group {req.group_id}."
                )
        elif not (epoch < 0 and not group.members):
            _validate_member(group, req.member_id, epoch)
        return self._run(self._offset_commit, req, now_ms)

    def _offset_commit(
        self: GroupCoordinatorShard, req: OffsetCommit, now_ms: int
    ) -> Result[OffsetCommitResponse]:
        result: Result[OffsetCommitResponse] = Result()
        max_bytes = self.config.offset_metadata_max_bytes
        topics_out = []
        for t in req.topics:
            name, topic_id, topic_error = self._resolve_topic(t.name, t.topic_id)
            parts = []
            for p in t.partitions:
                error: ErrorCode = ErrorCode.NONE
                message = None
                if topic_error is not None:
                    error, message = topic_error
                elif not 0 <= p.partition_index < self.topics.by_name[name].num_partitions:
                    error, message = (
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        f"Partition {name}-{p.partition_index} does not exist.",
                    )
                elif (
                    p.committed_metadata is not None
                    and len(p.committed_metadata.encode()) > max_bytes
                ):
                    error = ErrorCode.OFFSET_METADATA_TOO_LARGE
                    message = (
                        f"Offset metadata is larger than offset.metadata.max.bytes ({max_bytes})."
                    )
                elif p.committed_offset < 0:
                    error, message = (
                        ErrorCode.INVALID_REQUEST,
                        f"Committed offset {p.committed_offset} is negative.",
                    )
                else:
                    value = r.OffsetCommitValue(
                        offset=p.committed_offset,
                        leader_epoch=p.committed_leader_epoch,
                        metadata=p.committed_metadata or "",
                        commit_timestamp_ms=now_ms,
                    )
                    self._emit(
                        result, r.offset_commit_record(req.group_id, name, p.partition_index, value)
                    )
                parts.append(
                    PartitionResult(
                        partition_index=p.partition_index, error_code=error, error_message=message
                    )
                )
            topics_out.append(
                TopicResult(name=name or t.name, topic_id=topic_id, partitions=tuple(parts))
            )
        result.response = OffsetCommitResponse(topics=tuple(topics_out))
        return result

    def _resolve_topic(
        self: GroupCoordinatorShard, name: str, topic_id: str
    ) -> tuple[str, str, tuple[ErrorCode, str] | None]:
        """(name, topic id, error) for a topic given by name or by id."""
        if not name and (not topic_id or topic_id == ZERO_TOPIC_ID):
            return (
                name,
                ZERO_TOPIC_ID,
                (ErrorCode.INVALID_REQUEST, "A topic needs a name or a topic id."),
            )
        if topic_id and topic_id != ZERO_TOPIC_ID:
            image = self.topics.by_id.get(topic_id)
            if image is None:
                return (
                    name,
                    topic_id,
                    (ErrorCode.UNKNOWN_TOPIC_ID, f"Topic id {topic_id} does not exist."),
                )
            if name and name != image.name:
                return (
                    name,
                    topic_id,
                    (
                        ErrorCode.INVALID_REQUEST,
                        f"Topic id {topic_id} is topic {image.name}, not {name}.",
                    ),
                )
            return image.name, topic_id, None
        image = self.topics.by_name.get(name)
        if image is None:
            return (
                name,
                ZERO_TOPIC_ID,
                (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist."),
            )
        return name, image.topic_id, None

    def offset_fetch(
        self: GroupCoordinatorShard, req: OffsetFetchGroup
    ) -> OffsetFetchGroupResponse:
        """A read: no records. Unknown groups answer -1 for everything asked."""
        group = self.groups.get(req.group_id)
        if group is not None and not (req.member_id is None and req.member_epoch < 0):
            try:
                _validate_member(group, req.member_id or "", req.member_epoch)
            except CoordinatorError as exc:
                return OffsetFetchGroupResponse(
                    group_id=req.group_id, error_code=exc.code, error_message=exc.message
                )
        stored = (
            self.offsets.get(req.group_id)
            if (group is not None or req.group_id in self.offsets)
            else None
        )
        stored = stored or {}
        topics_out = []
        if req.topics is None:
            by_topic: dict[str, list[tuple[int, r.OffsetCommitValue]]] = {}
            for (topic, partition), value in stored.items():
                by_topic.setdefault(topic, []).append((partition, value))
            for topic in sorted(by_topic):
                image = self.topics.by_name.get(topic)
                parts = tuple(
                    FetchedPartition(
                        partition_index=p,
                        committed_offset=v.offset,
                        committed_leader_epoch=v.leader_epoch,
                        metadata=v.metadata,
                    )
                    for p, v in sorted(by_topic[topic])
                )
                topics_out.append(
                    FetchedTopic(
                        name=topic,
                        topic_id=image.topic_id if image else ZERO_TOPIC_ID,
                        partitions=parts,
                    )
                )
        else:
            for t in req.topics:
                name, topic_id, error = self._resolve_topic(t.name, t.topic_id)
                parts = []
                for p in t.partition_indexes:
                    # An unknown name answers -1 like any offset never committed (Kafka); a bad
                    # address (unknown id, no name nor id, name and id disagree) is an error.
                    if error is not None and error[0] is not ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                        parts.append(FetchedPartition(partition_index=p, error_code=error[0]))
                        continue
                    v = stored.get((name, p))
                    if v is None:
                        parts.append(FetchedPartition(partition_index=p))
                    else:
                        parts.append(
                            FetchedPartition(
                                partition_index=p,
                                committed_offset=v.offset,
                                committed_leader_epoch=v.leader_epoch,
                                metadata=v.metadata,
                            )
                        )
                topics_out.append(
                    FetchedTopic(name=name, topic_id=topic_id, partitions=tuple(parts))
                )
        return OffsetFetchGroupResponse(group_id=req.group_id, topics=tuple(topics_out))

    def offset_delete(
        self: GroupCoordinatorShard, group_id: str, topics: Sequence[tuple[str, Sequence[int]]]
    ) -> Result[OffsetDeleteResponse]:
        group = self.groups.get(group_id)
        if group is None and group_id not in self.offsets:
            raise GroupIdNotFoundError(f"Group {group_id} not found.")
        return self._run(self._offset_delete, group, group_id, topics)

    def _offset_delete(
        self: GroupCoordinatorShard,
        group: ConsumerGroup | None,
        group_id: str,
        topics: Sequence[tuple[str, Sequence[int]]],
    ) -> Result[OffsetDeleteResponse]:
        result: Result[OffsetDeleteResponse] = Result()
        stored = self.offsets.get(group_id, {})
        out = []
        for name, partitions in topics:
            subscribed = group is not None and name in group.topic_subscribers
            parts = []
            for p in partitions:
                if subscribed:
                    parts.append(
                        PartitionResult(
                            partition_index=p,
                            error_code=ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC,
                            error_message=f"The group is subscribed to topic {name}.",
                        )
                    )
                    continue
                if (name, p) in stored:
                    self._emit(result, r.offset_commit_tombstone(group_id, name, p))
                parts.append(PartitionResult(partition_index=p))
            image = self.topics.by_name.get(name)
            out.append(
                TopicResult(
                    name=name,
                    topic_id=image.topic_id if image else ZERO_TOPIC_ID,
                    partitions=tuple(parts),
                )
            )
        result.response = OffsetDeleteResponse(topics=tuple(out))
        return result

    # ---------------------------------------------------------------- groups

    def delete_groups(
        self: GroupCoordinatorShard, group_ids: Sequence[str]
    ) -> Result[list[tuple[str, ErrorCode, str | None]]]:
        """DeleteGroups: per group NONE, GROUP_ID_NOT_FOUND or NON_EMPTY_GROUP."""
        result: Result[list[tuple[str, ErrorCode, str | None]]] = Result(response=[])
        for gid in group_ids:
            group = self.groups.get(gid)
            if group is None and gid not in self.offsets:
                result.response.append(
                    (gid, ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} not found.")
                )  # type: ignore[union-attr]
                continue
            if group is not None and group.members:
                exc = NonEmptyGroupError(
                    f"Group {gid} is not empty ({len(group.members)} members)."
                )
                result.response.append((gid, exc.code, exc.message))  # type: ignore[union-attr]
                continue
            sub = self._run(self._delete_group, gid)
            result.records += sub.records
            result.response.append((gid, ErrorCode.NONE, None))  # type: ignore[union-attr]
        return result

    def _delete_group(self: GroupCoordinatorShard, group_id: str) -> Result[None]:
        result: Result[None] = Result()
        for topic, partition in sorted(self.offsets.get(group_id, {})):
            self._emit(result, r.offset_commit_tombstone(group_id, topic, partition))
        group = self.groups.get(group_id)
        if group is not None:
            for regex in sorted(group.resolved_regexes):
                self._emit(result, r.regex_tombstone(group_id, regex))
            self._emit(result, r.target_assignment_epoch_tombstone(group_id))
            self._emit(result, r.partition_metadata_tombstone(group_id))
            self._emit(result, r.group_epoch_tombstone(group_id))
        # The group's dynamic config overrides go with it (Kafka); a group created again under
        # the same id starts from the broker defaults.
        for name in sorted(self.group_configs.get(group_id, {})):
            self._emit(result, r.group_config_record(group_id, name, None))
        return result

    def expire_offsets(self: GroupCoordinatorShard, now_ms: int) -> Result[None]:
        """The periodic cleanup (``offsets.retention.check.interval.ms``): expire offsets of
        topics a group no longer subscribes to, then delete empty groups with no offsets left."""
        return self._run(self._expire_offsets, now_ms)

    def _expire_offsets(self: GroupCoordinatorShard, now_ms: int) -> Result[None]:
        result: Result[None] = Result()
        retention_ms = self.config.offsets_retention_minutes * 60_000
        for gid in sorted(set(self.offsets) | set(self.groups)):
            group = self.groups.get(gid)
            all_expired = True
            for (topic, partition), value in sorted(self.offsets.get(gid, {}).items()):
                if group is not None and topic in group.topic_subscribers:
                    all_expired = False
                    continue
                expired = (
                    now_ms >= value.expire_timestamp_ms
                    if value.expire_timestamp_ms >= 0
                    else now_ms - value.commit_timestamp_ms >= retention_ms
                )
                if expired:
                    self._emit(result, r.offset_commit_tombstone(gid, topic, partition))
                else:
                    all_expired = False
            if all_expired and (group is None or group.state() is GroupState.EMPTY):
                # An empty group without offsets is deleted, and so is a simple group (offsets
                # only) whose last offsets expired: with its config overrides.
                sub = self._delete_group(gid)
                result.records += sub.records
        return result

    def on_topics_deleted(self: GroupCoordinatorShard, names: Sequence[str]) -> Result[None]:
        """Delete the committed offsets of deleted topics (Kafka's onPartitionsDeleted)."""
        return self._run(self._on_topics_deleted, set(names))

    def _on_topics_deleted(self: GroupCoordinatorShard, names: set[str]) -> Result[None]:
        result: Result[None] = Result()
        for gid in sorted(self.offsets):
            for topic, partition in sorted(self.offsets[gid]):
                if topic in names:
                    self._emit(result, r.offset_commit_tombstone(gid, topic, partition))
        return result

    def list_groups(
        self: GroupCoordinatorShard, states: Sequence[str] = (), types: Sequence[str] = ()
    ) -> list[ListedGroup]:
        """ListGroups with case-insensitive state and type filters (an unknown type matches nothing)."""
        want_states = {s.lower() for s in states}
        want_types = {t.lower() for t in types}
        out = []
        for gid in sorted(set(self.groups) | set(self.offsets)):
            group = self.groups.get(gid)
            if group is not None:
                entry = ListedGroup(
                    group_id=gid,
                    protocol_type="consumer",
                    group_state=group.state().value,
                    group_type="consumer",
                )
            else:  # a simple group: offsets only (Kafka: an empty classic group without protocol)
                entry = ListedGroup(
                    group_id=gid, protocol_type="", group_state="Empty", group_type="classic"
                )
            if want_states and entry.group_state.lower() not in want_states:
                continue
            if want_types and entry.group_type not in want_types:
                continue
            out.append(entry)
        return out

    def replay_offset(self: GroupCoordinatorShard, key: r.OffsetCommitKey, value: Any) -> None:
        offsets = self.offsets.get(key.group_id)
        if value is None:
            if offsets is None:
                return
            offsets.discard((key.topic, key.partition))
            if not offsets:
                del self.offsets[key.group_id]
            return
        if offsets is None:
            offsets = self.undo.new_dict()
            self.offsets[key.group_id] = offsets
        offsets[(key.topic, key.partition)] = value
