"""The gRPC codec: thin grpc.aio servicers over the service layer (``service.py``).

Each gRPC method is one row of a table: convert the proto request (``convert.py``), call the
service method, convert its response back. The service answers every protocol error in-band
(``error_code``/``error_message``, gRPC status OK); a request that does not convert (a topic id
that is not 16 bytes) is answered in-band too, in the RPC's error shape. While the server shuts
down, calls get the gRPC status UNAVAILABLE (``Caller.abort_when_closing``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.descriptor import ServiceDescriptor

from coordinator.core.errors import CoordinatorError, ErrorCode
from coordinator.observability import tracing
from coordinator.observability.requests import ADMIN_METHODS
from coordinator.runtime import CoordinatorRuntime
from kip848.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    classic_group_pb2,
    classic_group_pb2_grpc,
    consumer_group_pb2,
    consumer_group_pb2_grpc,
    offsets_pb2,
    offsets_pb2_grpc,
    testing_pb2,
    testing_pb2_grpc,
)

from . import convert
from .api import Caller, Node, WatchRequest
from .service import CoordinatorService, ShuttingDown

log = logging.getLogger("kip848.server")

CLIENT_ID_KEY = "client-id"
NODE_ID = 0
"""The node id the gRPC FindCoordinator answers (one coordinator process)."""

Address = Callable[[], tuple[str, int]]


def client_id_of(context: grpc.aio.ServicerContext) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == CLIENT_ID_KEY:
            return value if isinstance(value, str) else value.decode("utf-8", "replace")
    return ""


def client_host_of(context: grpc.aio.ServicerContext) -> str:
    """The peer address shown like Kafka's ClientHost (``/127.0.0.1``)."""
    peer = context.peer() or ""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return "/" + rest.rpartition(":")[0]
    if kind == "ipv6":
        host = rest.rpartition(":")[0]
        return "/" + host.strip("[]")
    return "/" + peer if peer else ""


@dataclass(frozen=True, slots=True)
class Rpc:
    """One gRPC method: ``decode(request, caller)`` -> service request; the service method's
    name; ``encode(response, service)`` -> proto response; ``undecodable(request, code, text)``
    answers a request that does not convert (default: a top-level error)."""

    response_type: type[Any]
    method: str
    decode: Callable[[Any, Caller], Any]
    encode: Callable[[Any, CoordinatorService], Any]
    undecodable: Callable[[Any, ErrorCode, str | None], Any] | None = None
    needs_identity: bool = False


class GrpcServicer:
    """Base of the generated servicers: runs table rows over one :class:`CoordinatorService`.

    ``max_response_bytes`` (the server's ``--max-message-bytes``; None: unchecked): an answer
    larger than gRPC may send is replaced by an in-band INVALID_REQUEST saying so and what to
    ask instead — never a bare RESOURCE_EXHAUSTED with a traceback in the log."""

    ROWS: dict[str, Rpc] = {}
    max_response_bytes: int | None = None

    def __init__(
        self, runtime: CoordinatorRuntime | CoordinatorService, address: Address | None = None
    ) -> None:
        self.service = (
            runtime if isinstance(runtime, CoordinatorService) else CoordinatorService(runtime)
        )
        self.runtime = self.service.runtime
        self.address = address

    def caller(self, context: grpc.aio.ServicerContext, identity: bool) -> Caller:
        node = None
        if self.address is not None:
            host, port = self.address()
            node = Node(node_id=NODE_ID, host=host, port=port)
        if not identity:
            return Caller(node=node, abort_when_closing=True)
        return Caller(
            client_id=client_id_of(context),
            client_host=client_host_of(context),
            node=node,
            abort_when_closing=True,
        )

    async def run(self, row: Rpc, request: Any, context: grpc.aio.ServicerContext) -> Any:
        # Audited (admin) RPCs, and every RPC while tracing, need the client id and address.
        identity = row.needs_identity or row.method in ADMIN_METHODS or tracing.STATE.enabled
        caller = self.caller(context, identity)
        try:
            self.service.limits.precheck_grpc(
                row.response_type.DESCRIPTOR.name[:-8],
                request,
                self.service.runtime.known_partitions,
            )
        except CoordinatorError as exc:  # too much in one request: refused before converting
            return convert.with_error(row.response_type, exc.code, exc.message)
        try:
            req = row.decode(request, caller)
        except CoordinatorError as exc:
            if row.undecodable is not None:
                return row.undecodable(request, exc.code, exc.message)
            return convert.with_error(row.response_type, exc.code, exc.message)
        try:
            answer = await getattr(self.service, row.method)(req, caller)
        except ShuttingDown as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
            raise  # abort raises; never reached
        out = row.encode(answer, self.service)
        limit = self.max_response_bytes
        if limit is not None:
            size = out.ByteSize()
            if size > limit:
                return too_large(row, size, limit)
        return out


TOO_LARGE_HINTS = {
    "ListGroups": "list with a states or types filter",
    "OffsetFetch": "fetch fewer groups, or name the topics",
    "ConsumerGroupDescribe": "describe fewer groups at a time",
    "DescribeGroups": "describe fewer groups at a time",
}


