"""coordinator/core/target_assignment.py: the cached assignor inputs and the validation that only
examines the members whose target changes (each case also checked against the full
``check_assignment``, which must agree)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from assignors.api import GroupAssignment, GroupSpec, SubscriptionType, TopicMetadata
from assignors.uniform import UniformAssignor
from assignors.validation import InvalidAssignmentError, check_assignment
from coordinator.core.commands import ConsumerGroupHeartbeat
from coordinator.core.target_assignment import (
    build_group_spec,
    changed_members,
    check_result,
    compute_target_assignment,
)
from coordinator.harness import Harness

G = "grp"


def settled(members: int = 4, partitions: int = 8) -> tuple[Harness, str]:
    """A reconciled group: m0..m{n-1} on topic foo, partitions dealt round-robin."""
    h = Harness()
    foo = h.create_topic("foo", partitions)
    h.create_topic("bar", 2)
    deal: dict[str, set[int]] = {f"m{i}": set() for i in range(members)}
    for p in range(partitions):
        deal[f"m{p % members}"].add(p)
    h.seed_group(G, 5, {m: (["foo"], {foo: frozenset(ps)}) for m, ps in deal.items()})
    return h, foo


def verdicts(spec: GroupSpec, topics: Mapping[str, TopicMetadata], result: object) -> list[str]:
    """[incremental, full]: "ok" or the error, so both checks can be compared."""
    out = []
    changed = changed_members(spec, result) if isinstance(result, GroupAssignment) else None
    for check in (
        lambda: check_result(spec, topics, result, changed),
        lambda: check_assignment(spec, topics, result),
    ):
        try:
            check()
            out.append("ok")
        except InvalidAssignmentError as exc:
            out.append(str(exc))
    return out


def with_members(spec: GroupSpec, **changes: dict[str, list[int]]) -> GroupAssignment:
    """The spec's current assignments (same objects), with some members' mappings replaced."""
    members = {m: s.assignment for m, s in spec.members.items()}
    for m, a in changes.items():
        members[m] = {t: frozenset(ps) for t, ps in a.items()}
    return GroupAssignment(members=members)


def test_the_uniform_result_passes_and_only_the_members_that_change_are_examined() -> None:
    h, _foo = settled()
    h.join("m9", ["foo"])  # target recomputed: m9 gets partitions from the others
    group = h.shard.groups[G]
    spec, topics = build_group_spec(group)
    result = UniformAssignor().assign(spec, topics)
    assert changed_members(spec, result) == []  # installed already: nothing changes
    assert verdicts(spec, topics, result) == ["ok", "ok"]


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        # m1 keeps its target (foo-1, foo-5), m0 is given foo-1 as well
        ({"m0": {"foo": [0, 4, 1]}}, "partition 1 of topic"),
        # an index out of range on a changed member
        ({"m0": {"foo": [0, 4, 8]}}, "which has 8 partitions"),
        # a topic m0 does not subscribe to
        ({"m0": {"foo": [0, 4], "bar": [0]}}, "to which it is not subscribed"),
        # an empty set
        ({"m0": {"foo": [0, 4], "bar": []}}, "empty partition set"),
    ],
)
def test_a_changed_member_cannot_take_what_is_not_free(
    changes: dict[str, dict[str, list[int]]], error: str
) -> None:
    h, foo = settled()
    spec, topics = build_group_spec(h.shard.groups[G])
    renamed = {
        m: {foo if t == "foo" else h.topic_id(t): ps for t, ps in a.items()}
        for m, a in changes.items()
    }
    incremental, full = verdicts(spec, topics, with_members(spec, **renamed))
    assert error in full
    assert incremental == full


def test_moving_a_partition_between_changed_members_passes() -> None:
    h, foo = settled()
    spec, topics = build_group_spec(h.shard.groups[G])
    result = with_members(spec, m0={foo: [0, 4, 1]}, m1={foo: [5]})
    assert verdicts(spec, topics, result) == ["ok", "ok"]


def test_a_kept_target_on_a_topic_no_longer_subscribed_is_refused() -> None:
    from dataclasses import replace

    from coordinator.core import records as r

    h, foo = settled()
    group = h.shard.groups[G]
    # m2 changed its subscription; the target (not yet recomputed) still gives it foo.
    moved = replace(group.members["m2"], subscribed_topic_names=("bar",))
    h.shard.replay(r.member_metadata_record(G, moved))
    spec, topics = build_group_spec(group)
    stale = GroupAssignment(members={m: s.assignment for m, s in spec.members.items()})
    assert spec.members["m2"].assignment == {foo: frozenset({2, 6})}
    incremental, full = verdicts(spec, topics, stale)
    assert "to which it is not subscribed" in full
    assert incremental == full


def test_a_result_with_a_missing_or_unknown_member_is_refused() -> None:
    h, _foo = settled()
    spec, topics = build_group_spec(h.shard.groups[G])
    members = {m: s.assignment for m, s in spec.members.items()}
    del members["m3"]
    assert verdicts(spec, topics, GroupAssignment(members=members))[1].startswith(
        "invalid assignment: member 'm3' is missing"
    )
    assert len(set(verdicts(spec, topics, GroupAssignment(members=members)))) == 1
    members["m3"] = {}
    members["stranger"] = {}
    assert len(set(verdicts(spec, topics, GroupAssignment(members=members)))) == 1


def test_the_inputs_are_cached_per_member_and_follow_every_change() -> None:
    h, foo = settled()
    group = h.shard.groups[G]
    spec1, _ = build_group_spec(group)
    spec2, _ = build_group_spec(group)
    assert list(spec1.members) == ["m0", "m1", "m2", "m3"]  # sorted
    assert all(spec2.members[m] is spec1.members[m] for m in spec1.members)
    # A join: new member, targets recomputed; members come back sorted, changed ones rebuilt.
    h.join("a-first", ["foo"])
    spec3, _ = build_group_spec(group)
    assert list(spec3.members) == ["a-first", "m0", "m1", "m2", "m3"]
    for m in spec3.members:
        assert spec3.members[m].assignment is group.target.get(m, {}) or (
            spec3.members[m].assignment == {} and m not in group.target
        )
    # A rolled-back change leaves nothing stale behind.
    mark = h.shard.mark()
    h.shard.consumer_group_heartbeat(
        h_cmd("m0", group.members["m0"].member_epoch, ("bar",)), h.now_ms
    )
    changed, _ = build_group_spec(group)
    assert changed.members["m0"].subscribed_topic_ids == frozenset({h.topic_id("bar")})
    h.shard.rollback(mark)
    back, _ = build_group_spec(group)
    assert back.members["m0"].subscribed_topic_ids == frozenset({foo})
    assert back.members["m0"].assignment is group.target["m0"]
    # A leave drops the member from the inputs.
    h.heartbeat(member_id="m1", member_epoch=-1)
    assert list(build_group_spec(group)[0].members) == ["a-first", "m0", "m2", "m3"]


def test_many_joins_at_once_resort_the_member_ids() -> None:
    h, _foo = settled()
    group = h.shard.groups[G]
    build_group_spec(group)
    for i in range(70, 0, -1):
        h.join(f"x{i:03d}", ["foo"])
    ids = list(build_group_spec(group)[0].members)
    assert ids == sorted(ids) and len(ids) == 74


def test_regex_members_are_rebuilt_every_time() -> None:
    h, foo = settled()
    h.join("r", regex="fo.*")
    h.resolve_regexes()
    group = h.shard.groups[G]
    spec, _ = build_group_spec(group)
    again, _ = build_group_spec(group)
    assert again.members["r"] is not spec.members["r"]
    assert again.members["r"] == spec.members["r"]
    assert again.members["r"].subscribed_topic_ids == frozenset({foo})


def test_records_only_for_the_members_whose_target_changed() -> None:
    h, foo = settled(members=4, partitions=8)
    group = h.shard.groups[G]
    from coordinator.core import records as r

    res = h.shard.consumer_group_heartbeat(
        ConsumerGroupHeartbeat(
            group_id=G,
            member_id="m4",
            member_epoch=0,
            rebalance_timeout_ms=60_000,
            subscribed_topic_names=("foo",),
            topic_partitions={},
        ),
        h.now_ms,
    )
    targets = [
        rec.key.member_id
        for rec in res.records
        if isinstance(rec.key, r.ConsumerGroupTargetAssignmentMemberKey)
    ]
    # 8 partitions over 5 members: three keep 2, one gives one up to the newcomer.
    assert targets == ["m3", "m4"]
    assert group.target["m4"] == {foo: frozenset({7})}
    assert compute_target_assignment(group, group.group_epoch, UniformAssignor()) == [
        r.target_assignment_epoch_record(G, group.group_epoch)
    ]
    assert SubscriptionType.HOMOGENEOUS is build_group_spec(group)[0].subscription_type


def h_cmd(member_id: str, epoch: int, topics: tuple[str, ...]) -> ConsumerGroupHeartbeat:
    return ConsumerGroupHeartbeat(
        group_id=G, member_id=member_id, member_epoch=epoch, subscribed_topic_names=topics
    )


# ------------------------------------------------------------------ offloaded jobs


def test_a_job_carries_copies_of_the_inputs_and_runs_like_the_inline_computation() -> None:
    import pickle

    from coordinator.core.target_assignment import assignment_job, run_job

    h, foo = settled()
    group = h.shard.groups[G]
    from coordinator.core import records as r
    from coordinator.core.model import ConsumerGroupMember

    # A member registered but not yet assigned (what batching leaves behind).
    h.shard.replay(
        r.member_metadata_record(
            G, ConsumerGroupMember(member_id="m4", subscribed_topic_names=("foo",))
        )
    )
    job = assignment_job(group, 6, "uniform")
    assert job.member_ids == ("m0", "m1", "m2", "m3", "m4")
    assert job.assignments[0] is group.target["m0"]
    assert job.assignments[4] == {}
    assert job.topics == (group.subscription_metadata["foo"],)
    shipped = pickle.loads(pickle.dumps(job))
    outcome = run_job(shipped, UniformAssignor())
    assert outcome.error is None
    assert (outcome.group_id, outcome.group_uid, outcome.epoch) == (G, group.group_uid, 6)
    inline = compute_target_assignment(group, 6, UniformAssignor())
    expected = {
        rec.key.member_id: rec.value.topic_partitions
        for rec in inline
        if isinstance(rec.key, r.ConsumerGroupTargetAssignmentMemberKey)
        and isinstance(rec.value, r.ConsumerGroupTargetAssignmentMemberValue)
    }
    assert {m: new for m, (_i, new) in outcome.changed.items()} == expected
    assert expected == {"m3": {foo: frozenset({3})}, "m4": {foo: frozenset({7})}}


def test_an_assignor_failure_is_an_error_outcome_never_an_exception() -> None:
    from coordinator.core.target_assignment import assignment_job, run_job

    class Broken:
        name = "broken"

        def assign(self, spec: GroupSpec, topics: object) -> GroupAssignment:
            raise ZeroDivisionError("boom")

    class Invalid:
        name = "invalid"

        def assign(self, spec: GroupSpec, topics: object) -> GroupAssignment:
            return GroupAssignment(members={})

    h, _foo = settled()
    job = assignment_job(h.shard.groups[G], 6, "broken")
    outcome = run_job(job, Broken())  # type: ignore[arg-type]
    assert outcome.changed == {}
    assert outcome.error == (
        "Failed to compute a new target assignment for epoch 6: assignor 'broken' raised "
        "ZeroDivisionError: boom"
    )
    outcome = run_job(job, Invalid())  # type: ignore[arg-type]
    assert outcome.error is not None
    assert outcome.error.startswith(
        "Failed to compute a new target assignment for epoch 6: invalid assignment: member"
    )
