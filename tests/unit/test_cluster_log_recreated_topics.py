"""A topic another node deleted and created again (a new topic id) before this node caught up
loses its offsets in the partitions this node serves, as a topic deleted for good does
(``Partitions._applied``, docs/ha.md "The cluster log"), however the node applies the two
appends: in one step, in parts (an append larger than a step), or as a reload of the log's
compacted view (which holds the new topic's record and no tombstone). The deleting node's
DeleteTopics removed the offsets only in the partitions it serves; the new topic must not
start at the old one's offsets here. On the memory store (its lease table)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from cluster_log_steps import fetched, serve_group, shared_memory, start_catch_up, watch_parts
from test_cluster_log_reload import Node, node
from test_server_authorization import ADMIN

from coordinator.core.topics import NewTopic
from coordinator.runtime import partitions as partitions_module
from coordinator.server.api import TopicChanges


async def topic_ids(n: Node) -> dict[str, str]:
    return {t.name: t.topic_id for t in n.rt.committed.registry.list_topics()}


@pytest.mark.parametrize("how", ["one step", "in parts", "reload"])
async def test_a_topic_deleted_and_created_again_loses_its_offsets_here(
    how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Node 2 serves the group's partition, whose group committed offsets of topics x and
    y; node 1 deletes x and y, then creates x again (and z): once node 2 has caught up, the
    group has no offsets of x nor y (node 2 removed them, as node 1 would have), and x is the
    new topic. "one step": both appends applied in one loop step; "in parts": a millisecond
    apart from none, the deletion and the creation of x, y, z, w (5 records, steps of 3) go
    in parts; "reload": node 2 was cut off past the journal's retention and reloads (x's new
    record replaces the old, no tombstone). Before, the offsets of x were kept (only a name
    the step deleted and left deleted lost its offsets)."""
    if how == "in parts":
        monkeypatch.setattr(partitions_module, "STEP_RECORDS", 3, raising=False)
    shared, open_store = shared_memory()
    async with node(open_store, 1) as writer, node(open_store, 2) as server:
        server.rt.ids._n = 100  # type: ignore[attr-defined]  # its topic ids apart
        await serve_group(writer, server, shared, "xy")
        old = await topic_ids(server)
        assert await fetched(server) == {("x", 0): 42, ("y", 0): 7}
        await writer.ok(await writer.service.delete_topics(TopicChanges(entries=["x", "y"]), ADMIN))
        if how == "one step":
            await writer.rt.advance_time(1)
        again = [NewTopic(name=n, num_partitions=1) for n in ("x", "z", "w")]
        await writer.ok(await writer.service.create_topics(TopicChanges(entries=again), ADMIN))
        if how == "reload":
            writer.store.expire_journal(2**62)
        await server.follow(writer)
        new = await topic_ids(server)
        assert sorted(new) == ["w", "x", "z"] and new["x"] != old["x"]
        await server.rt.engine.flush()  # the offsets' tombstones durable
        assert await fetched(server) == {}
        async with node(open_store, 3) as fresh:
            assert await topic_ids(fresh) == new


async def test_a_removal_written_again_while_an_append_is_applied_in_parts_sees_it_whole_or_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Node 2 serves the group's partition (offsets of x and y); node 1 deletes x, and node
    2's removal of x's offsets fails (the store refuses its write): it is written again in a
    later loop step (``Partitions._remove_again``) for the topics still deleted. That step
    falls while node 2 applies node 1's next append in parts — x created again with a, b and
    c (4 records, steps of 3) — after the part holding x: the append is not shown yet (every
    read sees x deleted), so x's offsets are removed, and once the append is shown x is the
    new topic, with no offsets. Before, the removal decided on the registry as the parts left
    it (x there again, shown to no read) and skipped x: the new x started at the old x's 42."""
    monkeypatch.setattr(partitions_module, "STEP_RECORDS", 3, raising=False)
    shared, open_store = shared_memory()
    async with node(open_store, 1) as writer, node(open_store, 2) as server:
        server.rt.ids._n = 100  # type: ignore[attr-defined]  # its topic ids apart
        await serve_group(writer, server, shared, "xy")
        await server.rt.engine.flush()
        remove_again = partitions_module.Partitions._remove_again
        again: list[tuple[Any, ...]] = []  # the removals to write again, held for the test
        held = asyncio.Event()

        def hold(*args: Any) -> None:
            again.append(args)
            held.set()

        monkeypatch.setattr(partitions_module.Partitions, "_remove_again", hold)
        server.store.fail_next_appends(1)  # the removal of x's offsets
        await writer.ok(await writer.service.delete_topics(TopicChanges(entries=["x"]), ADMIN))
        await server.follow(writer)
        await asyncio.wait_for(held.wait(), 10)
        await writer.rt.advance_time(1)  # the next append apart
        created = [NewTopic(name=n, num_partitions=1) for n in "xabc"]
        await writer.ok(await writer.service.create_topics(TopicChanges(entries=created), ADMIN))
        parts = watch_parts(monkeypatch)
        catching_up = start_catch_up(server, writer)
        while not catching_up.done():
            if again and parts.get("now") and "x" in server.rt.registry.topics:
                assert "x" not in server.rt.committed.registry.image().by_name
                remove_again(*again.pop())  # its loop step: between two parts
            await asyncio.sleep(0)
        assert parts.get("was") and not again
        assert sorted(await topic_ids(server)) == ["a", "b", "c", "x", "y"]
        await server.rt.engine.flush()  # the offsets' tombstones durable
        assert await fetched(server) == {("y", 0): 7}
        async with node(open_store, 3) as fresh:
            assert await server.state() == await fresh.state()
            shared.set_leader(0, 3, 2)
            await fresh.parts.load_partition(0, 2)
            assert await fetched(fresh) == {("y", 0): 7}
