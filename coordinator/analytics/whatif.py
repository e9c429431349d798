"""Assignor what-if: each consumer group's history replayed through another assignor.

For every computation of a target assignment in the journal (a ConsumerGroupTargetAssignment-
Metadata record), the group's members, their subscriptions (names, and regexes as resolved in
the journal) and the subscribed topics' metadata at that moment are handed to the chosen
assignor, with the targets *it* gave before as the current assignment (so a sticky assignor
stays sticky). What happened and what would have happened are compared per computation:
partitions moved between live members, partitions newly assigned, and balance (the spread
between the most and least loaded member, and the standard deviation of partitions per member).

This is the one job with Python in it: the assignors are Python. It runs on the executors,
one group at a time (``groupBy(group_id).applyInArrow``); the assignor is loaded there by name
through the registry (:func:`assignors.registry.load_assignor`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

COLUMNS = (
    "group_id",
    "offset",
    "ts_ms",
    "record_type_id",
    "tombstone",
    "member_id",
    "instance_id",
    "rack_id",
    "subscribed_topic_names",
    "subscribed_topic_regex",
    "target_partitions",
    "assignment_epoch",
    "subscription_metadata",
    "regular_expression",
    "regex_topics",
)

RESULT = pa.schema(
    [
        pa.field("group_id", pa.string()),
        pa.field("assignment_epoch", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("ts_ms", pa.int64()),
        pa.field("members", pa.int32()),
        pa.field("partitions", pa.int32()),
        pa.field("assignor", pa.string()),
        pa.field("actual_moved", pa.int32()),
        pa.field("actual_newly_assigned", pa.int32()),
        pa.field("whatif_moved", pa.int32()),
        pa.field("whatif_newly_assigned", pa.int32()),
        pa.field("actual_spread", pa.int32()),
        pa.field("whatif_spread", pa.int32()),
        pa.field("actual_stddev", pa.float64()),
        pa.field("whatif_stddev", pa.float64()),
        pa.field("error", pa.string()),
    ]
)

TopicPart = tuple[str, int]


def _moves(
    before: Mapping[str, set[TopicPart]], after: Mapping[str, set[TopicPart]]
) -> tuple[int, int]:
    """(moved, newly assigned): a partition *moved* when a member had it in ``before`` and
    another member has it in ``after``; it is *newly assigned* when nobody had it before."""
    owner_before = {tp: m for m, tps in before.items() for tp in tps}
    moved = newly = 0
    for m, tps in after.items():
        for tp in tps:
            prev = owner_before.get(tp)
            if prev is None:
                newly += 1
            elif prev != m:
                moved += 1
    return moved, newly


def _balance(targets: Mapping[str, set[TopicPart]], members: list[str]) -> tuple[int, float]:
    if not members:
        return 0, 0.0
    counts = [len(targets.get(m, ())) for m in members]
    mean = sum(counts) / len(counts)
    std = math.sqrt(sum((c - mean) ** 2 for c in counts) / len(counts))
    return max(counts) - min(counts), std


class GroupReplay:
    """Replays one group's records (offset order) and yields a result row per computation."""

    def __init__(self, group_id: str, assignor: Any) -> None:
        self.group_id = group_id
        self.assignor = assignor
        self.members: dict[str, dict[str, Any]] = {}
        self.metadata: dict[str, tuple[str, int]] = {}  # topic name -> (topic id, partitions)
        self.regexes: dict[str, tuple[str, ...]] = {}
        self.actual: dict[str, set[TopicPart]] = {}
        self.actual_before: dict[str, set[TopicPart]] | None = None
        self.whatif: dict[str, dict[str, frozenset[int]]] = {}  # member -> topic id -> parts
        self.removed: tuple[str, str, int] | None = None  # (instance id, member id, time)
        self._removed_whatif: dict[str, frozenset[int]] | None = None
        self.out: list[dict[str, Any]] = []

    def record(self, row: Mapping[str, Any]) -> None:
        t = row["record_type_id"]
        tomb = row["tombstone"]
        if t == 5:
            mid = row["member_id"]
            if tomb:
                gone = self.members.pop(mid, None)
                if gone is not None and gone["instance_id"] is not None:
                    self.removed = (gone["instance_id"], mid, row["ts_ms"])
                    self._removed_whatif = self.whatif.get(mid)
                self.whatif.pop(mid, None)
            else:
                inst = row["instance_id"]
                if (
                    mid not in self.members
                    and self.removed is not None
                    and inst is not None
                    and self.removed[0] == inst
                    and self.removed[2] == row["ts_ms"]
                ):
                    # A static member's new incarnation takes the old one's place: it keeps
                    # its target (in both histories) and nothing moves.
                    old = self.removed[1]
                    if self.actual_before is not None and old in self.actual_before:
                        self.actual_before[mid] = self.actual_before.pop(old)
                    if self._removed_whatif is not None:
                        self.whatif[mid] = self._removed_whatif
                self.removed = None
                self.members[mid] = {
                    "instance_id": row["instance_id"],
                    "rack_id": row["rack_id"],
                    "names": tuple(row["subscribed_topic_names"] or ()),
                    "regex": row["subscribed_topic_regex"],
                }
        elif t == 4:
            self.metadata = (
                {}
                if tomb
                else {
                    m["topic"]: (m["topic_id"], m["num_partitions"])
                    for m in row["subscription_metadata"] or ()
                }
            )
        elif t == 16:
            regex = row["regular_expression"]
            if tomb:
                self.regexes.pop(regex, None)
            else:
                self.regexes[regex] = tuple(row["regex_topics"] or ())
        elif t == 7:
            if self.actual_before is None:
                self.actual_before = {m: set(tps) for m, tps in self.actual.items()}
            mid = row["member_id"]
            if tomb:
                self.actual.pop(mid, None)
            else:
                self.actual[mid] = {
                    (p["topic"], p["partition"]) for p in row["target_partitions"] or ()
                }
        elif t == 3:
            if tomb:
                self.__init__(self.group_id, self.assignor)  # type: ignore[misc]
            self.actual_before = None
        elif t == 6 and not tomb:
            self._computation(row)

    def _subscribed_ids(self, member: Mapping[str, Any]) -> frozenset[str]:
        names = set(member["names"])
        if member["regex"]:
            names.update(self.regexes.get(member["regex"], ()))
        return frozenset(self.metadata[n][0] for n in names if n in self.metadata)

    def _computation(self, row: Mapping[str, Any]) -> None:
        from assignors.api import (
            GroupSpec,
            MemberSubscription,
            PartitionAssignorError,
            SubscriptionType,
            TopicMetadata,
        )

        live = sorted(self.members)
        before = self.actual_before if self.actual_before is not None else self.actual
        actual_before = {m: tps for m, tps in before.items() if m in self.members}
        actual_now = {m: self.actual.get(m, set()) for m in live}
        a_moved, a_new = _moves(actual_before, actual_now)
        a_spread, a_std = _balance(actual_now, live)
        names = {tid: name for name, (tid, _n) in self.metadata.items()}
        topics = {
            tid: TopicMetadata(topic_id=tid, name=name, num_partitions=n)
            for name, (tid, n) in self.metadata.items()
        }
        subs = {m: self._subscribed_ids(self.members[m]) for m in live}
        kinds = set(subs.values())
        owners: dict[str, dict[int, str]] = {}
        for m in live:
            for tid, ps in self.whatif.get(m, {}).items():
                for p in ps:
                    owners.setdefault(tid, {})[p] = m
        spec = GroupSpec(
            members={
                m: MemberSubscription(
                    rack_id=self.members[m]["rack_id"],
                    instance_id=self.members[m]["instance_id"],
                    subscribed_topic_ids=subs[m],
                    assignment={
                        tid: ps for tid, ps in self.whatif.get(m, {}).items() if tid in topics
                    },
                )
                for m in live
            },
            subscription_type=SubscriptionType.HOMOGENEOUS
            if len(kinds) <= 1
            else SubscriptionType.HETEROGENEOUS,
            partition_owners=owners,
        )
        error = None
        w_before = {
            m: {(names.get(t, t), p) for t, ps in self.whatif.get(m, {}).items() for p in ps}
            for m in live
        }
        try:
            result = self.assignor.assign(spec, topics)
            self.whatif = {
                m: {t: frozenset(ps) for t, ps in result.members.get(m, {}).items() if ps}
                for m in live
            }
        except PartitionAssignorError as exc:
            error = str(exc)
        w_now = {
            m: {(names.get(t, t), p) for t, ps in self.whatif.get(m, {}).items() for p in ps}
            for m in live
        }
        w_moved, w_new = _moves(w_before, w_now)
        w_spread, w_std = _balance(w_now, live)
        self.out.append(
            {
                "group_id": self.group_id,
                "assignment_epoch": row["assignment_epoch"],
                "offset": row["offset"],
                "ts_ms": row["ts_ms"],
                "members": len(live),
                "partitions": sum(n for _tid, n in self.metadata.values()),
                "assignor": self.assignor.name,
                "actual_moved": a_moved,
                "actual_newly_assigned": a_new,
                "whatif_moved": w_moved,
                "whatif_newly_assigned": w_new,
                "actual_spread": a_spread,
                "whatif_spread": w_spread,
                "actual_stddev": a_std,
                "whatif_stddev": w_std,
                "error": error,
            }
        )
        self.actual_before = None


