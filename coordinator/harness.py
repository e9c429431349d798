"""A shard (built by :func:`~coordinator.factory.new_shard`) and a topic registry under the
runtime's own driver on virtual time (``coordinator/virtual.py``): Kafka's
GroupMetadataManagerTestContext, with the server's batching, parking, timers, first targets and
offloads around the core instead of a copy of them.

Used by the unit and golden tests and the core benchmark. Every record the shard's handlers emit
is kept in ``log`` (in order), every event in ``events``, every answer to a parked request in
``completions``, so a test can replay the whole history into a fresh shard and compare states;
``store_log`` has the topic registry's records too, in the order the store holds them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from assignors.api import PartitionAssignor
from coordinator.core import records as r
from coordinator.core.commands import (
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatResponse,
    IdSource,
    Pending,
    Result,
    SequentialIds,
)
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.events import LogEvent
from coordinator.core.model import (
    Assignment,
    ClassicMemberMetadata,
    ConsumerGroupMember,
    TopicMetadata,
)
from coordinator.core.offsets import (
    OffsetCommit,
    OffsetCommitPartition,
    OffsetCommitResponse,
    OffsetCommitTopic,
)
from coordinator.core.target_assignment import run_job
from coordinator.core.timers import DueTimer
from coordinator.core.topics import NewTopic, TopicRegistry, TopicResult
from coordinator.factory import Shard, group_configs_of, new_shard, plug_group_configs
from coordinator.runtime import requests
from coordinator.runtime.driver import REGISTRY, Driver, RuntimeState
from coordinator.runtime.requests import Command
from coordinator.runtime.store.api import StoreWriteError
from coordinator.virtual import VirtualClock, VirtualWorld
from legacy_bridge import messages as m
from legacy_bridge.protocol import (
    AssignmentMessage,
    Subscription,
    decode_assignment,
    encode_subscription,
)


def subscription(
    topics: list[str] | tuple[str, ...],
    *,
    version: int = 3,
    owned: dict[str, list[int]] | None = None,
    generation_id: int = -1,
    rack_id: str | None = None,
) -> bytes:
    """A classic consumer's subscription bytes (the embedded consumer protocol)."""
    return encode_subscription(
        Subscription(
            version=version,
            topics=tuple(topics),
            owned_partitions=tuple((t, tuple(ps)) for t, ps in sorted((owned or {}).items()))
            if version >= 1
            else (),
            generation_id=generation_id if version >= 2 else -1,
            rack_id=rack_id if version >= 3 else None,
        )
    )


