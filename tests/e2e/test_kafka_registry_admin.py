"""Topic administration over the Kafka protocol in coordinator-only mode
(kafka/registry_admin.py, docs/kafka.md): CreateTopics, CreatePartitions and DeleteTopics change
the coordinator's topic registry — the topics Metadata and gRPC ListTopics list — answered as
Kafka's controller answers them, with and without ACLs, and used by real clients' admin APIs
(confluent-kafka, kafka-python)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kafka_support import KafkaClient, KafkaServer, request
from test_security_matrix_admin import (
    DENIED,
    INVALID,
    SASL_SETTINGS,
    UNKNOWN,
    UNKNOWN_ID,
    created,
    new_topic,
    secured,
    signed_in,
)

from kip848.v1 import admin_pb2

NEITHER = "Neither topic name nor id were specified."
DUPLICATE = "Duplicate topic name."
NO_PLACEMENT = (
    "The coordinator's topic registry places no replicas: give a number of partitions instead"
    " of a manual assignment."
)
INVALID_PARTITIONS, INVALID_RF, INVALID_ASSIGNMENT, INVALID_CONFIG, EXISTS = 37, 38, 39, 40, 36


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServer]:
    s = KafkaServer(tmp_path_factory.mktemp("registry-admin") / "data", clock="system")
    try:
        yield s
    finally:
        assert s.stop() == 0, s.stderr_text()


@pytest.fixture
def client(server: KafkaServer) -> Iterator[KafkaClient]:
    c = server.client()
    yield c
    c.close()


def registry(server: KafkaServer) -> dict[str, int]:
    """The registry's topics and partition counts, as gRPC ListTopics lists them."""
    listed = server.admin.ListTopics(admin_pb2.ListTopicsRequest(), timeout=10)
    return {t.name: t.num_partitions for t in listed.topics}


def metadata(client: KafkaClient) -> dict[str, tuple[uuid.UUID, int]]:
    resp = client.call(request(3, 12, topics=None, allow_auto_topic_creation=False))
    return {t.name: (t.topic_id, len(t.partitions)) for t in resp.topics}


def spec(name: str, count: int = 1, rf: int = -1, **extra: Any) -> dict[str, Any]:
    return {"name": name, "num_partitions": count, "replication_factor": rf} | {
        "assignments": extra.get("assignments", []),
        "configs": extra.get("configs", []),
    }


