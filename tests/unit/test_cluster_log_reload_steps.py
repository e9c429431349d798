"""A node behind the cluster log past journal retention reloads its compacted view
(``Partitions._reload``, docs/ha.md) in steps of its loop: the view read, decoded and compared
with the node's copy on a loader thread, the changes applied ``STEP_RECORDS`` a loop step, one
copy a loop step, as a large append is caught up (test_cluster_log_catch_up_steps.py); every
read in between sees the node's copy as it was or as the view has it, never a mix; commands of
the topic registry sent meanwhile run once it is done. On the memory store the HA tests share
and on PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
import test_cluster_log_reload
from builders import LoopSteps
from cluster_log_steps import count_replays, reads_while_catching_up
from test_cluster_log_reload import Node, acl, before_the_cut, missed, node
from test_server_authorization import ADMIN

from coordinator.core.topics import NewTopic
from coordinator.routing import CLUSTER_LOG
from coordinator.runtime import partitions as partitions_module

STEP = 3
open_store = test_cluster_log_reload.open_store  # the fixture: memory and PostgreSQL


def reads(n: Node) -> tuple[Any, ...]:
    """Every read of the cluster log's state on node ``n``: the topics (its committed copy's,
    its registry's image, its groups'), the committed records, the authorizer's decisions,
    SASL/SCRAM's credentials, group g's configs as DescribeConfigs (the committed copy) and a
    heartbeat of g (the registry, through the shard) read them; but for topic x and its ACL,
    which the node creates once reloaded."""
    rt = n.rt
    committed = rt.committed
    return (
        tuple(sorted(t.name for t in committed.registry.list_topics() if t.name != "x")),
        tuple(sorted(repr(k) for k in committed.records if "'x'" not in repr(k))),
        tuple(sorted(set(rt.driver.shards[0].context.topics.by_name) - {"x"})),
        tuple(sorted(set(rt.registry.image().by_name) - {"x"})),
        tuple(sorted(n.decisions().items())),
        tuple(sorted((k, repr(v)) for k, v in n.credentials().items())),
        repr(rt.committed.group_configs.overrides("g")),
        repr(rt.driver.shards[0].group_configs.overrides("g")),
    )


async def test_a_reload_applies_its_changes_a_step_at_a_time_and_is_read_whole(
    open_store: Callable[[], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The follower missed a topic, ACLs and credentials created, changed and deleted, a group
    config changed, and retention removed them from the journal: it reloads. With steps of
    three, its nine changes are applied three a loop step, one copy a loop step (the
    registry, then its committed copy), and every read in between (every loop step: topics,
    the authorizer, credentials, the group configs described and heartbeats read) sees the
    state before the reload or after it. A CreateTopics and a CreateAcls sent to it after the
    first part run once it has reloaded, after the view's end; both nodes then equal a fresh
    node's load. Before, the nine changes were applied in one loop step to both copies (18
    records replayed at once)."""
    monkeypatch.setattr(partitions_module, "STEP_RECORDS", STEP, raising=False)
    async with node(open_store, 1) as writer, node(open_store, 2) as behind:
        await before_the_cut(writer)
        await behind.follow(writer)
        await missed(writer, "tombstones")
        writer.store.expire_journal(2**62)  # the follower was cut off past the retention
        rt = behind.rt
        rt.ids._n = 100  # type: ignore[attr-defined]  # its topic ids apart from the writer's
        before = reads(behind)
        replayed = count_replays(monkeypatch, behind, lambda: steps.now)
        replay, sent = partitions_module.Partitions._replay, {}

        def watched(self: Any, records: Any) -> None:
            replay(self, records)
            if not sent:  # they come between the first part and the next
                sent["topics"] = asyncio.ensure_future(
                    rt.create_topics([NewTopic(name="x", num_partitions=1)])
                )
                sent["acls"] = asyncio.ensure_future(
                    behind.service.create_acls([acl("carol", "x")], ADMIN)
                )

        monkeypatch.setattr(partitions_module.Partitions, "_replay", watched)
        applied, by_the_reload = partitions_module.Partitions._applied, {}

        def ended(self: Any, *args: Any) -> None:  # the reload's end: what it replayed
            by_the_reload.update({step: dict(n) for step, n in replayed.items()})
            applied(self, *args)

        monkeypatch.setattr(partitions_module.Partitions, "_applied", ended)
        with LoopSteps() as steps:
            seen = {before, *await reads_while_catching_up(behind, writer, reads)}
        after = reads(behind)
        assert after != before
        assert seen | {after} == {before, after}
        assert [sum(n.values()) for n in by_the_reload.values()] == [3] * 6
        assert [list(n) for n in by_the_reload.values()] == [["registry"], ["committed"]] * 3
        assert not rt.driver.lead.cluster_held
        assert [(t.name, t.error_code) for t in await sent["topics"]] == [("x", 0)]
        await behind.ok(await sent["acls"])
        assert behind.parts.cluster_offset == behind.store.last_offset(CLUSTER_LOG)
        assert [t.name for t in rt.committed.registry.list_topics()] == ["n", "t", "x"]
        await writer.follow(behind)
        async with node(open_store, 3) as fresh:
            expected = await fresh.state()
        assert await behind.state() == expected
        assert await writer.state() == expected
