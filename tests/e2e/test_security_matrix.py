"""Authorization matrix: every RPC and every served Kafka API x every column of principals, on
both listeners, asserting the answer and that a refused request changed nothing.

The coordinator is the real server (gRPC on h2, two Kafka listeners, the runtime) in this
process, so the test reads its whole state before and after each request (every shard's
snapshot: groups, offsets; the topics, the group configs, the ACLs, the users). Each column is a
principal and what it may do, and it authenticates for real: over gRPC with a bearer JWT signed
by the test's JWKS, over Kafka with SASL/SCRAM-SHA-256 (scramp as the client) on the
SASL_PLAINTEXT listener; the anonymous column sends no token and uses the PLAINTEXT listener.
Columns are data (:data:`COLUMNS`): an authentication mechanism adds its own (a wrong
password, an expired token) with its own way to connect.

The ACLs: ``User:alice`` may do everything (ALLOW ALL on GROUP ``*``, TOPIC ``*`` and the
cluster), ``User:admin`` is a super user (it sets up the state). Every resource thus has ACLs,
so ``User:bob`` and ``User:ANONYMOUS`` are refused everything (Kafka's semantics: with ACLs on
a resource, only they decide).
"""

from __future__ import annotations

import base64
import contextlib
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
import pytest
import scramp
from jwks import TokenIssuer
from kafka_support import KafkaClient, request
from serve_support import LoopThread

from coordinator.core.config import parse_config
from coordinator.runtime import CoordinatorRuntime, ManualClock
from coordinator.runtime.store import MemoryRecordStore
from coordinator.security import scram
from coordinator.security.authorizer import AuthorizerConfig
from coordinator.security.principal import KafkaPrincipal, user
from coordinator.server import services
from coordinator.server.app import CoordinatorServer, ServeOptions
from coordinator.server.kafka import wire
from coordinator.server.security_config import KafkaEndpoint, OAuthSettings, Security
from kip848.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    classic_group_pb2,
    classic_group_pb2_grpc,
    common_pb2,
    consumer_group_pb2,
    consumer_group_pb2_grpc,
    offsets_pb2,
    offsets_pb2_grpc,
    testing_pb2,
    testing_pb2_grpc,
)

T = TypeVar("T")
TIMEOUT = 10.0
TOPIC_AUTH, GROUP_AUTH, CLUSTER_AUTH = 29, 30, 31
AUTH_CODES = {TOPIC_AUTH, GROUP_AUTH, CLUSTER_AUTH}
ALL_ON = [(2, "*"), (3, "*"), (4, "kafka-cluster")]  # TOPIC *, GROUP *, the cluster


@dataclass(frozen=True)
class Column:
    """A principal and what it may do. ``principal`` None: the connection stays anonymous."""

    name: str
    principal: KafkaPrincipal | None
    allowed: bool


COLUMNS = [
    Column("allowed", user("alice"), True),
    Column("denied", user("bob"), False),
    Column("anonymous", None, False),
]


# ---------------------------------------------------------------- the server


def password_of(principal: KafkaPrincipal) -> str:
    return f"pw-{principal.name}"


class Coordinator:
    """The real server on 127.0.0.1:0 (gRPC, Kafka PLAINTEXT and SASL_PLAINTEXT), its loop in a
    thread; bearer tokens from ``issuer``; SASL sessions of ``reauth_ms`` (0: without an end)."""

    def __init__(self, issuer: TokenIssuer, reauth_ms: int = 0) -> None:
        self.issuer = issuer
        self.thread = LoopThread()

        async def start() -> CoordinatorServer:
            runtime = CoordinatorRuntime(
                config=parse_config({}), store=MemoryRecordStore(), clock=ManualClock(0)
            )
            endpoints = tuple(
                KafkaEndpoint(
                    name=name,
                    host="127.0.0.1",
                    port=0,
                    protocol=name,
                    mechanisms=("SCRAM-SHA-256",),
                    reauth_ms=reauth_ms,
                )
                for name in ("PLAINTEXT", "SASL_PLAINTEXT")
            )
            options = ServeOptions(
                listen="127.0.0.1:0",
                clock="manual",
                authorizer=AuthorizerConfig(super_users=frozenset({"User:admin"})),
                security=Security(kafka=endpoints, oauth=OAuthSettings(jwks_file=str(issuer.path))),
            )
            server = CoordinatorServer(runtime, options)
            await server.start()
            await server.load()
            return server

        self.server = self.run(start())
        self.grpc_address = self.server.address
        self.kafka = {name: address for name, _protocol, address in self.server.kafka_addresses}

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.thread.run(coro, TIMEOUT)

    def snapshot(self) -> dict[str, Any]:
        async def read() -> dict[str, Any]:
            runtime = self.server.runtime
            await runtime.flush()
            # Every shard's whole state (groups, classic groups, offsets), the topics, the group
            # configs, the ACLs and the users.
            return {
                "shards": [shard.snapshot() for shard in runtime.shards],
                "topics": runtime.registry.list_topics(),
                "group_configs": runtime.group_configs.snapshot(),
                "security": runtime.security.snapshot(),
            }

        return self.run(read())

    def kafka_client(self, principal: KafkaPrincipal | None) -> KafkaClient:
        """A Kafka connection: anonymous on the PLAINTEXT listener, or authenticated as
        ``principal`` with SASL/SCRAM-SHA-256 on the SASL_PLAINTEXT one."""
        if principal is None:
            return KafkaClient(self.kafka["PLAINTEXT"], client_id="matrix")
        client = KafkaClient(self.kafka["SASL_PLAINTEXT"], client_id="matrix")
        assert client.call(request(17, 1, mechanism="SCRAM-SHA-256")).error_code == 0
        scram_client = scramp.ScramClient(["SCRAM-SHA-256"], principal.name, password_of(principal))
        first = client.call(request(36, 2, auth_bytes=scram_client.get_client_first().encode()))
        assert first.error_code == 0, first.error_message
        scram_client.set_server_first(first.auth_bytes.decode())
        final = client.call(request(36, 2, auth_bytes=scram_client.get_client_final().encode()))
        assert final.error_code == 0, final.error_message
        scram_client.set_server_final(final.auth_bytes.decode())  # the server proved itself
        return client

    def stop(self) -> None:
        self.run(self.server.stop(1.0))
        self.thread.close()


@dataclass
class World:
    """What the set-up made (and what rows need)."""

    coordinator: Coordinator
    channel: grpc.Channel
    topic_ids: dict[str, bytes]
    member_id: str
    member_epoch: int


TOKENS: dict[str, str] = {}


def metadata(principal: KafkaPrincipal | None) -> list[tuple[str, str]]:
    """A call's metadata: a bearer token for ``principal`` (none: anonymous)."""
    if principal is None:
        return []
    return [("authorization", f"Bearer {TOKENS[principal.name]}")]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    issuer = TokenIssuer(tmp_path_factory.mktemp("jwks"))
    for name in ("admin", "alice", "bob", "carol"):
        TOKENS[name] = issuer.token(sub=name)
    coordinator = Coordinator(issuer)
    channel = grpc.insecure_channel(coordinator.grpc_address)
    try:
        yield _set_up(coordinator, channel)
    finally:
        channel.close()
        coordinator.stop()


