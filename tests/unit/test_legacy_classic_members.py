"""Classic members inside a consumer group: JoinGroup validation of static members (Kafka's
validateMember on the consumer-group path)."""

from __future__ import annotations

import pytest

from coordinator.core.errors import FencedInstanceIdError, UnknownMemberIdError
from coordinator.harness import Harness
from legacy_bridge import messages as m


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
