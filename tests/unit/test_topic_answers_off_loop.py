"""An answer listing many topics is built and encoded off the node's loop: the Kafka
listener's Metadata of every topic in coordinator-only mode (``KafkaApis.metadata_frame``,
``served.ENCODE_INLINE``) and the gRPC ListTopics (``GrpcServicer``, ``services.ENCODE_INLINE``),
from the topics as ListTopics answered them (immutable). The same bytes as built on the loop.
Counted by thread, not timed (bench/loop_steps.py *metadata* times it)."""

from __future__ import annotations

import threading
import uuid
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from builders import make_runtime
from test_forwarded_metadata_off_loop import guarded_service, watch_the_loop
from test_server_authorization import ALICE, OP
from test_server_services import Ctx

from coordinator.core.topics import NewTopic
from coordinator.security.acls import SUPPORTED_OPERATIONS, ResourceType
from coordinator.server import services
from coordinator.server.api import Caller, Node
from coordinator.server.kafka import served as served_module
from coordinator.server.kafka import wire
from coordinator.server.kafka.served import KafkaApis
from coordinator.server.service import CoordinatorService
from coordinator.server.services import AdminService, GrpcServicer
from kip848.v1 import admin_pb2

NAMES = ("a", "b", "c", "d", "e")


async def started_with_topics() -> Any:
    rt = make_runtime()
    await rt.start()
    await rt.create_topics([NewTopic(name=n, num_partitions=i + 1) for i, n in enumerate(NAMES)])
    return rt


def every_topic() -> Any:
    return wire.build(
        wire.request_class(3, 12),
        topics=None,
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


async def test_a_metadata_answer_of_many_topics_is_encoded_off_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Five topics, more than the answer built on the loop may list (two): no Metadata
    response is built on the loop's thread, and the frame is the one built on it (every
    topic, its partitions led by the listener's node). Before, it was built and encoded on
    the loop whatever its size (2-3 s of the loop at 100,000 topics)."""
    rt = await started_with_topics()
    served = KafkaApis(SimpleNamespace(service=CoordinatorService(rt), upstream=None, txn=None))  # type: ignore[arg-type]
    caller = Caller(node=Node(node_id=7, host="h", port=9092), api_version=12)
    inline = await served.metadata_frame(every_topic(), 12, 1, caller)
    built_on: list[bool] = []
    build = wire.build
    loop_thread = threading.get_ident()

    def watched(cls: Any, *args: Any, **kw: Any) -> Any:
        if cls is wire.response_class(3, 12):
            built_on.append(threading.get_ident() == loop_thread)
        return build(cls, *args, **kw)

    monkeypatch.setattr(wire, "build", watched)
    monkeypatch.setattr(served_module, "ENCODE_INLINE", 2)
    frame = await served.metadata_frame(every_topic(), 12, 1, caller)
    assert built_on == [False]
    assert frame == inline
    answer = wire.decode_response(3, 12, frame, 9)
    assert [
        (t.name, t.topic_id, [(p.partition_index, p.leader_id) for p in t.partitions])
        for t in answer.topics
    ] == [
        (n, uuid.UUID(bytes=b"\0" * 15 + bytes([i + 1])), [(p, 7) for p in range(i + 1)])
        for i, n in enumerate(NAMES)
    ]
    await rt.close()


async def test_a_grpc_list_of_many_topics_is_converted_off_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same for the gRPC ListTopics: five topics, more than two, converted to protobuf on
    another thread than the loop's; the same answer. Before, on the loop (336 ms of it at
    100,000 topics)."""
    rt = await started_with_topics()
    inline = await AdminService(rt).ListTopics(admin_pb2.ListTopicsRequest(), Ctx())
    encoded_on: list[bool] = []
    encode = GrpcServicer.encode
    loop_thread = threading.get_ident()

    def watched(self: Any, *args: Any) -> Any:
        encoded_on.append(threading.get_ident() == loop_thread)
        return encode(self, *args)

    monkeypatch.setattr(GrpcServicer, "encode", watched)
    monkeypatch.setattr(services, "ENCODE_INLINE", 2, raising=False)
    answer = await AdminService(rt).ListTopics(admin_pb2.ListTopicsRequest(), Ctx())
    assert encoded_on == [False]
    assert answer == inline
    assert [(t.name, t.num_partitions) for t in answer.topics] == [
        (n, i + 1) for i, n in enumerate(NAMES)
    ]
    await rt.close()


async def test_a_metadata_answer_of_every_topic_with_acls_and_operations_is_built_off_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ACLs on, and Metadata of every topic asking for each topic's authorized operations:
    alice may describe ``pay-`` topics (READ on pay-eu, DESCRIBE on the prefix), not
    ``secret`` (another user's ACL), and ``public`` has none (allowed: no ACL applies). Off
    the loop past one topic with operations (OPERATIONS_INLINE), no response built and no
    ACL decided on the loop's thread, per topic or otherwise; the same frame as built on the
    loop: ``secret`` left out, each other topic with alice's operations (READ implies
    DESCRIBE). Before, every topic's check and operations were decided on the loop (8 a
    topic, the answer built there)."""
    rt, service = await guarded_service()
    served = KafkaApis(SimpleNamespace(service=service, upstream=None, txn=None))  # type: ignore[arg-type]
    alice = replace(ALICE, node=Node(node_id=7, host="h", port=9092), api_version=12)
    asked = wire.build(
        wire.request_class(3, 12),
        topics=None,
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=True,
    )
    inline = await served.metadata_frame(asked, 12, 1, alice)
    on_loop = watch_the_loop(monkeypatch)
    monkeypatch.setattr(served_module, "OPERATIONS_INLINE", 1, raising=False)
    frame = await served.metadata_frame(asked, 12, 1, alice)
    assert frame == inline
    assert on_loop == []
    answer = wire.decode_response(3, 12, frame, 9)
    read_describe = (1 << OP.READ) | (1 << OP.DESCRIBE)
    every = sum(1 << int(op) for op in SUPPORTED_OPERATIONS[ResourceType.TOPIC])
    assert [(t.name, t.topic_authorized_operations) for t in answer.topics] == [
        ("pay-eu", read_describe),
        ("pay-us", 1 << OP.DESCRIBE),
        ("public", every),
    ]
    await rt.close()
