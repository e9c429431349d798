"""The runtime in-process: MemoryRecordStore, manual clock, deterministic ids."""

from __future__ import annotations

import asyncio

import pytest
from builders import START_MS, beat, join, make_runtime, stored

from assignors.uniform import UniformAssignor
from coordinator.core import codec
from coordinator.core.commands import SequentialIds
from coordinator.core.config import parse_config
from coordinator.core.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    GroupIdNotFoundError,
)
from coordinator.core.topics import NewTopic
from coordinator.runtime import CoordinatorRuntime, RuntimeState
from coordinator.runtime.store import MemoryRecordStore


async def started(rt: CoordinatorRuntime) -> CoordinatorRuntime:
    await rt.start()
    return rt


async def test_join_is_durable_and_answered() -> None:
    store = MemoryRecordStore()
    rt = await started(make_runtime(store))
    await rt.create_topics([NewTopic(name="t", num_partitions=2)])
    resp = await rt.heartbeat(join("g"))
    assert resp.member_id == "member-2"
    assert resp.member_epoch == 1
    loaded = [codec.decode(r.key, r.value).group_id for r in stored(store)]
    assert None in loaded and "g" in loaded
    await rt.close()
    assert rt.state is RuntimeState.CLOSED


async def test_group_commit_batches_concurrent_commands() -> None:
    store = MemoryRecordStore(partitions=4)
    rt = await started(make_runtime(store))
    await rt.create_topics([NewTopic(name="t", num_partitions=8)])
    assert store.batch_sizes and len(store.batch_sizes) == 1
    store.hold_appends()
    first = asyncio.ensure_future(rt.heartbeat(join("g0")))
    await asyncio.sleep(0)  # g0's batch goes in flight and is held
    for _ in range(20):
        await asyncio.sleep(0)
    rest = [asyncio.ensure_future(rt.heartbeat(join(f"g{i}"))) for i in range(1, 11)]
    await asyncio.sleep(0.01)
    assert not first.done() and not any(f.done() for f in rest)
    store.release_appends()
    responses = await asyncio.gather(first, *rest)
    assert all(r.member_epoch == 1 for r in responses)
    # one batch for the topic, one for g0, ONE for the ten commands that queued behind it
    assert len(store.batch_sizes) == 3
    assert rt.stats["batches"] == 3
    await rt.close()


async def test_order_per_shard_is_arrival_order() -> None:
    rt = await started(make_runtime(shards=1))
    await rt.create_topics([NewTopic(name="t", num_partitions=4)])
    futures = [asyncio.ensure_future(rt.heartbeat(join("g", member_id=f"m{i}"))) for i in range(5)]
    responses = await asyncio.gather(*futures)
    # each join bumps the group epoch: arrival order == epoch order
    assert [r.member_epoch for r in responses] == [1, 2, 3, 4, 5]
    await rt.close()


async def test_write_failure_rolls_back_and_answers_in_band() -> None:
    store = MemoryRecordStore()
    rt = await started(make_runtime(store))
    await rt.create_topics([NewTopic(name="t", num_partitions=2)])
    ok = await rt.heartbeat(join("g", member_id="a"))
    before = rt.snapshot()
    timers_before = rt.timers.keys()
    store.fail_next_appends(1)
    with pytest.raises(CoordinatorNotAvailableError) as info:
        await rt.heartbeat(join("g", member_id="b"))
    assert "write to the record store failed" in info.value.message
    assert rt.snapshot() == before
    assert rt.timers.keys() == timers_before
    # The coordinator keeps serving and the state moves on from the durable point.
    again = await rt.heartbeat(join("g", member_id="b"))
    assert again.member_epoch == ok.member_epoch + 1
    await rt.close()


def event_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str, dict[str, object]]]:
    return [
        (rec.event, rec.getMessage(), rec.event_fields)  # type: ignore[attr-defined]
        for rec in caplog.records
        if hasattr(rec, "event")
    ]


