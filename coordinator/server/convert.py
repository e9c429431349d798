"""Protobuf <-> the service layer's dataclasses: the one place where gRPC's wire types meet
the core (``service.py`` defines each RPC; ``services.py`` runs them over gRPC).

Rules: absent proto3 ``optional`` scalars map to None (or -1 where Kafka's default is -1);
wrapper lists (``TopicNames``, ``TopicPartitionsList``) map absent -> None and present-but-empty
-> empty. A field given None is left unset (protobuf's rule for message constructors), so an
absent optional value stays absent. Topic ids travel as 16 raw bytes and are base64url text in the core; bytes that are
not 16 long raise :class:`InvalidRequestError` (answered in-band as INVALID_REQUEST).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from coordinator.core.commands import ConsumerGroupHeartbeat, ConsumerGroupHeartbeatResponse
from coordinator.core.errors import CoordinatorError, ErrorCode, InvalidRequestError
from coordinator.core.model import (
    ZERO_TOPIC_ID,
    Assignment,
    make_assignment,
    partition_racks_groups,
    topic_id_from_bytes,
    topic_id_to_bytes,
)
from coordinator.core.offsets import (
    ListedGroup,
    OffsetCommit,
    OffsetCommitPartition,
    OffsetCommitResponse,
    OffsetCommitTopic,
    OffsetDeleteResponse,
    OffsetFetchGroup,
    OffsetFetchGroupResponse,
    OffsetFetchTopic,
)
from coordinator.core.topics import NewTopic, TopicResult
from coordinator.security.acls import AclBinding
from kip848.v1 import admin_pb2, classic_group_pb2, common_pb2, consumer_group_pb2, offsets_pb2
from legacy_bridge import messages as bridge

from . import codec
from .api import (
    AclSpec,
    AlterResult,
    AlterScramCredentials,
    ConfigResource,
    ConfigResult,
    Coordinator,
    DescribeConfigs,
    DescribedConsumerGroup,
    GroupError,
    IncrementalAlterConfigs,
    Node,
    Reply,
    TopicChanges,
    WatchEvent,
)
from .log_offsets import ListOffsets, LogOffset, OffsetQuery

M = TypeVar("M")
X = TypeVar("X")


def with_error(message_type: type[M], code: ErrorCode, text: str | None, **fields: Any) -> M:
    """A response of ``message_type`` carrying a top-level error."""
    make: Any = message_type
    out: M = make(error_code=int(code), error_message=text, **fields)
    return out


def reply_to_proto(message_type: type[M], reply: Reply[Any], encode: Callable[[Any], M]) -> M:
    """``encode(reply.value)``, or, for a top-level error, the response type with that error
    only (gRPC responses all have a top-level error)."""
    if reply.value is None or reply.error_code:
        return with_error(message_type, reply.error_code, reply.error_message)
    return encode(reply.value)


def _no_name(_topic_id: str) -> str:
    return ""


def _opt(msg: Any, field: str, default: Any = None) -> Any:
    """An optional field's value, ``default`` when it is absent."""
    return getattr(msg, field) if msg.HasField(field) else default


def _names(msg: Any, field: str) -> tuple[str, ...] | None:
    """A wrapper list (``TopicNames``): absent -> None, present -> its names."""
    return tuple(getattr(msg, field).names) if msg.HasField(field) else None


def _each(
    message_type: type[M], field: str, entry: Callable[[X], Any]
) -> Callable[[Iterable[X]], M]:
    """The encoder of a list: the response without a top-level error, ``entry(item)`` for each
    item in its repeated ``field``."""
    return lambda items: with_error(
        message_type, ErrorCode.NONE, None, **{field: [entry(x) for x in items]}
    )


def _each_and_error(
    message_type: type[M], field: str, entry: Callable[[X], Any]
) -> Callable[[Reply[list[X]]], M]:
    """The encoder of a :class:`Reply` of a list: its top-level error (if any) beside
    ``entry(item)`` for each item of its value."""
    return lambda reply: with_error(
        message_type,
        reply.error_code,
        reply.error_message,
        **{field: [entry(x) for x in reply.value or ()]},
    )


