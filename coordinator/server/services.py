"""The gRPC codec: thin grpc.aio servicers over the service layer (``service.py``).

Each gRPC method is one row of a table: convert the proto request (``convert.py``), call the
service method, convert its response back. The service answers every protocol error in-band
(``error_code``/``error_message``, gRPC status OK); a request that does not convert (a topic id
that is not 16 bytes) is answered in-band too, in the RPC's error shape. While the server shuts
down, calls get the gRPC status UNAVAILABLE (``Caller.abort_when_closing``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from functools import partial
from types import ModuleType
from typing import Any
from urllib.parse import unquote

import grpc
from google.protobuf.descriptor import ServiceDescriptor

from coordinator.core.errors import CoordinatorError, ErrorCode
from coordinator.runtime import CoordinatorRuntime
from coordinator.runtime.collector import no_collections
from coordinator.security.principal import ANONYMOUS, KafkaPrincipal
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
from .authorization import GROUP
from .forwarding import ForwardedContext
from .grpc_auth import Unauthenticated
from .h2context import H2Context
from .rpc import ShuttingDown
from .service import CoordinatorService

log = logging.getLogger("kip848.server")

ENCODE_INLINE = 1000
"""A ListTopics answer of more topics than this is converted off the loop."""
CLIENT_ID_KEY = "client-id"
TRACEPARENT_KEY = "traceparent"
NODE_ID = 0
"""The node id the gRPC FindCoordinator answers (one coordinator process)."""

Address = Callable[[], tuple[str, int]]


def anonymous(_context: Any) -> KafkaPrincipal:
    """The principal of a call on a listener that authenticates nobody."""
    return ANONYMOUS


def client_id_of(context: grpc.aio.ServicerContext) -> str:
    return client_id_in(context.invocation_metadata() or ())


def client_id_in(metadata: Any) -> str:
    return identity_in(metadata, False)[0]


def identity_in(metadata: Any, tracing_on: bool) -> tuple[str, Any]:
    """The client id in a call's metadata and, with ``tracing_on``, the metadata itself if it
    carries a W3C ``traceparent`` (the caller's trace context, followed by the service layer's
    sampling decision), else None: one pass over the metadata for both."""
    client_id = None
    traced = None
    for key, value in metadata:
        if key == CLIENT_ID_KEY and client_id is None:
            client_id = value if isinstance(value, str) else value.decode("utf-8", "replace")
            if not tracing_on or traced is not None:
                break
        elif key == TRACEPARENT_KEY and tracing_on:
            traced = metadata
            if client_id is not None:
                break
    return client_id or "", traced


def trace_context_in(metadata: Any) -> Any:
    """The call's metadata if it carries a W3C ``traceparent`` (the caller's trace context),
    else None."""
    for key, _value in metadata:
        if key == TRACEPARENT_KEY:
            return metadata
    return None


def identity_of(context: grpc.aio.ServicerContext) -> tuple[str, str]:
    """The call's client id and address (``Caller.identify``: read only for a traced request
    whose identity was not otherwise needed)."""
    return client_id_of(context), client_host_of(context)


def client_host_of(context: grpc.aio.ServicerContext) -> str:
    """The peer address shown like Kafka's ClientHost (``/127.0.0.1``, ``/::1``): what ACL
    hosts are compared with. Our h2 server worked it out when the connection was made
    (``H2Context.client_host``); otherwise it is read of grpc's peer string. grpc-core writes
    an IPv6 peer's brackets URL-encoded (``ipv6:%5B::1%5D:5555``); an IPv4 client of an IPv6
    socket is its IPv4 address, as Java sees it."""
    if type(context) is H2Context:
        return context.client_host()
    peer = context.peer() or ""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return "/" + rest.rpartition(":")[0]
    if kind == "ipv6":
        host = unquote(rest.rpartition(":")[0]).strip("[]")
        return "/" + (host[7:] if host.startswith("::ffff:") and "." in host else host)
    return "/" + peer if peer else ""


@dataclass(frozen=True, slots=True)
class Rpc:
    """One gRPC method, a row of a service's table (:func:`_servicer`).

    ``decode(request)`` -> the service's request (``decode(request, client_id=, client_host=, principal=)``
    when ``needs_identity``). ``encode`` -> the proto response: by default it is given the
    value of the service's :class:`~.api.Reply` (a top-level error is answered by the bare
    response carrying it), and the topic-name lookup too when ``names``; ``whole``: it is given
    the service's answer as it is. ``undecodable(request, code, text)`` answers a request that
    does not convert (default: a top-level error). ``response_type`` (the proto module's
    ``<Name>Response``) and ``method`` (the service method: the name in snake_case) are filled
    in by the table from the RPC's name. ``audit``: an administrative RPC, each resource it acts
    on gets an audit line (on every protocol: the service layer's observer,
    :class:`~.rpc.RpcInfo`), so its callers' client id and address are read."""

    decode: Callable[..., Any]
    encode: Callable[..., Any]
    whole: bool = False
    names: bool = False
    undecodable: Callable[[Any, ErrorCode, str | None], Any] | None = None
    needs_identity: bool = False
    audit: bool = False
    response_type: type[Any] = type(None)
    method: str = ""


