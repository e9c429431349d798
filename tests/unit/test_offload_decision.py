"""Where a big group's target is computed (coordinator/core/target_updates.py): a group of
``group.consumer.assignor.offload.min.members`` members or more has it computed in a worker,
except a small change (at most ``group.consumer.assignor.offload.inline.max.changed.members``
members changed since the last computation) when its assignor computes only what changes
(``assign_changes``): that one is computed in the command, through the incremental path, and
writes the target the worker would have. Shipping a 10,000-member group's inputs to a worker
costs tens of milliseconds; the incremental computation of a join, a tenth of one
(docs/benchmarks.md, ``join-offload``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest

from assignors.api import GroupAssignment, GroupSpec, MemberAssignment, TopicMetadata
from assignors.range import RangeAssignor
from assignors.uniform import UniformAssignor
from coordinator.core import records as r
from coordinator.core.commands import Result
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.events import Event
from coordinator.core.group import ConsumerGroup
from coordinator.core.target_assignment import build_group_spec
from coordinator.harness import Harness

G = "grp"
MEMBERS = 40
PARTITIONS = 400
T0 = 10_000
CONFIG = GroupCoordinatorConfig(
    consumer_assignment_interval_ms=0, consumer_assignor_offload_min_members=20
)
"""Groups of 20 members or more offloaded, small changes inline (the default bound)."""
ALWAYS_OFFLOADED = replace(CONFIG, consumer_assignor_offload_inline_max_changed_members=0)


def big_group(config: GroupCoordinatorConfig = CONFIG, assignor: Any = None) -> Harness:
    """A settled group of 40 members on foo (400 partitions, 10 each), its assignor inputs
    cached (as after a first computation): nothing changed since."""
    assignors = [assignor or UniformAssignor(), RangeAssignor()]
    names = tuple(a.name for a in assignors)
    h = Harness(assignors=assignors, config=replace(config, consumer_assignors=names), now_ms=T0)
    foo = h.create_topic("foo", PARTITIONS)
    deal: dict[str, set[int]] = {f"m{i:02d}": set() for i in range(MEMBERS)}
    for p in range(PARTITIONS):
        deal[f"m{p % MEMBERS:02d}"].add(p)
    h.seed_group(G, 5, {m: (["foo"], {foo: frozenset(ps)}) for m, ps in deal.items()})
    build_group_spec(h.shard.groups[G])
    h.shard.release(h.shard.mark())
    assert not h.shard.groups[G].spec_dirty
    return h


def target_records(results: list[Result[Any]]) -> list[r.Record]:
    """The target assignment records (members' and the epoch's) the results wrote, in order."""
    kinds = (r.ConsumerGroupTargetAssignmentMemberKey, r.ConsumerGroupTargetAssignmentMetadataKey)
    return [rec for res in results for rec in res.records if isinstance(rec.key, kinds)]


def computed_now(h: Harness) -> ConsumerGroup:
    """With batching on: a first joiner's target computed at once (the seeded target carries no
    timestamp), stamped now, so the next joins wait for the interval; the inputs then cached
    again (nothing changed since: no member marked)."""
    assert h.join("first", ["foo"]).offloads == []
    group: ConsumerGroup = h.shard.groups[G]
    assert (group.assignment_epoch, group.assignment_timestamp_ms) == (6, T0)
    build_group_spec(group)
    h.shard.release(h.shard.mark())
    return group


def leave_then_heartbeat(h: Harness) -> list[Result[Any]]:
    """m07 leaves (the group epoch goes up), then m00's heartbeat computes the new target."""
    left = h.heartbeat_result(member_id="m07", member_epoch=-1)
    beat = h.heartbeat_result(member_id="m00", member_epoch=5)
    return [left, beat]


@pytest.mark.parametrize("change", ["join", "leave"])
def test_a_small_change_to_a_big_group_with_an_incremental_assignor_is_computed_inline(
    change: str,
) -> None:
    h = big_group()
    foo = h.topic_id("foo")
    results = [h.join("new", ["foo"])] if change == "join" else leave_then_heartbeat(h)
    assert [res.offloads for res in results] == [[]] * len(results)
    assert h.world.jobs == {}
    group = h.shard.groups[G]
    assert (group.group_epoch, group.assignment_epoch) == (6, 6)
    written = target_records(results)
    assert written[-1] == r.target_assignment_epoch_record(G, 6, 0)
    given = [
        (rec.key.member_id, None if rec.value is None else len(rec.value.topic_partitions[foo]))
        for rec in written[:-1]
    ]
    if change == "join":  # 400 partitions over 41: m31-m39 give one each to the joiner
        assert given == [*((f"m{i}", 9) for i in range(31, 40)), ("new", 9)]
        response = results[0].response
        assert response is not None and response.member_epoch == 6
        assert response.assignment.pending == group.target["new"]  # still to be revoked
    else:  # over 39: m07's target dropped, its 10 partitions one each to m00-m10
        assert given == [("m07", None), *((f"m{i:02d}", 11) for i in range(11) if i != 7)]


