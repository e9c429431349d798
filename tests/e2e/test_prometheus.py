"""A real Prometheus scrapes a real ``kip848 serve --metrics-listen`` (with a front-end process,
JSON logs) under a small workload with a rebalance and commits; the series are read back through
Prometheus's HTTP query API, and the JSON log is parsed line by line."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import grpc
import pytest
from conftest import ServerProcess, join_request, owned
from prometheus_harness import PrometheusServer, prometheus_binary

from coordinator.observability.metrics import parse_families
from kip848.v1 import admin_pb2, offsets_pb2, offsets_pb2_grpc
from kip848.v1 import consumer_group_pb2 as cg
from kip848.v1 import consumer_group_pb2_grpc as cg_grpc

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(prometheus_binary() is None, reason="needs Debian's prometheus"),
]

MAX_CHANNELS = 40


def scrape(address: str) -> dict:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as resp:
        return parse_families(resp.read().decode())


def value(families: dict, sample: str, **labels: str) -> float:
    """The sum of the samples named ``sample`` with ``labels``."""
    return sum(
        s.value
        for samples in families.values()
        for s in samples
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())
    )


def forwarded(families: dict) -> float:
    return sum(s.value for s in families.get("kip848_frontend_forwarded_calls", []))


def test_prometheus_scrapes_rebalance_latency_and_commits(tmp_path: Path) -> None:
    server = ServerProcess(
        tmp_path / "data",
        "--grpc-processes",
        "2",
        "--metrics-listen",
        "127.0.0.1:0",
        "--log-format",
        "json",
        clock="manual",
    )
    metrics_address = server.metrics_address
    assert metrics_address is not None
    heartbeats = 0
    channels: list[grpc.Channel] = []
    try:
        with PrometheusServer(tmp_path, targets=[metrics_address]) as prom:
            created = server.admin.CreateTopics(
                admin_pb2.CreateTopicsRequest(
                    topics=[
                        admin_pb2.CreateTopicsRequest.CreatableTopic(
                            name="orders", num_partitions=4
                        )
                    ]
                ),
                timeout=10,
                metadata=(("client-id", "ops-tool"),),
            )
            assert created.topics[0].error_code == 0
            t = created.topics[0].topic_id
            a = server.heartbeat(client_id="app", **join_request("shop", ["orders"], member_id="A"))
            heartbeats += 1
            assert (a.error_code, a.member_epoch) == (0, 1)
            # B joins: epoch 2 (a rebalance); A revokes 2 and 3, then both reach epoch 2.
            b = server.heartbeat(client_id="app", **join_request("shop", ["orders"], member_id="B"))
            a = server.heartbeat(
                group_id="shop", member_id="A", member_epoch=1, topic_partitions=owned((t, [0, 1]))
            )
            b = server.heartbeat(group_id="shop", member_id="B", member_epoch=2)
            heartbeats += 3
            assert (a.member_epoch, b.member_epoch) == (2, 2)
            assert [p.partitions for p in b.assignment.assigned_topic_partitions] == [[2, 3]]

            # Steady heartbeats from fresh connections until one went through the front end
            # (the kernel spreads connections over both processes): those calls must be
            # counted once, by the coordinator process.
            for _ in range(MAX_CHANNELS):
                channel = grpc.insecure_channel(  # one TCP connection per channel
                    server.address, options=[("grpc.use_local_subchannel_pool", 1)]
                )
                channels.append(channel)
                resp = cg_grpc.ConsumerGroupServiceStub(channel).ConsumerGroupHeartbeat(
                    cg.ConsumerGroupHeartbeatRequest(
                        group_id="shop", member_id="A", member_epoch=2
                    ),
                    timeout=10,
                )
                heartbeats += 1
                assert (resp.error_code, resp.member_epoch) == (0, 2)
                if forwarded(scrape(metrics_address)) > 0:
                    break
            assert forwarded(scrape(metrics_address)) > 0, "no connection reached the front end"

            commit = offsets_pb2_grpc.OffsetServiceStub(server.channel).OffsetCommit(
                offsets_pb2.OffsetCommitRequest(
                    group_id="shop",
                    member_id="A",
                    generation_id_or_member_epoch=2,
                    topics=[
                        offsets_pb2.OffsetCommitRequest.Topic(
                            topic_id=t,
                            partitions=[
                                offsets_pb2.OffsetCommitRequest.Partition(
                                    partition_index=p, committed_offset=10 + p
                                )
                                for p in (0, 1)
                            ],
                        )
                    ],
                ),
                timeout=10,
            )
            assert [p.error_code for p in commit.topics[0].partitions] == [0, 0]
            # A commit with a newer epoch than the member's: fenced, counted with its error.
            stale = offsets_pb2_grpc.OffsetServiceStub(server.channel).OffsetCommit(
                offsets_pb2.OffsetCommitRequest(
                    group_id="shop",
                    member_id="A",
                    generation_id_or_member_epoch=3,
                    topics=[
                        offsets_pb2.OffsetCommitRequest.Topic(
                            topic_id=t,
                            partitions=[
                                offsets_pb2.OffsetCommitRequest.Partition(
                                    partition_index=0, committed_offset=99
                                )
                            ],
                        )
                    ],
                ),
                timeout=10,
            )
            assert stale.topics[0].partitions[0].error_code == 113  # STALE_MEMBER_EPOCH

            # ---- read back through Prometheus
            assert prom.wait_for(
                'kip848_consumer_group_rebalances_total{cause="member_joined"}',
                lambda v: v == 2,
            )
            assert prom.wait_for("kip848_rebalance_duration_seconds_count", lambda v: v >= 1)
            assert prom.wait_for(
                'kip848_request_duration_seconds_count{rpc="ConsumerGroupHeartbeat",'
                'protocol="grpc",error="NONE"}',
                lambda v: v == heartbeats,
            )
            assert prom.wait_for(
                'kip848_request_duration_seconds_count{rpc="OffsetCommit",error="STALE_MEMBER_EPOCH"}',
                lambda v: v == 1,
            )
            assert prom.wait_for('kip848_offset_commits_total{error="NONE"}', lambda v: v == 2)
            assert prom.wait_for(
                'kip848_offset_commits_total{error="STALE_MEMBER_EPOCH"}', lambda v: v == 1
            )
            p99 = prom.wait_for(
                "histogram_quantile(0.99, sum by (le) "
                '(kip848_request_duration_seconds_bucket{rpc="ConsumerGroupHeartbeat"}))',
                lambda v: 0 < v <= 10,
            )
            assert p99 > 0
            assert prom.wait_for(
                'kip848_groups{group_type="consumer",state="Stable"}', lambda v: v == 1
            )
            assert prom.wait_for(
                'kip848_members{group_type="consumer",member_type="consumer"}',
                lambda v: v == 2,
            )
            assert prom.wait_for("kip848_offsets", lambda v: v == 2)
            assert prom.wait_for('kip848_shards{state="active"}', lambda v: v == 50)
            assert prom.wait_for(
                'kip848_assignment_duration_seconds_count{assignor="uniform",group_size="1-10"}',
                lambda v: v == 2,
            )
            assert prom.wait_for("sum(kip848_batch_records_count)", lambda v: v >= 4)
            assert prom.targets_up()
    finally:
        for channel in channels:
            channel.close()
        code = server.stop()
    assert code == 0, server.stderr_text()

    # ---- the JSON log, line by line
    lines = [json.loads(line) for line in server.stderr_text().splitlines() if line.strip()]
    assert all({"time", "level", "logger", "message", "process"} <= set(x) for x in lines)
    # Each epoch bump logged once, with its causes and members: the core's event, written by
    # the runtime once durable (the rebalance metrics count the same events).
    bumps = [x for x in lines if x.get("event") == "group_epoch_bumped"]
    assert [
        (x["logger"], x["group_id"], x["event_fields"]["group_epoch"])
        + (x["event_fields"]["causes"], x["event_fields"]["member_ids"])
        for x in bumps
    ] == [
        ("kip848.runtime", "shop", 1, ["member_joined"], ["A"]),
        ("kip848.runtime", "shop", 2, ["member_joined"], ["B"]),
    ]
    audits = [x for x in lines if x["logger"] == "kip848.audit"]
    assert [
        (x["action"], x["topic"], x["partitions"], x["result"], x["client_id"], x["client_address"])
        for x in audits
    ] == [("create_topic", "orders", 4, "NONE", "ops-tool", "/127.0.0.1")]
    assert any(x["message"].startswith("Front end 1 (pid") for x in lines)


def test_kafka_protocol_requests_are_measured_in_the_same_service_layer(tmp_path: Path) -> None:
    """Over the Kafka listener the same series are recorded, with ``protocol="kafka"``; the
    Kafka client's id and address reach the spans and the audit trail the same way."""
    from kafka_support import KafkaServer, request

    server = KafkaServer(tmp_path / "data", "--metrics-listen", "127.0.0.1:0")
    metrics_address = server.metrics_address
    assert metrics_address is not None
    try:
        server.create_topic("k-orders", 2)
        client = server.client("librdkafka-like")
        member = "Zk8Sdl+/AAAAAAAAAAAAAA"
        join = client.call(
            request(
                68,
                1,
                group_id="k-g",
                member_id=member,
                member_epoch=0,
                rebalance_timeout=300000,
                subscribed_topic_names=["k-orders"],
                subscribed_topic_regex="",
                topic_partitions=[],
            )
        )
        assert (join.error_code.value, join.member_epoch) == (0, 1)
        fenced = client.call(
            request(68, 1, group_id="k-g", member_id=member, member_epoch=7, topic_partitions=[])
        )
        assert fenced.error_code.value == 110  # FENCED_MEMBER_EPOCH
        client.close()
        families = scrape(metrics_address)
    finally:
        assert server.stop() == 0, server.stderr_text()
    hb = "kip848_request_duration_seconds_count"
    assert value(families, hb, rpc="ConsumerGroupHeartbeat", protocol="kafka", error="NONE") == 1
    assert (
        value(
            families,
            hb,
            rpc="ConsumerGroupHeartbeat",
            protocol="kafka",
            error="FENCED_MEMBER_EPOCH",
        )
        == 1
    )
    assert value(families, hb, rpc="ConsumerGroupHeartbeat", protocol="grpc") == 0
    assert value(families, "kip848_consumer_group_rebalances_total", cause="member_joined") == 1
    assert value(families, "kip848_event_processing_time_seconds_count") >= 3
