"""Several coordinator nodes on one PostgreSQL (docs/ha.md): throughput with 1, 2 and 3 nodes
beside one node on SQLite, and the fail-over time as a function of the groups a dead node led.

    .venv/bin/python bench/cluster.py            # ~15 min, writes docs/benchmarks.md
    .venv/bin/python bench/cluster.py --seconds 3 --failover-groups 1000 --no-doc  # quick look

1. Throughput: ``--groups`` groups of one steady member each (joined through the node leading
   the group's partition, found with FindCoordinator), then for ``--seconds`` every member sends
   back to back (bench/loadgen/h2hb, the C load generator: one per node, each driving the
   members of its node's groups) steady heartbeats, then single-partition offset commits (each
   a durable write). Rows: SQLite with one node (``--sync full``), PostgreSQL with 1, 2 and 3
   nodes (a local server started for the run with PostgreSQL's defaults: ``fsync`` and
   ``synchronous_commit`` on). Everything — the nodes, PostgreSQL, the load generators — shares
   the machine's cores, which caps the curve: the server CPU per call is the steadier figure.
2. Fail-over: a store of N groups x 10 members (33 records each, the canonical records of a
   reconciled group: bench/service.py's template) in 50 partitions, written into PostgreSQL
   directly; node 1 loads it all, node 2 joins and takes half; then node 1 is killed (``kill -9``)
   and the time is measured until a commit succeeds on a group of each of node 1's partitions
   (through node 2: one FindCoordinator for the groups still waiting, then their OffsetCommits
   at once, a round every 100 ms), beside the time node 2's log gives its loads of them. Lease
   10 s (the default): the target is lease + 10 s at 100,000 groups. The seeded members have
   no clients: the nodes run with a session timeout of an hour (``--session-ms``).

The machine is shared with other work: the load average is recorded with each row.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/pg.py: a PostgreSQL started for the run

from bench._loadgen import build, tree_cpu_s  # noqa: E402
from bench._report import machine, publish, table  # noqa: E402

HEARTBEAT_PATH = "/kip848.v1.ConsumerGroupService/ConsumerGroupHeartbeat"
COMMIT_PATH = "/kip848.v1.OffsetService/OffsetCommit"
TOPIC = "bench"
LEASE_MS = 10_000
FAILOVER_TARGET_S = LEASE_MS / 1000 + 10
SEEDED_SESSION_MS = 3_600_000
KAFKA_SESSION_MS = 45_000


def load_avg() -> float:
    return os.getloadavg()[0]


class Node:
    """One ``kip848 serve`` process."""

    def __init__(self, argv: list[str], log: Path, *, source: Path | None = None) -> None:
        """``source``: a directory holding the ``coordinator`` package to run instead of this
        tree's (an earlier commit's, for a before/after figure)."""
        self._log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        env = None
        if source is not None:  # run from there: ``-m`` puts the working directory first
            env = dict(os.environ, PYTHONPATH=str(source))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "coordinator.cli", "serve", "--listen", "127.0.0.1:0", *argv],
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env=env,
            cwd=source,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if not line.startswith("listening on "):
            raise RuntimeError(f"server did not start: {line} (log: {log})")
        self.address = line.removeprefix("listening on ")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._log.close()


def wait_serving(address: str, timeout_s: float = 300.0) -> None:
    """Until the node's gRPC health says SERVING (it has loaded its first share; not
    ListTopics, which the cluster log's committed copy answers before that)."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    deadline = time.monotonic() + timeout_s
    request = health_pb2.HealthCheckRequest(service="")
    with grpc.insecure_channel(address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        while True:
            try:
                status = health.Check(request, timeout=10).status  # type: ignore[attr-defined]
            except grpc.RpcError:
                status = -1
            if status == health_pb2.HealthCheckResponse.SERVING:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{address} never served")
            time.sleep(0.05)


class Channels:
    def __init__(self) -> None:
        self._by: dict[str, Any] = {}

    def __call__(self, address: str) -> Any:
        import grpc

        if address not in self._by:
            self._by[address] = grpc.insecure_channel(address)
        return self._by[address]

    def close(self) -> None:
        for ch in self._by.values():
            ch.close()


def coordinator_of(channels: Channels, bootstrap: str, group: str) -> str:
    """``group``'s coordinator as ``bootstrap`` names it (retried while nobody leads it)."""
    from kip848.v1 import classic_group_pb2, classic_group_pb2_grpc

    stub = classic_group_pb2_grpc.ClassicGroupServiceStub(channels(bootstrap))
    for _ in range(2000):
        resp = stub.FindCoordinator(
            classic_group_pb2.FindCoordinatorRequest(key_type=0, coordinator_keys=[group]),
            timeout=10,
        )
        c = resp.coordinators[0]
        if c.error_code == 0:
            return f"{c.host}:{c.port}"
        time.sleep(0.02)
    raise RuntimeError(f"no coordinator for {group}")


# ---------------------------------------------------------------------------- 1. throughput


@contextlib.contextmanager
def cluster(store: str, nodes: int, tmp: Path, pg: Any) -> Iterator[list[Node]]:
    """``nodes`` nodes on a fresh PostgreSQL schema, or one node on SQLite (``store``)."""
    started: list[Node] = []
    try:
        if store == "sqlite":
            started.append(Node(["--data-dir", str(tmp / "data"), "--sync", "full"], tmp / "n.log"))
        else:
            dsn = pg.fresh_store_dsn()
            for n in range(1, nodes + 1):
                started.append(Node(["--store", dsn, "--node-id", str(n)], tmp / f"node{n}.log"))
        for node in started:
            wait_serving(node.address)
        if store != "sqlite":
            wait_balanced(dsn, nodes)
        yield started
    finally:
        for node in started:
            node.stop()


def steady_members(
    nodes: list[Node], groups: int, channels: Channels
) -> tuple[dict[str, list[bytes]], dict[str, list[bytes]]]:
    """Join one member per group through its coordinator, reconcile it; per node address: the
    serialized steady heartbeats and single-partition commits of its members."""
    from kip848.v1 import admin_pb2, admin_pb2_grpc, common_pb2, offsets_pb2
    from kip848.v1 import consumer_group_pb2 as cg
    from kip848.v1 import consumer_group_pb2_grpc as cgg

    bootstrap = nodes[0].address
    admin = admin_pb2_grpc.AdminServiceStub(channels(bootstrap))
    created = admin.CreateTopics(
        admin_pb2.CreateTopicsRequest(
            topics=[admin_pb2.CreateTopicsRequest.CreatableTopic(name=TOPIC, num_partitions=1)]
        ),
        timeout=30,
    )
    assert created.topics[0].error_code == 0, created
    topic_id = created.topics[0].topic_id
    for node in nodes:  # the others apply it from the cluster log
        listing = admin_pb2_grpc.AdminServiceStub(channels(node.address))
        for _ in range(1000):
            listed = listing.ListTopics(admin_pb2.ListTopicsRequest(), timeout=10)
            if any(t.name == TOPIC for t in listed.topics):
                break
            time.sleep(0.02)
    heartbeats: dict[str, list[bytes]] = {n.address: [] for n in nodes}
    commits: dict[str, list[bytes]] = {n.address: [] for n in nodes}
    for g in range(groups):
        group = f"bench-{g:05d}"
        address = coordinator_of(channels, bootstrap, group)
        stub = cgg.ConsumerGroupServiceStub(channels(address))
        joined = stub.ConsumerGroupHeartbeat(
            cg.ConsumerGroupHeartbeatRequest(
                group_id=group,
                member_epoch=0,
                rebalance_timeout_ms=60_000,
                subscribed_topic_names=common_pb2.TopicNames(names=[TOPIC]),
                topic_partitions=common_pb2.TopicPartitionsList(),
            ),
            timeout=10,
        )
        assert joined.error_code == 0 and joined.assignment.assigned_topic_partitions, joined
        owned = common_pb2.TopicPartitionsList(
            items=list(joined.assignment.assigned_topic_partitions)
        )
        acked = stub.ConsumerGroupHeartbeat(
            cg.ConsumerGroupHeartbeatRequest(
                group_id=group,
                member_id=joined.member_id,
                member_epoch=joined.member_epoch,
                topic_partitions=owned,
            ),
            timeout=10,
        )
        assert acked.error_code == 0, acked
        heartbeats[address].append(
            cg.ConsumerGroupHeartbeatRequest(
                group_id=group, member_id=joined.member_id, member_epoch=acked.member_epoch
            ).SerializeToString()
        )
        commits[address].append(
            offsets_pb2.OffsetCommitRequest(
                group_id=group,
                member_id=joined.member_id,
                generation_id_or_member_epoch=acked.member_epoch,
                topics=[
                    offsets_pb2.OffsetCommitRequest.Topic(
                        topic_id=topic_id,
                        partitions=[
                            offsets_pb2.OffsetCommitRequest.Partition(
                                partition_index=0, committed_offset=g
                            )
                        ],
                    )
                ],
            ).SerializeToString()
        )
    return heartbeats, commits


def drive(
    nodes: list[Node], requests: dict[str, list[bytes]], path: str, seconds: float, tmp: Path
) -> dict[str, Any]:
    """One h2hb per node, all at once, each driving its node's members back to back."""
    procs = []
    for n, (address, reqs) in enumerate(requests.items()):
        if not reqs:
            continue
        reqfile = tmp / f"req-{n}.bin"
        reqfile.write_bytes(b"".join(len(r).to_bytes(4, "little") + r for r in reqs))
        host, _, port = address.rpartition(":")
        procs.append(
            subprocess.Popen(
                [build("h2hb"), host, port, path, str(seconds), "4", str(reqfile)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    cpu0 = sum(tree_cpu_s(n.proc.pid) for n in nodes)
    outs = [p.communicate(timeout=seconds + 120) for p in procs]
    cpu = sum(tree_cpu_s(n.proc.pid) for n in nodes) - cpu0
    results = []
    for p, (out, err) in zip(procs, outs, strict=True):
        if p.returncode:
            raise RuntimeError(f"load generator failed: {out}{err}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    calls = sum(r["calls"] for r in results)
    wall = max(r["seconds"] for r in results)
    return {
        "calls": calls,
        "per_s": calls / wall,
        "p99_ms": max(r["p99_ms"] for r in results),
        "server_cpu_us": cpu / calls * 1e6 if calls else 0.0,
    }


def bench_throughput(args: argparse.Namespace, pg: Any) -> list[list[object]]:
    rows: list[list[object]] = []
    for store, nodes in (("sqlite", 1), ("postgresql", 1), ("postgresql", 2), ("postgresql", 3)):
        with tempfile.TemporaryDirectory(prefix="kip848-cluster-") as tmp_name:
            tmp = Path(tmp_name)
            channels = Channels()
            try:
                with cluster(store, nodes, tmp, pg) as running:
                    load0 = load_avg()
                    heartbeats, commits = steady_members(running, args.groups, channels)
                    hb = drive(running, heartbeats, HEARTBEAT_PATH, args.seconds, tmp)
                    oc = drive(running, commits, COMMIT_PATH, args.seconds, tmp)
                    load1 = load_avg()
            finally:
                channels.close()
        label = "SQLite (`--sync full`)" if store == "sqlite" else "PostgreSQL"
        rows.append(
            [
                label,
                nodes,
                f"{hb['per_s']:,.0f}",
                f"{hb['server_cpu_us']:.0f}",
                f"{hb['p99_ms']:.1f}",
                f"{oc['per_s']:,.0f}",
                f"{oc['server_cpu_us']:.0f}",
                f"{oc['p99_ms']:.1f}",
                f"{load0:.1f}→{load1:.1f}",
            ]
        )
        print(rows[-1], flush=True)
    return rows


# ---------------------------------------------------------------------------- 2. fail-over


def seed(dsn: str, groups: int) -> int:
    """N groups (bench/load.py's canonical 10-member groups) written into a new PostgreSQL
    store. Returns the records written."""
    from bench.load import build
    from coordinator.runtime.store import PostgresRecordStore

    with PostgresRecordStore(dsn) as store:
        return build(store, groups, 0, 50_000)


def leaders(dsn: str) -> dict[int, int | None]:
    from coordinator.runtime.store.postgres_leases import PostgresLeases

    leases = PostgresLeases(dsn, where="bench")
    try:
        state = leases.state()
    finally:
        leases.close()
    return {
        lease.partition: lease.leader if lease.held and lease.loaded_epoch == lease.epoch else None
        for lease in state.leases
    }


def wait_balanced(dsn: str, nodes: int, timeout_s: float = 900.0) -> None:
    """Until every partition is served and the nodes lead as many each (give or take one)."""
    deadline = time.monotonic() + timeout_s
    while True:
        held = leaders(dsn)
        counts = [sum(1 for n in held.values() if n == node) for node in range(1, nodes + 1)]
        if None not in held.values() and max(counts) - min(counts) <= 1:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the partitions never spread: {counts}")
        time.sleep(0.2)


def probe_groups(partitions: list[int], count: int) -> dict[int, str]:
    """A group name of each of ``partitions`` (an empty group: a commit creates it)."""
    from coordinator.routing import partition_for

    out: dict[int, str] = {}
    i = 0
    while len(out) < len(partitions):
        name = f"probe-{i}"
        p = partition_for(name, count)
        if p in partitions and p not in out:
            out[p] = name
        i += 1
    return out


def commit_ok(channels: Channels, bootstrap: str, group: str) -> bool:
    return bool(commits_ok(channels, bootstrap, [group]))


def commits_ok(channels: Channels, bootstrap: str, groups: list[str]) -> set[str]:
    """Of ``groups``, those a commit succeeded on: one FindCoordinator for all of them at
    ``bootstrap``, then a commit to each one's coordinator, all in flight at once."""
    import grpc

    from kip848.v1 import classic_group_pb2, classic_group_pb2_grpc, offsets_pb2, offsets_pb2_grpc

    finder = classic_group_pb2_grpc.ClassicGroupServiceStub(channels(bootstrap))
    try:
        found = finder.FindCoordinator(
            classic_group_pb2.FindCoordinatorRequest(key_type=0, coordinator_keys=groups),
            timeout=10,
        )
    except grpc.RpcError:
        return set()
    calls = []
    for c in found.coordinators:
        if c.error_code != 0:
            continue
        stub = offsets_pb2_grpc.OffsetServiceStub(channels(f"{c.host}:{c.port}"))
        request = offsets_pb2.OffsetCommitRequest(
            group_id=c.key,
            topics=[
                offsets_pb2.OffsetCommitRequest.Topic(
                    name="topic",
                    partitions=[
                        offsets_pb2.OffsetCommitRequest.Partition(
                            partition_index=0, committed_offset=1
                        )
                    ],
                )
            ],
        )
        calls.append((c.key, stub.OffsetCommit.future(request, timeout=5)))
    ok = set()
    for group, call in calls:
        try:
            resp = call.result()
        except grpc.RpcError:
            continue
        if all(p.error_code == 0 for t in resp.topics for p in t.partitions):
            ok.add(group)
    return ok


def sessions(ms: int) -> list[str]:
    """The seeded members' session timeout (``--session-ms``). They have no clients: with
    Kafka's 45 s every one of them (a million at 100,000 groups) is fenced 45 s after each
    load, a storm of expiries (a rebalance and a write each) running through the whole
    measurement instead of a fail-over's work; by default an hour. Live members heartbeat and
    are never fenced by a fail-over (docs/ha.md)."""
    return [
        "--set",
        f"group.consumer.session.timeout.ms={ms}",
        "--set",
        f"group.consumer.max.session.timeout.ms={max(ms, 60_000)}",
    ]


def bench_failover(
    groups: int, pg: Any, logs: Path | None = None, session_ms: int = SEEDED_SESSION_MS
) -> list[object]:
    dsn = pg.fresh_store_dsn()
    t0 = time.monotonic()
    records = seed(dsn, groups)
    seed_s = time.monotonic() - t0
    with tempfile.TemporaryDirectory(prefix="kip848-failover-") as tmp_name:
        tmp = Path(tmp_name)
        channels = Channels()
        nodes: list[Node] = []
        try:
            nodes.append(
                Node(["--store", dsn, "--node-id", "1", *sessions(session_ms)], tmp / "node1.log")
            )
            wait_serving(nodes[0].address, timeout_s=600)
            deadline = time.monotonic() + 600
            while any(leader != 1 for leader in leaders(dsn).values()):
                assert time.monotonic() < deadline, "node 1 never loaded everything"
                time.sleep(0.2)
            nodes.append(
                Node(["--store", dsn, "--node-id", "2", *sessions(session_ms)], tmp / "node2.log")
            )
            wait_serving(nodes[1].address, timeout_s=600)
            wait_balanced(dsn, 2)
            held = leaders(dsn)
            mine = sorted(p for p, n in held.items() if n == 1)
            probes = probe_groups(mine, len(held))
            bootstrap = nodes[1].address
            for group in probes.values():
                assert commit_ok(channels, nodes[0].address, group)
            load0 = load_avg()
            killed = time.monotonic()
            nodes[0].stop(signal.SIGKILL)
            waiting = {group: p for p, group in probes.items()}
            first_at: dict[int, float] = {}
            while waiting:  # a round of probes every 100 ms (the client shares the cores)
                assert time.monotonic() - killed < 600, "no fail-over"
                for group in commits_ok(channels, bootstrap, list(waiting)):
                    first_at[waiting.pop(group)] = time.monotonic() - killed
                time.sleep(0.1)
            load1 = load_avg()
            loads = load_seconds((tmp / "node2.log").read_text(), set(mine))
            texts = [(tmp / f"node{n}.log").read_text() for n in (1, 2)]
            stalls = sum(len(STALL.findall(t)) for t in texts)
            losses = sum(len(LOST_ALL.findall(t)) for t in texts)
            fenced = sum(t.count("member_fenced_session_timeout") for t in texts)
        finally:
            channels.close()
            for node in nodes:
                node.stop()
            if logs is not None:
                logs.mkdir(parents=True, exist_ok=True)
                for log in tmp.glob("node*.log"):
                    shutil.copy(log, logs / f"{groups}-{session_ms}-{log.name}")
    last = max(first_at.values())
    return [
        f"{groups:,}",
        f"{records:,}",
        f"{groups * len(mine) // len(held):,}",
        f"{session_ms / 1000:,.0f} s",
        f"{seed_s:.0f}",
        f"{min(first_at.values()):.1f}",
        f"{last:.1f}",
        f"{loads:.1f}",
        f"{stalls}, {losses}",
        f"{fenced:,}",
        f"<= {FAILOVER_TARGET_S:.0f}",
        "met" if last <= FAILOVER_TARGET_S else "NOT met",
        f"{load0:.1f}→{load1:.1f}",
    ]


STALL = re.compile(r"The coordinator did not run for")
"""A node's loop held for more than a second (its stall watch's warning)."""
LOST_ALL = re.compile(r"Node \d+ stops serving partitions")
"""A node that dropped every partition: its leases ran out before it renewed them."""


def load_seconds(log: str, partitions: set[int]) -> float:
    """What node 2's log says its loads of ``partitions`` took (the last load of each: after
    the kill): from the start of the first to the end of the last (two run at once)."""
    spans: dict[int, tuple[float, float]] = {}
    for m in re.finditer(
        r"^(\S+ \S+) INFO kip848.runtime: Loaded shard (\d+) at leader epoch \d+: .* in "
        r"([\d.]+) ms",
        log,
        re.MULTILINE,
    ):
        p = int(m.group(2))
        if p in partitions:
            end = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            spans[p] = (end - float(m.group(3)) / 1000, end)
    if not spans:
        return 0.0
    return max(e for _, e in spans.values()) - min(s for s, _ in spans.values())


def curve(rows: list[list[object]]) -> str:
    """The PostgreSQL rows against one node's, in words."""
    pg = {int(str(r[1])): r for r in rows if r[0] == "PostgreSQL"}
    if not {1, 2, 3} <= set(pg):
        return ""

    def ratio(n: int, column: int) -> str:
        return f"{_num(pg[n][column]) / _num(pg[1][column]):.2f}"

    def cores(n: int) -> str:  # heartbeats/s x server CPU per heartbeat
        return f"{_num(pg[n][2]) * _num(pg[n][3]) / 1e6:.2f}"

    return (
        f"Against one node on PostgreSQL: two nodes serve {ratio(2, 2)}x its heartbeats and "
        f"{ratio(2, 5)}x its commits, three {ratio(3, 2)}x and {ratio(3, 5)}x. The two cores cap "
        f"the curve: serving the heartbeats took the nodes {cores(1)}, {cores(2)} and "
        f"{cores(3)} cores with one, two and three nodes; PostgreSQL and the load generators "
        "had the rest. The server CPU per heartbeat moves little "
        f"({pg[1][3]} µs with one node, {pg[3][3]} µs with three): the nodes cost each other "
        "only the cores they share."
    )


def _num(cell: object) -> float:
    return float(str(cell).replace(",", ""))


def main() -> int:
    from pg import PostgresServer

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--groups", type=int, default=200, help="steady members (one per group)")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument(
        "--failover-groups", default="1000,10000,100000", help="comma-separated group counts"
    )
    parser.add_argument("--no-doc", action="store_true", help="print only")
    parser.add_argument(
        "--failover-only", action="store_true", help="skip the throughput rows (implies --no-doc)"
    )
    parser.add_argument("--logs", type=Path, help="keep the fail-over runs' node logs here")
    parser.add_argument(
        "--storm-groups",
        default="100000",
        help="comma-separated group counts run again with Kafka's 45 s session for the seeded "
        "members (every one fenced 45 s after each load)",
    )
    parser.add_argument(
        "--session-ms",
        type=int,
        default=SEEDED_SESSION_MS,
        help="the seeded members' session timeout in the fail-over runs (45000: Kafka's, "
        "every seeded member fenced 45 s after each load)",
    )
    args = parser.parse_args()
    started = time.monotonic()
    pg = PostgresServer(fsync=True).start()
    try:
        throughput = [] if args.failover_only else bench_throughput(args, pg)
        failover = []
        runs = [(int(x), args.session_ms) for x in args.failover_groups.split(",") if x]
        runs += [(int(x), KAFKA_SESSION_MS) for x in args.storm_groups.split(",") if x]
        for n, session_ms in runs:
            failover.append(bench_failover(n, pg, args.logs, session_ms))
            print(failover[-1], flush=True)
    finally:
        pg.stop()
    body = f"""## Several nodes on PostgreSQL (`python bench/cluster.py`)

{machine()}; PostgreSQL {pg.bin.parent.name} (local, `fsync` and `synchronous_commit` on), nodes,
PostgreSQL and the load generators (bench/loadgen/h2hb) all on the same cores: the machine caps
the curve. {args.groups} groups of one steady member each, {args.seconds:g} s per figure.

### Throughput with 1, 2 and 3 nodes, beside one node on SQLite

{table(["store", "nodes", "heartbeats/s", "server CPU µs/heartbeat", "heartbeat p99 ms", "commits/s", "server CPU µs/commit", "commit p99 ms", "load avg"], throughput)}

{curve(throughput)}

### Fail-over time against the groups the dead node led

Node 1 loads the store, node 2 takes half of the 50 partitions, node 1 is killed (`kill -9`);
the time until a commit succeeds on a group of each of its partitions (first and last), with
the default lease of {LEASE_MS / 1000:.0f} s, beside how long node 2 took to load them (its log: from
the start of the first load to the end of the last, two at a time). The seeded members have
no clients, so the nodes run with a session timeout of an hour: with Kafka's 45 s, every seeded
member is fenced 45 s after each load (a million at 100,000 groups), a storm of rebalances and
writes over the measurement instead of a fail-over's work. The last rows run with 45 s all the
same: whether the storm falls inside the run depends on how long node 1's load and the
balancing took (members fenced: the nodes' logs). Stalls: the nodes' warnings of a loop held
over a second; lost: a node that dropped every partition because its leases ran out before it
renewed them.

{table(["groups", "records", "groups on the dead node", "seeded members' session", "seed s", "first commit s", "all served s", "loading them s (node 2's log)", "stalls, lost (node logs)", "members fenced", "target", "", "load avg"], failover)}
"""
    publish("cluster", body, time.monotonic() - started, not (args.no_doc or args.failover_only))
    return 0


if __name__ == "__main__":
    sys.exit(main())
