"""A coordinator partition this node takes (or loses and takes again) while it applies an
append of the cluster log in parts (``Partitions._apply_in_parts``): the partition's groups see
the topics as they were before the append until it is shown whole, then as after it, and the
node's state — the partition's offsets included — equals what a fresh node loads from the
store. On the memory store (its lease table)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from cluster_log_steps import (
    append_records,
    fetched,
    serve_group,
    shared_memory,
    start_catch_up,
    watch_parts,
)
from test_cluster_log_catch_up_steps import mixed_append
from test_cluster_log_reload import Node, node
from test_server_authorization import ADMIN

from coordinator.core import codec
from coordinator.core import records as r
from coordinator.core.group_configs import HEARTBEAT_INTERVAL_CONFIG, effective_configs
from coordinator.core.topics import NewTopic
from coordinator.runtime import partitions as partitions_module
from coordinator.runtime.leadership import PartitionState
from coordinator.runtime.loader import load_partition
from coordinator.runtime.store import MemoryRecordStore, StoredRecord
from coordinator.server.api import TopicChanges

STEP = 3


def groups_topics(n: Node) -> tuple[str, ...]:
    """The topics partition 0's groups see (its heartbeats', its assignments')."""
    return tuple(sorted(n.rt.driver.shards[0].context.topics.by_name))


def take_now(n: Node, shared: MemoryRecordStore, epoch: int) -> None:
    """Node ``n`` takes partition 0 at ``epoch`` in this loop step: its log read and the shard
    installed at once (``Partitions.load_partition`` reads it on a loader thread, whose end
    falls at a loop step of its own: here the step is the test's)."""
    shared.set_leader(0, n.parts.lead.node_id, epoch)
    n.parts.lead.set(0, PartitionState.LOADING, epoch)
    shard = n.parts.new_shard()
    assert n.parts.install(0, epoch, shard, load_partition(n.store, 0, shard))


@pytest.mark.parametrize("at", range(9))
@pytest.mark.parametrize("move", ["taken", "lost and taken again"])
async def test_a_partition_taken_while_an_append_is_applied_in_parts(
    monkeypatch: pytest.MonkeyPatch, move: str, at: int
) -> None:
    """Node 2's group g (partition 0) committed offsets of topics x and y; node 1 deletes x
    and creates four topics in the same millisecond (5 records: applied in parts of three).
    At loop step ``at`` of that application node 2 takes partition 0 (it had handed it over:
    "taken"), or loses it and takes it again ("lost and taken again"). Every loop step, the
    partition's groups see the topics before the append or after it, never part of it; once
    applied, they see it all; g keeps y's offsets, and g's offsets and the cluster log's state
    on node 2 equal a fresh node's load. Taken before the append was shown whole, the
    partition loses x's offsets there; taken after, it keeps them (as Kafka's
    onPartitionsDeleted reaches only the coordinators a broker serves when it applies the
    deletion). With the partition's image taken from the registry as it is (not as held), a
    partition taken between two parts saw part of the append (x gone, c and d not there)."""
    monkeypatch.setattr(partitions_module, "STEP_RECORDS", STEP, raising=False)
    shared, open_store = shared_memory()
    async with node(open_store, 1) as writer, node(open_store, 2) as server:
        server.rt.ids._n = 100  # type: ignore[attr-defined]  # its topic ids apart
        await serve_group(writer, server, shared, "xy")
        await server.rt.engine.flush()
        before = groups_topics(server)
        if move == "taken":
            await server.parts.unload_partition(0)
        await writer.ok(await writer.service.delete_topics(TopicChanges(entries=["x"]), ADMIN))
        created = [NewTopic(name=n, num_partitions=1) for n in "abcd"]
        await writer.ok(await writer.service.create_topics(TopicChanges(entries=created), ADMIN))
        parts = watch_parts(monkeypatch)  # the append being applied ("now"), begun, shown
        applied = partitions_module.Partitions._applied

        def shown(self: Any, *args: Any) -> None:
            parts["shown"] = True
            applied(self, *args)

        monkeypatch.setattr(partitions_module.Partitions, "_applied", shown)
        catching_up = start_catch_up(server, writer)
        seen, steps, taken, taken_before = {before}, 0, False, False
        while not catching_up.done() or not taken:
            if server.rt.driver.lead.states[0] is PartitionState.SERVING:
                seen.add(groups_topics(server))
            if not taken and parts.get("was") and (steps >= at or catching_up.done()):
                if move != "taken":
                    server.parts.lose_partition(0)
                take_now(server, shared, 2)
                taken, taken_before = True, not parts.get("shown")
            steps += parts.get("now", False)
            await asyncio.sleep(0)
        after = groups_topics(server)
        assert after == ("a", "b", "c", "d", "y")
        assert seen <= {before, after}
        await server.rt.engine.flush()
        offsets = await fetched(server)
        assert offsets.get(("y", 0)) == 7
        if taken_before:  # served here when the append was shown whole: x's offsets removed
            assert offsets == {("y", 0): 7}
        async with node(open_store, 3) as fresh:
            assert await server.state() == await fresh.state()
            shared.set_leader(0, 3, 3)
            await fresh.parts.load_partition(0, 3)
            assert await fetched(fresh) == offsets


