"""``kip848 analytics report``: the metrics tables (Parquet) and the HTML report.

Steps: check the input (a kip848 journal export of a schema version this build reads), start
Spark, compute every table (:mod:`.metrics`, :mod:`.whatif`), write each one under
``OUT/tables/<name>/`` (Spark Parquet directories), then aggregate the written tables into the
small series the plots need — the only data brought to the driver, bounded whatever the size of
the journal — and render ``OUT/report.html`` (:mod:`.html`).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from .schema import ExportInfo
from .spark import AnalyticsError, start_session

__all__ = ["ReportResult", "read_info", "run_report"]

TABLES = (
    "rebalances",
    "convergence",
    "unowned_intervals",
    "member_removals",
    "static_restarts",
    "member_churn",
    "commit_rate",
    "group_summary",
    "migrations",
    "migration_whatif",
    "whatif",
)
WRITERS = 4
"""Tables written at once (threads submitting Spark jobs)."""


@dataclass(slots=True)
class ReportResult:
    out_dir: Path
    html: Path
    tables: dict[str, Path]
    stages: dict[str, float] = field(default_factory=dict)
    """Seconds per stage, one after the other: spark start, read (the bounds), compute (the
    shared intermediate results, materialized), tables (every table written), html data,
    html render."""
    summary: dict[str, Any] = field(default_factory=dict)
    table_seconds: dict[str, float] = field(default_factory=dict)
    """Seconds each table's job took, from its start to its end: the jobs overlap one
    another and the compute stage (the assignor what-if starts during it)."""


def read_info(path: str | os.PathLike[str]) -> ExportInfo:
    """The export's metadata; :class:`AnalyticsError` for a missing, corrupt or foreign file."""
    p = Path(path)
    if not p.exists():
        raise AnalyticsError(f"no journal export at {p} (make one with kip848 analytics export)")
    if p.is_dir():
        raise AnalyticsError(f"{p} is a directory; --input names the exported Parquet file")
    try:
        meta = pq.read_metadata(p)
    except Exception as exc:
        raise AnalyticsError(
            f"{p} is not a readable Parquet file (corrupt or truncated): {exc}"
        ) from exc
    try:
        return ExportInfo.from_metadata(meta.metadata)
    except ValueError as exc:
        raise AnalyticsError(f"{p}: {exc}") from exc


