"""Rack-aware assignment with real clients: confluent-kafka (librdkafka) KIP-848 consumers with
``client.rack`` in two racks, through the Kafka listener of a coordinator whose topic registry
was given each partition's replica racks (coordinator-only mode). Every consumer is assigned
only partitions with a replica in its own rack, balanced; ``kip848 groups describe --members
--verbose`` and the Prometheus gauge say so."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import run_cli
from kafka_clients import Fleet
from kafka_support import KafkaServer

from kip848.v1 import admin_pb2

TOPIC = "racked"
RACK_OF = {0: "az-1", 1: "az-1", 2: "az-2", 3: "az-1", 4: "az-2", 5: "az-2"}
CONSUMERS = {"a1": "az-1", "a2": "az-1", "b1": "az-2", "b2": "az-2"}
SETTINGS = (
    "--set",
    "group.consumer.heartbeat.interval.ms=500",
    "--set",
    "group.consumer.min.heartbeat.interval.ms=500",
)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[KafkaServer]:
    s = KafkaServer(tmp_path / "data", "--metrics-listen", "127.0.0.1:0", *SETTINGS, clock="system")
    try:
        yield s
    finally:
        assert s.stop() == 0, s.stderr_text()


def never_stable(
    server: KafkaServer, fleet: Fleet, group: dict, got: dict[str, set[tuple[str, int]]]
) -> str:
    """Why the coordinator's view never matched the clients': the group's epochs (a target
    behind the group epoch: Assigning), each member's epoch, assignment and target (which one
    is reconciling, towards what), what the coordinator logged of the group (epoch bumps and
    their causes, fenced members, failed targets) and every rebalance callback of the
    clients, in time order."""

    def parts(assignment: list[dict]) -> list[int]:
        return sorted(p for a in assignment for p in a["partitions"])

    members = [
        f"  {m['client_id']} {m['member_id']} epoch {m['member_epoch']}: assigned "
        f"{parts(m['assignment'])}, target {parts(m['target_assignment'])}"
        for m in group["members"]
    ]
    logged = [ln for ln in server.stderr_text().splitlines() if "[GroupId g]" in ln]
    callbacks = [
        f"  {e['t']:.2f} {e['name']} {e['event']} {e.get('partitions')}"
        for e in fleet.snapshot()
        if e["event"] in ("assign", "revoke", "lost", "error", "closed")
    ]
    return "\n".join(
        [
            f"group {group['group_state']}, group epoch {group['group_epoch']}, assignment "
            f"epoch {group['assignment_epoch']}; the clients hold {got}",
            *members,
            "coordinator:",
            *(f"  {ln}" for ln in logged[-40:]),
            "clients:",
            *callbacks[-60:],
        ]
    )


def test_consumers_in_two_racks_read_from_their_own(server: KafkaServer, tmp_path: Path) -> None:
    racks: dict[str, list[int]] = {}
    for p, rack in RACK_OF.items():
        racks.setdefault(rack, []).append(p)
    made = server.admin.CreateTopics(
        admin_pb2.CreateTopicsRequest(
            topics=[
                admin_pb2.CreateTopicsRequest.CreatableTopic(
                    name=TOPIC,
                    num_partitions=len(RACK_OF),
                    replica_racks=[
                        admin_pb2.PartitionRacks(partitions=ps, racks=[rack])
                        for rack, ps in sorted(racks.items())
                    ],
                )
            ]
        ),
        timeout=10,
    )
    assert made.topics[0].error_code == 0, made

    fleet = Fleet(server.kafka_address, tmp_path)
    try:
        for name, rack in CONSUMERS.items():
            fleet.start(name, "librdkafka-consumer", "g", topics=[TOPIC], client_rack=rack)
        everything = {(TOPIC, p) for p in RACK_OF}

        def local_and_balanced(got: dict[str, set[tuple[str, int]]]) -> bool:
            return all(
                RACK_OF[p] == CONSUMERS[name] for name, parts in got.items() for _t, p in parts
            ) and sorted(map(len, got.values())) == [1, 1, 2, 2]

        got = fleet.wait_for_assignment(everything, 60, check=local_and_balanced)
        assert {CONSUMERS[n] for n in got if len(got[n]) == 2} == {"az-1", "az-2"}

        # The operator's view (once the coordinator has the group Stable with what the clients
        # were given): each member's rack and its rack-local partitions.
        deadline = time.monotonic() + 60
        while True:
            done = run_cli(
                "groups",
                "describe",
                "g",
                "--state",
                "--members",
                "--verbose",
                "--output",
                "json",
                "--bootstrap-server",
                server.grpc_address,
            )
            assert done.returncode == 0, done.stderr
            [group] = json.loads(done.stdout)
            members = {m["client_id"]: m for m in group["members"]}
            counts = {
                c: sum(len(a["partitions"]) for a in m["assignment"]) for c, m in members.items()
            }
            got = fleet.assignment(None)  # what the clients hold now (a rejoin may move it)
            if group["group_state"] == "Stable" and counts == {
                c: len(got.get(c, ())) for c in CONSUMERS
            }:
                break
            assert time.monotonic() < deadline, never_stable(server, fleet, group, got)
            time.sleep(0.2)
        assert local_and_balanced(got), got
        assert {c: m["rack_id"] for c, m in members.items()} == CONSUMERS
        assert {c: m["rack_local_partitions"] for c, m in members.items()} == {
            c: len(got[c]) for c in CONSUMERS
        }

        # The gauge: every assigned partition of the group is read in its member's rack.
        assert server.metrics_address is not None
        with urllib.request.urlopen(f"http://{server.metrics_address}/metrics", timeout=10) as r:
            scraped = r.read().decode()
        assert 'kip848_consumer_group_rack_local_ratio{group="g"} 1.0' in scraped.splitlines()
        fleet.check_exclusive_ownership()
    finally:
        fleet.close()
