"""Shared by the core, bridge and runtime tests: one deterministic test assignor and one set of
builders for assignments, records, requests and an in-process runtime.

Like Kafka's GroupMetadataManagerTest, protocol tests drive groups with an assignor whose result
is obvious (:class:`RoundRobinAssignor`), so they check the protocol, not the assignor.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from assignors.api import GroupAssignment, GroupSpec, PartitionAssignor, TopicMetadata
from assignors.uniform import UniformAssignor
from coordinator.core import records as r
from coordinator.core.commands import ConsumerGroupHeartbeat, SequentialIds
from coordinator.core.config import parse_config
from coordinator.core.model import Assignment, ConsumerGroupMember, MemberState
from coordinator.core.offsets import OffsetCommit, OffsetCommitPartition, OffsetCommitTopic
from coordinator.harness import subscription
from coordinator.runtime import CoordinatorRuntime, ManualClock
from coordinator.runtime.store import JournalEntry, MemoryRecordStore, StoredRecord, log_ids
from legacy_bridge import messages as classic
from legacy_bridge.protocol import AssignmentMessage, encode_assignment

G = "grp"
"""The group most tests use."""
START_MS = 1_000_000
"""Where the runtime's manual clock starts."""


class RoundRobinAssignor:
    """For each topic, partition p goes to the (p mod n)-th of its n subscribers in member-id
    order. Counts its calls."""

    def __init__(self, name: str = "rr") -> None:
        self.name = name
        self.calls = 0

    def assign(self, spec: GroupSpec, topics: Mapping[str, TopicMetadata]) -> GroupAssignment:
        self.calls += 1
        out: dict[str, dict[str, frozenset[int]]] = {m: {} for m in spec.members}
        for topic_id in sorted(topics):
            subs = sorted(m for m, s in spec.members.items() if topic_id in s.subscribed_topic_ids)
            for i, member_id in enumerate(subs):
                ps = frozenset(
                    p for p in range(topics[topic_id].num_partitions) if p % len(subs) == i
                )
                if ps:
                    out[member_id][topic_id] = ps
        return GroupAssignment(members=out)


# ------------------------------------------------------------------ assignments


def p(topic_id: str, *parts: int) -> dict[str, frozenset[int]]:
    """An assignment of ``parts`` of one topic (empty when there are none)."""
    return {topic_id: frozenset(parts)} if parts else {}


def pp(*assignments: Mapping[str, frozenset[int]]) -> dict[str, frozenset[int]]:
    """Assignments of several topics merged."""
    out: dict[str, frozenset[int]] = {}
    for a in assignments:
        out.update(a)
    return out


# ------------------------------------------------------------------ records


def mm(
    member_id: str, topics: tuple[str, ...] = ("foo",), *, group_id: str = G, **fields: Any
) -> r.Record:
    """A ConsumerGroupMemberMetadata record (rebalance timeout 60 s unless given)."""
    fields.setdefault("rebalance_timeout_ms", 60_000)
    return r.member_metadata_record(
        group_id, ConsumerGroupMember(member_id=member_id, subscribed_topic_names=topics, **fields)
    )


def ca(
    member_id: str,
    epoch: int,
    prev: int,
    state: MemberState,
    assigned: Assignment,
    pending: Assignment | None = None,
    *,
    group_id: str = G,
    epochs: Mapping[int, Assignment] | None = None,
) -> r.Record:
    """A ConsumerGroupCurrentMemberAssignment record; ``epochs`` (KIP-1251: epoch ->
    partitions) say when partitions were assigned, the others were at ``epoch``."""
    return r.current_assignment_record(
        group_id,
        ConsumerGroupMember(
            member_id=member_id,
            member_epoch=epoch,
            previous_member_epoch=prev,
            state=state,
            assigned_partitions=assigned,
            partitions_pending_revocation=pending or {},
            assignment_epochs=epochs or {},
        ),
    )


def classic_assignment(*ps: int, topic: str = "foo") -> bytes:
    """A classic member's assignment (embedded consumer protocol) of ``ps`` of one topic."""
    return encode_assignment(AssignmentMessage(assigned_partitions=((topic, ps),)))


def classic_record(
    members: tuple[tuple[str, tuple[int, ...]], ...] = (("A", (0, 1)), ("B", (2, 3))),
    generation: int = 5,
    *,
    group_id: str = G,
) -> r.Record:
    """A GroupMetadata record: a Stable classic group whose members subscribe to foo."""
    meta = subscription(["foo"])
    return r.classic_group_record(
        group_id,
        r.GroupMetadataValue(
            protocol_type="consumer",
            generation=generation,
            protocol="range" if members else None,
            leader=members[0][0] if members else None,
            current_state_timestamp_ms=0,
            members=tuple(
                r.GroupMetadataMemberValue(
                    member_id=x,
                    group_instance_id=None,
                    client_id="",
                    client_host="",
                    rebalance_timeout_ms=60_000,
                    session_timeout_ms=45_000,
                    subscription=meta,
                    assignment=classic_assignment(*ps),
                )
                for x, ps in members
            ),
        ),
    )


