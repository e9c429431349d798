"""``kip848 analytics export``: a store's journal -> one Parquet file (schema: :mod:`.schema`).

The store is opened read-only (``SqliteRecordStore(read_only=True)``, like ``kip848 dump``): no
writer lock is taken and SQLite's WAL snapshot isolation gives a consistent view, so exporting
is safe while a server runs on the same data directory. Records are decoded with the core's
codec (``codec.decode``) and written in row groups as they are read (memory stays bounded),
first into ``<out>.partial`` and renamed at the end: a failed export leaves no half file.

Topic ids in assignments are resolved to names through the store's topic records (the
compacted view's, then every Topic and ConsumerGroupPartitionMetadata record in the journal
as it goes by).
"""

from __future__ import annotations

import contextlib
import gc
import importlib.metadata
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from coordinator.core import codec
from coordinator.core import records as r
from coordinator.core.model import MemberState
from coordinator.security.acls import AclBinding
from coordinator.security.scram import ScramMechanism

from .schema import COLUMNS, RECORD_TYPES, SCHEMA, ExportInfo

__all__ = ["ExportError", "ExportResult", "export_journal", "parse_time"]

ROW_GROUP_ROWS = 131_072
COOPERATIVE_STICKY = "cooperative-sticky"
"""The classic protocol name of Kafka's (and librdkafka's) cooperative assignor (KIP-429)."""
_STATE_NAMES = {s.value: s.name for s in MemberState}


class ExportError(Exception):
    """The export cannot be done (no store, a corrupt store, a bad argument). The message says
    what and where; the CLI prints it and exits 1."""


@dataclass(frozen=True, slots=True)
class ExportResult:
    path: Path
    info: ExportInfo
    seconds: float


