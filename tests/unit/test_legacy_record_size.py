"""A classic group's GroupMetadata record is bounded as Kafka bounds it: it must fit the
offsets topic's largest message (``message.max.bytes``, 1048588 bytes by default). Kafka's
append of a larger record fails with MESSAGE_TOO_LARGE, which the group coordinator answers
UNKNOWN_SERVER_ERROR (``appendGroupMetadataErrorToResponseError``): the leader's SyncGroup
whose members' metadata and assignments make the record too large fails as a failed write of
that record (every member waiting in SyncGroup gets the error, the assignments are emptied, a
new rebalance starts), and a static member coming back to a Stable group with protocols too
large for the record is refused, the group unchanged. Nothing of the oversize data is written."""

from __future__ import annotations

from typing import Any

import pytest
from builders import classic_assignment as asg

from coordinator.core.config import GroupCoordinatorConfig, parse_config
from coordinator.core.errors import ErrorCode, UnknownServerError
from coordinator.harness import Harness
from legacy_bridge import messages as m
from legacy_bridge.classic_group import ClassicGroup, ClassicGroupState, group_metadata_size
from legacy_bridge.protocol import AssignmentMessage, Subscription, encode_assignment
from legacy_bridge.protocol import encode_subscription as enc_sub

A, B = "client-member-2", "client-member-3"
S = ClassicGroupState
KIB = 1024


def big_subscription(size: int) -> bytes:
    """A consumer's subscription of ``foo`` carrying ``size`` bytes of user data."""
    return enc_sub(Subscription(topics=("foo",), user_data=b"s" * size))


def big_assignment(size: int, *ps: int) -> bytes:
    return encode_assignment(
        AssignmentMessage(assigned_partitions=(("foo", ps),), user_data=b"a" * size)
    )


def group(h: Harness) -> ClassicGroup:
    g: ClassicGroup = h.shard.classic_groups["grp"]
    return g


def stored_sizes(h: Harness) -> list[int]:
    """The size (Kafka's encoding) of every GroupMetadata record in the store."""
    return [group_metadata_size(rec.key.group_id, rec.value) for rec in h.log]


def generation_one(h: Harness, a_metadata: bytes) -> Any:
    """A (the leader, with ``a_metadata``) and B joined: generation 1 in CompletingRebalance,
    B's SyncGroup waiting for the leader's."""
    h.create_topic("foo", 4)
    h.join_group(h.join_group().member_id, protocols=(("range", a_metadata),))
    h.join_group(h.join_group().member_id)
    h.sleep(6_000)
    leader_join = h.completions[1]
    assert leader_join.generation_id == 1 and leader_join.leader == A
    assert [x.metadata for x in leader_join.members][0] == a_metadata
    follower = h.sync_group(B, 1)
    assert follower.token == 3
    return follower


def test_a_sync_whose_record_exceeds_message_max_bytes_fails_every_waiting_member() -> None:
    """A's subscription (700 KiB) and the assignment the leader gives B (400 KiB) each fit,
    together they do not: the leader's SyncGroup fails as Kafka's append of that record fails
    with MESSAGE_TOO_LARGE — the leader and the follower waiting get UNKNOWN_SERVER_ERROR with
    no assignment, nothing is written, no assignment is kept, the group goes back to
    PreparingRebalance at the same generation. The next generation, with assignments that fit,
    is written and Stable (A's subscription still in it: Kafka keeps a member's protocols in
    memory; only the record is bounded)."""
    h = Harness()
    a_meta = big_subscription(700 * KIB)
    follower = generation_one(h, a_meta)
    plan = {A: asg(0, 1), B: big_assignment(400 * KIB, 2, 3)}
    message = (
        "The GroupMetadata record of group grp would be 1126750 bytes, larger than "
        "message.max.bytes (1048588): MESSAGE_TOO_LARGE."
    )
    assert h.sync_group(A, 1, plan) == m.SyncGroupResponse(
        error_code=ErrorCode.UNKNOWN_SERVER_ERROR, error_message=message
    )
    assert h.completions[follower.token] == m.SyncGroupResponse(
        error_code=ErrorCode.UNKNOWN_SERVER_ERROR, error_message=message
    )
    assert h.log == []
    g = group(h)
    assert (g.state, g.previous_state, g.generation) == (
        S.PREPARING_REBALANCE,
        S.COMPLETING_REBALANCE,
        1,
    )
    assert [(x.member_id, x.assignment, x.sync_token) for x in g.members.values()] == [
        (A, b"", None),
        (B, b"", None),
    ]
    assert not g.pending_sync
    assert h.timers.get(("classic-join", "grp", "")) == (h.now_ms + 60_000, 1)
    assert h.timers.get(("classic-sync", "grp", "")) is None
    assert h.shard.snapshot() == h.replayed().snapshot()
    # Both rejoin; the leader's assignment now fits: generation 2 is written, Stable.
    a = h.join_group(A, protocols=(("range", a_meta),))
    b = h.resolve(h.join_group(B))
    assert b.generation_id == 2 and b.leader == A
    assert h.completions[a.token].generation_id == 2
    follower = h.sync_group(B, 2)
    ok = {A: asg(0, 1), B: asg(2, 3)}
    assert h.sync_group(A, 2, ok) == m.SyncGroupResponse(
        protocol_type="consumer", protocol_name="range", assignment=asg(0, 1)
    )
    assert h.completions[follower.token] == m.SyncGroupResponse(
        protocol_type="consumer", protocol_name="range", assignment=asg(2, 3)
    )
    assert g.state is S.STABLE
    assert [(x.member_id, x.assignment) for x in g.members.values()] == [
        (A, asg(0, 1)),
        (B, asg(2, 3)),
    ]
    assert stored_sizes(h) == [group_metadata_size("grp", g.to_record_value())]
    assert stored_sizes(h)[0] <= 1_048_588
    assert h.shard.snapshot() == h.replayed().snapshot()


