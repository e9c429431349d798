"""What the two codecs share: the gRPC codec (``convert.py``) and the Kafka codec
(``kafka/convert.py``).

The proto messages mirror Kafka's schemas, so both codecs read and write the same field names;
the values, field groups and rules they have in common are written once, here. Answers are
plain dicts of message fields (nested messages as dicts too), which both a proto message's
constructor and ``kafka/wire.build`` take: a field given None stays unset, and ``wire.build``
passes over fields a Kafka version lacks. Each codec still owns its wire types (proto
messages; kio entities) and its topic ids (16 bytes; a UUID), and nothing here imports either.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from coordinator.core.model import Assignment
from coordinator.core.offsets import ListedGroup
from coordinator.security.acls import AclBinding, group_by_resource
from coordinator.security.metadata import (
    AclCreation,
    AclDeletion,
    ScramDeletion,
    ScramUpsertion,
    UserResult,
)
from legacy_bridge import messages as bridge

from .api import (
    AclSpec,
    AlterConfig,
    AlterResource,
    AlterResult,
    AlterScramCredentials,
    ConfigResult,
    Coordinator,
    DescribedConsumerGroup,
    IncrementalAlterConfigs,
)

AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
"""Kafka's "not requested" sentinel for authorized operations (Integer.MIN_VALUE)."""

NameOf = Callable[[str], str]
"""A topic id -> the topic's name ("" for a topic that does not exist)."""


def fields_of(x: Any, names: str) -> dict[str, Any]:
    """The fields of a value named in ``names`` (separated by spaces), for the message fields
    of the same names."""
    return {name: getattr(x, name) for name in names.split()}


def error_fields(x: Any) -> dict[str, Any]:
    """A value's ``error_code`` and ``error_message`` as message fields."""
    return {"error_code": int(x.error_code), "error_message": x.error_message}


def resource_fields(r: ConfigResult | AlterResult) -> dict[str, Any]:
    """The fields of one resource's answer (DescribeConfigs, IncrementalAlterConfigs)."""
    return {"resource_type": r.resource_type, "resource_name": r.resource_name, **error_fields(r)}


def known_topics(assignment: Assignment, name_of: NameOf) -> list[tuple[str, str, list[int]]]:
    """An assignment as ConsumerGroupDescribe shows it: (topic id, name, partitions) by topic
    id, without the topics that no longer exist (Kafka's ConsumerGroup.asDescribedGroup)."""
    out = []
    for topic_id in sorted(assignment):
        name = name_of(topic_id)
        if name:
            out.append((topic_id, name, sorted(assignment[topic_id])))
    return out


def alter_configs(req: Any, value_of: Callable[[Any], str | None]) -> IncrementalAlterConfigs:
    """An IncrementalAlterConfigs request of either codec; ``value_of(config)`` reads a
    config's value (None: absent), the one field the two read differently."""

    def config(c: Any) -> AlterConfig:
        return AlterConfig(name=c.name, operation=c.config_operation, value=value_of(c))

    def resource(r: Any) -> AlterResource:
        configs = tuple(config(c) for c in r.configs)
        return AlterResource(
            resource_type=r.resource_type, resource_name=r.resource_name, configs=configs
        )

    return IncrementalAlterConfigs(
        resources=tuple(resource(r) for r in req.resources), validate_only=req.validate_only
    )


# ---------------------------------------------------------------- answers, as message fields


def described_consumer_group(
    g: DescribedConsumerGroup, name_of: NameOf, topic_id: Callable[[str], Any]
) -> dict[str, Any]:
    """One ConsumerGroupDescribe entry: the group, or its error. ``topic_id`` writes a topic id
    as the codec carries it."""
    d = g.description
    if d is None:
        return {
            "group_id": g.group_id,
            **error_fields(g),
            "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
        }

    def topics(assignment: Assignment) -> dict[str, Any]:
        return {
            "topic_partitions": [
                {"topic_id": topic_id(tid), "topic_name": name, "partitions": partitions}
                for tid, name, partitions in known_topics(assignment, name_of)
            ]
        }

    return {
        "error_code": 0,
        **fields_of(d, "group_id group_uid group_state group_epoch assignment_epoch assignor_name"),
        "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
        "members": [
            {
                **fields_of(
                    m,
                    "member_id instance_id rack_id member_epoch client_id client_host subscribed_topic_regex member_type",
                ),
                "subscribed_topic_names": list(m.subscribed_topic_names),
                "assignment": topics(m.assignment),
                "target_assignment": topics(m.target_assignment),
            }
            for m in d.members
        ],
    }


def coordinator(c: Coordinator) -> dict[str, Any]:
    """One FindCoordinator answer."""
    return {**fields_of(c, "key node_id host port"), **error_fields(c)}


def joined(resp: bridge.JoinGroupResponse) -> dict[str, Any]:
    """A JoinGroup response."""
    return {
        **error_fields(resp),
        **fields_of(
            resp, "generation_id protocol_type protocol_name leader skip_assignment member_id"
        ),
        "members": [fields_of(x, "member_id group_instance_id metadata") for x in resp.members],
    }


