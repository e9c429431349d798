"""Time in the runtime (#13 items 8-9): timers measure silence on a monotonic clock, so wall
clock steps neither fire nor delay session timeouts; record timestamps stay wall time; a
coordinator that did not run (stopped, blocked) grants its members the time it was away.

A :class:`SystemClock` with an injected wall clock (the real one plus an offset the test moves)
and, for the stall, an injected monotonic clock."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import Any

import pytest
from test_runtime_core import beat, join

from assignors.uniform import UniformAssignor
from coordinator.core.commands import SequentialIds
from coordinator.core.config import parse_config
from coordinator.core.errors import CoordinatorNotAvailableError
from coordinator.core.timers import SESSION, ArmTimer
from coordinator.core.topics import NewTopic
from coordinator.routing import partition_for
from coordinator.runtime import CoordinatorRuntime, SystemClock
from coordinator.runtime.store import MemoryRecordStore
from coordinator.runtime.timing import (
    FIRE_BUDGET_MS,
    FIRE_PER_WAKEUP,
    STALL_GRACE_MS,
    TIMER_RETRY_MS,
)

HOUR_MS = 3_600_000


class SteppableClock:
    """The real clocks plus offsets a test moves: ``wall_step`` (an NTP step, ``date -s``) and
    ``away`` (time that passed on the monotonic clock without the process running)."""

    def __init__(self) -> None:
        self.wall_step = 0
        self.away = 0
        self.stopped_at: int | None = None  # the monotonic clock stands still there

    def wall(self) -> int:
        return time.time_ns() // 1_000_000 + self.wall_step

    def monotonic(self) -> int:
        if self.stopped_at is not None:
            return self.stopped_at
        return time.monotonic_ns() // 1_000_000 + self.away


def runtime(clock: SteppableClock, store: MemoryRecordStore, session_ms: int) -> CoordinatorRuntime:
    config = parse_config(
        {
            "group.consumer.min.session.timeout.ms": "50",
            "group.consumer.session.timeout.ms": str(session_ms),
            "group.consumer.min.heartbeat.interval.ms": "10",
            "group.consumer.heartbeat.interval.ms": "20",
        }
    )
    return CoordinatorRuntime(
        config=config,
        store=store,
        clock=SystemClock(wall_ms=clock.wall, monotonic_ms=clock.monotonic),
        ids=SequentialIds(),
        assignors=[UniformAssignor()],
    )


async def members(rt: CoordinatorRuntime, group: str) -> list[str]:
    return [m.member_id for m in (await rt.describe_group(group)).members]


async def wait_removed(rt: CoordinatorRuntime, group: str, member: str, limit_s: float) -> float:
    start = time.monotonic()
    for _ in range(int(limit_s / 0.01)):  # bounded
        try:
            if member not in await members(rt, group):
                return time.monotonic() - start
        except CoordinatorNotAvailableError:  # a read behind a failed write: ask again
            pass
        await asyncio.sleep(0.01)
    raise AssertionError(f"{member} still in {group} after {limit_s} s")


async def test_wall_clock_step_back_does_not_delay_a_session_timeout() -> None:
    clock, store = SteppableClock(), MemoryRecordStore()
    rt = runtime(clock, store, session_ms=300)
    await rt.start()
    await rt.create_topics([NewTopic(name="t", num_partitions=2)])
    joined = time.monotonic()  # before the join: its session timer is armed after this
    await rt.heartbeat(join("g", member_id="dead"))
    clock.wall_step = -HOUR_MS  # the wall clock jumps an hour back
    await wait_removed(rt, "g", "dead", limit_s=5.0)
    assert 0.25 < time.monotonic() - joined < 2.0  # its session timeout, not an hour
    # What Kafka keeps in wall time still is: the removal's records carry the stepped time.
    last = list(store.journal(partition_for("g", store.partitions)))[-1]
    assert abs(last.timestamp_ms - (clock.wall())) < 5_000
    await rt.close()


async def test_wall_clock_step_forward_does_not_fence_live_members() -> None:
    clock, store = SteppableClock(), MemoryRecordStore()
    rt = runtime(clock, store, session_ms=400)
    await rt.start()
    await rt.create_topics([NewTopic(name="t", num_partitions=2)])
    resp = await rt.heartbeat(join("g", member_id="live"))
    epoch = resp.member_epoch
    for i in range(12):  # ~0.6 s of heartbeats every 50 ms, a step forward in the middle
        if i == 3:
            clock.wall_step = HOUR_MS
        await asyncio.sleep(0.05)
        resp = await rt.heartbeat(beat("g", "live", epoch, owned=None))  # raises if fenced
        epoch = resp.member_epoch
    assert await members(rt, "g") == ["live"]
    assert rt.stats["timers_fired"] == 0
    await rt.close()


async def test_time_away_is_granted_to_every_timer(caplog: pytest.LogCaptureFixture) -> None:
    """The process did not run for 5 s (a SIGSTOP longer than the 1 s session timeout): when
    it runs again nothing is fenced before its members could be heard; a member that stays
    silent is still removed, one session timeout's worth of running time later."""
    clock, store = SteppableClock(), MemoryRecordStore()
    rt = runtime(clock, store, session_ms=1000)
    await rt.start()
    await rt.create_topics([NewTopic(name="t", num_partitions=2)])
    live = await rt.heartbeat(join("g", member_id="live"))
    await rt.heartbeat(join("g", member_id="silent"))
    key = ("session", "g", "live")
    before = rt.timers.get(key)
    assert before is not None
    clock.away = 5_000  # five seconds passed with the process stopped
    with caplog.at_level(logging.WARNING, logger="kip848.runtime"):
        rt.driver.timing.on_due()  # what the loop runs first when the process is resumed
    # (Measured from the last tick, every 0.5 s: up to that much less than the real gap.)
    assert re.search(r"did not run for (4\.[5-9]|5\.0) s", caplog.text), caplog.text
    after = rt.timers.get(key)
    assert after is not None and 4_500 <= after[0] - before[0] <= 5_000
    assert sorted(await members(rt, "g")) == ["live", "silent"]  # nobody fenced
    # The live member's heartbeat (queued while stopped) is read now and keeps it.
    await rt.heartbeat(beat("g", "live", live.member_epoch, owned=None))
    elapsed = await wait_removed(rt, "g", "silent", limit_s=5.0)
    assert elapsed < 2.0  # what was left of its session timeout, then gone
    assert await members(rt, "g") == ["live"]
    await rt.close()


