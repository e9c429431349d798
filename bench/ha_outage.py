"""Several nodes on PostgreSQL when PostgreSQL is away for longer than the lease (docs/ha.md
"Failure modes"): from PostgreSQL back until every partition is served again and until nothing
moves any more, and how many partitions changed node on the way — beside the same run on an
earlier source tree (``--before``: a directory holding that commit's ``coordinator`` package,
e.g. ``git archive COMMIT coordinator | tar -x -C DIR``).

    .venv/bin/python bench/ha_outage.py --before DIR      # ~4 min, writes docs/benchmarks.md
    .venv/bin/python bench/ha_outage.py --rounds 1 --leases 2000 --no-doc   # quick look

Three nodes, 50 coordinator partitions (Kafka's default), ``--groups`` groups of 10 members
written into the store first (``bench/cluster.py``'s seed: a partition taken is loaded with
its share of them; the members have no clients, so their session is an hour), and a group
committed in each partition. A round:
PostgreSQL killed (SIGKILL, every process of it), kept away for the lease and 1.5 s (every
node drops its partitions), started again (its start is the round's zero). Then, polled every
20 ms for the lease and 5 s more: *all served*, the first moment every partition is served
(its live leader finished loading it at its epoch, as ``kip848 cluster describe`` says);
*commits*, when a commit through node 1 (FindCoordinator, then the group's coordinator) has
succeeded on the group of every partition; *settled*, the last change of any partition's
leader, epoch or load; *moved*, the partitions led at the end by another node than before; *takes*,
the leader epochs gone by (each partition taken back once: one per partition).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/pg.py: a PostgreSQL started for the run

from bench._report import machine, publish, table  # noqa: E402
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

PARTITIONS = 50
NODES = 3


def create_topic(address: str) -> None:
    """The topic the commits name (``bench/cluster.py``'s ``commits_ok``), unless the seed
    made it."""
    import grpc

    from kip848.v1 import admin_pb2, admin_pb2_grpc

    with grpc.insecure_channel(address) as channel:
        resp = admin_pb2_grpc.AdminServiceStub(channel).CreateTopics(
            admin_pb2.CreateTopicsRequest(
                topics=[
                    admin_pb2.CreateTopicsRequest.CreatableTopic(name="topic", num_partitions=1)
                ]
            ),
            timeout=10,
        )
    if resp.topics[0].error_code not in (0, 36):  # 36: TOPIC_ALREADY_EXISTS
        raise RuntimeError(f"cannot create the topic: {resp}")


def placement(dsn: str) -> tuple[dict[int, tuple[int | None, int, int]], bool]:
    """partition -> (leader, leader epoch, the epoch it was loaded at), and whether every
    partition is served."""
    from coordinator.runtime.store.postgres_leases import PostgresLeases

    leases = PostgresLeases(dsn, where="bench", connect_timeout_s=1)
    try:
        state = leases.state()
    finally:
        leases.close()
    live = set(state.live())
    out = {
        lease.partition: (lease.leader, lease.epoch, lease.loaded_epoch) for lease in state.leases
    }
    served = all(
        lease.held and lease.leader in live and lease.loaded_epoch == lease.epoch
        for lease in state.leases
    )
    return out, served


def stable(dsn: str, heartbeat_s: float) -> dict[int, tuple[int | None, int, int]]:
    """The placement once it has not changed for five heartbeats (every move done)."""
    last, _ = placement(dsn)
    for _ in range(600):
        time.sleep(5 * heartbeat_s)
        now, served = placement(dsn)
        if served and now == last:
            return now
        last = now
    raise RuntimeError("the partitions never settled")


def one_round(pg: object, dsn: str, lease_ms: int, groups: list[str], bootstrap: str) -> list:
    channels = Channels()
    before = stable(dsn, lease_ms / 10_000)
    pg.kill()  # type: ignore[attr-defined]
    time.sleep(lease_ms / 1000 + 1.5)
    pg.start_again()  # type: ignore[attr-defined]
    back = time.monotonic()
    served_s = commits_s = None
    changed, last = back, before
    waiting = set(groups)
    try:
        while time.monotonic() < back + lease_ms / 1000 + 5:
            try:
                now, served = placement(dsn)
            except Exception:  # noqa: BLE001 - PostgreSQL still starting: poll again
                time.sleep(0.02)
                continue
            t = time.monotonic()
            if now != last:
                changed, last = t, now
            if served and served_s is None:
                served_s = t - back
            if waiting:
                waiting -= commits_ok(channels, bootstrap, sorted(waiting))
                if not waiting:
                    commits_s = time.monotonic() - back
            time.sleep(0.02)
    finally:
        channels.close()
    moved = sum(1 for p, now in last.items() if now[0] != before[p][0])
    takes = sum(last[p][1] - before[p][1] for p in before)
    return [served_s, commits_s, changed - back, moved, takes]


def run(
    tree: str, source: Path | None, lease_ms: int, args: argparse.Namespace, pg: object, tmp: Path
) -> list:
    dsn = pg.fresh_store_dsn()  # type: ignore[attr-defined]
    seed(dsn, args.groups)
    argv = ["--store", dsn, *sessions(SEEDED_SESSION_MS)]
    for name, value in (
        ("coordinator.lease.ms", lease_ms),
        ("coordinator.heartbeat.interval.ms", lease_ms // 10),
        ("offsets.topic.num.partitions", PARTITIONS),
    ):
        argv += ["--set", f"{name}={value}"]
    nodes = [
        Node([*argv, "--node-id", str(n)], tmp / f"{tree}-{lease_ms}-node{n}.log", source=source)
        for n in range(1, NODES + 1)
    ]
    load = os.getloadavg()[0]
    try:
        wait_balanced(dsn, NODES)
        create_topic(nodes[0].address)
        groups = list(probe_groups(list(range(PARTITIONS)), PARTITIONS).values())
        channels = Channels()
        waiting = set(groups)
        for _ in range(100):
            waiting -= commits_ok(channels, nodes[0].address, sorted(waiting))
            if not waiting:
                break
        channels.close()
        if waiting:
            raise RuntimeError(f"no commit succeeded on {sorted(waiting)}")
        results = [
            one_round(pg, dsn, lease_ms, groups, nodes[0].address) for _ in range(args.rounds)
        ]
    finally:
        for node in nodes:
            node.stop()
    print(tree, lease_ms, results, flush=True)

    def cell(i: int, digits: int = 2) -> str:
        values = [r[i] for r in results]
        if any(v is None for v in values):
            return "not within the window"
        shown = ", ".join(f"{v:.{digits}f}" if digits else str(v) for v in values)
        return f"{median(values):.{digits}f} ({shown})" if len(values) > 1 else shown

    return [
        tree,
        f"{lease_ms / 1000:g} s",
        cell(0),
        cell(1),
        cell(2),
        cell(3, 0),
        cell(4, 0),
        f"{load:.1f}→{os.getloadavg()[0]:.1f}",
    ]


def main() -> int:
    from pg import PostgresServer

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--before", type=Path, help="an earlier tree's coordinator package's dir")
    parser.add_argument("--before-label", default="before", help="its name in the table")
    parser.add_argument("--leases", default="2000,10000", help="comma-separated lease ms")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--groups", type=int, default=10_000, help="seeded groups")
    parser.add_argument("--no-doc", action="store_true", help="print only")
    args = parser.parse_args()
    started = time.monotonic()
    rows = []
    pg = PostgresServer().start()
    try:
        with tempfile.TemporaryDirectory(prefix="kip848-ha-outage-") as tmp:
            for lease_ms in (int(x) for x in args.leases.split(",") if x):
                trees: list[tuple[str, Path | None]] = [("this tree", None)]
                if args.before is not None:
                    trees.insert(0, (args.before_label, args.before))
                for tree, source in trees:
                    rows.append(run(tree, source, lease_ms, args, pg, Path(tmp)))
    finally:
        pg.stop()
    headers = [
        "source",
        "lease",
        "all served s",
        "commits s",
        "settled s",
        "moved",
        "takes",
        "load avg",
    ]
    body = f"""## PostgreSQL away past the lease: back to serving (`python bench/ha_outage.py --before DIR`)

{machine()}; PostgreSQL {pg.bin.parent.name} (local, `fsync` off), three nodes, 50 partitions,
{args.groups:,} groups of 10 members in the store (about {args.groups * 33:,} records) and a group
committed in each partition, everything on the same cores. PostgreSQL killed, away for the lease
and 1.5 s, started again; from then: every partition served, a commit through node 1 succeeded
on every group, the last change of a partition's leader, epoch or load (settled), partitions led by
another node than before (moved), leader epochs gone by (takes: 50 when each partition is taken
back once). The earlier commit's rows: its `coordinator` package (`git archive COMMIT
coordinator | tar -x -C DIR`) run by the same script in the same run. Median of {args.rounds} rounds (each round's figure in brackets).

{table(headers, rows)}
"""
    publish("ha-outage", body, time.monotonic() - started, not args.no_doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
