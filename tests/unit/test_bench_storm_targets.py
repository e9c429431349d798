"""bench/storm.py's verdict on the 10,000-member row: within 3 assignment intervals of the last
join, nothing fenced, nothing refused, the unrelated group's heartbeats p99 <= 50 ms and max
<= 200 ms."""

from __future__ import annotations

from typing import Any

from bench.storm import _targets_ok


def row(**changes: Any) -> dict[str, Any]:
    r: dict[str, Any] = {
        "members": 10_000,
        "converged": True,
        "last_join_s": 20.0,
        "converged_at_s": 22.5,
        "interval_s": 1.0,
        "members_fenced": 0,
        "unanswered_by": {},
        "probe_p99_ms": 40.0,
        "probe_max_ms": 150.0,
    }
    return {**r, **changes}


def test_every_target_met() -> None:
    assert _targets_ok(row()) == [
        "≤ 3 intervals after the last join: yes",
        "0 fenced: yes",
        "0 refused: yes",
        "probe p99 ≤ 50 ms: yes",
        "probe max ≤ 200 ms: yes",
    ]


def test_each_target_missed() -> None:
    assert _targets_ok(
        row(
            converged_at_s=23.5,
            members_fenced=2,
            unanswered_by={"grpc-status 8 RESOURCE_EXHAUSTED": 3, "client deadline": 1},
            probe_p99_ms=253.0,
            probe_max_ms=993.0,
        )
    ) == [
        "≤ 3 intervals after the last join: no",
        "0 fenced: no",
        "0 refused: no (3)",
        "probe p99 ≤ 50 ms: no",
        "probe max ≤ 200 ms: no",
    ]
    assert _targets_ok(row(converged=False)) == ["converged: no"]
