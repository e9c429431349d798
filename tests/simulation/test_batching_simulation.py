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


def test_small_changes_inline_and_the_others_offloaded_under_every_fault(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With ``group.consumer.assignor.offload.inline.max.changed.members`` at 4 (the sweeps
    above offload every computation), a change of up to 4 members is computed in its command
    and the others in a worker, with computations out, late outcomes and restarts in between:
    every invariant holds and the groups settle within the same bound. One topic: the group
    is homogeneous (with several, client 0 subscribes to one only: ``uniform`` declines)."""
    paths: Counter[str] = Counter()
    small_change = target_updates.TargetUpdates._small_change

    def counting(self, group, assignor, stamp):  # type: ignore[no-untyped-def]
        records = small_change(self, group, assignor, stamp)
        paths["inline" if records is not None else "offloaded"] += 1
        return records

    monkeypatch.setattr(target_updates.TargetUpdates, "_small_change", counting)
    seen: Counter[str] = Counter()
    for seed in range(6):
        params = SimParams(
            seed=seed, steps=300, members=4, topics=1, offload_inline_max_changed=4, **BATCHED
        )  # type: ignore[arg-type]
        seen.update(_ok(params).summary.events)
    assert paths["inline"] > 20
    assert seen["offloaded-computation"] > 20


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
