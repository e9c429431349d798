"""The assignor pool (coordinator/runtime/offload.py): real worker processes run jobs like the
inline computation; a worker that dies fails its job with an error outcome and the pool comes
back for the next one."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import subprocess
import sys
import time
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from assignors.api import GroupAssignment, GroupSpec, PartitionAssignorError, TopicMetadata
from assignors.uniform import UniformAssignor
from coordinator.core.target_assignment import AssignmentJob, assignment_job, run_job
from coordinator.runtime import offload
from coordinator.runtime.offload import AssignorPool
from tests.unit.test_core_target_assignment import G, settled

ALWAYS_OFFLOADED = {
    "group.consumer.assignor.offload.min.members": "2",
    "group.consumer.assignor.offload.inline.max.changed.members": "0",
}
"""Groups of 2 members or more computed in a worker, however small the change (by default a
small one is computed inline: test_offload_decision.py)."""


async def test_a_worker_runs_the_job_and_survives_a_dead_sibling() -> None:
    h, _foo = settled(members=6, partitions=30)
    h.join("new", ["foo"])
    group = h.shard.groups[G]
    job = assignment_job(group, group.group_epoch + 1, "uniform")
    pool = AssignorPool(["uniform", "range"], processes=1)
    try:
        await asyncio.wait_for(pool.start(), 60)
        outcome = await asyncio.wait_for(pool.run(job), 60)
        assert outcome == run_job(job, UniformAssignor())
        # The worker dies (killed): the next job gets an error outcome, then a fresh pool.
        processes = list(pool._executor._processes.values())  # type: ignore[union-attr]
        for process in processes:
            os.kill(process.pid, signal.SIGKILL)
            process.join(30)
        failed = await asyncio.wait_for(pool.run(job), 60)
        assert failed.changed == {}
        assert failed.error is not None
        assert failed.error.startswith(
            f"Failed to compute a new target assignment for epoch {job.epoch}: "
            "the assignor worker died"
        )
        again = await asyncio.wait_for(pool.run(job), 60)
        assert again == outcome
        assert (pool.jobs_run, pool.jobs_failed) == (3, 1)
    finally:
        pool.close()


async def test_a_job_for_an_assignor_the_workers_do_not_have() -> None:
    h, _foo = settled()
    job = assignment_job(h.shard.groups[G], 6, "sticky")
    pool = AssignorPool(["uniform"], processes=1)
    try:
        outcome = await asyncio.wait_for(pool.run(job), 60)
    finally:
        pool.close()
    assert outcome.error == "assignor 'sticky' is not loaded in the worker"


async def test_the_runtime_computes_a_big_groups_target_in_a_worker() -> None:
    """A group at the offload threshold: the join is answered at once with the last target's
    epoch; the worker's outcome comes back as a command whose records install the target;
    the members then see it. Every record is in the store, so a reload gives the same state."""
    from builders import beat, join, make_runtime

    from coordinator.core.topics import NewTopic
    from coordinator.runtime.store import MemoryRecordStore

    store = MemoryRecordStore(partitions=1)
    rt = make_runtime(store, **ALWAYS_OFFLOADED)
    await rt.start()
    try:
        await rt.create_topics([NewTopic(name="t", num_partitions=4)])
        a = await rt.heartbeat(join("g", member_id="A"))
        assert a.member_epoch == 1  # one member: computed inline
        b = await rt.heartbeat(join("g", member_id="B"))
        assert b.member_epoch == 1  # the target of epoch 2 is being computed off the loop
        assert rt.driver.own.assigning == {"g"}
        for _ in range(600):  # bounded: 30 s
            if rt.shards[0].groups["g"].assignment_epoch == 2:
                break
            await asyncio.sleep(0.05)
        group = rt.shards[0].groups["g"]
        assert (group.group_epoch, group.assignment_epoch) == (2, 2)
        assert sorted(len(group.target[m]["AAAAAAAAAAAAAAAAAAAAAQ"]) for m in "AB") == [2, 2]
        assert rt.assignor_pool is not None and rt.assignor_pool.jobs_run == 1
        assert rt.driver.own.assigning == set()
        got = await rt.heartbeat(beat("g", "B", 1))
        assert got.member_epoch == 2 and got.assignment is not None
        assert got.assignment.pending == group.target["B"]
        before = rt.snapshot()
    finally:
        await rt.close()
    await reloads_as(store, before)


async def test_the_runtime_computes_a_small_change_to_a_big_group_in_the_command() -> None:
    """The same group with the default bound: B's join changes 2 members (A's target, B), so
    the uniform assignor's incremental path computes the target in the join's command, no
    worker involved; the records are in the store like any other."""
    from builders import join, make_runtime

    from coordinator.core.topics import NewTopic
    from coordinator.runtime.store import MemoryRecordStore

    store = MemoryRecordStore(partitions=1)
    rt = make_runtime(store, **{"group.consumer.assignor.offload.min.members": "2"})
    await rt.start()
    try:
        await rt.create_topics([NewTopic(name="t", num_partitions=4)])
        a = await rt.heartbeat(join("g", member_id="A"))
        assert a.member_epoch == 1
        b = await rt.heartbeat(join("g", member_id="B"))
        assert b.member_epoch == 2  # its target in the answer
        group = rt.shards[0].groups["g"]
        assert (group.group_epoch, group.assignment_epoch) == (2, 2)
        assert b.assignment is not None and b.assignment.pending == group.target["B"]
        assert sorted(len(group.target[m]["AAAAAAAAAAAAAAAAAAAAAQ"]) for m in "AB") == [2, 2]
        assert rt.driver.own.assigning == set()
        assert rt.assignor_pool is not None and rt.assignor_pool.jobs_run == 0
        before = rt.snapshot()
    finally:
        await rt.close()
    await reloads_as(store, before)


async def test_a_big_groups_inputs_are_brought_up_to_date_over_several_turns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before it copies an offloaded job the runtime brings the group's inputs up to date a
    bounded number of members per turn of the group's shard (10,000 new members at once held
    the loop for about 50 ms): with one member per turn, twelve members that joined together
    take a dozen commands, another shard's heartbeat runs between two of them, and the
    target is the whole group's, durable."""
    from builders import join, make_runtime

    from coordinator.core.consumer_groups import ConsumerGroups
    from coordinator.core.topics import NewTopic
    from coordinator.runtime import own_commands
    from coordinator.runtime.store import MemoryRecordStore

    monkeypatch.setattr(own_commands, "PREPARE_MEMBERS", 1)
    events: list[tuple[str, bool]] = []
    prepare = ConsumerGroups.prepare_assignment_job

    def prepare_and_watch(self: ConsumerGroups, group_id: str, members: int) -> bool:
        ready = prepare(self, group_id, members)
        events.append(("prepare", ready))
        if len(events) == 1:  # another shard's heartbeat arrives now
            asyncio.get_running_loop().create_task(other_group())
        return ready

    async def other_group() -> None:
        answer = await rt.heartbeat(join(other, member_id="X"))
        assert answer.member_epoch == 1

    heartbeat = ConsumerGroups.consumer_group_heartbeat

    def heartbeat_and_watch(self: ConsumerGroups, req: Any, now_ms: int) -> Any:
        if req.group_id == other:
            events.append(("other group's heartbeat", True))
        return heartbeat(self, req, now_ms)

    monkeypatch.setattr(ConsumerGroups, "prepare_assignment_job", prepare_and_watch)
    monkeypatch.setattr(ConsumerGroups, "consumer_group_heartbeat", heartbeat_and_watch)
    store = MemoryRecordStore(partitions=2)
    rt = make_runtime(store, **ALWAYS_OFFLOADED)
    shard = rt.shard_index("g")
    other = next(g for g in (f"other-{i}" for i in range(100)) if rt.shard_index(g) != shard)
    await rt.start()
    try:
        await rt.create_topics([NewTopic(name="t", num_partitions=24)])
        members = [f"m{i:02d}" for i in range(12)]
        await asyncio.gather(*(rt.heartbeat(join("g", member_id=m)) for m in members))
        group = rt.shards[shard].groups["g"]
        for _ in range(600):  # bounded: 30 s
            if group.assignment_epoch == group.group_epoch and len(events) > 1:
                break
            await asyncio.sleep(0.05)
        assert group.assignment_epoch == group.group_epoch == 12
        targets = {m: group.target[m]["AAAAAAAAAAAAAAAAAAAAAQ"] for m in members}
        assert sorted(map(len, targets.values())) == [2] * 12
        assert frozenset().union(*targets.values()) == frozenset(range(24))
        prepared = [ready for what, ready in events if what == "prepare"]
        assert len(prepared) >= 12 and prepared[-1] and not any(prepared[:-2])
        ran = events.index(("other group's heartbeat", True))
        assert 0 < ran < len(events) - 1  # between two of the group's slices
        before = rt.snapshot()
    finally:
        await rt.close()
    await reloads_as(store, before)


