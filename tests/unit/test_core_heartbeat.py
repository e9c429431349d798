"""ConsumerGroupHeartbeat behaviour (KIP-848 "Request Handling", "Static Membership", group
states, dynamic group configs, regex subscriptions; reference notes §1.3-1.10, §1.14).

Like Kafka's GroupMetadataManagerTest the group is driven with a test assignor whose result is
obvious (round robin per topic in member-id order), so the tests check the protocol, not the
assignor. Each step asserts the whole response and the whole ordered record list.
"""

from __future__ import annotations

from typing import Any

import pytest
from builders import RoundRobinAssignor, ca, mm, p, pp

from assignors.api import TopicMetadata
from coordinator.core import records as r
from coordinator.core.commands import ConsumerGroupHeartbeat, Result, SequentialIds
from coordinator.core.commands import ConsumerGroupHeartbeatResponse as Resp
from coordinator.core.commands import HeartbeatAssignment as HA
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.errors import (
    ErrorCode,
    GroupIdNotFoundError,
    InvalidConfigError,
    InvalidRequestError,
)
from coordinator.core.model import MemberState
from coordinator.core.timers import REBALANCE, SESSION, ArmTimer, CancelTimer, DueTimer
from coordinator.harness import Harness

G = "grp"
HB_MS = 5_000
SESSION_MS = 45_000
RT = 60_000
STABLE = MemberState.STABLE
UNREVOKED = MemberState.UNREVOKED_PARTITIONS
UNRELEASED = MemberState.UNRELEASED_PARTITIONS
SESSION_CFG = "consumer.session.timeout.ms"
HB_CFG = "consumer.heartbeat.interval.ms"
AI_CFG = "consumer.assignment.interval.ms"


# --------------------------------------------------------------------------- helpers


class Ids(SequentialIds):
    """Recognisable generated ids."""

    def __init__(self) -> None:
        super().__init__()
        self.members = 0
        self.uids = 0

    def new_member_id(self) -> str:
        self.members += 1
        return f"gen-{self.members}"

    def new_group_uid(self) -> str:
        self.uids += 1
        return f"cgp_uid{self.uids}"


def harness(*assignors: Any, **kw: Any) -> Harness:
    return Harness(
        assignors=list(assignors) or [RoundRobinAssignor()], ids=kw.pop("ids", Ids()), **kw
    )


def md(h: Harness, *names: str) -> dict[str, TopicMetadata]:
    image = h.shard.topics.by_name
    return {
        n: TopicMetadata(topic_id=image[n].topic_id, name=n, num_partitions=image[n].num_partitions)
        for n in names
    }


def removed(member_id: str) -> list[r.Record]:
    return [
        r.current_assignment_tombstone(G, member_id),
        r.target_assignment_tombstone(G, member_id),
        r.member_metadata_tombstone(G, member_id),
    ]


def uid(h: Harness, group_id: str = G) -> str:
    return h.shard.groups[group_id].group_uid


def check_replay(h: Harness) -> None:
    assert h.replayed().snapshot() == h.shard.snapshot()


def one_member(partitions: int = 4, **join: Any) -> tuple[Harness, str]:
    """A alone in "grp", STABLE at epoch 1 with every partition of foo."""
    h = harness()
    foo = h.create_topic("foo", partitions)
    res = h.join("A", ["foo"], **join)
    assert res.response.member_epoch == 1
    return h, foo


def seeded(epoch: int = 5) -> tuple[Harness, str]:
    """A=[foo-0,1], B=[foo-2,3], both STABLE at ``epoch`` (previous ``epoch - 1``)."""
    h = harness()
    foo = h.create_topic("foo", 4)
    h.seed_group(G, epoch, {"A": (["foo"], p(foo, 0, 1)), "B": (["foo"], p(foo, 2, 3))})
    return h, foo


# --------------------------------------------------------------------------- member ids


def test_member_id_is_generated_when_empty() -> None:
    h = harness()
    foo = h.create_topic("foo", 2)
    res = h.join("", ["foo"])
    assert res.response == Resp(
        member_id="gen-1",
        member_epoch=1,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned=p(foo, 0, 1), pending={}),
    )
    assert res.records == [
        mm("gen-1"),
        r.partition_metadata_record(G, md(h, "foo")),
        r.group_epoch_record(G, 1, "cgp_uid1"),
        r.target_assignment_record(G, "gen-1", p(foo, 0, 1)),
        r.target_assignment_epoch_record(G, 1),
        ca("gen-1", 1, 0, STABLE, p(foo, 0, 1)),
    ]
    assert res.timers == [
        CancelTimer((REBALANCE, G, "gen-1")),
        ArmTimer((SESSION, G, "gen-1"), SESSION_MS),
    ]
    # The generated id is then used like any other.
    assert h.heartbeat(member_id="gen-1", member_epoch=1) == Resp(
        member_id="gen-1", member_epoch=1, heartbeat_interval_ms=HB_MS
    )
    assert h.join("", ["foo"]).response.member_id == "gen-2"
    check_replay(h)


def test_client_chosen_member_id_is_kept() -> None:
    h = harness()
    h.create_topic("foo", 2)
    assert h.join("my-own-id", ["foo"]).response.member_id == "my-own-id"
    assert list(h.shard.groups[G].members) == ["my-own-id"]
    assert h.ids.members == 0  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- null means unchanged


def full_featured_member() -> tuple[Harness, str, dict[str, Any]]:
    h = harness(RoundRobinAssignor("rr"), RoundRobinAssignor("other"))
    foo = h.create_topic("foo", 2)
    h.create_topic("fizz", 1)
    identity = dict(client_id="client-a", client_host="/10.0.0.1")
    h.join(
        "A",
        ["foo"],
        regex="fi.*",
        instance_id="i1",
        rack_id="r1",
        server_assignor="other",
        rebalance_timeout_ms=30_000,
        **identity,
    )
    return h, foo, identity


def test_empty_heartbeat_changes_nothing() -> None:
    h, _foo, identity = full_featured_member()
    before = h.shard.snapshot()
    res = h.heartbeat_result(member_id="A", member_epoch=1, instance_id="i1", **identity)
    assert res.response == Resp(member_id="A", member_epoch=1, heartbeat_interval_ms=HB_MS)
    assert res.records == []
    assert res.timers == [ArmTimer((SESSION, G, "A"), SESSION_MS)]
    assert h.shard.snapshot() == before
    m = h.shard.groups[G].members["A"]
    assert (
        m.instance_id,
        m.rack_id,
        m.rebalance_timeout_ms,
        m.subscribed_topic_names,
        m.subscribed_topic_regex,
        m.server_assignor_name,
    ) == ("i1", "r1", 30_000, ("foo",), "fi.*", "other")


def test_repeating_every_field_with_the_same_value_changes_nothing() -> None:
    h, _foo, identity = full_featured_member()
    before = h.shard.snapshot()
    owned = h.shard.groups[G].members["A"].assigned_partitions
    res = h.heartbeat_result(
        member_id="A",
        member_epoch=1,
        instance_id="i1",
        rack_id="r1",
        rebalance_timeout_ms=30_000,
        subscribed_topic_names=("foo",),
        subscribed_topic_regex="fi.*",
        server_assignor="other",
        topic_partitions=owned,
        **identity,
    )
    assert res.records == []
    assert h.shard.snapshot() == before
    # A full request: the assignment is sent even though nothing changed.
    assert res.response == Resp(
        member_id="A",
        member_epoch=1,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned=owned, pending={}),
    )


@pytest.mark.parametrize(
    "field,value,attr,expected",
    [
        ("rebalance_timeout_ms", 10_000, "rebalance_timeout_ms", 10_000),
        ("client_id", "client-b", "client_id", "client-b"),
        ("client_host", "/10.0.0.2", "client_host", "/10.0.0.2"),
    ],
)
def test_changes_that_do_not_bump_the_epoch(
    field: str, value: Any, attr: str, expected: Any
) -> None:
    """Rebalance timeout, client id and host: a member metadata record, no bump."""
    h, _foo, identity = full_featured_member()
    fields: dict[str, Any] = dict(member_id="A", member_epoch=1, instance_id="i1", **identity)
    fields[field] = value
    res = h.heartbeat_result(**fields)
    member = h.shard.groups[G].members["A"]
    assert getattr(member, attr) == expected
    assert res.records == [r.member_metadata_record(G, member)]
    assert res.response == Resp(member_id="A", member_epoch=1, heartbeat_interval_ms=HB_MS)
    assert h.shard.groups[G].group_epoch == 1
    check_replay(h)


