"""The rows of ``kip848 analytics export``: one log's journal entries -> Arrow tables of the
export's schema (:mod:`.schema`), row group by row group.

Records are decoded with the core's codec (``codec.decode``), but offset commits, most of a
journal, are read straight from their bytes when they are exactly in the codec's layout, and
each is linked to the partition's previous commit in the export (the commit rate needs no sort
then). Topic ids in assignments are resolved to names through the topics the caller knows
(:class:`Decoder`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa

from coordinator.core import codec
from coordinator.core import records as r
from coordinator.core.model import MemberState
from coordinator.security.acls import AclBinding
from coordinator.security.scram import ScramMechanism

from .schema import COLUMNS, RECORD_TYPES, SCHEMA

__all__ = ["Decoder", "ExportError", "LogExport", "export_log"]

COOPERATIVE_STICKY = "cooperative-sticky"
"""The classic protocol name of Kafka's (and librdkafka's) cooperative assignor (KIP-429)."""
_STATE_NAMES = {s.value: s.name for s in MemberState}


class ExportError(Exception):
    """The export cannot be done (no store, a corrupt store, a bad argument). The message says
    what and where; the CLI prints it and exits 1."""


class _Chunk:
    """Column lists for up to ``size`` rows, pre-filled with None; handlers fill by index.
    Columns no row of the chunk touched are written as all-null arrays (cheap)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.n = 0
        self.cols: dict[str, list[Any]] = {c.name: [None] * size for c in COLUMNS}
        self.touched: set[str] = set(_ALWAYS)

    def table(self) -> pa.Table:
        n = self.n
        arrays = []
        for c in COLUMNS:
            if c.name not in self.touched:
                arrays.append(pa.nulls(n, type=c.type))
                continue
            values = self.cols[c.name]
            arrays.append(pa.array(values if n == self.size else values[:n], type=c.type))
        return pa.Table.from_arrays(arrays, schema=SCHEMA)


_ALWAYS = ("offset", "timestamp", "shard", "group_id", "record_type", "record_type_id", "tombstone")
# An offset's columns: of an OffsetCommit record and of a TxnOffsetCommit (pending) one.
_OFFSET = (
    "topic",
    "partition",
    "committed_offset",
    "committed_leader_epoch",
    "commit_metadata",
    "commit_timestamp",
)
# The columns each record type may fill (besides _ALWAYS).
_FILLS: dict[int, tuple[str, ...]] = {
    1: (*_OFFSET, "expire_timestamp", "previous_committed_offset", "previous_commit_at"),
    2: (
        "protocol_type",
        "generation",
        "protocol_name",
        "leader",
        "classic_members",
        "classic_rebalance_protocol",
        "rebalance_preparing_at",
        "rebalance_completing_at",
        "rebalance_cause",
        "rebalance_client_reason",
        "classic_removed_members",
    ),
    3: ("group_epoch", "group_uid"),
    4: ("subscription_metadata",),
    5: (
        "member_id",
        "instance_id",
        "rack_id",
        "client_id",
        "client_host",
        "subscribed_topic_names",
        "subscribed_topic_regex",
        "server_assignor",
        "rebalance_timeout_ms",
        "classic_member",
        "classic_session_timeout_ms",
    ),
    6: ("assignment_epoch",),
    7: ("member_id", "target_partitions"),
    8: (
        "member_id",
        "member_epoch",
        "previous_member_epoch",
        "member_state",
        "assigned_partitions",
        "pending_revocation_partitions",
        "rack_local_partitions",
    ),
    16: ("regular_expression", "regex_topics", "regex_topics_version"),
    1016: ("config_name", "config_value"),
    1100: ("topic", "topic_id", "num_partitions"),
    1104: ("config_name", "config_value"),
    1106: (
        "acl_resource_type",
        "acl_resource_name",
        "acl_pattern_type",
        "acl_principal",
        "acl_host",
        "acl_operation",
        "acl_permission_type",
    ),
    1111: ("scram_user", "scram_mechanism", "scram_iterations"),
    1001: (*_OFFSET, "producer_id", "producer_epoch"),
    1002: ("producer_id", "producer_epoch", "transactional_id", "transaction_state"),
    1120: ("transactional_id", "transaction_group_id"),
}


