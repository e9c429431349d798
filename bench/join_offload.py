"""``bench/join.py --offload`` (section ``join-offload``): target assignments computed in real
worker processes (the workers running their own garbage collector and, as the peer,
CPython's), and a small change to a big group computed inline beside offloaded (see
bench/join.py's docstring)."""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import pickle
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from multiprocessing.reduction import ForkingPickler

from assignors.uniform import UniformAssignor
from bench._racks import rack_of_member
from bench._report import machine, table, write_section
from bench.join import (
    GROUP,
    INLINE,
    OFFLOADED,
    SIZES,
    TOPICS,
    Sample,
    build,
    joiner,
)
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.target_assignment import run_job
from coordinator.harness import Harness
from coordinator.runtime.offload import AssignorPool, _Carrier, _work

DEFAULTS = GroupCoordinatorConfig(consumer_assignment_interval_ms=0)
"""Offloading on, a small change of an incremental assignor's group computed inline."""
CHANGES = (1, 4, 14, 24, 32, 64)
"""Members joining in one batched computation (``join-offload``'s table of changes)."""


_COLLECTIONS: list[float] = []
"""In a worker: the duration (ms) of each collection since the last look."""
_STARTED = [0.0]


def _count_collections(phase: str, _info: Mapping[str, int]) -> None:
    if phase == "start":
        _STARTED[0] = time.perf_counter()
    else:
        _COLLECTIONS.append((time.perf_counter() - _STARTED[0]) * 1000)


@dataclass(frozen=True, slots=True)
class WorkerSample:
    """One job in a worker: wall and CPU ms to the answer's bytes, the collections during it
    (count, ms), those right after it (count, ms), the worker's tracked objects and RSS (MiB)
    after them."""

    wall_ms: float
    cpu_ms: float
    during: int
    during_ms: float
    after: int
    after_ms: float
    objects: int
    rss_mib: float


def _timed_job(payload: bytes) -> WorkerSample:
    """In a worker of the pool: one job from its pickled bytes to its answer's, as the pool runs
    it (the carrier dropped after the answer, which runs the worker's own collection if it has
    one)."""
    if _count_collections not in gc.callbacks:
        gc.callbacks.append(_count_collections)
    _COLLECTIONS.clear()
    cpu, wall = time.process_time(), time.perf_counter()
    carrier = _Carrier(pickle.loads(payload))
    answer = pickle.dumps(_work(carrier), pickle.HIGHEST_PROTOCOL)
    w, c = time.perf_counter() - wall, time.process_time() - cpu
    during = list(_COLLECTIONS)
    _COLLECTIONS.clear()
    del carrier, answer
    after = list(_COLLECTIONS)
    with open("/proc/self/statm") as statm:
        rss = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    return WorkerSample(
        w * 1000,
        c * 1000,
        len(during),
        sum(during),
        len(after),
        sum(after),
        len(gc.get_objects()),
        rss,
    )


def offload_payloads(topics: int, racked: bool) -> tuple[bytes, bytes]:
    """The pickled jobs of a 10,000-member group on 100,000 partitions: an offloaded join to
    the settled group, and the whole computation of the same group fresh (no member has a
    target, no summary)."""
    members, partitions = SIZES[-1]
    h, _timed, names = build(members, partitions, topics, racked)
    h.shard.context.config = OFFLOADED
    join_cmd = joiner(names, racked)
    res = h.shard.consumer_group_heartbeat(join_cmd, 1000)
    join = h.shard.groups.assignment_job(GROUP)
    if res.offloads != [GROUP] or join is None or join.summary is None:
        raise AssertionError("the join did not offload an incremental computation")
    fresh = replace(
        join, members=tuple(replace(m, assignment={}) for m in join.members), summary=None
    )
    return pickle.dumps(join, pickle.HIGHEST_PROTOCOL), pickle.dumps(fresh, pickle.HIGHEST_PROTOCOL)


