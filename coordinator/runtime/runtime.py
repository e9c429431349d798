"""The coordinator runtime: shards on one asyncio loop, group commit, timers, loading.

Theory of operation (Kafka's CoordinatorRuntime, reduced to one process):

* Groups are hashed onto ``offsets.topic.num.partitions`` coordinator partitions (Kafka's
  ``partitionFor``, :func:`coordinator.routing.partition_for`), each a shard: its own state
  machine and its own log in the store; the topic registry (the cluster log) is one more state
  machine. The core is synchronous, so a command runs to
  completion on the loop thread and no command ever sees another half-done.
* Turns (turns.py, Kafka's event accumulator): a command runs at once unless its state machine
  already used its share of this loop iteration or has commands queued; then it queues behind
  them. Each state machine's commands keep their arrival order, and a join storm in one shard's
  group delays the other shards' groups by at most one share per loop iteration.
* A command's records are already replayed in memory when its handler returns. They join the
  *pending batch*; one writer coroutine hands each batch to ``store.append`` in a dedicated
  single-thread executor. While a batch is in flight, new commands accumulate into the next
  pending batch: that is group commit, and it grows by itself with the load.
* A response is released only once its batch is durable. A command with no records (a read,
  a steady heartbeat) still waits for the last outstanding batch of its state machine, so it
  never exposes state that could still be lost; with nothing outstanding it answers at once.
* Write failure: every command of the failed batch and of any later un-persisted batch gets
  COORDINATOR_NOT_AVAILABLE in-band; every state machine is rolled back (undo log) to its mark
  at the start of the failed batch; their timer operations are dropped.
* Log lines come from the core too: a result carries :class:`~coordinator.core.events.LogEvent`
  values, written (with their fields, for structured logging) once their batch is durable; a
  batch that fails takes its events with it, so the log never tells of a change that was rolled
  back.
* Timers: handlers return keyed arm/cancel operations, applied to one :class:`TimerTable` only
  once their batch is durable. A due timer fires as an ordinary command on its shard; if a
  not-yet-durable command has touched the same key, the firing is deferred until that batch
  resolves (applied ops supersede it; a failed batch puts it back). With the manual clock
  nothing fires until :meth:`advance_time`.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from enum import Enum
from functools import partial
from time import perf_counter
from typing import Any, NamedTuple, TypeVar

from coordinator.core import codec
from coordinator.core.commands import (
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatResponse,
    IdSource,
    ListedGroup,
    Pending,
    Result,
)
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.errors import (
    CoordinatorError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    ErrorCode,
    IllegalStateError,
    InvalidRequestError,
    UnsupportedVersionError,
)
from coordinator.core.events import Event, LogEvent
from coordinator.core.offsets import (
    OffsetCommit,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchGroup,
    OffsetFetchGroupResponse,
    TxnOffsetCommit,
)
from coordinator.core.records import Record
from coordinator.core.shard import DeleteGroupResult, GroupDescription
from coordinator.core.timers import ArmTimer, DueTimer, TimerOp, TimerTable
from coordinator.core.topics import NewTopic, SnapshotChanges, TopicResult
from coordinator.core.transactions import (
    AddOffsetsToTxn,
    Ended,
    EndTxn,
    GroupTransaction,
    ProducerInitialized,
)
from coordinator.factory import Shard, new_cluster, new_shard
from coordinator.routing import partition_for
from coordinator.security.acls import AclBinding, AclBindingFilter
from coordinator.security.metadata import (
    AclCreation,
    AclDeletion,
    ScramDeletion,
    ScramUpsertion,
    UserResult,
)
from legacy_bridge import messages as cm

from .assignors import make_assignors
from .clock import ManualClock, SystemClock
from .ids import RandomIds
from .loader import LoadStats, load_into
from .offload import AssignorPool
from .store import RecordStore, StoredRecord, StoreLostError, StoreWriteError
from .storewatch import StoreWatch, rescue
from .turns import Turns
from .watchers import GroupWatchers, MemberView, member_views

log = logging.getLogger("kip848.runtime")
INT64_MAX = 2**63 - 1
_DEADLINE_HEADROOM_MS = 2**40
"""Room left above the clock for deadlines armed from it (timeouts are at most int32 ms)."""
T = TypeVar("T")

REGISTRY = -1
"""State-machine index of the topic registry (shards are 0..n-1)."""

TIMER_RETRY_MS = 500
"""A timer whose command or write failed fires again this much later (Kafka: 500 ms)."""
STALL_TICK_MS = 500
"""How often the runtime checks that it is running on time (system clock only)."""
STALL_GRACE_MS = 1000
"""Lateness beyond which the coordinator counts itself as having been away (_check_stall)."""

FIRST_TARGET_QUIET_S = 0.01
"""A new group's first target waits until no join to it has arrived for this long, twice (at
most ``group.initial.rebalance.delay.ms``): a burst of joins gets one target covering it all."""
EXPIRE_OFFSETS = "expire-offsets"
"""Timer kind of the periodic offset expiration; one timer per shard, keyed
``(EXPIRE_OFFSETS, "", str(shard_index))``."""


class RuntimeState(Enum):
    INITIAL = "initial"
    LOADING = "loading"
    ACTIVE = "active"
    CLOSING = "closing"
    CLOSED = "closed"
    FAILED = "failed"


class _Parked(NamedTuple):
    """A parked classic request (or join): where ``_complete`` finds it, and its answer."""

    key: tuple[int, int]
    future: asyncio.Future[Any]


class _Batch:
    """Records of many commands, written by one ``store.append``."""

    __slots__ = (
        "commands",
        "completions",
        "end_marks",
        "events",
        "future",
        "offloads",
        "records",
        "regex_resolutions",
        "start_marks",
        "timer_ops",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop, start_marks: list[int]) -> None:
        self.records: list[Record] = []  # encoded in the writer's thread (_append_encoded)
        self.timer_ops: list[TimerOp] = []
        self.future: asyncio.Future[None] = loop.create_future()
        self.future.add_done_callback(_retrieve)
        self.start_marks = start_marks
        self.end_marks: list[int] | None = None
        self.commands = 0
        self.completions: list[
            tuple[int, int, Any]
        ] = []  # legacy bridge: (machine, token, response)
        self.events: list[LogEvent] = []  # written once durable, dropped on failure
        self.offloads: list[tuple[int, str]] = []  # (shard, group): computations to start
        self.regex_resolutions: list[tuple[int, str]] = []  # (shard, group): to resolve


def _retrieve(fut: asyncio.Future[Any]) -> None:
    """Mark a future's exception as seen: a batch may fail with nobody awaiting it (timers),
    a parked request's caller may be gone before it awaits its answer."""
    if not fut.cancelled():
        fut.exception()


async def _durable(batch: _Batch) -> None:
    """Wait until ``batch`` is resolved. Many commands share a batch, so the wait is shielded:
    grpc.aio cancels a call's handler when its client goes away (a deadline, a reset stream),
    and cancelling a task cancels the future it awaits; unshielded, one departed client would
    fail every other command of the batch and leave the writer unable to resolve it."""
    await asyncio.shield(batch.future)


