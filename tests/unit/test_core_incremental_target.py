"""The coordinator's incremental target computation (``assign_changes`` with the spec cache's
TargetSummary): after any sequence of joins and leaves (one at a time, or several in one batch),
subscription changes (heterogeneous groups), partition count changes, static replacements and
rolled-back commands, the summary equals one computed from scratch, the changes equal the
whole uniform computation's, the records are those of the whole computation, and replaying the
records rebuilds the same state."""

from __future__ import annotations

import dataclasses
import pickle
import random
from collections.abc import Mapping

import pytest

from assignors.api import (
    GroupAssignment,
    GroupSpec,
    MemberAssignment,
    MemberSubscription,
    SubscriptionType,
    TopicMetadata,
)
from assignors.summary import summarize
from assignors.uniform import UniformAssignor, compute_uniform_assignment
from coordinator.core.commands import ConsumerGroupHeartbeat
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.errors import CoordinatorError, UnknownServerError
from coordinator.core.group import ConsumerGroup
from coordinator.core.held_racks import HeldRacks
from coordinator.core.model import EMPTY_ASSIGNMENT
from coordinator.core.target_assignment import run_job
from coordinator.harness import Harness

G = "grp"
TOPICS = ("foo", "bar", "baz")


def from_scratch(group: ConsumerGroup) -> dict[str, MemberSubscription]:
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


class Comparing:
    """The uniform assignor, checking every incremental call against the whole computation."""

    name = "uniform"

    def __init__(self) -> None:
        self.groups: Mapping[str, ConsumerGroup] = {}
        self.incremental = 0
        self.declined = 0
        self.whole = 0
        self.untidy = 0
        self.racked = 0  # incremental calls whose summary counts partitions by racks

    def assign(self, group_spec: GroupSpec, topics: Mapping[str, TopicMetadata]) -> GroupAssignment:
        assert group_spec.target_summary is None
        self.whole += 1
        if not self.groups[G].spec_cache.inputs_tidy():
            self.untidy += 1  # a stale target outside a new subscription: no summary offered
        return UniformAssignor().assign(group_spec, topics)

    def assign_changes(
        self, group_spec: GroupSpec, topics: Mapping[str, TopicMetadata]
    ) -> dict[str, MemberAssignment] | None:
        group = self.groups[G]
        members = from_scratch(group)
        assert dict(group_spec.members) == members
        whole = GroupSpec(
            members=members,
            subscription_type=group_spec.subscription_type,
            partition_owners=group_spec.partition_owners,
        )
        reference = summarize(whole, topics)
        summary = group_spec.target_summary
        assert reference is not None and summary is not None
        assert dict(summary.member_loads) == reference.member_loads
        assert {k: tuple(v) for k, v in summary.members_by_load.items()} == dict(
            reference.members_by_load
        )
        assert {t: tuple(v) for t, v in summary.unassigned.items()} == dict(reference.unassigned)
        held = summary.held_by_racks
        assert (dict(held) if held is not None else None) == reference.held_by_racks
        by_rack = summary.members_by_rack
        assert (
            None if by_rack is None else {r: dict(by) for r, by in by_rack.items()}
        ) == reference.members_by_rack
        if held is not None:
            self.racked += 1
        changes = UniformAssignor().assign_changes(group_spec, topics)
        if changes is None:
            assert group_spec.subscription_type is SubscriptionType.HETEROGENEOUS
            self.declined += 1
            return None
        expected = compute_uniform_assignment(whole, topics)
        assert {m: changes.get(m, s.assignment) for m, s in members.items()} == expected
        assert sorted(changes) == sorted(
            m for m in expected if expected[m] is not members[m].assignment
        )
        self.incremental += 1
        return changes


RACKS = ("a", "b", "c", None)


