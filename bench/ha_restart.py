"""Several nodes on PostgreSQL when the whole cluster stops and starts again (docs/ha.md
"Starting a whole cluster again"): from the start of the nodes until every partition is
served and until nothing moves any more, how many times partitions were taken and how many
changed node — beside the same run on an earlier source tree (``--before``: a directory
holding that commit's ``coordinator`` package, e.g. ``git archive COMMIT coordinator | tar -x
-C DIR``).

    .venv/bin/python bench/ha_restart.py --before DIR     # ~4 min, writes docs/benchmarks.md
    .venv/bin/python bench/ha_restart.py --before DIR --leases 2000,10000 --rounds 1
    .venv/bin/python bench/ha_restart.py --rounds 1 --no-doc  # quick look

Three nodes, 50 coordinator partitions (Kafka's default), ``--groups`` groups of 10 members
written into the store first (``bench/cluster.py``'s seed), a group committed in each
partition, ``coordinator.lease.ms`` each of ``--leases`` (the startup grace is the lease, the
default).
Scenarios, each a round from a settled cluster:

* *stopped*: every node sent SIGTERM at once, then the three started again together;
* *killed*: every node killed (SIGKILL) at once, then the three started again together (each
  first waits for its old registration to run out: up to a lease);
* *killed, node 3 not back*: the same, node 3 not started.

The round's zero is the start of the nodes. Polled every 20 ms for ``--window`` s: *all
served*, the first moment every partition is served (taken since the stop, its live leader
finished loading it at its epoch, as ``kip848 cluster describe`` says); *commits*, when a commit through node 1
(FindCoordinator, then the group's coordinator) has succeeded on the group of every
partition; *settled*, the last change of any partition's leader, epoch or load; *takes*, the
leader epochs gone by since the stop (50: each partition taken once); *moved*, the partitions
led at the end by another node than before the stop.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/pg.py: a PostgreSQL started for the run

from bench._report import command, machine, publish, table  # noqa: E402
from bench.cluster import (  # noqa: E402
    SEEDED_SESSION_MS,
    Channels,
    Node,
    commits_ok,
    probe_groups,
    seed,
    sessions,
    wait_balanced,
)
from bench.ha_outage import NODES, PARTITIONS, create_topic, placement, stable  # noqa: E402

SCENARIOS = {
    "stopped": (signal.SIGTERM, [1, 2, 3]),
    "killed": (signal.SIGKILL, [1, 2, 3]),
    "killed, node 3 not back": (signal.SIGKILL, [1, 2]),
}


class Cluster:
    """The node processes of one store, run from ``source`` (None: this tree)."""

    def __init__(self, argv: list[str], logs: Path, source: Path | None) -> None:
        self.argv = argv
        self.logs = logs
        self.source = source
        self.nodes: dict[int, Node] = {}
        self.starts = 0

    def start(self, ids: list[int]) -> None:
        """Start nodes ``ids`` at once (back once each printed its address)."""
        self.starts += 1

        def one(n: int) -> tuple[int, Node]:
            log = self.logs / f"node{n}-{self.starts}.log"
            return n, Node([*self.argv, "--node-id", str(n)], log, source=self.source)

        with ThreadPoolExecutor(len(ids)) as pool:
            self.nodes.update(pool.map(one, ids))

    def stop(self, sig: int) -> None:
        """``sig`` to every node at once, then wait for each (bounded)."""
        nodes = list(self.nodes.values())
        self.nodes.clear()
        for node in nodes:
            if node.proc.poll() is None:
                node.proc.send_signal(sig)
        for node in nodes:
            node.stop(sig)


def one_round(
    cluster: Cluster, dsn: str, lease_ms: int, groups: list[str], scenario: str, window_s: float
) -> list:
    sig, back = SCENARIOS[scenario]
    before = stable(dsn, lease_ms / 10_000)
    cluster.stop(sig)
    stopped, _ = placement(dsn)
    zero = time.monotonic()
    cluster.start(back)
    bootstrap = cluster.nodes[1].address
    channels = Channels()
    served_s = commits_s = None
    changed, last = zero, stopped
    waiting = set(groups)
    try:
        while time.monotonic() < zero + window_s:
            now, served = placement(dsn)
            # Taken since the stop: a killed node's leases look held until they run out.
            served = served and all(now[p][1] > stopped[p][1] for p in now)
            t = time.monotonic()
            if now != last:
                changed, last = t, now
            if served and served_s is None:
                served_s = t - zero
            if waiting:
                waiting -= commits_ok(channels, bootstrap, sorted(waiting))
                if not waiting:
                    commits_s = time.monotonic() - zero
            time.sleep(0.02)
    finally:
        channels.close()
    moved = sum(1 for p, now in last.items() if now[0] != before[p][0])
    takes = sum(last[p][1] - stopped[p][1] for p in stopped)
    if len(back) < NODES:  # three nodes again for the next round
        cluster.stop(signal.SIGTERM)
        cluster.start(list(range(1, NODES + 1)))
        wait_balanced(dsn, NODES)
    return [served_s, commits_s, changed - zero, takes, moved]


def window_s(args: argparse.Namespace, lease_ms: int) -> float:
    """How long a round is polled: ``--window``, else long enough for a killed node's
    registration to run out, the grace and the moves after (14 s with a 2 s lease)."""
    return args.window or max(14.0, 3 * lease_ms / 1000 + 4)


def run(
    tree: str,
    source: Path | None,
    lease_ms: int,
    args: argparse.Namespace,
    pg: object,
    tmp: Path,
) -> list[list]:
    dsn = pg.fresh_store_dsn()  # type: ignore[attr-defined]
    seed(dsn, args.groups)
    argv = ["--store", dsn, *sessions(SEEDED_SESSION_MS)]
    for name, value in (
        ("coordinator.lease.ms", lease_ms),
        ("coordinator.heartbeat.interval.ms", lease_ms // 10),
        ("offsets.topic.num.partitions", PARTITIONS),
    ):
        argv += ["--set", f"{name}={value}"]
    logs = tmp / f"{tree.replace(' ', '-')}-{lease_ms}"
    logs.mkdir()
    cluster = Cluster(argv, logs, source)
    rows = []
    try:
        cluster.start(list(range(1, NODES + 1)))
        wait_balanced(dsn, NODES)
        create_topic(cluster.nodes[1].address)
        groups = list(probe_groups(list(range(PARTITIONS)), PARTITIONS).values())
        for scenario in SCENARIOS:
            load = os.getloadavg()[0]
            results = [
                one_round(cluster, dsn, lease_ms, groups, scenario, window_s(args, lease_ms))
                for _ in range(args.rounds)
            ]
            print(tree, lease_ms, scenario, results, flush=True)
            rows.append(
                [
                    tree,
                    f"{lease_ms / 1000:g} s",
                    scenario,
                    *cells(results),
                    f"{load:.1f}→{os.getloadavg()[0]:.1f}",
                ]
            )
    finally:
        cluster.stop(signal.SIGTERM)
    return rows


def cells(results: list[list]) -> list[str]:
    def cell(i: int, digits: int = 2) -> str:
        values = [r[i] for r in results]
        if any(v is None for v in values):
            return "not within the window"
        shown = ", ".join(f"{v:.{digits}f}" if digits else str(v) for v in values)
        return f"{median(values):.{digits}f} ({shown})" if len(values) > 1 else shown

    return [cell(0), cell(1), cell(2), cell(3, 0), cell(4, 0)]


def busy(rows: list[list]) -> str:
    """A note when the machine was busy during the run (its load average above 2)."""
    loads = [float(x) for row in rows for x in str(row[-1]).split("→")]
    if max(loads, default=0.0) <= 2:
        return ""
    return (
        f"\nThe machine was busy (load average up to {max(loads):.1f} on 2 cores, other work "
        "running): the times are rough, dominated by how fast the node processes start; takes "
        "and moved are the robust figures.\n"
    )


def main() -> int:
    from pg import PostgresServer

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--before", type=Path, help="an earlier tree's coordinator package's dir")
    parser.add_argument("--before-label", default="before", help="its name in the table")
    parser.add_argument("--leases", default="2000", help="comma-separated coordinator.lease.ms")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--groups", type=int, default=10_000, help="seeded groups")
    parser.add_argument(
        "--window", type=float, default=None, help="seconds polled a round (default by lease)"
    )
    parser.add_argument("--no-doc", action="store_true", help="print only")
    args = parser.parse_args()
    started = time.monotonic()
    rows = []
    pg = PostgresServer().start()
    try:
        with tempfile.TemporaryDirectory(prefix="kip848-ha-restart-") as tmp:
            trees: list[tuple[str, Path | None]] = [("this tree", None)]
            if args.before is not None:
                trees.insert(0, (args.before_label, args.before))
            for lease_ms in (int(x) for x in args.leases.split(",") if x):
                for tree, source in trees:
                    rows += run(tree, source, lease_ms, args, pg, Path(tmp))
    finally:
        pg.stop()
    headers = [
        "source",
        "lease",
        "scenario",
        "all served s",
        "commits s",
        "settled s",
        "takes",
        "moved",
        "load avg",
    ]
    how = command(
        "bench/ha_restart.py",
        [
            ("--before", "DIR" if args.before else None, None),
            ("--leases", args.leases, "2000"),
            ("--rounds", args.rounds, 2),
            ("--groups", args.groups, 10_000),
            ("--window", args.window, None),
        ],
    )
    body = f"""## A whole cluster started again (`{how}`)

{machine()}; PostgreSQL {pg.bin.parent.name} (local, `fsync` off), three nodes, 50 partitions,
{args.groups:,} groups of 10 members in the store (about {args.groups * 33:,} records) and a group
committed in each partition, `coordinator.lease.ms` as the table says (the startup grace: the same),
everything on the same cores. Every node stopped at once (SIGTERM, or SIGKILL), then started again
together (node 3 not, in the last scenario); from their start: every partition served (taken
since the stop, loaded by a live node), a commit
through node 1 succeeded on every group, the last change of a partition's leader, epoch or load
(settled; within the window polled: {args.window or "three leases and 4 s, at least 14"} s), leader epochs gone by since the stop (takes:
50 when each partition is taken once), partitions led by another node than before the stop
(moved). The earlier commit's rows: its `coordinator` package (`git archive COMMIT coordinator |
tar -x -C DIR`) run by the same script in the same run. Median of {args.rounds} rounds (each
round's figure in brackets).

{table(headers, rows)}
{busy(rows)}"""
    name = "ha-restart" if args.leases == "2000" else f"ha-restart-{args.leases.replace(',', '-')}"
    publish(name, body, time.monotonic() - started, not args.no_doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
