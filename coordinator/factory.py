"""The one place a shard is built: the core's components with the legacy bridge's classic groups
plugged in. The runtime, ``kip848 replay``/``dump``, the simulator, the explorer, the benchmarks
and the tests all build their shards here, so every one of them can load any store. Likewise
the cluster-level state machine (:func:`new_cluster`): the topic registry with the security
metadata (ACLs, SCRAM credentials) plugged in.
"""

from __future__ import annotations

from collections.abc import Sequence

from assignors.api import PartitionAssignor
from coordinator.core.commands import IdSource
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.model import TopicsImage
from coordinator.core.shard import GroupCoordinatorShard
from coordinator.core.topics import TopicRegistry
from coordinator.security.metadata import SecurityMetadata
from legacy_bridge.classic_groups import ClassicGroups

Shard = GroupCoordinatorShard[ClassicGroups]
"""A shard as built by :func:`new_shard` (its classic groups are the legacy bridge's)."""


def new_shard(
    *,
    config: GroupCoordinatorConfig,
    assignors: Sequence[PartitionAssignor],
    ids: IdSource,
    topics: TopicsImage | None = None,
) -> Shard:
    return GroupCoordinatorShard(
        config=config, assignors=assignors, ids=ids, classic_groups=ClassicGroups, topics=topics
    )


def new_cluster(
    ids: IdSource, *, default_num_partitions: int = 1
) -> tuple[TopicRegistry, SecurityMetadata]:
    """The cluster-level state machine (the registry: load, write and roll it back) and its
    security metadata component."""
    registry = TopicRegistry(ids, default_num_partitions=default_num_partitions)
    security = SecurityMetadata(registry.undo)
    registry.plug(security)
    return registry, security