def too_large(row: Rpc, size: int, limit: int) -> Any:
    """The in-band answer to a request whose answer would not fit in one gRPC message."""
    name = row.response_type.DESCRIPTOR.name.removesuffix("Response")
    hint = TOO_LARGE_HINTS.get(name, "ask for less in one request")
    text = (
        f"The answer would be {size} bytes, more than the largest message this server sends "
        f"({limit} bytes: kip848 serve --max-message-bytes); {hint}."
    )
    log.warning("%s: %s", name, text)
    return convert.with_error(row.response_type, ErrorCode.INVALID_REQUEST, text)


def _servicer(name: str, base: type[Any], rows: dict[str, Rpc]) -> type[GrpcServicer]:
    """A servicer class with one method per row (``await self.run(row, request, context)``)."""

    def method(row: Rpc) -> Callable[[Any, Any, Any], Awaitable[Any]]:
        async def call(self: GrpcServicer, request: Any, context: Any) -> Any:
            return await self.run(row, request, context)

        return call

    namespace: dict[str, Any] = {"ROWS": rows, "__doc__": f"{name}: rows of the gRPC codec."}
    for rpc_name, row in rows.items():
        namespace[rpc_name] = method(row)
    return type(name, (GrpcServicer, base), namespace)


def _reply(message_type: type[Any], encode: Callable[..., Any], *, names: bool = False) -> Any:
    if names:
        return lambda reply, service: convert.reply_to_proto(
            message_type, reply, lambda v: encode(v, service.topic_name)
        )
    return lambda reply, _service: convert.reply_to_proto(message_type, reply, encode)


def _same(request: Any, _caller: Caller) -> Any:
    return request


cg = consumer_group_pb2
ConsumerGroupService = _servicer(
    "ConsumerGroupService",
    consumer_group_pb2_grpc.ConsumerGroupServiceServicer,
    {
        "ConsumerGroupHeartbeat": Rpc(
            cg.ConsumerGroupHeartbeatResponse,
            "consumer_group_heartbeat",
            lambda r, c: convert.heartbeat_from_proto(
                r, client_id=c.client_id, client_host=c.client_host
            ),
            _reply(cg.ConsumerGroupHeartbeatResponse, convert.heartbeat_to_proto, names=True),
            needs_identity=True,
        ),
        "ConsumerGroupDescribe": Rpc(
            cg.ConsumerGroupDescribeResponse,
            "consumer_group_describe",
            lambda r, _c: list(r.group_ids),
            _reply(
                cg.ConsumerGroupDescribeResponse,
                convert.consumer_group_describe_to_proto,
                names=True,
            ),
        ),
    },
)


async def _consumer_group_watch(
    self: GrpcServicer, request: cg.ConsumerGroupWatchRequest, context: Any
) -> AsyncIterator[cg.ConsumerGroupWatchResponse]:
    """The one server-streaming RPC (push.py): each event of the service, converted."""
    caller = self.caller(context, False)
    req = WatchRequest(group_id=request.group_id, member_id=request.member_id)
    try:
        async for event in self.service.consumer_group_watch(req, caller):
            yield convert.watch_event_to_proto(event, self.service.topic_name)
    except ShuttingDown as exc:
        await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))


ConsumerGroupService.ConsumerGroupWatch = _consumer_group_watch  # type: ignore[attr-defined]

OffsetService = _servicer(
    "OffsetService",
    offsets_pb2_grpc.OffsetServiceServicer,
    {
        "OffsetCommit": Rpc(
            offsets_pb2.OffsetCommitResponse,
            "offset_commit",
            lambda r, _c: convert.offset_commit_from_proto(r),
            _reply(offsets_pb2.OffsetCommitResponse, convert.offset_commit_to_proto),
            # A group-level error goes on every partition, as Kafka answers OffsetCommit.
            convert.offset_commit_error,
        ),
        "OffsetFetch": Rpc(
            offsets_pb2.OffsetFetchResponse,
            "offset_fetch",
            lambda r, _c: convert.offset_fetch_from_proto(r),
            _reply(offsets_pb2.OffsetFetchResponse, convert.offset_fetch_to_proto),
        ),
        "OffsetDelete": Rpc(
            offsets_pb2.OffsetDeleteResponse,
            "offset_delete",
            lambda r, _c: (r.group_id, [(t.name, list(t.partition_indexes)) for t in r.topics]),
            _reply(offsets_pb2.OffsetDeleteResponse, convert.offset_delete_to_proto),
        ),
    },
)

