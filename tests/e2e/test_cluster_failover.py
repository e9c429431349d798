"""Several coordinator nodes on one PostgreSQL store (docs/ha.md), under real clients: KIP-848
consumers of confluent-kafka (librdkafka) and classic consumers of kafka-python and aiokafka
through the nodes' Kafka listeners (coordinator-only: the partitions are paused, the
consumers only keep their membership and commit), and ``kip848.client`` members over gRPC —
50 groups, each
committing without pause while nodes are killed (``kill -9``), paused past their lease
(SIGSTOP, then SIGCONT: a zombie), restarted and added.

What must hold: no acknowledged commit is lost (each is in its partition's journal, and each
group's final offsets are at or after its last acknowledged commit, and are a commit it sent);
no deposed leader ever wrote after its successor (each partition's journal, read from
PostgreSQL, has leader epochs that never go down) nor acknowledged a commit after it (the
epochs of a group's acknowledged commits never go down either); every group is served again
within the lease, the load and the clients' own request timeout; no member that kept
heartbeating lost its partitions (no ``lost`` callback); the paused node learned that it lost
its partitions; a node loading everything afresh from the logs answers the same offsets (the
state is the replay of the logs). And a node paused past its registration while another
process took its node id exits when it runs again (code 1, the reason on stderr): it would
otherwise answer FindCoordinator from a view it no longer updates.
"""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import pytest
from cluster_support import (
    LEASE_MS,
    Nodes,
    PartitionGroups,
    Workers,
    commit_epochs,
    committed,
    described,
    find_coordinator,
    journal_epochs,
    served,
    settings,
    until,
)
from conftest import ServerProcess

from coordinator.routing import partition_for

pytestmark = pytest.mark.slow

CLIENT_TIMEOUT_S = 5.0  # the workers' request timeouts (a paused node answers nothing)
SETTINGS = settings(
    12, group_consumer_min_heartbeat_interval_ms=1000, group_consumer_heartbeat_interval_ms=1000
)
TOPIC = "events"


def test_nodes_fail_over_under_real_clients(pg_server, tmp_path: Path) -> None:
    dsn = pg_server.fresh_store_dsn()
    nodes = Nodes(tmp_path, dsn, *SETTINGS)
    for n in (1, 2, 3):
        nodes.start(n)
    assert nodes.procs[1].create_topic(TOPIC, 3)
    kafka = ",".join(nodes.kafka_address(n) for n in (1, 2, 3))
    grpc_target = "ipv4:" + ",".join(nodes.procs[n].address for n in (1, 2, 3))
    workers = Workers(tmp_path)
    for kind, prefix, count, where in (
        ("kip848", "k", 25, {"target": grpc_target}),
        ("librdkafka", "r", 10, {"bootstrap": kafka}),
        ("kafka-python", "p", 10, {"bootstrap": kafka}),
        ("aiokafka", "a", 5, {"bootstrap": kafka}),
    ):
        groups = [f"{prefix}{i}" for i in range(count)]
        workers.start(kind, kind=kind, topic=TOPIC, groups=groups, **where)
    channels: dict[str, grpc.Channel] = {}

    def channel_for(address: str) -> grpc.Channel:
        if address not in channels:
            channels[address] = grpc.insecure_channel(address)
        return channels[address]

    t0 = time.monotonic()
    try:
        workers.wait_acked_after(t0, timeout=60)
        # Every node leads a share of the partitions, and is asked for its groups.
        leaders = {n: nodes.log_text(n).count("Loaded shard") for n in (1, 2, 3)}
        assert all(leaders.values()), leaders

        # kill -9: its partitions are taken over once its leases expire.
        killed_at = time.monotonic()
        nodes.kill9(1)
        workers.wait_acked_after(killed_at + 0.5, timeout=30)
        recovered_kill = time.monotonic() - killed_at

        # SIGSTOP past the lease, then SIGCONT: the zombie drops what it led, writes nothing.
        paused_at = time.monotonic()
        nodes.pause(2)
        time.sleep(2 * LEASE_MS / 1000)
        workers.wait_acked_after(paused_at + 2 * LEASE_MS / 1000, timeout=30)
        nodes.resume(2)
        resumed_at = time.monotonic()

        # A restart of the killed node, and a fourth node: partitions move to them gracefully.
        nodes.start(1)
        nodes.start(4)
        deadline = time.monotonic() + 30
        while not all("Loaded shard" in nodes.log_text(n)[-20000:] for n in (1, 4)):
            assert time.monotonic() < deadline, "the new nodes never got a share"
            time.sleep(0.2)
        workers.wait_acked_after(time.monotonic(), timeout=30)
        time.sleep(1.0)
    except BaseException:
        workers.kill_all()
        nodes.stop_all()
        raise
    workers.stop_all()

    # No member that kept heartbeating lost its partitions (fenced, session expired).
    assert workers.events("lost") == []
    assert not workers.events("error")

    # No acknowledged commit lost: each group's offsets are at or after its last ack, and are
    # offsets it sent.
    server = nodes.any()
    finals = {}
    for w in workers.all:
        for group in w.spec["groups"]:
            acked = [e["offset"] for e in w.of("ack") if e["group"] == group]
            sent = {e["offset"] for e in w.of("sent") if e["group"] == group}
            offsets = committed(server, group, channel_for)
            assert sorted(offsets) == [(TOPIC, p) for p in range(3)], (group, offsets)
            for tp, offset in offsets.items():
                assert offset >= acked[-1] and offset in sent, (group, tp, offset, acked[-1])
            finals[group] = offsets
    # The groups, whole, as their coordinators describe them (the clients have left).
    states = {group: described(server, group, channel_for) for group in finals}
    for group, (consumer, classic) in states.items():
        (c,), (d,) = consumer.groups, classic.groups
        if c.error_code == 0:  # a consumer group, which DescribeGroups says is not classic
            assert c.group_epoch > 0, (group, consumer)  # it has a history
            not_classic = (69, f"Group {group} is not a classic group.", "Dead", -1, [])
            assert (
                d.error_code,
                d.error_message,
                d.group_state,
                d.generation_id,
                list(d.members),
            ) == not_classic, (group, classic)
        else:  # a classic group
            assert d.error_code == 0 and d.generation_id > 0, (group, classic)

    # Every group served again soon after each fault. After kill -9 every group commits again
    # within the lease and its load (milliseconds for a few groups) and the clients'
    # back-off. A node that hangs (SIGSTOP) answers nothing: a client notices it by its own
    # request timeout — its heartbeat's or commit's, then possibly a lookup's sent to the hung
    # node — so the largest gap between two acknowledged commits of a group is at most the
    # lease and three request timeouts.
    gaps = []
    for group in workers.groups():
        times = [e["t"] for e in workers.events("ack") if e["group"] == group]
        gaps += [(b - a, group, a - t0) for a, b in zip(times, times[1:], strict=False)]
    worst = max(gaps)
    print(f"kill -9 recovered in {recovered_kill:.1f} s; largest gap {worst[0]:.1f} s")
    faults = {"kill": killed_at - t0, "pause": paused_at - t0, "resume": resumed_at - t0}
    assert worst[0] < LEASE_MS / 1000 + 3 * CLIENT_TIMEOUT_S + 2.0, (worst, faults)
    assert recovered_kill < LEASE_MS / 1000 + 3.0

    # The zombie learned, when it ran again, that its leases had run out; nobody ever wrote
    # to a partition under an epoch older than one written before.
    assert "stops serving partitions" in nodes.log_text(2), nodes.log_text(2)[-3000:]
    for log, epochs in journal_epochs(dsn).items():
        assert epochs == sorted(epochs), (log, epochs)
    # Every acknowledged commit is in its partition's journal, and the leader epochs of a group's acknowledged commits, in the order they
    # were sent (one after the other), never go down: no commit was acknowledged by a
    # deposed leader after its successor had acknowledged one.
    written = commit_epochs(dsn)
    for w in workers.all:
        for group in w.spec["groups"]:
            acked = [e["offset"] for e in w.of("ack") if e["group"] == group]
            epochs = [written.get((group, offset), []) for offset in acked]
            assert all(epochs), (group, acked, epochs)
            last = [max(e) for e in epochs]
            assert last == sorted(last), (group, last)
    assert resumed_at > paused_at

    # The state is the replay of the logs: one node loading everything afresh answers the
    # same offsets and describes every group the same way, whole.
    nodes.stop_all()
    nodes.start(9)
    for group, offsets in finals.items():
        assert committed(nodes.procs[9], group, channel_for) == offsets
        assert described(nodes.procs[9], group, channel_for) == states[group], group
    nodes.stop_all()
    for ch in channels.values():
        ch.close()


