"""A new group's first target covers the burst of joins that created it (issue 14).

With batching on, Kafka 4.3 computes a new group's first target in its first member's
heartbeat: that member is given every partition, the members that join in the same instant get
nothing until the next computation an interval later, learn their share at their next heartbeat
and wait for the first member to revoke at its own. A storm of thousands of joins then takes
two heartbeat intervals to settle and moves nearly every partition twice. Here, when the driver
can answer a join later (the runtime: ``ConsumerGroups.parks_joins``), a join to a group with
nobody answered yet is *parked*: registered at once (its records, the group epoch, its session
timer), answered once the group's first target is installed. The first parked join asks the
driver for that target (``parked_joins``); the runtime calls ``first_target`` once the joins
arriving with it are in, and then again while parked joins remain: each call answers at most
``ANSWERS_PER_COMMAND`` of them, in arrival order, with their share.

Each step asserts the whole response or completion and the whole ordered list of records.
"""

from __future__ import annotations

from builders import ca, mm, p

from coordinator.core import records as r
from coordinator.core.commands import ConsumerGroupHeartbeatResponse as Resp
from coordinator.core.commands import HeartbeatAssignment as HA
from coordinator.core.commands import Pending
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.errors import UnknownMemberIdError, UnknownServerError
from coordinator.core.model import MemberState
from coordinator.core.target_assignment import AssignmentOutcome
from coordinator.core.target_updates import ANSWERS_PER_COMMAND
from coordinator.core.timers import REBALANCE, SESSION, ArmTimer, CancelTimer
from coordinator.harness import Harness

G = "grp"
T0 = 10_000
HB_MS = 5000
STABLE = MemberState.STABLE


def harness(interval_ms: int = 1000, **config: object) -> Harness:
    return Harness(
        config=GroupCoordinatorConfig(consumer_assignment_interval_ms=interval_ms, **config),  # type: ignore[arg-type]
        now_ms=T0,
        parks_joins=True,
    )


def test_joins_before_the_first_target_are_parked_and_answered_with_their_share() -> None:
    h = harness()
    foo = h.create_topic("foo", 4)
    a = h.join("A", ["foo"])
    uid = h.shard.groups[G].group_uid
    # A is registered (its metadata, the subscription metadata, group epoch 1) and parked; it
    # asks for the group's first target, once the joins arriving with it are in.
    assert a.response == Pending(1)
    assert a.records == [
        mm("A"),
        r.partition_metadata_record(G, h.shard.groups[G].subscription_metadata),
        r.group_epoch_record(G, 1, uid),
    ]
    assert a.timers == [ArmTimer((SESSION, G, "A"), T0 + 45_000)]
    assert a.parked_joins == [(G, True)]
    # B joins in the same instant: parked too; the target is already asked for.
    b = h.join("B", ["foo"])
    assert b.response == Pending(2)
    assert b.records == [mm("B"), r.group_epoch_record(G, 2, uid)]
    assert b.timers == [ArmTimer((SESSION, G, "B"), T0 + 45_000)]
    assert b.parked_joins == []
    assert h.shard.groups[G].state().value == "Assigning"
    assert h.completions == {}

    # The burst is in: one target for both, then each member reconciled to it and answered, in
    # the order they joined. Nobody revokes anything.
    first = h.first_target(G)
    assert first.records == [
        r.target_assignment_record(G, "A", p(foo, 0, 1)),
        r.target_assignment_record(G, "B", p(foo, 2, 3)),
        r.target_assignment_epoch_record(G, 2, T0),
        ca("A", 2, 0, STABLE, p(foo, 0, 1)),
        ca("B", 2, 0, STABLE, p(foo, 2, 3)),
    ]
    assert first.completions == [
        (1, Resp(member_id="A", member_epoch=2, heartbeat_interval_ms=HB_MS,
                 assignment=HA(assigned=p(foo, 0, 1), pending={}))),
        (2, Resp(member_id="B", member_epoch=2, heartbeat_interval_ms=HB_MS,
                 assignment=HA(assigned=p(foo, 2, 3), pending={}))),
    ]  # fmt: skip
    # Each answered member's session starts over with its answer (the wait was the server's).
    assert first.timers == [
        CancelTimer((REBALANCE, G, "A")),
        ArmTimer((SESSION, G, "A"), T0 + 45_000),
        CancelTimer((REBALANCE, G, "B")),
        ArmTimer((SESSION, G, "B"), T0 + 45_000),
    ]
    assert first.parked_joins == []
    assert h.shard.groups[G].state().value == "Stable"

    # Now that members were answered, a join is handled as Kafka does (batching: C gets the
    # current target's epoch and nothing, the next target is due an interval after this one).
    h.now_ms = T0 + 100
    c = h.join("C", ["foo"])
    assert c.response == Resp(
        member_id="C", member_epoch=2, heartbeat_interval_ms=HB_MS, assignment=HA(assigned={}, pending={})
    )  # fmt: skip
    assert c.parked_joins == []