def parse_time(text: str) -> int:
    """``--since``/``--until``: epoch milliseconds, or an ISO-8601 date/time (UTC unless it
    names its zone). Returns epoch milliseconds."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"not a time: {text!r} (use epoch milliseconds or ISO 8601, e.g. 2026-11-23T10:00:00Z)"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


def _fmt_ms(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def _package_version() -> str:
    try:
        return "kip848-coordinator " + importlib.metadata.version("kip848-coordinator")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover
        return "kip848-coordinator"


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
# The columns each record type may fill (besides _ALWAYS).
_FILLS: dict[int, tuple[str, ...]] = {
    1: (
        "topic",
        "partition",
        "committed_offset",
        "committed_leader_epoch",
        "commit_metadata",
        "commit_timestamp",
        "expire_timestamp",
        "previous_committed_offset",
        "previous_commit_at",
    ),
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
}


class _Decoder:
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
            r.AccessControlEntryKey: self._acl,
            r.UserScramCredentialKey: self._scram_credential,
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


def _commit_columns(cols: dict[str, list[Any]]) -> tuple[list[Any], ...]:
    return tuple(
        cols[c] for c in ("committed_offset", "previous_committed_offset", "previous_commit_at")
    )


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


def _compacted_topic_names(store: Any) -> dict[str, str]:
    from coordinator.runtime.store import CLUSTER_LOG

    names: dict[str, str] = {}
    for rows in store.load_rows(CLUSTER_LOG):
        for _offset, key, value, group_id in rows:
            if group_id is None:
                rec = codec.decode(key, value)
                if isinstance(rec.key, r.TopicKey) and isinstance(rec.value, r.TopicValue):
                    names[rec.value.topic_id] = rec.key.name
    return names


def export_journal(
    data_dir: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    since_ms: int | None = None,
    until_ms: int | None = None,
    session_timeout_ms: int = 45_000,
    assignors: tuple[str, ...] = ("uniform", "range"),
    progress: bool = False,
    warn: Callable[[str], None] | None = None,
    row_group_rows: int = ROW_GROUP_ROWS,
) -> ExportResult:
    """Write the journals of the store in ``data_dir`` to the Parquet file ``out``: the cluster
    log's, then each partition's, each in offset order.

    Raises :class:`ExportError` for a missing, foreign or corrupt store (including a record
    that does not decode) and for bad arguments; ``warn`` gets a warning when retention has
    already trimmed a journal inside the range asked for."""
    from coordinator.runtime.store import CLUSTER_LOG, SqliteRecordStore, StoreError, log_ids

    if since_ms is not None and until_ms is not None and until_ms <= since_ms:
        raise ExportError("--until must be later than --since")
    started = time.perf_counter()
    out_path = Path(out)
    if out_path.is_dir():
        raise ExportError(f"{out_path} is a directory; --out names the Parquet file to write")
    try:
        store = SqliteRecordStore(data_dir, read_only=True)
    except StoreError as exc:
        raise ExportError(str(exc)) from exc
    warnings: list[str] = []
    with store:
        try:
            stats = store.stats()
            names = _compacted_topic_names(store)
        except StoreError as exc:
            raise ExportError(str(exc)) from exc
        except Exception as exc:
            raise ExportError(f"the store in {data_dir} is corrupt: {exc}") from exc
        logs = stats["logs"]
        # Over every log, as one log's figures were: records ever written minus one, records
        # retention removed (the first offset a journal still holds).
        last_offset = sum(log["last_offset"] + 1 for log in logs.values()) - 1
        expired = sum(
            log["last_offset"] + 1
            if log["journal_first_offset"] is None
            else log["journal_first_offset"]
            for log in logs.values()
        )
        journal_first = None if stats["journal_entries"] == 0 else expired
        trimmed = expired > 0
        if stats["journal_entries"] == 0 and last_offset >= 0:
            warnings.append(
                f"journal retention already removed every record ({last_offset + 1} records);"
                " nothing to export"
            )
        for log_id in log_ids(store.partitions) if stats["journal_entries"] else ():
            log = logs[log_id]
            first = log["journal_first_offset"]
            if not first:  # None (empty) or 0 (untrimmed)
                continue
            first_ts = next(store.journal(log_id, from_offset=first, to_offset=first + 1))
            if since_ms is None or since_ms < first_ts.timestamp_ms:
                asked = "the range asked for" if since_ms is not None else "the journal"
                where = "the cluster log" if log_id == CLUSTER_LOG else f"partition {log_id}"
                warnings.append(
                    f"journal retention already trimmed {asked} of {where}: records at offsets "
                    f"0..{first - 1} are gone; its export starts at offset {first} "
                    f"({_fmt_ms(first_ts.timestamp_ms)}), so groups older than that are seen "
                    "mid-history"
                )
        for w in warnings:
            if warn is not None:
                warn(w)
        earliest = min(
            (
                next(store.journal(log_id)).timestamp_ms
                for log_id, log in logs.items()
                if log["journal_entries"]
            ),
            default=None,
        )
        cut_start = since_ms is not None and earliest is not None and since_ms > earliest
        complete = not trimmed and not cut_start
        partial = out_path.with_name(out_path.name + ".partial")
        out_path.parent.mkdir(parents=True, exist_ok=True)
        decoder = _Decoder(names)
        rows = 0
        first_exported: int | None = None
        last_exported: int | None = None
        total = stats["journal_entries"]
        try:
            writer = _Writer(
                pq.ParquetWriter(
                    partial,
                    SCHEMA,
                    compression="zstd",
                    coerce_timestamps="us",
                    allow_truncated_timestamps=True,
                ),
                row_group_rows,
            )
        except OSError as exc:
            raise ExportError(f"cannot write {out_path}: {exc}") from exc
        try:
            with _progress(progress, total) as advance, _no_cyclic_gc():
                chunk = _Chunk(row_group_rows)
                decode = codec.decode
                fill = decoder.fill
                fill_commit = _fill_commit
                last_commit: dict[bytes, tuple[int, int]] = {}
                for log_id, entries in _journal_chunks(store, log_ids(store.partitions)):
                    shard = None if log_id == CLUSTER_LOG else log_id
                    cols = chunk.cols
                    c_off, c_ts, c_shard, c_gid = (
                        cols["offset"],
                        cols["timestamp"],
                        cols["shard"],
                        cols["group_id"],
                    )
                    c_type, c_type_id, c_tomb = (
                        cols["record_type"],
                        cols["record_type_id"],
                        cols["tombstone"],
                    )
                    c_committed, c_prev, c_prev_at = _commit_columns(cols)
                    seen_types: set[int] = {1}  # offset commits: nearly every chunk
                    i = chunk.n
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
                                    f"the store in {data_dir} is corrupt: the record at offset "
                                    f"{offset} of log {log_id} does not decode: {exc}"
                                ) from exc
                            type_id = record.key.TYPE
                            seen_types.add(type_id)
                            c_type[i] = RECORD_TYPES[type_id]
                            c_type_id[i] = type_id
                            fill(cols, i, record)
                            commit = type_id == 1
                        if commit and value is not None:
                            # The partition's previous commit in the export (deletions skipped),
                            # by the record's key: the group, topic and partition.
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
                        if first_exported is None:
                            first_exported = offset
                        last_exported = offset
                        i += 1
                        if i == chunk.size:
                            chunk.n = i
                            for t in seen_types:
                                chunk.touched.update(_FILLS[t])
                            writer.write(chunk.table())
                            rows += i
                            chunk = _Chunk(row_group_rows)
                            cols = chunk.cols
                            c_off, c_ts, c_shard, c_gid = (
                                cols["offset"],
                                cols["timestamp"],
                                cols["shard"],
                                cols["group_id"],
                            )
                            c_type, c_type_id, c_tomb = (
                                cols["record_type"],
                                cols["record_type_id"],
                                cols["tombstone"],
                            )
                            c_committed, c_prev, c_prev_at = _commit_columns(cols)
                            seen_types = {1}
                            i = 0
                    chunk.n = i
                    for t in seen_types:
                        chunk.touched.update(_FILLS[t])
                    advance(len(entries))
                if chunk.n:
                    writer.write(chunk.table())
                    rows += chunk.n
            info = ExportInfo(
                store=str(store.path),
                exported_at_ms=int(time.time() * 1000),
                created_by=_package_version(),
                shards=store.partitions,
                session_timeout_ms=session_timeout_ms,
                assignors=tuple(assignors),
                since_ms=since_ms,
                until_ms=until_ms,
                first_offset=first_exported,
                last_offset=last_exported,
                rows=rows,
                store_last_offset=last_offset,
                journal_first_offset=journal_first,
                complete=complete,
                warnings=tuple(warnings),
            )
            writer.close(info.to_metadata())
        except BaseException as exc:
            with contextlib.suppress(BaseException):
                writer.abort()
            partial.unlink(missing_ok=True)
            if isinstance(exc, StoreError):
                raise ExportError(str(exc)) from exc
            if isinstance(exc, OSError):
                raise ExportError(f"cannot write {out_path}: {exc}") from exc
            raise
    os.replace(partial, out_path)
    return ExportResult(out_path, info, time.perf_counter() - started)


class _Writer:
    """The Parquet file, written by a thread of its own: encoding and compressing a row group
    (pyarrow releases the GIL) overlaps with decoding the next one. One row group at most
    waits to be written."""

    def __init__(self, writer: pq.ParquetWriter, row_group_rows: int) -> None:
        self._writer = writer
        self._rows = row_group_rows
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="kip848-export-writer")
        self._pending: Future[None] | None = None

    def _wait(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()  # a failed write raises here

    def write(self, table: pa.Table) -> None:
        self._wait()
        self._pending = self._thread.submit(
            self._writer.write_table, table, row_group_size=self._rows
        )

    def close(self, metadata: dict[bytes, bytes]) -> None:
        self._wait()
        self._thread.shutdown()
        self._writer.add_key_value_metadata(metadata)
        self._writer.close()

    def abort(self) -> None:
        try:
            self._wait()
        finally:
            self._thread.shutdown()
            self._writer.close()


def _journal_chunks(store: Any, logs: range) -> Iterator[tuple[int, list[Any]]]:
    """Each log's journal in turn, as (log, up to 8,192 ``(offset, timestamp_ms, group_id,
    key, value)`` rows): one progress update each."""
    for log_id in logs:
        for rows in store.journal_rows(log_id):
            yield log_id, rows


@contextlib.contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """The cyclic garbage collector paused: the export's millions of short-lived tuples and
    lists hold no cycles (reference counting frees them), yet they would set it off every few
    hundred rows (about a tenth of the export's time, measured)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextlib.contextmanager
def _progress(enabled: bool, total: int) -> Iterator[Callable[[int], None]]:
    if not enabled:
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(
        TextColumn("exporting journal"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=False,
    ) as bar:
        task = bar.add_task("export", total=total)
        yield lambda n: bar.advance(task, n)