def test_create_topics_as_kafkas_controller_answers(
    server: KafkaServer, client: KafkaClient
) -> None:
    """Kafka's order: the topics tried (created or refused with the registry's reason), then
    the names given twice, then the internal name. validate_only answers the same and creates
    nothing; a created topic's count and replication (1) are shown (v5+), its id (v7)."""
    manual = [{"partition_index": 0, "broker_ids": [0]}]
    topics = [
        spec("ct-rf3", 2, 3),
        spec("ct-twice"),
        spec("ct-configs", configs=[{"name": "retention.ms", "value": "1"}]),
        spec("ct-manual", -1, assignments=manual),
        spec("ct-manual-count", 2, assignments=manual),
        spec("ct-zero", 0),
        spec("ct-twice", 2),
        spec("__cluster_metadata"),
        spec("ct-ok", 3, 1),
        spec("ct-default", -1, -1),
        spec("bad name"),
    ]
    expected = [
        (
            "ct-rf3",
            INVALID_RF,
            "Unable to replicate the partition 3 time(s): the coordinator's topic registry"
            " keeps one replica of each partition.",
            -1,
            0,
            [],
        ),
        (
            "ct-configs",
            INVALID_CONFIG,
            "The coordinator's topic registry keeps no topic configs; asked: retention.ms.",
            -1,
            0,
            [],
        ),
        ("ct-manual", INVALID_ASSIGNMENT, NO_PLACEMENT, -1, 0, []),
        (
            "ct-manual-count",
            INVALID,
            "A manual partition assignment was specified, but numPartitions was not set to -1.",
            -1,
            0,
            [],
        ),
        (
            "ct-zero",
            INVALID_PARTITIONS,
            "Number of partitions was set to an invalid non-positive value.",
            -1,
            0,
            [],
        ),
        ("ct-ok", 0, None, 3, 0, []),
        ("ct-default", 0, None, 1, 0, []),
        (
            "bad name",
            17,
            'Topic name "bad name" is illegal, it contains a character other than ASCII'
            " alphanumerics, '.', '_' and '-'",
            -1,
            0,
            [],
        ),
        ("ct-twice", INVALID, DUPLICATE, -1, 0, []),
        (
            "__cluster_metadata",
            INVALID,
            "Creation of internal topic __cluster_metadata is prohibited.",
            -1,
            0,
            [],
        ),
    ]
    checked = client.call(request(19, 7, topics=topics, timeout=5000, validate_only=True))
    assert created(checked) == expected
    assert not {"ct-ok", "ct-default"} & set(registry(server))
    resp = client.call(request(19, 7, topics=topics, timeout=5000, validate_only=False))
    assert created(resp) == expected
    ids = {t.name: t.topic_id for t in resp.topics if t.topic_id is not None}
    assert set(ids) == {"ct-ok", "ct-default"}
    assert [(t.name, t.replication_factor) for t in resp.topics if not t.error_code] == [
        ("ct-ok", 1),
        ("ct-default", 1),
    ]
    assert {n: c for n, c in registry(server).items() if n.startswith("ct-")} == {
        "ct-ok": 3,
        "ct-default": 1,
    }
    listed = metadata(client)
    assert (listed["ct-ok"], listed["ct-default"]) == ((ids["ct-ok"], 3), (ids["ct-default"], 1))
    again = client.call(request(19, 4, topics=[spec("ct-ok", 3, 3)], timeout=5000))
    assert [(t.name, int(t.error_code), t.error_message) for t in again.topics] == [
        ("ct-ok", EXISTS, "Topic 'ct-ok' already exists.")  # before the factor, as Kafka
    ]


def test_create_partitions_as_kafkas_controller_answers(
    server: KafkaServer, client: KafkaClient
) -> None:
    """The names given twice first, then each topic: unknown, no increase, manual assignments
    (counted first), grown; validate_only grows nothing."""
    client.call(request(19, 7, topics=[spec("cp-a", 2), spec("cp-b", 2)], timeout=5000))
    grow = [
        ("cp-missing", 3, None),
        ("cp-a", 2, None),
        ("cp-twice", 2, None),
        ("cp-b", 1, None),
        ("cp-a2", 3, None),
        ("cp-twice", 3, None),
    ]

    def ask(entries: list[tuple[str, int, Any]], validate_only: bool) -> list[tuple[Any, ...]]:
        resp = client.call(
            request(
                37,
                3,
                topics=[{"name": n, "count": c, "assignments": a} for n, c, a in entries],
                timeout=5000,
                validate_only=validate_only,
            )
        )
        return [(r.name, int(r.error_code), r.error_message) for r in resp.results]

    assert ask(grow, False) == [
        ("cp-twice", INVALID, DUPLICATE),
        ("cp-missing", UNKNOWN, "The topic 'cp-missing' does not exist."),
        ("cp-a", INVALID_PARTITIONS, "Topic already has 2 partition(s)."),
        (
            "cp-b",
            INVALID_PARTITIONS,
            "The topic cp-b currently has 2 partition(s); 1 would not be an increase.",
        ),
        ("cp-a2", UNKNOWN, "The topic 'cp-a2' does not exist."),
    ]
    two = [{"broker_ids": [0]}, {"broker_ids": [0]}]
    assert ask([("cp-a", 5, two), ("cp-b", 4, two)], False) == [
        (
            "cp-a",
            INVALID_ASSIGNMENT,
            "Attempted to add 3 additional partition(s), but only 2 assignment(s) were specified.",
        ),
        ("cp-b", INVALID_ASSIGNMENT, NO_PLACEMENT),
    ]
    assert ask([("cp-a", 4, None)], True) == [("cp-a", 0, None)]
    assert metadata(client)["cp-a"][1] == 2
    assert ask([("cp-a", 4, None)], False) == [("cp-a", 0, None)]
    assert metadata(client)["cp-a"][1] == 4
    assert registry(server)["cp-a"] == 4


