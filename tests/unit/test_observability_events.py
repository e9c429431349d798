"""Rebalance metrics from the core's log events, classic rebalance durations, and the shard's
census behind the scrape-time gauges (in-process runtime, manual clock)."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

import pytest

from assignors.uniform import UniformAssignor
from coordinator.core.commands import ConsumerGroupHeartbeat, ListedGroup, SequentialIds
from coordinator.core.config import parse_config
from coordinator.core.errors import CoordinatorNotAvailableError
from coordinator.core.offsets import OffsetCommit, OffsetCommitPartition, OffsetCommitTopic
from coordinator.core.shard import ShardCensus
from coordinator.core.topics import NewTopic
from coordinator.observability.metrics import REBALANCE_CAUSES, CoordinatorMetrics
from coordinator.observability.observer import RuntimeObserver, count_state
from coordinator.runtime import CoordinatorRuntime, ManualClock
from coordinator.runtime.store import MemoryRecordStore
from legacy_bridge import messages as m

BOUNDED_TURNS = 20


def sample(metrics: CoordinatorMetrics, name: str, **labels: str) -> float:
    total = 0.0
    for family in metrics.registry.collect():
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


def causes_counted(metrics: CoordinatorMetrics) -> dict[str, float]:
    out: dict[str, float] = {}
    for family in metrics.registry.collect():
        for s in family.samples:
            if s.name == "kip848_consumer_group_rebalances_total" and s.value:
                out[s.labels["cause"]] = s.value
    return out


async def started(store: MemoryRecordStore, metrics: CoordinatorMetrics) -> CoordinatorRuntime:
    rt = CoordinatorRuntime(
        config=parse_config(
            {"group.coordinator.shards": "2", "group.consumer.assignment.interval.ms": "0"}
        ),
        store=store,
        clock=ManualClock(1_000_000),
        ids=SequentialIds(),
        assignors=[UniformAssignor()],
        observer=RuntimeObserver(metrics),
    )
    await rt.start()
    return rt


def hb(member: str, epoch: int, **fields: object) -> ConsumerGroupHeartbeat:
    return ConsumerGroupHeartbeat(group_id="shop", member_id=member, member_epoch=epoch, **fields)  # type: ignore[arg-type]


def join(member: str, topics: tuple[str, ...]) -> ConsumerGroupHeartbeat:
    return hb(
        member, 0, rebalance_timeout_ms=300_000, subscribed_topic_names=topics, topic_partitions={}
    )


async def test_rebalances_are_counted_by_the_primary_cause_of_the_cores_events(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every cause the core gives, and only bumps that became durable: the metric and the log
    lines of the runtime (the core's GROUP_EPOCH_BUMPED events) say the same."""
    caplog.set_level(logging.INFO, logger="kip848")
    store = MemoryRecordStore(partitions=2)
    metrics = CoordinatorMetrics(process_collectors=False)
    rt = await started(store, metrics)
    try:
        await rt.create_topics([NewTopic(name="orders", num_partitions=4)])
        await rt.create_topics([NewTopic(name="pay", num_partitions=2)])
        a = await rt.heartbeat(join("A", ("orders",)))
        b = await rt.heartbeat(join("B", ("orders",)))
        assert (a.member_epoch, b.member_epoch) == (1, 2)
        # A write that fails: C's join is rolled back, its bump never happened.
        store.fail_next_appends(1)
        with pytest.raises(CoordinatorNotAvailableError):
            await rt.heartbeat(join("C", ("orders",)))
        a = await rt.heartbeat(hb("A", a.member_epoch, subscribed_topic_names=("orders", "pay")))
        await rt.create_partitions([("orders", 6)])
        b = await rt.heartbeat(hb("B", b.member_epoch))
        left = await rt.heartbeat(hb("B", -1))
        assert left.member_epoch == -1
        await rt.advance_time(46_000)  # A's session times out
        await rt.flush()
    finally:
        await rt.close()
    bumps = [
        r.event_fields  # type: ignore[attr-defined]
        for r in caplog.records
        if getattr(r, "event", None) == "group_epoch_bumped"
    ]
    assert [(f["group_epoch"], f["causes"][0]) for f in bumps] == [
        (1, "member_joined"),
        (2, "member_joined"),
        (3, "subscription_changed"),
        (4, "topic_metadata_changed"),
        (5, "member_left"),
        (6, "member_fenced_session_timeout"),
    ]
    assert causes_counted(metrics) == dict(Counter(f["causes"][0] for f in bumps))
    assert set(causes_counted(metrics)) <= set(REBALANCE_CAUSES)
    # Logged once, by the runtime, from the core's event: no second derivation of its own.
    assert not [r for r in caplog.records if r.name == "kip848.rebalance"]
    # A's join (0 s), B's join (reconciled before the subscription change) ... the group emptied
    # at the end, which ends its rebalance without a sample.
    assert sample(metrics, "kip848_rebalance_duration_seconds_count", group_type="consumer") >= 1


def classic_join(member_id: str = "") -> m.JoinGroup:
    return m.JoinGroup(
        group_id="old",
        session_timeout_ms=45_000,
        rebalance_timeout_ms=60_000,
        member_id=member_id,
        protocol_type="test",
        protocols=(("p", b"subscription"),),
    )


