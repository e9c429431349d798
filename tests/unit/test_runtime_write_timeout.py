"""The write timeout (``offsets.commit.timeout.ms``, driver.py "Write timeout"): a request whose
answer waits for an append held up in the store (the memory store's gate: as a COMMIT waiting
for PostgreSQL) is answered at the timeout — COORDINATOR_NOT_AVAILABLE, OffsetFetch
NOT_COORDINATOR, as Kafka's group coordinator answers a timed-out write — while the write goes
on: once it lands its records stand, if it fails the failure path runs as ever. Nothing is
acknowledged before the held batch is durable."""

from __future__ import annotations

import asyncio
import time

import pytest
from builders import G as CG
from builders import (
    classic_assignment,
    classic_join_req,
    classic_record,
    commit,
    join,
    make_runtime,
    stored_journal,
    written,
)
from test_runtime_core import started

from coordinator.core import codec
from coordinator.core.errors import (
    CoordinatorNotAvailableError,
    ErrorCode,
    RebalanceInProgressError,
)
from coordinator.core.offsets import OffsetFetchGroup
from coordinator.core.records import GroupMetadataValue, OffsetCommitValue
from coordinator.core.topics import NewTopic
from coordinator.harness import subscription
from coordinator.runtime import CoordinatorRuntime, RuntimeState
from coordinator.runtime.driver import WriteTimeoutError
from coordinator.runtime.store import MemoryRecordStore, StoredRecord
from legacy_bridge import messages as cm

TIMEOUT_MS = 300
TIMEOUT_S = TIMEOUT_MS / 1000
TIMED_OUT = "did not complete within offsets.commit.timeout.ms \\(300 ms\\)"


async def runtime(store: MemoryRecordStore) -> CoordinatorRuntime:
    rt = await started(make_runtime(store, 1, **{"offsets.commit.timeout.ms": str(TIMEOUT_MS)}))
    await rt.create_topics([NewTopic(name="t", num_partitions=2)])
    return rt


async def fetched(rt: CoordinatorRuntime, group: str) -> tuple[int, dict[tuple[str, int], int]]:
    (answer,) = await rt.offset_fetch([OffsetFetchGroup(group_id=group)])
    offsets = {
        (t.name, p.partition_index): p.committed_offset for t in answer.topics for p in t.partitions
    }
    return answer.error_code, offsets


async def answered_at(aw: asyncio.Future[object]) -> tuple[float, BaseException | None]:
    """When ``aw`` was answered (``time.monotonic()``; bounded wait) and the error it was
    answered with."""
    try:
        await asyncio.wait_for(asyncio.shield(aw), 5)
    except TimeoutError:
        raise AssertionError("not answered within 5 s") from None
    except BaseException:  # noqa: BLE001 - the answer under test
        pass
    return time.monotonic(), aw.exception()


def committed_in_store(store: MemoryRecordStore, group: str) -> list[int]:
    """The offsets of ``group``'s commits in the store's journal, in order."""
    out = []
    for entry in stored_journal(store):
        decoded = codec.decode(entry.key, entry.value)
        if decoded.group_id == group and isinstance(decoded.value, OffsetCommitValue):
            out.append(decoded.value.offset)
    return out


