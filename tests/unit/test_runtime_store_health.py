"""The runtime when its store cannot be written or is lost (storewatch.py), in-process with the
memory store's fault injection: health follows, the runtime recovers by itself once writes
succeed, and a lost store stops acknowledgements for good and is rescued."""

from __future__ import annotations

import asyncio
import logging

import pytest
from test_runtime_core import join, make_runtime, started

from coordinator.core.errors import CoordinatorNotAvailableError
from coordinator.core.offsets import (
    OffsetCommit,
    OffsetCommitPartition,
    OffsetCommitTopic,
    OffsetFetchGroup,
)
from coordinator.core.topics import NewTopic
from coordinator.runtime import CoordinatorRuntime, RuntimeState
from coordinator.runtime.store import MemoryRecordStore


def commit(group: str, offset: int) -> OffsetCommit:
    return OffsetCommit(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=(
            OffsetCommitTopic(
                name="t",
                partitions=(OffsetCommitPartition(partition_index=0, committed_offset=offset),),
            ),
        ),
    )


async def health_of(rt: CoordinatorRuntime) -> list[bool]:
    seen: list[bool] = []
    rt.add_health_listener(seen.append)
    return seen


async def wait_for(predicate, timeout_s: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    for _ in range(int(timeout_s / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition never became true")


async def test_unwritable_store_reports_not_serving_and_recovers_by_itself() -> None:
    store = MemoryRecordStore()
    rt = await started(make_runtime(store))
    rt.watch.interval_s = 0.02
    seen = await health_of(rt)
    await rt.create_topics([NewTopic(name="t", num_partitions=1)])
    assert rt.serving
    store.fail_next_appends(4)  # this batch and three probes fail ("the disk is full")
    with pytest.raises(CoordinatorNotAvailableError, match="write to the record store failed"):
        await rt.offset_commit(commit("g", 1))
    assert not rt.serving and seen == [False]
    assert rt.state is RuntimeState.ACTIVE  # still answering; reads work
    assert (await rt.list_topics())[0].name == "t"
    await wait_for(lambda: rt.serving)  # the probes failed, then one succeeded
    assert seen == [False, True]
    resp = await rt.offset_commit(commit("g", 2))
    assert resp.topics[0].partitions[0].error_code == 0
    await rt.close()
    assert seen == [False, True, False]  # closing: not serving


async def test_a_successful_batch_also_ends_the_unwritable_state() -> None:
    store = MemoryRecordStore()
    rt = await started(make_runtime(store))
    rt.watch.interval_s = 3600  # no probe: the next real batch is the test
    await rt.create_topics([NewTopic(name="t", num_partitions=1)])
    store.fail_next_appends(1)
    with pytest.raises(CoordinatorNotAvailableError):
        await rt.offset_commit(commit("g", 1))
    assert not rt.serving
    await rt.offset_commit(commit("g", 2))
    assert rt.serving
    await rt.close()


async def test_lost_store_stops_acknowledging_and_is_rescued(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryRecordStore()
    rt = await started(make_runtime(store))
    seen = await health_of(rt)
    await rt.create_topics([NewTopic(name="t", num_partitions=1)])
    await rt.offset_commit(commit("g", 1))
    store.lose("its data directory was deleted")
    with caplog.at_level(logging.CRITICAL, logger="kip848.runtime"):
        with pytest.raises(CoordinatorNotAvailableError, match="write to the record store failed"):
            await rt.offset_commit(commit("g", 2))
        assert rt.state is RuntimeState.FAILED and not rt.serving and seen == [False]
        with pytest.raises(CoordinatorNotAvailableError) as info:
            await rt.heartbeat(join("g2"))
        assert info.value.message == (
            "The coordinator stopped serving: the in-memory record store is no longer the one "
            "on disk: its data directory was deleted"
        )
        await wait_for(lambda: store.rescued)
        await asyncio.sleep(0.01)
    assert "no longer the one on disk" in caplog.text
    assert "Rescued every acknowledged record of the lost store to memory" in caplog.text
    await rt.close()
    again = await started(make_runtime(store.reopen()))  # the rescued data: offset 1, not 2
    [fetched] = await again.offset_fetch([OffsetFetchGroup(group_id="g")])
    assert [(t.name, [p.committed_offset for p in t.partitions]) for t in fetched.topics] == [
        ("t", [1])
    ]
    await again.close()


async def test_lost_store_is_noticed_while_idle() -> None:
    store = MemoryRecordStore()
    rt = await started(make_runtime(store))
    rt.watch.interval_s = 0.02
    await rt.create_topics([NewTopic(name="t", num_partitions=1)])
    store.lose()
    await wait_for(lambda: rt.state is RuntimeState.FAILED)
    assert not rt.serving
    await wait_for(lambda: store.rescued)
    await rt.close()


async def test_unknown_outcome_stops_serving_and_health_says_so() -> None:
    store = MemoryRecordStore()
    rt = await started(make_runtime(store))
    seen = await health_of(rt)
    await rt.create_topics([NewTopic(name="t", num_partitions=1)])
    store.fail_next_appends(1, outcome_unknown=True)
    with pytest.raises(CoordinatorNotAvailableError):
        await rt.offset_commit(commit("g", 1))
    assert rt.state is RuntimeState.FAILED and seen == [False]
    with pytest.raises(CoordinatorNotAvailableError, match="stopped serving: a write to the"):
        await rt.list_topics()
    await rt.close()