def replay_group(table: pa.Table, assignor_name: str) -> pa.Table:
    """One group's records (any order) -> one row per target assignment computation."""
    from assignors.registry import load_assignor

    assignor = load_assignor(assignor_name)
    rows = sorted(table.to_pylist(), key=lambda r: r["offset"])
    if not rows:
        return RESULT.empty_table()
    replay = GroupReplay(rows[0]["group_id"], assignor)
    for row in rows:
        replay.record(row)
    return pa.Table.from_pylist(replay.out, schema=RESULT)


def whatif(records: Any, assignor_name: str) -> Any:
    """The what-if table for every consumer group (a lazy DataFrame) from the journal's group
    records (:func:`.metrics.group_records`: with ``ts_ms``)."""
    from pyspark.sql import functions as F

    df = records.filter(F.col("record_type_id").isin(3, 4, 5, 6, 7, 16)).select(*COLUMNS)

    def run(table: pa.Table) -> pa.Table:
        return replay_group(table, assignor_name)

    return df.groupBy("group_id").applyInArrow(run, schema=_spark_schema())


def _spark_schema() -> str:
    return (
        "group_id string, assignment_epoch int, offset long, ts_ms long, members int, "
        "partitions int, assignor string, actual_moved int, actual_newly_assigned int, "
        "whatif_moved int, whatif_newly_assigned int, actual_spread int, whatif_spread int, "
        "actual_stddev double, whatif_stddev double, error string"
    )
