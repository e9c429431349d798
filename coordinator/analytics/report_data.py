"""What the HTML page shows, aggregated from the written tables: the only data brought to the
driver, each piece bounded (a few thousand rows at most) whatever the size of the journal.

Pieces that the page's group-type filter switches between are computed per group type (a
``group_type`` field, or one entry per type in a dict with ``all`` for every group)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .common import CLASSIC, GROUP_TYPES, Params
from .migration_whatif import KIP848

MAX_POINTS = 3_000
TOP_GROUPS = 25
TIMELINE_GROUPS = 4
MIGRATE_FIRST = 10
ALL = "all"
FILTERS = (ALL, *GROUP_TYPES)
PARALLEL_PARTS = 4
"""Parts of the page computed at once (threads submitting Spark jobs)."""
_ASKED_OFTEN = ("rebalances", "group_summary", "convergence", "migration_whatif", "commit_rate")


def _rows(df: Any, *order: str) -> list[dict[str, Any]]:
    """``df`` collected; sorted here by ``order`` (column names, ``-name`` descending; nulls
    first ascending and last descending, as Spark sorts): a small result sorted in the driver
    costs no job, where Spark's sort samples its input in a job of its own first."""
    rows = [r.asDict(recursive=True) for r in df.collect()]
    for key in reversed(order):
        name = key.removeprefix("-")
        rows.sort(key=lambda r: (0,) if r[name] is None else (1, r[name]), reverse=key != name)
    return rows


def collect(spark: Any, paths: dict[str, str], params: Params) -> dict[str, Any]:
    """Every bounded aggregate the page needs (see the module's doc)."""
    from pyspark.sql import functions as F

    t = {name: spark.read.parquet(p) for name, p in paths.items()}
    # The tables the page asks several questions are read once and kept in memory.
    cached = [t[n].cache() for n in _ASKED_OFTEN]
    try:
        return _collect(F, t, params)
    finally:
        for df in cached:
            df.unpersist()


def _collect(F: Any, t: dict[str, Any], params: Params) -> dict[str, Any]:
    """The parts of the page, each a few small jobs, computed side by side: Spark runs the
    jobs submitted from several threads at once, so one job's planning and scheduling in the
    driver overlaps another's tasks."""
    parts = (
        lambda: _fleet(
            F, t["rebalances"], t["group_summary"], t["convergence"], t["migration_whatif"]
        ),
        lambda: _rebalance_series(F, t["rebalances"], params),
        lambda: _classic(F, t["rebalances"]),
        lambda: _activity(F, t),
        lambda: _assignor_whatif(F, t["whatif"]),
        lambda: _migrations(F, t["migrations"], t["migration_whatif"]),
        lambda: _groups(F, t["rebalances"], t["group_summary"], t["convergence"]),
    )
    data: dict[str, Any] = {"bucket_s": params.bucket_s}
    with ThreadPoolExecutor(max_workers=PARALLEL_PARTS, thread_name_prefix="report") as pool:
        for part in pool.map(lambda f: f(), parts):
            data.update(part)
    return data


def _rebalance_series(F: Any, rb: Any, params: Params) -> dict[str, Any]:
    """Rebalances per time bucket and cause, and the histogram of times to converge."""
    size = params.bucket_s * 1_000_000
    bucket = F.timestamp_micros(
        (
            F.floor((F.unix_micros("timestamp") - F.lit(params.t0_us)) / size) * size
            + F.lit(params.t0_us)
        ).cast("long")
    )
    return {
        "cause_series": _rows(
            rb.groupBy(bucket.alias("bucket"), "group_type", "cause").count(), "bucket"
        ),
        "converge_hist": _rows(
            rb.filter(F.col("time_to_converge_ms").isNotNull())
            .groupBy(
                "group_type",
                F.floor(F.log10(F.greatest(F.col("time_to_converge_ms"), F.lit(1))) * 8).alias(
                    "bin"
                ),
            )
            .count(),
            "bin",
        ),
        "scatter": _rows(
            rb.select(
                "timestamp", "partitions_moved", "unowned_partition_seconds", "cause", "group_type"
            )
            .orderBy(F.rand(7))
            .limit(MAX_POINTS)
        ),
    }


