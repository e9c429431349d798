"""Two coordinator nodes while their PostgreSQL fails under load (docs/ha.md "Failure modes"):
``kip848.client`` members over gRPC, and librdkafka (KIP-848) and kafka-python (classic)
consumers over the Kafka listeners, commit without pause through both nodes while PostgreSQL
is killed and started again at once (a crash and restart), then killed and kept away for
longer than the lease.

What must hold: after the restart every group commits again, and no member saw more than
retriable errors (no commit failed for good, no partition lost); while PostgreSQL is away
nothing is acknowledged, and once the lease has run out the nodes answer NOT_COORDINATOR and
report NOT_SERVING (they lead nothing and cannot reach PostgreSQL); when it is back they
serve again; no acknowledged commit is lost and no partition's journal has an epoch that goes
down. Three nodes and PostgreSQL away past the lease: every partition is taken back, once, by
the node that led it before, and a node that died meanwhile has its partitions taken by the
others a lease after PostgreSQL is back. And PostgreSQL that stops acknowledging COMMITs: a node's waiting requests are answered
at its deadline (NOT_COORDINATOR) or, sooner, at the write timeout (``offsets.commit.timeout.ms``:
COORDINATOR_NOT_AVAILABLE), never held until PostgreSQL acknowledges again; while reads of
the cluster log (Metadata, DescribeAcls) are answered at once from its committed state. And
the cluster log written through both nodes while PostgreSQL crashes: every acknowledged topic
kept, a name raced for created once, both nodes following the log after.
"""

from __future__ import annotations

import contextlib
import logging
import re
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from cluster_support import (
    LEASE_MS,
    Nodes,
    PartitionGroups,
    Workers,
    commits_held,
    committed,
    journal_epochs,
    served,
    settings,
    simple_commit,
    until,
)
from grpc_health.v1 import health_pb2, health_pb2_grpc
from pg import PostgresServer

from coordinator.server.app import SHUTDOWN_GRACE_S
from kip848.v1 import admin_pb2, common_pb2, offsets_pb2, offsets_pb2_grpc

pytestmark = pytest.mark.slow

SETTINGS = settings(6)
TOPIC = "events"
GROUPS = [f"g{i}" for i in range(10)]
KAFKA_GROUPS = {"librdkafka": ["r0", "r1", "r2"], "kafka-python": ["p0", "p1", "p2"]}
"""KIP-848 consumers of librdkafka and classic ones of kafka-python, through the nodes' Kafka
listeners."""
RETRIABLE = (
    "COORDINATOR_NOT_AVAILABLE",
    "NOT_COORDINATOR",
    "COORDINATOR_LOAD_IN_PROGRESS",
    "KafkaTimeoutError",
)
"""What a Kafka client's synchronous commit may give up with. librdkafka returns the retriable
error it got. kafka-python's retries those errors itself for ``request_timeout_ms`` (5 s here)
in all, then raises KafkaTimeoutError (retriable in its own terms): PostgreSQL away past the
lease leaves the groups unserved for longer than that (the 3.5 s this test waits, PostgreSQL's
start, the nodes taking their partitions again: 5.1 s in a run at load 6.6), so a commit sent
as PostgreSQL went away may end so. That it was retriable answers, not a node that held a
request past the client's timeout, the workers' ``request-timeout`` events tell."""


@pytest.fixture
def own_pg() -> Iterator[PostgresServer]:
    """A PostgreSQL of this test alone: it is killed and started again."""
    server = PostgresServer().start()
    yield server
    server.stop()


def health(channel: grpc.Channel) -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    return stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status


def fetch(
    channel: grpc.Channel, group: str, *, stable: bool = False
) -> tuple[int, dict[tuple[str, int], int]]:
    """A gRPC OffsetFetch of ``group``: its error code and committed offsets."""
    stub = offsets_pb2_grpc.OffsetServiceStub(channel)
    resp = stub.OffsetFetch(
        offsets_pb2.OffsetFetchRequest(
            groups=[offsets_pb2.OffsetFetchRequest.Group(group_id=group)], require_stable=stable
        ),
        timeout=5,
    )
    answer = resp.groups[0]
    offsets = {
        (t.name, p.partition_index): p.committed_offset for t in answer.topics for p in t.partitions
    }
    return answer.error_code, offsets


