"""The runtime's side of a node among several (coordinator/runtime/partitions.py,
leadership.py), in-process on a shared MemoryRecordStore whose lease table the tests set
(``set_leader``): what a node serves, when, and what it writes under which epoch."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import weakref
from typing import Any

import pytest
from builders import G as CG
from builders import beat, classic_join_req, classic_record, commit, join, make_runtime

from assignors.uniform import UniformAssignor
from coordinator.core import codec
from coordinator.core.commands import SequentialIds
from coordinator.core.config import parse_config
from coordinator.core.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    NotCoordinatorError,
)
from coordinator.core.offsets import OffsetFetchGroup
from coordinator.core.timers import REBALANCE, SESSION, ArmTimer, DueTimer, TimerTable
from coordinator.core.topics import NewTopic
from coordinator.routing import partition_for
from coordinator.runtime import CoordinatorRuntime, ManualClock, SystemClock, timing
from coordinator.runtime import partitions as partitions_module
from coordinator.runtime.collector import Collector
from coordinator.runtime.leadership import PartitionState
from coordinator.runtime.loader import load_partition
from coordinator.runtime.store import MemoryRecordStore, StoredRecord
from coordinator.runtime.timing import EXPIRE_OFFSETS
from legacy_bridge.common import CLASSIC_SESSION

P = 4
G = "g"
GP = partition_for(G, P)
CP = partition_for(CG, P)
SESSION_MS = 45_000  # group.consumer.session.timeout.ms, Kafka's default


async def node(store: MemoryRecordStore, node_id: int) -> tuple[CoordinatorRuntime, object]:
    rt = make_runtime(store)
    partitions = rt.share_partitions(node_id)
    await rt.start()
    return rt, partitions


async def leading(
    store: MemoryRecordStore, node_id: int, partition: int, epoch: int
) -> tuple[CoordinatorRuntime, object]:
    """Node ``node_id`` on ``store`` (a handle of the shared store), joined, leading
    ``partition`` at ``epoch``: loaded and serving it."""
    rt, parts = await node(store, node_id)
    parts.joined()
    store.set_leader(partition, node_id, epoch)
    await parts.load_partition(partition, epoch)
    return rt, parts


async def leading_two(
    shared: MemoryRecordStore,
) -> tuple[CoordinatorRuntime, object, str, int]:
    """Node 1 leading ``GP`` and another partition (epoch 1 each), topic ``t`` created: the
    runtime, its partitions, a group of the other partition and that partition."""
    rt, parts = await leading(shared, 1, GP, 1)
    h = next(f"h{i}" for i in range(100) if partition_for(f"h{i}", P) != GP)
    hp = partition_for(h, P)
    shared.set_leader(hp, 1, 1)
    await parts.load_partition(hp, 1)
    await rt.create_topics([NewTopic(name="t", num_partitions=1)])
    return rt, parts, h, hp


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
    assert rt.partition_loads == {}
    await parts.load_partition(GP, 3)
    assert list(rt.partition_loads) == [GP]  # its metrics: the partitions served here
    joined = await rt.heartbeat(join(G, member_id="m1"))
    assert joined.member_epoch == 1
    await rt.offset_commit(commit(G, {("t", 0): 42}, joined.member_epoch, "m1"))
    assert await fetched(rt, G) == {("t", 0): 42}
    assert [e.leader_epoch for e in shared.journal(GP)] == [3] * len(list(shared.journal(GP)))
    assert any(k[1] == G for k in rt.timers.keys())  # noqa: SIM118 - a TimerTable  # its session timer

    # Another node took the partition over (epoch 4): the next write is refused, nothing of it
    # written, and the partition dropped at once, its timers with it; a push stream of the
    # group looks again and is told NOT_COORDINATOR.
    fenced: list[int] = []
    parts.on_fenced = fenced.append
    shared.set_leader(GP, 2, 4)
    before = len(list(shared.journal(GP)))
    with rt.watchers.watch(G) as watch:
        with pytest.raises(NotCoordinatorError, match=f"partition {GP} was taken over"):
            await rt.offset_commit(commit(G, {("t", 0): 43}, joined.member_epoch, "m1"))
        await asyncio.wait_for(watch.changed(), 1)
        with pytest.raises(NotCoordinatorError):
            await rt.member_views(G, ["m1"])
    assert len(list(shared.journal(GP))) == before
    assert fenced == [GP]
    assert rt.partition_loads == {}
    with pytest.raises(NotCoordinatorError):
        await rt.heartbeat(beat(G, "m1", 1))
    await asyncio.sleep(0)  # the timers are purged in the next loop step
    assert not any(k[1] == G for k in rt.timers.keys())  # noqa: SIM118 - a TimerTable

    # The new leader loads what was acknowledged, the member with a full session.
    rt2, _ = await leading(MemoryRecordStore(_data=shared._data), 2, GP, 4)
    assert await fetched(rt2, G) == {("t", 0): 42}
    again = await rt2.heartbeat(beat(G, "m1", 1))
    assert again.member_epoch == 1
    await rt.close()
    await rt2.close()


async def test_each_partition_answers_by_its_state_on_this_node() -> None:
    """A group's requests on a node: served where its partition serves, LOAD_IN_PROGRESS while
    it loads, NOT_COORDINATOR while it is handed over or led elsewhere — reads and writes
    alike, the other partitions unaffected."""
    shared = MemoryRecordStore(partitions=P)
    other = next(g for g in (f"o{i}" for i in range(100)) if partition_for(g, P) != GP)
    rt, parts = await leading(shared, 1, GP, 1)
    shared.set_leader(partition_for(other, P), 1, 1)
    await parts.load_partition(partition_for(other, P), 1)
    await rt.create_topics([NewTopic(name="t", num_partitions=1)])
    epochs = []
    errors = {
        PartitionState.LOADING: CoordinatorLoadInProgressError,
        PartitionState.UNLOADING: NotCoordinatorError,
        PartitionState.NOT_LED: NotCoordinatorError,
    }
    for state, error in errors.items():
        parts.lead.set(GP, state, 1)
        with pytest.raises(error, match=f"partition {GP}"):
            await rt.heartbeat(join(G))
        (fetch,) = await rt.offset_fetch([OffsetFetchGroup(group_id=G)])  # per group
        assert fetch.error_code == error.code and f"partition {GP}" in str(fetch.error_message)
        with pytest.raises(error, match=f"partition {GP}"):
            await rt.describe_group(G)
        epochs.append((await rt.heartbeat(join(other))).member_epoch)
    assert epochs == [1, 2, 3]  # a member joining the other partition's group each time
    parts.lead.set(GP, PartitionState.SERVING, 1)
    assert (await rt.heartbeat(join(G))).member_epoch == 1
    await rt.close()


async def test_a_node_past_its_deadline_refuses_what_it_serves() -> None:
    shared = MemoryRecordStore(partitions=P)
    rt, parts = await leading(shared, 1, GP, 1)
    await rt.create_topics([NewTopic(name="t", num_partitions=1)])
    parts.serve_until(time.monotonic() + 60)
    assert (await rt.heartbeat(join(G))).member_epoch == 1
    parts.serve_until(time.monotonic() - 0.001)  # its lease may have expired
    with pytest.raises(NotCoordinatorError, match="may have expired"):
        await rt.heartbeat(join(G))
    await rt.close()


async def test_unloading_waits_for_the_partitions_writes_and_ends_its_watchers() -> None:
    shared = MemoryRecordStore(partitions=P)
    rt, parts = await leading(shared, 1, GP, 1)
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


async def test_a_hand_over_cut_short_by_a_drop_leaves_the_partition_taken_again_alone() -> None:
    """A hand-over waits for a write held up in the store (a COMMIT waiting for PostgreSQL to
    learn its outcome, or for a synchronous standby) when the node's deadline passes: the
    partition is dropped, the hand-over ends with the drop (not when the write resolves), and
    the partition taken again by this node at a newer epoch and loaded meanwhile is not dropped
    when the old write finally resolves: it serves (before, the late end of the hand-over
    dropped it while the node held its lease: NOT_COORDINATOR from its leader for good)."""
    shared = MemoryRecordStore(partitions=P)
    rt, parts = await leading(shared, 1, GP, 1)
    await rt.create_topics([NewTopic(name="t", num_partitions=1)])
    joined = await rt.heartbeat(join(G, member_id="m1"))
    shared.hold_appends()
    writing = asyncio.ensure_future(
        rt.offset_commit(commit(G, {("t", 0): 7}, joined.member_epoch, "m1"))
    )
    await asyncio.sleep(0.05)
    unloading = asyncio.ensure_future(parts.unload_partition(GP))
    await asyncio.sleep(0.05)
    assert not unloading.done()  # the write in flight first
    parts.lose_partition(GP)  # the node's deadline passed
    await asyncio.wait_for(unloading, 1)  # the drop ended the hand-over
    with pytest.raises(NotCoordinatorError):
        await asyncio.wait_for(writing, 1)
    shared.set_leader(GP, 1, 2)  # taken again by this node
    await parts.load_partition(GP, 2)
    shared.release_appends()
    await asyncio.sleep(0.05)
    assert parts.lead.states[GP] is PartitionState.SERVING
    assert parts.lead.epochs[GP] == 2
    again = await rt.heartbeat(beat(G, "m1", joined.member_epoch))
    assert again.member_epoch == joined.member_epoch
    await rt.close()


async def test_a_dropped_partitions_queued_records_are_never_written_under_a_newer_epoch() -> None:
    """Records of a partition waiting in the next batch (behind an append held up in the store)
    when the partition is dropped were made by the state machine dropped with it: its requests
    were answered NOT_COORDINATOR. Taken again by this node at a newer epoch and loaded before
    that batch goes out, the partition's new state does not hold them, so the batch must not
    write them under the new epoch: it is refused as the earlier epoch's (the other partition's
    request in it fails retriably and succeeds when sent again), and what this node serves is
    what the store holds (before, the stale commit was written under epoch 2: the next leader
    would load an offset this node never served and its client was told was not written)."""
    shared = MemoryRecordStore(partitions=P)
    rt, parts, h, hp = await leading_two(shared)
    await rt.offset_commit(commit(G, {("t", 0): 3}))
    shared.hold_appends()
    held = asyncio.ensure_future(rt.offset_commit(commit(h, {("t", 0): 1})))  # hp only
    await asyncio.sleep(0.05)
    queued = [
        asyncio.ensure_future(rt.offset_commit(commit(group, {("t", 0): offset})))
        for group, offset in ((G, 5), (h, 2))
    ]
    await asyncio.sleep(0.05)
    assert not held.done() and not any(q.done() for q in queued)
    parts.lose_partition(GP)  # its deadline passed
    with pytest.raises(NotCoordinatorError):
        await asyncio.wait_for(queued[0], 1)
    shared.set_leader(GP, 1, 2)  # taken again by this node
    await parts.load_partition(GP, 2)
    shared.release_appends()
    await asyncio.wait_for(held, 1)
    with pytest.raises(CoordinatorNotAvailableError):
        await asyncio.wait_for(queued[1], 1)
    assert parts.lead.states[GP] is PartitionState.SERVING  # refused as epoch 1's, kept
    assert await fetched(rt, G) == {("t", 0): 3}
    assert [e.leader_epoch for e in shared.journal(GP)] == [1]  # nothing under epoch 2
    fresh, _ = await leading(MemoryRecordStore(_data=shared._data), 2, GP, 3)
    assert await fetched(fresh, G) == {("t", 0): 3}  # the next leader loads what was served
    answer = await rt.offset_commit(commit(h, {("t", 0): 2}))
    assert [p.error_code for t in answer.topics for p in t.partitions] == [0]
    assert await fetched(rt, h) == {("t", 0): 2}
    await rt.close()
    await fresh.close()


async def test_a_dropped_partitions_requests_waiting_for_a_write_are_answered_at_once() -> None:
    """An append held up in the store (a COMMIT whose connection was lost waits for PostgreSQL
    to come back to learn its outcome) when the node drops a partition (its lease ran out):
    the requests of that partition waiting for the append get NOT_COORDINATOR at the drop, as
    Kafka's unload fails its pending writes, not when the append resolves (seconds later,
    past the clients' request timeouts). Another partition's requests in the same append wait
    for it and are acknowledged."""
    shared = MemoryRecordStore(partitions=P)
    rt, parts, h, hp = await leading_two(shared)
    g_epoch = (await rt.heartbeat(join(G, member_id="m1"))).member_epoch
    h_epoch = (await rt.heartbeat(join(h, member_id="m2"))).member_epoch
    shared.hold_appends()
    writing = [
        asyncio.ensure_future(rt.offset_commit(commit(group, {("t", 0): 7}, epoch, member)))
        for group, epoch, member in ((G, g_epoch, "m1"), (h, h_epoch, "m2"))
    ]
    await asyncio.sleep(0.05)
    assert not any(w.done() for w in writing)  # both wait for the held append
    parts.lose_partition(GP)  # as when the node's deadline passes
    with pytest.raises(NotCoordinatorError, match=f"partition {GP} moved away"):
        await asyncio.wait_for(writing[0], 1)
    await asyncio.sleep(0.05)
    assert not writing[1].done()  # still led here: answered once durable
    shared.release_appends()
    assert [t.partitions[0].error_code for t in (await writing[1]).topics] == [0]
    assert await fetched(rt, h) == {("t", 0): 7}
    (answer,) = await rt.offset_fetch([OffsetFetchGroup(group_id=G)])
    assert answer.error_code == NotCoordinatorError.code
    await rt.close()


async def test_a_write_fenced_off_answers_its_partitions_requests_not_coordinator() -> None:
    """One append carries the commits of two partitions; while it is held up another node
    takes one of them over (its lease at a higher epoch). The append is fenced off, nothing of
    it written: the taken-over partition's commit is answered NOT_COORDINATOR (its leadership
    moved: the client finds the new leader at once, as Kafka's coordinator answers a write
    whose partition's leader changed), the other partition's COORDINATOR_NOT_AVAILABLE (still
    led here: retried here, and then acknowledged)."""
    shared = MemoryRecordStore(partitions=P)
    rt, parts, h, hp = await leading_two(shared)
    shared.hold_appends()
    writing = [
        asyncio.ensure_future(rt.offset_commit(commit(group, {("t", 0): 7}))) for group in (G, h)
    ]
    await asyncio.sleep(0.05)
    assert not any(w.done() for w in writing)  # both wait for the held append
    shared.set_leader(GP, 2, 2)  # taken over meanwhile
    shared.release_appends()
    with pytest.raises(NotCoordinatorError) as taken:
        await asyncio.wait_for(writing[0], 1)
    assert taken.value.code == 16
    assert str(taken.value) == (
        f"This node's lease of coordinator partition {GP} was taken over by another node "
        "before the write landed (nothing of it was written): ask FindCoordinator again."
    )
    with pytest.raises(CoordinatorNotAvailableError, match="no longer leads partitions"):
        await asyncio.wait_for(writing[1], 1)
    assert parts.lead.states[GP] is PartitionState.NOT_LED
    assert list(shared.journal(GP)) == [] and list(shared.journal(hp)) == []
    answer = await rt.offset_commit(commit(h, {("t", 0): 8}))
    assert [p.error_code for t in answer.topics for p in t.partitions] == [0]
    assert await fetched(rt, h) == {("t", 0): 8}
    (fetch_g,) = await rt.offset_fetch([OffsetFetchGroup(group_id=G)])
    assert fetch_g.error_code == NotCoordinatorError.code
    await rt.close()


async def test_a_dropped_partitions_reads_waiting_for_a_write_are_answered_at_once() -> None:
    """The same for a request that waits for the held append without writing itself (a
    stable OffsetFetch behind a commit): answered NOT_COORDINATOR at the drop, per group."""
    shared = MemoryRecordStore(partitions=P)
    rt, parts = await leading(shared, 1, GP, 1)
    await rt.create_topics([NewTopic(name="t", num_partitions=1)])
    shared.hold_appends()
    writing = asyncio.ensure_future(rt.offset_commit(commit(G, {("t", 0): 7})))
    await asyncio.sleep(0.05)
    reading = asyncio.ensure_future(
        rt.offset_fetch([OffsetFetchGroup(group_id=G, require_stable=True)])
    )
    await asyncio.sleep(0.05)
    assert not writing.done() and not reading.done()  # both wait for the held append
    parts.lose_partition(GP)
    (answer,) = await asyncio.wait_for(reading, 1)
    assert answer.error_code == NotCoordinatorError.code
    with pytest.raises(NotCoordinatorError):
        await asyncio.wait_for(writing, 1)
    shared.release_appends()
    await rt.close()


async def test_a_classic_join_in_progress_fails_retriably_and_completes_at_the_new_leader() -> None:
    """A classic rebalance under way when its partition is handed over: the join waiting at
    the barrier is answered NOT_COORDINATOR (retriable: the client finds the new leader), and
    the members' joins complete the rebalance there, their sessions restarted by the load."""
    shared = MemoryRecordStore(partitions=P)
    key, value = codec.encode(classic_record())  # a Stable classic group: A and B, generation 5
    shared.append([StoredRecord(key, value, CG)], 1)
    rt, parts = await leading(shared, 1, CP, 1)
    rejoin_a = asyncio.ensure_future(rt.classic_join(classic_join_req("A")))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not rejoin_a.done()  # the leader's rejoin waits for B at the barrier
    await parts.unload_partition(CP)
    with pytest.raises(NotCoordinatorError, match=f"partition {CP} moved away"):
        await asyncio.wait_for(rejoin_a, 1)

    rt2, _ = await leading(MemoryRecordStore(_data=shared._data), 2, CP, 2)
    assert sorted(k for k in rt2.timers.keys() if k[1] == CG) == [  # noqa: SIM118 - a TimerTable
        (CLASSIC_SESSION, CG, "A"),
        (CLASSIC_SESSION, CG, "B"),
    ]
    rejoin_a = asyncio.ensure_future(rt2.classic_join(classic_join_req("A")))
    for _ in range(5):
        await asyncio.sleep(0)
    joined_b = await rt2.classic_join(classic_join_req("B"))
    joined_a = await asyncio.wait_for(rejoin_a, 5)
    assert (joined_a.error_code, joined_b.error_code) == (0, 0)
    assert (joined_a.generation_id, joined_b.generation_id, joined_a.leader) == (6, 6, "A")
    await rt.close()
    await rt2.close()


