"""The rack-local share of consumer groups (coordinator/observability/racks.py) and its gauge:
counted from the members' assigned partitions, only for groups where racks matter, computed
again only for members that changed."""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily

from coordinator.core.group import GroupState
from coordinator.harness import Harness
from coordinator.observability import racks as racks_module
from coordinator.observability.metrics import StateCollector, StateCounts
from coordinator.observability.racks import RackLocality


def settle(h: Harness, group_id: str = "grp") -> None:
    """Every member heartbeats with what it owns until the group is stable (bounded)."""
    group = h.shard.groups[group_id]
    for _ in range(10):
        if group.state() is GroupState.STABLE:
            return
        for member_id in sorted(group.members):
            m = group.members[member_id]
            h.heartbeat(
                group_id=group_id,
                member_id=member_id,
                member_epoch=m.member_epoch,
                topic_partitions=m.assigned_partitions,
            )
    raise AssertionError(f"{group_id} did not settle")


def test_the_share_of_partitions_read_in_the_members_rack() -> None:
    h = Harness()
    h.create_topic("orders", 4, racks={0: ["a"], 1: ["a"], 2: ["b"], 3: ["b"]})
    h.create_topic("plain", 2)
    h.join("A", ["orders"], rack_id="a")
    h.join("B", ["orders"], rack_id="b")
    h.join("C", ["plain"], rack_id="a")  # a topic without racks: nothing can be local
    h.join("other", ["plain"], group_id="norack", rack_id="a")
    settle(h)
    group = h.shard.groups["grp"]
    assigned = sum(sum(map(len, m.assigned_partitions.values())) for m in group.members.values())
    locality = RackLocality()
    read = locality.read([h.shard])
    # The racks-aware assignor put A on 0-1 and B on 2-3: 4 local of 6 assigned (C's 2 are not).
    assert read == {"grp": (4, assigned)} and assigned == 6
    # "norack" subscribes to no topic with racks: not reported.

    # A second read with nothing changed reuses every member's count.
    calls = []
    original = racks_module.count_rack_local

    def counting(*args: object) -> int:
        calls.append(args)
        return original(*args)  # type: ignore[arg-type]

    racks_module.count_rack_local = counting  # type: ignore[assignment]
    try:
        assert locality.read([h.shard]) == read
        assert calls == []
        h.heartbeat(member_id="A", member_epoch=group.members["A"].member_epoch, rack_id="b")
        assert locality.read([h.shard]) == {"grp": (2, 6)}  # A now reads 0-1 from rack b
        assert [c[0] for c in calls] == ["b"]  # only A, whose rack changed, is counted again
    finally:
        racks_module.count_rack_local = original  # type: ignore[assignment]


def test_the_gauge() -> None:
    counts = StateCounts(rack_local={"g1": (3, 4), "g2": (0, 0)})
    families = {f.name: f for f in StateCollector(lambda: counts).collect()}
    ratio = families["kip848_consumer_group_rack_local_ratio"]
    assert isinstance(ratio, GaugeMetricFamily)
    assert [(s.labels, s.value) for s in ratio.samples] == [
        ({"group": "g1"}, 0.75),
        ({"group": "g2"}, 1.0),
    ]
