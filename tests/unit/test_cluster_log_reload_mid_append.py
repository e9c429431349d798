"""Journal retention removes what a node has not applied while it applies an append in parts
(``Partitions._apply_in_parts``): the reload of the compacted view that this calls for
(``Partitions._reload``) begins once the append is whole, in the same catch-up, never between
two of its parts; every read sees the state before the append, after it, or after the reload
(the view), never a mix; then the node equals a fresh node's load. On the memory store."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from cluster_log_steps import append_records, shared_memory, start_catch_up, watch_parts
from test_cluster_log_catch_up_steps import mixed_append, mixed_follower, mixed_reads
from test_cluster_log_reload import node

from coordinator.core import records as r
from coordinator.runtime import partitions as partitions_module

STEP = 3

LATER = [
    r.topic_record("p", None),
    r.acl_record(r.AccessControlEntryKey(2, "t", 3, "User:u0", "*", 3, 3), False),
    r.config_record(r.CONFIG_RESOURCE_GROUP, "g1", "consumer.session.timeout.ms", "60000"),
    r.transactional_id_group_record("tx", "g2", 6),
    r.topic_record("late", "id-of-late", 1),
]
"""The writer's next append, undoing or changing something of every kind the first brought
(five records: applied in parts too, as the reload's changes)."""


async def test_a_reload_called_for_while_an_append_is_applied_in_parts_begins_once_it_is_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Node 2 applies node 1's append of seven records of every kind in parts of three. At
    its first part node 1 appends five more (p deleted, u0's READ of t deleted, g1's session
    timeout changed, tx moved to g2, topic late) and retention then removes the whole
    journal; node 2 learns the log's new end. The catch-up finishes the append, finds the
    journal gone past it and reloads the view: applied in parts as well, after the append's
    were (never interleaved with them). Every read of node 2 is the state before the first
    append, after it, or after the second; then it equals node 1 and a fresh node."""
    monkeypatch.setattr(partitions_module, "STEP_RECORDS", STEP, raising=False)
    _shared, open_store = shared_memory()
    async with node(open_store, 1) as writer, node(open_store, 2) as behind:
        before = await mixed_follower(writer, behind)
        await append_records(writer, mixed_append())
        first = mixed_reads(writer)
        applications: list[tuple[str, str]] = []  # (what, "begins" or "ends"), in order
        parts = watch_parts(monkeypatch)
        apply_in_parts, reload = (
            partitions_module.Partitions._apply_in_parts,
            partitions_module.Partitions._reload,
        )

        async def watched_parts(self: Any, *args: Any) -> None:
            what = "reload" if applications and applications[-1][0] == "reload" else "append"
            applications.append((f"{what}'s parts", "begin"))
            await apply_in_parts(self, *args)
            applications.append((f"{what}'s parts", "end"))

        async def watched_reload(self: Any, start: int) -> None:
            applications.append(("reload", "begin"))
            await reload(self, start)

        monkeypatch.setattr(partitions_module.Partitions, "_apply_in_parts", watched_parts)
        monkeypatch.setattr(partitions_module.Partitions, "_reload", watched_reload)

        async def next_append_then_retention() -> None:
            await writer.rt.advance_time(1)  # an append of its own
            await append_records(writer, LATER)
            writer.store.expire_journal(2**62)
            start_catch_up(behind, writer)  # its heartbeat reads the log's new end

        catching_up = start_catch_up(behind, writer)
        seen, later = {before}, None
        while not catching_up.done() or later is None or not later.done():
            seen.add(mixed_reads(behind))
            if later is None and parts.get("now"):
                later = asyncio.ensure_future(next_append_then_retention())
            await asyncio.sleep(0)
        await later
        await behind.follow(writer)
        second = mixed_reads(writer)
        assert first not in (before, second)
        assert seen | {second} == {before, first, second}
        assert applications == [
            ("append's parts", "begin"),
            ("append's parts", "end"),
            ("reload", "begin"),
            ("reload's parts", "begin"),
            ("reload's parts", "end"),
        ]
        assert mixed_reads(behind) == second
        assert second[0][0] == ("late", "q", "t")
        assert await behind.state() == await writer.state()
        async with node(open_store, 3) as fresh:
            assert await fresh.state() == await behind.state()
