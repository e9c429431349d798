"""The uniform assignor's incremental path (``assign_changes``, from a TargetSummary) gives
exactly the whole computation's result, member for member and key for key, and names exactly
the members whose assignment changes; it declines (None) what it does not compute: heterogeneous
groups, specs without a summary, summaries that do not add up, unknown topics."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assignors.api import (
    GroupSpec,
    MemberAssignment,
    MemberSubscription,
    PartitionAssignorError,
    SubscriptionType,
    TargetSummary,
    TopicMetadata,
)
from assignors.summary import summarize
from assignors.uniform import UniformAssignor, compute_uniform_assignment

ASSIGNOR = UniformAssignor()


def topics_of(counts: dict[str, int]) -> dict[str, TopicMetadata]:
    return {
        t: TopicMetadata(topic_id=t, name=f"n-{t}", num_partitions=n) for t, n in counts.items()
    }


def spec_of(
    current: dict[str, MemberAssignment],
    topics: dict[str, TopicMetadata],
    subscriptions: dict[str, frozenset[str]] | None = None,
) -> GroupSpec:
    """A spec with the target summary, as the coordinator gives ``assign_changes``."""
    every = frozenset(topics)
    subs = subscriptions or dict.fromkeys(current, every)
    owners: dict[str, dict[int, str]] = {}
    for m, a in current.items():
        for t, ps in a.items():
            owners.setdefault(t, {}).update(dict.fromkeys(ps, m))
    homogeneous = len(set(subs.values())) == 1
    spec = GroupSpec(
        members={
            m: MemberSubscription(
                rack_id=None, instance_id=None, subscribed_topic_ids=subs[m], assignment=a
            )
            for m, a in current.items()
        },
        subscription_type=SubscriptionType.HOMOGENEOUS
        if homogeneous
        else SubscriptionType.HETEROGENEOUS,
        partition_owners=owners,
    )
    return dataclasses.replace(spec, target_summary=summarize(spec, topics))


def whole(spec: GroupSpec, topics: dict[str, TopicMetadata]) -> dict[str, MemberAssignment]:
    plain = dataclasses.replace(spec, target_summary=None)
    return ASSIGNOR.assign(plain, topics).members  # type: ignore[return-value]


def assert_same_as_whole(spec: GroupSpec, topics: dict[str, TopicMetadata]) -> dict:
    changes = ASSIGNOR.assign_changes(spec, topics)
    assert changes is not None
    expected = whole(spec, topics)
    inputs = {m: s.assignment for m, s in spec.members.items()}
    assert {m: changes.get(m, inputs[m]) for m in inputs} == expected
    # exactly the members the whole computation changes, with the same key order
    assert sorted(changes) == sorted(m for m in expected if expected[m] is not inputs[m])
    for m, a in changes.items():
        assert list(a) == list(expected[m])
        assert all(type(ps) is frozenset and ps for ps in a.values())
    return changes


@st.composite
def groups(draw: st.DrawFn) -> tuple[dict[str, MemberAssignment], dict[str, TopicMetadata]]:
    """A homogeneous group whose current target is valid (exclusive, in range, within the
    subscription) but otherwise arbitrary: settled, after joins and leaves, or lopsided."""
    counts = draw(
        st.dictionaries(st.sampled_from(["ta", "tb", "tc", "td"]), st.integers(0, 14), min_size=1)
    )
    members = draw(
        st.lists(st.text("abcxyz", min_size=1, max_size=3), min_size=1, max_size=9, unique=True)
    )
    current: dict[str, dict[str, set[int]]] = {m: {} for m in members}
    for t, n in sorted(counts.items()):
        for p in range(n):
            owner = draw(st.sampled_from([None, *members]))
            if owner is not None:
                current[owner].setdefault(t, set()).add(p)
    frozen = {m: {t: frozenset(ps) for t, ps in a.items()} for m, a in current.items()}
    if draw(st.booleans()):  # start from uniform's own result (a settled group) ...
        settled = compute_uniform_assignment(spec_of(frozen, topics_of(counts)), topics_of(counts))
        frozen = {m: dict(a) for m, a in settled.items()}
        # ... then members leave and others join
        for gone in draw(st.lists(st.sampled_from(members), max_size=3, unique=True)):
            if len(frozen) > 1:
                del frozen[gone]
        for new in draw(st.lists(st.text("mnop", min_size=1, max_size=3), max_size=3)):
            frozen.setdefault(new, {})
    if draw(st.booleans()):  # partitions added to a topic since the target was computed
        t = draw(st.sampled_from(sorted(counts)))
        counts[t] += draw(st.integers(1, 6))
    return frozen, topics_of(counts)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(groups())
def test_the_changes_are_exactly_the_whole_results_differences(
    case: tuple[dict[str, MemberAssignment], dict[str, TopicMetadata]],
) -> None:
    current, topics = case
    assert_same_as_whole(spec_of(current, topics), topics)


def settled(members: int, counts: dict[str, int]) -> dict[str, MemberAssignment]:
    topics = topics_of(counts)
    empty: dict[str, MemberAssignment] = {f"m{i:03d}": {} for i in range(members)}
    return dict(compute_uniform_assignment(spec_of(empty, topics), topics))


def moved(before: dict[str, MemberAssignment], after: dict[str, MemberAssignment]) -> int:
    return sum(
        len(ps - before.get(m, {}).get(t, frozenset()))
        for m, a in after.items()
        for t, ps in a.items()
    )


def test_a_join_takes_its_share_from_the_last_members_above_the_new_quota() -> None:
    counts = {"ta": 50, "tb": 50}
    current = settled(10, counts)  # 10 each
    current["m999"] = {}
    changes = assert_same_as_whole(spec_of(current, topics_of(counts)), topics_of(counts))
    # 100 over 11: quota 9, one extra; the first member keeps 10, nine give up one each
    assert sorted(changes) == [f"m{i:03d}" for i in range(1, 10)] + ["m999"]
    assert sum(map(len, changes["m999"].values())) == 9
    assert moved(current, {**current, **changes}) == 9


def test_a_leave_gives_the_leavers_partitions_to_the_first_members() -> None:
    counts = {"ta": 30, "tb": 25}
    current = settled(11, counts)  # 55 over 11: 5 each
    del current["m004"]
    topics = topics_of(counts)
    changes = assert_same_as_whole(spec_of(current, topics), topics)
    # 55 over 10: quota 5, five extras: the first five members (in id order) take one each
    assert sorted(changes) == ["m000", "m001", "m002", "m003", "m005"]
    assert all(sum(map(len, changes[m].values())) == 6 for m in changes)


def test_a_join_and_a_leave_in_the_same_batch() -> None:
    counts = {"ta": 40}
    current = settled(8, counts)  # 5 each
    del current["m002"]
    current["m100"] = {}
    topics = topics_of(counts)
    changes = assert_same_as_whole(spec_of(current, topics), topics)
    # same size: the newcomer takes exactly the leaver's partitions, nobody else moves
    assert changes == {"m100": {"ta": frozenset(range(10, 15))}}


def test_partitions_added_to_a_topic_go_to_the_first_members() -> None:
    counts = {"ta": 20, "tb": 20}
    current = settled(4, counts)
    grown = topics_of({"ta": 22, "tb": 20})
    changes = assert_same_as_whole(spec_of(current, grown), grown)
    assert changes == {
        "m000": {**current["m000"], "ta": current["m000"]["ta"] | {20}},
        "m001": {**current["m001"], "ta": current["m001"]["ta"] | {21}},
    }


def test_a_settled_group_changes_nothing() -> None:
    counts = {"ta": 17, "tb": 3}
    current = settled(6, counts)
    assert ASSIGNOR.assign_changes(spec_of(current, topics_of(counts)), topics_of(counts)) == {}


def test_heterogeneous_groups_are_declined_and_computed_whole() -> None:
    topics = topics_of({"ta": 6, "tb": 4})
    current: dict[str, MemberAssignment] = {"a": {"ta": frozenset({0, 1})}, "b": {}}
    subs = {"a": frozenset({"ta", "tb"}), "b": frozenset({"ta"})}
    spec = spec_of(current, topics, subs)
    assert spec.subscription_type is SubscriptionType.HETEROGENEOUS
    assert spec.target_summary is not None
    assert ASSIGNOR.assign_changes(spec, topics) is None
    assert whole(spec, topics) == {  # five each: "a" gives one of "ta" to "b"
        "a": {"ta": frozenset({0}), "tb": frozenset({0, 1, 2, 3})},
        "b": {"ta": frozenset({1, 2, 3, 4, 5})},
    }


def test_without_a_summary_or_with_one_that_does_not_add_up_it_declines() -> None:
    topics = topics_of({"ta": 6})
    spec = spec_of({"a": {"ta": frozenset({0, 1})}, "b": {}}, topics)
    assert ASSIGNOR.assign_changes(dataclasses.replace(spec, target_summary=None), topics) is None
    summary = spec.target_summary
    assert summary is not None
    missing_member = TargetSummary(
        member_loads=summary.member_loads,
        members_by_load={2: ("a",)},
        unassigned=summary.unassigned,
    )
    lost_partition = TargetSummary(
        member_loads=summary.member_loads,
        members_by_load=summary.members_by_load,
        unassigned={"ta": (2, 3, 4)},
    )
    no_topic = TargetSummary(
        member_loads=summary.member_loads,
        members_by_load=summary.members_by_load,
        unassigned={},
    )
    for bad in (missing_member, lost_partition, no_topic):
        assert (
            ASSIGNOR.assign_changes(dataclasses.replace(spec, target_summary=bad), topics) is None
        )


def test_an_unknown_topic_is_left_to_the_whole_computation_which_names_it() -> None:
    topics = topics_of({"ta": 6, "tb": 2})
    spec = spec_of({"a": {}, "b": {}}, topics)
    known = {"ta": topics["ta"]}
    assert ASSIGNOR.assign_changes(spec, known) is None
    with pytest.raises(PartitionAssignorError, match="'tb', which is not in the topic metadata"):
        ASSIGNOR.assign(dataclasses.replace(spec, target_summary=None), known)


def test_summarize_refuses_what_a_summary_cannot_promise() -> None:
    topics = topics_of({"ta": 4})
    every = frozenset(topics)

    def spec(a: MemberAssignment, b: MemberAssignment) -> GroupSpec:
        return GroupSpec(
            members={
                m: MemberSubscription(
                    rack_id=None, instance_id=None, subscribed_topic_ids=every, assignment=x
                )
                for m, x in (("a", a), ("b", b))
            },
            subscription_type=SubscriptionType.HOMOGENEOUS,
        )

    assert summarize(spec({"ta": frozenset({0})}, {"ta": frozenset({0})}), topics) is None
    assert summarize(spec({"ta": frozenset({4})}, {}), topics) is None
    assert summarize(spec({"ta": frozenset()}, {}), topics) is None
    assert summarize(spec({"zz": frozenset({0})}, {}), topics) is None
    assert summarize(spec({"ta": frozenset({3, 1})}, {}), topics) == TargetSummary(
        member_loads={"a": 2, "b": 0},
        members_by_load={0: ("b",), 2: ("a",)},
        unassigned={"ta": (0, 2)},
    )