async def test_the_new_leader_restarts_sessions_and_rearms_rebalance_timeouts() -> None:
    """A member revoking a partition when its coordinator partition fails over: the new
    leader gives every member a full session and the revoking member its rebalance timeout
    again (Kafka's onLoaded), so the members carry on without being fenced."""
    shared = MemoryRecordStore(partitions=P)
    rt, parts = await leading(shared, 1, GP, 1)
    await rt.create_topics([NewTopic(name="t", num_partitions=2)])
    a = await rt.heartbeat(join(G, member_id="a"))
    assert a.assignment is not None
    owned = a.assignment.assigned
    assert sum(map(len, owned.values())) == 2
    await rt.heartbeat(beat(G, "a", a.member_epoch, owned=owned))
    b = await rt.heartbeat(join(G, member_id="b"))
    revoking = await rt.heartbeat(beat(G, "a", a.member_epoch, owned=owned))
    assert revoking.assignment is not None
    assert sum(map(len, revoking.assignment.assigned.values())) == 1  # one to give up
    assert rt.timers.get((REBALANCE, G, "a")) is not None

    # Node 1 stops (its lease ran out), node 2 takes the partition an hour later.
    parts.lose_partition(GP)
    shared.set_leader(GP, 2, 2)
    rt2, parts2 = await node(MemoryRecordStore(_data=shared._data), 2)
    assert isinstance(rt2.clock, ManualClock)
    rt2.clock.advance(3_600_000)
    parts2.joined()
    await parts2.load_partition(GP, 2)
    now = rt2.clock.now_ms()
    deadlines = {k: rt2.timers.get(k)[0] for k in rt2.timers.keys() if k[1] == G}  # noqa: SIM118
    assert deadlines == {
        (SESSION, G, "a"): now + SESSION_MS,
        (SESSION, G, "b"): now + SESSION_MS,
        (REBALANCE, G, "a"): now + 30_000,
    }
    # Both members carry on at the new leader: a revokes, b gets the partition.
    owned_a = revoking.assignment.assigned
    again = await rt2.heartbeat(beat(G, "a", revoking.member_epoch, owned=owned_a))
    assert again.member_epoch == 2
    got_b = await rt2.heartbeat(beat(G, "b", b.member_epoch, owned={}))
    assert got_b.assignment is not None and sum(map(len, got_b.assignment.assigned.values())) == 1
    await rt.close()
    await rt2.close()


