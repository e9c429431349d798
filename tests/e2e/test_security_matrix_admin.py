"""Authorization of every other API the Kafka listener forwards to an open broker
(kafka/admin_guard.py, txn_guard.py, describe_partitions.py; docs/security.md 8 and 8.1): topic
administration, DescribeTopicPartitions, configs, the cluster's administration, ACLs, the
transaction APIs, delegation tokens and share groups — each answered as Kafka answers it, and
the broker never asked for what the client may not do.

The broker is ``fake_upstream.FakeCluster(data=True, transactions=True)``, which keeps its
topics and transactions and every request it receives. The clients authenticate over
SASL_PLAINTEXT/PLAIN (the listener checks the credentials itself: no pass-through, so the
broker sees only the coordinator), with ``allow.everyone.if.no.acl.found=false``:

* ``User:bob`` may DESCRIBE the cluster; do everything on topics ``own-*``; DESCRIBE ``seen-*``;
  CREATE ``plain-*`` (not describe its configs); WRITE transactional id ``tx-bob``; everything
  on groups ``g-*``; DESCRIBE groups ``d-*``.
* ``User:alice`` may do everything; ``User:carol`` nothing.

Real clients in front of Tansu: confluent-kafka's AdminClient may not delete a topic (it
survives on the broker) nor create one, and a transactional producer without WRITE on its
transactional id is refused at ``init_transactions``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import join_request
from fake_upstream import CONFIGS, FakeCluster
from kafka.record.memory_records import MemoryRecordsBuilder
from kafka_support import KafkaClient, KafkaServer, KafkaStack, request
from test_sasl import add_user
from test_security_matrix_forwarded import grant

from kip848.v1 import (
    classic_group_pb2,
    classic_group_pb2_grpc,
    consumer_group_pb2,
    consumer_group_pb2_grpc,
    offsets_pb2,
    offsets_pb2_grpc,
)

TOPIC, GROUP, CLUSTER, TXN_ID = 2, 3, 4, 5
LITERAL, PREFIXED = 3, 4
ALL, CREATE, DESCRIBE, WRITE, ALLOW = 2, 5, 8, 4, 3
CLUSTER_NAME = "kafka-cluster"
DENIED, GROUP_DENIED, CLUSTER_DENIED, TXN_DENIED = 29, 30, 31, 53
OMITTED = -(2**31)
UNKNOWN, UNKNOWN_ID, INVALID, UNSUPPORTED = 3, 100, 42, 35
NOT_ATTEMPTED, TOKENS_NOT_ALLOWED = 55, 64
OWN_ID = uuid.UUID("00000000-0000-4000-8000-00000000a001")
SECRET_ID = uuid.UUID("00000000-0000-4000-8000-00000000a002")
SEEN_ID = uuid.UUID("00000000-0000-4000-8000-00000000a003")
DEL_ID = uuid.UUID("00000000-0000-4000-8000-00000000a004")
NOBODY_ID = uuid.UUID("00000000-0000-4000-8000-00000000a0ff")
TOPICS = {
    "own-a": (OWN_ID, 2),
    "secret": (SECRET_ID, 2),
    "seen-b": (SEEN_ID, 1),
    "own-del": (uuid.UUID("00000000-0000-4000-8000-00000000a005"), 1),
    "own-del2": (DEL_ID, 1),
    "own-grow": (uuid.UUID("00000000-0000-4000-8000-00000000a006"), 1),
}
BOB_OWN_OPS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))  # every TOPIC operation
DESCRIBE_ONLY = 1 << DESCRIBE
ALICE_CLUSTER_OPS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))  # every CLUSTER operation
PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret"}
CLUSTER_MESSAGE = "Cluster authorization failed."

BOB_ACLS = [
    (CLUSTER, CLUSTER_NAME, LITERAL, DESCRIBE),
    (TOPIC, "own-", PREFIXED, ALL),
    (TOPIC, "seen-", PREFIXED, DESCRIBE),
    (TOPIC, "plain-", PREFIXED, CREATE),
    (TXN_ID, "tx-bob", LITERAL, WRITE),
    (GROUP, "g-", PREFIXED, ALL),
    (GROUP, "d-", PREFIXED, DESCRIBE),
]
ALICE_ACLS = [(t, "*" if t != CLUSTER else CLUSTER_NAME, LITERAL, ALL) for t in (2, 3, 4, 5)]


def secured(server: KafkaServer) -> None:
    """Users and ACLs (the gRPC caller, anonymous, is the super user that sets them up)."""
    for name, password in PASSWORDS.items():
        add_user(server.channel, name, password)
    for principal, acls in (("User:bob", BOB_ACLS), ("User:alice", ALICE_ACLS)):
        for rtype, name, pattern, op in acls:
            grant(server, principal, name, op, pattern, rtype)


SASL_SETTINGS = (
    "--kafka-security-protocol",
    "SASL_PLAINTEXT",
    "--set",
    "sasl.enabled.mechanisms=PLAIN",
    "--set",
    "allow.everyone.if.no.acl.found=false",
    "--set",
    "super.users=User:ANONYMOUS",  # the tests' gRPC calls (no Kafka client is anonymous)
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[FakeCluster]:
    c = FakeCluster(data=True, transactions=True, topics=TOPICS)
    c.add_node(1)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def server(cluster: FakeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServer]:
    s = KafkaServer(
        tmp_path_factory.mktemp("admin") / "data",
        "--kafka-upstream",
        cluster.nodes[1].address,
        *SASL_SETTINGS,
        clock="system",
    )
    try:
        secured(s)
        yield s
    finally:
        assert s.stop() == 0, s.stderr_text()


def signed_in(server: KafkaServer, user: str) -> KafkaClient:
    """A kio client authenticated as ``user`` (SaslHandshake v1 + SaslAuthenticate, PLAIN)."""
    c = server.client()
    assert int(c.call(request(17, 1, mechanism="PLAIN")).error_code) == 0
    token = f"\0{user}\0{PASSWORDS[user]}".encode()
    assert int(c.call(request(36, 2, auth_bytes=token)).error_code) == 0
    return c


@pytest.fixture
def login(server: KafkaServer) -> Iterator[Callable[[str], KafkaClient]]:
    """Opens clients signed in as a user (closed after the test)."""
    opened: list[KafkaClient] = []

    def open_as(user: str) -> KafkaClient:
        opened.append(signed_in(server, user))
        return opened[-1]

    yield open_as
    for c in opened:
        c.close()


@pytest.fixture
def bob(login: Callable[[str], KafkaClient]) -> KafkaClient:
    return login("bob")


@pytest.fixture
def alice(login: Callable[[str], KafkaClient]) -> KafkaClient:
    return login("alice")


def asked(cluster: FakeCluster, key: int, before: int) -> list[Any]:
    return cluster.asked(key)[before:]


# ---------------------------------------------------------------- topics


def new_topic(name: str, partitions: int = 1) -> dict[str, Any]:
    return {
        "name": name,
        "num_partitions": partitions,
        "replication_factor": 1,
        "assignments": [],
        "configs": [],
    }


def created(resp: Any) -> list[tuple[Any, ...]]:
    return [
        (
            t.name,
            int(t.error_code),
            t.error_message,
            t.num_partitions,
            int(t.topic_config_error_code),
            [(c.name, c.value) for c in t.configs or ()],
        )
        for t in resp.topics
    ]


def test_create_topics_per_topic(
    cluster: FakeCluster, bob: KafkaClient, alice: KafkaClient
) -> None:
    """CREATE on each topic (bob has none on the cluster): the allowed ones are created, the
    refused ones answered TOPIC_AUTHORIZATION_FAILED after them and never reach the broker; a
    created topic's configs are shown only to a client that may DESCRIBE_CONFIGS it; a request
    with no allowed topic is answered here; alice (CREATE on the cluster) goes as she came."""
    seen = len(cluster.asked(19))
    topics = ["secret-new", "own-new", "seen-new", "plain-new"]
    resp = bob.call(
        request(19, 7, topics=[new_topic(n, 2) for n in topics], timeout=5000, validate_only=False)
    )
    config = [(c["name"], c["value"]) for c in CONFIGS]
    assert created(resp) == [
        ("own-new", 0, None, 2, 0, config),
        ("plain-new", 0, None, 2, DENIED, []),
        ("secret-new", DENIED, "Authorization failed.", -1, 0, []),
        ("seen-new", DENIED, "Authorization failed.", -1, 0, []),
    ]
    assert [[t.name for t in b.topics] for b in asked(cluster, 19, seen)] == [
        ["own-new", "plain-new"]
    ]
    assert {"own-new", "plain-new"} <= set(cluster.topics)
    assert not {"secret-new", "seen-new"} & set(cluster.topics)
    resp = bob.call(
        request(19, 4, topics=[new_topic("secret-2")], timeout=5000, validate_only=False)
    )
    assert [(t.name, int(t.error_code)) for t in resp.topics] == [("secret-2", DENIED)]
    assert len(cluster.asked(19)) == seen + 1
    resp = alice.call(request(19, 7, topics=[new_topic("secret-alice")], timeout=5000))
    assert created(resp) == [("secret-alice", 0, None, 1, 0, config)]
    assert [t.name for t in cluster.asked(19)[-1].topics] == ["secret-alice"]


def test_delete_topics_by_name_and_by_id(cluster: FakeCluster, bob: KafkaClient) -> None:
    """DELETE on each topic. By name (v4): refused TOPIC_AUTHORIZATION_FAILED, a missing topic
    the client may describe UNKNOWN_TOPIC_OR_PARTITION. By id (v6): an id nobody knows
    UNKNOWN_TOPIC_ID, a refused one TOPIC_AUTHORIZATION_FAILED named only when the client may
    describe it. Only the allowed topics reach the broker; the others survive."""
    seen = len(cluster.asked(20))
    resp = bob.call(
        request(20, 4, topic_names=["secret", "own-del", "seen-missing", "seen-b"], timeout=5000)
    )
    assert [(t.name, int(t.error_code)) for t in resp.responses] == [
        ("own-del", 0),
        ("secret", DENIED),
        ("seen-missing", UNKNOWN),
        ("seen-b", DENIED),
    ]
    ids = [SECRET_ID, SEEN_ID, NOBODY_ID]
    resp = bob.call(
        request(
            20,
            6,
            topics=[{"name": None, "topic_id": i} for i in ids] + [{"name": "own-del2"}],
            timeout=5000,
        )
    )
    assert [(t.name, t.topic_id, int(t.error_code), t.error_message) for t in resp.responses] == [
        ("own-del2", DEL_ID, 0, None),
        (None, SECRET_ID, DENIED, "Topic authorization failed."),
        ("seen-b", SEEN_ID, DENIED, "Topic authorization failed."),
        (None, NOBODY_ID, UNKNOWN_ID, "This server does not host this topic ID."),
    ]
    bodies = asked(cluster, 20, seen)
    assert [list(bodies[0].topic_names), [t.name for t in bodies[1].topics]] == [
        ["own-del"],
        ["own-del2"],
    ]
    assert {"secret", "seen-b"} <= set(cluster.topics)
    assert not {"own-del", "own-del2"} & set(cluster.topics)
    resp = bob.call(request(20, 4, topic_names=["secret", "secret"], timeout=5000))
    assert [(t.name, int(t.error_code)) for t in resp.responses] == [("secret", INVALID)]
    assert len(cluster.asked(20)) == seen + 2


def test_create_partitions_per_topic(cluster: FakeCluster, bob: KafkaClient) -> None:
    seen = len(cluster.asked(37))
    grow = [("own-grow", 3), ("seen-b", 2), ("secret", 3)]
    resp = bob.call(
        request(
            37,
            3,
            topics=[{"name": n, "count": c, "assignments": None} for n, c in grow],
            timeout=5000,
            validate_only=False,
        )
    )
    assert [(t.name, int(t.error_code), t.error_message) for t in resp.results] == [
        ("own-grow", 0, None),
        ("seen-b", DENIED, None),
        ("secret", DENIED, None),
    ]
    assert [[t.name for t in b.topics] for b in asked(cluster, 37, seen)] == [["own-grow"]]
    assert (cluster.topics["own-grow"][1], cluster.topics["secret"][1]) == (3, 2)


# ---------------------------------------------------------------- DescribeTopicPartitions


def describe(client: KafkaClient, names: list[str], limit: int, cursor: Any = None) -> Any:
    return client.call(
        request(
            75,
            0,
            topics=[{"name": n} for n in names],
            response_partition_limit=limit,
            cursor=cursor,
        )
    )


def described(resp: Any) -> list[tuple[Any, ...]]:
    return [
        (
            t.name,
            int(t.error_code),
            t.topic_id,
            [p.partition_index for p in t.partitions],
            t.topic_authorized_operations,
        )
        for t in resp.topics
    ]


def test_describe_topic_partitions_named(cluster: FakeCluster, bob: KafkaClient) -> None:
    """Named topics: the ones the client may not describe TOPIC_AUTHORIZATION_FAILED, without
    their id, after the broker's and never asked of it; the client's authorized operations;
    a cursor on a refused topic moves to the next allowed one."""
    seen = len(cluster.asked(75))
    resp = describe(bob, ["seen-b", "secret", "own-a", "ghost"], 100)
    omitted = -(2**31)
    assert described(resp) == [
        ("own-a", 0, OWN_ID, [0, 1], BOB_OWN_OPS),
        ("seen-b", 0, SEEN_ID, [0], DESCRIBE_ONLY),
        ("ghost", DENIED, None, [], omitted),
        ("secret", DENIED, None, [], omitted),
    ]
    resp = describe(bob, ["secret", "seen-b"], 100, {"topic_name": "secret", "partition_index": 1})
    assert described(resp) == [
        ("seen-b", 0, SEEN_ID, [0], DESCRIBE_ONLY),
        ("secret", DENIED, None, [], omitted),
    ]
    bodies = asked(cluster, 75, seen)
    assert [([t.name for t in b.topics], b.cursor and b.cursor.topic_name) for b in bodies] == [
        (["own-a", "seen-b"], None),
        (["seen-b"], "seen-b"),
    ]
    resp = describe(bob, ["secret"], 100)
    assert described(resp) == [("secret", DENIED, None, [], omitted)]
    assert len(cluster.asked(75)) == seen + 2


def test_describe_topic_partitions_pages_never_name_a_refused_topic(
    cluster: FakeCluster, bob: KafkaClient
) -> None:
    """All topics, one partition a page: the pages hold exactly the partitions of the topics
    bob may describe, in order, and no cursor names another topic (the broker's cursor on
    `secret` is read past)."""
    with cluster.lock:
        expected = [
            (n, p)
            for n, (_i, count) in sorted(cluster.topics.items())
            if n.startswith(("own-", "seen-"))
            for p in range(count)
        ]
    got: list[tuple[str, int]] = []
    cursors: list[str] = []
    cursor = None
    for _ in range(len(expected) + 1):
        resp = describe(bob, [], 1, cursor)
        got += [(t.name, p.partition_index) for t in resp.topics for p in t.partitions]
        assert all(int(t.error_code) == 0 for t in resp.topics)
        cursor = resp.next_cursor
        if cursor is None:
            break
        cursors.append(cursor.topic_name)
    assert got == expected
    assert cursors and all(c.startswith(("own-", "seen-")) for c in cursors)
    assert "secret" in [b.cursor.topic_name for b in cluster.asked(75) if b.cursor]


# ---------------------------------------------------------------- configs


def resources(*items: tuple[int, str]) -> list[dict[str, Any]]:
    return [
        {"resource_type": t, "resource_name": n, "configuration_keys": None, "configs": []}
        for t, n in items
    ]


def test_configs_of_the_brokers_resources_per_resource(
    cluster: FakeCluster, bob: KafkaClient, alice: KafkaClient
) -> None:
    """TOPIC resources need DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic, BROKER ones on the
    cluster; the refused ones are answered here (in the request's place), the GROUP ones are
    ours, only the allowed rest reaches the broker."""
    seen = {k: len(cluster.asked(k)) for k in (32, 33, 44)}
    wanted = resources((TOPIC, "own-a"), (TOPIC, "secret"), (CLUSTER, "1"), (32, "g-1"))
    resp = bob.call(request(32, 4, resources=wanted, include_synonyms=False))
    assert [(r.resource_name, int(r.error_code), r.error_message) for r in resp.results] == [
        ("own-a", 0, None),
        ("secret", DENIED, "Topic authorization failed."),
        ("1", CLUSTER_DENIED, CLUSTER_MESSAGE),
        ("g-1", 0, None),
    ]
    changes = resources((TOPIC, "seen-b"), (TOPIC, "own-a"))
    resp = bob.call(request(44, 1, resources=changes, validate_only=True))
    assert [(r.resource_name, int(r.error_code)) for r in resp.responses] == [
        ("seen-b", DENIED),
        ("own-a", 0),
    ]
    resp = bob.call(request(33, 2, resources=resources((4, "1"), (TOPIC, "own-a"))))
    assert sorted((r.resource_name, int(r.error_code)) for r in resp.responses) == [
        ("1", CLUSTER_DENIED),
        ("own-a", 0),
    ]
    for key in (32, 44, 33):
        bodies = asked(cluster, key, seen[key])
        assert [[r.resource_name for r in b.resources] for b in bodies] == [["own-a"]], key
    resp = alice.call(request(32, 4, resources=resources((CLUSTER, "1")), include_synonyms=False))
    assert [(r.resource_name, int(r.error_code)) for r in resp.results] == [("1", 0)]


# ---------------------------------------------------------------- the cluster

CLUSTER_APIS: dict[int, tuple[int, dict[str, Any], bool, Any]] = {
    # key: (version, request, allowed for bob (DESCRIBE on the cluster), the refusal's shape)
    27: (
        1,
        {
            "markers": [
                {
                    "producer_id": 7,
                    "producer_epoch": 0,
                    "transaction_result": False,
                    "topics": [{"name": "own-a", "partition_indexes": [0, 1]}],
                    "coordinator_epoch": 0,
                }
            ]
        },
        False,
        lambda r: [
            (m.producer_id, t.name, [(p.partition_index, int(p.error_code)) for p in t.partitions])
            for m in r.markers
            for t in m.topics
        ],
    ),
    34: (
        2,
        {"dirs": [{"path": "/d", "topics": [{"name": "own-a", "partitions": [1]}]}]},
        False,
        lambda r: [
            (t.topic_name, [(p.partition_index, int(p.error_code)) for p in t.partitions])
            for t in r.results
        ],
    ),
    35: (4, {"topics": None}, True, None),
    43: (
        2,
        {"election_type": 0, "topic_partitions": [{"topic": "own-a", "partitions": [0]}]},
        False,
        lambda r: (
            int(r.error_code),
            [
                (t.topic, [(p.partition_id, int(p.error_code)) for p in t.partition_result])
                for t in r.replica_election_results
            ],
        ),
    ),
    45: (
        0,
        {"topics": [{"name": "own-a", "partitions": [{"partition_index": 0, "replicas": [1]}]}]},
        False,
        lambda r: (
            int(r.error_code),
            r.error_message,
            [(t.name, [int(p.error_code) for p in t.partitions]) for t in r.responses],
        ),
    ),
    46: (0, {"topics": None}, True, None),
    48: (1, {"components": [], "strict": False}, False, lambda r: (int(r.error_code), r.entries)),
    49: (
        1,
        {"entries": [{"entity": [{"entity_type": "user", "entity_name": "bob"}], "ops": []}]},
        False,
        lambda r: [
            (int(e.error_code), [(x.entity_type, x.entity_name) for x in e.entity])
            for e in r.entries
        ],
    ),
    55: (2, {"topics": []}, True, None),
    57: (1, {"feature_updates": []}, False, lambda r: (int(r.error_code), r.error_message)),
    64: (0, {"broker_id": 1}, False, lambda r: (int(r.error_code), r.error_message)),
    74: (0, {}, False, lambda r: int(r.error_code)),
    80: (0, {"voter_id": 1}, False, lambda r: (int(r.error_code), r.error_message)),
}
REFUSED_AS = {
    27: [(7, "own-a", [(0, CLUSTER_DENIED), (1, CLUSTER_DENIED)])],
    34: [("own-a", [(1, CLUSTER_DENIED)])],
    43: (CLUSTER_DENIED, [("own-a", [(0, CLUSTER_DENIED)])]),
    45: (CLUSTER_DENIED, CLUSTER_MESSAGE, [("own-a", [CLUSTER_DENIED])]),
    48: (CLUSTER_DENIED, None),
    49: [(CLUSTER_DENIED, [("user", "bob")])],
    57: (CLUSTER_DENIED, CLUSTER_MESSAGE),
    64: (CLUSTER_DENIED, CLUSTER_MESSAGE),
    74: CLUSTER_DENIED,
    80: (CLUSTER_DENIED, CLUSTER_MESSAGE),
}


@pytest.mark.parametrize("key", sorted(CLUSTER_APIS))
def test_cluster_apis_need_their_operation_on_the_cluster(
    cluster: FakeCluster, bob: KafkaClient, alice: KafkaClient, key: int
) -> None:
    """bob may DESCRIBE the cluster: DescribeLogDirs, ListPartitionReassignments and
    DescribeQuorum reach the broker; every other cluster API (ALTER, DESCRIBE_CONFIGS,
    ALTER_CONFIGS, CLUSTER_ACTION) is answered CLUSTER_AUTHORIZATION_FAILED in the API's own
    shape and never reaches it; alice (everything) gets it forwarded."""
    version, fields, allowed, shape = CLUSTER_APIS[key]
    seen = len(cluster.asked(key))
    resp = bob.call(request(key, version, **fields))
    if allowed:
        assert len(cluster.asked(key)) == seen + 1
        return
    assert shape(resp) == REFUSED_AS[key]
    assert len(cluster.asked(key)) == seen
    alice.call(request(key, version, **fields))
    assert len(cluster.asked(key)) == seen + 1


def test_acl_requests_for_the_broker_need_the_cluster(
    cluster: FakeCluster, bob: KafkaClient, alice: KafkaClient
) -> None:
    """The broker's ACLs (TOPIC here) through the listener: bob may DESCRIBE the cluster, so
    DescribeAcls is forwarded, not CreateAcls/DeleteAcls (ALTER): CLUSTER_AUTHORIZATION_FAILED
    per entry, nothing changed at the broker; alice's go."""
    binding = {
        "resource_type": TOPIC,
        "resource_name": "own-a",
        "resource_pattern_type": LITERAL,
        "principal": "User:dave",
        "host": "*",
        "operation": DESCRIBE,
        "permission_type": ALLOW,
    }
    resp = bob.call(request(30, 3, creations=[binding]))
    assert [int(r.error_code) for r in resp.results] == [CLUSTER_DENIED]
    flt = {
        "resource_type_filter": TOPIC,
        "resource_name_filter": "own-a",
        "pattern_type_filter": LITERAL,
        "principal_filter": None,
        "host_filter": None,
        "operation": 1,
        "permission_type": 1,
    }
    resp = bob.call(request(31, 3, filters=[flt]))
    assert [int(r.error_code) for r in resp.filter_results] == [CLUSTER_DENIED]
    assert cluster.asked(30) == [] and cluster.asked(31) == []
    assert int(bob.call(request(29, 3, **flt)).error_code) == 0
    assert len(cluster.asked(29)) == 1
    assert [int(r.error_code) for r in alice.call(request(30, 3, creations=[binding])).results] == [
        0
    ]
    assert len(cluster.asked(30)) == 1 and len(cluster.acls) == 1


def test_authorized_operations_are_the_clients(bob: KafkaClient, alice: KafkaClient) -> None:
    """Metadata and DescribeCluster: the operations the client may do, not the coordinator's
    (whatever the broker says)."""
    resp = bob.call(
        request(
            3,
            12,
            topics=[{"name": "own-a"}, {"name": "seen-b"}],
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=True,
        )
    )
    assert [(t.name, t.topic_authorized_operations) for t in resp.topics] == [
        ("own-a", BOB_OWN_OPS),
        ("seen-b", DESCRIBE_ONLY),
    ]
    ask = request(60, 1, include_cluster_authorized_operations=True, endpoint_type=1)
    assert bob.call(ask).cluster_authorized_operations == DESCRIBE_ONLY
    assert alice.call(ask).cluster_authorized_operations == ALICE_CLUSTER_OPS


def test_described_groups_carry_the_callers_operations(
    server: KafkaServer, bob: KafkaClient
) -> None:
    """DescribeGroups (v3+) and ConsumerGroupDescribe asked for authorized operations: each
    group described gets the caller's bit field (Kafka's ``authorizedOperations``); a refused
    group keeps "omitted", and so does every group when the request does not ask. Over gRPC
    (the super user here) the same fields."""
    groups = consumer_group_pb2_grpc.ConsumerGroupServiceStub(server.channel)
    for gid in ("g-ops", "d-ops"):
        joined = groups.ConsumerGroupHeartbeat(
            consumer_group_pb2.ConsumerGroupHeartbeatRequest(**join_request(gid, ["own-a"])),
            timeout=10,
        )
        assert joined.error_code == 0, joined
    names = ["g-ops", "d-ops", "x-ops"]

    def classic(include: bool) -> list[tuple[str, int, int]]:
        resp = bob.call(request(15, 5, groups=names, include_authorized_operations=include))
        return [(g.group_id, int(g.error_code), g.authorized_operations) for g in resp.groups]

    def consumer(include: bool) -> list[tuple[str, int, int]]:
        resp = bob.call(request(69, 0, group_ids=names, include_authorized_operations=include))
        return [(g.group_id, int(g.error_code), g.authorized_operations) for g in resp.groups]

    all_group_ops = sum(1 << op for op in (3, 6, 8, 10, 11))  # READ DELETE DESCRIBE *_CONFIGS
    for describe in (classic, consumer):  # the refused group first, as Kafka answers it
        assert describe(True) == [
            ("x-ops", GROUP_DENIED, OMITTED),
            ("g-ops", 0, all_group_ops),
            ("d-ops", 0, DESCRIBE_ONLY),
        ], describe
        assert describe(False) == [
            ("x-ops", GROUP_DENIED, OMITTED),
            ("g-ops", 0, OMITTED),
            ("d-ops", 0, OMITTED),
        ], describe
    described = groups.ConsumerGroupDescribe(
        consumer_group_pb2.ConsumerGroupDescribeRequest(
            group_ids=["g-ops"], include_authorized_operations=True
        ),
        timeout=10,
    )
    assert [(g.group_id, g.authorized_operations) for g in described.groups] == [
        ("g-ops", all_group_ops)
    ]
    # Over gRPC (Kafka's latest DescribeGroups): the consumer group is not a classic group, so
    # it has no operations (Kafka sets them on a group described without error); an
    # offsets-only group is an empty classic group and gets them.
    committed = offsets_pb2_grpc.OffsetServiceStub(server.channel).OffsetCommit(
        offsets_pb2.OffsetCommitRequest(
            group_id="s-ops",
            generation_id_or_member_epoch=-1,
            topics=[
                offsets_pb2.OffsetCommitRequest.Topic(
                    name="own-a",
                    partitions=[
                        offsets_pb2.OffsetCommitRequest.Partition(
                            partition_index=0, committed_offset=1
                        )
                    ],
                )
            ],
        ),
        timeout=10,
    )
    assert [p.error_code for t in committed.topics for p in t.partitions] == [0]
    classic_groups = classic_group_pb2_grpc.ClassicGroupServiceStub(server.channel)
    for include, expected in ((True, all_group_ops), (False, OMITTED)):
        answer = classic_groups.DescribeGroups(
            classic_group_pb2.DescribeGroupsRequest(
                group_ids=["d-ops", "s-ops"], include_authorized_operations=include
            ),
            timeout=10,
        )
        assert [
            (g.group_id, g.error_code, g.error_message, g.group_state, g.authorized_operations)
            for g in answer.groups
        ] == [
            ("d-ops", 69, "Group d-ops is not a classic group.", "Dead", OMITTED),
            ("s-ops", 0, "", "Empty", expected),
        ]


# ---------------------------------------------------------------- transactions


def txn_records(producer_id: int, epoch: int, *values: str) -> bytes:
    builder = MemoryRecordsBuilder(
        magic=2,
        compression_type=0,
        batch_size=1 << 20,
        transactional=True,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=0,
    )
    for i, value in enumerate(values):
        builder.append(timestamp=1000 + i, key=None, value=value.encode(), headers=[])
    builder.close()
    return bytes(builder.buffer())


def init(client: KafkaClient, transactional_id: str | None) -> Any:
    return client.call(
        request(22, 4, transactional_id=transactional_id, transaction_timeout=60_000)
    )


def add_partitions(client: KafkaClient, version: int, tid: str, pid: Any, parts: Any) -> Any:
    topics = [{"name": n, "partitions": p} for n, p in parts]
    if version >= 4:
        txn = {"transactional_id": tid, "producer_id": pid[0], "producer_epoch": pid[1]}
        return client.call(request(24, version, transactions=[{**txn, "topics": topics}]))
    return client.call(
        request(
            24,
            version,
            v3_and_below_transactional_id=tid,
            v3_and_below_producer_id=pid[0],
            v3_and_below_producer_epoch=pid[1],
            v3_and_below_topics=topics,
        )
    )


def added(resp: Any) -> list[tuple[str, list[tuple[int, int]]]]:
    return [
        (t.name, [(p.partition_index, int(p.partition_error_code)) for p in t.results_by_partition])
        for t in resp.results_by_topic_v3_and_below
    ]


def test_transaction_apis_need_the_transactional_id(
    cluster: FakeCluster,
    login: Callable[[str], KafkaClient],
    bob: KafkaClient,
    alice: KafkaClient,
) -> None:
    """WRITE on the transactional id for InitProducerId, EndTxn, AddPartitionsToTxn and
    transactional Produce; an idempotent producer needs WRITE on some topic (or IDEMPOTENT_WRITE
    on the cluster); DESCRIBE for FindCoordinator, DescribeTransactions (and the topics it
    shows) and ListTransactions. Nothing refused reaches the broker."""
    theirs = init(alice, "tx-alice")
    assert int(theirs.error_code) == 0
    mine = init(bob, "tx-bob")
    assert int(mine.error_code) == 0
    pid = (mine.producer_id, mine.producer_epoch)
    inits = len(cluster.asked(22))
    refused = init(bob, "tx-alice")
    assert (int(refused.error_code), refused.producer_id, refused.producer_epoch) == (
        TXN_DENIED,
        -1,
        -1,
    )
    assert int(init(bob, None).error_code) == 0  # WRITE on own-*: an idempotent producer
    assert int(init(login("carol"), None).error_code) == CLUSTER_DENIED
    assert len(cluster.asked(22)) == inits + 1  # bob's idempotent one only

    adds = len(cluster.asked(24))
    other = (theirs.producer_id, theirs.producer_epoch)
    resp = add_partitions(bob, 3, "tx-alice", other, [("own-a", [0])])
    assert added(resp) == [("own-a", [(0, TXN_DENIED)])]
    resp = add_partitions(bob, 3, "tx-bob", pid, [("own-a", [0]), ("secret", [1]), ("own-x", [0])])
    assert added(resp) == [
        ("own-a", [(0, NOT_ATTEMPTED)]),
        ("secret", [(1, DENIED)]),
        ("own-x", [(0, UNKNOWN)]),
    ]
    assert int(add_partitions(bob, 4, "tx-bob", pid, [("own-a", [0])]).error_code) == (
        CLUSTER_DENIED
    )
    assert len(cluster.asked(24)) == adds
    assert added(add_partitions(bob, 3, "tx-bob", pid, [("own-a", [0, 1])])) == [
        ("own-a", [(0, 0), (1, 0)])
    ]
    # alice (WRITE on every id) adds `secret` to bob's transaction: bob may not see it.
    assert added(add_partitions(alice, 3, "tx-bob", pid, [("secret", [0])])) == [
        ("secret", [(0, 0)])
    ]
    assert len(cluster.asked(24)) == adds + 2

    # Transactional Produce: refused for tx-alice (every partition), written for tx-bob.
    start = cluster.logs["own-a", 0].end
    for tid, code in (("tx-alice", TXN_DENIED), ("tx-bob", 0)):
        resp = bob.call(
            request(
                0,
                9,
                transactional_id=tid,
                acks=-1,
                timeout=5000,
                topic_data=[
                    {
                        "name": "own-a",
                        "partition_data": [{"index": 0, "records": txn_records(*pid, tid)}],
                    }
                ],
            )
        )
        assert [
            (t.name, p.index, int(p.error_code))
            for t in resp.responses
            for p in t.partition_responses
        ] == [("own-a", 0, code)]
    assert cluster.logs["own-a", 0].end == start + 1

    resp = bob.call(request(26, 3, transactional_id="tx-alice", **_pid(other), committed=True))
    assert int(resp.error_code) == TXN_DENIED

    # FindCoordinator for transactional ids: per key, in the request's order.
    resp = bob.call(request(10, 3, key="tx-alice", key_type=1))
    assert (int(resp.error_code), resp.error_message, resp.node_id) == (
        TXN_DENIED,
        "Transactional Id authorization failed.",
        -1,
    )
    finds = len(cluster.asked(10))
    resp = bob.call(request(10, 4, key_type=1, coordinator_keys=["tx-alice", "tx-bob"]))
    assert [(c.key, int(c.error_code), c.node_id >= 0) for c in resp.coordinators] == [
        ("tx-alice", TXN_DENIED, False),
        ("tx-bob", 0, True),
    ]
    assert [list(b.coordinator_keys) for b in asked(cluster, 10, finds)] == [["tx-bob"]]

    resp = bob.call(request(65, 0, transactional_ids=["tx-alice", "tx-bob"]))
    assert [
        (s.transactional_id, int(s.error_code), [(t.topic, list(t.partitions)) for t in s.topics])
        for s in resp.transaction_states
    ] == [("tx-alice", TXN_DENIED, []), ("tx-bob", 0, [("own-a", [0, 1])])]
    assert [list(b.transactional_ids) for b in cluster.asked(65)[-1:]] == [["tx-bob"]]
    listed = bob.call(request(66, 1, state_filters=[], producer_id_filters=[]))
    assert [s.transactional_id for s in listed.transaction_states] == ["tx-bob"]


def _pid(producer: Any) -> dict[str, Any]:
    return {"producer_id": producer[0], "producer_epoch": producer[1]}


# ---------------------------------------------------------------- never forwarded


def test_what_is_never_forwarded_while_guarded(
    cluster: FakeCluster, bob: KafkaClient, server: KafkaServer
) -> None:
    """Delegation tokens (a token would be the broker's for the coordinator's connection):
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED; share and streams groups: UNSUPPORTED_VERSION (per
    group for the describes); APIs between brokers are not even advertised."""
    resp = bob.call(request(38, 3, renewers=[]))
    assert (int(resp.error_code), resp.principal_name) == (TOKENS_NOT_ALLOWED, "bob")
    resp = bob.call(request(41, 3, owners=None))
    assert (int(resp.error_code), resp.tokens) == (TOKENS_NOT_ALLOWED, ())
    resp = bob.call(request(76, 1, group_id="g-share", member_id="m", member_epoch=0))
    assert int(resp.error_code) == UNSUPPORTED
    resp = bob.call(request(89, 0, group_ids=["g-s1", "g-s2"]))
    assert [(g.group_id, int(g.error_code)) for g in resp.groups] == [
        ("g-s1", UNSUPPORTED),
        ("g-s2", UNSUPPORTED),
    ]
    assert [cluster.asked(k) for k in (38, 41, 76, 89)] == [[], [], [], []]
    versions = server.client().call(
        request(18, 3, client_software_name="t", client_software_version="1")
    )
    offered = {int(k.api_key) for k in versions.api_keys}
    assert {19, 20, 75, 27} <= offered and not {52, 83} & offered


# ---------------------------------------------------------------- real clients


def test_real_clients_refused_as_by_kafka(tmp_path: Path) -> None:
    """In front of Tansu, bob (SASL/PLAIN) with confluent-kafka: AdminClient.delete_topics of a
    topic he may not delete fails TOPIC_AUTHORIZATION_FAILED and the topic survives on Tansu,
    his own is deleted; create_topics likewise; a transactional producer with a transactional
    id he may not write for is refused at init_transactions
    (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), one with his own commits."""
    from confluent_kafka import KafkaError, KafkaException, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    stack = KafkaStack(tmp_path, *SASL_SETTINGS)
    try:
        secured(stack.server)
        config = {
            "bootstrap.servers": stack.server.kafka_address,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "PLAIN",
            "sasl.username": "bob",
            "sasl.password": PASSWORDS["bob"],
        }
        broker = stack.broker()
        try:
            made = broker.call(
                request(
                    19,
                    7,
                    topics=[new_topic(n) for n in ("secret-t", "own-t")],
                    timeout=5000,
                    validate_only=False,
                )
            )
            assert [int(t.error_code) for t in made.topics] == [0, 0]
            admin = AdminClient(config)
            futures = admin.delete_topics(["secret-t", "own-t"], operation_timeout=10)
            with pytest.raises(KafkaException) as refused:
                futures["secret-t"].result(30)
            assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
            futures["own-t"].result(30)
            futures = admin.create_topics([NewTopic("secret-new", 1), NewTopic("own-new", 1)])
            with pytest.raises(KafkaException) as refused:
                futures["secret-new"].result(30)
            assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
            futures["own-new"].result(30)
            listed = broker.call(request(3, 12, topics=None, allow_auto_topic_creation=False))
            names = sorted(t.name for t in listed.topics)
            assert [n for n in names if n in ("secret-t", "own-t", "secret-new", "own-new")] == [
                "own-new",
                "secret-t",
            ]
        finally:
            broker.close()

        refused_producer = Producer({**config, "transactional.id": "tx-alice"})
        with pytest.raises(KafkaException) as failed:
            refused_producer.init_transactions(30)
        assert failed.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        producer = Producer({**config, "transactional.id": "tx-bob"})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce("own-new", b"v", partition=0)
        producer.commit_transaction(30)
    finally:
        # librdkafka's handles go before the listener, pass or fail (the ExceptionInfos above
        # keep this frame, and so the handles, alive in a reference cycle).
        refused_producer = producer = admin = None
        assert stack.stop() == 0, stack.server.stderr_text()
