"""The push stream (ConsumerGroupWatch) in-process: runtime watchers (coordinator/runtime/
watchers.py), the per-group hub and the stream rules (coordinator/server/push.py).

Runtime on a MemoryRecordStore with a manual clock; streams read from the service layer.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from assignors.uniform import UniformAssignor
from coordinator.core.commands import ConsumerGroupHeartbeat, HeartbeatAssignment, SequentialIds
from coordinator.core.config import parse_config
from coordinator.core.errors import CoordinatorNotAvailableError, ErrorCode
from coordinator.core.topics import NewTopic
from coordinator.runtime import CoordinatorRuntime, ManualClock
from coordinator.runtime.store import MemoryRecordStore
from coordinator.runtime.watchers import GroupWatchers
from coordinator.server.api import Caller, WatchEvent, WatchRequest
from coordinator.server.service import CoordinatorService, ShuttingDown

STEP_S = 5.0  # bound on every wait for a stream event


async def started_runtime(assignment_interval_ms: int = 0) -> CoordinatorRuntime:
    """Two shards, a manual clock; targets at once unless an assignment interval is given (most
    stories here are about the stream, not the interval)."""
    rt = CoordinatorRuntime(
        config=parse_config(
            {
                "group.coordinator.shards": "2",
                "group.consumer.assignment.interval.ms": str(assignment_interval_ms),
            }
        ),
        store=MemoryRecordStore(partitions=2),
        clock=ManualClock(1_000_000),
        ids=SequentialIds(),
        assignors=[UniformAssignor()],
    )
    await rt.start()
    return rt


def join(group: str, member_id: str) -> ConsumerGroupHeartbeat:
    return ConsumerGroupHeartbeat(
        group_id=group,
        member_id=member_id,
        member_epoch=0,
        rebalance_timeout_ms=30_000,
        subscribed_topic_names=("t",),
        topic_partitions={},
    )


def beat(
    group: str, member_id: str, epoch: int, owned: dict | None = None
) -> ConsumerGroupHeartbeat:
    return ConsumerGroupHeartbeat(
        group_id=group, member_id=member_id, member_epoch=epoch, topic_partitions=owned
    )


async def next_event(stream: AsyncIterator[WatchEvent]) -> WatchEvent:
    async with asyncio.timeout(STEP_S):
        return await anext(stream)


async def no_event(stream: AsyncIterator[WatchEvent]) -> asyncio.Task[WatchEvent]:
    """A pending read of the stream; it must still be pending after the loop settled."""
    task = asyncio.ensure_future(anext(stream))
    for _ in range(50):
        await asyncio.sleep(0)
    assert not task.done(), task.result()
    return task


def watch(service: CoordinatorService, member_id: str, **caller: bool) -> AsyncIterator[WatchEvent]:
    return service.consumer_group_watch(
        WatchRequest(group_id="g", member_id=member_id), Caller(**caller)
    )


async def group_with_topic(
    partitions: int = 4,
) -> tuple[CoordinatorRuntime, CoordinatorService, str]:
    rt = await started_runtime()
    [topic] = await rt.create_topics([NewTopic(name="t", num_partitions=partitions)])
    return rt, CoordinatorService(rt), topic.topic_id


async def test_a_member_hears_its_new_target_and_the_release_of_what_it_waits_for() -> None:
    rt, service, t = await group_with_topic()
    a = await rt.heartbeat(join("g", member_id="A"))
    assert a.assignment is not None and a.assignment.assigned == {t: frozenset({0, 1, 2, 3})}
    stream_a = watch(service, "A")
    first = await next_event(stream_a)
    assert first == WatchEvent(
        member_epoch=1,
        group_epoch=1,
        assignment_epoch=1,
        target={t: frozenset({0, 1, 2, 3})},
        released={},
    )
    # B joins: its join computes the new target; A hears that its target shrank.
    b = await rt.heartbeat(join("g", member_id="B"))
    assert b.member_epoch == 2 and b.assignment is not None
    assert b.assignment.pending == {t: frozenset({2, 3})}
    event = await next_event(stream_a)
    assert event == WatchEvent(
        member_epoch=1,
        group_epoch=2,
        assignment_epoch=2,
        target={t: frozenset({0, 1})},
        released={},
    )
    stream_b = watch(service, "B")
    assert (await next_event(stream_b)).released == {}  # A still holds 2 and 3
    pending_b = await no_event(stream_b)
    # A heartbeats (told to revoke 2 and 3), revokes, acknowledges: they are free for B.
    told = await rt.heartbeat(beat("g", "A", 1))
    assert told.assignment is not None and told.assignment.assigned == {t: frozenset({0, 1})}
    await rt.heartbeat(beat("g", "A", 1, owned={t: frozenset({0, 1})}))
    async with asyncio.timeout(STEP_S):
        released = await pending_b
    assert released == WatchEvent(
        member_epoch=2,
        group_epoch=2,
        assignment_epoch=2,
        target={t: frozenset({2, 3})},
        released={t: frozenset({2, 3})},
    )
    # B takes them: nothing new for B (no message), nor for A.
    took = await rt.heartbeat(beat("g", "B", 2))
    assert took.assignment is not None and took.assignment.assigned == {t: frozenset({2, 3})}
    quiet_b = await no_event(stream_b)
    quiet_a = await no_event(stream_a)
    # A leaves: its stream ends with UNKNOWN_MEMBER_ID; B hears that a new target is due (the
    # next heartbeat computes it).
    await rt.heartbeat(beat("g", "A", -1))
    async with asyncio.timeout(STEP_S):
        gone, due = await quiet_a, await quiet_b
    assert gone == WatchEvent(
        error_code=ErrorCode.UNKNOWN_MEMBER_ID, error_message="The member is not in the group."
    )
    with pytest.raises(StopAsyncIteration):
        await next_event(stream_a)
    assert (due.group_epoch, due.assignment_epoch) == (3, 2)
    assert due.target == {t: frozenset({2, 3})}
    all_of_it = await rt.heartbeat(beat("g", "B", 2))
    assert all_of_it.assignment is not None
    assert all_of_it.assignment.assigned == {t: frozenset({0, 1, 2, 3})}
    assert (await next_event(stream_b)).target == {t: frozenset({0, 1, 2, 3})}
    await stream_b.aclose()  # type: ignore[attr-defined]
    for _ in range(3):
        await asyncio.sleep(0)  # the hub's task runs its cancellation
    assert len(rt.watchers) == 0  # the hub unregistered with its last stream
    await rt.close()


@pytest.mark.parametrize(
    ("group_id", "member_id", "code"),
    [
        (" ", "A", ErrorCode.INVALID_GROUP_ID),
        ("g", "", ErrorCode.INVALID_REQUEST),
        ("nope", "A", ErrorCode.GROUP_ID_NOT_FOUND),
        ("g", "stranger", ErrorCode.UNKNOWN_MEMBER_ID),
    ],
)
async def test_a_stream_that_cannot_watch_ends_with_one_error(
    group_id: str, member_id: str, code: ErrorCode
) -> None:
    rt, service, _t = await group_with_topic()
    await rt.heartbeat(join("g", member_id="A"))
    stream = service.consumer_group_watch(
        WatchRequest(group_id=group_id, member_id=member_id), Caller()
    )
    event = await next_event(stream)
    assert event.error_code == code and event.error_message
    with pytest.raises(StopAsyncIteration):
        await next_event(stream)
    await rt.close()


async def test_one_read_per_change_however_many_streams() -> None:
    rt, service, _t = await group_with_topic()
    for member in ("A", "B", "C", "D"):
        await rt.heartbeat(join("g", member_id=member))
    reads: list[tuple[str, ...]] = []
    real = rt.member_views

    async def counting(group_id: str, member_ids: list[str]):  # type: ignore[no-untyped-def]
        reads.append(tuple(sorted(member_ids)))
        return await real(group_id, member_ids)

    rt.member_views = counting  # type: ignore[method-assign]
    streams = [watch(service, m) for m in ("A", "B", "C", "C")]
    for s in streams:
        await next_event(s)
    reads.clear()
    await rt.heartbeat(beat("g", "D", -1))  # one durable batch: D left, a new target is due
    for s in streams:
        event = await next_event(s)
        assert event.group_epoch == event.assignment_epoch + 1
    assert reads == [("A", "B", "C")]
    for s in streams:
        await s.aclose()  # type: ignore[attr-defined]
    await rt.close()


async def test_nothing_is_pushed_for_a_batch_that_failed() -> None:
    rt, service, _t = await group_with_topic()
    await rt.heartbeat(join("g", member_id="A"))
    stream = watch(service, "A")
    await next_event(stream)
    pending = await no_event(stream)
    rt.store.fail_next_appends()  # type: ignore[attr-defined]
    with pytest.raises(CoordinatorNotAvailableError):
        await rt.heartbeat(join("g", member_id="B"))  # rolled back: nothing happened
    for _ in range(50):
        await asyncio.sleep(0)
    assert not pending.done()
    assert [m.member_id for m in (await rt.describe_group("g")).members] == ["A"]
    pending.cancel()
    await rt.close()


@pytest.mark.parametrize("abort_when_closing", [True, False])
async def test_streams_end_when_the_coordinator_shuts_down(abort_when_closing: bool) -> None:
    rt, service, _t = await group_with_topic()
    await rt.heartbeat(join("g", member_id="A"))
    stream = watch(service, "A", abort_when_closing=abort_when_closing)
    await next_event(stream)
    pending = asyncio.ensure_future(anext(stream))
    rt.watchers.close()  # what ``kip848 serve`` does first when it stops
    async with asyncio.timeout(STEP_S):
        if abort_when_closing:
            with pytest.raises(ShuttingDown):
                await pending
        else:
            event = await pending
            assert event.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    await rt.close()


async def test_watchers_coalesce_notifications_and_unregister() -> None:
    watchers = GroupWatchers()
    with watchers.watch("g") as w1, watchers.watch("h") as w2:
        assert len(watchers) == 2
        watchers.notify(["g", "g", "x"])
        watchers.notify(["g"])
        async with asyncio.timeout(STEP_S):
            await w1.changed()  # once for the three notifications
        waiting = asyncio.ensure_future(w1.changed())
        await asyncio.sleep(0)
        assert not waiting.done()
        waiting.cancel()
        other = asyncio.ensure_future(w2.changed())
        await asyncio.sleep(0)
        assert not other.done()  # "h" was never notified
        watchers.close()
        async with asyncio.timeout(STEP_S):
            await other
        assert w1.closed and w2.closed
    assert len(watchers) == 0


async def test_a_stream_opened_while_the_hub_reads_gets_its_own_view() -> None:
    """Regression: a member subscribing during the hub's read was missing from that read and
    got UNKNOWN_MEMBER_ID; it must get its view from the next read instead."""
    rt, service, t = await group_with_topic()
    for member in ("A", "B"):
        await rt.heartbeat(join("g", member_id=member))
    gate = asyncio.Event()
    real = rt.member_views

    async def slow(group_id: str, member_ids: list[str]):  # type: ignore[no-untyped-def]
        await gate.wait()
        return await real(group_id, member_ids)

    rt.member_views = slow  # type: ignore[method-assign]
    stream_a = watch(service, "A")
    first_a = asyncio.ensure_future(anext(stream_a))
    for _ in range(5):
        await asyncio.sleep(0)  # the hub is now inside its read, for A only
    stream_b = watch(service, "B")
    first_b = asyncio.ensure_future(anext(stream_b))
    for _ in range(5):
        await asyncio.sleep(0)
    gate.set()
    async with asyncio.timeout(STEP_S):
        a, b = await first_a, await first_b
    assert (a.error_code, b.error_code) == (ErrorCode.NONE, ErrorCode.NONE)
    assert a.target == {t: frozenset({0, 1})} and b.target == {t: frozenset({2, 3})}
    for s in (stream_a, stream_b):
        await s.aclose()  # type: ignore[attr-defined]
    await rt.close()


async def test_with_batching_a_member_hears_its_share_when_the_interval_computes_it() -> None:
    """group.consumer.assignment.interval.ms (default 1 s): B's join only registers it (the
    group's target stays at epoch 1); the assignment timer computes the target and B's stream
    hears its share at once, without waiting for B's next heartbeat."""
    rt = await started_runtime(assignment_interval_ms=1_000)
    [topic] = await rt.create_topics([NewTopic(name="t", num_partitions=4)])
    t = topic.topic_id
    service = CoordinatorService(rt)
    a = await rt.heartbeat(join("g", member_id="A"))
    assert a.assignment is not None and a.assignment.assigned == {t: frozenset({0, 1, 2, 3})}
    b = await rt.heartbeat(join("g", member_id="B"))
    assert (b.member_epoch, b.assignment) == (1, HeartbeatAssignment(assigned={}, pending={}))
    stream_b = watch(service, "B")
    assert await next_event(stream_b) == WatchEvent(
        member_epoch=1, group_epoch=2, assignment_epoch=1, target={}, released={}
    )
    pending_b = await no_event(stream_b)
    await rt.advance_time(999)
    for _ in range(50):
        await asyncio.sleep(0)
    assert not pending_b.done()
    await rt.advance_time(1)
    async with asyncio.timeout(STEP_S):
        computed = await pending_b
    assert computed == WatchEvent(
        member_epoch=1,
        group_epoch=2,
        assignment_epoch=2,
        target={t: frozenset({2, 3})},
        released={},
    )
    await rt.close()
