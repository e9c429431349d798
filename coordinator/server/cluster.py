"""The server among several coordinator nodes on one PostgreSQL store (docs/ha.md): the node's
membership (:class:`ClusterMember`: join, settle, leave) and the routing FindCoordinator and
Metadata answer with (:class:`ClusterRouting`).

Routing ("What a client sees" in docs/ha.md): a group's coordinator is the node leading its
coordinator partition (Kafka's ``partitionFor``), as this node's cluster view has it: this
node itself when it holds the lease (loading or serving: FindCoordinator never answers
COORDINATOR_LOAD_IN_PROGRESS, as Kafka's does not), else the lease holder of its last
heartbeat. A partition nobody leads right now (a fail-over in progress) is
COORDINATOR_NOT_AVAILABLE: the client asks again. Over gRPC a node is its
``--advertised-address``; over the Kafka protocol its Kafka listener, with ``--node-id`` as its
broker id (each coordinator node is a broker of its own to Kafka's clients) — in front of an
upstream broker, ``UPSTREAM_COORDINATOR_ID_BASE`` + ``--node-id``: a coordinator is never
named with an upstream broker's id (a client would then reach that broker's partitions through
the coordinator's port, and lose them with the coordinator).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from coordinator.cluster import ClusterConfig, ClusterNode
from coordinator.cluster.node import DEFAULT_HEARTBEAT_MS, DEFAULT_LEASE_MS
from coordinator.cluster.view import split_address
from coordinator.core.errors import CoordinatorError, CoordinatorNotAvailableError
from coordinator.routing import partition_for
from coordinator.runtime import CoordinatorRuntime
from coordinator.runtime.partitions import LOAD_THREADS

from .api import Caller, Node

__all__ = ["ClusterMember", "ClusterRouting", "ClusterSettings"]

log = logging.getLogger("kip848.server")

UPSTREAM_COORDINATOR_ID_BASE = 1 << 30
"""In front of an upstream broker, FindCoordinator names node N as broker ``2**30 + N``: no
Kafka cluster numbers its brokers that high, and Java's client, which connects to a
coordinator as node ``2**31 - 1 - id``, then never confuses it with a broker either."""

SETTLE_MIN_S = 30.0
"""A starting node answers COORDINATOR_LOAD_IN_PROGRESS until it has its first share, at most
this long (or three leases, if longer): then it serves what it has."""

GONE_LISTED_MS = 60_000
"""How long Metadata in front of an upstream still lists a coordinator node after its
registration expired (:meth:`ClusterRouting.coordinator_brokers`)."""

IDLE_TRANSACTION_MIN_MS = 50
"""PostgreSQL ends a node's writer session whose transaction waits for the node longer than a
quarter of the lease, and never less than this (``bound_idle_transactions``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSettings:
    """Several nodes sharing one PostgreSQL store (``kip848 serve --store postgresql://...``)."""

    node_id: int
    dsn: str
    lease_ms: int = DEFAULT_LEASE_MS
    heartbeat_ms: int = DEFAULT_HEARTBEAT_MS
    startup_grace_ms: int | None = None
    """``coordinator.startup.grace.ms`` (None: the lease)."""

    def config(self, address: str, kafka_address: str | None) -> ClusterConfig:
        return ClusterConfig(
            node_id=self.node_id,
            address=address,
            kafka_address=kafka_address,
            lease_ms=self.lease_ms,
            heartbeat_ms=self.heartbeat_ms,
            startup_grace_ms=self.startup_grace_ms,
            parallel_loads=LOAD_THREADS,
        )


class ClusterMember:
    """This server's node: created before the runtime starts (the runtime then loads only the
    cluster log), joined once it has (:meth:`join`), left when the server stops."""

    def __init__(self, runtime: CoordinatorRuntime, settings: ClusterSettings) -> None:
        self.runtime = runtime
        self.settings = settings
        self.partitions = runtime.share_partitions(settings.node_id)
        self.node: ClusterNode | None = None
        self.gone = asyncio.Event()
        """Set when this node stopped for good: another process took its node id while this
        one could not renew its registration (paused, cut off from PostgreSQL), or the store
        went back in time or changed schema under it (``view.store_changed``). It leads
        nothing and no longer follows the cluster, so it would answer FindCoordinator, Metadata
        and the cluster log's reads from a view that only gets older: the server exits (code 1)
        rather than go on (docs/ha.md "Failure modes")."""
        bound = getattr(runtime.engine.store, "bound_idle_transactions", None)
        if bound is not None:  # before the first append
            bound(max(IDLE_TRANSACTION_MIN_MS, settings.lease_ms // 4))

    async def join(
        self,
        address: tuple[str, int],
        kafka_address: str | None,
        on_health: Callable[[], None],
        upstream: bool = False,
    ) -> ClusterRouting:
        """Register, take this node's share and load it (bounded: see :data:`SETTLE_MIN_S`);
        the answer is what FindCoordinator asks from then on."""
        from coordinator.runtime.store.postgres_leases import PostgresLeases
        from coordinator.runtime.store.postgres_schema import dsn_for_log

        host, port = address
        shown = f"[{host}]" if ":" in host else host
        settings = self.settings
        leases = PostgresLeases(
            settings.dsn,
            where=dsn_for_log(settings.dsn),
            statement_timeout_s=settings.lease_ms / 3000,  # a blocked renewal fails in time
        )
        node = ClusterNode(
            leases,
            self.partitions,
            settings.config(f"{shown}:{port}", kafka_address),
            self.runtime.shard_count,
        )
        self.partitions.on_fenced = node.fenced_off
        node.add_health_listener(on_health)
        node.add_health_listener(self._check_gone)
        self.node = node
        await node.start()
        timeout_s = max(SETTLE_MIN_S, 3 * settings.lease_ms / 1000)
        if not await node.settle(timeout_s):
            log.warning(
                "Node %d has not loaded its share of the partitions after %.0f s: serving "
                "what it has.",
                settings.node_id,
                timeout_s,
            )
        self.partitions.joined()
        return ClusterRouting(node, upstream)

    def _check_gone(self) -> None:
        if self.node is not None and self.node.fenced is not None:
            self.gone.set()

    @property
    def fenced(self) -> str | None:
        """Why this node stopped for good (:attr:`gone`), or None."""
        return None if self.node is None else self.node.fenced

    @property
    def healthy(self) -> bool:
        """Joined, and leading something or able to reach PostgreSQL."""
        node = self.node
        return node is not None and not self.partitions.lead.joining and node.healthy

    def metrics(self) -> dict[str, Any] | None:
        """This node's health and counters for the metrics (None until it joined)."""
        node = self.node
        if node is None:
            return None
        stats = node.stats
        return {
            "reachable": int(node.reachable),
            "controller": int(node.controller_epoch is not None),
            "heartbeats": stats["heartbeats"],
            "heartbeat_failures": stats["heartbeat_failures"],
            "partition_loads": stats["loads"],
            "partition_load_failures": stats["load_failures"],
            "partition_moves": stats["moves"],
            "partitions_lost": stats["lost"],
            "expected_back_ms": node.expected_back_ms(),
        }

    def bound_shutdown(self, grace_s: float) -> None:
        """The process is stopping: make sure it ends. A write held up in PostgreSQL (a COMMIT
        that a synchronous standby, gone, never acknowledges) would hold the hand-over and the
        store's close for as long as PostgreSQL holds it. After ``grace_s`` (the in-flight
        calls' grace) and two leases (the partitions dropped, the leases run out), the process
        exits (code 1) without the writes still held up, as if it crashed: their outcome is
        PostgreSQL's, the next leader loads what it kept, and none of them was acknowledged.
        A daemon thread: it outlives the loop (the writer's thread is joined at exit)."""
        after_s = grace_s + 2 * self.settings.lease_ms / 1000

        def give_up() -> None:
            log.critical(
                "Shutdown has not finished after %.0f s: writes are held up in PostgreSQL; "
                "exiting without them (their outcome is PostgreSQL's, none was acknowledged).",
                after_s,
            )
            logging.shutdown()
            os._exit(1)

        timer = threading.Timer(after_s, give_up)
        timer.daemon = True
        timer.start()

    async def leave(self) -> None:
        """Hand every partition over now (writes finish; requests meanwhile get
        NOT_COORDINATOR and find the new leader), not after the lease."""
        if self.node is not None:
            await self.node.stop()


class ClusterRouting:
    """Who FindCoordinator names and which brokers Metadata lists (module docstring)."""

    def __init__(self, node: ClusterNode, upstream: bool = False) -> None:
        self.node = node
        self.partitions = node.partitions
        self.upstream = upstream
        """In front of an upstream broker (``--kafka-upstream``): the upstream's broker ids are
        taken, the coordinators get ids of their own (:meth:`kafka_id`)."""

    def coordinator(self, group_id: str, caller: Caller) -> Node | CoordinatorError:
        """The node to name for ``group_id`` to ``caller`` (its protocol decides which
        address), or why none can be named now."""
        node = self.node
        p = partition_for(group_id, self.partitions)
        leader = node.leader_of(p)
        if leader is None:
            return CoordinatorNotAvailableError(
                f"Coordinator partition {p} has no leader right now (a fail-over is in "
                "progress): ask again."
            )
        if leader == node.node_id:
            here = caller.node
            if here is None:
                return CoordinatorNotAvailableError("The coordinator's address is not known yet.")
            return Node(node_id=self.kafka_id(leader, caller), host=here.host, port=here.port)
        address = node.view.node(leader)
        if address is None:
            return CoordinatorNotAvailableError(
                f"Node {leader} leads coordinator partition {p} but its address is not known."
            )
        if caller.api_version is None:
            host, port = address.grpc
        elif address.kafka is not None:
            host, port = address.kafka
        else:
            return CoordinatorNotAvailableError(
                f"Node {leader} leads coordinator partition {p} but has no Kafka listener."
            )
        return Node(node_id=self.kafka_id(leader, caller), host=host, port=port)

    def kafka_id(self, node_id: int, caller: Caller) -> int:
        """The broker id naming coordinator node ``node_id`` to ``caller``: over gRPC and in
        coordinator-only mode its ``--node-id``; in front of an upstream
        :data:`UPSTREAM_COORDINATOR_ID_BASE` + ``--node-id``, an id no broker of the upstream
        has (the clients keep reaching every broker through the addresses Metadata gave them,
        and only the coordinator's connection moves when a group does)."""
        if caller.api_version is None or not self.upstream:
            return node_id
        return UPSTREAM_COORDINATOR_ID_BASE + node_id

    def coordinator_brokers(self, here: Node) -> list[Node]:
        """In front of an upstream: the coordinator nodes as FindCoordinator names them
        (:data:`UPSTREAM_COORDINATOR_ID_BASE` + ``--node-id``, this node at ``here``), which
        Metadata lists after the upstream's brokers: librdkafka takes a transaction
        coordinator only among the brokers Metadata listed (``kafka/txn_routing.py``). Every
        live node, and a node gone less than :data:`GONE_LISTED_MS` ago: librdkafka drops a
        broker Metadata no longer lists, and a request waiting for a coordinator it dropped
        waits for good (its issue 5511: ``send_offsets_to_transaction`` hangs), while one it
        still lists is looked up again once its connection keeps failing. They lead no
        partition; by id."""
        me = self.node.node_id
        out = [Node(node_id=UPSTREAM_COORDINATOR_ID_BASE + me, host=here.host, port=here.port)]
        state = self.node.view.state
        for row in [] if state is None else state.nodes.values():
            kafka = split_address(row.kafka_address)
            if row.node_id == me or kafka is None or row.expires_in_ms < -GONE_LISTED_MS:
                continue
            host, port = kafka
            out.append(
                Node(node_id=UPSTREAM_COORDINATOR_ID_BASE + row.node_id, host=host, port=port)
            )
        return sorted(out, key=lambda n: n.node_id)

    def grpc_nodes(self, here: Node) -> tuple[int, list[Node]]:
        """(the controller, -1 when none is known; every live node's gRPC address, this node's
        the address the call came through), by node id: DescribeCluster."""
        view = self.node.view
        me = self.node.node_id
        nodes = [Node(node_id=me, host=here.host, port=here.port)]
        nodes += [
            Node(node_id=a.node_id, host=a.grpc[0], port=a.grpc[1])
            for a in view.live_nodes()
            if a.node_id != me
        ]
        state = view.state
        controller = -1 if state is None or state.controller is None else state.controller
        return controller, sorted(nodes, key=lambda n: n.node_id)

    def kafka_nodes(self, here: Node | None) -> list[Node]:
        """Every live node's Kafka listener, as Metadata lists brokers (this node: the
        listener the request came through), by node id."""
        out = []
        me = self.node.node_id
        if here is not None:
            out.append(Node(node_id=me, host=here.host, port=here.port))
        for a in self.node.view.live_nodes():
            if a.node_id != me and a.kafka is not None:
                out.append(Node(node_id=a.node_id, host=a.kafka[0], port=a.kafka[1]))
        return sorted(out, key=lambda n: n.node_id)
