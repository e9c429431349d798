"""The pure reads of the cluster log's state — ListTopics (the Kafka listener's Metadata in
coordinator-only mode), DescribeAcls, DescribeUserScramCredentials, DescribeConfigs of a group —
and the authorizer's decisions and SCRAM sign-ins are answered from its state as of its last
durable write (``runtime/committed.py``), as Kafka's broker answers from its metadata cache:
at once while a write to it is held in the store (the memory store's gate, as a COMMIT waiting
for PostgreSQL), without the held change; with it as soon as its writer got the answer; never
with a change whose write then fails. Another node's appends, followed, are read too."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

import pytest
from builders import make_runtime
from cluster_log_steps import alter_session_timeout
from test_cluster_log_write_timeout import (
    Admin,
    acl,
    codes,
    started_admin,
    upsert,
)
from test_server_authorization import ADMIN

from coordinator.core.errors import CoordinatorLoadInProgressError, ErrorCode
from coordinator.core.topics import NewTopic
from coordinator.routing import CLUSTER_LOG
from coordinator.runtime import RuntimeState
from coordinator.runtime.store import MemoryRecordStore
from coordinator.security.acls import AclOperation, ResourceType
from coordinator.security.principal import KafkaPrincipal
from coordinator.security.scram import ScramMechanism
from coordinator.server.api import (
    AclSpec,
    AlterScramCredentials,
    TopicChanges,
)
from coordinator.server.service import CoordinatorService

AT_ONCE_S = 0.5
"""A read answered within this is not waiting for the held write (whose answer would come at
the write timeout, offsets.commit.timeout.ms: Kafka's default 5 s here)."""
ALICE = KafkaPrincipal.parse("User:alice")


@pytest.fixture
async def admin() -> AsyncIterator[Admin]:
    """Topic t and the ACL on "kept" durable; the default write timeout (5 s)."""
    async with started_admin() as started:
        yield started


async def at_once(read: Awaitable[Any]) -> Any:
    """``read``'s answer, which must come within :data:`AT_ONCE_S`."""
    started = time.monotonic()
    try:
        answer = await asyncio.wait_for(read, AT_ONCE_S)
    except TimeoutError:
        raise AssertionError(f"the read waited more than {AT_ONCE_S} s") from None
    assert time.monotonic() - started < AT_ONCE_S
    return answer


def deny_group(group: str) -> AclSpec:
    """User:alice may not READ group ``group``."""
    return replace(acl(group), resource_type=int(ResourceType.GROUP), permission_type=2)


async def exists(admin: Admin, name: str) -> bool:
    """Whether the service knows topic ``name`` (what decides between UNKNOWN_TOPIC_OR_PARTITION
    and an authorization error in a refusal of a client that may describe it)."""
    return admin.service.topic_exists(name)


@dataclass(frozen=True)
class Case:
    """A write to the cluster log, the read that shows it, and that read's answer before and
    after the write lands."""

    write: Callable[[CoordinatorService], Awaitable[Any]]
    seen: Callable[[Admin], Awaitable[Any]]
    before: Any
    after: Any


CASES = {
    "CreateTopics / ListTopics": Case(
        lambda s: s.create_topics(
            TopicChanges(entries=[NewTopic(name="n", num_partitions=3)], timeout_ms=30_000), ADMIN
        ),
        Admin.topics,
        {"t": 2},
        {"t": 2, "n": 3},
    ),
    "DeleteTopics / ListTopics": Case(
        lambda s: s.delete_topics(TopicChanges(entries=["t"], timeout_ms=30_000), ADMIN),
        Admin.topics,
        {"t": 2},
        {},
    ),
    "CreateTopics / whether a topic exists (a refusal's UNKNOWN_TOPIC_OR_PARTITION)": Case(
        lambda s: s.create_topics(
            TopicChanges(entries=[NewTopic(name="n", num_partitions=3)], timeout_ms=30_000), ADMIN
        ),
        lambda a: exists(a, "n"),
        False,
        True,
    ),
    "DeleteTopics / whether a topic exists": Case(
        lambda s: s.delete_topics(TopicChanges(entries=["t"], timeout_ms=30_000), ADMIN),
        lambda a: exists(a, "t"),
        True,
        False,
    ),
    "CreateAcls / DescribeAcls": Case(
        lambda s: s.create_acls([acl("new")], ADMIN), Admin.acls, ["kept"], ["kept", "new"]
    ),
    "DeleteAcls / DescribeAcls": Case(
        lambda s: s.delete_acls([acl("kept")], ADMIN), Admin.acls, ["kept"], []
    ),
    "AlterUserScramCredentials / DescribeUserScramCredentials": Case(
        lambda s: s.alter_user_scram_credentials(
            AlterScramCredentials(upsertions=(upsert("bob"),)), ADMIN
        ),
        Admin.users,
        [],
        ["bob"],
    ),
    "IncrementalAlterConfigs / DescribeConfigs": Case(
        lambda s: s.incremental_alter_configs(alter_session_timeout("g", "50000"), ADMIN),
        lambda a: a.session_timeout("g"),
        "45000",
        "50000",
    ),
}


@pytest.mark.parametrize("api", list(CASES))
async def test_a_read_behind_a_held_write_is_answered_at_once_with_the_committed_state(
    admin: Admin, api: str
) -> None:
    """While the write is held in the store, the read is answered at once, without the held
    change (before the committed copy: it waited for the write timeout, then REQUEST_TIMED_OUT,
    and Metadata listed no topics); the writer, once answered, reads its change at once."""
    case = CASES[api]
    admin.store.hold_appends()
    writing = asyncio.ensure_future(case.write(admin.service))
    await asyncio.sleep(0.01)  # the write is in flight, held
    assert not writing.done()
    assert await at_once(case.seen(admin)) == case.before
    assert await at_once(case.seen(admin)) == case.before  # as often as asked
    admin.store.release_appends()
    assert all(code == ErrorCode.NONE for code, _m in codes(await writing))
    assert await at_once(case.seen(admin)) == case.after  # read your writes: no flush needed


async def test_a_change_whose_write_fails_is_never_read(admin: Admin) -> None:
    """Reads during a held write that then fails never show its change, nor after it."""
    admin.store.hold_appends()
    admin.store.fail_next_appends(1)
    creating = asyncio.ensure_future(
        admin.service.create_topics(
            TopicChanges(entries=[NewTopic(name="n", num_partitions=1)]), ADMIN
        )
    )
    deleting = asyncio.ensure_future(admin.service.delete_acls([acl("kept")], ADMIN))
    await asyncio.sleep(0.01)
    assert await at_once(admin.topics()) == {"t": 2}
    assert await at_once(admin.acls()) == ["kept"]
    admin.store.release_appends()
    assert [code for code, _m in codes(await creating)] == [ErrorCode.COORDINATOR_NOT_AVAILABLE]
    assert [code for code, _m in codes(await deleting)] == [ErrorCode.COORDINATOR_NOT_AVAILABLE]
    assert admin.rt.stats["failed_batches"] == 1
    assert await at_once(admin.topics()) == {"t": 2}
    assert await at_once(admin.acls()) == ["kept"]


async def test_the_authorizer_and_scram_sign_ins_decide_on_committed_acls_and_credentials(
    admin: Admin,
) -> None:
    """A DENY held in the store does not refuse yet (before: it refused at once, on an ACL that
    a failed write would have rolled back); a SCRAM credential held is not there to sign in
    with. Both count once their writes are answered; a DENY whose write fails never counts."""
    service = admin.service
    authorizer = service.authorizer

    def alice_may_read(group: str) -> bool:
        return authorizer.authorize(
            ALICE, "/127.0.0.1", AclOperation.READ, ResourceType.GROUP, group
        )

    def bobs_credential() -> object:
        return service.scram_credential("bob", ScramMechanism.SCRAM_SHA_256)

    assert alice_may_read("g") and alice_may_read("h")
    admin.store.hold_appends()
    denying = asyncio.ensure_future(service.create_acls([deny_group("g")], ADMIN))
    adding = asyncio.ensure_future(
        service.alter_user_scram_credentials(
            AlterScramCredentials(upsertions=(upsert("bob"),)), ADMIN
        )
    )
    await asyncio.sleep(0.01)
    assert alice_may_read("g")
    assert bobs_credential() is None
    admin.store.release_appends()
    assert [code for code, _m in codes(await denying)] == [ErrorCode.NONE]
    assert [code for code, _m in codes(await adding)] == [ErrorCode.NONE]
    assert not alice_may_read("g") and alice_may_read("h")
    assert bobs_credential() is not None

    admin.store.hold_appends()
    admin.store.fail_next_appends(1)
    failing = asyncio.ensure_future(service.create_acls([deny_group("h")], ADMIN))
    await asyncio.sleep(0.01)
    assert alice_may_read("h")
    admin.store.release_appends()
    assert [code for code, _m in codes(await failing)] == [ErrorCode.COORDINATOR_NOT_AVAILABLE]
    assert alice_may_read("h")


async def test_another_nodes_appends_are_read_once_followed() -> None:
    """Two nodes on one store: what one appends to the cluster log, the other reads once it
    followed the log (its committed copy replays the appends too)."""
    store = MemoryRecordStore(partitions=1)
    first, second = make_runtime(store, 1), make_runtime(MemoryRecordStore(_data=store._data), 1)
    writer, parts = first.share_partitions(1), second.share_partitions(2)
    await first.start()
    await second.start()
    writer.joined()
    try:
        await first.create_topics([NewTopic(name="t", num_partitions=2)])
        assert await second.list_topics() == []
        parts.follow_cluster_log(store.last_offset(CLUSTER_LOG))
        await asyncio.wait_for(parts.caught_up(), 5)
        assert [(t.name, t.num_partitions) for t in await second.list_topics()] == [("t", 2)]
    finally:
        await second.close()
        await first.close()


def names(topics: Any) -> list[str]:
    return sorted(t.name for t in topics)


@pytest.mark.parametrize("appended_since", [False, True])
async def test_a_node_that_missed_what_retention_removed_loads_the_compacted_view(
    appended_since: bool,
) -> None:
    """A node behind on the cluster log whose missing entries journal retention removed (cut
    off longer than the retention) replaces its copy with the log's compacted view and goes on
    from the view's end, serving, as a broker that fell behind loads a metadata snapshot: a
    topic deleted meanwhile is gone from it, one created is there, and its own appends land.
    Before, it kept its stale copy for good (the journal empty, it took itself for caught up;
    the journal starting past what it applied, it logged an error each heartbeat).
    ``appended_since``: another append after the retention (the journal not empty)."""
    store = MemoryRecordStore(partitions=1)
    first, second = make_runtime(store, 1), make_runtime(MemoryRecordStore(_data=store._data), 1)
    writer, parts = first.share_partitions(1), second.share_partitions(2)
    await first.start()
    await second.start()
    writer.joined()
    parts.joined()
    try:
        await first.create_topics([NewTopic(name="t", num_partitions=1)])
        parts.follow_cluster_log(store.last_offset(CLUSTER_LOG))
        await asyncio.wait_for(parts.caught_up(), 5)
        assert names(await second.list_topics()) == ["t"]
        # Missed by the second node, then removed from the journal.
        await first.create_topics([NewTopic(name="u", num_partitions=1)])
        assert codes_of(await first.delete_topics(["t"])) == [ErrorCode.NONE]
        store.expire_journal(2**62)
        if appended_since:
            await first.create_topics([NewTopic(name="v", num_partitions=1)])
        parts.follow_cluster_log(store.last_offset(CLUSTER_LOG))
        await asyncio.wait_for(parts.caught_up(), 5)
        expected = ["u", "v"] if appended_since else ["u"]
        assert names(await second.list_topics()) == expected
        assert names(second.registry.list_topics()) == expected
        assert second.engine.driver.state is RuntimeState.ACTIVE
        assert parts.cluster_offset == store.last_offset(CLUSTER_LOG)
        # Its own appends go after the log's end.
        fresh_id = first.ids.new_topic_id()  # the nodes' sequential ids would collide
        made = await second.create_topics([NewTopic(name="w", num_partitions=1, topic_id=fresh_id)])
        assert codes_of(made) == [ErrorCode.NONE]
        writer.follow_cluster_log(store.last_offset(CLUSTER_LOG))
        await asyncio.wait_for(writer.caught_up(), 5)
        assert names(await first.list_topics()) == [*expected, "w"]
    finally:
        await second.close()
        await first.close()


async def test_a_node_started_after_tombstones_expired_appends_to_the_cluster_log() -> None:
    """The newest cluster-log entries were tombstones (a topic deleted) that retention removed
    from the journal: a node started then loads the compacted view and its end (past the
    view's last record), follows the log without reloading, and its appends land. Before, its
    applied offset was the view's last record: its appends were refused as behind the log and
    CreateTopics through it answered COORDINATOR_NOT_AVAILABLE."""
    store = MemoryRecordStore(partitions=1)
    first = make_runtime(store, 1)
    first.share_partitions(1).joined()
    await first.start()
    try:
        await first.create_topics([NewTopic(name="t", num_partitions=1)])
        await first.create_topics([NewTopic(name="u", num_partitions=1)])
        assert codes_of(await first.delete_topics(["u"])) == [ErrorCode.NONE]
        store.expire_journal(2**62)
        later = make_runtime(MemoryRecordStore(_data=store._data), 1)
        parts = later.share_partitions(2)
        await later.start()
        parts.joined()
        try:
            assert parts.cluster_offset == store.last_offset(CLUSTER_LOG) == 2
            parts.follow_cluster_log(store.last_offset(CLUSTER_LOG))
            await asyncio.wait_for(parts.caught_up(), 5)
            fresh_id = first.ids.new_topic_id()  # the nodes' sequential ids would collide
            made = await later.create_topics(
                [NewTopic(name="w", num_partitions=1, topic_id=fresh_id)]
            )
            assert codes_of(made) == [ErrorCode.NONE]
            assert names(await later.list_topics()) == ["t", "w"]
            assert later.engine.driver.state is RuntimeState.ACTIVE
        finally:
            await later.close()
    finally:
        await first.close()


def codes_of(results: Any) -> list[int]:
    return [r.error_code for r in results]


async def test_reads_are_answered_once_the_cluster_log_is_loaded_while_partitions_load() -> None:
    """At start the cluster log is loaded first: while a coordinator partition still loads,
    ListTopics and DescribeAcls answer from it (Metadata lists the topics a client has, not
    none); group requests still get COORDINATOR_LOAD_IN_PROGRESS."""
    async with started_admin() as before:  # topic t and the ACL on "kept", durable
        data = before.store._data
    store = MemoryRecordStore(_data=data)
    partition_read, go_on = threading.Event(), threading.Event()
    load_groups = store.load_groups

    def held_load_groups(log: int) -> Any:
        partition_read.set()
        go_on.wait(10)
        return load_groups(log)

    store.load_groups = held_load_groups  # type: ignore[method-assign]
    rt = make_runtime(store, 1)
    loading = Admin(rt, store, CoordinatorService(rt))
    starting = asyncio.ensure_future(rt.start())
    try:
        assert await asyncio.to_thread(partition_read.wait, 10)
        assert rt.state is RuntimeState.LOADING
        assert await at_once(loading.topics()) == {"t": 2}
        assert await at_once(loading.acls()) == ["kept"]
        with pytest.raises(CoordinatorLoadInProgressError):
            await rt.describe_group("g")
    finally:
        go_on.set()
        await starting
        await rt.close()