async def test_a_loaded_partitions_sessions_restart_in_timer_time() -> None:
    """On the system clock, the sessions restarted by a load run on the monotonic clock
    (timer time), a full session from the load, even when the wall clock is far from it."""
    store = MemoryRecordStore(partitions=P)
    first, _ = await leading(store, 1, GP, 1)
    await first.create_topics([NewTopic(name="t", num_partitions=1)])
    for m in ("m1", "m2"):
        await first.heartbeat(join(G, member_id=m))
    await first.close()

    wall = SystemClock(wall_ms=lambda: time.time_ns() // 1_000_000 + 3_600_000)
    rt = CoordinatorRuntime(
        config=parse_config({"offsets.topic.num.partitions": str(P)}),
        store=MemoryRecordStore(_data=store._data),
        clock=wall,
        ids=SequentialIds(),
        assignors=[UniformAssignor()],
    )
    parts = rt.share_partitions(2)
    await rt.start()
    parts.joined()
    store.set_leader(GP, 2, 2)
    loaded_at = wall.monotonic_ms()
    await parts.load_partition(GP, 2)
    for m in ("m1", "m2"):
        armed = rt.timers.get((SESSION, G, m))
        assert armed is not None
        assert 0 <= armed[0] - (loaded_at + SESSION_MS) < 2_000, (armed, loaded_at)
    await rt.close()


async def test_a_partition_serves_as_soon_as_it_is_loaded_not_when_all_are() -> None:
    """Two partitions taken: the first serves once loaded while the second is still read
    from the store (its groups get COORDINATOR_LOAD_IN_PROGRESS), then the second serves."""
    other = next(g for g in (f"g{i}" for i in range(100)) if partition_for(g, P) != GP)
    op = partition_for(other, P)
    shared = MemoryRecordStore(partitions=P)
    rt, parts = await leading(shared, 1, GP, 1)
    await rt.create_topics([NewTopic(name="t", num_partitions=1)])
    with pytest.raises(NotCoordinatorError):  # not led yet
        await rt.heartbeat(join(other, member_id="o1"))
    reading, release = threading.Event(), threading.Event()
    load_groups = shared.load_groups

    def slow(log: int) -> Any:
        if log == op:
            reading.set()
            assert release.wait(10)
        return load_groups(log)

    shared.load_groups = slow  # type: ignore[method-assign]
    shared.set_leader(op, 1, 1)
    loading = asyncio.ensure_future(parts.load_partition(op, 1))
    assert await asyncio.to_thread(reading.wait, 10)
    assert (await rt.heartbeat(join(G, member_id="m1"))).member_epoch == 1
    await rt.offset_commit(commit(G, {("t", 0): 5}, 1, "m1"))
    with pytest.raises(CoordinatorLoadInProgressError):
        await rt.heartbeat(join(other, member_id="o1"))
    assert not loading.done()
    release.set()
    await asyncio.wait_for(loading, 10)
    assert (await rt.heartbeat(join(other, member_id="o1"))).member_epoch == 1
    assert await fetched(rt, G) == {("t", 0): 5}
    await rt.close()


async def test_a_dropped_partitions_timers_go_and_the_others_stay() -> None:
    """Losing a partition drops its groups' timers and its offset expiration, in the next
    loop step; the timers of the partitions still served stay."""
    other = next(g for g in (f"g{i}" for i in range(100)) if partition_for(g, P) != GP)
    op = partition_for(other, P)
    shared = MemoryRecordStore(partitions=P)
    rt, parts = await leading(shared, 1, GP, 1)
    shared.set_leader(op, 1, 1)
    await parts.load_partition(op, 1)
    await rt.create_topics([NewTopic(name="t", num_partitions=1)])
    await rt.heartbeat(join(G, member_id="m1"))
    await rt.heartbeat(join(other, member_id="o1"))
    parts.lose_partition(GP)
    await asyncio.sleep(0)  # the purge
    keys = set(rt.timers.keys())
    assert {k for k in keys if k[1] in (G, other) or k[0] == EXPIRE_OFFSETS} == {
        (SESSION, other, "o1"),
        (EXPIRE_OFFSETS, "", str(op)),
    }
    await rt.close()


async def test_a_dropped_partitions_timers_go_a_few_keys_a_step_and_a_reload_waits_for_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A dropped partition's timers are purged a slice of the table's keys per loop step
    (timing.PURGE_KEYS, 4 here), not in one pass over the whole table; the timers of the
    partitions still served stay. A partition taken again before the purge ends finishes it
    first: then its own timers are the ones its load armed."""
    monkeypatch.setattr(timing, "PURGE_KEYS", 4)
    others = [g for g in (f"g{i}" for i in range(200)) if partition_for(g, P) != GP][:10]
    mine = [g for g in (f"g{i}" for i in range(200)) if partition_for(g, P) == GP][:10]
    shared = MemoryRecordStore(partitions=P)
    rt, parts = await leading(shared, 1, GP, 1)
    for op in {partition_for(g, P) for g in others}:
        shared.set_leader(op, 1, 1)
        await parts.load_partition(op, 1)
    await rt.create_topics([NewTopic(name="t", num_partitions=1)])
    for g in others + mine:
        await rt.heartbeat(join(g, member_id=f"{g}-m"))

    def sessions(groups: list[str]) -> set[Any]:
        return {k for k in rt.timers.keys() if k[0] == SESSION and k[1] in groups}  # noqa: SIM118

    kept = sessions(others)
    assert len(kept) == 10 and len(sessions(mine)) == 10
    parts.lose_partition(GP)
    steps = 0
    while sessions(mine) and steps < 100:
        await asyncio.sleep(0)
        steps += 1
    assert steps >= 4  # 25 keys or so, 4 a step
    assert sessions(mine) == set() and sessions(others) == kept
    assert (EXPIRE_OFFSETS, "", str(GP)) not in rt.timers.keys()  # noqa: SIM118

    parts.lose_partition(partition_for(others[0], P))  # a purge under way...
    await asyncio.sleep(0)
    shared.set_leader(GP, 1, 2)
    await parts.load_partition(GP, 2)  # ... finished by the reload of another partition
    gone = [g for g in others if partition_for(g, P) == partition_for(others[0], P)]
    assert sessions(gone) == set()
    assert sessions(others) == kept - {(SESSION, g, f"{g}-m") for g in gone}
    assert len(sessions(mine)) == 10  # armed anew by the load
    await rt.close()


def weak_state(shard: Any) -> list[weakref.ref[Any]]:
    """Weak references to a shard's state: its undo log (every dict of the state, and its
    context, refer to it), the shard and its components, and every group of it."""
    parts = (shard, shard.groups, shard.offsets, shard.classic_groups, shard.group_configs)
    return [
        weakref.ref(shard.undo),
        *map(weakref.ref, parts),
        *(weakref.ref(shard.groups[g]) for g in shard.groups),
        *(weakref.ref(shard.classic_groups[g]) for g in shard.classic_groups),
    ]


async def alive_after(refs: list[weakref.ref[Any]], steps: int = 2000) -> int:
    """How many of ``refs`` are still alive once all are dead or after ``steps`` loop steps."""
    for _ in range(steps):
        if all(ref() is None for ref in refs):
            return 0
        await asyncio.sleep(0)
    return sum(ref() is not None for ref in refs)


async def test_a_lost_partitions_state_is_freed_without_a_collection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A loaded partition's state is frozen (loader.py) and its state machine is a web of
    reference cycles: dropping it used to leave it all to a full collection of the frozen
    state, the whole node's (the loop's collector unfroze everything). Now the dropped shard
    is closed and freed by reference counting in slices of the loop (collector.free_dropped):
    with every collection switched off, every group of the dropped partition (loaded and
    frozen, or built after the load; consumer and classic, with offsets, a classic join
    parked at its barrier, a write held in flight) dies, and nothing is unfrozen. The
    partition taken again right away loads its durable state afresh."""
    groups = [g for g in (f"g{i}" for i in range(5000)) if partition_for(g, P) == GP][:100]
    classic_group = next(g for g in (f"c{i}" for i in range(100)) if partition_for(g, P) == GP)
    shared = MemoryRecordStore(partitions=P)
    key, value = codec.encode(classic_record(group_id=classic_group))  # Stable: A and B
    shared.append([StoredRecord(key, value, classic_group)], 1)
    rt, parts = await leading(shared, 1, GP, 1)
    await rt.create_topics([NewTopic(name="t", num_partitions=4)])
    for g in groups[:80]:
        joined = await rt.heartbeat(join(g, member_id=f"{g}-m"))
        await rt.offset_commit(commit(g, {("t", 0): 7}, joined.member_epoch, f"{g}-m"))
    shared.set_leader(GP, 1, 2)
    await parts.load_partition(GP, 2)  # the groups replayed from the store, frozen
    for g in groups[80:]:  # built after the load: not frozen
        await rt.heartbeat(join(g, member_id=f"{g}-m"))
    # A's rejoin waits at the barrier for B.
    parked = asyncio.ensure_future(rt.classic_join(classic_join_req("A", group_id=classic_group)))
    shared.hold_appends()
    held = asyncio.ensure_future(
        rt.offset_commit(commit(groups[0], {("t", 1): 8}, 1, f"{groups[0]}-m"))
    )
    await asyncio.sleep(0.01)
    assert not parked.done() and not held.done()
    refs = weak_state(rt.shards[GP])
    assert len(refs) == 6 + 100 + 1  # the shard, 5 components, the groups
    collections: list[str] = []
    monkeypatch.setattr(
        gc, "collect", lambda generation=2: collections.append(f"collect({generation})") or 0
    )
    monkeypatch.setattr(gc, "unfreeze", lambda: collections.append("unfreeze"))
    with Collector(asyncio.get_running_loop(), tick_s=0.001):
        parts.lose_partition(GP)
        shared.set_leader(GP, 1, 3)
        await parts.load_partition(GP, 3)  # taken again at once, while the old state goes
        assert await alive_after(refs) == 0
    assert "unfreeze" not in collections
    for call in (parked, held):
        with pytest.raises(NotCoordinatorError):
            await asyncio.wait_for(call, 1)
    shared.release_appends()
    assert await fetched(rt, groups[0]) == {("t", 0): 7}
    assert sorted(rt.shards[GP].groups) == sorted(groups)
    again = await rt.heartbeat(beat(groups[-1], f"{groups[-1]}-m", 1))
    assert again.member_epoch == 1
    await rt.close()


