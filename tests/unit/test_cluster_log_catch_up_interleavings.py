"""This node's own writes of the cluster log, and another node's next append, arriving at random
loop steps while the node applies an append larger than a step in parts
(``Partitions._apply_in_parts``): every write is ordered after the append (it decides on the
state with the append, and lands once, after it), every read meanwhile sees the state before
the append or after it, and once everything settled both nodes equal a fresh node loaded from
the store. Seeded interleavings (the seed in the test's id); on the memory store the HA tests
share and on PostgreSQL."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import pytest
import test_cluster_log_reload
from cluster_log_steps import alter_session_timeout, append_records, start_catch_up, watch_parts
from test_cluster_log_catch_up_steps import mixed_append, mixed_follower, mixed_reads
from test_cluster_log_reload import SESSION_TIMEOUT, Node, acl, node, upsert
from test_server_authorization import ADMIN

from coordinator.core import records as r
from coordinator.core.errors import ErrorCode
from coordinator.core.topics import NewTopic
from coordinator.runtime import partitions as partitions_module
from coordinator.security.scram import ScramMechanism
from coordinator.server.api import (
    AlterScramCredentials,
    TopicChanges,
)

STEP = 3
SEEDS = range(6)
open_store = test_cluster_log_reload.open_store  # the fixture: memory and PostgreSQL


def own_writes(n: Node) -> dict[str, Callable[[], Any]]:
    """The node's writes, each deciding on what the append brings: a topic created, topic q
    (the append's last part brings it) created again, topic p (the append's) deleted, an ACL
    on the new topic created, u0's READ of t (the append's) deleted, u0's credential set,
    g1's and g2's session timeouts (the append sets 50000; g2's in its last part) set to
    60000, transactional id tx (the append maps it to g1) moved to g2."""
    s = n.service
    return {
        "create topic": lambda: s.create_topics(
            TopicChanges(entries=[NewTopic(name="n", num_partitions=1)]), ADMIN
        ),
        "create q again": lambda: s.create_topics(
            TopicChanges(entries=[NewTopic(name="q", num_partitions=1)]), ADMIN
        ),
        "delete topic": lambda: s.delete_topics(TopicChanges(entries=["p"]), ADMIN),
        "create acl": lambda: s.create_acls([acl("v", "n")], ADMIN),
        "delete acl": lambda: s.delete_acls([acl("u0", "t")], ADMIN),
        "credential": lambda: s.alter_user_scram_credentials(
            AlterScramCredentials(upsertions=(upsert("u0", ScramMechanism.SCRAM_SHA_256, "pw"),)),
            ADMIN,
        ),
        "group config": lambda: s.incremental_alter_configs(
            alter_session_timeout("g1", "60000"), ADMIN
        ),
        "group config of the last part": lambda: s.incremental_alter_configs(
            alter_session_timeout("g2", "60000"), ADMIN
        ),
        "transactional id": lambda: n.rt.map_transactional_id("tx", "g2"),
    }


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("how", ["append", "reload"])
async def test_own_writes_and_a_next_append_during_an_append_in_parts_land_after_it(
    open_store: Callable[[], Any], monkeypatch: pytest.MonkeyPatch, how: str, seed: int
) -> None:
    """The writer appends seven records of every kind (topics p and q, two ACLs, two group
    configs, a transactional id), applied by the follower in parts of three; at loop steps
    drawn from the seed, the follower is sent nine writes that each decide on the append
    (create topic q, which its last part brings, delete topic p, delete u0's ACL on t, set
    g1's and g2's session timeouts, move tx to g2...) and, on PostgreSQL, the writer appends
    once more (topic late: the follower's writes refused, it catches up again and runs them
    after). Every read of the follower while the append is being applied is the state before
    it or after it; each write is answered once, decided on the state with the append (q:
    TOPIC_ALREADY_EXISTS; u0's ACL deleted is the one the append brought: the deletion lists
    it), and lands after it (its value survives); then both nodes equal a fresh node's load.
    "reload": the follower was cut off past the journal's retention, and the seven records
    are the changes its reload of the compacted view applies in parts.
    Run between two parts (the registry held neither by ``Partitions.applied`` nor by
    ``Leadership.cluster_held``), a write decides on a state the log never had: q created
    again, a later part's g2 config replayed over the write's."""
    monkeypatch.setattr(partitions_module, "STEP_RECORDS", STEP, raising=False)
    rng = random.Random(seed)
    async with node(open_store, 1) as writer, node(open_store, 2) as behind:
        before = await mixed_follower(writer, behind)
        await append_records(writer, mixed_append())
        if how == "reload":  # cut off past the journal's retention: the view's changes
            writer.store.expire_journal(2**62)
        after = mixed_reads(writer)
        writes = own_writes(behind)
        # The memory store refuses no append of a node behind the cluster log (it has no
        # ``adopt``): another node's append concurrent with the follower's writes only where
        # one of them is refused (PostgreSQL).
        concurrent = hasattr(behind.store, "adopt")
        # The loop step of the append's application at which each write is sent (and the
        # writer appends again): from its staging to the drop of what it replaced.
        when = {name: rng.randrange(14) for name in [*writes, *["next append"] * concurrent]}
        sent: dict[str, asyncio.Future[Any]] = {}
        seen, steps_in_parts, mid = {before}, 0, []
        parts = watch_parts(monkeypatch)  # "now": the append is being applied; "was": it began
        catching_up = start_catch_up(behind, writer)
        while not catching_up.done() or len(sent) < len(when):
            if parts.get("now") or not parts.get("was"):
                seen.add(mixed_reads(behind))
            for name, at in when.items():
                if name not in sent and (
                    (parts.get("was") and steps_in_parts >= at) or catching_up.done()
                ):
                    if parts.get("now"):
                        mid.append(name)
                    if name == "next append":
                        sent[name] = asyncio.ensure_future(late(writer, behind))
                    else:
                        sent[name] = asyncio.ensure_future(writes[name]())
            steps_in_parts += parts.get("now", False)
            await asyncio.sleep(0)
        assert parts["was"]
        assert set(mid) == set(when)  # each sent while the append was being applied
        assert seen <= {before, after}, f"seed {seed}"
        answers = {name: await asyncio.wait_for(fut, 10) for name, fut in sent.items()}
        await behind.follow(writer)
        await writer.follow(behind)
        if concurrent:
            assert [(t.name, t.error_code) for t in answers["next append"]] == [("late", 0)]
        assert answers["transactional id"] is True  # tx moved from g1 to g2
        for name in ("create topic", "delete topic", "create acl", "credential", "group config"):
            await behind.ok(answers[name])
        await behind.ok(answers["group config of the last part"])
        assert [(t.name, t.error_code) for t in answers["create q again"].value] == [
            ("q", ErrorCode.TOPIC_ALREADY_EXISTS)
        ]
        (deletion,) = answers["delete acl"].value
        assert deletion.error_code == ErrorCode.NONE
        assert [str(b.principal) for b in deletion.deleted] == ["User:u0"]
        committed = behind.rt.committed
        assert sorted(t.name for t in committed.registry.list_topics()) == [
            *["late"] * concurrent,
            *"nqt",
        ]
        for group in ("g1", "g2"):
            assert dict(committed.group_configs.overrides(group) or {}) == {
                SESSION_TIMEOUT: "60000"
            }
        assert committed.transactional_ids.group_of("tx") == "g2"
        assert behind.service.scram_credential("u0", ScramMechanism.SCRAM_SHA_256) is not None
        assert r.TopicKey(name="p") not in committed.records
        async with node(open_store, 3) as fresh:
            expected = await fresh.state()
        assert await behind.state() == expected, f"seed {seed}"
        assert await writer.state() == expected, f"seed {seed}"
        assert not behind.rt.driver.lead.cluster_held


async def late(writer: Node, behind: Node) -> Any:
    """The writer's next append (topic late) while the follower applies the one before; the
    follower's heartbeat learns the log's new end."""
    created = await writer.rt.create_topics([NewTopic(name="late", num_partitions=1)])
    start_catch_up(behind, writer)
    return created
