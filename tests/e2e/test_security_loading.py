"""Authorization while the coordinator loads its store: the ACLs (and SCRAM credentials) are
records of the cluster log, replayed at start-up on a loader thread while the listeners already
accept connections. Until they are loaded, nothing may be decided on them: an empty or half
replayed set of ACLs would open every resource (``allow.everyone.if.no.acl.found=true``, the
default: no ACL yet) or refuse every one (``false``: GROUP_AUTHORIZATION_FAILED, fatal to the
clients of a coordinator that merely restarts).

As Kafka's StandardAuthorizer before its initial load (KIP-801: only super users are
authorized; a broker serves its clients once its metadata, ACLs included, is loaded): the
Kafka listener in front of a broker reads nothing of its connections until the ACLs are
loaded, so a forwarded Fetch waits and is then judged on every ACL (before: it went to the
broker unchecked, and its records came back to a client the ACLs refuse); the service layer
answers COORDINATOR_LOAD_IN_PROGRESS (retriable) where it would decide on ACLs.

The server is the real one (gRPC, a Kafka PLAINTEXT listener in front of
``fake_upstream.FakeCluster``, the runtime) in this process; its store, written by an earlier
run, is read by the loader only when the test opens a gate.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from fake_upstream import FakeCluster
from kafka.record.memory_records import MemoryRecordsBuilder
from kafka_support import KafkaClient, request
from serve_support import LoopThread

from coordinator.core.config import parse_config
from coordinator.runtime import CoordinatorRuntime, ManualClock
from coordinator.runtime.store import MemoryRecordStore
from coordinator.security.acls import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from coordinator.security.authorizer import AuthorizerConfig
from coordinator.security.metadata import AclCreation
from coordinator.server.app import CoordinatorServer, ServeOptions
from kip848.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    classic_group_pb2,
    classic_group_pb2_grpc,
    common_pb2,
    consumer_group_pb2,
    consumer_group_pb2_grpc,
)

SECRET_ID = uuid.UUID("00000000-0000-4000-8000-0000000000b2")
TIMEOUT = 10.0


def _acl(resource_type: ResourceType, name: str, principal: str) -> AclCreation:
    return AclCreation(
        binding=AclBinding(
            resource_type=resource_type,
            resource_name=name,
            pattern_type=PatternType.LITERAL,
            principal=principal,
            host="*",
            operation=AclOperation.ALL,
            permission_type=AclPermissionType.ALLOW,
        )
    )


def earlier_run() -> Any:
    """A store an earlier run wrote two ACLs to: topic ``secret`` and group ``payments`` are
    ``User:alice``'s, so anybody else is refused them."""

    async def run() -> Any:
        store = MemoryRecordStore()
        rt = CoordinatorRuntime(config=parse_config({}), store=store, clock=ManualClock(0))
        await rt.start()
        made = await rt.create_acls(
            [
                _acl(ResourceType.TOPIC, "secret", "User:alice"),
                _acl(ResourceType.GROUP, "payments", "User:alice"),
            ]
        )
        assert [c.error_code for c in made] == [0, 0]
        await rt.close()
        return store._data

    return asyncio.run(run())


class GatedStore(MemoryRecordStore):
    """The cluster log (the loader thread's first step) is read only once ``gate`` is set —
    or, ``groups``: the cluster log at once, the coordinator partitions once ``gate`` is set."""

    def __init__(self, data: Any, groups: bool = False) -> None:
        super().__init__(_data=data)
        self.groups = groups
        self.gate = threading.Event()
        self.reading = threading.Event()

    def _wait(self) -> None:
        self.reading.set()
        assert self.gate.wait(TIMEOUT), "the test never opened the gate"

    def load_snapshot(self, log: int) -> Any:
        if not self.groups:
            self._wait()
        return super().load_snapshot(log)

    def load_groups(self, partition: int) -> Any:
        if self.groups:
            self._wait()
        return super().load_groups(partition)


