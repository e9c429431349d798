"""Server-side assignor benchmark: Kafka's JMH grid, plus kafka-python's sticky assignors.

Usage::

    .venv/bin/python bench/assignors.py            # full grid, writes docs/benchmarks.md
    .venv/bin/python bench/assignors.py --quick    # small grid, a few seconds
    .venv/bin/python bench/assignors.py --racks    # rack-aware assignment (bench/_racks.py)
    .venv/bin/python bench/assignors.py --no-peers --no-write

The grid is Kafka's ``ServerSideAssignorBenchmark``: members {100, 500, 1000, 5000, 10000} x
partitions per member {5, 10, 50} x topics {10, 100, 1000} (cells with fewer partitions than
topics are skipped), homogeneous or heterogeneous (5 buckets of members, each subscribed to its
own fifth of the topics), for three scenarios:

* FULL - every member new, nothing assigned;
* leaves - the FULL result installed, then one member (the middle one) leaves;
* joins - the "leaves" result installed (M-1 balanced members), then a member with the same
  subscription joins (Kafka's INCREMENTAL).

For each cell it prints the time of one ``assign`` call (the best of 5-25 runs after a warm-up;
the targets also show the median and the process CPU time;
inputs are built first and frozen out of the garbage collector's way with ``gc.freeze()``, as
long-lived coordinator state would be), the partitions that changed owner relative to the
installed target assignment, and max-min of the members' assignment sizes.

kafka-python 3.0.12's ``sticky`` and ``cooperative-sticky`` assignors (pure Python, what a
Python shop would otherwise run client-side) are measured on the same inputs in child processes,
two at a time, after our own measurements; each call gets 60 s (``> 60 s`` otherwise; a cell is
not tried when one with no more members and partitions already ran out of time). Their cost does
not depend on the topic count, so in the full run they are measured on the 10-topic cells of up
to 1,000 members. For cooperative-sticky the figures are those of its final placement (its first
round withholds the partitions that move).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, TypeVar

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from assignors.api import (  # noqa: E402 - after the sys.path insert
    GroupSpec,
    MemberSubscription,
    PartitionAssignor,
    SubscriptionType,
    TopicMetadata,
)
from assignors.range import RangeAssignor  # noqa: E402
from assignors.uniform import UniformAssignor  # noqa: E402

MEMBERS = (100, 500, 1000, 5000, 10000)
RATIOS = (5, 10, 50)
TOPICS = (10, 100, 1000)
QUICK_MEMBERS = (100, 1000)
QUICK_RATIOS = (5, 10)
QUICK_TOPICS = (10, 100)
BUCKETS = 5
SCENARIOS = ("FULL", "leaves", "joins")
PEERS = ("sticky", "cooperative-sticky")
PEER_MAX_MEMBERS = 1000
PEER_TOPICS = (10,)
TARGET_SECONDS_PER_CELL = 0.3
MIN_REPEATS = 5
MAX_REPEATS = 25
PEER_TIMEOUT_FOR_REPORT = [60.0]  # set from --peer-timeout; read by the targets table
LOAD_AT_START = 0.0

Assignment = Mapping[str, Mapping[str, frozenset[int]]]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Cell:
    members: int
    ratio: int
    topics: int
    heterogeneous: bool

    @property
    def partitions(self) -> int:
        return self.partitions_per_topic * self.topics

    @property
    def partitions_per_topic(self) -> int:
        return self.members * self.ratio // self.topics

    @property
    def kind(self) -> str:
        return "heterogeneous" if self.heterogeneous else "homogeneous"


COMPARISON_CELL = Cell(1000, 10, 10, False)  # the "100x faster than kafka-python" target


@dataclass(frozen=True, slots=True)
class Measure:
    ms: float | None  # best wall time of the runs; None: did not finish in time / not run
    moved: int | None = None
    spread: int | None = None
    note: str = ""
    median_ms: float | None = None  # median wall time
    cpu_ms: float | None = None  # median CPU time of this process


# ---------------------------------------------------------------------- inputs


def topic_id(i: int) -> str:
    """A Kafka-style 22-character base64url topic id, deterministic per index."""
    import base64

    raw = hashlib.blake2b(f"topic-{i}".encode(), digest_size=16).digest()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def member_id(i: int) -> str:
    return f"member-{i:05d}"


def build_topics(cell: Cell) -> tuple[list[str], dict[str, TopicMetadata]]:
    ids = [topic_id(i) for i in range(cell.topics)]
    metadata = {
        t: TopicMetadata(
            topic_id=t, name=f"topic-{i:04d}", num_partitions=cell.partitions_per_topic
        )
        for i, t in enumerate(ids)
    }
    return ids, metadata


def bucket_of(cell: Cell, index: int) -> int:
    buckets = min(BUCKETS, cell.members)
    per_bucket = -(-cell.members // buckets)
    return index // per_bucket


def subscriptions(cell: Cell, ids: list[str]) -> list[frozenset[str]]:
    """Per member index: all topics, or (heterogeneous) its bucket's share, as in Kafka's JMH."""
    if not cell.heterogeneous:
        everything = frozenset(ids)
        return [everything] * cell.members
    buckets = min(BUCKETS, cell.members)
    topics_per_bucket = -(-len(ids) // buckets)
    shares = [
        frozenset(ids[b * topics_per_bucket : (b + 1) * topics_per_bucket]) for b in range(buckets)
    ]
    return [shares[bucket_of(cell, i)] for i in range(cell.members)]


def make_spec(
    members: Sequence[tuple[str, frozenset[str]]], current: Assignment, homogeneous: bool
) -> GroupSpec:
    specs = {
        m: MemberSubscription(
            rack_id=None, instance_id=None, subscribed_topic_ids=subs, assignment=current.get(m, {})
        )
        for m, subs in members
    }
    kind = SubscriptionType.HOMOGENEOUS if homogeneous else SubscriptionType.HETEROGENEOUS
    # The inverted current assignment, as the coordinator passes it (group.target_owners).
    owners: dict[str, dict[int, str]] = {}
    for m, a in current.items():
        if m in specs:
            for t, ps in a.items():
                owners.setdefault(t, {}).update(dict.fromkeys(ps, m))
    return GroupSpec(members=specs, subscription_type=kind, partition_owners=owners)


def moved(before: Assignment, after: Assignment) -> int:
    """Partitions that had an owner before and have a different one now."""
    owner = {}
    for m, a in before.items():
        for t, ps in a.items():
            for p in ps:
                owner[(t, p)] = m
    count = 0
    for m, a in after.items():
        for t, ps in a.items():
            for p in ps:
                previous = owner.get((t, p))
                if previous is not None and previous != m:
                    count += 1
    return count


def spread(result: Assignment) -> int:
    sizes = [sum(map(len, a.values())) for a in result.values()]
    return max(sizes) - min(sizes) if sizes else 0


# ---------------------------------------------------------------------- our assignors


@dataclass(frozen=True, slots=True)
class Timing:
    best_ms: float
    median_ms: float
    cpu_ms: float


def time_call(
    call: Callable[[], T],
    *,
    warmup: int = 1,
    min_repeats: int = MIN_REPEATS,
    max_repeats: int = MAX_REPEATS,
) -> tuple[Timing, T]:
    """Wall and CPU time in ms after ``warmup`` calls, repeating up to a time budget (at least
    ``min_repeats``, at most ``max_repeats`` times). The best wall time is what the tables
    show: on a shared machine it is the least disturbed run."""
    for _ in range(warmup):
        result = call()
    walls: list[float] = []
    cpus: list[float] = []
    while len(walls) < min_repeats or (
        sum(walls) < TARGET_SECONDS_PER_CELL and len(walls) < max_repeats
    ):
        cpu, wall = time.process_time(), time.perf_counter()
        result = call()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return Timing(
        min(walls) * 1000, statistics.median(walls) * 1000, statistics.median(cpus) * 1000
    ), result


def _measure(t: Timing, moved_: int | None, spread_: int) -> Measure:
    return Measure(t.best_ms, moved_, spread_, median_ms=t.median_ms, cpu_ms=t.cpu_ms)


def measure_ours(assignor: PartitionAssignor, cell: Cell) -> dict[str, Measure]:
    ids, metadata = build_topics(cell)
    subs = subscriptions(cell, ids)
    everyone = [(member_id(i), subs[i]) for i in range(cell.members)]
    leaver = cell.members // 2
    out: dict[str, Measure] = {}

    def run(
        members: list[tuple[str, frozenset[str]]], current: Assignment
    ) -> tuple[Timing, Assignment]:
        spec = make_spec(members, current, not cell.heterogeneous)
        gc.collect()
        gc.freeze()
        try:
            ms, result = time_call(lambda: assignor.assign(spec, metadata))
        finally:
            gc.unfreeze()
        return ms, result.members

    ms, full = run(everyone, {})
    out["FULL"] = _measure(ms, None, spread(full))
    survivors = everyone[:leaver] + everyone[leaver + 1 :]
    ms, after_leave = run(survivors, full)
    out["leaves"] = _measure(ms, moved(full, after_leave), spread(after_leave))
    newcomer = ("member-new", frozenset(subs[leaver]))  # an equal, separately built subscription
    ms, after_join = run([*survivors, newcomer], after_leave)
    out["joins"] = _measure(ms, moved(after_leave, after_join), spread(after_join))
    return out


VALIDATION_CELLS = (
    Cell(10000, 10, 10, False),
    Cell(10000, 10, 1000, False),
    Cell(5000, 50, 100, True),
    Cell(100000, 1, 10, False),
)
QUICK_VALIDATION_CELLS = (Cell(1000, 10, 10, False),)


def measure_validation(cell: Cell) -> Timing:
    """check_assignment on the uniform FULL result of ``cell``."""
    from assignors.validation import check_assignment

    ids, metadata = build_topics(cell)
    subs = subscriptions(cell, ids)
    spec = make_spec(
        [(member_id(i), subs[i]) for i in range(cell.members)], {}, not cell.heterogeneous
    )
    result = UniformAssignor().assign(spec, metadata)
    gc.collect()
    gc.freeze()
    try:
        timing, _ = time_call(lambda: check_assignment(spec, metadata, result))
    finally:
        gc.unfreeze()
    return timing


# ---------------------------------------------------------------------- kafka-python peers


class PeerArgs(TypedDict):
    """What the parent hands a peer child (as JSON): one cell, one peer, the time limit."""

    members: int
    ratio: int
    topics: int
    heterogeneous: bool
    peer: str
    timeout: float


def peer_child(args: PeerArgs) -> None:
    """Runs in a child process: one peer on one cell, all three scenarios, 60 s per call."""
    import signal
    from types import SimpleNamespace as NS

    from kafka.coordinator.assignors import cooperative_sticky
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
    from kafka.coordinator.assignors.sticky.user_data import StickyAssignorUserData

    cell = Cell(args["members"], args["ratio"], args["topics"], args["heterogeneous"])
    limit = float(args["timeout"])
    peer = args["peer"]
    names = [f"topic-{i:04d}" for i in range(cell.topics)]
    parts = {t: set(range(cell.partitions_per_topic)) for t in names}
    subs = subscriptions(cell, names)

    class Cluster:
        def topics(self) -> set[str]:
            return set(parts)

        def partitions_for_topic(self, t: str) -> set[int] | None:
            return parts.get(t)

    executors: list[Any] = []  # kafka-python's executors (untyped)
    if peer == "cooperative-sticky":

        class Recording(cooperative_sticky.StickyAssignmentExecutor):
            def __init__(self, *a: object, **k: object) -> None:
                super().__init__(*a, **k)
                executors.append(self)

        cooperative_sticky.StickyAssignmentExecutor = Recording  # final placement, for figures
        assignor: Any = cooperative_sticky.CooperativeStickyAssignor()
    else:
        assignor = StickyPartitionAssignor()

    def member(i: int | str, topics: frozenset[str], current: Assignment) -> NS:
        mid = member_id(i) if isinstance(i, int) else i
        owned = sorted((t, sorted(ps)) for t, ps in current.get(mid, {}).items())
        generation = 1 if current else -1
        return NS(
            member_id=mid,
            group_instance_id=None,
            metadata=NS(
                topics=sorted(topics),
                user_data=StickyAssignorUserData(previous_assignment=owned, generation=generation)
                if owned
                else b"",
                owned_partitions=[NS(topic=t, partitions=ps) for t, ps in owned],
                generation_id=generation,
            ),
        )

    def on_alarm(signum: int, frame: object) -> None:
        raise TimeoutError

    signal.signal(signal.SIGALRM, on_alarm)

    def run(members: list[NS]) -> tuple[float, dict[str, dict[str, frozenset[int]]]]:
        gc.collect()
        executors.clear()
        signal.setitimer(signal.ITIMER_REAL, limit)
        try:
            start = time.perf_counter()
            raw = assignor.assign(Cluster(), members)
            elapsed = time.perf_counter() - start
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        result: dict[str, dict[str, frozenset[int]]] = {}
        for m in members:
            mid = m.member_id
            pairs = (
                executors[-1].get_final_assignment(mid)
                if executors
                else raw[mid].assigned_partitions
            )
            result[mid] = {t: frozenset(ps) for t, ps in pairs if ps}
        return elapsed * 1000, result

    def emit(scenario: str, ms: float | None, moved_: int | None, spread_: int | None) -> None:
        print(
            json.dumps({"scenario": scenario, "ms": ms, "moved": moved_, "spread": spread_}),
            flush=True,
        )

    leaver = cell.members // 2
    try:
        ms, full = run([member(i, subs[i], {}) for i in range(cell.members)])
    except TimeoutError:
        return emit("FULL", None, None, None)
    emit("FULL", ms, None, spread(full))
    survivors = [i for i in range(cell.members) if i != leaver]
    try:
        ms, after_leave = run([member(i, subs[i], full) for i in survivors])
    except TimeoutError:
        return emit("leaves", None, None, None)
    emit("leaves", ms, moved(full, after_leave), spread(after_leave))
    joined = [member(i, subs[i], after_leave) for i in survivors]
    joined.append(member("member-new", subs[leaver], after_leave))
    try:
        ms, after_join = run(joined)
    except TimeoutError:
        return emit("joins", None, None, None)
    emit("joins", ms, moved(after_leave, after_join), spread(after_join))
    return None


def measure_peer(cell: Cell, peer: str, timeout_s: float) -> dict[str, Measure]:
    args: PeerArgs = {
        "members": cell.members,
        "ratio": cell.ratio,
        "topics": cell.topics,
        "heterogeneous": cell.heterogeneous,
        "peer": peer,
        "timeout": timeout_s,
    }
    try:
        proc = subprocess.run(
            [sys.executable, __file__, "--peer-child", json.dumps(args)],
            capture_output=True,
            text=True,
            timeout=timeout_s * 4 + 120,  # three timed calls plus input building
            check=False,
        )
        lines = proc.stdout.splitlines()
    except subprocess.TimeoutExpired as exc:
        partial = exc.stdout or ""
        lines = (partial.decode() if isinstance(partial, bytes) else partial).splitlines()
    out: dict[str, Measure] = {}
    for line in lines:
        row = json.loads(line)
        out[row["scenario"]] = Measure(row["ms"], row["moved"], row["spread"])
    # Scenarios after one that ran out of time cannot be set up: they count as out of time too.
    for scenario in SCENARIOS:
        if scenario not in out or out[scenario].ms is None:
            for later in SCENARIOS[SCENARIOS.index(scenario) :]:
                out[later] = Measure(None, note=f"> {timeout_s:g} s")
            break
    return out


# ---------------------------------------------------------------------- grid and report


def grid(quick: bool) -> list[Cell]:
    members = QUICK_MEMBERS if quick else MEMBERS
    ratios = QUICK_RATIOS if quick else RATIOS
    topics = QUICK_TOPICS if quick else TOPICS
    cells = []
    for heterogeneous in (False, True):
        for m in members:
            for r in ratios:
                for t in topics:
                    if m * r // t >= 1 and (not heterogeneous or t >= BUCKETS):
                        cells.append(Cell(m, r, t, heterogeneous))
    return cells


def peer_cells(cells: list[Cell], quick: bool) -> list[Cell]:
    chosen = [
        c for c in cells if c.members <= PEER_MAX_MEMBERS and (quick or c.topics in PEER_TOPICS)
    ]
    return sorted(
        chosen, key=lambda c: (c.members * c.partitions, c.members, c.topics, c.heterogeneous)
    )


def run_peers(
    cells: list[Cell], timeout_s: float, jobs: int, log: Callable[[str], None]
) -> dict[tuple[Cell, str], dict[str, Measure]]:
    """Peers in order of size, ``jobs`` at a time; skip a cell dominated by one that timed out.
    The comparison cell of the targets runs first, alone, so that our own parallelism does not
    slow it down."""
    results: dict[tuple[Cell, str], dict[str, Measure]] = {}
    timed_out: list[tuple[Cell, str]] = []
    solo = [(c, p) for c in cells if c == COMPARISON_CELL for p in PEERS]
    pending = solo + [(c, p) for c in cells if c != COMPARISON_CELL for p in PEERS]

    def dominated(cell: Cell, peer: str) -> bool:
        return any(
            p == peer
            and o.heterogeneous == cell.heterogeneous
            and o.members <= cell.members
            and o.partitions <= cell.partitions
            for o, p in timed_out
        )

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        while pending:
            batch: list[tuple[Cell, str]] = []
            width = 1 if pending[0] in solo else jobs
            while pending and len(batch) < width:
                cell, peer = pending.pop(0)
                if dominated(cell, peer):
                    results[(cell, peer)] = {
                        s: Measure(None, note=f"> {timeout_s:g} s (skipped)") for s in SCENARIOS
                    }
                    continue
                batch.append((cell, peer))
            futures = {key: pool.submit(measure_peer, key[0], key[1], timeout_s) for key in batch}
            for (cell, peer), future in futures.items():
                res = future.result()
                results[(cell, peer)] = res
                if res["FULL"].ms is None:
                    timed_out.append((cell, peer))
                log(
                    f"  {peer:<18} {cell.members:>5} x {cell.ratio:<2} x {cell.topics:<4} {cell.kind:<13} "
                    + "  ".join(f"{s} {fmt_ms(res[s])}" for s in SCENARIOS)
                )
    return results


def fmt_ms(m: Measure | None) -> str:
    if m is None:
        return "—"
    if m.ms is None:
        return m.note or "—"
    if m.ms >= 1000:
        return f"{m.ms / 1000:.1f} s"
    return f"{m.ms:.2f}" if m.ms < 10 else f"{m.ms:.1f}"


def fmt_int(v: int | None) -> str:
    return "—" if v is None else f"{v:,}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small grid")
    parser.add_argument("--no-peers", action="store_true", help="skip kafka-python")
    parser.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    parser.add_argument("--peer-timeout", type=float, default=60.0, help="seconds per peer call")
    parser.add_argument("--peer-jobs", type=int, default=2, help="peer child processes at a time")
    parser.add_argument("--peer-child", help=argparse.SUPPRESS)
    parser.add_argument(
        "--racks",
        action="store_true",
        help="the rack-aware benchmark instead (3 racks, 2-3 replicas; bench/_racks.py)",
    )
    args = parser.parse_args(argv)
    if args.peer_child:
        peer_child(json.loads(args.peer_child))
        return 0
    if args.racks:
        from bench._racks import run as run_racks

        return run_racks(args)

    from bench._report import machine, publish

    def log(line: str) -> None:
        print(line, flush=True)

    started = time.perf_counter()
    global LOAD_AT_START
    LOAD_AT_START = os.getloadavg()[0]
    PEER_TIMEOUT_FOR_REPORT[0] = args.peer_timeout
    cells = grid(args.quick)
    ours: dict[tuple[Cell, str], dict[str, Measure]] = {}
    assignors: list[tuple[str, PartitionAssignor]] = [
        ("uniform", UniformAssignor()),
        ("range", RangeAssignor()),
    ]
    log(f"assignor benchmark: {len(cells)} cells x {len(SCENARIOS)} scenarios; {machine()}")
    for cell in cells:
        for name, assignor in assignors:
            res = measure_ours(assignor, cell)
            ours[(cell, name)] = res
            log(
                f"  {name:<18} {cell.members:>5} x {cell.ratio:<2} x {cell.topics:<4} {cell.kind:<13} "
                + "  ".join(f"{s} {fmt_ms(res[s])} ms" for s in SCENARIOS)
            )
    validation = {
        cell: measure_validation(cell)
        for cell in (QUICK_VALIDATION_CELLS if args.quick else VALIDATION_CELLS)
    }
    for cell, timing in validation.items():
        log(
            f"  check_assignment {cell.members:>6} x {cell.partitions:<7} {cell.kind:<13} "
            f"{timing.best_ms:.1f} ms"
        )
    peers: dict[tuple[Cell, str], dict[str, Measure]] = {}
    if not args.no_peers:
        log("kafka-python peers:")
        peers = run_peers(peer_cells(cells, args.quick), args.peer_timeout, args.peer_jobs, log)

    args.load = (LOAD_AT_START, os.getloadavg()[0])
    markdown = report(cells, ours, peers, validation, args)
    publish("assignors", markdown, time.perf_counter() - started, not args.no_write)
    return 0


def report(
    cells: list[Cell],
    ours: dict[tuple[Cell, str], dict[str, Measure]],
    peers: dict[tuple[Cell, str], dict[str, Measure]],
    validation: dict[Cell, Timing],
    args: argparse.Namespace,
) -> str:
    from bench._report import machine, table

    command = (
        "python bench/assignors.py"
        + (" --quick" if args.quick else "")
        + (" --no-peers" if args.no_peers else "")
    )
    out = [
        "## Server-side assignors",
        "",
        (
            f"Command: `{command}` — {machine()}; load average {args.load[0]:.1f} at the start, "
            f"{args.load[1]:.1f} at the end (other work shares the 2 cores)."
        ),
        "",
        (
            "Time of one `assign` call in ms: the best of 5-25 runs after a warm-up (the machine is shared; the targets table also gives the median and the CPU time); *moved* = partitions whose owner "
            "changed relative to the installed target assignment; *max−min* = spread of member "
            "assignment sizes. FULL: all members new. leaves: FULL result installed, the middle member "
            "leaves. joins: the leaves result installed, a member with the same subscription joins "
            "(Kafka's INCREMENTAL). Heterogeneous = 5 buckets of members, each on its own fifth of the "
            "topics (Kafka's JMH). kafka-python 3.0.12 `sticky` / `cooperative-sticky` run in child "
            f"processes with {args.peer_timeout:g} s per call; — = not measured on that cell."
        ),
        "",
    ]
    out += targets(cells, ours, peers)
    rows = [
        [
            f"{c.members:,}",
            f"{c.partitions:,}",
            c.topics,
            c.kind,
            f"{t.best_ms:.1f}",
            f"{t.median_ms:.1f}",
        ]
        for c, t in validation.items()
    ]
    out += [
        "### Result validation",
        "",
        (
            "`assignors.validation.check_assignment` (run by the coordinator on every result) on the "
            "uniform FULL result; target < 30 ms for 100,000 partitions."
        ),
        "",
        table(["members", "partitions", "topics", "subscriptions", "best ms", "median ms"], rows),
        "",
    ]
    for heterogeneous in (False, True):
        rows = []
        for cell in [c for c in cells if c.heterogeneous == heterogeneous]:
            for scenario in SCENARIOS:
                row: list[object] = [
                    f"{cell.members:,}",
                    f"{cell.partitions:,}",
                    cell.topics,
                    scenario,
                ]
                for source in ("uniform", "range", *PEERS):
                    res = (ours if source in ("uniform", "range") else peers).get((cell, source))
                    m = res[scenario] if res else None
                    row += [
                        fmt_ms(m),
                        fmt_int(m.moved if m else None),
                        fmt_int(m.spread if m else None),
                    ]
                rows.append(row)
        headers = ["members", "partitions", "topics", "scenario"]
        for source in ("uniform", "range", "kp sticky", "kp coop-sticky"):
            headers += [f"{source} ms", "moved", "max−min"]
        out += [
            "",
            f"### {'Heterogeneous' if heterogeneous else 'Homogeneous'} subscriptions",
            "",
            table(headers, rows),
        ]
    return "\n".join(out)


def targets(
    cells: list[Cell],
    ours: dict[tuple[Cell, str], dict[str, Measure]],
    peers: dict[tuple[Cell, str], dict[str, Measure]],
) -> list[str]:
    rows: list[list[object]] = []

    def worst(
        members: int, partitions: int, heterogeneous: bool, scenario: str
    ) -> tuple[Measure | None, Cell | None]:
        found = [
            (ours[(c, "uniform")][scenario], c)
            for c in cells
            if c.members == members
            and c.partitions == partitions
            and c.heterogeneous == heterogeneous
        ]
        if not found:
            return None, None
        return max(found, key=lambda mc: mc[0].ms or 0.0)

    for label, members, partitions, het, scenario, goal_ms in (
        ("uniform, homogeneous, FULL", 10000, 100000, False, "FULL", 100.0),
        ("uniform, homogeneous, one leaves", 10000, 100000, False, "leaves", 20.0),
        ("uniform, homogeneous, one joins", 10000, 100000, False, "joins", 20.0),
        ("uniform, heterogeneous, FULL", 5000, 250000, True, "FULL", 2000.0),
    ):
        m, cell = worst(members, partitions, het, scenario)
        if m is None or cell is None:
            continue
        ok = m.ms is not None and m.ms <= goal_ms
        rows.append(
            [
                label,
                f"{members:,} × {partitions:,} (worst of the topic counts: {cell.topics})",
                f"{fmt_ms(m)} ms (median {m.median_ms:.1f}, CPU {m.cpu_ms:.1f})",
                f"≤ {goal_ms:g} ms",
                "yes" if ok else "**no**",
            ]
        )
    for cell in cells:
        if cell != COMPARISON_CELL:
            continue
        sticky = peers.get((cell, "sticky"))
        mine = ours[(cell, "uniform")]
        for scenario in SCENARIOS:
            if sticky is None:
                continue
            theirs, ours_m = sticky[scenario], mine[scenario]
            if ours_m.ms is None:
                continue
            if theirs.ms is None:
                bound = PEER_TIMEOUT_FOR_REPORT[0] * 1000 / ours_m.ms
                measured = (
                    f"{fmt_ms(ours_m)} ms vs {theirs.note or 'did not finish'} = more than "
                    f"{bound:,.0f}×; kafka-python's balance and movement unknown (did not finish)"
                )
                met = "yes (speed); balance/movement not measurable" if bound >= 100 else "**no**"
            else:
                speedup = theirs.ms / ours_m.ms
                no_worse = (ours_m.spread or 0) <= (theirs.spread or 0) and (ours_m.moved or 0) <= (
                    theirs.moved or 0
                )
                measured = (
                    f"{fmt_ms(ours_m)} ms vs {fmt_ms(theirs)} = {speedup:,.0f}×; "
                    f"moved {fmt_int(ours_m.moved)} vs {fmt_int(theirs.moved)}; "
                    f"max−min {fmt_int(ours_m.spread)} vs {fmt_int(theirs.spread)}"
                )
                met = "yes" if speedup >= 100 and no_worse else "**no**"
            rows.append(
                [
                    f"uniform vs kafka-python sticky, {scenario}",
                    "1,000 × 10,000, 10 topics, homogeneous",
                    measured,
                    "≥ 100×, balance and movement no worse",
                    met,
                ]
            )
    if not rows:
        return []
    from bench._report import table

    return ["### Targets", "", table(["target", "cell", "measured", "goal", "met"], rows), ""]


if __name__ == "__main__":
    raise SystemExit(main())
