"""Exhaustive checking of small scopes: breadth-first search over every interleaving, run on
the runtime's own driver (``coordinator/runtime/driver.py``) on virtual time.

Scope: ``members`` KIP-848 clients (2–3) — or ``classic`` classic clients, cooperative — in one
group on one topic with ``partitions`` partitions (2–4), explored to ``depth`` actions. Requests
become the very commands the server submits; answers, parked requests and their completions,
first targets and offloads are the driver's. The store writes at once. In every state the
enabled actions are:

* ``send i``      client i sends its next request (join, ack, heartbeat) — at most one in flight;
* ``deliver i``   the coordinator runs client i's oldest request in its own turn (per-client FIFO);
* ``lose-req i``  client i's oldest request is lost;
* ``respond i``   client i receives its oldest response (ignored unless it matches the request in flight);
* ``lose-resp i`` client i's oldest response is lost;
* ``timeout i``   client i's request timed out (only once its request or response is lost;
  never while the coordinator holds it parked: it answers long before a request timeout);
* ``revoked i``   client i's revocation callback finishes;
* ``fire k``      a coordinator timer fires (session, rebalance, classic join/sync). Time is
  abstracted away: any armed timer may fire at any point, which over-approximates every timing
  (a member can always be slow), so safety proven here holds for all timings within the depth
  bound.

With ``turns``: ``turn i j`` — the coordinator's loop was held up, so client i's and client
j's oldest requests queue on the shard and run one after the other in one turn, their callers
resuming after both (a command queued behind a parked one in the same turn). With
``duplicates``: ``dup i`` — client i's oldest request in flight is delivered twice in a row
(once per path; nothing runs between the two, as on one connection). Classic clients also ``rejoin i``: the member starts a new JoinGroup (the
leader saw the metadata change, the application asked), and start as the members of a settled
group (generation 1, c0 its leader): the search begins there.

With ``batching`` (``group.consumer.assignment.interval.ms`` = 1 s) a target computed at time
T holds back later changes until its ASSIGN timer fires; firing it moves the explorer's clock to
T + 1 s (the only thing that moves it). With ``offload`` (every computation of a group of 2
members or more, however small the change) the driver copies a due target's inputs for a
worker once the asking command is durable; the worker's outcome comes back at any later point,
and ``restart`` may happen (once per path):

* ``offload-done g``   the worker's outcome is applied as a command (late results included);
* ``offload-fail g``   (``assignor_failures``) the worker's assignor raised: the outcome carries
  the error (the target stays; parked joins are answered UNKNOWN_SERVER_ERROR and join again);
* ``restart``          the coordinator reloads its records: requests, responses, parked requests
  and computations are lost, timers re-armed by ``on_loaded``.

With ``parks_joins`` (batching on; the runtime's default) a join to a group that nobody has been
answered in yet is parked until the group's first target: ``first-target g`` — the driver calls
``first_target`` for g (at any later point: any number of joins may be parked before it).

Invariants I1, I1b, I2, I3 and I7 (every parked request answered exactly once, nothing parked
with nothing on its way to answer it; :mod:`coordinator.sim.invariants`) are checked in every
reachable state. States are deduplicated by a canonical key (the shard's snapshot and the
classic groups' in-memory state, armed timers, client states, messages in flight, the driver's
parked requests, first targets and computations). The search is breadth-first, so the first
violation found has a shortest path, printed action by action.

One concrete world is moved between states: forward by applying actions, back by rolling the
state machines' undo logs back (kept whole: ``UndoLog.keeps_history``) and restoring what they
do not hold (clients, messages, the driver's timers, parked requests, first targets and
computations) from values captured on the way down.
"""

from __future__ import annotations

import copy
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from coordinator.core.commands import ConsumerGroupHeartbeat
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.errors import CoordinatorError, ErrorCode, IllegalStateError
from coordinator.core.records import Record
from coordinator.core.target_assignment import AssignmentOutcome, run_job
from coordinator.core.timers import ASSIGN, ArmTimer, CancelTimer, DueTimer
from coordinator.core.topics import NewTopic, TopicRegistry
from coordinator.factory import Shard, new_shard
from coordinator.runtime import requests
from coordinator.runtime.driver import REGISTRY, Driver, RuntimeState
from coordinator.runtime.timing import EXPIRE_OFFSETS
from coordinator.virtual import VirtualClock, VirtualFuture, VirtualWorld
from legacy_bridge.common import CLASSIC_INITIAL_JOIN, CLASSIC_JOIN