async def test_requests_waiting_for_a_held_write_are_answered_at_the_timeout() -> None:
    """A commit and a join in a held append, a commit queued in the next batch and a fetch
    waiting behind them: each is answered at its own timeout (counted from when it began to
    wait), not when the append resolves; once the append lands, what they wrote stands and
    the coordinator serves as before (a write released within the timeout is acknowledged)."""
    store = MemoryRecordStore(partitions=1)
    rt = await runtime(store)
    first = await rt.offset_commit(commit("g", {("t", 0): 1}))
    assert first.topics[0].partitions[0].error_code == 0
    store.hold_appends()
    sent = time.monotonic()
    held = asyncio.ensure_future(rt.offset_commit(commit("g", {("t", 0): 2})))
    joining = asyncio.ensure_future(rt.heartbeat(join("h")))
    await asyncio.sleep(0.2)
    sent_later = time.monotonic()
    later = asyncio.ensure_future(rt.offset_commit(commit("g", {("t", 0): 3})))
    # A read_committed consumer's fetch (require_stable) waits for the group's writes; a
    # plain fetch is answered at once from the committed offsets.
    reading = asyncio.ensure_future(
        rt.offset_fetch([OffsetFetchGroup(group_id="g", require_stable=True)])
    )
    assert await asyncio.wait_for(fetched(rt, "g"), 0.1) == (0, {("t", 0): 1})
    for waiting in (held, joining):
        at, error = await answered_at(waiting)
        assert isinstance(error, WriteTimeoutError), error
        assert error.code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert "unknown" in error.message
        with pytest.raises(CoordinatorNotAvailableError, match=TIMED_OUT):
            raise error
        assert TIMEOUT_S - 0.01 <= at - sent <= TIMEOUT_S + 1.0, at - sent
    # The later requests: at their own timeout (they began to wait 0.2 s after), never
    # acknowledged before the batch ahead of theirs is durable.
    at, error = await answered_at(later)
    assert isinstance(error, WriteTimeoutError), error
    assert TIMEOUT_S - 0.01 <= at - sent_later <= TIMEOUT_S + 1.0, at - sent_later
    (fetch,) = await reading
    assert fetch.error_code == ErrorCode.NOT_COORDINATOR  # Kafka's OffsetFetch remap
    assert "offsets.commit.timeout.ms" in (fetch.error_message or "")
    assert committed_in_store(store, "g") == [1]  # nothing of the held batches written yet
    store.release_appends()
    await rt.flush()
    # The held write and the one queued behind it landed: their records stand.
    assert committed_in_store(store, "g") == [1, 2, 3]
    assert await fetched(rt, "g") == (0, {("t", 0): 3})
    assert "h" in rt.snapshot()["groups"]
    assert rt.state is RuntimeState.ACTIVE
    # Serving as before: a write released within the timeout is acknowledged, and no timeout
    # fires after it.
    store.hold_appends()
    held = asyncio.ensure_future(rt.offset_commit(commit("g", {("t", 0): 4})))
    await asyncio.sleep(0.05)
    store.release_appends()
    assert (await held).topics[0].partitions[0].error_code == 0
    await asyncio.sleep(TIMEOUT_S)
    assert await fetched(rt, "g") == (0, {("t", 0): 4})
    await rt.close()


async def test_a_held_write_that_then_fails_rolls_back_as_any_failed_write() -> None:
    """Answered at the timeout, then the append fails: the state goes back to the start of
    the failed batch (the failure path, unchanged) and the coordinator goes on serving."""
    store = MemoryRecordStore(partitions=1)
    rt = await runtime(store)
    await rt.offset_commit(commit("g", {("t", 0): 1}))
    before = rt.snapshot()
    store.hold_appends()
    store.fail_next_appends(1)
    sent = time.monotonic()
    held = asyncio.ensure_future(rt.offset_commit(commit("g", {("t", 0): 2})))
    joining = asyncio.ensure_future(rt.heartbeat(join("h")))
    for waiting in (held, joining):
        at, error = await answered_at(waiting)
        assert isinstance(error, WriteTimeoutError) and at - sent <= TIMEOUT_S + 1.0, error
    # the state holds the write in flight, as Kafka's does
    assert list(rt.snapshot()["groups"]) == ["h"] and not before["groups"]
    store.release_appends()
    await rt.flush()
    assert rt.snapshot() == before
    assert rt.stats["failed_batches"] == 1
    assert await fetched(rt, "g") == (0, {("t", 0): 1})
    assert committed_in_store(store, "g") == [1]
    resp = await rt.offset_commit(commit("g", {("t", 0): 5}))
    assert resp.topics[0].partitions[0].error_code == 0
    assert await fetched(rt, "g") == (0, {("t", 0): 5})
    await rt.close()


async def generation_six(
    store: MemoryRecordStore,
) -> tuple[CoordinatorRuntime, asyncio.Future[cm.SyncGroupResponse]]:
    """A Stable classic group (A and B, generation 5) loaded; both rejoin: generation 6 in
    CompletingRebalance, A the leader, B's SyncGroup waiting for A's."""
    key, value = codec.encode(classic_record())
    store.append([StoredRecord(key, value, CG)], 1)
    rt = await started(make_runtime(store, 1, **{"offsets.commit.timeout.ms": str(TIMEOUT_MS)}))
    rejoin_a = asyncio.ensure_future(rt.classic_join(classic_join_req("A")))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not rejoin_a.done()  # the leader's rejoin waits for B at the barrier
    joined_b = await asyncio.wait_for(rt.classic_join(classic_join_req("B")), 5)
    joined_a = await asyncio.wait_for(rejoin_a, 5)
    assert (joined_a.leader, joined_a.generation_id, joined_b.generation_id) == ("A", 6, 6)
    follower = asyncio.ensure_future(rt.classic_sync(sync(6, "B")))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not follower.done()  # B waits for the leader's assignment
    return rt, follower


def sync(generation: int, member: str, *assignments: tuple[str, bytes]) -> cm.SyncGroup:
    return cm.SyncGroup(
        group_id=CG, generation_id=generation, member_id=member, assignments=assignments
    )


PLAN = (("A", classic_assignment(0, 1)), ("B", classic_assignment(2, 3)))


