"""What the Kafka listener's bounds check and flow control cost a steady heartbeat: the
heartbeat row of ``bench/kafka.py`` for servers of several revisions, in one sitting.

    .venv/bin/python bench/kafka_flow.py                      # writes the kafka-flow section
    .venv/bin/python bench/kafka_flow.py --revisions A,B --rounds 7 --seconds 5 --no-doc

Each revision is checked out in a temporary git worktree and its server run with this
checkout's virtualenv; the rounds alternate between them, so that a busy machine weighs on each
alike. The default pairs the code before the bounds check and the flow control (``bfd9073^``),
the code that added them (``bc54092``) and today's (``HEAD``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._loadgen import checkouts
from bench._report import machine, table, write_section
from bench.kafka import MEMBERS_PER_GROUP, _median, bench_kafka_heartbeats

REVISIONS = "bfd9073^,bc54092,HEAD"


def paired_rows(
    revisions: list[str], members: int, seconds: float, rounds: int
) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """(revision, short hash, its runs) for each revision, run in alternating rounds."""
    with checkouts(revisions) as trees:
        runs: dict[str, list[dict[str, Any]]] = {short: [] for _rev, short, _tree in trees}
        for i in range(rounds):
            for _rev, short, tree in trees if i % 2 == 0 else trees[::-1]:
                r = bench_kafka_heartbeats(members, seconds, members, root=tree)
                r["load"] = os.getloadavg()[0]
                runs[short].append(r)
                print(
                    f"round {i + 1}, {short}: {r['per_s']:,.0f}/s, "
                    f"server {r['server_cpu_us']:.1f} us/call (load {r['load']:.1f})",
                    flush=True,
                )
    return [(rev, short, runs[short]) for rev, short, _tree in trees]


def paired_section(
    rows: list[tuple[str, str, list[dict[str, Any]]]],
    members: int,
    seconds: float,
    load0: float,
    load1: float,
) -> str:
    base = _median([r["server_cpu_us"] for r in rows[0][2]])
    rounds = len(rows[0][2])
    what = {
        "bfd9073^": "before the bounds check and the flow control",
        "bc54092": "with the bounds check (bfd9073) and the flow control (bc54092)",
        "HEAD": "today (fair admission between groups, limits, everything since)",
    }
    cpu_table = table(
        (
            "server",
            "rounds",
            "server CPU µs/heartbeat, median (each round)",
            "vs the first row",
            "heartbeats/s, median",
            "target",
        ),
        [
            (
                f"{rev} ({short}): {what.get(rev, 'this revision')}",
                f"{len(runs)}",
                f"**{_median([r['server_cpu_us'] for r in runs]):.1f}** ("
                + ", ".join(f"{r['server_cpu_us']:.1f}" for r in runs)
                + ")",
                f"{_median([r['server_cpu_us'] for r in runs]) - base:+.1f} µs "
                f"({(_median([r['server_cpu_us'] for r in runs]) / base - 1) * 100:+.1f}%)",
                f"{_median([r['per_s'] for r in runs]):,.0f}",
                ">= 10,000/s",
            )
            for rev, short, runs in rows
        ],
    )
    return f"""## Kafka listener: what the bounds check and the flow control cost (`python bench/kafka_flow.py --revisions {",".join(rev for rev, _s, _r in rows)}`)

{machine()}; load average {load0:.1f} at the start, {load1:.1f} at the end (the machine is
shared with other work: throughput is rough, CPU per heartbeat the steadier figure). The
heartbeat row of the Kafka listener benchmark (below, "Kafka listener"): `kip848 serve
--kafka-listen`, {members} KIP-848 members in groups of {MEMBERS_PER_GROUP}, a connection each,
steady ConsumerGroupHeartbeats from `bench/loadgen/kafkahb.c` for {seconds:.0f} s — for a
server of each revision (a temporary git worktree of it, this checkout's virtualenv), {rounds}
rounds alternating between them in one sitting. Server CPU per heartbeat is the server
process's CPU over the run divided by the heartbeats answered.

{cpu_table}

What the second row adds to every request: each length of its body checked against its frame
before kio decodes it (`coordinator/server/kafka/bounds.py`, docs/kafka.md "Bounded decoding";
about 1 µs for a steady heartbeat, measured alone), and the per-connection accounting of the
flow control (requests unanswered, bytes queued, unsent answers; a connection's turn per loop
iteration; docs/kafka.md "Per-connection limits"). Its peer is the first row, from the same
rounds.
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--revisions", default=REVISIONS, help=f"default {REVISIONS}")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--members", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--no-doc", action="store_true", help="do not write docs/benchmarks.md")
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    rows = paired_rows(args.revisions.split(","), args.members, args.seconds, args.rounds)
    section = paired_section(rows, args.members, args.seconds, load0, os.getloadavg()[0])
    print(section)
    if not args.no_doc:
        write_section("kafka-flow", section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
