"""Kafka-protocol requests observed like gRPC ones: labelled by their Kafka API name, with the
same span tree (RPC → shard command → assignor run, in-process with the OpenTelemetry SDK's
in-memory exporter), and the requests forwarded to the upstream broker measured with
``route="forwarded"`` (a real ``kip848 serve`` in front of the fake cluster, scraped)."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_upstream import PARTITIONS, TOPIC, FakeCluster
from kafka_support import KafkaClient, KafkaServer, request
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from assignors.uniform import UniformAssignor
from coordinator.core.commands import SequentialIds
from coordinator.core.config import parse_config
from coordinator.core.topics import NewTopic
from coordinator.observability import tracing
from coordinator.observability.metrics import CoordinatorMetrics, parse_families
from coordinator.observability.observer import RuntimeObserver
from coordinator.observability.requests import RequestObserver, forwarded_timer
from coordinator.runtime import CoordinatorRuntime, ManualClock
from coordinator.runtime.store import MemoryRecordStore
from coordinator.server.api import Node
from coordinator.server.catalog import kafka_api_name, observe_rpcs
from coordinator.server.kafka.listener import KafkaListener
from coordinator.server.service import CoordinatorService

MEMBER = "Zk8Sdl+/AAAAAAAAAAAAAA"
DURATION = "kip848_request_duration_seconds_count"


def value(samples: Any, name: str, **labels: str) -> float:
    return sum(
        s.value
        for s in samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


def registry_samples(metrics: CoordinatorMetrics) -> list[Any]:
    return [s for family in metrics.registry.collect() for s in family.samples]


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exp = InMemorySpanExporter()
    tracing.configure(exporter=exp, sample_ratio=1.0, max_traces_per_second=0)  # every request
    try:
        yield exp
    finally:
        tracing.shutdown()


def join_heartbeat() -> Any:
    return request(
        68,
        1,
        group_id="k-g",
        member_id=MEMBER,
        member_epoch=0,
        rebalance_timeout=300000,
        subscribed_topic_names=["k-orders"],
        subscribed_topic_regex="",
        topic_partitions=[],
    )


async def test_kafka_requests_have_the_grpc_span_tree_and_kafka_api_names(
    exporter: InMemorySpanExporter,
) -> None:
    metrics = CoordinatorMetrics(process_collectors=False)
    rt = CoordinatorRuntime(
        config=parse_config(
            {"group.coordinator.shards": "2", "group.consumer.assignment.interval.ms": "0"}
        ),
        store=MemoryRecordStore(partitions=2),
        clock=ManualClock(1_000_000),
        ids=SequentialIds(),
        assignors=[UniformAssignor()],
        observer=RuntimeObserver(metrics),
    )
    await rt.start()
    service = CoordinatorService(rt)
    observe_rpcs(service, RequestObserver(metrics))
    listener = KafkaListener(service)
    try:
        await rt.create_topics([NewTopic(name="k-orders", num_partitions=2)])
        port = await listener.listen("127.0.0.1", 0)
        listener.set_node(port, Node(node_id=0, host="127.0.0.1", port=port))
        client = KafkaClient(f"127.0.0.1:{port}", "kafka-app")
        try:
            # The join writes records: its answer waits for the batch (the listener finishes
            # the request in a task), as a heartbeat that changes nothing does not.
            joined = await asyncio.to_thread(client.call, join_heartbeat())
            assert (joined.error_code.value, joined.member_epoch) == (0, 1)
            meta = await asyncio.to_thread(
                client.call, request(3, 12, topics=None, allow_auto_topic_creation=False)
            )
            assert [t.name for t in meta.topics] == ["k-orders"]
        finally:
            client.close()
    finally:
        await listener.close()
        await rt.close()

    samples = registry_samples(metrics)
    kafka = {"protocol": "kafka", "route": "served", "error": "NONE"}
    assert value(samples, DURATION, rpc="ConsumerGroupHeartbeat", **kafka) == 1
    assert value(samples, DURATION, rpc="Metadata", **kafka) == 1
    assert value(samples, DURATION, rpc="ListTopics") == 0  # the gRPC RPC's name: not this

    spans = exporter.get_finished_spans()
    by_name: dict[str, list[Any]] = {}
    for s in spans:
        by_name.setdefault(s.name, []).append(s)
    (rpc,) = by_name["kafka/ConsumerGroupHeartbeat"]
    assert dict(rpc.attributes) == {
        "rpc.system": "kafka",
        "rpc.service": "kafka",
        "rpc.method": "ConsumerGroupHeartbeat",
        "messaging.client.id": "kafka-app",
        "client.address": "/127.0.0.1",
        "messaging.consumer.group.name": "k-g",
        "kip848.member.id": MEMBER,
        "kip848.member.epoch": 1,
        "kip848.error_code": "NONE",
    }
    (command,) = by_name["shard.heartbeat"]
    assert command.parent is not None and command.parent.span_id == rpc.context.span_id
    assert command.context.trace_id == rpc.context.trace_id
    (run,) = by_name["assignor.uniform"]
    assert run.parent is not None and run.parent.span_id == command.context.span_id
    batches = by_name["store.append"]
    assert command.context.span_id in {link.context.span_id for b in batches for link in b.links}
    (metadata,) = by_name["kafka/Metadata"]
    assert metadata.attributes["rpc.method"] == "Metadata"
    # Metadata reads the topic registry's committed copy, with no command: no span under it.
    assert "shard.list_topics" not in by_name
    assert [
        s.name for s in spans if s.parent and s.parent.span_id == metadata.context.span_id
    ] == []


def test_forwarded_requests_are_counted_and_timed_with_route_forwarded(tmp_path: Path) -> None:
    cluster = FakeCluster()
    cluster.add_node(1)
    server = KafkaServer(
        tmp_path / "data",
        "--kafka-upstream",
        cluster.nodes[1].address,
        "--metrics-listen",
        "127.0.0.1:0",
        clock="system",
    )
    metrics_address = server.metrics_address
    try:
        c = server.client()
        meta = c.call(request(3, 12, topics=None, allow_auto_topic_creation=False))
        assert [b.node_id for b in meta.brokers] == [1]
        offsets = c.call(
            request(
                2,
                7,
                replica_id=-1,
                isolation_level=0,
                topics=[
                    {
                        "name": TOPIC,
                        "partitions": [
                            {"partition_index": p, "current_leader_epoch": -1, "timestamp": -1}
                            for p in range(PARTITIONS)
                        ],
                    }
                ],
            )
        )
        assert len(offsets.topics[0].partitions) == PARTITIONS
        # Only the broker's resources: the whole request goes upstream (not decoded back).
        configs = c.call(
            request(
                32,
                4,
                resources=[{"resource_type": 4, "resource_name": "1", "configuration_keys": None}],
                include_synonyms=False,
                include_documentation=False,
            )
        )
        assert [r.resource_name for r in configs.results] == ["1"]
        # A transaction coordinator stays upstream.
        txn = c.call(request(10, 4, key_type=1, coordinator_keys=["tx"]))
        assert [x.key for x in txn.coordinators] == ["tx"]
        c.close()
        assert metrics_address is not None
        with urllib.request.urlopen(f"http://{metrics_address}/metrics", timeout=5) as resp:
            families = parse_families(resp.read().decode())
    finally:
        code = server.stop()
        cluster.stop()
    assert code == 0, server.stderr_text()
    samples = [s for ss in families.values() for s in ss]
    forwarded = {"protocol": "kafka", "route": "forwarded", "error": ""}
    for rpc in ("Metadata", "ListOffsets", "DescribeConfigs", "FindCoordinator"):
        assert value(samples, DURATION, rpc=rpc, **forwarded) == 1, rpc
    assert value(samples, DURATION, route="forwarded") == 4
    assert value(samples, DURATION, route="served", protocol="kafka") == 0


def test_a_forwarded_request_never_answered_is_aborted_or_timed_out() -> None:
    metrics = CoordinatorMetrics(process_collectors=False)
    start = forwarded_timer(metrics, kafka_api_name)
    assert start is not None and forwarded_timer(None, kafka_api_name) is None
    start(0)(False, False)  # Produce: the client's connection closed before the answer
    start(1)(True, False)  # Fetch
    start(3)(False, True)  # Metadata: no answer within kafka.upstream.request.timeout.ms
    samples = registry_samples(metrics)
    assert value(samples, DURATION, rpc="Produce", route="forwarded", error="ABORTED") == 1
    assert value(samples, DURATION, rpc="Fetch", route="forwarded", error="") == 1
    assert (
        value(samples, DURATION, rpc="Metadata", route="forwarded", error="REQUEST_TIMED_OUT") == 1
    )
