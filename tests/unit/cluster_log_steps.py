"""Set-up shared by the cluster-log tests that follow an append a loop step at a time
(tests/unit/test_cluster_log_*.py): a catch-up begun and read at every loop step, the records
replayed counted by loop step and copy, one append of given records, the application of an
append in parts watched, and a writer beside a node serving group g's partition on one memory
store; with the nodes of ``test_cluster_log_reload``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import pytest
from builders import commit

from coordinator.core import records as r
from coordinator.core.commands import Result
from coordinator.core.group_configs import SESSION_TIMEOUT_CONFIG
from coordinator.core.offsets import OffsetFetchGroup
from coordinator.core.topics import NewTopic
from coordinator.routing import CLUSTER_LOG
from coordinator.runtime import REGISTRY
from coordinator.runtime import partitions as partitions_module
from coordinator.runtime.store import MemoryRecordStore
from coordinator.server.api import AlterConfig, AlterResource, IncrementalAlterConfigs

if TYPE_CHECKING:
    from test_cluster_log_reload import Node

G = "g"
T = TypeVar("T")


def start_catch_up(behind: Node, writer: Node) -> asyncio.Future[None]:
    """Node ``behind``'s heartbeat read the cluster log's end as ``writer`` (who appended
    last) knows it: its catch-up, begun (done once caught up)."""
    behind.parts.follow_cluster_log(writer.store.last_offset(CLUSTER_LOG))
    return asyncio.ensure_future(behind.parts.caught_up())


async def reads_while_catching_up(behind: Node, writer: Node, read: Callable[[Node], T]) -> list[T]:
    """Node ``behind`` catches up with ``writer``'s appends: what ``read`` answered on it at
    every loop step until it has (a read between the steps, as a heartbeat or ListTopics
    would come), in order."""
    catching_up = start_catch_up(behind, writer)
    seen = []
    while not catching_up.done():
        seen.append(read(behind))
        await asyncio.sleep(0)
    return seen


def count_replays(
    monkeypatch: pytest.MonkeyPatch, n: Node, now: Callable[[], int]
) -> dict[int, dict[str, int]]:
    """Loop step (``now()``) -> copy ("registry", "committed") -> the records node ``n``
    replayed into it in that step, counted from now on."""
    replayed: dict[int, dict[str, int]] = {}

    def counting(copy: str, replay: Callable[[Any], None]) -> Callable[[Any], None]:
        def counted(record: Any) -> None:
            per_step = replayed.setdefault(now(), {})
            per_step[copy] = per_step.get(copy, 0) + 1
            replay(record)

        return counted

    registry, committed = n.rt.registry, n.rt.committed.registry
    monkeypatch.setattr(registry, "replay", counting("registry", registry.replay))
    monkeypatch.setattr(committed, "replay", counting("committed", committed.replay))
    return replayed


async def append_records(writer: Node, records: Sequence[r.Record]) -> None:
    """One append of ``records`` (of any kinds, in their order) by ``writer``: a command of
    its registry that replays them."""

    def write(registry: Any) -> Result[None]:
        for record in records:
            registry.replay(record)
        return Result(records=list(records))

    await writer.rt._submit(REGISTRY, write)


def watch_parts(monkeypatch: pytest.MonkeyPatch) -> dict[str, bool]:
    """Where an application of an append in parts (``Partitions._apply_in_parts``) is, from
    now on: ``"was"`` once one has begun, ``"now"`` while it runs (absent: none yet)."""
    parts: dict[str, bool] = {}
    apply_in_parts = partitions_module.Partitions._apply_in_parts

    async def watched(self: Any, *args: Any) -> None:
        parts["now"] = parts["was"] = True
        try:
            await apply_in_parts(self, *args)
        finally:
            parts["now"] = False

    monkeypatch.setattr(partitions_module.Partitions, "_apply_in_parts", watched)
    return parts


def shared_memory() -> tuple[MemoryRecordStore, Callable[[], MemoryRecordStore]]:
    """One memory store of one coordinator partition, and how each node opens it (the data
    shared, as every node shares a PostgreSQL database)."""
    shared = MemoryRecordStore(partitions=1)

    def open_store() -> MemoryRecordStore:
        return MemoryRecordStore(_data=shared._data)

    return shared, open_store


async def serve_group(writer: Node, server: Node, shared: MemoryRecordStore, topics: str) -> None:
    """Node ``server`` serves partition 0 (leader epoch 1) of ``shared``; ``writer`` creates
    ``topics`` (one partition each, x and y among them) and ``server`` follows; group g
    commits offset 42 of x and 7 of y on ``server``."""
    shared.set_leader(0, server.parts.lead.node_id, 1)
    await server.parts.load_partition(0, 1)
    await writer.rt.create_topics([NewTopic(name=n, num_partitions=1) for n in topics])
    await server.follow(writer)
    await server.rt.offset_commit(commit(G, {("x", 0): 42, ("y", 0): 7}))


async def fetched(n: Node) -> dict[tuple[str, int], int]:
    """Group g's committed offsets on node ``n``, by (topic, partition)."""
    (answer,) = await n.rt.offset_fetch([OffsetFetchGroup(group_id=G)])
    return {
        (t.name, p.partition_index): p.committed_offset for t in answer.topics for p in t.partitions
    }


def alter_session_timeout(group: str, value: str | None) -> IncrementalAlterConfigs:
    """An IncrementalAlterConfigs setting ``group``'s session timeout to ``value`` (None:
    deleting it, back to the default)."""
    op = 0 if value is not None else 1  # SET, DELETE
    return IncrementalAlterConfigs(
        resources=(
            AlterResource(
                resource_type=32,
                resource_name=group,
                configs=(AlterConfig(name=SESSION_TIMEOUT_CONFIG, operation=op, value=value),),
            ),
        )
    )
