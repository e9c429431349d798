"""Authorization matrix of the data APIs the Kafka listener forwards to an open broker
(kafka/topic_guard.py, kafka/fetch_guard.py; docs/security.md sections 8 and 12): each
guarded API x {allowed, denied, mixed} answered per partition as Kafka answers it, and the
broker never asked for what the client may not have.

The broker is ``fake_upstream.FakeCluster(data=True)`` (logs in memory, KIP-227 fetch sessions:
Tansu has none), which keeps every request it receives, so each test asserts both the answer
and what reached the broker. The client is anonymous on the PLAINTEXT listener; the topics:
``open`` (ANONYMOUS may do everything, alice READ), ``secret`` (only ``User:alice``), ``readonly``
(ANONYMOUS may READ it, which implies DESCRIBE, not WRITE), and ``vis-*`` (ANONYMOUS may
DESCRIBE, not CREATE).

Real clients: kafka-python and librdkafka (confluent-kafka) producers in front of Tansu, allowed
one topic and not another, get their records answered per partition; a kafka-python consumer (it fetches in
KIP-227 sessions) whose READ ACL is removed mid-session gets TOPIC_AUTHORIZATION_FAILED on its
next fetch.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_upstream import FakeCluster
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder
from kafka_clients import close_producer
from kafka_support import KafkaClient, KafkaServer, KafkaStack, create_topics, request

from kip848.v1 import admin_pb2

TOPIC, CLUSTER, LITERAL, PREFIXED, ANY = 2, 4, 3, 4, 1
ALL, READ, ALTER, DESCRIBE, ALLOW = 2, 3, 7, 8, 3
CLUSTER_ACTION = 9
CLUSTER_NAME = "kafka-cluster"
DENIED, UNKNOWN_TOPIC_ID, SESSION_NOT_FOUND, ILLEGAL_SASL_STATE = 29, 100, 70, 34
OPEN_ID = uuid.UUID("00000000-0000-4000-8000-0000000000a1")
SECRET_ID = uuid.UUID("00000000-0000-4000-8000-0000000000b2")
READONLY_ID = uuid.UUID("00000000-0000-4000-8000-0000000000c3")
NOBODY_ID = uuid.UUID("00000000-0000-4000-8000-0000000000d4")  # a topic id nobody has
STREAM_ID = uuid.UUID("00000000-0000-4000-8000-0000000000e5")
TOPICS = {
    "open": (OPEN_ID, 2),
    "secret": (SECRET_ID, 2),
    "readonly": (READONLY_ID, 1),
    "stream": (STREAM_ID, 1),
}
NAMES = {OPEN_ID: "open", SECRET_ID: "secret", READONLY_ID: "readonly"}
SECRET_MESSAGE = "Not authorized to access topics: [secret]"


@pytest.fixture(scope="module")
def cluster() -> Iterator[FakeCluster]:
    c = FakeCluster(data=True, topics=TOPICS)
    c.add_node(1)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def server(cluster: FakeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServer]:
    s = KafkaServer(
        tmp_path_factory.mktemp("forwarded") / "data",
        "--kafka-upstream",
        cluster.nodes[1].address,
        clock="system",
    )
    try:
        # The cluster has ACLs too (ANONYMOUS may ALTER it: this test's gRPC calls manage the
        # ACLs), so nobody may CLUSTER_ACTION it, which would allow every OffsetForLeaderEpoch.
        grant(s, "User:ANONYMOUS", CLUSTER_NAME, ALTER, resource_type=CLUSTER)
        grant(s, "User:ANONYMOUS", "open", ALL)
        grant(s, "User:alice", "open", READ)  # `open` keeps an ACL when ANONYMOUS's goes
        grant(s, "User:alice", "secret", ALL)
        grant(s, "User:ANONYMOUS", "stream", ALL)
        grant(s, "User:alice", "stream", READ)
        grant(s, "User:ANONYMOUS", "readonly", READ)
        grant(s, "User:ANONYMOUS", "vis-", DESCRIBE, PREFIXED)
        yield s
    finally:
        assert s.stop() == 0, s.stderr_text()


@pytest.fixture
def client(server: KafkaServer) -> Iterator[KafkaClient]:
    c = server.client()
    try:
        yield c
    finally:
        c.close()


def _binding(
    principal: str, name: str, op: int, pattern: int, resource_type: int = TOPIC
) -> admin_pb2.AclBinding:
    return admin_pb2.AclBinding(
        resource_type=resource_type,
        resource_name=name,
        pattern_type=pattern,
        principal=principal,
        host="*",
        operation=op,
        permission_type=ALLOW,
    )


def grant(
    server: KafkaServer,
    principal: str,
    name: str,
    op: int,
    pattern: int = LITERAL,
    resource_type: int = TOPIC,
) -> None:
    made = server.admin.CreateAcls(
        admin_pb2.CreateAclsRequest(
            creations=[_binding(principal, name, op, pattern, resource_type)]
        ),
        timeout=10,
    )
    assert [r.error_code for r in made.results] == [0]


def revoke(server: KafkaServer, principal: str, topic: str, op: int) -> None:
    gone = server.admin.DeleteAcls(
        admin_pb2.DeleteAclsRequest(
            filters=[
                admin_pb2.AclFilter(
                    resource_type_filter=TOPIC,
                    resource_name_filter=topic,
                    pattern_type_filter=LITERAL,
                    principal_filter=principal,
                    operation=op,
                    permission_type=ANY,
                )
            ]
        ),
        timeout=10,
    )
    assert [len(r.matching_acls) for r in gone.filter_results] == [1]


def revoke_cluster_action(server: KafkaServer) -> None:
    gone = server.admin.DeleteAcls(
        admin_pb2.DeleteAclsRequest(
            filters=[
                admin_pb2.AclFilter(
                    resource_type_filter=CLUSTER,
                    resource_name_filter=CLUSTER_NAME,
                    pattern_type_filter=LITERAL,
                    principal_filter="User:ANONYMOUS",
                    operation=CLUSTER_ACTION,
                    permission_type=ANY,
                )
            ]
        ),
        timeout=10,
    )
    assert [len(r.matching_acls) for r in gone.filter_results] == [1]


def records(*values: str) -> bytes:
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    for i, value in enumerate(values):
        builder.append(timestamp=1000 + i, key=None, value=value.encode(), headers=[])
    builder.close()
    return bytes(builder.buffer())


def topic_of(t: Any) -> Any:
    """A request or response topic's name, or its id (v13+)."""
    return getattr(t, "name", None) or getattr(t, "topic", None) or t.topic_id