def test_a_lone_first_member_gets_everything_in_its_join_answer() -> None:
    """What a single consumer sees is Kafka's answer, one call of the driver later."""
    h = harness()
    foo = h.create_topic("foo", 3)
    a = h.join("A", ["foo"])
    assert a.response == Pending(1)
    h.run_parked()
    assert h.completions == {
        1: Resp(member_id="A", member_epoch=1, heartbeat_interval_ms=HB_MS,
                assignment=HA(assigned=p(foo, 0, 1, 2), pending={})),
    }  # fmt: skip
    assert h.log[-2:] == [
        r.target_assignment_epoch_record(G, 1, T0),
        ca("A", 1, 0, STABLE, p(foo, 0, 1, 2)),
    ]


def test_a_big_burst_is_answered_a_few_joins_per_command() -> None:
    h = harness(consumer_assignor_offload_enable=False)
    h.create_topic("foo", 400)
    n = ANSWERS_PER_COMMAND * 2 + 10
    for i in range(n):
        assert h.join(f"m{i:03}", ["foo"]).response == Pending(i + 1)
    calls = h.run_parked()
    # The first call computes the target and answers the first share of joins; each later
    # call answers the next, until none is left.
    answered = [[token for token, _ in c.completions] for c in calls]
    assert answered == [
        list(range(1, ANSWERS_PER_COMMAND + 1)),
        list(range(ANSWERS_PER_COMMAND + 1, 2 * ANSWERS_PER_COMMAND + 1)),
        list(range(2 * ANSWERS_PER_COMMAND + 1, n + 1)),
    ]
    assert [c.parked_joins for c in calls] == [[(G, False)], [(G, False)], []]
    epochs = {resp.member_epoch for resp in h.completions.values()}
    shares = sorted(
        sum(len(ps) for ps in resp.assignment.assigned.values()) for resp in h.completions.values()
    )
    assert epochs == {n}
    assert shares[0] >= 400 // n and shares[-1] <= 400 // n + 1 and sum(shares) == 400
    # One target for the whole burst.
    epoch_key = type(r.target_assignment_epoch_record(G, 1).key)
    assert [rec for rec in h.log if isinstance(rec.key, epoch_key)] == [
        r.target_assignment_epoch_record(G, n, T0)
    ]


def test_a_big_groups_first_target_is_computed_off_the_loop() -> None:
    h = harness(consumer_assignor_offload_min_members=3)
    foo = h.create_topic("foo", 3)
    for member in ("A", "B", "C"):
        h.join(member, ["foo"])
    asked = h.first_target(G)
    assert asked.records == [] and asked.completions == []
    assert h.offloads == [G]
    # A member joins while the target is being computed: parked as well; the outcome covers
    # the three it was computed for, and D is answered with the target's epoch and nothing.
    job = h.start_offload(G)
    h.join("D", ["foo"])
    done = h.finish_offload(job)
    assert [token for token, _ in done.completions] == [1, 2, 3, 4]
    assert done.completions[0][1] == Resp(
        member_id="A", member_epoch=3, heartbeat_interval_ms=HB_MS, assignment=HA(assigned=p(foo, 0), pending={})
    )  # fmt: skip
    assert done.completions[3][1] == Resp(
        member_id="D", member_epoch=3, heartbeat_interval_ms=HB_MS, assignment=HA(assigned={}, pending={})
    )  # fmt: skip


def test_a_parked_member_that_is_removed_hears_so_and_the_others_are_answered() -> None:
    h = harness()
    foo = h.create_topic("foo", 2)
    h.join("A", ["foo"])
    h.now_ms = T0 + 10_000
    h.join("B", ["foo"])
    # A's session expires before the target (a driver that never got to it): A's parked join
    # is answered with UNKNOWN_MEMBER_ID. A's removal computes the remaining member's target
    # (batching: nothing to wait for), which answers B's parked join with it.
    fired = h.sleep(35_000)
    assert len(fired) == 1
    (a_token, error), (b_token, b) = fired[0].completions
    assert a_token == 1 and isinstance(error, UnknownMemberIdError)
    assert error.message == (
        "Member A was removed from group grp before the group's first target assignment was "
        "computed."
    )
    assert b_token == 2
    assert b == Resp(
        member_id="B", member_epoch=3, heartbeat_interval_ms=HB_MS, assignment=HA(assigned=p(foo, 0, 1), pending={})
    )  # fmt: skip
    assert h.shard.groups[G].waiting == {}
    (late,) = h.run_parked()  # the call A's join asked for finds nothing left to do
    assert (late.records, late.completions, late.parked_joins) == ([], [], [])


