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
from coordinator.sim import coordinator as sim_coordinator
from coordinator.sim import invariants as inv
from coordinator.sim.groups import group_names
from coordinator.sim.simulator import GROUP, SimParams, Simulation, parse_faults


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


# Broken runtimes, each a wrapper of the real function it breaks: (what it does wrong, the
# class and function, the wrapper, the parameters (on 2 partitions) that catch it, what I8's
# report says).


def _first_partition_only(failed: Any) -> Any:
    def write_failed(self: Any, batch: Any, exc: BaseException) -> Any:
        first = next(iter(batch.start_marks))
        batch.start_marks = {first: batch.start_marks[first]}
        return failed(self, batch, exc)

    return write_failed


def _not_the_batch_behind(failed: Any) -> Any:
    def write_failed(self: Any, batch: Any, exc: BaseException) -> Any:
        if self.pending is not None:
            marks = self.pending.start_marks
            self.pending.start_marks = {k: v for k, v in marks.items() if k in batch.start_marks}
        return failed(self, batch, exc)

    return write_failed


def _answering_failed(failed: Any) -> Any:
    def write_failed(self: Any, batch: Any, exc: BaseException) -> Any:
        for fut, response, _index in batch.waiters:
            if not fut.done() and response is not None:
                fut.set_result(response)
        return failed(self, batch, exc)

    return write_failed


def _latest_for_all(read: Any) -> Any:
    def latest(self: Any, index: int, fn: Any, groups: Any = None, *, latest: bool = False) -> Any:
        answer, batch = read(self, index, fn, groups, latest=True)
        return answer, batch if latest else None

    return latest


def _partitions_last(read: Any) -> Any:
    def shard_last(
        self: Any, index: int, fn: Any, groups: Any = None, *, latest: bool = False
    ) -> Any:
        answer, batch = read(self, index, fn, groups, latest=latest)
        return answer, self._driver._last_batch.get(index, batch) if latest else batch

    return shard_last


def _wait_for_any(execute: Any) -> Any:
    def wait_any(self: Any, index: int, fn: Any, read: bool, *rest: Any) -> Any:
        response, batch = execute(self, index, fn, read, *rest)
        if batch is None and not read and index < self.shard_count:
            batch = self.pending or self.inflight
        return response, batch

    return wait_any


def _whole_batch_rollback(execute: Any) -> Any:
    """The runtime before f981713: a failed write rolls every state machine back to its mark
    when the batch was started (test_runtime_rollback_scope.py pins it)."""

    def at_start(self: Any, index: int, fn: Any, read: bool, *rest: Any) -> Any:
        if self.pending is not None:
            return execute(self, index, fn, read, *rest)
        marks = [m.mark() for m in self._machines]
        out = execute(self, index, fn, read, *rest)
        if self.pending is not None:
            for machine, mark in enumerate(marks):
                self.pending.start_marks.setdefault(machine, mark)
        return out

    return at_start


Driver = runtime_driver.Driver
Reads = runtime_reads.Reads
BROKEN = {
    "a failed write rolls back only the first of its partitions": (
        Driver,
        "write_failed",
        _first_partition_only,
        {"seed": 27, "groups": 3},
        "not as it should be (gone back to its durable state)",
    ),
    "a failed write rolls back the failed batch's partitions, not the batch behind it's": (
        Driver,
        "write_failed",
        _not_the_batch_behind,
        {"seed": 0, "groups": 3},
        "not as it should be (gone back to its durable state)",
    ),
    "a failed write's answers are released": (
        Driver,
        "write_failed",
        _answering_failed,
        {"seed": 0, "groups": 3},
        "which no durable record",
    ),
    "reads of a group's committed state read its latest state": (
        Reads,
        "read",
        _latest_for_all,
        {"seed": 0, "groups": 3},
        "answered from its committed state differs from its durable state",
    ),
    # a write of another group in flight holds the fetch up, and its failure fails it
    "a stable OffsetFetch waits for its partition's last write, whatever group it changed": (
        Reads,
        "read",
        _partitions_last,
        {"seed": 2, "groups": 6},
        "waits for a batch without any change of it (the batch marked ['g5-2']",
    ),
    # a partition without records in a failed write gets its failure
    "a command without records waits for whatever write is outstanding": (
        Driver,
        "_run",  # every command runs through it (the loop's fast path too)
        _wait_for_any,
        {"seed": 1, "groups": 6},
        "(partition 1) was answered with the failure of a write with records of ",
    ),
    # a classic JoinGroup's change of partition 1, made with no write of it outstanding and
    # answered, is undone when partition 0's write fails
    "a failed write rolls every partition back to the batch's start (before f981713)": (
        Driver,
        "_run",
        _whole_batch_rollback,
        {"seed": 20, "groups": 6, "classic": 3, "protocol": "eager"},
        "changed what partition 1 holds in memory (it had no records in it)",
    ),
}


