"""Assignment batching and offloaded targets as narrative golden tests (Kafka 4.3's semantics;
``group.consumer.assignment.interval.ms``).

Each step asserts the whole response and the whole ordered list of records. The clock starts
at 10 s (a target computed at time 0 would carry the timestamp 0, which means "compute at
once"). What a member sees while the next target is delayed is Kafka's request test: the
joiner gets the *current* target's epoch and nothing; the others keep their partitions at that
epoch; once the interval has passed, the next target is computed — here by the group's
assignment timer, not by waiting for some member's heartbeat — and the members reconcile to it
on their next heartbeats.
"""

from __future__ import annotations

from builders import ca, mm, p

from coordinator.core import records as r
from coordinator.core.commands import ConsumerGroupHeartbeatResponse as Resp
from coordinator.core.commands import HeartbeatAssignment as HA
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.events import Event
from coordinator.core.model import MemberState
from coordinator.core.target_assignment import AssignmentOutcome
from coordinator.core.timers import ASSIGN, REBALANCE, SESSION, ArmTimer, CancelTimer, DueTimer
from coordinator.harness import Harness

G = "grp"
T0 = 10_000
HB_MS = 5000
STABLE = MemberState.STABLE
UNREVOKED = MemberState.UNREVOKED_PARTITIONS
UNRELEASED = MemberState.UNRELEASED_PARTITIONS
ALWAYS_OFFLOADED = {"consumer_assignor_offload_inline_max_changed_members": 0}
"""A big group's every computation offloaded, however small the change (these tests are about
the offloaded path; by default a small change is computed inline: test_offload_decision.py)."""


def harness(**config: object) -> Harness:
    return Harness(
        config=GroupCoordinatorConfig(consumer_assignment_interval_ms=1000, **config),  # type: ignore[arg-type]
        now_ms=T0,
    )


def test_a_joiner_waits_for_the_interval_and_the_timer_computes_the_target() -> None:
    h = harness()
    foo = h.create_topic("foo", 2)
    a = h.join("A", ["foo"])
    uid = h.shard.groups[G].group_uid
    # An empty group has nothing to wait for: A's target is computed at once, stamped T0.
    assert a.response == Resp(
        member_id="A",
        member_epoch=1,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned=p(foo, 0, 1), pending={}),
    )
    assert a.records[-2:] == [
        r.target_assignment_epoch_record(G, 1, T0),
        ca("A", 1, 0, STABLE, p(foo, 0, 1)),
    ]

    # B joins 200 ms later: registered at once (group epoch 2), but the target stays at epoch 1
    # until T0 + 1 s. B is told epoch 1 with nothing; the timer is armed for the due time.
    h.now_ms = T0 + 200
    b = h.join("B", ["foo"])
    assert b.response == Resp(
        member_id="B",
        member_epoch=1,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned={}, pending={}),
    )
    assert b.records == [mm("B"), r.group_epoch_record(G, 2, uid), ca("B", 1, 0, STABLE, {})]
    assert b.timers == [
        ArmTimer((ASSIGN, G, ""), T0 + 1000),
        CancelTimer((REBALANCE, G, "B")),
        ArmTimer((SESSION, G, "B"), T0 + 200 + 45_000),
    ]
    # A keeps everything at epoch 1 meanwhile (a steady heartbeat: nothing written).
    h.now_ms = T0 + 600
    steady = h.heartbeat_result(member_id="A", member_epoch=1)
    assert steady.records == []
    assert steady.response == Resp(member_id="A", member_epoch=1, heartbeat_interval_ms=HB_MS)
    assert h.shard.groups[G].state().value == "Assigning"

    # The interval passes: the timer computes the target at epoch 2 (no heartbeat needed).
    (fired,) = h.sleep(500)
    assert fired.records == [
        r.target_assignment_record(G, "A", p(foo, 0)),
        r.target_assignment_record(G, "B", p(foo, 1)),
        r.target_assignment_epoch_record(G, 2, T0 + 1000),
    ]
    assert fired.response is None
    # Then the usual reconciliation: A revokes foo-1 (at epoch 1), B waits for it at epoch 2.
    revoke = h.heartbeat_result(member_id="A", member_epoch=1)
    assert revoke.response == Resp(
        member_id="A",
        member_epoch=1,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned=p(foo, 0), pending={}),
    )
    assert revoke.records == [ca("A", 1, 1, UNREVOKED, p(foo, 0), p(foo, 1))]
    acked = h.heartbeat(member_id="A", member_epoch=1, topic_partitions=p(foo, 0))
    assert (acked.member_epoch, acked.assignment) == (2, None)
    got = h.heartbeat(member_id="B", member_epoch=1)
    assert got == Resp(
        member_id="B",
        member_epoch=2,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned=p(foo, 1), pending={}),
    )