def test_a_failed_first_target_fails_the_parked_joins() -> None:
    h = harness(consumer_assignor_offload_min_members=2)
    h.create_topic("foo", 2)
    h.join("A", ["foo"])
    h.join("B", ["foo"])
    h.first_target(G)
    failed = h.finish_offload(
        h.start_offload(G),
        AssignmentOutcome(group_id=G, group_uid=h.shard.groups[G].group_uid, epoch=2,
                          error="boom"),
    )  # fmt: skip
    assert [token for token, _ in failed.completions] == [1, 2]
    for _token, error in failed.completions:
        assert isinstance(error, UnknownServerError)
        assert error.message == "Failed to compute a new target assignment for epoch 2: boom"
    assert h.shard.groups[G].waiting == {}


def test_no_parking_with_batching_off_or_without_a_driver_that_answers_later() -> None:
    off = harness(interval_ms=0)
    foo = off.create_topic("foo", 1)
    assert off.join("A", ["foo"]).response == Resp(
        member_id="A", member_epoch=1, heartbeat_interval_ms=HB_MS, assignment=HA(assigned=p(foo, 0), pending={})
    )  # fmt: skip
    plain = Harness(config=GroupCoordinatorConfig(consumer_assignment_interval_ms=1000), now_ms=T0)
    foo = plain.create_topic("foo", 1)
    assert plain.join("A", ["foo"]).response == Resp(
        member_id="A", member_epoch=1, heartbeat_interval_ms=HB_MS, assignment=HA(assigned=p(foo, 0), pending={})
    )  # fmt: skip


def test_parked_joins_and_parked_classic_requests_never_share_a_token() -> None:
    """The runtime parks both kinds of request by (shard, token): one sequence per shard."""
    h = harness()
    h.create_topic("foo", 2)
    first = h.join_group("", group_id="classic")  # MEMBER_ID_REQUIRED, with an id to use
    classic = h.join_group(first.member_id, group_id="classic")  # waits for the group's delay
    parked = h.join("A", ["foo"]).response
    again = h.join_group(h.join_group("", group_id="classic-2").member_id, group_id="classic-2")
    assert [type(x) for x in (classic, parked, again)] == [Pending, Pending, Pending]
    assert len({classic.token, parked.token, again.token}) == 3


def test_a_parked_members_join_sent_again_is_parked_beside_the_first() -> None:
    """A retry or a duplicate of a parked join (same member id, epoch 0) neither computes the
    first target nor cuts the burst short (found by the simulator: a duplicated join computed
    the target for 5 members of a 70-member burst, inline although the group was big enough
    to have it computed off the loop); both requests get the member's answer."""
    h = harness(consumer_assignor_offload_min_members=2)
    foo = h.create_topic("foo", 4)
    assert h.join("A", ["foo"]).response == Pending(1)
    assert h.join("B", ["foo"]).response == Pending(2)
    again = h.join("A", ["foo"])
    assert again.response == Pending(3)
    assert (again.records, again.parked_joins, h.completions) == ([], [], {})
    assert h.shard.groups[G].waiting == {"A": (1, 3), "B": (2,)}
    h.run_parked()  # offloaded: the first target comes from the worker
    a = Resp(member_id="A", member_epoch=2, heartbeat_interval_ms=HB_MS,
             assignment=HA(assigned=p(foo, 0, 1), pending={}))  # fmt: skip
    assert h.completions[1] == h.completions[3] == a
    assert h.completions[2].assignment.assigned == p(foo, 2, 3)


def test_a_parked_members_session_starts_over_when_it_is_answered() -> None:
    """Session timeouts measure the member's silence, not how long the server made it wait."""
    h = harness()
    h.create_topic("foo", 1)
    h.join("A", ["foo"])
    h.now_ms = T0 + 40_000  # the first target took long (a loaded server)
    done = h.first_target(G)
    assert ArmTimer((SESSION, G, "A"), T0 + 40_000 + 45_000) in done.timers
    assert h.sleep(44_000) == []  # 84 s after the join, 44 s after its answer: still in
    (fenced,) = h.sleep(1_000)
    assert [rec.key for rec in fenced.records][:1] == [r.current_assignment_tombstone(G, "A").key]
