"""What a simulation reports: its summary (``SimSummary.render``), the failure report of a
violated invariant (``failure_report``), and the one-line texts of requests and responses in its
trace, the trace's digest and the state diff shown when a replay differs."""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from legacy_bridge import messages as lm

from . import invariants as inv
from .client import fmt


class InvariantViolation(AssertionError):
    def __init__(self, name: str, report: str) -> None:
        super().__init__(report)
        self.name = name
        self.report = report


@dataclass(slots=True)
class SimSummary:
    params: Any  # the SimParams of the run
    steps: int = 0
    fault_steps: int = 0
    virtual_ms: int = 0
    events: Counter = field(default_factory=Counter)
    faults: Counter = field(default_factory=Counter)
    checks: int = 0
    zombie_steps: int = 0
    stale_steps: int = 0  # of which with stale claims of re-created classic members
    restarts: int = 0
    records: int = 0
    final_state: str = ""
    final_epoch: int = 0
    time_to_stable_ms: int | None = None
    violation: InvariantViolation | None = None
    trace_digest: str = ""

    def render(self) -> str:
        p = self.params
        lines = [
            f"seed={p.seed} members={p.members} partitions={p.partitions}x{p.topics} topics "
            f"faults={','.join(sorted(p.faults)) or 'none'}",
            f"steps: {self.steps} ({self.fault_steps} with faults, {self.steps - self.fault_steps} quiet); "
            f"virtual time {self.virtual_ms / 1000:.1f}s; records {self.records}; coordinator restarts {self.restarts}",
            "events: " + ", ".join(f"{k}={v}" for k, v in sorted(self.events.items())),
            "faults injected: "
            + (", ".join(f"{k}={v}" for k, v in sorted(self.faults.items())) or "none"),
            f"invariant checks passed: {self.checks} (steps with zombie claims: {self.zombie_steps}"
            + (
                f", {self.stale_steps} of them with stale claims of re-created classic members)"
                if self.stale_steps
                else ")"
            ),
            f"final group state: {self.final_state} at group epoch {self.final_epoch}",
            "time to stable after faults stopped: "
            + (
                "never"
                if self.time_to_stable_ms is None
                else f"{self.time_to_stable_ms / 1000:.1f}s"
            )
            + f" (bound {p.liveness_bound_ms() / 1000:.1f}s)",
            f"trace digest: {self.trace_digest}",
        ]
        if self.violation is not None:
            lines.append(f"INVARIANT VIOLATED: {self.violation.name}")
        return "\n".join(lines)


def failure_report(sim: Any, name: str, message: str) -> str:
    """What a violated invariant prints: the invariant, seed, step and time, the command that
    reproduces the run, every client, the coordinator's groups, topics and timers, and the last
    events of the trace."""
    p = sim.p
    lines = [
        f"INVARIANT {name} VIOLATED",
        f"seed={p.seed} step={sim.step} t={sim.now}ms ({'faults on' if sim.faults_on else 'quiet phase'})",
        message,
        "",
        f"reproduce: {p.command()}",
        "",
        "clients:",
    ]
    for c in sim.clients:
        lines.append("  " + c.describe(sim.topic_label))
    for g in sim.groups:
        lines.append(
            "coordinator:"
            if len(sim.groups) == 1
            else f"coordinator, group {g.gid} (partition {sim.coord.partition_of(g.gid)}):"
        )
        lines += coordinator_lines(
            sim.consumer_group(g), sim.classic_of(g), sim.topic_label, sim._topic_ids()
        )
    lines.append(
        "topics: "
        + ", ".join(
            f"{n}={sim.topic_label.get(t.topic_id, t.topic_id)}({t.num_partitions})"
            for n, t in sorted(sim.coord.registry.topics.items())
        )
    )
    table = sim.coord.driver.timers
    timers = [(k[0], k[2], table.get(k)) for k in table.keys()]  # noqa: SIM118
    lines.append(f"timers: {timers}")
    lines.append(f"last {p.trace_tail} events:")
    lines.extend("  " + t for t in sim.trace[-p.trace_tail :])
    return "\n".join(lines)


