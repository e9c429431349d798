"""The two bugs behind the chaos fuzz hang, found by the simulator and the explorer on the
runtime's own driver (issue 32: they were in the runtime's copy of the policies, the one the
old simulator did not run).

* dbe0d0a — a parked request is registered in its command's turn. Before the fix the caller of
  a queued command registered its parked request when it resumed, a loop step later; a command
  queued behind it in the same turn could answer it first, without writing anything (a JoinGroup
  that completes the join barrier, or restarts the rebalance under a waiting SyncGroup), and
  that answer went to no one: the client waited for its deadline.
* 74402b7 — a member's second SyncGroup while its first waits for the leader answers the first
  (REBALANCE_IN_PROGRESS). Before the fix the second replaced the first's token, and the first
  was never answered.

How the seeds and paths below were found and checked: with both fixes reverted in the code
itself (on a branch that never reached main) —
``Driver._in_turn`` answers its caller through ``host.call_soon`` (the caller resumes, then
registers), and ``ClassicGroups._sync`` no longer answers the earlier token. There the explorer
(2 cooperative classic clients, ``turns``, ``duplicates``) finds the first bug after the five
actions asserted below, and without ``turns`` the second after the eleven; the simulator finds
the first with seed 4 of the busy-loop fleet below (failing seeds 4, 6, 10, 13, 17, 18, 23,
26, 35, 37, 39 of 0-39) and the second with seed 11 of the CI's eager fleet (4, 11, 18 of 0-19).
The tests reproduce each revert with a monkeypatch of the same function and find them again,
then check that the code on main holds in the same scopes and seeds.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from coordinator.runtime.driver import Driver
from coordinator.sim import invariants as inv
from coordinator.sim.explore import explore
from coordinator.sim.faults import parse_faults
from coordinator.sim.simulator import SimParams, simulate
from legacy_bridge.classic_groups import ClassicGroups

CLASSIC = {
    "members": 2,
    "partitions": 2,
    "classic": True,
    "duplicates": True,
    "timers": False,
    "losses": False,
}
"""Two cooperative classic clients of a settled group (generation 1), whose requests may be
duplicated; no timers or losses (the bugs need neither)."""

BUSY_FLEET = SimParams(
    seed=4,
    steps=300,
    members=4,
    classic=4,
    protocol="eager",
    faults=parse_faults("busy-loop,crash,leave"),
    fault_rate=0.3,
)
"""Four eager classic consumers; the coordinator's loop is often held up (``busy-loop``), so
requests queue and run one after the other in one turn; members crash and leave."""

EAGER_FLEET = SimParams(
    seed=11,
    steps=300,
    members=3,
    classic=3,
    protocol="eager",
    faults=parse_faults("all") - {"switch-protocol"},
)
"""test_classic_simulation's pure eager fleet, every fault (``duplicate`` among them)."""


def register_when_the_caller_resumes(monkeypatch: pytest.MonkeyPatch) -> None:
    """dbe0d0a reverted: a queued command's caller is answered — and its parked request
    registered — on a later loop step, not in the command's turn."""

    def in_turn(
        self: Driver,
        key: int,
        fn: Any,
        read: bool,
        park: bool,
        fut: Any,
        bound: Any,
        group: str | None,
    ) -> None:
        if fut.done():
            return
        try:
            self.check_serving()
            response, batch = self._execute(key, fn, read, group)
        except Exception as exc:  # noqa: BLE001 - to the caller, as the driver does
            fut.set_exception(exc)
            return
        self.host.call_soon(partial(self._answer, key, fut, response, batch, park, bound))

    monkeypatch.setattr(Driver, "_in_turn", in_turn)


def forget_the_first_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    """74402b7 reverted: a second SyncGroup of a waiting member replaces the first's token
    without answering it."""
    sync = ClassicGroups._sync

    def without_superseded(self: ClassicGroups, *args: Any) -> Any:
        result = sync(self, *args)
        result.completions = [
            (token, answer)
            for token, answer in result.completions
            if "superseded this one" not in (getattr(answer, "error_message", None) or "")
        ]
        return result

    monkeypatch.setattr(ClassicGroups, "_sync", without_superseded)


def steps(path: list[str]) -> list[str]:
    return [step.split(":")[0] for step in path]


# ------------------------------------------------------------------ the explorer


def test_the_explorer_finds_an_answer_given_before_its_request_was_registered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Both members rejoin, their JoinGroups queue in one turn: the first parks, the second
    completes the barrier and answers the first at once — which nothing waits for yet."""
    register_when_the_caller_resumes(monkeypatch)
    result = explore(depth=6, turns=True, **CLASSIC)  # type: ignore[arg-type]
    assert result.violation_name == inv.PARKED_ANSWERED_ONCE, result.render()
    assert steps(result.path) == ["rejoin 0", "send 0", "rejoin 1", "send 1", "turn 0 1"]
    assert "which no request waits for" in (result.violation or "")


def test_the_explorer_finds_a_first_sync_left_unanswered(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rebalance, then the follower's SyncGroup is delivered twice in a row (``dup 1``) while
    it waits for the leader: the first copy's caller waits for a token the core no longer
    holds."""
    forget_the_first_sync(monkeypatch)
    result = explore(depth=11, **CLASSIC)  # type: ignore[arg-type]
    assert result.violation_name == inv.PARKED_ANSWERED_ONCE, result.render()
    assert steps(result.path) == [
        "rejoin 0", "send 0", "deliver 0", "rejoin 1", "send 1", "deliver 1", "respond 1",
        "send 1", "dup 1",
    ]  # fmt: skip
    assert "nothing will answer them" in (result.violation or "")


def test_the_explorer_finds_neither_on_the_fixed_code() -> None:
    """The same scope, both kinds of interleaving at once, one action deeper than either
    path: I7 holds in every state (3,373 of them)."""
    result = explore(depth=12, turns=True, **CLASSIC)  # type: ignore[arg-type]
    assert result.violation is None, result.render()
    assert not result.truncated
    assert result.covered["classic JoinGroup parked"] > 0
    assert result.covered["classic SyncGroup parked"] > 0


# ------------------------------------------------------------------ the simulator


def test_the_simulator_finds_a_parked_sync_answered_in_its_own_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fuzz hang itself: a queued SyncGroup parks, a JoinGroup queued behind it in the
    same turn restarts the rebalance and answers it REBALANCE_IN_PROGRESS without a write;
    its caller registers only afterwards."""
    assert simulate(BUSY_FLEET).violation is None  # the code on main
    register_when_the_caller_resumes(monkeypatch)
    violation = simulate(BUSY_FLEET).violation
    assert violation is not None and violation.name == inv.PARKED_ANSWERED_ONCE
    assert "which no request waits for" in violation.report
    assert "SyncGroupResponse(error_code=27" in violation.report
    assert "the coordinator's loop runs again" in violation.report


def test_the_simulator_finds_a_first_sync_left_unanswered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A duplicated SyncGroup of a follower waiting for its leader, in the CI's eager fleet."""
    assert simulate(EAGER_FLEET).violation is None  # the code on main
    forget_the_first_sync(monkeypatch)
    violation = simulate(EAGER_FLEET).violation
    assert violation is not None and violation.name == inv.PARKED_ANSWERED_ONCE
    assert "nothing will answer them" in violation.report
    assert "duplicated" in violation.report