async def test_a_partition_lost_while_loading_is_freed_once_loaded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The shard a load builds for a partition lost meanwhile is never installed; once the
    load ends it is freed like a dropped one (no collection: it was frozen by the load)."""
    g = next(g for g in (f"g{i}" for i in range(100)) if partition_for(g, P) == GP)
    shared = MemoryRecordStore(partitions=P)
    rt, parts = await leading(shared, 1, GP, 1)
    await rt.create_topics([NewTopic(name="t", num_partitions=1)])
    await rt.heartbeat(join(g, member_id="m1"))
    release = threading.Event()
    refs: list[weakref.ref[Any]] = []

    def load(store: Any, partition: int, shard: Any) -> Any:
        assert release.wait(10)
        stats = load_partition(store, partition, shard)
        refs.extend(weak_state(shard))
        return stats

    monkeypatch.setattr(partitions_module, "load_partition", load)
    shared.set_leader(GP, 1, 2)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        loading = asyncio.ensure_future(parts.load_partition(GP, 2))
        await asyncio.sleep(0.01)
        parts.lose_partition(GP)  # lost while loading
        release.set()
        await asyncio.wait_for(loading, 10)
        assert len(refs) == 6 + 1  # what the load built (the shard, 5 components, the group)
        assert await alive_after(refs) == 0
    finally:
        if was_enabled:
            gc.enable()
    with pytest.raises(NotCoordinatorError):
        await rt.heartbeat(join(g))
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
    # Timers armed after a shift keep the deadline they are given; a second shift moves
    # every timer again, whenever it was armed; cancelled entries compacted away keep theirs.
    table.apply([ArmTimer(("session", "late", "m"), 1104, 7)])
    assert table.get(("session", "late", "m")) == (1104, 7)
    assert table.shift(10) == 5
    assert table.get(("session", "g3", "m")) == (1113, 3)
    table.cancel_where(lambda key: key[1] in ("g5", "g7", "g9"))
    assert table.pop_due(1113) == DueTimer(("session", "g3", "m"), 1113, 3)
    assert table.pop_due(1113) is None
    assert table.pop_due(1114) == DueTimer(("session", "late", "m"), 1114, 7)
    assert len(table) == 0 and table.next_deadline() is None
    table.apply([ArmTimer((kind, g, m), 5) for kind in ("a", "b") for g in "xyz" for m in "mn"])
    assert sorted(table.key_list()) == table.keys() and len(table.keys()) == 12
    assert table.cancel([k for k in table.key_list() if k[1] != "z"] + [("a", "q", "m")]) == 8
    assert table.cancel([("a", "z", "m"), ("a", "z", "m")]) == 1
    assert table.keys() == [("a", "z", "n"), ("b", "z", "m"), ("b", "z", "n")]
