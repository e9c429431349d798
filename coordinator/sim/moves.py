"""``partition-move``: a coordinator partition taken away from the node serving it while work
is in flight, and given back at a newer leader epoch — through the runtime's own code paths for
several nodes on one store (``coordinator/runtime/partitions.py``, docs/ha.md).

With the fault on, the simulated coordinator is a node among several: its driver gets the
runtime's :class:`~coordinator.runtime.partitions.Partitions` (node :data:`NODE`), every
partition's lease is in the shared store's lease table (``MemoryRecordStore.set_leader``) and
every batch is appended under the leader epochs the node holds (``Partitions.fence_of``),
refused by the store when a lease moved on (``StoreFencedError``, then ``Partitions.fenced``).
A move, at a random moment (a random stream of its own, so the other faults' draws stay
where they were), one at a time:

1. **begins**: the partition is chosen; the next batch the writer takes with records (or timer
   operations) of it — every other move, the next such batch with a timer's firing in it — is
   *held*: written by no one until the drop decides its fate;
2. **drop**, up to :data:`HOLD_MAX_MS` (:data:`FIRING_HOLD_MAX_MS` when waiting for a firing)
   later (its lease ran out, or it was handed over):
   ``Partitions.lose_partition`` — its parked requests and those waiting for a write holding
   their records answered NOT_COORDINATOR, its timers purged, an empty shard in its place.
   The held batch then either *lands* now, before the take (PostgreSQL's take of the lease
   waits for the append holding its row), its acknowledgement reaching the node late — before
   this node loads the partition again, or after — or it is *fenced*: attempted only after the
   take, refused by the store, the node learning it late;
3. **take**, up to :data:`TAKE_MAX_MS` after the drop: another node (:data:`OTHER`) takes the
   lease at the next epoch (it serves nothing here: the node never writes), or this node takes
   the partition again at once;
4. **retake**: this node takes the lease at the next epoch up to :data:`GAP_MAX_MS` later (the
   partition *loading*: COORDINATOR_LOAD_IN_PROGRESS), and **loads** it up to
   :data:`LOAD_MAX_MS` later: its log read by the runtime's loader into a fresh shard,
   installed by ``Partitions.install`` (the members' timers armed anew, Kafka's onLoaded).

The new tenure is served by the same node: the hard case, where the old tenure's late answers
and timers reach the node that serves the new one. Requests in flight to the node while the
partition is away get NOT_COORDINATOR (or COORDINATOR_LOAD_IN_PROGRESS while it loads); the
clients rediscover it as Kafka's do (FindCoordinator, which names this node again, then a
retry after their back-off). Invariant I4 follows the epochs: a replica is fed what the store
holds (a fenced batch never counts; one that landed counts from the moment it landed) and the
loaded shard must equal it; while the partition is away it is not compared. The new tenure's
timers are its load's: the answer (success or failure) of a write that was in flight when a
partition was dropped must leave that partition's timers as they were (:meth:`resolving`).

What the model concedes to a move, as Kafka's clients and coordinator behave: a commit answered
NOT_COORDINATOR after it ran may have landed all the same (its offsets are no longer asserted
as the committed ones), and so may one whose write landed, its acknowledgement late, when the
coordinator restarts before answering it (the offsets the store holds of it); a group away is not a group re-created (its classic members' claims
stay theirs); a committed read is not judged against the store while a write that landed has
not been answered yet (the node's committed state is behind the store, not wrong).
"""

from __future__ import annotations

import random
from functools import partial
from typing import Any

from coordinator.core.errors import IllegalStateError
from coordinator.routing import partition_for
from coordinator.runtime.engine import append_encoded
from coordinator.runtime.leadership import PartitionState
from coordinator.runtime.loader import load_partition
from coordinator.runtime.partitions import Partitions
from coordinator.runtime.store import StoreFencedError
from coordinator.runtime.timing import EXPIRE_OFFSETS

from . import invariants as inv
from .report import diff