def run_report(
    input_path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    master: str = "local[*]",
    whatif_assignor: str | None = None,
    conf: Mapping[str, str] | None = None,
    spark: Any = None,
    log: Callable[[str], None] | None = None,
) -> ReportResult:
    """Compute every table from the export at ``input_path`` into ``out_dir`` and render the
    report. ``spark``: an existing session to use (tests); otherwise one is started on
    ``master`` and stopped at the end. ``whatif_assignor``: the assignor to replay history
    through (default: the export's default assignor, i.e. what the coordinator used unless
    members asked for another)."""
    from . import html, metrics, migration_whatif, whatif

    say = log or (lambda _m: None)
    info = read_info(input_path)
    assignor = whatif_assignor or (info.assignors[0] if info.assignors else "uniform")
    _check_assignor(assignor)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise AnalyticsError(f"{out} exists and is not a directory")
    tables_dir = out / "tables"
    if tables_dir.exists():
        shutil.rmtree(tables_dir)
    tables_dir.mkdir(parents=True, exist_ok=True)
    stages: dict[str, float] = {}
    own = spark is None
    t = time.perf_counter()
    if own:
        spark = start_session(master, conf=conf)
    stages["spark start"] = time.perf_counter() - t
    try:
        from pyspark.sql import functions as F

        journal = metrics.conform(spark.read.parquet(str(Path(input_path).absolute())))
        t = time.perf_counter()
        bounds = _bounds(input_path)
        if bounds is None:  # no Parquet statistics for the timestamps: one Spark job
            row = journal.agg(
                F.min("timestamp").alias("first"),
                F.max("timestamp").alias("last"),
                F.count("*").alias("n"),
            ).collect()[0]
            bounds = (
                _us(row["first"]) if row["first"] is not None else None,
                _us(row["last"]) if row["last"] is not None else None,
                row["n"],
            )
        stages["read"] = time.perf_counter() - t
        first_us = bounds[0] if bounds[0] is not None else 0
        last_us = bounds[1] if bounds[1] is not None else 0
        bucket_s = metrics.bucket_seconds((last_us - first_us) // 1000)
        size = bucket_s * 1_000_000
        params = metrics.Params(
            session_timeout_ms=info.session_timeout_ms,
            complete=info.complete,
            bucket_s=bucket_s,
            t0_us=first_us // size * size,
        )
        t = time.perf_counter()
        paths = {name: tables_dir / name for name in TABLES}
        table_seconds: dict[str, float] = {}

        def write(name: str, frame: Any) -> None:
            start = time.perf_counter()
            frame.write.mode("overwrite").parquet(str(paths[name].absolute()))
            table_seconds[name] = time.perf_counter() - start
            say(f"wrote {paths[name]} ({table_seconds[name]:.1f} s)")

        # The tables are written by jobs running side by side (Spark runs jobs submitted from
        # several threads at once): a job's planning and scheduling in the driver overlaps
        # another's tasks. The assignor what-if, Python on the executors and the longest job
        # at 10^7 rows, starts as soon as the group records are there, beside the jobs that
        # compute the other tables.
        with ThreadPoolExecutor(max_workers=WRITERS, thread_name_prefix="table") as pool:
            try:
                records = metrics.group_records(journal)
                frames = {"whatif": _whatif_frame(whatif.whatif(records, assignor))}
                pending = [pool.submit(write, "whatif", frames["whatif"])]
                frames.update(metrics.compute(spark, journal, params, records))
                frames["migration_whatif"] = migration_whatif.migration_whatif(
                    journal, records, frames["rebalances"], assignor, complete=info.complete
                )
                stages["compute"] = time.perf_counter() - t
                t = time.perf_counter()
                # The longest first (the migration what-if replays the classic groups).
                pending += [
                    pool.submit(write, name, frames[name])
                    for name in sorted(TABLES, key=lambda n: n != "migration_whatif")
                    if name != "whatif"
                ]
                for job in pending:
                    job.result()
            except BaseException:
                spark.sparkContext.cancelAllJobs()  # the other threads' jobs end now
                raise
        stages["tables"] = time.perf_counter() - t
        t = time.perf_counter()
        data = html.collect(spark, {n: str(p.absolute()) for n, p in paths.items()}, params)
        stages["html data"] = time.perf_counter() - t
        t = time.perf_counter()
        page = html.render(
            data,
            info=info,
            input_path=str(input_path),
            assignor=assignor,
            rows=bounds[2],
            tables=TABLES,
        )
        html_path = out / "report.html"
        html_path.write_text(page, encoding="utf-8")
        stages["html render"] = time.perf_counter() - t
        say(f"wrote {html_path}")
    finally:
        if own:
            spark.stop()
    return ReportResult(out, html_path, paths, stages, data.get("summary", {}), table_seconds)


def _whatif_frame(df: Any) -> Any:
    from pyspark.sql import functions as F

    return df.select(
        "group_id",
        "assignment_epoch",
        "offset",
        F.timestamp_micros(F.col("ts_ms") * 1000).alias("timestamp"),
        "members",
        "partitions",
        "assignor",
        "actual_moved",
        "actual_newly_assigned",
        "whatif_moved",
        "whatif_newly_assigned",
        "actual_spread",
        "whatif_spread",
        "actual_stddev",
        "whatif_stddev",
        "error",
    )


def _check_assignor(name: str) -> None:
    from assignors.registry import AssignorConfigError, load_assignor

    try:
        load_assignor(name)
    except AssignorConfigError as exc:
        raise AnalyticsError(f"--what-if {name}: {exc}") from exc


def _bounds(path: str | os.PathLike[str]) -> tuple[int | None, int | None, int] | None:
    """(first, last timestamp in microseconds, rows) from the Parquet footer's statistics (no
    Spark job); None when a row group has no timestamp statistics."""
    meta = pq.read_metadata(path)
    col = meta.schema.to_arrow_schema().get_field_index("timestamp")
    first = last = None
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        if group.num_rows == 0:
            continue
        stats = group.column(col).statistics
        if stats is None or not stats.has_min_max or stats.null_count:
            return None
        lo, hi = _us(stats.min), _us(stats.max)
        first = lo if first is None else min(first, lo)
        last = hi if last is None else max(last, hi)
    return first, last, meta.num_rows


def _us(ts: Any) -> int:
    return int(round(ts.timestamp() * 1_000_000))
