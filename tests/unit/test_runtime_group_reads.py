"""A request's read of a group (OffsetFetch, ConsumerGroupDescribe, DescribeGroups, ListGroups,
the push stream's views) is answered at once from the committed state (``Driver.read``), as
Kafka's scheduleReadOperation reads its shard as of the last committed offset: never waiting
for a write of another group held in the store (the memory store's gate, as a COMMIT waiting
for PostgreSQL), never showing a change a failed write could roll back — the group's records
in flight, a change made without records while a write was outstanding, a topic not durable
yet — and showing a write as soon as its writer got the answer. A stable OffsetFetch (Kafka's
write without records) waits for the group's own writes only. One partition: every group
shares the shard whose write is held."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

import pytest
from builders import G, classic_join_req, classic_record, commit, join, make_runtime

from coordinator.core import codec
from coordinator.core.errors import (
    CoordinatorNotAvailableError,
    ErrorCode,
    GroupIdNotFoundError,
)
from coordinator.core.offsets import OffsetFetchGroup, OffsetFetchTopic
from coordinator.core.topics import NewTopic
from coordinator.runtime import CoordinatorRuntime
from coordinator.runtime.store import MemoryRecordStore, StoredRecord

AT_ONCE_S = 0.2
"""A read answered within this did not wait for the held write (held until the test lets it
go; the write timeout is Kafka's default 5 s)."""
T = TypeVar("T")


async def at_once(read: Awaitable[T]) -> T:
    """``read``'s answer, which must come without waiting for the held write."""
    try:
        return await asyncio.wait_for(read, AT_ONCE_S)
    except TimeoutError:
        raise AssertionError("the read waited for a write it does not depend on") from None


async def runtime(store: MemoryRecordStore) -> CoordinatorRuntime:
    rt = make_runtime(store, 1)
    await rt.start()
    await rt.create_topics([NewTopic(name="t", num_partitions=2)])
    return rt


async def offsets(rt: CoordinatorRuntime, group: str, *, stable: bool = False) -> dict[Any, int]:
    (answer,) = await rt.offset_fetch([OffsetFetchGroup(group_id=group, require_stable=stable)])
    assert answer.error_code == ErrorCode.NONE, answer
    return {
        (t.name, p.partition_index): p.committed_offset for t in answer.topics for p in t.partitions
    }


async def members(rt: CoordinatorRuntime, group: str) -> list[str]:
    return [m.member_id for m in (await rt.describe_group(group)).members]


async def listed(rt: CoordinatorRuntime) -> list[tuple[str, str]]:
    return [(g.group_id, g.group_state) for g in await rt.list_groups()]


async def test_reads_of_other_groups_are_answered_at_once_behind_a_held_write() -> None:
    store = MemoryRecordStore(partitions=1)
    rt = await runtime(store)
    await rt.offset_commit(commit("a", {("t", 0): 1}))
    await rt.offset_commit(commit("b", {("t", 1): 5}))
    member = (await rt.heartbeat(join("c"))).member_id
    described = await rt.describe_classic_groups(["b", "c"])
    store.hold_appends()
    held = asyncio.ensure_future(rt.offset_commit(commit("a", {("t", 0): 2})))
    await asyncio.sleep(0.05)
    assert not held.done()
    # Group b: no write in flight; plain and stable fetches, describe, list, all at once.
    assert await at_once(offsets(rt, "b")) == {("t", 1): 5}
    assert await at_once(offsets(rt, "b", stable=True)) == {("t", 1): 5}
    assert await at_once(members(rt, "c")) == [member]
    assert await at_once(rt.describe_classic_groups(["b", "c"])) == described
    assert await at_once(listed(rt)) == [("a", "Empty"), ("b", "Empty"), ("c", "Stable")]
    # Several groups in one request: each at once, group a without its commit in flight.
    both = await at_once(
        rt.offset_fetch([OffsetFetchGroup(group_id="a"), OffsetFetchGroup(group_id="b")])
    )
    assert [(g.group_id, g.topics[0].partitions[0].committed_offset) for g in both] == [
        ("a", 1),
        ("b", 5),
    ]
    # A stable fetch of group a waits for a's write (Kafka: a write without records).
    stable = asyncio.ensure_future(offsets(rt, "a", stable=True))
    await asyncio.sleep(0.05)
    assert not stable.done()
    store.release_appends()
    await asyncio.wait_for(held, 5)
    assert await asyncio.wait_for(stable, 5) == {("t", 0): 2}
    await rt.close()


async def test_a_read_never_shows_records_in_flight_and_after_a_failure_the_rolled_back_state() -> (
    None
):
    store = MemoryRecordStore(partitions=1)
    rt = await runtime(store)
    first = (await rt.heartbeat(join("a"))).member_id
    await rt.offset_commit(commit("o", {("t", 0): 1}))
    before = (await rt.describe_group("a"), await listed(rt))
    store.hold_appends()
    store.fail_next_appends(1)
    joining = asyncio.ensure_future(rt.heartbeat(join("a")))  # a second member of a
    committing = asyncio.ensure_future(rt.offset_commit(commit("o", {("t", 0): 2})))
    creating = asyncio.ensure_future(rt.heartbeat(join("new")))  # a new group
    await asyncio.sleep(0.05)
    assert len(rt.shards[0].groups["a"].members) == 2  # in memory, not durable
    # Every read is answered at once, from the committed state.
    assert await at_once(rt.describe_group("a")) == before[0]
    assert await at_once(offsets(rt, "o")) == {("t", 0): 1}
    assert await at_once(listed(rt)) == before[1] == [("a", "Stable"), ("o", "Empty")]
    with pytest.raises(GroupIdNotFoundError):
        await at_once(rt.describe_group("new"))
    (unknown,) = await at_once(rt.describe_classic_groups(["new"]))
    assert unknown.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert await at_once(rt.member_views("a", [first, "member-9"])) == (
        await rt.member_views("a", [first, "member-9"])
    )
    store.release_appends()
    for waiting in (joining, committing, creating):
        with pytest.raises(CoordinatorNotAvailableError):
            await asyncio.wait_for(waiting, 5)
    # Rolled back: the same answers as during the write.
    assert await members(rt, "a") == [first]
    assert await rt.describe_group("a") == before[0]
    assert await offsets(rt, "o") == {("t", 0): 1}
    assert await listed(rt) == before[1]
    await rt.close()


async def test_a_writer_reads_its_acknowledged_write_and_not_the_next_one_in_flight() -> None:
    store = MemoryRecordStore(partitions=1)
    rt = await runtime(store)
    store.hold_appends()
    committing = asyncio.ensure_future(rt.offset_commit(commit("a", {("t", 0): 2})))
    await asyncio.sleep(0.05)
    assert await at_once(offsets(rt, "a")) == {}
    store.release_appends()
    answer = await asyncio.wait_for(committing, 5)
    assert answer.topics[0].partitions[0].error_code == ErrorCode.NONE
    # Acknowledged: the next fetch sees it, also while the group's next commit is held.
    assert await at_once(offsets(rt, "a")) == {("t", 0): 2}
    store.hold_appends()
    later = asyncio.ensure_future(rt.offset_commit(commit("a", {("t", 0): 3})))
    await asyncio.sleep(0.05)
    assert await at_once(offsets(rt, "a")) == {("t", 0): 2}
    store.release_appends()
    await asyncio.wait_for(later, 5)
    assert await at_once(offsets(rt, "a")) == {("t", 0): 3}
    await rt.close()


async def test_a_change_without_records_under_a_held_write_is_not_shown_and_rolls_back() -> None:
    """A classic member's rejoin moves its Stable group to PreparingRebalance without a record
    (Kafka keeps the classic rebalance in memory); made while another group's write is in
    flight, a failure of that write rolls it back with the rest of the shard. A read of the
    group shows the state before it meanwhile, which is what stands after the failure."""
    store = MemoryRecordStore(partitions=1)
    key, value = codec.encode(classic_record())  # a Stable classic group: A and B, generation 5
    store.append([StoredRecord(key, value, G)], 1)
    rt = await runtime(store)
    (stable,) = await rt.describe_classic_groups([G])
    assert (stable.group_state, stable.generation_id) == ("Stable", 5)
    store.hold_appends()
    store.fail_next_appends(1)
    committing = asyncio.ensure_future(rt.offset_commit(commit("other", {("t", 0): 1})))
    await asyncio.sleep(0.05)
    rejoin = asyncio.ensure_future(rt.classic_join(classic_join_req("A")))
    await asyncio.sleep(0.05)
    assert not rejoin.done()  # at the barrier, waiting for B
    assert rt.shards[0].classic_groups.describe([G])[0].group_state == "PreparingRebalance"
    assert await at_once(rt.describe_classic_groups([G])) == [stable]
    store.release_appends()
    for waiting in (committing, rejoin):
        with pytest.raises(CoordinatorNotAvailableError):
            await asyncio.wait_for(waiting, 5)
    assert await rt.describe_classic_groups([G]) == [stable]
    await rt.close()


async def test_a_read_uses_the_topics_as_of_the_cluster_logs_last_durable_write() -> None:
    """A topic whose creation is in flight is unknown to a fetch by its id (its creation may
    still be rolled back), and known once it is durable."""
    store = MemoryRecordStore(partitions=1)
    rt = await runtime(store)
    store.hold_appends()
    creating = asyncio.ensure_future(rt.create_topics([NewTopic(name="new", num_partitions=1)]))
    await asyncio.sleep(0.05)
    topic_id = rt.registry.topics["new"].topic_id  # in memory, not durable
    by_id = OffsetFetchGroup(
        group_id="a", topics=(OffsetFetchTopic(name="", topic_id=topic_id, partition_indexes=(0,)),)
    )
    (answer,) = await at_once(rt.offset_fetch([by_id]))
    assert [p.error_code for p in answer.topics[0].partitions] == [ErrorCode.UNKNOWN_TOPIC_ID]
    assert rt.shards[0].topics.by_id.get(topic_id) is not None  # the shard's own image is back
    store.release_appends()
    await asyncio.wait_for(creating, 5)
    (answer,) = await at_once(rt.offset_fetch([by_id]))
    assert (answer.topics[0].name, answer.topics[0].partitions[0].error_code) == (
        "new",
        ErrorCode.NONE,
    )
    await rt.close()
