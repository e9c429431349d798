"""Records: the only way state changes. Named and numbered after Kafka's record types.

A :class:`Record` is a key and a value; ``value is None`` is a tombstone (deletion). Keys are
what compaction keeps the latest value of. Every key class names its :class:`RecordType` (Kafka's
``CoordinatorRecordType``: the number is the key "version" written first in the stored key);
``replay`` is dispatched on it. Ordering rules for tombstones are enforced by ``replay``
(see :mod:`coordinator.core.group`):

* removing a member writes, in order: current-assignment tombstone, target-assignment
  tombstone, member-metadata tombstone;
* deleting a group writes the tombstones of every member, the target-assignment-metadata
  tombstone, the partition-metadata tombstone, then the group-metadata tombstone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import ClassVar, TypeVar

from assignors.api import TopicMetadata

from .errors import IllegalStateError
from .model import (
    Assignment,
    AssignmentEpochs,
    ClassicMemberMetadata,
    PartitionRacks,
    complete_epochs,
)

K = TypeVar("K")
V = TypeVar("V")


class RecordType(IntEnum):
    """Record types, named and numbered as Kafka's ``CoordinatorRecordType`` (the share-group
    types 9-15 are not used here); 1001, 1002, 1016 and 1100 and up are this coordinator's own
    (transactional offsets — Kafka writes them as OffsetCommit records in the producer's
    transaction, pending until its marker — group configs as earlier versions kept them in the
    group's partition, topics, configs, ACLs and SCRAM credentials, which Kafka keeps in the
    controller's metadata log: 1104, 1106 and 1111 after its ConfigRecord (4),
    AccessControlEntryRecord (6) and UserScramCredentialRecord (11); and 1120, cluster-level,
    the group a transactional id commits offsets to, which routes its transaction APIs to the
    node leading that group among several nodes: Kafka has no such record, its group and
    transaction coordinators send each other requests)"""

    OFFSET_COMMIT = 1
    GROUP_METADATA = 2
    CONSUMER_GROUP_METADATA = 3
    CONSUMER_GROUP_PARTITION_METADATA = 4
    CONSUMER_GROUP_MEMBER_METADATA = 5
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
    CONSUMER_GROUP_REGULAR_EXPRESSION = 16
    TXN_OFFSET_COMMIT = 1001
    GROUP_TRANSACTION = 1002
    GROUP_CONFIG = 1016
    TOPIC = 1100
    CONFIG = 1104
    ACCESS_CONTROL_ENTRY = 1106
    USER_SCRAM_CREDENTIAL = 1111
    TRANSACTIONAL_ID_GROUP = 1120


# ---------------------------------------------------------------- keys


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    TYPE: ClassVar[RecordType] = RecordType.OFFSET_COMMIT
    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitKey:
    """A transactional offset, pending until its transaction ends (TxnOffsetCommit): the
    group's offset of a partition as producer ``producer_id``'s transaction would commit it."""

    TYPE: ClassVar[RecordType] = RecordType.TXN_OFFSET_COMMIT
    group_id: str
    topic: str
    partition: int
    producer_id: int


@dataclass(frozen=True, slots=True)
class GroupTransactionKey:
    """A producer's transaction that holds (or may hold) offsets of the group: open, or its
    end forwarded to the transaction coordinator and not yet confirmed."""

    TYPE: ClassVar[RecordType] = RecordType.GROUP_TRANSACTION
    group_id: str
    producer_id: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    """A classic group (Kafka's GroupMetadata record): one value holds the whole group as of
    its last completed generation. Written by the legacy bridge."""

    TYPE: ClassVar[RecordType] = RecordType.GROUP_METADATA
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataKey:
    TYPE: ClassVar[RecordType] = RecordType.CONSUMER_GROUP_METADATA
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataKey:
    TYPE: ClassVar[RecordType] = RecordType.CONSUMER_GROUP_PARTITION_METADATA
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataKey:
    TYPE: ClassVar[RecordType] = RecordType.CONSUMER_GROUP_MEMBER_METADATA
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataKey:
    TYPE: ClassVar[RecordType] = RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberKey:
    TYPE: ClassVar[RecordType] = RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentKey:
    TYPE: ClassVar[RecordType] = RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionKey:
    TYPE: ClassVar[RecordType] = RecordType.CONSUMER_GROUP_REGULAR_EXPRESSION
    group_id: str
    regular_expression: str


@dataclass(frozen=True, slots=True)
class GroupConfigKey:
    """Per-group dynamic config as earlier versions kept it, in the group's own partition. Read
    when a partition is loaded and moved to the cluster log (:class:`ConfigKey`) in the same
    batch that tombstones it here; never written otherwise."""

    TYPE: ClassVar[RecordType] = RecordType.GROUP_CONFIG
    group_id: str
    name: str


@dataclass(frozen=True, slots=True)
class TopicKey:
    """The topic registry (Kafka's TopicRecord + PartitionRecord count). Cluster-level."""

    TYPE: ClassVar[RecordType] = RecordType.TOPIC
    name: str


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """A dynamic config of a resource (Kafka's ConfigRecord; ``resource_type`` is Kafka's
    ConfigResource.Type: :data:`CONFIG_RESOURCE_GROUP` for a group's). Cluster-level, so every
    node reads and writes it whoever leads the group; a tombstone reverts it to the default.
    Its resource is named ``resource_name``, never ``group_id``: the record belongs to the
    cluster log, not to a group's partition."""

    TYPE: ClassVar[RecordType] = RecordType.CONFIG
    resource_type: int
    resource_name: str
    name: str


@dataclass(frozen=True, slots=True)
class AccessControlEntryKey:
    """One ACL (Kafka's AccessControlEntryRecord without its id: the binding is its own key,
    so creating an ACL twice is one record). Cluster-level; a tombstone removes it. Numbers are
    Kafka's ResourceType, PatternType, AclOperation and AclPermissionType."""

    TYPE: ClassVar[RecordType] = RecordType.ACCESS_CONTROL_ENTRY
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@dataclass(frozen=True, slots=True)
class UserScramCredentialKey:
    """A user's SCRAM credential for one mechanism (Kafka's UserScramCredentialRecord;
    ``mechanism`` is Kafka's ScramMechanism number). Cluster-level; a tombstone deletes it."""

    TYPE: ClassVar[RecordType] = RecordType.USER_SCRAM_CREDENTIAL
    name: str
    mechanism: int


@dataclass(frozen=True, slots=True)
class TransactionalIdGroupKey:
    """The group a transactional id's transactions commit offsets to (cluster-level): among
    several nodes its transaction APIs are served by the node leading that group's coordinator
    partition (``core/transactional_ids.py``)."""

    TYPE: ClassVar[RecordType] = RecordType.TRANSACTIONAL_ID_GROUP
    transactional_id: str


# ---------------------------------------------------------------- values


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnOffsetCommitValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    producer_epoch: int


class TransactionState(IntEnum):
    """Where a group's transaction is (as this coordinator knows it)."""

    ONGOING = 0
    """Offsets may be added (AddOffsetsToTxn or TxnOffsetCommit seen), no end forwarded."""
    PREPARE_COMMIT = 1
    """An EndTxn(commit) was forwarded to the transaction coordinator, its answer not seen."""
    PREPARE_ABORT = 2
    """An EndTxn(abort) was forwarded, its answer not seen."""
    COMPLETE_ABORT = 3
    """No transaction open: the producer's ongoing one was aborted by an InitProducerId of its
    transactional id, which fenced its epochs up to this record's (Kafka's abort marker, at the
    bumped epoch, leaves the newer epoch in the offsets partition). A TxnOffsetCommit or
    AddOffsetsToTxn of such an epoch is refused INVALID_PRODUCER_EPOCH; a newer epoch's
    transaction replaces the record. Also what an abort answered by the transaction
    coordinator leaves (its epochs before the transaction's fenced)."""
    COMPLETE_COMMIT = 4
    """No transaction open: the producer's transaction committed, its epochs before the
    transaction's (up to this record's) fenced as COMPLETE_ABORT's (Kafka keeps the producer's
    last epoch in the offsets partition after its commit marker)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupTransactionValue:
    transactional_id: str
    producer_epoch: int
    state: TransactionState
    updated_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupMetadataMemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    """The member's metadata for the group's selected protocol."""
    assignment: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupMetadataRemovedMember:
    member_id: str
    cause: str
    """Why it was removed (``legacy_bridge.classic_group.RemovalCause``)."""
    removed_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupMetadataRebalanceValue:
    """How the generation a GroupMetadata record holds came about — ours: Kafka's record keeps
    only ``currentStateTimestamp``, and the join and sync phases leave no record, so without it a
    journal cannot tell when a classic rebalance started, how long its phases took or why.
    Written by the bridge with the record that completes a rebalance, repeated by later records
    of the same generation (a static member replaced in a stable group); absent from records of
    older builds and of a generation no rebalance made (a group created by a downgrade)."""

    preparing_ms: int
    """When the group entered PreparingRebalance (the first time since its previous record)."""
    completing_ms: int
    """When the join phase last completed: the group entered CompletingRebalance (or Empty,
    when nobody rejoined)."""
    cause: str
    """What started the rebalance (``legacy_bridge.classic_group.RebalanceCause``)."""
    client_reason: str | None
    """The reason the client gave with the request that started it (JoinGroup v8+ and
    LeaveGroup v5+, KIP-800), cut to 256 characters; None when it gave none."""
    removed: tuple[GroupMetadataRemovedMember, ...] = ()
    """Members removed since the previous record, in order."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int
    members: tuple[GroupMetadataMemberValue, ...]
    rebalance: GroupMetadataRebalanceValue | None = None
    """A trailing field of ours (older builds ignore it; absent from their records)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupMetadataValue:
    epoch: int
    group_uid: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupPartitionMetadataValue:
    """Subscription metadata: every subscribed topic that exists, by name."""

    topics: tuple[TopicMetadata, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupMemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic_member_metadata: ClassicMemberMetadata | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    assignment_epoch: int
    assignment_timestamp_ms: int = 0
    """When that target was computed (Kafka 4.3's AssignmentTimestamp): the next computation
    waits until this plus the assignment interval. 0: compute at once (also written when the
    interval is 0, so records stay as before batching)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupTargetAssignmentMemberValue:
    topic_partitions: Assignment


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned_partitions: Assignment
    partitions_pending_revocation: Assignment
    assignment_epochs: AssignmentEpochs | None = None
    """KIP-1251 (Kafka's tagged ``AssignmentEpochs``): the epoch at which each assigned or
    pending partition was assigned. None in records written before it: they read as assigned at
    max(member epoch, 0)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupRegularExpressionValue:
    """A resolved regex: the topic names it matched in topics image ``version``."""

    topics: tuple[str, ...]
    version: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupConfigValue:
    value: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigValue:
    value: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicValue:
    topic_id: str
    num_partitions: int
    partition_racks: PartitionRacks = field(default_factory=dict)
    """The racks of each partition's replicas (Kafka's PartitionRecord replicas, resolved to
    their brokers' racks); empty when unknown. A trailing field: written only when known."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AccessControlEntryValue:
    """An ACL exists (everything is in its key)."""


SECRET = {"secret": True}
"""Metadata of a record field that is a secret: tools that show records (``kip848 dump``) show
``<hidden>`` instead of its value."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UserScramCredentialValue:
    """Kafka's salted credential: never the password. The keys are secrets (they allow an
    offline guess of the password): never printed, never exported (:data:`SECRET`)."""

    salt: bytes = field(metadata=SECRET)
    stored_key: bytes = field(metadata=SECRET)
    server_key: bytes = field(metadata=SECRET)
    iterations: int

    def __repr__(self) -> str:
        return f"UserScramCredentialValue(iterations={self.iterations}, <salted keys hidden>)"


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionalIdGroupValue:
    group_id: str
    active_ms: int = -1
    """When the transactional id was last seen active (a transaction API of it served), by
    the driver's clock, to within ``transaction.remove.expired.transaction.cleanup.interval.ms``:
    the mapping expires ``transactional.id.expiration.ms`` after it (``core/transactional_ids.py``).
    -1: not known (a record written before this field was)."""


RecordKey = (
    OffsetCommitKey
    | TxnOffsetCommitKey
    | GroupTransactionKey
    | GroupMetadataKey
    | ConsumerGroupMetadataKey
    | ConsumerGroupPartitionMetadataKey
    | ConsumerGroupMemberMetadataKey
    | ConsumerGroupTargetAssignmentMetadataKey
    | ConsumerGroupTargetAssignmentMemberKey
    | ConsumerGroupCurrentMemberAssignmentKey
    | ConsumerGroupRegularExpressionKey
    | GroupConfigKey
    | TopicKey
    | ConfigKey
    | AccessControlEntryKey
    | UserScramCredentialKey
    | TransactionalIdGroupKey
)


@dataclass(frozen=True, slots=True)
class Record:
    key: RecordKey
    value: object | None = field(default=None)

    @property
    def is_tombstone(self) -> bool:
        return self.value is None

    @property
    def group_id(self) -> str | None:
        return getattr(self.key, "group_id", None)


def typed(record: Record, key_type: type[K], value_type: type[V]) -> tuple[K, V | None]:
    """The record's key and value (None: tombstone) as the types its record type promises; a
    record whose parts do not match is refused (a bug or a corrupt store, never protocol
    state)."""
    key, value = record.key, record.value
    if isinstance(key, key_type) and (value is None or isinstance(value, value_type)):
        return key, value
    raise IllegalStateError(
        f"record {type(key).__name__} with a {type(value).__name__} value is not a "
        f"{key_type.__name__} with a {value_type.__name__}"
    )


# ---------------------------------------------------------------- helpers (Kafka's
# GroupCoordinatorRecordHelpers): one function per record and tombstone.


def offset_commit_record(
    group_id: str, topic: str, partition: int, value: OffsetCommitValue
) -> Record:
    return Record(OffsetCommitKey(group_id, topic, partition), value)


def offset_commit_tombstone(group_id: str, topic: str, partition: int) -> Record:
    return Record(OffsetCommitKey(group_id, topic, partition))


def classic_group_record(group_id: str, value: GroupMetadataValue) -> Record:
    return Record(GroupMetadataKey(group_id), value)


def classic_group_tombstone(group_id: str) -> Record:
    return Record(GroupMetadataKey(group_id))


def group_epoch_record(group_id: str, epoch: int, group_uid: str) -> Record:
    return Record(
        ConsumerGroupMetadataKey(group_id),
        ConsumerGroupMetadataValue(epoch=epoch, group_uid=group_uid),
    )


def group_epoch_tombstone(group_id: str) -> Record:
    return Record(ConsumerGroupMetadataKey(group_id))


def partition_metadata_record(group_id: str, topics: dict[str, TopicMetadata]) -> Record:
    ordered = tuple(topics[name] for name in sorted(topics))
    return Record(
        ConsumerGroupPartitionMetadataKey(group_id),
        ConsumerGroupPartitionMetadataValue(topics=ordered),
    )


def partition_metadata_tombstone(group_id: str) -> Record:
    return Record(ConsumerGroupPartitionMetadataKey(group_id))


def member_metadata_record(group_id: str, member) -> Record:  # member: ConsumerGroupMember
    return Record(
        ConsumerGroupMemberMetadataKey(group_id, member.member_id),
        ConsumerGroupMemberMetadataValue(
            instance_id=member.instance_id,
            rack_id=member.rack_id,
            client_id=member.client_id,
            client_host=member.client_host,
            subscribed_topic_names=member.subscribed_topic_names,
            subscribed_topic_regex=member.subscribed_topic_regex,
            rebalance_timeout_ms=member.rebalance_timeout_ms,
            server_assignor=member.server_assignor_name,
            classic_member_metadata=member.classic_member_metadata,
        ),
    )


def member_metadata_tombstone(group_id: str, member_id: str) -> Record:
    return Record(ConsumerGroupMemberMetadataKey(group_id, member_id))


def target_assignment_record(group_id: str, member_id: str, partitions: Assignment) -> Record:
    return Record(
        ConsumerGroupTargetAssignmentMemberKey(group_id, member_id),
        ConsumerGroupTargetAssignmentMemberValue(topic_partitions=partitions),
    )


def target_assignment_tombstone(group_id: str, member_id: str) -> Record:
    return Record(ConsumerGroupTargetAssignmentMemberKey(group_id, member_id))


def target_assignment_epoch_record(group_id: str, epoch: int, timestamp_ms: int = 0) -> Record:
    return Record(
        ConsumerGroupTargetAssignmentMetadataKey(group_id),
        ConsumerGroupTargetAssignmentMetadataValue(
            assignment_epoch=epoch, assignment_timestamp_ms=timestamp_ms
        ),
    )


def target_assignment_epoch_tombstone(group_id: str) -> Record:
    return Record(ConsumerGroupTargetAssignmentMetadataKey(group_id))


def current_assignment_record(group_id: str, member) -> Record:  # member: ConsumerGroupMember
    return Record(
        ConsumerGroupCurrentMemberAssignmentKey(group_id, member.member_id),
        ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch=member.member_epoch,
            previous_member_epoch=member.previous_member_epoch,
            state=member.state.value,
            assigned_partitions=member.assigned_partitions,
            partitions_pending_revocation=member.partitions_pending_revocation,
            # A partition the member's epochs do not name (a member built by a conversion, a
            # static member leaving) is assigned at the member's epoch, as Kafka reads a record
            # without epochs.
            assignment_epochs=complete_epochs(
                member.assignment_epochs,
                member.assigned_partitions,
                member.partitions_pending_revocation,
                max(member.member_epoch, 0),
            ),
        ),
    )


def current_assignment_tombstone(group_id: str, member_id: str) -> Record:
    return Record(ConsumerGroupCurrentMemberAssignmentKey(group_id, member_id))


def regex_record(
    group_id: str, regex: str, topics: frozenset[str], version: int, timestamp_ms: int
) -> Record:
    return Record(
        ConsumerGroupRegularExpressionKey(group_id, regex),
        ConsumerGroupRegularExpressionValue(
            topics=tuple(sorted(topics)), version=version, timestamp_ms=timestamp_ms
        ),
    )


def regex_tombstone(group_id: str, regex: str) -> Record:
    return Record(ConsumerGroupRegularExpressionKey(group_id, regex))


def group_config_record(group_id: str, name: str, value: str | None) -> Record:
    return Record(
        GroupConfigKey(group_id, name), None if value is None else GroupConfigValue(value=value)
    )


CONFIG_RESOURCE_GROUP = 32
"""Kafka's ConfigResource.Type.GROUP."""


def config_record(resource_type: int, resource_name: str, name: str, value: str | None) -> Record:
    return Record(
        ConfigKey(resource_type, resource_name, name),
        None if value is None else ConfigValue(value=value),
    )


def topic_record(
    name: str,
    topic_id: str | None,
    num_partitions: int = 0,
    partition_racks: PartitionRacks | None = None,
) -> Record:
    return Record(
        TopicKey(name),
        None
        if topic_id is None
        else TopicValue(
            topic_id=topic_id,
            num_partitions=num_partitions,
            partition_racks={} if partition_racks is None else partition_racks,
        ),
    )


def acl_record(key: AccessControlEntryKey, exists: bool) -> Record:
    return Record(key, AccessControlEntryValue() if exists else None)


def scram_credential_record(
    name: str, mechanism: int, value: UserScramCredentialValue | None
) -> Record:
    return Record(UserScramCredentialKey(name, mechanism), value)


def txn_offset_commit_record(
    group_id: str, topic: str, partition: int, producer_id: int, value: TxnOffsetCommitValue | None
) -> Record:
    return Record(TxnOffsetCommitKey(group_id, topic, partition, producer_id), value)


def group_transaction_record(
    group_id: str, producer_id: int, value: GroupTransactionValue | None
) -> Record:
    return Record(GroupTransactionKey(group_id, producer_id), value)


def transactional_id_group_record(
    transactional_id: str, group_id: str | None, active_ms: int = -1
) -> Record:
    """``transactional_id`` commits offsets to ``group_id``, last active at ``active_ms``
    (None: a tombstone)."""
    value = (
        None
        if group_id is None
        else TransactionalIdGroupValue(group_id=group_id, active_ms=active_ms)
    )
    return Record(TransactionalIdGroupKey(transactional_id), value)
