"""An OffsetCommit as the core takes it (``offsets.py`` serves it; the classic groups validate
it, ``components.ClassicGroupSupport``): apart, so that neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass

from .model import ZERO_TOPIC_ID


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
    retention_time_ms: int = -1
    """OffsetCommit v2-v4's RetentionTimeMs: -1 keeps the offsets by ``offsets.retention.minutes``;
    another value makes them expire that long after the commit (Kafka's expireTimestampMs)."""
