"""Core speed: the pure state machine alone (no gRPC, no store).

* steady-state heartbeat (nothing changes) in a 1,000-member group — target: median <= 20 us;
* the 1,001st member joining a 1,000-member group on 10,000 partitions, target assignment
  (uniform assignor) included — target: <= 50 ms.

Each join is measured on the same state: the shard's undo log rolls the join back afterwards.

    .venv/bin/python bench/core.py [--quick]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._report import machine, table, write_section
from coordinator.core.commands import ConsumerGroupHeartbeat
from coordinator.harness import Harness

GROUP = "bench"


def build(members: int, partitions: int, topics: int) -> tuple[Harness, int, list[str]]:
    """A reconciled group: ``members`` members on ``topics`` topics totalling ``partitions``."""
    h = Harness()
    names = [f"t{i}" for i in range(topics)]
    for name in names:
        h.create_topic(name, partitions // topics)
    ids = [f"member-{i:05d}" for i in range(members)]
    # Spread partitions round-robin, like a balanced uniform target.
    slices: dict[str, dict[str, set[int]]] = {m: {} for m in ids}
    k = 0
    for name in names:
        tid = h.topic_id(name)
        for p in range(partitions // topics):
            slices[ids[k % members]].setdefault(tid, set()).add(p)
            k += 1
    epoch = 10
    h.seed_group(
        GROUP,
        epoch,
        {m: (names, {t: frozenset(ps) for t, ps in a.items()}) for m, a in slices.items()},
    )
    return h, epoch, names


def bench_steady(
    h: Harness, epoch: int, ids: list[str], calls: int, with_owned: bool
) -> list[float]:
    shard = h.shard
    group = shard.groups[GROUP]
    commands = []
    for mid in ids:
        owned = dict(group.members[mid].assigned_partitions) if with_owned else None
        commands.append(
            ConsumerGroupHeartbeat(
                group_id=GROUP, member_id=mid, member_epoch=epoch, topic_partitions=owned
            )
        )
    samples = []
    n = len(commands)
    gc.collect()
    gc.disable()
    try:
        for i in range(calls):
            cmd = commands[i % n]
            t0 = time.perf_counter_ns()
            res = shard.consumer_group_heartbeat(cmd, 1000)
            samples.append((time.perf_counter_ns() - t0) / 1000)
            if res.records:
                raise AssertionError("steady-state heartbeat emitted records")
    finally:
        gc.enable()
    return samples


def bench_join(h: Harness, names: list[str], repeats: int) -> tuple[list[float], int]:
    shard = h.shard
    cmd = ConsumerGroupHeartbeat(
        group_id=GROUP,
        member_id="newcomer",
        member_epoch=0,
        rebalance_timeout_ms=60_000,
        subscribed_topic_names=tuple(names),
        topic_partitions={},
    )
    samples = []
    records = 0
    for _ in range(repeats):
        mark = shard.mark()
        gc.collect()
        t0 = time.perf_counter_ns()
        res = shard.consumer_group_heartbeat(cmd, 1000)
        samples.append((time.perf_counter_ns() - t0) / 1e6)
        records = len(res.records)
        shard.rollback(mark)
    return samples, records


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer iterations")
    ap.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    args = ap.parse_args(argv)
    calls = 20_000 if args.quick else 200_000
    repeats = 5 if args.quick else 21

    h, epoch, names = build(1000, 10_000, 10)
    ids = sorted(h.shard.groups[GROUP].members)
    steady = bench_steady(h, epoch, ids, calls, with_owned=False)
    steady_owned = bench_steady(h, epoch, ids, calls // 4, with_owned=True)
    join, join_records = bench_join(h, names, repeats)

    def pct(xs: list[float], q: float) -> float:
        return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]

    rows = [
        [
            "steady heartbeat, 1,000 members (no owned partitions sent)",
            f"{len(steady):,}",
            f"{statistics.median(steady):.1f} µs",
            f"{pct(steady, 0.99):.1f} µs",
            "median ≤ 20 µs",
        ],
        [
            "steady heartbeat, 1,000 members (owned partitions sent)",
            f"{len(steady_owned):,}",
            f"{statistics.median(steady_owned):.1f} µs",
            f"{pct(steady_owned, 0.99):.1f} µs",
            "—",
        ],
        [
            f"1,001st member joins, 10,000 partitions / 10 topics ({join_records} records)",
            f"{len(join)}",
            f"{statistics.median(join):.1f} ms",
            f"{max(join):.1f} ms (max)",
            "≤ 50 ms",
        ],
    ]
    headers = ["case", "samples", "median", "p99", "target"]
    print(table(headers, rows))
    if not args.no_write:
        write_section(
            "core",
            "## Core state machine (pure, no IO)\n\n"
            f"`.venv/bin/python bench/core.py{' --quick' if args.quick else ''}` — {machine()}\n\n"
            + table(headers, rows)
            + "\n\nThe join is measured on the same state each time (rolled back with the shard's undo log); "
            "it includes validation, member records, subscription metadata, the uniform assignor over "
            "1,001 members, result validation, the target diff and the joiner's reconciliation.",
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