@dataclass(frozen=True, slots=True)
class EndToEnd:
    """One join to the big group until its target is installed. Offloaded: the join command,
    copying the job, pickling it (as the pool's feeder thread does), the pool's round trip and
    applying the outcome; inline: the join command alone (the target installed in it)."""

    command: Sample
    copy: Sample | None = None
    pickle: Sample | None = None
    pool: Sample | None = None
    apply: Sample | None = None
    total: Sample | None = None
    total_cpu: list[float] = field(default_factory=list)
    job_bytes: int = 0


async def join_end_to_end(
    h: Harness, names: list[str], racked: bool, pool: AssignorPool, offloaded: bool, repeats: int
) -> EndToEnd:
    """A join to the settled group (rolled back after each sample), its target computed inline
    (the default: a small change, an incremental assignor) or offloaded to ``pool``."""
    shard = h.shard
    group = shard.groups[GROUP]
    epoch = group.group_epoch
    shard.context.config = OFFLOADED if offloaded else DEFAULTS
    cmd = joiner(names, racked)
    parts: dict[str, tuple[list[float], list[float]]] = {
        k: ([], []) for k in ("command", "copy", "pickle", "pool", "apply", "total")
    }
    size = 0

    def timed(name: str, wall: float, cpu: float, keep: bool) -> None:
        if keep:
            parts[name][0].append(wall * 1000)
            parts[name][1].append(cpu * 1000)

    try:
        for i in range(repeats + 1):  # the first is a warm-up
            mark = shard.mark()
            gc.collect()
            cpu0, wall0 = time.process_time(), time.perf_counter()
            res = shard.consumer_group_heartbeat(cmd, 1000)
            cpu1, wall1 = time.process_time(), time.perf_counter()
            timed("command", wall1 - wall0, cpu1 - cpu0, i > 0)
            if not offloaded:
                if res.offloads or group.assignment_epoch != epoch + 1:
                    raise AssertionError("the small change was not computed inline")
                timed("total", wall1 - wall0, cpu1 - cpu0, i > 0)
                shard.rollback(mark)
                continue
            job = shard.groups.assignment_job(GROUP)
            cpu2, wall2 = time.process_time(), time.perf_counter()
            if res.offloads != [GROUP] or job is None:
                raise AssertionError("the join did not offload the computation")
            timed("copy", wall2 - wall1, cpu2 - cpu1, i > 0)
            outcome = await pool.run(job)
            cpu3, wall3 = time.process_time(), time.perf_counter()
            timed("pool", wall3 - wall2, cpu3 - cpu2, i > 0)
            shard.groups.apply_assignment(outcome, 1000)
            cpu4, wall4 = time.process_time(), time.perf_counter()
            if group.assignment_epoch != epoch + 1:
                raise AssertionError(f"the offloaded outcome was not applied: {outcome.error}")
            timed("apply", wall4 - wall3, cpu4 - cpu3, i > 0)
            timed("total", wall4 - wall0, cpu4 - cpu0, i > 0)
            # What the pool's feeder thread does with the job (in the timings above too).
            cpu5, wall5 = time.process_time(), time.perf_counter()
            size = len(ForkingPickler.dumps(_Carrier(job)))
            timed("pickle", time.perf_counter() - wall5, time.process_time() - cpu5, i > 0)
            shard.rollback(mark)
    finally:
        shard.context.config = INLINE

    def sample(name: str) -> Sample | None:
        wall, cpu = parts[name]
        return Sample(wall, cpu) if wall else None

    command = sample("command")
    assert command is not None
    return EndToEnd(
        command,
        sample("copy"),
        sample("pickle"),
        sample("pool"),
        sample("apply"),
        sample("total"),
        job_bytes=size,
    )


@dataclass(frozen=True, slots=True)
class Batch:
    """A batch of joins computed in one target: the members changed since the last computation
    (``spec_dirty``, the joiners and those the last target changed), the target records, the
    loop's time (inline: the command that computes it; offloaded: that command, copying the job
    and applying the outcome) and, offloaded, pickling the job (the pool's feeder thread)."""

    dirty: int
    records: int
    loop: Sample
    pickle: Sample | None


