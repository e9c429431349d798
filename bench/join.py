"""One join to (and one leave from) a settled group, through the pure core (no gRPC, no store).

Issue 14's "cheaper computation": the cost of one join to a settled group should follow the
partitions that move, not the size of the group. A storm of thousands of joins repeats this
path thousands of times, so here it is measured alone, at three group sizes.

For each case the group is built by replaying its canonical records (the harness's
``seed_group``): every member stable at the group's epoch, owning exactly its target, the target
being the uniform assignor's own result for that group (so a join moves what uniform would move
in a real settled group). Then, on that same state each time (the shard's undo log rolls every
sample back):

* **join**: the ConsumerGroupHeartbeat of a new member (epoch 0, the group's subscription): its
  member record, the subscription metadata check, the group epoch, the target assignment
  (assignor inputs, the ``uniform`` assignor, validation, the diff into target records, their
  replay) and the joiner's reconciliation. The assignor call alone is timed too (a wrapper
  around the same assignor, timed inside the same command).
* **next join**: a second join right after a first one (kept): the second computation also
  brings the target summary up to date with what the first one changed (the cache counts a
  member's new target at the next computation), so this is what each join of a storm costs.
* **leave**: a member's leave heartbeat (epoch -1: tombstones, group epoch + 1) followed by the
  next heartbeat of another member, which computes the new target (as in Kafka, a leave
  computes nothing by itself).
* **offloaded join**: the same join with the computation offloaded (as every computation of a
  group of ``group.consumer.assignor.offload.min.members`` or more was before a small change
  was computed inline; ``group.consumer.assignor.offload.inline.max.changed.members=0``): what
  stays on the event loop (the
  join heartbeat, copying the inputs into an ``AssignmentJob``, applying the outcome as a
  command) and what the worker does (``run_job``: the spec from the job's member inputs, the
  assignor's ``assign_changes`` from the job's summary, the validation), both in this process
  (no pickling, no process hop).

With ``--offload``, real worker processes (section ``join-offload``): at 10,000
members x 100,000 partitions, 10 and 1,000 topics, with and without racks, the job of an
offloaded join to the settled group and the whole computation of a fresh group's first target
(every member without a target, no summary: the assignor's ``assign``), each in a pool whose
workers run their own garbage collector (``coordinator/runtime/offload.py``) and, as the peer
in the same run, in a pool whose workers leave it to CPython (automatic collections, as before).
A worker's time is from the job's pickled bytes to its answer's: unpickling the job (as the
pool's queue does), ``_work`` and pickling the outcome; the collections are counted with
``gc.callbacks``, during the job and after it (the workers' own collection once the answer is
sent; here timed right after the answer's bytes are ready). Then, on the 10-topic group with
and without racks, a small change both ways: one join until its target is installed, inline
(the default: the join's command) beside offloaded through the real pool (the join command,
copying the job, pickling it in the pool's feeder thread, the worker, applying the outcome),
and batches of 1-64 joins computed together either way (what the bound of
``group.consumer.assignor.offload.inline.max.changed.members`` counts, and what each path costs
the loop).

Both joins run with ``group.consumer.assignment.interval.ms=0`` (no batching): one join, one
computation. The inline rows set ``group.consumer.assignor.offload.enable=false``.

Times are wall-clock best and median of the samples, and the median CPU time of this process;
the group's long-lived state is frozen out of the garbage collector's way (``gc.freeze()``),
as a coordinator's would be after its collector has seen it once.

    .venv/bin/python bench/join.py [--quick] [--no-write] [--racks | --offload]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from assignors.api import (
    GroupAssignment,
    GroupSpec,
    MemberAssignment,
    MemberSubscription,
    SubscriptionType,
    TopicId,
    TopicMetadata,
)
from assignors.range import RangeAssignor
from assignors.uniform import UniformAssignor
from bench._racks import rack_of_member, replica_racks
from bench._report import machine, table, write_section
from coordinator.core import records as r
from coordinator.core.commands import ConsumerGroupHeartbeat
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.target_assignment import build_group_spec, run_job
from coordinator.harness import Harness

GROUP = "bench"
SIZES = ((1_000, 10_000), (5_000, 50_000), (10_000, 100_000))
QUICK_SIZES = ((1_000, 10_000), (5_000, 50_000))
TOPICS = (10, 1000)
INLINE = GroupCoordinatorConfig(
    consumer_assignment_interval_ms=0, consumer_assignor_offload_enable=False
)
OFFLOADED = GroupCoordinatorConfig(
    consumer_assignment_interval_ms=0,
    consumer_assignor_offload_enable=True,
    consumer_assignor_offload_inline_max_changed_members=0,
)
"""Every computation of a group of 100 members or more offloaded (before small changes were
computed inline)."""
TARGET_JOIN_MS = 5.0  # Kafka's Java uniform assignor, one join at 10,000 x 100,000 (issue 14)


@dataclass(slots=True)
class TimedAssignor:
    """The uniform assignor, with the wall and CPU time of every ``assign`` and
    ``assign_changes`` call recorded (the coordinator calls the latter first)."""

    name: ClassVar[str] = "uniform"
    inner: UniformAssignor = field(default_factory=UniformAssignor)
    calls: list[tuple[float, float]] = field(default_factory=list)
    incremental: bool = True
    """False: ``assign_changes`` declines, and the coordinator computes the whole assignment."""

    def assign(
        self, group_spec: GroupSpec, topics: Mapping[TopicId, TopicMetadata]
    ) -> GroupAssignment:
        cpu, wall = time.process_time(), time.perf_counter()
        result = self.inner.assign(group_spec, topics)
        self.calls.append((time.perf_counter() - wall, time.process_time() - cpu))
        return result

    def assign_changes(
        self, group_spec: GroupSpec, topics: Mapping[TopicId, TopicMetadata]
    ) -> dict[str, MemberAssignment] | None:
        if not self.incremental:
            return None
        cpu, wall = time.process_time(), time.perf_counter()
        result = self.inner.assign_changes(group_spec, topics)
        if result is not None:  # else assign() is called (and timed) next
            self.calls.append((time.perf_counter() - wall, time.process_time() - cpu))
        return result


@dataclass(frozen=True, slots=True)
class Sample:
    wall_ms: list[float]
    cpu_ms: list[float]

    @property
    def best(self) -> float:
        return min(self.wall_ms)

    @property
    def median(self) -> float:
        return statistics.median(self.wall_ms)

    @property
    def cpu(self) -> float:
        return statistics.median(self.cpu_ms)

    def cell(self) -> str:
        return f"{self.best:.2f} / {self.median:.2f} / {self.cpu:.2f}"


@dataclass(frozen=True, slots=True)
class Row:
    members: int
    partitions: int
    topics: int
    join_moved: int
    join_records: int
    join_assignor: Sample
    join: Sample
    next_join: Sample
    whole_join: Sample
    leave_moved: int
    leave_assignor: Sample
    leave: Sample
    offload_loop: Sample
    offload_worker: Sample


def build(
    members: int, partitions: int, topics: int, racked: bool = False
) -> tuple[Harness, TimedAssignor, list[str]]:
    """A settled group: ``members`` members on ``topics`` topics totalling ``partitions``, each
    member owning its share of the uniform assignor's result; ``racked``: members in 3 racks,
    partitions with 2-3 replicas over them (as ``bench/assignors.py --racks``)."""
    timed = TimedAssignor()
    h = Harness(assignors=[timed, RangeAssignor()], config=INLINE)
    names = [f"topic-{i:04d}" for i in range(topics)]
    n = partitions // topics
    for k, name in enumerate(names):
        h.create_topic(name, n, racks=replica_racks(k, n) if racked else None)
    ids = {h.topic_id(name): name for name in names}
    metadata = {
        t: TopicMetadata(
            topic_id=t,
            name=name,
            num_partitions=n,
            partition_racks=h.shard.topics.by_name[name].partition_racks,
        )
        for t, name in ids.items()
    }
    subscribed = frozenset(ids)
    racks = {
        f"member-{i:05d}": rack_of_member(f"member-{i:05d}") if racked else None
        for i in range(members)
    }
    spec = GroupSpec(
        members={
            m: MemberSubscription(
                rack_id=rack, instance_id=None, subscribed_topic_ids=subscribed, assignment={}
            )
            for m, rack in racks.items()
        },
        subscription_type=SubscriptionType.HOMOGENEOUS,
    )
    full = UniformAssignor().assign(spec, metadata).members
    h.seed_group(GROUP, 10, {m: (names, dict(a)) for m, a in full.items()}, racks=racks)
    # The assignor's inputs are cached beside the group (built once, then kept up to date member
    # by member); a loaded coordinator builds them at its first target computation. Build them
    # here, durably, so that the samples (each rolled back) measure the steady state.
    build_group_spec(h.shard.groups[GROUP])
    h.shard.release(h.shard.mark())
    return h, timed, names


def moved_by(records: list[r.Record], before: Mapping[str, Mapping[str, frozenset[int]]]) -> int:
    """Partitions whose target owner changed: what the target records give a member that it
    did not have before."""
    count = 0
    for rec in records:
        key, value = rec.key, rec.value
        if isinstance(key, r.ConsumerGroupTargetAssignmentMemberKey) and isinstance(
            value, r.ConsumerGroupTargetAssignmentMemberValue
        ):
            old = before.get(key.member_id, {})
            for t, ps in value.topic_partitions.items():
                count += len(ps - old.get(t, frozenset()))
    return count


def joiner(names: list[str], racked: bool) -> ConsumerGroupHeartbeat:
    """The first heartbeat of a new member subscribing to ``names`` (in rack r0 if
    ``racked``)."""
    return ConsumerGroupHeartbeat(
        group_id=GROUP,
        member_id="member-new",
        member_epoch=0,
        rebalance_timeout_ms=60_000,
        subscribed_topic_names=tuple(names),
        topic_partitions={},
        rack_id=rack_of_member("member-new") if racked else None,
    )


def measure(members: int, partitions: int, topics: int, repeats: int, racked: bool = False) -> Row:
    h, timed, names = build(members, partitions, topics, racked)
    shard = h.shard
    group = shard.groups[GROUP]
    epoch = group.group_epoch
    before = {m: dict(a) for m, a in group.target.items()}
    join_cmd = joiner(names, racked)
    second_cmd = replace(join_cmd, member_id="member-new-2")
    ids = sorted(group.members)
    leaver, other = ids[len(ids) // 2], ids[0]
    leave_cmd = ConsumerGroupHeartbeat(group_id=GROUP, member_id=leaver, member_epoch=-1)
    next_cmd = ConsumerGroupHeartbeat(group_id=GROUP, member_id=other, member_epoch=epoch)

    gc.collect()
    gc.freeze()
    try:
        join_wall: list[float] = []
        join_cpu: list[float] = []
        timed.calls.clear()
        join_moved = join_records = 0
        for i in range(repeats + 1):  # the first is a warm-up (fills the assignor-input cache)
            mark = shard.mark()
            gc.collect()
            cpu, wall = time.process_time(), time.perf_counter()
            res = shard.consumer_group_heartbeat(join_cmd, 1000)
            w, c = time.perf_counter() - wall, time.process_time() - cpu
            if res.response is None or res.response.member_epoch != epoch + 1:
                raise AssertionError(f"the join did not get the new epoch: {res.response}")
            join_moved = moved_by(res.records, before)
            join_records = len(res.records)
            shard.rollback(mark)
            if i:
                join_wall.append(w * 1000)
                join_cpu.append(c * 1000)
        join_assignor = timed.calls[1:]

        next_wall: list[float] = []
        next_cpu: list[float] = []
        for i in range(repeats + 1):
            mark = shard.mark()
            shard.consumer_group_heartbeat(join_cmd, 1000)
            gc.collect()
            cpu, wall = time.process_time(), time.perf_counter()
            res = shard.consumer_group_heartbeat(second_cmd, 1000)
            w, c = time.perf_counter() - wall, time.process_time() - cpu
            if res.response is None or res.response.member_epoch != epoch + 2:
                raise AssertionError(f"the second join did not get its epoch: {res.response}")
            shard.rollback(mark)
            if i:
                next_wall.append(w * 1000)
                next_cpu.append(c * 1000)

        timed.incremental = False
        whole_wall: list[float] = []
        whole_cpu: list[float] = []
        for i in range(repeats + 1):
            mark = shard.mark()
            gc.collect()
            cpu, wall = time.process_time(), time.perf_counter()
            res = shard.consumer_group_heartbeat(join_cmd, 1000)
            w, c = time.perf_counter() - wall, time.process_time() - cpu
            if moved_by(res.records, before) != join_moved:
                raise AssertionError("the whole computation moved other partitions")
            shard.rollback(mark)
            if i:
                whole_wall.append(w * 1000)
                whole_cpu.append(c * 1000)
        timed.incremental = True

        leave_wall: list[float] = []
        leave_cpu: list[float] = []
        timed.calls.clear()
        leave_moved = 0
        for i in range(repeats + 1):
            mark = shard.mark()
            gc.collect()
            cpu, wall = time.process_time(), time.perf_counter()
            left = shard.consumer_group_heartbeat(leave_cmd, 1000)
            res = shard.consumer_group_heartbeat(next_cmd, 1000)
            w, c = time.perf_counter() - wall, time.process_time() - cpu
            if group.assignment_epoch != epoch + 1 or leaver in group.members:
                raise AssertionError("the leave did not produce a new target assignment")
            leave_moved = moved_by(left.records + res.records, before)
            shard.rollback(mark)
            if i:
                leave_wall.append(w * 1000)
                leave_cpu.append(c * 1000)
        leave_assignor = timed.calls[1:]

        shard.context.config = OFFLOADED
        loop_wall: list[float] = []
        loop_cpu: list[float] = []
        worker_wall: list[float] = []
        worker_cpu: list[float] = []
        for i in range(repeats + 1):
            mark = shard.mark()
            gc.collect()
            cpu, wall = time.process_time(), time.perf_counter()
            res = shard.consumer_group_heartbeat(join_cmd, 1000)
            job = shard.groups.assignment_job(GROUP)
            w1, c1 = time.perf_counter() - wall, time.process_time() - cpu
            if res.offloads != [GROUP] or job is None:
                raise AssertionError("the join did not offload the computation")
            cpu, wall = time.process_time(), time.perf_counter()
            outcome = run_job(job, timed.inner)
            w2, c2 = time.perf_counter() - wall, time.process_time() - cpu
            cpu, wall = time.process_time(), time.perf_counter()
            shard.groups.apply_assignment(outcome, 1000)
            w3, c3 = time.perf_counter() - wall, time.process_time() - cpu
            if group.assignment_epoch != epoch + 1:
                raise AssertionError(f"the offloaded outcome was not applied: {outcome.error}")
            shard.rollback(mark)
            if i:
                loop_wall.append((w1 + w3) * 1000)
                loop_cpu.append((c1 + c3) * 1000)
                worker_wall.append(w2 * 1000)
                worker_cpu.append(c2 * 1000)
        shard.context.config = INLINE
    finally:
        gc.unfreeze()

    def sample(calls: list[tuple[float, float]]) -> Sample:
        return Sample([w * 1000 for w, _ in calls], [c * 1000 for _, c in calls])

    return Row(
        members,
        partitions,
        topics,
        join_moved,
        join_records,
        sample(join_assignor),
        Sample(join_wall, join_cpu),
        Sample(next_wall, next_cpu),
        Sample(whole_wall, whole_cpu),
        leave_moved,
        sample(leave_assignor),
        Sample(leave_wall, leave_cpu),
        Sample(loop_wall, loop_cpu),
        Sample(worker_wall, worker_cpu),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="two smaller sizes, fewer samples")
    ap.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    ap.add_argument("--repeats", type=int, default=None, help="samples per measurement")
    ap.add_argument(
        "--racks",
        action="store_true",
        help="each case with members in 3 racks and partition racks, beside the same case "
        "without (section join-racks)",
    )
    ap.add_argument(
        "--offload",
        action="store_true",
        help="only the offloaded jobs in real worker processes, with the workers' own garbage "
        "collector and with CPython's (section join-offload)",
    )
    args = ap.parse_args(argv)
    repeats = args.repeats or (5 if args.quick else 15)
    sizes = QUICK_SIZES if args.quick else SIZES
    if args.offload:
        from bench.join_offload import main_offload  # (it imports this module)

        return asyncio.run(main_offload(args, repeats))
    if args.racks:
        return main_racks(args, repeats, sizes)
    load_start = os.getloadavg()[0]
    started = time.perf_counter()

    rows: list[Row] = []
    for topics in TOPICS:
        for members, partitions in sizes:
            row = measure(members, partitions, topics, repeats)
            rows.append(row)
            print(
                f"{members:,} x {partitions:,} / {topics} topics: join {row.join.cell()} ms "
                f"(assignor {row.join_assignor.cell()}), leave {row.leave.cell()} ms, "
                f"offloaded: loop {row.offload_loop.cell()} ms, worker "
                f"{row.offload_worker.cell()} ms",
                flush=True,
            )
            gc.collect()

    headers = [
        "members × partitions",
        "topics",
        "join: moved",
        "join: assignor ms",
        "join: whole command ms",
        "next join: whole command ms",
        "join, whole computation (no `assign_changes`) ms",
        "leave: moved",
        "leave + next heartbeat ms",
        "offloaded join: event loop ms",
        "offloaded join: worker ms",
    ]
    table_rows = [
        [
            f"{r.members:,} × {r.partitions:,}",
            r.topics,
            r.join_moved,
            r.join_assignor.cell(),
            r.join.cell(),
            r.next_join.cell(),
            r.whole_join.cell(),
            r.leave_moved,
            r.leave.cell(),
            r.offload_loop.cell(),
            r.offload_worker.cell(),
        ]
        for r in rows
    ]
    targets: list[list[object]] = []
    for topics in TOPICS:
        by_size = {(r.members, r.partitions): r for r in rows if r.topics == topics}
        small, large = by_size.get(SIZES[0]), by_size.get(SIZES[-1])
        if large is not None:
            worst = max(large.join.best, large.next_join.best)
            targets.append(
                [
                    f"whole join, 10,000 × 100,000, {topics} topics",
                    f"{large.join.best:.2f} ms (median {large.join.median:.2f}, CPU "
                    f"{large.join.cpu:.2f}); next join {large.next_join.best:.2f} ms; assignor "
                    f"alone {large.join_assignor.best:.2f} ms",
                    f"≤ {TARGET_JOIN_MS:g} ms (what Kafka's Java uniform assignor alone takes, "
                    "as reported in issue 14; not measurable here)",
                    "yes" if worst <= TARGET_JOIN_MS else "no",
                ]
            )
        if small is not None and large is not None:
            growth = large.join.best / small.join.best
            next_growth = large.next_join.best / small.next_join.best
            targets.append(
                [
                    f"growth of the whole join, 1,000 → 10,000 members, {topics} topics",
                    f"×{growth:.1f} ({small.join.best:.2f} → {large.join.best:.2f} ms); next "
                    f"join ×{next_growth:.1f} ({small.next_join.best:.2f} → "
                    f"{large.next_join.best:.2f} ms)",
                    "well below ×10 (linear in the group size)",
                    "yes" if max(growth, next_growth) <= 3.0 else "no",
                ]
            )
    target_headers = ["target", "measured (best)", "goal", "met"]
    elapsed = time.perf_counter() - started
    load_end = os.getloadavg()[0]
    print()
    print(table(headers, table_rows))
    if targets:
        print()
        print(table(target_headers, targets))
    print(
        f"\n{elapsed:.0f} s; load average {load_start:.1f} at the start, {load_end:.1f} at the end"
    )
    if not args.no_write:
        command = f"bench/join.py{' --quick' if args.quick else ''}"
        write_section(
            "join",
            "## One join to a settled group (pure core)\n\n"
            f"`.venv/bin/python {command}` — {machine()}; load average {load_start:.1f} at the "
            f"start, {load_end:.1f} at the end (rough figures: the machine is shared).\n\n"
            "Each cell: best / median / median CPU time in ms, over "
            f"{repeats} samples on the same state (rolled back with the shard's undo log). "
            "The group is settled: every member stable, owning its share of the uniform "
            "assignor's result; every member subscribes to all topics (homogeneous). *join*: a "
            "new member's first heartbeat (member record, subscription metadata, group epoch, "
            "target assignment with the `uniform` assignor, validation, target records and "
            "their replay, the joiner's reconciliation); *assignor*: the assignor call alone "
            "(`assign_changes`, the incremental path, see docs/assignors.md), inside that "
            "command (both with `group.consumer.assignment.interval.ms=0` and "
            "`group.consumer.assignor.offload.enable=false`). *next join*: a second join right "
            "after a first one, whose computation also counts the first one's changes into the "
            "target summary (what each join of a storm costs). *join, whole computation*: the "
            "same join when `assign_changes` declines (the whole spec and `assign`, as before "
            "the incremental path; what the event loop takes when the assignor has no "
            "incremental path). "
            "*leave*: a member's leave "
            "heartbeat followed by another member's heartbeat, which computes the new target. "
            "*offloaded join*: the same join with the computation offloaded (as every "
            "computation of a group of 100 members or more was before small changes were "
            "computed inline: `group.consumer.assignor.offload.inline.max.changed.members=0`); "
            "*event loop*: the heartbeat, copying the inputs "
            "into a job and applying the outcome; *worker*: the job itself (spec from the job's "
            "member inputs, `assign_changes` from its summary, validation), run in this process "
            "(no pickling, no process hop). "
            "*moved*: partitions whose target owner changed.\n\n"
            + table(headers, table_rows)
            + (
                "\n\n### Targets\n\n" + table(target_headers, targets) + "\n\n"
                "Kafka's figure is its Java uniform assignor alone (JMH); the whole join here "
                "also includes everything around the assignor."
                if targets
                else ""
            ),
        )
    return 0


def main_racks(args: argparse.Namespace, repeats: int, sizes: tuple[tuple[int, int], ...]) -> int:
    """The same measurements on racked groups (members in racks r0-r2, partitions with 2-3
    replicas over them), each beside the same case without racks, in the same run."""
    load_start = os.getloadavg()[0]
    started = time.perf_counter()
    pairs: list[tuple[Row, Row]] = []
    for topics in TOPICS:
        for members, partitions in sizes:
            racked = measure(members, partitions, topics, repeats, racked=True)
            gc.collect()
            blind = measure(members, partitions, topics, repeats)
            gc.collect()
            pairs.append((racked, blind))
            print(
                f"{members:,} x {partitions:,} / {topics} topics: join {racked.join.cell()} ms "
                f"(blind {blind.join.cell()}), next join {racked.next_join.cell()} "
                f"(blind {blind.next_join.cell()}), leave {racked.leave.cell()} ms (blind "
                f"{blind.leave.cell()}), offloaded worker {racked.offload_worker.cell()} ms "
                f"(blind {blind.offload_worker.cell()})",
                flush=True,
            )
    headers = [
        "members × partitions",
        "topics",
        "racks",
        "join: moved",
        "join: assignor ms",
        "join: whole command ms",
        "next join: whole command ms",
        "leave: moved",
        "leave + next heartbeat ms",
        "offloaded join: event loop ms",
        "offloaded join: worker ms",
    ]
    body = [
        [
            f"{r.members:,} × {r.partitions:,}",
            r.topics,
            kind,
            r.join_moved,
            r.join_assignor.cell(),
            r.join.cell(),
            r.next_join.cell(),
            r.leave_moved,
            r.leave.cell(),
            r.offload_loop.cell(),
            r.offload_worker.cell(),
        ]
        for pair in pairs
        for kind, r in zip(("yes", "no"), pair, strict=True)
    ]
    ratios = [
        [
            f"{racked.members:,} × {racked.partitions:,}, {racked.topics} topics",
            f"{racked.join.cpu / blind.join.cpu:.2f}×",
            f"{racked.next_join.cpu / blind.next_join.cpu:.2f}×",
            f"{racked.leave.cpu / blind.leave.cpu:.2f}×",
            f"{racked.offload_worker.cpu / blind.offload_worker.cpu:.2f}×",
        ]
        for racked, blind in pairs
    ]
    elapsed = time.perf_counter() - started
    load_end = os.getloadavg()[0]
    print()
    print(table(headers, body))
    print()
    print(table(["case", "join", "next join", "leave", "offloaded worker"], ratios))
    print(
        f"\n{elapsed:.0f} s; load average {load_start:.1f} at the start, {load_end:.1f} at the end"
    )
    if not args.no_write:
        command = f"bench/join.py --racks{' --quick' if args.quick else ''}"
        write_section(
            "join-racks",
            "## One join to a settled group in racks (pure core)\n\n"
            f"`.venv/bin/python {command}` — {machine()}; load average {load_start:.1f} at the "
            f"start, {load_end:.1f} at the end (rough figures: the machine is shared).\n\n"
            "The measurements of the section above (same definitions; best / median / median "
            f"CPU ms over {repeats} samples), on a group whose members are in racks r0, r1, r2 "
            "(by index; the newcomer in r0) and whose partitions have 2 or 3 replicas in "
            "consecutive racks (as `bench/assignors.py --racks`), each beside the same case "
            "without racks in the same run. With racks the `uniform` assignor places by racks "
            "(docs/assignors.md): its incremental path plans from the target summary's count "
            "of held partitions by racks and its members by rack and load, which the "
            "coordinator keeps up to date from the changed targets, and visits only the members "
            "that change (*next join* includes counting the first join's changes).\n\n"
            + table(headers, body)
            + "\n\nRatio of median CPU times, racks over no racks:\n\n"
            + table(["case", "join", "next join", "leave", "offloaded worker"], ratios),
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
