"""The runtime's offset and group-administration paths in-process (MemoryRecordStore, manual clock):
durability before the answer, rollback on a failed write, routing across shards, the periodic
expiration timer and the topic-deletion hook."""

from __future__ import annotations

import asyncio

import pytest
from builders import START_MS, commit, join, make_runtime, stored

from coordinator.core import codec
from coordinator.core import records as r
from coordinator.core.commands import ConsumerGroupHeartbeat
from coordinator.core.errors import (
    CoordinatorNotAvailableError,
    ErrorCode,
    GroupIdNotFoundError,
    StaleMemberEpochError,
)
from coordinator.core.offsets import (
    FetchedPartition,
    FetchedTopic,
    ListedGroup,
    OffsetCommitResponse,
    OffsetFetchGroup,
    OffsetFetchGroupResponse,
    OffsetFetchTopic,
    PartitionResult,
    TopicResult,
)
from coordinator.core.topics import NewTopic
from coordinator.routing import partition_for
from coordinator.runtime import CoordinatorRuntime
from coordinator.runtime.store import MemoryRecordStore
from coordinator.runtime.timing import EXPIRE_OFFSETS

MINUTE = 60_000


async def started(rt: CoordinatorRuntime, *topics: tuple[str, int]) -> CoordinatorRuntime:
    await rt.start()
    if topics:
        await rt.create_topics([NewTopic(name=n, num_partitions=p) for n, p in topics])
    return rt


def ok(topic: str, topic_id: str, *partitions: int) -> TopicResult:
    return TopicResult(
        name=topic,
        topic_id=topic_id,
        partitions=tuple(PartitionResult(partition_index=p) for p in partitions),
    )


def stored_offsets(store: MemoryRecordStore) -> dict[tuple[str, str, int], int]:
    """(group, topic, partition) -> offset, decoded from the store's compacted view."""
    out = {}
    for rec in stored(store):
        record = codec.decode(rec.key, rec.value)
        if isinstance(record.key, r.OffsetCommitKey):
            out[(record.key.group_id, record.key.topic, record.key.partition)] = record.value.offset  # type: ignore[union-attr]
    return out


def fetched(group: str, topic: str, topic_id: str, **offsets: int) -> OffsetFetchGroupResponse:
    return OffsetFetchGroupResponse(
        group_id=group,
        topics=(
            FetchedTopic(
                name=topic,
                topic_id=topic_id,
                partitions=tuple(
                    FetchedPartition(partition_index=int(k[1:]), committed_offset=v, metadata="")
                    for k, v in sorted(offsets.items())
                ),
            ),
        ),
    )


async def test_a_commit_is_durable_before_it_is_answered() -> None:
    store = MemoryRecordStore()
    rt = await started(make_runtime(store), ("t", 2))
    tid = rt.registry.topics["t"].topic_id
    store.hold_appends()
    task = asyncio.ensure_future(rt.offset_commit(commit("g", {("t", 0): 5, ("t", 1): 6})))
    await asyncio.sleep(0.05)
    assert not task.done()  # the write is held: no answer yet
    assert stored_offsets(store) == {}
    store.release_appends()
    assert await asyncio.wait_for(task, 5) == OffsetCommitResponse(topics=(ok("t", tid, 0, 1),))
    assert stored_offsets(store) == {("g", "t", 0): 5, ("g", "t", 1): 6}
    await rt.close()


async def test_a_stable_fetch_waits_for_the_commit_it_could_see() -> None:
    """A stable fetch (a read_committed consumer's: Kafka's write without records) reads the
    latest offsets and waits for the group's commit; a plain fetch reads the committed ones,
    at once (Kafka's read operation)."""
    store = MemoryRecordStore()
    rt = await started(make_runtime(store), ("t", 1))
    tid = rt.registry.topics["t"].topic_id
    store.hold_appends()
    committing = asyncio.ensure_future(rt.offset_commit(commit("g", {("t", 0): 9})))
    await asyncio.sleep(0)
    fetching = asyncio.ensure_future(
        rt.offset_fetch([OffsetFetchGroup(group_id="g", require_stable=True)])
    )
    plain = await asyncio.wait_for(rt.offset_fetch([OffsetFetchGroup(group_id="g")]), 0.1)
    assert plain == [OffsetFetchGroupResponse(group_id="g")]  # nothing durable yet
    await asyncio.sleep(0.05)
    assert not fetching.done()  # it would show an offset that is not durable yet
    store.release_appends()
    await asyncio.wait_for(committing, 5)
    assert await asyncio.wait_for(fetching, 5) == [fetched("g", "t", tid, p0=9)]
    await rt.close()


