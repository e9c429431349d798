"""Kafka messages (kio entities) <-> the service layer's dataclasses: the one place where the
Kafka protocol's wire types meet the core.

Requests are read with ``getattr`` defaults, so one function serves every version of an API
(a field a version lacks reads as its Kafka default). Responses are plain values given to
:func:`.wire.build`, which keeps what the negotiated version has. What changes *shape* between
versions (OffsetFetch's single group before v8, LeaveGroup's single member before v3,
FindCoordinator's single key before v4) is mapped here; version-dependent *rules* live in the
service layer (``Caller.api_version``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from coordinator.core.commands import ConsumerGroupHeartbeat, ConsumerGroupHeartbeatResponse
from coordinator.core.errors import ErrorCode
from coordinator.core.model import (
    ZERO_TOPIC_ID,
    make_assignment,
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
    TxnOffsetCommit,
)
from coordinator.security.acls import AclBinding
from coordinator.security.metadata import AclCreation, AclDeletion, UserResult
from legacy_bridge import messages as bridge

from .. import codec
from ..api import (
    AclSpec,
    AlterResult,
    AlterScramCredentials,
    Caller,
    ConfigResource,
    ConfigResult,
    Coordinator,
    DescribeConfigs,
    DescribedConsumerGroup,
    IncrementalAlterConfigs,
    Reply,
)
from . import wire


def topic_id_of(value: uuid.UUID | None) -> str:
    return ZERO_TOPIC_ID if value is None else topic_id_from_bytes(value.bytes)


def uuid_of(topic_id: str) -> uuid.UUID | None:
    return None if topic_id == ZERO_TOPIC_ID else uuid.UUID(bytes=topic_id_to_bytes(topic_id))


# ---------------------------------------------------------------- ConsumerGroupHeartbeat (68)


def heartbeat_in(req: Any, caller: Caller) -> ConsumerGroupHeartbeat:
    owned = req.topic_partitions
    return ConsumerGroupHeartbeat(
        group_id=req.group_id,
        member_id=req.member_id,
        member_epoch=req.member_epoch,
        instance_id=req.instance_id,
        rack_id=req.rack_id,
        rebalance_timeout_ms=wire.to_ms(req.rebalance_timeout),
        subscribed_topic_names=(
            None if req.subscribed_topic_names is None else tuple(req.subscribed_topic_names)
        ),
        subscribed_topic_regex=getattr(req, "subscribed_topic_regex", None),
        server_assignor=req.server_assignor,
        topic_partitions=(
            None
            if owned is None
            else make_assignment((topic_id_of(tp.topic_id), tp.partitions) for tp in owned)
        ),
        client_id=caller.client_id,
        client_host=caller.client_host,
        principal=caller.principal,
    )


class HeartbeatOut:
    """ConsumerGroupHeartbeat responses, built directly (the hot path: no generic builder)."""

    def __init__(self, version: int) -> None:
        cls = wire.response_class(68, version)
        self.cls = cls
        fields = cls.__dataclass_fields__
        self.assignment_cls = fields["assignment"].type.__args__[0]
        tp_type = self.assignment_cls.__dataclass_fields__["topic_partitions"].type
        self.tp_cls = tp_type.__args__[0]
        self.none = wire.error_code(0)
        self._intervals: dict[int, Any] = {}

    def interval(self, ms: int) -> Any:
        td = self._intervals.get(ms)
        if td is None:
            from kio.static.primitive import i32Timedelta

            td = self._intervals[ms] = i32Timedelta.parse(wire.ms(ms))
        return td

    def __call__(self, reply: Reply[ConsumerGroupHeartbeatResponse]) -> Any:
        resp = reply.value
        if resp is None:
            return self.cls(
                throttle_time=self.interval(0),
                error_code=wire.error_code(reply.error_code),
                error_message=reply.error_message,
                member_id=None,
                member_epoch=0,
                heartbeat_interval=self.interval(0),
                assignment=None,
            )
        assignment = None
        if resp.assignment is not None:
            assigned = resp.assignment.assigned
            assignment = self.assignment_cls(
                topic_partitions=tuple(
                    self.tp_cls(topic_id=uuid_of(t), partitions=tuple(sorted(assigned[t])))
                    for t in sorted(assigned)
                )
            )
        return self.cls(
            throttle_time=self.interval(0),
            error_code=self.none,
            error_message=None,
            member_id=resp.member_id,
            member_epoch=resp.member_epoch,
            heartbeat_interval=self.interval(resp.heartbeat_interval_ms),
            assignment=assignment,
        )


# ---------------------------------------------------------------- ConsumerGroupDescribe (69)


def consumer_group_describe_in(req: Any, _caller: Caller) -> list[str]:
    return list(req.group_ids)


def consumer_group_describe_out(
    reply: Reply[list[DescribedConsumerGroup]], name_of: codec.NameOf
) -> dict[str, Any]:
    return {
        "groups": [codec.described_consumer_group(g, name_of, uuid_of) for g in reply.value or ()]
    }


# ---------------------------------------------------------------- FindCoordinator (10)


def find_coordinator_in(req: Any, _caller: Caller) -> tuple[int, list[str]]:
    keys = getattr(req, "coordinator_keys", None)
    if keys is None or (not keys and hasattr(req, "key")):
        keys = [req.key]
    return getattr(req, "key_type", 0), list(keys)


def find_coordinator_out(reply: Reply[list[Coordinator]], version: int) -> dict[str, Any]:
    coordinators = reply.value or []
    if version >= 4:
        return {
            **codec.error_fields(reply),
            "coordinators": [codec.coordinator(c) for c in coordinators],
        }
    if not coordinators:  # v0-v3: one key
        return {**codec.error_fields(reply), "node_id": -1, "host": "", "port": -1}
    return codec.coordinator(coordinators[0])


# ---------------------------------------------------------------- classic groups


def join_in(req: Any, caller: Caller) -> bridge.JoinGroup:
    rebalance = getattr(req, "rebalance_timeout", None)
    return bridge.JoinGroup(
        group_id=req.group_id,
        session_timeout_ms=wire.to_ms(req.session_timeout),
        rebalance_timeout_ms=-1 if rebalance is None else wire.to_ms(rebalance),
        member_id=req.member_id,
        group_instance_id=getattr(req, "group_instance_id", None),
        protocol_type=req.protocol_type,
        protocols=tuple((p.name, bytes(p.metadata)) for p in req.protocols),
        reason=getattr(req, "reason", None),
        client_id=caller.client_id,
        client_host=caller.client_host,
        # JoinGroup v9+ answers carry KIP-814's skip_assignment; an older static leader back
        # in a Stable group is answered as a follower instead.
        supports_skip_assignment=not caller.version_below(9),
    )


def join_out(resp: bridge.JoinGroupResponse, _version: int) -> dict[str, Any]:
    return codec.joined(resp)


def _classic_member(req: Any) -> dict[str, Any]:
    """Who sends a SyncGroup or Heartbeat: the group, generation and member."""
    return {
        **codec.fields_of(req, "group_id generation_id member_id"),
        "group_instance_id": getattr(req, "group_instance_id", None),
    }


def sync_in(req: Any, _caller: Caller) -> bridge.SyncGroup:
    return bridge.SyncGroup(
        **_classic_member(req),
        protocol_type=getattr(req, "protocol_type", None),
        protocol_name=getattr(req, "protocol_name", None),
        assignments=tuple((a.member_id, bytes(a.assignment)) for a in req.assignments),
    )


def sync_out(resp: bridge.SyncGroupResponse, _version: int) -> dict[str, Any]:
    return codec.synced(resp)


def classic_heartbeat_in(req: Any, _caller: Caller) -> bridge.Heartbeat:
    return bridge.Heartbeat(**_classic_member(req))


def classic_heartbeat_out(resp: bridge.HeartbeatResponse, _version: int) -> dict[str, Any]:
    return {"error_code": resp.error_code}


def leave_in(req: Any, _caller: Caller) -> bridge.LeaveGroup:
    members = getattr(req, "members", None)
    if members is None:  # v0-v2: one member
        return bridge.LeaveGroup(
            group_id=req.group_id, members=(bridge.LeaveMember(member_id=req.member_id),)
        )
    return bridge.LeaveGroup(
        group_id=req.group_id,
        members=tuple(
            bridge.LeaveMember(
                member_id=x.member_id,
                group_instance_id=x.group_instance_id,
                reason=getattr(x, "reason", None),
            )
            for x in members
        ),
    )


def leave_out(resp: bridge.LeaveGroupResponse, version: int) -> dict[str, Any]:
    if version < 3:
        # Before v3 only the top-level error exists: the member's error if there is one
        # (Kafka's LeaveGroupResponse for old versions).
        code = resp.error_code or next((x.error_code for x in resp.members if x.error_code), 0)
        return {"error_code": code}
    return codec.left(resp)


def describe_groups_in(req: Any, _caller: Caller) -> list[str]:
    return list(req.groups)


def describe_groups_out(reply: Reply[list[bridge.DescribedGroup]], _version: int) -> dict[str, Any]:
    return {"groups": [codec.described_classic_group(g) for g in reply.value or ()]}


# ---------------------------------------------------------------- offsets


def _commit_topic_id(t: Any) -> str:
    return topic_id_of(getattr(t, "topic_id", None))


def offset_commit_in(req: Any, _caller: Caller | None) -> OffsetCommit:
    retention = getattr(req, "retention_time", None)  # v2-v4 only
    return OffsetCommit(
        retention_time_ms=-1 if retention is None else retention // timedelta(milliseconds=1),
        group_id=req.group_id,
        generation_id_or_member_epoch=getattr(req, "generation_id_or_member_epoch", -1),
        member_id=getattr(req, "member_id", ""),
        group_instance_id=getattr(req, "group_instance_id", None),
        topics=tuple(
            OffsetCommitTopic(
                name=getattr(t, "name", "") or "",
                topic_id=_commit_topic_id(t),
                partitions=tuple(
                    OffsetCommitPartition(
                        partition_index=p.partition_index,
                        committed_offset=p.committed_offset,
                        committed_leader_epoch=getattr(p, "committed_leader_epoch", -1),
                        committed_metadata=p.committed_metadata,
                    )
                    for p in t.partitions
                ),
            )
            for t in req.topics
        ),
    )


def txn_offset_commit_in(req: Any, _caller: Caller | None) -> TxnOffsetCommit:
    """TxnOffsetCommit v0-6 (v3+: the consumer's group metadata, KIP-447; v6: topics by id)."""
    commit = offset_commit_in(req, None)
    return TxnOffsetCommit(
        transactional_id=req.transactional_id,
        group_id=req.group_id,
        producer_id=int(req.producer_id),
        producer_epoch=int(req.producer_epoch),
        generation_id=getattr(req, "generation_id", -1),
        member_id=getattr(req, "member_id", ""),
        group_instance_id=getattr(req, "group_instance_id", None),
        topics=commit.topics,
    )


def txn_offset_commit_out(reply: Reply[OffsetCommitResponse], version: int) -> dict[str, Any]:
    """TxnOffsetCommit's answer; v6 (KIP-1319) names the topics by id, as OffsetCommit v10."""
    value = reply.value
    topics = value.topics if value is not None else ()
    return {"topics": _partition_results(topics, version >= TXN_TOPIC_IDS_VERSION)}


TOPIC_IDS_VERSION = 10
"""OffsetCommit and OffsetFetch v10 (Kafka 4.2, KIP-848) name topics by id only."""
TXN_TOPIC_IDS_VERSION = 6
"""TxnOffsetCommit v6 (KIP-1319, Kafka 4.3) likewise."""


def _by_id(t: Any, partition: dict[str, Any], by_id: bool) -> dict[str, Any]:
    """A partition's answer in a version that names topics by id (``by_id``): a topic given
    by the zero id — the core's "no name and no id", INVALID_REQUEST — is an id no topic has,
    UNKNOWN_TOPIC_ID, as Kafka answers any id its metadata does not know."""
    zero = t.topic_id == ZERO_TOPIC_ID
    if by_id and zero and partition["error_code"] == ErrorCode.INVALID_REQUEST:
        return {**partition, "error_code": ErrorCode.UNKNOWN_TOPIC_ID}
    return partition


def _partition_results(topics: Iterable[Any], by_id: bool) -> list[dict[str, Any]]:
    return [
        {
            "name": t.name,
            "topic_id": uuid_of(t.topic_id),
            "partitions": [_by_id(t, codec.partition_error(p), by_id) for p in t.partitions],
        }
        for t in topics
    ]


def offset_commit_out(reply: Reply[OffsetCommitResponse], version: int) -> dict[str, Any]:
    value = reply.value
    topics = value.topics if value is not None else ()
    return {"topics": _partition_results(topics, version >= TOPIC_IDS_VERSION)}


def offset_fetch_in(req: Any, _caller: Caller) -> list[OffsetFetchGroup]:
    groups = getattr(req, "groups", None)
    stable = bool(getattr(req, "require_stable", False))  # v7+ (KIP-447)
    if groups is None:  # v1-v7: one group
        return [
            OffsetFetchGroup(
                group_id=req.group_id,
                topics=None
                if req.topics is None
                else tuple(
                    OffsetFetchTopic(name=t.name, partition_indexes=tuple(t.partition_indexes))
                    for t in req.topics
                ),
                require_stable=stable,
            )
        ]
    return [
        OffsetFetchGroup(
            group_id=g.group_id,
            member_id=getattr(g, "member_id", None),
            member_epoch=getattr(g, "member_epoch", -1),
            require_stable=stable,
            topics=None
            if g.topics is None
            else tuple(
                OffsetFetchTopic(
                    name=getattr(t, "name", "") or "",
                    topic_id=topic_id_of(getattr(t, "topic_id", None)),
                    partition_indexes=tuple(t.partition_indexes),
                )
                for t in g.topics
            ),
        )
        for g in groups
    ]


def _fetched(g: OffsetFetchGroupResponse, version: int) -> list[dict[str, Any]]:
    return [
        {
            "name": t.name,
            "topic_id": uuid_of(t.topic_id),
            "partitions": [
                _by_id(t, codec.fetched_partition(p), version >= TOPIC_IDS_VERSION)
                for p in t.partitions
            ],
        }
        for t in g.topics
    ]


def offset_fetch_out(reply: Reply[list[OffsetFetchGroupResponse]], version: int) -> dict[str, Any]:
    groups = reply.value or []
    if version >= 8:
        return {
            "error_code": reply.error_code,
            "groups": [
                {"group_id": g.group_id, "error_code": g.error_code, "topics": _fetched(g, version)}
                for g in groups
            ],
        }
    g = groups[0] if groups else None
    code = reply.error_code or (g.error_code if g is not None else ErrorCode.NONE)
    topics = _fetched(g, version) if g is not None else []
    return {"error_code": code, "topics": topics}


def offset_fetch_v1_errors(values: dict[str, Any], req: Any) -> None:
    """OffsetFetch v1 has no group error field: a group's error (GROUP_AUTHORIZATION_FAILED,
    COORDINATOR_LOAD_IN_PROGRESS, ...) goes on every partition the request asked for, with
    offset -1 and no metadata, as Kafka's OffsetFetchResponse answers a group error below v2.
    ``values``: :func:`offset_fetch_out`'s (changed in place)."""
    code = values["error_code"]
    if code:
        values["topics"] = [
            {
                "name": t.name,
                "partitions": [
                    {
                        "partition_index": p,
                        "committed_offset": -1,
                        "metadata": "",
                        "error_code": code,
                    }
                    for p in t.partition_indexes
                ],
            }
            for t in req.topics or ()
        ]


def offset_delete_in(req: Any, _caller: Caller) -> tuple[str, list[tuple[str, list[int]]]]:
    return req.group_id, [(t.name, [p.partition_index for p in t.partitions]) for t in req.topics]


def offset_delete_out(reply: Reply[OffsetDeleteResponse], _version: int) -> dict[str, Any]:
    value = reply.value
    return {
        **codec.error_fields(reply),
        "topics": [
            {"name": t.name, "partitions": [codec.partition_error(p) for p in t.partitions]}
            for t in (value.topics if value is not None else ())
        ],
    }


# ---------------------------------------------------------------- administration


def list_groups_in(req: Any, _caller: Caller) -> tuple[list[str], list[str]]:
    return list(getattr(req, "states_filter", ())), list(getattr(req, "types_filter", ()))


def list_groups_out(reply: Reply[list[ListedGroup]], _version: int) -> dict[str, Any]:
    return {
        **codec.error_fields(reply),
        "groups": [codec.listed_group(g) for g in reply.value or ()],
    }


def delete_groups_in(req: Any, _caller: Caller) -> list[str]:
    # Each group once, in the order first named, as Kafka's KafkaApis takes them (distinct):
    # a name given twice is answered once.
    return list(dict.fromkeys(req.groups_names))


def delete_groups_out(
    reply: Reply[list[tuple[str, ErrorCode, str | None]]], _version: int
) -> dict[str, Any]:
    return {
        "results": [{"group_id": gid, "error_code": code} for gid, code, _ in reply.value or ()]
    }


def describe_configs_in(req: Any, _caller: Caller) -> DescribeConfigs:
    return DescribeConfigs(
        resources=tuple(
            ConfigResource(
                resource_type=r.resource_type,
                resource_name=r.resource_name,
                keys=None if r.configuration_keys is None else tuple(r.configuration_keys),
            )
            for r in req.resources
        ),
        include_synonyms=getattr(req, "include_synonyms", False),
        include_documentation=getattr(req, "include_documentation", False),
    )


def describe_configs_out(reply: Reply[list[ConfigResult]], _version: int) -> dict[str, Any]:
    return {"results": [codec.config_result(r) for r in reply.value or ()]}


def alter_configs_in(req: Any, _caller: Caller) -> IncrementalAlterConfigs:
    return codec.alter_configs(req, lambda c: c.value)


def alter_configs_out(reply: Reply[list[AlterResult]], _version: int) -> dict[str, Any]:
    return {"responses": [codec.resource_fields(r) for r in reply.value or ()]}


# ---------------------------------------------------------------- ACLs (29-31), SCRAM users (50, 51)


def describe_acls_in(req: Any, _caller: Caller) -> AclSpec:
    return codec.acl_spec(req, names=codec.FILTER_FIELDS)


def describe_acls_out(reply: Reply[list[AclBinding]], _version: int) -> dict[str, Any]:
    return {**codec.error_fields(reply), "resources": codec.acl_resources(reply.value or [])}


def create_acls_in(req: Any, _caller: Caller) -> list[AclSpec]:
    return [codec.acl_spec(c, names=codec.CREATION_FIELDS) for c in req.creations]


def create_acls_out(reply: Reply[list[AclCreation]], _version: int) -> dict[str, Any]:
    return {"results": [codec.acl_creation(c) for c in reply.value or ()]}


def delete_acls_in(req: Any, _caller: Caller) -> list[AclSpec]:
    return [codec.acl_spec(f, names=codec.FILTER_FIELDS) for f in req.filters]


def delete_acls_out(reply: Reply[list[AclDeletion]], _version: int) -> dict[str, Any]:
    return {"filter_results": [codec.acl_deletion(d) for d in reply.value or ()]}


def describe_users_in(req: Any, _caller: Caller) -> tuple[str, ...] | None:
    return None if req.users is None else tuple(u.name for u in req.users)


def describe_users_out(reply: Reply[list[UserResult]], _version: int) -> dict[str, Any]:
    return {
        **codec.error_fields(reply),
        "results": [codec.described_user(u) for u in reply.value or ()],
    }


def describe_users_errors(values: dict[str, Any], req: Any) -> None:
    """A refused DescribeUserScramCredentials (a top-level error) has one result per user
    asked, each with that error and no name, as Kafka's request error response
    (``DescribeUserScramCredentialsRequest.getErrorResponse``). ``values``:
    :func:`describe_users_out`'s (changed in place)."""
    code = values["error_code"]
    if code and req.users:
        error = {"user": "", "error_code": code, "error_message": values["error_message"]}
        values["results"] = [error] * len(req.users)


def alter_users_in(req: Any, _caller: Caller) -> AlterScramCredentials:
    return codec.scram_alterations(req.deletions, req.upsertions)


def alter_users_out(reply: Reply[list[UserResult]], _version: int) -> dict[str, Any]:
    return {"results": [codec.user_result(u) for u in reply.value or ()]}
