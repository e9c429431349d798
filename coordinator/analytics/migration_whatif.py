"""The migration what-if: what migrating each classic group would have saved
(docs/analytics.md, ``migration_whatif``).

Each classic group's membership history (:func:`.replay.histories`) is replayed through the real
core as a KIP-848 consumer group with the chosen server assignor (scenario ``kip848``) and, for
an eager group, as a cooperative classic group (scenario ``cooperative``); the replays run in
Python on the executors, one group at a time (``groupBy(group_id).applyInArrow``), like the
assignor what-if. What actually happened comes from the ``rebalances`` table (the group's classic
generations), so both sides use the report's own definitions where they can: rebalances, those
that stopped nobody, partitions moved, unowned partition-seconds and time to converge.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from .classic import COLUMNS
from .common import CLASSIC, COOPERATIVE, EAGER, compiled
from .replay import Outcome, histories, replay_consumer, replay_cooperative

KIP848 = "kip848"
SCENARIOS = (KIP848, COOPERATIVE)


REPLAYED = pa.schema(
    [
        pa.field("group_id", pa.string()),
        pa.field("scenario", pa.string()),
        pa.field("assignor", pa.string()),
        pa.field("protocol", pa.string()),
        pa.field("incarnations", pa.int32()),
        pa.field("changes", pa.int32()),
        pa.field("rebalances", pa.int64()),
        pa.field("rebalances_stopping_nobody", pa.int64()),
        pa.field("partitions_moved", pa.int64()),
        pa.field("unowned_partition_ms", pa.int64()),
        pa.field("converge_p50_ms", pa.float64()),
        pa.field("converge_max_ms", pa.int64()),
        pa.field("error", pa.string()),
    ]
)


def replay_group(
    table: pa.Table, assignor_name: str, partitions: Mapping[str, int], complete: bool
) -> pa.Table:
    """One classic group's records -> a row per scenario (see the module's doc)."""
    from assignors.api import PartitionAssignorError
    from assignors.registry import load_assignor
    from coordinator.core.errors import CoordinatorError

    rows = table.to_pylist()
    if not rows:
        return REPLAYED.empty_table()
    gid = rows[0]["group_id"]
    cooperative = any(r["classic_rebalance_protocol"] == COOPERATIVE for r in rows)
    protocol = COOPERATIVE if cooperative else EAGER
    hs = histories(rows, partitions, complete=complete)
    assignor = load_assignor(assignor_name)
    runs = [(KIP848, assignor.name, lambda h: replay_consumer(h, assignor))]
    if not cooperative:
        runs.append((COOPERATIVE, "cooperative-sticky", replay_cooperative))
    out = []
    for scenario, name, run in runs:
        total = Outcome()
        for h in hs:
            try:
                total.add(run(h))
            except (CoordinatorError, PartitionAssignorError, RuntimeError) as exc:
                # The assignor refused, or the replay could not go on: said in the row.
                total.error = f"{type(exc).__name__}: {exc}"
        times = total.converge_ms
        out.append(
            {
                "group_id": gid,
                "scenario": scenario,
                "assignor": name,
                "protocol": protocol,
                "incarnations": len(hs),
                "changes": sum(len(h.changes) for h in hs),
                "rebalances": total.rebalances,
                "rebalances_stopping_nobody": total.rebalances_stopping_nobody,
                "partitions_moved": total.partitions_moved,
                "unowned_partition_ms": total.unowned_partition_ms,
                "converge_p50_ms": float(statistics.median(times)) if times else None,
                "converge_max_ms": max(times) if times else None,
                "error": total.error,
            }
        )
    return pa.Table.from_pylist(out, schema=REPLAYED)


def _partitions(journal: Any) -> dict[str, int]:
    """Each topic's (largest) partition count, from the journal's topic records: a small
    aggregate brought to the driver and shipped with the job."""
    from pyspark.sql import functions as F

    with compiled(journal.sparkSession):
        rows = (
            journal.filter((F.col("record_type_id") == 1100) & ~F.col("tombstone"))
            .groupBy("topic")
            .agg(F.max("num_partitions").alias("n"))
            .collect()
        )
    return {r["topic"]: int(r["n"]) for r in rows if r["topic"] is not None}


def migration_whatif(
    journal: Any, records: Any, rebalances: Any, assignor_name: str, *, complete: bool
) -> Any:
    """The ``migration_whatif`` table: per classic group and scenario, what happened (from
    ``rebalances``) beside what the replay measured (a lazy DataFrame). ``records``: the
    journal's group records (:func:`.metrics.group_records`)."""
    from pyspark.sql import functions as F

    partitions = _partitions(journal)
    t = F.col("record_type_id")
    classic_groups = records.filter(t == 2).select("group_id").distinct()
    rows = (
        records.filter((t == 2) | ((t == 3) & F.col("tombstone")))
        .join(classic_groups, "group_id")
        .select(*COLUMNS)
    )

    def run(table: pa.Table) -> pa.Table:
        return replay_group(table, assignor_name, partitions, complete)

    replayed = rows.groupBy("group_id").applyInArrow(run, schema=_spark_schema())
    actual = (
        rebalances.filter(F.col("group_type") == CLASSIC)
        .groupBy("group_id")
        .agg(
            F.count(F.lit(1)).alias("actual_rebalances"),
            F.sum(F.when(F.col("members_stopped") == 0, 1).otherwise(0))
            .cast("long")
            .alias("actual_stopping_nobody"),
            F.sum("partitions_moved").cast("long").alias("actual_moved"),
            F.sum("unowned_partition_ms").cast("long").alias("actual_unowned_ms"),
            F.percentile("time_to_converge_ms", 0.5).alias("actual_converge_p50_ms"),
            F.max("time_to_converge_ms").alias("actual_converge_max_ms"),
        )
    )
    r = replayed.join(actual, "group_id", "left")
    zero = F.lit(0).cast("long")
    return r.select(
        "group_id",
        "protocol",
        "scenario",
        "assignor",
        "incarnations",
        "changes",
        F.coalesce(F.col("actual_rebalances"), zero).alias("actual_rebalances"),
        F.col("rebalances").alias("whatif_rebalances"),
        F.coalesce(F.col("actual_stopping_nobody"), zero).alias(
            "actual_rebalances_stopping_nobody"
        ),
        F.col("rebalances_stopping_nobody").alias("whatif_rebalances_stopping_nobody"),
        F.coalesce(F.col("actual_moved"), zero).alias("actual_partitions_moved"),
        F.col("partitions_moved").alias("whatif_partitions_moved"),
        (F.coalesce(F.col("actual_unowned_ms"), zero) / 1000.0).alias(
            "actual_unowned_partition_seconds"
        ),
        (F.col("unowned_partition_ms") / 1000.0).alias("whatif_unowned_partition_seconds"),
        (
            (F.coalesce(F.col("actual_unowned_ms"), zero) - F.col("unowned_partition_ms")) / 1000.0
        ).alias("saved_unowned_partition_seconds"),
        "actual_converge_p50_ms",
        F.col("converge_p50_ms").alias("whatif_converge_p50_ms"),
        "actual_converge_max_ms",
        F.col("converge_max_ms").alias("whatif_converge_max_ms"),
        "error",
    )


def _spark_schema() -> str:
    return (
        "group_id string, scenario string, assignor string, protocol string, incarnations int, "
        "changes int, rebalances long, rebalances_stopping_nobody long, partitions_moved long, "
        "unowned_partition_ms long, converge_p50_ms double, converge_max_ms long, error string"
    )
