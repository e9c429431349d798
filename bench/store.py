"""Record store benchmark: durable batches per second, and load time of a large store.

    .venv/bin/python -m bench.store                  # full run (~2 min), writes docs/benchmarks.md
    .venv/bin/python -m bench.store --groups 2000 --no-doc   # quick look

1. Durable appends: one writer appends batches of 1 and of 100 records for ``--seconds`` each,
   with ``sync="full"`` (fsync per commit: the production setting) and ``"normal"`` for
   comparison. Latency percentiles are per ``append`` call.
2. Load: a store of ``--groups`` groups x 33 records (like a KIP-848 group of 10 members: group
   epoch, subscription metadata, target epoch, and per member metadata + target + current
   assignment; keys ~40 bytes, values 60-200 bytes) is built with ``sync="off"`` in big batches
   (bench fixture only), closed, reopened, then read through ``load()`` (the compacted view,
   building every ``StoredRecord``), first after evicting the file from the page cache
   (``posix_fadvise DONTNEED``: a start after a reboot), then again warm; then ``journal()``.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._report import machine, table, write_section
from coordinator.runtime.store import SqliteRecordStore, StoredRecord, log_ids

MEMBERS_PER_GROUP = 10
RECORDS_PER_GROUP = 3 + 3 * MEMBERS_PER_GROUP  # 33


def group_records(g: int, rng: random.Random) -> Iterator[StoredRecord]:
    group = f"group-{g:06d}"
    gkey = group.encode()

    def value() -> bytes:
        return rng.randbytes(rng.randint(60, 200))

    for rtype in (3, 4, 6):
        yield StoredRecord(b'[%d,"%s"]' % (rtype, gkey), value(), group)
    for _m in range(MEMBERS_PER_GROUP):
        member = b"%s-m%016x" % (gkey[-6:], rng.getrandbits(64))
        for rtype in (5, 7, 8):
            yield StoredRecord(b'[%d,"%s","%s"]' % (rtype, gkey, member), value(), group)


def bench_appends(
    workdir: Path, pool: list[StoredRecord], sync: str, size: int, seconds: float
) -> list[object]:
    """Batches are slices of a pre-built pool, so the loop measures the store, not the
    record generator (keys repeat once the pool is used up: upserts, as in real life)."""
    directory = workdir / f"append-{sync}-{size}"
    latencies: list[float] = []
    with SqliteRecordStore(directory, sync=sync) as store:  # type: ignore[arg-type]
        pos = 0
        start = time.perf_counter()
        while (now := time.perf_counter()) - start < seconds:
            if pos + size > len(pool):
                pos = 0
            batch = pool[pos : pos + size]
            pos += size
            store.append(batch, int(time.time() * 1000))
            latencies.append(time.perf_counter() - now)
        elapsed = now - start
    shutil.rmtree(directory)
    n = len(latencies)
    q = statistics.quantiles(latencies, n=100) if n >= 2 else latencies * 99
    return [
        sync,
        size,
        n,
        f"{n / elapsed:,.0f}",
        f"{n * size / elapsed:,.0f}",
        f"{q[49] * 1e3:.2f}",
        f"{q[98] * 1e3:.2f}",
    ]


def build_fixture(directory: Path, groups: int) -> float:
    rng = random.Random(2)
    t0 = time.perf_counter()
    with SqliteRecordStore(directory, sync="off") as store:
        chunk = 1000  # groups per append: 33,000 records per transaction
        for first in range(0, groups, chunk):
            batch = [
                r for g in range(first, min(first + chunk, groups)) for r in group_records(g, rng)
            ]
            store.append(batch, 1_700_000_000_000 + first)
    return time.perf_counter() - t0


def timed(f: Callable[[], object]) -> tuple[object, float, float]:
    """(result, wall seconds, CPU seconds of this process): CPU time shows the cost when
    other work shares the machine."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = f()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def drop_from_page_cache(directory: Path) -> bool:
    """Evict the store file from the OS page cache (clean pages; no root needed), so the next
    load reads the disk like a coordinator starting after a reboot. False if unsupported."""
    if not hasattr(os, "posix_fadvise"):
        return False
    fd = os.open(directory / "coordinator.db", os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return True


def bench_load(directory: Path) -> dict[str, Any]:
    cold = drop_from_page_cache(directory)
    store, t_open, _ = timed(lambda: SqliteRecordStore(directory))
    assert isinstance(store, SqliteRecordStore)
    runs = {}
    for name in ("cold", "warm") if cold else ("warm",):
        runs[name] = timed(
            lambda: sum(1 for log in log_ids(store.partitions) for _ in store.load(log))
        )
    journal = timed(lambda: sum(1 for log in log_ids(store.partitions) for _ in store.journal(log)))
    stats = store.stats()
    store.close()
    return {
        "open": t_open,
        "runs": runs,
        "journal": journal,
        "file_mb": stats["file_bytes"] / 1e6,
        "value_mb": stats["compacted_value_bytes"] / 1e6,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--groups", type=int, default=100_000)
    ap.add_argument("--seconds", type=float, default=3.0, help="per append measurement")
    ap.add_argument("--dir", type=Path, help="work directory (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep and reuse the load fixture in --dir")
    ap.add_argument("--no-doc", action="store_true", help="do not write docs/benchmarks.md")
    args = ap.parse_args(argv)
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="kip848-bench-store-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        rng = random.Random(1)
        pool = [r for g in range(20_000) for r in group_records(g, rng)]  # 660k records
        rows = [
            bench_appends(workdir, pool, sync, size, args.seconds)
            for sync in ("full", "normal")
            for size in (1, 100)
        ]
        appends = table(
            ["sync", "records/batch", "batches", "batches/s", "records/s", "p50 ms", "p99 ms"],
            rows,
        )
        print(appends, "\n", flush=True)
        del pool

        fixture = workdir / f"load-{args.groups}"
        if args.keep and (fixture / "coordinator.db").exists():
            t_build = float("nan")
        else:
            shutil.rmtree(fixture, ignore_errors=True)
            t_build = build_fixture(fixture, args.groups)
        r = bench_load(fixture)
        if not args.keep:
            shutil.rmtree(fixture)
        load_rows: list[list[object]] = [
            ["build fixture (sync off, 33k records/batch)", f"{t_build:.1f}", "", "", ""],
            ["open (schema check, last offset)", f"{r['open']:.3f}", "", "", ""],
        ]
        for name, (n, wall, cpu) in r["runs"].items():
            cache = "page cache dropped first" if name == "cold" else "file in page cache"
            load_rows.append(
                [
                    f"`load()` {name}: compacted view as `StoredRecord`s",
                    f"{wall:.2f}",
                    f"{cpu:.2f}",
                    f"{n / wall:,.0f}",
                    f"{n:,} records, {r['value_mb']:.0f} MB of values; {cache}",
                ]
            )
        n, wall, cpu = r["journal"]
        load_rows.append(
            [
                "`journal()`: full scan as `JournalEntry`s",
                f"{wall:.2f}",
                f"{cpu:.2f}",
                f"{n / wall:,.0f}",
                f"{n:,} entries",
            ]
        )
        load = table(["step", "wall s", "CPU s", "records/s (wall)", "notes"], load_rows)
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        summary = (
            f"{args.groups:,} groups x {RECORDS_PER_GROUP} records; store file "
            f"{r['file_mb']:,.0f} MB (journal + compacted view); peak RSS {peak_mb:,.0f} MB; "
            f"load average {os.getloadavg()[0]:.1f} at the end (CPU s = this process's CPU "
            "time, the stable number when other work shares the machine)"
        )
        print(load, "\n", summary, sep="\n")
    finally:
        if args.dir is None and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    if not args.no_doc:
        cmd = "python -m bench.store" + (
            "" if args.groups == 100_000 else f" --groups {args.groups}"
        )
        write_section(
            "store",
            f"## Record store (SQLite)\n\n`{cmd}` on {machine()}.\n\n"
            "Durable appends (one writer thread, one `append` per batch):\n\n"
            f"{appends}\n\nLoading:\n\n{load}\n\n{summary}.\n",
        )


if __name__ == "__main__":
    main()
