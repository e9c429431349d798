"""A simulated classic consumer (JoinGroup / SyncGroup / Heartbeat / LeaveGroup), talking to the
legacy bridge (:class:`legacy_bridge.classic_groups.ClassicGroups`).

Modelled on Kafka's Java ``ConsumerCoordinator`` / ``AbstractCoordinator``:

* JoinGroup: MEMBER_ID_REQUIRED -> rejoin at once with the given id (KIP-394); the response may
  wait at the join barrier (the simulator delivers the deferred completion later);
  REBALANCE_IN_PROGRESS -> rejoin; UNKNOWN_MEMBER_ID -> forget the member id, lose every
  partition, rejoin; ILLEGAL_GENERATION -> lose every partition, rejoin with the same id;
  FENCED_INSTANCE_ID -> the process stops. A JoinGroup may wait rebalance timeout + 5 s (Kafka's
  join timeout) before the client gives up and sends it again.
* SyncGroup: the leader of a pure classic group (it receives the member list) computes every
  assignment client-side (:func:`assign`), encoded with :mod:`legacy_bridge.protocol`; a classic
  member inside a consumer group gets no member list and sends an empty SyncGroup (the bridge
  answers with its server-side assignment).
* Heartbeat at the heartbeat interval; REBALANCE_IN_PROGRESS -> rejoin; ILLEGAL_GENERATION /
  UNKNOWN_MEMBER_ID -> reset and rejoin. The leader also rejoins when the topic metadata it
  assigned with changed (Kafka's metadata snapshot check).
* ``eager``: revoke everything (the callback takes time) before every JoinGroup, report no owned
  partitions. ``cooperative``: keep owned partitions across the JoinGroup and report them in the
  subscription (v3 ``owned_partitions``, ``generation_id``); after SyncGroup take the new
  partitions at once, revoke what the assignment dropped, then rejoin immediately if it revoked
  anything (KIP-429).
* Shutdown: a dynamic member revokes everything and sends LeaveGroup; a static member stops
  without a LeaveGroup (KIP-345) and comes back with the same instance id.

Owned partitions are kept by topic *id* (like the KIP-848 client, so the invariants compare the
two kinds), the wire uses topic *names*: the simulator passes a :class:`Meta` view of the cluster
metadata. No clock and no randomness here; methods return actions as plain strings
(``"send"``, ``"revoke"``, ``"rejoin"``, ``"retry"``, ``"fatal"``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from coordinator.core.errors import ErrorCode
from legacy_bridge import messages as m
from legacy_bridge.protocol import (
    CONSUMER_PROTOCOL_TYPE,
    AssignmentMessage,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

from .client import DOWN, JOINING, LEAVING, MEMBER, ClientModelError, Owned, fmt, minus, union

SYNCING = "syncing"  # SyncGroup to send / in flight
EAGER = "eager"
COOPERATIVE = "cooperative"
PROTOCOLS = (EAGER, COOPERATIVE)
RANGE = "range"
COOPERATIVE_STICKY = "cooperative-sticky"


@dataclass(frozen=True, slots=True)
class Meta:
    """The cluster metadata a client sees: live topics by name -> (topic id, partitions), and
    every topic id ever seen -> name (deleted topics included)."""

    by_name: Mapping[str, tuple[str, int]]
    name_of: Mapping[str, str]

    def ids(self, tps: Any) -> Owned:
        """Wire (name, partitions) list -> {topic id: partitions}; unknown topics and out-of-range
        partitions are dropped."""
        out: dict[str, set[int]] = {}
        for name, ps in tps:
            t = self.by_name.get(name)
            if t is None:
                continue
            for p in ps:
                if 0 <= p < t[1]:
                    out.setdefault(t[0], set()).add(p)
        return {t: frozenset(ps) for t, ps in out.items() if ps}

    def names(self, owned: Mapping[str, frozenset[int]]) -> tuple[tuple[str, tuple[int, ...]], ...]:
        out: dict[str, set[int]] = {}
        for t, ps in owned.items():
            name = self.name_of.get(t)
            if name is not None:
                out.setdefault(name, set()).update(ps)
        return tuple((n, tuple(sorted(out[n]))) for n in sorted(out) if out[n])

    def snapshot(self, topics: tuple[str, ...]) -> tuple:
        return tuple((n, self.by_name.get(n)) for n in sorted(topics))


# ---------------------------------------------------------------------------- client-side assignors


def assign(protocol: str, members: list[tuple[str, Subscription]], meta: Meta) -> dict[str, tuple]:
    """The leader's assignment: ``range`` (per topic, members sorted by id, contiguous ranges) or
    ``cooperative-sticky`` (keep valid owned partitions, give the rest to the least loaded
    eligible member, then move single partitions from the most to the least loaded member while
    the difference exceeds one). Either way a partition that another member still claims in its
    subscription (``owned_partitions``) is withheld this generation (KIP-429: the owner revokes
    it and rejoins; the next generation hands it out). Returns {member id: wire partitions}."""
    ids = sorted(mid for mid, _s in members)
    subs = dict(members)
    claims: dict[tuple[str, int], list[str]] = {}
    for mid in ids:
        for name, ps in subs[mid].owned_partitions:
            for p in ps:
                claims.setdefault((name, p), []).append(mid)
    partitions = {
        name: meta.by_name[name][1]
        for mid in ids
        for name in subs[mid].topics
        if name in meta.by_name
    }
    eligible = {name: [mid for mid in ids if name in subs[mid].topics] for name in partitions}
    target: dict[str, set[tuple[str, int]]] = {mid: set() for mid in ids}
    if protocol == COOPERATIVE_STICKY:
        for (name, p), who in sorted(claims.items()):
            if (
                len(who) == 1
                and name in partitions
                and p < partitions[name]
                and name in subs[who[0]].topics
            ):
                target[who[0]].add((name, p))
        taken = {tp for s in target.values() for tp in s}
        for name in sorted(partitions):
            for p in range(partitions[name]):
                if (name, p) in taken:
                    continue
                best = min(eligible[name], key=lambda x: (len(target[x]), x))
                target[best].add((name, p))
        for _ in range(10_000):  # bounded; every move lowers the sum of squared loads
            move = _one_move(target, eligible, ids)
            if move is None:
                break
            tp, src, dst = move
            target[src].discard(tp)
            target[dst].add(tp)
    else:
        for name in sorted(partitions):
            subs_of = eligible[name]
            n, k = partitions[name], len(subs_of)
            start = 0
            for i, mid in enumerate(subs_of):
                count = n // k + (1 if i < n % k else 0)
                target[mid].update((name, p) for p in range(start, start + count))
                start += count
    out = {}
    for mid in ids:
        mine = {tp for tp in target[mid] if all(x == mid for x in claims.get(tp, ()))}
        by_name: dict[str, list[int]] = {}
        for name, p in sorted(mine):
            by_name.setdefault(name, []).append(p)
        out[mid] = tuple((name, tuple(ps)) for name, ps in sorted(by_name.items()))
    return out


def withheld(
    members: list[tuple[str, Subscription]], plan: Mapping[str, tuple]
) -> dict[tuple[str, int], tuple[str, ...]]:
    """The partitions members claim (``owned_partitions``) that the assignment ``plan`` gives
    to nobody — held back for their owners' revocation (KIP-429) — each with its claimants."""
    given = {(name, p) for tps in plan.values() for name, ps in tps for p in ps}
    out: dict[tuple[str, int], list[str]] = {}
    for mid, sub in members:
        for name, ps in sub.owned_partitions:
            for p in ps:
                if (name, p) not in given:
                    out.setdefault((name, p), []).append(mid)
    return {tp: tuple(sorted(who)) for tp, who in sorted(out.items())}