class Restarting:
    """The coordinator started over the earlier run's store, its load held at the gate."""

    def __init__(self, cluster: FakeCluster, allow_everyone: bool, groups: bool = False) -> None:
        self.store = GatedStore(earlier_run(), groups)
        self.thread = LoopThread()

        async def start() -> CoordinatorServer:
            runtime = CoordinatorRuntime(
                config=parse_config({}), store=self.store, clock=ManualClock(0)
            )
            options = ServeOptions(
                listen="127.0.0.1:0",
                clock="manual",
                kafka_listen="127.0.0.1:0",
                kafka_upstream=cluster.nodes[1].address,
                authorizer=AuthorizerConfig(allow_everyone_if_no_acl_found=allow_everyone),
            )
            server = CoordinatorServer(runtime, options)
            await server.start()
            return server

        self.server = self.thread.run(start(), TIMEOUT)
        self.loading = asyncio.run_coroutine_threadsafe(self.server.load(), self.thread.loop)
        assert self.store.reading.wait(TIMEOUT)  # the loader waits at the gate

    def open_gate(self) -> None:
        self.store.gate.set()
        self.loading.result(TIMEOUT)

    def close(self) -> None:
        self.store.gate.set()
        self.thread.run(self.server.stop(1.0), TIMEOUT)
        self.thread.close()


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    c = FakeCluster(data=True, topics={"secret": (SECRET_ID, 1)})
    c.add_node(1)
    try:
        builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 16)
        builder.append(timestamp=0, key=None, value=b"the secret")
        builder.close()
        c.logs[("secret", 0)].append(bytes(builder.buffer()))
        yield c
    finally:
        c.stop()


def _fetch() -> Any:
    return request(
        1,
        12,
        max_wait=0,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            {
                "topic": "secret",
                "partitions": [
                    {
                        "partition": 0,
                        "current_leader_epoch": -1,
                        "fetch_offset": 0,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                ],
            }
        ],
        forgotten_topics_data=[],
        rack_id="",
    )


def _fetched(resp: Any) -> list[tuple[str, int, int, bool]]:
    """(topic, partition, error, records came back) per answered partition."""
    return [
        (t.topic, p.partition_index, int(p.error_code), bool(p.records))
        for t in resp.responses
        for p in t.partitions
    ]


def _fetches_asked(cluster: FakeCluster) -> int:
    return sum(1 for key, _body in cluster.bodies if key == 1)


@pytest.mark.parametrize("allow_everyone", [True, False], ids=["open-default", "deny-default"])
def test_a_forwarded_fetch_during_the_load_waits_for_the_acls(
    cluster: FakeCluster, allow_everyone: bool
) -> None:
    """An anonymous client fetches ``secret`` (alice's) while the ACLs are not loaded yet: its
    request is read only once they are, and is refused then; the broker is never asked. Before:
    with no ACL replayed yet, the listener took the coordinator for open (or, deny by default,
    the loader thread's half-built ACLs were read from the loop) and forwarded the fetch, and
    the secret's records came back."""
    restarting = Restarting(cluster, allow_everyone)
    client = KafkaClient(restarting.server.kafka_address, client_id="early")
    try:
        client.send(_fetch())
        with pytest.raises(TimeoutError):
            client.read_frame(timeout=0.5)  # not read while the ACLs are not loaded
        assert _fetches_asked(cluster) == 0
        restarting.open_gate()
        answer = client.receive()
        assert _fetched(answer) == [("secret", 0, 29, False)]
        assert _fetches_asked(cluster) == 0
    finally:
        client.close()
        restarting.close()