class CoordinatorRuntime:
    def __init__(
        self,
        *,
        config: GroupCoordinatorConfig,
        store: RecordStore,
        clock: SystemClock | ManualClock | None = None,
        ids: IdSource | None = None,
        assignors: Sequence[Any] | None = None,
        observer: Any = None,
    ) -> None:
        self.config = config
        self.store = store
        self.clock = clock if clock is not None else SystemClock()
        self.ids = ids if ids is not None else RandomIds()
        assignors = (
            list(assignors) if assignors is not None else make_assignors(config.consumer_assignors)
        )
        # Metrics and tracing (coordinator/observability): None when both are off.
        self.observer = observer
        if store.partitions != config.offsets_topic_partitions:
            raise ValueError(
                f"the store has {store.partitions} partitions, the config "
                f"{config.offsets_topic_partitions} (offsets.topic.num.partitions)"
            )
        self.shard_count = store.partitions
        if observer is not None:
            assignors = observer.attach(self.shard_count, assignors)
        self.shards: list[Shard] = [
            new_shard(config=config, assignors=assignors, ids=self.ids)
            for _ in range(self.shard_count)
        ]
        for shard in self.shards:
            shard.groups.parks_joins = True  # a new group's first target covers a burst
        # The cluster-level state machine: topics, and the security metadata plugged into it.
        self.registry, self.security = new_cluster(
            self.ids, default_num_partitions=config.num_partitions
        )
        # State machines in mark order: shards 0..n-1, then the registry (index n == REGISTRY).
        self._machines: list[Any] = [*self.shards, self.registry]
        self.timers = TimerTable()
        self.state = RuntimeState.INITIAL
        self.load_stats: LoadStats | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._turns: Turns | None = None  # each state machine's share of the loop (turns.py)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="kip848-writer")
        self._pending: _Batch | None = None
        self._inflight: _Batch | None = None
        self._last_batch: dict[int, _Batch] = {}  # machine index -> its last outstanding batch
        self._wake_writer: asyncio.Event | None = None
        self._writer_task: asyncio.Task[None] | None = None
        self._timer_handle: asyncio.TimerHandle | None = None
        self._timer_at_ms: int | None = None  # timer time (clock.monotonic_ms) it is set for
        self._tick_handle: asyncio.TimerHandle | None = None  # stall watch (see _tick)
        self._tick_due_ms = 0
        self._pending_keys: dict[Any, int] = {}  # timer key -> ops not yet durable
        self._deferred: dict[Any, DueTimer] = {}
        # Legacy bridge: (state machine index, token) -> waiting request. Tokens are numbered per
        # shard, so the shard index is part of the key.
        self._parked: dict[tuple[int, int], asyncio.Future[Any]] = {}
        self._parking_closed = False  # legacy bridge: shutting down, parked requests answered
        # Store health (storewatch.py): writable / lost, and who wants to hear of a change.
        self.watch = StoreWatch(store, on_change=self._notify_health, on_lost=self._store_lost)
        self._health_listeners: list[Callable[[bool], None]] = []
        self._failure: str | None = None  # why the runtime stopped serving (state FAILED)
        # Push: who waits to hear that a group changed, once the change is durable (watchers.py).
        self.watchers = GroupWatchers()
        # Target assignments computed off the loop (offload.py): the worker pool (None when
        # group.consumer.assignor.offload.enable is false) and one task per group in flight.
        self.assignor_pool = (
            AssignorPool([a.name for a in assignors], config.background_threads)
            if config.consumer_assignor_offload_enable
            else None
        )
        self._assigning: dict[str, asyncio.Task[None]] = {}
        # Regex subscriptions resolved off the heartbeat path: one task per group in flight.
        self._resolving: dict[str, asyncio.Task[None]] = {}
        # Groups with parked joins (before their first target): one task each, and whether it
        # was asked to go on while it ran.
        self._first_targets: dict[str, asyncio.Task[None]] = {}
        self._first_again: set[str] = set()
        self._joins_arrived: dict[str, int] = {}  # joins to those groups while they wait
        self._warm_up: asyncio.Task[None] | None = None
        self.stats = {
            "batches": 0,
            "records": 0,
            "commands": 0,
            "failed_batches": 0,
            "timers_fired": 0,
        }

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> LoadStats:
        """Load every shard from the store, then serve. Requests before the end of loading
        get COORDINATOR_LOAD_IN_PROGRESS."""
        loop = self._loop = asyncio.get_running_loop()
        self._turns = Turns(loop)
        self._wake_writer = asyncio.Event()
        self.state = RuntimeState.LOADING
        try:
            stats = await loop.run_in_executor(
                self._executor, load_into, self.store, self.shards, self.registry
            )
        except BaseException:
            self.state = RuntimeState.FAILED
            raise
        if self.state is not RuntimeState.LOADING:  # closed while loading
            return stats
        self.load_stats = stats
        now = self.clock.now_ms()
        for i, shard in enumerate(self.shards):
            self._apply_timer_ops(self._timer_time(shard.on_loaded(now)))
            self._apply_timer_ops([self._expiration_timer(i, self.clock.monotonic_ms())])
            s = stats.shards[i]
            log.info(
                "Loaded shard %d: %d records, %d groups in %.1f ms.",
                i,
                s.records,
                s.groups,
                s.seconds * 1e3,
            )
        log.info(
            "Loaded %d records (%d groups, %d topics, last offset %d) in %.1f ms.",
            stats.records,
            stats.groups,
            stats.topics,
            stats.last_offset,
            stats.seconds * 1e3,
        )
        self._writer_task = loop.create_task(self._writer_loop(), name="kip848-writer")
        self.state = RuntimeState.ACTIVE
        if self.assignor_pool is not None and not self.clock.manual:
            # Workers start in the background (a storm right after start-up should not wait for
            # interpreters to start); under a manual clock (tests) the first job starts them.
            self._warm_up = loop.create_task(self.assignor_pool.start(), name="kip848-warm-up")
        self.watch.start(self._executor)
        self._tick()
        self._reschedule_timer()
        self._notify_health()
        return stats

    async def close(self) -> None:
        """Stop taking commands, finish in-flight and pending writes, close the store."""
        if self.state in (RuntimeState.CLOSED, RuntimeState.CLOSING):
            return
        was_active = self.state is RuntimeState.ACTIVE
        self.state = RuntimeState.CLOSING
        self._notify_health()
        self.watchers.close()
        await self.watch.stop()
        self.release_parked()
        if self._timer_handle is not None:
            self._timer_handle.cancel()
            self._timer_handle = None
        if self._tick_handle is not None:
            self._tick_handle.cancel()
            self._tick_handle = None
        tasks = [
            *self._assigning.values(),
            *self._resolving.values(),
            *self._first_targets.values(),
            *([self._warm_up] if self._warm_up else []),
        ]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self.assignor_pool is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.assignor_pool.close)
        if was_active:
            await self.flush()
        if self._writer_task is not None:
            self._writer_task.cancel()
            try:
                await self._writer_task
            except asyncio.CancelledError:
                pass
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self.store.close)
        self._executor.shutdown(wait=True)
        self.state = RuntimeState.CLOSED

    async def flush(self) -> None:
        """Wait until every batch produced so far is resolved (durable or failed)."""
        for _ in range(1_000_000):
            batch = self._pending or self._inflight
            if batch is None:
                return
            try:
                await _durable(batch)
            except CoordinatorError:
                pass

    # ------------------------------------------------------------------ commands

    def _check_serving(self) -> None:
        state = self.state
        if state is RuntimeState.ACTIVE:
            return
        if state in (RuntimeState.LOADING, RuntimeState.INITIAL):
            raise CoordinatorLoadInProgressError()
        if self._failure is not None:
            raise CoordinatorNotAvailableError(f"The coordinator stopped serving: {self._failure}")
        raise CoordinatorNotAvailableError(f"The coordinator is {state.value}.")

    # ------------------------------------------------------------------ health (storewatch.py)

    @property
    def serving(self) -> bool:
        """Loaded, not stopping or failed, and able to write its store (gRPC health)."""
        return self.state is RuntimeState.ACTIVE and self.watch.writable

    def add_health_listener(self, listener: Callable[[bool], None]) -> None:
        """Call ``listener(serving)`` (on the loop) whenever :attr:`serving` may have changed."""
        self._health_listeners.append(listener)

    def _notify_health(self) -> None:
        serving = self.serving
        for listener in self._health_listeners:
            listener(serving)

    def _stop_serving(self, why: str) -> None:
        if self.state is RuntimeState.ACTIVE:
            self.state = RuntimeState.FAILED
            self._failure = why
            self.release_parked()
            self._notify_health()

    def _store_lost(self, exc: StoreLostError) -> None:
        """The store is no longer the one on disk: stop acknowledging for good, rescue it."""
        log.critical("%s. The coordinator stops serving.", exc)
        self._stop_serving(str(exc))
        if self._loop is not None:
            self._loop.create_task(rescue(self.store, self._executor), name="kip848-rescue")

    def _started(self) -> tuple[asyncio.AbstractEventLoop, asyncio.Event]:
        """The loop and the writer's wake-up event (set by :meth:`start`; no command runs
        before)."""
        if self._loop is None or self._wake_writer is None:
            raise IllegalStateError("the runtime runs commands only once started")
        return self._loop, self._wake_writer

    def _machine(self, index: int) -> Any:
        return self.registry if index == REGISTRY else self.shards[index]

    def _execute(
        self, index: int, fn: Callable[[Any], Any], *, read: bool = False
    ) -> tuple[Any, _Batch | None]:
        """Run one command now (synchronously, on the loop thread). Returns its response and the
        batch it must wait for (None: answer at once)."""
        if index == REGISTRY:
            index = self.shard_count
        machine = self._machines[index]
        mark = machine.mark()
        obs = self.observer
        try:
            out = fn(machine) if obs is None else obs.run_command(index, fn, machine)
        except CoordinatorError:
            machine.rollback(mark)  # the core already did; harmless and keeps the registry safe
            raise
        except BaseException:
            machine.rollback(mark)
            log.exception("Unexpected error in a command on state machine %d", index)
            raise
        self.stats["commands"] += 1
        if read:
            last = self._last_batch.get(index)
            if obs is not None and (last is not None or obs.span is not None):
                obs.ran(index, machine, (), (), last)
            return out, last
        result: Result[Any] = out
        records = result.records
        if records:
            batch = self._pending
            if batch is None:
                marks = [m.mark() for m in self._machines]
                marks[index] = mark
                loop, wake_writer = self._started()
                batch = self._pending = _Batch(loop, marks)
                wake_writer.set()
            batch.records.extend(records)  # encoded by the writer, off the loop
            batch.commands += 1
            self._last_batch[index] = batch
            if index == self.shard_count:
                self._publish_topics()
        else:
            batch = self._last_batch.get(index)
        if result.timers:
            timers = self._timer_time(result.timers)
            if batch is None:
                self._apply_timer_ops(timers)
            else:
                batch.timer_ops.extend(timers)
                pk = self._pending_keys
                for op in timers:
                    pk[op.key] = pk.get(op.key, 0) + 1
        if result.events:
            if batch is None:
                _write_events(result.events)
            else:
                batch.events.extend(result.events)
        if obs is not None and (
            batch is not None or records or result.events or obs.span is not None
        ):  # else nothing to observe (RuntimeObserver.ran): a steady heartbeat
            obs.ran(index, machine, records, result.events, batch)
        if result.completions:  # legacy bridge: answer parked requests once durable
            completions = [(index, token, response) for token, response in result.completions]
            if batch is None:
                self._complete(completions)
            else:
                batch.completions.extend(completions)
        if result.parked_joins:
            self._answer_parked_joins(index, result.parked_joins)
        if result.offloads:
            wanted = [(index, group_id) for group_id in result.offloads]
            if batch is None:
                self._start_offloads(wanted)
            else:
                batch.offloads.extend(wanted)
        if result.regex_resolutions:
            asked = [(index, group_id) for group_id in result.regex_resolutions]
            if batch is None:
                self._start_regex_resolutions(asked)
            else:
                batch.regex_resolutions.extend(asked)
        return result.response, batch

    async def _run(
        self,
        index: int,
        fn: Callable[[Any], Any],
        *,
        read: bool = False,
        join: bool = False,
        park: bool = False,
    ) -> tuple[Any, _Batch | None]:
        """Run one command in its state machine's turn (turns.py): at once when the machine
        has nothing queued and budget left in this loop iteration, else queued in arrival
        order (``join``: a member's join, queued behind the machine's other commands).
        Returns its response and the batch it must wait for (``park``: see
        :meth:`_execute_parking`)."""
        self._check_serving()
        turns = self._turns
        execute = self._execute_parking if park else self._execute
        if turns is None:
            return execute(index, fn, read=read)
        key = self.shard_count if index == REGISTRY else index
        if turns.now(key, join=join):
            start = perf_counter()
            try:
                return execute(index, fn, read=read)
            finally:
                turns.charge(key, perf_counter() - start)
        return await turns.later(
            key, partial(self._execute_serving, execute, index, fn, read), join=join
        )

    def _execute_serving(
        self,
        execute: Callable[..., tuple[Any, _Batch | None]],
        index: int,
        fn: Callable[[Any], Any],
        read: bool,
    ) -> tuple[Any, _Batch | None]:
        """A queued command, in its turn: the runtime may have stopped serving meanwhile."""
        self._check_serving()
        return execute(index, fn, read=read)

    def _execute_parking(
        self, index: int, fn: Callable[[Any], Any], *, read: bool = False
    ) -> tuple[Any, _Batch | None]:
        """:meth:`_execute` for a command that may answer ``Pending``: the parked request's
        future is registered here, in the command's turn. A queued command's caller resumes
        only on a later loop step, and the commands queued behind it in the same turn may
        complete its token meanwhile (a join that restarts the rebalance answers a parked
        SyncGroup without writing anything, so at once): registered later, that answer would
        be lost and the request left waiting. Returns ``(_Parked, batch)`` for a parked one."""
        response, batch = self._execute(index, fn, read=read)
        if not isinstance(response, Pending):
            return response, batch
        key = (index, response.token)
        fut: asyncio.Future[Any] = self._started()[0].create_future()
        fut.add_done_callback(_retrieve)  # its caller may be gone before it awaits it
        self._parked[key] = fut
        if self._parking_closed:
            fut.set_exception(_shutting_down())
        return _Parked(key, fut), batch

    async def _submit(
        self, index: int, fn: Callable[[Any], Any], *, read: bool = False, join: bool = False
    ) -> Any:
        response, batch = await self._run(index, fn, read=read, join=join)
        if batch is not None:
            await _durable(batch)
        return response

    def _publish_topics(self) -> None:
        image = self.registry.image()
        for shard in self.shards:
            shard.set_topics(image)

    # ------------------------------------------------------------------ writer

    async def _writer_loop(self) -> None:
        loop = asyncio.get_running_loop()
        wake = self._wake_writer
        assert wake is not None
        while True:
            await wake.wait()
            wake.clear()
            while self._pending is not None:
                batch = self._pending
                self._pending = None
                batch.end_marks = [m.mark() for m in self._machines]
                self._inflight = batch
                started = time.monotonic()
                try:
                    await loop.run_in_executor(
                        self._executor,
                        _append_encoded,
                        self.store,
                        batch.records,
                        self.clock.now_ms(),
                    )
                except asyncio.CancelledError:
                    raise
                except BaseException as exc:  # noqa: BLE001 - every write failure fails the batch
                    self._inflight = None
                    self._fail(batch, exc)
                else:
                    self._inflight = None
                    self._succeed(batch)
                    if self.observer is not None:
                        self.observer.batch_written(
                            batch,
                            len(batch.records),
                            batch.commands,
                            time.monotonic() - started,
                            getattr(self.store, "last_commit_seconds", None),
                        )

    def _succeed(self, batch: _Batch) -> None:
        for m, mark in zip(self._machines, batch.end_marks or (), strict=True):
            m.release(mark)
        for index, last in list(self._last_batch.items()):
            if last is batch:
                del self._last_batch[index]
        self.stats["batches"] += 1
        self.stats["records"] += len(batch.records)
        self.watch.write_succeeded()
        if batch.timer_ops:
            self._apply_timer_ops(batch.timer_ops)
            self._settle_keys(batch.timer_ops, durable=True)
        if batch.events:
            _write_events(batch.events)
        if batch.completions:
            self._complete(batch.completions)
        if batch.offloads:
            self._start_offloads(batch.offloads)
        if batch.regex_resolutions:
            self._start_regex_resolutions(batch.regex_resolutions)
        if not batch.future.done():  # never cancelled (see _durable); cheap insurance
            batch.future.set_result(None)
        self.watchers.notify(r.group_id for r in batch.records if r.group_id is not None)

    def _fail(self, batch: _Batch, exc: BaseException) -> None:
        """Roll every state machine back to the start of the failed batch; fail it and every
        later un-persisted batch."""
        self.stats["failed_batches"] += 1
        failed = [batch]
        if self._pending is not None:
            failed.append(self._pending)
            self._pending = None
        self._last_batch.clear()
        for m, mark in zip(self._machines, batch.start_marks, strict=True):
            m.rollback(mark)
        self._publish_topics()
        n = sum(b.commands for b in failed)
        log.error(
            "Write of %d records (%d commands) failed; state rolled back: %r",
            len(batch.records),
            n,
            exc,
        )
        error = CoordinatorNotAvailableError(f"The write to the record store failed: {exc}")
        if isinstance(exc, StoreWriteError) and exc.outcome_unknown:
            # The store refuses further appends until reopened; the in-memory state cannot be
            # trusted to match it. Stop serving: a restart reloads from the store.
            log.critical("The store failed with an unknown outcome; the coordinator stops serving.")
            self._stop_serving(f"a write to the record store had an unknown outcome: {exc}")
        self.watch.write_failed(exc)
        if self.observer is not None:
            for b in failed:
                self.observer.batch_failed(b, len(b.records), exc)
        for b in failed:
            self._settle_keys(b.timer_ops, durable=False)
            if not b.future.done():
                b.future.set_exception(error)

    # ------------------------------------------------------------------ first targets

    def _answer_parked_joins(self, index: int, wanted: Sequence[tuple[str, bool]]) -> None:
        """These groups have parked joins (before their first target): call the core's
        ``first_target`` for each (one task per group; a task asked again goes on). ``True``:
        the first of them, the target waits for the burst (else: a target is there)."""
        if self.state is not RuntimeState.ACTIVE:
            return
        for group_id, first in wanted:
            if group_id in self._first_targets:
                self._first_again.add(group_id)
                continue
            task = self._loop.create_task(  # type: ignore[union-attr]
                self._first_target(index, group_id, first),
                name=f"kip848-first-{group_id}",
                context=_own(),
            )
            self._first_targets[group_id] = task

    async def _first_target(self, index: int, group_id: str, first: bool) -> None:
        """A burst of joins to a new group is registered before its first target is computed:
        take turns behind the joins queued on the group's state machine, and wait while joins
        to the group keep arriving (none in two waits of :data:`FIRST_TARGET_QUIET_S` in a row:
        a loop held up by something else, during which arrivals are not taken up, is not
        mistaken for quiet), for at most ``group.initial.rebalance.delay.ms`` (Kafka's wait
        for more members to join a new group before its first rebalance); then call ``first_target``, again as long as its results ask for
        it (each answers a few parked joins, in the joins' turns)."""
        turns = self._turns
        start = perf_counter()
        limit_s = self.config.classic_initial_rebalance_delay_ms / 1000
        try:
            seen, quiet = -1, 0
            while first and turns is not None and perf_counter() - start < limit_s:
                await turns.later(index, _nothing, join=True)  # behind the joins queued
                if turns.joins_queued(index):
                    continue
                arrived = self._joins_arrived.get(group_id, 0)
                quiet = quiet + 1 if arrived == seen else 0
                if quiet == 2:
                    break  # no join came while we waited, twice
                seen = arrived
                await asyncio.sleep(FIRST_TARGET_QUIET_S)
            again = self._first_again
            while True:
                again.discard(group_id)
                now = self.clock.now_ms()
                _resp, batch = await self._run(
                    index, partial(_first_target, group_id=group_id, now_ms=now), join=True
                )
                if batch is not None:
                    await _durable(batch)
                if group_id not in again:
                    break
        except CoordinatorError as exc:
            log.warning("[GroupId %s] Parked joins not answered: %s", group_id, exc)
        except Exception:  # noqa: BLE001 - logged where it happened (_execute); the parked
            pass  # joins are answered when their sessions expire or at shutdown
        finally:
            self._first_targets.pop(group_id, None)
            self._joins_arrived.pop(group_id, None)

    # ------------------------------------------------------------------ offloaded assignments

    def _start_offloads(self, wanted: Sequence[tuple[int, str]]) -> None:
        """The core asked for these groups' targets to be computed off the loop (the asking
        command is durable): one computation per group at a time — a group already being
        computed is left alone (the outcome's command asks again if the group moved on)."""
        if self.assignor_pool is None or self.state is not RuntimeState.ACTIVE:
            return
        for index, group_id in wanted:
            if group_id not in self._assigning:
                task = self._loop.create_task(  # type: ignore[union-attr]
                    self._offload(index, group_id),
                    name=f"kip848-assign-{group_id}",
                    context=_own(),
                )
                self._assigning[group_id] = task

    async def _offload(self, index: int, group_id: str) -> None:
        """Copy the group's inputs (once the state they come from is durable), run the assignor
        in a worker, then apply the outcome as a command: its records are the new target."""
        pool = self.assignor_pool
        assert pool is not None
        try:
            job, batch = self._execute(
                index, lambda s: s.groups.assignment_job(group_id), read=True
            )
            if batch is not None:
                await _durable(batch)
            if job is None:
                return
            outcome = await pool.run(job)
        except CoordinatorError as exc:  # the state the inputs came from was not written
            log.warning("[GroupId %s] Target assignment not started: %s", group_id, exc.message)
            return
        finally:
            self._assigning.pop(group_id, None)
        await self._own_command(
            index,
            group_id,
            lambda s, now: s.groups.apply_assignment(outcome, now),
            "Target assignment not applied",
        )

    async def _own_command(
        self,
        index: int,
        group_id: str,
        fn: Callable[[Any, int], Result[Any]],
        failed: str,
    ) -> None:
        """Run a command of the runtime's own (an offloaded target, a regex resolution) on
        shard ``index`` at the current time and wait until it is durable. A failure is logged
        (a bug by ``_execute``) and left to the group's next heartbeat, which asks again."""
        if self.state is not RuntimeState.ACTIVE:
            return
        now = self.clock.now_ms()
        try:
            _resp, batch = self._execute(index, lambda s: fn(s, now))
        except CoordinatorError as exc:
            log.warning("[GroupId %s] %s: %s", group_id, failed, exc.message)
            return
        except Exception:  # noqa: BLE001 - logged by _execute
            return
        if batch is not None:
            try:
                await _durable(batch)
            except CoordinatorError:
                pass  # rolled back with its batch

    # ------------------------------------------------------------------ regex subscriptions

    def _start_regex_resolutions(self, asked: Sequence[tuple[int, str]]) -> None:
        """A heartbeat asked for its group's regexes to be resolved (Kafka 4.x: off the
        heartbeat path, on the coordinator's executor), and that heartbeat is durable: the
        resolution runs as a command of its own, after the heartbeat was answered; one at a
        time per group (the core asks again if a change comes in meanwhile)."""
        if self.state is not RuntimeState.ACTIVE:
            return
        for index, group_id in asked:
            if group_id not in self._resolving:
                self._resolving[group_id] = self._loop.create_task(  # type: ignore[union-attr]
                    self._resolve_regexes(index, group_id),
                    name=f"kip848-regex-{group_id}",
                    context=_own(),
                )

    async def _resolve_regexes(self, index: int, group_id: str) -> None:
        try:
            await asyncio.sleep(0)  # the asking heartbeat's answer goes out first
            await self._own_command(
                index,
                group_id,
                lambda s, now: s.groups.resolve_regexes(group_id, now),
                "Regex resolution not applied",
            )
        finally:
            self._resolving.pop(group_id, None)

    # ------------------------------------------------------------------ timers
    # The table holds deadlines in *timer time* (clock.monotonic_ms: Kafka's timers are delays on
    # a monotonic clock), so a wall-clock step neither fires a timeout early nor delays it. The
    # core arms timers in wall time (``now_ms + timeout``); _timer_time converts them right
    # after the command ran, with the same clock reading (clock.py).

    def _timer_time(self, ops: list[TimerOp]) -> list[TimerOp]:
        """A command's timer operations with their deadlines in timer time."""
        if self.clock.manual:
            return ops  # one time for everything
        to = self.clock.timer_deadline
        return [
            ArmTimer(op.key, to(op.deadline_ms), op.payload) if type(op) is ArmTimer else op
            for op in ops
        ]

    def _apply_timer_ops(self, ops: list[TimerOp]) -> None:
        self.timers.apply(ops)
        at = self._timer_at_ms
        for op in ops:
            if type(op) is ArmTimer and (at is None or op.deadline_ms < at):
                self._reschedule_timer()
                return

    def _settle_keys(self, ops: Sequence[TimerOp], *, durable: bool) -> None:
        pk = self._pending_keys
        for op in ops:
            key = op.key
            left = pk.get(key, 0) - 1
            if left > 0:
                pk[key] = left
                continue
            pk.pop(key, None)
            due = self._deferred.pop(key, None)
            if due is not None and not durable and self.timers.get(key) is None:
                # The command that touched the key is gone: the timer it deferred comes back.
                self._apply_timer_ops([ArmTimer(key, due.deadline_ms, due.payload)])

    def _reschedule_timer(self) -> None:
        if self.clock.manual or self.state is not RuntimeState.ACTIVE or self._loop is None:
            return
        deadline = self.timers.next_deadline()
        if self._timer_handle is not None:
            if deadline == self._timer_at_ms:
                return
            self._timer_handle.cancel()
            self._timer_handle = None
        self._timer_at_ms = deadline
        if deadline is None:
            return
        delay = max(0.0, (deadline - self.clock.monotonic_ms()) / 1000)
        self._timer_handle = self._loop.call_later(delay, self._on_timer_due, context=_own())

    def _on_timer_due(self) -> None:
        self._timer_handle = None
        self._timer_at_ms = None
        if self.state is not RuntimeState.ACTIVE:
            return
        due_at = self.clock.monotonic_ms()
        if self._check_stall(due_at):
            self._reschedule_timer()  # the deadlines moved: nothing may be due any more
            return
        now = self.clock.now_ms()
        for _ in range(100_000):  # bounded; the rest fire on the next wake-up
            due = self.timers.pop_due(due_at)
            if due is None:
                break
            self._fire(due, now)
        self._reschedule_timer()

    def _fire(self, due: DueTimer, now_ms: int) -> _Batch | None:
        if self._pending_keys.get(due.key):
            self._deferred[due.key] = due  # a not-yet-durable command touched this key
            return None
        _kind, group_id, _member = due.key
        if _kind == EXPIRE_OFFSETS:
            return self._fire_expiration(due, now_ms)
        self.stats["timers_fired"] += 1
        if self.observer is not None:  # how late, in timer time (the deadline's clock)
            late_ms = self.clock.monotonic_ms() - due.deadline_ms
            self.observer.timer_fired(_kind, self.shard_index(group_id), late_ms / 1000)
        try:
            _resp, batch = self._execute(
                self.shard_index(group_id), lambda s: s.on_timer(due, now_ms)
            )
        except CoordinatorError as exc:
            log.warning("Timer %s failed: %s", due.key, exc.message)
            self._retry_timer(due)
            return None
        except Exception:  # noqa: BLE001 - logged by _execute; a timer must not kill the loop
            return None
        if batch is not None:

            def retry_if_failed(fut: asyncio.Future[None]) -> None:
                if not fut.cancelled() and fut.exception() is not None:
                    self._retry_timer(due)

            batch.future.add_done_callback(retry_if_failed)
        return batch

    def _retry_timer(self, due: DueTimer) -> None:
        """A timer whose command or write failed (e.g. the disk is full) fires again after
        TIMER_RETRY_MS, as Kafka retries failed timer writes — unless the key was armed again
        meanwhile. The rollback restored the state the timer acts on."""
        if self.state is RuntimeState.ACTIVE and self.timers.get(due.key) is None:
            retry_at = self.clock.monotonic_ms() + TIMER_RETRY_MS
            self._apply_timer_ops([ArmTimer(due.key, retry_at, due.payload)])

    def _tick(self) -> None:
        """Every STALL_TICK_MS (system clock): notice when the coordinator did not run."""
        self._tick_handle = None
        if self.clock.manual or self.state is not RuntimeState.ACTIVE or self._loop is None:
            return
        now = self.clock.monotonic_ms()
        if self._tick_due_ms:
            self._check_stall(now)
        self._tick_due_ms = now + STALL_TICK_MS
        self._tick_handle = self._loop.call_later(STALL_TICK_MS / 1000, self._tick, context=_own())

    def _check_stall(self, now: int) -> bool:
        """Grant the members the time the coordinator was away.

        If the loop ran more than STALL_GRACE_MS later than the tick expected (the process was
        stopped — SIGSTOP, a debugger, a VM pause — or the loop was blocked), heartbeats sent
        meanwhile are still waiting to be read: firing session timeouts now would fence live
        members for the coordinator's own absence. So every deadline moves by the time it was
        away (Kafka re-arms full timeouts after a load, in the same spirit), and the queued
        heartbeats are read before anything expires. True when it granted time."""
        if not self._tick_due_ms:
            return False
        away = now - self._tick_due_ms
        if away <= STALL_GRACE_MS:
            return False
        self._tick_due_ms = now + STALL_TICK_MS  # granted once; the next tick measures afresh
        table = self.timers
        moved: list[TimerOp] = []
        keys = table.keys()
        for key in keys:
            entry = table.get(key)
            if entry is not None:
                moved.append(ArmTimer(key, entry[0] + away, entry[1]))
        table.apply(moved)
        for key, due in self._deferred.items():  # deferred firings keep their place too
            self._deferred[key] = DueTimer(due.key, due.deadline_ms + away, due.payload)
        log.warning(
            "The coordinator did not run for %.1f s (stopped, suspended or blocked): every "
            "timer deadline (%d timers) is extended by that long, so no member is fenced for "
            "the coordinator's absence.",
            away / 1000,
            len(moved),
        )
        return True

    async def advance_time(self, ms: int) -> int:
        """Manual clock only: move time forward and fire every due timer in deadline order,
        waiting for their effects to be durable."""
        if not isinstance(self.clock, ManualClock):
            raise CoordinatorNotAvailableError("AdvanceTime needs --clock manual.")
        self._check_serving()
        if ms > INT64_MAX - _DEADLINE_HEADROOM_MS - self.clock.now_ms():
            # Every time the coordinator stores or arms must stay an int64 (Kafka's type).
            raise InvalidRequestError(
                f"AdvanceTime({ms}) would move the clock past the int64 range of milliseconds."
            )
        now = self.clock.advance(ms)
        await self.flush()
        for _ in range(1_000_000):
            due = self.timers.pop_due(now)
            if due is None:
                break
            self._fire(due, now)
            await self.flush()
        return now

    # ------------------------------------------------------------------ typed API

    def shard_index(self, group_id: str) -> int:
        """The group's coordinator partition: its shard."""
        return partition_for(group_id, self.shard_count)

    async def heartbeat(self, req: ConsumerGroupHeartbeat) -> ConsumerGroupHeartbeatResponse:
        now = self.clock.now_ms()
        join = req.member_epoch == 0
        if join and req.group_id in self._first_targets:
            arrived = self._joins_arrived
            arrived[req.group_id] = arrived.get(req.group_id, 0) + 1
        response: ConsumerGroupHeartbeatResponse = await self._parkable(
            req.group_id, lambda s: s.consumer_group_heartbeat(req, now), join=join
        )
        return response

    async def member_views(
        self, group_id: str, member_ids: Sequence[str]
    ) -> Mapping[str, MemberView | None] | str:
        """What the push stream shows of these members (``watchers.member_views``), read once
        the group's outstanding batch is durable."""
        return await self._submit(
            self.shard_index(group_id),
            lambda s: member_views(s, group_id, member_ids),
            read=True,
        )

    async def describe_group(self, group_id: str) -> GroupDescription:
        return await self._submit(
            self.shard_index(group_id), lambda s: s.describe_group(group_id), read=True
        )

    async def alter_group_configs(
        self, group_id: str, changes: Mapping[str, str | None], *, validate_only: bool = False
    ) -> None:
        index = self.shard_index(group_id)
        if not validate_only:
            await self._submit(index, lambda s: s.alter_group_configs(group_id, changes))
            return

        def validate(s: Shard) -> None:
            mark = s.mark()
            try:
                s.alter_group_configs(group_id, changes)
            finally:
                s.rollback(mark)

        await self._submit(index, validate, read=True)

    async def group_config(self, group_id: str) -> dict[str, str]:
        return await self._submit(
            self.shard_index(group_id), lambda s: s.group_config(group_id), read=True
        )

    async def describe_group_config(self, group_id: str) -> tuple[dict[str, str], dict[str, str]]:
        """(effective configs, per-group overrides)."""
        return await self._submit(
            self.shard_index(group_id),
            lambda s: (s.group_config(group_id), dict(s.group_configs.get(group_id, {}))),
            read=True,
        )

    async def list_groups(
        self, states: Sequence[str] = (), types: Sequence[str] = ()
    ) -> list[ListedGroup]:
        """ListGroups across shards (consumer groups and offset-only "simple" groups), with the
        core's case-insensitive state and type filters; sorted by group id."""
        self._check_serving()
        out: list[ListedGroup] = []
        waits = []
        for i in range(self.shard_count):
            groups, batch = self._execute(i, lambda s: s.list_groups(states, types), read=True)
            out.extend(groups)
            if batch is not None:
                waits.append(batch)
        for waited in waits:
            await _durable(waited)
        return sorted(out, key=lambda g: g.group_id)

    async def create_topics(self, topics: Sequence[NewTopic]) -> list[TopicResult]:
        return await self._submit(REGISTRY, lambda r: r.create_topics(topics))

    async def create_partitions(self, requests: Sequence[tuple[str, int]]) -> list[TopicResult]:
        return await self._submit(REGISTRY, lambda r: r.create_partitions(requests))

    async def delete_topics(self, names: Sequence[str]) -> list[TopicResult]:
        """Delete topics and, in the same durable batch, the committed offsets of every group on
        them (Kafka's onPartitionsDeleted), so a re-created topic starts fresh. Running the
        shards right after the registry, with no await in between, puts every record in one
        pending batch: no crash can keep the topic deletion without the offset tombstones, and
        no commit to a re-created topic can slip in between."""
        self._check_serving()
        results, batch = self._execute(REGISTRY, lambda r: r.delete_topics(names))
        deleted = [t.name for t in results if t.error_code == ErrorCode.NONE]
        for i in range(self.shard_count if deleted else 0):
            self._execute(i, lambda s: s.on_topics_deleted(deleted))  # joins the registry's batch
        if batch is not None:
            await _durable(batch)
        return results

    async def list_topics(self) -> list[TopicResult]:
        return await self._submit(REGISTRY, lambda r: r.list_topics(), read=True)

    async def apply_topic_snapshot(
        self, topics: Sequence[NewTopic], keep: Sequence[str] = ()
    ) -> SnapshotChanges:
        """Make the registry follow a broker's metadata (``TopicRegistry.apply_snapshot``).
        Topics gone from the broker or re-created there (a new id) lose their committed
        offsets in the same durable batch, as :meth:`delete_topics` does."""
        self._check_serving()
        changes, batch = self._execute(REGISTRY, lambda r: r.apply_snapshot(topics, keep))
        deleted = changes.deleted_names
        for i in range(self.shard_count if deleted else 0):
            self._execute(i, lambda s: s.on_topics_deleted(deleted))  # joins the registry's batch
        if batch is not None:
            await _durable(batch)
        return changes

    def known_partitions(self) -> int:
        """Partitions of every topic in the registry (the most a member can own)."""
        return sum(t.num_partitions for t in self.registry.image().by_name.values())

    def topic_name(self, topic_id: str) -> str:
        """Convenience name for responses ("" when unknown)."""
        t = self.registry.image().by_id.get(topic_id)
        return "" if t is None else t.name

    # ------------------------------------------------------------------ offsets and group administration
    # OffsetCommit / OffsetFetch / OffsetDelete, DeleteGroups and the periodic offset expiration
    # (owner: offsets/admin). The semantics are the core's (coordinator/core/offsets.py); this
    # block only routes commands to shards and waits for durability.

    async def offset_commit(
        self, req: OffsetCommit, *, legacy_version: bool = False
    ) -> OffsetCommitResponse:
        """Answered once the commit's records are durable. Group-level errors (fencing, unknown
        group, loading, a failed write) raise; the server puts them on every partition, as
        Kafka answers. ``legacy_version``: the request came as OffsetCommit v8 or older, which
        a member of the consumer protocol may not use (Kafka: UNSUPPORTED_VERSION)."""
        now = self.clock.now_ms()

        def commit(s: Shard) -> Any:
            if legacy_version:
                _check_legacy_commit(s, req)
            return s.offset_commit(req, now)

        return await self._submit(self.shard_index(req.group_id), commit)

    # ------------------------------------------------------------------ transactions
    # (core/transactions.py; the Kafka listener's kafka/transactions.py drives them)

    async def txn_offset_commit(self, req: TxnOffsetCommit) -> OffsetCommitResponse:
        """TxnOffsetCommit on the group's shard: the offsets are pending once durable."""
        now = self.clock.now_ms()
        return await self._submit(
            self.shard_index(req.group_id), lambda s: s.txn_offset_commit(req, now)
        )

    async def add_offsets_to_txn(self, cmd: AddOffsetsToTxn) -> None:
        now = self.clock.now_ms()
        await self._submit(self.shard_index(cmd.group_id), lambda s: s.add_offsets_to_txn(cmd, now))

    async def end_transaction(self, cmd: EndTxn) -> list[str]:
        """An EndTxn forwarded or answered (core/transactions.py), on every shard that holds a
        transaction of the producer (a producer's offsets may be in groups of several shards);
        the groups it moved, once durable."""
        now = self.clock.now_ms()
        return await self._on_shards(
            lambda s: s.offsets.txn.knows_producer(cmd.producer_id),
            lambda s: s.end_transaction(cmd, now),
        )

    async def producer_initialized(self, cmd: ProducerInitialized) -> list[str]:
        """An InitProducerId answered for a transactional id: the ongoing transactions of an
        older producer epoch (or id) it aborted, on every shard; the groups, once durable."""
        return await self._on_shards(
            lambda s: any(t.transactional_id == cmd.transactional_id for t in s.transactions()),
            lambda s: s.producer_initialized(cmd),
        )

    async def _on_shards(
        self, concerned: Callable[[Shard], bool], fn: Callable[[Shard], Result[Ended]]
    ) -> list[str]:
        self._check_serving()
        groups: list[str] = []
        waits = []
        for i, shard in enumerate(self.shards):
            if not concerned(shard):
                continue
            ended, batch = self._execute(i, fn)
            groups += ended.groups
            if batch is not None:
                waits.append(batch)
        for waited in waits:
            await _durable(waited)
        return groups

    def transactions(self) -> list[GroupTransaction]:
        """Every group's open or ending transaction (a read of the loaded state, on the loop)."""
        return [t for shard in self.shards for t in shard.transactions()]

    async def offset_fetch(
        self, groups: Sequence[OffsetFetchGroup]
    ) -> list[OffsetFetchGroupResponse]:
        """A read per group on the group's shard; each answer waits for the last outstanding
        batch of its shard, so it never shows a commit that could still be lost. A per-group
        coordinator error (loading, a failed write behind the read) is that group's error."""
        answers: list[OffsetFetchGroupResponse] = []
        waits: list[tuple[int, _Batch]] = []
        for n, group in enumerate(groups):

            def fetch(s: Shard, g: OffsetFetchGroup = group) -> OffsetFetchGroupResponse:
                return s.offset_fetch(g)

            try:
                self._check_serving()
                resp, batch = self._execute(self.shard_index(group.group_id), fetch, read=True)
            except CoordinatorError as exc:
                resp, batch = _fetch_error(group.group_id, exc), None
            answers.append(resp)
            if batch is not None:
                waits.append((n, batch))
        for n, batch in waits:
            try:
                await _durable(batch)
            except CoordinatorError as exc:
                answers[n] = _fetch_error(groups[n].group_id, exc)
        return answers

    async def offset_delete(
        self, group_id: str, topics: Sequence[tuple[str, Sequence[int]]]
    ) -> OffsetDeleteResponse:
        return await self._submit(
            self.shard_index(group_id), lambda s: s.offset_delete(group_id, topics)
        )

    async def delete_groups(
        self, group_ids: Sequence[str]
    ) -> list[tuple[str, ErrorCode, str | None]]:
        """(group id, error code, message) per requested id, in request order. Each shard
        deletes its own groups in one command; a failed write fails that shard's groups."""
        by_shard: dict[int, list[int]] = {}
        for n, gid in enumerate(group_ids):
            by_shard.setdefault(self.shard_index(gid), []).append(n)
        out: list[tuple[str, ErrorCode, str | None]] = [
            (gid, ErrorCode.NONE, None) for gid in group_ids
        ]
        waits: list[tuple[list[int], _Batch]] = []
        for index, positions in by_shard.items():
            ids = [group_ids[n] for n in positions]

            def delete(s: Shard, ids: list[str] = ids) -> Result[list[DeleteGroupResult]]:
                return s.delete_groups(ids)

            try:
                self._check_serving()
                results, batch = self._execute(index, delete)
            except CoordinatorError as exc:
                results, batch = [(gid, exc.code, exc.message) for gid in ids], None
            for n, item in zip(positions, results, strict=True):
                out[n] = item
            if batch is not None:
                waits.append((positions, batch))
        for positions, batch in waits:
            try:
                await _durable(batch)
            except CoordinatorError as exc:
                for n in positions:
                    if out[n][1] == ErrorCode.NONE:
                        out[n] = (group_ids[n], exc.code, exc.message)
        return out

    def _expiration_timer(self, index: int, now_ms: int) -> ArmTimer:
        """``now_ms`` in timer time (clock.monotonic_ms)."""
        return ArmTimer(
            (EXPIRE_OFFSETS, "", str(index)),
            now_ms + self.config.offsets_retention_check_interval_ms,
        )

    def _fire_expiration(self, due: DueTimer, now_ms: int) -> _Batch | None:
        """``offsets.retention.check.interval.ms`` elapsed on one shard: expire offsets, delete
        empty groups left without offsets. The next run is armed first, straight into the
        table: the schedule is not state, and a failed run or write must not end the cleanup."""
        index = int(due.key[2])
        self._apply_timer_ops([self._expiration_timer(index, self.clock.monotonic_ms())])
        self.stats["timers_fired"] += 1
        try:
            # What expired and which groups went is logged from the result's events once durable.
            expired, batch = self._execute(index, lambda s: _expire(s, now_ms))
        except CoordinatorError as exc:
            log.warning("Offset expiration on shard %d failed: %s", index, exc.message)
            return None
        except Exception:  # noqa: BLE001 - logged by _execute; a timer must not kill the loop
            return None
        if self.observer is not None:
            self.observer.offsets_expired(expired)
        return batch

    # ------------------------------------------------------------------ (end of offsets block)

    def snapshot(self) -> dict[str, Any]:
        """Canonical in-memory state (tests compare it across restarts)."""
        groups: dict[str, Any] = {}
        configs: dict[str, Any] = {}
        for shard in self.shards:
            snap = shard.snapshot()
            groups.update(snap["groups"])
            configs.update(snap["group_configs"])
        return {
            "groups": dict(sorted(groups.items())),
            "group_configs": dict(sorted(configs.items())),
            "topics": [(t.name, t.topic_id, t.num_partitions) for t in self.registry.list_topics()],
            "security": self.security.snapshot(),
        }

    # ------------------------------------------------------------------ security metadata

    def set_topic_filter(self, allows: Callable[[object, str, str], bool] | None) -> None:
        """Who may describe which topic (the server's authorizer): regexes are resolved with it,
        per triggering member (``ConsumerGroups.topic_filter``)."""
        for shard in self.shards:
            shard.groups.topic_filter = allows

    async def alter_scram_credentials(
        self, deletions: Sequence[ScramDeletion], upsertions: Sequence[ScramUpsertion]
    ) -> list[UserResult]:
        return await self._submit(
            REGISTRY, lambda _r: self.security.alter_scram_credentials(deletions, upsertions)
        )

    async def describe_scram_credentials(self, users: Sequence[str] | None) -> list[UserResult]:
        return await self._submit(
            REGISTRY, lambda _r: self.security.describe_scram_credentials(users), read=True
        )

    async def create_acls(self, creations: Sequence[AclCreation]) -> list[AclCreation]:
        return await self._submit(REGISTRY, lambda _r: self.security.create_acls(creations))

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[AclDeletion]:
        return await self._submit(REGISTRY, lambda _r: self.security.delete_acls(filters))

    async def describe_acls(self, flt: AclBindingFilter) -> list[AclBinding]:
        return await self._submit(REGISTRY, lambda _r: self.security.describe_acls(flt), read=True)

    # ------------------------------------------------------------------ legacy bridge (classic RPCs)

    def _complete(self, completions: Sequence[tuple[int, int, Any]]) -> None:
        """Answer parked classic requests (their completing batch is durable). A failed batch
        drops its completions: the rollback makes those requests pending again."""
        for index, token, response in completions:
            fut = self._parked.pop((index, token), None)
            if fut is None or fut.done():
                continue
            if isinstance(response, CoordinatorError):  # the request failed after all
                fut.set_exception(response)
            else:
                fut.set_result(response)

    def release_parked(self) -> None:
        """Shutdown: answer every parked classic request (and any parked from now on) with
        COORDINATOR_NOT_AVAILABLE, so no JoinGroup/SyncGroup hangs while the server drains
        (Kafka answers NOT_COORDINATOR when it unloads a group; the client rediscovers and
        rejoins either way). Idempotent."""
        self._parking_closed = True
        parked, self._parked = self._parked, {}
        for fut in parked.values():
            if not fut.done():
                fut.set_exception(_shutting_down())

    async def _parkable(
        self, group_id: str, fn: Callable[[Any], Any], *, join: bool = False
    ) -> Any:
        """Run a command that may be answered later; a ``Pending`` answer parks the request
        until a later durable result completes it (classic: the join barrier, the leader's
        SyncGroup, a timer; a join before a new group's first target: that target)."""
        index = self.shard_index(group_id)
        response, batch = await self._run(index, fn, join=join, park=True)
        if not isinstance(response, _Parked):
            if batch is not None:
                await _durable(batch)
            return response
        try:
            if batch is not None:
                await _durable(batch)
            return await response.future
        finally:
            if self._parked.get(response.key) is response.future:
                del self._parked[response.key]

    async def classic_join(self, req: cm.JoinGroup) -> cm.JoinGroupResponse:
        now = self.clock.now_ms()
        response: cm.JoinGroupResponse = await self._parkable(
            req.group_id, lambda s: s.classic_groups.join(req, now)
        )
        return response

    async def classic_sync(self, req: cm.SyncGroup) -> cm.SyncGroupResponse:
        now = self.clock.now_ms()
        response: cm.SyncGroupResponse = await self._parkable(
            req.group_id, lambda s: s.classic_groups.sync(req, now)
        )
        return response

    async def classic_heartbeat(self, req: cm.Heartbeat) -> cm.HeartbeatResponse:
        now = self.clock.now_ms()
        response: cm.HeartbeatResponse = await self._parkable(
            req.group_id, lambda s: s.classic_groups.heartbeat(req, now)
        )
        return response

    async def classic_leave(self, req: cm.LeaveGroup) -> cm.LeaveGroupResponse:
        now = self.clock.now_ms()
        response: cm.LeaveGroupResponse = await self._parkable(
            req.group_id, lambda s: s.classic_groups.leave(req, now)
        )
        return response

    async def describe_classic_groups(self, group_ids: Sequence[str]) -> list[cm.DescribedGroup]:
        out: list[cm.DescribedGroup] = []
        for gid in group_ids:

            def describe(s: Shard, g: str = gid) -> list[cm.DescribedGroup]:
                return s.classic_groups.describe([g])

            out += await self._submit(self.shard_index(gid), describe, read=True)
        return out