def fetch_code(channel: grpc.Channel, group: str) -> int:
    return fetch(channel, group)[0]


def test_postgresql_restarted_and_away_longer_than_the_lease(
    own_pg: PostgresServer, tmp_path: Path
) -> None:
    dsn = own_pg.fresh_store_dsn()
    nodes = Nodes(tmp_path, dsn, *SETTINGS)
    for n in (1, 2):
        nodes.start(n)
    assert nodes.procs[1].create_topic(TOPIC, 2)
    workers = Workers(tmp_path)
    target = "ipv4:" + ",".join(nodes.procs[n].address for n in (1, 2))
    w = workers.start("kip848", kind="kip848", target=target, topic=TOPIC, groups=GROUPS)
    kafka = ",".join(nodes.kafka_address(n) for n in (1, 2))
    for kind, groups in KAFKA_GROUPS.items():
        workers.start(kind, kind=kind, topic=TOPIC, groups=groups, bootstrap=kafka)
    try:
        workers.wait_acked_after(time.monotonic(), timeout=60)

        # A crash and an immediate restart of PostgreSQL: nodes reconnect, groups carry on.
        own_pg.restart(crash=True)
        restarted_at = time.monotonic()
        workers.wait_acked_after(restarted_at, timeout=30)

        # Away for longer than the lease: nothing acknowledged, then NOT_COORDINATOR and
        # NOT_SERVING from every node.
        own_pg.kill()
        killed_at = time.monotonic()
        time.sleep(LEASE_MS / 1000 + 1.5)
        for n in (1, 2):
            channel = nodes.procs[n].channel
            assert health(channel) == health_pb2.HealthCheckResponse.NOT_SERVING
            assert {fetch_code(channel, g) for g in GROUPS} == {16}  # NOT_COORDINATOR
        away = [e for e in workers.events("ack") if e["t"] > killed_at + 0.2]
        assert away == []

        own_pg.start_again()
        back_at = time.monotonic()
        workers.wait_acked_after(back_at, timeout=30)
        deadline = time.monotonic() + 15
        while not all(
            health(nodes.procs[n].channel) == health_pb2.HealthCheckResponse.SERVING for n in (1, 2)
        ):
            assert time.monotonic() < deadline, "the nodes never reported SERVING again"
            time.sleep(0.1)
    except BaseException:
        workers.kill_all()
        nodes.stop_all()
        raise
    workers.stop_all()

    assert workers.events("lost") == [] and workers.events("error") == []
    assert w.of("commit-error") == []  # every failure was retriable, and retried
    # The Kafka clients' synchronous commits give up with the retriable error they last got
    # (the workers send the next one): never another kind of error.
    errors = workers.events("commit-error")
    print(f"{len(errors)} retriable commit errors: {sorted({e['error'][:80] for e in errors})}")
    for e in errors:
        assert any(name in e["error"] for name in RETRIABLE), e
    # Every request was answered within the client's request timeout, PostgreSQL away or not
    # (a write held up in PostgreSQL is answered NOT_COORDINATOR once its partition is dropped).
    assert workers.events("request-timeout") == []
    channels: dict[str, grpc.Channel] = {}

    def channel_for(address: str) -> grpc.Channel:
        return channels.setdefault(address, grpc.insecure_channel(address))

    for group in workers.groups():
        acked = [e["offset"] for e in workers.events("ack") if e["group"] == group]
        sent = {e["offset"] for e in workers.events("sent") if e["group"] == group}
        for tp, offset in committed(nodes.procs[1], group, channel_for).items():
            assert offset >= acked[-1] and offset in sent, (group, tp, offset, acked[-1])
    for log, epochs in journal_epochs(dsn).items():
        assert epochs == sorted(epochs), (log, epochs)
    nodes.stop_all()
    for ch in channels.values():
        ch.close()