class GrpcServicer:
    """Base of the generated servicers: runs table rows over one :class:`CoordinatorService`.

    ``max_response_bytes`` (the server's ``--max-message-bytes``; None: unchecked): an answer
    larger than gRPC may send is replaced by an in-band INVALID_REQUEST saying so and what to
    ask instead — never a bare RESOURCE_EXHAUSTED with a traceback in the log."""

    ROWS: dict[str, Rpc] = {}
    max_response_bytes: int | None = None
    principal_of: Callable[[Any], KafkaPrincipal] = staticmethod(anonymous)
    """Who sends a call (its ``grpc.aio.ServicerContext`` or ``ForwardedContext``): the
    transport's authentication installs its own (a client certificate's subject, a bearer
    token); ANONYMOUS by default."""

    def __init__(
        self, runtime: CoordinatorRuntime | CoordinatorService, address: Address | None = None
    ) -> None:
        self.service = (
            runtime if isinstance(runtime, CoordinatorService) else CoordinatorService(runtime)
        )
        self.runtime = self.service.runtime
        self.address = address

    def caller(self, context: grpc.aio.ServicerContext, identity: bool) -> Caller:
        """Who sends the call, from where: its principal and its address, always (every
        authorization decision of the call may need the host, even one made after ACLs were
        first created while the call ran: a ConsumerGroupDescribe's topics, a ListGroups'
        filter). With ``identity``, its client id too (and, tracing on, its trace context: one
        read of the call's metadata for both). Without ``identity``, tracing on: its trace
        context, and ``identify`` to read its client id should it be traced. A call a front
        end forwarded carries when the front end received it."""
        node = None
        if self.address is not None:
            host, port = self.address()
            node = Node(node_id=NODE_ID, host=host, port=port)
        received = context.received if type(context) is ForwardedContext else None
        principal = self.principal_of(context)
        host = client_host_of(context)
        observer = self.service.observer
        traced = observer is not None and observer.wants_trace_context()
        if not identity:
            if not traced:
                return Caller(
                    client_host=host,
                    node=node,
                    abort_when_closing=True,
                    received=received,
                    principal=principal,
                )
            # Tracing on: the caller's trace context is looked for on every call, its client
            # id read only for a request that is traced (its span names it).
            return Caller(
                client_host=host,
                node=node,
                abort_when_closing=True,
                received=received,
                trace_metadata=trace_context_in(context.invocation_metadata() or ()),
                principal=principal,
                identify=partial(identity_of, context),
            )
        client_id, trace_metadata = identity_in(context.invocation_metadata() or (), traced)
        return Caller(
            client_id=client_id,
            client_host=host,
            node=node,
            abort_when_closing=True,
            received=received,
            trace_metadata=trace_metadata,
            principal=principal,
        )

    async def authenticated_caller(self, context: Any, identity: bool) -> Caller:
        """:meth:`caller`, or the call ends with UNAUTHENTICATED when its credentials are
        refused or missing where required (``grpc_auth.py``)."""
        try:
            return self.caller(context, identity)
        except Unauthenticated as exc:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(exc))
            raise  # abort raises; never reached

    async def run(self, row: Rpc, request: Any, context: grpc.aio.ServicerContext) -> Any:
        # Every call carries its address (a decision may need the host, whenever it is made).
        # Audited (admin) RPCs and every RPC while ACLs are in force (a refusal's audit line
        # names the client id, as Kafka's authorizer logs it) need the client id too; a traced
        # request's span reads it itself (Caller.identify).
        identity = row.needs_identity or row.audit or not self.service.authorizer.open
        caller = await self.authenticated_caller(context, identity)
        try:
            self.service.limits.precheck_grpc(
                row.response_type.DESCRIPTOR.name[:-8],
                request,
                self.service.runtime.known_partitions,
                lambda: self.service.heartbeat_authorization(caller, request.group_id)(),
            )
        except CoordinatorError as exc:  # too much in one request: refused before converting
            return convert.with_error(row.response_type, exc.code, exc.message)
        try:
            if row.needs_identity:
                req = row.decode(
                    request,
                    client_id=caller.client_id,
                    client_host=caller.client_host,
                    principal=caller.principal,
                )
            else:
                req = row.decode(request)
        except CoordinatorError as exc:
            if row.undecodable is not None:
                return row.undecodable(request, exc.code, exc.message)
            return convert.with_error(row.response_type, exc.code, exc.message)
        try:
            answer = await getattr(self.service, row.method)(req, caller)
        except ShuttingDown as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
            raise  # abort raises; never reached
        if row.method == "list_topics" and len(answer.value or ()) > ENCODE_INLINE:
            # A long list of topics (Reply of immutable TopicResults) is converted off the
            # loop: 336 ms of its CPU at 100,000 topics.
            out = await asyncio.get_running_loop().run_in_executor(
                None, self.encode_off_loop, row, answer, caller
            )
        else:
            out = self.encode(row, answer, caller)
        if getattr(request, "include_authorized_operations", False):
            authz = self.service.authz  # DescribeGroups, ConsumerGroupDescribe: as Kafka's
            for g in out.groups:
                if g.error_code == 0:
                    g.authorized_operations = authz.authorized_operations(caller, GROUP, g.group_id)
        limit = self.max_response_bytes
        if limit is not None:
            size = out.ByteSize()
            if size > limit:
                return too_large(row, size, limit)
        return out

    def encode_off_loop(self, row: Rpc, answer: Any, caller: Caller) -> Any:
        """:meth:`encode` on a thread (its garbage freed there, never scanned)."""
        with no_collections():
            return self.encode(row, answer, caller)

    def encode(self, row: Rpc, answer: Any, caller: Caller) -> Any:
        """The proto response of the service's answer to ``caller``, as the row says
        (:class:`Rpc`)."""
        if row.whole:
            return row.encode(answer)
        if row.names:
            name_of = self.service.authz.names(caller, self.service.topic_name)
            return convert.reply_to_proto(
                row.response_type, answer, lambda value: row.encode(value, name_of)
            )
        return convert.reply_to_proto(row.response_type, answer, row.encode)


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


