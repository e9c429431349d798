"""Hypothesis strategies for groups. Imported only when the kit runs (hypothesis is a test
dependency, not a runtime one).

Everything is drawn as a handful of integer lists and mapped onto the group: building strategies
inside a draw is what makes hypothesis slow, and integers shrink well (towards 0 = "nothing")."""

from __future__ import annotations

from hypothesis import strategies as st

from assignors.conformance._model import (
    RACKS,
    MemberPlan,
    Scenario,
    TopicPlan,
    topic_id_from_bytes,
)

MAX_TOPICS = 5
MAX_MEMBERS = 8
MAX_PARTITIONS = 16

_raw_ids = st.lists(
    st.binary(min_size=16, max_size=16), min_size=1, max_size=MAX_TOPICS, unique=True
)
_counts = st.lists(st.integers(1, MAX_PARTITIONS), min_size=MAX_TOPICS, max_size=MAX_TOPICS)
_small = st.integers(0, 255)
_bits = st.integers(0, 2**MAX_TOPICS - 1)
_member_text = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12)
_member_ids = st.lists(
    st.one_of(st.binary(min_size=16, max_size=16).map(topic_id_from_bytes), _member_text),
    min_size=MAX_MEMBERS,
    max_size=MAX_MEMBERS,
    unique=True,
)
_member_count = st.integers(1, MAX_MEMBERS)
_per_member = st.lists(st.tuples(_bits, _small, _small), min_size=MAX_MEMBERS, max_size=MAX_MEMBERS)
_owners = [st.lists(_small, min_size=n, max_size=n) for n in range(MAX_TOPICS * MAX_PARTITIONS + 1)]
_racks = [
    st.lists(st.integers(1, 7), min_size=n, max_size=n)
    for n in range(MAX_TOPICS * MAX_PARTITIONS + 1)
]
_settings = st.tuples(
    _bits, st.integers(0, 2), st.booleans(), st.booleans(), _small, _small, _small
)


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    """Groups of 1-8 members over 1-5 topics of 1-16 partitions: homogeneous or not, with no,
    a random or a stale current assignment (partitions held by non-subscribers, a topic that was
    deleted), with or without static members, racks and partition racks."""
    raw_ids = draw(_raw_ids)
    counts = draw(_counts)
    common_bits, mode_index, homogeneous, with_racks, stale, leaver, joiner = draw(_settings)
    n_topics = len(raw_ids)
    ids = [topic_id_from_bytes(raw) for raw in raw_ids]
    total = sum(counts[:n_topics])
    starts = [sum(counts[:i]) for i in range(n_topics)]  # where each topic's partitions begin
    rack_masks = draw(_racks[total]) if with_racks else []

    def subset(bits: int) -> tuple[str, ...]:
        return tuple(t for i, t in enumerate(ids) if bits >> i & 1)

    topics = []
    for i, topic_id in enumerate(ids):
        racks: tuple[tuple[int, tuple[str, ...]], ...] = ()
        if with_racks:
            racks = tuple(
                (
                    p,
                    tuple(r for b, r in enumerate(RACKS) if rack_masks[starts[i] + p] >> b & 1),
                )
                for p in range(counts[i])
            )
        topics.append(
            TopicPlan(topic_id=topic_id, name=f"topic-{i}", partitions=counts[i], racks=racks)
        )

    n_members = draw(_member_count)
    member_ids = draw(_member_ids)[:n_members]
    per_member = draw(_per_member)
    if homogeneous:
        common = subset(common_bits) or (ids[0],)
        subscriptions = [common] * n_members
    else:
        # XOR with a member-dependent pattern, so that the simplest draws (zeros) still give
        # members different subscriptions.
        subscriptions = [subset(per_member[j][0] ^ (j * 0b1011 + 0b101)) for j in range(n_members)]

    mode = ("none", "random", "stale")[mode_index]
    current: list[dict[str, list[int]]] = [{} for _ in range(n_members)]
    if mode != "none":
        owners = draw(_owners[total])
        for i, t in enumerate(topics):
            subscribers = [j for j in range(n_members) if t.topic_id in subscriptions[j]]
            pool = list(range(n_members)) if mode == "stale" else subscribers
            if not pool:
                continue
            for p in range(t.partitions):
                pick = owners[starts[i] + p]
                if pick:  # 0 = nobody owns it
                    owner = pool[(pick - 1) % len(pool)]
                    current[owner].setdefault(t.topic_id, []).append(p)
        if mode == "stale" and stale % 2:
            # A topic that was deleted still appears in someone's target assignment.
            gone = topic_id_from_bytes(bytes([stale]) * 16)
            if gone not in ids:
                current[stale % n_members][gone] = list(range(1 + stale % 4))

    members = tuple(
        MemberPlan(
            member_id=member_ids[j],
            instance_id=f"instance-{j}" if per_member[j][1] % 3 == 1 else None,
            rack_id=RACKS[per_member[j][2] % 3] if per_member[j][2] % 2 else None,
            subscription=subscriptions[j],
            current=tuple((t, tuple(ps)) for t, ps in sorted(current[j].items())),
        )
        for j in range(n_members)
    )
    joiner_subscription = None if joiner % 2 == 0 else subset(joiner >> 1)
    return Scenario(
        topics=tuple(topics),
        members=members,
        leaver=leaver % n_members,
        joiner_subscription=joiner_subscription,
    )