def test_after_postgresql_away_past_the_lease_each_partition_goes_back_to_its_node(
    own_pg: PostgresServer, tmp_path: Path
) -> None:
    """Three nodes, nine partitions, a group committed in each. PostgreSQL killed and kept
    away past the lease (every node drops its partitions), then started again: the first node
    back does not take the others' partitions (they were cut off by the same outage, not
    dead): each partition is taken back by the node that led it before, once — its leader
    epoch one higher, its journal's epochs in offset order the old one then that one, nothing
    handed over, nothing moved by the controller. Then again with node 3 killed -9 while
    PostgreSQL is away: nodes 1 and 2 take their own back, and node 3's go to them, once each,
    a lease after PostgreSQL is back (node 3 may have come back by then)."""
    dsn = own_pg.fresh_store_dsn()
    nodes = Nodes(tmp_path, dsn, *settings(9))
    for n in (1, 2, 3):
        nodes.start(n)
    node1 = nodes.procs[1]
    assert node1.create_topic(TOPIC, 1)
    groups = PartitionGroups(9, TOPIC)

    def commit_all(offset: int) -> None:
        groups.commit_all(node1, offset)

    def settled() -> dict[int, tuple[int, int]] | None:
        now = served(dsn)
        if now is None or sorted(Counter(n for n, _ in now.values()).values()) != [3, 3, 3]:
            return None
        return now

    def away(kill9: int | None = None) -> tuple[float, dict[int, int]]:
        """PostgreSQL killed (and node ``kill9`` with it), back after the lease and 1.5 s:
        when it was back, and where each node's log was then."""
        own_pg.kill()
        if kill9 is not None:
            nodes.kill9(kill9)
        time.sleep(LEASE_MS / 1000 + 1.5)
        marks = {n: len(nodes.log_text(n)) for n in (1, 2, 3)}
        own_pg.start_again()
        return time.monotonic(), marks

    try:
        until(lambda: settled() is not None, "three partitions served by each node", 60)
        commit_all(1)
        before = settled()
        assert before is not None

        back, marks = away()
        until(lambda: served(dsn) is not None, "every partition served again", 20)
        took = time.monotonic() - back
        time.sleep(LEASE_MS / 1000 + 1)  # past the wait for nodes expected back
        assert served(dsn) == {p: (n, e + 1) for p, (n, e) in before.items()}
        after_outage = "".join(nodes.log_text(n)[marks[n] :] for n in (1, 2, 3))
        assert "hands partition" not in after_outage, after_outage
        assert re.search(r"Controller \d+: partition", after_outage) is None, after_outage
        commit_all(2)
        epochs = journal_epochs(dsn)
        for p, (_, e) in before.items():
            assert list(dict.fromkeys(epochs[p])) == [e, e + 1], (p, epochs[p])
        print(f"PostgreSQL back -> every partition served by its node: {took:.2f} s")

        before = served(dsn)
        assert before is not None
        back, _ = away(kill9=3)
        until(lambda: served(dsn) is not None, "every partition served again", LEASE_MS / 1000 + 20)
        took = time.monotonic() - back
        after = served(dsn)
        assert after is not None
        for p, (n, e) in before.items():  # taken once: by its node, or node 3's by 1 or 2
            assert after[p][1] == e + 1, (p, before[p], after[p])
            assert after[p][0] == n or (n == 3 and after[p][0] in (1, 2)), (p, after[p])
        controller_log = "".join(nodes.log_text(n) for n in (1, 2))
        assert "nodes 3 did not come back within the lease" in controller_log
        commit_all(3)
        assert groups.committed_all(node1) == {g: {(TOPIC, 0): 3} for g in groups.groups.values()}
        print(f"... node 3 gone meanwhile: every partition served after {took:.2f} s")
    finally:
        nodes.stop_all()
        groups.close()
    for log, epochs_of in journal_epochs(dsn).items():
        assert epochs_of == sorted(epochs_of), (log, epochs_of)