def _set_up(coordinator: Coordinator, channel: grpc.Channel) -> World:
    md = metadata(user("admin"))
    admin = admin_pb2_grpc.AdminServiceStub(channel)
    topics = admin.CreateTopics(
        admin_pb2.CreateTopicsRequest(
            topics=[
                admin_pb2.CreateTopicsRequest.CreatableTopic(name=n, num_partitions=p)
                for n, p in [("orders", 3), ("doomed-topic", 1), ("grow", 1)]
            ]
        ),
        metadata=md,
        timeout=TIMEOUT,
    )
    assert [t.error_code for t in topics.topics] == [0, 0, 0]
    joined = consumer_group_pb2_grpc.ConsumerGroupServiceStub(channel).ConsumerGroupHeartbeat(
        _join(None), metadata=md, timeout=TIMEOUT
    )
    assert joined.error_code == 0
    offsets = offsets_pb2_grpc.OffsetServiceStub(channel)
    # Partitions 0 and 1: the OffsetDelete rows delete one each (gRPC 0, Kafka 1), so each
    # row's allowed call changes the state whatever ran before it (the row alone included).
    for group in ("simple", "doomed", "doomed2"):
        done = offsets.OffsetCommit(
            offsets_pb2.OffsetCommitRequest(
                group_id=group,
                topics=[
                    offsets_pb2.OffsetCommitRequest.Topic(
                        name="orders",
                        partitions=[
                            offsets_pb2.OffsetCommitRequest.Partition(
                                partition_index=p, committed_offset=7
                            )
                            for p in (0, 1)
                        ],
                    )
                ],
            ),
            metadata=md,
            timeout=TIMEOUT,
        )
        assert [p.error_code for t in done.topics for p in t.partitions] == [0, 0]
    creations = [
        admin_pb2.AclBinding(
            resource_type=rtype,
            resource_name=name,
            pattern_type=3,
            principal="User:alice",
            host="*",
            operation=2,  # ALL
            permission_type=3,
        )
        for rtype, name in ALL_ON
    ] + [
        # For the DeleteAcls rows (gRPC eve's, Kafka dave's) to delete whatever ran before.
        admin_pb2.AclBinding(
            resource_type=3,
            resource_name=name,
            pattern_type=3,
            principal=f"User:{who}",
            host="*",
            operation=3,
            permission_type=3,
        )
        for who, name in [("eve", "eve-group"), ("dave", "dave-old-group")]
    ]
    made = admin.CreateAcls(admin_pb2.CreateAclsRequest(creations=creations), metadata=md)
    assert [r.error_code for r in made.results] == [0] * len(creations)
    for name in ("carol", "alice", "bob"):  # Kafka's SASL/SCRAM checks against these
        salted = scram.salted_password(
            scram.ScramMechanism.SCRAM_SHA_256, password_of(user(name)), b"s" * 16, 4096
        )
        users = admin.AlterUserScramCredentials(
            admin_pb2.AlterUserScramCredentialsRequest(
                upsertions=[
                    admin_pb2.AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
                        name=name,
                        mechanism=1,
                        iterations=4096,
                        salt=b"s" * 16,
                        salted_password=salted,
                    )
                ]
            ),
            metadata=md,
        )
        assert [r.error_code for r in users.results] == [0]
    listed = admin.ListTopics(admin_pb2.ListTopicsRequest(), metadata=md)
    return World(
        coordinator=coordinator,
        channel=channel,
        topic_ids={t.name: t.topic_id for t in listed.topics},
        member_id=joined.member_id,
        member_epoch=joined.member_epoch,
    )


# ---------------------------------------------------------------- rows


@dataclass(frozen=True)
class Row:
    """One RPC: ``call(world, column)`` sends it and returns the answer; ``refused`` is the code
    a refused column gets (None: the answer is silently filtered — ``empty(answer)`` holds for
    a refused column and not for the allowed one); ``writes``: the allowed request changes
    state (proves that an unchanged state after a refusal means something)."""

    name: str
    call: Callable[[World, Column], Any]
    refused: int | None
    writes: bool = False
    empty: Callable[[Any], bool] | None = None


def grpc_row(
    name: str,
    stub: Callable[[grpc.Channel], Any],
    method: str,
    make: Callable[[World], Any],
    refused: int | None,
    **kw: Any,
) -> Row:
    def call(w: World, c: Column) -> Any:
        return getattr(stub(w.channel), method)(
            make(w), metadata=metadata(c.principal), timeout=TIMEOUT
        )

    return Row(f"grpc:{name}", call, refused, **kw)


def kafka_row(
    name: str,
    key: int,
    version: int,
    fields: Callable[[World], dict[str, Any]],
    refused: int | None,
    **kw: Any,
) -> Row:
    def call(w: World, c: Column) -> Any:
        client = w.coordinator.kafka_client(c.principal)
        try:
            return client.call(request(key, version, **fields(w)))
        finally:
            client.close()

    return Row(f"kafka:{name}", call, refused, **kw)


CG = consumer_group_pb2_grpc.ConsumerGroupServiceStub
ADMIN = admin_pb2_grpc.AdminServiceStub
OFFSETS = offsets_pb2_grpc.OffsetServiceStub
CLASSIC = classic_group_pb2_grpc.ClassicGroupServiceStub
TESTING = testing_pb2_grpc.TestingServiceStub


def _join(_w: World | None, group_id: str = "cg", topic: str = "orders") -> Any:
    return consumer_group_pb2.ConsumerGroupHeartbeatRequest(
        group_id=group_id,
        member_epoch=0,
        rebalance_timeout_ms=30_000,
        subscribed_topic_names=common_pb2.TopicNames(names=[topic]),
        topic_partitions=common_pb2.TopicPartitionsList(),
    )


def _commit(_w: World) -> Any:
    return offsets_pb2.OffsetCommitRequest(
        group_id="simple",
        topics=[
            offsets_pb2.OffsetCommitRequest.Topic(
                name="orders",
                partitions=[
                    offsets_pb2.OffsetCommitRequest.Partition(partition_index=1, committed_offset=9)
                ],
            )
        ],
    )


def _open_watch(w: World, group_id: str, member_id: str, md: list[tuple[str, str]]) -> Any:
    return CG(w.channel).ConsumerGroupWatch(
        consumer_group_pb2.ConsumerGroupWatchRequest(group_id=group_id, member_id=member_id),
        metadata=md,
        timeout=TIMEOUT,
    )


def _watch(w: World, c: Column) -> Any:
    stream = _open_watch(w, "cg", "no-such-member", metadata(c.principal))
    try:
        return next(iter(stream))
    finally:
        stream.cancel()


def _acl(principal: str, group: str) -> admin_pb2.AclBinding:
    return admin_pb2.AclBinding(
        resource_type=3,
        resource_name=group,
        pattern_type=3,
        principal=principal,
        host="*",
        operation=3,
        permission_type=3,
    )


def _upsert(name: str) -> Any:
    return admin_pb2.AlterUserScramCredentialsRequest(
        upsertions=[
            admin_pb2.AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
                name=name, mechanism=2, iterations=4096, salt=b"t" * 16, salted_password=b"x" * 64
            )
        ]
    )


def _no_groups(resp: Any) -> bool:
    groups = getattr(resp, "groups", None)
    return groups is not None and len(groups) == 0


def _no_topics(resp: Any) -> bool:
    return len(resp.topics) == 0


