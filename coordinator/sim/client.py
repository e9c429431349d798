"""A simulated KIP-848 consumer: the client half of ConsumerGroupHeartbeat as a plain state machine.

It behaves like Kafka's Java ``ConsumerMembershipManager`` / ``HeartbeatRequestManager``:

* one heartbeat in flight at a time; a request that fails (error, timeout) makes the next one
  *full* (every field sent again, including the owned partitions);
* owned partitions are what the client *believes* it owns. On a new assigned set it revokes first
  (the partitions stay owned until its revocation callback finishes), then adds only partitions it
  has received, then acknowledges by reporting its owned partitions in the next heartbeat;
* FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID: drop every partition at once (``onPartitionsLost``)
  and rejoin with epoch 0 and the *same* member id; UNRELEASED_INSTANCE_ID and transient errors:
  retry later; FENCED_INSTANCE_ID: fatal, the process stops;
* a static member that bounces releases its partitions and leaves with epoch -2, then comes back
  with a new member id and the same instance id.

No clock and no randomness here: the simulator (or the explorer) decides *when* things happen and
calls the methods below. A method returns what the client wants done next as plain strings
(``"send"``, ``"revoke"``), so the drivers can schedule it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from coordinator.core.commands import ConsumerGroupHeartbeat, ConsumerGroupHeartbeatResponse
from coordinator.core.errors import ErrorCode

Owned = dict[str, frozenset[int]]

DOWN = "down"  # process not running (crashed, bounced, fatal error)
JOINING = "joining"  # epoch 0: (re)joining
MEMBER = "member"  # has a member epoch
LEAVING = "leaving"  # sent (or about to send) a leave heartbeat

# Offset commits: a member commits the progress of the partitions it owns with its member epoch
# on every heartbeat tick and before a revocation completes (Kafka's auto-commit); it resumes a
# newly owned partition from the committed offset. Invariant I6 checks that the coordinator
# accepts commits only from the partition's current owner and that offsets never go back.
COMMIT_OFFSETS_SUPPORTED = True


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


@dataclass(slots=True)
class SimClient:
    index: int
    topics: tuple[str, ...]
    instance_id: str | None = None
    rebalance_timeout_ms: int = 20_000
    group_id: str = "grp"
    incarnation: int = 0
    member_id: str = ""
    epoch: int = 0
    phase: str = DOWN
    owned: Owned = field(default_factory=dict)
    target: Owned | None = None  # latest assigned set received
    revoking: Owned = field(default_factory=dict)  # being revoked (still owned)
    revoke_token: int = 0
    inflight: int | None = None  # correlation id of the request in flight
    inflight_epoch: int = 0
    need_full: bool = True
    sent_owned: Owned | None = None  # owned partitions as last sent
    server_assignor: str | None = None
    assignor_dirty: bool = False
    leave_epoch: int = -1
    heartbeat_interval_ms: int = 5_000
    progress: dict[tuple[str, int], int] = field(
        default_factory=dict
    )  # (topic id, p) -> next offset

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """The process starts (first time, or after a crash/bounce): a new incarnation with a
        new member id (client-generated, as Kafka 4.x clients do)."""
        self.incarnation += 1
        self.member_id = f"m{self.index}.{self.incarnation}"
        self._reset(JOINING)

    def crash(self) -> None:
        """The process dies: it owns nothing any more and sends nothing."""
        self._reset(DOWN)

    def begin_leave(self, static_bounce: bool) -> None:
        """Graceful shutdown: release every partition (revocation callbacks run on close), then
        send a leave heartbeat (-2 for a static member that will come back, else -1)."""
        self.owned = {}
        self.progress = {}
        self.revoking = {}
        self.revoke_token += 1
        self.target = None
        self.leave_epoch = -2 if (static_bounce and self.instance_id is not None) else -1
        self.phase = LEAVING
        self.inflight = None

    def _reset(self, phase: str) -> None:
        self.phase = phase
        self.epoch = 0
        self.owned = {}
        self.progress = {}
        self.target = None
        self.revoking = {}
        self.revoke_token += 1
        self.inflight = None
        self.need_full = True
        self.sent_owned = None

    def fence(self) -> None:
        """FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID: lose everything, rejoin with epoch 0, same id."""
        self._reset(JOINING)

    def set_assignor(self, name: str) -> None:
        self.server_assignor = name
        self.assignor_dirty = True

    # ------------------------------------------------------------------ requests

    @property
    def can_send(self) -> bool:
        return self.phase in (JOINING, MEMBER, LEAVING) and self.inflight is None

    def build_request(self) -> ConsumerGroupHeartbeat:
        if self.phase == LEAVING:
            return ConsumerGroupHeartbeat(
                group_id=self.group_id,
                member_id=self.member_id,
                member_epoch=self.leave_epoch,
                instance_id=self.instance_id,
            )
        if self.phase == JOINING:
            return ConsumerGroupHeartbeat(
                group_id=self.group_id,
                member_id=self.member_id,
                member_epoch=0,
                instance_id=self.instance_id,
                rebalance_timeout_ms=self.rebalance_timeout_ms,
                subscribed_topic_names=self.topics,
                server_assignor=self.server_assignor,
                topic_partitions={},
            )
        full = self.need_full
        owned = dict(self.owned)
        send_owned = full or owned != self.sent_owned
        return ConsumerGroupHeartbeat(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=self.epoch,
            instance_id=self.instance_id,
            rebalance_timeout_ms=self.rebalance_timeout_ms if full else -1,
            subscribed_topic_names=self.topics if full else None,
            server_assignor=self.server_assignor if (full or self.assignor_dirty) else None,
            topic_partitions=owned if send_owned else None,
        )

    def sent(self, corr: int, req: ConsumerGroupHeartbeat) -> None:
        self.inflight = corr
        self.inflight_epoch = req.member_epoch
        if req.topic_partitions is not None:
            self.sent_owned = dict(req.topic_partitions)
        if req.server_assignor is not None:
            self.assignor_dirty = False
        self.need_full = False

    # ------------------------------------------------------------------ responses

    def on_timeout(self) -> None:
        """No response within the request timeout (lost request or response): the next request
        is full."""
        self.inflight = None
        self.need_full = True
        if self.phase == LEAVING:
            self.phase = DOWN  # Kafka's close() gives up after its timeout; the session expires

    def on_response(self, resp: ConsumerGroupHeartbeatResponse) -> list[str]:
        self.inflight = None
        if self.phase == LEAVING:
            self.phase = DOWN
            return []
        if self.phase not in (JOINING, MEMBER):
            return []
        if resp.member_id:
            self.member_id = resp.member_id
        self.epoch = resp.member_epoch
        self.phase = MEMBER
        self.heartbeat_interval_ms = resp.heartbeat_interval_ms or self.heartbeat_interval_ms
        if resp.assignment is not None:
            self.target = norm(resp.assignment.assigned)
        return self.reconcile()

    def on_error(self, code: int) -> list[str]:
        """Returns actions: "rejoin" (send soon), "retry" (send after a backoff), "fatal"."""
        self.inflight = None
        if self.phase == LEAVING:
            self.phase = DOWN
            return []
        code = ErrorCode(code)
        if code in (
            ErrorCode.FENCED_MEMBER_EPOCH,
            ErrorCode.UNKNOWN_MEMBER_ID,
            ErrorCode.GROUP_ID_NOT_FOUND,
        ):
            self.fence()
            return ["rejoin"]
        if code == ErrorCode.FENCED_INSTANCE_ID:
            self.crash()
            return ["fatal"]
        if code in (
            ErrorCode.UNRELEASED_INSTANCE_ID,
            ErrorCode.UNKNOWN_SERVER_ERROR,
            ErrorCode.COORDINATOR_NOT_AVAILABLE,
            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
            ErrorCode.NOT_COORDINATOR,
        ):
            self.need_full = True
            return ["retry"]
        raise ClientModelError(f"client {self.member_id}: unexpected error {code.name}")

    # ------------------------------------------------------------------ reconciliation

    def reconcile(self) -> list[str]:
        """Move owned toward the latest assigned set: revoke first, then add what was received.
        Returns ["revoke"] when a revocation starts (the driver finishes it later), ["send"] when
        owned changed and must be acknowledged."""
        if self.revoking or self.target is None or self.phase != MEMBER:
            return []
        revoked = minus(self.owned, self.target)
        if revoked:
            self.revoking = revoked
            self.revoke_token += 1
            return ["revoke"]
        added = minus(self.target, self.owned)
        if added:
            self.owned = union(self.owned, added)
            return ["send"]
        return []

    def finish_revocation(self, token: int) -> list[str]:
        """The revocation callback returned: stop owning the revoked partitions, take what was
        received meanwhile, acknowledge; then reconcile again if the target moved on."""
        if token != self.revoke_token or not self.revoking:
            return []
        self.owned = minus(self.owned, self.revoking)
        for (
            t,
            ps,
        ) in (
            self.revoking.items()
        ):  # a partition given up is re-read from its commit if it comes back
            for p in ps:
                self.progress.pop((t, p), None)
        self.revoking = {}
        actions = ["send"]
        if self.target is not None:
            if not minus(self.owned, self.target):
                added = minus(self.target, self.owned)
                self.owned = union(self.owned, added)
            else:
                actions += self.reconcile()
        return actions

    # ------------------------------------------------------------------ views

    def key(self) -> tuple:
        """Canonical, hashable state (for the explorer)."""

        def k(a: Owned | None) -> tuple | None:
            return (
                None if a is None else tuple(sorted((t, tuple(sorted(ps))) for t, ps in a.items()))
            )

        return (
            self.index,
            self.incarnation,
            self.member_id,
            self.epoch,
            self.phase,
            k(self.owned),
            k(self.target),
            k(self.revoking),
            self.inflight is not None,
            self.inflight_epoch,
            self.need_full,
            k(self.sent_owned),
            self.server_assignor,
            self.assignor_dirty,
            self.leave_epoch,
        )

    def describe(self, names: Mapping[str, str] | None = None) -> str:
        extra = f" revoking={fmt(self.revoking, names)}" if self.revoking else ""
        return (
            f"c{self.index} {self.member_id or '-'} {self.phase} epoch={self.epoch} "
            f"owned={fmt(self.owned, names)} target={fmt(self.target, names)}{extra}"
            f"{' inflight' if self.inflight is not None else ''}"
            f"{' static=' + self.instance_id if self.instance_id else ''}"
        )
