"""Host ACLs on gRPC calls that began while no ACL existed (docs/security.md, "Hosts").

A call's later authorization decisions are made as the ACLs are when they are made, and with
the client's real address: a ConsumerGroupDescribe checks the group before it reads the group
and the topics its members use after, so the first ACLs may be created in between. Before, a
call that started while the authorizer was open carried no address (host ""), so a DENY from
the client's host did not match it. Served over real connections on 127.0.0.1 by both gRPC
transports (our h2 server and grpc.aio, ``--grpc-transport grpcio``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from builders import join, make_runtime

from coordinator.core.errors import ErrorCode
from coordinator.core.topics import NewTopic
from coordinator.security.acls import AclOperation
from coordinator.security.authorizer import AuthorizerConfig, Refusal
from coordinator.security.principal import user
from coordinator.server.api import AclSpec, Caller, TopicChanges
from coordinator.server.h2grpc import H2GrpcServer
from coordinator.server.service import CoordinatorService
from coordinator.server.services import ConsumerGroupService
from kip848.v1 import consumer_group_pb2, consumer_group_pb2_grpc

ADMIN = Caller(principal=user("admin"))
TOPIC, GROUP, DENY, ALLOW, LITERAL = 2, 3, 2, 3, 3
WAIT = 10.0  # seconds: every wait of these tests is bounded
DESCRIBED_TOPICS_DENIED = (
    "The described group uses topics that the client is not authorized to describe."
)


def acl(rtype: int, name: str, permission: int, host: str = "*") -> AclSpec:
    return AclSpec(
        resource_type=rtype,
        resource_name=name,
        pattern_type=LITERAL,
        principal="User:pat",
        host=host,
        operation=int(AclOperation.DESCRIBE),
        permission_type=permission,
    )


class Served:
    """A coordinator service with group "g" (admin's member subscribed to "orders") behind
    one gRPC transport; every call is pat's. ``describe_group`` waits for :attr:`release` once
    the call has reached it (:attr:`reached`)."""

    def __init__(self, service: CoordinatorService) -> None:
        self.service = service
        self.refusals: list[Refusal] = []
        service.authorizer.on_refused = self.refusals.append
        self.reached = asyncio.Event()
        self.release = asyncio.Event()
        runtime: Any = service.runtime
        real = runtime.describe_group

        async def held(group_id: str) -> Any:
            self.reached.set()
            await asyncio.wait_for(self.release.wait(), WAIT)
            return await real(group_id)

        runtime.describe_group = held

    async def create_acls(self, *specs: AclSpec) -> None:
        reply = await self.service.create_acls(list(specs), ADMIN)
        assert [c.error_code for c in reply.value or []] == [0] * len(specs)
        assert not self.service.authorizer.open


@pytest.fixture(params=["h2", "grpcio"])
async def served(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Served, Any]]:
    runtime = make_runtime()
    await runtime.start()
    service = CoordinatorService(
        runtime, authorizer=AuthorizerConfig(super_users=frozenset({"User:admin"}))
    )
    created = await service.create_topics(
        TopicChanges(entries=[NewTopic(name="orders", num_partitions=2)]), ADMIN
    )
    assert [t.error_code for t in created.value or []] == [0]
    assert (await service.consumer_group_heartbeat(join("g", ("orders",)), ADMIN)).error_code == 0
    servicer: Any = ConsumerGroupService(service)
    servicer.principal_of = lambda _context: user("pat")
    server: Any = H2GrpcServer(1 << 20) if request.param == "h2" else grpc.aio.server()
    consumer_group_pb2_grpc.add_ConsumerGroupServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield Served(service), consumer_group_pb2_grpc.ConsumerGroupServiceStub(channel)
    finally:
        await channel.close()
        await server.stop(None)
        await runtime.close()


async def describe_while_acls_are_created(
    served: Served, stub: Any, *specs: AclSpec
) -> consumer_group_pb2.ConsumerGroupDescribeResponse:
    """pat's ConsumerGroupDescribe of "g", started while no ACL exists (its group check passes
    open); ``specs`` are created while it reads the group, before its topic check."""
    assert served.service.authorizer.open
    call = asyncio.ensure_future(
        stub.ConsumerGroupDescribe(
            consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=["g"]), timeout=WAIT
        )
    )
    await asyncio.wait_for(served.reached.wait(), WAIT)
    await served.create_acls(*specs)
    served.release.set()
    return await asyncio.wait_for(call, WAIT)


async def test_a_deny_from_the_client_s_host_refuses_the_call_s_next_decision(
    served: tuple[Served, Any],
) -> None:
    """A DENY of DESCRIBE on "orders" for pat from 127.0.0.1 (and an ALLOW from anywhere),
    created while her describe runs: the group is not described, as Kafka answers
    (TOPIC_AUTHORIZATION_FAILED, KAFKA-18813's message), and the refusal names her address."""
    server, stub = served
    answer = await describe_while_acls_are_created(
        server,
        stub,
        acl(TOPIC, "orders", ALLOW),
        acl(TOPIC, "orders", DENY, host="127.0.0.1"),
    )
    assert [(g.group_id, g.error_code, g.error_message, len(g.members)) for g in answer.groups] == [
        ("g", ErrorCode.TOPIC_AUTHORIZATION_FAILED, DESCRIBED_TOPICS_DENIED, 0)
    ]
    refused = [(r.principal, r.host, r.api, r.resource_name, r.protocol) for r in server.refusals]
    assert refused == [(user("pat"), "127.0.0.1", "ConsumerGroupDescribe", "orders", "grpc")]


async def test_an_acl_of_another_host_does_not_apply_to_the_call(
    served: tuple[Served, Any],
) -> None:
    """The same DENY naming another host (10.9.9.9): pat's describe is answered in full, the
    topic named (she may describe it from her host)."""
    server, stub = served
    answer = await describe_while_acls_are_created(
        server,
        stub,
        acl(TOPIC, "orders", ALLOW),
        acl(TOPIC, "orders", DENY, host="10.9.9.9"),
    )
    (group,) = answer.groups
    assert (group.group_id, group.error_code, group.error_message) == ("g", 0, "")
    assert [m.subscribed_topic_names for m in group.members] == [["orders"]]
    assert server.refusals == []


async def test_an_allow_only_from_another_host_refuses_the_call(
    served: tuple[Served, Any],
) -> None:
    """An ALLOW of DESCRIBE on "orders" for pat from 10.9.9.9 only: from 127.0.0.1 no ACL
    allows her, so the group is not described."""
    server, stub = served
    answer = await describe_while_acls_are_created(
        server, stub, acl(TOPIC, "orders", ALLOW, host="10.9.9.9")
    )
    assert [(g.group_id, g.error_code, g.error_message) for g in answer.groups] == [
        ("g", ErrorCode.TOPIC_AUTHORIZATION_FAILED, DESCRIBED_TOPICS_DENIED)
    ]
    assert [(r.host, r.resource_name) for r in server.refusals] == [("127.0.0.1", "orders")]
