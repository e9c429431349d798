"""``kip848 simulate``: run seeded simulations (or the exhaustive explorer) and report.

    kip848 simulate --seed N --steps K --members M [--partitions P] [--faults LIST|all|none]
                    [--topics T] [--static S] [--classic N --protocol eager|cooperative|mixed]
                    [--assignment-interval-ms I [--no-park]] [--count C] [--quiet]
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

from .simulator import (
    ALL_FAULTS,
    CLASSIC_PROTOCOLS,
    EXTRA_FAULTS,
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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kip848 simulate", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--seed",
        type=int_in(INT64_MIN, INT64_MAX),
        default=0,
        help="random seed (first seed with --count)",
    )
    p.add_argument(
        "--steps",
        type=int_in(1, INT32_MAX),
        default=300,
        help="steps with faults before the quiet phase",
    )
    p.add_argument("--members", type=int_in(1, MAX_MEMBERS), default=3)
    p.add_argument(
        "--partitions", type=int_in(1, MAX_PARTITIONS), default=4, help="partitions per topic"
    )
    p.add_argument("--topics", type=int_in(1, MAX_TOPICS), default=2)
    p.add_argument(
        "--assignment-interval-ms",
        type=int_in(0, 15_000),
        default=0,
        help="group.consumer.assignment.interval.ms (0: a target per change, no batching)",
    )
    p.add_argument(
        "--offload-min-members",
        type=int_in(0, MAX_MEMBERS),
        default=0,
        help="compute targets of groups this big in a (simulated) worker (0: never)",
    )
    p.add_argument(
        "--offload-delay-max-ms",
        type=int_in(0, 60_000),
        default=2_000,
        help="how long a simulated worker may take",
    )
    p.add_argument(
        "--no-park",
        action="store_true",
        help="answer joins to a new group at once (Kafka) instead of parking them until the "
        "group's first target (the runtime's default with batching)",
    )
    p.add_argument(
        "--static", type=int_in(0, MAX_MEMBERS), default=1, help="how many members are static"
    )
    p.add_argument(
        "--classic",
        type=int_in(0, MAX_MEMBERS),
        default=0,
        help="how many members (the last N) speak the classic protocol through the legacy bridge",
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
        "--count", type=int_in(1, INT32_MAX), default=1, help="run seeds seed..seed+count-1 (soak)"
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
        "--batching", action="store_true", help="explorer: assignment interval 1 s (batching)"
    )
    p.add_argument(
        "--offload", action="store_true", help="explorer: targets computed by a worker (late)"
    )
    p.add_argument(
        "--restarts", action="store_true", help="explorer: a coordinator restart anywhere (once)"
    )
    p.add_argument(
        "--assignor-failures",
        action="store_true",
        help="explorer: a worker's computation may fail (needs --offload)",
    )
    p.add_argument(
        "--park",
        action="store_true",
        help="explorer: joins parked until a new group's first target (implies --batching)",
    )
    return p


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
            parks_joins=not args.no_park,
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
    from .explore import explore

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
    )
    print(result.render())
    if result.violation is not None:
        flags = "".join(
            f" --{name.replace('_', '-')}"
            for name in ("batching", "offload", "restarts", "park", "assignor_failures")
            if getattr(args, name)
        )
        print(
            f"reproduce: kip848 simulate --explore --members {args.members} --partitions {args.partitions} "
            f"--depth {args.depth}{flags}"
        )
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
