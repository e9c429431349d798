"""Analytics: export and report time at 10^5, 10^6 and 10^7 journal rows.

    .venv/bin/python bench/analytics.py                       # all sizes, writes docs/benchmarks.md
    .venv/bin/python bench/analytics.py --sizes 100000 --no-write

Stores: a base store written by the workload generator (``kip848 analytics generate``: the
real runtime on virtual time, ~10^5 records, 30% of its groups classic groups: eager and
cooperative, some upgraded and downgraded), then bigger stores made of copies of it with
renamed groups, interleaved batch by batch (more groups over the same period). Stores are
cached under ``--work`` (default ``/tmp/kip848-bench-analytics``) between runs.

Each size is measured end to end as a user runs it: ``export`` in-process (the Parquet file),
then ``report`` in a fresh process (``local[*]``, so Spark's start-up is included), each stage
timed. Targets (issue 31): 10^6 rows exported and reported in <= 60 s on the 2-core machine,
10^7 rows in <= 120 s, and less than x4 from 10^6 to 10^7.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._report import machine, table, write_section

SIZES = (100_000, 1_000_000, 10_000_000)
BASE_GROUPS = 48
BASE_SECONDS = 900
CLASSIC_FRACTION = 0.3


def base_store(work: Path) -> Path:
    from coordinator.analytics.workload import WorkloadOptions, generate

    path = work / f"base-classic{int(CLASSIC_FRACTION * 100)}"
    if not (path / "coordinator.db").exists():
        t = time.perf_counter()
        opts = WorkloadOptions(
            seed=11,
            groups=BASE_GROUPS,
            duration_s=BASE_SECONDS,
            classic_fraction=CLASSIC_FRACTION,
        )
        generate(str(path), opts)
        print(f"base store: {time.perf_counter() - t:.1f} s", file=sys.stderr)
    return path


def classic_share(parquet: Path) -> tuple[int, int]:
    """(groups that were classic groups at some point, groups) of an export."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    t = pq.read_table(parquet, columns=["group_id", "record_type_id"])
    groups = pc.unique(pc.drop_null(t["group_id"]))
    classic = pc.unique(t.filter(pc.equal(t["record_type_id"], 2))["group_id"])
    return len(classic), len(groups)


def scaled_store(work: Path, base: Path, rows: int) -> Path:
    """``rows`` records (about): copies of the base journal with renamed groups, each base
    batch followed by its copies (so the copies interleave in time like more groups would)."""
    from coordinator.runtime.store import SqliteRecordStore, StoredRecord, log_ids

    path = work / f"rows-{rows}"
    if (path / "coordinator.db").exists():
        return path
    with SqliteRecordStore(base, read_only=True) as src:
        partitions = src.partitions
        # Every log's journal in time order (stable: each log keeps its own order).
        entries = sorted(
            (e for log in log_ids(partitions) for e in src.journal(log)),
            key=lambda e: e.timestamp_ms,
        )
    copies = max(1, round(rows / len(entries)))
    t = time.perf_counter()
    dst = SqliteRecordStore(path, sync="off", partitions=partitions)
    try:
        batch: list[tuple[bytes, bytes | None, str | None]] = []
        batch_ts = None
        topics_done = False

        def flush() -> None:
            nonlocal topics_done
            for k in range(copies):
                recs = []
                for key, value, gid in batch:
                    if gid is None:
                        if k and topics_done:
                            continue  # cluster records (topics) once
                        recs.append(StoredRecord(key, value, None))
                        continue
                    new = gid if k == 0 else f"{gid}~{k}"
                    quoted = json.dumps(gid).encode()
                    recs.append(
                        StoredRecord(key.replace(quoted, json.dumps(new).encode(), 1), value, new)
                    )
                if recs:
                    dst.append(recs, batch_ts)  # type: ignore[arg-type]
            topics_done = True

        for e in entries:
            if e.timestamp_ms != batch_ts and batch:
                flush()
                batch = []
            batch_ts = e.timestamp_ms
            batch.append((e.key, e.value, e.group_id))
        if batch:
            flush()
    finally:
        dst.close()
    print(
        f"store of {rows} rows ({copies} copies): {time.perf_counter() - t:.1f} s", file=sys.stderr
    )
    return path


