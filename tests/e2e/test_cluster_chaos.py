"""An HA chaos rehearsal (docs/ha.md "How it is tested"): three nodes on a PostgreSQL of the
test's own, a group of two members in every coordinator partition — KIP-848 consumers of
confluent-kafka and classic ones of kafka-python through the nodes' Kafka listeners, and
``kip848.client`` members over gRPC — committing without pause, while faults come one after
another, each bounded: ``kill -9`` of the node leading the most groups, the controller paused
(SIGSTOP) past its lease then resumed (a zombie, asked over both listeners while stopped), a
node's writer connection cut by ``pg_terminate_backend`` while it appends, then every
connection it has, another node alone cut off from PostgreSQL past its lease (a proxy between
them resets and refuses its connections) then healed, PostgreSQL restarted (fast shutdown) and crashed (``kill -9`` of the
postmaster), and a rolling restart of every node. One node runs with a monotonic clock of its
own (a time namespace, 58 days ahead): nothing compares clocks between nodes.

What must hold, after each fault and at the end: every group commits again within a bound
(the longest any group went without an acknowledged commit across each fault: printed); no
partition of a group is owned by two members at once (the members' own assign/revoke
callbacks, on the machine's one monotonic clock); every acknowledged commit is in its
partition's journal and each partition's final offset is its last acknowledged commit or a
later one sent; epochs never go down as clients see them (the members' epochs, and each
group's epoch or generation described through FindCoordinator, polled throughout) nor in a
partition's journal (leader epochs); the zombie answers what it was asked while stopped
NOT_COORDINATOR (FindCoordinator: never itself) and writes none of it; no node serves a
partition it does not lead; no traceback in any node's log.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest
from cluster_support import (
    LEASE_MS,
    CutProxy,
    Nodes,
    Workers,
    commit_answer,
    commit_epochs,
    committed,
    describe_cluster,
    journal_epochs,
    served,
    settings,
    until,
)
from grpc_health.v1 import health_pb2, health_pb2_grpc
from kafka_support import KafkaClient, request
from pg import PostgresServer

from coordinator.routing import partition_for
from kip848.v1 import (
    classic_group_pb2,
    classic_group_pb2_grpc,
    consumer_group_pb2,
    consumer_group_pb2_grpc,
)

pytestmark = pytest.mark.slow

P = 12
SETTINGS = settings(
    P, group_consumer_min_heartbeat_interval_ms=500, group_consumer_heartbeat_interval_ms=500
)
TOPIC = "events"


def group_in(partition: int, prefix: str) -> str:
    """The first group named ``PREFIXi`` that coordinator partition ``partition`` holds."""
    return next(
        f"{prefix}{i}" for i in itertools.count() if partition_for(f"{prefix}{i}", P) == partition
    )


# A group in every coordinator partition: each node leads some, whatever the balancer did.
KAFKA_GROUPS = [group_in(p, "r") for p in range(4)]
GRPC_GROUPS = [group_in(p, "k") for p in range(4, 10)]
CLASSIC_GROUPS = [group_in(p, "p") for p in range(10, 12)]
EVENTS = ("assign", "revoke", "lost", "ack", "sent", "commit-error", "error")
CONVERGE_S = LEASE_MS / 1000 + 8.0
"""Every group commits again within the lease, a load, and a few of the clients' retries."""


@pytest.fixture
def own_pg() -> Iterator[PostgresServer]:
    """A PostgreSQL of this test alone: it is restarted and crashed."""
    server = PostgresServer().start()
    yield server
    server.stop()


