"""kip848.client against a real ``kip848 serve``: joining, hand-offs, commits, fencing, leaving,
static members, the rebalance timeout, and the blocking wrapper.

Servers run on the system clock with a short heartbeat interval so the stories take seconds.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator

import pytest
from conftest import ServerProcess

from kip848.client import (
    BlockingGroupMember,
    CommitFailedError,
    ErrorCode,
    GroupMember,
    MemberFailedError,
    MemberState,
    TopicPartition,
)
from kip848.client.types import topic_id_from_bytes
from kip848.v1 import admin_pb2, common_pb2, offsets_pb2, offsets_pb2_grpc

HB_MS = 300
FAST = (
    "--set",
    "group.consumer.min.heartbeat.interval.ms=100",
    "--set",
    f"group.consumer.heartbeat.interval.ms={HB_MS}",
    "--set",
    "group.consumer.min.session.timeout.ms=1000",
    "--set",
    "group.consumer.session.timeout.ms=4000",
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    s = ServerProcess(tmp_path_factory.mktemp("client") / "data", *FAST, clock="system")
    try:
        yield s
    finally:
        assert s.stop() == 0, s.stderr_text()


class Log:
    """Callbacks that record (kind, sorted partitions) per member."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, list[int]]] = []

    def callbacks(self, who: str, *, revoke_s: float = 0.0) -> dict:
        def make(kind: str, delay: float = 0.0):
            async def cb(parts: frozenset[TopicPartition]) -> None:
                if delay:
                    await asyncio.sleep(delay)
                self.events.append((who, kind, sorted(tp.partition for tp in parts)))

            return cb

        return {
            "on_assigned": make("assigned"),
            "on_revoked": make("revoked", revoke_s),
            "on_lost": make("lost"),
        }


def owned(member: GroupMember) -> list[int]:
    return sorted(tp.partition for tp in member.assignment)


async def test_two_members_split_then_one_leaves(server: ServerProcess) -> None:
    topic_id = server.create_topic("split", 4)
    log = Log()
    a = GroupMember(
        server.address, "split-g", topics=["split"], client_id="app-a", **log.callbacks("a")
    )
    b = GroupMember(server.address, "split-g", topics=["split"], **log.callbacks("b"))
    async with asyncio.timeout(20):
        await a.start()
        await a.wait_stable()
        tid = topic_id_from_bytes(topic_id)
        assert a.assignment == {TopicPartition("split", p, tid) for p in range(4)}
        await b.start()
        await a.wait_until(lambda: len(a.assignment) == 2 and len(b.assignment) == 2)
        await b.wait_stable()
        await a.wait_stable()
    assert sorted(owned(a) + owned(b)) == [0, 1, 2, 3]
    # Revoke before assign: a gave up exactly what b received, and b got it only after.
    a_revoked = next(e for e in log.events if e[:2] == ("a", "revoked"))
    b_assigned = next(e for e in log.events if e[:2] == ("b", "assigned"))
    assert a_revoked[2] == b_assigned[2] == owned(b)
    assert log.events.index(a_revoked) < log.events.index(b_assigned)
    # The coordinator sees both members, the client id from the metadata, ids by topic id.
    desc = server.describe("split-g").groups[0]
    members = {m.member_id: m for m in desc.members}
    assert set(members) == {a.member_id, b.member_id}
    assert members[a.member_id].client_id == "app-a"
    assert members[b.member_id].client_id == "kip848-python"
    for m in (a, b):
        [tp] = members[m.member_id].assignment.topic_partitions
        assert (tp.topic_id, sorted(tp.partitions)) == (topic_id, owned(m))
        assert members[m.member_id].member_epoch == m.member_epoch
    # a leaves (epoch -1): b takes everything.
    await a.close()
    assert a.state is MemberState.UNSUBSCRIBED and owned(a) == []
    async with asyncio.timeout(20):
        await b.wait_until(lambda: owned(b) == [0, 1, 2, 3])
        await b.wait_stable()
    assert [m.member_id for m in server.describe("split-g").groups[0].members] == [b.member_id]
    await b.close()
    assert server.describe("split-g").groups[0].group_state == "Empty"