def test_a_commit_held_up_in_postgresql_is_answered_when_its_partition_is_dropped(
    own_pg: PostgresServer, tmp_path: Path
) -> None:
    """PostgreSQL stops acknowledging COMMITs: a commit's write waits in PostgreSQL, and so do
    the node's lease renewals. When the node's deadline passes it drops its partitions, and
    the commit waiting for its write is answered NOT_COORDINATOR then, within the lease (as
    Kafka's unload fails the writes it waits for), not held until PostgreSQL acknowledges
    again. Once it does, the node serves again. (The write timeout, 5 s by default, is longer
    than the lease here: the drop answers first.)"""
    nodes = Nodes(tmp_path, own_pg.fresh_store_dsn(), *SETTINGS)
    node = nodes.start(1)
    try:
        node.create_topic(TOPIC, 1)
        until(lambda: simple_commit(node.channel, "g", 1) == {0}, "a first commit")
        with commits_held(own_pg):
            started = time.monotonic()
            codes = simple_commit(node.channel, "g", 2, timeout=30)
            took = time.monotonic() - started
        assert codes == {16}, codes  # NOT_COORDINATOR: ask FindCoordinator again
        # Within the lease (the node's deadline) and well within a client's request timeout
        # (5 s in these tests), not once PostgreSQL acknowledged again (30 s here).
        assert took < LEASE_MS / 1000 + 2.5, took
        until(lambda: simple_commit(node.channel, "g", 3) == {0}, "the node to serve again", 30)
        assert committed(node, "g", lambda _address: node.channel) == {(TOPIC, 0): 3}
    finally:
        nodes.stop_all()


def test_a_node_stopped_while_postgresql_holds_its_commit_exits_in_bounded_time(
    own_pg: PostgresServer, tmp_path: Path
) -> None:
    """SIGTERM while PostgreSQL does not acknowledge COMMITs (a synchronous standby gone) and a
    commit of the node waits in it: the node gives the write up and exits (code 1, said in its
    log) within the shutdown grace and two leases, as if it crashed — PostgreSQL decides the
    write's outcome and the next leader loads what it kept. Before, the hand-over waited for
    the write for as long as PostgreSQL held it (the process outlived the test's 25 s)."""
    nodes = Nodes(tmp_path, own_pg.fresh_store_dsn(), *SETTINGS)
    node = nodes.start(1)
    log_of = node.stderr_path
    try:
        node.create_topic(TOPIC, 1)
        until(lambda: simple_commit(node.channel, "g", 1) == {0}, "a first commit")
        with commits_held(own_pg):
            answers: list[set[int] | str] = []

            def commit() -> None:
                try:
                    answers.append(simple_commit(node.channel, "g", 2, timeout=30))
                except grpc.RpcError as exc:
                    answers.append(str(exc.code()))  # cut off by the exit

            committing = threading.Thread(target=commit, daemon=True)
            committing.start()
            time.sleep(0.5)  # the commit's write waits in PostgreSQL
            started = time.monotonic()
            node.signal(signal.SIGTERM)
            code = node.proc.wait(timeout=25)
            took = time.monotonic() - started
            committing.join(10)
        assert code == 1
        assert took < SHUTDOWN_GRACE_S + 2 * LEASE_MS / 1000 + 3, took
        # Retriable (COORDINATOR_NOT_AVAILABLE at the write timeout), never acknowledged.
        assert answers in ([{15}], [{16}], ["StatusCode.UNAVAILABLE"]), answers
        assert "exiting without them" in log_of.read_text()
        nodes.procs.pop(1).wait()
        # PostgreSQL kept the held commit (acknowledged again now): the next node loads it.
        again = nodes.start(1)
        until(lambda: simple_commit(again.channel, "g", 3) == {0}, "the node to serve again", 30)
        assert committed(again, "g", lambda _address: again.channel) == {(TOPIC, 0): 3}
    finally:
        nodes.stop_all()


WRITE_TIMEOUT_MS = 1_000


def single_node_settings(**more: object) -> tuple[str, ...]:
    """One node whose lease (20 s) is far longer than its write timeout (1 s)."""
    return settings(
        6,
        coordinator_lease_ms=20_000,
        coordinator_heartbeat_interval_ms=1_000,
        offsets_commit_timeout_ms=WRITE_TIMEOUT_MS,
        **more,
    )


