"""A write of an earlier tenure that resolves after its partition was dropped
(coordinator/runtime/partitions.py, driver.py, timing.py): its timer operations were the
dropped state machine's, so they never reach the timer table, whether the write's outcome is
known before the partition is taken again at a newer epoch or after it was loaded there.

On PostgreSQL a take-over of the partition waits for the append holding its lease row
(``kip848_fence``), so the append commits first and the new tenure loads what it wrote; but
the node hears of that commit on its writer's connection, its take on the lease connection:
the writer's answer can come after the drop's purge of the partition's timers (a COMMIT
held up past the node's deadline: the usual case), or even after the reload (the COMMIT's
acknowledgement delayed, a retransmission on one connection). These tests play both
interleavings on the shared MemoryRecordStore the HA tests use: ``hold_appends`` holds an
append before it is written (and fenced), :class:`AckHold` after it is written, as
PostgreSQL's committed COMMIT whose answer has not reached the writer yet."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

import pytest
from builders import G as CG
from builders import beat, classic_join_req, classic_record, commit, join, make_runtime

from coordinator.core import codec
from coordinator.core.errors import NotCoordinatorError
from coordinator.core.timers import REBALANCE, SESSION
from coordinator.core.topics import NewTopic
from coordinator.routing import partition_for
from coordinator.runtime import CoordinatorRuntime, ManualClock
from coordinator.runtime.store import MemoryRecordStore, StoredRecord
from coordinator.runtime.timing import EXPIRE_OFFSETS
from legacy_bridge import messages as cm
from legacy_bridge.common import CLASSIC_SESSION, MIXED_JOIN

P = 4
G = "g"
GP = partition_for(G, P)
CP = partition_for(CG, P)
SESSION_MS = 45_000
HOUR_MS = 3_600_000


class AckHold:
    """The store writes each append at once (fence checked, records in the logs), then holds
    its return until :meth:`release`: PostgreSQL committed it, its acknowledgement has not
    reached the node's writer yet."""

    def __init__(self, store: MemoryRecordStore) -> None:
        self.written = threading.Event()
        self._released = threading.Event()
        self._append = store.append
        store.append = self._held  # type: ignore[method-assign]

    def _held(self, records: Sequence[StoredRecord], timestamp_ms: int, **kw: Any) -> Any:
        out = self._append(records, timestamp_ms, **kw)
        self.written.set()
        assert self._released.wait(10)
        return out

    def release(self) -> None:
        self._released.set()


async def leading(
    store: MemoryRecordStore, node_id: int, partition: int, epoch: int
) -> tuple[CoordinatorRuntime, Any]:
    rt = make_runtime(store)
    parts = rt.share_partitions(node_id)
    await rt.start()
    parts.joined()
    store.set_leader(partition, node_id, epoch)
    await parts.load_partition(partition, epoch)
    return rt, parts


def timers_of(rt: CoordinatorRuntime, group: str, partition: int) -> dict[Any, tuple[int, int]]:
    """The group's timers and its partition's offset expiration: key -> (deadline, payload)."""
    return {
        k: rt.timers.get(k)
        for k in rt.timers.keys()  # noqa: SIM118 - a TimerTable
        if k[1] == group or k == (EXPIRE_OFFSETS, "", str(partition))
    }


async def fresh_timers(
    store: MemoryRecordStore, now_ms: int, group: str, partition: int
) -> dict[Any, tuple[int, int]]:
    """The timers a node that never led the partition arms for the group when it loads
    ``store`` at ``now_ms`` (manual clock)."""
    rt = make_runtime(MemoryRecordStore(_data=store._data))
    parts = rt.share_partitions(9)
    await rt.start()
    parts.joined()
    assert isinstance(rt.clock, ManualClock)
    rt.clock.advance(now_ms - rt.clock.now_ms())
    await parts.load_partition(partition, store._data.leaders[partition][1])
    try:
        return timers_of(rt, group, partition)
    finally:
        await rt.close()


