"""The Kafka listener in front of a real broker (Tansu): forwarding, rewritten broker addresses,
merged ApiVersions, and real clients (confluent-kafka with the KIP-848 protocol, kafka-python
classic) producing and consuming through it."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from kafka_support import (
    KafkaClient,
    KafkaServer,
    KafkaStack,
    create_topics,
    delete_topics,
    request,
)
from kio.schema.errors import ErrorCode as E

from kip848.v1 import admin_pb2, consumer_group_pb2, consumer_group_pb2_grpc

pytestmark = pytest.mark.slow


Stack = KafkaStack


def metadata(client: KafkaClient, *names: str) -> dict[str, tuple[uuid.UUID, int]]:
    """Metadata v12: name -> (topic id, partitions) of the named topics (all: none named)."""
    resp = client.call(
        request(
            3,
            12,
            topics=[{"name": n, "topic_id": None} for n in names] if names else None,
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    return {t.name: (t.topic_id, len(t.partitions)) for t in resp.topics if not t.error_code}


def list_topics(server: KafkaServer) -> dict[str, tuple[uuid.UUID, int]]:
    """The coordinator's registry (AdminService.ListTopics)."""
    resp = server.admin.ListTopics(admin_pb2.ListTopicsRequest(), timeout=15)
    assert resp.error_code == 0, resp
    return {t.name: (uuid.UUID(bytes=t.topic_id), t.num_partitions) for t in resp.topics}


class Member:
    """A KIP-848 consumer over the Kafka protocol (ConsumerGroupHeartbeat v1) that acknowledges
    whatever it is given at once."""

    def __init__(self, server: KafkaServer, group: str, member_id: str) -> None:
        self.client = server.client("member")
        self.group, self.member_id = group, member_id
        self.epoch = 0
        self.owned: dict[uuid.UUID, tuple[int, ...]] = {}

    def heartbeat(self, names: list[str] | None = None, regex: str | None = None) -> Any:
        resp = self.client.call(
            request(
                68,
                1,
                group_id=self.group,
                member_id=self.member_id,
                member_epoch=self.epoch,
                rebalance_timeout=30000,
                subscribed_topic_names=names,
                subscribed_topic_regex=regex,
                topic_partitions=[
                    {"topic_id": t, "partitions": p} for t, p in sorted(self.owned.items())
                ],
            )
        )
        assert resp.error_code == E.none, resp
        self.epoch = resp.member_epoch
        if resp.assignment is not None:
            self.owned = {
                tp.topic_id: tuple(tp.partitions) for tp in resp.assignment.topic_partitions
            }
        return resp

    def wait_for(self, want: dict[uuid.UUID, tuple[int, ...]], timeout_s: float = 15.0) -> None:
        """Heartbeat (every 100 ms, bounded) until the member owns exactly ``want``."""
        deadline = time.monotonic() + timeout_s
        while self.owned != want:
            assert time.monotonic() < deadline, (self.owned, want)
            time.sleep(0.1)
            self.heartbeat()

    def close(self) -> None:
        self.client.call(
            request(
                68,
                1,
                group_id=self.group,
                member_id=self.member_id,
                member_epoch=-1,
                topic_partitions=None,
            )
        )
        self.client.close()


def test_api_versions_merge_the_upstream_and_ours(kafka_stack: Stack) -> None:
    server = kafka_stack.server
    c = server.client()
    keys = {k.api_key: (k.min_version, k.max_version) for k in c.call(request(18, 0)).api_keys}
    c.close()
    assert keys[68] == (0, 1) and keys[69] == (0, 1) and keys[8] == (2, 10) and keys[9] == (1, 10)
    assert keys[0] == (3, 11) and keys[1] == (4, 17) and keys[3] == (0, 12) and keys[19] == (0, 7)
    # the transaction coordinator's APIs at Tansu's ranges, TxnOffsetCommit ours (transactions.py)
    assert keys[22] == (0, 5) and keys[25] == (0, 4) and keys[26] == (0, 4) and keys[28] == (0, 6)
    for hidden in (71, 72):
        assert hidden not in keys


