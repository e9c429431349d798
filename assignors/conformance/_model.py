"""Scenarios the kit feeds to an assignor, built from plain values so that both hypothesis and a
seeded ``random.Random`` can produce them, and so that a failing one prints readably."""

from __future__ import annotations

import base64
import random
from collections.abc import Mapping
from dataclasses import dataclass, replace

from assignors.api import (
    GroupSpec,
    MemberAssignment,
    MemberSubscription,
    SubscriptionType,
    TopicId,
    TopicMetadata,
)

RACKS = ("rack-a", "rack-b", "rack-c")


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberPlan:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    subscription: tuple[TopicId, ...]
    current: tuple[tuple[TopicId, tuple[int, ...]], ...]
    """The current target assignment (may name unsubscribed or deleted topics)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicPlan:
    topic_id: TopicId
    name: str
    partitions: int
    racks: tuple[tuple[int, tuple[str, ...]], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """One group and its topics, plus how to perturb it for the stickiness figures."""

    topics: tuple[TopicPlan, ...]
    members: tuple[MemberPlan, ...]
    leaver: int = 0
    """Index (modulo the member count) of the member that leaves in the leave scenario."""
    joiner_subscription: tuple[TopicId, ...] | None = None
    """Subscription of the member that joins; None means "like the first member"."""

    # ------------------------------------------------------------------ building inputs

    @property
    def homogeneous(self) -> bool:
        return len({frozenset(m.subscription) for m in self.members}) <= 1

    def group_spec(self) -> GroupSpec:
        members = {m.member_id: _subscription(m) for m in self.members}
        return make_group_spec(members)

    def without_racks(self) -> Scenario:
        """The same group with no partition racks (member racks stay)."""
        return replace(self, topics=tuple(replace(t, racks=()) for t in self.topics))

    def topic_metadata(self) -> dict[TopicId, TopicMetadata]:
        return {
            t.topic_id: TopicMetadata(
                topic_id=t.topic_id,
                name=t.name,
                num_partitions=t.partitions,
                partition_racks={p: frozenset(r) for p, r in t.racks},
            )
            for t in self.topics
        }

    # ------------------------------------------------------------------ text

    def describe(self) -> str:
        lines = [f"topics ({len(self.topics)}):"]
        for t in self.topics:
            racks = " with partition racks" if t.racks else ""
            lines.append(f"  {t.name} id={t.topic_id} partitions={t.partitions}{racks}")
        names = {t.topic_id: t.name for t in self.topics}
        kind = "homogeneous" if self.homogeneous else "heterogeneous"
        lines.append(f"members ({len(self.members)}, {kind}):")
        for m in self.members:
            extra = []
            if m.instance_id is not None:
                extra.append(f"instance={m.instance_id}")
            if m.rack_id is not None:
                extra.append(f"rack={m.rack_id}")
            subs = ",".join(names.get(t, t) for t in m.subscription) or "-"
            cur = " ".join(f"{names.get(t, t)}{list(p)}" for t, p in m.current) or "-"
            tail = f" [{' '.join(extra)}]" if extra else ""
            lines.append(f"  {m.member_id}{tail} subscribes {subs}; current {cur}")
        if self.members:
            gone = self.members[self.leaver % len(self.members)].member_id
            joiner = (
                self.members[0].subscription
                if self.joiner_subscription is None
                else self.joiner_subscription
            )
            wants = ",".join(names.get(t, t) for t in joiner) or "-"
            lines.append(
                f"then (stickiness runs): {gone} leaves; separately, a new member subscribing "
                f"{wants} joins"
            )
        return "\n".join(lines)


def make_group_spec(members: Mapping[str, MemberSubscription]) -> GroupSpec:
    """A GroupSpec with the right subscription type and inverted current assignment."""
    subscriptions = {m.subscribed_topic_ids for m in members.values()}
    kind = (
        SubscriptionType.HOMOGENEOUS if len(subscriptions) <= 1 else SubscriptionType.HETEROGENEOUS
    )
    owners: dict[TopicId, dict[int, str]] = {}
    for member_id in sorted(members):
        for t, partitions in members[member_id].assignment.items():
            bucket = owners.setdefault(t, {})
            for p in sorted(partitions):
                bucket.setdefault(p, member_id)
    return GroupSpec(members=dict(members), subscription_type=kind, partition_owners=owners)


def _subscription(m: MemberPlan) -> MemberSubscription:
    return MemberSubscription(
        rack_id=m.rack_id,
        instance_id=m.instance_id,
        subscribed_topic_ids=frozenset(m.subscription),
        assignment={t: frozenset(p) for t, p in m.current if p},
    )


def with_assignment(spec: GroupSpec, assignment: Mapping[str, MemberAssignment]) -> GroupSpec:
    """The same group whose current target assignment is ``assignment``."""
    members = {
        m: MemberSubscription(
            rack_id=s.rack_id,
            instance_id=s.instance_id,
            subscribed_topic_ids=s.subscribed_topic_ids,
            assignment=dict(assignment.get(m, {})),
        )
        for m, s in spec.members.items()
    }
    return make_group_spec(members)


def permuted(
    spec: GroupSpec, topics: Mapping[TopicId, TopicMetadata]
) -> tuple[GroupSpec, dict[TopicId, TopicMetadata]]:
    """Equal inputs built differently: mappings in reverse order, sets and strings rebuilt."""

    def fresh(s: str) -> str:
        return "".join(list(s))

    members: dict[str, MemberSubscription] = {}
    for member_id in reversed(list(spec.members)):
        s = spec.members[member_id]
        members[fresh(member_id)] = MemberSubscription(
            rack_id=s.rack_id,
            instance_id=s.instance_id,
            subscribed_topic_ids=frozenset(
                fresh(t) for t in sorted(s.subscribed_topic_ids, reverse=True)
            ),
            assignment={
                fresh(t): frozenset(sorted(s.assignment[t], reverse=True))
                for t in reversed(list(s.assignment))
            },
        )
    owners = {
        fresh(t): {p: fresh(m) for p, m in reversed(list(o.items()))}
        for t, o in reversed(list(spec.partition_owners.items()))
    }
    new_spec = GroupSpec(
        members=members, subscription_type=spec.subscription_type, partition_owners=owners
    )
    new_topics = {
        fresh(t): TopicMetadata(
            topic_id=fresh(md.topic_id),
            name=md.name,
            num_partitions=md.num_partitions,
            partition_racks=dict(reversed(list(md.partition_racks.items()))),
        )
        for t, md in reversed(list(topics.items()))
    }
    return new_spec, new_topics


def snapshot(spec: GroupSpec, topics: Mapping[TopicId, TopicMetadata]) -> object:
    """A value equal before and after ``assign`` iff the inputs were left untouched."""
    return (
        spec.subscription_type,
        sorted(
            (
                m,
                s.rack_id,
                s.instance_id,
                sorted(s.subscribed_topic_ids),
                sorted((t, sorted(p)) for t, p in s.assignment.items()),
            )
            for m, s in spec.members.items()
        ),
        sorted((t, sorted(o.items())) for t, o in spec.partition_owners.items()),
        sorted(
            (
                t,
                md.topic_id,
                md.name,
                md.num_partitions,
                sorted((p, sorted(r)) for p, r in md.partition_racks.items()),
            )
            for t, md in topics.items()
        ),
    )


def topic_id_from_bytes(raw: bytes) -> TopicId:
    """A Kafka-style topic id: 16 bytes in unpadded base64url (22 characters)."""
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


# ---------------------------------------------------------------------- seeded generator


def random_scenario(rng: random.Random, *, max_members: int = 8, max_topics: int = 5) -> Scenario:
    """A scenario from a seeded ``random.Random`` (used where hypothesis is not: the hash-seed
    check runs the same scenarios in several interpreters and compares the results)."""
    n_topics = rng.randint(1, max_topics)
    topics = tuple(
        TopicPlan(
            topic_id=topic_id_from_bytes(rng.randbytes(16)),
            name=f"topic-{i}",
            partitions=rng.randint(1, 16),
        )
        for i in range(n_topics)
    )
    ids = [t.topic_id for t in topics]
    n_members = rng.randint(1, max_members)
    homogeneous = rng.random() < 0.4
    common = tuple(rng.sample(ids, rng.randint(1, n_topics)))
    members: list[MemberPlan] = []
    for j in range(n_members):
        subscription = common if homogeneous else tuple(rng.sample(ids, rng.randint(0, n_topics)))
        members.append(
            MemberPlan(
                member_id=f"member-{rng.randrange(10**6):06d}-{j}",
                instance_id=f"instance-{j}" if rng.random() < 0.3 else None,
                rack_id=rng.choice(RACKS) if rng.random() < 0.5 else None,
                subscription=subscription,
                current=(),
            )
        )
    # A random current assignment (some partitions owned by anyone, some by nobody).
    if rng.random() < 0.6:
        current: dict[int, dict[TopicId, list[int]]] = {}
        for t in topics:
            for p in range(t.partitions):
                if rng.random() < 0.7:
                    current.setdefault(rng.randrange(n_members), {}).setdefault(
                        t.topic_id, []
                    ).append(p)
        members = [
            MemberPlan(
                member_id=m.member_id,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                subscription=m.subscription,
                current=tuple((t, tuple(ps)) for t, ps in sorted(current.get(j, {}).items())),
            )
            for j, m in enumerate(members)
        ]
    return Scenario(topics=topics, members=tuple(members), leaver=rng.randrange(n_members))
