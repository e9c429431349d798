"""Turns (coordinator/runtime/turns.py): each state machine gets its share of the loop.

A burst of commands for one state machine must delay the others by at most one share per loop
iteration, keep its own arrival order, and hand every caller its own result, exception and
context."""

from __future__ import annotations

import asyncio
import contextvars
import time

import pytest
from builders import beat, classic_join_req, classic_record, join, make_runtime, written
from test_runtime_core import started

from coordinator.core import codec
from coordinator.core.commands import ConsumerGroupHeartbeat
from coordinator.core.errors import CoordinatorNotAvailableError, ErrorCode
from coordinator.core.topics import NewTopic
from coordinator.routing import partition_for
from coordinator.runtime import requests
from coordinator.runtime.store import MemoryRecordStore, StoredRecord
from coordinator.runtime.turns import Turns
from legacy_bridge import messages as m

WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def make_turns(budget_s: float) -> Turns:
    return Turns(asyncio.get_running_loop().call_soon, time.perf_counter, budget_s=budget_s)


def later(turns: Turns, key: int, call: object, *, join: bool = False) -> asyncio.Future[object]:
    """Queue ``call``; its result (or exception) goes to the returned future (what the driver
    does for a queued command's caller)."""
    assert callable(call)
    fut: asyncio.Future[object] = asyncio.get_running_loop().create_future()

    def thunk() -> None:
        try:
            fut.set_result(call())
        except Exception as exc:  # noqa: BLE001 - to the caller
            fut.set_exception(exc)

    turns.later(key, thunk, join=join)
    return fut


async def submit(turns: Turns, key: int, call: object) -> object:
    """What the driver does: run at once while allowed, else queue."""
    assert callable(call)
    if turns.now(key):
        start = time.perf_counter()
        try:
            return call()
        finally:
            turns.charge(key, time.perf_counter() - start)
    return await later(turns, key, call)


async def test_a_flooded_state_machine_keeps_its_order_and_the_others_run_in_between() -> None:
    turns = make_turns(budget_s=0.002)
    ran: list[tuple[int, int]] = []

    def command(key: int, n: int) -> int:
        busy(0.0005)
        ran.append((key, n))
        return n

    flood = [asyncio.ensure_future(submit(turns, 0, lambda n=n: command(0, n))) for n in range(200)]
    await asyncio.sleep(0)  # the flood arrived and used its share: the rest is queued
    assert turns.queued > 150
    probe = await asyncio.wait_for(submit(turns, 1, lambda: command(1, 0)), 5)
    assert probe == 0
    # The probe ran after at most a few shares of the flood, not after all 200 commands.
    assert ran.index((1, 0)) < 20
    assert await asyncio.gather(*flood) == list(range(200))
    assert [n for key, n in ran if key == 0] == list(range(200))
    assert turns.queued == 0


async def test_a_share_is_spent_per_loop_iteration() -> None:
    turns = make_turns(budget_s=0.001)
    assert turns.now(0)
    turns.charge(0, 0.0015)
    assert not turns.now(0)  # over its share: queue
    assert turns.now(1)  # others are not charged
    fut = later(turns, 0, lambda: "queued")
    assert not turns.now(0)  # something queued: later commands queue behind it
    assert await fut == "queued"
    await asyncio.sleep(0)
    assert turns.now(0)  # a new iteration, nothing queued


async def test_queued_commands_run_in_the_callers_context_and_raise_to_the_caller() -> None:
    turns = make_turns(budget_s=0.0)  # everything queues

    async def caller(name: str, fail: bool) -> str:
        WHO.set(name)

        def call() -> str:
            if fail:
                raise CoordinatorNotAvailableError(f"{WHO.get()} failed")
            return WHO.get()

        return await submit(turns, 0, call)  # type: ignore[return-value]

    ok = asyncio.ensure_future(caller("a", False))
    bad = asyncio.ensure_future(caller("b", True))
    assert await ok == "a"
    with pytest.raises(CoordinatorNotAvailableError, match="b failed"):
        await bad


async def test_a_queued_command_whose_caller_went_away_is_not_run() -> None:
    rt = await started(make_runtime(MemoryRecordStore(partitions=1)))
    await rt.create_topics([NewTopic(name="t", num_partitions=2)])
    driver, now = rt.driver, rt.clock.now_ms()
    driver.turns.charge(0, 1.0)  # the shard used its share: the next commands queue
    _none, gone = driver.request(requests.heartbeat(join("gone"), now))
    _none, kept = driver.request(requests.heartbeat(join("kept"), now))
    assert driver.turns.queued == 2
    gone.cancel()  # its caller went away (grpc.aio cancels the handler's task)
    assert (await asyncio.wait_for(kept, 5)).member_epoch == 1
    assert sorted(rt.shards[0].groups) == ["kept"]
    await asyncio.wait_for(rt.close(), 5)


async def test_a_join_storm_in_one_shard_does_not_hold_up_another_shards_group() -> None:
    rt = await started(make_runtime(MemoryRecordStore(partitions=2)))
    await rt.create_topics([NewTopic(name="t", num_partitions=64)])
    storm_groups = [g for g in (f"storm-{i}" for i in range(200)) if partition_for(g, 2) == 0]
    probe_group = next(g for g in (f"probe-{i}" for i in range(100)) if partition_for(g, 2) == 1)
    done: list[str] = []

    async def beat(group: str) -> None:
        response = await rt.heartbeat(join(group))
        assert response.member_epoch >= 1
        done.append(group)

    storm = [asyncio.ensure_future(beat(g)) for g in storm_groups]
    await asyncio.sleep(0)  # every storm command arrived in this iteration
    probe = asyncio.ensure_future(beat(probe_group))
    await asyncio.wait_for(asyncio.gather(*storm, probe), 30)
    # The probe's group was answered before most of the storm, though it arrived after it all.
    assert done.index(probe_group) < len(storm_groups) // 2, done.index(probe_group)
    assert set(storm_groups) <= set(rt.shards[0].groups)
    await asyncio.wait_for(rt.close(), 5)


