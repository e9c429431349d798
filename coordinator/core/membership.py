"""Who a consumer group heartbeat is from (Kafka's GroupMetadataManager: the request checks,
the member found or created, its epoch checked, the request applied to it).

Pure functions of the request and the group, before anything is written: a request that fails
here changes nothing. KIP-848 "Request Validation" (with Kafka 4.0's relaxations), "Fencing"
(the member epoch, the lost-response exception), "Static Membership" (an instance id's member
replaced when it comes back under a new member id after a temporary leave).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from .commands import ConsumerGroupHeartbeat
from .errors import (
    FencedInstanceIdError,
    FencedMemberEpochError,
    InvalidRequestError,
    UnknownMemberIdError,
    UnreleasedInstanceIdError,
    UnsupportedAssignorError,
)
from .group import ConsumerGroup
from .model import Assignment, ClassicMemberMetadata, ConsumerGroupMember
from .regex import compile_regex

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


def check_heartbeat_request(req: ConsumerGroupHeartbeat, assignor_names: Sequence[str]) -> None:
    """Request validation in Kafka's order (GroupCoordinatorService's
    throwIfConsumerGroupHeartbeatRequestIsInvalid, ConsumerGroupHeartbeat v1): the member id,
    the group, instance and rack ids, the fields of a join, of a static leave, the epoch, the
    server assignor. Then ours (docs/proto.md): a rebalance timeout that is neither -1 nor
    positive and a negative owned partition are INVALID_REQUEST too. ``assignor_names``: the
    server assignors there are. The regex is checked once the member is known
    (:func:`check_new_regex`)."""
    invalid = InvalidRequestError
    epoch = req.member_epoch
    # Every request names its member; a join may leave it to the coordinator (gRPC, as
    # ConsumerGroupHeartbeat v0), and the Kafka listener refuses that for v1.
    if (epoch != 0 or req.member_id) and not req.member_id.strip():
        raise invalid("MemberId can't be empty.")
    if not req.group_id.strip():
        raise invalid("GroupId can't be empty.")
    if req.instance_id is not None and not req.instance_id.strip():
        raise invalid("InstanceId can't be empty.")
    if req.rack_id is not None and not req.rack_id.strip():
        raise invalid("RackId can't be empty.")
    if epoch == 0:
        if req.rebalance_timeout_ms == -1:
            raise invalid("RebalanceTimeoutMs must be provided in first request.")
        if req.topic_partitions is None or req.topic_partitions:
            raise invalid("TopicPartitions must be empty when (re-)joining.")
        if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
            raise invalid(
                "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when "
                "(re-)joining."
            )
    elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if req.instance_id is None:
            raise invalid("InstanceId can't be null.")
    elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        raise invalid("MemberEpoch is invalid.")
    if req.server_assignor is not None and req.server_assignor not in assignor_names:
        raise UnsupportedAssignorError(
            f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: "
            f"{', '.join(assignor_names)}."
        )
    if req.rebalance_timeout_ms != -1 and req.rebalance_timeout_ms <= 0:
        raise invalid(
            f"RebalanceTimeoutMs must be larger than zero, got {req.rebalance_timeout_ms}."
        )
    if req.topic_partitions:
        for topic_id, partitions in req.topic_partitions.items():
            if any(p < 0 for p in partitions):
                raise invalid(
                    f"TopicPartitions has a negative partition index for topic {topic_id}."
                )


def check_new_regex(member: ConsumerGroupMember, req: ConsumerGroupHeartbeat) -> None:
    """INVALID_REGULAR_EXPRESSION for a regex the member did not subscribe with yet that does
    not compile (Kafka's maybeUpdateRegularExpressions: after the member and its epoch are
    checked, before anything is written; a leave's regex is not looked at)."""
    regex = req.subscribed_topic_regex
    if regex and regex != member.subscribed_topic_regex:
        compile_regex(regex)


def find_or_create_member(
    group: ConsumerGroup | None,
    member_id: str,
    req: ConsumerGroupHeartbeat,
    classic: bool = False,
) -> tuple[ConsumerGroupMember, ConsumerGroupMember | None]:
    """The member a heartbeat (not a leave) is from: (member, the static member it replaces or
    None). A new member at epoch 0; a known one with its epoch checked (:func:`check_member_epoch`);
    a static member re-joining under a new member id takes the old one's place (KIP-848 "Static
    Membership"). Only when both speak the consumer protocol must the old one have left
    temporarily first (else UNRELEASED_INSTANCE_ID); a classic holder — which never sends a
    leave on a restart — is replaced at once, and so is any holder by a classic joiner
    (``classic``; Kafka 3.9+, KAFKA-17228: the release is checked only when neither member uses
    the classic protocol)."""
    epoch = req.member_epoch
    instance_id = req.instance_id
    existing = None if group is None else group.members.get(member_id)
    if instance_id is None or group is None:
        if existing is None:
            if epoch != 0:
                raise UnknownMemberIdError(
                    f"Member {member_id} is not a member of group {req.group_id}."
                )
            return ConsumerGroupMember(member_id=member_id), None
        check_member_epoch(existing, epoch, req.topic_partitions)
        return existing, None
    static_id = group.static_members.get(instance_id)
    static = None if static_id is None else group.members[static_id]
    if epoch == 0:
        if static is None:
            if existing is not None:
                check_member_epoch(existing, epoch, req.topic_partitions)
                return existing, None
            return ConsumerGroupMember(member_id=member_id), None
        if static.member_id == member_id:
            # The same incarnation re-joining (e.g. its join response was lost).
            check_member_epoch(static, epoch, req.topic_partitions)
            return static, None
        if (
            not classic
            and static.classic_member_metadata is None
            and static.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH
        ):
            raise UnreleasedInstanceIdError(
                f"Static member {member_id} with instance id {instance_id} cannot join the group "
                f"because the instance id is owned by {static.member_id} member."
            )
        if existing is not None:
            raise InvalidRequestError(
                f"Member {member_id} is already in group {req.group_id}; it cannot take over "
                f"instance id {instance_id}."
            )
        replacement = replace(static, member_id=member_id, member_epoch=0, previous_member_epoch=0)
        return replacement, static
    if static is None:
        raise UnknownMemberIdError(f"Instance id {instance_id} is unknown.")
    if static.member_id != member_id:
        raise FencedInstanceIdError(
            f"Static member {member_id} with instance id {instance_id} was fenced by member "
            f"{static.member_id}."
        )
    check_member_epoch(static, epoch, req.topic_partitions)
    return static, None


def leaving_member(group: ConsumerGroup, req: ConsumerGroupHeartbeat) -> ConsumerGroupMember:
    """The member a leave (epoch -1, or -2 for a static member's temporary leave) is from: by
    member id, or by instance id for a static member, which must be that member's."""
    member_id = req.member_id
    if req.instance_id is None:
        member = group.members.get(member_id)
        if member is None:
            raise UnknownMemberIdError(
                f"Member {member_id} is not a member of group {req.group_id}."
            )
        return member
    static_id = group.static_members.get(req.instance_id)
    if static_id is None:
        raise UnknownMemberIdError(f"Instance id {req.instance_id} is unknown.")
    if static_id != member_id:
        raise FencedInstanceIdError(
            f"Static member {member_id} with instance id {req.instance_id} was fenced by member "
            f"{static_id}."
        )
    return group.members[static_id]


def check_member_epoch(
    member: ConsumerGroupMember, received: int, owned: Assignment | None
) -> None:
    """KIP-848 "Fencing": the epoch a member sends is its own, or (a lost response) its
    previous one while everything it owns is still assigned to it; else FENCED_MEMBER_EPOCH."""
    current = member.member_epoch
    if received == 0 or received == current:
        return  # epoch 0: a known member re-joins after being fenced (KAFKA-19233).
    if received > current:
        raise FencedMemberEpochError(
            f"The consumer group member has a greater member epoch ({received}) than the one known "
            f"by the group coordinator ({current}). The member must abandon all its partitions and rejoin."
        )
    # Lost-response exception (KIP-848 "Request Handling" 3): the previous epoch is accepted
    # when everything the member owns is still assigned to it.
    if received != member.previous_member_epoch or not is_subset(owned, member.assigned_partitions):
        raise FencedMemberEpochError(
            f"The consumer group member has a smaller member epoch ({received}) than the one known "
            f"by the group coordinator ({current}). The member must abandon all its partitions and rejoin."
        )


def updated_member(
    member: ConsumerGroupMember,
    req: ConsumerGroupHeartbeat,
    classic: ClassicMemberMetadata | None = None,
) -> ConsumerGroupMember:
    """The member with the request's fields applied (null means unchanged; a regex "" drops
    the regex); the same object when nothing changes."""
    changes: dict[str, Any] = {}
    if req.instance_id is not None and req.instance_id != member.instance_id:
        changes["instance_id"] = req.instance_id
    if req.rack_id is not None and req.rack_id != member.rack_id:
        changes["rack_id"] = req.rack_id
    if req.rebalance_timeout_ms != -1 and req.rebalance_timeout_ms != member.rebalance_timeout_ms:
        changes["rebalance_timeout_ms"] = req.rebalance_timeout_ms
    if req.server_assignor is not None and req.server_assignor != member.server_assignor_name:
        changes["server_assignor_name"] = req.server_assignor
    if req.subscribed_topic_names is not None:
        names = tuple(sorted(set(req.subscribed_topic_names)))
        if names != member.subscribed_topic_names:
            changes["subscribed_topic_names"] = names
    if req.subscribed_topic_regex is not None:
        regex = req.subscribed_topic_regex or None
        if regex != member.subscribed_topic_regex:
            changes["subscribed_topic_regex"] = regex
    if req.client_id != member.client_id:
        changes["client_id"] = req.client_id
    if req.client_host != member.client_host:
        changes["client_host"] = req.client_host
    if member.classic_member_metadata != classic:
        changes["classic_member_metadata"] = classic
    return replace(member, **changes) if changes else member


def is_subset(owned: Assignment | None, assigned: Mapping[str, frozenset[int]]) -> bool:
    """Whether every topic of ``owned`` is assigned and every partition of it is in
    ``assigned`` (None owns nothing known). As Kafka's isSubset, a topic named with no
    partitions counts: it must be one of the member's assigned topics."""
    if owned is None:
        return False
    for topic_id, partitions in owned.items():
        mine = assigned.get(topic_id)
        if mine is None or not mine.issuperset(partitions):
            return False
    return True