AdminService = _servicer(
    "AdminService",
    admin_pb2_grpc.AdminServiceServicer,
    {
        "CreateTopics": Rpc(
            admin_pb2.CreateTopicsResponse,
            "create_topics",
            lambda r, _c: convert.new_topics_from_proto(r),
            _reply(admin_pb2.CreateTopicsResponse, convert.create_topics_to_proto),
        ),
        "CreatePartitions": Rpc(
            admin_pb2.CreatePartitionsResponse,
            "create_partitions",
            lambda r, _c: [(t.name, t.count) for t in r.topics],
            _reply(admin_pb2.CreatePartitionsResponse, convert.create_partitions_to_proto),
        ),
        "DeleteTopics": Rpc(
            admin_pb2.DeleteTopicsResponse,
            "delete_topics",
            lambda r, _c: list(r.names),
            _reply(admin_pb2.DeleteTopicsResponse, convert.delete_topics_to_proto),
        ),
        "ListTopics": Rpc(
            admin_pb2.ListTopicsResponse,
            "list_topics",
            lambda _r, _c: None,
            _reply(admin_pb2.ListTopicsResponse, convert.list_topics_to_proto),
        ),
        "ListOffsets": Rpc(
            admin_pb2.ListOffsetsResponse,
            "list_offsets",
            lambda r, _c: convert.list_offsets_from_proto(r),
            _reply(admin_pb2.ListOffsetsResponse, convert.list_offsets_to_proto),
        ),
        "ListGroups": Rpc(
            admin_pb2.ListGroupsResponse,
            "list_groups",
            lambda r, _c: (list(r.states_filter), list(r.types_filter)),
            _reply(admin_pb2.ListGroupsResponse, convert.list_groups_to_proto),
        ),
        "DeleteGroups": Rpc(
            admin_pb2.DeleteGroupsResponse,
            "delete_groups",
            lambda r, _c: list(r.group_ids),
            _reply(admin_pb2.DeleteGroupsResponse, convert.delete_groups_to_proto),
        ),
        "DescribeConfigs": Rpc(
            admin_pb2.DescribeConfigsResponse,
            "describe_configs",
            lambda r, _c: convert.describe_configs_from_proto(r),
            lambda reply, _s: convert.describe_configs_to_proto(reply),
        ),
        "IncrementalAlterConfigs": Rpc(
            admin_pb2.IncrementalAlterConfigsResponse,
            "incremental_alter_configs",
            lambda r, _c: convert.alter_configs_from_proto(r),
            lambda reply, _s: convert.alter_configs_to_proto(reply),
        ),
    },
)

pb = classic_group_pb2
ClassicGroupService = _servicer(
    "ClassicGroupService",
    classic_group_pb2_grpc.ClassicGroupServiceServicer,
    {
        "FindCoordinator": Rpc(
            pb.FindCoordinatorResponse,
            "find_coordinator",
            lambda r, _c: convert.find_coordinator_from_proto(r),
            lambda reply, _s: convert.find_coordinator_to_proto(reply),
        ),
        "JoinGroup": Rpc(
            pb.JoinGroupResponse,
            "join_group",
            lambda r, c: convert.join_from_proto(
                r, client_id=c.client_id, client_host=c.client_host
            ),
            lambda resp, _s: convert.join_to_proto(resp),
            needs_identity=True,
        ),
        "SyncGroup": Rpc(
            pb.SyncGroupResponse,
            "sync_group",
            lambda r, _c: convert.sync_from_proto(r),
            lambda resp, _s: convert.sync_to_proto(resp),
        ),
        "Heartbeat": Rpc(
            pb.HeartbeatResponse,
            "heartbeat",
            lambda r, _c: convert.classic_heartbeat_from_proto(r),
            lambda resp, _s: convert.classic_heartbeat_to_proto(resp),
        ),
        "LeaveGroup": Rpc(
            pb.LeaveGroupResponse,
            "leave_group",
            lambda r, _c: convert.leave_from_proto(r),
            lambda resp, _s: convert.leave_to_proto(resp),
        ),
        "DescribeGroups": Rpc(
            pb.DescribeGroupsResponse,
            "describe_groups",
            lambda r, _c: list(r.group_ids),
            _reply(pb.DescribeGroupsResponse, convert.describe_groups_to_proto),
        ),
    },
)

TestingService = _servicer(
    "TestingService",
    testing_pb2_grpc.TestingServiceServicer,
    {
        "AdvanceTime": Rpc(
            testing_pb2.AdvanceTimeResponse,
            "advance_time",
            lambda r, _c: r.ms,
            _reply(
                testing_pb2.AdvanceTimeResponse,
                lambda now: testing_pb2.AdvanceTimeResponse(error_code=0, now_ms=now),
            ),
        ),
    },
)
TestingService.__test__ = False  # type: ignore[attr-defined]  # not a pytest class


def service_descriptors() -> list[ServiceDescriptor]:
    """The coordinator's own gRPC services (what a front end forwards), TestingService last."""
    return [
        consumer_group_pb2.DESCRIPTOR.services_by_name["ConsumerGroupService"],
        admin_pb2.DESCRIPTOR.services_by_name["AdminService"],
        offsets_pb2.DESCRIPTOR.services_by_name["OffsetService"],
        classic_group_pb2.DESCRIPTOR.services_by_name["ClassicGroupService"],
        testing_pb2.DESCRIPTOR.services_by_name["TestingService"],
    ]
