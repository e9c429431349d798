"""Online migration: ``group.consumer.migration.policy`` (bidirectional, upgrade, downgrade,
disabled) on the bridged shard, and the conversions through the runtime with write failures and
a restart after every durable batch (MemoryRecordStore): a conversion is all or nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from builders import classic_assignment as asg
from builders import classic_join_req, classic_record, join, make_runtime

from coordinator.core import codec
from coordinator.core import records as r
from coordinator.core.commands import ConsumerGroupHeartbeat, Pending
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.errors import CoordinatorNotAvailableError, GroupIdNotFoundError
from coordinator.core.events import Cause, Event
from coordinator.core.topics import NewTopic
from coordinator.harness import Harness, subscription
from coordinator.runtime import CoordinatorRuntime, RuntimeState
from coordinator.runtime.store import MemoryRecordStore, StoredRecord, log_ids
from legacy_bridge import messages as m

META = subscription(["foo"])
POLICIES = ("bidirectional", "upgrade", "downgrade", "disabled")


def harness(policy: str, record: r.Record | None = None) -> tuple[Harness, str]:
    h = Harness(config=GroupCoordinatorConfig(consumer_migration_policy=policy))
    foo = h.create_topic("foo", 4)
    if record is not None:
        h.shard.replay(record)
        h.log.append(record)
        h.shard.release(h.shard.mark())
        h.timers.apply(h.shard.on_loaded(0))
    return h, foo


# ------------------------------------------------------------------ policy


@pytest.mark.parametrize("policy", POLICIES)
def test_upgrade_of_a_non_empty_classic_group_follows_the_policy(policy: str) -> None:
    h, foo = harness(policy, classic_record())
    before = (h.shard.snapshot(), list(h.log))
    if policy in ("disabled", "downgrade"):
        with pytest.raises(GroupIdNotFoundError) as info:
            h.join("K", ["foo"])
        assert info.value.message == (
            "Cannot upgrade classic group grp to consumer group because online upgrade is disabled."
        )
        assert (h.shard.snapshot(), h.log) == before
        assert h.shard.classic_groups["grp"].generation == 5 and "grp" not in h.shard.groups
    else:
        resp = h.join("K", ["foo"]).response
        assert resp.member_epoch == 6
        assert "grp" not in h.shard.classic_groups
        assert {
            x: (y.member_epoch, dict(y.assigned_partitions))
            for x, y in h.shard.groups["grp"].members.items()
        } == {"A": (5, {foo: frozenset({0, 1})}), "B": (5, {foo: frozenset({2, 3})}), "K": (6, {})}
    assert h.shard.snapshot() == h.replayed().snapshot()


@pytest.mark.parametrize("policy", POLICIES)
def test_empty_groups_convert_whatever_the_policy(policy: str) -> None:
    # An empty classic group is replaced by a consumer group ...
    h, _ = harness(policy, classic_record(members=()))
    assert h.shard.classic_groups["grp"].state.value == "Empty"
    assert h.join("K", ["foo"]).response.member_epoch == 1
    assert "grp" not in h.shard.classic_groups
    # ... and an empty consumer group by a classic group.
    h.heartbeat(member_id="K", member_epoch=-1)
    assert not h.shard.groups["grp"].members
    first = h.join_group()
    assert first.error_code == 79
    assert isinstance(h.join_group(first.member_id), Pending)
    assert (
        "grp" not in h.shard.groups
        and h.shard.classic_groups["grp"].state.value == "PreparingRebalance"
    )
    assert h.shard.snapshot() == h.replayed().snapshot()


@pytest.mark.parametrize("policy", POLICIES)
def test_downgrade_when_the_last_consumer_member_leaves_follows_the_policy(policy: str) -> None:
    # A consumer group K + two classic members (joined through JoinGroup: allowed by any policy).
    h, _ = harness(policy)
    assert h.join("K", ["foo"]).response.member_epoch == 1
    ids = []
    for _ in range(2):
        new = h.join_group().member_id
        joined = h.join_group(new)
        assert (joined.error_code, joined.member_id) == (0, new)
        ids.append(new)
    epochs = {mid: h.shard.groups["grp"].members[mid].member_epoch for mid in ids}
    assert epochs[ids[1]] == 3  # the last one to join is at the group epoch
    h.heartbeat(member_id="K", member_epoch=-1)
    if policy in ("bidirectional", "downgrade"):
        assert "grp" not in h.shard.groups
        group = h.shard.classic_groups["grp"]
        # As Kafka: converted instead of removing K, so the generation is the group epoch the
        # members had (3), not one bumped by K's leave; a member at that epoch is asked to
        # rejoin (REBALANCE_IN_PROGRESS), not fenced (ILLEGAL_GENERATION).
        assert (group.state.value, sorted(group.members), group.generation) == (
            "PreparingRebalance",
            sorted(ids),
            3,
        )
        assert h.classic_heartbeat(ids[1], epochs[ids[1]]).error_code == 27
        assert [type(x.key).__name__ for x in h.log[-1:]] == ["GroupMetadataKey"]
    else:
        assert "grp" not in h.shard.classic_groups
        group = h.shard.groups["grp"]
        assert sorted(group.members) == sorted(ids)
        assert all(x.classic_member_metadata is not None for x in group.members.values())
        # Still served as classic members of a consumer group.
        epoch = group.members[ids[0]].member_epoch
        assert h.classic_heartbeat(ids[0], epoch).error_code in (0, 27)
    assert h.shard.snapshot() == h.replayed().snapshot()


# ------------------------------------------------------------------ through the runtime


async def started(store: MemoryRecordStore) -> CoordinatorRuntime:
    rt = make_runtime(store, **{"group.initial.rebalance.delay.ms": "0"})
    await rt.start()
    return rt


def seed(store: MemoryRecordStore) -> None:
    key, value = codec.encode(classic_record())
    store.append([StoredRecord(key, value, "grp")], 1)


def k_join() -> ConsumerGroupHeartbeat:
    return join("grp", ("foo",), "K")


def kind(rt: CoordinatorRuntime) -> str:
    shard = rt.shards[rt.shard_index("grp")]
    classic, consumer = "grp" in shard.classic_groups, "grp" in shard.groups
    assert classic != consumer, "a group id is either a classic or a consumer group"
    return "classic" if classic else "consumer"


async def test_failed_conversions_leave_nothing_behind_and_restart_cleanly() -> None:
    store = MemoryRecordStore()
    await (await started(store)).close()  # nothing yet
    store = store.reopen()
    seed(store)
    rt = await started(store)
    await rt.create_topics([NewTopic(name="foo", num_partitions=4)])
    classic = rt.snapshot()
    # The upgrade's batch fails: the classic group is back in memory, and after a restart.
    store.fail_next_appends(1)
    with pytest.raises(CoordinatorNotAvailableError):
        await rt.heartbeat(k_join())
    assert (kind(rt), rt.snapshot()) == ("classic", classic)
    await rt.close()
    store = store.reopen()
    rt = await started(store)
    assert (kind(rt), rt.snapshot()) == ("classic", classic)
    # The upgrade succeeds; the downgrade's batch fails: still the consumer group.
    assert (await rt.heartbeat(k_join())).member_epoch == 6
    consumer = rt.snapshot()
    store.fail_next_appends(1)
    with pytest.raises(CoordinatorNotAvailableError):
        await rt.heartbeat(ConsumerGroupHeartbeat(group_id="grp", member_id="K", member_epoch=-1))
    assert (kind(rt), rt.snapshot()) == ("consumer", consumer)
    # A commit whose outcome is unknown: the runtime stops; the restart shows the whole
    # downgrade (the batch was written), never half of it.
    store.fail_next_appends(1, outcome_unknown=True)
    with pytest.raises(CoordinatorNotAvailableError):
        await rt.heartbeat(ConsumerGroupHeartbeat(group_id="grp", member_id="K", member_epoch=-1))
    assert rt.state is RuntimeState.FAILED
    await rt.close()
    store = store.reopen()
    rt = await started(store)
    assert kind(rt) == "classic"
    group = rt.shards[rt.shard_index("grp")].classic_groups["grp"]
    # generation = the group epoch before K left (6), as Kafka
    assert (sorted(group.members), group.generation, group.state.value) == (["A", "B"], 6, "Stable")
    await rt.close()


async def test_restart_after_every_batch_of_an_upgrade_and_downgrade() -> None:
    """Drive a full migration (classic -> consumer -> reconcile -> classic -> rebalance); after
    every command remember the durable snapshot and the journal length; then load every journal
    prefix that ends on a batch boundary into a fresh runtime: it must equal the snapshot taken
    when that prefix was the whole store (so any crash point restarts into a consistent group)."""
    store = MemoryRecordStore(partitions=2)
    logs = log_ids(store.partitions)
    cuts: list[tuple[int, ...]] = []  # after each durable batch: every log's last offset
    real_append = store.append

    def append(records: Any, timestamp_ms: int) -> dict[int, int]:
        last = real_append(records, timestamp_ms)
        cuts.append(cut())
        return last

    def cut() -> tuple[int, ...]:
        return tuple(store.last_offset(log) for log in logs)

    store.append = append  # type: ignore[method-assign]
    seed(store)
    rt = await started(store)
    points: dict[tuple[int, ...], tuple[str, Any]] = {}

    def mark() -> None:
        points[cut()] = (kind(rt), rt.snapshot())

    await rt.create_topics([NewTopic(name="foo", num_partitions=4)])
    mark()
    assert (await rt.heartbeat(k_join())).member_epoch == 6
    mark()
    owns = {"A": [0, 1], "B": [2, 3]}
    for _ in range(3):  # each classic member reconciles: heartbeat -> join -> sync
        for mid in ("A", "B"):
            member = rt.shards[rt.shard_index("grp")].groups["grp"].members[mid]
            hb = await rt.classic_heartbeat(
                m.Heartbeat(group_id="grp", generation_id=member.member_epoch, member_id=mid)
            )
            mark()
            if hb.error_code == 0:
                continue
            joined = await rt.classic_join(classic_join_req(mid, {"foo": owns[mid]}))
            mark()
            synced = await rt.classic_sync(
                m.SyncGroup(group_id="grp", generation_id=joined.generation_id, member_id=mid)
            )
            mark()
            owns[mid] = Harness.assigned(synced).get("foo", [])
        await rt.heartbeat(
            ConsumerGroupHeartbeat(
                group_id="grp", member_id="K", member_epoch=6, topic_partitions={}
            )
        )
        mark()
    await rt.heartbeat(ConsumerGroupHeartbeat(group_id="grp", member_id="K", member_epoch=-1))
    mark()
    assert kind(rt) == "classic"
    # The classic rebalance after the downgrade: A waits at the barrier, B completes it.
    parked = asyncio.ensure_future(rt.classic_join(classic_join_req("A")))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not parked.done()
    jb = await rt.classic_join(classic_join_req("B"))
    ja = await asyncio.wait_for(parked, 5)
    assert (ja.generation_id, jb.generation_id) == (7, 7)  # the downgraded generation 6, + 1
    mark()
    leader = ja.leader
    sync = await rt.classic_sync(
        m.SyncGroup(
            group_id="grp",
            generation_id=7,
            member_id=leader,
            assignments=(("A", asg(0, 1)), ("B", asg(2, 3))),
        )
    )
    assert sync.assignment == (asg(0, 1) if leader == "A" else asg(2, 3))
    mark()
    await rt.close()
    assert len(cuts) >= 8 and len(cuts) == len(store.batch_sizes)  # the seed is the first batch
    store = store.reopen()
    journals = {log: list(store.journal(log)) for log in logs}
    assert sum(len(j) for j in journals.values()) == sum(n + 1 for n in cuts[-1])
    kinds = set()
    for last in cuts:  # every batch boundary is a crash point
        prefix = MemoryRecordStore(partitions=store.partitions)
        for log, through in zip(logs, last, strict=True):
            for e in journals[log][: through + 1]:
                prefix.append([StoredRecord(e.key, e.value, e.group_id)], e.timestamp_ms)
        rt = await started(prefix)
        if last in points:
            assert (kind(rt), rt.snapshot()) == points[last], f"prefix ending at {last}"
        kinds.add(kind(rt))
        await rt.close()
    assert kinds == {"classic", "consumer"}
    assert set(points) <= set(cuts)


def test_upgrade_during_a_rebalance_reads_a_new_members_own_protocol() -> None:
    """Found by the simulator (mixed fleet, seed 1010): while a rebalance is in progress the
    group's protocol is still the one voted at the last generation; a member that joined since
    and does not list it has no metadata under that name. The upgrade must read its own
    subscription instead of failing with INVALID_REQUEST."""
    h = Harness(config=GroupCoordinatorConfig(classic_initial_rebalance_delay_ms=0))
    foo = h.create_topic("foo", 2)
    meta = subscription(["foo"])
    first = h.join_group(instance_id="a", protocols=(("cooperative-sticky", meta), ("range", meta)))
    h.sleep(0)
    a = h.completions[first.token].member_id
    h.sync_group(a, 1, {a: asg(0, 1)})
    assert h.shard.classic_groups["grp"].protocol_name == "cooperative-sticky"
    pending = h.join_group(instance_id="b", protocols=(("range", meta),))  # rebalance starts
    assert isinstance(pending, Pending)
    resp = h.join("K", ["foo"]).response  # a KIP-848 member upgrades the group now
    assert resp.member_epoch > 0
    g = h.shard.groups["grp"]
    assert sorted(g.members) == sorted(
        [a, "K", *(mid for mid in g.members if mid.startswith("b-"))]
    )
    assert g.members[a].assigned_partitions == {foo: frozenset({0, 1})}


def test_a_member_joining_under_a_classic_member_id_bumps_the_converted_groups_epoch() -> None:
    """A ConsumerGroupHeartbeat (epoch 0) under the member id of a classic member, with the same
    subscription, converts the group and bumps its epoch, as any converting heartbeat: Kafka's
    conversion (ConsumerGroup.fromClassicGroup, createConsumerGroupRecords) writes no
    subscription metadata, so this heartbeat finds it expired and different (updateSubscription
    Metadata) and bumps; the member's epoch 0 is accepted (KAFKA-19233). The new target is
    computed from the topics as they are now: foo grew to 6 partitions since the classic
    leader's last assignment (generation 5), which left foo-4 and foo-5 to nobody."""
    h, foo = harness("bidirectional", classic_record(generation=5))
    h.add_partitions("foo", 6)
    since = len(h.log)
    res = h.join("A", ["foo"])
    group = h.shard.groups["grp"]
    assert (group.group_epoch, group.assignment_epoch) == (6, 6)
    epochs = [x.value.epoch for x in h.log[since:] if isinstance(x.key, r.ConsumerGroupMetadataKey)]
    assert epochs == [5, 6]  # the conversion at the classic generation, then the bump
    bumps = [e for e in res.events if e.event is Event.GROUP_EPOCH_BUMPED]
    assert [e.fields["causes"] for e in bumps] == [(Cause.TOPIC_METADATA_CHANGED.value,)]
    assert res.response is not None
    assert (res.response.member_id, res.response.member_epoch) == ("A", 6)
    assert res.response.assignment is not None
    assert res.response.assignment.assigned == {foo: frozenset({0, 1, 4})}
    assert {x: group.target_of(x) for x in group.members} == {
        "A": {foo: frozenset({0, 1, 4})},
        "B": {foo: frozenset({2, 3, 5})},
    }
    # B, a classic member at generation 5, is told to rejoin.
    assert h.classic_heartbeat("B", 5).error_code == 27
    assert h.shard.snapshot() == h.replayed().snapshot()


def test_an_upgrade_of_malformed_embedded_protocol_bytes_is_group_id_not_found() -> None:
    # Kafka's convertToConsumerGroup: GROUP_ID_NOT_FOUND with its message, as every refusal of
    # an upgrade (before: INVALID_REQUEST); the classic group stays.
    h = Harness(config=GroupCoordinatorConfig(classic_initial_rebalance_delay_ms=0))
    h.create_topic("foo", 2)
    first = h.join_group(instance_id="a", protocols=(("range", b"\x00\x03garbage"),))
    h.sleep(0)
    assert h.completions[first.token].error_code == 0
    before = (h.shard.snapshot(), list(h.log))
    with pytest.raises(GroupIdNotFoundError) as info:
        h.join("K", ["foo"])
    assert info.value.message == (
        "Cannot upgrade classic group grp to consumer group because the embedded consumer"
        " protocol is malformed."
    )
    assert (h.shard.snapshot(), h.log) == before
