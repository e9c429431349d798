"""KIP-848's case studies as narrative golden tests.

Each step asserts the whole response and the whole ordered list of records (and, where it
matters, the timer operations). The group is driven through the pure core with the default
assignor ("uniform"), exactly as a server would drive it — with
``group.consumer.assignment.interval.ms=0``: the KIP's case studies compute the new target in
the heartbeat that changes the group, as Kafka did before 4.3. What batching changes (Kafka
4.3's default interval of 1 s) is told in tests/golden/test_assignment_batching.py.
"""

from __future__ import annotations

from builders import ca, mm, p

from coordinator.core import records as r
from coordinator.core.commands import ConsumerGroupHeartbeatResponse as Resp
from coordinator.core.commands import HeartbeatAssignment as HA
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.model import MemberState, TopicMetadata
from coordinator.core.timers import REBALANCE, SESSION, ArmTimer, CancelTimer
from coordinator.harness import Harness

G = "grp"
KIP = GroupCoordinatorConfig(consumer_assignment_interval_ms=0)
HB_MS = 5000
SESSION_MS = 45_000


STABLE = MemberState.STABLE
UNREVOKED = MemberState.UNREVOKED_PARTITIONS
UNRELEASED = MemberState.UNRELEASED_PARTITIONS


def test_basic() -> None:
    """KIP-848 "Basic": A, then B, then C join a group subscribed to foo (3 partitions)."""
    h = Harness(config=KIP)
    foo = h.create_topic("foo", 3)
    foo_md = {"foo": TopicMetadata(topic_id=foo, name="foo", num_partitions=3)}

    # Member A joins: group epoch 1, target A=[0,1,2]; A has nothing to revoke, so it goes
    # straight to epoch 1 with every partition.
    res = h.join("A", ["foo"])
    uid = h.shard.groups[G].group_uid
    assert uid.startswith("cgp_")
    assert res.response == Resp(
        member_id="A",
        member_epoch=1,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned=p(foo, 0, 1, 2), pending={}),
    )
    assert res.records == [
        mm("A"),
        r.partition_metadata_record(G, foo_md),
        r.group_epoch_record(G, 1, uid),
        r.target_assignment_record(G, "A", p(foo, 0, 1, 2)),
        r.target_assignment_epoch_record(G, 1),
        ca("A", 1, 0, STABLE, p(foo, 0, 1, 2)),
    ]
    assert res.timers == [CancelTimer((REBALANCE, G, "A")), ArmTimer((SESSION, G, "A"), SESSION_MS)]

    # Member B joins: epoch 2, target A=[0,1] B=[2]. B moves to epoch 2 but foo-2 is pending
    # until A revokes it.
    res = h.join("B", ["foo"])
    assert res.response == Resp(
        member_id="B",
        member_epoch=2,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned={}, pending=p(foo, 2)),
    )
    assert res.records == [
        mm("B"),
        r.group_epoch_record(G, 2, uid),
        r.target_assignment_record(G, "A", p(foo, 0, 1)),
        r.target_assignment_record(G, "B", p(foo, 2)),
        r.target_assignment_epoch_record(G, 2),
        ca("B", 2, 0, UNRELEASED, {}),
    ]

    # A heartbeats: it must revoke foo-2 first (stays at epoch 1; rebalance timer armed).
    res = h.heartbeat_result(member_id="A", member_epoch=1, topic_partitions=p(foo, 0, 1, 2))
    assert res.response == Resp(
        member_id="A",
        member_epoch=1,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned=p(foo, 0, 1), pending={}),
    )
    assert res.records == [ca("A", 1, 1, UNREVOKED, p(foo, 0, 1), p(foo, 2))]
    assert res.timers == [
        ArmTimer((REBALANCE, G, "A"), 60_000, 1),
        ArmTimer((SESSION, G, "A"), SESSION_MS),
    ]

    # A acknowledges the revocation: epoch 2, foo-2 released. Its assigned partitions do not
    # change, so the response carries no assignment ("unchanged").
    res = h.heartbeat_result(member_id="A", member_epoch=1, topic_partitions=p(foo, 0, 1))
    assert res.response == Resp(member_id="A", member_epoch=2, heartbeat_interval_ms=HB_MS)
    # KIP-1251: A keeps 0 and 1 at epoch 1, the epoch they were assigned at.
    assert res.records == [ca("A", 2, 1, STABLE, p(foo, 0, 1), epochs={1: p(foo, 0, 1)})]
    assert res.timers[0] == CancelTimer((REBALANCE, G, "A"))

    # B heartbeats and now gets foo-2.
    res = h.heartbeat_result(member_id="B", member_epoch=2, topic_partitions={})
    assert res.response == Resp(
        member_id="B",
        member_epoch=2,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned=p(foo, 2), pending={}),
    )
    assert res.records == [ca("B", 2, 2, STABLE, p(foo, 2))]

    # Member C joins: epoch 3, target A=[0] B=[2] C=[1]; C waits for foo-1.
    res = h.join("C", ["foo"])
    assert res.response == Resp(
        member_id="C",
        member_epoch=3,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned={}, pending=p(foo, 1)),
    )
    assert res.records == [
        mm("C"),
        r.group_epoch_record(G, 3, uid),
        r.target_assignment_record(G, "A", p(foo, 0)),
        r.target_assignment_record(G, "C", p(foo, 1)),
        r.target_assignment_epoch_record(G, 3),
        ca("C", 3, 0, UNRELEASED, {}),
    ]

    # B has nothing to revoke: straight to epoch 3 with the same partitions (no assignment in
    # the response: unchanged).
    res = h.heartbeat_result(member_id="B", member_epoch=2, topic_partitions=p(foo, 2))
    assert res.response == Resp(member_id="B", member_epoch=3, heartbeat_interval_ms=HB_MS)
    assert res.records == [ca("B", 3, 2, STABLE, p(foo, 2), epochs={2: p(foo, 2)})]

    # C heartbeats: foo-1 is still held by A, nothing changes.
    res = h.heartbeat_result(member_id="C", member_epoch=3)
    assert res.response == Resp(member_id="C", member_epoch=3, heartbeat_interval_ms=HB_MS)
    assert res.records == []

    # A revokes foo-1, then acknowledges.
    res = h.heartbeat_result(member_id="A", member_epoch=2, topic_partitions=p(foo, 0, 1))
    assert res.response == Resp(
        member_id="A",
        member_epoch=2,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned=p(foo, 0), pending={}),
    )
    assert res.records == [ca("A", 2, 2, UNREVOKED, p(foo, 0), p(foo, 1), epochs={1: p(foo, 0, 1)})]
    res = h.heartbeat_result(member_id="A", member_epoch=2, topic_partitions=p(foo, 0))
    assert res.response == Resp(member_id="A", member_epoch=3, heartbeat_interval_ms=HB_MS)
    assert res.records == [ca("A", 3, 2, STABLE, p(foo, 0), epochs={1: p(foo, 0)})]

    # C finally gets foo-1. Everyone is at the group epoch (3).
    res = h.heartbeat_result(member_id="C", member_epoch=3)
    assert res.response == Resp(
        member_id="C",
        member_epoch=3,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned=p(foo, 1), pending={}),
    )
    assert res.records == [ca("C", 3, 3, STABLE, p(foo, 1))]
    assert h.shard.describe_group(G).group_state == "Stable"
    assert h.owned() == {"A": p(foo, 0), "B": p(foo, 2), "C": p(foo, 1)}
    assert h.replayed().snapshot() == h.shard.snapshot()


