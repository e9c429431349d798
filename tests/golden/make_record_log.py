"""Regenerates tests/golden/logs/v1_*.jsonl and its expected state (run by hand only when a new
golden log is wanted; existing logs must never change — they pin the stored format).

    .venv/bin/python tests/golden/make_record_log.py NAME
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from coordinator.core import codec
from coordinator.harness import Harness

HERE = Path(__file__).resolve().parent / "logs"


def scenario() -> Harness:
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


def summary(shard) -> dict:
    """A JSON view of what replay determines."""
    out: dict = {"groups": {}, "offsets": {}, "configs": {}}
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
    out["configs"] = {
        gid: dict(sorted(c.items())) for gid, c in sorted(shard.group_configs.items())
    }
    return out


def main(name: str) -> None:
    h = scenario()
    HERE.mkdir(exist_ok=True)
    with open(HERE / f"{name}.jsonl", "w") as f:
        for record in h.log:
            key, value = codec.encode(record)
            f.write(
                json.dumps(
                    {"key": key.decode(), "value": None if value is None else value.decode()}
                )
                + "\n"
            )
    (HERE / f"{name}.expected.json").write_text(
        json.dumps(summary(h.shard), indent=1, sort_keys=True) + "\n"
    )


if __name__ == "__main__":
    main(sys.argv[1])
