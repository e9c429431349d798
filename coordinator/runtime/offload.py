"""Target assignments computed outside the event loop, in worker processes.

The assignor is CPU work in Python: on a thread it would hold the GIL and stall the event loop
just the same, so large groups' computations go to ``group.coordinator.background.threads``
worker *processes* (Kafka's name for the size of its offload pool; here they are processes).
The runtime hands a worker an :class:`~coordinator.core.target_assignment.AssignmentJob` — the
inputs copied out of the group by the core — and turns the
:class:`~coordinator.core.target_assignment.AssignmentOutcome` it sends back into an ordinary
command on the group's shard, whose records are the new target. The state machine never waits
for a worker and never sees one: replaying the records rebuilds the same state, with or
without workers. A job is pickled by the pool's feeder thread (holding the GIL) and unpickled by
the worker: for a 10,000-member group, 0.8-1.4 MB and tens of milliseconds each way, so the
core keeps a small change whose assignor computes only what changes on the loop
(``group.consumer.assignor.offload.inline.max.changed.members``, ``target_updates.py``).

* One job per group at a time (Kafka's one task per executor key): the runtime keeps the
  group's key until the outcome has been applied.
* Workers are started with ``spawn`` (the server's gRPC threads make ``fork`` unsafe) when the
  pool starts, each loading the configured assignors once, and warmed up so the first storm
  does not pay for interpreter start-up.
* A worker ends with the coordinator's process, even one killed with SIGKILL (it watches its
  parent's sentinel).
* A worker that dies (or a pool that breaks) fails the jobs it had with an error outcome; the
  pool is rebuilt for the next job. An assignor error is an error outcome too: the group keeps
  its target and the next eligible heartbeat (or the assignment timer) tries again, as Kafka.
* A worker runs CPython's cyclic garbage collector itself, as the event loop does
  (``collector.py``): the automatic collector is off, so no collection runs in the middle of a
  job (CPython's own, triggered by allocations, ran 57-131 times inside one job of a
  10,000-member group, traversing the job's freshly unpickled inputs: 4-45 ms of a 25-150 ms
  job; docs/benchmarks.md, "Offloaded target assignments in worker processes"). What the worker
  loaded at its start is frozen out of the collections' way (``gc.freeze``). A job's inputs and
  outcome die by reference counting once its answer is sent; only reference cycles need the
  collector, and the worker collects them right then (:class:`_Carrier`), before it waits for
  the next job: the young generation (everything allocated since the last job ended) after every
  job, a full collection every :data:`FULL_EVERY` jobs. So a job starts with nothing of the last
  one left, memory stays flat, and the collection is on no answer's path unless the next job is
  already waiting (it is some 10 microseconds when the job left no cycle).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import multiprocessing
import multiprocessing.connection
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from coordinator.core.target_assignment import AssignmentJob, AssignmentOutcome, run_job

from .assignors import make_assignors

log = logging.getLogger("kip848.offload")

FULL_EVERY = 100
"""Jobs between two full collections in a worker (the young generation is collected after
every job)."""

_ASSIGNORS: dict[str, Any] = {}
"""In a worker: the configured assignors by name (loaded once by :func:`_init_worker`)."""


class _Worker:
    """In a worker: whether it runs its own collector, and the jobs it has finished since its
    last full collection."""

    own_collector = False
    jobs = 0


def _init_worker(names: tuple[str, ...], own_collector: bool = True) -> None:
    _ASSIGNORS.update((a.name, a) for a in make_assignors(names))
    if own_collector:
        gc.disable()
        gc.collect()
        gc.freeze()  # the interpreter, the modules, the assignors: kept for the worker's life
        _Worker.own_collector = True
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(
            target=_exit_with_parent, args=(parent.sentinel,), name="parent-watch", daemon=True
        ).start()


def _exit_with_parent(sentinel: int) -> None:
    """In a worker: end when the coordinator's process ends, however it ends. (A worker waits
    on a queue it also holds the writing end of, so a coordinator killed with SIGKILL would
    otherwise leave its workers behind for ever.)"""
    multiprocessing.connection.wait([sentinel])
    os._exit(0)


class _Carrier:
    """An :class:`AssignmentJob` on its way to a worker, and in it until the answer is sent:
    the pool's worker (``concurrent.futures``' worker loop) drops the call it ran right after
    sending its result, and the carrier's finalizer then drops the job and collects what the
    job left (in a worker that runs its own collector: module docstring)."""

    __slots__ = ("job",)

    def __init__(self, job: AssignmentJob) -> None:
        self.job = job

    def __getstate__(self) -> AssignmentJob:
        return self.job

    def __setstate__(self, job: AssignmentJob) -> None:
        self.job = job

    def __del__(self) -> None:
        with contextlib.suppress(AttributeError):
            del self.job  # freed now (reference counting), not scanned below
        if _Worker.own_collector:
            _collect_after_job()


def _collect_after_job() -> None:
    """In a worker that runs its own collector, once a job's answer is sent: the young
    generation — all that was allocated since the last job ended, so the job's reference
    cycles — and every :data:`FULL_EVERY` jobs everything not frozen."""
    _Worker.jobs += 1
    if _Worker.jobs < FULL_EVERY:
        gc.collect(0)
    else:
        _Worker.jobs = 0
        gc.collect(2)


def _work(carrier: _Carrier) -> tuple[AssignmentOutcome, float]:
    """In a worker: run one job; also returns the CPU seconds it took (for the log)."""
    started = time.process_time()
    job = carrier.job
    assignor = _ASSIGNORS.get(job.assignor)
    if assignor is None:
        outcome = AssignmentOutcome(
            group_id=job.group_id,
            group_uid=job.group_uid,
            epoch=job.epoch,
            error=f"assignor '{job.assignor}' is not loaded in the worker",
        )
    else:
        outcome = run_job(job, assignor)
    return outcome, time.process_time() - started


def _warm_up(_n: int) -> int:
    return len(_ASSIGNORS)


class AssignorPool:
    """Worker processes running :func:`~coordinator.core.target_assignment.run_job`."""

    def __init__(
        self, assignor_names: Sequence[str], processes: int, *, own_collector: bool = True
    ) -> None:
        """``own_collector=False``: CPython's automatic collector runs in the workers instead
        (the behaviour before they ran their own; ``bench/join.py --offload`` measures both)."""
        if processes < 1:
            raise ValueError("an assignor pool needs at least one process")
        self.assignor_names = tuple(assignor_names)
        self.processes = processes
        self.own_collector = own_collector
        self._executor: ProcessPoolExecutor | None = None
        self.jobs_run = 0
        self.jobs_failed = 0

    def _pool(self) -> ProcessPoolExecutor:
        if self._executor is None:
            self._executor = ProcessPoolExecutor(
                max_workers=self.processes,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_init_worker,
                initargs=(self.assignor_names, self.own_collector),
            )
        return self._executor

    async def start(self) -> None:
        """Start the workers and wait until each has loaded the assignors. A failure is logged
        (the next job tries again with a new pool)."""
        try:
            pool = self._pool()
            loop = asyncio.get_running_loop()
            waits = [loop.run_in_executor(pool, _warm_up, i) for i in range(self.processes)]
            await asyncio.gather(*waits)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - e.g. an assignor that fails to load there
            log.warning("The assignor workers did not start: %s", exc)
            self._discard_pool()

    async def run(self, job: AssignmentJob) -> AssignmentOutcome:
        """Run ``job`` in a worker; never raises for a failure of the job or the worker."""
        try:
            future: Future[tuple[AssignmentOutcome, float]] = self._pool().submit(
                _work, _Carrier(job)
            )
            outcome, cpu_s = await asyncio.wrap_future(future)
        except BrokenProcessPool as exc:
            self._discard_pool()
            outcome, cpu_s = _failed(job, f"the assignor worker died: {exc}"), 0.0
        except Exception as exc:  # noqa: BLE001 - e.g. a job that cannot be pickled
            outcome, cpu_s = _failed(job, f"{type(exc).__name__}: {exc}"), 0.0
        self.jobs_run += 1
        if outcome.error is not None:
            self.jobs_failed += 1
        log.debug(
            "[GroupId %s] Target assignment for epoch %d computed off the loop in %.1f ms of CPU.",
            job.group_id,
            job.epoch,
            cpu_s * 1e3,
        )
        return outcome

    def _discard_pool(self) -> None:
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        """Stop the workers (jobs still running are abandoned)."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)


def _failed(job: AssignmentJob, why: str) -> AssignmentOutcome:
    return AssignmentOutcome(
        group_id=job.group_id,
        group_uid=job.group_uid,
        epoch=job.epoch,
        error=f"Failed to compute a new target assignment for epoch {job.epoch}: {why}",
    )