def test_rack_change_bumps_the_epoch() -> None:
    """KAFKA-20909: a new rack id bumps the group epoch (rack-aware assignors place partitions
    by it); the same rack again, or none sent, does not."""
    h, foo = one_member(2, rack_id="r1")
    res = h.heartbeat_result(member_id="A", member_epoch=1, rack_id="r2")
    member = h.shard.groups[G].members["A"]
    assert member.rack_id == "r2"
    assert res.records == [
        r.member_metadata_record(G, member),
        r.group_epoch_record(G, 2, uid(h)),
        r.target_assignment_epoch_record(G, 2),
        ca("A", 2, 1, STABLE, p(foo, 0, 1), epochs={1: p(foo, 0, 1)}),
    ]
    assert res.response == Resp(member_id="A", member_epoch=2, heartbeat_interval_ms=HB_MS)
    assert [e.fields["causes"] for e in res.events] == [("rack_changed",)]
    for rack in ("r2", None):
        res = h.heartbeat_result(member_id="A", member_epoch=2, rack_id=rack)
        assert (res.records, res.events) == ([], [])
        assert res.response == Resp(member_id="A", member_epoch=2, heartbeat_interval_ms=HB_MS)
    check_replay(h)


def test_client_id_and_host_change_emit_member_metadata_without_bump() -> None:
    h, _foo = one_member(client_id="c1", client_host="/1.1.1.1")
    res = h.heartbeat_result(member_id="A", member_epoch=1, client_id="c2", client_host="/2.2.2.2")
    assert res.records == [mm("A", client_id="c2", client_host="/2.2.2.2")]
    assert res.response == Resp(member_id="A", member_epoch=1, heartbeat_interval_ms=HB_MS)
    assert h.shard.describe_group(G).group_epoch == 1


def test_subscribed_names_are_a_sorted_set() -> None:
    h = harness()
    h.create_topic("foo", 1)
    h.create_topic("bar", 1)
    h.join("A", ["foo", "bar", "foo"])
    assert h.shard.groups[G].members["A"].subscribed_topic_names == ("bar", "foo")
    # The same set in another order is no change.
    assert (
        h.heartbeat_result(
            member_id="A", member_epoch=1, subscribed_topic_names=("foo", "bar")
        ).records
        == []
    )


# --------------------------------------------------------------------------- full vs partial responses


def test_join_always_returns_the_assignment() -> None:
    h, foo = one_member()
    res = h.join("A", ["foo"])  # re-join of a known member, nothing changes
    assert res.records == []
    assert res.response == Resp(
        member_id="A",
        member_epoch=1,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned=p(foo, 0, 1, 2, 3), pending={}),
    )


@pytest.mark.parametrize(
    "extra,full",
    [
        (
            dict(
                rebalance_timeout_ms=RT, subscribed_topic_names=("foo",), topic_partitions="owned"
            ),
            True,
        ),
        (
            dict(
                rebalance_timeout_ms=RT,
                subscribed_topic_regex="",
                subscribed_topic_names=("foo",),
                topic_partitions="owned",
            ),
            True,
        ),
        (dict(subscribed_topic_names=("foo",), topic_partitions="owned"), False),
        (dict(rebalance_timeout_ms=RT, topic_partitions="owned"), False),
        (dict(rebalance_timeout_ms=RT, subscribed_topic_names=("foo",)), False),
        (dict(), False),
    ],
    ids=["full", "full_with_regex", "no_rebalance_timeout", "no_subscription", "no_owned", "empty"],
)
def test_full_request_gets_the_assignment(extra: dict[str, Any], full: bool) -> None:
    h, foo = one_member()
    owned = p(foo, 0, 1, 2, 3)
    if extra.get("topic_partitions") == "owned":
        extra["topic_partitions"] = owned
    res = h.heartbeat_result(member_id="A", member_epoch=1, **extra)
    assert res.records == []
    assert res.response == Resp(
        member_id="A",
        member_epoch=1,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned=owned, pending={}) if full else None,
    )


def test_full_request_with_only_a_regex() -> None:
    h = harness()
    foo = h.create_topic("foo", 2)
    h.join("A", regex="f.*")
    resolve(h)
    res = h.heartbeat_result(
        member_id="A",
        member_epoch=1,
        rebalance_timeout_ms=RT,
        subscribed_topic_regex="f.*",
        topic_partitions=p(foo, 0, 1),
    )
    assert res.response.assignment == HA(assigned=p(foo, 0, 1), pending={})


def test_partial_response_only_when_assigned_or_pending_changed() -> None:
    h, foo = one_member()  # A=[0,1,2,3] at 1
    # B joins (epoch 2): target A=[0,2], B=[1,3]; B waits for A.
    res = h.join("B", ["foo"])
    assert res.response == Resp(
        member_id="B",
        member_epoch=2,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned={}, pending=p(foo, 1, 3)),
    )
    # B again: nothing changed -> no assignment.
    assert h.heartbeat(member_id="B", member_epoch=2) == Resp(
        member_id="B", member_epoch=2, heartbeat_interval_ms=HB_MS
    )
    # A's assigned set shrinks (revocation): assignment sent.
    res = h.heartbeat_result(member_id="A", member_epoch=1, topic_partitions=p(foo, 0, 1, 2, 3))
    assert res.response == Resp(
        member_id="A",
        member_epoch=1,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned=p(foo, 0, 2), pending={}),
    )
    # A acknowledges: it moves to epoch 2 with the same assigned (and pending) partitions, so
    # the response carries no assignment (Kafka: hasAssignedPartitionsChanged).
    res = h.heartbeat_result(member_id="A", member_epoch=1, topic_partitions=p(foo, 0, 2))
    assert res.records == [ca("A", 2, 1, STABLE, p(foo, 0, 2), epochs={1: p(foo, 0, 2)})]
    assert res.response == Resp(member_id="A", member_epoch=2, heartbeat_interval_ms=HB_MS)
    # A again at its epoch: nothing changed -> no assignment.
    assert h.heartbeat(member_id="A", member_epoch=2) == Resp(
        member_id="A", member_epoch=2, heartbeat_interval_ms=HB_MS
    )
    # B gets its partitions: assignment sent.
    res = h.heartbeat_result(member_id="B", member_epoch=2)
    assert res.response == Resp(
        member_id="B",
        member_epoch=2,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned=p(foo, 1, 3), pending={}),
    )
    check_replay(h)


def test_acknowledging_a_revocation_carries_no_assignment() -> None:
    """The heartbeat that acknowledges a revocation moves the member to the new epoch, but its
    assigned and pending partitions do not change: no assignment (a client reads an absent
    assignment as "unchanged"). The same acknowledgement sent as a full request gets it."""
    for full in (False, True):
        h, foo = one_member()  # A=[0,1,2,3] at 1
        h.join("B", ["foo"])  # epoch 2: target A=[0,2], B=[1,3]
        res = h.heartbeat_result(member_id="A", member_epoch=1, topic_partitions=p(foo, 0, 1, 2, 3))
        assert res.records == [ca("A", 1, 1, UNREVOKED, p(foo, 0, 2), p(foo, 1, 3))]
        extra: dict[str, Any] = (
            {"rebalance_timeout_ms": RT, "subscribed_topic_names": ("foo",)} if full else {}
        )
        res = h.heartbeat_result(
            member_id="A", member_epoch=1, topic_partitions=p(foo, 0, 2), **extra
        )
        assert res.records == [ca("A", 2, 1, STABLE, p(foo, 0, 2), epochs={1: p(foo, 0, 2)})]
        assert res.timers == [
            CancelTimer((REBALANCE, G, "A")),
            ArmTimer((SESSION, G, "A"), SESSION_MS),
        ]
        assert res.response == Resp(
            member_id="A",
            member_epoch=2,
            heartbeat_interval_ms=HB_MS,
            assignment=HA(assigned=p(foo, 0, 2), pending={}) if full else None,
        )
        check_replay(h)


def test_new_epoch_with_an_unchanged_assignment_carries_none() -> None:
    """B joins a group subscribed to another topic: A's target does not change, so A moves to
    the new epoch on its next heartbeat without an assignment in the response."""
    h, foo = one_member()  # A=[0,1,2,3] at 1
    h.create_topic("bar", 2)
    bar = h.topic_id("bar")
    res = h.join("B", ["bar"])
    assert res.response == Resp(
        member_id="B",
        member_epoch=2,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned=p(bar, 0, 1), pending={}),
    )
    res = h.heartbeat_result(member_id="A", member_epoch=1)
    assert res.records == [
        ca("A", 2, 1, STABLE, p(foo, 0, 1, 2, 3), epochs={1: p(foo, 0, 1, 2, 3)})
    ]
    assert res.response == Resp(member_id="A", member_epoch=2, heartbeat_interval_ms=HB_MS)
    check_replay(h)


