"""The assignor pool (coordinator/runtime/offload.py): real worker processes run jobs like the
inline computation; a worker that dies fails its job with an error outcome and the pool comes
back for the next one."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from assignors.uniform import UniformAssignor
from coordinator.core.target_assignment import assignment_job, run_job
from coordinator.runtime.offload import AssignorPool
from tests.unit.test_core_target_assignment import G, settled


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
    rt = make_runtime(store, **{"group.consumer.assignor.offload.min.members": "2"})
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
    rt = make_runtime(store, **{"group.consumer.assignor.offload.min.members": "2"})
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
