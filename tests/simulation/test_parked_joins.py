"""Parked joins in the explorer and the simulator (issue 14: "The simulator and the exhaustive
explorer cover batching and late results").

With batching on, the runtime parks a join to a group that nobody has been answered in yet (new
or emptied) until the group's first target (``ConsumerGroups.parks_joins``): the explorer plays
the runtime's ``first_target`` call as one more action (``first-target g``) and the simulator
as a wait for the burst of joins; both deliver the parked answers to the waiting clients and
check invariant I7 (each parked join answered at most once, to the request that waits for it,
and never left without something on its way to answer it) besides the usual ones.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from coordinator.cli.simulation import main
from coordinator.core.target_updates import TargetUpdates
from coordinator.sim import invariants as inv
from coordinator.sim.explore import explore
from coordinator.sim.simulator import SimParams, Simulation, simulate

# Every situation of a parked join the explorer must meet (counted over its transitions).
SITUATIONS = {
    "parked",  # a join parked before the first target
    "parked behind another",  # a second join parked in the same burst
    "parked in an emptied group",  # every member removed, a new one joins
    "answered: a target",  # the first target installed, the parked joins answered with it
    "answered: UnknownMemberIdError",  # a parked member fenced (its session expired)
    "first target offloaded",  # the first target computed by a worker
    "parked while the first target is computed",  # a join while the worker computes
    "restart drops parked joins",  # a coordinator restart with parked joins
    "parked after a restart",  # the clients joined again after the restart
    "assignor failed with joins parked",  # the worker's assignor raised
    "answered: UnknownServerError",  # ... and the parked joins heard of it
}


# ------------------------------------------------------------------ the explorer


def test_explorer_parked_joins_with_offloading_and_a_restart() -> None:
    """Joins parked before the first target, fenced while parked, the first target offloaded
    while another member joins, its assignor failing, a restart with joins parked: I1-I3 and
    I7 in every state."""
    result = explore(
        members=2,
        partitions=2,
        depth=10,
        batching=True,
        offload=True,
        restarts=True,
        parks_joins=True,
        assignor_failures=True,
    )
    assert result.violation is None, result.render()
    assert not result.truncated
    assert result.states > 15_000
    assert result.checked == ("I1", "I1b", "I2", "I3", "I7")
    assert {k for k, n in result.covered.items() if n > 0} == SITUATIONS, result.render()
    assert "I7) hold in every explored state" in result.render()


def test_explorer_three_members_parked_in_one_burst() -> None:
    """Three members: the third joins while the first target of the other two is offloaded."""
    result = explore(
        members=3,
        partitions=2,
        depth=8,
        batching=True,
        offload=True,
        parks_joins=True,
        assignor_failures=True,
    )
    assert result.violation is None, result.render()
    assert not result.truncated
    assert result.states > 10_000
    assert result.covered["parked while the first target is computed"] > 0
    assert result.covered["first target offloaded"] > 0


@pytest.mark.slow
def test_explorer_parked_joins_deeper() -> None:
    result = explore(
        members=2,
        partitions=2,
        depth=12,
        batching=True,
        offload=True,
        restarts=True,
        parks_joins=True,
        assignor_failures=True,
    )
    assert result.violation is None, result.render()
    assert not result.truncated


def test_explorer_needs_batching_to_park_and_offload_to_fail() -> None:
    with pytest.raises(ValueError, match="parks_joins needs batching"):
        explore(members=2, partitions=2, depth=2, parks_joins=True)
    with pytest.raises(ValueError, match="assignor_failures needs offload"):
        explore(members=2, partitions=2, depth=2, batching=True, assignor_failures=True)


def _answers_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broken core that answers parked joins but keeps them parked."""
    original = TargetUpdates.answer_waiting

    def keep(self: Any, result: Any, group: Any, now_ms: int, error: Any = None) -> None:
        before = dict(group.waiting)
        original(self, result, group, now_ms, error)
        for member_id, token in before.items():
            if member_id in group.members:
                group.waiting[member_id] = token

    monkeypatch.setattr(TargetUpdates, "answer_waiting", keep)


