"""The sans-IO member (``kip848.client.member``): every transition and every error code.

Each test drives one :class:`Member` with explicit times and asserts the *whole* list of
actions each event returns (requests field by field), plus the state and owned partitions.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kip848.client.member import (
    LEGAL_PREVIOUS,
    CallbackKind,
    ErrorAction,
    FindCoordinator,
    HeartbeatRequest,
    HeartbeatResponse,
    InvokeCallback,
    Left,
    LocalProtocolError,
    Member,
    MemberFailed,
    MemberState,
    SendHeartbeat,
    Subscription,
    classify_error,
)
from kip848.client.types import ErrorCode
from kip848.v1 import common_pb2

S = MemberState
T = "AAAAAAAAAAAAAAAAAAAAAQ"
U = "AAAAAAAAAAAAAAAAAAAAAg"
INTERVAL = 1_000


def parts(*items: tuple[str, list[int]]) -> dict[str, frozenset[int]]:
    return {t: frozenset(ps) for t, ps in items if ps}


def new(**kw) -> Member:
    kw.setdefault("subscription", Subscription(topics=("orders",)))
    return Member(group_id="g", member_id="m1", rebalance_timeout_ms=10_000, **kw)


def ok(
    epoch: int, assigned: dict | None = None, pending: dict | None = None, **kw
) -> HeartbeatResponse:
    return HeartbeatResponse(
        member_epoch=epoch,
        heartbeat_interval_ms=INTERVAL,
        assigned=assigned,
        pending=pending if pending is not None else ({} if assigned is not None else None),
        topic_names={T: "orders", U: "audit"},
        **kw,
    )


def err(code: int, message: str = "no") -> HeartbeatResponse:
    return HeartbeatResponse(error_code=code, error_message=message)


def join_request(m: Member, **kw) -> HeartbeatRequest:
    sub = m.subscription
    fields = dict(
        group_id="g",
        member_id="m1",
        member_epoch=0,
        instance_id=m.instance_id,
        rack_id=m.rack_id,
        rebalance_timeout_ms=10_000,
        subscribed_topic_names=sub.topics or (),
        subscribed_topic_regex=sub.pattern,
        server_assignor=m.server_assignor,
        topic_partitions={},
    )
    fields.update(kw)
    return HeartbeatRequest(**fields)


def hb(epoch: int, owned: dict | None = None, **kw) -> HeartbeatRequest:
    fields = dict(group_id="g", member_id="m1", member_epoch=epoch, topic_partitions=owned)
    fields.update(kw)
    return HeartbeatRequest(**fields)


def full(epoch: int, owned: dict, **kw) -> HeartbeatRequest:
    fields = dict(
        rebalance_timeout_ms=10_000, subscribed_topic_names=("orders",), topic_partitions=owned
    )
    fields.update(kw)
    return hb(epoch, **fields)


def sends(actions: list) -> list[HeartbeatRequest]:
    return [a.request for a in actions if isinstance(a, SendHeartbeat)]


def send_of(actions: list) -> SendHeartbeat:
    found = [a for a in actions if isinstance(a, SendHeartbeat)]
    assert len(found) == 1, actions
    return found[0]


def joined(m: Member | None = None, assigned: dict | None = None, now: int = 0):
    """A member that joined, received ``assigned``, ran on_assigned and acknowledged.
    Returns (member, seq of the ack heartbeat in flight)."""
    m = m or new()
    [find] = m.join(now)
    assert find == FindCoordinator(seq=1)
    [join] = m.coordinator_found(1, now)
    assert join.request == join_request(m)
    actions = m.heartbeat_response(join.seq, ok(1, assigned if assigned is not None else {}), now)
    if assigned:
        cb, ack = actions
        assert cb == InvokeCallback(kind=CallbackKind.ASSIGNED, partitions=assigned, token=cb.token)
        assert ack.request == hb(1, assigned)
        assert m.callback_done(cb.token, now) == []
        return m, ack.seq
    assert actions == []
    return m, None


# ---------------------------------------------------------------------------- joining


def test_join_finds_the_coordinator_then_sends_a_full_join() -> None:
    m = new(instance_id="i1", rack_id="r1", server_assignor="range")
    assert m.state is S.UNSUBSCRIBED and m.next_deadline_ms() is None
    assert m.join(100) == [FindCoordinator(seq=1)]
    assert m.state is S.JOINING
    assert m.tick(150) == []  # the lookup is in progress
    [send] = m.coordinator_found(1, 200)
    assert send == SendHeartbeat(
        seq=2,
        request=HeartbeatRequest(
            group_id="g",
            member_id="m1",
            member_epoch=0,
            instance_id="i1",
            rack_id="r1",
            rebalance_timeout_ms=10_000,
            subscribed_topic_names=("orders",),
            subscribed_topic_regex=None,
            server_assignor="range",
            topic_partitions={},  # present and empty on a join
        ),
    )
    assert m.next_deadline_ms() == 200 + 30_000  # the request timeout
    assert m.heartbeat_in_flight


def test_join_answer_with_partitions_invokes_on_assigned_and_acknowledges() -> None:
    m = new()
    m.join(0)
    [join] = m.coordinator_found(1, 0)
    actions = m.heartbeat_response(join.seq, ok(3, parts((T, [0, 1]))), 10)
    assert actions == [
        InvokeCallback(kind=CallbackKind.ASSIGNED, partitions=parts((T, [0, 1])), token=1),
        SendHeartbeat(seq=3, request=hb(3, parts((T, [0, 1])))),
    ]
    # Owned from the moment on_assigned is invoked; the ack went out at once.
    assert m.owned == parts((T, [0, 1])) and m.member_epoch == 3
    assert m.state is S.RECONCILING
    assert m.callback_done(1, 20) == []
    assert m.state is S.STABLE
    assert m.heartbeat_response(3, ok(3), 25) == []
    assert m.next_deadline_ms() == 10 + INTERVAL


def test_join_answer_without_partitions_is_stable_at_once() -> None:
    m, _ = joined()
    assert m.state is S.STABLE and m.owned == {} and m.target == {}
    assert m.next_deadline_ms() == INTERVAL


def test_server_generated_member_id_is_adopted() -> None:
    m = new()
    m.join(0)
    [join] = m.coordinator_found(1, 0)
    m.heartbeat_response(join.seq, ok(1, {}, member_id="server-id"), 5)
    assert m.member_id == "server-id"
    [send] = m.tick(INTERVAL)
    assert send.request.member_id == "server-id"


def test_pattern_subscription_sends_the_regex_and_an_empty_name_list() -> None:
    m = new(subscription=Subscription(pattern="orders-.*"))
    m.join(0)
    [join] = m.coordinator_found(1, 0)
    assert join.request == join_request(
        m, subscribed_topic_names=(), subscribed_topic_regex="orders-.*"
    )


# ---------------------------------------------------------------------------- heartbeats


def test_heartbeats_follow_the_coordinators_interval_and_send_only_changes() -> None:
    m, ack = joined(assigned=parts((T, [0])))
    m.heartbeat_response(ack, ok(1), 5)
    assert m.tick(INTERVAL - 1) == []
    [send] = m.tick(INTERVAL)
    assert send.request == hb(1)  # nothing changed: member id and epoch only
    resp = HeartbeatResponse(member_epoch=1, heartbeat_interval_ms=2_500)
    assert m.heartbeat_response(send.seq, resp, INTERVAL + 3) == []
    assert m.next_deadline_ms() == INTERVAL + 2_500


def test_only_one_heartbeat_in_flight() -> None:
    m, ack = joined(assigned=parts((T, [0])))
    assert m.push(1) == []  # a push while a heartbeat is in flight waits for its answer
    [send] = m.heartbeat_response(ack, ok(1), 2)
    assert send.request == hb(1)


def test_request_timeout_is_a_transport_failure_and_a_late_answer_is_ignored() -> None:
    m, ack = joined(assigned=parts((T, [0])))
    assert m.tick(29_999) == []
    assert m.tick(30_000) == []  # timed out: back off 100 ms, then look the coordinator up
    assert m.next_deadline_ms() == 30_100
    [find] = m.tick(30_100)
    assert isinstance(find, FindCoordinator)
    assert m.heartbeat_response(ack, ok(1), 30_101) == []  # late answer: ignored
    [send] = m.coordinator_found(find.seq, 30_102)
    assert send.request == full(1, parts((T, [0])))


def test_a_commit_that_found_the_coordinator_gone_makes_the_member_look_it_up_again() -> None:
    """An OffsetCommit answered NOT_COORDINATOR (its group's coordinator partition moved to
    another node): the member looks the coordinator up at once and heartbeats to the new one
    (not a heartbeat interval later); asked again while the lookup runs, nothing more."""
    m, ack = joined(assigned=parts((T, [0])))
    assert m.heartbeat_response(ack, ok(1), 5) == []
    [find] = m.coordinator_unknown(10)
    assert isinstance(find, FindCoordinator)
    assert m.coordinator_unknown(11) == []  # one lookup at a time
    [send] = m.coordinator_found(find.seq, 12)
    assert send.request == hb(1)
    assert m.state is S.STABLE and m.owned == parts((T, [0]))


def test_a_commit_that_found_the_coordinator_gone_waits_for_the_heartbeat_in_flight() -> None:
    m, ack = joined(assigned=parts((T, [0])))
    assert m.coordinator_unknown(3) == []  # the ack heartbeat in flight tells first
    [send] = m.heartbeat_response(ack, ok(1), 4)  # answered: another one at once tells now
    assert send.request == hb(1)


# ---------------------------------------------------------------------------- reconciliation


def test_revocation_runs_on_revoked_then_acknowledges() -> None:
    m, ack = joined(assigned=parts((T, [0, 1])))
    m.heartbeat_response(ack, ok(1), 1)
    [send] = m.tick(INTERVAL)
    actions = m.heartbeat_response(send.seq, ok(2, parts((T, [1]))), INTERVAL + 5)
    assert actions == [
        InvokeCallback(kind=CallbackKind.REVOKED, partitions=parts((T, [0])), token=2)
    ]
    assert m.owned == parts((T, [0, 1]))  # owned until on_revoked returns
    assert m.revoking == parts((T, [0]))
    assert m.state is S.RECONCILING
    # Regular heartbeats go on while the callback runs, still reporting nothing new.
    [during] = m.tick(2 * INTERVAL)
    assert during.request == hb(2)
    m.heartbeat_response(during.seq, ok(2), 2 * INTERVAL + 1)
    [acked] = m.callback_done(2, 2 * INTERVAL + 50)
    assert acked.request == hb(2, parts((T, [1])))
    assert m.owned == parts((T, [1])) and m.state is S.STABLE


def test_revoke_first_then_assign() -> None:
    m, ack = joined(assigned=parts((T, [0, 1])))
    m.heartbeat_response(ack, ok(1), 1)
    [send] = m.tick(INTERVAL)
    [revoke] = m.heartbeat_response(send.seq, ok(2, parts((T, [1]), (U, [4]))), INTERVAL)
    assert revoke.kind is CallbackKind.REVOKED and revoke.partitions == parts((T, [0]))
    assign, ack2 = m.callback_done(revoke.token, INTERVAL + 10)
    assert assign == InvokeCallback(kind=CallbackKind.ASSIGNED, partitions=parts((U, [4])), token=3)
    assert ack2.request == hb(2, parts((T, [1]), (U, [4])))
    assert m.callback_done(3, INTERVAL + 20) == []
    assert m.state is S.STABLE


def test_assignment_arriving_during_a_callback_is_reconciled_after_it() -> None:
    m, ack = joined(assigned=parts((T, [0, 1])))
    m.heartbeat_response(ack, ok(1), 1)
    [send] = m.tick(INTERVAL)
    [revoke] = m.heartbeat_response(send.seq, ok(2, parts((T, [1]))), INTERVAL)
    [during] = m.tick(2 * INTERVAL)
    # The target moves on while on_revoked runs: nothing else starts meanwhile.
    assert m.heartbeat_response(during.seq, ok(3, parts((T, [1, 2]))), 2 * INTERVAL) == []
    assign, ack2 = m.callback_done(revoke.token, 2 * INTERVAL + 5)
    assert assign == InvokeCallback(kind=CallbackKind.ASSIGNED, partitions=parts((T, [2])), token=3)
    assert ack2.request == hb(3, parts((T, [1, 2])))


def test_pending_partitions_are_not_owned() -> None:
    m = new()
    m.join(0)
    [join] = m.coordinator_found(1, 0)
    actions = m.heartbeat_response(join.seq, ok(1, parts((T, [0])), pending=parts((T, [1]))), 0)
    assert [a.kind for a in actions if isinstance(a, InvokeCallback)] == [CallbackKind.ASSIGNED]
    assert m.owned == parts((T, [0])) and m.pending == parts((T, [1]))


def test_rebalance_timeout_loses_the_partitions_and_rejoins() -> None:
    m, ack = joined(assigned=parts((T, [0, 1])))
    m.heartbeat_response(ack, ok(1), 1)
    [send] = m.tick(INTERVAL)  # sent at 1000: the coordinator's rebalance timer starts after
    [revoke] = m.heartbeat_response(send.seq, ok(2, parts((T, [1]))), INTERVAL + 40)
    [hb2] = m.tick(2 * INTERVAL)
    assert m.next_deadline_ms() == INTERVAL + 10_000  # before hb2's request timeout
    assert m.tick(INTERVAL + 10_000 - 1) == []
    # The deadline passes with on_revoked still running: the member is fenced, owns nothing.
    assert m.tick(INTERVAL + 10_000) == []
    assert m.state is S.FENCED and m.owned == {} and m.member_epoch == 0
    # Its answer (sent before the fencing) changes nothing.
    assert m.heartbeat_response(hb2.seq, ok(2), INTERVAL + 10_001) == []
    # on_revoked finally returns: partition 1 (never being revoked) is lost, then rejoin.
    [lost] = m.callback_done(revoke.token, 20_000)
    assert lost == InvokeCallback(kind=CallbackKind.LOST, partitions=parts((T, [1])), token=3)
    [rejoin] = m.callback_done(lost.token, 20_001)
    assert rejoin.request == join_request(m)
    assert m.state is S.JOINING


# ---------------------------------------------------------------------------- fencing errors


@pytest.mark.parametrize(
    "code",
    [ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.GROUP_ID_NOT_FOUND],
)
def test_fencing_errors_call_on_lost_then_rejoin_with_epoch_0(code: ErrorCode) -> None:
    m, ack = joined(assigned=parts((T, [0, 1])))
    m.heartbeat_response(ack, ok(4), 1)
    [send] = m.tick(INTERVAL)
    [lost] = m.heartbeat_response(send.seq, err(code), INTERVAL + 1)
    assert lost == InvokeCallback(kind=CallbackKind.LOST, partitions=parts((T, [0, 1])), token=2)
    assert m.state is S.FENCED and m.owned == {} and m.member_epoch == 0
    assert m.tick(INTERVAL * 10) == []  # no heartbeats while on_lost runs
    [rejoin] = m.callback_done(lost.token, INTERVAL * 10)
    assert rejoin.request == join_request(m)  # same member id, epoch 0, no back-off


def test_fenced_without_partitions_rejoins_at_once() -> None:
    m, _ = joined()
    [send] = m.tick(INTERVAL)
    [rejoin] = m.heartbeat_response(send.seq, err(ErrorCode.FENCED_MEMBER_EPOCH), INTERVAL)
    assert rejoin.request == join_request(m) and m.state is S.JOINING


def test_fenced_during_a_revocation_loses_only_the_rest() -> None:
    m, ack = joined(assigned=parts((T, [0, 1])))
    m.heartbeat_response(ack, ok(1), 1)
    [send] = m.tick(INTERVAL)
    [revoke] = m.heartbeat_response(send.seq, ok(2, parts((T, [1]))), INTERVAL)
    [during] = m.tick(2 * INTERVAL)
    assert m.heartbeat_response(during.seq, err(ErrorCode.UNKNOWN_MEMBER_ID), 2 * INTERVAL) == []
    [lost] = m.callback_done(revoke.token, 2 * INTERVAL + 1)  # partition 0 ended with on_revoked
    assert lost.kind is CallbackKind.LOST and lost.partitions == parts((T, [1]))


def test_group_id_not_found_on_a_join_is_fatal() -> None:
    m = new()
    m.join(0)
    [join] = m.coordinator_found(1, 0)
    assert classify_error(ErrorCode.GROUP_ID_NOT_FOUND, 0) is ErrorAction.FATAL
    actions = m.heartbeat_response(join.seq, err(ErrorCode.GROUP_ID_NOT_FOUND, "classic"), 5)
    assert actions == [MemberFailed(error_code=69, error_message="classic")]
    assert m.state is S.FATAL


def test_a_join_refused_with_a_fencing_error_backs_off() -> None:
    m = new()
    m.join(0)
    [join] = m.coordinator_found(1, 0)
    assert m.heartbeat_response(join.seq, err(ErrorCode.UNKNOWN_MEMBER_ID), 5) == []
    assert m.state is S.JOINING and m.next_deadline_ms() == 105
    [again] = m.tick(105)
    assert again.request == join_request(m)


# ---------------------------------------------------------------------------- retriable errors


@pytest.mark.parametrize(
    "code",
    [
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.UNKNOWN_SERVER_ERROR,
        ErrorCode.UNRELEASED_INSTANCE_ID,
    ],
)
def test_retriable_errors_back_off_exponentially_and_resend_in_full(code: ErrorCode) -> None:
    m, ack = joined(assigned=parts((T, [0])))
    m.heartbeat_response(ack, ok(1), 1)
    [send] = m.tick(INTERVAL)
    now = INTERVAL
    for backoff in (100, 200, 400, 800, 1_000, 1_000):
        assert m.heartbeat_response(send.seq, err(code), now) == []
        assert m.next_deadline_ms() == now + backoff
        assert m.tick(now + backoff - 1) == []
        now += backoff
        [send] = m.tick(now)
        assert send.request == full(1, parts((T, [0])))  # full after any error
    assert m.heartbeat_response(send.seq, ok(1), now) == []
    assert m.next_deadline_ms() == now + INTERVAL  # back-off reset by a success


def test_unreleased_instance_id_on_a_join_is_retried() -> None:
    m = new(instance_id="i1")
    m.join(0)
    [join] = m.coordinator_found(1, 0)
    assert m.heartbeat_response(join.seq, err(ErrorCode.UNRELEASED_INSTANCE_ID), 10) == []
    [again] = m.tick(110)
    assert again.request == join_request(m)


@pytest.mark.parametrize("code", [ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR])
def test_coordinator_errors_look_the_coordinator_up_again(code: ErrorCode) -> None:
    m, ack = joined(assigned=parts((T, [0])))
    assert m.heartbeat_response(ack, err(code), 1) == []
    assert m.coordinator_known is False
    [find] = m.tick(101)
    assert isinstance(find, FindCoordinator)
    assert m.coordinator_lookup_failed(find.seq, 150) == []  # second failure: 200 ms
    [find2] = m.tick(350)
    [send] = m.coordinator_found(find2.seq, 360)
    assert send.request == full(1, parts((T, [0])))
    assert m.owned == parts((T, [0]))  # nothing lost: only the coordinator moved


def test_transport_failure_looks_the_coordinator_up_and_resends_in_full() -> None:
    m, ack = joined(assigned=parts((T, [0])))
    assert m.heartbeat_failed(ack, 3) == []
    [find] = m.tick(103)
    [send] = m.coordinator_found(find.seq, 104)
    assert send.request == full(1, parts((T, [0])))
    assert m.heartbeat_failed(send.seq + 99, 105) == []  # unknown seq: ignored


# ---------------------------------------------------------------------------- fatal errors

FATAL_CODES = [
    ErrorCode.INVALID_REQUEST,
    ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ErrorCode.UNSUPPORTED_ASSIGNOR,
    ErrorCode.GROUP_MAX_SIZE_REACHED,
    ErrorCode.INVALID_REGULAR_EXPRESSION,
    ErrorCode.FENCED_INSTANCE_ID,
    ErrorCode.UNSUPPORTED_VERSION,
    9999,  # a code this client does not know
]


@pytest.mark.parametrize("code", FATAL_CODES)
def test_fatal_errors_lose_the_partitions_and_stop(code: int) -> None:
    m, ack = joined(assigned=parts((T, [0])))
    actions = m.heartbeat_response(ack, err(code, "bad"), 5)
    assert actions == [
        MemberFailed(error_code=int(code), error_message="bad"),
        InvokeCallback(kind=CallbackKind.LOST, partitions=parts((T, [0])), token=2),
    ]
    assert m.state is S.FATAL and m.owned == {}
    assert m.callback_done(2, 6) == []
    assert m.next_deadline_ms() is None and m.tick(10**9) == []  # no more heartbeats
    assert m.leave(10**9) == [Left()]


def test_every_error_code_has_a_decision() -> None:
    """Every code of the contract is classified (no code falls through by accident)."""
    decided = {int(c): classify_error(c, 5) for c in ErrorCode if c != ErrorCode.NONE}
    assert decided[ErrorCode.FENCED_MEMBER_EPOCH] is ErrorAction.FENCE
    assert decided[ErrorCode.UNKNOWN_MEMBER_ID] is ErrorAction.FENCE
    assert decided[ErrorCode.GROUP_ID_NOT_FOUND] is ErrorAction.FENCE
    assert decided[ErrorCode.NOT_COORDINATOR] is ErrorAction.FIND_COORDINATOR
    assert decided[ErrorCode.COORDINATOR_NOT_AVAILABLE] is ErrorAction.FIND_COORDINATOR
    retry = {c for c, a in decided.items() if a is ErrorAction.RETRY}
    assert retry == {14, -1, 111}
    fatal = {c for c, a in decided.items() if a is ErrorAction.FATAL}
    assert fatal == set(decided) - retry - {110, 25, 69, 15, 16}


def test_error_codes_mirror_the_contract() -> None:
    assert {c.name: int(c) for c in ErrorCode} == dict(common_pb2.ErrorCode.items())


# ---------------------------------------------------------------------------- leaving


def test_leave_revokes_everything_then_sends_epoch_minus_1() -> None:
    m, ack = joined(assigned=parts((T, [0, 1])))
    m.heartbeat_response(ack, ok(2), 1)
    [revoke] = m.leave(10)
    assert revoke == InvokeCallback(
        kind=CallbackKind.REVOKED, partitions=parts((T, [0, 1])), token=2
    )
    assert m.state is S.PREPARE_LEAVING
    [keepalive] = m.tick(INTERVAL)  # heartbeats go on while on_revoked runs
    assert keepalive.request == hb(2)
    assert m.leave(INTERVAL + 1) == []  # idempotent
    m.heartbeat_response(keepalive.seq, ok(2), INTERVAL + 2)
    [leave] = m.callback_done(revoke.token, INTERVAL + 3)
    assert leave.request == HeartbeatRequest(group_id="g", member_id="m1", member_epoch=-1)
    assert m.state is S.LEAVING and m.owned == {}
    assert m.heartbeat_response(leave.seq, ok(-1), INTERVAL + 4) == [Left()]
    assert m.state is S.UNSUBSCRIBED


def test_static_member_leaves_with_minus_2_unless_asked_to_leave_for_good() -> None:
    m, _ = joined(new(instance_id="i1"))
    [leave] = m.leave(5)
    assert leave.request == HeartbeatRequest(
        group_id="g", member_id="m1", member_epoch=-2, instance_id="i1"
    )
    m2, _ = joined(new(instance_id="i1"))
    [leave2] = m2.leave(5, leave_group=True)
    assert leave2.request.member_epoch == -1


@pytest.mark.parametrize(
    "answer", [err(ErrorCode.COORDINATOR_NOT_AVAILABLE), err(ErrorCode.UNKNOWN_MEMBER_ID), None]
)
def test_the_leave_heartbeat_is_sent_once(answer: HeartbeatResponse | None) -> None:
    m, _ = joined()
    [leave] = m.leave(5)
    if answer is None:
        assert m.heartbeat_failed(leave.seq, 6) == [Left()]
    else:
        assert m.heartbeat_response(leave.seq, answer, 6) == [Left()]
    assert m.state is S.UNSUBSCRIBED and m.next_deadline_ms() is None


def test_leave_waits_for_the_heartbeat_in_flight() -> None:
    m, ack = joined(assigned=parts((T, [0])))
    [revoke] = m.leave(2)
    assert m.callback_done(revoke.token, 3) == []  # the ack heartbeat is still in flight
    [leave] = m.heartbeat_response(ack, ok(1), 4)
    assert leave.request.member_epoch == -1


def test_leave_before_anything_was_sent_needs_no_heartbeat() -> None:
    m = new()
    m.join(0)
    assert m.leave(1) == [Left()]
    assert m.state is S.UNSUBSCRIBED


def test_leave_while_the_join_is_in_flight_leaves_after_its_answer() -> None:
    m = new()
    m.join(0)
    [join] = m.coordinator_found(1, 0)
    assert m.leave(1) == []
    assert m.state is S.LEAVING
    [leave] = m.heartbeat_response(join.seq, ok(1, parts((T, [0]))), 2)
    assert leave.request.member_epoch == -1 and m.owned == {}  # never took the partitions


def test_fenced_while_preparing_to_leave_ends_the_membership() -> None:
    m, ack = joined(assigned=parts((T, [0])))
    m.heartbeat_response(ack, ok(1), 1)
    [revoke] = m.leave(2)
    [keepalive] = m.tick(INTERVAL)
    assert m.heartbeat_response(keepalive.seq, err(ErrorCode.FENCED_MEMBER_EPOCH), INTERVAL) == []
    assert m.state is S.FENCED
    assert m.callback_done(revoke.token, INTERVAL + 1) == [Left()]  # no on_lost, no leave
    assert m.state is S.UNSUBSCRIBED


def test_leave_while_fenced_ends_after_on_lost() -> None:
    m, ack = joined(assigned=parts((T, [0])))
    [lost] = m.heartbeat_response(ack, err(ErrorCode.FENCED_MEMBER_EPOCH), 1)
    assert m.leave(2) == []
    assert m.callback_done(lost.token, 3) == [Left()]


def test_rejoin_after_leaving() -> None:
    m, _ = joined()
    [leave] = m.leave(5)
    m.heartbeat_response(leave.seq, ok(-1), 6)
    [join] = m.join(7)  # the coordinator is still known
    assert join.request == join_request(m)


# ---------------------------------------------------------------------------- push


def test_push_makes_the_member_heartbeat_at_once() -> None:
    m, ack = joined(assigned=parts((T, [0])))
    m.heartbeat_response(ack, ok(1), 1)
    [send] = m.push(50)  # no data: always a heartbeat
    assert send.request == hb(1)
    [revoke] = m.heartbeat_response(send.seq, ok(2, {}), 52)
    assert revoke.kind is CallbackKind.REVOKED


def test_push_asks_for_a_heartbeat_only_when_there_is_something_to_do() -> None:
    m, ack = joined(assigned=parts((T, [0])))
    m.heartbeat_response(ack, ok(1), 1)
    # The target is what the member owns, nothing released, no assignment due: nothing to do.
    assert m.push(10, target=parts((T, [0])), released={}) == []
    # Its target changed (a revocation, or partitions still held by others): heartbeat.
    [send] = m.push(11, target=parts((T, [0, 1])), released={})
    assert send.request == hb(1)
    m.heartbeat_response(send.seq, ok(1), 12)
    # A partition it waits for was released.
    [send] = m.push(13, target=parts((T, [0])), released=parts((T, [1])))
    m.heartbeat_response(send.seq, ok(1), 14)
    # The group epoch moved past the assignment epoch: a heartbeat computes the new target.
    [send] = m.push(15, target=parts((T, [0])), released={}, assignment_due=True)
    assert send.request == hb(1)
    assert m.owned == parts((T, [0]))  # pushes never change owned partitions


def test_push_outside_the_group_does_nothing() -> None:
    m = new()
    assert m.push(0) == []
    m.join(0)
    [join] = m.coordinator_found(1, 0)
    assert m.push(1) == []


# ---------------------------------------------------------------------------- subscription


def test_subscription_change_is_sent_at_once_and_clears_a_regex() -> None:
    m, ack = joined(new(subscription=Subscription(pattern="o.*")))
    [send] = m.tick(INTERVAL)
    m.heartbeat_response(send.seq, ok(1), INTERVAL)
    [change] = m.update_subscription(Subscription(topics=("a", "b")), INTERVAL + 1)
    assert change.request == hb(1, subscribed_topic_names=("a", "b"), subscribed_topic_regex="")
    m.heartbeat_response(change.seq, ok(2), INTERVAL + 2)
    [plain] = m.tick(2 * INTERVAL + 1)
    assert plain.request == hb(2)


def test_a_subscription_changed_while_the_join_is_in_flight_is_sent_once_it_is_answered() -> None:
    m = new()
    m.join(0)
    [join] = m.coordinator_found(1, 0)
    assert join.request == join_request(m)
    sub = Subscription(topics=("orders", "audit"))
    assert m.update_subscription(sub, 1) == []  # one heartbeat in flight
    [change] = m.heartbeat_response(join.seq, ok(1, {}), 2)
    assert change.request == hb(1, subscribed_topic_names=("orders", "audit"))
    assert m.heartbeat_response(change.seq, ok(2, {}), 3) == []
    [plain] = m.tick(2 + INTERVAL)
    assert plain.request == hb(2)


def test_server_assignor_change_is_sent_once() -> None:
    m, _ = joined()
    [send] = m.update_server_assignor("range", 1)
    assert send.request == hb(1, server_assignor="range")
    m.heartbeat_response(send.seq, ok(1), 2)
    [plain] = m.tick(1 + INTERVAL)
    assert plain.request == hb(1)


# ---------------------------------------------------------------------------- misuse


def test_illegal_events_raise_and_change_nothing() -> None:
    m, ack = joined(assigned=parts((T, [0])))
    before = m.snapshot()
    with pytest.raises(LocalProtocolError):
        m.join(5)
    with pytest.raises(LocalProtocolError):
        m.callback_done(77, 5)
    assert m.snapshot() == before
    m.leave(6)
    before = m.snapshot()
    with pytest.raises(LocalProtocolError):
        m.update_subscription(Subscription(topics=("x",)), 7)
    assert m.snapshot() == before


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ValueError, match="group_id"):
        Member(group_id=" ", member_id="m", subscription=Subscription(topics=("t",)))
    with pytest.raises(ValueError, match="member_id"):
        Member(group_id="g", member_id="", subscription=Subscription(topics=("t",)))
    with pytest.raises(ValueError, match="topics, a pattern"):
        Subscription()
    with pytest.raises(TypeError):
        Subscription(topics="orders")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rebalance_timeout_ms"):
        new(rebalance_timeout_ms=0) if False else Member(
            group_id="g",
            member_id="m",
            subscription=Subscription(topics=("t",)),
            rebalance_timeout_ms=0,
        )


def test_every_state_is_reachable_only_from_its_legal_previous_states() -> None:
    assert set(LEGAL_PREVIOUS) == set(MemberState) - {S.UNSUBSCRIBED} | {S.UNSUBSCRIBED}
    for state, previous in LEGAL_PREVIOUS.items():
        assert state not in previous, state


# ---------------------------------------------------------------------------- properties


class _Driver:
    """Plays a random but well-formed IO layer against one member and checks, after every
    event, the invariants the IO layer relies on."""

    def __init__(self) -> None:
        self.m = new()
        self.now = 0
        self.inflight: list[SendHeartbeat] = []
        self.lookups: list[FindCoordinator] = []
        self.callback: InvokeCallback | None = None
        self.granted: set[tuple[str, int]] = set()  # partitions the coordinator handed out
        self.life: dict[tuple[str, int], str] = {}  # partition -> "owned" while owned
        self.left = False

    def apply(self, actions: list) -> None:
        for a in actions:
            if isinstance(a, SendHeartbeat):
                assert not self.inflight, "two heartbeats in flight"
                self.inflight.append(a)
            elif isinstance(a, FindCoordinator):
                self.lookups.append(a)
            elif isinstance(a, InvokeCallback):
                assert self.callback is None, "two callbacks at once"
                self.callback = a
                for t, ps in a.partitions.items():
                    for p in ps:
                        if a.kind is CallbackKind.ASSIGNED:
                            assert (t, p) in self.granted
                            assert (t, p) not in self.life
                            self.life[(t, p)] = "owned"
                        else:  # every owned partition ends with exactly one of these
                            assert self.life.pop((t, p)) == "owned", (a, self.life)
            elif isinstance(a, Left):
                self.left = True
        owned = {(t, p) for t, ps in self.m.owned.items() for p in ps}
        if self.m.state not in (S.FENCED, S.FATAL):
            assert owned == set(self.life) or self.callback is not None

    def step(self, choice: int, assigned: frozenset[int], code: int) -> None:
        self.now += 37
        m = self.m
        if choice == 0 and self.inflight:
            send = self.inflight.pop()
            if code:
                self.apply(m.heartbeat_response(send.seq, err(code), self.now))
            else:
                grant = parts((T, sorted(assigned)))
                self.granted |= {(T, p) for p in assigned}
                epoch = max(1, m.member_epoch + 1)
                self.apply(m.heartbeat_response(send.seq, ok(epoch, grant), self.now))
        elif choice == 1 and self.inflight:
            self.apply(m.heartbeat_failed(self.inflight.pop().seq, self.now))
        elif choice == 2 and self.callback is not None:
            cb, self.callback = self.callback, None
            self.apply(m.callback_done(cb.token, self.now))
        elif choice == 3 and self.lookups:
            self.apply(m.coordinator_found(self.lookups.pop().seq, self.now))
        elif choice == 4:
            self.apply(m.push(self.now))
        elif choice == 5 and not self.left:
            self.apply(m.leave(self.now))
        else:
            self.now += 2_000
            self.apply(m.tick(self.now))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 6),
            st.frozensets(st.integers(0, 3)),
            st.sampled_from([0, 0, 0, 0, 110, 25, 15, 14, 42]),
        ),
        max_size=60,
    )
)
def test_random_event_sequences_keep_the_contract(steps) -> None:
    d = _Driver()
    d.apply(d.m.join(0))
    for choice, assigned, code in steps:
        d.step(choice, assigned, code)
        assert d.m.state in LEGAL_PREVIOUS or d.m.state is S.UNSUBSCRIBED


# ---------------------------------------------------------------------------- purity


def test_the_member_module_is_sans_io() -> None:
    root = Path(__file__).resolve().parents[1] / "src" / "kip848" / "client"
    allowed = {"__future__", "enum", "collections", "dataclasses", "base64", "typing", "copy"}
    for name in ("member.py", "types.py"):
        tree = ast.parse((root / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                mods = [] if node.level else [node.module or ""]
            else:
                continue
            for mod in mods:
                assert mod.split(".")[0] in allowed, f"{name} imports {mod}"


def test_a_copy_is_independent() -> None:
    m, ack = joined(assigned=parts((T, [0])))
    twin = m.copy()
    assert twin.snapshot() == m.snapshot()
    m.heartbeat_response(ack, err(ErrorCode.FENCED_MEMBER_EPOCH), 5)
    assert m.state is S.FENCED and twin.state is S.STABLE and twin.owned == parts((T, [0]))
    assert twin.heartbeat_response(ack, ok(1), 5) == []
    assert twin.request_due_ms() == INTERVAL
