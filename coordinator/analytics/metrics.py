"""The report's metrics as Spark DataFrame jobs over the exported journal (docs/analytics.md
defines every table and column). Everything here is relational: window functions over each
group's records in offset order, array set operations on assignments, joins and aggregations.
Nothing is collected to the driver; :func:`compute` returns lazy DataFrames, one per table.

Consumer groups (:mod:`.consumer`: group epoch bumps) and classic groups (:mod:`.classic`:
generations) are read apart and meet here, in the same tables, told apart by ``group_type``
(``consumer``, ``mixed``: a consumer group with classic members, ``classic``) and ``protocol``
(``consumer``, ``eager``, ``cooperative``); :mod:`.migrations` links the two across upgrades and
downgrades. Offset commits, churn and the summaries are computed here for every group alike.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from . import classic, consumer
from .common import (
    ALL_CAUSES,
    CAUSES,
    CLASSIC,
    CONSUMER,
    CONVERTED,
    FENCED_REBALANCE,
    FENCED_SESSION,
    GROUP_TYPES,
    LEFT,
    LEFT_OR_SESSION,
    MIXED,
    PROTOCOLS,
    REPLACED,
    SESSION_TIMEOUT_CONFIG,
    UNKNOWN_CAUSE,
    Params,
    bucket,
    bucket_seconds,
    count_if,
    ms,
    stage,
)
from .migrations import migrations

__all__ = [
    "ALL_CAUSES",
    "CAUSES",
    "CONVERTED",
    "FENCED_REBALANCE",
    "FENCED_SESSION",
    "GROUP_TYPES",
    "LEFT",
    "LEFT_OR_SESSION",
    "PROTOCOLS",
    "REPLACED",
    "SESSION_TIMEOUT_CONFIG",
    "UNKNOWN_CAUSE",
    "Params",
    "bucket_seconds",
    "compute",
    "conform",
    "group_records",
]

_GROUP_COLUMNS = (
    "group_id",
    "offset",
    "ts_ms",
    "record_type_id",
    "tombstone",
    "member_id",
    "instance_id",
    "subscribed_topic_names",
    "subscribed_topic_regex",
    "server_assignor",
    "rebalance_timeout_ms",
    "classic_member",
    "classic_session_timeout_ms",
    "member_epoch",
    "member_state",
    "assigned_partitions",
    "pending_revocation_partitions",
    "target_partitions",
    "group_epoch",
    "config_name",
    "config_value",
)


def conform(journal: DataFrame) -> DataFrame:
    """The journal with every column of this build's schema: a column added after the file
    was written (docs/analytics.md) reads as null."""
    from pyspark.sql.pandas.types import from_arrow_type

    from .schema import COLUMNS

    have = set(journal.columns)
    missing = [c for c in COLUMNS if c.name not in have]
    if not missing:
        return journal
    return journal.select(
        "*",
        *[
            F.lit(None).cast(from_arrow_type(c.type)).alias(c.name, metadata={_ABSENT: True})
            for c in missing
        ],
    )


_ABSENT = "kip848.absent"


def has_column(journal: DataFrame, name: str) -> bool:
    """Whether the file had the column (:func:`conform` adds the others, as null)."""
    return name in journal.columns and not journal.schema[name].metadata.get(_ABSENT, False)


def group_records(journal: DataFrame) -> DataFrame:
    """The journal's group records but offset commits, with ``ts_ms`` and every column a job
    reads from them (consumer and classic groups, both what-ifs), materialized: the one scan of
    the file they all need (commits are most of the rows, and only the commit rate reads them)."""
    from . import whatif

    columns = dict.fromkeys((*_GROUP_COLUMNS, *classic.COLUMNS, *whatif.COLUMNS))
    j = conform(journal).withColumn("ts_ms", ms())
    return stage(
        j.filter(F.col("group_id").isNotNull() & (F.col("record_type_id") != 1)).select(*columns),
        scan=True,
    )


def compute(
    spark: SparkSession,
    journal: DataFrame,
    params: Params,
    records: DataFrame | None = None,
) -> dict[str, DataFrame]:
    """Every table of the report but the what-ifs (lazy; the caller writes them).
    ``records``: :func:`group_records` of the journal, if the caller has them already."""
    j = conform(journal).withColumn("ts_ms", ms())
    rows = group_records(journal) if records is None else records
    # The commits (a scan of the whole journal), the classic groups and the consumer groups
    # are computed side by side (Spark runs the jobs submitted from several threads at once):
    # one job's planning and scheduling in the driver overlaps another's tasks.
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="metrics") as pool:
        counted = pool.submit(lambda: stage(_commit_rate(j, params), scan=True))
        classic_part = pool.submit(classic.tables, rows, params)
        cg = consumer.tables(rows.select(*_GROUP_COLUMNS), params)
        cl = classic_part.result()
        rebalances = stage(cg.rebalances.unionByName(cl.rebalances))
        types = stage(_group_types(cg, cl))
        commits = _typed(counted.result(), types).drop("protocol")
    removals = cg.removals.unionByName(cl.removals)
    restarts = cg.restarts.unionByName(cl.restarts)
    unowned = cg.unowned.drop("epoch_seq_attr").unionByName(cl.unowned.drop("release_offset"))
    return {
        "rebalances": rebalances,
        "convergence": _convergence_summary(rebalances, types),
        "unowned_intervals": unowned.drop("ms"),
        "member_removals": removals,
        "static_restarts": restarts,
        "member_churn": _churn(cg.members, cl.churn, params),
        "commit_rate": commits,
        "group_summary": _group_summary(rebalances, removals, restarts, commits, cg, cl, types),
        "migrations": migrations(cg.rebalances, cg.members, cl.records, rebalances),
    }


def _group_types(cg: consumer.ConsumerFrames, cl: classic.ClassicFrames) -> DataFrame:
    """Each group's type and protocol at the end of the data: classic when its last group
    record is a classic group's (with that group's protocol), mixed when it is a consumer group
    that still has classic members, consumer otherwise. A group with nothing but committed
    offsets is an empty classic group, as Kafka lists it."""
    t = F.col("record_type_id")
    last = (
        cg.rows.filter(t.isin(2, 3))
        .groupBy("group_id")
        .agg(F.max_by("record_type_id", "offset").alias("last_type"))
    )
    mixed = cg.members.groupBy("group_id").agg(
        F.max_by("live_classic", "offset").alias("classic_members")
    )
    proto = cl.records.groupBy("group_id").agg(F.max_by("protocol", "offset").alias("cl_protocol"))
    out = last.join(mixed, "group_id", "left").join(proto, "group_id", "left")
    group_type = (
        F.when(F.col("last_type") == 2, F.lit(CLASSIC))
        .when(F.coalesce(F.col("classic_members"), F.lit(0)) > 0, F.lit(MIXED))
        .otherwise(F.lit(CONSUMER))
    )
    return out.select(
        "group_id",
        group_type.alias("group_type"),
        F.when(F.col("last_type") == 2, F.col("cl_protocol"))
        .otherwise(F.lit(CONSUMER))
        .alias("protocol"),
    )


def _typed(df: DataFrame, types: DataFrame) -> DataFrame:
    """``df`` with its groups' ``group_type`` and ``protocol`` (offsets-only groups: classic)."""
    return (
        df.join(types, "group_id", "left")
        .withColumn("group_type", F.coalesce(F.col("group_type"), F.lit(CLASSIC)))
        .withColumn("protocol", F.coalesce(F.col("protocol"), F.lit("none")))
    )


