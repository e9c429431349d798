"""A write of this node's that fails (the store refuses it: its state rolled back) while the node
applies an append of the cluster log in parts (``Partitions._apply_in_parts``): the rollback
shows nothing of the append before it is whole (``Driver.write_failed`` publishes the topics
image, held meanwhile), undoes nothing a part applied, and once everything settled the node
equals a fresh node loaded from the store. On the memory store (its injected failures)."""

from __future__ import annotations

import asyncio
import random

import pytest
from builders import commit
from cluster_log_steps import (
    G,
    append_records,
    fetched,
    serve_group,
    shared_memory,
    start_catch_up,
    watch_parts,
)
from test_cluster_log_catch_up_steps import mixed_append, mixed_reads
from test_cluster_log_reload import node

from coordinator.core import records as r
from coordinator.core.errors import CoordinatorError
from coordinator.runtime import partitions as partitions_module

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
    shared, open_store = shared_memory()
    async with node(open_store, 1) as writer, node(open_store, 2) as server:
        await serve_group(writer, server, shared, "txy")
        mixed_reads(server)  # the authorizer decides from the start
        before = mixed_reads(server)
        await append_records(writer, [*mixed_append(), r.topic_record("x", None)])
        parts = watch_parts(monkeypatch)  # the append being applied ("now"), begun
        failing_at = rng.randrange(10)
        succeeding_at = failing_at + rng.randrange(1, 6)
        catching_up = start_catch_up(server, writer)
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
