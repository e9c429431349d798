"""Tests for the example plugin: exact results, and the conformance kit via its pytest fixture
(``assignor_conformance`` comes with kip848-coordinator; no import needed)."""

from __future__ import annotations

import pytest
from kip848_roundrobin import RoundRobinAssignor

from assignors.api import (
    GroupSpec,
    MemberSubscription,
    PartitionAssignorError,
    SubscriptionType,
    TopicMetadata,
)


def spec(**subscriptions: str) -> GroupSpec:
    members = {
        m: MemberSubscription(
            rack_id=None, instance_id=None, subscribed_topic_ids=frozenset(topics), assignment={}
        )
        for m, topics in subscriptions.items()
    }
    same = len({frozenset(t) for t in subscriptions.values()}) <= 1
    kind = SubscriptionType.HOMOGENEOUS if same else SubscriptionType.HETEROGENEOUS
    return GroupSpec(members=members, subscription_type=kind)


TOPICS = {
    "a": TopicMetadata(topic_id="a", name="orders", num_partitions=3),
    "b": TopicMetadata(topic_id="b", name="payments", num_partitions=2),
}


def test_deals_partitions_round_robin() -> None:
    result = RoundRobinAssignor().assign(spec(m1="ab", m2="ab"), TOPICS)
    assert result.members == {
        "m1": {"a": frozenset({0, 2}), "b": frozenset({1})},
        "m2": {"a": frozenset({1}), "b": frozenset({0})},
    }


def test_only_subscribers_are_dealt_in() -> None:
    result = RoundRobinAssignor().assign(spec(m1="a", m2="ab", m3="b"), TOPICS)
    assert result.members == {
        "m1": {"a": frozenset({0, 2})},
        # The deal continues where topic a stopped: b0 goes to m3, b1 to m2.
        "m2": {"a": frozenset({1}), "b": frozenset({1})},
        "m3": {"b": frozenset({0})},
    }


def test_unknown_topic_is_an_assignor_error() -> None:
    with pytest.raises(PartitionAssignorError, match="topic 'zz'"):
        RoundRobinAssignor().assign(spec(m1="a", m2=["a", "zz"]), TOPICS)


def test_conformance(assignor_conformance) -> None:  # type: ignore[no-untyped-def]
    report = assignor_conformance(RoundRobinAssignor(), examples=100)
    # Figures, not requirements: round robin balances homogeneous groups but is not sticky.
    assert report.figures.homogeneous_unbalanced == 0
    assert report.figures.leave_lost_homogeneous > 0
