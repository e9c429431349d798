"""DescribeGroups on the bridged shard answers as Kafka's describeGroups: its ``classicGroup``
lookup finds classic groups and simple groups (offsets only: Kafka's are empty classic groups
without a protocol); a consumer group — with classic members during a migration, or empty — is
GROUP_ID_NOT_FOUND "Group <id> is not a classic group." (Dead, no members), as an unknown group
is GROUP_ID_NOT_FOUND "Group <id> not found."."""

from __future__ import annotations

from builders import classic_assignment as asg
from builders import classic_record

from coordinator.core import records as r
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.harness import Harness
from legacy_bridge import messages as m


def harness(record: r.Record | None = None) -> Harness:
    h = Harness(config=GroupCoordinatorConfig(consumer_migration_policy="bidirectional"))
    h.create_topic("foo", 4)
    if record is not None:
        h.shard.replay(record)
        h.log.append(record)
        h.shard.release(h.shard.mark())
        h.timers.apply(h.shard.on_loaded(0))
    return h


def not_classic(group_id: str) -> m.DescribedGroup:
    return m.DescribedGroup(
        group_id=group_id,
        error_code=69,
        error_message=f"Group {group_id} is not a classic group.",
        group_state="Dead",
    )


def test_a_consumer_group_is_not_a_classic_group_even_when_empty() -> None:
    h = harness()
    assert h.join("K", ["foo"]).response.member_epoch == 1
    assert h.shard.groups["grp"].state().value == "Stable"
    assert h.shard.classic_groups.describe(["grp"]) == [not_classic("grp")]
    h.heartbeat(member_id="K", member_epoch=-1)  # leaves: the group stays, empty
    assert not h.shard.groups["grp"].members
    assert h.shard.classic_groups.describe(["grp"]) == [not_classic("grp")]


def test_a_consumer_group_with_classic_members_is_not_a_classic_group() -> None:
    h = harness(classic_record())  # Stable classic group: A and B
    before = h.shard.classic_groups.describe(["grp"])
    assert [(g.group_state, g.protocol_type, g.protocol_data, g.generation_id) for g in before] == [
        ("Stable", "consumer", "range", 5)
    ]
    assert [x.member_assignment for x in before[0].members] == [asg(0, 1), asg(2, 3)]
    h.join("K", ["foo"])  # upgrade: a consumer group with classic members A and B
    assert "grp" not in h.shard.classic_groups
    assert sorted(
        (x, y.classic_member_metadata is not None) for x, y in h.shard.groups["grp"].members.items()
    ) == [("A", True), ("B", True), ("K", False)]
    assert h.shard.classic_groups.describe(["grp"]) == [not_classic("grp")]
    # Its classic members heartbeat (told to rejoin: the upgrade bumped the group epoch); the
    # group is still not a classic group.
    assert h.classic_heartbeat("A", 5) == m.HeartbeatResponse(
        error_code=27, error_message="The group is rebalancing, so a rejoin is needed."
    )
    assert h.shard.classic_groups.describe(["grp"]) == [not_classic("grp")]


def test_simple_classic_and_unknown_groups_in_one_request() -> None:
    h = harness(classic_record(members=(), group_id="cl"))
    assert h.commit("simple", "", -1, {("foo", 0): 7}) is not None
    h.join("K", ["foo"], group_id="cg")
    assert h.shard.classic_groups.describe(["simple", "cl", "cg", "nope"]) == [
        m.DescribedGroup(group_id="simple", group_state="Empty", generation_id=0),
        m.DescribedGroup(
            group_id="cl", group_state="Empty", protocol_type="consumer", generation_id=5
        ),
        not_classic("cg"),
        m.DescribedGroup(
            group_id="nope",
            error_code=69,
            error_message="Group nope not found.",
            group_state="Dead",
        ),
    ]
    # As ListGroups lists them: the simple group is an empty classic group without a protocol.
    assert [(g.group_id, g.group_type, g.group_state) for g in h.shard.list_groups()] == [
        ("cg", "consumer", "Stable"),
        ("cl", "classic", "Empty"),
        ("simple", "classic", "Empty"),
    ]