def batched_changes(
    h: Harness, names: list[str], racked: bool, changes: int, offloaded: bool, repeats: int
) -> Batch:
    """``changes`` members join within one assignment interval (1 s; the first ``changes - 1``
    wait for it), the last one's heartbeat computes the target, inline or offloaded (the job
    run in this process, untimed)."""
    shard = h.shard
    group = shard.groups[GROUP]
    warm = GroupCoordinatorConfig(
        consumer_assignment_interval_ms=1000,
        consumer_assignor_offload_inline_max_changed_members=10**6,
    )
    batched = replace(
        warm, consumer_assignor_offload_inline_max_changed_members=0 if offloaded else 10**6
    )
    cmds = [
        replace(
            joiner(names, racked),
            member_id=f"member-new-{i:05d}",
            rack_id=rack_of_member(f"member-new-{i:05d}") if racked else None,
        )
        for i in range(changes + 1)
    ]
    walls: list[float] = []
    cpus: list[float] = []
    job_walls: list[float] = []
    job_cpus: list[float] = []
    dirty = records = 0
    try:
        for i in range(repeats + 1):
            mark = shard.mark()
            shard.context.config = warm
            shard.consumer_group_heartbeat(cmds[-1], 1000)  # computed inline, stamped 1000
            shard.context.config = batched
            for cmd in cmds[: changes - 1]:
                shard.consumer_group_heartbeat(cmd, 1500)  # within the interval: waits
            dirty = len(group.spec_dirty) + 1
            gc.collect()
            epoch = group.assignment_epoch
            cpu, wall = time.process_time(), time.perf_counter()
            res = shard.consumer_group_heartbeat(cmds[changes - 1], 2000)
            w, c = time.perf_counter() - wall, time.process_time() - cpu
            records = len(res.records)
            if offloaded:
                cpu, wall = time.process_time(), time.perf_counter()
                job = shard.groups.assignment_job(GROUP)
                w, c = w + time.perf_counter() - wall, c + time.process_time() - cpu
                if res.offloads != [GROUP] or job is None:
                    raise AssertionError("the batch was not offloaded")
                cpu, wall = time.process_time(), time.perf_counter()
                ForkingPickler.dumps(_Carrier(job))
                job_walls.append((time.perf_counter() - wall) * 1000)
                job_cpus.append((time.process_time() - cpu) * 1000)
                outcome = run_job(job, UniformAssignor())
                cpu, wall = time.process_time(), time.perf_counter()
                applied = shard.groups.apply_assignment(outcome, 2000)
                w, c = w + time.perf_counter() - wall, c + time.process_time() - cpu
                records += len(applied.records)
            if group.assignment_epoch == epoch or bool(res.offloads) != offloaded:
                raise AssertionError(f"the batch was not computed {'offloaded' * offloaded}")
            shard.rollback(mark)
            if i:
                walls.append(w * 1000)
                cpus.append(c * 1000)
    finally:
        shard.context.config = INLINE
    pickled = Sample(job_walls[1:], job_cpus[1:]) if offloaded else None
    return Batch(dirty, records, Sample(walls, cpus), pickled)


def worker_cell(samples: list[WorkerSample]) -> str:
    return Sample([s.wall_ms for s in samples], [s.cpu_ms for s in samples]).cell()


