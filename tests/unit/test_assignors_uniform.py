"""The uniform assignor (assignors/uniform.py): exact results on small groups, stickiness on
leave/join, cleanup of stale targets, class-level balancing including chains, and invariants on
generated groups."""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping

import pytest
from hypothesis import HealthCheck, given, settings

from assignors.api import (
    GroupAssignment,
    GroupSpec,
    MemberSubscription,
    PartitionAssignorError,
    SubscriptionType,
    TopicMetadata,
)
from assignors.conformance._model import make_group_spec, permuted
from assignors.conformance._strategies import scenarios
from assignors.uniform import UniformAssignor
from assignors.validation import check_assignment

ASSIGNOR = UniformAssignor()


def member(
    subs: Iterable[str], current: Mapping[str, Iterable[int]] | None = None
) -> MemberSubscription:
    return MemberSubscription(
        rack_id=None,
        instance_id=None,
        subscribed_topic_ids=frozenset(subs),
        assignment={t: frozenset(p) for t, p in (current or {}).items()},
    )


def topics(**counts: int) -> dict[str, TopicMetadata]:
    return {
        t: TopicMetadata(topic_id=t, name=f"{t}-name", num_partitions=n) for t, n in counts.items()
    }


def assign(members: Mapping[str, MemberSubscription], meta: Mapping[str, TopicMetadata]) -> dict:
    spec = make_group_spec(members)
    result = ASSIGNOR.assign(spec, meta)
    check_assignment(spec, meta, result)
    return {m: dict(a) for m, a in result.members.items()}


def fs(*partitions: int) -> frozenset[int]:
    return frozenset(partitions)


def loads(result: Mapping[str, Mapping[str, frozenset[int]]]) -> dict[str, int]:
    return {m: sum(map(len, a.values())) for m, a in result.items()}


def owners(result: Mapping[str, Mapping[str, frozenset[int]]]) -> dict[tuple[str, int], str]:
    return {(t, p): m for m, a in result.items() for t, ps in a.items() for p in ps}


# ------------------------------------------------------------------ homogeneous


def test_first_assignment_gives_contiguous_runs_and_the_extra_to_the_first_member() -> None:
    meta = topics(a=3, b=4)
    result = assign({m: member("ab") for m in ("m1", "m2", "m3")}, meta)
    assert result == {"m1": {"a": fs(0, 1, 2)}, "m2": {"b": fs(0, 1)}, "m3": {"b": fs(2, 3)}}


def test_when_a_member_leaves_survivors_keep_everything_and_take_its_partitions() -> None:
    meta = topics(a=3, b=4)
    before = {"m1": {"a": fs(0, 1, 2)}, "m2": {"b": fs(0, 1)}, "m3": {"b": fs(2, 3)}}
    result = assign({m: member("ab", before[m]) for m in ("m1", "m3")}, meta)
    # 7 partitions over 2 members: 4 and 3; m2's b0, b1 go one each to the survivors.
    assert result == {"m1": {"a": fs(0, 1, 2), "b": fs(0)}, "m3": {"b": fs(1, 2, 3)}}


def test_when_a_member_joins_only_the_excess_moves() -> None:
    meta = topics(a=3, b=4)
    before = {"m1": {"a": fs(0, 1, 2)}, "m2": {"b": fs(0, 1)}, "m3": {"b": fs(2, 3)}}
    members = {m: member("ab", before[m]) for m in before} | {"m4": member("ab")}
    result = assign(members, meta)
    # Quota 1 with three extras: the three members already above 1 keep 2; m1 gives up a2.
    assert result == {
        "m1": {"a": fs(0, 1)},
        "m2": {"b": fs(0, 1)},
        "m3": {"b": fs(2, 3)},
        "m4": {"a": fs(2)},
    }


def test_unchanged_members_get_their_input_mapping_back() -> None:
    meta = topics(a=4)
    current = {"m1": {"a": fs(0, 1)}, "m2": {"a": fs(2, 3)}}
    members = {m: member("a", current[m]) for m in current}
    spec = make_group_spec(members)
    result = ASSIGNOR.assign(spec, meta)
    assert result.members["m1"] is spec.members["m1"].assignment
    assert result.members["m2"] is spec.members["m2"].assignment


def test_more_members_than_partitions() -> None:
    result = assign({f"m{i}": member("a") for i in range(5)}, topics(a=3))
    assert result == {
        "m0": {"a": fs(0)},
        "m1": {"a": fs(1)},
        "m2": {"a": fs(2)},
        "m3": {},
        "m4": {},
    }


