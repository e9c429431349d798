"""Classic groups: every generation a rebalance, read from the group's GroupMetadata records as
Spark DataFrame jobs (docs/analytics.md, "Classic groups").

A classic group writes one GroupMetadata record per completed generation (the leader's
SyncGroup, or a join phase that left it empty), holding every member with its subscription and
assignment (the embedded consumer protocol, decoded by the export) and — from builds that write
it — how the generation came about: when the rebalance started (PreparingRebalance), when its
join phase completed (CompletingRebalance), what started it and who was removed, why and when.
So each record is compared with the one before it in the same incarnation of the group (a
tombstone ends one): who joined, left or restarted, which partitions changed owner, and how long
partitions went unowned:

* **eager** (range, roundrobin, sticky ...): every member gives up everything when it rejoins,
  so each partition owned before the rebalance is unowned from its start until the generation
  is Stable (the record's time), and longer if the new generation leaves it unassigned;
* **cooperative** (KIP-429): only what changes hands: a partition of a removed member from its
  removal, a partition its owner must give up from the end of this rebalance (the owner revokes
  it once it has its new assignment) until a later generation gives it to someone.

Records without the rebalance fields (an older build) give the generation but no start, so no
duration and no unowned time, and removals whose reason the journal cannot tell.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from .common import (
    CLASSIC,
    CLASSIC_CAUSES,
    COOPERATIVE,
    DOWNGRADED,
    EAGER,
    FENCED_REBALANCE,
    FENCED_SESSION,
    LEFT,
    LEFT_OR_SESSION,
    REBALANCE_COLUMNS,
    REJOINED,
    REPLACED,
    STATIC_RESTART,
    UNKNOWN_CAUSE,
    Params,
    count_if,
    first,
    interval_columns,
    ms,
    ownership_intervals,
    stage,
    ts,
)

METADATA_CHANGED = "topic_metadata_changed"

COLUMNS = (
    "group_id",
    "offset",
    "ts_ms",
    "record_type_id",
    "tombstone",
    "generation",
    "classic_members",
    "classic_rebalance_protocol",
    "rebalance_preparing_at",
    "rebalance_completing_at",
    "rebalance_cause",
    "rebalance_client_reason",
    "classic_removed_members",
)


@dataclass(frozen=True, slots=True)
class ClassicFrames:
    """The classic groups' part of the report, in the columns of the common tables."""

    records: DataFrame
    """One row per GroupMetadata record, compared with the previous one (materialized)."""
    rebalances: DataFrame
    unowned: DataFrame
    """The unowned intervals, with ``ms`` for the aggregates."""
    removals: DataFrame
    restarts: DataFrame
    churn: DataFrame
    """Membership events for ``member_churn``: one row per record with counts."""


def tables(j: DataFrame, params: Params) -> ClassicFrames:
    """The classic groups' tables from the journal ``j`` (with ``ts_ms``)."""
    records = stage(_records(j, params))
    bumps = records.filter(F.col("is_rebalance"))
    parts = _partitions(bumps)
    unowned = stage(_unowned_intervals(parts))
    rebalances = _rebalances(bumps, parts, unowned)
    return ClassicFrames(
        records=records,
        rebalances=rebalances,
        unowned=unowned,
        removals=_removals(records),
        restarts=_restarts(records),
        churn=_churn_events(records),
    )


# ---------------------------------------------------------------------------- records


