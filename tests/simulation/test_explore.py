"""Exhaustive small-scope checking (issue 7): every interleaving of 2–3 members over 2–3
partitions, with lost requests/responses, timeouts and coordinator timers, to a bounded depth."""

from __future__ import annotations

import pytest

from coordinator.cli.simulation import main
from coordinator.core import reconciliation
from coordinator.sim import invariants as inv
from coordinator.sim.explore import explore


def test_two_members_two_partitions() -> None:
    result = explore(members=2, partitions=2, depth=12)
    assert result.violation is None, result.render()
    assert not result.truncated
    assert result.states > 10_000
    print(result.render())


@pytest.mark.slow
def test_two_members_two_partitions_deeper() -> None:
    result = explore(members=2, partitions=2, depth=15)
    assert result.violation is None, result.render()
    assert not result.truncated
    print(result.render())


@pytest.mark.slow
def test_three_members_three_partitions() -> None:
    result = explore(members=3, partitions=3, depth=9)
    assert result.violation is None, result.render()
    assert not result.truncated
    assert result.states > 25_000  # 29,912: keyed on the live state machines
    print(result.render())


def test_two_members_four_partitions_one_static() -> None:
    result = explore(members=2, partitions=4, depth=10, static_members=1)
    assert result.violation is None, result.render()
    assert not result.truncated


def test_broken_core_gives_a_shortest_counterexample(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reconciliation, "owns_any", lambda owned, partitions: False)
    result = explore(members=2, partitions=2, depth=12, invariants=[inv.NO_DOUBLE_OWNERSHIP])
    assert result.violation_name == inv.NO_DOUBLE_OWNERSHIP
    text = result.render()
    assert "a shortest path" in text
    # m0 joins, gets both partitions and acks; m1 joins; m0's next heartbeat makes the broken core
    # take t0-1 from m0 without waiting for the revocation; m1 heartbeats and receives t0-1 while
    # m0 still owns it. Breadth-first search: no shorter path exists.
    assert len(result.path) == 11, text
    result_b = explore(members=2, partitions=2, depth=12)
    assert result_b.violation_name == inv.OWNED_KNOWN_TO_COORDINATOR
    assert len(result_b.path) <= len(result.path)


def test_cli_explore(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--explore", "--members", "2", "--partitions", "2", "--depth", "8"]) == 0
    out = capsys.readouterr().out
    assert "distinct states" in out and "hold in every explored state" in out


# ------------------------------------------------------------------ batching and offloading


def test_batching_offloading_and_a_restart_in_between() -> None:
    """Targets at most once per interval (the ASSIGN timer moves the clock), computed by a
    worker whose outcome may come back at any later point, and a coordinator restart anywhere
    (also while a target is being computed): the invariants hold in every state."""
    result = explore(members=2, partitions=2, depth=10, batching=True, offload=True, restarts=True)
    assert result.violation is None, result.render()
    assert not result.truncated
    assert result.states > 10_000


@pytest.mark.slow
def test_batching_offloading_and_restarts_deeper() -> None:
    result = explore(members=2, partitions=2, depth=12, batching=True, offload=True, restarts=True)
    assert result.violation is None, result.render()
    assert not result.truncated


def test_an_outcome_applied_for_departed_members_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broken core that installs an offloaded outcome without skipping the members that left
    during the computation: the explorer finds the path (a member leaves — here its session
    expires — while a worker computes) and the target invariant fails. With the
    assignment interval at 0 a departure leaves the target to the next heartbeat, so the late
    outcome is still current when it comes back; with batching and two members the departure
    computes the last member's target itself and the outcome is discarded as stale."""
    from coordinator.core import target_assignment, target_updates

    def no_skip(group, outcome, timestamp_ms):  # type: ignore[no-untyped-def]
        targets = {m: new for m, (_i, new) in outcome.changed.items()}
        return target_assignment.target_records(group, targets, None, outcome.epoch, timestamp_ms)

    monkeypatch.setattr(target_updates, "outcome_records", no_skip)
    result = explore(
        members=2,
        partitions=2,
        depth=12,
        offload=True,
        invariants=[inv.TARGET_VALID],
    )
    assert result.violation_name == inv.TARGET_VALID, result.render()
    assert "which is not a member" in (result.violation or "")
    # The second join makes the group big enough to offload: the driver copies the inputs for
    # a worker as soon as that join is durable; the first member's session expires; then the
    # worker's outcome comes back.
    assert [step.split(":")[0] for step in result.path] == [
        "send 0", "deliver 0", "send 1", "deliver 1", "fire session timer of m0.1", "offload-done grp"
    ]  # fmt: skip


def test_classic_members_with_turns_duplicates_timers_and_losses() -> None:
    """Two cooperative classic clients of a settled group, every interleaving of their
    JoinGroup/SyncGroup/Heartbeat, lost and duplicated requests, two requests in one turn of
    the coordinator's loop, and the classic session/join/sync timers: I1-I3 and I7 hold."""
    result = explore(members=2, partitions=2, depth=8, classic=True, turns=True, duplicates=True)
    assert result.violation is None, result.render()
    assert not result.truncated
    assert result.states > 10_000
    assert result.covered["classic JoinGroup parked"] > 0
    assert result.covered["classic SyncGroup parked"] > 0
