"""A coordinator node among several on one PostgreSQL store (docs/ha.md "Nodes").

Theory of operation:

* **Registration.** ``start`` takes the node id for this process (a fresh *incarnation*);
  while another live process has it, start waits for that registration to expire (as a Kafka
  broker restarting with its id waits for its old session), at most ``start_timeout_s``. A
  process that finds its id taken by another one (it was stopped or cut off past its
  registration meanwhile), or whose heartbeat reads the store gone back in time (restored
  from a backup) or at another schema version (migrated by a newer build:
  :func:`~.view.store_changed`), is *fenced* for good: it drops everything and its health
  listeners are told; the server exits then (``ClusterMember.gone``).
* **Heartbeats.** Every ``heartbeat_ms`` one transaction (one round trip,
  :meth:`PostgresLeases.tick`) extends the registration, renews the leases held, takes the
  partitions the controller targeted at this node that are free, takes or keeps the
  controller's lease, records the partitions loaded since, and reads the whole cluster back
  (the routing view, :class:`~.view.ClusterView`).
* **Serving deadline.** A lease renewed by a heartbeat sent at ``t`` (this process's monotonic
  clock, read *before* sending) lets the node serve until ``t + lease - margin``:
  PostgreSQL extended it from a later moment, so no other node can hold the partition before
  then. The host (the runtime) refuses every command after the deadline, and when it passes
  without a renewal (PostgreSQL unreachable, the process stopped) every partition is dropped
  (:meth:`PartitionHost.lose_partition`). Appends are fenced in PostgreSQL by the leader
  epoch besides, so a node that lost a partition can never write to it.
* **Taking over at once.** A heartbeat that reads another node's lease, registration or
  controller lease running out before the next heartbeat is due comes back when it has run
  out (PostgreSQL's count from the read, on this node's clock), not up to an interval later:
  a dead node's partitions are taken as soon as its leases allow.
* **Leading.** Partitions taken are loaded (:meth:`PartitionHost.load_partition`),
  ``parallel_loads`` at a time in the order taken (one reads from PostgreSQL while another
  is replayed), and each is served as soon as it is loaded, not when all are. A partition whose target
  became another live node is handed over gracefully: unloaded (its writes finished), then its
  lease released, so the new leader takes it at its next heartbeat. A partition missing from a
  renewal was taken over: dropped at once.
* **The controller** is the node holding the controller's lease (a row of its own, same
  rules: one holder, an epoch that grows, expiry by PostgreSQL's clock). It runs the balancer
  (``runtime/balance.py``) on what its heartbeat read and writes the targets that changed,
  fenced by its controller epoch (a deposed controller writes nothing).
* **Back from an outage.** A heartbeat that reads the cluster half a lease or more after the
  previous one did (this node could not reach PostgreSQL meanwhile) compares it with what it
  read then: a node live then whose registration ran out meanwhile may have been cut off by
  the same outage, not dead (an outage shorter than half a lease makes no registration run
  out). Those nodes are *expected back* for one lease from then (this node's clock): as the
  controller, this node keeps their partitions targeted at them, so each node takes back its
  own, and moves them only if their node has not heartbeated by the end of it (the
  balancer's ``returning``), as Kafka's partitions go back to their leaders after an outage
  of its controllers, rather than move twice. A renewal that got through only after the
  node had dropped its partitions (a heartbeat held up past the deadline) is released at
  once, so they are taken again at the next heartbeat.
* **Starting: nodes expected back.** When every node of a cluster stopped (or died) and they
  start again, the first one up reads every other registration as run out, yet the
  partitions are still targeted at the nodes that led them. For ``startup_grace_ms`` after
  it registered (``coordinator.startup.grace.ms``, by default the lease) a node expects back
  every node some partition is targeted at that is not live (:func:`~coordinator.runtime.
  balance.awaited`): as the controller it keeps their partitions targeted at them, so each
  node takes back its own once, and moves them only if their node has not registered by the
  end of the grace, rather than take them all and hand them back (a double move). A node
  that never comes back leaves its partitions unserved until then at most (or its lease, if
  that runs out later).
* **Stopping** gracefully unloads every partition, releases the leases and unregisters, so the
  others take over at once rather than after the lease.

Blocking PostgreSQL calls run on a thread of their own (never on the event loop).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from coordinator.runtime.balance import Placement, awaited, balance
from coordinator.runtime.store.api import StoreError
from coordinator.runtime.store.postgres_leases import (
    ClusterState,
    Listener,
    PostgresLeases,
    TickResult,
)

from .view import ClusterView, store_changed

__all__ = ["ClusterConfig", "ClusterNode", "NodeStartError", "PartitionHost"]

log = logging.getLogger("kip848.cluster")
T = TypeVar("T")

DEFAULT_LEASE_MS = 10_000
DEFAULT_HEARTBEAT_MS = 1_000
MAX_STARTUP_GRACE_MS = 600_000
EXPIRY_SLACK_S = 0.005
LOAD_RETRY_FIRST_S = 1.0
"""A partition whose load failed is loaded again this long after (:meth:`ClusterNode._load_failed`)."""
LOAD_RETRY_MAX_S = 30.0
"""... doubling while it keeps failing, up to this."""
"""A heartbeat timed for another node's lease to have run out comes this much later."""


