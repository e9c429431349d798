"""Online migrations (KIP-848 "Online Migration"): every upgrade of a classic group to a
consumer group and every downgrade back, with the mixed phase around it and what it cost
(docs/analytics.md, ``migrations``).

* An **upgrade** is the consumer group's epoch bump caused by ``migrated_from_classic``: the
  classic group's members converted, at epoch = generation. Its mixed phase starts there and
  lasts until the last classic member is gone (replaced by consumers as they restart:
  ``completed``), or the group is downgraded or deleted, or the data ends (``in_progress``).
* A **downgrade** is the classic group record written with the consumer group's tombstone when
  its last consumer-protocol member left (or was replaced by a classic static member: then
  without a rebalance unless one was needed). Its mixed phase is the one it ends: since the consumer
  group last got a classic member (an upgrade, or a classic member joining it).
* **Cost**: the unowned partition-seconds (and partitions moved, rebalances) of the group's
  rebalances from the start of the mixed phase to its end, and for a downgrade also of the
  classic rebalance it starts.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from .common import CLASSIC, DOWNGRADED, ts

UPGRADE = "upgrade"
DOWNGRADE = "downgrade"
MIGRATED = "migrated_from_classic"


def _phases(members: DataFrame, downgrades: DataFrame) -> DataFrame:
    """Mixed phases of consumer groups, from the member events' count of classic members."""
    w = Window.partitionBy("group_id").orderBy("offset")
    e = members.select("group_id", "offset", "ts_ms", (F.col("live_classic") > 0).alias("mixed"))
    e = e.withColumn("was", F.coalesce(F.lag("mixed").over(w), F.lit(False)))
    e = e.filter(F.col("mixed") != F.col("was")).withColumn(
        "phase", F.sum(F.col("mixed").cast("int")).over(w.rowsBetween(Window.unboundedPreceding, 0))
    )
    phases = e.groupBy("group_id", "phase").agg(
        F.min(F.when(F.col("mixed"), F.col("ts_ms"))).alias("start_ms"),
        F.min(F.when(~F.col("mixed"), F.col("ts_ms"))).alias("end_ms"),
    )
    d = downgrades.select("group_id", F.col("ts_ms").alias("end_ms"), F.lit(True).alias("down"))
    return phases.join(d, on=["group_id", "end_ms"], how="left").select(
        "group_id",
        "start_ms",
        "end_ms",
        F.when(F.col("down"), F.lit("downgraded"))
        .when(F.col("end_ms").isNotNull(), F.lit("completed"))
        .otherwise(F.lit("in_progress"))
        .alias("mixed_outcome"),
    )


def migrations(
    consumer_rebalances: DataFrame,
    members: DataFrame,
    classic_records: DataFrame,
    rebalances: DataFrame,
) -> DataFrame:
    """The ``migrations`` table. ``members``: the consumer groups' member events (with
    ``live_classic``); ``classic_records``: the classic records (with ``downgrade``);
    ``rebalances``: the whole ``rebalances`` table (consumer and classic rows)."""
    up = consumer_rebalances.filter(F.array_contains("causes", MIGRATED)).select(
        "group_id",
        F.lit(UPGRADE).alias("direction"),
        "offset",
        F.unix_millis("timestamp").alias("ts_ms"),
        F.col("group_epoch").alias("generation"),
        F.col("members_after").alias("members_converted"),
    )
    down = classic_records.filter(F.col("downgrade")).select(
        "group_id",
        F.lit(DOWNGRADE).alias("direction"),
        "offset",
        "ts_ms",
        "generation",
        F.size("members").alias("members_converted"),
    )
    phases = _phases(members, down)
    m = up.unionByName(down)
    by_start = (F.col("direction") == UPGRADE) & (F.col("p.start_ms") == F.col("m.ts_ms"))
    by_end = (F.col("direction") == DOWNGRADE) & (F.col("p.end_ms") == F.col("m.ts_ms"))
    m = m.alias("m").join(
        phases.alias("p"),
        (F.col("m.group_id") == F.col("p.group_id")) & (by_start | by_end),
        how="left",
    )
    m = m.select("m.*", "p.start_ms", "p.end_ms", "p.mixed_outcome")
    # The rebalances it cost: those of the mixed phase (its end included), and for a downgrade
    # the classic rebalance the downgrade starts.
    r = rebalances.select(
        "group_id",
        F.unix_millis("timestamp").alias("r_ms"),
        "group_type",
        "causes",
        "partitions_moved",
        "unowned_partition_ms",
    )
    in_phase = (
        (F.col("r_ms") >= F.col("start_ms"))
        & (F.col("end_ms").isNull() | (F.col("r_ms") <= F.col("end_ms")))
        & (F.col("group_type") != CLASSIC)
    )
    after_down = (
        (F.col("direction") == DOWNGRADE)
        & (F.col("group_type") == CLASSIC)
        & F.array_contains("causes", DOWNGRADED)
        & (F.col("r_ms") == F.col("ts_ms"))
    )
    key = ["group_id", "direction", "offset"]
    cost = (
        m.join(r, on="group_id")
        .filter(in_phase | after_down)
        .groupBy(*key)
        .agg(
            F.count(F.lit(1)).alias("rebalances"),
            F.sum("partitions_moved").alias("partitions_moved"),
            F.sum("unowned_partition_ms").alias("unowned_partition_ms"),
        )
    )
    zero = F.lit(0).cast("long")
    return m.join(cost, on=key, how="left").select(
        "group_id",
        "direction",
        "offset",
        ts(F.col("ts_ms")).alias("timestamp"),
        "generation",
        "members_converted",
        ts(F.col("start_ms")).alias("mixed_started_at"),
        ts(F.col("end_ms")).alias("mixed_ended_at"),
        (F.col("end_ms") - F.col("start_ms")).alias("mixed_ms"),
        F.coalesce(F.col("mixed_outcome"), F.lit("unknown")).alias("mixed_outcome"),
        F.coalesce(F.col("rebalances"), zero).alias("rebalances"),
        F.coalesce(F.col("partitions_moved"), zero).cast("long").alias("partitions_moved"),
        (F.coalesce(F.col("unowned_partition_ms"), zero) / 1000.0).alias(
            "unowned_partition_seconds"
        ),
        F.coalesce(F.col("unowned_partition_ms"), zero).cast("long").alias("unowned_partition_ms"),
    )
