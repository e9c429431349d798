"""The simulation with the coordinator's push stream (``--push``): the simulated KIP-848 clients
are kip848.client's state machine; pushes are hints, so every invariant holds with every fault,
and hand-offs no longer wait for heartbeats."""

from __future__ import annotations

import pytest

from coordinator.cli.simulation import main
from coordinator.sim.client import SimClient
from coordinator.sim.simulator import SimParams, Simulation, simulate
from kip848.client.member import Member


@pytest.mark.parametrize("seed", range(300, 310))
def test_seed_with_push_and_all_faults(seed: int) -> None:
    params = SimParams(seed=seed, steps=300, members=4, partitions=4, push=True)
    summary = simulate(params)
    assert summary.violation is None, summary.violation.report if summary.violation else ""
    assert summary.final_state == "Stable"
    assert summary.time_to_stable_ms is not None
    assert summary.time_to_stable_ms <= params.liveness_bound_ms()
    assert summary.events["push"] > 0


def test_the_simulated_client_is_the_sdk_member() -> None:
    sim = Simulation(SimParams(seed=1, steps=50, faults=frozenset(), push=True))
    sim.run()
    members = [c.member for c in sim.clients if isinstance(c, SimClient)]
    assert members and all(isinstance(m, Member) for m in members)


def test_push_converges_faster_without_faults() -> None:
    """Same seeds, no faults: with push the group is stable sooner (no waiting for intervals)."""
    slow = fast = 0
    for seed in range(200, 205):
        slow += simulate(SimParams(seed=seed, steps=100, members=4, faults=frozenset())).virtual_ms
        fast += simulate(
            SimParams(seed=seed, steps=100, members=4, faults=frozenset(), push=True)
        ).virtual_ms
    assert fast < slow


def test_cli_push_flag_is_in_the_reproduction_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seed", "5", "--steps", "60", "--faults", "none", "--push", "--quiet"]) == 0
    assert "seed 5: ok" in capsys.readouterr().out
    assert SimParams(seed=5, push=True).command().endswith(" --push")