def classic_state(rt: CoordinatorRuntime) -> tuple[str, int, list[bytes]]:
    """The classic group in memory (a read would wait for the held write): its state,
    generation and members' assignments."""
    group = rt.shards[0].classic_groups[CG]
    return group.state.value, group.generation, [x.assignment for x in group.members.values()]


def generations_in_store(store: MemoryRecordStore) -> list[tuple[int, tuple[bytes, ...]]]:
    """The classic group's records in the store, in order: generation and assignments."""
    out = []
    for entry in stored_journal(store):
        decoded = codec.decode(entry.key, entry.value)
        if decoded.group_id == CG and isinstance(decoded.value, GroupMetadataValue):
            out.append(
                (decoded.value.generation, tuple(x.assignment for x in decoded.value.members))
            )
    return out


async def next_generation(rt: CoordinatorRuntime, generation: int) -> None:
    """The reset asked both members to rejoin: they do, and the leader's SyncGroup gives each
    its assignment of the next generation."""
    joining_a = asyncio.ensure_future(rt.classic_join(classic_join_req("A")))
    joined_b = await asyncio.wait_for(rt.classic_join(classic_join_req("B")), 5)
    joined_a = await asyncio.wait_for(joining_a, 5)
    assert (joined_a.generation_id, joined_b.generation_id, joined_a.leader) == (
        generation,
        generation,
        "A",
    )
    follower = asyncio.ensure_future(rt.classic_sync(sync(generation, "B")))
    leader = await asyncio.wait_for(rt.classic_sync(sync(generation, "A", *PLAN)), 5)
    got = await asyncio.wait_for(follower, 5)
    assert (leader.error_code, leader.assignment) == (0, classic_assignment(0, 1))
    assert (got.error_code, got.assignment) == (0, classic_assignment(2, 3))


async def test_syncs_answered_by_a_held_write_are_answered_at_the_timeout() -> None:
    """A classic rebalance's leader SyncGroup whose write (the generation's assignment) is
    held: the follower's SyncGroup waiting for it (answered by the held batch's completion)
    and the leader's (waiting for its own batch) both get COORDINATOR_NOT_AVAILABLE at the
    timeout, as Kafka's SyncGroup answers a timed-out write; and, as Kafka's SyncGroup append
    future failing, the group is reset at the timeout — no assignment, PreparingRebalance at
    generation 6 — so the members rejoin. The held write lands later: its generation-6 record
    stands, and generation 7's record follows it (before: the group stayed Stable at
    generation 6, B's SyncGroup sent again got the assignment the members had been told had
    failed, and nothing rebalanced)."""
    store = MemoryRecordStore(partitions=1)
    rt, follower = await generation_six(store)
    store.hold_appends()
    sent = time.monotonic()
    leader = asyncio.ensure_future(rt.classic_sync(sync(6, "A", *PLAN)))
    for waiting in (follower, leader):
        at, error = await answered_at(waiting)
        assert isinstance(error, WriteTimeoutError), error
        assert TIMEOUT_S - 0.01 <= at - sent <= TIMEOUT_S + 1.0, at - sent
    assert classic_state(rt) == ("PreparingRebalance", 6, [b"", b""])
    with pytest.raises(RebalanceInProgressError):
        await asyncio.wait_for(rt.classic_sync(sync(6, "B")), 5)
    store.release_appends()
    await rt.flush()
    assert generations_in_store(store) == [
        (5, (classic_assignment(0, 1), classic_assignment(2, 3))),
        (6, (classic_assignment(0, 1), classic_assignment(2, 3))),
    ]
    assert classic_state(rt) == ("PreparingRebalance", 6, [b"", b""])
    await next_generation(rt, 7)
    assert [g for g, _a in generations_in_store(store)] == [5, 6, 7]
    await rt.close()


async def test_a_held_assignment_write_that_then_fails_resets_the_rolled_back_group() -> None:
    """Held past the timeout (reset as above), then the append fails: the rollback takes the
    group back to before the leader's SyncGroup (CompletingRebalance, generation 6) and the
    core hears of the failure too, so the group is reset again — nothing of generation 6 is
    in the store, and the next generation is 7."""
    store = MemoryRecordStore(partitions=1)
    rt, follower = await generation_six(store)
    store.hold_appends()
    store.fail_next_appends(1)
    leader = asyncio.ensure_future(rt.classic_sync(sync(6, "A", *PLAN)))
    for waiting in (follower, leader):
        assert isinstance((await answered_at(waiting))[1], WriteTimeoutError)
    assert classic_state(rt) == ("PreparingRebalance", 6, [b"", b""])
    store.release_appends()
    await rt.flush()
    assert rt.stats["failed_batches"] == 1
    assert classic_state(rt) == ("PreparingRebalance", 6, [b"", b""])
    assert rt.shards[0].classic_groups[CG].previous_state.value == "CompletingRebalance"
    assert [g for g, _a in generations_in_store(store)] == [5]
    await next_generation(rt, 7)
    assert [g for g, _a in generations_in_store(store)] == [5, 7]
    await rt.close()