class Decoder:
    """Fills one row's typed columns from a decoded record."""

    def __init__(self, topic_names: dict[str, str]) -> None:
        self.names = topic_names  # topic id -> name
        # For rack_local_partitions: topic id -> partition racks, (group, member) -> rack.
        self.racks: dict[str, Mapping[int, frozenset[str]]] = {}
        self.member_racks: dict[tuple[str, str], str] = {}
        self._handlers: dict[type, Callable[[dict[str, list[Any]], int, Any, Any], None]] = {
            r.OffsetCommitKey: self._offset_commit,
            r.GroupMetadataKey: self._classic_group,
            r.ConsumerGroupMetadataKey: self._group_epoch,
            r.ConsumerGroupPartitionMetadataKey: self._partition_metadata,
            r.ConsumerGroupMemberMetadataKey: self._member_metadata,
            r.ConsumerGroupTargetAssignmentMetadataKey: self._target_epoch,
            r.ConsumerGroupTargetAssignmentMemberKey: self._target_member,
            r.ConsumerGroupCurrentMemberAssignmentKey: self._current_assignment,
            r.ConsumerGroupRegularExpressionKey: self._regex,
            r.GroupConfigKey: self._group_config,
            r.TopicKey: self._topic,
            r.ConfigKey: self._config,
            r.AccessControlEntryKey: self._acl,
            r.UserScramCredentialKey: self._scram_credential,
            r.TxnOffsetCommitKey: self._txn_offset_commit,
            r.GroupTransactionKey: self._group_transaction,
            r.TransactionalIdGroupKey: self._transactional_id_group,
        }

    def fill(self, cols: dict[str, list[Any]], i: int, record: r.Record) -> None:
        key = record.key
        self._handlers[type(key)](cols, i, key, record.value)

    def _parts(self, assignment: Any) -> list[tuple[str, str, int]]:
        names = self.names
        out: list[tuple[str, str, int]] = []
        for topic_id in sorted(assignment):
            name = names.get(topic_id, topic_id)
            out.extend((name, topic_id, p) for p in sorted(assignment[topic_id]))
        return out

    @staticmethod
    def _offset_commit(cols: dict[str, list[Any]], i: int, key: Any, v: Any) -> None:
        fields = None
        if v is not None:
            fields = (
                v.offset,
                v.leader_epoch,
                v.metadata,
                v.commit_timestamp_ms,
                v.expire_timestamp_ms,
            )
        _put_commit(cols, i, key.topic, key.partition, fields)

    def _classic_group(self, cols: dict[str, list[Any]], i: int, key: Any, v: Any) -> None:
        if v is None:
            return
        cols["protocol_type"][i] = v.protocol_type
        cols["generation"][i] = v.generation
        cols["protocol_name"][i] = v.protocol
        cols["leader"][i] = v.leader
        consumer = v.protocol_type == "consumer"
        members = []
        owns = False
        for m in v.members:
            topics, parts = None, None
            if consumer:
                topics, parts, owned = _decode_classic(m.subscription, m.assignment)
                owns = owns or owned
            members.append(
                (
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.rebalance_timeout_ms,
                    m.session_timeout_ms,
                    topics,
                    parts,
                )
            )
        cols["classic_members"][i] = members
        if consumer and v.members:
            cooperative = owns or v.protocol == COOPERATIVE_STICKY
            cols["classic_rebalance_protocol"][i] = "cooperative" if cooperative else "eager"
        rb = v.rebalance
        if rb is not None:
            cols["rebalance_preparing_at"][i] = rb.preparing_ms * 1000
            cols["rebalance_completing_at"][i] = rb.completing_ms * 1000
            cols["rebalance_cause"][i] = rb.cause
            cols["rebalance_client_reason"][i] = rb.client_reason
            cols["classic_removed_members"][i] = [
                (x.member_id, x.cause, x.removed_ms * 1000) for x in rb.removed
            ]

    @staticmethod
    def _group_epoch(cols: dict[str, list[Any]], i: int, key: Any, v: Any) -> None:
        if v is not None:
            cols["group_epoch"][i] = v.epoch
            cols["group_uid"][i] = v.group_uid

    def _partition_metadata(self, cols: dict[str, list[Any]], i: int, key: Any, v: Any) -> None:
        if v is None:
            return
        for t in v.topics:
            self.names[t.topic_id] = t.name
            self.racks[t.topic_id] = t.partition_racks
        cols["subscription_metadata"][i] = [
            (t.name, t.topic_id, t.num_partitions) for t in v.topics
        ]

    def _member_metadata(self, cols: dict[str, list[Any]], i: int, key: Any, v: Any) -> None:
        cols["member_id"][i] = key.member_id
        if v is None or v.rack_id is None:
            self.member_racks.pop((key.group_id, key.member_id), None)
        else:
            self.member_racks[(key.group_id, key.member_id)] = v.rack_id
        if v is None:
            return
        cols["instance_id"][i] = v.instance_id
        cols["rack_id"][i] = v.rack_id
        cols["client_id"][i] = v.client_id
        cols["client_host"][i] = v.client_host
        cols["subscribed_topic_names"][i] = list(v.subscribed_topic_names)
        cols["subscribed_topic_regex"][i] = v.subscribed_topic_regex
        cols["server_assignor"][i] = v.server_assignor
        cols["rebalance_timeout_ms"][i] = v.rebalance_timeout_ms
        classic = v.classic_member_metadata
        cols["classic_member"][i] = classic is not None
        if classic is not None:
            cols["classic_session_timeout_ms"][i] = classic.session_timeout_ms

    @staticmethod
    def _target_epoch(cols: dict[str, list[Any]], i: int, key: Any, v: Any) -> None:
        if v is not None:
            cols["assignment_epoch"][i] = v.assignment_epoch

    def _target_member(self, cols: dict[str, list[Any]], i: int, key: Any, v: Any) -> None:
        cols["member_id"][i] = key.member_id
        if v is not None:
            cols["target_partitions"][i] = self._parts(v.topic_partitions)

    def _current_assignment(self, cols: dict[str, list[Any]], i: int, key: Any, v: Any) -> None:
        cols["member_id"][i] = key.member_id
        if v is None:
            return
        cols["member_epoch"][i] = v.member_epoch
        cols["previous_member_epoch"][i] = v.previous_member_epoch
        cols["member_state"][i] = _STATE_NAMES.get(v.state, "UNKNOWN")
        cols["assigned_partitions"][i] = self._parts(v.assigned_partitions)
        cols["pending_revocation_partitions"][i] = self._parts(v.partitions_pending_revocation)
        rack = self.member_racks.get((key.group_id, key.member_id))
        known = [
            (self.racks[t], ps) for t, ps in v.assigned_partitions.items() if self.racks.get(t)
        ]
        if rack is not None and known:
            cols["rack_local_partitions"][i] = sum(
                1 for racks, ps in known for p in ps if rack in racks.get(p, ())
            )

    @staticmethod
    def _regex(cols: dict[str, list[Any]], i: int, key: Any, v: Any) -> None:
        cols["regular_expression"][i] = key.regular_expression
        if v is not None:
            cols["regex_topics"][i] = list(v.topics)
            cols["regex_topics_version"][i] = v.version

    @staticmethod
    def _group_config(cols: dict[str, list[Any]], i: int, key: Any, v: Any) -> None:
        cols["config_name"][i] = key.name
        if v is not None:
            cols["config_value"][i] = v.value

    @staticmethod
    def _config(cols: dict[str, list[Any]], i: int, key: Any, v: Any) -> None:
        """A cluster log's config: of the group its resource names (its only kind)."""
        cols["group_id"][i] = key.resource_name
        cols["config_name"][i] = key.name
        if v is not None:
            cols["config_value"][i] = v.value

    def _topic(self, cols: dict[str, list[Any]], i: int, key: Any, v: Any) -> None:
        cols["topic"][i] = key.name
        if v is not None:
            self.names[v.topic_id] = key.name
            self.racks[v.topic_id] = v.partition_racks
            cols["topic_id"][i] = v.topic_id
            cols["num_partitions"][i] = v.num_partitions

    @staticmethod
    def _acl(cols: dict[str, list[Any]], i: int, key: Any, v: Any) -> None:
        b = AclBinding.of_key(key)
        cols["acl_resource_type"][i] = b.resource_type.name
        cols["acl_resource_name"][i] = b.resource_name
        cols["acl_pattern_type"][i] = b.pattern_type.name
        cols["acl_principal"][i] = b.principal
        cols["acl_host"][i] = b.host
        cols["acl_operation"][i] = b.operation.name
        cols["acl_permission_type"][i] = b.permission_type.name

    @staticmethod
    def _scram_credential(cols: dict[str, list[Any]], i: int, key: Any, v: Any) -> None:
        # The salt and the keys are secrets (they allow an offline guess of the password):
        # only who, which mechanism and how many iterations are exported.
        cols["scram_user"][i] = key.name
        cols["scram_mechanism"][i] = ScramMechanism(key.mechanism).mechanism_name
        if v is not None:
            cols["scram_iterations"][i] = v.iterations

    @staticmethod
    def _txn_offset_commit(cols: dict[str, list[Any]], i: int, key: Any, v: Any) -> None:
        cols["producer_id"][i] = key.producer_id
        fields = None
        if v is not None:
            cols["producer_epoch"][i] = v.producer_epoch
            fields = (v.offset, v.leader_epoch, v.metadata, v.commit_timestamp_ms, -1)
        _put_commit(cols, i, key.topic, key.partition, fields)

    @staticmethod
    def _group_transaction(cols: dict[str, list[Any]], i: int, key: Any, v: Any) -> None:
        cols["producer_id"][i] = key.producer_id
        if v is not None:
            cols["producer_epoch"][i] = v.producer_epoch
            cols["transactional_id"][i] = v.transactional_id
            cols["transaction_state"][i] = _TRANSACTION_STATES[v.state]

    @staticmethod
    def _transactional_id_group(cols: dict[str, list[Any]], i: int, key: Any, v: Any) -> None:
        cols["transactional_id"][i] = key.transactional_id
        if v is not None:
            cols["transaction_group_id"][i] = v.group_id


