"""Committed offsets (Kafka 4.0's OffsetMetadataManager): a component of the shard.

* OffsetCommit: a consumer-protocol member sends its current member epoch, or an older one
  when every partition it commits is one it owns (assigned or pending revocation) since that
  epoch or before (Kafka 4.3, KIP-1251: assignment epoch <= epoch <= member epoch; else
  STALE_MEMBER_EPOCH for the whole commit, also for a newer epoch); a classic member sends its
  generation (ILLEGAL_GENERATION); an unknown member gets UNKNOWN_MEMBER_ID. Epoch < 0 with no members is an
  admin/manual commit and is accepted; on a missing group it creates a "simple" group (offsets
  only). Epoch >= 0 on a missing group: GROUP_ID_NOT_FOUND (OffsetCommit v8 or older:
  ILLEGAL_GENERATION, as Kafka). Metadata longer than ``offset.metadata.max.bytes`` (in
  UTF-16 code units, Java's string length, as Kafka): OFFSET_METADATA_TOO_LARGE for that
  partition. A topic is named
  or given by id; it must exist (UNKNOWN_TOPIC_OR_PARTITION / UNKNOWN_TOPIC_ID).
* OffsetFetch: member id None + epoch < 0 → no checks; otherwise the member must exist and the
  epoch match. Unknown group → every partition answers -1 (Kafka does not fail the fetch).
* OffsetDelete: GROUP_ID_NOT_FOUND for an unknown group; NON_EMPTY_GROUP for a classic group
  with members of another protocol type than "consumer"; GROUP_SUBSCRIBED_TO_TOPIC for topics
  the group subscribes to (a classic group: what its members' subscriptions name, unless it is
  Empty); otherwise a tombstone per existing offset.
* Expiry: offsets of topics the group no longer subscribes to expire ``offsets.retention.minutes``
  after their commit, or at commit time + the RetentionTimeMs of an OffsetCommit v2-v4 that
  gave one (Kafka's expireTimestampMs); an empty group whose offsets are all gone is deleted.
* Offsets of a deleted topic are deleted with it (a re-created topic starts fresh).

Offsets are keyed by topic *name*, as in Kafka 4.0's records. The component is a read-only
mapping group id -> {(topic, partition): OffsetCommitValue}; a group id known only through its
offsets is a "simple" group. Member validation asks the group's owner: the consumer groups, or
the classic groups (:meth:`~.components.ClassicGroupSupport.check_offset_commit`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import records as r
from .commands import ListedGroup, Result
from .components import ByGroupId
from .context import ShardContext
from .errors import (
    CoordinatorError,
    ErrorCode,
    GroupIdNotFoundError,
    IllegalGenerationError,
    IllegalStateError,
    InvalidRequestError,
    NonEmptyGroupError,
    StaleMemberEpochError,
    UnknownMemberIdError,
    UnsupportedVersionError,
)
from .events import Event, LogEvent
from .group import ConsumerGroup
from .model import ZERO_TOPIC_ID, epoch_of
from .offset_requests import OffsetCommit, OffsetCommitPartition, OffsetCommitTopic
from .transactions import AddOffsetsToTxn, TransactionalOffsets

if TYPE_CHECKING:
    from .components import ClassicGroupSupport

NO_OFFSET = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnOffsetCommit:
    """TxnOffsetCommit: offsets committed in a producer's transaction (pending until it ends)."""

    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    generation_id: int = -1
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
    require_stable: bool = False
    """KIP-447: partitions with pending transactional offsets answer UNSTABLE_OFFSET_COMMIT
    (else their committed offset, the pending ones invisible)."""


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


def commit_error_response(
    req: OffsetCommit | TxnOffsetCommit, error: CoordinatorError
) -> OffsetCommitResponse:
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
    """OffsetFetch: the member and its exact epoch (generation for a classic member)."""
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


def _anonymous_txn(req: TxnOffsetCommit) -> bool:
    """Kafka's ConsumerGroup.validateOffsetCommit: a TxnOffsetCommit naming no member, no
    generation (-1) and no instance — what versions before KIP-447's v3 send — is not
    validated against the members."""
    return req.generation_id == -1 and not req.member_id and req.group_instance_id is None


