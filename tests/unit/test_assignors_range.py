"""The range assignor (assignors/range.py), Kafka 4.0 behaviour: contiguous ranges per topic,
co-partitioning, static members first by instance id, recomputed from scratch (not sticky)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pytest

from assignors.api import (
    GroupAssignment,
    GroupSpec,
    MemberSubscription,
    PartitionAssignorError,
    SubscriptionType,
    TopicMetadata,
)
from assignors.conformance._model import make_group_spec
from assignors.range import RangeAssignor, member_order
from assignors.validation import check_assignment

ASSIGNOR = RangeAssignor()


def member(
    subs: Iterable[str],
    current: Mapping[str, Iterable[int]] | None = None,
    instance: str | None = None,
) -> MemberSubscription:
    return MemberSubscription(
        rack_id=None,
        instance_id=instance,
        subscribed_topic_ids=frozenset(subs),
        assignment={t: frozenset(p) for t, p in (current or {}).items()},
    )


def topics(**counts: int) -> dict[str, TopicMetadata]:
    return {t: TopicMetadata(topic_id=t, name=t, num_partitions=n) for t, n in counts.items()}


def assign(members: Mapping[str, MemberSubscription], meta: Mapping[str, TopicMetadata]) -> dict:
    spec = make_group_spec(members)
    result = ASSIGNOR.assign(spec, meta)
    check_assignment(spec, meta, result)
    return {m: dict(a) for m, a in result.members.items()}


def fs(*partitions: int) -> frozenset[int]:
    return frozenset(partitions)


def test_two_members_two_topics_are_co_partitioned() -> None:
    result = assign({"A": member("xy"), "B": member("xy")}, topics(x=3, y=3))
    assert result == {"A": {"x": fs(0, 1), "y": fs(0, 1)}, "B": {"x": fs(2), "y": fs(2)}}


def test_co_partitioned_topics_share_the_same_frozensets() -> None:
    spec = make_group_spec({"A": member("xy"), "B": member("xy")})
    result = ASSIGNOR.assign(spec, topics(x=4, y=4)).members
    assert result["A"]["x"] is result["A"]["y"]


def test_three_members_different_subscriptions() -> None:
    # Kafka's RangeAssignorTest: first assignment, three members, three topics.
    members = {"A": member(["t1", "t2"]), "B": member(["t3"]), "C": member(["t2", "t3"])}
    result = assign(members, topics(t1=3, t2=3, t3=2))
    assert result == {
        "A": {"t1": fs(0, 1, 2), "t2": fs(0, 1)},
        "B": {"t3": fs(0)},
        "C": {"t2": fs(2), "t3": fs(1)},
    }


def test_more_members_than_partitions() -> None:
    members = {m: member(["t1", "t3"]) for m in "ABC"}
    result = assign(members, topics(t1=3, t3=2))
    assert result == {
        "A": {"t1": fs(0), "t3": fs(0)},
        "B": {"t1": fs(1), "t3": fs(1)},
        "C": {"t1": fs(2)},
    }


def test_static_members_come_first_by_instance_id_then_dynamic_by_member_id() -> None:
    members = {
        "zed": member("t", instance="i-1"),
        "alpha": member("t"),
        "mid": member("t", instance="i-0"),
        "beta": member("t"),
    }
    assert member_order(members) == ["mid", "zed", "alpha", "beta"]
    result = assign(members, topics(t=5))
    assert result == {
        "mid": {"t": fs(0, 1)},
        "zed": {"t": fs(2)},
        "alpha": {"t": fs(3)},
        "beta": {"t": fs(4)},
    }


def test_a_restarted_static_member_gets_its_ranges_back() -> None:
    meta = topics(t=5)
    first = assign(
        {"a-1": member("t", instance="A"), "c-1": member("t", instance="C"), "b": member("t")}, meta
    )
    # The static member with instance A rejoins with a new member id.
    second = assign(
        {
            "a-2": member("t", first["a-1"], "A"),
            "c-1": member("t", first["c-1"], "C"),
            "b": member("t", first["b"]),
        },
        meta,
    )
    assert second["a-2"] == first["a-1"]
    assert second["c-1"] == first["c-1"]
    assert second["b"] == first["b"]


def test_not_sticky_a_join_shifts_the_ranges() -> None:
    meta = topics(t=6)
    before = assign({"b": member("t"), "c": member("t")}, meta)
    assert before == {"b": {"t": fs(0, 1, 2)}, "c": {"t": fs(3, 4, 5)}}
    after = assign(
        {"a": member("t"), "b": member("t", before["b"]), "c": member("t", before["c"])}, meta
    )
    assert after == {"a": {"t": fs(0, 1)}, "b": {"t": fs(2, 3)}, "c": {"t": fs(4, 5)}}


def test_the_current_assignment_is_ignored() -> None:
    meta = topics(t=4)
    fresh = assign({"a": member("t"), "b": member("t")}, meta)
    odd = assign({"a": member("t", {"t": [3]}), "b": member("t", {"t": [0, 1, 2]})}, meta)
    assert odd == fresh


def test_topics_without_partitions_and_members_without_subscriptions() -> None:
    result = assign({"a": member(["t", "empty"]), "idle": member([])}, topics(t=2, empty=0))
    assert result == {"a": {"t": fs(0, 1)}, "idle": {}}


def test_empty_group() -> None:
    spec = GroupSpec(members={}, subscription_type=SubscriptionType.HOMOGENEOUS)
    assert ASSIGNOR.assign(spec, topics(t=1)) == GroupAssignment(members={})


@pytest.mark.parametrize("kind", list(SubscriptionType))
def test_unknown_topic_raises(kind: SubscriptionType) -> None:
    members = {
        "a": member(["t", "missing"]),
        "b": member(["t", "missing"] if kind.name == "HOMOGENEOUS" else ["t"]),
    }
    spec = GroupSpec(members=members, subscription_type=kind)
    with pytest.raises(PartitionAssignorError, match="member 'a' is subscribed to topic 'missing'"):
        ASSIGNOR.assign(spec, topics(t=1))
