"""Group configs in the cluster log (``coordinator/core/group_configs.py``): the record path
through the runtime, the group its partition's shard serves taking the cluster log's values,
and the move of the configs an earlier version kept in a group's partition (its records read at
load, adopted by the cluster log and tombstoned in the partition in one batch; the cluster
log's value wins for a group it already names)."""

from __future__ import annotations

import pytest
from builders import beat, join, make_runtime, stored_journal

from assignors.uniform import UniformAssignor
from coordinator.core import codec
from coordinator.core import records as r
from coordinator.core.commands import SequentialIds
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.group_configs import ClusterGroupConfigs, GroupConfigs
from coordinator.core.timeline import UndoLog
from coordinator.core.topics import NewTopic
from coordinator.factory import new_shard
from coordinator.routing import partition_for
from coordinator.runtime import partitions
from coordinator.runtime.store import CLUSTER_LOG, MemoryRecordStore, StoredRecord

SESSION = "consumer.session.timeout.ms"
HB = "consumer.heartbeat.interval.ms"
AI = "consumer.assignment.interval.ms"
P = 3


def _group(name: str, value: str | None = "7000") -> r.Record:
    return r.config_record(r.CONFIG_RESOURCE_GROUP, name, HB, value)


def _decoded(store: MemoryRecordStore, log: int) -> list[r.Record]:
    return [codec.decode(e.key, e.value) for e in store.journal(log)]


def _legacy_store() -> MemoryRecordStore:
    """A store as an earlier version left it: "old" and "both" have configs in their
    partitions; the cluster log names "both" too (its value must win)."""
    store = MemoryRecordStore(partitions=P)
    old = [
        r.group_config_record("old", HB, "6000"),
        r.group_config_record("old", SESSION, "50000"),
        r.group_config_record("both", HB, "4000"),
    ]
    cluster = [_group("both", "8000")]
    store.append([StoredRecord(*codec.encode(rec), rec.group_id) for rec in [*old, *cluster]], 1)
    return store


def test_the_shard_reads_the_cluster_log_first_and_its_partition_otherwise() -> None:
    config = GroupCoordinatorConfig()
    cluster = ClusterGroupConfigs(UndoLog(), config)
    shard = new_shard(config=config, assignors=[UniformAssignor()], ids=SequentialIds())
    configs: GroupConfigs = shard.group_configs
    shard.replay(r.group_config_record("g", HB, "6000"))  # an earlier version's
    configs.follow(cluster)
    assert configs.heartbeat_interval_ms("g") == 6_000
    assert cluster.alter("g", {SESSION: "50000"}).records == [
        r.config_record(r.CONFIG_RESOURCE_GROUP, "g", SESSION, "50000")
    ]
    # The cluster log names the group: its overrides are the group's, the partition's no more.
    assert configs.effective("g") == {SESSION: "50000", HB: "5000", AI: "1000"}
    assert configs.heartbeat_interval_ms("g") == 5_000
    assert configs.session_timeout_ms("g") == 50_000
    # The partition's are moved by tombstones; adopting skips a group the cluster log names.
    assert cluster.adopt({"g": {HB: "6000"}, "h": {HB: "7000"}}).records == [_group("h")]
    assert configs.migrated().records == [r.group_config_record("g", HB, None)]
    assert "g" not in configs and configs.effective("h")[HB] == "7000"


async def test_an_alteration_goes_to_the_cluster_log_and_the_served_group_applies_it() -> None:
    store = MemoryRecordStore(partitions=P)
    rt = make_runtime(store)
    await rt.start()
    await rt.create_topics([NewTopic(name="t", num_partitions=2)])
    first = await rt.heartbeat(join("g"))
    assert first.heartbeat_interval_ms == 5_000
    await rt.alter_group_configs("g", {HB: "7000"})
    assert _decoded(store, CLUSTER_LOG)[-1] == _group("g")
    partition = partition_for("g", P)
    assert r.RecordType.CONFIG not in {rec.key.TYPE for rec in _decoded(store, partition)}
    again = await rt.heartbeat(beat("g", first.member_id, first.member_epoch))
    assert again.heartbeat_interval_ms == 7_000
    assert await rt.describe_group_config("g") == (
        {SESSION: "45000", HB: "7000", AI: "0"},
        {HB: "7000"},
    )
    # validate_only writes nothing and changes nothing
    before = stored_journal(store)
    await rt.alter_group_configs("g", {HB: "9000"}, validate_only=True)
    assert stored_journal(store) == before
    assert (await rt.group_config("g"))[HB] == "7000"
    await rt.close()


async def test_an_earlier_versions_configs_move_to_the_cluster_log_at_start() -> None:
    store = _legacy_store()
    rt = make_runtime(store)
    await rt.start()
    assert _decoded(store, CLUSTER_LOG) == [
        _group("both", "8000"),
        # adopted in group order, each group's names in order; "both" keeps the cluster's
        r.config_record(r.CONFIG_RESOURCE_GROUP, "old", HB, "6000"),
        r.config_record(r.CONFIG_RESOURCE_GROUP, "old", SESSION, "50000"),
    ]
    tombstones = {rec for p in range(P) for rec in _decoded(store, p) if rec.value is None}
    assert tombstones == {
        r.group_config_record("old", HB, None),
        r.group_config_record("old", SESSION, None),
        r.group_config_record("both", HB, None),
    }
    assert await rt.group_config("old") == {SESSION: "50000", HB: "6000", AI: "0"}
    assert (await rt.group_config("both"))[HB] == "8000"
    assert all(len(s.group_configs) == 0 for s in rt.shards)
    snapshot = rt.snapshot()
    written = stored_journal(store)
    await rt.close()

    # A restart finds nothing left to move: the same state, not one record more.
    reopened = store.reopen()
    rt2 = make_runtime(reopened)
    await rt2.start()
    assert rt2.snapshot() == snapshot
    assert stored_journal(reopened) == written
    await rt2.close()


async def test_a_group_served_before_its_configs_move_still_has_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Until the move (it failed every attempt: here, none is made) the partition's configs
    count for a group of which the cluster log names none; a later load moves them."""
    store = _legacy_store()
    monkeypatch.setattr(partitions, "MIGRATION_ATTEMPTS", 0)
    rt = make_runtime(store)
    await rt.start()
    assert all(len(rt.shards[partition_for(g, P)].group_configs) for g in ("old", "both"))
    assert (await rt.group_config("both"))[HB] == "8000"
    assert await rt.describe_group_config("old") == (
        {SESSION: "50000", HB: "6000", AI: "0"},
        {SESSION: "50000", HB: "6000"},
    )
    member = await rt.heartbeat(join("old", topics=()))
    assert member.heartbeat_interval_ms == 6_000
    await rt.close()
    monkeypatch.undo()
    rt2 = make_runtime(store.reopen())
    await rt2.start()
    assert (await rt2.group_config("old"))[HB] == "6000"
    assert all(len(s.group_configs) == 0 for s in rt2.shards)
    await rt2.close()
