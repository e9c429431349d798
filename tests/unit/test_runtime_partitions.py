"""The runtime's side of a node among several (coordinator/runtime/partitions.py,
leadership.py), in-process on a shared MemoryRecordStore whose lease table the tests set
(``set_leader``): what a node serves, when, and what it writes under which epoch."""

from __future__ import annotations

import asyncio
import time

import pytest
from builders import beat, commit, join, make_runtime

from coordinator.core.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    NotCoordinatorError,
)
from coordinator.core.offsets import OffsetFetchGroup
from coordinator.core.timers import ArmTimer, TimerTable
from coordinator.core.topics import NewTopic
from coordinator.routing import partition_for
from coordinator.runtime import CoordinatorRuntime
from coordinator.runtime.store import MemoryRecordStore

P = 4
G = "g"
GP = partition_for(G, P)


async def node(store: MemoryRecordStore, node_id: int) -> tuple[CoordinatorRuntime, object]:
    rt = make_runtime(store)
    partitions = rt.share_partitions(node_id)
    await rt.start()
    return rt, partitions


async def fetched(rt: CoordinatorRuntime, group: str) -> dict[tuple[str, int], int]:
    (answer,) = await rt.offset_fetch([OffsetFetchGroup(group_id=group)])
    return {
        (t.name, p.partition_index): p.committed_offset for t in answer.topics for p in t.partitions
    }


async def test_a_node_serves_what_it_loaded_and_stops_when_fenced_off() -> None:
    shared = MemoryRecordStore(partitions=P)
    rt, parts = await node(shared, 1)
    # Joining: everything, the topic registry included, is loading.
    with pytest.raises(CoordinatorLoadInProgressError):
        await rt.create_topics([NewTopic(name="t", num_partitions=2)])
    parts.joined()
    await rt.create_topics([NewTopic(name="t", num_partitions=2)])
    with pytest.raises(NotCoordinatorError, match=f"does not lead coordinator partition {GP}"):
        await rt.heartbeat(join(G))

    shared.set_leader(GP, 1, 3)
    await parts.load_partition(GP, 3)
    joined = await rt.heartbeat(join(G, member_id="m1"))
    assert joined.member_epoch == 1
    await rt.offset_commit(commit(G, {("t", 0): 42}, joined.member_epoch, "m1"))
    assert await fetched(rt, G) == {("t", 0): 42}
    assert [e.leader_epoch for e in shared.journal(GP)] == [3] * len(list(shared.journal(GP)))
    assert any(k[1] == G for k in rt.timers.keys())  # noqa: SIM118 - a TimerTable  # its session timer

    # Another node took the partition over (epoch 4): the next write is refused, nothing of it
    # written, and the partition dropped at once, its timers with it.
    fenced: list[int] = []
    parts.on_fenced = fenced.append
    shared.set_leader(GP, 2, 4)
    before = len(list(shared.journal(GP)))
    with pytest.raises(CoordinatorNotAvailableError, match="no longer leads partitions"):
        await rt.offset_commit(commit(G, {("t", 0): 43}, joined.member_epoch, "m1"))
    assert len(list(shared.journal(GP))) == before
    assert fenced == [GP]
    with pytest.raises(NotCoordinatorError):
        await rt.heartbeat(beat(G, "m1", 1))
    await asyncio.sleep(0)  # the timers are purged in the next loop step
    assert not any(k[1] == G for k in rt.timers.keys())  # noqa: SIM118 - a TimerTable

    # The new leader loads what was acknowledged, the member with a full session.
    rt2, parts2 = await node(MemoryRecordStore(_data=shared._data), 2)
    parts2.joined()
    await parts2.load_partition(GP, 4)
    assert await fetched(rt2, G) == {("t", 0): 42}
    again = await rt2.heartbeat(beat(G, "m1", 1))
    assert again.member_epoch == 1
    await rt.close()
    await rt2.close()


async def test_a_node_past_its_deadline_refuses_what_it_serves() -> None:
    shared = MemoryRecordStore(partitions=P)
    rt, parts = await node(shared, 1)
    parts.joined()
    shared.set_leader(GP, 1, 1)
    await parts.load_partition(GP, 1)
    await rt.create_topics([NewTopic(name="t", num_partitions=1)])
    parts.serve_until(time.monotonic() + 60)
    assert (await rt.heartbeat(join(G))).member_epoch == 1
    parts.serve_until(time.monotonic() - 0.001)  # its lease may have expired
    with pytest.raises(NotCoordinatorError, match="may have expired"):
        await rt.heartbeat(join(G))
    await rt.close()


async def test_unloading_waits_for_the_partitions_writes_and_ends_its_watchers() -> None:
    shared = MemoryRecordStore(partitions=P)
    rt, parts = await node(shared, 1)
    parts.joined()
    shared.set_leader(GP, 1, 1)
    await parts.load_partition(GP, 1)
    await rt.create_topics([NewTopic(name="t", num_partitions=1)])
    joined = await rt.heartbeat(join(G, member_id="m1"))
    with rt.watchers.watch(G) as watch:
        shared.hold_appends()
        writing = asyncio.ensure_future(
            rt.offset_commit(commit(G, {("t", 0): 7}, joined.member_epoch, "m1"))
        )
        await asyncio.sleep(0.01)
        unloading = asyncio.ensure_future(parts.unload_partition(GP))
        await asyncio.sleep(0.01)
        with pytest.raises(NotCoordinatorError):  # new requests: at once
            await rt.heartbeat(beat(G, "m1", 1))
        assert not unloading.done()  # the write in flight finishes first
        shared.release_appends()
        await writing
        await unloading
        await asyncio.wait_for(watch.changed(), 1)  # the push stream looks again
    assert [e.key for e in shared.journal(GP)][-1].startswith(b"[1,")  # the commit, written
    await rt.close()


def test_timer_table_shift_and_cancel_where() -> None:
    table = TimerTable()
    table.apply([ArmTimer(("session", f"g{i}", "m"), 100 + i, i) for i in range(10)])
    assert table.shift(1000) == 10
    assert table.next_deadline() == 1100
    assert table.cancel_where(lambda key: int(key[1][1:]) % 2 == 0) == 5
    assert table.pop_due(1100) is None  # g0 was cancelled
    due = table.pop_due(1101)
    assert due is not None and (due.key, due.deadline_ms, due.payload) == (
        ("session", "g1", "m"),
        1101,
        1,
    )
    assert [k[1] for k in table.keys()] == ["g3", "g5", "g7", "g9"]  # noqa: SIM118