@pytest.mark.parametrize("broken", BROKEN)
def test_a_broken_runtime_is_caught(monkeypatch: pytest.MonkeyPatch, broken: str) -> None:
    cls, name, wrap, params, says = BROKEN[broken]
    monkeypatch.setattr(cls, name, wrap(getattr(cls, name)))
    summary = Simulation(SimParams(steps=200, coordinator_partitions=2, **params)).run()
    assert summary.violation is not None, "the broken runtime went unnoticed"
    assert summary.violation.name == inv.GROUPS_ISOLATED, summary.violation.report
    assert says in summary.violation.report


def test_the_cli_runs_groups_over_partitions(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--seed", "3", "--steps", "100", "--groups", "3", "--coordinator-partitions", "2"]
    assert main([*argv, "--quiet"]) == 0
    assert capsys.readouterr().out.startswith("seed 3: ok ")
    with pytest.raises(SystemExit) as exc:
        main(["--groups", "0"])
    assert exc.value.code == 2


@pytest.mark.parametrize("seed", [7026, 7055])
def test_a_duplicated_request_is_processed_right_after_its_original(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """``duplicate``: the copy runs right after the original, no other request between them
    (docs/simulation.md, Faults): a request arriving between them waits for the copy. On one TCP connection a client never has a copy of its
    request processed after others' requests once it took the original's answer; a copy that
    ran later, with the group moved on, was judged as though the client had sent it then: in
    seed 7386 of this fleet (run in another process, before reconciliation's topic order was
    fixed) c1's join (epoch 0, owned={}) was answered t1-0..6, c2 joined, then the copy's stale
    owned={} took t1-4..6 from c1 with no revocation (I1b). Seeds 7026 and 7055 had another
    client's join run between a join and its copy (both delivered in the same millisecond)."""
    ran: list[str] = []
    request = sim_coordinator.SimCoordinator.request

    def noted(self: Any, req: Any, reply: Any, label: str, **kw: Any) -> Any:
        after = kw.get("after")

        def note(shard: Any, result: Any) -> None:
            ran.append(label)
            if after is not None:
                after(shard, result)

        return request(self, req, reply, label, **{**kw, "after": note})

    monkeypatch.setattr(sim_coordinator.SimCoordinator, "request", noted)
    s = _three_groups_with_moves(seed)
    assert s.violation is None, s.violation.report
    assert s.events["request-held-behind-a-duplicate"] == 1
    copies = [k for k, label in enumerate(ran) if "(dup)" in label]
    assert len(copies) >= 2
    assert [ran[k - 1] for k in copies] == [ran[k].replace(" (dup)", "") for k in copies]


def _three_groups_with_moves(seed: int) -> Any:
    """One run of the sweep's three-group fleet (``--faults all,partition-move --groups 3
    --coordinator-partitions 2``, 300 steps): its summary."""
    return Simulation(
        SimParams(
            seed=seed,
            steps=300,
            faults=parse_faults("all,partition-move"),
            groups=3,
            coordinator_partitions=2,
        )
    ).run()


def test_seed_7386_of_the_sweep_holds() -> None:
    """Seed 7386 (--faults all,partition-move, three groups on two partitions) failed I1b in
    the processes whose string hash listed c1's topics the other way (see
    test_simulation.py::test_a_seed_reproduces_in_another_process_whatever_the_string_hash):
    a join's duplicated copy ran after c2's join. Its duplicates now run next to their
    originals, and its trace is the same in every process."""
    s = _three_groups_with_moves(7386)
    assert s.violation is None, s.violation.report
    assert s.faults["duplicate"] > 0
