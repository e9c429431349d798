"""A burst of joins to a new group gets one target covering all of it (runtime side, issue 14).

The runtime parks joins that arrive before a group's first target, computes that target once
joins to the group stop arriving, and answers the parked joins a few per command: every member
of the burst is answered with its own share at the same epoch, no partition is given to one
member only to be revoked a moment later, and the journal holds one target for the burst.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from builders import join, make_runtime
from test_runtime_core import started

from coordinator.core import codec
from coordinator.core import records as r
from coordinator.core.errors import CoordinatorNotAvailableError
from coordinator.core.topics import NewTopic
from coordinator.routing import partition_for
from coordinator.runtime.store import MemoryRecordStore

BATCHING = {"group.consumer.assignment.interval.ms": "1000"}


def targets_written(store: MemoryRecordStore, group_id: str) -> list[int]:
    """The assignment epochs of the group's target metadata records, in journal order."""
    out = []
    for entry in store.journal(partition_for(group_id, store.partitions)):
        if entry.value is None or entry.group_id != group_id:
            continue
        rec = codec.decode(entry.key, entry.value)
        if rec.key == r.target_assignment_epoch_record(group_id, 0).key:
            out.append(rec.value.assignment_epoch)  # type: ignore[union-attr]
    return out


async def burst(members: int, partitions: int, **settings: str) -> None:
    store = MemoryRecordStore(partitions=1)
    rt = await started(make_runtime(store, **BATCHING, **settings))
    try:
        (topic,) = await rt.create_topics([NewTopic(name="t", num_partitions=partitions)])
        answers = await asyncio.wait_for(
            asyncio.gather(*(rt.heartbeat(join("g", member_id=f"m{i}")) for i in range(members))),
            60,
        )
        # Every member answered with its own share, all at the epoch of the whole burst.
        assert [a.member_id for a in answers] == [f"m{i}" for i in range(members)]
        assert {a.member_epoch for a in answers} == {members}
        owned = Counter()
        for a in answers:
            assert a.assignment is not None and a.assignment.pending == {}
            shares = a.assignment.assigned.get(topic.topic_id, frozenset())
            assert partitions // members <= len(shares) <= partitions // members + 1
            owned.update(shares)
        assert owned == Counter(range(partitions))  # each partition once
        await rt.flush()
        assert targets_written(store, "g") == [members]  # one target for the burst
        description = await rt.describe_group("g")
        assert description.group_state == "Stable"
    finally:
        await asyncio.wait_for(rt.close(), 10)


async def test_a_burst_of_joins_gets_one_target_computed_on_the_loop() -> None:
    await burst(150, 600, **{"group.consumer.assignor.offload.enable": "false"})


async def test_a_burst_of_joins_gets_one_target_computed_off_the_loop() -> None:
    await burst(150, 600, **{"group.consumer.assignor.offload.min.members": "2"})


async def test_with_batching_off_the_first_member_is_answered_in_its_heartbeat() -> None:
    """Interval 0 (before Kafka 4.3): every join computes a target, nothing is parked."""
    store = MemoryRecordStore(partitions=1)
    rt = await started(make_runtime(store))
    try:
        await rt.create_topics([NewTopic(name="t", num_partitions=4)])
        first = await rt.heartbeat(join("g", member_id="a"))
        second = await rt.heartbeat(join("g", member_id="b"))
        assert (first.member_epoch, second.member_epoch) == (1, 2)
        await rt.flush()
        assert targets_written(store, "g") == [1, 2]
    finally:
        await asyncio.wait_for(rt.close(), 10)


async def test_parked_joins_are_answered_when_the_coordinator_shuts_down() -> None:
    store = MemoryRecordStore(partitions=1)
    rt = await started(
        make_runtime(store, **BATCHING, **{"group.initial.rebalance.delay.ms": "60000"})
    )
    await rt.create_topics([NewTopic(name="t", num_partitions=4)])

    joins: list[asyncio.Future[object]] = []

    async def keep_joining() -> None:  # joins keep arriving: the first target keeps waiting
        for i in range(400):
            joins.append(asyncio.ensure_future(rt.heartbeat(join("g", member_id=f"late{i}"))))
            await asyncio.sleep(0.005)

    parked = asyncio.ensure_future(rt.heartbeat(join("g", member_id="a")))
    stream = asyncio.ensure_future(keep_joining())
    await asyncio.sleep(0.1)
    assert not parked.done() and joins and not any(j.done() for j in joins)
    stream.cancel()
    await asyncio.wait_for(rt.close(), 10)
    for waiting in (parked, *joins):
        with pytest.raises(CoordinatorNotAvailableError):
            await waiting


async def test_a_first_target_whose_write_fails_is_computed_again() -> None:
    """Found by the simulator (seed 3 of the batched CI set, with ``store-fail``): the first
    target's write fails, the rollback parks the joins again — and a parked join sent again
    does not ask for a first target, so before the fix nothing ever answered them. The driver
    calls ``first_target`` again TIMER_RETRY_MS later, as a failed timer fires again."""
    store = MemoryRecordStore(partitions=1)
    rt = await started(make_runtime(store, shards=1, **BATCHING))
    try:
        await rt.create_topics([NewTopic(name="t", num_partitions=2)])
        joined = asyncio.ensure_future(rt.heartbeat(join("g", member_id="a")))
        for _ in range(100):  # bounded: the join's own records are written first
            await asyncio.sleep(0.001)
            if store.last_offset(partition_for("g", store.partitions)) >= 2:
                break
        await rt.flush()
        store.fail_next_appends(1)  # the first target's write
        answer = await asyncio.wait_for(joined, 5)
        assert (answer.member_epoch, answer.assignment is not None) == (1, True)
        assert answer.assignment.assigned == {
            next(iter(rt.registry.image().by_id)): frozenset({0, 1})
        }  # type: ignore[union-attr]
        assert rt.stats["failed_batches"] == 1
        await rt.flush()
        assert targets_written(store, "g") == [1]
    finally:
        await asyncio.wait_for(rt.close(), 10)
