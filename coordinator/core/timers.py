"""Keyed timers, as values. Handlers return :class:`ArmTimer` / :class:`CancelTimer` operations;
:class:`TimerTable` applies them (arming a key replaces its previous timer) and hands back
the timers that fell due, in deadline order (then arming order). Pure: no clock, no IO; the
runtime and the test harness both drive it with their own notion of "now".
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass

TimerKey = tuple[str, str, str]
"""(kind, group_id, member_id); kind is "session" or "rebalance" (later: classic timers)."""

SESSION = "session"
REBALANCE = "rebalance"
ASSIGN = "assign"
"""A group's next target assignment is due (batching: the assignment interval has passed).
Keyed ``(ASSIGN, group_id, "")``."""


@dataclass(frozen=True, slots=True)
class ArmTimer:
    key: TimerKey
    deadline_ms: int
    payload: int = 0
    """Captured state the timer checks when it fires (e.g. the member epoch for rebalance)."""


@dataclass(frozen=True, slots=True)
class CancelTimer:
    key: TimerKey


TimerOp = ArmTimer | CancelTimer


@dataclass(frozen=True, slots=True)
class DueTimer:
    key: TimerKey
    deadline_ms: int
    payload: int


class TimerTable:
    """Active timers by key, plus a heap ordered by (deadline, sequence). Superseded heap
    entries are skipped lazily, so a cancelled or replaced timer never fires. Deadlines are
    kept relative to a base that :meth:`shift` moves: every timer moves at once."""

    __slots__ = ("_active", "_base", "_heap", "_seq")

    def __init__(self) -> None:
        self._active: dict[TimerKey, tuple[int, int, int]] = {}  # key -> (deadline, seq, payload)
        self._heap: list[tuple[int, int, TimerKey]] = []
        self._seq = 0
        self._base = 0  # a timer's deadline is its stored one plus this

    def apply(self, ops: list[TimerOp] | tuple[TimerOp, ...], later_ms: int = 0) -> None:
        """Arm and cancel, in order; every deadline armed ``later_ms`` later than its
        operation says (the runtime's timer time: no operation rebuilt for it)."""
        active, heap, push = self._active, self._heap, heapq.heappush
        seq, later = self._seq, later_ms - self._base
        for op in ops:
            if type(op) is ArmTimer:
                seq += 1
                deadline = op.deadline_ms + later
                active[op.key] = (deadline, seq, op.payload)
                push(heap, (deadline, seq, op.key))
            else:
                active.pop(op.key, None)
        self._seq = seq
        if len(self._heap) > 64 and len(self._heap) > 4 * len(self._active):
            self._compact()

    def _compact(self) -> None:
        self._heap = [(d, s, k) for k, (d, s, _p) in self._active.items()]
        heapq.heapify(self._heap)

    def next_deadline(self) -> int | None:
        heap, active = self._heap, self._active
        while heap:
            deadline, seq, key = heap[0]
            current = active.get(key)
            if current is not None and current[1] == seq:
                return deadline + self._base
            heapq.heappop(heap)
        return None

    def pop_due(self, now_ms: int) -> DueTimer | None:
        """Remove and return the earliest timer with deadline <= now_ms, if any."""
        deadline = self.next_deadline()
        if deadline is None or deadline > now_ms:
            return None
        _d, _seq, key = heapq.heappop(self._heap)
        _d2, _s2, payload = self._active.pop(key)
        return DueTimer(key, deadline, payload)

    def get(self, key: TimerKey) -> tuple[int, int] | None:
        """(deadline_ms, payload) of the active timer with this key, if any."""
        entry = self._active.get(key)
        return None if entry is None else (entry[0] + self._base, entry[2])

    def cancel_where(self, doomed: Callable[[TimerKey], bool]) -> int:
        """Cancel every active timer whose key ``doomed`` says so, in one pass (no ordering of
        the keys: a partition moving away drops a share of a big table). Returns how many."""
        gone = [key for key in self._active if doomed(key)]
        for key in gone:
            del self._active[key]
        if len(self._heap) > 64 and len(self._heap) > 4 * len(self._active):
            self._compact()
        return len(gone)

    def cancel(self, keys: Iterable[TimerKey]) -> int:
        """Cancel the active timers of ``keys`` (the others ignored). Returns how many."""
        active = self._active
        n = sum(active.pop(key, None) is not None for key in keys)
        if len(self._heap) > 64 and len(self._heap) > 4 * len(active):
            self._compact()
        return n

    def key_list(self) -> list[TimerKey]:
        """The active timers' keys, in no particular order (a copy)."""
        return list(self._active)

    def shift(self, delta_ms: int) -> int:
        """Move every deadline ``delta_ms`` later, at once: the base moves, nothing is
        rewritten (a stalled coordinator grants its members the time it was away; with a
        million timers, even one pass over them took a second or two on a busy machine, which
        made the next tick late again: a node stalled over and over and lost its leases).
        Returns how many timers moved."""
        self._base += delta_ms
        return len(self._active)

    def keys(self) -> list[TimerKey]:
        return sorted(self._active)

    def __len__(self) -> int:
        return len(self._active)