async def test_a_short_delay_is_not_a_stall() -> None:
    clock, store = SteppableClock(), MemoryRecordStore()
    rt = runtime(clock, store, session_ms=1000)
    await rt.start()
    await rt.create_topics([NewTopic(name="t", num_partitions=1)])
    await rt.heartbeat(join("g", member_id="m"))
    before = rt.timers.get(("session", "g", "m"))
    clock.away = STALL_GRACE_MS // 2
    rt.driver.timing.tick()
    assert rt.timers.get(("session", "g", "m")) == before
    await rt.close()


async def test_a_storm_of_expiries_is_fired_a_slice_per_wakeup() -> None:
    """Every member's session falls due at once (clients lost their network): one wake-up of
    the loop fires FIRE_PER_WAKEUP of them and leaves the rest due for the next loop steps, so
    the I/O waiting meanwhile (a lease renewal among nodes) is not held up for the whole
    storm (nor for FIRE_BUDGET_MS, the other bound: the clock stands still here); every one of
    them still fires, each member removed once."""
    clock, store = SteppableClock(), MemoryRecordStore()
    rt = runtime(clock, store, session_ms=60_000)
    await rt.start()
    await rt.create_topics([NewTopic(name="t", num_partitions=1)])
    groups = [f"g{i}" for i in range(FIRE_PER_WAKEUP + 100)]
    await asyncio.gather(*(rt.heartbeat(join(g, member_id="m")) for g in groups))
    timing = rt.driver.timing
    due = clock.monotonic() - 1
    timing.apply([ArmTimer((SESSION, g, "m"), due) for g in groups])
    fired = rt.stats["timers_fired"]
    clock.stopped_at = clock.monotonic()  # however fast this machine fires them
    timing.on_due()
    clock.stopped_at = None
    assert rt.stats["timers_fired"] - fired == FIRE_PER_WAKEUP
    left = [g for g in groups if (t := rt.timers.get((SESSION, g, "m"))) and t[0] == due]
    assert len(left) == 100  # still due: they fire in the next loop steps
    for _ in range(500):  # bounded: 5 s
        if rt.stats["timers_fired"] - fired >= len(groups):
            break
        await asyncio.sleep(0.01)
    assert rt.stats["timers_fired"] - fired == len(groups)
    await rt.flush()  # a read shows the group as of its last durable write
    for g in (groups[0], left[0], groups[-1]):
        assert await members(rt, g) == []
    await rt.close()