def _records(j: DataFrame, params: Params) -> DataFrame:
    """Every GroupMetadata record (tombstones aside) with the previous record of the group's
    incarnation and what changed between the two."""
    t = F.col("record_type_id")
    r = j.filter(
        F.col("group_id").isNotNull() & ((t == 2) | ((t == 3) & F.col("tombstone")))
    ).select(*COLUMNS)
    w = Window.partitionBy("group_id").orderBy("offset")
    # A downgrade writes the consumer group's tombstone and the classic group's first record in
    # one command: the classic record right after a consumer tombstone of the same time.
    before = F.lag(F.struct("record_type_id", "ts_ms")).over(w)
    r = r.withColumn(
        "downgrade",
        F.coalesce(
            (before["record_type_id"] == 3) & (before["ts_ms"] == F.col("ts_ms")), F.lit(False)
        ),
    ).filter(t == 2)
    prev = F.lag(F.struct("tombstone", "generation", "classic_members")).over(w)
    r = r.withColumn("prev", prev)
    opens = F.col("prev").isNull() | F.col("prev.tombstone")
    empty = F.array().cast(r.schema["classic_members"].dataType)
    r = r.withColumn("first", opens).withColumn(
        "prev_members", F.when(opens, empty).otherwise(F.col("prev.classic_members"))
    )
    r = r.withColumn("members", F.coalesce(F.col("classic_members"), empty))
    # A group is cooperative when any of its records shows it (a custom cooperative assignor's
    # first generation owns nothing yet, so only its later records can tell).
    cooperative = F.max(
        F.when(F.col("classic_rebalance_protocol") == COOPERATIVE, 1).otherwise(0)
    ).over(Window.partitionBy("group_id"))
    r = r.withColumn(
        "protocol", F.when(cooperative == 1, F.lit(COOPERATIVE)).otherwise(F.lit(EAGER))
    ).filter(~F.col("tombstone"))
    generation_up = ~F.col("first") & (F.col("generation") > F.col("prev.generation"))
    # The first record of an incarnation counts when the group is created in the data (as a
    # consumer group's first epoch bump does), never the one a downgrade writes.
    created = (
        F.col("first") & ~F.col("downgrade") & (F.lit(params.complete) | (F.col("generation") <= 1))
    )
    r = r.withColumn("is_rebalance", generation_up | created)
    # Static members that came back under a new member id: the old id gone, a new id with its
    # instance id (KIP-345).
    new_ids = F.transform("members", lambda x: x["member_id"])
    r = r.withColumn("new_ids", new_ids).withColumn(
        "prev_ids", F.transform("prev_members", lambda x: x["member_id"])
    )
    replaced = F.filter(
        "prev_members",
        lambda o: (
            o["instance_id"].isNotNull()
            & ~F.array_contains(F.col("new_ids"), o["member_id"])
            & F.exists(
                "members",
                lambda n: (
                    (n["instance_id"] == o["instance_id"])
                    & ~F.array_contains(F.col("prev_ids"), n["member_id"])
                ),
            )
        ),
    )
    r = r.withColumn(
        "pairs",
        F.transform(
            replaced,
            lambda o: F.struct(
                o["member_id"].alias("old"),
                first(F.filter("members", lambda n: n["instance_id"] == o["instance_id"]))[
                    "member_id"
                ].alias("new"),
                o["instance_id"].alias("instance_id"),
                o["session_timeout_ms"].alias("session_timeout_ms"),
            ),
        ),
    )
    olds = F.transform("pairs", lambda p: p["old"])
    news = F.transform("pairs", lambda p: p["new"])
    r = r.withColumn(
        "joined",
        F.array_sort(
            F.filter(
                "new_ids",
                lambda i: ~F.array_contains(F.col("prev_ids"), i) & ~F.array_contains(news, i),
            )
        ),
    ).withColumn(
        "departed",
        F.filter(
            "prev_ids",
            lambda i: ~F.array_contains(F.col("new_ids"), i) & ~F.array_contains(olds, i),
        ),
    )
    known = F.col("rebalance_preparing_at").isNotNull()
    # Every removal since the previous record: as the record says, or the members gone (why,
    # the journal of an older build cannot tell).
    r = r.withColumn(
        "removals",
        F.when(
            known,
            F.transform(
                "classic_removed_members",
                lambda x: F.struct(
                    x["member_id"].alias("member_id"),
                    x["reason"].alias("reason"),
                    ms(x["removed_at"]).alias("removed_ms"),
                ),
            ),
        ).otherwise(
            F.concat(
                F.transform(
                    "departed",
                    lambda i: F.struct(
                        i.alias("member_id"),
                        F.lit(LEFT_OR_SESSION).alias("reason"),
                        F.col("ts_ms").alias("removed_ms"),
                    ),
                ),
                F.transform(
                    "pairs",
                    lambda p: F.struct(
                        p["old"].alias("member_id"),
                        F.lit(REPLACED).alias("reason"),
                        F.col("ts_ms").alias("removed_ms"),
                    ),
                ),
            )
        ),
    )
    return r.withColumn(
        "subscription_changed",
        F.array_sort(
            F.transform(
                F.filter(
                    "members",
                    lambda n: F.exists(
                        "prev_members",
                        lambda o: (
                            (o["member_id"] == n["member_id"])
                            & ~o["subscribed_topic_names"].eqNullSafe(n["subscribed_topic_names"])
                        ),
                    ),
                ),
                lambda n: n["member_id"],
            )
        ),
    ).select(
        "group_id",
        "offset",
        "ts_ms",
        "generation",
        F.when(~F.col("first"), F.col("prev.generation")).alias("previous_generation"),
        "protocol",
        "is_rebalance",
        "downgrade",
        "members",
        "prev_members",
        "new_ids",
        "pairs",
        "joined",
        "removals",
        "subscription_changed",
        ms(F.col("rebalance_preparing_at")).alias("start_ms"),
        ms(F.col("rebalance_completing_at")).alias("completing_ms"),
        F.when(
            (F.col("rebalance_cause") == REJOINED)
            & F.lower(F.col("rebalance_client_reason")).contains("metadata"),
            F.lit(METADATA_CHANGED),
        )
        .otherwise(F.col("rebalance_cause"))
        .alias("recorded_cause"),
    )


