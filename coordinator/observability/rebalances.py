"""Rebalances, from what the core says happened: epoch bumps by cause, completed classic
rebalances, and how long rebalances take.

The core returns :class:`~coordinator.core.events.LogEvent` values with a command's result; the
runtime logs them once the command's batch is durable. The tracker is fed the same events at
the same moment (never those of a batch that failed), so the metrics and the log can never
disagree:

* ``GROUP_EPOCH_BUMPED`` counts one bump in ``kip848_consumer_group_rebalances_total`` under
  its **primary cause**, the first of the event's ``causes`` (the core lists a member's own
  change before ``topic_metadata_changed``); the values are :class:`~coordinator.core.events.
  Cause`'s. It also starts a consumer group rebalance, unless one is already running (a bump
  during a rebalance extends it).
* ``CLASSIC_REBALANCE_PREPARED`` (a classic group enters PreparingRebalance) starts a classic
  rebalance; ``CLASSIC_GENERATION_STABILIZED`` (a new generation with members) counts in
  ``kip848_classic_group_completed_rebalances_total``.
* A rebalance ends when its group is **Stable**: the consumer group's target assignment is at
  the group epoch and every member reconciled to it; the classic group got its leader's
  assignment (CompletingRebalance → Stable). Its duration, from the start until then, goes into
  ``kip848_rebalance_duration_seconds{group_type}``. A group that empties, is deleted or
  changes type (``GROUP_UPGRADED``/``GROUP_DOWNGRADED``, ``CLASSIC_GROUP_EMPTIED``) ends it
  without a sample.

The state a command left its group in is read right after the command ran (through the shard's
public :meth:`~coordinator.core.shard.GroupCoordinatorShard.listed_group`), only for groups with
a rebalance running or starting, and applied in command order with the events once durable:
the duration ends exactly with the command that made the group Stable. Steady heartbeats write
no records and are never looked at.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from coordinator.core.events import Event, LogEvent

from .metrics import CoordinatorMetrics

_STARTS = {Event.GROUP_EPOCH_BUMPED: "consumer", Event.CLASSIC_REBALANCE_PREPARED: "classic"}
_ENDS_WITHOUT_SAMPLE = frozenset(
    {
        Event.GROUP_UPGRADED,
        Event.GROUP_DOWNGRADED,
        Event.GROUP_DELETED,
        Event.CLASSIC_GROUP_EMPTIED,
    }
)

GroupStates = tuple[tuple[str, str | None, str | None], ...]
"""(group id, group type, state) after a command, for the groups the tracker watches; type and
state None when the group is gone."""
Kept = tuple[Sequence[LogEvent], GroupStates]
"""What the tracker keeps of one command until its batch is durable (or failed)."""


class RebalanceTracker:
    __slots__ = ("_starting", "metrics", "running")

    def __init__(self, metrics: CoordinatorMetrics | None) -> None:
        self.metrics = metrics
        self.running: dict[str, tuple[str, float]] = {}
        """group id -> (group type, monotonic time the rebalance started), durable ones."""
        self._starting: dict[str, int] = {}
        """group id -> starting events of commands run but not yet durable."""

    # ------------------------------------------------------------------ command time

    def after_command(
        self, shard: Any, records: Sequence[Any], events: Sequence[LogEvent]
    ) -> Kept | None:
        """Right after a command ran on ``shard`` (records and events of its result): what to
        keep until its batch is durable (None: nothing). Called on the event loop."""
        starting = self._starting
        for e in events:
            if e.event in _STARTS:
                starting[e.group_id] = starting.get(e.group_id, 0) + 1
        if not records or not (self.running or starting):
            return (events, ()) if events else None
        running = self.running
        seen: set[str] = set()
        states: list[tuple[str, str | None, str | None]] = []
        for rec in records:
            gid = rec.group_id
            if gid is None or gid in seen:
                continue
            seen.add(gid)
            if gid in running or gid in starting:
                listed = shard.listed_group(gid)
                if listed is None:
                    states.append((gid, None, None))
                else:
                    states.append((gid, listed.group_type, listed.group_state))
        if not states:
            return (events, ()) if events else None
        return (events, tuple(states))

    def dropped(self, kept: Kept) -> None:
        """What :meth:`after_command` kept will never be durable (its batch failed)."""
        self._unstart(kept[0])

    # ------------------------------------------------------------------ durable

    def durable(self, kept: Kept) -> None:
        """A command's batch is durable: apply its events, then the state it left its groups in."""
        events, states = kept
        now = time.monotonic()
        self._unstart(events)
        metrics = self.metrics
        running = self.running
        for e in events:
            kind = e.event
            gid = e.group_id
            if kind is Event.GROUP_EPOCH_BUMPED:
                if metrics is not None:
                    causes = e.fields.get("causes") or ("other",)
                    metrics.rebalance(str(causes[0]))
            elif kind is Event.CLASSIC_GENERATION_STABILIZED:
                if metrics is not None:
                    metrics.classic_rebalances.inc()
            elif kind in _ENDS_WITHOUT_SAMPLE:
                running.pop(gid, None)
            group_type = _STARTS.get(kind)
            if group_type is not None and gid not in running:
                running[gid] = (group_type, now)
        for gid, group_type, state in states:
            started = running.get(gid)
            if started is None:
                continue
            if group_type != started[0] or state in (None, "Empty", "Dead"):
                del running[gid]  # gone, emptied or converted: no rebalance left to finish
            elif state == "Stable":
                del running[gid]
                if metrics is not None:
                    metrics.rebalance_completed(group_type, now - started[1])

    def _unstart(self, events: Sequence[LogEvent]) -> None:
        starting = self._starting
        for e in events:
            if e.event in _STARTS:
                n = starting.get(e.group_id, 0) - 1
                if n > 0:
                    starting[e.group_id] = n
                else:
                    starting.pop(e.group_id, None)