class Lines(logging.Handler):
    """Keeps the messages logged to it."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__()
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_a_single_nodes_commit_held_up_in_postgresql_is_answered_at_the_write_timeout(
    own_pg: PostgresServer, tmp_path: Path
) -> None:
    """One node, with a lease far longer than its write timeout (``offsets.commit.timeout.ms``
    1 s here): PostgreSQL stops acknowledging COMMITs, and a confluent-kafka consumer's
    synchronous commit is answered COORDINATOR_NOT_AVAILABLE (retriable) at the write timeout,
    as Kafka answers a write not replicated in time — not held until PostgreSQL acknowledges
    again, nor until the lease runs out. Once PostgreSQL acknowledges, the held write lands
    (its offset stands) and the node commits and fetches as before, without having dropped
    its partitions."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    librdkafka_log = logging.getLogger("test.librdkafka")
    librdkafka_log.propagate = False
    librdkafka_log.setLevel(logging.DEBUG)
    lines: list[str] = []
    librdkafka_log.addHandler(Lines(lines))
    nodes = Nodes(tmp_path, own_pg.fresh_store_dsn(), *single_node_settings())
    node = nodes.start(1)
    consumer = Consumer(
        {
            "bootstrap.servers": nodes.kafka_address(1),
            "group.id": "g",
            "enable.auto.commit": False,
            "socket.timeout.ms": 10_000,
            "debug": "protocol",  # each response's round trip, as librdkafka measured it
            "logger": librdkafka_log,
        }
    )
    try:
        node.create_topic(TOPIC, 1)

        def commit(offset: int) -> None:
            consumer.commit(offsets=[TopicPartition(TOPIC, 0, offset)], asynchronous=False)

        commit(1)
        with commits_held(own_pg):
            started = time.monotonic()
            with pytest.raises(KafkaException) as info:
                commit(2)
            took = time.monotonic() - started
            fetched_meanwhile = fetch(node.channel, "g")
            fetch_started = time.monotonic()
            stable_meanwhile = fetch(node.channel, "g", stable=True)[0]
            stable_took = time.monotonic() - fetch_started

        consumer.poll(0.5)  # serves librdkafka's log lines queued meanwhile
        round_trips = [
            float(m.group(1)) / 1000
            for line in lines
            if (m := re.search(r"Received OffsetCommitResponse .* rtt ([0-9.]+)ms", line))
        ]
        print(f"commit raised after {took:.2f} s; OffsetCommit round trips {round_trips}")
        error = info.value.args[0]
        # A retriable error of Kafka's protocol: librdkafka looks the coordinator up again and
        # hands the error to the application, which commits again.
        assert error.code() == KafkaError.COORDINATOR_NOT_AVAILABLE, error
        # librdkafka sent the commit again on each answer (it retries an OffsetCommit twice,
        # then the commit once more): each was answered at the write timeout.
        held_trips = round_trips[1:]  # the first: commit(1), acknowledged at once
        assert round_trips[0] < WRITE_TIMEOUT_MS / 1000 and held_trips, round_trips
        for rtt in held_trips:
            assert WRITE_TIMEOUT_MS / 1000 - 0.01 <= rtt < WRITE_TIMEOUT_MS / 1000 + 1.0, rtt
        assert took < len(held_trips) * (WRITE_TIMEOUT_MS / 1000 + 1.0), took
        # A plain OffsetFetch reads the committed state at once (Kafka's read operation): the
        # acknowledged offset 1, never the held 2. A stable one (Kafka runs it as a write
        # without records) waits for the group's held write and gets NOT_COORDINATOR (16,
        # OffsetFetch's remap of a write timeout, as Kafka's) at the write timeout.
        assert fetched_meanwhile == (0, {(TOPIC, 0): 1})
        assert stable_meanwhile == 16
        assert WRITE_TIMEOUT_MS / 1000 - 0.01 <= stable_took < WRITE_TIMEOUT_MS / 1000 + 1.0
        # PostgreSQL acknowledges again: the held write landed, the node serves as before.
        until(lambda: committed(node, "g", lambda _a: node.channel) == {(TOPIC, 0): 2}, "it")
        commit(3)
        assert consumer.committed([TopicPartition(TOPIC, 0)], timeout=10)[0].offset == 3
        assert health(node.channel) == health_pb2.HealthCheckResponse.SERVING
        log = nodes.log_text(1)
        assert "stops serving partitions" not in log, log  # its partitions were never dropped
        assert "has not completed after 1000 ms (offsets.commit.timeout.ms)" in log, log
    finally:
        consumer.close()
        nodes.stop_all()


