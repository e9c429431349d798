"""Classic members inside a consumer group: JoinGroup validation of static members (Kafka's
validateMember on the consumer-group path); when Heartbeat and SyncGroup tell them to rejoin."""

from __future__ import annotations

import pytest

from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.errors import (
    FencedInstanceIdError,
    GroupMaxSizeReachedError,
    InconsistentGroupProtocolError,
    UnknownMemberIdError,
)
from coordinator.core.model import ClassicMemberMetadata
from coordinator.harness import Harness, subscription
from legacy_bridge import messages as m

CLASSIC = ClassicMemberMetadata(
    session_timeout_ms=10_000, supported_protocols=(("range", subscription(["foo"])),)
)


def test_an_old_static_incarnation_is_fenced_in_a_consumer_group() -> None:
    h = Harness()
    h.create_topic("foo", 4)
    h.join("A", ["foo"])  # a consumer group with one consumer-protocol member
    # Its member id is a bare Uuid (Kafka's classicGroupJoinToConsumerGroup), not prefixed.
    first = h.join_group(instance_id="s1")
    assert first == m.JoinGroupResponse(
        generation_id=2, protocol_type="consumer", protocol_name="range", member_id="member-3"
    )
    # A new incarnation (no member id, same instance id) takes the place of the first.
    second = h.join_group(instance_id="s1")
    assert second == m.JoinGroupResponse(
        generation_id=2, protocol_type="consumer", protocol_name="range", member_id="member-4"
    )
    group = h.shard.groups["grp"]
    assert sorted(group.members) == ["A", "member-4"]
    before = (h.shard.snapshot(), len(h.log), h.timers.keys())
    # The old incarnation comes back with its old member id: fenced, nothing changes.
    with pytest.raises(FencedInstanceIdError, match="member-3 .* fenced by member member-4"):
        h.join_group("member-3", instance_id="s1")
    # A member id with an instance id the group does not know: unknown member.
    with pytest.raises(UnknownMemberIdError, match="Instance id s2 is unknown"):
        h.join_group("s2-member-9", instance_id="s2")
    assert (h.shard.snapshot(), len(h.log), h.timers.keys()) == before
    assert h.shard.snapshot() == h.replayed().snapshot()


def test_a_classic_member_rejoins_only_for_a_newer_target_assignment() -> None:
    # Kafka 4.3 (KAFKA-20272): a classic member of a consumer group is told to rejoin when a
    # target newer than its epoch is there, not merely when the group epoch moved: a target is
    # computed at most once per assignment interval (1 s by default), and a rejoin before it
    # would bring nothing (before: Heartbeat and SyncGroup answered REBALANCE_IN_PROGRESS, and
    # the member rejoined over and over until the target was computed).
    h = Harness()
    foo = h.create_topic("foo", 2)
    h.create_topic("bar", 2)
    h.seed_group("grp", 3, {"C": (["foo"], {foo: frozenset({0, 1})})}, classic={"C": CLASSIC})
    h.sleep(2_000)
    bar_member = {
        "member_id": "",
        "member_epoch": 0,
        "rebalance_timeout_ms": 60_000,
        "subscribed_topic_names": ("bar",),
        "topic_partitions": {},
    }
    h.heartbeat(**bar_member)  # the interval is over: the target follows at once
    group = h.shard.groups["grp"]
    assert (group.group_epoch, group.assignment_epoch) == (4, 4)
    assert h.classic_heartbeat("C", 3).error_code == 27  # REBALANCE_IN_PROGRESS
    rejoined = h.join_group("C")
    assert rejoined.generation_id == 4
    assert h.assigned(h.sync_group("C", 4)) == {"foo": [0, 1]}
    h.heartbeat(**bar_member)  # within the interval: the target waits
    assert (group.group_epoch, group.assignment_epoch) == (5, 4)
    assert h.classic_heartbeat("C", 4) == m.HeartbeatResponse()
    assert h.assigned(h.sync_group("C", 4)) == {"foo": [0, 1]}
    assert not any(k[0] == "classic-member-join" for k in h.timers.key_list())
    h.sleep(1_000)  # the target of epoch 5 is computed: now a rejoin brings it
    assert group.assignment_epoch == 5
    assert h.classic_heartbeat("C", 4).error_code == 27
    assert ("classic-member-join", "grp", "C") in h.timers.key_list()
    rejoined = h.join_group("C")
    assert rejoined.generation_id == 5
    assert h.assigned(h.sync_group("C", 5)) == {"foo": [0, 1]}
    assert h.classic_heartbeat("C", 5) == m.HeartbeatResponse()
    assert h.shard.snapshot() == h.replayed().snapshot()


