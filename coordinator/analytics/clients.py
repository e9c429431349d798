"""The client models of the workload generator: a KIP-848 consumer and a classic consumer
(eager ``range`` or cooperative ``cooperative-sticky``), each a reduced model of Kafka's own
(ConsumerMembershipManager, ConsumerCoordinator), driving the real runtime through
:class:`~coordinator.analytics.workload.Driver` on virtual time (seen here as
:class:`ClientDriver`, what the clients use of it). Both commit their position
every ``commit_interval_ms`` and before they give partitions up.

The leader's client-side assignors are pure functions here (:func:`range_assignment`,
:func:`cooperative_sticky_assignment`), used by the classic consumers and by the migration
what-if (:mod:`.migration_whatif`)."""

from __future__ import annotations

import asyncio
import base64
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from coordinator.core.commands import ConsumerGroupHeartbeat
from coordinator.core.errors import CoordinatorError, ErrorCode
from coordinator.core.offsets import OffsetCommit, OffsetCommitPartition, OffsetCommitTopic
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

if TYPE_CHECKING:
    from coordinator.runtime.runtime import CoordinatorRuntime


class _Partitioned(Protocol):
    @property
    def partitions(self) -> int: ...


class ClientDriver(Protocol):
    """What the client models use of the workload's driver (``workload.Driver``): its clock,
    its action queue, the runtime it drives and the topics it created."""

    runtime: CoordinatorRuntime
    rng: random.Random

    @property
    def now(self) -> int: ...

    @property
    def topics(self) -> Mapping[str, _Partitioned]: ...

    def at(self, t_ms: int, fn: Callable[[], Awaitable[None]]) -> None: ...

    def spawn(self, coro: Awaitable[Any]) -> None: ...

    def topic_name(self, topic_id: str) -> str: ...

    def log_end(self, topic: str, partition: int) -> int: ...


__all__ = [
    "RANGE",
    "COOPERATIVE_STICKY",
    "ClassicConsumer",
    "Consumer",
    "cooperative_sticky_assignment",
    "range_assignment",
]

RANGE = "range"
COOPERATIVE_STICKY = "cooperative-sticky"
Owned = dict[str, frozenset[int]]
"""Partitions by topic id (KIP-848 consumers) or topic name (classic consumers)."""
Assignment = dict[str, dict[str, list[int]]]
"""member id -> topic name -> partitions."""


async def commit_position(
    d: ClientDriver,
    group_id: str,
    member_id: str,
    epoch: int,
    instance_id: str | None,
    parts: Owned,
    committed: dict[tuple[str, int], int],
    *,
    by_name: bool = False,
) -> None:
    """OffsetCommit of the log end of ``parts`` (what the consumer has processed: it keeps up)
    with the member's epoch or generation; partitions already committed there are skipped.
    ``parts`` are keyed by topic id, or by name with ``by_name``."""
    if not parts:
        return
    topics = []
    for key in sorted(parts):
        name = key if by_name else d.topic_name(key)
        ps = []
        for p in sorted(parts[key]):
            end = d.log_end(name, p)
            if committed.get((name, p)) != end:
                ps.append(OffsetCommitPartition(partition_index=p, committed_offset=end))
        if ps:
            topics.append(OffsetCommitTopic(name=name, partitions=tuple(ps)))
    if not topics:
        return
    req = OffsetCommit(
        group_id=group_id,
        generation_id_or_member_epoch=epoch,
        member_id=member_id,
        group_instance_id=instance_id,
        topics=tuple(topics),
    )
    try:
        resp = await d.runtime.offset_commit(req)
    except CoordinatorError:
        return  # STALE_MEMBER_EPOCH, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS: retried later
    for topic in resp.topics:
        for part in topic.partitions:
            if not part.error_code:
                index = part.partition_index
                committed[(topic.name, index)] = d.log_end(topic.name, index)


