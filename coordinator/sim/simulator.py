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
  copy is processed right after the first, no other request between them; its response is
  ignored by correlation id), ``delay``
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
* The coordinator is the runtime's own driver (:mod:`.coordinator`): requests become the very
  commands the server submits, and turns, group commit, answers after durability, parked
  requests, first targets, offloaded targets, rollback and timers are the driver's decisions, on
  virtual time, with a simulated store (``store-fail``, ``slow-fsync``) and simulated workers
  (``late-offload``); ``busy-loop`` holds the loop up so that requests queue and run in one
  turn. A parked request's answer (a classic JoinGroup/SyncGroup at its barrier, a join before
  its group's first target) reaches the waiting client like any response.
* Invariants after every step: see :mod:`coordinator.sim.invariants` (I1–I3, I7 on the driver),
  plus I4: a replica fed every durable record through the codec equals the live shard whenever
  nothing is in flight.
* ``push``: after every change the coordinator makes durable, each KIP-848 member in the group
  whose view calls for it (``coordinator/core/push.py``, the server's very rule) gets a push
  message one network latency later; the member heartbeats at once if it has something to do.
  A stream opens when a client becomes a member and closes when it stops being one (and on a
  coordinator restart); its first message always goes out.
* ``parks_joins`` (on by default, as in the runtime; only with batching): a join to a group
  nobody has been answered in yet (new or emptied) is parked (``Pending``) until the group's
  first target, which the driver computes once joins to the group stop arriving.
  ``parks_joins=False`` gives Kafka's immediate answers.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Sequence
from typing import Any

from coordinator.core.commands import SequentialIds
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.errors import ErrorCode
from coordinator.core.push import MemberView, member_view, push_due
from coordinator.core.topics import NewTopic
from legacy_bridge.messages import Heartbeat, JoinGroupResponse, SyncGroup

from . import invariants as inv
from .classic_client import COOPERATIVE, EAGER, SYNCING, ClassicClient, Meta
from .client import DOWN, JOINING, LEAVING, MEMBER, ClientModelError, SimClient, fmt
from .commits import commit_offsets
from .convergence import why_not_converged
from .coordinator import SimCoordinator
from .faults import (
    ALL_FAULTS,
    CLASSIC_ONLY_FAULTS,
    EXTRA_FAULTS,
    KNOWN_FAULTS,
    STORE_FAULTS,
    FaultInjector,
    parse_faults,
)
from .groups import GroupReads, SimGroup, new_groups
from .params import CLASSIC_PROTOCOLS, FAULT_RATE, GROUP, SimParams
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
    "FAULT_RATE",
    "KNOWN_FAULTS",
    "GROUP",
    "InvariantViolation",
    "SimParams",
    "SimSummary",
    "Simulation",
    "parse_faults",
    "simulate",
]


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
            consumer_assignor_offload_inline_max_changed_members=params.offload_inline_max_changed,
        )
        self.seq = 0
        self.queue: list[tuple[int, int, str, tuple]] = []
        self.trace: list[str] = []
        self.step = 0
        self.summary = SimSummary(params)
        self.faults_on = True
        # The coordinator: the runtime's driver on virtual time, with the bridged shard (classic
        # groups, classic members in consumer groups, upgrade and downgrade; a fleet without
        # classic clients never creates a classic group).
        self.coord = SimCoordinator(
            self,
            config=config,
            assignors=assignors,
            ids=SequentialIds(),
            parks_joins=params.parks_joins,
        )
        self.id_name: dict[str, str] = {}  # every topic id ever created -> name
        self.corr = 0
        # the groups (groups.py): their ids, clients, and what is tracked of each
        self.groups: list[SimGroup] = new_groups(
            params.groups, params.coordinator_partitions, params.members
        )
        self.reads = GroupReads(self)
        self.fifo: dict[int, int] = {}  # client -> time of its last scheduled delivery
        # client -> (member id, epoch, partitions) of its last commits (a stale commit replays
        # one of them)
        self.commit_views: dict[int, list[tuple[str, int, list[tuple[str, int]]]]] = {}
        self.stale_rng = random.Random(f"{params.seed}-stale-commit")
        self.resp_fifo: dict[int, int] = {}  # client -> time of its last scheduled response
        self._tick_gen: dict[int, int] = {}  # client -> serial of its live heartbeat timer
        # client -> (member id, coordinator generation, last view pushed on its stream)
        self.pushed: dict[int, tuple[str, int, MemberView]] = {}
        self.tick_serial = 0
        self.busy_until = 0  # busy-loop: requests arriving before this are read then
        self.postponed: list[Callable[[], None]] = []
        # duplicate: requests whose copy follows (client, corr); copies due (their original
        # ran); what arrived between an original and its copy, run right after the copy
        self.duplicated: set[tuple[int, int]] = set()
        self.copies_due: set[tuple[int, int]] = set()
        self.behind_copies: list[tuple[Callable[[], None], Any, Any]] = []
        self.injector = FaultInjector(self)
        self.topic_names = [f"t{i}" for i in range(params.topics)]
        self.topic_label: dict[str, str] = {}
        self.deleted: set[str] = set()
        self.quiet_since: int | None = None
        self.clients: list[Any] = []
        for name in self.topic_names:
            self.create_topic(name, params.partitions)
        self.coord.write_now()
        self.switch_to: dict[int, Any] = {}  # client index -> the client replacing it at restart
        for i in range(params.members * params.groups):
            if i % params.members >= params.members - params.classic:
                protocol = (
                    params.protocol
                    if params.protocol != "mixed"
                    else (COOPERATIVE if i % params.members % 2 else EAGER)
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

    @property
    def store(self) -> list[tuple[bytes, bytes | None]]:
        """Every record the coordinator wrote, encoded, in the store's order."""
        return self.coord.journal()

    @property
    def now(self) -> int:
        return self.coord.clock.now

    @now.setter
    def now(self, value: int) -> None:
        self.coord.clock.now = value

    def _new_client(
        self, i: int, *, classic: bool, protocol: str = EAGER, incarnation: int = 0
    ) -> Any:
        p = self.p
        # Heterogeneous subscriptions: a group's first client subscribes to t0 only when there
        # are several topics; the rest subscribe to everything.
        first = i % p.members == 0
        topics = tuple(self.topic_names[:1]) if first and p.topics > 1 else tuple(self.topic_names)
        instance_id = f"inst-{i}" if i % p.members < p.static_members else None
        group_id = self.group_of(i).gid
        if classic:
            return ClassicClient(
                index=i,
                topics=topics,
                protocol=protocol,
                instance_id=instance_id,
                also_cooperative_sticky=(p.protocol == "mixed"),
                rebalance_timeout_ms=p.rebalance_timeout_ms,
                session_timeout_ms=p.session_timeout_ms,
                group_id=group_id,
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
            group_id=group_id,
            incarnation=incarnation,
            clock=lambda: self.now,
        )

    def meta(self) -> Meta:
        """The cluster metadata as classic clients see it."""
        return Meta(
            by_name={
                n: (t.topic_id, t.num_partitions) for n, t in self.coord.registry.topics.items()
            },
            name_of=self.id_name,
        )

    # ------------------------------------------------------------------ plumbing

    def create_topic(self, name: str, partitions: int) -> None:
        """Create (or re-create) a topic; a creation whose write fails is tried again."""

        def done(error: BaseException | None) -> None:
            if error is not None:
                self._log(f"the creation of topic {name} was not written: it is tried again")
                self._schedule(self.now + self.p.retry_backoff_ms, "recreate", (name,))

        topic = NewTopic(name=name, num_partitions=partitions)
        (res,) = self.coord.topics(lambda r: r.create_topics([topic]), done=done)
        tid = res.topic_id
        self.id_name[tid] = name
        self.topic_label[tid] = (
            f"{name}#{sum(1 for v in self.topic_label.values() if v.startswith(name + '#'))}"
        )

    def _schedule(self, at: int, kind: str, payload: tuple) -> None:
        self.seq += 1
        heapq.heappush(self.queue, (at, self.seq, kind, payload))

    def _log(self, text: str) -> None:
        self.trace.append(f"#{self.step} t={self.now} {text}")

    def _push(self) -> None:
        """The push streams (ConsumerGroupWatch) after a durable change: one message to each
        member whose view calls for it, one network latency later."""
        for i, c in enumerate(self.clients):
            group = self.consumer_group(self.group_of(i))
            if not isinstance(c, SimClient) or c.phase != MEMBER or group is None:
                self.pushed.pop(i, None)  # no member, no stream
                continue
            view = member_view(group, c.member_id)
            last = self.pushed.get(i)
            if last is not None and last[:2] != (c.member_id, self.coord.gen):
                last = None  # another incarnation, or the coordinator restarted: a new stream
            if view is None or not push_due(view, None if last is None else last[2]):
                continue
            self.pushed[i] = (c.member_id, self.coord.gen, view)
            self._schedule(self.now + self._latency(), "push", (i, view, self.coord.gen))

    def _on_push(self, i: int, view: MemberView, gen: int) -> None:
        c = self.clients[i]
        if gen != self.coord.gen or not isinstance(c, SimClient):
            return  # streams break when the coordinator restarts
        actions = c.push(view)
        self._log(f"c{i} push: target={fmt(view.target, self.topic_label)} actions={actions}")
        self._after(i, actions)

    def group_of(self, i: int) -> SimGroup:
        """Client i's group."""
        return self.groups[i // self.p.members]

    def consumer_group(self, g: SimGroup) -> Any:
        return self.coord.shard_of(g.gid).groups.get(g.gid)

    def classic_of(self, g: SimGroup) -> Any:
        return self.coord.shard_of(g.gid).classic_groups.get(g.gid)

    def clients_of(self, g: SimGroup) -> list[Any]:
        return [self.clients[i] for i in g.clients]

    @property
    def group(self) -> Any:
        """The first group's consumer group (a one-group run's group)."""
        return self.consumer_group(self.groups[0])

    @property
    def classic_group(self) -> Any:
        return self.classic_of(self.groups[0])

    @property
    def classic_plans(self) -> dict[int, tuple]:
        return self.groups[0].classic_plans

    @property
    def downgraded(self) -> dict[int, tuple]:
        return self.groups[0].downgraded

    def _topic_ids(self) -> dict[str, str]:
        return {n: t.topic_id for n, t in self.coord.registry.topics.items()}

    def _latency(self) -> int:
        return self.rng.randint(1, self.p.max_latency_ms)

    def fault(self, name: str) -> bool:
        """Does this message (or batch, or job) meet fault ``name`` (while faults are on)?"""
        if not (self.faults_on and name in self.p.faults):
            return False
        rate = self.p.store_fault_rate if name in STORE_FAULTS else self.p.net_fault_rate
        return self.rng.random() < rate

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
                    if self.coord.moves is not None and self.coord.moves.under_way():
                        s.events["partition-move-under-way-when-faults-stop"] += 1
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
        s.records = self.coord.records
        g = self.group
        cg = self.classic_group
        if g is None and cg is not None:
            s.final_state, s.final_epoch = cg.state.value, cg.generation
        else:
            gid = self.groups[0].gid
            s.final_state = self.coord.shard_of(gid).group_state(gid).value
            s.final_epoch = 0 if g is None else g.group_epoch
        s.trace_digest = digest(self.trace)
        return s

    def _next_step(self) -> bool:
        """Process events up to the next step, each followed by what the coordinator's loop
        runs on that instant. The coordinator's own events (a write done, a timer or a wait
        due, a worker's outcome) happen between steps: checked, not counted."""
        while self.queue:
            at, _seq, kind, payload = heapq.heappop(self.queue)
            if self._is_noop(kind, payload):
                continue  # a superseded client timer or a timeout of an answered request
            self.now = max(self.now, at)
            self.summary.events[kind] += 1
            step = kind != "coordinator"
            self.step += step
            getattr(self, "_on_" + kind)(*payload)
            self.coord.settle()
            if not step:
                self._check(counted=False)
                continue
            if self.faults_on and self.rng.random() < self.p.fault_rate:
                self.injector.schedule_one()
            if self.faults_on and self.coord.moves is not None:
                self.coord.moves.maybe_begin()  # a random stream of its own
            return True
        return False

    def _is_noop(self, kind: str, payload: tuple) -> bool:
        if kind == "tick":
            return payload[1] != self._tick_gen.get(payload[0])
        if kind == "timeout":
            return self.clients[payload[0]].inflight != payload[1]
        return False

    def _on_coordinator(self, gen: int, what: str, fn: Callable[[], Any]) -> None:
        self.coord.run(gen, what, fn)

    # ------------------------------------------------------------------ client events

    def _on_start(self, i: int) -> None:
        if i in self.switch_to:
            self.clients[i] = self.switch_to.pop(i)
        c = self.clients[i]
        c.start()
        self._log(f"c{i} starts as {c.member_id}")
        self._send(i)

    def _on_tick(self, i: int, gen: int) -> None:
        c = self.clients[i]
        commit_offsets(self, i)
        self.reads.maybe_read(i)
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
        if classic and isinstance(req, SyncGroup) and req.assignments:
            assert c.assigned_snapshot is not None  # taken as it assigned
            self.group_of(i).classic_plans[req.generation_id] = c.assigned_snapshot
            self.group_of(i).classic_withheld[req.generation_id] = dict(c.withheld)
        self._log(f"c{i} sends {req_text(req, self.topic_label)} corr={corr}")
        timeout = (
            c.request_timeout(self.p.request_timeout_ms) if classic else self.p.request_timeout_ms
        )
        self._schedule(self.now + timeout, "timeout", (i, corr))
        if self.fault("lose-request"):
            self.summary.faults["lose-request"] += 1
            self._log(f"  fault: request corr={corr} lost")
        else:
            delay = self._latency()
            if self.fault("delay"):
                self.summary.faults["delay"] += 1
                delay += self.rng.randint(
                    self.p.request_timeout_ms // 2, 2 * self.p.request_timeout_ms
                )
                self._log(f"  fault: request corr={corr} delayed by {delay} ms")
            at = self.now + delay
            if not self.fault("reorder"):
                at = max(at, self.fifo.get(i, 0) + 1)
            else:
                self.summary.faults["reorder"] += 1
            self.fifo[i] = max(self.fifo.get(i, 0), at)
            self._schedule(at, "deliver", (i, corr, req, self.coord.gen, False))
            if self.fault("duplicate"):
                self.summary.faults["duplicate"] += 1
                self.duplicated.add((i, corr))
                self.fifo[i] = at + 1
                self._schedule(at + 1, "deliver", (i, corr, req, self.coord.gen, True))
                self._log(f"  fault: request corr={corr} duplicated")
        if c.phase != LEAVING:
            self._arm_tick(i, c.heartbeat_interval_ms)

    def _on_deliver(self, i: int, corr: int, req: Any, gen: int, dup: bool) -> None:
        key = (i, corr)
        if gen != self.coord.gen:
            self._log(f"request corr={corr} from c{i} lost in a coordinator restart")
            self.duplicated.discard(key)
            if dup and key in self.copies_due:
                self.when_running(lambda: None, copy=key)
            return
        self.when_running(
            lambda: self._submit(i, corr, req, dup),
            copy=key if dup else None,
            original=key if not dup and key in self.duplicated else None,
        )

    def when_running(
        self,
        submit: Callable[[], None],
        *,
        copy: tuple[int, int] | None = None,
        original: tuple[int, int] | None = None,
    ) -> None:
        """Submit now, or — the loop is busy (``busy-loop``) — when it runs again. A request
        arriving between a duplicated request and its copy (``duplicate``) waits for the copy
        and runs right after it: no other request runs between the two."""
        if self.copies_due and (copy is None or copy not in self.copies_due):
            self.behind_copies.append((submit, copy, original))
            return
        if original is not None:
            self.duplicated.discard(original)
            self.copies_due.add(original)
        if self.now < self.busy_until:
            self.postponed.append(submit)
        else:
            submit()
        if copy is not None:
            self.copies_due.discard(copy)
            if not self.copies_due and self.behind_copies:
                behind, self.behind_copies = self.behind_copies, []
                self.summary.events["request-held-behind-a-duplicate"] += len(behind)
                for held, held_copy, held_original in behind:
                    self.when_running(held, copy=held_copy, original=held_original)

    def _on_resume(self) -> None:
        """The busy loop runs again: its shard spent its share, so the requests read now queue
        and run one after the other in one turn."""
        self.busy_until = 0
        postponed, self.postponed = self.postponed, []
        self._log(f"the coordinator's loop runs again: {len(postponed)} requests queue")
        for index in range(self.coord.partitions):
            self.coord.driver.turns.charge(index, 1.0)
        for submit in postponed:
            submit()

    def _submit(self, i: int, corr: int, req: Any, dup: bool) -> None:
        label = f"corr={corr}{' (dup)' if dup else ''} from c{i}"
        problems: list[str] = []

        def reply(outcome: tuple) -> None:
            if outcome[0] == "error":
                self._log(f"coordinator: {label} -> {ErrorCode(outcome[1]).name}: {outcome[2]}")
            else:
                self._log(f"coordinator: {label} -> {resp_text(outcome[1], self.topic_label)}")
                if problems and inv.EPOCHS_BOUNDED in self.p.invariants:
                    self._fail(inv.EPOCHS_BOUNDED, problems[0])
            self._respond(i, corr, outcome)

        self.coord.request(req, reply, label, after=self._forgotten_check(i, req, problems))

    def _forgotten_check(
        self, i: int, req: Any, problems: list[str]
    ) -> Callable[[Any, Any], None] | None:
        """I2's check of a Heartbeat or SyncGroup carrying the generation its client holds from
        before a restart that forgot it (:func:`invariants.check_forgotten_answer`), as it runs;
        judged once answered (an answer lost to a failed write never reaches the client)."""
        c = self.clients[i]
        if not (
            isinstance(req, Heartbeat | SyncGroup)
            and isinstance(c, ClassicClient)
            and req.member_id == c.member_id
            and req.generation_id == c.forgotten_generation
        ):
            return None
        member_id, generation = req.member_id, req.generation_id

        def check(shard: Any, result: Any) -> None:
            error = getattr(result.response, "error_code", ErrorCode.NONE)  # Pending: parked
            problems.extend(
                inv.check_forgotten_answer(
                    shard, c.group_id, member_id, generation, type(req).__name__, error
                )
            )

        return check

    def _respond(self, i: int, corr: int, outcome: tuple) -> None:
        if self.fault("lose-response"):
            self.summary.faults["lose-response"] += 1
            self._log(f"  fault: response corr={corr} lost")
            return
        # Responses are FIFO per client too (one connection): the response to a duplicate copy
        # never overtakes the response to the original.
        at = max(self.now + self._latency(), self.resp_fifo.get(i, 0) + 1)
        self.resp_fifo[i] = at
        self._schedule(at, "respond", (i, corr, outcome, self.coord.gen))

    def _on_respond(self, i: int, corr: int, outcome: tuple, gen: int) -> None:
        c = self.clients[i]
        if gen != self.coord.gen or c.inflight != corr:
            self._log(f"c{i} ignores response corr={corr} (not in flight)")
            return
        if isinstance(c, ClassicClient):
            actions = (
                c.on_response(outcome[1], self.meta())
                if outcome[0] == "ok"
                else c.on_error(outcome[1])
            )
            answer = outcome[1]
            if (
                outcome[0] == "ok"
                and isinstance(answer, JoinGroupResponse)
                and not answer.error_code
            ):
                c.forgotten_generation = None  # a generation the coordinator holds
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
            commit_offsets(self, i)  # before giving the partitions up (auto-commit on revoke)
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

    def _check(self, *, counted: bool = True) -> None:
        coord = self.coord
        zombie = stale = False
        failures: list[tuple[str, str]] = []
        for g in self.groups:  # I1, I1b, I2, I3 of each group
            classic = self.classic_of(g)
            group = self.consumer_group(g)
            if group is not None:
                g.consumer_metadata = tuple(
                    sorted(
                        (n, (t.topic_id, t.num_partitions))
                        for n, t in group.subscription_metadata.items()
                    )
                )
            elif classic is not None and g.consumer_metadata is not None:
                g.downgraded[int(classic.generation)] = g.consumer_metadata
                g.consumer_metadata = None
            clients = self.clients_of(g)
            if coord.serves(coord.partition_of(g.gid)):  # away (partition-move): not re-created
                inv.note_recreated(group, clients, classic)
            found = inv.check_safety(
                group, clients, self.p.invariants, classic=classic, topic_ids=self._topic_ids()
            )
            failures += [(n, self._in(g, m)) for n, m in found]
            _l, zombies = inv.live_claims(group, clients, classic)
            zombie = zombie or bool(zombies)
            stale = stale or any(inv.stale_owned(c) for c in zombies)
        failures += [(inv.PARKED_ANSWERED_ONCE, m) for m in inv.check_parked(coord.driver)]
        if failures:
            name = failures[0][0]
            self._fail(name, "\n".join(f"[{n}] {m}" for n, m in failures))
        for index, replica in enumerate(coord.replicas):  # I4 of each coordinator partition
            for gid, cg in replica.classic_groups.items():  # a replayed group: its last record
                if cg.durable is not None and cg.to_record_value() != cg.durable:
                    self._fail(
                        inv.REPLAY_EQUALS_LIVE,
                        f"the replayed classic group {gid} does not express its last "
                        f"record: {cg.to_record_value()} != {cg.durable}",
                    )
            if not coord.busy and coord.serves(index):  # away (partition-move): at its load
                live = coord.shards[index].snapshot()
                durable = replica.snapshot()
                if live != durable:
                    self._fail(
                        inv.REPLAY_EQUALS_LIVE,
                        "replaying the stored records does not yield the live state"
                        + (f" of coordinator partition {index}" if self.p.multi else "")
                        + ":\n"
                        + diff(live, durable),
                    )
        self.summary.zombie_steps += zombie
        self.summary.stale_steps += stale
        self.summary.checks += counted

    def _in(self, g: SimGroup, message: str) -> str:
        """A message about group g (named when there are several)."""
        return f"group {g.gid}: {message}" if self.p.groups > 1 else message

    def _converged(self) -> bool:
        return not why_not_converged(self)

    def _why_not_converged(self) -> str:
        return why_not_converged(self)

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
