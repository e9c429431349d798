"""A node catching up on other nodes' appends to the cluster log applies them in steps of its
loop (``Partitions._apply_entries``, docs/ha.md "The cluster log"): whole appends, at least
``STEP_RECORDS`` records a step, the loop serving what came meanwhile. Every state a read sees
between two steps is one the cluster log had after an append; a command of the topic
registry waits for the end of the catch-up and decides on the state caught up. On the memory
store the HA tests share and on PostgreSQL."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable
from typing import Any

import pytest
import test_cluster_log_reload
from builders import LoopSteps
from cluster_log_steps import append_records, count_replays, reads_while_catching_up
from test_cluster_log_reload import SESSION_TIMEOUT, Node, acl, node, upsert
from test_security_authorizer_index import whole_builds
from test_server_authorization import ADMIN

from coordinator.core import records as r
from coordinator.core.errors import ErrorCode
from coordinator.core.topics import NewTopic
from coordinator.routing import CLUSTER_LOG
from coordinator.runtime import partitions as partitions_module
from coordinator.security.acls import AclOperation, ResourceType
from coordinator.security.principal import user
from coordinator.security.scram import ScramMechanism
from coordinator.server.api import AlterScramCredentials, TopicChanges

STEP = 3
open_store = test_cluster_log_reload.open_store  # the fixture: memory and PostgreSQL


def seen_by_reads(n: Node) -> tuple[tuple[str, ...], int, tuple[str, ...]]:
    """What a read on node ``n`` is answered from: its committed copy's topics and records
    (ListTopics, DescribeAcls, the authorizer), and the topics its partition's groups see."""
    committed = n.rt.committed
    return (
        tuple(sorted(t.name for t in committed.registry.list_topics())),
        len(committed.records),
        tuple(sorted(n.rt.driver.shards[0].context.topics.by_name)),
    )


async def appends(writer: Node) -> list[tuple[tuple[str, ...], int, tuple[str, ...]]]:
    """Five appends of the writer, a millisecond apart (of 2, 1 and 4 topics, 2 ACLs, 1
    topic): what a node that applied them, and none after, is answered (after each)."""
    states = [seen_by_reads(writer)]
    await writer.rt.create_topics([NewTopic(name=n, num_partitions=1) for n in ("a", "b")])
    states.append(seen_by_reads(writer))
    for batch in (["c"], ["d", "e", "f", "g"], None, ["h"]):
        await writer.rt.advance_time(1)  # an append's records share its timestamp
        if batch is None:
            await writer.ok(await writer.service.create_acls([acl("u", "a"), acl("u", "b")], ADMIN))
        else:
            await writer.rt.create_topics([NewTopic(name=n, num_partitions=1) for n in batch])
        states.append(seen_by_reads(writer))
    return states