def synced(resp: bridge.SyncGroupResponse) -> dict[str, Any]:
    """A SyncGroup response."""
    return {
        **error_fields(resp),
        **fields_of(resp, "protocol_type protocol_name assignment"),
    }


def left(resp: bridge.LeaveGroupResponse) -> dict[str, Any]:
    """A LeaveGroup response (with its members: Kafka's v3 and later)."""
    return {
        **error_fields(resp),
        "members": [
            {**fields_of(x, "member_id group_instance_id"), **error_fields(x)} for x in resp.members
        ],
    }


def described_classic_group(g: bridge.DescribedGroup) -> dict[str, Any]:
    """One DescribeGroups entry."""
    return {
        **error_fields(g),
        **fields_of(g, "group_id group_state protocol_type protocol_data generation_id"),
        "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
        "members": [
            fields_of(
                x,
                "member_id group_instance_id client_id client_host member_metadata member_assignment",
            )
            for x in g.members
        ],
    }


def listed_group(g: ListedGroup) -> dict[str, Any]:
    """One ListGroups entry."""
    return fields_of(g, "group_id protocol_type group_state group_type")


def config_result(r: ConfigResult) -> dict[str, Any]:
    """One DescribeConfigs result: the resource and its configs."""
    return {
        **resource_fields(r),
        "configs": [
            {
                **fields_of(c, "name value read_only is_sensitive config_type documentation"),
                "config_source": c.source,
                "synonyms": [fields_of(s, "name value source") for s in c.synonyms],
            }
            for c in r.configs
        ],
    }


def partition_error(p: Any) -> dict[str, Any]:
    """A partition of OffsetCommit's or OffsetDelete's answer."""
    return {"partition_index": p.partition_index, **error_fields(p)}


def fetched_partition(p: Any) -> dict[str, Any]:
    """A partition of OffsetFetch's answer."""
    return {
        **fields_of(p, "partition_index committed_offset committed_leader_epoch metadata"),
        "error_code": int(p.error_code),
    }


# ---------------------------------------------------------------- security administration


def acl_spec(x: Any, *, names: tuple[str, str, str, str]) -> AclSpec:
    """An ACL or filter as both codecs read it: ``names`` are the message's fields for the
    resource type, name, pattern type and principal (a filter's carry ``_filter``); the host
    field is the principal's name with ``principal`` -> ``host``. Absent (None) strings stay
    None (a filter's "any")."""
    rtype, rname, ptype, principal = names
    host = principal.replace("principal", "host")
    return AclSpec(
        resource_type=int(getattr(x, rtype)),
        resource_name=getattr(x, rname),
        pattern_type=int(getattr(x, ptype)),
        principal=getattr(x, principal),
        host=getattr(x, host),
        operation=int(x.operation),
        permission_type=int(x.permission_type),
    )


FILTER_FIELDS = (
    "resource_type_filter",
    "resource_name_filter",
    "pattern_type_filter",
    "principal_filter",
)
CREATION_FIELDS = ("resource_type", "resource_name", "resource_pattern_type", "principal")


def acl_binding(b: AclBinding) -> dict[str, Any]:
    return {
        "resource_type": int(b.resource_type),
        "resource_name": b.resource_name,
        "pattern_type": int(b.pattern_type),
        "principal": b.principal,
        "host": b.host,
        "operation": int(b.operation),
        "permission_type": int(b.permission_type),
    }


def acl_resources(bindings: list[AclBinding]) -> list[dict[str, Any]]:
    """DescribeAcls' answer: the bindings grouped by resource pattern."""
    return [
        {
            "resource_type": int(rtype),
            "resource_name": name,
            "pattern_type": int(ptype),
            "acls": [
                {
                    "principal": b.principal,
                    "host": b.host,
                    "operation": int(b.operation),
                    "permission_type": int(b.permission_type),
                }
                for b in entries
            ],
        }
        for (rtype, name, ptype), entries in group_by_resource(bindings)
    ]


def acl_creation(c: AclCreation) -> dict[str, Any]:
    return error_fields(c)


def acl_deletion(d: AclDeletion) -> dict[str, Any]:
    return {**error_fields(d), "matching_acls": [acl_binding(b) for b in d.deleted]}


def user_result(u: UserResult) -> dict[str, Any]:
    return {"user": u.user, **error_fields(u)}


def described_user(u: UserResult) -> dict[str, Any]:
    return {
        **user_result(u),
        "credential_infos": [
            {"mechanism": int(mech), "iterations": iterations} for mech, iterations in u.credentials
        ],
    }


def scram_alterations(deletions: Iterable[Any], upsertions: Iterable[Any]) -> AlterScramCredentials:
    """AlterUserScramCredentials' request, from either codec's entries."""
    return AlterScramCredentials(
        deletions=tuple(ScramDeletion(name=d.name, mechanism=int(d.mechanism)) for d in deletions),
        upsertions=tuple(
            ScramUpsertion(
                name=u.name,
                mechanism=int(u.mechanism),
                iterations=int(u.iterations),
                salt=bytes(u.salt),
                salted_password=bytes(u.salted_password),
            )
            for u in upsertions
        ),
    )