async def test_queued_joins_wait_behind_the_other_commands_of_their_state_machine() -> None:
    turns = make_turns(budget_s=0.0)  # everything queues
    ran: list[str] = []
    futures = [
        later(turns, 0, lambda: ran.append("join 1"), join=True),
        later(turns, 0, lambda: ran.append("join 2"), join=True),
        later(turns, 0, lambda: ran.append("heartbeat 1")),
        later(turns, 1, lambda: ran.append("other machine")),
        later(turns, 0, lambda: ran.append("join 3"), join=True),
        later(turns, 0, lambda: ran.append("heartbeat 2")),
    ]
    await asyncio.gather(*futures)
    # Each turn runs one command (budget 0); machine 0's heartbeats go before its joins, in
    # arrival order, and the joins keep theirs.
    assert ran == [
        "heartbeat 1",
        "other machine",
        "heartbeat 2",
        "join 1",
        "join 2",
        "join 3",
    ]
    assert turns.queued == 0


async def test_a_heartbeat_runs_at_once_while_only_joins_are_queued() -> None:
    turns = make_turns(budget_s=0.001)
    turns.charge(0, 0.0015)  # machine 0 used its share: the next join queues
    queued_join = later(turns, 0, lambda: "join", join=True)
    await asyncio.sleep(0)  # a new iteration: budget back, the join still ahead of a new one
    assert await queued_join == "join"
    turns.charge(0, 0.0015)
    later(turns, 0, lambda: "join", join=True)
    await asyncio.sleep(0)
    later(turns, 0, lambda: "another join", join=True)
    assert not turns.now(0, join=True)  # a join waits behind the queued joins
    assert turns.now(0)  # a heartbeat of a member already in does not


async def test_in_a_storm_a_members_heartbeat_is_answered_before_the_queued_joins() -> None:
    rt = await started(make_runtime(MemoryRecordStore(partitions=1)))
    await rt.create_topics([NewTopic(name="t", num_partitions=64)])
    order: list[str] = []
    first = await rt.heartbeat(join("g", member_id="m-first"))
    assert first.member_epoch >= 1

    async def call(req: ConsumerGroupHeartbeat, name: str) -> None:
        await rt.heartbeat(req)
        order.append(name)

    storm = [
        asyncio.ensure_future(call(join("g", member_id=f"m-{i}"), f"join {i}")) for i in range(300)
    ]
    await asyncio.sleep(0)  # the storm arrived and used the shard's share: the rest queued
    ack = asyncio.ensure_future(
        call(beat("g", "m-first", first.member_epoch), "the first member's heartbeat")
    )
    await asyncio.wait_for(asyncio.gather(*storm, ack), 30)
    assert order.index("the first member's heartbeat") < 100, order.index(
        "the first member's heartbeat"
    )
    joins = [name for name in order if name.startswith("join")]
    assert joins == [f"join {i}" for i in range(300)]  # the joins kept their order
    await asyncio.wait_for(rt.close(), 5)


async def test_a_parked_sync_answered_in_its_own_turn_is_not_lost() -> None:
    """A queued SyncGroup that parks, and a new member's JoinGroup queued behind it in the same
    turn that restarts the rebalance (answering the parked SyncGroup at once: a classic join
    writes nothing): the SyncGroup's caller resumes only after both ran, and must still get
    its answer."""
    store = MemoryRecordStore()
    key, value = codec.encode(classic_record())  # a Stable classic group: A and B, generation 5
    store.append([StoredRecord(key, value, "grp")], 1)
    rt = await started(make_runtime(store, **{"group.initial.rebalance.delay.ms": "0"}))
    rejoin_a = asyncio.ensure_future(rt.classic_join(classic_join_req("A")))
    for _ in range(5):  # the leader's rejoin starts the rebalance, B's completes it
        await asyncio.sleep(0)
    joined_b = await rt.classic_join(classic_join_req("B"))
    joined_a = await asyncio.wait_for(rejoin_a, 5)
    assert (joined_a.generation_id, joined_b.generation_id, joined_a.leader) == (6, 6, "A")
    new_id = (await rt.classic_join(classic_join_req(""))).member_id  # MEMBER_ID_REQUIRED
    before = written(store)
    await asyncio.sleep(0)  # the turn of that join is over
    sync_b = asyncio.ensure_future(
        rt.classic_sync(m.SyncGroup(group_id="grp", generation_id=6, member_id="B"))
    )
    join_c = asyncio.ensure_future(rt.classic_join(classic_join_req(new_id)))
    # The shard has used its share of this loop iteration: both commands queue, and run one
    # after the other in the next turn, before B's caller resumes.
    rt.driver.turns.charge(rt.shard_index("grp"), 1.0)
    synced = await asyncio.wait_for(sync_b, 5)
    assert synced.error_code == ErrorCode.REBALANCE_IN_PROGRESS
    assert written(store) == before  # answered without a write
    assert not join_c.done()  # C waits at the new barrier
    join_c.cancel()
    await asyncio.wait_for(rt.close(), 5)
