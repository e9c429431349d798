"""A rolling downgrade of a static fleet (Kafka 4.0+, KAFKA-17317): a classic static member
whose JoinGroup takes the place of the last consumer-protocol member (same group.instance.id)
converts the consumer group to a classic group; a rebalance follows only when its subscription
differs (KAFKA-19546), the target assignment is stale (KAFKA-20273) or a member is still
reconciling. Other consumer-protocol members, a dynamic classic member or a policy without
downgrade leave the group a consumer group."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from coordinator.core import records as r
from coordinator.core.commands import Pending
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.errors import (
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    RebalanceInProgressError,
)
from coordinator.core.model import ClassicMemberMetadata, ConsumerGroupMember
from coordinator.core.offsets import (
    FetchedPartition,
    FetchedTopic,
    OffsetFetchGroup,
    OffsetFetchGroupResponse,
    OffsetFetchTopic,
)
from coordinator.harness import Harness, subscription
from legacy_bridge import messages as m
from legacy_bridge.classic_group import ClassicGroup
from legacy_bridge.common import encode_member_assignment
from legacy_bridge.protocol import decode_assignment

CLASSIC = ClassicMemberMetadata(
    session_timeout_ms=10_000, supported_protocols=(("range", subscription(["foo"])),)
)


def fleet(
    *, kip848: tuple[str, ...] = ("K",), policy: str = "bidirectional"
) -> tuple[Harness, str]:
    """A consumer group at epoch 3, foo's 4 partitions spread over the KIP-848 static members
    ``kip848`` (instance ids ``i-<member>``) and the classic static member C (``i-C``); an
    offset committed on foo-0."""
    h = Harness(config=GroupCoordinatorConfig(consumer_migration_policy=policy))
    foo = h.create_topic("foo", 4)
    names = (*kip848, "C")
    members = {
        mid: (["foo"], {foo: frozenset(p for p in range(4) if p % len(names) == i)})
        for i, mid in enumerate(names)
    }
    h.seed_group(
        "grp",
        3,
        members,
        instance_ids={mid: f"i-{mid}" for mid in names},
        classic={"C": CLASSIC},
    )
    assert h.commit("grp", kip848[0], 3, {("foo", 0): 42}) is not None
    return h, foo


def committed(h: Harness, foo: str) -> OffsetFetchGroupResponse:
    return h.shard.offset_fetch(
        OffsetFetchGroup(
            group_id="grp", topics=(OffsetFetchTopic(topic_id=foo, partition_indexes=(0,)),)
        )
    )


def partitions(group: ClassicGroup) -> dict[str, list[int]]:
    out = {}
    for mid, x in group.members.items():
        a = decode_assignment(x.assignment)
        out[mid] = sorted(p for _t, ps in a.assigned_partitions for p in ps)
    return out


def record_kinds(h: Harness, since: int) -> list[tuple[str, str, bool]]:
    """(record type, member id or "", tombstone) of every record since ``since``."""
    out = []
    for x in h.log[since:]:
        out.append(
            (
                type(x.key).__name__.removesuffix("Key"),
                getattr(x.key, "member_id", ""),
                x.value is None,
            )
        )
    return out


def test_replacing_the_last_kip848_member_downgrades_without_a_rebalance() -> None:
    h, foo = fleet()
    before = committed(h, foo)
    since = len(h.log)
    joined = h.join_group(instance_id="i-K")
    new = joined.member_id
    # As Kafka: no leader, no member list, the member's epoch and its first protocol (the
    # converted group's generation and protocol here: nothing changed).
    assert joined == m.JoinGroupResponse(
        generation_id=3, protocol_type="consumer", protocol_name="range", member_id=new
    )
    # One batch: the static replacement (as in any consumer group), then the conversion.
    assert record_kinds(h, since) == [
        ("ConsumerGroupCurrentMemberAssignment", "K", False),  # K leaves temporarily (-2)
        ("ConsumerGroupCurrentMemberAssignment", "K", True),
        ("ConsumerGroupTargetAssignmentMember", "K", True),
        ("ConsumerGroupMemberMetadata", "K", True),
        ("ConsumerGroupMemberMetadata", new, False),
        ("ConsumerGroupTargetAssignmentMember", new, False),
        ("ConsumerGroupCurrentMemberAssignment", new, False),
        ("ConsumerGroupMemberMetadata", new, False),  # now a classic member
        ("ConsumerGroupCurrentMemberAssignment", new, False),
        ("ConsumerGroupCurrentMemberAssignment", "C", True),
        ("ConsumerGroupTargetAssignmentMember", "C", True),
        ("ConsumerGroupMemberMetadata", "C", True),
        ("ConsumerGroupCurrentMemberAssignment", new, True),
        ("ConsumerGroupTargetAssignmentMember", new, True),
        ("ConsumerGroupMemberMetadata", new, True),
        ("ConsumerGroupTargetAssignmentMetadata", "", True),
        ("ConsumerGroupPartitionMetadata", "", True),
        ("ConsumerGroupMetadata", "", True),
        ("GroupMetadata", "", False),
    ]
    assert "grp" not in h.shard.groups
    group = h.shard.classic_groups["grp"]
    assert (group.state.value, group.generation, group.protocol_name) == ("Stable", 3, "range")
    # Everyone keeps its partitions: the new incarnation K's.
    assert partitions(group) == {"C": [1, 3], new: [0, 2]}
    assert h.assigned(h.sync_group(new, 3)) == {"foo": [0, 2]}
    assert h.classic_heartbeat("C", 3).error_code == 0
    assert h.classic_heartbeat(new, 3).error_code == 0
    # Only classic timers are left: each member's session, no consumer-group timer.
    assert sorted(k for k in h.timers.key_list() if k[1] == "grp") == [
        ("classic-session", "grp", "C"),
        ("classic-session", "grp", new),
    ]
    assert (
        committed(h, foo)
        == before
        == OffsetFetchGroupResponse(
            group_id="grp",
            topics=(
                FetchedTopic(
                    name="foo",
                    topic_id=foo,
                    partitions=(
                        FetchedPartition(partition_index=0, committed_offset=42, metadata=""),
                    ),
                ),
            ),
        )
    )
    assert h.shard.snapshot() == h.replayed().snapshot()


def rebalance(h: Harness, new: str, topics: list[str], generation: int) -> dict[str, list[int]]:
    """Both members rejoin the classic group's rebalance and sync; their assignments (foo)."""
    first = h.join_group(new, topics, instance_id="i-K")
    assert isinstance(first, Pending)
    second = h.join_group("C", instance_id="i-C")
    done = {new: h.resolve(first), "C": second}
    assert {mid: (x.error_code, x.generation_id) for mid, x in done.items()} == {
        new: (0, generation + 1),
        "C": (0, generation + 1),
    }
    leader = next(x for x in done.values() if x.members)
    assert leader.leader in done
    plan = {new: [0, 1], "C": [2, 3]}
    image = h.shard.topics
    assignments = {
        mid: encode_member_assignment(
            image,
            ConsumerGroupMember(
                member_id=mid, assigned_partitions={image.by_name["foo"].topic_id: frozenset(ps)}
            ),
        )
        for mid, ps in plan.items()
    }
    syncs = {}
    for mid in sorted(done, key=lambda x: x != leader.leader):
        syncs[mid] = h.resolve(
            h.sync_group(mid, generation + 1, assignments if mid == leader.leader else None)
        )
    return {mid: h.assigned(x).get("foo", []) for mid, x in syncs.items() if x is not None}


