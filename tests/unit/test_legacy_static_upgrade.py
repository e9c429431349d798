"""A rolling upgrade of a static fleet (Kafka 3.9+, KAFKA-17228): a static member joining with
the consumer protocol (ConsumerGroupHeartbeat, epoch 0) under the ``group.instance.id`` of an
active *classic* member replaces it at once — a classic static member never sends LeaveGroup
when it restarts, so waiting for a release would stall the upgrade a whole session timeout per
member. Kafka checks the release only when both the holder and the joiner use the consumer
protocol. The old incarnation is fenced (FENCED_INSTANCE_ID) on its next request."""

from __future__ import annotations

from dataclasses import replace

import pytest
from builders import classic_assignment as asg

from coordinator.core import records as r
from coordinator.core.commands import Pending
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.errors import (
    FencedInstanceIdError,
    UnknownMemberIdError,
    UnreleasedInstanceIdError,
)
from coordinator.core.events import Cause, Event
from coordinator.core.model import ClassicMemberMetadata, MemberState
from coordinator.harness import Harness, subscription
from legacy_bridge import messages as m

CLASSIC = ClassicMemberMetadata(
    session_timeout_ms=10_000, supported_protocols=(("range", subscription(["foo"])),)
)
FENCED_C = "Static member C with instance id i-C was fenced by member N."


def mixed_group() -> tuple[Harness, str]:
    """A consumer group at epoch 3: K (consumer protocol, instance i-K) owns foo-0 and foo-2,
    C (classic protocol, instance i-C) owns foo-1 and foo-3."""
    h = Harness()
    foo = h.create_topic("foo", 4)
    h.seed_group(
        "grp",
        3,
        {"K": (["foo"], {foo: frozenset({0, 2})}), "C": (["foo"], {foo: frozenset({1, 3})})},
        instance_ids={"K": "i-K", "C": "i-C"},
        classic={"C": CLASSIC},
    )
    return h, foo


def test_a_consumer_protocol_member_replaces_an_active_classic_holder_at_once() -> None:
    h, foo = mixed_group()
    group = h.shard.groups["grp"]
    old = group.members["C"]
    since = len(h.log)
    res = h.join("N", ["foo"], instance_id="i-C")
    # Kafka's replaceMember: the old member's three tombstones, the new member id with the old
    # member's subscription (classic metadata included), its target and its current partitions
    # at epoch 0; then the heartbeat's own update (no classic metadata any more) and the
    # reconciliation to the target epoch. No epoch bump: the subscription is the same.
    copy = replace(old, member_id="N", member_epoch=0, previous_member_epoch=0)
    updated = replace(copy, classic_member_metadata=None)
    assert h.log[since:] == [
        r.current_assignment_tombstone("grp", "C"),
        r.target_assignment_tombstone("grp", "C"),
        r.member_metadata_tombstone("grp", "C"),
        r.member_metadata_record("grp", copy),
        r.target_assignment_record("grp", "N", {foo: frozenset({1, 3})}),
        r.current_assignment_record("grp", copy),
        r.member_metadata_record("grp", updated),
        r.current_assignment_record("grp", replace(updated, member_epoch=3)),
    ]
    assert res.response is not None
    assert (res.response.member_id, res.response.member_epoch) == ("N", 3)
    assert res.response.assignment is not None
    assert res.response.assignment.assigned == {foo: frozenset({1, 3})}
    assert [e.event for e in res.events] == [Event.STATIC_MEMBER_REPLACED]
    assert (group.group_epoch, group.static_members) == (3, {"i-K": "K", "i-C": "N"})
    assert group.members["N"].state is MemberState.STABLE
    assert group.members["N"].classic_member_metadata is None
    # The old member's timers go with it; the new one has its session.
    assert sorted(k for k in h.timers.key_list() if k[1] == "grp") == [
        ("session", "grp", "K"),
        ("session", "grp", "N"),
    ]
    assert h.shard.snapshot() == h.replayed().snapshot()