def test_added_partitions_go_to_the_least_loaded_members() -> None:
    meta = topics(a=6)
    current = {"m1": {"a": fs(0, 1)}, "m2": {"a": fs(2, 3)}}
    result = assign({m: member("a", current[m]) for m in current} | {"m3": member("a")}, meta)
    assert result == {"m1": {"a": fs(0, 1)}, "m2": {"a": fs(2, 3)}, "m3": {"a": fs(4, 5)}}


def test_homogeneous_hint_is_trusted_and_topics_without_partitions_are_omitted() -> None:
    meta = topics(a=2, empty=0)
    spec = GroupSpec(
        members={"m1": member(["a", "empty"]), "m2": member(["a", "empty"])},
        subscription_type=SubscriptionType.HOMOGENEOUS,
    )
    assert ASSIGNOR.assign(spec, meta).members == {"m1": {"a": fs(0)}, "m2": {"a": fs(1)}}


# ------------------------------------------------------------------ cleanup of stale targets


def test_stale_targets_are_cleaned_before_assigning() -> None:
    meta = topics(a=4, b=4)
    members = {
        # a7 is out of range, b is no longer subscribed, "gone" was deleted.
        "m1": member("a", {"a": [0, 1, 7], "b": [0], "gone": [0, 1]}),
        # a1 is also claimed by m1, which sorts first and keeps it.
        "m2": member("ab", {"a": [1, 2], "b": [1, 2, 3]}),
        "m3": member("b", {"b": [0]}),
    }
    result = assign(members, meta)
    assert result == {
        "m1": {"a": fs(0, 1, 3)},
        "m2": {"a": fs(2), "b": fs(1, 2)},
        "m3": {"b": fs(0, 3)},
    }


@pytest.mark.parametrize(
    "current",
    [
        {"m1": {"a": [0, 1]}, "m2": {"a": [1, 2]}},  # a1 claimed twice: m1 sorts first
        {"m1": {"a": [0, 1, 5]}, "m2": {"a": [2]}},  # a5 out of range
        {"m1": {"a": [0, 1, 2]}, "m2": {"a": [7]}},  # as many as a has, but a7 out of range
        {"m1": {"a": [0, 1], "gone": [0]}, "m2": {}},  # a deleted topic
        {"m1": {"a": [0, 1], "b": []}, "m2": {"a": [2]}},  # an empty set, unsubscribed topic
    ],
)
def test_homogeneous_stale_targets_take_the_careful_path(current: dict) -> None:  # type: ignore[type-arg]
    result = assign({m: member("a", c) for m, c in current.items()}, topics(a=4))
    assert result == {"m1": {"a": fs(0, 1)}, "m2": {"a": fs(2, 3)}}


def test_subscription_change_revokes_the_old_topic_then_balances() -> None:
    meta = topics(a=2, b=2)
    current = {"m1": {"a": fs(0), "b": fs(0)}, "m2": {"a": fs(1), "b": fs(1)}}
    members = {"m1": member("a", current["m1"]), "m2": member("ab", current["m2"])}
    result = assign(members, meta)
    # m1 drops b0 (unsubscribed), m2 picks it up; 1 vs 3 is out of balance, so a1 moves to m1.
    assert result == {"m1": {"a": fs(0, 1)}, "m2": {"b": fs(0, 1)}}


# ------------------------------------------------------------------ heterogeneous


def test_heterogeneous_first_assignment() -> None:
    result = assign({"m1": member("a"), "m2": member("ab"), "m3": member("b")}, topics(a=3, b=4))
    assert result == {"m1": {"a": fs(0, 1, 2)}, "m2": {"b": fs(0, 1)}, "m3": {"b": fs(2, 3)}}


def test_a_chain_of_moves_fixes_what_single_topic_balancing_cannot() -> None:
    # 9 / 10 / 11: each topic is balanced among its own subscribers, yet moving a9 from m2 to
    # m1 and one b partition from m3 to m2 gives 10 / 10 / 10.
    members = {
        "m1": member("a", {"a": range(9)}),
        "m2": member("ab", {"a": [9], "b": range(9)}),
        "m3": member("b", {"b": range(9, 20)}),
    }
    result = assign(members, topics(a=10, b=20))
    assert result == {
        "m1": {"a": frozenset(range(10))},
        "m2": {"b": frozenset([*range(9), 19])},
        "m3": {"b": frozenset(range(9, 19))},
    }