def test_a_group_request_during_the_load_is_retried_not_refused(cluster: FakeCluster) -> None:
    """Deny by default: a heartbeat while the ACLs are not loaded is answered
    COORDINATOR_LOAD_IN_PROGRESS, which clients retry, as the runtime answers it while loading
    — not GROUP_AUTHORIZATION_FAILED (decided on no ACL at all), which clients take as fatal:
    a member of a coordinator that merely restarted would give up. Once loaded, the ACLs
    decide (the anonymous caller is not alice: refused)."""
    restarting = Restarting(cluster, allow_everyone=False)

    channel = grpc.insecure_channel(restarting.server.address)
    try:
        stub = consumer_group_pb2_grpc.ConsumerGroupServiceStub(channel)
        join = consumer_group_pb2.ConsumerGroupHeartbeatRequest(
            group_id="payments",
            member_epoch=0,
            rebalance_timeout_ms=30_000,
            subscribed_topic_names=common_pb2.TopicNames(names=[]),
            topic_partitions=common_pb2.TopicPartitionsList(),
        )
        early = stub.ConsumerGroupHeartbeat(join, timeout=TIMEOUT)
        assert early.error_code == 14, early
        restarting.open_gate()
        late = stub.ConsumerGroupHeartbeat(join, timeout=TIMEOUT)
        assert (late.error_code, late.error_message) == (
            30,
            "Not authorized to access group: payments",
        )
    finally:
        channel.close()
        restarting.close()


def test_find_coordinator_refuses_a_key_before_saying_the_coordinator_loads(
    cluster: FakeCluster,
) -> None:
    """Kafka's FindCoordinator authorizes each key (DESCRIBE on the group) before it looks for
    the key's coordinator. The ACLs loaded, the coordinator partitions still loading: the
    anonymous caller's key ``payments`` (alice's) is GROUP_AUTHORIZATION_FAILED, a key it may
    describe (no ACL names ``other``) COORDINATOR_NOT_AVAILABLE. Before: both were
    COORDINATOR_NOT_AVAILABLE ("The coordinator is loading"), the refusal only once loaded."""
    restarting = Restarting(cluster, allow_everyone=True, groups=True)
    channel = grpc.insecure_channel(restarting.server.address)
    try:
        stub = classic_group_pb2_grpc.ClassicGroupServiceStub(channel)
        find = classic_group_pb2.FindCoordinatorRequest(
            key_type=0, coordinator_keys=["payments", "other"]
        )
        answer = stub.FindCoordinator(find, timeout=TIMEOUT)
        assert [
            (c.key, c.node_id, c.host, c.port, c.error_code, c.error_message)
            for c in answer.coordinators
        ] == [
            ("payments", -1, "", -1, 30, "Not authorized to access group: payments"),
            ("other", -1, "", -1, 15, "The coordinator is loading."),
        ]
    finally:
        channel.close()
        restarting.close()


def test_describe_cluster_during_the_load_is_retried_not_refused(cluster: FakeCluster) -> None:
    """DescribeCluster needs DESCRIBE on the cluster, which no ACL of the earlier run names
    (open by default): asked while the ACLs are not loaded it is COORDINATOR_LOAD_IN_PROGRESS,
    as every request that needs an ACL decision (retriable), and once loaded it lists the node.
    Before: CLUSTER_AUTHORIZATION_FAILED, decided on no ACL at all, and the refusal was neither
    audited nor counted (tests/unit/test_server_authorization.py)."""
    restarting = Restarting(cluster, allow_everyone=True)
    channel = grpc.insecure_channel(restarting.server.address)
    try:
        stub = admin_pb2_grpc.AdminServiceStub(channel)
        early = stub.DescribeCluster(admin_pb2.DescribeClusterRequest(), timeout=TIMEOUT)
        assert (early.error_code, list(early.nodes)) == (14, [])
        restarting.open_gate()
        late = stub.DescribeCluster(admin_pb2.DescribeClusterRequest(), timeout=TIMEOUT)
        host, port = restarting.server.address.rsplit(":", 1)
        assert (late.error_code, [(n.host, n.port) for n in late.nodes]) == (0, [(host, int(port))])
    finally:
        channel.close()
        restarting.close()