async def reloads_as(store: Any, snapshot: Any) -> None:
    """A runtime reloaded from ``store`` has the state ``snapshot`` (every record is in it)."""
    from builders import make_runtime

    again = make_runtime(store.reopen())
    await again.start()
    try:
        assert again.snapshot() == snapshot
    finally:
        await again.close()


_HOLDER = """
import asyncio, sys
from coordinator.runtime.offload import AssignorPool

async def main():
    pool = AssignorPool(["uniform"], processes=2)
    await pool.start()
    print(" ".join(str(p) for p in pool._executor._processes), flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


def test_workers_end_with_a_coordinator_killed_by_sigkill() -> None:
    """A coordinator killed with SIGKILL leaves no worker behind (they used to wait for ever on
    their job queue, orphaned)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert holder.stdout is not None
        workers = [int(pid) for pid in holder.stdout.readline().split()]
        assert len(workers) == 2 and all(_alive(pid) for pid in workers)
    finally:
        holder.kill()
        holder.wait(30)
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [pid for pid in workers if _alive(pid)] == []


def _alive(pid: int) -> bool:
    """``pid`` runs (a zombie or a reused pid of another program does not count)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z" and "multiprocessing" in Path(
        f"/proc/{pid}/cmdline"
    ).read_bytes().decode(errors="replace")


class _Cycle:
    """Cyclic garbage a probe job leaves behind: it refers to itself, and holds 64 KiB. With
    ``answered`` (a file the test creates once it has the job's answer), collecting it waits
    for that file (10 s at most) and notes whether it came."""

    def __init__(self, answered: Path | None) -> None:
        self.me = self
        self.payload = bytearray(64 * 1024)
        self.answered = answered

    def __del__(self) -> None:
        if self.answered is not None:
            deadline = time.monotonic() + 10
            while not self.answered.exists() and time.monotonic() < deadline:
                time.sleep(0.005)
            _COLLECTED.append(self.answered.exists())


_COLLECTED: list[bool] = []
"""In a worker: for each probe cycle collected, whether its job's answer had arrived."""
ANSWERED = "KIP848_TEST_ANSWERED_DIR"
"""Where the test notes the answers it has (then the probe's cycles wait for them)."""


class GcProbe:
    """A test assignor, loaded into the workers by its class path: each job keeps 20,000 dicts
    alive through it (CPython's automatic collector would run some 28 collections meanwhile)
    and leaves a :class:`_Cycle` behind, watched by a weak reference. It answers with a report
    (as its error): whether the automatic collector was on, the collections during the job and
    since the last one (by generation), the earlier jobs' cycles still alive, and the worker's
    tracked objects and resident memory."""

    name = "gc-probe"

    def __init__(self) -> None:
        self.collections: list[int] = []  # generations, since the last look
        self.cycles: list[weakref.ref[_Cycle]] = []
        self.jobs = 0
        gc.callbacks.append(self._collected)

    def _collected(self, phase: str, info: Mapping[str, int]) -> None:
        if phase == "stop":
            self.collections.append(info["generation"])

    def assign(self, spec: GroupSpec, topics: Mapping[str, TopicMetadata]) -> GroupAssignment:
        between, self.collections = self.collections, []
        self.cycles = [ref for ref in self.cycles if ref() is not None]
        alive = len(self.cycles)
        objects = len(gc.get_objects())
        with open("/proc/self/statm") as statm:
            rss_kib = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
        answered = os.environ.get(ANSWERED)
        cycle = _Cycle(None if answered is None else Path(answered, str(self.jobs)))
        self.jobs += 1
        self.cycles.append(weakref.ref(cycle))
        kept = [{"i": i} for i in range(20_000)]
        report = {
            "enabled": gc.isenabled(),
            "during": self.collections,
            "between": between,
            "earlier_cycles_alive": alive,
            "objects": objects,
            "rss_kib": rss_kib,
            "collected_after_answer": list(_COLLECTED),
        }
        _COLLECTED.clear()
        del cycle, kept
        self.collections = []
        raise PartitionAssignorError(json.dumps(report))


PROBE = f"{__name__}:GcProbe"


async def probe_reports(
    pool: AssignorPool, job: AssignmentJob, jobs: int, answered: Path | None = None
) -> list[dict[str, Any]]:
    """Run ``job`` ``jobs`` times in ``pool`` (one at a time) and return the probe's reports;
    ``answered``: create a file there named by the job's index once its answer is here."""
    reports = []
    for i in range(jobs):
        outcome = await asyncio.wait_for(pool.run(job), 60)
        if answered is not None:
            (answered / str(i)).touch()
        assert outcome.error is not None
        reports.append(json.loads(outcome.error.partition(f"epoch {job.epoch}: ")[2]))
    return reports


def probe_job() -> AssignmentJob:
    h, _foo = settled(members=6, partitions=30)
    h.join("new", ["foo"])
    group = h.shard.groups[G]
    return assignment_job(group, group.group_epoch + 1, GcProbe.name)


@pytest.mark.parametrize("own_collector", [True, False])
async def test_no_collection_runs_in_the_middle_of_a_job(own_collector: bool) -> None:
    """A worker runs its own collector: the automatic one is off, so a job that allocates
    20,000 containers runs no collection (CPython's own ran tens of them in the middle, a
    10,000-member job's inputs among what they traversed). With ``own_collector=False``
    (CPython's, as before; the benchmark's peer) they do run."""
    pool = AssignorPool([PROBE], processes=1, own_collector=own_collector)
    try:
        reports = await probe_reports(pool, probe_job(), 3)
    finally:
        pool.close()
    if own_collector:
        assert [(r["enabled"], r["during"]) for r in reports] == [(False, [])] * 3
    else:
        assert [r["enabled"] for r in reports] == [True] * 3
        assert all(len(r["during"]) >= 20 for r in reports)


async def test_a_worker_collects_a_jobs_garbage_once_its_answer_is_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's collection after a job does not hold its answer back: each job's cyclic
    garbage waits, as it is collected, for the test to have the job's answer, and finds it
    there — and it is collected before the next job starts (a collection before the answer
    would wait 10 s in vain, the answer being sent only after it)."""
    monkeypatch.setenv(ANSWERED, str(tmp_path))  # inherited by the spawned worker
    pool = AssignorPool([PROBE], processes=1)
    try:
        reports = await probe_reports(pool, probe_job(), 4, answered=tmp_path)
    finally:
        pool.close()
    assert [r["collected_after_answer"] for r in reports] == [[], [True], [True], [True]]
    assert [r["earlier_cycles_alive"] for r in reports] == [0, 0, 0, 0]


@pytest.mark.slow
async def test_a_worker_collects_each_jobs_garbage_and_stays_bounded() -> None:
    """After each job's answer the worker collects its young generation (a full collection
    every FULL_EVERY jobs): every job starts with none of the earlier jobs' cyclic garbage
    left, and over 2,000 jobs, each leaving 64 KiB in a reference cycle, the worker's tracked
    objects and memory stay flat (with CPython's collector the last job's cycle was still
    there when the next one started: it had outlived the young collections of its job)."""
    pool = AssignorPool([PROBE], processes=1)
    try:
        reports = await probe_reports(pool, probe_job(), 20 * offload.FULL_EVERY)
    finally:
        pool.close()
    assert [r["earlier_cycles_alive"] for r in reports] == [0] * len(reports)
    # Between two jobs: one collection, young, except a full one after every FULL_EVERY jobs
    # (the first job's report also sees the worker's start: its collection before freezing).
    full_after = {k * offload.FULL_EVERY for k in range(1, 20)}
    assert [r["between"] for r in reports[1:]] == [
        [2] if k in full_after else [0] for k in range(1, len(reports))
    ]
    objects = [r["objects"] for r in reports[1:]]
    assert max(objects) - min(objects) <= 50, (min(objects), max(objects))
    rss = [r["rss_kib"] for r in reports]
    assert max(rss[10:]) - rss[10] <= 4 * 1024, (rss[10], max(rss))  # 2,000 cycles: 125 MiB


@pytest.mark.parametrize(
    ("error", "level"),
    [
        ("NotCoordinatorError", "INFO"),  # the partition moved to another node: expected
        ("CoordinatorNotAvailableError", "WARNING"),
    ],
)
def test_an_offloaded_target_the_node_cannot_apply_is_logged_by_why(
    caplog: pytest.LogCaptureFixture, error: str, level: str
) -> None:
    """A worker's target that comes back once its group's partition went to another node
    (NOT_COORDINATOR) is expected in a cluster and logged at INFO; any other reason it cannot
    be applied stays a WARNING. Either way the group is no longer being assigned here."""
    import logging
    from types import SimpleNamespace

    from coordinator.core import errors
    from coordinator.runtime.own_commands import OwnCommands

    def refuse(_index: int, _fn: Any, group: str | None = None) -> Any:
        raise getattr(errors, error)("no")

    driver = SimpleNamespace(
        active=True, trace=None, clock=SimpleNamespace(now_ms=lambda: 0), execute=refuse
    )
    own = OwnCommands(driver)
    own.assigning.add("g")
    applied: list[Any] = []
    own._applied = lambda _i, _g, exc: applied.append(type(exc).__name__)  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, "kip848"):
        own.job_done(0, "g", outcome=None)  # type: ignore[arg-type]
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        (level, "[GroupId g] Target assignment not applied: no")
    ]
    assert applied == [error] and own.assigning == set()