_TRANSACTION_STATES = {
    r.TransactionState.ONGOING: "Ongoing",
    r.TransactionState.PREPARE_COMMIT: "PrepareCommit",
    r.TransactionState.PREPARE_ABORT: "PrepareAbort",
    r.TransactionState.COMPLETE_ABORT: "CompleteAbort",
    r.TransactionState.COMPLETE_COMMIT: "CompleteCommit",
}
"""Kafka's names of the transaction states (TransactionState in its transaction coordinator)."""

COMMIT = RECORD_TYPES[1]
_COMMIT_VALUE_TYPES = (int, int, str, int, int)


def _put_commit(
    cols: dict[str, list[Any]], i: int, topic: str, partition: int, v: Sequence[Any] | None
) -> None:
    """An offset commit's columns; ``v``: (offset, leader epoch, metadata, commit time,
    expire time in ms), None for a tombstone."""
    cols["topic"][i] = topic
    cols["partition"][i] = partition
    if v is not None:
        cols["committed_offset"][i] = v[0]
        cols["committed_leader_epoch"][i] = v[1]
        cols["commit_metadata"][i] = v[2]
        cols["commit_timestamp"][i] = v[3] * 1000
        if v[4] >= 0:
            cols["expire_timestamp"][i] = v[4] * 1000