def _servicer(module: ModuleType, base: type[Any], rows: dict[str, Rpc]) -> type[GrpcServicer]:
    """A servicer class over the generated ``base`` with one method per row (``await
    self.run(row, request, context)``); each row's response type comes from ``module``."""

    def method(row: Rpc) -> Callable[[Any, Any, Any], Awaitable[Any]]:
        async def call(self: GrpcServicer, request: Any, context: Any) -> Any:
            return await self.run(row, request, context)

        return call

    name = base.__name__.removesuffix("Servicer")
    table = {
        rpc_name: replace(
            row,
            response_type=getattr(module, f"{rpc_name}Response"),
            method=re.sub(r"(?<!^)(?=[A-Z])", "_", rpc_name).lower(),  # OffsetFetch: offset_fetch
        )
        for rpc_name, row in rows.items()
    }
    namespace: dict[str, Any] = {"ROWS": table, "__doc__": f"{name}: rows of the gRPC codec."}
    for rpc_name, row in table.items():
        namespace[rpc_name] = method(row)
    return type(name, (GrpcServicer, base), namespace)


ConsumerGroupService = _servicer(
    consumer_group_pb2,
    consumer_group_pb2_grpc.ConsumerGroupServiceServicer,
    {
        "ConsumerGroupHeartbeat": Rpc(
            convert.heartbeat_from_proto,
            convert.heartbeat_to_proto,
            names=True,
            needs_identity=True,
        ),
        "ConsumerGroupDescribe": Rpc(
            convert.group_ids_from_proto, convert.consumer_group_describe_to_proto, names=True
        ),
    },
)


async def _consumer_group_watch(
    self: GrpcServicer, request: consumer_group_pb2.ConsumerGroupWatchRequest, context: Any
) -> AsyncIterator[consumer_group_pb2.ConsumerGroupWatchResponse]:
    """The one server-streaming RPC (push.py): each event of the service, converted. Its
    caller carries the client's address and id, as every request's may (host ACLs, audit).
    Its credentials are checked again before each message, as each unary call's are: once its
    bearer token has expired the stream ends UNAUTHENTICATED (a client opens it again with its
    current token). Each message names only the topics the caller may describe as the ACLs are
    when it is sent (a stream opened while no ACL existed included)."""
    caller = await self.authenticated_caller(context, True)
    req = WatchRequest(group_id=request.group_id, member_id=request.member_id)
    authz, topic_name = self.service.authz, self.service.topic_name
    try:
        async with contextlib.aclosing(self.service.consumer_group_watch(req, caller)) as events:
            async for event in events:
                await self.authenticated_caller(context, False)
                yield convert.watch_event_to_proto(event, authz.names(caller, topic_name))
    except ShuttingDown as exc:
        await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))