def test_pending_change_while_revoking_is_reported() -> None:
    """A member stuck revoking stays at its epoch with the same assigned partitions, but C's join
    moves its target: its pending set grows since its last response, so the assignment is sent
    (compared with what the member was told, not with the state at the start of the heartbeat).
    A restarted shard, which does not know what was told, compares with the state it loaded."""
    h, foo = one_member()  # A=[0,1,2,3] at 1
    h.join("B", ["foo"])  # epoch 2: target A=[0,2], B=[1,3]
    res = h.heartbeat_result(member_id="A", member_epoch=1, topic_partitions=p(foo, 0, 1, 2, 3))
    assert res.response == Resp(
        member_id="A",
        member_epoch=1,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned=p(foo, 0, 2), pending={}),
    )
    h.join("C", ["foo"])  # epoch 3: target A=[0,3], B=[1], C=[2]
    loaded = h.replayed()
    loaded.set_topics(h.registry.image())
    res = h.heartbeat_result(member_id="A", member_epoch=1, topic_partitions=p(foo, 0, 1, 2, 3))
    assert res.records == []
    assert res.response == Resp(
        member_id="A",
        member_epoch=1,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned=p(foo, 0, 2), pending=p(foo, 3)),
    )
    # Told once: the next identical heartbeat carries nothing.
    assert h.heartbeat(member_id="A", member_epoch=1, topic_partitions=p(foo, 0, 1, 2, 3)) == Resp(
        member_id="A", member_epoch=1, heartbeat_interval_ms=HB_MS
    )
    req = ConsumerGroupHeartbeat(
        group_id=G, member_id="A", member_epoch=1, topic_partitions=p(foo, 0, 1, 2, 3)
    )
    assert loaded.consumer_group_heartbeat(req, h.now_ms).response == Resp(
        member_id="A", member_epoch=1, heartbeat_interval_ms=HB_MS
    )


def test_pending_change_alone_sends_the_assignment() -> None:
    h = harness()
    foo = h.create_topic("foo", 4)
    bar = h.create_topic("bar", 2)
    h.join("A", ["foo", "bar"])  # A owns everything at 1
    h.join("B", ["foo"])  # epoch 2: B waits for foo-1, foo-3
    # B also subscribes to bar in its own heartbeat: epoch 3, target B=[foo-1,3, bar-1], all
    # still held by A. Assigned stays empty; pending grows -> assignment sent.
    res = h.heartbeat_result(member_id="B", member_epoch=2, subscribed_topic_names=("bar", "foo"))
    assert res.records[-1] == ca("B", 3, 2, UNRELEASED, {})
    assert res.response == Resp(
        member_id="B",
        member_epoch=3,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned={}, pending=pp(p(foo, 1, 3), p(bar, 1))),
    )


def test_pending_change_caused_by_another_members_rebalance_is_reported() -> None:
    """ "Absent = no change" (docs/proto.md): B was told pending=[1,3]; C's join moves foo-3 to
    C, so B's next response must carry its new pending set [1] even though nothing else changes
    for B in that heartbeat."""
    h, foo = one_member()  # A=[0,1,2,3] at 1
    h.join("B", ["foo"])  # epoch 2: target A=[0,2], B=[1,3]; B told pending=[1,3]
    h.join("C", ["foo"])  # epoch 3: target A=[0,3], B=[1], C=[2]
    res = h.heartbeat_result(member_id="B", member_epoch=2)
    assert res.records == [ca("B", 3, 2, UNRELEASED, {})]
    assert res.response == Resp(
        member_id="B",
        member_epoch=3,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned={}, pending=p(foo, 1)),
    )


# --------------------------------------------------------------------------- epochs


def test_lost_response_previous_epoch_with_subset_is_accepted() -> None:
    h, foo = one_member()
    h.join("B", ["foo"])  # epoch 2: target A=[0,2], B=[1,3]
    h.heartbeat(member_id="A", member_epoch=1, topic_partitions=p(foo, 0, 1, 2, 3))  # A revoking
    h.heartbeat(
        member_id="A", member_epoch=1, topic_partitions=p(foo, 0, 2)
    )  # ack: epoch 2 (response lost)
    assert h.shard.groups[G].members["A"].member_epoch == 2
    # A retries with epoch 1 and owned partitions within its assignment: treated normally.
    res = h.heartbeat_result(member_id="A", member_epoch=1, topic_partitions=p(foo, 0, 2))
    assert res.records == []
    assert res.response == Resp(member_id="A", member_epoch=2, heartbeat_interval_ms=HB_MS)
    assert res.timers == [ArmTimer((SESSION, G, "A"), SESSION_MS)]
    res = h.heartbeat_result(
        member_id="A", member_epoch=1, topic_partitions={}
    )  # empty is a subset too
    assert res.response == Resp(member_id="A", member_epoch=2, heartbeat_interval_ms=HB_MS)
    check_replay(h)


def test_lost_response_still_reconciles() -> None:
    """The previous epoch is accepted and the member progresses as if it had sent the new one."""
    h, foo = seeded(5)
    h.join("C", ["foo"])  # epoch 6: target A=[0,3], B=[1], C=[2]
    res = h.heartbeat_result(member_id="B", member_epoch=4, topic_partitions=p(foo, 2, 3))
    assert res.records == [ca("B", 5, 5, UNREVOKED, {}, p(foo, 2, 3))]
    assert res.response == Resp(
        member_id="B",
        member_epoch=5,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned={}, pending=p(foo, 1)),
    )


def test_known_member_may_rejoin_with_epoch_zero() -> None:
    """KAFKA-19233: a known member re-joining with epoch 0 is accepted and gets its assignment."""
    h, foo = seeded(5)
    res = h.join("A", ["foo"])
    assert res.records == []
    assert res.response == Resp(
        member_id="A",
        member_epoch=5,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned=p(foo, 0, 1), pending={}),
    )


def test_fenced_member_rejoining_with_epoch_zero_releases_what_it_was_revoking() -> None:
    h, foo = one_member()
    h.join("B", ["foo"])
    h.heartbeat(member_id="A", member_epoch=1, topic_partitions=p(foo, 0, 1, 2, 3))
    assert h.shard.groups[G].members["A"].state is UNREVOKED
    # A was fenced client-side, abandoned everything and re-joins (owned = []).
    res = h.join("A", ["foo"])
    assert res.records == [ca("A", 2, 1, STABLE, p(foo, 0, 2), epochs={1: p(foo, 0, 2)})]
    assert res.response == Resp(
        member_id="A",
        member_epoch=2,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned=p(foo, 0, 2), pending={}),
    )
    assert res.timers == [CancelTimer((REBALANCE, G, "A")), ArmTimer((SESSION, G, "A"), SESSION_MS)]


def test_a_join_sent_again_after_the_group_moved_on_releases_what_it_reports_not_owning() -> None:
    """A join (epoch 0, owned = []) of a member already at a higher epoch is accepted
    (KAFKA-19233: Kafka 4.3 validates nothing of an epoch-0 heartbeat of a known member) and
    reconciled with the partitions it reports, as every heartbeat is (CurrentAssignmentBuilder:
    a partition to revoke that the member does not own is released at once). A copy of A's
    first join handled after B joined therefore hands B's partitions over without revocation:
    right for a client that sent it then (it owns nothing), wrong for one that took the first
    join's answer, which no client on one connection can do (docs/simulation.md, Faults:
    ``duplicate``)."""
    h, foo = one_member(7)  # A joined: epoch 1, foo-0..6
    res = h.join("B", ["foo"])  # B's target 1,3,5 waits for A to release them
    assert res.response == Resp(
        member_id="B",
        member_epoch=2,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned={}, pending=p(foo, 1, 3, 5)),
    )
    assert res.records == [
        mm("B"),
        r.group_epoch_record(G, 2, uid(h)),
        r.target_assignment_record(G, "A", p(foo, 0, 2, 4, 6)),
        r.target_assignment_record(G, "B", p(foo, 1, 3, 5)),
        r.target_assignment_epoch_record(G, 2),
        ca("B", 2, 0, UNRELEASED, {}),
    ]
    res = h.join("A", ["foo"])  # A's first join again: epoch 0, owned = []
    assert res.response == Resp(
        member_id="A",
        member_epoch=2,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned=p(foo, 0, 2, 4, 6), pending={}),
    )
    assert res.records == [
        ca("A", 2, 1, STABLE, p(foo, 0, 2, 4, 6), epochs={1: p(foo, 0, 2, 4, 6)})
    ]
    assert res.timers == [CancelTimer((REBALANCE, G, "A")), ArmTimer((SESSION, G, "A"), SESSION_MS)]
    res = h.heartbeat_result(member_id="B", member_epoch=2)
    assert res.response == Resp(
        member_id="B",
        member_epoch=2,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned=p(foo, 1, 3, 5), pending={}),
    )
    assert res.records == [ca("B", 2, 2, STABLE, p(foo, 1, 3, 5), epochs={2: p(foo, 1, 3, 5)})]
    check_replay(h)


# --------------------------------------------------------------------------- leaving