GRPC_ROWS = [
    grpc_row(
        "ConsumerGroupHeartbeat", CG, "ConsumerGroupHeartbeat", _join, GROUP_AUTH, writes=True
    ),
    grpc_row(
        "ConsumerGroupDescribe",
        CG,
        "ConsumerGroupDescribe",
        lambda w: consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=["cg"]),
        GROUP_AUTH,
    ),
    Row("grpc:ConsumerGroupWatch", _watch, GROUP_AUTH),
    grpc_row("OffsetCommit", OFFSETS, "OffsetCommit", _commit, GROUP_AUTH, writes=True),
    grpc_row(
        "OffsetFetch",
        OFFSETS,
        "OffsetFetch",
        lambda w: offsets_pb2.OffsetFetchRequest(
            groups=[offsets_pb2.OffsetFetchRequest.Group(group_id="cg")]
        ),
        GROUP_AUTH,
    ),
    grpc_row(
        "OffsetDelete",
        OFFSETS,
        "OffsetDelete",
        lambda w: offsets_pb2.OffsetDeleteRequest(
            group_id="simple",
            topics=[offsets_pb2.OffsetDeleteRequest.Topic(name="orders", partition_indexes=[0])],
        ),
        GROUP_AUTH,
        writes=True,
    ),
    grpc_row(
        "ListGroups",
        ADMIN,
        "ListGroups",
        lambda w: admin_pb2.ListGroupsRequest(),
        None,
        empty=_no_groups,
    ),
    grpc_row(
        "DeleteGroups",
        ADMIN,
        "DeleteGroups",
        lambda w: admin_pb2.DeleteGroupsRequest(group_ids=["doomed"]),
        GROUP_AUTH,
        writes=True,
    ),
    grpc_row(
        "DescribeConfigs",
        ADMIN,
        "DescribeConfigs",
        lambda w: admin_pb2.DescribeConfigsRequest(
            resources=[
                admin_pb2.DescribeConfigsRequest.Resource(resource_type=16, resource_name="cg")
            ]
        ),
        GROUP_AUTH,
    ),
    grpc_row(
        "IncrementalAlterConfigs",
        ADMIN,
        "IncrementalAlterConfigs",
        lambda w: admin_pb2.IncrementalAlterConfigsRequest(
            resources=[
                admin_pb2.IncrementalAlterConfigsRequest.Resource(
                    resource_type=16,
                    resource_name="cg",
                    configs=[
                        admin_pb2.IncrementalAlterConfigsRequest.AlterableConfig(
                            name="consumer.session.timeout.ms", config_operation=0, value="50000"
                        )
                    ],
                )
            ]
        ),
        GROUP_AUTH,
        writes=True,
    ),
    grpc_row(
        "CreateTopics",
        ADMIN,
        "CreateTopics",
        lambda w: admin_pb2.CreateTopicsRequest(
            topics=[admin_pb2.CreateTopicsRequest.CreatableTopic(name="fresh", num_partitions=2)]
        ),
        TOPIC_AUTH,
        writes=True,
    ),
    grpc_row(
        "CreatePartitions",
        ADMIN,
        "CreatePartitions",
        lambda w: admin_pb2.CreatePartitionsRequest(
            topics=[admin_pb2.CreatePartitionsRequest.CreatePartitionsTopic(name="grow", count=2)]
        ),
        TOPIC_AUTH,
        writes=True,
    ),
    grpc_row(
        "DeleteTopics",
        ADMIN,
        "DeleteTopics",
        lambda w: admin_pb2.DeleteTopicsRequest(names=["doomed-topic"]),
        TOPIC_AUTH,
        writes=True,
    ),
    grpc_row(
        "ListTopics",
        ADMIN,
        "ListTopics",
        lambda w: admin_pb2.ListTopicsRequest(),
        None,
        empty=_no_topics,
    ),
    grpc_row(
        "DescribeCluster",
        ADMIN,
        "DescribeCluster",
        lambda w: admin_pb2.DescribeClusterRequest(),
        CLUSTER_AUTH,
    ),
    grpc_row(
        "ListOffsets",
        ADMIN,
        "ListOffsets",
        lambda w: admin_pb2.ListOffsetsRequest(
            topics=[
                admin_pb2.ListOffsetsRequest.Topic(
                    name="orders",
                    partitions=[
                        admin_pb2.ListOffsetsRequest.Partition(partition_index=0, timestamp=-1)
                    ],
                )
            ]
        ),
        TOPIC_AUTH,
    ),
    grpc_row(
        "FindCoordinator",
        CLASSIC,
        "FindCoordinator",
        lambda w: classic_group_pb2.FindCoordinatorRequest(key_type=0, coordinator_keys=["cg"]),
        GROUP_AUTH,
    ),
    grpc_row(
        "JoinGroup",
        CLASSIC,
        "JoinGroup",
        lambda w: classic_group_pb2.JoinGroupRequest(
            group_id="classic",
            session_timeout_ms=10_000,
            protocol_type="consumer",
            protocols=[classic_group_pb2.JoinGroupRequest.Protocol(name="range", metadata=b"")],
        ),
        GROUP_AUTH,
    ),
    grpc_row(
        "SyncGroup",
        CLASSIC,
        "SyncGroup",
        lambda w: classic_group_pb2.SyncGroupRequest(
            group_id="classic", generation_id=1, member_id="m"
        ),
        GROUP_AUTH,
    ),
    grpc_row(
        "Heartbeat",
        CLASSIC,
        "Heartbeat",
        lambda w: classic_group_pb2.HeartbeatRequest(
            group_id="classic", generation_id=1, member_id="m"
        ),
        GROUP_AUTH,
    ),
    grpc_row(
        "LeaveGroup",
        CLASSIC,
        "LeaveGroup",
        lambda w: classic_group_pb2.LeaveGroupRequest(
            group_id="classic",
            members=[classic_group_pb2.LeaveGroupRequest.MemberIdentity(member_id="m")],
        ),
        GROUP_AUTH,
    ),
    grpc_row(
        "DescribeGroups",
        CLASSIC,
        "DescribeGroups",
        lambda w: classic_group_pb2.DescribeGroupsRequest(group_ids=["cg"]),
        GROUP_AUTH,
    ),
    grpc_row(
        "AdvanceTime",
        TESTING,
        "AdvanceTime",
        lambda w: testing_pb2.AdvanceTimeRequest(ms=0),
        CLUSTER_AUTH,
    ),
    grpc_row(
        "DescribeAcls",
        ADMIN,
        "DescribeAcls",
        lambda w: admin_pb2.DescribeAclsRequest(
            filter=admin_pb2.AclFilter(
                resource_type_filter=1, pattern_type_filter=1, operation=1, permission_type=1
            )
        ),
        CLUSTER_AUTH,
    ),
    grpc_row(
        "CreateAcls",
        ADMIN,
        "CreateAcls",
        lambda w: admin_pb2.CreateAclsRequest(creations=[_acl("User:dave", "dave-group")]),
        CLUSTER_AUTH,
        writes=True,
    ),
    grpc_row(
        "DeleteAcls",
        ADMIN,
        "DeleteAcls",
        lambda w: admin_pb2.DeleteAclsRequest(
            filters=[
                admin_pb2.AclFilter(
                    resource_type_filter=1,
                    pattern_type_filter=1,
                    principal_filter="User:eve",
                    operation=1,
                    permission_type=1,
                )
            ]
        ),
        CLUSTER_AUTH,
        writes=True,
    ),
    grpc_row(
        "DescribeUserScramCredentials",
        ADMIN,
        "DescribeUserScramCredentials",
        lambda w: admin_pb2.DescribeUserScramCredentialsRequest(),
        CLUSTER_AUTH,
    ),
    grpc_row(
        "AlterUserScramCredentials",
        ADMIN,
        "AlterUserScramCredentials",
        lambda w: _upsert("frank"),
        CLUSTER_AUTH,
        writes=True,
    ),
]


def _acl_filter(**kw: Any) -> dict[str, Any]:
    return {
        "resource_type_filter": 1,
        "resource_name_filter": None,
        "pattern_type_filter": 1,
        "principal_filter": None,
        "host_filter": None,
        "operation": 1,
        "permission_type": 1,
        **kw,
    }


def _kafka_join() -> dict[str, Any]:
    """A ConsumerGroupHeartbeat join of group "cg" without a member id (the coordinator's to
    generate in v0, INVALID_REQUEST in v1)."""
    return {
        "group_id": "cg",
        "member_id": "",
        "member_epoch": 0,
        "rebalance_timeout": 30_000,
        "subscribed_topic_names": ["orders"],
        "topic_partitions": [],
    }


def _kafka_commit(_w: World) -> dict[str, Any]:
    return {
        "group_id": "simple",
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "topics": [
            {"name": "orders", "partitions": [{"partition_index": 2, "committed_offset": 11}]}
        ],
    }