def topic_id_in(raw: bytes) -> str:
    try:
        return topic_id_from_bytes(raw)
    except ValueError:
        raise InvalidRequestError(f"A topic id has 16 bytes, got {len(raw)}.") from None


def assignment_from_proto(items: Iterable[common_pb2.TopicPartitions]) -> Assignment:
    return make_assignment((topic_id_in(tp.topic_id), tp.partitions) for tp in items)


def assignment_to_proto(
    assignment: Assignment, name_of: codec.NameOf = _no_name
) -> list[common_pb2.TopicPartitions]:
    return [
        common_pb2.TopicPartitions(
            topic_id=topic_id_to_bytes(topic_id),
            partitions=sorted(assignment[topic_id]),
            topic_name=name_of(topic_id),
        )
        for topic_id in sorted(assignment)
    ]


def group_ids_from_proto(req: Any) -> list[str]:
    """ConsumerGroupDescribe, DeleteGroups, DescribeGroups: the group ids."""
    return list(req.group_ids)


def heartbeat_from_proto(
    req: consumer_group_pb2.ConsumerGroupHeartbeatRequest,
    *,
    client_id: str = "",
    client_host: str = "",
    principal: object = None,
) -> ConsumerGroupHeartbeat:
    return ConsumerGroupHeartbeat(
        group_id=req.group_id,
        member_id=req.member_id,
        member_epoch=req.member_epoch,
        instance_id=_opt(req, "instance_id"),
        rack_id=_opt(req, "rack_id"),
        rebalance_timeout_ms=_opt(req, "rebalance_timeout_ms", -1),
        subscribed_topic_names=_names(req, "subscribed_topic_names"),
        subscribed_topic_regex=_opt(req, "subscribed_topic_regex"),
        server_assignor=_opt(req, "server_assignor"),
        topic_partitions=(
            assignment_from_proto(req.topic_partitions.items)
            if req.HasField("topic_partitions")
            else None
        ),
        client_id=client_id,
        client_host=client_host,
        principal=principal,
    )


def heartbeat_to_proto(
    resp: ConsumerGroupHeartbeatResponse, name_of: codec.NameOf = _no_name
) -> consumer_group_pb2.ConsumerGroupHeartbeatResponse:
    out = consumer_group_pb2.ConsumerGroupHeartbeatResponse(
        error_code=0,
        member_id=resp.member_id,
        member_epoch=resp.member_epoch,
        heartbeat_interval_ms=resp.heartbeat_interval_ms,
        should_compute_assignment=resp.should_compute_assignment,
    )
    if resp.assignment is not None:
        out.assignment.assigned_topic_partitions.extend(
            assignment_to_proto(resp.assignment.assigned, name_of)
        )
        out.assignment.pending_topic_partitions.extend(
            assignment_to_proto(resp.assignment.pending, name_of)
        )
    return out


def heartbeat_error(
    code: ErrorCode, message: str | None
) -> consumer_group_pb2.ConsumerGroupHeartbeatResponse:
    return with_error(consumer_group_pb2.ConsumerGroupHeartbeatResponse, code, message)


def consumer_group_describe_to_proto(
    groups: Iterable[DescribedConsumerGroup], name_of: codec.NameOf = _no_name
) -> consumer_group_pb2.ConsumerGroupDescribeResponse:
    described = consumer_group_pb2.ConsumerGroupDescribeResponse
    return described(
        error_code=0,
        groups=[
            described.DescribedGroup(
                **codec.described_consumer_group(g, name_of, topic_id_to_bytes)
            )
            for g in groups
        ],
    )


# ---------------------------------------------------------------- topic registry


def _timeout_ms(req: Any) -> int | None:
    return req.timeout_ms if req.HasField("timeout_ms") else None