def test_changes_within_the_interval_share_one_target_at_the_latest_epoch() -> None:
    h = harness()
    foo = h.create_topic("foo", 6)
    h.join("A", ["foo"])
    for i, member in enumerate("BCD"):
        h.now_ms = T0 + 100 * (i + 1)
        assert h.join(member, ["foo"]).response.member_epoch == 1  # type: ignore[union-attr]
    group = h.shard.groups[G]
    assert (group.group_epoch, group.assignment_epoch) == (4, 1)
    # A heartbeat after the due time computes it (the timer would have too): epoch 4 at once,
    # epochs 2 and 3 never get a target.
    h.now_ms = T0 + 1000
    res = h.heartbeat_result(member_id="A", member_epoch=1)
    targets = [
        rec for rec in res.records if isinstance(rec.key, r.ConsumerGroupTargetAssignmentMemberKey)
    ]
    assert [rec.key.member_id for rec in targets] == ["A", "B", "C", "D"]  # type: ignore[union-attr]
    assert r.target_assignment_epoch_record(G, 4, T0 + 1000) in res.records
    assert res.response == Resp(
        member_id="A",
        member_epoch=1,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned=p(foo, 0, 1), pending={}),
    )
    # The next change waits a full interval from this computation.
    h.now_ms = T0 + 1500
    e = h.join("E", ["foo"])
    assert e.response.member_epoch == 4  # type: ignore[union-attr]
    assert e.timers[0] == ArmTimer((ASSIGN, G, ""), T0 + 2000)


def test_an_unsubscribed_topic_is_revoked_at_once_while_the_target_lags() -> None:
    """KAFKA-19431: the member drops the topic from its subscription; the next target is up to
    an interval away, but the partitions are revoked now, at the same epoch."""
    h = harness()
    foo, bar = h.create_topic("foo", 1), h.create_topic("bar", 1)
    h.join("A", ["foo", "bar"])
    h.now_ms = T0 + 100
    res = h.heartbeat_result(
        member_id="A",
        member_epoch=1,
        subscribed_topic_names=("foo",),
        topic_partitions=p(foo, 0) | p(bar, 0),
    )
    group = h.shard.groups[G]
    assert (group.group_epoch, group.assignment_epoch) == (2, 1)
    assert res.records[-1] == ca("A", 1, 1, UNREVOKED, p(foo, 0), p(bar, 0))
    assert res.response == Resp(
        member_id="A",
        member_epoch=1,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned=p(foo, 0), pending={}),
    )
    # Acknowledged: STABLE at epoch 1 again, bar-0 free; the lagging target does not hand it back.
    res = h.heartbeat_result(member_id="A", member_epoch=1, topic_partitions=p(foo, 0))
    assert res.records == [ca("A", 1, 1, STABLE, p(foo, 0))]
    assert h.shard.groups[G].owner_of(bar, 0) is None
    assert h.shard.groups[G].target_of("A") == p(foo, 0) | p(bar, 0)  # still the old target


def test_a_group_interval_of_zero_computes_in_the_heartbeat() -> None:
    h = harness()
    foo = h.create_topic("foo", 2)
    h.alter_configs(G, {"consumer.assignment.interval.ms": "0"})
    h.join("A", ["foo"])
    b = h.join("B", ["foo"])
    assert b.response == Resp(
        member_id="B",
        member_epoch=2,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned={}, pending=p(foo, 1)),
    )
    # With the interval at 0 the timestamp is not written: the records are those of Kafka 4.2.
    assert r.target_assignment_epoch_record(G, 2) in b.records