KAFKA_ROWS = [
    kafka_row("ConsumerGroupHeartbeat", 68, 0, lambda w: _kafka_join(), GROUP_AUTH, writes=True),
    # Kafka authorizes before it validates: a v1 join without its member id, refused READ on
    # the group, is GROUP_AUTHORIZATION_FAILED (INVALID_REQUEST only for the allowed column).
    kafka_row(
        "ConsumerGroupHeartbeat (v1, no member id)",
        68,
        1,
        lambda w: {**_kafka_join(), "subscribed_topic_regex": None},
        GROUP_AUTH,
    ),
    kafka_row("ConsumerGroupDescribe", 69, 0, lambda w: {"group_ids": ["cg"]}, GROUP_AUTH),
    kafka_row("OffsetCommit", 8, 9, _kafka_commit, GROUP_AUTH, writes=True),
    kafka_row(
        "OffsetFetch", 9, 9, lambda w: {"groups": [{"group_id": "cg", "topics": None}]}, GROUP_AUTH
    ),
    kafka_row(
        "OffsetDelete",
        47,
        0,
        lambda w: {
            "group_id": "simple",
            "topics": [{"name": "orders", "partitions": [{"partition_index": 1}]}],
        },
        GROUP_AUTH,
        writes=True,
    ),
    kafka_row("ListGroups", 16, 5, lambda w: {}, None, empty=_no_groups),
    kafka_row(
        "DeleteGroups", 42, 2, lambda w: {"groups_names": ["doomed2"]}, GROUP_AUTH, writes=True
    ),
    kafka_row(
        "DescribeConfigs",
        32,
        4,
        lambda w: {
            "resources": [{"resource_type": 32, "resource_name": "cg", "configuration_keys": None}]
        },
        GROUP_AUTH,
    ),
    kafka_row(
        "IncrementalAlterConfigs",
        44,
        1,
        lambda w: {
            "resources": [
                {
                    "resource_type": 32,
                    "resource_name": "cg",
                    "configs": [
                        {
                            "name": "consumer.heartbeat.interval.ms",
                            "config_operation": 0,
                            "value": "6000",
                        }
                    ],
                }
            ]
        },
        GROUP_AUTH,
        writes=True,
    ),
    kafka_row("Metadata", 3, 12, lambda w: {"topics": None}, None, empty=_no_topics),
    kafka_row(
        "FindCoordinator", 10, 4, lambda w: {"key_type": 0, "coordinator_keys": ["cg"]}, GROUP_AUTH
    ),
    kafka_row(
        "JoinGroup",
        11,
        9,
        lambda w: {
            "group_id": "classic",
            "session_timeout": 10_000,
            "rebalance_timeout": 10_000,
            "member_id": "",
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}],
        },
        GROUP_AUTH,
    ),
    kafka_row(
        "SyncGroup",
        14,
        5,
        lambda w: {
            "group_id": "classic",
            "generation_id": 1,
            "member_id": "m",
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": [],
        },
        GROUP_AUTH,
    ),
    kafka_row(
        "Heartbeat",
        12,
        4,
        lambda w: {"group_id": "classic", "generation_id": 1, "member_id": "m"},
        GROUP_AUTH,
    ),
    kafka_row(
        "LeaveGroup",
        13,
        5,
        lambda w: {"group_id": "classic", "members": [{"member_id": "m"}]},
        GROUP_AUTH,
    ),
    kafka_row("DescribeGroups", 15, 5, lambda w: {"groups": ["cg"]}, GROUP_AUTH),
    kafka_row("DescribeAcls", 29, 3, lambda w: _acl_filter(), CLUSTER_AUTH),
    kafka_row(
        "CreateAcls",
        30,
        3,
        lambda w: {
            "creations": [
                {
                    "resource_type": 3,
                    "resource_name": "gina-group",
                    "resource_pattern_type": 3,
                    "principal": "User:gina",
                    "host": "*",
                    "operation": 3,
                    "permission_type": 3,
                }
            ]
        },
        CLUSTER_AUTH,
        writes=True,
    ),
    kafka_row(
        "DeleteAcls",
        31,
        3,
        lambda w: {"filters": [_acl_filter(principal_filter="User:dave")]},
        CLUSTER_AUTH,
        writes=True,
    ),
    kafka_row("DescribeUserScramCredentials", 50, 0, lambda w: {"users": None}, CLUSTER_AUTH),
    kafka_row(
        "AlterUserScramCredentials",
        51,
        0,
        lambda w: {
            "deletions": [],
            "upsertions": [
                {
                    "name": "hank",
                    "mechanism": 1,
                    "iterations": 4096,
                    "salt": b"u" * 16,
                    "salted_password": b"y" * 32,
                }
            ],
        },
        CLUSTER_AUTH,
        writes=True,
    ),
]

ROWS = GRPC_ROWS + KAFKA_ROWS


def codes(answer: Any) -> list[int]:
    """Every error code anywhere in an answer (a proto message or a kio entity)."""
    out: list[int] = []

    def walk(x: Any, depth: int) -> None:
        if depth > 8 or x is None or isinstance(x, (str, bytes, int, float, bool)):
            return
        if isinstance(x, (list, tuple)) or type(x).__name__ == "RepeatedCompositeContainer":
            for item in x:
                walk(item, depth + 1)
            return
        fields = (
            [f.name for f, _ in x.ListFields()]
            if hasattr(x, "ListFields")
            else list(getattr(x, "__dataclass_fields__", {}))
        )
        for name in fields:
            value = getattr(x, name)
            if name == "error_code":
                out.append(int(getattr(value, "value", value)))
            else:
                walk(value, depth + 1)

    walk(answer, 0)
    return out


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.name)
def test_matrix(world: World, row: Row) -> None:
    coordinator = world.coordinator
    # The refused columns first: then the allowed one, which may change the state.
    for column in sorted(COLUMNS, key=lambda c: c.allowed):
        before = coordinator.snapshot()
        answer = row.call(world, column)
        after = coordinator.snapshot()
        found = codes(answer)
        where = f"{row.name} as {column.name}: {found}"
        if column.allowed:
            assert not AUTH_CODES.intersection(found), where
            if row.empty is not None:
                assert not row.empty(answer), where
            if row.writes:
                assert after != before, f"{where}: the allowed request changed nothing"
        else:
            assert after == before, f"{where}: a refused request changed the state"
            if row.refused is None:
                assert row.empty is not None and row.empty(answer), where
                assert not AUTH_CODES.intersection(found), where
            else:
                assert row.refused in found, where
                assert set(found) - {0} <= {row.refused}, where


def test_every_rpc_and_every_served_kafka_api_has_a_row() -> None:
    from coordinator.server.kafka import apis

    grpc_rpcs = {m.name for d in services.service_descriptors() for m in d.methods}
    assert {r.name.removeprefix("grpc:") for r in GRPC_ROWS} == grpc_rpcs
    kafka_apis = {kafka_name(k) for k in apis.SERVED} | {"Metadata"}
    assert {r.name.removeprefix("kafka:").split(" (")[0] for r in KAFKA_ROWS} == kafka_apis


def kafka_name(key: int) -> str:
    from coordinator.server.catalog import kafka_api_name

    return kafka_api_name(key)


@pytest.mark.parametrize("column", COLUMNS, ids=lambda c: c.name)
def test_metadata_of_a_named_topic_tells_nothing_to_who_may_not_describe_it(
    world: World, column: Column
) -> None:
    """Kafka: a topic named in Metadata that the client may not describe is
    TOPIC_AUTHORIZATION_FAILED, whether it exists ("orders") or not ("no-such-topic")."""
    client = world.coordinator.kafka_client(column.principal)
    try:
        resp = client.call(
            request(
                3,
                12,
                topics=[
                    {"name": "orders", "topic_id": None},
                    {"name": "no-such-topic", "topic_id": None},
                ],
                allow_auto_topic_creation=False,
            )
        )
    finally:
        client.close()
    got = [(t.name, int(t.error_code), len(t.partitions)) for t in resp.topics]
    if column.allowed:
        assert got == [("orders", 0, 3), ("no-such-topic", 3, 0)]
    else:
        assert got == [("orders", TOPIC_AUTH, 0), ("no-such-topic", TOPIC_AUTH, 0)]


def test_a_watch_stream_ends_when_its_reader_may_no_longer_read_the_group(world: World) -> None:
    """ConsumerGroupWatch is authorized again before each message: once carol's READ on the
    group is removed, her open stream's next message (alice joins: carol's target shrinks) is
    GROUP_AUTHORIZATION_FAILED and the stream ends — she is told nothing more of the group, as
    her next heartbeat is refused."""
    md, carol = metadata(user("admin")), metadata(user("carol"))
    admin, groups = ADMIN(world.channel), CG(world.channel)
    made = admin.CreateTopics(
        admin_pb2.CreateTopicsRequest(
            topics=[admin_pb2.CreateTopicsRequest.CreatableTopic(name="watched", num_partitions=2)]
        ),
        metadata=md,
        timeout=TIMEOUT,
    )
    assert [t.error_code for t in made.topics] == [0]
    topic_grant = admin_pb2.AclBinding()
    topic_grant.CopyFrom(_acl("User:carol", "watched"))
    topic_grant.resource_type = 2  # the topic, to subscribe to it
    grants = [_acl("User:carol", "watched"), topic_grant]
    acls = admin.CreateAcls(admin_pb2.CreateAclsRequest(creations=grants), metadata=md)
    assert [r.error_code for r in acls.results] == [0, 0]

    def join(who: list[tuple[str, str]]) -> Any:
        request = _join(world, "watched", "watched")
        return groups.ConsumerGroupHeartbeat(request, metadata=who, timeout=TIMEOUT)

    member = join(carol)
    assert member.error_code == 0
    stream = _open_watch(world, "watched", member.member_id, carol)
    try:
        events = iter(stream)
        first = next(events)  # the member as it is: both partitions
        assert (first.error_code, [list(t.partitions) for t in first.target_topic_partitions]) == (
            0,
            [[0, 1]],
        )
        removed = admin.DeleteAcls(
            admin_pb2.DeleteAclsRequest(
                filters=[
                    admin_pb2.AclFilter(
                        resource_type_filter=3,
                        resource_name_filter="watched",
                        pattern_type_filter=3,
                        principal_filter="User:carol",
                        operation=1,
                        permission_type=1,
                    )
                ]
            ),
            metadata=md,
        )
        assert [len(r.matching_acls) for r in removed.filter_results] == [1]
        assert join(metadata(user("alice"))).error_code == 0  # carol's target shrinks
        last = next(events)
        assert (last.error_code, last.error_message, list(last.target_topic_partitions)) == (
            GROUP_AUTH,
            "Not authorized to access group: watched",
            [],
        )
        assert list(events) == []  # the stream ended
    finally:
        stream.cancel()


