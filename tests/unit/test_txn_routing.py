"""Which node serves a transactional id among several nodes (``coordinator/server/kafka/
txn_routing.py``): from node 1's routing view (it leads partition 0; node 2 leads partition 1;
nobody partition 2) and a runtime holding the cluster log's mappings — FindCoordinator's node,
the answer of AddOffsetsToTxn, InitProducerId/EndTxn and TxnOffsetCommit v5+ with the mapping
they leave, the upstream's FindCoordinator answer rewritten, and the coordinator nodes Metadata
lists."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from builders import make_runtime

from coordinator.cluster import ClusterConfig, ClusterNode
from coordinator.core import codec
from coordinator.core import records as r
from coordinator.core.errors import (
    CoordinatorNotAvailableError,
    InvalidTxnStateError,
    NotCoordinatorError,
)
from coordinator.core.transactions import AddOffsetsToTxn
from coordinator.routing import partition_for
from coordinator.runtime import CoordinatorRuntime
from coordinator.runtime.leadership import PartitionState
from coordinator.runtime.store import CLUSTER_LOG, MemoryRecordStore
from coordinator.runtime.store.postgres_leases import ClusterState, Lease, NodeRow
from coordinator.server.api import Caller, Node
from coordinator.server.cluster import UPSTREAM_COORDINATOR_ID_BASE as BASE
from coordinator.server.cluster import ClusterRouting
from coordinator.server.kafka import wire
from coordinator.server.kafka.txn_routing import (
    CONCURRENT_TRANSACTIONS,
    INVALID_TXN_STATE,
    NOT_COORDINATOR,
    TxnRouting,
    routed_answer,
)

P = 3
EXPIRY = {
    "transactional.id.expiration.ms": "10000",
    "transaction.remove.expired.transaction.cleanup.interval.ms": "1000",
}
HERE = Node(node_id=1, host="n1.example", port=9092)
KAFKA = Caller(api_version=4, node=HERE)
NODE_2 = Node(node_id=BASE + 2, host="n2.example", port=9092)


def _group(partition: int, n: int = 0) -> str:
    return [g for g in (f"g{i}" for i in range(1000)) if partition_for(g, P) == partition][n]


HERE_G, HERE_H, THERE_G, NOBODY_G = _group(0), _group(0, 1), _group(1), _group(2)


def _node() -> ClusterNode:
    n = ClusterNode(
        None,  # type: ignore[arg-type] - never started: its view set by hand
        None,  # type: ignore[arg-type]
        ClusterConfig(node_id=1, address="n1.example:9094", kafka_address="n1.example:9092"),
        P,
    )
    n.led[0] = 3
    rows = {
        i: NodeRow(
            node_id=i,
            address=f"n{i}.example:9094",
            kafka_address=f"n{i}.example:9092",
            expires_in_ms=expires_in_ms,
            cluster_offset=-1,
            incarnation=None,
        )
        for i, expires_in_ms in ((1, 1_000), (2, 1_000), (3, -1_000), (4, -120_000))
    }
    leases = [
        Lease(
            partition=p,
            leader=leader,
            epoch=3,
            expires_in_ms=None if leader is None else 1_000,
            target=leader,
        )
        for p, leader in ((0, 1), (1, 2), (2, None))
    ]
    n.view.update(
        ClusterState(
            leases=leases, nodes=rows, controller=2, controller_epoch=1, cluster_log_end=-1
        )
    )
    return n


@pytest.fixture
async def runtime() -> AsyncIterator[CoordinatorRuntime]:
    rt = make_runtime()
    await rt.start()
    yield rt
    await rt.close()


@pytest.fixture
def routing(runtime: CoordinatorRuntime) -> TxnRouting:
    return TxnRouting(runtime, ClusterRouting(_node(), upstream=True))


async def test_find_coordinator_names_the_node_of_the_ids_group(
    runtime: CoordinatorRuntime, routing: TxnRouting
) -> None:
    await runtime.map_transactional_id("here", HERE_G)
    await runtime.map_transactional_id("there", THERE_G)
    await runtime.map_transactional_id("nobody", NOBODY_G)
    found = {t: routing.coordinator(t, KAFKA) for t in ("unmapped", "here", "there", "nobody")}
    assert {
        t: f.message if isinstance(f, CoordinatorNotAvailableError) else f for t, f in found.items()
    } == {
        "unmapped": None,
        "here": Node(node_id=BASE + 1, host="n1.example", port=9092),
        "there": NODE_2,
        "nobody": "Coordinator partition 2 has no leader right now (a fail-over is in progress): ask again.",
    }


async def test_add_offsets_maps_the_id_and_sends_the_client_to_the_groups_node(
    runtime: CoordinatorRuntime, routing: TxnRouting
) -> None:
    # Unmapped, its group here: served here, mapped.
    assert await routing.add_offsets("a", HERE_G) is None
    # Unmapped, its group node 2's: mapped, NOT_COORDINATOR (nothing forwarded).
    assert await routing.add_offsets("b", THERE_G) == NOT_COORDINATOR
    # Mapped to node 2's group: not this node's to serve, whatever the group.
    assert await routing.add_offsets("b", HERE_G) == NOT_COORDINATOR
    # Mapped here, moving to node 2's group with no open transaction here: remapped.
    assert await routing.add_offsets("c", HERE_G) is None
    assert await routing.add_offsets("c", THERE_G) == NOT_COORDINATOR
    # Mapped here, another group here with no open transaction: remapped, served.
    assert await routing.add_offsets("d", HERE_G) is None
    assert await routing.add_offsets("d", HERE_H) is None
    # An open transaction (in group H): its id moves to no other group, here or elsewhere.
    await runtime.add_offsets_to_txn(
        AddOffsetsToTxn(group_id=HERE_H, transactional_id="d", producer_id=7, producer_epoch=0)
    )
    assert await routing.add_offsets("d", THERE_G) == INVALID_TXN_STATE
    assert await routing.add_offsets("d", HERE_G) == INVALID_TXN_STATE
    assert await routing.add_offsets("d", HERE_H) is None
    # While the mapped group's partition loads, its transactions are not known yet: retried.
    runtime.driver.lead.states[runtime.shard_index(HERE_H)] = PartitionState.LOADING
    assert await routing.add_offsets("d", HERE_G) == CONCURRENT_TRANSACTIONS
    assert {t: runtime.transactional_id_group(t) for t in "abcd"} == {
        "a": HERE_G,
        "b": THERE_G,
        "c": THERE_G,
        "d": HERE_H,
    }


async def test_end_txn_and_init_producer_id_are_served_by_the_groups_node(
    runtime: CoordinatorRuntime, routing: TxnRouting
) -> None:
    await runtime.map_transactional_id("here", HERE_G)
    await runtime.map_transactional_id("there", THERE_G)
    assert [await routing.serves(t) for t in ("unmapped", "here", "there")] == [
        None,
        None,
        NOT_COORDINATOR,
    ]
    # Its group's partition still loading (a fail-over): an EndTxn forwarded now would not be
    # known to the group. Retried.
    runtime.driver.lead.states[runtime.shard_index(HERE_G)] = PartitionState.LOADING
    assert await routing.serves("here") == CONCURRENT_TRANSACTIONS


async def test_transaction_version_2_commits_map_the_id_at_the_groups_node(
    runtime: CoordinatorRuntime, routing: TxnRouting
) -> None:
    refused = await routing.txn_offset_commit("a", THERE_G)
    assert isinstance(refused, NotCoordinatorError)
    assert runtime.transactional_id_group("a") is None
    assert await routing.txn_offset_commit("a", HERE_G) is None
    assert await routing.txn_offset_commit("a", HERE_G) is None
    assert runtime.transactional_id_group("a") == HERE_G
    await runtime.map_transactional_id("b", THERE_G)
    refused = await routing.txn_offset_commit("b", HERE_G)
    assert isinstance(refused, InvalidTxnStateError)
    assert refused.message == (
        f"Transactional id b commits offsets to group {THERE_G}, which another coordinator "
        f"node leads: its transactions' offsets in group {HERE_G} are not served while it may "
        "hold an open transaction there."
    )
    assert runtime.transactional_id_group("b") == THERE_G
    # Moving to another group of this node: between transactions only.
    await runtime.add_offsets_to_txn(
        AddOffsetsToTxn(group_id=HERE_G, transactional_id="a", producer_id=7, producer_epoch=0)
    )
    refused = await routing.txn_offset_commit("a", HERE_H)
    assert isinstance(refused, InvalidTxnStateError)
    assert refused.message == (
        f"Transactional id a has an open transaction holding offsets of {HERE_G}: among "
        "several coordinator nodes a transaction commits offsets to one group."
    )
    assert await routing.txn_offset_commit("c", HERE_H) is None
    assert runtime.transactional_id_group("c") == HERE_H


def _found(version: int, change: Any, values: dict[str, Any]) -> dict[str, Any]:
    frame = wire.frame(10, version, 42, wire.build(wire.response_class(10, version), values))
    out = change(frame)
    assert wire.I32.unpack_from(out, 4)[0] == 42
    pos = 8 + (1 if wire.response_header_flexible(10, version) else 0)
    return wire.as_values(wire.decode_response(10, version, out[4:], pos - 4))


async def test_the_upstreams_answer_names_the_ids_node(
    runtime: CoordinatorRuntime, routing: TxnRouting
) -> None:
    await runtime.map_transactional_id("there", THERE_G)
    await runtime.map_transactional_id("here", HERE_G)
    upstream = {
        "node_id": 111,
        "host": "n1.example",
        "port": 9093,
        "error_code": 0,
        "error_message": None,
    }
    batched = wire.build(
        wire.request_class(10, 4), key_type=1, coordinator_keys=["there", "here", "denied"]
    )
    change = routed_answer(routing, 4, batched, KAFKA)
    answer = _found(
        4,
        change,
        {
            "throttle_time": 0,
            "coordinators": [
                {"key": "there", **upstream},
                {"key": "here", **upstream},
                {
                    "key": "denied",
                    "node_id": -1,
                    "host": "",
                    "port": -1,
                    "error_code": 53,
                    "error_message": "no",
                },
            ],
        },
    )
    assert [
        (c["key"], c["node_id"], c["host"], c["port"], c["error_code"])
        for c in answer["coordinators"]
    ] == [
        ("there", BASE + 2, "n2.example", 9092, 0),
        ("here", BASE + 1, "n1.example", 9092, 0),
        ("denied", -1, "", -1, 53),
    ]
    single = wire.build(wire.request_class(10, 3), key="there", key_type=1)
    answer = _found(3, routed_answer(routing, 3, single, KAFKA), {"throttle_time": 0, **upstream})
    assert (answer["node_id"], answer["host"], answer["port"], answer["error_code"]) == (
        BASE + 2,
        "n2.example",
        9092,
        0,
    )
    # No id mapped: the upstream's answer goes as it is.
    unrouted = wire.build(wire.request_class(10, 4), key_type=1, coordinator_keys=["new"])
    assert routed_answer(routing, 4, unrouted, KAFKA) is None


def test_metadata_lists_the_coordinator_nodes_live_or_gone_a_moment_ago(
    routing: TxnRouting,
) -> None:
    """Node 3 stopped heartbeating a second ago: still listed (librdkafka would drop it and
    hang a request waiting for it as coordinator); node 4 two minutes ago: no more."""
    assert routing.routing.coordinator_brokers(HERE) == [
        Node(node_id=BASE + 1, host="n1.example", port=9092),
        NODE_2,
        Node(node_id=BASE + 3, host="n3.example", port=9092),
    ]


async def test_inactive_ids_expire_at_their_groups_node_and_stay_expired_after_a_restart() -> None:
    """``transactional.id.expiration.ms`` (10 s here, checked every 1 s): node 1 removes the
    mappings of its groups' ids that have had no transaction API served for the expiration
    (plus the interval their activity is recorded to) and hold no open transaction; an
    InitProducerId or EndTxn (``serves``), AddOffsetsToTxn or TxnOffsetCommit v5+ is
    activity. The activity time is in the record: after a restart the expired id is still
    gone, the active one still mapped, and it expires counting from its recorded activity."""
    store = MemoryRecordStore(partitions=P)
    rt = make_runtime(store, **EXPIRY)
    await rt.start()
    routing = TxnRouting(rt, ClusterRouting(_node(), upstream=True))
    t0 = rt.clock.now_ms()
    for tid, group in (("idle", HERE_G), ("active", HERE_G), ("open", HERE_H), ("theirs", THERE_G)):
        await rt.map_transactional_id(tid, group)
    await rt.add_offsets_to_txn(
        AddOffsetsToTxn(group_id=HERE_H, transactional_id="open", producer_id=7, producer_epoch=0)
    )
    rt.clock.advance(6_000)
    assert await routing.serves("active") is None  # InitProducerId/EndTxn: its activity written
    rt.clock.advance(4_999)
    assert await routing.expire() == []
    rt.clock.advance(1)
    assert await routing.expire() == ["idle"]
    assert await routing.serves("idle") is None  # the upstream's to answer now, as with one node
    assert routing.coordinator("idle", KAFKA) is None
    assert [codec.decode(e.key, e.value) for e in store.journal(CLUSTER_LOG)] == [
        r.transactional_id_group_record("idle", HERE_G, t0),
        r.transactional_id_group_record("active", HERE_G, t0),
        r.transactional_id_group_record("open", HERE_H, t0),
        r.transactional_id_group_record("theirs", THERE_G, t0),
        r.transactional_id_group_record("active", HERE_G, t0 + 6_000),
        r.transactional_id_group_record("idle", None),
    ]
    now = rt.clock.now_ms()
    await rt.close()

    rt2 = make_runtime(store.reopen(), **EXPIRY)
    await rt2.start()
    rt2.clock.advance(now - rt2.clock.now_ms())
    routing2 = TxnRouting(rt2, ClusterRouting(_node(), upstream=True))
    assert rt2.committed.transactional_ids.mapped() == [
        ("active", HERE_G),
        ("open", HERE_H),
        ("theirs", THERE_G),
    ]
    rt2.clock.advance(5_999)  # 10.999 s after "active"'s last recorded activity
    assert await routing2.expire() == []
    rt2.clock.advance(1)
    # The open transaction's id stays (however old), as does the id of node 2's group.
    assert await routing2.expire() == ["active"]
    assert rt2.committed.transactional_ids.mapped() == [("open", HERE_H), ("theirs", THERE_G)]
    await rt2.close()
