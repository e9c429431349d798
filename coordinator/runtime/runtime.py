"""The coordinator runtime's typed API: the methods the server calls (Kafka's
GroupCoordinatorService over its CoordinatorRuntime).

Three layers, read in this order:

* ``driver.py`` — the sans-IO driver: every decision about the state machines (turns, group
  commit, parked requests, first targets, offloads, rollback, timers, logs and notifications
  after durability). Its docstring is the theory of operation. The harness, the simulator and
  the explorer run it too (``coordinator/virtual.py``).
* ``engine.py`` — the asyncio engine around it: the loop, the writer thread and the store, the
  worker pool, the store's health. The only IO.
* this module — :class:`CoordinatorRuntime`: builds the state machines (one
  :func:`~coordinator.factory.new_shard` per coordinator partition of the store, and the
  cluster's: topics and security metadata), and turns each RPC
  into commands: a group's request on the group's shard (``requests.py``, shared with the
  simulator), a read of a group's committed state (``Driver.reads``), requests spanning shards
  (ListGroups, OffsetFetch, DeleteGroups) command by command, topic deletions with their
  offsets in one batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from coordinator.core.commands import (
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatResponse,
    IdSource,
    ListedGroup,
    Result,
)
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.errors import CoordinatorError, ErrorCode
from coordinator.core.group_configs import effective_configs
from coordinator.core.model import TopicsImage
from coordinator.core.offsets import (
    OffsetCommit,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchGroup,
    OffsetFetchGroupResponse,
    TxnOffsetCommit,
)
from coordinator.core.shard import DeleteGroupResult, GroupDescription
from coordinator.core.topics import (
    NewTopic,
    SnapshotChanges,
    SnapshotPlan,
    TopicResult,
    plan_snapshot,
)
from coordinator.core.transactions import (
    AddOffsetsToTxn,
    EndTxn,
    GroupTransaction,
    ProducerInitialized,
)
from coordinator.factory import (
    Shard,
    group_configs_of,
    new_cluster,
    new_shard,
    transactional_ids_of,
)
from coordinator.routing import partition_for
from coordinator.security.acls import AclBinding, AclBindingFilter
from coordinator.security.metadata import (
    AclCreation,
    AclDeletion,
    ScramDeletion,
    ScramUpsertion,
    UserResult,
)
from legacy_bridge import messages as cm

from . import requests
from .assignors import make_assignors
from .clock import ManualClock, SystemClock
from .collector import free_gradually, freeze_new, no_collections
from .committed import CommittedCluster
from .driver import (
    EXPIRE_OFFSETS,
    REGISTRY,
    STALL_GRACE_MS,
    TIMER_RETRY_MS,
    RuntimeState,
    WriteTimeoutError,
)
from .engine import Engine
from .ids import RandomIds
from .loader import LoadStats, ShardLoadStats
from .offload import AssignorPool
from .partitions import Partitions
from .store import RecordStore
from .watchers import MemberView, member_views

__all__ = [
    "EXPIRE_OFFSETS",
    "REGISTRY",
    "STALL_GRACE_MS",
    "TIMER_RETRY_MS",
    "CoordinatorRuntime",
    "RuntimeState",
]


_R = TypeVar("_R")

LIST_STEP = 5000
"""ListTopics builds this many topics of its answer a step of the loop (3-5 ms), the loop
serving the others in between: at 100,000 topics one step built it whole, 95-100 ms of the
loop's CPU, every call."""

SNAPSHOT_INLINE = 2000
"""A refresh from an upstream broker plans its changes on the loop up to this many topics
(the snapshot's or the registry's; 2-4 ms), on a thread beyond (:meth:`apply_topic_snapshot`:
at 100,000 topics planning on the loop held it 190-260 ms of its CPU, every refresh)."""
SNAPSHOT_STEP = 500
"""A refresh from an upstream broker applies this many topic changes a step of the loop, each
part a write of the cluster log of its own (as a catch-up applies others' appends: at most
14-15 ms of the loop at 100,000 topics; one step for all of them took 1.4 s)."""
SNAPSHOT_REPLANS = 5
"""A refresh plans again when the registry changed under it, at most this many times."""


