"""Loading a store's logs into fresh state machines.

Loading replays a log's compacted view in offset order through the very same ``replay`` the
handlers use: a coordinator partition's log into that partition's shard, the cluster log into
the topic registry. A partition is loaded as a whole, on its own: the runtime serves it as soon
as it is loaded. Which partition a group belongs to is :func:`coordinator.routing.partition_for`.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from coordinator.core import codec
from coordinator.core.errors import IllegalStateError
from coordinator.core.timeline import UndoLog
from coordinator.core.topics import TopicRegistry
from coordinator.factory import Shard
from coordinator.routing import CLUSTER_LOG, partition_for

from .store import RecordStore

log = logging.getLogger("kip848.runtime")


@dataclass(slots=True)
class ShardLoadStats:
    """One partition's load: its records, groups and time."""

    shard: int
    records: int = 0
    groups: int = 0
    seconds: float = 0.0
    last_offset: int = -1


@dataclass(slots=True)
class LoadStats:
    shards: list[ShardLoadStats]
    topic_records: int = 0
    topics: int = 0
    seconds: float = 0.0
    last_offset: int = -1
    """The cluster log's last offset loaded."""
    per_type: dict[str, int] = field(default_factory=dict)

    @property
    def records(self) -> int:
        return self.topic_records + sum(s.records for s in self.shards)

    @property
    def groups(self) -> int:
        return sum(s.groups for s in self.shards)


@contextmanager
def _bulk(logs: Sequence[UndoLog]) -> Iterator[None]:
    """Replay without undo entries and without the cyclic GC. Loading builds millions of
    long-lived objects: the GC would rescan them again and again (it doubles the load time).
    Pause it, then freeze what was loaded so later collections skip it."""
    for undo in logs:
        undo.enabled = False
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        for undo in logs:
            undo.enabled = True
        if gc_was_enabled:
            gc.freeze()
            gc.enable()


def load_cluster(store: RecordStore, registry: TopicRegistry) -> tuple[int, int]:
    """Replay the cluster log into ``registry`` (fresh, empty). Returns (records, last
    offset)."""
    decode = codec.decode
    n, last = 0, -1
    with _bulk([registry.undo]):
        for rows in store.load_rows(CLUSTER_LOG):
            for _offset, key, value, _gid in rows:
                registry.replay(decode(key, value))
            n += len(rows)
            last = rows[-1][0]
    return n, last


def load_partition(store: RecordStore, partition: int, shard: Shard) -> ShardLoadStats:
    """Replay one partition's log into ``shard`` (fresh, empty). Raises ``IllegalStateError``
    (from decode/replay) on a corrupt store, or a record of another partition's group."""
    stats = ShardLoadStats(partition)
    partitions = store.partitions
    decode = codec.decode
    replay = shard.replay
    seen: set[str] = set()
    clock = time.perf_counter
    start = clock()
    with _bulk([shard.undo]):
        for rows in store.load_rows(partition):
            for _offset, key, value, gid in rows:
                if gid not in seen:
                    if gid is None or partition_for(gid, partitions) != partition:
                        raise IllegalStateError(
                            f"partition {partition} of the store holds a record of "
                            f"{'the cluster' if gid is None else f'group {gid!r}'}, which "
                            "belongs elsewhere"
                        )
                    seen.add(gid)
                replay(decode(key, value))
            stats.records += len(rows)
            stats.last_offset = rows[-1][0]
    stats.seconds = clock() - start
    stats.groups = len(shard.groups) + len(shard.classic_groups)
    return stats


def load_into(store: RecordStore, shards: Sequence[Shard], registry: TopicRegistry) -> LoadStats:
    """Replay every log into ``shards`` (one fresh shard per partition) and ``registry``; then
    give every shard the registry's topics."""
    if len(shards) != store.partitions:
        raise ValueError(f"{len(shards)} shards for a store of {store.partitions} partitions")
    start = time.perf_counter()
    stats = LoadStats(shards=[])
    stats.topic_records, stats.last_offset = load_cluster(store, registry)
    image = registry.image()
    for partition, shard in enumerate(shards):
        stats.shards.append(load_partition(store, partition, shard))
        shard.set_topics(image)
    stats.topics = len(registry.topics)
    stats.seconds = time.perf_counter() - start
    return stats