def _check_legacy_commit(shard: Shard, req: OffsetCommit) -> None:
    """Kafka's ConsumerGroup.validateOffsetCommit: a member of the consumer protocol (not a
    classic member of a consumer group) must use OffsetCommit v9+. Admin commits (epoch < 0 on
    an empty group) and unknown members are left to the core's own checks."""
    group = shard.groups.get(req.group_id)
    if group is None or (req.generation_id_or_member_epoch < 0 and not group.members):
        return
    member = group.members.get(req.member_id)
    if member is not None and member.classic_member_metadata is None:
        raise UnsupportedVersionError(
            "OffsetCommit version 9 or above must be used by members using the modern group protocol"
        )


def _write_events(events: Sequence[LogEvent]) -> None:
    """Log what the core says happened (its batch is durable). Each line also carries the
    event's name and fields (``record.event``, ``record.event_fields``) for structured logging."""
    for event in events:
        log.info(
            "%s",
            event.message(),
            extra={"event": event.name, "group_id": event.group_id, "event_fields": event.fields},
        )


def _expire(shard: Shard, now_ms: int) -> Result[int]:
    """The core's expiration, answering how many offsets it expired (for the metrics)."""
    result: Result[Any] = shard.expire_offsets(now_ms)
    result.response = sum(
        int(e.fields["count"]) for e in result.events if e.event is Event.OFFSETS_EXPIRED
    )
    return result