def test_a_group_whose_topics_the_caller_may_not_describe_is_refused_without_naming_them(
    world: World,
) -> None:
    """ConsumerGroupDescribe (KAFKA-18813): carol may describe the group "cg" but not the topic
    "orders" its member reads, so the group is TOPIC_AUTHORIZATION_FAILED with Kafka's message
    — which names no topic: the names are what she may not learn. Both protocols."""
    md = metadata(user("admin"))
    grant = admin_pb2.AclBinding()
    grant.CopyFrom(_acl("User:carol", "cg"))
    grant.operation = 8  # DESCRIBE
    made = ADMIN(world.channel).CreateAcls(
        admin_pb2.CreateAclsRequest(creations=[grant]), metadata=md
    )
    assert [r.error_code for r in made.results] == [0]
    refused = (
        TOPIC_AUTH,
        "The described group uses topics that the client is not authorized to describe.",
        0,
    )
    described = CG(world.channel).ConsumerGroupDescribe(
        consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=["cg"]),
        metadata=metadata(user("carol")),
        timeout=TIMEOUT,
    )
    assert [(g.error_code, g.error_message, len(g.members)) for g in described.groups] == [refused]
    client = world.coordinator.kafka_client(user("carol"))
    try:
        answer = client.call(request(69, 0, group_ids=["cg"], include_authorized_operations=False))
    finally:
        client.close()
    assert [(g.error_code, g.error_message, len(g.members)) for g in answer.groups] == [refused]


def test_a_host_acl_applies_to_a_watch_stream(world: World) -> None:
    """An ACL naming the client's host (DENY every user from 127.0.0.1) refuses carol's
    ConsumerGroupWatch as it refuses her heartbeat, although an ALLOW for any host lets her
    read the group: the stream is judged with the client's address like every request."""
    refused = (GROUP_AUTH, "Not authorized to access group: host-denied")
    with _denied_from_loopback(world, "host-denied", "User:carol", 3):  # DENY READ
        joined = CG(world.channel).ConsumerGroupHeartbeat(
            _join(world, "host-denied"), metadata=metadata(user("carol")), timeout=TIMEOUT
        )
        assert (joined.error_code, joined.error_message) == refused
        stream = _open_watch(world, "host-denied", "m", metadata(user("carol")))
        assert [(e.error_code, e.error_message) for e in stream] == [refused]


@contextlib.contextmanager
def _denied_from_loopback(
    world: World, group_id: str, allowed: str, denied_operation: int
) -> Iterator[None]:
    """ACLs on ``group_id`` for a block: READ for ``allowed`` from any host, and a DENY of
    ``denied_operation`` to every user from 127.0.0.1; none are left afterwards (no
    host-specific ACL for the other tests)."""
    md = metadata(user("admin"))
    allow = _acl(allowed, group_id)
    deny = admin_pb2.AclBinding()
    deny.CopyFrom(_acl("User:*", group_id))
    deny.host, deny.operation, deny.permission_type = "127.0.0.1", denied_operation, 2
    made = ADMIN(world.channel).CreateAcls(
        admin_pb2.CreateAclsRequest(creations=[allow, deny]), metadata=md
    )
    assert [r.error_code for r in made.results] == [0, 0]
    try:
        yield
    finally:
        any_acl = admin_pb2.AclFilter(
            resource_type_filter=3,
            resource_name_filter=group_id,
            pattern_type_filter=3,
            operation=1,
            permission_type=1,
        )
        ADMIN(world.channel).DeleteAcls(admin_pb2.DeleteAclsRequest(filters=[any_acl]), metadata=md)


def test_a_topic_the_caller_may_not_describe_is_never_named_to_it(world: World) -> None:
    """Kafka holds a topic id no secret and a topic's name one. carol may read the groups
    "shared-regex" and "simple" but may not describe the topic "orders":

    * alice and carol subscribe to the regex ``^orders$``; alice's heartbeat resolved it, so
      carol is given partitions of "orders" too (KAFKA-19147): her heartbeat's and her watch
      stream's assignments carry its id, never its name;
    * asked by id, OffsetFetch answers "orders" TOPIC_AUTHORIZATION_FAILED without its name,
      and OffsetCommit refuses it naming its id only (and commits nothing)."""
    md, carol = metadata(user("admin")), metadata(user("carol"))
    admin, groups, offsets = ADMIN(world.channel), CG(world.channel), OFFSETS(world.channel)
    grants = [_acl("User:carol", "shared-regex"), _acl("User:carol", "simple")]
    made = admin.CreateAcls(admin_pb2.CreateAclsRequest(creations=grants), metadata=md)
    assert [r.error_code for r in made.results] == [0, 0]
    orders = world.topic_ids["orders"]

    def join(who: list[tuple[str, str]]) -> Any:
        request = _join(world, "shared-regex")
        request.ClearField("subscribed_topic_names")
        request.subscribed_topic_regex = "^orders$"
        return groups.ConsumerGroupHeartbeat(request, metadata=who, timeout=TIMEOUT)

    first = join(metadata(user("alice")))
    assert first.error_code == 0
    deadline = time.monotonic() + TIMEOUT  # the regex is resolved off the heartbeat path
    while not first.assignment.assigned_topic_partitions:
        assert time.monotonic() < deadline, "alice was never assigned the regex's topic"
        time.sleep(0.02)
        first = groups.ConsumerGroupHeartbeat(
            consumer_group_pb2.ConsumerGroupHeartbeatRequest(
                group_id="shared-regex",
                member_id=first.member_id,
                member_epoch=first.member_epoch,
            ),
            metadata=metadata(user("alice")),
            timeout=TIMEOUT,
        )
    assert [t.topic_name for t in first.assignment.assigned_topic_partitions] == ["orders"]
    member = join(carol)
    assert member.error_code == 0
    pending = [(t.topic_id, t.topic_name) for t in member.assignment.pending_topic_partitions]
    assert pending == [(orders, "")]
    stream = _open_watch(world, "shared-regex", member.member_id, carol)
    try:
        event = next(iter(stream))
    finally:
        stream.cancel()
    assert [(t.topic_id, t.topic_name) for t in event.target_topic_partitions] == [(orders, "")]

    fetched = offsets.OffsetFetch(
        offsets_pb2.OffsetFetchRequest(
            groups=[
                offsets_pb2.OffsetFetchRequest.Group(
                    group_id="simple",
                    topics=common_pb2.TopicPartitionIndexesList(
                        items=[
                            common_pb2.TopicPartitionIndexes(topic_id=orders, partition_indexes=[0])
                        ]
                    ),
                )
            ]
        ),
        metadata=carol,
        timeout=TIMEOUT,
    )
    assert [
        (t.name, t.topic_id, [(p.committed_offset, p.error_code) for p in t.partitions])
        for g in fetched.groups
        for t in g.topics
    ] == [("", orders, [(-1, TOPIC_AUTH)])]
    before = world.coordinator.snapshot()
    by_id = _commit(world)
    by_id.topics[0].ClearField("name")
    by_id.topics[0].topic_id = orders
    committed = offsets.OffsetCommit(by_id, metadata=carol, timeout=TIMEOUT)
    assert world.coordinator.snapshot() == before
    text_id = str(base64.urlsafe_b64encode(orders), "ascii").rstrip("=")
    assert [
        (t.name, [(p.error_code, p.error_message) for p in t.partitions]) for t in committed.topics
    ] == [("", [(TOPIC_AUTH, f"Not authorized to access topic id {text_id}.")])]


def test_a_host_acl_applies_to_ipv4_clients_of_a_dual_stack_port(world: World) -> None:
    """An IPv6 listening socket takes IPv4 clients too (``::ffff:127.0.0.1``: the listener's
    ports for the other brokers of an upstream, on an IPv6 host). Their address is the IPv4
    one, as Kafka (Java) sees it, so an ACL naming 127.0.0.1 applies: every user may read the
    group but none from 127.0.0.1, so the (anonymous) client there is refused."""

    async def dual_stack_port() -> int:  # only loopback IPv4 clients reach it
        return world.coordinator.server.kafka.listen_now("::ffff:127.0.0.1")

    with _denied_from_loopback(world, "dual-stack", "User:*", 2):  # DENY ALL
        port = world.coordinator.run(dual_stack_port())
        client = KafkaClient(f"127.0.0.1:{port}", client_id="matrix")
        try:
            fetched = client.call(
                request(9, 8, groups=[{"group_id": "dual-stack", "topics": None}])
            )
        finally:
            client.close()
        assert [int(g.error_code) for g in fetched.groups] == [GROUP_AUTH]