def _commit_rate(j: DataFrame, params: Params) -> DataFrame:
    """Commits per group, topic and time bucket, offsets advanced, and the committed-offset
    total (sum over the topic's partitions of the last committed offset) at each bucket's end
    (the group's type at the end of the data is joined to it afterwards)."""
    c = j.filter((F.col("record_type_id") == 1) & ~F.col("tombstone"))
    if has_column(j, "previous_committed_offset"):
        agg = _commit_buckets(c, params)
    else:
        agg = _commit_buckets_sorted(c, params)
    wt = (
        Window.partitionBy("group_id", "topic")
        .orderBy("bucket")
        .rowsBetween(Window.unboundedPreceding, 0)
    )
    return agg.select(
        "group_id",
        "topic",
        F.col("bucket").alias("bucket_start"),
        F.lit(params.bucket_s).alias("bucket_seconds"),
        "commits",
        (F.col("commits") / F.lit(float(params.bucket_s))).alias("commits_per_second"),
        "partitions",
        F.col("offset_delta").cast("long").alias("offset_delta"),
        F.sum(F.col("_base") + F.col("offset_delta"))
        .over(wt)
        .cast("long")
        .alias("committed_total"),
    )


def _commit_buckets(c: DataFrame, params: Params) -> DataFrame:
    """Per group, topic and bucket from the export's link of each commit to the partition's
    previous one: one hash aggregation. Each commit advances the partition by its offset minus
    the previous commit's (a partition's first commit in the export is its base, advancing
    nothing); a commit whose previous one is in an earlier bucket is the first of its
    partition in this bucket (the bucket's partitions count those)."""
    prev = F.col("previous_committed_offset")
    at = F.col("ts_ms")
    prev_at = F.floor(F.unix_micros(F.col("previous_commit_at")) / 1000)
    b = bucket(params, at)
    first_here = prev.isNull() | (bucket(params, prev_at) != b)
    return c.groupBy("group_id", "topic", b.alias("bucket")).agg(
        F.count(F.lit(1)).alias("commits"),
        F.sum(first_here.cast("long")).alias("partitions"),
        F.sum(F.coalesce(F.col("committed_offset") - prev, F.lit(0))).alias("offset_delta"),
        F.sum(F.when(prev.isNull(), F.col("committed_offset")).otherwise(0)).alias("_base"),
    )