def test_heterogeneous_leave_keeps_survivors_when_balance_allows() -> None:
    meta = topics(a=6, b=6)
    members = {"m1": member("a"), "m2": member("a"), "m3": member("ab"), "m4": member("b")}
    first = assign(members, meta)
    assert sorted(loads(first).values()) == [3, 3, 3, 3]
    del members["m4"]
    second = assign({m: member(members[m].subscribed_topic_ids, first[m]) for m in members}, meta)
    for m in members:  # nobody lost anything: m4's b partitions all went to m3
        assert all(first[m][t] <= second[m].get(t, frozenset()) for t in first[m])
    assert loads(second) == {"m1": 3, "m2": 3, "m3": 6}


def test_members_without_subscriptions_get_nothing() -> None:
    result = assign({"idle": member([]), "busy": member("a")}, topics(a=3))
    assert result == {"busy": {"a": fs(0, 1, 2)}, "idle": {}}


def test_disjoint_buckets_are_each_balanced() -> None:
    meta = topics(a=10, b=10, c=7)
    members = {f"x{i}": member("ab") for i in range(4)} | {f"y{i}": member("c") for i in range(3)}
    result = assign(members, meta)
    assert sorted(loads(result)[m] for m in result if m.startswith("x")) == [5, 5, 5, 5]
    assert sorted(loads(result)[m] for m in result if m.startswith("y")) == [2, 2, 3]


# ------------------------------------------------------------------ errors and determinism


def test_empty_group() -> None:
    spec = GroupSpec(members={}, subscription_type=SubscriptionType.HOMOGENEOUS)
    assert ASSIGNOR.assign(spec, topics(a=1)) == GroupAssignment(members={})


def test_unknown_topic_raises_partition_assignor_error() -> None:
    spec = make_group_spec({"m1": member(["a"]), "m2": member(["a", "zz"])})
    with pytest.raises(PartitionAssignorError) as info:
        ASSIGNOR.assign(spec, topics(a=1))
    assert str(info.value) == (
        "member 'm2' is subscribed to topic 'zz', which is not in the topic metadata"
    )


def test_equal_inputs_built_differently_give_equal_results() -> None:
    rng = random.Random(7)
    meta = topics(**{f"t{i}": rng.randint(1, 30) for i in range(6)})
    members = {
        f"member-{rng.randrange(10**6)}": member(rng.sample(sorted(meta), rng.randint(1, 6)))
        for _ in range(25)
    }
    spec = make_group_spec(members)
    first = ASSIGNOR.assign(spec, meta)
    spec2, meta2 = permuted(spec, meta)
    assert ASSIGNOR.assign(spec2, meta2) == first


# ------------------------------------------------------------------ invariants at scale


def test_large_heterogeneous_group_with_overlapping_subscriptions() -> None:
    rng = random.Random(11)
    meta = topics(**{f"t{i:02d}": rng.randint(1, 400) for i in range(40)})
    names = sorted(meta)
    members = {f"m{i:04d}": member(rng.sample(names, rng.randint(1, 6))) for i in range(600)}
    first = assign(members, meta)
    spec = make_group_spec(members)
    _assert_complete_and_locally_balanced(spec, meta, first)
    # One member leaves, one changes subscription: still complete and balanced.
    members.pop("m0300")
    members["m0001"] = member(rng.sample(names, 3))
    members = {m: member(s.subscribed_topic_ids, first[m]) for m, s in members.items()}
    second = assign(members, meta)
    _assert_complete_and_locally_balanced(make_group_spec(members), meta, second)