async def test_a_write_acknowledged_after_the_reload_keeps_the_new_tenures_sessions() -> None:
    """Member b joins; its join's append commits in the store but its acknowledgement is late.
    Meanwhile the node's deadline passes (the partition dropped, the join answered
    NOT_COORDINATOR), and an hour later the node takes the partition again (epoch 2) and loads
    it: the join is there, and both members get a full session from the load (Kafka's
    onLoaded). Then the old append's acknowledgement arrives. The timers must stay the new
    tenure's — those a fresh node loading the store arms — and b, heartbeating within its
    session, must not be expired (before: the acknowledgement armed b's session of the old
    tenure again, an hour overdue, and the next timer step expired b in the new tenure)."""
    shared = MemoryRecordStore(partitions=P)
    rt, parts = await leading(shared, 1, GP, 1)
    assert isinstance(rt.clock, ManualClock)
    await rt.create_topics([NewTopic(name="t", num_partitions=2)])
    a = await rt.heartbeat(join(G, member_id="a"))
    hold = AckHold(shared)
    joining = asyncio.ensure_future(rt.heartbeat(join(G, member_id="b")))
    assert await asyncio.to_thread(hold.written.wait, 5)
    parts.lose_partition(GP)  # the node's deadline passed
    with pytest.raises(NotCoordinatorError):
        await asyncio.wait_for(joining, 1)

    rt.clock.advance(HOUR_MS)
    shared.set_leader(GP, 1, 2)  # the take waited for the append: it committed first
    await parts.load_partition(GP, 2)
    now = rt.clock.now_ms()
    expected = await fresh_timers(shared, now, G, GP)
    assert expected[(SESSION, G, "a")][0] == expected[(SESSION, G, "b")][0] == now + SESSION_MS
    assert timers_of(rt, G, GP) == expected
    hold.release()  # the old tenure's write is acknowledged now
    for _ in range(20):
        await asyncio.sleep(0.005)
    assert timers_of(rt, G, GP) == expected

    await rt.advance_time(SESSION_MS - 1)  # fires what is due by then: nothing of the group
    assert (await rt.heartbeat(beat(G, "b", 2))).member_epoch == 2  # its join's epoch
    assert (await rt.heartbeat(beat(G, "a", a.member_epoch))).member_epoch == a.member_epoch
    await rt.close()


async def test_a_write_acknowledged_between_the_drop_and_the_reload_leaves_no_timer_behind() -> (
    None
):
    """A classic group (A and B, Stable) on the partition: a commit's append is held up in the
    store, and A's rejoin, which writes nothing, starts a rebalance behind it (its timers wait
    for that append). The node's deadline passes: the partition is dropped and its timers
    purged. Then the append lands (under epoch 1, still the store's) and its acknowledgement
    reaches the node, and the node takes the partition again and loads it. Its timers must be
    those a fresh node arms for the stored group — the members' sessions — not the rebalance
    of the dropped tenure (before: its join timer, armed by the acknowledgement after the
    purge, survived into the new tenure and fired there)."""
    shared = MemoryRecordStore(partitions=P)
    key, value = codec.encode(classic_record())
    shared.append([StoredRecord(key, value, CG)], 1)
    rt, parts = await leading(shared, 1, CP, 1)
    await rt.create_topics([NewTopic(name="t", num_partitions=1)])
    shared.hold_appends()
    committing = asyncio.ensure_future(rt.offset_commit(commit(CG, {("t", 0): 7}, 5, "A")))
    await asyncio.sleep(0.05)
    rejoin_a = asyncio.ensure_future(rt.classic_join(classic_join_req("A")))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not rejoin_a.done()  # waits for B at the barrier
    parts.lose_partition(CP)
    with pytest.raises(NotCoordinatorError):
        await asyncio.wait_for(rejoin_a, 1)
    with pytest.raises(NotCoordinatorError):
        await asyncio.wait_for(committing, 1)
    for _ in range(5):
        await asyncio.sleep(0)  # the purge
    assert timers_of(rt, CG, CP) == {}
    shared.release_appends()
    for _ in range(20):
        await asyncio.sleep(0.005)
    assert [e.leader_epoch for e in shared.journal(CP)][-1] == 1  # the commit landed
    assert timers_of(rt, CG, CP) == {}  # nothing of the dropped tenure armed

    shared.set_leader(CP, 1, 2)
    await parts.load_partition(CP, 2)
    expected = await fresh_timers(shared, rt.clock.now_ms(), CG, CP)
    assert sorted(k for k in expected if k[1] == CG) == [
        (CLASSIC_SESSION, CG, "A"),
        (CLASSIC_SESSION, CG, "B"),
    ]
    assert timers_of(rt, CG, CP) == expected
    await rt.close()


