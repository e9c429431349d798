"""The uniform assignor's fast paths give exactly the full computation's result: the
homogeneous paths that read ``partition_owners`` or build per-topic unions, and the C-level
passes over members, against the general cleanup (forced by disabling the fast paths), on
random small groups (valid targets, settled groups after joins and leaves, and stale or
conflicting targets)."""

from __future__ import annotations

import random

import pytest

from assignors.api import GroupSpec, MemberAssignment, MemberSubscription, SubscriptionType
from assignors.api import TopicMetadata as TM
from assignors.uniform import UniformAssignor, _Builder

ASSIGNOR = UniformAssignor()


def owners_of(current: dict[str, MemberAssignment]) -> dict[str, dict[int, str]]:
    owners: dict[str, dict[int, str]] = {}
    for mid, a in current.items():
        for t, ps in a.items():
            owners.setdefault(t, {}).update(dict.fromkeys(ps, mid))
    return owners


def spec(
    subscriptions: dict[str, frozenset[str]],
    current: dict[str, MemberAssignment],
    homogeneous: bool,
    with_owners: bool,
) -> GroupSpec:
    return GroupSpec(
        members={
            m: MemberSubscription(
                rack_id=None, instance_id=None, subscribed_topic_ids=s, assignment=current[m]
            )
            for m, s in subscriptions.items()
        },
        subscription_type=SubscriptionType.HOMOGENEOUS
        if homogeneous
        else SubscriptionType.HETEROGENEOUS,
        partition_owners=owners_of(current) if with_owners else None,
    )


def full(monkeypatch: pytest.MonkeyPatch, group: GroupSpec, topics: dict[str, TM]) -> object:
    """The result with every fast cleanup disabled (the general path)."""
    with monkeypatch.context() as m:
        m.setattr(_Builder, "_clean_from_owners", lambda self: False)
        m.setattr(_Builder, "_clean_one_class", lambda self: False)
        return ASSIGNOR.assign(group, topics).members


def random_topics(rng: random.Random) -> dict[str, TM]:
    return {
        f"t{i}": TM(topic_id=f"t{i}", name=f"n{i}", num_partitions=rng.randint(0, 9))
        for i in range(rng.randint(1, 5))
    }


def test_fast_paths_equal_the_general_cleanup_on_random_targets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Arbitrary current targets: empty sets, out-of-range indexes, partitions claimed twice,
    unsubscribed topics, one or several topics per member."""
    compared = 0
    for seed in range(400):
        rng = random.Random(seed)
        topics = random_topics(rng)
        homogeneous = rng.random() < 0.7
        everything = frozenset(t for t in topics if rng.random() < 0.8) or frozenset(topics)
        subscriptions: dict[str, frozenset[str]] = {}
        current: dict[str, MemberAssignment] = {}
        for i in range(rng.randint(1, 8)):
            mid = f"m{i}"
            subscriptions[mid] = (
                everything
                if homogeneous
                else frozenset(t for t in topics if rng.random() < 0.6) or everything
            )
            a = {}
            for t, meta in topics.items():
                if rng.random() < 0.4:
                    a[t] = frozenset(
                        p for p in range(meta.num_partitions + 2) if rng.random() < 0.3
                    )
                    if rng.random() < 0.8:  # mostly valid: in range, non-empty
                        a[t] = frozenset(p for p in a[t] if p < meta.num_partitions)
                        if not a[t]:
                            del a[t]
            current[mid] = a
        expected = full(monkeypatch, spec(subscriptions, current, homogeneous, False), topics)
        for with_owners in (False, True):
            got = ASSIGNOR.assign(spec(subscriptions, current, homogeneous, with_owners), topics)
            assert got.members == expected, (seed, with_owners)
            compared += 1
    assert compared == 800


def test_fast_paths_equal_the_general_cleanup_through_joins_and_leaves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Settled homogeneous groups (each result installed), members joining and leaving."""
    for seed in range(40):
        rng = random.Random(seed)
        topics = {
            f"t{i}": TM(topic_id=f"t{i}", name=f"n{i}", num_partitions=rng.randint(1, 30))
            for i in range(rng.choice([1, 3, 12]))
        }
        everything = frozenset(topics)
        current: dict[str, MemberAssignment] = {f"m{i:03d}": {} for i in range(rng.randint(1, 60))}
        for _ in range(6):
            subscriptions = dict.fromkeys(current, everything)
            expected = full(monkeypatch, spec(subscriptions, current, True, False), topics)
            got = ASSIGNOR.assign(spec(subscriptions, current, True, True), topics).members
            assert got == expected, seed
            current = dict(got)
            if rng.random() < 0.5 or len(current) < 2:
                for _ in range(rng.randint(1, 3)):
                    current[f"j{rng.randint(0, 999):03d}"] = {}
            else:
                for mid in rng.sample(sorted(current), rng.randint(1, min(3, len(current) - 1))):
                    del current[mid]