def test_leave_writes_three_tombstones_and_bumps_the_epoch() -> None:
    """Kafka's story, with the assignment interval at 0: the leave only removes the member; the
    next heartbeat computes the new target. (With batching, the default, the leave computes it
    itself once the interval has passed: tests/golden/test_assignment_batching.py.)"""
    h, foo = seeded(5)
    h.alter_configs(G, {AI_CFG: "0"})
    res = h.heartbeat_result(member_id="A", member_epoch=-1)
    assert res.response == Resp(member_id="A", member_epoch=-1, heartbeat_interval_ms=0)
    assert res.records == [*removed("A"), r.group_epoch_record(G, 6, "cgp_seeded")]
    assert res.timers == [CancelTimer((SESSION, G, "A")), CancelTimer((REBALANCE, G, "A"))]
    assert "A" not in h.shard.groups[G].members
    assert h.shard.groups[G].owner_of(foo, 0) is None
    # B gets A's partitions on its next heartbeat.
    res = h.heartbeat_result(member_id="B", member_epoch=5)
    assert res.records == [
        r.target_assignment_record(G, "B", p(foo, 0, 1, 2, 3)),
        r.target_assignment_epoch_record(G, 6),
        ca("B", 6, 5, STABLE, p(foo, 0, 1, 2, 3), epochs={5: p(foo, 2, 3), 6: p(foo, 0, 1)}),
    ]
    check_replay(h)


def test_last_member_leaving_clears_the_subscription_metadata() -> None:
    h, _foo = one_member()
    res = h.heartbeat_result(member_id="A", member_epoch=-1)
    assert res.records == [
        *removed("A"),
        r.partition_metadata_record(G, {}),
        r.group_epoch_record(G, 2, uid(h)),
        r.target_assignment_epoch_record(G, 2),  # emptied: caught up (KAFKA-20442)
    ]
    described = h.shard.describe_group(G)
    assert (described.group_state, described.group_epoch, described.assignment_epoch) == (
        "Empty",
        2,
        2,
    )
    check_replay(h)


def test_static_member_leaving_for_good_with_epoch_minus_one() -> None:
    h, _foo = one_member(instance_id="i1")
    res = h.heartbeat_result(member_id="A", member_epoch=-1, instance_id="i1")
    assert res.response == Resp(member_id="A", member_epoch=-1, heartbeat_interval_ms=0)
    assert res.records == [
        *removed("A"),
        r.partition_metadata_record(G, {}),
        r.group_epoch_record(G, 2, uid(h)),
        r.target_assignment_epoch_record(G, 2),  # emptied: caught up (KAFKA-20442)
    ]
    assert h.shard.groups[G].static_members == {}


def test_static_temporary_leave() -> None:
    h, foo = one_member(instance_id="i1")  # A (i1) = [0,1,2,3] at 1
    h.join("B", ["foo"])  # epoch 2: A must revoke 1,3
    h.heartbeat(
        member_id="A", member_epoch=1, instance_id="i1", topic_partitions=p(foo, 0, 1, 2, 3)
    )
    assert h.shard.groups[G].members["A"].partitions_pending_revocation == p(foo, 1, 3)
    session_deadline = h.timers.get((SESSION, G, "A"))
    h.sleep(1_000)

    res = h.heartbeat_result(member_id="A", member_epoch=-2, instance_id="i1")
    assert res.response == Resp(member_id="A", member_epoch=-2, heartbeat_interval_ms=0)
    assert res.records == [ca("A", -2, 1, UNREVOKED, p(foo, 0, 2), {}, epochs={1: p(foo, 0, 2)})]
    assert res.timers == []
    assert h.timers.get((SESSION, G, "A")) == session_deadline  # still armed
    group = h.shard.groups[G]
    assert group.static_members == {"i1": "A"}
    assert group.owner_of(foo, 1) is None and group.owner_of(foo, 0) == "A"
    assert group.group_epoch == 2
    check_replay(h)


def test_static_member_rejoins_with_a_new_member_id() -> None:
    h, foo = one_member(instance_id="i1")
    h.heartbeat(member_id="A", member_epoch=-2, instance_id="i1")
    res = h.join("A2", ["foo"], instance_id="i1")
    assert res.records == [
        *removed("A"),
        mm("A2", instance_id="i1"),
        r.target_assignment_record(G, "A2", p(foo, 0, 1, 2, 3)),
        ca("A2", 0, 0, STABLE, p(foo, 0, 1, 2, 3), epochs={1: p(foo, 0, 1, 2, 3)}),
        ca("A2", 1, 0, STABLE, p(foo, 0, 1, 2, 3), epochs={1: p(foo, 0, 1, 2, 3)}),
    ]
    assert res.response == Resp(
        member_id="A2",
        member_epoch=1,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned=p(foo, 0, 1, 2, 3), pending={}),
    )
    assert res.timers == [
        CancelTimer((SESSION, G, "A")),
        CancelTimer((REBALANCE, G, "A")),
        CancelTimer((REBALANCE, G, "A2")),
        ArmTimer((SESSION, G, "A2"), SESSION_MS),
    ]
    group = h.shard.groups[G]
    assert group.group_epoch == 1 and group.assignment_epoch == 1
    assert group.static_members == {"i1": "A2"}
    assert sorted(group.members) == ["A2"]
    check_replay(h)


def test_static_rejoin_inherits_target_and_partitions_in_a_busy_group() -> None:
    h, foo = one_member(instance_id="i1")
    h.join("B", ["foo"])  # epoch 2: target A=[0,2], B=[1,3]
    h.heartbeat(
        member_id="A", member_epoch=1, instance_id="i1", topic_partitions=p(foo, 0, 1, 2, 3)
    )
    h.heartbeat(
        member_id="A", member_epoch=1, instance_id="i1", topic_partitions=p(foo, 0, 2)
    )  # A at 2
    h.heartbeat(member_id="A", member_epoch=-2, instance_id="i1")
    res = h.join("A2", ["foo"], instance_id="i1")
    assert res.records == [
        *removed("A"),
        mm("A2", instance_id="i1"),
        r.target_assignment_record(G, "A2", p(foo, 0, 2)),
        ca("A2", 0, 0, STABLE, p(foo, 0, 2), epochs={1: p(foo, 0, 2)}),
        ca("A2", 2, 0, STABLE, p(foo, 0, 2), epochs={1: p(foo, 0, 2)}),
    ]
    assert h.shard.groups[G].group_epoch == 2
    check_replay(h)


def test_static_member_never_rejoining_is_removed_by_its_session_timeout() -> None:
    h, _foo = one_member(instance_id="i1")
    h.heartbeat(member_id="A", member_epoch=-2, instance_id="i1")
    assert h.sleep(SESSION_MS - 1) == []
    fired = h.sleep(1)
    assert len(fired) == 1
    assert fired[0].records == [
        *removed("A"),
        r.partition_metadata_record(G, {}),
        r.group_epoch_record(G, 2, uid(h)),
        r.target_assignment_epoch_record(G, 2),  # emptied: caught up (KAFKA-20442)
    ]
    assert h.shard.groups[G].static_members == {}
    # The instance id is free again: a new incarnation is a brand-new member.
    res = h.join("A3", ["foo"], instance_id="i1")
    assert res.response.member_epoch == 3
    check_replay(h)


# --------------------------------------------------------------------------- rebalance triggers


def test_server_assignor_change_bumps_and_the_most_voted_assignor_is_used() -> None:
    alpha, beta = RoundRobinAssignor("alpha"), RoundRobinAssignor("beta")
    h = harness(alpha, beta)
    foo = h.create_topic("foo", 2)
    h.join("A", ["foo"])
    assert (alpha.calls, beta.calls) == (1, 0)
    assert h.shard.describe_group(G).assignor_name == "alpha"  # default: first configured

    res = h.heartbeat_result(member_id="A", member_epoch=1, server_assignor="beta")
    assert res.records == [
        mm("A", server_assignor_name="beta"),
        r.group_epoch_record(G, 2, uid(h)),
        r.target_assignment_epoch_record(G, 2),
        ca("A", 2, 1, STABLE, p(foo, 0, 1), epochs={1: p(foo, 0, 1)}),
    ]
    assert (alpha.calls, beta.calls) == (1, 1)
    assert h.shard.describe_group(G).assignor_name == "beta"

    h.join("B", ["foo"], server_assignor="alpha")  # 1 vote each: the first configured wins
    assert (alpha.calls, beta.calls) == (2, 1)
    assert h.shard.describe_group(G).assignor_name == "alpha"
    h.join("C", ["foo"], server_assignor="beta")  # beta 2 - alpha 1
    assert (alpha.calls, beta.calls) == (2, 2)
    assert h.shard.describe_group(G).assignor_name == "beta"
    h.join("D", ["foo"])  # no vote: nothing changes in the ranking
    assert (alpha.calls, beta.calls) == (2, 3)
    check_replay(h)