def test_incremental_revocation_and_assignment() -> None:
    """KIP-848 "Incremental Revocation & Assignment": C joins A=[0,1,2], B=[3,4,5] at epoch 21."""
    h = Harness(config=KIP)
    foo = h.create_topic("foo", 6)
    h.seed_group(G, 21, {"A": (["foo"], p(foo, 0, 1, 2)), "B": (["foo"], p(foo, 3, 4, 5))})
    uid = h.shard.groups[G].group_uid

    res = h.join("C", ["foo"])
    assert res.response == Resp(
        member_id="C",
        member_epoch=22,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned={}, pending=p(foo, 2, 5)),
    )
    assert res.records == [
        mm("C"),
        r.group_epoch_record(G, 22, uid),
        r.target_assignment_record(G, "A", p(foo, 0, 1)),
        r.target_assignment_record(G, "B", p(foo, 3, 4)),
        r.target_assignment_record(G, "C", p(foo, 2, 5)),
        r.target_assignment_epoch_record(G, 22),
        ca("C", 22, 0, UNRELEASED, {}),
    ]
    # A is told to revoke foo-2, B to revoke foo-5; C: no change.
    assert h.heartbeat_result(member_id="A", member_epoch=21).records == [
        ca("A", 21, 21, UNREVOKED, p(foo, 0, 1), p(foo, 2))
    ]
    assert h.heartbeat_result(member_id="B", member_epoch=21).records == [
        ca("B", 21, 21, UNREVOKED, p(foo, 3, 4), p(foo, 5))
    ]
    assert h.heartbeat_result(member_id="C", member_epoch=22).records == []
    # A acknowledges: epoch 22, foo-2 released; C gets foo-2 but still waits for foo-5.
    res = h.heartbeat_result(member_id="A", member_epoch=21, topic_partitions=p(foo, 0, 1))
    assert res.records == [ca("A", 22, 21, STABLE, p(foo, 0, 1), epochs={21: p(foo, 0, 1)})]
    res = h.heartbeat_result(member_id="C", member_epoch=22)
    assert res.response == Resp(
        member_id="C",
        member_epoch=22,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned=p(foo, 2), pending=p(foo, 5)),
    )
    assert res.records == [ca("C", 22, 22, UNRELEASED, p(foo, 2))]
    # B acknowledges; C gets foo-2 and foo-5.
    res = h.heartbeat_result(member_id="B", member_epoch=21, topic_partitions=p(foo, 3, 4))
    assert res.records == [ca("B", 22, 21, STABLE, p(foo, 3, 4), epochs={21: p(foo, 3, 4)})]
    res = h.heartbeat_result(member_id="C", member_epoch=22)
    assert res.response == Resp(
        member_id="C",
        member_epoch=22,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned=p(foo, 2, 5), pending={}),
    )
    assert res.records == [ca("C", 22, 22, STABLE, p(foo, 2, 5))]
    assert h.replayed().snapshot() == h.shard.snapshot()