async def test_commit_with_the_member_epoch_and_read_back(server: ServerProcess) -> None:
    server.create_topic("commits", 2)
    a = GroupMember(server.address, "commit-g", topics=["commits"])
    async with asyncio.timeout(20):
        await a.start()
        await a.wait_stable()
        tps = sorted(a.assignment)
        await a.commit({tps[0]: 10, tps[1]: 20}, metadata="m")
        assert await a.committed(tps) == {tps[0]: 10, tps[1]: 20}
        # By name (no topic id) works too.
        by_name = TopicPartition("commits", 0)
        await a.commit({by_name: 11})
        assert await a.committed([by_name]) == {by_name: 11}
        # Async commit: a task with the outcome.
        await a.commit_async({tps[1]: 21})
        assert (await a.committed(tps))[tps[1]] == 21
        # Only owned partitions can be committed.
        with pytest.raises(CommitFailedError) as info:
            await a.commit({TopicPartition("commits", 7, tps[0].topic_id): 1})
        assert info.value.code == ErrorCode.STALE_MEMBER_EPOCH
        assert "not owned" in str(info.value)
        # A topic the coordinator does not know fails for good, with its code.
        with pytest.raises(CommitFailedError) as info:
            a.store_offsets({TopicPartition("nope", 0): 1})
            await a.commit({TopicPartition("commits", 0): 12, TopicPartition("nope", 0): 1})
    await a.close()


async def revoking_at_a_stale_epoch(
    server: ServerProcess, name: str, events: list[tuple[str, list[int]]]
) -> tuple[GroupMember, asyncio.Event, bytes, dict[int, TopicPartition], int]:
    """Member ``a`` of group ``{name}-g`` (topic ``name``, 2 partitions) revoking one of its
    partitions at epoch 1 — on_revoked waits for the returned event — while the coordinator has
    moved it to epoch 2 without it: a commit of either partition at epoch 1 is stale.

    Stale by KIP-1251's rule (accepted only if every partition committed was assigned to the
    member at or before the commit's epoch): the coordinator sees the revocation acknowledged
    (by a heartbeat on the member's behalf, as a zombie copy of it would send) while on_revoked
    still runs. Returns (a, release, the topic id, a's partitions by index, the one revoked);
    ``events`` gets a's callbacks."""
    topic_id = server.create_topic(name, 2)
    # Long heartbeat intervals in this group, and no push: the member heartbeats only when the
    # test has it.
    configs = {"consumer.heartbeat.interval.ms": "10000", "consumer.session.timeout.ms": "30000"}
    r = server.admin.IncrementalAlterConfigs(
        admin_pb2.IncrementalAlterConfigsRequest(
            resources=[
                admin_pb2.IncrementalAlterConfigsRequest.Resource(
                    resource_type=16,
                    resource_name=f"{name}-g",
                    configs=[
                        admin_pb2.IncrementalAlterConfigsRequest.AlterableConfig(
                            name=key, config_operation=0, value=value
                        )
                        for key, value in configs.items()
                    ],
                )
            ]
        ),
        timeout=10,
    )
    assert [x.error_code for x in r.responses] == [0], r
    revoking, release = asyncio.Event(), asyncio.Event()

    async def on_revoked(parts: frozenset[TopicPartition]) -> None:
        events.append(("revoked", sorted(tp.partition for tp in parts)))
        revoking.set()
        await release.wait()

    async def on_lost(parts: frozenset[TopicPartition]) -> None:
        events.append(("lost", sorted(tp.partition for tp in parts)))

    a = GroupMember(
        server.address,
        f"{name}-g",
        topics=[name],
        on_revoked=on_revoked,
        on_lost=on_lost,
        push=False,
    )
    await a.start()
    await a.wait_stable()
    await a.wait_until(lambda: not a.sans_io.heartbeat_in_flight)  # acknowledged
    assert (a.member_epoch, owned(a)) == (1, [0, 1])
    # Another member joins (epoch 2): a's next heartbeat revokes one partition from a.
    joined = server.heartbeat(
        group_id=f"{name}-g",
        member_id="other",
        member_epoch=0,
        rebalance_timeout_ms=30000,
        subscribed_topic_names=common_pb2.TopicNames(names=[name]),
        topic_partitions=common_pb2.TopicPartitionsList(),
    )
    assert (joined.error_code, joined.member_epoch) == (0, 2)
    await a.update_subscription([name])  # a heartbeat now
    await revoking.wait()
    await a.wait_until(lambda: not a.sans_io.heartbeat_in_flight)
    [(_kind, [given])] = events
    kept = 1 - given
    assert (a.member_epoch, owned(a)) == (1, [0, 1])  # still revoking `given`
    # The revocation acknowledged on a's behalf: the coordinator moves a to epoch 2 with `kept`.
    acked = server.heartbeat(
        group_id=f"{name}-g",
        member_id=a.member_id,
        member_epoch=1,
        topic_partitions=common_pb2.TopicPartitionsList(
            items=[common_pb2.TopicPartitions(topic_id=topic_id, partitions=[kept])]
        ),
    )
    assert (acked.error_code, acked.member_epoch) == (0, 2)
    return a, release, topic_id, {tp.partition: tp for tp in a.assignment}, given