def test_delete_topics_by_name_and_by_id(server: KafkaServer, client: KafkaClient) -> None:
    """Kafka's ControllerApis.deleteTopics, answered in the request's order (Kafka shuffles
    its answer): neither a name nor an id, both, an id or a name given twice (answered once),
    an unknown id, a name whose id is also given (the name refused, neither deleted), by id
    and by name."""
    client.call(
        request(19, 7, topics=[spec(n) for n in ("dt-a", "dt-b", "dt-c", "dt-d")], timeout=5000)
    )
    ids = {n: i for n, (i, _c) in metadata(client).items()}
    nobody = uuid.UUID("00000000-0000-4000-8000-0000000000ff")
    entries = [
        {"name": None, "topic_id": None},
        {"name": "dt-a", "topic_id": ids["dt-a"]},
        {"name": None, "topic_id": ids["dt-b"]},
        {"name": None, "topic_id": nobody},
        {"name": None, "topic_id": ids["dt-b"]},
        {"name": "dt-c"},
        {"name": None, "topic_id": ids["dt-c"]},
        {"name": "dt-d"},
        {"name": None, "topic_id": ids["dt-a"]},
        {"name": "dt-gone"},
        {"name": "dt-gone"},
    ]
    resp = client.call(request(20, 6, topics=entries, timeout=5000))
    assert [(t.name, t.topic_id, int(t.error_code), t.error_message) for t in resp.responses] == [
        (None, None, INVALID, NEITHER),
        ("dt-a", ids["dt-a"], INVALID, "You may not specify both topic name and topic id."),
        (None, ids["dt-b"], INVALID, "Duplicate topic id."),
        (None, nobody, UNKNOWN_ID, "This server does not host this topic ID."),
        (
            "dt-c",
            ids["dt-c"],
            INVALID,
            "The provided topic name maps to an ID that was already supplied.",
        ),
        ("dt-d", ids["dt-d"], 0, None),
        ("dt-a", ids["dt-a"], 0, None),
        ("dt-gone", None, INVALID, DUPLICATE),
    ]
    left = {n for n in registry(server) if n.startswith("dt-")}
    assert left == {"dt-b", "dt-c"}
    resp = client.call(request(20, 5, topic_names=["dt-b", "dt-missing"], timeout=5000))
    assert [(t.name, int(t.error_code), t.error_message) for t in resp.responses] == [
        ("dt-b", 0, None),
        ("dt-missing", UNKNOWN, "The topic 'dt-missing' does not exist."),
    ]
    assert {n for n in registry(server) if n.startswith("dt-")} == {"dt-c"}


# ---------------------------------------------------------------- with ACLs


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServer]:
    s = KafkaServer(
        tmp_path_factory.mktemp("registry-acls") / "data", *SASL_SETTINGS, clock="system"
    )
    try:
        secured(s)  # bob's and alice's ACLs (test_security_matrix_admin)
        made = s.admin.CreateTopics(
            admin_pb2.CreateTopicsRequest(
                topics=[
                    admin_pb2.CreateTopicsRequest.CreatableTopic(name=n, num_partitions=2)
                    for n in ("secret", "seen-b", "own-del", "own-del2", "own-grow")
                ]
            ),
            timeout=10,
        )
        assert [t.error_code for t in made.topics] == [0] * 5
        yield s
    finally:
        assert s.stop() == 0, s.stderr_text()


@pytest.fixture
def login(secure: KafkaServer) -> Iterator[Callable[[str], KafkaClient]]:
    opened: list[KafkaClient] = []

    def open_as(user: str) -> KafkaClient:
        opened.append(signed_in(secure, user))
        return opened[-1]

    yield open_as
    for c in opened:
        c.close()


