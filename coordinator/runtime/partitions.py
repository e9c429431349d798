"""The runtime's side of a node among several on one PostgreSQL store (docs/ha.md): what a
cluster node (``coordinator/cluster/node.py``, its ``PartitionHost``) asks of the engine.

Theory of operation:

* **Start.** Sharing the store, the engine loads only the cluster log (topics, users, ACLs)
  at start; partitions come one by one as the node takes their leases.
* **Load** (``load_partition``): the partition turns *loading* (its groups get
  COORDINATOR_LOAD_IN_PROGRESS), its log is read on a loader thread (up to
  :data:`LOAD_THREADS` partitions at once) into a fresh shard nobody sees yet, then the shard
  takes the partition's place and serves, with its members' timers armed anew (Kafka's onLoaded: a full session for every member, the rebalance and
  assignment timers in progress) and its offset expiration. A partition lost while loading is
  never installed.
* **Unload** (a graceful hand-over): new commands get NOT_COORDINATOR at once, the writes
  holding its records finish, then it is dropped.
* **Drop** (handed over, taken over, its lease ran out): NOT_COORDINATOR from now on; parked
  requests of its groups, and requests waiting for a write that holds their records, get
  NOT_COORDINATOR at once (the client finds the new coordinator and retries, as after Kafka's
  unload: an append held up in PostgreSQL — a COMMIT waiting for PostgreSQL to come back to
  learn its outcome — never holds them past the drop); its timers (and the timer operations
  its commands left in batches still outstanding: a batch landing later arms none of them,
  even once the partition is loaded again), first targets, offloads and regex resolutions
  are forgotten, push streams of its groups end with NOT_COORDINATOR,
  and an empty shard takes its place. The old shard is closed (nothing is applied to it any
  more) and freed by reference counting a slice per loop iteration, never by a collection of
  the node's state (``collector.free_dropped``; so is a shard loaded for a partition lost
  meanwhile). The write itself resolves later: refused by PostgreSQL (fenced by the leader
  epoch this node no longer holds), failed, or committed — then the new leader loads it.
* **Fenced appends.** Every batch names the leader epochs of the partitions this node leads
  (``Leadership.fence``); a batch refused for a partition means another node took it over:
  the partition is dropped at once and the cluster node told. A batch refused because the
  cluster log moved on (another node appended to it) makes this node catch up first.
* **The cluster log** is followed: when a heartbeat reads a longer log than applied here, its
  journal's new entries are read and decoded on a loader thread and replayed into the registry
  (between writes of this node's own to it: a write decided on the older state is refused by
  the store and rolled back, which must not undo what was applied), in steps of the loop
  that end at an append's end (:data:`STEP_RECORDS`; the committed copy a loop step after
  the registry; an append larger than a step, of any record types, in parts, read whole or
  not at all), the registry's commands held until the last (``Leadership.cluster_held``,
  :meth:`Partitions.applied`). Topics others deleted lose their offsets in the partitions
  served here, as in the deleting node's — a topic deleted and created again (another topic
  id) before this node applied both too. The log is loaded with its end as of the loaded
  view (``RecordStore.load_snapshot``), past the view's last record when the newest entries
  were tombstones. When the journal no longer holds what this node has not applied (journal
  retention removed it), the compacted view is loaded again in place of the node's copy
  (Kafka's broker loading a metadata snapshot: compared with the copy off the loop, only
  what changed applied on it, in parts as a large append is, read whole or not at all), and
  the journal followed from its end.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Any

from coordinator.core import codec
from coordinator.core.errors import CoordinatorError, NotCoordinatorError
from coordinator.core.records import ConfigKey, Record, TopicKey, TopicValue
from coordinator.factory import group_configs_of
from coordinator.routing import partition_for

from .collector import free_dropped, freeze_new, no_collections
from .leadership import Leadership, PartitionState
from .loader import LoadStats, ShardLoadStats, cluster_changes, load_cluster, load_partition
from .store import CLUSTER_LOG, Fence, StoreFencedError

if TYPE_CHECKING:
    from .driver import Batch, Driver
    from .store import RecordStore
    from .watchers import GroupWatchers

__all__ = ["Partitions"]

log = logging.getLogger("kip848.runtime")

LOAD_THREADS = 2
"""Partitions read and replayed at once (the cluster node's ``parallel_loads``): one waits for
PostgreSQL's rows while another is replayed."""

STEP_RECORDS = 500
"""A catch-up applies what it read from the journal in steps of the loop: whole appends (an
append's records share its timestamp), at least one, until this many records (5-6 ms of the
loop at 10-12 µs a record, the committed copy and the topics' images included), then the loop
serves what came meanwhile before the next step (Kafka's metadata loader publishing at batch
boundaries)."""

RELEASE_SLICE = 5000
"""Entries a catch-up read that are freed a loop step once applied (:func:`_release`)."""

_CATCH_UP_ROUNDS = 1000
"""A catch-up reads the journal at most this many times before it waits for the next
heartbeat (each round applies everything written since the previous one)."""


class Partitions:
    """See the module docstring. Set up by ``Engine.share_partitions`` before the engine
    starts; ``writer``: the engine's writer thread (store calls ordered with the appends)."""

    def __init__(
        self,
        driver: Driver,
        store: RecordStore,
        watchers: GroupWatchers,
        writer: Executor,
        node_id: int,
        new_shard: Callable[[], Any],
    ) -> None:
        self.driver = driver
        self.store = store
        self.watchers = watchers
        self.writer = writer
        self.new_shard = new_shard
        self.lead = Leadership(self.driver.shard_count, node_id=node_id, monotonic=time.monotonic)
        self.driver.lead = self.lead
        self.cluster_offset = -1
        """The cluster log's last offset applied to the registry."""
        self.on_fenced: Callable[[int], None] | None = None
        """Told of a partition an append found taken over (the node stops renewing it)."""
        self.loads: dict[int, ShardLoadStats] = {}
        """The load of each partition this node serves (its metrics)."""
        self._loader = ThreadPoolExecutor(LOAD_THREADS, thread_name_prefix="kip848-loader")
        self._catching_up: asyncio.Task[None] | None = None
        self._catch_up_to = -1
        self._applying: asyncio.Future[None] | None = None
        """Set while a catch-up applies its read in several steps (the registry held)."""
        self._stale: tuple[Batch, set[int]] | None = None
        """The pending batch and the partitions dropped while it held their records."""

    async def close(self) -> None:
        """Stop following the cluster log. An application in steps under way ends first, at
        an append's end (once the runtime stops, at the end of the step it is in; an append
        in parts whole): cancelled between two parts, the copies staged would be shown with
        part of an append (what the committed copy answers after the close: the authorizer,
        SASL/SCRAM), or whole without its end (the groups' topics as before it)."""
        task = self._catching_up
        if task is not None:
            await self.applied()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self._loader.shutdown(wait=False)

    # ------------------------------------------------------------------ start

    async def load_cluster(self) -> LoadStats:
        """At start: the cluster log only (on a loader thread)."""
        return await asyncio.get_running_loop().run_in_executor(self._loader, self._load_cluster)

    def _load_cluster(self) -> LoadStats:
        started = time.perf_counter()
        stats = LoadStats(shards=[])
        stats.topic_records, stats.last_offset = load_cluster(
            self.store, self.driver.registry, self.driver.committed
        )
        stats.topics = len(self.driver.registry.topics)
        stats.seconds = time.perf_counter() - started
        self._adopt_cluster_log(stats.last_offset)
        self.cluster_offset = stats.last_offset
        return stats

    def _adopt_cluster_log(self, last: int) -> None:
        """The registry holds the cluster log up to ``last``: appends to it go after that
        (refused if others appended since: then this node catches up)."""
        adopt = getattr(self.store, "adopt", None)
        if adopt is not None:
            adopt(CLUSTER_LOG, last + 1)

    # ------------------------------------------------------------------ PartitionHost

    def serve_until(self, deadline: float) -> None:
        """Serve no partition after ``deadline`` (``time.monotonic()``) unless told later."""
        self.lead.deadline = deadline

    def durable_end(self, partition: int) -> int:
        """The last offset of ``partition``'s log this node knows durable: appended by it, or
        read when it took the partition (the store's handle; read without waiting for a
        write in flight, whose offsets count once it is durable)."""
        return int(self.store.last_offset(partition))

    def joined(self) -> None:
        """The node has its first share: requests are answered (no longer all loading)."""
        self.lead.joining = False

    async def load_partition(self, partition: int, epoch: int) -> None:
        """Take ``partition`` at ``epoch`` (see the module docstring)."""
        driver = self.driver
        loop = asyncio.get_running_loop()
        self.lead.set(partition, PartitionState.LOADING, epoch)
        shard = self.new_shard()
        adopt = getattr(self.store, "adopt", None)

        def load() -> Any:
            if adopt is not None:
                adopt(partition)  # its next offset: the previous leader wrote there
            return load_partition(self.store, partition, shard)

        loading = self._loader.submit(load)
        try:
            stats = await asyncio.wrap_future(loading, loop=loop)
        except BaseException:
            # Dropped once the loader has finished with it (still building it if this task
            # was cancelled).
            loading.add_done_callback(partial(_drop_later, loop, shard, partition))
            if self.lead.epochs.get(partition) == epoch:
                self.lose_partition(partition)
            raise
        if not self.install(partition, epoch, shard, stats):
            return  # lost meanwhile (the cluster node knows)
        log.info(
            "Loaded shard %d at leader epoch %d: %d records, %d groups in %.1f ms.",
            partition,
            epoch,
            stats.records,
            stats.groups,
            stats.seconds * 1e3,
        )
        await migrate_group_configs(driver, partition, self.applied)

    def install(self, partition: int, epoch: int, shard: Any, stats: ShardLoadStats) -> bool:
        """The end of a load, on the loop: ``shard`` (``partition``'s log read into it) takes
        the partition's place and serves at ``epoch``, its members' timers armed anew. False,
        and the shard dropped, when the partition was lost (or taken again at another epoch)
        while it loaded. (``load_partition``'s; the simulator's moves load on virtual time.)"""
        driver = self.driver
        if self.lead.epochs.get(partition) != epoch or not driver.active:
            _drop(shard, partition)
            return False
        self._replace(partition, shard)
        shard.set_topics(driver.registry.image())
        self.lead.set(partition, PartitionState.SERVING)
        self.loads[partition] = stats
        driver.timing.arm_partition(partition, shard)
        return True

    async def unload_partition(self, partition: int) -> None:
        """Hand ``partition`` over: refuse new commands, let its writes finish, forget it.
        Dropped meanwhile (its lease ran out while a write was held up), the hand-over ends
        with the drop, and leaves alone the partition taken again at a newer epoch since."""
        epoch = self.lead.epochs.get(partition)
        if self.lead.states[partition] is not PartitionState.NOT_LED:
            self.lead.set(partition, PartitionState.UNLOADING)
        batch: Batch | None = self.driver._last_batch.get(partition)
        if batch is not None:
            try:
                await self.driver.wait(batch, index=partition)
            except CoordinatorError:
                pass
        if self.lead.epochs.get(partition) != epoch:
            return  # dropped meanwhile (and perhaps taken again): not this hand-over's
        self.lose_partition(partition)

    def lose_partition(self, partition: int) -> None:
        """``partition`` is no longer this node's: drop it at once (module docstring)."""
        driver = self.driver
        self.lead.set(partition, PartitionState.NOT_LED)
        self.loads.pop(partition, None)
        error = NotCoordinatorError(
            f"Coordinator partition {partition} moved away from this node: ask FindCoordinator "
            "again."
        )
        for key in [k for k in driver.parked if k[0] == partition]:
            fut = driver.parked.pop(key)
            if not fut.done():
                fut.set_exception(error)
        driver.answer_dropped(partition, error)
        driver.timing.drop_partition(partition)
        n = driver.shard_count
        driver.own.forget(lambda g: partition_for(g, n) == partition)
        self._replace(partition, self.new_shard())
        watchers = self.watchers
        watchers.notify([g for g in watchers.groups() if partition_for(g, n) == partition])

    def _replace(self, index: int, shard: Any) -> None:
        """Put ``shard`` in place of partition ``index``'s state machine; the old one is
        dropped (:func:`_drop`). Batches still outstanding hold marks of the old one: dropped
        (nothing of theirs belongs to the new one; a failure of theirs does not roll it back),
        their end marks the new one's current mark."""
        driver = self.driver
        pending = driver.pending
        if pending is not None and index in pending.start_marks:
            # Records of the machine dropped here wait in the next batch: written under no
            # later epoch (:meth:`fence_of`).
            if self._stale is None or self._stale[0] is not pending:
                self._stale = (pending, set())
            self._stale[1].add(index)
        _drop(driver._machines[index], index)
        driver._machines[index] = shard
        driver.shards[index] = shard
        driver.forget_outstanding(index)
        mark = shard.mark()
        for batch in (driver.pending, driver.inflight):
            if batch is not None:
                batch.start_marks.pop(index, None)
                if batch.end_marks is not None:
                    batch.end_marks[index] = mark

    def fence_of(self, batch: Batch) -> Fence | None:
        """What ``batch`` (the writer's next) is appended under: the epochs of the partitions
        led here, except that a partition dropped while records of its dropped state machine
        waited in the batch gets none (-1: refused, even if this node took it again since),
        so those records never land under a newer tenure."""
        fence = self.lead.fence()
        stale, self._stale = self._stale, None
        if fence is None or stale is None or stale[0] is not batch:
            return fence
        return Fence(fence.node_id, {**fence.epochs, **dict.fromkeys(stale[1], -1)})

    def fenced(self, exc: StoreFencedError, fence: Fence | None = None) -> None:
        """An append refused: partitions taken over by another node are dropped at once;
        the cluster log moved on: catch up (the batch failed retriably either way).
        ``fence``: the epochs the append was sent with; a partition this node took again at
        another epoch since is not the one that was taken over: kept."""
        for p in sorted(exc.partitions):
            if p == CLUSTER_LOG:
                self.follow_cluster_log(2**62)
            elif fence is not None and fence.epochs.get(p) != self.lead.epochs.get(p):
                continue
            elif self.lead.states[p] is not PartitionState.NOT_LED:
                log.error("Partition %d was taken over by another node: dropped.", p)
                self.lose_partition(p)
                if self.on_fenced is not None:
                    self.on_fenced(p)

    def written(self, offsets: dict[int, int]) -> None:
        """A batch was appended (each log's last offset)."""
        last = offsets.get(CLUSTER_LOG)
        if last is not None:
            self.cluster_offset = last

    # ------------------------------------------------------------------ the cluster log

    def follow_cluster_log(self, end: int) -> None:
        """The cluster log ends at ``end`` (a heartbeat read it; -1: empty): catch up in the
        background if behind."""
        self._catch_up_to = max(self._catch_up_to, end)
        if end > self.cluster_offset and self._catching_up is None and self.driver.active:
            self._catching_up = asyncio.get_running_loop().create_task(
                self._catch_up(), name="kip848-cluster-log"
            )

    async def caught_up(self) -> None:
        """Once this node has applied the cluster log up to what it last learned of its end
        (at once when it has; a catch-up stopped by the runtime's close ends it too)."""
        task = self._catching_up
        if task is not None:
            await asyncio.wait([task])

    async def applied(self) -> None:
        """Once no catch-up is between two of its steps (at once when none is): a command of
        the topic registry waits for this before it runs (``Leadership.cluster_held``)."""
        while self._applying is not None:
            await asyncio.shield(self._applying)

    async def _catch_up(self) -> None:
        driver = self.driver
        loop = asyncio.get_running_loop()
        registry_index = driver.shard_count
        try:
            for _ in range(_CATCH_UP_ROUNDS):
                if self.cluster_offset >= self._catch_up_to or not driver.active:
                    return
                outstanding = driver._last_batch.get(registry_index)
                if outstanding is not None:
                    try:
                        await self.driver.wait(outstanding)
                    except CoordinatorError:
                        pass
                    continue
                start = self.cluster_offset + 1
                end = self._catch_up_to  # read before the journal: entries up to it exist
                entries, steps = await loop.run_in_executor(
                    self._loader, partial(_read_journal, self.store, start)
                )
                if driver._last_batch.get(registry_index) is not None or not driver.active:
                    continue  # a write of its own began meanwhile: after it
                if self.cluster_offset + 1 != start:
                    continue  # our own append moved it meanwhile
                if (entries and entries[0][0] > start) or (not entries and start <= end < 2**62):
                    await self._reload(start)
                    continue
                if not entries:
                    self._catch_up_to = self.cluster_offset
                    return
                await self._apply_entries(entries, steps)
                await _release(entries)
        finally:
            self._catching_up = None

    async def _reload(self, start: int) -> None:
        """The journal no longer holds the cluster log from ``start`` on (journal retention
        removed entries this node never applied: it was cut off longer than the retention):
        replace this node's copy with the log's compacted view, as a fresh start loads it, and
        go on from the view's end (Kafka's broker fetching a metadata snapshot when the log
        it fell behind on was truncated). The view holds every entry that still counts: what
        retention removed was superseded by it. A loader thread reads and decodes the view
        and compares it with copies of this node's (``loader.cluster_changes``): the keys the
        node has and the view lacks (deleted meanwhile) get tombstones, the records that are
        new or differ are replayed, the others are the node's already. The loop applies those
        changes as one append of the log (:meth:`_apply_entries`): in one step when they fit
        one, else :data:`STEP_RECORDS` a loop step, one copy a loop step, every read seeing
        the node's copy as it was or as the view has it, never a mix (its committed copy and
        the topics' images held or staged until the last part: :meth:`_apply_in_parts`), the
        registry's commands held meanwhile (``Leadership.cluster_held``)."""
        driver = self.driver
        log.warning(
            "The cluster log's journal no longer holds offset %d on (journal retention removed "
            "entries this node never applied): loading the log's compacted view in place of "
            "this node's topics, ACLs, credentials and group configs.",
            start,
        )
        committed = driver.committed
        assert committed is not None  # the runtime keeps one (runtime/committed.py)
        # The loader thread reads the node's copy while the loop goes on (no copy of it made
        # here: a few tens of milliseconds at 200,000 records). Only a durable write of the
        # cluster log changes that copy, and it moves ``cluster_offset``: then the changes
        # found are dropped below (or the read fails, the copy changing under it) and the
        # next round reads again.
        try:
            end, entries, steps = await asyncio.get_running_loop().run_in_executor(
                self._loader, partial(_read_changes, self.store, committed.records)
            )
        except RuntimeError as exc:  # "dictionary changed size during iteration"
            log.info("The cluster log's reload read a copy that changed meanwhile: %s", exc)
            return
        if (
            driver._last_batch.get(driver.shard_count) is not None
            or not driver.active
            or self.cluster_offset + 1 != start
            or end < start
        ):
            return  # a write of its own meanwhile: the next round reads again
        if entries:
            await self._apply_entries(entries, steps)
        else:
            self._apply_records([], end)
        log.info("Reloaded the cluster log: %d changes (up to offset %d).", len(entries), end)
        await _release(entries)

    async def _apply_entries(self, entries: Sequence[Entry], steps: Sequence[Step]) -> None:
        """Apply journal ``entries`` of the cluster log (offset, timestamp, record: decoded on
        the loader thread) in steps of the loop (:data:`STEP_RECORDS`), each ending at the end
        of an append: every state a read sees between two steps is one the cluster log had
        after an append (its committed copy, the topics' images the shards have), never part
        of one. A read that fits one step is applied in one (the registry and its committed
        copy); a longer one applies each step's records to the registry (the shards' topics
        images with it) in one loop step and to the committed copy in the next, so no loop
        step holds both copies' work (at 100,000 topics their five dicts grow past the same
        size in the same step: 15 ms of resizes at once). Meanwhile the committed copy is a
        step behind the registry — as it is while a write of this node's is in flight — and
        each of them is at an append's end. The topic registry is held meanwhile
        (``Leadership.cluster_held``): no command of this node decides on a state between two
        steps, nor writes there (its undo entries would be interleaved with what a later step
        applies, below its undo log; its durable records would reach the committed copy before
        the step's). Stops at a step's end when the runtime stops."""
        n, i = len(entries), 0
        lead, loop = self.lead, asyncio.get_running_loop()
        committed = self.driver.committed
        try:
            for j, parts in steps:
                stepped = j < n or i > 0 or parts
                if stepped and self._applying is None:
                    self._applying = loop.create_future()
                    lead.cluster_held = True
                if parts:  # one append larger than a step: in parts, then whole
                    await self._apply_in_parts(entries, i, j, parts)
                    i = j
                    if i == n or not self.driver.active:
                        break
                    await asyncio.sleep(0)
                    continue
                records = [e[2] for e in entries[i:j]]
                self._apply_records(records, entries[j - 1][0], committed=not stepped)
                i = j
                if stepped:
                    await asyncio.sleep(0)  # the loop serves what came meanwhile
                    if committed is not None:
                        committed.replay(records)  # the records are durable
                if n > STEP_RECORDS:
                    # What a step built is long-lived state: frozen, not scanned again by
                    # the loop's collections (``collector.py``; a full one over 100,000
                    # topics' took 100-170 ms).
                    freeze_new()
                if i == n or not self.driver.active:
                    break
                await asyncio.sleep(0)  # the loop serves what came meanwhile
        finally:
            applying, self._applying = self._applying, None
            lead.cluster_held = False
            if applying is not None:
                applying.set_result(None)
        log.info("Applied %d records of the cluster log (up to offset %d).", i, self.cluster_offset)

    async def _apply_in_parts(
        self, entries: Sequence[Entry], start: int, end: int, kinds: frozenset[type]
    ) -> None:
        """One append larger than a step (a CreateTopics, CreateAcls, AlterUserScramCredentials,
        IncrementalAlterConfigs of thousands, an append mixing them with transactional ids'
        groups, a reload's changes: ``entries[start:end]``, holding records of the key types
        ``kinds``; where it ends found on the loader thread: :func:`_read_journal`), applied
        :data:`STEP_RECORDS` records a loop step to the registry, then each part to its
        committed copy in the next. Every read sees the append whole or not at all: both
        copies' topics images (what every read of topics is answered from:
        ``TopicRegistry.hold_image``) are held as they were before the append and built a part
        at a time meanwhile; the committed copy's ACLs and credentials (what the authorizer,
        SASL/SCRAM and the Describe reads are answered from), group configs (DescribeConfigs)
        and transactional ids' groups (the transactions' routing) are staged
        (``CommittedCluster.stage``), and so are the registry's group configs (each shard's
        heartbeats read them); then all are shown at once. The registry's other components
        are read by its commands only, held meanwhile (the caller's). Its offsets' deletions
        and the shards' new image come last, as for any append (:meth:`_apply_records`)."""
        driver = self.driver
        registry, committed = driver.registry, driver.committed
        configs = group_configs_of(registry)
        deleted: dict[str, str] = {}
        registry.hold_image()
        if ConfigKey in kinds:
            configs.stage()
        if committed is not None:
            committed.stage(kinds)
        before = registry.image().by_name  # the topics before the append (held)
        try:
            await asyncio.sleep(0)  # staging took its copies: the loop serves meanwhile
            for at in range(start, end, STEP_RECORDS):
                part = [e[2] for e in entries[at : min(at + STEP_RECORDS, end)]]
                deleted |= _deleted(part, before)  # ids as before the append
                self._replay(part)
                registry.build_image()
                await asyncio.sleep(0)  # the loop serves what came meanwhile
                if committed is not None:
                    committed.replay(part)
                    committed.registry.build_image()
                    await asyncio.sleep(0)
                freeze_new()  # long-lived (see _apply_entries)
        finally:
            replaced = [*registry.release_image(), *configs.unstage()]
            if committed is not None:
                replaced += committed.unstage()
        del before
        self._applied(deleted, entries[end - 1][0])
        await _drop_replaced(replaced)

    def _replay(self, records: Sequence[Record]) -> None:
        """Durable ``records`` into the registry, below its undo log."""
        registry = self.driver.registry
        undo = registry.undo
        undo.enabled = False
        try:
            for record in records:
                registry.replay(record)
        finally:
            undo.enabled = True

    def _apply_records(self, records: Sequence[Record], last: int, committed: bool = True) -> None:
        """Apply durable cluster-log ``records`` (others' appends, or what a compacted view
        changes in this node's copy) to the registry and (``committed``: else the caller does,
        in the next step) its committed copy, up to ``last``:
        each registry's next topics image is its last one with the topics they change
        (``TopicRegistry.image``), whatever the number of topics."""
        driver = self.driver
        deleted = _deleted(records, driver.registry.topics)
        self._replay(records)
        if committed and driver.committed is not None:  # durable: another node's appends
            driver.committed.replay(records)
        self._applied(deleted, last)

    def _applied(self, deleted: dict[str, str], last: int) -> None:
        """The end of an application up to ``last`` (``deleted``: the registry's topics it
        deleted or replaced, by name, with their topic ids): the shards' new topics image, the
        log's offset, the offsets of the topics gone — deleted, or another topic by that name
        now — removed in the partitions served here (offsets are kept by topic name: a topic
        created again must not start at the old one's)."""
        driver = self.driver
        present = driver.registry.topics
        driver._publish_topics()
        self.cluster_offset = last
        # On the writer's thread: ordered before this node's later appends.
        self.writer.submit(self._adopt_cluster_log, last)
        served = self.lead.served()
        # Sorted only for partitions served here (10,000 names: 3-9 ms of the loop).
        gone = (
            sorted(name for name, old in deleted.items() if _topic_id(present, name) != old)
            if served
            else ()
        )
        for i in served if gone else ():
            self._remove_offsets(i, gone)

    def _remove_offsets(self, partition: int, names: Sequence[str], attempt: int = 1) -> None:
        """The offsets of the topics ``names`` (deleted) removed from ``partition`` (served
        here), in a write of their own. Should that write fail — the store refused it, or a
        write before it failed: later batches fail with it — they are removed again in the
        next loop step while the partition is served at the same epoch, for the topics still
        deleted (:data:`OFFSETS_REMOVAL_ATTEMPTS` in all): else they stayed until they expired,
        and a topic created again by that name before then started at them."""
        driver, lead = self.driver, self.lead
        epoch = lead.epochs.get(partition)
        try:
            _response, batch = driver.execute(partition, lambda s: s.on_topics_deleted(names))
        except CoordinatorError as exc:
            log.warning(
                "Offsets of deleted topics not removed from partition %d: %s", partition, exc
            )
            return
        if batch is None or attempt >= OFFSETS_REMOVAL_ATTEMPTS:
            return
        loop = asyncio.get_running_loop()

        def again(error: BaseException | None) -> None:
            if error is None:
                return
            log.warning(
                "Offsets of deleted topics not removed from partition %d (attempt %d): %s",
                partition,
                attempt,
                error,
            )
            loop.call_soon(self._remove_again, partition, names, epoch, attempt + 1)

        batch.then.append(again)

    def _remove_again(
        self, partition: int, names: Sequence[str], epoch: int | None, attempt: int
    ) -> None:
        """:meth:`_remove_offsets` once more, unless the partition moved (or was taken again)
        or the runtime stopped meanwhile; only for the topics still deleted (one created again
        since may have offsets of its own by now) as every read sees them: the registry's
        image, held while an append is applied in parts (:meth:`_apply_in_parts`; its topics
        between two parts are a state no read sees, the append's end removes the offsets of
        what it deletes)."""
        lead, present = self.lead, self.driver.registry.image().by_name
        if (
            not self.driver.active
            or lead.epochs.get(partition) != epoch
            or lead.states[partition] is not PartitionState.SERVING
        ):
            return
        still = [name for name in names if name not in present]
        if still:
            self._remove_offsets(partition, still, attempt)


def _drop(shard: Any, partition: int) -> None:
    """A state machine of ``partition`` no longer served (or never installed): closed at once
    (nothing is applied to it any more), then freed by reference counting in slices of the
    loop (``collector.free_dropped``): frozen since its load, it is never scanned for it."""
    shard.close()
    free_dropped(shard.free, shard.undo, f"coordinator partition {partition}")


def _drop_later(loop: asyncio.AbstractEventLoop, shard: Any, partition: int, _done: Any) -> None:
    """:func:`_drop` on ``loop``, from any thread (not if the loop is closed meanwhile)."""
    try:
        loop.call_soon_threadsafe(_drop, shard, partition)
    except RuntimeError:
        pass  # the loop is closed: the process is stopping


OFFSETS_REMOVAL_ATTEMPTS = 5
"""How many times the offsets of topics others deleted are removed from a partition served
here when their write fails (:meth:`Partitions._remove_offsets`)."""

MIGRATION_ATTEMPTS = 5
"""How many times a partition's group configs of an earlier version are offered to the cluster
log before they wait for the partition's next load (each attempt after a refusal: another node
appended to the cluster log meanwhile, and this node catches up in between)."""


async def migrate_group_configs(
    driver: Driver, partition: int, applied: Callable[[], Awaitable[None]] | None = None
) -> None:
    """Move the group configs an earlier version kept in ``partition`` (just loaded) to the
    cluster log (``Driver.migrate_group_configs``). Until they are moved they count for their
    groups where the cluster log names none, so a failed attempt loses nothing. ``applied``
    (``Partitions.applied``, among several nodes): each attempt, a command of the registry,
    waits while the node applies other nodes' appends in steps, as every registry command
    does (``Engine.cluster_log_command``): run meanwhile it is refused, and an append applied
    in parts outlasts the attempts' waits."""
    for attempt in range(1, MIGRATION_ATTEMPTS + 1):
        try:
            if applied is not None:
                await applied()
            if driver.lead.states[partition] is not PartitionState.SERVING:
                return
            batch = driver.migrate_group_configs(partition)
            if batch is None:
                return
            await driver.wait(batch)
        except CoordinatorError as exc:
            log.warning(
                "Moving partition %d's group configs to the cluster log failed (attempt %d): %s",
                partition,
                attempt,
                exc,
            )
            await asyncio.sleep(0.05 * attempt)
            continue
        log.info("Moved partition %d's group configs to the cluster log.", partition)
        return


Entry = tuple[int, int, Record]
"""A journal entry of the cluster log read: (offset, timestamp, record)."""
Step = tuple[int, frozenset[type]]
"""Where a step of the entries read ends (exclusive), and when it is one append larger than a
step (applied in parts: ``Partitions._apply_in_parts``) the key types of its records (else
none)."""


def _read_journal(store: Any, start: int) -> tuple[list[Entry], list[Step]]:
    """The cluster log's journal from ``start`` on, decoded (:func:`_journal`), and its steps
    (:func:`_steps`): on a loader thread (at 100,000 records the steps alone took the loop
    10-20 ms)."""
    entries = _journal(store, CLUSTER_LOG, start)
    return entries, _steps(entries)


def _steps(entries: Sequence[Entry]) -> list[Step]:
    """The steps of ``entries`` (:func:`_step_end`), each one that is an append larger than a
    step with the key types of its records (:func:`_kinds`)."""
    out: list[Step] = []
    i, n = 0, len(entries)
    while i < n:
        j = _step_end(entries, i)
        out.append((j, _kinds(entries, i, j) if j - i > STEP_RECORDS else _WHOLE))
        i = j
    return out


_WHOLE: frozenset[type] = frozenset()


def _kinds(entries: Sequence[Entry], start: int, end: int) -> frozenset[type]:
    """The key types of the records of ``entries[start:end]`` (what their application in
    parts stages: ``CommittedCluster.stage``)."""
    return frozenset({type(e[2].key) for e in entries[start:end]})


def _read_changes(store: Any, live: Any) -> tuple[int, list[Entry], list[Step]]:
    """What a reload changes in this node's copy, whose records' values by key are ``live``
    (``loader.cluster_changes``: on a loader thread), as one append at the view's end: its
    entries (offset: the log's last as of the view) and its one step, in parts when it is
    larger than a step."""
    with no_collections():  # as a journal's read (:func:`_journal`): frozen if large
        end, records = cluster_changes(store, live)
        entries = [(end, 0, record) for record in records]
    n = len(entries)
    if n > STEP_RECORDS:
        freeze_new()
    return end, entries, [(n, _kinds(entries, 0, n) if n > STEP_RECORDS else _WHOLE)] if n else []


def _journal(store: Any, log_id: int, start: int) -> list[tuple[int, int, Record]]:
    """The journal of ``log_id`` from ``start`` on, decoded (on a loader thread): (offset,
    timestamp, record) each. The loop's collections wait meanwhile, and a read of more than a
    step's records is frozen once decoded (``collector.py``): it becomes the node's state,
    which a young collection on the loop would scan (100 ms for 100,000 records)."""
    decode = codec.decode
    with no_collections():
        entries = [
            (e.offset, e.timestamp_ms, decode(e.key, e.value))
            for e in store.journal(log_id, from_offset=start)
        ]
    if len(entries) > STEP_RECORDS:
        freeze_new()
    return entries


async def _drop_replaced(replaced: list[object]) -> None:
    """Drop what an application in parts replaced (the topics images held, the committed
    copy's records by key and its components' maps as they were), one a loop step: freed in
    the step that showed the new ones, the old maps of 100,000 topics and ACLs and of 200,000
    records held the loop 10-15 ms more (what something else still refers to is freed when
    it lets go)."""
    while replaced:
        await asyncio.sleep(0)  # none in the step that showed the new ones
        replaced.pop()


async def _release(entries: list[Any]) -> None:
    """Drop what a catch-up read (applied), :data:`RELEASE_SLICE` entries a loop step: freed
    at once, the entries of a 100,000-topic append (each a tuple and a record) held the loop
    10 ms and more in one step."""
    while entries:
        del entries[-RELEASE_SLICE:]
        await asyncio.sleep(0)


def _deleted(records: Sequence[Record], present: Any) -> dict[str, str]:
    """The topics of ``present`` (the registry's, or its image's, by name) that ``records``
    delete or replace by another topic of that name (another topic id: a reload's changes hold
    no tombstone in between), with their topic ids."""
    out: dict[str, str] = {}
    for r in records:
        key = r.key
        if type(key) is TopicKey:
            old = present.get(key.name)
            value: TopicValue | None = r.value  # type: ignore[assignment]  # a TopicKey's
            if old is not None and (value is None or value.topic_id != old.topic_id):
                out.setdefault(key.name, old.topic_id)
    return out


def _topic_id(topics: Any, name: str) -> str | None:
    """The id of the topic ``name`` in ``topics`` (by name); None: none."""
    topic = topics.get(name)
    return None if topic is None else str(topic.topic_id)


def _step_end(entries: Sequence[tuple[int, int, Record]], start: int) -> int:
    """Where the step of ``entries`` beginning at ``start`` ends (exclusive): after
    :data:`STEP_RECORDS` records at the least, at the end of an append (the next entry's
    timestamp differs; appends apart in the same millisecond go in one step together), or at
    the end of ``entries``."""
    n = len(entries)
    j = min(start + STEP_RECORDS, n)
    while j < n and entries[j][1] == entries[j - 1][1]:
        j += 1
    return j