async def spin_until(done: asyncio.Future[object]) -> None:
    for _ in range(BOUNDED_TURNS):
        if done.done():
            return
        await asyncio.sleep(0)


async def test_classic_rebalance_duration_runs_from_preparing_rebalance_to_stable() -> None:
    metrics = CoordinatorMetrics(process_collectors=False)
    rt = await started(MemoryRecordStore(partitions=2), metrics)
    classic = {"group_type": "classic"}
    try:
        first = await rt.classic_join(classic_join())
        assert first.error_code == 79  # MEMBER_ID_REQUIRED
        member = first.member_id
        parked = asyncio.ensure_future(rt.classic_join(classic_join(member)))
        await spin_until(parked)
        assert not parked.done()  # PreparingRebalance: the initial rebalance delay
        await rt.advance_time(3_000)
        joined = await asyncio.wait_for(parked, 5)
        assert (joined.error_code, joined.generation_id, joined.leader) == (0, 1, member)
        # CompletingRebalance: a completed rebalance (a new generation), not yet Stable.
        assert sample(metrics, "kip848_classic_group_completed_rebalances_total") == 1
        assert sample(metrics, "kip848_rebalance_duration_seconds_count", **classic) == 0
        synced = await rt.classic_sync(
            m.SyncGroup(
                group_id="old",
                generation_id=1,
                member_id=member,
                assignments=((member, b"assignment"),),
            )
        )
        assert (synced.error_code, synced.assignment) == (0, b"assignment")
        assert sample(metrics, "kip848_rebalance_duration_seconds_count", **classic) == 1
        assert sample(metrics, "kip848_rebalance_duration_seconds_sum", **classic) > 0
        # A second member: the Stable group prepares a rebalance again; the first member's
        # heartbeat hears it and rejoins; both sync.
        second = await rt.classic_join(classic_join())
        other = asyncio.ensure_future(rt.classic_join(classic_join(second.member_id)))
        await spin_until(other)
        beat = await rt.classic_heartbeat(
            m.Heartbeat(group_id="old", generation_id=1, member_id=member)
        )
        assert beat.error_code == 27  # REBALANCE_IN_PROGRESS
        rejoined = await rt.classic_join(classic_join(member))
        await asyncio.wait_for(other, 5)
        assert rejoined.generation_id == 2
        assert sample(metrics, "kip848_rebalance_duration_seconds_count", **classic) == 1
        await rt.classic_sync(
            m.SyncGroup(
                group_id="old",
                generation_id=2,
                member_id=rejoined.leader,
                assignments=((member, b"a"), (second.member_id, b"b")),
            )
        )
        assert sample(metrics, "kip848_rebalance_duration_seconds_count", **classic) == 2
        assert sample(metrics, "kip848_classic_group_completed_rebalances_total") == 2
        assert (
            sample(metrics, "kip848_rebalance_duration_seconds_count", group_type="consumer") == 0
        )
    finally:
        await rt.close()


async def test_the_gauges_read_each_shards_census() -> None:
    metrics = CoordinatorMetrics(process_collectors=False)
    rt = await started(MemoryRecordStore(partitions=2), metrics)
    try:
        await rt.create_topics([NewTopic(name="orders", num_partitions=2)])
        a = await rt.heartbeat(join("A", ("orders",)))
        assert a.member_epoch == 1
        first = await rt.classic_join(classic_join())
        parked = asyncio.ensure_future(rt.classic_join(classic_join(first.member_id)))
        await spin_until(parked)
        await rt.advance_time(3_000)
        await asyncio.wait_for(parked, 5)
        topic_id = (await rt.list_topics())[0].topic_id
        await rt.offset_commit(
            OffsetCommit(
                group_id="simple",
                topics=(
                    OffsetCommitTopic(
                        topic_id=topic_id,
                        partitions=(
                            OffsetCommitPartition(partition_index=0, committed_offset=5),
                            OffsetCommitPartition(partition_index=1, committed_offset=7),
                        ),
                    ),
                ),
            )
        )
        censuses = [s.census() for s in rt.shards]
        total: Counter[tuple[str, str]] = Counter()
        for c in censuses:
            assert isinstance(c, ShardCensus)
            total.update(c.groups)
        assert dict(total) == {
            ("consumer", "Stable"): 1,
            ("classic", "CompletingRebalance"): 1,
            ("classic", "Empty"): 1,  # offsets only: listed as Kafka lists it
        }
        assert sum(c.offsets for c in censuses) == 2
        shop = rt.shards[rt.shard_index("shop")]
        assert shop.listed_group("shop") == ListedGroup(
            group_id="shop", protocol_type="consumer", group_state="Stable", group_type="consumer"
        )
        old = rt.shards[rt.shard_index("old")].listed_group("old")
        assert old is not None and (old.group_type, old.group_state) == (
            "classic",
            "CompletingRebalance",
        )
        simple = rt.shards[rt.shard_index("simple")].listed_group("simple")
        assert simple is not None and (simple.group_type, simple.group_state) == (
            "classic",
            "Empty",
        )
        assert rt.shards[rt.shard_index("nobody")].listed_group("nobody") is None

        counts = count_state(rt)
        assert counts.groups == dict(total)
        assert counts.members == {("consumer", "consumer"): 1, ("classic", "classic"): 1}
        assert counts.offsets == 2
        assert counts.shards == {"active": 2}
    finally:
        await rt.close()