def new_topics_from_proto(req: admin_pb2.CreateTopicsRequest) -> TopicChanges[NewTopic]:
    return TopicChanges(
        entries=[
            NewTopic(
                name=t.name,
                num_partitions=t.num_partitions,
                topic_id=topic_id_in(t.topic_id) if t.HasField("topic_id") else None,
                partition_racks=racks_from_proto(t.name, t.replica_racks),
            )
            for t in req.topics
        ],
        timeout_ms=_timeout_ms(req),
        validate_only=req.validate_only,
    )


def racks_from_proto(
    name: str, entries: Iterable[admin_pb2.PartitionRacks]
) -> dict[int, frozenset[str]]:
    """Partition -> racks; a partition named twice is INVALID_REQUEST (the topic's other
    checks — range, blank racks — are the registry's)."""
    out: dict[int, frozenset[str]] = {}
    for entry in entries:
        racks = frozenset(entry.racks)
        for p in entry.partitions:
            if p in out:
                raise InvalidRequestError(
                    f"Replica racks of partition {p} of topic {name} are given twice."
                )
            out[p] = racks
    return out


def racks_to_proto(racks: Mapping[int, frozenset[str]]) -> list[admin_pb2.PartitionRacks]:
    """One entry per distinct set of racks, sorted by racks; partitions ascending."""
    return [
        admin_pb2.PartitionRacks(partitions=ps, racks=rs)
        for rs, ps in partition_racks_groups(racks)
    ]


def create_partitions_from_proto(
    req: admin_pb2.CreatePartitionsRequest,
) -> TopicChanges[tuple[str, int]]:
    return TopicChanges(
        entries=[(t.name, t.count) for t in req.topics],
        timeout_ms=_timeout_ms(req),
        validate_only=req.validate_only,
    )


def delete_topics_from_proto(req: admin_pb2.DeleteTopicsRequest) -> TopicChanges[str]:
    return TopicChanges(entries=list(req.names), timeout_ms=_timeout_ms(req))


def nothing_from_proto(_req: Any) -> None:
    """A request without fields (ListTopics)."""
    return None


def _tid(result: TopicResult) -> bytes:
    return topic_id_to_bytes(result.topic_id)


_admin = admin_pb2


def _created(r: TopicResult) -> admin_pb2.CreateTopicsResponse.CreatableTopicResult:
    return _admin.CreateTopicsResponse.CreatableTopicResult(
        name=r.name, topic_id=_tid(r), num_partitions=r.num_partitions, **codec.error_fields(r)
    )


def _extended(r: TopicResult) -> admin_pb2.CreatePartitionsResponse.CreatePartitionsTopicResult:
    return _admin.CreatePartitionsResponse.CreatePartitionsTopicResult(
        name=r.name, **codec.error_fields(r)
    )


def _deleted(r: TopicResult) -> admin_pb2.DeleteTopicsResponse.DeletableTopicResult:
    return _admin.DeleteTopicsResponse.DeletableTopicResult(
        name=r.name, topic_id=_tid(r), **codec.error_fields(r)
    )


def _listed(r: TopicResult) -> admin_pb2.ListTopicsResponse.Topic:
    return _admin.ListTopicsResponse.Topic(
        name=r.name,
        topic_id=_tid(r),
        num_partitions=r.num_partitions,
        replica_racks=racks_to_proto(r.partition_racks),
    )


create_topics_to_proto = _each(_admin.CreateTopicsResponse, "topics", _created)
create_partitions_to_proto = _each(_admin.CreatePartitionsResponse, "results", _extended)
delete_topics_to_proto = _each(_admin.DeleteTopicsResponse, "results", _deleted)
list_topics_to_proto = _each(_admin.ListTopicsResponse, "topics", _listed)


