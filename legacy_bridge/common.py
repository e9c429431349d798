"""Helpers shared by the bridge's modules: request checks of the classic protocol, static
membership checks, topic names <-> ids, and a member's assignment in the embedded consumer
protocol."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from coordinator.core.commands import Pending
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.errors import (
    CoordinatorError,
    FencedInstanceIdError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidRequestError,
    InvalidSessionTimeoutError,
    UnknownMemberIdError,
)
from coordinator.core.model import Assignment, ConsumerGroupMember, TopicsImage

from . import messages as m
from .protocol import (
    AssignmentMessage,
    ProtocolError,
    decode_subscription,
    encode_assignment,
)

JoinAnswer = m.JoinGroupResponse | Pending
"""What a JoinGroup answers: its response, or ``Pending`` when it waits at the barrier."""
SyncAnswer = m.SyncGroupResponse | Pending
"""What a SyncGroup answers: its response, or ``Pending`` while the leader's assignment is due."""

MIGRATION_UPGRADE = ("bidirectional", "upgrade")
MIGRATION_DOWNGRADE = ("bidirectional", "downgrade")

# Timer kinds of the bridge (keys are (kind, group id, member id or "")). Classic groups:
CLASSIC_SESSION = "classic-session"
CLASSIC_PENDING = "classic-pending"
CLASSIC_JOIN = "classic-join"
CLASSIC_INITIAL_JOIN = "classic-initial-join"
CLASSIC_SYNC = "classic-sync"
CLASSIC_GROUP_TIMER_KINDS = (CLASSIC_JOIN, CLASSIC_INITIAL_JOIN, CLASSIC_SYNC)
CLASSIC_ASSIGNMENT_WRITE = "classic-assignment"
"""The kind of the write watch of a leader's SyncGroup (payload: generation, sync token)."""
# Classic members of consumer groups: rejoin, and send SyncGroup, within the rebalance timeout.
MIXED_JOIN = "classic-member-join"
MIXED_SYNC = "classic-member-sync"


NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000
"""How long a new member of a classic group may wait in its first JoinGroup (Kafka's
classicGroupNewMemberJoinTimeoutMs): it has no member id to heartbeat with, and a client that
gave up on the request would otherwise stay a member of every rebalance."""


def error_fields(error: CoordinatorError) -> dict[str, Any]:
    """``error_code`` and ``error_message`` of a classic response answering ``error``."""
    return {"error_code": int(error.code), "error_message": error.message}


def check_join_request(config: GroupCoordinatorConfig, req: m.JoinGroup) -> None:
    if not req.group_id.strip():
        raise InvalidGroupIdError(f"Group id '{req.group_id}' is invalid.")
    if req.group_instance_id is not None and not req.group_instance_id.strip():
        raise InvalidRequestError("GroupInstanceId can't be empty.")
    lo, hi = config.classic_min_session_timeout_ms, config.classic_max_session_timeout_ms
    if not lo <= req.session_timeout_ms <= hi:
        raise InvalidSessionTimeoutError(
            f"SessionTimeoutMs {req.session_timeout_ms} is out of range [{lo}, {hi}]."
        )
    if not req.protocol_type or not req.protocols:
        raise InconsistentGroupProtocolError("ProtocolType and Protocols must be set.")


def rebalance_timeout(req: m.JoinGroup) -> int:
    """JoinGroup v0 had no rebalance timeout: the session timeout stands in."""
    return req.rebalance_timeout_ms if req.rebalance_timeout_ms > 0 else req.session_timeout_ms


def check_static_owner(
    static_members: Mapping[str, str], group_id: str, member_id: str, instance_id: str | None
) -> None:
    """A request naming an instance id must come from the member that owns it (Kafka's
    validateMember): an unknown instance id is UNKNOWN_MEMBER_ID, one owned by another member
    id (a newer incarnation replaced this one) FENCED_INSTANCE_ID."""
    if instance_id is None:
        return
    owner = static_members.get(instance_id)
    if owner is None:
        raise UnknownMemberIdError(f"Instance id {instance_id} is unknown in group {group_id}.")
    if owner != member_id:
        raise FencedInstanceIdError(
            f"Static member {member_id} with instance id {instance_id} was fenced by member {owner}."
        )


def leaving_member_id(static_members: Mapping[str, str], ident: m.LeaveMember) -> str:
    """The member a LeaveGroup entry names: by instance id (which must be known and, if a member
    id is given too, owned by it) or by member id."""
    if ident.group_instance_id is None:
        return ident.member_id
    owner = static_members.get(ident.group_instance_id)
    if owner is None:
        raise UnknownMemberIdError(f"Instance id {ident.group_instance_id} is unknown.")
    if ident.member_id and ident.member_id != owner:
        raise FencedInstanceIdError(
            f"Static member {ident.member_id} with instance id {ident.group_instance_id} was fenced by member {owner}."
        )
    return owner


def leave_error(ident: m.LeaveMember, error: CoordinatorError) -> m.LeaveMemberResponse:
    """LeaveGroup's answer for one member it could not remove."""
    return m.LeaveMemberResponse(
        member_id=ident.member_id,
        group_instance_id=ident.group_instance_id,
        **error_fields(error),
    )


def topic_names(image: TopicsImage, a: Assignment) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """An assignment by topic id -> (name, partitions) pairs sorted by name (unknown ids are
    dropped)."""
    by_id = image.by_id
    out = []
    for topic_id in sorted(a, key=lambda t: by_id[t].name if t in by_id else t):
        t = by_id.get(topic_id)
        if t is not None:
            out.append((t.name, tuple(sorted(a[topic_id]))))
    return tuple(out)


def topic_ids(
    image: TopicsImage,
    tps: Iterable[tuple[str, Iterable[int]]],
    taken: set[tuple[str, int]] | None = None,
) -> dict[str, frozenset[int]]:
    """Names -> ids; unknown topics, out-of-range and (if ``taken``) already-claimed partitions
    are dropped."""
    by_name = image.by_name
    out: dict[str, set[int]] = {}
    for name, partitions in tps:
        t = by_name.get(name)
        if t is None:
            continue
        for p in partitions:
            if not 0 <= p < t.num_partitions:
                continue
            if taken is not None:
                if (t.topic_id, p) in taken:
                    continue
                taken.add((t.topic_id, p))
            out.setdefault(t.topic_id, set()).add(p)
    return {t: frozenset(ps) for t, ps in out.items()}


def encode_member_assignment(image: TopicsImage, member: ConsumerGroupMember) -> bytes:
    """A consumer-group member's assigned partitions as a classic assignment (in the version of
    the subscription it sent, at most 3)."""
    version = 0
    c = member.classic_member_metadata
    if c is not None and c.supported_protocols:
        try:
            version = min(decode_subscription(c.supported_protocols[0][1]).version, 3)
        except ProtocolError:
            version = 0
    return encode_assignment(
        AssignmentMessage(
            version=version, assigned_partitions=topic_names(image, member.assigned_partitions)
        )
    )
