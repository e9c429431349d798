"""The ``rebalance`` of a classic group's GroupMetadata record: when the rebalance that made
the generation started and when its join phase completed, what started it, who was removed
and why — recorded so the journal alone tells each classic rebalance apart (docs/analytics.md)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from builders import classic_assignment as asg

from coordinator.core import codec
from coordinator.core import records as r
from coordinator.core.commands import Pending
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.harness import Harness, subscription
from legacy_bridge import messages as m
from legacy_bridge.classic_group import CLIENT_REASON_CHARS, RebalanceCause, RemovalCause

META = subscription(["foo"])


def _harness() -> Harness:
    h = Harness(config=GroupCoordinatorConfig(classic_initial_rebalance_delay_ms=0))
    h.create_topic("foo", 4)
    h.create_topic("bar", 2)
    return h


def _last(h: Harness) -> r.GroupMetadataValue:
    value = h.log[-1].value
    assert isinstance(value, r.GroupMetadataValue)
    return value


def _rb(
    preparing_ms: int,
    completing_ms: int,
    cause: str,
    *removed: tuple[str, str, int],
    client_reason: str | None = None,
) -> r.GroupMetadataRebalanceValue:
    return r.GroupMetadataRebalanceValue(
        preparing_ms=preparing_ms,
        completing_ms=completing_ms,
        cause=cause,
        client_reason=client_reason,
        removed=tuple(
            r.GroupMetadataRemovedMember(member_id=mid, cause=c, removed_ms=at)
            for mid, c, at in removed
        ),
    )


def _first_member(h: Harness, **kw: Any) -> str:
    """A dynamic member alone: MEMBER_ID_REQUIRED, the join (initial delay 0), its sync."""
    mid = h.join_group(**kw).member_id
    assert isinstance(h.join_group(mid, **kw), Pending)
    h.sleep(0)
    assert h.sync_group(mid, 1, {mid: asg(0, 1, 2, 3)}).assignment == asg(0, 1, 2, 3)
    return str(mid)


def _keep_alive(h: Harness, until_ms: int, *members: tuple[str, int]) -> None:
    """Heartbeat ``members`` (member id, generation) every 5 s until ``until_ms``: their
    sessions (10 s) never expire, they just do not rejoin or sync."""
    while h.now_ms + 5_000 < until_ms:
        h.sleep(5_000)
        for mid, generation in members:
            h.classic_heartbeat(mid, generation)
    h.sleep(until_ms - h.now_ms)


def test_each_record_says_how_its_generation_came_about() -> None:
    h = _harness()
    h.now_ms = 1_000
    a = _first_member(h)
    assert _last(h).rebalance == _rb(1_000, 1_000, RebalanceCause.MEMBER_JOINED)
    # b joins at 2 s; a hears of it at its heartbeat at 3 s and rejoins at 3.5 s: the join phase
    # completes then, the leader syncs at 4 s.
    h.now_ms = 2_000
    b_id = h.join_group().member_id
    b = h.join_group(b_id)
    assert isinstance(b, Pending)
    h.now_ms = 3_000
    assert h.classic_heartbeat(a, 1).error_code == 27
    h.now_ms = 3_500
    joined = h.join_group(a)
    assert joined.generation_id == 2 and joined.leader == a
    h.now_ms = 4_000
    h.sync_group(a, 2, {a: asg(0, 1), b_id: asg(2, 3)})
    gen2 = _last(h)
    assert (gen2.generation, gen2.current_state_timestamp_ms) == (2, 4_000)
    assert gen2.rebalance == _rb(2_000, 3_500, RebalanceCause.MEMBER_JOINED)
    # The leader rejoins with the same subscription (it saw a metadata change): member_rejoined.
    h.now_ms = 10_000
    assert isinstance(h.join_group(a), Pending)
    h.now_ms = 11_000
    assert h.join_group(b_id).generation_id == 3
    h.sync_group(a, 3, {a: asg(0, 1), b_id: asg(2, 3)})
    assert _last(h).rebalance == _rb(10_000, 11_000, RebalanceCause.MEMBER_REJOINED)
    # b rejoins subscribing to bar too: subscription_changed.
    h.now_ms = 20_000
    both = subscription(["foo", "bar"])
    assert isinstance(h.join_group(b_id, protocols=(("range", both),)), Pending)
    h.now_ms = 20_100
    assert h.join_group(a).generation_id == 4
    h.sync_group(a, 4, {a: asg(0, 1), b_id: asg(2, 3)})
    assert _last(h).rebalance == _rb(20_000, 20_100, RebalanceCause.SUBSCRIPTION_CHANGED)
    # b leaves with a reason (LeaveGroup v5, KIP-800): the reason is kept, cut to 256 chars.
    h.now_ms = 30_000
    long_reason = "shutting down: " + "x" * 300
    h.leave_group(m.LeaveMember(member_id=b_id, reason=long_reason))
    h.now_ms = 30_200
    assert h.join_group(a).generation_id == 5
    h.sync_group(a, 5, {a: asg(0, 1, 2, 3)})
    assert _last(h).rebalance == _rb(
        30_000,
        30_200,
        RebalanceCause.MEMBER_LEFT,
        (b_id, RemovalCause.MEMBER_LEFT, 30_000),
        client_reason=long_reason[:CLIENT_REASON_CHARS],
    )
    assert len(long_reason[:CLIENT_REASON_CHARS]) == 256
    assert h.shard.snapshot() == h.replayed().snapshot()


def _second_member(h: Harness, a: str) -> str:
    """b joins the group of ``a`` at generation 1; a rejoins: generation 2 joined, not synced."""
    b = str(h.join_group().member_id)
    assert isinstance(h.join_group(b), Pending)
    assert h.join_group(a).generation_id == 2
    return b


def test_timeouts_are_told_apart() -> None:
    h = _harness()
    a = _first_member(h)
    b = _second_member(h, a)
    h.sync_group(a, 2, {a: asg(0, 1), b: asg(2, 3)})
    # Generation 3; then b goes silent: its session (10 s) expires and starts a rebalance.
    h.now_ms = 5_000
    assert isinstance(h.join_group(a), Pending)
    assert h.join_group(b).generation_id == 3
    h.sync_group(a, 3, {a: asg(0, 1), b: asg(2, 3)})
    h.now_ms = 9_000  # a heartbeats; b's session expires at 15 s
    assert h.classic_heartbeat(a, 3).error_code == 0
    h.sleep(6_000)
    assert h.shard.classic_groups["grp"].state.value == "PreparingRebalance"
    h.now_ms = 16_000
    assert h.join_group(a).generation_id == 4
    h.sync_group(a, 4, {a: asg(0, 1, 2, 3)})
    assert _last(h).rebalance == _rb(
        15_000,
        16_000,
        RebalanceCause.MEMBER_FENCED_SESSION_TIMEOUT,
        (b, RemovalCause.MEMBER_FENCED_SESSION_TIMEOUT, 15_000),
    )
    # c joins; a heartbeats but never rejoins: the join phase ends after the rebalance timeout
    # (60 s) without a, which is removed for it (a dynamic member that did not rejoin).
    h.now_ms = 20_000
    c = h.join_group().member_id
    assert isinstance(h.join_group(c), Pending)
    _keep_alive(h, 80_000, (a, 4))
    assert h.shard.classic_groups["grp"].state.value == "CompletingRebalance"
    h.sync_group(c, 5, {c: asg(0, 1, 2, 3)})
    assert _last(h).rebalance == _rb(
        20_000,
        80_000,
        RebalanceCause.MEMBER_JOINED,
        (a, RemovalCause.MEMBER_FENCED_REBALANCE_TIMEOUT, 80_000),
    )
    assert h.shard.snapshot() == h.replayed().snapshot()


def test_members_that_never_sync_are_removed_for_the_rebalance_timeout() -> None:
    h = _harness()
    a = _first_member(h)
    b = _second_member(h, a)
    # Nobody syncs generation 2 (the leader is stuck): after the rebalance timeout (60 s) both
    # are removed and the group is empty.
    _keep_alive(h, 60_000, (a, 2), (b, 2))
    empty = _last(h)
    assert (empty.generation, empty.members) == (3, ())
    assert empty.rebalance == _rb(
        0,
        60_000,
        RebalanceCause.MEMBER_JOINED,
        (a, RemovalCause.MEMBER_FENCED_REBALANCE_TIMEOUT, 60_000),
        (b, RemovalCause.MEMBER_FENCED_REBALANCE_TIMEOUT, 60_000),
    )


def test_static_restarts_and_downgrades() -> None:
    h = _harness()
    first = h.join_group(instance_id="i1")
    assert isinstance(first, Pending)
    h.sleep(0)
    old = h.resolve(first).member_id
    h.sync_group(old, 1, {old: asg(0, 1, 2, 3)}, instance_id="i1")
    gen1 = _last(h).rebalance
    assert gen1 == _rb(0, 0, RebalanceCause.MEMBER_JOINED)
    # The same static member restarts in a stable group: no rebalance, a record of the same
    # generation that repeats how it came about.
    h.now_ms = 7_000
    new = h.join_group(instance_id="i1").member_id
    again = _last(h)
    assert (again.generation, again.members[0].member_id, again.rebalance) == (1, new, gen1)
    # It restarts preferring another protocol, which the group would now select: a rebalance,
    # its predecessor removed for it (another subscription alone would not rebalance).
    h.now_ms = 9_000
    both = subscription(["foo", "bar"])
    restarted = h.join_group(instance_id="i1", protocols=(("roundrobin", both), ("range", both)))
    newer = restarted.member_id
    assert restarted.generation_id == 2
    h.sync_group(newer, 2, {newer: asg(0, 1, 2, 3)}, instance_id="i1")
    assert _last(h).rebalance == _rb(
        9_000,
        9_000,
        RebalanceCause.STATIC_MEMBER_RESTART,
        (new, RemovalCause.STATIC_MEMBER_REPLACED, 9_000),
    )
    # Loading rebuilds the group with how its generation came about.
    assert h.shard.snapshot() == h.replayed().snapshot()
    assert h.replayed().classic_groups["grp"].to_record_value() == _last(h)


def test_a_downgrade_records_no_rebalance_and_the_next_one_says_downgraded() -> None:
    h = _harness()
    h.join("consumer", ["foo"])
    joined = h.join_group(group_id="grp")  # a classic member joins the consumer group
    assert joined.error_code == 79
    cm = h.join_group(joined.member_id)
    assert cm.error_code == 0
    h.now_ms = 5_000
    h.heartbeat(member_id="consumer", member_epoch=-1)  # the last consumer leaves: downgrade
    created = _last(h)
    assert created.rebalance is None and created.members[0].member_id == cm.member_id
    h.now_ms = 6_000
    rejoin = h.join_group(cm.member_id)
    h.sync_group(cm.member_id, rejoin.generation_id, {cm.member_id: asg(0, 1, 2, 3)})
    assert _last(h).rebalance == _rb(5_000, 6_000, RebalanceCause.DOWNGRADED)


def test_the_rebalance_is_a_trailing_field_old_records_keep_their_bytes() -> None:
    value = r.GroupMetadataValue(
        protocol_type="consumer",
        generation=3,
        protocol="range",
        leader="a",
        current_state_timestamp_ms=9,
        members=(),
    )
    old_key, old_bytes = codec.encode(r.classic_group_record("g", value))
    assert old_bytes == b'[0,"consumer",3,"range","a",9,[]]'
    rb = _rb(
        1, 5, RebalanceCause.MEMBER_LEFT, ("b", RemovalCause.MEMBER_LEFT, 1), client_reason="bye"
    )
    with_rb = r.classic_group_record("g", replace(value, rebalance=rb))
    key, raw = codec.encode(with_rb)
    assert (
        raw
        == b'[0,"consumer",3,"range","a",9,[],[1,5,"member_left","bye",[["b","member_left",1]]]]'
    )
    assert codec.decode(key, raw) == with_rb
    assert codec.decode(old_key, old_bytes).value == value