async def test_a_catch_up_applies_whole_appends_a_step_of_the_loop_at_a_time(
    open_store: Callable[[], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Steps of three records at most, ending at an append's end: (a b)(c) is three records,
    (d e f g) one append of four topics, applied in parts (d e f)(g), (2 ACLs)(h) three.
    Reads between the steps (every loop step, as a heartbeat or ListTopics would come) see
    the state after the first two appends, then after the third, never part of an append:
    the partition's groups see a step's topics a loop step before the committed copy has
    them (each copy at an append's end, the committed one never ahead); the append applied
    in parts is seen by both at once, whole, once its last part is in both copies. Before,
    all nine records were applied in one step: no read saw anything between the state
    before and the state after; then the append of four in one step, to both copies."""
    monkeypatch.setattr(partitions_module, "STEP_RECORDS", STEP, raising=False)
    async with node(open_store, 1) as writer, node(open_store, 2) as behind:
        states = await appends(writer)
        applied: list[tuple[int, int]] = []
        replay = partitions_module.Partitions._replay

        def watched(self: Any, records: Any) -> None:
            applied.append((steps.now, len(records)))
            replay(self, records)

        monkeypatch.setattr(partitions_module.Partitions, "_replay", watched)
        first = seen_by_reads(behind)
        with LoopSteps() as steps:
            reads = await reads_while_catching_up(behind, writer, seen_by_reads)
        seen = [state for state, _ in itertools.groupby([first, *reads, seen_by_reads(behind)])]
        assert [n for _step, n in applied] == [3, 3, 1, 3]
        assert len({step for step, _n in applied}) == 4  # each in a loop step of its own
        ends = [states[0], states[2], states[3], states[5]]
        expected = [ends[0]]
        for before, after in zip(ends, ends[1:], strict=False):
            if after is not ends[2]:
                expected.append((before[0], before[1], after[2]))  # the groups see it first
            expected.append(after)
        assert seen == expected
        assert behind.parts.cluster_offset == writer.store.last_offset(CLUSTER_LOG)
        assert not behind.rt.driver.lead.cluster_held


async def test_a_registry_command_during_a_catch_up_decides_on_the_state_caught_up(
    open_store: Callable[[], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Commands of the topic registry sent to the follower between two steps of its catch-up
    (a CreateTopics of a topic a later step brings, one of a new topic, a validation, an ACL)
    run once it has caught up: the first is refused TOPIC_ALREADY_EXISTS, the others land
    after the log's end, and both nodes then equal a fresh node's load. Run between the steps,
    a command would decide on a state the cluster log never had, and its write, refused
    (the log moved on), would roll back what a later step applied."""
    monkeypatch.setattr(partitions_module, "STEP_RECORDS", STEP, raising=False)
    async with node(open_store, 1) as writer, node(open_store, 2) as behind:
        await appends(writer)
        rt = behind.rt
        rt.ids._n = 100  # type: ignore[attr-defined]  # its topic ids apart from the writer's
        answers: dict[str, Any] = {}
        apply = partitions_module.Partitions._apply_records
        steps: list[tuple[str, ...]] = []

        async def commands() -> None:
            create = [NewTopic(name=n, num_partitions=2) for n in ("g", "x")]
            answers["validated"], answers["created"], answers["acl"] = await asyncio.gather(
                rt.create_topics([NewTopic(name="h", num_partitions=1)], validate_only=True),
                rt.create_topics(create),
                behind.service.create_acls([acl("v", "x")], ADMIN),
            )

        def watched(self: Any, records: Any, last: int, **kw: Any) -> None:
            apply(self, records, last, **kw)
            steps.append(seen_by_reads(behind)[0])
            if len(steps) == 1:  # they come between the first step and the next
                answers["task"] = asyncio.ensure_future(commands())

        monkeypatch.setattr(partitions_module.Partitions, "_apply_records", watched)
        await behind.follow(writer)
        await answers["task"]
        assert len(steps) == 2 and "h" not in steps[0]  # (d e f g) in parts between
        assert [(t.name, t.error_code) for t in answers["validated"]] == [
            ("h", ErrorCode.TOPIC_ALREADY_EXISTS)
        ]
        assert [(t.name, t.error_code) for t in answers["created"]] == [
            ("g", ErrorCode.TOPIC_ALREADY_EXISTS),
            ("x", ErrorCode.NONE),
        ]
        await behind.ok(answers["acl"])
        await writer.follow(behind)
        async with node(open_store, 3) as fresh:
            expected = await fresh.state()
        assert await behind.state() == expected
        assert await writer.state() == expected
        assert [t.name for t in rt.committed.registry.list_topics()] == [*"abcdefghx"]


async def test_no_loop_step_applies_a_step_to_both_the_registry_and_its_committed_copy(
    open_store: Callable[[], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The work of a loop step is bounded by one step's records: a catch-up of several steps
    replays each step's records into the registry in one loop step and into its committed
    copy in the next (at 100,000 topics, the five dicts of both copies grew past the same
    size in the same step: 15 ms of resizes at once, a 23-25 ms step). Counted: the records
    each loop step replayed, both copies together — at most a step's (3; the append of four
    topics in parts of 3 and 1), each loop step in one copy only, every record in both.
    Before, each loop step replayed its records into both (6, 8, 6); then the append of four
    went in one loop step to each copy."""
    monkeypatch.setattr(partitions_module, "STEP_RECORDS", STEP, raising=False)
    async with node(open_store, 1) as writer, node(open_store, 2) as behind:
        await appends(writer)
        replayed = count_replays(monkeypatch, behind, lambda: steps.now)
        with LoopSteps() as steps:
            await behind.follow(writer)
        assert [sum(n.values()) for n in replayed.values()] == [3, 3, 3, 3, 1, 1, 3, 3]
        assert [list(n) for n in replayed.values()] == [["registry"], ["committed"]] * 4
        assert await behind.state() == await writer.state()


def every_read(n: Node) -> tuple[Any, ...]:
    """Every read of topics on node ``n``: its committed copy's (ListTopics, its records),
    its registry's (a topic's name by id, whether a topic exists), its groups'."""
    rt = n.rt
    return (
        *seen_by_reads(n),
        tuple(sorted(rt.registry.image().by_name)),
        tuple(name for name in "pqrstuv" if n.service.topic_exists(name)),
        tuple(sorted(t.name for t in rt.registry.list_topics())),
    )


async def seven_created_or_five_deleted(writer: Node, change: str) -> None:
    """One append of the writer: topics p to v created ("create"), or p to t deleted."""
    if change == "create":
        topics = [NewTopic(name=t, num_partitions=1) for t in "pqrstuv"]
        await writer.ok(await writer.service.create_topics(TopicChanges(entries=topics), ADMIN))
    else:
        await writer.ok(
            await writer.service.delete_topics(TopicChanges(entries=list("pqrst")), ADMIN)
        )


async def test_an_append_larger_than_a_step_is_applied_in_parts_and_read_whole(
    open_store: Callable[[], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One append of seven topics (a CreateTopics), then one deleting five of them, with steps
    of three: each applied a part of three records at most a loop step, one copy a loop step
    (the registry, then its committed copy), and every read in between (every loop step: the
    committed copy's topics and records, the registry's image, topic_exists, the groups'
    topics) sees the state before the append or after it, never part of it; where each
    append ends is found on the loader thread (an append of 100,000: 10-20 ms of the loop).
    Before, each append went in one loop step to both copies (14 and 10 records replayed at
    once)."""
    monkeypatch.setattr(partitions_module, "STEP_RECORDS", STEP, raising=False)
    async with node(open_store, 1) as writer, node(open_store, 2) as behind:
        replayed = count_replays(monkeypatch, behind, lambda: steps.now)
        step_end, loop_thread, scanned_on = partitions_module._step_end, threading.get_ident(), []

        def watched_step_end(*args: Any) -> int:
            scanned_on.append(threading.get_ident() == loop_thread)
            return step_end(*args)

        monkeypatch.setattr(partitions_module, "_step_end", watched_step_end)
        for change in ("create", "delete"):
            before = every_read(behind)
            await seven_created_or_five_deleted(writer, change)
            replayed.clear()
            with LoopSteps() as steps:
                seen = {before, *await reads_while_catching_up(behind, writer, every_read)}
            after = every_read(behind)
            assert seen | {after} == {before, after}
            assert (
                after[0]
                == after[3]
                == after[5]
                == (tuple("pqrstuv") if change == "create" else ("u", "v"))
            )
            parts = [3, 3, 1] if change == "create" else [3, 2]
            assert [sum(n.values()) for n in replayed.values()] == [n for n in parts for _ in "rc"]
            assert [list(n) for n in replayed.values()] == [["registry"], ["committed"]] * len(
                parts
            )
            assert not behind.rt.driver.lead.cluster_held
        assert scanned_on and not any(scanned_on)  # the appends found on the loader thread
        assert await behind.state() == await writer.state()


SEVEN = [f"u{i}" for i in range(7)]


def security_reads(n: Node) -> tuple[Any, ...]:
    """Every read of ACLs and credentials on node ``n``: the authorizer's decisions (READ of
    topic t for the seven users and another), SASL/SCRAM's credentials, what DescribeAcls and
    DescribeUserScramCredentials read (the committed copy's ACLs and credentials)."""
    authorize = n.service.authorizer.authorize
    return (
        tuple(
            authorize(user(u), "/10.0.0.1", AclOperation.READ, ResourceType.TOPIC, "t")
            for u in (*SEVEN, "x")
        ),
        tuple(n.service.scram_credential(u, ScramMechanism.SCRAM_SHA_256) for u in SEVEN),
        repr(n.rt.committed.security.snapshot()),
        len(n.rt.committed.records),
    )


async def test_an_append_of_acls_or_credentials_larger_than_a_step_is_applied_in_parts(
    open_store: Callable[[], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One append of seven ACLs (a CreateAcls), then one of seven users' SCRAM credentials
    (an AlterUserScramCredentials), with steps of three: each applied a part of three
    records at most a loop step, one copy a loop step (the registry, then its committed
    copy), and every read in between (every loop step: the authorizer's decisions, SASL/SCRAM
    credentials, the ACLs and users described) sees the state before the append or after it,
    never part of it (the committed copy's ACLs and credentials staged until the last part).
    The authorizer's index is never built whole meanwhile (kept as the staged ACLs are
    replayed). Before, each append went in one loop step to both copies (7 records to each
    at once)."""
    monkeypatch.setattr(partitions_module, "STEP_RECORDS", STEP, raising=False)
    async with node(open_store, 1) as writer, node(open_store, 2) as behind:
        security_reads(behind)  # the authorizer decides from the start
        replayed = count_replays(monkeypatch, behind, lambda: steps.now)
        builds = whole_builds(monkeypatch)
        for change in ("acls", "credentials"):
            before = security_reads(behind)
            if change == "acls":
                answer = await writer.service.create_acls([acl(u, "t") for u in SEVEN], ADMIN)
            else:
                upserts = tuple(upsert(u, ScramMechanism.SCRAM_SHA_256, "pw") for u in SEVEN)
                answer = await writer.service.alter_user_scram_credentials(
                    AlterScramCredentials(upsertions=upserts), ADMIN
                )
            await writer.ok(answer)
            replayed.clear()
            with LoopSteps() as steps:
                seen = {before, *await reads_while_catching_up(behind, writer, security_reads)}
            after = security_reads(behind)
            assert after != before
            assert seen | {after} == {before, after}
            assert [sum(n.values()) for n in replayed.values()] == [3, 3, 3, 3, 1, 1]
            assert [list(n) for n in replayed.values()] == [["registry"], ["committed"]] * 3
            assert not behind.rt.driver.lead.cluster_held
        assert security_reads(behind)[0] == (True,) * 7 + (False,)
        assert all(c is not None for c in security_reads(behind)[1])
        assert builds == []
        assert await behind.state() == await writer.state()


def mixed_append() -> list[Any]:
    """Seven records of every kind the cluster log carries but credentials (the test above),
    interleaved so that each part of three mixes them: topics p and q, u0's and u1's READ of
    topic t, session timeouts of groups g1 and g2, transactional id tx's group."""

    def read_of_t(u: str) -> Any:
        return r.acl_record(r.AccessControlEntryKey(2, "t", 3, f"User:{u}", "*", 3, 3), True)

    def timeout(group: str) -> Any:
        return r.config_record(r.CONFIG_RESOURCE_GROUP, group, SESSION_TIMEOUT, "50000")

    return [
        r.topic_record("p", "id-of-p", 1),
        read_of_t("u0"),
        timeout("g1"),
        r.transactional_id_group_record("tx", "g1", 5),
        r.topic_record("q", "id-of-q", 1),
        read_of_t("u1"),
        timeout("g2"),
    ]


async def mixed_follower(writer: Node, behind: Node) -> tuple[Any, ...]:
    """``behind`` (its topic ids apart from the writer's) following ``writer`` after it created
    topic ``t``, its authorizer already deciding: its :func:`mixed_reads` before an append."""
    behind.rt.ids._n = 100  # type: ignore[attr-defined]  # its topic ids apart
    await writer.rt.create_topics([NewTopic(name="t", num_partitions=1)])
    await behind.follow(writer)
    mixed_reads(behind)  # the authorizer decides from the start
    return mixed_reads(behind)


def mixed_reads(n: Node) -> tuple[Any, ...]:
    """Every read of the cluster log's state on node ``n``: topics (:func:`every_read`), ACLs
    and credentials (:func:`security_reads`), the group configs DescribeConfigs reads (the
    committed copy's) and its partition's groups' heartbeats read (the registry's, through
    the shard), the group a transactional id's requests are routed by (the committed copy's)."""
    rt = n.rt
    shard = rt.driver.shards[0].group_configs
    return (
        every_read(n),
        security_reads(n),
        tuple(repr(rt.committed.group_configs.overrides(g)) for g in ("g1", "g2")),
        tuple(repr(shard.overrides(g)) for g in ("g1", "g2")),
        rt.transactional_id_group("tx"),
    )


async def test_an_append_of_every_record_type_larger_than_a_step_is_applied_in_parts(
    open_store: Callable[[], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One append mixing topics, ACLs, group configs and a transactional id's group (seven
    records, written by one command of the writer's registry), with steps of three: applied a
    part of three records at most a loop step, one copy a loop step (the registry, then its
    committed copy), and every read in between (every loop step: topics, the authorizer,
    DescribeConfigs' and the heartbeats' group configs, the transactional id's routing) sees
    the state before the append or after it, never part of it: the committed copy's group
    configs and transactional ids, and the registry's group configs, staged until the last
    part. Before, an append holding records other than topics, ACLs and credentials was
    applied whole, in one loop step to both copies (14 records replayed at once)."""
    monkeypatch.setattr(partitions_module, "STEP_RECORDS", STEP, raising=False)
    async with node(open_store, 1) as writer, node(open_store, 2) as behind:
        mixed_reads(behind)  # the authorizer decides from the start
        replayed = count_replays(monkeypatch, behind, lambda: steps.now)
        before = mixed_reads(behind)
        await append_records(writer, mixed_append())
        with LoopSteps() as steps:
            seen = {before, *await reads_while_catching_up(behind, writer, mixed_reads)}
        after = mixed_reads(behind)
        assert seen | {after} == {before, after}
        assert [sum(n.values()) for n in replayed.values()] == [3, 3, 3, 3, 1, 1]
        assert [list(n) for n in replayed.values()] == [["registry"], ["committed"]] * 3
        assert not behind.rt.driver.lead.cluster_held
        topics, security, committed_configs, shard_configs, tx_group = after
        assert topics[0] == ("p", "q")
        assert security[0] == (True, True) + (False,) * 6
        assert committed_configs == shard_configs == (repr({SESSION_TIMEOUT: "50000"}),) * 2
        assert tx_group == "g1"
        assert mixed_reads(writer) == after
        assert await behind.state() == await writer.state()


async def test_the_step_that_shows_an_append_applied_in_parts_only_swaps_copies_in(
    open_store: Callable[[], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append of seven topics, then one deleting five, with steps of three: the loop step
    that shows each (``CommittedCluster.unstage``) hashes no record key — the committed
    copy's records by key were replayed into a copy a part at a time, and it swaps that copy
    in — and frees none of what it replaces (dropped one piece a loop step after: the topics
    image held, the records by key as they were). Before, that step merged the staged
    records into the committed copy's, their deletions hashing each key again (at 100,000
    topics and ACLs, 20,000 deletions: 17 ms), and freed the maps it replaced at once."""
    monkeypatch.setattr(partitions_module, "STEP_RECORDS", STEP, raising=False)
    async with node(open_store, 1) as writer, node(open_store, 2) as behind:
        hashed: dict[int, int] = {}
        key_hash = r.TopicKey.__hash__

        def counted(key: Any) -> int:
            hashed[steps.now] = hashed.get(steps.now, 0) + 1
            return key_hash(key)

        committed = behind.rt.committed
        unstage, shown = type(committed).unstage, []

        def watched(self: Any) -> list[object]:
            replaced = unstage(self) or []
            shown.append((steps.now, [type(o).__name__ for o in replaced]))
            return replaced

        monkeypatch.setattr(type(committed), "unstage", watched)
        left: list[int] = []  # what is still held when the next loop step begins
        drop = partitions_module._drop_replaced

        async def watched_drop(replaced: list[object]) -> None:
            asyncio.get_running_loop().call_soon(lambda: left.append(len(replaced)))
            await drop(replaced)

        monkeypatch.setattr(partitions_module, "_drop_replaced", watched_drop)
        for change in ("create", "delete"):
            await seven_created_or_five_deleted(writer, change)
            hashed.clear()
            shown.clear()
            left.clear()
            monkeypatch.setattr(r.TopicKey, "__hash__", counted)
            with LoopSteps() as steps:
                await behind.follow(writer)
            monkeypatch.setattr(r.TopicKey, "__hash__", key_hash)
            ((step, replaced),) = shown
            assert hashed.get(step, 0) == 0
            assert sum(hashed.values()) > 0  # the parts hashed them, each in its own step
            assert replaced == ["TopicsImage", "dict"]  # the image held, the records by key
            assert left == [3]  # both, and the registry's image held: none freed yet
        assert await behind.state() == await writer.state()