class CoordinatorRuntime:
    def __init__(
        self,
        *,
        config: GroupCoordinatorConfig,
        store: RecordStore,
        clock: SystemClock | ManualClock | None = None,
        ids: IdSource | None = None,
        assignors: Sequence[Any] | None = None,
        observer: Any = None,
    ) -> None:
        self.config = config
        self.store = store
        self.clock = clock if clock is not None else SystemClock()
        self.ids = ids if ids is not None else RandomIds()
        assignors = (
            list(assignors) if assignors is not None else make_assignors(config.consumer_assignors)
        )
        # Metrics and tracing (coordinator/observability): None when both are off.
        self.observer = observer
        if store.partitions != config.offsets_topic_partitions:
            raise ValueError(
                f"the store has {store.partitions} partitions, the config "
                f"{config.offsets_topic_partitions} (offsets.topic.num.partitions)"
            )
        self.shard_count = store.partitions
        if observer is not None:
            assignors = observer.attach(self.shard_count, assignors)
        self._assignors = assignors
        self._topic_filter: Callable[[object, str, str], bool] | None = None
        # The cluster-level state machine: topics, and the security metadata and the groups'
        # dynamic configs plugged into it.
        self.registry, self.security = new_cluster(
            self.ids, default_num_partitions=config.num_partitions, config=config
        )
        self.group_configs = group_configs_of(self.registry)
        self.transactional_ids = transactional_ids_of(self.registry)
        # The same state as of the cluster log's last durable write (committed.py): what its
        # pure reads and the authorizer read, at once, never behind a write in flight.
        self.committed = CommittedCluster(
            self.ids, default_num_partitions=config.num_partitions, config=config
        )
        shards = [self.new_shard() for _ in range(self.shard_count)]
        # Target assignments computed off the loop (offload.py): the worker pool (None when
        # group.consumer.assignor.offload.enable is false).
        self.assignor_pool = (
            AssignorPool([a.name for a in assignors], config.background_threads)
            if config.consumer_assignor_offload_enable
            else None
        )
        self.engine = Engine(
            machines=[*shards, self.registry],
            config=config,
            store=store,
            clock=self.clock,
            observer=observer,
            assignor_pool=self.assignor_pool,
            committed=self.committed,
        )
        self.driver = self.engine.driver
        self.timers = self.driver.timers
        self.stats = self.driver.stats
        self.watch = self.engine.watch
        self.watchers = self.engine.watchers
        self._submit = self.engine.submit
        self._request = self.engine.request
        self._durable = self.engine.durable
        self._listed: tuple[TopicsImage, list[TopicResult]] | None = None
        """The last ListTopics answer and the topics image it lists (:meth:`list_topics`)."""

    def new_shard(self) -> Shard:
        """An empty state machine for one coordinator partition."""
        shard = new_shard(config=self.config, assignors=self._assignors, ids=self.ids)
        shard.groups.parks_joins = True  # a new group's first target covers a burst
        shard.groups.topic_filter = self._topic_filter
        shard.group_configs.follow(self.group_configs)
        return shard

    @property
    def shards(self) -> list[Shard]:
        """Every partition's state machine (an empty one for a partition not served here)."""
        return self.driver.shards

    # ------------------------------------------------------------------ lifecycle and health

    @property
    def state(self) -> RuntimeState:
        return self.driver.state

    @property
    def load_stats(self) -> LoadStats | None:
        return self.engine.load_stats

    @property
    def partition_loads(self) -> Mapping[int, ShardLoadStats]:
        """The last load of each partition served here, by partition: at start-up, or (a node
        among several) when this node took it."""
        partitions = self.engine.partitions
        if partitions is not None:
            return partitions.loads
        stats = self.engine.load_stats
        return {} if stats is None else {s.shard: s for s in stats.shards}

    @property
    def serving(self) -> bool:
        """Loaded, not stopping or failed, and able to write its store (gRPC health)."""
        return self.engine.serving

    def add_health_listener(self, listener: Callable[[bool], None]) -> None:
        """Call ``listener(serving)`` (on the loop) whenever :attr:`serving` may have changed."""
        self.engine.add_health_listener(listener)

    async def start(self) -> LoadStats:
        """Load every shard from the store, then serve. Requests before the end of loading
        get COORDINATOR_LOAD_IN_PROGRESS."""
        return await self.engine.start()

    async def close(self) -> None:
        """Stop taking commands, finish in-flight and pending writes, close the store."""
        await self.engine.close()

    async def flush(self) -> None:
        """Wait until every batch produced so far is resolved (durable or failed)."""
        await self.engine.flush()

    def share_partitions(self, node_id: int) -> Partitions:
        """Several nodes share the store (docs/ha.md): serve only the partitions the cluster
        node gives (the answer is what it drives: ``partitions.py``). Before :meth:`start`."""
        return self.engine.share_partitions(node_id, self.new_shard)

    def release_parked(self) -> None:
        """Shutdown: answer every parked request with COORDINATOR_NOT_AVAILABLE."""
        self.driver.release_parked()

    async def advance_time(self, ms: int) -> int:
        """Manual clock only: move time forward and fire every due timer in deadline order,
        waiting for their effects to be durable."""
        return await self.engine.advance_time(ms)

    def shard_index(self, group_id: str) -> int:
        """The group's coordinator partition: its shard."""
        return partition_for(group_id, self.shard_count)

    # ------------------------------------------------------------------ consumer groups

    async def heartbeat(self, req: ConsumerGroupHeartbeat) -> ConsumerGroupHeartbeatResponse:
        response: ConsumerGroupHeartbeatResponse = await self._request(
            requests.heartbeat(req, self.clock.now_ms())
        )
        return response

    async def member_views(
        self, group_id: str, member_ids: Sequence[str]
    ) -> Mapping[str, MemberView | None] | str:
        """What the push stream shows of these members (``watchers.member_views``): the
        group's committed state (:meth:`_read`)."""
        return self._read(group_id, lambda s: member_views(s, group_id, member_ids))

    async def describe_group(self, group_id: str) -> GroupDescription:
        """ConsumerGroupDescribe: the group's committed state (:meth:`_read`)."""
        return self._read(group_id, lambda s: s.describe_group(group_id))

    def _read(self, group_id: str, fn: Callable[[Shard], _R]) -> _R:
        """A read of one group answered at once from its committed state, as Kafka's
        scheduleReadOperation reads its shard as of the last committed offset: the group as of
        its last durable write, never a change a failed write could roll back, nor waiting for
        a write in flight (``Driver.reads``)."""
        answer: _R = self.driver.reads.read(self.shard_index(group_id), fn, (group_id,))[0]
        return answer

    async def alter_group_configs(
        self, group_id: str, changes: Mapping[str, str | None], *, validate_only: bool = False
    ) -> None:
        """Alter a group's dynamic configs in the cluster log, on any node (Kafka's
        IncrementalAlterConfigs of a GROUP resource); the node leading the group applies them
        on the group's next heartbeat. Raises the alteration's error."""
        (error,) = await self.alter_group_configs_each(
            [(group_id, changes)], validate_only=validate_only
        )
        if error is not None:
            raise error

    async def alter_group_configs_each(
        self,
        alters: Sequence[tuple[str, Mapping[str, str | None]]],
        validate_only: bool = False,
    ) -> list[CoordinatorError | None]:
        """Several groups' alterations (group id, changes) in one command of the cluster log,
        so one write for them all, as Kafka's controller runs an IncrementalAlterConfigs
        (``ClusterGroupConfigs.alter_each``): each one's error (None: altered), in order —
        its own, else the write's (failed, REQUEST_TIMED_OUT), or the runtime's when the
        command could not run (not serving)."""
        configs = self.group_configs
        ran: list[list[CoordinatorError | None]] = []

        def alter(reg: Any) -> Any:
            mark = reg.mark() if validate_only else None
            try:
                result = configs.alter_each(alters)
            finally:
                if mark is not None:
                    reg.rollback(mark)
            ran.append(result.response or [])
            return ran[-1] if validate_only else result

        try:
            errors: list[CoordinatorError | None] = await self._submit(
                REGISTRY, alter, read=validate_only
            )
        except CoordinatorError as exc:
            return [
                exc if error is None else error
                for error in (ran[-1] if ran else [None] * len(alters))
            ]
        return errors

    async def group_config(self, group_id: str) -> dict[str, str]:
        """A group's effective dynamic configs (any node)."""
        return (await self.describe_group_config(group_id))[0]

    async def describe_group_config(self, group_id: str) -> tuple[dict[str, str], dict[str, str]]:
        """(effective configs, per-group overrides), as the cluster log has them once durable
        (any node, at once: :meth:`_committed`); for a group it names none of, those an earlier
        version kept in the group's partition when this node serves it and they have not moved
        to the cluster log yet."""
        overrides = self._committed().group_configs.overrides(group_id)
        index = self.shard_index(group_id)
        if overrides is None and self.driver.lead.serving(index):
            overrides = self.shards[index].group_configs.get(group_id)  # the partition's own
        found = dict(overrides or {})
        return effective_configs(self.config, found), found

    def _committed(self) -> CommittedCluster:
        """The cluster log's state as of its last durable write, for a pure read of it
        (topics, ACLs, SCRAM credentials, group configs): answered at once, as Kafka's broker
        answers from its metadata cache, never behind a write in flight (which it does not
        show, nor a change that a failed write rolls back); a change whose writer got its
        answer is there (``committed.py``). Answered while serving, and while loading once the
        cluster log is loaded (the coordinator partitions may still load); else raises."""
        committed = self.committed
        if not (committed.loaded and self.driver.state is RuntimeState.LOADING):
            self.driver.check_serving()
        return committed

    async def list_groups(
        self, states: Sequence[str] = (), types: Sequence[str] = ()
    ) -> list[ListedGroup]:
        """ListGroups across shards (consumer groups and offset-only "simple" groups), with the
        core's case-insensitive state and type filters; sorted by group id. Each shard as of its
        last durable write, at once (``Driver.reads``: a group whose creation, state or deletion
        is not durable yet is listed as it was before)."""
        driver = self.driver
        driver.check_serving()
        listed = [
            driver.reads.read(i, lambda s: s.list_groups(states, types))[0]
            for i in driver.lead.served()
        ]
        return sorted((g for groups in listed for g in groups), key=lambda g: g.group_id)

    async def _on_shards(
        self,
        fn: Callable[[Shard], Any],
        *,
        concerned: Callable[[Shard], bool] | None = None,
    ) -> list[Any]:
        """Run ``fn`` on every shard (``concerned``: on those it says), one command each, with
        no wait in between; answers, in shard order, once each is durable."""
        driver = self.driver
        driver.check_serving()
        out, waits = [], []
        shards = self.shards
        for i in driver.lead.served():
            shard = shards[i]
            if concerned is None or concerned(shard):
                response, batch = driver.execute(i, fn)
                out.append(response)
                if batch is not None:
                    waits.append(self.engine.wait_for(batch, i))
        if waits:
            await asyncio.gather(*waits)  # every wait started at once: one write timeout
        return out

    # ------------------------------------------------------------------ topics

    # A write to the cluster log (topics, ACLs, SCRAM credentials, group configs) not durable
    # in time is answered REQUEST_TIMED_OUT, as Kafka's controller answers it
    # (``Driver._cluster_bound``): within ``timeout_ms``, the request's own timeout, when it
    # has one (CreateTopics, CreatePartitions, DeleteTopics), else offsets.commit.timeout.ms.

    async def create_topics(
        self,
        topics: Sequence[NewTopic],
        *,
        timeout_ms: int | None = None,
        validate_only: bool = False,
    ) -> list[TopicResult]:
        """``validate_only``: each topic answered as it would be, nothing written (Kafka's
        validateOnly)."""
        return await self._registry_change(
            lambda r: r.create_topics(topics), timeout_ms, validate_only
        )

    async def create_partitions(
        self,
        requests: Sequence[tuple[str, int]],
        *,
        timeout_ms: int | None = None,
        validate_only: bool = False,
        assignments: Mapping[str, int] | None = None,
    ) -> list[TopicResult]:
        """``assignments``: topics given manual assignments (``TopicRegistry.create_partitions``)."""
        return await self._registry_change(
            lambda r: r.create_partitions(requests, assignments), timeout_ms, validate_only
        )

    async def _registry_change(
        self,
        change: Callable[[Any], Result[list[TopicResult]]],
        timeout_ms: int | None,
        validate_only: bool,
    ) -> list[TopicResult]:
        if not validate_only:
            return await self._submit(REGISTRY, change, timeout_ms=timeout_ms)

        def validate(reg: Any) -> list[TopicResult]:
            mark = reg.mark()
            try:
                return change(reg).response or []
            finally:
                reg.rollback(mark)

        answer: list[TopicResult] = await self._submit(REGISTRY, validate, read=True)
        return answer

    async def delete_topics(
        self, names: Sequence[str], *, timeout_ms: int | None = None
    ) -> list[TopicResult]:
        """Delete topics and, in the same durable batch, the committed offsets of every group on
        them (:meth:`_deleting_topics`)."""
        return await self._deleting_topics(
            lambda r: r.delete_topics(names),
            lambda results: [t.name for t in results if t.error_code == ErrorCode.NONE],
            timeout_ms,
        )

    async def list_topics(self) -> list[TopicResult]:
        """Every topic by name, as of the cluster log's last durable write (:meth:`_committed`):
        its topics image when called (immutable: a change meanwhile makes another), listed
        :data:`LIST_STEP` topics a step of the loop, and kept for the next calls while the
        topics stay as they are (Metadata of every topic, polled by every client, lists them
        once per change; each caller gets a list of its own)."""
        image = self._committed().registry.image()
        listed = self._listed
        if listed is None or listed[0] is not image:
            by_name = image.by_name
            names = sorted(by_name)
            answer: list[TopicResult] = []
            for start in range(0, len(names), LIST_STEP):
                if start:
                    await asyncio.sleep(0)  # the loop serves the others meanwhile
                for name in names[start : start + LIST_STEP]:
                    t = by_name[name]
                    answer.append(
                        TopicResult(
                            name=name,
                            topic_id=t.topic_id,
                            num_partitions=t.num_partitions,
                            partition_racks=t.partition_racks,
                        )
                    )
            listed = self._listed = (image, answer)
        return list(listed[1])

    async def apply_topic_snapshot(
        self, topics: Sequence[NewTopic], keep: Sequence[str] = ()
    ) -> SnapshotChanges:
        """Make the registry follow a broker's metadata (``TopicRegistry.apply_snapshot``):
        :meth:`follow_topic_snapshot` of these topics, planned on the loop when there are at
        most :data:`SNAPSHOT_INLINE` of them and in the registry (2-4 ms), else on a thread."""
        return await self.follow_topic_snapshot(
            lambda: (list(topics), list(keep)), inline=len(topics) <= SNAPSHOT_INLINE
        )

    async def follow_topic_snapshot(
        self,
        snapshot: Callable[[], tuple[list[NewTopic], list[str]]],
        *,
        inline: bool = False,
    ) -> SnapshotChanges:
        """Make the registry follow a broker's metadata: ``snapshot()`` gives its topics and
        the topics to keep (``TopicRegistry.apply_snapshot``), lists of their own, emptied
        once planned (``collector.free_gradually``: on the thread, a slice at a time). Topics gone from the broker or
        re-created there (a new id) lose their committed offsets in the same durable batch,
        as :meth:`delete_topics` does.

        ``snapshot()`` is called, and the changes planned against the registry's topics
        image as it is (immutable: ``plan_snapshot``), on a thread (``inline``: on the loop
        while the registry holds at most :data:`SNAPSHOT_INLINE` topics): the loop only
        checks that nothing changed meanwhile — a refresh that changes nothing costs it no
        more — then applies the changes, :data:`SNAPSHOT_STEP` a step of the loop, each part
        a command of the cluster log durable before the next (``TopicRegistry.apply_plan``):
        the records of one application of the whole plan, in its order. A reader between two
        parts sees the registry with the plan's first parts applied: each topic as it was or
        as the broker has it (a re-created one absent between its tombstone and its new
        record, as on the broker). A change of the registry that came meanwhile (another
        command, another node's append caught up) is kept in its place, and the rest planned
        again against the registry with it (``snapshot()`` called again; at most
        :data:`SNAPSHOT_REPLANS` times, then the snapshot is applied whole, in one step)."""
        self.driver.check_serving()
        total = SnapshotChanges(created=[], updated=[], deleted=[])
        for _attempt in range(SNAPSHOT_REPLANS):
            plan = await self._plan_snapshot(snapshot, inline)
            expected: TopicsImage | None = plan.image
            done, count = 0, len(plan.changes)
            if not count:
                if self.registry.image() is expected:
                    return total
                continue  # nothing to do on what it planned on, which changed meanwhile
            while expected is not None and done < count:
                if done:
                    await asyncio.sleep(0)  # the loop serves the others meanwhile
                part = await self._apply_plan_part(plan, done, done + SNAPSHOT_STEP, expected)
                if part is None:
                    expected = None  # a change came meanwhile: plan the rest again
                    continue
                changes, expected = part
                total.created.extend(changes.created)
                total.updated.extend(changes.updated)
                total.deleted.extend(changes.deleted)
                done += SNAPSHOT_STEP
            if expected is not None:
                return total
        whole = await self._deleting_topics(
            lambda r: r.apply_snapshot(*snapshot()), lambda changes: changes.deleted_names
        )
        total.created.extend(whole.created)
        total.updated.extend(whole.updated)
        total.deleted.extend(whole.deleted)
        return total

    async def _plan_snapshot(
        self, snapshot: Callable[[], tuple[list[NewTopic], list[str]]], inline: bool
    ) -> SnapshotPlan:
        """``plan_snapshot`` of ``snapshot()`` against the registry's image now: on a thread
        unless ``inline`` and the registry is small (:meth:`follow_topic_snapshot`)."""
        image = self.registry.image()
        if inline and len(image.by_name) <= SNAPSHOT_INLINE:
            return plan_snapshot(image, *snapshot())

        def plan() -> SnapshotPlan:
            with no_collections():  # the snapshot is freed here, never scanned
                topics, keep = snapshot()
                try:
                    planned = plan_snapshot(image, topics, keep)
                finally:
                    free_gradually(topics, keep)  # in one go: 45 ms of the loop at 100,000
            if len(planned.changes) > SNAPSHOT_STEP:
                freeze_new()  # what a large plan brings is long-lived (the new topics')
            return planned

        return await asyncio.get_running_loop().run_in_executor(None, plan)

    async def _apply_plan_part(
        self, plan: SnapshotPlan, start: int, stop: int, expected: TopicsImage
    ) -> tuple[SnapshotChanges, TopicsImage] | None:
        """``plan.changes[start:stop]`` applied in one command of the cluster log, durable
        with the offsets of the topics it deletes (:meth:`_deleting_topics`): what it changed
        and the image it left; None when the registry is not at ``expected`` (nothing done)."""

        def deleted(part: tuple[SnapshotChanges, TopicsImage] | None) -> list[str]:
            return [] if part is None else part[0].deleted_names

        def apply(reg: Any) -> Any:
            part = reg.apply_plan(plan, start, stop, expected)
            if part is None:
                return Result(response=None)
            result, left = part
            result.response = (result.response, left)
            return result

        part: tuple[SnapshotChanges, TopicsImage] | None = await self._deleting_topics(
            apply, deleted
        )
        return part

    async def _deleting_topics(
        self,
        change: Callable[[Any], _R],
        deleted: Callable[[_R], Sequence[str]],
        timeout_ms: int | None = None,
    ) -> _R:
        """A registry change that deletes topics, with their groups' committed offsets in the
        same durable batch (``Driver.delete_topics_with``); run again if another node wrote to
        the cluster log first (``Engine.cluster_log_command``)."""

        async def once() -> _R:
            out, batch = self.driver.delete_topics_with(change, deleted)
            await self._durable(batch, REGISTRY, timeout_ms)
            return out

        return await self.engine.cluster_log_command(once)

    def known_partitions(self) -> int:
        """Partitions of every topic in the registry (the most a member can own)."""
        return sum(t.num_partitions for t in self.registry.image().by_name.values())

    def topic_name(self, topic_id: str) -> str:
        """Convenience name for responses ("" when unknown)."""
        t = self.registry.image().by_id.get(topic_id)
        return "" if t is None else t.name

    # ------------------------------------------------------------------ offsets and group administration
    # OffsetCommit / OffsetFetch / OffsetDelete and DeleteGroups. The semantics are the core's
    # (coordinator/core/offsets.py); this block only routes commands to shards and waits for
    # durability. The periodic offset expiration is the driver's timer (EXPIRE_OFFSETS).

    async def offset_commit(
        self, req: OffsetCommit, *, legacy_version: bool = False
    ) -> OffsetCommitResponse:
        """Answered once the commit's records are durable. Group-level errors (fencing, unknown
        group, loading, a failed write) raise; the server puts them on every partition, as
        Kafka answers. ``legacy_version``: the request came as OffsetCommit v8 or older, which
        a member of the consumer protocol may not use (Kafka: UNSUPPORTED_VERSION)."""
        response: OffsetCommitResponse = await self._request(
            requests.offset_commit(req, self.clock.now_ms(), legacy_version=legacy_version)
        )
        return response

    # ------------------------------------------------------------------ transactions
    # (core/transactions.py; the Kafka listener's kafka/transactions.py drives them)

    async def txn_offset_commit(self, req: TxnOffsetCommit) -> OffsetCommitResponse:
        """TxnOffsetCommit on the group's shard: the offsets are pending once durable."""
        now = self.clock.now_ms()
        return await self._submit(
            self.shard_index(req.group_id), lambda s: s.txn_offset_commit(req, now)
        )

    async def add_offsets_to_txn(self, cmd: AddOffsetsToTxn) -> None:
        now = self.clock.now_ms()
        await self._submit(self.shard_index(cmd.group_id), lambda s: s.add_offsets_to_txn(cmd, now))

    async def end_transaction(self, cmd: EndTxn) -> list[str]:
        """An EndTxn forwarded or answered (core/transactions.py), on every shard that holds a
        transaction of the producer (a producer's offsets may be in groups of several shards);
        the groups it moved, once durable."""
        now = self.clock.now_ms()
        ended = await self._on_shards(
            lambda s: s.end_transaction(cmd, now),
            concerned=lambda s: s.offsets.txn.knows_producer(cmd.producer_id),
        )
        return [g for e in ended for g in e.groups]

    async def producer_initialized(self, cmd: ProducerInitialized) -> list[str]:
        """An InitProducerId answered for a transactional id: the ongoing transactions of an
        older producer epoch (or id) it aborted, on every shard; the groups, once durable."""
        now = self.clock.now_ms()
        ended = await self._on_shards(
            lambda s: s.producer_initialized(cmd, now),
            concerned=lambda s: s.offsets.txn.knows_transactional_id(cmd.transactional_id),
        )
        return [g for e in ended for g in e.groups]

    async def map_transactional_id(self, transactional_id: str, group_id: str) -> bool:
        """Record in the cluster log that ``transactional_id``, active now, commits offsets to
        ``group_id`` (``core/transactional_ids.py``), once durable; False when it already was
        so (its activity may be written again; nothing is when the committed state is fresh)."""
        now = self.clock.now_ms()
        if not self._committed().transactional_ids.needs_write(transactional_id, group_id, now):
            return False
        ids = self.transactional_ids
        return bool(
            await self._submit(REGISTRY, lambda _: ids.map(transactional_id, group_id, now))
        )

    async def expire_transactional_ids(self, transactional_ids: list[str]) -> list[str]:
        """Of ``transactional_ids``, the mappings inactive for ``transactional.id.expiration.ms``
        removed (``ClusterTransactionalIds.expire``), once durable."""
        now, ids = self.clock.now_ms(), self.transactional_ids
        return list(await self._submit(REGISTRY, lambda _: ids.expire(transactional_ids, now)))

    def transactional_id_group(self, transactional_id: str) -> str | None:
        """The group ``transactional_id`` commits offsets to, as of the cluster log's last
        durable write this node applied (:meth:`_committed`); None: none known."""
        return self._committed().transactional_ids.group_of(transactional_id)

    async def latest_transactional_id_group(self, transactional_id: str) -> str | None:
        """:meth:`transactional_id_group` once this node has applied the cluster log up to its
        end in the store as of now (among several nodes another node may have mapped the id a
        moment ago; one node has nothing to catch up with). Raises TimeoutError if that takes
        longer than the write timeout (``offsets.commit.timeout.ms``)."""
        partitions = self.engine.partitions
        if partitions is not None:
            partitions.follow_cluster_log(2**62)  # the journal as far as it goes
            await asyncio.wait_for(
                partitions.caught_up(), self.config.offsets_commit_timeout_ms / 1000
            )
        return self.transactional_id_group(transactional_id)

    def transactions(self) -> list[GroupTransaction]:
        """Every group's open or ending transaction (a read of the loaded state, on the loop)."""
        return [t for shard in self.shards for t in shard.transactions()]

    async def offset_fetch(
        self, groups: Sequence[OffsetFetchGroup]
    ) -> list[OffsetFetchGroupResponse]:
        """A read per group on the group's shard, as Kafka's GroupCoordinatorService: without
        ``require_stable`` the group's committed offsets, at once (:meth:`_read`); with it (a
        read_committed consumer's: Kafka runs it as a write without records) the group's latest
        offsets once the writes holding its uncommitted changes are durable — only the group's,
        not every write of its shard (``Driver.reads``), so it never shows a commit that could
        still be lost. A per-group coordinator error (loading, a failed write behind the read) is
        that group's error; a write behind it that is not durable within
        ``offsets.commit.timeout.ms`` gives NOT_COORDINATOR (Kafka's OffsetFetch remaps its
        write timeout so: clients before 3.9 retry nothing else, and look the coordinator up
        again)."""
        driver = self.driver
        answers: list[OffsetFetchGroupResponse] = []
        waits: list[tuple[int, Any]] = []  # (position, the wait: a future)
        for n, group in enumerate(groups):

            def fetch(s: Shard, g: OffsetFetchGroup = group) -> OffsetFetchGroupResponse:
                return s.offset_fetch(g)

            index = self.shard_index(group.group_id)
            try:
                resp, batch = driver.reads.read(
                    index, fetch, (group.group_id,), latest=group.require_stable
                )
            except CoordinatorError as exc:
                resp, batch = _fetch_error(group.group_id, exc), None
            answers.append(resp)
            if batch is not None:  # every wait started now: one write timeout for them all
                waits.append((n, self.engine.wait_for(batch, index)))
        for n, waiting in waits:
            try:
                await waiting
            except CoordinatorError as exc:
                answers[n] = _fetch_error(groups[n].group_id, exc)
        return answers

    async def offset_delete(
        self, group_id: str, topics: Sequence[tuple[str, Sequence[int]]]
    ) -> OffsetDeleteResponse:
        return await self._submit(
            self.shard_index(group_id), lambda s: s.offset_delete(group_id, topics)
        )

    async def delete_groups(
        self, group_ids: Sequence[str]
    ) -> list[tuple[str, ErrorCode, str | None]]:
        """(group id, error code, message) per requested id, in request order. Each shard
        deletes its own groups in one command; a failed write fails that shard's groups."""
        driver = self.driver
        by_shard: dict[int, list[int]] = {}
        for n, gid in enumerate(group_ids):
            by_shard.setdefault(self.shard_index(gid), []).append(n)
        out: list[tuple[str, ErrorCode, str | None]] = [
            (gid, ErrorCode.NONE, None) for gid in group_ids
        ]
        waits: list[tuple[list[int], Any]] = []  # (positions, the wait: a future)
        for index, positions in by_shard.items():
            ids = [group_ids[n] for n in positions]

            def delete(s: Shard, ids: list[str] = ids) -> Result[list[DeleteGroupResult]]:
                return s.delete_groups(ids)

            try:
                driver.check_serving()
                results, batch = driver.execute(index, delete)
            except CoordinatorError as exc:
                results, batch = [(gid, exc.code, exc.message) for gid in ids], None
            for n, item in zip(positions, results, strict=True):
                out[n] = item
            if batch is not None:  # every wait started now: one write timeout for them all
                waits.append((positions, self.engine.wait_for(batch, index)))
        for positions, waiting in waits:
            try:
                await waiting
            except CoordinatorError as exc:
                for n in positions:
                    if out[n][1] == ErrorCode.NONE:
                        out[n] = (group_ids[n], exc.code, exc.message)
        return out

    def snapshot(self) -> dict[str, Any]:
        """Canonical in-memory state (tests compare it across restarts)."""
        groups: dict[str, Any] = {}
        configs: dict[str, Any] = {}
        for shard in self.shards:
            snap = shard.snapshot()
            groups.update(snap["groups"])
            configs.update(snap["group_configs"])  # an earlier version's, not migrated yet
        cluster = self.group_configs
        configs.update({gid: dict(sorted(cluster[gid].items())) for gid in cluster})
        return {
            "groups": dict(sorted(groups.items())),
            "group_configs": dict(sorted(configs.items())),
            "topics": [(t.name, t.topic_id, t.num_partitions) for t in self.registry.list_topics()],
            "security": self.security.snapshot(),
        }

    # ------------------------------------------------------------------ security metadata

    def set_topic_filter(self, allows: Callable[[object, str, str], bool] | None) -> None:
        """Who may describe which topic (the server's authorizer): regexes are resolved with it,
        per triggering member (``ConsumerGroups.topic_filter``)."""
        self._topic_filter = allows
        for shard in self.shards:
            shard.groups.topic_filter = allows

    async def alter_scram_credentials(
        self, deletions: Sequence[ScramDeletion], upsertions: Sequence[ScramUpsertion]
    ) -> list[UserResult]:
        return await self._submit(
            REGISTRY, lambda _r: self.security.alter_scram_credentials(deletions, upsertions)
        )

    async def describe_scram_credentials(self, users: Sequence[str] | None) -> list[UserResult]:
        """As of the cluster log's last durable write (:meth:`_committed`)."""
        return self._committed().security.describe_scram_credentials(users)

    async def create_acls(self, creations: Sequence[AclCreation]) -> list[AclCreation]:
        return await self._submit(REGISTRY, lambda _r: self.security.create_acls(creations))

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[AclDeletion]:
        return await self._submit(REGISTRY, lambda _r: self.security.delete_acls(filters))

    async def describe_acls(self, flt: AclBindingFilter) -> list[AclBinding]:
        """As of the cluster log's last durable write (:meth:`_committed`)."""
        return self._committed().security.describe_acls(flt)

    # ------------------------------------------------------------------ classic groups (legacy bridge)

    async def classic_join(self, req: cm.JoinGroup) -> cm.JoinGroupResponse:
        response: cm.JoinGroupResponse = await self._request(
            requests.classic_join(req, self.clock.now_ms())
        )
        return response

    async def classic_sync(self, req: cm.SyncGroup) -> cm.SyncGroupResponse:
        response: cm.SyncGroupResponse = await self._request(
            requests.classic_sync(req, self.clock.now_ms())
        )
        return response

    async def classic_heartbeat(self, req: cm.Heartbeat) -> cm.HeartbeatResponse:
        response: cm.HeartbeatResponse = await self._request(
            requests.classic_heartbeat(req, self.clock.now_ms())
        )
        return response

    async def classic_leave(self, req: cm.LeaveGroup) -> cm.LeaveGroupResponse:
        response: cm.LeaveGroupResponse = await self._request(
            requests.classic_leave(req, self.clock.now_ms())
        )
        return response

    async def describe_classic_groups(self, group_ids: Sequence[str]) -> list[cm.DescribedGroup]:
        """DescribeGroups: each group's committed state (:meth:`_read`)."""
        out: list[cm.DescribedGroup] = []
        for gid in group_ids:

            def describe(s: Shard, g: str = gid) -> list[cm.DescribedGroup]:
                return s.classic_groups.describe([g])

            out += self._read(gid, describe)
        return out


def _fetch_error(group_id: str, exc: CoordinatorError) -> OffsetFetchGroupResponse:
    code = ErrorCode.NOT_COORDINATOR if isinstance(exc, WriteTimeoutError) else exc.code
    return OffsetFetchGroupResponse(group_id=group_id, error_code=code, error_message=exc.message)