async def main_offload(args: argparse.Namespace, repeats: int) -> int:
    """Offloaded jobs in real worker processes, the workers' own collector beside CPython's."""
    load_start = os.getloadavg()[0]
    started = time.perf_counter()
    cases = [
        (topics, racked, kind, payload)
        for topics in TOPICS
        for racked in (False, True)
        for kind, payload in zip(
            ("join", "fresh group"), offload_payloads(topics, racked), strict=True
        )
    ]
    gc.collect()
    loop = asyncio.get_running_loop()
    results: dict[bool, list[list[WorkerSample]]] = {True: [], False: []}
    pools = {own: AssignorPool(["uniform"], processes=1, own_collector=own) for own in results}
    try:
        for pool in pools.values():
            await pool.start()
        for topics, racked, kind, payload in cases:
            runs: dict[bool, list[WorkerSample]] = {True: [], False: []}
            for _ in range(repeats + 1):  # the two pools' jobs alternate; the first pair warms up
                for own, pool in pools.items():
                    runs[own].append(await loop.run_in_executor(pool._pool(), _timed_job, payload))
            for own in results:
                results[own].append(runs[own][1:])
            print(
                f"{topics} topics, racks {racked}, {kind}: own collector "
                f"{worker_cell(runs[True][1:])} ms, CPython's {worker_cell(runs[False][1:])} ms",
                flush=True,
            )
    finally:
        for pool in pools.values():
            pool.close()

    # A join to the big group (10 topics) until its target is installed, inline (the
    # default: a small change) and offloaded (as every such join was before), in one pool
    # whose workers run their own collector; and batches of joins computed either way.
    members, partitions = SIZES[-1]
    paths: list[tuple[bool, bool, EndToEnd]] = []
    batches: list[tuple[bool, int, Batch, Batch]] = []
    bound = DEFAULTS.consumer_assignor_offload_inline_max_changed_members
    pool = AssignorPool(["uniform"], processes=1)
    try:
        await pool.start()
        for racked in (False, True):
            h, _timed, names = build(members, partitions, 10, racked)
            gc.collect()
            gc.freeze()
            for offloaded in (False, True):
                e2e = await join_end_to_end(h, names, racked, pool, offloaded, repeats)
                paths.append((racked, offloaded, e2e))
                assert e2e.total is not None
                print(
                    f"racks {racked}, one join {'offloaded' if offloaded else 'inline'}: "
                    f"installed after {e2e.total.cell()} ms",
                    flush=True,
                )
            for changes in CHANGES:
                inline = batched_changes(h, names, racked, changes, False, repeats)
                shipped = batched_changes(h, names, racked, changes, True, repeats)
                batches.append((racked, changes, inline, shipped))
                print(
                    f"racks {racked}, {changes} joins ({inline.dirty} changed): inline "
                    f"{inline.loop.cell()} ms, offloaded loop {shipped.loop.cell()} ms",
                    flush=True,
                )
            gc.unfreeze()
            del h
            gc.collect()
    finally:
        pool.close()

    def cell(sample: Sample | None) -> str:
        return "—" if sample is None else sample.cell()

    e2e_headers = [
        "racks",
        "path",
        "join command ms",
        "copying the job ms",
        "pickling the job (feeder thread) ms",
        "pool round trip ms",
        "applying the outcome ms",
        "join → target installed ms",
        "this process's CPU ms",
        "job bytes",
    ]
    e2e_body = [
        [
            "yes" if racked else "no",
            "offloaded (bound 0, as before)" if offloaded else "inline (default)",
            e.command.cell(),
            cell(e.copy),
            cell(e.pickle),
            cell(e.pool),
            cell(e.apply),
            cell(e.total),
            f"{statistics.median(e.total.cpu_ms):.2f}" if e.total else "—",
            f"{e.job_bytes:,}" if offloaded else "—",
        ]
        for racked, offloaded, e in paths
    ]
    batch_headers = [
        "racks",
        "joins in the batch",
        "changed members",
        "target records",
        "inline: the command ms",
        "offloaded: loop ms (command, copy, apply)",
        "offloaded: pickling the job ms",
        f"default (bound {bound})",
    ]
    batch_body = [
        [
            "yes" if racked else "no",
            changes,
            inline.dirty,
            inline.records,
            inline.loop.cell(),
            shipped.loop.cell(),
            cell(shipped.pickle),
            "inline" if inline.dirty <= bound else "offloaded",
        ]
        for racked, changes, inline, shipped in batches
    ]

    def collections(samples: list[WorkerSample], during: bool) -> str:
        counts = [s.during if during else s.after for s in samples]
        ms = [s.during_ms if during else s.after_ms for s in samples]
        return f"{statistics.median(counts):g} / {statistics.median(ms):.2f}"

    headers = [
        "topics",
        "racks",
        "job",
        "collector",
        "worker ms (job bytes → answer bytes)",
        "collections during the job: count / ms",
        "collections after the answer: count / ms",
        "worker after the jobs: tracked objects / RSS MiB",
    ]
    body = [
        [
            topics,
            "yes" if racked else "no",
            kind,
            "the worker's own" if own else "CPython's automatic (before)",
            worker_cell(results[own][i]),
            collections(results[own][i], True),
            collections(results[own][i], False),
            f"{results[own][i][-1].objects:,} / {results[own][i][-1].rss_mib:.0f}",
        ]
        for i, (topics, racked, kind, _payload) in enumerate(cases)
        for own in (True, False)
    ]
    elapsed = time.perf_counter() - started
    load_end = os.getloadavg()[0]
    print()
    print(table(headers, body))
    print()
    print(table(e2e_headers, e2e_body))
    print()
    print(table(batch_headers, batch_body))
    print(
        f"\n{elapsed:.0f} s; load average {load_start:.1f} at the start, {load_end:.1f} at the end"
    )
    if not args.no_write:
        write_section(
            "join-offload",
            "## Offloaded target assignments in worker processes\n\n"
            f"`.venv/bin/python bench/join.py --offload` — {machine()}; load average "
            f"{load_start:.1f} at the start, {load_end:.1f} at the end (rough figures: the "
            "machine is shared).\n\n"
            f"Jobs of a {members:,}-member group on {partitions:,} partitions run in a real "
            "worker process of the assignor pool (`uniform`): *join*, the job of an offloaded "
            "join to the settled group (the incremental path); *fresh group*, the whole "
            "computation of the same group's first target (no member has one, no summary: "
            "`assign`). Each job in a pool whose workers run their own garbage collector (the "
            "automatic one off, the young generation collected once the answer is sent, a full "
            "collection every 100 jobs) and, in the same run, in a pool whose workers leave it "
            "to CPython's automatic collections (as before), the two pools' jobs alternating. "
            "*worker ms*: best / median / "
            f"median CPU over {repeats} jobs (after one warm-up), from the job's pickled bytes "
            "(unpickled as the pool's queue does) to its outcome's; *collections*: median count "
            "and median total ms (`gc.callbacks`) during that time, and right after it (the "
            "worker's own collection of what the job left, off the answer's path; the racks "
            "join leaves its members' inputs in a reference cycle, about 30,000 objects); "
            "*after the jobs*: the worker's tracked objects (`gc.get_objects()`, frozen ones "
            "not counted) and resident memory after its last job of the row.\n\n"
            + table(headers, body)
            + "\n\n### A small change to a big group: inline or offloaded\n\n"
            f"One join to the settled {members:,}-member group on {partitions:,} partitions "
            "(10 topics), until its target is installed: *inline*, the default for a small "
            "change when the assignor has `assign_changes` (the target computed in the join's "
            "command); *offloaded*, as every computation of a group of 100 members or more was "
            "before (`group.consumer.assignor.offload.inline.max.changed.members=0`): the join "
            "command, copying the job (`assignment_job`), the pool's round trip to a real worker "
            "(`AssignorPool.run`: its feeder thread pickles the job holding the GIL, the worker "
            "unpickles it, computes and pickles the outcome, this process unpickles it) and "
            "applying the outcome as a command. *pickling the job*: the feeder thread's share, "
            "timed apart on the same job (`ForkingPickler.dumps`, as the pool's queue does); "
            "*this process's CPU*: all its threads, join to installed. Best / median / median "
            f"CPU ms over {repeats} samples (rolled back).\n\n"
            + table(e2e_headers, e2e_body)
            + "\n\nBatches of joins within one assignment interval (1 s), the last join's "
            "heartbeat computing the target: *changed members*, what the bound counts (the "
            "joiners and the members the previous target changed, `spec_dirty`); *inline*, "
            "that command; *offloaded*, the loop's share (that command, copying the job, "
            "applying the outcome; the job run in this process, untimed) and the feeder "
            "thread's (pickling it). The target records are the same either way (written by "
            f"the command or by the outcome's); the default computes inline up to {bound} "
            "changed members.\n\n" + table(batch_headers, batch_body),
        )
    return 0
