"""The journal's Parquet schema (version 2): one row per journal record.

Every row has the record's place (``offset``, ``timestamp``, ``shard``, ``group_id``), its type
by Kafka's name and whether it is a tombstone. The typed columns that follow are filled only for
the record types that carry them (``RECORDS`` says which) and are null elsewhere. Topics inside
assignments are ``(topic, topic_id, partition)`` structs: ``topic`` is the topic's name, resolved
through the store's topic records, or the topic id when the name is unknown.

The schema is versioned: ``SCHEMA_VERSION`` is written into the file's key-value metadata
(``kip848.schema_version``) with the rest of :class:`ExportInfo`. A reader refuses a file of a
newer version. Adding a column at the end is a compatible change (same version); removing or
changing the meaning of a column needs a new version. docs/analytics.md documents every column;
a test checks that the two agree.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa

SCHEMA_VERSION = 2
METADATA_KEY = b"kip848.export"
VERSION_KEY = b"kip848.schema_version"

TOPIC_PARTITION = pa.struct(
    [
        pa.field("topic", pa.string()),
        pa.field("topic_id", pa.string()),
        pa.field("partition", pa.int32()),
    ]
)
PARTITIONS = pa.list_(TOPIC_PARTITION)
SUBSCRIBED_TOPIC = pa.struct(
    [
        pa.field("topic", pa.string()),
        pa.field("topic_id", pa.string()),
        pa.field("num_partitions", pa.int32()),
    ]
)
CLASSIC_MEMBER = pa.struct(
    [
        pa.field("member_id", pa.string()),
        pa.field("instance_id", pa.string()),
        pa.field("client_id", pa.string()),
        pa.field("rebalance_timeout_ms", pa.int32()),
        pa.field("session_timeout_ms", pa.int32()),
        pa.field("subscribed_topic_names", pa.list_(pa.string())),
        pa.field("assigned_partitions", PARTITIONS),
    ]
)
TIMESTAMP = pa.timestamp("us", tz="UTC")
REMOVED_MEMBER = pa.struct(
    [
        pa.field("member_id", pa.string()),
        pa.field("reason", pa.string()),
        pa.field("removed_at", TIMESTAMP),
    ]
)

# Record type names (Kafka's, for the types Kafka has) by key type id.
RECORD_TYPES: dict[int, str] = {
    1: "OffsetCommit",
    2: "GroupMetadata",
    3: "ConsumerGroupMetadata",
    4: "ConsumerGroupPartitionMetadata",
    5: "ConsumerGroupMemberMetadata",
    6: "ConsumerGroupTargetAssignmentMetadata",
    7: "ConsumerGroupTargetAssignmentMember",
    8: "ConsumerGroupCurrentMemberAssignment",
    16: "ConsumerGroupRegularExpression",
    1016: "GroupConfig",
    1100: "Topic",
    1104: "Config",
    1106: "AccessControlEntry",
    1111: "UserScramCredential",
    # This coordinator's own (Kafka writes transactional offsets as OffsetCommit records inside
    # the producer's transaction and keeps transactions in its transaction coordinator's log).
    1001: "TxnOffsetCommit",
    1002: "GroupTransaction",
    1120: "TransactionalIdGroup",
}


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: pa.DataType
    records: str
    """The record types that fill it ("all" for every row)."""
    doc: str
    nullable: bool = True


COLUMNS: tuple[Column, ...] = (
    Column(
        "offset",
        pa.int64(),
        "all",
        "the record's offset in its log (0, 1, 2, ...): the cluster log for cluster-level "
        "records, else the group's coordinator partition (``shard``)",
        False,
    ),
    Column(
        "timestamp",
        TIMESTAMP,
        "all",
        "when its batch was written (the coordinator's clock), microseconds, UTC",
        False,
    ),
    Column(
        "shard",
        pa.int32(),
        "all",
        "the coordinator partition holding the group's records (Kafka's partitionFor: the Java"
        " hash of the group id modulo offsets.topic.num.partitions); null for cluster-level"
        " records (Topic, ACLs, SCRAM credentials)",
    ),
    Column(
        "group_id",
        pa.string(),
        "all",
        "the group; null for cluster-level records (Topic, ACLs, SCRAM credentials)",
    ),
    Column("record_type", pa.string(), "all", "Kafka's name of the record type", False),
    Column("record_type_id", pa.int16(), "all", "the record type's number (key version)", False),
    Column("tombstone", pa.bool_(), "all", "true when the record deletes its key", False),
    Column(
        "member_id",
        pa.string(),
        "ConsumerGroupMemberMetadata, ConsumerGroupTargetAssignmentMember,"
        " ConsumerGroupCurrentMemberAssignment",
        "the member the record is about (also on tombstones)",
    ),
    Column("instance_id", pa.string(), "ConsumerGroupMemberMetadata", "static member's id"),
    Column("rack_id", pa.string(), "ConsumerGroupMemberMetadata", "the member's rack"),
    Column("client_id", pa.string(), "ConsumerGroupMemberMetadata", "the client's id"),
    Column("client_host", pa.string(), "ConsumerGroupMemberMetadata", "the client's host"),
    Column(
        "subscribed_topic_names",
        pa.list_(pa.string()),
        "ConsumerGroupMemberMetadata",
        "topic names the member subscribes to (sorted)",
    ),
    Column(
        "subscribed_topic_regex",
        pa.string(),
        "ConsumerGroupMemberMetadata",
        "the member's subscription regular expression (RE2/J syntax)",
    ),
    Column(
        "server_assignor",
        pa.string(),
        "ConsumerGroupMemberMetadata",
        "the server-side assignor the member asks for",
    ),
    Column(
        "rebalance_timeout_ms",
        pa.int32(),
        "ConsumerGroupMemberMetadata",
        "the member's rebalance timeout",
    ),
    Column(
        "classic_member",
        pa.bool_(),
        "ConsumerGroupMemberMetadata",
        "true when the member speaks the classic protocol (JoinGroup/SyncGroup)",
    ),
    Column(
        "classic_session_timeout_ms",
        pa.int32(),
        "ConsumerGroupMemberMetadata",
        "a classic member's own session timeout",
    ),
    Column(
        "member_epoch",
        pa.int32(),
        "ConsumerGroupCurrentMemberAssignment",
        "the member's epoch (-2: a static member that left temporarily)",
    ),
    Column(
        "previous_member_epoch",
        pa.int32(),
        "ConsumerGroupCurrentMemberAssignment",
        "the member's previous epoch",
    ),
    Column(
        "member_state",
        pa.string(),
        "ConsumerGroupCurrentMemberAssignment",
        "STABLE, UNREVOKED_PARTITIONS, UNRELEASED_PARTITIONS or UNKNOWN",
    ),
    Column(
        "assigned_partitions",
        PARTITIONS,
        "ConsumerGroupCurrentMemberAssignment",
        "partitions the member owns",
    ),
    Column(
        "pending_revocation_partitions",
        PARTITIONS,
        "ConsumerGroupCurrentMemberAssignment",
        "partitions the member still owns but must revoke",
    ),
    Column(
        "target_partitions",
        PARTITIONS,
        "ConsumerGroupTargetAssignmentMember",
        "the member's target assignment",
    ),
    Column("group_epoch", pa.int32(), "ConsumerGroupMetadata", "the group epoch"),
    Column("group_uid", pa.string(), "ConsumerGroupMetadata", "the group incarnation's id"),
    Column(
        "assignment_epoch",
        pa.int32(),
        "ConsumerGroupTargetAssignmentMetadata",
        "the epoch of the target assignment just computed",
    ),
    Column(
        "subscription_metadata",
        pa.list_(SUBSCRIBED_TOPIC),
        "ConsumerGroupPartitionMetadata",
        "every subscribed topic that exists, with its partition count",
    ),
    Column(
        "regular_expression",
        pa.string(),
        "ConsumerGroupRegularExpression",
        "the regular expression resolved",
    ),
    Column(
        "regex_topics",
        pa.list_(pa.string()),
        "ConsumerGroupRegularExpression",
        "the topic names it matched",
    ),
    Column(
        "regex_topics_version",
        pa.int64(),
        "ConsumerGroupRegularExpression",
        "the topics image version it was resolved against",
    ),
    Column(
        "topic",
        pa.string(),
        "OffsetCommit, TxnOffsetCommit, Topic",
        "the committed topic (OffsetCommit, TxnOffsetCommit) or the topic (Topic)",
    ),
    Column("partition", pa.int32(), "OffsetCommit, TxnOffsetCommit", "the committed partition"),
    Column(
        "committed_offset",
        pa.int64(),
        "OffsetCommit, TxnOffsetCommit",
        "the committed offset (TxnOffsetCommit: pending until its transaction commits)",
    ),
    Column(
        "committed_leader_epoch",
        pa.int32(),
        "OffsetCommit, TxnOffsetCommit",
        "its leader epoch (-1: none)",
    ),
    Column(
        "commit_metadata",
        pa.string(),
        "OffsetCommit, TxnOffsetCommit",
        "the commit's metadata string",
    ),
    Column("commit_timestamp", TIMESTAMP, "OffsetCommit, TxnOffsetCommit", "when it was committed"),
    Column("expire_timestamp", TIMESTAMP, "OffsetCommit", "when it expires (null: by retention)"),
    Column("topic_id", pa.string(), "Topic", "the topic's id (base64url UUID)"),
    Column("num_partitions", pa.int32(), "Topic", "the topic's partition count"),
    Column("config_name", pa.string(), "GroupConfig, Config", "a dynamic group config's name"),
    Column(
        "config_value", pa.string(), "GroupConfig, Config", "its value (null on a tombstone: reset)"
    ),
    Column("protocol_type", pa.string(), "GroupMetadata", "a classic group's protocol type"),
    Column("generation", pa.int32(), "GroupMetadata", "a classic group's generation"),
    Column("protocol_name", pa.string(), "GroupMetadata", "the protocol the group chose"),
    Column("leader", pa.string(), "GroupMetadata", "the classic group's leader member"),
    Column(
        "classic_members",
        pa.list_(CLASSIC_MEMBER),
        "GroupMetadata",
        "the classic group's members; subscriptions and assignments are decoded when the"
        " protocol type is consumer",
    ),
    Column(
        "acl_resource_type",
        pa.string(),
        "AccessControlEntry",
        "the ACL's resource type (TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID ...)",
    ),
    Column("acl_resource_name", pa.string(), "AccessControlEntry", "its resource name or prefix"),
    Column("acl_pattern_type", pa.string(), "AccessControlEntry", "LITERAL or PREFIXED"),
    Column("acl_principal", pa.string(), "AccessControlEntry", "the principal (User:NAME)"),
    Column("acl_host", pa.string(), "AccessControlEntry", "the host (* for every host)"),
    Column("acl_operation", pa.string(), "AccessControlEntry", "the operation (READ, ALL ...)"),
    Column("acl_permission_type", pa.string(), "AccessControlEntry", "ALLOW or DENY"),
    Column(
        "scram_user",
        pa.string(),
        "UserScramCredential",
        "the user whose SCRAM credential changed (never the salt or keys: not exported)",
    ),
    Column("scram_mechanism", pa.string(), "UserScramCredential", "SCRAM-SHA-256 or SCRAM-SHA-512"),
    Column(
        "scram_iterations", pa.int32(), "UserScramCredential", "its iteration count (null: deleted)"
    ),
    Column(
        "rack_local_partitions",
        pa.int32(),
        "ConsumerGroupCurrentMemberAssignment",
        "how many of the member's assigned partitions have a replica in its rack (null: the "
        "member has no rack, or no replica racks are known for its topics)",
    ),
    Column(
        "classic_rebalance_protocol",
        pa.string(),
        "GroupMetadata",
        "eager or cooperative (KIP-429), from the embedded consumer protocol: cooperative when"
        " the chosen protocol is cooperative-sticky or a member's subscription lists partitions"
        " it owns (an eager member gives up everything before it joins); null for another"
        " protocol type or an empty group",
    ),
    Column(
        "rebalance_preparing_at",
        TIMESTAMP,
        "GroupMetadata",
        "when the rebalance that made this generation started (the group entered"
        " PreparingRebalance); null when the record does not say (older builds, a group created"
        " by a downgrade)",
    ),
    Column(
        "rebalance_completing_at",
        TIMESTAMP,
        "GroupMetadata",
        "when its join phase completed (CompletingRebalance, or Empty); the record's own time is"
        " when the group became Stable",
    ),
    Column(
        "rebalance_cause",
        pa.string(),
        "GroupMetadata",
        "what started that rebalance: member_joined, member_rejoined, subscription_changed,"
        " member_left, member_fenced_session_timeout, member_fenced_rebalance_timeout,"
        " static_member_restart, downgraded_from_consumer_group or assignment_not_stored",
    ),
    Column(
        "rebalance_client_reason",
        pa.string(),
        "GroupMetadata",
        "the reason the client gave with the request that started it (KIP-800), up to 256"
        " characters",
    ),
    Column(
        "classic_removed_members",
        pa.list_(REMOVED_MEMBER),
        "GroupMetadata",
        "members removed during that rebalance, in order: member_id, reason (member_left,"
        " member_fenced_session_timeout, member_fenced_rebalance_timeout,"
        " static_member_replaced), removed_at",
    ),
    Column(
        "previous_committed_offset",
        pa.int64(),
        "OffsetCommit",
        "the offset the group's previous commit of this partition in the export committed"
        " (deletions skipped); null for its first one. With it the commit rate needs no sort",
    ),
    Column(
        "previous_commit_at",
        TIMESTAMP,
        "OffsetCommit",
        "the time of that previous commit's record (its `timestamp`)",
    ),
    Column(
        "producer_id",
        pa.int64(),
        "TxnOffsetCommit, GroupTransaction",
        "the transactional producer whose transaction holds the offset or the group",
    ),
    Column(
        "producer_epoch",
        pa.int16(),
        "TxnOffsetCommit, GroupTransaction",
        "its epoch (null on a tombstone)",
    ),
    Column(
        "transactional_id",
        pa.string(),
        "GroupTransaction, TransactionalIdGroup",
        "the producer's transactional id (null on a GroupTransaction tombstone: the transaction"
        " ended)",
    ),
    Column(
        "transaction_state",
        pa.string(),
        "GroupTransaction",
        "Ongoing, PrepareCommit or PrepareAbort (an end forwarded to the transaction"
        " coordinator, its answer not seen yet)",
    ),
    Column(
        "transaction_group_id",
        pa.string(),
        "TransactionalIdGroup",
        "the group the transactional id commits offsets to, whose node serves its transaction"
        " APIs among several nodes (null: the mapping was removed)",
    ),
)

SCHEMA = pa.schema([pa.field(c.name, c.type, nullable=c.nullable) for c in COLUMNS])


@dataclass(frozen=True, slots=True, kw_only=True)
class ExportInfo:
    """What the file's metadata says about the export (``kip848.export``, JSON)."""

    schema_version: int = SCHEMA_VERSION
    store: str
    exported_at_ms: int
    created_by: str
    shards: int
    session_timeout_ms: int
    """group.consumer.session.timeout.ms of the export's configuration: the session timeout of
    groups without a dynamic override."""
    assignors: tuple[str, ...]
    since_ms: int | None
    until_ms: int | None
    first_offset: int | None
    """The first exported record (None: nothing exported)."""
    last_offset: int | None
    rows: int
    store_last_offset: int
    journal_first_offset: int | None
    """The first record the store's journal still holds (None: empty journal)."""
    complete: bool
    """True when the export holds every record ever written up to ``last_offset``: no
    retention trim and no ``since`` cut. Analysis then knows every group from its creation."""
    warnings: tuple[str, ...] = field(default=())

    def to_metadata(self) -> dict[bytes, bytes]:
        return {
            VERSION_KEY: str(self.schema_version).encode(),
            METADATA_KEY: json.dumps(asdict(self), sort_keys=True).encode(),
        }

    @staticmethod
    def from_metadata(metadata: dict[bytes, bytes] | None) -> ExportInfo:
        if not metadata or METADATA_KEY not in metadata:
            raise ValueError("not a kip848 journal export (no kip848.export metadata)")
        raw: dict[str, Any] = json.loads(metadata[METADATA_KEY])
        version = int(raw.get("schema_version", 0))
        if version > SCHEMA_VERSION:
            raise ValueError(
                f"the export has schema version {version}; this build reads up to "
                f"{SCHEMA_VERSION}: upgrade kip848-coordinator"
            )
        raw["assignors"] = tuple(raw.get("assignors", ()))
        raw["warnings"] = tuple(raw.get("warnings", ()))
        known = set(ExportInfo.__dataclass_fields__)
        return ExportInfo(**{k: v for k, v in raw.items() if k in known})