def values_of(data: bytes | None) -> list[str]:
    out: list[str] = []
    batches = MemoryRecords(bytes(data or b""))
    while (batch := batches.next_batch()) is not None:
        out += [r.value.decode() for r in batch]
    return out


def produce(
    version: int, acks: int, *parts: tuple[str | uuid.UUID, int, bytes]
) -> Any:  # (topic name or id, partition, records)
    by_id = version >= 13
    return request(
        0,
        version,
        transactional_id=None,
        acks=acks,
        timeout=5000,
        topic_data=[
            {
                "name": None if by_id else topic,
                "topic_id": topic if by_id else None,
                "partition_data": [{"index": p, "records": data}],
            }
            for topic, p, data in parts
        ],
    )


def produced(resp: Any) -> list[tuple[Any, int, int, int, str | None]]:
    """(topic name or id, partition, error, base offset, message) per answered partition."""
    return [
        (
            topic_of(t),
            p.index,
            int(p.error_code),
            p.base_offset,
            p.error_message,
        )
        for t in resp.responses
        for p in t.partition_responses
    ]


def fetch(
    version: int,
    session_id: int,
    epoch: int,
    parts: list[tuple[str | uuid.UUID, int, int]],  # (topic name or id, partition, offset)
    forgotten: list[tuple[str | uuid.UUID, int]] = (),  # type: ignore[assignment]
    max_wait: int = 0,
) -> Any:
    field = "topic_id" if version >= 13 else "topic"
    return request(
        1,
        version,
        max_wait=max_wait,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=session_id,
        session_epoch=epoch,
        topics=[
            {
                field: topic,
                "partitions": [
                    {
                        "partition": p,
                        "current_leader_epoch": -1,
                        "fetch_offset": offset,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                ],
            }
            for topic, p, offset in parts
        ],
        forgotten_topics_data=[{field: t, "partitions": [p]} for t, p in forgotten],
        rack_id="",
    )


def fetched(resp: Any) -> list[tuple[Any, int, int, list[str]]]:
    """(topic name or id, partition, error, record values) per answered partition."""
    return [
        (
            topic_of(t),
            p.partition_index,
            int(p.error_code),
            values_of(p.records),
        )
        for t in resp.responses
        for p in t.partitions
    ]


def asked_fetch(body: Any) -> tuple[list[tuple[Any, int, int]], list[tuple[Any, int]], int]:
    """What a fetch asked the broker: its partitions (topic, partition, offset), the
    partitions it forgot, its max wait (ms)."""
    parts = [(topic_of(t), p.partition, p.fetch_offset) for t in body.topics for p in t.partitions]
    forgot = [(topic_of(t), p) for t in body.forgotten_topics_data for p in t.partitions]
    return parts, forgot, int(body.max_wait.total_seconds() * 1000)


def new_asked(cluster: FakeCluster, key: int, before: int) -> list[Any]:
    return cluster.asked(key)[before:]


# ---------------------------------------------------------------- Produce


@pytest.mark.parametrize("version", [9, 13])
def test_produce_answers_allowed_partitions_and_refuses_the_others(
    cluster: FakeCluster, client: KafkaClient, version: int
) -> None:
    """A Produce naming a topic the client may write and one it may not: the first is written,
    the second answered TOPIC_AUTHORIZATION_FAILED after it (Kafka's merge), and only the first
    reaches the broker; by topic id (v13) an id nobody has is UNKNOWN_TOPIC_ID, last."""
    by_id = version >= 13
    open_, secret = (OPEN_ID, SECRET_ID) if by_id else ("open", "secret")
    seen = len(cluster.asked(0))
    start = cluster.logs["open", 1].end
    parts = [(secret, 0, records("s")), (open_, 1, records("a", "b"))]
    if by_id:
        parts.append((NOBODY_ID, 0, records("x")))
    resp = client.call(produce(version, 1, *parts))
    expected = [
        (open_, 1, 0, start, None),
        (secret, 0, DENIED, -1, SECRET_MESSAGE),
    ]
    if by_id:
        expected.append(
            (NOBODY_ID, 0, UNKNOWN_TOPIC_ID, -1, "This server does not host this topic ID.")
        )
    assert produced(resp) == expected
    asked = new_asked(cluster, 0, seen)
    assert [[topic_of(t) for t in body.topic_data] for body in asked] == [[open_]]
    assert values_of(cluster.logs["open", 1].read(start, 1 << 20)) == ["a", "b"]
    assert cluster.logs["secret", 0].end == 0


def test_produce_of_denied_topics_only_is_answered_here(
    cluster: FakeCluster, client: KafkaClient
) -> None:
    seen = len(cluster.asked(0))
    resp = client.call(produce(9, -1, ("secret", 1, records("s")), ("readonly", 0, records("r"))))
    assert produced(resp) == [
        ("secret", 1, DENIED, -1, SECRET_MESSAGE),
        ("readonly", 0, DENIED, -1, "Not authorized to access topics: [readonly]"),
    ]
    assert new_asked(cluster, 0, seen) == []
    assert cluster.logs["readonly", 0].end == 0


def test_acks_0_produce_writes_the_allowed_drops_the_rest_and_closes(
    cluster: FakeCluster, server: KafkaServer
) -> None:
    """acks=0 has no answer: as Kafka, the allowed records are written, the refused ones
    dropped, and the connection closed (after the answers already due), so the client notices."""
    client = server.client()
    try:
        start = cluster.logs["open", 0].end
        client.send(request(3, 12, topics=None, allow_auto_topic_creation=False))  # answered first
        client.send(produce(9, 0, ("open", 0, records("z")), ("secret", 0, records("s"))))
        assert sorted(t.name for t in client.receive().topics) == ["open", "readonly", "stream"]
        assert client.closed_by_server()
    finally:
        client.close()
    # The allowed records reach the upstream after the connection closed (no answer to wait
    # for with acks=0): wait for them, bounded.
    deadline = time.monotonic() + 10
    while not values_of(cluster.logs["open", 0].read(start, 1 << 20)):
        assert time.monotonic() < deadline, "the allowed records never reached the upstream"
        time.sleep(0.02)
    assert values_of(cluster.logs["open", 0].read(start, 1 << 20)) == ["z"]
    assert cluster.logs["secret", 0].end == 0


# ---------------------------------------------------------------- the other per-partition APIs


def _topics(entity: Any) -> list[str]:
    return [topic_of(t) for t in entity.topics]


PER_PARTITION = {
    # key: (version, request topic fields, response topic -> [(partition, error, value)])
    2: (
        7,
        lambda name, p: {
            "name": name,
            "partitions": [{"partition_index": p, "current_leader_epoch": -1, "timestamp": -1}],
        },
        lambda t: [(p.partition_index, int(p.error_code), p.offset) for p in t.partitions],
    ),
    21: (
        2,
        lambda name, p: {"name": name, "partitions": [{"partition_index": p, "offset": 0}]},
        lambda t: [(p.partition_index, int(p.error_code), p.low_watermark) for p in t.partitions],
    ),
    23: (
        4,
        lambda name, p: {
            "topic": name,
            "partitions": [{"partition": p, "current_leader_epoch": -1, "leader_epoch": 1}],
        },
        lambda t: [(p.partition, int(p.error_code), p.end_offset) for p in t.partitions],
    ),
    61: (
        0,
        lambda name, p: {"name": name, "partition_indexes": [p]},
        lambda t: [
            (p.partition_index, int(p.error_code), len(p.active_producers)) for p in t.partitions
        ],
    ),
}


def _per_partition(key: int, *parts: tuple[str, int]) -> Any:
    version, topic, _answer = PER_PARTITION[key]
    extra: dict[str, Any] = {
        2: {"replica_id": -1, "isolation_level": 0},
        21: {"timeout": 5000},
        23: {"replica_id": -1},
        61: {},
    }[key]
    return request(key, version, topics=[topic(n, p) for n, p in parts], **extra)


@pytest.mark.parametrize(
    "key",
    sorted(PER_PARTITION),
    ids=["ListOffsets", "DeleteRecords", "OffsetForLeaderEpoch", "DescribeProducers"],
)
def test_per_partition_apis_answer_allowed_and_refuse_denied(
    cluster: FakeCluster, client: KafkaClient, key: int
) -> None:
    """ListOffsets and OffsetForLeaderEpoch need DESCRIBE, DeleteRecords DELETE,
    DescribeProducers READ: a mixed request is answered for its allowed topics by the broker,
    the others here (TOPIC_AUTHORIZATION_FAILED, Kafka's unknown values, after the broker's);
    a request with no allowed topic reaches nothing."""
    _version, _topic, answer = PER_PARTITION[key]
    end = cluster.logs["open", 0].end
    value = {2: end, 21: 0, 23: end, 61: 0}[key]
    seen = len(cluster.asked(key))
    resp = client.call(_per_partition(key, ("secret", 1), ("open", 0)))
    names = [topic_of(t) for t in resp.topics]
    assert names == ["open", "secret"]
    assert [answer(t) for t in resp.topics] == [
        [(0, 0, value)],
        [(1, DENIED, -1 if key != 61 else 0)],
    ]
    assert [_topics(b) for b in new_asked(cluster, key, seen)] == [["open"]]
    resp = client.call(_per_partition(key, ("secret", 0)))
    assert [answer(t) for t in resp.topics] == [[(0, DENIED, -1 if key != 61 else 0)]]
    assert len(cluster.asked(key)) == seen + 1


# ---------------------------------------------------------------- Fetch


@pytest.mark.parametrize("version", [12, 13, 17])
def test_sessionless_fetch_answers_allowed_partitions(
    cluster: FakeCluster, client: KafkaClient, version: int
) -> None:
    by_id = version >= 13
    open_, secret = (OPEN_ID, SECRET_ID) if by_id else ("open", "secret")
    client.call(produce(9, 1, ("open", 0, records("f1"))))
    start = cluster.logs["open", 0].end - 1
    seen = len(cluster.asked(1))
    parts = [(secret, 0, 0), (open_, 0, start)] + ([(NOBODY_ID, 0, 0)] if by_id else [])
    resp = client.call(fetch(version, 0, -1, parts))
    expected = [(open_, 0, 0, ["f1"])]
    if by_id:
        expected.append((NOBODY_ID, 0, UNKNOWN_TOPIC_ID, []))
    expected.append((secret, 0, DENIED, []))
    assert (int(resp.error_code), resp.session_id, fetched(resp)) == (0, 0, expected)
    assert [asked_fetch(b)[0] for b in new_asked(cluster, 1, seen)] == [[(open_, 0, start)]]
    # Only refused partitions: answered here.
    resp = client.call(fetch(version, 0, -1, [(secret, 1, 0)]))
    assert fetched(resp) == [(secret, 1, DENIED, [])]
    assert len(cluster.asked(1)) == seen + 1


@pytest.mark.parametrize("version", [12, 15])
def test_a_followers_fetch_needs_cluster_action(
    cluster: FakeCluster, server: KafkaServer, client: KafkaClient, version: int
) -> None:
    """A fetch with a replica id (before v15 ``replica_id``, from v15 ``replica_state``) is a
    follower's: Kafka requires CLUSTER_ACTION on the cluster for it (not READ on its topics),
    else every partition is TOPIC_AUTHORIZATION_FAILED. ANONYMOUS, who may do everything on
    ``open`` but not CLUSTER_ACTION, is refused and the broker is never asked: it would take
    the coordinator's connection for replica 1's (records past the high watermark, the
    partition's ISR and high watermark moved). Before: the fetch went to the broker, judged as
    a consumer's (READ on ``open``). Once granted CLUSTER_ACTION, it goes as it came."""
    by_id = version >= 13
    open_ = OPEN_ID if by_id else "open"
    follower = fetch(version, 0, -1, [(open_, 0, 0)])
    if version >= 15:
        follower = dataclasses.replace(
            follower,
            replica_state=dataclasses.replace(
                follower.replica_state, replica_id=1, replica_epoch=3
            ),
        )
    else:
        follower = dataclasses.replace(follower, replica_id=1)
    seen = len(cluster.asked(1))
    resp = client.call(follower)
    assert (int(resp.error_code), resp.session_id, fetched(resp)) == (
        0,
        0,
        [(open_, 0, DENIED, [])],
    )
    assert new_asked(cluster, 1, seen) == []
    grant(server, "User:ANONYMOUS", CLUSTER_NAME, CLUSTER_ACTION, resource_type=CLUSTER)
    try:
        resp = client.call(follower)
        assert [e for _t, _p, e, _r in fetched(resp)] == [0]
        assert len(new_asked(cluster, 1, seen)) == 1
    finally:
        revoke_cluster_action(server)


@pytest.mark.parametrize("version", [12, 13])
def test_fetch_session_is_judged_whole_on_every_fetch(
    cluster: FakeCluster, server: KafkaServer, version: int
) -> None:
    """A fetch session (KIP-227) with an allowed topic and a refused one: the broker's session
    holds only the allowed partitions; every answer carries the refused one; the READ ACL
    removed mid-session refuses the session's partitions on the very next (empty) incremental
    fetch and makes the broker forget them; restored, they are fetched again from where the
    client was, without the client re-sending them."""
    by_id = version >= 13
    open_, secret = (OPEN_ID, SECRET_ID) if by_id else ("open", "secret")
    client = server.client()
    try:
        client.call(produce(9, 1, ("open", 1, records("s1", "s2"))))
        end = cluster.logs["open", 1].end
        seen = len(cluster.asked(1))
        # A new session: epoch 0.
        resp = client.call(fetch(version, 0, 0, [(open_, 1, end - 2), (secret, 0, 0)]))
        session = resp.session_id
        assert session > 0
        assert fetched(resp) == [(open_, 1, 0, ["s1", "s2"]), (secret, 0, DENIED, [])]
        # The client moves on; then nothing changes: the broker's answers are empty, ours
        # still refuse `secret` 0.
        resp = client.call(fetch(version, session, 1, [(open_, 1, end)]))
        assert (resp.session_id, fetched(resp)) == (session, [(secret, 0, DENIED, [])])
        resp = client.call(fetch(version, session, 2, []))
        assert (resp.session_id, fetched(resp)) == (session, [(secret, 0, DENIED, [])])
        # Its grant on `open` (ALL, READ with it) is removed: refused on the next fetch.
        revoke(server, "User:ANONYMOUS", "open", ALL)
        resp = client.call(fetch(version, session, 3, [], max_wait=500))
        assert fetched(resp) == [(open_, 1, DENIED, []), (secret, 0, DENIED, [])]
        # Granted again: fetched again, from where the client was (while the client adds
        # another partition it may not read).
        grant(server, "User:ANONYMOUS", "open", ALL)
        client.call(produce(9, 1, ("open", 1, records("s3"))))
        resp = client.call(fetch(version, session, 4, [(secret, 1, 0)]))
        assert fetched(resp) == [
            (open_, 1, 0, ["s3"]),
            (secret, 0, DENIED, []),
            (secret, 1, DENIED, []),
        ]
        # The client forgets `secret`: nothing refused any more.
        resp = client.call(
            fetch(version, session, 5, [(open_, 1, end + 1)], [(secret, 0), (secret, 1)])
        )
        assert fetched(resp) == []
        asked = [asked_fetch(b) for b in new_asked(cluster, 1, seen)]
        assert [a[:2] for a in asked] == [
            ([(open_, 1, end - 2)], []),
            ([(open_, 1, end)], []),
            ([], []),
            ([], [(open_, 1)]),  # forgotten at the broker; nothing left there: no wait
            ([(open_, 1, end)], []),  # added back with the offset the client last sent
            ([(open_, 1, end + 1)], []),  # `secret` 0 was never the broker's to forget
        ]
        assert asked[3][2] == 0
        assert {b.session_id for b in new_asked(cluster, 1, seen + 1)} == {session}
    finally:
        client.close()


def test_incremental_fetch_of_a_session_not_followed_is_refused(
    cluster: FakeCluster, client: KafkaClient
) -> None:
    """An incremental fetch of a session this connection did not start (made before ACLs
    existed, or elsewhere): FETCH_SESSION_ID_NOT_FOUND here, so the client starts anew."""
    seen = len(cluster.asked(1))
    resp = client.call(fetch(12, 4242, 3, [("open", 0, 0)]))
    assert (int(resp.error_code), resp.session_id, fetched(resp)) == (SESSION_NOT_FOUND, 0, [])
    assert len(cluster.asked(1)) == seen
    # A new session of refused partitions only: answered here, no session made.
    resp = client.call(fetch(12, 0, 0, [("secret", 0, 0)]))
    assert (int(resp.error_code), resp.session_id, fetched(resp)) == (
        0,
        0,
        [("secret", 0, DENIED, [])],
    )
    assert len(cluster.asked(1)) == seen


# ---------------------------------------------------------------- Metadata


def test_metadata_refuses_named_topics_and_omits_them_from_all(
    cluster: FakeCluster, client: KafkaClient
) -> None:
    """All topics: the ones the client may not describe are left out. Named: refused
    TOPIC_AUTHORIZATION_FAILED without their id and never asked of the broker (which would
    create a missing one); one it may describe but not create, missing, refused too."""
    everything = client.call(request(3, 12, topics=None, allow_auto_topic_creation=False))
    assert sorted(t.name for t in everything.topics) == ["open", "readonly", "stream"]
    seen = len(cluster.asked(3))
    named = client.call(
        request(
            3,
            12,
            topics=[{"name": n, "topic_id": None} for n in ("secret", "open", "vis-new", "ghost")],
            allow_auto_topic_creation=True,
        )
    )
    assert [(t.name, int(t.error_code), t.topic_id) for t in named.topics] == [
        ("open", 0, OPEN_ID),
        ("ghost", 3, None),  # no ACL names it: open to all (the default), missing
        ("vis-new", DENIED, None),
        ("secret", DENIED, None),
    ]
    assert [[t.name for t in b.topics] for b in new_asked(cluster, 3, seen)] == [["open", "ghost"]]


# ---------------------------------------------------------------- real clients


def test_producers_get_per_partition_answers(tmp_path: Path) -> None:
    """Producers may write `orders` and only read `audit` (so they learn both from Metadata),
    in front of Tansu. kafka-python sends one request per broker naming both topics: `orders`
    is written, `audit`'s records fail TOPIC_AUTHORIZATION_FAILED. librdkafka (confluent-kafka)
    sends one partition per request and gets the same per-partition answers. Nothing of
    `audit` reaches Tansu."""
    import confluent_kafka
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    stack = KafkaStack(tmp_path)
    try:
        client = stack.server.client()
        try:
            create_topics(client, orders=1, audit=1)
        finally:
            client.close()
        grant(stack.server, "User:ANONYMOUS", CLUSTER_NAME, ALTER, resource_type=CLUSTER)
        grant(stack.server, "User:ANONYMOUS", "orders", ALL)
        grant(stack.server, "User:ANONYMOUS", "audit", READ)

        producer = KafkaProducer(
            bootstrap_servers=stack.server.kafka_address,
            linger_ms=200,
            enable_idempotence=False,
            retries=0,
        )
        sent = [
            producer.send(topic, value.encode(), partition=0)
            for topic, value in [("orders", "k1"), ("audit", "k2"), ("orders", "k3")]
        ]
        producer.flush(30)
        assert [f.get(10).offset for f in (sent[0], sent[2])] == [0, 1]
        with pytest.raises(TopicAuthorizationFailedError):
            sent[1].get(10)
        producer.close(10)

        deliveries: list[tuple[str, str, int | None]] = []
        rdkafka = confluent_kafka.Producer(
            {"bootstrap.servers": stack.server.kafka_address, "linger.ms": 200, "retries": 0}
        )
        try:
            for topic, value in [("orders", "r1"), ("audit", "r2"), ("orders", "r3")]:
                rdkafka.produce(
                    topic,
                    value.encode(),
                    partition=0,
                    on_delivery=lambda err, msg: deliveries.append(
                        (msg.topic(), msg.value().decode(), err.code() if err else None)
                    ),
                )
            assert rdkafka.flush(30) == 0
        finally:
            close_producer(rdkafka)  # before the stack stops: no handle left retrying it
        assert sorted(deliveries) == [
            ("audit", "r2", confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED),
            ("orders", "r1", None),
            ("orders", "r3", None),
        ]

        broker = stack.broker()  # Tansu itself: what was written
        try:
            written = broker.call(
                fetch(12, 0, -1, [("orders", 0, 0), ("audit", 0, 0)], max_wait=500)
            )
        finally:
            broker.close()
        assert fetched(written) == [("orders", 0, 0, ["k1", "k3", "r1", "r3"]), ("audit", 0, 0, [])]
    finally:
        assert stack.stop() == 0, stack.server.stderr_text()


def test_kafka_python_consumer_refused_on_the_next_fetch_of_its_session(
    cluster: FakeCluster, server: KafkaServer
) -> None:
    """kafka-python fetches in an incremental fetch session; its READ ACL on `stream` is
    removed while it consumes: the next fetch of that session answers
    TOPIC_AUTHORIZATION_FAILED (raised by poll), and the broker's session forgets the
    partition (the upstream is not asked for it again)."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.errors import TopicAuthorizationFailedError

    # (Not idempotent: the fake broker has no InitProducerId.)
    producer = KafkaProducer(bootstrap_servers=server.kafka_address, enable_idempotence=False)
    sent = [producer.send("stream", f"m{i}".encode(), partition=0) for i in range(3)]
    assert [f.get(10).offset for f in sent] == [0, 1, 2]
    producer.close(10)
    consumer = KafkaConsumer(
        bootstrap_servers=server.kafka_address,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
    )
    try:
        consumer.assign([TopicPartition("stream", 0)])
        got: list[str] = []
        deadline = time.monotonic() + 20
        while len(got) < 3:
            assert time.monotonic() < deadline, got
            for batch in consumer.poll(timeout_ms=200).values():
                got += [r.value.decode() for r in batch]
        assert got == ["m0", "m1", "m2"]
        # The session settles: once the consumer's position stops moving, its incremental
        # fetches name no partition at all (the broker's session has it).
        deadline = time.monotonic() + 20
        while asked_fetch(cluster.asked(1)[-1])[0]:
            assert time.monotonic() < deadline
            assert consumer.poll(timeout_ms=100) == {}
        seen = len(cluster.asked(1))
        revoke(server, "User:ANONYMOUS", "stream", ALL)
        with pytest.raises(TopicAuthorizationFailedError):
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                consumer.poll(timeout_ms=100)
    finally:
        consumer.close()
        grant(server, "User:ANONYMOUS", "stream", ALL)
    after = new_asked(cluster, 1, seen)
    forgot = [i for i, b in enumerate(after) if ("stream", 0) in asked_fetch(b)[1]]
    assert forgot, "the broker's session never forgot the partition"
    first = after[forgot[0]]
    assert first.session_id > 0 and first.session_epoch > 0  # within the running session
    assert all(("stream", 0) not in [a[:2] for a in asked_fetch(b)[0]] for b in after[forgot[0] :])


def test_sasl_on_a_listener_without_sasl_is_not_forwarded(
    cluster: FakeCluster, client: KafkaClient
) -> None:
    """A client of this PLAINTEXT listener may not authenticate to the broker through it (the
    broker would then take it for someone): SaslHandshake and SaslAuthenticate are answered
    ILLEGAL_SASL_STATE, as Kafka answers them outside an exchange, and never forwarded."""
    resp = client.call(request(17, 1, mechanism="PLAIN"))
    assert (int(resp.error_code), resp.mechanisms) == (ILLEGAL_SASL_STATE, ())
    resp = client.call(request(36, 2, auth_bytes=b"\0alice\0secret"))
    assert int(resp.error_code) == ILLEGAL_SASL_STATE
    assert cluster.asked(17) == [] and cluster.asked(36) == []