# ------------------------------------------------------------------ departures


def settled_pair() -> tuple[Harness, str]:
    """A joined at T0, B at T0 + 2 s (that target computed at once, stamped T0 + 2 s); both
    reconciled to epoch 2 with two partitions of foo each."""
    h = harness()
    foo = h.create_topic("foo", 4)
    h.join("A", ["foo"])
    h.now_ms = T0 + 2000
    h.join("B", ["foo"])
    for member in "ABAB":
        m = h.shard.groups[G].members[member]
        h.heartbeat(
            member_id=member, member_epoch=m.member_epoch, topic_partitions=m.assigned_partitions
        )
    group = h.shard.groups[G]
    assert group.state().value == "Stable"
    assert (group.assignment_epoch, group.assignment_timestamp_ms) == (2, T0 + 2000)
    assert group.target == {"A": p(foo, 0, 1), "B": p(foo, 2, 3)}
    return h, foo


def left(member_id: str) -> list[r.Record]:
    return [
        r.current_assignment_tombstone(G, member_id),
        r.target_assignment_tombstone(G, member_id),
        r.member_metadata_tombstone(G, member_id),
    ]


def test_a_leave_after_the_interval_computes_the_target_at_once() -> None:
    """Unlike Kafka (which waits for some member's next heartbeat), the departure itself
    computes the remaining members' target when the last one is an interval old: the new
    owner can be told in the same round trip."""
    h, foo = settled_pair()
    uid = h.shard.groups[G].group_uid
    h.now_ms = T0 + 3000  # exactly one interval after the last computation
    res = h.heartbeat_result(member_id="B", member_epoch=-1)
    assert res.response == Resp(member_id="B", member_epoch=-1, heartbeat_interval_ms=0)
    assert res.records == [
        *left("B"),
        r.group_epoch_record(G, 3, uid),
        r.target_assignment_record(G, "A", p(foo, 0, 1, 2, 3)),
        r.target_assignment_epoch_record(G, 3, T0 + 3000),
    ]
    assert res.timers == [CancelTimer((SESSION, G, "B")), CancelTimer((REBALANCE, G, "B"))]
    # A's next heartbeat takes the freed partitions at epoch 3 (nothing left to compute).
    got = h.heartbeat_result(member_id="A", member_epoch=2)
    assert got.response == Resp(
        member_id="A",
        member_epoch=3,
        heartbeat_interval_ms=HB_MS,
        assignment=HA(assigned=p(foo, 0, 1, 2, 3), pending={}),
    )
    assert got.records == [ca("A", 3, 2, STABLE, p(foo, 0, 1, 2, 3), epochs={1: p(foo, 0, 1)})]
    assert h.replayed().snapshot() == h.shard.snapshot()


def test_a_leave_within_the_interval_arms_the_timer_for_the_moment_it_has_passed() -> None:
    h, foo = settled_pair()
    uid = h.shard.groups[G].group_uid
    h.now_ms = T0 + 2400
    res = h.heartbeat_result(member_id="B", member_epoch=-1)
    assert res.records == [*left("B"), r.group_epoch_record(G, 3, uid)]
    assert res.timers == [
        CancelTimer((SESSION, G, "B")),
        CancelTimer((REBALANCE, G, "B")),
        ArmTimer((ASSIGN, G, ""), T0 + 3000),
    ]
    assert h.shard.groups[G].state().value == "Assigning"
    # Not a millisecond early; at the deadline the timer computes it, no heartbeat needed.
    assert h.sleep(599) == []
    (fired,) = h.sleep(1)
    assert fired.records == [
        r.target_assignment_record(G, "A", p(foo, 0, 1, 2, 3)),
        r.target_assignment_epoch_record(G, 3, T0 + 3000),
    ]
    assert (fired.response, fired.timers) == (None, [])


