"""Discrete event simulation of a KIP-848 group: the pure core + a fleet of simulated clients on
virtual time, with seeded faults and named invariants checked after every step (KIP-848 "Test
Plan").

Theory of operation
-------------------
* One ``random.Random(seed)`` drives every choice; events sit in a heap ordered by (virtual time,
  sequence number), so a seed replays exactly. Each processed event — a request delivered to the
  coordinator, a response delivered to a client, a client timer, a coordinator timer (session or
  rebalance timeout), a fault — is one *step*.
* The network is per-client FIFO (a TCP connection): a request is never overtaken by a later
  request of the same client. Faults: ``lose-request``, ``lose-response``, ``duplicate`` (a second
  copy is processed right after the first; its response is ignored by correlation id), ``delay``
  (a request arrives after the client's request timeout — the client retries and the retry queues
  behind it). ``reorder`` (off in ``all``) breaks FIFO and models requests that cross connections.
* Client faults: ``crash`` (process dies, restarts later with a new member id), ``static-bounce``
  (a static member leaves with -2 and comes back with a new member id), ``leave`` (dynamic member
  leaves with -1 and comes back), ``slow-revoke`` (revocation callback runs past the rebalance
  timeout). Cluster faults: ``add-partitions``, ``recreate-topic`` (delete, then re-create under a
  new topic id), ``assignor`` (a member switches its server assignor), ``coordinator-restart``
  (every stored record goes through the codec and is replayed into a fresh shard; in-flight
  requests and responses are lost; timers are re-armed by ``on_loaded``).
* Phases: ``steps`` steps with faults, then a quiet phase (no new faults) that must reach a
  Stable group in which every subscribed partition is owned by exactly one member within
  :meth:`SimParams.liveness_bound_ms` of virtual time (invariant I5).
* Invariants after every step: see :mod:`coordinator.sim.invariants` (I1–I3), plus I4: an
  incrementally replayed copy of the shard, fed every record through the codec, equals the live
  shard.
* ``push``: after every change the coordinator makes durable, each KIP-848 member in the group
  whose view calls for it (``coordinator/core/push.py``, the server's very rule) gets a push
  message one network latency later; the member heartbeats at once if it has something to do.
  A stream opens when a client becomes a member and closes when it stops being one (and on a
  coordinator restart); its first message always goes out.
* ``parks_joins`` (on by default, as in the runtime; only with batching): a join to a group
  nobody has been answered in yet (new or emptied) is parked (``Pending``) until the group's
  first target. The simulator plays the runtime: the first target waits while joins to the
  group keep arriving (none for :data:`FIRST_TARGET_QUIET_MS`, at most
  ``initial_rebalance_delay_ms``), then ``first_target`` is called, again while its results ask
  for it; the answers (or UNKNOWN_MEMBER_ID for a parked member removed meanwhile) go to the
  waiting clients like any response. A coordinator restart drops them (the clients time out and
  join again). Invariant I7: each parked join is answered at most once, to a request that waits
  for it, and while joins are parked a first target or a computation is on its way.
  ``parks_joins=False`` gives Kafka's immediate answers.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from coordinator.core import codec
from coordinator.core.commands import (
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatResponse,
    Pending,
    Result,
    SequentialIds,
)
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.errors import CoordinatorError, IllegalStateError
from coordinator.core.group import GroupState
from coordinator.core.offsets import (
    OffsetCommit,
    OffsetCommitPartition,
    OffsetCommitTopic,
    OffsetFetchGroup,
    OffsetFetchTopic,
)
from coordinator.core.push import MemberView, member_view, push_due
from coordinator.core.target_assignment import run_job
from coordinator.factory import Shard, new_shard
from coordinator.harness import Harness
from legacy_bridge import messages as lm

from . import invariants as inv
from .classic_client import COOPERATIVE, EAGER, SYNCING, ClassicClient, Meta
from .client import DOWN, JOINING, LEAVING, MEMBER, ClientModelError, SimClient, fmt
from .faults import (
    ALL_FAULTS,
    CLASSIC_ONLY_FAULTS,
    EXTRA_FAULTS,
    KNOWN_FAULTS,
    FaultInjector,
    parse_faults,
)
from .report import (
    InvariantViolation,
    SimSummary,
    diff,
    digest,
    failure_report,
    req_text,
    resp_text,
)

__all__ = [
    "ALL_FAULTS",
    "CLASSIC_ONLY_FAULTS",
    "CLASSIC_PROTOCOLS",
    "EXTRA_FAULTS",
    "KNOWN_FAULTS",
    "GROUP",
    "InvariantViolation",
    "SimParams",
    "SimSummary",
    "Simulation",
    "parse_faults",
    "simulate",
]

GROUP = "grp"
FIRST_TARGET_QUIET_MS = 20  # the runtime: two quiet waits of 10 ms in a row
CLASSIC_PROTOCOLS = ("eager", "cooperative", "mixed")


STALE_COMMIT_VIEWS = 4
"""A stale commit replays one of a client's last commits (member id, epoch, partitions)."""
STALE_COMMIT_RATE = 0.2
"""Chance that a commit is a stale one, when the fault is on."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SimParams:
    seed: int = 0
    steps: int = 300
    members: int = 3
    partitions: int = 4
    topics: int = 2
    faults: frozenset[str] = frozenset(ALL_FAULTS)
    fault_rate: float = 0.08  # chance per step that a client/cluster fault is scheduled
    net_fault_rate: float = 0.05  # chance per message of each enabled network fault
    static_members: int = 1  # the first N clients are static (have an instance id)
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    rebalance_timeout_ms: int = 20_000
    request_timeout_ms: int = 15_000
    retry_backoff_ms: int = 1_000
    max_latency_ms: int = 20
    max_revoke_ms: int = 500
    restart_delay_max_ms: int = 10_000
    trace_tail: int = 40
    quiet_steps_max: int = 20_000
    invariants: frozenset[str] = frozenset(inv.SAFETY)  # safety invariants checked (I4/I5 always)
    classic: int = 0  # the last N clients speak the classic protocol (JoinGroup/SyncGroup)
    push: bool = False  # the coordinator pushes (ConsumerGroupWatch) to KIP-848 members
    protocol: str = "eager"  # classic clients: eager | cooperative | mixed (alternating)
    initial_rebalance_delay_ms: int = 3_000  # group.initial.rebalance.delay.ms (classic groups)
    assignment_interval_ms: int = 0  # group.consumer.assignment.interval.ms (0: no batching)
    offload_min_members: int = 0  # group.consumer.assignor.offload.min.members (0: no offload)
    offload_delay_max_ms: int = 2_000  # how long a worker may take (virtual time)
    start_spread_ms: int | None = None  # clients first start within this (None: heartbeat interval)
    parks_joins: bool = True  # joins wait for a new group's first target (the runtime; batching)

    def parks(self) -> bool:
        """Are joins parked (the runtime's default, with batching on)?"""
        return self.parks_joins and self.assignment_interval_ms > 0

    def liveness_bound_ms(self) -> int:
        """Virtual time after faults stop within which the group must be Stable with every
        subscribed partition owned by exactly one member (I5). Derivation (docs/simulation.md):

        * a delayed request still in flight lands within 2 x request timeout (``delay`` bound);
        * a dead incarnation's session, and a slow revoker's rebalance timeout, expire within
          max(session timeout, rebalance timeout) of their last heartbeat / of the revocation start;
          a crashed/bounced client is back within the restart delay, and a deleted topic is
          re-created within the same delay;
        * a client whose last request or response was lost retries after the request timeout;
        * then each member needs a bounded number of heartbeat round trips: revoke and
          acknowledge, the new owner picks the partition up on its next heartbeat, and a rejoin
          (fenced member) adds a round: 4 x (heartbeat interval + 2 x max latency + revocation).
        """
        settle = max(self.session_timeout_ms, self.rebalance_timeout_ms, self.restart_delay_max_ms)
        rounds = 4 * (self.heartbeat_interval_ms + 2 * self.max_latency_ms + self.max_revoke_ms)
        bound = (
            2 * self.request_timeout_ms
            + settle
            + self.request_timeout_ms
            + self.retry_backoff_ms
            + rounds
        )
        if self.uses_classic():
            bound += self.classic_extra_ms()
        # Batching and offloading: each target may wait an interval, then a worker; a change
        # during a computation waits for it and then one more interval (2 x per round).
        bound += (
            2
            * 4
            * (
                self.assignment_interval_ms
                + self.offload_delay_max_ms * bool(self.offload_min_members)
            )
        )
        if self.parks():  # a first target waits for the burst of joins, at most this long
            bound += self.initial_rebalance_delay_ms
        return bound

    def uses_classic(self) -> bool:
        return self.classic > 0

    def classic_extra_ms(self) -> int:
        """Classic rebalances on top of the KIP-848 bound (docs/simulation.md):

        * a parked JoinGroup lost in a coordinator restart is resent after the join timeout
          (rebalance timeout + 5 s) instead of the request timeout: + (R + 5 s - T);
        * the first generation of an empty group waits the initial rebalance delay, re-armed
          while members keep arriving but never beyond the rebalance timeout: + R;
        * a rebalance may wait the join barrier (a member that does not rejoin: R) and the sync
          barrier (a member that does not sync is removed after R, which starts one more
          rebalance): + 2R;
        * a cooperative hand-over needs two generations (revoke, then assign) and a mixed group
          one more heartbeat round per classic member behind: + 4 x (H + 4L + V).
        """
        r = self.rebalance_timeout_ms
        join_timeout = max(0, r + 5_000 - self.request_timeout_ms)
        rounds = 4 * (self.heartbeat_interval_ms + 4 * self.max_latency_ms + self.max_revoke_ms)
        return join_timeout + r + 2 * r + rounds

    def command(self) -> str:
        faults = ",".join(f for f in KNOWN_FAULTS if f in self.faults) or "none"
        return (
            f"kip848 simulate --seed {self.seed} --steps {self.steps} --members {self.members} "
            f"--partitions {self.partitions} --faults {faults}"
            + (
                f" --topics {self.topics} --static {self.static_members} --classic {self.classic} "
                f"--protocol {self.protocol}"
                if self.classic
                else ""
            )
            + (" --push" if self.push else "")
            + (
                f" --assignment-interval-ms {self.assignment_interval_ms}"
                if self.assignment_interval_ms
                else ""
            )
            + (
                f" --offload-min-members {self.offload_min_members} "
                f"--offload-delay-max-ms {self.offload_delay_max_ms}"
                if self.offload_min_members
                else ""
            )
            + (" --no-park" if self.assignment_interval_ms and not self.parks_joins else "")
        )


class Simulation:
    def __init__(self, params: SimParams, *, assignors: Sequence[Any] | None = None) -> None:
        self.p = params
        self.rng = random.Random(params.seed)
        if assignors is None:
            assignors = _default_assignors()
        self.assignor_names = [a.name for a in assignors]
        config = GroupCoordinatorConfig(
            consumer_session_timeout_ms=params.session_timeout_ms,
            consumer_heartbeat_interval_ms=params.heartbeat_interval_ms,
            classic_initial_rebalance_delay_ms=params.initial_rebalance_delay_ms,
            consumer_assignment_interval_ms=params.assignment_interval_ms,
            consumer_assignor_offload_enable=params.offload_min_members > 0,
            consumer_assignor_offload_min_members=max(1, params.offload_min_members),
        )
        # The bridged shard: classic groups, classic members in consumer groups, upgrade and
        # downgrade. A fleet without classic clients never creates a classic group.
        self.h: Harness = Harness(
            assignors=list(assignors),
            config=config,
            ids=SequentialIds(),
            parks_joins=params.parks_joins,
        )
        self.parked: dict[
            int, tuple[int, int, bool]
        ] = {}  # deferred-response token -> (client, corr, dup)
        self.id_name: dict[str, str] = {}  # every topic id ever created -> name
        self.store: list[tuple[bytes, bytes | None]] = []  # the record store (encoded)
        self.replica = self._fresh_shard()
        self.now = 0
        self.seq = 0
        self.queue: list[tuple[int, int, str, tuple]] = []
        self.corr = 0
        self.coord_gen = 0  # bumps on restart: deliveries of older generations are lost
        self.assigning: set[str] = set()  # groups whose target a "worker" is computing
        # Parked joins (the runtime's first targets): group -> (wait started, joins seen at the
        # last look, call again), while a first_target call is scheduled; tokens answered.
        self.first_targets: dict[str, list[int]] = {}
        self.joins_arrived: dict[str, int] = {}
        self.answered: set[int] = set()
        self.fifo: dict[int, int] = {}  # client -> time of its last scheduled delivery
        self.committed: dict[tuple[str, int], int] = {}  # (topic id, p) -> last accepted offset
        # client -> (member id, epoch, partitions) of its last commits (a stale commit replays
        # one of them)
        self.commit_views: dict[int, list[tuple[str, int, list[tuple[str, int]]]]] = {}
        self.stale_rng = random.Random(f"{params.seed}-stale-commit")
        self.resp_fifo: dict[int, int] = {}  # client -> time of its last scheduled response
        self._tick_gen: dict[int, int] = {}  # client -> serial of its live heartbeat timer
        # client -> (member id, coordinator generation, last view pushed on its stream)
        self.pushed: dict[int, tuple[str, int, MemberView]] = {}
        self.tick_serial = 0
        self.trace: list[str] = []
        self.summary = SimSummary(params)
        self.injector = FaultInjector(self)
        self.topic_names = [f"t{i}" for i in range(params.topics)]
        self.topic_label: dict[str, str] = {}
        self.deleted: set[str] = set()
        self.faults_on = True
        self.step = 0
        self.quiet_since: int | None = None
        for name in self.topic_names:
            self._create_topic(name, params.partitions)
        self.clients: list[Any] = []
        self.switch_to: dict[
            int, Any
        ] = {}  # client index -> the client that replaces it at restart
        for i in range(params.members):
            if i >= params.members - params.classic:
                protocol = (
                    params.protocol
                    if params.protocol != "mixed"
                    else (COOPERATIVE if i % 2 else EAGER)
                )
                c = self._new_client(i, classic=True, protocol=protocol)
            else:
                c = self._new_client(i, classic=False)
            self.clients.append(c)
            spread = params.start_spread_ms
            self._schedule(
                self.rng.randint(0, params.heartbeat_interval_ms if spread is None else spread),
                "start",
                (i,),
            )

    def _new_client(
        self, i: int, *, classic: bool, protocol: str = EAGER, incarnation: int = 0
    ) -> Any:
        p = self.p
        # Heterogeneous subscriptions: client 0 subscribes to t0 only when there are several
        # topics; the rest subscribe to everything.
        topics = (
            tuple(self.topic_names[:1]) if (i == 0 and p.topics > 1) else tuple(self.topic_names)
        )
        instance_id = f"inst-{i}" if i < p.static_members else None
        if classic:
            return ClassicClient(
                index=i,
                topics=topics,
                protocol=protocol,
                instance_id=instance_id,
                also_cooperative_sticky=(p.protocol == "mixed"),
                rebalance_timeout_ms=p.rebalance_timeout_ms,
                session_timeout_ms=p.session_timeout_ms,
                group_id=GROUP,
                incarnation=incarnation,
                heartbeat_interval_ms=p.heartbeat_interval_ms,
            )
        return SimClient(
            index=i,
            topics=topics,
            instance_id=instance_id,
            rebalance_timeout_ms=p.rebalance_timeout_ms,
            request_timeout_ms=p.request_timeout_ms,
            retry_backoff_ms=p.retry_backoff_ms,
            group_id=GROUP,
            incarnation=incarnation,
            clock=lambda: self.now,
        )

    def meta(self) -> Meta:
        """The cluster metadata as classic clients see it."""
        return Meta(
            by_name={n: (t.topic_id, t.num_partitions) for n, t in self.h.registry.topics.items()},
            name_of=self.id_name,
        )

    # ------------------------------------------------------------------ plumbing

    def _fresh_shard(self) -> Shard:
        h = self.h
        shard = new_shard(
            config=h.config, assignors=h.assignors, ids=h.ids, topics=h.registry.image()
        )
        shard.groups.parks_joins = self.p.parks_joins  # the runtime sets it on every shard
        return shard

    def _create_topic(self, name: str, partitions: int) -> None:
        tid = self.h.create_topic(name, partitions)
        self.id_name[tid] = name
        self.topic_label[tid] = (
            f"{name}#{sum(1 for v in self.topic_label.values() if v.startswith(name + '#'))}"
        )
        self.replica.set_topics(self.h.registry.image())

    def _schedule(self, at: int, kind: str, payload: tuple) -> None:
        self.seq += 1
        heapq.heappush(self.queue, (at, self.seq, kind, payload))

    def _log(self, text: str) -> None:
        self.trace.append(f"#{self.step} t={self.now} {text}")

    def _commit(self, res: Result[Any]) -> None:
        h = self.h
        h.log.extend(res.records)
        h.timers.apply(res.timers)
        h.shard.release(h.shard.mark())
        self._store_records(res.records)
        self._route_completions(res.completions)
        for group_id, first in res.parked_joins:
            self._ask_first_target(group_id, first)
        if self.p.push and res.records:
            self._push()
        for group_id in dict.fromkeys(res.offloads):
            if group_id not in self.assigning:  # one computation per group at a time
                self.assigning.add(group_id)
                self._schedule(self.now, "offload_start", (group_id, self.coord_gen))

    def _push(self) -> None:
        """The push streams (ConsumerGroupWatch) after a durable change: one message to each
        member whose view calls for it, one network latency later."""
        group = self.group
        for i, c in enumerate(self.clients):
            if not isinstance(c, SimClient) or c.phase != MEMBER or group is None:
                self.pushed.pop(i, None)  # no member, no stream
                continue
            view = member_view(group, c.member_id)
            last = self.pushed.get(i)
            if last is not None and last[:2] != (c.member_id, self.coord_gen):
                last = None  # another incarnation, or the coordinator restarted: a new stream
            if view is None or not push_due(view, None if last is None else last[2]):
                continue
            self.pushed[i] = (c.member_id, self.coord_gen, view)
            self._schedule(self.now + self._latency(), "push", (i, view, self.coord_gen))

    def _on_push(self, i: int, view: MemberView, gen: int) -> None:
        c = self.clients[i]
        if gen != self.coord_gen or not isinstance(c, SimClient):
            return  # streams break when the coordinator restarts
        actions = c.push(view)
        self._log(f"c{i} push: target={fmt(view.target, self.topic_label)} actions={actions}")
        self._after(i, actions)

    def _on_offload_start(self, group_id: str, gen: int) -> None:
        """The runtime copies the group's inputs (the asking command is durable) and hands
        them to a worker, which takes up to ``offload_delay_max_ms``."""
        if gen != self.coord_gen:
            return  # the coordinator restarted: the request died with it
        job = self.h.shard.groups.assignment_job(group_id)
        if job is None:
            self.assigning.discard(group_id)
            self._log(f"coordinator: nothing to compute for {group_id} any more")
            return
        assignor = next(a for a in self.h.assignors if a.name == job.assignor)
        outcome = run_job(job, assignor)  # the inputs are copies: computing now or later is alike
        self.summary.events["offloaded-computation"] += 1
        at = self.now + self.rng.randint(0, self.p.offload_delay_max_ms)
        self._log(f"coordinator: target of {group_id} for epoch {job.epoch} goes to a worker")
        self._schedule(at, "offload_done", (group_id, outcome, gen))

    def _on_offload_done(self, group_id: str, outcome: Any, gen: int) -> None:
        if gen != self.coord_gen:
            self._log(
                f"the worker's target of {group_id} for epoch {outcome.epoch} is lost in a restart"
            )
            return
        self.assigning.discard(group_id)
        res = self._guard(lambda: self.h.shard.groups.apply_assignment(outcome, self.now))
        self._commit(res)
        self._log(
            f"coordinator: worker's target of {group_id} for epoch {outcome.epoch} applied "
            f"({len(res.records)} records)"
        )

    # ------------------------------------------------------------------ first targets

    def _ask_first_target(self, group_id: str, first: bool) -> None:
        """The runtime's ``_answer_parked_joins``: one call of ``first_target`` at a time per
        group (asked again while one is scheduled: it goes on after it); the first waits for
        the burst of joins (:meth:`_on_first_target`)."""
        wait = self.first_targets.get(group_id)
        if wait is not None:
            wait[2] = 1
            return
        self.first_targets[group_id] = [self.now, -1, 0]
        self.joins_arrived[group_id] = 0
        delay = FIRST_TARGET_QUIET_MS if first else 0
        self._schedule(self.now + delay, "first_target", (group_id, first, self.coord_gen))

    def _on_first_target(self, group_id: str, first: bool, gen: int) -> None:
        """Wait while joins to the group keep arriving (none in the last quiet wait), for at
        most ``group.initial.rebalance.delay.ms``; then ``first_target``, again while its
        results ask for it (each call one step: other commands run in between)."""
        wait = self.first_targets.get(group_id)
        if gen != self.coord_gen or wait is None:
            return  # the coordinator restarted: the parked joins died with it
        arrived = self.joins_arrived.get(group_id, 0)
        if first and arrived != wait[1] and self.now - wait[0] < self.p.initial_rebalance_delay_ms:
            wait[1] = arrived
            self._schedule(self.now + FIRST_TARGET_QUIET_MS, "first_target", (group_id, True, gen))
            return
        wait[2] = 0
        res = self._guard(lambda: self.h.shard.groups.first_target(group_id, self.now))
        self._log(
            f"coordinator: first target of {group_id} after {self.now - wait[0]} ms: "
            f"{len(res.records)} records, {len(res.completions)} parked joins answered"
            + (", offloaded" if res.offloads else "")
        )
        if res.offloads:
            self.summary.events["first-target-offloaded"] += 1
        self._commit(res)  # may ask again (wait[2])
        if wait[2]:
            wait[2] = 0
            self._schedule(self.now, "first_target", (group_id, False, gen))
        else:
            del self.first_targets[group_id]
            self.joins_arrived.pop(group_id, None)

    def _route_completions(self, completions: Sequence[tuple[int, Any]]) -> None:
        """Deferred responses completed by this (durable) result — JoinGroup/SyncGroup, and
        joins parked until a new group's first target — go to the client that waits for them,
        with the normal response latency (and response faults). Each token at most once (I7)."""
        for token, response in completions:
            if token in self.answered:
                self._fail(
                    inv.PARKED_ANSWERED_ONCE,
                    f"the coordinator answered token {token} a second time: {response!r}",
                )
            self.answered.add(token)
            waiting = self.parked.pop(token, None)
            if waiting is None:
                self._fail(
                    inv.PARKED_ANSWERED_ONCE,
                    f"the coordinator answered token {token}, which no request waits for: "
                    f"{response!r}",
                )
                continue
            i, corr, dup = waiting
            if isinstance(response, CoordinatorError):
                self.summary.events["parked-answered-" + response.code.name] += 1
                self._log(
                    f"coordinator: parked corr={corr}{' (dup)' if dup else ''} of c{i} completes "
                    f"-> {response.code.name}: {response.message}"
                )
                self._respond(i, corr, ("error", int(response.code), response.message))
                continue
            if isinstance(response, ConsumerGroupHeartbeatResponse):
                self.summary.events["parked-join-answered"] += 1
            self._log(
                f"coordinator: parked corr={corr}{' (dup)' if dup else ''} of c{i} completes -> "
                f"{resp_text(response)}"
            )
            self._respond(i, corr, ("ok", response))

    def _store_records(self, records: Sequence[Any]) -> None:
        """Append to the simulated store and feed the replica (invariant I4)."""
        for rec in records:
            k, v = codec.encode(rec)
            self.store.append((k, v))
            self.replica.replay(codec.decode(k, v))
        self.replica.release(self.replica.mark())

    @property
    def group(self):
        return self.h.shard.groups.get(GROUP)

    @property
    def classic_group(self):
        return self.h.shard.classic_groups.get(GROUP)

    def _topic_ids(self) -> dict[str, str]:
        return {n: t.topic_id for n, t in self.h.registry.topics.items()}

    def _latency(self) -> int:
        return self.rng.randint(1, self.p.max_latency_ms)

    def _net_fault(self, name: str) -> bool:
        return (
            self.faults_on and name in self.p.faults and self.rng.random() < self.p.net_fault_rate
        )

    # ------------------------------------------------------------------ running

    def run(self) -> SimSummary:
        p = self.p
        s = self.summary
        bound = p.liveness_bound_ms()
        quiet_steps = 0
        stable_at: int | None = None
        try:
            while True:
                if self.faults_on and self.step >= p.steps:
                    self.faults_on = False
                    self.quiet_since = self.now
                    self._log(f"faults stop; liveness bound {bound} ms")
                if not self.faults_on:
                    if self._converged():
                        if stable_at is None:
                            stable_at = self.now
                            s.time_to_stable_ms = self.now - (self.quiet_since or 0)
                        if self.now - stable_at >= 2 * p.heartbeat_interval_ms:
                            break  # stayed converged for two heartbeat intervals
                    else:
                        if stable_at is not None:
                            self._fail(
                                inv.LIVENESS,
                                f"group left the converged state at t={self.now} "
                                f"(converged at t={stable_at}) without any fault",
                            )
                    if self.now - (self.quiet_since or 0) > bound:
                        self._fail(
                            inv.LIVENESS,
                            f"not converged {bound} ms after faults stopped "
                            f"(at t={self.quiet_since}); {self._why_not_converged()}",
                        )
                    quiet_steps += 1
                    if quiet_steps > p.quiet_steps_max:
                        self._fail(
                            inv.LIVENESS, f"no convergence within {p.quiet_steps_max} quiet steps"
                        )
                try:
                    progressed = self._next_step()
                except ClientModelError as exc:  # an answer no correct client can get
                    self._fail(inv.CLIENT_MODEL, str(exc))
                if not progressed:
                    self._fail(inv.LIVENESS, "event queue ran dry")
                if self.faults_on:
                    s.fault_steps += 1
                self._check()
        except InvariantViolation as exc:
            s.violation = exc
        s.steps = self.step
        s.virtual_ms = self.now
        s.records = len(self.store)
        g = self.group
        cg = self.classic_group
        if g is None and cg is not None:
            s.final_state, s.final_epoch = cg.state.value, cg.generation
        else:
            s.final_state = self.h.shard.group_state(GROUP).value
            s.final_epoch = 0 if g is None else g.group_epoch
        s.trace_digest = digest(self.trace)
        return s

    def _next_step(self) -> bool:
        """Process the earliest of: the next event, the next coordinator timer."""
        if not self.queue and self.h.timers.next_deadline() is None:
            return False
        deadline = self.h.timers.next_deadline()
        if deadline is not None and (not self.queue or deadline <= self.queue[0][0]):
            self.step += 1
            self.now = max(self.now, deadline)
            due = self.h.timers.pop_due(self.now)
            assert due is not None
            self.h.now_ms = self.now
            self.summary.events[f"timer-{due.key[0]}"] += 1
            res = self._guard(lambda: self.h.shard.on_timer(due, self.now))
            self._commit(res)
            self._log(
                f"coordinator {due.key[0]} timer fires for {due.key[2]} (payload {due.payload}); "
                f"{len(res.records)} records"
            )
            return True
        while self.queue:
            at, _seq, kind, payload = heapq.heappop(self.queue)
            if self._is_noop(kind, payload):
                continue  # a superseded client timer or a timeout of an answered request
            self.step += 1
            self.now = max(self.now, at)
            self.h.now_ms = self.now
            self.summary.events[kind] += 1
            getattr(self, "_on_" + kind)(*payload)
            if self.faults_on and self.rng.random() < self.p.fault_rate:
                self.injector.schedule_one()
            return True
        return self._next_step()

    def _is_noop(self, kind: str, payload: tuple) -> bool:
        if kind == "tick":
            return payload[1] != self._tick_gen.get(payload[0])
        if kind == "timeout":
            return self.clients[payload[0]].inflight != payload[1]
        return False

    def _guard(self, fn):
        try:
            return fn()
        except IllegalStateError as exc:
            self._fail(inv.CORE_ILLEGAL_STATE, f"the core raised IllegalStateError: {exc}")
            raise  # unreachable

    # ------------------------------------------------------------------ client events

    def _on_start(self, i: int) -> None:
        if i in self.switch_to:
            self.clients[i] = self.switch_to.pop(i)
        c = self.clients[i]
        c.start()
        self._log(f"c{i} starts as {c.member_id}")
        self._send(i)

    # ------------------------------------------------------------------ offset commits

    def _commit_offsets(self, i: int) -> None:
        """Client i commits the progress of what it owns (revoking partitions included) with its
        member epoch. Commits travel on their own connection; a lost one is simply not applied."""
        c = self.clients[i]
        if not (c.can_commit if isinstance(c, ClassicClient) else c.phase == MEMBER):
            return
        owned = [(t, p) for t, ps in c.owned.items() for p in sorted(ps)]
        c.progress = {k: v for k, v in c.progress.items() if k in set(owned)}
        epoch = c.epoch
        views = [v for v in self.commit_views.get(i, ()) if v[0] == c.member_id]
        self.commit_views[i] = [*views[-(STALE_COMMIT_VIEWS - 1) :], (c.member_id, epoch, owned)]
        rng = self.rng
        if (
            views
            and self.faults_on
            and "stale-commit" in self.p.faults
            and self.stale_rng.random() < STALE_COMMIT_RATE
        ):
            # The application committed what it owned at one of its recent commits, with the
            # epoch it had then, racing the heartbeats that moved it on since (KIP-1251's case:
            # accepted only for partitions it still owns since that epoch). Its own random
            # stream, so the other faults of a seed stay where they were.
            self.summary.faults["stale-commit"] += 1
            _member, epoch, owned = self.stale_rng.choice(views)
            rng = self.stale_rng
        if not owned:
            return
        image = self.h.registry.image()
        for t, p in owned:
            if (
                (t, p) not in c.progress
            ):  # newly owned (or a stale commit's): resume from the committed offset
                name = image.by_id[t].name if t in image.by_id else None
                got = self.h.shard.offset_fetch(
                    OffsetFetchGroup(
                        group_id=GROUP,
                        topics=(
                            OffsetFetchTopic(name=name or "", topic_id=t, partition_indexes=(p,)),
                        ),
                    )
                )
                committed = got.topics[0].partitions[0].committed_offset if got.topics else -1
                c.progress[(t, p)] = max(committed, 0)
            c.progress[(t, p)] += rng.randint(1, 10)
        if rng is self.rng and self._net_fault("lose-request"):
            self.summary.faults["lose-request"] += 1
            return
        by_topic: dict[str, list[OffsetCommitPartition]] = {}
        for t, p in owned:
            by_topic.setdefault(t, []).append(
                OffsetCommitPartition(partition_index=p, committed_offset=c.progress[(t, p)])
            )
        req = OffsetCommit(
            group_id=GROUP,
            generation_id_or_member_epoch=epoch,
            member_id=c.member_id,
            topics=tuple(
                OffsetCommitTopic(topic_id=t, partitions=tuple(ps)) for t, ps in by_topic.items()
            ),
        )
        group = self.group
        classic = self.classic_group
        try:
            res = self.h.shard.offset_commit(req, self.now)
        except CoordinatorError as exc:
            self.summary.events["commit-rejected"] += 1
            self._log(f"c{i} commit at epoch {epoch} rejected: {exc.code.name}")
            if getattr(c, "classic", False):
                self._after(i, c.on_commit_error(int(exc.code)))
            return
        self._commit(res)
        self.summary.events["commit"] += 1
        response = res.response
        assert response is not None  # a commit always answers
        accepted = [
            (
                (topic.topic_id, part.partition_index),
                c.progress[(topic.topic_id, part.partition_index)],
            )
            for topic in response.topics
            for part in topic.partitions
            if not part.error_code
        ]
        problems = inv.check_accepted_commit(
            group,
            c.member_id,
            epoch,
            accepted,
            self.committed,
            classic=classic,
            topic_ids=self._topic_ids() if classic is not None else None,
        )
        if problems and inv.OFFSETS_FENCED in self.p.invariants:
            self._fail(inv.OFFSETS_FENCED, problems[0])

    def _on_tick(self, i: int, gen: int) -> None:
        c = self.clients[i]
        self._commit_offsets(i)
        if isinstance(c, ClassicClient):
            actions = c.check_metadata(self.meta())
            if actions:
                self._log(f"c{i} (leader) sees changed metadata: rejoins")
                self._after(i, actions)
                if "revoke" in actions:
                    self._arm_tick(i, c.heartbeat_interval_ms)
                    return
        if c.can_send:
            self._send(i)
        elif c.phase in (JOINING, SYNCING, MEMBER):
            self._arm_tick(i, self._tick_delay(c))

    def _tick_delay(self, c: Any) -> int:
        """Until client c's next heartbeat: a KIP-848 member says when it needs time to pass
        (its heartbeat, back-off or revocation deadline); a classic client ticks per interval."""
        if isinstance(c, SimClient):
            if c.outbox is not None:
                return 0  # a heartbeat waits to be sent
            wake = c.next_wakeup_ms()
            if wake is not None:
                return max(0, min(wake - self.now, c.heartbeat_interval_ms))
        return c.heartbeat_interval_ms

    def _arm_tick(self, i: int, delay: int) -> None:
        """(Re)arm client i's heartbeat timer; an older pending tick becomes a no-op."""
        self.tick_serial += 1
        self._tick_gen[i] = self.tick_serial
        self._schedule(self.now + delay, "tick", (i, self.tick_serial))

    def _send(self, i: int) -> None:
        c = self.clients[i]
        if not c.can_send:
            return
        classic = isinstance(c, ClassicClient)
        req = c.build_request(self.meta()) if classic else c.build_request()
        self.corr += 1
        corr = self.corr
        c.sent(corr, req)
        self._log(f"c{i} sends {req_text(req, self.topic_label)} corr={corr}")
        timeout = (
            c.request_timeout(self.p.request_timeout_ms) if classic else self.p.request_timeout_ms
        )
        self._schedule(self.now + timeout, "timeout", (i, corr))
        if self._net_fault("lose-request"):
            self.summary.faults["lose-request"] += 1
            self._log(f"  fault: request corr={corr} lost")
        else:
            delay = self._latency()
            if self._net_fault("delay"):
                self.summary.faults["delay"] += 1
                delay += self.rng.randint(
                    self.p.request_timeout_ms // 2, 2 * self.p.request_timeout_ms
                )
                self._log(f"  fault: request corr={corr} delayed by {delay} ms")
            at = self.now + delay
            if not self._net_fault("reorder"):
                at = max(at, self.fifo.get(i, 0) + 1)
            else:
                self.summary.faults["reorder"] += 1
            self.fifo[i] = max(self.fifo.get(i, 0), at)
            self._schedule(at, "deliver", (i, corr, req, self.coord_gen, False))
            if self._net_fault("duplicate"):
                self.summary.faults["duplicate"] += 1
                self.fifo[i] = at + 1
                self._schedule(at + 1, "deliver", (i, corr, req, self.coord_gen, True))
                self._log(f"  fault: request corr={corr} duplicated")
        if c.phase != LEAVING:
            self._arm_tick(i, c.heartbeat_interval_ms)

    def _handle(self, req: Any) -> Result[Any]:
        shard = self.h.shard
        if isinstance(req, ConsumerGroupHeartbeat):
            return shard.consumer_group_heartbeat(req, self.now)
        if isinstance(req, lm.JoinGroup):
            return shard.classic_groups.join(req, self.now)
        if isinstance(req, lm.SyncGroup):
            return shard.classic_groups.sync(req, self.now)
        if isinstance(req, lm.Heartbeat):
            return shard.classic_groups.heartbeat(req, self.now)
        if isinstance(req, lm.LeaveGroup):
            return shard.classic_groups.leave(req, self.now)
        raise TypeError(f"unknown request {type(req).__name__}")

    def _on_deliver(self, i: int, corr: int, req: Any, gen: int, dup: bool) -> None:
        if gen != self.coord_gen:
            self._log(f"request corr={corr} from c{i} lost in a coordinator restart")
            return
        outcome: Any
        joining = isinstance(req, ConsumerGroupHeartbeat) and req.member_epoch == 0
        if joining and req.group_id in self.first_targets:  # the runtime counts them as it waits
            self.joins_arrived[req.group_id] = self.joins_arrived.get(req.group_id, 0) + 1
        try:
            res = self._handle(req)
        except CoordinatorError as exc:
            outcome = ("error", int(exc.code), exc.message)
            self._log(
                f"coordinator: corr={corr}{' (dup)' if dup else ''} from c{i} -> {exc.code.name}: {exc.message}"
            )
        except IllegalStateError as exc:
            self._fail(
                inv.CORE_ILLEGAL_STATE, f"the core raised IllegalStateError on corr={corr}: {exc}"
            )
        else:
            resp = res.response
            if isinstance(resp, Pending):
                self.parked[resp.token] = (i, corr, dup)
                if isinstance(req, ConsumerGroupHeartbeat):
                    self.summary.events["parked-join"] += 1
                self._log(
                    f"coordinator: corr={corr}{' (dup)' if dup else ''} from c{i} waits (token {resp.token}); "
                    f"{len(res.records)} records"
                )
                self._commit(res)
                return
            self._commit(res)
            outcome = ("ok", resp)
            self._log(
                f"coordinator: corr={corr}{' (dup)' if dup else ''} from c{i} -> {resp_text(resp, self.topic_label)}"
                + f"; {len(res.records)} records"
            )
        self._respond(i, corr, outcome)

    def _respond(self, i: int, corr: int, outcome: tuple) -> None:
        if self._net_fault("lose-response"):
            self.summary.faults["lose-response"] += 1
            self._log(f"  fault: response corr={corr} lost")
            return
        # Responses are FIFO per client too (one connection): the response to a duplicate copy
        # never overtakes the response to the original.
        at = max(self.now + self._latency(), self.resp_fifo.get(i, 0) + 1)
        self.resp_fifo[i] = at
        self._schedule(at, "respond", (i, corr, outcome, self.coord_gen))

    def _on_respond(self, i: int, corr: int, outcome: tuple, gen: int) -> None:
        c = self.clients[i]
        if gen != self.coord_gen or c.inflight != corr:
            self._log(f"c{i} ignores response corr={corr} (not in flight)")
            return
        if isinstance(c, ClassicClient):
            actions = (
                c.on_response(outcome[1], self.meta())
                if outcome[0] == "ok"
                else c.on_error(outcome[1])
            )
            c.fresh_generation = True
        elif outcome[0] == "ok":
            actions = c.on_response(outcome[1])
        else:
            actions = c.on_error(outcome[1])
        self._log(f"c{i} handles corr={corr}: {c.describe(self.topic_label)} actions={actions}")
        self._after(i, actions)

    def _after(self, i: int, actions: list[str]) -> None:
        c = self.clients[i]
        for a in actions:
            if a == "revoke":
                slow = (
                    self.faults_on and "slow-revoke" in self.p.faults and self.rng.random() < 0.15
                )
                if slow:
                    self.summary.faults["slow-revoke"] += 1
                    delay = c.rebalance_timeout_ms + self.rng.randint(1, 10_000)
                    self._log(
                        f"  fault: c{i} revokes {fmt(c.revoking, self.topic_label)} slowly ({delay} ms)"
                    )
                else:
                    delay = self.rng.randint(0, self.p.max_revoke_ms)
                self._schedule(
                    self.now + delay, "revoked", (i, c.revoke_token, delay > c.rebalance_timeout_ms)
                )
            elif a == "send":
                self._arm_tick(i, 0)
            elif a == "rejoin":
                self._arm_tick(i, self.rng.randint(0, 100))
            elif a == "retry":
                self._arm_tick(i, self.p.retry_backoff_ms)
            elif a == "fatal":
                self._schedule(
                    self.now + self.rng.randint(1, self.p.restart_delay_max_ms), "start", (i,)
                )
        if isinstance(c, SimClient) and "send" not in actions and c.phase in (JOINING, MEMBER):
            # The member's interval, back-off or deadline may have moved: it says when next.
            self._arm_tick(i, self._tick_delay(c))

    def _on_revoked(self, i: int, token: int, past_poll_timeout: bool = False) -> None:
        c = self.clients[i]
        if token == c.revoke_token and c.revoking:
            self._commit_offsets(
                i
            )  # commit before giving the partitions up (auto-commit on revoke)
        if isinstance(c, ClassicClient):
            actions = c.finish_revocation(token, poll_timeout=past_poll_timeout)
        else:
            actions = c.finish_revocation(token)
        if actions:
            self._log(f"c{i} finished revoking: {c.describe(self.topic_label)}")
        self._after(i, actions)

    def _on_timeout(self, i: int, corr: int) -> None:
        c = self.clients[i]
        c.on_timeout()
        self._log(f"c{i} request corr={corr} timed out")
        if c.phase != DOWN:
            self._arm_tick(i, self.p.retry_backoff_ms)

    # ------------------------------------------------------------------ faults (faults.py)

    def _on_fault(self, kind: str) -> None:
        self.injector.apply(kind)

    def _on_recreate(self, name: str) -> None:
        self.injector.recreate_topic(name)

    # ------------------------------------------------------------------ invariants

    def _check(self) -> None:
        group = self.group
        classic = self.classic_group
        failures = inv.check_safety(
            group, self.clients, self.p.invariants, classic=classic, topic_ids=self._topic_ids()
        )
        if failures:
            name = failures[0][0]
            self._fail(name, "\n".join(f"[{n}] {m}" for n, m in failures))
        live = self.h.shard.snapshot()
        replica = self.replica.snapshot()
        for (
            gid,
            cg,
        ) in self.replica.classic_groups.items():  # a replayed classic group is its last record
            if cg.durable is not None and cg.to_record_value() != cg.durable:
                self._fail(
                    inv.REPLAY_EQUALS_LIVE,
                    f"the replayed classic group {gid} does not express its last "
                    f"record: {cg.to_record_value()} != {cg.durable}",
                )
        if live != replica:
            self._fail(
                inv.REPLAY_EQUALS_LIVE,
                "replaying the stored records does not yield the live state:\n"
                + diff(live, replica),
            )
        if group is not None and group.waiting:
            self._check_parked(group)
        _l, zombies = inv.live_claims(group, self.clients, classic)
        if zombies:
            self.summary.zombie_steps += 1
        self.summary.checks += 1

    def _check_parked(self, group: Any) -> None:
        """I7: every member the core holds parked has a request that waits for its answer,
        and something is on its way to answer it (a first target, a computation)."""
        lost = sorted(
            m for m, tokens in group.waiting.items() if not any(t in self.parked for t in tokens)
        )
        if lost:
            self._fail(
                inv.PARKED_ANSWERED_ONCE,
                f"the core holds joins of {lost} parked that no request waits for",
            )
        if group.group_id not in self.first_targets and group.group_id not in self.assigning:
            self._fail(
                inv.PARKED_ANSWERED_ONCE,
                f"joins of {sorted(group.waiting)} are parked, but no first target is asked "
                "for and no target is being computed: nothing will answer them",
            )

    def _converged(self) -> bool:
        return not self._why_not_converged()

    def _why_not_converged(self) -> str:
        group = self.group
        classic = self.classic_group
        if group is None and classic is None:
            return "no group"
        pending = sorted(
            {kind for _t, _s, kind, _p in self.queue if kind in ("start", "recreate")}
            | {
                "delayed or stale request"
                for at, _s, kind, pl in self.queue
                if kind == "deliver"
                and (
                    self.clients[pl[0]].inflight != pl[1]
                    or at > self.now + 2 * self.p.max_latency_ms
                )
            }
        )
        if pending:
            return f"fault follow-ups still pending: {pending}"
        if group is not None and group.waiting:
            return f"joins of {sorted(group.waiting)} are still parked"
        if group is None:
            if classic.state.value != "Stable":
                return f"classic group is {classic.state.value}"
        elif group.state() is not GroupState.STABLE:
            return f"group is {group.state().value}"
        owners: dict[tuple[str, int], list[str]] = {}
        for c in self.clients:
            if c.phase != MEMBER:
                return f"c{c.index} is {c.phase}"
            if isinstance(c, ClassicClient):
                why = self._classic_not_converged(c, group, classic)
                if why:
                    return why
                for t, ps in c.owned.items():
                    for part in ps:
                        owners.setdefault((t, part), []).append(c.member_id)
                continue
            if group is None:
                return f"c{c.index} is a KIP-848 client but the group is classic"
            if c.member_id not in group.members:
                return f"c{c.index} ({c.member_id}) is not a member"
            if c.server_assignor != group.members[c.member_id].server_assignor_name:
                return f"c{c.index}'s server assignor {c.server_assignor} has not reached the coordinator"
            if c.revoking or c.inflight is not None and c.epoch != group.group_epoch:
                return f"c{c.index} is still reconciling"
            if c.epoch != group.group_epoch:
                return f"c{c.index} at epoch {c.epoch}, group at {group.group_epoch}"
            for t, ps in c.owned.items():
                for part in ps:
                    owners.setdefault((t, part), []).append(c.member_id)
        expected = set()
        subscribed = set()
        for c in self.clients:
            subscribed |= set(c.topics)
        for name in subscribed:
            topic = self.h.registry.topics.get(name)
            if topic is None:
                continue
            for part in range(topic.num_partitions):
                expected.add((topic.topic_id, part))
        doubles = sorted(k for k, v in owners.items() if len(v) > 1)
        if doubles:
            return f"partitions owned twice {doubles[:6]}"
        missing = sorted(expected - set(owners))
        if missing:
            return f"unowned partitions {missing[:6]}"
        extra = sorted(set(owners) - expected)
        if extra:
            return f"owned partitions of no subscribed topic {extra[:6]}"
        return ""

    def _classic_not_converged(self, c: ClassicClient, group: Any, classic: Any) -> str:
        if (
            c.revoking
            or c.rejoin_needed
            or (c.inflight is not None and c.inflight_kind != "heartbeat")
        ):
            return f"c{c.index} is still rebalancing"
        if group is not None:
            member = group.members.get(c.member_id)
            if member is None or member.classic_member_metadata is None:
                return f"c{c.index} ({c.member_id}) is not a classic member of the consumer group"
            if not c.generation == member.member_epoch == group.group_epoch:
                return (
                    f"c{c.index} at generation {c.generation}, member epoch {member.member_epoch}, "
                    f"group epoch {group.group_epoch}"
                )
            if member.state.name != "STABLE":
                return f"c{c.index} is {member.state.name} at the coordinator"
            return ""
        if c.member_id not in classic.members:
            return f"c{c.index} ({c.member_id}) is not a member of the classic group"
        if c.generation != classic.generation:
            return f"c{c.index} at generation {c.generation}, classic group at {classic.generation}"
        return ""

    def _fail(self, name: str, message: str) -> None:
        raise InvariantViolation(name, failure_report(self, name, message))


def _default_assignors() -> list[Any]:
    from assignors.uniform import UniformAssignor

    out: list[Any] = [UniformAssignor()]
    try:
        from assignors.range import RangeAssignor

        rng = RangeAssignor()
        out.append(rng)
    except ImportError:  # pragma: no cover - until the range assignor lands
        pass
    return out


def simulate(params: SimParams, **kw: Any) -> SimSummary:
    return Simulation(params, **kw).run()