def coordinator_lines(
    g: Any, cg: Any, labels: dict[str, str], topic_ids: dict[str, str]
) -> list[str]:
    """The coordinator's view of the group: the classic group (its members' assignments,
    claims, and the requests of theirs it holds parked), or the consumer group (its members'
    epochs, assignments and targets)."""
    lines = []
    if cg is not None:
        lines.append(
            f"  classic group: state={cg.state.value} generation={cg.generation} "
            f"protocol={cg.protocol_name} leader={cg.leader_id}"
        )
        for mid in sorted(cg.members):
            x = cg.members[mid]
            lines.append(
                f"  {mid}: assignment={fmt(inv.classic_assignment(x, topic_ids), labels)} "
                f"claims={fmt(inv.classic_claims(x, topic_ids), labels)} "
                f"joined-at-gen={inv.classic_join_generation(x)} "
                f"{'waits-join ' if x.join_token is not None else ''}"
                f"{'waits-sync' if x.sync_token is not None else ''}"
            )
    if g is None:
        lines.append("  no consumer group")
        return lines
    lines.append(
        f"  state={g.state().value} group_epoch={g.group_epoch} assignment_epoch={g.assignment_epoch}"
    )
    return lines + [
        f"  {mid}: epoch={m.member_epoch} prev={m.previous_member_epoch} {m.state.name} "
        f"assigned={fmt(m.assigned_partitions, labels)} "
        f"pending_revocation={fmt(m.partitions_pending_revocation, labels)} "
        f"target={fmt(g.target_of(mid), labels)}"
        for mid, m in sorted(g.members.items())
    ]


def req_text(req: Any, names: dict[str, str]) -> str:
    if isinstance(req, lm.JoinGroup):
        from legacy_bridge.protocol import decode_subscription

        sub = decode_subscription(req.protocols[0][1])
        return (
            f"JoinGroup(member={req.member_id or '-'} protocols={[n for n, _m in req.protocols]} "
            f"gen={sub.generation_id} owned={dict(sub.owned_partitions)})"
        )
    if isinstance(req, lm.SyncGroup):
        return f"SyncGroup(gen={req.generation_id} assignments={len(req.assignments)})"
    if isinstance(req, lm.Heartbeat):
        return f"Heartbeat(gen={req.generation_id})"
    if isinstance(req, lm.LeaveGroup):
        return f"LeaveGroup({[x.member_id for x in req.members]})"
    parts = [f"epoch={req.member_epoch}"]
    if req.topic_partitions is not None:
        parts.append(f"owned={fmt(req.topic_partitions, names)}")
    if req.server_assignor is not None:
        parts.append(f"assignor={req.server_assignor}")
    return "heartbeat(" + " ".join(parts) + ")"


def resp_text(resp: Any, names: dict[str, str] | None = None) -> str:
    code = getattr(resp, "error_code", 0)
    if isinstance(resp, lm.JoinGroupResponse):
        if code:
            return f"JoinGroup error {code} member={resp.member_id}"
        return (
            f"JoinGroup gen={resp.generation_id} member={resp.member_id} protocol={resp.protocol_name} "
            f"leader={resp.leader or '-'} members={len(resp.members)}"
        )
    if isinstance(resp, lm.SyncGroupResponse):
        if code:
            return f"SyncGroup error {code}"
        from legacy_bridge.protocol import decode_assignment

        a = decode_assignment(resp.assignment).assigned_partitions if resp.assignment else ()
        return f"SyncGroup assignment={dict(a)}"
    if isinstance(resp, (lm.HeartbeatResponse, lm.LeaveGroupResponse)):
        return f"{type(resp).__name__} error {code}"
    a = resp.assignment
    return f"epoch {resp.member_epoch}" + (
        "" if a is None else f" assigned={fmt(a.assigned, names)} pending={fmt(a.pending, names)}"
    )


def digest(trace: list[str]) -> str:
    h = hashlib.sha256()
    for line in trace:
        h.update(line.encode())
        h.update(b"\n")
    return h.hexdigest()[:16]


def diff(a: Any, b: Any, path: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            if a.get(k) != b.get(k):
                out.append(diff(a.get(k), b.get(k), f"{path}/{k}"))
        return "\n".join(out[:10])
    return f"  {path}: live={a!r} replayed={b!r}"