def _append_encoded(store: RecordStore, records: Sequence[Record], timestamp_ms: int) -> None:
    """The writer's thread: encode a batch's records and append them. Encoding happens here,
    not in each command on the loop, so a big command (a 5,000-member target: about 30 ms of
    encoding) does not hold the loop for it; the GIL switch interval lets the loop run
    meanwhile."""
    encode = codec.encode
    stored = []
    for rec in records:
        key, value = encode(rec)
        stored.append(StoredRecord(key, value, rec.group_id))
    store.append(stored, timestamp_ms)


def _shutting_down() -> CoordinatorError:
    return CoordinatorNotAvailableError("The coordinator is shutting down.")


def _fetch_error(group_id: str, exc: CoordinatorError) -> OffsetFetchGroupResponse:
    return OffsetFetchGroupResponse(
        group_id=group_id, error_code=exc.code, error_message=exc.message
    )


def _first_target(shard: Shard, *, group_id: str, now_ms: int) -> Any:
    return shard.groups.first_target(group_id, now_ms)


def _own() -> contextvars.Context:
    """A fresh context for the runtime's own callbacks and tasks (timers, offloads, parked
    joins): they are often scheduled while a request is handled, and must not run with that
    request's context (its arrival time would be their queue time, its trace their parent)."""
    return contextvars.Context()


def _nothing() -> None:
    """A turn taken only to wait for the commands queued ahead of it."""