def describe_cluster_to_proto(value: tuple[int, list[Node]]) -> admin_pb2.DescribeClusterResponse:
    controller, nodes = value
    return _admin.DescribeClusterResponse(
        controller_id=controller,
        nodes=[
            _admin.DescribeClusterResponse.Node(node_id=n.node_id, host=n.host, port=n.port)
            for n in nodes
        ],
    )


# ---------------------------------------------------------------- log offsets


def list_offsets_from_proto(req: admin_pb2.ListOffsetsRequest) -> ListOffsets:
    return ListOffsets(
        isolation_level=req.isolation_level,
        queries=tuple(
            OffsetQuery(topic=t.name, partition=p.partition_index, timestamp=p.timestamp)
            for t in req.topics
            for p in t.partitions
        ),
    )


def list_offsets_to_proto(answers: Iterable[LogOffset]) -> admin_pb2.ListOffsetsResponse:
    """One topic entry per run of answers of the same topic, in the request's order."""
    out = admin_pb2.ListOffsetsResponse(error_code=0)
    topic = None
    for a in answers:
        if topic is None or topic.name != a.topic:
            topic = out.topics.add(name=a.topic)
        topic.partitions.add(
            partition_index=a.partition,
            timestamp=a.timestamp,
            offset=a.offset,
            leader_epoch=a.leader_epoch,
            **codec.error_fields(a),
        )
    return out


# ---------------------------------------------------------------- group configs


def describe_configs_from_proto(req: admin_pb2.DescribeConfigsRequest) -> DescribeConfigs:
    return DescribeConfigs(
        resources=tuple(
            ConfigResource(
                resource_type=r.resource_type,
                resource_name=r.resource_name,
                keys=_names(r, "configuration_keys"),
            )
            for r in req.resources
        ),
        include_synonyms=req.include_synonyms,
        include_documentation=req.include_documentation,
    )


def _config_result(r: ConfigResult) -> admin_pb2.DescribeConfigsResponse.Result:
    return admin_pb2.DescribeConfigsResponse.Result(**codec.config_result(r))


describe_configs_to_proto = _each_and_error(
    admin_pb2.DescribeConfigsResponse, "results", _config_result
)


