"""Several groups over several coordinator partitions (docs/simulation.md, "Several groups and
coordinator partitions"): the runtime's driver batching writes of several partitions and
groups, a failed write rolling back exactly the partitions with records in it, reads from each
group's committed state, and invariant I8 over them — plus broken runtimes it catches."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from coordinator.cli.simulation import main
from coordinator.routing import partition_for
from coordinator.runtime import driver as runtime_driver
from coordinator.runtime import reads as runtime_reads
from coordinator.sim import invariants as inv
from coordinator.sim.groups import group_names
from coordinator.sim.simulator import GROUP, SimParams, Simulation


@pytest.fixture(autouse=True)
def _quiet_runtime() -> Iterator[None]:
    """The runtime logs every injected write failure at ERROR: not this suite's output."""
    logger = logging.getLogger("kip848.runtime")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


def _run(**kw: Any) -> Simulation:
    sim = Simulation(SimParams(steps=200, **kw))
    summary = sim.run()
    assert summary.violation is None, summary.violation.report
    return sim


def _caught(name: str, **kw: Any) -> str:
    summary = Simulation(SimParams(steps=200, **kw)).run()
    assert summary.violation is not None, "the broken runtime went unnoticed"
    assert summary.violation.name == name, summary.violation.report
    return summary.violation.report


def test_groups_are_hashed_onto_every_partition_by_kafkas_routing() -> None:
    names = group_names(5, 3)
    assert [partition_for(n, 3) for n in names] == [0, 1, 2, 0, 1]
    assert len(set(names)) == 5
    assert group_names(1, 1) == group_names(1, 4) == [GROUP]
    sim = Simulation(SimParams(groups=5, coordinator_partitions=3, members=2))
    assert [g.gid for g in sim.groups] == names
    assert [sim.coord.driver.shard_index(n) for n in names] == [0, 1, 2, 0, 1]
    assert [sim.clients[i].group_id for i in range(10)] == [n for n in names for _ in (0, 1)]
    assert sim.coord.store.partitions == 3
    # A group's first client subscribes to t0 only; its first (static) client has an instance.
    assert [sim.clients[i].topics for i in (0, 2)] == [("t0",), ("t0",)]
    assert [sim.clients[i].instance_id for i in (0, 1, 2)] == ["inst-0", None, "inst-2"]
    assert "--groups" not in SimParams().command()  # a one-group run's command as before
    assert " --groups 5 --coordinator-partitions 3" in sim.p.command()


def test_a_sweep_of_three_groups_on_two_partitions_holds_every_invariant() -> None:
    """10 seeds x 200 fault steps, every fault: each group converges, and the runtime's faults
    hit batches of several partitions and several groups (counted)."""
    events: Counter[str] = Counter()
    faults: Counter[str] = Counter()
    restarts = 0
    for seed in range(10):
        sim = _run(seed=seed, groups=3, coordinator_partitions=2)
        assert sim.summary.time_to_stable_ms is not None
        assert {sim.coord.partition_of(g.gid) for g in sim.groups} == {0, 1}
        events.update(sim.summary.events)
        faults.update(sim.summary.faults)
        restarts += sim.summary.restarts
    assert faults["store-fail"] >= 10 and restarts >= 10
    assert events["batch-of-several-partitions"] > 0
    assert events["failed-write-of-several-groups"] > 0
    assert events["failed-write-partitions-rolled-back"] > 0
    assert events["failed-write-partitions-kept"] > 0  # another partition kept its state
    for read in ("read-describe", "read-offset-fetch", "read-offset-fetch-stable"):
        assert events[read] > 50


def test_classic_and_batched_groups_on_three_partitions_hold_every_invariant() -> None:
    """Mixed fleets (2 classic members of 4 per group) with batching, offloaded targets and
    parked joins, 5 groups on 3 partitions (two share partitions 0 and 1)."""
    for seed in range(3):
        sim = _run(
            seed=seed,
            groups=5,
            coordinator_partitions=3,
            members=4,
            classic=2,
            protocol="mixed",
            assignment_interval_ms=1_000,
            offload_min_members=2,
        )
        assert sim.summary.time_to_stable_ms is not None


