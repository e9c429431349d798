"""Writes a golden record log (tests/golden/logs/NAME.jsonl) and its expected state (run by hand
only when a new golden log is wanted; existing logs must never change — they pin the stored
format).

    .venv/bin/python tests/golden/make_record_log.py v1_consumer_groups
    .venv/bin/python tests/golden/make_record_log.py v2_classic_topics_configs
    .venv/bin/python tests/golden/make_record_log.py v3_classic_rebalances
    .venv/bin/python tests/golden/make_record_log.py v4_racks

A log holds the records in the order a store does: the shard's and (from v2) the topic
registry's, interleaved.
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coordinator.core import codec
from coordinator.core import records as r
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.topics import TopicRegistry
from coordinator.factory import Shard
from coordinator.harness import Harness
from legacy_bridge import messages as m

HERE = Path(__file__).resolve().parent / "logs"


def scenario_v1() -> Harness:
    h = Harness()
    foo = h.create_topic("foo", 4)
    h.create_topic("bar.events", 2)
    h.join("A", ["foo"])
    h.join("B", ["foo"], instance_id="static-b")
    h.heartbeat(member_id="A", member_epoch=1, topic_partitions={foo: frozenset({0, 1, 2, 3})})
    a = h.shard.groups["grp"].members["A"]
    h.heartbeat(
        member_id="A", member_epoch=a.member_epoch, topic_partitions=dict(a.assigned_partitions)
    )
    h.heartbeat(member_id="B", member_epoch=2, instance_id="static-b")
    h.join("C", regex="bar\\..*")
    h.commit("grp", "A", h.shard.groups["grp"].members["A"].member_epoch, {("foo", 0): 10})
    h.alter_configs("grp", {"consumer.heartbeat.interval.ms": "6000"})
    h.heartbeat(member_id="B", member_epoch=-2, instance_id="static-b")
    h.join("B2", ["foo"], instance_id="static-b")
    h.heartbeat(member_id="C", member_epoch=-1)
    h.commit("admin-only", "", -1, {("bar.events", 1): 7})
    return h


def scenario_v2() -> Harness:
    """Classic groups (a generation, a static member replaced, an empty generation), an upgrade
    and a downgrade, topics created, grown and deleted, group configs set and deleted with their
    group, offsets; with the topic records."""
    h = Harness(config=GroupCoordinatorConfig(classic_initial_rebalance_delay_ms=0))
    h.create_topic("foo", 4)
    h.create_topic("gone", 1)
    # A classic group: two dynamic members, then a static one who restarts.
    a = h.join_group(group_id="classic", session_timeout_ms=30_000)
    b = h.join_group(group_id="classic", session_timeout_ms=30_000)
    joins = [h.join_group(x.member_id, group_id="classic") for x in (a, b)]
    h.sleep(0)
    first, second = (h.resolve(j) for j in joins)
    gen = first.generation_id
    leader = first.leader
    h.sync_group(
        leader,
        gen,
        {first.member_id: _assignment((0, 1)), second.member_id: _assignment((2, 3))},
        group_id="classic",
    )
    h.sync_group(
        second.member_id if leader == first.member_id else first.member_id, gen, group_id="classic"
    )
    h.join_group(group_id="static", instance_id="s1")
    h.sleep(0)
    static_id = h.shard.classic_groups["static"].static_members["s1"]
    h.sync_group(static_id, 1, {static_id: _assignment((0, 1, 2, 3))}, group_id="static")
    h.join_group(group_id="static", instance_id="s1")  # restarted: same generation, new id
    # A classic group upgraded by a consumer member, and back.
    h.join("K", ["foo"], group_id="static")
    k = h.shard.groups["static"].members["K"]
    h.heartbeat(group_id="static", member_id="K", member_epoch=k.member_epoch)
    h.heartbeat(group_id="static", member_id="K", member_epoch=-1)
    # A consumer group with configs, offsets and a regex.
    h.join("A", ["foo"], group_id="cg")
    h.join("R", regex="f.*", group_id="cg")
    h.alter_configs("cg", {"consumer.session.timeout.ms": "50000"})
    h.commit("cg", "A", h.shard.groups["cg"].members["A"].member_epoch, {("foo", 1): 11})
    h.add_partitions("foo", 6)
    h.heartbeat(
        group_id="cg", member_id="A", member_epoch=h.shard.groups["cg"].members["A"].member_epoch
    )
    # A group deleted with its configs and offsets.
    h.join("D", ["foo"], group_id="doomed")
    h.alter_configs("doomed", {"consumer.heartbeat.interval.ms": "7000"})
    h.commit("doomed", "D", 1, {("foo", 2): 5})
    h.heartbeat(group_id="doomed", member_id="D", member_epoch=-1)
    h.run(lambda s: s.delete_groups(["doomed"]))
    # Configs of a group that does not exist yet; a deleted topic and its offsets.
    h.alter_configs("future", {"consumer.heartbeat.interval.ms": "8000"})
    h.commit("simple", "", -1, {("gone", 0): 3, ("foo", 0): 4})
    h.delete_topic("gone")
    h.leave_group(m.LeaveMember(member_id=first.member_id), group_id="classic")
    return h


def scenario_v3() -> Harness:
    """Classic generations with how each came about (GroupMetadata's trailing ``rebalance``):
    members joining, a leave with the client's reason, a session timeout, a static member
    restarted in a stable group (a record of the same generation) and with a new subscription
    (a rebalance), and the rebalance after a downgrade."""
    from coordinator.harness import subscription

    h = Harness(config=GroupCoordinatorConfig(classic_initial_rebalance_delay_ms=0))
    h.create_topic("foo", 4)
    h.create_topic("bar", 2)
    h.now_ms = 1_000
    a = h.join_group(group_id="cl").member_id
    h.join_group(a, group_id="cl")
    h.sleep(0)
    h.sync_group(a, 1, {a: _assignment((0, 1, 2, 3))}, group_id="cl")
    h.now_ms = 2_000
    b = h.join_group(group_id="cl").member_id
    h.join_group(b, group_id="cl")
    h.now_ms = 3_500
    h.join_group(a, group_id="cl")
    h.now_ms = 4_000
    h.sync_group(a, 2, {a: _assignment((0, 1)), b: _assignment((2, 3))}, group_id="cl")
    h.now_ms = 5_000
    h.leave_group(m.LeaveMember(member_id=b, reason="the consumer is being closed"), group_id="cl")
    h.now_ms = 5_300
    h.join_group(a, group_id="cl")
    h.sync_group(a, 3, {a: _assignment((0, 1, 2, 3))}, group_id="cl")
    h.sleep(10_000)  # a stops heartbeating: its session (10 s) expires; the group is empty
    # A static member: restarted as it was (no rebalance), then with another subscription.
    h.now_ms = 20_000
    h.join_group(group_id="st", instance_id="s1")
    h.sleep(0)
    s1 = h.shard.classic_groups["st"].static_members["s1"]
    h.sync_group(s1, 1, {s1: _assignment((0, 1, 2, 3))}, group_id="st", instance_id="s1")
    h.now_ms = 21_000
    h.join_group(group_id="st", instance_id="s1")
    h.now_ms = 22_000
    both = subscription(["foo", "bar"])
    s3 = h.join_group(group_id="st", instance_id="s1", protocols=(("range", both),)).member_id
    h.sync_group(s3, 2, {s3: _assignment((0, 1, 2, 3))}, group_id="st", instance_id="s1")
    # A consumer group of a consumer and a classic member, downgraded when the consumer leaves.
    h.join("K", ["foo"], group_id="mixed")
    c = h.join_group(group_id="mixed").member_id
    h.join_group(c, group_id="mixed")
    h.now_ms = 30_000
    h.heartbeat(group_id="mixed", member_id="K", member_epoch=-1)
    h.now_ms = 31_000
    gen = h.join_group(c, group_id="mixed").generation_id
    h.sync_group(c, gen, {c: _assignment((0, 1, 2, 3))}, group_id="mixed")
    return h


def _assignment(ps: tuple[int, ...]) -> bytes:
    from legacy_bridge.protocol import AssignmentMessage, encode_assignment

    return encode_assignment(AssignmentMessage(assigned_partitions=(("foo", ps),)))


def scenario_v4() -> Harness:
    """Partition racks (a trailing field of Topic and ConsumerGroupPartitionMetadata records):
    a topic registered with replica racks, members in racks placed by the rack-aware uniform
    assignor, a member's rack changed (KAFKA-20909: a new epoch), the topic's racks changed (a
    reassignment: new subscription metadata and a new target), a topic without racks beside."""
    h = Harness()
    orders = h.create_topic("orders", 6, racks={p: ["az-1" if p < 3 else "az-2"] for p in range(6)})
    h.create_topic("plain", 2)
    h.join("A", ["orders", "plain"], rack_id="az-2")
    h.join("B", ["orders", "plain"], rack_id="az-1")
    group = h.shard.groups["grp"]
    for _round in range(4):  # everyone acknowledges until stable
        for mid in sorted(group.members):
            m = group.members[mid]
            h.heartbeat(
                member_id=mid, member_epoch=m.member_epoch, topic_partitions=m.assigned_partitions
            )
    a = group.members["A"]
    h.heartbeat(member_id="A", member_epoch=a.member_epoch, rack_id="az-1")
    h.set_racks("orders", {p: ["az-1", "az-2"] if p % 2 else ["az-2"] for p in range(6)})
    for _round in range(4):
        for mid in sorted(group.members):
            m = group.members[mid]
            h.heartbeat(
                member_id=mid, member_epoch=m.member_epoch, topic_partitions=m.assigned_partitions
            )
    h.commit("grp", "B", group.members["B"].member_epoch, {("orders", 0): 3})
    assert orders
    return h


SCENARIOS: dict[str, Callable[[], Harness]] = {
    "v1_consumer_groups": scenario_v1,
    "v2_classic_topics_configs": scenario_v2,
    "v3_classic_rebalances": scenario_v3,
    "v4_racks": scenario_v4,
}


def summary(shard: Shard, registry: TopicRegistry | None = None) -> dict[str, Any]:
    """A JSON view of what replay determines (topics and classic groups only when there are
    any, so the first log's expected state stays as it was written)."""
    out: dict[str, Any] = {"groups": {}, "offsets": {}, "configs": {}}
    for gid, g in sorted(shard.groups.items()):
        out["groups"][gid] = {
            "uid": g.group_uid,
            "epoch": g.group_epoch,
            "assignment_epoch": g.assignment_epoch,
            "state": g.state().value,
            "members": {
                mid: [
                    m.member_epoch,
                    m.state.name,
                    m.instance_id,
                    list(m.subscribed_topic_names),
                    m.subscribed_topic_regex,
                    {t: sorted(ps) for t, ps in sorted(m.assigned_partitions.items())},
                ]
                for mid, m in sorted(g.members.items())
            },
            "target": {
                mid: {t: sorted(ps) for t, ps in sorted(a.items())}
                for mid, a in sorted(g.target.items())
            },
            "regexes": {k: sorted(v[0]) for k, v in sorted(g.resolved_regexes.items())},
        }
    for gid, offsets in sorted(shard.offsets.items()):
        out["offsets"][gid] = {f"{t}-{p}": v.offset for (t, p), v in sorted(offsets.items())}
    configs = {gid: dict(c) for gid, c in shard.group_configs.items()}  # an earlier version's
    cluster = shard.group_configs.cluster  # the cluster log's (they win)
    if cluster is not None:
        configs.update({gid: dict(cluster[gid]) for gid in cluster})
    out["configs"] = {gid: dict(sorted(c.items())) for gid, c in sorted(configs.items())}
    classic = {gid: _classic(g.durable) for gid, g in sorted(shard.classic_groups.items())}
    if classic:
        out["classic_groups"] = classic
    if registry is not None and registry.topics:
        out["topics"] = {t.name: [t.topic_id, t.num_partitions] for t in registry.list_topics()}
    # Racks (from v4) only when there are any, so earlier logs' expected states stay as written.
    racks = {
        gid: {mid: m.rack_id for mid, m in sorted(g.members.items()) if m.rack_id is not None}
        for gid, g in sorted(shard.groups.items())
    }
    if any(racks.values()):
        out["member_racks"] = {gid: r for gid, r in racks.items() if r}
    partition_racks = {
        gid: {
            name: {str(p): sorted(rs) for p, rs in sorted(t.partition_racks.items())}
            for name, t in sorted(g.subscription_metadata.items())
            if t.partition_racks
        }
        for gid, g in sorted(shard.groups.items())
    }
    if any(partition_racks.values()):
        out["subscription_partition_racks"] = {g: r for g, r in partition_racks.items() if r}
    if registry is not None and any(t.partition_racks for t in registry.list_topics()):
        out["topic_racks"] = {
            t.name: {str(p): sorted(rs) for p, rs in sorted(t.partition_racks.items())}
            for t in registry.list_topics()
            if t.partition_racks
        }
    return out


def _classic(value: r.GroupMetadataValue | None) -> Any:
    if value is None:
        return None
    rebalance = {}
    if value.rebalance is not None:  # from v3 (older logs' expected states stay as written)
        rb = value.rebalance
        rebalance["rebalance"] = [
            rb.preparing_ms,
            rb.completing_ms,
            rb.cause,
            rb.client_reason,
            [[x.member_id, x.cause, x.removed_ms] for x in rb.removed],
        ]
    return {
        **rebalance,
        "generation": value.generation,
        "protocol": value.protocol,
        "leader": value.leader,
        "members": {
            x.member_id: [
                x.group_instance_id,
                x.session_timeout_ms,
                x.rebalance_timeout_ms,
                base64.b64encode(x.assignment).decode(),
            ]
            for x in value.members
        },
    }


def main(name: str) -> None:
    h = SCENARIOS[name]()
    registry = h.registry if name != "v1_consumer_groups" else None
    records = h.store_log if registry is not None else h.log
    HERE.mkdir(exist_ok=True)
    with open(HERE / f"{name}.jsonl", "w") as f:
        for record in records:
            key, value = codec.encode(record)
            f.write(
                json.dumps(
                    {"key": key.decode(), "value": None if value is None else value.decode()}
                )
                + "\n"
            )
    (HERE / f"{name}.expected.json").write_text(
        json.dumps(summary(h.shard, registry), indent=1, sort_keys=True) + "\n"
    )


if __name__ == "__main__":
    main(sys.argv[1])
