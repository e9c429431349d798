"""Classic group requests and responses (Kafka's JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
DescribeGroups), as frozen dataclasses. The server converts protobuf at the boundary.

Responses carry their own ``error_code``: a deferred JoinGroup/SyncGroup may be answered with an
error long after its request (e.g. REBALANCE_IN_PROGRESS when a rebalance starts over). Errors
known when the request arrives are raised as ``CoordinatorError`` like everywhere in the core.
"""

from __future__ import annotations

from dataclasses import dataclass

Protocols = tuple[tuple[str, bytes], ...]
"""((protocol name, metadata bytes), ...) in the member's order of preference."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinGroup:
    group_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int = -1
    """-1 (absent): the session timeout, as JoinGroup v0 did."""
    member_id: str = ""
    group_instance_id: str | None = None
    protocol_type: str = ""
    protocols: Protocols = ()
    reason: str | None = None
    client_id: str = ""
    client_host: str = ""
    supports_skip_assignment: bool = True
    """The client knows KIP-814's ``skip_assignment`` (JoinGroup v9+; gRPC: always)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinGroupMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinGroupResponse:
    error_code: int = 0
    error_message: str | None = None
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    member_id: str = ""
    members: tuple[JoinGroupMember, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncGroup:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignments: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncGroupResponse:
    error_code: int = 0
    error_message: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True, kw_only=True)
class Heartbeat:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatResponse:
    error_code: int = 0
    error_message: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaveMember:
    member_id: str = ""
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaveGroup:
    group_id: str
    members: tuple[LeaveMember, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaveMemberResponse:
    member_id: str
    group_instance_id: str | None
    error_code: int = 0
    error_message: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaveGroupResponse:
    error_code: int = 0
    error_message: str | None = None
    members: tuple[LeaveMemberResponse, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    member_metadata: bytes
    member_assignment: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedGroup:
    group_id: str
    error_code: int = 0
    error_message: str | None = None
    group_state: str = ""
    protocol_type: str = ""
    protocol_data: str = ""
    members: tuple[DescribedMember, ...] = ()
    generation_id: int = -1
    """The classic generation (0 for a simple group); -1 when there is no classic group.
    Not in Kafka's DescribeGroups: the gRPC answer carries it for the operator tools."""
