"""Thin grpc.aio servicers: convert, call the runtime, convert back.

Every protocol error is answered in-band (``error_code``/``error_message``, gRPC status OK),
through ``errors.to_error_code``. An unexpected exception is a bug: it is logged with its
traceback and answered as UNKNOWN_SERVER_ERROR. While the server shuts down, calls get the
gRPC status UNAVAILABLE.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
from google.protobuf.descriptor import ServiceDescriptor

from coordinator.core.errors import (
    CoordinatorError,
    ErrorCode,
    InvalidGroupIdError,
    InvalidRequestError,
    to_error_code,
)
from coordinator.runtime import CoordinatorRuntime, RuntimeState
from kip848.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    classic_group_pb2,
    consumer_group_pb2,
    consumer_group_pb2_grpc,
    offsets_pb2,
    offsets_pb2_grpc,
    testing_pb2,
    testing_pb2_grpc,
)

from . import convert

log = logging.getLogger("kip848.server")
M = TypeVar("M")

CLIENT_ID_KEY = "client-id"


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


def _with_error(message_type: type[M], code: ErrorCode, text: str | None, **fields: Any) -> M:
    out = message_type(error_code=int(code), **fields)
    if text is not None:
        out.error_message = text  # type: ignore[attr-defined]
    return out


async def _guard(
    runtime: CoordinatorRuntime,
    context: grpc.aio.ServicerContext,
    message_type: type[M],
    call: Callable[[], Awaitable[M]],
    on_error: Callable[[ErrorCode, str | None], M] | None = None,
) -> M:
    """Run one RPC body: UNAVAILABLE while shutting down, in-band errors otherwise (in the
    response's ``error_code``, or wherever ``on_error`` puts them)."""
    if runtime.state in (RuntimeState.CLOSING, RuntimeState.CLOSED):
        await context.abort(grpc.StatusCode.UNAVAILABLE, "The coordinator is shutting down.")
    error = on_error or (lambda code, text: _with_error(message_type, code, text))
    try:
        return await call()
    except CoordinatorError as exc:
        return error(exc.code, exc.message)
    except Exception as exc:
        log.exception("Unexpected error in %s", message_type.__name__)
        return error(*to_error_code(exc))


class ConsumerGroupService(consumer_group_pb2_grpc.ConsumerGroupServiceServicer):
    def __init__(self, runtime: CoordinatorRuntime) -> None:
        self.runtime = runtime

    async def ConsumerGroupHeartbeat(
        self,
        request: consumer_group_pb2.ConsumerGroupHeartbeatRequest,
        context: grpc.aio.ServicerContext,
    ) -> consumer_group_pb2.ConsumerGroupHeartbeatResponse:
        runtime = self.runtime

        async def body() -> consumer_group_pb2.ConsumerGroupHeartbeatResponse:
            cmd = convert.heartbeat_from_proto(
                request, client_id=client_id_of(context), client_host=client_host_of(context)
            )
            return convert.heartbeat_to_proto(await runtime.heartbeat(cmd), runtime.topic_name)

        return await _guard(
            runtime,
            context,
            consumer_group_pb2.ConsumerGroupHeartbeatResponse,
            body,
            convert.heartbeat_error,
        )

    async def ConsumerGroupDescribe(
        self,
        request: consumer_group_pb2.ConsumerGroupDescribeRequest,
        context: grpc.aio.ServicerContext,
    ) -> consumer_group_pb2.ConsumerGroupDescribeResponse:
        runtime = self.runtime

        async def body() -> consumer_group_pb2.ConsumerGroupDescribeResponse:
            out = consumer_group_pb2.ConsumerGroupDescribeResponse(error_code=0)
            for group_id in request.group_ids:
                try:
                    if not group_id.strip():
                        raise InvalidGroupIdError("Group id can't be empty.")
                    desc = await runtime.describe_group(group_id)
                    out.groups.append(convert.described_group_to_proto(desc, runtime.topic_name))
                except CoordinatorError as exc:
                    out.groups.append(
                        convert.described_group_error(group_id, exc.code, exc.message)
                    )
            return out

        return await _guard(
            runtime, context, consumer_group_pb2.ConsumerGroupDescribeResponse, body
        )


def _check_group_id(group_id: str) -> None:
    """Kafka's services answer INVALID_GROUP_ID for an empty group id."""
    if not group_id.strip():
        raise InvalidGroupIdError("Group id can't be empty.")


class OffsetService(offsets_pb2_grpc.OffsetServiceServicer):
    """OffsetCommit, OffsetFetch, OffsetDelete (semantics: coordinator/core/offsets.py)."""

    def __init__(self, runtime: CoordinatorRuntime) -> None:
        self.runtime = runtime

    async def OffsetCommit(
        self, request: offsets_pb2.OffsetCommitRequest, context: grpc.aio.ServicerContext
    ) -> offsets_pb2.OffsetCommitResponse:
        runtime = self.runtime

        async def body() -> offsets_pb2.OffsetCommitResponse:
            _check_group_id(request.group_id)
            return convert.offset_commit_to_proto(
                await runtime.offset_commit(convert.offset_commit_from_proto(request))
            )

        # A group-level error goes on every partition, as Kafka answers OffsetCommit.
        return await _guard(
            runtime,
            context,
            offsets_pb2.OffsetCommitResponse,
            body,
            lambda code, text: convert.offset_commit_error(request, code, text),
        )

    async def OffsetFetch(
        self, request: offsets_pb2.OffsetFetchRequest, context: grpc.aio.ServicerContext
    ) -> offsets_pb2.OffsetFetchResponse:
        runtime = self.runtime

        async def body() -> offsets_pb2.OffsetFetchResponse:
            answers: list[Any] = []
            valid = []
            for g in request.groups:
                try:
                    _check_group_id(g.group_id)
                    valid.append(convert.offset_fetch_group_from_proto(g))
                    answers.append(None)
                except CoordinatorError as exc:
                    answers.append(
                        convert.offset_fetch_group_error(g.group_id, exc.code, exc.message)
                    )
            fetched = iter(await runtime.offset_fetch(valid))
            out = offsets_pb2.OffsetFetchResponse(error_code=0)
            for a in answers:
                out.groups.append(
                    a if a is not None else convert.offset_fetch_group_to_proto(next(fetched))
                )
            return out

        return await _guard(runtime, context, offsets_pb2.OffsetFetchResponse, body)

    async def OffsetDelete(
        self, request: offsets_pb2.OffsetDeleteRequest, context: grpc.aio.ServicerContext
    ) -> offsets_pb2.OffsetDeleteResponse:
        runtime = self.runtime

        async def body() -> offsets_pb2.OffsetDeleteResponse:
            _check_group_id(request.group_id)
            topics = [(t.name, list(t.partition_indexes)) for t in request.topics]
            return convert.offset_delete_to_proto(
                await runtime.offset_delete(request.group_id, topics)
            )

        return await _guard(runtime, context, offsets_pb2.OffsetDeleteResponse, body)


class AdminService(admin_pb2_grpc.AdminServiceServicer):
    """Topic registry, ListGroups, DeleteGroups and GROUP configs."""

    def __init__(self, runtime: CoordinatorRuntime) -> None:
        self.runtime = runtime

    async def CreateTopics(self, request, context):
        async def body() -> admin_pb2.CreateTopicsResponse:
            return convert.create_topics_to_proto(
                await self.runtime.create_topics(convert.new_topics_from_proto(request))
            )

        return await _guard(self.runtime, context, admin_pb2.CreateTopicsResponse, body)

    async def CreatePartitions(self, request, context):
        async def body() -> admin_pb2.CreatePartitionsResponse:
            reqs = [(t.name, t.count) for t in request.topics]
            return convert.create_partitions_to_proto(await self.runtime.create_partitions(reqs))

        return await _guard(self.runtime, context, admin_pb2.CreatePartitionsResponse, body)

    async def DeleteTopics(self, request, context):
        async def body() -> admin_pb2.DeleteTopicsResponse:
            return convert.delete_topics_to_proto(
                await self.runtime.delete_topics(list(request.names))
            )

        return await _guard(self.runtime, context, admin_pb2.DeleteTopicsResponse, body)

    async def ListTopics(self, request, context):
        async def body() -> admin_pb2.ListTopicsResponse:
            return convert.list_topics_to_proto(await self.runtime.list_topics())

        return await _guard(self.runtime, context, admin_pb2.ListTopicsResponse, body)

    async def ListGroups(self, request, context):
        async def body() -> admin_pb2.ListGroupsResponse:
            groups = await self.runtime.list_groups(
                list(request.states_filter), list(request.types_filter)
            )
            return convert.list_groups_to_proto(groups)

        return await _guard(self.runtime, context, admin_pb2.ListGroupsResponse, body)

    async def DeleteGroups(self, request, context):
        async def body() -> admin_pb2.DeleteGroupsResponse:
            results: list[Any] = []
            valid = []
            for gid in request.group_ids:
                if gid.strip():
                    valid.append(gid)
                    results.append(None)
                else:
                    exc = InvalidGroupIdError("Group id can't be empty.")
                    results.append((gid, exc.code, exc.message))
            deleted = iter(await self.runtime.delete_groups(valid))
            return convert.delete_groups_to_proto(
                r if r is not None else next(deleted) for r in results
            )

        return await _guard(self.runtime, context, admin_pb2.DeleteGroupsResponse, body)

    async def DescribeConfigs(self, request, context):
        async def body() -> admin_pb2.DescribeConfigsResponse:
            out = admin_pb2.DescribeConfigsResponse(error_code=0)
            for res in request.resources:
                try:
                    _check_config_resource(res)
                    configs, overrides = await self.runtime.describe_group_config(res.resource_name)
                    keys = (
                        list(res.configuration_keys.names)
                        if res.HasField("configuration_keys")
                        else None
                    )
                    out.results.append(
                        convert.describe_config_result(
                            res.resource_name,
                            configs,
                            overrides,
                            keys,
                            resource_type=res.resource_type,
                            include_synonyms=request.include_synonyms,
                            include_documentation=request.include_documentation,
                        )
                    )
                except CoordinatorError as exc:
                    out.results.append(_config_error(res, exc))
            return out

        return await _guard(self.runtime, context, admin_pb2.DescribeConfigsResponse, body)

    async def IncrementalAlterConfigs(self, request, context):
        async def body() -> admin_pb2.IncrementalAlterConfigsResponse:
            out = admin_pb2.IncrementalAlterConfigsResponse(error_code=0)
            seen = [(res.resource_type, res.resource_name) for res in request.resources]
            for res in request.resources:
                item = out.responses.add(
                    error_code=0, resource_type=res.resource_type, resource_name=res.resource_name
                )
                try:
                    _check_config_resource(res)
                    if seen.count((res.resource_type, res.resource_name)) > 1:
                        raise InvalidRequestError("Each resource must appear at most once.")
                    names = [c.name for c in res.configs]
                    if len(set(names)) != len(names):
                        raise InvalidRequestError("Error due to duplicate config keys.")
                    changes: dict[str, str | None] = {}
                    for c in res.configs:
                        if c.config_operation == convert.OP_SET:
                            if not c.HasField("value"):
                                raise InvalidRequestError(f"Config {c.name}: SET needs a value.")
                            changes[c.name] = c.value
                        elif c.config_operation == convert.OP_DELETE:
                            changes[c.name] = None
                        else:
                            raise InvalidRequestError(
                                f"Config {c.name}: operation {c.config_operation} is not supported for GROUP configs."
                            )
                    await self.runtime.alter_group_configs(
                        res.resource_name, changes, validate_only=request.validate_only
                    )
                except CoordinatorError as exc:
                    item.error_code = int(exc.code)
                    item.error_message = exc.message
            return out

        return await _guard(self.runtime, context, admin_pb2.IncrementalAlterConfigsResponse, body)


def _check_config_resource(res: Any) -> None:
    if res.resource_type not in convert.GROUP_RESOURCES:
        raise InvalidRequestError(
            f"Only GROUP resources ({convert.GROUP_RESOURCE}, or Kafka's {convert.KAFKA_GROUP_RESOURCE}) are supported."
        )
    if not res.resource_name.strip():
        raise InvalidRequestError("Group name must not be empty.")


def _config_error(res: Any, exc: CoordinatorError) -> admin_pb2.DescribeConfigsResponse.Result:
    return admin_pb2.DescribeConfigsResponse.Result(
        error_code=int(exc.code),
        error_message=exc.message,
        resource_type=res.resource_type,
        resource_name=res.resource_name,
    )


class TestingService(testing_pb2_grpc.TestingServiceServicer):
    """Served only with ``--clock manual``."""

    __test__ = False  # not a pytest class

    def __init__(self, runtime: CoordinatorRuntime) -> None:
        self.runtime = runtime

    async def AdvanceTime(self, request, context):
        async def body() -> testing_pb2.AdvanceTimeResponse:
            if request.ms < 0:
                raise InvalidRequestError(f"ms must be >= 0, got {request.ms}.")
            now = await self.runtime.advance_time(request.ms)
            return testing_pb2.AdvanceTimeResponse(error_code=0, now_ms=now)

        return await _guard(self.runtime, context, testing_pb2.AdvanceTimeResponse, body)


def service_descriptors() -> list[ServiceDescriptor]:
    """The coordinator's own gRPC services (what a front end forwards), TestingService last."""
    return [
        consumer_group_pb2.DESCRIPTOR.services_by_name["ConsumerGroupService"],
        admin_pb2.DESCRIPTOR.services_by_name["AdminService"],
        offsets_pb2.DESCRIPTOR.services_by_name["OffsetService"],
        classic_group_pb2.DESCRIPTOR.services_by_name["ClassicGroupService"],
        testing_pb2.DESCRIPTOR.services_by_name["TestingService"],
    ]