def held_acl() -> tuple[Any, Any]:
    """confluent-kafka's ACL User:alice may READ topic "held", and a filter of every ACL."""
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    any_acl = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    held = AclBinding(
        ResourceType.TOPIC,
        "held",
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    return held, any_acl


def kafka_admin(nodes: Nodes, node_id: int) -> Any:
    """confluent-kafka's AdminClient on the node's Kafka listener."""
    from confluent_kafka.admin import AdminClient

    return AdminClient(
        {"bootstrap.servers": nodes.kafka_address(node_id), "socket.timeout.ms": 10_000}
    )


def test_cluster_log_writes_held_up_in_postgresql_are_answered_request_timed_out(
    own_pg: PostgresServer, tmp_path: Path
) -> None:
    """One node (``offsets.commit.timeout.ms`` 1 s, a lease far longer): PostgreSQL stops
    acknowledging COMMITs, and the requests whose writes go to the cluster log are answered
    REQUEST_TIMED_OUT, as Kafka's controller answers a metadata write that did not complete in
    time: a gRPC CreateTopics at its own ``timeout_ms`` (0.5 s here), confluent-kafka's
    AdminClient ``create_acls`` over the Kafka listener at the write timeout, each with a
    message saying the outcome is unknown. Once PostgreSQL acknowledges, both held writes land:
    the topic and the ACL exist."""
    from confluent_kafka import KafkaError, KafkaException

    nodes = Nodes(
        tmp_path,
        own_pg.fresh_store_dsn(),
        # The ACL created below must not lock the test out.
        *single_node_settings(super_users="User:ANONYMOUS"),
    )
    node = nodes.start(1)
    admin = kafka_admin(nodes, 1)
    binding, everything = held_acl()
    try:
        node.create_topic(TOPIC, 1)
        # Connected, with the cluster's metadata: librdkafka asks for it before an admin
        # request (answered at once behind a held write, but after the connection's earlier
        # requests: a connection answers in request order).
        assert admin.describe_acls(everything, request_timeout=10).result(timeout=10) == []
        with commits_held(own_pg):
            started = time.monotonic()
            created = node.admin.CreateTopics(
                admin_pb2.CreateTopicsRequest(
                    topics=[
                        admin_pb2.CreateTopicsRequest.CreatableTopic(name="held", num_partitions=2)
                    ],
                    timeout_ms=500,
                ),
                timeout=10,
            )
            create_took = time.monotonic() - started
            started = time.monotonic()
            (acl_future,) = admin.create_acls([binding], request_timeout=10).values()
            with pytest.raises(KafkaException) as info:
                acl_future.result(timeout=10)
            acl_took = time.monotonic() - started
        print(f"CreateTopics answered after {create_took:.2f} s, CreateAcls after {acl_took:.2f} s")
        # gRPC: in-band REQUEST_TIMED_OUT (the topic RPCs answer it request-level).
        assert created.error_code == common_pb2.REQUEST_TIMED_OUT, created
        assert "timeout_ms (500 ms)" in created.error_message, created
        assert "outcome is unknown" in created.error_message, created
        assert 0.49 <= create_took < 0.5 + 1.0, create_took
        # The Kafka listener: librdkafka hands the ACL's REQUEST_TIMED_OUT to the application.
        error = info.value.args[0]
        assert error.code() == KafkaError.REQUEST_TIMED_OUT, error
        assert "outcome is unknown" in error.str(), error
        assert WRITE_TIMEOUT_MS / 1000 - 0.01 <= acl_took < WRITE_TIMEOUT_MS / 1000 + 1.0, acl_took

        # PostgreSQL acknowledges again: both held writes landed and stand.
        def topics() -> dict[str, int]:
            listed = node.admin.ListTopics(admin_pb2.ListTopicsRequest(), timeout=10)
            return {t.name: t.num_partitions for t in listed.topics}

        until(lambda: topics() == {TOPIC: 1, "held": 2}, "the held CreateTopics to land")
        until(  # a batch of its own, after the topic's: read once it is durable
            lambda: (
                admin.describe_acls(everything, request_timeout=10).result(timeout=10) == [binding]
            ),
            "the held CreateAcls to land",
        )
        log = nodes.log_text(1)
        assert "stops serving partitions" not in log, log
        assert "answered REQUEST_TIMED_OUT; the write goes on" in log, log
    finally:
        admin = None  # librdkafka's handles go before the node they would retry
        nodes.stop_all()


def test_metadata_and_cluster_log_reads_are_answered_at_once_behind_a_held_write(
    own_pg: PostgresServer, tmp_path: Path
) -> None:
    """One node, coordinator-only (no upstream: its Kafka listener answers Metadata from the
    topic registry), ``offsets.commit.timeout.ms`` 1 s. PostgreSQL stops acknowledging COMMITs
    while a gRPC CreateTopics (``timeout_ms`` 20 s: the listener serves no CreateTopics without
    an upstream) and a CreateAcls of another confluent-kafka AdminClient (a connection answers
    in request order, as Kafka's) are in flight: Metadata
    (``list_topics``, all topics and one by name) and DescribeAcls are answered at once with
    the cluster log's committed state — the topic that exists, not the held one — as Kafka's
    broker answers from its metadata cache (before, they waited the write timeout, and Metadata
    then listed no topics). Once PostgreSQL acknowledges, the CreateTopics is answered and the
    next Metadata lists the new topic."""
    nodes = Nodes(
        tmp_path,
        own_pg.fresh_store_dsn(),
        *single_node_settings(super_users="User:ANONYMOUS"),  # the ACL must not lock us out
    )
    node = nodes.start(1)
    admin, writer = kafka_admin(nodes, 1), kafka_admin(nodes, 1)
    binding, everything = held_acl()

    def topics(**named: str) -> tuple[dict[str, int], float]:
        """The topics Metadata lists (``topic=``: asked by name), and how long it took."""
        started = time.monotonic()
        listed = admin.list_topics(timeout=10, **named)
        took = time.monotonic() - started
        return {n: len(t.partitions) for n, t in listed.topics.items() if t.error is None}, took

    def acls() -> tuple[list[Any], float]:
        started = time.monotonic()
        found = admin.describe_acls(everything, request_timeout=10).result(timeout=10)
        return found, time.monotonic() - started

    try:
        node.create_topic(TOPIC, 3)
        assert topics()[0] == {TOPIC: 3}
        assert acls()[0] == []
        assert writer.list_topics(timeout=10).topics.keys() == {TOPIC}  # connected
        created: list[admin_pb2.CreateTopicsResponse] = []

        def create() -> None:
            topic = admin_pb2.CreateTopicsRequest.CreatableTopic(name="held", num_partitions=2)
            request = admin_pb2.CreateTopicsRequest(topics=[topic], timeout_ms=20_000)
            created.append(node.admin.CreateTopics(request, timeout=30))

        creating = threading.Thread(target=create, daemon=True)
        with commits_held(own_pg):
            creating.start()
            (acl_creating,) = writer.create_acls([binding], request_timeout=10).values()
            time.sleep(0.2)  # both in flight, their COMMIT waiting in PostgreSQL
            assert creating.is_alive() and not acl_creating.done()
            listed, list_took = topics()
            named, named_took = topics(topic=TOPIC)
            described, describe_took = acls()
            assert creating.is_alive() and not acl_creating.done()  # the reads did not wait
        print(
            f"Metadata answered after {list_took:.3f} s (by name {named_took:.3f} s), "
            f"DescribeAcls after {describe_took:.3f} s, behind a held CreateTopics"
        )
        assert listed == {TOPIC: 3}, listed
        assert named == {TOPIC: 3}, named
        assert described == [], described
        for took in (list_took, named_took, describe_took):
            assert took < WRITE_TIMEOUT_MS / 1000 / 2, took
        # PostgreSQL acknowledges again: the CreateTopics is answered, and the next Metadata
        # lists its topic (its writer reads its own change).
        creating.join(30)
        assert [t.error_code for t in created[0].topics] == [0], created
        assert topics()[0] == {TOPIC: 3, "held": 2}
        with contextlib.suppress(Exception):  # REQUEST_TIMED_OUT if held past 1 s: it landed
            acl_creating.result(timeout=10)
        until(lambda: acls()[0] == [binding], "the held CreateAcls to land")
    finally:
        admin = writer = None  # librdkafka's handles go before the node they would retry
        nodes.stop_all()


def test_cluster_log_writes_through_both_nodes_survive_postgresql_crashes(
    own_pg: PostgresServer, tmp_path: Path
) -> None:
    """Two nodes create topics without pause — each its own names, and both the same names at
    once — while PostgreSQL is killed (-9) and started again, twice. Every answer is
    definitive (created, TOPIC_ALREADY_EXISTS) or retriable (REQUEST_TIMED_OUT, a top-level
    COORDINATOR_NOT_AVAILABLE), never a gRPC error; a name both nodes raced for was created
    by one of them only; every topic whose creation was acknowledged is in the cluster log
    with the id it was answered with; the cluster log's journal has no gap; both nodes then
    list exactly the log's topics, and each creates a topic at once (none is left behind the
    log, refused for good)."""
    import psycopg

    from coordinator.core import codec
    from coordinator.core.model import topic_id_to_bytes
    from coordinator.core.records import TopicKey

    dsn = own_pg.fresh_store_dsn()
    nodes = Nodes(tmp_path, dsn, *settings(2))
    stop = threading.Event()
    answers: list[tuple[int, str, int | str, bytes]] = []
    failures: list[BaseException] = []

    def create(node_id: int) -> None:
        admin = nodes.procs[node_id].admin
        i = 0
        while not stop.is_set():
            name = f"shared-{i // 2}" if i % 2 else f"node{node_id}-{i // 2}"
            i += 1
            try:
                resp = admin.CreateTopics(
                    admin_pb2.CreateTopicsRequest(
                        topics=[
                            admin_pb2.CreateTopicsRequest.CreatableTopic(
                                name=name, num_partitions=1
                            )
                        ],
                        timeout_ms=3000,
                    ),
                    timeout=10,
                )
            except BaseException as exc:  # noqa: BLE001 - reported below
                failures.append(exc)
                return
            if resp.topics:
                (topic,) = resp.topics
                answers.append((node_id, name, topic.error_code, topic.topic_id))
            else:
                answers.append((node_id, name, f"top-level {resp.error_code}", b""))
                time.sleep(0.05)

    try:
        for n in (1, 2):
            nodes.start(n)
        threads = [threading.Thread(target=create, args=(n,)) for n in (1, 2)]
        for t in threads:
            t.start()
        for _ in range(2):
            time.sleep(1.5)
            own_pg.restart(crash=True)
        time.sleep(1.5)
        stop.set()
        for t in threads:
            t.join(timeout=30)
        assert failures == [] and not any(t.is_alive() for t in threads)
        codes = Counter(code for _, _, code, _ in answers)
        assert set(codes) <= {0, 36, 7, "top-level 15"}, codes
        assert codes[0] > 20 and codes["top-level 15"] + codes[7] > 0, codes
        created = [(name, topic_id) for _, name, code, topic_id in answers if code == 0]
        names = [name for name, _ in created]
        assert len(names) == len(set(names)), Counter(names).most_common(3)

        def logged() -> dict[str, bytes]:
            with psycopg.connect(dsn) as conn:
                rows = conn.execute(
                    "SELECT key, value FROM kip848_compacted WHERE log = -1"
                ).fetchall()
            records = [codec.decode(bytes(k), bytes(v)) for k, v in rows]
            return {
                r.key.name: topic_id_to_bytes(r.value.topic_id)
                for r in records
                if isinstance(r.key, TopicKey)
            }

        topics = logged()
        assert {name: topics.get(name) for name, _ in created} == dict(created)
        assert {name for _, name, code, _ in answers if code == 36} <= set(topics)

        def listed(node_id: int) -> set[str]:
            resp = nodes.procs[node_id].admin.ListTopics(admin_pb2.ListTopicsRequest(), timeout=5)
            return {t.name for t in resp.topics}

        until(lambda: listed(1) == listed(2) == set(topics), "both nodes to list the log's topics")
        for n in (1, 2):
            nodes.procs[n].create_topic(f"after-{n}", 1)
        with psycopg.connect(dsn) as conn:
            offsets = [
                int(r[0])
                for r in conn.execute(
                    'SELECT "offset" FROM kip848_journal WHERE log = -1 ORDER BY "offset"'
                )
            ]
        assert offsets == list(range(len(offsets)))
        print(f"answers {dict(codes)}, {len(topics)} topics")
    finally:
        stop.set()
        nodes.stop_all()