def test_the_replaced_classic_incarnation_is_fenced_on_its_next_request() -> None:
    """Kafka's validateConsumerGroupMember / getOrMaybeSubscribeStaticConsumerGroupMember: the
    instance id now names another member, so a JoinGroup, SyncGroup, Heartbeat or LeaveGroup
    naming it with the old member id gets FENCED_INSTANCE_ID; without the instance id the old
    member id is unknown. Nothing changes."""
    h, _foo = mixed_group()
    h.join("N", ["foo"], instance_id="i-C")
    before = (h.shard.snapshot(), len(h.log), h.timers.keys())
    with pytest.raises(FencedInstanceIdError) as info:
        h.join_group("C", instance_id="i-C")
    assert info.value.message == FENCED_C
    with pytest.raises(FencedInstanceIdError) as info:
        h.sync_group("C", 3, instance_id="i-C")
    assert info.value.message == FENCED_C
    with pytest.raises(FencedInstanceIdError) as info:
        h.classic_heartbeat("C", 3, instance_id="i-C")
    assert info.value.message == FENCED_C
    with pytest.raises(UnknownMemberIdError):
        h.classic_heartbeat("C", 3)
    left = h.leave_group(m.LeaveMember(member_id="C", group_instance_id="i-C"))
    assert [(x.member_id, x.group_instance_id, x.error_code) for x in left.members] == [
        ("C", "i-C", 82)
    ]
    # Its offset commits are refused: its member is gone.
    with pytest.raises(UnknownMemberIdError) as unknown:
        h.commit("grp", "C", 3, {("foo", 1): 7})
    assert unknown.value.message == "Member C is not a member of group grp."
    assert (h.shard.snapshot(), len(h.log), h.timers.keys()) == before


def test_a_consumer_protocol_holder_must_still_release_its_instance_id() -> None:
    """Only a classic holder is replaced at once: a consumer-protocol holder that did not leave
    temporarily (epoch -2) keeps its instance id (UNRELEASED_INSTANCE_ID), as before."""
    h, _foo = mixed_group()
    h.join("N", ["foo"], instance_id="i-C")  # N: now a consumer-protocol holder
    before = (h.shard.snapshot(), len(h.log))
    with pytest.raises(UnreleasedInstanceIdError):
        h.join("P", ["foo"], instance_id="i-C")
    with pytest.raises(UnreleasedInstanceIdError):
        h.join("Q", ["foo"], instance_id="i-K")
    assert (h.shard.snapshot(), len(h.log)) == before


def static_classic_group(h: Harness) -> tuple[str, str]:
    """A classic group of two static members (i-A, i-B), Stable at generation 1: A owns foo-0
    and foo-1, B foo-2 and foo-3. Their member ids."""
    a = h.join_group(instance_id="i-A")
    b = h.join_group(instance_id="i-B")
    h.sleep(0)
    ja, jb = h.completions[a.token], h.completions[b.token]
    leader, follower = (ja, jb) if ja.leader == ja.member_id else (jb, ja)
    h.sync_group(leader.member_id, 1, {ja.member_id: asg(0, 1), jb.member_id: asg(2, 3)})
    h.sync_group(follower.member_id, 1)
    group = h.shard.classic_groups["grp"]
    assert (group.state.value, group.generation) == ("Stable", 1)
    return ja.member_id, jb.member_id


