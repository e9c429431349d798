"""The runtime's driver on virtual time: the host the harness, the simulator and the explorer
give :class:`~coordinator.runtime.driver.Driver`, so that they run the decisions the server runs
(FoundationDB and TigerBeetle simulate the code that ships).

* :class:`VirtualFuture` has the surface of ``asyncio.Future`` the driver uses; its
  done-callbacks do not run when it is resolved but on the world's next step
  (:meth:`VirtualWorld.run_ready`), as asyncio runs them with ``call_soon``: a caller resumes
  after the command that answered it, and after the commands queued behind it in the same
  turn.
* :class:`VirtualClock` is wall time and timer time at once, moved by its owner; ``manual``
  clocks (the harness, the explorer, the server's ``--clock manual``) fire timers only when
  told, the simulator's fires them at their deadlines through ``call_later``.
* :class:`VirtualWorld` is the :class:`~coordinator.runtime.driver.Host`: a ready queue for
  ``call_soon``, ``call_later`` handed to the owner's ``later`` (the simulator's event queue;
  by default nothing runs later), batches written when the owner says
  (:meth:`VirtualWorld.write_all`: at once; the simulator writes with delays and faults), and
  offloaded jobs held until the owner finishes them (:meth:`VirtualWorld.finish`) or handed to
  the owner's ``run_job`` (the simulator's workers).

Deterministic: no threads, no clock of its own, no randomness (the owner draws it).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from coordinator.core.records import Record
from coordinator.core.target_assignment import AssignmentJob, AssignmentOutcome

_PENDING, _RESULT, _ERROR, _CANCELLED = range(4)


class InvalidStateError(Exception):
    """A future resolved twice (asyncio.InvalidStateError)."""


class VirtualFuture:
    __slots__ = ("_callbacks", "_ready", "_state", "_value", "label")

    def __init__(self, ready: deque[Callable[[], Any]]) -> None:
        self._ready = ready
        self._state = _PENDING
        self._value: Any = None
        self._callbacks: list[Callable[[VirtualFuture], Any]] = []
        self.label: Any = None
        """What its owner knows it as (the explorer: the client and request it answers)."""

    def done(self) -> bool:
        return self._state != _PENDING

    def cancelled(self) -> bool:
        return self._state == _CANCELLED

    def _resolve(self, state: int, value: Any) -> None:
        if self._state != _PENDING:
            raise InvalidStateError(f"future already resolved: {self!r}")
        self._state, self._value = state, value
        for callback in self._callbacks:
            self._ready.append(partial(callback, self))
        self._callbacks.clear()

    def set_result(self, value: Any) -> None:
        self._resolve(_RESULT, value)

    def set_exception(self, exc: BaseException) -> None:
        self._resolve(_ERROR, exc)

    def cancel(self) -> bool:
        if self._state != _PENDING:
            return False
        self._resolve(_CANCELLED, None)
        return True

    def result(self) -> Any:
        if self._state == _ERROR:
            raise self._value
        if self._state != _RESULT:
            raise InvalidStateError(f"future not resolved: {self!r}")
        return self._value

    def exception(self) -> BaseException | None:
        if self._state == _PENDING:
            raise InvalidStateError(f"future not resolved: {self!r}")
        return self._value if self._state == _ERROR else None

    def add_done_callback(self, callback: Callable[[VirtualFuture], Any]) -> None:
        if self._state == _PENDING:
            self._callbacks.append(callback)
        else:
            self._ready.append(partial(callback, self))

    def outcome(self) -> Any:
        """The result, or the exception (resolved futures only)."""
        return self._value

    def checkpoint(self) -> tuple[int, Any, tuple[Callable[[VirtualFuture], Any], ...]]:
        """Its state, for :meth:`restore` (the explorer goes back to earlier states)."""
        return self._state, self._value, tuple(self._callbacks)

    def restore(self, checkpoint: tuple[int, Any, tuple[Any, ...]]) -> None:
        self._state, self._value, callbacks = checkpoint
        self._callbacks = list(callbacks)


class VirtualClock:
    """Wall time and timer time at once, both ``now`` (ms), moved by its owner (``now`` set,
    or :meth:`advance`). ``manual`` (the default): no timer fires on its own, the owner fires
    the due ones (the harness, the explorer, the server's ``--clock manual``); the simulator's
    is not manual, so the driver wakes up at deadlines through the host's ``call_later``."""

    def __init__(self, now_ms: int = 0, *, manual: bool = True) -> None:
        self.now = now_ms
        self.manual = manual

    def advance(self, ms: int) -> int:
        """Move time ``ms`` forward; returns the new time."""
        if ms < 0:
            raise ValueError(f"cannot move the clock backwards ({ms} ms)")
        self.now += ms
        return self.now

    def now_ms(self) -> int:
        return self.now

    def monotonic_ms(self) -> int:
        return self.now

    def timer_deadline(self, deadline_ms: int) -> int:
        return deadline_ms


class _Handle:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class VirtualWorld:
    """The :class:`~coordinator.runtime.driver.Host` on virtual time (see the module
    docstring). ``later``: ``(delay_ms, callback)`` runs ``callback`` after ``delay_ms`` of
    virtual time (None: never); ``changed``: the groups a durable batch changed; ``run_job``:
    ``(shard, group, job)`` computes an offloaded target (None: held in :attr:`jobs`)."""

    def __init__(
        self,
        clock: VirtualClock,
        *,
        later: Callable[[int, Callable[[], Any]], Any] | None = None,
        changed: Callable[[Iterable[str]], Any] | None = None,
        run_job: Callable[[int, str, AssignmentJob], Any] | None = None,
    ) -> None:
        self.clock = clock
        self.ready: deque[Callable[[], Any]] = deque()
        self._later = later
        self._changed = changed
        self._run_job = run_job
        self.jobs: dict[str, tuple[int, AssignmentJob]] = {}  # group -> (shard, job) running
        self.failing_writes: deque[BaseException] = deque()
        """The errors the next batches' writes fail with (:meth:`write_all`), in order."""
        self.driver: Any = None  # set by the owner once its driver is built

    # ------------------------------------------------------------------ Host

    def new_future(self) -> VirtualFuture:
        return VirtualFuture(self.ready)

    def call_soon(self, callback: Callable[[], Any]) -> None:
        self.ready.append(callback)

    def call_later(self, delay_ms: float, callback: Callable[[], Any]) -> _Handle:
        handle = _Handle()
        if self._later is not None:
            self._later(int(delay_ms), lambda: None if handle.cancelled else callback())
        return handle

    def perf(self) -> float:
        return self.clock.now / 1000

    def write(self) -> None:
        """Nothing to do: the owner takes the pending batches when it settles."""

    def run_job(self, index: int, group_id: str, job: AssignmentJob) -> None:
        if self._run_job is None:
            self.jobs[group_id] = (index, job)
        else:
            self._run_job(index, group_id, job)

    def changed(self, group_ids: Iterable[str]) -> None:
        if self._changed is not None:
            self._changed(group_ids)

    def health_changed(self) -> None:
        pass

    # ------------------------------------------------------------------ the owner's side

    def run_ready(self, limit: int = 100_000) -> int:
        """Run the callbacks due on the next step (and those they schedule), in order;
        bounded. Returns how many ran."""
        ready = self.ready
        n = 0
        while ready and n < limit:
            ready.popleft()()
            n += 1
        if ready:
            raise RuntimeError(f"the virtual loop did not settle in {limit} callbacks")
        return n

    def write_all(self, store: list[Record]) -> int:
        """Write every pending batch at once, durably (appended to ``store``), or fail it
        (:attr:`failing_writes`); returns how many."""
        driver = self.driver
        n = 0
        while (batch := driver.take_batch()) is not None:
            if self.failing_writes:
                driver.write_failed(batch, self.failing_writes.popleft())
            else:
                store.extend(batch.records)
                driver.written(batch)
            n += 1
        return n

    def settle(self, store: list[Record], limit: int = 10_000) -> None:
        """Until nothing is left to do on this instant: write what is pending, run what is
        ready (bounded)."""
        for _ in range(limit):
            if not self.write_all(store) and not self.ready:
                return
            self.run_ready()
        raise RuntimeError(f"the virtual world did not settle in {limit} rounds")

    def finish(self, group_id: str, outcome: AssignmentOutcome) -> None:
        """The worker computing ``group_id``'s target is done: the driver applies ``outcome``."""
        index, _job = self.jobs.pop(group_id)
        self.driver.own.job_done(index, group_id, outcome)