def _commit_buckets_sorted(c: DataFrame, params: Params) -> DataFrame:
    """The same from an export without the links (written before they were): each
    partition's buckets in order, a window over them."""
    c = c.select(
        "group_id",
        "topic",
        "partition",
        "offset",
        "committed_offset",
        bucket(params, F.col("ts_ms")).alias("bucket"),
    )
    # Per partition and bucket first (a hash aggregation, no sort of the commits): each
    # commit's advance over the partition's previous commit, summed over a bucket, telescopes
    # to the bucket's last offset minus the previous bucket's last (its first, for the
    # partition's first bucket, whose first commit advances nothing).
    pb = c.groupBy("group_id", "topic", "partition", "bucket").agg(
        F.count(F.lit(1)).alias("commits"),
        F.min_by("committed_offset", "offset").alias("first"),
        F.max_by("committed_offset", "offset").alias("last"),
    )
    prev = F.lag("last").over(
        Window.partitionBy("group_id", "topic", "partition").orderBy("bucket")
    )
    pb = pb.withColumn("delta", F.col("last") - F.coalesce(prev, F.col("first"))).withColumn(
        "_first", F.when(prev.isNull(), F.col("first")).otherwise(0)
    )
    return pb.groupBy("group_id", "topic", "bucket").agg(
        F.sum("commits").alias("commits"),
        F.count(F.lit(1)).alias("partitions"),
        F.sum("delta").alias("offset_delta"),
        F.sum("_first").alias("_base"),
    )


def _churn(members: DataFrame, classic_events: DataFrame, params: Params) -> DataFrame:
    """Joins and removals per group, group type and time bucket (static replacements and
    conversions are not churn: they are counted apart)."""
    join = (F.col("kind") == "join") & ~F.col("replacing") & ~F.col("converted")
    leave = (F.col("kind") == "removed") & ~F.col("replaced") & ~F.col("converted")
    ev = members.filter(F.col("kind").isin("join", "removed")).select(
        "group_id",
        "group_type",
        "ts_ms",
        join.cast("int").alias("joins"),
        leave.cast("int").alias("removals"),
        (leave & (F.col("reason") == FENCED_SESSION)).cast("int").alias("fenced_session_timeout"),
        (leave & (F.col("reason") == FENCED_REBALANCE))
        .cast("int")
        .alias("fenced_rebalance_timeout"),
        F.col("replacing").cast("int").alias("static_restarts"),
    )
    counts = (
        "joins",
        "removals",
        "fenced_session_timeout",
        "fenced_rebalance_timeout",
        "static_restarts",
    )
    return (
        ev.unionByName(classic_events)
        .withColumn("bucket", bucket(params, F.col("ts_ms")))
        .groupBy("group_id", "group_type", "bucket")
        .agg(*[F.sum(c).cast("long").alias(c) for c in counts])
        .select(
            "group_id",
            "group_type",
            F.col("bucket").alias("bucket_start"),
            F.lit(params.bucket_s).alias("bucket_seconds"),
            *counts,
        )
    )


