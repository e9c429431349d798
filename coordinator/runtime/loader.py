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
from itertools import groupby
from operator import itemgetter

from coordinator.core import codec
from coordinator.core.errors import IllegalStateError
from coordinator.core.group_load import load_group
from coordinator.core.timeline import UndoLog
from coordinator.core.topics import TopicRegistry
from coordinator.factory import Shard
from coordinator.routing import CLUSTER_LOG, partition_for

from .collector import no_collections
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
    Pause it (CPython's collector and a server loop's, ``collector.py``), then freeze what was
    loaded so later collections skip it."""
    for undo in logs:
        undo.enabled = False
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        with no_collections():
            yield
    finally:
        for undo in logs:
            undo.enabled = True
        gc.freeze()
        if gc_was_enabled:
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


@dataclass(slots=True)
class PartitionImage:
    """One partition's compacted view as read from the store, each group's records (key and
    value bytes, in offset order) apart, not decoded yet: what a group needs to be replayed on
    its own (:func:`replay_group`). Groups are independent (every component keeps its state by
    group id), so replaying them one by one builds the state an offset-order replay does."""

    partition: int
    groups: dict[str, list[tuple[int, bytes, bytes, str]]] = field(default_factory=dict)
    """group id -> its rows as the store gave them: (offset, key, value, group id)"""
    records: int = 0
    last_offset: int = -1
    seconds: float = 0.0


_group_of = itemgetter(3)


def read_partition(store: RecordStore, partition: int) -> PartitionImage:
    """Read one partition's log, grouped by group, without decoding anything (the cheap part
    of a load: a partition can serve once this is done, its groups replayed when first used).
    Raises ``IllegalStateError`` for a record of another partition's group."""
    image = PartitionImage(partition)
    partitions = store.partitions
    groups = image.groups
    clock = time.perf_counter
    start = clock()
    get = groups.get
    for rows in store.load_rows(partition):
        # A group's records mostly come in runs (a command writes them together): one look-up
        # per run, each run added in C.
        for gid, run in groupby(rows, _group_of):
            bucket = get(gid)
            if bucket is None:
                if gid is None or partition_for(gid, partitions) != partition:
                    raise IllegalStateError(
                        f"partition {partition} of the store holds a record of "
                        f"{'the cluster' if gid is None else f'group {gid!r}'}, which belongs "
                        "elsewhere"
                    )
                bucket = groups[gid] = []
            bucket.extend(run)  # type: ignore[arg-type]
        image.records += len(rows)
        image.last_offset = rows[-1][0]
    image.seconds = clock() - start
    return image


def replay_group(shard: Shard, records: Sequence[tuple[int, bytes, bytes, str]]) -> None:
    """Replay one group's stored records into ``shard``, below its undo log: what was durable
    is never rolled back. Raises ``IllegalStateError`` (from decode/replay) on a corrupt
    store."""
    decode = codec.decode
    replay = shard.replay
    undo = shard.undo
    enabled, undo.enabled = undo.enabled, False
    try:
        for _offset, key, value, _gid in records:
            replay(decode(key, value))
    finally:
        undo.enabled = enabled


def load_partition(
    store: RecordStore, partition: int, shard: Shard, *, at_once: bool = True
) -> ShardLoadStats:
    """Replay one partition's log into ``shard`` (fresh, empty), group by group. Raises
    ``IllegalStateError`` (from decode/replay) on a corrupt store, or a record of another
    partition's group. Most groups are built from their bytes at once (``group_load.py``);
    the others are replayed record by record (:func:`replay_group`). ``at_once=False``
    replays every group record by record: the reference the tests and the load benchmark
    compare with (the same state, more slowly)."""
    with _bulk([shard.undo]):  # the rows read are garbage soon: no collection for them either
        image = read_partition(store, partition)
        start = time.perf_counter()
        for group_id, records in image.groups.items():
            if not (at_once and load_group(shard, group_id, records)):
                replay_group(shard, records)
        image.groups = {}  # the rows are freed now, not frozen with the loaded state
    return ShardLoadStats(
        partition,
        records=image.records,
        groups=len(shard.groups) + len(shard.classic_groups),
        seconds=image.seconds + time.perf_counter() - start,
        last_offset=image.last_offset,
    )


def load_into(
    store: RecordStore,
    shards: Sequence[Shard],
    registry: TopicRegistry,
    *,
    at_once: bool = True,
) -> LoadStats:
    """Replay every log into ``shards`` (one fresh shard per partition) and ``registry``; then
    give every shard the registry's topics. ``at_once``: see :func:`load_partition`."""
    if len(shards) != store.partitions:
        raise ValueError(f"{len(shards)} shards for a store of {store.partitions} partitions")
    start = time.perf_counter()
    stats = LoadStats(shards=[])
    stats.topic_records, stats.last_offset = load_cluster(store, registry)
    image = registry.image()
    for partition, shard in enumerate(shards):
        stats.shards.append(load_partition(store, partition, shard, at_once=at_once))
        shard.set_topics(image)
    stats.topics = len(registry.topics)
    stats.seconds = time.perf_counter() - start
    return stats
