"""Turns: each state machine gets its share of the event loop, as in Kafka's event accumulator.

Kafka's coordinator runtime queues every event under its shard (a ``__consumer_offsets``
partition) and its threads take the shards in turn, so a flood of events for one shard — a
join storm in one big group — delays that shard, not the groups of the others. Here every
command runs on the event loop thread, so the same fairness is made per loop iteration:

* A command runs at once when its state machine has nothing queued and has used less than
  ``budget_s`` of processing time in this loop iteration (the common case: no queue, no wait,
  two clock reads).
* Otherwise it is queued behind its state machine's earlier commands, with the caller's context
  (contextvars: trace context, arrival time).
* Once per loop iteration, :meth:`Turns._drain` gives every state machine with a queue up to
  ``budget_s`` of it, in turn, and resets the iteration's accounts.

So a burst for one state machine costs the others at most ``budget_s`` of waiting per loop
iteration instead of the whole burst.

Within a state machine, joins (a member's first heartbeat, epoch 0) queue in a lane of their own
behind everything else: a command that is not a join runs before the joins queued ahead of it,
and may run at once while only joins are queued. In a join storm the members already in a group
are served first: their heartbeats re-arm their sessions (a member is not fenced because of
the server's backlog), and the acknowledgements of revocations, which free the partitions the
new members wait for, are not stuck behind thousands of joins. Apart from that the commands of
a state machine keep their arrival order (joins among joins, the rest among the rest). Queued
commands have not been answered, so any order between them is one the clients could have seen.

No IO: the loop is the caller's. ``call_soon`` schedules the next drain (the asyncio engine:
``loop.call_soon``; the simulator: an event at the same virtual instant) and ``perf`` measures
processing time (the engine: ``time.perf_counter``; the simulator: its virtual clock, so only
an injected busy loop makes commands queue). A queued call is a thunk: the driver answers its
caller from inside it (coordinator/runtime/driver.py).
"""

from __future__ import annotations

import contextvars
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

log = logging.getLogger("kip848.runtime")

_Queued = tuple[contextvars.Context, Callable[[], Any]]

DEFAULT_BUDGET_S = 0.002
"""Processing time a state machine may use per loop iteration before its commands queue."""


class Turns:
    __slots__ = ("_budget", "_call_soon", "_joins", "_perf", "_queues", "_scheduled", "_spent")

    def __init__(
        self,
        call_soon: Callable[[Callable[[], None]], Any],
        perf: Callable[[], float],
        budget_s: float = DEFAULT_BUDGET_S,
    ) -> None:
        self._call_soon = call_soon
        self._perf = perf
        self._budget = budget_s
        # state machine -> (caller's context, call), in arrival order; joins apart
        self._queues: dict[int, deque[_Queued]] = {}
        self._joins: dict[int, deque[_Queued]] = {}
        self._spent: dict[int, float] = {}  # state machine -> seconds used this iteration
        self._scheduled = False

    def now(self, key: int, *, join: bool = False) -> bool:
        """May a command of ``key`` run at once (then the caller runs it with :meth:`charge`)?
        ``join``: it is a join, which waits for the joins queued before it too."""
        return (
            key not in self._queues
            and not (join and key in self._joins)
            and self._spent.get(key, 0.0) < self._budget
        )

    def charge(self, key: int, seconds: float) -> None:
        """A command of ``key`` ran at once and took ``seconds``."""
        spent = self._spent
        spent[key] = spent.get(key, 0.0) + seconds
        self._schedule()

    def later(self, key: int, call: Callable[[], Any], *, join: bool = False) -> None:
        """Queue ``call`` behind ``key``'s earlier commands (a join: behind all of them; else
        behind the earlier ones that are not joins); it runs in the caller's context."""
        lanes = self._joins if join else self._queues
        queue = lanes.get(key)
        if queue is None:
            queue = lanes[key] = deque()
        queue.append((contextvars.copy_context(), call))
        self._schedule()

    def joins_queued(self, key: int) -> int:
        """Joins of ``key`` waiting for their turn."""
        queue = self._joins.get(key)
        return 0 if queue is None else len(queue)

    @property
    def queued(self) -> int:
        """Commands waiting for their turn."""
        return sum(len(q) for q in self._queues.values()) + sum(
            len(q) for q in self._joins.values()
        )

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            self._call_soon(self._drain)

    def _drain(self) -> None:
        self._scheduled = False
        spent = self._spent
        spent.clear()
        budget = self._budget
        perf = self._perf
        queues, joins = self._queues, self._joins
        for key in list(queues.keys() | joins.keys()):
            used = 0.0
            for lanes in (queues, joins):
                queue = lanes.get(key)
                while queue and used <= budget:  # at least one command per turn
                    ctx, call = queue.popleft()
                    start = perf()
                    try:
                        ctx.run(call)
                    except Exception:  # a thunk answers its caller itself; this is a bug
                        log.exception("A queued command failed outside its caller")
                    used += perf() - start or 1e-9
                if queue is not None and not queue:
                    del lanes[key]
            spent[key] = used
        if queues or joins:
            self._schedule()