async def test_stale_member_epoch_is_retried_once_the_epoch_is_current(
    server: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """A commit whose epoch is really stale (revoking_at_a_stale_epoch) is answered
    STALE_MEMBER_EPOCH for the whole commit; the client retries it once the member has learned
    its new epoch, and it is accepted then: once on_revoked returns, the member's own
    acknowledgement takes it to epoch 3, where the target has given the partition back
    (assigned at epoch 3), and the retried commit passes. (An older epoch alone is not stale:
    commits of partitions owned since then are accepted, test_offsets.)"""
    events: list[tuple[str, list[int]]] = []
    async with asyncio.timeout(20):
        a, release, _topic_id, tps, given = await revoking_at_a_stale_epoch(server, "stale", events)
        kept = 1 - given
        # The other member leaves (epoch 3): the target gives `given` back to a.
        left = server.heartbeat(group_id="stale-g", member_id="other", member_epoch=-1)
        assert left.error_code == 0
        caplog.set_level(logging.INFO, logger="kip848.client")
        commit = asyncio.ensure_future(a.commit({tps[kept]: 4, tps[given]: 5}))
        while "STALE_MEMBER_EPOCH at epoch 1" not in caplog.text:
            assert not commit.done(), "the commit at epoch 1 was not answered STALE_MEMBER_EPOCH"
            await asyncio.sleep(0.01)
        release.set()  # on_revoked returns: a acknowledges, learns epoch 3, and retries
        await commit
        assert a.member_epoch == 3
        assert await a.committed([tps[kept], tps[given]]) == {tps[kept]: 4, tps[given]: 5}
    await a.close()


async def test_a_commit_waiting_for_a_new_epoch_raises_commit_failed_when_the_member_fails(
    server: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """A commit answered STALE_MEMBER_EPOCH waits for the member's next epoch; the member fails
    meanwhile (a fatal heartbeat error): the commit raises CommitFailedError naming each
    partition's STALE_MEMBER_EPOCH, as documented (an on_revoked committing its offsets, or
    auto-commit after it, expects nothing else), and every partition still ends with exactly
    one callback."""
    events: list[tuple[str, list[int]]] = []
    async with asyncio.timeout(20):
        a, release, _topic_id, tps, given = await revoking_at_a_stale_epoch(
            server, "stalefail", events
        )
        kept = 1 - given
        caplog.set_level(logging.INFO, logger="kip848.client")
        commit = asyncio.ensure_future(a.commit({tps[kept]: 4, tps[given]: 5}))
        while "STALE_MEMBER_EPOCH at epoch 1" not in caplog.text:
            assert not commit.done(), "the commit at epoch 1 was not answered STALE_MEMBER_EPOCH"
            await asyncio.sleep(0.01)
        # Fatal: a topic name over group.coordinator.identifier.max.bytes (1,024) is refused
        # before anything else (an invalid regex would be checked after the member's epoch).
        await a.update_subscription(["x" * 2_000])
        with pytest.raises(CommitFailedError) as info:
            await commit
        assert info.value.errors == {
            tps[kept]: ErrorCode.STALE_MEMBER_EPOCH,
            tps[given]: ErrorCode.STALE_MEMBER_EPOCH,
        }
        assert a.failure is not None
        assert a.failure.code == ErrorCode.INVALID_REQUEST
        release.set()
        await a.close()
    # `given` ended with its on_revoked, `kept` with on_lost once on_revoked returned.
    assert events == [("revoked", [given]), ("lost", [kept])]


async def test_a_fenced_member_calls_on_lost_and_rejoins_with_the_same_id(
    server: ServerProcess,
) -> None:
    server.create_topic("fence", 3)
    log = Log()
    a = GroupMember(server.address, "fence-g", topics=["fence"], **log.callbacks("a"))
    async with asyncio.timeout(20):
        await a.start()
        await a.wait_stable()
        member_id = a.member_id
        # Someone removes the member (here: a leave heartbeat on its behalf).
        r = server.heartbeat(group_id="fence-g", member_id=member_id, member_epoch=-1)
        assert r.error_code == 0
        await a.wait_until(lambda: ("a", "lost", [0, 1, 2]) in log.events)
        await a.wait_until(lambda: owned(a) == [0, 1, 2])
        await a.wait_stable()
    assert a.member_id == member_id
    assert [e[1] for e in log.events] == ["assigned", "lost", "assigned"]
    await a.close()


async def test_static_member_leaves_with_minus_2_and_its_successor_takes_over(
    server: ServerProcess,
) -> None:
    server.create_topic("static", 2)
    a = GroupMember(server.address, "static-g", topics=["static"], instance_id="host-1")
    async with asyncio.timeout(20):
        await a.start()
        await a.wait_stable()
        await a.close()
        [m] = server.describe("static-g").groups[0].members
        assert (m.member_id, m.instance_id, m.member_epoch) == (a.member_id, "host-1", -2)
        b = GroupMember(server.address, "static-g", topics=["static"], instance_id="host-1")
        await b.start()
        await b.wait_until(lambda: owned(b) == [0, 1])
        await b.wait_stable()
        [m] = server.describe("static-g").groups[0].members
        assert (m.member_id, m.instance_id) == (b.member_id, "host-1")
        await b.close(leave_group=True)  # -1: gone for good
        assert server.describe("static-g").groups[0].members == []


async def test_a_revocation_slower_than_the_rebalance_timeout_loses_the_partitions(
    server: ServerProcess,
) -> None:
    server.create_topic("slow", 4)
    log = Log()
    a = GroupMember(
        server.address,
        "slow-g",
        topics=["slow"],
        rebalance_timeout_ms=1_000,
        **log.callbacks("a", revoke_s=2.5),
    )
    b = GroupMember(server.address, "slow-g", topics=["slow"], **log.callbacks("b"))
    async with asyncio.timeout(30):
        await a.start()
        await a.wait_stable()
        await b.start()
        started = time.monotonic()
        await b.wait_until(lambda: len(b.assignment) == 4)
        # The coordinator fenced a at its rebalance timeout (1 s) and gave everything to b,
        # long before a's on_revoked returned (2.5 s).
        assert time.monotonic() - started < 2.3
        assert a.state is MemberState.FENCED and a.assignment == frozenset()
        await a.wait_until(lambda: any(e[:2] == ("a", "lost") for e in log.events))
        # When on_revoked returned, a rejoined (same member id) and got its share again.
        await a.wait_until(lambda: a.state is MemberState.STABLE and len(a.assignment) == 2)
        await b.wait_until(lambda: b.state is MemberState.STABLE and len(b.assignment) == 2)
    kinds = [e[1] for e in log.events if e[0] == "a"]
    assert kinds == ["assigned", "revoked", "lost", "assigned"]
    revoked = next(e[2] for e in log.events if e[:2] == ("a", "revoked"))
    lost = next(e[2] for e in log.events if e[:2] == ("a", "lost"))
    assert sorted(revoked + lost) == [0, 1, 2, 3]  # each partition ended exactly once
    await a.close()
    await b.close()


async def test_a_non_retriable_error_fails_the_member(server: ServerProcess) -> None:
    server.create_topic("fatal", 1)
    a = GroupMember(server.address, "fatal-g", topics=["fatal"], server_assignor="nope")
    await a.start()
    with pytest.raises(MemberFailedError) as info:
        async with asyncio.timeout(20):
            await a.wait_joined()
    assert info.value.code == ErrorCode.UNSUPPORTED_ASSIGNOR
    assert a.state is MemberState.FATAL
    await a.close()


def test_the_blocking_wrapper(server: ServerProcess) -> None:
    server.create_topic("blocking", 2)
    seen: list[tuple[str, list[int]]] = []

    def on_assigned(parts: frozenset[TopicPartition]) -> None:
        seen.append(("assigned", sorted(tp.partition for tp in parts)))
        # Callbacks run on their own thread: they may call the member (commit) while the
        # heartbeat thread keeps going.
        member.commit({tp: 100 + tp.partition for tp in parts})

    def on_revoked(parts: frozenset[TopicPartition]) -> None:
        seen.append(("revoked", sorted(tp.partition for tp in parts)))

    member = BlockingGroupMember(
        server.address,
        "blocking-g",
        topics=["blocking"],
        on_assigned=on_assigned,
        on_revoked=on_revoked,
        enable_auto_commit=True,
    )
    with member:
        member.wait_stable(timeout=20)
        tps = sorted(member.assignment)
        assert member.committed(tps) == {tps[0]: 100, tps[1]: 101}
        member.store_offsets({tps[0]: 555})
        future = member.commit_async({tps[1]: 777})
        assert future.result(timeout=20) is None
    # Closing committed the stored offset (auto-commit after on_revoked) and left the group.
    assert seen == [("assigned", [0, 1]), ("revoked", [0, 1])]
    fetched = offsets_pb2_grpc.OffsetServiceStub(server.channel).OffsetFetch(
        offsets_pb2.OffsetFetchRequest(
            groups=[offsets_pb2.OffsetFetchRequest.Group(group_id="blocking-g")]
        ),
        timeout=10,
    )
    assert {
        p.partition_index: p.committed_offset for p in fetched.groups[0].topics[0].partitions
    } == {tps[0].partition: 555, tps[1].partition: 777}


async def test_close_from_a_callback_is_refused_not_deadlocked(server: ServerProcess) -> None:
    server.create_topic("selfclose", 1)
    errors: list[str] = []

    async def on_assigned(_parts: frozenset[TopicPartition]) -> None:
        try:
            await member.close()
        except RuntimeError as exc:
            errors.append(str(exc))

    member = GroupMember(
        server.address, "selfclose-g", topics=["selfclose"], on_assigned=on_assigned
    )
    async with asyncio.timeout(20):
        await member.start()
        await member.wait_stable()
    assert errors and "from a rebalance callback" in errors[0]
    await member.close()
    assert member.state is MemberState.UNSUBSCRIBED


def test_blocking_close_from_a_callback_is_refused(server: ServerProcess) -> None:
    server.create_topic("selfclose2", 1)
    errors: list[str] = []

    def on_assigned(_parts: frozenset[TopicPartition]) -> None:
        try:
            member.close()
        except RuntimeError as exc:
            errors.append(str(exc))

    member = BlockingGroupMember(
        server.address, "selfclose2-g", topics=["selfclose2"], on_assigned=on_assigned
    )
    with member:
        member.wait_stable(timeout=20)
        assert errors and "from a rebalance callback" in errors[0]
    assert member.state is MemberState.UNSUBSCRIBED


async def test_close_after_a_fatal_error_lets_on_lost_finish(server: ServerProcess) -> None:
    # A service's natural shape: wait_* raises MemberFailedError, ``async with`` closes the
    # member at once. The member's on_lost (a coroutine: it stops the service's workers) has
    # started by then; close() lets it finish (within its timeout) instead of cancelling it.
    server.create_topic("fatal-lost", 2)
    events: list[tuple[str, list[int]]] = []

    async def on_assigned(parts: frozenset[TopicPartition]) -> None:
        events.append(("assigned", sorted(tp.partition for tp in parts)))

    async def on_lost(parts: frozenset[TopicPartition]) -> None:
        events.append(("lost started", sorted(tp.partition for tp in parts)))
        await asyncio.sleep(0.5)  # stopping the workers
        events.append(("lost returned", sorted(tp.partition for tp in parts)))

    a = GroupMember(
        server.address,
        "fatal-lost-g",
        topics=["fatal-lost"],
        on_assigned=on_assigned,
        on_lost=on_lost,
    )
    with pytest.raises(MemberFailedError) as info:
        async with asyncio.timeout(20), a:
            await a.wait_stable()
            await a.update_subscription(pattern="fatal-(")  # not a regular expression
            await a.wait_until(lambda: False)
    assert info.value.code == ErrorCode.INVALID_REGULAR_EXPRESSION
    assert a.state is MemberState.FATAL
    assert events == [
        ("assigned", [0, 1]),
        ("lost started", [0, 1]),
        ("lost returned", [0, 1]),
    ]


async def test_a_callback_that_raises_cancelled_error_counts_as_returned(
    server: ServerProcess,
) -> None:
    # A callback awaiting something the application cancelled (a worker task) ends with
    # CancelledError though the member did not cancel it: for the protocol it returned, as
    # any callback that raises. Before, the member waited for it for ever: never STABLE, and
    # close() neither revoked nor left (the coordinator kept the member until its session
    # expired).
    server.create_topic("cancelled", 2)
    events: list[tuple[str, list[int]]] = []

    async def on_assigned(parts: frozenset[TopicPartition]) -> None:
        events.append(("assigned", sorted(tp.partition for tp in parts)))
        worker = asyncio.create_task(asyncio.sleep(10))
        worker.cancel()  # the application stops it meanwhile
        await worker

    async def on_revoked(parts: frozenset[TopicPartition]) -> None:
        events.append(("revoked", sorted(tp.partition for tp in parts)))

    a = GroupMember(
        server.address,
        "cancelled-g",
        topics=["cancelled"],
        on_assigned=on_assigned,
        on_revoked=on_revoked,
    )
    async with asyncio.timeout(20):
        await a.start()
        await a.wait_stable()
        await a.close(timeout=5)
    assert events == [("assigned", [0, 1]), ("revoked", [0, 1])]
    assert a.state is MemberState.UNSUBSCRIBED
    assert server.describe("cancelled-g").groups[0].members == []