# ---------------------------------------------------------------------------- partitions


def _partitions(bumps: DataFrame) -> DataFrame:
    """One row per partition owned before or after each rebalance: its owner before
    (``from_member``; ``from_mapped``: that member, or the new incarnation of the static member
    it was; ``from_live``: still a member after) and after (``to_member``)."""
    key = ("group_id", "offset")
    before = (
        _owners(bumps, "prev_members", "from_member", "pairs", "new_ids")
        .withColumn(
            "from_mapped",
            F.coalesce(
                first(F.filter("pairs", lambda x: x["old"] == F.col("from_member")))["new"],
                F.col("from_member"),
            ),
        )
        .withColumn("from_live", F.array_contains(F.col("new_ids"), F.col("from_mapped")))
        .drop("pairs", "new_ids")
    )
    after = _owners(bumps, "members", "to_member")
    info = bumps.select(*key, "generation", "protocol", "ts_ms", "start_ms", "removals")
    return (
        before.join(after, on=[*key, "topic", "partition"], how="full_outer")
        .join(info, on=list(key))
        .withColumn("from_live", F.coalesce(F.col("from_live"), F.lit(False)))
    )


def _owners(bumps: DataFrame, members: str, owner: str, *keep: str) -> DataFrame:
    """One row per partition a member of ``members`` owns at each rebalance, its owner named
    ``owner`` (and the bump's columns ``keep``)."""
    key = ("group_id", "offset")
    m = bumps.select(*key, *keep, F.explode(members).alias("m"))
    return m.select(
        *key,
        *keep,
        F.col("m.member_id").alias(owner),
        F.explode("m.assigned_partitions").alias("p"),
    ).select(
        *key,
        *keep,
        F.col("p.topic").alias("topic"),
        F.col("p.partition").alias("partition"),
        owner,
    )


def _kept(parts: DataFrame) -> Column:
    return F.col("from_live") & F.col("to_member").eqNullSafe(F.col("from_mapped"))


def _unowned_intervals(parts: DataFrame) -> DataFrame:
    """Releases and acquisitions of partitions at each rebalance (eager: everything at its
    start; cooperative: what changes hands, see the module's doc) -> unowned intervals, each
    belonging to the rebalance that released the partition."""
    eager = F.col("protocol") == EAGER
    start = F.coalesce(F.col("start_ms"), F.col("ts_ms"))
    removed_at = first(F.filter("removals", lambda x: x["member_id"] == F.col("from_member")))[
        "removed_ms"
    ]
    has_from = F.col("from_member").isNotNull()
    released = has_from & (eager | ~_kept(parts))
    release_ms = (
        F.when(eager, start)
        .when(~F.col("from_live"), F.coalesce(removed_at, start))
        .otherwise(F.col("ts_ms"))
    )
    acquired = F.col("to_member").isNotNull() & (eager | ~_kept(parts))
    tp = F.struct("topic", "partition").alias("tp")
    keep = ("group_id", "offset", "generation")
    ev = (
        parts.filter(released)
        .select(
            *keep,
            release_ms.alias("ts_ms"),
            F.col("from_member").alias("member_id"),
            tp,
            F.lit(0).alias("gain"),
        )
        .unionByName(
            parts.filter(acquired).select(
                *keep, "ts_ms", F.col("to_member").alias("member_id"), tp, F.lit(1).alias("gain")
            )
        )
    )
    return ownership_intervals(ev).select(
        *interval_columns(F.lit(CLASSIC), F.col("generation")),
        F.col("offset").alias("release_offset"),
    )