async def test_log_lines_are_written_only_once_durable(caplog: pytest.LogCaptureFixture) -> None:
    """The core's events are logged after their batch is durable: a held write logs nothing
    yet, a failed write (rolled back) never logs, and a successful one logs with its fields."""
    store = MemoryRecordStore(partitions=1)
    rt = await started(make_runtime(store))
    await rt.create_topics([NewTopic(name="t", num_partitions=2)])
    await rt.heartbeat(join("g", member_id="a"))
    caplog.set_level("INFO", logger="kip848.runtime")
    caplog.clear()
    store.hold_appends()
    store.fail_next_appends(1)
    failed = asyncio.ensure_future(rt.heartbeat(join("g", member_id="b")))
    await asyncio.sleep(0.01)
    assert event_lines(caplog) == []  # not durable yet: nothing said
    store.release_appends()
    with pytest.raises(CoordinatorNotAvailableError):
        await failed
    assert event_lines(caplog) == []  # rolled back: it never happened
    store.hold_appends()
    joined = asyncio.ensure_future(rt.heartbeat(join("g", member_id="c")))
    await asyncio.sleep(0.01)
    assert event_lines(caplog) == []
    store.release_appends()
    assert (await joined).member_epoch == 2
    assert event_lines(caplog) == [
        (
            "group_epoch_bumped",
            "[GroupId g] Bumped group epoch to 2: member_joined (members c).",
            {"group_epoch": 2, "causes": ("member_joined",), "member_ids": ("c",)},
        )
    ]
    await rt.close()


async def test_failure_also_fails_later_unpersisted_work() -> None:
    store = MemoryRecordStore(partitions=4)
    rt = await started(make_runtime(store))
    await rt.create_topics([NewTopic(name="t", num_partitions=2)])
    before = rt.snapshot()
    store.hold_appends()
    store.fail_next_appends(1)
    first = asyncio.ensure_future(rt.heartbeat(join("g1")))
    for _ in range(5):
        await asyncio.sleep(0)
    later = asyncio.ensure_future(rt.heartbeat(join("g2")))
    read = asyncio.ensure_future(rt.describe_group("g1"))
    await asyncio.sleep(0.01)
    store.release_appends()
    results = await asyncio.gather(first, later, read, return_exceptions=True)
    # The read is answered from the committed state, at once: g1 is not there yet.
    assert [type(r) for r in results] == [CoordinatorNotAvailableError] * 2 + [GroupIdNotFoundError]
    assert rt.snapshot() == before
    with pytest.raises(GroupIdNotFoundError):
        await rt.describe_group("g1")
    await rt.close()


async def test_topic_registry_rolls_back_and_shards_see_it() -> None:
    store = MemoryRecordStore()
    rt = await started(make_runtime(store))
    store.fail_next_appends(1)
    with pytest.raises(CoordinatorNotAvailableError):
        await rt.create_topics([NewTopic(name="t", num_partitions=2)])
    assert await rt.list_topics() == []
    assert all(s.topics.by_name == {} for s in rt.shards)
    await rt.close()


async def test_session_timeout_fires_only_on_advance() -> None:
    rt = await started(make_runtime())
    await rt.create_topics([NewTopic(name="t", num_partitions=2)])
    resp = await rt.heartbeat(join("g"))
    assert await rt.advance_time(44_999) == START_MS + 44_999
    assert len((await rt.describe_group("g")).members) == 1
    assert await rt.advance_time(1) == START_MS + 45_000
    desc = await rt.describe_group("g")
    assert desc.members == () and desc.group_epoch == 2
    assert resp.member_id not in [m.member_id for m in desc.members]
    await rt.close()


async def test_superseded_timer_does_not_fire() -> None:
    rt = await started(make_runtime())
    await rt.create_topics([NewTopic(name="t", num_partitions=2)])
    resp = await rt.heartbeat(join("g"))
    await rt.advance_time(40_000)
    # a heartbeat re-arms the session timer: the old deadline passes without effect
    await rt.heartbeat(beat("g", resp.member_id, resp.member_epoch, owned=None))
    await rt.advance_time(10_000)
    assert len((await rt.describe_group("g")).members) == 1
    await rt.advance_time(35_000)
    assert (await rt.describe_group("g")).members == ()
    await rt.close()