def test_member_failure() -> None:
    """KIP-848 "Member Failure": A stops heartbeating and is removed after its session timeout."""
    h = Harness(config=KIP)
    foo = h.create_topic("foo", 6)
    h.seed_group(
        G,
        22,
        {"A": (["foo"], p(foo, 0, 1)), "B": (["foo"], p(foo, 3, 4)), "C": (["foo"], p(foo, 2, 5))},
    )
    uid = h.shard.groups[G].group_uid

    # B and C keep heartbeating; A is silent.
    for _ in range(8):
        h.sleep(HB_MS)
        assert h.heartbeat_result(member_id="B", member_epoch=22).records == []
        assert h.heartbeat_result(member_id="C", member_epoch=22).records == []
    fired = h.sleep(SESSION_MS - 8 * HB_MS)
    assert len(fired) == 1
    assert fired[0].records == [
        r.current_assignment_tombstone(G, "A"),
        r.target_assignment_tombstone(G, "A"),
        r.member_metadata_tombstone(G, "A"),
        r.group_epoch_record(G, 23, uid),
    ]
    assert fired[0].timers == [CancelTimer((SESSION, G, "A")), CancelTimer((REBALANCE, G, "A"))]
    assert h.shard.describe_group(G).group_state == "Assigning"

    # The next heartbeat (B) computes the new target: B=[3,4,0], C=[2,5,1]; both move to 23.
    res = h.heartbeat_result(member_id="B", member_epoch=22)
    assert res.response == Resp(
        member_id="B",
        member_epoch=23,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned=p(foo, 0, 3, 4), pending={}),
    )
    assert res.records == [
        r.target_assignment_record(G, "B", p(foo, 0, 3, 4)),
        r.target_assignment_record(G, "C", p(foo, 1, 2, 5)),
        r.target_assignment_epoch_record(G, 23),
        ca("B", 23, 22, STABLE, p(foo, 0, 3, 4), epochs={22: p(foo, 3, 4)}),
    ]
    res = h.heartbeat_result(member_id="C", member_epoch=22)
    assert res.response == Resp(
        member_id="C",
        member_epoch=23,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned=p(foo, 1, 2, 5), pending={}),
    )
    assert res.records == [ca("C", 23, 22, STABLE, p(foo, 1, 2, 5), epochs={22: p(foo, 2, 5)})]
    assert h.shard.describe_group(G).group_state == "Stable"
    assert h.replayed().snapshot() == h.shard.snapshot()


def test_partition_added() -> None:
    """KIP-848 "Partition Added": foo grows from 1 to 2 partitions; B gets the new one."""
    h = Harness(config=KIP)
    foo = h.create_topic("foo", 1)
    h.seed_group(G, 22, {"A": (["foo"], p(foo, 0)), "B": (["foo"], {})})
    uid = h.shard.groups[G].group_uid

    h.add_partitions("foo", 2)
    # The coordinator notices on the group's next heartbeat: new partition metadata, epoch 23,
    # new target B=[1]. A keeps foo-0 and moves to epoch 23 (its assignment is unchanged: none
    # in the response).
    res = h.heartbeat_result(member_id="A", member_epoch=22)
    assert res.response == Resp(member_id="A", member_epoch=23, heartbeat_interval_ms=HB_MS)
    assert res.records == [
        r.partition_metadata_record(
            G, {"foo": TopicMetadata(topic_id=foo, name="foo", num_partitions=2)}
        ),
        r.group_epoch_record(G, 23, uid),
        r.target_assignment_record(G, "B", p(foo, 1)),
        r.target_assignment_epoch_record(G, 23),
        ca("A", 23, 22, STABLE, p(foo, 0), epochs={22: p(foo, 0)}),
    ]
    res = h.heartbeat_result(member_id="B", member_epoch=22)
    assert res.response == Resp(
        member_id="B",
        member_epoch=23,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned=p(foo, 1), pending={}),
    )
    assert res.records == [ca("B", 23, 22, STABLE, p(foo, 1))]
    assert h.replayed().snapshot() == h.shard.snapshot()