async def test_slow_expiries_are_fired_within_a_time_budget_per_wakeup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Expiries that cost milliseconds each (a big group rebalanced on every one, a busy
    machine): a wake-up of the loop ends once FIRE_BUDGET_MS have passed, however few it
    fired; the rest fire in the next loop steps, every one of them."""
    clock, store = SteppableClock(), MemoryRecordStore()
    rt = runtime(clock, store, session_ms=60_000)
    await rt.start()
    await rt.create_topics([NewTopic(name="t", num_partitions=1)])
    groups = [f"g{i}" for i in range(40)]
    await asyncio.gather(*(rt.heartbeat(join(g, member_id="m")) for g in groups))
    timing = rt.driver.timing
    due = clock.monotonic() - 1
    timing.apply([ArmTimer((SESSION, g, "m"), due) for g in groups])
    fire = timing.fire

    def slow_fire(timer: Any, now_ms: int) -> Any:  # each one costs half the budget
        clock.away += FIRE_BUDGET_MS // 2
        return fire(timer, now_ms)

    fired = rt.stats["timers_fired"]
    monkeypatch.setattr(timing, "fire", slow_fire)
    timing.on_due()
    monkeypatch.undo()
    assert 1 <= rt.stats["timers_fired"] - fired <= 2
    for _ in range(500):  # bounded: 5 s
        if rt.stats["timers_fired"] - fired >= len(groups):
            break
        await asyncio.sleep(0.01)
    assert rt.stats["timers_fired"] - fired == len(groups)
    await rt.flush()  # a read shows the group as of its last durable write
    assert [await members(rt, g) for g in groups] == [[]] * len(groups)
    await rt.close()


async def test_a_timer_whose_write_fails_is_retried() -> None:
    """A session timeout that falls due while the store cannot be written (a full disk) is
    tried again every TIMER_RETRY_MS, so the dead member is removed once writes succeed."""
    clock, store = SteppableClock(), MemoryRecordStore()
    rt = runtime(clock, store, session_ms=100)
    rt.watch.interval_s = 3600  # no probes: the timer's own retries are under test
    await rt.start()
    await rt.create_topics([NewTopic(name="t", num_partitions=1)])
    await rt.heartbeat(join("g", member_id="dead"))
    store.fail_next_appends(2)  # the first firing and its first retry fail
    start = time.monotonic()
    await wait_removed(rt, "g", "dead", limit_s=5.0)
    took = time.monotonic() - start
    assert took >= 0.1 + 2 * TIMER_RETRY_MS / 1000 * 0.9
    assert rt.stats["failed_batches"] == 2
    assert rt.serving  # the successful removal made the store writable again
    await rt.close()


async def test_timers_and_first_targets_run_outside_the_request_that_scheduled_them() -> None:
    """A timer armed while a request is handled fires later in a context of its own: the
    request's arrival time is not its queue time, the request's trace not its parent. The
    same for the task that computes a new group's first target and answers parked joins."""
    from coordinator.observability.requests import ARRIVAL

    clock, store = SteppableClock(), MemoryRecordStore()
    rt = runtime(clock, store, session_ms=100)
    await rt.start()
    await rt.create_topics([NewTopic(name="t", num_partitions=2)])
    seen: list[tuple[str, float | None]] = []
    shard = rt.shards[rt.shard_index("g")]
    on_timer, first_target = shard.on_timer, shard.groups.first_target

    def timer_seen(due, now_ms):  # type: ignore[no-untyped-def]
        seen.append(("timer " + due.key[0], ARRIVAL.get()))
        return on_timer(due, now_ms)

    def first_seen(group_id, now_ms):  # type: ignore[no-untyped-def]
        seen.append(("first target", ARRIVAL.get()))
        return first_target(group_id, now_ms)

    shard.on_timer = timer_seen  # type: ignore[method-assign]
    shard.groups.first_target = first_seen  # type: ignore[method-assign]
    ARRIVAL.set([123.0])  # what the service layer sets while it handles a request
    await rt.heartbeat(join("g", member_id="dead"))  # parked, then answered; arms its session
    await wait_removed(rt, "g", "dead", limit_s=5.0)
    await rt.close()
    assert ("first target", None) in seen
    assert ("timer session", None) in seen
    assert all(arrival is None for _, arrival in seen), seen