def random_command(
    rng: random.Random, group: ConsumerGroup | None, homogeneous: bool, racked: bool = False
) -> ConsumerGroupHeartbeat:
    """A random heartbeat; ``racked``: members join in random racks and some change rack."""
    members = sorted(group.members) if group is not None else []
    kinds = ["join", "join", "leave", "leave", "subscribe", "heartbeat", "static"]
    kind = rng.choice([*kinds, "rack"] if racked else kinds)
    if kind in ("join", "static") or not members:
        return ConsumerGroupHeartbeat(
            group_id=G,
            member_id=f"m{rng.randint(0, 40):02d}",
            member_epoch=0,
            instance_id=f"i{rng.randint(0, 3)}" if kind == "static" else None,
            rack_id=rng.choice(RACKS) if racked else None,
            rebalance_timeout_ms=60_000,
            subscribed_topic_names=("foo", "bar")
            if homogeneous
            else tuple(rng.sample(TOPICS, rng.randint(1, 3))),
            topic_partitions={},
        )
    mid = rng.choice(members)
    m = group.members[mid] if group is not None else None
    assert m is not None
    if kind == "leave":
        return ConsumerGroupHeartbeat(
            group_id=G, member_id=mid, member_epoch=-1, instance_id=m.instance_id
        )
    if kind == "rack":  # KAFKA-20909: a new rack is a new group epoch
        return ConsumerGroupHeartbeat(
            group_id=G,
            member_id=mid,
            member_epoch=m.member_epoch,
            instance_id=m.instance_id,
            rack_id=rng.choice(RACKS),
        )
    if kind == "subscribe":
        return ConsumerGroupHeartbeat(
            group_id=G,
            member_id=mid,
            member_epoch=m.member_epoch,
            instance_id=m.instance_id,
            subscribed_topic_names=tuple(rng.sample(TOPICS, rng.randint(1, 3))),
        )
    return ConsumerGroupHeartbeat(
        group_id=G,
        member_id=mid,
        member_epoch=m.member_epoch,
        instance_id=m.instance_id,
        topic_partitions=dict(m.assigned_partitions),
    )


