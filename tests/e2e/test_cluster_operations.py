"""Operating several coordinator nodes (docs/ha.md): ``kip848 cluster describe`` and ``move``
on the PostgreSQL store, the cluster log followed by every node (a topic and an ACL created
through one node), each node's FindCoordinator (gRPC, and the Kafka listener's v3 and batched
v4) and Metadata, NOT_COORDINATOR from the nodes that do not lead a group, a push stream ended
with NOT_COORDINATOR when its group's partition moves, the per-node and per-partition metrics,
and a graceful stop that hands every partition over at once."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from cluster_support import Nodes, find_coordinator, settings, until
from cluster_support import describe_cluster as describe
from conftest import every_acl, join_request, run_cli
from kafka_support import KafkaClient, request

from coordinator.observability.cluster_metrics import PARTITION_STATES
from coordinator.routing import partition_for
from kip848.v1 import (
    admin_pb2,
    classic_group_pb2,
    classic_group_pb2_grpc,
    consumer_group_pb2_grpc,
)
from kip848.v1 import consumer_group_pb2 as cg

P = 6
SETTINGS = settings(P)


def describe_cli(dsn: str) -> dict:
    out = run_cli("cluster", "describe", "--store", dsn, "--output", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_describe_move_and_the_clients_view(pg_server, tmp_path: Path) -> None:
    dsn = pg_server.fresh_store_dsn()
    nodes = Nodes(tmp_path, dsn, *SETTINGS, "--metrics-listen", "127.0.0.1:0")
    try:
        one, two = nodes.start(1), nodes.start(2)

        def balanced() -> bool:
            d = describe(dsn)
            return [p["state"] for p in d["partitions"]] == ["serving"] * P and sorted(
                n["partitions"] for n in d["nodes"]
            ) == [P // 2, P // 2]

        until(balanced, "three serving partitions on each node")
        d = describe_cli(dsn)
        assert [(n["node_id"], n["live"], n["address"]) for n in d["nodes"]] == [
            (1, True, one.address),
            (2, True, two.address),
        ]
        assert [n["kafka_address"] for n in d["nodes"]] == [
            nodes.kafka_address(1),
            nodes.kafka_address(2),
        ]
        assert d["controller"] in (1, 2) and d["cluster_log_end"] == -1
        leader = {q["partition"]: q["leader"] for q in d["partitions"]}
        table = run_cli("cluster", "describe", "--store", dsn)
        assert table.returncode == 0, table.stderr
        assert table.stdout.splitlines()[2].split() == [
            "NODE",
            "ADDRESS",
            "KAFKA",
            "LIVE",
            "EXPIRES-MS",
            "PARTITIONS",
            "CLUSTER-LOG-LAG",
            "TARGETED",
        ]

        # A topic created through node 1 reaches node 2's registry (the cluster log).
        topic = one.create_topic("orders", 2)
        until(lambda: describe(dsn)["cluster_log_end"] == 0, "the cluster log")
        until(
            lambda: all(n["cluster_log_lag"] == 0 for n in describe(dsn)["nodes"]),
            "both nodes to apply the cluster log",
        )
        # So does an ACL (the security metadata is in the cluster log too).
        made = one.admin.CreateAcls(
            admin_pb2.CreateAclsRequest(
                creations=[
                    admin_pb2.AclBinding(
                        resource_type=3,  # GROUP
                        resource_name="audited",
                        pattern_type=3,  # LITERAL
                        principal="User:alice",
                        host="*",
                        operation=3,  # READ
                        permission_type=3,  # ALLOW
                    )
                ]
            ),
            timeout=10,
        )
        assert [r.error_code for r in made.results] == [0]
        until(lambda: acls(two) == [("audited", "User:alice", 3)], "node 2 to know the ACL")

        # Every node names the same coordinator; the other one answers NOT_COORDINATOR.
        group = next(g for g in (f"g{i}" for i in range(100)) if leader[partition_for(g, P)] == 1)
        p = partition_for(group, P)
        leader_epoch = d["partitions"][p]["leader_epoch"]
        assert find_coordinator(one, group) == (0, one.address)
        assert find_coordinator(two, group) == (0, one.address)
        joined = one.heartbeat(**join_request(group, ["orders"]))
        assert (
            joined.error_code == 0
            and joined.assignment.assigned_topic_partitions[0].topic_id == topic
        )
        refused = two.heartbeat(**join_request(group, ["orders"]))
        assert refused.error_code == 16, refused  # NOT_COORDINATOR
        # The same over gRPC batched, and over either node's Kafka listener: FindCoordinator
        # (v3, and v4+ batched) names each group's node at its own listener, Metadata lists
        # both nodes, a group request to the other node gets NOT_COORDINATOR.
        mine = next(g for g in (f"m{i}" for i in range(100)) if leader[partition_for(g, P)] == 2)
        stub = classic_group_pb2_grpc.ClassicGroupServiceStub(two.channel)
        batched = stub.FindCoordinator(
            classic_group_pb2.FindCoordinatorRequest(key_type=0, coordinator_keys=[group, mine]),
            timeout=5,
        )
        assert [
            (c.key, c.node_id, f"{c.host}:{c.port}", c.error_code) for c in batched.coordinators
        ] == [
            (group, 1, one.address, 0),
            (mine, 2, two.address, 0),
        ]
        brokers = {n: nodes.kafka_address(n) for n in (1, 2)}
        for n in (1, 2):
            assert kafka_view(brokers[n], group, mine) == {
                "v3": (0, 1, brokers[1]),
                "v4": [(group, 1, brokers[1], 0), (mine, 2, brokers[2], 0)],
                "metadata": [(1, brokers[1]), (2, brokers[2])],
                "heartbeat": 25 if n == 1 else 16,  # UNKNOWN_MEMBER_ID there, else NOT_COORDINATOR
            }

        # A push stream on the leader ends with NOT_COORDINATOR when the partition moves.
        stub = consumer_group_pb2_grpc.ConsumerGroupServiceStub(one.channel)
        stream = stub.ConsumerGroupWatch(
            cg.ConsumerGroupWatchRequest(group_id=group, member_id=joined.member_id), timeout=30
        )
        first = next(stream)
        assert first.error_code == 0 and first.member_epoch == 1

        moved = run_cli("cluster", "move", "--store", dsn, "--partition", str(p), "--to", "2")
        assert moved.returncode == 0, moved.stderr
        assert moved.stdout == f"Partition {p} moves to node 2 (pinned there).\n"
        last = list(stream)[-1]
        assert last.error_code == 16, last
        until(lambda: find_coordinator(one, group) == (0, two.address), "node 1 to name node 2")

        def moved_there() -> bool:
            q = describe(dsn)["partitions"][p]
            return (q["leader"], q["state"], q["target"], q["pinned"]) == (2, "serving", 2, True)

        until(moved_there, "the move")
        assert describe(dsn)["partitions"][p]["leader_epoch"] > leader_epoch
        # The member kept its membership: node 2 loaded it with its session restarted.
        again = two.heartbeat(group_id=group, member_id=joined.member_id, member_epoch=1)
        assert (again.error_code, again.member_epoch) == (0, 1)
        assert (
            one.heartbeat(group_id=group, member_id=joined.member_id, member_epoch=1).error_code
            == 16
        )

        # The CLI finds each group's node: a group led by node 1 beside the moved one.
        other = next(
            g
            for g in (f"h{i}" for i in range(100))
            if leader[partition_for(g, P)] == 1 and partition_for(g, P) != p
        )
        assert one.heartbeat(**join_request(other, ["orders"])).error_code == 0
        listed = run_cli("groups", "list", "--bootstrap-server", two.address, "--output", "json")
        assert listed.returncode == 0, listed.stderr
        assert [g["group_id"] for g in json.loads(listed.stdout)] == sorted([group, other])
        for bootstrap in (one.address, two.address):
            described = run_cli(
                "groups",
                "describe",
                group,
                other,
                "--members",
                "--bootstrap-server",
                bootstrap,
                "--output",
                "json",
            )
            assert described.returncode == 0, described.stderr
            assert [
                (g["group_id"], g["error"], len(g["members"])) for g in json.loads(described.stdout)
            ] == [(group, None, 1), (other, None, 1)]

        # A group's configs are changed and described at its node, from any bootstrap node.
        altered = run_cli(
            "configs",
            "alter",
            "--group",
            other,
            "--add-config",
            "consumer.session.timeout.ms=50000",
            "--bootstrap-server",
            two.address,
        )
        assert altered.returncode == 0, altered.stderr
        for bootstrap in (one.address, two.address):
            configs = run_cli(
                "configs",
                "describe",
                "--group",
                other,
                "--bootstrap-server",
                bootstrap,
                "--output",
                "json",
            )
            assert configs.returncode == 0, configs.stderr
            rows = json.loads(configs.stdout)["configs"]
            assert {r["name"]: (r["value"], r["source"]) for r in rows}[
                "consumer.session.timeout.ms"
            ] == ("50000", "group override")

        # Refusals: a node that is not live, a partition that does not exist, not PostgreSQL.
        for argv, message in (
            (("--partition", "0", "--to", "7"), "node 7 is not a live coordinator node"),
            (("--partition", "99", "--to", "1"), "no coordinator partition 99"),
        ):
            out = run_cli("cluster", "move", "--store", dsn, *argv)
            assert (out.returncode, out.stdout) == (1, ""), out
            assert message in out.stderr
        out = run_cli("cluster", "describe", "--store", str(tmp_path))
        assert out.returncode == 2 and "must be a postgresql:// URI" in out.stderr

        # Metrics: what each node leads, per partition, and its cluster view.
        metrics, two_metrics = scrape(one), scrape(two)
        # (The balancer may have moved another partition back to node 1 meanwhile.)
        counts = samples(metrics, "kip848_node_partitions")
        assert sorted(counts) == sorted(f'{{state="{s}"}}' for s in PARTITION_STATES)
        served = counts['{state="serving"}']
        assert served + samples(two_metrics, "kip848_node_partitions")['{state="serving"}'] == P
        assert counts['{state="not-led"}'] == P - served
        serving = f'{{partition="{p}",state="serving"}}'
        assert samples(metrics, "kip848_partition_state")[serving] == 0.0
        assert samples(two_metrics, "kip848_partition_state")[serving] == 1.0
        epoch_label = f'{{partition="{p}"}}'
        assert samples(two_metrics, "kip848_partition_leader_epoch")[epoch_label] > leader_epoch
        assert samples(metrics, "kip848_node_reachable") == {"": 1.0}
        assert samples(metrics, "kip848_node_partition_moves_total")[""] >= 1.0
        assert samples(two_metrics, "kip848_node_partition_loads_total")[""] >= 4.0
        # The load of every partition a node serves, the moved one on node 2 only.
        for text in (metrics, two_metrics):
            loads = samples(text, "kip848_shard_load_time_seconds")
            serving_here = {
                label.split('"')[1]  # {partition="N",state="serving"}
                for label, v in samples(text, "kip848_partition_state").items()
                if v == 1.0 and 'state="serving"' in label
            }
            assert {label.split('"')[1] for label in loads} == serving_here, (loads, text)
        assert samples(two_metrics, "kip848_shard_loaded_records")[f'{{shard="{p}"}}'] >= 1.0
        assert f'{{shard="{p}"}}' not in samples(metrics, "kip848_shard_loaded_records")
        controllers = samples(metrics, "kip848_node_controller")[""]
        assert controllers + samples(two_metrics, "kip848_node_controller")[""] == 1.0
        for text in (metrics, two_metrics):  # Prometheus' own rules (Debian's promtool)
            check = subprocess.run(
                ["promtool", "check", "metrics"],
                input=text,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert (check.returncode, check.stdout + check.stderr) == (0, "")

        # A graceful stop hands everything over at once (not after the lease).
        stopped_at = time.monotonic()
        assert nodes.stop(2) == 0
        until(lambda: describe(dsn)["partitions"][p]["state"] == "serving", "node 1 to take all")
        assert time.monotonic() - stopped_at < 2.0  # the lease
        assert {q["leader"] for q in describe(dsn)["partitions"]} == {1}
    finally:
        nodes.stop_all()


def acls(server) -> list[tuple[str, str, int]]:
    """Every ACL ``server`` knows: (resource name, principal, operation)."""
    resp = every_acl(server.admin)
    return [(r.resource_name, a.principal, a.operation) for r in resp.resources for a in r.acls]


def kafka_view(address: str, group: str, other: str) -> dict:
    """What the Kafka listener at ``address`` answers: FindCoordinator v3 for ``group`` and v4
    for both (error, node id, ``HOST:PORT``), Metadata's brokers, a Heartbeat's error."""
    client = KafkaClient(address)
    try:
        v3 = client.call(request(10, 3, key=group, key_type=0))
        v4 = client.call(request(10, 4, key_type=0, coordinator_keys=[group, other]))
        metadata = client.call(request(3, 12, topics=None, allow_auto_topic_creation=False))
        hb = client.call(request(12, 4, group_id=group, generation_id=1, member_id="ghost"))
    finally:
        client.close()
    return {
        "v3": (v3.error_code, v3.node_id, f"{v3.host}:{v3.port}"),
        "v4": [(c.key, c.node_id, f"{c.host}:{c.port}", c.error_code) for c in v4.coordinators],
        "metadata": [(b.node_id, f"{b.host}:{b.port}") for b in metadata.brokers],
        "heartbeat": hb.error_code,
    }


def scrape(server) -> str:
    import urllib.request

    with urllib.request.urlopen(f"http://{server.metrics_address}/metrics", timeout=5) as r:
        return r.read().decode()


def samples(text: str, name: str) -> dict[str, float]:
    """``labels -> value`` of every sample of ``name`` (labels "" when it has none)."""
    out = {}
    for line in text.splitlines():
        if line.startswith(name) and line[len(name)] in "{ ":
            labels, _, value = line[len(name) :].rpartition(" ")
            out[labels] = float(value)
    return out


def test_a_node_behind_the_cluster_log_catches_up_and_runs_the_command_again(
    pg_server, tmp_path: Path
) -> None:
    """A command of the cluster log (a topic, a group's config) through a node that has not yet
    applied what another node just wrote there is refused by the store (it would be decided on
    an older state): the node catches up and runs it again, on the state that includes the
    other node's write, as Kafka's controller would, instead of answering it
    COORDINATOR_NOT_AVAILABLE. Five rounds, each a topic through node 1 and at once another
    through node 2 (which follows the cluster log every 200 ms), then a group config and a
    topic deleted through node 2 right after node 1 wrote."""
    dsn = pg_server.fresh_store_dsn()
    nodes = Nodes(tmp_path, dsn, *SETTINGS)
    try:
        one, two = nodes.start(1), nodes.start(2)
        until(
            lambda: sorted(n["partitions"] for n in describe(dsn)["nodes"]) == [P // 2, P // 2],
            "three partitions on each node",
        )
        for i in range(5):
            one.create_topic(f"first-{i}", 1)
            two.create_topic(f"second-{i}", 1)  # asserts error code 0
        one.create_topic("third", 1)
        altered = two.admin.IncrementalAlterConfigs(
            admin_pb2.IncrementalAlterConfigsRequest(
                resources=[
                    admin_pb2.IncrementalAlterConfigsRequest.Resource(
                        resource_type=16,  # GROUP
                        resource_name="configured",
                        configs=[
                            admin_pb2.IncrementalAlterConfigsRequest.AlterableConfig(
                                name="consumer.heartbeat.interval.ms",
                                config_operation=0,
                                value="6000",
                            )
                        ],
                    )
                ]
            ),
            timeout=10,
        )
        assert [(r.error_code, r.resource_name) for r in altered.responses] == [(0, "configured")]
        one.create_topic("fourth", 1)
        deleted = two.admin.DeleteTopics(
            admin_pb2.DeleteTopicsRequest(names=["first-0"]), timeout=10
        )
        assert (deleted.error_code, [(t.name, t.error_code) for t in deleted.results]) == (
            0,
            [("first-0", 0)],
        )
        # Both nodes end with every topic but the deleted one.
        until(
            lambda: all(n["cluster_log_lag"] == 0 for n in describe(dsn)["nodes"]),
            "both nodes to apply the cluster log",
        )
        names = {f"first-{i}" for i in range(1, 5)} | {f"second-{i}" for i in range(5)}
        names |= {"third", "fourth"}
        for server in (one, two):
            listed = server.admin.ListTopics(admin_pb2.ListTopicsRequest(), timeout=10)
            assert {t.name for t in listed.topics} == names
        again = [
            line
            for line in nodes.logs[2][-1].read_text().splitlines()
            if "caught up with the cluster log" in line
        ]
        assert again, "node 2 never had to catch up: the test did not exercise the retry"
    finally:
        nodes.stop_all()
