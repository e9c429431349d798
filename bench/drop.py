"""The event loop's longest stall when a node drops a coordinator partition (lost, or handed
over in a fail-over or a rebalance of the partitions), before and after the dropped state is
freed by reference counting in slices (docs/benchmarks.md, "Dropping a coordinator partition").

    .venv/bin/python bench/drop.py                      # ~6 min; writes docs/benchmarks.md
    .venv/bin/python bench/drop.py --groups 10000 --others 20000 --repeat 1 --no-doc

A SQLite store of 4 coordinator partitions: partition 0 holds ``--groups`` reconciled
``--members``-member groups (bench/load.py's template, re-keyed per group), the three others
``--others`` groups in all. Each run is a fresh process on a server's event loop (uvloop, the
loop's garbage collector: coordinator/server/loop.py) with a runtime sharing the store as a
cluster node does (``share_partitions``); it loads the four partitions, lets the loop settle,
then drops partition 0 (``lose_partition``: its lease ran out, or it is handed over) while a
callback due every millisecond measures the loop: the longest stall is its longest lateness,
until the dropped state is gone (its undo log's weak reference dead: every dict of the state
refers to it) and 0.5 s more (and, *after*, until glibc's ``malloc_trim`` has handed the free
memory back: ``collector.give_back_memory``). Also timed: each garbage collection in that time
(``gc.callbacks``), the resident memory and Python's allocated blocks (``sys.getallocatedblocks``)
before the drop and after it (*after*: also when freed, just before ``malloc_trim``), and the
``malloc_trim`` with the loop's longest stall while it ran (on its own thread).

*before*: the drop as it was (the shard replaced, nothing else; the loop's collector's next
tick unfreezes everything and runs one full collection: ``collector.collect_dropped``; the
timers of the partition purged in one pass over the table); *after*: the shard closed and freed
in slices of the loop (``collector.free_dropped``), the timers purged ``timing.PURGE_KEYS`` keys
a step, then the free memory handed back to the system (``malloc_trim``, off the loop). The
two modes alternate, on the same store.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import shutil
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path
from statistics import median
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))

from bench._report import (  # noqa: E402
    command,
    in_child,
    machine,
    print_child_result,
    table,
    write_section,
)

PARTITIONS = 4
DROPPED = 0
MODES = ("before", "after")
SETTLE_S = 1.0
"""After the loads, before the drop: the loop's collector runs its ticks."""
AFTER_S = 0.5
"""The loop is watched this long after the dropped state is gone."""
TARGET_MS = 50.0
"""The longest stall of the loop a drop may cause (a turn of the loop, not a pause clients'
retries would wait out)."""
LIMIT_S = 30.0
"""The longest a run waits for the dropped state to go."""