@pytest.mark.parametrize("column", COLUMNS, ids=lambda c: c.name)
def test_metadata_says_the_callers_operations_and_refuses_an_id_it_may_not_describe(
    world: World, column: Column
) -> None:
    """Coordinator-only Metadata v12, as Kafka answers it: asked for, each topic carries the
    caller's authorized operations and the cluster its own (0 without DESCRIBE on it); a topic
    asked by id that the caller may not describe is TOPIC_AUTHORIZATION_FAILED with its id
    (ids are no secret), not UNKNOWN_TOPIC_ID; an unknown id stays UNKNOWN_TOPIC_ID."""
    orders = uuid.UUID(bytes=world.topic_ids["orders"])
    unknown = uuid.UUID(int=7)
    client = world.coordinator.kafka_client(column.principal)
    try:
        listed = client.call(
            request(
                3,
                12,
                topics=None,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=True,
            )
        )
        by_id = client.call(
            request(
                3,
                12,
                topics=[{"name": None, "topic_id": orders}, {"name": None, "topic_id": unknown}],
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        )
        # The cluster's operations are asked for in v8-v10 only (topic ids from v12).
        cluster = client.call(
            request(
                3,
                10,
                topics=[],
                allow_auto_topic_creation=False,
                include_cluster_authorized_operations=True,
                include_topic_authorized_operations=False,
            )
        )
    finally:
        client.close()
    every_topic_op = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))  # alice: ALL on TOPIC *
    every_cluster_op = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))
    if column.allowed:
        assert {int(t.topic_authorized_operations) for t in listed.topics} == {every_topic_op}
        assert [(t.topic_id, int(t.error_code)) for t in by_id.topics] == [
            (orders, 0),
            (unknown, 100),
        ]
        assert cluster.cluster_authorized_operations == every_cluster_op
    else:
        assert list(listed.topics) == []
        assert [(t.name or None, t.topic_id, int(t.error_code)) for t in by_id.topics] == [
            (None, orders, TOPIC_AUTH),
            (None, unknown, 100),  # UNKNOWN_TOPIC_ID
        ]
        assert cluster.cluster_authorized_operations == 0


OVER_THE_BOUND = 10_001  # group.coordinator.request.max.partitions (10000) + 1


@pytest.mark.parametrize("column", COLUMNS, ids=lambda c: c.name)
def test_the_owned_partitions_bound_tells_nothing_to_who_may_not_read_the_group(
    world: World, column: Column
) -> None:
    """Over group.coordinator.request.max.partitions, a heartbeat's owned partitions are bounded
    by every partition the coordinator knows: state. A caller refused READ on the group gets
    GROUP_AUTHORIZATION_FAILED, as Kafka authorizes before anything, the very answer it gets
    for one owned partition: it cannot count the partitions of topics it may not describe (the
    refusal named the count: "every partition of the 5 known"). Who may read the group is
    told the bound, without the count. Nothing changes either way, on both listeners."""
    orders = world.topic_ids["orders"]

    def grpc_call(n: int) -> Any:
        req = _join(world)
        req.topic_partitions.items.add(topic_id=orders, partitions=range(n))
        return CG(world.channel).ConsumerGroupHeartbeat(
            req, metadata=metadata(column.principal), timeout=TIMEOUT
        )

    def kafka_call(n: int) -> Any:
        client = world.coordinator.kafka_client(column.principal)
        try:
            fields = {
                **_kafka_join(),
                "topic_partitions": [
                    {"topic_id": uuid.UUID(bytes=orders), "partitions": list(range(n))}
                ],
            }
            return client.call(request(68, 0, **fields))
        finally:
            client.close()

    bound = (
        f"The request names {OVER_THE_BOUND} owned partitions; at most 10000 are allowed in one "
        "request (group.coordinator.request.max.partitions), or every partition the coordinator "
        "knows when there are more."
    )
    for call in (grpc_call, kafka_call):
        before = world.coordinator.snapshot()
        over = call(OVER_THE_BOUND)
        assert world.coordinator.snapshot() == before, call.__name__
        if column.allowed:
            assert (over.error_code, over.error_message) == (42, bound), call.__name__
        else:
            assert (over.error_code, over.error_message) == (
                GROUP_AUTH,
                "Not authorized to access group: cg",
            ), call.__name__
            assert over == call(1), call.__name__  # the whole answer: as for one partition
            assert world.coordinator.snapshot() == before, call.__name__


@pytest.mark.parametrize("column", COLUMNS, ids=lambda c: c.name)
def test_find_coordinator_authorizes_a_transactional_id_before_anything(
    world: World, column: Column
) -> None:
    """FindCoordinator of a transactional id (key type 1): Kafka checks DESCRIBE on it first
    (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, node -1); this coordinator-only mode serves no
    transaction coordinator, which only a caller that may describe the id is told
    (INVALID_REQUEST). Before: INVALID_REQUEST to everybody, the refusal never checked."""
    md = metadata(user("admin"))
    grant = _acl("User:alice", "pay-txn")
    grant.resource_type = 5  # TRANSACTIONAL_ID
    made = ADMIN(world.channel).CreateAcls(
        admin_pb2.CreateAclsRequest(creations=[grant]), metadata=md, timeout=TIMEOUT
    )
    assert [r.error_code for r in made.results] == [0]
    if column.allowed:
        expected = (
            "pay-txn",
            -1,
            "",
            -1,
            42,
            "Key type 1 is not served: this coordinator serves only groups (key type 0).",
        )
    else:
        expected = (
            "pay-txn",
            -1,
            "",
            -1,
            53,
            "Not authorized to access transactional id: pay-txn",
        )
    answer = CLASSIC(world.channel).FindCoordinator(
        classic_group_pb2.FindCoordinatorRequest(key_type=1, coordinator_keys=["pay-txn"]),
        metadata=metadata(column.principal),
        timeout=TIMEOUT,
    )
    got = [
        (c.key, c.node_id, c.host, c.port, c.error_code, c.error_message)
        for c in answer.coordinators
    ]
    assert got == [expected]
    client = world.coordinator.kafka_client(column.principal)
    try:
        wire = client.call(request(10, 4, key_type=1, coordinator_keys=["pay-txn"]))
    finally:
        client.close()
    got = [
        (c.key, c.node_id, c.host, c.port, int(c.error_code), c.error_message)
        for c in wire.coordinators
    ]
    assert got == [expected]


def _alter_config(resource_type: int, name: str) -> Any:
    return request(
        44,
        1,
        resources=[
            {
                "resource_type": resource_type,
                "resource_name": name,
                "configs": [
                    {
                        "name": "consumer.heartbeat.interval.ms",
                        "config_operation": 0,
                        "value": "7000",
                    }
                ],
            }
        ],
        validate_only=False,
    )


def test_config_resource_16_over_kafka_is_client_metrics_not_a_group(world: World) -> None:
    """Over the Kafka protocol ConfigResource type 16 is CLIENT_METRICS (GROUP is 32; 16 is
    GROUP only in the gRPC wire contract). Kafka authorizes CLIENT_METRICS on the cluster
    (DESCRIBE_CONFIGS / ALTER_CONFIGS): carol, who may alter group ``carol-cfg``'s configs
    and nothing on the cluster, is refused CLUSTER_AUTHORIZATION_FAILED and nothing changes;
    alice, who may do everything, is told this coordinator keeps no such configs. Before: type
    16 was read as the group, so carol's client-metrics request altered the group's config
    (and alice's too), authorized on the group."""
    md = metadata(user("admin"))
    grant = _acl("User:carol", "carol-cfg")
    grant.operation = 11  # ALTER_CONFIGS (implies DESCRIBE_CONFIGS)
    made = ADMIN(world.channel).CreateAcls(
        admin_pb2.CreateAclsRequest(creations=[grant]), metadata=md, timeout=TIMEOUT
    )
    assert [r.error_code for r in made.results] == [0]
    coordinator = world.coordinator
    for who, expected in [
        ("carol", (31, "Cluster authorization failed.")),
        ("bob", (31, "Cluster authorization failed.")),
        ("alice", (42, "Only GROUP resources (32) are supported.")),
    ]:
        client = coordinator.kafka_client(user(who))
        try:
            before = coordinator.snapshot()
            altered = client.call(_alter_config(16, "carol-cfg"))
            assert coordinator.snapshot() == before, who
            described = client.call(
                request(
                    32,
                    4,
                    resources=[
                        {
                            "resource_type": 16,
                            "resource_name": "carol-cfg",
                            "configuration_keys": None,
                        }
                    ],
                )
            )
        finally:
            client.close()
        assert [
            (int(r.error_code), r.error_message, r.resource_type, r.resource_name)
            for r in altered.responses
        ] == [(*expected, 16, "carol-cfg")], who
        assert [
            (int(r.error_code), r.error_message, r.resource_type, len(r.configs))
            for r in described.results
        ] == [(*expected, 16, 0)], who
    # As a GROUP resource (32) carol may alter it: the control.
    client = coordinator.kafka_client(user("carol"))
    try:
        before = coordinator.snapshot()
        altered = client.call(_alter_config(32, "carol-cfg"))
    finally:
        client.close()
    assert [int(r.error_code) for r in altered.responses] == [0]
    assert coordinator.snapshot() != before


