"""What the core says happened: structured log events with their causes (coordinator/core/
events.py), returned with each result and never logged by the core itself."""

from __future__ import annotations

from builders import G, RoundRobinAssignor, p

from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.events import Event, LogEvent
from coordinator.harness import Harness
from legacy_bridge import messages as m


def harness(**kw: object) -> tuple[Harness, str]:
    h = Harness(assignors=[RoundRobinAssignor(), RoundRobinAssignor("other")], **kw)  # type: ignore[arg-type]
    foo = h.create_topic("foo", 4)
    return h, foo


def bumped(
    epoch: int, causes: tuple[str, ...], members: tuple[str, ...], **extra: object
) -> LogEvent:
    return LogEvent(
        event=Event.GROUP_EPOCH_BUMPED,
        group_id=G,
        fields={"group_epoch": epoch, "causes": causes, "member_ids": members, **extra},
    )


def test_each_epoch_bump_says_why() -> None:
    h, _foo = harness()
    h.create_topic("bar", 1)
    assert h.join("A", ["foo"]).events == [bumped(1, ("member_joined",), ("A",))]
    assert h.join("B", ["foo"]).events == [bumped(2, ("member_joined",), ("B",))]
    epochs = {"A": 1, "B": 2}

    def beat(member: str, **fields: object) -> list[LogEvent]:
        fields.setdefault("member_epoch", epochs[member])
        res = h.heartbeat_result(member_id=member, **fields)
        assert res.response is not None
        epochs[member] = res.response.member_epoch
        return res.events

    assert beat("A", subscribed_topic_names=("bar", "foo")) == [
        bumped(3, ("subscription_changed",), ("A",))
    ]
    # A new regex changes nothing until it is resolved, off the heartbeat path (Kafka 4.x).
    assert beat("B", subscribed_topic_regex="ba.*") == []
    assert h.resolve_regexes().events == [bumped(4, ("regex_resolved",), ())]
    assert beat("B", server_assignor="other") == [bumped(5, ("assignor_changed",), ("B",))]
    h.add_partitions("foo", 6)  # the topic grew: noticed by the next heartbeat
    events = beat("A")
    assert events == [bumped(6, ("topic_metadata_changed",), ("A",))]
    assert events[0].message() == (
        "[GroupId grp] Bumped group epoch to 6: topic_metadata_changed (members A)."
    )
    # A steady heartbeat changes nothing and says nothing.
    beat("B")
    assert beat("B") == []
    assert beat("B", member_epoch=-1) == [bumped(7, ("member_left",), ("B",))]


def test_fencing_says_which_timeout() -> None:
    h, foo = harness()
    h.join("A", ["foo"])
    h.join("B", ["foo"])  # A must revoke foo-1, foo-3
    h.heartbeat(member_id="A", member_epoch=1, topic_partitions=p(foo, 0, 1, 2, 3))
    # B falls silent: its session timeout (45 s) fences it. A keeps heartbeating but never
    # acknowledges the revocation: its rebalance timeout (60 s) fences it.
    fired = h.sleep(20_000)
    h.heartbeat(member_id="A", member_epoch=1)
    fired += h.sleep(20_000)
    h.heartbeat(member_id="A", member_epoch=1)
    fired += h.sleep(20_000)
    events = [e for res in fired for e in res.events]
    assert events == [
        bumped(3, ("member_fenced_session_timeout",), ("B",), reason="session timeout expired"),
        bumped(
            4,
            ("member_fenced_rebalance_timeout",),
            ("A",),
            reason="failed to revoke partitions from epoch 1 within its rebalance timeout",
        ),
    ]
    assert events[0].message() == (
        "[GroupId grp] Bumped group epoch to 3: member_fenced_session_timeout (members B): "
        "session timeout expired."
    )


def test_static_members_and_configs() -> None:
    h, _foo = harness()
    h.join("A", ["foo"], instance_id="i1")
    res = h.heartbeat_result(member_id="A", member_epoch=-2, instance_id="i1")
    assert res.events == [
        LogEvent(
            event=Event.STATIC_MEMBER_LEFT_TEMPORARILY,
            group_id=G,
            fields={"member_id": "A", "instance_id": "i1"},
        )
    ]
    res = h.join("A2", ["foo"], instance_id="i1")
    assert res.events == [
        LogEvent(
            event=Event.STATIC_MEMBER_REPLACED,
            group_id=G,
            fields={"instance_id": "i1", "member_id": "A2", "replaced_member_id": "A"},
        )
    ]
    res = h.alter_configs(G, {"consumer.heartbeat.interval.ms": "7000"})
    assert res.events == [
        LogEvent(
            event=Event.GROUP_CONFIG_ALTERED,
            group_id=G,
            fields={"changes": ("consumer.heartbeat.interval.ms=7000",)},
        )
    ]
    h.heartbeat(member_id="A2", member_epoch=-1, instance_id="i1")
    res = h.run(lambda s: s.delete_groups([G]))
    assert res.events == [
        LogEvent(event=Event.GROUP_DELETED, group_id=G, fields={"reason": "deleted"})
    ]


def test_a_failed_command_returns_no_events() -> None:
    """An error leaves no trace: no records and nothing to log."""
    h, _foo = harness()
    h.join("A", ["foo"])
    before = len(h.events)
    try:
        h.heartbeat(member_id="A", member_epoch=7)
    except Exception as exc:  # noqa: BLE001 - FENCED_MEMBER_EPOCH
        assert type(exc).__name__ == "FencedMemberEpochError"
    else:
        raise AssertionError("a future epoch must be fenced")
    assert len(h.events) == before


def test_classic_groups_say_what_they_do() -> None:
    h, _foo = harness(config=GroupCoordinatorConfig(classic_initial_rebalance_delay_ms=0))
    first = h.join_group(instance_id="s1")
    h.sleep(0)
    member = h.completions[first.token].member_id
    names = [e.event for e in h.events]
    assert names == [Event.CLASSIC_REBALANCE_PREPARED, Event.CLASSIC_GENERATION_STABILIZED]
    assert h.events[1].fields == {
        "generation": 1,
        "members": 1,
        "leader_id": member,
        "protocol": "range",
    }
    h.sync_group(member, 1, {member: b""})
    # A consumer-protocol member joins: the group is upgraded.
    res = h.join("K", ["foo"])
    assert [e.event for e in res.events] == [Event.GROUP_UPGRADED, Event.GROUP_EPOCH_BUMPED]
    assert res.events[0].fields == {"generation": 1, "members": 1}
    # K leaves: only a classic member is left, the group goes back to classic.
    res = h.heartbeat_result(member_id="K", member_epoch=2)
    res = h.heartbeat_result(member_id="K", member_epoch=-1)
    assert [e.event for e in res.events] == [
        Event.GROUP_EPOCH_BUMPED,
        Event.GROUP_DOWNGRADED,
        Event.CLASSIC_REBALANCE_PREPARED,
    ]
    assert res.events[2].fields["reason"] == "downgraded from a consumer group"
    # The last classic member leaves during that rebalance: the generation completes empty.
    before = len(h.events)
    leave = h.leave_group(m.LeaveMember(group_instance_id="s1"))
    assert leave.members[0].error_code == 0
    assert h.events[before:] == [
        LogEvent(event=Event.CLASSIC_GROUP_EMPTIED, group_id=G, fields={"generation": 3})
    ]
    assert h.events[before].message() == "[GroupId grp] Generation 3 is empty."