async def test_timer_touched_by_undurable_command_is_deferred() -> None:
    store = MemoryRecordStore(partitions=1)  # "other" and "g" on one shard
    rt = await started(make_runtime(store))
    await rt.create_topics([NewTopic(name="t", num_partitions=2)])
    resp = await rt.heartbeat(join("g"))
    key = ("session", "g", resp.member_id)
    store.hold_appends()
    # another group's join is in flight, then the member heartbeats (zero records, waits on it)
    alter = asyncio.ensure_future(rt.heartbeat(join("other")))
    await asyncio.sleep(0.01)
    hb = asyncio.ensure_future(rt.heartbeat(beat("g", resp.member_id, resp.member_epoch)))
    await asyncio.sleep(0.01)
    # the old deadline passes while the re-arm is not durable: the timer must be deferred
    rt.clock.advance(45_000)
    due = rt.timers.pop_due(rt.clock.now_ms())
    assert due is not None and due.key == key
    rt.driver.fire(due, rt.clock.now_ms())
    assert rt.driver.timing.deferred(key)
    store.release_appends()
    await asyncio.gather(alter, hb)
    assert not rt.driver.timing.deferred(key)
    assert rt.timers.get(key) is not None  # re-armed by the heartbeat
    assert len((await rt.describe_group("g")).members) == 1
    await rt.close()


async def test_load_in_progress_and_restart_equals_state() -> None:
    store = MemoryRecordStore()
    rt = make_runtime(store)
    with pytest.raises(CoordinatorLoadInProgressError):
        await rt.heartbeat(join("g"))
    await rt.start()
    await rt.create_topics([NewTopic(name="t", num_partitions=3)])
    a = await rt.heartbeat(join("g", member_id="a"))
    await rt.heartbeat(join("g", member_id="b"))
    await rt.heartbeat(beat("g", "a", a.member_epoch, owned={}))
    await rt.alter_group_configs("g", {"consumer.heartbeat.interval.ms": "6000"})
    before = rt.snapshot()
    await rt.close()
    # restart with a different shard count: records are routed by group id
    rt2 = make_runtime(store.reopen())
    stats = await rt2.start()
    assert rt2.snapshot() == before
    assert stats.groups == 1 and stats.topics == 1
    assert await rt2.group_config("g") == {
        "consumer.session.timeout.ms": "45000",
        "consumer.heartbeat.interval.ms": "6000",
        "consumer.assignment.interval.ms": "0",
    }
    # on_loaded re-armed the session timers
    assert sorted(k for k in rt2.timers.keys() if k[0] == "session") == [  # noqa: SIM118
        ("session", "g", "a"),
        ("session", "g", "b"),
    ]
    await rt2.close()


async def test_closed_runtime_answers_not_available() -> None:
    rt = await started(make_runtime())
    await rt.close()
    with pytest.raises(CoordinatorNotAvailableError):
        await rt.heartbeat(join("g"))


async def test_system_clock_fires_session_timeout_by_itself() -> None:
    from coordinator.runtime import SystemClock

    config = parse_config(
        {
            "group.consumer.min.session.timeout.ms": "50",
            "group.consumer.session.timeout.ms": "50",
            "group.consumer.min.heartbeat.interval.ms": "10",
            "group.consumer.heartbeat.interval.ms": "20",
            # No batching: the join is answered in its heartbeat, not parked until a first
            # target that a loaded machine could finish after the 50 ms session.
            "group.consumer.assignment.interval.ms": "0",
        }
    )
    rt = CoordinatorRuntime(
        config=config,
        store=MemoryRecordStore(),
        clock=SystemClock(),
        ids=SequentialIds(),
        assignors=[UniformAssignor()],
    )
    await rt.start()
    await rt.create_topics([NewTopic(name="t", num_partitions=2)])
    await rt.heartbeat(join("g"))
    for _ in range(100):  # bounded: up to ~1 s
        await asyncio.sleep(0.01)
        if not (await rt.describe_group("g")).members:
            break
    desc = await rt.describe_group("g")
    assert (desc.members, desc.group_epoch) == ((), 2)
    assert rt.stats["timers_fired"] == 1
    await rt.close()


async def test_advance_time_refuses_to_leave_the_int64_range() -> None:
    """A clock moved past int64 made every later write fail (SQLite INTEGER overflow): the
    request is refused and the clock stays where it was."""
    from coordinator.core.errors import InvalidRequestError

    rt = await started(make_runtime())
    with pytest.raises(InvalidRequestError, match="int64 range"):
        await rt.advance_time(2**63 - 1)
    assert rt.clock.now_ms() == START_MS
    assert await rt.advance_time(1_000) == START_MS + 1_000
    await rt.close()
