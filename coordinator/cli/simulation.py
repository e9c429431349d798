"""``kip848 simulate``: run seeded simulations (or the exhaustive explorer) and report.

    kip848 simulate --seed N --steps K --members M [--partitions P] [--faults LIST|all|none]
                    [--topics T] [--static S] [--classic N --protocol eager|cooperative|mixed]
                    [--assignment-interval-ms I [--no-park]] [--count C] [--quiet]
                    [--groups G] [--coordinator-partitions P]
    kip848 simulate --explore --members M --partitions P [--depth D] [--max-states S]
                    [--batching] [--offload [--assignor-failures]] [--restarts] [--park]

Exit status: 0 if every invariant held, 1 on a violation (the report names the invariant, the
seed and step, dumps the state and the last events, and prints the command that reproduces it),
2 on bad arguments.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from coordinator.cli.argtypes import INT32_MAX, INT64_MAX, INT64_MIN, int_in
from coordinator.routing import MAX_PARTITIONS as MAX_COORDINATOR_PARTITIONS
from coordinator.sim.simulator import (
    ALL_FAULTS,
    CLASSIC_PROTOCOLS,
    EXTRA_FAULTS,
    FAULT_RATE,
    SimParams,
    Simulation,
    parse_faults,
)

# The scope one simulated group may have: every member, topic and partition lives in memory and
# the invariants are checked after every step.
MAX_MEMBERS = 1_000
MAX_TOPICS = 100
MAX_PARTITIONS = 10_000
MAX_DEPTH = 1_000
MAX_GROUPS = 100


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kip848 simulate", description=__doc__.split("\n\n")[0])
    for flag, (low, high, default, what) in NUMBERS.items():
        p.add_argument(f"--{flag}", type=int_in(low, high), default=default, help=what)
    p.add_argument(
        "--no-park",
        action="store_true",
        help="answer joins to a new group at once (Kafka) instead of parking them until the "
        "group's first target (the runtime's default with batching)",
    )
    p.add_argument(
        "--protocol",
        default="eager",
        help="rebalance protocol of the classic members: eager, cooperative or mixed (alternating)",
    )
    p.add_argument(
        "--faults",
        default="all",
        help=f"comma-separated faults, 'all' or 'none' (all = {','.join(ALL_FAULTS)}; also: {','.join(EXTRA_FAULTS)})",
    )
    p.add_argument(
        "--push",
        action="store_true",
        help="the coordinator pushes to KIP-848 members (ConsumerGroupWatch)",
    )
    p.add_argument("--quiet", action="store_true", help="one line per seed")
    p.add_argument(
        "--explore", action="store_true", help="exhaustive small-scope exploration instead"
    )
    p.add_argument(
        "--depth", type=int_in(1, MAX_DEPTH), default=12, help="explorer: maximum number of actions"
    )
    p.add_argument(
        "--max-states", type=int_in(1, INT32_MAX), default=300_000, help="explorer: state limit"
    )
    p.add_argument(
        "--fault-rate",
        type=float,
        default=FAULT_RATE,
        help="chance per step that a client or cluster fault is scheduled",
    )
    for flag, what in EXPLORER_FLAGS.items():
        p.add_argument(f"--{flag}", action="store_true", help=f"explorer: {what}")
    return p


NUMBERS: dict[str, tuple[int, int, int, str | None]] = {
    "seed": (INT64_MIN, INT64_MAX, 0, "random seed (first seed with --count)"),
    "steps": (1, INT32_MAX, 300, "steps with faults before the quiet phase"),
    "members": (1, MAX_MEMBERS, 3, None),
    "partitions": (1, MAX_PARTITIONS, 4, "partitions per topic"),
    "topics": (1, MAX_TOPICS, 2, None),
    "assignment-interval-ms": (
        0,
        15_000,
        0,
        "group.consumer.assignment.interval.ms (0: a target per change, no batching)",
    ),
    "offload-min-members": (
        0,
        MAX_MEMBERS,
        0,
        "compute targets of groups this big in a (simulated) worker (0: never)",
    ),
    "offload-delay-max-ms": (0, 60_000, 2_000, "how long a simulated worker may take"),
    "offload-inline-max-changed": (
        0,
        MAX_MEMBERS,
        0,
        "compute a change of at most this many members inline all the same "
        "(group.consumer.assignor.offload.inline.max.changed.members; 0: always offloaded)",
    ),
    "static": (0, MAX_MEMBERS, 1, "how many members are static"),
    "classic": (
        0,
        MAX_MEMBERS,
        0,
        "how many members (the last N) speak the classic protocol through the legacy bridge",
    ),
    "count": (1, INT32_MAX, 1, "run seeds seed..seed+count-1 (soak)"),
    "groups": (1, MAX_GROUPS, 1, "groups, each of --members clients, on the same topics"),
    "coordinator-partitions": (
        1,
        MAX_COORDINATOR_PARTITIONS,
        1,
        "coordinator partitions (offsets.topic.num.partitions) the groups are hashed onto",
    ),
}
"""The numeric options: (lowest, highest, default, help)."""

EXPLORER_FLAGS = {
    "batching": "assignment interval 1 s (batching)",
    "offload": "targets computed by a worker (late)",
    "restarts": "a coordinator restart anywhere (once)",
    "assignor-failures": "a worker's computation may fail (needs --offload)",
    "park": "joins parked until a new group's first target (implies --batching)",
    "turns": "two members' requests may queue and run in one turn of the coordinator's loop",
    "duplicates": "a request may be delivered twice (once per path)",
}
"""The explorer's switches (with --explore; --classic N makes every member classic)."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    if args.explore:
        return _explore(args)
    try:
        faults = parse_faults(args.faults)
    except ValueError as exc:
        parser.error(str(exc))
    if args.protocol not in CLASSIC_PROTOCOLS:
        parser.error(f"--protocol must be one of {', '.join(CLASSIC_PROTOCOLS)}")
    if not 0 <= args.classic <= args.members:
        parser.error("--classic must be between 0 and --members")
    worst = 0
    failed = 0
    for seed in range(args.seed, args.seed + args.count):
        params = SimParams(
            seed=seed,
            steps=args.steps,
            members=args.members,
            partitions=args.partitions,
            topics=args.topics,
            faults=faults,
            static_members=min(args.static, args.members),
            classic=args.classic,
            protocol=args.protocol,
            push=args.push,
            assignment_interval_ms=args.assignment_interval_ms,
            offload_min_members=args.offload_min_members,
            offload_delay_max_ms=args.offload_delay_max_ms,
            offload_inline_max_changed=args.offload_inline_max_changed,
            parks_joins=not args.no_park,
            fault_rate=args.fault_rate,
            groups=args.groups,
            coordinator_partitions=args.coordinator_partitions,
        )
        summary = Simulation(params).run()
        if args.quiet:
            status = "FAIL " + summary.violation.name if summary.violation else "ok"
            tts = "-" if summary.time_to_stable_ms is None else f"{summary.time_to_stable_ms}ms"
            print(
                f"seed {seed}: {status} steps={summary.steps} checks={summary.checks} "
                f"time-to-stable={tts} digest={summary.trace_digest}"
            )
        else:
            print(summary.render())
        if summary.violation is not None:
            failed += 1
            print(summary.violation.report)
        elif summary.time_to_stable_ms is not None:
            worst = max(worst, summary.time_to_stable_ms)
    if args.count > 1:
        print(
            f"{args.count} seeds x {args.steps} steps: {failed} failed; worst time to stable "
            f"{worst / 1000:.1f}s (bound {SimParams(steps=args.steps, classic=args.classic).liveness_bound_ms() / 1000:.1f}s)"
        )
    return 1 if failed else 0


def _explore(args: argparse.Namespace) -> int:
    from coordinator.sim.explore import explore

    if not 1 <= args.members <= 4 or not 1 <= args.partitions <= 6:
        print("explore: scope too large (members 1..4, partitions 1..6)", file=sys.stderr)
        return 2
    result = explore(
        members=args.members,
        partitions=args.partitions,
        depth=args.depth,
        max_states=args.max_states,
        batching=args.batching or args.park,
        offload=args.offload,
        restarts=args.restarts,
        parks_joins=args.park,
        assignor_failures=args.assignor_failures,
        classic=args.classic > 0,
        turns=args.turns,
        duplicates=args.duplicates,
    )
    print(result.render())
    if result.violation is not None:
        flags = "".join(
            f" --{flag}" for flag in EXPLORER_FLAGS if getattr(args, flag.replace("-", "_"))
        )
        print(
            f"reproduce: kip848 simulate --explore --members {args.members} --partitions {args.partitions} "
            f"--depth {args.depth}{flags}" + (f" --classic {args.classic}" if args.classic else "")
        )
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