def test_a_refused_sync_leaves_the_session_and_sync_deadlines_and_a_leave_names_the_member() -> (
    None
):
    # Kafka's classicGroupSyncToConsumerGroup refuses a SyncGroup that must rejoin before it
    # touches any timer: the SyncGroup deadline and the session stay (before: the sync deadline
    # was cancelled and the session restarted). Its LeaveGroup by instance id answers the
    # member id it removed (before: the empty one of the request).
    h = Harness()
    foo = h.create_topic("foo", 2)
    h.create_topic("bar", 2)
    h.seed_group(
        "grp",
        3,
        {"C": (["foo"], {foo: frozenset({0, 1})})},
        instance_ids={"C": "iC"},
        classic={"C": CLASSIC},
    )
    h.sleep(2_000)
    joined = h.join_group("C", instance_id="iC")
    assert joined.generation_id == 3
    h.heartbeat(  # another member: a newer target (the interval is over)
        member_id="",
        member_epoch=0,
        rebalance_timeout_ms=60_000,
        subscribed_topic_names=("bar",),
        topic_partitions={},
    )
    assert h.shard.groups["grp"].assignment_epoch == 4
    deadlines = {
        k: h.timers.get(k) for k in (("classic-member-sync", "grp", "C"), ("session", "grp", "C"))
    }
    h.sleep(1_000)
    refused = h.sync_group("C", 3, instance_id="iC")
    assert refused.error_code == 27
    assert {k: h.timers.get(k) for k in deadlines} == deadlines
    assert h.timers.get(("classic-member-join", "grp", "C")) is not None
    left = h.leave_group(m.LeaveMember(member_id="", group_instance_id="iC"))
    assert left == m.LeaveGroupResponse(
        members=(m.LeaveMemberResponse(member_id="C", group_instance_id="iC"),)
    )


def test_a_join_needs_a_protocol_every_classic_member_supports_and_room_first() -> None:
    # Kafka's ConsumerGroup.supportsClassicProtocols: one of the joining member's protocols
    # must be supported by *every* classic member, itself counted with the protocols it has
    # now (before: each other member had to share one with it, and its own were left out).
    # And the group's size comes first (throwIfConsumerGroupIsFull; before: a full group
    # handed out a member id with MEMBER_ID_REQUIRED first).
    h = Harness(config=GroupCoordinatorConfig(consumer_max_size=4))
    h.create_topic("foo", 4)
    sub = subscription(["foo"])
    h.join("K", ["foo"])  # a consumer group with one consumer-protocol member
    a = h.join_group(h.join_group().member_id, protocols=(("range", sub), ("rr", sub)))
    b = h.join_group(h.join_group().member_id, protocols=(("rr", sub), ("sticky", sub)))
    assert (a.error_code, b.error_code) == (0, 0)
    before = (h.shard.snapshot(), len(h.log))
    with pytest.raises(InconsistentGroupProtocolError):
        h.join_group(protocols=(("range", sub), ("sticky", sub)))  # a has no sticky, b no range
    with pytest.raises(InconsistentGroupProtocolError):
        h.join_group(b.member_id, protocols=(("range", sub),))  # b never had range
    assert (h.shard.snapshot(), len(h.log)) == before
    joined = h.join_group(b.member_id, protocols=(("rr", sub),))
    assert (joined.error_code, joined.protocol_name) == (0, "rr")
    rr = (("rr", sub),)
    c = h.join_group(h.join_group(protocols=rr).member_id, protocols=rr)
    assert (c.error_code, len(h.shard.groups["grp"].members)) == (0, 4)
    with pytest.raises(GroupMaxSizeReachedError):
        h.join_group(protocols=rr)
