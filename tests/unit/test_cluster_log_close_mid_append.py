"""A node closed while it applies an append of the cluster log in parts
(``Partitions._apply_in_parts``): what its committed copy answers afterwards (the reads that
need no runtime: the authorizer, SASL/SCRAM's credentials, the ACLs, group configs and
transactional ids kept there) is the state before the append or after it, never part of it,
and the partition's groups' topics agree with it. On the memory store the HA tests share and on
PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
import test_cluster_log_reload
from cluster_log_steps import append_records, start_catch_up
from test_cluster_log_catch_up_steps import mixed_append
from test_cluster_log_reload import Node, node

from coordinator.core.topics import NewTopic
from coordinator.runtime import partitions as partitions_module

STEP = 3
open_store = test_cluster_log_reload.open_store  # the fixture: memory and PostgreSQL


def committed_reads(n: Node) -> tuple[Any, ...]:
    """What node ``n``'s committed copy answers (no runtime call: it may be closed), and the
    topics its partition's groups see."""
    c = n.rt.committed
    return (
        tuple(sorted(t.name for t in c.registry.list_topics())),
        repr(c.security.snapshot()),
        len(c.records),
        tuple(c.transactional_ids.mapped()),
        repr(c.group_configs.snapshot()),
        tuple(sorted(n.rt.driver.shards[0].context.topics.by_name)),
    )


@pytest.mark.parametrize("at", range(12))
async def test_a_node_closed_while_it_applies_an_append_in_parts_shows_it_whole_or_not(
    open_store: Callable[[], Any], monkeypatch: pytest.MonkeyPatch, at: int
) -> None:
    """Seven records of every kind in one append, applied by the follower in parts of three;
    at loop step ``at`` of that application the follower closes. Its committed copy then
    answers the state before the append or after it, and its groups see the same topics.
    Before, the close cancelled the application mid-way: the staged copy was swapped in with
    the parts applied so far (a part of the ACLs, configs and topics), or whole but without
    its end (the groups' topics as before)."""
    monkeypatch.setattr(partitions_module, "STEP_RECORDS", STEP, raising=False)
    async with node(open_store, 1) as writer, node(open_store, 2) as behind:
        await writer.rt.create_topics([NewTopic(name="t", num_partitions=1)])
        await behind.follow(writer)
        before = committed_reads(behind)
        await append_records(writer, mixed_append())
        after = committed_reads(writer)
        begun = asyncio.Event()
        apply_in_parts = partitions_module.Partitions._apply_in_parts

        async def watched(self: Any, *args: Any) -> None:
            begun.set()
            await apply_in_parts(self, *args)

        monkeypatch.setattr(partitions_module.Partitions, "_apply_in_parts", watched)
        start_catch_up(behind, writer)
        await begun.wait()
        for _ in range(at):
            await asyncio.sleep(0)
        # What the runtime's close does last before the store closes (its earlier steps let
        # the application go on for a few loop steps: at any step here).
        await behind.parts.close()
        assert committed_reads(behind) in (before, after)
