"""A workload generator: drives the real runtime in-process to write a realistic store.

``kip848 analytics generate --data-dir DIR --seed N`` builds a :class:`CoordinatorRuntime` on a
:class:`SqliteRecordStore` with a :class:`ManualClock` and plays clients against it
(:mod:`.clients`): KIP-848 consumers (dynamic and static) and classic consumers
(JoinGroup/SyncGroup/Heartbeat; eager with the range assignor or cooperative with
cooperative-sticky, the leader assigning), and what happens to them over time — joins, leaves,
rolling restarts, static bounces, crashes fenced by the session timeout, slow members fenced by
the rebalance timeout, subscription changes, classic groups that stay classic, classic groups
upgraded by a joining consumer (their classic members replaced by consumers as they restart)
and downgraded again when the consumers leave. Consumers commit their progress every
``auto.commit.interval`` (5 s) and before they give partitions up.

Everything runs on virtual time: an event queue of client actions; between two actions the
clock advances to the earlier of the next action and the next coordinator timer, so session and
rebalance timers fire at their deadlines and record timestamps follow virtual time. The same
seed and options always give the same store, record for record (ids come from the seed too).

:class:`Driver` is the engine (also used directly by tests for exact scenarios); :func:`generate`
builds a random scenario per group from the seed.
"""

from __future__ import annotations

import asyncio
import base64
import heapq
import itertools
import random
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.topics import NewTopic

from .clients import COOPERATIVE_STICKY, RANGE, ClassicConsumer, Consumer

__all__ = ["ClassicConsumer", "Consumer", "Driver", "WorkloadOptions", "generate"]

START_MS = 1_795_392_000_000  # 2026-11-23T00:00:00Z: the virtual clock's start