def test_subscription_change_bumps_the_epoch() -> None:
    h, foo = one_member(2)
    bar = h.create_topic("bar", 1)
    res = h.heartbeat_result(member_id="A", member_epoch=1, subscribed_topic_names=("foo", "bar"))
    assert res.records == [
        mm("A", ("bar", "foo")),
        r.partition_metadata_record(G, md(h, "bar", "foo")),
        r.group_epoch_record(G, 2, uid(h)),
        r.target_assignment_record(G, "A", pp(p(foo, 0, 1), p(bar, 0))),
        r.target_assignment_epoch_record(G, 2),
        ca("A", 2, 1, STABLE, pp(p(foo, 0, 1), p(bar, 0)), epochs={1: p(foo, 0, 1)}),
    ]
    assert res.response == Resp(
        member_id="A",
        member_epoch=2,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned=pp(p(foo, 0, 1), p(bar, 0)), pending={}),
    )
    check_replay(h)


def test_subscribing_to_a_missing_topic_still_bumps() -> None:
    h, foo = one_member(2)
    res = h.heartbeat_result(member_id="A", member_epoch=1, subscribed_topic_names=("foo", "nope"))
    assert res.records == [
        mm("A", ("foo", "nope")),
        r.group_epoch_record(G, 2, uid(h)),
        r.target_assignment_epoch_record(G, 2),
        ca("A", 2, 1, STABLE, p(foo, 0, 1), epochs={1: p(foo, 0, 1)}),
    ]


def test_topic_created_deleted_and_recreated() -> None:
    h, foo = one_member(2)
    h.heartbeat(
        member_id="A", member_epoch=1, subscribed_topic_names=("foo", "bar")
    )  # epoch 2, bar missing

    # bar is created: new metadata, bump, new target.
    bar = h.create_topic("bar", 2)
    res = h.heartbeat_result(member_id="A", member_epoch=2)
    assert res.records == [
        r.partition_metadata_record(G, md(h, "bar", "foo")),
        r.group_epoch_record(G, 3, uid(h)),
        r.target_assignment_record(G, "A", pp(p(foo, 0, 1), p(bar, 0, 1))),
        r.target_assignment_epoch_record(G, 3),
        ca("A", 3, 2, STABLE, pp(p(foo, 0, 1), p(bar, 0, 1)), epochs={1: p(foo, 0, 1)}),
    ]
    # bar is deleted: A must revoke it (it reports owning it).
    h.delete_topic("bar")
    res = h.heartbeat_result(
        member_id="A", member_epoch=3, topic_partitions=pp(p(foo, 0, 1), p(bar, 0, 1))
    )
    assert res.records == [
        r.partition_metadata_record(G, md(h, "foo")),
        r.group_epoch_record(G, 4, uid(h)),
        r.target_assignment_record(G, "A", p(foo, 0, 1)),
        r.target_assignment_epoch_record(G, 4),
        ca("A", 3, 3, UNREVOKED, p(foo, 0, 1), p(bar, 0, 1), epochs={1: p(foo, 0, 1)}),
    ]
    res = h.heartbeat_result(member_id="A", member_epoch=3, topic_partitions=p(foo, 0, 1))
    assert res.records == [ca("A", 4, 3, STABLE, p(foo, 0, 1), epochs={1: p(foo, 0, 1)})]
    # bar is re-created: a new topic id, hence new metadata and a new target.
    bar2 = h.create_topic("bar", 2)
    assert bar2 != bar
    res = h.heartbeat_result(member_id="A", member_epoch=4)
    assert res.records == [
        r.partition_metadata_record(G, md(h, "bar", "foo")),
        r.group_epoch_record(G, 5, uid(h)),
        r.target_assignment_record(G, "A", pp(p(foo, 0, 1), p(bar2, 0, 1))),
        r.target_assignment_epoch_record(G, 5),
        ca("A", 5, 4, STABLE, pp(p(foo, 0, 1), p(bar2, 0, 1)), epochs={1: p(foo, 0, 1)}),
    ]
    check_replay(h)


def test_topic_recreated_between_heartbeats_revokes_the_old_id() -> None:
    h, foo = one_member(2)
    h.delete_topic("foo")
    foo2 = h.create_topic("foo", 2)
    res = h.heartbeat_result(member_id="A", member_epoch=1, topic_partitions=p(foo, 0, 1))
    assert res.records == [
        r.partition_metadata_record(G, md(h, "foo")),
        r.group_epoch_record(G, 2, uid(h)),
        r.target_assignment_record(G, "A", p(foo2, 0, 1)),
        r.target_assignment_epoch_record(G, 2),
        ca("A", 1, 1, UNREVOKED, {}, p(foo, 0, 1)),
    ]
    res = h.heartbeat_result(member_id="A", member_epoch=1, topic_partitions={})
    assert res.records == [ca("A", 2, 1, STABLE, p(foo2, 0, 1))]


def test_partitions_added() -> None:
    h, foo = one_member(2)
    h.add_partitions("foo", 3)
    res = h.heartbeat_result(member_id="A", member_epoch=1)
    assert res.records == [
        r.partition_metadata_record(G, md(h, "foo")),
        r.group_epoch_record(G, 2, uid(h)),
        r.target_assignment_record(G, "A", p(foo, 0, 1, 2)),
        r.target_assignment_epoch_record(G, 2),
        ca("A", 2, 1, STABLE, p(foo, 0, 1, 2), epochs={1: p(foo, 0, 1)}),
    ]


def test_new_replica_racks_of_a_subscribed_topic_bump_the_epoch() -> None:
    """A partition's racks changed (a reassignment upstream): new subscription metadata and a
    new target, like any other metadata change; the same racks again, or racks of a topic
    nobody subscribes to, change nothing."""
    h, foo = one_member(2)
    h.create_topic("other", 1)
    racks = {0: frozenset({"r1", "r2"}), 1: frozenset({"r3"})}
    h.set_racks("foo", racks)
    res = h.heartbeat_result(member_id="A", member_epoch=1)
    metadata = TopicMetadata(topic_id=foo, name="foo", num_partitions=2, partition_racks=racks)
    assert res.records == [
        r.partition_metadata_record(G, {"foo": metadata}),
        r.group_epoch_record(G, 2, uid(h)),
        r.target_assignment_epoch_record(G, 2),
        ca("A", 2, 1, STABLE, p(foo, 0, 1), epochs={1: p(foo, 0, 1)}),
    ]
    assert [e.fields["causes"] for e in res.events] == [("topic_metadata_changed",)]
    h.set_racks("foo", {1: ["r3"], 0: ["r2", "r1"]})
    h.set_racks("other", {0: ["r1"]})
    res = h.heartbeat_result(member_id="A", member_epoch=2)
    assert (res.records, res.events) == ([], [])
    check_replay(h)


def test_unrelated_topic_changes_do_not_bump() -> None:
    h, _foo = one_member(2)
    h.create_topic("other", 3)
    h.add_partitions("other", 4)
    res = h.heartbeat_result(member_id="A", member_epoch=1)
    assert res.records == []
    assert h.shard.groups[G].group_epoch == 1


# --------------------------------------------------------------------------- regex subscriptions


def regex_harness() -> tuple[Harness, dict[str, str]]:
    h = harness()
    ids = {name: h.create_topic(name, 1) for name in ("foo", "fa", "bar", "xfoo", "f")}
    return h, ids


def resolve(h: Harness) -> Result[None]:
    """The runtime's part: the regex resolution a heartbeat asked for, run as its own command."""
    assert h.regex_resolutions == [G]
    res = h.resolve_regexes()
    assert h.regex_resolutions == []
    return res


def test_regex_subscription_is_resolved_with_full_match_semantics() -> None:
    """Kafka 4.x: a new regex is resolved off the heartbeat path. The join is answered from
    what is resolved already (nothing: an unresolved regex matches nothing) and asks for the
    resolution; once it has run (a command of its own), the group epoch moves and the next
    heartbeat gets the regex's topics."""
    h, t = regex_harness()
    h.now_ms = 1234
    version = h.shard.topics.version
    res = h.join("A", regex="f.+")
    assert res.records == [
        mm("A", (), subscribed_topic_regex="f.+"),
        r.group_epoch_record(G, 1, uid(h)),
        r.target_assignment_epoch_record(G, 1, 1234),
        ca("A", 1, 0, STABLE, {}),
    ]
    assert res.response == Resp(
        member_id="A",
        member_epoch=1,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned={}, pending={}),
    )
    assert res.regex_resolutions == [G]
    expected = pp(p(t["fa"], 0), p(t["foo"], 0))
    res = resolve(h)
    assert res.records == [
        r.regex_record(G, "f.+", frozenset({"fa", "foo"}), version, 1234),  # not "xfoo", not "f"
        r.partition_metadata_record(G, md(h, "fa", "foo")),
        r.group_epoch_record(G, 2, uid(h)),
        r.target_assignment_record(G, "A", expected),
        r.target_assignment_epoch_record(G, 2, 1234),  # the first target had nothing in it
    ]
    assert [e.fields["causes"] for e in res.events] == [("regex_resolved",)]
    assert res.response is None and res.regex_resolutions == []
    assert h.heartbeat(member_id="A", member_epoch=1) == Resp(
        member_id="A",
        member_epoch=2,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned=expected, pending={}),
    )
    check_replay(h)


