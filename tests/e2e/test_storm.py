"""A small join storm through a real server, driven by bench/storm.py's C load generators.

The generator (bench/loadgen/h2storm.c over gRPC, kafkastorm.c over the Kafka protocol) joins
every member at once and then behaves like Kafka's Java consumer; the run must converge with
nothing fenced and every call answered, and the group must be described as Stable at the
members' epoch. This also keeps the benchmark's machinery (spec, generators, journal count)
working.
"""

from __future__ import annotations

from typing import Any

import pytest

from bench.storm import CONFIGS, Config, run_row

pytestmark = pytest.mark.slow


FAST_HEARTBEATS = (
    "--set",
    "group.consumer.min.heartbeat.interval.ms=500",
    "--set",
    "group.consumer.heartbeat.interval.ms=1000",
)


def storm(
    config: Config, *, members: int = 40, connections: int = 4, protocol: str = "grpc"
) -> dict[str, Any]:
    """MEMBERS join one group of 10 x MEMBERS partitions at once (1 s heartbeats); the run
    must converge with nothing fenced and every call answered, and the server must describe
    the group as Stable at the members' epoch."""
    fast = Config(name=config.name, flags=(*FAST_HEARTBEATS, *config.flags), interval_s=None)
    r = run_row(
        fast,
        members,
        10 * members,
        connections=connections,
        settle_s=1.0,
        max_seconds=90,
        protocol=protocol,
    )
    assert r["error"] == ""
    assert r["converged"] is True
    assert (r["protocol"], r["connections"]) == (protocol, connections)
    assert (r["members"], r["joined"], r["at_epoch"]) == (members, members, members)
    assert (r["partitions"], r["covered"], r["owned_twice"]) == (10 * members, 10 * members, 0)
    assert r["members_fenced"] == 0
    assert r["unknown_member_id"] == 0
    assert r["unanswered"] == 0
    assert r["unanswered_by"] == {}
    assert r["errors_by_code"] == {}
    assert r["probe_calls"] > 0
    assert r["described"]["seconds"] < 10
    del r["described"]["seconds"]
    # Every join bumped the group epoch: the target's epoch is the last join's.
    assert r["epoch"] == members
    assert r["described"] == {
        "state": "Stable",
        "group_epoch": members,
        "assignment_epoch": members,
        "members": members,
        "member_epochs": [members],
    }
    return r


def test_without_batching_every_join_computes_a_target() -> None:
    assert storm(CONFIGS["before"])["targets_computed"] == 40


def test_with_batching_the_burst_gets_one_first_target() -> None:
    """The defaults: the 40 joins to the new group are parked until joins stop arriving, then
    one target covers them all and each join is answered with its share: nothing to revoke,
    the group has converged when its last join is answered (well within a heartbeat)."""
    r = storm(CONFIGS["default"])
    assert r["targets_computed"] == 1
    assert r["converged_at_s"] - r["last_join_s"] < 1.0


def test_kafka_protocol_one_connection_per_member() -> None:
    """The same storm over the Kafka listener, 100 members each on its own connection (as Java
    consumers are): one first target for the burst."""
    r = storm(CONFIGS["default"], members=100, connections=100, protocol="kafka")
    assert r["targets_computed"] == 1
    assert r["converged_at_s"] - r["last_join_s"] < 1.0
    assert r["config"].endswith(", Kafka protocol")


def test_kafka_protocol_pipelined_on_shared_connections() -> None:
    """100 members on 10 Kafka connections, their heartbeats pipelined and answered in order
    (kafkastorm checks every correlation id), a target per join."""
    r = storm(CONFIGS["before"], members=100, connections=10, protocol="kafka")
    assert r["targets_computed"] == 100
