"""Protobuf <-> the member's dataclasses (the only module of the client that knows the wire).

The pitfalls a hand-written member hits are handled here once: owned partitions travel by
topic id (16 raw bytes), never by name; ``topic_partitions`` is a wrapper message, present
and empty on a join ("no partitions") and absent otherwise when unchanged; absent optional
fields mean Kafka's null ("unchanged").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kip848.v1 import common_pb2, consumer_group_pb2, offsets_pb2

from .member import HeartbeatRequest, HeartbeatResponse
from .types import Partitions, TopicId, TopicPartition, partitions_of, topic_id_from_bytes
from .types import topic_id_to_bytes as id_bytes


def _topic_partitions(parts: Partitions) -> list[common_pb2.TopicPartitions]:
    return [
        common_pb2.TopicPartitions(topic_id=id_bytes(t), partitions=sorted(parts[t]))
        for t in sorted(parts)
    ]


def heartbeat_request_to_proto(
    req: HeartbeatRequest,
) -> consumer_group_pb2.ConsumerGroupHeartbeatRequest:
    out = consumer_group_pb2.ConsumerGroupHeartbeatRequest(
        group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch
    )
    if req.instance_id is not None:
        out.instance_id = req.instance_id
    if req.rack_id is not None:
        out.rack_id = req.rack_id
    if req.rebalance_timeout_ms != -1:
        out.rebalance_timeout_ms = req.rebalance_timeout_ms
    if req.subscribed_topic_names is not None:
        # SetInParent marks the wrapper present even when the list is empty.
        out.subscribed_topic_names.SetInParent()
        out.subscribed_topic_names.names.extend(req.subscribed_topic_names)
    if req.subscribed_topic_regex is not None:
        out.subscribed_topic_regex = req.subscribed_topic_regex
    if req.server_assignor is not None:
        out.server_assignor = req.server_assignor
    if req.topic_partitions is not None:
        out.topic_partitions.SetInParent()
        out.topic_partitions.items.extend(_topic_partitions(req.topic_partitions))
    return out


def _from_items(
    items: Iterable[common_pb2.TopicPartitions], names: dict[TopicId, str]
) -> dict[TopicId, frozenset[int]]:
    pairs = []
    for tp in items:
        topic_id = topic_id_from_bytes(tp.topic_id)
        if tp.topic_name:
            names[topic_id] = tp.topic_name
        pairs.append((topic_id, tp.partitions))
    return partitions_of(pairs)


def heartbeat_response_from_proto(
    resp: consumer_group_pb2.ConsumerGroupHeartbeatResponse,
) -> HeartbeatResponse:
    names: dict[TopicId, str] = {}
    assigned = pending = None
    if resp.HasField("assignment"):
        assigned = _from_items(resp.assignment.assigned_topic_partitions, names)
        pending = _from_items(resp.assignment.pending_topic_partitions, names)
    return HeartbeatResponse(
        error_code=resp.error_code,
        error_message=resp.error_message if resp.HasField("error_message") else None,
        member_id=resp.member_id if resp.HasField("member_id") else None,
        member_epoch=resp.member_epoch,
        heartbeat_interval_ms=resp.heartbeat_interval_ms,
        assigned=assigned,
        pending=pending,
        topic_names=names,
    )


def offset_commit_request(
    *,
    group_id: str,
    member_id: str,
    member_epoch: int,
    instance_id: str | None,
    offsets: Mapping[TopicPartition, int],
    metadata: str | None,
) -> offsets_pb2.OffsetCommitRequest:
    """Topics are addressed by id when known (a re-created topic with the same name is another
    topic), else by name."""
    by_topic: dict[tuple[str, str], list[offsets_pb2.OffsetCommitRequest.Partition]] = {}
    for tp in sorted(offsets):
        part = offsets_pb2.OffsetCommitRequest.Partition(
            partition_index=tp.partition, committed_offset=offsets[tp]
        )
        if metadata is not None:
            part.committed_metadata = metadata
        by_topic.setdefault((tp.topic_id, tp.topic), []).append(part)
    out = offsets_pb2.OffsetCommitRequest(
        group_id=group_id, member_id=member_id, generation_id_or_member_epoch=member_epoch
    )
    if instance_id is not None:
        out.group_instance_id = instance_id
    for (topic_id, name), parts in by_topic.items():
        out.topics.add(name="" if topic_id else name, topic_id=id_bytes(topic_id), partitions=parts)
    return out


def offset_commit_errors(
    resp: offsets_pb2.OffsetCommitResponse, sent: Iterable[TopicPartition]
) -> dict[TopicPartition, tuple[int, str]]:
    """Each partition sent -> (error code, message); a request-level error applies to all, and
    a partition the response does not mention failed with UNKNOWN_SERVER_ERROR."""
    sent = list(sent)
    if resp.error_code:
        msg = resp.error_message if resp.HasField("error_message") else ""
        return dict.fromkeys(sent, (resp.error_code, msg))
    answered: dict[tuple[str, str, int], tuple[int, str]] = {}
    for topic in resp.topics:
        topic_id = topic_id_from_bytes(topic.topic_id) if len(topic.topic_id) == 16 else ""
        for p in topic.partitions:
            entry = (p.error_code, p.error_message if p.HasField("error_message") else "")
            answered[(topic_id, "", p.partition_index)] = entry
            answered[("", topic.name, p.partition_index)] = entry
    out = {}
    for tp in sent:
        key = (tp.topic_id, "" if tp.topic_id else tp.topic, tp.partition)
        out[tp] = answered.get(key, (-1, "the coordinator did not answer for this partition"))
    return out
