"""The driver's timers: one table in timer time, deferral while a touched key is not durable,
retries, the periodic offset expiration, and the stall watch. Sans-IO, like the driver that
composes it (``driver.py``): wake-ups are the host's ``call_later``.

* The table holds deadlines in *timer time* (``clock.monotonic_ms``: Kafka's timers are delays
  on a monotonic clock), so a wall-clock step neither fires a timeout early nor delays it. The
  core arms timers in wall time (``now_ms + timeout``); :meth:`Timers.convert` turns a
  command's operations into timer time right after the command ran, with the same clock
  reading (``clock.py``).
* A command's operations apply once its batch is durable (:meth:`Timers.touch` then
  :meth:`Timers.settle`); a timer that falls due while a not-yet-durable command touched its
  key is *deferred* until that batch resolves: applied operations supersede it, a failed batch
  puts it back.
* A state machine replaced while a batch still holds its commands' operations (its partition
  dropped, or taken again and loaded: ``partitions.py``) takes them out of the batch
  (:meth:`Timers.forget`): they were the old machine's, and apply neither when the batch is
  durable (it may land after a newer tenure loaded the partition and armed its own timers,
  Kafka's onLoaded) nor when it fails. The new state machine arms what its state needs.
* A timer whose command or write failed fires again :data:`TIMER_RETRY_MS` later, unless its
  key was armed again meanwhile, or its partition's state machine was replaced since it fired
  (a write of the old one failing after the partition was taken again: not the new one's).
* :data:`EXPIRE_OFFSETS`: every ``offsets.retention.check.interval.ms`` each shard expires
  offsets; the next run is armed before this one runs.
* Stall watch (the engine, system clock): a loop that did not run for more than
  :data:`STALL_GRACE_MS` moves every deadline by the time it was away.
* With a manual clock nothing fires on its own: the host fires due timers (:meth:`Timers.fire`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial
from typing import Any

from coordinator.core.commands import Result
from coordinator.core.errors import CoordinatorError
from coordinator.core.events import Event
from coordinator.core.timers import ArmTimer, DueTimer, TimerOp, TimerTable
from coordinator.routing import partition_for

log = logging.getLogger("kip848.runtime")

FIRE_PER_WAKEUP = 512
"""Timers fired by one wake-up of the loop at most; more due ones fire in the next loop step,
after the I/O and callbacks waiting meanwhile: a storm of expiries (a hundred thousand sessions
at once after clients lost their network) never holds the loop for seconds (a node among
several would miss its lease renewals: docs/ha.md)."""
FIRE_BUDGET_MS = 20
"""...and for this long at most (timer time): a session expiry that rebalances a big group
costs milliseconds, so 512 of them on a busy machine held a node's loop for 2 s at a time
(bench/cluster.py, 100,000 groups whose members all expired)."""

TIMER_RETRY_MS = 500
"""A timer whose command or write failed fires again this much later (Kafka: 500 ms)."""
PURGE_KEYS = 2048
"""Timer keys one loop step of a purge looks at (:meth:`Timers.drop_partition`): a node of a
million timers drops a partition's share of them a few milliseconds a step, not in one pass of
half a second or more."""
STALL_TICK_MS = 500
"""How often the driver checks that it is running on time (``stall_watch``)."""
STALL_GRACE_MS = 1000
"""Lateness beyond which the coordinator counts itself as having been away."""
EXPIRE_OFFSETS = "expire-offsets"
"""Timer kind of the periodic offset expiration; one timer per shard, keyed
``(EXPIRE_OFFSETS, "", str(shard_index))``."""


class Timers:
    """The timers of one driver (see the module docstring)."""

    def __init__(self, driver: Any, *, stall_watch: bool) -> None:
        """``driver``: the :class:`~.driver.Driver` that composes these timers (its clock,
        host, config, observer and stats; timers fire through its ``execute``)."""
        self._driver = driver
        self._clock = driver.clock
        self.stall_watch = stall_watch
        self.table = TimerTable()
        self._pending_keys: dict[Any, int] = {}  # timer key -> ops not yet durable
        self._deferred: dict[Any, DueTimer] = {}
        self._dropped: set[int] = set()  # partitions whose timers the next purge pass drops
        self._purging: _Purge | None = None  # the pass under way
        self._purge_soon = False  # a purge step is scheduled
        self._handle: Any = None
        self._at_ms: int | None = None  # timer time the wake-up is set for
        self._tick_handle: Any = None
        self._tick_due_ms = 0

    def start(self, shards: Sequence[Any]) -> None:
        """Loaded: re-arm the served shards' timers and the periodic offset expiration."""
        lead = self._driver.lead
        for i, shard in enumerate(shards):
            if lead.serving(i):
                self.arm_partition(i, shard)
        self._tick()
        self._reschedule()

    def arm_partition(self, index: int, shard: Any) -> None:
        """A partition loaded (Kafka's onLoaded): its members' timers and its offset
        expiration (the timers of its previous time here dropped first)."""
        self._purge()
        ops = shard.on_loaded(self._clock.now_ms())
        # Tens of thousands of timers (a member's session each): moved into timer time as they
        # are armed, none rebuilt (convert), a fifth of a partition's load at 2,000 groups.
        self.apply(ops, later_ms=0 if self._clock.manual else self._clock.timer_deadline(0))
        self.apply([self._expiration(index, self._clock.monotonic_ms())])

    def drop_partition(self, index: int) -> None:
        """A partition no longer served here: none of its timers fires (their deferred
        firings neither). The table is purged from the next loop step on, a pass over its keys
        :data:`PURGE_KEYS` a step (the partition of each group once), for every partition
        dropped before the pass began (a node losing all its partitions at once: one pass over
        a table of a million timers, not one per partition). Until then a due timer of the
        partition does nothing (its command is refused: the partition is not served); a
        partition loaded again finishes the purge first (:meth:`arm_partition`)."""
        self._dropped.add(index)
        if not self._purge_soon:
            self._purge_soon = True
            self._driver.host.call_soon(self._purge_step)

    def _purge_step(self) -> None:
        self._purge_soon = False
        if self._purge(PURGE_KEYS):
            self._purge_soon = True
            self._driver.host.call_soon(self._purge_step)

    def _purge(self, budget: int | None = None) -> bool:
        """Go on purging the dropped partitions' timers, ``budget`` keys at most (None: to
        the end). Returns whether some are left to look at."""
        table = self.table
        while True:
            p = self._purging
            if p is None:
                if not self._dropped:
                    return False
                p = self._purging = _Purge(self._dropped, table.key_list())
                self._dropped = set()
                table.cancel(p.expirations)
            end = len(p.keys) if budget is None else min(len(p.keys), p.at + budget)
            if budget is not None:
                budget -= end - p.at
            table.cancel(p.doomed(self._driver.shard_count, end))
            if p.at < len(p.keys):
                return True
            n, deferred = self._driver.shard_count, self._deferred
            for key in [k for k in deferred if k in p.expirations or p.of_dropped(k[1], n)]:
                if key[0] != EXPIRE_OFFSETS or key in p.expirations:
                    del deferred[key]
            self._purging = None
            if budget is not None and budget <= 0:
                return bool(self._dropped)

    def stop(self) -> None:
        for handle in (self._handle, self._tick_handle):
            if handle is not None:
                handle.cancel()
        self._handle = self._tick_handle = None

    # ------------------------------------------------------------------ operations

    def convert(self, ops: list[TimerOp]) -> list[TimerOp]:
        """A command's timer operations with their deadlines in timer time."""
        if self._clock.manual:
            return ops  # one time for everything
        to = self._clock.timer_deadline
        return [
            ArmTimer(op.key, to(op.deadline_ms), op.payload) if type(op) is ArmTimer else op
            for op in ops
        ]

    def apply(self, ops: list[TimerOp], later_ms: int = 0) -> None:
        """Apply operations in timer time (``later_ms``: how much later than they say)."""
        self.table.apply(ops, later_ms)
        at = self._at_ms
        if at is not None:
            at -= later_ms
        for op in ops:
            if type(op) is ArmTimer and (at is None or op.deadline_ms < at):
                self._reschedule()
                return

    def touch(self, ops: Sequence[TimerOp], held: list[TimerOp]) -> None:
        """These operations wait for their batch (``held``: its list of their state
        machine's): their keys' firings wait too."""
        held.extend(ops)
        pk = self._pending_keys
        for op in ops:
            pk[op.key] = pk.get(op.key, 0) + 1

    def settle(self, held: dict[int, list[TimerOp]], *, durable: bool) -> None:
        """The batch of these (touched) operations, by state machine, is resolved;
        ``durable``: they applied."""
        ops = [op for machine_ops in held.values() for op in machine_ops]
        if durable:
            self.apply(ops)
        pk = self._pending_keys
        for op in ops:
            key = op.key
            left = pk.get(key, 0) - 1
            if left > 0:
                pk[key] = left
                continue
            pk.pop(key, None)
            due = self._deferred.pop(key, None)
            if due is not None and not durable and self.table.get(key) is None:
                # The command that touched the key is gone: the timer it deferred comes back.
                self.apply([ArmTimer(key, due.deadline_ms, due.payload)])

    def forget(self, index: int, *batches: Any) -> None:
        """State machine ``index`` was replaced: the operations its commands left in
        ``batches`` (the outstanding ones; None: no batch) never apply, nor hold its keys'
        firings; a firing they deferred is dropped (the machine that armed it is gone)."""
        pk, deferred = self._pending_keys, self._deferred
        for batch in batches:
            ops = None if batch is None else batch.timer_ops.pop(index, None)
            for op in ops or ():
                left = pk.get(op.key, 0) - 1
                if left > 0:
                    pk[op.key] = left
                else:
                    pk.pop(op.key, None)
                    deferred.pop(op.key, None)

    def deferred(self, key: Any) -> bool:
        """Is a firing of ``key`` deferred until a command that touched it is durable?"""
        return key in self._deferred

    # ------------------------------------------------------------------ firing

    def _reschedule(self) -> None:
        driver = self._driver
        if self._clock.manual or not driver.active:
            return
        deadline = self.table.next_deadline()
        if self._handle is not None:
            if deadline == self._at_ms:
                return
            self._handle.cancel()
            self._handle = None
        self._at_ms = deadline
        if deadline is None:
            return
        delay = max(0, deadline - self._clock.monotonic_ms())
        self._handle = driver.host.call_later(delay, self.on_due)

    def on_due(self) -> None:
        """The host's wake-up: fire what is due (first granting the time the coordinator was
        away, if it was)."""
        self._handle = None
        self._at_ms = None
        if not self._driver.active:
            return
        due_at = self._clock.monotonic_ms()
        if self._check_stall(due_at):
            self._reschedule()  # the deadlines moved: nothing may be due any more
            return
        now = self._clock.now_ms()
        clock, until = self._clock.monotonic_ms, due_at + FIRE_BUDGET_MS
        for _ in range(FIRE_PER_WAKEUP):  # the rest fire on the next wake-up, at once
            due = self.table.pop_due(due_at)
            if due is None:
                break
            self.fire(due, now)
            if clock() >= until:
                break
        self._reschedule()

    def fire(self, due: DueTimer, now_ms: int) -> Any:
        """Fire one timer (taken from the table) as a command; returns the batch it waits for."""
        if self._pending_keys.get(due.key):
            self._deferred[due.key] = due  # a not-yet-durable command touched this key
            return None
        driver = self._driver
        kind, group_id, _member = due.key
        if kind == EXPIRE_OFFSETS:
            return self._fire_expiration(due, now_ms)
        index = partition_for(group_id, driver.shard_count)
        if not driver.lead.serving(index):
            return None  # moved away (its timers are being dropped): its new leader's now
        driver.stats["timers_fired"] += 1
        if driver.trace is not None:
            driver.trace("timer", {"due": due})
        if driver.observer is not None:  # how late, in timer time (the deadline's clock)
            late_ms = self._clock.monotonic_ms() - due.deadline_ms
            driver.observer.timer_fired(kind, index, late_ms / 1000)
        try:
            _resp, batch = driver.execute(index, lambda s: s.on_timer(due, now_ms), group=group_id)
        except CoordinatorError as exc:
            log.warning("Timer %s failed: %s", due.key, exc.message)
            self._retry(due)
            return None
        except Exception:  # noqa: BLE001 - logged by execute; a timer must not kill the loop
            return None
        if batch is not None:
            batch.then.append(partial(self._retry_if_failed, due, driver.shards[index]))
        return batch

    def _retry_if_failed(self, due: DueTimer, machine: Any, error: BaseException | None) -> None:
        """The write of ``due``'s firing on ``machine`` (its partition's state machine then)
        resolved. Failed, it is retried, unless the partition's state machine was replaced
        meanwhile (dropped, perhaps taken again and loaded at a newer epoch): the timer was
        the old one's, and the new one armed what its state needs (Kafka's onLoaded)."""
        index = partition_for(due.key[1], self._driver.shard_count)
        if error is not None and self._driver.shards[index] is machine:
            self._retry(due)

    def _retry(self, due: DueTimer) -> None:
        """A timer whose command or write failed (e.g. the disk is full) fires again after
        TIMER_RETRY_MS, as Kafka retries failed timer writes — unless the key was armed again
        meanwhile. The rollback restored the state the timer acts on."""
        kind, group_id, member = due.key
        index = int(member) if kind == EXPIRE_OFFSETS else None
        if index is None:
            index = partition_for(group_id, self._driver.shard_count)
        if not self._driver.lead.serving(index):
            return  # moved away: its new leader runs its timers
        if self._driver.active and self.table.get(due.key) is None:
            retry_at = self._clock.monotonic_ms() + TIMER_RETRY_MS
            self.apply([ArmTimer(due.key, retry_at, due.payload)])

    def _expiration(self, index: int, now_ms: int) -> ArmTimer:
        """``now_ms`` in timer time (clock.monotonic_ms)."""
        return ArmTimer(
            (EXPIRE_OFFSETS, "", str(index)),
            now_ms + self._driver.config.offsets_retention_check_interval_ms,
        )

    def _fire_expiration(self, due: DueTimer, now_ms: int) -> Any:
        """``offsets.retention.check.interval.ms`` elapsed on one shard: expire offsets, delete
        empty groups left without offsets. The next run is armed first, straight into the
        table: the schedule is not state, and a failed run or write must not end the cleanup."""
        driver = self._driver
        index = int(due.key[2])
        if not driver.lead.serving(index):
            return None  # moved away: its new leader expires its offsets
        self.apply([self._expiration(index, self._clock.monotonic_ms())])
        driver.stats["timers_fired"] += 1
        try:
            # What expired and which groups went is logged from the result's events once durable.
            expired, batch = driver.execute(index, lambda s: _expire(s, now_ms))
        except CoordinatorError as exc:
            log.warning("Offset expiration on shard %d failed: %s", index, exc.message)
            return None
        except Exception:  # noqa: BLE001 - logged by execute; a timer must not kill the loop
            return None
        if driver.observer is not None:
            driver.observer.offsets_expired(expired)
        return batch

    # ------------------------------------------------------------------ the stall watch

    def _tick(self) -> None:
        """Every STALL_TICK_MS (``stall_watch``): notice when the coordinator did not run."""
        self._tick_handle = None
        if not self.stall_watch or self._clock.manual or not self._driver.active:
            return
        now = self._clock.monotonic_ms()
        if self._tick_due_ms:
            self._check_stall(now)
        self._tick_due_ms = now + STALL_TICK_MS
        self._tick_handle = self._driver.host.call_later(STALL_TICK_MS, self._tick)

    def tick(self) -> None:
        """Run the stall watch's check now (what the loop runs when the process resumes)."""
        if self._tick_handle is not None:
            self._tick_handle.cancel()
        self._tick()

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
        moved = self.table.shift(away)
        for key, due in self._deferred.items():  # deferred firings keep their place too
            self._deferred[key] = DueTimer(due.key, due.deadline_ms + away, due.payload)
        log.warning(
            "The coordinator did not run for %.1f s (stopped, suspended or blocked): every "
            "timer deadline (%d timers) is extended by that long, so no member is fenced for "
            "the coordinator's absence.",
            away / 1000,
            moved,
        )
        return True


