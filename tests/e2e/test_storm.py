"""A small join storm through a real server, driven by bench/storm.py's C load generator.

The generator (bench/loadgen/h2storm.c) joins every member at once and then behaves like
Kafka's Java consumer; the run must converge with nothing fenced and every call answered, and
the group must be described as Stable at the members' epoch. This also keeps the benchmark's
machinery (spec, generator, journal count) working.
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


def storm(config: Config) -> dict[str, Any]:
    """40 members join one group of 400 partitions at once (1 s heartbeats); the run must
    converge with nothing fenced and every call answered, and the server must describe the
    group as Stable at the members' epoch."""
    fast = Config(name=config.name, flags=(*FAST_HEARTBEATS, *config.flags), interval_s=None)
    r = run_row(fast, 40, 400, connections=4, settle_s=1.0, max_seconds=90)
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
    # Every join bumped the group epoch: the target's epoch is the 40th.
    assert r["epoch"] == 40
    assert r["described"] == {
        "state": "Stable",
        "group_epoch": 40,
        "assignment_epoch": 40,
        "members": 40,
        "member_epochs": [40],
    }
    return r


def test_without_batching_every_join_computes_a_target() -> None:
    assert storm(CONFIGS["before"])["targets_computed"] == 40


def test_with_batching_joins_share_targets() -> None:
    """Kafka 4.3's default: a target at most once a second. The 40 joins arrive within a
    fraction of a second: the first computes at once (an empty group has nothing to wait for),
    the rest wait for the interval, a handful of targets in all."""
    r = storm(CONFIGS["default"])
    assert 2 <= r["targets_computed"] <= r["converged_at_s"] / 1.0 + 2
