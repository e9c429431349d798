"""The record store on PostgreSQL against SQLite, side by side: the cost of a durable batch,
group commit's throughput, and reading partitions for a load.

    .venv/bin/python bench/store_pg.py                 # ~5 min, writes docs/benchmarks.md
    .venv/bin/python bench/store_pg.py --groups 2000 --seconds 1 --no-doc   # quick look

1. Durable appends: one writer appends batches of 1, 100 and 1,000 offset-commit records (the
   group commit of that many partition-offsets) for ``--seconds`` each: SQLite with
   ``sync="full"`` (an fsync per commit) and PostgreSQL with its defaults (``fsync`` on,
   ``synchronous_commit`` on), a local server started for the run (tests/pg.py) on the same
   disk. Latency percentiles are per ``append``.
2. Reading a load: a store of ``--groups`` groups x 33 records (bench/store.py's groups), in
   50 partitions, read partition by partition as the runtime's loader reads it
   (``loader.read_partition``: rows grouped by group, nothing decoded), on both stores.

The machine is shared: the wall time is what a user would see on it, CPU time of this process
the steadier figure; the load average is recorded.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/pg.py: a PostgreSQL started for the run

from bench._report import machine, table, write_section  # noqa: E402
from bench.store import group_records  # noqa: E402
from coordinator.runtime.loader import read_partition  # noqa: E402
from coordinator.runtime.store import (  # noqa: E402
    PostgresRecordStore,
    SqliteRecordStore,
    StoredRecord,
)

TARGET_OFFSETS_PER_S = 40_000


def offset_records(n: int, rng: random.Random) -> list[StoredRecord]:
    """``n`` OffsetCommit records of 40 groups (key and value as the codec writes them)."""
    out = []
    for i in range(n):
        group = f"group-{i % 40:03d}"
        key = b'[1,"%s","orders-%d",%d]' % (group.encode(), i % 7, i % 64)
        value = b'[0,%d,-1,"",%d,null]' % (rng.randrange(10**9), 1_700_000_000_000 + i)
        out.append(StoredRecord(key, value, group))
    return out


def bench_appends(store: Any, pool: list[StoredRecord], size: int, seconds: float) -> list[Any]:
    latencies: list[float] = []
    pos = 0
    start = time.perf_counter()
    cpu = time.process_time()
    while (now := time.perf_counter()) - start < seconds:
        if pos + size > len(pool):
            pos = 0
        store.append(pool[pos : pos + size], int(time.time() * 1000))
        pos += size
        latencies.append(time.perf_counter() - now)
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu
    n = len(latencies)
    q = statistics.quantiles(latencies, n=100) if n >= 2 else latencies * 99
    return [
        size,
        n,
        f"{n / elapsed:,.0f}",
        f"{n * size / elapsed:,.0f}",
        f"{q[49] * 1e3:.2f}",
        f"{q[98] * 1e3:.2f}",
        f"{cpu / (n * size) * 1e6:.1f}",
    ]


def fill(store: Any, groups: int) -> float:
    rng = random.Random(2)
    t0 = time.perf_counter()
    chunk = 1000
    for first in range(0, groups, chunk):
        batch = [r for g in range(first, min(first + chunk, groups)) for r in group_records(g, rng)]
        store.append(batch, 1_700_000_000_000 + first)
    return time.perf_counter() - t0


def read_all(store: Any) -> tuple[int, int, float, float]:
    gc.collect()
    gc.disable()
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        records = groups = 0
        for p in range(store.partitions):
            image = read_partition(store, p)
            records += image.records
            groups += len(image.groups)
            del image
        return records, groups, time.perf_counter() - wall, time.process_time() - cpu
    finally:
        gc.enable()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--groups", type=int, default=100_000)
    ap.add_argument("--seconds", type=float, default=3.0, help="per append measurement")
    ap.add_argument("--no-doc", action="store_true")
    args = ap.parse_args(argv)
    from pg import PostgresServer

    load_before = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="kip848-bench-pg-"))
    server = PostgresServer(fsync=True).start()
    try:
        pool = offset_records(50_000, random.Random(1))
        rows = []
        for name, make in (
            ("SQLite, sync=full", lambda: SqliteRecordStore(work / "append", sync="full")),
            ("PostgreSQL, fsync on", lambda: PostgresRecordStore(server.fresh_store_dsn())),
        ):
            for size in (1, 100, 1000, 5000):
                store = make()
                rows.append([name, *bench_appends(store, pool, size, args.seconds)])
                store.close()
                shutil.rmtree(work / "append", ignore_errors=True)
                print(rows[-1], flush=True)
        appends = table(
            [
                "store",
                "records/batch",
                "batches",
                "batches/s",
                "records/s",
                "p50 ms",
                "p99 ms",
                "client CPU µs/record",
            ],
            rows,
        )
        loads = []
        for name, make in (
            ("SQLite", lambda: SqliteRecordStore(work / "load", sync="off")),
            ("PostgreSQL", lambda: PostgresRecordStore(server.fresh_store_dsn())),
        ):
            store = make()
            built = fill(store, args.groups)
            records, groups, wall, cpu = read_all(store)
            store.close()
            loads.append(
                [
                    name,
                    f"{groups:,}",
                    f"{records:,}",
                    f"{built:.1f}",
                    f"{wall:.2f}",
                    f"{cpu:.2f}",
                    f"{records / wall:,.0f}",
                ]
            )
            print(loads[-1], flush=True)
        reads = table(
            [
                "store",
                "groups",
                "records",
                "build s",
                "read all partitions: wall s",
                "CPU s",
                "records/s (wall)",
            ],
            loads,
        )
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()[0]
    best_pg = max(float(str(r[4]).replace(",", "")) for r in rows if r[0].startswith("PostgreSQL"))
    best_size = max(
        (r for r in rows if r[0].startswith("PostgreSQL")),
        key=lambda r: float(str(r[4]).replace(",", "")),
    )[1]
    verdict = "met" if best_pg >= TARGET_OFFSETS_PER_S else "not met"
    body = (
        f"## Record store: PostgreSQL and SQLite (`python bench/store_pg.py`)\n\n"
        f"{machine()}; PostgreSQL {server.bin.parent.name} started for the run on the same disk "
        f"(fsync on). Load average {load_before:.1f} at the start, {load_after:.1f} at the end "
        "(the machine is shared: wall times are rough, CPU time of this process steadier).\n\n"
        "Durable appends of offset-commit records, one writer, one `append` per batch (a batch "
        "of N records is the group commit of N partition-offsets):\n\n"
        f"{appends}\n\n"
        f"Group commit on PostgreSQL: {best_pg:,.0f} committed partition-offsets/s at "
        f"{best_size:,} records a batch (the runtime's batches grow with the load; target ≥ "
        f"{TARGET_OFFSETS_PER_S:,}/s on one node: {verdict}).\n\n"
        "Reading a load: every partition's compacted view, grouped by group, not decoded "
        "(`loader.read_partition`): the store's part of a load. The whole load, reading and "
        'building the groups, is "Loading the store" (`bench/load.py`).\n\n'
        f"{reads}\n"
    )
    print(body)
    if not args.no_doc:
        write_section("store-pg", body)


if __name__ == "__main__":
    main()