def test_literal_topics_first_then_the_regex_topics() -> None:
    """librdkafka's test 0045 asserts Kafka 4.x's order: a member joining with a literal topic
    and a regex the group has not resolved yet gets the literal topic's partitions in its first
    answer and the regex's in a later heartbeat."""
    h, t = regex_harness()
    res = h.join("A", ["bar"], regex="fo+")
    assert res.records[0] == mm("A", ("bar",), subscribed_topic_regex="fo+")
    assert res.records[1] == r.partition_metadata_record(G, md(h, "bar"))
    assert res.response.assignment == HA(assigned=p(t["bar"], 0), pending={})
    assert h.shard.groups[G].topic_subscribers == {"bar": 1}
    resolve(h)
    assert h.shard.groups[G].topic_subscribers == {"bar": 1, "foo": 1}
    res = h.heartbeat_result(member_id="A", member_epoch=1)
    assert res.response.member_epoch == 2
    assert res.response.assignment == HA(assigned=pp(p(t["bar"], 0), p(t["foo"], 0)), pending={})
    check_replay(h)


def test_regex_is_re_resolved_when_topics_are_created_and_deleted() -> None:
    """A resolved regex is resolved again when the topics image changed, at most every 10 s
    (Kafka's REGEX_BATCH_REFRESH_MIN_INTERVAL_MS): a heartbeat within 10 s of the last
    resolution asks for nothing."""
    h, t = regex_harness()
    h.join("A", regex="f.+")
    resolve(h)
    h.heartbeat(member_id="A", member_epoch=1)  # epoch 2: fa, foo
    fb = h.create_topic("fb", 1)
    h.create_topic("zzz", 1)
    res = h.heartbeat_result(member_id="A", member_epoch=2)
    assert res.records == [] and res.regex_resolutions == []
    h.sleep(10_001)
    res = h.heartbeat_result(member_id="A", member_epoch=2)
    assert res.records == [] and res.regex_resolutions == [G]
    with_fb = pp(p(t["fa"], 0), p(fb, 0), p(t["foo"], 0))
    assert resolve(h).records == [
        r.regex_record(G, "f.+", frozenset({"fa", "fb", "foo"}), h.shard.topics.version, h.now_ms),
        r.partition_metadata_record(G, md(h, "fa", "fb", "foo")),
        r.group_epoch_record(G, 3, uid(h)),
        r.target_assignment_record(G, "A", with_fb),
        r.target_assignment_epoch_record(G, 3, h.now_ms),
    ]
    res = h.heartbeat_result(member_id="A", member_epoch=2)
    assert res.records == [
        ca("A", 3, 2, STABLE, with_fb, epochs={2: pp(p(t["fa"], 0), p(t["foo"], 0))})
    ]
    # fa is deleted: the subscription metadata loses it at once (its partitions are revoked);
    # the regex's resolution follows at its next refresh.
    h.delete_topic("fa")
    h.sleep(10_001)
    res = h.heartbeat_result(member_id="A", member_epoch=3, topic_partitions=with_fb)
    assert res.records == [
        r.partition_metadata_record(G, md(h, "fb", "foo")),
        r.group_epoch_record(G, 4, uid(h)),
        r.target_assignment_record(G, "A", pp(p(fb, 0), p(t["foo"], 0))),
        r.target_assignment_epoch_record(G, 4, h.now_ms),
        ca(
            "A",
            3,
            3,
            UNREVOKED,
            pp(p(fb, 0), p(t["foo"], 0)),
            p(t["fa"], 0),
            epochs={2: pp(p(t["fa"], 0), p(t["foo"], 0)), 3: p(fb, 0)},
        ),
    ]
    assert res.regex_resolutions == [G]
    res = resolve(h)
    assert res.records == [
        r.regex_record(G, "f.+", frozenset({"fb", "foo"}), h.shard.topics.version, h.now_ms),
        r.group_epoch_record(G, 5, uid(h)),
    ]
    # A topic that does not match: resolved again (after 10 s), the same topics: the record
    # (its timestamp is the group's last refresh), no bump.
    h.create_topic("nomatch", 1)
    h.sleep(10_001)
    assert h.heartbeat_result(
        member_id="A", member_epoch=3, topic_partitions=pp(p(fb, 0), p(t["foo"], 0))
    ).records == [
        ca("A", 5, 3, STABLE, pp(p(fb, 0), p(t["foo"], 0)), epochs={2: p(t["foo"], 0), 3: p(fb, 0)})
    ]
    assert resolve(h).records == [
        r.regex_record(G, "f.+", frozenset({"fb", "foo"}), h.shard.topics.version, h.now_ms)
    ]
    check_replay(h)


def test_regex_tombstone_when_the_last_user_drops_it() -> None:
    h, _t = regex_harness()
    h.join("A", regex="f.+")
    resolve(h)
    h.join("B", ["bar"], regex="f.+")
    # B drops the regex: A still uses it, no tombstone; B's subscription shrinks to bar.
    res = h.heartbeat_result(member_id="B", member_epoch=3, subscribed_topic_regex="")
    assert res.records[:2] == [mm("B", ("bar",)), r.group_epoch_record(G, 4, uid(h))]
    assert r.regex_tombstone(G, "f.+") not in res.records
    # A switches to names: the last user is gone, the resolution is deleted.
    res = h.heartbeat_result(
        member_id="A", member_epoch=1, subscribed_topic_names=("foo",), subscribed_topic_regex=""
    )
    assert res.records[:4] == [
        mm("A", ("foo",)),
        r.regex_tombstone(G, "f.+"),
        r.partition_metadata_record(G, md(h, "bar", "foo")),
        r.group_epoch_record(G, 5, uid(h)),
    ]
    assert dict(h.shard.groups[G].resolved_regexes) == {}
    check_replay(h)


def test_regex_tombstone_when_the_last_user_leaves() -> None:
    h, _t = regex_harness()
    h.join("A", regex="f.+")
    resolve(h)
    res = h.heartbeat_result(member_id="A", member_epoch=-1)
    assert res.records == [
        *removed("A"),
        r.regex_tombstone(G, "f.+"),
        r.partition_metadata_record(G, {}),
        r.group_epoch_record(G, 3, uid(h)),
        r.target_assignment_epoch_record(G, 3),  # emptied: caught up (KAFKA-20442)
    ]
    check_replay(h)


def test_switching_to_an_already_resolved_regex() -> None:
    """A regex other members use and the group resolved already counts at once (Kafka: the
    group epoch bumps in the same heartbeat); nothing is asked for."""
    h, _t = regex_harness()
    h.join("A", regex="f.+")
    resolve(h)
    res = h.join("B", ["bar"])
    assert res.response.member_epoch == 3
    res = h.heartbeat_result(
        member_id="B", member_epoch=3, subscribed_topic_names=(), subscribed_topic_regex="f.+"
    )
    assert res.records[:2] == [
        mm("B", (), subscribed_topic_regex="f.+"),
        r.partition_metadata_record(G, md(h, "fa", "foo")),
    ]
    assert res.records[2] == r.group_epoch_record(G, 4, uid(h))
    assert not any(isinstance(x.key, r.ConsumerGroupRegularExpressionKey) for x in res.records)
    assert res.regex_resolutions == []
    assert h.shard.groups[G].regex_members == {"f.+": 2}


def test_a_new_member_joining_with_a_resolved_regex_gets_its_topics_at_once() -> None:
    """Kafka: joining with a regex the group has resolved bumps the epoch at once; joining
    with only a regex nobody resolved yet changes nothing until it is resolved."""
    h, t = regex_harness()
    h.join("A", regex="f.+")
    resolve(h)
    res = h.join("B", regex="f.+")
    assert res.response.member_epoch == 3
    assert [e.fields["causes"] for e in res.events] == [("member_joined",)]
    assert res.regex_resolutions == []
    res = h.join("C", regex="b.+")  # new, unresolved: nothing to assign, no bump
    assert res.response.member_epoch == 3 and res.events == []
    assert res.response.assignment == HA(assigned={}, pending={})


