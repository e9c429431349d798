"""Servicers in-process: in-band errors, bugs answered UNKNOWN_SERVER_ERROR, UNAVAILABLE on shutdown."""

from __future__ import annotations

import grpc
import pytest

from coordinator.core.config import parse_config
from coordinator.core.errors import CoordinatorLoadInProgressError
from coordinator.runtime import CoordinatorRuntime, ManualClock, RuntimeState
from coordinator.runtime.store import MemoryRecordStore
from coordinator.server.services import (
    AdminService,
    ClassicGroupService,
    ConsumerGroupService,
    client_id_of,
)
from kip848.v1 import admin_pb2, classic_group_pb2
from kip848.v1 import consumer_group_pb2 as cg


class Ctx:
    def __init__(self) -> None:
        self.aborted: tuple[grpc.StatusCode, str] | None = None

    def invocation_metadata(self):
        return (("user-agent", "x"), ("client-id", "app"))

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.aborted = (code, details)
        raise RuntimeError("aborted")


def runtime() -> CoordinatorRuntime:
    return CoordinatorRuntime(
        config=parse_config({}), store=MemoryRecordStore(), clock=ManualClock(0)
    )


def test_client_id_from_metadata() -> None:
    assert client_id_of(Ctx()) == "app"  # type: ignore[arg-type]


async def test_load_in_progress_is_in_band() -> None:
    rt = runtime()  # not started: loading
    resp = await ConsumerGroupService(rt).ConsumerGroupHeartbeat(
        cg.ConsumerGroupHeartbeatRequest(group_id="g"), Ctx()
    )
    assert resp == cg.ConsumerGroupHeartbeatResponse(
        error_code=14, error_message=CoordinatorLoadInProgressError().message
    )
    topics = await AdminService(rt).ListTopics(admin_pb2.ListTopicsRequest(), Ctx())
    assert topics == admin_pb2.ListTopicsResponse(
        error_code=14, error_message=CoordinatorLoadInProgressError().message
    )


async def test_a_classic_heartbeat_while_loading_is_answered_none_as_kafka_does() -> None:
    """Kafka's GroupCoordinatorService answers a classic Heartbeat NONE while the group's
    partition loads ("blindly respond"): clients such as aiokafka take
    COORDINATOR_LOAD_IN_PROGRESS in a Heartbeat for a fatal error. The other classic RPCs
    still say LOAD_IN_PROGRESS."""
    rt = runtime()  # not started: loading
    classic = ClassicGroupService(rt, lambda: ("127.0.0.1", 9094))
    resp = await classic.Heartbeat(
        classic_group_pb2.HeartbeatRequest(group_id="g", generation_id=1, member_id="m"), Ctx()
    )
    assert resp == classic_group_pb2.HeartbeatResponse(error_code=0)
    sync = await classic.SyncGroup(
        classic_group_pb2.SyncGroupRequest(group_id="g", generation_id=1, member_id="m"), Ctx()
    )
    assert sync.error_code == 14


async def test_a_bug_is_unknown_server_error_in_band(monkeypatch: pytest.MonkeyPatch) -> None:
    rt = runtime()
    await rt.start()

    async def boom(_req):
        raise ZeroDivisionError("bug")

    monkeypatch.setattr(rt, "heartbeat", boom)
    resp = await ConsumerGroupService(rt).ConsumerGroupHeartbeat(
        cg.ConsumerGroupHeartbeatRequest(group_id="g"), Ctx()
    )
    assert resp == cg.ConsumerGroupHeartbeatResponse(error_code=-1)
    await rt.close()


async def test_unavailable_while_shutting_down() -> None:
    rt = runtime()
    await rt.start()
    await rt.close()
    assert rt.state is RuntimeState.CLOSED
    ctx = Ctx()
    with pytest.raises(RuntimeError, match="aborted"):
        await ConsumerGroupService(rt).ConsumerGroupHeartbeat(
            cg.ConsumerGroupHeartbeatRequest(group_id="g"), ctx
        )
    assert ctx.aborted == (grpc.StatusCode.UNAVAILABLE, "The coordinator is shutting down.")


