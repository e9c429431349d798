"""Turns: each state machine gets its share of the event loop, as in Kafka's event accumulator.

Kafka's coordinator runtime queues every event under its shard (a ``__consumer_offsets``
partition) and its threads take the shards in turn, so a flood of events for one shard — a
join storm in one big group — delays that shard, not the groups of the others. Here every
command runs on the event loop thread, so the same fairness is made per loop iteration:

* A command runs at once when its state machine has nothing queued and has used less than
  ``budget_s`` of processing time in this loop iteration (the common case: no queue, no wait,
  two clock reads).
* Otherwise it is queued behind its state machine's earlier commands, with the caller's context
  (contextvars: trace context, arrival time), and the caller awaits its result.
* Once per loop iteration, :meth:`Turns._drain` gives every state machine with a queue up to
  ``budget_s`` of it, in turn, and resets the iteration's accounts.

So the commands of one state machine keep their arrival order, and a burst for one state machine
costs the others at most ``budget_s`` of waiting per loop iteration instead of the whole burst.
A queued command whose caller went away (its future cancelled) is not run.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import deque
from collections.abc import Callable
from time import perf_counter
from typing import Any, TypeVar

T = TypeVar("T")

DEFAULT_BUDGET_S = 0.002
"""Processing time a state machine may use per loop iteration before its commands queue."""


class Turns:
    __slots__ = ("_budget", "_loop", "_queues", "_scheduled", "_spent")

    def __init__(self, loop: asyncio.AbstractEventLoop, budget_s: float = DEFAULT_BUDGET_S) -> None:
        self._loop = loop
        self._budget = budget_s
        # state machine -> (caller's context, call, its future), in arrival order
        self._queues: dict[int, deque[tuple[contextvars.Context, Callable[[], Any], Any]]] = {}
        self._spent: dict[int, float] = {}  # state machine -> seconds used this iteration
        self._scheduled = False

    def now(self, key: int) -> bool:
        """May a command of ``key`` run at once (then the caller runs it with :meth:`charge`)?"""
        return key not in self._queues and self._spent.get(key, 0.0) < self._budget

    def charge(self, key: int, seconds: float) -> None:
        """A command of ``key`` ran at once and took ``seconds``."""
        spent = self._spent
        spent[key] = spent.get(key, 0.0) + seconds
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._drain)

    def later(self, key: int, call: Callable[[], T]) -> asyncio.Future[T]:
        """Queue ``call`` behind ``key``'s earlier commands; it runs in the caller's context."""
        fut: asyncio.Future[T] = self._loop.create_future()
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = deque()
        queue.append((contextvars.copy_context(), call, fut))
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._drain)
        return fut

    @property
    def queued(self) -> int:
        """Commands waiting for their turn."""
        return sum(len(q) for q in self._queues.values())

    def _drain(self) -> None:
        self._scheduled = False
        spent = self._spent
        spent.clear()
        budget = self._budget
        queues = self._queues
        for key in list(queues):
            queue = queues[key]
            used = 0.0
            while queue and used <= budget:  # at least one command per turn
                ctx, call, fut = queue.popleft()
                if fut.cancelled():
                    continue
                start = perf_counter()
                try:
                    result = ctx.run(call)
                except (KeyboardInterrupt, SystemExit):
                    raise
                except BaseException as exc:  # noqa: BLE001 - the caller gets it, as if it ran it
                    fut.set_exception(exc)
                else:
                    fut.set_result(result)
                used += perf_counter() - start or 1e-9
            spent[key] = used
            if not queue:
                del queues[key]
        if queues:
            self._scheduled = True
            self._loop.call_soon(self._drain)
