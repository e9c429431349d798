"""A classic group whose leader's SyncGroup write (the generation's assignment) fails or is not
durable within the write timeout: as Kafka's SyncGroup append future failing
(GroupMetadataManager.classicGroupSyncToClassicGroup), the members waiting in SyncGroup get
the write's error, every assignment is emptied and a new rebalance starts — only if the group
is still where that SyncGroup left it (same generation). The reset writes no record: a
timed-out write that lands stands, and the next generation's record comes after it.

The failure runs through the driver's failure path (the harness fails the batch); a timeout
cannot happen on virtual time, so the shard is told as the runtime tells it at the timeout
(``on_write_error`` with the driver's :class:`WriteTimeoutError`;
tests/unit/test_runtime_write_timeout.py runs it on a held store write)."""

from __future__ import annotations

from typing import Any

import pytest
from builders import classic_assignment as asg

from coordinator.core import records as r
from coordinator.core.commands import Pending, Result, WriteWatch
from coordinator.core.errors import (
    CoordinatorNotAvailableError,
    ErrorCode,
    RebalanceInProgressError,
)
from coordinator.harness import Harness
from coordinator.runtime.driver import WriteTimeoutError
from legacy_bridge import messages as m
from legacy_bridge.classic_group import ClassicGroup, ClassicGroupState

A, B = "client-member-2", "client-member-3"
PLAN = {A: asg(0, 1), B: asg(2, 3)}
S = ClassicGroupState
TIMED_OUT = WriteTimeoutError(
    "The write of the records this answer waits for did not complete within "
    "offsets.commit.timeout.ms (5000 ms); its outcome is unknown (it may still be applied): retry."
)


def generation_one(h: Harness) -> Pending:
    """A (the leader) and B joined: generation 1 in CompletingRebalance at 6 s, B's SyncGroup
    waiting for the leader's."""
    h.create_topic("foo", 4)
    a = h.join_group(h.join_group().member_id)
    b = h.join_group(h.join_group().member_id)
    assert (a, b) == (Pending(1), Pending(2))
    h.sleep(6_000)  # two initial delays (KIP-134: B came during the first)
    assert h.completions[1].generation_id == h.completions[2].generation_id == 1
    follower = h.sync_group(B, 1)
    assert isinstance(follower, Pending)
    return follower


def group(h: Harness) -> ClassicGroup:
    g: ClassicGroup = h.shard.classic_groups["grp"]
    return g


def records(h: Harness) -> list[tuple[Any, ...]]:
    """The group's records: generation, state timestamp, leader, members with their
    assignments, and how the generation came about (preparing, completing, cause)."""
    out = []
    for rec in h.log:
        value = rec.value
        assert isinstance(value, r.GroupMetadataValue)
        rb = value.rebalance
        out.append(
            (
                value.generation,
                value.current_state_timestamp_ms,
                value.leader,
                tuple((x.member_id, x.assignment) for x in value.members),
                None if rb is None else (rb.preparing_ms, rb.completing_ms, rb.cause),
            )
        )
    return out


def rejoin_and_sync(h: Harness, generation: int) -> None:
    """Both members rejoin (the reset asked them to) and the leader syncs the next generation."""
    a = h.join_group(A)
    b = h.resolve(h.join_group(B))
    assert b.generation_id == generation and b.leader == A
    assert h.completions[a.token].generation_id == generation
    follower = h.sync_group(B, generation)
    leader = h.sync_group(A, generation, PLAN)
    assert leader == m.SyncGroupResponse(
        protocol_type="consumer", protocol_name="range", assignment=asg(0, 1)
    )
    assert h.completions[follower.token].assignment == asg(2, 3)
    assert group(h).state is S.STABLE


