"""A caller that goes away must not take its batch with it.

grpc.aio cancels a call's handler task when the client resets the stream or its deadline
passes, and cancelling a task cancels the future it awaits. Many commands share one durable
batch: the runtime must shield it, or one departed client fails every other command of the
batch and the writer dies resolving it (the coordinator then never writes again; join storms
with client deadlines did exactly that)."""

from __future__ import annotations

import asyncio

from builders import join, make_runtime
from test_runtime_core import started

from coordinator.core.topics import NewTopic
from coordinator.runtime.store import MemoryRecordStore


async def test_a_cancelled_caller_leaves_its_batch_and_the_writer_alone() -> None:
    store = MemoryRecordStore(partitions=1)
    rt = await started(make_runtime(store))
    await rt.create_topics([NewTopic(name="t", num_partitions=8)])
    store.hold_appends()
    first = asyncio.ensure_future(rt.heartbeat(join("g0")))
    for _ in range(20):
        await asyncio.sleep(0)  # g0's batch is in flight (held)
    leaving = asyncio.ensure_future(rt.heartbeat(join("g1")))
    staying = asyncio.ensure_future(rt.heartbeat(join("g2")))
    await asyncio.sleep(0.01)  # both wait on the same pending batch
    leaving.cancel()
    await asyncio.sleep(0.01)
    store.release_appends()
    assert (await asyncio.wait_for(first, 5)).member_epoch == 1
    assert (await asyncio.wait_for(staying, 5)).member_epoch == 1
    assert leaving.cancelled()
    # The cancelled caller's command was still applied and made durable.
    assert "g1" in rt.shards[0].groups
    # The writer lives on: later commands are written and answered.
    later = await asyncio.wait_for(rt.heartbeat(join("g3")), 5)
    assert later.member_epoch == 1
    assert rt.engine._writer_task is not None and not rt.engine._writer_task.done()
    assert rt.stats["batches"] == 4  # topic; g0; g1+g2; g3
    await asyncio.wait_for(rt.close(), 5)