from . import invariants as inv
from .classic_client import COOPERATIVE, ClassicClient, Meta
from .client import MEMBER, SimClient, fmt
from .report import coordinator_lines

GROUP = "grp"


class _Ids:
    """Sequential ids whose counter is part of the explored state (a member id, a group uid)."""

    def __init__(self) -> None:
        self.n = 0

    def _next(self) -> int:
        self.n += 1
        return self.n

    def new_member_id(self) -> str:
        return f"member-{self._next()}"

    def new_uuid(self) -> str:
        return f"member-{self._next()}"

    def new_group_uid(self) -> str:
        return "cgp_" + f"{self._next():026d}"

    def new_topic_id(self) -> str:
        return f"topic-{self._next()}"


class _Machines(NamedTuple):
    """One coordinator process: its state machines, its driver and the driver's world."""

    shard: Shard
    registry: TopicRegistry
    driver: Driver
    world: VirtualWorld


class _Saved(NamedTuple):
    """What the undo logs do not hold, captured between actions (nothing in flight)."""

    machines: _Machines
    marks: tuple[int, int]
    clients: tuple[Any, ...]
    requests: tuple[tuple[tuple[int, Any], ...], ...]
    responses: tuple[tuple[tuple[int, tuple], ...], ...]
    corr: int
    now: int
    restarts: int
    dups: int
    stored: int
    ids: int
    timers: tuple[tuple[Any, int, int], ...]
    parked: tuple[tuple[tuple[int, int], VirtualFuture, Any], ...]
    first_targets: tuple[tuple[str, Any], ...]
    assigning: frozenset[str]
    jobs: tuple[tuple[str, Any], ...]


@dataclass(slots=True)
class _Node:
    parent: int
    action: str
    label: str
    depth: int


@dataclass(slots=True)
class ExploreResult:
    members: int
    partitions: int
    depth: int
    states: int = 0
    transitions: int = 0
    max_depth_reached: int = 0
    truncated: bool = False
    violation: str | None = None
    violation_name: str | None = None
    path: list[str] = field(default_factory=list)
    per_depth: list[int] = field(default_factory=list)
    checked: tuple[str, ...] = ("I1", "I1b", "I2", "I3", "I7")
    covered: Counter[str] = field(default_factory=Counter)
    """Parked-request situations met, counted over the explored transitions."""
    start: str = ""
    """Where the search starts (classic clients: the settled group)."""

    def render(self) -> str:
        lines = [
            f"explored {self.members} members x {self.partitions} partitions to depth {self.depth}: "
            f"{self.states} distinct states, {self.transitions} transitions"
            + (" (TRUNCATED at the state limit)" if self.truncated else ""),
            "new states per depth: " + " ".join(str(n) for n in self.per_depth),
        ]
        if self.start:
            lines.append(f"from {self.start}")
        if self.covered:
            lines.append(
                "parked requests (transitions): "
                + ", ".join(f"{k} {n}" for k, n in sorted(self.covered.items()))
            )
        if self.violation is None:
            lines.append(
                f"safety invariants ({', '.join(self.checked)}) hold in every explored state"
            )
        else:
            lines.append(
                f"INVARIANT {self.violation_name} VIOLATED after {len(self.path)} actions (a shortest path):"
            )
            lines.extend(f"  {n + 1:2d}. {a}" for n, a in enumerate(self.path))
            lines.append(self.violation)
        return "\n".join(lines)


class _Violation(Exception):
    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name
        self.message = message