def assert_reset(h: Harness, generation: int) -> None:
    """Kafka's resetAndPropagateAssignmentWithError + prepareRebalance: PreparingRebalance at
    the same generation, no assignment left, the join phase timed by the rebalance timeout,
    the SyncGroup timeout gone."""
    g = group(h)
    assert (g.state, g.previous_state, g.generation) == (
        S.PREPARING_REBALANCE,
        S.STABLE if g.previous_state is S.STABLE else S.COMPLETING_REBALANCE,
        generation,
    )
    assert [(x.member_id, x.assignment, x.sync_token) for x in g.members.values()] == [
        (A, b"", None),
        (B, b"", None),
    ]
    assert not g.pending_sync
    assert h.timers.get(("classic-join", "grp", "")) == (h.now_ms + 60_000, 1)
    assert h.timers.get(("classic-sync", "grp", "")) is None


def test_a_failed_assignment_write_answers_the_waiting_members_and_rebalances() -> None:
    """The leader's SyncGroup write fails: the leader gets the write's error, the follower
    waiting for the assignment gets the same error (before: it went on waiting for a leader
    that had already sent its SyncGroup, until the SyncGroup timeout), the group goes back to
    PreparingRebalance at the same generation and the next generation follows once both
    rejoin. Nothing of generation 1 is written; its record comes with the next generation and
    says how the whole rebalance came about (it started with the first join)."""
    h = Harness()
    follower = generation_one(h)
    h.fail_next_writes(1)
    h.sync_group(A, 1, PLAN)
    error = h.last_answer
    assert isinstance(error, CoordinatorNotAvailableError)
    assert error.message.startswith("The write to the record store failed: ")
    assert h.completions[follower.token] == m.SyncGroupResponse(
        error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message=error.message
    )
    assert h.log == []
    assert_reset(h, 1)
    assert group(h).previous_state is S.COMPLETING_REBALANCE  # rolled back, then reset
    assert h.classic_heartbeat(B, 1) == m.HeartbeatResponse(
        error_code=ErrorCode.REBALANCE_IN_PROGRESS,
        error_message="The group is rebalancing, so a rejoin is needed.",
    )
    rejoin_and_sync(h, 2)
    assert records(h) == [
        (2, 6_000, A, ((A, asg(0, 1)), (B, asg(2, 3))), (0, 6_000, "member_joined")),
    ]
    assert h.shard.snapshot() == h.replayed().snapshot()


def test_a_timed_out_assignment_write_that_lands_stands_and_the_next_generation_follows() -> None:
    """The leader's SyncGroup asks to hear of its write failing (a watch of its generation and
    token); at the write timeout (the write still in flight, here already landed: the same
    state in memory) the group is reset and rebalances, as Kafka's appendFuture failing with
    REQUEST_TIMED_OUT (answered COORDINATOR_NOT_AVAILABLE). The generation-1 record stands; the
    reset adds none; generation 2's record follows it, its rebalance started by the reset."""
    h = Harness()
    follower = generation_one(h)
    h.now_ms = 7_000
    res = h.sync_group_result(A, 1, PLAN)
    (watch,) = res.write_watches
    assert watch == WriteWatch("classic-assignment", "grp", (1, watch.payload[1]))
    assert h.completions[follower.token].assignment == asg(2, 3)
    before = records(h)
    assert before == [(1, 7_000, A, ((A, asg(0, 1)), (B, asg(2, 3))), (0, 6_000, "member_joined"))]
    h.now_ms = 12_000
    reset = h.run(lambda s: s.on_write_error(watch, TIMED_OUT, h.now_ms))
    assert reset.records == [] and reset.completions == []  # nobody waits in SyncGroup now
    assert records(h) == before
    assert_reset(h, 1)
    assert group(h).previous_state is S.STABLE
    # A late follower's SyncGroup of generation 1 learns of the rebalance.
    with pytest.raises(RebalanceInProgressError):
        h.sync_group(B, 1)
    h.now_ms = 13_000
    rejoin_and_sync(h, 2)
    assert records(h) == [
        *before,
        (2, 13_000, A, ((A, asg(0, 1)), (B, asg(2, 3))), (12_000, 13_000, "assignment_not_stored")),
    ]
    assert h.shard.snapshot() == h.replayed().snapshot()


