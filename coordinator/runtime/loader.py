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
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import groupby
from operator import itemgetter
from typing import Any

import orjson

from coordinator.core import codec
from coordinator.core.errors import IllegalStateError
from coordinator.core.group_load import load_group
from coordinator.core.records import Record, RecordKey
from coordinator.core.timeline import UndoLog
from coordinator.core.topics import TopicRegistry
from coordinator.factory import Shard
from coordinator.routing import CLUSTER_LOG, partition_for

from .collector import free_gradually, no_collections
from .committed import CommittedCluster
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


def load_cluster(
    store: RecordStore, registry: TopicRegistry, committed: CommittedCluster | None = None
) -> tuple[int, int]:
    """Replay the cluster log into ``registry`` (fresh, empty), and into ``committed`` (its
    copy as of its last durable write, ``committed.py``) when given, and build their topics
    images and the committed copy's ACL index (``SecurityMetadata.acl_index``). Returns
    (records, the log's last offset as of the view: ``RecordStore.load_snapshot``, past the
    view's last record when the newest were tombstones)."""
    decode = codec.decode
    n = 0
    end, chunks = store.load_snapshot(CLUSTER_LOG)
    with _bulk([registry.undo]):
        for rows in chunks:
            records = [decode(key, value) for _offset, key, value, _gid in rows]
            for record in records:
                registry.replay(record)
            if committed is not None:
                committed.replay(records)
            n += len(rows)
        # Their first topics images, built whole here with the load (a loader thread's work
        # when a node starts): the loop builds only the changes after it. So is the index of
        # the ACLs the authorizer decides over (the committed copy's: kept in step with its
        # ACL records from now on, never built whole on the loop: 34 ms at 100,000 ACLs).
        registry.image()
        if committed is not None:
            committed.registry.image()
            committed.security.acl_index()
    if committed is not None:
        committed.loaded = True
    return n, end


def cluster_changes(store: RecordStore, live: Mapping[RecordKey, Any]) -> tuple[int, list[Record]]:
    """What a node that fell behind the journal's retention replaces its copy of the cluster
    log with (``Partitions``), as changes to that copy, whose records' values by key are
    ``live`` (``CommittedCluster.records``): the log's last offset as of its compacted view
    (``RecordStore.load_snapshot``); tombstones of the keys the view lacks, then the view's
    records whose key is new or whose value differs, in offset order. On a loader thread: the
    view is read, decoded and compared here, so the loop applies only what changed (a view of
    100,000 topics and as many ACLs held it for seconds, replayed whole), the topics' images
    built from the previous ones and the topics changed (``TopicRegistry.image``). ``live`` is
    the node's own, read while the loop runs: should a write change it meanwhile, the caller
    drops what this returns (RuntimeError when the mapping changed size while it was read).
    What it read is freed here a slice at a time (``collector.free_gradually``): freed in one
    go, the view's 200,000 keys held the interpreter's lock, and the loop with it, 45-140 ms."""
    decode = codec.decode
    end, chunks = store.load_snapshot(CLUSTER_LOG)
    keys: list[RecordKey] = []  # the view's keys, decoded here: freed here, a slice at a time
    seen: set[RecordKey] = set()
    changed: list[Record] = []
    missing = object()
    for rows in chunks:
        for _offset, key, value, _gid in rows:
            record = decode(key, value)
            keys.append(record.key)
            seen.add(record.key)
            if live.get(record.key, missing) != record.value:
                changed.append(record)
        free_gradually(rows)  # the store's rows, read for this call only
    out = [*(Record(key, None) for key in live if key not in seen), *changed]
    seen.clear()  # references only: the keys are freed with ``keys``
    free_gradually(keys)
    return end, out


@dataclass(slots=True)
class PartitionImage:
    """One partition's compacted view as read from the store, a group at a time, not decoded
    yet: each group's records (``RecordStore.load_groups``: a JSON array of their keys and
    values in offset order) apart, what a group needs to be replayed on its own. Groups are
    independent (every component keeps its state by group id), so building them one by one
    builds the state an offset-order replay does."""

    partition: int
    groups: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    """group id -> (how many records, their JSON array), in the order of their first record"""
    records: int = 0
    last_offset: int = -1
    seconds: float = 0.0


def read_partition(store: RecordStore, partition: int) -> PartitionImage:
    """Read one partition's log, group by group, without decoding anything (the I/O of a
    load: the loader reads the next partition while it builds one). Raises
    ``IllegalStateError`` for a record of another partition's group."""
    image = PartitionImage(partition)
    partitions = store.partitions
    groups = image.groups
    clock = time.perf_counter
    start = clock()
    records, last = 0, -1
    for chunk in store.load_groups(partition):
        for gid, n, last_offset, joined in chunk:
            if gid is None or partition_for(gid, partitions) != partition:
                raise _elsewhere(partition, gid)
            groups[gid] = (n, joined)
            records += n
            if last_offset > last:
                last = last_offset
    image.records, image.last_offset = records, last
    image.seconds = clock() - start
    return image


def replay_group(shard: Shard, records: Sequence[tuple[int, bytes, bytes, str | None]]) -> None:
    """Replay one group's stored rows (``RecordStore.load_rows``) into ``shard``, decoded one
    by one, below its undo log: what was durable is never rolled back. Raises
    ``IllegalStateError`` (from decode/replay) on a corrupt store."""
    decode = codec.decode
    replay = shard.replay
    undo = shard.undo
    enabled, undo.enabled = undo.enabled, False
    try:
        for _offset, key, value, _gid in records:
            replay(decode(key, value))
    finally:
        undo.enabled = enabled


