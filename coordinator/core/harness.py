"""A deterministic driver for the core: a shard, a topic registry, a virtual clock and a timer
table — the pure counterpart of the runtime (Kafka's GroupMetadataManagerTestContext).

Used by the unit, golden and simulation tests and by ``kip848 simulate``. Every record any
handler emits is kept in ``log`` (in order), so a test can replay the whole history into a fresh
shard and compare states.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from assignors.api import PartitionAssignor

from . import records as r
from .commands import (
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatResponse,
    IdSource,
    Result,
    SequentialIds,
)
from .config import GroupCoordinatorConfig
from .model import Assignment
from .shard import GroupCoordinatorShard
from .timers import DueTimer, TimerTable
from .topics import NewTopic, TopicRegistry


class CoreHarness:
    shard_class: type[GroupCoordinatorShard] = GroupCoordinatorShard
    """The legacy bridge's harness swaps in its bridged shard."""

    def __init__(
        self,
        *,
        assignors: Sequence[PartitionAssignor] | None = None,
        config: GroupCoordinatorConfig | None = None,
        ids: IdSource | None = None,
        now_ms: int = 0,
    ) -> None:
        if assignors is None:
            from assignors.range import RangeAssignor
            from assignors.uniform import UniformAssignor

            assignors = [UniformAssignor(), RangeAssignor()]
        self.assignors = list(assignors)
        self.config = config or GroupCoordinatorConfig()
        self.ids = ids or SequentialIds()
        self.now_ms = now_ms
        self.registry = TopicRegistry(self.ids)
        self.shard = self.shard_class(config=self.config, assignors=self.assignors, ids=self.ids)
        self.timers = TimerTable()
        self.log: list[r.Record] = []
        self.completions: dict[int, Any] = {}
        """Deferred responses answered so far (token -> response)."""

    # -------------------------------------------------------------- topics

    def create_topic(self, name: str, partitions: int, topic_id: str | None = None) -> str:
        res = self.registry.create_topics(
            [NewTopic(name=name, num_partitions=partitions, topic_id=topic_id)]
        )
        (out,) = res.response  # type: ignore[misc]
        if out.error_code:
            raise AssertionError(f"create_topic({name}) failed: {out.error_message}")
        self._topics_changed(res)
        return out.topic_id

    def add_partitions(self, name: str, total: int) -> None:
        res = self.registry.create_partitions([(name, total)])
        if res.response[0].error_code:  # type: ignore[index]
            raise AssertionError(res.response[0].error_message)  # type: ignore[index]
        self._topics_changed(res)

    def delete_topic(self, name: str) -> Result[None]:
        """Delete a topic; returns the shard's result (tombstones of the topic's offsets)."""
        res = self.registry.delete_topics([name])
        if res.response[0].error_code:  # type: ignore[index]
            raise AssertionError(res.response[0].error_message)  # type: ignore[index]
        self._topics_changed(res)
        return self._commit(self.shard.on_topics_deleted([name]))

    def topic_id(self, name: str) -> str:
        return self.registry.topics[name].topic_id

    def _topics_changed(self, res: Result[Any]) -> None:
        self.registry.release(self.registry.mark())
        self.shard.set_topics(self.registry.image())

    # -------------------------------------------------------------- commands

    def _commit(self, res: Result[Any]) -> Result[Any]:
        self.log.extend(res.records)
        self.timers.apply(res.timers)
        for token, response in res.completions:
            if token in self.completions:
                raise AssertionError(f"deferred response {token} completed twice")
            self.completions[token] = response
        self.shard.release(self.shard.mark())
        return res

    def heartbeat_result(self, **fields: Any) -> Result[ConsumerGroupHeartbeatResponse]:
        fields.setdefault("group_id", "grp")
        return self._commit(
            self.shard.consumer_group_heartbeat(ConsumerGroupHeartbeat(**fields), self.now_ms)
        )

    def heartbeat(self, **fields: Any) -> ConsumerGroupHeartbeatResponse:
        return self.heartbeat_result(**fields).response  # type: ignore[return-value]

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
    ) -> Any:
        """OffsetCommit of {(topic name, partition): offset}."""
        from .offsets import OffsetCommit, OffsetCommitPartition, OffsetCommitTopic

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
        return self._commit(self.shard.offset_commit(req, self.now_ms)).response

    def expire_offsets(self) -> Result[None]:
        return self._commit(self.shard.expire_offsets(self.now_ms))

    def alter_configs(self, group_id: str, changes: dict[str, str | None]) -> Result[None]:
        return self._commit(self.shard.alter_group_configs(group_id, changes))

    def sleep(self, ms: int) -> list[Result[Any]]:
        """Advance the virtual clock, firing every timer that falls due, in order."""
        target = self.now_ms + ms
        fired = []
        while True:
            due: DueTimer | None = self.timers.pop_due(target)
            if due is None:
                break
            self.now_ms = max(self.now_ms, due.deadline_ms)
            fired.append(self._commit(self.shard.on_timer(due, self.now_ms)))
        self.now_ms = target
        return fired

    def seed_group(
        self,
        group_id: str,
        epoch: int,
        members: dict[str, tuple[Sequence[str], Assignment]],
        *,
        group_uid: str = "cgp_seeded",
    ) -> None:
        """Install a reconciled group at ``epoch`` by replaying its canonical records (Kafka's
        ConsumerGroupBuilder): every member STABLE at ``epoch`` owning its target. Session timers
        are armed as after a load."""
        from dataclasses import replace as _replace

        from .model import ConsumerGroupMember, TopicMetadata

        recs: list[r.Record] = []
        for mid, (topics, _a) in sorted(members.items()):
            recs.append(
                r.member_metadata_record(
                    group_id,
                    ConsumerGroupMember(
                        member_id=mid,
                        subscribed_topic_names=tuple(sorted(topics)),
                        rebalance_timeout_ms=60_000,
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
                        topic_id=image[n].topic_id, name=n, num_partitions=image[n].num_partitions
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
            m = ConsumerGroupMember(
                member_id=mid,
                member_epoch=epoch,
                previous_member_epoch=epoch - 1,
                assigned_partitions=a,
            )
            recs.append(r.current_assignment_record(group_id, _replace(m)))
        for rec in recs:
            self.shard.replay(rec)
        self.log.extend(recs)
        self.shard.release(self.shard.mark())
        self.timers.apply(self.shard.on_loaded(self.now_ms))

    # -------------------------------------------------------------- checks

    def replayed(self) -> GroupCoordinatorShard:
        """A fresh shard loaded from every record emitted so far."""
        fresh = self.shard_class(
            config=self.config, assignors=self.assignors, ids=SequentialIds("x")
        )
        fresh.undo.enabled = False
        for record in self.log:
            fresh.replay(record)
        fresh.undo.enabled = True
        return fresh

    def owned(self, group_id: str = "grp") -> dict[str, Assignment]:
        group = self.shard.groups[group_id]
        return {mid: m.assigned_partitions for mid, m in group.members.items()}