MOVE_RATE = 0.02
"""Chance per step that a partition move begins (its own random stream)."""
HOLD_MAX_MS = 1_000
FIRING_HOLD_MAX_MS = 10_000
TAKE_MAX_MS = 500
GAP_MAX_MS = 3_000
LOAD_MAX_MS = 500
LATE_ACK_MAX_MS = 3_000
NODE, OTHER = 1, 2
FATES = ("landed, answered before the load", "landed, answered after the load", "fenced")


def unavailable_ms() -> int:
    """How long a move keeps a partition away, and the writer held, at most (liveness)."""
    return (
        max(HOLD_MAX_MS, FIRING_HOLD_MAX_MS)
        + TAKE_MAX_MS
        + GAP_MAX_MS
        + LOAD_MAX_MS
        + LATE_ACK_MAX_MS
    )


class _NoWatchers:
    """The simulator's push streams are its own (``Simulation._push``): nothing to end here."""

    def groups(self) -> list[str]:
        return []

    def notify(self, _groups: Any) -> None:
        return None


class _Inline:
    """The writer's executor (only the cluster log's catch-up uses it: no other node writes
    the cluster log here)."""

    def submit(self, fn: Any, *args: Any) -> None:
        fn(*args)


class PartitionMoves:
    def __init__(self, coord: Any) -> None:
        self.coord = coord
        self.sim = coord.sim
        self.rng = random.Random(f"{self.sim.p.seed}-partition-move")
        self.epochs = [0] * coord.partitions  # each lease's epoch in the store
        self.parts: Partitions | None = None
        self.moving: int | None = None  # the partition of the move under way
        self.holding = False  # the next write with records of it is held
        self.firing = False  # only one with a timer's firing in it
        self.held: tuple[Any, Any] | None = None  # (batch, fence) held
        # batches outstanding when a partition was dropped, each with the partitions dropped
        self.old: list[tuple[Any, set[int]]] = []
        self.landed: list[Any] = []  # batches landed in the store, their answer not yet back

    # ------------------------------------------------------------------ the node

    def boot(self, driver: Any) -> None:
        """A (re)started node: it takes every lease at the next epoch and serves."""
        coord = self.coord
        parts = Partitions(driver, coord.store, _NoWatchers(), _Inline(), NODE, coord._new_shard)  # type: ignore[arg-type]
        for i in range(coord.partitions):
            self.epochs[i] += 1
            coord.store.set_leader(i, NODE, self.epochs[i])
            parts.lead.set(i, PartitionState.SERVING, self.epochs[i])
        parts.joined()
        self.parts = parts
        self.moving, self.holding, self.held = None, False, None
        self.old, self.landed = [], []

    def serves(self, index: int) -> bool:
        assert self.parts is not None
        return self.parts.lead.serving(index)

    def fence_of(self, batch: Any) -> Any:
        assert self.parts is not None
        return self.parts.fence_of(batch)

    # ------------------------------------------------------------------ a move

    def maybe_begin(self) -> None:
        """After a step while faults are on: a move begins at a random moment, sometimes."""
        rng = self.rng
        if rng.random() >= MOVE_RATE:
            return
        at = self.sim.now + rng.randint(0, self.sim.p.heartbeat_interval_ms)
        self.coord._event(at, "partition move", self.begin)

    def begin(self) -> None:
        sim = self.sim
        if not sim.faults_on or self.moving is not None:
            return
        served = [i for i in range(self.coord.partitions) if self.serves(i)]
        if not served:
            return
        p = self.rng.choice(served)
        sim.summary.faults["partition-move"] += 1
        self.moving, self.holding = p, True
        self.firing = self.rng.random() < 0.5
        delay = self.rng.randint(1, FIRING_HOLD_MAX_MS if self.firing else HOLD_MAX_MS)
        sim._log(
            f"fault: coordinator partition {p} moves in {delay} ms (its next write"
            + (" with a timer's firing" if self.firing else "")
            + " held)"
        )
        self.coord._event(sim.now + delay, f"partition {p} dropped", partial(self.drop, p))

    def hold(self, batch: Any, fence: Any) -> bool:
        """The writer took ``batch``: held (True) while a move of a partition with records or
        timer operations in it begins."""
        p = self.moving
        if not self.holding or self.held is not None or p is None:
            return False
        if p not in batch.start_marks and not batch.timer_ops.get(p):
            return False
        if self.firing and not _fired(batch):
            return False  # waits for a batch with a timer's firing
        self.held = (batch, fence)
        self.sim.summary.events["partition-move-write-held"] += 1
        self.sim._log(f"  the write of {len(batch.records)} records is held (partition {p} moves)")
        return True

    def drop(self, p: int) -> None:
        coord, sim, rng = self.coord, self.sim, self.rng
        parts = self.parts
        assert parts is not None
        self.holding = False
        inflight = coord.driver.inflight  # the writer's (the next one may gather the new tenure's)
        if inflight is not None:
            self._old(inflight).add(p)
        parts.lose_partition(p)
        sim.summary.events["partition-dropped"] += 1
        sim._log(f"coordinator partition {p} dropped at epoch {self.epochs[p]}")
        now = sim.now
        take = now + rng.randint(0, TAKE_MAX_MS)
        other = rng.random() < 0.5
        retake = take + (rng.randint(0, GAP_MAX_MS) if other else 0)
        loaded = retake + rng.randint(0, LOAD_MAX_MS)
        coord._event(take, f"partition {p} taken", partial(self.take, p, other))
        if other:
            coord._event(retake, f"partition {p} taken back", partial(self.take, p, False))
        held, self.held = self.held, None
        if held is not None:
            batch, fence = held
            fate = rng.choice(FATES)
            offsets = None
            if fate != "fenced":  # PostgreSQL's take waits for it: it lands first, answered late
                try:
                    offsets = append_encoded(coord.store, batch.records, now, fence)
                except StoreFencedError:  # fenced already (records of an earlier tenure in it)
                    fate = "fenced"
            sim.summary.events[f"partition-move-write-{fate.split(',')[0]}"] += 1
            if offsets is None:  # attempted once the lease moved on: refused
                at = take + rng.randint(0, LATE_ACK_MAX_MS + (loaded - take))
                coord._event(at, "held write", partial(coord._written, batch, False, fence))
            else:
                coord._replicate(batch.records)
                self.landed.append(batch)
                at = (
                    rng.randint(now, loaded - 1)
                    if fate.endswith("before the load") and loaded > now
                    else loaded + rng.randint(0, LATE_ACK_MAX_MS)
                )
                coord._event(
                    at, "held write answered", partial(coord._acknowledged, batch, offsets)
                )
            sim._log(f"  the held write of {len(batch.records)} records: {fate}")
        coord._event(loaded, f"partition {p} loaded", partial(self.load, p))

    def under_way(self) -> bool:
        """Is a move still playing out: its partition not loaded again yet, or a write it held
        or left outstanding not answered yet? A move begun before the faults stop goes on after
        (it may wait up to :data:`FIRING_HOLD_MAX_MS` for a write to hold, then drop the
        partition): a fault's follow-up, which convergence (invariant I5) waits for."""
        return self.moving is not None or bool(self.landed) or bool(self.old)

    def behind(self) -> bool:
        """Is the node's committed state behind the store (a batch landed, its answer not
        back yet)? Its committed reads answer what it knows to be durable: not judged against
        the store meanwhile."""
        return bool(self.landed)

    def _old(self, batch: Any) -> set[int]:
        for b, dropped in self.old:
            if b is batch:
                return dropped
        self.old.append((batch, set()))
        return self.old[-1][1]

    def resolving(self, batch: Any, resolve: Any, *, failed: bool = False) -> Any:
        """``resolve()`` settles ``batch`` (its answer reaches the node). When partitions were
        dropped while it was outstanding, that answer must leave their timers as they are: the
        timer operations in it were the dropped state machines' (invariant I4: the new tenure's
        state, timers included, is what its load gives it). A failure that also fails a later
        batch, which may hold the new tenure's timer operations (they come back as a failed
        write leaves them), is judged on the timers fired in ``batch`` only (a failed firing is
        retried, but not into a new tenure), those the later one touches or fires aside."""
        self.landed = [b for b in self.landed if b is not batch]
        dropped: set[int] = set()
        for i, (b, ps) in enumerate(self.old):
            if b is batch:
                dropped = ps
                del self.old[i]
                break
        if not dropped:
            return resolve()
        later = self.coord.driver.pending if failed else None
        keys = None
        if later is not None:
            keys = (
                _fired(batch)
                - _fired(later)
                - {op.key for ops in later.timer_ops.values() for op in ops}
            )
        before = {p: self.timers_of(p, keys) for p in dropped}
        out = resolve()
        for p in sorted(dropped):
            after = self.timers_of(p, keys)
            if after != before[p]:
                self.sim._fail(
                    inv.REPLAY_EQUALS_LIVE,
                    f"the {'failure' if failed else 'success'} of a write outstanding when "
                    f"coordinator partition {p} was dropped, known after the drop, changed the "
                    f"partition's timers (now epoch {self.epochs[p]}, "
                    f"{'served' if self.serves(p) else 'not served'}): "
                    f"{sorted(before[p].items())} -> {sorted(after.items())}",
                )
        self.sim.summary.events["old-tenure-write-resolved-after-drop"] += 1
        return out

    def timers_of(self, p: int, keys: set[Any] | None = None) -> dict[Any, Any]:
        """Partition ``p``'s timers (only ``keys``, if given): key -> (deadline, payload)."""
        table = self.coord.driver.timers
        n = self.coord.partitions
        return {
            k: table.get(k)
            for k in (table.keys() if keys is None else [k for k in keys if table.get(k)])
            if (int(k[2]) if k[0] == EXPIRE_OFFSETS else partition_for(k[1], n)) == p
        }

    def take(self, p: int, other: bool) -> None:
        """A node takes ``p``'s lease at the next epoch: another one, or this one (loading)."""
        self.epochs[p] += 1
        epoch = self.epochs[p]
        self.coord.store.set_leader(p, OTHER if other else NODE, epoch)
        if not other:
            assert self.parts is not None
            self.parts.lead.set(p, PartitionState.LOADING, epoch)
        self.sim._log(
            f"node {OTHER if other else NODE} takes coordinator partition {p} at epoch {epoch}"
        )

    def load(self, p: int) -> None:
        coord, sim = self.coord, self.sim
        parts = self.parts
        assert parts is not None
        shard = coord._new_shard()
        try:
            stats = load_partition(coord.store, p, shard)
        except IllegalStateError as exc:
            sim._fail(inv.REPLAY_EQUALS_LIVE, f"loading partition {p} failed: {exc}")
            raise  # unreachable
        if not parts.install(p, self.epochs[p], shard, stats):
            return
        self.moving = None
        sim.summary.events["partition-loaded"] += 1
        sim._log(
            f"coordinator partition {p} loaded at epoch {self.epochs[p]}: {stats.records} records"
        )
        durable = coord.replicas[p].snapshot()
        if shard.snapshot() != durable:
            sim._fail(
                inv.REPLAY_EQUALS_LIVE,
                f"coordinator partition {p} loaded at epoch {self.epochs[p]} differs from its "
                "durable state (every record the store holds of it):\n"
                + diff(durable, shard.snapshot()),
            )
        for g in sim.groups:  # generations never written are unknown to the new tenure
            if coord.partition_of(g.gid) == p:
                forgotten = inv.note_restart(coord.replicas[p], g.gid, sim.clients_of(g))
                if forgotten:
                    sim.summary.events["generation-forgotten-by-move"] += len(forgotten)


def _fired(batch: Any) -> set[Any]:
    """The keys of the timers whose firings' commands are in ``batch`` (each retried if the
    batch fails: ``Timers._retry_if_failed`` waits on it)."""
    return {
        fn.args[0].key
        for fn in batch.then
        if isinstance(fn, partial) and getattr(fn.func, "__name__", "") == "_retry_if_failed"
    }