def build_partition(store: RecordStore, image: PartitionImage, shard: Shard) -> ShardLoadStats:
    """Build ``image``'s groups into ``shard`` (fresh, empty), its undo log off: most at once
    from their parsed records (``group_load.py``), the others record by record. A group whose
    records do not parse as one array of its keys and values (a corrupt record) is read again
    record by record from the store, whose replay says which record is corrupt. Raises
    ``IllegalStateError`` (from decode/replay) on a corrupt store. (What the join cannot
    tell: bytes moved from a record's value to its key, or back, across a comma, which parse
    joined as the two values they were cut from; the store's checksums are what find that.)"""
    start = time.perf_counter()
    loads, decode, replay = orjson.loads, codec.decode_parsed, shard.replay
    for group_id, (n, joined) in image.groups.items():
        try:
            records = loads(joined)
        except orjson.JSONDecodeError:
            records = None
        if type(records) is not list or len(records) != 2 * n:
            replay_group(shard, _rows_of(store, image.partition, group_id))
        elif not load_group(shard, group_id, records):
            pairs = iter(records)
            try:
                for key, value in zip(pairs, pairs, strict=True):
                    replay(decode(key, value))
            except IllegalStateError:
                _check_records(store, image.partition, group_id)
                raise
    image.groups = {}  # the records are freed now, not frozen with the loaded state
    return ShardLoadStats(
        image.partition,
        records=image.records,
        groups=len(shard.groups) + len(shard.classic_groups),
        seconds=image.seconds + time.perf_counter() - start,
        last_offset=image.last_offset,
    )


def _rows_of(
    store: RecordStore, partition: int, group_id: str
) -> list[tuple[int, bytes, bytes, str | None]]:
    """One group's rows, read again from the store (a corrupt group only)."""
    return [row for rows in store.load_rows(partition) for row in rows if row[3] == group_id]


def _check_records(store: RecordStore, partition: int, group_id: str) -> None:
    """A group's records failed to decode: decode its stored rows one by one, which raises
    the error that names the record's bytes."""
    for _offset, key, value, _gid in _rows_of(store, partition, group_id):
        codec.decode(key, value)


def load_partition(
    store: RecordStore, partition: int, shard: Shard, *, at_once: bool = True
) -> ShardLoadStats:
    """Replay one partition's log into ``shard`` (fresh, empty), group by group. Raises
    ``IllegalStateError`` (from decode/replay) on a corrupt store, or a record of another
    partition's group. ``at_once=False`` reads the log record by record and replays each
    decoded on its own (:func:`replay_group`, every load's path before ``group_load.py``): the
    reference the tests and the load benchmark compare with (the same state, more slowly)."""
    with _bulk([shard.undo]):  # what is read is garbage soon: no collection for it either
        if at_once:
            return build_partition(store, read_partition(store, partition), shard)
        return _one_by_one(store, partition, shard)


def _one_by_one(store: RecordStore, partition: int, shard: Shard) -> ShardLoadStats:
    start = time.perf_counter()
    stats = ShardLoadStats(partition)
    groups: dict[str, list[tuple[int, bytes, bytes, str | None]]] = {}
    get, partitions = groups.get, store.partitions
    for rows in store.load_rows(partition):
        for gid, run in groupby(rows, _group_of):  # a command writes a group's records together
            bucket = get(gid)
            if bucket is None:
                if gid is None or partition_for(gid, partitions) != partition:
                    raise _elsewhere(partition, gid)
                bucket = groups[gid] = []
            bucket.extend(run)
        stats.records += len(rows)
        stats.last_offset = rows[-1][0]
    for records in groups.values():
        replay_group(shard, records)
    stats.groups = len(shard.groups) + len(shard.classic_groups)
    stats.seconds = time.perf_counter() - start
    return stats


_group_of = itemgetter(3)


def _elsewhere(partition: int, group_id: str | None) -> IllegalStateError:
    return IllegalStateError(
        f"partition {partition} of the store holds a record of "
        f"{'the cluster' if group_id is None else f'group {group_id!r}'}, which belongs "
        "elsewhere"
    )


def load_into(
    store: RecordStore,
    shards: Sequence[Shard],
    registry: TopicRegistry,
    *,
    at_once: bool = True,
    committed: CommittedCluster | None = None,
) -> LoadStats:
    """Replay every log into ``shards`` (one fresh shard per partition) and ``registry`` (and
    the cluster log into ``committed`` when given); then give every shard the registry's
    topics. ``at_once``: see :func:`load_partition`."""
    if len(shards) != store.partitions:
        raise ValueError(f"{len(shards)} shards for a store of {store.partitions} partitions")
    start = time.perf_counter()
    stats = LoadStats(shards=[])
    stats.topic_records, stats.last_offset = load_cluster(store, registry, committed)
    image = registry.image()
    if not at_once:
        for partition, shard in enumerate(shards):
            stats.shards.append(load_partition(store, partition, shard, at_once=False))
            shard.set_topics(image)
    else:
        # The next partition is read (the store's work, the network: mostly without the GIL)
        # while one is built.
        with ThreadPoolExecutor(1, "kip848-read") as reader, _bulk([s.undo for s in shards]):
            ahead = reader.submit(read_partition, store, 0)
            for partition, shard in enumerate(shards):
                read = ahead.result()
                if partition + 1 < len(shards):
                    ahead = reader.submit(read_partition, store, partition + 1)
                stats.shards.append(build_partition(store, read, shard))
                shard.set_topics(image)
    stats.topics = len(registry.topics)
    stats.seconds = time.perf_counter() - start
    return stats