@pytest.mark.parametrize("racks", ["no-racks", "racks", "racks-by-differences"])
@pytest.mark.parametrize("mode", ["inline", "batched", "offloaded", "offloaded-but-small"])
def test_incremental_targets_equal_the_whole_computation(
    mode: str, racks: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With racks, the topics' partitions have replicas in racks a, b, c; members join in those
    racks (or none) and change racks, and the racks of a topic change now and then. The count
    by racks is kept from the targets' differences, or recounted when many members changed
    (in these small groups, nearly always: "racks-by-differences" never recounts but for a new
    cache). "offloaded": every computation in a worker; "offloaded-but-small": those of up to
    4 changed members inline (the incremental path), the others in a worker."""
    racked = racks != "no-racks"
    if racks == "racks-by-differences":
        monkeypatch.setattr(HeldRacks, "RECOUNT_SHARE", 0)
    batching = mode == "batched"
    comparing = Comparing()
    checked = offloaded = inline = 0
    for seed in range(10):
        rng = random.Random(seed)
        config = GroupCoordinatorConfig(
            consumer_assignment_interval_ms=1000 if batching else 0,
            consumer_assignor_offload_enable=mode.startswith("offloaded"),
            consumer_assignor_offload_min_members=1,
            consumer_assignor_offload_inline_max_changed_members=4 if mode.endswith("small") else 0,
        )
        h = Harness(assignors=[comparing], config=config)
        comparing.groups = h.shard.groups
        for name, n in (("foo", 7), ("bar", 5), ("baz", 3)):
            h.create_topic(name, n, racks=random_racks(rng, n) if racked else None)
        homogeneous = seed % 3 != 2  # some groups mix subscriptions (declined, computed whole)
        for _ in range(80):
            cmd = random_command(rng, h.shard.groups.get(G), homogeneous, racked)
            mark = h.shard.mark()
            try:
                h.shard.consumer_group_heartbeat(cmd, h.now_ms)
            except CoordinatorError:
                continue  # refused: nothing changed
            h.shard.rollback(mark)
            if rng.random() >= 0.2:  # else: as if its write had failed (rolled back)
                group = h.shard.groups.get(G)
                had_target = group is not None and bool(group.target)
                epoch = -1 if group is None else group.assignment_epoch
                done = h.run(lambda s, cmd=cmd, now=h.now_ms: s.consumer_group_heartbeat(cmd, now))
                group = h.shard.groups.get(G)
                if done.offloads:
                    offloaded += 1
                elif (
                    had_target
                    and group is not None
                    and group.members  # an emptied one catches up, KAFKA-20442
                    and group.assignment_epoch > epoch
                ):
                    inline += 1  # (a group without a target computes its first one inline)
            change_topics(h, rng, racked, grow=0.08)
            if batching and rng.random() < 0.3:
                h.sleep(1000)  # the assignment timer: several joins and leaves in one target
            h.run_offloads()  # as a worker would (the job copied from the group as it is now)
            checked += 1
        group = h.shard.groups.get(G)
        if group is not None:
            fresh = h.replayed().groups[G]
            assert fresh.target == group.target
            assert fresh.assignment_epoch == group.assignment_epoch
            assert dict(fresh.target_owners) == dict(group.target_owners)
    assert checked > 600
    assert comparing.incremental > 60
    assert comparing.declined > 5
    assert comparing.untidy > 5
    # only what is declined, or offered no summary, is computed whole (a declined attempt
    # inline is offloaded, and declined again in the worker)
    if mode == "offloaded-but-small":
        assert comparing.whole <= comparing.declined + comparing.untidy
        assert offloaded > 100 and inline > 30
    else:
        assert comparing.whole == comparing.declined + comparing.untidy
        assert inline == 0 if mode == "offloaded" else offloaded == 0
    assert (comparing.racked > 60) == racked


def random_racks(rng: random.Random, n: int) -> dict[int, list[str]]:
    """The racks of each partition's replicas: 0-3 of a, b, c (no racks: unknown)."""
    return {p: rng.sample("abc", rng.randint(0, 3)) for p in range(n)}


class Plain:
    """The uniform assignor without the optional extra (as a plugin without it)."""

    name = "uniform"

    def assign(self, group_spec: GroupSpec, topics: Mapping[str, TopicMetadata]) -> GroupAssignment:
        return UniformAssignor().assign(group_spec, topics)


INLINE = GroupCoordinatorConfig(
    consumer_assignment_interval_ms=0, consumer_assignor_offload_enable=False
)
JOIN = ConsumerGroupHeartbeat(
    group_id=G,
    member_id="m99",
    member_epoch=0,
    rebalance_timeout_ms=60_000,
    subscribed_topic_names=("foo", "bar"),
    topic_partitions={},
)


def settled(assignor: object, members: int) -> Harness:
    """A settled group: ``members`` members owning uniform's assignment of 30 + 20 partitions."""
    h = Harness(assignors=[assignor], config=INLINE)  # type: ignore[list-item]
    foo, bar = h.create_topic("foo", 30), h.create_topic("bar", 20)
    topics = {
        t: TopicMetadata(topic_id=t, name=t, num_partitions=n) for t, n in ((foo, 30), (bar, 20))
    }
    spec = GroupSpec(
        members={
            f"m{i:02d}": MemberSubscription(
                rack_id=None,
                instance_id=None,
                subscribed_topic_ids=frozenset(topics),
                assignment={},
            )
            for i in range(members)
        },
        subscription_type=SubscriptionType.HOMOGENEOUS,
    )
    full = compute_uniform_assignment(spec, topics)
    h.seed_group(G, 5, {m: (["foo", "bar"], dict(a)) for m, a in full.items()})
    return h


def test_the_records_are_those_of_the_whole_computation_and_rollback_restores_the_summary() -> None:
    h = settled(UniformAssignor(), 7)
    group = h.shard.groups[G]
    before = group.spec_cache  # none yet: built at the first computation
    assert before is None
    mark = h.shard.mark()
    incremental = h.shard.consumer_group_heartbeat(JOIN, 0).records
    # the summary describes the targets the computation started from (the new targets are
    # counted by the next one, from the members the records marked)
    summary = group.spec_cache.summary()
    assert summary.members_by_load == {
        0: ("m99",),
        7: ("m01", "m02", "m03", "m04", "m05", "m06"),
        8: ("m00",),
    }
    assert all(not free for free in summary.unassigned.values())
    h.shard.rollback(mark)
    assert group.spec_cache is None
    whole = settled(Plain(), 7).shard.consumer_group_heartbeat(JOIN, 0).records
    assert incremental == whole
    # 50 partitions over 8 members: 6 each, two extras kept by the first two members holding
    # more (m00 gives one of its 8, m01 keeps 7); m02..m06 give one each; m99 takes six
    targets = {rec.key.member_id for rec in whole if type(rec.key).__name__.endswith("MemberKey")}
    assert {"m00", "m02", "m03", "m04", "m05", "m06", "m99"} <= targets
    assert "m01" not in targets
    # a computation kept (released) and then a command rolled back: the summary follows
    h.shard.consumer_group_heartbeat(JOIN, 0)
    h.shard.release(h.shard.mark())
    mark = h.shard.mark()
    leave = ConsumerGroupHeartbeat(group_id=G, member_id="m03", member_epoch=-1)
    h.shard.consumer_group_heartbeat(leave, 0)
    epoch = group.members["m00"].member_epoch
    other = ConsumerGroupHeartbeat(group_id=G, member_id="m00", member_epoch=epoch)
    h.shard.consumer_group_heartbeat(other, 0)
    after = group.spec_cache.summary()
    assert "m03" not in after.member_loads
    assert after.members_by_load[6] == ("m02", "m04", "m05", "m06", "m99")
    h.shard.rollback(mark)
    assert group.spec_cache.summary().member_loads["m03"] == 7


class Grabbing:
    """Gives the newcomer a partition that m00 keeps (an invalid incremental result)."""

    name = "uniform"

    def assign(self, group_spec: GroupSpec, topics: Mapping[str, TopicMetadata]) -> object:
        raise AssertionError("not called: the incremental result is refused, not recomputed")

    def assign_changes(self, group_spec: GroupSpec, topics: object) -> object:
        keeper = group_spec.members["m00"].assignment
        t = min(keeper)
        return {"m99": {t: frozenset({min(keeper[t])})}}


class Stranger(Grabbing):
    def assign_changes(self, group_spec: GroupSpec, topics: object) -> object:
        return {"stranger": {}}


class NotAMapping(Grabbing):
    def assign_changes(self, group_spec: GroupSpec, topics: object) -> object:
        return [("m99", {})]


@pytest.mark.parametrize(
    ("assignor", "why"),
    [
        (
            Grabbing(),
            r"epoch 6: invalid assignment: partition 0 of topic '\w+' \(foo\) is given to both "
            "'m00' and 'm99'",
        ),
        (Stranger(), "assign_changes\\(\\) names 'stranger', not a member of the group"),
        (NotAMapping(), "assign_changes\\(\\) returned list, not a mapping of member ids"),
    ],
    ids=["grabbing", "stranger", "not-a-mapping"],
)
def test_an_invalid_incremental_result_is_refused_and_the_group_keeps_its_target(
    assignor: Grabbing, why: str
) -> None:
    h = settled(assignor, 3)
    group = h.shard.groups[G]
    before = dict(group.target)
    with pytest.raises(UnknownServerError, match=why):
        h.shard.consumer_group_heartbeat(JOIN, 0)
    assert dict(group.target) == before


def test_an_offloaded_job_carries_the_summary_and_computes_what_the_whole_job_computes() -> None:
    h = settled(UniformAssignor(), 7)
    offloading = GroupCoordinatorConfig(
        consumer_assignment_interval_ms=0,
        consumer_assignor_offload_enable=True,
        consumer_assignor_offload_min_members=1,
        consumer_assignor_offload_inline_max_changed_members=0,
    )
    h.shard.context.config = offloading
    h.run(lambda s: s.consumer_group_heartbeat(JOIN, 0))
    h.run(
        lambda s: s.consumer_group_heartbeat(
            ConsumerGroupHeartbeat(group_id=G, member_id="m04", member_epoch=-1), 0
        )
    )
    job = h.shard.groups.assignment_job(G)
    assert job is not None and job.summary is not None
    assert job.member_ids == ("m00", "m01", "m02", "m03", "m05", "m06", "m99")
    assert dict(job.summary.members_by_load) == {
        0: ("m99",),
        7: ("m01", "m02", "m03", "m05", "m06"),
        8: ("m00",),
    }
    group = h.shard.groups[G]
    assert job.assignments == tuple(group.target.get(m, {}) for m in job.member_ids)
    travelled = pickle.loads(pickle.dumps(job))
    incremental = run_job(travelled, UniformAssignor())
    whole = run_job(dataclasses.replace(job, summary=None), UniformAssignor())
    assert incremental == whole
    assert incremental.error is None
    # 50 partitions over 7 members (one joined, one left): 7 each, one extra for m00
    assert sorted(incremental.changed) == ["m99"]
    assert sum(map(len, incremental.changed["m99"][1].values())) == 7
    # an invalid incremental result is an error outcome, and the group keeps its target
    bad = run_job(job, Grabbing())
    assert bad.changed == {}
    assert bad.error is not None and "is given to both 'm00' and 'm99'" in bad.error


def test_many_changes_in_one_batch_keep_the_summary_exact() -> None:
    """Forty leaves in one batch, then the next computation counts forty-odd new targets: the
    load buckets are rebuilt by sorting (more than a few changes) rather than edited."""
    comparing = Comparing()
    h = Harness(
        assignors=[comparing],
        config=GroupCoordinatorConfig(
            consumer_assignment_interval_ms=1000, consumer_assignor_offload_enable=False
        ),
    )
    comparing.groups = h.shard.groups
    foo, bar = h.create_topic("foo", 150), h.create_topic("bar", 100)
    topics = {
        t: TopicMetadata(topic_id=t, name=t, num_partitions=n) for t, n in ((foo, 150), (bar, 100))
    }
    spec = GroupSpec(
        members={
            f"m{i:03d}": MemberSubscription(
                rack_id=None,
                instance_id=None,
                subscribed_topic_ids=frozenset(topics),
                assignment={},
            )
            for i in range(80)
        },
        subscription_type=SubscriptionType.HOMOGENEOUS,
    )
    full = compute_uniform_assignment(spec, topics)
    h.seed_group(G, 5, {m: (["foo", "bar"], dict(a)) for m, a in full.items()})
    h.now_ms = 10_000
    for i in range(0, 80, 2):
        h.heartbeat(member_id=f"m{i:03d}", member_epoch=-1)
    # the first leave computes at once (the seeded target carries no timestamp); the other 39
    # wait for the assignment interval: one computation for them all
    group = h.shard.groups[G]
    assert comparing.incremental == 1 and group.assignment_epoch < group.group_epoch
    h.sleep(1000)
    assert group.assignment_epoch == group.group_epoch
    h.heartbeat(
        member_id="late",
        member_epoch=0,
        rebalance_timeout_ms=60_000,
        subscribed_topic_names=["foo", "bar"],
        topic_partitions=[],
    )
    h.sleep(1000)  # counts the survivors' new targets, then the join
    assert comparing.incremental == 3 and comparing.whole == 0
    loads = group.spec_cache.summary().member_loads
    assert sorted(loads) == sorted([f"m{i:03d}" for i in range(1, 80, 2)] + ["late"])
    assert sum(len(ps) for a in group.target.values() for ps in a.values()) == 250


class Forwarding:
    """A wrapper forwarding what it does not define (as the runtime's timing wrapper does)."""

    def __init__(self, inner: UniformAssignor) -> None:
        self.inner = inner
        self.name = inner.name
        self.calls: list[str] = []

    def __getattr__(self, attr: str) -> object:
        return getattr(self.inner, attr)

    def assign(self, group_spec: GroupSpec, topics: Mapping[str, TopicMetadata]) -> GroupAssignment:
        self.calls.append("assign")
        return self.inner.assign(group_spec, topics)


class Wrapping(Forwarding):
    """A wrapper that opts in: it defines assign_changes itself."""

    def assign_changes(
        self, group_spec: GroupSpec, topics: Mapping[str, TopicMetadata]
    ) -> dict[str, MemberAssignment] | None:
        self.calls.append("assign_changes")
        return self.inner.assign_changes(group_spec, topics)


def test_a_forwarding_wrapper_is_called_through_assign_and_one_that_defines_the_extra_is_not() -> (
    None
):
    records = {}
    for wrapper in (Forwarding(UniformAssignor()), Wrapping(UniformAssignor())):
        h = settled(wrapper, 7)
        records[type(wrapper).__name__] = h.shard.consumer_group_heartbeat(JOIN, 0).records
        expected = ["assign"] if type(wrapper) is Forwarding else ["assign_changes"]
        assert wrapper.calls == expected
    assert records["Forwarding"] == records["Wrapping"]


def test_the_metrics_wrapper_takes_the_incremental_path_and_times_it_once() -> None:
    """With --metrics-listen the runtime wraps every assignor (observer.attach): an assignor
    with assign_changes gets a wrapper that defines it too, so computations on the loop stay
    incremental, each timed once; one without it keeps the plain wrapper."""
    from assignors.range import RangeAssignor
    from coordinator.core.target_assignment import incremental_method
    from coordinator.observability.metrics import CoordinatorMetrics
    from coordinator.observability.observer import RuntimeObserver

    metrics = CoordinatorMetrics(process_collectors=False)
    inner = Wrapping(UniformAssignor())
    timed, plain = RuntimeObserver(metrics).attach(1, [inner, RangeAssignor()])
    assert incremental_method(timed) is not None
    assert incremental_method(plain) is None
    h = settled(timed, 7)
    inner.calls.clear()

    def runs() -> float:
        return sum(
            s.value
            for family in metrics.registry.collect()
            for s in family.samples
            if s.name == "kip848_assignment_duration_seconds_count"
            and s.labels.get("assignor") == "uniform"
        )

    before = runs()
    assert h.shard.consumer_group_heartbeat(JOIN, 0).records
    assert inner.calls == ["assign_changes"]
    assert runs() == before + 1


def random_step(h: Harness, rng: random.Random, homogeneous: bool, racked: bool) -> None:
    """A random heartbeat of the group, committed, and now and then a topic that grows or
    changes racks."""
    cmd = random_command(rng, h.shard.groups.get(G), homogeneous, racked)
    try:
        h.run(lambda s: s.consumer_group_heartbeat(cmd, h.now_ms))
    except CoordinatorError:
        return
    change_topics(h, rng, racked, grow=0.05)


def change_topics(h: Harness, rng: random.Random, racked: bool, *, grow: float) -> None:
    """Now and then (``grow``: how often) a topic gets two more partitions; with racks, now
    and then a topic's partitions move to other racks."""
    if rng.random() < grow:
        name = rng.choice(TOPICS)
        h.add_partitions(name, h.shard.topics.by_name[name].num_partitions + 2)
    if racked and rng.random() < 0.05:
        name = rng.choice(TOPICS)
        h.set_racks(name, random_racks(rng, h.shard.topics.by_name[name].num_partitions))


def expected_job(group: ConsumerGroup) -> tuple[tuple[str, ...], tuple[MemberSubscription, ...]]:
    members = from_scratch(group)
    return tuple(members), tuple(members.values())


@pytest.mark.parametrize("racks", ["no-racks", "racks", "racks-by-differences"])
def test_inputs_prepared_a_few_members_at_a_time_are_those_copied_at_once(
    racks: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runtime brings a big group's assignor inputs up to date a few hundred members per
    command (``prepare_assignment_job``) before it copies them, with other commands of the
    group in between: whatever the slices and whatever ran between them, the job copied then
    equals one copied at once from the same state (and one built from scratch), and a
    rolled-back slice leaves the cache as it found it. New caches (the subscription metadata
    changed) start with nothing counted and every member marked."""
    racked = racks != "no-racks"
    if racks == "racks-by-differences":
        monkeypatch.setattr(HeldRacks, "RECOUNT_SHARE", 0)
    config = GroupCoordinatorConfig(
        consumer_assignment_interval_ms=1000,
        consumer_assignor_offload_enable=True,
        consumer_assignor_offload_min_members=1,
        consumer_assignor_offload_inline_max_changed_members=0,
    )
    compared = sliced_new_caches = 0
    for seed in range(12):
        rng = random.Random(seed)
        h = Harness(assignors=[UniformAssignor()], config=config)
        for name, n in (("foo", 7), ("bar", 5), ("baz", 3)):
            h.create_topic(name, n, racks=random_racks(rng, n) if racked else None)
        homogeneous = seed % 3 != 2

        for _ in range(120):
            random_step(h, rng, homogeneous, racked)
            group = h.shard.groups.get(G)
            if group is None or group.group_epoch <= group.assignment_epoch:
                continue
            if rng.random() < 0.3:
                h.offload(G)
                h.run_offloads()  # the cache is up to date after a computation
                continue
            groups = h.shard.groups
            mark = h.shard.mark()
            at_once = groups.assignment_job(G)
            h.shard.rollback(mark)
            new_cache = group.spec_cache is None or (
                group.spec_cache.metadata is not group.subscription_metadata
            )
            limit = rng.randint(1, 4)
            if new_cache and len(group.members) > limit:
                sliced_new_caches += 1
            interleaved = rng.random() < 0.4
            for _ in range(200):
                if groups.prepare_assignment_job(G, limit):
                    break
                if interleaved and rng.random() < 0.3:
                    random_step(h, rng, homogeneous, racked)  # another command in between
                    if h.shard.groups.get(G) is None:
                        break
            group = h.shard.groups.get(G)
            job = groups.assignment_job(G)
            if job is None or group is None:
                continue
            assert (job.member_ids, job.members) == expected_job(group)
            if not interleaved:
                assert job == at_once
            if job.summary is not None:
                spec, topics = job.group_spec()
                assert job.summary == summarize(
                    GroupSpec(
                        members=spec.members,
                        subscription_type=spec.subscription_type,
                        partition_owners=spec.partition_owners,
                    ),
                    topics,
                )
            compared += 1
            if not interleaved and rng.random() < 0.5:
                h.shard.rollback(mark)  # the slices undone: the cache and marks as they were
    assert compared > 150
    assert sliced_new_caches > 10