def test_one_resolution_at_a_time_per_group() -> None:
    """While a resolution is asked for and not run, heartbeats ask for no other (Kafka: one
    task per group on the executor); a restart forgets it and the next heartbeat asks again."""
    h, _t = regex_harness()
    h.join("A", regex="f.+")
    assert h.regex_resolutions == [G]
    res = h.join("B", regex="b.+")
    assert res.regex_resolutions == []
    h.sleep(11_000)
    assert h.heartbeat_result(member_id="A", member_epoch=1).regex_resolutions == []
    res = resolve(h)  # both regexes at once
    assert {
        x.key.regular_expression
        for x in res.records
        if isinstance(x.key, r.ConsumerGroupRegularExpressionKey)
    } == {"f.+", "b.+"}


# --------------------------------------------------------------------------- timeouts


def test_rebalance_timeout_fences_a_member_stuck_revoking() -> None:
    h, foo = one_member(rebalance_timeout_ms=10_000)
    h.join("B", ["foo"])
    h.sleep(1_000)
    res = h.heartbeat_result(member_id="A", member_epoch=1, topic_partitions=p(foo, 0, 1, 2, 3))
    assert res.timers == [
        ArmTimer((REBALANCE, G, "A"), 11_000, 1),
        ArmTimer((SESSION, G, "A"), 46_000),
    ]
    # Heartbeats that still report the revoked partitions do not move the deadline.
    h.sleep(5_000)
    res = h.heartbeat_result(member_id="A", member_epoch=1, topic_partitions=p(foo, 0, 1, 2, 3))
    assert res.timers == [ArmTimer((SESSION, G, "A"), 51_000)]
    assert h.sleep(4_999) == []
    fired = h.sleep(1)
    assert len(fired) == 1
    # The last target is older than the assignment interval: B's new one is computed at once.
    assert fired[0].records == [
        *removed("A"),
        r.group_epoch_record(G, 3, uid(h)),
        r.target_assignment_record(G, "B", p(foo, 0, 1, 2, 3)),
        r.target_assignment_epoch_record(G, 3, 11_000),
    ]
    assert fired[0].timers == [CancelTimer((SESSION, G, "A")), CancelTimer((REBALANCE, G, "A"))]
    # B gets everything at epoch 3.
    res = h.heartbeat_result(member_id="B", member_epoch=2)
    assert res.response == Resp(
        member_id="B",
        member_epoch=3,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned=p(foo, 0, 1, 2, 3), pending={}),
    )
    check_replay(h)


def test_rebalance_timeout_does_nothing_once_the_member_moved_on() -> None:
    h, foo = one_member(rebalance_timeout_ms=10_000)
    h.join("B", ["foo"])
    h.heartbeat(member_id="A", member_epoch=1, topic_partitions=p(foo, 0, 1, 2, 3))
    res = h.heartbeat_result(member_id="A", member_epoch=1, topic_partitions=p(foo, 0, 2))
    assert res.timers[0] == CancelTimer((REBALANCE, G, "A"))
    assert h.timers.get((REBALANCE, G, "A")) is None
    assert h.sleep(20_000) == []
    # A stale timer that fires anyway (e.g. raced with the acknowledgement) is a no-op.
    before = h.shard.snapshot()
    stale = h.shard.on_timer(DueTimer((REBALANCE, G, "A"), 10_000, 1), h.now_ms)
    assert stale.records == [] and stale.timers == []
    assert h.shard.snapshot() == before
    # ... and so is one for a member that is gone.
    assert h.shard.on_timer(DueTimer((REBALANCE, G, "Z"), 0, 1), h.now_ms).records == []
    assert h.shard.on_timer(DueTimer((SESSION, "nope", "Z"), 0, 0), h.now_ms).records == []


def test_session_timeout_removes_a_silent_member() -> None:
    h, foo = seeded(5)
    h.sleep(40_000)
    h.heartbeat(member_id="B", member_epoch=5)  # B's deadline moves to 85 000
    fired = h.sleep(5_000)  # A's deadline (45 000) passes
    # ... and B's target is computed at once (the last one is older than the interval).
    assert [f.records for f in fired] == [
        [
            *removed("A"),
            r.group_epoch_record(G, 6, "cgp_seeded"),
            r.target_assignment_record(G, "B", p(foo, 0, 1, 2, 3)),
            r.target_assignment_epoch_record(G, 6, 45_000),
        ]
    ]
    assert sorted(h.shard.groups[G].members) == ["B"]
    assert h.timers.get((SESSION, G, "B")) == (85_000, 0)
    assert h.sleep(39_999) == []
    assert len(h.sleep(1)) == 1
    assert h.shard.groups[G].members == {}
    check_replay(h)


def test_each_heartbeat_re_arms_the_session_timer() -> None:
    h, _foo = one_member()
    for _ in range(20):
        h.sleep(SESSION_MS - 1)
        h.heartbeat(member_id="A", member_epoch=1)
    assert "A" in h.shard.groups[G].members


def test_timers_are_re_armed_after_a_load() -> None:
    """KIP-848 "Fail Over": session timers for every member (group overrides apply), rebalance
    timers for members that were revoking, with their epoch."""
    h, foo = one_member(rebalance_timeout_ms=10_000)
    h.join("B", ["foo"], group_id="g2")
    h.join("B", ["foo"])
    h.heartbeat(member_id="A", member_epoch=1, topic_partitions=p(foo, 0, 1, 2, 3))  # A revoking
    h.alter_configs("g2", {SESSION_CFG: "50000"})
    fresh = h.replayed()
    assert fresh.on_loaded(1_000) == [  # groups and members in id order
        ArmTimer((SESSION, "g2", "B"), 1_000 + 50_000),
        ArmTimer((SESSION, G, "A"), 1_000 + SESSION_MS),
        ArmTimer((REBALANCE, G, "A"), 1_000 + 10_000, 1),
        ArmTimer((SESSION, G, "B"), 1_000 + SESSION_MS),
    ]


def test_a_loaded_shard_continues_exactly_like_the_live_one() -> None:
    """Soft state (metadata check marks, regex cache) is not persisted: a shard loaded from the
    records must answer the next heartbeats with the same records and responses."""
    h, _t = regex_harness()
    h.join("A", ["bar"], regex="f.+")
    h.join("B", ["foo"], instance_id="iB")
    h.heartbeat(
        member_id="A",
        member_epoch=1,
        topic_partitions=h.shard.groups[G].members["A"].assigned_partitions,
    )
    fresh = h.replayed()
    fresh.set_topics(h.shard.topics)
    steps = [
        dict(group_id=G, member_id="B", member_epoch=2, instance_id="iB"),
        dict(group_id=G, member_id="A", member_epoch=1, topic_partitions={}),
        dict(group_id=G, member_id="A", member_epoch=2),
        dict(group_id=G, member_id="B", member_epoch=-2, instance_id="iB"),
    ]
    from coordinator.core.commands import ConsumerGroupHeartbeat

    for step in steps:
        live = h.shard.consumer_group_heartbeat(ConsumerGroupHeartbeat(**step), 100)
        loaded = fresh.consumer_group_heartbeat(ConsumerGroupHeartbeat(**step), 100)
        assert (loaded.records, loaded.response, loaded.timers) == (
            live.records,
            live.response,
            live.timers,
        )
    assert fresh.snapshot() == h.shard.snapshot()


# --------------------------------------------------------------------------- group states


def test_group_states() -> None:
    # Assignment interval 0: a departure leaves the group Assigning until the next heartbeat.
    h = harness(config=GroupCoordinatorConfig(consumer_assignment_interval_ms=0))
    foo = h.create_topic("foo", 2)
    with pytest.raises(GroupIdNotFoundError) as info:
        h.shard.describe_group(G)
    assert info.value.code == ErrorCode.GROUP_ID_NOT_FOUND
    assert info.value.message == "Group grp not found."
    assert h.shard.group_state(G).value == "Dead"

    h.join("A", ["foo"])
    assert h.shard.describe_group(G).group_state == "Stable"
    h.join("B", ["foo"])  # A must revoke foo-1, B waits for it
    assert h.shard.describe_group(G).group_state == "Reconciling"
    h.heartbeat(member_id="A", member_epoch=1, topic_partitions=p(foo, 0, 1))
    h.heartbeat(member_id="A", member_epoch=1, topic_partitions=p(foo, 0))
    assert h.shard.describe_group(G).group_state == "Reconciling"  # B not there yet
    h.heartbeat(member_id="B", member_epoch=2)
    desc = h.shard.describe_group(G)
    assert desc.group_state == "Stable"
    assert (desc.group_epoch, desc.assignment_epoch) == (2, 2)
    assert [
        (m.member_id, m.member_epoch, m.state, m.assignment, m.target_assignment, m.member_type)
        for m in desc.members
    ] == [
        ("A", 2, "STABLE", p(foo, 0), p(foo, 0), 1),
        ("B", 2, "STABLE", p(foo, 1), p(foo, 1), 1),
    ]
    # B's session expires while A keeps heartbeating: the group epoch moves ahead of the
    # assignment epoch until the next heartbeat computes a new target.
    for _ in range(8):
        h.sleep(HB_MS)
        h.heartbeat(member_id="A", member_epoch=2)
    assert len(h.sleep(HB_MS)) == 1  # B's session timeout
    desc = h.shard.describe_group(G)
    assert (desc.group_state, desc.group_epoch, desc.assignment_epoch) == ("Assigning", 3, 2)
    h.heartbeat(member_id="A", member_epoch=2)
    assert h.shard.describe_group(G).group_state == "Stable"
    h.heartbeat(member_id="A", member_epoch=-1)
    desc = h.shard.describe_group(G)
    assert (desc.group_state, desc.members) == ("Empty", ())
    assert h.shard.group_state(G).value == "Empty"