class Explorer:
    def __init__(
        self,
        *,
        members: int = 2,
        partitions: int = 2,
        depth: int = 12,
        max_states: int = 200_000,
        assignors: Sequence[Any] | None = None,
        static_members: int = 0,
        timers: bool = True,
        losses: bool = True,
        invariants: Sequence[str] = inv.SAFETY,
        batching: bool = False,
        offload: bool = False,
        restarts: bool = False,
        parks_joins: bool = False,
        assignor_failures: bool = False,
        classic: bool = False,
        turns: bool = False,
        duplicates: bool = False,
    ) -> None:
        self.invariants = frozenset(invariants)
        if assignors is None:
            from assignors.uniform import UniformAssignor

            assignors = [UniformAssignor()]
        self.members = members
        self.partitions = partitions
        self.depth = depth
        self.max_states = max_states
        self.with_timers = timers
        self.with_losses = losses
        self.assignors = list(assignors)
        self.batching, self.offload, self.restarts = batching, offload, restarts
        if parks_joins and not batching:
            raise ValueError("parks_joins needs batching (joins are parked only with batching on)")
        self.parks_joins = parks_joins
        if assignor_failures and not offload:
            raise ValueError("assignor_failures needs offload (a worker's computation fails)")
        self.assignor_failures = assignor_failures
        self.classic, self.turns, self.duplicates = classic, turns, duplicates
        self.static_members = static_members
        self.covered: Counter[str] = Counter()
        self.config = GroupCoordinatorConfig(
            consumer_assignment_interval_ms=1000 if batching else 0,
            consumer_assignor_offload_enable=offload,
            consumer_assignor_offload_min_members=2,
            consumer_assignor_offload_inline_max_changed_members=0,  # every computation
            classic_initial_rebalance_delay_ms=0,
        )
        self.clock = VirtualClock(1)
        self.ids = _Ids()
        self.store: list[Record] = []
        self.problems: list[tuple[str, str]] = []  # found by the driver's trace or an answer
        self.first_target_result: Any = None
        self.machines = self._boot()
        res = self.machines.driver.execute(
            REGISTRY, lambda r: r.create_topics([NewTopic(name="t0", num_partitions=partitions)])
        )
        self._settle()
        assert res[0] is not None  # create_topics answers every topic
        self.topic_id = res[0][0].topic_id
        self.labels = {self.topic_id: "t0"}
        self.clients: list[Any] = []
        for i in range(self.members):
            instance = f"inst-{i}" if i < self.static_members else None
            if classic:
                c: Any = ClassicClient(
                    index=i, topics=("t0",), protocol=COOPERATIVE, instance_id=instance
                )
            else:
                c = SimClient(index=i, topics=("t0",), group_id=GROUP, instance_id=instance)
            c.start()
            self.clients.append(c)
        self.requests: list[tuple[tuple[int, Any], ...]] = [() for _ in self.clients]
        self.responses: list[tuple[tuple[int, tuple], ...]] = [() for _ in self.clients]
        self.corr = 0
        self.restarts_done = 0
        self.dups = 0
        self.start = ""
        if classic:
            self._settle_classic_group()

    # ------------------------------------------------------------------ the coordinator

    def _boot(self) -> _Machines:
        """A coordinator process over the store: state machines replayed from its records, a
        driver in a world of its own."""
        shard = new_shard(config=self.config, assignors=self.assignors, ids=self.ids)
        shard.groups.parks_joins = self.parks_joins
        registry = TopicRegistry(self.ids)
        for machine in (shard, registry):
            machine.undo.enabled = False
        for rec in self.store:
            (shard if rec.group_id is not None else registry).replay(rec)
        for machine in (shard, registry):
            machine.undo.enabled = True
            machine.undo.keeps_history = True
        shard.set_topics(registry.image())
        world = VirtualWorld(self.clock)
        driver = Driver(
            machines=[shard, registry],
            config=self.config,
            clock=self.clock,
            host=world,
            workers=self.offload,
            automatic=False,
            trace=self._trace,
        )
        world.driver = driver
        driver.state = RuntimeState.ACTIVE
        driver.timing.apply(shard.on_loaded(self.clock.now))
        return _Machines(shard, registry, driver, world)

    def _trace(self, what: str, details: dict[str, Any]) -> None:
        if what == "unclaimed":
            self.problems.append(
                (
                    inv.PARKED_ANSWERED_ONCE,
                    f"the coordinator answered token {details['token']}, which no request "
                    f"waits for (answered twice, or its caller was never registered): "
                    f"{details['response']!r}",
                )
            )
        elif what == "first-target":
            self.first_target_result = details["result"]
        elif what == "bug" and isinstance(details["error"], IllegalStateError):
            self.problems.append((inv.CORE_ILLEGAL_STATE, str(details["error"])))

    def _settle(self) -> None:
        """The store writes at once: everything pending is durable, every ready callback run."""
        self.machines.world.settle(self.store)
        if self.problems:
            (name, message), self.problems = self.problems[0], []
            raise _Violation(name, message)

    def meta(self) -> Meta:
        topics = self.machines.registry.topics
        return Meta(
            by_name={n: (t.topic_id, t.num_partitions) for n, t in topics.items()},
            name_of={t.topic_id: n for n, t in topics.items()},
        )

    # ------------------------------------------------------------------ capture and restore

    def _capture(self) -> _Saved:
        m = self.machines
        driver, table = m.driver, m.driver.timers
        return _Saved(
            machines=m,
            marks=(m.shard.mark(), m.registry.mark()),
            clients=tuple(self.clients),
            requests=tuple(self.requests),
            responses=tuple(self.responses),
            corr=self.corr,
            now=self.clock.now,
            restarts=self.restarts_done,
            dups=self.dups,
            stored=len(self.store),
            ids=self.ids.n,
            timers=tuple(_timers(table)),
            parked=tuple((k, f, f.checkpoint()) for k, f in driver.parked.items()),
            first_targets=tuple((g, copy.copy(ft)) for g, ft in driver.own.first_targets.items()),
            assigning=frozenset(driver.own.assigning),
            jobs=tuple(m.world.jobs.items()),
        )

    def _restore(self, s: _Saved) -> None:
        m = self.machines = s.machines
        m.shard.rollback(s.marks[0])
        m.registry.rollback(s.marks[1])
        m.shard.set_topics(m.registry.image())
        self.clients = list(s.clients)
        self.requests = list(s.requests)
        self.responses = list(s.responses)
        self.corr, self.clock.now, self.restarts_done, self.dups = s.corr, s.now, s.restarts, s.dups
        del self.store[s.stored :]
        self.ids.n = s.ids
        driver, table = m.driver, m.driver.timers
        now = tuple(_timers(table))
        if now != s.timers:
            table.apply(
                [CancelTimer(k) for k, _d, _p in now] + [ArmTimer(k, d, p) for k, d, p in s.timers]
            )
        driver.parked.clear()
        for key, fut, checkpoint in s.parked:
            fut.restore(checkpoint)
            driver.parked[key] = fut
        driver.own.first_targets = {g: copy.copy(ft) for g, ft in s.first_targets}
        driver.own.assigning = set(s.assigning)
        m.world.jobs = dict(s.jobs)
        m.world.ready.clear()

    # ------------------------------------------------------------------ search

    def run(self) -> ExploreResult:
        result = ExploreResult(self.members, self.partitions, self.depth, start=self.start)
        nodes = [_Node(-1, "", "start", 0)]
        path: list[int] = [0]  # the nodes the world is at, root first
        saved = [self._capture()]  # the world at each node of path
        seen = {self._key()}
        frontier: deque[int] = deque([0])
        result.per_depth.append(1)
        while frontier:
            idx = frontier.popleft()
            node = nodes[idx]
            if node.depth >= self.depth:
                continue
            try:
                self._go(nodes, idx, path, saved)
            except _Violation as v:  # pragma: no cover - found when the node was made
                raise AssertionError(v.message) from v
            here = saved[-1]
            parent = self._machine_key()
            for action in self._actions():
                result.transitions += 1
                try:
                    label = self._apply(action)
                    failures = self._check()
                except _Violation as v:
                    failures = [(v.name, v.message)]
                    label = action
                if failures:
                    result.violation_name = failures[0][0]
                    result.violation = (
                        "\n".join(f"[{n}] {msg}" for n, msg in failures) + "\n" + self._dump()
                    )
                    result.path = [nodes[i].label for i in path[1:]] + [label]
                    result.states = len(nodes)
                    self._finish(result)
                    return result
                key = self._key(parent)
                self._restore(here)
                if key in seen:
                    continue
                seen.add(key)
                nodes.append(_Node(idx, action, label, node.depth + 1))
                frontier.append(len(nodes) - 1)
                while len(result.per_depth) <= node.depth + 1:
                    result.per_depth.append(0)
                result.per_depth[node.depth + 1] += 1
                result.max_depth_reached = max(result.max_depth_reached, node.depth + 1)
                if len(nodes) >= self.max_states:
                    result.truncated = True
                    result.states = len(nodes)
                    self._finish(result)
                    return result
        result.states = len(nodes)
        self._finish(result)
        return result

    def _go(self, nodes: list[_Node], idx: int, path: list[int], saved: list[_Saved]) -> None:
        """Move the world to node ``idx``: back to the deepest node its path shares with the
        current one, then forward along its own actions."""
        target = []
        i = idx
        while i > 0:
            target.append(i)
            i = nodes[i].parent
        target = [0, *reversed(target)]
        common = 0
        while common < min(len(path), len(target)) and path[common] == target[common]:
            common += 1
        del path[common:]
        del saved[common:]
        self._restore(saved[-1])
        for i in target[common:]:
            self._apply(nodes[i].action)
            path.append(i)
            saved.append(self._capture())

    def _finish(self, result: ExploreResult) -> None:
        result.covered = self.covered
        if not self.parks_joins and not self.classic:
            result.checked = ("I1", "I1b", "I2", "I3")

    def _machine_key(self) -> tuple[tuple, tuple]:
        """(where the state machines are, their part of the key): the same position of the
        same machines' undo logs is the same state (an action that changed nothing there)."""
        m = self.machines
        at = (id(m.shard), m.shard.mark(), m.registry.mark())
        consumer = m.shard.groups.get(GROUP)
        return at, (
            repr(m.shard.snapshot()),
            _classic_key(m.shard),
            None if consumer is None else (consumer.parked_at, tuple(sorted(consumer.waiting))),
        )

    def _key(self, parent: tuple[tuple, tuple] | None = None) -> tuple:
        m = self.machines
        driver, table = m.driver, m.driver.timers
        timers = [
            (k, deadline if k[0] == ASSIGN else payload)
            for k, deadline, payload in _timers(table)
            if k[0] != EXPIRE_OFFSETS
        ]
        waiting = sorted(f.label for f in driver.parked.values() if not f.done())
        at = (id(m.shard), m.shard.mark(), m.registry.mark())
        machines = parent[1] if parent is not None and parent[0] == at else self._machine_key()[1]
        return (
            *machines,
            tuple(timers),
            tuple(c.key() for c in self.clients),
            tuple(tuple((corr, repr(req)) for corr, req in q) for q in self.requests),
            tuple(tuple((corr, repr(o)) for corr, o in q) for q in self.responses),
            self.clock.now,
            tuple(waiting),
            tuple(sorted((g, ft.again) for g, ft in driver.own.first_targets.items())),
            tuple(sorted(driver.own.assigning)),
            tuple(sorted((g, repr(job)) for g, (_i, job) in m.world.jobs.items())),
            self.restarts_done,
            self.dups,
        )

    def _check(self) -> list[tuple[str, str]]:
        shard = self.machines.shard
        topic_ids = {n: t.topic_id for n, t in self.machines.registry.topics.items()}
        failures = inv.check_safety(
            shard.groups.get(GROUP),
            self.clients,
            self.invariants,
            classic=shard.classic_groups.get(GROUP),
            topic_ids=topic_ids,
        )
        return failures + [
            (inv.PARKED_ANSWERED_ONCE, msg) for msg in inv.check_parked(self.machines.driver)
        ]

    # ------------------------------------------------------------------ actions

    def _waits(self, i: int, corr: int) -> bool:
        """Is client i's request ``corr`` still on its way (queued, answered, parked)?"""
        return (
            any(rc == corr for rc, _r in self.requests[i])
            or any(rc == corr for rc, _o in self.responses[i])
            or any(f.label[:2] == (i, corr) for f in self.machines.driver.parked.values())
        )

    def _actions(self) -> list[str]:
        out = []
        m = self.machines
        for i, c in enumerate(self.clients):
            if c.can_send:
                out.append(f"send {i}")
            if self.requests[i]:
                out.append(f"deliver {i}")
                if self.with_losses:
                    out.append(f"lose-req {i}")
                if self.duplicates and self.dups < 1:
                    out.append(f"dup {i}")
            if self.responses[i]:
                out.append(f"respond {i}")
                if self.with_losses:
                    out.append(f"lose-resp {i}")
            if c.inflight is not None and not self._waits(i, c.inflight):
                out.append(f"timeout {i}")
            if c.revoking:
                out.append(f"revoked {i}")
            if self.classic and c.phase == MEMBER and c.inflight is None:
                out.append(f"rejoin {i}")
        if self.turns:
            out += [
                f"turn {i} {j}"
                for i in range(len(self.clients))
                for j in range(len(self.clients))
                if i != j and self.requests[i] and self.requests[j]
            ]
        if self.with_timers:
            for key, _deadline, payload in _timers(m.driver.timers):
                if key[0] != EXPIRE_OFFSETS:
                    out.append(f"fire {key[0]} {key[2] or '-'} {payload}")
        running = sorted(m.world.jobs)
        out += [f"offload-done {g}" for g in running]
        if self.assignor_failures:
            out += [f"offload-fail {g}" for g in running]
        out += [
            f"first-target {g}" for g, ft in m.driver.own.first_targets.items() if not ft.calling
        ]
        if self.restarts and self.restarts_done < 1:
            out.append("restart")
        return out

    def _apply(self, action: str) -> str:
        """Apply ``action`` to the world (everything it causes settles); returns its label."""
        verb, *args = action.split()
        m = self.machines
        driver = m.driver
        now = self.clock.now
        label = action
        if verb == "fire":
            kind, member_id, payload = args[0], "" if args[1] == "-" else args[1], int(args[2])
            key = (kind, GROUP, member_id)
            deadline, _payload = driver.timers.get(key)  # type: ignore[misc]
            driver.timers.apply([CancelTimer(key)])
            if kind == ASSIGN:  # the interval has passed: the clock moves to the deadline
                self.clock.now = now = max(now, deadline)
            driver.fire(DueTimer(key, deadline if kind == ASSIGN else now, payload), now)
            label = f"fire {kind} timer of {member_id or GROUP}"
        elif verb in ("offload-done", "offload-fail"):
            group_id = args[0]
            index, job = m.world.jobs[group_id]
            if verb == "offload-done":
                assignor = next(a for a in self.assignors if a.name == job.assignor)
                outcome = run_job(job, assignor)
            else:
                outcome = AssignmentOutcome(
                    group_id=job.group_id,
                    group_uid=job.group_uid,
                    epoch=job.epoch,
                    error=f"Failed to compute a new target assignment for epoch {job.epoch}: "
                    "the assignor raised (explored)",
                )
                if self._parked_joins():
                    self.covered["assignor failed with joins parked"] += 1
            m.world.finish(group_id, outcome)
            label = f"{verb} {group_id}: epoch {job.epoch}"
        elif verb == "first-target":
            group_id = args[0]
            computing = group_id in m.world.jobs
            driver.own.run_first_target(group_id)
            self._settle()
            if not computing and group_id in m.world.jobs:
                self.covered["first target offloaded"] += 1
            res = self.first_target_result
            label = (
                f"first-target {group_id}: {len(res.records)} records, "
                f"{len(res.completions)} parked joins answered"
                + (", target offloaded" if res.offloads else "")
            )
        elif verb == "restart":
            self.restarts_done += 1
            if self._parked_joins():
                self.covered["restart drops parked joins"] += 1
            self.machines = self._boot()  # the old process is gone, with all it held
            self.requests = [() for _ in self.requests]
            self.responses = [() for _ in self.responses]
            label = "restart: the coordinator reloads its records; everything in flight is lost"
        elif verb == "turn":
            i, j = int(args[0]), int(args[1])
            driver.turns.charge(0, 1.0)  # the shard used its share: both requests queue
            label = f"turn {i} {j}: " + "; ".join(self._deliver(k) for k in (i, j))
        else:
            label = self._client_action(verb, int(args[0]))
        self._settle()
        return label

    def _client_action(self, verb: str, i: int) -> str:
        c = copy.copy(self.clients[i])
        self.clients[i] = c
        label = f"{verb} {i}"
        if verb == "send":
            req = c.build_request(self.meta()) if self.classic else c.build_request()
            self.corr += 1
            c.sent(self.corr, req)
            self.requests[i] = (*self.requests[i], (self.corr, req))
            label = f"send {i}: {c.member_id or '-'} {_req(req, self.labels)}"
        elif verb == "deliver":
            label = f"deliver {i}: {self._deliver(i)}"
        elif verb == "dup":
            # Delivered twice in a row, nothing between the two (docs/simulation.md, Faults).
            self.dups += 1
            self.requests[i] = (self.requests[i][0], *self.requests[i])
            first = self._deliver(i)
            label = f"dup {i}: {first}, then again: {self._deliver(i)}"
        elif verb == "lose-req":
            self.requests[i] = self.requests[i][1:]
        elif verb == "respond":
            (rc, outcome), self.responses[i] = self.responses[i][0], self.responses[i][1:]
            if c.inflight == rc:
                if self.classic:
                    if outcome[0] == "ok":
                        c.on_response(outcome[1], self.meta())
                    else:
                        c.on_error(outcome[1])
                elif outcome[0] == "ok":
                    c.on_response(outcome[1])
                else:
                    c.on_error(outcome[1])
            label = f"respond {i}: corr {rc} -> {c.describe(self.labels)}"
        elif verb == "lose-resp":
            self.responses[i] = self.responses[i][1:]
        elif verb == "timeout":
            c.on_timeout()
        elif verb == "revoked":
            c.finish_revocation(c.revoke_token)
            label = f"revoked {i}: {c.describe(self.labels)}"
        elif verb == "rejoin":
            c.request_rejoin()
            label = f"rejoin {i}: {c.describe(self.labels)}"
        else:  # pragma: no cover
            raise AssertionError(verb)
        return label

    def _deliver(self, i: int) -> str:
        """The coordinator takes client i's oldest request, as the server submits it."""
        (rc, req), self.requests[i] = self.requests[i][0], self.requests[i][1:]
        driver = self.machines.driver
        cmd = requests.command(req, self.clock.now)
        try:
            response, fut = driver.request(cmd)
        except IllegalStateError as exc:
            raise _Violation(inv.CORE_ILLEGAL_STATE, str(exc)) from None
        except CoordinatorError as exc:
            self._answer(i, rc, ("error", int(exc.code)))
            return f"corr {rc} -> {exc.code.name}"
        if fut is None:
            self._answer(i, rc, ("ok", response))
            return f"corr {rc} -> {_resp(response, self.labels)}"
        parked = any(f is fut for f in driver.parked.values())
        fut.label = (i, rc, parked)
        fut.add_done_callback(self._answered)
        if parked:
            self._cover_parked(req)
            if isinstance(req, ConsumerGroupHeartbeat):
                return f"corr {rc} -> parked until the first target"
            return f"corr {rc} -> parked"
        return f"corr {rc} -> queued in the turn" if driver.turns.queued else f"corr {rc} -> waits"

    def _cover_parked(self, req: Any) -> None:
        cover = self.covered
        if not isinstance(req, ConsumerGroupHeartbeat):
            cover[f"classic {type(req).__name__} parked"] += 1
            return
        cover["parked"] += 1
        if len(self._parked_joins()) > 1:
            cover["parked behind another"] += 1
        if GROUP in self.machines.world.jobs or GROUP in self.machines.driver.own.assigning:
            cover["parked while the first target is computed"] += 1
        if self.restarts_done:
            cover["parked after a restart"] += 1
        group = self.machines.shard.groups.get(GROUP)
        if group is not None and group.parked_at > 0:
            cover["parked in an emptied group"] += 1

    def _parked_joins(self) -> list[str]:
        group = self.machines.shard.groups.get(GROUP)
        return [] if group is None else sorted(group.waiting)

    def _answered(self, fut: VirtualFuture) -> None:
        """A request the coordinator answered later (its turn, its batch, a completion)."""
        i, rc, parked = fut.label
        error = fut.exception()
        if error is not None and not isinstance(error, CoordinatorError):
            self.problems.append((inv.CORE_ILLEGAL_STATE, repr(error)))
            return
        if parked and isinstance(self.clients[i], SimClient):
            self.covered[
                "answered: " + ("a target" if error is None else type(error).__name__)
            ] += 1
        if isinstance(error, CoordinatorError):
            self._answer(i, rc, ("error", int(error.code)))
        else:
            self._answer(i, rc, ("ok", fut.result()))

    def _answer(self, i: int, rc: int, outcome: tuple) -> None:
        self.responses[i] = (*self.responses[i], (rc, outcome))

    # ------------------------------------------------------------------ classic start

    def _settle_classic_group(self) -> None:
        """Classic clients start as the members of a settled group: every client joins, the
        join barrier completes, the leader assigns, every client syncs (the first enabled
        action of a fixed order, until nothing is left to do)."""
        joining = [f"send {c.index}" for c in self.clients]
        for _ in range(1_000):  # bounded
            if all(c.phase == MEMBER and c.inflight is None for c in self.clients):
                break
            actions = self._actions()
            wanted = [a for a in actions if a.split()[0] in ("respond", "deliver")]
            wanted += [
                a for a in actions if a in joining and self.clients[int(a[5:])].phase != MEMBER
            ]
            wanted += [
                f"fire {key[0]} {key[2] or '-'} {payload}"
                for key, _deadline, payload in _timers(self.machines.driver.timers)
                if key[0] in (CLASSIC_INITIAL_JOIN, CLASSIC_JOIN)
            ]
            if not wanted:
                break
            self._apply(wanted[0])
        group = self.machines.shard.classic_groups.get(GROUP)
        if group is None or group.state.value != "Stable":
            raise AssertionError("the classic group did not settle")
        leader = next(c for c in self.clients if c.member_id == group.leader_id)
        self.start = (
            f"a settled classic group: generation {group.generation}, c{leader.index} its leader, "
            + ", ".join(c.describe(self.labels) for c in self.clients)
        )

    # ------------------------------------------------------------------ reports

    def _dump(self) -> str:
        lines = ["clients:"]
        lines += ["  " + c.describe(self.labels) for c in self.clients]
        driver = self.machines.driver
        waiting = sorted(f.label for f in driver.parked.values() if not f.done())
        if waiting or driver.own.first_targets:
            lines.append(
                "parked requests: "
                + ", ".join(f"c{i} corr {rc}" for i, rc, _p in waiting)
                + f"; first target asked for: {sorted(driver.own.first_targets)}"
            )
        shard, registry = self.machines.shard, self.machines.registry
        lines.append("coordinator:")
        lines += coordinator_lines(
            shard.groups.get(GROUP),
            shard.classic_groups.get(GROUP),
            self.labels,
            {n: t.topic_id for n, t in registry.topics.items()},
        )
        return "\n".join(lines)