def test_members_waiting_in_sync_get_the_writes_error_and_their_session_restarts() -> None:
    """Told while members wait in SyncGroup (the group in CompletingRebalance, as a failed
    write leaves it once rolled back), each gets the error its write's requests got — here a
    timed-out write's COORDINATOR_NOT_AVAILABLE, Kafka's REQUEST_TIMED_OUT mapped by
    appendGroupMetadataErrorToResponseError — with no assignment, and its session timer
    restarts (Kafka's propagateAssignment reschedules the heartbeat of each member it
    answers)."""
    h = Harness()
    follower = generation_one(h)
    h.now_ms = 8_000
    res = h.run(
        lambda s: s.on_write_error(
            WriteWatch("classic-assignment", "grp", (1, 0)), TIMED_OUT, 8_000
        )
    )
    assert res.completions == [
        (
            follower.token,
            m.SyncGroupResponse(
                error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message=TIMED_OUT.message
            ),
        )
    ]
    assert h.completions[follower.token] == res.completions[0][1]
    assert h.timers.get(("classic-session", "grp", B)) == (18_000, 0)
    assert_reset(h, 1)
    assert group(h).previous_state is S.COMPLETING_REBALANCE
    assert h.log == []


def completing_again(h: Harness) -> Pending:
    """Generation 1 stable; then both rejoin: generation 2 in CompletingRebalance, B's
    SyncGroup waiting for the leader's."""
    follower = generation_one(h)
    h.sync_group(A, 1, PLAN)
    assert h.completions[follower.token].assignment == asg(2, 3)
    a = h.join_group(A)
    h.join_group(B)
    assert h.completions[a.token].generation_id == 2
    waiting = h.sync_group(B, 2)
    assert isinstance(waiting, Pending)
    return waiting


def test_the_reset_needs_the_same_generation_still_completing_or_stable_with_that_assignment() -> (
    None
):
    """Kafka's guard (still CompletingRebalance at the SyncGroup's generation; ours: or Stable
    with that very SyncGroup's assignment, its write in flight): a watch of an older
    generation, of another SyncGroup of the same generation, or of a group that rebalances
    already changes nothing and answers no one."""
    h = Harness()
    waiting = completing_again(h)
    g = group(h)
    unchanged = h.shard.snapshot(), dict(g.members), g.state, g.generation
    for watch in (
        WriteWatch("classic-assignment", "grp", (1, 0)),  # generation 1 is over
        WriteWatch("classic-assignment", "other", (2, 0)),  # no such group
    ):
        res = h.run(lambda s, w=watch: s.on_write_error(w, TIMED_OUT, h.now_ms))
        assert res == Result()
        assert (h.shard.snapshot(), dict(g.members), g.state, g.generation) == unchanged
    assert waiting.token not in h.completions
    # Stable at generation 2 with the leader's assignment: a watch of another SyncGroup (an
    # earlier, rolled-back one) does not reset it; its own does.
    res = h.sync_group_result(A, 2, PLAN)
    (own,) = res.write_watches
    other = WriteWatch("classic-assignment", "grp", (2, own.payload[1] - 1))
    assert h.run(lambda s: s.on_write_error(other, TIMED_OUT, h.now_ms)) == Result()
    assert group(h).state is S.STABLE
    # A member rejoined before the timeout: PreparingRebalance, nothing to reset.
    h.join_group(A)
    rebalancing = (h.shard.snapshot(), dict(g.members), g.state, g.generation)
    assert h.run(lambda s: s.on_write_error(own, TIMED_OUT, h.now_ms)) == Result()
    assert (h.shard.snapshot(), dict(g.members), g.state, g.generation) == rebalancing
    assert g.state is S.PREPARING_REBALANCE and g.generation == 2