# ---------------------------------------------------------------------------- tables


def _rebalances(bumps: DataFrame, parts: DataFrame, unowned: DataFrame) -> DataFrame:
    key = ["group_id", "offset"]
    moved = F.col("from_live") & F.col("to_member").isNotNull() & ~_kept(parts)
    lost = F.col("from_live") & ~_kept(parts)
    eager = F.col("protocol") == EAGER
    per = parts.groupBy(*key).agg(
        count_if(moved).alias("partitions_moved"),
        count_if(F.col("to_member").isNotNull() & ~F.col("from_live")).alias(
            "partitions_newly_assigned"
        ),
        count_if(F.col("from_live") & F.col("to_member").isNull()).alias("partitions_unassigned"),
        # Eager: every member that stays gives up all it has; cooperative: what it loses.
        F.countDistinct(F.when(F.col("from_live") & (eager | lost), F.col("from_mapped"))).alias(
            "members_stopped"
        ),
        F.array_sort(
            F.collect_list(
                F.when(
                    moved,
                    F.struct(
                        "topic",
                        "partition",
                        "from_member",
                        F.col("to_member").alias("to_member"),
                    ),
                )
            )
        ).alias("moved"),
    )
    u = (
        unowned.filter(F.col("ms") > 0)
        .groupBy("group_id", F.col("release_offset").alias("offset"))
        .agg(
            F.sum("ms").alias("unowned_partition_ms"),
            F.count(F.lit(1)).alias("partitions_unowned"),
        )
    )
    removed = F.array_sort(
        F.transform(
            F.filter("removals", lambda x: x["reason"] != REPLACED),
            lambda x: F.struct(x["member_id"].alias("member_id"), x["reason"].alias("reason")),
        )
    )
    r = bumps.withColumn("members_removed", removed)
    reasons = F.transform("members_removed", lambda x: x["reason"])
    recorded = F.col("recorded_cause")
    flags = {
        DOWNGRADED: recorded == DOWNGRADED,
        "member_joined": F.size("joined") > 0,
        REJOINED: recorded == REJOINED,
        "subscription_changed": (F.size("subscription_changed") > 0)
        | (recorded == "subscription_changed"),
        METADATA_CHANGED: recorded == METADATA_CHANGED,
        STATIC_RESTART: (F.size("pairs") > 0) | (recorded == STATIC_RESTART),
        FENCED_SESSION: F.array_contains(reasons, FENCED_SESSION),
        FENCED_REBALANCE: F.array_contains(reasons, FENCED_REBALANCE),
        LEFT: F.array_contains(reasons, LEFT),
        LEFT_OR_SESSION: F.array_contains(reasons, LEFT_OR_SESSION),
    }
    derived = F.filter(
        F.array(*[F.when(flags[c], F.lit(c)) for c in CLASSIC_CAUSES]), lambda x: x.isNotNull()
    )
    # The cause that started the rebalance first (when the record says), then the others.
    causes = F.array_distinct(F.concat(F.array_compact(F.array(recorded)), derived))
    r = r.withColumn("causes", causes).join(per, on=key, how="left").join(u, on=key, how="left")
    start = F.col("start_ms")
    zero = F.lit(0).cast("long")
    return r.select(
        "group_id",
        F.lit(CLASSIC).alias("group_type"),
        "protocol",
        F.col("generation").alias("group_epoch"),
        F.col("previous_generation").alias("previous_epoch"),
        "offset",
        ts(F.coalesce(start, F.col("ts_ms"))).alias("timestamp"),
        F.coalesce(first("causes"), F.lit(UNKNOWN_CAUSE)).alias("cause"),
        "causes",
        F.col("joined").alias("members_joined"),
        "members_removed",
        F.col("subscription_changed").alias("members_subscription_changed"),
        F.size("prev_members").alias("members_before"),
        F.size("members").alias("members_after"),
        F.coalesce(F.col("members_stopped"), zero).alias("members_stopped"),
        F.coalesce(F.col("partitions_moved"), zero).alias("partitions_moved"),
        F.coalesce(F.col("partitions_newly_assigned"), zero).alias("partitions_newly_assigned"),
        F.coalesce(F.col("partitions_unassigned"), zero).alias("partitions_unassigned"),
        F.coalesce(F.col("moved"), F.array().cast(per.schema["moved"].dataType)).alias("moved"),
        (F.coalesce(F.col("unowned_partition_ms"), zero) / 1000.0).alias(
            "unowned_partition_seconds"
        ),
        F.coalesce(F.col("unowned_partition_ms"), zero).cast("long").alias("unowned_partition_ms"),
        F.coalesce(F.col("partitions_unowned"), zero).alias("partitions_unowned"),
        F.lit("converged").alias("outcome"),
        ts(F.col("ts_ms")).alias("stable_at"),
        (F.col("ts_ms") - start).alias("time_to_converge_ms"),
        F.lit(None).cast("int").alias("stable_epoch"),
        (F.col("completing_ms") - start).alias("join_ms"),
        (F.col("ts_ms") - F.col("completing_ms")).alias("sync_ms"),
    ).select(*REBALANCE_COLUMNS)


