"""Hypothesis strategies for groups. Imported only when the kit runs (hypothesis is a test
dependency, not a runtime one)."""

from __future__ import annotations

from hypothesis import strategies as st

from assignors.conformance._model import RACKS, MemberPlan, Scenario, TopicPlan, topic_id_from_bytes

MAX_TOPICS = 5
MAX_MEMBERS = 8
MAX_PARTITIONS = 16

_member_id = st.builds(
    lambda raw: topic_id_from_bytes(raw),  # same shape as the 22-character ids Kafka uses
    st.binary(min_size=16, max_size=16),
) | st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12)


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    """Groups of 1-8 members over 1-5 topics of 1-16 partitions: homogeneous or not, with no,
    a random or a stale current assignment (partitions held by non-subscribers, topics that
    were deleted), with or without static members, racks and partition racks."""
    n_topics = draw(st.integers(1, MAX_TOPICS))
    raw_ids = draw(st.lists(st.binary(min_size=16, max_size=16), min_size=n_topics,
                            max_size=n_topics, unique=True))
    with_racks = draw(st.booleans())
    topics = []
    for i, raw in enumerate(raw_ids):
        count = draw(st.integers(1, MAX_PARTITIONS))
        racks: tuple[tuple[int, tuple[str, ...]], ...] = ()
        if with_racks:
            racks = tuple(
                (p, tuple(sorted(draw(st.sets(st.sampled_from(RACKS), min_size=1, max_size=3)))))
                for p in range(count)
            )
        topics.append(
            TopicPlan(topic_id=topic_id_from_bytes(raw), name=f"topic-{i}", partitions=count,
                      racks=racks)
        )
    ids = [t.topic_id for t in topics]
    pick = st.lists(st.booleans(), min_size=n_topics, max_size=n_topics)
    topic_subset = pick.map(lambda flags: tuple(t for t, on in zip(ids, flags) if on))

    n_members = draw(st.integers(1, MAX_MEMBERS))
    member_ids = draw(st.lists(_member_id, min_size=n_members, max_size=n_members, unique=True))
    if draw(st.booleans()):
        common = draw(topic_subset) or (ids[0],)
        subscriptions = [common] * n_members
    else:
        subscriptions = [draw(topic_subset) for _ in range(n_members)]

    mode = draw(st.sampled_from(["none", "random", "stale"]))
    current: list[dict[str, list[int]]] = [{} for _ in range(n_members)]
    if mode != "none":
        for t in topics:
            subscribers = [j for j in range(n_members) if t.topic_id in subscriptions[j]]
            pool = list(range(n_members)) if mode == "stale" else subscribers
            if not pool:
                continue
            for p in range(t.partitions):
                owner = draw(st.none() | st.sampled_from(pool))
                if owner is not None:
                    current[owner].setdefault(t.topic_id, []).append(p)
        if mode == "stale" and draw(st.booleans()):
            # A topic that was deleted still appears in someone's target assignment.
            gone = topic_id_from_bytes(draw(st.binary(min_size=16, max_size=16)))
            if gone not in ids:
                holder = draw(st.integers(0, n_members - 1))
                current[holder][gone] = list(range(draw(st.integers(1, 4))))

    members = tuple(
        MemberPlan(
            member_id=member_ids[j],
            instance_id=draw(st.none() | st.just(f"instance-{j}")),
            rack_id=draw(st.none() | st.sampled_from(RACKS)),
            subscription=subscriptions[j],
            current=tuple((t, tuple(ps)) for t, ps in sorted(current[j].items())),
        )
        for j in range(n_members)
    )
    leaver = draw(st.integers(0, n_members - 1))
    joiner = draw(st.none() | topic_subset)
    return Scenario(topics=tuple(topics), members=members, leaver=leaver, joiner_subscription=joiner)