def _fill_commit(cols: dict[str, list[Any]], i: int, key: bytes, value: bytes | None) -> bool:
    """An OffsetCommit record (most of a journal) straight from its bytes, without building
    the record: the codec's layout (``[1, group, topic, partition]``; ``[version, offset,
    leader epoch, metadata, commit time, expire time]``). False, with nothing written, for
    bytes that are not exactly that: the codec then decodes them (or says why it cannot)."""
    try:
        k = orjson.loads(key)
        v = None if value is None else orjson.loads(value)
    except orjson.JSONDecodeError:
        return False
    if (
        type(k) is not list
        or len(k) != 4
        or k[0] != 1
        or type(k[1]) is not str
        or type(k[2]) is not str
        or type(k[3]) is not int
    ):
        return False
    if v is not None:
        if type(v) is not list or len(v) != 6:
            return False
        v = v[1:]
        if tuple(map(type, v)) != _COMMIT_VALUE_TYPES:
            return False
    _put_commit(cols, i, k[2], k[3], v)
    return True


_ROW_COLUMNS = (
    "offset",
    "timestamp",
    "shard",
    "group_id",
    "record_type",
    "record_type_id",
    "tombstone",
    "committed_offset",
    "previous_committed_offset",
    "previous_commit_at",
)


def _row_columns(cols: dict[str, list[Any]]) -> tuple[list[Any], ...]:
    """The lists :func:`export_log` fills itself, for every row or every offset commit."""
    return tuple(cols[c] for c in _ROW_COLUMNS)


