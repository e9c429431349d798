"""A simulated KIP-848 consumer: the very state machine users run (``kip848.client.member``),
driven on virtual time.

Everything a member decides — what each heartbeat carries (full after any failure, owned
partitions by topic id, only what changed), when it is due, back-off, revoke-before-assign
reconciliation and acknowledgement, fencing and rejoin with the same member id, the
rebalance-timeout deadline of a revocation, leaving with -1 / -2 — is the SDK's
:class:`~kip848.client.member.Member`. This module only adapts it to the simulator's interface:

* time: ``clock()`` gives the simulation's virtual time; the explorer, which abstracts time
  away, uses ``eager`` mode, in which a member's clock jumps to whatever it waits for (its next
  heartbeat, its request timeout) when the explorer picks that action;
* requests and answers: the member's ``SendHeartbeat`` waits in ``outbox`` until the driver
  sends it (``build_request`` / ``sent(corr, …)``); answers and timeouts are fed back by
  correlation id; FindCoordinator is answered at once (one coordinator);
* callbacks: ``on_assigned`` and ``on_lost`` return at once; ``on_revoked`` is the driver's to
  time (the ``"revoke"`` action; ``finish_revocation`` when it returns), except on a graceful
  shutdown, where the process revokes everything at once before leaving;
* process faults: ``crash`` drops the member (no callbacks, no leave); ``start`` begins a new
  incarnation (a new member id, as Kafka 4.x clients generate them).

Actions returned to the driver are plain strings: ``"send"`` (a heartbeat waits in the outbox),
``"revoke"`` (time the revocation callback; ``revoke_token`` identifies it), ``"fatal"`` (the
process stops: FENCED_INSTANCE_ID). Any other fatal error is an answer a correct member can never
get, so :class:`ClientModelError` fails the simulation loudly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from coordinator.core.commands import ConsumerGroupHeartbeat, ConsumerGroupHeartbeatResponse
from coordinator.core.errors import ErrorCode
from coordinator.core.push import MemberView
from kip848.client.member import (
    Action,
    CallbackKind,
    FindCoordinator,
    HeartbeatRequest,
    HeartbeatResponse,
    InvokeCallback,
    Member,
    MemberFailed,
    MemberState,
    SendHeartbeat,
    Subscription,
)

Owned = dict[str, frozenset[int]]

DOWN = "down"  # process not running (crashed, left, fatal error)
JOINING = "joining"  # epoch 0: (re)joining
MEMBER = "member"  # has a member epoch
LEAVING = "leaving"  # revoking everything / sending the leave heartbeat

# Offset commits: a member commits the progress of the partitions it owns with its member epoch
# on every heartbeat tick and before a revocation completes (Kafka's auto-commit); it resumes a
# newly owned partition from the committed offset. Invariant I6 checks that the coordinator
# accepts commits only from the partition's current owner and that offsets never go back.
COMMIT_OFFSETS_SUPPORTED = True

_PHASE = {
    MemberState.UNSUBSCRIBED: DOWN,
    MemberState.FATAL: DOWN,
    MemberState.JOINING: JOINING,
    MemberState.FENCED: JOINING,
    MemberState.RECONCILING: MEMBER,
    MemberState.ACKNOWLEDGING: MEMBER,
    MemberState.STABLE: MEMBER,
    MemberState.PREPARE_LEAVING: LEAVING,
    MemberState.LEAVING: LEAVING,
}


def norm(a: Mapping[str, frozenset[int]] | None) -> Owned:
    return {} if a is None else {t: frozenset(ps) for t, ps in a.items() if ps}


def minus(a: Mapping[str, frozenset[int]], b: Mapping[str, frozenset[int]]) -> Owned:
    out: Owned = {}
    for t, ps in a.items():
        rest = ps - b.get(t, frozenset())
        if rest:
            out[t] = rest
    return out


def union(a: Mapping[str, frozenset[int]], b: Mapping[str, frozenset[int]]) -> Owned:
    out = dict(a)
    for t, ps in b.items():
        out[t] = out.get(t, frozenset()) | ps
    return {t: ps for t, ps in out.items() if ps}


def fmt(a: Mapping[str, frozenset[int]] | None, names: Mapping[str, str] | None = None) -> str:
    if a is None:
        return "-"
    parts = []
    for t in sorted(a):
        label = (names or {}).get(t, t[-4:])
        parts.append(f"{label}:{','.join(str(p) for p in sorted(a[t]))}")
    return "{" + " ".join(parts) + "}"


class ClientModelError(AssertionError):
    """The simulated client got an answer a correct client can never get (e.g. INVALID_REQUEST):
    either the client model or the coordinator is wrong. Fails loudly."""


def _request(req: HeartbeatRequest) -> ConsumerGroupHeartbeat:
    return ConsumerGroupHeartbeat(
        group_id=req.group_id,
        member_id=req.member_id,
        member_epoch=req.member_epoch,
        instance_id=req.instance_id,
        rack_id=req.rack_id,
        rebalance_timeout_ms=req.rebalance_timeout_ms,
        subscribed_topic_names=req.subscribed_topic_names,
        subscribed_topic_regex=req.subscribed_topic_regex,
        server_assignor=req.server_assignor,
        topic_partitions=None if req.topic_partitions is None else dict(req.topic_partitions),
    )


def _response(resp: ConsumerGroupHeartbeatResponse) -> HeartbeatResponse:
    a = resp.assignment
    return HeartbeatResponse(
        member_id=resp.member_id,
        member_epoch=resp.member_epoch,
        heartbeat_interval_ms=resp.heartbeat_interval_ms,
        assigned=None if a is None else a.assigned,
        pending=None if a is None else a.pending,
    )


@dataclass(slots=True)
class SimClient:
    index: int
    topics: tuple[str, ...]
    instance_id: str | None = None
    rebalance_timeout_ms: int = 20_000
    request_timeout_ms: int = 15_000
    retry_backoff_ms: int = 1_000
    group_id: str = "grp"
    incarnation: int = 0
    clock: Callable[[], int] | None = None  # virtual time; None: eager (the explorer)
    member: Member | None = None
    outbox: SendHeartbeat | None = None  # a heartbeat the member wants sent
    corr: int | None = None  # correlation id of the last request sent
    inflight_seq: int | None = None  # the member's sequence number for it
    revoke_token: int = 0  # the running on_revoked callback
    server_assignor: str | None = None
    progress: dict[tuple[str, int], int] = field(
        default_factory=dict
    )  # (topic id, p) -> next offset
    _member_id: str = ""
    _now: int = 0  # eager mode: this client's own clock

    # ------------------------------------------------------------------ views

    @property
    def inflight(self) -> int | None:
        """Correlation id of the request in flight — as long as the member still waits for it
        (it may have timed it out on its own clock)."""
        m = self.member
        if m is None or self.inflight_seq is None or m.inflight_seq != self.inflight_seq:
            return None
        return self.corr

    @property
    def phase(self) -> str:
        return DOWN if self.member is None else _PHASE[self.member.state]

    @property
    def member_id(self) -> str:
        return self.member.member_id if self.member is not None else self._member_id

    @property
    def epoch(self) -> int:
        return self.member.member_epoch if self.member is not None else 0

    @property
    def owned(self) -> Owned:
        return {} if self.member is None else self.member.owned

    @property
    def target(self) -> Owned | None:
        return None if self.member is None else self.member.target

    @property
    def revoking(self) -> Owned:
        return {} if self.member is None else dict(self.member.revoking)

    @property
    def heartbeat_interval_ms(self) -> int:
        return 5_000 if self.member is None else self.member.heartbeat_interval_ms

    @property
    def leave_epoch(self) -> int:
        return -1 if self.member is None else self.member.leave_epoch

    def now(self) -> int:
        return self.clock() if self.clock is not None else self._now

    def __copy__(self) -> SimClient:
        twin = SimClient(
            index=self.index,
            topics=self.topics,
            instance_id=self.instance_id,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            request_timeout_ms=self.request_timeout_ms,
            retry_backoff_ms=self.retry_backoff_ms,
            group_id=self.group_id,
            incarnation=self.incarnation,
            clock=self.clock,
            member=None if self.member is None else self.member.copy(),
            outbox=self.outbox,
            corr=self.corr,
            inflight_seq=self.inflight_seq,
            revoke_token=self.revoke_token,
            server_assignor=self.server_assignor,
            progress=dict(self.progress),
        )
        twin._member_id = self._member_id
        twin._now = self._now
        return twin

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """The process starts (first time, or after a crash/bounce): a new incarnation with a
        new member id (client-generated, as Kafka 4.x clients do)."""
        self.incarnation += 1
        self._member_id = f"m{self.index}.{self.incarnation}"
        self.member = Member(
            group_id=self.group_id,
            member_id=self._member_id,
            subscription=Subscription(topics=self.topics),
            instance_id=self.instance_id,
            server_assignor=self.server_assignor,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            request_timeout_ms=self.request_timeout_ms,
            retry_backoff_ms=self.retry_backoff_ms,
            retry_backoff_max_ms=self.retry_backoff_ms,
        )
        self.outbox = None
        self.corr = self.inflight_seq = None
        self.progress = {}
        self._absorb(self.member.join(self.now()))

    def crash(self) -> None:
        """The process dies: it owns nothing any more and sends nothing."""
        self._stop()

    def _stop(self) -> None:
        if self.member is not None:
            self._member_id = self.member.member_id
        self.member = None
        self.outbox = None
        self.corr = self.inflight_seq = None
        self.progress = {}

    def begin_leave(self, static_bounce: bool) -> None:
        """Graceful shutdown: the process revokes every partition at once (its callbacks run on
        close), then the leave heartbeat (-2 for a static member that will come back, else -1)
        waits in the outbox."""
        m = self.member
        if m is None:
            return
        self._absorb(m.leave(self.now(), leave_group=not static_bounce), closing=True)

    def set_assignor(self, name: str) -> list[str]:
        """The member asks for another server assignor: sent at once (``"send"``)."""
        self.server_assignor = name
        if self.member is None or self.member.state in (
            MemberState.PREPARE_LEAVING,
            MemberState.LEAVING,
            MemberState.FATAL,
        ):
            return []
        return self._absorb(self.member.update_server_assignor(name, self.now()))

    # ------------------------------------------------------------------ requests

    def _due(self) -> int | None:
        """Eager mode: the time this client waits for (its next heartbeat)."""
        m = self.member
        return None if m is None else m.request_due_ms()

    @property
    def can_send(self) -> bool:
        """A heartbeat is ready to go: now (virtual time), or — eager mode — once this
        client's clock jumps to when it is due (``build_request`` makes the jump)."""
        m = self.member
        if m is None:
            return False
        if self.outbox is None:
            if self.clock is None:
                return self.inflight is None and self._due() is not None
            self._absorb(m.tick(self.now()))  # timeouts and deadlines first: it may be due now
        return self.outbox is not None and self.inflight is None

    def next_wakeup_ms(self) -> int | None:
        """When the member next needs time to pass (its next heartbeat, back-off, deadline)."""
        return None if self.member is None else self.member.next_deadline_ms()

    def build_request(self) -> ConsumerGroupHeartbeat:
        m = self.member
        if self.outbox is None and m is not None and self.clock is None:
            due = self._due()
            if due is not None:
                self._now = max(self._now, due)
            self._absorb(m.tick(self._now))
        assert self.outbox is not None, "build_request() without can_send"
        return _request(self.outbox.request)

    def sent(self, corr: int, req: ConsumerGroupHeartbeat) -> None:
        assert self.outbox is not None
        self.corr = corr
        self.inflight_seq = self.outbox.seq
        self.outbox = None

    # ------------------------------------------------------------------ answers

    def on_timeout(self) -> list[str]:
        """No answer within the request timeout (lost request or response)."""
        m, seq = self.member, self.inflight_seq
        self.corr = self.inflight_seq = None
        if m is None or seq is None:
            return []
        if self.clock is None:
            self._now = max(self._now, self._timeout_at(m))
        return self._absorb(m.heartbeat_failed(seq, self.now()))

    def _timeout_at(self, m: Member) -> int:
        deadline = m.next_deadline_ms()
        return self._now if deadline is None else deadline

    def on_response(self, resp: ConsumerGroupHeartbeatResponse) -> list[str]:
        return self._answer(_response(resp))

    def on_error(self, code: int) -> list[str]:
        return self._answer(HeartbeatResponse(error_code=int(code), error_message="simulated"))

    def _answer(self, answer: HeartbeatResponse) -> list[str]:
        m, seq = self.member, self.inflight_seq
        self.corr = self.inflight_seq = None
        if m is None or seq is None:
            return []
        return self._absorb(m.heartbeat_response(seq, answer, self.now()))

    def push(self, view: MemberView) -> list[str]:
        """A push message (ConsumerGroupWatch) arrived: the member heartbeats at once if it
        has something to do."""
        m = self.member
        if m is None:
            return []
        return self._absorb(
            m.push(
                self.now(),
                target=view.target,
                released=view.released,
                assignment_due=view.assignment_due,
            )
        )

    def finish_revocation(self, token: int) -> list[str]:
        """The revocation callback with ``token`` returned: the member acknowledges (and
        reconciles again if its target moved on). A stale token (the member was fenced or
        restarted meanwhile) changes nothing."""
        m = self.member
        if m is None or token != self.revoke_token or not m.callback_running:
            return []
        revoked = dict(m.revoking)
        actions = self._absorb(m.callback_done(token, self.now()))
        for t, ps in revoked.items():  # a partition given up is re-read from its commit
            for p in ps:
                self.progress.pop((t, p), None)
        return actions

    # ------------------------------------------------------------------ the member's actions

    def _absorb(self, actions: list[Action], *, closing: bool = False) -> list[str]:
        out: list[str] = []
        todo = list(actions)
        while todo:
            a = todo.pop(0)
            m = self.member
            if m is None:
                break
            now = self.now()
            if isinstance(a, SendHeartbeat):
                self.outbox = a
                if "send" not in out:
                    out.append("send")
            elif isinstance(a, FindCoordinator):
                todo += m.coordinator_found(a.seq, now)  # one coordinator, always known
            elif isinstance(a, InvokeCallback):
                if a.kind is CallbackKind.REVOKED and not closing:
                    self.revoke_token = a.token
                    out.append("revoke")
                    continue
                for t, ps in a.partitions.items():
                    if a.kind is not CallbackKind.ASSIGNED:
                        for p in ps:
                            self.progress.pop((t, p), None)
                todo += m.callback_done(a.token, now)  # returns at once
            elif isinstance(a, MemberFailed):
                if a.error_code != ErrorCode.FENCED_INSTANCE_ID:
                    raise ClientModelError(
                        f"client {m.member_id}: unexpected error "
                        f"{ErrorCode(a.error_code).name}: {a.error_message}"
                    )
                out.append("fatal")
                self._stop()
            else:  # Left: the membership ended
                self._stop()
        if self.progress:
            # A partition the member no longer owns (lost with a fencing, even in the middle of
            # a revocation) is read again from its committed offset when it comes back, as a
            # real consumer does on assignment.
            owned = self.owned
            self.progress = {
                k: v for k, v in self.progress.items() if k[1] in owned.get(k[0], frozenset())
            }
        return out

    # ------------------------------------------------------------------ views

    def key(self) -> tuple:
        """Canonical, hashable state (for the explorer)."""
        return (
            self.index,
            self.incarnation,
            None if self.member is None else self.member.snapshot(),
            self.outbox is not None,
            self.inflight is not None,
            self.server_assignor,
        )

    def describe(self, names: Mapping[str, str] | None = None) -> str:
        m = self.member
        state = "down" if m is None else m.state.value
        revoking = self.revoking
        extra = f" revoking={fmt(revoking, names)}" if revoking else ""
        return (
            f"c{self.index} {self.member_id or '-'} {state} epoch={self.epoch} "
            f"owned={fmt(self.owned, names)} target={fmt(self.target, names)}{extra}"
            f"{' inflight' if self.inflight is not None else ''}"
            f"{' static=' + self.instance_id if self.instance_id else ''}"
        )
