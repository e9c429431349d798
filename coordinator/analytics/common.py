"""What the analytics jobs share: the vocabulary (causes, removal reasons), the parameters of
a run, and small column helpers (docs/analytics.md defines every table and column)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

TP = T.StructType(
    [T.StructField("topic", T.StringType()), T.StructField("partition", T.IntegerType())]
)
TPS = T.ArrayType(TP)

# Removal reasons (docs/analytics.md, "Why a member was removed").
LEFT = "member_left"
FENCED_SESSION = "member_fenced_session_timeout"
FENCED_REBALANCE = "member_fenced_rebalance_timeout"
LEFT_OR_SESSION = "member_left_or_session_timeout"
CONVERTED = "converted_to_classic"
REPLACED = "static_member_replaced"

# Causes of an epoch bump, in the order the primary cause is chosen.
CAUSES = (
    "migrated_from_classic",
    "member_joined",
    FENCED_SESSION,
    FENCED_REBALANCE,
    LEFT,
    LEFT_OR_SESSION,
    "subscription_changed",
    "assignor_changed",
    "regex_resolution_changed",
    "topic_metadata_changed",
)
UNKNOWN_CAUSE = "unknown"

# Causes of a classic rebalance besides the above (legacy_bridge.classic_group.RebalanceCause):
# the one that started it comes first, then the others in this order.
REJOINED = "member_rejoined"
STATIC_RESTART = "static_member_restart"
DOWNGRADED = "downgraded_from_consumer_group"
NOT_STORED = "assignment_not_stored"
"""Only ever the recorded cause (the reset after a SyncGroup write that timed out)."""
CLASSIC_CAUSES = (
    DOWNGRADED,
    "member_joined",
    REJOINED,
    "subscription_changed",
    "topic_metadata_changed",
    STATIC_RESTART,
    FENCED_SESSION,
    FENCED_REBALANCE,
    LEFT,
    LEFT_OR_SESSION,
)
ALL_CAUSES = (*CAUSES, REJOINED, STATIC_RESTART, DOWNGRADED, NOT_STORED)
"""Every cause a rebalance row may name (plus ``unknown``)."""

# Group types (``group_type``) and protocols (``protocol``) of rebalances and groups.
CONSUMER = "consumer"
CLASSIC = "classic"
MIXED = "mixed"
"""A consumer group with classic members (during an online migration, KIP-848)."""
GROUP_TYPES = (CONSUMER, MIXED, CLASSIC)
EAGER = "eager"
COOPERATIVE = "cooperative"
PROTOCOLS = (CONSUMER, COOPERATIVE, EAGER)

SESSION_TIMEOUT_CONFIG = "consumer.session.timeout.ms"

BUCKETS_S = (1, 5, 10, 30, 60, 300, 600, 1800, 3600, 6 * 3600, 86400, 7 * 86400)


def bucket_seconds(span_ms: int, target: int = 120) -> int:
    """A round bucket size giving at most about ``target`` buckets over the span."""
    for b in BUCKETS_S:
        if span_ms / (b * 1000) <= target:
            return b
    return BUCKETS_S[-1]


@dataclass(frozen=True, slots=True)
class Params:
    session_timeout_ms: int
    complete: bool
    bucket_s: int
    t0_us: int
    """Start of the first time bucket (the first record's time, floored to the bucket)."""


MOVED = T.ArrayType(
    T.StructType(
        [
            T.StructField("topic", T.StringType()),
            T.StructField("partition", T.IntegerType()),
            T.StructField("from_member", T.StringType()),
            T.StructField("to_member", T.StringType()),
        ]
    )
)
REMOVED = T.ArrayType(
    T.StructType(
        [T.StructField("member_id", T.StringType()), T.StructField("reason", T.StringType())]
    )
)
STRINGS = T.ArrayType(T.StringType())

REBALANCE_COLUMNS = (
    "group_id",
    "group_type",
    "protocol",
    "group_epoch",
    "previous_epoch",
    "offset",
    "timestamp",
    "cause",
    "causes",
    "members_joined",
    "members_removed",
    "members_subscription_changed",
    "members_before",
    "members_after",
    "members_stopped",
    "partitions_moved",
    "partitions_newly_assigned",
    "partitions_unassigned",
    "moved",
    "unowned_partition_seconds",
    "unowned_partition_ms",
    "partitions_unowned",
    "outcome",
    "stable_at",
    "time_to_converge_ms",
    "stable_epoch",
    "join_ms",
    "sync_ms",
)
"""The ``rebalances`` table: consumer group epoch bumps and classic generations alike."""


def ts(ms_col: Column) -> Column:
    """Epoch milliseconds -> a timestamp."""
    return F.timestamp_micros(ms_col * 1000)


def first(array: str | Column) -> Column:
    """An array's first element, null for an empty array."""
    return F.try_element_at(F.col(array) if isinstance(array, str) else array, F.lit(1))


def count_if(cond: Column) -> Column:
    return F.sum(F.when(cond, 1).otherwise(0)).cast("long")


def tps(col: str) -> Column:
    """``list<struct<topic, topic_id, partition>>`` -> ``list<struct<topic, partition>>``,
    an empty list for null."""
    return F.coalesce(
        F.transform(
            F.col(col),
            lambda x: F.struct(x["topic"].alias("topic"), x["partition"].alias("partition")),
        ),
        F.array().cast(TPS),
    )


def ms(col: str | Column = "timestamp") -> Column:
    """A timestamp -> epoch milliseconds."""
    c = F.col(col) if isinstance(col, str) else col
    return F.floor(F.unix_micros(c) / 1000).cast("long")


def stage(df: DataFrame, *, scan: bool = False) -> DataFrame:
    """``df`` computed now and kept by the executors (memory, spilling to disk), as a frame
    whose plan is just that data: one job, and nothing built on it re-plans its lineage.
    ``scan``: a job over the whole journal, run compiled (:func:`compiled`)."""
    if not scan:
        return df.localCheckpoint(eager=True)
    with compiled(df.sparkSession):
        return df.localCheckpoint(eager=True)


@contextmanager
def compiled(spark: SparkSession) -> Iterator[None]:
    """The jobs run inside compiled by whole-stage code generation. The session runs without
    it (:func:`.spark.start_session`: most jobs read a few thousand rows, and compiling each
    plan costs more than it saves), but a scan of the whole journal takes 1.6-1.8x less CPU
    compiled (measured at 10^7 rows: the commit rate 27.5 -> 17.5 s, the group records 12.2
    -> 6.8 s)."""
    key = "spark.sql.codegen.wholeStage"
    before = spark.conf.get(key) or "true"  # Spark's default
    spark.conf.set(key, "true")
    try:
        yield
    finally:
        spark.conf.set(key, before)


def bucket(params: Params, ts_ms: Column) -> Column:
    size_us = params.bucket_s * 1_000_000
    b = F.floor((ts_ms * 1000 - F.lit(params.t0_us)) / size_us) * size_us + F.lit(params.t0_us)
    return F.timestamp_micros(b.cast("long"))


def ownership_intervals(ev: DataFrame) -> DataFrame:
    """Release and acquisition events of partitions (``group_id``, ``offset``, ``ts_ms``,
    ``member_id``, ``tp``, ``gain``: 0 released, 1 acquired, any other columns) -> each release
    followed by an acquisition: the release's row with ``next_ts`` and ``next_member``, the
    time and the member that owned the partition again. In offset order; at one offset the
    releases come first."""
    w = Window.partitionBy("group_id", F.col("tp.topic"), F.col("tp.partition")).orderBy(
        "offset", "gain"
    )
    ev = (
        ev.withColumn("next_gain", F.lead("gain").over(w))
        .withColumn("next_ts", F.lead("ts_ms").over(w))
        .withColumn("next_member", F.lead("member_id").over(w))
    )
    return ev.filter((F.col("gain") == 0) & (F.col("next_gain") == 1))


def interval_columns(group_type: Column, group_epoch: Column) -> list[Column]:
    """The ``unowned_intervals`` columns of :func:`ownership_intervals`' rows (and ``ms``)."""
    return [
        F.col("group_id"),
        group_type.alias("group_type"),
        F.col("tp.topic").alias("topic"),
        F.col("tp.partition").alias("partition"),
        ts(F.col("ts_ms")).alias("released_at"),
        ts(F.col("next_ts")).alias("owned_again_at"),
        ((F.col("next_ts") - F.col("ts_ms")) / 1000.0).alias("seconds"),
        (F.col("next_ts") - F.col("ts_ms")).alias("ms"),
        F.col("member_id").alias("released_by"),
        F.col("next_member").alias("owned_again_by"),
        group_epoch.alias("group_epoch"),
    ]