def test_a_replacing_member_with_another_subscription_downgrades_and_rebalances() -> None:
    h, foo = fleet()
    h.create_topic("bar", 2)
    joined = h.join_group(topics=("foo", "bar"), instance_id="i-K")
    new = joined.member_id
    # Kafka answers generation 0 (it skips the member's reconciliation when the subscription
    # changed), so its SyncGroup is ILLEGAL_GENERATION, and it rejoins.
    assert (joined.error_code, joined.generation_id, joined.leader) == (0, 0, "")
    group = h.shard.classic_groups["grp"]
    assert "grp" not in h.shard.groups
    assert (group.state.value, group.generation) == ("PreparingRebalance", 3)
    with pytest.raises(IllegalGenerationError):
        h.sync_group(new, 0)
    # The other member's heartbeat learns of the rebalance, and both rejoin.
    assert h.classic_heartbeat("C", 3).error_code == 27
    assert rebalance(h, new, ["foo", "bar"], 3) == {new: [0, 1], "C": [2, 3]}
    assert (group.state.value, group.generation) == ("Stable", 4)
    assert h.shard.classic_groups["grp"] is group
    assert committed(h, foo).topics[0].partitions[0].committed_offset == 42
    assert h.shard.snapshot() == h.replayed().snapshot()


def test_the_join_answers_the_members_first_protocol_as_kafka_does() -> None:
    # Kafka answers the joining member's first protocol, not the converted group's vote (before:
    # ours answered the vote, range). Its SyncGroup names that protocol: the classic group,
    # which voted range (C supports nothing else), refuses it, as Kafka's does.
    h, _ = fleet()
    sub = subscription(["foo"])
    joined = h.join_group(instance_id="i-K", protocols=(("roundrobin", sub), ("range", sub)))
    assert joined == m.JoinGroupResponse(
        generation_id=3,
        protocol_type="consumer",
        protocol_name="roundrobin",
        member_id=joined.member_id,
    )
    group = h.shard.classic_groups["grp"]
    assert (group.state.value, group.generation, group.protocol_name) == ("Stable", 3, "range")
    with pytest.raises(InconsistentGroupProtocolError):
        h.sync_group(joined.member_id, 3, protocol_type="consumer", protocol_name="roundrobin")
    assert h.assigned(h.sync_group(joined.member_id, 3)) == {"foo": [0, 2]}


def stale_target(h: Harness) -> r.Record:
    # KAFKA-20273: the group epoch is ahead of the target assignment (not computed yet).
    return r.group_epoch_record("grp", 4, "cgp_seeded")


