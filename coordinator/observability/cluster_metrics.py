"""The metrics of a node among several on one PostgreSQL store (docs/ha.md): its coordinator
partitions' states and leader epochs, its health and its counters (read at scrape time with the
other state gauges, ``metrics.StateCollector``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

NAMESPACE = "kip848"
PARTITION_STATES = ("serving", "loading", "unloading", "not-led")
NODE_COUNTERS = {
    "heartbeats": "Heartbeats (ticks) of this node that reached PostgreSQL.",
    "heartbeat_failures": "Heartbeats of this node that failed (PostgreSQL unreachable, slow).",
    "partition_loads": "Coordinator partitions this node took and loaded.",
    "partition_load_failures": "Loads of coordinator partitions that failed on this node (each "
    "loaded again after a wait that doubles, 1 s to 30 s).",
    "partition_moves": "Coordinator partitions this node handed over gracefully.",
    "partitions_lost": "Coordinator partitions this node lost: taken over after its lease ran "
    "out, or its append fenced off.",
}
"""The counters of a node among several (docs/ha.md), by their metric name's stem."""


def cluster_families(
    partitions: Mapping[int, str], leader_epochs: Mapping[int, int], node: Mapping[str, Any] | None
) -> list[Metric]:
    """A node among several (docs/ha.md): its partitions' states and epochs, and its own
    health and counters. Nothing for one node alone."""
    if node is None:
        return []
    state = GaugeMetricFamily(
        f"{NAMESPACE}_partition_state",
        "1 for the state each coordinator partition is in on this node (serving, loading, "
        "unloading, not-led), 0 for the others. Kafka: the partition's leadership.",
        labels=["partition", "state"],
    )
    for p, current in sorted(partitions.items()):
        for name in PARTITION_STATES:
            state.add_metric([str(p), name], 1 if name == current else 0)
    epochs = GaugeMetricFamily(
        f"{NAMESPACE}_partition_leader_epoch",
        "The leader epoch at which this node leads each coordinator partition it leads.",
        labels=["partition"],
    )
    for p, epoch in sorted(leader_epochs.items()):
        epochs.add_metric([str(p)], epoch)
    counts = GaugeMetricFamily(
        f"{NAMESPACE}_node_partitions",
        "Coordinator partitions of this node by state.",
        labels=["state"],
    )
    for name in PARTITION_STATES:
        counts.add_metric([name], sum(1 for s in partitions.values() if s == name))
    reachable = GaugeMetricFamily(
        f"{NAMESPACE}_node_reachable",
        "1 while this node's last heartbeat reached PostgreSQL recently enough for its leases "
        "to hold.",
        value=node.get("reachable", 0),
    )
    controller = GaugeMetricFamily(
        f"{NAMESPACE}_node_controller",
        "1 while this node is the controller (it runs the balancer).",
        value=node.get("controller", 0),
    )
    expected = GaugeMetricFamily(
        f"{NAMESPACE}_node_expected_back_ms",
        "For each node this node expects back (a node the coordinator partitions are still "
        "targeted at while this node starts, or one whose registration ran out during an "
        "outage of PostgreSQL): how long, in ms, its partitions still wait for it before the "
        "controller moves them. No series: no node is expected back.",
        labels=["node"],
    )
    for n, left in sorted(node.get("expected_back_ms", {}).items()):
        expected.add_metric([str(n)], left)
    counters = []
    for stem, help_text in NODE_COUNTERS.items():
        counter = CounterMetricFamily(f"{NAMESPACE}_node_{stem}", help_text)
        counter.add_metric([], node.get(stem, 0))
        counters.append(counter)
    return [state, epochs, counts, reachable, controller, expected, *counters]
