"""The assignor inputs kept up to date member by member (target_assignment.SpecCache): after any
sequence of joins, leaves, subscription and regex changes, static replacements, target
recomputations and rolled-back commands, the cached spec equals one built from scratch."""

from __future__ import annotations

import random
from collections.abc import Mapping

from assignors.api import GroupAssignment, GroupSpec, MemberSubscription, TopicMetadata
from assignors.uniform import UniformAssignor
from coordinator.core.commands import ConsumerGroupHeartbeat
from coordinator.core.errors import CoordinatorError
from coordinator.core.group import ConsumerGroup
from coordinator.core.model import EMPTY_ASSIGNMENT
from coordinator.core.target_assignment import build_group_spec
from coordinator.harness import Harness

G = "grp"
TOPICS = ("foo", "bar", "baz")


def from_scratch(group: ConsumerGroup) -> dict[str, MemberSubscription]:
    """The reference: every member's input computed directly from the group."""
    ids = {name: t.topic_id for name, t in group.subscription_metadata.items()}
    return {
        mid: MemberSubscription(
            rack_id=m.rack_id,
            instance_id=m.instance_id,
            subscribed_topic_ids=frozenset(ids[n] for n in group.effective_topics(m) if n in ids),
            assignment=group.target.get(mid, EMPTY_ASSIGNMENT),
        )
        for mid, m in sorted(group.members.items())
    }


def random_command(rng: random.Random, group: ConsumerGroup | None) -> ConsumerGroupHeartbeat:
    members = sorted(group.members) if group is not None else []
    kind = rng.choice(["join", "join", "leave", "subscribe", "regex", "heartbeat", "static"])
    if kind in ("join", "static") or not members:
        static = kind == "static"
        return ConsumerGroupHeartbeat(
            group_id=G,
            member_id=f"m{rng.randint(0, 30):02d}",
            member_epoch=0,
            instance_id=f"i{rng.randint(0, 3)}" if static else None,
            rack_id=rng.choice([None, "r1"]),
            rebalance_timeout_ms=60_000,
            subscribed_topic_names=tuple(rng.sample(TOPICS, rng.randint(1, 3))),
            topic_partitions={},
        )
    mid = rng.choice(members)
    m = group.members[mid] if group is not None else None
    epoch = m.member_epoch if m is not None else 0
    if kind == "leave":
        return ConsumerGroupHeartbeat(
            group_id=G, member_id=mid, member_epoch=-1, instance_id=m.instance_id if m else None
        )
    if kind == "subscribe":
        return ConsumerGroupHeartbeat(
            group_id=G,
            member_id=mid,
            member_epoch=epoch,
            instance_id=m.instance_id if m else None,
            subscribed_topic_names=tuple(rng.sample(TOPICS, rng.randint(1, 3))),
        )
    if kind == "regex":
        return ConsumerGroupHeartbeat(
            group_id=G,
            member_id=mid,
            member_epoch=epoch,
            instance_id=m.instance_id if m else None,
            subscribed_topic_regex=rng.choice(["ba.*", "f.*", ""]),
        )
    owned = dict(m.assigned_partitions) if m is not None else None
    return ConsumerGroupHeartbeat(
        group_id=G,
        member_id=mid,
        member_epoch=epoch,
        instance_id=m.instance_id if m else None,
        topic_partitions=owned,
    )


def test_the_cached_spec_always_equals_one_built_from_scratch() -> None:
    checked = 0
    claims: list[tuple[bool, bool]] = []
    for seed in range(12):
        rng = random.Random(seed)
        checking = Checking(claims)
        h = Harness(assignors=[checking])
        checking.groups = h.shard.groups
        h.create_topic("foo", 6)
        h.create_topic("bar", 4)
        for _ in range(60):
            group = h.shard.groups.get(G)
            cmd = random_command(rng, group)
            rolled_back = rng.random() < 0.25
            mark = h.shard.mark()
            try:
                h.shard.consumer_group_heartbeat(cmd, h.now_ms)
            except CoordinatorError:
                continue  # refused: nothing changed
            h.shard.rollback(mark)  # rolled back, as if its write had failed; or run for real:
            if not rolled_back:
                h.run(lambda s, cmd=cmd, now=h.now_ms: s.consumer_group_heartbeat(cmd, now))
            if rng.random() < 0.1 and "baz" not in h.shard.topics.by_name:
                h.create_topic("baz", 3)  # new metadata on the next heartbeat
            group = h.shard.groups.get(G)
            if group is None or not group.members:
                continue
            if rng.random() < 0.5:
                spec, _topics = build_group_spec(group)
                assert list(spec.members) == sorted(group.members)
                assert spec.members == from_scratch(group)
                # members whose target is installed get the group's own mapping (not a copy)
                for mid, sub in spec.members.items():
                    if mid in group.target:
                        assert sub.assignment is group.target[mid]
                checked += 1
    assert checked > 100
    # Inside the commands, where the assignor runs: a subscription change leaves a stale
    # target until the new one is computed, and the cache knows it.
    assert sum(1 for tidy, _claim in claims if not tidy) > 5
    assert all(tidy for tidy, claim in claims if claim)


class Checking:
    """The uniform assignor, recording at each call whether every input assignment lies
    within its member's subscription, beside what the spec cache claims."""

    name = "uniform"

    def __init__(self, claims: list[tuple[bool, bool]]) -> None:
        self.claims = claims
        self.groups: Mapping[str, ConsumerGroup] = {}

    def assign(self, group_spec: GroupSpec, topics: Mapping[str, TopicMetadata]) -> GroupAssignment:
        tidy = all(
            s.subscribed_topic_ids.issuperset(s.assignment) for s in group_spec.members.values()
        )
        self.claims.append((tidy, self.groups[G].spec_cache.inputs_tidy()))
        return UniformAssignor().assign(group_spec, topics)