def _classic(F: Any, rb: Any) -> dict[str, Any]:
    """The classic rebalances' join and sync phases."""
    phases = rb.filter((F.col("group_type") == CLASSIC) & F.col("join_ms").isNotNull())
    return {
        "classic_phases": _rows(
            phases.groupBy("protocol").agg(
                F.count(F.lit(1)).alias("rebalances"),
                *[
                    F.percentile(c, F.array(F.lit(0.5), F.lit(0.95))).alias(c)
                    for c in ("join_ms", "sync_ms", "time_to_converge_ms")
                ],
                F.max("time_to_converge_ms").alias("max_ms"),
                F.avg("members_stopped").alias("members_stopped"),
            ),
            "protocol",
        ),
        "classic_points": _rows(
            phases.select("timestamp", "protocol", "join_ms", "sync_ms")
            .orderBy(F.rand(11))
            .limit(MAX_POINTS)
        ),
    }


def _activity(F: Any, t: dict[str, Any]) -> dict[str, Any]:
    """Member churn, removals, commits, and the committed offsets of the busiest topics."""
    sums = [
        F.sum(c).alias(c)
        for c in (
            "joins",
            "removals",
            "fenced_session_timeout",
            "fenced_rebalance_timeout",
            "static_restarts",
        )
    ]
    data = {
        "churn": _rows(
            t["member_churn"].groupBy("bucket_start", "group_type").agg(*sums), "bucket_start"
        ),
        "removals": _rows(t["member_removals"].groupBy("group_type", "reason").count(), "-count"),
    }
    cr = t["commit_rate"]
    data["commits"] = _rows(
        cr.groupBy("bucket_start", "group_type").agg(F.sum("commits").alias("commits")),
        "bucket_start",
    )
    top_progress = _rows(
        cr.groupBy("group_id", "topic")
        .agg(F.max("committed_total").alias("m"))
        .orderBy(F.desc("m"), "group_id", "topic")
        .limit(6)
    )
    pairs = F.lit(False)
    for r in top_progress:
        pairs = pairs | ((F.col("group_id") == r["group_id"]) & (F.col("topic") == r["topic"]))
    data["progress"] = _rows(
        cr.filter(pairs).select("group_id", "topic", "bucket_start", "committed_total"),
        "group_id",
        "topic",
        "bucket_start",
    )
    return data


def _groups(F: Any, rb: Any, gs: Any, conv: Any) -> dict[str, Any]:
    """The groups with the most rebalances, the timelines of the first few, the latest
    rebalances."""
    per_group_conv = conv.filter(F.col("group_id").isNotNull()).select(
        "group_id", "p50_ms", "p95_ms", "max_ms"
    )
    top_groups = _rows(
        gs.join(per_group_conv, "group_id", "left")
        .orderBy(F.desc("rebalances"), "group_id")
        .limit(TOP_GROUPS)
    )
    top = [r["group_id"] for r in top_groups[:TIMELINE_GROUPS]]
    timelines = _rows(
        rb.filter(F.col("group_id").isin(top))
        .select("group_id", "group_type", "timestamp", "group_epoch", "cause")
        .orderBy("group_id", "timestamp")
        .limit(MAX_POINTS)
    )
    recent = _rows(
        rb.select(
            "group_id",
            "group_type",
            "protocol",
            "group_epoch",
            "timestamp",
            "cause",
            "members_joined",
            "members_removed",
            "members_after",
            "partitions_moved",
            "unowned_partition_seconds",
            "time_to_converge_ms",
            "outcome",
        )
        .orderBy(F.desc("timestamp"), "group_id")
        .limit(40)
    )
    return {"top_groups": top_groups, "timelines": timelines, "recent": recent}


