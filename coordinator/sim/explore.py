"""Exhaustive checking of small scopes: breadth-first search over every interleaving.

Scope: ``members`` clients (2–3) in one group subscribed to one topic with ``partitions``
partitions (2–4), explored to ``depth`` actions. In every state the enabled actions are:

* ``send i``      client i sends its next heartbeat (join, ack, plain heartbeat) — at most one in flight;
* ``deliver i``   the coordinator processes client i's oldest request (per-client FIFO);
* ``lose-req i``  client i's oldest request is lost;
* ``respond i``   client i receives its oldest response (ignored unless it matches the request in flight);
* ``lose-resp i`` client i's oldest response is lost;
* ``timeout i``   client i's request timed out (only once its request or response is lost);
* ``revoked i``   client i's revocation callback finishes;
* ``fire k``      a coordinator timer fires (session or rebalance). Time is abstracted away: any
  armed timer may fire at any point, which over-approximates every timing (a member can always be
  slow), so safety proven here holds for all timings within the depth bound.

With ``batching`` (``group.consumer.assignment.interval.ms`` = 1 s) a target computed at time
T holds back later changes until its ASSIGN timer fires; firing it moves the explorer's clock to
T + 1 s (the only thing that moves it). With ``offload`` (groups of 2 members or more) a due
target is asked of the runtime; the explorer plays it with two more actions, and ``restart``
with a third:

* ``offload-start g``  the runtime copies group g's inputs and a worker computes its outcome;
* ``offload-done g``   the outcome is applied as a command (at any later point: late results);
* ``restart``          the coordinator reloads its records (at most once per path): requests,
  responses, pending and running computations are lost, timers re-armed by ``on_loaded``.

With ``assignor_failures`` a running computation may also fail:

* ``offload-fail g``   the worker's assignor raised: the outcome carries the error (the target
  stays; the next heartbeat or timer computes again; parked joins are answered
  UNKNOWN_SERVER_ERROR and join again).

With ``parks_joins`` (batching on; the runtime's default) a join to a group that nobody has been
answered in yet (new or emptied) is *parked*: its records are written, its response is
``Pending``, and the client just waits (no ``timeout`` while its join is parked: the runtime
answers long before a request timeout). The core then asks for the group's first target, which
the explorer plays with one more action, enabled while it is asked for (at any later point, so
any number of joins may be parked before it: the burst the runtime waits for):

* ``first-target g``   the runtime calls ``first_target`` for group g: the target is computed
  (inline, or offloaded: ``offload-start``/``offload-done`` then answer) and the parked joins are
  answered; their answers (or UNKNOWN_MEMBER_ID for a parked member removed meanwhile, e.g. its
  session expired) join the client's responses like any other (and may be lost). A ``restart``
  drops the parked joins (the callers are gone): those clients time out and join again.

Parked state is soft (not in the records): each state carries the parked joins, in arrival
order, and the shard is given them back after replay. Invariant I7 (every parked join is answered
at most once, only to the client that waits for it, and the core's parked members are exactly
the explorer's; while joins are parked something — an asked first target, an offloaded
computation — is on its way to answer them) is checked in every state with ``parks_joins``.

Invariants I1, I1b, I2, I3 and, with ``parks_joins``, I7 (:mod:`coordinator.sim.invariants`)
are checked in every reachable state. States are deduplicated by a canonical key (shard
snapshot, armed timers, client states, messages in flight, parked joins). Because the search is
breadth-first, the first violation found has a shortest path, which is printed action by action.

A coordinator state is stored as its compacted record list (``records_of_state``) and rebuilt by
replay before its successors are computed; each action is applied and then rolled back with the
shard's undo log.
"""

from __future__ import annotations

import copy
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from coordinator.core.commands import ConsumerGroupHeartbeat, Pending, Result, SequentialIds
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.errors import CoordinatorError, IllegalStateError
from coordinator.core.records import Record
from coordinator.core.target_assignment import AssignmentOutcome, run_job
from coordinator.core.timers import ASSIGN, ArmTimer, CancelTimer, DueTimer
from coordinator.core.topics import NewTopic, TopicRegistry
from coordinator.factory import Shard, new_shard

from . import invariants as inv
from .client import SimClient, fmt

GROUP = "grp"


