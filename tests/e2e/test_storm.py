"""A small join storm through a real server, driven by bench/storm.py's C load generator.

The generator (bench/loadgen/h2storm.c) joins every member at once and then behaves like
Kafka's Java consumer; the run must converge with nothing fenced and every call answered, and
the group must be described as Stable at the members' epoch. This also keeps the benchmark's
machinery (spec, generator, journal count) working.
"""

from __future__ import annotations

import pytest

from bench.storm import Config, run_row

pytestmark = pytest.mark.slow


FAST = Config(
    name="1 s heartbeats",
    flags=(
        "--set",
        "group.consumer.min.heartbeat.interval.ms=500",
        "--set",
        "group.consumer.heartbeat.interval.ms=1000",
    ),
    interval_s=None,
)


def test_a_join_storm_converges() -> None:
    r = run_row(FAST, 40, 400, connections=4, settle_s=1.0, max_seconds=90)
    assert r["error"] == ""
    assert r["converged"] is True
    assert (r["members"], r["joined"], r["at_epoch"]) == (40, 40, 40)
    assert (r["partitions"], r["covered"], r["owned_twice"]) == (400, 400, 0)
    assert r["members_fenced"] == 0
    assert r["unknown_member_id"] == 0
    assert r["unanswered"] == 0
    assert r["unanswered_by"] == {}
    assert r["errors_by_code"] == {}
    assert r["probe_calls"] > 0
    assert r["described"]["seconds"] < 10
    del r["described"]["seconds"]
    assert r["described"] == {
        "state": "Stable",
        "group_epoch": r["epoch"],
        "assignment_epoch": r["epoch"],
        "members": 40,
        "member_epochs": [r["epoch"]],
    }
    # Every join bumps the group epoch and computes a new target at once (no batching).
    assert r["epoch"] == 40
    assert r["targets_computed"] == 40