class Harness:
    """A shard and the topic registry under the runtime's driver, on virtual time: a store that
    writes at once, a manual clock (``now_ms``, :meth:`sleep`), first targets run when a test
    says (:meth:`first_target`), offloaded computations finished when it says
    (:meth:`start_offload`, :meth:`finish_offload`). Every command goes through
    :class:`~coordinator.runtime.driver.Driver`, as in the server; each call returns the core's
    :class:`~coordinator.core.commands.Result` of the command it ran."""

    def __init__(
        self,
        *,
        assignors: Sequence[PartitionAssignor] | None = None,
        config: GroupCoordinatorConfig | None = None,
        ids: IdSource | None = None,
        now_ms: int = 0,
        parks_joins: bool = False,
    ) -> None:
        if assignors is None:
            from assignors.range import RangeAssignor
            from assignors.uniform import UniformAssignor

            assignors = [UniformAssignor(), RangeAssignor()]
        self.assignors = list(assignors)
        self.config = config or GroupCoordinatorConfig()
        self.ids = ids or SequentialIds()
        self.clock = VirtualClock(now_ms)
        self.registry = TopicRegistry(self.ids)
        plug_group_configs(self.registry, self.config)
        self.group_configs = group_configs_of(self.registry)
        """The groups' dynamic configs (the cluster log's), which the shard follows."""
        self.shard: Shard = new_shard(config=self.config, assignors=self.assignors, ids=self.ids)
        self.shard.group_configs.follow(self.group_configs)
        self.shard.groups.parks_joins = parks_joins
        self.world = VirtualWorld(self.clock)
        self.driver = Driver(
            machines=[self.shard, self.registry],
            config=self.config,
            clock=self.clock,
            host=self.world,
            workers=True,
            automatic=False,
            trace=self._trace,
        )
        self.world.driver = self.driver
        self.driver.state = RuntimeState.ACTIVE  # loaded (empty); offsets expire when told
        self.timers = self.driver.timers
        self.log: list[r.Record] = []
        """Every record of the shard, in order (the registry's are in :attr:`store_log` too)."""
        self.store_log: list[r.Record] = []
        self.events: list[LogEvent] = []
        self.completions: dict[int, Any] = {}
        """Responses to parked requests so far (token -> response)."""
        self.last_answer: Any = None
        """What the caller of the last request got: its response, the error it failed with
        (its write failed), or None while it waits (parked)."""
        self._results: list[Result[Any]] = []
        self._unclaimed: list[tuple[int, Any]] = []

    @property
    def now_ms(self) -> int:
        return self.clock.now

    @now_ms.setter
    def now_ms(self, value: int) -> None:
        self.clock.now = value

    @property
    def offloads(self) -> list[str]:
        """Groups whose target a worker computes (the inputs copied once the asking command
        was durable): :meth:`start_offload` / :meth:`finish_offload` play the worker."""
        return list(self.world.jobs)

    @property
    def regex_resolutions(self) -> list[str]:
        """Groups whose regexes the core asked to resolve off the heartbeat path, not yet done
        (in order, each once): :meth:`resolve_regexes` plays the runtime."""
        return [g for g, running in self.driver.own.resolving.items() if not running]

    @property
    def parked(self) -> list[str]:
        """Groups whose parked joins wait for their first target (``parks_joins``)."""
        return list(self.driver.own.first_targets)

    def _trace(self, what: str, details: dict[str, Any]) -> None:
        if what == "command":
            self._results.append(details["result"])
        elif what == "unclaimed":
            self._unclaimed.append((details["token"], details["response"]))

    # -------------------------------------------------------------- running commands

    def _settle(self, ran: int) -> list[Result[Any]]:
        """Write, answer and run what the commands since ``ran`` left to do; their results."""
        written: list[r.Record] = []
        self.world.settle(written)
        self.store_log += written
        self.log += [rec for rec in written if rec.group_id is not None]
        if self._unclaimed:
            token, response = self._unclaimed[0]
            raise AssertionError(f"parked response {token} completed twice: {response!r}")
        results = self._results[ran:]
        for res in results:
            self.events += res.events
        return results

    def _parked(self, token: int, fut: Any) -> None:
        self.completions[token] = fut.outcome()

    def _submit(self, index: int, fn: Any, *, park: bool = False) -> Result[Any]:
        ran = len(self._results)
        response, fut = self.driver.submit(index, fn, park=park)
        result = self._settle(ran)[0]
        self.last_answer = response if fut is None else fut.outcome() if fut.done() else None
        if isinstance(result.response, Pending) and fut is not None:
            fut.add_done_callback(partial(self._parked, result.response.token))
            self.world.run_ready()
        return result

    def run(self, fn: Callable[[Shard], Result[Any]]) -> Result[Any]:
        """Run a command of the shard (``fn(shard)`` returns its result) through the driver."""
        return self._submit(0, fn)

    def _request(self, cmd: Command) -> Result[Any]:
        return self._submit(0, cmd.fn, park=cmd.park)

    # -------------------------------------------------------------- topics

    def _topic_result(self, res: Result[list[TopicResult]]) -> TopicResult:
        assert res.response is not None
        (out,) = res.response
        if out.error_code:
            raise AssertionError(f"topic change failed: {out.error_message}")
        return out

    def create_topic(
        self,
        name: str,
        partitions: int,
        topic_id: str | None = None,
        racks: Mapping[int, Iterable[str]] | None = None,
    ) -> str:
        """Create a topic; ``racks``: partition -> the racks of its replicas."""
        topic = NewTopic(
            name=name,
            num_partitions=partitions,
            topic_id=topic_id,
            partition_racks={p: frozenset(rs) for p, rs in (racks or {}).items()},
        )
        return self._topic_result(
            self._submit(REGISTRY, lambda t: t.create_topics([topic]))
        ).topic_id

    def set_racks(self, name: str, racks: Mapping[int, Iterable[str]]) -> None:
        """Give a topic new replica racks, as a broker's metadata would (the registry follows
        a snapshot with every other topic as it is)."""
        topics = [
            NewTopic(
                name=t.name,
                num_partitions=t.num_partitions,
                topic_id=t.topic_id,
                partition_racks={p: frozenset(rs) for p, rs in racks.items()}
                if t.name == name
                else t.partition_racks,
            )
            for t in self.registry.list_topics()
        ]
        ran = len(self._results)
        self.driver.delete_topics_with(
            lambda t: t.apply_snapshot(topics), lambda changes: changes.deleted_names
        )
        self._settle(ran)

    def add_partitions(self, name: str, total: int) -> None:
        self._topic_result(self._submit(REGISTRY, lambda t: t.create_partitions([(name, total)])))

    def delete_topic(self, name: str) -> Result[None]:
        """Delete a topic; returns the shard's result (tombstones of the topic's offsets)."""
        ran = len(self._results)
        self.driver.delete_topics_with(
            lambda t: t.delete_topics([name]),
            lambda results: [x.name for x in results if x.error_code == 0],
        )
        deleted, on_shard = self._settle(ran)
        self._topic_result(deleted)
        return on_shard

    def topic_id(self, name: str) -> str:
        return self.registry.topics[name].topic_id

    # -------------------------------------------------------------- commands

    def heartbeat_result(self, **fields: Any) -> Result[ConsumerGroupHeartbeatResponse]:
        fields.setdefault("group_id", "grp")
        return self._request(requests.heartbeat(ConsumerGroupHeartbeat(**fields), self.now_ms))

    def heartbeat(self, **fields: Any) -> ConsumerGroupHeartbeatResponse:
        response = self.heartbeat_result(**fields).response
        assert response is not None
        return response

    def join(
        self,
        member_id: str,
        topics: Sequence[str] = (),
        *,
        regex: str | None = None,
        group_id: str = "grp",
        rebalance_timeout_ms: int = 60_000,
        **extra: Any,
    ) -> Result[ConsumerGroupHeartbeatResponse]:
        return self.heartbeat_result(
            group_id=group_id,
            member_id=member_id,
            member_epoch=0,
            rebalance_timeout_ms=rebalance_timeout_ms,
            subscribed_topic_names=tuple(topics) if topics or regex is None else None,
            subscribed_topic_regex=regex,
            topic_partitions={},
            **extra,
        )

    def commit(
        self, group_id: str, member_id: str, epoch: int, offsets: dict[tuple[str, int], int]
    ) -> OffsetCommitResponse | None:
        """OffsetCommit of {(topic name, partition): offset}."""
        by_topic: dict[str, list[OffsetCommitPartition]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append(
                OffsetCommitPartition(partition_index=partition, committed_offset=offset)
            )
        req = OffsetCommit(
            group_id=group_id,
            generation_id_or_member_epoch=epoch,
            member_id=member_id,
            topics=tuple(
                OffsetCommitTopic(name=t, partitions=tuple(ps)) for t, ps in by_topic.items()
            ),
        )
        response: OffsetCommitResponse | None = self._request(
            requests.offset_commit(req, self.now_ms)
        ).response
        return response

    def offload(self, group_id: str = "grp") -> None:
        """Have a worker compute ``group_id``'s target now, as the driver does when the core
        asks (``Result.offloads``): the inputs are copied and the group is in :attr:`offloads`
        (unless a computation of it is running already)."""
        self.driver.own.start_offloads([(0, group_id)])
        self._settle(len(self._results))

    def start_offload(self, group_id: str) -> Any:
        """The job a worker computes for ``group_id`` (an ``AssignmentJob``: the inputs the
        driver copied once the asking command was durable)."""
        return self.world.jobs[group_id][1]

    def finish_offload(self, job: Any, outcome: Any = None) -> Result[None]:
        """The worker is done: it ran the job's assignor (or answers ``outcome``: an
        ``AssignmentOutcome``, e.g. an error), and the driver applies the outcome as a command
        at the current time."""
        if outcome is None:
            assignor = next(a for a in self.assignors if a.name == job.assignor)
            outcome = run_job(job, assignor)
        ran = len(self._results)
        self.world.finish(job.group_id, outcome)
        return self._settle(ran)[0]

    def run_offloads(self) -> list[Result[None]]:
        """Finish every computation (bounded: each may ask for more)."""
        done = []
        for _ in range(100):
            if not self.world.jobs:
                break
            done.append(self.finish_offload(self.start_offload(next(iter(self.world.jobs)))))
        return done

    def resolve_regexes(self, group_id: str = "grp") -> Result[None]:
        """The driver's run of a group's regex resolution (asked by a heartbeat), as a command
        at the current time."""
        ran = len(self._results)
        self.driver.own.run_regex_resolution(group_id)
        return self._settle(ran)[0]

    def first_target(self, group_id: str) -> Result[None]:
        """The driver's call of ``first_target`` for a group with parked joins (the burst is in)."""
        ran = len(self._results)
        self.driver.own.run_first_target(group_id)
        return self._settle(ran)[0]

    def run_parked(self) -> list[Result[None]]:
        """Call ``first_target`` for every group that asks, and finish the computations that
        asks for, until nothing is asked (bounded)."""
        done = []
        for _ in range(1_000):
            if self.parked:
                done.append(self.first_target(self.parked[0]))
            elif self.world.jobs:
                done += self.run_offloads()
            else:
                break
        return done

    def expire_offsets(self) -> Result[None]:
        return self.run(lambda s: s.expire_offsets(self.now_ms))

    def alter_configs(self, group_id: str, changes: dict[str, str | None]) -> Result[None]:
        """Alter a group's dynamic configs in the cluster log (the registry's component)."""
        configs = self.group_configs
        result: Result[None] = self._submit(REGISTRY, lambda _reg: configs.alter(group_id, changes))
        return result

    def fail_next_writes(self, n: int = 1) -> None:
        """The writes of the next ``n`` batches fail (a full disk): the driver's failure path
        (rollback, the failed requests answered COORDINATOR_NOT_AVAILABLE, the core told of
        its write watches)."""
        for _ in range(n):
            self.world.failing_writes.append(StoreWriteError("injected: no space left on device"))

    def sleep(self, ms: int) -> list[Result[Any]]:
        """Advance the virtual clock, firing every timer that falls due, in order."""
        target = self.now_ms + ms
        fired = []
        while True:
            due: DueTimer | None = self.timers.pop_due(target)
            if due is None:
                break
            self.now_ms = max(self.now_ms, due.deadline_ms)
            ran = len(self._results)
            self.driver.fire(due, self.now_ms)
            fired += self._settle(ran)[:1]
        self.now_ms = target
        return fired

    # -------------------------------------------------------------- classic protocol

    def join_group(
        self,
        member_id: str = "",
        topics: tuple[str, ...] | list[str] = ("foo",),
        *,
        group_id: str = "grp",
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int = 60_000,
        instance_id: str | None = None,
        protocols: tuple[tuple[str, bytes], ...] | None = None,
        owned: dict[str, list[int]] | None = None,
        version: int = 3,
        protocol_type: str = "consumer",
        client_id: str = "client",
        supports_skip_assignment: bool = True,
    ) -> Any:
        """JoinGroup: the response, or ``Pending`` (see :meth:`resolve`). A dynamic member of a
        classic group gets ``<client_id>-<uuid>`` (``client-member-N`` with sequential ids).
        ``supports_skip_assignment=False``: a JoinGroup older than v9."""
        if protocols is None:
            protocols = (("range", subscription(topics, version=version, owned=owned)),)
        req = m.JoinGroup(
            group_id=group_id,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type=protocol_type,
            protocols=protocols,
            client_id=client_id,
            supports_skip_assignment=supports_skip_assignment,
        )
        return self._request(requests.classic_join(req, self.now_ms)).response

    def sync_group(
        self,
        member_id: str,
        generation_id: int,
        assignments: dict[str, bytes] | None = None,
        **fields: Any,
    ) -> Any:
        """SyncGroup: the response, or ``Pending`` (see :meth:`resolve`)."""
        return self.sync_group_result(member_id, generation_id, assignments, **fields).response

    def sync_group_result(
        self,
        member_id: str,
        generation_id: int,
        assignments: dict[str, bytes] | None = None,
        *,
        group_id: str = "grp",
        instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> Result[Any]:
        """SyncGroup: the core's result of the command."""
        req = m.SyncGroup(
            group_id=group_id,
            generation_id=generation_id,
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            assignments=tuple(sorted((assignments or {}).items())),
        )
        return self._request(requests.classic_sync(req, self.now_ms))

    def classic_heartbeat(
        self,
        member_id: str,
        generation_id: int,
        *,
        group_id: str = "grp",
        instance_id: str | None = None,
    ) -> m.HeartbeatResponse:
        req = m.Heartbeat(
            group_id=group_id,
            generation_id=generation_id,
            member_id=member_id,
            group_instance_id=instance_id,
        )
        response = self._request(requests.classic_heartbeat(req, self.now_ms)).response
        assert isinstance(response, m.HeartbeatResponse)
        return response

    def leave_group(
        self, *members: m.LeaveMember | str, group_id: str = "grp"
    ) -> m.LeaveGroupResponse:
        ms = tuple(
            x if isinstance(x, m.LeaveMember) else m.LeaveMember(member_id=x) for x in members
        )
        req = m.LeaveGroup(group_id=group_id, members=ms)
        response = self._request(requests.classic_leave(req, self.now_ms)).response
        assert isinstance(response, m.LeaveGroupResponse)
        return response

    def resolve(self, response: Any) -> Any:
        """The response itself, or the completion of a ``Pending`` (None if still waiting)."""
        if isinstance(response, Pending):
            return self.completions.get(response.token)
        return response

    @staticmethod
    def assigned(sync: m.SyncGroupResponse) -> dict[str, list[int]]:
        a = decode_assignment(sync.assignment) if sync.assignment else AssignmentMessage()
        return {t: sorted(ps) for t, ps in a.assigned_partitions}

    # -------------------------------------------------------------- state

    def seed_group(
        self,
        group_id: str,
        epoch: int,
        members: dict[str, tuple[Sequence[str], Assignment]],
        *,
        group_uid: str = "cgp_seeded",
        racks: Mapping[str, str | None] | None = None,
        instance_ids: Mapping[str, str] | None = None,
        classic: Mapping[str, ClassicMemberMetadata] | None = None,
    ) -> None:
        """Install a reconciled group at ``epoch`` by replaying its canonical records (Kafka's
        ConsumerGroupBuilder): every member STABLE at ``epoch`` owning its target; ``racks``:
        member -> its rack (the topics' partition racks are the registry's); ``instance_ids``:
        member -> its ``group.instance.id`` (a static member); ``classic``: member -> its
        classic-protocol metadata (a member that joined with JoinGroup). Session timers are
        armed as after a load."""
        recs: list[r.Record] = []
        for mid, (topics, _a) in sorted(members.items()):
            recs.append(
                r.member_metadata_record(
                    group_id,
                    ConsumerGroupMember(
                        member_id=mid,
                        instance_id=(instance_ids or {}).get(mid),
                        rack_id=(racks or {}).get(mid),
                        subscribed_topic_names=tuple(sorted(topics)),
                        rebalance_timeout_ms=60_000,
                        classic_member_metadata=(classic or {}).get(mid),
                    ),
                )
            )
        names = sorted({t for topics, _a in members.values() for t in topics})
        image = self.shard.topics.by_name
        recs.append(
            r.partition_metadata_record(
                group_id,
                {
                    n: TopicMetadata(
                        topic_id=image[n].topic_id,
                        name=n,
                        num_partitions=image[n].num_partitions,
                        partition_racks=image[n].partition_racks,
                    )
                    for n in names
                    if n in image
                },
            )
        )
        recs.append(r.group_epoch_record(group_id, epoch, group_uid))
        for mid, (_t, a) in sorted(members.items()):
            recs.append(r.target_assignment_record(group_id, mid, a))
        recs.append(r.target_assignment_epoch_record(group_id, epoch))
        for mid, (_t, a) in sorted(members.items()):
            member = ConsumerGroupMember(
                member_id=mid,
                member_epoch=epoch,
                previous_member_epoch=epoch - 1,
                assigned_partitions=a,
            )
            recs.append(r.current_assignment_record(group_id, replace(member)))
        for rec in recs:
            self.shard.replay(rec)
        self.log.extend(recs)
        self.store_log.extend(recs)
        self.shard.release(self.shard.mark())
        self.timers.apply(self.shard.on_loaded(self.now_ms))

    def replayed(self) -> Shard:
        """A fresh shard loaded from every record emitted so far."""
        fresh = new_shard(config=self.config, assignors=self.assignors, ids=SequentialIds("x"))
        fresh.group_configs.follow(self.group_configs)
        fresh.undo.enabled = False
        for record in self.log:
            fresh.replay(record)
        fresh.undo.enabled = True
        return fresh

    def owned(self, group_id: str = "grp") -> dict[str, Assignment]:
        group = self.shard.groups[group_id]
        return {mid: x.assigned_partitions for mid, x in group.members.items()}