class SeededIds:
    """The runtime's ids (group uids, topic ids, member ids it hands out) from the seed."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._n = itertools.count(1)

    def _b64(self) -> str:
        raw = self._rng.randbytes(16)
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")

    def new_member_id(self) -> str:
        return self._b64()

    def new_uuid(self) -> str:
        return str(uuid.UUID(bytes=self._rng.randbytes(16), version=4))

    def new_group_uid(self) -> str:
        return f"cgp_{next(self._n):026d}"

    def new_topic_id(self) -> str:
        return self._b64()


@dataclass(slots=True)
class Topic:
    name: str
    topic_id: str
    partitions: int
    rate: float
    """Messages per second per partition (consumers keep up with it)."""


# ------------------------------------------------------------------------ the engine


class Driver:
    """The event loop of a workload: a runtime on a store, a virtual clock, client actions.

    ``at(t_ms, fn)`` schedules an async action; ``run(until_ms)`` plays them in time order
    (actions due at the same instant run concurrently, in scheduling order, so they share
    batches like concurrent clients do) and advances the clock to each timer deadline in
    between. Client errors that a real client handles are handled by the client classes."""

    def __init__(
        self,
        data_dir: str,
        *,
        seed: int = 0,
        shards: int = 4,
        settings: dict[str, str] | None = None,
        start_ms: int = START_MS,
        sync: str = "off",
        tick_ms: int = 1,
    ) -> None:
        from coordinator.core.config import parse_config
        from coordinator.runtime.clock import ManualClock
        from coordinator.runtime.runtime import CoordinatorRuntime
        from coordinator.runtime.store import SqliteRecordStore

        self.rng = random.Random(seed)
        all_settings = {"group.coordinator.shards": str(shards), **(settings or {})}
        self.config: GroupCoordinatorConfig = parse_config(all_settings)
        self.clock = ManualClock(start_ms)
        self.store = SqliteRecordStore(
            data_dir,
            sync=sync,  # type: ignore[arg-type]
            partitions=self.config.offsets_topic_partitions,
        )
        self.runtime = CoordinatorRuntime(
            config=self.config,
            store=self.store,
            clock=self.clock,
            ids=SeededIds(random.Random(seed ^ 0x5EED)),
        )
        self.topics: dict[str, Topic] = {}
        self._queue: list[tuple[int, int, Callable[[], Awaitable[None]]]] = []
        self._seq = itertools.count()
        self._tasks: set[asyncio.Task[Any]] = set()
        self.actions = 0
        self.tick_ms = tick_ms
        """Client actions happen on multiples of this (clients' timers are coarse): actions due
        at the same instant share the coordinator's batches, which makes big workloads fast."""

    @property
    def now(self) -> int:
        return self.clock.now_ms()

    async def start(self) -> None:
        await self.runtime.start()

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await self.runtime.close()

    def at(self, t_ms: int, fn: Callable[[], Awaitable[None]]) -> None:
        t = max(t_ms, self.now)
        tick = self.tick_ms
        if tick > 1:
            t = -(-t // tick) * tick
        heapq.heappush(self._queue, (t, next(self._seq), fn))

    def spawn(self, coro: Awaitable[Any]) -> None:
        """Run a client action that may wait at a classic barrier (not awaited by the step)."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def create_topic(self, name: str, partitions: int, rate: float = 10.0) -> Topic:
        (res,) = await self.runtime.create_topics([NewTopic(name=name, num_partitions=partitions)])
        if res.error_code:
            raise RuntimeError(f"cannot create topic {name}: {res.error_message}")
        topic = Topic(name, res.topic_id, partitions, rate)
        self.topics[name] = topic
        return topic

    async def add_partitions(self, name: str, total: int) -> None:
        (res,) = await self.runtime.create_partitions([(name, total)])
        if res.error_code:
            raise RuntimeError(f"cannot add partitions to {name}: {res.error_message}")
        self.topics[name].partitions = total

    def topic_name(self, topic_id: str) -> str:
        return next(t.name for t in self.topics.values() if t.topic_id == topic_id)

    def log_end(self, topic: str, partition: int) -> int:
        """The partition's log end offset now (messages arrive at the topic's rate)."""
        t = self.topics[topic]
        return int((self.now - START_MS) / 1000 * t.rate * (1 + partition % 3))

    async def _settle(self) -> None:
        await self.runtime.flush()
        for _ in range(8):  # let woken client tasks run their (synchronous) continuations
            await asyncio.sleep(0)
        await self.runtime.flush()

    async def run(self, until_ms: int) -> None:
        runtime = self.runtime
        for _ in range(100_000_000):
            deadline = runtime.timers.next_deadline()
            nxt = self._queue[0][0] if self._queue else None
            if nxt is None and (deadline is None or deadline > until_ms):
                break
            t = min(x for x in (nxt, deadline) if x is not None)
            if t > until_ms:
                break
            if t > self.now:
                await runtime.advance_time(t - self.now)
                await self._settle()
            due = []
            while self._queue and self._queue[0][0] <= self.now:
                due.append(heapq.heappop(self._queue)[2])
            if due:
                self.actions += len(due)
                await asyncio.gather(*(fn() for fn in due))
                await self._settle()
        if until_ms > self.now:
            await runtime.advance_time(until_ms - self.now)
            await self._settle()


# ------------------------------------------------------------------------ random scenarios


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadOptions:
    seed: int = 1
    groups: int = 20
    duration_s: int = 1_800
    topics: int = 8
    shards: int = 4
    classic_fraction: float = 0.3
    """Groups that start as classic groups."""
    cooperative_fraction: float = 0.4
    """Classic groups whose members use the cooperative protocol (cooperative-sticky, KIP-429);
    the others are eager (range)."""
    upgrade_fraction: float = 0.4
    """Classic groups upgraded by a KIP-848 consumer joining them (their first event); some of
    them are downgraded again when the consumers leave."""
    static_fraction: float = 0.3
    """Groups whose members are static (instance ids)."""
    events_per_group_hour: float = 6.0
    """Membership events (restarts, crashes, scaling, ...) per group per hour."""
    tick_ms: int = 100
    """Granularity of the clients' timers (see :attr:`Driver.tick_ms`)."""


@dataclass(slots=True)
class GenerateResult:
    records: int
    last_offset: int
    groups: int
    actions: int
    virtual_seconds: float


async def _generate(data_dir: str, opts: WorkloadOptions) -> GenerateResult:
    d = Driver(data_dir, seed=opts.seed, shards=opts.shards, tick_ms=opts.tick_ms)
    rng = d.rng
    await d.start()
    try:
        for i in range(opts.topics):
            await d.create_topic(
                f"topic-{i}", rng.choice((3, 6, 8, 12, 16)), rng.choice((5.0, 20.0, 100.0))
            )
        end = d.now + opts.duration_s * 1000
        names = sorted(d.topics)
        for g in range(opts.groups):
            _plan_group(d, rng, f"group-{g:04d}", names, opts, end)
        await d.run(end)
        from coordinator.runtime.store import log_ids

        records = sum(d.store.last_offset(log) + 1 for log in log_ids(d.store.partitions))
        return GenerateResult(
            records=records,
            last_offset=records - 1,
            groups=opts.groups,
            actions=d.actions,
            virtual_seconds=opts.duration_s,
        )
    finally:
        await d.close()


def _plan_group(
    d: Driver, rng: random.Random, gid: str, names: list[str], opts: WorkloadOptions, end: int
) -> None:
    """Schedule one group's life: members join in the first minute, then random events."""
    topics = tuple(sorted(rng.sample(names, rng.choice((1, 1, 2)))))
    n = rng.randint(2, 5)
    static = rng.random() < opts.static_fraction
    classic = rng.random() < opts.classic_fraction
    protocol = COOPERATIVE_STICKY if rng.random() < opts.cooperative_fraction else RANGE
    upgrade = classic and rng.random() < opts.upgrade_fraction
    t0 = d.now + rng.randint(0, 60_000)
    counter = itertools.count()

    def new_consumer() -> Consumer:
        i = next(counter)
        return Consumer(
            d,
            gid,
            topics,
            instance_id=f"{gid}-instance-{i}" if static else None,
            client_id=f"{gid}-client-{i}",
            ack_delay_ms=rng.randint(20, 400),
        )

    def new_classic() -> ClassicConsumer:
        i = next(counter)
        return ClassicConsumer(
            d,
            gid,
            topics,
            instance_id=f"{gid}-instance-{i}" if static else None,
            protocol=protocol,
            client_id=f"{gid}-classic-{i}",
            sync_delay_ms=rng.randint(10, 200),
        )

    g = _Group(d, rng, names, new_consumer, new_classic, classic and not upgrade)
    for _ in range(n):
        m = new_classic() if classic else new_consumer()
        g.members.append(m)
        m.start(t0 + rng.randint(0, 10_000))
    horizon = end - t0
    events = max(
        1, int(rng.expovariate(1.0) * opts.events_per_group_hour * horizon / 3_600_000) + 1
    )
    times = sorted(t0 + 60_000 + rng.randint(0, max(1, horizon - 120_000)) for _ in range(events))
    kinds = ["rolling_restart", "crash", "scale_out", "scale_in", "slow_revoke"]
    if not classic or upgrade:
        kinds.append("subscribe")
    if static:
        kinds.append("static_bounce")
    if upgrade:
        kinds.append("downgrade")  # the consumers leave: only classic members remain
    for k, t in enumerate(times):
        kind = "upgrade" if upgrade and k == 0 else rng.choice(kinds)
        d.at(t, g.event(kind))


@dataclass(eq=False)
class _Group:
    """One group's members and what happens to them. A classic group that stays classic keeps
    classic members (restarts, scaling and replacements are classic consumers too); in a
    consumer group, a restarted classic member comes back as a KIP-848 consumer (the migration
    completes)."""

    d: Driver
    rng: random.Random
    names: list[str]
    new_consumer: Callable[[], Consumer]
    new_classic: Callable[[], ClassicConsumer]
    stays_classic: bool
    members: list[Any] = field(default_factory=list)

    def _new(self) -> Any:
        m = self.new_classic() if self.stays_classic else self.new_consumer()
        self.members.append(m)
        return m

    def event(self, kind: str) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            await self._event(kind)

        return run

    async def _event(self, kind: str) -> None:
        d, rng = self.d, self.rng
        live = [m for m in self.members if m.alive]
        if kind == "upgrade":
            c = self.new_consumer()
            self.members.append(c)
            c.start()
        elif kind == "scale_out" or not live:
            self._new().start()
        elif kind == "rolling_restart":
            gap = rng.randint(5_000, 20_000)
            for j, m in enumerate(live):
                d.at(d.now + j * gap, self._restart(m))
        elif kind == "static_bounce":
            m = rng.choice(live)
            if m.instance_id:
                await (m.leave(static_bounce=True) if isinstance(m, Consumer) else m.leave())
                m.start(d.now + rng.randint(2_000, 20_000))
        elif kind == "crash":
            m = rng.choice(live)
            m.crash()
            # The process is restarted a while later (a static one reclaims its instance id).
            d.at(d.now + rng.randint(30_000, 120_000), _revive(m))
        elif kind == "scale_in" and len(live) > 1:
            await rng.choice(live).leave()
        elif kind == "slow_revoke":
            self._slow(rng.choice(live))
        elif kind == "subscribe":
            m = rng.choice(live)
            if isinstance(m, Consumer):
                extra = rng.choice(self.names)
                await m.subscribe(tuple(sorted(set(m.topics) | {extra})))
        elif kind == "downgrade":
            for m in live:
                if isinstance(m, Consumer):
                    await m.leave()
            if not any(m.alive for m in self.members):
                self._new().start()
            self.stays_classic = True  # a downgraded group grows back with classic members

    def _slow(self, m: Any) -> None:
        """A member that takes longer than its rebalance timeout to give partitions up; a join
        makes it revoke (fenced by the rebalance timeout)."""
        d = self.d
        if isinstance(m, Consumer):
            m.slow_revoke = True

            async def recover() -> None:
                m.slow_revoke = False

            d.at(d.now + m.rebalance_timeout_ms + 10_000, recover)
        else:
            m.slow_rejoin = True
        self._new().start()

    def _restart(self, m: Any) -> Callable[[], Awaitable[None]]:
        d = self.d

        async def run() -> None:
            if not m.alive:
                return
            if isinstance(m, Consumer):
                await m.leave(static_bounce=m.instance_id is not None)
                m.start(d.now + 3_000)
            elif self.stays_classic:
                await m.leave()
                m.start(d.now + 3_000)
            else:
                # A classic member restarts as a KIP-848 consumer: the migration completes.
                await m.leave()
                self._new().start(d.now + 3_000)

        return run


def _revive(m: Any) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        if not m.alive:
            m.start()

    return run


def generate(data_dir: str, opts: WorkloadOptions) -> GenerateResult:
    """Write a store in ``data_dir`` (which must not hold one yet) from ``opts``."""
    from pathlib import Path

    from coordinator.runtime.store.sqlite import resolve_path

    path = resolve_path(data_dir)
    if path.exists() and path.stat().st_size > 0:
        raise FileExistsError(f"{path} already exists; generate writes a new store")
    Path(path.parent).mkdir(parents=True, exist_ok=True)
    return asyncio.run(_generate(data_dir, opts))