def test_with_acls_the_registry_answers_as_a_guarded_broker(
    secure: KafkaServer, login: Callable[[str], KafkaClient]
) -> None:
    """The same answers as in front of a broker (test_security_matrix_admin): CREATE on the
    cluster or each topic, the configs shown only with DESCRIBE_CONFIGS; DELETE, a missing
    topic the client may describe UNKNOWN_TOPIC_OR_PARTITION; by id, the name told only to
    who may describe it; ALTER for new partitions. alice's DELETE on the cluster deletes any
    topic."""
    bob, alice = login("bob"), login("alice")
    topics = [new_topic(n, 2) for n in ("secret-new", "own-new", "seen-new", "plain-new")]
    resp = bob.call(request(19, 7, topics=topics, timeout=5000, validate_only=False))
    assert created(resp) == [
        ("own-new", 0, None, 2, 0, []),
        ("plain-new", 0, None, -1, DENIED, []),
        ("secret-new", DENIED, "Authorization failed.", -1, 0, []),
        ("seen-new", DENIED, "Authorization failed.", -1, 0, []),
    ]
    ids = {n: i for n, (i, _c) in metadata(alice).items()}
    resp = bob.call(
        request(20, 4, topic_names=["secret", "own-del", "seen-missing", "seen-b"], timeout=5000)
    )
    assert [(t.name, int(t.error_code)) for t in resp.responses] == [
        ("secret", DENIED),
        ("own-del", 0),
        ("seen-missing", UNKNOWN),
        ("seen-b", DENIED),
    ]
    nobody = uuid.UUID("00000000-0000-4000-8000-0000000000ff")
    resp = bob.call(
        request(
            20,
            6,
            topics=[{"name": None, "topic_id": i} for i in (ids["secret"], ids["seen-b"], nobody)]
            + [{"name": "own-del2"}],
            timeout=5000,
        )
    )
    assert [(t.name, t.topic_id, int(t.error_code), t.error_message) for t in resp.responses] == [
        (None, ids["secret"], DENIED, "Topic authorization failed."),
        ("seen-b", ids["seen-b"], DENIED, "Topic authorization failed."),
        (None, nobody, UNKNOWN_ID, "This server does not host this topic ID."),
        ("own-del2", ids["own-del2"], 0, None),
    ]
    resp = bob.call(
        request(
            37,
            3,
            topics=[
                {"name": n, "count": c, "assignments": None}
                for n, c in (("own-grow", 3), ("seen-b", 3), ("secret", 3))
            ],
            timeout=5000,
            validate_only=False,
        )
    )
    assert [(t.name, int(t.error_code), t.error_message) for t in resp.results] == [
        ("seen-b", DENIED, None),
        ("secret", DENIED, None),
        ("own-grow", 0, None),
    ]
    assert registry(secure) == {
        "secret": 2,
        "seen-b": 2,
        "own-grow": 3,
        "own-new": 2,
        "plain-new": 2,
    }
    resp = alice.call(request(20, 4, topic_names=["secret", "plain-new"], timeout=5000))
    assert [(t.name, int(t.error_code)) for t in resp.responses] == [
        ("secret", 0),
        ("plain-new", 0),
    ]
    assert set(registry(secure)) == {"seen-b", "own-grow", "own-new"}


# ---------------------------------------------------------------- real clients