@pytest.mark.parametrize("change", ["join", "leave"])
def test_the_inline_target_is_the_one_a_worker_computes(change: str) -> None:
    """The same change both ways: the same target records (the epoch's timestamp aside: both 0
    here, batching off), the same group once the members heartbeat, the same state replayed."""
    inline, offloaded = big_group(), big_group(ALWAYS_OFFLOADED)
    runs = []
    for h in (inline, offloaded):
        results = [h.join("new", ["foo"])] if change == "join" else leave_then_heartbeat(h)
        asked = [res.offloads for res in results]
        results += h.run_offloads()
        runs.append((asked, target_records(results)))
    (inline_asked, inline_records), (offloaded_asked, offloaded_records) = runs
    assert inline_asked == [[]] * len(inline_asked)
    assert offloaded_asked[-1] == [G]
    assert inline_records == offloaded_records
    assert len(inline_records) == 11 if change == "join" else 12
    for h in (inline, offloaded):  # every member heartbeats until the group is stable
        for _ in range(3):
            group = h.shard.groups[G]
            for member_id, m in sorted(group.members.items()):
                h.heartbeat(
                    member_id=member_id,
                    member_epoch=m.member_epoch,
                    topic_partitions=dict(m.assigned_partitions),
                )
    a, b = inline.shard.groups[G], offloaded.shard.groups[G]
    assert a.state().value == b.state().value == "Stable"
    assert dict(a.target) == dict(b.target)
    assert {m: x.assigned_partitions for m, x in a.members.items()} == {
        m: x.assigned_partitions for m, x in b.members.items()
    }
    replayed = inline.replayed().groups[G]
    assert dict(replayed.target) == dict(a.target)
    assert replayed.assignment_epoch == a.assignment_epoch == b.assignment_epoch


def test_the_same_change_with_an_assignor_without_the_incremental_path_is_offloaded() -> None:
    h = big_group(assignor=RangeAssignor())
    joined = h.join("new", ["foo"], server_assignor="range")
    assert joined.offloads == [G]
    assert target_records([joined]) == []
    (applied,) = h.run_offloads()
    assert target_records([applied])[-1] == r.target_assignment_epoch_record(G, 6, 0)


class Declining:
    """The uniform assignor whose ``assign_changes`` declines (or fails with ``fail``)."""

    name = "uniform"

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.calls = 0

    def assign(self, group_spec: GroupSpec, topics: Mapping[str, TopicMetadata]) -> GroupAssignment:
        return UniformAssignor().assign(group_spec, topics)

    def assign_changes(
        self, group_spec: GroupSpec, topics: Mapping[str, TopicMetadata]
    ) -> dict[str, MemberAssignment] | None:
        self.calls += 1
        if self.fail:
            raise RuntimeError("boom")
        return None


def test_an_assignor_that_declines_the_change_has_it_computed_in_a_worker() -> None:
    declining = Declining()
    h = big_group(assignor=declining)
    joined = h.join("new", ["foo"])
    assert declining.calls == 1  # asked inline, declined
    assert joined.offloads == [G]
    assert target_records([joined]) == []
    (applied,) = h.run_offloads()  # the worker: declined again, then the whole computation
    assert declining.calls == 2
    written = target_records([applied])
    assert written[-1] == r.target_assignment_epoch_record(G, 6, 0)
    assert written[-2].key.member_id == "new"


def test_an_assignor_that_fails_inline_has_the_worker_report_it_and_the_join_stands() -> None:
    """As an offloaded computation fails (Kafka: logged, the target kept, the next heartbeat
    tries again), not as an inline one (the heartbeat refused): the join is accepted."""
    failing = Declining(fail=True)
    h = big_group(assignor=failing)
    joined = h.join("new", ["foo"])
    assert joined.response is not None and joined.response.member_epoch == 5
    assert joined.offloads == [G]
    (applied,) = h.run_offloads()
    assert applied.records == []
    assert [(e.event, e.fields["error"]) for e in applied.events] == [
        (
            Event.TARGET_ASSIGNMENT_FAILED,
            "Failed to compute a new target assignment for epoch 6: assignor 'uniform' raised "
            "RuntimeError: boom",
        )
    ]
    group = h.shard.groups[G]
    assert (group.group_epoch, group.assignment_epoch) == (6, 5)