def test_metadata_names_the_listener_not_the_upstream(kafka_stack: Stack) -> None:
    tansu, server = kafka_stack.tansu, kafka_stack.server
    c = server.client()
    create_topics(c, **{"up-meta": 2})
    c.close()
    c = server.client()
    resp = c.call(
        request(
            3,
            12,
            topics=[{"name": "up-meta", "topic_id": None}],
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    c.close()
    host, _, port = server.kafka_address.rpartition(":")
    assert [(b.node_id, b.host, b.port) for b in resp.brokers] == [(111, host, int(port))]
    assert resp.controller_id == 111
    (t,) = resp.topics
    assert (t.name, len(t.partitions)) == ("up-meta", 2)
    assert all(p.leader_id == 111 for p in t.partitions)
    assert str(tansu.port) not in repr(resp)


def test_real_clients_produce_and_consume_through_the_listener(
    kafka_stack: Stack,
) -> None:
    from confluent_kafka import Consumer
    from kafka import KafkaConsumer, KafkaProducer

    server = kafka_stack.server
    c = server.client()
    create_topics(c, **{"up-orders": 3})  # through the listener; the registry follows
    c.close()
    producer = KafkaProducer(bootstrap_servers=server.kafka_address)
    sent = {f"r{i}".encode() for i in range(30)}
    for i, value in enumerate(sorted(sent)):
        producer.send("up-orders", value, partition=i % 3)
    producer.flush(timeout=20)
    producer.close()

    # librdkafka with the KIP-848 protocol: joins through the listener, gets every partition.
    assigned: list[list[int]] = []
    consumer = Consumer(
        {
            "bootstrap.servers": server.kafka_address,
            "group.id": "up-848",
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe(
        ["up-orders"],
        on_assign=lambda _c, parts: assigned.append(sorted(p.partition for p in parts)),
    )
    got = set()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and got != sent:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.add(msg.value())
    consumer.commit(asynchronous=False)
    consumer.close()
    assert assigned and assigned[0] == [0, 1, 2]
    assert got == sent
    stub = consumer_group_pb2_grpc.ConsumerGroupServiceStub(server.channel)
    desc = stub.ConsumerGroupDescribe(
        consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=["up-848"]), timeout=10
    )
    assert desc.groups[0].error_code == 0 and desc.groups[0].group_epoch >= 1

    # kafka-python (classic protocol) joins the coordinator's classic bridge and reads all.
    classic = KafkaConsumer(
        "up-orders",
        bootstrap_servers=server.kafka_address,
        group_id="up-classic",
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
        consumer_timeout_ms=8000,
    )
    values = {m.value for m in classic}
    parts = {tp.partition for tp in classic.assignment()}
    classic.close()
    assert values == sent and parts == {0, 1, 2}


# ---------------------------------------------------------------- topics follow the upstream


def test_a_topic_created_behind_our_back_is_assigned_with_the_brokers_id(
    kafka_stack: Stack,
) -> None:
    server = kafka_stack.server
    broker = kafka_stack.broker()
    ids = create_topics(broker, **{"tf-direct": 4})  # straight to Tansu: we were not told
    broker.close()
    member = Member(server, "tf-g1", "tf-member-1")
    # The join names a topic the registry lacks: it waits for a refresh and is assigned at
    # once, by its first heartbeat (as with Kafka, whose coordinator shares the broker's
    # metadata), not a heartbeat interval later.
    member.heartbeat(names=["tf-direct"], regex="")
    assert member.owned == {ids["tf-direct"]: (0, 1, 2, 3)}
    assert list_topics(server)["tf-direct"] == (ids["tf-direct"], 4)
    member.close()


def test_a_deleted_and_recreated_topic_gets_its_new_id_and_loses_its_offsets(
    kafka_stack: Stack,
) -> None:
    server = kafka_stack.server
    broker = kafka_stack.broker()
    old = create_topics(broker, **{"tf-again": 2})["tf-again"]
    member = Member(server, "tf-g2", "tf-member-2")
    member.heartbeat(names=["tf-again"], regex="")
    member.wait_for({old: (0, 1)})
    c = server.client()

    def committed() -> list[tuple[int, int]]:
        resp = c.call(
            request(
                9,
                9,
                groups=[
                    {"group_id": "tf-g2", "member_id": None, "member_epoch": -1, "topics": None}
                ],
                require_stable=False,
            )
        )
        (g,) = resp.groups
        return [(p.partition_index, p.committed_offset) for t in g.topics for p in t.partitions]

    resp = c.call(
        request(
            8,
            9,
            group_id="tf-g2",
            generation_id_or_member_epoch=member.epoch,
            member_id="tf-member-2",
            topics=[
                {
                    "name": "tf-again",
                    "partitions": [
                        {"partition_index": 0, "committed_offset": 5, "committed_metadata": ""}
                    ],
                }
            ],
        )
    )
    assert [p.error_code for t in resp.topics for p in t.partitions] == [E.none]
    assert committed() == [(0, 5)]

    delete_topics(broker, "tf-again")
    new = create_topics(broker, **{"tf-again": 3})["tf-again"]
    broker.close()
    assert new != old
    assert list_topics(server)["tf-again"] == (new, 3)  # ListTopics refreshes first
    assert committed() == []  # the old topic's offsets went with it, as in Kafka
    member.wait_for({new: (0, 1, 2)})
    member.close()
    c.close()


def test_a_topic_changed_through_the_listener_is_known_when_the_answer_arrives(
    kafka_stack: Stack,
) -> None:
    """CreateTopics/DeleteTopics through our listener go to the broker; their answers are held
    until the registry has the change, so the client's very next request sees it (an offset
    commit for the new topic; after the delete, UNKNOWN_TOPIC_OR_PARTITION), not one refresh
    interval later."""
    c = kafka_stack.server.client()

    def commit(offset: int) -> list[int]:
        resp = c.call(
            request(
                8,
                9,
                group_id="tf-g5",
                generation_id_or_member_epoch=-1,
                member_id="",
                topics=[
                    {
                        "name": "tf-here",
                        "partitions": [
                            {
                                "partition_index": 1,
                                "committed_offset": offset,
                                "committed_metadata": "",
                            }
                        ],
                    }
                ],
            )
        )
        return [p.error_code for t in resp.topics for p in t.partitions]

    for round_ in range(3):  # each round races the refresh afresh
        created = create_topics(c, **{"tf-here": 2})
        assert commit(10 + round_) == [E.none], round_
        assert list_topics(kafka_stack.server)["tf-here"] == (created["tf-here"], 2)
        delete_topics(c, "tf-here")
        assert commit(20) == [E.unknown_topic_or_partition], round_
    c.close()


def test_a_regex_picks_up_new_topics_on_the_refresh_interval(kafka_stack: Stack) -> None:
    server = kafka_stack.server
    broker = kafka_stack.broker()
    first = create_topics(broker, **{"tf-rx-a": 1})
    member = Member(server, "tf-g3", "tf-member-3")
    # A new regex: the registry is refreshed first, the regex resolved off the heartbeat
    # path (Kafka 4.x): a later heartbeat gets its topics.
    member.heartbeat(names=[], regex="tf-rx-.*")
    member.wait_for({first["tf-rx-a"]: (0,)}, timeout_s=10)
    # Created behind our back; nobody asks for a refresh: the registry's 1 s interval finds
    # it, and the group's regexes are resolved again 10 s after their last resolution at
    # the latest (Kafka's REGEX_BATCH_REFRESH_MIN_INTERVAL_MS).
    later = create_topics(broker, **{"tf-rx-b": 2})
    broker.close()
    started = time.monotonic()
    member.wait_for({first["tf-rx-a"]: (0,), later["tf-rx-b"]: (0, 1)}, timeout_s=20)
    assert time.monotonic() - started < 15
    member.close()


def test_the_topic_rpcs_go_to_the_upstream(kafka_stack: Stack) -> None:
    server = kafka_stack.server
    T = admin_pb2.CreateTopicsRequest.CreatableTopic
    resp = server.admin.CreateTopics(
        admin_pb2.CreateTopicsRequest(
            topics=[
                T(name="tf-admin", num_partitions=2),
                T(name="bad name!", num_partitions=1),
                T(name="tf-chosen-id", num_partitions=1, topic_id=uuid.uuid4().bytes),
                T(name="tf-dup", num_partitions=1),
                T(name="tf-dup", num_partitions=1),
            ]
        ),
        timeout=15,
    )
    broker = kafka_stack.broker()
    upstream = metadata(broker)
    tid, count = upstream["tf-admin"]
    assert [(t.name, t.error_code, t.error_message) for t in resp.topics] == [
        ("tf-admin", 0, ""),
        (
            "bad name!",
            17,
            'Topic name "bad name!" is illegal, it contains a character other than ASCII '
            "alphanumerics, '.', '_' and '-'",
        ),
        (
            "tf-chosen-id",
            42,
            "A topic id cannot be chosen in front of a broker (--kafka-upstream): the broker "
            "assigns it.",
        ),
        ("tf-dup", 42, "Duplicate topic name tf-dup in the request."),
        ("tf-dup", 42, "Duplicate topic name tf-dup in the request."),
    ]
    assert uuid.UUID(bytes=resp.topics[0].topic_id) == tid and count == 2
    assert not {"bad name!", "tf-chosen-id", "tf-dup"} & set(upstream)
    assert list_topics(server)["tf-admin"] == (tid, 2)

    exists = server.admin.CreateTopics(
        admin_pb2.CreateTopicsRequest(topics=[T(name="tf-admin", num_partitions=2)]), timeout=15
    )
    assert exists.topics[0].error_code == 36  # the broker's TOPIC_ALREADY_EXISTS

    grow = server.admin.CreatePartitions(
        admin_pb2.CreatePartitionsRequest(
            topics=[
                admin_pb2.CreatePartitionsRequest.CreatePartitionsTopic(name="tf-admin", count=4)
            ]
        ),
        timeout=15,
    )
    assert [(t.name, t.error_code, t.error_message) for t in grow.results] == [
        ("tf-admin", 35, "The upstream broker does not offer CreatePartitions (API key 37).")
    ]

    gone = server.admin.DeleteTopics(
        admin_pb2.DeleteTopicsRequest(names=["tf-admin", "tf-never"]), timeout=15
    )
    assert [(t.name, t.error_code) for t in gone.results] == [("tf-admin", 0), ("tf-never", 3)]
    assert uuid.UUID(bytes=gone.results[0].topic_id) == tid
    assert "tf-admin" not in metadata(broker) and "tf-admin" not in list_topics(server)
    broker.close()


def test_topic_and_group_configs_in_one_request(kafka_stack: Stack) -> None:
    """kafka-python's KafkaAdminClient sends TOPIC and GROUP resources in one DescribeConfigs:
    the topic's part is the broker's answer, the group's is ours."""
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    server = kafka_stack.server
    c = server.client()
    create_topics(c, **{"cfg-topic": 1})
    resources = [
        {"resource_type": 2, "resource_name": "cfg-topic", "configuration_keys": None},
        {"resource_type": 32, "resource_name": "cfg-group", "configuration_keys": None},
    ]
    raw = c.call(
        request(32, 4, resources=resources, include_synonyms=False, include_documentation=False)
    )
    c.close()
    topic, group = raw.results
    # Tansu's words ("No error.") on the topic: the broker answered that part.
    assert (topic.resource_name, topic.error_code, topic.error_message) == (
        "cfg-topic",
        E.none,
        "No error.",
    )
    assert (group.resource_name, group.error_code, group.error_message) == (
        "cfg-group",
        E.none,
        None,
    )

    admin = KafkaAdminClient(bootstrap_servers=server.kafka_address, request_timeout_ms=10000)
    try:
        got = admin.describe_configs(
            [
                ConfigResource(ConfigResourceType.TOPIC, "cfg-topic"),
                ConfigResource(ConfigResourceType.GROUP, "cfg-group"),
            ],
            config_filter="all",
        )
    finally:
        admin.close()
    assert got["topic"] == {"cfg-topic": {}}
    assert {k: v["value"] for k, v in got["group"]["cfg-group"].items()} == {
        "consumer.heartbeat.interval.ms": "5000",
        "consumer.session.timeout.ms": "45000",
        "consumer.assignment.interval.ms": "0",
    }
