"""The one place a shard is built: the core's components with the legacy bridge's classic groups
plugged in. The runtime, ``kip848 replay``/``dump``, the simulator, the explorer, the benchmarks
and the tests all build their shards here, so every one of them can load any store. Likewise
the cluster-level state machine (:func:`new_cluster`): the topic registry with the security
metadata (ACLs, SCRAM credentials), the groups' dynamic configs and the transactional ids'
groups plugged in.
"""

from __future__ import annotations

from collections.abc import Sequence

from assignors.api import PartitionAssignor
from coordinator.core.commands import IdSource
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.group_configs import ClusterGroupConfigs
from coordinator.core.model import TopicsImage
from coordinator.core.shard import GroupCoordinatorShard
from coordinator.core.topics import TopicRegistry
from coordinator.core.transactional_ids import ClusterTransactionalIds
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
    ids: IdSource,
    *,
    default_num_partitions: int = 1,
    config: GroupCoordinatorConfig | None = None,
) -> tuple[TopicRegistry, SecurityMetadata]:
    """The cluster-level state machine (the registry: load, write and roll it back) and its
    security metadata component; its group configs component is :func:`group_configs_of`."""
    registry = TopicRegistry(ids, default_num_partitions=default_num_partitions)
    security = SecurityMetadata(registry.undo)
    registry.plug(security)
    config = config or GroupCoordinatorConfig()
    plug_group_configs(registry, config)
    ids_groups = ClusterTransactionalIds(registry.undo, config)
    registry.plug(ids_groups)
    registry.components[ClusterTransactionalIds] = ids_groups
    return registry, security


def plug_group_configs(registry: TopicRegistry, config: GroupCoordinatorConfig) -> None:
    """Plug the groups' dynamic configs (``ClusterGroupConfigs``) into ``registry``."""
    configs = ClusterGroupConfigs(registry.undo, config)
    registry.plug(configs)
    registry.components[ClusterGroupConfigs] = configs


def group_configs_of(registry: TopicRegistry) -> ClusterGroupConfigs:
    """The groups' dynamic configs plugged into ``registry`` (:func:`plug_group_configs`)."""
    found = registry.components[ClusterGroupConfigs]
    assert isinstance(found, ClusterGroupConfigs)
    return found


def transactional_ids_of(registry: TopicRegistry) -> ClusterTransactionalIds:
    """The transactional ids' groups plugged into ``registry`` (:func:`new_cluster`)."""
    found = registry.components[ClusterTransactionalIds]
    assert isinstance(found, ClusterTransactionalIds)
    return found