def test_real_clients_administer_the_registry(server: KafkaServer) -> None:
    """confluent-kafka's AdminClient creates (validate_only first), grows and deletes topics
    and sees the registry's refusals as Kafka errors; kafka-python's KafkaAdminClient creates
    and deletes."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    admin = AdminClient({"bootstrap.servers": server.kafka_address})

    def outcome(futures: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, f in futures.items():
            try:
                f.result(timeout=15)
                out[name] = "ok"
            except KafkaException as exc:
                err: KafkaError = exc.args[0]
                out[name] = err.code()
        return out

    wanted = [NewTopic("rc-a", 3), NewTopic("rc-b", 2, 3)]
    assert outcome(admin.create_topics(wanted, validate_only=True)) == {
        "rc-a": "ok",
        "rc-b": KafkaError.INVALID_REPLICATION_FACTOR,
    }
    assert "rc-a" not in registry(server)
    assert outcome(admin.create_topics(wanted)) == {
        "rc-a": "ok",
        "rc-b": KafkaError.INVALID_REPLICATION_FACTOR,
    }
    listed = admin.list_topics(timeout=10).topics
    assert len(listed["rc-a"].partitions) == 3 and "rc-b" not in listed
    assert outcome(admin.create_partitions([NewPartitions("rc-a", 5)])) == {"rc-a": "ok"}
    assert outcome(admin.create_partitions([NewPartitions("rc-a", 5)])) == {
        "rc-a": KafkaError.INVALID_PARTITIONS
    }
    assert registry(server)["rc-a"] == 5
    assert outcome(admin.delete_topics(["rc-a", "rc-none"])) == {
        "rc-a": "ok",
        "rc-none": KafkaError.UNKNOWN_TOPIC_OR_PART,
    }
    assert "rc-a" not in registry(server)

    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KpNewTopic
    from kafka.errors import TopicAlreadyExistsError

    kp = KafkaAdminClient(bootstrap_servers=server.kafka_address, request_timeout_ms=15000)
    try:
        kp.create_topics([KpNewTopic("rc-kp", 4, 1)])
        assert registry(server)["rc-kp"] == 4
        with pytest.raises(TopicAlreadyExistsError):
            kp.create_topics([KpNewTopic("rc-kp", 4, 1)])
        kp.delete_topics(["rc-kp"])
        assert "rc-kp" not in registry(server)
    finally:
        kp.close()


def test_validate_only_over_grpc_and_the_cli(server: KafkaServer) -> None:
    """gRPC CreateTopics / CreatePartitions take validate_only too (``kip848 topics create`` and
    ``add-partitions --validate-only``): answered as the change would be, nothing changed."""
    from conftest import run_cli

    Topic = admin_pb2.CreateTopicsRequest.CreatableTopic
    asked = [Topic(name="vo-a", num_partitions=3), Topic(name="vo-b", num_partitions=0)]
    resp = server.admin.CreateTopics(
        admin_pb2.CreateTopicsRequest(topics=asked, validate_only=True), timeout=10
    )
    assert [(t.name, t.error_code, t.num_partitions) for t in resp.topics] == [
        ("vo-a", 0, 3),
        ("vo-b", INVALID_PARTITIONS, 0),
    ]
    assert resp.topics[0].topic_id != bytes(16) and resp.topics[1].topic_id == bytes(16)
    assert "vo-a" not in registry(server)
    flags = ("--bootstrap-server", server.grpc_address)
    out = run_cli("topics", "create", "vo-c", "--partitions", "2", "--validate-only", *flags)
    assert (out.returncode, out.stdout) == (
        0,
        "Validated topic vo-c (2 partitions; nothing created).\n",
    )
    assert "vo-c" not in registry(server)
    assert run_cli("topics", "create", "vo-c", "--partitions", "2", *flags).returncode == 0
    out = run_cli("topics", "add-partitions", "vo-c", "--count", "4", "--validate-only", *flags)
    assert (out.returncode, out.stdout) == (
        0,
        "Validated: topic vo-c can have 4 partitions (nothing changed).\n",
    )
    out = run_cli("topics", "add-partitions", "vo-c", "--count", "1", "--validate-only", *flags)
    assert out.returncode == 1
    assert "The topic vo-c currently has 2 partition(s); 1 would not be an increase." in out.stderr
    Grow = admin_pb2.CreatePartitionsRequest.CreatePartitionsTopic
    resp = server.admin.CreatePartitions(
        admin_pb2.CreatePartitionsRequest(topics=[Grow(name="vo-c", count=5)], validate_only=True),
        timeout=10,
    )
    assert [(r.name, r.error_code) for r in resp.results] == [("vo-c", 0)]
    assert registry(server)["vo-c"] == 2