@dataclass(slots=True)
class _State:
    records: tuple[Record, ...]
    timers: tuple[tuple[tuple[str, str, str], int], ...]  # sorted (key, payload; ASSIGN: deadline)
    clients: tuple[SimClient, ...]
    requests: tuple[tuple[tuple[int, ConsumerGroupHeartbeat], ...], ...]  # per client FIFO
    responses: tuple[tuple[tuple[int, tuple], ...], ...]  # per client FIFO
    corr: int
    parent: int
    action: str
    depth: int
    now: int = 1
    offloads: tuple[str, ...] = ()  # groups whose target the core asked for, not yet started
    jobs: tuple[tuple[str, Any], ...] = ()  # (group, outcome) computed by a worker, not applied
    restarts: int = 0
    # Parked joins (soft state, not in the records), in arrival order: (member id, client,
    # corr); the assignment epoch when the first was parked; groups whose first target the
    # core asked for and the runtime has not called yet.
    parked: tuple[tuple[str, int, int], ...] = ()
    parked_at: int = 0
    first_asked: tuple[str, ...] = ()


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
    checked: tuple[str, ...] = ("I1", "I1b", "I2", "I3")
    covered: Counter[str] = field(default_factory=Counter)
    """Parked-join situations met, counted over the explored transitions (``parks_joins``)."""

    def render(self) -> str:
        lines = [
            f"explored {self.members} members x {self.partitions} partitions to depth {self.depth}: "
            f"{self.states} distinct states, {self.transitions} transitions"
            + (" (TRUNCATED at the state limit)" if self.truncated else ""),
            "new states per depth: " + " ".join(str(n) for n in self.per_depth),
        ]
        if self.covered:
            lines.append(
                "parked joins (transitions): "
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
        self._token_of: dict[int, tuple[str, int, int]] = {}  # token -> parked entry
        self.covered: Counter[str] = Counter()
        self.config = GroupCoordinatorConfig(
            consumer_assignment_interval_ms=1000 if batching else 0,
            consumer_assignor_offload_enable=offload,
            consumer_assignor_offload_min_members=2,
        )
        ids = SequentialIds()
        registry = TopicRegistry(ids)
        res = registry.create_topics([NewTopic(name="t0", num_partitions=partitions)])
        registry.release(registry.mark())
        assert res.response is not None  # create_topics answers every topic
        self.topic_id = res.response[0].topic_id
        self.labels = {self.topic_id: "t0"}
        self.image = registry.image()
        self.static_members = static_members

    # ------------------------------------------------------------------ shard

    def _shard(self, records: Sequence[Record], st: _State | None = None) -> Shard:
        shard = new_shard(
            config=self.config, assignors=self.assignors, ids=SequentialIds("x"), topics=self.image
        )
        shard.groups.parks_joins = self.parks_joins
        shard.undo.enabled = False
        for rec in records:
            shard.replay(rec)
        self._token_of = {}
        if st is not None and st.parked:  # the soft state of the parked joins, given back
            group = shard.groups.get(GROUP)
            assert group is not None  # parked members are members
            for entry in st.parked:  # fresh tokens, in arrival order (answers go in that order)
                token = shard.context.next_token()
                group.waiting[entry[0]] = (*group.waiting.get(entry[0], ()), token)
                self._token_of[token] = entry
            group.parked_at = st.parked_at
        shard.undo.enabled = True
        return shard

    # ------------------------------------------------------------------ search

    def run(self) -> ExploreResult:
        result = ExploreResult(self.members, self.partitions, self.depth)
        clients = []
        for i in range(self.members):
            c = SimClient(
                index=i,
                topics=("t0",),
                group_id=GROUP,
                instance_id=f"inst-{i}" if i < self.static_members else None,
            )
            c.start()
            clients.append(c)
        root = _State(
            (),
            (),
            tuple(clients),
            tuple(() for _ in clients),
            tuple(() for _ in clients),
            0,
            -1,
            "start",
            0,
        )
        states: list[_State] = [root]
        seen = {self._key(self._shard(()), root)}
        frontier: deque[int] = deque([0])
        result.per_depth.append(1)
        while frontier:
            idx = frontier.popleft()
            st = states[idx]
            if st.depth >= self.depth:
                continue
            shard = self._shard(st.records, st)
            parent_snap = repr(shard.snapshot())
            for action in self._actions(st):
                mark = shard.mark()
                result.transitions += 1
                try:
                    nxt = self._apply(shard, st, idx, action)
                except _Violation as v:
                    result.violation_name, result.violation = v.name, v.message
                    result.path = self._path(states, idx) + [action]
                    result.states = len(states)
                    self._finish(result)
                    return result
                failures = inv.check_safety(shard.groups.get(GROUP), nxt.clients, self.invariants)
                if self.parks_joins:
                    failures += [
                        (inv.PARKED_ANSWERED_ONCE, m) for m in self._check_parked(shard, nxt)
                    ]
                if failures:
                    result.violation_name = failures[0][0]
                    result.violation = (
                        "\n".join(f"[{n}] {m}" for n, m in failures) + "\n" + self._dump(shard, nxt)
                    )
                    result.path = self._path(states, idx) + [nxt.action]
                    result.states = len(states)
                    self._finish(result)
                    return result
                key = self._key(shard, nxt, parent_snap if nxt.records is st.records else None)
                shard.rollback(mark)
                if key in seen:
                    continue
                seen.add(key)
                states.append(nxt)
                frontier.append(len(states) - 1)
                while len(result.per_depth) <= nxt.depth:
                    result.per_depth.append(0)
                result.per_depth[nxt.depth] += 1
                result.max_depth_reached = max(result.max_depth_reached, nxt.depth)
                if len(states) >= self.max_states:
                    result.truncated = True
                    result.states = len(states)
                    self._finish(result)
                    return result
        result.states = len(states)
        self._finish(result)
        return result

    def _finish(self, result: ExploreResult) -> None:
        result.covered = self.covered
        if self.parks_joins:
            result.checked += ("I7",)

    def _path(self, states: list[_State], idx: int) -> list[str]:
        out = []
        while idx > 0:
            out.append(states[idx].action)
            idx = states[idx].parent
        return out[::-1]

    def _key(self, shard: Shard, st: _State, snap: str | None = None) -> tuple:
        return (
            snap if snap is not None else repr(shard.snapshot()),
            st.timers,
            tuple(c.key() for c in st.clients),
            tuple(tuple((corr, repr(req)) for corr, req in q) for q in st.requests),
            tuple(tuple((corr, repr(o)) for corr, o in q) for q in st.responses),
            st.now,
            st.offloads,
            tuple((g, repr(outcome)) for g, outcome in st.jobs),
            st.restarts,
            tuple((mid, i, rc) for mid, i, rc in st.parked),
            st.parked_at if st.parked else 0,
            st.first_asked,
        )

    def _check_parked(self, shard: Shard, st: _State) -> list[str]:
        """I7 (the explorer's side): the core's parked members are exactly those whose clients
        wait for a parked answer, and while any is parked, something will answer it (the first
        target asked for, or a computation of the group's target asked for or running)."""
        group = shard.groups.get(GROUP)
        core = sorted(group.waiting) if group is not None else []
        mine = sorted(mid for mid, _i, _rc in st.parked)
        out = []
        if core != mine:
            out.append(f"the core has parked {core}, the clients wait for parked answers to {mine}")
        if st.parked and not (
            GROUP in st.first_asked or GROUP in st.offloads or any(g == GROUP for g, _o in st.jobs)
        ):
            out.append(
                f"joins of {mine} are parked, but no first target is asked for and no target "
                "is being computed: nothing will answer them"
            )
        return out

    def _actions(self, st: _State) -> list[str]:
        out = []
        for i, c in enumerate(st.clients):
            if c.can_send:
                out.append(f"send {i}")
            if st.requests[i]:
                out.append(f"deliver {i}")
                if self.with_losses:
                    out.append(f"lose-req {i}")
            if st.responses[i]:
                out.append(f"respond {i}")
                if self.with_losses:
                    out.append(f"lose-resp {i}")
            if (
                c.inflight is not None
                and not st.requests[i]
                and not any(corr == c.inflight for corr, _o in st.responses[i])
                and not any(pi == i and rc == c.inflight for _m, pi, rc in st.parked)
            ):
                out.append(f"timeout {i}")
            if c.revoking:
                out.append(f"revoked {i}")
        if self.with_timers:
            for key, payload in st.timers:
                out.append(f"fire {key[0]} {key[2] or '-'} {payload}")
        running = {g for g, _o in st.jobs}
        out += [f"offload-start {g}" for g in st.offloads if g not in running]
        out += [f"offload-done {g}" for g in sorted(running)]
        if self.assignor_failures:
            out += [f"offload-fail {g}" for g in sorted(running)]
        out += [f"first-target {g}" for g in st.first_asked]
        if self.restarts and st.restarts < 1:
            out.append("restart")
        return out

    def _apply(self, shard: Shard, st: _State, parent: int, action: str) -> _State:
        verb, *args = action.split()
        clients = list(st.clients)
        requests = list(st.requests)
        responses = list(st.responses)
        timers = dict(st.timers)
        corr = st.corr
        records = st.records
        label = action
        now = st.now
        offloads = list(st.offloads)
        jobs = dict(st.jobs)
        restarts = st.restarts
        parked = list(st.parked)
        parked_at = st.parked_at
        first_asked = list(st.first_asked)

        touched = False

        def commit(res: Any) -> None:
            nonlocal touched, parked_at
            touched = True
            for group_id, _first in res.parked_joins:
                if group_id not in first_asked:
                    first_asked.append(group_id)
            for token, answer in res.completions:
                entry = self._token_of.get(token)
                if entry is None or entry not in parked:
                    raise _Violation(
                        inv.PARKED_ANSWERED_ONCE,
                        f"the core answered token {token}, which no parked join waits for "
                        f"(answered twice, or never parked): {answer!r}",
                    )
                parked.remove(entry)
                _mid, ci, rc = entry
                self.covered[
                    "answered: "
                    + (
                        "a target"
                        if not isinstance(answer, CoordinatorError)
                        else type(answer).__name__
                    )
                ] += 1
                if isinstance(answer, CoordinatorError):
                    responses[ci] = responses[ci] + ((rc, ("error", int(answer.code))),)
                else:
                    responses[ci] = responses[ci] + ((rc, ("ok", answer)),)
            group = shard.groups.get(GROUP)
            if group is not None and group.waiting:
                parked_at = group.parked_at
            for op in res.timers:
                if type(op) is ArmTimer:
                    timers[op.key] = op.deadline_ms if op.key[0] == ASSIGN else op.payload
                elif type(op) is CancelTimer:
                    timers.pop(op.key, None)
            for group_id in res.offloads:
                if group_id not in offloads and group_id not in jobs:
                    offloads.append(group_id)

        def guarded(fn: Any) -> Any:
            try:
                return fn()
            except IllegalStateError as exc:
                raise _Violation(inv.CORE_ILLEGAL_STATE, str(exc)) from None

        if verb == "fire":
            kind, member_id, payload = args[0], args[1].replace("-", ""), int(args[2])
            key = (kind, GROUP, member_id)
            timers.pop(key, None)
            if kind == ASSIGN:  # the interval has passed: the clock moves to the deadline
                now = max(now, payload)
                due = DueTimer(key, payload, 0)
            else:
                due = DueTimer(key, now, payload)
            fired = guarded(lambda: shard.on_timer(due, now))
            commit(fired)
            label = f"fire {kind} timer of {member_id or GROUP} ({len(fired.records)} records)"
        elif verb == "offload-start":
            group_id = args[0]
            offloads.remove(group_id)
            job = shard.groups.assignment_job(group_id)
            if job is not None:
                assignor = next(a for a in self.assignors if a.name == job.assignor)
                jobs[group_id] = run_job(job, assignor)
            label = f"offload-start {group_id}" + (
                " (nothing due)" if job is None else f": epoch {job.epoch}"
            )
        elif verb == "offload-done":
            group_id = args[0]
            computed = jobs.pop(group_id)
            applied = guarded(lambda: shard.groups.apply_assignment(computed, now))
            commit(applied)
            label = (
                f"offload-done {group_id}: epoch {computed.epoch} ({len(applied.records)} records)"
            )
        elif verb == "offload-fail":
            group_id = args[0]
            computed = jobs.pop(group_id)
            failed = AssignmentOutcome(
                group_id=computed.group_id,
                group_uid=computed.group_uid,
                epoch=computed.epoch,
                error=f"Failed to compute a new target assignment for epoch {computed.epoch}: "
                "the assignor raised (explored)",
            )
            applied = guarded(lambda: shard.groups.apply_assignment(failed, now))
            commit(applied)
            if st.parked:
                self.covered["assignor failed with joins parked"] += 1
            label = (
                f"offload-fail {group_id}: epoch {computed.epoch} failed "
                f"({len(applied.completions)} parked joins answered)"
            )
        elif verb == "first-target":
            group_id = args[0]
            first_asked.remove(group_id)
            answered = guarded(lambda: shard.groups.first_target(group_id, now))
            commit(answered)
            if answered.offloads:
                self.covered["first target offloaded"] += 1
            label = (
                f"first-target {group_id}: {len(answered.records)} records, "
                f"{len(answered.completions)} parked joins answered"
                + (", target offloaded" if answered.offloads else "")
            )
        elif verb == "restart":
            restarts += 1
            offloads, jobs = [], {}
            if parked:
                self.covered["restart drops parked joins"] += 1
            group = shard.groups.get(GROUP)
            if group is not None:
                for member_id in list(group.waiting):
                    del group.waiting[member_id]  # soft: the callers are gone
            parked, first_asked = [], []
            requests = [() for _ in requests]
            responses = [() for _ in responses]
            timers = {}
            commit(Result(timers=shard.on_loaded(now)))
            label = "restart: the coordinator reloads its records; everything in flight is lost"
        else:
            i = int(args[0])
            c = copy.copy(clients[i])
            clients[i] = c
            if verb == "send":
                req = c.build_request()
                corr += 1
                c.sent(corr, req)
                requests[i] = requests[i] + ((corr, req),)
                label = f"send {i}: {c.member_id} {_req(req, self.labels)}"
            elif verb == "deliver":
                (rc, req), later_requests = requests[i][0], requests[i][1:]
                requests[i] = later_requests
                outcome: tuple | None = None
                try:
                    res = shard.consumer_group_heartbeat(req, now)
                except CoordinatorError as exc:
                    outcome = ("error", int(exc.code))
                    label = f"deliver {i}: corr {rc} -> {exc.code.name}"
                except IllegalStateError as exc:
                    raise _Violation(inv.CORE_ILLEGAL_STATE, str(exc)) from None
                else:
                    commit(res)
                    resp = res.response
                    assert resp is not None  # a heartbeat always answers
                    if isinstance(resp, Pending):  # parked: answered by a later completion
                        entry = (req.member_id, i, rc)
                        cover = self.covered
                        cover["parked"] += 1
                        if len(parked) > 0:
                            cover["parked behind another"] += 1
                        if GROUP in offloads or GROUP in jobs:
                            cover["parked while the first target is computed"] += 1
                        if restarts:
                            cover["parked after a restart"] += 1
                        group = shard.groups.get(GROUP)
                        if group is not None and group.parked_at > 0:
                            cover["parked in an emptied group"] += 1
                        parked.append(entry)
                        self._token_of[resp.token] = entry
                        label = f"deliver {i}: corr {rc} -> parked until the first target"
                    else:
                        outcome = ("ok", resp)
                        a = resp.assignment
                        label = f"deliver {i}: corr {rc} -> epoch {resp.member_epoch}" + (
                            "" if a is None else f" assigned={fmt(a.assigned, self.labels)}"
                        )
                if outcome is not None:
                    responses[i] = responses[i] + ((rc, outcome),)
            elif verb == "lose-req":
                requests[i] = requests[i][1:]
            elif verb == "respond":
                (rc, outcome), later_responses = responses[i][0], responses[i][1:]
                responses[i] = later_responses
                if c.inflight == rc:
                    if outcome[0] == "ok":
                        c.on_response(outcome[1])
                    else:
                        c.on_error(outcome[1])
                label = f"respond {i}: corr {rc} -> {c.describe(self.labels)}"
            elif verb == "lose-resp":
                responses[i] = responses[i][1:]
            elif verb == "timeout":
                c.on_timeout()
            elif verb == "revoked":
                c.finish_revocation(c.revoke_token)
                label = f"revoked {i}: {c.describe(self.labels)}"
            else:  # pragma: no cover
                raise AssertionError(action)
        if touched:
            records = tuple(shard.records_of_state())
        return _State(
            records,
            tuple(sorted(timers.items())),
            tuple(clients),
            tuple(requests),
            tuple(responses),
            corr,
            parent,
            label,
            st.depth + 1,
            now,
            tuple(offloads),
            tuple(sorted(jobs.items())),
            restarts,
            tuple(parked),
            parked_at if parked else 0,
            tuple(first_asked),
        )

    def _dump(self, shard: Shard, st: _State) -> str:
        lines = ["clients:"]
        lines += ["  " + c.describe(self.labels) for c in st.clients]
        if st.parked or st.first_asked:
            lines.append(
                "parked joins: "
                + ", ".join(f"{mid} (c{i} corr {rc})" for mid, i, rc in st.parked)
                + f"; first target asked for: {list(st.first_asked)}"
            )
        g = shard.groups.get(GROUP)
        if g is not None:
            lines.append(
                f"coordinator: state={g.state().value} group_epoch={g.group_epoch} "
                f"assignment_epoch={g.assignment_epoch}"
            )
            for mid in sorted(g.members):
                m = g.members[mid]
                lines.append(
                    f"  {mid}: epoch={m.member_epoch} {m.state.name} "
                    f"assigned={fmt(m.assigned_partitions, self.labels)} "
                    f"pending_revocation={fmt(m.partitions_pending_revocation, self.labels)} "
                    f"target={fmt(g.target_of(mid), self.labels)}"
                )
        return "\n".join(lines)


class _Violation(Exception):
    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name
        self.message = message


def _req(req: ConsumerGroupHeartbeat, labels: dict[str, str]) -> str:
    text = f"heartbeat(epoch={req.member_epoch}"
    if req.topic_partitions is not None:
        text += f" owned={fmt(req.topic_partitions, labels)}"
    return text + ")"


def explore(**kw: Any) -> ExploreResult:
    return Explorer(**kw).run()