def test_a_session_timeout_after_the_interval_computes_the_target_at_once() -> None:
    h, foo = settled_pair()
    # A heartbeats, B falls silent: its session (45 s from its last heartbeat) expires.
    for _ in range(8):
        h.sleep(HB_MS)
        h.heartbeat(member_id="A", member_epoch=2)
    (fired,) = h.sleep(HB_MS)
    deadline = T0 + 2000 + 45_000
    assert h.now_ms == deadline
    assert fired.records == [
        *left("B"),
        r.group_epoch_record(G, 3, h.shard.groups[G].group_uid),
        r.target_assignment_record(G, "A", p(foo, 0, 1, 2, 3)),
        r.target_assignment_epoch_record(G, 3, deadline),
    ]


def test_the_last_member_leaving_computes_nothing_and_arms_no_timer() -> None:
    h, _foo = settled_pair()
    h.now_ms = T0 + 2100
    h.heartbeat(member_id="B", member_epoch=-1)  # within the interval: the timer is armed
    h.now_ms = T0 + 2200
    res = h.heartbeat_result(member_id="A", member_epoch=-1)
    assert res.timers == [CancelTimer((SESSION, G, "A")), CancelTimer((REBALANCE, G, "A"))]
    assert not any(
        isinstance(rec.key, r.ConsumerGroupTargetAssignmentMemberKey) and rec.value is not None
        for rec in res.records
    )
    assert h.shard.groups[G].state().value == "Empty"
    # The timer armed by B's departure fires on an empty group: nothing happens.
    (fired,) = h.sleep(800)
    assert (fired.records, fired.timers, fired.offloads) == ([], [], [])


# ------------------------------------------------------------------ offloaded computation


def offload_harness() -> tuple[Harness, str]:
    """Offload from 3 members; A, B, C settled on foo (6 partitions), then D joins."""
    h = harness(consumer_assignor_offload_min_members=3, **ALWAYS_OFFLOADED)
    foo = h.create_topic("foo", 6)
    for i, member in enumerate("ABC"):
        h.now_ms = T0 + 1000 * i
        h.join(member, ["foo"])
    h.run_offloads()  # C made three: its target was computed "off the loop"
    for member in "ABC":
        for _ in range(3):
            m = h.shard.groups[G].members[member]
            h.heartbeat(
                member_id=member,
                member_epoch=m.member_epoch,
                topic_partitions=m.assigned_partitions,
            )
    assert h.shard.groups[G].state().value == "Stable"
    return h, foo


def test_a_big_group_asks_for_its_target_off_the_loop_and_applies_the_outcome() -> None:
    h, foo = offload_harness()
    h.now_ms = T0 + 5000
    d = h.join("D", ["foo"])
    # Due at once (the last target is old), but the group is big: the result asks the runtime.
    assert d.offloads == [G]
    assert h.offloads == [G]
    assert d.response.member_epoch == 3  # type: ignore[union-attr]
    assert not any(
        isinstance(rec.key, r.ConsumerGroupTargetAssignmentMemberKey) for rec in d.records
    )
    job = h.start_offload(G)
    assert job.epoch == 4 and job.member_ids == ("A", "B", "C", "D")
    # Until the outcome is applied, heartbeats ask again (the runtime keeps one per group).
    again = h.heartbeat_result(member_id="D", member_epoch=3)
    assert again.offloads == [G]
    h.now_ms = T0 + 5100
    applied = h.finish_offload(job)
    # A (foo-0, 1) and B (foo-3, 4) keep two each; C (foo-2, 5) gives foo-5 to D.
    assert applied.records == [
        r.target_assignment_record(G, "C", p(foo, 2)),
        r.target_assignment_record(G, "D", p(foo, 5)),
        r.target_assignment_epoch_record(G, 4, T0 + 5100),
    ]
    assert applied.offloads == []
    assert h.replayed().snapshot() == h.shard.snapshot()