def run_report(parquet: Path, out: Path) -> dict[str, float]:
    """The report in a fresh process (Spark start-up included); its stage times."""
    code = (
        "import json, sys; from coordinator.analytics.report import run_report; "
        "r = run_report(sys.argv[1], sys.argv[2]); print(json.dumps(r.stages))"
    )
    t = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-c", code, str(parquet), str(out)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
    )
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise RuntimeError(f"report failed: {p.stderr[-2000:]}")
    stages = json.loads(p.stdout.strip().splitlines()[-1])
    stages["process"] = wall
    return stages


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    ap.add_argument("--work", default="/tmp/kip848-bench-analytics")
    ap.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    args = ap.parse_args()
    from coordinator.analytics.export import export_journal

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    base = base_store(work)
    results: list[dict[str, Any]] = []
    load0 = os.getloadavg()[0]
    for size in args.sizes:
        store = scaled_store(work, base, size)
        parquet = work / f"journal-{size}.parquet"
        t = time.perf_counter()
        exp = export_journal(store, parquet)
        export_s = time.perf_counter() - t
        classic, groups = classic_share(parquet)
        stages = run_report(parquet, work / f"report-{size}")
        jobs = sum(
            v for k, v in stages.items() if k.startswith("table ") or k in ("read", "compute")
        )
        html = stages.get("html data", 0.0) + stages.get("html render", 0.0)
        report_s = stages["process"]
        results.append(
            {
                "rows": exp.info.rows,
                "groups": f"{groups:,} ({100 * classic / groups:.0f}% classic)",
                "whatif_s": stages.get("table migration_whatif", 0.0),
                "export_s": export_s,
                "mb": parquet.stat().st_size / 1e6,
                "spark_s": stages["spark start"],
                "jobs_s": jobs,
                "html_s": html,
                "report_s": report_s,
                "total_s": export_s + report_s,
            }
        )
        r = results[-1]
        print(
            f"{r['rows']:>10,} rows: export {r['export_s']:.1f} s, report {r['report_s']:.1f} s"
            f" (spark start {r['spark_s']:.1f}, jobs {r['jobs_s']:.1f}, html {r['html_s']:.1f})",
            file=sys.stderr,
        )
    first = results[0]
    rows = [
        (
            f"{r['rows']:,}",
            r["groups"],
            f"{r['export_s']:.1f}",
            f"{r['rows'] / r['export_s']:,.0f}",
            f"{r['mb']:.1f}",
            f"{r['spark_s']:.1f}",
            f"{r['jobs_s']:.1f}",
            f"{r['whatif_s']:.1f}",
            f"{r['html_s']:.1f}",
            f"{r['report_s']:.1f}",
            f"**{r['total_s']:.1f}**",
            f"{r['total_s'] / first['total_s']:.1f}x",
        )
        for r in results
    ]
    text = table(
        (
            "journal rows",
            "groups",
            "export s",
            "export rows/s",
            "Parquet MB",
            "Spark start s",
            "Spark jobs s",
            "of which migration what-if s",
            "HTML s",
            "report s (process)",
            "export + report s",
            f"vs {first['rows']:,}",
        ),
        rows,
    )
    print(text)
    if not args.no_write:
        write_section(
            "analytics",
            "## Analytics: journal export and Spark report (`python bench/analytics.py`)\n\n"
            f"{machine()}; `local[*]`. Stores: the workload generator's base store "
            f"({BASE_GROUPS} groups, {int(CLASSIC_FRACTION * 100)}% of them classic, "
            f"{BASE_SECONDS} s of virtual time) copied with renamed groups to the size shown. "
            "*export*: `kip848 analytics export` (decode every record, write Parquet); *report*: "
            "`kip848 analytics report` in a fresh process: Spark start-up, the jobs writing every "
            "table (incl. both what-ifs; the migration what-if replays every classic group "
            "through the core), the HTML page. Targets: 10^6 rows exported and reported in "
            "<= 60 s on 2 cores, 10^7 rows in <= 120 s, less than x4 from 10^6 to 10^7.\n\n"
            f"{text}\n\n"
            f"1-minute load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the "
            "end; Spark's JIT warm-up and per-stage overhead suffer most from other work on the "
            "machine.\n",
        )
        print("wrote the 'analytics' section of docs/benchmarks.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