# --------------------------------------------------------------------------- group configs


def test_group_config_validation_errors() -> None:
    h, _foo = one_member()
    cases = [
        (
            {"foo.bar": "1"},
            InvalidConfigError,
            "unknown group config 'foo.bar' (supported: consumer.session.timeout.ms, "
            "consumer.heartbeat.interval.ms, consumer.assignment.interval.ms)",
        ),
        (
            {"foo.bar": None},
            InvalidConfigError,
            "unknown group config 'foo.bar' (supported: consumer.session.timeout.ms, "
            "consumer.heartbeat.interval.ms, consumer.assignment.interval.ms)",
        ),
        (
            {SESSION_CFG: "44999"},
            InvalidConfigError,
            "invalid value 44999 for 'consumer.session.timeout.ms': must be between 45000 and 60000",
        ),
        (
            {HB_CFG: "15001"},
            InvalidConfigError,
            "invalid value 15001 for 'consumer.heartbeat.interval.ms': must be between 5000 and 15000",
        ),
        (
            {HB_CFG: "fast"},
            InvalidConfigError,
            "invalid value 'fast' for 'consumer.heartbeat.interval.ms': not an integer",
        ),
        (
            {HB_CFG: "6000", SESSION_CFG: "1"},
            InvalidConfigError,
            "invalid value 1 for 'consumer.session.timeout.ms': must be between 45000 and 60000",
        ),
    ]
    before = h.shard.snapshot()
    for changes, exc, message in cases:
        with pytest.raises(exc) as info:
            h.alter_configs(G, changes)
        assert info.value.code == ErrorCode.INVALID_CONFIG
        assert info.value.message == message
        assert h.shard.snapshot() == before
        assert len(h.shard.undo) == 0
    with pytest.raises(InvalidRequestError) as info2:
        h.alter_configs("  ", {HB_CFG: "6000"})
    assert info2.value.message == "Group id can't be empty."
    assert h.shard.snapshot() == before


def test_group_config_heartbeat_interval_must_stay_below_the_session_timeout() -> None:
    config = GroupCoordinatorConfig(consumer_min_session_timeout_ms=6_000)
    h = harness(config=config)
    h.alter_configs(G, {SESSION_CFG: "10000"})
    with pytest.raises(InvalidConfigError) as info:
        h.alter_configs(G, {HB_CFG: "12000"})
    assert info.value.message == (
        "consumer.heartbeat.interval.ms (12000) must be less than consumer.session.timeout.ms (10000)."
    )
    # Both in one request are validated together.
    with pytest.raises(InvalidConfigError):
        h.alter_configs(G, {HB_CFG: "10000", SESSION_CFG: "10000"})
    h.alter_configs(G, {HB_CFG: "9000", SESSION_CFG: "9500"})
    assert h.shard.group_config(G) == {SESSION_CFG: "9500", HB_CFG: "9000", AI_CFG: "1000"}


def test_group_configs_take_effect_on_the_next_heartbeat_and_persist() -> None:
    h, _foo = one_member()
    h.sleep(1_000)
    res = h.alter_configs(G, {SESSION_CFG: "50000", HB_CFG: " 6000"})
    assert res.records == [  # the cluster log's (Kafka's ConfigRecord of a GROUP resource)
        r.config_record(r.CONFIG_RESOURCE_GROUP, G, HB_CFG, "6000"),
        r.config_record(r.CONFIG_RESOURCE_GROUP, G, SESSION_CFG, "50000"),
    ]
    assert h.store_log[-2:] == res.records
    assert [rec for rec in h.log if rec.key.TYPE is r.RecordType.CONFIG] == []
    assert res.timers == []
    assert h.timers.get((SESSION, G, "A")) == (SESSION_MS, 0)  # existing timer untouched
    assert h.shard.group_config(G) == {SESSION_CFG: "50000", HB_CFG: "6000", AI_CFG: "1000"}

    res = h.heartbeat_result(member_id="A", member_epoch=1)
    assert res.response == Resp(member_id="A", member_epoch=1, heartbeat_interval_ms=6_000)
    assert res.timers == [ArmTimer((SESSION, G, "A"), 1_000 + 50_000)]
    assert h.join("B", ["foo"]).response.heartbeat_interval_ms == 6_000

    # Persisted in the cluster log: a replayed shard following it has the same overrides.
    fresh = h.replayed()
    assert fresh.group_config(G) == h.shard.group_config(G)
    assert fresh.group_configs.heartbeat_interval_ms(G) == 6_000
    assert fresh.group_configs.session_timeout_ms(G) == 50_000
    check_replay(h)

    # Deleting an override returns to the broker default.
    res = h.alter_configs(G, {HB_CFG: None})
    assert res.records == [r.config_record(r.CONFIG_RESOURCE_GROUP, G, HB_CFG, None)]
    assert h.shard.group_config(G) == {SESSION_CFG: "50000", HB_CFG: "5000", AI_CFG: "1000"}
    assert (
        h.heartbeat(
            member_id="A", member_epoch=h.shard.groups[G].members["A"].member_epoch
        ).heartbeat_interval_ms
        == HB_MS
    )
    check_replay(h)


def test_group_configs_exist_without_the_group_and_survive_it_emptying() -> None:
    h = harness()
    h.create_topic("foo", 1)
    h.alter_configs(G, {HB_CFG: "7000"})
    assert G not in h.shard.groups
    assert h.join("A", ["foo"]).response.heartbeat_interval_ms == 7_000
    h.heartbeat(member_id="A", member_epoch=-1)
    assert h.shard.group_config(G)[HB_CFG] == "7000"
    assert h.shard.group_config("other") == {SESSION_CFG: "45000", HB_CFG: "5000", AI_CFG: "1000"}
    check_replay(h)


# --------------------------------------------------------------------------- group uid


def test_group_uid_is_minted_once() -> None:
    h = harness()
    h.create_topic("foo", 2)
    h.join("A", ["foo"])
    first = uid(h)
    assert first == "cgp_uid1" and first.startswith("cgp_")
    h.join("B", ["foo"])
    h.heartbeat(member_id="A", member_epoch=-1)
    h.heartbeat(member_id="B", member_epoch=-1)
    assert h.shard.describe_group(G).group_state == "Empty"
    assert uid(h) == first
    epoch = h.shard.groups[G].group_epoch
    res = h.join("C", ["foo"])
    assert res.records[2] == r.group_epoch_record(G, epoch + 1, first)
    assert uid(h) == first
    assert h.ids.uids == 1  # type: ignore[attr-defined]
    assert h.replayed().groups[G].group_uid == first
    # Another group gets its own uid.
    h.join("X", ["foo"], group_id="g2")
    assert uid(h, "g2") == "cgp_uid2"
    check_replay(h)


def test_group_uid_with_the_default_id_source() -> None:
    h = Harness(assignors=[RoundRobinAssignor()])
    h.create_topic("foo", 1)
    h.join("A", ["foo"])
    value = uid(h)
    assert value.startswith("cgp_") and len(value) > len("cgp_")
    assert h.replayed().groups[G].group_uid == value


def test_list_groups_filters_as_kafka() -> None:
    """Kafka's listGroups: state filters compared in lower case and trimmed, type filters in
    lower case (GroupType.parse); an unknown state or type matches nothing."""
    h = Harness(assignors=[RoundRobinAssignor()])
    h.create_topic("foo", 2)
    h.join("A", ["foo"])  # "grp": a consumer group, Stable once A has its partitions
    h.join("B", ["foo"], group_id="other")
    h.heartbeat(group_id="other", member_id="B", member_epoch=-1)  # "other": Empty

    def listed(states: tuple[str, ...] = (), types: tuple[str, ...] = ()) -> list[str]:
        return [g.group_id for g in h.shard.list_groups(states, types)]

    assert listed() == ["grp", "other"]
    assert listed(("  STABLE ",)) == ["grp"]
    assert listed(("empty\t", "Dead")) == ["other"]
    assert listed(types=("CONSUMER",)) == ["grp", "other"]
    assert listed(("stable",), ("Consumer",)) == ["grp"]
    assert listed(("stabl",)) == listed(types=("classic",)) == listed(types=(" consumer",)) == []