def test_config_refusals_in_kafkas_order_and_words(world: World) -> None:
    """A config request naming a group the caller may not touch next to one it may: Kafka
    answers the refusal with its error's own message (``Group authorization failed.``),
    after the others in DescribeConfigs (ConfigHelper appends the refused resources) and
    before them in IncrementalAlterConfigs (ControllerApis answers them before its
    controller's results), on both listeners. Before: in the order of the request, with
    ``Not authorized to access group: cg``."""
    md = metadata(user("admin"))
    grant = _acl("User:carol", "carol-cfg2")
    grant.operation = 11  # ALTER_CONFIGS (implies DESCRIBE_CONFIGS)
    made = ADMIN(world.channel).CreateAcls(
        admin_pb2.CreateAclsRequest(creations=[grant]), metadata=md, timeout=TIMEOUT
    )
    assert [r.error_code for r in made.results] == [0]
    refusal = (30, "Group authorization failed.")
    client = world.coordinator.kafka_client(user("carol"))
    try:
        described = client.call(
            request(
                32,
                4,
                resources=[
                    {"resource_type": 32, "resource_name": n, "configuration_keys": None}
                    for n in ("cg", "carol-cfg2")
                ],
            )
        )
        altered = client.call(
            request(
                44,
                1,
                resources=[
                    {
                        "resource_type": 32,
                        "resource_name": n,
                        "configs": [
                            {
                                "name": "consumer.heartbeat.interval.ms",
                                "config_operation": 0,
                                "value": "6500",
                            }
                        ],
                    }
                    for n in ("carol-cfg2", "cg")
                ],
                validate_only=True,
            )
        )
    finally:
        client.close()
    assert [
        (r.resource_name, int(r.error_code), r.error_message, bool(r.configs))
        for r in described.results
    ] == [("carol-cfg2", 0, None, True), ("cg", *refusal, False)]
    assert [(r.resource_name, int(r.error_code), r.error_message) for r in altered.responses] == [
        ("cg", *refusal),
        ("carol-cfg2", 0, None),
    ]
    # The same over gRPC (its GROUP type, 16).
    carol = metadata(user("carol"))
    grpc_described = ADMIN(world.channel).DescribeConfigs(
        admin_pb2.DescribeConfigsRequest(
            resources=[
                admin_pb2.DescribeConfigsRequest.Resource(resource_type=16, resource_name=n)
                for n in ("cg", "carol-cfg2")
            ]
        ),
        metadata=carol,
        timeout=TIMEOUT,
    )
    assert [(r.resource_name, r.error_code, r.error_message) for r in grpc_described.results] == [
        ("carol-cfg2", 0, ""),
        ("cg", *refusal),
    ]


def test_refused_groups_are_answered_apart_in_kafkas_order(world: World) -> None:
    """KafkaApis answers the groups it refuses apart from the coordinator's answer: before it
    in DescribeGroups and ConsumerGroupDescribe, after it in DeleteGroups. carol may describe
    and delete ``carol-g`` (which does not exist), not ``nobody-g``; on both listeners. Before: in
    the order of the request."""
    md = metadata(user("admin"))
    grants = []
    for op in (8, 6):  # DESCRIBE, DELETE
        grant = _acl("User:carol", "carol-g")
        grant.operation = op
        grants.append(grant)
    made = ADMIN(world.channel).CreateAcls(
        admin_pb2.CreateAclsRequest(creations=grants), metadata=md, timeout=TIMEOUT
    )
    assert [r.error_code for r in made.results] == [0, 0]
    client = world.coordinator.kafka_client(user("carol"))
    try:
        described = client.call(request(15, 5, groups=["carol-g", "nobody-g"]))
        consumer = client.call(request(69, 0, group_ids=["carol-g", "nobody-g"]))
        deleted = client.call(request(42, 2, groups_names=["nobody-g", "carol-g"]))
    finally:
        client.close()
    assert [(g.group_id, int(g.error_code)) for g in described.groups] == [
        ("nobody-g", GROUP_AUTH),
        ("carol-g", 0),
    ]
    assert [(g.group_id, int(g.error_code)) for g in consumer.groups] == [
        ("nobody-g", GROUP_AUTH),
        ("carol-g", 69),
    ]
    assert [(g.group_id, int(g.error_code)) for g in deleted.results] == [
        ("carol-g", 69),
        ("nobody-g", GROUP_AUTH),
    ]
    carol = metadata(user("carol"))
    grpc_described = CLASSIC(world.channel).DescribeGroups(
        classic_group_pb2.DescribeGroupsRequest(group_ids=["carol-g", "nobody-g"]),
        metadata=carol,
        timeout=TIMEOUT,
    )
    grpc_consumer = CG(world.channel).ConsumerGroupDescribe(
        consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=["carol-g", "nobody-g"]),
        metadata=carol,
        timeout=TIMEOUT,
    )
    grpc_deleted = ADMIN(world.channel).DeleteGroups(
        admin_pb2.DeleteGroupsRequest(group_ids=["nobody-g", "carol-g"]),
        metadata=carol,
        timeout=TIMEOUT,
    )
    assert [(g.group_id, g.error_code) for g in grpc_described.groups] == [
        ("nobody-g", GROUP_AUTH),
        ("carol-g", 69),
    ]
    assert [(g.group_id, g.error_code) for g in grpc_consumer.groups] == [
        ("nobody-g", GROUP_AUTH),
        ("carol-g", 69),
    ]
    assert [(g.group_id, g.error_code) for g in grpc_deleted.results] == [
        ("carol-g", 69),
        ("nobody-g", GROUP_AUTH),
    ]


def test_an_empty_group_id_is_authorized_before_it_is_validated(world: World) -> None:
    """KafkaApis authorizes the group first and the group coordinator validates its id after:
    a caller refused the group gets GROUP_AUTHORIZATION_FAILED for "" as for any name, an
    allowed one INVALID_GROUP_ID (over the coordinator-only listener; TxnOffsetCommit, served
    in front of a broker, checks its transactional id, then the group, then the id). Before,
    every caller got INVALID_GROUP_ID."""
    invalid_group_id = 24
    asks = {
        "OffsetCommit": request(8, 8, **{**_kafka_commit(world), "group_id": ""}),
        "OffsetFetch": request(9, 8, groups=[{"group_id": "", "topics": None}]),
        "OffsetDelete": request(47, 0, group_id="", topics=[]),
        "DeleteGroups": request(42, 2, groups_names=[""]),
        "DescribeGroups": request(15, 5, groups=[""]),
        "ConsumerGroupDescribe": request(69, 0, group_ids=[""]),
        "SyncGroup": request(
            14,
            5,
            group_id="",
            generation_id=1,
            member_id="m",
            protocol_type="consumer",
            protocol_name="range",
            assignments=[],
        ),
        "Heartbeat": request(12, 4, group_id="", generation_id=1, member_id="m"),
        "LeaveGroup": request(13, 4, group_id="", members=[{"member_id": "m"}]),
    }

    def answers(client: KafkaClient) -> dict[str, int]:
        out = {}
        for api, req in asks.items():
            resp = client.call(req)
            if api == "OffsetCommit":  # per partition (the one named)
                out[api] = int(resp.topics[0].partitions[0].error_code)
            elif api == "OffsetFetch":
                out[api] = int(resp.groups[0].error_code)
            elif api == "DeleteGroups":
                out[api] = int(resp.results[0].error_code)
            elif api in ("DescribeGroups", "ConsumerGroupDescribe"):
                out[api] = int(resp.groups[0].error_code)
            else:
                out[api] = int(resp.error_code)
        return out

    for principal, refused in ((user("bob"), True), (None, True), (user("alice"), False)):
        client = world.coordinator.kafka_client(principal)
        try:
            got = answers(client)
        finally:
            client.close()
        if refused:
            want = dict.fromkeys(asks, GROUP_AUTH)
        else:
            want = dict.fromkeys(asks, invalid_group_id)
        assert got == want, (principal, got)


