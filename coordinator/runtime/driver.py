"""The runtime's decisions, without IO: a sans-IO driver of the state machines (Kafka's
CoordinatorRuntime, reduced to one process).

The driver takes what a command returns — records, response, timer operations, completions of
parked requests, first-target and offload requests, log events — and decides what happens
next. It never reads a clock of its own, never writes, never waits: time, the store and the
worker pool belong to its :class:`Host` (the asyncio engine in ``engine.py``; the harness, the
simulator and the explorer on virtual time in ``coordinator/virtual.py``), which runs the very
same decisions. Theory of operation:

* **Shards.** Groups are hashed onto ``offsets.topic.num.partitions`` coordinator partitions
  (Kafka's ``partitionFor``, :func:`coordinator.routing.partition_for`), each a shard: its own
  state machine and its own log in the store; the topic registry (the cluster log) is one more
  state machine (:data:`REGISTRY`).
  The core is synchronous, so a command runs to completion and no command ever sees another
  half-done.
* **Turns** (``turns.py``, Kafka's event accumulator): a command runs at once unless its state
  machine already used its share of this loop iteration or has commands queued; then it queues
  behind them and its caller is answered from its turn. Joins queue behind the other commands
  of their shard.
* **Group commit.** A command's records are already replayed in memory when its handler
  returns. They join the *pending batch*; the host's writer takes one batch at a time
  (:meth:`Driver.take_batch`) and reports it durable (:meth:`Driver.written`) or failed
  (:meth:`Driver.write_failed`). While a batch is in flight, new commands accumulate into the
  next one: group commit grows by itself with the load.
* **Answers after durability.** A response is released only once its batch is durable. A
  command with no records (a steady heartbeat, Kafka's write operation without records) waits
  for the last outstanding batch of its state machine, so it never exposes state that could
  still be lost; with nothing outstanding it is answered at once, without a future.
* **Reads** (``reads.py``: its doc tells how; Kafka's ``scheduleReadOperation``). A read of
  groups (OffsetFetch, DescribeGroups, ConsumerGroupDescribe, ListGroups, the push views)
  waits for no write: it reads the committed state at once, as of before any change a failed
  write could still roll back; a stable OffsetFetch (Kafka's write without records) waits for
  its own group's last batch only. The cluster log's reads and the authorizer read its
  committed copy (``committed.py``, Kafka's metadata cache), fed a batch's cluster records
  once durable, before any of its answers is released: a writer that got its answer reads it.
* **Parked requests.** A command may answer ``Pending(token)``: its caller's future is
  registered under (state machine, token) in the command's own turn, so that a command queued
  behind it in the same turn can answer it (a join that restarts a classic rebalance answers a
  waiting SyncGroup without writing anything). A later durable result's ``completions`` answer
  it. Classic JoinGroup/SyncGroup wait at their barriers this way, and so do joins to a group
  before its first target.
* **The driver's own commands** (``own_commands.py``): a new group's first target once its
  burst of joins is over (``Result.parked_joins``), a target computed by the host's workers
  once the asking command is durable (``Result.offloads``, one computation per group at a
  time), a subscription's regexes resolved off the heartbeat path
  (``Result.regex_resolutions``). Each runs as an ordinary command; with ``automatic`` off (the
  harness, the explorer) first targets and regex resolutions run when those say.
* **Write timeout** (``offsets.commit.timeout.ms``, Kafka's write timeout of the group
  coordinator's operations; the engine sets it, the virtual hosts do not). A request whose
  answer waits for a batch that is not durable within the timeout of its wait's start is
  answered :class:`WriteTimeoutError` (COORDINATOR_NOT_AVAILABLE, as Kafka's
  ``handleOperationException`` maps a timed-out write) at the timeout: an append can be held
  up for long (a COMMIT waiting for PostgreSQL to come back, or for an absent synchronous
  standby). The write goes on: if it lands its records stand (the state already holds them);
  if it fails, the failure below happens as ever. A timeout answer acknowledges nothing, and
  later requests still wait for the batch (batches are written one after the other). A
  command of the cluster log (the topic registry: topics, ACLs, SCRAM credentials, group
  configs) is the controller's in Kafka, which answers a metadata write that did not complete
  in time REQUEST_TIMED_OUT: its answer gets :class:`ClusterLogTimeoutError` instead, bounded
  from the command's arrival by the request's own timeout when it has one (CreateTopics,
  CreatePartitions, DeleteTopics: Kafka's ``timeoutMs``), else by the write timeout. A
  command that asked to hear of its write failing (``Result.write_watches``: the failure side
  of Kafka's append future; a classic leader's SyncGroup) is told at the same timeout: the
  driver runs the shard's ``on_write_error`` with the timeout's error as a command of its own,
  at once (``OwnCommands.write_errors``).
* **Failure.** If an append fails, that batch and every later un-persisted batch fail with
  COORDINATOR_NOT_AVAILABLE in-band (the requests of a partition the append was fenced off
  from, its lease taken over by another node: NOT_COORDINATOR, as Kafka's). Only the state
  machines with records in them roll back (undo log), each to its mark just before its first
  records there (``Batch.start_marks``), as Kafka rolls back only the failed partition: a
  command without records on a machine with a write outstanding waited for it (its answer
  gets the failure), one on a machine without any was answered at once (its change stands).
  The failed batches' timer operations, log events, completions and offloads are dropped;
  then each write watch of theirs is told (on the rolled-back state; again if it had timed
  out first). An append whose outcome is unknown stops the coordinator serving.
* **Logs after durability.** The core's :class:`~coordinator.core.events.LogEvent` values are
  written once their batch is durable; a batch that fails takes them with it. The host hears of
  the groups a durable batch changed (``Host.changed``: watchers, the push stream).
* **Timers** (``timing.py``). Arm/cancel operations apply to one table once their batch is
  durable; a due timer fires as an ordinary command, deferred while a not-yet-durable command
  touched its key, retried :data:`TIMER_RETRY_MS` later if its command or write failed; none
  of a state machine replaced since (its partition dropped or loaded) applies. Deadlines are
  in timer time (``clock.monotonic_ms``). With a manual clock nothing fires on its own.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from enum import Enum
from functools import partial
from typing import Any, Protocol

from coordinator.core.commands import Pending, Result
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.errors import (
    CoordinatorError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
)
from coordinator.core.events import LogEvent
from coordinator.core.target_assignment import AssignmentJob
from coordinator.core.timers import DueTimer
from coordinator.routing import CLUSTER_LOG, partition_for

from .batch import Batch
from .leadership import ClusterLogMovedError, Leadership, taken_over
from .own_commands import OwnCommands
from .reads import Reads
from .requests import Command
from .store.api import StoreFencedError, StoreWriteError
from .timing import EXPIRE_OFFSETS, STALL_GRACE_MS, TIMER_RETRY_MS, Timers
from .turns import Turns
from .write_timeout import (
    ClusterBound,
    ClusterLogTimeoutError,
    Watched,
    WriteTimeoutError,
    WriteTimeouts,
)

log = logging.getLogger("kip848.runtime")

REGISTRY = -1
"""State-machine index of the topic registry (shards are 0..n-1)."""
ANSWERS_PER_STEP = 128
"""Parked requests answered per step of the loop at most; the rest in the next steps, in
order. Each answer resumes its caller (the response encoded and sent, 15-20 µs on the gRPC
server): the batch that makes a 10,000-member storm's answers durable resumed all of them in
one step, 160 ms of CPU ahead of anything read meanwhile (another group's heartbeat)."""


__all__ = [
    "EXPIRE_OFFSETS",
    "REGISTRY",
    "STALL_GRACE_MS",
    "TIMER_RETRY_MS",
    "Batch",
    "ClusterLogMovedError",
    "ClusterLogTimeoutError",
    "Driver",
    "Host",
    "RuntimeState",
    "WriteTimeoutError",
]


class RuntimeState(Enum):
    INITIAL = "initial"
    LOADING = "loading"
    ACTIVE = "active"
    CLOSING = "closing"
    CLOSED = "closed"
    FAILED = "failed"


class Host(Protocol):
    """The world the driver runs in: its loop, its time, its writer and its workers."""

    def new_future(self) -> Any:
        """A future with ``asyncio.Future``'s surface (done, cancelled, set_result,
        set_exception, add_done_callback, result, exception); its callbacks run on a later
        step of the loop, as asyncio runs them."""

    def call_soon(self, callback: Callable[[], Any]) -> None:
        """Run ``callback`` on the next step of the loop (in a context of its own)."""

    def call_later(self, delay_ms: float, callback: Callable[[], Any]) -> Any:
        """Run ``callback`` ``delay_ms`` of loop time from now; returns a handle to
        ``cancel()``."""

    def perf(self) -> float:
        """Loop time in seconds (turns' budgets and the first targets' waits)."""

    def write(self) -> None:
        """A batch is pending: the writer takes it (:meth:`Driver.take_batch`) once free."""

    def run_job(self, index: int, group_id: str, job: AssignmentJob) -> None:
        """Compute ``job`` off the loop; report with ``driver.own.job_done``."""

    def changed(self, group_ids: Iterable[str]) -> None:
        """A durable batch changed these groups (watchers look again)."""

    def health_changed(self) -> None:
        """Whether the coordinator serves may have changed."""


class Clock(Protocol):
    manual: bool

    def now_ms(self) -> int: ...

    def monotonic_ms(self) -> int: ...

    def timer_deadline(self, deadline_ms: int) -> int: ...


class Driver:
    """The state machines (shards, then the topic registry) and every decision about them.

    ``workers``: the host computes offloaded targets (``run_job``); without workers the core's
    offload requests are ignored (the core computes inline). ``write_timeout_ms``: how long a
    request's answer waits for its batch at most (None: as long as the batch takes, whatever
    a command's own timeout says; the module docstring's "Write timeout"). ``committed``: the
    cluster-level state as of its last durable write (``committed.py``: its ``replay`` gets
    each durable batch's cluster records before any answer of the batch is released; None:
    none kept). ``trace``: called with
    ``(what, details)`` for the driver's own decisions (first targets, offloads, answers to no
    one), for the simulator's trace and tests."""

    def __init__(
        self,
        *,
        machines: Sequence[Any],
        config: GroupCoordinatorConfig,
        clock: Clock,
        host: Host,
        observer: Any = None,
        workers: bool = False,
        automatic: bool = True,
        stall_watch: bool = False,
        write_timeout_ms: int | None = None,
        committed: Any = None,
        trace: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> None:
        self.config = config
        self.committed = committed
        self.write_timeout_ms = write_timeout_ms
        self.clock = clock
        self.host = host
        self.observer = observer
        # (state machine, start, seconds) of each command the driver times itself, sharing its
        # turn accounting's clock reads with the observer's processing and queue times (None:
        # the observer times the command, or there is nothing to time)
        self._timed = None if observer is None else observer.command_timer(host.perf)
        self.workers = workers
        self.automatic = automatic
        self.trace = trace
        self._machines: list[Any] = list(machines)
        self.shards: list[Any] = self._machines[:-1]
        self.registry: Any = self._machines[-1]
        self.shard_count = len(self.shards)
        self.lead = Leadership(self.shard_count)
        """Which partitions are served here (all, unless several nodes share the store:
        ``leadership.py``, ``partitions.py``)."""
        self.timing = Timers(self, stall_watch=stall_watch)
        self.timeouts = WriteTimeouts(self)
        """Answers not durable in time (``write_timeout.py``)."""
        self.reads = Reads(self)
        """Requests' reads of groups, from the committed state (``reads.py``)."""
        self.timers = self.timing.table
        self.turns = Turns(host.call_soon, host.perf)
        self.state = RuntimeState.INITIAL
        self.failure: str | None = None  # why the driver stopped serving (state FAILED)
        self.pending: Batch | None = None
        self.inflight: Batch | None = None
        self._last_batch: dict[int, Batch] = {}  # machine index -> its last outstanding batch
        # (machine index, token) -> the parked caller's future. Tokens are numbered per shard.
        self.parked: dict[tuple[int, int], Any] = {}
        self._parking_closed = False
        # durable answers to parked requests not given yet (ANSWERS_PER_STEP), in order
        self._answers: deque[tuple[int, int, Any]] = deque()
        self.own = OwnCommands(self)
        """First targets, offloaded targets and regex resolutions (``own_commands.py``)."""
        self.stats = {
            "batches": 0,
            "records": 0,
            "commands": 0,
            "failed_batches": 0,
            "timers_fired": 0,
        }

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Serve: the state machines are loaded. Re-arms the loaded groups' timers and the
        periodic offset expiration, and starts the timer wake-ups."""
        self.state = RuntimeState.ACTIVE
        self.timing.start(self.shards)

    def stop(self) -> None:
        """No more timers or background work (the host drains and closes)."""
        self.timing.stop()
        self.own.stop()

    def check_serving(self) -> None:
        state = self.state
        if state is RuntimeState.ACTIVE:
            return
        if state in (RuntimeState.LOADING, RuntimeState.INITIAL):
            raise CoordinatorLoadInProgressError()
        if self.failure is not None:
            raise CoordinatorNotAvailableError(f"The coordinator stopped serving: {self.failure}")
        raise CoordinatorNotAvailableError(f"The coordinator is {state.value}.")

    def stop_serving(self, why: str) -> None:
        if self.state is RuntimeState.ACTIVE:
            self.state = RuntimeState.FAILED
            self.failure = why
            self.release_parked()
            self.host.health_changed()

    @property
    def active(self) -> bool:
        return self.state is RuntimeState.ACTIVE

    def fire(self, due: DueTimer, now_ms: int) -> Batch | None:
        """Fire one timer (taken from :attr:`timers`) now, as a command (``Timers.fire``)."""
        return self.timing.fire(due, now_ms)

    def shard_index(self, group_id: str) -> int:
        """The group's coordinator partition: its shard."""
        return partition_for(group_id, self.shard_count)

    def machine(self, index: int) -> Any:
        return self.registry if index == REGISTRY else self.shards[index]

    # ------------------------------------------------------------------ commands

    def execute(
        self,
        index: int,
        fn: Callable[[Any], Any],
        *,
        read: bool = False,
        group: str | None = None,
    ) -> tuple[Any, Batch | None]:
        """Run one command now, outside the turns. Returns its response and the batch it must
        wait for (None: answer at once). ``group``: the group the command is about, if one
        (what it changes without records is that group's: ``reads.py``); ``read``: a command
        that writes nothing and is answered once the shard's last outstanding batch is durable
        (the driver's own reads of inputs; a request's read of a group is ``Reads.read``)."""
        return self._execute(self.shard_count if index == REGISTRY else index, fn, read, group)

    def run_command(
        self, index: int, machine: Any, fn: Callable[[Any], Any], mark: int, timed: bool = False
    ) -> Any:
        """``fn(machine)``, observed (``timed``: its caller times it); rolled back to ``mark``
        if it raises."""
        obs = self.observer
        try:
            if obs is None:
                out = fn(machine)
            else:
                out = (obs.run_timed if timed else obs.run_command)(index, fn, machine)
        except CoordinatorError:
            machine.rollback(mark)  # the core already did; harmless and keeps the registry safe
            raise
        except BaseException as exc:
            machine.rollback(mark)
            log.exception("Unexpected error in a command on state machine %d", index)
            if self.trace is not None:
                self.trace("bug", {"index": index, "error": exc})
            raise
        self.stats["commands"] += 1
        return out

    def _execute(
        self, index: int, fn: Callable[[Any], Any], read: bool, group: str | None = None
    ) -> tuple[Any, Batch | None]:
        """:meth:`_run`, once the state machine is known to be served; timed (``_timed``)."""
        self.lead.check(index)
        timed = self._timed
        if timed is None:
            return self._run(index, fn, read, group, False)
        perf = self.host.perf
        start = perf()
        try:
            return self._run(index, fn, read, group, True)
        finally:
            timed(index, start, perf() - start)

    def _run(
        self, index: int, fn: Callable[[Any], Any], read: bool, group: str | None, timed: bool
    ) -> tuple[Any, Batch | None]:
        """Run one command and act on its result (``timed``: the caller times the whole)."""
        machine = self._machines[index]
        mark = machine.mark()
        out = self.run_command(index, machine, fn, mark, timed)
        obs = self.observer
        if read:
            last = self._last_batch.get(index)
            if obs is not None and (last is not None or obs.span is not None):
                obs.ran(index, machine, (), (), last)
            return out, last
        result: Result[Any] = out
        if self.trace is not None:
            self.trace("command", {"index": index, "result": result})
        records = result.records
        if records:
            batch = self.pending
            if batch is None:
                batch = self.pending = Batch({index: mark})
                self.host.write()
            else:
                batch.start_marks.setdefault(index, mark)
            batch.records.extend(records)
            batch.commands += 1
            self._last_batch[index] = batch
            if index == self.shard_count:
                batch.cluster.extend(records)
                self._publish_topics()
            else:
                self.reads.uncommit(index, batch, {r.group_id for r in records})
        else:
            batch = self._last_batch.get(index)
            if batch is not None and index < self.shard_count and machine.mark() != mark:
                # changed without records (a classic rebalance's state) after records of its
                # machine still outstanding: rolled back if their batch fails (without any,
                # it is committed at once: a failed write rolls back only the machines with
                # records in it)
                self.reads.uncommit(index, batch, (group,))
        if result.timers:
            timers = self.timing.convert(result.timers)
            if batch is None:
                self.timing.apply(timers)
            else:
                self.timing.touch(timers, batch.timer_ops.setdefault(index, []))
        if result.events:
            if batch is None:
                _write_events(result.events)
            else:
                batch.events.extend(result.events)
        if obs is not None and (
            batch is not None or records or result.events or obs.span is not None
        ):  # else nothing to observe (RuntimeObserver.ran): a steady heartbeat
            obs.ran(index, machine, records, result.events, batch)
        if result.completions:  # answer parked requests once durable
            completions = [(index, token, response) for token, response in result.completions]
            if batch is None:
                self._complete(completions)
            else:
                batch.completions.extend(completions)
                if self.write_timeout_ms is not None:
                    self.timeouts.time(
                        batch, *[(index, token) for _index, token, _response in completions]
                    )
        if result.parked_joins:
            self.own.answer_parked_joins(index, result.parked_joins)
        if result.write_watches and batch is not None:  # else nothing is being written
            watched = [Watched(index, watch) for watch in result.write_watches]
            batch.watches += watched
            if self.write_timeout_ms is not None:
                self.timeouts.time(batch, *watched)
        if result.offloads:
            wanted = [(index, group_id) for group_id in result.offloads]
            if batch is None:
                self.own.start_offloads(wanted)
            else:
                batch.offloads.extend(wanted)
        if result.regex_resolutions:
            asked = [(index, group_id) for group_id in result.regex_resolutions]
            if batch is None:
                self.own.ask_regex_resolutions(asked)
            else:
                batch.regex_resolutions.extend(asked)
        return result.response, batch

    def submit(
        self,
        index: int,
        fn: Callable[[Any], Any],
        *,
        read: bool = False,
        join: bool = False,
        park: bool = False,
        timeout_ms: int | None = None,
        group: str | None = None,
    ) -> tuple[Any, Any]:
        """Run one command in its state machine's turn: at once when the machine has nothing
        queued and budget left in this loop iteration, else queued in arrival order
        (``join``: a member's join, behind the machine's other commands).

        Returns ``(response, None)`` when the response may be released at once, else
        ``(None, future)``: the future gets the response (or the command's error) when it may
        be released — once its batch is durable, and for a ``park`` command that answered
        ``Pending``, once a later durable result completes it. ``timeout_ms``: a command of the
        cluster log, the request's own bound on its answer's wait, from now (None: the write
        timeout; the module docstring's "Write timeout"). ``group``: as :meth:`execute`'s."""
        self.check_serving()
        key = self.shard_count if index == REGISTRY else index
        self.lead.check(key)
        bound = self.timeouts.cluster_bound(timeout_ms) if key == self.shard_count else None
        turns = self.turns
        if turns.now(key, join=join):  # one pair of clock reads: the turn's and the observer's
            perf = self.host.perf
            timed = self._timed
            start = perf()
            try:
                response, batch = self._run(key, fn, read, group, timed is not None)
            finally:
                spent = perf() - start
                turns.charge(key, spent)
                if timed is not None:
                    timed(key, start, spent)
            if batch is None and not (park and type(response) is Pending):
                return response, None
            fut = self.host.new_future()
            self._answer(key, fut, response, batch, park, bound)
            return None, fut
        fut = self.host.new_future()
        turns.later(key, partial(self._in_turn, key, fn, read, park, fut, bound, group), join=join)
        return None, fut

    def registry_outstanding(self) -> bool:
        """A write of the cluster log is not durable yet."""
        return self.shard_count in self._last_batch

    def forget_outstanding(self, index: int) -> None:
        """Shard ``index``'s state machine is replaced (its partition dropped or loaded): the
        outstanding batches hold nothing of the new one (nor their timer operations)."""
        self._last_batch.pop(index, None)
        self.timing.forget(index, self.pending, self.inflight)
        self.reads.forget(index)

    def request(self, cmd: Command) -> tuple[Any, Any]:
        """:meth:`submit` a group's request (``requests.py``) on the group's shard."""
        if cmd.join:
            self.own.join_arrived(cmd.group_id)
        return self.submit(
            partition_for(cmd.group_id, self.shard_count),
            cmd.fn,
            join=cmd.join,
            park=cmd.park,
            group=cmd.group_id,
        )

    def delete_topics_with(
        self, fn: Callable[[Any], Any], deleted: Callable[[Any], Sequence[str]]
    ) -> tuple[Any, Batch | None]:
        """Run a registry command that deletes topics and, in the same pending batch, every
        shard's offsets of the topics it deleted (Kafka's onPartitionsDeleted), so a re-created
        topic starts fresh: no crash can keep the deletion without the offset tombstones, and
        no commit to a re-created topic can slip in between. ``deleted``: the names the
        command's response says it deleted."""
        self.check_serving()
        response, batch = self._execute(self.shard_count, fn, False)
        names = deleted(response)
        for i in self.lead.served() if names else ():
            self._execute(i, lambda s: s.on_topics_deleted(names), False)
        return response, batch

    def migrate_group_configs(self, index: int) -> Batch | None:
        """Move the group configs an earlier version kept in partition ``index`` to the cluster
        log (``group_configs.py``): the cluster log adopts them and the partition tombstones
        them in one pending batch, so a crash keeps both or neither. None: nothing to move."""
        self.check_serving()
        configs = self.shards[index].group_configs
        cluster = configs.cluster
        if cluster is None or not len(configs):
            return None
        legacy = {gid: dict(configs[gid]) for gid in configs}
        self._execute(self.shard_count, lambda _reg: cluster.adopt(legacy), False)
        return self._execute(index, lambda s: s.group_configs.migrated(), False)[1]

    def _in_turn(
        self,
        key: int,
        fn: Callable[[Any], Any],
        read: bool,
        park: bool,
        fut: Any,
        bound: ClusterBound | None,
        group: str | None,
    ) -> None:
        """A queued command in its turn; its caller is answered from here (a caller that went
        away is not run for)."""
        if fut.done():
            return
        try:
            self.check_serving()  # the driver may have stopped serving meanwhile
            response, batch = self._execute(key, fn, read, group)
        except Exception as exc:  # noqa: BLE001 - the caller gets it, as if it ran it itself
            fut.set_exception(exc)
            return
        self._answer(key, fut, response, batch, park, bound)

    def _answer(
        self,
        key: int,
        fut: Any,
        response: Any,
        batch: Batch | None,
        park: bool,
        bound: ClusterBound | None = None,
    ) -> None:
        """Release ``response`` to ``fut`` when it may be: at once, once ``batch`` is durable,
        or — a parked request — when a completion answers it. The parked future is registered
        here, in the command's turn: a command queued behind it in the same turn may answer it
        without writing anything. ``bound``: a cluster-log command's (``WriteTimeouts.cluster_bound``)."""
        if park and type(response) is Pending:
            self._park((key, response.token), fut, batch)
        elif batch is None:
            fut.set_result(response)
        else:
            batch.waiters.append((fut, response, key))
            if self.write_timeout_ms is not None:
                self.timeouts.time(batch, fut, cluster=bound)

    def wait(
        self,
        batch: Batch,
        *,
        timed: bool = False,
        index: int | None = None,
        timeout_ms: int | None = None,
    ) -> Any:
        """A future resolved when ``batch`` is (None, or its write's error). ``timed``: a
        request's answer waits for it — it gets :class:`WriteTimeoutError` if the batch is not
        durable within the write timeout; ``index``: the state machine whose command it waits
        for (answered at once if that machine is dropped, :meth:`answer_dropped`); for a
        command of the cluster log (:data:`REGISTRY`), :class:`ClusterLogTimeoutError` instead,
        within ``timeout_ms`` when given (as :meth:`submit`)."""
        fut = self.host.new_future()
        key = self.shard_count if index == REGISTRY else index
        if not batch.resolved:
            batch.waiters.append((fut, None, key))
            if timed and self.write_timeout_ms is not None:
                bound = self.timeouts.cluster_bound(timeout_ms) if key == self.shard_count else None
                self.timeouts.time(batch, fut, cluster=bound)
        elif batch.error is None:
            fut.set_result(None)
        else:
            fut.set_exception(batch.error)
        return fut

    def answer_dropped(self, index: int, error: CoordinatorError) -> None:
        """State machine ``index`` was dropped (its partition is no longer this node's): the
        callers still waiting for batches that hold its commands get ``error`` now, not when
        those batches resolve (as Kafka's unload fails the partition's deferred events with
        NOT_COORDINATOR). An append can be held up for long — a COMMIT whose connection was
        lost waits for PostgreSQL to come back to learn its outcome — and must not hold them
        past their request timeouts; the client retries at the new leader, which loads
        whatever PostgreSQL kept."""
        for batch in (self.inflight, self.pending):
            if batch is None:
                continue
            for fut, _response, key in batch.waiters:
                if key == index and not fut.done():
                    fut.set_exception(error)
            # Its parked requests' completions answer no one now (the machine that parked them
            # is gone, and a new one may hand out the same tokens): not kept, not timed.
            batch.completions[:] = [c for c in batch.completions if c[0] != index]
            batch.watches[:] = [w for w in batch.watches if w.index != index]
            batch.timed[:] = [
                t
                for t in batch.timed
                if not (type(t[1]) is tuple and t[1][0] == index)
                and not (type(t[1]) is Watched and t[1].index == index)
            ]

    def _publish_topics(self) -> None:
        image = self.registry.image()
        for shard in self.shards:
            shard.set_topics(image)

    # ------------------------------------------------------------------ parked requests

    def _park(self, key: tuple[int, int], fut: Any, batch: Batch | None) -> None:
        if self._parking_closed:
            fut.set_exception(_shutting_down())
            return
        self.parked[key] = fut
        fut.add_done_callback(partial(self._unpark, key))
        if batch is not None:  # its own write failing fails it
            batch.then.append(partial(_fail_future, fut))
            if self.write_timeout_ms is not None:
                self.timeouts.time(batch, fut)
        if self.trace is not None:
            self.trace("parked", {"index": key[0], "token": key[1]})

    def _unpark(self, key: tuple[int, int], fut: Any) -> None:
        """The parked caller was answered, failed or went away."""
        if self.parked.get(key) is fut:
            del self.parked[key]
        if not fut.cancelled():
            fut.exception()  # seen: its caller may be gone

    def _complete(self, completions: Sequence[tuple[int, int, Any]]) -> None:
        """Answer parked requests (their completing batch is durable), ``ANSWERS_PER_STEP``
        in this step of the loop and the rest in the next steps, after any still waiting. A
        failed batch drops its completions: the rollback makes those requests pending again."""
        answers = self._answers
        if answers:  # earlier answers wait for their step: these after them
            answers.extend(completions)
            return
        if len(completions) <= ANSWERS_PER_STEP:
            self._resolve_parked(completions)
            return
        answers.extend(completions)
        self._answer_some()

    def _answer_some(self) -> None:
        answers = self._answers
        n = min(len(answers), ANSWERS_PER_STEP)
        self._resolve_parked([answers.popleft() for _ in range(n)])
        if answers:
            self.host.call_soon(self._answer_some)

    def _resolve_parked(self, completions: Iterable[tuple[int, int, Any]]) -> None:
        for index, token, response in completions:
            fut = self.parked.pop((index, token), None)
            if fut is None:
                if self.trace is not None:  # nobody waits (gone, or never registered)
                    self.trace("unclaimed", {"index": index, "token": token, "response": response})
                continue
            if fut.done():
                continue
            if isinstance(response, CoordinatorError):  # the request failed after all
                fut.set_exception(response)
            else:
                fut.set_result(response)

    def release_parked(self) -> None:
        """Shutdown: answer every parked request (and any parked from now on) with
        COORDINATOR_NOT_AVAILABLE, so no JoinGroup/SyncGroup hangs while the server drains
        (Kafka answers NOT_COORDINATOR when it unloads a group; the client rediscovers and
        rejoins either way). Idempotent."""
        self._parking_closed = True
        parked, self.parked = self.parked, {}
        for fut in parked.values():
            if not fut.done():
                fut.set_exception(_shutting_down())

    # ------------------------------------------------------------------ the writer's side

    def take_batch(self) -> Batch | None:
        """The next batch to append (the writer is free), or None."""
        batch = self.pending
        if batch is None:
            return None
        self.pending = None
        batch.end_marks = [m.mark() for m in self._machines]
        self.inflight = batch
        return batch

    def written(self, batch: Batch) -> None:
        """``batch`` is durable."""
        self.inflight = None
        batch.resolved = True
        self.timeouts.settled(batch)
        if batch.cluster and self.committed is not None:  # before any answer: read your writes
            self.committed.replay(batch.cluster)
        for m, mark in zip(self._machines, batch.end_marks or (), strict=True):
            m.release(mark)
        for index, last in list(self._last_batch.items()):
            if last is batch:
                del self._last_batch[index]
        if batch.groups:
            self.reads.settled(batch)
        self.stats["batches"] += 1
        self.stats["records"] += len(batch.records)
        if batch.timer_ops:
            self.timing.settle(batch.timer_ops, durable=True)
        if batch.events:
            _write_events(batch.events)
        if batch.completions:
            self._complete(batch.completions)
        if batch.offloads:
            self.own.start_offloads(batch.offloads)
        for fut, response, _index in batch.waiters:
            if not fut.done():  # a caller that went away, or one answered at its drop
                fut.set_result(response)
        if batch.regex_resolutions:  # after the asking heartbeats' answers
            self.own.ask_regex_resolutions(batch.regex_resolutions)
        for then in batch.then:
            then(None)
        self.host.changed(r.group_id for r in batch.records if r.group_id is not None)

    def write_failed(self, batch: Batch, exc: BaseException) -> list[Batch]:
        """Fail ``batch`` and every later un-persisted batch (returned); roll each state
        machine with records in them back to just before its first records there. The others
        keep their state: what they changed without records was answered at once (they had no
        write outstanding), as Kafka rolls back only the partition whose write failed."""
        self.inflight = None
        self.stats["failed_batches"] += 1
        failed = [batch]
        if self.pending is not None:
            failed.append(self.pending)
            self.pending = None
        self._last_batch.clear()
        self.reads.failed()
        marks: dict[int, int] = {}
        for b in failed:  # a machine's first records in the first failed batch it is in
            for machine, mark in b.start_marks.items():
                marks.setdefault(machine, mark)
        for machine, mark in marks.items():
            self._machines[machine].rollback(mark)
        self._publish_topics()
        n = sum(b.commands for b in failed)
        moved = isinstance(exc, StoreFencedError) and CLUSTER_LOG in exc.partitions
        log.log(
            logging.WARNING if moved else logging.ERROR,  # moved: another node wrote first
            "Write of %d records (%d commands) failed; state rolled back: %r",
            len(batch.records),
            n,
            exc,
        )
        error = (
            ClusterLogMovedError(f"Another node wrote to the cluster log first: {exc}")
            if moved
            else CoordinatorNotAvailableError(f"The write to the record store failed: {exc}")
        )
        if isinstance(exc, StoreWriteError) and exc.outcome_unknown:
            # The store refuses further appends until reopened; the in-memory state cannot be
            # trusted to match it. Stop serving: a restart reloads from the store.
            log.critical("The store failed with an unknown outcome; the coordinator stops serving.")
            self.stop_serving(f"a write to the record store had an unknown outcome: {exc}")
        if self.observer is not None:
            for b in failed:
                self.observer.batch_failed(b, len(b.records), exc)
        taken = taken_over(exc)
        for b in failed:
            b.resolved, b.error = True, error
            self.timeouts.settled(b)
            self.timing.settle(b.timer_ops, durable=False)
            for fut, _response, index in b.waiters:
                if not fut.done():
                    lost = taken.get(index) if taken and index is not None else None
                    fut.set_exception(error if lost is None else lost)
            for then in b.then:
                then(error)
        watched = [w for b in failed for w in b.watches]
        if watched:  # after the rollback: the core hears of each on the state before it
            self.own.write_errors(watched, error)
        return failed


def _fail_future(fut: Any, error: BaseException | None) -> None:
    if error is not None and not fut.done():
        fut.set_exception(error)


def _write_events(events: Sequence[LogEvent]) -> None:
    """Log what the core says happened (its batch is durable). Each line also carries the
    event's name and fields (``record.event``, ``record.event_fields``) for structured logging."""
    for event in events:
        log.info(
            "%s",
            event.message(),
            extra={"event": event.name, "group_id": event.group_id, "event_fields": event.fields},
        )


def _shutting_down() -> CoordinatorError:
    return CoordinatorNotAvailableError("The coordinator is shutting down.")
