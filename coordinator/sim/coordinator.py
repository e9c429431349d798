"""The coordinator of a simulation: the runtime's own driver (``coordinator/runtime/driver.py``)
on virtual time (``coordinator/virtual.py``), with a simulated store and simulated workers —
and the faults only the runtime sees.

* Requests become the very commands the server submits (``coordinator/runtime/requests.py``);
  the driver decides everything else: turns, group commit, answers after durability, parked
  requests and their completions, first targets, offloads, rollback, timers.
* The store is a real :class:`~coordinator.runtime.store.MemoryRecordStore`; a batch is
  appended with the engine's own ``append_encoded`` once its simulated fsync is over (at once;
  ``slow-fsync``: up to :attr:`SimParams.slow_fsync_max_ms`, while the next batch gathers
  behind it). ``store-fail``: the append fails, the driver rolls back and answers the batch's
  callers COORDINATOR_NOT_AVAILABLE.
* Workers compute an offloaded target at once (the inputs are copies) and report after up to
  ``offload_delay_max_ms`` (``late-offload``: up to :attr:`SimParams.late_offload_ms`, long
  after the group moved on).
* ``busy-loop``: the loop is held up (a storm elsewhere on the shard) for up to
  :attr:`SimParams.busy_max_ms`: requests arriving meanwhile are read when it runs again, after
  the shard spent its share, so they queue and run one after the other in one turn — a command
  queued behind a parked one in the same turn (the fuzz hang's shape).
* ``coordinator-restart``: a new driver loaded from the store by the runtime's loader; what was
  not durable, parked, queued or being computed is lost.
* I4: a replica of each coordinator partition, fed every durable record of it, equals the live
  shard whenever nothing is in flight.
* Several coordinator partitions (``SimParams.coordinator_partitions``): one shard each, as the
  server has, groups routed onto them by the driver (``coordinator.routing.partition_for``); a
  batch spans them. I8 (``isolation.py``): a failed write rolls back exactly the partitions with
  records in it, answers carry only durable state, acknowledged offsets survive.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from coordinator.core import codec
from coordinator.core.commands import ConsumerGroupHeartbeat, IdSource, Pending
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.errors import CoordinatorError, ErrorCode, IllegalStateError
from coordinator.core.target_assignment import AssignmentJob, run_job
from coordinator.core.topics import TopicRegistry
from coordinator.factory import Shard, new_shard
from coordinator.routing import CLUSTER_LOG, partition_for
from coordinator.runtime import requests
from coordinator.runtime.committed import CommittedCluster
from coordinator.runtime.driver import REGISTRY, Driver
from coordinator.runtime.engine import append_encoded
from coordinator.runtime.loader import load_into
from coordinator.runtime.store import MemoryRecordStore, StoreFencedError, StoreWriteError
from coordinator.virtual import VirtualClock, VirtualWorld
from legacy_bridge.messages import JoinGroup

from . import invariants as inv
from .isolation import Isolation
from .moves import PartitionMoves
from .report import diff, resp_text

Outcome = tuple[Any, ...]  # ("ok", response) or ("error", code, message)


class SimCoordinator:
    def __init__(
        self,
        sim: Any,
        *,
        config: GroupCoordinatorConfig,
        assignors: Sequence[Any],
        ids: IdSource,
        parks_joins: bool,
    ) -> None:
        self.sim = sim
        self.config = config
        self.assignors = list(assignors)
        self.ids = ids
        self.parks_joins = parks_joins
        self.clock = VirtualClock(0, manual=False)
        self.partitions = sim.p.coordinator_partitions
        self.store = MemoryRecordStore(partitions=self.partitions)
        self.gen = 0  # bumps on restart: events of an older coordinator are lost
        self.writing = False
        self.parked_joins: set[int] = set()  # parked joins (id of their note), until answered
        self.unconfirmed: list[Callable[[], None]] = []  # reads behind a write (read's lost)
        self.unanswered: list[Callable[[], None]] = []  # requests in flight (outcome unknown)
        self.replicas = [self._new_shard() for _ in range(self.partitions)]
        self.replica_registry = TopicRegistry(self.ids)
        self.isolation = Isolation(self)
        # partition-move (moves.py): the node is one of several on the store, its appends fenced
        self.moves = PartitionMoves(self) if "partition-move" in sim.p.faults else None
        self._boot()

    # ------------------------------------------------------------------ the driver

    def _new_shard(self) -> Shard:
        shard = new_shard(config=self.config, assignors=self.assignors, ids=self.ids)
        shard.groups.parks_joins = self.parks_joins  # the runtime sets it on every shard
        return shard

    def _boot(self) -> None:
        """A coordinator process: its state machines loaded from the store, its driver."""
        self.shards = [self._new_shard() for _ in range(self.partitions)]
        self.registry = TopicRegistry(self.ids)
        # The cluster log as of its last durable write, which the server's reads see
        # (committed.py); kept with several groups or partitions (a one-group run reads the
        # live topics, as it always did: its seeds replay as before).
        committed = (
            CommittedCluster(self.ids, default_num_partitions=1, config=self.config)
            if self.sim.p.multi
            else None
        )
        # Per group: the topics image version the last request that refreshes a consumer
        # group's metadata (a ConsumerGroupHeartbeat, a classic JoinGroup) ran against.
        self.metadata_asked: dict[str, int] = {}
        try:
            load_into(self.store, self.shards, self.registry, committed=committed)
        except IllegalStateError as exc:
            self.sim._fail(inv.REPLAY_EQUALS_LIVE, f"reloading the store failed: {exc}")
        finally:
            gc.unfreeze()  # the loader freezes a process's one load; a simulation reloads often
        self.world = VirtualWorld(
            self.clock, later=self.later, changed=self.changed, run_job=self.compute
        )
        p = self.sim.p
        self.driver = Driver(
            machines=[*self.shards, self.registry],
            config=self.config,
            clock=self.clock,
            host=self.world,
            workers=p.offload_min_members > 0,
            committed=committed,
            trace=self._trace,
        )
        self.world.driver = self.driver
        self.shards = self.driver.shards  # the driver's own list: a move replaces its shards
        if self.moves is not None:
            self.moves.boot(self.driver)
        self.driver.start()
        self.writing = False

    @property
    def busy(self) -> bool:
        """Is anything not yet durable, queued, or waiting to run?"""
        d = self.driver
        return bool(d.pending or d.inflight or d.turns.queued or self.world.ready)

    def later(self, delay_ms: int, callback: Callable[[], Any]) -> None:
        self._event(self.clock.now + delay_ms, "wakes up", callback)

    def _event(self, at: int, what: str, fn: Callable[[], Any]) -> None:
        self.sim._schedule(at, "coordinator", (self.gen, what, fn))

    def run(self, gen: int, what: str, fn: Callable[[], Any]) -> bool:
        """A coordinator event (False: of a coordinator that restarted since)."""
        if gen != self.gen:
            self.sim._log(f"coordinator event lost in a restart: {what}")
            return False
        fn()
        return True

    def settle(self) -> None:
        """What the loop does next at this instant: run the callbacks made ready, and write what
        is pending — at once (an fsync takes no virtual time), unless a slow fsync or a failing
        store makes it an event of its own."""
        for _ in range(10_000):  # bounded
            self.world.run_ready()
            if self.writing or not self._write_next():
                return
        raise RuntimeError("the coordinator did not settle")

    def changed(self, group_ids: Iterable[str]) -> None:
        if self.sim.p.push:
            self.sim._push()

    def _trace(self, what: str, d: dict[str, Any]) -> None:
        sim = self.sim
        events = sim.summary.events
        if what == "bug":
            if isinstance(d["error"], IllegalStateError):
                sim._fail(
                    inv.CORE_ILLEGAL_STATE, f"the core raised IllegalStateError: {d['error']}"
                )
        elif what == "unclaimed":
            sim._fail(
                inv.PARKED_ANSWERED_ONCE,
                f"the coordinator answered token {d['token']}, which no request waits for "
                f"(answered twice, or its caller was never registered): {d['response']!r}",
            )
        elif what == "timer":
            kind, _group, member = d["due"].key
            events[f"timer-{kind}"] += 1
            sim._log(f"coordinator {kind} timer fires for {member} (payload {d['due'].payload})")
        elif what == "first-target":
            res = d["result"]
            if res.offloads:
                events["first-target-offloaded"] += 1
            sim._log(
                f"coordinator: first target of {d['group_id']}: {len(res.records)} records, "
                f"{len(res.completions)} parked joins answered"
                + (", offloaded" if res.offloads else "")
            )
        elif what == "offload-started":
            events["offloaded-computation"] += 1
            job = d["job"]
            sim._log(f"coordinator: target of {job.group_id} for epoch {job.epoch} to a worker")
        elif what == "offload-done":
            outcome = d["outcome"]
            sim._log(
                f"coordinator: worker's target of {outcome.group_id} for epoch {outcome.epoch}"
            )

    # ------------------------------------------------------------------ requests

    def request(
        self,
        req: Any,
        reply: Callable[[Outcome], None],
        label: str,
        *,
        after: Callable[[Any, Any], None] | None = None,
        unknown: Callable[[], None] | None = None,
    ) -> None:
        """Submit a member's request as the server does; ``reply`` gets its answer when the
        driver releases it (never, if the coordinator restarts first). ``after(shard)`` runs
        right after the command did, with its result (what the coordinator believed when it
        ran). ``unknown()`` runs instead of ``reply`` when the coordinator restarts before the
        answer: the client never learns the outcome, and what the command wrote may have
        landed all the same (a write whose acknowledgement was late, ``partition-move``)."""
        sim = self.sim
        cmd = requests.command(req, self.clock.now)
        join = isinstance(req, ConsumerGroupHeartbeat)
        refreshes = join or isinstance(req, JoinGroup)
        parked: list[int] = []

        def run(shard: Any) -> Any:  # the command, as the server's; noting a parked answer
            if refreshes:  # a request that refreshes a consumer group's metadata (Kafka's)
                self.metadata_asked[req.group_id] = shard.topics.version
            result = cmd.fn(shard)
            if after is not None:
                after(shard, result)
            if isinstance(result.response, Pending):
                parked.append(result.response.token)
                sim.summary.events["parked-join" if join else "parked-classic"] += 1
                if join:
                    self.parked_joins.add(id(parked))
                sim._log(f"coordinator: {label} waits (token {result.response.token})")
            return result

        try:
            response, fut = self.driver.request(cmd._replace(fn=run))
        except IllegalStateError as exc:
            sim._fail(inv.CORE_ILLEGAL_STATE, f"the core raised IllegalStateError: {exc}")
            raise  # unreachable
        except CoordinatorError as exc:
            reply(_error(exc))
            return
        if fut is None:
            self.isolation.answered(req, response)
            reply(("ok", response))
            return

        def answered(f: Any) -> None:
            self.parked_joins.discard(id(parked))
            if unknown is not None:
                self.unanswered.remove(unknown)
            error = f.exception()
            if isinstance(error, IllegalStateError):
                sim._fail(inv.CORE_ILLEGAL_STATE, f"the core raised IllegalStateError: {error}")
            outcome = _error(error) if error is not None else ("ok", f.result())
            if outcome[0] == "ok":
                self.isolation.answered(req, outcome[1])
            else:
                self.isolation.refused(req.group_id, error)
            if parked:  # parked-join-answered, parked-classic-answered, parked-answered-<error>
                what = "parked-join" if join else "parked-classic"
                if outcome[0] != "ok":
                    what = f"parked-answered-{ErrorCode(outcome[1]).name}"
                sim.summary.events[what + ("-answered" if outcome[0] == "ok" else "")] += 1
                sim._log(f"coordinator: parked {label} completes -> {_text(outcome)}")
            reply(outcome)

        if unknown is not None:
            self.unanswered.append(unknown)
        fut.add_done_callback(answered)

    def read(self, group_id: str, fn: Callable[[Shard], Any], *, lost: Callable[[], None]) -> Any:
        """A stable read of ``group_id``'s live state, now (what a read_committed consumer's
        fetch right after a write sees: ``Reads.read`` with ``latest``). As the runtime's, its
        answer stands only once the writes behind it (the last outstanding batch with a change
        of the group) are durable: ``lost()`` runs if that write fails or the coordinator
        restarts first (the server answers such a fetch with an error, or never)."""
        index = self.driver.shard_index(group_id)
        try:
            response, batch = self.driver.reads.read(index, fn, (group_id,), latest=True)
        except CoordinatorError:  # its partition moved away (partition-move): no answer
            self.sim.summary.events["fetch-of-a-partition-away"] += 1
            lost()
            return None
        if batch is None:
            return response
        events = self.sim.summary.events
        check = self.isolation.stable_read(group_id, response, batch)

        def dropped() -> None:
            events["fetch-behind-a-lost-write"] += 1
            lost()

        def written(f: Any) -> None:
            if dropped in self.unconfirmed:
                self.unconfirmed.remove(dropped)
                if f.exception() is not None:
                    dropped()
                else:
                    check()

        self.unconfirmed.append(dropped)
        self.driver.wait(batch).add_done_callback(written)
        return response

    def topics(
        self,
        fn: Callable[[TopicRegistry], Any],
        *,
        deleted: Callable[[Any], Sequence[str]] | None = None,
        done: Callable[[BaseException | None], None],
    ) -> Any:
        """A topic command on the registry, now (``deleted``: it deletes topics, and their
        offsets go in the same batch, as the runtime does); ``done(error)`` once it is durable
        or failed. Returns its response."""
        driver = self.driver
        if deleted is None:
            response, batch = driver.execute(REGISTRY, fn)
        else:
            response, batch = driver.delete_topics_with(fn, deleted)
        if batch is None:
            done(None)
        else:
            driver.wait(batch).add_done_callback(lambda f: done(f.exception()))
        return response

    # ------------------------------------------------------------------ the store

    def _write_next(self) -> bool:
        """Take the next batch (if any) and write it: at once, or — ``slow-fsync``,
        ``store-fail`` — as an event. False: nothing was pending."""
        batch = self.driver.take_batch()
        if batch is None:
            return False
        sim = self.sim
        fence = None if self.moves is None else self.moves.fence_of(batch)
        delay = 0
        if sim.fault("slow-fsync"):
            sim.summary.faults["slow-fsync"] += 1
            delay = sim.rng.randint(1, sim.p.slow_fsync_max_ms)
            sim._log(f"  fault: the write of {len(batch.records)} records takes {delay} ms")
        fails = sim.fault("store-fail")
        if fails:
            sim.summary.faults["store-fail"] += 1
        if sim.p.multi:
            spans = {m for m in batch.start_marks if m != self.partitions}
            sim.summary.events["batch-of-several-partitions"] += len(spans) > 1
            if fails and not delay:  # it fails once its fsync gave up: later batches gather
                delay = sim.rng.randint(0, sim.p.slow_fsync_max_ms)
        if delay or fails:
            self.writing = True  # the next batch gathers behind this one
            self._event(
                self.clock.now + delay, "writes", lambda: self._written(batch, fails, fence)
            )
        elif self.moves is not None and self.moves.hold(batch, fence):
            self.writing = True  # a move decides when, and whether, it lands
        else:
            self._written(batch, False, fence)
        return True

    def _written(self, batch: Any, fails: bool, fence: Any = None) -> None:
        self.writing = False
        if fails:
            self.sim._log(f"  fault: the write of {len(batch.records)} records fails")
            error = StoreWriteError("injected: no space left on device")
            self._failed(batch, error)
            return
        try:
            offsets = append_encoded(self.store, batch.records, self.clock.now, fence)
        except StoreFencedError as exc:  # a lease moved on meanwhile (partition-move)
            self.sim._log(f"  the write of {len(batch.records)} records is fenced off: {exc}")
            self.sim.summary.events["write-fenced"] += 1
            self._failed(batch, exc)
            assert self.moves is not None and self.moves.parts is not None
            self.moves.parts.fenced(exc, fence)
            return
        self._replicate(batch.records)
        self._acknowledged(batch, offsets)

    def _acknowledged(self, batch: Any, offsets: dict[int, int]) -> None:
        """The store's answer that ``batch`` landed reaches the node."""
        self.writing = False
        if self.moves is None:
            self.driver.written(batch)
            return
        assert self.moves.parts is not None
        self.moves.parts.written(offsets)
        self.moves.resolving(batch, lambda: self.driver.written(batch))

    def _failed(self, batch: Any, error: BaseException) -> None:
        def fail() -> Any:
            return self.driver.write_failed(batch, error)

        if self.moves is None:
            self.isolation.write_failed(fail)
        else:
            self.isolation.write_failed(lambda: self.moves.resolving(batch, fail, failed=True))  # type: ignore[union-attr]

    def write_now(self) -> None:
        """Set-up only: write what is pending at once."""
        self.world.run_ready()
        while (batch := self.driver.take_batch()) is not None:
            self._written(batch, False, None if self.moves is None else self.moves.fence_of(batch))
            self.world.run_ready()

    def _replicate(self, records: Sequence[Any]) -> None:
        """Feed the replicas (invariant I4) every durable record, through the codec."""
        topics = False
        for rec in records:
            k, v = codec.encode(rec)
            again = codec.decode(k, v)
            if rec.group_id is None:
                self.replica_registry.replay(again)
                topics = True
            else:
                self.replica_of(rec.group_id).replay(again)
                self.isolation.durable(again)
        for replica in self.replicas:
            if topics:
                replica.set_topics(self.replica_registry.image())
            replica.release(replica.mark())
        self.replica_registry.release(self.replica_registry.mark())

    def serves(self, index: int) -> bool:
        """Does the node serve coordinator partition ``index`` now (not moved away)?"""
        return self.moves is None or self.moves.serves(index)

    def partition_of(self, group_id: str) -> int:
        """The group's coordinator partition (the driver's routing)."""
        return partition_for(group_id, self.partitions)

    def shard_of(self, group_id: str) -> Shard:
        return self.shards[self.partition_of(group_id)]

    def replica_of(self, group_id: str) -> Shard:
        return self.replicas[self.partition_of(group_id)]

    @property
    def shard(self) -> Shard:
        """The first partition's shard (a one-partition run's only one)."""
        return self.shards[0]

    @property
    def replica(self) -> Shard:
        return self.replicas[0]

    def logs(self) -> list[int]:
        return [CLUSTER_LOG, *range(self.partitions)]

    @property
    def records(self) -> int:
        return sum(self.store.last_offset(log) + 1 for log in self.logs())

    def journal(self) -> list[tuple[bytes, bytes | None]]:
        """Every record written, encoded: the cluster log's, then each partition's."""
        return [(e.key, e.value) for log in self.logs() for e in self.store.journal(log)]

    # ------------------------------------------------------------------ workers

    def compute(self, index: int, group_id: str, job: AssignmentJob) -> None:
        """A worker computes ``job`` (at once: the inputs are copies) and reports later."""
        sim = self.sim
        assignor = next(a for a in self.assignors if a.name == job.assignor)
        outcome = run_job(job, assignor)
        delay = sim.rng.randint(0, sim.p.offload_delay_max_ms)
        if sim.fault("late-offload"):
            sim.summary.faults["late-offload"] += 1
            delay = sim.rng.randint(delay, sim.p.late_offload_ms)
            sim._log(f"  fault: the worker's target of {group_id} comes back in {delay} ms")
        self._event(
            self.clock.now + delay,
            "worker",
            lambda: self.driver.own.job_done(index, group_id, outcome),
        )

    # ------------------------------------------------------------------ restarts

    def restart(self) -> None:
        """Reload from the store through the codec; everything in flight is lost."""
        sim = self.sim
        durable = [replica.snapshot() for replica in self.replicas]
        sim.summary.events["parked-join-dropped-by-restart"] += len(self.parked_joins)
        self.parked_joins.clear()
        unconfirmed, self.unconfirmed = self.unconfirmed, []
        for lost in unconfirmed:
            lost()
        unanswered, self.unanswered = self.unanswered, []
        for unknown in unanswered:
            unknown()
        self.gen += 1
        self._boot()
        sim._log(f"fault: coordinator restarts; reloaded {self.records} records")
        for index, shard in enumerate(self.shards):
            after = shard.snapshot()
            if after != durable[index]:
                sim._fail(
                    inv.REPLAY_EQUALS_LIVE,
                    f"state of coordinator partition {index} reloaded from the store differs "
                    "from its durable state before the restart:\n" + diff(durable[index], after),
                )
        self.isolation.acknowledged_survive("a coordinator restart")


def _error(exc: BaseException) -> Outcome:
    if isinstance(exc, CoordinatorError):
        return ("error", int(exc.code), exc.message)
    raise exc


def _text(outcome: Outcome) -> str:
    if outcome[0] == "ok":
        return resp_text(outcome[1])
    return f"{ErrorCode(outcome[1]).name}: {outcome[2]}"