def _expire(shard: Any, now_ms: int) -> Result[int]:
    """The core's expiration, answering how many offsets it expired (for the metrics)."""
    result: Result[Any] = shard.expire_offsets(now_ms)
    result.response = sum(
        int(e.fields["count"]) for e in result.events if e.event is Event.OFFSETS_EXPIRED
    )
    return result


class _Purge:
    """One pass of a purge over the timer table (``Timers.drop_partition``): the keys when it
    began, looked at in order, the timers of the ``dropped`` partitions cancelled."""

    __slots__ = ("at", "dropped", "expirations", "groups", "keys")

    def __init__(self, dropped: set[int], keys: list[Any]) -> None:
        self.dropped = dropped
        self.keys = keys
        self.at = 0
        self.groups: dict[str, bool] = {}  # group id -> in a dropped partition
        self.expirations = {(EXPIRE_OFFSETS, "", str(i)) for i in dropped}

    def of_dropped(self, group_id: str, partitions: int) -> bool:
        """Whether ``group_id`` is of a dropped partition (each group hashed once)."""
        doomed = self.groups.get(group_id)
        if doomed is None:
            doomed = self.groups[group_id] = partition_for(group_id, partitions) in self.dropped
        return doomed

    def doomed(self, partitions: int, end: int) -> list[Any]:
        """The keys up to ``end`` of the dropped partitions' groups (offset expirations
        apart: theirs are keyed by partition)."""
        of_dropped = self.of_dropped
        keys = self.keys[self.at : end]
        self.at = end
        return [k for k in keys if k[0] != EXPIRE_OFFSETS and of_dropped(k[1], partitions)]