def test_the_limit_is_message_max_bytes_and_a_record_of_exactly_that_size_fits() -> None:
    """``message.max.bytes`` is the limit (at least 1); a record of exactly the limit is
    written, one byte over fails."""
    assert GroupCoordinatorConfig().message_max_bytes == 1_048_588
    assert parse_config({"message.max.bytes": "5000"}).message_max_bytes == 5000
    h = Harness()
    generation_one(h, big_subscription(100))
    plan = {A: asg(0, 1), B: asg(2, 3)}
    size = group_metadata_size("grp", group(h).to_record_value()) + len(asg(0, 1) + asg(2, 3))
    for limit, fits in ((size, True), (size - 1, False)):
        h2 = Harness(config=GroupCoordinatorConfig(message_max_bytes=limit))
        follower = generation_one(h2, big_subscription(100))
        answer = h2.sync_group(A, 1, plan)
        if fits:
            assert answer == m.SyncGroupResponse(
                protocol_type="consumer", protocol_name="range", assignment=asg(0, 1)
            )
            assert stored_sizes(h2) == [limit]
        else:
            assert answer == m.SyncGroupResponse(
                error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
                error_message=f"The GroupMetadata record of group grp would be {size} bytes,"
                f" larger than message.max.bytes ({limit}): MESSAGE_TOO_LARGE.",
            )
            assert h2.completions[follower.token].error_code == ErrorCode.UNKNOWN_SERVER_ERROR
            assert h2.log == []


def test_a_static_member_back_with_protocols_too_large_for_the_record_is_refused() -> None:
    """A static member restarting into a Stable group (no rebalance: the record is written at
    once with its new member id and protocols) whose new subscription makes the record too
    large: Kafka's write fails and the replacement is undone; its JoinGroup is answered
    UNKNOWN_SERVER_ERROR, the group keeps the old member, and the store only its own record."""
    h = Harness(config=GroupCoordinatorConfig(message_max_bytes=64 * KIB))
    h.create_topic("foo", 4)
    first = h.join_group(instance_id="i")
    h.sleep(3_000)
    old = h.completions[first.token]
    assert h.sync_group(old.member_id, 1, {old.member_id: asg(0, 1, 2, 3)}, instance_id="i")
    before = list(h.log)
    snapshot = h.shard.snapshot()
    with pytest.raises(UnknownServerError) as e:
        h.join_group(instance_id="i", protocols=(("range", big_subscription(64 * KIB)),))
    assert e.value.message.startswith("The GroupMetadata record of group grp would be ")
    assert e.value.message.endswith(" larger than message.max.bytes (65536): MESSAGE_TOO_LARGE.")
    assert h.log == before
    assert h.shard.snapshot() == snapshot
    assert list(group(h).members) == [old.member_id]
    # The same member back with its usual subscription is replaced as ever.
    back = h.join_group(instance_id="i")
    assert back.error_code == ErrorCode.NONE and back.member_id != old.member_id
    assert list(group(h).members) == [back.member_id]
    assert len(h.log) == len(before) + 1