class PartitionHost(Protocol):
    """What a node asks of the runtime that serves its partitions."""

    def serve_until(self, deadline: float) -> None:
        """Serve nothing after ``deadline`` (``time.monotonic()`` seconds) unless told a
        later one: the leases held are not known to last longer."""

    async def load_partition(self, partition: int, epoch: int) -> None:
        """Load ``partition`` (its lease taken at ``epoch``: every append to it is fenced by
        that epoch) and serve it once loaded; until then its groups get
        COORDINATOR_LOAD_IN_PROGRESS. Raises if it cannot be loaded."""

    async def unload_partition(self, partition: int) -> None:
        """Stop serving ``partition`` gracefully: new requests get NOT_COORDINATOR, its
        writes in flight finish, its parked requests are answered, its state is dropped."""

    def lose_partition(self, partition: int) -> None:
        """``partition`` is no longer this node's (taken over, or its lease ran out): stop
        serving it at once (NOT_COORDINATOR), drop its state."""

    def follow_cluster_log(self, end: int) -> None:
        """The cluster log's last offset is ``end``: catch up when behind (in the background;
        ``cluster_offset`` tells how far)."""

    @property
    def cluster_offset(self) -> int:
        """The cluster log's last offset applied here."""

    def durable_end(self, partition: int) -> int:
        """The last offset of ``partition``'s log this node knows durable (-1: none)."""


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    node_id: int
    address: str
    """Where this node's gRPC service is reached (``--advertised-address``)."""
    kafka_address: str | None = None
    """Where its Kafka listener is reached (None: none)."""
    lease_ms: int = DEFAULT_LEASE_MS
    """``coordinator.lease.ms``: how long a lease (and a registration) lasts unrenewed."""
    heartbeat_ms: int = DEFAULT_HEARTBEAT_MS
    """``coordinator.heartbeat.interval.ms``: how often the node renews."""
    max_moving: int = 2
    """Partitions the balancer hands over at once (the controller's)."""
    parallel_loads: int = 2
    """Partitions loaded at once (a fail-over takes all of a dead node's)."""
    start_timeout_s: float = 60.0
    """How long ``start`` waits for a previous registration of the node id to expire."""
    startup_grace_ms: int | None = None
    """``coordinator.startup.grace.ms``: for this long after it registered the node expects
    back the nodes partitions are targeted at that are not live (module docstring; None: the
    lease; 0: not at all)."""

    @property
    def grace_ms(self) -> int:
        return self.lease_ms if self.startup_grace_ms is None else self.startup_grace_ms

    @property
    def margin_s(self) -> float:
        """Served this much less than the lease: clocks tick at slightly different rates."""
        return self.lease_ms / 10_000

    def check(self) -> None:
        if not 0 <= self.node_id <= 2**31 - 1:
            raise ValueError(f"a node id is 0..2147483647, got {self.node_id}")
        if self.lease_ms < 100:
            raise ValueError(f"coordinator.lease.ms must be >= 100, got {self.lease_ms}")
        if not 0 <= self.grace_ms <= MAX_STARTUP_GRACE_MS:
            raise ValueError(
                f"coordinator.startup.grace.ms must be 0..{MAX_STARTUP_GRACE_MS}, got "
                f"{self.grace_ms}"
            )
        if self.parallel_loads < 1:
            raise ValueError(f"parallel_loads must be >= 1, got {self.parallel_loads}")
        if not 10 <= self.heartbeat_ms <= self.lease_ms // 3:
            raise ValueError(
                "coordinator.heartbeat.interval.ms must be >= 10 and at most a third of "
                f"coordinator.lease.ms ({self.lease_ms}), got {self.heartbeat_ms}"
            )


