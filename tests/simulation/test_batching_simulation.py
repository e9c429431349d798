"""The simulation with assignment batching (1 s) and targets computed by simulated workers
(which take up to 2 s of virtual time), under every fault: members leave, crash and bounce while
their group's target is being computed, and the coordinator restarts in between."""

from __future__ import annotations

from collections import Counter

import pytest

from coordinator.core import target_assignment, target_updates
from coordinator.sim import invariants as inv
from coordinator.sim.simulator import SimParams, Simulation, simulate

BATCHED = {"assignment_interval_ms": 1000, "offload_min_members": 2}


def _ok(params: SimParams) -> Simulation:
    sim = Simulation(params)
    summary = sim.run()
    if summary.violation is not None:
        pytest.fail(summary.violation.report, pytrace=False)
    assert summary.final_state == "Stable"
    assert summary.time_to_stable_ms is not None
    assert summary.time_to_stable_ms <= params.liveness_bound_ms()
    return sim


@pytest.mark.parametrize("seed", range(12))
def test_seed_with_all_faults_batched_and_offloaded(seed: int) -> None:
    _ok(SimParams(seed=seed, steps=300, members=4, **BATCHED))  # type: ignore[arg-type]


def test_the_seeds_cover_late_results_and_restarts_during_a_computation() -> None:
    seen: Counter[str] = Counter()
    faults: Counter[str] = Counter()
    for seed in range(6):
        sim = _ok(SimParams(seed=seed, steps=300, members=4, **BATCHED))  # type: ignore[arg-type]
        seen.update(sim.summary.events)
        faults.update(sim.summary.faults)
        seen["lost in a restart"] += sum(
            "lost in a restart" in line and "worker" in line for line in sim.trace
        )
        seen["restarts"] += sim.summary.restarts
    assert seen["offloaded-computation"] > 50
    assert faults["late-offload"] > 0  # a worker's outcome came back long after
    assert seen["timer-assign"] > 10
    assert seen["lost in a restart"] > 0
    assert seen["restarts"] > 0


def test_a_core_that_keeps_departed_members_in_an_outcome_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_skip(group, outcome, timestamp_ms):  # type: ignore[no-untyped-def]
        targets = {m: new for m, (_i, new) in outcome.changed.items()}
        return target_assignment.target_records(group, targets, None, outcome.epoch, timestamp_ms)

    monkeypatch.setattr(target_updates, "outcome_records", no_skip)
    failures = [
        simulate(
            SimParams(
                seed=seed, steps=300, members=4, invariants=frozenset({inv.TARGET_VALID}), **BATCHED
            )  # type: ignore[arg-type]
        ).violation
        for seed in range(6)
    ]
    caught = [v for v in failures if v is not None]
    assert caught, "no seed caught the broken core"
    assert {v.name for v in caught} <= {
        inv.TARGET_VALID,
        inv.REPLAY_EQUALS_LIVE,
        inv.CORE_ILLEGAL_STATE,
    }
    assert any(v.name == inv.TARGET_VALID for v in caught)
