"""The parameters of a simulation (:class:`SimParams`): its scope, its faults, the protocol's
timeouts, the runtime's settings, and the liveness bound they give (invariant I5)."""

from __future__ import annotations

from dataclasses import dataclass

from . import invariants as inv
from .faults import ALL_FAULTS, KNOWN_FAULTS
from .moves import unavailable_ms as moves_unavailable_ms

GROUP = "grp"
"""The group of a one-group simulation."""
CLASSIC_PROTOCOLS = ("eager", "cooperative", "mixed")
FAULT_RATE = 0.08
"""Chance per step that a client or cluster fault is scheduled (``--fault-rate``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SimParams:
    seed: int = 0
    steps: int = 300
    members: int = 3
    partitions: int = 4
    topics: int = 2
    faults: frozenset[str] = frozenset(ALL_FAULTS)
    fault_rate: float = FAULT_RATE  # chance per step that a client/cluster fault is scheduled
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
    # group.consumer.assignor.offload.inline.max.changed.members: a small change computed inline
    # all the same (0, the simulator's default: every computation of such a group offloaded)
    offload_inline_max_changed: int = 0
    offload_delay_max_ms: int = 2_000  # how long a worker may take (virtual time)
    start_spread_ms: int | None = None  # clients first start within this (None: heartbeat interval)
    parks_joins: bool = True  # joins wait for a new group's first target (the runtime; batching)
    store_fault_rate: float = (
        0.02  # chance per batch of store-fail / slow-fsync, per job late-offload
    )
    slow_fsync_max_ms: int = 2_000  # slow-fsync: how long a batch's fsync may take
    late_offload_ms: int = 10_000  # late-offload: how late a worker's outcome may come back
    busy_max_ms: int = 2_000  # busy-loop: how long the coordinator's loop may be held up
    groups: int = 1  # groups, each of ``members`` clients of its own, on the same topics
    coordinator_partitions: int = 1  # offsets.topic.num.partitions: the groups hashed onto them

    @property
    def multi(self) -> bool:
        """Several groups or coordinator partitions (``--groups``, ``--coordinator-partitions``):
        the groups' reads join the client mix (a random stream of their own)."""
        return self.groups > 1 or self.coordinator_partitions > 1

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
        # What only the runtime sees: a write still in its slow fsync, a worker's outcome still
        # on its way back, a loop held up, when the faults stop.
        # (with several groups or partitions a failing append takes as long: coordinator.py)
        slow = "slow-fsync" in self.faults or (self.multi and "store-fail" in self.faults)
        bound += self.slow_fsync_max_ms * slow
        bound += self.busy_max_ms * ("busy-loop" in self.faults)
        # A partition moved away (moves.py): its write held, the gap, the load, a late answer;
        # then its clients find it again after their back-off.
        if "partition-move" in self.faults:
            bound += moves_unavailable_ms() + self.retry_backoff_ms
        if self.offload_min_members and "late-offload" in self.faults:
            bound += self.late_offload_ms
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
                + (
                    f" --offload-inline-max-changed {self.offload_inline_max_changed}"
                    if self.offload_inline_max_changed
                    else ""
                )
                if self.offload_min_members
                else ""
            )
            + (" --no-park" if self.assignment_interval_ms and not self.parks_joins else "")
            + (f" --fault-rate {self.fault_rate}" if self.fault_rate != FAULT_RATE else "")
            + (
                f" --groups {self.groups} --coordinator-partitions {self.coordinator_partitions}"
                if self.multi
                else ""
            )
        )