def _decode_classic(
    subscription: bytes, assignment: bytes
) -> tuple[list[str] | None, list[tuple[str, None, int]] | None, bool]:
    """A classic member's subscribed topics, its assignment (None for bytes that do not
    decode) and whether its subscription lists partitions it owns."""
    from legacy_bridge.protocol import ProtocolError, decode_assignment, decode_subscription

    topics: list[str] | None = None
    parts: list[tuple[str, None, int]] | None = None
    owns = False
    try:
        if subscription:
            sub = decode_subscription(subscription)
            topics = sorted(set(sub.topics))
            owns = any(ps for _t, ps in sub.owned_partitions)
    except ProtocolError:
        topics = None
    try:
        if assignment:
            decoded = decode_assignment(assignment).assigned_partitions
            parts = [(t, None, p) for t, ps in sorted(decoded) for p in sorted(ps)]
        else:
            parts = []
    except ProtocolError:
        parts = None
    return topics, parts, owns


@dataclass(slots=True)
class LogExport:
    """What :func:`export_log` exported of a log."""

    rows: int = 0
    first_offset: int | None = None
    last_offset: int | None = None


def export_log(
    chunks: Iterable[list[tuple[int, int, str | None, bytes, bytes | None]]],
    log_id: int,
    shard: int | None,
    decoder: Decoder,
    emit: Callable[[pa.Table], None],
    *,
    since_ms: int | None,
    until_ms: int | None,
    row_group_rows: int,
    where: str,
    advance: Callable[[int], None] = lambda n: None,
) -> LogExport:
    """A log's journal entries (chunks of ``(offset, timestamp_ms, group_id, key, value)``,
    in offset order) -> tables of up to ``row_group_rows`` rows, each given to ``emit``.
    ``shard``: the coordinator partition of its group records (None: the cluster log);
    ``where``: the store, for errors; ``advance``: told how many entries each chunk had."""
    done = LogExport()
    decode = codec.decode
    fill = decoder.fill
    fill_commit = _fill_commit
    last_commit: dict[bytes, tuple[int, int]] = {}
    chunk = _Chunk(row_group_rows)

    def flush(n: int, seen: set[int]) -> None:
        chunk.n = n
        for t in seen:
            chunk.touched.update(_FILLS[t])
        if n:
            emit(chunk.table())
            done.rows += n

    cols = chunk.cols
    c_off, c_ts, c_shard, c_gid, c_type, c_type_id, c_tomb, c_committed, c_prev, c_prev_at = (
        _row_columns(cols)
    )
    seen_types: set[int] = {1}  # offset commits: nearly every chunk
    i = 0
    for entries in chunks:
        for offset, ts, gid, key, value in entries:
            if since_ms is not None and ts < since_ms:
                continue
            if until_ms is not None and ts >= until_ms:
                continue
            ts_us = ts * 1000
            if key[:3] == b"[1," and fill_commit(cols, i, key, value):
                commit = True
                c_type[i] = COMMIT
                c_type_id[i] = 1
            else:
                try:
                    record = decode(key, value)
                except Exception as exc:
                    raise ExportError(
                        f"the store in {where} is corrupt: the record at offset "
                        f"{offset} of log {log_id} does not decode: {exc}"
                    ) from exc
                type_id = record.key.TYPE
                seen_types.add(type_id)
                c_type[i] = RECORD_TYPES[type_id]
                c_type_id[i] = type_id
                fill(cols, i, record)
                commit = type_id == 1
            if commit and value is not None:
                # The partition's previous commit in the export (deletions skipped), by the
                # record's key: the group, topic and partition.
                prev = last_commit.get(key)
                if prev is not None:
                    c_prev[i], c_prev_at[i] = prev
                last_commit[key] = (c_committed[i], ts_us)
            c_off[i] = offset
            c_ts[i] = ts_us
            if gid is not None:
                c_gid[i] = gid
                c_shard[i] = shard
            c_tomb[i] = value is None
            if done.first_offset is None:
                done.first_offset = offset
            done.last_offset = offset
            i += 1
            if i == chunk.size:
                flush(i, seen_types)
                chunk = _Chunk(row_group_rows)
                cols = chunk.cols
                c_off, c_ts, c_shard, c_gid, c_type, c_type_id, c_tomb = _row_columns(cols)[:7]
                c_committed, c_prev, c_prev_at = _row_columns(cols)[7:]
                seen_types = {1}
                i = 0
        advance(len(entries))
    flush(i, seen_types)
    return done