def _pcts(col: str) -> list[Column]:
    p = F.percentile(F.col(col), F.array(F.lit(0.5), F.lit(0.95)))
    return [p.getItem(0).alias("p50_ms"), p.getItem(1).alias("p95_ms"), F.max(col).alias("max_ms")]


def _convergence_summary(rebalances: DataFrame, types: DataFrame) -> DataFrame:
    """Time to converge per group, per group type (``group_id`` null) and overall (both null):
    p50, p95 (linear interpolation between ranks) and max over the rebalances that converged."""
    r = rebalances.select("group_id", "group_type", "outcome", "time_to_converge_ms")
    done = r.filter(F.col("time_to_converge_ms").isNotNull())
    counts = [
        F.count(F.lit(1)).alias("rebalances"),
        *[
            count_if(F.col("outcome") == o).alias(o)
            for o in ("converged", "superseded", "in_progress", "group_deleted")
        ],
    ]
    pct = _pcts("time_to_converge_ms")
    per_group = (
        r.groupBy("group_id")
        .agg(*counts)
        .join(done.groupBy("group_id").agg(*pct), on="group_id", how="left")
        .join(types.select("group_id", "group_type"), on="group_id", how="left")
    )
    per_type = (
        r.groupBy("group_type")
        .agg(*counts)
        .join(done.groupBy("group_type").agg(*pct), on="group_type", how="left")
        .withColumn("group_id", F.lit(None).cast("string"))
    )
    overall = (
        r.agg(*counts)
        .crossJoin(done.agg(*pct))
        .withColumn("group_id", F.lit(None).cast("string"))
        .withColumn("group_type", F.lit(None).cast("string"))
    )
    return overall.unionByName(per_type).unionByName(per_group)


def _group_summary(
    rebalances: DataFrame,
    removals: DataFrame,
    restarts: DataFrame,
    commits: DataFrame,
    cg: consumer.ConsumerFrames,
    cl: classic.ClassicFrames,
    types: DataFrame,
) -> DataFrame:
    rb = rebalances.groupBy("group_id").agg(
        F.count(F.lit(1)).alias("rebalances"),
        count_if(F.col("members_stopped") == 0).alias("rebalances_stopping_nobody"),
        F.sum("partitions_moved").alias("partitions_moved"),
        (F.sum("unowned_partition_ms") / 1000.0).alias("unowned_partition_seconds"),
        F.max("members_after").alias("max_members"),
    )
    rm = removals.groupBy("group_id").agg(
        *[
            count_if(F.col("reason") == reason).alias(reason)
            for reason in (LEFT, FENCED_SESSION, FENCED_REBALANCE, LEFT_OR_SESSION, CONVERTED)
        ]
    )
    m = cg.members
    joins = (
        m.filter((F.col("kind") == "join") & ~F.col("replacing") & ~F.col("converted"))
        .groupBy("group_id")
        .agg(F.count(F.lit(1)).alias("joins"))
        .unionByName(cl.churn.groupBy("group_id").agg(F.sum("joins").alias("joins")))
        .groupBy("group_id")
        .agg(F.sum("joins").cast("long").alias("joins"))
    )
    ids = (
        m.filter(F.col("kind") == "join")
        .select("group_id", "member_id")
        .unionByName(cl.records.select("group_id", F.explode("new_ids").alias("member_id")))
    )
    jn = joins.join(
        ids.groupBy("group_id").agg(F.countDistinct("member_id").alias("distinct_members")),
        "group_id",
        "full_outer",
    )
    rs = restarts.groupBy("group_id").agg(F.count(F.lit(1)).alias("static_restarts"))
    cm = commits.groupBy("group_id").agg(
        F.sum("commits").alias("commits"), F.sum("offset_delta").alias("offsets_committed")
    )
    out = (
        jn.join(rb, "group_id", "full_outer")
        .join(rm, "group_id", "full_outer")
        .join(rs, "group_id", "full_outer")
        .join(cm, "group_id", "full_outer")
    )
    counted = [c for c in out.columns if c != "group_id"]
    return _typed(
        out.select("group_id", *[F.coalesce(F.col(c), F.lit(0)).alias(c) for c in counted]),
        types,
    ).select("group_id", "group_type", "protocol", *counted)