async def test_a_failed_write_fails_the_commit_and_a_fetch_behind_it_and_leaves_no_trace() -> None:
    store = MemoryRecordStore()
    rt = await started(make_runtime(store), ("t", 1))
    tid = rt.registry.topics["t"].topic_id
    await rt.offset_commit(commit("g", {("t", 0): 1}))
    store.hold_appends()
    store.fail_next_appends(1)
    committing = asyncio.ensure_future(rt.offset_commit(commit("g", {("t", 0): 2})))
    await asyncio.sleep(0)
    fetching = asyncio.ensure_future(
        rt.offset_fetch([OffsetFetchGroup(group_id="g", require_stable=True)])
    )
    await asyncio.sleep(0)
    # A plain fetch meanwhile: the committed offset, never the commit still in flight.
    assert await rt.offset_fetch([OffsetFetchGroup(group_id="g")]) == [fetched("g", "t", tid, p0=1)]
    store.release_appends()
    with pytest.raises(CoordinatorNotAvailableError):
        await asyncio.wait_for(committing, 5)
    [answer] = await asyncio.wait_for(fetching, 5)
    assert answer == OffsetFetchGroupResponse(
        group_id="g",
        error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
        error_message="The write to the record store failed: injected append failure: OSError('injected write failure')",
    )
    assert await rt.offset_fetch([OffsetFetchGroup(group_id="g")]) == [fetched("g", "t", tid, p0=1)]
    await rt.close()


async def test_fencing_errors_raise_and_write_nothing() -> None:
    store = MemoryRecordStore()
    rt = await started(make_runtime(store), ("t", 1))
    await rt.heartbeat(join("g", ("t",), "A"))
    batches = len(store.batch_sizes)
    with pytest.raises(StaleMemberEpochError):
        await rt.offset_commit(commit("g", {("t", 0): 1}, epoch=2, member_id="A"))
    with pytest.raises(GroupIdNotFoundError):
        await rt.offset_commit(commit("nope", {("t", 0): 1}, epoch=1, member_id="A"))
    assert len(store.batch_sizes) == batches
    await rt.close()


async def test_fetch_of_many_groups_across_shards_in_request_order() -> None:
    rt = await started(make_runtime(shards=4), ("t", 1))
    tid = rt.registry.topics["t"].topic_id
    groups = [f"g{i}" for i in range(8)]
    assert len({partition_for(g, 4) for g in groups}) > 1
    for i, g in enumerate(groups):
        await rt.offset_commit(commit(g, {("t", 0): i}))
    got = await rt.offset_fetch([OffsetFetchGroup(group_id=g) for g in reversed(groups)])
    assert got == [fetched(g, "t", tid, p0=int(g[1:])) for g in reversed(groups)]
    await rt.close()


async def test_delete_groups_routes_each_id_and_keeps_request_order() -> None:
    store = MemoryRecordStore(partitions=4)
    rt = await started(make_runtime(store), ("t", 1))
    for g in ("a", "b", "c", "d"):
        await rt.offset_commit(commit(g, {("t", 0): 1}))
    await rt.heartbeat(join("busy", ("t",), "M"))
    got = await rt.delete_groups(["d", "busy", "nope", "a", "b", "c"])
    assert got == [
        ("d", ErrorCode.NONE, None),
        ("busy", ErrorCode.NON_EMPTY_GROUP, "Group busy is not empty (1 members)."),
        ("nope", ErrorCode.GROUP_ID_NOT_FOUND, "Group nope not found."),
        ("a", ErrorCode.NONE, None),
        ("b", ErrorCode.NONE, None),
        ("c", ErrorCode.NONE, None),
    ]
    assert stored_offsets(store) == {}
    assert [g.group_id for g in await rt.list_groups()] == ["busy"]
    await rt.close()


