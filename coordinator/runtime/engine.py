"""The asyncio engine around the driver: the runtime's only IO.

The driver (``driver.py``) decides; the engine is its :class:`~.driver.Host` on a real event
loop: futures are the loop's, the turns' drains and the driver's wake-ups are ``call_soon`` /
``call_later`` in contexts of their own (a timer armed while a request is handled must not run
with that request's arrival time or trace), one writer coroutine hands each batch to
``store.append`` in a single-thread executor (which also encodes the batch's records, so a big
command — a 5,000-member target — does not spend its encoding on the loop), the worker pool
computes offloaded targets, and :mod:`.storewatch` follows the store's health.

Lifecycle: :meth:`Engine.start` loads every state machine from the store in the executor
(requests meanwhile get COORDINATOR_LOAD_IN_PROGRESS), then serves; :meth:`Engine.close` stops
taking commands, answers parked requests, finishes in-flight and pending writes and closes the
store. Under a manual clock nothing fires until :meth:`Engine.advance_time`.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

from coordinator.core import codec
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.errors import (
    CoordinatorError,
    CoordinatorNotAvailableError,
    IllegalStateError,
    InvalidRequestError,
)
from coordinator.core.records import Record
from coordinator.core.target_assignment import AssignmentJob

from . import collector
from .clock import ManualClock, SystemClock
from .driver import REGISTRY, Batch, ClusterLogMovedError, Driver, RuntimeState
from .loader import LoadStats, load_into
from .offload import AssignorPool
from .partitions import Partitions, migrate_group_configs
from .requests import Command
from .store import RecordStore, StoredRecord, StoreFencedError, StoreLostError
from .storewatch import StoreWatch, rescue
from .watchers import GroupWatchers

log = logging.getLogger("kip848.runtime")

T = TypeVar("T")
INT64_MAX = 2**63 - 1
CLUSTER_LOG_ATTEMPTS = 5
"""How many times a command of the cluster log is run when other nodes keep writing to it first
(each time after catching up with them)."""
BIG_TARGET = 1_000
"""A worker's outcome that changes this many members' targets builds long-lived state in
bulk: frozen at once (``collector.py``)."""
_DEADLINE_HEADROOM_MS = 2**40
"""Room left above the clock for deadlines armed from it (timeouts are at most int32 ms)."""


class Engine:
    """The driver's host on asyncio (see the module docstring)."""

    def __init__(
        self,
        *,
        machines: Sequence[Any],
        config: GroupCoordinatorConfig,
        store: RecordStore,
        clock: SystemClock | ManualClock,
        observer: Any = None,
        assignor_pool: AssignorPool | None = None,
        committed: Any = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.observer = observer
        self.assignor_pool = assignor_pool
        self.driver = Driver(
            machines=machines,
            config=config,
            clock=clock,
            host=self,
            observer=observer,
            workers=assignor_pool is not None,
            stall_watch=True,
            write_timeout_ms=config.offsets_commit_timeout_ms,
            committed=committed,
        )
        self.load_stats: LoadStats | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="kip848-writer")
        self._wake_writer: asyncio.Event | None = None
        self._writer_task: asyncio.Task[None] | None = None
        self._jobs: dict[str, asyncio.Task[None]] = {}  # group -> its worker's computation
        self._warm_up: asyncio.Task[None] | None = None
        # Store health (storewatch.py): writable / lost, and who wants to hear of a change.
        self.watch = StoreWatch(store, on_change=self.health_changed, on_lost=self._store_lost)
        self._health_listeners: list[Callable[[bool], None]] = []
        # Push: who waits to hear that a group changed, once the change is durable (watchers.py).
        self.watchers = GroupWatchers()
        # Several nodes on one store (share_partitions; partitions.py); None: one node.
        self.partitions: Partitions | None = None

    # ------------------------------------------------------------------ Host

    def new_future(self) -> asyncio.Future[Any]:
        if self._loop is None:
            raise IllegalStateError("the runtime runs commands only once started")
        return self._loop.create_future()

    def call_soon(self, callback: Callable[[], Any]) -> None:
        self._started().call_soon(callback, context=_own())

    def call_later(self, delay_ms: float, callback: Callable[[], Any]) -> asyncio.TimerHandle:
        return self._started().call_later(delay_ms / 1000, callback, context=_own())

    perf = staticmethod(time.perf_counter)

    def write(self) -> None:
        if self._wake_writer is not None:
            self._wake_writer.set()

    def run_job(self, index: int, group_id: str, job: AssignmentJob) -> None:
        self._jobs[group_id] = self._started().create_task(
            self._compute(index, group_id, job), name=f"kip848-assign-{group_id}", context=_own()
        )

    def changed(self, group_ids: Iterable[str]) -> None:
        self.watchers.notify(group_ids)

    def health_changed(self) -> None:
        serving = self.serving
        for listener in self._health_listeners:
            listener(serving)

    # ------------------------------------------------------------------ lifecycle

    def share_partitions(self, node_id: int, new_shard: Callable[[], Any]) -> Partitions:
        """Several nodes share the store (docs/ha.md): this one serves only the partitions its
        cluster node gives it, its appends are fenced by their leader epochs, and it follows
        the cluster log the others append to (``partitions.py``). Before :meth:`start`."""
        self.partitions = Partitions(
            self.driver, self.store, self.watchers, self._executor, node_id, new_shard
        )
        return self.partitions

    async def start(self) -> LoadStats:
        """Load every state machine from the store (sharing it: the cluster log only), then
        serve. Requests before the end of loading get COORDINATOR_LOAD_IN_PROGRESS."""
        driver = self.driver
        loop = self._loop = asyncio.get_running_loop()
        self._wake_writer = asyncio.Event()
        driver.state = RuntimeState.LOADING
        try:
            if self.partitions is not None:
                stats = await self.partitions.load_cluster()
            else:
                stats = await loop.run_in_executor(
                    self._executor,
                    partial(
                        load_into,
                        self.store,
                        driver.shards,
                        driver.registry,
                        committed=driver.committed,
                    ),
                )
        except BaseException:
            driver.state = RuntimeState.FAILED
            raise
        if driver.state is not RuntimeState.LOADING:  # closed while loading
            return stats
        self.load_stats = stats
        for s in stats.shards:
            log.info(
                "Loaded shard %d: %d records, %d groups in %.1f ms.",
                s.shard,
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
        driver.start()
        if self.assignor_pool is not None and not self.clock.manual:
            # Workers start in the background (a storm right after start-up should not wait for
            # interpreters to start); under a manual clock (tests) the first job starts them.
            self._warm_up = loop.create_task(self.assignor_pool.start(), name="kip848-warm-up")
        self.watch.start(self._executor)
        self.health_changed()
        if self.partitions is None:
            for index in range(driver.shard_count):
                await migrate_group_configs(driver, index)
        return stats

    async def close(self) -> None:
        """Stop taking commands, finish in-flight and pending writes, close the store."""
        driver = self.driver
        if driver.state in (RuntimeState.CLOSED, RuntimeState.CLOSING):
            return
        was_active = driver.state is RuntimeState.ACTIVE
        driver.state = RuntimeState.CLOSING
        self.health_changed()
        self.watchers.close()
        await self.watch.stop()
        driver.release_parked()
        driver.stop()
        tasks = [*self._jobs.values(), *([self._warm_up] if self._warm_up else [])]
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
        if self.partitions is not None:
            await self.partitions.close()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self.store.close)
        self._executor.shutdown(wait=True)
        driver.state = RuntimeState.CLOSED

    async def flush(self) -> None:
        """Wait until every batch produced so far is resolved (durable or failed)."""
        driver = self.driver
        for _ in range(1_000_000):
            batch = driver.pending or driver.inflight
            if batch is None:
                return
            try:
                await self.driver.wait(batch)
            except CoordinatorError:
                pass

    # ------------------------------------------------------------------ commands

    async def submit(
        self, index: int, fn: Callable[[Any], Any], *, timeout_ms: int | None = None, **flags: Any
    ) -> Any:
        """Run a command in its turn (``Driver.submit``, with its ``read``/``join``/``park``
        flags, and ``timeout_ms`` of a command of the cluster log) and answer once it may be
        released. Each caller awaits a future of its own: one that goes away (a deadline, a
        reset stream: grpc.aio cancels its task) cancels only its own. A command that writes
        to the cluster log (``REGISTRY``, not ``read``) is run again when another node wrote to
        it first (:meth:`cluster_log_command`); a read of it waits while this node applies
        other nodes' appends to it (``Partitions.applied``)."""
        if index == REGISTRY:
            if not flags.get("read"):
                return await self.cluster_log_command(
                    lambda: self._submit(index, fn, flags, timeout_ms)
                )
            if self.partitions is not None:
                await self.partitions.applied()
        return await self._submit(index, fn, flags, timeout_ms)

    async def _submit(
        self,
        index: int,
        fn: Callable[[Any], Any],
        flags: dict[str, Any],
        timeout_ms: int | None = None,
    ) -> Any:
        response, fut = self.driver.submit(index, fn, timeout_ms=timeout_ms, **flags)
        if fut is None:
            return response
        return await fut

    async def cluster_log_command(self, run: Callable[[], Awaitable[T]]) -> T:
        """``run()``, run again when the cluster log refused its write because another node
        wrote to it first, once this node has caught up (:data:`CLUSTER_LOG_ATTEMPTS` in all;
        nothing of a refused run was written, its state was rolled back). Each run waits while
        this node applies other nodes' appends to the cluster log (``Partitions.applied``: the
        registry is held between their steps)."""
        attempt = 1
        while True:
            if self.partitions is not None:
                await self.partitions.applied()
            try:
                return await run()
            except ClusterLogMovedError:
                if self.partitions is None or attempt == CLUSTER_LOG_ATTEMPTS:
                    raise
            await self.partitions.caught_up()
            attempt += 1
            log.info(
                "A command of the cluster log was refused (another node wrote to it first): "
                "caught up with the cluster log, running it again (attempt %d).",
                attempt,
            )

    async def request(self, cmd: Command) -> Any:
        """A group's request on its shard (``Driver.request``), answered like :meth:`submit`."""
        response, fut = self.driver.request(cmd)
        if fut is None:
            return response
        return await fut

    async def durable(
        self, batch: Batch | None, index: int | None = None, timeout_ms: int | None = None
    ) -> None:
        """A request's answer waits until ``batch`` is resolved (raises its write's error, or
        :class:`~.driver.WriteTimeoutError` at the write timeout); ``index``: the state machine
        whose command it waits for (:meth:`wait_for`)."""
        if batch is not None:
            await self.wait_for(batch, index, timeout_ms)

    def wait_for(
        self, batch: Batch, index: int | None = None, timeout_ms: int | None = None
    ) -> Any:
        """A request's answer's wait for ``batch``, started now (a future): its write timeout
        counts from here, so a request waiting for several batches starts every wait before
        awaiting any (one timeout in all, not one after another); answered at once if state
        machine ``index`` is dropped (``Driver.answer_dropped``). A command of the cluster log
        (``REGISTRY``) gets :class:`~.driver.ClusterLogTimeoutError` instead, within
        ``timeout_ms`` when given (``Driver.wait``)."""
        return self.driver.wait(batch, timed=True, index=index, timeout_ms=timeout_ms)

    # ------------------------------------------------------------------ health (storewatch.py)

    @property
    def serving(self) -> bool:
        """Loaded, not stopping or failed, and able to write its store (gRPC health)."""
        return self.driver.state is RuntimeState.ACTIVE and self.watch.writable

    def add_health_listener(self, listener: Callable[[bool], None]) -> None:
        """Call ``listener(serving)`` (on the loop) whenever :attr:`serving` may have changed."""
        self._health_listeners.append(listener)

    def _store_lost(self, exc: StoreLostError) -> None:
        """The store is no longer the one on disk: stop acknowledging for good, rescue it."""
        log.critical("%s. The coordinator stops serving.", exc)
        self.driver.stop_serving(str(exc))
        if self._loop is not None:
            self._loop.create_task(rescue(self.store, self._executor), name="kip848-rescue")

    def _started(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise IllegalStateError("the runtime runs commands only once started")
        return self._loop

    # ------------------------------------------------------------------ writer and workers

    async def _writer_loop(self) -> None:
        loop = asyncio.get_running_loop()
        wake = self._wake_writer
        assert wake is not None
        driver = self.driver
        while True:
            await wake.wait()
            wake.clear()
            while (batch := driver.take_batch()) is not None:
                started = time.monotonic()
                parts = self.partitions
                fence = driver.lead.fence() if parts is None else parts.fence_of(batch)
                try:
                    offsets = await loop.run_in_executor(
                        self._executor,
                        append_encoded,
                        self.store,
                        batch.records,
                        self.clock.now_ms(),
                        fence,
                    )
                except asyncio.CancelledError:
                    raise
                except StoreFencedError as exc:
                    driver.write_failed(batch, exc)
                    assert self.partitions is not None  # only appends with a fence are fenced
                    self.partitions.fenced(exc, fence)
                except BaseException as exc:  # noqa: BLE001 - every write failure fails the batch
                    driver.write_failed(batch, exc)
                    self.watch.write_failed(exc)
                else:
                    self.watch.write_succeeded()
                    if self.partitions is not None:
                        self.partitions.written(offsets)
                    driver.written(batch)
                    if self.observer is not None:
                        self.observer.batch_written(
                            batch,
                            len(batch.records),
                            batch.commands,
                            time.monotonic() - started,
                            getattr(self.store, "last_commit_seconds", None),
                        )

    async def _compute(self, index: int, group_id: str, job: AssignmentJob) -> None:
        pool = self.assignor_pool
        assert pool is not None
        try:
            outcome = await pool.run(job)
        finally:
            self._jobs.pop(group_id, None)
        big = len(outcome.changed) >= BIG_TARGET
        if big:  # a step of its own, then the target's objects frozen once built
            collector.collect_all()
            await asyncio.sleep(0)
        self.driver.own.job_done(index, group_id, outcome)
        if big:
            collector.freeze_new()

    # ------------------------------------------------------------------ manual time

    async def advance_time(self, ms: int) -> int:
        """Manual clock only: move time forward and fire every due timer in deadline order,
        waiting for their effects to be durable."""
        clock = self.clock
        if not isinstance(clock, ManualClock):
            raise CoordinatorNotAvailableError("AdvanceTime needs --clock manual.")
        self.driver.check_serving()
        if ms > INT64_MAX - _DEADLINE_HEADROOM_MS - clock.now_ms():
            # Every time the coordinator stores or arms must stay an int64 (Kafka's type).
            raise InvalidRequestError(
                f"AdvanceTime({ms}) would move the clock past the int64 range of milliseconds."
            )
        now = clock.advance(ms)
        await self.flush()
        timers = self.driver.timers
        for _ in range(1_000_000):
            due = timers.pop_due(now)
            if due is None:
                break
            self.driver.fire(due, now)
            await self.flush()
        return now


def append_encoded(
    store: RecordStore, records: Sequence[Record], timestamp_ms: int, fence: Any = None
) -> dict[int, int]:
    """The writer's thread: encode a batch's records and append them (``fence``: sharing the
    store, the leader epochs it is written under). Encoding happens here, not in each command
    on the loop, so a big command (a 5,000-member target: about 30 ms of encoding) does not
    hold the loop for it; the GIL switch interval lets the loop run meanwhile. Returns each
    log's last offset written."""
    encode = codec.encode
    stored = []
    for rec in records:
        key, value = encode(rec)
        stored.append(StoredRecord(key, value, rec.group_id))
    if fence is None:
        return store.append(stored, timestamp_ms)
    return store.append(stored, timestamp_ms, fence=fence)


def _own() -> contextvars.Context:
    """A fresh context for the runtime's own callbacks and tasks (timers, offloads, parked
    joins): they are often scheduled while a request is handled, and must not run with that
    request's context (its arrival time would be their queue time, its trace their parent)."""
    return contextvars.Context()
