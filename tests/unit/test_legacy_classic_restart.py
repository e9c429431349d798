"""A coordinator restart while a classic group is CompletingRebalance (simulator seed 656,
docs/simulation.md I2): the generation the join phase hands out is not written — Kafka's
GroupMetadataManager.completeClassicGroupJoin appends no record for a non-empty group, only the
leader's SyncGroup (its assignment) or an empty group is written — so a reload finds the group
Stable at its last written generation, and requests carrying the newer one are fenced
(ILLEGAL_GENERATION, or UNKNOWN_MEMBER_ID for a member never written) until the member joins
again."""

from __future__ import annotations

import pytest
from builders import classic_assignment as asg

from coordinator.core import records as r
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.errors import CoordinatorError, IllegalGenerationError, UnknownMemberIdError
from coordinator.harness import Harness
from legacy_bridge import messages as m
from legacy_bridge.classic_group import ClassicGroupState as S

CONFIG = GroupCoordinatorConfig(classic_initial_rebalance_delay_ms=0)
ALL = {"foo": [0, 1, 2, 3]}


def _harness(now_ms: int = 0) -> Harness:
    h = Harness(config=CONFIG, now_ms=now_ms)
    h.create_topic("foo", 4)
    return h


def _reloaded(h: Harness) -> Harness:
    """A new coordinator loaded from ``h``'s records (what a failover reads)."""
    fresh = _harness(h.now_ms)
    assert fresh.topic_id("foo") == h.topic_id("foo")
    for record in h.log:
        fresh.shard.replay(record)
    fresh.log.extend(h.log)
    fresh.shard.release(fresh.shard.mark())
    fresh.timers.apply(fresh.shard.on_loaded(fresh.now_ms))
    return fresh


def _refused(call: object, error: type[CoordinatorError], message: str) -> None:
    with pytest.raises(error) as info:
        call()  # type: ignore[operator]
    assert info.value.message == message


def _generation_record(h: Harness, index: int) -> r.GroupMetadataValue:
    value = h.log[index].value
    assert isinstance(value, r.GroupMetadataValue)
    return value


def test_a_join_phase_generation_is_not_written_and_a_reload_fences_its_holders() -> None:
    h = _harness()
    a = h.join_group().member_id
    h.join_group(a)
    h.sleep(0)
    assert h.sync_group(a, 1, {a: asg(0, 1, 2, 3)}).assignment == asg(0, 1, 2, 3)
    assert [_generation_record(h, 0).generation] == [1]  # the leader's assignment, written
    b = h.join_group().member_id
    h.join_group(b)
    assert h.classic_heartbeat(a, 1).error_code == 27  # REBALANCE_IN_PROGRESS: rejoin
    joined = h.join_group(a, owned=ALL)
    assert isinstance(joined, m.JoinGroupResponse)
    assert (joined.error_code, joined.generation_id, joined.leader) == (0, 2, a)
    assert h.completions[max(h.completions)].generation_id == 2  # b's answer: generation 2
    group = h.shard.classic_groups.get("grp")
    assert (group.state, group.generation) == (S.COMPLETING_REBALANCE, 2)
    assert len(h.log) == 1  # the join phase wrote nothing (as Kafka)

    # The coordinator restarts before the leader's SyncGroup: generation 2 is gone.
    f = _reloaded(h)
    group = f.shard.classic_groups.get("grp")
    assert (group.state, group.generation, sorted(group.members)) == (S.STABLE, 1, [a])
    stale = "The received generation id 2 does not match the generation 1 of group grp."
    _refused(
        lambda: f.sync_group(a, 2, {a: asg(0, 1), b: asg(2, 3)}), IllegalGenerationError, stale
    )
    _refused(lambda: f.classic_heartbeat(a, 2), IllegalGenerationError, stale)
    _refused(
        lambda: f.commit("grp", a, 2, {("foo", 0): 5}),
        IllegalGenerationError,
        "The received generation id 2 does not match the generation 1.",
    )
    unknown = f"Member {b} is not a member of group grp."
    _refused(lambda: f.sync_group(b, 2), UnknownMemberIdError, unknown)
    _refused(lambda: f.classic_heartbeat(b, 2), UnknownMemberIdError, unknown)
    _refused(lambda: f.join_group(b), UnknownMemberIdError, unknown)  # forgets its id, rejoins
    assert len(f.log) == 1  # refusals write nothing

    # a rejoins (its subscription still says generation 2): the generation number is handed
    # out again, and this time the leader's assignment is written.
    again = f.join_group(a, owned=ALL)
    assert isinstance(again, m.JoinGroupResponse)
    assert (again.error_code, again.generation_id, again.leader) == (0, 2, a)
    assert f.sync_group(a, 2, {a: asg(0, 1, 2, 3)}).assignment == asg(0, 1, 2, 3)
    assert f.classic_heartbeat(a, 2) == m.HeartbeatResponse()
    written = _generation_record(f, 1)
    assert len(f.log) == 2
    assert (written.generation, [x.member_id for x in written.members]) == (2, [a])
    assert written.members[0].assignment == asg(0, 1, 2, 3)
    assert f.shard.snapshot() == f.replayed().snapshot()
