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
timed, beside its peer: the same workload without classic groups (the consumer-only report),
measured right after it. Targets (issue 31): 10^6 rows exported and reported in <= 60 s on
the 2-core machine, 10^7 rows in <= 120 s, and less than x4 from 10^6 to 10^7.
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
"""The measured workload's share of classic groups; its peer, measured beside it at each size
in the same run, has none (the consumer-only report)."""
WORKLOADS = (CLASSIC_FRACTION, 0.0)
TARGETS = {1_000_000: 60.0, 10_000_000: 120.0}
GROWTH_TARGET = 4.0


def _name(fraction: float) -> str:
    return f"classic{round(fraction * 100)}"


def base_store(work: Path, fraction: float = CLASSIC_FRACTION) -> Path:
    from coordinator.analytics.workload import WorkloadOptions, generate

    path = work / f"base-{_name(fraction)}"
    if not (path / "coordinator.db").exists():
        t = time.perf_counter()
        opts = WorkloadOptions(
            seed=11,
            groups=BASE_GROUPS,
            duration_s=BASE_SECONDS,
            classic_fraction=fraction,
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

    path = work / f"rows-{rows}-{base.name.removeprefix('base-')}"
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
        "r = run_report(sys.argv[1], sys.argv[2]); "
        "print(json.dumps({**r.stages, 'whatif': r.table_seconds['migration_whatif']}))"
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


def measure(work: Path, base: Path, size: int) -> dict[str, Any]:
    """Export and report of ``size`` rows of copies of ``base``: the figures of one row."""
    from coordinator.analytics.export import export_journal

    store = scaled_store(work, base, size)
    name = f"{size}-{base.name.removeprefix('base-')}"
    parquet = work / f"journal-{name}.parquet"
    t = time.perf_counter()
    exp = export_journal(store, parquet)
    export_s = time.perf_counter() - t
    classic, groups = classic_share(parquet)
    stages = run_report(parquet, work / f"report-{name}")
    jobs = stages["read"] + stages["compute"] + stages["tables"]
    r = {
        "size": size,
        "rows": exp.info.rows,
        "classic": classic,
        "groups": groups,
        "whatif_s": stages["whatif"],
        "export_s": export_s,
        "mb": parquet.stat().st_size / 1e6,
        "spark_s": stages["spark start"],
        "jobs_s": jobs,
        "html_s": stages["html data"] + stages["html render"],
        "report_s": stages["process"],
        "total_s": export_s + stages["process"],
        "load": os.getloadavg()[0],
    }
    print(
        f"{r['rows']:>10,} rows, {classic}/{groups} classic: export {export_s:.1f} s, report "
        f"{r['report_s']:.1f} s (spark start {r['spark_s']:.1f}, jobs {jobs:.1f}, html "
        f"{r['html_s']:.1f}), load {r['load']:.1f}",
        file=sys.stderr,
    )
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    ap.add_argument("--work", default="/tmp/kip848-bench-analytics")
    ap.add_argument("--no-peer", action="store_true", help="only the workload with classic groups")
    ap.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    bases = [base_store(work, f) for f in (WORKLOADS[:1] if args.no_peer else WORKLOADS)]
    for size in args.sizes:  # every store first: their making is not measured
        for base in bases:
            scaled_store(work, base, size)
    load0 = os.getloadavg()[0]
    results: dict[float, list[dict[str, Any]]] = {}
    for size in args.sizes:  # each size's workload and its peer one after the other
        for fraction, base in zip(WORKLOADS, bases, strict=False):
            results.setdefault(fraction, []).append(measure(work, base, size))
    load1 = os.getloadavg()[0]
    peers = {r["size"]: r for r in results.get(0.0, [])}
    rows = []
    for fraction, rs in results.items():
        for prev, r in zip([None, *rs], rs, strict=False):
            target = TARGETS.get(r["size"])
            peer = peers.get(r["size"]) if fraction else None
            growth = "" if prev is None else f"{r['total_s'] / prev['total_s']:.1f}x"
            if prev is not None and fraction and (prev["size"], r["size"]) == SIZES[1:]:
                growth += f" (target < {GROWTH_TARGET:.0f}x)"
            rows.append(
                (
                    "consumer only (peer)" if not fraction else f"{_name(fraction)}",
                    f"{r['rows']:,}",
                    f"{r['groups']:,} ({100 * r['classic'] / r['groups']:.0f}% classic)",
                    f"{r['export_s']:.1f}",
                    f"{r['rows'] / r['export_s']:,.0f}",
                    f"{r['mb']:.1f}",
                    f"{r['spark_s']:.1f}",
                    f"{r['jobs_s']:.1f}",
                    f"{r['whatif_s']:.1f}",
                    f"{r['html_s']:.1f}",
                    f"{r['report_s']:.1f}",
                    f"**{r['total_s']:.1f}**",
                    f"<= {target:.0f}" if target and fraction else "",
                    f"{peer['total_s']:.1f}" if peer else "",
                    growth,
                    f"{r['load']:.1f}",
                )
            )
    text = table(
        (
            "workload",
            "journal rows",
            "groups",
            "export s",
            "export rows/s",
            "Parquet MB",
            "Spark start s",
            "Spark jobs s",
            "migration what-if job s (overlaps)",
            "HTML s",
            "report s (process)",
            "export + report s",
            "target s",
            "peer: consumer only s",
            "vs the size before",
            "load after",
        ),
        rows,
    )
    print(text)
    if not args.no_write:
        write_section(
            "analytics",
            "## Analytics: journal export and Spark report (`python bench/analytics.py`)\n\n"
            f"{machine()}; `local[*]`. Stores: the workload generator's base store "
            f"({BASE_GROUPS} groups, `--classic-fraction {CLASSIC_FRACTION}`, {BASE_SECONDS} s "
            "of virtual time) copied with renamed groups to the size shown; its peer, measured "
            "right after it at each size, is the same workload without classic groups (the "
            "consumer-only report). *export*: `kip848 analytics export` (decode every record, "
            "write Parquet); *report*: `kip848 analytics report` in a fresh process: Spark "
            "start-up, the jobs computing and writing every table (incl. both what-ifs; the "
            "migration what-if replays every classic group through the core; the jobs run side "
            "by side from several threads, so the what-if job's own time overlaps the others), "
            "the HTML page (its data: small Spark jobs over the written tables; its render: "
            "matplotlib). Targets (issue 31): "
            "10^6 rows with classic groups exported and reported in <= 60 s on 2 cores, 10^7 rows "
            "in <= 120 s, less than x4 from 10^6 to 10^7.\n\n"
            f"{text}\n\n"
            f"1-minute load average {load0:.1f} at the start, {load1:.1f} at the end (*load "
            "after*: after each row). The machine's 2 cores are shared with other work; Spark's "
            "JIT warm-up and per-stage overhead suffer most from it.\n",
        )
        print("wrote the 'analytics' section of docs/benchmarks.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