def check_commit_epoch(
    group: ConsumerGroup, member_id: str, epoch: int, partitions: Iterable[tuple[str, int]]
) -> None:
    """Kafka 4.3's ConsumerGroup.validateOffsetCommit with its per-partition validator
    (KIP-1251): a classic member must send its generation (ILLEGAL_GENERATION); a
    consumer-protocol member its member epoch, or an older one if every partition it commits
    (``partitions``: topic id, partition) is one it owns — assigned or pending revocation —
    since that epoch or before (assignment epoch <= epoch <= member epoch). Anything else:
    STALE_MEMBER_EPOCH, for the whole commit."""
    member = group.members.get(member_id)
    if member is None:
        raise UnknownMemberIdError(f"Member {member_id} is not a member of group {group.group_id}.")
    current = member.member_epoch
    if epoch == current:
        return
    if member.classic_member_metadata is not None:
        raise IllegalGenerationError(
            f"The received generation id {epoch} does not match the expected member epoch {current}."
        )
    if epoch > current:
        raise StaleMemberEpochError(
            f"The received member epoch {epoch} is newer than the current member epoch {current}."
        )
    epochs = member.assignment_epochs
    for topic_id, partition in partitions:
        assigned_at = epoch_of(epochs, topic_id, partition)
        if assigned_at is None:
            raise StaleMemberEpochError(
                f"Partition {topic_id}-{partition} is not assigned to member {member_id}: the "
                f"received member epoch {epoch} is older than the current member epoch {current}."
            )
        if epoch < assigned_at:
            raise StaleMemberEpochError(
                f"Partition {topic_id}-{partition} was assigned to member {member_id} at epoch "
                f"{assigned_at}, after the received member epoch {epoch}."
            )


def metadata_too_large(metadata: str | None, max_size: int) -> bool:
    """Is a commit's metadata over ``offset.metadata.max.bytes``? Kafka compares the length of
    the Java string — UTF-16 code units, whatever its encoded size — with the setting."""
    if metadata is None or len(metadata) * 2 <= max_size:
        return False
    return len(metadata) > max_size or len(metadata.encode("utf-16-le")) // 2 > max_size


def _fetched(partition: int, value: r.OffsetCommitValue | None, unstable: bool) -> FetchedPartition:
    """A partition's OffsetFetch answer: UNSTABLE_OFFSET_COMMIT while a transaction holds a
    pending offset of it and the fetch requires stable offsets (KIP-447), else its committed
    offset (-1: none)."""
    if unstable:
        return FetchedPartition(
            partition_index=partition, error_code=ErrorCode.UNSTABLE_OFFSET_COMMIT
        )
    if value is None:
        return FetchedPartition(partition_index=partition)
    return FetchedPartition(
        partition_index=partition,
        committed_offset=value.offset,
        committed_leader_epoch=value.leader_epoch,
        metadata=value.metadata,
    )


def check_commit_version(group: ConsumerGroup, req: OffsetCommit) -> None:
    """Kafka's ConsumerGroup.validateOffsetCommit for OffsetCommit v8 or older: a member of the
    consumer protocol (not a classic member of a consumer group) must use OffsetCommit v9+
    (UNSUPPORTED_VERSION). Admin commits (epoch < 0 on an empty group) and unknown members are
    left to the other checks."""
    if req.generation_id_or_member_epoch < 0 and not group.members:
        return
    member = group.members.get(req.member_id)
    if member is not None and member.classic_member_metadata is None:
        raise UnsupportedVersionError(
            "OffsetCommit version 9 or above must be used by members using the modern group protocol"
        )