@pytest.mark.parametrize(("joins", "bound", "inline"), [(3, 3, True), (4, 3, False)])
def test_a_change_over_the_bound_is_offloaded(joins: int, bound: int, inline: bool) -> None:
    """Joins batched within the assignment interval, computed together when it is due: as
    many changed members as the bound inline, one more offloaded."""
    config = replace(
        CONFIG,
        consumer_assignment_interval_ms=1000,
        consumer_assignor_offload_inline_max_changed_members=bound,
    )
    h = big_group(config)
    group = computed_now(h)
    for i in range(joins):
        joined = h.join(f"new{i}", ["foo"])
        assert (joined.offloads, target_records([joined])) == ([], [])
    assert len(group.spec_dirty) == joins
    (fired,) = h.sleep(1000)  # the interval has passed: the target is computed
    assert fired.offloads == ([] if inline else [G])
    assert bool(target_records([fired])) is inline
    assert group.assignment_epoch == (6 + joins if inline else 6)
    h.run_offloads()
    assert group.assignment_epoch == 6 + joins


def test_a_storm_is_offloaded_and_nothing_is_computed_inline_until_its_target_is_in() -> None:
    """30 joins batched (over the default bound of 24): offloaded. While that computation is
    out, a join is not computed inline either (the target it would start from is the one
    before the storm: it would compute the storm itself); once the outcome is installed, the
    next computation has the storm's new targets to count (offloaded), and after it a join is
    small again (inline)."""
    config = replace(CONFIG, consumer_assignment_interval_ms=1000)
    h = big_group(config)
    group = computed_now(h)
    for i in range(30):
        h.join(f"storm{i:02d}", ["foo"])
    (fired,) = h.sleep(1000)
    assert fired.offloads == [G]
    job = h.start_offload(G)  # copied (the dirty marks counted into the cache), computing
    assert job.epoch == 36 and not group.spec_dirty
    late = h.join("late", ["foo"])
    assert late.offloads == [G]  # not inline: the storm's computation is still out
    assert group.assignment_epoch == 6
    h.finish_offload(job)  # installed; the group moved on: the next one when it is due
    assert group.assignment_epoch == 36
    assert len(group.spec_dirty) > 24  # the storm's new targets, and the late joiner
    (fired,) = h.sleep(1000)
    assert fired.offloads == [G]
    h.run_offloads()
    assert group.assignment_epoch == 37
    h.join("small", ["foo"])  # waits for the interval
    (fired,) = h.sleep(1000)
    assert (fired.offloads, group.assignment_epoch) == ([], 38)


def test_new_subscription_metadata_is_offloaded() -> None:
    """More partitions: the inputs are rebuilt for every member (a new cache), off the loop."""
    h = big_group()
    h.add_partitions("foo", PARTITIONS + 40)
    beat = h.heartbeat_result(member_id="m00", member_epoch=5)
    assert beat.offloads == [G]
    h.run_offloads()
    group = h.shard.groups[G]
    assert group.assignment_epoch == 6
    assert len(group.spec_dirty) == MEMBERS  # each got one more: counted next time, off the loop


def test_a_new_group_of_parked_joins_is_offloaded_and_answered_as_before() -> None:
    """A burst of 30 joins to a new group parked until its first target: the inputs are all
    new (no cache yet), so the first target is computed in a worker, and the parked joins are
    answered with it."""
    config = replace(
        CONFIG, consumer_assignment_interval_ms=1000, consumer_assignor_offload_min_members=2
    )
    h = Harness(config=config, now_ms=T0, parks_joins=True)
    h.create_topic("foo", 60)
    tokens = [h.join(f"m{i:02d}", ["foo"]).response for i in range(30)]
    assert h.parked == [G]
    first = h.first_target(G)
    assert first.offloads == [G]
    h.run_parked()
    answered = [h.completions[t.token] for t in tokens]  # type: ignore[union-attr]
    assert [a.member_epoch for a in answered] == [30] * 30
    assert sorted(sum(map(len, a.assignment.assigned.values())) for a in answered) == [2] * 30