def test_a_returning_static_leader_of_a_classic_group_on_a_re_created_topic() -> None:
    """Cooperative seed 7 of 4 groups: g2-2's static leader c6 comes back to its Stable
    group after t0 was deleted and re-created and t1 grew; it is told to skip the assignment
    (KIP-814), so the group keeps generation 1's assignment, which names t0 — now the new t0 to
    a classic consumer. I5 failed (t0's partitions 0 and 2 unowned: c6 held them under the new
    topic id, the others under the old one); a classic group's clients are judged by topic name,
    as its protocol names topics."""
    sim = _run(seed=7, groups=4, coordinator_partitions=2, classic=3, protocol="cooperative")
    g = sim.groups[2]
    classic = sim.classic_of(g)
    assert classic is not None and classic.generation == 1
    leader = sim.clients[6]
    assert leader.skipped_assignment == 1
    old_t0 = next(t for t, name in sim.id_name.items() if name == "t0")
    assert old_t0 != sim.coord.registry.topics["t0"].topic_id
    assert old_t0 in sim.clients[7].owned and old_t0 not in leader.owned


def test_a_failed_write_that_rolls_back_only_its_first_partition_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A runtime that rolls back only the first partition of a failed write spanning several."""
    failed = runtime_driver.Driver.write_failed

    def first_only(self: Any, batch: Any, exc: BaseException) -> Any:
        first = next(iter(batch.start_marks))
        batch.start_marks = {first: batch.start_marks[first]}
        return failed(self, batch, exc)

    monkeypatch.setattr(runtime_driver.Driver, "write_failed", first_only)
    report = _caught(inv.GROUPS_ISOLATED, seed=27, groups=3, coordinator_partitions=2)
    assert "not as it should be (gone back to its durable state)" in report


def test_a_failed_write_that_keeps_the_partitions_of_the_batches_behind_it_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A runtime that fails the batch gathered behind the failed one but rolls back only the
    partitions of the failed one (the later batch's other partitions keep their records)."""
    failed = runtime_driver.Driver.write_failed

    def failed_only(self: Any, batch: Any, exc: BaseException) -> Any:
        if self.pending is not None:
            marks = self.pending.start_marks
            self.pending.start_marks = {k: v for k, v in marks.items() if k in batch.start_marks}
        return failed(self, batch, exc)

    monkeypatch.setattr(runtime_driver.Driver, "write_failed", failed_only)
    report = _caught(inv.GROUPS_ISOLATED, seed=0, groups=3, coordinator_partitions=2)
    # the offsets of the batch behind it stayed: a commit answered before is overwritten
    assert "after a failed write of partitions" in report
    assert "but a commit of it was answered accepted at" in report


def test_reads_that_see_writes_not_yet_durable_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A runtime whose reads of a group's committed state read its latest state instead."""
    read = runtime_reads.Reads.read

    def latest(self: Any, index: int, fn: Any, groups: Any = None, *, latest: bool = False) -> Any:
        answer, batch = read(self, index, fn, groups, latest=True)
        return answer, batch if latest else None

    monkeypatch.setattr(runtime_reads.Reads, "read", latest)
    report = _caught(inv.GROUPS_ISOLATED, seed=0, groups=3, coordinator_partitions=2)
    assert "answered from its committed state differs from its durable state" in report


def test_answers_of_a_failed_write_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A runtime that releases the answers of a batch whose write failed."""
    failed = runtime_driver.Driver.write_failed

    def answering(self: Any, batch: Any, exc: BaseException) -> Any:
        for fut, response, _index in batch.waiters:
            if not fut.done() and response is not None:
                fut.set_result(response)
        return failed(self, batch, exc)

    monkeypatch.setattr(runtime_driver.Driver, "write_failed", answering)
    report = _caught(inv.GROUPS_ISOLATED, seed=0, groups=3, coordinator_partitions=2)
    assert "which no durable record" in report


def test_the_cli_runs_groups_over_partitions(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--seed", "3", "--steps", "100", "--groups", "3", "--coordinator-partitions", "2"]
    assert main([*argv, "--quiet"]) == 0
    assert capsys.readouterr().out.startswith("seed 3: ok ")
    with pytest.raises(SystemExit) as exc:
        main(["--groups", "0"])
    assert exc.value.code == 2