def _assert_complete_and_locally_balanced(
    spec: GroupSpec,
    meta: Mapping[str, TopicMetadata],
    result: Mapping[str, Mapping[str, frozenset[int]]],
) -> None:
    size = loads(result)
    held = owners(result)
    subscribers: dict[str, list[str]] = {}
    for m, s in spec.members.items():
        for t in s.subscribed_topic_ids:
            subscribers.setdefault(t, []).append(m)
    for t, subs in subscribers.items():
        assert all((t, p) in held for p in range(meta[t].num_partitions)), t
        lightest = min(size[m] for m in subs)
        heaviest_holder = max(size[m] for m in subs if result[m].get(t))
        assert heaviest_holder - lightest <= 1, t


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(scenarios())
def test_generated_groups_are_complete_balanced_and_sticky(scenario) -> None:  # type: ignore[no-untyped-def]
    # Without partition racks: with them locality comes before stickiness
    # (test_assignors_racks.py).
    scenario = scenario.without_racks()
    spec, meta = scenario.group_spec(), scenario.topic_metadata()
    result = ASSIGNOR.assign(spec, meta)
    check_assignment(spec, meta, result)
    plain = {m: dict(a) for m, a in result.members.items()}
    _assert_complete_and_locally_balanced(spec, meta, plain)
    if spec.subscription_type is SubscriptionType.HOMOGENEOUS:
        assert max(loads(plain).values()) - min(loads(plain).values()) <= 1
        if len(plain) > 1:
            # Someone leaves: no survivor loses a partition.
            gone = sorted(plain)[scenario.leaver % len(plain)]
            survivors = {
                m: member(s.subscribed_topic_ids, plain[m])
                for m, s in spec.members.items()
                if m != gone
            }
            after = assign(survivors, meta)
            assert all(plain[m][t] <= after[m][t] for m in survivors for t in plain[m])
        # Someone joins: partitions only move to the newcomer.
        subs = next(iter(spec.members.values())).subscribed_topic_ids
        joined = {m: member(s.subscribed_topic_ids, plain[m]) for m, s in spec.members.items()}
        joined["zz-newcomer"] = member(subs)
        after = assign(joined, meta)
        before_owner, after_owner = owners(plain), owners(after)
        assert all(after_owner[k] in (m, "zz-newcomer") for k, m in before_owner.items())


# ------------------------------------------------------------------ partition owners


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(scenarios())
def test_the_partition_owners_path_gives_the_same_result_as_the_careful_one(scenario) -> None:  # type: ignore[no-untyped-def]
    """With the inverted current assignment (as the coordinator passes it) the homogeneous
    path skips per-partition work; without it, it unions the members' sets. Same result,
    including on dirty inputs (out-of-range indexes, partitions held twice, vanished topics)."""
    spec, meta = scenario.group_spec(), scenario.topic_metadata()
    bare = GroupSpec(members=spec.members, subscription_type=spec.subscription_type)
    assert spec.partition_owners or not any(s.assignment for s in spec.members.values())
    assert ASSIGNOR.assign(spec, meta) == ASSIGNOR.assign(bare, meta)
    # And after a join to the settled result (the case the shortcut is for).
    settled = {m: dict(a) for m, a in ASSIGNOR.assign(spec, meta).members.items()}
    joined = {m: member(s.subscribed_topic_ids, settled[m]) for m, s in spec.members.items()}
    joined["zz-newcomer"] = member(next(iter(spec.members.values())).subscribed_topic_ids)
    spec2 = make_group_spec(joined)
    bare2 = GroupSpec(members=spec2.members, subscription_type=spec2.subscription_type)
    assert ASSIGNOR.assign(spec2, meta) == ASSIGNOR.assign(bare2, meta)


@pytest.mark.parametrize(
    ("current", "owners"),
    [
        # a full topic whose owners include an index out of range (2 is free, 5 is not real)
        ({"m1": {"a": [0, 1, 5]}}, {"a": {0: "m1", 1: "m1", 5: "m1"}}),
        # a negative index among n distinct keys below n (their sum gives it away)
        ({"m1": {"a": [-1, 1, 2]}}, {"a": {-1: "m1", 1: "m1", 2: "m1"}}),
        # owners that are not the inverse of the assignments (a partition held twice)
        ({"m1": {"a": [0]}, "m2": {"a": [0]}}, {"a": {0: "m1"}}),
    ],
)
def test_owners_that_do_not_fit_the_assignments_take_the_careful_path(
    current: dict,
    owners: dict,  # type: ignore[type-arg]
) -> None:
    meta = topics(a=3)
    members = {m: member("a", current.get(m)) for m in ("m1", "m2")}
    spec = GroupSpec(
        members=members, subscription_type=SubscriptionType.HOMOGENEOUS, partition_owners=owners
    )
    result = ASSIGNOR.assign(spec, meta)
    check_assignment(spec, meta, result)
    bare = GroupSpec(members=members, subscription_type=SubscriptionType.HOMOGENEOUS)
    assert result == ASSIGNOR.assign(bare, meta)
    assert sorted(len(a.get("a", ())) for a in result.members.values()) == [1, 2]