async def test_delete_groups_write_failure_is_per_group() -> None:
    store = MemoryRecordStore(partitions=1)
    rt = await started(make_runtime(store), ("t", 1))
    await rt.offset_commit(commit("a", {("t", 0): 1}))
    store.fail_next_appends(1)
    [(gid, code, _message)] = await rt.delete_groups(["a"])
    assert (gid, code) == ("a", ErrorCode.COORDINATOR_NOT_AVAILABLE)
    assert [g.group_id for g in await rt.list_groups()] == ["a"]  # rolled back
    await rt.close()


async def test_list_groups_across_shards_with_filters() -> None:
    rt = await started(make_runtime(shards=3), ("t", 1))
    await rt.heartbeat(join("consumer-1", ("t",), "M"))
    await rt.heartbeat(join("consumer-2", ("t",), "N"))
    await rt.heartbeat(
        ConsumerGroupHeartbeat(group_id="consumer-2", member_id="N", member_epoch=-1)
    )
    await rt.offset_commit(commit("simple", {("t", 0): 1}))
    everything = [
        ListedGroup(
            group_id="consumer-1",
            protocol_type="consumer",
            group_state="Stable",
            group_type="consumer",
        ),
        ListedGroup(
            group_id="consumer-2",
            protocol_type="consumer",
            group_state="Empty",
            group_type="consumer",
        ),
        ListedGroup(group_id="simple", protocol_type="", group_state="Empty", group_type="classic"),
    ]
    assert await rt.list_groups() == everything
    assert await rt.list_groups(states=["EMPTY"]) == everything[1:]
    assert await rt.list_groups(types=["Consumer"]) == everything[:2]
    assert await rt.list_groups(states=["empty"], types=["CLASSIC"]) == everything[2:]
    assert await rt.list_groups(types=["share"]) == []
    await rt.close()


async def test_one_expiration_timer_per_shard_rearmed_after_each_run() -> None:
    rt = await started(make_runtime(shards=2, **{"offsets.retention.check.interval.ms": "60000"}))
    keys = [(EXPIRE_OFFSETS, "", "0"), (EXPIRE_OFFSETS, "", "1")]
    assert [rt.timers.get(k) for k in keys] == [(START_MS + MINUTE, 0), (START_MS + MINUTE, 0)]
    await rt.advance_time(MINUTE - 1)
    assert [rt.timers.get(k) for k in keys] == [(START_MS + MINUTE, 0), (START_MS + MINUTE, 0)]
    await rt.advance_time(1)
    assert [rt.timers.get(k) for k in keys] == [
        (START_MS + 2 * MINUTE, 0),
        (START_MS + 2 * MINUTE, 0),
    ]
    await rt.advance_time(5 * MINUTE)  # late: it runs once, then every interval from now
    assert [rt.timers.get(k) for k in keys] == [
        (START_MS + 7 * MINUTE, 0),
        (START_MS + 7 * MINUTE, 0),
    ]
    await rt.close()