class NodeStartError(RuntimeError):
    """The node could not join the cluster (its id is taken, PostgreSQL unreachable)."""


class ClusterNode:
    """See the module docstring."""

    def __init__(
        self,
        leases: PostgresLeases,
        host: PartitionHost,
        config: ClusterConfig,
        partitions: int,
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        config.check()
        self.leases = leases
        self.host = host
        self.config = config
        self.node_id = config.node_id
        self.partitions = partitions
        self.incarnation = uuid.uuid4().hex
        self.view = ClusterView(partitions)
        self.monotonic = monotonic
        self.led: dict[int, int] = {}
        """Partitions whose lease this node holds (loading, serving or handing over) -> epoch."""
        self.serving: set[int] = set()
        """Of those, the ones loaded and served."""
        self.controller_epoch: int | None = None
        self._reached = False  # the last heartbeat reached PostgreSQL
        self._last_read: float | None = None  # when the last heartbeat came back (monotonic)
        self.awaited: dict[int, tuple[float, str]] = {}
        """Nodes expected back, not back yet -> (until when their partitions wait for them,
        ``monotonic``; why: "the lease" after an outage of PostgreSQL, "the startup grace"
        after this node started)."""
        self._grace_until: float | None = None  # this node's startup grace ends then
        self.fenced: str | None = None
        """Why this node stopped for good (its id was taken by another process), or None."""
        self.deadline = 0.0
        self.last_heartbeat = 0.0
        """When the last heartbeat that reached PostgreSQL was sent (``monotonic``)."""
        self.stats = {
            "heartbeats": 0,
            "heartbeat_failures": 0,
            "loads": 0,
            "load_failures": 0,
            "moves": 0,
            "lost": 0,
        }
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="kip848-cluster")
        self._loaded: dict[int, int] = {}  # loaded since the last heartbeat -> epoch
        self._to_load: asyncio.Queue[tuple[int, int]] | None = None
        self._load_retry: dict[int, float] = {}
        """Partitions led here whose last load failed -> the wait before the next try after
        that one fails too (seconds, doubling up to ``LOAD_RETRY_MAX_S``)."""
        self._handing_over: set[int] = set()
        self._tasks: list[asyncio.Task[Any]] = []
        self._deadline_handle: asyncio.TimerHandle | None = None
        self._nap: asyncio.Future[None] | None = None  # the heartbeats' wait for the next
        self._woken = False  # heartbeat again at once
        self._expiry: float | None = None  # another node's lease runs out then (monotonic)
        self._stopping = False
        self._health_listeners: list[Callable[[], None]] = []
        self._listener: Listener | None = None
        self._settled: asyncio.Event | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Register (waiting for an earlier registration of this id to expire), then
        heartbeat, load, hand over and decide in the background."""
        loop = asyncio.get_running_loop()
        self._to_load = asyncio.Queue()
        self._settled = asyncio.Event()
        cfg = self.config
        give_up = self.monotonic() + cfg.start_timeout_s
        while True:
            try:
                wait_ms = await self._call(
                    self.leases.register,
                    cfg.node_id,
                    self.incarnation,
                    cfg.address,
                    cfg.kafka_address,
                    cfg.lease_ms,
                )
            except StoreError as exc:
                if self.monotonic() >= give_up:
                    raise NodeStartError(f"node {cfg.node_id} cannot register: {exc}") from exc
                log.warning("Node %d cannot register yet: %s", cfg.node_id, exc)
                await asyncio.sleep(min(1.0, cfg.heartbeat_ms / 1000))
                continue
            if wait_ms is None:
                break
            if self.monotonic() + wait_ms / 1000 > give_up:
                raise NodeStartError(
                    f"node id {cfg.node_id} is registered by another running process (its "
                    f"registration expires in {wait_ms} ms): each node needs an id of its own"
                )
            log.warning(
                "Node id %d is still registered by an earlier process; waiting %d ms for its "
                "registration to expire.",
                cfg.node_id,
                wait_ms,
            )
            await asyncio.sleep(wait_ms / 1000 + 0.01)
        self._grace_until = self.monotonic() + cfg.grace_ms / 1000
        log.info(
            "Node %d registered (lease %d ms, heartbeat every %d ms).",
            cfg.node_id,
            cfg.lease_ms,
            cfg.heartbeat_ms,
        )
        if self.leases.dsn:
            self._listener = Listener(self.leases.dsn, waker(loop, self.wake))
            self._listener.start()
        await self._heartbeat()
        self._tasks = [
            loop.create_task(self._heartbeats(), name="kip848-cluster-heartbeats"),
            *(
                loop.create_task(self._loader(), name=f"kip848-cluster-loader-{i}")
                for i in range(cfg.parallel_loads)
            ),
        ]

    async def stop(self) -> None:
        """Leave gracefully: unload every partition, release the leases, unregister."""
        if self._stopping:
            return
        self._stopping = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - stopping anyway
                pass
        self._cancel_deadline()
        if self._listener is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._listener.stop)
        held = dict(self.led)
        for p in sorted(held):
            try:
                await self.host.unload_partition(p)
            except Exception:  # its lease expires anyway
                log.exception("Unloading partition %d failed", p)
        self.led.clear()
        self.serving.clear()
        if self.fenced is None:
            try:
                await self._call(self.leases.release, self.node_id, held)
                await self._call(self.leases.unregister, self.node_id, self.incarnation)
            except StoreError as exc:
                log.warning("Leaving the cluster cleanly failed (leases expire anyway): %s", exc)
        await asyncio.get_running_loop().run_in_executor(self._executor, self.leases.close)
        self._executor.shutdown(wait=False)

    async def settle(self, timeout_s: float) -> bool:
        """Wait until this node has its first share (:meth:`_check_settled`), at most
        ``timeout_s``; False if it has not by then."""
        assert self._settled is not None, "start() first"
        try:
            async with asyncio.timeout(timeout_s):
                await self._settled.wait()
        except TimeoutError:
            return False
        return True

    def _check_settled(self) -> None:
        """Settled: every partition has a live target (the controller decided) or one
        expected back, and those targeted here are served here, except the ones another live
        node still holds (being handed over: they come later, a few at a time)."""
        state = self.view.state
        if self._settled is None or self._settled.is_set() or state is None:
            return
        live = set(state.live())
        if self.node_id not in live:
            return
        for lease in state.leases:
            if lease.target in self.awaited:
                continue  # its node is expected back: not this node's to wait for
            if lease.target is None or lease.target not in live:
                return
            if lease.target != self.node_id or lease.partition in self.serving:
                continue
            if lease.held and lease.leader != self.node_id and lease.leader in live:
                continue
            return
        self._settled.set()

    def add_health_listener(self, listener: Callable[[], None]) -> None:
        self._health_listeners.append(listener)

    @property
    def reachable(self) -> bool:
        """The last heartbeat reached PostgreSQL, recently enough for its leases to hold."""
        return self._reached and self.monotonic() < self.deadline

    @property
    def healthy(self) -> bool:
        """Registered, and either leading something or able to reach PostgreSQL: a node that
        leads nothing because it cannot reach PostgreSQL is of no use to any client."""
        return self.fenced is None and (self.reachable or bool(self.serving))

    def _health_changed(self) -> None:
        for listener in self._health_listeners:
            listener()

    # ------------------------------------------------------------------ routing

    def leader_of(self, partition: int) -> int | None:
        """Who leads ``partition``: this node when it holds the lease (loading or serving),
        else the view's leader (None: nobody known). Never this node from the view: what it
        leads itself is current, the view may be older — a node that dropped its partitions
        at its deadline (paused, cut off from PostgreSQL) still reads itself there until its
        next heartbeat, and would send clients back to itself, to NOT_COORDINATOR."""
        if partition in self.led:
            return self.node_id
        leader = self.view.leader(partition)
        return None if leader == self.node_id else leader

    def partition_state(self, partition: int) -> str:
        """``serving``, ``loading``, ``unloading`` (handed over), or ``none`` (not led here)."""
        if partition in self._handing_over:
            return "unloading"
        if partition in self.serving:
            return "serving"
        return "loading" if partition in self.led else "none"

    # ------------------------------------------------------------------ heartbeats

    async def _heartbeats(self) -> None:
        interval = self.config.heartbeat_ms / 1000
        loop = asyncio.get_running_loop()
        while True:
            if not self._woken:
                nap: asyncio.Future[None] = loop.create_future()
                self._nap = nap
                delay = interval
                if self._expiry is not None:
                    delay = min(delay, max(0.0, self._expiry - self.monotonic()))
                handle = loop.call_later(delay, _done, nap)
                try:
                    await nap
                finally:
                    handle.cancel()
                    self._nap = None
            self._woken = False
            try:
                await self._heartbeat()
            except asyncio.CancelledError:
                raise
            except Exception:  # a heartbeat must never stop the next
                log.exception("Node %d: heartbeat failed unexpectedly", self.node_id)

    def wake(self) -> None:
        """Heartbeat now (a partition was loaded or released: tell PostgreSQL at once)."""
        self._woken = True
        if self._nap is not None:
            _done(self._nap)

    async def _heartbeat(self) -> None:
        self._expiry = None  # this heartbeat reads the next one
        if self.fenced is not None or self._stopping:
            return
        now = self.monotonic()
        if self.led and now >= self.deadline:
            self._lose_all("its leases ran out before it could renew them")
        cfg = self.config
        held = dict(self.led)
        loaded, self._loaded = self._loaded, {}
        applied = self.host.cluster_offset  # durable: the log's end can be no earlier
        written = {p: self.host.durable_end(p) for p in held}  # nor a partition's
        sent = self.monotonic()
        try:
            tick: TickResult = await self._call(
                self.leases.tick,
                cfg.node_id,
                self.incarnation,
                held,
                cfg.lease_ms,
                controller_epoch=self.controller_epoch,
                cluster_offset=applied,
                loaded=loaded,
                acquire=not self._stopping,
                written=written,
            )
        except StoreError as exc:
            self.stats["heartbeat_failures"] += 1
            for p, e in loaded.items():  # tell it next time
                self._loaded.setdefault(p, e)
            if self._reached:
                log.warning("Node %d cannot reach PostgreSQL: %s", cfg.node_id, exc)
            self._reached = False
            self._health_changed()
            return
        self.stats["heartbeats"] += 1
        read, last_read = self.monotonic(), self._last_read
        self._last_read = read
        self.last_heartbeat = sent
        was_reachable = self.reachable
        self._reached = True
        if not tick.registered:
            self.fenced = (
                f"node id {cfg.node_id} was registered by another process while this one could "
                "not renew its registration"
                if cfg.node_id in tick.state.nodes  # nothing deletes a registration
                else f"node id {cfg.node_id}'s registration is gone from the store (restored "
                "from a backup taken before this node started?)"
            )
            log.critical("%s: this node stops serving and exits.", self.fenced)
            self._lose_all(self.fenced)
            self._health_changed()
            return
        changed = store_changed(tick.state, held, applied, written, tick.log_ends)
        if changed is not None:
            self.fenced = changed
            log.critical("%s: this node stops serving and exits.", self.fenced)
            self._lose_all(self.fenced)
            self._health_changed()
            return
        for p in sorted(set(held) - tick.renewed):
            if p in self.led and self.led[p] == held[p]:
                log.warning(
                    "Node %d lost partition %d (epoch %d): taken over.", cfg.node_id, p, held[p]
                )
                self._lose(p)
        self._extend(sent)
        stale = {p: held[p] for p in tick.renewed if p not in self.led}
        if stale:
            # Renewed by a heartbeat that got through only after this node had dropped them
            # (its deadline passed while it waited): give them up at once, so they are taken
            # again now rather than when that renewal runs out.
            await self._give_back(stale)
        for p, epoch in sorted(tick.acquired.items()):
            self.led[p] = epoch
            assert self._to_load is not None
            self._to_load.put_nowait((p, epoch))
        if tick.acquired:
            log.info("Node %d took partitions %s.", cfg.node_id, ", ".join(map(str, tick.acquired)))
        if not was_reachable:
            self._health_changed()
        blind = last_read is not None and read - last_read >= cfg.lease_ms / 2000
        self._expect_back(tick.state, read if blind else None)
        self.view.update(tick.state)
        self._expiry = self._next_expiry(tick.state)
        self.host.follow_cluster_log(tick.state.cluster_log_end)
        if tick.controller_epoch is not None:
            if self.controller_epoch != tick.controller_epoch:
                log.info(
                    "Node %d is the controller (epoch %d).", cfg.node_id, tick.controller_epoch
                )
            self.controller_epoch = tick.controller_epoch
            await self._decide(tick.state)
        else:
            self.controller_epoch = None
        self._hand_over(tick.state)
        self._check_settled()

    async def _give_back(self, stale: dict[int, int]) -> None:
        try:
            await self._call(self.leases.release, self.node_id, stale)
        except StoreError as exc:  # they run out by themselves
            log.warning("Node %d: releasing partitions %s failed: %s", self.node_id, stale, exc)
            return
        self.wake()

    @property
    def expected_back(self) -> set[int]:
        """The nodes whose partitions wait for them (the balancer's ``returning``)."""
        return set(self.awaited)

    def expected_back_ms(self) -> dict[int, int]:
        """Each node expected back -> how long (ms) its partitions still wait for it."""
        now = self.monotonic()
        return {n: max(0, round((t - now) * 1000)) for n, (t, _) in sorted(self.awaited.items())}

    def _expect_back(self, state: ClusterState, back_at: float | None) -> None:
        """Update :attr:`awaited` from a heartbeat's read (``back_at``: it came back then,
        after this node could not reach PostgreSQL; None: it could all along)."""
        live = set(state.live())
        before = self.view.state
        now = self.monotonic()
        if back_at is not None and before is not None:
            gone = set(before.live()) - live - {self.node_id}
            if gone:
                self._await(gone, back_at + self.config.lease_ms / 1000, "the lease")
                log.warning(
                    "Node %d reached PostgreSQL again; the registrations of nodes %s ran out "
                    "meanwhile: their partitions wait up to %d ms for them to come back.",
                    self.node_id,
                    ", ".join(map(str, sorted(gone))),
                    self.config.lease_ms,
                )
        grace = self._grace_until
        if grace is not None and now < grace:
            placements = [Placement(None, lease.target) for lease in state.leases]
            new = awaited(placements, live) - set(self.awaited) - {self.node_id}
            if new:
                self._await(new, grace, "the startup grace")
                log.warning(
                    "Node %d started; coordinator partitions are targeted at nodes %s, not "
                    "running yet: they wait up to %d ms for them to come back.",
                    self.node_id,
                    ", ".join(map(str, sorted(new))),
                    round((grace - now) * 1000),
                )
        targeted = {lease.target for lease in state.leases}
        for n in [n for n in self.awaited if n in live or n not in targeted]:
            del self.awaited[n]  # back, or given up by the controller (nothing waits for it)
        given_up: dict[str, list[int]] = {}
        for n, (until, why) in sorted(self.awaited.items()):
            if now >= until:
                given_up.setdefault(why, []).append(n)
                del self.awaited[n]
        for why, nodes in given_up.items():
            log.warning(
                "Node %d: nodes %s did not come back within %s; their partitions move.",
                self.node_id,
                ", ".join(map(str, nodes)),
                why,
            )

    def _await(self, nodes: set[int], until: float, why: str) -> None:
        for n in nodes:
            if n not in self.awaited or self.awaited[n][0] < until:
                self.awaited[n] = (until, why)

    def _next_expiry(self, state: ClusterState) -> float | None:
        """When (``monotonic``) the first lease, registration or controller lease of another
        node that PostgreSQL read as running runs out, or the nodes expected back are given up
        (None: none). Counted from now, after the read: never early."""
        me = self.node_id
        left = [row.expires_in_ms for n, row in state.nodes.items() if n != me]
        left += [
            lease.expires_in_ms
            for lease in state.leases
            if lease.leader not in (None, me) and lease.expires_in_ms is not None
        ]
        if state.controller not in (None, me) and state.controller_expires_in_ms is not None:
            left.append(state.controller_expires_in_ms)
        running = [ms for ms in left if ms > 0]
        now = self.monotonic()
        due = [now + min(running) / 1000] if running else []
        if self.awaited:  # decide again when the first is given up
            due.append(max(now, min(until for until, _ in self.awaited.values())))
        return min(due) + EXPIRY_SLACK_S if due else None

    def _extend(self, sent: float) -> None:
        self.deadline = sent + self.config.lease_ms / 1000 - self.config.margin_s
        self.host.serve_until(self.deadline)
        self._cancel_deadline()
        self._arm_deadline()

    def _arm_deadline(self, floor_s: float = 0.0) -> None:
        loop = asyncio.get_running_loop()
        self._deadline_handle = loop.call_later(
            max(floor_s, self.deadline - self.monotonic()), self._deadline_passed
        )

    def _cancel_deadline(self) -> None:
        if self._deadline_handle is not None:
            self._deadline_handle.cancel()
            self._deadline_handle = None

    def _deadline_passed(self) -> None:
        self._deadline_handle = None
        if self.monotonic() < self.deadline:
            # Early: uvloop's timers count whole milliseconds of a clock libuv truncates, so
            # this may run up to one before the deadline. Look again then: a heartbeat that
            # hangs (PostgreSQL that takes the statement and never answers) is no new chance.
            # At least 1 ms on: less would be rounded to none and run again at once.
            self._arm_deadline(0.001)
            return
        self._lose_all("its leases ran out (PostgreSQL did not answer its heartbeats)")

    def fenced_off(self, p: int) -> None:
        """The host found ``p`` taken over (an append to it was fenced off) and dropped it:
        forget it here too (no renewal, no hand-over)."""
        if p in self.led:
            log.warning(
                "Node %d lost partition %d: an append to it was fenced off.", self.node_id, p
            )
            self.led.pop(p, None)
            self.serving.discard(p)
            self._handing_over.discard(p)
            self._loaded.pop(p, None)
            self.stats["lost"] += 1
            self._health_changed()

    def _lose(self, p: int) -> None:
        self._load_retry.pop(p, None)
        self.led.pop(p, None)
        self.serving.discard(p)
        self._handing_over.discard(p)
        self._loaded.pop(p, None)
        self.stats["lost"] += 1
        self.host.lose_partition(p)

    def _lose_all(self, why: str) -> None:
        if self.led:
            log.error(
                "Node %d stops serving partitions %s: %s.",
                self.node_id,
                ", ".join(map(str, sorted(self.led))),
                why,
            )
        for p in sorted(self.led):
            self._lose(p)
        self._health_changed()

    # ------------------------------------------------------------------ loading

    async def _loader(self) -> None:
        queue = self._to_load
        assert queue is not None
        while True:
            p, epoch = await queue.get()
            if self.led.get(p) != epoch:
                continue  # lost before its turn
            started = self.monotonic()
            try:
                await self.host.load_partition(p, epoch)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - kept, loaded again after a wait
                self._load_failed(p, epoch, exc)
                continue
            if self.led.get(p) != epoch:
                continue  # lost while loading: the host was told
            self._load_retry.pop(p, None)
            self.serving.add(p)
            self._loaded[p] = epoch
            self.stats["loads"] += 1
            log.debug(
                "Node %d serves partition %d (epoch %d), loaded in %.0f ms.",
                self.node_id,
                p,
                epoch,
                (self.monotonic() - started) * 1e3,
            )
            self._health_changed()
            self._check_settled()
            if queue.empty():
                self.wake()

    def _load_failed(self, p: int, epoch: int, exc: Exception) -> None:
        """A load that failed (the store unreachable or a read that failed, a record this
        build cannot read): the partition stays led here, loading — its clients are answered
        COORDINATOR_LOAD_IN_PROGRESS, nobody else serves it meanwhile, its epoch stays — and
        is loaded again after ``LOAD_RETRY_FIRST_S``, doubling up to ``LOAD_RETRY_MAX_S``
        while it keeps failing; handed to another node if the controller moves it. (Given
        back at once, it was taken again by the next heartbeat at a new epoch, read whole
        and failed again, every heartbeat.)"""
        if self.led.get(p) != epoch:
            return  # lost meanwhile: the host was told
        wait = self._load_retry.get(p, LOAD_RETRY_FIRST_S)
        self._load_retry[p] = min(wait * 2, LOAD_RETRY_MAX_S)
        self.stats["load_failures"] += 1
        log.error(
            "Node %d could not load partition %d (epoch %d): %r; loading it again in %.0f s.",
            self.node_id,
            p,
            epoch,
            exc,
            wait,
        )
        asyncio.get_running_loop().call_later(wait, self._load_again, p, epoch)

    def _load_again(self, p: int, epoch: int) -> None:
        if (
            self.led.get(p) == epoch
            and p not in self.serving
            and p not in self._handing_over
            and not self._stopping
            and self._to_load is not None
        ):
            self._to_load.put_nowait((p, epoch))

    # ------------------------------------------------------------------ hand-overs

    def _hand_over(self, state: ClusterState) -> None:
        """Partitions led here whose target is another live node: unload, then release (one
        whose load failed and waits to be loaded again: released at once)."""
        live = set(state.live())
        for lease in state.leases:
            p = lease.partition
            moved = (
                lease.target is not None and lease.target != self.node_id and lease.target in live
            )
            if moved and p in self._load_retry and p in self.led and p not in self.serving:
                epoch = self.led[p]
                self._lose(p)
                task = asyncio.get_running_loop().create_task(
                    self._give_back({p: epoch}), name=f"kip848-give-back-{p}"
                )
                self._tasks.append(task)
                task.add_done_callback(self._tasks.remove)
                continue
            if (
                p in self.serving
                and p not in self._handing_over
                and lease.target is not None
                and lease.target != self.node_id
                and lease.target in live
            ):
                self._handing_over.add(p)
                task = asyncio.get_running_loop().create_task(
                    self._release(p, self.led[p], lease.target), name=f"kip848-hand-over-{p}"
                )
                self._tasks.append(task)
                task.add_done_callback(self._tasks.remove)

    async def _release(self, p: int, epoch: int, to: int) -> None:
        log.info("Node %d hands partition %d over to node %d.", self.node_id, p, to)
        try:
            await self.host.unload_partition(p)
        finally:
            if self.led.get(p) == epoch:
                self.led.pop(p)
                self.serving.discard(p)
            self._handing_over.discard(p)
        self.stats["moves"] += 1
        try:
            await self._call(self.leases.release, self.node_id, {p: epoch})
        except StoreError as exc:  # the lease expires by itself
            log.warning("Node %d: releasing partition %d failed: %s", self.node_id, p, exc)

    # ------------------------------------------------------------------ the controller

    async def _decide(self, state: ClusterState) -> None:
        """Run the balancer on what the heartbeat read; write the targets that change."""
        live = state.live()
        if not live:
            return
        placements = [
            Placement(lease.leader if lease.held else None, lease.target, lease.pinned)
            for lease in state.leases
        ]
        targets = balance(
            placements, live, max_moving=self.config.max_moving, returning=self.expected_back
        )
        changed = {
            lease.partition: targets[i]
            for i, lease in enumerate(state.leases)
            if targets[i] != lease.target
        }
        if not changed:
            return
        epoch = self.controller_epoch
        assert epoch is not None
        try:
            written = await self._call(self.leases.set_targets, self.node_id, epoch, changed)
        except StoreError as exc:
            log.warning("Controller %d could not write targets: %s", self.node_id, exc)
            return
        if not written:
            log.warning("Node %d is no longer the controller.", self.node_id)
            self.controller_epoch = None
            return
        log.info(
            "Controller %d: %s.",
            self.node_id,
            ", ".join(f"partition {p} -> node {n}" for p, n in sorted(changed.items())),
        )
        if any(n == self.node_id for n in changed.values()):
            self.wake()  # take them now, not a heartbeat later

    # ------------------------------------------------------------------ plumbing

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, lambda: fn(*args, **kwargs))

    def describe(self) -> dict[str, Any]:
        """This node's side of ``kip848 cluster describe`` and the metrics."""
        return {
            "node_id": self.node_id,
            "controller": self.controller_epoch is not None,
            "reachable": self.reachable,
            "fenced": self.fenced,
            "partitions": {
                p: {"epoch": e, "state": self.partition_state(p)}
                for p, e in sorted(self.led.items())
            },
            "expected_back_ms": self.expected_back_ms(),
            **self.stats,
        }


def _done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def waker(loop: asyncio.AbstractEventLoop, wake: Callable[[], None]) -> Callable[[], None]:
    """What the PostgreSQL listener's thread calls on a notification: ``wake`` on ``loop``;
    nothing once the loop is closed (the node is gone: a notification arriving as it stops
    must not end the thread with a traceback)."""

    def notified() -> None:
        try:
            loop.call_soon_threadsafe(wake)
        except RuntimeError:  # the loop is closed
            pass

    return notified