def tcp_ports(pid: int) -> set[int]:
    """Local ports of the TCP sockets process ``pid`` has open (from /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def cut_connections(admin_dsn: str, pid: int, *names: str) -> int:
    """``pg_terminate_backend`` of node process ``pid``'s connections of ``application_name``
    in ``names`` (``kip848``: the writer; ``-reader``, ``-leases``, ``-listen``); how many
    were ended."""
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = ANY(%s) AND client_port = ANY(%s)",
            (list(names), sorted(tcp_ports(pid))),
        ).fetchall()
    return sum(1 for (ok,) in rows if ok)


class EpochPoller:
    """Describes every group through FindCoordinator, asked of a node drawn at random, as a
    monitoring client would, from start to stop: (t, group epoch, address) per group."""

    def __init__(self, nodes: Nodes, groups: list[str]) -> None:
        self.nodes = nodes
        self.groups = groups
        self.seen: dict[str, list[tuple[float, int, str]]] = defaultdict(list)
        self.channels: dict[str, grpc.Channel] = {}
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def channel(self, address: str) -> grpc.Channel:
        return self.channels.setdefault(address, grpc.insecure_channel(address))

    def _run(self) -> None:
        rng = random.Random(7)
        while not self.stopped.wait(0.1):
            addresses = [s.address for s in list(self.nodes.procs.values())]
            for group in self.groups:
                with_node = rng.choice(addresses)
                try:
                    found = classic_group_pb2_grpc.ClassicGroupServiceStub(
                        self.channel(with_node)
                    ).FindCoordinator(
                        classic_group_pb2.FindCoordinatorRequest(
                            key_type=0, coordinator_keys=[group]
                        ),
                        timeout=1,
                    )
                    c = found.coordinators[0]
                    if c.error_code:
                        continue
                    address = f"{c.host}:{c.port}"
                    epoch = self._epoch(group, self.channel(address))
                except grpc.RpcError:
                    continue
                if epoch is not None:
                    self.seen[group].append((time.monotonic(), epoch, address))

    @staticmethod
    def _epoch(group: str, channel: grpc.Channel) -> int | None:
        """A consumer group's epoch, or a classic group's generation (None: not answered)."""
        if group in CLASSIC_GROUPS:
            classic = classic_group_pb2_grpc.ClassicGroupServiceStub(channel).DescribeGroups(
                classic_group_pb2.DescribeGroupsRequest(group_ids=[group]), timeout=1
            )
            (d,) = classic.groups
            return d.generation_id if classic.error_code == 0 and d.error_code == 0 else None
        resp = consumer_group_pb2_grpc.ConsumerGroupServiceStub(channel).ConsumerGroupDescribe(
            consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=[group]), timeout=1
        )
        (g,) = resp.groups
        return g.group_epoch if resp.error_code == 0 and g.error_code == 0 else None

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(10)
        for ch in self.channels.values():
            ch.close()


def leaders(dsn: str) -> dict[int, int]:
    """partition -> its leading node (partitions nobody leads left out)."""
    return {
        p["partition"]: p["leader"]
        for p in describe_cluster(dsn)["partitions"]
        if p["leader"] is not None
    }


def ownership_overlaps(events: list[dict[str, Any]], until_t: float) -> list[tuple]:
    """(group, partition, member, other member, when) for every moment two members of a group
    held one partition at once, from their assign/revoke/lost callbacks (in time order)."""
    owner: dict[tuple[str, tuple], tuple[str, float]] = {}
    overlaps = []
    for e in events:
        if e["t"] > until_t:
            break
        for tp in map(tuple, e["partitions"]):
            key = (e["group"], tp)
            if e["event"] == "assign":
                if key in owner and owner[key][0] != e["member"]:
                    overlaps.append((*key, owner[key][0], e["member"], e["t"]))
                owner[key] = (e["member"], e["t"])
            elif key in owner and owner[key][0] == e["member"]:
                del owner[key]
    return overlaps


OTHER_CLOCK = ("unshare", "--time", "--monotonic", "5000000", "--boottime", "5000000")
"""A command giving a process a monotonic clock of its own, 58 days ahead of the machine's
(a Linux time namespace; root only)."""


def other_monotonic_clock() -> tuple[str, ...]:
    """:data:`OTHER_CLOCK` where this machine lets the tests make a time namespace, else
    nothing (the node then shares the machine's clock: the rehearsal runs all the same)."""
    probe = [*OTHER_CLOCK, sys.executable, "-c", "import time; print(time.monotonic())"]
    try:
        out = subprocess.run(probe, capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return ()
    return OTHER_CLOCK if float(out.stdout) - time.monotonic() > 4_000_000 else ()


def journal_overlaps(dsn: str) -> tuple[int, list[tuple]]:
    """From the coordinator partitions' journals, in order: every consumer group's members'
    current assignments (assigned partitions and those pending revocation: still owned). How
    many records were read, and (group, partition, member, other member) for every moment two
    members owned one partition at once."""
    from coordinator.core import codec
    from coordinator.core.records import ConsumerGroupCurrentMemberAssignmentKey

    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            'SELECT key, value FROM kip848_journal WHERE log >= 0 ORDER BY log, "offset"'
        ).fetchall()
    owned: dict[str, dict[str, set[tuple]]] = defaultdict(dict)
    overlaps, read = [], 0
    for key, value in rows:
        record = codec.decode(bytes(key), None if value is None else bytes(value))
        k = record.key
        if not isinstance(k, ConsumerGroupCurrentMemberAssignmentKey):
            continue
        read += 1
        v = record.value
        if v is None:  # the member left, or was fenced
            owned[k.group_id].pop(k.member_id, None)
            continue
        mine = {
            (t, p)
            for a in (v.assigned_partitions, v.partitions_pending_revocation)
            for t, ps in a.items()
            for p in ps
        }
        members = owned[k.group_id]
        members[k.member_id] = mine
        for other, theirs in members.items():
            if other != k.member_id and mine & theirs:
                overlaps.append((k.group_id, sorted(mine & theirs), k.member_id, other))
    return read, overlaps


def test_ha_chaos_rehearsal(own_pg: PostgresServer, tmp_path: Path) -> None:
    dsn = own_pg.fresh_store_dsn()
    nodes = Nodes(tmp_path, dsn, *SETTINGS, same_ports=True)
    # Node 3's monotonic clock is 58 days ahead of the others': nodes compare no readings of
    # it (leases are timed by PostgreSQL's clock, a node's deadline by its own clock alone).
    nodes.prefix[3] = other_monotonic_clock()
    print(f"node 3 runs under {nodes.prefix[3] or 'the machine clock (no time namespace)'}")
    # Node 2 reaches PostgreSQL through a proxy: it alone can be cut off from it.
    proxy = CutProxy(("127.0.0.1", own_pg.port))
    nodes.dsns[2] = dsn.replace(f"127.0.0.1:{own_pg.port}/", f"127.0.0.1:{proxy.port}/")
    assert nodes.dsns[2] != dsn
    for n in (1, 2, 3):
        nodes.start(n)
    assert nodes.procs[1].create_topic(TOPIC, 4)
    kafka = ",".join(nodes.kafka_address(n) for n in (1, 2, 3))
    grpc_target = "ipv4:" + ",".join(nodes.procs[n].address for n in (1, 2, 3))
    workers = Workers(tmp_path)
    workers.start(
        "librdkafka",
        kind="librdkafka",
        topic=TOPIC,
        groups=KAFKA_GROUPS,
        members=2,
        bootstrap=kafka,
    )
    workers.start(
        "kip848", kind="kip848", topic=TOPIC, groups=GRPC_GROUPS, members=2, target=grpc_target
    )
    workers.start(
        "kafka-python",
        kind="kafka-python",
        topic=TOPIC,
        groups=CLASSIC_GROUPS,
        members=2,
        bootstrap=kafka,
    )
    groups = KAFKA_GROUPS + GRPC_GROUPS + CLASSIC_GROUPS
    poller = EpochPoller(nodes, groups)
    zombie_answers: dict[str, Any] = {}
    t0 = time.monotonic()

    faults: dict[str, tuple[float, float]] = {}

    def converge(name: str, since: float) -> None:
        """The fault ``name``, from ``since`` until now, is over once every group has a commit
        acknowledged after it (bounded)."""
        faults[name] = (since, time.monotonic())
        workers.wait_acked_after(since, timeout=CONVERGE_S + 20)

    def all_served() -> None:
        until(lambda: served(dsn) is not None, "every partition served", timeout=30)

    try:
        workers.wait_acked_after(t0, timeout=60)
        all_served()

        # 1. kill -9 of the node leading the most of the groups' partitions.
        count: dict[int, int] = defaultdict(int)
        lead = leaders(dsn)
        for group in groups:
            count[lead[partition_for(group, P)]] += 1
        victim = max(count, key=lambda n: count[n])
        at = time.monotonic()
        nodes.kill9(victim)
        converge(f"kill -9 of node {victim} (leading {count[victim]} of the groups)", at)
        nodes.start(victim)
        all_served()

        # 2. A zombie: SIGSTOP past the lease; asked over both listeners while stopped. The
        # controller unless it was killed (its balancer's writes are fenced by its controller
        # epoch), else the node leading the most groups.
        lead = leaders(dsn)
        controller = describe_cluster(dsn)["controller"]
        zombie = max(
            (n for n in nodes.procs if n != victim),
            key=lambda n: (n == controller, sum(lead[partition_for(g, P)] == n for g in groups)),
        )
        print(f"zombie: node {zombie} (the controller: node {controller})")
        led = {p for p, n in leaders(dsn).items() if n == zombie}
        assert led, "the zombie leads nothing"
        lost_groups = [g for g in groups if partition_for(g, P) in led]
        own_group = next(f"z{i}" for i in itertools.count() if partition_for(f"z{i}", P) in led)
        server = nodes.procs[zombie]
        client = KafkaClient(nodes.kafka_address(zombie))
        at = time.monotonic()
        nodes.pause(zombie)
        time.sleep(2 * LEASE_MS / 1000)
        until(
            lambda: all(leaders(dsn).get(p) not in (None, zombie) for p in led),
            "the zombie's partitions taken over",
        )
        # Sent while it is stopped: read on its first steps once it runs again.
        client.send(
            request(
                8,
                8,
                group_id=own_group,
                generation_id_or_member_epoch=-1,
                member_id="",
                topics=[
                    {"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 7}]}
                ],
            )
        )
        client.send(request(10, 4, key_type=0, coordinator_keys=[own_group, *lost_groups]))
        client.send(request(9, 8, groups=[{"group_id": g, "topics": None} for g in lost_groups]))
        # A worker per call: every call is sent while the node is stopped (with fewer, a call
        # waited for a worker and went out after the resume, to a node that may have been
        # given the group's partition back and answered COORDINATOR_LOAD_IN_PROGRESS).
        with ThreadPoolExecutor(1 + len(lost_groups)) as pool:
            grpc_commit = pool.submit(commit_answer, server.channel, own_group, 7, 10)
            grpc_reads = [pool.submit(read_codes, server.channel, g) for g in lost_groups]
            time.sleep(0.3)
            nodes.resume(zombie)
            kafka_commit = client.receive()
            kafka_find = client.receive()
            kafka_fetch = client.receive()
            zombie_answers = {
                "kafka fetch": [(g.group_id, g.error_code) for g in kafka_fetch.groups],
                "grpc reads": [
                    (g, f.result()) for g, f in zip(lost_groups, grpc_reads, strict=True)
                ],
                "kafka commit": [
                    (p.error_code, "") for t in kafka_commit.topics for p in t.partitions
                ],
                "kafka find": [(c.key, c.error_code, c.node_id) for c in kafka_find.coordinators],
                "grpc commit": [
                    (p.error_code, p.error_message)
                    for t in grpc_commit.result().topics
                    for p in t.partitions
                ],
            }
        client.close()
        converge(f"SIGSTOP of node {zombie} past the lease, SIGCONT", at)
        all_served()

        # 3. A node's writer connection cut while it appends, five times over a second.
        # (Not node 2: PostgreSQL sees its proxy's connections, not its own.)
        busiest = max((1, 3), key=lambda n: list(leaders(dsn).values()).count(n))
        at = time.monotonic()
        cut = 0
        for _ in range(5):
            cut += cut_connections(own_pg.admin_dsn(), nodes.procs[busiest].proc.pid, "kip848")
            time.sleep(0.2)
        assert cut, "no writer connection of the node to cut"
        converge(f"writer connection of node {busiest} cut {cut} times", at)
        # Then every connection it has (writer, readers, heartbeats, notifications) at once.
        at = time.monotonic()
        names = ("kip848", "kip848-reader", "kip848-leases", "kip848-listen")
        cut = cut_connections(own_pg.admin_dsn(), nodes.procs[busiest].proc.pid, *names)
        assert cut >= 3, cut
        converge(f"every connection of node {busiest} cut ({cut})", at)

        # Node 2 cut off from PostgreSQL (its connections reset, new ones refused) past its
        # lease while it serves clients: at its deadline it drops its partitions, answers
        # NOT_COORDINATOR, reports NOT_SERVING, and names itself for none of them; the others
        # take them; healed, it gets a share again.
        at = time.monotonic()
        proxy.cut()
        cut_off = nodes.procs[2]
        until(
            lambda: 2 not in leaders(dsn).values() and served(dsn) is not None,
            "node 2's partitions taken over",
        )
        time.sleep(0.5)  # past its own deadline (the lease less a tenth, from its last tick)
        cut_off_answers = {
            "fetch": {committed_code(cut_off.channel, g) for g in groups},
            "find": {find_code_and_node(cut_off.channel, g) for g in groups},
            "health": health_status(cut_off.channel),
        }
        proxy.heal()
        converge("node 2 cut off from PostgreSQL past its lease, then back", at)
        until(lambda: 2 in leaders(dsn).values(), "node 2 leading again", timeout=30)
        all_served()

        # 4. PostgreSQL restarted (fast shutdown), then crashed and started again.
        at = time.monotonic()
        own_pg.restart()
        converge("PostgreSQL restarted (fast shutdown)", at)
        at = time.monotonic()
        own_pg.restart(crash=True)
        converge("PostgreSQL killed -9 and started again", at)
        all_served()

        # 5. A rolling restart: each node stopped (SIGTERM) and started again in turn.
        for n in (1, 2, 3):
            at = time.monotonic()
            assert nodes.stop(n) == 0
            nodes.start(n)
            all_served()
            converge(f"node {n} stopped and started again (rolling restart)", at)
        time.sleep(1.0)
        stop_at = time.monotonic()
    except BaseException:
        poller.stop()
        workers.kill_all()
        nodes.stop_all()
        raise
    poller.stop()
    workers.stop_all()
    # Kept with the test's files: every client event, and when each fault began.
    (tmp_path / "events.json").write_text(
        json.dumps({"faults": faults, "events": workers.events(*EVENTS)})
    )
    # Convergence: the longest any group went without an acknowledged commit across each
    # fault (from its last commit before or during the fault to its next one).
    acks = {g: [e["t"] for e in workers.events("ack") if e["group"] == g] for g in groups}
    for name, (start, end) in faults.items():
        worst = max(
            (b - a, g)
            for g, times in acks.items()
            for a, b in itertools.pairwise(times)
            if b > start and a < end
        )
        print(f"{name}: longest without a commit {worst[0]:.1f} s ({worst[1]})")
        assert worst[0] < CONVERGE_S + (end - start), (name, worst)
    print(f"zombie answered {zombie_answers}")
    channels: dict[str, grpc.Channel] = {}

    def channel_for(address: str) -> grpc.Channel:
        return channels.setdefault(address, grpc.insecure_channel(address))

    try:
        # The zombie answered what it was asked while stopped as a node that leads nothing.
        assert [code for code, _ in zombie_answers["kafka commit"]] == [16], zombie_answers
        assert [code for code, _ in zombie_answers["grpc commit"]] == [16], zombie_answers
        # Its reads of the groups it lost (OffsetFetch, ConsumerGroupDescribe): NOT_COORDINATOR,
        # never their state as it was when it stopped.
        assert lost_groups, "the zombie led none of the groups"
        assert [code for _, code in zombie_answers["kafka fetch"]] == [16] * len(lost_groups)
        reads = [codes for _, codes in zombie_answers["grpc reads"]]
        assert reads == [(16, 16)] * len(lost_groups), zombie_answers
        # FindCoordinator names no node for the partitions it lost (its view still names itself:
        # it has not read the cluster since) or the new leader, never itself.
        assert all(node != zombie for _, _, node in zombie_answers["kafka find"]), zombie_answers

        # The node cut off from PostgreSQL served nothing and sent no client back to itself.
        print(f"node 2 cut off answered {cut_off_answers}")
        assert cut_off_answers["fetch"] == {16}, cut_off_answers
        assert all(node != 2 for _, node in cut_off_answers["find"]), cut_off_answers
        assert cut_off_answers["health"] == health_pb2.HealthCheckResponse.NOT_SERVING

        # No member saw an error it could not retry, nor lost its partitions.
        assert workers.events("lost") == [] and workers.events("error") == []

        # No partition of a group owned by two members at once.
        callbacks = workers.events("assign", "revoke", "lost")
        assert ownership_overlaps(callbacks, stop_at) == []
        # Nor in the coordinator's own records of the members' assignments.
        read, overlaps = journal_overlaps(dsn)
        assert read and overlaps == [], overlaps
        # (Not vacuous: partitions moved between the members of every group.)
        assert {e["group"] for e in callbacks if e["event"] == "revoke"} == set(groups)

        # Every acknowledged commit is in the journal; each partition's final offset is its last
        # acknowledged commit or a later one sent.
        written = commit_epochs(dsn)
        assert (own_group, 7) not in written  # the zombie wrote nothing
        for group in groups:
            acks = [e for e in workers.events("ack") if e["group"] == group]
            sent = {e["offset"] for e in workers.events("sent") if e["group"] == group}
            missing = [e["offset"] for e in acks if (group, e["offset"]) not in written]
            assert missing == [], (group, missing)
            last: dict[tuple, int] = {}
            for e in acks:
                for tp in map(tuple, e["partitions"]):
                    last[tp] = e["offset"]
            final = committed(nodes.any(), group, channel_for)
            for tp, offset in last.items():
                assert final[tp] >= offset and final[tp] in sent, (group, tp, final[tp], offset)

        # Epochs never go down: leader epochs in each partition's journal; each member's epoch in
        # its acknowledged commits; each group's epoch as described through FindCoordinator.
        for log, epochs in journal_epochs(dsn).items():
            assert epochs == sorted(epochs), (log, epochs)
        by_member: dict[str, list[int]] = defaultdict(list)
        for e in workers.events("ack"):
            if "epoch" in e:
                by_member[e["member"]].append(e["epoch"])
        for member, epochs in by_member.items():
            assert epochs == sorted(epochs), (member, epochs)
        assert sorted(poller.seen) == sorted(groups)
        for group, seen in poller.seen.items():
            epochs = [epoch for _, epoch, _ in seen]
            backwards = [(a, b) for a, b in itertools.pairwise(seen) if b[1] < a[1]]
            assert backwards == [], (group, backwards)
            assert epochs, group

        # No node serves a partition it does not lead: each answers a group's fetch only if it
        # leads the group's partition, NOT_COORDINATOR otherwise.
        lead = leaders(dsn)
        for n, server in nodes.procs.items():
            for group in groups:
                code = committed_code(server.channel, group)
                want = 0 if lead[partition_for(group, P)] == n else 16
                assert code == want, (n, group, code)

        # No traceback in any node's log.
        for n in nodes.logs:
            assert "Traceback" not in nodes.log_text(n), nodes.log_text(n)[-5000:]
    finally:
        nodes.stop_all()
        proxy.close()
        for ch in channels.values():
            ch.close()


def find_code_and_node(channel: grpc.Channel, group: str) -> tuple[int, int]:
    """(error code, node id) of ``group``'s coordinator as FindCoordinator names it."""
    resp = classic_group_pb2_grpc.ClassicGroupServiceStub(channel).FindCoordinator(
        classic_group_pb2.FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), timeout=5
    )
    return resp.coordinators[0].error_code, resp.coordinators[0].node_id


def health_status(channel: grpc.Channel) -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    return stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status


def read_codes(channel: grpc.Channel, group: str) -> tuple[int, int]:
    """The error codes of an OffsetFetch and a ConsumerGroupDescribe of ``group``."""
    described = consumer_group_pb2_grpc.ConsumerGroupServiceStub(channel).ConsumerGroupDescribe(
        consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=[group]), timeout=10
    )
    return committed_code(channel, group, timeout=10), described.groups[0].error_code


def committed_code(channel: grpc.Channel, group: str, timeout: float = 5) -> int:
    from kip848.v1 import offsets_pb2, offsets_pb2_grpc

    resp = offsets_pb2_grpc.OffsetServiceStub(channel).OffsetFetch(
        offsets_pb2.OffsetFetchRequest(
            groups=[offsets_pb2.OffsetFetchRequest.Group(group_id=group)]
        ),
        timeout=timeout,
    )
    return resp.groups[0].error_code