def _member_of(members: str, member_id: Column) -> Column:
    return first(F.filter(members, lambda x: x["member_id"] == member_id))


def _removals(records: DataFrame) -> DataFrame:
    """Members removed at each rebalance (as its record says, or gone since the previous
    record), and predecessors of static members that came back in a stable group."""
    removals = F.when(F.col("is_rebalance"), F.col("removals")).otherwise(
        F.transform(
            "pairs",
            lambda p: F.struct(
                p["old"].alias("member_id"),
                F.lit(REPLACED).alias("reason"),
                F.col("ts_ms").alias("removed_ms"),
            ),
        )
    )
    r = records.select(
        "group_id", "offset", "pairs", "prev_members", F.explode(removals).alias("x")
    )
    before = _member_of("prev_members", F.col("x.member_id"))
    return r.select(
        "group_id",
        F.lit(CLASSIC).alias("group_type"),
        F.col("x.member_id").alias("member_id"),
        before["instance_id"].alias("instance_id"),
        "offset",
        ts(F.col("x.removed_ms")).alias("timestamp"),
        F.col("x.reason").alias("reason"),
        F.lit(True).alias("classic_member"),
        F.when(
            F.col("x.reason") == REPLACED,
            first(F.filter("pairs", lambda p: p["old"] == F.col("x.member_id")))["new"],
        ).alias("replaced_by"),
        before["session_timeout_ms"].cast("long").alias("session_timeout_ms"),
    )


def _restarts(records: DataFrame) -> DataFrame:
    """Static members back under a new member id (KIP-345). A classic static member leaves
    without a word, so the journal knows when it was back, not when it went away."""
    r = records.select("group_id", "ts_ms", "removals", F.explode("pairs").alias("p"))
    replaced_at = first(
        F.filter(
            "removals",
            lambda x: (x["member_id"] == F.col("p.old")) & (x["reason"] == REPLACED),
        )
    )["removed_ms"]
    return r.select(
        "group_id",
        F.lit(CLASSIC).alias("group_type"),
        F.col("p.instance_id").alias("instance_id"),
        F.col("p.old").alias("old_member_id"),
        F.col("p.new").alias("new_member_id"),
        F.lit(None).cast("timestamp").alias("left_at"),
        ts(F.coalesce(replaced_at, F.col("ts_ms"))).alias("rejoined_at"),
        F.lit(None).cast("long").alias("downtime_ms"),
    )


def _churn_events(records: DataFrame) -> DataFrame:
    none = F.array().cast(records.schema["removals"].dataType)
    removed = F.filter(
        F.when(F.col("is_rebalance"), F.col("removals")).otherwise(none),
        lambda x: x["reason"] != REPLACED,
    )

    def reason(name: str) -> Column:
        return F.size(F.filter(removed, lambda x: x["reason"] == name))

    return records.filter(~F.col("downgrade")).select(
        "group_id",
        F.lit(CLASSIC).alias("group_type"),
        F.coalesce(F.col("start_ms"), F.col("ts_ms")).alias("ts_ms"),
        F.when(F.col("is_rebalance"), F.size("joined")).otherwise(0).alias("joins"),
        F.size(removed).alias("removals"),
        reason(FENCED_SESSION).alias("fenced_session_timeout"),
        reason(FENCED_REBALANCE).alias("fenced_rebalance_timeout"),
        F.size("pairs").alias("static_restarts"),
    )