async def test_a_failed_assignment_write_answers_the_follower_and_rebalances() -> None:
    """The leader's SyncGroup write fails at once: the leader and the follower waiting for its
    assignment both get COORDINATOR_NOT_AVAILABLE (before: the follower went on waiting, for
    the SyncGroup timeout), the group rebalances, and the next generation is written."""
    store = MemoryRecordStore(partitions=1)
    rt, follower = await generation_six(store)
    store.fail_next_appends(1)
    with pytest.raises(CoordinatorNotAvailableError, match="The write to the record store failed"):
        await asyncio.wait_for(rt.classic_sync(sync(6, "A", *PLAN)), 5)
    got = await asyncio.wait_for(follower, 5)
    assert got.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert (got.error_message or "").startswith("The write to the record store failed")
    assert classic_state(rt) == ("PreparingRebalance", 6, [b"", b""])
    await next_generation(rt, 7)
    assert [g for g, _a in generations_in_store(store)] == [5, 7]
    await rt.close()


async def test_one_request_waiting_for_several_writes_is_answered_at_one_timeout() -> None:
    """A stable OffsetFetch of three groups whose commits are in a held append waits for that
    append once per group: the three waits start together, so the request is answered at one
    write timeout, not three after one another (each group NOT_COORDINATOR)."""
    store = MemoryRecordStore(partitions=1)
    rt = await runtime(store)
    groups = ["g1", "g2", "g3"]
    store.hold_appends()
    held = [asyncio.ensure_future(rt.offset_commit(commit(g, {("t", 0): 1}))) for g in groups]
    await asyncio.sleep(0)
    sent = time.monotonic()
    reading = asyncio.ensure_future(
        rt.offset_fetch([OffsetFetchGroup(group_id=g, require_stable=True) for g in groups])
    )
    at, error = await answered_at(reading)
    assert error is None
    assert [a.error_code for a in reading.result()] == [ErrorCode.NOT_COORDINATOR] * 3  # type: ignore[attr-defined]
    assert TIMEOUT_S - 0.01 <= at - sent <= 1.8 * TIMEOUT_S, at - sent
    for waiting in held:
        assert isinstance((await answered_at(waiting))[1], WriteTimeoutError)
    store.release_appends()
    await rt.flush()
    assert [committed_in_store(store, g) for g in groups] == [[1], [1], [1]]
    await rt.close()


async def test_a_classic_members_sync_in_a_consumer_group_is_answered_and_changes_nothing() -> None:
    """A classic member of a consumer group: its SyncGroup writes nothing (Kafka's
    classicGroupSyncToConsumerGroup: no records, its append future acts only on success), so
    one waiting for a held write is answered COORDINATOR_NOT_AVAILABLE at the timeout and the
    group is not reset: once the write lands, its SyncGroup again gets the same assignment,
    at the same generation, with no record written for it."""
    store = MemoryRecordStore(partitions=1)
    rt = await runtime(store)
    await rt.heartbeat(join("g"))
    joined = await asyncio.wait_for(
        rt.classic_join(
            cm.JoinGroup(
                group_id="g",
                session_timeout_ms=45_000,
                rebalance_timeout_ms=60_000,
                member_id="",
                group_instance_id="s1",
                protocol_type="consumer",
                protocols=(("range", subscription(["t"])),),
            )
        ),
        5,
    )
    member, generation = joined.member_id, joined.generation_id

    def again() -> cm.SyncGroup:
        return cm.SyncGroup(
            group_id="g", generation_id=generation, member_id=member, group_instance_id="s1"
        )

    first = await asyncio.wait_for(rt.classic_sync(again()), 5)
    assert first.error_code == 0
    before = (rt.snapshot(), written(store))
    store.hold_appends()
    held = asyncio.ensure_future(rt.offset_commit(commit("other", {("t", 0): 1})))
    await asyncio.sleep(0)
    waiting = asyncio.ensure_future(rt.classic_sync(again()))
    for answered in (held, waiting):
        assert isinstance((await answered_at(answered))[1], WriteTimeoutError)
    store.release_appends()
    await rt.flush()
    assert written(store) == before[1] + 1  # the commit, nothing of the group's
    assert rt.snapshot()["groups"] == before[0]["groups"]
    assert await asyncio.wait_for(rt.classic_sync(again()), 5) == first
    await rt.close()