async def test_describe_configs_refuses_other_resource_types() -> None:
    rt = runtime()
    await rt.start()
    Desc = admin_pb2.DescribeConfigsRequest
    resp = await AdminService(rt).DescribeConfigs(
        Desc(resources=[Desc.Resource(resource_type=2, resource_name="t")]), Ctx()
    )
    assert resp == admin_pb2.DescribeConfigsResponse(
        results=[
            admin_pb2.DescribeConfigsResponse.Result(
                error_code=42,
                error_message="Only GROUP resources (16, or Kafka's 32) are supported.",
                resource_type=2,
                resource_name="t",
            )
        ]
    )
    Alter = admin_pb2.IncrementalAlterConfigsRequest
    bad = await AdminService(rt).IncrementalAlterConfigs(
        Alter(
            resources=[
                Alter.Resource(
                    resource_type=16,
                    resource_name="g",
                    configs=[
                        Alter.AlterableConfig(
                            name="consumer.session.timeout.ms", config_operation=0, value="1"
                        )
                    ],
                )
            ]
        ),
        Ctx(),
    )
    item = bad.responses[0]
    assert (item.error_code, item.resource_name) == (40, "g")
    assert "consumer.session.timeout.ms" in item.error_message
    await rt.close()


def test_identity_in_reads_the_client_id_and_the_trace_context_in_one_pass() -> None:
    from coordinator.server.services import identity_in

    traced = (("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),)
    metadata = (("user-agent", "x"), ("client-id", "app"), ("client-id", "other"), *traced)
    assert identity_in(metadata, True) == ("app", metadata)
    assert identity_in(metadata, False) == ("app", None)  # tracing off: not looked for
    assert identity_in((("client-id", b"bytes-app"),), True) == ("bytes-app", None)
    assert identity_in(traced, True) == ("", traced)
    assert identity_in((), True) == ("", None)


def test_tracing_on_a_call_s_identity_is_read_only_when_its_span_needs_it() -> None:
    """Tracing on, a heartbeat (nothing else needs its client id) gets its trace context from
    the call's metadata, but its client id only when asked (a traced request's span names it:
    ``Caller.identity()``); with tracing off neither is looked for. Its address is read at
    once, always: any authorization decision of the call may match an ACL's host."""
    from types import SimpleNamespace

    from coordinator.server.forwarding import ForwardedContext
    from coordinator.server.services import ConsumerGroupService, GrpcServicer

    traced = ("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    reads: list[str] = []

    class Context(ForwardedContext):
        def peer(self) -> str:
            reads.append("peer")
            return super().peer()

    servicer: GrpcServicer = object.__new__(ConsumerGroupService)
    servicer.address = None
    tracing_on = SimpleNamespace(wants_trace_context=lambda: True)
    servicer.service = SimpleNamespace(observer=tracing_on)  # type: ignore[assignment]
    with_parent = Context((("client-id", "app"), traced), "ipv4:10.0.0.7:5")
    caller = servicer.caller(with_parent, identity=False)
    assert (caller.client_id, caller.client_host, reads) == ("", "/10.0.0.7", ["peer"])
    assert caller.trace_metadata == (("client-id", "app"), traced)
    assert caller.identity() == ("app", "/10.0.0.7")
    plain = servicer.caller(Context((("client-id", "app"),), "ipv4:10.0.0.7:5"), identity=False)
    assert plain.trace_metadata is None
    # What needs the identity anyway (identity=True) reads it at once, the trace context too.
    eager = servicer.caller(with_parent, identity=True)
    assert (eager.client_id, eager.client_host, eager.identify) == ("app", "/10.0.0.7", None)
    assert eager.trace_metadata is not None and eager.identity() == ("app", "/10.0.0.7")
    servicer.service = SimpleNamespace(observer=None)  # type: ignore[assignment]
    off = servicer.caller(with_parent, identity=False)
    assert (off.trace_metadata, off.identify, off.identity()) == (None, None, ("", "/10.0.0.7"))