def _timers(table: Any) -> list[tuple[Any, int, int]]:
    """(key, deadline, payload) of every armed timer, in key order."""
    out = []
    for key in table.keys():  # noqa: SIM118 - a TimerTable, not a dict
        deadline, payload = table.get(key)
        out.append((key, deadline, payload))
    return out


def _classic_key(shard: Shard) -> tuple:
    """The classic groups' in-memory state (their snapshot holds only their last record):
    phase, generation, leader, and each member with whether a JoinGroup or SyncGroup of its
    waits — not the tokens' numbers."""
    out = []
    for gid, g in sorted(shard.classic_groups.items()):
        members = tuple(
            (
                mid,
                repr(replace(x, join_token=None, sync_token=None)),
                x.join_token is not None,
                x.sync_token is not None,
            )
            for mid, x in sorted(g.members.items())
        )
        out.append(
            (
                gid,
                g.state.value,
                g.previous_state.value,
                g.generation,
                g.leader_id,
                g.protocol_name,
                members,
                tuple(sorted(g.pending_members)),
                tuple(sorted(g.pending_sync)),
                g.new_member_added,
            )
        )
    return tuple(out)


def _req(req: Any, labels: dict[str, str]) -> str:
    if hasattr(req, "member_epoch"):
        text = f"heartbeat(epoch={req.member_epoch}"
        if req.topic_partitions is not None:
            text += f" owned={fmt(req.topic_partitions, labels)}"
        return text + ")"
    return type(req).__name__ + (
        f"(generation={req.generation_id})" if hasattr(req, "generation_id") else "()"
    )


def _resp(resp: Any, labels: dict[str, str]) -> str:
    code = getattr(resp, "error_code", 0)
    if code:
        return ErrorCode(code).name
    if hasattr(resp, "member_epoch"):
        a = resp.assignment
        return f"epoch {resp.member_epoch}" + (
            "" if a is None else f" assigned={fmt(a.assigned, labels)}"
        )
    return type(resp).__name__ + (
        f"(generation={resp.generation_id})" if hasattr(resp, "generation_id") else ""
    )


def explore(**kw: Any) -> ExploreResult:
    return Explorer(**kw).run()
