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

So a burst for one state machine costs the others at most ``budget_s`` of waiting per loop
iteration instead of the whole burst. A queued command whose caller went away (its future
cancelled) is not run.

Within a state machine, joins (a member's first heartbeat, epoch 0) queue in a lane of their own
behind everything else: a command that is not a join runs before the joins queued ahead of it,
and may run at once while only joins are queued. In a join storm the members already in a group
are served first: their heartbeats re-arm their sessions (a member is not fenced because of
the server's backlog), and the acknowledgements of revocations, which free the partitions the
new members wait for, are not stuck behind thousands of joins. Apart from that the commands of
a state machine keep their arrival order (joins among joins, the rest among the rest). Queued
commands have not been answered, so any order between them is one the clients could have seen.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import deque
from collections.abc import Callable
from time import perf_counter
from typing import Any, TypeVar

T = TypeVar("T")
_Queued = tuple[contextvars.Context, Callable[[], Any], "asyncio.Future[Any]"]

DEFAULT_BUDGET_S = 0.002
"""Processing time a state machine may use per loop iteration before its commands queue."""


class Turns:
    __slots__ = ("_budget", "_joins", "_loop", "_queues", "_scheduled", "_spent")

    def __init__(self, loop: asyncio.AbstractEventLoop, budget_s: float = DEFAULT_BUDGET_S) -> None:
        self._loop = loop
        self._budget = budget_s
        # state machine -> (caller's context, call, its future), in arrival order; joins apart
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
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._drain)

    def later(self, key: int, call: Callable[[], T], *, join: bool = False) -> asyncio.Future[T]:
        """Queue ``call`` behind ``key``'s earlier commands (a join: behind all of them; else
        behind the earlier ones that are not joins); it runs in the caller's context."""
        fut: asyncio.Future[T] = self._loop.create_future()
        lanes = self._joins if join else self._queues
        queue = lanes.get(key)
        if queue is None:
            queue = lanes[key] = deque()
        queue.append((contextvars.copy_context(), call, fut))
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._drain)
        return fut

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

    def _drain(self) -> None:
        self._scheduled = False
        spent = self._spent
        spent.clear()
        budget = self._budget
        queues, joins = self._queues, self._joins
        for key in list(queues.keys() | joins.keys()):
            used = 0.0
            for lanes in (queues, joins):
                queue = lanes.get(key)
                while queue and used <= budget:  # at least one command per turn
                    used += _run(*queue.popleft())
                if queue is not None and not queue:
                    del lanes[key]
            spent[key] = used
        if queues or joins:
            self._scheduled = True
            self._loop.call_soon(self._drain)


def _run(ctx: contextvars.Context, call: Callable[[], Any], fut: asyncio.Future[Any]) -> float:
    """Run a queued command for its caller (unless it went away); the seconds it took."""
    if fut.cancelled():
        return 0.0
    start = perf_counter()
    try:
        result = ctx.run(call)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - the caller gets it, as if it ran it
        fut.set_exception(exc)
    else:
        fut.set_result(result)
    return perf_counter() - start or 1e-9