def build_store(path: Path, groups: int, others: int, members: int) -> None:
    from bench.load import build
    from coordinator.routing import partition_for
    from coordinator.runtime.store import SqliteRecordStore

    wanted = {
        p: (groups if p == DROPPED else others // (PARTITIONS - 1)) for p in range(PARTITIONS)
    }

    def ids() -> Any:
        made = dict.fromkeys(wanted, 0)
        g = 0
        while made != wanted:
            gid = f"group-{g:07d}"
            g += 1
            p = partition_for(gid, PARTITIONS)
            if made[p] < wanted[p]:
                made[p] += 1
                yield gid

    store = SqliteRecordStore(path, partitions=PARTITIONS, sync="off")
    try:
        build(store, sum(wanted.values()), 0, 200_000, members=members, group_ids=ids())
    finally:
        store.close()


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


async def _run(path: str, mode: str) -> dict[str, Any]:
    from assignors.uniform import UniformAssignor
    from coordinator.core.config import parse_config
    from coordinator.runtime import CoordinatorRuntime, collector, timing
    from coordinator.runtime import partitions as partitions_module
    from coordinator.runtime.store import SqliteRecordStore

    store = SqliteRecordStore(path, partitions=PARTITIONS, sync="off")
    rt = CoordinatorRuntime(
        config=parse_config({"group.coordinator.shards": str(PARTITIONS)}),
        store=store,
        assignors=[UniformAssignor()],
    )
    parts = rt.share_partitions(1)
    await rt.start()
    parts.joined()
    loaded_rss = [_rss_mib()]
    for p in range(PARTITIONS):  # the dropped partition first: its state's resident memory
        await parts.load_partition(p, 1)
        loaded_rss.append(_rss_mib())
    groups = {p: len(rt.shards[p].groups) for p in range(PARTITIONS)}
    await asyncio.sleep(SETTLE_S)
    frozen = gc.get_freeze_count()
    loop = asyncio.get_running_loop()
    freed = asyncio.Event()
    freed_at: list[float] = []

    def on_freed(_ref: Any) -> None:
        freed_at.append(time.perf_counter())
        freed.set()

    gone = weakref.ref(rt.shards[DROPPED].undo, on_freed)
    collections: list[tuple[int, float]] = []
    started: list[float] = []

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append(time.perf_counter())
        elif started:
            collections.append((info["generation"], time.perf_counter() - started.pop()))

    lateness: list[float] = []
    busy: list[float] = []  # the loop thread's CPU time from one tick to the next
    cpu = [time.thread_time()]

    arrived: list[float] = []  # time.monotonic() of each tick (the trim's clock)

    def tick(due: float) -> None:
        now, spent = loop.time(), time.thread_time()
        arrived.append(time.monotonic())
        lateness.append(now - due)
        busy.append(spent - cpu[0])
        cpu[0] = spent
        loop.call_at(now + 0.001, tick, now + 0.001)

    if mode == "before":  # as it was: the shard replaced, the collector told to collect,
        partitions_module._drop = lambda shard, partition: collector.collect_dropped()
        timing.PURGE_KEYS = 2**62  # the timers purged in one pass
        collector.give_back_memory = lambda what: None  # nor any malloc_trim
    trims: list[tuple[float, float, float | None, float]] = []  # start, end, took, RSS at start
    trimmed = threading.Event()
    trim_memory = collector.trim_memory

    def timed_trim() -> float | None:  # on the trimming thread (collector.give_back_memory)
        rss_freed, start = _rss_mib(), time.monotonic()
        took = trim_memory()
        trims.append((start, time.monotonic(), took, rss_freed))
        trimmed.set()
        return took

    collector.trim_memory = timed_trim
    rss, blocks = _rss_mib(), sys.getallocatedblocks()
    handle_due = loop.time() + 0.001
    loop.call_at(handle_due, tick, handle_due)
    await asyncio.sleep(0.05)  # the ticker's own baseline
    base = max(lateness)
    watched = len(lateness)
    gc.callbacks.append(on_gc)
    t0 = time.perf_counter()
    parts.lose_partition(DROPPED)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(freed.wait(), LIMIT_S)
    freed_s = (freed_at[0] if freed_at else time.perf_counter()) - t0
    await asyncio.sleep(AFTER_S)
    if mode == "after":  # the memory handed back (collector.give_back_memory), bounded
        await asyncio.to_thread(trimmed.wait, LIMIT_S)
        await asyncio.sleep(0.05)  # the loop watched past the trim's end
    gc.callbacks.remove(on_gc)
    out = {
        "mode": mode,
        "groups": groups[DROPPED],
        "others": sum(n for p, n in groups.items() if p != DROPPED),
        "objects_frozen": frozen,
        "stall_ms": max(lateness[watched:]) * 1e3,
        "stall_cpu_ms": max(busy[watched:]) * 1e3,
        "baseline_ms": base * 1e3,
        "freed_ms": freed_s * 1e3 if gone() is None else None,
        "collections": collections,
        "rss_partition": loaded_rss[DROPPED + 1] - loaded_rss[DROPPED],
        "rss_before": rss,
        "rss_after": _rss_mib(),
        "trim_ms": None if not trims or trims[0][2] is None else trims[0][2] * 1e3,
        "rss_freed": trims[0][3] if trims else None,
        # The loop's longest lateness among the ticks due while the trim ran (or arriving then).
        "trim_stall_ms": max(
            (
                late * 1e3
                for at, late in zip(arrived, lateness, strict=True)
                if trims and trims[0][0] <= at and at - late <= trims[0][1]
            ),
            default=None,
        ),
        "blocks_freed": blocks - sys.getallocatedblocks(),
    }
    await rt.close()
    store.close()
    return out


def child(path: str, mode: str) -> None:
    print_child_result(_run(path, mode))


def one(path: Path, mode: str) -> dict[str, Any]:
    return in_child(__file__, path, mode, timeout=600)


def row(r: dict[str, Any], load: str) -> list[object]:
    full = [ms for gen, ms in r["collections"] if gen == 2]
    return [
        f"{r['groups']:,}",
        f"{r['others']:,}",
        f"{r['objects_frozen']:,}",
        r["mode"],
        f"{r['stall_ms']:.1f} / {r['stall_cpu_ms']:.1f}",
        "not freed" if r["freed_ms"] is None else f"{r['freed_ms']:.0f}",
        f"{len(r['collections'])} / {len(full)}",
        f"{max(full) * 1e3:.0f}" if full else "—",
        f"{r['rss_partition']:,.0f}",
        " → ".join(
            f"{mib:,.0f}" for mib in (r["rss_before"], r["rss_freed"], r["rss_after"]) if mib
        ),
        "—" if r["trim_ms"] is None else f"{r['trim_ms']:.0f} / {r['trim_stall_ms'] or 0:.0f}",
        f"{r['blocks_freed']:,}",
        load,
        f"≤ {TARGET_MS:.0f} ms",
    ]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--groups", default="10000,100000", help="groups of the dropped partition")
    ap.add_argument("--others", type=int, default=100_000, help="groups of the other partitions")
    ap.add_argument("--members", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--no-doc", action="store_true")
    ap.add_argument("--child", nargs=2, metavar=("STORE", "MODE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(*args.child)
        return
    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    rows: list[list[object]] = []
    results: list[dict[str, Any]] = []
    work = Path(tempfile.mkdtemp(prefix="kip848-bench-drop-"))
    try:
        for n in (int(g) for g in args.groups.split(",")):
            path = work / f"store-{n}"
            build_store(path, n, args.others, args.members)
            for _ in range(args.repeat):
                for mode in MODES:
                    before = os.getloadavg()[0]
                    r = one(path, mode)
                    results.append(r)
                    rows.append(row(r, f"{before:.1f}→{os.getloadavg()[0]:.1f}"))
                    print(rows[-1], flush=True)
            shutil.rmtree(path, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()[0]
    summary = []
    for n in sorted({r["groups"] for r in results}):
        of_n = [r for r in results if r["groups"] == n]
        stall = {m: median(r["stall_ms"] for r in of_n if r["mode"] == m) for m in MODES}
        cpu = {m: median(r["stall_cpu_ms"] for r in of_n if r["mode"] == m) for m in MODES}
        met = "met" if stall["after"] <= TARGET_MS else "not met on the wall clock"
        if stall["after"] > TARGET_MS and cpu["after"] <= TARGET_MS:
            met += ", met in the loop's CPU time"
        summary.append(
            f"* **{n:,} groups dropped: the loop's longest stall {stall['after']:.0f} ms, "
            f"{cpu['after']:.0f} ms of its CPU** (median of {args.repeat}; target ≤ "
            f"{TARGET_MS:.0f} ms: {met}); as before, in the same run: {stall['before']:,.0f} ms, "
            f"{cpu['before']:,.0f} ms of its CPU."
        )
        trimmed = [r for r in of_n if r["mode"] == "after" and r["trim_ms"] is not None]
        if trimmed:
            summary[-1] += (
                " Once freed, `malloc_trim` handed "
                f"{median(r['rss_freed'] - r['rss_after'] for r in trimmed):,.0f} MiB more back "
                f"to the system in {median(r['trim_ms'] for r in trimmed):.0f} ms on its own "
                f"thread, the loop's longest stall meanwhile "
                f"{median(r['trim_stall_ms'] or 0 for r in trimmed):.0f} ms (medians)."
            )
    cmd = command(
        "bench/drop.py",
        (
            ("--groups", args.groups, "10000,100000"),
            ("--others", args.others, 100_000),
            ("--members", args.members, 5),
            ("--repeat", args.repeat, 2),
        ),
    )
    body = (
        f"## Dropping a coordinator partition (`{cmd}`)\n\n"
        f"{machine()}; load average {load_before:.1f} at the start, {load_after:.1f} at the "
        f"end, {time.perf_counter() - started:.0f} s in all (the 2 cores are shared with other "
        "work: the stalls are wall time, rough).\n\n"
        f"A node (a runtime sharing a SQLite store as a cluster node does, on a server's loop: "
        f"uvloop and the loop's garbage collector) serving {PARTITIONS} coordinator partitions "
        f"of reconciled {args.members}-member groups drops one of them (lost or handed over) "
        "while a callback due every millisecond measures the loop, until the dropped state is "
        f"gone and {AFTER_S} s more, each run in a fresh process. *before*: as it was, the "
        "shard replaced, the loop's collector's next tick unfreezing everything for a full "
        "collection, the partition's timers purged in one pass over the table; *after*: the "
        "shard closed and freed by reference counting, 2 ms of the loop at a time "
        "(`collector.free_dropped`), the timers purged 2,048 keys a loop step, then the free "
        "memory handed back to the system (`malloc_trim`, off the loop). *frozen*: "
        "objects the node had frozen when it dropped the partition; *longest stall*: the "
        "ticker's longest lateness (wall) / the loop thread's longest CPU time from one tick "
        "to the next (what the loop itself spent: the machine taking the CPU away does not "
        "count); *freed after*: from the drop until the state's undo log is dead (every dict "
        "of the state refers to it); *collections*: all / full ones in that time, the longest "
        "full one; *partition MiB*: resident memory its load added; *RSS*: before the drop → "
        "(*after*: once freed, before `malloc_trim` →) after; *malloc_trim*: how long glibc's "
        "`malloc_trim(0)` took on its own thread (`collector.give_back_memory`, *after* only) / "
        "the loop's longest stall while it ran; "
        f"*blocks freed*: Python's allocated blocks (`sys.getallocatedblocks`).\n\n"
        + "\n".join(summary)
        + "\n\n"
        + table(
            [
                "groups dropped",
                "groups of the other partitions",
                "frozen",
                "drop",
                "longest stall ms: wall / CPU",
                "freed after ms",
                "collections: all / full",
                "longest full collection ms",
                "partition MiB",
                "RSS MiB",
                "malloc_trim ms / stall ms",
                "blocks freed",
                "load avg",
                "target",
            ],
            rows,
        )
    )
    print()
    print(body)
    if not args.no_doc:
        write_section("drop", body)
        print("wrote the 'drop' section of docs/benchmarks.md")


if __name__ == "__main__":
    main()
