"""The legacy bridge over gRPC: ``ClassicGroupService`` (Kafka's classic group APIs).

FindCoordinator answers this server for every GROUP key; JoinGroup / SyncGroup / Heartbeat /
LeaveGroup / DescribeGroups convert protobuf to the bridge's dataclasses
(:mod:`legacy_bridge.messages`), call the runtime and convert back. The embedded consumer
protocol bytes (``metadata``, ``assignment``) pass through untouched; the bridge decodes them.

A JoinGroup waiting at the join barrier (or a SyncGroup waiting for the leader) stays parked in
the runtime until the completing batch is durable; on shutdown the runtime answers every parked
request with COORDINATOR_NOT_AVAILABLE (Kafka answers NOT_COORDINATOR when it unloads a group:
either way the client looks the coordinator up again and rejoins).

Every error is in-band (gRPC status OK), as in :mod:`.services`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from coordinator.core.errors import (
    CoordinatorError,
    CoordinatorNotAvailableError,
    ErrorCode,
    InvalidGroupIdError,
    InvalidRequestError,
)
from coordinator.runtime import CoordinatorRuntime, RuntimeState
from kip848.v1 import classic_group_pb2 as pb
from kip848.v1 import classic_group_pb2_grpc
from legacy_bridge import messages as m

from .services import _guard, _with_error, client_host_of, client_id_of

GROUP_KEY_TYPE = 0
NODE_ID = 0
"""The node id this single-process coordinator answers in FindCoordinator."""

Address = Callable[[], tuple[str, int]]


def _check_group_id(group_id: str) -> None:
    if not group_id.strip():
        raise InvalidGroupIdError(f"Group id '{group_id}' is invalid.")


def _opt(msg: Any, field: str) -> Any:
    return getattr(msg, field) if msg.HasField(field) else None


# ---------------------------------------------------------------------------- conversion


def join_from_proto(
    req: pb.JoinGroupRequest, *, client_id: str = "", client_host: str = ""
) -> m.JoinGroup:
    return m.JoinGroup(
        group_id=req.group_id,
        session_timeout_ms=req.session_timeout_ms,
        rebalance_timeout_ms=req.rebalance_timeout_ms
        if req.HasField("rebalance_timeout_ms")
        else -1,
        member_id=req.member_id,
        group_instance_id=_opt(req, "group_instance_id"),
        protocol_type=req.protocol_type,
        protocols=tuple((p.name, bytes(p.metadata)) for p in req.protocols),
        reason=_opt(req, "reason"),
        client_id=client_id,
        client_host=client_host,
    )


def join_to_proto(resp: m.JoinGroupResponse) -> pb.JoinGroupResponse:
    out = pb.JoinGroupResponse(
        error_code=int(resp.error_code),
        generation_id=resp.generation_id,
        leader=resp.leader,
        skip_assignment=resp.skip_assignment,
        member_id=resp.member_id,
    )
    if resp.error_message is not None:
        out.error_message = resp.error_message
    if resp.protocol_type is not None:
        out.protocol_type = resp.protocol_type
    if resp.protocol_name is not None:
        out.protocol_name = resp.protocol_name
    for x in resp.members:
        item = out.members.add(member_id=x.member_id, metadata=x.metadata)
        if x.group_instance_id is not None:
            item.group_instance_id = x.group_instance_id
    return out


def sync_from_proto(req: pb.SyncGroupRequest) -> m.SyncGroup:
    return m.SyncGroup(
        group_id=req.group_id,
        generation_id=req.generation_id,
        member_id=req.member_id,
        group_instance_id=_opt(req, "group_instance_id"),
        protocol_type=_opt(req, "protocol_type"),
        protocol_name=_opt(req, "protocol_name"),
        assignments=tuple((a.member_id, bytes(a.assignment)) for a in req.assignments),
    )


def sync_to_proto(resp: m.SyncGroupResponse) -> pb.SyncGroupResponse:
    out = pb.SyncGroupResponse(error_code=int(resp.error_code), assignment=resp.assignment)
    if resp.error_message is not None:
        out.error_message = resp.error_message
    if resp.protocol_type is not None:
        out.protocol_type = resp.protocol_type
    if resp.protocol_name is not None:
        out.protocol_name = resp.protocol_name
    return out


def heartbeat_from_proto(req: pb.HeartbeatRequest) -> m.Heartbeat:
    return m.Heartbeat(
        group_id=req.group_id,
        generation_id=req.generation_id,
        member_id=req.member_id,
        group_instance_id=_opt(req, "group_instance_id"),
    )


def heartbeat_to_proto(resp: m.HeartbeatResponse) -> pb.HeartbeatResponse:
    return _with_error(pb.HeartbeatResponse, ErrorCode(resp.error_code), resp.error_message)


def leave_from_proto(req: pb.LeaveGroupRequest) -> m.LeaveGroup:
    return m.LeaveGroup(
        group_id=req.group_id,
        members=tuple(
            m.LeaveMember(
                member_id=x.member_id,
                group_instance_id=_opt(x, "group_instance_id"),
                reason=_opt(x, "reason"),
            )
            for x in req.members
        ),
    )


def leave_to_proto(resp: m.LeaveGroupResponse) -> pb.LeaveGroupResponse:
    out = pb.LeaveGroupResponse(error_code=int(resp.error_code))
    if resp.error_message is not None:
        out.error_message = resp.error_message
    for x in resp.members:
        item = out.members.add(member_id=x.member_id, error_code=int(x.error_code))
        if x.group_instance_id is not None:
            item.group_instance_id = x.group_instance_id
        if x.error_message is not None:
            item.error_message = x.error_message
    return out


AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


def described_group_to_proto(g: m.DescribedGroup) -> pb.DescribeGroupsResponse.DescribedGroup:
    out = pb.DescribeGroupsResponse.DescribedGroup(
        error_code=int(g.error_code),
        group_id=g.group_id,
        group_state=g.group_state,
        protocol_type=g.protocol_type,
        protocol_data=g.protocol_data,
        authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )
    if g.error_message is not None:
        out.error_message = g.error_message
    for x in g.members:
        item = out.members.add(
            member_id=x.member_id,
            client_id=x.client_id,
            client_host=x.client_host,
            member_metadata=x.member_metadata,
            member_assignment=x.member_assignment,
        )
        if x.group_instance_id is not None:
            item.group_instance_id = x.group_instance_id
    return out


def described_group_error(
    group_id: str, code: ErrorCode, text: str | None
) -> pb.DescribeGroupsResponse.DescribedGroup:
    out = pb.DescribeGroupsResponse.DescribedGroup(
        error_code=int(code), group_id=group_id, authorized_operations=AUTHORIZED_OPERATIONS_OMITTED
    )
    if text is not None:
        out.error_message = text
    return out


# ---------------------------------------------------------------------------- servicer


class ClassicGroupService(classic_group_pb2_grpc.ClassicGroupServiceServicer):
    """``address`` answers this server's advertised (host, port) for FindCoordinator (the port is
    known only once the server is bound)."""

    def __init__(self, runtime: CoordinatorRuntime, address: Address) -> None:
        self.runtime = runtime
        self.address = address

    async def FindCoordinator(
        self, request: pb.FindCoordinatorRequest, context: grpc.aio.ServicerContext
    ) -> pb.FindCoordinatorResponse:
        runtime = self.runtime

        async def body() -> pb.FindCoordinatorResponse:
            out = pb.FindCoordinatorResponse(error_code=0)
            host, port = self.address()
            exc: CoordinatorError | None = None
            if request.key_type != GROUP_KEY_TYPE:
                exc = InvalidRequestError(
                    f"Key type {request.key_type} is not served: this coordinator serves only groups (key type 0)."
                )
            elif runtime.state is not RuntimeState.ACTIVE:
                exc = CoordinatorNotAvailableError(f"The coordinator is {runtime.state.value}.")
            for key in request.coordinator_keys:
                if exc is None:
                    out.coordinators.add(
                        key=key, node_id=NODE_ID, host=host, port=port, error_code=0
                    )
                else:
                    out.coordinators.add(
                        key=key,
                        node_id=-1,
                        host="",
                        port=-1,
                        error_code=int(exc.code),
                        error_message=exc.message,
                    )
            if exc is not None and not request.coordinator_keys:
                out.error_code = int(exc.code)
                out.error_message = exc.message
            return out

        return await _guard(runtime, context, pb.FindCoordinatorResponse, body)

    async def JoinGroup(
        self, request: pb.JoinGroupRequest, context: grpc.aio.ServicerContext
    ) -> pb.JoinGroupResponse:
        runtime = self.runtime

        async def body() -> pb.JoinGroupResponse:
            req = join_from_proto(
                request, client_id=client_id_of(context), client_host=client_host_of(context)
            )
            return join_to_proto(await runtime.classic_join(req))

        def error(code: ErrorCode, text: str | None) -> pb.JoinGroupResponse:
            out = _with_error(
                pb.JoinGroupResponse, code, text, generation_id=-1, member_id=request.member_id
            )
            return out

        return await _guard(runtime, context, pb.JoinGroupResponse, body, error)

    async def SyncGroup(
        self, request: pb.SyncGroupRequest, context: grpc.aio.ServicerContext
    ) -> pb.SyncGroupResponse:
        runtime = self.runtime

        async def body() -> pb.SyncGroupResponse:
            _check_group_id(request.group_id)
            return sync_to_proto(await runtime.classic_sync(sync_from_proto(request)))

        return await _guard(runtime, context, pb.SyncGroupResponse, body)

    async def Heartbeat(
        self, request: pb.HeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> pb.HeartbeatResponse:
        runtime = self.runtime

        async def body() -> pb.HeartbeatResponse:
            _check_group_id(request.group_id)
            return heartbeat_to_proto(
                await runtime.classic_heartbeat(heartbeat_from_proto(request))
            )

        return await _guard(runtime, context, pb.HeartbeatResponse, body)

    async def LeaveGroup(
        self, request: pb.LeaveGroupRequest, context: grpc.aio.ServicerContext
    ) -> pb.LeaveGroupResponse:
        runtime = self.runtime

        async def body() -> pb.LeaveGroupResponse:
            _check_group_id(request.group_id)
            return leave_to_proto(await runtime.classic_leave(leave_from_proto(request)))

        return await _guard(runtime, context, pb.LeaveGroupResponse, body)

    async def DescribeGroups(
        self, request: pb.DescribeGroupsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeGroupsResponse:
        runtime = self.runtime

        async def body() -> pb.DescribeGroupsResponse:
            out = pb.DescribeGroupsResponse(error_code=0)
            for group_id in request.group_ids:
                try:
                    _check_group_id(group_id)
                    for g in await runtime.describe_classic_groups([group_id]):
                        out.groups.append(described_group_to_proto(g))
                except CoordinatorError as exc:
                    out.groups.append(described_group_error(group_id, exc.code, exc.message))
            return out

        return await _guard(runtime, context, pb.DescribeGroupsResponse, body)