def _one_move(
    target: dict[str, set], eligible: dict[str, list[str]], ids: list[str]
) -> tuple | None:
    for src in sorted(ids, key=lambda x: (-len(target[x]), x)):
        for tp in sorted(target[src]):
            for dst in sorted(eligible[tp[0]], key=lambda x: (len(target[x]), x)):
                if len(target[src]) > len(target[dst]) + 1:
                    return tp, src, dst
    return None


# ---------------------------------------------------------------------------- the client


@dataclass(slots=True)
class ClassicClient:
    classic: ClassVar[bool] = True
    index: int
    topics: tuple[str, ...]
    protocol: str = EAGER
    also_cooperative_sticky: bool = False  # an eager client that also offers cooperative-sticky
    instance_id: str | None = None
    rebalance_timeout_ms: int = 20_000
    session_timeout_ms: int = 45_000
    group_id: str = "grp"
    incarnation: int = 0
    member_id: str = ""
    generation: int = -1
    phase: str = DOWN
    owned: Owned = field(default_factory=dict)
    revoking: Owned = field(default_factory=dict)
    revoke_token: int = 0
    after_revoke: str = (
        ""  # "join": eager revocation before JoinGroup; "rejoin": cooperative, after SyncGroup
    )
    inflight: int | None = None
    inflight_kind: str = ""
    join_response: m.JoinGroupResponse | None = None
    rejoin_needed: bool = False
    # Reset by an OffsetCommit error while a JoinGroup or SyncGroup was in flight (Java's
    # state UNJOINED): that request's successful answer is discarded, the client rejoins.
    unjoined: bool = False
    assigned_snapshot: tuple | None = None  # leader: metadata it assigned with
    # The generation at which, as a static leader back in a Stable group, it was told to skip
    # the assignment (KIP-814); None once it assigns or follows.
    skipped_assignment: int | None = None
    # Leader, its last assignment: the partitions it gave to nobody because members claimed
    # them in their subscriptions (KIP-429), (topic name, partition) -> the claimants.
    withheld: dict[tuple[str, int], tuple[str, ...]] = field(default_factory=dict)
    heartbeat_interval_ms: int = 5_000
    progress: dict[tuple[str, int], int] = field(default_factory=dict)
    server_assignor: str | None = None  # unused (KIP-848 only); keeps the simulator generic
    # Simulator bookkeeping (invariants.holds_forgotten_generation): the generation it held
    # when the coordinator restarted without having written it; None once a JoinGroup answers.
    forgotten_generation: int | None = None
    # Simulator bookkeeping (invariants.note_recreated): the member id the coordinator held at
    # the last check, and the claims carried from before it (re)created that member id.
    seen_member: str = ""
    stale: Owned = field(default_factory=dict)

    @property
    def epoch(self) -> int:
        """The generation (the classic counterpart of the member epoch)."""
        return self.generation

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self.incarnation += 1
        self.member_id = ""
        self._reset(JOINING)

    def crash(self) -> None:
        self._reset(DOWN)

    def _reset(self, phase: str) -> None:
        self.phase = phase
        self.generation = -1
        self._lose()
        self.inflight = None
        self.join_response = None
        self.rejoin_needed = False
        self.unjoined = False
        self.assigned_snapshot = None
        self.skipped_assignment = None

    def _lose(self) -> None:
        """onPartitionsLost: ownership ends at once."""
        self.owned = {}
        self.stale = {}
        self.progress = {}
        self.revoking = {}
        self.revoke_token += 1
        self.after_revoke = ""

    def begin_leave(self, static_bounce: bool) -> None:
        """Close: revocation callbacks run, then a dynamic member sends LeaveGroup; a static
        member just stops (KIP-345)."""
        del static_bounce
        self._lose()
        self.inflight = None
        if self.instance_id is not None or not self.member_id:
            self.phase = DOWN
        else:
            self.phase = LEAVING

    # ------------------------------------------------------------------ requests

    @property
    def can_send(self) -> bool:
        if self.inflight is not None:
            return False
        if self.phase in (JOINING, SYNCING):
            return not self.revoking
        return self.phase in (MEMBER, LEAVING)

    @property
    def can_commit(self) -> bool:
        return (
            self.phase in (JOINING, SYNCING, MEMBER)
            and self.generation >= 0
            and bool(self.member_id)
        )

    def request_timeout(self, default_ms: int) -> int:
        if self.inflight_kind == "join":
            return max(default_ms, self.rebalance_timeout_ms + 5_000)
        return default_ms

    def metadata(self, meta: Meta) -> bytes:
        owned = meta.names(self.owned) if self.protocol == COOPERATIVE else ()
        return encode_subscription(
            Subscription(
                version=3,
                topics=self.topics,
                owned_partitions=owned,
                generation_id=self.generation,
            )
        )

    def protocols(self, meta: Meta) -> tuple[tuple[str, bytes], ...]:
        data = self.metadata(meta)
        if self.protocol == COOPERATIVE:
            return ((COOPERATIVE_STICKY, data), (RANGE, data))
        if self.also_cooperative_sticky:
            # Kafka's documented first step of an eager -> cooperative upgrade: eager clients list
            # both assignors (they still rebalance eagerly), so a group whose members were reloaded
            # with only their chosen protocol (cooperative-sticky) still accepts them.
            return ((RANGE, data), (COOPERATIVE_STICKY, data))
        return ((RANGE, data),)

    def build_request(self, meta: Meta) -> Any:
        if self.phase == LEAVING:
            self.inflight_kind = "leave"
            return m.LeaveGroup(
                group_id=self.group_id, members=(m.LeaveMember(member_id=self.member_id),)
            )
        if self.phase == JOINING:
            self.inflight_kind = "join"
            return m.JoinGroup(
                group_id=self.group_id,
                session_timeout_ms=self.session_timeout_ms,
                rebalance_timeout_ms=self.rebalance_timeout_ms,
                member_id=self.member_id,
                group_instance_id=self.instance_id,
                protocol_type=CONSUMER_PROTOCOL_TYPE,
                protocols=self.protocols(meta),
                client_id=f"c{self.index}",
            )
        if self.phase == SYNCING:
            self.inflight_kind = "sync"
            j = self.join_response
            assert j is not None
            assignments: tuple[tuple[str, bytes], ...] = ()
            self.skipped_assignment = None
            if j.members:  # the leader of a classic group assigns
                subs = [(x.member_id, decode_subscription(x.metadata)) for x in j.members]
                topics = tuple(sorted({t for _mid, s in subs for t in s.topics}))
                if j.skip_assignment:
                    # KIP-814: a static leader back in a Stable group keeps the group's
                    # assignment; Java's onLeaderElected assigns nothing and watches the
                    # metadata from now on (assignmentSnapshot = the metadata it has now).
                    self.skipped_assignment = j.generation_id
                else:
                    plan = assign(j.protocol_name or RANGE, subs, meta)
                    self.withheld = withheld(subs, plan)
                    assignments = tuple(
                        (
                            mid,
                            encode_assignment(
                                AssignmentMessage(version=3, assigned_partitions=plan[mid])
                            ),
                        )
                        for mid in sorted(plan)
                    )
                self.assigned_snapshot = meta.snapshot(topics)
            else:
                self.assigned_snapshot = None
            return m.SyncGroup(
                **self._at_generation(),
                protocol_type=CONSUMER_PROTOCOL_TYPE,
                protocol_name=j.protocol_name,
                assignments=assignments,
            )
        self.inflight_kind = "heartbeat"
        return m.Heartbeat(**self._at_generation())

    def _at_generation(self) -> dict[str, Any]:
        """The fields of a SyncGroup or Heartbeat that say who sends it, at which generation."""
        return {
            "group_id": self.group_id,
            "generation_id": self.generation,
            "member_id": self.member_id,
            "group_instance_id": self.instance_id,
        }

    def sent(self, corr: int, req: Any) -> None:
        del req
        self.inflight = corr

    def metadata_changed(self, meta: Meta) -> bool:
        """A leader whose subscribed topics' metadata differs from what it assigned with
        (partitions added, topic deleted or re-created): it rejoins at its next check."""
        if self.phase != MEMBER or self.assigned_snapshot is None:
            return False
        topics = tuple(n for n, _v in self.assigned_snapshot)
        return meta.snapshot(topics) != self.assigned_snapshot

    def check_metadata(self, meta: Meta) -> list[str]:
        """The leader rejoins when the metadata of the subscribed topics differs from what it
        assigned with (Kafka's metadata snapshot check)."""
        if self.metadata_changed(meta):
            self.assigned_snapshot = None
            return self.request_rejoin()
        return []

    # ------------------------------------------------------------------ rebalancing

    def request_rejoin(self) -> list[str]:
        """Start a new JoinGroup: eager revokes everything first."""
        self.phase = JOINING
        self.join_response = None
        if self.revoking:  # the running revocation finishes first, then the join goes out
            self.after_revoke = "join"
            return []
        if self.protocol == EAGER and self.owned:
            self.revoking = dict(self.owned)
            self.revoke_token += 1
            self.after_revoke = "join"
            return ["revoke"]
        return ["send"]

    def poll_timeout(self) -> None:
        """The revocation callback ran past max.poll.interval.ms (the rebalance timeout): Kafka's
        heartbeat thread gives the membership up (``maybeLeaveGroup``: generation and member id
        reset), so the next join starts over and every partition is lost."""
        self.member_id = "" if self.instance_id is None else self.member_id
        self.generation = -1
        self._lose()
        self.phase = JOINING
        self.join_response = None
        self.assigned_snapshot = None

    def finish_revocation(self, token: int, *, poll_timeout: bool = False) -> list[str]:
        if token != self.revoke_token or not self.revoking:
            return []
        if poll_timeout:
            self.poll_timeout()
            return ["send"]
        self.owned = minus(self.owned, self.revoking)
        self.stale = minus(self.stale, self.revoking)
        for t, ps in self.revoking.items():
            for p in ps:
                self.progress.pop((t, p), None)
        self.revoking = {}
        after, self.after_revoke = self.after_revoke, ""
        if after == "join":
            return ["send"] if self.phase == JOINING else []
        if after == "rejoin" and self.phase == MEMBER:
            return self.request_rejoin()
        return []

    # ------------------------------------------------------------------ responses

    def on_timeout(self) -> None:
        kind = self.inflight_kind
        self.inflight = None
        self.unjoined = False
        if self.phase == LEAVING:
            self.phase = DOWN
        elif kind == "sync" and self.phase == SYNCING:
            self.request_rejoin()  # the join future fails: start the rebalance over

    def on_response(self, resp: Any, meta: Meta) -> list[str]:
        kind = self.inflight_kind
        self.inflight = None
        if self.phase == LEAVING:
            self.phase = DOWN
            return []
        if self.phase == DOWN:
            return []
        code = getattr(resp, "error_code", 0)
        unjoined, self.unjoined = self.unjoined, False
        if code:
            return self.on_error(code, resp)
        if unjoined and kind in ("join", "sync") and self.phase in (JOINING, SYNCING):
            self.phase = JOINING
            self.join_response = None
            self.assigned_snapshot = None
            return ["rejoin"]
        if kind == "join" and self.phase == JOINING:
            self.member_id = resp.member_id or self.member_id
            self.generation = resp.generation_id
            self.join_response = resp
            self.phase = SYNCING
            return ["send"]
        if kind == "sync" and self.phase == SYNCING:
            a = decode_assignment(resp.assignment) if resp.assignment else AssignmentMessage()
            assigned = meta.ids(a.assigned_partitions)
            self.phase = MEMBER
            self.owned = union(self.owned, minus(assigned, self.owned))
            self.stale = minus(self.stale, assigned)  # what is assigned is attributed now
            revoked = minus(self.owned, assigned)
            if revoked:
                self.revoking = revoked
                self.revoke_token += 1
                self.after_revoke = "rejoin" if self.protocol == COOPERATIVE else ""
                return ["revoke"]
            return []
        return []

    def on_commit_error(self, code: int) -> list[str]:
        """An OffsetCommit answered UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION: Kafka's
        ``resetGenerationOnResponseError`` — the generation (and, for an unknown member, the
        member id) is reset and the partitions are lost; the client rejoins. Other commit errors
        are retried with the next commit."""
        code = ErrorCode(code)
        if code not in (
            ErrorCode.UNKNOWN_MEMBER_ID,
            ErrorCode.ILLEGAL_GENERATION,
        ) or self.phase in (DOWN, LEAVING):
            return []
        joining = self.inflight is not None and self.inflight_kind in ("join", "sync")
        if code == ErrorCode.UNKNOWN_MEMBER_ID and (self.inflight is None or joining):
            self.member_id = ""
        self.generation = -1
        self._lose()
        if self.inflight is not None:
            # Java's resetStateAndRejoin leaves the coordinator UNJOINED: a JoinGroup or
            # SyncGroup in flight completes, but its successful answer is discarded
            # (AbstractCoordinator's Join/SyncGroupResponseHandler: UnjoinedGroupException, or
            # "Generation data was cleared ... retry") and the client joins again, reporting
            # what it owns now. Taking that answer instead would leave at the coordinator the
            # subscription sent before the reset, whose owned partitions (lost since) a
            # cooperative leader withholds for a revocation that never comes.
            self.unjoined = joining
            return []  # the request in flight completes first; the next one rejoins
        self.phase = JOINING
        self.join_response = None
        self.assigned_snapshot = None
        return ["rejoin"]

    def on_error(self, code: int, resp: Any = None) -> list[str]:
        self.inflight = None
        if self.phase == LEAVING:
            self.phase = DOWN
            return []
        if self.phase == DOWN:
            return []
        code = ErrorCode(code)
        if code == ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = resp.member_id
            self.phase = JOINING
            return ["send"]
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            if self.phase == JOINING:
                return ["rejoin"]
            return self.request_rejoin()
        if code in (
            ErrorCode.UNKNOWN_MEMBER_ID,
            ErrorCode.ILLEGAL_GENERATION,
            ErrorCode.GROUP_ID_NOT_FOUND,
        ):
            if code != ErrorCode.ILLEGAL_GENERATION:
                self.member_id = ""
            self.generation = -1
            self._lose()
            self.phase = JOINING
            self.join_response = None
            self.assigned_snapshot = None
            return ["rejoin"]
        if code in (ErrorCode.FENCED_INSTANCE_ID, ErrorCode.INCONSISTENT_GROUP_PROTOCOL):
            # Fatal in Kafka's client (the application gets the exception and stops); the
            # simulated process restarts later.
            self.crash()
            return ["fatal"]
        if code in (
            ErrorCode.UNKNOWN_SERVER_ERROR,
            ErrorCode.COORDINATOR_NOT_AVAILABLE,
            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
            ErrorCode.NOT_COORDINATOR,
        ):
            if self.phase == SYNCING:
                self.request_rejoin()
            return ["retry"]
        raise ClientModelError(
            f"classic client c{self.index} ({self.member_id}): unexpected error {code.name}"
        )

    # ------------------------------------------------------------------ views

    def key(self) -> tuple:
        """Canonical, hashable state (for the explorer)."""
        return (
            self.index,
            self.incarnation,
            self.member_id,
            self.generation,
            self.phase,
            tuple(sorted(self.owned.items())),
            tuple(sorted(self.revoking.items())),
            tuple(sorted(self.stale.items())),
            self.after_revoke,
            self.inflight is not None,
            self.inflight_kind if self.inflight is not None else "",
            repr(self.join_response),
            self.rejoin_needed,
        )

    def describe(self, names: Mapping[str, str] | None = None) -> str:
        extra = f" revoking={fmt(self.revoking, names)}" if self.revoking else ""
        extra += f" stale={fmt(self.stale, names)}" if self.stale else ""
        return (
            f"c{self.index} classic/{self.protocol} {self.member_id or '-'} {self.phase} gen={self.generation} "
            f"owned={fmt(self.owned, names)}{extra}"
            f"{' inflight=' + self.inflight_kind if self.inflight is not None else ''}"
            f"{' static=' + self.instance_id if self.instance_id else ''}"
        )