def test_an_outcome_skips_members_that_left_and_remaps_replaced_static_members() -> None:
    h, foo = offload_harness()
    h.now_ms = T0 + 5000
    h.join("D", ["foo"])
    job = h.start_offload(G)
    # While it is computed, B leaves.
    h.heartbeat(member_id="B", member_epoch=-1)
    applied = h.finish_offload(job)
    group = h.shard.groups[G]
    assert "B" not in group.target and "B" not in group.members
    # B's share is left unassigned until the next target (its leave bumped the epoch again).
    assert group.assignment_epoch == 4 and group.group_epoch == 5
    assert applied.records[-1] == r.target_assignment_epoch_record(G, 4, T0 + 5000)
    assert not any(
        isinstance(rec.key, r.ConsumerGroupTargetAssignmentMemberKey) and rec.key.member_id == "B"
        for rec in applied.records
    )
    # The group moved on during the computation: the next one is scheduled (interval from now).
    assert ArmTimer((ASSIGN, G, ""), T0 + 6000) in applied.timers


def test_a_replaced_static_member_gets_its_predecessors_new_target() -> None:
    h = harness(consumer_assignor_offload_min_members=2, **ALWAYS_OFFLOADED)
    foo = h.create_topic("foo", 4)
    h.join("S1", ["foo"], instance_id="inst")
    h.now_ms = T0 + 2000
    h.join("X", ["foo"])
    job = h.start_offload(G)
    # The static member bounces: leaves with -2, comes back as S2 while the job runs.
    h.heartbeat(member_id="S1", member_epoch=-2, instance_id="inst")
    h.join("S2", ["foo"], instance_id="inst")
    h.finish_offload(job)
    group = h.shard.groups[G]
    assert "S1" not in group.target
    assert group.target["S2"] == p(foo, 0, 1)
    assert group.target["X"] == p(foo, 2, 3)
    assert group.assignment_epoch == job.epoch


def test_a_stale_or_failed_outcome_changes_nothing() -> None:
    h, _foo = offload_harness()
    h.now_ms = T0 + 5000
    h.join("D", ["foo"])
    group = h.shard.groups[G]
    job = h.start_offload(G)
    before = h.shard.snapshot()
    # An error: logged, nothing written; the next heartbeat asks again.
    failed = h.shard.groups.apply_assignment(
        AssignmentOutcome(group_id=G, group_uid=group.group_uid, epoch=4, error="boom"), h.now_ms
    )
    assert (failed.records, failed.offloads) == ([], [])
    assert [e.event for e in failed.events] == [Event.TARGET_ASSIGNMENT_FAILED]
    assert failed.events[0].message() == "[GroupId grp] boom."
    assert h.shard.snapshot() == before
    # An outcome for another incarnation of the group: discarded (and the group asks again).
    other = h.shard.groups.apply_assignment(
        AssignmentOutcome(group_id=G, group_uid="cgp_other", epoch=4), h.now_ms
    )
    assert other.records == [] and other.offloads == [G]
    assert other.events[0].message() == (
        "[GroupId grp] Discarded the target assignment computed for epoch 4: the group was deleted."
    )
    # The real one applies; then a late duplicate of it is discarded.
    h.finish_offload(job)
    late = h.shard.groups.apply_assignment(
        AssignmentOutcome(group_id=G, group_uid=group.group_uid, epoch=4), h.now_ms
    )
    assert late.records == [] and late.offloads == []
    assert late.events[0].fields["reason"] == "the target is already at epoch 4"


def test_a_restart_during_a_computation_computes_again_after_loading() -> None:
    h, _foo = offload_harness()
    h.now_ms = T0 + 5000
    h.join("D", ["foo"])
    h.start_offload(G)  # ... and the coordinator stops before the outcome comes back
    fresh = h.replayed()
    ops = fresh.on_loaded(T0 + 9000)
    assert ArmTimer((ASSIGN, G, ""), T0 + 9000) in ops
    due = DueTimer((ASSIGN, G, ""), T0 + 9000, 0)
    fired = fresh.on_timer(due, T0 + 9000)
    assert fired.offloads == [G]
    job = fresh.groups.assignment_job(G)
    assert job is not None and (job.epoch, job.member_ids) == (4, ("A", "B", "C", "D"))
