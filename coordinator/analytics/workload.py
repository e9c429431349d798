"""A workload generator: drives the real runtime in-process to write a realistic store.

``kip848 analytics generate --data-dir DIR --seed N`` builds a :class:`CoordinatorRuntime` on a
:class:`SqliteRecordStore` with a :class:`ManualClock` and plays clients against it: KIP-848
consumers (dynamic and static), classic consumers (JoinGroup/SyncGroup/Heartbeat, eager range
assignment by the leader), and what happens to them over time — joins, leaves, rolling restarts,
static bounces, crashes fenced by the session timeout, slow revokers fenced by the rebalance
timeout, subscription changes, partitions added, classic groups upgraded by a joining consumer
and classic members inside consumer groups. Consumers commit their progress every
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

from coordinator.core.commands import ConsumerGroupHeartbeat
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.errors import CoordinatorError, ErrorCode
from coordinator.core.offsets import OffsetCommit, OffsetCommitPartition, OffsetCommitTopic
from coordinator.core.topics import NewTopic
from legacy_bridge import messages as lm
from legacy_bridge.protocol import (
    CONSUMER_PROTOCOL_TYPE,
    AssignmentMessage,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

__all__ = ["ClassicConsumer", "Consumer", "Driver", "WorkloadOptions", "generate"]

START_MS = 1_795_392_000_000  # 2026-11-23T00:00:00Z: the virtual clock's start
Owned = dict[str, frozenset[int]]


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


# ------------------------------------------------------------------------ KIP-848 consumer


@dataclass(eq=False)
class Consumer:
    """A KIP-848 consumer (Kafka's ConsumerMembershipManager, reduced): heartbeats at the
    interval the coordinator gives, revokes then acknowledges by reporting what it owns,
    commits its position every ``commit_interval_ms`` and before giving partitions up.

    ``slow_revoke``: never finishes revoking (a stuck ``onPartitionsRevoked``): the coordinator
    fences it when its rebalance timeout expires. ``crash()`` stops it silently (the session
    timeout fences it); ``leave()`` leaves with epoch -1, or -2 for a static member that will
    come back (``static_bounce``)."""

    driver: Driver
    group_id: str
    topics: tuple[str, ...]
    instance_id: str | None = None
    client_id: str = "consumer"
    rebalance_timeout_ms: int = 30_000
    commit_interval_ms: int = 5_000
    ack_delay_ms: int = 50
    slow_revoke: bool = False
    member_id: str = ""
    epoch: int = 0
    owned: Owned = field(default_factory=dict)
    alive: bool = False
    interval_ms: int = 5_000
    _gen: int = 0
    _subscription_sent: bool = False
    committed: dict[tuple[str, int], int] = field(default_factory=dict)

    def new_member_id(self) -> str:
        raw = self.driver.rng.randbytes(16)
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")

    def start(self, at_ms: int | None = None) -> None:
        d = self.driver
        self.alive = True
        self.member_id = self.new_member_id()
        self.epoch = 0
        self.owned = {}
        self._gen += 1
        self._subscription_sent = False
        gen = self._gen
        d.at(d.now if at_ms is None else at_ms, lambda: self._heartbeat(gen))
        d.at(
            (d.now if at_ms is None else at_ms) + self.commit_interval_ms,
            lambda: self._commit_loop(gen),
        )

    def _request(self) -> ConsumerGroupHeartbeat:
        joining = self.epoch == 0
        send_sub = joining or not self._subscription_sent
        return ConsumerGroupHeartbeat(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=self.epoch,
            instance_id=self.instance_id,
            rebalance_timeout_ms=self.rebalance_timeout_ms if joining else -1,
            subscribed_topic_names=self.topics if send_sub else None,
            topic_partitions={} if joining else dict(self.owned),
            client_id=self.client_id,
            client_host="/10.0.0.1",
        )

    async def _heartbeat(self, gen: int) -> None:
        if not self.alive or gen != self._gen:
            return
        d = self.driver
        req = self._request()
        try:
            resp = await d.runtime.heartbeat(req)
        except CoordinatorError as e:
            self._on_error(e, gen)
            return
        if gen != self._gen:
            return
        self._subscription_sent = True
        self.member_id = resp.member_id or self.member_id
        self.epoch = resp.member_epoch
        self.interval_ms = resp.heartbeat_interval_ms or self.interval_ms
        changed = False
        if resp.assignment is not None:
            target = {t: ps for t, ps in resp.assignment.assigned.items() if ps}
            revoked = _minus(self.owned, target)
            if revoked and not self.slow_revoke:
                await self._commit(gen, revoked)
                self.owned = _minus(self.owned, revoked)
                changed = True
            added = _minus(target, self.owned)
            if added and not (revoked and self.slow_revoke):
                self.owned = _union(self.owned, added)
                changed = True
        d.at(
            d.now + (self.ack_delay_ms if changed else self.interval_ms),
            lambda: self._heartbeat(gen),
        )

    def _on_error(self, e: CoordinatorError, gen: int) -> None:
        d = self.driver
        if e.code in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID):
            # Lost every partition; rejoin with epoch 0 (same member id, KIP-1082).
            self.owned, self.epoch, self._subscription_sent = {}, 0, False
            d.at(d.now + self.ack_delay_ms, lambda: self._heartbeat(gen))
        elif e.code == ErrorCode.FENCED_INSTANCE_ID:
            self.alive = False  # another process took the instance id: this one stops
        else:  # UNRELEASED_INSTANCE_ID, COORDINATOR_*: retry after the back-off
            d.at(d.now + 1_000, lambda: self._heartbeat(gen))

    async def _commit_loop(self, gen: int) -> None:
        if not self.alive or gen != self._gen:
            return
        await self._commit(gen, self.owned)
        d = self.driver
        d.at(d.now + self.commit_interval_ms, lambda: self._commit_loop(gen))

    async def _commit(self, gen: int, parts: Owned) -> None:
        d = self.driver
        if not parts or self.epoch <= 0:
            return
        topics = []
        for topic_id in sorted(parts):
            name = d.topic_name(topic_id)
            ps = []
            for p in sorted(parts[topic_id]):
                end = d.log_end(name, p)
                if self.committed.get((name, p)) != end:
                    ps.append(OffsetCommitPartition(partition_index=p, committed_offset=end))
            if ps:
                topics.append(OffsetCommitTopic(name=name, partitions=tuple(ps)))
        if not topics:
            return
        req = OffsetCommit(
            group_id=self.group_id,
            generation_id_or_member_epoch=self.epoch,
            member_id=self.member_id,
            group_instance_id=self.instance_id,
            topics=tuple(topics),
        )
        try:
            resp = await d.runtime.offset_commit(req)
        except CoordinatorError:
            return  # STALE_MEMBER_EPOCH etc.: the next commit retries
        for topic in resp.topics:
            for part in topic.partitions:
                if not part.error_code:
                    index = part.partition_index
                    self.committed[(topic.name, index)] = d.log_end(topic.name, index)

    def crash(self) -> None:
        """The process dies: no leave, no commit; the coordinator notices by the session timeout."""
        self.alive = False
        self._gen += 1

    async def leave(self, *, static_bounce: bool = False) -> None:
        """Commit, revoke everything and leave (epoch -1; -2 for a static member's bounce)."""
        if not self.alive:
            return
        gen = self._gen
        await self._commit(gen, self.owned)
        self.alive = False
        self._gen += 1
        epoch = -2 if (static_bounce and self.instance_id) else -1
        try:
            await self.driver.runtime.heartbeat(
                ConsumerGroupHeartbeat(
                    group_id=self.group_id,
                    member_id=self.member_id,
                    member_epoch=epoch,
                    instance_id=self.instance_id,
                )
            )
        except CoordinatorError:
            pass  # already fenced: nothing to leave
        self.owned = {}

    async def subscribe(self, topics: tuple[str, ...]) -> None:
        """Change the subscription (sent with the next heartbeat, which is sent now)."""
        self.topics = topics
        self._subscription_sent = False
        await self._heartbeat(self._gen)


# ------------------------------------------------------------------------ classic consumer


@dataclass(eq=False)
class ClassicConsumer:
    """A classic consumer with the eager protocol and the range assignor: JoinGroup (with the
    member id the coordinator requires), SyncGroup (the leader assigns), Heartbeat every 3 s,
    rejoin on REBALANCE_IN_PROGRESS / ILLEGAL_GENERATION, LeaveGroup on shutdown. Inside a
    consumer group (after an upgrade) the same requests are served by the legacy bridge."""

    driver: Driver
    group_id: str
    topics: tuple[str, ...]
    instance_id: str | None = None
    session_timeout_ms: int = 45_000
    rebalance_timeout_ms: int = 30_000
    heartbeat_ms: int = 3_000
    member_id: str = ""
    generation: int = -1
    owned: dict[str, tuple[int, ...]] = field(default_factory=dict)
    alive: bool = False
    _gen: int = 0

    def start(self, at_ms: int | None = None) -> None:
        d = self.driver
        self.alive = True
        self._gen += 1
        gen = self._gen
        self.member_id, self.generation, self.owned = "", -1, {}

        async def go() -> None:
            d.spawn(self._join(gen))

        d.at(d.now if at_ms is None else at_ms, go)

    def _protocols(self) -> tuple[tuple[str, bytes], ...]:
        sub = Subscription(topics=self.topics, owned_partitions=())
        return (("range", encode_subscription(sub)),)

    async def _join(self, gen: int) -> None:
        d = self.driver
        for _ in range(100):
            if not self.alive or gen != self._gen:
                return
            self.owned = {}  # eager: revoke everything before joining
            req = lm.JoinGroup(
                group_id=self.group_id,
                session_timeout_ms=self.session_timeout_ms,
                rebalance_timeout_ms=self.rebalance_timeout_ms,
                member_id=self.member_id,
                group_instance_id=self.instance_id,
                protocol_type=CONSUMER_PROTOCOL_TYPE,
                protocols=self._protocols(),
                client_id="classic-consumer",
                client_host="/10.0.0.2",
            )
            try:
                resp = await d.runtime.classic_join(req)
            except CoordinatorError as e:
                if e.code == ErrorCode.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                    continue
                if e.code == ErrorCode.FENCED_INSTANCE_ID:
                    self.alive = False
                    return
                await self._sleep(1_000)
                continue
            if gen != self._gen:
                return
            if resp.error_code == ErrorCode.MEMBER_ID_REQUIRED:
                self.member_id = resp.member_id
                continue
            if resp.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            if resp.error_code:
                await self._sleep(500)
                continue
            self.member_id = resp.member_id
            self.generation = resp.generation_id
            assignments: tuple[tuple[str, bytes], ...] = ()
            if resp.leader == self.member_id and resp.members:
                assignments = self._assign(resp.members)
            try:
                sync = await d.runtime.classic_sync(
                    lm.SyncGroup(
                        group_id=self.group_id,
                        generation_id=self.generation,
                        member_id=self.member_id,
                        group_instance_id=self.instance_id,
                        protocol_type=CONSUMER_PROTOCOL_TYPE,
                        protocol_name="range",
                        assignments=assignments,
                    )
                )
            except CoordinatorError:
                continue
            if gen != self._gen:
                return
            if sync.error_code:
                continue
            a = decode_assignment(sync.assignment) if sync.assignment else AssignmentMessage()
            self.owned = {t: tuple(ps) for t, ps in a.assigned_partitions}
            d.at(d.now + self.heartbeat_ms, lambda: self._heartbeat(gen))
            return

    async def _sleep(self, ms: int) -> None:
        d = self.driver
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def wake() -> None:
            if not fut.done():
                fut.set_result(None)

        d.at(d.now + ms, wake)
        await fut

    def _assign(self, members: tuple[lm.JoinGroupMember, ...]) -> tuple[tuple[str, bytes], ...]:
        """The range assignor, as the leader of an eager classic group runs it."""
        d = self.driver
        subs = {m.member_id: decode_subscription(m.metadata).topics for m in members}
        out: dict[str, dict[str, list[int]]] = {mid: {} for mid in subs}
        for topic in sorted({t for ts in subs.values() for t in ts}):
            if topic not in d.topics:
                continue
            consumers = sorted(mid for mid, ts in subs.items() if topic in ts)
            n = d.topics[topic].partitions
            per, extra = divmod(n, len(consumers))
            start = 0
            for i, mid in enumerate(consumers):
                count = per + (1 if i < extra else 0)
                out[mid][topic] = list(range(start, start + count))
                start += count
        return tuple(
            (
                mid,
                encode_assignment(
                    AssignmentMessage(
                        assigned_partitions=tuple(
                            (t, tuple(ps)) for t, ps in sorted(out[mid].items())
                        )
                    )
                ),
            )
            for mid in sorted(out)
        )

    async def _heartbeat(self, gen: int) -> None:
        if not self.alive or gen != self._gen:
            return
        d = self.driver
        try:
            resp = await d.runtime.classic_heartbeat(
                lm.Heartbeat(
                    group_id=self.group_id,
                    generation_id=self.generation,
                    member_id=self.member_id,
                    group_instance_id=self.instance_id,
                )
            )
            code = resp.error_code
        except CoordinatorError as e:
            code = int(e.code)
        if gen != self._gen:
            return
        if code in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION):
            d.spawn(self._join(gen))
        elif code == ErrorCode.UNKNOWN_MEMBER_ID:
            self.member_id = ""
            d.spawn(self._join(gen))
        else:
            d.at(d.now + self.heartbeat_ms, lambda: self._heartbeat(gen))

    async def leave(self) -> None:
        if not self.alive:
            return
        self.alive = False
        self._gen += 1
        if self.instance_id is not None:
            return  # a static classic member stops without LeaveGroup (KIP-345)
        try:
            await self.driver.runtime.classic_leave(
                lm.LeaveGroup(
                    group_id=self.group_id, members=(lm.LeaveMember(member_id=self.member_id),)
                )
            )
        except CoordinatorError:
            pass

    def crash(self) -> None:
        self.alive = False
        self._gen += 1


def _minus(a: Owned, b: Owned) -> Owned:
    out: Owned = {}
    for t, ps in a.items():
        rest = ps - b.get(t, frozenset())
        if rest:
            out[t] = rest
    return out


def _union(a: Owned, b: Owned) -> Owned:
    out = dict(a)
    for t, ps in b.items():
        out[t] = out.get(t, frozenset()) | ps
    return {t: ps for t, ps in out.items() if ps}


# ------------------------------------------------------------------------ random scenarios


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadOptions:
    seed: int = 1
    groups: int = 20
    duration_s: int = 1_800
    topics: int = 8
    shards: int = 4
    classic_fraction: float = 0.2
    """Groups that start as classic groups; most are upgraded by a consumer joining later."""
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
    t0 = d.now + rng.randint(0, 60_000)
    members: list[Any] = []

    def new_consumer(i: int) -> Consumer:
        return Consumer(
            d,
            gid,
            topics,
            instance_id=f"{gid}-instance-{i}" if static else None,
            client_id=f"{gid}-client-{i}",
            ack_delay_ms=rng.randint(20, 400),
        )

    for i in range(n):
        m: Any = ClassicConsumer(d, gid, topics) if classic else new_consumer(i)
        members.append(m)
        m.start(t0 + rng.randint(0, 10_000))
    counter = itertools.count(n)
    horizon = end - t0
    events = max(
        1, int(rng.expovariate(1.0) * opts.events_per_group_hour * horizon / 3_600_000) + 1
    )
    times = sorted(t0 + 60_000 + rng.randint(0, max(1, horizon - 120_000)) for _ in range(events))
    kinds = ["rolling_restart", "crash", "scale_out", "scale_in", "slow_revoke", "subscribe"]
    if static:
        kinds.append("static_bounce")
    if classic:
        kinds = ["upgrade"] + kinds  # the first event of a classic group: a consumer joins
    for k, t in enumerate(times):
        kind = kinds[0] if classic and k == 0 else rng.choice(kinds)
        _schedule_event(d, rng, kind, t, members, new_consumer, counter, names)


def _schedule_event(
    d: Driver,
    rng: random.Random,
    kind: str,
    t: int,
    members: list[Any],
    new_consumer: Callable[[int], Consumer],
    counter: Any,
    names: list[str],
) -> None:
    async def run() -> None:
        live = [m for m in members if m.alive]
        if kind == "upgrade" or kind == "scale_out" or not live:
            c = new_consumer(next(counter))
            members.append(c)
            c.start()
        elif kind == "rolling_restart":
            gap = rng.randint(5_000, 20_000)
            for j, m in enumerate(live):
                d.at(d.now + j * gap, _restart(d, m, new_consumer, members, counter))
        elif kind == "static_bounce":
            m = rng.choice(live)
            if isinstance(m, Consumer) and m.instance_id:
                await m.leave(static_bounce=True)
                m.start(d.now + rng.randint(2_000, 20_000))
        elif kind == "crash":
            m = rng.choice(live)
            m.crash()
            # The process is restarted a while later (a static one reclaims its instance id).
            d.at(d.now + rng.randint(30_000, 120_000), _revive(m))
        elif kind == "scale_in" and len(live) > 1:
            await rng.choice(live).leave()
        elif kind == "slow_revoke":
            m = rng.choice(live)
            if isinstance(m, Consumer):
                m.slow_revoke = True
                c = new_consumer(next(counter))  # a join makes it revoke, which it never finishes
                members.append(c)
                c.start()

                async def recover() -> None:
                    m.slow_revoke = False

                d.at(d.now + m.rebalance_timeout_ms + 10_000, recover)
        elif kind == "subscribe":
            m = rng.choice(live)
            if isinstance(m, Consumer):
                extra = rng.choice(names)
                await m.subscribe(tuple(sorted(set(m.topics) | {extra})))

    d.at(t, run)


def _restart(
    d: Driver, m: Any, new_consumer: Callable[[int], Consumer], members: list[Any], counter: Any
) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        if not m.alive:
            return
        if isinstance(m, Consumer):
            await m.leave(static_bounce=m.instance_id is not None)
            m.start(d.now + 3_000)
        else:
            # A classic member restarts as a KIP-848 consumer: the migration completes.
            await m.leave()
            c = new_consumer(next(counter))
            members.append(c)
            c.start(d.now + 3_000)

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