class Offsets(ByGroupId[Mapping[tuple[str, int], r.OffsetCommitValue]]):
    def __init__(self, ctx: ShardContext, *, groups: Mapping[str, ConsumerGroup]) -> None:
        self._ctx = ctx
        self._consumer_groups = groups
        self._by_group = ctx.undo.new_dict()  # group id -> TDict((topic, p) -> value)
        self.txn = TransactionalOffsets(ctx)
        """Pending transactional offsets and their transactions (transactions.py)."""
        self.classic: ClassicGroupSupport | None = None
        """Set once by the shard: commits to a classic group are validated by it."""

    # ------------------------------------------------------------------ OffsetCommit

    def offset_commit(
        self, req: OffsetCommit, now_ms: int, *, legacy_version: bool = False
    ) -> Result[OffsetCommitResponse]:
        """``legacy_version``: the request came as OffsetCommit v8 or older, which a member of
        the consumer protocol may not use (:func:`check_commit_version`), and which is answered
        ILLEGAL_GENERATION rather than GROUP_ID_NOT_FOUND for a missing group."""
        if not req.group_id.strip():
            raise InvalidRequestError("GroupId can't be empty.")
        classic = self.classic
        if classic is not None and req.group_id in classic:
            classic.check_offset_commit(req)
            return self._ctx.run(self._offset_commit, req, now_ms)
        group = self._consumer_groups.get(req.group_id)
        epoch = req.generation_id_or_member_epoch
        if legacy_version and group is not None:
            check_commit_version(group, req)
        if group is None:
            if epoch >= 0:
                if req.group_id not in self._by_group:
                    if legacy_version:
                        # Kafka's validateOffsetCommit: GROUP_ID_NOT_FOUND from v9 on; older
                        # versions keep ILLEGAL_GENERATION, which their clients rejoin on.
                        raise IllegalGenerationError()
                    raise GroupIdNotFoundError(f"Group {req.group_id} not found.")
                # A simple group (offsets only) has no members: Kafka's ClassicGroup validates
                # the member of any commit with a generation >= 0.
                raise UnknownMemberIdError(
                    f"Member {req.member_id} is not a member of group {req.group_id}."
                )
        elif not (epoch < 0 and not group.members):
            check_commit_epoch(group, req.member_id, epoch, self._committed_partitions(req.topics))
        return self._ctx.run(self._offset_commit, req, now_ms)

    # ------------------------------------------------------------------ transactions

    def txn_offset_commit(self, req: TxnOffsetCommit, now_ms: int) -> Result[OffsetCommitResponse]:
        """TxnOffsetCommit (KIP-98, KIP-447): the member is validated as Kafka's
        validateTransactionalOffsetCommit does (a missing group accepts only generation -1:
        GROUP_ID_NOT_FOUND otherwise, KIP-1319's code; members of a consumer group as for OffsetCommit, with
        KIP-1251's assignment epochs; a classic group's member and generation), the producer
        against the group's transaction; the offsets are stored *pending* for the producer
        (transactions.py) and the group joins its transaction."""
        if not req.group_id.strip():
            raise InvalidRequestError("GroupId can't be empty.")
        classic = self.classic
        gen = req.generation_id
        if classic is not None and req.group_id in classic:
            classic.check_offset_commit(
                OffsetCommit(
                    group_id=req.group_id,
                    generation_id_or_member_epoch=gen,
                    member_id=req.member_id,
                    group_instance_id=req.group_instance_id,
                ),
                transactional=True,
            )
        else:
            group = self._consumer_groups.get(req.group_id)
            if group is None:
                if gen >= 0:  # ILLEGAL_GENERATION before TxnOffsetCommit v6 (the service's)
                    raise GroupIdNotFoundError(
                        f"Group {req.group_id} does not exist: generation {gen} is unknown."
                    )
            elif not (gen < 0 and not group.members) and not _anonymous_txn(req):
                check_commit_epoch(
                    group, req.member_id, gen, self._committed_partitions(req.topics)
                )
        self.txn.check_producer(req.group_id, req.producer_id, req.producer_epoch)
        return self._ctx.run(self._txn_offset_commit, req, now_ms)

    def _txn_offset_commit(self, req: TxnOffsetCommit, now_ms: int) -> Result[OffsetCommitResponse]:
        result: Result[OffsetCommitResponse] = Result()
        gid, pid = req.group_id, req.producer_id
        self.txn.begin(result, gid, req.transactional_id, pid, req.producer_epoch, now_ms)

        def emit(name: str, p: OffsetCommitPartition) -> None:
            value = r.TxnOffsetCommitValue(
                offset=p.committed_offset,
                leader_epoch=p.committed_leader_epoch,
                metadata=p.committed_metadata or "",
                commit_timestamp_ms=now_ms,
                producer_epoch=req.producer_epoch,
            )
            self.txn.add_pending(result, gid, name, p.partition_index, pid, value)

        result.response = self._commit_partitions(req.topics, emit)
        return result

    def add_offsets(self, cmd: AddOffsetsToTxn, now_ms: int) -> Result[None]:
        """AddOffsetsToTxn, answered by the transaction coordinator: the group takes part in
        the producer's transaction (its record, ongoing)."""
        if not cmd.group_id.strip():
            raise InvalidRequestError("GroupId can't be empty.")
        self.txn.check_producer(cmd.group_id, cmd.producer_id, cmd.producer_epoch)
        return self._ctx.run(self._add_offsets, cmd, now_ms)

    def _add_offsets(self, cmd: AddOffsetsToTxn, now_ms: int) -> Result[None]:
        result: Result[None] = Result()
        self.txn.begin(
            result, cmd.group_id, cmd.transactional_id, cmd.producer_id, cmd.producer_epoch, now_ms
        )
        return result

    def _committed_partitions(
        self, topics: Sequence[OffsetCommitTopic]
    ) -> Iterable[tuple[str, int]]:
        """(topic id, partition) of every partition of the commit the epoch check applies to
        (Kafka validates a partition once its metadata is found to fit; a topic that does not
        resolve is answered with its own error)."""
        max_size = self._ctx.config.offset_metadata_max_bytes
        by_name = self._ctx.topics.by_name
        for t in topics:
            name, topic_id, error = self._resolve_topic(t.name, t.topic_id)
            if error is not None:
                continue
            count = by_name[name].num_partitions  # Kafka's KafkaApis answers the others first
            for p in t.partitions:
                if 0 <= p.partition_index < count and not metadata_too_large(
                    p.committed_metadata, max_size
                ):
                    yield topic_id, p.partition_index

    def _offset_commit(self, req: OffsetCommit, now_ms: int) -> Result[OffsetCommitResponse]:
        result: Result[OffsetCommitResponse] = Result()

        retention_ms = req.retention_time_ms
        expire_ms = -1 if retention_ms == -1 else now_ms + retention_ms

        def emit(name: str, p: OffsetCommitPartition) -> None:
            value = r.OffsetCommitValue(
                offset=p.committed_offset,
                leader_epoch=p.committed_leader_epoch,
                metadata=p.committed_metadata or "",
                commit_timestamp_ms=now_ms,
                expire_timestamp_ms=expire_ms,
            )
            self._ctx.emit(
                result, r.offset_commit_record(req.group_id, name, p.partition_index, value)
            )

        result.response = self._commit_partitions(req.topics, emit)
        return result

    def _commit_partitions(
        self,
        topics: Sequence[OffsetCommitTopic],
        emit: Callable[[str, OffsetCommitPartition], None],
    ) -> OffsetCommitResponse:
        """The per-partition part of OffsetCommit and TxnOffsetCommit: each partition of a
        topic that resolves, exists and has metadata that fits is ``emit``-ted, whatever its
        offset (a negative one too: Kafka stores it, and KafkaJS's resetOffsets commits -2 and
        -1 as "earliest" and "latest"); the others get their error."""
        max_bytes = self._ctx.config.offset_metadata_max_bytes
        by_name = self._ctx.topics.by_name
        topics_out = []
        for t in topics:
            name, topic_id, topic_error = self._resolve_topic(t.name, t.topic_id)
            parts = []
            for p in t.partitions:
                error: ErrorCode = ErrorCode.NONE
                message = None
                if topic_error is not None:
                    error, message = topic_error
                elif not 0 <= p.partition_index < by_name[name].num_partitions:
                    error, message = (
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        f"Partition {name}-{p.partition_index} does not exist.",
                    )
                elif metadata_too_large(p.committed_metadata, max_bytes):
                    error = ErrorCode.OFFSET_METADATA_TOO_LARGE
                    message = (
                        f"Offset metadata is larger than offset.metadata.max.bytes ({max_bytes})."
                    )
                else:
                    emit(name, p)
                parts.append(
                    PartitionResult(
                        partition_index=p.partition_index, error_code=error, error_message=message
                    )
                )
            topics_out.append(
                TopicResult(name=name or t.name, topic_id=topic_id, partitions=tuple(parts))
            )
        return OffsetCommitResponse(topics=tuple(topics_out))

    def _resolve_topic(
        self, name: str, topic_id: str
    ) -> tuple[str, str, tuple[ErrorCode, str] | None]:
        """(name, topic id, error) for a topic given by name or by id."""
        image = self._ctx.topics
        if not name and (not topic_id or topic_id == ZERO_TOPIC_ID):
            return (
                name,
                ZERO_TOPIC_ID,
                (ErrorCode.INVALID_REQUEST, "A topic needs a name or a topic id."),
            )
        if topic_id and topic_id != ZERO_TOPIC_ID:
            by_id = image.by_id.get(topic_id)
            if by_id is None:
                return (
                    name,
                    topic_id,
                    (ErrorCode.UNKNOWN_TOPIC_ID, f"Topic id {topic_id} does not exist."),
                )
            if name and name != by_id.name:
                return (
                    name,
                    topic_id,
                    (
                        ErrorCode.INVALID_REQUEST,
                        f"Topic id {topic_id} is topic {by_id.name}, not {name}.",
                    ),
                )
            return by_id.name, topic_id, None
        by_name = image.by_name.get(name)
        if by_name is None:
            return (
                name,
                ZERO_TOPIC_ID,
                (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist."),
            )
        return name, by_name.topic_id, None

    # ------------------------------------------------------------------ OffsetFetch

    def offset_fetch(self, req: OffsetFetchGroup) -> OffsetFetchGroupResponse:
        """A read: no records. Unknown groups answer -1 for everything asked."""
        group = self._consumer_groups.get(req.group_id)
        if group is not None and not (req.member_id is None and req.member_epoch < 0):
            try:
                _validate_member(group, req.member_id or "", req.member_epoch)
            except CoordinatorError as exc:
                return OffsetFetchGroupResponse(
                    group_id=req.group_id, error_code=exc.code, error_message=exc.message
                )
        stored: Mapping[tuple[str, int], r.OffsetCommitValue] = self._by_group.get(req.group_id, {})
        by_name = self._ctx.topics.by_name
        topics_out = []
        unstable = self.txn.pending_partitions(req.group_id) if req.require_stable else ()
        if req.topics is None:
            by_topic: dict[str, list[tuple[int, r.OffsetCommitValue]]] = {}
            for (topic, partition), value in stored.items():
                by_topic.setdefault(topic, []).append((partition, value))
            for topic in sorted(by_topic):
                image = by_name.get(topic)
                parts = tuple(
                    _fetched(p, v, (topic, p) in unstable) for p, v in sorted(by_topic[topic])
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
                fetched: list[FetchedPartition] = []
                for p in t.partition_indexes:
                    # An unknown name answers -1 like any offset never committed (Kafka); a bad
                    # address (unknown id, no name nor id, name and id disagree) is an error.
                    if error is not None and error[0] is not ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                        fetched.append(FetchedPartition(partition_index=p, error_code=error[0]))
                        continue
                    fetched.append(_fetched(p, stored.get((name, p)), (name, p) in unstable))
                topics_out.append(
                    FetchedTopic(name=name, topic_id=topic_id, partitions=tuple(fetched))
                )
        return OffsetFetchGroupResponse(group_id=req.group_id, topics=tuple(topics_out))

    # ------------------------------------------------------------------ OffsetDelete

    def offset_delete(
        self, group_id: str, topics: Sequence[tuple[str, Sequence[int]]]
    ) -> Result[OffsetDeleteResponse]:
        group = self._consumer_groups.get(group_id)
        classic = self.classic
        subscribed_topics: Container[str] = ()
        if group is not None:
            subscribed_topics = group.topic_subscribers
        elif classic is not None and group_id in classic:
            # Kafka's ClassicGroup.validateOffsetDelete: the offsets of a group with members are
            # its to keep unless it speaks the consumer protocol (then: by subscription).
            listed = classic.listed_group(group_id)
            if not classic.is_empty(group_id) and (
                listed is None or listed.protocol_type != "consumer"
            ):
                raise NonEmptyGroupError()
            subscribed_topics = classic.subscribed_topics(group_id)
        elif group_id not in self._by_group and not self.txn.has_transactions(group_id):
            raise GroupIdNotFoundError(f"Group {group_id} not found.")
        return self._ctx.run(self._offset_delete, subscribed_topics, group_id, topics)

    def _offset_delete(
        self,
        subscribed_topics: Container[str],
        group_id: str,
        topics: Sequence[tuple[str, Sequence[int]]],
    ) -> Result[OffsetDeleteResponse]:
        result: Result[OffsetDeleteResponse] = Result()
        stored = self._by_group.get(group_id, {})
        by_name = self._ctx.topics.by_name
        out = []
        # Kafka's KafkaApis.handleOffsetDeleteRequest answers a topic or partition that does
        # not exist UNKNOWN_TOPIC_OR_PARTITION before the coordinator sees the rest, whose
        # answer OffsetDeleteResponse.Builder.merge appends after them (by topic name).
        unknown: dict[str, list[PartitionResult]] = {}
        for name, partitions in topics:
            subscribed = name in subscribed_topics
            image = by_name.get(name)
            parts = []
            for p in partitions:
                if image is None or not 0 <= p < image.num_partitions:
                    unknown.setdefault(name, []).append(
                        PartitionResult(
                            partition_index=p,
                            error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            error_message=f"Topic {name} does not exist."
                            if image is None
                            else f"Partition {name}-{p} does not exist.",
                        )
                    )
                    continue
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
                    self._ctx.emit(result, r.offset_commit_tombstone(group_id, name, p))
                self.txn.delete_partition(result, group_id, name, p)  # pending ones too (Kafka)
                parts.append(PartitionResult(partition_index=p))
            if parts:  # Kafka asks the coordinator about a topic's existing partitions only
                out.append((name, parts))
        if unknown:  # the merge: a topic already answered gets the coordinator's partitions
            merged = {name: list(parts) for name, parts in unknown.items()}
            for name, parts in out:
                merged.setdefault(name, []).extend(parts)
            out = list(merged.items())
        result.response = OffsetDeleteResponse(
            topics=tuple(
                TopicResult(
                    name=name,
                    topic_id=by_name[name].topic_id if name in by_name else ZERO_TOPIC_ID,
                    partitions=tuple(parts),
                )
                for name, parts in out
            )
        )
        return result

    # ------------------------------------------------------------------ within other commands

    def delete_all(self, result: Result[Any], group_id: str) -> None:
        """The group is deleted: a tombstone for each of its offsets, pending transactional
        ones and their transactions included (Kafka)."""
        for topic, partition in sorted(self._by_group.get(group_id, {})):
            self._ctx.emit(result, r.offset_commit_tombstone(group_id, topic, partition))
        self.txn.delete_all(result, group_id)

    def expire(
        self, result: Result[Any], group_id: str, subscribed: Container[str], now_ms: int
    ) -> bool:
        """Expire the group's offsets of topics it does not subscribe to, ``offsets.retention.
        minutes`` after their commit (or at their explicit expiry), except those of partitions
        with pending transactional offsets. True if none is left and no transaction holds
        offsets of the group (Kafka keeps such a group)."""
        retention_ms = self._ctx.config.offsets_retention_minutes * 60_000
        all_expired = not self.txn.has_transactions(group_id)
        pending = self.txn.pending_partitions(group_id)
        expired = 0
        for (topic, partition), value in sorted(self._by_group.get(group_id, {}).items()):
            if topic in subscribed or (topic, partition) in pending:
                all_expired = False
                continue
            due = (
                now_ms >= value.expire_timestamp_ms
                if value.expire_timestamp_ms >= 0
                else now_ms - value.commit_timestamp_ms >= retention_ms
            )
            if due:
                self._ctx.emit(result, r.offset_commit_tombstone(group_id, topic, partition))
                expired += 1
            else:
                all_expired = False
        if expired:
            result.events.append(
                LogEvent(event=Event.OFFSETS_EXPIRED, group_id=group_id, fields={"count": expired})
            )
        return all_expired

    def on_topics_deleted(self, names: Collection[str]) -> Result[None]:
        """Delete the committed offsets of deleted topics (Kafka's onPartitionsDeleted)."""
        return self._ctx.run(self._on_topics_deleted, set(names))

    def _on_topics_deleted(self, names: set[str]) -> Result[None]:
        result: Result[None] = Result()
        for gid in sorted(self._by_group):
            for topic, partition in sorted(self._by_group[gid]):
                if topic in names:
                    self._ctx.emit(result, r.offset_commit_tombstone(gid, topic, partition))
        self.txn.on_topics_deleted(result, names)
        return result

    def listed(self, others: Container[str]) -> list[ListedGroup]:
        """ListGroups entries of simple groups: offsets (committed or pending) only, no group
        of that id in ``others`` (Kafka: an empty classic group without a protocol)."""
        return [
            ListedGroup(group_id=gid, protocol_type="", group_state="Empty", group_type="classic")
            for gid in sorted(self.simple_groups())
            if gid not in others
        ]

    def simple_groups(self) -> set[str]:
        """Group ids known through their offsets: committed, or pending in a transaction."""
        return set(self._by_group) | self.txn.groups()

    # ------------------------------------------------------------------ records

    def replayers(self) -> dict[r.RecordType, Callable[[r.Record], None]]:
        return {r.RecordType.OFFSET_COMMIT: self._replay, **self.txn.replayers()}

    def can_adopt(self, group_id: str) -> bool:
        """May the loader install the group's committed offsets at once (:meth:`adopt`)? Only
        while the group has none and no transaction of its is open, so that replaying its
        OffsetCommit records one by one would only insert them."""
        return group_id not in self._by_group and not self.txn.has_open(group_id)

    def adopt(self, group_id: str, offsets: Mapping[tuple[str, int], r.OffsetCommitValue]) -> None:
        """Install a group's committed offsets the loader read at once (``group_load.py``):
        what replaying its OffsetCommit records one by one builds (:meth:`can_adopt`)."""
        if not self.can_adopt(group_id):
            raise IllegalStateError(f"offsets of group {group_id} are loaded twice")
        self._by_group[group_id] = self._ctx.undo.new_dict(offsets)

    def _replay(self, record: r.Record) -> None:
        key, value = r.typed(record, r.OffsetCommitKey, r.OffsetCommitValue)
        offsets = self._by_group.get(key.group_id)
        if value is None:
            if offsets is None:
                return
            offsets.discard((key.topic, key.partition))
            if not offsets:
                del self._by_group[key.group_id]
            return
        if offsets is None:
            offsets = self._ctx.undo.new_dict()
            self._by_group[key.group_id] = offsets
        offsets[(key.topic, key.partition)] = value
        self.txn.on_offset_committed(key.group_id, key.topic, key.partition)

    def weight(self, value: Mapping[tuple[str, int], r.OffsetCommitValue]) -> int:
        return 1 + len(value)

    def snapshot(self) -> dict[str, object]:
        return {
            "offsets": {
                gid: {f"{t}-{p}": v for (t, p), v in sorted(o.items())}
                for gid, o in sorted(self._by_group.items())
            },
            **self.txn.snapshot(),
        }

    def records_of_state(self) -> list[r.Record]:
        committed = [
            r.offset_commit_record(gid, topic, partition, value)
            for gid in sorted(self._by_group)
            for (topic, partition), value in sorted(self._by_group[gid].items())
        ]
        return committed + self.txn.records_of_state(self._committed_value)

    def _committed_value(
        self, group_id: str, topic: str, partition: int
    ) -> r.OffsetCommitValue | None:
        offsets = self._by_group.get(group_id)
        return None if offsets is None else offsets.get((topic, partition))