def alter_configs_from_proto(
    req: admin_pb2.IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigs:
    return codec.alter_configs(req, lambda c: _opt(c, "value"))


def _alter_result(
    r: AlterResult,
) -> admin_pb2.IncrementalAlterConfigsResponse.AlterConfigsResourceResponse:
    return admin_pb2.IncrementalAlterConfigsResponse.AlterConfigsResourceResponse(
        **codec.resource_fields(r)
    )


alter_configs_to_proto = _each_and_error(
    admin_pb2.IncrementalAlterConfigsResponse, "responses", _alter_result
)


# ---------------------------------------------------------------- groups


def list_groups_from_proto(req: admin_pb2.ListGroupsRequest) -> tuple[list[str], list[str]]:
    return list(req.states_filter), list(req.types_filter)


def _listed_group(g: ListedGroup) -> admin_pb2.ListGroupsResponse.ListedGroup:
    return _admin.ListGroupsResponse.ListedGroup(**codec.listed_group(g))


def _deleted_group(
    result: tuple[str, ErrorCode, str | None],
) -> admin_pb2.DeleteGroupsResponse.DeletableGroupResult:
    group_id, code, message = result
    return _admin.DeleteGroupsResponse.DeletableGroupResult(
        group_id=group_id, error_code=int(code), error_message=message
    )


list_groups_to_proto = _each(_admin.ListGroupsResponse, "groups", _listed_group)
delete_groups_to_proto = _each(_admin.DeleteGroupsResponse, "results", _deleted_group)


# ---------------------------------------------------------------- offsets


def _topic_id_in_or_zero(raw: bytes) -> str:
    """Empty (or all zero) bytes = no id."""
    return topic_id_in(raw) if raw else ZERO_TOPIC_ID


def _topic_id_out(topic_id: str) -> bytes:
    return b"" if topic_id == ZERO_TOPIC_ID else topic_id_to_bytes(topic_id)


def offset_commit_from_proto(req: offsets_pb2.OffsetCommitRequest) -> OffsetCommit:
    return OffsetCommit(
        group_id=req.group_id,
        generation_id_or_member_epoch=_opt(req, "generation_id_or_member_epoch", -1),
        member_id=req.member_id,
        group_instance_id=_opt(req, "group_instance_id"),
        topics=tuple(
            OffsetCommitTopic(
                name=t.name,
                topic_id=_topic_id_in_or_zero(t.topic_id),
                partitions=tuple(
                    OffsetCommitPartition(
                        partition_index=p.partition_index,
                        committed_offset=p.committed_offset,
                        committed_leader_epoch=_opt(p, "committed_leader_epoch", -1),
                        committed_metadata=_opt(p, "committed_metadata"),
                    )
                    for p in t.partitions
                ),
            )
            for t in req.topics
        ),
    )


_Committed = offsets_pb2.OffsetCommitResponse


def _partition_errors(partition_type: type[M], partitions: Iterable[Any]) -> list[M]:
    """Partitions answered with an error each (OffsetCommit, OffsetDelete)."""
    make: Any = partition_type
    return [make(**codec.partition_error(p)) for p in partitions]


def offset_commit_to_proto(resp: OffsetCommitResponse) -> offsets_pb2.OffsetCommitResponse:
    return offsets_pb2.OffsetCommitResponse(
        error_code=0,
        topics=[
            _Committed.Topic(
                name=t.name,
                topic_id=_topic_id_out(t.topic_id),
                partitions=_partition_errors(_Committed.Partition, t.partitions),
            )
            for t in resp.topics
        ],
    )


def offset_commit_error(
    req: offsets_pb2.OffsetCommitRequest, code: ErrorCode, message: str | None
) -> offsets_pb2.OffsetCommitResponse:
    """A group-level error on every partition of the request, as Kafka answers OffsetCommit
    (built from the request itself, so it also serves a request that does not convert)."""
    return _Committed(
        error_code=0,
        topics=[
            _Committed.Topic(
                name=t.name,
                topic_id=t.topic_id,
                partitions=[
                    _Committed.Partition(
                        partition_index=p.partition_index,
                        error_code=int(code),
                        error_message=message,
                    )
                    for p in t.partitions
                ],
            )
            for t in req.topics
        ],
    )


def offset_fetch_group_from_proto(
    g: offsets_pb2.OffsetFetchRequest.Group, require_stable: bool = False
) -> OffsetFetchGroup:
    return OffsetFetchGroup(
        require_stable=require_stable,
        group_id=g.group_id,
        member_id=_opt(g, "member_id"),
        member_epoch=_opt(g, "member_epoch", -1),
        topics=(
            tuple(
                OffsetFetchTopic(
                    name=t.name,
                    topic_id=_topic_id_in_or_zero(t.topic_id),
                    partition_indexes=tuple(t.partition_indexes),
                )
                for t in g.topics.items
            )
            if g.HasField("topics")
            else None
        ),
    )


def offset_fetch_group_to_proto(
    resp: OffsetFetchGroupResponse,
) -> offsets_pb2.OffsetFetchResponse.Group:
    fetched = offsets_pb2.OffsetFetchResponse
    return fetched.Group(
        group_id=resp.group_id,
        **codec.error_fields(resp),
        topics=[
            fetched.Topic(
                name=t.name,
                topic_id=_topic_id_out(t.topic_id),
                partitions=[fetched.Partition(**codec.fetched_partition(p)) for p in t.partitions],
            )
            for t in resp.topics
        ],
    )


def offset_delete_from_proto(
    req: offsets_pb2.OffsetDeleteRequest,
) -> tuple[str, list[tuple[str, list[int]]]]:
    """(group id, [(topic name, partitions)])."""
    return req.group_id, [(t.name, list(t.partition_indexes)) for t in req.topics]


def offset_delete_to_proto(resp: OffsetDeleteResponse) -> offsets_pb2.OffsetDeleteResponse:
    deleted = offsets_pb2.OffsetDeleteResponse
    return deleted(
        error_code=0,
        topics=[
            deleted.Topic(
                name=t.name, partitions=_partition_errors(deleted.Partition, t.partitions)
            )
            for t in resp.topics
        ],
    )


def offset_fetch_from_proto(
    req: offsets_pb2.OffsetFetchRequest,
) -> list[OffsetFetchGroup | GroupError]:
    """A group whose part of the request does not convert (a bad topic id) becomes its error."""
    out: list[OffsetFetchGroup | GroupError] = []
    for g in req.groups:
        try:
            out.append(offset_fetch_group_from_proto(g, req.require_stable))
        except CoordinatorError as exc:
            out.append(
                GroupError(group_id=g.group_id, error_code=exc.code, error_message=exc.message)
            )
    return out


offset_fetch_to_proto = _each(
    offsets_pb2.OffsetFetchResponse, "groups", offset_fetch_group_to_proto
)


# ---------------------------------------------------------------- classic groups (the bridge)


def find_coordinator_from_proto(
    req: classic_group_pb2.FindCoordinatorRequest,
) -> tuple[int, list[str]]:
    return req.key_type, list(req.coordinator_keys)


def _coordinator(c: Coordinator) -> classic_group_pb2.FindCoordinatorResponse.Coordinator:
    return classic_group_pb2.FindCoordinatorResponse.Coordinator(**codec.coordinator(c))


find_coordinator_to_proto = _each_and_error(
    classic_group_pb2.FindCoordinatorResponse, "coordinators", _coordinator
)


def join_from_proto(
    req: classic_group_pb2.JoinGroupRequest,
    *,
    client_id: str = "",
    client_host: str = "",
    principal: object = None,  # a classic join resolves no regex: not kept
) -> bridge.JoinGroup:
    return bridge.JoinGroup(
        group_id=req.group_id,
        session_timeout_ms=req.session_timeout_ms,
        rebalance_timeout_ms=_opt(req, "rebalance_timeout_ms", -1),
        member_id=req.member_id,
        group_instance_id=_opt(req, "group_instance_id"),
        protocol_type=req.protocol_type,
        protocols=tuple((p.name, bytes(p.metadata)) for p in req.protocols),
        reason=_opt(req, "reason"),
        client_id=client_id,
        client_host=client_host,
    )


def join_to_proto(resp: bridge.JoinGroupResponse) -> classic_group_pb2.JoinGroupResponse:
    return classic_group_pb2.JoinGroupResponse(**codec.joined(resp))


def _classic_member(
    req: classic_group_pb2.SyncGroupRequest | classic_group_pb2.HeartbeatRequest,
) -> dict[str, Any]:
    """Who sends a SyncGroup or Heartbeat: the group, generation and member."""
    return {
        "group_id": req.group_id,
        "generation_id": req.generation_id,
        "member_id": req.member_id,
        "group_instance_id": _opt(req, "group_instance_id"),
    }


def sync_from_proto(req: classic_group_pb2.SyncGroupRequest) -> bridge.SyncGroup:
    return bridge.SyncGroup(
        **_classic_member(req),
        protocol_type=_opt(req, "protocol_type"),
        protocol_name=_opt(req, "protocol_name"),
        assignments=tuple((a.member_id, bytes(a.assignment)) for a in req.assignments),
    )


def sync_to_proto(resp: bridge.SyncGroupResponse) -> classic_group_pb2.SyncGroupResponse:
    return classic_group_pb2.SyncGroupResponse(**codec.synced(resp))


def classic_heartbeat_from_proto(req: classic_group_pb2.HeartbeatRequest) -> bridge.Heartbeat:
    return bridge.Heartbeat(**_classic_member(req))


def classic_heartbeat_to_proto(
    resp: bridge.HeartbeatResponse,
) -> classic_group_pb2.HeartbeatResponse:
    return classic_group_pb2.HeartbeatResponse(**codec.error_fields(resp))


def leave_from_proto(req: classic_group_pb2.LeaveGroupRequest) -> bridge.LeaveGroup:
    return bridge.LeaveGroup(
        group_id=req.group_id,
        members=tuple(
            bridge.LeaveMember(
                member_id=x.member_id,
                group_instance_id=_opt(x, "group_instance_id"),
                reason=_opt(x, "reason"),
            )
            for x in req.members
        ),
    )


def leave_to_proto(resp: bridge.LeaveGroupResponse) -> classic_group_pb2.LeaveGroupResponse:
    return classic_group_pb2.LeaveGroupResponse(**codec.left(resp))


def classic_described_group_to_proto(
    g: bridge.DescribedGroup,
) -> classic_group_pb2.DescribeGroupsResponse.DescribedGroup:
    return classic_group_pb2.DescribeGroupsResponse.DescribedGroup(
        **codec.described_classic_group(g)
    )


describe_groups_to_proto = _each(
    classic_group_pb2.DescribeGroupsResponse, "groups", classic_described_group_to_proto
)


def watch_event_to_proto(
    event: WatchEvent, name_of: codec.NameOf = _no_name
) -> consumer_group_pb2.ConsumerGroupWatchResponse:
    """One message of the push stream (ConsumerGroupWatch)."""
    return consumer_group_pb2.ConsumerGroupWatchResponse(
        **codec.error_fields(event),
        member_epoch=event.member_epoch,
        group_epoch=event.group_epoch,
        assignment_epoch=event.assignment_epoch,
        target_topic_partitions=assignment_to_proto(event.target, name_of),
        released_topic_partitions=assignment_to_proto(event.released, name_of),
    )


# ---------------------------------------------------------------- security administration


def acl_filter_from_proto(f: admin_pb2.AclFilter) -> AclSpec:
    return AclSpec(
        resource_type=f.resource_type_filter,
        resource_name=_opt(f, "resource_name_filter"),
        pattern_type=f.pattern_type_filter,
        principal=_opt(f, "principal_filter"),
        host=_opt(f, "host_filter"),
        operation=f.operation,
        permission_type=f.permission_type,
    )


def describe_acls_from_proto(req: admin_pb2.DescribeAclsRequest) -> AclSpec:
    return acl_filter_from_proto(req.filter)


def create_acls_from_proto(req: admin_pb2.CreateAclsRequest) -> list[AclSpec]:
    names = ("resource_type", "resource_name", "pattern_type", "principal")
    return [codec.acl_spec(c, names=names) for c in req.creations]


def delete_acls_from_proto(req: admin_pb2.DeleteAclsRequest) -> list[AclSpec]:
    return [acl_filter_from_proto(f) for f in req.filters]


def describe_acls_to_proto(bindings: list[AclBinding]) -> admin_pb2.DescribeAclsResponse:
    return with_error(
        _admin.DescribeAclsResponse, ErrorCode.NONE, None, resources=codec.acl_resources(bindings)
    )


create_acls_to_proto = _each(_admin.CreateAclsResponse, "results", codec.acl_creation)
delete_acls_to_proto = _each(_admin.DeleteAclsResponse, "filter_results", codec.acl_deletion)


def describe_users_from_proto(
    req: admin_pb2.DescribeUserScramCredentialsRequest,
) -> tuple[str, ...] | None:
    return _names(req, "users")


describe_users_to_proto = _each(
    _admin.DescribeUserScramCredentialsResponse, "results", codec.described_user
)


def alter_users_from_proto(
    req: admin_pb2.AlterUserScramCredentialsRequest,
) -> AlterScramCredentials:
    return codec.scram_alterations(req.deletions, req.upsertions)


alter_users_to_proto = _each(_admin.AlterUserScramCredentialsResponse, "results", codec.user_result)
