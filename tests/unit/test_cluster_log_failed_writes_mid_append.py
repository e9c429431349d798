"""A write of this node's that fails (the store refuses it: its state rolled back) while the node
applies an append of the cluster log in parts (``Partitions._apply_in_parts``): the rollback
shows nothing of the append before it is whole (``Driver.write_failed`` publishes the topics
image, held meanwhile), undoes nothing a part applied, and once everything settled the node
equals a fresh node loaded from the store. On the memory store (its injected failures)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from builders import commit
from test_cluster_log_catch_up_steps import mixed_append, mixed_reads
from test_cluster_log_partition_moves import fetched
from test_cluster_log_reload import node

from coordinator.core import records as r
from coordinator.core.commands import Result
from coordinator.core.errors import CoordinatorError
from coordinator.core.topics import NewTopic
from coordinator.routing import CLUSTER_LOG
from coordinator.runtime import REGISTRY
from coordinator.runtime import partitions as partitions_module
from coordinator.runtime.store import MemoryRecordStore

G = "g"
STEP = 3


@pytest.mark.parametrize("seed", range(6))
async def test_a_write_failing_while_an_append_is_applied_in_parts_rolls_back_only_itself(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Node 2 serves group g's partition (offsets of topics x and y); node 1 appends eight
    records of every kind, x's deletion among them, applied by node 2 in parts of three. At
    loop steps drawn from the seed, node 2's OffsetCommit of y fails (the store refuses the
    append: the partition rolled back, every shard given the registry's topics image again)
    and a later one succeeds. Every read meanwhile (topics, the authorizer, group configs,
    the transactional routing, the partition's groups' topics) is the state before the append
    or after it; then g has y's last committed offset and no offset of x, and node 2 — its
    cluster state and its partition's offsets — equals a fresh node's load. When the commit's
    write is in flight as the append is shown, the removal of x's offsets goes in the next
    batch and fails with it (a batch after a failed one fails too): it is written again
    (``Partitions._remove_offsets``). Before, x's offsets stayed (5 of the 6 seeds)."""
    monkeypatch.setattr(partitions_module, "STEP_RECORDS", STEP, raising=False)
    rng = random.Random(seed)
    shared = MemoryRecordStore(partitions=1)

    def open_store() -> Any:
        return MemoryRecordStore(_data=shared._data)

    async with node(open_store, 1) as writer, node(open_store, 2) as server:
        shared.set_leader(0, 2, 1)
        await server.parts.load_partition(0, 1)
        await writer.rt.create_topics([NewTopic(name=n, num_partitions=1) for n in "txy"])
        await server.follow(writer)
        await server.rt.offset_commit(commit(G, {("x", 0): 42, ("y", 0): 7}))
        records = [*mixed_append(), r.topic_record("x", None)]

        def write(registry: Any) -> Result[None]:
            for record in records:
                registry.replay(record)
            return Result(records=list(records))

        mixed_reads(server)  # the authorizer decides from the start
        before = mixed_reads(server)
        await writer.rt._submit(REGISTRY, write)
        parts: dict[str, bool] = {}  # the append being applied ("now"), begun
        apply_in_parts = partitions_module.Partitions._apply_in_parts

        async def watched(self: Any, *args: Any) -> None:
            parts["now"] = parts["was"] = True
            try:
                await apply_in_parts(self, *args)
            finally:
                parts["now"] = False

        monkeypatch.setattr(partitions_module.Partitions, "_apply_in_parts", watched)
        failing_at = rng.randrange(10)
        succeeding_at = failing_at + rng.randrange(1, 6)
        server.parts.follow_cluster_log(writer.store.last_offset(CLUSTER_LOG))
        catching_up = asyncio.ensure_future(server.parts.caught_up())
        seen, steps, sent = {before}, 0, {}
        while not catching_up.done() or len(sent) < 2:
            if parts.get("now") or not parts.get("was"):
                seen.add(mixed_reads(server))
            driver = server.rt.driver
            idle = driver.pending is None and driver.inflight is None  # the failure the commit's
            if parts.get("was") and "failing" not in sent and steps >= failing_at and idle:
                server.store.fail_next_appends(1)
                sent["failing"] = asyncio.ensure_future(
                    server.rt.offset_commit(commit(G, {("y", 0): 8}))
                )
            if (
                "failing" in sent
                and sent["failing"].done()
                and "succeeding" not in sent
                and steps >= succeeding_at
            ):
                sent["succeeding"] = asyncio.ensure_future(
                    server.rt.offset_commit(commit(G, {("y", 0): 9}))
                )
            steps += 1 if parts.get("now") or catching_up.done() else 0
            await asyncio.sleep(0)
        with pytest.raises(CoordinatorError):
            await sent["failing"]
        await sent["succeeding"]
        after = mixed_reads(server)
        assert after != before
        assert seen <= {before, after}, f"seed {seed}"
        await server.rt.engine.flush()
        offsets = await fetched(server)
        assert offsets == {("y", 0): 9}
        async with node(open_store, 3) as fresh:
            assert await server.state() == await fresh.state()
            shared.set_leader(0, 3, 2)
            await fresh.parts.load_partition(0, 2)
            assert await fetched(fresh) == offsets
