"""Rack-aware assignment benchmark (``python bench/assignors.py --racks``): Kafka's assignor
benchmark shapes with 3 racks and 2-3 replicas per partition.

Members are spread over racks ``r0, r1, r2`` (member ``i`` in rack ``i % 3``); partition ``p``
of topic ``k`` has 2 or 3 replicas (a hash of ``(k, p)`` decides), in consecutive racks from one
the same hash picks. For every cell, assignor (uniform, range) and scenario (FULL, leaves,
joins, as in the main grid) it measures, on the same inputs with and without partition racks
(the rack-blind assignor is the peer: same code, racks removed):

* the time of one ``assign`` (best of 15-41 runs, CPU time too, each run paired with one of the
  rack-blind ``assign``: :func:`time_pair`) and the ratio to rack-blind;
* the share of assigned partitions with a replica in their member's rack, with racks, without,
  and the *best possible*: for uniform in a homogeneous group the best any assignment with
  member sizes q or q+1 can reach, exactly (a max flow between the partitions, grouped by
  their racks, and the racks, with q per member of a rack plus one of the r extras per member:
  members of one rack are interchangeable, so the flow is exact at any size); otherwise a bound,
  the best for the member sizes of the result (the same flow between partitions and (subscription,
  rack) pairs; range's co-partitioning is not in it, so it is an upper bound for range);
* partitions moved on a leave and on a join (owner changes against the installed target), and
  max-min of member sizes;
* for uniform in homogeneous groups, leaves and joins: the time of ``assign_changes`` (the
  incremental path the coordinator takes, from the summary it keeps), with and without racks,
  checked equal to ``assign``'s result.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import hashlib
import itertools
import os
import statistics
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, TypeVar

from assignors.api import (
    GroupSpec,
    PartitionAssignor,
    SubscriptionType,
    TopicMetadata,
)
from assignors.loads import member_loads
from assignors.racks import RackNodes, count_owned, count_rack_local, relevant_racks
from assignors.range import RangeAssignor
from assignors.summary import summarize
from assignors.uniform import UniformAssignor
from bench.assignors import (
    Assignment,
    Cell,
    Timing,
    build_topics,
    make_spec,
    member_id,
    moved,
    spread,
    subscriptions,
    time_call,
)

T = TypeVar("T")

RACKS = ("r0", "r1", "r2")
MEMBERS = (100, 500, 1000, 5000, 10000)
TOPICS = (10, 100, 1000)
RATIO = 10
QUICK_MEMBERS = (100, 1000)
QUICK_TOPICS = (10, 100)
SCENARIOS = ("FULL", "leaves", "joins")
BIG = Cell(10000, RATIO, 10, False)  # the "within 2x" target's shape (worst of the topic counts)


def replica_racks(k: int, n: int) -> dict[int, frozenset[str]]:
    """The racks of the replicas of the ``n`` partitions of the ``k``-th topic (in topic id
    order): 2 or 3 consecutive racks, from a hash of ``(k, p)``; equal sets shared."""
    out = {}
    for p in range(n):
        h = hashlib.blake2b(f"{k}/{p}".encode(), digest_size=2).digest()
        out[p] = _SETS[(h[0] % 3, 2 + h[1] % 2)]
    return out


_SETS = {
    (first, replicas): frozenset(RACKS[(first + j) % 3] for j in range(replicas))
    for first in range(3)
    for replicas in (2, 3)
}


def racked(metadata: Mapping[str, TopicMetadata]) -> dict[str, TopicMetadata]:
    """The topics with 2-3 replicas per partition over the 3 racks (shared frozensets, as the
    coordinator's registry has them)."""
    return {
        t: dataclasses.replace(m, partition_racks=replica_racks(k, m.num_partitions))
        for k, (t, m) in enumerate(sorted(metadata.items()))
    }


def rack_of_member(member_id: str) -> str:
    """Members in racks by their index (member-00007 -> r1); any other (a newcomer) in r0."""
    index = int(member_id.rsplit("-", 1)[1]) if member_id[-1].isdigit() else 0
    return RACKS[index % 3]


def with_racks(spec: GroupSpec) -> GroupSpec:
    """Members in racks by their index (:func:`rack_of_member`)."""
    members = {
        m: dataclasses.replace(s, rack_id=rack_of_member(m)) for m, s in spec.members.items()
    }
    return dataclasses.replace(spec, members=members)


def local_share(spec: GroupSpec, topics: Mapping[str, TopicMetadata], result: Assignment) -> float:
    assigned = sum(len(ps) for a in result.values() for ps in a.values())
    local = sum(count_rack_local(spec.members[m].rack_id, a, topics) for m, a in result.items())
    return local / assigned if assigned else 1.0


def best_share(
    spec: GroupSpec,
    topics: Mapping[str, TopicMetadata],
    result: Assignment,
    balanced: bool,
) -> float:
    """The best share (module doc): a max flow (networkx) between the partitions, grouped by
    (topic, racks), and (subscription, rack) pairs — with q per member and one of r extras
    each when ``balanced`` (homogeneous uniform), else the result's sizes."""
    import networkx as nx

    g: nx.DiGraph[Any] = nx.DiGraph()
    classes: dict[tuple[frozenset[str], str | None], list[str]] = {}
    for m, s in spec.members.items():
        classes.setdefault((s.subscribed_topic_ids, s.rack_id), []).append(m)
    total = 0
    for t, metadata in topics.items():
        for racks, partitions in metadata.partitions_by_racks().items():
            g.add_edge("source", ("p", t, racks), capacity=len(partitions))
            total += len(partitions)
            for subs, rack in classes:
                if t in subs and rack in racks:
                    g.add_edge(("p", t, racks), ("c", subs, rack), capacity=len(partitions))
    if balanced:
        q, r = divmod(total, len(spec.members))
        g.add_edge("extra", "sink", capacity=r)
    for key, members in classes.items():
        if balanced:
            g.add_edge(("c", *key), "sink", capacity=q * len(members))
            g.add_edge(("c", *key), "extra", capacity=len(members))
        else:
            size = sum(sum(map(len, result[m].values())) for m in members)
            g.add_edge(("c", *key), "sink", capacity=size)
    if "source" not in g or "sink" not in g:
        return 1.0
    assigned = sum(len(ps) for a in result.values() for ps in a.values())
    return nx.maximum_flow_value(g, "source", "sink") / assigned if assigned else 1.0


@dataclasses.dataclass(frozen=True, slots=True)
class Row:
    cell: Cell
    assignor: str
    scenario: str
    racks: Timing
    blind: Timing
    share: float
    blind_share: float
    best: float
    exact: bool
    moved: int | None
    blind_moved: int | None
    spread: int
    racks_inc: Timing | None = None
    """uniform, homogeneous, leaves and joins: ``assign_changes`` with the summary."""
    blind_inc: Timing | None = None


def measure(assignor_name: str, assignor: PartitionAssignor, cell: Cell) -> list[Row]:
    ids, plain = build_topics(cell)
    topics = racked(plain)
    subs = subscriptions(cell, ids)
    everyone = [(member_id(i), subs[i]) for i in range(cell.members)]
    leaver = cell.members // 2
    survivors = everyone[:leaver] + everyone[leaver + 1 :]
    newcomer = ("member-new", frozenset(subs[leaver]))
    rows: list[Row] = []
    before: dict[str, Assignment] = {"racks": {}, "blind": {}}
    plans = (("FULL", everyone), ("leaves", survivors), ("joins", [*survivors, newcomer]))
    for scenario, members in plans:
        results: dict[str, Assignment] = {}
        incremental: dict[str, Timing] = {}
        kinds = (("racks", topics), ("blind", plain))
        specs = {
            kind: with_racks(make_spec(members, before[kind], not cell.heterogeneous))
            for kind, _ in kinds
        }
        gc.collect()
        gc.freeze()
        try:
            timings, made = time_pair(
                partial(assignor.assign, specs["racks"], topics),
                partial(assignor.assign, specs["blind"], plain),
            )
            for (kind, _), result in zip(kinds, made, strict=True):
                results[kind] = result.members
            if (
                isinstance(assignor, UniformAssignor)
                and before["racks"]
                and spec_homogeneous(specs["racks"])
            ):
                incremental["racks"], incremental["blind"] = time_changes(
                    assignor, specs, dict(kinds), results
                )
        finally:
            gc.unfreeze()
        spec = with_racks(make_spec(members, {}, not cell.heterogeneous))
        exact = assignor_name == "uniform" and not cell.heterogeneous
        rows.append(
            Row(
                cell=cell,
                assignor=assignor_name,
                scenario=scenario,
                racks=timings[0],
                blind=timings[1],
                share=local_share(spec, topics, results["racks"]),
                blind_share=local_share(spec, topics, results["blind"]),
                best=best_share(spec, topics, results["racks"], exact),
                exact=exact,
                moved=None if scenario == "FULL" else moved(before["racks"], results["racks"]),
                blind_moved=None
                if scenario == "FULL"
                else moved(before["blind"], results["blind"]),
                spread=spread(results["racks"]),
                racks_inc=incremental.get("racks"),
                blind_inc=incremental.get("blind"),
            )
        )
        before = results
    return rows


PAIRS_MIN = 15
PAIRS_MAX = 41
PAIRS_SECONDS = 1.0
"""Calls of ``assign`` with racks and without, timed in alternation (:func:`time_pair`): at
least ``PAIRS_MIN`` pairs, then more while they took less than ``PAIRS_SECONDS`` in all, at
most ``PAIRS_MAX``."""


def time_pair(
    racks: Callable[[], T],
    blind: Callable[[], T],
    *,
    warmup: int = 1,
    pairs_min: int = PAIRS_MIN,
    pairs_max: int = PAIRS_MAX,
    block: int = 1,
) -> tuple[tuple[Timing, Timing], tuple[T, T]]:
    """The timings of two calls made in alternation, ``block`` calls of one, then as many of
    the other, after ``warmup`` of each: on a shared machine a slow moment then slows both
    alike, where timed one after the other, each in its own window, it could land on either
    and tilt their ratio (runs of this benchmark at 478926d put the same cell at 1.75× and
    2.03×). Calls of microseconds go in blocks, each block a warm loop, as the coordinator
    calls them (one call of each at a time leaves each to run in caches the other filled,
    which slows the shorter more: the rack-blind 10-topic leave's `assign_changes` took 18
    µs so, against 13 warm). The last result of each."""
    made = [racks(), blind()]
    for _ in range(warmup - 1):
        made = [racks(), blind()]
    walls: tuple[list[float], list[float]] = ([], [])
    cpus: tuple[list[float], list[float]] = ([], [])
    while len(walls[0]) < pairs_min or (
        sum(walls[0]) + sum(walls[1]) < PAIRS_SECONDS and len(walls[0]) < pairs_max
    ):
        for k, call in enumerate((racks, blind)):
            for _ in range(block):
                cpu, wall = time.process_time(), time.perf_counter()
                made[k] = call()
                walls[k].append(time.perf_counter() - wall)
                cpus[k].append(time.process_time() - cpu)
    timings = [
        Timing(min(w) * 1000, statistics.median(w) * 1000, statistics.median(c) * 1000)
        for w, c in zip(walls, cpus, strict=True)
    ]
    return (timings[0], timings[1]), (made[0], made[1])


@dataclasses.dataclass(frozen=True, slots=True)
class Split:
    """Where ``uniform``'s time goes on a leave in a homogeneous ``cell``: one ``assign`` with
    partition racks and without, and, on the inputs with racks, the exact count of the held
    partitions by (racks, holder's rack) alone (:func:`~assignors.racks.count_owned`: what
    ``assign`` does first with racks, and the rack-blind computation does not do at all)."""

    cell: Cell
    racks: Timing
    blind: Timing
    count: Timing


def split_leave(cell: Cell) -> Split:
    """The :class:`Split` of the leave of the grid (the middle member leaves the FULL target)."""
    ids, plain = build_topics(cell)
    topics = racked(plain)
    subs = subscriptions(cell, ids)
    everyone = [(member_id(i), subs[i]) for i in range(cell.members)]
    leaver = cell.members // 2
    survivors = everyone[:leaver] + everyone[leaver + 1 :]
    assignor = UniformAssignor()
    timings: dict[str, Timing] = {}
    for kind, metadata in (("racks", topics), ("blind", plain)):
        full = assignor.assign(with_racks(make_spec(everyone, {}, True)), metadata).members
        spec = with_racks(make_spec(survivors, full, True))
        gc.collect()
        gc.freeze()
        try:
            timings[kind], _ = time_call(partial(assignor.assign, spec, metadata))
            if kind == "racks":
                timings["count"] = time_count(spec, metadata)
        finally:
            gc.unfreeze()
    return Split(cell, timings["racks"], timings["blind"], timings["count"])


def time_count(spec: GroupSpec, topics: Mapping[str, TopicMetadata]) -> Timing:
    """The time of :func:`~assignors.racks.count_owned` on ``assign``'s inputs, as ``assign``
    calls it (its nodes made anew each time; the members' loads, which ``assign`` has already
    summed, given)."""
    member_ids = sorted(spec.members)
    rack_of = [spec.members[m].rack_id for m in member_ids]
    topic_ids = sorted(topics)
    racks = relevant_racks(rack_of, topic_ids, topics)
    owners = spec.partition_owners
    loads = member_loads([spec.members[m].assignment for m in member_ids])

    def count() -> object:
        return count_owned(RackNodes(racks), member_ids, rack_of, owners, topic_ids, topics, loads)

    timing, counted = time_call(count)
    if counted is None:
        raise AssertionError("count_owned declined the coordinator's owners")
    return timing


def spec_homogeneous(spec: GroupSpec) -> bool:
    return spec.subscription_type is SubscriptionType.HOMOGENEOUS


CHANGES_WARMUP = 100
"""``assign_changes`` calls before the timed ones: the coordinator makes it on every change of a
group, in a process that runs for days, so it runs with its code specialised by Python 3.11's
adaptive interpreter — which takes a few dozen calls for a path of this length (a probe of the
10-topic leave with racks: 68 µs at call 2, 35 at call 26, 33 from call 30 on)."""
CHANGES_REPEATS = 200
CHANGES_BLOCK = 20
"""Timed calls of ``assign_changes`` with racks and without: 200 each, in alternating blocks of
20 (:func:`time_pair`)."""


def time_changes(
    assignor: UniformAssignor,
    specs: Mapping[str, GroupSpec],
    metadata: Mapping[str, Mapping[str, TopicMetadata]],
    wholes: Mapping[str, Assignment],
) -> tuple[Timing, Timing]:
    """The time of ``assign_changes`` with racks and without (``specs``, ``metadata`` and
    ``wholes`` by "racks" and "blind"), from the summary the coordinator would keep (computed
    here, not timed), in alternating blocks (:func:`time_pair`); the changes laid over the
    current targets must be ``wholes``."""
    calls = []
    for kind in ("racks", "blind"):
        spec = specs[kind]
        given = dataclasses.replace(spec, target_summary=summarize(spec, metadata[kind]))
        calls.append(partial(assignor.assign_changes, given, metadata[kind]))
    timings, changed = time_pair(
        calls[0],
        calls[1],
        warmup=CHANGES_WARMUP,
        pairs_min=CHANGES_REPEATS,
        pairs_max=CHANGES_REPEATS,
        block=CHANGES_BLOCK,
    )
    for kind, changes in zip(("racks", "blind"), changed, strict=True):
        if changes is None:
            raise AssertionError("assign_changes declined a tidy homogeneous group")
        merged = {m: changes.get(m, s.assignment) for m, s in specs[kind].members.items()}
        if merged != wholes[kind]:
            raise AssertionError("assign_changes differs from assign")
    return timings


def grid(quick: bool) -> list[Cell]:
    cells = []
    for heterogeneous in (False, True):
        for members in QUICK_MEMBERS if quick else MEMBERS:
            for topics in QUICK_TOPICS if quick else TOPICS:
                cell = Cell(members, RATIO, topics, heterogeneous)
                if cell.partitions_per_topic >= 1:
                    cells.append(cell)
    return cells


def run(args: argparse.Namespace) -> int:
    from bench._report import machine, publish

    started = time.perf_counter()
    load_start = os.getloadavg()[0]
    assignors: list[tuple[str, PartitionAssignor]] = [
        ("uniform", UniformAssignor()),
        ("range", RangeAssignor()),
    ]
    cells = grid(args.quick)
    print(f"rack-aware benchmark: {len(cells)} cells; {machine()}", flush=True)
    rows: list[Row] = []
    for cell in cells:
        for name, assignor in assignors:
            for row in measure(name, assignor, cell):
                rows.append(row)
                print(
                    f"  {name:<8} {cell.members:>5} x {cell.partitions:<7} {cell.topics:<4} "
                    f"{cell.kind:<13} {row.scenario:<6} {row.racks.best_ms:8.2f} ms "
                    f"(blind {row.blind.best_ms:7.2f}) local {row.share:.3f} "
                    f"(blind {row.blind_share:.3f}, best {row.best:.3f}) moved {row.moved} "
                    f"(blind {row.blind_moved})",
                    flush=True,
                )
    members = QUICK_MEMBERS[-1] if args.quick else BIG.members
    splits = []
    for topic_count in QUICK_TOPICS if args.quick else TOPICS:
        split = split_leave(Cell(members, RATIO, topic_count, False))
        splits.append(split)
        print(
            f"  split    {members:>5} x {split.cell.partitions:<7} {topic_count:<4} leave: racks "
            f"{split.racks.cpu_ms:.2f} ms CPU, blind {split.blind.cpu_ms:.2f}, count "
            f"{split.count.cpu_ms:.2f}",
            flush=True,
        )
    load = (load_start, os.getloadavg()[0])
    markdown = report(rows, splits, args, load)
    publish("assignors-racks", markdown, time.perf_counter() - started, not args.no_write)
    return 0


def _ratio(row: Row) -> float:
    """Time with racks over time without, by CPU time (the median of the runs): other work on
    the shared cores inflates wall times at random, CPU time far less."""
    return row.racks.cpu_ms / row.blind.cpu_ms if row.blind.cpu_ms else float("inf")


def report(
    rows: list[Row], splits: list[Split], args: argparse.Namespace, load: tuple[float, float]
) -> str:
    from bench._report import machine, table

    command = "python bench/assignors.py --racks" + (" --quick" if args.quick else "")
    out = [
        "## Rack-aware assignment",
        "",
        (
            f"Command: `{command}` — {machine()}; load average {load[0]:.1f} at the start, "
            f"{load[1]:.1f} at the end (other work shares the 2 cores)."
        ),
        "",
        (
            "Kafka's benchmark shapes (members × 10 partitions per member, 10/100/1000 topics; "
            "heterogeneous: 5 buckets of members on their own fifth of the topics), 3 racks, "
            "members spread over them, 2 or 3 replicas per partition in consecutive racks. Each "
            "cell runs with partition racks and without them (the rack-blind result of the same "
            "assignor: the peer); *ms* is the best wall time of 15-41 runs of one `assign` (gc "
            "frozen), *CPU* the median CPU time of those runs in ms and *×* their ratio (what the "
            "targets judge: on the shared cores wall times are inflated at random); the runs with "
            "racks and without alternate, one of each at a time, so that a slow moment of the "
            "shared machine slows both alike (timed each in a window of its own, as before "
            "this run, the same cell came to 1.75× in one run and 2.03× in another), "
            "*local* the share of assigned partitions with a replica in their member's rack, "
            "*best* the best possible share — exact for uniform in homogeneous groups (a max flow "
            "over member sizes q or q+1: members of one rack are interchangeable, so it is exact "
            "at any size), an upper bound otherwise (the best for the result's member sizes; for "
            "range without its co-partitioning) — *moved* the partitions that changed owner "
            "on a leave / join, against the installed target. For uniform in homogeneous groups, "
            "*inc CPU* is the median CPU time in ms of `assign_changes` on the same leave or join "
            "(the incremental path the coordinator takes, from the target summary it keeps: "
            "built here, not timed), with and without racks, warm (100 calls, then the median "
            "of 200, in alternating blocks of 20 calls: each block a warm loop, as the "
            "coordinator calls it, and a slow moment of the machine shared); its result is "
            "checked equal to `assign`'s."
        ),
        "",
        (
            "Where the time goes with racks: FULL deals every partition through its rack's pool "
            "(the plan itself, on counts, takes well under a millisecond). `assign` after a "
            "leave or a join must first learn, for every held partition, which racks hold a "
            "replica and which rack its holder is in (`count_owned`, assignors/racks.py): per "
            "topic, the holders of its partitions in one C-level pass over the coordinator's "
            "owners (an `itemgetter` of the partitions in the order of their sets of racks, "
            "kept with the topic's metadata) and at once their racks (a second `itemgetter`, of "
            "the holders on the members' racks), a byte per partition, cut per set of racks and "
            "counted with `bytes.count` — which also checks that every owner is a member and "
            "every index in range. The table below times that count alone on the same inputs: most of the "
            "difference. In place it costs more than alone (its lookups reach every held "
            "partition's entry in the owners and its holder's id in no useful order, with the "
            "caches shared with the rest of the call): in probes of the 10-topic leave at "
            "a40ceb6 (median of 21, load 4.6–5.4), the rack-aware `assign` took 10.4–11.0 ms, "
            "4.8–5.2 ms of it without the count, against 5.8–6.1 ms for the whole rack-blind "
            "`assign` — whose own pass over the same indexes (checking their range) is two "
            "C-level reductions, `sum` and `max`, about 2 ms; the rest of the rack-aware "
            "`assign` (the members' loads and racks, the plan, the members that move) costs "
            "less than the whole rack-blind computation. Part of what is left is the input's "
            "layout, not the work: the leave's input is the FULL result, whose sets were built "
            "rack by rack, so the leave reads them out of member order (in a probe at d7e5e30, "
            "the same input rebuilt in member order took the members' loads from 2.2 to 1.5 ms "
            "and the leave 0.7 ms lower; the rack-blind FULL builds its sets in member order). "
            "Not adopted: skipping the lookups of the set of racks with the most partitions "
            "(each node's count of it from its members' loads less its other counts), as the "
            "check that those holders are members (a set of the member ids, `issuperset`) and "
            "the nodes' loads cost as much as the lookups saved with 2–3 replicas in 3 racks "
            "(10-topic leave: no gain; 3 replicas everywhere would gain); at 1,000 topics, "
            "joining the racks to the holders' by integer arithmetic into one key per "
            "partition (a `bytes.count` per key) instead of cutting the bytes per set of racks, "
            "or gathering small topics' holders to look them up in bigger chunks: no gain in "
            "one process. "
            "Not adopted before (against the count at 3d663e1, which looked up each index's racks "
            "in a bytes object and combined them with the holder's by integer arithmetic): a numpy "
            "count (the indexes and "
            "the owners' member indexes packed into 32-bit arrays with `struct`, racks "
            "gathered and tallied with `bincount`, the members' loads from the same tally) "
            "took 5–10% off the whole `assign` at 10,000 × 100,000 (10-topic leave: 2.35–2.46× "
            "against 2.52–2.53× in the same session), added a fixed cost per call (100 × 1,000: "
            "0.25 ms against 0.21), and numpy would be a new dependency, imported on first use "
            "(60–200 ms): packing 100,000 Python integers and looking up 100,000 owners is the "
            "floor either way. Not adopted either: counting from the "
            "members' sets, each set's masks kept in a memo with its topic's metadata (the sets are "
            "immutable; a call after a change finds all but the changed members'), one C-level pass "
            "and `bytes.count` per node: with every set found, the 10,000 × 100,000 leave came to "
            "1.89–2.03× (the count 2.8–3.3 ms; load 2.6→1.3), but a call on sets not seen yet (the first "
            "after a load or a FULL: each set looked up and stored) to 4–5× (27–36 ms), the memo "
            "holds as many sets again as the target, and the coordinator's homogeneous groups take "
            "`assign_changes` anyway. `range` codes the members' racks once per list of "
            "subscribers, and what its co-partitioned groups have in common is made once per "
            "computation: the nodes and masks per set of relevant racks, the indexes and the "
            "one-index sets per partition count (five buckets of 100 topics deal 1,000 one-index "
            "sets, not 5,000, as the rack-blind ranges of equal groups are one list). It adds "
            "each rack's bits up over the group's topics as the lanes of one integer (one or two "
            "topics: both masks in one byte, one `bytes.translate`), plans on the types of "
            "indexes and, when the keys (type and rack-blind owner's node) fit a byte, gives each "
            "index its node by one `bytes.translate` of its key with a table that changes at a "
            "few positions (found by bisections on `bytes.count`): no sort; each node's indexes "
            "are then dealt to its members, a run each in member order, by the C kernel below "
            "(before it, picked with `compress` and dealt with `map(next, …)`). Both paths, with racks and without, group the topics into "
            "co-partitioned groups first; members whose topics are exactly one group of three topics "
            "or more get their dict in one C-level call (`dict.fromkeys`), the others topic by topic "
            "(adopted for the rack-blind path at the same time: probe at 7e04f65, load 1.2-2.4, "
            "homogeneous 10/100/1,000 topics 10.8/8.5/10.6 → 7.3/4.4/4.6 ms, heterogeneous 100 topics "
            "16.6 → 12.2 ms; before, only the rack-aware path had it, which made its ratios look "
            "better than its placement earned). After a leave or a join, a member whose placed "
            "run is its current set gets that very set back (`len` and `issuperset` against the "
            "run, one Python call per member), so the co-partitioned groups the change leaves as "
            "they were make no new sets (10,000 × 100,000 heterogeneous, 10 topics, at 4cb6acb "
            "against 68483d5, `measure` in 7 processes each, medians, load 1.4–2.4: leaves "
            "22.8 → 18.8 ms, 2.68× → 2.09× of rack-blind; joins 22.4 → 20.1 ms, 3.13× → 2.63×; "
            "young collections per call 25.5 → 14). Its heterogeneous groups with 10 topics stayed "
            "above 2× all the same in Python (the C kernel below brought them under it): the "
            "five buckets' co-partitioned groups have the same partition and member counts, so "
            "the rack-blind assignor builds one list of 2,000 ranges and shares it among the "
            "five, while with racks each group's topics have their own replicas' racks (no "
            "group's placement can stand for another's) and its members get their own indexes: "
            "10,000 frozensets instead of 2,000 (9,994 of them distinct). Building those alone, "
            "with no placement at all (each group given consecutive ranges), takes FULL to "
            "2.2–2.4× of rack-blind (15.2–17.1 ms against 6.6–7.2, three processes at 4cb6acb; "
            "2.1× at a55a1a4, 1.92× with the garbage collector off), against 3.2× with the "
            "placement; the garbage collector, woken by the frozensets (25.5 young and 2.3 "
            "middle collections per `assign` against 15.5 and 1.4 rack-blind), takes 5.8 ms of "
            "it. A leave or a join handed every member its current set with no placement at all "
            "takes 0.81–0.88× and 1.3× (7.1–7.3 and 8.7–8.9 ms): the rest is the placement, which a "
            "group left as it was needs as much as any (its current sets are known to be its "
            "placement only once that is computed): per call, the members' racks and current "
            "sets 1.2 ms, each index's key and their tally 1.2, the plan 0.3, each index's node "
            "0.4, each node's indexes picked (`compress`, three passes of 10,000) and dealt in "
            "runs 2.3, the runs compared with the current sets 1.9. Not adopted: keeping each "
            "group's last placement with its topics' metadata and handing it back when the "
            "members' current sets are that very placement (it would skip the placement of "
            "the unchanged groups, but a repeated call would then time a cache, not the "
            "assignment); giving a member back its whole input mapping when all its sets come "
            "back, as `uniform` does (slower: in one process, leaves 16.7 → 18.2 ms, joins 17.9 "
            "→ 19.6); comparing in C-level passes over materialised node pools, then dealing "
            "the changed runs again (5.5–5.9 ms against 5.05 for the per-member call, 10,000 "
            "members all kept); each set built from a temporary `set` (a 16-slot table instead "
            "of 32: half the memory the collector reads) or the indexes kept in a tuple (which "
            "the collector stops tracking): within noise. Adopted later (at 672fef3): runs of "
            "five to seven indexes made through a dict (`dict.fromkeys`), whose frozenset is "
            "sized at once (16 slots, against 32 after the rehash a tuple's fifth index "
            "forces): FULL 8% less CPU (in-process A/B, the same inputs alternating with the "
            "code before, collector on as here, medians of 40 calls, three runs: 0.909–0.954 "
            "of before), leaves and joins unchanged. Not adopted then: each node's members "
            "compared C-level (`frozenset.issuperset` over the node's runs, then their sizes "
            "and types), a node whose sets all hold give them back whole, the others member "
            "by member — 5% faster on one group in a warm loop, but 8–10% slower in place "
            "(leaves and joins, in-process A/B, twice: the extra passes over 10,000 current "
            "sets, cold there, cost more than the Python call they save); in a warm loop a "
            "group left as it was takes 0.68 ms to place and compare (its pools picked with "
            "`compress` 0.29, the runs cut and dealt 0.11, compared 0.28), 0.9–1.0 ms in "
            "place. Probes at 470876c on a quiet machine "
            "(load 0.3–1.2, one process, medians of 21): with the automatic collector off and "
            "the previous result freed before each call, FULL is still 16.5 ms against 5.1 "
            "(3.2×), and 10,000 frozensets of five indexes, kept alive, take 2.6–5.6 ms to make "
            "against 0.85 for 2,000: the sets are most of the difference. Not adopted from "
            "those probes: each node's indexes ordered and cut into runs with numpy (a stable "
            "`argsort` by node, the runs gathered as rows and turned into lists) instead of "
            "`compress` (16.1 ms against 15.3: the Python integers and the sets are the cost, "
            "not the picking); a member handed its rack-blind range (the shared frozenset) when "
            "every index of it stays in its node (14–25 of each group's 2,000 ranges do: to "
            "make every partition local the plan moves 60% of the indexes out of their "
            "rack-blind owner's node). "
            "`assign_changes`, the path the coordinator takes for a racked "
            "homogeneous `uniform` group, takes the held partitions by racks and the members "
            "by rack and load from the summary (`held_by_racks`, `members_by_rack`) and visits "
            "only the members that change (docs/assignors.md): no held partition is counted. "
            "What it costs beyond the rack-blind `assign_changes` is fixed work per "
            "call, none of it per partition (before the C kernels below; 10,000 × 100,000, 10 topics, a leave, probes "
            "after 567e9ab: about 33 µs against 18, timed step by step): reading the summary "
            "into the roster (the nodes, the buckets by node; about 2.5 µs), counting the "
            "kinds (the held ones from `held_by_racks`, a few free partitions' masks from one "
            "byte per partition kept with the topic's metadata; 2–4 µs), the plan (its "
            "weights and the greedy start's visiting order kept per (nodes, kinds) across "
            "calls, the greedy start itself and the extras each node takes from it; about 4 "
            "µs), which members take the extras (up to 2 µs) and the moves (up to 5 µs: the "
            "nodes that give partitions up, the members above and below their count found per "
            "node from the buckets, what each node receives); the members that take or give "
            "partitions cost what they cost rack-blind. Not adopted: memoising the plan by "
            "its inputs (they change with every change: a benchmark repeating one input would "
            "find it every time, the coordinator never); keeping the nodes' per-topic maps of "
            "racks to masks across computations (keyed by topic id they would outlive "
            "metadata replaced under the same id, and keep it alive); a plan shortcut placing "
            "each kind whole at its first best node from per-node sums (estimated under 1 µs "
            "against the greedy start's own loop over the kinds); one mask for a leaver's "
            "free partitions of one topic when they share one set of racks (no gain in "
            "probes: 34.7 → 34.2 ± 0.7 µs); the buckets' highest and lowest loads kept to "
            "skip their scans (measured: +1.0 µs on a leave and +2.0 µs on a join, the two "
            "C-level passes costing more than the scans they skip); the topics with free "
            "partitions filtered C-level and the receiving node's runs made by map and filter "
            "instead of comprehensions (no gain in A/B probes). The table times it warm, "
            "as a coordinator runs it (100 calls first, then the median of 200; both paths "
            "alike): Python 3.11's adaptive interpreter specialises a path of this length "
            "only after some 30 calls (in a probe, calls 2–26 of the 10-topic leave took 68 "
            "µs down to 35, settling at 33 µs from call 30; the shorter rack-blind path "
            "settles within 10), so timed after one warm-up, as `assign` is, the 10-topic "
            "leave came to 1.9–2.0× against 1.7–1.8× warm. "
            "Heterogeneous groups always go through `assign` (`assign_changes` declines them); "
            "there each class whose topics only it subscribes reads their holders from the "
            "owners and counts them as above (`count_owned_by_node`: the owners are checked to "
            "be the class's members as they are counted), other topics' holders are read "
            "member by member."
        ),
        "",
        (
            "C kernels (assignors/_placement.c, since 715a2f0 and 679654a; built by pip, each "
            "beside the Python it stands in for, which is kept as its reference: "
            "tests/unit/test_placement_native.py compares the two on random inputs, the sets "
            "made alike down to their iteration order). What was left in pure Python was no "
            "longer the work but the interpreter's share of it: making 10,000 frozensets of a "
            "few indexes each one Python step at a time, and a plan of a few dozen steps "
            "between two small changes. `range`: each node's indexes dealt to its members "
            "(one counting pass finds each node's indexes; each member's run is compared "
            "with its current set and made into a set there, through a reused dict for runs "
            "of five to seven as the Python does; the sets it makes hold only integers and "
            "are not tracked by the garbage collector, which therefore never reads the "
            "thousands of them a target holds) and the keys' tally. 10,000 × 100,000 "
            "heterogeneous, 10 topics, in probes at 715a2f0 (`measure`, load 0.4–1.9): FULL "
            "8.7–9.1 ms against 5.0–5.4 rack-blind, 1.69–1.73× (3.12× before, in the last "
            "published run); leaves 1.25–1.30× (2.00×); joins 1.53× (2.46×). `uniform`'s "
            "incremental path: the plan's greedy start (`plan._greedy`) and the dealing to "
            "the members below their count (`_ClassSettle._fill`) — the 10-topic leave 30.8 "
            "→ 24.7–25.5 µs against 13.5–13.9 rack-blind (2.20× → 1.83×), the join 30.8 → "
            "26.8 µs against 14.4–14.8 (1.99× → 1.84×), probes at 679654a (`time_changes`, "
            "warm, medians of 201). What stays in Python is the plan's cycle cancelling "
            "(only when the greedy start is not optimal), the counting, the roster and the "
            "moves: per partition it is C-level already."
        ),
        "",
    ]
    out += targets(rows)
    out += splits_table(splits)
    for assignor in ("uniform", "range"):
        for heterogeneous in (False, True):
            body = []
            inc = assignor == "uniform" and not heterogeneous
            for r in rows:
                if r.assignor != assignor or r.cell.heterogeneous != heterogeneous:
                    continue
                extra = [_cpu(r.racks_inc, 3), _cpu(r.blind_inc, 3)] if inc else []
                body.append(
                    [
                        f"{r.cell.members:,}",
                        f"{r.cell.partitions:,}",
                        r.cell.topics,
                        r.scenario,
                        f"{r.racks.best_ms:.2f}",
                        f"{r.blind.best_ms:.2f}",
                        f"{r.racks.cpu_ms:.2f}",
                        f"{r.blind.cpu_ms:.2f}",
                        f"{_ratio(r):.2f}",
                        f"{r.share:.3f}",
                        f"{r.blind_share:.3f}",
                        f"{r.best:.3f}{'' if r.exact else ' ≤'}",
                        "—" if r.moved is None else f"{r.moved:,}",
                        "—" if r.blind_moved is None else f"{r.blind_moved:,}",
                        r.spread,
                        *extra,
                    ]
                )
            kind = "heterogeneous" if heterogeneous else "homogeneous"
            out += [
                f"### {assignor}, {kind}",
                "",
                table(
                    [
                        "members",
                        "partitions",
                        "topics",
                        "scenario",
                        "racks ms",
                        "blind ms",
                        "racks CPU",
                        "blind CPU",
                        "× (CPU)",
                        "local",
                        "blind local",
                        "best",
                        "moved",
                        "blind moved",
                        "max−min",
                        *(["racks inc CPU", "blind inc CPU"] if inc else []),
                    ],
                    body,
                ),
                "",
            ]
    return "\n".join(out)


def targets(rows: list[Row]) -> list[str]:
    body: list[list[Any]] = []

    def worst(assignor: str, scenario: str, heterogeneous: bool) -> Row | None:
        found = [
            r
            for r in rows
            if r.assignor == assignor
            and r.scenario == scenario
            and r.cell.members == BIG.members
            and r.cell.partitions == BIG.partitions
            and r.cell.heterogeneous == heterogeneous
        ]
        return max(found, key=_ratio) if found else None

    for assignor, heterogeneous in itertools.product(("uniform", "range"), (False, True)):
        for scenario in SCENARIOS:
            r = worst(assignor, scenario, heterogeneous)
            if r is None:
                continue
            body.append(
                [
                    f"{assignor}, {r.cell.kind}, {scenario}: time vs rack-blind",
                    f"{BIG.members:,} × {BIG.partitions:,} (worst of the topic counts: "
                    f"{r.cell.topics})",
                    f"CPU {r.racks.cpu_ms:.1f} ms vs {r.blind.cpu_ms:.1f} ms = {_ratio(r):.2f}× "
                    f"(best wall {r.racks.best_ms:.1f} vs {r.blind.best_ms:.1f})",
                    "≤ 2×",
                    "yes" if _ratio(r) <= 2 else "no",
                ]
            )
    for scenario in SCENARIOS[1:]:
        r = worst_incremental(rows, scenario)
        if r is None or r.racks_inc is None or r.blind_inc is None:
            continue
        ratio = r.racks_inc.cpu_ms / r.blind_inc.cpu_ms if r.blind_inc.cpu_ms else float("inf")
        body.append(
            [
                f"uniform, homogeneous, {scenario}, `assign_changes`: time vs rack-blind "
                "`assign_changes` (and vs rack-blind `assign`)",
                f"{BIG.members:,} × {BIG.partitions:,} (worst of the topic counts: "
                f"{r.cell.topics})",
                f"CPU {r.racks_inc.cpu_ms * 1000:.1f} µs vs {r.blind_inc.cpu_ms * 1000:.1f} µs = "
                f"{ratio:.2f}× (vs rack-blind `assign`'s {r.blind.cpu_ms:.2f} ms: "
                f"{r.racks_inc.cpu_ms / r.blind.cpu_ms:.3f}×)",
                "≤ 2×",
                "yes" if ratio <= 2 else "no",
            ]
        )
    exact = [r for r in rows if r.exact]
    short = [r for r in exact if r.share < r.best - 1e-9]
    body.append(
        [
            "uniform, homogeneous: locality = the best possible",
            f"{len(exact)} cells × scenarios",
            f"{len(exact) - len(short)} reach it"
            + (f"; lowest {min(r.share / r.best for r in short):.3f} of best" if short else ""),
            "all",
            "yes" if not short else "no",
        ]
    )
    worse = [r for r in rows if r.share < r.blind_share - 1e-9]
    body.append(
        [
            "locality never below rack-blind (both assignors)",
            f"{len(rows)} cells × scenarios",
            f"{len(rows) - len(worse)} not below; mean local {_mean(rows, 'share'):.3f} "
            f"vs rack-blind {_mean(rows, 'blind_share'):.3f}",
            "all",
            "yes" if not worse else "no",
        ]
    )
    from bench._report import table

    return [
        "### Targets",
        "",
        table(["target", "cell", "measured", "goal", "met"], body),
        "",
    ]


def splits_table(splits: list[Split]) -> list[str]:
    from bench._report import table

    body = [
        [
            f"{s.cell.members:,} × {s.cell.partitions:,}",
            s.cell.topics,
            f"{s.racks.cpu_ms:.2f}",
            f"{s.blind.cpu_ms:.2f}",
            f"{s.racks.cpu_ms / s.blind.cpu_ms:.2f}",
            f"{s.count.cpu_ms:.2f}",
            f"{s.racks.cpu_ms - s.count.cpu_ms:.2f}",
            f"{(s.racks.cpu_ms - s.count.cpu_ms) / s.blind.cpu_ms:.2f}",
        ]
        for s in splits
    ]
    return [
        "### Where a leave's time goes (uniform, homogeneous)",
        "",
        "Median CPU ms of one `assign` with racks and without, and of the exact count of the "
        "held partitions by racks alone (`count_owned`, on the inputs with racks); *rest*: "
        "with racks, less the count.",
        "",
        table(
            [
                "members × partitions",
                "topics",
                "racks CPU",
                "blind CPU",
                "×",
                "count CPU",
                "rest CPU",
                "rest / blind",
            ],
            body,
        ),
        "",
    ]


def worst_incremental(rows: list[Row], scenario: str) -> Row | None:
    found = [
        r
        for r in rows
        if r.racks_inc is not None
        and r.blind_inc is not None
        and r.scenario == scenario
        and r.cell.members == BIG.members
        and r.cell.partitions == BIG.partitions
    ]
    return max(found, key=lambda r: r.racks_inc.cpu_ms / r.blind_inc.cpu_ms) if found else None  # type: ignore[union-attr]


def _cpu(t: Timing | None, digits: int = 2) -> str:
    return "—" if t is None else f"{t.cpu_ms:.{digits}f}"


def _mean(rows: list[Row], field: str) -> float:
    return sum(getattr(r, field) for r in rows) / len(rows) if rows else 0.0
