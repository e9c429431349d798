"""Who FindCoordinator names among several nodes, and which brokers Metadata lists
(``coordinator/server/cluster.py``, docs/ha.md "What a client sees"), from a node's routing
view as a heartbeat read it from PostgreSQL: the node itself for what it leads, another live
node by its gRPC or Kafka address, COORDINATOR_NOT_AVAILABLE for a partition nobody (live)
leads or a leader without a Kafka listener; in front of an upstream broker, coordinator ids of
their own (2**30 + node id)."""

from __future__ import annotations

import pytest

from coordinator.cluster import ClusterConfig, ClusterNode
from coordinator.core.errors import CoordinatorNotAvailableError
from coordinator.routing import partition_for
from coordinator.runtime.store.postgres_leases import ClusterState, Lease, NodeRow
from coordinator.server.api import Caller, Node
from coordinator.server.cluster import UPSTREAM_COORDINATOR_ID_BASE, ClusterRouting

P = 5
HERE_GRPC = Node(node_id=1, host="n1.example", port=9094)
HERE_KAFKA = Node(node_id=1, host="n1.example", port=9092)
GRPC = Caller(node=HERE_GRPC)
KAFKA = Caller(api_version=4, node=HERE_KAFKA)


def node_row(node_id: int, kafka: bool = True, live: bool = True) -> NodeRow:
    return NodeRow(
        node_id=node_id,
        address=f"n{node_id}.example:9094",
        kafka_address=f"n{node_id}.example:9092" if kafka else None,
        expires_in_ms=1_000 if live else -1,
        cluster_offset=-1,
        incarnation=None,
    )


def lease(partition: int, leader: int | None, expires_in_ms: int | None = 1_000) -> Lease:
    return Lease(
        partition=partition, leader=leader, epoch=3, expires_in_ms=expires_in_ms, target=leader
    )


@pytest.fixture
def node() -> ClusterNode:
    """Node 1 (not started: its view set by hand) leading partition 0; partition 1 led by
    node 2, 2 by nobody, 3 by node 3 (no Kafka listener), 4 by node 4 (its registration
    expired: dead)."""
    n = ClusterNode(
        None,  # type: ignore[arg-type] - never started: no PostgreSQL, no host
        None,  # type: ignore[arg-type]
        ClusterConfig(node_id=1, address="n1.example:9094", kafka_address="n1.example:9092"),
        P,
    )
    n.led[0] = 3
    n.view.update(
        ClusterState(
            leases=[lease(0, 1), lease(1, 2), lease(2, None, None), lease(3, 3), lease(4, 4)],
            nodes={n: node_row(n, kafka=n != 3, live=n != 4) for n in (1, 2, 3, 4)},
            controller=2,
            controller_epoch=1,
            cluster_log_end=-1,
        )
    )
    return n


def group_of(partition: int) -> str:
    return next(g for g in (f"g{i}" for i in range(1000)) if partition_for(g, P) == partition)


def named(routing: ClusterRouting, partition: int, caller: Caller) -> Node | str:
    answer = routing.coordinator(group_of(partition), caller)
    return answer.message if isinstance(answer, CoordinatorNotAvailableError) else answer


def test_find_coordinator_names_each_partitions_leader(node: ClusterNode) -> None:
    routing = ClusterRouting(node)
    assert [named(routing, p, GRPC) for p in range(P)] == [
        HERE_GRPC,
        Node(node_id=2, host="n2.example", port=9094),
        "Coordinator partition 2 has no leader right now (a fail-over is in progress): ask again.",
        Node(node_id=3, host="n3.example", port=9094),
        "Coordinator partition 4 has no leader right now (a fail-over is in progress): ask again.",
    ]
    assert [named(routing, p, KAFKA) for p in range(4)] == [
        HERE_KAFKA,
        Node(node_id=2, host="n2.example", port=9092),
        "Coordinator partition 2 has no leader right now (a fail-over is in progress): ask again.",
        "Node 3 leads coordinator partition 3 but has no Kafka listener.",
    ]


def test_a_node_that_lost_its_partitions_never_names_itself(node: ClusterNode) -> None:
    """Node 1 stopped (SIGSTOP, a VM pause) or cut off from PostgreSQL past its lease: at its
    deadline it dropped every partition, but its view is still the one read before — naming
    it as partition 0's leader. It names nobody (COORDINATOR_NOT_AVAILABLE: ask again) until
    a heartbeat reads who leads it now, rather than send its clients back to itself, where
    they get NOT_COORDINATOR (a loop for as long as it cannot reach PostgreSQL). What it
    knows of other nodes it still names."""
    routing = ClusterRouting(node)
    node.led.clear()  # what ClusterNode._lose_all does at the deadline
    no_leader = (
        "Coordinator partition 0 has no leader right now (a fail-over is in progress): ask again."
    )
    assert named(routing, 0, GRPC) == no_leader
    assert named(routing, 0, KAFKA) == no_leader
    assert node.leader_of(0) is None
    assert named(routing, 1, KAFKA) == Node(node_id=2, host="n2.example", port=9092)


def test_in_front_of_an_upstream_coordinators_have_ids_of_their_own(node: ClusterNode) -> None:
    routing = ClusterRouting(node, upstream=True)
    assert [named(routing, p, KAFKA) for p in (0, 1)] == [
        Node(node_id=UPSTREAM_COORDINATOR_ID_BASE + 1, host="n1.example", port=9092),
        Node(node_id=UPSTREAM_COORDINATOR_ID_BASE + 2, host="n2.example", port=9092),
    ]
    # Over gRPC a node is its own id, upstream or not.
    assert named(routing, 1, GRPC) == Node(node_id=2, host="n2.example", port=9094)


def test_metadata_and_describe_cluster_list_the_live_nodes(node: ClusterNode) -> None:
    routing = ClusterRouting(node)
    assert routing.kafka_nodes(HERE_KAFKA) == [
        HERE_KAFKA,
        Node(node_id=2, host="n2.example", port=9092),
    ]
    assert routing.grpc_nodes(HERE_GRPC) == (
        2,
        [
            HERE_GRPC,
            Node(node_id=2, host="n2.example", port=9094),
            Node(node_id=3, host="n3.example", port=9094),
        ],
    )
