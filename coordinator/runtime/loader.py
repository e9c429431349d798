"""Loading a store into fresh state machines, and the stable group -> shard hash.

Loading replays the store's compacted view in offset order through the very same ``replay``
the handlers use. Records are routed by their stored ``group_id`` (so the shard count may change
between runs) or, for topic records (``group_id`` None), to the topic registry.
"""

from __future__ import annotations

import gc
import logging
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from coordinator.core import codec
from coordinator.core.timeline import UndoLog
from coordinator.core.topics import TopicRegistry
from coordinator.factory import Shard

from .store import RecordStore

log = logging.getLogger("kip848.runtime")


def shard_of(group_id: str, shards: int) -> int:
    """Stable across processes and runs: CRC-32 of the UTF-8 group id, modulo the shard count.
    (Python's ``hash()`` is salted per process and must never be used for this.)"""
    return zlib.crc32(group_id.encode("utf-8")) % shards


@dataclass(slots=True)
class ShardLoadStats:
    shard: int
    records: int = 0
    groups: int = 0
    seconds: float = 0.0


@dataclass(slots=True)
class LoadStats:
    shards: list[ShardLoadStats]
    topic_records: int = 0
    topics: int = 0
    seconds: float = 0.0
    last_offset: int = -1
    per_type: dict[str, int] = field(default_factory=dict)

    @property
    def records(self) -> int:
        return self.topic_records + sum(s.records for s in self.shards)

    @property
    def groups(self) -> int:
        return sum(s.groups for s in self.shards)


def load_into(store: RecordStore, shards: Sequence[Shard], registry: TopicRegistry) -> LoadStats:
    """Replay every stored record into ``shards``/``registry`` (fresh, empty). Raises
    ``IllegalStateError`` (from decode/replay) on a corrupt store."""
    n = len(shards)
    stats = LoadStats(shards=[ShardLoadStats(i) for i in range(n)])
    logs: list[UndoLog] = [*(shard.undo for shard in shards), registry.undo]
    for undo in logs:
        undo.enabled = False
    decode = codec.decode
    counts = [0] * n
    times = [0.0] * n
    buckets: list[list[tuple[bytes, bytes]]] = [[] for _ in range(n)]
    clock = time.perf_counter
    start = clock()
    topic_records = 0
    last = -1
    cache: dict[str, int] = {}

    def drain() -> None:
        # Records are replayed in chunks, bucketed by shard: per shard the offset order is
        # kept (shards are independent), and timing costs two clock reads per bucket.
        for i, bucket in enumerate(buckets):
            if bucket:
                t0 = clock()
                replay = shards[i].replay
                for key, value in bucket:
                    replay(decode(key, value))
                times[i] += clock() - t0
                counts[i] += len(bucket)
                bucket.clear()

    # Loading builds millions of long-lived objects: the cyclic GC would rescan them again
    # and again (it doubles the load time). Pause it, then freeze what was loaded so later
    # collections skip it.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for rows in store.load_rows():  # chunks of (offset, key, value, group id) tuples
            for _offset, key, value, gid in rows:
                if gid is None:
                    registry.replay(decode(key, value))
                    topic_records += 1
                    continue
                idx = cache.get(gid)
                if idx is None:
                    idx = cache[gid] = shard_of(gid, n)
                buckets[idx].append((key, value))
            last = rows[-1][0]
            drain()
    finally:
        for undo in logs:
            undo.enabled = True
        if gc_was_enabled:
            gc.freeze()
            gc.enable()
    image = registry.image()
    for i, shard in enumerate(shards):
        shard.set_topics(image)
        s = stats.shards[i]
        s.records, s.seconds = counts[i], times[i]
        s.groups = len(shard.groups) + len(shard.classic_groups)
    stats.topic_records = topic_records
    stats.topics = len(registry.topics)
    stats.last_offset = last
    stats.seconds = clock() - start
    return stats