class _ShortWaits:
    """``asyncio`` for the partitions module, every wait a loop step: the waits between the
    attempts to move a partition's group configs (0.05-0.2 s, 0.5 s in all) shorter than an
    append applied in parts (100,000 records: 2 s and more), as at scale."""

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    @staticmethod
    async def sleep(_seconds: float) -> None:
        await asyncio.sleep(0)


async def test_a_partition_taken_while_an_append_is_applied_in_parts_moves_its_group_configs(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Partition 0's log holds a group config an earlier version kept there (group "old"'s
    heartbeat interval). Node 2 takes the partition (``load_partition``) as it begins to
    apply node 1's append of seven records of every kind in parts of one: the move of that
    config to the cluster log (``migrate_group_configs``, a command of the registry) waits
    for the append's end, as every registry command does, and is made at its first attempt:
    the cluster log names the group's config (DescribeConfigs on either node), the partition
    tombstoned it. Before, each attempt ran while the registry was held, was refused (the
    node applying other nodes' writes), and all five were spent before the append was shown:
    the config stayed in the partition until its next load."""
    monkeypatch.setattr(partitions_module, "STEP_RECORDS", 1, raising=False)
    monkeypatch.setattr(partitions_module, "asyncio", _ShortWaits())
    shared, open_store = shared_memory()
    legacy = r.group_config_record("old", HEARTBEAT_INTERVAL_CONFIG, "6000")
    shared.append([StoredRecord(*codec.encode(legacy), legacy.group_id)], 1)
    installed = asyncio.Event()
    install = partitions_module.Partitions.install

    def watched_install(self: Any, *args: Any) -> bool:
        done = install(self, *args)
        installed.set()
        return done

    monkeypatch.setattr(partitions_module.Partitions, "install", watched_install)
    apply_in_parts = partitions_module.Partitions._apply_in_parts
    loading: list[asyncio.Future[None]] = []

    async def taken_first(self: Any, *args: Any) -> None:
        """The partition installed (its configs' move begun) as the application begins."""
        shared.set_leader(0, self.lead.node_id, 1)
        loading.append(asyncio.ensure_future(self.load_partition(0, 1)))
        await asyncio.wait_for(installed.wait(), 10)
        await apply_in_parts(self, *args)

    async with node(open_store, 1) as writer, node(open_store, 2) as server:
        await append_records(writer, mixed_append())
        monkeypatch.setattr(partitions_module.Partitions, "_apply_in_parts", taken_first)
        await server.follow(writer)
        await asyncio.wait_for(loading[0], 10)
        await server.rt.engine.flush()
        moved = {HEARTBEAT_INTERVAL_CONFIG: "6000"}
        described = (effective_configs(server.rt.config, moved), moved)
        assert await server.rt.describe_group_config("old") == described
        assert len(server.rt.driver.shards[0].group_configs) == 0
        assert "failed (attempt" not in caplog.text
        await writer.follow(server)
        assert await writer.rt.describe_group_config("old") == described
        async with node(open_store, 3) as fresh:
            assert await server.state() == await fresh.state()