async def test_expiration_deletes_unsubscribed_offsets_and_empty_groups_durably(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryRecordStore(partitions=1)
    settings = {"offsets.retention.minutes": "10", "offsets.retention.check.interval.ms": "60000"}
    rt = await started(make_runtime(store, **settings), ("t", 2), ("u", 1))
    await rt.heartbeat(join("live", ("t",), "M"))
    await rt.offset_commit(commit("live", {("t", 0): 1, ("u", 0): 2}, epoch=1, member_id="M"))
    await rt.offset_commit(commit("simple", {("t", 1): 3}))
    caplog.set_level("INFO", logger="kip848.runtime")
    caplog.clear()
    for _ in range(19):  # 9.5 minutes, heartbeating every 30 s (session timeout 45 s)
        await rt.advance_time(MINUTE // 2)
        await rt.heartbeat(ConsumerGroupHeartbeat(group_id="live", member_id="M", member_epoch=1))
    assert len(stored_offsets(store)) == 3
    assert "expired" not in caplog.text
    await rt.advance_time(MINUTE // 2)
    # u is not subscribed: expired; t is: kept. The simple group's only offset expired: gone.
    assert stored_offsets(store) == {("live", "t", 0): 1}
    assert [g.group_id for g in await rt.list_groups()] == ["live"]
    # What happened is logged from the core's events once durable, with structured fields.
    assert events(caplog) == [
        ("offsets_expired", "live", {"count": 1}),
        ("offsets_expired", "simple", {"count": 1}),
        ("group_deleted", "simple", {"reason": "expired"}),
    ]
    assert "[GroupId live] Expired 1 offsets." in caplog.messages
    caplog.clear()
    # Once the member's session expires, the group is empty: its offsets expire 10 min after
    # their commit, and the group with them.
    await rt.advance_time(10 * MINUTE)
    assert stored_offsets(store) == {}
    assert await rt.list_groups() == []
    assert events(caplog)[-2:] == [
        ("offsets_expired", "live", {"count": 1}),
        ("group_deleted", "live", {"reason": "expired"}),
    ]
    await rt.close()


def events(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str, dict[str, object]]]:
    """(event name, group id, fields) of the core's events logged by the runtime."""
    return [
        (rec.event, rec.group_id, rec.event_fields)  # type: ignore[attr-defined]
        for rec in caplog.records
        if getattr(rec, "event", None) in ("offsets_expired", "group_deleted")
    ]


async def test_the_expiration_survives_a_failed_write() -> None:
    store = MemoryRecordStore(partitions=1)
    rt = await started(make_runtime(store, **{"offsets.retention.minutes": "1"}), ("t", 1))
    await rt.offset_commit(commit("simple", {("t", 0): 3}))
    store.fail_next_appends(1)
    await rt.advance_time(10 * MINUTE)  # the expiration's write fails
    assert stored_offsets(store) == {("simple", "t", 0): 3}
    assert rt.timers.get((EXPIRE_OFFSETS, "", "0")) == (START_MS + 20 * MINUTE, 0)
    await rt.advance_time(10 * MINUTE)
    assert stored_offsets(store) == {}
    await rt.close()


async def test_deleting_a_topic_deletes_its_offsets_in_the_same_batch() -> None:
    store = MemoryRecordStore(partitions=4)
    rt = await started(make_runtime(store), ("t", 1), ("keep", 1))
    for g in ("a", "b", "c", "d"):
        await rt.offset_commit(commit(g, {("t", 0): 1, ("keep", 0): 2}))
    batches = len(store.batch_sizes)
    assert [x.name for x in await rt.delete_topics(["t", "nope"])] == ["t", "nope"]
    assert store.batch_sizes[batches:] == [
        1 + 4
    ]  # the topic tombstone and 4 offset tombstones, one batch
    assert stored_offsets(store) == {(g, "keep", 0): 2 for g in ("a", "b", "c", "d")}
    # Re-created: it starts fresh.
    await rt.create_topics([NewTopic(name="t", num_partitions=1)])
    tid = rt.registry.topics["t"].topic_id
    got = await rt.offset_fetch(
        [
            OffsetFetchGroup(
                group_id="a", topics=(OffsetFetchTopic(name="t", partition_indexes=(0,)),)
            )
        ]
    )
    assert got == [
        OffsetFetchGroupResponse(
            group_id="a",
            topics=(
                FetchedTopic(
                    name="t", topic_id=tid, partitions=(FetchedPartition(partition_index=0),)
                ),
            ),
        )
    ]
    await rt.close()


async def test_offsets_and_deletions_survive_a_restart() -> None:
    store = MemoryRecordStore()
    rt = await started(make_runtime(store), ("t", 2))
    tid = rt.registry.topics["t"].topic_id
    await rt.offset_commit(commit("g", {("t", 0): 10, ("t", 1): 11}))
    await rt.offset_commit(commit("gone", {("t", 0): 1}))
    await rt.delete_groups(["gone"])
    await rt.close()
    again = await started(make_runtime(store.reopen()))
    assert await again.offset_fetch(
        [OffsetFetchGroup(group_id="g"), OffsetFetchGroup(group_id="gone")]
    ) == [
        fetched("g", "t", tid, p0=10, p1=11),
        OffsetFetchGroupResponse(group_id="gone"),
    ]
    assert [g.group_id for g in await again.list_groups()] == ["g"]
    await again.close()