def reconciling(h: Harness) -> r.Record:
    # C has not caught up with the group epoch: a classic group at generation 3 would fence it
    # (ILLEGAL_GENERATION) and keep the partitions the target moves.
    c = h.shard.groups["grp"].members["C"]
    return r.current_assignment_record("grp", replace(c, member_epoch=2, previous_member_epoch=1))


@pytest.mark.parametrize(
    ("state", "generation", "sync_error"),
    [(stale_target, 4, IllegalGenerationError), (reconciling, 3, RebalanceInProgressError)],
)
def test_a_stale_target_or_a_reconciling_member_makes_the_downgrade_rebalance(
    state: Callable[[Harness], r.Record], generation: int, sync_error: type[Exception]
) -> None:
    h, foo = fleet()
    rec = state(h)
    h.shard.replay(rec)
    h.log.append(rec)
    h.shard.release(h.shard.mark())
    joined = h.join_group(instance_id="i-K")
    # As Kafka: the epoch of the target from before the join (3), also when the target lagged
    # the group epoch (the classic group's generation, 4): that SyncGroup is ILLEGAL_GENERATION.
    assert (joined.error_code, joined.generation_id) == (0, 3)
    with pytest.raises(sync_error):
        h.sync_group(joined.member_id, 3)
    group = h.shard.classic_groups["grp"]
    assert (group.state.value, group.generation) == ("PreparingRebalance", generation)
    assert rebalance(h, joined.member_id, ["foo"], generation) == {
        joined.member_id: [0, 1],
        "C": [2, 3],
    }
    assert h.shard.snapshot() == h.replayed().snapshot()


def test_no_downgrade_while_other_kip848_members_remain() -> None:
    h, _ = fleet(kip848=("K", "L"))
    joined = h.join_group(instance_id="i-K")
    assert (joined.error_code, joined.generation_id, joined.leader) == (0, 3, "")
    assert "grp" not in h.shard.classic_groups
    group = h.shard.groups["grp"]
    assert sorted(mid for mid, x in group.members.items() if x.classic_member_metadata) == sorted(
        ["C", joined.member_id]
    )
    assert group.members["L"].classic_member_metadata is None
    # ... until the last one is replaced too.
    last = h.join_group(instance_id="i-L")
    assert (last.error_code, last.generation_id) == (0, 3)
    assert "grp" not in h.shard.groups
    assert sorted(h.shard.classic_groups["grp"].members) == sorted(
        ["C", joined.member_id, last.member_id]
    )
    assert h.shard.snapshot() == h.replayed().snapshot()


def test_a_dynamic_classic_member_does_not_downgrade() -> None:
    h, _ = fleet()
    first = h.join_group()
    assert first.error_code == 79  # MEMBER_ID_REQUIRED
    joined = h.join_group(first.member_id)
    assert joined.error_code == 0
    assert "grp" not in h.shard.classic_groups
    group = h.shard.groups["grp"]
    assert sorted(group.members) == sorted(["K", "C", first.member_id])
    assert group.members["K"].classic_member_metadata is None


@pytest.mark.parametrize("policy", ["upgrade", "disabled"])
def test_no_downgrade_when_the_policy_forbids_it(policy: str) -> None:
    h, _ = fleet(policy=policy)
    joined = h.join_group(instance_id="i-K")
    assert (joined.error_code, joined.generation_id) == (0, 3)
    assert "grp" not in h.shard.classic_groups
    group = h.shard.groups["grp"]
    assert all(x.classic_member_metadata is not None for x in group.members.values())
    assert sorted(group.members) == sorted(["C", joined.member_id])


def test_no_downgrade_beyond_the_classic_group_size_limit() -> None:
    h = Harness(config=GroupCoordinatorConfig(classic_max_size=1))
    foo = h.create_topic("foo", 4)
    h.seed_group(
        "grp",
        3,
        {"K": (["foo"], {foo: frozenset({0, 1})}), "C": (["foo"], {foo: frozenset({2, 3})})},
        instance_ids={"K": "i-K", "C": "i-C"},
        classic={"C": CLASSIC},
    )
    joined = h.join_group(instance_id="i-K")
    assert joined.error_code == 0
    assert "grp" in h.shard.groups and "grp" not in h.shard.classic_groups


def test_a_failed_write_of_the_downgrade_leaves_the_consumer_group() -> None:
    # The replacement and the conversion are one batch: a failed write rolls both back (the
    # runtime answers the JoinGroup COORDINATOR_NOT_AVAILABLE); the member's next JoinGroup
    # converts the group.
    h, _ = fleet()
    before = (h.shard.snapshot(), len(h.log), h.timers.key_list())
    h.fail_next_writes(1)
    h.join_group(instance_id="i-K")
    assert (h.shard.snapshot(), len(h.log), h.timers.key_list()) == before
    assert h.shard.groups["grp"].members["K"].classic_member_metadata is None
    joined = h.join_group(instance_id="i-K")
    assert (joined.error_code, joined.generation_id) == (0, 3)
    assert sorted(h.shard.classic_groups["grp"].members) == sorted(["C", joined.member_id])
    assert h.shard.snapshot() == h.replayed().snapshot()