def _never_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broken core that parks joins without asking for the first target."""
    original = TargetUpdates.park

    def park(self: Any, result: Any, group: Any, member_id: str, now_ms: int) -> Any:
        out = original(self, result, group, member_id, now_ms)
        out.parked_joins.clear()
        return out

    monkeypatch.setattr(TargetUpdates, "park", park)


def test_explorer_catches_a_parked_join_answered_and_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    _answers_twice(monkeypatch)
    result = explore(members=2, partitions=2, depth=8, batching=True, parks_joins=True)
    assert result.violation_name == inv.PARKED_ANSWERED_ONCE, result.render()
    # Shortest: the join is sent, parked, and the first target answers it (still parked).
    assert result.path == [
        "send 0: m0.1 heartbeat(epoch=0 owned={})",
        "deliver 0: corr 1 -> parked until the first target",
        "first-target grp: 3 records, 1 parked joins answered",
    ]
    assert "the core holds parked ['the join of m0.1 to grp'], but no request waits" in (
        result.violation or ""
    )


def test_explorer_catches_parked_joins_nobody_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    _never_asks(monkeypatch)
    result = explore(members=2, partitions=2, depth=8, batching=True, parks_joins=True)
    assert result.violation_name == inv.PARKED_ANSWERED_ONCE, result.render()
    assert result.path == [
        "send 0: m0.1 heartbeat(epoch=0 owned={})",
        "deliver 0: corr 1 -> parked until the first target",
    ]
    assert "nothing will answer them" in (result.violation or "")


def test_cli_explore_parked_joins(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--explore", "--members", "2", "--partitions", "2", "--depth", "7", "--park"]
    assert main([*argv, "--offload", "--restarts", "--assignor-failures"]) == 0
    out = capsys.readouterr().out
    assert "safety invariants (I1, I1b, I2, I3, I7) hold in every explored state" in out
    assert "parked requests (transitions): " in out


# ------------------------------------------------------------------ the simulator

# Batching, offloading, and four members that start within 30 ms: a burst of joins to a new group.
BURST = {"assignment_interval_ms": 1000, "offload_min_members": 2, "start_spread_ms": 30}


def _ok(params: SimParams) -> Simulation:
    sim = Simulation(params)
    summary = sim.run()
    if summary.violation is not None:
        pytest.fail(summary.violation.report, pytrace=False)
    assert summary.final_state == "Stable"
    assert summary.time_to_stable_ms is not None
    assert summary.time_to_stable_ms <= params.liveness_bound_ms()
    return sim


def test_simulation_parks_joins_by_default_with_batching() -> None:
    """Every fault, 16 seeds: every parked join answered once (a target, or UNKNOWN_MEMBER_ID),
    none left parked, the group converges; restarts drop parked joins and the clients join
    again."""
    seen: Counter[str] = Counter()
    for seed in range(16):
        params = SimParams(seed=seed, steps=300, members=4, **BURST)  # type: ignore[arg-type]
        assert params.parks()
        sim = _ok(params)
        seen.update(sim.summary.events)
        assert sim.group is not None and not sim.group.waiting
    assert seen["parked-join"] >= 48  # the four members of at least every first burst
    assert seen["first-target-offloaded"] > 0
    assert seen["parked-join-dropped-by-restart"] > 0
    # Each parked join is answered exactly once — its share, UNKNOWN_MEMBER_ID (removed while
    # parked), COORDINATOR_NOT_AVAILABLE (a write failed) — unless a restart dropped it.
    errors = sum(n for k, n in seen.items() if k.startswith("parked-answered-"))
    assert (
        seen["parked-join-answered"] + errors + seen["parked-join-dropped-by-restart"]
        == (seen["parked-join"])
    )


def test_simulation_with_kafkas_immediate_answers() -> None:
    for seed in range(4):
        params = SimParams(seed=seed, steps=300, members=4, parks_joins=False, **BURST)  # type: ignore[arg-type]
        assert not params.parks()
        sim = _ok(params)
        assert sim.summary.events["parked-join"] == 0
        assert "--no-park" in params.command()


def test_simulation_catches_parked_joins_nobody_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    _never_asks(monkeypatch)
    summary = simulate(SimParams(seed=0, steps=100, members=4, **BURST))  # type: ignore[arg-type]
    assert summary.violation is not None
    assert summary.violation.name == inv.PARKED_ANSWERED_ONCE
    assert "nothing will answer them" in summary.violation.report


def test_simulation_catches_a_parked_join_answered_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    _answers_twice(monkeypatch)
    summary = simulate(SimParams(seed=0, steps=100, members=4, **BURST))  # type: ignore[arg-type]
    assert summary.violation is not None
    assert summary.violation.name == inv.PARKED_ANSWERED_ONCE


def test_cli_simulate_no_park(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--seed", "3", "--steps", "100", "--members", "3", "--assignment-interval-ms", "1000"]
    assert main([*argv, "--quiet"]) == 0
    parked = capsys.readouterr().out
    assert main([*argv, "--quiet", "--no-park"]) == 0
    immediate = capsys.readouterr().out
    assert parked.startswith("seed 3: ok") and immediate.startswith("seed 3: ok")
    assert parked != immediate  # another run: the joins were parked in one, not the other


def test_simulation_answers_a_burst_of_70_parked_joins_64_per_command() -> None:
    """70 members start within 50 ms (no faults): all parked, one first target, answered 64 by
    the first call and 6 by the call it asks for; the group converges."""
    params = SimParams(
        seed=0,
        steps=50,
        members=70,
        partitions=8,
        static_members=0,
        faults=frozenset(),
        assignment_interval_ms=1000,
        start_spread_ms=50,
    )
    sim = _ok(params)
    assert sim.summary.events["parked-join"] == 70
    assert sim.summary.events["parked-join-answered"] == 70
    calls = [line.split("coordinator: ", 1)[1] for line in sim.trace if "first target of" in line]
    assert [c.split(": ", 1)[1] for c in calls] == [
        "81 records, 64 parked joins answered",
        "6 records, 6 parked joins answered",
    ]
