"""A failed write rolls back only the state machines with records in it (driver.py "Failure"),
as Kafka rolls back only the partition whose write failed (each partition its own timeline).

A change without records on a shard with no write of its own outstanding is answered at once —
a classic JoinGroup moving its group to PreparingRebalance and parking at the barrier, its
timers armed, or a rejoin completing the rebalance and answering the parked joins — so a failed
write of another shard must not undo it: the parked join would wait for an answer nothing gives
any more (the client hangs until its own timeout), and the members answered generation 6 would
sync with a group back at generation 5. A shard whose first records join a batch
after such a change rolls back to just before those records, not to the batch's start.
Two coordinator partitions: the classic group ``grp`` is on one, group ``other`` on the other.
"""

from __future__ import annotations

import asyncio

import pytest
from builders import G, classic_assignment, classic_join_req, classic_record, commit, make_runtime

from coordinator.core import codec
from coordinator.core.errors import CoordinatorNotAvailableError, ErrorCode
from coordinator.core.offsets import OffsetFetchGroup
from coordinator.core.topics import NewTopic
from coordinator.routing import partition_for
from coordinator.runtime import CoordinatorRuntime
from coordinator.runtime.store import MemoryRecordStore, StoredRecord
from legacy_bridge import messages as cm

OTHER = "other"
"""A group on the other partition than :data:`builders.G`."""
SAME = "y"
"""Another group on :data:`builders.G`'s partition."""


async def runtime() -> tuple[CoordinatorRuntime, MemoryRecordStore]:
    """A Stable classic group G (members A and B, generation 5) on one partition."""
    assert partition_for(G, 2) != partition_for(OTHER, 2) == 1 - partition_for(SAME, 2)
    store = MemoryRecordStore(partitions=2)
    key, value = codec.encode(classic_record())
    store.append([StoredRecord(key, value, G)], 1)
    rt = make_runtime(store)
    await rt.start()
    await rt.create_topics([NewTopic(name="t", num_partitions=2)])
    return rt, store


@pytest.mark.parametrize(
    "own_records", [False, True], ids=["other-shard-only", "own-records-later"]
)
async def test_a_failed_write_keeps_an_answered_change_of_a_shard_without_records_in_it(
    own_records: bool,
) -> None:
    """A's rejoin parks (PreparingRebalance, no record) while another partition's commit is
    held; that write fails. The rejoin stays parked, the group stays in PreparingRebalance, and
    B's rejoin completes the rebalance: both get generation 6. ``own_records``: G's partition
    then also writes (a commit of another group of it) into the batch that fails: that commit
    is rolled back, the rejoin before it is not."""
    rt, store = await runtime()
    shard = rt.shards[partition_for(G, 2)]
    store.hold_appends()
    store.fail_next_appends(1)  # the held batch; the next one fails with it, unwritten
    held = asyncio.ensure_future(rt.offset_commit(commit(OTHER, {("t", 0): 1})))
    await asyncio.sleep(0.05)
    # The next batch, not yet taken: G's partition's first records may join it after the rejoin.
    pending = asyncio.ensure_future(rt.offset_commit(commit(OTHER, {("t", 1): 1})))
    rejoin = asyncio.ensure_future(rt.classic_join(classic_join_req("A")))
    await asyncio.sleep(0.05)
    assert not rejoin.done()  # parked at the barrier, waiting for B
    assert shard.classic_groups.describe([G])[0].group_state == "PreparingRebalance"
    own = (
        asyncio.ensure_future(rt.offset_commit(commit(SAME, {("t", 0): 7})))
        if own_records
        else None
    )
    await asyncio.sleep(0.05)
    (described,) = await asyncio.wait_for(rt.describe_classic_groups([G]), 0.2)
    assert described.group_state == "PreparingRebalance"  # answered: committed
    # The partition as a whole: as of just before its own records (SAME's commit), not before
    # the rejoin.
    listed = await asyncio.wait_for(rt.list_groups(), 0.2)
    assert [(g.group_id, g.group_state) for g in listed] == [(G, "PreparingRebalance")]
    store.release_appends()
    for failing in (held, pending) if own is None else (held, pending, own):
        with pytest.raises(CoordinatorNotAvailableError):
            await asyncio.wait_for(failing, 5)
    assert not rejoin.done()
    assert shard.classic_groups.describe([G])[0].group_state == "PreparingRebalance"
    assert rt.driver.parked  # the rejoin still waits, and the core still holds it
    (fetched,) = await rt.offset_fetch([OffsetFetchGroup(group_id=SAME)])
    assert (fetched.error_code, fetched.topics) == (ErrorCode.NONE, ())  # its commit: rolled back
    joined_b = await asyncio.wait_for(rt.classic_join(classic_join_req("B")), 5)
    joined_a = await asyncio.wait_for(rejoin, 5)
    assert (joined_a.error_code, joined_a.generation_id) == (ErrorCode.NONE, 6)
    assert (joined_b.error_code, joined_b.generation_id) == (ErrorCode.NONE, 6)
    assert joined_a.leader == joined_b.leader
    await rt.close()


async def test_a_failed_write_keeps_a_classic_rebalance_another_partition_completed() -> None:
    """Both members rejoin while another partition's commit is held: B's rejoin completes the
    rebalance and both joins are answered generation 6 at once (no record: nothing of their
    partition is outstanding). That write fails; the group stays in CompletingRebalance at
    generation 6, so the SyncGroups of the generation its members were told succeed."""
    rt, store = await runtime()
    shard = rt.shards[partition_for(G, 2)]
    store.hold_appends()
    store.fail_next_appends(1)
    held = asyncio.ensure_future(rt.offset_commit(commit(OTHER, {("t", 0): 1})))
    await asyncio.sleep(0.05)
    rejoin = asyncio.ensure_future(rt.classic_join(classic_join_req("A")))
    joined_b = await asyncio.wait_for(rt.classic_join(classic_join_req("B")), 0.2)
    joined_a = await asyncio.wait_for(rejoin, 0.2)
    assert [(j.error_code, j.generation_id) for j in (joined_a, joined_b)] == [(0, 6), (0, 6)]
    store.release_appends()
    with pytest.raises(CoordinatorNotAvailableError):
        await asyncio.wait_for(held, 5)
    (state,) = shard.classic_groups.describe([G])
    assert (state.group_state, state.generation_id) == ("CompletingRebalance", 6)
    leader_id = joined_a.leader
    follower_id = "B" if leader_id == "A" else "A"
    plan = (("A", classic_assignment(0, 1)), ("B", classic_assignment(2, 3)))
    follower = asyncio.ensure_future(rt.classic_sync(sync(follower_id)))
    leader = await asyncio.wait_for(rt.classic_sync(sync(leader_id, *plan)), 5)
    got = await asyncio.wait_for(follower, 5)
    assigned = dict(plan)
    assert (leader.error_code, leader.assignment) == (0, assigned[leader_id])
    assert (got.error_code, got.assignment) == (0, assigned[follower_id])
    await rt.close()


def sync(member: str, *assignments: tuple[str, bytes]) -> cm.SyncGroup:
    return cm.SyncGroup(group_id=G, generation_id=6, member_id=member, assignments=assignments)
