"""Admission: new gRPC calls (``h2grpc.py``) are started fairly between groups, a bounded number
per event-loop iteration; what our gRPC server's connections read is bounded per iteration too
(:class:`ReadTurns`).

A burst of thousands of calls read in one iteration (a join storm: 5,000 members on a few
HTTP/2 connections) would otherwise have every call's first step run before anything read
later — decoding, the service layer, queueing its command, tens of µs
each — so a heartbeat of another group arriving just after it waited for the whole burst
(about 150 ms for 5,000 joins here). With admission at most ``budget`` calls start per
iteration; the others wait their key's turn, one per key in turn, so that heartbeat waits for
about one iteration's budget. The key is the group the call's request names
(``fairness.GroupKeys``; the connection for a call that names none): a heartbeat of another
group starts ahead of the storm's next join however the storm's members share connections
with it. A key's calls start in arrival order. The coordinator's own turns
(``runtime/turns.py``) then share the loop between state machines; this shares it between
groups before that.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")

DEFAULT_BUDGET = 64
"""Calls started per event-loop iteration at most (about 2 ms of first steps here)."""


class Admission(Generic[K, T]):
    """Start ``item`` of group (or connection) ``key`` with ``run(key, item)``: at once while the
    iteration's budget lasts and its key has nothing waiting, else in its turn."""

    __slots__ = (
        "_alive",
        "_budget",
        "_count",
        "_dropped",
        "_run",
        "_scheduled",
        "_started",
        "_waiting",
    )

    def __init__(
        self,
        run: Callable[[K, T], None],
        budget: int = DEFAULT_BUDGET,
        alive: Callable[[T], bool] = lambda item: True,
    ) -> None:
        self._run = run
        self._budget = budget
        self._alive = alive  # False: the item ended while it waited (it never starts)
        self._started = 0  # in this iteration
        self._scheduled = False
        # key -> its items waiting to start, in arrival order; dict order is the turn
        self._waiting: dict[K, deque[T]] = {}
        self._count = 0  # items waiting, ended ones included
        self._dropped = 0  # items that ended while waiting, since the last sweep

    def start(self, key: K, item: T) -> None:
        queue = self._waiting.get(key)
        if queue is None and self._started < self._budget:
            self._started += 1
            self._schedule()
            self._run(key, item)
            return
        if queue is None:
            queue = self._waiting[key] = deque()
        queue.append(item)
        self._count += 1
        self._schedule()

    @property
    def waiting(self) -> int:
        return self._count

    def dropped(self) -> None:
        """An item that waits has ended (a call its client reset): it will not start, and it
        is forgotten, with the others that ended, once they are as many as half of what waits
        (a sweep: amortized O(1) each). What waits is thus at most about twice what is alive:
        a client that resets its calls as fast as it sends them does not grow the queue (it
        did: a rapid-reset flood kept every call it sent until its turn, 64 an iteration)."""
        self._dropped += 1
        if self._dropped < max(self._budget, self._count // 2):
            return
        alive, waiting = self._alive, self._waiting
        for key in list(waiting):  # in place: an iteration under way goes on with them
            queue = waiting[key]
            left = [item for item in queue if alive(item)]
            self._count -= len(queue) - len(left)
            queue.clear()
            if left:
                queue.extend(left)
            else:
                del waiting[key]
        self._dropped = 0

    def clear(self) -> None:
        """Drop every waiting item: nothing starts any more (the server stops and answers
        them itself)."""
        self._waiting = {}
        self._count = self._dropped = 0

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._next_iteration)

    def _next_iteration(self) -> None:
        """A new iteration: start waiting items, one per key in turn, up to the
        budget; the rest wait for the next. One that ended while it waited is passed over
        and takes no share of the budget."""
        self._scheduled = False
        started = 0
        waiting = self._waiting
        budget = self._budget
        run = self._run
        alive = self._alive
        while waiting and started < budget:
            for key in list(waiting):
                queue = waiting.get(key)
                if queue is None:  # swept meanwhile (``dropped``)
                    continue
                item = queue.popleft()
                self._count -= 1
                if not queue:
                    del waiting[key]
                if not alive(item):
                    continue
                run(key, item)
                started += 1
                if started >= budget:
                    break
        self._started = started
        if waiting or started:
            self._schedule()


class Reading(Protocol):
    """A connection whose input waits for its turn (:class:`ReadTurns`)."""

    def read_turn(self) -> None:
        """Take this iteration's share of what it read (:meth:`ReadTurns.take`)."""


class ReadTurns:
    """What our gRPC server's connections read, a bounded number of bytes per event-loop
    iteration in all (``budget``): a connection takes what is left of this iteration's budget
    (:meth:`take`) and keeps the rest of what it read for its turn in a later iteration
    (:meth:`wait`; it pauses reading meanwhile), the connections that wait in turn. A
    connection with nothing waiting may always take a little (``least``): the heartbeat of a
    quiet connection does not queue behind the backlog of a storm's connections. Calls read
    are parsed and started in the read (libnghttp2, the service's first step), 20-odd µs each:
    a burst of 10,000 calls on 50 connections read at once made one iteration of the loop last
    about 0.2 s of CPU, and a call read on another connection waited for all of it."""

    __slots__ = ("_budget", "_left", "_scheduled", "_waiting")

    def __init__(self, budget: int) -> None:
        self._budget = budget
        self._left = budget
        self._scheduled = False
        self._waiting: deque[Reading] = deque()

    def take(self, wanted: int, least: int = 0) -> int:
        """Bytes of ``wanted`` a connection may handle now, in this iteration: what is left of
        its budget, but at least ``least`` (a connection with nothing waiting: a quiet
        client's call is read as it arrives, not after every other connection's backlog)."""
        self._schedule()
        taken = min(wanted, max(self._left, least))
        self._left -= taken
        return taken

    def wait(self, conn: Reading) -> None:
        """``conn`` has input left: its ``read_turn`` in a later iteration, in turn."""
        self._waiting.append(conn)
        self._schedule()

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._next_iteration)

    def _next_iteration(self) -> None:
        self._scheduled = False
        self._left = self._budget
        waiting = self._waiting
        for _ in range(len(waiting)):
            if self._left <= 0:
                break
            waiting.popleft().read_turn()
        if waiting:
            self._schedule()