def test_an_upgrade_by_a_static_member_replaces_its_classic_incarnation() -> None:
    """The classic group is converted (Kafka's convertToConsumerGroup: a waiting JoinGroup is
    answered REBALANCE_IN_PROGRESS), then the joining member takes its classic incarnation's
    place. Kafka's conversion leaves the group without subscription metadata, so this very
    heartbeat bumps the epoch: a new target from the topics as they are now."""
    h = Harness(config=GroupCoordinatorConfig(classic_initial_rebalance_delay_ms=0))
    foo = h.create_topic("foo", 4)
    a, b = static_classic_group(h)
    h.create_topic("bar", 2)
    # B rejoins with another subscription: a rebalance starts, B's JoinGroup waits.
    waiting = h.join_group(b, ["foo", "bar"], instance_id="i-B")
    assert isinstance(waiting, Pending)
    since = len(h.log)
    res = h.join("N", ["foo"], instance_id="i-A")
    assert h.completions[waiting.token] == m.JoinGroupResponse(
        error_code=27,
        error_message=h.completions[waiting.token].error_message,
        member_id=b,
    )
    kinds = [
        (type(x.key).__name__.removesuffix("Key"), getattr(x.key, "member_id", ""), x.value is None)
        for x in h.log[since:]
    ]
    assert kinds == [
        ("GroupMetadata", "", True),  # the classic group goes
        ("ConsumerGroupMemberMetadata", a, False),  # the conversion: A and B at generation 1
        ("ConsumerGroupMemberMetadata", b, False),
        ("ConsumerGroupPartitionMetadata", "", False),
        ("ConsumerGroupMetadata", "", False),
        ("ConsumerGroupTargetAssignmentMember", a, False),
        ("ConsumerGroupTargetAssignmentMember", b, False),
        ("ConsumerGroupTargetAssignmentMetadata", "", False),
        ("ConsumerGroupCurrentMemberAssignment", a, False),
        ("ConsumerGroupCurrentMemberAssignment", b, False),
        ("ConsumerGroupCurrentMemberAssignment", a, True),  # N replaces A at once
        ("ConsumerGroupTargetAssignmentMember", a, True),
        ("ConsumerGroupMemberMetadata", a, True),
        ("ConsumerGroupMemberMetadata", "N", False),
        ("ConsumerGroupTargetAssignmentMember", "N", False),
        ("ConsumerGroupCurrentMemberAssignment", "N", False),
        ("ConsumerGroupMemberMetadata", "N", False),  # no classic metadata any more
        ("ConsumerGroupMetadata", "", False),  # epoch 2
        ("ConsumerGroupTargetAssignmentMember", "N", False),  # B now subscribes to bar too
        ("ConsumerGroupTargetAssignmentMember", b, False),
        ("ConsumerGroupTargetAssignmentMetadata", "", False),
        ("ConsumerGroupCurrentMemberAssignment", "N", False),
    ]
    bumps = [e for e in res.events if e.event is Event.GROUP_EPOCH_BUMPED]
    assert [e.fields["causes"] for e in bumps] == [(Cause.TOPIC_METADATA_CHANGED.value,)]
    group = h.shard.groups["grp"]
    assert "grp" not in h.shard.classic_groups
    assert (group.group_epoch, group.assignment_epoch) == (2, 2)
    assert res.response is not None
    assert res.response.member_epoch == 2
    assert res.response.assignment is not None
    assert res.response.assignment.assigned == {foo: frozenset({0, 1})}
    assert sorted(group.members) == sorted([b, "N"])
    bar = h.topic_id("bar")
    assert {x: group.target_of(x) for x in group.members} == {
        b: {foo: frozenset({2}), bar: frozenset({0, 1})},
        "N": {foo: frozenset({0, 1, 3})},
    }
    # N has A's partitions at once, foo-3 once B releases it.
    assert group.members["N"].state is MemberState.UNRELEASED_PARTITIONS
    # The old incarnation is fenced on its next request; B is told to rejoin.
    with pytest.raises(FencedInstanceIdError):
        h.join_group(a, instance_id="i-A")
    with pytest.raises(FencedInstanceIdError):
        h.classic_heartbeat(a, 1, instance_id="i-A")
    assert h.classic_heartbeat(b, 1, instance_id="i-B").error_code == 27
    assert h.shard.snapshot() == h.replayed().snapshot()
