"""The member side of KIP-848 as a sans-IO state machine: events in, actions out.

Shape (h11's, with aioquic's clock): a :class:`Member` never does IO, never reads a clock and
never draws a random number. Every entry point takes ``now_ms`` (any monotonic millisecond
clock) and returns the :data:`Action` s due now; :meth:`Member.next_deadline_ms` says when to
call :meth:`Member.tick` next if nothing else happens. An entry point called in a state where
it makes no sense raises :class:`LocalProtocolError` and changes nothing. Driven by the asyncio
client (:mod:`kip848.client.aio`) and by the simulator's client model (``coordinator/sim``),
so the seeded simulations and the exhaustive explorer test this very code.

Member states (Kafka's ``MemberState``; legal previous states in :data:`LEGAL_PREVIOUS`)::

    UNSUBSCRIBED --join--> JOINING --response--> STABLE <-> RECONCILING -> ACKNOWLEDGING -> STABLE
         ^                    ^                         \\ FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID
         |                    +---- on_lost returned ---- FENCED
         +-- leave response -- LEAVING <- PREPARE_LEAVING (on_revoked for everything) <- leave()
    any non-retriable error -> FATAL (on_lost, then nothing more)

Rules (KIP-848 "Consumer Group Heartbeat", "Reconciliation"; Kafka's membership manager):

* Heartbeats: at most one in flight; the next is due ``heartbeat_interval_ms`` (the
  coordinator's) after the previous was sent, or at once when joining, acknowledging, leaving,
  changing the subscription or told to by a push. A join is *full* (every field; ``topic_partitions`` present and empty).
  Later heartbeats send only what changed since the last one sent (owned partitions by topic
  id, subscription, server assignor), except after any failure (error, transport failure,
  timeout): the next heartbeat is full again.
* Reconciliation: the assignment of the last response that carried one is the member's
  *target*. Partitions owned and not in it are revoked first (``on_revoked``; they stay owned
  until it returns), then partitions in it and not owned are added (owned from the moment
  ``on_assigned`` is invoked), then a heartbeat acknowledges the new owned set at once. Only
  one callback runs at a time; an assignment arriving meanwhile is reconciled after it.
* Rebalance timeout: a revocation still running ``rebalance_timeout_ms`` after the heartbeat
  that asked for it was sent loses its partitions: the coordinator has fenced the member by
  then and may have given them away, so the member treats itself as fenced.
* FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID (and GROUP_ID_NOT_FOUND for a member with an epoch):
  every owned partition is dropped at once and ``on_lost`` is called; when it returns the
  member rejoins with epoch 0 and the same member id.
* COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR and transport failures: the coordinator is looked
  up again (:class:`FindCoordinator`) and the heartbeat retried with exponential back-off;
  COORDINATOR_LOAD_IN_PROGRESS, UNKNOWN_SERVER_ERROR and UNRELEASED_INSTANCE_ID: back-off only.
  Any other error is fatal (:class:`MemberFailed`).
* Leaving: ``on_revoked`` for every owned partition, then one heartbeat with epoch -1 (-2: a
  static member that will come back); its answer, whatever it is, ends the membership.
* Push (the coordinator's assignment stream): a hint that the target changed or a partition
  the member waits for was released; the member heartbeats at once when it has something to
  do. Pushes never change owned partitions, so a lost, late or repeated push is harmless.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from .types import ErrorCode, Partitions, TopicId, error_name, minus, partitions_of, union

__all__ = [
    "LEGAL_PREVIOUS",
    "Action",
    "CallbackKind",
    "FindCoordinator",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "InvokeCallback",
    "Left",
    "LocalProtocolError",
    "Member",
    "MemberFailed",
    "MemberState",
    "SendHeartbeat",
    "Subscription",
    "classify_error",
    "ErrorAction",
]


class LocalProtocolError(Exception):
    """The driver used the member wrongly (an event that makes no sense in the current state,
    an unknown callback token). Nothing was changed."""


class MemberState(enum.Enum):
    UNSUBSCRIBED = "unsubscribed"  # not started, or left the group
    JOINING = "joining"  # sending (or about to send) a heartbeat with epoch 0
    RECONCILING = "reconciling"  # owned partitions differ from the target; callbacks run
    ACKNOWLEDGING = "acknowledging"  # reconciled; a heartbeat must report the owned partitions
    STABLE = "stable"  # owned == target, acknowledged
    FENCED = "fenced"  # lost its partitions (on_lost running); rejoins with epoch 0 after it
    PREPARE_LEAVING = "prepare_leaving"  # on_revoked for everything before the leave heartbeat
    LEAVING = "leaving"  # the leave heartbeat (epoch -1 / -2) is due or in flight
    FATAL = "fatal"  # a non-retriable error: no more heartbeats


S = MemberState
IN_GROUP = frozenset({S.RECONCILING, S.ACKNOWLEDGING, S.STABLE})
HEARTBEATING = IN_GROUP | {S.JOINING, S.PREPARE_LEAVING, S.LEAVING}

LEGAL_PREVIOUS: Mapping[MemberState, frozenset[MemberState]] = {
    S.JOINING: frozenset({S.UNSUBSCRIBED, S.FENCED}),
    S.RECONCILING: frozenset({S.JOINING, S.STABLE, S.ACKNOWLEDGING}),
    S.ACKNOWLEDGING: frozenset({S.JOINING, S.RECONCILING, S.STABLE}),
    S.STABLE: frozenset({S.JOINING, S.RECONCILING, S.ACKNOWLEDGING}),
    S.FENCED: IN_GROUP | {S.PREPARE_LEAVING},
    S.PREPARE_LEAVING: IN_GROUP | {S.JOINING},
    S.LEAVING: frozenset({S.PREPARE_LEAVING}),
    S.UNSUBSCRIBED: frozenset({S.JOINING, S.LEAVING, S.FENCED}),
    S.FATAL: IN_GROUP | {S.JOINING, S.PREPARE_LEAVING},
}
"""Next state -> the states it may be entered from (a transition not listed is a bug)."""


# ---------------------------------------------------------------------------- wire dataclasses


@dataclass(frozen=True, slots=True, kw_only=True)
class Subscription:
    """Topic names, or an RE2 pattern (full match, resolved by the coordinator), or both."""

    topics: tuple[str, ...] | None = None
    pattern: str | None = None

    def __post_init__(self) -> None:
        if self.topics is None and self.pattern is None:
            raise ValueError("subscribe to topics, a pattern, or both")
        if isinstance(self.topics, str):
            raise TypeError("topics is a sequence of topic names, not one string")


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatRequest:
    """ConsumerGroupHeartbeatRequest; None / -1 = field absent (Kafka's null / unchanged)."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    topic_partitions: Partitions | None = None
    """Owned partitions by topic id; None = unchanged, {} = none (always {} on a join)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatResponse:
    error_code: int = 0
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assigned: Partitions | None = None
    """The member's assigned partitions; None = no change since the last response."""
    pending: Partitions | None = None
    """Partitions of the target still held by their previous owners (informational)."""
    topic_names: Mapping[TopicId, str] = field(default_factory=dict)


# ---------------------------------------------------------------------------- actions


@dataclass(frozen=True, slots=True, kw_only=True)
class SendHeartbeat:
    """Send ``request``; report its fate with ``heartbeat_response`` / ``heartbeat_failed``
    (same ``seq``). The member counts it as sent now."""

    seq: int
    request: HeartbeatRequest


@dataclass(frozen=True, slots=True, kw_only=True)
class FindCoordinator:
    """Look the group's coordinator up; report with ``coordinator_found`` /
    ``coordinator_lookup_failed`` (same ``seq``)."""

    seq: int


class CallbackKind(enum.Enum):
    REVOKED = "on_revoked"
    ASSIGNED = "on_assigned"
    LOST = "on_lost"


@dataclass(frozen=True, slots=True, kw_only=True)
class InvokeCallback:
    """Run the user's callback with ``partitions``; report with ``callback_done(token)``. Never
    more than one outstanding."""

    kind: CallbackKind
    partitions: Partitions
    token: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Left:
    """The membership ended after ``leave()`` (the leave heartbeat was answered, failed, or was
    not needed)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberFailed:
    """A non-retriable error: the member is FATAL (its partitions are being lost)."""

    error_code: int
    error_message: str


Action = SendHeartbeat | FindCoordinator | InvokeCallback | Left | MemberFailed


# ---------------------------------------------------------------------------- error classes


class ErrorAction(enum.Enum):
    FENCE = "fence"  # drop everything (on_lost), rejoin with epoch 0
    FIND_COORDINATOR = "find-coordinator"  # look the coordinator up again, retry with back-off
    RETRY = "retry"  # retry with back-off
    FATAL = "fatal"


_ERROR_ACTIONS: dict[int, ErrorAction] = {
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: ErrorAction.RETRY,
    ErrorCode.UNKNOWN_SERVER_ERROR: ErrorAction.RETRY,
    # A restarted static member whose previous instance is still in the group (until that one
    # leaves with -2 or its session expires): wait for it rather than give up.
    ErrorCode.UNRELEASED_INSTANCE_ID: ErrorAction.RETRY,
    ErrorCode.COORDINATOR_NOT_AVAILABLE: ErrorAction.FIND_COORDINATOR,
    ErrorCode.NOT_COORDINATOR: ErrorAction.FIND_COORDINATOR,
    ErrorCode.FENCED_MEMBER_EPOCH: ErrorAction.FENCE,
    ErrorCode.UNKNOWN_MEMBER_ID: ErrorAction.FENCE,
}


def classify_error(code: int, member_epoch: int) -> ErrorAction:
    """What a heartbeat error means for a member that sent ``member_epoch``."""
    if code == ErrorCode.GROUP_ID_NOT_FOUND and member_epoch > 0:
        return ErrorAction.FENCE  # the group was deleted under the member: a rejoin re-creates it
    return _ERROR_ACTIONS.get(code, ErrorAction.FATAL)


# ---------------------------------------------------------------------------- the member


@dataclass(slots=True)
class _Inflight:
    seq: int
    sent_ms: int
    member_epoch: int
    stale: bool = False  # sent before a fencing: its answer is ignored


@dataclass(slots=True)
class _Callback:
    kind: CallbackKind
    partitions: dict[TopicId, frozenset[int]]
    token: int
    deadline_ms: int | None  # revocations asked by the coordinator: its rebalance timeout


class Member:
    """One member of one consumer group (see the module docstring for the rules)."""

    def __init__(
        self,
        *,
        group_id: str,
        member_id: str,
        subscription: Subscription,
        instance_id: str | None = None,
        rack_id: str | None = None,
        server_assignor: str | None = None,
        rebalance_timeout_ms: int = 300_000,
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1_000,
        heartbeat_interval_ms: int = 5_000,
    ) -> None:
        if not group_id.strip():
            raise ValueError("group_id must not be empty")
        if not member_id:
            raise ValueError("member_id must not be empty (KIP-1082: the client chooses it)")
        if instance_id is not None and not instance_id:
            raise ValueError("instance_id must be None or non-empty")
        if rack_id is not None and not rack_id:
            raise ValueError("rack_id must be None or non-empty")
        for name, value in (
            ("rebalance_timeout_ms", rebalance_timeout_ms),
            ("request_timeout_ms", request_timeout_ms),
            ("retry_backoff_ms", retry_backoff_ms),
            ("heartbeat_interval_ms", heartbeat_interval_ms),
        ):
            if value <= 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        if retry_backoff_max_ms < retry_backoff_ms:
            raise ValueError("retry_backoff_max_ms must be >= retry_backoff_ms")
        self.group_id = group_id
        self.member_id = member_id
        self.instance_id = instance_id
        self.rack_id = rack_id
        self.subscription = subscription
        self.server_assignor = server_assignor
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms

        self.state = S.UNSUBSCRIBED
        self.member_epoch = 0
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.owned: dict[TopicId, frozenset[int]] = {}
        """What the member owns now: a partition being revoked stays owned until on_revoked
        returns; an added one is owned from the moment on_assigned is invoked."""
        self.target: dict[TopicId, frozenset[int]] | None = None
        """The assigned partitions of the last response that carried an assignment."""
        self.pending: dict[TopicId, frozenset[int]] = {}
        """Partitions of the target not yet released by their previous owners."""
        self.topic_names: dict[TopicId, str] = {}
        self.failure: MemberFailed | None = None

        self._seq = 0
        self._token = 0
        self._coordinator_known = False
        self._lookup: int | None = None  # seq of the FindCoordinator in progress
        self._lookup_sent_ms = 0
        self._inflight: _Inflight | None = None
        self._target_sent_ms = 0  # when the request whose answer set the target was sent
        self._last_sent_ms: int | None = (
            None  # the previous heartbeat (the interval counts from it)
        )
        self._heartbeat_now = False
        self._need_full = True
        self._sent_owned: dict[TopicId, frozenset[int]] | None = None
        self._sent_subscription: Subscription | None = None
        self._sent_assignor: str | None = None
        self._regex_sent = False
        self._failures = 0
        self._backoff_until_ms = 0
        self._callback: _Callback | None = None  # the callback whose outcome matters
        self._running: int | None = None  # token of the callback the driver is running
        self._lost: dict[TopicId, frozenset[int]] | None = None  # on_lost still to invoke
        self._leave_requested = False
        self._leave_epoch = -1
        self._ever_sent = False

    # ------------------------------------------------------------------ views

    @property
    def revoking(self) -> Partitions:
        """Partitions whose on_revoked is running (still owned)."""
        c = self._callback
        return c.partitions if c is not None and c.kind is CallbackKind.REVOKED else {}

    @property
    def in_group(self) -> bool:
        """Holds a member epoch the coordinator gave it (offset commits are possible)."""
        return self.member_epoch > 0 and self.state in IN_GROUP | {S.PREPARE_LEAVING}

    @property
    def heartbeat_in_flight(self) -> bool:
        return self._inflight is not None

    @property
    def inflight_seq(self) -> int | None:
        """The ``seq`` of the heartbeat the member waits an answer for (None: none)."""
        return None if self._inflight is None else self._inflight.seq

    @property
    def callback_running(self) -> bool:
        return self._running is not None

    @property
    def coordinator_known(self) -> bool:
        return self._coordinator_known

    @property
    def leave_epoch(self) -> int:
        """The epoch the leave heartbeat carries (-1, or -2 for a static member's restart)."""
        return self._leave_epoch

    def request_due_ms(self) -> int | None:
        """When the next heartbeat or lookup may go out (None: nothing to send now or later
        without an event). Drivers that model time abstractly (the explorer) jump to it."""
        return self._request_due_ms()

    def copy(self) -> Member:
        """An independent copy (the explorer branches states): containers mutated in place are
        copied, immutable values shared."""
        twin = copy.copy(self)
        twin.topic_names = dict(self.topic_names)
        if self._inflight is not None:
            twin._inflight = dataclasses.replace(self._inflight)
        return twin

    def snapshot(self) -> tuple:
        """Canonical hashable state (the explorer deduplicates states with it)."""

        def k(a: Partitions | None) -> tuple | None:
            return None if a is None else tuple(sorted((t, tuple(sorted(p))) for t, p in a.items()))

        c = self._callback
        f = self._inflight
        return (
            self.member_id,
            self.state.value,
            self.member_epoch,
            k(self.owned),
            k(self.target),
            None if c is None else (c.kind.value, k(c.partitions), c.deadline_ms is not None),
            self._running is not None,
            k(self._lost),
            None if f is None else (f.member_epoch, f.stale),
            self._coordinator_known,
            self._lookup is not None,
            self._heartbeat_now,
            self._need_full,
            k(self._sent_owned),
            self._sent_subscription,
            self._sent_assignor,
            self.subscription,
            self.server_assignor,
            self._leave_requested,
            self._leave_epoch,
            self._failures,
        )

    # ------------------------------------------------------------------ transitions

    def _to(self, state: MemberState) -> None:
        if state is self.state:
            return
        if self.state not in LEGAL_PREVIOUS[state]:
            raise LocalProtocolError(f"illegal transition {self.state.name} -> {state.name}")
        self.state = state

    def _settle(self) -> None:
        """RECONCILING / ACKNOWLEDGING / STABLE from the partitions, for a member in the group
        (a joining member enters the group through this when its join is answered)."""
        if self.state not in IN_GROUP and not (self.state is S.JOINING and self.member_epoch > 0):
            return
        if self._callback is not None or self.target != self.owned:
            self._to(S.RECONCILING)
        elif self.owned != self._sent_owned:
            self._to(S.ACKNOWLEDGING)
        else:
            self._to(S.STABLE)

    # ------------------------------------------------------------------ user events

    def join(self, now_ms: int) -> list[Action]:
        """Start (UNSUBSCRIBED -> JOINING); the join heartbeat goes out once the coordinator
        is known."""
        if self.state is not S.UNSUBSCRIBED:
            raise LocalProtocolError(f"join() in state {self.state.name}")
        self._to(S.JOINING)
        self._reset_membership()
        self._leave_requested = False
        return self._drain(now_ms)

    def leave(self, now_ms: int, *, leave_group: bool | None = None) -> list[Action]:
        """Leave: on_revoked for every owned partition, then the leave heartbeat with epoch -2
        for a static member (its place is kept for a restart within the session timeout)
        unless ``leave_group`` is True, else -1. Calling it again changes nothing."""
        if self.state in (S.UNSUBSCRIBED, S.FATAL):
            return [Left()]
        if self.state in (S.PREPARE_LEAVING, S.LEAVING) or self._leave_requested:
            return self._drain(now_ms)
        static = self.instance_id is not None
        self._leave_epoch = -2 if static and not leave_group else -1
        self._leave_requested = True
        if self.state is S.FENCED:
            return self._drain(now_ms)  # when on_lost returns: UNSUBSCRIBED
        if self.state is S.JOINING and not self._ever_sent:
            self._to(S.UNSUBSCRIBED)
            return [Left()]
        self._to(S.PREPARE_LEAVING)
        return self._drain(now_ms)

    def update_subscription(self, subscription: Subscription, now_ms: int) -> list[Action]:
        """A new subscription; a member in the group sends it at once, a joining one as soon as
        its join is answered (the join carries the subscription it was sent with)."""
        if self.state in (S.PREPARE_LEAVING, S.LEAVING, S.FATAL):
            raise LocalProtocolError(f"update_subscription() in state {self.state.name}")
        self.subscription = subscription
        if self.state in IN_GROUP:
            self._heartbeat_now = True
        return self._drain(now_ms)

    def update_server_assignor(self, name: str | None, now_ms: int) -> list[Action]:
        """The server assignor this member asks for (None: keep the one sent before)."""
        if self.state in (S.PREPARE_LEAVING, S.LEAVING, S.FATAL):
            raise LocalProtocolError(f"update_server_assignor() in state {self.state.name}")
        self.server_assignor = name
        if self.state in IN_GROUP:
            self._heartbeat_now = True
        return self._drain(now_ms)

    # ------------------------------------------------------------------ IO events

    def tick(self, now_ms: int) -> list[Action]:
        """Time passed: whatever is due (heartbeat, timeout, rebalance deadline) happens."""
        return self._drain(now_ms)

    def coordinator_found(self, seq: int, now_ms: int) -> list[Action]:
        if self._lookup == seq:
            self._lookup = None
            self._coordinator_known = True
        return self._drain(now_ms)

    def coordinator_unknown(self, now_ms: int) -> list[Action]:
        """Another request (an offset commit) was answered NOT_COORDINATOR or
        COORDINATOR_NOT_AVAILABLE, or could not reach the coordinator: look it up again (unless
        a lookup is under way) and heartbeat to the one found at once, as Kafka's consumer
        marks its coordinator unknown. A heartbeat in flight is answered as usual."""
        if self._coordinator_known and self._inflight is None:
            self._coordinator_known = False
        if self.state in IN_GROUP:
            self._heartbeat_now = True
        return self._drain(now_ms)

    def coordinator_lookup_failed(self, seq: int, now_ms: int) -> list[Action]:
        if self._lookup == seq:
            self._lookup = None
            self._back_off(now_ms)
        return self._drain(now_ms)

    def heartbeat_response(
        self, seq: int, response: HeartbeatResponse, now_ms: int
    ) -> list[Action]:
        inflight = self._inflight
        if inflight is None or inflight.seq != seq:
            return self._drain(now_ms)  # timed out already: a late answer is ignored
        self._inflight = None
        if inflight.stale:
            return self._drain(now_ms)
        if response.error_code != ErrorCode.NONE:
            return self._on_error(inflight, response.error_code, response.error_message, now_ms)
        self._failures = 0
        self._backoff_until_ms = 0
        if response.heartbeat_interval_ms > 0:
            self.heartbeat_interval_ms = response.heartbeat_interval_ms
        if inflight.member_epoch < 0:
            return self._left(now_ms)  # the leave heartbeat was answered
        if self.state is S.LEAVING:
            return self._drain(now_ms)  # sent before leave(): the leave heartbeat is next
        if response.member_id:
            self.member_id = response.member_id
        if inflight.member_epoch == 0 and self.state is S.PREPARE_LEAVING:
            return self._drain(now_ms)  # a join answered after leave(): the leave is next
        self.member_epoch = response.member_epoch
        self.topic_names.update(response.topic_names)
        if response.assigned is not None:
            self.target = partitions_of(response.assigned.items())
            self.pending = partitions_of((response.pending or {}).items())
            self._target_sent_ms = inflight.sent_ms
        elif self.state is S.JOINING:
            self.target = {}  # a join is always answered with an assignment; be safe
        self._settle()
        return self._drain(now_ms)

    def heartbeat_failed(self, seq: int, now_ms: int) -> list[Action]:
        """The heartbeat got no answer (transport failure, cancelled, deadline exceeded)."""
        inflight = self._inflight
        if inflight is None or inflight.seq != seq:
            return self._drain(now_ms)
        self._inflight = None
        return self._transport_failure(inflight, now_ms)

    def push(
        self,
        now_ms: int,
        *,
        target: Partitions | None = None,
        released: Partitions | None = None,
        assignment_due: bool = False,
    ) -> list[Action]:
        """The coordinator pushed news of this member (its ``target`` assignment, partitions
        ``released`` for it, ``assignment_due``: the group epoch is ahead of the assignment
        epoch): heartbeat now if there is something to do — the target differs from what the
        member owns, a partition was released for it, or a new target assignment is due (a
        heartbeat computes it). A push without a target always asks for a heartbeat. A push
        never changes owned partitions: a lost, late or repeated push is harmless."""
        if self.state in IN_GROUP and (
            target is None
            or released
            or assignment_due
            or partitions_of(target.items()) != self.owned
        ):
            self._heartbeat_now = True
        return self._drain(now_ms)

    def callback_done(self, token: int, now_ms: int) -> list[Action]:
        """The callback invoked with ``token`` returned (or raised: the same for the protocol)."""
        if self._running != token:
            raise LocalProtocolError(f"callback_done({token}) but {self._running} is running")
        self._running = None
        actions: list[Action] = []
        c = self._callback
        if c is not None and c.token == token:
            self._callback = None
            if c.kind is CallbackKind.REVOKED:
                self.owned = minus(self.owned, c.partitions)
            elif c.kind is CallbackKind.LOST:
                actions += self._after_lost()
            self._settle()
        return actions + self._drain(now_ms)

    # ------------------------------------------------------------------ deadlines

    def next_deadline_ms(self) -> int | None:
        """When :meth:`tick` must be called next (None: only an event can change anything)."""
        deadlines = []
        if self._inflight is not None:
            deadlines.append(self._inflight.sent_ms + self.request_timeout_ms)
        if self._lookup is not None:
            deadlines.append(self._lookup_sent_ms + self.request_timeout_ms)
        c = self._callback
        if c is not None and c.deadline_ms is not None and self.state is S.RECONCILING:
            deadlines.append(c.deadline_ms)
        due = self._request_due_ms()
        if due is not None:
            deadlines.append(due)
        return min(deadlines) if deadlines else None

    def _wants_heartbeat(self) -> bool:
        return (
            self.state in IN_GROUP
            or self.state in (S.JOINING, S.LEAVING)
            or (self.state is S.PREPARE_LEAVING and self.member_epoch > 0)
        )

    def _request_due_ms(self) -> int | None:
        """When the next FindCoordinator or heartbeat may go out (None: nothing to send)."""
        if not self._wants_heartbeat():
            return None
        if not self._coordinator_known:
            return None if self._lookup is not None else self._backoff_until_ms
        if self._inflight is not None:
            return None
        urgent = (
            self.state in (S.JOINING, S.LEAVING)
            or self._heartbeat_now
            or (
                self.state in IN_GROUP
                and (self.owned != self._sent_owned or self.subscription != self._sent_subscription)
            )
        )
        due = self._backoff_until_ms
        if urgent or self._last_sent_ms is None:
            return due
        return max(due, self._last_sent_ms + self.heartbeat_interval_ms)

    # ------------------------------------------------------------------ internals

    def _reset_membership(self) -> None:
        self.member_epoch = 0
        self.owned = {}
        self.target = None
        self.pending = {}
        self._callback = None
        self._forget_sent()
        self._heartbeat_now = False
        self._last_sent_ms = None

    def _forget_sent(self) -> None:
        """After a failure the next heartbeat is full."""
        self._need_full = True
        self._sent_owned = None
        self._sent_subscription = None
        self._sent_assignor = None

    def _back_off(self, now_ms: int) -> None:
        self._failures += 1
        delay = self.retry_backoff_ms * 2 ** min(self._failures - 1, 20)
        self._backoff_until_ms = now_ms + min(delay, self.retry_backoff_max_ms)

    def _on_error(
        self, inflight: _Inflight, code: int, message: str | None, now_ms: int
    ) -> list[Action]:
        self._forget_sent()
        if inflight.member_epoch < 0:
            return self._left(now_ms)  # the leave is sent once; any answer ends the membership
        action = classify_error(code, inflight.member_epoch)
        if self.state is S.LEAVING and action in (ErrorAction.FENCE, ErrorAction.FATAL):
            return self._left(now_ms)  # out of the group already: no leave heartbeat needed
        if action is ErrorAction.FENCE:
            if self.state is S.JOINING:
                self._back_off(now_ms)  # a join refused this way: do not spin
            else:
                self._fence()
            return self._drain(now_ms)
        if action is ErrorAction.FATAL:
            failure = self._fail(code, message or error_name(code))
            return [failure, *self._drain(now_ms)]
        if action is ErrorAction.FIND_COORDINATOR:
            self._coordinator_known = False
        self._back_off(now_ms)
        return self._drain(now_ms)

    def _transport_failure(self, inflight: _Inflight, now_ms: int) -> list[Action]:
        self._forget_sent()
        if inflight.member_epoch < 0 and not inflight.stale:
            return self._left(now_ms)
        self._coordinator_known = False
        self._back_off(now_ms)
        return self._drain(now_ms)

    def _fence(self) -> None:
        """Drop every partition now. Each owned partition ends with exactly one callback: those
        whose on_revoked is running end with it, the others get on_lost (after it)."""
        lost = minus(self.owned, self.revoking)
        self._to(S.FENCED)
        self._reset_membership()
        self._failures = 0
        self._backoff_until_ms = 0
        if self._inflight is not None:
            self._inflight.stale = True
        self._lost = union(self._lost or {}, lost)

    def _after_lost(self) -> list[Action]:
        if self.state is S.FENCED:
            if self._leave_requested:
                return self._left_now()
            self._to(S.JOINING)
            self._reset_membership()
        return []

    def _fail(self, code: int, message: str) -> MemberFailed:
        self.failure = MemberFailed(error_code=int(code), error_message=message)
        lost = minus(self.owned, self.revoking)
        self._to(S.FATAL)
        if self._inflight is not None:
            self._inflight.stale = True
        self._reset_membership()
        self._lost = union(self._lost or {}, lost) or None
        return self.failure

    def _left_now(self) -> list[Action]:
        self._to(S.UNSUBSCRIBED)
        self._reset_membership()
        return [Left()]

    def _left(self, now_ms: int) -> list[Action]:
        if self.state is not S.LEAVING:
            return self._drain(now_ms)  # a leave answered after fencing: nothing to do
        return self._left_now() + self._drain(now_ms)

    def _drain(self, now_ms: int) -> list[Action]:
        actions: list[Action] = []
        inflight = self._inflight
        if inflight is not None and now_ms >= inflight.sent_ms + self.request_timeout_ms:
            self._inflight = None  # no answer in time: a transport failure
            return self._transport_failure(inflight, now_ms)
        if self._lookup is not None and now_ms >= self._lookup_sent_ms + self.request_timeout_ms:
            self._lookup = None
            self._back_off(now_ms)
        c = self._callback
        if (
            c is not None
            and c.deadline_ms is not None
            and now_ms >= c.deadline_ms
            and self.state is S.RECONCILING
        ):
            self._fence()  # on_revoked outlived the rebalance timeout: the partitions are gone
        actions += self._next_callback(now_ms)
        if self.state is S.PREPARE_LEAVING and self._running is None and not self.owned:
            self._to(S.LEAVING)
        actions += self._next_request(now_ms)
        return actions

    def _next_callback(self, now_ms: int) -> list[Action]:
        if self._running is not None:
            return []
        if self._lost is not None:
            lost, self._lost = self._lost, None
            if lost:
                return [self._invoke(CallbackKind.LOST, lost, None)]
            return self._after_lost()
        if self.state is S.PREPARE_LEAVING:
            if self.owned:
                return [self._invoke(CallbackKind.REVOKED, dict(self.owned), None)]
            return []
        if self.state not in IN_GROUP or self.target is None:
            return []
        revoked = minus(self.owned, self.target)
        if revoked:
            # The coordinator's rebalance timer started when it processed the request that
            # asked for this revocation: count from when that request was sent.
            deadline = self._target_sent_ms + self.rebalance_timeout_ms
            return [self._invoke(CallbackKind.REVOKED, revoked, deadline)]
        added = minus(self.target, self.owned)
        if added:
            self.owned = union(self.owned, added)
            return [self._invoke(CallbackKind.ASSIGNED, added, None)]
        return []

    def _invoke(
        self, kind: CallbackKind, partitions: dict[TopicId, frozenset[int]], deadline: int | None
    ) -> InvokeCallback:
        self._token += 1
        self._callback = _Callback(kind, partitions, self._token, deadline)
        self._running = self._token
        self._settle()
        return InvokeCallback(kind=kind, partitions=dict(partitions), token=self._token)

    def _next_request(self, now_ms: int) -> list[Action]:
        due = self._request_due_ms()
        if due is None or now_ms < due:
            return []
        self._seq += 1
        if not self._coordinator_known:
            self._lookup = self._seq
            self._lookup_sent_ms = now_ms
            return [FindCoordinator(seq=self._seq)]
        request = self._build_request()
        self._inflight = _Inflight(self._seq, now_ms, request.member_epoch)
        self._ever_sent = True
        self._last_sent_ms = now_ms
        self._heartbeat_now = False
        if request.member_epoch >= 0:
            self._need_full = False
            if request.topic_partitions is not None:
                self._sent_owned = dict(request.topic_partitions)
            if request.subscribed_topic_names is not None:
                self._sent_subscription = self.subscription
            if request.subscribed_topic_regex:
                self._regex_sent = True
            if request.server_assignor is not None:
                self._sent_assignor = request.server_assignor
            self._settle()
        return [SendHeartbeat(seq=self._seq, request=request)]

    def _subscription_fields(self) -> tuple[tuple[str, ...], str | None]:
        """(names, regex) as sent: names always (empty for a pattern-only subscription, so an
        earlier list is cleared); the regex when there is one, "" to clear an earlier one."""
        sub = self.subscription
        names = sub.topics if sub.topics is not None else ()
        regex = sub.pattern if sub.pattern is not None else ("" if self._regex_sent else None)
        return names, regex

    def _build_request(self) -> HeartbeatRequest:
        if self.state is S.LEAVING:
            return HeartbeatRequest(
                group_id=self.group_id,
                member_id=self.member_id,
                member_epoch=self._leave_epoch,
                instance_id=self.instance_id,
            )
        names, regex = self._subscription_fields()
        if self.state is S.JOINING:
            return HeartbeatRequest(
                group_id=self.group_id,
                member_id=self.member_id,
                member_epoch=0,
                instance_id=self.instance_id,
                rack_id=self.rack_id,
                rebalance_timeout_ms=self.rebalance_timeout_ms,
                subscribed_topic_names=names,
                subscribed_topic_regex=regex,
                server_assignor=self.server_assignor,
                topic_partitions={},
            )
        full = self._need_full
        send_subscription = full or self.subscription != self._sent_subscription
        send_assignor = self.server_assignor is not None and (
            full or self.server_assignor != self._sent_assignor
        )
        return HeartbeatRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=self.member_epoch,
            instance_id=self.instance_id,
            rack_id=self.rack_id if full else None,
            rebalance_timeout_ms=self.rebalance_timeout_ms if full else -1,
            subscribed_topic_names=names if send_subscription else None,
            subscribed_topic_regex=regex if send_subscription else None,
            server_assignor=self.server_assignor if send_assignor else None,
            topic_partitions=dict(self.owned) if full or self.owned != self._sent_owned else None,
        )
