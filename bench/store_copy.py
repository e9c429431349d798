"""``kip848 store copy``: how long a one-node SQLite store takes to copy into PostgreSQL (the
coordinator is down meanwhile: the copy is offline), beside what follows it anyway — a node's
load of the same records (``kip848 replay``: the store read and every group rebuilt, as a node
loads its partitions), from the copy and from the SQLite store — measured in the same run; then
the way back (``--to sqlite``: the PostgreSQL copy into a new SQLite store).

    .venv/bin/python bench/store_copy.py                 # 10^5 and 10^6 records, docs/benchmarks.md
    .venv/bin/python bench/store_copy.py --sizes 100000 --no-doc

Stores: the analytics benchmark's (bench/analytics.py: the workload generator's store, then
copies of it with renamed groups, cached under ``--work``). PostgreSQL: a server of the tests'
(tests/pg.py) with fsync on, on this machine. Target: 10^6 records copied in <= 60 s on the
2-core machine (an operator's maintenance window for moving one node to several), and the same
for the way back.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from bench._report import machine, table, write_section  # noqa: E402
from bench.analytics import base_store, scaled_store  # noqa: E402

SIZES = (100_000, 1_000_000)
TARGET_S = {1_000_000: 60.0}


def _replay(*where: str) -> float:
    """Wall seconds of ``kip848 replay`` in a fresh process (start-up included)."""
    t = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-m", "coordinator.cli", "replay", *where, "--output", "json"],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if p.returncode != 0:
        raise SystemExit(f"replay failed: {p.stderr}")
    return time.perf_counter() - t


def measure(store_dir: Path, dsn: str, work: Path) -> list[object]:
    from coordinator.runtime.store import SqliteRecordStore
    from coordinator.runtime.store.postgres_copy import copy_to_postgres
    from coordinator.runtime.store.sqlite_copy import copy_to_sqlite

    with SqliteRecordStore.in_data_dir(store_dir) as src:
        wall, cpu = time.perf_counter(), time.process_time()
        result = copy_to_postgres(src, dsn)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    records = result.journal_entries + result.compacted_records
    replay_pg = _replay("--store", dsn)
    replay_sqlite = _replay("--data-dir", str(store_dir))
    back = Path(tempfile.mkdtemp(prefix="copy-back-", dir=work))
    try:
        back_wall = time.perf_counter()
        returned = copy_to_sqlite(dsn, back)
        back_wall = time.perf_counter() - back_wall
        if (returned.journal_entries, returned.compacted_records) != (
            result.journal_entries,
            result.compacted_records,
        ):
            raise SystemExit(f"the copy back holds other records: {returned} vs {result}")
        replay_back = _replay("--data-dir", str(back))
    finally:
        shutil.rmtree(back)
    return [
        f"{result.journal_entries:,}",
        f"{result.compacted_records:,}",
        f"{wall:.1f}",
        f"{cpu:.1f}",
        f"{records / wall:,.0f}",
        f"{replay_pg:.1f}",
        f"{replay_sqlite:.1f}",
        f"{wall + replay_pg:.1f}",
        f"{back_wall:.1f}",
        f"{back_wall + replay_back:.1f}",
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    ap.add_argument("--work", type=Path, default=Path("/tmp/kip848-bench-analytics"))
    ap.add_argument("--no-doc", action="store_true")
    args = ap.parse_args()
    from pg import PostgresServer

    args.work.mkdir(parents=True, exist_ok=True)
    base = base_store(args.work)
    stores = {size: scaled_store(args.work, base, size) for size in args.sizes}
    load_before = os.getloadavg()[0]
    server = PostgresServer(fsync=True).start()
    rows, verdicts = [], []
    try:
        for size, store_dir in stores.items():
            row = measure(store_dir, server.fresh_store_dsn(), args.work)
            rows.append([f"{size:,}", *row])
            print(rows[-1], flush=True)
            if size in TARGET_S:
                seconds, back_s = float(str(row[2])), float(str(row[8]))
                verdicts.append(
                    f"* {size:,} records: copied in {seconds:.1f} s (target <= "
                    f"{TARGET_S[size]:.0f} s: {'yes' if seconds <= TARGET_S[size] else 'no'}); "
                    f"with the first node's load of the copy, {row[7]} s of downtime, against "
                    f"{row[6]} s for the one node's own load of its SQLite store. Copied back "
                    f"(`--to sqlite`) in {back_s:.1f} s (target <= {TARGET_S[size]:.0f} s: "
                    f"{'yes' if back_s <= TARGET_S[size] else 'no'}); with the one node's load "
                    f"of it, {row[9]} s of downtime."
                )
    finally:
        server.stop()
    body = "\n".join(
        [
            f"`.venv/bin/python bench/store_copy.py` — {machine()}; load average "
            f"{load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end.",
            "",
            "A one-node SQLite store (the analytics benchmark's: the workload generator's store "
            "and copies of it with renamed groups) copied into a new PostgreSQL store (fsync on) "
            "by `kip848 store copy`'s code in this process (*copy s*: wall, *CPU s*: this "
            "process), then *replay* (`kip848 replay` in a fresh process: the store read and "
            "every group rebuilt, as a node loads its partitions) of the copy and, its peer, of "
            "the SQLite store. *downtime*: the copy and the first load from PostgreSQL. *back s*: "
            "the PostgreSQL copy copied back into a new SQLite store (`--to sqlite`, every node "
            "stopped), *back downtime*: that and the one node's load of it (`kip848 replay`).",
            "",
            table(
                [
                    "target size",
                    "journal entries",
                    "compacted records",
                    "copy s",
                    "CPU s",
                    "records/s",
                    "replay from PostgreSQL s",
                    "replay from SQLite s",
                    "downtime s",
                    "back s",
                    "back downtime s",
                ],
                rows,
            ),
            "",
            *verdicts,
        ]
    )
    print(body)
    if not args.no_doc:
        write_section("store-copy", "## Store copy: one node to several and back\n\n" + body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