def test_an_offset_delete_refused_every_topic_is_still_judged_on_its_group(world: World) -> None:
    """KafkaApis.handleOffsetDeleteRequest asks the group coordinator even when every topic of
    the request is refused (READ on the topic): the group is validated as for any OffsetDelete.
    carol may delete the offsets of ``carol-od`` (an offsets-only group) and of
    ``carol-od-missing`` (no such group), and may read no topic. For the missing group the
    answer is GROUP_ID_NOT_FOUND for the whole request, as Kafka answers an error of the
    coordinator (no topics); for the existing one each refused partition is
    TOPIC_AUTHORIZATION_FAILED and nothing is deleted; on both listeners. Before, a request whose
    topics were all refused was answered without asking the coordinator: no error for a group
    that does not exist."""
    md = metadata(user("admin"))
    grants = []
    for group in ("carol-od", "carol-od-missing"):
        grant = _acl("User:carol", group)
        grant.operation = 6  # DELETE
        grants.append(grant)
    made = ADMIN(world.channel).CreateAcls(
        admin_pb2.CreateAclsRequest(creations=grants), metadata=md, timeout=TIMEOUT
    )
    assert [r.error_code for r in made.results] == [0, 0]
    commit = _commit(world)
    commit.group_id = "carol-od"
    committed = OFFSETS(world.channel).OffsetCommit(commit, metadata=md, timeout=TIMEOUT)
    assert [p.error_code for t in committed.topics for p in t.partitions] == [0]
    denied = f"Not authorized to access topics: [{'orders'}]"
    before = world.coordinator.snapshot()

    def grpc_delete(group: str) -> Any:
        answer = OFFSETS(world.channel).OffsetDelete(
            offsets_pb2.OffsetDeleteRequest(
                group_id=group,
                topics=[
                    offsets_pb2.OffsetDeleteRequest.Topic(name="orders", partition_indexes=[1])
                ],
            ),
            metadata=metadata(user("carol")),
            timeout=TIMEOUT,
        )
        return (
            answer.error_code,
            answer.error_message,
            [
                (t.name, [(p.partition_index, p.error_code, p.error_message) for p in t.partitions])
                for t in answer.topics
            ],
        )

    assert grpc_delete("carol-od-missing") == (69, "Group carol-od-missing not found.", [])
    assert grpc_delete("carol-od") == (0, "", [("orders", [(1, TOPIC_AUTH, denied)])])
    client = world.coordinator.kafka_client(user("carol"))
    try:
        answers = [
            client.call(
                request(
                    47,
                    0,
                    group_id=group,
                    topics=[{"name": "orders", "partitions": [{"partition_index": 1}]}],
                )
            )
            for group in ("carol-od-missing", "carol-od")
        ]
    finally:
        client.close()
    assert [
        (
            int(a.error_code),
            [
                (t.name, [(p.partition_index, int(p.error_code)) for p in t.partitions])
                for t in a.topics
            ],
        )
        for a in answers
    ] == [(69, []), (0, [("orders", [(1, TOPIC_AUTH)])])]
    assert world.coordinator.snapshot() == before


def test_a_commit_naming_a_topic_and_the_id_of_another_names_neither_to_who_may_not_read_it(
    world: World,
) -> None:
    """A gRPC OffsetCommit may address a topic by name and by id at once; the two must be one
    topic (else INVALID_REQUEST, whose message names the id's topic). carol may read the topic
    "grow" and the group "carol-mix", not the topic "orders". Her commit of "grow" given the id
    of "orders" is refused as a commit of that id (TOPIC_AUTHORIZATION_FAILED naming its id
    only: a topic's id is no secret, its name is) and commits nothing; alice, who may read both,
    is told the id is another topic's. Before, carol's commit was judged on the name alone and
    answered INVALID_REQUEST "Topic id ... is topic orders, not grow.": the name of a topic she
    may not describe, for any id she knows."""
    md = metadata(user("admin"))
    group_grant = _acl("User:carol", "carol-mix")
    topic_grant = _acl("User:carol", "grow")
    topic_grant.resource_type = 2
    made = ADMIN(world.channel).CreateAcls(
        admin_pb2.CreateAclsRequest(creations=[group_grant, topic_grant]),
        metadata=md,
        timeout=TIMEOUT,
    )
    assert [r.error_code for r in made.results] == [0, 0]
    orders = world.topic_ids["orders"]
    text_id = str(base64.urlsafe_b64encode(orders), "ascii").rstrip("=")
    commit = offsets_pb2.OffsetCommitRequest(
        group_id="carol-mix",
        topics=[
            offsets_pb2.OffsetCommitRequest.Topic(
                name="grow",
                topic_id=orders,
                partitions=[
                    offsets_pb2.OffsetCommitRequest.Partition(partition_index=0, committed_offset=5)
                ],
            )
        ],
    )
    before = world.coordinator.snapshot()
    answers = {
        who: OFFSETS(world.channel).OffsetCommit(
            commit, metadata=metadata(user(who)), timeout=TIMEOUT
        )
        for who in ("carol", "alice")
    }
    assert world.coordinator.snapshot() == before
    assert {
        who: [(t.name, [(p.error_code, p.error_message) for p in t.partitions]) for t in a.topics]
        for who, a in answers.items()
    } == {
        "carol": [("grow", [(TOPIC_AUTH, f"Not authorized to access topic id {text_id}.")])],
        "alice": [("grow", [(42, f"Topic id {text_id} is topic orders, not grow.")])],
    }


def test_offset_fetch_v1_refused_says_so_on_every_partition(world: World) -> None:
    """OffsetFetch v0-v1 has no group error field: Kafka's answer to a group it refuses puts
    GROUP_AUTHORIZATION_FAILED on every partition asked (offset -1), as for any group error
    (OffsetFetchResponse.groupError). bob may not describe "v1-fetch"; alice may and reads its
    offsets. Before, bob's v1 answer was an empty list of topics: no error, as if the group had
    no offsets (a consumer would then reset its position)."""
    commit = _commit(world)
    commit.group_id = "v1-fetch"
    commit.topics[0].partitions.add(partition_index=0, committed_offset=7)
    committed = OFFSETS(world.channel).OffsetCommit(
        commit, metadata=metadata(user("admin")), timeout=TIMEOUT
    )
    assert [p.error_code for t in committed.topics for p in t.partitions] == [0, 0]
    asked = request(
        9, 1, group_id="v1-fetch", topics=[{"name": "orders", "partition_indexes": [0, 1]}]
    )
    answers = {}
    for who in ("bob", "alice"):
        client = world.coordinator.kafka_client(user(who))
        try:
            answers[who] = client.call(asked)
        finally:
            client.close()
    assert {
        who: [
            (
                t.name,
                [
                    (p.partition_index, p.committed_offset, p.metadata, int(p.error_code))
                    for p in t.partitions
                ],
            )
            for t in a.topics
        ]
        for who, a in answers.items()
    } == {
        "bob": [("orders", [(0, -1, "", GROUP_AUTH), (1, -1, "", GROUP_AUTH)])],
        "alice": [("orders", [(0, 7, "", 0), (1, 9, "", 0)])],
    }


def test_a_refused_describe_user_scram_credentials_names_each_user_asked(world: World) -> None:
    """KafkaApis refuses DescribeUserScramCredentials (no DESCRIBE on the cluster) with the
    request's error response: CLUSTER_AUTHORIZATION_FAILED at the top and one result per user
    asked, each with the same error and no name (DescribeUserScramCredentialsRequest
    .getErrorResponse). Before, the results were empty. Asked for every user (null), none."""
    client = world.coordinator.kafka_client(user("bob"))
    try:
        named: Any = client.call(request(50, 0, users=[{"name": "alice"}, {"name": "carol"}]))
        every: Any = client.call(request(50, 0, users=None))
    finally:
        client.close()
    message = "Cluster authorization failed."
    refused = {"error_code": CLUSTER_AUTH, "error_message": message}
    assert named == wire.build(
        wire.response_class(50, 0), **refused, results=[{"user": "", **refused}] * 2
    )
    assert every == wire.build(wire.response_class(50, 0), **refused, results=[])
