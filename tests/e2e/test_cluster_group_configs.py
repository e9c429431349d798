"""Group configs among several nodes (docs/ha.md "Group configs"): Kafka's admin clients send
IncrementalAlterConfigs and DescribeConfigs of GROUP resources to any broker, never asking
FindCoordinator, so every node answers them. A real confluent-kafka AdminClient, bootstrapped
at one node's Kafka listener, alters and describes the configs of two groups in one request
each: one group led by each node, so whichever node the client picks does not lead one of
them. The node leading each group applies the new heartbeat interval on its member's next
heartbeat."""

from __future__ import annotations

from pathlib import Path

from cluster_support import Nodes, settings, until
from cluster_support import describe_cluster as describe
from conftest import join_request

from coordinator.routing import partition_for

P = 4
HB = "consumer.heartbeat.interval.ms"
SESSION = "consumer.session.timeout.ms"
CALL_TIMEOUT_S = 15.0


def leaders(dsn: str) -> dict[int, int | None]:
    """Each serving partition's leader."""
    return {
        p["partition"]: p["leader"] for p in describe(dsn)["partitions"] if p["state"] == "serving"
    }


def test_any_node_alters_and_describes_a_groups_configs(pg_server, tmp_path: Path) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    dsn = pg_server.fresh_store_dsn()
    nodes = Nodes(tmp_path, dsn, *settings(P))
    admin = None
    try:
        servers = {1: nodes.start(1), 2: nodes.start(2)}

        def balanced() -> bool:
            led = leaders(dsn)
            return len(led) == P and sorted(led.values()) == [1, 1, 2, 2]  # type: ignore[type-var]

        until(balanced, "two partitions led by each node")
        led = leaders(dsn)
        groups = {
            node: next(
                g for g in (f"cfg{i}" for i in range(200)) if led[partition_for(g, P)] == node
            )
            for node in (1, 2)
        }
        servers[1].create_topic("t", 2)
        # Node 2's members subscribe to the topic: let node 2 follow node 1's topic first.
        until(
            lambda: all(n["cluster_log_lag"] == 0 for n in describe(dsn)["nodes"]),
            "both nodes to apply the cluster log",
        )
        members = {}
        for node, group in groups.items():
            server = servers[node]

            def joined(server=server, group=group) -> bool:
                resp = server.heartbeat(**join_request(group, ["t"]))
                members[group] = resp
                return resp.error_code == 0

            until(joined, f"{group} to join at node {node}")
            assert members[group].heartbeat_interval_ms == 5_000

        admin = AdminClient({"bootstrap.servers": nodes.kafka_address(2)})
        altered = admin.incremental_alter_configs(
            [
                ConfigResource(
                    ResourceType.GROUP,
                    group,
                    incremental_configs=[
                        ConfigEntry(HB, "6000", incremental_operation=AlterConfigOpType.SET),
                        ConfigEntry(SESSION, "50000", incremental_operation=AlterConfigOpType.SET),
                    ],
                )
                for group in groups.values()
            ]
        )
        for future in altered.values():
            future.result(timeout=CALL_TIMEOUT_S)  # raises on NOT_COORDINATOR or any error

        described = admin.describe_configs(
            [ConfigResource(ResourceType.GROUP, group) for group in groups.values()]
        )
        got = {
            res.name: {
                name: (entry.value, entry.source)
                for name, entry in future.result(timeout=CALL_TIMEOUT_S).items()
                if name in (HB, SESSION)
            }
            for res, future in described.items()
        }
        group_config = 8  # ConfigSource.GROUP_CONFIG
        assert got == {
            group: {HB: ("6000", group_config), SESSION: ("50000", group_config)}
            for group in groups.values()
        }

        # The node leading each group applies the cluster log's value on the next heartbeat
        # (the node that did not write it follows the cluster log within its lease ticks).
        for node, group in groups.items():
            server, first = servers[node], members[group]

            def applied(server=server, group=group, first=first) -> bool:
                resp = server.heartbeat(
                    group_id=group, member_id=first.member_id, member_epoch=first.member_epoch
                )
                assert resp.error_code == 0, resp
                return resp.heartbeat_interval_ms == 6_000

            until(applied, f"node {node} to apply the new heartbeat interval of {group}")
    finally:
        del admin
        nodes.stop_all()
