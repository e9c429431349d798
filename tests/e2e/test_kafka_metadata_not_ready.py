"""Metadata in coordinator-only mode while the topic registry cannot be read: before the store
(the cluster log) is loaded, and once the coordinator stopped serving. A named topic is
answered LEADER_NOT_AVAILABLE, which clients retry, never UNKNOWN_TOPIC_OR_PARTITION (which
makes them give up on the topic); a request for every topic lists no broker and no topic, the
answer of a Kafka broker still starting that clients ignore and ask again — never a list
without the topics that exist. The gRPC ListTopics answers the state's retriable error.

The server is the real gRPC server, runtime and Kafka listener in this process, so the test
decides when the store is loaded (``CoordinatorServer.load``) and when it stops serving."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient
from kafka_support import KafkaClient, request
from serve_support import InProcessServer

from coordinator.core.config import parse_config
from coordinator.core.errors import ErrorCode
from coordinator.core.topics import NewTopic
from coordinator.runtime import CoordinatorRuntime, ManualClock, RuntimeState
from coordinator.runtime.store import MemoryRecordStore
from kip848.v1 import admin_pb2, admin_pb2_grpc

TOPIC = "orders"
WAIT_S = 10.0


def earlier_run_store() -> MemoryRecordStore:
    """A memory store an earlier run wrote topic ``orders`` (2 partitions) to."""

    async def earlier_run() -> Any:
        store = MemoryRecordStore()
        rt = CoordinatorRuntime(config=parse_config({}), store=store, clock=ManualClock(0))
        await rt.start()
        await rt.create_topics([NewTopic(name=TOPIC, num_partitions=2)])
        await rt.close()
        return store._data

    return MemoryRecordStore(_data=asyncio.run(earlier_run()))


def stop_serving(held: InProcessServer) -> None:
    """As after a write whose outcome is unknown (driver.py "Failure")."""

    async def stop() -> None:
        held.server.runtime.driver.stop_serving("a write's outcome is unknown (test)")

    held.run(stop())
    assert held.server.runtime.state is RuntimeState.FAILED


@pytest.fixture
def held() -> Iterator[InProcessServer]:
    """A coordinator with a Kafka listener whose store (topic ``orders``, written by an earlier
    run) is loaded only when the test calls ``load``."""
    server = InProcessServer(store=earlier_run_store(), kafka=True, loaded=False)
    try:
        yield server
    finally:
        server.close()


def grpc_list_topics(held: InProcessServer) -> tuple[int, list[str]]:
    with grpc.insecure_channel(held.server.address) as channel:
        stub = admin_pb2_grpc.AdminServiceStub(channel)
        resp = stub.ListTopics(admin_pb2.ListTopicsRequest(), timeout=WAIT_S)
    return resp.error_code, [t.name for t in resp.topics]


def wire_answers(held: InProcessServer) -> dict[str, Any]:
    """Metadata at the versions that matter, as the listener answers them: by name (v1, v12,
    v13) and for every topic (v0's empty list, v1's null, v13)."""
    client = KafkaClient(held.server.kafka_address)
    try:
        named = {
            v: client.call(request(3, v, topics=[{"name": TOPIC}], allow_auto_topic_creation=False))
            for v in (1, 12, 13)
        }
        everything = {
            0: client.call(request(3, 0, topics=[])),
            1: client.call(request(3, 1, topics=None)),
            13: client.call(
                request(
                    3,
                    13,
                    topics=None,
                    allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False,
                )
            ),
        }
    finally:
        client.close()
    return {
        "named": {
            v: [(t.name, t.error_code, len(t.partitions)) for t in r.topics]
            for v, r in named.items()
        },
        "named brokers": {v: len(r.brokers) for v, r in named.items()},
        "all": {v: ([t.name for t in r.topics], len(r.brokers)) for v, r in everything.items()},
        "v13 top-level": (named[13].error_code, everything[13].error_code),
    }


def kafka_python_view(held: InProcessServer) -> tuple[list[tuple[str, int, int]], list[str]]:
    """kafka-python's admin client: DescribeTopics (Metadata by name) and ListTopics."""
    admin = KafkaAdminClient(
        bootstrap_servers=held.server.kafka_address, request_timeout_ms=int(WAIT_S * 1000)
    )
    try:
        described = admin.describe_topics([TOPIC])
        return (
            [(t["name"], t["error_code"], len(t["partitions"])) for t in described],
            sorted(admin.list_topics()),
        )
    finally:
        admin.close()


def librdkafka_named(held: InProcessServer) -> int | tuple[str, int]:
    """confluent-kafka's list_topics of one topic (librdkafka asks Metadata v13): the error
    code when the call fails (v13's top-level error), else (the topic, its partitions)."""
    admin = AdminClient({"bootstrap.servers": held.server.kafka_address})
    try:
        md = admin.list_topics(topic=TOPIC, timeout=WAIT_S)
    except KafkaException as exc:
        return int(exc.args[0].code())
    (topic,) = md.topics.values()
    assert topic.error is None
    return topic.topic, len(topic.partitions)


def not_ready_answers(code: ErrorCode) -> dict[str, Any]:
    unavailable = [(TOPIC, ErrorCode.LEADER_NOT_AVAILABLE, 0)]
    return {
        "named": dict.fromkeys((1, 12, 13), unavailable),
        "named brokers": dict.fromkeys((1, 12, 13), 1),
        "all": dict.fromkeys((0, 1, 13), ([], 0)),
        "v13 top-level": (code, code),
    }


SERVED = {
    "named": dict.fromkeys((1, 12, 13), [(TOPIC, ErrorCode.NONE, 2)]),
    "named brokers": dict.fromkeys((1, 12, 13), 1),
    "all": dict.fromkeys((0, 1, 13), ([TOPIC], 1)),
    "v13 top-level": (ErrorCode.NONE, ErrorCode.NONE),
}


def test_metadata_before_the_store_is_loaded_is_retried_not_unknown(held: InProcessServer) -> None:
    """Before: the named topic UNKNOWN_TOPIC_OR_PARTITION and an empty topic list with this
    broker in it, which kafka-python's admin answered as the topic not existing."""
    assert wire_answers(held) == not_ready_answers(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    assert kafka_python_view(held) == ([(TOPIC, ErrorCode.LEADER_NOT_AVAILABLE, 0)], [])
    assert librdkafka_named(held) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert grpc_list_topics(held) == (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, [])
    held.load()
    assert wire_answers(held) == SERVED
    assert kafka_python_view(held) == ([(TOPIC, ErrorCode.NONE, 2)], [TOPIC])
    assert librdkafka_named(held) == (TOPIC, 2)
    assert grpc_list_topics(held) == (ErrorCode.NONE, [TOPIC])


def test_metadata_once_the_coordinator_stopped_serving_is_retried_not_unknown(
    held: InProcessServer,
) -> None:
    held.load()
    assert wire_answers(held) == SERVED
    stop_serving(held)
    assert wire_answers(held) == not_ready_answers(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    assert kafka_python_view(held) == ([(TOPIC, ErrorCode.LEADER_NOT_AVAILABLE, 0)], [])
    assert librdkafka_named(held) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert grpc_list_topics(held) == (ErrorCode.COORDINATOR_NOT_AVAILABLE, [])