ConsumerGroupService.ConsumerGroupWatch = _consumer_group_watch  # type: ignore[attr-defined]

OffsetService = _servicer(
    offsets_pb2,
    offsets_pb2_grpc.OffsetServiceServicer,
    {
        # A group-level error goes on every partition, as Kafka answers OffsetCommit.
        "OffsetCommit": Rpc(
            convert.offset_commit_from_proto,
            convert.offset_commit_to_proto,
            undecodable=convert.offset_commit_error,
            audit=True,  # an offset reset (a commit without a member)
        ),
        "OffsetFetch": Rpc(convert.offset_fetch_from_proto, convert.offset_fetch_to_proto),
        "OffsetDelete": Rpc(
            convert.offset_delete_from_proto, convert.offset_delete_to_proto, audit=True
        ),
    },
)

AdminService = _servicer(
    admin_pb2,
    admin_pb2_grpc.AdminServiceServicer,
    {
        "CreateTopics": Rpc(
            convert.new_topics_from_proto, convert.create_topics_to_proto, audit=True
        ),
        "CreatePartitions": Rpc(
            convert.create_partitions_from_proto, convert.create_partitions_to_proto, audit=True
        ),
        "DeleteTopics": Rpc(
            convert.delete_topics_from_proto, convert.delete_topics_to_proto, audit=True
        ),
        "ListTopics": Rpc(convert.nothing_from_proto, convert.list_topics_to_proto),
        "DescribeCluster": Rpc(convert.nothing_from_proto, convert.describe_cluster_to_proto),
        "ListOffsets": Rpc(convert.list_offsets_from_proto, convert.list_offsets_to_proto),
        "ListGroups": Rpc(convert.list_groups_from_proto, convert.list_groups_to_proto),
        "DeleteGroups": Rpc(
            convert.group_ids_from_proto, convert.delete_groups_to_proto, audit=True
        ),
        "DescribeConfigs": Rpc(
            convert.describe_configs_from_proto, convert.describe_configs_to_proto, whole=True
        ),
        "IncrementalAlterConfigs": Rpc(
            convert.alter_configs_from_proto, convert.alter_configs_to_proto, whole=True, audit=True
        ),
        "DescribeAcls": Rpc(convert.describe_acls_from_proto, convert.describe_acls_to_proto),
        "CreateAcls": Rpc(convert.create_acls_from_proto, convert.create_acls_to_proto, audit=True),
        "DeleteAcls": Rpc(convert.delete_acls_from_proto, convert.delete_acls_to_proto, audit=True),
        "DescribeUserScramCredentials": Rpc(
            convert.describe_users_from_proto, convert.describe_users_to_proto
        ),
        "AlterUserScramCredentials": Rpc(
            convert.alter_users_from_proto, convert.alter_users_to_proto, audit=True
        ),
    },
)

ClassicGroupService = _servicer(
    classic_group_pb2,
    classic_group_pb2_grpc.ClassicGroupServiceServicer,
    {
        "FindCoordinator": Rpc(
            convert.find_coordinator_from_proto, convert.find_coordinator_to_proto, whole=True
        ),
        "JoinGroup": Rpc(
            convert.join_from_proto, convert.join_to_proto, whole=True, needs_identity=True
        ),
        "SyncGroup": Rpc(convert.sync_from_proto, convert.sync_to_proto, whole=True),
        "Heartbeat": Rpc(
            convert.classic_heartbeat_from_proto, convert.classic_heartbeat_to_proto, whole=True
        ),
        "LeaveGroup": Rpc(convert.leave_from_proto, convert.leave_to_proto, whole=True),
        "DescribeGroups": Rpc(convert.group_ids_from_proto, convert.describe_groups_to_proto),
    },
)

TestingService = _servicer(
    testing_pb2,
    testing_pb2_grpc.TestingServiceServicer,
    {
        "AdvanceTime": Rpc(
            lambda r: r.ms,
            lambda now: testing_pb2.AdvanceTimeResponse(error_code=0, now_ms=now),
        )
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
