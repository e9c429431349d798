"""Classic groups on the bridged shard: join barrier, leader sync, heartbeats, leave, static
members, protocol vote, timeouts, durability (records replay into the same durable state)."""

from __future__ import annotations

import pytest
from builders import classic_assignment as asg

from coordinator.core import records as r
from coordinator.core.commands import Pending
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.errors import (
    ErrorCode,
    FencedInstanceIdError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    IllegalStateError,
    InconsistentGroupProtocolError,
    InvalidSessionTimeoutError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from coordinator.core.offsets import OffsetDeleteResponse, PartitionResult, TopicResult
from coordinator.core.timeline import UndoLog
from coordinator.harness import Harness, subscription
from legacy_bridge import messages as m
from legacy_bridge.classic_group import VALID_PREVIOUS_STATES, ClassicGroup, ClassicGroupState

META = subscription(["foo"])


def stable_group(h: Harness) -> tuple[str, str]:
    """Two dynamic members through MEMBER_ID_REQUIRED, the initial delay, join and sync."""
    first = h.join_group()
    assert first == m.JoinGroupResponse(
        error_code=79,
        error_message="The group member needs to have a valid member id before actually entering a consumer group.",
        member_id="client-member-2",
    )
    a = h.join_group("client-member-2")
    b = h.join_group(h.join_group().member_id)
    assert (a, b) == (Pending(1), Pending(2))
    h.sleep(2_999)
    assert h.completions == {}
    h.sleep(3_001)  # a member arrived during the first delay: one more delay (KIP-134)
    members = (
        m.JoinGroupMember(member_id="client-member-2", group_instance_id=None, metadata=META),
        m.JoinGroupMember(member_id="client-member-3", group_instance_id=None, metadata=META),
    )
    common = dict(
        generation_id=1, protocol_type="consumer", protocol_name="range", leader="client-member-2"
    )
    assert h.completions == {
        1: m.JoinGroupResponse(**common, member_id="client-member-2", members=members),
        2: m.JoinGroupResponse(**common, member_id="client-member-3"),
    }
    follower = h.sync_group("client-member-3", 1)
    assert isinstance(follower, Pending)
    leader = h.sync_group(
        "client-member-2", 1, {"client-member-2": asg(0, 1), "client-member-3": asg(2, 3)}
    )
    assert leader == m.SyncGroupResponse(
        protocol_type="consumer", protocol_name="range", assignment=asg(0, 1)
    )
    assert h.completions[follower.token] == m.SyncGroupResponse(
        protocol_type="consumer", protocol_name="range", assignment=asg(2, 3)
    )
    return "client-member-2", "client-member-3"


def test_two_members_form_a_stable_group_and_one_record_is_written() -> None:
    h = Harness()
    h.create_topic("foo", 4)
    stable_group(h)
    assert h.log == [
        r.classic_group_record(
            "grp",
            r.GroupMetadataValue(
                protocol_type="consumer",
                generation=1,
                protocol="range",
                leader="client-member-2",
                current_state_timestamp_ms=6_000,
                members=(
                    r.GroupMetadataMemberValue(
                        member_id="client-member-2",
                        group_instance_id=None,
                        client_id="client",
                        client_host="",
                        rebalance_timeout_ms=60_000,
                        session_timeout_ms=10_000,
                        subscription=META,
                        assignment=asg(0, 1),
                    ),
                    r.GroupMetadataMemberValue(
                        member_id="client-member-3",
                        group_instance_id=None,
                        client_id="client",
                        client_host="",
                        rebalance_timeout_ms=60_000,
                        session_timeout_ms=10_000,
                        subscription=META,
                        assignment=asg(2, 3),
                    ),
                ),
                # How generation 1 came about: the first join at 0 started the rebalance, the
                # join phase completed after two initial delays (6 s), the leader synced then.
                rebalance=r.GroupMetadataRebalanceValue(
                    preparing_ms=0,
                    completing_ms=6_000,
                    cause="member_joined",
                    client_reason=None,
                ),
            ),
        )
    ]
    assert h.classic_heartbeat("client-member-2", 1) == m.HeartbeatResponse()
    assert h.shard.snapshot() == h.replayed().snapshot()
    (described,) = h.shard.classic_groups.describe(["grp"])
    assert (
        described.group_state,
        described.protocol_data,
        [x.member_assignment for x in described.members],
    ) == ("Stable", "range", [asg(0, 1), asg(2, 3)])


def test_heartbeat_errors() -> None:
    h = Harness()
    h.create_topic("foo", 4)
    stable_group(h)
    with pytest.raises(UnknownMemberIdError):
        h.classic_heartbeat("client-member-2", 1, group_id="nope")
    with pytest.raises(UnknownMemberIdError):
        h.classic_heartbeat("ghost", 1)
    with pytest.raises(IllegalGenerationError):
        h.classic_heartbeat("client-member-2", 7)
    # A new member starts a rebalance: the others hear REBALANCE_IN_PROGRESS and rejoin.
    c = h.join_group(h.join_group().member_id)
    assert isinstance(c, Pending)
    assert h.classic_heartbeat("client-member-3", 1) == m.HeartbeatResponse(
        error_code=27, error_message="The group is rebalancing, so a rejoin is needed."
    )
    assert isinstance(h.join_group("client-member-2"), Pending)
    done = h.join_group(
        "client-member-3"
    )  # the last one completes the barrier and gets its answer at once
    assert done == m.JoinGroupResponse(
        generation_id=2,
        protocol_type="consumer",
        protocol_name="range",
        leader="client-member-2",
        member_id="client-member-3",
    )
    assert h.completions[c.token].generation_id == 2


def test_members_that_do_not_rejoin_are_removed_after_the_rebalance_timeout() -> None:
    h = Harness()
    h.create_topic("foo", 4)
    stable_group(h)
    h.leave_group("client-member-3")
    h.now_ms += 1
    # member-3 left: the leader is alone; its rejoin completes the join phase at once.
    resp = h.join_group("client-member-2")
    assert (resp.generation_id, resp.members) == (
        2,
        (m.JoinGroupMember(member_id="client-member-2", group_instance_id=None, metadata=META),),
    )
    sync = h.sync_group("client-member-2", 2, {"client-member-2": asg(0, 1, 2, 3)})
    assert sync.assignment == asg(0, 1, 2, 3)
    # Now member-2 stops heartbeating: the session timeout removes it; the group becomes Empty.
    h.sleep(10_000)
    assert h.shard.classic_groups["grp"].state.value == "Empty"
    assert h.log[-1] == r.classic_group_record(
        "grp",
        r.GroupMetadataValue(
            protocol_type="consumer",
            generation=3,
            protocol=None,
            leader=None,
            current_state_timestamp_ms=h.now_ms,
            members=(),
            rebalance=r.GroupMetadataRebalanceValue(
                preparing_ms=16_001,
                completing_ms=16_001,
                cause="member_fenced_session_timeout",
                client_reason=None,
                removed=(
                    r.GroupMetadataRemovedMember(
                        member_id="client-member-2",
                        cause="member_fenced_session_timeout",
                        removed_ms=16_001,
                    ),
                ),
            ),
        ),
    )
    assert h.shard.snapshot() == h.replayed().snapshot()


def test_join_validation() -> None:
    h = Harness(config=GroupCoordinatorConfig(classic_max_size=2))
    h.create_topic("foo", 4)
    with pytest.raises(InvalidSessionTimeoutError):
        h.join_group(session_timeout_ms=10)
    with pytest.raises(InconsistentGroupProtocolError):
        h.join_group(protocols=())
    with pytest.raises(UnknownMemberIdError):
        h.join_group("never-issued")
    leader, _follower = stable_group(h)
    # Kafka's order: the size limit before the protocols, the protocols before the member.
    with pytest.raises(GroupMaxSizeReachedError):
        h.join_group(protocols=(("roundrobin", META),))
    with pytest.raises(GroupMaxSizeReachedError):
        h.join_group()
    with pytest.raises(GroupMaxSizeReachedError):
        h.join_group("never-issued", protocols=(("roundrobin", META),))
    # A member's protocols must include one every member supports, its own current protocols
    # counted (Kafka's supportsProtocols).
    with pytest.raises(InconsistentGroupProtocolError):
        h.join_group(leader, protocols=(("roundrobin", META),))


def sole_member() -> tuple[Harness, str]:
    """A group of one dynamic member, its first generation joined (not synced)."""
    h = Harness(config=GroupCoordinatorConfig(classic_initial_rebalance_delay_ms=0))
    h.create_topic("foo", 4)
    first = h.join_group(h.join_group().member_id)
    h.sleep(0)
    return h, h.completions[first.token].member_id


def test_protocols_are_checked_before_the_member_and_count_its_own() -> None:
    h, only = sole_member()
    # Kafka checks the protocols before the member id (before: UNKNOWN_MEMBER_ID).
    with pytest.raises(InconsistentGroupProtocolError):
        h.join_group("never-issued", protocols=(("roundrobin", META),))
    with pytest.raises(UnknownMemberIdError):
        h.join_group("never-issued")
    # The only member cannot switch to a protocol it did not support (before: accepted, as
    # no *other* member had to support it); adding one first, then dropping the old, can.
    with pytest.raises(InconsistentGroupProtocolError):
        h.join_group(only, protocols=(("roundrobin", META),))
    both = h.join_group(only, protocols=(("roundrobin", META), ("range", META)))
    assert h.resolve(both).protocol_name == "roundrobin"
    again = h.join_group(only, protocols=(("roundrobin", META),))
    assert h.resolve(again).protocol_name == "roundrobin"


def full_stable_group(max_size: int, *, instance_id: str | None = None) -> tuple[Harness, str]:
    """A Stable group of one member (static if ``instance_id``) under group.max.size
    ``max_size``."""
    h = Harness(
        config=GroupCoordinatorConfig(
            classic_max_size=max_size, classic_initial_rebalance_delay_ms=0
        )
    )
    h.create_topic("foo", 4)
    first = h.join_group(instance_id=instance_id)
    if instance_id is None:
        first = h.join_group(first.member_id)
    h.sleep(0)
    joined = h.completions[first.token]
    assert h.sync_group(joined.member_id, 1, {joined.member_id: asg(0, 1)}).error_code == 0
    return h, joined.member_id


def test_member_ids_handed_out_do_not_count_toward_the_group_size() -> None:
    # Kafka's acceptJoiningMember counts members only: with one member under a limit of two,
    # every newcomer gets a member id (before: the second was refused while the first id was
    # pending); the first to join with it fills the group, the next is refused.
    h, _a = full_stable_group(2)
    b, c = h.join_group(), h.join_group()
    assert (b.error_code, c.error_code) == (79, 79)
    assert isinstance(h.join_group(b.member_id), Pending)
    group = h.shard.classic_groups["grp"]
    assert group.state.value == "PreparingRebalance"
    # In a rebalance the limit counts the members waiting in JoinGroup: b only, so c is in.
    assert isinstance(h.join_group(c.member_id), Pending)
    assert sorted(group.members) == sorted(["client-member-2", b.member_id, c.member_id])


def test_a_member_rejoining_after_the_rebalance_filled_up_is_removed() -> None:
    # Kafka kicks out the members that rejoin last once as many as the limit wait in JoinGroup
    # (the group was over the limit, e.g. after the limit was lowered): refused with
    # GROUP_MAX_SIZE_REACHED and no member id, removed, and the join completes without it.
    h, a = full_stable_group(2)
    b_id, c_id = h.join_group().member_id, h.join_group().member_id
    b, c = h.join_group(b_id), h.join_group(c_id)  # the rebalance waits for a, b and c
    assert isinstance(b, Pending) and isinstance(c, Pending)
    refused = h.join_group(a)
    assert refused == m.JoinGroupResponse(
        error_code=81,
        error_message=(
            "The classic group grp has reached its maximum size of 2: member client-member-2,"
            " which rejoined after it filled up, was removed."
        ),
        member_id="",
    )
    group = h.shard.classic_groups["grp"]
    assert sorted(group.members) == sorted([b_id, c_id])
    assert (group.state.value, group.generation) == ("CompletingRebalance", 2)
    assert h.resolve(b).generation_id == h.resolve(c).generation_id == 2
    assert not any(k[2] == a for k in h.timers.key_list())


def test_a_static_member_restarting_in_a_full_group_is_refused() -> None:
    # Kafka counts a static member's new incarnation as a newcomer (its member id is not
    # known yet): at the limit it is refused (before: it replaced its old incarnation).
    h, old = full_stable_group(1, instance_id="i1")
    with pytest.raises(GroupMaxSizeReachedError):
        h.join_group(instance_id="i1")
    assert h.shard.classic_groups["grp"].static_members["i1"] == old


def static_pair() -> tuple[Harness, str, str]:
    """A Stable group of the static leader L (``iL``, client ``cL``) and the static follower F
    (``iF``, client ``cF``), both on range with foo."""
    h = Harness(config=GroupCoordinatorConfig(classic_initial_rebalance_delay_ms=0))
    h.create_topic("foo", 4)
    h.create_topic("bar", 2)
    lead = h.join_group(instance_id="iL", client_id="cL")
    follow = h.join_group(instance_id="iF", client_id="cF")
    h.sleep(0)
    leader, follower = h.resolve(lead).member_id, h.resolve(follow).member_id
    assert h.resolve(lead).leader == leader
    h.sync_group(leader, 1, {leader: asg(0, 1), follower: asg(2, 3)})
    return h, leader, follower


def follower_answer(leader: str, member_id: str) -> m.JoinGroupResponse:
    """The JoinGroup answer of a member of generation 1 that is not told it leads."""
    return m.JoinGroupResponse(
        generation_id=1,
        protocol_type="consumer",
        protocol_name="range",
        leader=leader,
        member_id=member_id,
    )


def test_a_static_member_back_keeps_its_client_id_and_host() -> None:
    # Kafka's replaceStaticMember: the new incarnation keeps the old one's client id and host
    # (DescribeGroups, the record); before, it took the request's.
    h, leader, follower = static_pair()
    since = len(h.log)
    back = h.join_group(instance_id="iF", client_id="other")
    new = back.member_id
    assert new.startswith("iF-") and new != follower
    assert back == follower_answer(leader, new)
    (record,) = h.log[since:]
    assert [(x.member_id, x.client_id) for x in record.value.members] == [
        (leader, "cL"),
        (new, "cF"),
    ]
    (described,) = h.shard.classic_groups.describe(["grp"])
    assert [(x.member_id, x.client_id) for x in described.members] == [
        (leader, "cL"),
        (new, "cF"),
    ]
    assert h.sync_group(new, 1).assignment == asg(2, 3)
    assert h.shard.snapshot() == h.replayed().snapshot()


def test_a_static_leader_back_without_skip_assignment_is_answered_as_a_follower() -> None:
    # KIP-814: a v9+ leader back in a Stable group gets the member list and skip_assignment;
    # an older one (JoinGroup v0-v8) is answered as Kafka answers it, as a follower naming the
    # leader as it was before (its old incarnation), so that it only collects its assignment
    # (before: the member list, which such a client answers with an assignment of its own).
    h, leader, follower = static_pair()
    back = h.join_group(instance_id="iL", supports_skip_assignment=False)
    new = back.member_id
    assert back == follower_answer(leader, new)
    assert h.shard.classic_groups["grp"].leader_id == new != leader
    assert h.sync_group(new, 1).assignment == asg(0, 1)
    again = h.join_group(instance_id="iL")
    assert (again.leader, again.skip_assignment, [x.member_id for x in again.members]) == (
        again.member_id,
        True,
        [follower, again.member_id],
    )


def test_a_static_member_back_with_another_subscription_does_not_rebalance() -> None:
    """Kafka's updateStaticMemberThenRebalanceOrCompleteJoin: back in a Stable group, a static
    member's new protocol metadata (another subscription) rebalances only if the protocol the
    group would select changes; otherwise the new member id and metadata are written at once and
    the member answered. A returning leader sees the change in the member list (KIP-814)."""
    h, leader, follower = static_pair()
    since = len(h.log)
    both = subscription(["foo", "bar"])
    back = h.join_group(instance_id="iF", protocols=(("range", both),))
    new = back.member_id
    assert back == follower_answer(leader, new)
    group = h.shard.classic_groups["grp"]
    assert (group.state.value, group.generation) == ("Stable", 1)
    (record,) = h.log[since:]
    assert [(x.member_id, x.subscription) for x in record.value.members] == [
        (leader, META),
        (new, both),
    ]
    assert h.sync_group(new, 1).assignment == asg(2, 3)
    again = h.join_group(instance_id="iL")
    assert (again.generation_id, again.skip_assignment) == (1, True)
    assert [(x.member_id, x.metadata) for x in again.members] == [
        (new, both),
        (again.member_id, META),
    ]
    # Preferring a protocol the other member does not support changes nothing either: the
    # group would still select range (tests/unit/test_legacy_rebalance_record.py: a protocol
    # change that the vote follows rebalances).
    other = h.join_group(instance_id="iF", protocols=(("roundrobin", both), ("range", both)))
    assert (other.generation_id, group.state.value) == (1, "Stable")
    assert h.shard.snapshot() == h.replayed().snapshot()


def test_protocol_vote_picks_the_common_protocol_most_members_prefer() -> None:
    h = Harness(config=GroupCoordinatorConfig(classic_initial_rebalance_delay_ms=0))
    h.create_topic("foo", 4)
    a = h.join_group(h.join_group().member_id, protocols=(("range", META), ("sticky", META)))
    b = h.join_group(h.join_group().member_id, protocols=(("sticky", META), ("range", META)))
    c = h.join_group(
        h.join_group().member_id, protocols=(("sticky", META), ("x", META), ("range", META))
    )
    h.sleep(0)
    assert {h.completions[p.token].protocol_name for p in (a, b, c)} == {"sticky"}


def test_static_member_restart_keeps_the_generation_and_fences_the_old_id() -> None:
    h = Harness(config=GroupCoordinatorConfig(classic_initial_rebalance_delay_ms=0))
    h.create_topic("foo", 2)
    first = h.join_group(instance_id="i1")
    assert isinstance(first, Pending)
    h.sleep(0)
    old_id = h.completions[first.token].member_id
    assert old_id == "i1-member-2"
    h.sync_group(old_id, 1, {old_id: asg(0, 1)})
    again = h.join_group(instance_id="i1")
    assert again == m.JoinGroupResponse(
        generation_id=1,
        protocol_type="consumer",
        protocol_name="range",
        leader="i1-member-3",
        skip_assignment=True,
        member_id="i1-member-3",
        members=(
            m.JoinGroupMember(member_id="i1-member-3", group_instance_id="i1", metadata=META),
        ),
    )
    with pytest.raises(FencedInstanceIdError):
        h.classic_heartbeat(old_id, 1, instance_id="i1")
    # The old incarnation comes back with its old member id and the same instance id: fenced
    # (Kafka's validateMember), and nothing changes.
    before = (h.shard.snapshot(), len(h.log), h.timers.keys())
    with pytest.raises(FencedInstanceIdError, match="i1-member-2 .* fenced by member i1-member-3"):
        h.join_group(old_id, instance_id="i1")
    assert (h.shard.snapshot(), len(h.log), h.timers.keys()) == before
    assert h.shard.classic_groups["grp"].static_members["i1"] == "i1-member-3"
    assert h.sync_group("i1-member-3", 1).assignment == asg(0, 1)
    assert h.shard.snapshot() == h.replayed().snapshot()


def test_join_with_a_member_id_checks_its_instance_id() -> None:
    """Kafka's validateMember on JoinGroup with a member id: an instance id the group does not
    know, or one owned by another member, is refused; a dynamic member stays dynamic."""
    h = Harness()
    h.create_topic("foo", 4)
    stable_group(h)
    with pytest.raises(UnknownMemberIdError, match="Instance id i9 is unknown"):
        h.join_group("client-member-2", instance_id="i9")
    with pytest.raises(UnknownMemberIdError, match="Member ghost is not a member"):
        h.join_group("ghost")
    assert h.shard.classic_groups["grp"].state.value == "Stable"


def test_batched_leave_reports_each_member() -> None:
    h = Harness()
    h.create_topic("foo", 4)
    stable_group(h)
    resp = h.leave_group(
        "client-member-2", "ghost", m.LeaveMember(group_instance_id="nobody"), "client-member-3"
    )
    assert resp == m.LeaveGroupResponse(
        members=(
            m.LeaveMemberResponse(member_id="client-member-2", group_instance_id=None),
            m.LeaveMemberResponse(
                member_id="ghost",
                group_instance_id=None,
                error_code=25,
                error_message="Member ghost is not a member of group grp.",
            ),
            m.LeaveMemberResponse(
                member_id="",
                group_instance_id="nobody",
                error_code=25,
                error_message="Instance id nobody is unknown.",
            ),
            m.LeaveMemberResponse(member_id="client-member-3", group_instance_id=None),
        )
    )
    assert h.shard.classic_groups["grp"].state.value == "Empty"
    assert h.shard.snapshot() == h.replayed().snapshot()


def completing_rebalance(h: Harness) -> tuple[Pending, str]:
    """member-2 (the leader) and a second member at generation 2, waiting for SyncGroups; the
    first member's generation-1 join, and the second member's id."""
    h.create_topic("foo", 4)
    a = h.join_group(h.join_group().member_id)
    h.sleep(0)
    b_id = h.join_group().member_id
    b = h.join_group(b_id)
    resp_a = h.resolve(h.join_group("client-member-2"))
    assert resp_a.generation_id == 2 and h.completions[b.token].generation_id == 2
    return a, b_id


def test_pending_sync_is_answered_rebalance_in_progress_when_the_group_rebalances() -> None:
    h = Harness(config=GroupCoordinatorConfig(classic_initial_rebalance_delay_ms=0))
    a, b_id = completing_rebalance(h)
    follower = h.sync_group(b_id, 2)
    h.sleep(60_000)  # the leader never syncs: the sync timeout removes it and the group rebalances
    assert h.completions[follower.token] == m.SyncGroupResponse(
        error_code=27, error_message="The group is rebalancing, so a rejoin is needed."
    )
    assert "client-member-2" not in h.shard.classic_groups["grp"].members
    assert a.token in h.completions


def test_a_second_sync_of_a_waiting_member_answers_the_first() -> None:
    """A follower's SyncGroup sent again while its first waits for the leader: the first is
    answered at once (superseded, as a second JoinGroup supersedes a first), the second gets
    the assignment. Neither is left without an answer."""
    h = Harness(config=GroupCoordinatorConfig(classic_initial_rebalance_delay_ms=0))
    a, b_id = completing_rebalance(h)
    first = h.sync_group(b_id, 2)
    second = h.sync_group(b_id, 2)
    assert isinstance(first, Pending) and isinstance(second, Pending)
    assert h.completions[first.token] == m.SyncGroupResponse(
        error_code=27, error_message="A newer SyncGroup of this member superseded this one."
    )
    assert second.token not in h.completions
    leader = h.sync_group("client-member-2", 2, {"client-member-2": asg(0, 1), b_id: asg(2, 3)})
    assert leader.assignment == asg(0, 1)
    assert h.completions[second.token] == m.SyncGroupResponse(
        protocol_type="consumer", protocol_name="range", assignment=asg(2, 3)
    )
    assert a.token in h.completions


def test_loading_two_generations_rebuilds_the_group_from_the_last_record() -> None:
    """Found by the simulator (classic members, coordinator restart): replaying a later
    GroupMetadata record of a group that already exists must rebuild it from that record on
    load; the live path (the handler built the record from this very group) keeps its transient
    state. Before the fix the loaded group kept the first generation's members and generation."""
    h = Harness(config=GroupCoordinatorConfig(classic_initial_rebalance_delay_ms=0))
    h.create_topic("foo", 2)
    first = h.join_group(instance_id="i1")
    h.sleep(0)
    old_id = h.completions[first.token].member_id
    h.sync_group(old_id, 1, {old_id: asg(0, 1)})
    again = h.join_group(instance_id="i1")  # static restart in a stable group: a second record
    assert again.member_id != old_id and len(h.log) == 2
    loaded = h.replayed()
    group = loaded.classic_groups["grp"]
    assert (group.generation, list(group.members), group.leader_id) == (
        1,
        [again.member_id],
        again.member_id,
    )
    assert group.static_members["i1"] == again.member_id
    assert group.to_record_value() == group.durable == h.shard.classic_groups["grp"].durable
    live = h.shard.classic_groups["grp"]
    assert list(live.members) == [again.member_id]


# ---------------------------------------------------------------------- state transitions

S = ClassicGroupState
LEGAL = {
    (S.EMPTY, S.PREPARING_REBALANCE),
    (S.STABLE, S.PREPARING_REBALANCE),
    (S.COMPLETING_REBALANCE, S.PREPARING_REBALANCE),
    (S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE),
    (S.PREPARING_REBALANCE, S.EMPTY),
    (S.COMPLETING_REBALANCE, S.STABLE),
    *((s, S.DEAD) for s in S),
}


def test_the_transition_table_is_kafkas() -> None:
    """Kafka's ClassicGroupState.validPreviousStates, as (from, to) pairs."""
    assert {(p, s) for s, prev in VALID_PREVIOUS_STATES.items() for p in prev} == LEGAL
    assert set(VALID_PREVIOUS_STATES) == set(S)


@pytest.mark.parametrize("source", list(S), ids=lambda s: s.value)
@pytest.mark.parametrize("target", list(S), ids=lambda s: s.value)
def test_a_transition_is_checked_against_the_table(source: S, target: S) -> None:
    """A legal move changes the state; an illegal one raises and changes nothing (not even
    through the undo log)."""
    log = UndoLog()
    group = ClassicGroup(log, "grp")
    object.__setattr__(group, "state", source)
    before = (group.state, group.previous_state, group.state_timestamp_ms, len(log))
    if (source, target) in LEGAL:
        group.transition(target, 5)
        assert (group.state, group.previous_state, group.state_timestamp_ms) == (target, source, 5)
    else:
        with pytest.raises(IllegalStateError, match=f"from {source.value} to {target.value}"):
            group.transition(target, 5)
        assert (group.state, group.previous_state, group.state_timestamp_ms, len(log)) == before


# ---------------------------------------------------------------------- DeleteGroups and expiry


def stable_static_group(h: Harness) -> str:
    """A classic group "grp" of one static member, Stable at generation 1; its member id."""
    first = h.join_group(instance_id="i1")
    h.sleep(0)
    member = h.completions[first.token].member_id
    h.sync_group(member, 1, {member: asg(0, 1)})
    return member


def test_delete_groups_refuses_a_classic_group_with_members_and_keeps_its_offsets() -> None:
    """Kafka's ClassicGroup.validateDeleteGroup: only an Empty group may be deleted. (Deleting
    an active classic group used to answer NONE and drop its committed offsets.)"""
    h = Harness(config=GroupCoordinatorConfig(classic_initial_rebalance_delay_ms=0))
    h.create_topic("foo", 2)
    member = stable_static_group(h)
    h.commit("grp", member, 1, {("foo", 0): 5})
    before = h.shard.snapshot()
    res = h.run(lambda s: s.delete_groups(["grp"]))
    assert res.response == [("grp", ErrorCode.NON_EMPTY_GROUP, "Classic group grp is not empty.")]
    assert res.records == []
    assert h.shard.snapshot() == before


def test_delete_groups_deletes_an_empty_classic_group_with_its_offsets_not_its_configs() -> None:
    """Its dynamic configs are the cluster log's and outlive it (KIP-848, Kafka)."""
    h = Harness(config=GroupCoordinatorConfig(classic_initial_rebalance_delay_ms=0))
    h.create_topic("foo", 2)
    member = stable_static_group(h)
    h.commit("grp", member, 1, {("foo", 0): 5})
    h.alter_configs("grp", {"consumer.heartbeat.interval.ms": "7000"})
    h.leave_group(m.LeaveMember(group_instance_id="i1"))  # the generation completes empty
    assert h.shard.classic_groups["grp"].state is ClassicGroupState.EMPTY
    res = h.run(lambda s: s.delete_groups(["grp"]))
    assert res.response == [("grp", ErrorCode.NONE, None)]
    assert res.records == [
        r.offset_commit_tombstone("grp", "foo", 0),
        r.classic_group_tombstone("grp"),
    ]
    assert "grp" not in h.shard.classic_groups and "grp" not in h.shard.offsets
    assert h.shard.group_config("grp")["consumer.heartbeat.interval.ms"] == "7000"
    assert h.shard.list_groups() == []
    assert h.shard.snapshot() == h.replayed().snapshot()


def test_expiry_keeps_an_active_classic_groups_subscribed_offsets_and_deletes_it_once_empty() -> (
    None
):
    """Kafka's cleanupGroupMetadata on classic groups: offsets of topics the members subscribe
    to do not expire; an Empty classic group without offsets is deleted."""
    h = Harness(
        config=GroupCoordinatorConfig(
            classic_initial_rebalance_delay_ms=0, offsets_retention_minutes=1
        )
    )
    h.create_topic("foo", 2)
    h.create_topic("bar", 1)
    member = stable_static_group(h)  # subscribes to foo
    h.commit("grp", member, 1, {("foo", 0): 5, ("bar", 0): 6})
    for _ in range(13):  # 65 s, heartbeating every 5 s (session timeout 10 s)
        h.sleep(5_000)
        assert h.classic_heartbeat(member, 1, instance_id="i1") == m.HeartbeatResponse()
    assert h.expire_offsets().records == [r.offset_commit_tombstone("grp", "bar", 0)]
    assert list(h.shard.offsets["grp"]) == [("foo", 0)]
    h.leave_group(m.LeaveMember(group_instance_id="i1"))
    res = h.expire_offsets()
    assert res.records == [
        r.offset_commit_tombstone("grp", "foo", 0),
        r.classic_group_tombstone("grp"),
    ]
    assert "grp" not in h.shard.classic_groups
    assert h.shard.snapshot() == h.replayed().snapshot()


def test_offset_delete_on_a_classic_group() -> None:
    """The group exists even without offsets (not GROUP_ID_NOT_FOUND); the topics its members
    subscribe to are refused while it is not Empty (GROUP_SUBSCRIBED_TO_TOPIC)."""
    h = Harness(config=GroupCoordinatorConfig(classic_initial_rebalance_delay_ms=0))
    h.create_topic("foo", 2)
    h.create_topic("bar", 1)
    foo, bar = h.topic_id("foo"), h.topic_id("bar")
    member = stable_static_group(h)  # subscribes to foo
    res = h.run(lambda s: s.offset_delete("grp", [("bar", [0])]))
    assert res.response == OffsetDeleteResponse(
        topics=(
            TopicResult(name="bar", topic_id=bar, partitions=(PartitionResult(partition_index=0),)),
        )
    )
    h.commit("grp", member, 1, {("foo", 0): 5, ("bar", 0): 6})
    res = h.run(lambda s: s.offset_delete("grp", [("foo", [0]), ("bar", [0])]))
    assert res.response == OffsetDeleteResponse(
        topics=(
            TopicResult(
                name="foo",
                topic_id=foo,
                partitions=(
                    PartitionResult(
                        partition_index=0,
                        error_code=ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC,
                        error_message="The group is subscribed to topic foo.",
                    ),
                ),
            ),
            TopicResult(name="bar", topic_id=bar, partitions=(PartitionResult(partition_index=0),)),
        )
    )
    assert res.records == [r.offset_commit_tombstone("grp", "bar", 0)]
    h.leave_group(m.LeaveMember(group_instance_id="i1"))  # Empty: nothing is subscribed
    res = h.run(lambda s: s.offset_delete("grp", [("foo", [0])]))
    assert res.records == [r.offset_commit_tombstone("grp", "foo", 0)]


def test_delete_groups_deletes_only_an_empty_classic_group_with_its_offsets() -> None:
    """Kafka's ClassicGroup.validateDeleteGroup: NON_EMPTY_GROUP while it has members (its
    offsets stay); once Empty it goes with its offsets (tombstones), and is no longer listed.
    Found with kafka-python's KafkaAdminClient: DeleteGroups answered NONE for a classic group,
    deleted its offsets even while it had members, and left the group itself."""
    h = Harness()
    h.create_topic("foo", 4)
    a, b = stable_group(h)
    assert h.commit("grp", a, 1, {("foo", 0): 7}).topics[0].partitions[0].error_code == 0
    res = h.run(lambda s: s.delete_groups(["grp"]))
    assert res.response == [("grp", ErrorCode.NON_EMPTY_GROUP, "Classic group grp is not empty.")]
    assert res.records == [] and ("foo", 0) in h.shard.offsets["grp"]
    h.leave_group(a, b)
    assert h.shard.classic_groups["grp"].state.value == "Empty"
    before = len(h.log)
    res = h.run(lambda s: s.delete_groups(["grp", "nope"]))
    assert res.response == [
        ("grp", ErrorCode.NONE, None),
        ("nope", ErrorCode.GROUP_ID_NOT_FOUND, "Group nope not found."),
    ]
    assert h.log[before:] == [
        r.offset_commit_tombstone("grp", "foo", 0),
        r.classic_group_tombstone("grp"),
    ]
    assert "grp" not in h.shard.classic_groups and not h.shard.list_groups()
    assert h.shard.snapshot() == h.replayed().snapshot()


def test_an_empty_classic_group_without_offsets_can_be_deleted() -> None:
    h = Harness()
    h.create_topic("foo", 4)
    h.leave_group(*stable_group(h))
    res = h.run(lambda s: s.delete_groups(["grp"]))
    assert res.response == [("grp", ErrorCode.NONE, None)]
    assert res.records == [r.classic_group_tombstone("grp")]
    assert "grp" not in h.shard.classic_groups


def test_member_ids_are_kafkas_client_id_or_instance_id_and_a_uuid() -> None:
    """Kafka's ClassicGroup.generateMemberId: ``<client.id>-<uuid>`` for a dynamic member (in
    the MEMBER_ID_REQUIRED answer), ``<group.instance.id>-<uuid>`` for a static one; the UUID as
    Java writes it. Client-side assignors order members by these ids (librdkafka's test 0132)."""
    import re

    from coordinator.runtime.ids import RandomIds

    uuid = "[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"
    h = Harness(ids=RandomIds())
    h.create_topic("foo", 4)
    first = h.join_group(client_id="rdkafka")
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    assert re.fullmatch(f"rdkafka-{uuid}", first.member_id), first.member_id
    static = h.join_group(instance_id="i1", client_id="rdkafka")
    assert isinstance(static, Pending)
    (static_id,) = [x for x in h.shard.classic_groups["grp"].members if x.startswith("i1-")]
    assert re.fullmatch(f"i1-{uuid}", static_id), static_id


def test_a_sync_before_the_first_generation_is_not_inconsistent() -> None:
    # Kafka's isProtocolInconsistent compares only names both sides have: during the group's
    # first rebalance it has no protocol name yet, so a SyncGroup naming one learns of the
    # rebalance (before: INCONSISTENT_GROUP_PROTOCOL, fatal to Java clients).
    h = Harness()
    h.create_topic("foo", 4)
    first = h.join_group()
    assert isinstance(h.join_group(first.member_id), Pending)  # the initial delay runs
    with pytest.raises(RebalanceInProgressError):
        h.sync_group(first.member_id, 0, protocol_type="consumer", protocol_name="range")
    h.sleep(3_000)
    with pytest.raises(InconsistentGroupProtocolError):
        h.sync_group(first.member_id, 1, protocol_type="consumer", protocol_name="roundrobin")


def test_a_removed_members_waiting_join_is_answered_without_a_member_id() -> None:
    # Kafka completes the JoinGroup of a member it removes (LeaveGroup, session timeout) with
    # UNKNOWN_MEMBER_ID and no member id (before: its own id).
    h, leader = sole_member()
    h.sync_group(leader, 1, {leader: asg(0, 1, 2, 3)})
    newcomer = h.join_group().member_id
    waiting = h.join_group(newcomer)  # waits for the leader to rejoin
    assert isinstance(waiting, Pending)
    h.leave_group(newcomer)
    answered = h.resolve(waiting)
    assert (answered.error_code, answered.member_id, answered.generation_id) == (25, "", -1)


def test_a_new_member_waiting_in_join_group_is_removed_at_the_new_member_join_timeout() -> None:
    # Kafka: waiting in JoinGroup counts as heartbeating, except for a new member, which is
    # removed 5 minutes after it joined if the rebalance has not completed by then (it has no
    # member id to heartbeat with; a client that gave up would stay in every rebalance). Before:
    # it waited for as long as the rebalance did.
    h = Harness(config=GroupCoordinatorConfig(classic_initial_rebalance_delay_ms=0))
    h.create_topic("foo", 4)
    slow = {"session_timeout_ms": 1_000_000, "rebalance_timeout_ms": 900_000}
    first = h.join_group(h.join_group(**slow).member_id, **slow)
    h.sleep(0)
    leader = h.completions[first.token].member_id
    h.sync_group(leader, 1, {leader: asg(0, 1, 2, 3)})
    newcomer = h.join_group().member_id
    waiting = h.join_group(newcomer)  # the rebalance waits up to 900 s for the leader
    again = h.join_group(newcomer)  # its client sends it again: the deadline stays
    assert isinstance(waiting, Pending) and isinstance(again, Pending)
    h.sleep(299_999)
    assert h.resolve(again) is None
    h.sleep(1)
    assert h.resolve(again) == m.JoinGroupResponse(
        error_code=25,
        error_message=f"Member {newcomer} was removed from group grp: session timeout expired.",
        member_id="",
    )
    group = h.shard.classic_groups["grp"]
    assert sorted(group.members) == [leader]
    rejoined = h.resolve(h.join_group(leader, **slow))
    assert (rejoined.generation_id, [x.member_id for x in rejoined.members]) == (2, [leader])