def _fleet(F: Any, rb: Any, gs: Any, conv: Any, mw: Any) -> dict[str, Any]:
    """The fleet: groups of each type, what each protocol costs, the summary cards per group
    type, and the groups to migrate first."""
    numeric = [
        c
        for c in gs.columns
        if c not in ("group_id", "group_type", "protocol", "max_members", "distinct_members")
    ]
    # Per group type and, in the row whose group_type is null, over every group: one job.
    sums = _rows(
        gs.rollup("group_type").agg(
            *[F.sum(c).alias(c) for c in numeric], F.count("*").alias("groups")
        )
    )
    by_type = {r["group_type"]: r for r in sums if r["group_type"] is not None}
    total = [r for r in sums if r["group_type"] is None]
    summary: dict[str, dict[str, Any]] = {
        ALL: {k: v for k, v in total[0].items() if k != "group_type"}
        if total
        else {**dict.fromkeys(numeric), "groups": 0}
    }
    conv_rows = _rows(conv.filter(F.col("group_id").isNull()))
    for r in conv_rows:
        key = r["group_type"] or ALL
        summary.setdefault(key, {}).update(
            {k: v for k, v in r.items() if k not in ("group_id", "group_type")}
        )
    for gt, r in by_type.items():
        summary.setdefault(gt, {}).update(r)
    protocol_cost = _rows(
        rb.groupBy("group_type", "protocol").agg(
            F.count(F.lit(1)).alias("rebalances"),
            (F.sum("unowned_partition_ms") / 1000.0).alias("unowned_partition_seconds"),
            (F.avg("unowned_partition_ms") / 1000.0).alias("unowned_per_rebalance"),
            F.sum("partitions_moved").alias("partitions_moved"),
            F.sum(F.when(F.col("members_stopped") == 0, 1).otherwise(0)).alias("stopping_nobody"),
            F.percentile("time_to_converge_ms", 0.5).alias("p50_ms"),
        ),
        "-unowned_partition_seconds",
    )
    fleet = _rows(
        gs.groupBy("group_type", "protocol").agg(F.count("*").alias("groups")),
        "group_type",
        "protocol",
    )
    first = _rows(
        mw.filter((F.col("scenario") == KIP848) & F.col("error").isNull())
        .orderBy(F.desc("saved_unowned_partition_seconds"), "group_id")
        .limit(MIGRATE_FIRST)
    )
    return {
        "summary": summary,
        "fleet": fleet,
        "protocol_cost": protocol_cost,
        "migrate_first": first,
    }


def _assignor_whatif(F: Any, wi: Any) -> dict[str, Any]:
    total = (
        wi.agg(
            F.count("*").alias("computations"),
            F.sum("actual_moved").alias("actual_moved"),
            F.sum("whatif_moved").alias("whatif_moved"),
            F.avg("actual_spread").alias("actual_spread"),
            F.avg("whatif_spread").alias("whatif_spread"),
            F.sum(F.when(F.col("error").isNotNull(), 1).otherwise(0)).alias("errors"),
            F.first("assignor", ignorenulls=True).alias("assignor"),
        )
        .collect()[0]
        .asDict()
    )
    groups = _rows(
        wi.groupBy("group_id")
        .agg(
            F.sum("actual_moved").alias("actual_moved"),
            F.sum("whatif_moved").alias("whatif_moved"),
            F.avg("actual_spread").alias("actual_spread"),
            F.avg("whatif_spread").alias("whatif_spread"),
        )
        .orderBy(F.desc("actual_moved"), "group_id")
        .limit(TOP_GROUPS)
    )
    return {"whatif_total": total, "whatif_groups": groups}


def _migrations(F: Any, mig: Any, mw: Any) -> dict[str, Any]:
    totals = {
        r["scenario"]: r
        for r in _rows(
            mw.groupBy("scenario").agg(
                F.count("*").alias("groups"),
                F.sum("actual_rebalances").alias("actual_rebalances"),
                F.sum("whatif_rebalances").alias("whatif_rebalances"),
                F.sum("actual_rebalances_stopping_nobody").alias("actual_stopping_nobody"),
                F.sum("whatif_rebalances_stopping_nobody").alias("whatif_stopping_nobody"),
                F.sum("actual_partitions_moved").alias("actual_partitions_moved"),
                F.sum("whatif_partitions_moved").alias("whatif_partitions_moved"),
                F.sum("actual_unowned_partition_seconds").alias("actual_unowned"),
                F.sum("whatif_unowned_partition_seconds").alias("whatif_unowned"),
                F.sum(F.when(F.col("error").isNotNull(), 1).otherwise(0)).alias("errors"),
                F.first("assignor", ignorenulls=True).alias("assignor"),
            )
        )
    }
    top = (
        mw.groupBy("group_id")
        .agg(F.max("actual_unowned_partition_seconds").alias("a"))
        .orderBy(F.desc("a"), "group_id")
        .limit(TOP_GROUPS)
    )
    groups = _rows(mw.join(top.select("group_id"), "group_id"), "group_id", "scenario")
    return {
        "migrations": _rows(mig.orderBy("timestamp", "group_id").limit(200)),
        "migration_totals": totals,
        "migration_groups": groups,
    }


def filtered(rows: list[dict[str, Any]], group_type: str) -> list[dict[str, Any]]:
    """The rows of a group type (all of them for ``all``)."""
    return rows if group_type == ALL else [r for r in rows if r.get("group_type") == group_type]