async def commit_loop(c: Any, gen: int) -> None:
    """A consumer's auto-commit: its position every ``commit_interval_ms`` while it lives."""
    if not c.alive or gen != c._gen:
        return
    await c._commit(gen, c.owned)
    d = c.driver
    d.at(d.now + c.commit_interval_ms, lambda: commit_loop(c, gen))


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

    driver: ClientDriver
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
        await commit_loop(self, gen)

    async def _commit(self, gen: int, parts: Owned) -> None:
        if self.epoch > 0:
            await commit_position(
                self.driver,
                self.group_id,
                self.member_id,
                self.epoch,
                self.instance_id,
                parts,
                self.committed,
            )

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
    """A classic consumer (Kafka's ConsumerCoordinator, reduced): JoinGroup (with the member id
    the coordinator requires), SyncGroup (the leader assigns), Heartbeat every 3 s, rejoin on
    REBALANCE_IN_PROGRESS / ILLEGAL_GENERATION, LeaveGroup on shutdown (a static member leaves
    without it, KIP-345). Inside a consumer group (after an upgrade) the same requests are
    served by the legacy bridge.

    ``protocol``: ``range`` (eager: it gives up everything before it rejoins) or
    ``cooperative-sticky`` (KIP-429: it keeps what it owns, lists it in its subscription, gives
    up only what its new assignment takes away, then rejoins so that someone else can have it).
    ``slow_rejoin``: a stuck ``onPartitionsRevoked``: it rejoins only after its rebalance timeout,
    so the join phase completes without it and it is removed. ``sync_delay_ms``: from its
    JoinGroup answer to its SyncGroup (the leader computing the assignment, the network)."""

    driver: ClientDriver
    group_id: str
    topics: tuple[str, ...]
    instance_id: str | None = None
    protocol: str = RANGE
    client_id: str = "classic-consumer"
    session_timeout_ms: int = 45_000
    rebalance_timeout_ms: int = 30_000
    heartbeat_ms: int = 3_000
    commit_interval_ms: int = 5_000
    slow_rejoin: bool = False
    sync_delay_ms: int = 0
    member_id: str = ""
    generation: int = -1
    owned: Owned = field(default_factory=dict)
    alive: bool = False
    _gen: int = 0
    committed: dict[tuple[str, int], int] = field(default_factory=dict)

    @property
    def cooperative(self) -> bool:
        return self.protocol == COOPERATIVE_STICKY

    def start(self, at_ms: int | None = None) -> None:
        d = self.driver
        self.alive = True
        self._gen += 1
        gen = self._gen
        self.member_id, self.generation, self.owned = "", -1, {}
        at = d.now if at_ms is None else at_ms

        async def go() -> None:
            d.spawn(self._join(gen))

        d.at(at, go)
        d.at(at + self.commit_interval_ms, lambda: self._commit_loop(gen))

    def _protocols(self) -> tuple[tuple[str, bytes], ...]:
        owned: tuple[tuple[str, tuple[int, ...]], ...] = ()
        if self.cooperative:
            owned = tuple((t, tuple(sorted(ps))) for t, ps in sorted(self.owned.items()) if ps)
        sub = Subscription(
            topics=self.topics,
            owned_partitions=owned,
            generation_id=self.generation if self.cooperative else -1,
        )
        return ((self.protocol, encode_subscription(sub)),)

    async def _join(self, gen: int) -> None:
        d = self.driver
        if self.slow_rejoin and self.generation >= 0:
            self.slow_rejoin = False  # stuck once, in this rebalance
            await self._sleep(self.rebalance_timeout_ms + 5_000)
        for _ in range(100):
            if not self.alive or gen != self._gen:
                return
            if not self.cooperative:
                await self._give_up(gen, self.owned)  # eager: everything before joining
            req = lm.JoinGroup(
                group_id=self.group_id,
                session_timeout_ms=self.session_timeout_ms,
                rebalance_timeout_ms=self.rebalance_timeout_ms,
                member_id=self.member_id,
                group_instance_id=self.instance_id,
                protocol_type=CONSUMER_PROTOCOL_TYPE,
                protocols=self._protocols(),
                client_id=self.client_id,
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
                self.owned = {}  # removed from the group: whatever it had is lost
                continue
            if resp.error_code:
                await self._sleep(500)
                continue
            self.member_id = resp.member_id
            self.generation = resp.generation_id
            assignments: tuple[tuple[str, bytes], ...] = ()
            if resp.leader == self.member_id and resp.members and not resp.skip_assignment:
                assignments = self._assign(resp.members)
            if self.sync_delay_ms:
                await self._sleep(self.sync_delay_ms)
                if gen != self._gen:
                    return
            try:
                sync = await d.runtime.classic_sync(
                    lm.SyncGroup(
                        group_id=self.group_id,
                        generation_id=self.generation,
                        member_id=self.member_id,
                        group_instance_id=self.instance_id,
                        protocol_type=CONSUMER_PROTOCOL_TYPE,
                        protocol_name=self.protocol,
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
            assigned: Owned = {t: frozenset(ps) for t, ps in a.assigned_partitions if ps}
            revoked = _minus(self.owned, assigned)
            await self._give_up(gen, revoked)
            self.owned = assigned
            if revoked and self.cooperative:
                continue  # KIP-429: rejoin so that what it gave up can be assigned
            d.at(d.now + self.heartbeat_ms, lambda: self._heartbeat(gen))
            return

    async def _give_up(self, gen: int, parts: Owned) -> None:
        """Commit, then stop owning ``parts`` (``onPartitionsRevoked``)."""
        if parts:
            await self._commit(gen, parts)
            self.owned = _minus(self.owned, parts)

    async def _sleep(self, ms: int) -> None:
        d = self.driver
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def wake() -> None:
            if not fut.done():
                fut.set_result(None)

        d.at(d.now + ms, wake)
        await fut

    def _assign(self, members: tuple[lm.JoinGroupMember, ...]) -> tuple[tuple[str, bytes], ...]:
        """The leader's assignment: range (eager) or cooperative-sticky."""
        d = self.driver
        subs = {m.member_id: decode_subscription(m.metadata) for m in members}
        counts = {
            t: d.topics[t].partitions for s in subs.values() for t in s.topics if t in d.topics
        }
        if self.cooperative:
            out = cooperative_sticky_assignment(
                {
                    mid: (s.topics, {t: frozenset(ps) for t, ps in s.owned_partitions})
                    for mid, s in subs.items()
                },
                counts,
            )
        else:
            out = range_assignment({mid: s.topics for mid, s in subs.items()}, counts)
        return tuple(
            (
                mid,
                encode_assignment(
                    AssignmentMessage(
                        assigned_partitions=tuple(
                            (t, tuple(ps)) for t, ps in sorted(out[mid].items()) if ps
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
        elif code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
            self.member_id, self.owned = "", {}  # removed: everything it had is lost
            if code == ErrorCode.FENCED_INSTANCE_ID:
                self.alive = False
            else:
                d.spawn(self._join(gen))
        else:
            d.at(d.now + self.heartbeat_ms, lambda: self._heartbeat(gen))

    async def _commit_loop(self, gen: int) -> None:
        await commit_loop(self, gen)

    async def _commit(self, gen: int, parts: Owned) -> None:
        if self.generation >= 0 and gen == self._gen:
            await commit_position(
                self.driver,
                self.group_id,
                self.member_id,
                self.generation,
                self.instance_id,
                parts,
                self.committed,
                by_name=True,
            )

    async def leave(self) -> None:
        if not self.alive:
            return
        await self._give_up(self._gen, self.owned)
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


# ------------------------------------------------------------------------ client-side assignors


def range_assignment(
    subscriptions: Mapping[str, tuple[str, ...]], partitions: Mapping[str, int]
) -> Assignment:
    """Kafka's RangeAssignor: per topic, its subscribers in member id order get consecutive
    ranges, the first ones one partition more when it does not divide."""
    out: Assignment = {mid: {} for mid in subscriptions}
    for topic in sorted({t for ts in subscriptions.values() for t in ts}):
        if topic not in partitions:
            continue
        consumers = sorted(mid for mid, ts in subscriptions.items() if topic in ts)
        per, extra = divmod(partitions[topic], len(consumers))
        start = 0
        for i, mid in enumerate(consumers):
            count = per + (1 if i < extra else 0)
            out[mid][topic] = list(range(start, start + count))
            start += count
    return out


def cooperative_sticky_assignment(
    members: Mapping[str, tuple[tuple[str, ...], Owned]], partitions: Mapping[str, int]
) -> Assignment:
    """A cooperative sticky assignment (KIP-429, the shape of Kafka's CooperativeStickyAssignor):
    per topic, each subscriber keeps what it owns up to its balanced share (members owning more
    get the larger shares first), the rest goes to members under their share; then a partition
    given to another member than the one owning it now is held back this round (its owner gives
    it up and rejoins, and the next round assigns it)."""
    out: Assignment = {mid: {} for mid in members}
    for topic in sorted({t for ts, _o in members.values() for t in ts}):
        if topic not in partitions:
            continue
        n = partitions[topic]
        consumers = sorted(mid for mid, (ts, _o) in members.items() if topic in ts)
        owner: dict[int, str] = {}
        for mid in sorted(members):
            for p in sorted(members[mid][1].get(topic, ())):
                if p < n:
                    owner.setdefault(p, mid)
        per, extra = divmod(n, len(consumers))
        had = {mid: [p for p in range(n) if owner.get(p) == mid] for mid in consumers}
        by_size = sorted(consumers, key=lambda m: (-len(had[m]), m))
        quota = {mid: per + (1 if i < extra else 0) for i, mid in enumerate(by_size)}
        target: dict[str, list[int]] = {mid: had[mid][: quota[mid]] for mid in consumers}
        taken = {p for ps in target.values() for p in ps}
        free = [p for p in range(n) if p not in taken]
        for mid in consumers:
            room = quota[mid] - len(target[mid])
            target[mid] += free[:room]
            free = free[room:]
        for mid in consumers:
            # Cooperative: not to a new owner while another member still owns it.
            out[mid][topic] = sorted(p for p in target[mid] if owner.get(p, mid) == mid)
    return out


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