def test_a_node_whose_id_another_process_took_while_it_was_paused_exits(
    pg_server, tmp_path: Path
) -> None:
    """Node 1 paused (SIGSTOP) past its registration, and a second process started with id 1
    meanwhile (an operator's or a supervisor's restart of a node taken for dead): the second
    one registers once the first's registration ran out and takes a share at newer epochs.
    When the first runs again (SIGCONT) it finds its id taken: it exits with code 1, the reason
    on stderr, within a lease. Before, it stayed up for good, leading nothing and no longer
    heartbeating: its FindCoordinator named, from its last view, node 2 for the partitions
    the second process led and nobody (COORDINATOR_NOT_AVAILABLE) for those node 2 led, and
    its Metadata and topics stayed as they were when it stopped. Every group's commit stays
    readable through the cluster as it was acknowledged."""
    dsn = pg_server.fresh_store_dsn()
    partitions = 4
    nodes = Nodes(tmp_path, dsn, *settings(partitions))
    groups = PartitionGroups(partitions)
    twin = None
    try:
        first, two = nodes.start(1), nodes.start(2)
        until(lambda: {n for n, _ in (served(dsn) or {}).values()} == {1, 2}, "a share each")
        first.create_topic(TOPIC, 1)
        groups.commit_all(two, 5)
        nodes.pause(1)
        twin = ServerProcess(
            tmp_path / "node1-again",
            "--store",
            dsn,
            "--node-id",
            "1",
            "--kafka-listen",
            "127.0.0.1:0",
            *settings(partitions),
            clock="system",
            lines=2,
        )
        until(lambda: {n for n, _ in (served(dsn) or {}).values()} == {1, 2}, "a share each")
        nodes.resume(1)
        assert first.wait(timeout=LEASE_MS / 1000 + 10) == 1
        nodes.procs.pop(1)
        assert (
            "kip848 serve: node id 1 was registered by another process while this one could "
            "not renew its registration: exiting"
        ) in first.stderr_text()
        # The cluster, as the survivors have it: every group at the node leading it now.
        leaders = {1: twin.address, 2: two.address}
        lead = served(dsn)
        assert lead is not None
        for group in groups.groups.values():
            expected = leaders[lead[partition_for(group, partitions)][0]]
            assert find_coordinator(two, group) == (0, expected)
            assert find_coordinator(twin, group) == (0, expected)
        assert groups.committed_all(twin) == {g: {(TOPIC, 0): 5} for g in groups.groups.values()}
    finally:
        groups.close()
        if twin is not None:
            twin.stop()
        nodes.stop_all()