# ------------------------------------------------------------------ requests


def join(
    group: str = G, topics: tuple[str, ...] = ("t",), member_id: str = ""
) -> ConsumerGroupHeartbeat:
    """A ConsumerGroupHeartbeat joining ``group`` (epoch 0, rebalance timeout 30 s)."""
    return ConsumerGroupHeartbeat(
        group_id=group,
        member_id=member_id,
        member_epoch=0,
        rebalance_timeout_ms=30_000,
        subscribed_topic_names=topics,
        topic_partitions={},
    )


def beat(
    group: str, member_id: str, epoch: int, owned: Assignment | None = None
) -> ConsumerGroupHeartbeat:
    """A plain ConsumerGroupHeartbeat (only the owned partitions, if given)."""
    return ConsumerGroupHeartbeat(
        group_id=group, member_id=member_id, member_epoch=epoch, topic_partitions=owned
    )


def commit(
    group: str, offsets: dict[tuple[str, int], int], epoch: int = -1, member_id: str = ""
) -> OffsetCommit:
    """An OffsetCommit of {(topic name, partition): offset}."""
    by_topic: dict[str, list[OffsetCommitPartition]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        by_topic.setdefault(topic, []).append(
            OffsetCommitPartition(partition_index=partition, committed_offset=offset)
        )
    return OffsetCommit(
        group_id=group,
        generation_id_or_member_epoch=epoch,
        member_id=member_id,
        topics=tuple(OffsetCommitTopic(name=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
    )


# ------------------------------------------------------------------ stores


def stored(store: Any) -> list[StoredRecord]:
    """Every log's compacted view in turn (the cluster log, then the partitions)."""
    return [rec for log in log_ids(store.partitions) for _offset, rec in store.load(log)]


def stored_journal(store: Any) -> list[JournalEntry]:
    """Every log's journal in turn (the cluster log, then the partitions)."""
    return [e for log in log_ids(store.partitions) for e in store.journal(log)]


def written(store: Any) -> int:
    """How many records were ever appended to the store, over every log."""
    return sum(store.last_offset(log) + 1 for log in log_ids(store.partitions))


# ------------------------------------------------------------------ the runtime


def make_runtime(
    store: MemoryRecordStore | None = None,
    shards: int | None = None,
    *,
    assignors: list[PartitionAssignor] | None = None,
    **settings: str,
) -> CoordinatorRuntime:
    """An in-process runtime: memory store, manual clock at :data:`START_MS`, sequential ids,
    ``settings`` by Kafka config name (``**{"offsets.retention.minutes": "10"}``). Targets are
    computed in the heartbeat that changes a group (``group.consumer.assignment.interval.ms``
    0: the stories do not move the clock between joins) unless ``settings`` say otherwise.
    ``shards``: coordinator partitions (the store's, when a store is given; else 2)."""
    if shards is None:
        shards = store.partitions if store is not None else 2
    config = parse_config(
        {
            "group.coordinator.shards": str(shards),
            "group.consumer.assignment.interval.ms": "0",
            **settings,
        }
    )
    return CoordinatorRuntime(
        config=config,
        store=store if store is not None else MemoryRecordStore(partitions=shards),
        clock=ManualClock(START_MS),
        ids=SequentialIds(),
        assignors=assignors if assignors is not None else [UniformAssignor()],
    )


def classic_join_req(
    member_id: str, owned: dict[str, list[int]] | None = None, *, group_id: str = G
) -> classic.JoinGroup:
    """A classic consumer's JoinGroup (range, subscribed to foo; ``owned``: its partitions)."""
    return classic.JoinGroup(
        group_id=group_id,
        session_timeout_ms=45_000,
        rebalance_timeout_ms=60_000,
        member_id=member_id,
        protocol_type="consumer",
        protocols=(("range", subscription(["foo"], owned=owned)),),
    )


class LoopSteps:
    """Counts the event loop's steps while in use (``with``): a callback that schedules itself
    again each step, so ``now`` tells callbacks of different steps apart."""

    def __init__(self) -> None:
        self.now = 0
        self._running = False

    def __enter__(self) -> LoopSteps:
        self._running = True
        asyncio.get_running_loop().call_soon(self._tick)
        return self

    def __exit__(self, *exc: object) -> None:
        self._running = False

    def _tick(self) -> None:
        self.now += 1
        if self._running:
            asyncio.get_running_loop().call_soon(self._tick)