async def test_a_dropped_partitions_timer_operations_in_a_failed_write_are_dropped_too() -> None:
    """The same held append fenced off instead (another node took the partition at epoch 2):
    nothing of it is written, nothing of its timers comes back at this node, and the other
    partition's timers in it (still led here) are put back as a failed write leaves them."""
    shared = MemoryRecordStore(partitions=P)
    rt, parts = await leading(shared, 1, GP, 1)
    h = next(f"h{i}" for i in range(100) if partition_for(f"h{i}", P) != GP)
    hp = partition_for(h, P)
    shared.set_leader(hp, 1, 1)
    await parts.load_partition(hp, 1)
    await rt.create_topics([NewTopic(name="t", num_partitions=2)])
    await rt.heartbeat(join(G, member_id="a"))
    await rt.heartbeat(join(h, member_id="x"))
    h_before = timers_of(rt, h, hp)
    shared.hold_appends()
    joining = [
        asyncio.ensure_future(rt.heartbeat(join(group, member_id=m)))
        for group, m in ((G, "b"), (h, "y"))
    ]
    await asyncio.sleep(0.05)
    parts.lose_partition(GP)
    for _ in range(5):
        await asyncio.sleep(0)
    shared.set_leader(GP, 2, 2)  # taken by another node
    shared.release_appends()
    results = await asyncio.gather(*joining, return_exceptions=True)
    assert isinstance(results[0], NotCoordinatorError)
    assert isinstance(results[1], Exception)  # retriable: the batch was fenced off
    assert timers_of(rt, G, GP) == {}
    assert timers_of(rt, h, hp) == h_before
    assert (REBALANCE, G, "a") not in rt.timers.keys()  # noqa: SIM118 - a TimerTable
    await rt.close()


async def test_a_timer_whose_write_failed_after_the_reload_is_not_retried_there() -> None:
    """A consumer group upgraded from a classic one (A and B classic members, K a KIP-848 one):
    A and B are told to rejoin, each within its rebalance timeout (a timer). They do not, the
    timers fire and fence both; the append of that is held up in the store while the node's
    deadline passes, the partition is dropped, taken again at epoch 2 and loaded (A and B
    members still, each with a full session, no rejoin timer: as a fresh node loads them), and
    then the append is refused as epoch 1's. A failed timer is retried 500 ms later, as Kafka
    retries a failed timer write — but not into the new tenure: its state machine armed what
    it needs (before: both rejoin timers came back and fenced A and B half a second after the
    load)."""
    shared = MemoryRecordStore(partitions=P)
    key, value = codec.encode(classic_record())  # A and B, generation 5, topic foo
    shared.append([StoredRecord(key, value, CG)], 1)
    rt, parts = await leading(shared, 1, CP, 1)
    assert isinstance(rt.clock, ManualClock)
    await rt.create_topics([NewTopic(name="foo", num_partitions=4)])
    k = await rt.heartbeat(join(CG, ("foo",), member_id="K"))  # the upgrade

    async def classic_beats() -> list[int]:
        return [
            (
                await rt.classic_heartbeat(
                    cm.Heartbeat(group_id=CG, generation_id=5, member_id=member)
                )
            ).error_code
            for member in ("A", "B")
        ]

    assert await classic_beats() == [27, 27]  # REBALANCE_IN_PROGRESS: rejoin within 60 s
    assert {k[0] for k in timers_of(rt, CG, CP)} >= {MIXED_JOIN}
    await rt.advance_time(40_000)
    assert await classic_beats() == [27, 27]  # their sessions go on; they do not rejoin
    await rt.heartbeat(beat(CG, "K", k.member_epoch))
    shared.hold_appends()
    now = rt.clock.advance(20_000)
    fired = []
    while (due := rt.timers.pop_due(now)) is not None:
        fired.append(due.key)
        rt.driver.fire(due, now)
    assert fired == [(MIXED_JOIN, CG, "A"), (MIXED_JOIN, CG, "B")]
    await asyncio.sleep(0.05)  # the append of the fencing, held
    parts.lose_partition(CP)  # the node's deadline passed
    for _ in range(5):
        await asyncio.sleep(0)
    shared.set_leader(CP, 1, 2)
    await parts.load_partition(CP, 2)
    shared.release_appends()  # refused: written under epoch 1
    for _ in range(20):
        await asyncio.sleep(0.005)
    expected = await fresh_timers(shared, rt.clock.now_ms(), CG, CP)
    assert MIXED_JOIN not in {k[0] for k in expected}
    assert timers_of(rt, CG, CP) == expected
    await rt.advance_time(1_000)
    assert await classic_beats() == [27, 27]  # members still, told to rejoin again
    await rt.close()
