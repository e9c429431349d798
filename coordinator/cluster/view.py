"""The routing view: which node leads each coordinator partition and where each node is
reached, as the node's last heartbeat read them from PostgreSQL (at most one heartbeat
interval old). What a node leads itself is always current (:class:`~.node.ClusterNode`); a
client sent to a node that no longer leads its group's partition gets NOT_COORDINATOR there and
asks again (Kafka's clients do). :func:`went_back` tells from a heartbeat's read whether the
store went back in time under the node (it then stops for good).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from coordinator.runtime.store.postgres_leases import ClusterState
from coordinator.runtime.store.postgres_schema import schema_changed

__all__ = ["ClusterView", "NodeAddress", "split_address", "store_changed", "went_back"]


@dataclass(frozen=True, slots=True)
class NodeAddress:
    """Where a node is reached: its gRPC service, its Kafka listener (None: none)."""

    node_id: int
    grpc: tuple[str, int]
    kafka: tuple[str, int] | None


def split_address(text: str | None) -> tuple[str, int] | None:
    """``HOST:PORT`` (``[v6]:PORT``) as a pair; None for None or a malformed one."""
    if not text:
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


class ClusterView:
    """Leaders and addresses as of the last heartbeat (``update``)."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.state: ClusterState | None = None
        self._leaders: list[int | None] = [None] * partitions
        self._nodes: dict[int, NodeAddress] = {}
        self._live: list[int] = []

    def update(self, state: ClusterState) -> None:
        self.state = state
        live = set(state.live())
        leaders: list[int | None] = [None] * self.partitions
        for lease in state.leases:
            if 0 <= lease.partition < self.partitions and lease.held and lease.leader in live:
                leaders[lease.partition] = lease.leader
        self._leaders = leaders
        nodes = {}
        for n, row in state.nodes.items():
            grpc = split_address(row.address)
            if grpc is not None and row.live:
                nodes[n] = NodeAddress(n, grpc, split_address(row.kafka_address))
        self._nodes = nodes
        self._live = sorted(nodes)

    def leader(self, partition: int) -> int | None:
        """The live node holding ``partition``'s lease (None: nobody, or not known yet)."""
        return self._leaders[partition]

    def node(self, node_id: int) -> NodeAddress | None:
        """A live node's addresses."""
        return self._nodes.get(node_id)

    def live_nodes(self) -> list[NodeAddress]:
        """Every live node, by id."""
        return [self._nodes[n] for n in self._live]


def went_back(
    state: ClusterState,
    held: Mapping[int, int],
    applied: int,
    written: Mapping[int, int],
    ends: Mapping[int, int],
) -> str | None:
    """What shows that the store went back in time, or None: the cluster log ending before
    ``applied`` (what this node had applied of it, durable, when the heartbeat was sent), a
    partition's leader epoch below the one this node leads it at (``held``), or a partition's
    log ending (``ends``, read by the heartbeat) before the offset this node knew durable
    (``written``). None of them can happen to a store that only moves on (offsets and epochs
    only ever grow), so the store is not the one this node's state came from."""
    if state.cluster_log_end < applied:
        return (
            f"the cluster log ends at offset {state.cluster_log_end}, before offset {applied} "
            "this node applied"
        )
    for lease in state.leases:
        epoch = held.get(lease.partition)
        if epoch is not None and lease.epoch < epoch:
            return (
                f"coordinator partition {lease.partition}'s leader epoch is {lease.epoch}, "
                f"below the {epoch} this node leads it at"
            )
    for p, end in sorted(ends.items()):
        if end < written.get(p, -1):
            return (
                f"coordinator partition {p}'s log ends at offset {end}, before offset "
                f"{written[p]} this node wrote"
            )
    return None


def store_changed(
    state: ClusterState,
    held: Mapping[int, int],
    applied: int,
    written: Mapping[int, int],
    ends: Mapping[int, int],
) -> str | None:
    """Why this node must stop for good after a heartbeat's read, or None: the store at
    another schema version than the one it opened (:func:`.postgres_schema.schema_changed`:
    checked first, the other reads may mean something else in another layout), or gone back in
    time (:func:`went_back`)."""
    why = schema_changed(state.schema_version)
    back = None if why is not None else went_back(state, held, applied, written, ends)
    if back is not None:
        why = (
            f"the store in PostgreSQL went back in time ({back}: restored from a backup, "
            "or a standby that lacked commits promoted); this node holds state the store "
            "no longer has"
        )
    return why
